"""Figures of the course. Every function returns a ``matplotlib.figure.Figure`` (it never calls
``plt.show()``), with a title and axis labels that carry units, so tests can check both the labels and
that the plotted data equal course_lib's values.

Lesson modules live beside this file (``course_lib/plots/<topic>.py``) and are re-exported here.
"""
from __future__ import annotations

from ._base import new_figure, UNIT_PATTERN, label_has_unit  # noqa: F401
