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
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, Dict, Iterable, List, Optional, Set, Tuple

from ..node_parser import round_input_from_dict, round_spans, round_text
from .legend import NOT_ASKED_ADVERSARIAL, NOT_ASKED_LIMIT
from .metrics import count_tokens

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


@dataclass(frozen=True)
class EvidencePiece:
    """The text of one benchmark id in one span of a round (``user``, ``assistant``, an image id);
    a stock unit is a span, so a context can hold part of an id's text."""

    span: str
    evidence_id: str
    text: str


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
    #: LoCoMo: each turn's text in the span that carries it. Empty where every span carries every
    #: id of the round (Mem-Gallery, whose evidence is the round).
    turn_pieces: List[EvidencePiece] = field(default_factory=list)

    @functools.cached_property
    def text(self) -> str:
        """The round as V-Mem's context renders it (role labels; images folded in by id and caption)."""
        return round_text(round_spans(round_input_from_dict(f"round {self.key}", self.as_round_dict()), self.key))

    @functools.cached_property
    def spans(self) -> Dict[str, str]:
        """The round split as stock units split it: its user line and reply (where not blank) and
        each picture's caption, by span name."""
        lines = {span: text for span, text in (("user", self.user), ("assistant", self.assistant)) if text.strip()}
        return lines | {i.image_id: i.caption for i in self.images}

    @functools.cached_property
    def pieces(self) -> List[EvidencePiece]:
        """The round's text as evidence: which id each span's text belongs to."""
        if self.turn_pieces:
            return self.turn_pieces
        return [EvidencePiece(span, id_, text) for span, text in self.spans.items() for id_ in self.turn_ids]

    @functools.cached_property
    def _piece_tokens(self) -> List[int]:
        return [max(1, count_tokens(p.text)) for p in self.pieces]  # a picture with no caption still counts

    def evidence_shares(self, spans: Optional[AbstractSet[str]] = None) -> Dict[str, float]:
        """The benchmark ids a context holding ``spans`` of this round delivers, each with the share
        of its text (in tokens) those spans carry; ``None``: the whole round.

        A context holding a Mem-Gallery user line without the reply or picture holds that part of
        the round's evidence, not all of it, as a LoCoMo context holding Ann's line holds none of Bob's."""
        if spans is None:
            return dict.fromkeys(self.turn_ids, 1.0)
        unknown = set(spans) - set(self.spans)
        if unknown:  # a unit the scorer cannot place would silently score nothing
            raise ValueError(f"round {self.key} has no span {', '.join(sorted(unknown))}")
        total: Counter = Counter()
        carried: Counter = Counter()
        for piece, tokens in zip(self.pieces, self._piece_tokens):
            total[piece.evidence_id] += tokens
            carried[piece.evidence_id] += tokens if piece.span in spans else 0
        return {id_: carried[id_] / total[id_] for id_ in total if carried[id_]}

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
    #: The user's and the assistant's names, as the data gives them ("" where it gives none): V-Mem
    #: is told them (``VMemConfig.user_name``, ``assistant_name``), as an app knows who is talking.
    speakers: Tuple[str, str] = ("", "")
    #: Questions in the data that are not asked, counted by (reason, category), for the report.
    not_asked: Counter = field(default_factory=Counter)

    def limit_questions(self, limit: int) -> None:
        """Keep the first ``limit`` questions; the rest are counted as not asked, with why."""
        reason = NOT_ASKED_LIMIT.format(limit=limit)
        self.not_asked.update((reason, q.category) for q in self.questions[limit:])
        self.questions = self.questions[:limit]

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
        return [t for key in round_keys if key in self.by_key for t in self.by_key[key].turn_ids]

    def delivered(self, spans: Iterable[Tuple[str, Optional[str]]]) -> Dict[str, float]:
        """The evidence a context holding ``(round key, span)`` pairs delivers (span ``None``: the
        whole round), each id with the share of its text in that context."""
        whole: Set[str] = set()
        parts: Dict[str, Set[str]] = defaultdict(set)
        for key, span in spans:
            if key not in self.by_key:
                continue
            if span is None:
                whole.add(key)
            else:
                parts[key].add(span)
        out: Dict[str, float] = {}
        shares = [self.by_key[key].evidence_shares() for key in whole]
        shares += [self.by_key[key].evidence_shares(parts[key]) for key in parts.keys() - whole]
        for id_, share in (item for s in shares for item in s.items()):
            out[id_] = max(share, out.get(id_, 0.0))  # an id two rounds claim (repeated ids in the data) keeps its best
        return out


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
                if not isinstance(image_id, str) or not image_id.strip() or image_id in (i.image_id for i in images):
                    # V-Mem would name or rename it, and the scorer could not place its unit
                    raise ValueError(f"round {d['round']}: image {n + 1} needs an image_id of its own, got {image_id!r}")
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
    name = data.get("character_profile", {}).get("name", "")
    conv = BenchConversation(path.stem, "memgallery", rounds, questions, malformed, speakers=(name, ""))
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
                current.turn_pieces.append(EvidencePiece(span, turn["dia_id"], text))
                if turn.get("blip_caption"):
                    image = BenchImage(f"{turn['dia_id']}:IMG", turn["blip_caption"], role=span)
                    current.images.append(image)
                    current.turn_pieces.append(EvidencePiece(image.image_id, turn["dia_id"], image.caption))
        questions = []
        malformed = 0
        not_asked: Counter = Counter()
        for i, qa in enumerate(sample["qa"]):
            if qa["category"] in LOCOMO_EXCLUDED:
                not_asked[NOT_ASKED_ADVERSARIAL, LOCOMO_CATEGORIES[qa["category"]]] += 1
                continue
            gold, bad = parse_evidence(qa.get("evidence"))
            malformed += bad
            questions.append(BenchQuestion(f"{sample['sample_id']}#{i}", qa["question"], LOCOMO_CATEGORIES[qa["category"]],
                                           gold, str(qa.get("answer", ""))))
        out.append(BenchConversation(sample["sample_id"], "locomo", rounds, questions, malformed, (speaker_a, speaker_b),
                                     not_asked))
    return out
