"""Lesson 05's figures: GEMV timings measured on the learner's machine (and on one H200).

Lessons: 05

* :func:`plot_bandwidth_vs_size` -- achieved GB/s (bytes moved / median time) against the matrix
  size, one line per series (e.g. "rotated" and "same buffer"), with the cache sizes marked as
  vertical lines and the copy ceiling as a horizontal one: the "tens of MB of cache" effect.
* :func:`plot_predicted_vs_measured` -- measured time per call against bytes / bandwidth, log-log,
  with the line "measured = predicted".
* :func:`plot_dtype_times` -- time per call by dtype for each shape, next to the time bytes/bandwidth
  predicts for that dtype: half precision should take half fp32's time, and on a CPU without native
  kernels it does not.
* :func:`plot_machines` -- achieved bandwidth as a fraction of each machine's own copy ceiling, for
  the learner's rows and the H200's ``gemv_fp16_eager`` rows, so both fit one axis.

Rows are :class:`course_lib.measure.probes.GemvResult` objects or dicts with the same field names (``m``,
``k``, ``bytes``, ``seconds`` ...). The functions compute nothing themselves: every plotted value is
a row's own field or property (``gb_per_s``, ``matrix_bytes``) or ``bytes / bandwidth``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from matplotlib.figure import Figure

from course_lib.core.roofline import gemv_cost
from course_lib.core.units import format_bytes
from course_lib.core.validation import require_positive
from course_lib.lessons.plots._base import new_figure

__all__ = ["plot_bandwidth_vs_size", "plot_predicted_vs_measured", "plot_dtype_times", "plot_machines",
           "h200_rows"]

_CACHE_STYLES = {"L1d": ":", "L2": "--", "L3": "-.", "LLC": "-"}


def _rows(rows, what="rows") -> list:
    rows = list(rows)
    if not rows:
        raise ValueError(f"{what} is empty: measure something first (course_lib.measure.probes.measure_gemv)")
    for r in rows:
        if not all(hasattr(r, a) for a in ("m", "k", "bytes", "seconds", "matrix_bytes")):
            raise TypeError(f"{what} must hold course_lib.measure.probes.GemvResult rows, got {type(r).__name__}")
    return rows


def plot_bandwidth_vs_size(series: Mapping[str, Iterable], caches: Mapping[str, int] | None = None,
                           copy_bandwidth: float | None = None,
                           title: str = "GEMV: achieved bandwidth vs matrix size") -> Figure:
    """Achieved GB/s vs matrix bytes (log x), one line per ``series`` label; caches and copy marked."""
    if not isinstance(series, Mapping) or not series:
        raise TypeError("series must be a dict {label: rows}, e.g. {'rotated': table, 'same buffer': table2}")
    fig, ax = new_figure(title, "matrix size (bytes)", "achieved bandwidth (GB/s)")
    for label, rows in series.items():
        rows = sorted(_rows(rows, f"series[{label!r}]"), key=lambda r: r.matrix_bytes)
        ax.plot([r.matrix_bytes for r in rows], [r.gb_per_s for r in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    for name, size in (caches or {}).items():
        if name in _CACHE_STYLES and size and not (name == "LLC" and size == (caches or {}).get("L3")):
            ax.axvline(size, color="grey", linestyle=_CACHE_STYLES[name], linewidth=1,
                       label=f"{name} cache: {format_bytes(size, system='iec')}")
    if copy_bandwidth is not None:
        ax.axhline(require_positive("copy_bandwidth", copy_bandwidth) / 1e9, color="black", linewidth=1,
                   label="copy ceiling (read + write)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return fig


def plot_predicted_vs_measured(rows: Iterable, bandwidth: float,
                               title: str = "GEMV: measured time vs bytes / bandwidth") -> Figure:
    """Each row's measured time per call against bytes / ``bandwidth`` (both in µs), log-log."""
    rows = _rows(rows)
    bw = require_positive("bandwidth", bandwidth)
    fig, ax = new_figure(title, "predicted: bytes / bandwidth (µs)", "measured time per call (µs)")
    by_dtype: dict[str, list] = {}
    for r in rows:
        by_dtype.setdefault(r.dtype, []).append(r)
    for dtype, rs in by_dtype.items():
        ax.plot([r.bytes / bw * 1e6 for r in rs], [r.seconds * 1e6 for r in rs], "o", label=dtype)
    lo = min(min(r.bytes / bw, r.seconds) for r in rows) * 1e6
    hi = max(max(r.bytes / bw, r.seconds) for r in rows) * 1e6
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="measured = predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend(fontsize="small")
    return fig


#: the markers of the predicted times in :func:`plot_dtype_times`, one per dtype
_PRED_MARKERS = ("D", "o", "s", "^")


def plot_dtype_times(rows: Iterable, bandwidth: float,
                     title: str = "GEMV time by dtype: measured vs bytes / bandwidth") -> Figure:
    """Grouped bars: for each shape, measured ms per call per dtype, with the predicted time as a black-edged marker
    (one shape per dtype) drawn over its bar."""
    rows = _rows(rows)
    bw = require_positive("bandwidth", bandwidth)
    shapes = sorted({(r.m, r.k) for r in rows}, key=lambda s: s[0] * s[1])
    dtypes = list(dict.fromkeys(r.dtype for r in rows))
    fig, ax = new_figure(title, "matrix shape m × k (elements)", "time per call (ms)")
    width = 0.8 / len(dtypes)
    for j, d in enumerate(dtypes):
        xs, meas, pred = [], [], []
        for i, s in enumerate(shapes):
            match = [r for r in rows if (r.m, r.k) == s and r.dtype == d]
            if match:
                xs.append(i + (j - (len(dtypes) - 1) / 2) * width)
                meas.append(match[0].seconds * 1e3)
                pred.append(match[0].bytes / bw * 1e3)
        ax.bar(xs, meas, width=width * 0.95, label=f"{d} measured", zorder=2)
        # the prediction in black over the bar (a bar's own colour hid it): one marker shape per dtype
        ax.plot(xs, pred, linestyle="none", marker=_PRED_MARKERS[j % len(_PRED_MARKERS)], markersize=9,
                markerfacecolor="white", markeredgecolor="black", markeredgewidth=1.5, zorder=3,
                label=f"{d} bytes / bandwidth")
    ax.set_xticks(range(len(shapes)), [f"{m} × {k}" for m, k in shapes])
    ax.set_yscale("log")
    ax.legend(fontsize="small")
    return fig


def h200_rows(h200: Mapping) -> list[dict]:
    """The H200's ``gemv_fp16_eager`` records with bytes and seconds (fp16: 2 bytes per element).

    ``h200`` is :func:`course_lib.core.measurements.h200`'s dict. Bytes: ``course_lib.core.roofline.gemv_cost``
    (matrix + both vectors); seconds: the measured median in µs / 1e6.
    """
    out = []
    for r in h200["gemv_fp16_eager"]:
        c = gemv_cost(int(r["m"]), int(r["k"]), "fp16")
        out.append({"m": c.rows, "k": c.cols, "dtype": "fp16", "matrix_bytes": c.weight_bytes, "bytes": c.bytes,
                    "seconds": r["us"] / 1e6, "gb_per_s": r["GBps"]})
    return out


def plot_machines(mine: Iterable, my_copy_bandwidth: float, h200: Mapping,
                  title: str = "GEMV bandwidth as a fraction of each machine's copy ceiling") -> Figure:
    """Achieved GB/s ÷ copy GB/s vs matrix bytes: the learner's rotated rows and the H200's fp16 rows."""
    mine = _rows(mine, "mine")
    my_bw = require_positive("my_copy_bandwidth", my_copy_bandwidth)
    h_copy = float(h200["ceilings"]["copy_read_plus_write_GBps"]) * 1e9
    theirs = sorted(h200_rows(h200), key=lambda r: r["matrix_bytes"])
    fig, ax = new_figure(title, "matrix size (bytes)", "GEMV bandwidth / copy bandwidth (fraction)")
    mine = sorted(mine, key=lambda r: r.matrix_bytes)
    ax.plot([r.matrix_bytes for r in mine], [r.bandwidth / my_bw for r in mine], "o-", label="this machine")
    ax.plot([r["matrix_bytes"] for r in theirs], [r["gb_per_s"] * 1e9 / h_copy for r in theirs], "s",
            label="H200, fp16, eager torch.mv")
    ax.axhline(1.0, color="black", linewidth=1, label="copy ceiling")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return fig
