"""Lesson 07's explorers: a cached prefix, a cached chat session, and a cache's memory budget.

Lessons: 07

    from course_lib.lessons.widgets.caching import prefix_cache_explorer, session_cache_explorer, cache_budget_explorer
    prefix_cache_explorer()            # prefix length, new tokens, hit rate -> TTFT miss / hit / mean
    session_cache_explorer()           # turns -> cumulative prefilled tokens and TTFT, without / with a cache
    cache_budget_explorer()            # cache budget -> sessions that fit, LRU hit rate (simulated)

Each widget only wires controls to a plain function that computes the texts it shows
(:func:`prefix_cache_reading`, :func:`session_cache_reading`, :func:`cache_budget_reading`), all from
``course_lib.core.caching`` and formatted with ``course_lib.core.units``.

Stable CSS classes (``_dom_classes``): boxes ``course-prefix-cache-explorer``,
``course-session-cache-explorer``, ``course-cache-budget-explorer``; controls ``course-prefix-tokens``,
``course-new-tokens``, ``course-hit-rate``, ``course-turns``, ``course-cache-budget``; outputs
``course-ttft-miss``, ``course-ttft-hit``, ``course-ttft-expected``, ``course-speedup``,
``course-session-tokens-nocache``, ``course-session-tokens-cached``, ``course-session-time-nocache``,
``course-session-time-cached``, ``course-sessions-fit``, ``course-budget-hit-rate``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import ipywidgets as widgets

from course_lib.core.caching import (cache_memory_bytes, hit_rate_vs_budget, prefix_reuse, session_cost,
                                     sessions_in_budget, shared_prefix_workload)
from course_lib.core.estimator import kv_cache_bytes
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.units import format_bytes, format_time
from course_lib.core.validation import require_count, require_fraction, require_positive
from course_lib.lessons.widgets import _html

__all__ = ["PrefixCacheReading", "prefix_cache_reading", "prefix_cache_explorer", "PrefixCacheExplorer",
           "SessionCacheReading", "session_cache_reading", "session_cache_explorer", "SessionCacheExplorer",
           "CacheBudgetReading", "cache_budget_reading", "cache_budget_explorer", "CacheBudgetExplorer",
           "PREFIX_RANGE", "NEW_RANGE", "TURNS_RANGE", "BUDGET_RANGE_GB", "BUDGET_WORKLOAD"]

PREFIX_RANGE = (0, 16384, 64)
NEW_RANGE = (1, 2048, 1)
TURNS_RANGE = (1, 50, 1)
BUDGET_RANGE_GB = (0.1, 8.0, 0.1)
#: the workload the budget explorer replays: 400 requests over 20 shared 1,024-token prompts (Zipf 1)
BUDGET_WORKLOAD = dict(requests=400, prefixes=20, prefix_tokens=1024, suffix_tokens=64, zipf=1.0, seed=0)


def _label(cls: str, bold: bool = False) -> widgets.Label:
    style = {"font_weight": "bold"} if bold else {}
    return widgets.Label(value="", style=style, _dom_classes=(cls,))


# --------------------------------------------------------------------------------------------------
# Prefix cache
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrefixCacheReading:
    ttft_miss_text: str
    ttft_hit_text: str
    ttft_expected_text: str
    speedup_text: str
    reuse: object


def prefix_cache_reading(model="mistral-7b", hardware="h200", prefix_tokens=4000, new_tokens=100, hit_rate=0.5,
                         precision="fp16", block_tokens=16) -> PrefixCacheReading:
    """The texts of the prefix explorer: ``format_time`` of miss, hit and mean TTFT, and the speed-up."""
    r = prefix_reuse(model, hardware, prefix_tokens, new_tokens, precision=precision, block_tokens=block_tokens)
    h = require_fraction("hit_rate", hit_rate, allow_zero=True)
    return PrefixCacheReading(format_time(r.ttft_miss), format_time(r.ttft_hit), format_time(r.expected_ttft(h)),
                              f"{r.speedup:.2f}x faster on a hit ({r.cached_tokens:,} tokens reused)", r)


class PrefixCacheExplorer(_html.Snapshot, widgets.VBox):
    """Sliders ``prefix``, ``new``, ``hit_rate``; labels ``miss``, ``hit``, ``expected``, ``speedup``."""

    def __init__(self, model="mistral-7b", hardware="h200", prefix_tokens=4000, new_tokens=100, hit_rate=0.5,
                 precision="fp16", block_tokens=16):
        self.model, self.hardware = get_model(model).name, get_hardware(hardware).name
        self.precision, self.block_tokens = precision, block_tokens
        prefix_reuse(self.model, self.hardware, prefix_tokens, new_tokens, precision=precision,
                     block_tokens=block_tokens)
        style = {"description_width": "9em"}
        lay = widgets.Layout(width="40em")
        self.prefix = widgets.IntSlider(value=prefix_tokens, min=PREFIX_RANGE[0], max=PREFIX_RANGE[1],
                                        step=PREFIX_RANGE[2], description="Shared prefix", style=style, layout=lay,
                                        _dom_classes=("course-prefix-tokens",))
        self.new = widgets.IntSlider(value=new_tokens, min=NEW_RANGE[0], max=NEW_RANGE[1], description="New tokens",
                                     style=style, layout=lay, _dom_classes=("course-new-tokens",))
        self.hit_rate = widgets.FloatSlider(value=require_fraction("hit_rate", hit_rate, allow_zero=True), min=0.0,
                                            max=1.0, step=0.05, description="Hit rate", style=style, layout=lay,
                                            readout_format=".0%", _dom_classes=("course-hit-rate",))
        self.miss = _label("course-ttft-miss", True)
        self.hit = _label("course-ttft-hit", True)
        self.expected = _label("course-ttft-expected", True)
        self.speedup = _label("course-speedup")
        self.reading: PrefixCacheReading | None = None
        super().__init__(children=[
            widgets.HTML(f"<b>{self.model}</b> on <b>{get_hardware(self.hardware).display or self.hardware}</b>, "
                         f"{precision}, cache blocks of {block_tokens} tokens (estimator at 100 % of peak)"),
            self.prefix, self.new, self.hit_rate,
            widgets.HBox([widgets.Label("TTFT miss:"), self.miss, widgets.Label("hit:"), self.hit,
                          widgets.Label("mean:"), self.expected]),
            self.speedup])
        self.add_class("course-prefix-cache-explorer")
        for w in (self.prefix, self.new, self.hit_rate):
            w.observe(self._refresh, names="value")
        self._refresh()

    def settings(self) -> dict:
        return dict(model=self.model, hardware=self.hardware, prefix_tokens=self.prefix.value,
                    new_tokens=self.new.value, hit_rate=self.hit_rate.value, precision=self.precision,
                    block_tokens=self.block_tokens)

    def _refresh(self, change=None):
        r = prefix_cache_reading(**self.settings())
        self.reading = r
        self.miss.value, self.hit.value = r.ttft_miss_text, r.ttft_hit_text
        self.expected.value, self.speedup.value = r.ttft_expected_text, r.speedup_text


def prefix_cache_explorer(model="mistral-7b", hardware="h200", prefix_tokens=4000, new_tokens=100, hit_rate=0.5,
                          precision="fp16", block_tokens=16) -> PrefixCacheExplorer:
    """Prefix length, new tokens and hit rate -> TTFT on a miss, on a hit and on average."""
    return PrefixCacheExplorer(model, hardware, prefix_tokens, new_tokens, hit_rate, precision, block_tokens)


# --------------------------------------------------------------------------------------------------
# Session cache
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionCacheReading:
    tokens_nocache_text: str
    tokens_cached_text: str
    time_nocache_text: str
    time_cached_text: str
    cost: object


def session_cache_reading(model="mistral-7b", hardware="h200", system_tokens=1000, user_tokens=50,
                          reply_tokens=200, turns=10, precision="fp16") -> SessionCacheReading:
    """Cumulative prefilled tokens and summed TTFT over ``turns`` turns, without and with a session cache."""
    s = session_cost(model, hardware, system_tokens, user_tokens, reply_tokens, turns, precision=precision)
    return SessionCacheReading(f"{s.cumulative_tokens_nocache[-1]:,} tokens",
                               f"{s.cumulative_tokens_cached[-1]:,} tokens",
                               format_time(s.cumulative_ttft_nocache[-1]), format_time(s.cumulative_ttft_cached[-1]), s)


class SessionCacheExplorer(_html.Snapshot, widgets.VBox):
    """Slider ``turns``; labels ``tokens_nocache``, ``tokens_cached``, ``time_nocache``, ``time_cached``."""

    def __init__(self, model="mistral-7b", hardware="h200", system_tokens=1000, user_tokens=50, reply_tokens=200,
                 turns=10, precision="fp16"):
        self.model, self.hardware = get_model(model).name, get_hardware(hardware).name
        self.fixed = dict(system_tokens=system_tokens, user_tokens=user_tokens, reply_tokens=reply_tokens,
                          precision=precision)
        session_cost(self.model, self.hardware, system_tokens, user_tokens, reply_tokens, turns, precision=precision)
        self.turns = widgets.IntSlider(value=turns, min=TURNS_RANGE[0], max=TURNS_RANGE[1], description="Turns",
                                       style={"description_width": "9em"}, layout=widgets.Layout(width="40em"),
                                       _dom_classes=("course-turns",))
        self.tokens_nocache = _label("course-session-tokens-nocache", True)
        self.tokens_cached = _label("course-session-tokens-cached", True)
        self.time_nocache = _label("course-session-time-nocache", True)
        self.time_cached = _label("course-session-time-cached", True)
        self.reading: SessionCacheReading | None = None
        super().__init__(children=[
            widgets.HTML(f"<b>{self.model}</b> on <b>{get_hardware(self.hardware).display or self.hardware}</b>: "
                         f"system prompt {system_tokens:,} tokens, {user_tokens:,} user and {reply_tokens:,} reply "
                         f"tokens per turn"),
            self.turns,
            widgets.HBox([widgets.Label("Prefilled, no cache:"), self.tokens_nocache, widgets.Label("summed TTFT:"),
                          self.time_nocache]),
            widgets.HBox([widgets.Label("Prefilled, session cache:"), self.tokens_cached,
                          widgets.Label("summed TTFT:"), self.time_cached])])
        self.add_class("course-session-cache-explorer")
        self.turns.observe(self._refresh, names="value")
        self._refresh()

    def settings(self) -> dict:
        return dict(model=self.model, hardware=self.hardware, turns=self.turns.value, **self.fixed)

    def _refresh(self, change=None):
        r = session_cache_reading(**self.settings())
        self.reading = r
        self.tokens_nocache.value, self.tokens_cached.value = r.tokens_nocache_text, r.tokens_cached_text
        self.time_nocache.value, self.time_cached.value = r.time_nocache_text, r.time_cached_text


def session_cache_explorer(model="mistral-7b", hardware="h200", system_tokens=1000, user_tokens=50,
                           reply_tokens=200, turns=10, precision="fp16") -> SessionCacheExplorer:
    """Turns of a chat -> prefilled tokens and summed TTFT, without and with a session cache."""
    return SessionCacheExplorer(model, hardware, system_tokens, user_tokens, reply_tokens, turns, precision)


# --------------------------------------------------------------------------------------------------
# Cache budget
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheBudgetReading:
    sessions_text: str
    hit_rate_text: str
    sessions: int
    hit_rate: float


@lru_cache(maxsize=4)
def _workload(model_name: str) -> tuple:
    vocab = get_model(model_name).vocab
    return tuple(tuple(r) for r in shared_prefix_workload(vocab=vocab, **BUDGET_WORKLOAD))


def cache_budget_reading(model="mistral-7b", budget_gb=1.0, session_tokens=8192, kv_precision="fp16",
                         block_tokens=16) -> CacheBudgetReading:
    """Sessions of ``session_tokens`` whose K/V fit in ``budget_gb`` GB, and the LRU hit rate of that budget.

    Sessions: ``floor(budget / cache_memory_bytes(model, session_tokens))``; hit rate:
    ``hit_rate_vs_budget`` on the :data:`BUDGET_WORKLOAD` requests.
    """
    m = get_model(model)
    budget = require_positive("budget_gb", budget_gb) * 1e9
    st = require_count("session_tokens", session_tokens, minimum=1)
    per_session = cache_memory_bytes(m, st, 1, kv_precision)
    n = sessions_in_budget(m, budget, st, kv_precision)
    reqs = [list(r) for r in _workload(m.name)]
    (row,) = hit_rate_vs_budget(reqs, [budget], kv_cache_bytes(m, 1, kv_precision), block_tokens)
    kept = m.attended_tokens(st)  # a sliding window keeps at most its window per session: say so, not silently
    capped = (f": {m.name} keeps the K/V of only its last {kept:,} tokens, its sliding window" if kept < st else "")
    word = "session" if n == 1 else "sessions"
    return CacheBudgetReading(f"{n:,} {word} of {st:,} tokens ({format_bytes(per_session)} each{capped})",
                              f"{row['hit_rate']:.1%} of requests hit", n, row["hit_rate"])


class CacheBudgetExplorer(_html.Snapshot, widgets.VBox):
    """Slider ``budget`` (GB); labels ``sessions`` and ``hit_rate``."""

    def __init__(self, model="mistral-7b", budget_gb=1.0, session_tokens=8192, kv_precision="fp16", block_tokens=16):
        self.model = get_model(model).name
        self.fixed = dict(session_tokens=session_tokens, kv_precision=kv_precision, block_tokens=block_tokens)
        lo, hi, step = BUDGET_RANGE_GB
        self.budget = widgets.FloatSlider(value=require_positive("budget_gb", budget_gb), min=lo, max=hi, step=step,
                                          description="Cache budget (GB)", style={"description_width": "9em"},
                                          layout=widgets.Layout(width="40em"), _dom_classes=("course-cache-budget",))
        self.sessions = _label("course-sessions-fit", True)
        self.hit_rate = _label("course-budget-hit-rate", True)
        self.reading: CacheBudgetReading | None = None
        w = BUDGET_WORKLOAD
        super().__init__(children=[
            widgets.HTML(f"<b>{self.model}</b>, {kv_precision} K/V. Hit rate: an LRU prefix cache (blocks of "
                         f"{block_tokens} tokens) replaying {w['requests']} requests over {w['prefixes']} shared "
                         f"{w['prefix_tokens']:,}-token prompts (popularity 1/rank), each with its own "
                         f"{w['suffix_tokens']}-token suffix."),
            self.budget,
            widgets.HBox([widgets.Label("Fits:"), self.sessions]),
            widgets.HBox([widgets.Label("Prefix cache:"), self.hit_rate])])
        self.add_class("course-cache-budget-explorer")
        self.budget.observe(self._refresh, names="value")
        self._refresh()

    def settings(self) -> dict:
        return dict(model=self.model, budget_gb=self.budget.value, **self.fixed)

    def _refresh(self, change=None):
        r = cache_budget_reading(**self.settings())
        self.reading = r
        self.sessions.value, self.hit_rate.value = r.sessions_text, r.hit_rate_text


def cache_budget_explorer(model="mistral-7b", budget_gb=1.0, session_tokens=8192, kv_precision="fp16",
                          block_tokens=16) -> CacheBudgetExplorer:
    """Cache budget (GB) -> sessions that fit and the simulated LRU hit rate."""
    return CacheBudgetExplorer(model, budget_gb, session_tokens, kv_precision, block_tokens)
