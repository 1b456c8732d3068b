"""Notebook hygiene: what is stored in notebooks/, solutions/, app/ and exercises/.

* every notebook is valid nbformat v4 with the ``python3`` kernelspec and no widget state;
* notebooks/, solutions/ and app/ are stored executed (``make notebooks``): code cells numbered 1..n in
  order, no error outputs, no machine-specific paths (a learner's or CI's home, temp or checkout
  folder) in any text output;
* exercises/ are stored without outputs (learners start from a clean notebook);
* ``make notebooks`` (course_lib/authoring/run_notebooks.py) stores them canonically.

The nbval sanitizer has its own tests: tests/test_sanitizer.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from repo import ROOT
EXECUTED_DIRS = ("notebooks", "solutions", "app")
CLEAN_DIRS = ("exercises",)

#: A machine path: /root, /home/<user>, /tmp/..., /work/... (not preceded by a word character or
#: a dot, so "sqrt/root" or "./work/" in prose do not count).
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:root|home|tmp|work)(?=/|\b)")
#: Outputs that are binary (base64) and cannot hold a readable path.
BINARY_MIME = re.compile(r"^(?:image/(?!svg)|application/(?:pdf|octet-stream))")


def notebooks_in(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).glob("*.ipynb"))


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


EXECUTED = notebooks_in(*EXECUTED_DIRS)
CLEAN = notebooks_in(*CLEAN_DIRS)
ALL = EXECUTED + CLEAN


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=nbformat.NO_CONVERT)


def text_of_outputs(cell) -> list[tuple[str, str]]:
    """(kind, text) of every readable output of a code cell."""
    found = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            found.append((f"stream:{out.name}", out.text))
        elif out.output_type in ("display_data", "execute_result"):
            for mime, data in out.data.items():
                if BINARY_MIME.match(mime):
                    continue
                found.append((mime, data if isinstance(data, str) else str(data)))
        elif out.output_type == "error":
            found.append(("error", "\n".join(out.get("traceback", [])) + out.get("evalue", "")))
    return found


def test_there_is_a_start_notebook():
    assert (ROOT / "notebooks" / "00_start_here.ipynb").is_file()


@pytest.mark.parametrize("path", ALL, ids=_ids(ALL))
def test_valid_nbformat_and_stable_metadata(path):
    nb = read(path)
    assert nb.nbformat == 4, f"{path.name}: nbformat {nb.nbformat}, expected 4"
    nbformat.validate(nb)
    assert "widgets" not in nb.metadata, (
        f"{path.name} stores widget state in its metadata; save it with `make notebooks` "
        f"(or in JupyterLab: Settings > Save Widget State Automatically, off)"
    )
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", (
        f"{path.name}: kernelspec must be python3, got {nb.metadata.get('kernelspec')}"
    )
    for i, cell in enumerate(nb.cells):
        assert "execution" not in cell.metadata and "ExecuteTime" not in cell.metadata, (
            f"{path.name} cell {i} stores execution timing metadata"
        )


@pytest.mark.parametrize("path", EXECUTED, ids=_ids(EXECUTED))
def test_executed_notebooks_run_in_order(path):
    nb = read(path)
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(counts)}; "
        f"re-run it top to bottom with `make notebooks NOTEBOOKS={path.relative_to(ROOT)}`"
    )
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "execute_result":
                assert out.execution_count == cell.execution_count


@pytest.mark.parametrize("path", EXECUTED, ids=_ids(EXECUTED))
def test_no_errors_or_machine_paths_in_outputs(path):
    nb = read(path)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.outputs:
            assert out.output_type != "error", (
                f"{path.name} cell {i} stores an error ({out.get('ename')}: {out.get('evalue')}); "
                f"to show an error to learners, catch it and print the message"
            )
        for kind, text in text_of_outputs(cell):
            m = MACHINE_PATH.search(text)
            assert not m, (
                f"{path.name} cell {i} ({kind}) shows a machine path near "
                f"{text[max(0, m.start() - 40):m.end() + 40]!r}"
            )


@pytest.mark.parametrize("path", CLEAN, ids=_ids(CLEAN))
def test_exercises_are_stored_without_outputs(path):
    nb = read(path)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [], f"{path.name} cell {i} has stored outputs"
        assert cell.execution_count is None, f"{path.name} cell {i} has execution count {cell.execution_count}"


# --- canonical form (course_lib/authoring/nb_canonical.py, used by `make notebooks`) ----------------------
def _nb_canonical():
    from course_lib.authoring import nb_canonical

    return nb_canonical


@pytest.mark.parametrize("path", EXECUTED, ids=_ids(EXECUTED))
def test_executed_notebooks_are_stored_canonically(path):
    canon = _nb_canonical()
    text = path.read_text(encoding="utf-8")
    assert canon.dumps(canon.canonicalize(nbformat.reads(text, as_version=4))) == text, (
        f"{path.name} is not in canonical form; run `make notebooks NOTEBOOKS={path.relative_to(ROOT)}` "
        f"(or `python -m course_lib.authoring.nb_canonical {path.relative_to(ROOT)}` if only the metadata is off)"
    )


def test_canonicalize_fixes_counts_metadata_and_widget_views():
    canon = _nb_canonical()
    v4 = nbformat.v4
    nb = v4.new_notebook(metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {}},
                                   "kernelspec": {"name": "python3-custom", "display_name": "x"},
                                   "language_info": {"name": "python", "version": "3.11.7"}})
    widget = v4.new_output("display_data", data={
        "text/plain": "Slider(value=1)",
        "application/vnd.jupyter.widget-view+json": {"model_id": "ab" * 16, "version_major": 2,
                                                     "version_minor": 0}})
    only_view = v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "cd" * 16, "version_major": 2,
                                                     "version_minor": 0}})
    nb.cells = [
        v4.new_markdown_cell("# Title"),
        v4.new_code_cell("x = 1", execution_count=7, metadata={"execution": {"iopub.status.idle": "t"}}),
        v4.new_code_cell("x", execution_count=3,
                         outputs=[v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=3)]),
        v4.new_code_cell("slider", execution_count=9, outputs=[widget, only_view]),
    ]
    out = canon.canonicalize(nb)
    assert "widgets" not in out.metadata
    assert out.metadata.kernelspec.name == "python3"
    assert "version" not in out.metadata.language_info
    code = [c for c in out.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, 3]
    assert code[1].outputs[0].execution_count == 2
    assert "execution" not in code[0].metadata
    assert code[2].outputs == [v4.new_output("display_data", data={"text/plain": "Slider(value=1)"})]
    nbformat.validate(out)
    # idempotent, and the exercise form has no outputs at all
    assert canon.dumps(canon.canonicalize(out)) == canon.dumps(out)
    stripped = canon.strip_outputs(out)
    assert all(c.outputs == [] and c.execution_count is None for c in stripped.cells if c.cell_type == "code")


@pytest.mark.notebook
def test_run_notebooks_executes_canonically(tmp_path):
    """`make notebooks` end to end on a small notebook: same env as nbval, canonical result,
    and a failing notebook is left untouched."""
    from course_lib.authoring import run_notebooks

    v4 = nbformat.v4
    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    nbformat.write(v4.new_notebook(cells=[
        v4.new_markdown_cell("# t"),
        v4.new_code_cell("import os\nprint(os.environ['COURSE_FAST'], os.environ['MPLBACKEND'])"),
        v4.new_code_cell("6 * 7"),
    ]), good)
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell("1 / 0")]), bad)
    before = bad.read_bytes()

    assert run_notebooks.main([str(good), str(bad), "--timeout", "60"]) == 1
    assert bad.read_bytes() == before
    nb = read(good)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2]
    assert code[0].outputs[0].text == "1 module://matplotlib_inline.backend_inline\n"
    assert code[1].outputs[0].data["text/plain"] == "42"
    assert nb.metadata.kernelspec.name == "python3" and "widgets" not in nb.metadata
