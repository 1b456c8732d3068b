"""The capstone dashboard's logic: plan a deployment (lesson 09 and the ``make app`` Voila app).

Lessons: 09

A deployment is a :class:`DashboardState`: which model on which device, in which precision, how many
sequences decode together (the batch), how long the prompts and the answers are, how much of each
prompt is already in a prefix cache, how close the kernels get to the datasheet (efficiencies) and
over how many GPUs the model is split (tensor parallelism). :func:`compute` prices it with the
course's estimator and returns a :class:`DashboardResult`: TTFT, TPOT, total time, tokens per second
for one user and for the whole batch, the memory one GPU needs against what it has, and which bound
(memory or compute) holds in prefill and in decode.

The widget (``course_lib.widgets.capstone``) only wires controls to these plain functions: the TPOT
label shows exactly :func:`tpot_text`, the TTFT label exactly :func:`ttft_text`, and the figure
(``course_lib.plots.capstone``) plots :func:`latency_throughput_curve`.

Tensor parallelism over ``G`` GPUs (Megatron-style) splits every weight matrix and the KV heads over
the GPUs: each GPU stores and reads ``1/G`` of the weights and of the KV cache and does ``1/G`` of the
FLOPs, so a phase takes the time of the same work on one device with ``G`` times the bandwidth and the
peak FLOP/s. What it adds are two all-reduces per layer (after attention and after the MLP) of the
activations of every token processed in that pass (``batch × hidden`` values in a decode step,
``batch × new prompt tokens × hidden`` in prefill), priced with the course's ring all-reduce formula
``ring_allreduce_time(G, message_bytes, link_bandwidth)`` (bandwidth term only; per-hop latency not
counted). The link bandwidth is an input: the hardware catalog holds no interconnect figures, so
``tensor_parallel > 1`` requires ``interconnect_bandwidth`` (bytes/s, per GPU and direction).
The activations travel in 16-bit (fp32 when the weights compute in fp32/tf32).

Nothing here imports torch, ipywidgets or matplotlib. The ``"this-machine"`` device is a spec measured
with :func:`course_lib.bench.this_machine` and passed in ``DashboardState.machine``; it is never
measured here.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from course_lib.core import _generated as g
from course_lib.core.estimator import Estimate, _largest_passing, estimate
from course_lib.core.hardware import HardwareSpec, custom_hardware, get_hardware, list_hardware
from course_lib.core.models import get_model, list_models
from course_lib.core.precision import get_precision
from course_lib.core.units import Quantity, format_bandwidth, format_bytes, format_time, parse_bandwidth
from course_lib.core.validation import (MAX_COUNT, require_choice, require_count, require_counts, require_fraction,
                                        require_positive)

__all__ = ["THIS_MACHINE", "NOT_AVAILABLE", "TENSOR_PARALLEL_CHOICES", "DashboardState", "DashboardResult",
           "DashboardView", "CurvePoint", "hardware_choices", "resolve_hardware", "activation_bytes",
           "allreduce_time_per_pass", "compute", "tpot_text", "ttft_text", "tps_text", "memory_text",
           "dashboard_view", "latency_throughput_curve", "default_batches", "max_batch_that_fits",
           "state_from_controls", "parse_interconnect", "describe", "meets_budget", "best_batch", "what_binds"]

#: The hardware name of the machine the notebook runs on (measured on demand).
THIS_MACHINE = "this-machine"

#: What an output shows when the setting cannot be priced (no published peak FLOP/s, machine not measured).
NOT_AVAILABLE = "n/a"

#: GPU counts the widget offers for tensor parallelism.
TENSOR_PARALLEL_CHOICES = (1, 2, 4, 8)


def hardware_choices() -> list[str]:
    """Every catalog device, then ``"this-machine"``."""
    return [*list_hardware(), THIS_MACHINE]


@dataclass(frozen=True)
class DashboardState:
    """One deployment setting; the defaults are the dashboard's initial values.

    ``model``/``hardware`` are catalog names (``hardware`` may be ``"this-machine"``, whose measured
    spec is ``machine``); ``precision`` is the weights' format and ``kv_precision`` the KV cache's
    (``None``: the estimator's rule, same as the weights or fp16 for integer formats). Times per
    request: ``prompt_tokens`` in, ``new_tokens`` out, the first ``cached_prefix_tokens`` of the prompt
    already cached. ``tensor_parallel`` GPUs hold one copy of the model; ``interconnect_bandwidth``
    (bytes/s per GPU and direction) is required when it is above 1. Bad values raise one ValueError/TypeError
    naming the field.
    """

    model: str = "llama-3-8b"
    hardware: str = "h100-sxm"
    precision: str = "fp16"
    kv_precision: str | None = None
    batch: int = 1
    prompt_tokens: int = 1024
    new_tokens: int = 256
    cached_prefix_tokens: int = 0
    compute_efficiency: float = 1.0
    bandwidth_efficiency: float = 1.0
    tensor_parallel: int = 1
    interconnect_bandwidth: float | None = None
    machine: HardwareSpec | None = field(default=None, repr=False, hash=False)

    def __post_init__(self):
        m = get_model(require_choice("model", self.model, list_models()))
        set_ = object.__setattr__
        set_(self, "model", m.name)
        set_(self, "hardware", require_choice("hardware", self.hardware, hardware_choices()))
        set_(self, "precision", get_precision(self.precision).name)
        if self.kv_precision is not None:
            try:
                set_(self, "kv_precision", get_precision(self.kv_precision).name)
            except (ValueError, TypeError) as e:
                raise type(e)(str(e).replace("precision", "kv_precision", 1)) from None
        set_(self, "batch", require_count("batch", self.batch, minimum=1))
        set_(self, "prompt_tokens", require_count("prompt_tokens", self.prompt_tokens, minimum=1))
        set_(self, "new_tokens", require_count("new_tokens", self.new_tokens, minimum=1))
        c = require_count("cached_prefix_tokens", self.cached_prefix_tokens)
        if c >= self.prompt_tokens:
            raise ValueError(f"cached_prefix_tokens must be < prompt_tokens ({self.prompt_tokens}): at least one "
                             f"prompt token is processed to produce the first output token; got {c}")
        set_(self, "cached_prefix_tokens", c)
        if self.batch > _largest_batch(self):
            raise ValueError(f"batch x (prompt_tokens - cached_prefix_tokens) = {self.batch:,} x "
                             f"{self.prompt_tokens - c:,} tokens in one prefill pass must be at most {MAX_COUNT:.0e}: "
                             f"batch at most {_largest_batch(self):,} here")
        set_(self, "compute_efficiency", require_fraction("compute_efficiency", self.compute_efficiency))
        set_(self, "bandwidth_efficiency", require_fraction("bandwidth_efficiency", self.bandwidth_efficiency))
        tp = require_count("tensor_parallel", self.tensor_parallel, minimum=1)
        set_(self, "tensor_parallel", tp)
        if self.interconnect_bandwidth is not None:
            set_(self, "interconnect_bandwidth", require_positive("interconnect_bandwidth",
                                                                  self.interconnect_bandwidth))
        if tp > 1:
            if m.is_mla:
                raise ValueError(f"tensor_parallel > 1 is not modelled for {m.name}: its latent KV cache "
                                 f"(multi-head latent attention) is not split by heads; use tensor_parallel=1")
            if m.heads % tp or m.kv_heads % tp:
                raise ValueError(f"tensor_parallel must divide the model's attention heads ({m.heads}) and KV heads "
                                 f"({m.kv_heads}) so that each GPU holds whole heads; got {tp}")
            if self.interconnect_bandwidth is None:
                raise ValueError("interconnect_bandwidth (bytes/s per GPU and direction, e.g. from your system's "
                                 "datasheet, halved if it adds both directions) is required when tensor_parallel > 1: "
                                 "the hardware catalog has no interconnect figures and the course does not invent one")
        if self.machine is not None and not isinstance(self.machine, HardwareSpec):
            raise TypeError(f"machine must be a HardwareSpec (from course_lib.bench.this_machine()), "
                            f"got {type(self.machine).__name__}")

    def replace(self, **changes) -> "DashboardState":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


def _largest_batch(state) -> int:
    """The largest batch the estimator prices for ``state``: a prefill pass holds at most ``MAX_COUNT`` tokens."""
    return max(1, MAX_COUNT // (state.prompt_tokens - state.cached_prefix_tokens))


def _state(state) -> DashboardState:
    if not isinstance(state, DashboardState):
        raise TypeError(f"state must be a DashboardState, got {type(state).__name__}")
    return state


def resolve_hardware(state: DashboardState) -> HardwareSpec:
    """The one-GPU spec of ``state.hardware``: a catalog device, or the measured ``state.machine``."""
    state = _state(state)
    if state.hardware == THIS_MACHINE:
        if state.machine is None:
            raise ValueError("hardware 'this-machine' has not been measured yet: press 'Measure this machine' "
                             "(or pass machine=course_lib.bench.this_machine())")
        return state.machine
    return get_hardware(state.hardware)


def _scaled(hw: HardwareSpec, n: int) -> HardwareSpec:
    """``n`` GPUs seen as one device for the split work: n x bandwidth, n x peak FLOP/s, n x capacity."""
    if n == 1:
        return hw
    return custom_hardware(
        f"{n}x {hw.name}", bandwidth=n * hw.bandwidth, capacity=None if hw.capacity is None else n * hw.capacity,
        peak_flops={k: n * v for k, v in hw.peak_flops.items()}, memory_type=hw.memory_type,
        display=f"{n} x {hw.display or hw.name}", source=f"{n} x ({hw.source})")


def activation_bytes(compute_dtype: str) -> float:
    """Bytes per activation value sent in a tensor-parallel all-reduce: 4 for fp32/tf32, else 2 (16-bit)."""
    if not isinstance(compute_dtype, str):
        raise TypeError(f"compute_dtype must be a string such as 'fp16', got {type(compute_dtype).__name__}")
    return get_precision("fp32").bytes if compute_dtype in ("fp32", "tf32") else get_precision("fp16").bytes


def allreduce_time_per_pass(layers: int, tokens: int, hidden: int, devices: int, value_bytes: float,
                            link_bandwidth: float | None) -> float:
    """Seconds of the all-reduces of one forward pass over ``tokens`` tokens (all sequences together).

    Two ring all-reduces per layer of ``tokens × hidden`` activations of ``value_bytes`` each:
    ``2 · layers · ring_allreduce_time(devices, tokens · hidden · value_bytes, link_bandwidth)``.
    0 on a single GPU.
    """
    layers = require_count("layers", layers, minimum=1)
    tokens = require_count("tokens", tokens, minimum=1)
    hidden = require_count("hidden", hidden, minimum=1)
    devices = require_count("devices", devices, minimum=1)
    value_bytes = require_positive("value_bytes", value_bytes)
    if devices == 1:
        return 0.0
    if link_bandwidth is None:
        raise ValueError("link_bandwidth is required for devices > 1")
    link = require_positive("link_bandwidth", link_bandwidth)
    return 2 * layers * g.ring_allreduce_time(devices, tokens * hidden * value_bytes, link)


@dataclass(frozen=True)
class DashboardResult:
    """What one deployment setting gives; seconds, bytes, tokens/s.

    ``estimate`` is the estimator's result for the split work (on one GPU: exactly
    ``course_lib.estimate(...)`` of the state); ``ttft``/``tpot`` add the tensor-parallel all-reduces
    (``allreduce_prefill`` once, ``allreduce_decode`` per decode step). Memory is per GPU.
    """

    state: DashboardState
    hardware: HardwareSpec
    estimate: Estimate
    allreduce_prefill: float
    allreduce_decode: float

    @property
    def ttft(self) -> float:
        return self.estimate.ttft + self.allreduce_prefill

    @property
    def tpot(self) -> float:
        return self.estimate.tpot + self.allreduce_decode

    @property
    def total(self) -> float:
        return g.total_latency(self.ttft, self.state.new_tokens, self.tpot)

    @property
    def tps(self) -> float:
        """Tokens per second one user sees over the whole response: n / total."""
        return g.tokens_per_second(self.state.new_tokens, self.ttft, self.tpot)

    @property
    def tps_aggregate(self) -> float:
        """Tokens per second the deployment produces for all ``batch`` users together."""
        return self.state.batch * self.tps

    @property
    def tps_aggregate_per_gpu(self) -> float:
        return self.tps_aggregate / self.state.tensor_parallel

    @property
    def decode_tps(self) -> float:
        """One user's reading speed once the answer streams: 1 / TPOT."""
        return 1.0 / self.tpot

    @property
    def prefill_bound(self) -> str:
        return self.estimate.prefill_bound

    @property
    def decode_bound(self) -> str:
        return self.estimate.decode_bound

    @property
    def weights_per_gpu(self) -> float:
        return self.estimate.weights_bytes / self.state.tensor_parallel

    @property
    def kv_per_gpu(self) -> float:
        return self.estimate.kv_bytes / self.state.tensor_parallel

    @property
    def memory_needed(self) -> float:
        """Bytes one GPU holds: its share of the weights and of the KV cache at the final length."""
        return self.weights_per_gpu + self.kv_per_gpu

    @property
    def memory_available(self) -> float | None:
        """Bytes of memory one GPU has (``None``: unknown)."""
        return self.hardware.capacity

    @property
    def fits(self) -> bool | None:
        cap = self.memory_available
        return None if cap is None else self.memory_needed <= cap

    def as_dict(self) -> dict:
        keys = ("ttft", "tpot", "total", "tps", "tps_aggregate", "tps_aggregate_per_gpu", "decode_tps",
                "prefill_bound", "decode_bound", "memory_needed", "memory_available", "fits",
                "allreduce_prefill", "allreduce_decode")
        return {k: getattr(self, k) for k in keys}


def compute(state: DashboardState) -> DashboardResult:
    """Price a deployment setting (see the module docstring).

    Raises the estimator's ValueError when the device has no published peak FLOP/s for the compute
    dtype, and a ValueError when ``"this-machine"`` has not been measured.
    """
    hw = resolve_hardware(_state(state))
    tp = state.tensor_parallel
    e = estimate(state.model, _scaled(hw, tp), state.prompt_tokens, state.new_tokens, precision=state.precision,
                 kv_precision=state.kv_precision, batch=state.batch, cached_prefix_tokens=state.cached_prefix_tokens,
                 compute_efficiency=state.compute_efficiency, bandwidth_efficiency=state.bandwidth_efficiency)
    m = e.model
    vb = activation_bytes(e.compute_dtype)
    new_prompt = state.prompt_tokens - state.cached_prefix_tokens
    ar_pf = allreduce_time_per_pass(m.layers, state.batch * new_prompt, m.hidden, tp, vb, state.interconnect_bandwidth)
    ar_dec = allreduce_time_per_pass(m.layers, state.batch, m.hidden, tp, vb, state.interconnect_bandwidth)
    return DashboardResult(state=state, hardware=hw, estimate=e, allreduce_prefill=ar_pf, allreduce_decode=ar_dec)


def _try(state: DashboardState) -> tuple[DashboardResult | None, str | None]:
    try:
        return compute(state), None
    except ValueError as exc:
        return None, str(exc)


def tpot_text(state: DashboardState) -> str:
    """The TPOT label: ``format_time(compute(state).tpot)``, or ``"n/a"`` when the setting cannot be priced."""
    r, _ = _try(state)
    return NOT_AVAILABLE if r is None else format_time(r.tpot)


def ttft_text(state: DashboardState) -> str:
    """The TTFT label: ``format_time(compute(state).ttft)``, or ``"n/a"``."""
    r, _ = _try(state)
    return NOT_AVAILABLE if r is None else format_time(r.ttft)


def _rate(tokens_per_s: float) -> str:
    return f"{Quantity(tokens_per_s, 'number').format()} tokens/s"


def tps_text(state: DashboardState) -> str:
    """``"<per user> tokens/s per user, <aggregate> tokens/s in all"`` (or ``"n/a"``)."""
    r, _ = _try(state)
    if r is None:
        return NOT_AVAILABLE
    return f"{_rate(r.tps)} per user, {_rate(r.tps_aggregate)} in all"


def memory_text(state: DashboardState) -> str:
    """``"<needed> of <available> per GPU: fits"`` / ``"... does NOT fit"`` (or ``"n/a"``)."""
    r, _ = _try(state)
    if r is None:
        return NOT_AVAILABLE
    if r.memory_available is None:
        return f"{format_bytes(r.memory_needed)} per GPU (capacity unknown)"
    verdict = "fits" if r.fits else "does NOT fit"
    return f"{format_bytes(r.memory_needed)} of {format_bytes(r.memory_available)} per GPU: {verdict}"


@dataclass(frozen=True)
class DashboardView:
    """Every text the dashboard shows for one state (``error`` set when it cannot be priced)."""

    state: DashboardState
    result: DashboardResult | None
    error: str | None
    ttft_text: str
    tpot_text: str
    total_text: str
    tps_text: str
    memory_text: str
    bounds_text: str
    warnings: tuple[str, ...]


def dashboard_view(state: DashboardState) -> DashboardView:
    """The texts of every output for ``state``: what the widget's update does, as a plain function."""
    r, err = _try(state)
    if r is None:
        return DashboardView(state, None, err, NOT_AVAILABLE, NOT_AVAILABLE, NOT_AVAILABLE, NOT_AVAILABLE,
                             NOT_AVAILABLE, NOT_AVAILABLE, ())
    e = r.estimate
    bounds = f"prefill {r.prefill_bound}-bound, decode {r.decode_bound}-bound"
    if state.tensor_parallel > 1:
        bounds += (f"; all-reduces add {format_time(r.allreduce_prefill)} to TTFT and "
                   f"{format_time(r.allreduce_decode)} to each decode step")
    warnings = []
    if r.fits is False:
        warnings.append(f"Does not fit: {format_bytes(r.memory_needed)} needed per GPU "
                        f"({format_bytes(r.weights_per_gpu)} weights + {format_bytes(r.kv_per_gpu)} KV cache), "
                        f"{format_bytes(r.memory_available)} available.")
    if state.prompt_tokens + state.new_tokens > e.model.max_positions:
        warnings.append(f"{e.model.name} was trained for at most {e.model.max_positions:,} positions: "
                        f"prompt + answer is longer, the numbers are arithmetic only.")
    return DashboardView(state, r, None, format_time(r.ttft), format_time(r.tpot), format_time(r.total),
                         tps_text(state), memory_text(state), bounds, tuple(warnings))


def parse_interconnect(text) -> float | None:
    """The interconnect field: ``""`` -> ``None``; ``"450 GB/s"`` -> bytes/s; a number is bytes/s."""
    if text is None:
        return None
    if isinstance(text, str):
        if not text.strip():
            return None
        try:
            return require_positive("interconnect_bandwidth", parse_bandwidth(text))
        except ValueError as exc:
            raise ValueError(f"interconnect_bandwidth: {exc}") from None
    return require_positive("interconnect_bandwidth", text)


def state_from_controls(machine: HardwareSpec | None = None, **values) -> DashboardState:
    """A :class:`DashboardState` from the widget's control values (``interconnect_bandwidth`` may be text)."""
    if "interconnect_bandwidth" in values:
        values["interconnect_bandwidth"] = parse_interconnect(values["interconnect_bandwidth"])
    return DashboardState(machine=machine, **values)


# --------------------------------------------------------------------------------------------------
# Latency against throughput over the batch
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CurvePoint:
    """One batch size of the latency–throughput curve (seconds, tokens/s, bytes per GPU)."""

    batch: int
    ttft: float
    tpot: float
    tps: float
    tps_aggregate: float
    memory_needed: float
    fits: bool | None


def default_batches(current: int = 1, largest: int = 256) -> list[int]:
    """Powers of two up to ``largest``, plus ``current``; sorted, no duplicates."""
    current = require_count("current", current, minimum=1)
    largest = require_count("largest", largest, minimum=1)
    out = {1 << i for i in range(largest.bit_length()) if 1 << i <= largest}
    return sorted(out | {current})


def latency_throughput_curve(state: DashboardState, batches: Iterable[int] | None = None) -> list[CurvePoint]:
    """The state at each batch size: per-user TPOT and tokens/s against aggregate tokens/s.

    ``batches`` defaults to :func:`default_batches` of the state's batch. ``fits`` marks where the
    weights and the KV cache of that many sequences no longer fit one GPU's memory.
    """
    state = _state(state)
    if batches is None:
        bs = default_batches(state.batch)
    else:
        bs = sorted(set(require_counts("batches", batches, maximum_items=4096, what="batch size")))
        if bs[-1] > _largest_batch(state):
            raise ValueError(f"batches must be at most {_largest_batch(state):,} for {state.prompt_tokens:,}-token "
                             f"prompts (one prefill pass holds at most {MAX_COUNT:.0e} tokens), got {bs[-1]:,}")
    out = []
    for b in bs:
        r = compute(state.replace(batch=b))
        out.append(CurvePoint(b, r.ttft, r.tpot, r.tps, r.tps_aggregate, r.memory_needed, r.fits))
    return out


def max_batch_that_fits(state: DashboardState, limit: int = 1 << 16) -> int:
    """The largest batch (<= ``limit``) whose weights and KV cache fit one GPU; 0 when none does.

    The memory needed grows linearly with the batch, so it is solved directly:
    ``floor((capacity - weights) / KV bytes of one sequence)`` per GPU, capped at ``limit``.
    """
    limit = require_count("limit", limit, minimum=1)
    r1 = compute(_state(state).replace(batch=1))
    cap = r1.memory_available
    if cap is None:
        raise ValueError(f"hardware {r1.hardware.name!r} has no memory capacity: the batch that fits is unknown")
    free = cap - r1.weights_per_gpu
    if free < r1.kv_per_gpu:
        return 0
    return min(limit, math.floor(free / r1.kv_per_gpu))


def meets_budget(result: DashboardResult, ttft_budget: float | None = None,
                 tpot_budget: float | None = None) -> bool:
    """True when the setting fits in memory (or the capacity is unknown) and meets both budgets (seconds)."""
    if not isinstance(result, DashboardResult):
        raise TypeError(f"result must be a DashboardResult (from compute), got {type(result).__name__}")
    ttft_budget, tpot_budget = _budgets(ttft_budget, tpot_budget)
    return (result.fits is not False
            and (ttft_budget is None or result.ttft <= ttft_budget)
            and (tpot_budget is None or result.tpot <= tpot_budget))


def _budgets(ttft_budget, tpot_budget) -> tuple[float | None, float | None]:
    return (None if ttft_budget is None else require_positive("ttft_budget", ttft_budget),
            None if tpot_budget is None else require_positive("tpot_budget", tpot_budget))


def best_batch(state: DashboardState, ttft_budget: float | None = None, tpot_budget: float | None = None,
               limit: int = 1024) -> int:
    """The largest batch (<= ``limit``) that fits in memory and meets the TTFT and TPOT budgets; 0 if none.

    ``limit`` is capped where one prefill pass would exceed the course's count limit (``validation.MAX_COUNT``
    tokens).
    TTFT, TPOT and the memory needed never fall as the batch grows (each phase's time is the larger of
    two terms linear in the batch), so the batches that pass form a prefix 1..b and b is found by
    bisection. ``None`` leaves a budget out.
    """
    state = _state(state)
    ttft_budget, tpot_budget = _budgets(ttft_budget, tpot_budget)
    limit = min(require_count("limit", limit, minimum=1), _largest_batch(state))

    def ok(b):
        return meets_budget(compute(state.replace(batch=b)), ttft_budget, tpot_budget)

    return _largest_passing(ok, limit)


def what_binds(state: DashboardState, ttft_budget: float | None = None, tpot_budget: float | None = None,
               limit: int = 1024) -> str:
    """What stops the batch at ``best_batch(...)``: the limits the next batch breaks.

    One or more of ``"TTFT budget"``, ``"TPOT budget"``, ``"memory"`` joined by ``" and "``, or
    ``"batch limit"`` when the best batch is ``limit`` itself.
    """
    b = best_batch(state, ttft_budget, tpot_budget, limit)
    if b >= min(require_count("limit", limit, minimum=1), _largest_batch(state)):
        return "batch limit"
    r = compute(state.replace(batch=b + 1))
    broken = []
    if ttft_budget is not None and r.ttft > ttft_budget:
        broken.append("TTFT budget")
    if tpot_budget is not None and r.tpot > tpot_budget:
        broken.append("TPOT budget")
    if r.fits is False:
        broken.append("memory")
    return " and ".join(broken)


def describe(state: DashboardState) -> str:
    """A one-line description of a setting, for titles and captions."""
    state = _state(state)
    hw = resolve_hardware(state) if state.hardware == THIS_MACHINE and state.machine else None
    dev = (hw.display if hw else None) or (get_hardware(state.hardware).display
                                           if state.hardware != THIS_MACHINE else "this machine")
    tp = f"{state.tensor_parallel} x " if state.tensor_parallel > 1 else ""
    link = (f" (link {format_bandwidth(state.interconnect_bandwidth)})"
            if state.tensor_parallel > 1 and state.interconnect_bandwidth else "")
    return (f"{state.model} on {tp}{dev}{link}, {state.precision} weights, prompt {state.prompt_tokens:,} "
            f"(cached {state.cached_prefix_tokens:,}), {state.new_tokens:,} new tokens")
