"""The latency estimator: TTFT, TPOT, total time and tokens/s from first principles.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09

Every number comes from the functions generated from ``course_lib.core.formulas``:

* a phase (the prefill pass, or one decode step) is a sequence of operators -- the blocks' matrix products
  with their weight reads, attention with its K/V traffic, the lm_head, the embedding gather -- and costs
  the sum of their roofline times ``operator_time = max(FLOPs / (peak · compute_efficiency),
  bytes / (bandwidth · bandwidth_efficiency))``; each :class:`OperatorCost` records which term won (its
  bound). ``PhaseCost.single_max_time`` keeps the simplification that takes one max over the whole phase
  (``phase_time``): it is lower whenever some operators are compute-bound and others memory-bound (e.g.
  large-batch decode: compute-bound weight products, memory-bound K/V reads);
* multi-head latent attention (DeepSeek-V3) decodes on its compressed latent: decode attention FLOPs use
  ``ModelSpec.decode_attn_dim`` (``mla_latent_attn_dim``), prefill the heads' own widths (``attn_dim``);
* prefill (TTFT) processes the prompt's new tokens in one pass: compute-bound for long prompts;
* decode step j (j = 1 … n-1) attends to context P + j and streams every weight it uses once plus the
  K/V of that context: memory-bound at small batch. ``tpot`` is the mean over those n-1 steps, summed
  exactly in closed form (``linear_step_sum``), and ``total = ttft + (n-1)·tpot``.

Defaults are the physical floor (efficiencies 1.0). The source material's "60% utilisation" is passed
explicitly: ``estimate(..., compute_efficiency=0.6)``.

What is not modelled (taught in lessons 06 and 08): kernel launch and framework overhead, attention
kernels' efficiency, elementwise operators and activation traffic, and the sliding window in *prefill*
attention FLOPs (an upper bound there; decode reads are capped by the window).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from course_lib.core.numeric import raw as g
from course_lib.core.hardware import HardwareSpec, get_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.precision import WEIGHT_GROUPS, get_layout, get_precision
from course_lib.core.validation import (MAX_COUNT, MIN_POSITIVE, require_count, require_fraction, require_list,
                                        require_nonnegative)

__all__ = ["Estimate", "PhaseCost", "estimate", "weight_bytes", "kv_cache_bytes", "crossover_context",
           "tokens_that_fit", "compute_dtype"]

#: the tensor-core dtype a weight precision computes in (quantised integer formats dequantise to fp16)
def compute_dtype(precision, hardware=None) -> str:
    """The tensor-core format ``precision`` weights are computed in on ``hardware``.

    The precision's own ``compute_dtype`` (fp8 weights at the fp8 rate, W8A8 at the int8 rate, MXFP4/NVFP4
    at the fp4 rate, integer and block weight-only formats dequantised to fp16); where ``hardware`` publishes
    no rate for it, fp16 (e.g. fp8 weights on an A100 are upcast and computed in fp16). The one rule for the
    estimator, the serving model, the roofline and the app.
    """
    dtype = get_precision(precision).compute_dtype
    if hardware is not None:
        hw = get_hardware(hardware)
        if dtype not in hw.peak_flops and dtype in ("fp8", "tf32", "bf16", "int8", "fp4") and \
                dtype not in hw.effective_flops:
            dtype = "fp16"
    return dtype


def weight_bytes(params, precision="fp16") -> float:
    """Bytes to store ``params`` parameters (a count, or a model name/spec) in ``precision``."""
    if isinstance(params, (str, ModelSpec)):
        try:
            params = get_model(params).params
        except ValueError as e:
            raise ValueError(f"params must be a parameter count or a catalog model name: {e}") from None
    n = require_count("params", params)
    return g.weight_bytes(n, get_precision(precision).bytes)


def kv_cache_bytes(model, tokens, precision="fp16", batch=1) -> float:
    """KV-cache bytes for ``tokens`` tokens in each of ``batch`` sequences.

    A sliding-window model (Mistral-7B v0.1) keeps only the last ``sliding_window`` tokens; one with local and
    global layers (Gemma 2/3, gpt-oss) the last ``local_window`` tokens in its local layers and all in the others.
    """
    m = get_model(model)
    t = require_count("tokens", tokens)
    b = require_count("batch", batch, minimum=1)
    return g.kv_cache_bytes(m.kv_values_per_token, _prec("precision", precision), m.attended_tokens(t), b)


def crossover_context(model, batch: int = 1, precision: str = "fp16", kv_precision: str = "fp16") -> float:
    """Tokens per sequence at which ``batch`` sequences' KV cache holds as many bytes as the weights.

    The solution of ``kv_cache_bytes(model, c, kv_precision, batch) == weight_bytes`` for ``c``:
    the weight bytes divided by the KV bytes of one token in each of ``batch`` sequences (a real
    number; the cache exceeds the weights from the next whole token on). A sliding-window model
    never gets there when the answer lies beyond its window (its cache stops growing): ``math.inf``.
    """
    m = get_model(model)
    batch = require_count("batch", batch, minimum=1)
    kv_precision = get_precision(kv_precision, argument="kv_precision")
    per_token = kv_cache_bytes(m, 1, kv_precision, batch)
    c = m.weight_bytes(precision) / per_token
    if m.sliding_window is not None and c > m.sliding_window:
        return math.inf
    if m.local_window is not None and c > m.local_window:   # past the window only the global layers grow
        w = m.local_window
        at_w = kv_cache_bytes(m, w, kv_precision, batch)
        return w + (m.weight_bytes(precision) - at_w) / (kv_cache_bytes(m, w + 1, kv_precision, batch) - at_w)
    return c


def tokens_that_fit(model, hardware, batch: int = 1, precision: str = "fp16", kv_precision: str = "fp16") -> float:
    """Whole tokens per sequence whose KV cache (``batch`` sequences) fits beside the weights.

    ``floor((capacity - weight_bytes) / kv_cache_bytes(model, 1, kv_precision, batch))``; 0 when the
    weights alone do not fit; ``math.inf`` for a sliding-window model whose full window fits (the
    cache then never grows). Activations, the framework's workspace and fragmentation are not
    counted: a real server keeps some memory back.
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    batch = require_count("batch", batch, minimum=1)
    kv_precision = get_precision(kv_precision, argument="kv_precision")
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog")
    free = hw.capacity - m.weight_bytes(precision)
    if free <= 0:
        return 0
    per_token = kv_cache_bytes(m, 1, kv_precision, batch)
    n = math.floor(free / per_token)
    if m.sliding_window is not None and n >= m.sliding_window:
        return math.inf
    if m.local_window is not None and n > m.local_window:   # past the window only the global layers grow
        w = m.local_window
        at_w = kv_cache_bytes(m, w, kv_precision, batch)
        return w + math.floor((free - at_w) / (kv_cache_bytes(m, w + 1, kv_precision, batch) - at_w))
    return n


def _prec(argname: str, value) -> float:
    return get_precision(value, argument=argname).bytes


def _require_times(obj, names) -> None:
    """Every field in ``names`` a finite float >= 0 (a float as the estimator builds them passes at once;
    anything else goes through ``require_nonnegative`` and its error message)."""
    for name in names:
        v = getattr(obj, name)
        if type(v) is float and 0 <= v <= sys.float_info.max:
            continue
        object.__setattr__(obj, name, require_nonnegative(name, v, maximum=sys.float_info.max))


@dataclass(frozen=True)
class OperatorCost:
    """FLOPs, bytes and roofline time of one operator of a phase (a kernel, or kernels of one kind in every layer).

    ``time`` is the generated ``operator_time``: the slower of ``compute_time`` and ``memory_time``.
    """

    name: str
    flops: float
    bytes: float
    compute_time: float
    memory_time: float
    time: float

    def __post_init__(self):
        _require_times(self, ("flops", "bytes", "compute_time", "memory_time", "time"))

    @property
    def bound(self) -> str:
        return "memory" if self.memory_time >= self.compute_time else "compute"

    @property
    def intensity(self) -> float:
        return g.arithmetic_intensity(self.flops, self.bytes) if self.bytes else math.inf


def _operator(name, flops, nbytes, peak, eta_c, bandwidth, eta_b) -> OperatorCost:
    flops, nbytes = float(flops), float(nbytes)   # exact integer counts, bounded by MAX_COUNT: finite floats
    return OperatorCost(name, flops, nbytes, g.compute_time(flops, peak, eta_c),
                        g.memory_time(nbytes, bandwidth, eta_b),
                        g.operator_time(flops, peak, eta_c, nbytes, bandwidth, eta_b))


@dataclass(frozen=True)
class PhaseCost:
    """FLOPs, bytes and roofline time of one phase (prefill or one decode step); every field finite and >= 0.

    ``operators`` are the phase's operators, run one after another: ``time`` is the sum of their times.
    ``compute_time`` and ``memory_time`` are the phase's totals; ``single_max_time`` is the simplification
    that takes the slower of the two over the whole phase (the generated ``phase_time``), as if one kernel did
    all the work: never above ``time``, equal when every operator has the same bound. A phase built without
    operators is one operator: its ``time`` is ``single_max_time``.
    """

    flops: float
    bytes: float
    compute_time: float
    memory_time: float
    operators: tuple[OperatorCost, ...] = ()

    def __post_init__(self):
        _require_times(self, ("flops", "bytes", "compute_time", "memory_time"))
        if self.bytes < MIN_POSITIVE:
            raise ValueError(f"bytes must be at least {MIN_POSITIVE:g} (every phase reads its weights), "
                             f"got {self.bytes!r}")
        ops = tuple(require_list("operators", self.operators, "a list of OperatorCost"))
        if not all(isinstance(o, OperatorCost) for o in ops):
            raise TypeError("operators must be OperatorCost instances")
        object.__setattr__(self, "operators", ops)

    @property
    def time(self) -> float:
        """Seconds of the phase: the sum of its operators' roofline times."""
        if not self.operators:
            return self.single_max_time
        return math.fsum(o.time for o in self.operators)

    @property
    def single_max_time(self) -> float:
        """The single-max simplification: ``phase_time`` of the totals (the times are at unit rates here)."""
        return g.phase_time(self.compute_time, 1.0, 1.0, self.memory_time, 1.0, 1.0)

    @property
    def bound(self) -> str:
        """'memory' when memory-bound operators take at least as long as compute-bound ones, else 'compute'."""
        if not self.operators:
            return "memory" if self.memory_time >= self.compute_time else "compute"
        return _bound_of(self.operators)

    @property
    def intensity(self) -> float:
        return g.arithmetic_intensity(self.flops, self.bytes)

    def operator(self, name: str) -> OperatorCost:
        """The operator called ``name`` (one of ``[o.name for o in operators]``)."""
        for o in self.operators:
            if o.name == name:
                return o
        raise ValueError(f"name must be one of {[o.name for o in self.operators]}, got {name!r}")


def _bound_of(ops) -> str:
    mem = math.fsum(o.time for o in ops if o.bound == "memory")
    comp = math.fsum(o.time for o in ops if o.bound == "compute")
    return "memory" if mem >= comp else "compute"


@dataclass(frozen=True)
class Estimate:
    """The result of :func:`estimate`: times in seconds, sizes in bytes, work in FLOP."""

    model: ModelSpec
    hardware: HardwareSpec
    prompt_tokens: int
    new_tokens: int
    precision: str
    kv_precision: str
    batch: int
    cached_prefix_tokens: int
    compute_efficiency: float
    bandwidth_efficiency: float
    compute_dtype: str
    prefill: PhaseCost
    decode_first: PhaseCost
    decode_last: PhaseCost
    decode_time_sum: float
    decode_flops_sum: float
    decode_bytes_sum: float
    decode_compute_steps: int
    weights_bytes: float
    kv_bytes: float
    # an engine's profile (course_lib.core.forecast; estimate(..., engine=...)): its times replace the floor's
    engine: str | None = None
    engine_ttft: float | None = None
    engine_tpot_sum: float | None = None
    engine_tpot_first: float | None = None
    engine_tpot_last: float | None = None

    # --- latency --------------------------------------------------------------------------------
    @property
    def ttft(self) -> float:
        """Time to first token: the prefill pass (which also produces the first token); with an engine, its
        profile's time for the prefill plus one request's fixed cost."""
        return self.prefill.time if self.engine is None else self.engine_ttft

    @property
    def floor_ttft(self) -> float:
        """The floor's TTFT (the prefill at the given efficiencies), with or without an engine."""
        return self.prefill.time

    @property
    def floor_tpot(self) -> float:
        """The floor's mean time per output token, with or without an engine."""
        return self.decode_time_sum / self.decode_steps if self.decode_steps else self.decode_first.time

    @property
    def decode_steps(self) -> int:
        return self.new_tokens - 1

    @property
    def tpot(self) -> float:
        """Mean time per output token over the n-1 decode steps (the next step's time when n = 1)."""
        if self.engine is not None:
            return self.engine_tpot_sum / self.decode_steps if self.decode_steps else self.engine_tpot_first
        return self.floor_tpot

    @property
    def tpot_first(self) -> float:
        return self.decode_first.time if self.engine is None else self.engine_tpot_first

    @property
    def tpot_last(self) -> float:
        return self.decode_last.time if self.engine is None else self.engine_tpot_last

    @property
    def total(self) -> float:
        return g.total_latency(self.ttft, self.new_tokens, self.tpot)

    @property
    def tps(self) -> float:
        """Tokens per second for one user: n / total."""
        return g.tokens_per_second(self.new_tokens, self.ttft, self.tpot)

    @property
    def tps_aggregate(self) -> float:
        """Tokens per second over the whole batch: batch · n / total."""
        return self.batch * self.tps

    @property
    def decode_tps(self) -> float:
        """Decode speed once generation runs: 1 / tpot."""
        return 1.0 / self.tpot

    # --- bounds ---------------------------------------------------------------------------------
    @property
    def prefill_bound(self) -> str:
        return self.prefill.bound

    @property
    def decode_bound(self) -> str:
        """'memory', 'compute', or 'mixed' when the bound changes as the context grows."""
        if self.decode_steps == 0:
            return self.decode_first.bound
        if self.decode_compute_steps == 0:
            return "memory"
        return "compute" if self.decode_compute_steps == self.decode_steps else "mixed"

    # --- the source's recipe and the line b + k·n -------------------------------------------------
    @property
    def source_recipe_tpot(self) -> float:
        """The source material's TPS recipe: decode FLOPs divided by compute (wrong for decode: it is memory-bound)."""
        if self.decode_steps == 0:
            return self.decode_first.compute_time
        return g.compute_time(self.decode_flops_sum / self.decode_steps, self.hardware.compute_rate(self.compute_dtype),
                              self.compute_efficiency)

    @property
    def source_recipe_factor(self) -> float:
        """How many times too optimistic the source's recipe is: TPOT / ``source_recipe_tpot``."""
        return self.tpot / self.source_recipe_tpot

    @property
    def line(self) -> tuple[float, float]:
        """(b, k) of total ≈ b + k·n: k is the step time at the start context, b = ttft - k.

        This linearisation drops the growth of the KV cache during the response; ``total`` is exact.
        ``b`` is an intercept, not a time: it is negative when one decode step outlasts the prefill
        (a prompt of a few tokens).
        """
        k = self.tpot_first
        return self.ttft - k, k

    def line_total(self, n) -> float:
        """The linearisation's total latency to the ``n``-th token: b + k·n with (b, k) = :attr:`line`."""
        b, k = self.line
        return b + k * require_count("n", n, minimum=1)

    # --- memory --------------------------------------------------------------------------------
    @property
    def memory_needed(self) -> float:
        """Weights plus the KV cache of every sequence at its final length (activations not counted)."""
        return self.weights_bytes + self.kv_bytes

    @property
    def memory_available(self) -> float | None:
        return self.hardware.capacity

    @property
    def fits(self) -> bool | None:
        cap = self.hardware.capacity
        return None if cap is None else self.memory_needed <= cap

    def as_dict(self) -> dict:
        keys = ("ttft", "tpot", "tpot_first", "tpot_last", "total", "tps", "tps_aggregate", "decode_tps",
                "prefill_bound", "decode_bound", "memory_needed", "fits", "source_recipe_tpot")
        d = {k: getattr(self, k) for k in keys}
        d.update(model=self.model.name, hardware=self.hardware.name, prompt_tokens=self.prompt_tokens,
                 new_tokens=self.new_tokens, batch=self.batch, precision=self.precision,
                 kv_precision=self.kv_precision, engine=self.engine)
        return d


def _linear(fn) -> tuple[float, float]:
    """(intercept, slope) of a function that is linear in its argument (all our per-step costs are)."""
    a0 = fn(0)
    return a0, fn(1) - a0


def _segment_sum(coef, lo, hi, clamp):
    """Sum of intercept + slope·a over contexts lo..hi, with a = c (or the window W when clamped)."""
    i, s = coef
    if clamp is not None:
        return (i + s * clamp) * (hi - lo + 1)
    return g.linear_step_sum(i, s, lo, hi)


def _windows(lo, hi, window):
    """Split contexts lo..hi into (lo, hi, clamp) ranges where the attended tokens are c or the window."""
    if window is None or hi <= window:
        return [(lo, hi, None)]
    if lo > window:
        return [(lo, hi, window)]
    return [(lo, window, None), (window + 1, hi, window)]


def _largest_passing(ok, limit: int) -> int:
    """The largest n in 1..``limit`` with ``ok(n)``, 0 if ``ok(1)`` fails, for an ``ok`` that holds on a prefix
    1..n (batch sizes and sequences in flight, whose times and memory never fall as they grow): bisection."""
    if not ok(1):
        return 0
    lo, hi = 1, limit                   # ok(lo) holds; find the largest such n
    if ok(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _step_work(m: ModelSpec, tokens, logit_rows, attention_flops, kv_tokens, bytes_per_weight, bytes_per_kv,
               parts=None):
    """(name, FLOPs, bytes) of each operator of one forward step over ``tokens`` tokens, in the order they run.

    * ``matmuls``: the blocks' matrix products (QKV/O projections, dense MLPs; for a mixture of experts also its
      shared experts and routers) with their weight reads;
    * ``experts`` (mixture-of-experts models only): the routed experts, each token's ``experts_per_token``
      per MoE layer, reading every distinct expert the step's tokens touch (at a few tokens per expert, memory-
      bound while the shared weights already compute);
    * ``attention``: ``attention_flops`` (scores and weighted values) with the K/V of ``kv_tokens`` tokens
      (summed over sequences: read, or written for new tokens);
    * ``lm_head``: the logits of ``logit_rows`` rows, reading the V x h matrix once;
    * ``embedding``: the gather of one embedding row per token (no FLOPs).

    Their FLOPs and bytes add up to ``prefill_flops``/``decode_flops`` and ``prefill_bytes``/``decode_bytes``.
    Elementwise work (norms, activations, residual adds) and activation traffic are not counted.
    ``parts``: ``m.streamed_param_parts(tokens)`` when the caller has it already.
    """
    p = m.streamed_param_parts(tokens) if parts is None else parts
    b = _group_bytes(m, bytes_per_weight)
    attn_w = m.layers * m.attention_params_per_layer
    dense_bytes = g.weight_bytes(attn_w, b["attention"]) + g.weight_bytes(p["dense_blocks"] - attn_w, b["mlp"])
    if m.is_moe:
        products = (("matmuls", g.linear_flops(p["dense_blocks"], tokens), dense_bytes),
                    ("experts", g.linear_flops(m.active_expert_params, tokens),
                     g.weight_bytes(p["experts"], b["experts"])))
    else:
        products = (("matmuls", g.linear_flops(p["blocks"], tokens), dense_bytes),)  # a dense model: every weight
    return products + (
        ("attention", attention_flops, g.kv_cache_bytes(m.kv_values_per_token, bytes_per_kv, kv_tokens, 1)),
        ("lm_head", g.linear_flops(p["lm_head"], logit_rows), g.weight_bytes(p["lm_head"], b["lm_head"])),
        ("embedding", 0.0, g.weight_bytes(p["embedding"], b["embedding"])))


def _group_bytes(m: ModelSpec, bytes_per_weight) -> dict:
    """Bytes per weight of each group: one number for every group, or a layout's (a tied embedding is the lm_head's
    matrix, so it is stored, gathered and read in the lm_head's format)."""
    if not isinstance(bytes_per_weight, dict):
        return dict.fromkeys(WEIGHT_GROUPS, bytes_per_weight)
    b = dict(bytes_per_weight)
    if m.tied_embeddings:
        b["embedding"] = b["lm_head"]
    return b


def _layout_weight_bytes(m: ModelSpec, b: dict) -> float:
    """Bytes to hold every weight of ``m`` with the group bytes ``b``."""
    b = _group_bytes(m, b)
    attn_w = m.layers * m.attention_params_per_layer
    routed = m.moe_layers * (m.experts or 0) * m.expert_params
    return (g.weight_bytes(attn_w, b["attention"]) + g.weight_bytes(m.block_params - attn_w - routed, b["mlp"])
            + g.weight_bytes(routed, b["experts"]) + g.weight_bytes(m.embedding_params, b["embedding"])
            + g.weight_bytes(m.lm_head_params, b["lm_head"]))


def _streamed_bytes(m: ModelSpec, tokens, b) -> float:
    """Weight bytes one forward step over ``tokens`` tokens reads, each group in its own format (the sum of
    :func:`_step_work`'s weight reads)."""
    return math.fsum(w[2] for w in _step_work(m, tokens, 1, 0.0, 0, b, 1.0) if w[0] != "attention")


def _sum_operators(lines, lo, hi, window):
    """Exact Σ over contexts lo..hi of a step's time Σ_ops max(mem_op(a), comp_op(a)), every term linear in the
    attended tokens a (the context, or the window W when clamped); ``lines`` holds each operator's
    ((mem intercept, slope), (comp intercept, slope)). Also returns how many steps were compute-bound
    (compute-bound operators taking longer than memory-bound ones, as :attr:`PhaseCost.bound`)."""
    total, n_compute = 0.0, 0
    for a, b, clamp in _windows(lo, hi, window):
        if clamp is not None:
            times = [(mem[0] + mem[1] * clamp, comp[0] + comp[1] * clamp) for mem, comp in lines]
            total += math.fsum(max(t) for t in times) * (b - a + 1)
            comp_share = math.fsum(c for m_, c in times if c > m_)
            mem_share = math.fsum(m_ for m_, c in times if c <= m_)
            n_compute += (b - a + 1) if comp_share > mem_share else 0
            continue
        # split where any operator's two lines cross: between the cuts every operator keeps its bound
        cuts = set()
        for mem, comp in lines:
            ds = mem[1] - comp[1]
            if ds != 0:
                x = (comp[0] - mem[0]) / ds
                if a <= x < b:
                    cuts.add(math.floor(x))
        edges = [a - 1] + sorted(cuts) + [b]
        for p, q in ((edges[i] + 1, edges[i + 1]) for i in range(len(edges) - 1)):
            mid = (p + q) / 2
            ti = sl = di = ds_ = 0.0   # the step time and (compute share - memory share), both linear in a
            for mem, comp in lines:
                is_comp = comp[0] + comp[1] * mid > mem[0] + mem[1] * mid
                w = comp if is_comp else mem
                ti, sl = ti + w[0], sl + w[1]
                sign = 1 if is_comp else -1
                di, ds_ = di + sign * w[0], ds_ + sign * w[1]
            total += g.linear_step_sum(ti, sl, p, q)
            n_compute += _count_positive(di, ds_, p, q)
    return total, n_compute


def _interleaved_sums(m: ModelSpec, lines, step_flops, step_bytes, lo, hi):
    """(time, compute-bound steps, FLOPs, bytes) summed over contexts lo..hi for a model with local and global
    layers: the attended tokens a(c) are c up to ``local_window`` W, then alpha + beta·c (the global layers keep
    growing), so every per-step cost, linear in a, stays linear in c on each side of W."""
    w = m.local_window
    beta = m.attended_tokens(w + 1) - m.attended_tokens(w)       # past W: the share of global layers
    segments = ([(lo, min(hi, w), 0.0, 1.0)] if lo <= w else []) + (
        [(max(lo, w + 1), hi, m.attended_tokens(w) - beta * w, beta)] if hi > w else [])
    t_sum = f_sum = b_sum = 0.0
    n_comp = 0
    for p, q, alpha, slope in segments:
        in_c = [((mem[0] + mem[1] * alpha, mem[1] * slope), (comp[0] + comp[1] * alpha, comp[1] * slope))
                for mem, comp in lines]
        t, k = _sum_operators(in_c, p, q, None)
        t_sum, n_comp = t_sum + t, n_comp + k
        (fi, fs), (bi, bs) = _linear(step_flops), _linear(step_bytes)
        f_sum += g.linear_step_sum(fi + fs * alpha, fs * slope, p, q)
        b_sum += g.linear_step_sum(bi + bs * alpha, bs * slope, p, q)
    return t_sum, n_comp, f_sum, b_sum


def _count_positive(intercept, slope, p, q) -> int:
    """How many integers a in p..q have intercept + slope·a > 0."""
    if slope == 0:
        return (q - p + 1) if intercept > 0 else 0
    r = -intercept / slope
    if slope > 0:
        first = max(p, math.floor(r) + 1)
        return max(0, q - first + 1)
    last = min(q, math.ceil(r) - 1)
    return max(0, last - p + 1)


def estimate(model, hardware, prompt_tokens, new_tokens, precision="fp16", kv_precision=None, batch=1,
             cached_prefix_tokens=0, compute_efficiency=1.0, bandwidth_efficiency=1.0, engine=None) -> Estimate:
    """Estimate the latency of generating ``new_tokens`` after a ``prompt_tokens`` prompt.

    ``model``/``hardware`` are catalog names ('mistral-7b', 'rtx-4090', …) or specs. ``precision`` is
    the weights' format, ``kv_precision`` the KV cache's (default: same as the weights, or fp16 for
    integer/block formats). ``cached_prefix_tokens`` of the prompt already have K/V in a cache.
    ``engine`` ('llama.cpp', 'vLLM', 'SGLang', 'TensorRT-LLM', 'transformers'): the engine's profile fitted to
    published measurements (:mod:`course_lib.core.forecast`) gives TTFT and TPOT; ``None`` (default) is the floor.
    """
    if engine is not None and (compute_efficiency != 1.0 or bandwidth_efficiency != 1.0):
        raise ValueError("engine: pass either engine= (its profile has fitted efficiencies) or compute_efficiency/"
                         "bandwidth_efficiency for the floor, not both")
    m = get_model(model)
    hw = get_hardware(hardware)
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    n = require_count("new_tokens", new_tokens, minimum=1)
    B = require_count("batch", batch, minimum=1)
    C = require_count("cached_prefix_tokens", cached_prefix_tokens)
    if C >= P:
        raise ValueError(f"cached_prefix_tokens must be < prompt_tokens ({P}): at least one prompt token is "
                         f"processed to produce the first output token; got {C}")
    if B * (P - C) > MAX_COUNT:
        raise ValueError(f"batch x (prompt_tokens - cached_prefix_tokens) = {B:,} x {P - C:,} tokens in one prefill "
                         f"pass must be at most {MAX_COUNT:.0e} (the largest count the course computes with)")
    eta_c = require_fraction("compute_efficiency", compute_efficiency)
    eta_b = require_fraction("bandwidth_efficiency", bandwidth_efficiency)
    layout = get_layout(precision)
    bw_w = {grp: layout.bytes(grp) for grp in WEIGHT_GROUPS}     # bytes per weight of each group of weights
    wname = layout.name
    kv_precision = layout.kv_precision if kv_precision is None else kv_precision
    b_kv = _prec("kv_precision", kv_precision)
    kvname = get_precision(kv_precision, argument="kv_precision").name
    dtype = compute_dtype(layout.compute_format, hw)
    peak = hw.compute_rate(dtype)
    k_tok = m.kv_bytes_per_token(kvname)
    attn = m.attn_dim

    # prefill: the new prompt tokens of every sequence in one pass
    Pn = P - C
    ws_prefill = _streamed_bytes(m, B * Pn, bw_w)
    pf_flops = g.prefill_flops(B, m.active_block_params, Pn, m.vocab, m.hidden, m.layers, m.heads, attn, C)
    pf_bytes = g.prefill_bytes(ws_prefill, B, C, Pn, k_tok)

    def op(name, f, b):
        return _operator(name, f, b, peak, eta_c, hw.bandwidth, eta_b)

    pf_work = _step_work(m, B * Pn, B, g.prefill_attention_flops(B, m.layers, m.heads, attn, Pn, C), B * (C + Pn),
                         bw_w, b_kv)
    prefill = PhaseCost(pf_flops, pf_bytes, g.compute_time(pf_flops, peak, eta_c),
                        g.memory_time(pf_bytes, hw.bandwidth, eta_b), tuple(op(*w) for w in pf_work))

    # decode: per-step costs are linear in the attended tokens a = min(context, window) (only attention's are
    # not constant); the step's operators at a
    ws = _streamed_bytes(m, B, bw_w)
    attn_d = m.decode_attn_dim

    parts = m.streamed_param_parts(B)

    def step_work(a):
        return _step_work(m, B, B, g.decode_attention_flops(B, m.layers, m.heads, attn_d, a), B * a, bw_w, b_kv,
                          parts)

    w0, w1 = step_work(0), step_work(1)
    lines = [((g.memory_time(x[2], hw.bandwidth, eta_b), g.memory_time(y[2] - x[2], hw.bandwidth, eta_b)),
              (g.compute_time(x[1], peak, eta_c), g.compute_time(y[1] - x[1], peak, eta_c))) for x, y in zip(w0, w1)]

    def step_bytes(a):
        return g.decode_bytes(ws, B, a, k_tok)

    def step_flops(a):
        return g.decode_flops(B, m.active_block_params, m.vocab, m.hidden, m.layers, m.heads, attn_d, a)

    def step(c):
        a = m.attended_tokens(c)
        f, b = step_flops(a), step_bytes(a)
        return PhaseCost(f, b, g.compute_time(f, peak, eta_c), g.memory_time(b, hw.bandwidth, eta_b),
                         tuple(op(*w) for w in step_work(a)))

    first_c, last_c = P + 1, P + max(n - 1, 1)
    if n > 1 and m.local_window is not None:
        t_sum, n_comp, f_sum, b_sum = _interleaved_sums(m, lines, step_flops, step_bytes, first_c, last_c)
    elif n > 1:
        t_sum, n_comp = _sum_operators(lines, first_c, last_c, m.sliding_window)
        windows = _windows(first_c, last_c, m.sliding_window)
        f_sum = sum(_segment_sum(_linear(step_flops), a, b, cl) for a, b, cl in windows)
        b_sum = sum(_segment_sum(_linear(step_bytes), a, b, cl) for a, b, cl in windows)
    else:
        t_sum = f_sum = b_sum = 0.0
        n_comp = 0

    est = Estimate(
        model=m, hardware=hw, prompt_tokens=P, new_tokens=n, precision=wname, kv_precision=kvname, batch=B,
        cached_prefix_tokens=C, compute_efficiency=eta_c, bandwidth_efficiency=eta_b, compute_dtype=dtype,
        prefill=prefill, decode_first=step(first_c), decode_last=step(last_c), decode_time_sum=t_sum,
        decode_flops_sum=f_sum, decode_bytes_sum=b_sum, decode_compute_steps=n_comp,
        weights_bytes=m.weight_bytes(wname) if layout.uniform else _layout_weight_bytes(m, bw_w),
        kv_bytes=g.kv_cache_bytes(m.kv_values_per_token, b_kv, m.attended_tokens(P + n), B),
    )
    if engine is None:
        return est
    from course_lib.core.forecast import with_engine
    return with_engine(est, engine)
