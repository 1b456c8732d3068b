"""Lesson 07's model of first-token optimisation: prefix caching, prompt (module) caching, session caching.

Lessons: 07

Serves lesson 07 (``notebooks/07_first_token_optimisation.ipynb``), its widgets and plots
(``course_lib.lessons.widgets.caching``, ``course_lib.lessons.plots.caching``) and exercise set 07.

    from course_lib.core import caching
    r = caching.prefix_reuse("mistral-7b", "h200", prefix_tokens=4000, new_tokens=100)
    r.ttft_miss, r.ttft_hit, r.speedup          # seconds, seconds, miss / hit
    r.expected_ttft(0.7)                        # mean TTFT when 70 % of requests hit
    caching.break_even_hit_rate(r.ttft_hit, r.ttft_miss, write_overhead=2e-3)
    s = caching.session_cost("mistral-7b", "h200", system_tokens=1000, user_tokens=50, reply_tokens=200, turns=5)
    s.cumulative_tokens_nocache[-1], s.cumulative_tokens_cached[-1]
    caching.sessions_fit("mistral-7b", "h200", session_tokens=8192)

Every number comes from ``course_lib.core.formulas`` (through the generated module) and the estimator:

* **prefix sharing**: a request whose first ``C`` prompt tokens already have K/V in a cache prefills
  only the other ``P - C`` tokens, attending to the cached ones and reading their K/V:
  ``estimate(..., cached_prefix_tokens=C)``. A miss prefills all ``P``. The mean over requests is
  ``expected_ttft(h, t_hit, t_miss)``; when every miss also pays ``t_w`` to store its K/V, the cache
  only helps above ``cache_break_even_hit_rate(t_w, t_miss, t_hit)``. Caches work in whole blocks
  (``block_aligned_tokens``): vLLM 16 tokens, OpenAI 128-token increments from 1,024 tokens.
* **prompt cache** (Gim et al. 2023, modular attention reuse): K/V of reusable *modules* (a
  document, a tool description) wherever they sit in the prompt. The prefill cost is the same
  arithmetic as a cached prefix of the same size; the *result* is an approximation, because a
  module's keys were encoded at the positions it had when it was cached and without attending to
  the modules before it (see ``MODULAR_REUSE_CAVEATS``).
* **session cache**: turn ``t`` of a chat prefills only its new user tokens; over ``T`` turns the
  prefilled tokens grow linearly instead of quadratically (``session_prefill_tokens_cached`` /
  ``_nocache``; :func:`session_derivation` shows the sympy summation).
* **costs**: bytes held by caches (``kv_cache_bytes``), whole sessions that fit beside the weights
  (``sessions_that_fit``), and the hit rate of an LRU cache of a given byte budget, simulated with
  :mod:`course_lib.core.prefix_cache` (:func:`hit_rate_vs_budget`).

Limits (every function refuses, with a ValueError that names the argument, what lies beyond them):

* token counts, alone or added up (a prompt, a session's prefilled tokens), at most
  ``validation.MAX_COUNT`` (10**15); times, bytes and bandwidths within ``validation``'s
  [1e-30, 1e30]; no function returns an infinite, nan or negative time;
* :func:`turn_prompts` and :func:`session_cost` work turn by turn (one estimate per turn and case):
  at most :data:`MAX_TURNS` turns. :func:`session_prefill_tokens` is closed-form and takes any
  number of turns whose total stays within ``MAX_COUNT``;
* :func:`module_reuse`: at most :data:`MAX_MODULES` modules;
* :func:`shared_prefix_workload` builds at most :data:`MAX_WORKLOAD_TOKENS` token ids;
  :func:`hit_rate_vs_budget` replays at most :data:`MAX_REPLAY_TOKENS` tokens (requests x budgets).

Measuring the same cases on a real (small) model, and predicting them with the calibrated model,
needs torch: :mod:`course_lib.measure.cache_timing`. This module imports neither torch, ipywidgets
nor matplotlib (nor sympy, until :func:`session_derivation` / :func:`break_even_derivation` are called).
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Sequence

from course_lib.core.numeric import raw as g
from course_lib.core import measurements, prefix_cache
from course_lib.core.estimator import Estimate, estimate, kv_cache_bytes
from course_lib.core.hardware import HardwareSpec, get_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.precision import get_precision
from course_lib.core.validation import (MAX_COUNT, require_count, require_flag, require_fraction, require_list,
                                        require_nonnegative, require_positive)

__all__ = [
    "HitMiss", "PrefixReuse", "prefix_reuse", "ttft_with_cache", "reusable_tokens", "expected_ttft",
    "break_even_hit_rate", "write_overhead_time", "ModuleReuse", "module_reuse", "MODULAR_REUSE_CAVEATS",
    "check_session", "turn_prompts", "session_prefill_tokens", "SessionCost", "session_cost", "session_derivation",
    "break_even_derivation",
    "cache_memory_bytes", "sessions_fit", "sessions_in_budget", "shared_prefix_workload", "hit_rate_vs_budget",
    "provider_claims",
    "MAX_TURNS", "MAX_MODULES", "MAX_WORKLOAD_TOKENS", "MAX_REPLAY_TOKENS",
]

#: most turns :func:`turn_prompts` and :func:`session_cost` compute one by one (session_cost: 2 estimates a turn)
MAX_TURNS = 1000
#: most prompt modules :func:`module_reuse` takes
MAX_MODULES = 1000
#: most token ids :func:`shared_prefix_workload` builds (requests x (prefix + suffix) + the shared prefixes)
MAX_WORKLOAD_TOKENS = 10**7
#: most tokens :func:`hit_rate_vs_budget` replays (tokens in ``requests`` x number of budgets), about 10 s
MAX_REPLAY_TOKENS = 2 * 10**7


def _total(names: str, value: int) -> int:
    """A sum of token counts, refused beyond ``MAX_COUNT`` with the arguments that made it."""
    if value > MAX_COUNT:
        shown = f"{value:,.0f}" if value < 1e18 else f"{value:.3e}"
        raise ValueError(f"{names} must be at most {MAX_COUNT:,} tokens (validation.MAX_COUNT, the largest count "
                         f"the course computes with), got {shown}")
    return value


# --------------------------------------------------------------------------------------------------
# Prefix sharing
# --------------------------------------------------------------------------------------------------
def reusable_tokens(prefix_tokens, block_tokens: int = 1, min_tokens: int = 0) -> int:
    """Tokens of a shared ``prefix_tokens`` prefix a block-granular cache can reuse.

    ``block_aligned_tokens(prefix_tokens, block_tokens)`` (whole blocks only), or 0 when the prefix
    is shorter than ``min_tokens`` (OpenAI caches prompts of 1,024 tokens or more, in 128-token
    increments: ``reusable_tokens(P, 128, 1024)``).
    """
    p = require_count("prefix_tokens", prefix_tokens)
    b = require_count("block_tokens", block_tokens, minimum=1)
    lo = require_count("min_tokens", min_tokens)
    if p < lo:
        return 0
    return int(g.block_aligned_tokens(p, b))


def ttft_with_cache(model, hardware, prompt_tokens, cached_tokens=0, precision="fp16", kv_precision=None,
                    compute_efficiency=1.0, bandwidth_efficiency=1.0) -> Estimate:
    """The estimator's prefill of a ``prompt_tokens`` prompt whose first ``cached_tokens`` have cached K/V.

    ``estimate(model, hardware, prompt_tokens, 1, ..., cached_prefix_tokens=cached_tokens)``: its ``ttft``
    is the prefill of the ``prompt_tokens - cached_tokens`` new tokens, attending to the cached ones
    and reading their K/V. ``0 <= cached_tokens < prompt_tokens``.
    """
    p = require_count("prompt_tokens", prompt_tokens, minimum=1)
    c = require_count("cached_tokens", cached_tokens)
    if c >= p:
        raise ValueError(f"cached_tokens must be < prompt_tokens ({p:,}): at least one prompt token is prefilled to "
                         f"produce the first output token; got {c:,}")
    return estimate(model, hardware, p, 1, precision=precision, kv_precision=kv_precision,
                    cached_prefix_tokens=c, compute_efficiency=compute_efficiency,
                    bandwidth_efficiency=bandwidth_efficiency)


def expected_ttft(hit_rate, ttft_hit, ttft_miss) -> float:
    """Mean TTFT (s) when a fraction ``hit_rate`` of requests find their prefix cached."""
    h = require_fraction("hit_rate", hit_rate, allow_zero=True)
    t_hit = require_positive("ttft_hit", ttft_hit)
    t_miss = require_positive("ttft_miss", ttft_miss)
    return g.expected_ttft(h, t_hit, t_miss)


def break_even_hit_rate(ttft_hit, ttft_miss, write_overhead) -> float:
    """Hit rate above which caching lowers the mean TTFT when every miss also pays ``write_overhead`` (s).

    ``cache_break_even_hit_rate(t_w, t_miss, t_hit) = t_w / (t_miss - t_hit + t_w)``: 0 when writing is
    free, approaching 1 as the write overhead dwarfs the saving.
    """
    t_hit = require_positive("ttft_hit", ttft_hit)
    t_miss = require_positive("ttft_miss", ttft_miss)
    t_w = require_nonnegative("write_overhead", write_overhead)
    if t_hit >= t_miss:
        raise ValueError(f"ttft_hit must be < ttft_miss for a cache to help at all, got ttft_hit={t_hit:g} s "
                         f">= ttft_miss={t_miss:g} s")
    return g.cache_break_even_hit_rate(t_w, t_miss, t_hit)


def write_overhead_time(model, tokens, bandwidth, kv_precision="fp16") -> float:
    """Seconds to copy the K/V of ``tokens`` tokens into (or back out of) a cache store at ``bandwidth`` (bytes/s).

    ``memory_time(kv_cache_bytes(model, tokens, kv_precision), bandwidth, 1)``: e.g. offloading a
    prefix to host memory over PCIe on a miss, or loading it back onto the GPU before a hit can use it
    (the same bytes over the same link). A cache in the same GPU memory that keeps the K/V where prefill
    wrote it pays (almost) nothing either way.
    """
    bw = require_positive("bandwidth", bandwidth)
    return g.memory_time(kv_cache_bytes(model, tokens, get_precision(kv_precision, argument="kv_precision")), bw, 1.0)


class HitMiss:
    """What every hit-vs-miss pair derives from its ``ttft_hit`` and ``ttft_miss`` (seconds), which a subclass
    defines."""

    @property
    def speedup(self) -> float:
        """TTFT on a miss / TTFT on a hit."""
        return self.ttft_miss / self.ttft_hit

    @property
    def saved(self) -> float:
        """Seconds a hit saves."""
        return self.ttft_miss - self.ttft_hit

    @property
    def latency_reduction(self) -> float:
        """1 - t_hit / t_miss: the fraction of the TTFT a hit removes (providers quote this as '% lower latency')."""
        return 1.0 - self.ttft_hit / self.ttft_miss

    def expected_ttft(self, hit_rate) -> float:
        """Mean TTFT at ``hit_rate`` (formula ``expected_ttft``)."""
        return expected_ttft(hit_rate, self.ttft_hit, self.ttft_miss)


@dataclass(frozen=True)
class PrefixReuse(HitMiss):
    """A request of ``prefix_tokens`` shared tokens + ``new_tokens`` own tokens, with and without a cache hit."""

    model: ModelSpec
    hardware: HardwareSpec
    prefix_tokens: int
    new_tokens: int
    block_tokens: int
    cached_tokens: int
    hit: Estimate
    miss: Estimate

    ttft_hit = property(lambda self: self.hit.ttft, doc="TTFT (s) on a hit: the estimate with the prefix cached.")
    ttft_miss = property(lambda self: self.miss.ttft, doc="TTFT (s) on a miss: the whole prompt prefilled.")

    @property
    def prompt_tokens(self) -> int:
        return self.prefix_tokens + self.new_tokens

    def break_even_hit_rate(self, write_overhead) -> float:
        return break_even_hit_rate(self.ttft_hit, self.ttft_miss, write_overhead)


def prefix_reuse(model, hardware, prefix_tokens, new_tokens, precision="fp16", kv_precision=None,
                 block_tokens: int = 1, min_tokens: int = 0, compute_efficiency=1.0,
                 bandwidth_efficiency=1.0) -> PrefixReuse:
    """TTFT of a ``prefix_tokens`` + ``new_tokens`` prompt on a cache miss and on a hit.

    The hit reuses ``reusable_tokens(prefix_tokens, block_tokens, min_tokens)`` tokens (whole blocks of
    the shared prefix) and prefills the rest; the miss prefills the whole prompt. Both are
    :func:`ttft_with_cache` estimates (``new_tokens >= 1``: a request always brings its own tokens).
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    p = require_count("prefix_tokens", prefix_tokens)
    n = require_count("new_tokens", new_tokens, minimum=1)
    b = require_count("block_tokens", block_tokens, minimum=1)
    _total("prefix_tokens + new_tokens", p + n)
    c = reusable_tokens(p, b, min_tokens)
    kw = dict(precision=precision, kv_precision=kv_precision, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    miss = ttft_with_cache(m, hw, p + n, 0, **kw)
    hit = ttft_with_cache(m, hw, p + n, c, **kw) if c else miss
    return PrefixReuse(m, hw, p, n, b, c, hit, miss)


# --------------------------------------------------------------------------------------------------
# Prompt cache: reusable modules (Gim et al. 2023)
# --------------------------------------------------------------------------------------------------
MODULAR_REUSE_CAVEATS = (
    "Positions are baked into cached keys: rotary embeddings rotate each key by its position when it is "
    "encoded, so a module cached at one offset and reused at another carries the wrong rotation unless the "
    "cache re-encodes or reserves positions for it (Prompt Cache assigns each module fixed position IDs in a "
    "schema, leaving gaps).",
    "Cross-module attention is skipped: a module's K/V were computed attending only to itself (and to "
    "whatever preceded it when cached), so it never saw the modules placed before it in this prompt; full "
    "prefill would let every token attend to every earlier one.",
    "The error reaches the output: the prompt's new tokens attend to every earlier token, but to the reused "
    "modules' approximate K/V, so their own hidden states, their K/V and the first output token are approximate "
    "too; only the arithmetic of the new tokens is the same as in a full prefill.",
)


@dataclass(frozen=True)
class ModuleReuse(HitMiss):
    """Prefill with some prompt modules' K/V reused: the cost is a cached prefix of their total size."""

    model: ModelSpec
    hardware: HardwareSpec
    module_tokens: tuple[int, ...]
    cached: tuple[bool, ...]
    new_tokens: int
    full: Estimate
    reused: Estimate

    @property
    def cached_tokens(self) -> int:
        return sum(t for t, c in zip(self.module_tokens, self.cached) if c)

    ttft_hit = property(lambda self: self.reused.ttft, doc="TTFT (s) with the cached modules' K/V reused.")
    ttft_miss = property(lambda self: self.full.ttft, doc="TTFT (s) of the full prefill.")

    @property
    def prompt_tokens(self) -> int:
        return sum(self.module_tokens) + self.new_tokens


def module_reuse(model, hardware, module_tokens: Sequence[int], cached: Sequence[bool], new_tokens,
                 precision="fp16", kv_precision=None, compute_efficiency=1.0, bandwidth_efficiency=1.0) -> ModuleReuse:
    """TTFT of a prompt of modules (some with cached K/V) + ``new_tokens``: full prefill vs reuse.

    The arithmetic of reuse does not depend on where the modules sit: the uncached tokens are prefilled
    attending to all cached ones, like ``estimate(..., cached_prefix_tokens=<cached tokens>)``. What
    *does* depend on it is the result's exactness (``MODULAR_REUSE_CAVEATS``).
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    module_tokens = require_list("module_tokens", module_tokens, "a list of token counts",
                                 maximum_items=MAX_MODULES)
    if not module_tokens:
        raise ValueError(f"module_tokens must hold 1 to {MAX_MODULES} modules, got none")
    mods = tuple(require_count(f"module_tokens[{i}]", t, minimum=1) for i, t in enumerate(module_tokens))
    cached = require_list("cached", cached, "a list of booleans, one per module", maximum_items=MAX_MODULES)
    if len(cached) != len(mods):
        raise ValueError(f"cached must be a list of {len(mods)} booleans, one per module of module_tokens, "
                         f"got {len(cached)} items")
    flags = tuple(require_flag(f"cached[{i}]", c) for i, c in enumerate(cached))
    n = require_count("new_tokens", new_tokens, minimum=1)
    kw = dict(precision=precision, kv_precision=kv_precision, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    total = _total("sum(module_tokens) + new_tokens", sum(mods) + n)
    c = sum(t for t, f in zip(mods, flags) if f)
    full = ttft_with_cache(m, hw, total, 0, **kw)
    reused = ttft_with_cache(m, hw, total, c, **kw) if c else full
    return ModuleReuse(m, hw, mods, flags, n, full, reused)


# --------------------------------------------------------------------------------------------------
# Session cache
# --------------------------------------------------------------------------------------------------
def check_session(system_tokens, user_tokens, reply_tokens, turns, *, min_user_tokens: int = 0,
                  max_turns: int = MAX_COUNT) -> tuple[int, int, int, int]:
    """The checked ``(S, u, r, T)`` of a chat of ``turns`` turns: a system prompt, then per turn a user
    message and a reply.

    Counts are whole numbers, ``user_tokens >= min_user_tokens``, ``1 <= turns <= max_turns``, and the
    conversation after the last reply, ``S + T (u + r)``, at most ``validation.MAX_COUNT`` tokens.
    Every session function here (and :mod:`course_lib.measure.cache_timing`) checks its arguments with it.
    """
    S = require_count("system_tokens", system_tokens)
    least = require_count("min_user_tokens", min_user_tokens)
    u = require_count("user_tokens", user_tokens)
    if u < least:
        raise ValueError(f"user_tokens must be >= min_user_tokens ({least}), got {u}")
    r = require_count("reply_tokens", reply_tokens)
    T = require_count("turns", turns, minimum=1, maximum=require_count("max_turns", max_turns, minimum=1))
    _total("system_tokens + turns * (user_tokens + reply_tokens)", S + T * (u + r))
    return S, u, r, T


def turn_prompts(system_tokens, user_tokens, reply_tokens, turns) -> list[tuple[int, int]]:
    """Per turn t = 1..T: (prompt tokens, tokens already cached with a session cache).

    Turn t's prompt is the system prompt, t user messages and the t - 1 replies before it:
    ``S + t u + (t - 1) r``. With a session cache everything but the new user message and the previous
    reply's last token is cached: decoding fed every reply token but the last back into the model (that
    one was sampled, never processed), so its K/V come with the next turn. Cached at turn t >= 2:
    ``S + (t - 1)(u + r) - min(r, 1)``; 0 at turn 1. One pair per turn: at most :data:`MAX_TURNS` turns.
    """
    S, u, r, T = check_session(system_tokens, user_tokens, reply_tokens, turns, max_turns=MAX_TURNS)
    out = []
    for t in range(1, T + 1):
        prompt = S + t * u + (t - 1) * r
        out.append((prompt, 0 if t == 1 else prompt - u - min(r, 1)))
    return out


def session_prefill_tokens(system_tokens, user_tokens, reply_tokens, turns, cached: bool) -> int:
    """Prompt tokens prefilled over ``turns`` turns: ``session_prefill_tokens_cached`` or ``_nocache``.

    Closed-form, so any number of turns is quick; the total must stay within ``validation.MAX_COUNT``
    (10**15) tokens, where the quadratic no-cache total is still an exact whole number.
    """
    S, u, r, T = check_session(system_tokens, user_tokens, reply_tokens, turns)
    if not isinstance(cached, bool):
        raise TypeError(f"cached must be True or False, got {type(cached).__name__} {cached!r}")
    formula = g.session_prefill_tokens_cached if cached else g.session_prefill_tokens_nocache
    total = formula(S, u, r, T)
    # the no-cache formula halves in floating point: bound it before rounding (an int or a float of <= 1e15 is exact)
    _total(f"the tokens prefilled {'with' if cached else 'without'} a cache over the turns (system_tokens, "
           f"user_tokens, reply_tokens, turns)", total)
    return int(round(total))


def _running_total(per_turn: str) -> property:
    """A property: the running totals of the per-turn field ``per_turn`` (turn 1, turns 1-2, ...)."""
    return property(lambda self: tuple(itertools.accumulate(getattr(self, per_turn))),
                    doc=f"Running totals of ``{per_turn}`` over the turns.")


@dataclass(frozen=True)
class SessionCost:
    """Per-turn prefill tokens and TTFT (s) of a ``turns``-turn chat, without and with a session cache."""

    model: ModelSpec
    hardware: HardwareSpec
    system_tokens: int
    user_tokens: int
    reply_tokens: int
    turns: int
    prompts: tuple[int, ...]
    tokens_nocache: tuple[int, ...]
    tokens_cached: tuple[int, ...]
    ttft_nocache: tuple[float, ...]
    ttft_cached: tuple[float, ...]

    cumulative_tokens_nocache = _running_total("tokens_nocache")
    cumulative_tokens_cached = _running_total("tokens_cached")
    cumulative_ttft_nocache = _running_total("ttft_nocache")
    cumulative_ttft_cached = _running_total("ttft_cached")

    @property
    def cache_tokens(self) -> int:
        """Tokens the session's cache holds after the last reply: S + T (u + r)."""
        return self.system_tokens + self.turns * (self.user_tokens + self.reply_tokens)


def session_cost(model, hardware, system_tokens, user_tokens, reply_tokens, turns, precision="fp16",
                 kv_precision=None, compute_efficiency=1.0, bandwidth_efficiency=1.0) -> SessionCost:
    """Prefill tokens and TTFT per turn, without a cache (the whole conversation again) and with one.

    Each turn's TTFT is :func:`ttft_with_cache` of that turn's prompt (:func:`turn_prompts`), with 0
    or the session's cached tokens. ``user_tokens >= 1`` (a turn must bring a token to prefill).
    The token totals equal ``session_prefill_tokens_nocache`` / ``_cached``. Two estimates per turn:
    at most :data:`MAX_TURNS` turns (use :func:`session_prefill_tokens` for the token totals of longer chats).
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    S, u, r, T = check_session(system_tokens, user_tokens, reply_tokens, turns, min_user_tokens=1,
                               max_turns=MAX_TURNS)
    kw = dict(precision=precision, kv_precision=kv_precision, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    prompts, nc, c, t_nc, t_c = [], [], [], [], []
    for prompt, cached in turn_prompts(S, u, r, T):
        prompts.append(prompt)
        nc.append(prompt)
        c.append(prompt - cached)
        t_nc.append(ttft_with_cache(m, hw, prompt, 0, **kw).ttft)
        t_c.append(ttft_with_cache(m, hw, prompt, cached, **kw).ttft)
    return SessionCost(m, hw, S, u, r, T, tuple(prompts), tuple(nc), tuple(c), tuple(t_nc), tuple(t_c))


def session_derivation() -> dict:
    """The sympy derivation of the session totals (imports sympy).

    Returns ``per_turn_nocache`` (S + t u + (t-1) r), ``per_turn_cached`` (S + u at t = 1, then
    u + min(r, 1): the new message and the previous reply's last, never-fed token), their sums over
    t = 1..T by ``sympy.summation`` (``sum_nocache``, ``sum_cached``), ``saved`` (their difference,
    factored), the same written to be read (``sum_cached_readable`` = S + T u + (T - 1) min(1, r);
    ``saved_readable`` = (T - 1)(S + T (u + r) / 2 - min(1, r)); ``saved_with_replies``: that with r >= 1,
    where min(1, r) = 1), ``pending`` (min(1, r): the previous reply's last token, none when replies are
    empty) and ``matches``: whether the sums equal the formulas ``session_prefill_tokens_nocache`` /
    ``_cached`` of ``course_lib.core.formulas`` and the readable forms equal the sums.
    """
    import sympy as sp

    from course_lib.core import formulas

    s = formulas.S
    per_nc = s.system_tokens + s.turn * s.user_tokens + (s.turn - 1) * s.reply_tokens
    sum_nc = sp.factor(sp.summation(per_nc, (s.turn, 1, s.turns)))
    # the system prompt is prefilled once (turn 1), every turn prefills its user message, and every turn after
    # the first also the previous reply's last token (sampled, never fed back, so it has no K/V yet)
    per_c = s.user_tokens + sp.Min(s.reply_tokens, 1)
    sum_c = sp.expand(s.system_tokens + s.user_tokens + sp.summation(per_c, (s.turn, 2, s.turns)))
    saved = sp.factor(sp.expand(sum_nc - sum_c))
    pending = sp.Min(1, s.reply_tokens)
    # the same two results written to be read: (T - 1) turns each skip the system prompt and, on average, half
    # of the conversation so far, less the one pending token that a cached turn still prefills
    sum_c_read = sp.Add(s.system_tokens, s.turns * s.user_tokens, sp.Mul(s.turns - 1, pending, evaluate=False),
                        evaluate=False)
    saved_read = sp.Mul(s.turns - 1, s.system_tokens + s.turns * (s.user_tokens + s.reply_tokens) / 2 - pending,
                        evaluate=False)
    matches = (sp.simplify(sum_nc - formulas.expr("session_prefill_tokens_nocache")) == 0
               and sp.simplify(sum_c - formulas.expr("session_prefill_tokens_cached")) == 0
               and sp.simplify(saved_read - saved) == 0 and sp.simplify(sum_c_read - sum_c) == 0)
    return {"per_turn_nocache": per_nc, "per_turn_cached": per_c, "sum_nocache": sum_nc,
            "sum_cached": sum_c, "saved": saved, "sum_cached_readable": sum_c_read, "saved_readable": saved_read,
            "saved_with_replies": saved_read.subs(pending, 1), "pending": pending, "matches": bool(matches)}


def break_even_derivation() -> dict:
    """Solve h t_hit + (1 - h)(t_miss + t_w) = t_miss for h with sympy (imports sympy).

    Returns ``equation`` (the sympy Eq), ``solution`` and ``matches`` (equal to the formula
    ``cache_break_even_hit_rate``).
    """
    import sympy as sp

    from course_lib.core import formulas

    s = formulas.S
    eq = sp.Eq(s.hit_rate * s.ttft_hit + (1 - s.hit_rate) * (s.ttft_miss + s.write_overhead), s.ttft_miss)
    (sol,) = sp.solve(eq, s.hit_rate)
    matches = sp.simplify(sol - formulas.expr("cache_break_even_hit_rate")) == 0
    return {"equation": eq, "solution": sp.simplify(sol), "matches": bool(matches)}


# --------------------------------------------------------------------------------------------------
# Costs: memory, sessions that fit, LRU hit rate
# --------------------------------------------------------------------------------------------------
def cache_memory_bytes(model, cached_tokens, sessions=1, kv_precision="fp16") -> float:
    """Bytes of K/V that ``sessions`` caches of ``cached_tokens`` tokens each hold.

    ``kv_cache_bytes(model, cached_tokens, kv_precision, batch=sessions)``: bytes per token x cached
    tokens x sessions (a sliding-window model keeps at most its window per session).
    """
    t = require_count("cached_tokens", cached_tokens)
    n = require_count("sessions", sessions, minimum=1)
    return kv_cache_bytes(model, t, get_precision(kv_precision, argument="kv_precision"), batch=n)


def sessions_in_budget(model, budget_bytes, session_tokens, kv_precision="fp16") -> int:
    """Whole sessions of ``session_tokens`` tokens whose cached K/V fit in a cache budget of ``budget_bytes``.

    ``floor(budget_bytes / cache_memory_bytes(model, session_tokens))`` (a sliding-window model keeps at most
    its window per session).
    """
    budget = require_nonnegative("budget_bytes", budget_bytes)
    st = require_count("session_tokens", session_tokens, minimum=1)
    return int(budget // cache_memory_bytes(model, st, 1, kv_precision))


def sessions_fit(model, hardware, session_tokens, precision="fp16", kv_precision="fp16", reserve_bytes=0) -> int:
    """Whole sessions whose cached K/V (``session_tokens`` each) fit beside the weights.

    ``sessions_that_fit(capacity - reserve_bytes, weight_bytes, kv bytes per token, attended tokens)``;
    0 when the weights alone (plus the reserve) do not fit. ``reserve_bytes`` keeps memory back for
    activations and the framework's workspace.
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    st = require_count("session_tokens", session_tokens, minimum=1)
    reserve = require_nonnegative("reserve_bytes", reserve_bytes)
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog")
    k_tok = kv_cache_bytes(m, 1, get_precision(kv_precision, argument="kv_precision"))
    w = m.weight_bytes(precision)
    free = hw.capacity - reserve
    if free <= w:
        return 0
    return int(g.sessions_that_fit(free, w, k_tok, m.attended_tokens(st)))


def shared_prefix_workload(requests=400, prefixes=20, prefix_tokens=1024, suffix_tokens=64, zipf=1.0,
                           vocab=32000, seed=0) -> list[list[int]]:
    """Synthetic requests: one of ``prefixes`` shared prompts (popularity ~ 1 / rank^zipf) + a unique suffix.

    Token ids are drawn with ``random.Random(seed)`` (reproducible, no numpy). Prefix ``i`` is the
    same list of ``prefix_tokens`` ids in every request that uses it; every suffix is fresh. Any
    ``zipf >= 0`` works (0: uniform; a large one sends nearly every request to prefix 0). At most
    :data:`MAX_WORKLOAD_TOKENS` token ids in all: ``prefixes * prefix_tokens + requests * (prefix_tokens +
    suffix_tokens)``.
    """
    n = require_count("requests", requests, minimum=1)
    k = require_count("prefixes", prefixes, minimum=1)
    p = require_count("prefix_tokens", prefix_tokens, minimum=1)
    s = require_count("suffix_tokens", suffix_tokens, minimum=1)
    a = require_nonnegative("zipf", zipf)
    v = require_count("vocab", vocab, minimum=2)
    rng = random.Random(require_count("seed", seed))
    size = k * p + n * (p + s)
    if size > MAX_WORKLOAD_TOKENS:
        raise ValueError(f"requests, prefixes, prefix_tokens and suffix_tokens make a workload of {size:,} token ids "
                         f"(prefixes * prefix_tokens + requests * (prefix_tokens + suffix_tokens)); at most "
                         f"{MAX_WORKLOAD_TOKENS:,} (MAX_WORKLOAD_TOKENS)")
    shared = [[rng.randrange(v) for _ in range(p)] for _ in range(k)]
    weights = [(i + 1.0) ** -a for i in range(k)]    # 1 / rank^zipf; underflows to 0 for a steep zipf, never overflows
    picks = rng.choices(range(k), weights=weights, k=n)
    return [shared[i] + [rng.randrange(v) for _ in range(s)] for i in picks]


def hit_rate_vs_budget(requests, budgets_bytes, bytes_per_token, block_tokens=16) -> list[dict]:
    """Replay ``requests`` through an LRU prefix cache of each byte budget (``course_lib.core.prefix_cache.simulate``).

    Every request recomputes at least its last token (``min_new_tokens=1``). Returns one dict per
    budget: ``budget_bytes``, ``hit_rate`` (fraction of requests that reused at least one block),
    ``token_hit_rate`` (reused tokens / prompt tokens), ``hit_tokens``, ``evictions``, ``bytes_used``.
    One replay per budget: at most :data:`MAX_REPLAY_TOKENS` tokens (tokens in ``requests`` x budgets).
    """
    requests = require_list("requests", requests, "a non-empty list of token-id lists")
    if not requests:
        raise ValueError("requests must be a non-empty list of token-id lists, got an empty one")
    requests = [require_list(f"requests[{i}]", r, "a list of token ids") for i, r in enumerate(requests)]
    tokens = sum(len(r) for r in requests)
    most = MAX_REPLAY_TOKENS // tokens if tokens else 10**6
    try:   # read lazily up to the most budgets the replay limit allows (an endless generator stops there)
        budgets = require_list("budgets_bytes", budgets_bytes, "a list of byte budgets", maximum_items=most)
    except ValueError:
        raise ValueError(f"requests x budgets_bytes: replaying {tokens:,} tokens for each of more than {most:,} "
                         f"budgets exceeds {MAX_REPLAY_TOKENS:,} tokens (MAX_REPLAY_TOKENS); pass fewer "
                         f"budgets or a shorter workload") from None
    budgets = [require_positive(f"budgets_bytes[{i}]", b) for i, b in enumerate(budgets)]
    bpt = require_positive("bytes_per_token", bytes_per_token)
    bt = require_count("block_tokens", block_tokens, minimum=1)
    out = []
    for b in budgets:
        r = prefix_cache.simulate(requests, block_tokens=bt, capacity_bytes=b, bytes_per_token=bpt, min_new_tokens=1)
        out.append({"budget_bytes": b, "hit_rate": r.request_hit_rate, "token_hit_rate": r.hit_rate,
                    "hit_tokens": r.hit_tokens, "evictions": r.evictions, "bytes_used": r.bytes_used})
    return out


def provider_claims() -> list[dict]:
    """The published prompt-caching records (``measurements.published()`` of kind 'prompt_caching')."""
    return [r for r in measurements.published() if r["kind"] == "prompt_caching"]
