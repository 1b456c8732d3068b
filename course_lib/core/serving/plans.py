"""Plans: the steady state of continuous batching (:func:`continuous_batching_plan`) and the static-batching baseline.

Lessons: 10
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.core.numeric import raw as g
from course_lib.core.estimator import _largest_passing, estimate
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.precision import get_precision
from course_lib.core.serving.step import _precisions
from course_lib.core.serving.workload import MAX_REQUESTS, SimulationTooLarge, _as_list
from course_lib.core.validation import (require_callable, require_count, require_fraction, require_nonnegative,
                                        require_positive, require_real)

# --------------------------------------------------------------------------------------------------
# The steady state
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServingPlan:
    """The steady state of continuous batching for ``users`` sequences generating at once.

    ``sequences_per_gpu`` (C) is the largest number in flight per GPU with ``tpot <= tpot_budget``
    (and ``ttft <= ttft_budget`` when given) whose KV caches, at their final length, fit beside the
    weights in ``kv_memory_fraction`` of the memory; ``binds`` names what the next sequence breaks.
    When not even one sequence passes, ``sequences_per_gpu`` is 0, ``gpus`` is ``None`` and the
    numbers are those of one sequence. Seconds, bytes, tokens/s.
    """

    model: str
    hardware: str
    precision: str
    kv_precision: str
    users: int
    sequences_per_gpu: int
    gpus: int | None
    binds: str
    decode_step: float           # t_decode(C): one decode step of C sequences, mean over the answer
    prefill_time: float          # t_prefill: one request's prefill (its uncached prompt tokens)
    tpot: float                  # t_decode(C) + C t_prefill / (n - 1)
    ttft: float                  # t_prefill + t_decode(C): the step that carries the prefill, no queueing
    prefill_share: float         # C t_prefill / ((n - 1) t_decode(C) + C t_prefill)
    tokens_per_s_per_gpu: float  # C n / ((n - 1) tpot)
    memory_needed: float
    memory_limit: float

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def steady_state_search(decode_tpot, memory, t_pf: float, n: int, limit: float, tpot_budget: float,
                        ttft_budget: float | None, cap_c: int):
    """The largest number of sequences in flight C (1 .. ``cap_c``) whose continuous-batching steady state keeps
    its TPOT (``steady_state_tpot`` of the decode step ``decode_tpot(C)`` and ``t_pf``), its TTFT (``t_pf`` + one
    decode step) and ``memory(C)`` within the budgets and ``limit``.

    Returns ``(best, binds, c, (t_dec, tpot, ttft))``: ``best`` (0 when even one sequence breaks a limit), what
    ``best + 1`` breaks (``binds``; "sequence limit" at ``cap_c``), and the numbers at ``c = max(best, 1)``.
    The one search behind :func:`continuous_batching_plan` and :func:`course_lib.core.capstone.continuous_plan`.
    """
    decode_tpot = require_callable("decode_tpot", decode_tpot, "a function of C giving the decode step's seconds",
                                   allow_none=False)
    memory = require_callable("memory", memory, "a function of C giving the bytes in use", allow_none=False)
    t_pf = require_nonnegative("t_pf", t_pf)
    n = require_count("n", n, minimum=2)
    limit = require_real("limit", limit)   # below 0 when the weights alone overflow: nothing fits
    tpot_budget = require_positive("tpot_budget", tpot_budget)
    ttft_budget = None if ttft_budget is None else require_positive("ttft_budget", ttft_budget)
    cap_c = require_count("cap_c", cap_c, minimum=1, maximum=10**6)

    def numbers_at(c):
        t_dec = decode_tpot(c)
        return t_dec, g.steady_state_tpot(t_dec, c, t_pf, n - 1), t_pf + t_dec

    def broken(c) -> list[str]:
        _, tpot, ttft = numbers_at(c)
        out = []
        if tpot > tpot_budget:
            out.append("TPOT budget")
        if ttft_budget is not None and ttft > ttft_budget:
            out.append("TTFT budget")
        if memory(c) > limit:
            out.append("memory")
        return out

    # TPOT, TTFT and memory never fall as C grows: the C that pass form a prefix 1..C (bisection)
    best = _largest_passing(lambda c: not broken(c), cap_c)
    binds = "sequence limit" if best == cap_c else " and ".join(broken(best + 1))
    c = max(best, 1)
    return best, binds, c, numbers_at(c)


def continuous_batching_plan(model, hardware, users, prompt_tokens, output_tokens, *, precision="fp16",
                             kv_precision=None, cached_prefix_tokens=0, tpot_budget=0.05, ttft_budget=None,
                             kv_memory_fraction=0.9, compute_efficiency=1.0, bandwidth_efficiency=1.0,
                             max_sequences=4096) -> ServingPlan:
    """Plan a continuously batching deployment for ``users`` sequences generating at once (the steady state).

    Each GPU keeps ``C`` sequences in flight. In the steady state a sequence's ``n - 1`` decode steps
    are shared with the ``C`` prefills of the sequences that replace the ones finishing meanwhile, so
    ``TPOT = t_decode(C) + C · t_prefill / (n - 1)``, with ``t_decode(C)`` the estimator's mean decode
    step for a batch of C and ``t_prefill`` its TTFT for one request (the uncached prompt tokens).
    Memory: the weights, the shared prefix once, and ``C`` caches of the uncached tokens at their final
    length ``prompt + output`` must fit in ``kv_memory_fraction`` of the capacity (a windowed layer holds only its
    window: ``attended_tokens`` of the uncached tokens). ``C`` grows while
    both hold (and TTFT ``t_prefill + t_decode(C)`` stays within ``ttft_budget`` when given), up to
    ``max_sequences``; the GPUs needed are ``ceil(users / C)`` (``None`` when not even one fits).
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    users = require_count("users", users, minimum=1)
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    n = require_count("output_tokens", output_tokens, minimum=2)
    k = require_count("cached_prefix_tokens", cached_prefix_tokens)
    if k >= P:
        raise ValueError(f"cached_prefix_tokens must be < prompt_tokens ({P}), got {k}")
    if m.max_positions is not None and P + n > m.max_positions:
        raise ValueError(f"prompt_tokens + output_tokens must be at most the model's context ({m.name}: "
                         f"max_positions = {m.max_positions:,}), got {P + n:,}")
    tpot_budget = require_positive("tpot_budget", tpot_budget)
    ttft_budget = None if ttft_budget is None else require_positive("ttft_budget", ttft_budget)
    frac = require_fraction("kv_memory_fraction", kv_memory_fraction)
    cap_c = require_count("max_sequences", max_sequences, minimum=1, maximum=10**6)
    wname, kvname = _precisions(precision, kv_precision)
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog")
    kw = dict(precision=wname, kv_precision=kvname, cached_prefix_tokens=k, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    t_pf = estimate(m, hw, P, n, batch=1, **kw).ttft
    kv_tok = m.kv_bytes_per_token(kvname)
    weights = m.weight_bytes(wname)
    limit = frac * hw.capacity

    # the prefix once and C private caches, each layer holding what it keeps (windowed layers: their window)
    prefix_kv = g.kv_cache_bytes(m.kv_values_per_token, get_precision(kvname).bytes, m.attended_tokens(k), 1)
    per_seq = kv_tok * m.attended_tokens(P + n - k)

    def memory(c):
        return weights + prefix_kv + c * per_seq

    best, binds, c, (t_dec, tpot, ttft) = steady_state_search(
        lambda c: estimate(m, hw, P, n, batch=c, **kw).tpot, memory, t_pf, n, limit, tpot_budget, ttft_budget,
        cap_c)
    share = c * t_pf / ((n - 1) * t_dec + c * t_pf)
    return ServingPlan(model=m.name, hardware=hw.name, precision=wname, kv_precision=kvname, users=users,
                       sequences_per_gpu=best, gpus=math.ceil(users / best) if best else None, binds=binds,
                       decode_step=t_dec, prefill_time=t_pf, tpot=tpot, ttft=ttft, prefill_share=share,
                       tokens_per_s_per_gpu=c * n / ((n - 1) * tpot), memory_needed=memory(c), memory_limit=limit)


# --------------------------------------------------------------------------------------------------
# The naive baseline: static batching
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StaticBatching:
    """Requests served in waves of ``batch`` (every request present at time 0; seconds, tokens).

    Each wave prefills its prompts together and decodes until its longest answer is done: a
    finished sequence keeps its slot (padding) until the wave ends, and the next wave waits.
    ``useful_tokens`` are the answers' tokens; ``slot_tokens`` the tokens the slots could have
    produced (batch x the longest answer, per wave); ``slot_use`` their ratio.
    """

    requests: int
    batch: int
    waves: int
    duration: float
    useful_tokens: int
    slot_tokens: int
    throughput: float             # useful output tokens per second
    slot_use: float
    mean_e2e: float               # a request finishes when its wave ends


def static_batching(model, hardware, prompt_tokens, output_tokens, batch, *, precision="fp16", kv_precision=None,
                    compute_efficiency=1.0, bandwidth_efficiency=1.0) -> StaticBatching:
    """The static-batch baseline for the answers ``output_tokens`` (a list, in arrival order), all present at 0.

    Waves of ``batch`` requests in order; a wave lasts the estimator's ``total`` for its longest answer
    (``estimate(prompt_tokens, max(n), batch=len(wave))``). This is lesson 09's plan, served back to back.
    """
    outs = [require_count("output_tokens", n, minimum=1) for n in _as_list("output_tokens", output_tokens)]
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    B = require_count("batch", batch, minimum=1, maximum=10**6)
    if len(outs) > MAX_REQUESTS:
        raise SimulationTooLarge(f"output_tokens holds {len(outs):,} answers; at most {MAX_REQUESTS:,} are accepted")
    kw = dict(precision=precision, kv_precision=kv_precision, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    t, finish_sum, slots, cache = 0.0, 0.0, 0, {}
    waves = 0
    for i in range(0, len(outs), B):
        wave = outs[i:i + B]
        key = (len(wave), max(wave))
        if key not in cache:
            cache[key] = estimate(model, hardware, P, key[1], batch=key[0], **kw).total
        t += cache[key]
        finish_sum += t * len(wave)
        slots += key[0] * key[1]
        waves += 1
    useful = sum(outs)
    return StaticBatching(requests=len(outs), batch=B, waves=waves, duration=t, useful_tokens=useful,
                          slot_tokens=slots, throughput=useful / t, slot_use=useful / slots,
                          mean_e2e=finish_sum / len(outs))
