"""Lesson times have one source, ``course_lib/data/lessons.json``: each lesson's parts (reading the lesson,
doing its exercises) add up to its total, the README's lesson map shows exactly those numbers, and every
lesson notebook states the same parts where it gives its estimated time."""
from __future__ import annotations

import re

import nbformat
import pytest

from course_lib.lessons import lesson_map

from repo import ROOT

LESSONS = lesson_map.lessons()
IDS = [les["n"] for les in LESSONS]

# "**Estimated time:** 70 minutes: 40 for the lesson, 30 for the exercises." (lesson_map.estimated_time) or the
# older hand-written "40 minutes for the lesson (...), 30 minutes for the exercises."
_LESSON = re.compile(r"(\d+)(?: minutes)? for the lesson")
_EXERCISES = re.compile(r"(\d+)(?: minutes)? for the\s+exercises")
_ESTIMATE = re.compile(r"Estimated time:\*\*[^\n]*(?:\n[^\n#*]*)?")


def _shown(path) -> str:
    """Markdown cells and rendered outputs of a stored notebook (what a reader sees)."""
    nb = nbformat.read(path, as_version=4)
    parts = []
    for c in nb.cells:
        if c.cell_type == "markdown":
            parts.append(c.source)
        for out in c.get("outputs", []):
            parts.append(out.get("data", {}).get("text/markdown", ""))
            parts.append(out.get("text", "") if out.get("output_type") == "stream" else "")
    return "\n".join(parts)


@pytest.mark.parametrize("les", LESSONS, ids=IDS)
def test_parts_add_up_to_the_total(les):
    parts = les["time_parts"]
    assert set(parts) == {"lesson", "exercises"}, les["n"]
    assert all(isinstance(v, int) and v >= 0 for v in parts.values()) and parts["lesson"] > 0, les["n"]
    assert parts["lesson"] + parts["exercises"] == les["time_min"], (
        f"lesson {les['n']}: {parts} add up to {sum(parts.values())}, lessons.json says {les['time_min']}")


def test_readme_shows_the_times_of_lessons_json():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for les in LESSONS:
        row = next((line for line in readme.splitlines() if line.startswith(f"| {les['n']} | **")), None)
        assert row is not None, f"README has no row for lesson {les['n']}"
        time_cell = row.rstrip(" |").rsplit("|", 1)[-1].strip()
        numbers = [int(x) for x in re.findall(r"\d+", time_cell)]
        parts = les["time_parts"]
        want = [les["time_min"]] + ([parts["lesson"], parts["exercises"]] if parts["exercises"] else [])
        assert numbers == want, f"README says {time_cell!r} for lesson {les['n']}, lessons.json {want}"


@pytest.mark.parametrize("les", [les for les in LESSONS if les["time_parts"]["exercises"]], ids=lambda les: les["n"])
def test_each_lesson_states_the_parts_of_lessons_json(les):
    path = ROOT / "notebooks" / f"{les['stem']}.ipynb"
    if not path.exists():
        pytest.skip(f"{path.name} is not written yet")
    m = _ESTIMATE.search(_shown(path))
    assert m, f"{path.name} states no 'Estimated time:'"
    text = m.group(0)
    said = [int(x.group(1)) if x else None for x in (_LESSON.search(text), _EXERCISES.search(text))]
    parts = les["time_parts"]
    assert said == [parts["lesson"], parts["exercises"]], (
        f"{path.name} says {text!r}; lessons.json: {parts} (print lesson_map.estimated_time({les['n']!r}))")


def test_estimated_time_reads_lessons_json():
    les = LESSONS[1]
    text = lesson_map.estimated_time(les["n"])
    assert str(les["time_min"]) in text
    assert _LESSON.search(text).group(1) == str(les["time_parts"]["lesson"])
    assert _EXERCISES.search(text).group(1) == str(les["time_parts"]["exercises"])
    assert lesson_map.estimated_time(0) == f"**Estimated time:** {LESSONS[0]['time_min']} minutes."
    with pytest.raises(ValueError, match="n must be a lesson number"):
        lesson_map.lesson(42)
