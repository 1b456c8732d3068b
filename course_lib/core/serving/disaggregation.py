"""Prefill/decode disaggregation: the K/V of a prompt sent from the prefill GPU to the decode GPU.

Lessons: 10
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.core.numeric import raw as g
from course_lib.core.estimator import estimate
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.serving.step import _precisions
from course_lib.core.validation import require_count, require_positive

# --------------------------------------------------------------------------------------------------
# Disaggregation
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KVTransfer:
    """Prefill/decode disaggregation: the K/V of one prompt sent from the prefill GPU to the decode GPU.

    ``bytes`` over ``link_bandwidth`` (bytes/s) takes ``seconds``; ``ttft`` is the prefill alone
    (the estimator's, batch 1) and ``tpot`` one decode step of ``decode_batch`` sequences at the
    prompt's length: the transfer adds to the TTFT once, and a decode GPU receiving a prompt for
    every finishing sequence must take ``decode_batch / (output_tokens - 1)`` of them per step.
    ``seconds`` is the transfer sent after the prefill; ``exposed_seconds`` the part left when each layer's K/V is
    streamed as soon as the prefill has computed it (``kv_transfer_exposed_time``: the last layer's share unless the
    link is slower than the prefill).
    """

    prompt_tokens: int
    bytes: float
    link_bandwidth: float
    seconds: float
    ttft: float
    tpot: float
    share_of_ttft: float
    transfers_per_step: float
    link_busy_fraction: float     # transfers_per_step x seconds / tpot: the link's load on the decode side
    exposed_seconds: float        # streamed layer by layer during the prefill: what the first token still waits for


def kv_transfer(model, hardware, prompt_tokens, output_tokens, link_bandwidth, *, decode_batch=1, precision="fp16",
                kv_precision=None, compute_efficiency=1.0, bandwidth_efficiency=1.0) -> KVTransfer:
    """Price the K/V transfer of prefill/decode disaggregation from the link (the generated ``kv_transfer_time``)."""
    m, hw = get_model(model), get_hardware(hardware)
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    n = require_count("output_tokens", output_tokens, minimum=2)
    if m.max_positions is not None and P + n > m.max_positions:
        raise ValueError(f"prompt_tokens + output_tokens must be at most the model's context ({m.name}: "
                         f"max_positions = {m.max_positions:,}), got {P + n:,}")
    bw = require_positive("link_bandwidth", link_bandwidth)
    B = require_count("decode_batch", decode_batch, minimum=1, maximum=10**6)
    wname, kvname = _precisions(precision, kv_precision)
    kv_tok = m.kv_bytes_per_token(kvname)
    sent = m.attended_tokens(P)              # windowed layers send only their window
    secs = g.kv_transfer_time(sent, kv_tok, bw)
    kw = dict(precision=wname, kv_precision=kvname, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    ttft = estimate(m, hw, P, n, **kw).ttft
    tpot = estimate(m, hw, P, n, batch=B, **kw).tpot
    per_step = B / (n - 1)
    return KVTransfer(prompt_tokens=P, bytes=sent * kv_tok, link_bandwidth=bw, seconds=secs, ttft=ttft, tpot=tpot,
                      share_of_ttft=secs / ttft, transfers_per_step=per_step, link_busy_fraction=per_step * secs / tpot,
                      exposed_seconds=g.kv_transfer_exposed_time(secs, ttft, m.layers))


@dataclass(frozen=True)
class DisaggregatedPlan:
    """Prefill and decode pools sized for ``arrival_rate`` requests/s (DistServe's goodput sizing, simplified).

    Prefill pool: each request's prefill takes ``prefill_time`` of one GPU, so ``arrival_rate x prefill_time`` GPUs
    are busy on average; ``prefill_gpus`` keeps their utilisation at most ``prefill_utilisation`` (its queue, an
    M/D/1 at that load, adds ``prefill_wait`` on average: Pollaczek-Khinchine). Decode pool: no prefill rides on its
    steps, so each GPU holds the largest ``decode_sequences`` whose decode step meets ``tpot_budget`` and whose caches
    fit; ``arrival_rate x (n - 1) x tpot`` sequences are in flight (Little's law), hence ``decode_gpus``. Seconds.
    """

    arrival_rate: float
    prefill_time: float
    prefill_gpus: int
    prefill_utilisation: float
    prefill_wait: float
    decode_sequences: int
    decode_tpot: float
    decode_gpus: int | None
    in_flight: float

    @property
    def ratio(self) -> str:
        """``"P:D"``, the two pools' GPU counts."""
        return f"{self.prefill_gpus}:{self.decode_gpus}"


def disaggregated_plan(model, hardware, arrival_rate, prompt_tokens, output_tokens, *, tpot_budget=0.05,
                       prefill_utilisation=0.8, precision="fp16", kv_precision=None, kv_memory_fraction=0.9,
                       compute_efficiency=1.0, bandwidth_efficiency=1.0, max_sequences=4096) -> DisaggregatedPlan:
    """Size the prefill and decode pools of a disaggregated server for ``arrival_rate`` requests/s (see
    :class:`DisaggregatedPlan`)."""
    from course_lib.core.estimator import _largest_passing

    m, hw = get_model(model), get_hardware(hardware)
    rate = require_positive("arrival_rate", arrival_rate)
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    n = require_count("output_tokens", output_tokens, minimum=2)
    tpot_budget = require_positive("tpot_budget", tpot_budget)
    rho = require_positive("prefill_utilisation", prefill_utilisation, maximum=0.999)
    cap = require_count("max_sequences", max_sequences, minimum=1, maximum=10**6)
    frac = require_positive("kv_memory_fraction", kv_memory_fraction, maximum=1.0)
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog")
    wname, kvname = _precisions(precision, kv_precision)
    kw = dict(precision=wname, kv_precision=kvname, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    t_pf = estimate(m, hw, P, n, **kw).ttft
    p_gpus = max(1, math.ceil(rate * t_pf / rho))
    load = rate * t_pf / p_gpus                      # utilisation of each prefill GPU
    wait = load * t_pf / (2 * (1 - load))            # M/D/1 mean wait (Pollaczek-Khinchine), per GPU
    per_seq = m.kv_bytes_per_token(kvname) * m.attended_tokens(P + n)
    room = frac * hw.capacity - m.weight_bytes(wname)

    def ok(c):
        return estimate(m, hw, P, n, batch=c, **kw).tpot <= tpot_budget and c * per_seq <= room

    c = _largest_passing(ok, cap)
    tpot = estimate(m, hw, P, n, batch=max(c, 1), **kw).tpot
    in_flight = rate * (n - 1) * tpot
    return DisaggregatedPlan(arrival_rate=rate, prefill_time=t_pf, prefill_gpus=p_gpus, prefill_utilisation=load,
                             prefill_wait=wait, decode_sequences=c, decode_tpot=tpot,
                             decode_gpus=math.ceil(in_flight / c) if c else None, in_flight=in_flight)
