"""The map of the course (``course_lib/data/lessons.json``): one source for the README and lesson 00.

Lessons: 00
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from course_lib.core.data import load_catalog

__all__ = ["lessons", "is_ready", "map_markdown"]

_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@lru_cache(maxsize=1)
def lessons() -> tuple[dict, ...]:
    return tuple(load_catalog("lessons")["lessons"])


def is_ready(lesson: dict, notebooks: Path = _NOTEBOOKS) -> bool:
    """A lesson is ready when its notebook exists in this copy of the course."""
    return (notebooks / f"{lesson['stem']}.ipynb").exists()


def map_markdown(notebooks: Path = _NOTEBOOKS) -> str:
    """The lesson table: number, title (file), what you will be able to do, time; lessons still being written
    are marked *(coming)*."""
    rows = ["| # | Lesson (`notebooks/….ipynb`) | You will be able to… | Time |", "|---|---|---|---|"]
    for les in lessons():
        coming = "" if is_ready(les, notebooks) else " *(coming)*"
        rows.append(f"| {les['n']} | **{les['title']}**{coming} (`{les['stem']}`) | {les['outcome']} | "
                    f"{les['time_min']} min |")
    return "\n".join(rows)
