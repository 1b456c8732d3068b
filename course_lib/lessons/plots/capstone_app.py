"""The ``make app`` planner's figure: latency and throughput against the batch size, in two panels.

Lessons: 09

:func:`plot_app_curve` draws, for each batch size of :func:`course_lib.core.capstone.latency_throughput_curve`,

* left: TTFT and TPOT (ms, log scale) against the batch (log scale), so that a long prefill, whose TTFT
  grows with the batch, and a memory-bound decode, whose TPOT hardly does, are both readable;
* right: the tokens per second the whole batch produces (aggregate) against the batch.

The batch is the x axis of both panels, so the points never stack on one vertical line (aggregate
throughput over the whole response stops growing once the prefill dominates; plotted against it, every
batch would fall on one x). Batches whose weights and KV cache do not fit are crosses; the current
batch is ringed. The title is one short line; the setting (``describe``) is wrapped under it, so
nothing is cut off at the figure's width. Every plotted value is the core's; this module only draws.
"""
from __future__ import annotations

import textwrap

from matplotlib.figure import Figure

from course_lib.core.capstone import DashboardState, compute, describe, latency_throughput_curve
from course_lib.lessons.plots._base import CourseFigure

__all__ = ["plot_app_curve", "APP_TITLE", "BATCH_LABEL", "LATENCY_LABEL", "THROUGHPUT_LABEL", "WRAP"]

APP_TITLE = "Latency and throughput over the batch"
BATCH_LABEL = "batch (sequences)"
LATENCY_LABEL = "time (ms, log scale)"
THROUGHPUT_LABEL = "aggregate throughput (tokens/s)"
#: characters per line of the wrapped setting under the title
WRAP = 95


def plot_app_curve(state: DashboardState) -> Figure:
    """The two-panel figure of ``state`` (see the module docstring)."""
    if not isinstance(state, DashboardState):
        raise TypeError(f"state must be a DashboardState, got {type(state).__name__}")
    points = latency_throughput_curve(state)
    cur = compute(state)
    # fixed margins, not a layout engine: the figure is redrawn on every change of the app's controls, and
    # constrained layout measures every text twice (the suptitle has room for two lines of setting)
    fig = CourseFigure(figsize=(9.5, 4.8))
    fig.subplots_adjust(left=0.08, right=0.985, bottom=0.12, top=0.78, wspace=0.22)
    fig.suptitle(APP_TITLE + "\n" + textwrap.fill(describe(state), WRAP), fontsize="medium", y=0.985)
    left, right = fig.subplots(1, 2)
    batches = [p.batch for p in points]
    fit = [p for p in points if p.fits is not False]
    over = [p for p in points if p.fits is False]
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(BATCH_LABEL)
        ax.grid(True, alpha=0.3)
        ax.set_xticks(batches, [str(b) for b in batches], fontsize="x-small")
        ax.minorticks_off()
    left.set_yscale("log")
    left.minorticks_off()
    left.set_ylabel(LATENCY_LABEL)
    left.set_title("TTFT and TPOT per user", fontsize="small")
    right.set_ylabel(THROUGHPUT_LABEL)
    right.set_title("tokens/s of the whole batch", fontsize="small")
    if fit:
        left.plot([p.batch for p in fit], [p.ttft * 1e3 for p in fit], marker="s", label="TTFT")
        left.plot([p.batch for p in fit], [p.tpot * 1e3 for p in fit], marker="o", label="TPOT")
        right.plot([p.batch for p in fit], [p.tps_aggregate for p in fit], marker="o", label="fits in memory")
    if over:
        kw = dict(linestyle="none", marker="x", color="tab:red", markersize=8)
        left.plot([p.batch for p in over], [p.ttft * 1e3 for p in over], **kw)
        left.plot([p.batch for p in over], [p.tpot * 1e3 for p in over], label="does not fit in memory", **kw)
        right.plot([p.batch for p in over], [p.tps_aggregate for p in over], label="does not fit in memory", **kw)
    ring = dict(linestyle="none", marker="o", markersize=14, markerfacecolor="none", markeredgecolor="black")
    left.plot([state.batch], [cur.tpot * 1e3], label=f"current: batch {state.batch}", **ring)
    right.plot([state.batch], [cur.tps_aggregate], label=f"current: batch {state.batch}", **ring)
    right.set_ylim(bottom=0)
    left.legend(fontsize="x-small", loc="upper left")
    right.legend(fontsize="x-small", loc="lower right")
    return fig
