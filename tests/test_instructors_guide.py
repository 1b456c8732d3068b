"""docs/INSTRUCTORS.md states the lesson lengths of ``course_lib/data/lessons.json``, and nothing else.

The guide's lesson-times table (between ``<!-- lesson-times:begin ... -->`` and ``<!-- lesson-times:end -->``) is
generated from lessons.json by :func:`lesson_times_table`; ``python tests/test_instructors_guide.py`` prints it, to
paste after a change of lessons.json. The memory table names every lesson, the snippets that
tests/test_hub.py runs are present (that test runs them, in ``make tour``), and every instructor's
``nbgrader_config.py`` grades in the protected mode (``configure(c)``).
"""
from __future__ import annotations

import re

from course_lib.lessons import lesson_map

from repo import ROOT

GUIDE = ROOT / "docs" / "INSTRUCTORS.md"


def _hours(minutes: int) -> str:
    h, m = divmod(minutes, 60)
    return f"{h} h {m} min" if h else f"{m} min"


def lesson_times_table() -> str:
    """The guide's table of lesson lengths, from lessons.json."""
    rows = ["| lesson | title | lesson (min) | exercises (min) | total (min) |", "|---|---|---:|---:|---:|"]
    reading = exercises = total = 0
    for les in lesson_map.lessons():
        parts = les["time_parts"]
        rows.append(f"| {les['n']} | {les['title']} | {parts['lesson']} | {parts['exercises']} | {les['time_min']} |")
        reading, exercises, total = reading + parts["lesson"], exercises + parts["exercises"], total + les["time_min"]
    rows.append(f"| **all** | | **{reading}** ({_hours(reading)}) | **{exercises}** ({_hours(exercises)}) "
                f"| **{total}** ({_hours(total)}) |")
    return "\n".join(rows)


def _block(name: str) -> str:
    m = re.search(rf"<!-- {name}:begin[^>]*-->\n(.*?)\n<!-- {name}:end -->", GUIDE.read_text(), re.S)
    assert m, f"docs/INSTRUCTORS.md has the {name} block"
    return m.group(1).strip()


def test_lesson_times_match_lessons_json():
    assert _block("lesson-times") == lesson_times_table(), (
        "docs/INSTRUCTORS.md's lesson-times table differs from course_lib/data/lessons.json: "
        "paste the output of `python tests/test_instructors_guide.py`")


def test_memory_table_names_every_lesson():
    table = _block("lesson-memory")
    shown = re.findall(r"^\| (\d\d) ", table, re.M)
    assert shown == [les["n"] for les in lesson_map.lessons()]
    for value in re.findall(r"\| ([\d.]+) \|$", table, re.M):
        assert 0 < float(value) < 64


def test_guide_has_the_tested_snippets_and_no_placeholder():
    text = GUIDE.read_text()
    for name in ("scores", "changed_cells"):
        assert re.search(rf"<!-- tested: {name} -->\s*```python\n", text), name
    assert "PLACEHOLDER" not in text and "HUB_SERVER_RSS" not in text and "HUB_OWN_RSS" not in text


def test_every_instructor_nbgrader_config_grades_in_the_protected_mode():
    """Each ``nbgrader_config.py`` the guide gives an instructor (one that names the course directory) calls
    ``configure(c)`` (the course's grader in its sandbox), and no ``c.Execute`` option is set: it does nothing
    once ``configure(c)`` replaces ``Execute``."""
    text = GUIDE.read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
              if "nbgrader_config.py" in b and "CourseDirectory.root" in b]
    assert len(blocks) >= 2, "the hub's instructor config and the set-up without a hub"
    for b in blocks:
        assert re.search(r"^configure\(c\)", b, re.M) and "import configure" in b, b
        assert "insecure" not in b, b
        assert not re.search(r"^c\.Execute\.", b, re.M), b


if __name__ == "__main__":
    print(lesson_times_table())
