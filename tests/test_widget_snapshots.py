"""Every widget a stored notebook shows has a static snapshot of its reading.

A reader who opens a stored notebook without running it (GitHub, nbviewer, JupyterLab before the kernel
has run the cell) cannot see a live widget: the widget view points at a model that does not exist, and the
canonical form (course_lib.authoring.nb_canonical) drops it for that reason. What is left must show the
widget's current reading: a ``text/html`` snapshot (``course_lib.lessons.widgets._html.Snapshot``), and a
``text/plain`` that is a sentence, not the widget tree's repr (``UnitConverter(children=(Text(value=...``).

An output counts as a widget's when it carries a widget view, a snapshot, or a raw widget repr. Also: each
widget class of course_lib.lessons.widgets produces such a bundle when displayed.
"""
from __future__ import annotations

import re

import nbformat
import pytest

from repo import ROOT

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SNAPSHOT_CLASS = "course-widget-snapshot"
#: ipywidgets' repr of a widget tree: ``Name(children=(...`` or ``Dropdown(description=..., options=...``
RAW_REPR = re.compile(r"\b[A-Z]\w*\((?:children=\(|_dom_classes=|description=|value=|layout=Layout\()")
NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "app") for p in (ROOT / d).glob("*.ipynb"))


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def widget_outputs(path):
    """(cell index, output data) of every output of ``path`` that shows a widget."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            plain, shown = _text(data.get("text/plain")), _text(data.get("text/html"))
            if WIDGET_VIEW in data or SNAPSHOT_CLASS in shown or RAW_REPR.search(plain):
                yield i, data


def test_the_raw_repr_pattern_catches_widget_reprs_only():
    for raw in ("UnitConverter(children=(Text(value='14.96 GB', description='Quantity', layout=Layout(w…",
                "Dropdown(description='Model', options=('a', 'b'), value='a')",
                "CapstoneDashboard(children=(HBox(children=(Dropdown(_dom_classes=('course-capstone-model',), …"):
        assert RAW_REPR.search(raw), raw
    for fine in ("UnitConverter: an interactive widget (run the cell to use it)",
                 "estimate_explorer('mistral-7b', 'rtx-4090', 'fp16', prompt_tokens=512, new_tokens=256)",
                 "<CourseFigure size 900x420 with 1 Axes>", "<IPython.core.display.Markdown object>",
                 "Estimate(model='mistral-7b')"):
        assert not RAW_REPR.search(fine), fine


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_widgets_show_a_snapshot(path):
    bad = []
    for i, data in widget_outputs(path):
        plain, shown = _text(data.get("text/plain")), _text(data.get("text/html"))
        if SNAPSHOT_CLASS not in shown:
            bad.append(f"cell {i}: no text/html snapshot")
        if RAW_REPR.search(plain):
            bad.append(f"cell {i}: raw widget repr in text/plain: {plain[:80]!r}")
    assert not bad, f"{path.relative_to(ROOT)} (re-run it with course_lib.authoring.run_notebooks): " + "; ".join(bad)


def _widgets():
    from course_lib.lessons.widgets import (bytes_per_token_explorer, cache_budget_explorer, estimate_explorer,
                                            kv_cache_explorer, kv_crossover_explorer, prefill_decode_explorer,
                                            prefix_cache_explorer, session_cache_explorer, tpot_explorer,
                                            unit_converter)
    return [estimate_explorer, unit_converter, bytes_per_token_explorer, kv_cache_explorer, kv_crossover_explorer,
            tpot_explorer, prefill_decode_explorer, prefix_cache_explorer, session_cache_explorer,
            cache_budget_explorer]


@pytest.mark.parametrize("factory", _widgets(), ids=lambda f: f.__name__)
def test_every_lesson_widget_displays_its_reading(factory):
    w = factory()
    data = w._repr_mimebundle_()
    assert WIDGET_VIEW in data                      # the live widget where a front end can draw it
    shown, plain = data["text/html"], data["text/plain"]
    assert SNAPSHOT_CLASS in shown and "run the cell" in shown
    assert not RAW_REPR.search(plain) and "run the cell to use it" in plain, plain
    # the snapshot holds the widget's current reading: every HTML output of its tree
    from course_lib.lessons.widgets._html import snapshot_parts

    settings, readings = snapshot_parts(w)
    assert settings and readings
    for r in readings:
        assert r in shown


def test_a_snapshot_follows_the_controls():
    from course_lib.lessons.widgets import unit_converter

    w = unit_converter("1 GB")
    before = w._repr_mimebundle_()["text/html"]
    w.text.value = "5 GiB"
    after = w._repr_mimebundle_()["text/html"]
    assert "5,368,709,120 B" in after and "5,368,709,120 B" not in before
