"""Lesson 09's figure: the latency–throughput trade-off of a deployment over the batch size.

Lessons: 09

:func:`plot_latency_throughput` plots, for each batch size of
:func:`course_lib.core.capstone.latency_throughput_curve`, the time per output token one user sees (TPOT,
in ms) against the tokens per second the whole batch produces (aggregate tokens/s). Batches whose
weights and KV cache fit in one GPU's memory form the line; batches that do not fit are drawn as
crosses ("does not fit"), so the curve shows where memory, not latency, ends the batch. The current
batch is ringed, and an optional TPOT budget is drawn as a horizontal line.

Every plotted value is the dashboard's (``course_lib.core.capstone.compute``); this module only draws.
"""
from __future__ import annotations

from collections.abc import Iterable

from matplotlib.figure import Figure

from course_lib.core.capstone import DashboardState, compute, describe, latency_throughput_curve
from course_lib.core.units import format_time
from course_lib.core.validation import require_positive
from course_lib.lessons.plots._base import new_figure

__all__ = ["plot_latency_throughput", "TITLE", "XLABEL", "YLABEL"]

TITLE = "Latency vs throughput over the batch"
XLABEL = "aggregate throughput (tokens/s)"
YLABEL = "TPOT per user (ms)"


def plot_latency_throughput(state: DashboardState | None = None, batches: Iterable[int] | None = None,
                            tpot_budget: float | None = None, plan=None) -> Figure:
    """TPOT (ms) against aggregate tokens/s, one point per batch size (see the module docstring).

    ``state`` defaults to ``DashboardState()``; ``batches`` to ``default_batches(state.batch)``;
    ``tpot_budget`` (seconds) draws a horizontal budget line. ``plan`` (a ``ContinuousPlan`` at ``state.batch``
    sequences) marks its steady state too: the decode step with the newcomers' prefills, the TPOT users see.
    """
    state = DashboardState() if state is None else state
    if not isinstance(state, DashboardState):
        raise TypeError(f"state must be a DashboardState, got {type(state).__name__}")
    if tpot_budget is not None:
        tpot_budget = require_positive("tpot_budget", tpot_budget)
    points = latency_throughput_curve(state, batches)
    fig, ax = new_figure(f"{TITLE}\n{describe(state)}", XLABEL, YLABEL, figsize=(8, 4.4))
    fit = [p for p in points if p.fits is not False]
    over = [p for p in points if p.fits is False]
    if fit:
        ax.plot([p.tps_aggregate for p in fit], [p.tpot * 1e3 for p in fit], marker="o",
                label="fits in memory")
        # label the points that are not crowded: a label at least 7% of the x range from the last one
        span = max(p.tps_aggregate for p in fit) or 1.0
        last_x = None
        for p in fit:
            if last_x is not None and p.tps_aggregate - last_x < 0.07 * span and p.batch != state.batch:
                continue
            last_x = p.tps_aggregate
            ax.annotate(f"B={p.batch}", (p.tps_aggregate, p.tpot * 1e3), textcoords="offset points",
                        xytext=(4, -10), fontsize="x-small")
    if over:
        ax.plot([p.tps_aggregate for p in over], [p.tpot * 1e3 for p in over], linestyle="none", marker="x",
                color="tab:red", markersize=8, label="does not fit in memory")
    cur = compute(state)
    what = "decode step alone" if plan is not None else "current"
    ax.plot([cur.tps_aggregate], [cur.tpot * 1e3], linestyle="none", marker="o", markersize=14,
            markerfacecolor="none", markeredgecolor="black",
            label=f"{what}: batch {state.batch}, TPOT {format_time(cur.tpot)}")
    if plan is not None:
        ax.plot([plan.tokens_per_s_per_gpu * state.tensor_parallel], [plan.tpot * 1e3], linestyle="none",
                marker="D", markersize=10, color="tab:purple",
                label=f"steady state with prefills: {plan.sequences} in flight, TPOT {format_time(plan.tpot)}")
    if tpot_budget is not None:
        ax.axhline(tpot_budget * 1e3, color="tab:green", linestyle="--",
                   label=f"TPOT budget {format_time(tpot_budget)}")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="upper left")
    return fig
