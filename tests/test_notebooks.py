"""The notebooks execute headless, end to end, as they are (the comparison on the benchmark fixtures in
tests/data), print no warning and leave no files behind; the comparison notebook, pointed at a folder
without the data, stops at once, saying where to get it."""

from pathlib import Path

import nbformat
import pytest
from conftest import BENCH_DATA as DATA
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

FOLDER = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))


def _files() -> set:
    return {p for p in FOLDER.rglob("*") if p.is_file()}


def _client(notebook: nbformat.NotebookNode, timeout: int) -> NotebookClient:
    """Runs the notebook as Jupyter would, in its own folder."""
    return NotebookClient(notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(FOLDER)}})


def test_there_are_notebooks():
    assert {p.name for p in NOTEBOOKS} >= {"quickstart.ipynb", "comparison.ipynb"}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes_as_it_is_with_no_warning_and_leaves_no_files(path, monkeypatch):
    """As a reader opens it: no ``DATA_DIR`` set (the comparison reads the slice in tests/data)."""
    monkeypatch.delenv("DATA_DIR", raising=False)
    notebook = nbformat.read(path, as_version=4)
    before = _files()
    _client(notebook, 900).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert not [o["text"] for o in outputs if o.get("name") == "stderr"], "the notebook printed warnings"
    assert outputs, "notebook produced no output"
    assert _files() == before, f"left behind: {sorted(map(str, _files() - before))}"


def test_the_comparison_reads_the_repository_data_unless_told_otherwise():
    first = next(c for c in nbformat.read(FOLDER / "comparison.ipynb", as_version=4).cells if c.cell_type == "code")
    default = first.source.split("os.environ.get('DATA_DIR', '", 1)[1].split("'", 1)[0]
    assert (FOLDER / default).resolve() == DATA.resolve()


def test_comparison_without_its_data_stops_in_the_first_cell_saying_where_to_get_it(tmp_path, monkeypatch):
    path = FOLDER / "comparison.ipynb"
    notebook = nbformat.read(path, as_version=4)
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "no-data-here"))
    with pytest.raises(CellExecutionError) as stopped:
        _client(notebook, 120).execute()
    message = str(stopped.value)
    assert "FileNotFoundError" in message and str(tmp_path / "no-data-here" / "memgallery" / "dialog") in message
    assert "DATA_DIR" in message and "github.com/YuanchenBei/Mem-Gallery" in message and "MIT" in message
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code[0].execution_count is not None and [o.output_type for o in code[0].outputs] == ["error"]
    assert all(cell.execution_count is None and not cell.outputs for cell in code[1:]), "nothing ran after the first cell"
