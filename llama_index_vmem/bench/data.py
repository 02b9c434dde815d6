"""Benchmark loaders: Mem-Gallery dialogues and LoCoMo conversations as one shape.

Each conversation becomes its own memory. An image whose file is missing (the released data has
captions only) becomes a caption-only unit, and a question image is then represented by its
caption; ``image_modes`` records which image ran which way, so the report never mixes them silently.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..node_parser import round_input_from_dict, round_spans, round_text

logger = logging.getLogger(__name__)

PIXELS, CAPTION, MIXED = "pixels", "caption", "mixed"
_TURN_ID = re.compile(r"D(\d+):(\d+)")
#: LoCoMo category 5 (adversarial) has no answer in the conversation and is excluded.
LOCOMO_EXCLUDED = {5}
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass
class BenchImage:
    image_id: str
    caption: str
    path: Optional[Path] = None
    #: Which side of the exchange shared it (``user`` or ``assistant``).
    role: str = "user"


@dataclass
class BenchRound:
    key: str
    session_id: str
    timestamp: str
    user: str
    assistant: str
    images: List[BenchImage] = field(default_factory=list)
    #: The benchmark's own ids covered by this round (Mem-Gallery: the round; LoCoMo: its turns).
    turn_ids: List[str] = field(default_factory=list)
    #: LoCoMo: the turns whose text each span carries (``user``, ``assistant``, an image id).
    span_turn_ids: Dict[str, List[str]] = field(default_factory=dict)

    @functools.cached_property
    def text(self) -> str:
        """The round as V-Mem's context renders it (role labels; images folded in by id and caption)."""
        return round_text(round_spans(round_input_from_dict(f"round {self.key}", self.as_round_dict()), self.key))

    def ids_of(self, span: Optional[str] = None) -> List[str]:
        """The benchmark ids whose text ``span`` carries: a context holding one span of a LoCoMo
        round holds those turns only; a span not listed (any Mem-Gallery span) stands for the round."""
        return self.span_turn_ids.get(span, self.turn_ids) if span else self.turn_ids

    def as_round_dict(self) -> Dict[str, Any]:
        """The ``VMemIndex.add_rounds`` input for this round."""
        return {
            "round_key": self.key,
            "session_id": self.session_id,
            "timestamp": self.timestamp,
            "user": self.user,
            "assistant": self.assistant,
            "images": [
                {"image_id": i.image_id, "caption": i.caption, "role": i.role, **({"path": str(i.path)} if i.path else {})}
                for i in self.images
            ],
        }


@dataclass
class BenchQuestion:
    qid: str
    question: str
    category: str
    gold: List[str]
    answer: str
    image_path: Optional[Path] = None
    image_caption: Optional[str] = None

    def __post_init__(self) -> None:
        """Refused when the data is read, naming the question, not when it is asked after every build."""
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"question {self.qid} has no question text: {self.question!r:.80}")


@dataclass
class BenchConversation:
    name: str
    benchmark: str
    rounds: List[BenchRound]
    questions: List[BenchQuestion]
    #: Evidence ids that were malformed in the data (repaired or dropped), for the report.
    malformed_evidence: int = 0
    speakers: Tuple[str, str] = ("user", "assistant")

    @property
    def image_modes(self) -> Dict[str, List[str]]:
        """Image ids (a question's image as ``<qid>:question``) by the mode they run in: ``pixels``
        where the file was found, ``caption`` where it was not (or the data has none). Read from the
        questions as they are now, so a run cut short by ``--limit`` reports only what it ran."""
        modes: Dict[str, List[str]] = {PIXELS: [], CAPTION: []}
        for r in self.rounds:
            for i in r.images:
                modes[PIXELS if i.path else CAPTION].append(i.image_id)
        for q in self.questions:
            if q.image_path or q.image_caption:
                modes[PIXELS if q.image_path else CAPTION].append(f"{q.qid}:question")
        return modes

    @property
    def image_mode(self) -> str:
        """``pixels`` or ``caption`` where every image runs one way, else ``mixed``."""
        used = [mode for mode, ids in self.image_modes.items() if ids]
        return used[0] if len(used) == 1 else MIXED if used else CAPTION

    @functools.cached_property
    def by_key(self) -> Dict[str, BenchRound]:
        """Rounds by key, built once: every scored question looks rounds up by key."""
        return {r.key: r for r in self.rounds}

    def turn_ids(self, round_keys: List[str]) -> List[str]:
        """Expand round keys to the benchmark's ids, in order."""
        return self.span_ids((key, None) for key in round_keys)

    def span_ids(self, spans: Iterable[Tuple[str, Optional[str]]]) -> List[str]:
        """Expand ``(round key, span)`` pairs (``None``: the whole round) to the benchmark's ids, in order."""
        return [t for key, span in spans if key in self.by_key for t in self.by_key[key].ids_of(span)]


def _image_path(raw: Optional[str], json_path: Path, image_root: Optional[Path]) -> Optional[Path]:
    if not raw:
        return None
    candidates = [(json_path.parent / raw).resolve()]
    if image_root is not None:
        parts = Path(raw).parts
        candidates += [image_root / Path(*parts[-2:]), image_root / parts[-1]]
    return next((p for p in candidates if p.is_file()), None)


def load_memgallery(path: Path, image_root: Optional[Path] = None) -> BenchConversation:
    """One Mem-Gallery dialogue file: rounds ``D1:3``, images, and the human-annotated QAs.

    Fields are read per image as the benchmark's harness reads them: a caption or file a round
    does not list is empty, so no image is dropped for a short list; an image with neither
    pixels nor a caption carries nothing to retrieve and is left out with a warning."""
    path = Path(path)
    data = json.loads(path.read_text())
    rounds: List[BenchRound] = []
    for session in data["multi_session_dialogues"]:
        for d in session["dialogues"]:
            images = []
            for n, image_id in enumerate(d.get("image_id") or []):
                caption, file = _nth(d.get("image_caption"), n) or "", _image_path(_nth(d.get("input_image"), n), path, image_root)
                if file is None and not caption.strip():
                    logger.warning("%s: image %s has neither a file nor a caption; left out", path.name, image_id)
                    continue
                images.append(BenchImage(image_id=image_id, caption=caption, path=file))
            rounds.append(BenchRound(d["round"], session["session_id"], session.get("date", ""), d.get("user", ""),
                                     d.get("assistant", ""), images, [d["round"]]))
    questions = []
    malformed = 0
    for i, qa in enumerate(data.get("human-annotated QAs", [])):
        gold, bad = parse_evidence(qa.get("clue"))
        malformed += bad
        questions.append(BenchQuestion(
            qid=f"{path.stem}#{i}", question=qa["question"], category=qa["point"], gold=gold,
            answer=str(qa.get("answer", "")), image_path=_image_path(qa.get("question_image"), path, image_root),
            image_caption=qa.get("image_caption"),
        ))
    name = data.get("character_profile", {}).get("name", "user")
    conv = BenchConversation(path.stem, "memgallery", rounds, questions, malformed, speakers=(f"user ({name})", "assistant"))
    if conv.image_mode == MIXED:
        logger.warning("%s: %d images have no file and run as captions: %s", path.name, len(conv.image_modes[CAPTION]),
                       ", ".join(conv.image_modes[CAPTION]))
    return conv


def _nth(values: Any, n: int) -> Any:
    """The ``n``-th entry of a per-image list field, or None where the list is absent or short."""
    return values[n] if isinstance(values, list) and n < len(values) else None


def parse_evidence(raw: Any) -> Tuple[List[str], int]:
    """Ids from a question's evidence list (LoCoMo ``evidence``, Mem-Gallery ``clue``) and how many
    were malformed, tolerating ``"D8:6; D9:17"``, ``"D:11:26"`` and ``"D"``; none (``null``) is an
    empty list, and one id given bare rather than in a list is read and counted as malformed."""
    if not raw:
        return [], 0
    bare = not isinstance(raw, list)
    ids: List[str] = []
    malformed = int(bare)
    for item in [raw] if bare else raw:
        text = str(item)
        found = _TURN_ID.findall(text.replace("D:", "D"))
        if not found or not _TURN_ID.fullmatch(text.strip()):
            malformed += 1
        ids.extend(f"D{s}:{t}" for s, t in found)
    return ids, malformed


def load_locomo(path: Path) -> List[BenchConversation]:
    """LoCoMo conversations: a round is a speaker-A turn plus the speaker-B turns after it (same session)."""
    out = []
    for sample in json.loads(Path(path).read_text()):
        conv = sample["conversation"]
        speaker_a, speaker_b = conv["speaker_a"], conv["speaker_b"]
        rounds: List[BenchRound] = []
        sessions = sorted((int(k.split("_")[1]), v) for k, v in conv.items() if re.fullmatch(r"session_\d+", k))
        for number, turns in sessions:
            when = conv.get(f"session_{number}_date_time", "")
            current: Optional[BenchRound] = None
            for turn in turns:
                text = f"{turn['speaker']}: {turn['text']}"
                is_a = turn["speaker"] == speaker_a
                if current is None or is_a:  # a session opening with speaker B: B's turns form a round of their own
                    current = BenchRound(turn["dia_id"], f"D{number}", when, "", "", [], [])
                    rounds.append(current)
                span = "user" if is_a else "assistant"
                if is_a:
                    current.user = text
                else:
                    current.assistant = "\n".join(t for t in (current.assistant, text) if t)
                current.turn_ids.append(turn["dia_id"])
                current.span_turn_ids.setdefault(span, []).append(turn["dia_id"])
                if turn.get("blip_caption"):
                    image = BenchImage(f"{turn['dia_id']}:IMG", turn["blip_caption"], role=span)
                    current.images.append(image)
                    current.span_turn_ids[image.image_id] = [turn["dia_id"]]
        questions = []
        malformed = 0
        for i, qa in enumerate(sample["qa"]):
            if qa["category"] in LOCOMO_EXCLUDED:
                continue
            gold, bad = parse_evidence(qa.get("evidence"))
            malformed += bad
            questions.append(BenchQuestion(f"{sample['sample_id']}#{i}", qa["question"], LOCOMO_CATEGORIES[qa["category"]],
                                           gold, str(qa.get("answer", ""))))
        out.append(BenchConversation(sample["sample_id"], "locomo", rounds, questions, malformed, (speaker_a, speaker_b)))
    return out
