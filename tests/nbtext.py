"""Read what a stored notebook shows a reader: markdown cells plus text outputs (streams, text/markdown,
text/plain). Lesson tests check that every number the lesson states is the one course_lib computes."""
from __future__ import annotations

from pathlib import Path

import nbformat


def shown_text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
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
