"""Shared figure conventions of the course's plots: unit-carrying labels, PNG rendering.

Lessons: 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import io
import re

from matplotlib.axes import Axes
from matplotlib.figure import Figure

#: an axis label carries its unit in brackets or parentheses, e.g. "context (tokens)", "TPOT [ms]"
UNIT_PATTERN = re.compile(r"[\(\[][^\)\]]+[\)\]]")


def label_has_unit(label: str) -> bool:
    return bool(UNIT_PATTERN.search(label or ""))


class CourseFigure(Figure):
    """A Figure that renders itself as a PNG in Jupyter.

    The course builds figures without pyplot (no global state, nothing to close), and a bare Figure
    only renders where pyplot has registered the inline formatter. ``_repr_png_`` makes the image
    appear in any kernel and in stored notebooks.
    """

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def new_figure(title: str, xlabel: str, ylabel: str, figsize=(7, 4)) -> tuple[Figure, Axes]:
    """A Figure with one Axes, titled and labelled. Labels must name their unit: "context (tokens)"."""
    for which, lab in (("xlabel", xlabel), ("ylabel", ylabel)):
        if not label_has_unit(lab):
            raise ValueError(f"{which} must name its unit in parentheses or brackets, got {lab!r}")
    fig = CourseFigure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax
