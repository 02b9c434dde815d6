"""The exception types users catch: bad input, and an anchor LLM that failed when asked to be strict;
and the warning given when retrieval goes on without that LLM."""


class VMemInputError(ValueError):
    """Bad input: names the offending item; the memory is left exactly as before the call."""

    def __init__(self, item: str, problem: str) -> None:
        self.item = item
        self.problem = problem
        super().__init__(f"{item}: {problem}")


class VMemAnchorError(RuntimeError):
    """The LLM that writes a search anchor failed, gave no answer in time, or answered nothing usable.

    ``anchor`` names it (``"hypo_caption"`` or ``"enriched"``), ``problem`` says what went wrong, and
    the LLM client's own exception, if there was one, is its ``__cause__``. A retriever raises it only
    with ``strict_anchors=True``; otherwise it searches with the anchor it writes without an LLM.
    """

    def __init__(self, anchor: str, problem: str) -> None:
        self.anchor = anchor
        self.problem = problem
        super().__init__(f"anchor {anchor}: {problem}")


class VMemAnchorWarning(UserWarning):
    """Retrieval went on without the anchor LLM (see ``VMemAnchorError``); given once per retriever."""
