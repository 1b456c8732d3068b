"""Every lesson's title is styled one way (issue 31): ``# Lesson NN — Title`` as the first line of its first cell."""
from __future__ import annotations

import json
import re

from conftest import REPO_ROOT as ROOT

LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_lesson_titles_have_one_style():
    assert len(LESSONS) >= 11
    for path in LESSONS:
        first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
        line = "".join(first["source"]).splitlines()[0]
        assert first["cell_type"] == "markdown", path.name
        assert re.fullmatch(rf"# Lesson {path.name[:2]} — \S.*", line), f"{path.name}: {line!r}"
