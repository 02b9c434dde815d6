"""How retrieved context reaches the answering model (DeliverMem's delivery stage).

* ``text``: V-Mem's own delivery. Blocks of rounds in conversation order, each headed by when it
  was seen and its session and rounds; images appear as their id and caption.
* ``pixels``: the same text, and after each round the original pixels of its images as
  ``ImageBlock``s (D1), each id stamped visibly into a corner of the pixels and named in the text
  (D2), under the block's time header (D3). The query's own image is delivered too, labelled as
  the attachment. An image budget caps how many images and how large; what it drops is said, and
  so is an image whose file can no longer be read.

Labelled, downscaled copies are cached on disk by content, so originals are never touched.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import logging
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.schema import ImageNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.utils import get_tokenizer
from PIL import Image, ImageDraw, ImageFont
from pydantic import PrivateAttr

from . import schema
from .errors import VMemInputError
from .images import open_rgb, touch, write_atomically
from .messages import local_query
from .postprocessor import BLOCK_ROUND_IDS, NeighborRoundPostprocessor, is_own, splice
from .retriever import EXPLAIN_KEY

if TYPE_CHECKING:
    from .round_memory import RoundMemory

logger = logging.getLogger(__name__)

BLOCK_SEPARATOR = "\n\n---\n\n"
#: A separator delivery put between blocks: followed by a header (``schema.block_header``'s first words).
_BLOCK_START = re.compile(re.escape(BLOCK_SEPARATOR) + r"(?=\[(?:seen|session|rounds?) )")
ATTACHMENT_LABEL = "ATTACHED"
ContentBlock = Union[TextBlock, ImageBlock]
#: Model names that take images (OpenAI, Gemini, Claude, Qwen-VL, LLaVA, ...): ``pixels`` is their default.
_VISION_MODELS = re.compile(r"gpt-4o|gpt-4\.1|gpt-5|\bo[134]\b|vision|gemini|claude-3|claude-(sonnet|opus|haiku)|"
                            r"-vl|vl-|\dvl\b|llava|pixtral|llama-?3\.2.*vision|llama-4", re.IGNORECASE)
#: Of those, the OpenAI reasoning models that take text only: an image sent to them fails the call.
_TEXT_ONLY_MODELS = re.compile(r"\bo1-(mini|preview)|\bo3-mini", re.IGNORECASE)


class DeliveryMode(str, Enum):
    TEXT = "text"
    PIXELS = "pixels"


def default_mode(llm: Optional[LLM]) -> DeliveryMode:
    """``pixels`` for a model known to see images, else ``text``; pass a mode to decide yourself."""
    name = getattr(getattr(llm, "metadata", None), "model_name", "") or ""
    sees_images = _VISION_MODELS.search(name) and not _TEXT_ONLY_MODELS.search(name)
    return DeliveryMode.PIXELS if sees_images else DeliveryMode.TEXT


@dataclass(frozen=True)
class ImageBudget:
    """At most ``max_images`` remembered images per answer, each at most ``max_side`` pixels on its
    long side. The user's attached image comes on top: set an API's per-request limit less one."""

    max_images: int = 8
    max_side: int = 1024

    def __post_init__(self) -> None:
        """Checked here, not at answer time: a bad value would fail only then, or lift the cap."""
        for name, least in (("max_images", 0), ("max_side", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise VMemInputError("image_budget", f"'{name}' must be a whole number >= {least}, got {value!r}")


#: Tokens an image is counted as (LlamaIndex ``Memory``'s ``image_token_size_estimate`` default).
IMAGE_TOKENS = 256


def content_tokens(blocks: Sequence[ContentBlock], tokenizer: Optional[Callable[[str], List[Any]]] = None) -> int:
    """Delivered content's size as LlamaIndex's ``Memory`` estimates it: the text's tokens (by
    ``tokenizer``, default LlamaIndex's global one, as ``Memory``'s is), and a fixed estimate per image."""
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    return len((tokenizer or get_tokenizer())(text)) + IMAGE_TOKENS * sum(isinstance(b, ImageBlock) for b in blocks)


def merge_text(blocks: Sequence[ContentBlock]) -> List[ContentBlock]:
    """Adjacent text blocks joined, empty ones dropped, so text delivery is exactly one text block."""
    out: List[ContentBlock] = []
    for block in blocks:
        if isinstance(block, TextBlock) and out and isinstance(out[-1], TextBlock):
            out[-1] = TextBlock(text=out[-1].text + block.text)
        elif not (isinstance(block, TextBlock) and not block.text):
            out.append(block)
    return out


def prompt_messages(prompt: BasePromptTemplate, context: Sequence[ContentBlock], llm: Optional[LLM] = None,
                    **variables: Any) -> List[ChatMessage]:
    """``prompt`` as the chat messages to send, with delivered content, images and all, where its one
    ``{context}`` is. A text template is one user message, a ``ChatPromptTemplate`` its own messages
    (a selector picks by ``llm``); templates format text only, so the content goes between the text
    before and after that spot."""
    sentinel = "\x00vmem-context\x00"

    def filled(block: ContentBlock) -> List[ContentBlock]:
        if not (isinstance(block, TextBlock) and sentinel in block.text):
            return [block]
        before, _, after = block.text.partition(sentinel)
        return [TextBlock(text=before), *context, TextBlock(text=after)]

    return [message.model_copy(update={"blocks": merge_text([part for block in message.blocks for part in filled(block)])})
            for message in prompt.format_messages(llm=llm, context=sentinel, **variables)]


def messages_tokens(messages: Sequence[ChatMessage]) -> int:
    """Chat messages' size, each counted as ``content_tokens`` counts delivered content."""
    return sum(content_tokens(m.blocks) for m in messages)


def block_groups(nodes: Sequence[NodeWithScore]) -> List[List[NodeWithScore]]:
    """Neighbour blocks, each with the image nodes after it: what is kept or dropped together."""
    groups: List[List[NodeWithScore]] = []
    for n in nodes:
        if isinstance(n.node, ImageNode) and groups:
            groups[-1].append(n)
        else:
            groups.append([n])
    return groups


def fit(nodes: Sequence[NodeWithScore], tokens: int, pixels: bool) -> List[NodeWithScore]:
    """The blocks (each with the image nodes after it) whose estimated size fits ``tokens``: the
    least relevant go first, the rest keep their order, and the best always stays (``head`` cuts it
    if it alone is too long). A block counts its text and separator, and in pixels delivery
    ``IMAGE_TOKENS`` for each of its pictures."""
    groups = block_groups(nodes)
    separator = len(get_tokenizer()(BLOCK_SEPARATOR))

    def size(group: List[NodeWithScore]) -> int:
        block = group[0].node
        images = set(block.metadata.get(schema.IMAGE_IDS, [])) | {n.node.metadata.get(schema.IMAGE_ID) for n in group[1:]}
        return len(get_tokenizer()(block.get_content())) + separator + (IMAGE_TOKENS * len(images) if pixels else 0)

    sizes = [size(g) for g in groups]
    kept, total = set(range(len(groups))), sum(sizes)
    for i in sorted(kept, key=lambda i: (groups[i][0].score or 0.0, -i)):  # least relevant, then latest, first
        if total <= tokens or len(kept) == 1:
            break
        kept.discard(i)
        total -= sizes[i]
    return [n for i, g in enumerate(groups) if i in kept for n in g]


def split_blocks(content: Sequence[ContentBlock]) -> List[List[ContentBlock]]:
    """Delivered content cut back into its neighbour blocks: at each separator delivery put before a
    block's ``[seen ..., session ..., round ...]`` header, not at one the rounds' own text holds."""
    parts: List[List[ContentBlock]] = [[]]
    for block in merge_text(content):  # pixels delivery sends the separator and the header as two blocks
        if not isinstance(block, TextBlock):
            parts[-1].append(block)
            continue
        first, *rest = _BLOCK_START.split(block.text)
        parts[-1].append(TextBlock(text=first))
        parts += [[TextBlock(text=text)] for text in rest]
    return [merge_text(part) for part in parts if merge_text(part)]


def join_blocks(parts: Sequence[Sequence[ContentBlock]]) -> List[ContentBlock]:
    """The inverse of ``split_blocks``."""
    out: List[ContentBlock] = []
    for i, part in enumerate(parts):
        out += ([TextBlock(text=BLOCK_SEPARATOR)] if i else []) + list(part)
    return merge_text(out)


def head(content: Sequence[ContentBlock], tokens: int, tokenizer: Optional[Callable[[str], List[Any]]] = None) -> List[ContentBlock]:
    """The longest start of ``content`` within ``tokens`` (as ``content_tokens`` counts them) that
    ends after a whole line or image: a cut never leaves half a line."""
    units = [piece for block in content for piece in _lines(block)]
    fits = bisect.bisect_right(range(len(units) + 1), tokens, key=lambda n: content_tokens(units[:n], tokenizer))
    return merge_text(units[:max(fits - 1, 0)])


def cut(content: Sequence[ContentBlock], tokens: int, tokenizer: Optional[Callable[[str], List[Any]]] = None) -> List[ContentBlock]:
    """``head`` of delivered ``content``, less a last block of which only the header would go, and a
    last round's time line without the round: a header alone tells the model nothing, yet would
    name the block as sent."""
    kept = head(content, tokens, tokenizer)
    if kept and isinstance(kept[-1], TextBlock):
        lines = kept[-1].text.rstrip("\n").split("\n")
        if schema.SEEN_LINE.fullmatch(lines[-1]):
            rest = "\n".join(lines[:-1])
            kept = [*kept[:-1], *([TextBlock(text=rest)] if rest else [])]
    parts = split_blocks(kept)
    while parts and _header_only(parts[-1]):
        parts.pop()
    return join_blocks(parts)


def _header_only(part: List[ContentBlock]) -> bool:
    lines = [line for b in part if isinstance(b, TextBlock) for line in b.text.splitlines() if line.strip()]
    return len(lines) <= 1 and all(isinstance(b, TextBlock) for b in part)


def _lines(block: ContentBlock) -> List[ContentBlock]:
    if not isinstance(block, TextBlock):
        return [block]
    return [TextBlock(text=line) for line in block.text.splitlines(keepends=True)]


def text_context(nodes: List[NodeWithScore]) -> str:
    """The ``{context}`` of the answer prompt: text blocks in the order given, images as text only
    (a block's own in its rounds' text, a borrowed one named after the block)."""
    borrowed = _borrowed(nodes)
    return BLOCK_SEPARATOR.join(n.node.get_content() + "".join(_borrowed_text(img) for img in borrowed[id(n.node)])
                                for n in nodes if not isinstance(n.node, ImageNode))


def _borrowed(nodes: List[NodeWithScore]) -> Dict[int, List[ImageNode]]:
    """Per block, the images retrieved with it that were shared in a round the context leaves out: a round
    without a picture returns its neighbour's (Appendix B), and with no neighbours in the block
    (aggregation, ``neighbor_window=0``) that picture is in no round text the model sees."""
    delivered = {r for n in nodes if not isinstance(n.node, ImageNode) for r in _member_ids(n.node)}
    out: Dict[int, List[ImageNode]] = {}
    block: Optional[TextNode] = None
    for n in nodes:
        if not isinstance(n.node, ImageNode):
            block = n.node
            out[id(block)] = []
        elif block is not None and n.node.metadata.get(schema.ROUND_ID) not in delivered:  # else its round shows it
            out[id(block)].append(n.node)
    return out


def _borrowed_text(img: ImageNode) -> str:
    """A borrowed image as a line after its block: its id, the round it was shared in, its caption."""
    return f"\n[Image {img.metadata[schema.IMAGE_ID]}, shared in round {img.metadata[schema.ROUND_KEY]}] {img.text}".rstrip()


def label_image(source: Union[str, Path, bytes], label: str, cache_dir: Path, max_side: int) -> Path:
    """A copy of ``source`` (a file, or its bytes where they were read already), downscaled to
    ``max_side``, with ``label`` stamped in its top-left corner.

    The label's height is about 6% of the short side (at least 12 px), white on a dark box, so it
    stays legible at any size without covering the centre.
    """
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    digest = hashlib.sha256(data + f"\x00{label}\x00{max_side}".encode()).hexdigest()[:32]
    target = Path(cache_dir) / f"{digest}.png"
    if touch(target):
        return target
    img = open_rgb(io.BytesIO(data))
    img.thumbnail((max_side, max_side))
    font, origin, box = _stamp(img.size, label)
    draw = ImageDraw.Draw(img)
    draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=(0, 0, 0))  # PIL's rectangle is inclusive
    draw.text(origin, label, fill=(255, 255, 255), font=font)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, lambda tmp: img.save(tmp, format="PNG"))
    return target


def label_box(image_size: Tuple[int, int], label: str) -> Tuple[int, int, int, int]:
    """The corner box (left, top, right, bottom; right/bottom exclusive) ``label_image`` stamps on an
    image of this (already downscaled) size."""
    return _stamp(image_size, label)[2]


def _stamp(image_size: Tuple[int, int], label: str) -> tuple:
    """Font, text origin and box of a label sized to the image."""
    size = max(12, round(min(image_size) * 0.06))
    font = ImageFont.load_default(size=size)
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), label, font=font)
    pad = max(2, size // 4)
    box = (0, 0, min(image_size[0], right - left + 2 * pad), min(image_size[1], bottom - top + 2 * pad))
    return font, (pad - left, pad - top), box


class Deliverer:
    """Turns postprocessed blocks into the content blocks one answer call sends."""

    def __init__(self, index: "RoundMemory", mode: DeliveryMode = DeliveryMode.TEXT, budget: Optional[ImageBudget] = None,
                 cache_dir: Optional[Path] = None) -> None:
        self.index = index
        if budget is not None and not isinstance(budget, ImageBudget):
            raise VMemInputError("image_budget", f"must be an ImageBudget, got {type(budget).__name__}")
        self.mode = DeliveryMode(mode)
        self.budget = budget or ImageBudget()
        self.cache_dir = Path(cache_dir) if cache_dir else index.delivered_dir

    def deliver(self, nodes: List[NodeWithScore], query: Optional[QueryBundle] = None) -> List[ContentBlock]:
        if self.mode is DeliveryMode.TEXT:
            return [TextBlock(text=text_context(nodes))]
        blocks = [n.node for n in nodes if not isinstance(n.node, ImageNode)]
        rounds = self.index.get_rounds(r for b in blocks for r in _member_ids(b))
        borrowed = self._held(_borrowed(nodes))
        images = self._images(blocks, rounds, borrowed)
        shown, unreadable = self._label(images)
        out: List[ContentBlock] = []
        for block in blocks:
            members = [rounds[r] for r in _member_ids(block) if r in rounds]
            if not members:  # forgotten since it was retrieved
                continue
            if out:
                out.append(TextBlock(text=BLOCK_SEPARATOR))
            out.append(TextBlock(text=f"[{schema.block_header([r.metadata for r in members])}]"))
            for round_node, text in zip(members, schema.dated_texts(members)):
                out.extend(self._round(round_node, text, images, shown, unreadable))
            for img in borrowed[id(block)]:
                out.append(TextBlock(text=_borrowed_text(img)))
                out.extend(self._picture(img.node_id, img.metadata[schema.IMAGE_ID], shown, unreadable))
        dropped = [images[k].metadata[schema.IMAGE_ID] for k in images if k not in shown and k not in unreadable]
        if dropped:
            out.append(TextBlock(text=f"\n[not shown to keep within the image budget of {self.budget.max_images}: "
                                      f"{', '.join(dropped)}]"))
        return out + self.attachment(query)

    def attachment(self, query: Optional[QueryBundle]) -> List[ContentBlock]:
        """The query's own image, labelled as the attachment (nothing in text delivery or without one).
        An image given as a URL is stamped from its local copy: the query engine keeps it before
        retrieval, and a stock engine's query (``DeliveryPostprocessor``) is kept here the same way."""
        if self.mode is DeliveryMode.TEXT or query is None or not query.image_path:
            return []
        image_path = local_query(self.index, query).image_path
        image = self.index.load_query_image(image_path)  # refused as bad input naming it, as retrieval refuses it
        return [TextBlock(text=f"\n[attached image: the user's {ATTACHMENT_LABEL} picture]"),
                ImageBlock(path=label_image(image.data, ATTACHMENT_LABEL, self.cache_dir, self.budget.max_side))]

    def _held(self, borrowed: Dict[int, List[ImageNode]]) -> Dict[int, List[ImageNode]]:
        """The borrowed images as this memory stores them. A node's own ``image_path`` is not read:
        a node made outside the memory could claim its id and name any file on the machine. An image
        the memory does not hold (forgotten since it was retrieved, or never its own) is left out."""
        wanted = [img for images in borrowed.values() for img in images]
        stored = self.index.images_of(img.metadata[schema.ROUND_ID] for img in wanted if img.metadata.get(schema.ROUND_ID))
        held = {img.node_id: img for images in stored.values() for img in images}
        for img in wanted:
            if img.node_id not in held:
                logger.warning("image %s not delivered: this memory holds no such image",
                               img.metadata.get(schema.IMAGE_ID, img.node_id))
        return {block: [held[img.node_id] for img in images if img.node_id in held] for block, images in borrowed.items()}

    def _images(self, blocks: Sequence[TextNode], rounds: Dict[str, TextNode], borrowed: Dict[int, List[ImageNode]]) -> Dict[str, ImageNode]:
        """Images with pixels of the delivered rounds and those their blocks borrowed: retrieved
        rounds first (best fused score first, so a tight budget keeps the best match, a borrowed
        picture ranking with its block's best round), then neighbours."""
        scores = {key: info.get("fused_score", 0.0) for b in blocks for key, info in b.metadata.get(EXPLAIN_KEY, {}).items()}
        rank = {key: i for i, key in enumerate(sorted(scores, key=lambda k: -scores[k]))}
        members = [rounds[r] for b in blocks for r in _member_ids(b) if r in rounds]
        found = self.index.images_near(members, 0)
        ranked = [(rank.get(r.metadata[schema.ROUND_KEY], len(rank)), img) for r in members for img in found.get(r.node_id, [])]
        ranked += [(min((rank[key] for key in b.metadata.get(EXPLAIN_KEY, {})), default=len(rank)), img)
                   for b in blocks for img in borrowed[id(b)]]
        out: Dict[str, ImageNode] = {}
        for _, img in sorted(ranked, key=lambda entry: entry[0]):  # stable: a round's own pictures before borrowed ones
            if img.image_path:
                out.setdefault(img.node_id, img)
        return out

    def _label(self, images: Dict[str, ImageNode]) -> Tuple[Dict[str, Path], Set[str]]:
        """Labelled copies of the first ``max_images`` images whose files can be read, and the
        images whose files cannot (deleted outside the memory, or by a ``forget`` running meanwhile):
        a lost picture costs the answer that picture, and its budget slot goes to the next one."""
        shown: Dict[str, Path] = {}
        unreadable: Set[str] = set()
        for key, img in images.items():
            if len(shown) >= self.budget.max_images:
                break
            image_id = img.metadata[schema.IMAGE_ID]
            try:
                shown[key] = label_image(img.image_path, image_id, self.cache_dir, self.budget.max_side)
            except OSError as exc:
                logger.warning("image %s not delivered: %s", image_id, exc)
                unreadable.add(key)
        return shown, unreadable

    def _round(self, round_node: TextNode, text: str, images: Dict[str, ImageNode], shown: Dict[str, Path],
               unreadable: Set[str]) -> List[ContentBlock]:
        """``text``: the round's text as delivered (``schema.dated_texts``), then its pictures."""
        out: List[ContentBlock] = [TextBlock(text="\n" + text)]
        for key, img in images.items():
            if img.metadata[schema.ROUND_ID] == round_node.node_id:
                out.extend(self._picture(key, img.metadata[schema.IMAGE_ID], shown, unreadable))
        return out

    @staticmethod
    def _picture(key: str, image_id: str, shown: Dict[str, Path], unreadable: Set[str]) -> List[ContentBlock]:
        """An image's pixels under its id, or why they are missing (nothing when the budget left it out)."""
        if key in shown:
            return [TextBlock(text=f"\n[image {image_id}]"), ImageBlock(path=shown[key])]
        if key in unreadable:
            return [TextBlock(text=f"\n[image {image_id}: its file could not be read, not shown]")]
        return []


def _member_ids(block: TextNode) -> List[str]:
    return list(block.metadata.get(BLOCK_ROUND_IDS, []))


class DeliveryPostprocessor(BaseNodePostprocessor):
    """The delivery stage as a node postprocessor, for LlamaIndex's own multimodal engines.

    Use it in ``RetrieverQueryEngine.from_args(..., multimodal=True, node_postprocessors=[...])`` or
    a ``MultiModalContextChatEngine``: runs of text become ``TextNode``s and each delivered image an
    ``ImageNode`` pointing at its labelled copy, in delivery order, so those engines send what
    ``VMemQueryEngine`` would where it fits the model's window (where it does not, their synthesizer
    splits or cuts it by its own rules). Retrieved rounds are first assembled into neighbour blocks, as
    ``NeighborRoundPostprocessor`` does (a no-op when that one ran before it, to set a window).
    Each delivered node's id is derived from its place and content (``schema.delivered_id``), so the
    same retrieval delivers the same ids in any process.
    """

    _blocks: NeighborRoundPostprocessor = PrivateAttr()
    _deliverer: Deliverer = PrivateAttr()

    def __init__(self, index: "RoundMemory", mode: DeliveryMode = DeliveryMode.PIXELS,
                 budget: Optional[ImageBudget] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._blocks = NeighborRoundPostprocessor(index)
        self._deliverer = Deliverer(index, mode, budget)

    @classmethod
    def class_name(cls) -> str:
        return "DeliveryPostprocessor"

    def _postprocess_nodes(self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        """This memory's blocks are delivered in their place; other retrievers' nodes pass as they are."""
        nodes = self._blocks.postprocess_nodes(nodes, query_bundle)
        memory_id = self._deliverer.index.memory_id
        own = [n for n in nodes if is_own(n.node, memory_id)]
        score = max((n.score or 0.0 for n in own), default=0.0)
        out: List[NodeWithScore] = []
        for block in self._deliverer.deliver(own, query_bundle):
            if isinstance(block, ImageBlock):
                out.append(NodeWithScore(node=ImageNode(image_path=str(block.path)), score=score))
            elif out and not isinstance(out[-1].node, ImageNode):
                out[-1].node.text += block.text
            else:
                out.append(NodeWithScore(node=TextNode(text=block.text), score=score))
        for position, n in enumerate(out):  # by content (a labelled copy is named by its pixels), as the same retrieval delivers it
            content = Path(n.node.image_path).name if isinstance(n.node, ImageNode) else n.node.text
            n.node.id_ = schema.delivered_id(memory_id, position, content)
        return splice(nodes, lambda n: is_own(n, memory_id), out)
