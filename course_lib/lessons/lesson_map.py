"""The map of the course (``course_lib/data/lessons.json``): one source for the README and lesson 00.

Lessons: 00, 01, 02, 03, 04
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from course_lib.core.data import load_catalog

__all__ = ["lessons", "lesson", "is_ready", "map_markdown", "time_parts", "estimated_time"]

_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@lru_cache(maxsize=1)
def lessons() -> tuple[dict, ...]:
    return tuple(load_catalog("lessons")["lessons"])


def lesson(n) -> dict:
    """The map's entry of lesson ``n`` (``1`` or ``"01"``)."""
    key = f"{int(n):02d}" if not isinstance(n, str) else n
    for les in lessons():
        if les["n"] == key:
            return les
    raise ValueError(f"n must be a lesson number of the course map (00 to {lessons()[-1]['n']}), got {n!r}")


def time_parts(n) -> tuple[int, int]:
    """(minutes for reading the lesson, minutes for its exercises) of lesson ``n``, from lessons.json."""
    parts = lesson(n)["time_parts"]
    return int(parts["lesson"]), int(parts["exercises"])


def estimated_time(n) -> str:
    """The sentence a lesson prints: ``**Estimated time:** 70 minutes: 40 for the lesson, 30 for the exercises.``"""
    total, (les, ex) = lesson(n)["time_min"], time_parts(n)
    if not ex:
        return f"**Estimated time:** {total} minutes."
    return f"**Estimated time:** {total} minutes: {les} for the lesson, {ex} for the exercises."


def is_ready(lesson: dict, notebooks: Path = _NOTEBOOKS) -> bool:
    """A lesson is ready when its notebook exists in this copy of the course."""
    return (notebooks / f"{lesson['stem']}.ipynb").exists()


def _parts_text(les: dict) -> str:
    parts = les.get("time_parts") or {}
    return f" ({parts['lesson']} + {parts['exercises']})" if parts.get("exercises") else ""


def map_markdown(notebooks: Path = _NOTEBOOKS) -> str:
    """The lesson table: number, title (file), what you will be able to do, time; lessons still being written
    are marked *(coming)*."""
    rows = ["| # | Lesson (`notebooks/….ipynb`) | You will be able to… | Time (lesson + exercises) |",
            "|---|---|---|---|"]
    for les in lessons():
        coming = "" if is_ready(les, notebooks) else " *(coming)*"
        rows.append(f"| {les['n']} | **{les['title']}**{coming} (`{les['stem']}`) | {les['outcome']} | "
                    f"{les['time_min']} min{_parts_text(les)} |")
    return "\n".join(rows)
