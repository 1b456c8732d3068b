"""Prefill/decode disaggregation: the K/V of a prompt sent from the prefill GPU to the decode GPU.

Lessons: 10
"""
from __future__ import annotations

from dataclasses import dataclass

from course_lib.core import _generated as g
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
                      share_of_ttft=secs / ttft, transfers_per_step=per_step, link_busy_fraction=per_step * secs / tpot)
