"""Figures of the course. Every function returns a ``matplotlib.figure.Figure`` (it never calls
``plt.show()``), with a title and axis labels that carry units, so tests can check both the labels and
that the plotted data equal course_lib's values.

Lesson modules live beside this file (``course_lib/plots/<topic>.py``) and are re-exported here.
"""
from __future__ import annotations

from ._base import UNIT_PATTERN, label_has_unit, new_figure
from .data_per_token import gemv_cost, plot_bytes_per_token, plot_cache_vs_weights, plot_ridge_points
from .gemv import plot_bandwidth_vs_size, plot_dtype_times, plot_machines, plot_predicted_vs_measured
from .kv_cache import plot_kv_crossover, plot_kv_vs_context
from .latency import plot_total_vs_tokens, plot_tpot_vs_context

__all__ = [
    "UNIT_PATTERN", "label_has_unit", "new_figure",
    "gemv_cost", "plot_bytes_per_token", "plot_cache_vs_weights", "plot_ridge_points",
    "plot_bandwidth_vs_size", "plot_dtype_times", "plot_machines", "plot_predicted_vs_measured",
    "plot_kv_crossover", "plot_kv_vs_context",
    "plot_total_vs_tokens", "plot_tpot_vs_context",
]
