"""The package's layers are one-way: each module imports only its own layer and those below it,
so a change to how rounds are read never climbs back through the front door.

    0 leaves      errors, prompts, schema, times
    1 memory      the store, encoders, reading and writing rounds, units and pictures, the image fence,
                  and the settings a memory is opened with (its config and LLM)
    2 retrieval   routing, anchors, fusion, filters, the retriever
    3 assembly    neighbour blocks and delivery
    4 engines     query engine, chat engine, memory block
    5 front door  VMemIndex and the package's names
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llama_index_vmem"
LAYERS = {
    0: ["errors", "prompts", "schema", "times"],
    1: ["encoders", "store", "config", "images", "node_parser", "models", "messages", "neighbours", "lifecycle", "archive",
        "round_memory"],
    2: ["router", "anchors", "fusion", "filters", "retriever"],
    3: ["postprocessor", "delivery"],
    4: ["query_engine", "chat_engine", "memory_block"],
    5: ["index", "__init__"],
}
#: Users of the library, not parts of it: they may import anything.
OUTSIDE = {"bench", "demo"}
LAYER_OF = {name: layer for layer, names in LAYERS.items() for name in names}


def _top(module: str) -> str:
    """``store.edge`` -> ``store``: a subpackage is one part of its layer."""
    return module.split(".")[0]


def _modules() -> Dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] not in OUTSIDE:
            found[".".join(p for p in parts if p != "__init__") or "__init__"] = path
    return found


def _imports(module: str, path: Path, modules: Set[str], annotations: bool) -> Set[str]:
    """The package modules ``module`` imports anywhere: at the top and inside functions, and with
    ``annotations`` also those it imports for type checkers alone (under ``if TYPE_CHECKING:``)."""
    package = [] if module == "__init__" else module.split(".")[: None if path.name == "__init__.py" else -1]
    tree = ast.parse(path.read_text())
    for_types = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                 for stmt in block.body for n in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in for_types and not annotations:
            continue
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                target = ".".join(package[:len(package) - (node.level - 1)] + ([name] if name else []))
            elif name == "llama_index_vmem" or name.startswith("llama_index_vmem."):
                target = name[len("llama_index_vmem."):]
            else:
                continue
            for alias in node.names:  # ``from . import images`` imports a module, ``from .index import X`` a name
                candidate = f"{target}.{alias.name}".lstrip(".")
                found.add(candidate if candidate in modules else target or "__init__")
        elif isinstance(node, ast.Import):
            found.update(a.name[len("llama_index_vmem."):] for a in node.names if a.name.startswith("llama_index_vmem."))
    return found - {module}


MODULES = _modules()
#: Every import, type checkers' too: no layer may name one above it, even in an annotation.
GRAPH = {module: _imports(module, path, set(MODULES), annotations=True) for module, path in MODULES.items()}
#: What runs: a module and the one it annotates with may name each other (the memory and its helpers).
RUNTIME = {module: _imports(module, path, set(MODULES), annotations=False) for module, path in MODULES.items()}


def test_every_module_has_a_layer():
    assert {_top(m) for m in GRAPH} <= set(LAYER_OF), "add the new module to LAYERS"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_a_module_imports_only_its_layer_and_those_below(module):
    above = sorted(m for m in GRAPH[module] if _top(m) in OUTSIDE or LAYER_OF[_top(m)] > LAYER_OF[_top(module)])
    assert not above, f"{module} (layer {LAYER_OF[_top(module)]}) imports {above}"


def test_there_is_no_import_cycle():
    done: Set[str] = set()

    def visit(module: str, path: list) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for dep in sorted(RUNTIME.get(module, ())):
            visit(dep, path + [module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])


def test_the_front_door_is_named_by_few_modules():
    naming = sorted(m for m, p in MODULES.items() if "VMemIndex" in p.read_text())
    assert len(naming) <= 5, naming
