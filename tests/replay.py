"""Execute a measurement lesson against a recorded run, as a learner's kernel would see it (tests only).

    from replay import executed_text
    text = executed_text(repo_root / "notebooks" / "05_gemv_timing.ipynb", BUSY)

The notebook runs top to bottom in a fresh course kernel (``course_lib.authoring.run_notebooks``'
``ExecuteInCourseKernel``) with ``COURSE_MEASUREMENTS=replay:DIR``: every measurement comes from the recording,
nothing is timed. Returns what the notebook shows (``nbtext.shown_text``'s rendering); the file on disk is
never written.
"""
from __future__ import annotations

import os
from pathlib import Path

import nbformat

from course_lib.authoring.run_notebooks import ExecuteInCourseKernel, run
from course_lib.measure.record import ENV

#: recordings of the measurement lessons (tests/fixtures/recordings/<name>/NN.json)
RECORDINGS = Path(__file__).resolve().parent / "fixtures" / "recordings"


def executed(path: Path, recording: Path) -> nbformat.NotebookNode:
    """``path`` executed with its measurements replayed from the folder ``recording``."""
    nb = nbformat.read(path, as_version=4)
    old = os.environ.get(ENV)
    os.environ[ENV] = f"replay:{Path(recording).resolve()}"      # the kernel inherits it (kernel.launch_env)
    try:
        return run(nb, path, [ExecuteInCourseKernel(timeout=300)])
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old


def shown(nb: nbformat.NotebookNode) -> str:
    """Markdown cells and text outputs of ``nb``, as a reader sees them."""
    parts = []
    for c in nb.cells:
        if c.cell_type == "markdown":
            parts.append(c.source)
        for out in c.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            for mime in ("text/markdown", "text/plain"):
                if mime in out.get("data", {}):
                    parts.append(out.data[mime])
    return "\n".join(parts)
