"""Every example in README.md and docs/*.md runs as written: one test per page.

``python`` blocks run in order from the top of their page, all in one fresh namespace per page,
in a temporary working directory; each page also runs after the README's Quick start and again,
in one folder, as a reader pastes them. The README prints what its comments say it prints.
Nothing is predefined: each page imports and builds what it uses. One thing is swapped, because
no outside service runs in tests:
``qdrant_client.QdrantClient`` is qdrant-client's local mode (``location=":memory:"``) whatever
URL it is given, so the pages about a Qdrant server run against that (docs/server.md says how to
start a real one). The LLMs in the pages are LlamaIndex's own offline stand-ins (``MockLLM`` and
kin), labelled as stand-ins in the text.

``bash`` blocks: each command (a line, split on ``&&``) is handled by how it starts.

* ``pip install ...``: not run. Installing is what ``.ci/run`` does in a fresh virtualenv; here
  the README's two set-up commands are checked to be exactly the documented ones, and
  ``.ci/run`` to run the test one.
* ``python -m pytest``: not run (it is this suite); ``.ci/run`` runs it.
* ``python -m llama_index_vmem.demo ...``: runs ``demo.main(args)`` in this process.
* ``python examples/NAME.py``: runs the example as ``__main__`` in this process.
* ``vmem-bench ...``: runs ``llama_index_vmem.bench.cli.main(args)`` in this process, with
  ``$DATA`` set to the small fixture data in ``tests/data`` (the layout of the real benchmark
  data) and globs expanded as a shell would. A block right after the line
  ``<!-- docs-test: parse only -->`` is parsed by vmem-bench's own argument parser and its input
  files must exist, but it is not run: those are the full comparisons, every stock system in a
  process of its own, about a minute even on the fixture (tests/test_bench_cli.py runs the CLI).
* ``docker ...`` and ``./qdrant``: not run; no Docker or Qdrant server in tests.
* ``python benchmarks/...``: not run; measurement scripts that take minutes (numbers, not tests).

Any other command fails the test, so a new kind of command must be given a rule here.
``text`` blocks (a file tree, sample output) are not run; a block of any other language fails.
Relative links between the pages, and their ``#anchors``, must resolve too.
"""

from __future__ import annotations

import glob
import os
import re
import runpy
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PARSE_ONLY = "<!-- docs-test: parse only -->"
DEMO_INSTALL = 'pip install "torch==2.13.0" -e ".[demo]" && python -m llama_index_vmem.demo'
TEST_INSTALL = 'pip install "torch==2.13.0" -e ".[test]" && python -m pytest'
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.S | re.M)


def _blocks(page: Path):
    """``(language, code, parse_only)`` for each fenced block of the page, in order."""
    text = page.read_text()
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip().splitlines()
        yield m.group(1), m.group(2), bool(before) and before[-1].strip() == PARSE_ONLY


def _bench_args(command: str) -> list:
    """A vmem-bench command's arguments as a shell would pass them, ``$DATA`` being the fixture data."""
    args = []
    for word in shlex.split(command.replace("$DATA", str(DATA)))[1:]:
        matches = sorted(glob.glob(word)) if any(c in word for c in "*?[") else []
        assert matches or not any(c in word for c in "*?["), f"{word!r} matches no file"
        args += matches or [word]
    return args


def _run_shell(command: str, parse_only: bool, where: str) -> None:
    if command.startswith(("pip install ", "python -m pytest", "docker ", "./qdrant", "python benchmarks/")):
        return
    if command.startswith("python -m llama_index_vmem.demo"):
        from llama_index_vmem import demo

        demo.main(shlex.split(command)[3:])
    elif command.startswith("python examples/"):
        runpy.run_path(str(ROOT / shlex.split(command)[1]), run_name="__main__")
    elif command.startswith("vmem-bench "):
        from llama_index_vmem.bench import cli

        args = _bench_args(command)
        if parse_only:
            parsed = cli._parser().parse_args(args)
            for path in getattr(parsed, "paths", []):
                assert path.exists(), f"{where}: {path} does not exist"
        else:
            assert cli.main(args) == 0, f"{where}: {command}"
    else:
        pytest.fail(f"{where}: no rule in tests/test_docs.py for the command {command!r}")


@pytest.fixture
def local_qdrant(monkeypatch):
    """``QdrantClient(url=...)`` anywhere becomes local mode: no server runs in tests."""
    import qdrant_client

    local = qdrant_client.QdrantClient
    monkeypatch.setattr(qdrant_client, "QdrantClient", lambda *args, **kwargs: local(location=":memory:"))


def _printed_as_commented(code: str) -> list:
    """What a README block says it prints: the comment after each ``print(...)`` line, then the
    comment lines that close the block (the output of a loop), in order."""
    lines = code.rstrip().splitlines()
    said = [line.split("  # ", 1)[1].strip() for line in lines if line.startswith("print(") and "  # " in line]
    closing = []
    for line in reversed(lines):
        if not line.startswith("# "):
            break
        closing.insert(0, line[2:].strip())
    return said + closing


def _run_page(page: Path, capsys, check_comments: bool = False) -> int:
    """Run every block of ``page`` in one fresh namespace, in the current folder; the number run.
    ``check_comments``: each Python block must print what its comments say (``_printed_as_commented``)."""
    from llama_index_vmem import VMemIndex

    namespace: dict = {"__name__": "__main__"}
    ran = 0
    try:
        for i, (language, code, parse_only) in enumerate(_blocks(page), 1):
            where = f"{page.name} block {i}"
            if language == "python":
                capsys.readouterr()
                exec(compile(code, where, "exec"), namespace)
                ran += 1
                if check_comments:
                    printed = [line.strip() for line in capsys.readouterr().out.splitlines()]
                    for expected in _printed_as_commented(code):
                        assert expected in printed, f"{where} says it prints {expected!r}; it printed {printed}"
                        printed = printed[printed.index(expected) + 1:]
            elif language == "bash":
                for line in code.splitlines():
                    for command in (c.strip() for c in line.split("&&")):
                        if command and not command.startswith("#"):
                            _run_shell(command, parse_only, where)
                            ran += 1
            elif language != "text":
                pytest.fail(f"{where}: a ```{language} block; the docs use ```python, ```bash and ```text only")
    finally:
        for value in namespace.values():
            if isinstance(value, VMemIndex) and not value.closed:
                value.close()
    return ran


def _quick_start() -> str:
    """The README's Quick start blocks alone, as a page of their own."""
    text = (ROOT / "README.md").read_text()
    return text[text.index("## Quick start"):text.index("\n## ", text.index("## Quick start") + 1)]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_page_examples_run(page, tmp_path, monkeypatch, local_qdrant, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA", str(DATA))
    ran = _run_page(page, capsys, check_comments=page.name == "README.md")
    assert ran or page.name == "layout.md", f"{page.name} has no example"


@pytest.mark.slow  # about a minute for all pages: each page once is in the quick set above
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_page_runs_again_after_the_quick_start_in_the_same_folder(page, tmp_path, monkeypatch, local_qdrant, capsys):
    """A reader pastes the Quick start, then a page, then the page again, in one folder: the pages
    share ``./memory`` names, and a page must not trip on what it or the README left there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA", str(DATA))
    quick = tmp_path / "quick-start.md"
    quick.write_text(_quick_start())
    _run_page(quick, capsys)
    _run_page(page, capsys)
    _run_page(page, capsys)


def test_readme_setup_commands_are_the_ones_ci_runs():
    readme = (ROOT / "README.md").read_text()
    bash = [code.strip() for language, code, _ in _blocks(ROOT / "README.md") if language == "bash"]
    assert DEMO_INSTALL in bash and TEST_INSTALL in bash, "the README's two set-up commands changed"
    assert readme.index(DEMO_INSTALL) < readme.index("## Quick start"), "the set-up comes before the quick start"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert TEST_INSTALL in ci, ".ci/run must run the README's test command"
    assert ci[-1] == "python -m pytest -m slow", ".ci/run must then run the long tests"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_resolve():
    for page in PAGES:
        text = FENCE.sub("", page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            assert path.exists(), f"{page.name}: link to {target}, which does not exist"
            if anchor and path.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", FENCE.sub("", path.read_text()), re.M)
                assert anchor in {_anchor(h) for h in headings}, f"{page.name}: no heading for #{anchor} in {path.name}"


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 210, f"README.md has {len(lines)} lines; move depth into docs/"
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in "\n".join(lines), f"README.md does not link docs/{page.name}"
