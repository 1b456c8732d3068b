"""Execute a measurement lesson against a recorded run, as a learner's kernel would see it (tests only).

    from replay import executed_text
    text = executed_text(repo_root / "notebooks" / "05_gemv_timing.ipynb", BUSY)

The notebook runs top to bottom in a fresh course kernel (``course_lib.authoring.kernel``'s, as
``run_notebooks`` starts it) with ``COURSE_MEASUREMENTS=replay:DIR``: every measurement comes from the recording,
nothing is timed. Returns what the notebook shows (``nbtext.shown_text``'s rendering); the file on disk is
never written.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_lib.authoring import kernel

#: recordings of the measurement lessons (tests/fixtures/recordings/<name>/NN.json)
RECORDINGS = Path(__file__).resolve().parent / "fixtures" / "recordings"


def executed(path: Path, recording: Path) -> nbformat.NotebookNode:
    """``path`` executed with its measurements replayed from the folder ``recording`` (figures drawn but not
    rendered: the Agg backend, so that only the text is produced, which is what these tests read)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, startup_timeout=kernel.STARTUP_TIMEOUT_S,
                            kernel_manager_class=kernel.CurrentEnvKernelManager, kernel_name=kernel.KERNEL_NAME,
                            resources={"metadata": {"path": str(Path(path).parent.resolve())}})
    env = kernel.launch_env(fast=True, backend="agg", measurements=f"replay:{Path(recording).resolve()}")
    client.execute(env=env, stderr=subprocess.DEVNULL)
    return nb


def shown(nb: nbformat.NotebookNode) -> str:
    """Markdown cells and text outputs of ``nb``, as a reader sees them."""
    parts = []
    for c in nb.cells:
        if c.cell_type == "markdown":
            parts.append(c.source)
        for out in c.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            data = out.get("data", {})
            for mime in ("text/markdown", "text/plain"):      # what a reader sees: the Markdown, else the text
                if mime in data:
                    parts.append(data[mime])
                    break
    return "\n".join(parts)
