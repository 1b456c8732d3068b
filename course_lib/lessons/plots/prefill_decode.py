"""Lesson 06's figures: prefill against decode, the roofline, batching, long answers.

Lessons: 02, 06

* :func:`plot_roofline` -- the roofline of one device (attainable FLOP/s against arithmetic
  intensity, log-log) with measured kernels placed on it as points (``RooflinePoint``).
* :func:`plot_attention_share` -- the share of causal attention in prefill FLOPs against the prompt
  length (``attention_share``): small until tens of thousands of tokens, so TTFT is near-linear.
* :func:`plot_ttft_fit` -- measured TTFT against prompt length with the fitted line b + k·n
  (``fit_line``) and, optionally, the estimator's prediction.
* :func:`plot_tpot_measured` -- measured TPOT against context with a predicted line.
* :func:`plot_batching` -- aggregate decode tokens/s against batch size (``batch_curve``), the
  critical batch marked, measured points on top.
* :func:`plot_total_vs_generated` -- total latency against generated tokens (``total_vs_generated``):
  a short answer against a long reasoning trace.

Every plotted value is computed by :mod:`course_lib.core.roofline` (the lesson's arithmetic, from the
generated formulas and the estimator) or is a measurement passed in; the functions here only
arrange them, so tests (and the lesson's prose) use exactly the numbers the figures show.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from matplotlib.figure import Figure

from course_lib.core.estimator import estimate
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.roofline import (RooflinePoint, attention_crossover, attention_share, batch_curve,
                                      critical_batch, fit_line, ridge_point, roofline_curve,
                                      total_vs_generated)
from course_lib.core.validation import require_count, require_positive
from course_lib.lessons.plots._base import new_figure

__all__ = ["plot_roofline", "plot_attention_share", "plot_ttft_fit", "plot_tpot_measured", "plot_batching",
           "plot_total_vs_generated"]


# --------------------------------------------------------------------------------------------------
# The roofline
# --------------------------------------------------------------------------------------------------
def plot_roofline(peak_flops: float, bandwidth: float, points: Iterable[RooflinePoint] = (),
                  title: str = "Roofline of this machine", device: str = "this machine",
                  intensity_range: tuple[float, float] | None = None) -> Figure:
    """Attainable GFLOP/s against FLOP/byte (log-log) for one ``peak_flops``/``bandwidth`` pair.

    The sloped part is bandwidth × intensity (memory-bound), the flat part the peak (compute-bound);
    they meet at the ridge point ``peak / bandwidth``. Each point is drawn at its intensity and its
    measured FLOP/s; its label says which kernel it is.
    """
    peak = require_positive("peak_flops", peak_flops)
    bw = require_positive("bandwidth", bandwidth)
    pts = list(points)
    for p in pts:
        if not isinstance(p, RooflinePoint):
            raise TypeError(f"points must be RooflinePoint objects, got {type(p).__name__}")
    ridge = ridge_point(peak, bw)
    xs = [ridge] + [p.intensity for p in pts]
    lo, hi = intensity_range or (min(xs) / 4, max(xs) * 4)
    curve = roofline_curve(peak, bw, lo, hi)
    fig, ax = new_figure(title, "arithmetic intensity (FLOP/byte)", "attainable compute (GFLOP/s)")
    ax.plot([c[0] for c in curve], [c[1] / 1e9 for c in curve], color="black", linewidth=1.5,
            label=f"roof of {device}")
    ax.axvline(ridge, color="grey", linestyle="--", linewidth=1, label=f"ridge point: {ridge:.3g} FLOP/byte")
    markers = "osD^v<>phX*"
    for i, p in enumerate(pts):
        ax.plot([p.intensity], [p.flop_rate / 1e9], markers[i % len(markers)], markersize=8, label=p.label,
                linestyle="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend(fontsize="small", loc="lower right")
    return fig


# --------------------------------------------------------------------------------------------------
# Attention's share of prefill
# --------------------------------------------------------------------------------------------------
def plot_attention_share(models: Sequence, prompt_lengths: Iterable[int],
                         title: str = "Share of prefill FLOPs spent in causal attention") -> Figure:
    """Attention's share (fraction) of prefill FLOPs against prompt length, one line per model.

    Each model's line stops at its context window (``max_positions``); the crossover N_blocks / (L·H·d) is
    marked only where the line reaches it. ``prefill_flops`` counts full causal attention, so for a
    sliding-window model the share past its window is an upper bound: its legend entry says so.
    """
    lengths = sorted({require_count("prompt length", p, minimum=1) for p in prompt_lengths})
    if not lengths:
        raise ValueError("prompt_lengths must hold at least one length")
    if isinstance(models, str) or not isinstance(models, Sequence) or not models:
        raise TypeError("models must be a non-empty list of model names or specs, e.g. ['mistral-7b']")
    fig, ax = new_figure(title, "prompt length (tokens)", "attention share of prefill FLOPs (fraction)")
    for mdl in models:
        m = get_model(mdl)
        xs = [p for p in lengths if m.max_positions is None or p <= m.max_positions]
        if not xs:
            continue
        label = m.name
        if m.sliding_window is not None and xs[-1] > m.sliding_window:
            label += f" (upper bound past its {m.sliding_window:,}-token sliding window)"
        line = ax.plot(xs, [attention_share(m, p) for p in xs], label=label)[0]
        x = attention_crossover(m)
        if xs[0] <= x <= xs[-1]:
            ax.axvline(x, color=line.get_color(), linestyle=":", linewidth=1,
                       label=f"{m.name}: attention = 2·N·P at {x:,.0f} tokens")
    ax.axhline(0.5, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.legend(fontsize="small")
    return fig


# --------------------------------------------------------------------------------------------------
# Measured TTFT and TPOT
# --------------------------------------------------------------------------------------------------
def _timings(rows, x_attr):
    rows = list(rows)
    if not rows:
        raise ValueError("no measurements to plot")
    out = []
    for r in rows:
        try:
            x, s = getattr(r, x_attr), r.seconds
        except AttributeError:
            raise TypeError(f"measurements must have .{x_attr} and .seconds (course_lib.measure.model_timing timings), "
                            f"got {type(r).__name__}") from None
        q1, q3 = getattr(r, "q1_seconds", s), getattr(r, "q3_seconds", s)
        out.append((x, s, q1, q3))
    return sorted(out)


def _errorbars(ax, pts, label, scale=1e3):
    xs = [p[0] for p in pts]
    ys = [p[1] * scale for p in pts]
    err = [[(p[1] - p[2]) * scale for p in pts], [(p[3] - p[1]) * scale for p in pts]]
    ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=3, label=label)


def _predicted_lines(ax, predicted, scale=1e3):
    """Draw (x, seconds) pairs as dashed lines: one list (labelled as the roofline) or {label: pairs}."""
    if not predicted:
        return
    series = predicted if isinstance(predicted, Mapping) else {"predicted (roofline, this machine)": predicted}
    for label, pairs in series.items():
        pr = sorted(pairs)
        ax.plot([p[0] for p in pr], [p[1] * scale for p in pr], "--", marker=".", label=label)


def plot_ttft_fit(timings: Iterable, fit: tuple[float, float] | None = None,
                  predicted: Sequence[tuple[int, float]] | Mapping[str, Sequence] | None = None,
                  title: str = "TTFT vs prompt length (measured)") -> Figure:
    """Measured TTFT (ms, median with the middle half of runs as error bars) against prompt tokens.

    ``timings``: objects with ``prompt_tokens``, ``seconds`` (and ``q1_seconds``/``q3_seconds``), e.g.
    ``bench.measure_prefill``'s. ``fit``: (b, k) in seconds and seconds per token, drawn as a line;
    default :func:`fit_line` of the medians. ``predicted``: (prompt tokens, seconds) pairs drawn dashed, or
    ``{label: pairs}`` for several predictions.
    """
    pts = _timings(timings, "prompt_tokens")
    b, k = fit if fit is not None else fit_line([p[0] for p in pts], [p[1] for p in pts])
    fig, ax = new_figure(title, "prompt length (tokens)", "time to first token (ms)")
    _errorbars(ax, pts, "measured (median, middle half of runs)")
    xs = [0, pts[-1][0]]
    ax.plot(xs, [(b + k * x) * 1e3 for x in xs], color="black", linewidth=1,
            label=f"fit b + k·n: b = {b * 1e3:.3g} ms, k = {k * 1e6:.3g} µs/token")
    _predicted_lines(ax, predicted)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return fig


def plot_tpot_measured(timings: Iterable, predicted: Sequence[tuple[int, float]] | Mapping[str, Sequence] | None = None,
                         title: str = "TPOT vs context (measured)") -> Figure:
    """Measured time per decode step (ms) against the context (tokens already cached).

    ``timings``: objects with ``prompt_tokens`` (the context the steps start from) and ``seconds``;
    ``predicted``: (context, seconds) pairs drawn as a dashed line, or ``{label: pairs}`` for several.
    """
    pts = _timings(timings, "prompt_tokens")
    fig, ax = new_figure(title, "context (tokens)", "time per output token (ms)")
    _errorbars(ax, pts, "measured (median, middle half of steps)")
    _predicted_lines(ax, predicted)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return fig


# --------------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------------
def plot_batching(model, hardware, batches: Iterable[int], context: int = 1024, precision: str = "fp16",
                  measured: Sequence[tuple[int, float]] | None = None, measured_label: str = "measured",
                  title: str | None = None) -> Figure:
    """Aggregate decode tokens/s against batch (log-log): the estimator's line, the critical batch, measurements.

    ``measured``: (batch, aggregate tokens/s) pairs. The critical batch is ``critical_batch(peak,
    bytes per weight, bandwidth)``: below it a step costs about the same at any batch (memory-bound),
    so throughput grows with the batch; beyond it compute sets the pace and throughput flattens.
    """
    m, hw = get_model(model), get_hardware(hardware)
    batches = sorted({require_count("batch", b, minimum=1) for b in batches})
    if not batches:
        raise ValueError("batches must hold at least one batch size")
    curve = batch_curve(m, hw, batches, context, precision)
    e1 = estimate(m, hw, prompt_tokens=context, new_tokens=1, precision=precision)
    crit = critical_batch(hw, precision, dtype=e1.compute_dtype)
    fig, ax = new_figure(title or f"Decode throughput vs batch: {m.name} on {hw.display or hw.name}",
                         "batch (sequences)", "aggregate decode throughput (tokens/s)")
    ax.plot([c[0] for c in curve], [c[1] for c in curve], "-", label=f"predicted (roofline), context {context:,}")
    ax.axvline(crit, color="grey", linestyle="--", linewidth=1, label=f"critical batch ≈ {crit:.0f}")
    if measured:
        ms = sorted(measured)
        ax.plot([x[0] for x in ms], [x[1] for x in ms], "o", label=measured_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.legend(fontsize="small")
    return fig


# --------------------------------------------------------------------------------------------------
# Long answers: total latency against generated tokens
# --------------------------------------------------------------------------------------------------
def plot_total_vs_generated(model, hardware, prompt_tokens: int, new_tokens: Iterable[int],
                            marks: Iterable[int] = (), precision: str = "fp16",
                            title: str = "Total latency vs tokens generated") -> Figure:
    """Total seconds against generated tokens, with chosen lengths (``marks``) annotated."""
    ns = sorted(set(require_count("new_tokens", x, minimum=1) for x in new_tokens) |
                set(require_count("marks", x, minimum=1) for x in marks))
    if not ns:
        raise ValueError("new_tokens must hold at least one token count")
    pts = dict(total_vs_generated(model, hardware, prompt_tokens, ns, precision))
    m, hw = get_model(model), get_hardware(hardware)
    fig, ax = new_figure(title, "tokens generated (tokens)", "total latency (s)")
    ax.plot(ns, [pts[n] for n in ns], "-", label=f"{m.name} on {hw.display or hw.name}, prompt {prompt_tokens:,}")
    for n in marks:
        ax.plot([n], [pts[n]], "o", color="black")
        ax.annotate(f"{n:,} tokens: {pts[n]:.3g} s", (n, pts[n]), textcoords="offset points", xytext=(6, -12),
                    fontsize="small")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return fig

