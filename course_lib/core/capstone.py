"""The capstone dashboard's logic: plan a deployment (lesson 09 and the ``make app`` Voila app).

Lessons: 09

A deployment is a :class:`DashboardState`: which model on which device, in which precision, how many
sequences decode together (the batch), how long the prompts and the answers are, how much of each
prompt is already in a prefix cache, how close the kernels get to the datasheet (efficiencies) and
over how many GPUs the model is split (tensor parallelism). :func:`compute` prices it with the
course's estimator and returns a :class:`DashboardResult`: TTFT, TPOT, total time, tokens per second
for one user and for the whole batch, the memory one GPU needs against what it has, and which bound
(memory or compute) holds in prefill and in decode.

The widget (``course_lib.lessons.widgets.capstone``) only wires controls to these plain functions: the TPOT
label shows exactly :func:`tpot_text`, the TTFT label exactly :func:`ttft_text`, and the figure
(``course_lib.lessons.plots.capstone``) plots :func:`latency_throughput_curve`.

Tensor parallelism over ``G`` GPUs (Megatron-style) splits every weight matrix and the attention heads over
the GPUs: each GPU stores and reads ``1/G`` of the weights and of the KV cache and does ``1/G`` of the
FLOPs, so a phase takes the time of the same work on one device with ``G`` times the bandwidth and the
peak FLOP/s. What it adds are two all-reduces per layer (after attention and after the MLP) of the
activations of every token processed in that pass (``batch × hidden`` values in a decode step,
``batch × new prompt tokens × hidden`` in prefill). Each is priced with its latency:
``allreduce_ring_time(G, m, β, α0, α) = α0 + 2(G - 1)·α + 2(G - 1)/G · m/β`` (or the tree's
``α0 + 2⌈log2 G⌉·α + 2m/β``, ``collective_algorithm="tree"``). The start-up latencies default to NCCL's own
cost model (:data:`COLLECTIVE_LATENCIES`, NVLink, LL protocol: the one NCCL picks for small messages);
``collective_base_latency``/``collective_hop_latency`` override them (0 and 0: the bandwidth term alone).
At small batch the latency dominates: 160 all-reduces per step at about 15 µs each on 8 GPUs.
The link bandwidth is an input: ``tensor_parallel > 1`` requires ``interconnect_bandwidth``
(bytes/s, per GPU and direction). The activations travel in 16-bit (fp32 when the weights compute in fp32/tf32).

Multi-head latent attention (DeepSeek-V2/V3) splits its heads over the GPUs, but its latent KV cache is one
vector per token shared by every head: each GPU holds and reads all of it (replicated), so the KV memory
per GPU and the attention's K/V reads do not shrink with ``G``. A mixture of experts with
``expert_parallel=True`` places ``1/G`` of the routed experts on each GPU (expert parallelism) instead of
splitting every expert: its MoE layers replace the MLP all-reduce with two all-to-alls, the dispatch of each
token's hidden state to its ``k`` experts and the combine of their outputs
(``alltoall_time(G, T·k·h·b / G, ...)`` each, ``T·k·h·b`` bytes over all GPUs; the shared experts' partial sums
travel with the combine).

Static against continuous batching. :func:`compute` prices a *static* batch: B requests start together, one
pass prefills every prompt, the answers decode in lock-step. :func:`static_plan` finds the largest such batch
within the budgets: the naive baseline. Servers batch continuously: :func:`continuous_plan` is the steady
state (``steady_state_tpot = t_decode(C) + C · t_prefill / (n - 1)`` with ``C`` sequences in flight per group of
``tensor_parallel`` GPUs, the same model as :func:`course_lib.core.serving.continuous_batching_plan`, which it
equals on one GPU, plus the collectives of tensor and expert parallelism), and :func:`simulate_plan` runs
:func:`course_lib.core.serving.simulate` at the plan's load for its p50/p99.

Nothing here imports torch, ipywidgets or matplotlib. The ``"this-machine"`` device is a spec measured
with :func:`course_lib.measure.machine.this_machine` and passed in ``DashboardState.machine``; it is never
measured here. What the dashboard and the app *say* about a setting (their texts) is
:mod:`course_lib.core.app`'s.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from course_lib.core.numeric import raw as g
from course_lib.core.estimator import Estimate, _largest_passing, estimate
from course_lib.core.hardware import HardwareSpec, custom_hardware, get_hardware, list_hardware
from course_lib.core.models import get_model, list_models
from course_lib.core.precision import get_precision
from course_lib.core.serving.plans import steady_state_search  # the one steady-state search
from course_lib.core.units import format_bandwidth
from course_lib.core.validation import (MAX_COUNT, require_choice, require_count, require_counts, require_fraction,
                                        require_nonnegative, require_positive)

__all__ = ["THIS_MACHINE", "TENSOR_PARALLEL_CHOICES", "COLLECTIVE_ALGORITHMS", "COLLECTIVES",
           "CollectiveLatency", "COLLECTIVE_LATENCIES", "DashboardState", "DashboardResult",
           "CurvePoint", "hardware_choices", "resolve_hardware", "activation_bytes",
           "collective_latency", "collective_time", "allreduce_time_per_pass", "alltoall_time_per_pass",
           "StaticPlan", "static_plan", "ContinuousPlan", "continuous_plan", "simulate_plan", "compute",
           "latency_throughput_curve", "default_batches", "max_batch_that_fits",
           "describe", "meets_budget", "best_batch", "what_binds"]

#: The hardware name of the machine the notebook runs on (measured on demand).
THIS_MACHINE = "this-machine"


#: GPU counts the widget offers for tensor parallelism.
TENSOR_PARALLEL_CHOICES = (1, 2, 4, 8)


#: All-reduce algorithms the planner prices (``DashboardState.collective_algorithm``).
COLLECTIVE_ALGORITHMS = ("ring", "tree", "one-shot")

#: Collectives :func:`collective_time` prices.
COLLECTIVES = ("all-reduce", "all-gather", "all-to-all")

_NCCL_SOURCE = ("NCCL's cost model, src/graph/tuning.cc (github.com/NVIDIA/nccl, commit 5067397c, NCCL 2.30): "
                "baseLatencies[{algo}][LL] = {base} us and hwLatencies[NVLINK][{algo}][LL] = {hop} us; NCCL prices "
                "a collective as baseLat + nsteps x hwLat + bytes / bandwidth, with nsteps = 2 (G - 1) for a ring "
                "all-reduce and G - 1 for an all-gather. LL is the protocol it picks for small messages.")


@dataclass(frozen=True)
class CollectiveLatency:
    """The start-up latency of a collective (``base``, once) and of each of its steps (``hop``), in seconds."""

    algorithm: str
    base: float
    hop: float
    source: str


#: NCCL's own latency figures for NVLink (LL protocol), the planner's defaults.
COLLECTIVE_LATENCIES = {
    "ring": CollectiveLatency("ring", 6.6e-6, 0.6e-6, _NCCL_SOURCE.format(algo="Ring", base=6.6, hop=0.6)),
    "tree": CollectiveLatency("tree", 6.8e-6, 0.6e-6, _NCCL_SOURCE.format(algo="Tree", base=6.8, hop=0.6)),
    # no latency is published for the engines' custom one-shot kernels: NCCL's Ring LL figures, for its one step
    "one-shot": CollectiveLatency("one-shot", 6.6e-6, 0.6e-6, "not published for the custom all-reduce kernels of "
                                  "vLLM and TensorRT-LLM; the course reuses " + _NCCL_SOURCE.format(
                                      algo="Ring", base=6.6, hop=0.6) + " An assumption: measure your own."),
}


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
    (bytes/s per GPU and direction) is required when it is above 1. ``expert_parallel`` (MoE models only)
    spreads the routed experts over those GPUs; ``collective_algorithm`` (``"ring"`` or ``"tree"``) and the
    latencies ``collective_base_latency``/``collective_hop_latency`` (seconds; ``None``: NCCL's figures in
    :data:`COLLECTIVE_LATENCIES`) price the collectives. ``engine`` (``None``: the floor, at the efficiencies
    set) prices TTFT and TPOT with that engine's profile fitted to published measurements
    (:mod:`course_lib.core.forecast`: 'llama.cpp', 'vLLM', 'SGLang', 'TensorRT-LLM', 'transformers'), whose
    efficiencies are fitted: with an engine, ``compute_efficiency`` and ``bandwidth_efficiency`` stay 1. Bad
    values raise one ValueError/TypeError naming the field.
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
    expert_parallel: bool = False
    collective_algorithm: str = "ring"
    collective_base_latency: float | None = None
    collective_hop_latency: float | None = None
    engine: str | None = None

    def __post_init__(self):
        m = get_model(require_choice("model", self.model, list_models()))
        set_ = object.__setattr__
        set_(self, "model", m.name)
        set_(self, "hardware", require_choice("hardware", self.hardware, hardware_choices()))
        set_(self, "precision", get_precision(self.precision).name)
        if self.kv_precision is not None:
            try:
                set_(self, "kv_precision", get_precision(self.kv_precision, argument="kv_precision").name)
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
        if self.engine is not None:
            from course_lib.core.forecast import canonical_engine
            set_(self, "engine", canonical_engine(self.engine))
            if self.compute_efficiency != 1.0 or self.bandwidth_efficiency != 1.0:
                raise ValueError(f"engine: the {self.engine} profile has its own fitted efficiencies; leave "
                                 f"compute_efficiency and bandwidth_efficiency at 1 with an engine (got "
                                 f"{self.compute_efficiency:g} and {self.bandwidth_efficiency:g}), or set engine=None "
                                 f"for the floor at the efficiencies you choose")
        tp = require_count("tensor_parallel", self.tensor_parallel, minimum=1)
        set_(self, "tensor_parallel", tp)
        if self.interconnect_bandwidth is not None:
            set_(self, "interconnect_bandwidth", require_positive("interconnect_bandwidth",
                                                                  self.interconnect_bandwidth))
        if not isinstance(self.expert_parallel, bool):
            raise TypeError(f"expert_parallel must be True or False, got {type(self.expert_parallel).__name__}")
        if self.expert_parallel and not m.is_moe:
            raise ValueError(f"expert_parallel=True needs a mixture-of-experts model; {m.name} has no experts")
        if self.expert_parallel and m.experts % tp:
            raise ValueError(f"tensor_parallel must divide the routed experts ({m.experts}) under expert "
                             f"parallelism so that each GPU holds as many; got {tp}")
        set_(self, "collective_algorithm", require_choice("collective_algorithm", self.collective_algorithm,
                                                          COLLECTIVE_ALGORITHMS))
        for name in ("collective_base_latency", "collective_hop_latency"):
            if getattr(self, name) is not None:
                set_(self, name, require_nonnegative(name, getattr(self, name), maximum=1.0))
        if tp > 1:
            if m.heads % tp or (not m.is_mla and m.kv_heads % tp):
                raise ValueError(f"tensor_parallel must divide the model's attention heads ({m.heads}) and KV heads "
                                 f"({m.kv_heads}) so that each GPU holds whole heads; got {tp}")
            if self.interconnect_bandwidth is None:
                try:
                    hw = get_hardware(self.hardware)
                    link = hw.scale_up
                except (ValueError, TypeError):     # "this machine": not a catalog device
                    hw = link = None
                hint = (f"the catalog lists {link.name} at {link.per_direction_bandwidth / 1e9:,.0f} GB/s per "
                        f"direction for {hw.display} (nominal): pass that, or the rate your system achieves"
                        if link is not None and link.per_direction_bandwidth else
                        "the catalog lists no NVLink or Infinity Fabric for this device (PCIe only, or "
                        "unknown): take the rate from your system's datasheet")
                raise ValueError("interconnect_bandwidth (bytes/s per GPU and direction, halved if a datasheet adds "
                                 f"both directions) is required when tensor_parallel > 1: {hint}")
        if self.machine is not None and not isinstance(self.machine, HardwareSpec):
            raise TypeError(f"machine must be a HardwareSpec (from course_lib.measure.machine.this_machine()), "
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
                             "(or pass machine=course_lib.measure.machine.this_machine())")
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


def collective_latency(algorithm: str = "ring", base_latency: float | None = None,
                       hop_latency: float | None = None) -> tuple[float, float]:
    """``(base, hop)`` seconds of a collective: the given ones, else NCCL's NVLink figures for ``algorithm``."""
    algorithm = require_choice("algorithm", algorithm, COLLECTIVE_ALGORITHMS)
    d = COLLECTIVE_LATENCIES[algorithm]
    base = d.base if base_latency is None else require_nonnegative("base_latency", base_latency, maximum=1.0)
    hop = d.hop if hop_latency is None else require_nonnegative("hop_latency", hop_latency, maximum=1.0)
    return base, hop


def collective_time(collective: str, devices: int, message_bytes: float, link_bandwidth: float | None, *,
                    algorithm: str = "ring", base_latency: float | None = None,
                    hop_latency: float | None = None) -> float:
    """Seconds of one collective over ``devices`` GPUs (0 on one GPU), latency included.

    ``"all-reduce"``: ``allreduce_ring_time`` (or ``allreduce_tree_time`` with ``algorithm="tree"``: inside one
    node NCCL's tree is a chain of ``devices - 1`` steps each way; or ``allreduce_oneshot_time`` with
    ``algorithm="one-shot"``, the engines' custom kernel over NVSwitch) of a ``message_bytes`` message;
    ``"all-gather"``: ``allgather_ring_time`` of a
    ``message_bytes`` result; ``"all-to-all"``: ``alltoall_time``, each GPU sending ``message_bytes`` in all.
    Latencies: :func:`collective_latency`. ``link_bandwidth``: bytes/s per GPU and direction.
    """
    collective = require_choice("collective", collective, COLLECTIVES)
    devices = require_count("devices", devices, minimum=1)
    message_bytes = require_nonnegative("message_bytes", message_bytes)
    base, hop = collective_latency(algorithm, base_latency, hop_latency)
    link = None if link_bandwidth is None else require_positive("link_bandwidth", link_bandwidth)
    if devices == 1:
        return 0.0
    if link is None:
        raise ValueError("link_bandwidth is required for devices > 1")
    if collective == "all-reduce":
        if algorithm == "tree":                  # one node: NCCL's intra-node tree is a chain of G - 1 steps
            return g.allreduce_tree_time(devices - 1, message_bytes, link, base, hop)
        if algorithm == "one-shot":
            return g.allreduce_oneshot_time(devices, message_bytes, link, base, hop)
        return g.allreduce_ring_time(devices, message_bytes, link, base, hop)
    if collective == "all-gather":
        return g.allgather_ring_time(devices, message_bytes, link, base, hop)
    return g.alltoall_time(devices, message_bytes, link, base, hop)


def allreduce_time_per_pass(layers: int, tokens: int, hidden: int, devices: int, value_bytes: float,
                            link_bandwidth: float | None, *, algorithm: str = "ring",
                            base_latency: float | None = None, hop_latency: float | None = None) -> float:
    """Seconds of the all-reduces of one forward pass over ``tokens`` tokens (all sequences together).

    Two all-reduces per layer of ``tokens × hidden`` activations of ``value_bytes`` each:
    ``2 · layers · collective_time("all-reduce", devices, tokens · hidden · value_bytes, ...)``, latency
    included (NCCL's figures unless given; ``base_latency=0, hop_latency=0`` leaves the bandwidth term
    alone, ``2 · layers · ring_allreduce_time(...)``). 0 on a single GPU.
    """
    layers = require_count("layers", layers, minimum=1)
    tokens = require_count("tokens", tokens, minimum=1)
    hidden = require_count("hidden", hidden, minimum=1)
    devices = require_count("devices", devices, minimum=1)
    value_bytes = require_positive("value_bytes", value_bytes)
    return 2 * layers * collective_time("all-reduce", devices, tokens * hidden * value_bytes, link_bandwidth,
                                        algorithm=algorithm, base_latency=base_latency, hop_latency=hop_latency)


def alltoall_time_per_pass(moe_layers: int, tokens: int, hidden: int, experts_per_token: int, devices: int,
                           value_bytes: float, link_bandwidth: float | None, *, base_latency: float | None = None,
                           hop_latency: float | None = None) -> float:
    """Seconds of expert parallelism's all-to-alls in one pass: a dispatch and a combine per MoE layer.

    Each moves ``tokens × experts_per_token × hidden × value_bytes`` bytes over all the GPUs, each GPU sending
    its ``1/devices`` share: ``2 · moe_layers · alltoall_time(devices, that / devices, ...)``. 0 on one GPU.
    """
    moe_layers = require_count("moe_layers", moe_layers)
    tokens = require_count("tokens", tokens, minimum=1)
    hidden = require_count("hidden", hidden, minimum=1)
    k = require_count("experts_per_token", experts_per_token, minimum=1)
    devices = require_count("devices", devices, minimum=1)
    value_bytes = require_positive("value_bytes", value_bytes)
    if moe_layers == 0:
        return 0.0
    per_gpu = tokens * k * hidden * value_bytes / devices
    return 2 * moe_layers * collective_time("all-to-all", devices, per_gpu, link_bandwidth,
                                            base_latency=base_latency, hop_latency=hop_latency)


@dataclass(frozen=True)
class DashboardResult:
    """What one deployment setting gives; seconds, bytes, tokens/s.

    ``estimate`` is the estimator's result for the split work (on one GPU: exactly
    ``course_lib.estimate(...)`` of the state); ``ttft``/``tpot`` add the tensor-parallel all-reduces
    (``allreduce_prefill`` once, ``allreduce_decode`` per decode step), expert parallelism's all-to-alls
    (``alltoall_prefill``, ``alltoall_decode``) and, for a latent (MLA) KV cache that every GPU holds whole,
    the extra time of reading it (``kv_replicated_prefill``, ``kv_replicated_decode``). Memory is per GPU.
    """

    state: DashboardState
    hardware: HardwareSpec
    estimate: Estimate
    allreduce_prefill: float
    allreduce_decode: float
    alltoall_prefill: float = 0.0
    alltoall_decode: float = 0.0
    kv_replicated: bool = False
    kv_replicated_prefill: float = 0.0
    kv_replicated_decode: float = 0.0

    @property
    def communication_prefill(self) -> float:
        """Seconds the collectives add to the prefill pass (all-reduces and all-to-alls)."""
        return self.allreduce_prefill + self.alltoall_prefill

    @property
    def communication_decode(self) -> float:
        """Seconds the collectives add to each decode step."""
        return self.allreduce_decode + self.alltoall_decode

    @property
    def ttft(self) -> float:
        return self.estimate.ttft + self.communication_prefill + self.kv_replicated_prefill

    @property
    def tpot(self) -> float:
        return self.estimate.tpot + self.communication_decode + self.kv_replicated_decode

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
        """KV-cache bytes on one GPU: ``1/G`` of it, or all of it when the cache is replicated (MLA)."""
        return self.estimate.kv_bytes / (1 if self.kv_replicated else self.state.tensor_parallel)

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
                "allreduce_prefill", "allreduce_decode", "alltoall_prefill", "alltoall_decode",
                "kv_replicated_prefill", "kv_replicated_decode")
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
                 compute_efficiency=state.compute_efficiency, bandwidth_efficiency=state.bandwidth_efficiency,
                 engine=state.engine)
    m = e.model
    vb = activation_bytes(e.compute_dtype)
    new_prompt = state.prompt_tokens - state.cached_prefix_tokens
    lat = dict(base_latency=state.collective_base_latency, hop_latency=state.collective_hop_latency)
    link = state.interconnect_bandwidth
    ep = state.expert_parallel and tp > 1
    # under expert parallelism the MoE layers' MLP all-reduce becomes a dispatch and a combine all-to-all
    reduces = 2 * m.layers if not ep else m.layers + (m.layers - m.moe_layers)     # all-reduces per pass
    pf_tokens, dec_tokens = state.batch * new_prompt, state.batch

    def allreduces(tokens):
        return allreduce_time_per_pass(m.layers, tokens, m.hidden, tp, vb, link, algorithm=state.collective_algorithm,
                                       **lat) * reduces / (2 * m.layers) if tp > 1 else 0.0

    def alltoalls(tokens):
        return alltoall_time_per_pass(m.moe_layers, tokens, m.hidden, m.experts_per_token, tp, vb, link,
                                      **lat) if ep else 0.0

    replicated = m.is_mla and tp > 1
    kv_pf = kv_dec = 0.0
    if replicated:
        peak = e.hardware.flops(e.compute_dtype)

        def extra(phase) -> float:
            # every GPU reads the whole latent cache: G x the split K/V bytes, at the G GPUs' bandwidth
            op = phase.operator("attention")
            return g.operator_time(op.flops, peak, e.compute_efficiency, tp * op.bytes, e.hardware.bandwidth,
                                   e.bandwidth_efficiency) - op.time

        kv_pf = extra(e.prefill)
        # attention's FLOPs and bytes are both proportional to the context, so the extra time is too: its mean
        # over the decode steps is the mean of the first and the last step's
        kv_dec = (extra(e.decode_first) + extra(e.decode_last)) / 2 if e.decode_steps else extra(e.decode_first)
    return DashboardResult(state=state, hardware=hw, estimate=e, allreduce_prefill=allreduces(pf_tokens),
                           allreduce_decode=allreduces(dec_tokens), alltoall_prefill=alltoalls(pf_tokens),
                           alltoall_decode=alltoalls(dec_tokens), kv_replicated=replicated,
                           kv_replicated_prefill=kv_pf, kv_replicated_decode=kv_dec)


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
    link = (f" (link {format_bandwidth(state.interconnect_bandwidth)}"
            + (", experts spread over the GPUs" if state.expert_parallel else "") + ")"
            if state.tensor_parallel > 1 and state.interconnect_bandwidth else "")
    engine = "" if state.engine is None else f", with the {state.engine} profile"
    return (f"{state.model} on {tp}{dev}{link}, {state.precision} weights, prompt {state.prompt_tokens:,} "
            f"(cached {state.cached_prefix_tokens:,}), {state.new_tokens:,} new tokens{engine}")


# --------------------------------------------------------------------------------------------------
# Plans: the static batch (the naive baseline) and continuous batching
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StaticPlan:
    """The static-batch plan: the largest batch (started together) within the budgets, and the GPUs for ``users``.

    ``result`` is :func:`compute` at that batch (batch 1 when none passes: ``batch`` 0, ``gpus`` ``None``).
    """

    state: DashboardState
    users: int
    batch: int
    binds: str
    result: DashboardResult
    gpus: int | None


def static_plan(state: DashboardState, users: int, ttft_budget: float | None = None,
                tpot_budget: float | None = None, limit: int = 1024) -> StaticPlan:
    """The naive baseline: :func:`best_batch` and :func:`what_binds`, ``ceil(users / batch) × tensor_parallel`` GPUs."""
    state = _state(state)
    users = require_count("users", users, minimum=1)
    b = best_batch(state, ttft_budget, tpot_budget, limit)
    return StaticPlan(state=state, users=users, batch=b, binds=what_binds(state, ttft_budget, tpot_budget, limit),
                      result=compute(state.replace(batch=max(b, 1))),
                      gpus=math.ceil(users / b) * state.tensor_parallel if b else None)


@dataclass(frozen=True)
class ContinuousPlan:
    """The steady state of continuous batching (see :func:`continuous_plan`); seconds, bytes per GPU, tokens/s.

    ``sequences`` (C) are in flight on each group of ``tensor_parallel`` GPUs (a replica); ``gpus`` =
    ``replicas × tensor_parallel``. ``tpot`` = ``steady_state_tpot(decode_step, C, prefill_time, n - 1)``;
    ``ttft`` = ``prefill_time + decode_step`` (no queueing: :func:`simulate_plan` adds it);
    ``prefill_share`` is the fraction of each GPU's time spent on prefill. When not even one sequence passes,
    ``sequences`` is 0, ``replicas``/``gpus`` are ``None`` and the numbers are those of one sequence.
    """

    state: DashboardState
    users: int
    sequences: int
    replicas: int | None
    gpus: int | None
    binds: str
    decode_step: float
    prefill_time: float
    tpot: float
    ttft: float
    prefill_share: float
    tokens_per_s_per_gpu: float
    memory_needed: float
    memory_limit: float

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "state"}


def continuous_plan(state: DashboardState, users: int, tpot_budget: float = 0.05, ttft_budget: float | None = None,
                    kv_memory_fraction: float = 0.9, max_sequences: int = 4096) -> ContinuousPlan:
    """Plan ``users`` sequences generating at once on a continuously batching server (``state.batch`` is ignored).

    Each replica (``tensor_parallel`` GPUs) keeps ``C`` sequences in flight; in the steady state each
    sequence's ``n - 1`` decode steps carry the ``C`` prefills of the sequences that replace finished ones:
    ``TPOT = t_decode(C) + C · t_prefill / (n - 1)`` (``steady_state_tpot``), with ``t_decode(C)`` =
    ``compute(state with batch C).tpot`` and ``t_prefill`` = ``compute(state with batch 1).ttft``, collectives
    included. Memory per GPU: its share of the weights, the cached prefix once and ``C`` caches of the uncached
    tokens at their final length (windowed layers: their window) must fit in ``kv_memory_fraction`` of its
    capacity. ``C`` is the largest
    within ``tpot_budget`` (and ``ttft_budget`` when given) and memory, at most ``max_sequences``; on one GPU
    this is :func:`course_lib.core.serving.continuous_batching_plan`. ``binds`` names what ``C + 1`` breaks.
    """
    state = _state(state)
    users = require_count("users", users, minimum=1)
    n = state.new_tokens
    if n < 2:
        raise ValueError(f"new_tokens must be at least 2 for a steady state of decode steps, got {n}")
    tpot_budget = require_positive("tpot_budget", tpot_budget)
    ttft_budget = None if ttft_budget is None else require_positive("ttft_budget", ttft_budget)
    frac = require_fraction("kv_memory_fraction", kv_memory_fraction)
    cap_c = min(require_count("max_sequences", max_sequences, minimum=1, maximum=10**6), _largest_batch(state))
    one = compute(state.replace(batch=1))
    if one.memory_available is None:
        raise ValueError(f"hardware {one.hardware.name!r} has no memory capacity: the sequences that fit are unknown")
    t_pf = one.ttft
    m, e = one.estimate.model, one.estimate
    per_gpu = 1 if one.kv_replicated else state.tensor_parallel
    kv_tok = m.kv_bytes_per_token(e.kv_precision) / per_gpu
    k, P = state.cached_prefix_tokens, state.prompt_tokens
    limit = frac * one.memory_available

    # windowed layers (sliding_window, Gemma 2/3's and gpt-oss's local layers) hold only their window
    prefix_kv, per_seq = kv_tok * m.attended_tokens(k), kv_tok * m.attended_tokens(P + n - k)

    def memory(c):
        return one.weights_per_gpu + prefix_kv + c * per_seq

    best, binds, c, (t_dec, tpot, ttft) = steady_state_search(
        lambda c: compute(state.replace(batch=c)).tpot, memory, t_pf, n, limit, tpot_budget, ttft_budget, cap_c)
    replicas = math.ceil(users / best) if best else None
    return ContinuousPlan(state=state.replace(batch=c), users=users, sequences=best, replicas=replicas,
                          gpus=None if replicas is None else replicas * state.tensor_parallel, binds=binds,
                          decode_step=t_dec, prefill_time=t_pf, tpot=tpot, ttft=ttft,
                          prefill_share=c * t_pf / ((n - 1) * t_dec + c * t_pf),
                          tokens_per_s_per_gpu=c * n / ((n - 1) * tpot) / state.tensor_parallel,
                          memory_needed=memory(c), memory_limit=limit)


def simulate_plan(plan: ContinuousPlan, requests: int | None = None, seed: int = 0, *, token_budget: int = 2048,
                  chunked_prefill: bool = True, max_batch: int | None = None, kv_memory_fraction: float = 0.9,
                  gpus: int | None = None, think_time: float = 0.0):
    """Simulate one GPU of a one-GPU ``plan`` at its planned concurrency: :func:`course_lib.core.serving.simulate`.

    The ``users`` of the plan generate at once, spread over its ``gpus`` (default: the plan's); each GPU serves
    ``ceil(users / gpus)`` of them in a closed loop: a user sends its next request as soon as (after
    ``think_time`` seconds) its answer ends, as a benchmark's ``--max-concurrency``. The first request of every
    user (the opening burst) is the warm-up and is left out, and so are requests still running once the last one
    was sent; ``requests`` (default: 8 per user, at least 1,000) makes the run long enough for a steady state,
    and the result says how many requests its percentiles rest on (``summary()["measured"]``). ``max_batch``
    defaults to the plan's ``sequences``. The simulator serves from one device: plans with
    ``tensor_parallel > 1`` (or "this-machine") are refused with the reason.
    """
    from course_lib.core import serving

    if not isinstance(plan, ContinuousPlan):
        raise TypeError(f"plan must be a ContinuousPlan (from continuous_plan), got {type(plan).__name__}")
    s = plan.state
    if s.tensor_parallel > 1 or s.hardware == THIS_MACHINE:
        raise ValueError("simulate_plan simulates one catalog GPU: the serving simulator does not model tensor "
                         f"parallelism or a measured machine (this plan: {describe(s)})")
    if plan.gpus is None:
        raise ValueError("the plan serves nobody (not even one sequence meets its budgets): nothing to simulate")
    n_gpus = plan.gpus if gpus is None else require_count("gpus", gpus, minimum=1, maximum=10**6)
    users = math.ceil(plan.users / n_gpus)                    # sequences generating at once on each GPU
    if requests is None:
        requests = max(1000, 8 * users)
    return serving.simulate(s.model, s.hardware, None, s.prompt_tokens, s.new_tokens, requests=requests, seed=seed,
                            users=users, think_time=think_time, precision=s.precision, kv_precision=s.kv_precision,
                            cached_prefix_tokens=s.cached_prefix_tokens,
                            max_batch=plan.sequences if max_batch is None else max_batch,
                            token_budget=token_budget, chunked_prefill=chunked_prefill,
                            kv_memory_fraction=kv_memory_fraction, compute_efficiency=s.compute_efficiency,
                            bandwidth_efficiency=s.bandwidth_efficiency)


# --------------------------------------------------------------------------------------------------
# A plan sized on its simulated p99, with a spare; what it costs per token
# --------------------------------------------------------------------------------------------------
__all__ += ["SizedPlan", "size_plan", "PlanCost", "plan_cost", "deployment_examples"]


@dataclass(frozen=True)
class SizedPlan:
    """A plan sized on simulated percentiles (see :func:`size_plan`); seconds, tokens/s.

    ``serving_gpus`` is the fewest GPUs (from the steady state's ``plan.gpus`` up) whose simulated p99 TTFT and
    p99 TPOT at ``ceil(users / serving_gpus)`` users per GPU meet the budgets; ``gpus`` adds ``spare`` GPUs (N+1:
    one may fail, or be drained for an upgrade, and the rest still meet the budgets). ``users_per_gpu / sequences``
    is how close each GPU runs to the steady state's limit ``C`` (``headroom`` = 1 - that). ``tried`` holds
    ``(gpus, summary)`` of every count simulated; ``summary`` is the one at ``serving_gpus``.
    """

    plan: ContinuousPlan
    ttft_budget: float
    tpot_budget: float
    serving_gpus: int | None
    spare: int
    gpus: int | None
    users_per_gpu: int | None
    headroom: float | None
    summary: dict | None
    tried: tuple

    @property
    def tokens_per_s(self) -> float | None:
        """Output tokens/s of the serving GPUs together in the steady window (the spares serve nobody)."""
        return None if self.summary is None else self.summary["steady_throughput"] * self.serving_gpus


def size_plan(plan: ContinuousPlan, ttft_budget: float, tpot_budget: float, *, spare: int = 1,
              requests: int | None = None, seed: int = 0, max_extra: int = 8) -> SizedPlan:
    """Size ``plan`` on its simulated p99: from ``plan.gpus`` up, the first count of GPUs whose closed-loop
    simulation (:func:`simulate_plan`) keeps the p99 TTFT within ``ttft_budget`` and the p99 TPOT within
    ``tpot_budget`` (seconds), plus ``spare`` GPUs. At most ``max_extra`` GPUs beyond the plan's are tried;
    ``serving_gpus`` is ``None`` when none of them passes."""
    if not isinstance(plan, ContinuousPlan):
        raise TypeError(f"plan must be a ContinuousPlan (from continuous_plan), got {type(plan).__name__}")
    ttft_budget = require_positive("ttft_budget", ttft_budget)
    tpot_budget = require_positive("tpot_budget", tpot_budget)
    spare = require_count("spare", spare, maximum=10**6)
    max_extra = require_count("max_extra", max_extra, maximum=1000)
    if plan.gpus is None:
        raise ValueError("the plan serves nobody (not even one sequence meets its budgets): nothing to size")
    tried = []
    for n in range(plan.gpus, plan.gpus + max_extra + 1):
        summ = simulate_plan(plan, requests=requests, seed=seed, gpus=n).summary()
        tried.append((n, summ))
        if summ["ttft_p99"] <= ttft_budget and (summ["tpot_p99"] is None or summ["tpot_p99"] <= tpot_budget):
            users = math.ceil(plan.users / n)
            return SizedPlan(plan, ttft_budget, tpot_budget, n, spare, n + spare, users,
                             1 - users / plan.sequences, summ, tuple(tried))
    return SizedPlan(plan, ttft_budget, tpot_budget, None, spare, None, None, None, None, tuple(tried))


def deployment_examples() -> dict:
    """``course_lib/data/deployment_examples.json`` (a fresh copy): an example GPU-hour price and board powers,
    each with its source. Examples, not the market: pass your own price to :func:`plan_cost`."""
    from course_lib.core.data import load_catalog
    return load_catalog("deployment_examples", copy=True)


@dataclass(frozen=True)
class PlanCost:
    """What a deployment's tokens cost: ``gpus`` GPUs (spares included) delivering ``tokens_per_s`` output tokens/s.

    ``per_million_tokens`` in the currency of ``gpu_hour_price`` (generated ``cost_per_million_tokens``);
    ``joules_per_token`` at ``board_power`` watts per GPU (generated ``energy_per_token``; the board power is an
    upper bound of the draw, and the host, network and cooling are left out).
    """

    gpus: int
    tokens_per_s: float
    gpu_hour_price: float
    per_million_tokens: float
    board_power: float | None
    joules_per_token: float | None


def plan_cost(gpus: int, tokens_per_s: float, gpu_hour_price: float, board_power: float | None = None) -> PlanCost:
    """Price ``tokens_per_s`` output tokens/s on ``gpus`` GPUs at ``gpu_hour_price`` per GPU-hour (your price: the
    course holds one sourced example, :func:`deployment_examples`), and its energy at ``board_power`` watts."""
    n = require_count("gpus", gpus, minimum=1, maximum=10**6)
    rate = require_positive("tokens_per_s", tokens_per_s)
    price = require_positive("gpu_hour_price", gpu_hour_price)
    power = None if board_power is None else require_positive("board_power", board_power)
    return PlanCost(gpus=n, tokens_per_s=rate, gpu_hour_price=price,
                    per_million_tokens=g.cost_per_million_tokens(price, n, rate), board_power=power,
                    joules_per_token=None if power is None else g.energy_per_token(power, n, rate))
