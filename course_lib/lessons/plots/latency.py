"""Lesson 04's figures: the decode floor as the context grows, and total latency vs response length.

Lessons: 04

* :func:`plot_tpot_vs_context` -- one line per device: the batch-1 TPOT floor of the next decode
  step after ``c`` tokens of context, ``estimate(model, hw, prompt_tokens=c, new_tokens=1).tpot``,
  in milliseconds. The lines rise with the K/V read per step and, for a sliding-window model
  (Mistral-7B v0.1), go flat once the window is full.
* :func:`plot_total_vs_tokens` -- the exact total time to the n-th token,
  ``estimate(model, hw, prompt_tokens, n).total``, in seconds, against the line b + k·n of
  ``Estimate.line`` (k = the first decode step's time, b = TTFT - k). The gap between them is the
  KV cache growing during the response; ``marks`` labels chosen response lengths (e.g. a direct
  answer and the same answer after hidden chain-of-thought tokens).

Every plotted value is the estimator's; the functions only choose the sample points and units.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from matplotlib.figure import Figure

from course_lib.core.estimator import estimate
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.precision import get_precision
from course_lib.core.units import format_bandwidth, format_time
from course_lib.core.validation import require_count
from course_lib.lessons.plots._base import new_figure

__all__ = ["DEFAULT_DEVICES", "context_grid", "tpot_curve", "total_curve",
           "plot_tpot_vs_context", "plot_total_vs_tokens"]

#: Devices of the TPOT-vs-context figure: two GDDR cards and three HBM generations.
DEFAULT_DEVICES = ("rtx-4090", "l40s", "a100-80gb", "h100-sxm", "h200")


def context_grid(max_context: int, points: int = 129, include: Iterable[int] = (), minimum: int = 1) -> list[int]:
    """``points`` whole token counts from ``minimum`` to ``max_context`` (evenly spaced, rounded),
    plus every value of ``include`` inside that range; sorted, without duplicates."""
    hi = require_count("max_context", max_context, minimum=1)
    lo = require_count("minimum", minimum, minimum=1)
    n = require_count("points", points, minimum=2)
    if hi < lo:
        raise ValueError(f"max_context must be >= minimum ({lo}), got {hi}")
    grid = {round(lo + (hi - lo) * i / (n - 1)) for i in range(n)}
    grid |= {require_count("include", c) for c in include if lo <= c <= hi}
    return sorted(grid)


def tpot_curve(model, hardware, contexts: Iterable[int], precision="fp16") -> list[float]:
    """TPOT floor in seconds of the next decode step after each context: the figure's data."""
    return [estimate(model, hardware, prompt_tokens=c, new_tokens=1, precision=precision).tpot for c in contexts]


def total_curve(model, hardware, prompt_tokens: int, new_tokens: Iterable[int], precision="fp16") -> list[float]:
    """Exact total seconds to the n-th token for each n in ``new_tokens``."""
    return [estimate(model, hardware, prompt_tokens, n, precision=precision).total for n in new_tokens]


def _device_label(hw) -> str:
    return f"{hw.display or hw.name} ({hw.memory_type}, {format_bandwidth(hw.bandwidth)})"


def plot_tpot_vs_context(model="mistral-7b", hardware: Iterable = DEFAULT_DEVICES, precision="fp16",
                         max_context: int | None = None, points: int = 129) -> Figure:
    """TPOT floor (ms) against context (tokens), one line per device.

    ``max_context`` defaults to the model's maximum position count. For a sliding-window model the
    window size is always a sample point and is marked by a dotted vertical line. Devices the
    estimator cannot handle (no published peak FLOP/s) raise its ValueError.
    """
    m = get_model(model)
    prec = get_precision(precision).name
    devices = [get_hardware(h) for h in ([hardware] if isinstance(hardware, str) else hardware)]
    if not devices:
        raise ValueError("hardware must name at least one device, got an empty list")
    top = m.max_positions if max_context is None else max_context
    window = m.sliding_window
    contexts = context_grid(top, points, include=() if window is None else (window,))
    fig, ax = new_figure(f"Batch-1 TPOT floor vs context: {m.name}, {prec} weights",
                         "context before the step (tokens)", "TPOT floor (ms)", figsize=(9, 4.2))
    for hw in devices:
        ms = [t * 1e3 for t in tpot_curve(m, hw, contexts, prec)]
        ax.plot(contexts, ms, label=_device_label(hw))
    if window is not None and window <= top:
        ax.axvline(window, color="0.4", linestyle=":", linewidth=1.2,
                   label=f"sliding window: {window:,} tokens")
    ax.set_xlim(0, top)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def plot_total_vs_tokens(model="llama-2-7b", hardware="rtx-4090", prompt_tokens: int = 512,
                         max_new_tokens: int | None = None, precision="fp16", points: int = 65,
                         marks: Mapping[str, int] | None = None, show_line: bool = True) -> Figure:
    """Total latency (s) to the n-th generated token against n, with the line b + k·n.

    The first line is the exact ``estimate(...).total``; the dashed one ``b + k·n`` with
    ``(b, k) = estimate(...).line``. ``max_new_tokens`` defaults to what fits in the model's
    context after the prompt; ``marks`` ({label: n}) adds labelled points on the exact curve.
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    prec = get_precision(precision).name
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    marks = dict(marks or {})
    for label, n in marks.items():
        require_count(f"marks[{label!r}]", n, minimum=1)
    top = max(m.max_positions - P, 1) if max_new_tokens is None else require_count("max_new_tokens", max_new_tokens,
                                                                                     minimum=1)
    ns = context_grid(top, points, include=marks.values())
    totals = total_curve(m, hw, P, ns, prec)
    fig, ax = new_figure(f"Total latency vs generated tokens\n{m.name} on {hw.display or hw.name}, {prec} weights, "
                         f"prompt of {P:,} tokens", "generated tokens n (tokens)", "total latency (s)")
    ax.plot(ns, totals, label="exact: TTFT + sum of the n - 1 decode steps")
    if show_line:
        first = estimate(m, hw, P, 1, precision=prec)
        k = first.line[1]
        ax.plot(ns, [first.line_total(n) for n in ns], linestyle="--",
                label=f"line b + k·n (k = first step, {format_time(k)})")
    for label, n in marks.items():
        t = estimate(m, hw, P, n, precision=prec).total
        ax.plot([n], [t], marker="o", linestyle="none", color="C3")
        ax.annotate(f"{label}: {n:,} tokens, {format_time(t)}", (n, t), textcoords="offset points",
                    xytext=(8, -4), ha="left", va="top", fontsize="small")
    ax.set_xlim(0, top)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="upper left")
    return fig
