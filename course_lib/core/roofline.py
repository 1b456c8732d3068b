"""The lesson arithmetic of the roofline, data per token, prefill against decode and latency conventions.

Lessons: 01, 02, 05, 06, 07

Everything a lesson prints or plots about one kernel or one phase is computed here, from the
functions generated from :mod:`course_lib.core.formulas` (``course_lib.core._generated``) and the
public core, with every argument validated; the figures in ``course_lib.lessons.plots`` and the
widgets only draw what these functions return. Torch-, ipywidgets- and matplotlib-free.

* Roofline: :func:`compute_time`, :func:`memory_time`, :func:`ridge_point`, :func:`attainable_flop_rate`,
  :func:`roofline_curve`, :class:`RooflinePoint` (a measured kernel placed on it, with its bound).
* GEMV, the one GEMV calculator of the course: :func:`gemv_cost` (:class:`GemvCost`),
  :func:`gemv_flops`, :func:`gemv_bytes`, :func:`activation_precision`.
* Data per token (lesson 02): :func:`bytes_per_token` (:class:`BytesPerToken`).
* Prefill: :func:`prefill_flop_split`, :func:`prefill_flops`, :func:`attention_share`,
  :func:`attention_crossover`, :func:`attention_scores_bytes`, :func:`qkv_bytes`,
  :func:`square_matmul_bytes`.
* Decode and batching: :func:`decode_step_bytes`, :func:`critical_batch`, :func:`batch_curve`.
* Latency conventions: :func:`total_latency`, :func:`latency_conventions`
  (:class:`LatencyConventions`), :func:`total_vs_generated`, :func:`fit_line` (b + k·n).
* Predictions against measurements: :func:`relative_error` ((predicted - measured) / measured).
* Parameter counts (lesson 01): :func:`nominal_params`, the count a model's name advertises.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from course_lib.core.numeric import raw as g
from course_lib.core.estimator import compute_dtype, estimate
from course_lib.core.hardware import get_hardware
from course_lib.core.precision import default_kv_precision
from course_lib.core.models import catalog_entry, get_model
from course_lib.core.precision import get_precision
from course_lib.core.units import parse_params
from course_lib.core.validation import (MAX_COUNT, require_choice, require_count, require_counts,
                                        require_fraction, require_list, require_nonnegative, require_positive,
                                        require_flag, require_real)

__all__ = [
    "compute_time", "memory_time", "ridge_point", "attainable_flop_rate", "roofline_curve", "RooflinePoint",
    "activation_precision", "gemv_flops", "gemv_bytes", "GemvCost", "gemv_cost",
    "BytesPerToken", "bytes_per_token",
    "prefill_flop_split", "prefill_flops", "attention_share", "attention_crossover", "attention_scores_bytes",
    "qkv_bytes", "square_matmul_bytes",
    "decode_step_bytes", "critical_batch", "batch_curve",
    "total_latency", "LatencyConventions", "latency_conventions", "total_vs_generated", "fit_line",
    "relative_error", "nominal_params",
]


def _finite(name: str, value: float) -> float:
    """``value`` if finite, else one ValueError saying the inputs are out of range."""
    if math.isinf(value) or math.isnan(value):
        raise ValueError(f"{name} is not finite ({value}) for these inputs: they are too large or too small")
    return value


# --------------------------------------------------------------------------------------------------
# The roofline
# --------------------------------------------------------------------------------------------------
def compute_time(flops, peak_flops, efficiency=1.0) -> float:
    """Seconds for ``flops`` FLOPs at ``efficiency`` (0, 1] of ``peak_flops`` FLOP/s (``compute_time``)."""
    return _finite("compute_time", g.compute_time(require_nonnegative("flops", flops),
                                                  require_positive("peak_flops", peak_flops),
                                                  require_fraction("efficiency", efficiency)))


def memory_time(nbytes, bandwidth, efficiency=1.0) -> float:
    """Seconds to move ``nbytes`` bytes at ``efficiency`` (0, 1] of ``bandwidth`` bytes/s (``memory_time``)."""
    return _finite("memory_time", g.memory_time(require_nonnegative("nbytes", nbytes),
                                                require_positive("bandwidth", bandwidth),
                                                require_fraction("efficiency", efficiency)))


def ridge_point(peak_flops, bandwidth) -> float:
    """FLOP per byte at which a kernel turns compute-bound: ``peak_flops / bandwidth`` (``ridge_point``)."""
    return _finite("ridge_point", g.ridge_point(require_positive("peak_flops", peak_flops),
                                                require_positive("bandwidth", bandwidth)))


def attainable_flop_rate(intensity, peak_flops, bandwidth) -> float:
    """The roof at ``intensity`` FLOP/B: FLOPs / ``phase_time`` of one byte's worth, i.e. min(peak, I·β)."""
    i = require_positive("intensity", intensity)
    t = g.phase_time(i, require_positive("peak_flops", peak_flops), 1.0, 1.0,
                     require_positive("bandwidth", bandwidth), 1.0)
    return _finite("attainable_flop_rate", i / t)


def roofline_curve(peak_flops, bandwidth, lo, hi, points: int = 200) -> list[tuple[float, float]]:
    """(intensity, attainable FLOP/s) at ``points`` log-spaced intensities from ``lo`` to ``hi`` FLOP/B."""
    lo, hi = require_positive("lo", lo), require_positive("hi", hi)
    if hi <= lo:
        raise ValueError(f"hi must be > lo, got lo={lo:g}, hi={hi:g}")
    n = require_count("points", points, minimum=2)
    if n > 100_000:
        raise ValueError(f"points must be between 2 and 100000, got {n}")
    grid = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return [(x, attainable_flop_rate(x, peak_flops, bandwidth)) for x in grid]


@dataclass(frozen=True)
class RooflinePoint:
    """One measured kernel: its FLOPs and bytes (counted by course_lib) and its measured seconds."""

    label: str
    flops: float
    bytes: float
    seconds: float

    def __post_init__(self):
        require_positive("flops", self.flops)
        require_positive("bytes", self.bytes)
        require_positive("seconds", self.seconds)

    @property
    def intensity(self) -> float:
        """FLOP per byte moved (``arithmetic_intensity``)."""
        return g.arithmetic_intensity(self.flops, self.bytes)

    @property
    def flop_rate(self) -> float:
        """Achieved FLOP/s: FLOPs / measured seconds."""
        return self.flops / self.seconds

    @property
    def bandwidth(self) -> float:
        """Achieved bytes/s: bytes / measured seconds."""
        return self.bytes / self.seconds

    def bound(self, peak_flops, bandwidth) -> str:
        """'memory' left of the ridge point ``peak_flops / bandwidth``, else 'compute'."""
        return "memory" if self.intensity < ridge_point(peak_flops, bandwidth) else "compute"


# --------------------------------------------------------------------------------------------------
# GEMV: one matrix-vector product
# --------------------------------------------------------------------------------------------------
#: Weight formats whose GEMV reads and writes its vectors in the same format (others: fp16).
_FLOAT_ACTIVATIONS = ("fp32", "fp16", "bf16")


def activation_precision(precision="fp16") -> str:
    """The format of a GEMV's vectors x and y for weights in ``precision``: the weights' own for
    fp32/fp16/bf16, fp16 for integer and block formats (dequantised to fp16 to compute)."""
    p = get_precision(precision).name
    return p if p in _FLOAT_ACTIVATIONS else "fp16"


def gemv_flops(rows, cols, batch: int = 1) -> float:
    """FLOPs of y = W x for a ``rows`` x ``cols`` W and ``batch`` vectors: 2 per weight per vector (``gemv_flops``)."""
    return g.gemv_flops(require_count("rows", rows, minimum=1), require_count("cols", cols, minimum=1),
                        require_count("batch", batch, minimum=1))


def gemv_bytes(rows, cols, precision="fp16", activation_precision=None) -> float:
    """Bytes one GEMV moves at least: the matrix in ``precision``, x read and y written in
    ``activation_precision`` (default: the function of that name): ``(rows·cols + rows + cols)·b`` for
    fp32/fp16/bf16."""
    return gemv_cost(rows, cols, precision, activation_precision).bytes


@dataclass(frozen=True)
class GemvCost:
    """A (rows x cols) weight matrix times one vector: y = W x.

    ``weight_bytes`` is the matrix, ``vector_bytes`` the input x read plus the output y written (in
    ``activation_precision``). Times need a device: :meth:`memory_time` and :meth:`compute_time`.
    """

    rows: int
    cols: int
    precision: str
    bytes_per_element: float
    activation_precision: str
    flops: float
    weight_bytes: float
    vector_bytes: float

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def bytes(self) -> float:
        """All bytes moved: the matrix, x and y."""
        return self.weight_bytes + self.vector_bytes

    @property
    def intensity(self) -> float:
        """FLOP per byte over all bytes moved."""
        return g.arithmetic_intensity(self.flops, self.bytes)

    @property
    def weight_intensity(self) -> float:
        """FLOP per byte of weights: 2 / bytes_per_element (exactly 1 in fp16)."""
        return g.arithmetic_intensity(self.flops, self.weight_bytes)

    def memory_time(self, hardware, bandwidth_efficiency: float = 1.0) -> float:
        """Seconds to move :attr:`bytes` at ``hardware``'s bandwidth (× the efficiency)."""
        hw = get_hardware(hardware)
        eta = require_fraction("bandwidth_efficiency", bandwidth_efficiency)
        return g.memory_time(self.bytes, hw.bandwidth, eta)

    def compute_time(self, hardware, dtype: str = "fp16", compute_efficiency: float = 1.0) -> float:
        """Seconds for :attr:`flops` at ``hardware``'s dense ``dtype`` peak (ValueError if none is published)."""
        hw = get_hardware(hardware)
        eta = require_fraction("compute_efficiency", compute_efficiency)
        return g.compute_time(self.flops, hw.flops(dtype), eta)


def gemv_cost(rows, cols, precision="fp16", activation_precision=None) -> GemvCost:
    """FLOPs and bytes of multiplying a ``rows`` x ``cols`` matrix in ``precision`` by one vector.

    ``activation_precision`` (x and y) defaults to :func:`activation_precision` of the weights: their
    own format for fp32/fp16/bf16, fp16 for integer and block formats.
    """
    r = require_count("rows", rows, minimum=1)
    c = require_count("cols", cols, minimum=1)
    p = get_precision(precision)
    a = get_precision(_activation(p.name) if activation_precision is None else activation_precision,
                      argument="activation_precision")
    return GemvCost(rows=r, cols=c, precision=p.name, bytes_per_element=p.bytes, activation_precision=a.name,
                    flops=g.gemv_flops(r, c, 1), weight_bytes=g.weight_bytes(r * c, p.bytes),
                    vector_bytes=g.weight_bytes(r + c, a.bytes))


_activation = activation_precision   # gemv_cost's argument shadows the function's name


# --------------------------------------------------------------------------------------------------
# Data per token (lesson 02): what one decode step streams, and where it comes from
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BytesPerToken:
    """What one decode step (batch 1) of ``model`` streams in weight ``precision``.

    Counts are parameters, sizes are bytes. ``streamed_bytes`` is exactly
    ``get_model(model).decode_weight_bytes(precision)`` and ``stored_bytes`` exactly
    ``get_model(model).weight_bytes(precision)``; the breakdown adds up to ``streamed_params``.
    """

    model: str
    precision: str
    bytes_per_element: float
    tied_embeddings: bool
    moe: bool
    params: int                  # every stored parameter once
    embedding_params: int        # the token-embedding table (+ learned positions) as stored
    streamed_params: float       # read by one decode step
    block_params_read: float     # transformer blocks (MoE: shared weights + the routed experts)
    lm_head_params_read: int     # V x h: the output projection, always read in full
    embedding_params_read: float  # the row of the current token (+ its position row)
    stored_bytes: float
    streamed_bytes: float

    @property
    def difference_bytes(self) -> float:
        """``streamed_bytes - stored_bytes``: negative when a step reads less than the file holds."""
        return self.streamed_bytes - self.stored_bytes

    def part_bytes(self, part: str) -> float:
        """Bytes of one part of the stream: 'blocks', 'lm_head' or 'embedding_row'."""
        counts = {"blocks": self.block_params_read, "lm_head": self.lm_head_params_read,
                  "embedding_row": self.embedding_params_read}
        key = require_choice("part", part, counts)
        return g.weight_bytes(counts[key], self.bytes_per_element)


def bytes_per_token(model="mistral-7b", precision="fp16") -> BytesPerToken:
    """The weight bytes one batch-1 decode step of ``model`` streams in ``precision``, with a breakdown.

    The total is ``ModelSpec.streamed_params(1)``; its terms are those of the ``streamed_params``
    formula: the blocks one token uses (``active_block_params``), the lm_head (the formula's V·h term,
    read in full whether or not it is tied) and what is left, the embedding row(s) of the token.
    """
    m = get_model(model)
    p = get_precision(precision)
    streamed = m.streamed_params(1)
    blocks = m.active_block_params
    lm_head = g.streamed_params(0, m.vocab, m.hidden, 0)
    return BytesPerToken(
        model=m.name, precision=p.name, bytes_per_element=p.bytes, tied_embeddings=m.tied_embeddings,
        moe=m.is_moe, params=m.params, embedding_params=m.embedding_params, streamed_params=streamed,
        block_params_read=blocks, lm_head_params_read=lm_head, embedding_params_read=streamed - blocks - lm_head,
        stored_bytes=m.weight_bytes(p.name), streamed_bytes=m.decode_weight_bytes(p.name, batch=1),
    )


# --------------------------------------------------------------------------------------------------
# Prefill: FLOPs and their split, attention's share, activation traffic
# --------------------------------------------------------------------------------------------------
def prefill_flop_split(model, prompt_tokens, cached=0, dense: bool = False) -> dict[str, float]:
    """Prefill FLOPs of one sequence split into the three terms of ``prefill_flops``.

    ``weights``: 2 · N_blocks · P (every block weight, every new token); ``lm_head``: 2 · V · h (the
    last position only); ``attention``: causal attention, 2 · L · H · d · (P² + 2 P·cached). Each is
    the formula with the other terms' symbols set to zero; they add up to ``total``. With
    ``dense=True`` the terms of ``prefill_flops_dense``: what a simple implementation computes (logits
    at every position, every query-key pair scored).
    """
    m = get_model(model)
    p = require_count("prompt_tokens", prompt_tokens, minimum=1)
    c = require_count("cached", cached)
    f = g.prefill_flops_dense if require_flag("dense", dense) else g.prefill_flops
    nb, L, H, d, V, h = m.active_block_params, m.layers, m.heads, m.attn_dim, m.vocab, m.hidden
    return {
        "weights": f(1, nb, p, 0, 0, 0, H, d, c),
        "lm_head": f(1, 0, p, V, h, 0, H, d, c),
        "attention": f(1, 0, p, 0, 0, L, H, d, c),
        "total": f(1, nb, p, V, h, L, H, d, c),
    }


def prefill_flops(model, prompt_tokens, cached=0, batch: int = 1, dense: bool = False) -> float:
    """Prefill FLOPs of ``batch`` sequences of ``prompt_tokens`` new tokens after ``cached`` cached ones."""
    b = require_count("batch", batch, minimum=1)
    return b * prefill_flop_split(model, prompt_tokens, cached, dense)["total"]


def attention_share(model, prompt_tokens) -> float:
    """Fraction of a prompt's prefill FLOPs spent in causal attention."""
    s = prefill_flop_split(model, prompt_tokens)
    return s["attention"] / s["total"]


def attention_crossover(model) -> float:
    """Prompt length at which causal attention's FLOPs equal the weights' 2·N_blocks·P: N_blocks / (L·H·d).

    Solves 2·L·H·d·P² = 2·N_blocks·P (both terms read off ``prefill_flops``); the lm_head term is ignored.
    """
    one = prefill_flop_split(get_model(model), 1)      # attention at P = 1 is 2·L·H·d, weights 2·N_blocks
    return one["weights"] / one["attention"]


def attention_scores_bytes(model, prompt_tokens, precision="fp16") -> float:
    """Bytes of one layer's P x P score matrices (every query head) if a naive kernel wrote them out."""
    m = get_model(model)
    return g.attention_scores_bytes(m.heads, require_count("prompt_tokens", prompt_tokens, minimum=1),
                                    get_precision(precision).bytes)


def qkv_bytes(model, prompt_tokens, precision="fp16") -> float:
    """Bytes of one layer's Q, K and V activations for ``prompt_tokens`` tokens."""
    m = get_model(model)
    return g.qkv_bytes(require_count("prompt_tokens", prompt_tokens, minimum=1), m.heads, m.kv_heads, m.head_dim,
                       get_precision(precision).bytes)


def square_matmul_bytes(n, precision="fp32") -> float:
    """Bytes an n x n by n x n matrix product moves at least: read A and B, write C."""
    return g.square_matmul_bytes(require_count("n", n, minimum=1), get_precision(precision).bytes)


# --------------------------------------------------------------------------------------------------
# Decode and batching
# --------------------------------------------------------------------------------------------------
def decode_step_bytes(model, context, precision="fp16", kv_precision=None, batch: int = 1) -> float:
    """Bytes the decode step at ``context`` tokens streams: every weight it uses once (``batch``
    sequences) plus the K/V of the attended context of each sequence (``decode_bytes``)."""
    m = get_model(model)
    c = require_count("context", context, minimum=1)
    b = require_count("batch", batch, minimum=1)
    w = get_precision(precision).name
    k_tok = m.kv_bytes_per_token(default_kv_precision(w, kv_precision))
    return g.decode_bytes(m.decode_weight_bytes(w, batch=b), b, m.attended_tokens(c), k_tok)


def critical_batch(hardware, precision="fp16", dtype: str | None = None) -> float:
    """Batch at which a decode step's weight GEMMs turn compute-bound (``critical_batch``).

    ``peak(dtype) · bytes per weight / (2 · bandwidth)``; ``dtype`` (the arithmetic's format) defaults
    to the one the estimator computes ``precision`` weights in (fp16 for integer and block formats).
    """
    hw = get_hardware(hardware)
    p = get_precision(precision)
    return g.critical_batch(hw.flops(compute_dtype(p.name, hw) if dtype is None else dtype), p.bytes, hw.bandwidth)


def batch_curve(model, hardware, batches: Iterable[int], context: int = 1024, precision: str = "fp16",
                ) -> list[tuple[int, float, str]]:
    """(batch, aggregate decode tokens/s, bound) of the next decode step after ``context`` tokens.

    Aggregate tokens/s = batch × ``decode_tps`` of ``estimate(model, hardware, context, 1, batch=B)``:
    every sequence gets one token per step.
    """
    batches = require_counts("batches", batches, what="batch size")
    context = require_count("context", context, minimum=1)
    out = []
    for b in batches:
        b = require_count("batches", b, minimum=1)
        if b * context > MAX_COUNT:
            raise ValueError(f"batches x context must be at most {MAX_COUNT:.0e} tokens, got {b} x {context}")
        e = estimate(model, hardware, prompt_tokens=context, new_tokens=1, precision=precision, batch=b)
        out.append((b, b * e.decode_tps, e.decode_first.bound))
    return out


# --------------------------------------------------------------------------------------------------
# Latency conventions
# --------------------------------------------------------------------------------------------------
def total_latency(ttft, n, tpot) -> float:
    """Seconds to the ``n``-th token: TTFT + (n - 1) · TPOT (``total_latency``)."""
    return _finite("total_latency", g.total_latency(require_nonnegative("ttft", ttft),
                                                    require_count("n", n, minimum=1),
                                                    require_nonnegative("tpot", tpot)))


@dataclass(frozen=True)
class LatencyConventions:
    """One response of ``n`` tokens under the conventions benchmarks use (seconds; tokens/s)."""

    ttft: float
    tpot: float
    n: int
    total: float            # TTFT + (n - 1)·TPOT: the decode steps there are
    total_n_tpot: float     # TTFT + n·TPOT: one step too many
    e2e_per_token: float    # total / n: prefill smeared over the tokens
    tokens_per_second: float  # n / total, per user


def latency_conventions(ttft, tpot, n) -> LatencyConventions:
    """:class:`LatencyConventions` of a response of ``n`` tokens with these ``ttft`` and ``tpot``."""
    t = require_positive("ttft", ttft)
    k = require_nonnegative("tpot", tpot)
    n = require_count("n", n, minimum=1)
    return LatencyConventions(ttft=t, tpot=k, n=n, total=_finite("total", g.total_latency(t, n, k)),
                              total_n_tpot=_finite("total_n_tpot", g.total_latency_n_tpot(t, n, k)),
                              e2e_per_token=g.e2e_per_token(t, n, k),
                              tokens_per_second=g.tokens_per_second(n, t, k))


def total_vs_generated(model, hardware, prompt_tokens: int, new_tokens: Iterable[int], precision: str = "fp16",
                       batch: int = 1) -> list[tuple[int, float]]:
    """(n, total seconds to the n-th token) from ``estimate``: TTFT + (n - 1) · mean TPOT, exact."""
    counts = require_counts("new_tokens", new_tokens, what="number of generated tokens")
    return [(n, estimate(model, hardware, prompt_tokens, n, precision=precision, batch=batch).total)
            for n in (require_count("new_tokens", x, minimum=1) for x in counts)]


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares line y = b + k·x: returns (b, k). Needs at least two distinct x."""
    xs = [_real("xs", x) for x in require_list("xs", xs, "a list of numbers")]
    ys = [_real("ys", y) for y in require_list("ys", ys, "a list of numbers")]
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys must have the same length, got {len(xs)} and {len(ys)}")
    if len(set(xs)) < 2:
        raise ValueError("xs must hold at least two distinct values (fit_line fits a line)")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("fit_line needs x values that differ by more than rounding, got them all within "
                         f"{max(xs) - min(xs):g} of each other")
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return _finite("intercept", my - k * mx), _finite("slope", k)


def _real(name: str, value) -> float:
    """A finite real number of either sign (:func:`course_lib.core.validation.require_real`)."""
    return require_real(name, value)


def relative_error(measured, predicted) -> float:
    """(predicted - measured) / measured: +0.1 means the prediction is 10 % too high."""
    m = require_positive("measured", measured)
    return _finite("relative_error", (require_positive("predicted", predicted) - m) / m)


# --------------------------------------------------------------------------------------------------
# Parameter counts (lesson 01)
# --------------------------------------------------------------------------------------------------
_NOMINAL = re.compile(r"-(\d+(?:\.\d+)?[KMBT])\b")


def nominal_params(model: str) -> float:
    """The parameter count a model's *name* advertises ("Mistral-7B" -> 7e9), read with ``parse_params``."""
    display = catalog_entry(model)["display"]
    m = _NOMINAL.search(display)
    if m is None:
        raise ValueError(f"model {model!r}: its name {display!r} does not state a parameter count")
    return parse_params(m.group(1))
