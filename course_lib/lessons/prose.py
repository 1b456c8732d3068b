"""Prose whose numbers are computed: Markdown display objects built from code.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10

The course's rule is that every number with a unit that a lesson states comes out of
``course_lib``, never typed by hand. A lesson therefore writes such sentences in a (hidden)
code cell::

    from course_lib.lessons.prose import md
    size = weight_bytes(get_model("mistral-7b").params, "fp16")
    md(f"In fp16 the weights take **{format_bytes(size)}** ({format_bytes(size, 'iec')}).")

and the notebook shows rendered Markdown. ``md`` only builds the display object; it does no
arithmetic of its own. Helpers here cover what lessons repeat: thousands separators, self-check
questions with a hidden answer (``<details>``), and formulas rendered from ``course_lib.core.formulas``.

This module imports IPython lazily (inside the functions), so importing it costs nothing in
plain Python and it never drags IPython into the core library.
"""
from __future__ import annotations

import html
import numbers
import textwrap

__all__ = ["md", "md_text", "details", "count", "formula", "table"]


def md_text(template: str, /, **values) -> str:
    """The Markdown text ``md`` would display, as a string.

    ``template`` is dedented (so triple-quoted strings can be indented with the code) and, when
    keyword ``values`` are given, filled in with ``str.format``. Without values the text is
    used as is, so f-strings (whose braces are already resolved) work directly.
    """
    if not isinstance(template, str):
        raise TypeError(f"template must be a str of Markdown, got {type(template).__name__}")
    text = textwrap.dedent(template).strip("\n")
    if values:
        try:
            text = text.format(**values)
        except KeyError as exc:
            raise ValueError(
                f"template names {{{exc.args[0]}}} but no value of that name was given; "
                f"given: {', '.join(sorted(values))}"
            ) from None
    return text


def md(template: str, /, **values):
    """A Markdown display object (``IPython.display.Markdown``) built from ``template``.

    Make it the last expression of a code cell (or pass it to ``display``) to render it.
    See ``md_text`` for how ``template`` and ``values`` are combined.
    """
    from IPython.display import Markdown

    return Markdown(md_text(template, **values))


def count(n, /) -> str:
    """A whole number with thousands separators: ``count(7241732096) == '7,241,732,096'``."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise TypeError(f"n must be a whole number, got {type(n).__name__} {n!r}")
    if n != int(n):
        raise ValueError(f"n must be a whole number, got {n!r}")
    return f"{int(n):,}"


def details(question: str, answer: str, /) -> str:
    """A self-check question whose answer stays hidden until clicked (HTML ``<details>``).

    ``question`` is plain text (escaped); ``answer`` is Markdown, rendered inside the block.
    Returns a Markdown string, to be combined with others and passed to ``md``.
    """
    for name, value in (("question", question), ("answer", answer)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return (
        f"<details><summary>{html.escape(question.strip())}</summary>\n\n"
        f"{textwrap.dedent(answer).strip()}\n\n</details>"
    )


def formula(name: str, /) -> str:
    """The formula ``name`` from ``course_lib.core.formulas`` as a display equation (``$$lhs = rhs$$``)."""
    from course_lib.core import formulas  # imported lazily: formulas pulls in sympy

    return f"$${formulas.equation(name)}$$"


def table(header: list[str], rows: list[list], /) -> str:
    """A Markdown table from a header and rows of cells (cells converted with ``str``)."""
    if not header:
        raise ValueError("header must name at least one column")
    width = len(header)
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"rows[{i}] has {len(row)} cells, expected {width} (one per header column)")

    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    out = [line(header), "|" + "|".join("---" for _ in header) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)
