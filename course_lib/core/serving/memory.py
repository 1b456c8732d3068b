"""Paged KV memory: the block pool beside the weights, token slots, and how much of the allocation holds tokens.

Lessons: 10
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.serving.step import _precisions
from course_lib.core.serving.workload import _as_list
from course_lib.core.validation import require_count, require_fraction, require_nonnegative, require_positive

# --------------------------------------------------------------------------------------------------
# Paged KV memory
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KVPool:
    """The paged KV pool of one device: ``kv_memory_fraction`` of its capacity less the weights (bytes).

    ``blocks`` blocks of ``block_tokens`` tokens each (``block_bytes``); ``token_slots`` = blocks x
    block_tokens, the tokens of K/V the pool holds at once (beside a shared prefix of
    ``prefix_blocks`` blocks, held once).
    """

    capacity: float
    memory_fraction: float
    weights_bytes: float
    kv_bytes_per_token: float
    block_tokens: int
    block_bytes: float
    prefix_blocks: int
    pool_bytes: float
    blocks: int
    token_slots: int


def _pool(m, hw, w_bytes, kv_tok, block_tokens, frac, k_prefix) -> KVPool:
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog: the KV pool is unknown")
    if frac * hw.capacity <= w_bytes:
        raise ValueError(f"the weights ({w_bytes / 1e9:.3g} GB) do not fit in kv_memory_fraction x capacity "
                         f"({frac:g} x {hw.capacity / 1e9:g} GB) of {hw.name}: the simulator serves from one "
                         f"device (tensor parallelism is not modelled); use a smaller precision or model")
    block_bytes = block_tokens * kv_tok
    prefix_blocks = -(-k_prefix // block_tokens)
    pool = frac * hw.capacity - w_bytes - prefix_blocks * block_bytes
    blocks = max(0, math.floor(pool / block_bytes))
    return KVPool(capacity=hw.capacity, memory_fraction=frac, weights_bytes=w_bytes, kv_bytes_per_token=kv_tok,
                  block_tokens=block_tokens, block_bytes=block_bytes, prefix_blocks=prefix_blocks,
                  pool_bytes=max(0.0, pool), blocks=blocks, token_slots=blocks * block_tokens)


def kv_pool(model, hardware, *, precision="fp16", kv_precision=None, block_tokens=16, kv_memory_fraction=0.9,
            cached_prefix_tokens=0) -> KVPool:
    """The KV pool :func:`simulate` serves from (vLLM's ``gpu_memory_utilization`` and block size)."""
    m, hw = get_model(model), get_hardware(hardware)
    wname, kvname = _precisions(precision, kv_precision)
    bt = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    frac = require_fraction("kv_memory_fraction", kv_memory_fraction)
    k = require_count("cached_prefix_tokens", cached_prefix_tokens)
    return _pool(m, hw, m.weight_bytes(wname), m.kv_bytes_per_token(kvname), bt, frac, k)


def kv_slots(kv_memory_bytes, kv_bytes_per_token, block_tokens=1) -> int:
    """Token slots a KV memory of ``kv_memory_bytes`` holds: whole blocks of ``block_tokens`` tokens."""
    mem = require_nonnegative("kv_memory_bytes", kv_memory_bytes)
    per = require_positive("kv_bytes_per_token", kv_bytes_per_token)
    bt = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    return math.floor(mem / (per * bt)) * bt


def paged_utilisation(lengths, block_tokens) -> float:
    """Fraction of the allocated KV slots that hold tokens when each sequence gets whole blocks.

    Each sequence of ``t`` tokens holds ``ceil(t / b)`` blocks: at most ``b - 1`` slots of its last
    block are empty (internal fragmentation), and no block is reserved ahead.
    """
    ts = [require_count("lengths", x, minimum=1) for x in _as_list("lengths", lengths)]
    b = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    return sum(ts) / sum(-(-x // b) * b for x in ts)


def reserved_utilisation(lengths, reserve_tokens) -> float:
    """Fraction of the KV memory that holds tokens when every sequence reserves ``reserve_tokens`` slots up front.

    The pre-paging scheme: a contiguous chunk for the longest possible sequence per request, whatever
    its final length (the vLLM paper's 'reserved' and 'internal fragmentation' waste).
    """
    ts = [require_count("lengths", x, minimum=1) for x in _as_list("lengths", lengths)]
    r = require_count("reserve_tokens", reserve_tokens, minimum=1)
    if max(ts) > r:
        raise ValueError(f"reserve_tokens ({r:,}) must be at least the longest sequence ({max(ts):,})")
    return sum(ts) / (len(ts) * r)
