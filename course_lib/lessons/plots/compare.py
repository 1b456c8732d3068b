"""Lesson 08's figures: predicted floors against measured times (``course_lib.core.compare`` rows).

Lessons: 08

* :func:`plot_comparison` -- measured time against predicted time, log-log, one marker series per
  group, with the line y = x ("measured = predicted"). A point at height k times the line took k
  times its floor: its efficiency is 1 / k.
* :func:`plot_efficiencies` -- the geometric-mean efficiency of each group (``compare.summary``) as
  horizontal bars, with each group's lowest and highest efficiency as a range.

The functions compute nothing themselves: every plotted value is a row's ``predicted_s`` or
``measured_s`` (in ms) or a number from ``compare.summary``.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from course_lib.core.compare import Comparison, summary
from course_lib.lessons.plots._base import new_figure

__all__ = ["plot_comparison", "plot_efficiencies"]

_MARKERS = "osD^v<>phX*P"


def _rows(rows) -> list[Comparison]:
    if isinstance(rows, Comparison):
        raise TypeError("rows must be a list of Comparison rows; wrap a single row in a list")
    try:
        rows = list(rows)
    except TypeError:
        raise TypeError(f"rows must be a list of course_lib.core.compare.Comparison rows, "
                        f"got {type(rows).__name__}") from None
    if not rows:
        raise ValueError("rows is empty: build cases with core.compare (published_cases(), h200_cases(), ...)")
    for i, r in enumerate(rows):
        if not isinstance(r, Comparison):
            raise TypeError(f"rows[{i}] must be a course_lib.core.compare.Comparison, got {type(r).__name__}")
    return rows


def _key(by):
    if callable(by):
        return by
    if not isinstance(by, str) or by not in Comparison.__dataclass_fields__:
        raise ValueError(f"by must be a Comparison field name such as 'group', 'source' or 'metric', got {by!r}")
    return lambda r: getattr(r, by)


def plot_comparison(rows, by="group", title: str = "Predicted floor vs measured time") -> Figure:
    """Measured (ms) against predicted (ms), log-log, one series per ``by`` value, with y = x."""
    rows = _rows(rows)
    key = _key(by)
    fig, ax = new_figure(title, "predicted floor (ms)", "measured (ms)", figsize=(8, 5.5))
    groups: dict[str, list[Comparison]] = {}
    for r in rows:
        groups.setdefault(str(key(r)), []).append(r)
    for i, (label, rs) in enumerate(groups.items()):
        ax.plot([r.predicted_s * 1e3 for r in rs], [r.measured_s * 1e3 for r in rs], linestyle="none",
                marker=_MARKERS[i % len(_MARKERS)], label=label, alpha=0.85)
    values = [r.predicted_s * 1e3 for r in rows] + [r.measured_s * 1e3 for r in rows]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="measured = predicted (y = x)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.legend(fontsize="small", loc="upper left", ncol=1 if len(groups) < 8 else 2)
    return fig


def plot_efficiencies(rows, by="group", title: str = "Efficiency: predicted floor / measured time") -> Figure:
    """Geometric-mean efficiency per ``by`` value (bars), with each group's min-max range."""
    rows = _rows(rows)
    stats = summary(rows, by=by)
    fig, ax = new_figure(title, "efficiency (predicted / measured, fraction)", "case group (bars: geometric mean)",
                         figsize=(8, 0.45 * len(stats) + 1.5))
    ys = list(range(len(stats)))[::-1]
    g = [s["geomean_efficiency"] for s in stats]
    lo = [s["geomean_efficiency"] - s["min_efficiency"] for s in stats]
    hi = [s["max_efficiency"] - s["geomean_efficiency"] for s in stats]
    ax.barh(ys, g, xerr=[lo, hi], color="tab:blue", alpha=0.7, error_kw={"capsize": 3, "linewidth": 1})
    ax.set_yticks(ys, [f"{s['group']} ({s['cases']})" for s in stats])
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlim(0, max(1.05, max(s["max_efficiency"] for s in stats) * 1.05))
    return fig
