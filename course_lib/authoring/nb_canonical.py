"""Canonical form of the course notebooks, so that re-running them produces small, stable diffs.

Lessons: none

``canonicalize(nb)`` (in place, also returned):

* notebook metadata: no widget state (``metadata.widgets``), kernelspec ``python3``, a
  ``language_info`` without the interpreter's version; any other metadata is kept;
* code cells: execution counts 1..n in document order (``execute_result`` outputs get their
  cell's count), no per-cell timing metadata (``execution``, ``ExecuteTime``);
* widget views (``application/vnd.jupyter.widget-view+json``) are dropped from outputs: without
  the widget state they point at nothing, and a front end would show "model not found" instead
  of the text/plain (or text/html) fallback that the widget also sent. nbval ignores that MIME
  type, so this changes nothing it compares;
* outputs (images included) are otherwise kept exactly as the kernel produced them;
* nbformat 4.5 (cell ids kept; missing ids get deterministic ones).

``write_canonical(nb, path)`` writes it the way nbformat does (1-space indent, sorted keys,
trailing newline) and only touches the file when its bytes change.

Usable as a command too: ``python -m course_lib.authoring.nb_canonical NB.ipynb ...`` rewrites the files
in canonical form without executing them (``--check`` only reports, exit 1 if any would change).
:mod:`course_lib.authoring.run_notebooks` (``make notebooks``) applies it as its last step.

Serves no lesson: an authoring tool.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

from course_lib.authoring.kernel import KERNEL_NAME

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": KERNEL_NAME}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
#: Cell-metadata keys that only record when/how long a run took.
TIMING_KEYS = ("execution", "ExecuteTime")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def canonicalize(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Bring ``nb`` (nbformat v4) into canonical form, in place; returns it."""
    if nb.get("nbformat") != 4:
        raise ValueError(f"nb must be an nbformat v4 notebook, got nbformat {nb.get('nbformat')!r}")
    nb.nbformat_minor = max(int(nb.get("nbformat_minor", 5)), 5)
    meta = nb.setdefault("metadata", nbformat.NotebookNode())
    meta.pop("widgets", None)
    meta["kernelspec"] = nbformat.from_dict(copy.deepcopy(KERNELSPEC))
    meta["language_info"] = nbformat.from_dict(copy.deepcopy(LANGUAGE_INFO))

    count = 0
    used_ids: set[str] = set()
    for index, cell in enumerate(nb.cells):
        cell_id = cell.get("id")
        if not cell_id or cell_id in used_ids:
            cell_id = f"cell-{index:03d}"
            while cell_id in used_ids:
                cell_id += "x"
            cell["id"] = cell_id
        used_ids.add(cell_id)
        for key in TIMING_KEYS:
            cell.metadata.pop(key, None)
        if cell.cell_type != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        count += 1
        cell.execution_count = count
        kept = []
        for output in cell.outputs:
            if output.get("output_type") == "execute_result":
                output["execution_count"] = count
            data = output.get("data")
            if data is not None and WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
                output.get("metadata", {}).pop(WIDGET_VIEW, None)
                if not data:  # nothing else to show
                    continue
            kept.append(output)
        cell.outputs = kept
    return nb


def strip_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Canonical form without outputs (how exercises/ are stored)."""
    canonicalize(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def dumps(nb: nbformat.NotebookNode) -> str:
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


def write_canonical(nb: nbformat.NotebookNode, path: str | Path) -> bool:
    """Write ``nb`` canonically to ``path``; return True when the file's content changed."""
    path = Path(path)
    canonicalize(nb)
    nbformat.validate(nb)
    text = dumps(nb)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.authoring.nb_canonical",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks to rewrite")
    parser.add_argument("--check", action="store_true", help="report only; exit 1 if any would change")
    args = parser.parse_args(argv)
    changed = []
    for path in args.paths:
        nb = nbformat.read(path, as_version=4)
        before = path.read_text(encoding="utf-8")
        if args.check:
            if dumps(canonicalize(nb)) != before:
                changed.append(path)
        elif write_canonical(nb, path):
            changed.append(path)
    for path in changed:
        print(("not canonical: " if args.check else "rewrote: ") + str(path))
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
