"""Figures of the course. Every function returns a ``matplotlib.figure.Figure`` (it never calls
``plt.show()``), with a title and axis labels that carry units, so tests can check both the labels and
that the plotted data equal course_lib's values.

Lesson modules live beside this file (``course_lib/lessons/plots/<topic>.py``) and are re-exported here.
The numbers they draw are computed in :mod:`course_lib.core` (``core.roofline`` for lessons 02 and 06).

Lessons: 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

from course_lib.lessons.plots._base import UNIT_PATTERN, label_has_unit, new_figure
from course_lib.lessons.plots.data_per_token import plot_bytes_per_token, plot_cache_vs_weights, plot_ridge_points
from course_lib.lessons.plots.gemv import (plot_bandwidth_vs_size, plot_dtype_times, plot_machines,
                                           plot_predicted_vs_measured)
from course_lib.lessons.plots.kv_cache import plot_kv_crossover, plot_kv_vs_context
from course_lib.lessons.plots.latency import plot_total_vs_tokens, plot_tpot_vs_context
from course_lib.lessons.plots.prefill_decode import (plot_attention_share, plot_batching, plot_roofline,
                                                     plot_total_vs_generated, plot_tpot_measured, plot_ttft_fit)
from course_lib.lessons.plots.caching import (plot_cache_memory, plot_hit_rate_vs_budget,
                                              plot_measured_vs_predicted_ttft, plot_session_prefill,
                                              plot_ttft_hit_vs_miss)
from course_lib.lessons.plots.compare import plot_comparison, plot_efficiencies
from course_lib.lessons.plots.capstone import plot_latency_throughput

__all__ = [
    "UNIT_PATTERN", "label_has_unit", "new_figure",
    "plot_bytes_per_token", "plot_cache_vs_weights", "plot_ridge_points",
    "plot_bandwidth_vs_size", "plot_dtype_times", "plot_machines", "plot_predicted_vs_measured",
    "plot_kv_crossover", "plot_kv_vs_context",
    "plot_total_vs_tokens", "plot_tpot_vs_context",
    "plot_attention_share", "plot_batching", "plot_roofline", "plot_total_vs_generated", "plot_tpot_measured",
    "plot_ttft_fit",
    "plot_cache_memory", "plot_hit_rate_vs_budget", "plot_measured_vs_predicted_ttft", "plot_session_prefill",
    "plot_ttft_hit_vs_miss",
    "plot_comparison", "plot_efficiencies",
    "plot_latency_throughput",
]
