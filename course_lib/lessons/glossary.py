"""The course glossary: each term, a short definition and the lesson that teaches it.

Lessons: 00

The terms live in ``course_lib/data/glossary.json``. Definitions contain no measured or derived
numbers with units; lessons compute those with ``course_lib`` where they need them.

    from course_lib.lessons import glossary
    glossary.define("TTFT").lesson      # 6
    glossary.as_markdown(lesson=3)      # a Markdown table of lesson 3's terms
    glossary.grouped_markdown()         # one collapsed table per lesson (lesson 00 shows this)
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from course_lib.core.data import load_catalog
from course_lib.core.validation import require_choice, require_count

__all__ = ["Term", "terms", "define", "for_lesson", "as_markdown", "grouped_markdown"]


class Term(NamedTuple):
    term: str
    definition: str
    lesson: int


@lru_cache(maxsize=None)
def _terms() -> tuple[Term, ...]:
    data = load_catalog("glossary")
    return tuple(Term(t["term"], t["definition"], int(t["lesson"])) for t in data["terms"])


def terms() -> list[Term]:
    """All terms as ``(term, definition, lesson)`` tuples, grouped by lesson in teaching order."""
    return sorted(_terms(), key=lambda t: t.lesson)


def define(term: str) -> Term:
    """One term, looked up case-insensitively (``"kv cache"`` finds ``"KV cache"``)."""
    by_key = {t.term.lower(): t for t in _terms()}
    return by_key[require_choice("term", term, by_key)]


def for_lesson(lesson: int) -> list[Term]:
    """The terms lesson ``lesson`` introduces (possibly none)."""
    n = require_count("lesson", lesson)
    return [t for t in _terms() if t.lesson == n]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def as_markdown(lesson: int | None = None) -> str:
    """A Markdown table ``| Term | Definition | Lesson |`` of all terms, or of one lesson's terms."""
    rows = terms() if lesson is None else for_lesson(lesson)
    lines = ["| Term | Definition | Lesson |", "|---|---|---|"]
    lines += [f"| **{_cell(t.term)}** | {_cell(t.definition)} | {t.lesson:02d} |" for t in rows]
    return "\n".join(lines)


def grouped_markdown(open_lessons: tuple[int, ...] = ()) -> str:
    """Every term, one collapsible section per lesson (``<details>``: "Lesson 01 · Units: bytes and
    parameters, 12 terms"), each holding :func:`as_markdown` of that lesson. Lessons in ``open_lessons``
    start expanded. Lesson titles come from the course map (``course_lib/data/lessons.json``)."""
    from course_lib.lessons import lesson_map

    opened = {require_count("open_lessons", n) for n in open_lessons}
    titles = {int(les["n"]): les["title"] for les in lesson_map.lessons()}
    parts = []
    for n in sorted({t.lesson for t in _terms()}):
        k = len(for_lesson(n))
        title = titles.get(n, "")
        summary = f"Lesson {n:02d}" + (f" · {title}" if title else "") + f" ({k} term{'s' if k != 1 else ''})"
        attr = " open" if n in opened else ""
        parts.append(f"<details{attr}><summary><b>{summary}</b></summary>\n\n{as_markdown(lesson=n)}\n\n</details>")
    return "\n\n".join(parts)
