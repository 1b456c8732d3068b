"""The KV cache's conventions and the tables lesson 03 shows: default precision, per-model rows, crossover.

Lessons: 03, 04, 06

* :func:`default_kv_precision` -- the one rule for the KV cache's format when none is given: the
  weights' float format (fp32, fp16, bf16, fp8), fp16 for integer and block formats (they are
  dequantised to fp16 to compute, and their K/V come out in fp16).
* :func:`kv_rows` (:class:`KVRow`) -- one model's KV cache at a context and batch, beside its weights.
* :func:`kv_crossover` (:class:`KVCrossover`) -- where ``batch`` sequences' KV cache outweighs the
  weights and how many tokens fit beside them on a device, with the verdicts the lesson states
  ("never" under a sliding window, beyond the trained positions, weights alone too large) as data.
* :func:`context_limits` (:class:`ContextLimits`) -- whether a sliding window caps what a step at
  ``tokens`` attends to, and whether ``tokens`` lies beyond the positions the model was trained for
  (the warnings of the lesson 04 and 06 explorers).

Every number comes from :mod:`course_lib.core.estimator` (``kv_cache_bytes``, ``crossover_context``,
``tokens_that_fit``) and ``ModelSpec``; this module only gathers them. Torch-, ipywidgets- and
matplotlib-free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.core.estimator import crossover_context, kv_cache_bytes, tokens_that_fit
from course_lib.core.hardware import get_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.precision import get_precision
from course_lib.core.validation import require_count

__all__ = ["KVRow", "kv_rows", "KVCrossover", "kv_crossover",
           "ContextLimits", "context_limits"]

@dataclass(frozen=True)
class KVRow:
    """One model's KV cache at one setting (bytes; ``cached_tokens`` is per sequence after the window)."""

    model: str
    attention: str
    values_per_token: int
    bytes_per_token: float
    context: int
    batch: int
    cached_tokens: int
    kv_bytes: float
    weight_bytes: float
    sliding_window: int | None

    @property
    def ratio(self) -> float:
        """KV bytes divided by weight bytes."""
        return self.kv_bytes / self.weight_bytes

    @property
    def capped(self) -> bool:
        """True when the sliding window (every layer's) keeps fewer tokens than the context."""
        return self.sliding_window is not None and self.cached_tokens < self.context


def _models(models) -> tuple[ModelSpec, ...]:
    if isinstance(models, (str, ModelSpec)):
        models = (models,)
    try:
        items = tuple(models)
    except TypeError:
        raise TypeError(f"models must be a model name or a list of names, got {type(models).__name__}") from None
    if not items:
        raise ValueError("models must name at least one model, e.g. ('llama-3-8b',)")
    return tuple(get_model(m) for m in items)


def kv_rows(models, context: int = 4096, batch: int = 1, kv_precision: str = "fp16",
            precision: str = "fp16") -> list[KVRow]:
    """One :class:`KVRow` per model: the KV cache of ``batch`` sequences of ``context`` tokens.

    ``kv_bytes`` is exactly ``kv_cache_bytes(model, context, kv_precision, batch)``; ``weight_bytes``
    is ``ModelSpec.weight_bytes(precision)`` (all stored weights). ``models``: a name, a spec or a list.
    """
    specs = _models(models)
    context = require_count("context", context)
    batch = require_count("batch", batch, minimum=1)
    kv_p = get_precision(kv_precision, argument="kv_precision").name
    w_p = get_precision(precision).name
    return [KVRow(model=m.name, attention=m.attention_kind, values_per_token=m.kv_values_per_token,
                  bytes_per_token=m.kv_bytes_per_token(kv_p), context=context, batch=batch,
                  cached_tokens=m.attended_tokens(context), kv_bytes=kv_cache_bytes(m, context, kv_p, batch),
                  weight_bytes=m.weight_bytes(w_p), sliding_window=m.sliding_window)
            for m in specs]


@dataclass(frozen=True)
class KVCrossover:
    """Where the KV cache of ``batch`` sequences equals the weights, and what fits on ``hardware``.

    ``context`` is :func:`crossover_context` (``inf``: a sliding window keeps the cache smaller than
    the weights forever); ``tokens_that_fit`` is :func:`tokens_that_fit` (``inf``: the window's cache
    fits, so any length does; 0: the weights alone exceed the memory).
    """

    model: str
    hardware: str
    batch: int
    precision: str
    kv_precision: str
    context: float
    tokens_that_fit: float
    weight_bytes: float
    capacity: float
    kv_bytes_per_token: float
    window_cache_bytes: float | None   # the cache of ``batch`` full windows (sliding-window models)
    max_positions: int | None

    @property
    def never(self) -> bool:
        """True when the KV cache never reaches the weights (a sliding window caps it)."""
        return math.isinf(self.context)

    @property
    def context_times_batch(self) -> float:
        """``context × batch``: the same for every batch size (``inf`` when :attr:`never`)."""
        return self.context * self.batch

    @property
    def beyond_trained_positions(self) -> bool:
        """True when the crossover lies past the positions the model was trained for."""
        return not self.never and self.max_positions is not None and self.context > self.max_positions

    @property
    def weights_exceed_memory(self) -> bool:
        """True when not one token fits: the weights alone fill the device."""
        return self.tokens_that_fit == 0

    @property
    def any_length_fits(self) -> bool:
        """True when a sliding window's cache fits, so every context length does."""
        return math.isinf(self.tokens_that_fit)


def kv_crossover(model="llama-3-8b", hardware="h100-sxm", batch: int = 8, precision: str = "fp16",
                 kv_precision: str = "fp16") -> KVCrossover:
    """The :class:`KVCrossover` of ``model`` on ``hardware`` at ``batch`` (weights ``precision``)."""
    m = get_model(model)
    hw = get_hardware(hardware)
    batch = require_count("batch", batch, minimum=1)
    w_p, kv_p = get_precision(precision).name, get_precision(kv_precision, argument="kv_precision").name
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog")
    window = None if m.sliding_window is None else kv_cache_bytes(m, m.sliding_window, kv_p, batch)
    return KVCrossover(model=m.name, hardware=hw.name, batch=batch, precision=w_p, kv_precision=kv_p,
                       context=crossover_context(m, batch, w_p, kv_p),
                       tokens_that_fit=tokens_that_fit(m, hw, batch, w_p, kv_p),
                       weight_bytes=m.weight_bytes(w_p), capacity=hw.capacity,
                       kv_bytes_per_token=m.kv_bytes_per_token(kv_p), window_cache_bytes=window,
                       max_positions=m.max_positions)


@dataclass(frozen=True)
class ContextLimits:
    """What a model's context limits mean at ``tokens`` tokens (the context a step attends to)."""

    model: str
    tokens: int
    attended: int                 # tokens whose K/V the step reads: capped by a sliding window
    sliding_window: int | None
    max_positions: int | None

    @property
    def window_capped(self) -> bool:
        """True when the sliding window (every layer's) keeps fewer tokens than ``tokens``."""
        return self.sliding_window is not None and self.attended < self.tokens

    @property
    def beyond_trained(self) -> bool:
        """True when ``tokens`` exceeds the positions the model was trained for (arithmetic only there)."""
        return self.max_positions is not None and self.tokens > self.max_positions


def context_limits(model, tokens) -> ContextLimits:
    """:class:`ContextLimits` of ``model`` at ``tokens`` tokens (a whole number >= 1)."""
    m = get_model(model)
    t = require_count("tokens", tokens, minimum=1)
    return ContextLimits(model=m.name, tokens=t, attended=m.attended_tokens(t), sliding_window=m.sliding_window,
                         max_positions=m.max_positions)
