"""Lesson 10's figures: latency and throughput against the request rate, and speculative decoding's speed-up.

Lessons: 10

Every plotted value is computed by :mod:`course_lib.core.serving` (:func:`~course_lib.core.serving.rate_sweep`,
:func:`~course_lib.core.serving.speculative_decoding`); this module only draws.

* :func:`plot_latency_vs_rate`: p50 and p99 of TTFT and TPOT (ms, log scale) against the request
  rate, for one or more sweeps (e.g. chunked prefill on and off);
* :func:`plot_throughput_vs_rate`: output tokens/s the server delivers against the rate, with the
  offered load (rate x mean answer length) as a dashed line: where they part, the server saturates;
* :func:`plot_speculative_speedup`: speed-up of speculative decoding against the batch.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from course_lib.core.serving import SweepPoint, speculative_decoding
from course_lib.lessons.plots._base import new_figure

__all__ = ["plot_latency_vs_rate", "plot_throughput_vs_rate", "plot_speculative_speedup", "LATENCY_TITLE",
           "THROUGHPUT_TITLE", "SPECULATIVE_TITLE"]

LATENCY_TITLE = "TTFT and TPOT against the request rate"
THROUGHPUT_TITLE = "Delivered throughput against the request rate"
SPECULATIVE_TITLE = "Speculative decoding: speed-up against the batch"


def _check(sweeps: dict) -> dict[str, list[SweepPoint]]:
    if not isinstance(sweeps, dict) or not sweeps:
        raise TypeError("sweeps must be a non-empty dict {label: list of SweepPoint}")
    for label, pts in sweeps.items():
        if not pts or not all(isinstance(p, SweepPoint) for p in pts):
            raise TypeError(f"sweeps[{label!r}] must be a non-empty list of SweepPoint (from rate_sweep)")
    return sweeps


def plot_latency_vs_rate(sweeps: dict, subtitle: str = "") -> Figure:
    """p50 (solid) and p99 (dashed) TTFT and TPOT in ms against the rate, per sweep ``{label: points}``."""
    sweeps = _check(sweeps)
    fig, ax = new_figure(LATENCY_TITLE + (f"\n{subtitle}" if subtitle else ""), "request rate (requests/s)",
                         "latency (ms, log scale)", figsize=(8, 4.6))
    for label, pts in sweeps.items():
        rates = [p.rate for p in pts]
        for metric, marker in (("ttft", "o"), ("tpot", "s")):
            for q, style in ((50, "-"), (99, "--")):
                ys = [p.summary[f"{metric}_p{q}"] for p in pts]
                keep = [(x, y * 1e3) for x, y in zip(rates, ys) if y is not None]
                if keep:
                    ax.plot(*zip(*keep), style, marker=marker, label=f"{label}: {metric.upper()} p{q}")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_throughput_vs_rate(sweeps: dict, mean_output_tokens: float, subtitle: str = "") -> Figure:
    """Delivered output tokens/s against the rate, per sweep; the offered load ``rate x mean_output_tokens`` dashed."""
    sweeps = _check(sweeps)
    fig, ax = new_figure(THROUGHPUT_TITLE + (f"\n{subtitle}" if subtitle else ""), "request rate (requests/s)",
                         "output throughput (tokens/s)", figsize=(8, 4.2))
    rates = sorted({p.rate for pts in sweeps.values() for p in pts})
    ax.plot(rates, [r * mean_output_tokens for r in rates], "k--", label="offered load (rate x mean answer)")
    for label, pts in sweeps.items():
        ax.plot([p.rate for p in pts], [p.summary["throughput"] for p in pts], marker="o", label=label)
    ax.legend(fontsize=8)
    return fig


def plot_speculative_speedup(model, hardware, batches, context, draft_tokens, acceptance, **kwargs) -> Figure:
    """Speed-up (plain step / time per token) of speculative decoding at each batch; 1 marks break-even."""
    steps = [speculative_decoding(model, hardware, b, context, draft_tokens, acceptance, **kwargs) for b in batches]
    fig, ax = new_figure(f"{SPECULATIVE_TITLE}\n{model} on {hardware}, k = {draft_tokens}, acceptance "
                         f"{acceptance:g}, context {context:,}", "batch (sequences)", "speed-up (x)")
    ax.plot([s.batch for s in steps], [s.speedup for s in steps], marker="o", label="speculative / plain")
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="break-even")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=8)
    return fig
