"""An agent whose long-term memory is V-Mem: recent turns stay verbatim, older ones are recalled.

LlamaIndex's ``Memory`` keeps the latest messages (up to ``token_limit`` tokens) and flushes the
oldest into ``VMemMemoryBlock``, which stores them as rounds, images and voice-note transcripts
included. On every turn the block recalls the rounds relevant to the user's message (its text and
attached image) into the agent's system message, so the agent remembers beyond its context.

``python examples/agent.py`` runs offline: a temporary memory, the packaged encoders, and a
stand-in LLM that answers with what the memory recalled. For real answers pass any LlamaIndex LLM
to ``build_agent`` (``OpenAI(model="gpt-4o-mini")``).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from llama_index.core.agent.workflow import ReActAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import LLM, CustomLLM
from llama_index.core.memory import Memory

from llama_index_vmem import VMemIndex, VMemMemoryBlock

SYSTEM_PROMPT = "You are a personal assistant. Use what you remember of earlier conversations with the user."


def build_agent(index: VMemIndex, llm: LLM, token_limit: int = 4000) -> tuple[ReActAgent, Memory]:
    """The agent, and the memory to run it with: the latest messages up to ``token_limit`` tokens,
    then V-Mem for everything older."""
    memory = Memory.from_defaults(token_limit=token_limit, memory_blocks=[VMemMemoryBlock(index=index, llm=llm)])
    return ReActAgent(tools=[], llm=llm, system_prompt=SYSTEM_PROMPT), memory


async def run(agent: ReActAgent, memory: Memory, user_msg: str | ChatMessage) -> str:
    """One turn. A ``ChatMessage`` with an ``ImageBlock`` asks about a picture: the memory recalls
    with the picture too."""
    return str(await agent.run(user_msg=user_msg, memory=memory))


class RecallingLLM(CustomLLM):
    """Offline stand-in for a real LLM: answers, in ReAct's format, with the user lines of what the
    memory recalled."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="offline-stand-in")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        recalled = re.search(r"<long_term_memory>(.*?)</long_term_memory>", prompt, re.DOTALL)
        said = re.findall(r"^\s*User: (.+)$", recalled.group(1), re.MULTILINE) if recalled else []
        answer = f"Earlier you told me: {' / '.join(said)}" if said else "Noted."
        return CompletionResponse(text=f"Thought: I can answer without a tool.\nAnswer: {answer}")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt)


async def _conversation(index: VMemIndex) -> None:
    agent, memory = build_agent(index, RecallingLLM(), token_limit=100)
    for turn in ("My cat is called Mochi, a tabby from the Riverside shelter.",
                 "I moved to Lisbon last spring.",
                 "I am learning Portuguese with a tutor on Tuesdays.",
                 "My sister Ingrid visits in August.",
                 "What is my cat called?"):
        print(f"User:  {turn}\nAgent: {await run(agent, memory, turn)}\n")
    print(f"{len(index)} earlier exchanges were flushed from the chat history into V-Mem.")


def main() -> None:
    with VMemIndex.from_defaults() as index:
        asyncio.run(_conversation(index))


if __name__ == "__main__":
    main()
