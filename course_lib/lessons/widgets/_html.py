"""The HTML pieces every widget's output is made of: a labelled table row, a table, notes, an error box.

Lessons: 00, 01, 02, 03, 04, 06, 07, 09

One definition of the markup (and its inline styles), so the widgets look alike and a change of style
is made once. Labels and notes are HTML (callers escape what they interpolate); values are escaped
unless ``escape=False``.
"""
from __future__ import annotations

import html
from collections.abc import Iterable

__all__ = ["row", "table", "notes", "caption", "error_box", "SNAPSHOT_CLASS", "SNAPSHOT_NOTE", "snapshot_parts",
           "snapshot_html", "Snapshot"]

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


# --------------------------------------------------------------------------------------------------
# Static snapshots: what a stored notebook shows where the live widget cannot be drawn
# --------------------------------------------------------------------------------------------------
#: The class of every snapshot's outer ``<div>`` (tests/test_widget_snapshots.py looks for it).
SNAPSHOT_CLASS = "course-widget-snapshot"
SNAPSHOT_NOTE = "A snapshot of this widget's reading: run the cell to get the interactive controls."


def _control_text(w) -> str | None:
    """``"Model: mistral-7b"`` for a control with a description and a value; None for anything else."""
    desc = getattr(w, "description", None)
    if not desc or not hasattr(w, "value"):
        return None
    if hasattr(w, "label") and getattr(w, "options", None) is not None:   # Dropdown: the shown label
        label = w.label
        shown = ", ".join(map(str, label)) if isinstance(label, tuple) else str(label)
    elif isinstance(w.value, tuple):                                          # SelectMultiple by value
        labels = getattr(w, "label", None) or w.value
        shown = ", ".join(map(str, labels))
    elif getattr(w, "readout_format", None) and isinstance(w.value, float):
        try:
            shown = format(w.value, w.readout_format)
        except (ValueError, TypeError):
            shown = str(w.value)
    else:
        shown = str(w.value)
    return f"<b>{html.escape(str(desc))}</b>: {html.escape(shown)}"


def snapshot_parts(widget) -> tuple[list[str], list[str]]:
    """(settings, readings) of a widget tree, in display order: each control as ``"Description: value"``
    (HTML), each HTML widget's markup and each line of labels (an ``HBox`` of Labels joined by spaces)."""
    settings, readings = [], []

    def walk(w) -> None:
        children = getattr(w, "children", None)
        if children is not None:
            labels = [c for c in children if type(c).__name__ == "Label"]
            if labels and len(labels) == len(children):          # a line of labels: "TTFT: 12 ms hit: ..."
                line = " ".join(html.escape(str(c.value)) for c in labels if c.value)
                if line:
                    readings.append(f"<p style=\"margin:0.2em 0\">{line}</p>")
                return
            for c in children:
                walk(c)
            return
        kind = type(w).__name__
        if kind in ("HTML", "HTMLMath"):
            if w.value:
                readings.append(w.value)
        elif kind == "Label":
            if w.value:
                readings.append(f"<p style=\"margin:0.2em 0\">{html.escape(str(w.value))}</p>")
        else:
            text = _control_text(w)
            if text is not None:
                settings.append(text)

    walk(widget)
    return settings, readings


def snapshot_html(widget, body: str | None = None) -> str:
    """The static snapshot of ``widget``: its settings on one line, then ``body`` (default: every reading
    of its tree, as :func:`snapshot_parts` finds them), then a note saying it is a snapshot."""
    settings, readings = snapshot_parts(widget)
    head = (f'<p class="course-widget-snapshot-settings" style="color:#333;margin:0.2em 0">'
            f'{" &middot; ".join(settings)}</p>') if settings else ""
    shown = "\n".join(readings) if body is None else body
    return (f'<div class="{SNAPSHOT_CLASS}">{head}\n{shown}\n'
            f'<p style="color:#555;margin-top:0.3em"><i>{SNAPSHOT_NOTE}</i></p></div>')


class Snapshot:
    """Mixin for the course's widget classes (put it before ``widgets.VBox``): the display bundle keeps
    the live widget view and adds a static ``text/html`` snapshot of the current reading, and its
    ``text/plain`` is one readable line instead of the widget tree's repr.

    A front end that can draw the widget (JupyterLab or Voila with a kernel) shows the live widget; one
    that cannot (a stored notebook opened before it is run, a notebook viewer, nbconvert) shows the
    snapshot. Override :meth:`snapshot_body` to show something other than every reading of the tree.
    """

    def snapshot_body(self) -> str | None:
        """The HTML between the settings line and the note; None: every reading of the widget tree."""
        return None

    def snapshot_text(self) -> str:
        """The bundle's ``text/plain``: the widget's class and what to do to use it."""
        return f"{type(self).__name__}: an interactive widget (run the cell to use it)"

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        if data is None:
            return None
        data["text/html"] = snapshot_html(self, self.snapshot_body())
        data["text/plain"] = self.snapshot_text()
        return data
