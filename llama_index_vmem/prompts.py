"""Every prompt V-Mem sends, verbatim from the paper's Appendix C (line breaks unwrapped), and
what a replacement must fill.

Users swap them through ``get_prompts()`` / ``update_prompts()`` on the query engine and the
anchor transforms; nothing else in the package holds prompt text.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from llama_index.core.base.llms.types import MessageRole
from llama_index.core.prompts import BasePromptTemplate, ChatPromptTemplate, PromptTemplate, SelectorPromptTemplate

from .errors import VMemInputError

ANSWER_PROMPT = PromptTemplate(
    "You are answering a question using a person’s conversation history.\n"
    "\n"
    "CONTEXT (each block is one exchange; some include an image):\n"
    "{context}\n"
    "\n"
    "QUESTION: {question}\n"
    "\n"
    "INSTRUCTIONS:\n"
    "- Answer ONLY from the context above.\n"
    "- If the question asks which image/photo/picture, answer with the image id exactly as shown (e.g. D1:IMG_002).\n"
    "- If the question asks to list or enumerate, include EVERY matching item, comma-separated.\n"
    "- Be specific and complete; include all details the question asks for.\n"
    "- Use ONLY what is written in the context blocks above -- never outside or general knowledge.\n"
    "- For a yes/no question about whether a specific thing was mentioned or discussed "
    "(e.g. \"Did X mention any specific ...?\"), answer \"Not mentioned\" UNLESS that specific thing is "
    "explicitly named in the context. Do not answer \"Yes\" based on related or general discussion, "
    "and never invent specifics.\n"
    "- If the answer is genuinely not in the context, reply exactly: Information not found\n"
    "\n"
    "ANSWER:"
)

CONFLICT_PROMPT = PromptTemplate(
    "You are checking a person’s conversation history for a conflict or contradiction. "
    "Answer with a clear Yes or No.\n"
    "\n"
    "CONTEXT (each block is one exchange):\n"
    "{context}\n"
    "\n"
    "QUESTION: {question}\n"
    "\n"
    "INSTRUCTIONS:\n"
    "- A CONFLICT exists if the claim (or a statement in the conversation) asserts a fact that the "
    "conversation establishes DIFFERENTLY -- e.g. a wrong name, attribute, or action for an entity the "
    "conversation describes (the conversation says the pet is named Lumi; a claim that it is named Coco "
    "CONFLICTS), or a claim the conversation directly contradicts.\n"
    "- If you identify ANY factual discrepancy between the claim and what the conversation establishes, "
    "answer \"Yes\" -- do NOT explain it away as \"no conflict\".\n"
    "- For \"does X contradict himself / is there a contradiction\" questions: look for two statements in "
    "the conversation that cannot both be true; if such a pair exists, answer \"Yes\".\n"
    "- Answer \"No\" ONLY if the claim is consistent with / supported by the conversation, OR the "
    "conversation does not address the topic at all (an unaddressed topic is NOT a conflict).\n"
    "- Reason internally, but OUTPUT EXACTLY ONE WORD: \"Yes\" or \"No\" -- nothing else (no reason, no "
    "explanation, no punctuation beyond the word). The reference answers are a single word, so anything "
    "more is scored wrong.\n"
    "\n"
    "ANSWER:"
)

HYPO_CAPTION_PROMPT = PromptTemplate(
    "A user is searching the images shared in a conversation for the ONE image that answers their "
    "question. Write the caption that image most likely has, in the style of the conversation’s own "
    "captions: a dense noun-phrase description of what is visible, about two sentences and 45 words, "
    "covering subjects, attributes, colours, setting, and any visible text or labels. Keep whatever the "
    "question names concretely, and add the appearance it implies but does not state. Do not begin with "
    "\"A photo of\", and do not assume the target is a photograph; it may be an illustration, an "
    "infographic, a screenshot, or a document.\n"
    "\n"
    "Question: {q}\n"
    "\n"
    "Caption:"
)

ENRICHED_ANCHOR_PROMPT = PromptTemplate(
    "You can SEE the user’s attached image.\n"
    "\n"
    "QUESTION: {q}\n"
    "\n"
    "The answer to that question is in a past conversation, not in the image. List the search terms "
    "most likely to appear in the conversation turns that answer it.\n"
    "\n"
    "Start from what the question asks about and find it in the image: if it asks about a breed, name "
    "the animal and its breed; about a category, name the item and what kind of thing it is; about a "
    "component, name that part. Then add the other visible things a person might have mentioned when "
    "sharing this picture: the main subject, brands, labels, species, places, objects.\n"
    "\n"
    "For each, give the forms a conversation might use: the specific name, the everyday name, and the "
    "general category, since it may use any of them. Include the words the question itself hinges on.\n"
    "\n"
    "Give at most 8 terms. Choose them by one test: how likely is this exact word to appear in the "
    "sentence that answers the question? Keep terms that would identify the answer; drop terms that "
    "merely describe the picture. Single words or short phrases, never sentences. Prefer names and nouns "
    "over adjectives. Omit anything you are inferring rather than seeing.\n"
    "\n"
    "Return JSON: {\"keywords\": [\"...\", \"...\"]}"  # single braces: LlamaIndex fills only {q}
)

IMAGE_NOTE_PROMPT = PromptTemplate(
    "[ATTACHED IMAGE] The user’s attached image shows: {query_caption}. Identify the product/entity it "
    "depicts using the conversation and answer; do NOT reply \"Information not found\" if the "
    "conversation identifies it."
)

#: The attached-image note when the image lane matched a stored image (the middle sentence added).
IMAGE_NOTE_MATCHED_PROMPT = PromptTemplate(
    "[ATTACHED IMAGE] The user’s attached image shows: {query_caption}. It visually matches a "
    "conversation image: ({image_id} -- \"{caption}\"). Identify the product/entity it depicts using "
    "the conversation and answer; do NOT reply \"Information not found\" if the conversation identifies it."
)

#: LoCoMo's semantic grader as used across the LoCoMo memory literature (Mem0's ``ACCURACY_PROMPT``);
#: the benchmark harness uses it for end-to-end QA on LoCoMo.
LOCOMO_GRADER_PROMPT = PromptTemplate(
    "Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:\n"
    "    (1) a question (posed by one user to another user),\n"
    "    (2) a 'gold' (ground truth) answer,\n"
    "    (3) a generated answer\n"
    "which you will score as CORRECT/WRONG.\n"
    "\n"
    "The point of the question is to ask about something one user should know about the other user based on their "
    "prior conversations.\n"
    "The gold answer will usually be a concise and short answer that includes the referenced topic, for example:\n"
    "Question: Do you remember what I got the last time I went to Hawaii?\n"
    "Gold answer: A shell necklace\n"
    "The generated answer might be much longer, but you should be generous with your grading - as long as it touches "
    "on the same topic as the gold answer, it should be counted as CORRECT.\n"
    "\n"
    "For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might "
    "be much longer or use relative time references (like \"last Tuesday\" or \"next month\"), but you should be generous "
    "with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted "
    "as CORRECT. Even if the format differs (e.g., \"May 7th\" vs \"7 May\"), consider it CORRECT if it's the same date.\n"
    "\n"
    "Now it's time for the real question:\n"
    "Question: {question}\n"
    "Gold answer: {gold_answer}\n"
    "Generated answer: {generated_answer}\n"
    "\n"
    "First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.\n"
    "Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.\n"
    "\n"
    "Just return the label CORRECT or WRONG in a json format with the key as \"label\"."
)


@dataclass(frozen=True)
class PromptSlot:
    """What the engine fills a replaceable prompt with, and how it sends it."""

    required: Tuple[str, ...]
    optional: Tuple[str, ...] = ()
    #: Why the prompt must be a text template, where it is sent as text inside another message (a
    #: chat template's roles would reach the model as text); None where it is sent as messages.
    text_only: Optional[str] = None


_NOTE = "the image note is text the engine puts inside the answer prompt's context"
#: Every replaceable prompt, by its ``get_prompts()`` key (the anchors' without their module prefix).
PROMPT_SLOTS: Dict[str, PromptSlot] = {
    "answer_prompt": PromptSlot(("context", "question")),
    "conflict_prompt": PromptSlot(("context", "question")),
    "image_note_prompt": PromptSlot(("query_caption",), text_only=_NOTE),
    "image_note_matched_prompt": PromptSlot(("query_caption",), ("image_id", "caption"), text_only=_NOTE),
    "hypo_caption_prompt": PromptSlot(("q",)),
    "enriched_anchor_prompt": PromptSlot(("q",), text_only="the prompt goes in one message with the attached image"),
}


def check_prompt(key: str, prompt: Any) -> None:
    """Refuse a prompt the engine would send half-filled or not at all: not a prompt template, one
    without the variables the engine fills (a stock ``{context_str}`` prompt) or with others it
    never fills (they would reach the model as literal braces), ``{context}`` twice (the context,
    images and all, goes in one place) or outside a user message (chat APIs refuse pictures in a
    system message), or a chat template where the prompt is sent as text. A selector is checked
    template by template, as any of them may be the one sent. A variable named through
    ``template_var_mappings`` counts under the engine's name; one given by ``partial_format`` or a
    function mapping is filled."""
    slot = PROMPT_SLOTS[key]
    item = f"prompt {key}"
    if not isinstance(prompt, BasePromptTemplate):
        raise VMemInputError(item, f"must be a PromptTemplate or ChatPromptTemplate, got {type(prompt).__name__}")
    if isinstance(prompt, SelectorPromptTemplate):
        for template in [prompt.default_template, *(template for _, template in prompt.conditionals or [])]:
            check_prompt(key, template)
        return
    if isinstance(prompt, ChatPromptTemplate) and slot.text_only:
        raise VMemInputError(item, f"must be a text template (PromptTemplate), not a ChatPromptTemplate: {slot.text_only}")
    mapped = prompt.template_var_mappings or {}
    given = [*slot.required, *slot.optional, *prompt.kwargs, *(prompt.function_mappings or {})]
    unknown = [v for v in prompt.template_vars if v not in {mapped.get(name, name) for name in given}]
    sentinels = {v: f"\x00vmem-{v}\x00" for v in slot.required + slot.optional}
    messages = prompt.format_messages(**sentinels)
    text = "".join(m.content or "" for m in messages)
    missing = [v for v in slot.required if sentinels[v] not in text]
    if missing:
        raise VMemInputError(item, f"must use {_braced(missing)}; it uses {prompt.template_vars}")
    if unknown:
        raise VMemInputError(item, f"uses {_braced(unknown)}, which the engine does not fill "
                                   f"(it fills {_braced(slot.required + slot.optional)}); "
                                   "give other variables with partial_format")
    if "context" in slot.required:
        holders = [m for m in messages if sentinels["context"] in (m.content or "")]
        if text.count(sentinels["context"]) != 1:
            raise VMemInputError(item, "must use {context} once: the delivered context goes there")
        if holders[0].role != MessageRole.USER:
            raise VMemInputError(item, f"must put {{context}} in a user message, not a {holders[0].role.value} one: "
                                       "the delivered pictures go there, and chat APIs refuse them elsewhere")


def _braced(names: Sequence[str]) -> str:
    return ", ".join("{" + name + "}" for name in names)
