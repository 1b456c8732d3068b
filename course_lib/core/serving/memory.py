"""Paged KV memory: the block pool beside the weights, token slots, and how much of the allocation holds tokens.

Window-aware, as vLLM's hybrid KV-cache manager: a layer that attends only the last ``W`` tokens (every layer of a
``sliding_window`` model; the ``local_layers`` of Gemma 2/3 and gpt-oss) keeps the blocks of its window and frees
older ones, at most ``ceil((W - 1) / block_tokens) + 1`` blocks per sequence; the other layers keep every token's
blocks (:class:`LayerGroups`). The pool counts blocks of all layers (``block_bytes``); a sequence holds
:meth:`LayerGroups.layer_blocks` one-layer blocks, ``layers`` of which make one such block.

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
class LayerGroups:
    """How a model's layers hold K/V in blocks of ``block_tokens`` tokens (counts of one-layer blocks).

    ``full_layers`` keep every token; ``window_layers`` only their last ``window`` tokens, in at most
    ``window_blocks`` = ``ceil((window - 1) / block_tokens) + 1`` blocks (the block being written plus those the
    window still reaches; vLLM's sliding-window manager frees the rest). ``window`` is None when no layer slides.
    """

    layers: int
    full_layers: int
    window_layers: int
    window: int | None
    block_tokens: int
    window_blocks: int | None

    def layer_blocks(self, tokens: int) -> int:
        """One-layer blocks a sequence of ``tokens`` tokens holds, summed over the layers."""
        b = -(-tokens // self.block_tokens)
        if self.window is None:
            return self.layers * b
        return self.full_layers * b + self.window_layers * min(b, self.window_blocks)

    def blocks(self, tokens: int) -> float:
        """The same in blocks of every layer (what one block of the pool holds): ``layer_blocks / layers``."""
        return self.layer_blocks(tokens) / self.layers


def layer_groups(model, block_tokens: int = 16) -> LayerGroups:
    """The :class:`LayerGroups` of a catalog model (or spec) for blocks of ``block_tokens`` tokens."""
    m = get_model(model)
    bt = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    if m.local_window is not None:
        w, local = m.local_window, m.local_layers
    elif m.sliding_window is not None:
        w, local = m.sliding_window, m.layers
    else:
        return LayerGroups(m.layers, m.layers, 0, None, bt, None)
    return LayerGroups(m.layers, m.layers - local, local, w, bt, -(-(w - 1) // bt) + 1)


@dataclass(frozen=True)
class KVPool:
    """The paged KV pool of one device: ``kv_memory_fraction`` of its capacity less the weights (bytes).

    ``blocks`` blocks of ``block_tokens`` tokens each (``block_bytes``); ``token_slots`` = blocks x
    block_tokens, the tokens of K/V the pool holds at once (beside a shared prefix of
    ``prefix_blocks`` blocks, held once) when every layer keeps every token; ``groups`` says how many
    one-layer blocks a sequence of a model with windowed layers holds (:meth:`sequence_bytes`,
    :meth:`sequences_that_fit`).
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
    groups: LayerGroups

    def sequence_bytes(self, tokens: int) -> float:
        """Bytes of the blocks one sequence of ``tokens`` private tokens holds (windowed layers: their window)."""
        t = require_count("tokens", tokens, minimum=1)
        return self.groups.blocks(t) * self.block_bytes

    def sequences_that_fit(self, tokens: int) -> int:
        """Sequences of ``tokens`` private tokens each whose blocks the pool holds at once."""
        t = require_count("tokens", tokens, minimum=1)
        return (self.blocks * self.groups.layers) // self.groups.layer_blocks(t)


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
                  pool_bytes=max(0.0, pool), blocks=blocks, token_slots=blocks * block_tokens,
                  groups=layer_groups(m, block_tokens))


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
