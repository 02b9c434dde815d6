"""Routing: the (query modality, target modality) case and everything it fixes, with no LLM call.

Every keyword rule of V-Mem lives here (Appendix B): which questions want an image, which count
images (the hypo-caption gate), which aggregate over the whole history (no neighbours, wider k),
and which ask about a contradiction (conflict prompt). The retriever only reads the ``RoutePlan``.
Replace a rule by passing your own ``KeywordRules`` or subclassing ``ModalityRouter``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Optional, Pattern, Tuple

from llama_index.core.schema import QueryBundle

from . import schema
from .config import VMemConfig
from .store.base import Collection

_IMAGE_NOUNS = r"(?:images?|photos?|photographs?|pictures?|pics?|screenshots?|illustrations?)"
#: A plain word between a rule's keywords: letters of any script, or digits ("the 2023 photo").
_WORD = r"[^\W_]+"


#: A turn or sentence opening with a bare name and a comma, a full stop or an exclamation mark
#: ("Biscuit. He chose it."), where that word is not a reply's opener ("Yes,", "Funny,", "Booked."; "Ted."
#: is a name).
_BARE_NAME = (r"(?!(?:yes|no|ok|okay|sure|right|well|so|then|now|oh|ah|ha|wow|hmm|phew|yep|yeah|nope|thanks|great|good"
              r"|fine|cool|nice|lovely|perfect|brilliant|done|sorted|update|help|true|exactly|definitely|absolutely|actually"
              r"|honestly|anyway|apparently|finally|funny|sadly|luckily|hi|hello|hey|\w{3,}ed)\b)(?-i:[A-Z][a-z]+)[.,!]")
#: A person's or a thing's name in a stored round: a capitalised word after a lower-case word or a
#: comma on its line (a title may come between: "a guy called Dev", "Mrs Okafor"; the next speaker's
#: label is no name), or a bare name opening a turn or a sentence ("A beagle mix. Biscuit, the kids decided.").
_PROPER_NAME = rf"(?-i:[a-z,][^\S\n]+(?:(?:Mrs?|Ms|Dr)\.?\s+)?[A-Z][a-z]+)|(?:\A[^:\n]{{1,40}}:\s*|[.!]\s+){_BARE_NAME}"


#: "Where" asking for a place: opening the question or a clause, or after a word of telling or
#: remembering ("Do you remember where I put it?"); not after a noun ("any instance where Julian ...").
_ASKS_WHERE = r"(?:\A|[.?!,;:]\s*|\b(?:and|so|but|me|know|remember|recall|say|said|wonder|forgot|forget)\s+)where\b"


def _rx(pattern: str) -> Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


@dataclass(frozen=True)
class AnswerKind:
    """What a question asks for, and how a stored round that holds it reads: "How much was it?" asks
    for a price, held by a round with a number in it. A round two or three turns after the one naming
    the subject ("Booked! ... What did it come to?" / "612 pounds all in.") rarely says the subject
    again; the kind it holds says it answers."""

    #: The kind asked for, as ``RoutePlan.reasons`` names it: "a price".
    name: str
    #: Matched against the question.
    asks: Pattern[str]
    #: Matched against a stored round's text; None: a round holds it by replying to the round before
    #: it (``KeywordRules.asks``), whatever its words. "What did I say when you asked how far I could
    #: run?" is answered by "Just under three kilometres", which only its place in the thread marks.
    holds: Optional[Pattern[str]]


#: The ranking of the candidate rounds that hold what the question asks for, as a round's ranks name it.
HOLDS_ANSWER = "holds_answer"


@dataclass(frozen=True)
class KeywordRules:
    """The wording rules: regular expressions matched against the question text, or where a rule
    says so, against a stored round's."""

    #: Asks *which* image/photo/picture: "Which image shown on 2024-06-17 ...", "which of the photos".
    #: Up to two plain words may sit between (``which of the images``); "which city is in the
    #: picture" does not match, so a fact about a picture stays a text target.
    which_image: Pattern[str] = _rx(rf"\bwhich\s+(?:{_WORD}\s+){{0,2}}?{_IMAGE_NOUNS}\b")
    #: Counts images: "how many pictures of dogs ...". Image target, and no hypo-caption.
    count_images: Pattern[str] = _rx(rf"\bhow\s+many\s+(?:{_WORD}\s+){{0,2}}?{_IMAGE_NOUNS}\b")
    #: Asks to be shown an image: "show me the photo of ...".
    show_image: Pattern[str] = _rx(rf"\b(?:show|send|find)\s+(?:me\s+)?(?:(?:the|a|that|those|all)\s+)?(?:{_WORD}\s+){{0,2}}?{_IMAGE_NOUNS}\b")
    #: Aggregation: counting, enumeration, or a set of items ("what books has ...").
    aggregation: Pattern[str] = _rx(
        r"\bhow\s+many\b|\blist\b|\benumerate\b|\bin\s+what\s+ways\b|\bname\s+all\b|\bwhat\s+are\s+(?:all|some)\b"
        rf"|\bwhat\s+(?:{_WORD}\s+){{0,2}}?{_WORD}s\s+(?:has|have|did|does|do)\b"
    )
    #: Contradiction questions take the conflict prompt.
    conflict: Pattern[str] = _rx(r"\bconflict\w*|\bcontradict\w*|\binconsisten\w*")
    #: A stored round that ends by asking ("What did you name her?"): the round after it answers.
    #: Matched against the round's text, not the question's.
    asks: Pattern[str] = _rx(r"\?[\s\"'”’)]*\Z")
    #: A stored round that carries on the thread of the round before it: its first turn opens with a
    #: word that leans on what was said ("Ok,", "Done", "It", "they", "Found them!", a verb with its
    #: subject dropped, "Ordered ...", "The bill was ...", "A guy called Dev ...") or it points back
    #: ("that one", "the second one", "in the end"). Matched against the round's text, which opens
    #: with its first speaker's name.
    continues: Pattern[str] = _rx(
        r"\A[^:\n]{1,40}:\s*(?:(?:ok(?:ay)?|right|done|yes|yep|yeah|so|well|then|sure|sorted|update|phew|finally|the)\b"
        rf"|an?\s+\w+\s+(?:called|named)\b|[\d$£€]|{_BARE_NAME}"
        r"|(?:\w+ed|got|went|found|paid|bought|took|made)\b"
        r"|(?:[\w'-]+[\s,]+){0,2}?(?:it|it's|its|they|them|their|she|he|her|him|his|that|this|those|these|there)\b)"
        r"|\b(?:that|the\s+(?:first|second|third|last|other))\s+one\b|\bin\s+the\s+end\b"
    )
    #: What a question for words asks for, each that matches: a price, an outcome (a choice made, a
    #: thing found), where someone or something is from, a place, a person, a name, a time, what the
    #: user replied (``AnswerKind``). A name or a person is held by a capitalised word inside a line
    #: ("a guy called Dev", "Priya Shah from the Leeds office"; not the speaker's name opening the
    #: next turn) or a bare one opening a turn or a sentence ("Biscuit. He chose it.").
    answer_kinds: Tuple[AnswerKind, ...] = (
        AnswerKind("a price", _rx(r"\bhow\s+much\b|\bcost\b|\bprice\b|\bpa(?:y|id)\b|\bcharge\b|\bspen[dt]\b"
                                  r"|\bset\s+\w+\s+back\b|\bbill\b|\bfee\b|\bfare\b|\bc[oa]me\s+to\b"),
                   _rx(r"\d|[$£€]|\b(?:hundred|thousand|grand|quid|bucks|free)\b")),
        AnswerKind("an outcome", _rx(r"\b(?:did|do|will)\s+(?:I|we)\s+(?:\w+\s+)?(?:choose|pick|buy|get|take|hire|order|book|rent|decide"
                                     r"|settle|join|switch\s+to|find|leave|put|opt|sign\s+up|end\s+up|go\s+(?:with|for))\b"
                                     r"|\bin\s+the\s+end\b|\bturn(?:ed)?\s+up\b"),
                   _rx(r"\b(?:went|gone|going|go)\s+(?:with|for)\b|\bI'?m\s+taking\b"
                       r"|\b(?:chose|picked|decided|ordered|booked|bought|settled|found|signed|got|opted|sorted)\b"
                       r"|\b(?:that|the\s+(?:first|second|third|last|other|\w+))\s+ones?\b|\bin\s+the\s+end\b"
                       r"|\bit\s+is\b|\bwe'?ll\s+(?:do|go|take)\b")),
        AnswerKind("where from", _rx(rf"{_ASKS_WHERE}.*\b(?:from|born)\b"), _rx(r"(?-i:\b(?:from|in)[^\S\n]+[A-Z])")),
        AnswerKind("a place", _rx(_ASKS_WHERE),
                   _rx(r"(?-i:\b(?:in|at|on|under|inside|behind|near|by)[^\S\n]+(?:the|a|my|our|his|her|[A-Z]))")),
        AnswerKind("a person", _rx(r"\bwho(?:'s|m)?\b"), _rx(_PROPER_NAME)),
        AnswerKind("a name", _rx(r"\bnam(?:e|ed|ing)\b|\bcall(?:ed)?\b"), _rx(_PROPER_NAME)),
        AnswerKind("a time", _rx(r"\bwhen\b(?!\s+(?:you|I|we|he|she|they)\s+(?:asked|said|told|mentioned)\b)"  # not "when you asked"
                                 r"|\bwhat\s+(?:day|date|time)\b"),
                   _rx(r"\b\d{1,2}(?:st|nd|rd|th)\b|\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b|\b(?:tomorrow|tonight)\b"
                       r"|\b(?:january|february|march|april|may|june|july|august|september|october|november|december)\b"
                       r"|\bnext\s+(?:week|month)\b|\b\d{1,2}(?::\d\d)?\s*(?:am|pm)\b")),
        AnswerKind("a reply", _rx(r"\b(?:did|do)\s+(?:I|we)\s+(?:\w+\s+)?(?:say|tell|answer|reply)\b|\byou\s+asked\b"), None),
    )


class Case(str, Enum):
    TEXT_TO_TEXT = "text->text"
    TEXT_TO_IMAGE = "text->image"
    IMAGE_TEXT_TO_TEXT = "image+text->text"
    IMAGE_TEXT_TO_IMAGE = "image+text->image"


class Anchor(str, Enum):
    """What a signal searches with."""

    QUERY = "query"  # the raw question text
    HYPO_CAPTION = "hypo_caption"  # an LLM-written caption of the wanted image
    ENRICHED = "enriched"  # question text plus keywords a vision LLM read off the attached image
    QUERY_IMAGE = "query_image"  # the attached image's pixels
    QUERY_IMAGE_CAPTION = "query_image_caption"  # the attached image, known only by its caption


@dataclass(frozen=True)
class Signal:
    """One way of scoring units: a named vector of one collection, searched with one anchor."""

    name: str
    collection: Collection
    vector: str
    anchor: Anchor
    #: Only units spoken in these roles (``schema.Role`` values) are searched; None: every unit.
    roles: Optional[Tuple[str, ...]] = None

    @property
    def is_visual(self) -> bool:
        return self.vector == schema.VISUAL


@dataclass(frozen=True)
class RoutePlan:
    """Everything a case fixes; the retriever executes it and decides nothing."""

    case: Case
    signals: Tuple[Signal, ...]
    k: int
    neighbor_window: int
    #: Image targets: only rounds holding an image, or next to one within this many rounds, are
    #: searched and returned (Appendix B's image-round filter); None turns the filter off.
    image_filter_window: Optional[int]
    #: Return the image units of the top rounds (image targets).
    return_images: bool
    #: ``"answer"`` or ``"conflict"``.
    answer_prompt: str
    #: Rank rounds (by their best unit) rather than bare units.
    round_level: bool
    #: Share of the score of the round before it that a candidate image round carries
    #: (``fusion.carry_forward``): text->text only. A query image (pixels or caption) matches the
    #: photo round directly, and an image target is searched through its caption.
    follow_up_weight: float
    #: Share of the score of the round before it that a candidate round carries where that round
    #: ends by asking (``asks``), past it if need be: text targets only, where the answer is words.
    answer_weight: float
    #: Which stored rounds end by asking (``KeywordRules.asks``).
    asks: Pattern[str]
    #: What the question asks for (``KeywordRules.answer_kinds``), where ``answer_weight`` is on and
    #: ``config.answer_reach`` is not 0: a round carrying on a thread (it answers the round before,
    #: or ``continues`` it) that holds one of these kinds carries the best of the ``answer_reach``
    #: rounds before it and ranks in one more list, of such rounds. "Where did I find it?" asks for
    #: an outcome ("Got it!") or a place ("in the flour jar").
    answer_kinds: Tuple[AnswerKind, ...]
    #: Which stored rounds carry on the thread of the round before them (``KeywordRules.continues``).
    continues: Pattern[str]
    #: The signal whose rank settles a tie in fused score before the earlier round does: the
    #: question's own pixels, where attached. "Seen this before?" with a photo ties the photo's own
    #: round (visual 1st, words 2nd) with a round its few words happen to match (words 1st, visual
    #: 2nd); the picture is what the question is about.
    tie_break: Optional[str]
    counting: bool
    aggregation: bool
    config: VMemConfig
    reasons: Tuple[str, ...] = field(default=())

    @property
    def anchors(self) -> Tuple[Anchor, ...]:
        return tuple(dict.fromkeys(s.anchor for s in self.signals))


def _text_signals(anchor: Anchor, replies: bool, roles: Optional[Tuple[str, ...]] = None) -> Tuple[Signal, ...]:
    """Text units by meaning, by their words, and, with ``replies``, by their words read after the
    exchange before them: a reply found by what it answers (searched where the memory was built with
    ``reply_context``). A question for words wants replies; a picture asked for is found by what was
    said with it and its caption, and a unit returned bare (the unit-level ablation) by its own words.

    ``roles``: the speaker a question for words names (``named_speaker``). Only the word searches
    keep to their units: the words say whose fact it is, while the search by meaning still finds the
    round where the other asked and the speaker answered (see docs/configuration.md)."""
    context = (Signal("text_context_bm25", Collection.TEXT, schema.TEXT_CONTEXT_SPARSE, anchor, roles),) if replies else ()
    return (
        Signal("text_dense", Collection.TEXT, schema.TEXT_DENSE, anchor),
        Signal("text_bm25", Collection.TEXT, schema.TEXT_SPARSE, anchor, roles),
    ) + context


def _caption_signals(anchor: Anchor) -> Tuple[Signal, ...]:
    return (
        Signal("caption_dense", Collection.IMAGE, schema.TEXT_DENSE, anchor),
        Signal("caption_bm25", Collection.IMAGE, schema.TEXT_SPARSE, anchor),
    )


def _visual_signals(has_pixels: bool) -> Tuple[Signal, ...]:
    """The query image by its pixels, or by its caption when it came without pixels (never faked)."""
    if has_pixels:
        return (Signal("visual", Collection.IMAGE, schema.VISUAL, Anchor.QUERY_IMAGE),)
    return (
        Signal("visual_by_caption_dense", Collection.IMAGE, schema.TEXT_DENSE, Anchor.QUERY_IMAGE_CAPTION),
        Signal("visual_by_caption_bm25", Collection.IMAGE, schema.TEXT_SPARSE, Anchor.QUERY_IMAGE_CAPTION),
    )


#: The roles a speaker's units are stored under: a voice note is the user's.
SPEAKER_ROLES = {schema.Role.USER: (schema.Role.USER.value, schema.Role.AUDIO.value),
                 schema.Role.ASSISTANT: (schema.Role.ASSISTANT.value,)}


def named_speaker(question: str, config: VMemConfig) -> Optional[Tuple[str, schema.Role]]:
    """The one speaker of the memory (``config.user_name``, ``config.assistant_name``) the question
    names, as ``(name, role)``; None where it names neither, or both."""
    speakers = ((config.user_name, schema.Role.USER), (config.assistant_name, schema.Role.ASSISTANT))
    named = [(name, role) for name, role in speakers if _names(question, name)]
    return named[0] if len(named) == 1 else None


def _names(question: str, name: str) -> bool:
    """Whether the question says ``name``, as a whole word with its case, or its first word ("Elias"
    for "Elias Vance"): "Will" the user is not "will". A blank name is no one's."""
    if not schema.visible(name):
        return False
    forms = dict.fromkeys((name.strip(), name.split()[0]))
    return any(re.search(rf"(?<!\w){re.escape(form)}(?!\w)", question) for form in forms)


class ModalityRouter:
    """Reads a ``QueryBundle`` (text, optional ``image_path``) and returns its ``RoutePlan``."""

    def __init__(self, rules: Optional[KeywordRules] = None) -> None:
        self.rules = rules or KeywordRules()

    def target_is_image(self, question: str) -> bool:
        r = self.rules
        return bool(r.which_image.search(question) or r.count_images.search(question) or r.show_image.search(question))

    def answer_kinds(self, question: str) -> Tuple[AnswerKind, ...]:
        return tuple(kind for kind in self.rules.answer_kinds if kind.asks.search(question))

    def route(self, query: QueryBundle, config: VMemConfig) -> RoutePlan:
        question = query.query_str
        has_pixels = bool(query.image_path)
        has_image = has_pixels or bool(schema.query_image_caption(query))
        wants_image = self.target_is_image(question)
        counting = bool(self.rules.count_images.search(question))
        aggregation = config.aggregation_enabled and bool(self.rules.aggregation.search(question))
        conflict = bool(self.rules.conflict.search(question))
        reasons = [
            f"query modality: {'image+text' if has_image else 'text'} ({'image attached' if has_image else 'no image'})",
            f"target modality: {'image' if wants_image else 'text'} (keyword rule)",
        ]
        hypo = Anchor.HYPO_CAPTION if config.anchors else Anchor.QUERY
        enriched = Anchor.ENRICHED if config.anchors else Anchor.QUERY
        if not config.routing:
            reasons.append("routing off (ablation): every signal, raw query, no filter or aggregation")
            aggregation = wants_image = counting = False
        replies = config.round_level and not wants_image  # a question for words, answered by whole rounds
        speaker = named_speaker(question, config) if config.routing and not wants_image else None
        roles = SPEAKER_ROLES[speaker[1]] if speaker else None
        if speaker:
            reasons.append(f"names {speaker[0]} ({speaker[1].value}): the word searches keep to {speaker[0]}'s own units")
        if has_image and wants_image:
            case = Case.IMAGE_TEXT_TO_IMAGE
            signals = _visual_signals(has_pixels)
        elif has_image:
            case = Case.IMAGE_TEXT_TO_TEXT
            signals = _visual_signals(has_pixels) + _text_signals(enriched, replies, roles)
        elif wants_image:
            case = Case.TEXT_TO_IMAGE
            gate = counting and config.hypo_caption_counting_gate
            if gate:
                reasons.append("counting question: hypo-caption skipped")
            signals = _text_signals(Anchor.QUERY, replies) + _caption_signals(Anchor.QUERY if gate else hypo)
        else:
            case = Case.TEXT_TO_TEXT
            signals = _text_signals(Anchor.QUERY, replies, roles)
        if not config.routing:
            signals = _text_signals(Anchor.QUERY, replies) + _caption_signals(Anchor.QUERY) + (_visual_signals(has_pixels) if has_image else ())
        follow_up_weight = config.follow_up_weight if case is Case.TEXT_TO_TEXT and config.round_level else 0.0
        if follow_up_weight:
            reasons.append("text->text: image rounds carry a share of the round before them")
        answer_weight = config.answer_weight if replies else 0.0
        if answer_weight:
            reasons.append("text target: a round answering the question the round before it asks carries a share of it")
        kinds = self.answer_kinds(question) if answer_weight and config.answer_reach else ()
        if kinds:
            reasons.append(f"asks for {' or '.join(k.name for k in kinds)}: a round carrying on a thread that holds one carries "
                           f"the best of the {config.answer_reach} rounds before it and ranks in one more list")
        if aggregation:
            reasons.append("aggregation question: no neighbours, k widened")
        if conflict:
            reasons.append("conflict question: conflict prompt")
        return RoutePlan(
            case=case,
            signals=signals,
            k=max(config.aggregation_k, config.k) if aggregation else config.k,
            neighbor_window=0 if aggregation or not config.round_level else config.neighbor_window,
            image_filter_window=config.image_filter_window if wants_image else None,
            return_images=wants_image,
            answer_prompt="conflict" if conflict else "answer",
            round_level=config.round_level,
            follow_up_weight=follow_up_weight,
            answer_weight=answer_weight,
            asks=self.rules.asks,
            answer_kinds=kinds,
            continues=self.rules.continues,
            tie_break=next((s.name for s in signals if s.anchor is Anchor.QUERY_IMAGE), None),
            counting=counting,
            aggregation=aggregation,
            config=config,
            reasons=tuple(reasons),
        )
