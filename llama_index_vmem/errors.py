"""The exception types users catch: bad input, and an anchor LLM that failed when asked to be strict;
the warning given when retrieval goes on without that LLM; and the check that lists accepted keywords."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


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

def keywords_listed(fn: F) -> F:
    """``fn``, refusing an unknown keyword with a ``TypeError`` that lists the ones it takes, as
    Python's own error does not: a misspelt option (``image=`` for ``image_path=``) then says
    what to write instead."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn
    named = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in ("self", "cls")]

    name = fn.__qualname__.removesuffix(".__init__")  # a class is called by its name

    def refuse_unknown(kwargs: Dict[str, Any]) -> None:
        unknown = [k for k in kwargs if k not in named]
        if unknown:
            raise TypeError(f"{name}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                            f"it takes {', '.join(named)}")

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            refuse_unknown(kwargs)
            return await fn(*args, **kwargs)

        return cast(F, _open_signature(checked_async, fn))

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        refuse_unknown(kwargs)
        return fn(*args, **kwargs)

    return cast(F, _open_signature(checked, fn))


def _open_signature(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` showing ``fn``'s signature with ``**kwargs`` added: LlamaIndex's instrumentation
    binds a call to the signature it shows before calling, and would raise Python's own error first."""
    sig = inspect.signature(fn)
    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(),  # type: ignore[attr-defined]
                                                    inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    return wrapper
