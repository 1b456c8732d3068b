"""Lesson 07 figures: what a cache saves at the first token, and what it costs in memory.

Lessons: 07

Every function returns a ``matplotlib.figure.Figure`` whose plotted data are ``course_lib.core.caching``
values in the units of the axis labels (ms, tokens, GB, %):

* :func:`plot_ttft_hit_vs_miss` -- TTFT on a miss and on a hit against the shared prefix length
  (``prefix_reuse(...).ttft_miss / ttft_hit`` x 1e3), optionally the mean at given hit rates;
* :func:`plot_session_prefill` -- cumulative prefilled tokens against the turn, without a cache
  (quadratic) and with a session cache (linear): ``SessionCost.cumulative_tokens_*``;
* :func:`plot_cache_memory` -- K/V bytes of ``n`` cached sessions (``cache_memory_bytes`` / 1e9)
  against ``n``, with the memory left beside the weights as a horizontal line;
* :func:`plot_hit_rate_vs_budget` -- an LRU prefix cache's hit rate (%) against its byte budget (GB),
  from :func:`course_lib.core.caching.hit_rate_vs_budget` rows;
* :func:`plot_measured_vs_predicted_ttft` -- grouped bars of measured and predicted TTFT (ms), one bar
  per series (measured, roofline, calibrated …).

Lines carry a ``gid`` (``"miss"``, ``"hit"``, ``"expected:<h>"``, ``"nocache"``, ``"cached"``,
``"memory"``, ``"free"``, ``"hit-rate"``, ``"token-hit-rate"``) so tests can find them.
"""
from __future__ import annotations

import textwrap

from typing import Mapping, Sequence

from course_lib.core.caching import cache_memory_bytes, prefix_reuse, session_cost
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.validation import require_count, require_fraction
from course_lib.lessons.plots._base import new_figure

__all__ = ["prefix_grid", "plot_ttft_hit_vs_miss", "plot_session_prefill", "plot_cache_memory",
           "plot_hit_rate_vs_budget", "plot_measured_vs_predicted_ttft"]


def prefix_grid(max_prefix: int = 8192, points: int = 65) -> list[int]:
    """``points`` whole prefix lengths from 0 to ``max_prefix`` (evenly spaced, endpoints included)."""
    max_prefix = require_count("max_prefix", max_prefix, minimum=1)
    points = require_count("points", points, minimum=2)
    return sorted({round(max_prefix * i / (points - 1)) for i in range(points)})


def plot_ttft_hit_vs_miss(model="mistral-7b", hardware="h200", new_tokens: int = 100, max_prefix: int = 8192,
                          hit_rates: Sequence[float] = (), precision="fp16", block_tokens: int = 1,
                          points: int = 65):
    """TTFT (ms) of a prefix + ``new_tokens`` prompt on a miss and on a hit, against the prefix length."""
    m, hw = get_model(model), get_hardware(hardware)
    xs = prefix_grid(max_prefix, points)
    rates = [require_fraction(f"hit_rates[{i}]", h, allow_zero=True) for i, h in enumerate(hit_rates)]
    rs = [prefix_reuse(m, hw, p, new_tokens, precision=precision, block_tokens=block_tokens) for p in xs]
    fig, ax = new_figure(f"TTFT with a cached prefix: {m.name} on {hw.display or hw.name},\n"
                         f"{rs[0].new_tokens} new tokens", "shared prefix (tokens)", "TTFT (ms)")  # two lines: it fits
    ax.plot(xs, [r.ttft_miss * 1e3 for r in rs], label="miss: prefill prefix + new tokens", gid="miss")
    ax.plot(xs, [r.ttft_hit * 1e3 for r in rs], label="hit: prefill the new tokens only", gid="hit")
    for h in rates:
        ax.plot(xs, [r.expected_ttft(h) * 1e3 for r in rs], linestyle="--", label=f"mean at hit rate {h:.0%}",
                gid=f"expected:{h:g}")
    ax.legend()
    return fig


def plot_session_prefill(system_tokens: int = 1000, user_tokens: int = 50, reply_tokens: int = 200,
                         max_turns: int = 20, model="mistral-7b", hardware="h200"):
    """Cumulative prompt tokens prefilled after each turn: no cache (quadratic) vs a session cache (linear)."""
    T = require_count("max_turns", max_turns, minimum=1)
    s = session_cost(model, hardware, system_tokens, user_tokens, reply_tokens, T)
    xs = list(range(1, T + 1))
    fig, ax = new_figure(f"Prefilled tokens over a chat\n(system {s.system_tokens}, user {s.user_tokens}, "
                         f"reply {s.reply_tokens} tokens per turn)", "turn (count)",
                         "cumulative prefilled tokens (tokens)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # turns are whole: no tick at 2.5 turns
    ax.plot(xs, list(s.cumulative_tokens_nocache), marker="o", label="no cache: the whole conversation each turn",
            gid="nocache")
    ax.plot(xs, list(s.cumulative_tokens_cached), marker="s", label="session cache: only the new message",
            gid="cached")
    ax.legend()
    return fig


def plot_cache_memory(model="mistral-7b", hardware="h200", session_tokens: int = 8192, max_sessions: int = 64,
                      precision="fp16", kv_precision="fp16"):
    """K/V bytes (GB) of ``n`` cached sessions of ``session_tokens`` tokens, against ``n``."""
    m, hw = get_model(model), get_hardware(hardware)
    st = require_count("session_tokens", session_tokens, minimum=1)
    n_max = require_count("max_sessions", max_sessions, minimum=1)
    xs = list(range(1, n_max + 1))
    fig, ax = new_figure(f"Memory held by session caches: {m.name}, {st} tokens each, {kv_precision} K/V",
                         "cached sessions (count)", "K/V cache (GB)")
    ax.plot(xs, [cache_memory_bytes(m, st, n, kv_precision) / 1e9 for n in xs], label="K/V of the cached sessions",
            gid="memory")
    if hw.capacity is not None:
        free = (hw.capacity - m.weight_bytes(precision)) / 1e9
        ax.axhline(free, color="black", linestyle="--", gid="free",
                   label=f"{hw.display or hw.name} memory minus {precision} weights")
    ax.legend()
    return fig


def plot_hit_rate_vs_budget(rows: Sequence[Mapping], title: str = "LRU prefix cache: hit rate vs budget"):
    """Hit rate (%) of an LRU prefix cache against its budget (GB), from ``hit_rate_vs_budget`` rows."""
    if not rows:
        raise ValueError("rows must be a non-empty list from caching.hit_rate_vs_budget(...)")
    fig, ax = new_figure(title, "cache budget (GB)", "hit rate (%)")
    xs = [r["budget_bytes"] / 1e9 for r in rows]
    ax.plot(xs, [100 * r["hit_rate"] for r in rows], marker="o", label="requests that hit", gid="hit-rate")
    ax.plot(xs, [100 * r["token_hit_rate"] for r in rows], marker="s", label="prompt tokens reused",
            gid="token-hit-rate")
    ax.set_ylim(0, 100)
    ax.legend()
    return fig


def plot_measured_vs_predicted_ttft(cases: Mapping[str, Sequence[float]], title: str = "TTFT: measured vs predicted",
                                    series: Sequence[str] = ("measured", "predicted")):
    """Grouped bars: for each case name, one bar per ``series`` (seconds, shown in ms).

    ``cases`` maps a case name to one value in seconds per series, in order: by default
    (measured, predicted); lesson 07 passes ``series=("measured", "roofline", "calibrated")``. Each
    series' bars carry the series name as ``gid``.
    """
    if not cases:
        raise ValueError("cases must map at least one name to one time in seconds per series")
    if isinstance(series, str) or not series:
        raise TypeError(f"series must be a non-empty list of series names, got {series!r}")
    names = list(cases)
    k = len(series)
    for n in names:
        v = cases[n]
        if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or len(v) != k:
            raise ValueError(f"cases[{n!r}] must hold {k} times in seconds ({', '.join(series)}), got {v!r}")
    fig, ax = new_figure(title, "case (name)", "TTFT (ms, log scale)")
    xs = range(len(names))
    width = 0.8 / k
    for j, label in enumerate(series):
        offset = (j - (k - 1) / 2) * width
        ax.bar([x + offset for x in xs], [cases[n][j] * 1e3 for n in names], width=width, label=label, gid=label)
    # the cases span two or three orders of magnitude (a cached pass of a few ms beside sums of a second):
    # a log axis shows every bar; long case names are wrapped so that the labels do not overlap
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [textwrap.fill(n, 16) for n in names])
    ax.tick_params(axis="x", labelsize=8)
    ax.legend()
    return fig
