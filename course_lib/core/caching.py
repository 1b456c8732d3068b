"""Lesson 07's model of first-token optimisation: prefix caching, prompt (module) caching, session caching.

    from course_lib.core import caching
    r = caching.prefix_reuse("mistral-7b", "h200", prefix_tokens=4000, new_tokens=100)
    r.ttft_miss, r.ttft_hit, r.speedup          # seconds, seconds, miss / hit
    r.expected_ttft(0.7)                        # mean TTFT when 70 % of requests hit
    caching.break_even_hit_rate(r.ttft_hit, r.ttft_miss, write_overhead=2e-3)
    s = caching.session_cost("mistral-7b", "h200", system_tokens=1000, user_tokens=50, reply_tokens=200, turns=5)
    s.cumulative_tokens_nocache[-1], s.cumulative_tokens_cached[-1]
    caching.sessions_fit("mistral-7b", "h200", session_tokens=8192)

Every number comes from ``course_lib.formulas`` (through ``_generated``) and the estimator:

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
  :mod:`course_lib.prefix_cache` (:func:`hit_rate_vs_budget`).

The measurement helpers at the end (:func:`measure_prefix_ttft`, :func:`measure_session_ttft`,
:func:`measure_module_reuse`) time a :class:`course_lib.tinylm.TinyLM` with ``bench.Stopwatch``;
:func:`predict_prefix_ttft_calibrated` / :func:`predict_session_ttft_calibrated` predict the same
cases with the calibrated model of :mod:`course_lib.validate` (probes only). They import
``course_lib.bench`` / ``course_lib.validate`` (torch) inside the function, so importing this module
never imports torch, ipywidgets or matplotlib.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import statistics
from dataclasses import dataclass
from typing import Sequence

from course_lib.core import _generated as g
from course_lib.core.estimator import Estimate, estimate, kv_cache_bytes
from course_lib.core.hardware import HardwareSpec, get_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.precision import get_precision
from course_lib.core.validation import require_count, require_fraction, require_nonnegative, require_positive

__all__ = [
    "PrefixReuse", "prefix_reuse", "ttft_with_cache", "reusable_tokens", "expected_ttft", "break_even_hit_rate",
    "write_overhead_time", "ModuleReuse", "module_reuse", "MODULAR_REUSE_CAVEATS",
    "turn_prompts", "session_prefill_tokens", "SessionCost", "session_cost", "session_derivation",
    "break_even_derivation",
    "cache_memory_bytes", "sessions_fit", "shared_prefix_workload", "hit_rate_vs_budget",
    "PrefixTiming", "measure_prefix_ttft", "SessionTiming", "measure_session_ttft", "ModuleAgreement",
    "measure_module_reuse", "provider_claims", "profile_prefill", "PROFILE_GROUPS",
    "calibration_shapes", "CalibratedPrefix", "predict_prefix_ttft_calibrated", "CalibratedSession",
    "predict_session_ttft_calibrated",
]


def _kv_precision(precision, kv_precision) -> str:
    """The estimator's default: the KV cache in the weights' format, or fp16 for integer/block formats."""
    if kv_precision is not None:
        return get_precision(kv_precision).name
    w = get_precision(precision).name
    return w if w in ("fp32", "fp16", "bf16", "fp8") else "fp16"


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
    and reading their K/V.
    """
    return estimate(model, hardware, prompt_tokens, 1, precision=precision, kv_precision=kv_precision,
                    cached_prefix_tokens=cached_tokens, compute_efficiency=compute_efficiency,
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
    return g.memory_time(kv_cache_bytes(model, tokens, kv_precision), bw, 1.0)


class _HitMiss:
    """What every hit-vs-miss pair derives from its ``ttft_hit`` and ``ttft_miss`` (seconds)."""

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
class PrefixReuse(_HitMiss):
    """A request of ``prefix_tokens`` shared tokens + ``new_tokens`` own tokens, with and without a cache hit."""

    model: ModelSpec
    hardware: HardwareSpec
    prefix_tokens: int
    new_tokens: int
    block_tokens: int
    cached_tokens: int
    hit: Estimate
    miss: Estimate

    @property
    def prompt_tokens(self) -> int:
        return self.prefix_tokens + self.new_tokens

    @property
    def ttft_hit(self) -> float:
        return self.hit.ttft

    @property
    def ttft_miss(self) -> float:
        return self.miss.ttft

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
class ModuleReuse(_HitMiss):
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

    @property
    def prompt_tokens(self) -> int:
        return sum(self.module_tokens) + self.new_tokens

    @property
    def ttft_miss(self) -> float:
        return self.full.ttft

    @property
    def ttft_hit(self) -> float:
        return self.reused.ttft


def module_reuse(model, hardware, module_tokens: Sequence[int], cached: Sequence[bool], new_tokens,
                 precision="fp16", kv_precision=None, compute_efficiency=1.0, bandwidth_efficiency=1.0) -> ModuleReuse:
    """TTFT of a prompt of modules (some with cached K/V) + ``new_tokens``: full prefill vs reuse.

    The arithmetic of reuse does not depend on where the modules sit: the uncached tokens are prefilled
    attending to all cached ones, like ``estimate(..., cached_prefix_tokens=<cached tokens>)``. What
    *does* depend on it is the result's exactness (``MODULAR_REUSE_CAVEATS``).
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    if isinstance(module_tokens, (str, bytes)) or not hasattr(module_tokens, "__len__"):
        raise TypeError(f"module_tokens must be a list of token counts, got {type(module_tokens).__name__}")
    mods = tuple(require_count(f"module_tokens[{i}]", t, minimum=1) for i, t in enumerate(module_tokens))
    if isinstance(cached, (str, bytes)) or not hasattr(cached, "__len__") or len(cached) != len(mods):
        raise ValueError(f"cached must be a list of {len(mods)} booleans, one per module, got {cached!r}")
    flags = tuple(bool(c) for c in cached)
    n = require_count("new_tokens", new_tokens, minimum=1)
    kw = dict(precision=precision, kv_precision=kv_precision, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    total = sum(mods) + n
    c = sum(t for t, f in zip(mods, flags) if f)
    full = ttft_with_cache(m, hw, total, 0, **kw)
    reused = ttft_with_cache(m, hw, total, c, **kw) if c else full
    return ModuleReuse(m, hw, mods, flags, n, full, reused)


# --------------------------------------------------------------------------------------------------
# Session cache
# --------------------------------------------------------------------------------------------------
def _session_args(system_tokens, user_tokens, reply_tokens, turns, user_min=0):
    return (require_count("system_tokens", system_tokens), require_count("user_tokens", user_tokens, minimum=user_min),
            require_count("reply_tokens", reply_tokens), require_count("turns", turns, minimum=1))


def turn_prompts(system_tokens, user_tokens, reply_tokens, turns) -> list[tuple[int, int]]:
    """Per turn t = 1..T: (prompt tokens, tokens already cached with a session cache).

    Turn t's prompt is the system prompt, t user messages and the t - 1 replies before it:
    ``S + t u + (t - 1) r``. With a session cache everything but the new user message and the previous
    reply's last token is cached: decoding fed every reply token but the last back into the model (that
    one was sampled, never processed), so its K/V come with the next turn. Cached at turn t >= 2:
    ``S + (t - 1)(u + r) - min(r, 1)``; 0 at turn 1.
    """
    S, u, r, T = _session_args(system_tokens, user_tokens, reply_tokens, turns)
    out = []
    for t in range(1, T + 1):
        prompt = S + t * u + (t - 1) * r
        out.append((prompt, 0 if t == 1 else prompt - u - min(r, 1)))
    return out


def session_prefill_tokens(system_tokens, user_tokens, reply_tokens, turns, cached: bool) -> int:
    """Prompt tokens prefilled over ``turns`` turns: ``session_prefill_tokens_cached`` or ``_nocache``."""
    S, u, r, T = _session_args(system_tokens, user_tokens, reply_tokens, turns)
    if not isinstance(cached, bool):
        raise TypeError(f"cached must be True or False, got {type(cached).__name__} {cached!r}")
    if cached:
        return int(g.session_prefill_tokens_cached(S, u, r, T))
    return int(round(g.session_prefill_tokens_nocache(S, u, r, T)))


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

    @property
    def cumulative_tokens_nocache(self) -> tuple[int, ...]:
        return tuple(itertools.accumulate(self.tokens_nocache))

    @property
    def cumulative_tokens_cached(self) -> tuple[int, ...]:
        return tuple(itertools.accumulate(self.tokens_cached))

    @property
    def cumulative_ttft_nocache(self) -> tuple[float, ...]:
        return tuple(itertools.accumulate(self.ttft_nocache))

    @property
    def cumulative_ttft_cached(self) -> tuple[float, ...]:
        return tuple(itertools.accumulate(self.ttft_cached))

    @property
    def cache_tokens(self) -> int:
        """Tokens the session's cache holds after the last reply: S + T (u + r)."""
        return self.system_tokens + self.turns * (self.user_tokens + self.reply_tokens)


def session_cost(model, hardware, system_tokens, user_tokens, reply_tokens, turns, precision="fp16",
                 kv_precision=None, compute_efficiency=1.0, bandwidth_efficiency=1.0) -> SessionCost:
    """Prefill tokens and TTFT per turn, without a cache (the whole conversation again) and with one.

    Each turn's TTFT is :func:`ttft_with_cache` of that turn's prompt (:func:`turn_prompts`), with 0
    or the session's cached tokens. ``user_tokens >= 1`` (a turn must bring a token to prefill).
    The token totals equal ``session_prefill_tokens_nocache`` / ``_cached``.
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    S, u, r, T = _session_args(system_tokens, user_tokens, reply_tokens, turns, user_min=1)
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
    u + min(r, 1): the new message and the previous reply's last, never-fed token), their sums over t = 1..T by ``sympy.summation`` (``sum_nocache``,
    ``sum_cached``), ``saved`` (their difference, factored) and ``matches``: whether the sums equal the
    formulas ``session_prefill_tokens_nocache`` / ``_cached`` of ``course_lib.formulas``.
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
    matches = (sp.simplify(sum_nc - formulas.expr("session_prefill_tokens_nocache")) == 0
               and sp.simplify(sum_c - formulas.expr("session_prefill_tokens_cached")) == 0)
    return {"per_turn_nocache": per_nc, "per_turn_cached": per_c, "sum_nocache": sum_nc,
            "sum_cached": sum_c, "saved": saved, "matches": bool(matches)}


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
    return kv_cache_bytes(model, t, kv_precision, batch=n)


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
    k_tok = kv_cache_bytes(m, 1, kv_precision)
    w = m.weight_bytes(precision)
    free = hw.capacity - reserve
    if free <= w:
        return 0
    return int(g.sessions_that_fit(free, w, k_tok, m.attended_tokens(st)))


def shared_prefix_workload(requests=400, prefixes=20, prefix_tokens=1024, suffix_tokens=64, zipf=1.0,
                           vocab=32000, seed=0) -> list[list[int]]:
    """Synthetic requests: one of ``prefixes`` shared prompts (popularity ~ 1 / rank^zipf) + a unique suffix.

    Token ids are drawn with ``random.Random(seed)`` (reproducible, no numpy). Prefix ``i`` is the
    same list of ``prefix_tokens`` ids in every request that uses it; every suffix is fresh.
    """
    n = require_count("requests", requests, minimum=1)
    k = require_count("prefixes", prefixes, minimum=1)
    p = require_count("prefix_tokens", prefix_tokens, minimum=1)
    s = require_count("suffix_tokens", suffix_tokens, minimum=1)
    a = require_nonnegative("zipf", zipf)
    v = require_count("vocab", vocab, minimum=2)
    rng = random.Random(require_count("seed", seed))
    shared = [[rng.randrange(v) for _ in range(p)] for _ in range(k)]
    weights = [1.0 / (i + 1) ** a for i in range(k)]
    picks = rng.choices(range(k), weights=weights, k=n)
    return [shared[i] + [rng.randrange(v) for _ in range(s)] for i in picks]


def hit_rate_vs_budget(requests, budgets_bytes, bytes_per_token, block_tokens=16) -> list[dict]:
    """Replay ``requests`` through an LRU prefix cache of each byte budget (``course_lib.prefix_cache.simulate``).

    Every request recomputes at least its last token (``min_new_tokens=1``). Returns one dict per
    budget: ``budget_bytes``, ``hit_rate`` (fraction of requests that reused at least one block),
    ``token_hit_rate`` (reused tokens / prompt tokens), ``hit_tokens``, ``evictions``, ``bytes_used``.
    """
    from course_lib.core import prefix_cache

    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__len__") or not len(requests):
        raise ValueError("requests must be a non-empty list of token-id lists")
    if isinstance(budgets_bytes, (str, bytes)) or not hasattr(budgets_bytes, "__iter__"):
        raise TypeError(f"budgets_bytes must be a list of byte budgets, got {type(budgets_bytes).__name__}")
    budgets = [require_positive(f"budgets_bytes[{i}]", b) for i, b in enumerate(budgets_bytes)]
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
    from course_lib.core import measurements

    return [r for r in measurements.published() if r["kind"] == "prompt_caching"]


# --------------------------------------------------------------------------------------------------
# Measurements on a real (small) model: course_lib.tinylm.TinyLM (torch is imported only in here)
# --------------------------------------------------------------------------------------------------
def _timing_tools():
    """course_lib.bench, for its public timing helpers ``Stopwatch`` and ``quartiles`` (imports torch)."""
    from course_lib.measure import bench

    return bench


def _random_ids(rng: random.Random, vocab: int, n: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def _check_lm(lm, needed: int):
    for attr in ("spec", "max_seq", "prefill", "extend", "save_state", "device"):
        if not hasattr(lm, attr):
            raise TypeError(f"lm must be a course_lib.tinylm.TinyLM, got {type(lm).__name__} (no .{attr})")
    if needed > lm.max_seq:
        raise ValueError(f"the measurement needs {needed} tokens but the TinyLM's cache holds max_seq={lm.max_seq}; "
                         f"build it with TinyLM(..., max_seq={needed})")


@dataclass(frozen=True)
class PrefixTiming(_HitMiss):
    """Measured TTFT (s, medians over ``repeats``) of a prefix + new-token prompt, full vs with the prefix's K/V loaded.

    ``max_abs_diff``: the largest difference between the cached prefill's logits and the same rows of
    the full prefill (prefix reuse is exact: rounding only). ``state_bytes``: the prefix's K/V.
    """

    prefix_tokens: int
    new_tokens: int
    full_seconds: float
    full_q1: float
    full_q3: float
    cached_seconds: float
    cached_q1: float
    cached_q3: float
    repeats: int
    threads: int | None
    max_abs_diff: float
    state_bytes: int

    @property
    def ttft_miss(self) -> float:
        return self.full_seconds

    @property
    def ttft_hit(self) -> float:
        return self.cached_seconds


def measure_prefix_ttft(lm, prefix_tokens: int = 1024, new_tokens: int = 32, repeats: int = 5, warmup: int = 1,
                        threads: int | None = None, seed: int = 0) -> PrefixTiming:
    """Time ``lm.prefill(prompt)`` against ``lm.prefill(prompt, prefix=state)`` (the prefix's saved K/V).

    The prompt is ``prefix_tokens`` + ``new_tokens`` random ids; the state comes from an untimed
    prefill of the prefix. The two kinds of run alternate (``warmup`` untimed pairs first), each
    synchronised on a GPU, with a fixed CPU thread count (``course_lib.bench``).
    """
    bench = _timing_tools()
    P = require_count("prefix_tokens", prefix_tokens, minimum=1)
    n = require_count("new_tokens", new_tokens, minimum=1)
    reps = require_count("repeats", repeats, minimum=1)
    w = require_count("warmup", warmup)
    _check_lm(lm, P + n)
    ids = _random_ids(random.Random(require_count("seed", seed)), lm.spec.vocab, P + n)
    full_t, cached_t, diff = [], [], 0.0
    with bench.Stopwatch(lm.device, threads) as sw:
        lm.prefill(ids[:P])
        state = lm.save_state()
        for i in range(w + reps):
            t_full, full = sw.time(lm.prefill, ids)
            t_cached, cached = sw.time(lm.prefill, ids, prefix=state)
            if i >= w:
                full_t.append(t_full)
                cached_t.append(t_cached)
            diff = max(diff, float((full[P:].float() - cached.float()).abs().max()))
    fq1, fmed, fq3 = bench.quartiles(full_t)
    cq1, cmed, cq3 = bench.quartiles(cached_t)
    return PrefixTiming(P, n, fmed, fq1, fq3, cmed, cq1, cq3, reps, sw.threads, diff, state.nbytes)


@dataclass(frozen=True)
class SessionTiming:
    """Measured TTFT (s) per turn of a chat, medians over ``repeats`` sessions: full re-prefill vs a session cache."""

    system_tokens: int
    user_tokens: int
    reply_tokens: int
    turns: int
    ttft_nocache: tuple
    ttft_cached: tuple
    repeats: int
    threads: int | None

    @property
    def total_nocache(self) -> float:
        return sum(self.ttft_nocache)

    @property
    def total_cached(self) -> float:
        return sum(self.ttft_cached)


def measure_session_ttft(lm, system_tokens: int = 512, user_tokens: int = 32, reply_tokens: int = 64,
                         turns: int = 5, repeats: int = 3, threads: int | None = None, seed: int = 0) -> SessionTiming:
    """Time each turn's first token: ``lm.prefill(whole conversation)`` vs ``lm.extend(new user message)``.

    The replies are random ids fed with ``lm.extend`` between turns (untimed), all but their last
    token: the cache then holds exactly what decoding them would have left there, and the next turn
    processes the reply's last token with its user message (as a server does). The first turn of a cached session is a plain
    prefill of the system prompt and the first message. One untimed session runs first (warm-up).
    """
    bench = _timing_tools()
    S, u, r, T = _session_args(system_tokens, user_tokens, reply_tokens, turns, user_min=1)
    reps = require_count("repeats", repeats, minimum=1)
    _check_lm(lm, S + T * (u + r))
    rng = random.Random(require_count("seed", seed))
    conv = _random_ids(rng, lm.spec.vocab, S)
    starts = []
    for _ in range(T):
        starts.append(len(conv))
        conv += _random_ids(rng, lm.spec.vocab, u + r)
    nc = [[] for _ in range(T)]
    c = [[] for _ in range(T)]
    with bench.Stopwatch(lm.device, threads) as sw:
        def timed(fn, *args):
            return sw.time(fn, *args)[0]

        for rep in range(reps + 1):
            for t in range(T):
                dt = timed(lm.prefill, conv[:starts[t] + u])
                if rep:
                    nc[t].append(dt)
            for t in range(T):
                a = starts[t]
                pending = 1 if (t and r) else 0     # the previous reply's last token
                dt = timed(lm.prefill, conv[:a + u]) if t == 0 else timed(lm.extend, conv[a - pending:a + u])
                if rep:
                    c[t].append(dt)
                if r > 1:
                    lm.extend(conv[a + u:a + u + r - 1])
    return SessionTiming(S, u, r, T, tuple(statistics.median(x) for x in nc), tuple(statistics.median(x) for x in c),
                         reps, sw.threads)


@dataclass(frozen=True)
class ModuleAgreement:
    """How close reused K/V leave the new tokens' logits to a full prefill (``tinylm.logit_agreement`` dicts)."""

    module_tokens: tuple
    new_tokens: int
    prefix_exact: dict
    modules_in_place: dict
    modules_at_zero: dict


def measure_module_reuse(lm, module_tokens: Sequence[int] = (256, 256, 256), new_tokens: int = 32,
                         seed: int = 0) -> ModuleAgreement:
    """Logits of ``new_tokens`` after a prompt of modules, full prefill vs three kinds of reuse.

    * ``prefix_exact``: the modules' K/V saved from a prefill of them all (a shared prefix): exact;
    * ``modules_in_place``: each module encoded alone at the positions it has in this prompt
      (``encode_module(ids, start=offset)``): only the attention between modules is skipped;
    * ``modules_at_zero``: each module encoded alone at position 0, as a cache that stores a module
      once and reuses it anywhere: cross-module attention skipped AND positions wrong.
    """
    from course_lib.measure.tinylm import logit_agreement

    if isinstance(module_tokens, (str, bytes)) or not hasattr(module_tokens, "__len__") or not len(module_tokens):
        raise TypeError("module_tokens must be a non-empty list of token counts")
    mods = [require_count(f"module_tokens[{i}]", t, minimum=1) for i, t in enumerate(module_tokens)]
    n = require_count("new_tokens", new_tokens, minimum=1)
    total = sum(mods)
    _check_lm(lm, total + n)
    rng = random.Random(require_count("seed", seed))
    pieces = [_random_ids(rng, lm.spec.vocab, t) for t in mods]
    new = _random_ids(rng, lm.spec.vocab, n)
    ids = [x for p in pieces for x in p] + new
    ref = lm.prefill(ids)[total:].clone()
    lm.prefill(ids[:total])
    state = lm.save_state()
    exact = lm.prefill(ids, prefix=state)
    offsets = [sum(mods[:i]) for i in range(len(mods))]
    in_place = lm.prefill_modules([lm.encode_module(p, o) for p, o in zip(pieces, offsets)], new)
    at_zero = lm.prefill_modules([lm.encode_module(p, 0) for p in pieces], new)
    return ModuleAgreement(tuple(mods), n, logit_agreement(ref, exact), logit_agreement(ref, in_place),
                           logit_agreement(ref, at_zero))


#: how :func:`profile_prefill` groups PyTorch operators
PROFILE_GROUPS = {
    "matrix products": ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::linear", "aten::matmul"),
    "softmax and masking": ("aten::_softmax", "aten::softmax", "aten::masked_fill_", "aten::masked_fill",
                            "aten::le", "aten::gt", "aten::lt", "aten::ge", "aten::bitwise_not", "aten::bitwise_and",
                            "aten::logical_and", "aten::logical_not", "aten::__iand__", "aten::__and__"),
}


@contextlib.contextmanager
def _native_stderr_silenced():
    """Send file descriptor 2 to the null device for a moment (Python exceptions still propagate).

    torch.profiler's C++ layer writes "profiler_start/stop" trace lines straight to fd 2, which a
    Jupyter kernel shows under the cell; they say nothing to a learner.
    """
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no real fd 2 (an embedded interpreter): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_prefill(lm, prompt_tokens: int = 1056, seed: int = 0, threads: int | None = None,
                    prefix_tokens: int = 0) -> dict:
    """Seconds of one ``lm.prefill`` of ``prompt_tokens`` random ids, by kind of operator (torch.profiler).

    With ``prefix_tokens`` > 0 the first ``prefix_tokens`` ids are cached first (``save_state``) and the
    profiled call is ``lm.prefill(ids, prefix=state)``: the cached pass.

    Returns ``{"matrix products": s, "softmax and masking": s, "other": s, "total": s, "calls": n,
    "group_calls": {group: n}}``: the operators' own time (CPU time, or GPU kernel time on a GPU), after one
    untimed warm-up prefill. The roofline counts the FLOPs of the matrix products; softmax, masking and the
    elementwise rest are what it leaves out. ``calls``: aten operator calls (nested ones included, so an
    upper count); ``group_calls``: the same calls split by group (they add up to ``calls``).
    """
    bench = _timing_tools()
    from torch.profiler import ProfilerActivity, profile

    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    C = require_count("prefix_tokens", prefix_tokens)
    if C >= P:
        raise ValueError(f"prefix_tokens must be < prompt_tokens ({P}), got {C}")
    _check_lm(lm, P)
    ids = _random_ids(random.Random(require_count("seed", seed)), lm.spec.vocab, P)
    with bench.Stopwatch(lm.device, threads) as sw:
        gpu = sw.device.type == "cuda"
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
        state = None
        if C:
            lm.prefill(ids[:C])
            state = lm.save_state()
        lm.prefill(ids, prefix=state)
        sw.sync()
        with _native_stderr_silenced(), profile(activities=acts) as prof:
            lm.prefill(ids, prefix=state)
            sw.sync()
    out = {k: 0.0 for k in PROFILE_GROUPS}
    out["other"] = 0.0
    group_calls = {k: 0 for k in out}
    for ev in prof.key_averages():
        us = (getattr(ev, "self_device_time_total", 0) or getattr(ev, "self_cuda_time_total", 0)
              if gpu else ev.self_cpu_time_total)
        group = next((g_ for g_, names in PROFILE_GROUPS.items() if ev.key in names), "other")
        out[group] += us / 1e6
        if ev.key.startswith("aten::"):
            group_calls[group] += ev.count
    out["total"] = sum(out[k] for k in (*PROFILE_GROUPS, "other"))
    out["calls"] = sum(group_calls.values())
    out["group_calls"] = group_calls
    return out


# --------------------------------------------------------------------------------------------------
# The same cases predicted by the calibrated model (course_lib.validate: probes only, torch imported inside)
# --------------------------------------------------------------------------------------------------
def _validate():
    from course_lib.measure import validate

    return validate


def calibration_shapes(prefix_tokens=None, new_tokens=None, system_tokens=None, user_tokens=None,
                       reply_tokens=None, turns=None) -> dict:
    """The prefill shapes :func:`predict_prefix_ttft_calibrated` and/or :func:`predict_session_ttft_calibrated`
    price, as keyword arguments of ``validate.calibrate``: ``{"prompt_lengths": [...], "cached_prefills":
    [(prompt_tokens, cached_tokens), ...]}``, so that every GEMM and score pass is probed at its exact shape.

    A prefix case is a full prefill of ``prefix_tokens + new_tokens`` and the same prompt with the prefix
    cached; a session case is every turn's prompt without a cache and, from turn 2, with the session's
    cached tokens (:func:`turn_prompts`).
    """
    full: set[int] = set()
    cached: set[tuple[int, int]] = set()
    if prefix_tokens is not None or new_tokens is not None:
        P = require_count("prefix_tokens", prefix_tokens, minimum=1)
        n = require_count("new_tokens", new_tokens, minimum=1)
        full.add(P + n)
        cached.add((P + n, P))
    session = (system_tokens, user_tokens, reply_tokens, turns)
    if any(x is not None for x in session):
        for prompt, c in turn_prompts(*_session_args(*session, user_min=1)):
            full.add(prompt)
            if c:
                cached.add((prompt, c))
    if not full:
        raise ValueError("calibration_shapes needs a prefix case (prefix_tokens, new_tokens) and/or a "
                         "session case (system_tokens, user_tokens, reply_tokens, turns)")
    return {"prompt_lengths": sorted(full), "cached_prefills": sorted(cached)}


@dataclass(frozen=True)
class CalibratedPrefix(_HitMiss):
    """:func:`measure_prefix_ttft`'s two passes predicted by the calibrated model (``validate.Prediction`` each)."""

    prefix_tokens: int
    new_tokens: int
    full: object     # validate.Prediction: lm.prefill(prompt)
    cached: object   # validate.Prediction: lm.prefill(prompt, prefix=state)

    @property
    def ttft_miss(self) -> float:
        return self.full.seconds

    @property
    def ttft_hit(self) -> float:
        return self.cached.seconds


def predict_prefix_ttft_calibrated(spec, prefix_tokens, new_tokens, calibration) -> CalibratedPrefix:
    """Predict :func:`measure_prefix_ttft` with the calibrated model (``course_lib.validate``).

    ``full``: ``validate.predict_ttft(spec, P + n, calibration)``; ``cached``: the same with
    ``cached_tokens=P`` on the ``prefix`` path (the state's K/V copied in, n new tokens computed).
    ``calibration`` comes from ``validate.calibrate(...)`` (pass ``**calibration_shapes(...)`` for GEMM
    and score-pass rates at these exact shapes).
    """
    validate = _validate()
    P = require_count("prefix_tokens", prefix_tokens, minimum=1)
    n = require_count("new_tokens", new_tokens, minimum=1)
    full = validate.predict_ttft(spec, P + n, calibration)
    cached = validate.predict_ttft(spec, P + n, calibration, cached_tokens=P, reuse="prefix")
    return CalibratedPrefix(P, n, full, cached)


@dataclass(frozen=True)
class CalibratedSession:
    """:func:`measure_session_ttft` predicted per turn by the calibrated model (``validate.Prediction`` each)."""

    system_tokens: int
    user_tokens: int
    reply_tokens: int
    turns: int
    nocache: tuple    # per turn: lm.prefill(the whole conversation)
    cached: tuple     # per turn: lm.prefill at turn 1, then lm.extend(pending reply token + new message)

    @property
    def ttft_nocache(self) -> tuple[float, ...]:
        return tuple(p.seconds for p in self.nocache)

    @property
    def ttft_cached(self) -> tuple[float, ...]:
        return tuple(p.seconds for p in self.cached)

    @property
    def total_nocache(self) -> float:
        return sum(self.ttft_nocache)

    @property
    def total_cached(self) -> float:
        return sum(self.ttft_cached)


def predict_session_ttft_calibrated(spec, system_tokens, user_tokens, reply_tokens, turns,
                                    calibration) -> CalibratedSession:
    """Predict :func:`measure_session_ttft` with the calibrated model, turn by turn.

    Turn t's prompt and cached tokens are :func:`turn_prompts`'; without a cache each turn is
    ``validate.predict_ttft(spec, prompt, calibration)``, with one ``cached_tokens=<cached>`` on the
    ``session`` path (``TinyLM.extend``: the K/V are already in place).
    """
    validate = _validate()
    S, u, r, T = _session_args(system_tokens, user_tokens, reply_tokens, turns, user_min=1)
    nc, c = [], []
    for prompt, cached in turn_prompts(S, u, r, T):
        nc.append(validate.predict_ttft(spec, prompt, calibration))
        c.append(validate.predict_ttft(spec, prompt, calibration, cached_tokens=cached, reuse="session"))
    return CalibratedSession(S, u, r, T, tuple(nc), tuple(c))
