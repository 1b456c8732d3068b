"""The HTML pieces every widget's output is made of: a labelled table row, a table, notes, an error box.

Lessons: 00, 02, 03, 04, 06, 09

One definition of the markup (and its inline styles), so the widgets look alike and a change of style
is made once. Labels and notes are HTML (callers escape what they interpolate); values are escaped
unless ``escape=False``.
"""
from __future__ import annotations

import html
from collections.abc import Iterable

__all__ = ["row", "table", "notes", "caption", "error_box"]

_TH = '<th style="text-align:left;padding-right:1em">'
_NOTE_TD = '<td style="text-align:left;color:#555">'


def row(label: str, value: str, note: str = "", *, cls: str | None = None, strong: bool = False,
        nowrap: bool = False, escape: bool = True) -> str:
    """``<tr>`` of a label, a right-aligned value (``cls`` on its cell, bold if ``strong``) and a grey note."""
    style = "text-align:right;padding-right:1em" + (";font-weight:bold" if strong else "") + (
        ";white-space:nowrap" if nowrap else "")
    attr = f' class="{cls}"' if cls else ""
    shown = html.escape(value) if escape else value
    return f'<tr>{_TH}{label}</th><td{attr} style="{style}">{shown}</td>{_NOTE_TD}{note}</td></tr>'


def table(rows: Iterable[str], cls: str | None = None) -> str:
    """``<table>`` of ``rows`` (from :func:`row`), one per line."""
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}>\n" + "\n".join(rows) + "\n</table>"


def notes(texts: Iterable[str], cls: str | None = None) -> str:
    """Red warning paragraphs, one per text (HTML); '' when there are none."""
    attr = f' class="{cls}"' if cls else ""
    return "".join(f'<p{attr} style="color:#b00;margin:0.2em 0">{t}</p>' for t in texts)


def caption(text: str, cls: str | None = None) -> str:
    """The grey line under a table (HTML)."""
    attr = f' class="{cls}"' if cls else ""
    return f'<p{attr} style="color:#555;margin-top:0.3em">{text}</p>'


def error_box(message: str, prefix: str = "", *, cls: str | None = None, after: str = "") -> str:
    """The red box a widget shows instead of its reading: ``prefix`` + the escaped ``message`` + ``after``.

    ``cls`` adds the widget's own class before ``course-error`` (which every error box carries).
    """
    classes = f"{cls} course-error" if cls else "course-error"
    return f'<div class="{classes}" style="color:#b00">{prefix}{html.escape(message)}{after}</div>'
