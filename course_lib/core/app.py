"""The ``make app`` deployment planner's plain functions: what each output of the no-code app says.

Lessons: 09

The app (``app/dashboard.ipynb``, served by Voila; the widget is ``course_lib.lessons.widgets.capstone``)
shows a deployment setting to someone who writes no code, so every reading is in words and every
number comes from the core:

* :func:`parse_link_bandwidth` reads the "Link bandwidth" field. A bare number is read in the unit the
  field names (:data:`LINK_UNIT`, GB/s per GPU and direction): ``"450"`` is 450 GB/s, never 450 B/s.
  A figure with a unit (``"450 GB/s"``, ``"3.6 Tbit/s"``) is read with :func:`course_lib.core.units.parse_bandwidth`.
* :func:`tpot_text`, :func:`ttft_text`, :func:`tps_text`, :func:`memory_text`: the dashboard's labels for a
  :class:`~course_lib.core.capstone.DashboardState` (``"n/a"``, :data:`NOT_AVAILABLE`, when it cannot be priced).
* :func:`reading` prices a setting with :func:`course_lib.core.capstone.compute` and gives every text the
  dashboard and the app show (:class:`Reading`, the one view model of both); it says in words
  what is missing when it cannot: the link bandwidth (tensor parallelism over several GPUs), a
  measurement ("this machine"), or a device's FLOP/s. A device without a published dense FLOP/s (the
  Apple chips of the catalog) still gets its **decode floor**: the estimator's time per output token
  with the compute term left out (the device given a peak so large that its compute term is negligible,
  :data:`FLOOR_PEAK`, as :mod:`course_lib.core.compare` does for the same devices). Decode is
  memory-bound, and compute can only add time, so the floor is a true lower bound; the prefill, which
  compute sets, is left unpriced. Memory is "per GPU" on a GPU and "of the device's memory" elsewhere
  (a CPU's DRAM, a Mac's unified memory). When the all-reduces of a tensor-parallel split cost more than
  the GPUs' own work, the reading warns (a slow link, or one typed in the wrong unit) instead of
  showing a green "fits" under it.
* The "Engine" control (``DashboardState.engine``) prices TTFT and TPOT with an engine's profile fitted to
  published measurements (:mod:`course_lib.core.forecast`) instead of the floor; ``Reading.engine_text`` says
  which it is and, for an engine, how far its times sit above the floor's and where its decode step's time goes
  (:func:`course_lib.core.forecast.decode_step_terms`). The serving simulator prices its steps at the floor, so
  with an engine the serving table keeps the steady-state plan and says why it shows no simulated p99.
* :func:`machine_text` lists the ceilings measured on "this machine".
* :func:`serving_reading` plans the setting for a request rate with continuous batching:
  the steady state of :func:`course_lib.core.capstone.continuous_plan` gives the sequences in flight
  per copy of the model, ``C``; by Little's law (``littles_law``) ``rate x e2e`` requests are in flight
  at once, with ``e2e = TTFT + (n - 1) x TPOT`` of the steady state, so the rate needs
  ``ceil(rate x e2e / C)`` copies (``tensor_parallel`` GPUs each).
  :func:`course_lib.core.serving.simulate` then runs one GPU's share of the traffic (Poisson arrivals at
  ``rate / GPUs``) for at most :data:`SIM_MAX_REQUESTS` requests and :data:`SIM_MAX_WORK` sequence-steps
  (so that the app answers within a second) and gives the p99 of TTFT and TPOT against the targets.
  The naive baseline is lesson 09's static plan: batches of ``best_batch(state, TTFT target, TPOT
  target)`` prefilled together, each request in the system for the batch's ``total`` seconds, so
  ``ceil(rate x total / batch)`` copies, queueing ignored.

Nothing here imports torch, ipywidgets or matplotlib.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from course_lib.core.numeric import raw as g
from course_lib.core import serving
from course_lib.core.capstone import (THIS_MACHINE, ContinuousPlan, DashboardResult, DashboardState, PlanCost,
                                      best_batch, compute, continuous_plan, deployment_examples, plan_cost,
                                      resolve_hardware)
from course_lib.core.hardware import HardwareSpec, get_hardware
from course_lib.core.precision import get_precision
from course_lib.core.units import Quantity, format_bandwidth, format_bytes, format_flop_rate, format_time, \
    parse_bandwidth, parse_time
from course_lib.core.validation import MAX_QUANTITY, require_count, require_positive

__all__ = ["NOT_AVAILABLE", "tpot_text", "ttft_text", "tps_text", "memory_text",
           "LINK_UNIT", "UNPRICED", "FLOOR_PEAK", "CONTROL_LABELS", "SIM_MAX_REQUESTS", "SIM_MAX_WORK",
           "SIM_TOKEN_BUDGET", "SIM_STEADY_FACTOR", "device_word", "parse_link_bandwidth", "parse_time_field",
           "link_hint",
           "is_gpu", "memory_words", "Reading", "reading", "state_reading", "machine_text", "ServingReading",
           "FLOOR_TEXT", "engine_text",
           "serving_reading"]

#: What an output shows when the setting cannot be priced (no published peak FLOP/s, machine not measured).
NOT_AVAILABLE = "n/a"


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
    return NOT_AVAILABLE if r is None else _result_tps_text(r)


def _result_tps_text(r: DashboardResult) -> str:
    return f"{_rate(r.tps)} per user, {_rate(r.tps_aggregate)} in all"


def memory_text(state: DashboardState) -> str:
    """``"<needed> of <available> per GPU: fits"`` / ``"... does NOT fit"`` (or ``"n/a"``)."""
    r, _ = _try(state)
    return NOT_AVAILABLE if r is None else _result_memory_text(r)


def _result_memory_text(r: DashboardResult) -> str:
    if r.memory_available is None:
        return f"{format_bytes(r.memory_needed)} per GPU (capacity unknown)"
    verdict = "fits" if r.fits else "does NOT fit"
    return f"{format_bytes(r.memory_needed)} of {format_bytes(r.memory_available)} per GPU: {verdict}"


def _bounds_text(state: DashboardState, r: DashboardResult) -> str:
    bounds = f"prefill {r.prefill_bound}-bound, decode {r.decode_bound}-bound"
    if state.tensor_parallel > 1:
        bounds += (f"; all-reduces add {format_time(r.allreduce_prefill)} to TTFT and "
                   f"{format_time(r.allreduce_decode)} to each decode step")
        if state.expert_parallel:
            bounds += (f"; expert all-to-alls add {format_time(r.alltoall_prefill)} and "
                       f"{format_time(r.alltoall_decode)}")
        if r.kv_replicated:
            bounds += f"; every GPU reads the whole latent KV cache (+{format_time(r.kv_replicated_decode)} per step)"
    return bounds


def _warnings(state: DashboardState, r: DashboardResult) -> list[str]:
    warnings = []
    if r.fits is False:
        warnings.append(f"Does not fit: {format_bytes(r.memory_needed)} needed per GPU "
                        f"({format_bytes(r.weights_per_gpu)} weights + {format_bytes(r.kv_per_gpu)} KV cache), "
                        f"{format_bytes(r.memory_available)} available.")
    model = r.estimate.model
    if state.prompt_tokens + state.new_tokens > model.max_positions:
        warnings.append(f"{model.name} was trained for at most {model.max_positions:,} positions: "
                        f"prompt + answer is longer, the numbers are arithmetic only.")
    return warnings


#: The unit of the "Link bandwidth" field: a bare number typed there is this many GB/s (per GPU, per direction).
LINK_UNIT = "GB/s"

#: The app's label of each DashboardState field (errors name the control, not the Python parameter).
CONTROL_LABELS = {
    "cached_prefix_tokens": "Cached prefix", "prompt_tokens": "Prompt tokens", "new_tokens": "New tokens",
    "batch": "Batch", "tensor_parallel": "GPUs (TP)", "interconnect_bandwidth": "Link bandwidth",
    "compute_efficiency": "Compute eff.", "bandwidth_efficiency": "Bandwidth eff.", "kv_precision": "KV cache",
    "precision": "Weights", "hardware": "Hardware", "model": "Model", "engine": "Engine",
    "arrival_rate": "Requests/s", "ttft_target": "p99 TTFT target", "tpot_target": "p99 TPOT target",
}

#: The peak FLOP/s a device without a published one is given for its decode floor: so large that the compute
#: term is negligible (some 1e15 times below the memory term), with room below ``validation.MAX_QUANTITY`` for
#: the tensor-parallel scaling (G x the peak).
FLOOR_PEAK = MAX_QUANTITY / 1e6

#: The most requests, and sequence-steps (one per output token or prompt chunk), one app simulation runs.
SIM_MAX_REQUESTS = 300
SIM_MAX_WORK = 50_000
#: How many times the requests in flight per copy (at steady state) a simulation must run to be representative.
SIM_STEADY_FACTOR = 5
#: The simulated scheduler's token budget per step (``serving.simulate``'s default, Sarathi-Serve's order).
SIM_TOKEN_BUDGET = 2048


def _in_words(message: str) -> str:
    """A core error with each Python parameter name (``cached_prefix_tokens``, ...) replaced by the app's control
    label in quotes; one-word names (batch, model, ...) read as plain words and are left as they are."""
    for name in sorted((n for n in CONTROL_LABELS if "_" in n), key=len, reverse=True):
        message = re.sub(rf"\b{name}\b", f"'{CONTROL_LABELS[name]}'", message)
    return message


def _field_text(s: str, unit: str) -> tuple[str, str]:
    """(the text to parse, the text to quote in an error) of a stripped field: a bare number is read in ``unit``;
    the quote is cut at 40 characters."""
    try:
        float(s.replace(",", ""))
        parsed = f"{s} {unit}"
    except ValueError:
        parsed = s
    return parsed, (s if len(s) <= 40 else s[:40] + "...")


def parse_link_bandwidth(text) -> float | None:
    """Bytes/s from the link field: ``""`` -> ``None``; a bare number is :data:`LINK_UNIT` (``"450"`` -> 4.5e11).

    Raises one ValueError that says what to type when the text is neither a number nor a bandwidth.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"text must be the link field's string, got {type(text).__name__}")
    s = text.strip()
    if not s:
        return None
    parsed, shown = _field_text(s, LINK_UNIT)
    try:
        value = parse_bandwidth(parsed)
    except ValueError:
        raise ValueError(f"Link bandwidth: could not read {shown!r}. Type the bandwidth of each GPU's link in one "
                         f"direction, as a number of {LINK_UNIT} (e.g. 450) or with its unit (e.g. '450 GB/s', "
                         f"'3.6 Tbit/s').") from None
    try:  # read, but not a bandwidth a link can have: say so, not "could not read"
        return require_positive("link bandwidth", value)
    except ValueError:
        raise ValueError(f"Link bandwidth: {shown!r} reads as {format_bandwidth(value)}; a link needs a bandwidth "
                         f"above zero (e.g. 450, read as {LINK_UNIT}).") from None


def parse_time_field(text, unit: str, label: str) -> float:
    """Seconds from a time field of the app: a bare number is read in ``unit`` (``"50"`` with ``"ms"`` -> 0.05),
    ``"50 ms"`` or ``"1 s"`` with :func:`course_lib.core.units.parse_time`. One ValueError naming ``label`` else."""
    if not isinstance(text, str):
        raise TypeError(f"text must be the {label} field's string, got {type(text).__name__}")
    if not isinstance(unit, str) or not isinstance(label, str):
        raise TypeError("unit and label must be strings")
    s = text.strip()
    parsed, shown = _field_text(s, unit)
    try:
        value = parse_time(parsed)
    except ValueError:
        raise ValueError(f"{label}: could not read {shown!r}. Type a time above zero, as a number of {unit} or with "
                         f"its unit (e.g. '50 ms', '1 s').") from None
    try:  # read, but not a target a time can have
        return require_positive(label, value)
    except ValueError:
        raise ValueError(f"{label}: {shown!r} reads as {format_time(value) if value else '0 s'}; type a time "
                         f"above zero (a bare number is {unit}).") from None


def link_hint(hardware, machine: HardwareSpec | None = None) -> str:
    """A sentence on the GPU-to-GPU link the catalog lists for ``hardware`` (its figure per direction), or on
    its absence; '' for an unknown device (or None)."""
    if hardware is not None and not isinstance(hardware, (str, HardwareSpec)):
        raise TypeError(f"hardware must be a device name or a HardwareSpec, got {type(hardware).__name__}")
    if machine is not None and not isinstance(machine, HardwareSpec):
        raise TypeError(f"machine must be a HardwareSpec or None, got {type(machine).__name__}")
    if hardware is None:
        return ""
    if hardware == THIS_MACHINE:
        hw = machine
    else:
        try:
            hw = get_hardware(hardware)
        except (ValueError, TypeError):
            hw = None
    if hw is None:
        return ""
    name = hw.display or hw.name
    link = hw.scale_up
    if link is None:
        pcie = hw.interconnects.get("pcie")
        if pcie is None:
            return f"The catalog lists no interconnect for {name}: type what your system has."
        return (f"The catalog lists no GPU-to-GPU link for {name}: its GPUs talk over {pcie.name} "
                f"({format_bandwidth(pcie.per_direction_bandwidth)} per direction); type what your system has.")
    text = (f"The catalog's figure for {name}: {link.name}, {format_bandwidth(link.per_direction_bandwidth)} per "
            f"direction (its datasheet's {format_bandwidth(link.bidirectional_bandwidth)} counts both directions "
            f"together): type {format_bandwidth(link.per_direction_bandwidth, unit=LINK_UNIT)!r} to use it.")
    if link.per_link_per_direction_bandwidth < link.per_direction_bandwidth and "point to point" in link.topology:
        text += (f" Its links are point to point, though: a ring all-reduce sends to one neighbour over one "
                 f"link, {format_bandwidth(link.per_link_per_direction_bandwidth)} per direction.")
    return text


def is_gpu(hw: HardwareSpec) -> bool:
    """False for a CPU's DRAM or unified (LPDDR) memory; True otherwise (a GPU's HBM/GDDR, or unknown)."""
    if not isinstance(hw, HardwareSpec):
        raise TypeError(f"hw must be a HardwareSpec (get_hardware(...)), got {type(hw).__name__}")
    mt = hw.memory_type.lower()
    return not ("dram" in mt or "unified" in mt or "lpddr" in mt)


def device_word(hw: HardwareSpec) -> str:
    """``"GPU"`` on a GPU, ``"device"`` on a CPU or a unified-memory chip (a CPU is no GPU)."""
    return "GPU" if is_gpu(hw) else "device"


def memory_words(hw: HardwareSpec) -> str:
    """``"per GPU"`` on a GPU, ``"of the device's memory"`` on a CPU or a unified-memory chip."""
    return "per GPU" if is_gpu(hw) else "of the device's memory"


def _memory_text(r: DashboardResult, hw: HardwareSpec, catalog_text: str) -> str:
    if is_gpu(hw):
        return catalog_text
    if r.memory_available is None:
        return f"{format_bytes(r.memory_needed)} (the device's memory size is unknown)"
    verdict = "fits" if r.fits else "does NOT fit"
    return f"{format_bytes(r.memory_needed)} of {format_bytes(r.memory_available)} {memory_words(hw)}: {verdict}"


def _device_name(state: DashboardState) -> str:
    if state.hardware == THIS_MACHINE:
        return state.machine.display if state.machine is not None and state.machine.display else "this machine"
    hw = get_hardware(state.hardware)
    return hw.display or hw.name


@dataclass(frozen=True)
class Reading:
    """Every text the app shows for one setting.

    ``state`` is ``None`` when the controls do not make a setting (the reason is ``problem``);
    ``priced`` is True when TTFT and TPOT are both priced (the figure can be drawn); ``floor`` is True
    when only the decode floor is (a device without a published FLOP/s). ``problem`` says in words what
    is missing; ``warnings`` are shown in red, and the status is green only when both are empty.
    ``engine_text`` says what prices the times: the floor, or an engine's profile (:func:`engine_text`).
    """

    state: DashboardState | None
    result: DashboardResult | None
    priced: bool
    floor: bool
    ttft_text: str
    tpot_text: str
    total_text: str
    tps_text: str
    memory_text: str
    bounds_text: str
    problem: str | None
    warnings: tuple[str, ...]
    engine_text: str = ""

    @property
    def green(self) -> bool:
        return self.priced and self.problem is None and not self.warnings


#: what the secondary outputs (total, throughput, memory, bounds) show while TTFT and TPOT say what is missing
UNPRICED = "\u2014"


def _unpriced(state, problem, word=None) -> Reading:
    """Nothing priced: TTFT and TPOT show ``word`` (what is missing, in two or three words; ``n/a`` for other
    problems), the other outputs a dash; ``problem`` says the rest."""
    if word is None:
        return Reading(state, None, False, False, *(6 * [NOT_AVAILABLE]), problem, ())
    return Reading(state, None, False, False, word, word, *(4 * [UNPRICED]), problem, ())


def reading(values: dict, machine: HardwareSpec | None = None) -> Reading:
    """The app's reading for the controls' ``values`` (DashboardState fields; the link as the field's text)."""
    if not isinstance(values, dict):
        raise TypeError(f"values must be a dict of the controls' values, got {type(values).__name__}")
    if machine is not None and not isinstance(machine, HardwareSpec):
        raise TypeError(f"machine must be a HardwareSpec (the measured machine) or None, got {type(machine).__name__}")
    values = dict(values)
    tp = values.get("tensor_parallel", 1)
    link_note = []
    try:
        values["interconnect_bandwidth"] = parse_link_bandwidth(values.get("interconnect_bandwidth"))
    except ValueError as exc:
        if isinstance(tp, int) and tp > 1:
            return _unpriced(None, str(exc))
        # one GPU uses no link: price the setting, and say the field's text was set aside
        values["interconnect_bandwidth"] = None
        link_note.append(f"{exc} It is not used with one GPU (TP = 1), so the readings above ignore it.")
    if values.get("interconnect_bandwidth") is None and isinstance(tp, int) and tp > 1:
        return _unpriced(None, (
            f"Missing: the link bandwidth. Splitting the model over {tp} GPUs adds two all-reduces per layer, "
            f"whose time depends on the link between the GPUs. Type it in 'Link bandwidth' ({LINK_UNIT} per GPU, "
            f"in one direction). {link_hint(values.get('hardware'), machine)}"), word="needs the link bandwidth")
    if values.get("hardware") == THIS_MACHINE and machine is None:
        return _unpriced(None, "Missing: a measurement of this machine. Press 'Measure this machine' to time its "
                               "memory copy, matrix multiply and GEMV (it takes about a minute), then read the "
                               "numbers here.", word="measure first")
    try:
        state = DashboardState(machine=machine, **values)
    except (ValueError, TypeError) as exc:
        return _unpriced(None, _in_words(str(exc)))
    out = state_reading(state)
    return replace(out, warnings=out.warnings + tuple(link_note)) if link_note else out


def state_reading(state: DashboardState) -> Reading:
    """Every text the dashboard shows for ``state`` (a :class:`~course_lib.core.capstone.DashboardState`)."""
    if not isinstance(state, DashboardState):
        raise TypeError(f"state must be a DashboardState, got {type(state).__name__}")
    r, error = _try(state)
    hw = resolve_hardware(state) if state.hardware != THIS_MACHINE or state.machine is not None else None
    if hw is None:
        return _unpriced(state, _in_words(error))
    if error is None:
        warnings = _warnings(state, r)
        dtype = get_precision(state.precision).compute_dtype
        if hw.rate_is_effective(dtype):
            warnings.append(
                f"The compute speed of {_device_name(state)} is an effective rate "
                f"({format_flop_rate(hw.compute_rate(dtype))} {dtype}), derived from a published measurement, not a "
                f"datasheet peak: its maker publishes no dense {dtype} FLOP/s. The time to first token is as good "
                f"as that measurement; the decode time rests on the datasheet bandwidth.")
        link_bound = r.allreduce_decode > r.estimate.tpot or r.allreduce_prefill > r.estimate.ttft
        if state.tensor_parallel > 1 and link_bound:
            # the all-reduces' fixed latency: their time with a link too fast to matter
            fixed = compute(state.replace(interconnect_bandwidth=FLOOR_PEAK)).allreduce_decode
            share = (f"the all-reduces take {format_time(r.allreduce_decode)} per decode step against "
                     f"{format_time(r.estimate.tpot)} of the GPUs' own work (and {format_time(r.allreduce_prefill)} "
                     f"of the TTFT)")
            if fixed >= r.allreduce_decode / 2:
                warnings.append(
                    f"The all-reduces dominate: {share}. Their fixed latency binds ({format_time(fixed)} of each "
                    f"step at any link bandwidth), not the link's {format_bandwidth(state.interconnect_bandwidth)}: "
                    "a faster link would not help; fewer GPUs (TP) would, and a larger batch spreads it over more "
                    "tokens.")
            else:
                warnings.append(
                    f"The link dominates: {share}. Check the link bandwidth "
                    f"({format_bandwidth(state.interconnect_bandwidth)} per GPU and direction): a bare number is "
                    f"read as {LINK_UNIT}.")
        return Reading(state, r, True, False, format_time(r.ttft), format_time(r.tpot), format_time(r.total),
                       _result_tps_text(r), _memory_text(r, hw, _result_memory_text(r)), _bounds_text(state, r),
                       None, tuple(warnings), engine_text(r))
    dtype = get_precision(state.precision).compute_dtype
    if dtype in hw.peak_flops:
        return _unpriced(state, _in_words(error))
    # no published dense FLOP/s: the decode floor, the memory term alone (compute can only add time)
    floor_hw = hw.with_peak(dtype, FLOOR_PEAK)
    try:
        r = compute(state.replace(hardware=THIS_MACHINE, machine=floor_hw))
    except ValueError as exc:
        return _unpriced(state, _in_words(str(exc)))
    device = _device_name(state)
    problem = (f"Missing: the compute speed of {device}. Its maker publishes no dense {dtype} FLOP/s, so the prefill "
               f"(the time to first token), which compute sets, cannot be priced. Shown instead: the decode floor, "
               f"the time to read the weights and the KV cache once per output token at the datasheet bandwidth "
               f"({format_bandwidth(hw.bandwidth)}). Decode is memory-bound and compute can only add time, so real "
               f"decoding is no faster. On the computer running this app, 'Measure this machine' times its "
               f"compute too.")
    memory = _memory_text(r, hw, _result_memory_text(r))
    warnings = ()
    if r.fits is False:
        warnings += (f"Does not fit: {format_bytes(r.memory_needed)} needed, {format_bytes(r.memory_available)} "
                     f"available.",)
    rate = Quantity(r.decode_tps, "number").format()
    return Reading(state, r, False, True, "unknown (no published FLOP/s)", f"at least {format_time(r.tpot)}",
                   "unknown (needs the TTFT)", f"at most {rate} tokens/s per user while decoding", memory,
                   "decode memory-bound (the floor); prefill not priced", problem, warnings)


#: what the engine line says with no engine chosen
FLOOR_TEXT = ("The floor: what the hardware allows (bytes over bandwidth, FLOPs over the peak) at the efficiencies "
              "set, with none of an engine's own costs. Pick an engine to forecast what it delivers here.")


def engine_text(r: DashboardResult) -> str:
    """What prices the times of ``r``: the floor (:data:`FLOOR_TEXT`), or an engine's profile: its prefill and
    decode step against the floor's, and where its last decode step's time goes."""
    if not isinstance(r, DashboardResult):
        raise TypeError(f"r must be a DashboardResult (from capstone.compute), got {type(r).__name__}")
    e = r.estimate
    if e.engine is None:
        return FLOOR_TEXT
    from course_lib.core.forecast import decode_step_terms, device_class, get_profile

    prof = get_profile(e.engine)
    t = decode_step_terms(e)
    step = t["fixed"] + t["weights"] + t["matmuls"] + t["attention"]
    cls = device_class(e.hardware)
    parts = ", ".join(f"{label} {format_time(t[key])}" for key, label in (
        ("fixed", "fixed costs (per step, layer and token)"), ("weights", "weight reads"),
        ("matmuls", "matrix products"), ("attention", "attention")))
    memory = {"hbm": "HBM", "gddr": "GDDR", "unified": "unified", "cpu": "CPU"}[cls]
    return (f"The {e.engine} profile, fitted to {prof.points:,} published measurements from {len(prof.sources)} "
            f"source{'s' if len(prof.sources) != 1 else ''}: prefill {format_time(e.ttft)} against the floor's "
            f"{format_time(e.floor_ttft)} ({e.ttft / e.floor_ttft:.2f}x), mean decode step {format_time(e.tpot)} "
            f"against {format_time(e.floor_tpot)} ({e.tpot / e.floor_tpot:.2f}x). Its last decode step, "
            f"{format_time(step)}: {parts}; the weights stream at {prof.efficiency('memory', cls):.0%} of the "
            f"bandwidth ({memory} memory).")


def machine_text(spec: HardwareSpec | None) -> str:
    """What was measured on "this machine", in words ('' before any measurement)."""
    if spec is None:
        return ""
    if not isinstance(spec, HardwareSpec):
        raise TypeError(f"spec must be a HardwareSpec (from bench.this_machine()), got {type(spec).__name__}")
    m = spec.measured
    parts = [f"memory bandwidth {format_bandwidth(spec.bandwidth)}"
             + (f" ({m['bandwidth_from']})" if m.get("bandwidth_from") else "")]
    if m.get("copy_GBps"):
        parts.append(f"copy {format_bandwidth(m['copy_GBps'] * 1e9)}")
    for dtype, flops in sorted(spec.peak_flops.items()):
        parts.append(f"{dtype} matmul {format_flop_rate(flops)}")
    if spec.capacity is not None:
        parts.append(f"memory {format_bytes(spec.capacity)}")
    if m.get("threads"):
        parts.append(f"{m['threads']} threads")
    return f"Measured on {spec.display or spec.name}: " + ", ".join(parts) + "."


# --------------------------------------------------------------------------------------------------
# Serving a request rate: continuous batching, simulated p99, the static baseline
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServingReading:
    """The plan for ``arrival_rate`` requests/s (seconds, requests/s; see the module docstring).

    ``problem`` says in words why there is no plan (then the numbers are ``None``). ``plan`` is
    ``capstone.continuous_plan`` of the setting (``users`` = 1: ``C`` does not depend on the load);
    ``in_flight`` requests are in the system at once (Little's law), so ``replicas`` copies of the model
    (``tensor_parallel`` GPUs each) serve the rate, ``gpus`` in all;
    ``static_gpus`` is the naive static baseline. ``simulated`` is ``serving.simulate(...).summary()`` of
    one GPU's share over ``requests`` requests (``None`` with tensor parallelism, which the simulator does
    not model; ``sim_note`` says why).
    """

    arrival_rate: float
    ttft_target: float
    tpot_target: float
    chunked_prefill: bool
    problem: str | None = None
    plan: ContinuousPlan | None = None
    e2e: float | None = None
    in_flight: float | None = None
    replicas: int | None = None
    gpus: int | None = None
    requests: int = 0
    simulated: dict | None = None
    sim_note: str | None = None
    static_batch: int | None = None
    static_total: float | None = None
    static_gpus: int | None = None
    cost: PlanCost | None = None          # the continuous plan's $/M tokens and J/token (None: no price)
    price_note: str | None = None         # where the GPU-hour price and the board power come from

    @property
    def meets_targets(self) -> bool | None:
        """True when the simulated p99 TTFT and TPOT are within their targets (None: not simulated)."""
        if self.simulated is None:
            return None
        tpot = self.simulated["tpot_p99"]
        return self.simulated["ttft_p99"] <= self.ttft_target and (math.isnan(tpot) or tpot <= self.tpot_target)

    @property
    def share_rate(self) -> float | None:
        """Requests/s one copy of the model is planned to serve (the rate over the copies)."""
        return None if self.replicas is None else self.arrival_rate / self.replicas

    @property
    def representative(self) -> bool | None:
        """Whether the simulation ran long enough to say something of the steady state: at least
        :data:`SIM_STEADY_FACTOR` times the requests one copy has in flight there (Little's law). A run from an
        empty server that is shorter spends its time filling up, and its p99 may be optimistic. None: not
        simulated."""
        if self.simulated is None or self.in_flight is None or not self.replicas:
            return None
        return self.requests >= SIM_STEADY_FACTOR * self.in_flight / self.replicas

    @property
    def static_over_continuous(self) -> float | None:
        """How many times the continuous plan's GPUs the static baseline needs."""
        return None if self.gpus is None or self.static_gpus is None else self.static_gpus / self.gpus


def _cost(state: DashboardState, gpus: int, tokens_per_s: float, price) -> tuple[PlanCost | None, str | None]:
    """The plan's cost per token: the price given (per GPU-hour), else the course's sourced example for this GPU
    (said so); the board power from the same examples where they hold this GPU."""
    ex = deployment_examples()
    example = ex["gpu_hour_price"].get(state.hardware)
    power = ex["board_power_w"].get(state.hardware)
    if price is None and example is None:
        return None, "no GPU-hour price: type yours in 'GPU-hour price' for the cost per token"
    if price is None:
        price, note = example["usd_per_gpu_hour"], (f"an example price, not a quote: {example['what']}, "
                                                    f"{example['cite']}; type yours in 'GPU-hour price'")
    else:
        note = "your GPU-hour price"
    note += "" if power is None else f"; board power {power['watts']:g} W per GPU, the datasheet's maximum"
    return plan_cost(gpus, tokens_per_s, price, None if power is None else power["watts"]), note


def serving_reading(state: DashboardState, arrival_rate: float, ttft_target: float, tpot_target: float,
                    chunked_prefill: bool = True, seed: int = 0, gpu_hour_price: float | None = None) -> ServingReading:
    """Plan ``state`` for ``arrival_rate`` requests/s with p99 targets (seconds); see the module docstring.

    ``gpu_hour_price`` (per GPU-hour, any currency) prices the plan's tokens (``cost``); without it the course's
    sourced example price for the GPU is used where there is one, and ``price_note`` says so."""
    if not isinstance(state, DashboardState):
        raise TypeError(f"state must be a DashboardState, got {type(state).__name__}")
    rate = require_positive("arrival_rate", arrival_rate)
    ttft_t, tpot_t = require_positive("ttft_target", ttft_target), require_positive("tpot_target", tpot_target)
    if not isinstance(chunked_prefill, bool):
        raise TypeError(f"chunked_prefill must be True or False, got {type(chunked_prefill).__name__}")
    seed = require_count("seed", seed)
    if gpu_hour_price is not None:
        gpu_hour_price = require_positive("gpu_hour_price", gpu_hour_price)
    base = dict(arrival_rate=rate, ttft_target=ttft_t, tpot_target=tpot_t, chunked_prefill=chunked_prefill)
    if state.new_tokens < 2:
        return ServingReading(**base, problem="The serving plan needs answers of at least 2 tokens (a decode step "
                                              "after the first token): raise 'New tokens'.")
    try:
        plan = continuous_plan(state, 1, tpot_budget=tpot_t, ttft_budget=ttft_t)
    except ValueError as exc:
        return ServingReading(**base, problem=_in_words(str(exc)).replace("tpot_budget", "the p99 TPOT target"))
    if plan.sequences == 0:
        word = device_word(resolve_hardware(state))
        return ServingReading(**base, plan=plan, problem=(
            f"Not even one sequence per {word} meets the targets here ({plan.binds} breaks first: TTFT "
            f"{format_time(plan.ttft)}, TPOT {format_time(plan.tpot)} with one sequence in flight). Relax the "
            f"targets, shorten the prompt or pick a faster device or precision."))
    c, n, tp = plan.sequences, state.new_tokens, state.tensor_parallel
    e2e = g.total_latency(plan.ttft, n, plan.tpot)
    in_flight = g.littles_law(rate, e2e)              # requests in the system at once
    replicas = math.ceil(in_flight / c)
    b = best_batch(state, ttft_t, tpot_t)
    static_total = static_gpus = None
    if b:
        static_total = compute(state.replace(batch=b)).total
        static_gpus = math.ceil(g.littles_law(rate, static_total) / b) * tp
    cost, note = _cost(state, replicas * tp, rate * n, gpu_hour_price)
    out = ServingReading(**base, plan=plan, e2e=e2e, in_flight=in_flight, replicas=replicas,
                         gpus=replicas * tp, static_batch=b, static_total=static_total, static_gpus=static_gpus,
                         cost=cost, price_note=note)
    if tp > 1:
        return replace(out, sim_note="the serving simulator models one GPU per copy of the model (no tensor "
                                     "parallelism): set 'GPUs (TP)' to 1 for the simulated p99")
    if state.engine is not None:
        return replace(out, sim_note=f"the serving simulator prices its steps at the floor, not with the "
                                     f"{state.engine} profile: the plan above uses the profile; set 'Engine' to the "
                                     "floor for a simulated p99")
    per_request = n + -(-(state.prompt_tokens - state.cached_prefix_tokens) // SIM_TOKEN_BUDGET)
    requests = max(1, min(SIM_MAX_REQUESTS, SIM_MAX_WORK // per_request))
    try:
        sim = serving.simulate(state.model, resolve_hardware(state), rate / replicas, state.prompt_tokens, n,
                               requests=requests, seed=seed, precision=state.precision,
                               kv_precision=state.kv_precision, cached_prefix_tokens=state.cached_prefix_tokens,
                               max_batch=c, token_budget=SIM_TOKEN_BUDGET, chunked_prefill=chunked_prefill,
                               compute_efficiency=state.compute_efficiency,
                               bandwidth_efficiency=state.bandwidth_efficiency, max_work=SIM_MAX_WORK).summary()
    except ValueError as exc:
        return replace(out, sim_note=f"the simulation could not run: {_in_words(str(exc))}")
    return replace(out, requests=requests, simulated=sim)
