"""Predicted vs measured: every measurement the course has, next to its first-principles floor.

Lessons: 07, 08

A :class:`Comparison` is one case: a measured time (``measured_s``) beside the time the course's
estimator predicts for the same work (``predicted_s``), and their ratio

    efficiency = predicted_s / measured_s

(the fraction of the floor's speed the real system reaches: 1 means "at the floor", 0.25 means the
system took four times the floor). Three sources of cases:

* :func:`published_cases` -- the published benchmarks in ``course_lib.core.measurements.published()``:
  llama.cpp decode (tg) and prefill (pp) speeds of Llama-2-7B in f16 and q4_0 on every device the
  hardware catalog knows, and kipply's FasterTransformer decode figure. Records that cannot be
  predicted are listed, with the reason, by :func:`skipped_published`.
* :func:`h200_cases` -- the H200 / Mistral-7B measurement set (``measurements.h200()``), predicted
  either from the H200's datasheet (``ceilings="datasheet"``) or from the copy bandwidth and matmul
  rate measured on that same GPU (``ceilings="measured"``, :func:`h200_hardware`).
* :func:`machine_cases` -- the learner's own measurements (seconds per decode step at a context,
  seconds per prefill), predicted on the learner's :class:`~course_lib.core.hardware.HardwareSpec`
  (``course_lib.measure.machine.this_machine()``). Pure: it takes numbers, never times anything.

Every prediction comes from ``course_lib.estimate`` or from the functions generated from
``course_lib.core.formulas`` (``memory_time``, ``phase_time``, ...): this module adds no formula.
:func:`summary` condenses cases into the geometric-mean efficiency of each group.

Choices a record leaves open are made here, in the open (each case's ``notes`` repeats them):

* llama.cpp: the README's LLaMA 2 figures were made with ``./main ... -n 1024 --ignore-eos`` on a
  fixed prompt (the opening of *A Tale of Two Cities*) in a 512-token context; the logs print
  ``n_ctx = 512, n_predict = 1024`` and ``prompt eval time = ... / 494 tokens``. The decode speed is
  main's "eval" timing: :data:`LLAMACPP_DECODE_STEPS` one-token steps (sampling is timed separately
  and excluded). Once the 512-token window fills, main drops half of it (its context shift), so the
  cached tokens cycle between about 256 and 511: :func:`llamacpp_decode_contexts` replays that rule
  and the decode floor is one step with :data:`LLAMACPP_DECODE_CONTEXT` tokens cached, their mean
  (the floor is linear in the context, so the step at the mean context is the mean step). The
  prefill speed is "prompt eval": one :data:`LLAMACPP_PROMPT_TOKENS`-token prompt. Apple GPUs have no
  published dense FLOP/s in the catalog: their decode floor is the memory term alone (a valid floor:
  the roofline time is never below it), and their prefill cannot be predicted.
* llama.cpp's f16 prefill floors use the catalog's fp16 peak, the fp32-accumulate tensor rate. On
  GeForce cards the fp16-accumulate rate is twice that, and llama.cpp's cuBLAS f16 path of that period
  may have used fp16 accumulation (unverified for the exact build): :func:`llamacpp_fp16_accumulate_cases`
  gives those rows again with the fp16-accumulate peak from the catalog's ``accumulate`` notes.
* kipply's record names a parameter count (13e9), not a model: the floor streams all 13e9 fp16
  parameters once per token. Its prefill is skipped (the prompt length is not given).
* Pope et al.'s PaLM 540B on 64 TPU v4 is skipped: the catalog has no TPU v4 and the estimator
  does not model the 64 chips' communication.
* The H200 full decode step read the whole context (``kv_bytes_read`` = context x 131072 bytes), no
  sliding window: it is predicted with Mistral-7B's shape without its 4,096-token window.
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import asdict, dataclass
from typing import Callable, Mapping

from course_lib.core.numeric import raw as g
from course_lib.core import measurements
from course_lib.core.estimator import estimate, weight_bytes
from course_lib.core.hardware import HardwareSpec, custom_hardware, get_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.precision import bytes_per_element, get_precision
from course_lib.core.validation import MAX_QUANTITY, require_choice, require_count, require_list, require_positive

__all__ = [
    "Comparison", "METRICS", "SOURCES", "CEILINGS", "LLAMACPP_CONTEXT_WINDOW", "LLAMACPP_PROMPT_TOKENS",
    "LLAMACPP_PREDICT_TOKENS", "LLAMACPP_DECODE_STEPS", "MAX_DECODE_STEPS", "LLAMACPP_DECODE_CONTEXT",
    "llamacpp_decode_contexts",
    "fp16_accumulate_peak", "llamacpp_fp16_accumulate_cases", "fixed_cost_fit",
    "published_cases", "skipped_published", "h200_cases", "h200_hardware", "h200_model",
    "machine_cases", "all_cases", "summary", "geomean", "find", "as_dicts",
]

#: what a case times
METRICS = ("tpot", "ttft", "step", "gemv", "copy", "matmul")
#: where a case's measurement comes from
SOURCES = ("published", "h200", "this machine")
#: which ceilings an H200 prediction uses
CEILINGS = ("datasheet", "measured")
#: llama.cpp ``main``'s context window in the README's LLaMA 2 runs (``n_ctx = 512`` in their logs)
LLAMACPP_CONTEXT_WINDOW = 512
#: tokens in their fixed prompt ("prompt eval time = ... / 494 tokens" in every LLaMA 2 log)
LLAMACPP_PROMPT_TOKENS = 494
#: tokens generated (``-n 1024 --ignore-eos``)
LLAMACPP_PREDICT_TOKENS = 1024
#: the most steps :func:`llamacpp_decode_contexts` replays (it walks them one by one)
MAX_DECODE_STEPS = 10**6
#: one-token decode steps timed as "eval": the last generated token is sampled, never evaluated
LLAMACPP_DECODE_STEPS = LLAMACPP_PREDICT_TOKENS - 1


def llamacpp_decode_contexts(prompt_tokens: int = LLAMACPP_PROMPT_TOKENS,
                             predict_tokens: int = LLAMACPP_PREDICT_TOKENS,
                             context_window: int = LLAMACPP_CONTEXT_WINDOW, keep: int = 0) -> list[int]:
    """Tokens cached at each decode step of llama.cpp ``main`` (Dec 2023), its context shift included.

    After the prompt, ``main`` evaluates ``predict_tokens - 1`` tokens one at a time. Before a step
    that would overflow the window it keeps the first ``keep + 1`` tokens, drops half of the rest
    (``n_discard = (n_past - keep - 1) // 2``) and shifts the remainder down. Returns the number of
    tokens already cached when each step runs. It walks every step, so ``predict_tokens`` is at most
    :data:`MAX_DECODE_STEPS` (10**6).
    """
    prompt_tokens = require_count("prompt_tokens", prompt_tokens, minimum=1)
    predict_tokens = require_count("predict_tokens", predict_tokens, minimum=1, maximum=MAX_DECODE_STEPS)
    context_window = require_count("context_window", context_window, minimum=2)
    keep = require_count("keep", keep, minimum=0)
    if prompt_tokens > context_window:
        raise ValueError(f"prompt_tokens ({prompt_tokens}) must fit in context_window ({context_window})")
    if keep + 2 >= context_window:
        raise ValueError(f"keep must be below context_window - 2 ({context_window - 2}), got {keep}")
    n_past, out = prompt_tokens, []
    for _ in range(predict_tokens - 1):
        if n_past + 1 > context_window:
            n_past -= (n_past - keep - 1) // 2
        out.append(n_past)
        n_past += 1
    return out


#: tokens cached at the mean decode step of those runs (the mean of :func:`llamacpp_decode_contexts`)
LLAMACPP_DECODE_CONTEXT = round(sum(llamacpp_decode_contexts()) / LLAMACPP_DECODE_STEPS)

# A device without a published dense FLOP/s: the decode floor is its memory term alone. The
# estimator needs a peak, so it gets the largest one validation accepts (1e30 FLOP/s): its compute
# term is then some 1e15 times below the memory term (the result's bound is "memory").
_NO_PEAK = MAX_QUANTITY


@dataclass(frozen=True)
class Comparison:
    """One case: a measured time beside the time predicted for the same work (both in seconds).

    ``case`` is a unique id, ``source`` one of :data:`SOURCES`, ``metric`` one of :data:`METRICS`,
    ``group`` what :func:`summary` groups by (default: the source), ``record`` the record id or the
    path in the measurement data the measured number comes from, ``notes`` every assumption made.
    """

    case: str
    source: str
    model: str
    hardware: str
    metric: str
    predicted_s: float
    measured_s: float
    notes: str = ""
    group: str = ""
    record: str = ""

    def __post_init__(self):
        for name in ("case", "model", "hardware"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        object.__setattr__(self, "source", require_choice("source", self.source, SOURCES))
        object.__setattr__(self, "metric", require_choice("metric", self.metric, METRICS))
        object.__setattr__(self, "predicted_s", require_positive("predicted_s", self.predicted_s))
        object.__setattr__(self, "measured_s", require_positive("measured_s", self.measured_s))
        for name in ("notes", "group", "record"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a string, got {type(getattr(self, name)).__name__}")
        if not self.group:
            object.__setattr__(self, "group", self.source)

    @property
    def efficiency(self) -> float:
        """predicted / measured: the fraction of the floor's speed reached (1 = at the floor)."""
        return g.efficiency(self.predicted_s, self.measured_s)

    @property
    def slowdown(self) -> float:
        """measured / predicted: how many times the floor the measurement took (1 / efficiency)."""
        return self.measured_s / self.predicted_s

    @property
    def excess_s(self) -> float:
        """Seconds the measurement spent beyond the floor (negative if it beat the prediction)."""
        return self.measured_s - self.predicted_s

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(efficiency=self.efficiency, slowdown=self.slowdown, excess_s=self.excess_s)
        return d


# --------------------------------------------------------------------------------------------------
# Published measurements
# --------------------------------------------------------------------------------------------------
def _memory_only(hw: HardwareSpec, dtype: str) -> HardwareSpec:
    """``hw`` itself when it publishes a ``dtype`` peak, else a copy whose compute term is negligible."""
    return hw if dtype in hw.peak_flops else hw.with_peak(dtype, _NO_PEAK)


def _llamacpp(rec: dict) -> tuple[list[Comparison], list[tuple[str, str]]]:
    rid = rec["id"]
    if rec.get("hardware") is None:
        return [], [(rid, f"the device {rec['device']!r} is not in the hardware catalog (hardware is null)")]
    hw = get_hardware(rec["hardware"])
    model = get_model(rec["model"])
    prec = get_precision(rec["weights"]).name
    dtype = "fp16"  # llama.cpp computes f16 and q4_0 weights in fp16
    where = f"llama.cpp, {rec['device']}, {rec['model']} {rec['weights']}"
    rows, skipped = [], []
    peak_note = ""
    if dtype not in hw.peak_flops:
        peak_note = (f"; {hw.name} has no published dense {dtype} FLOP/s, so the floor is the memory term alone "
                     "(a floor still: compute can only add time)")
    ctx = LLAMACPP_DECODE_CONTEXT
    e = estimate(model, _memory_only(hw, dtype), prompt_tokens=ctx, new_tokens=2, precision=prec)
    rows.append(Comparison(
        case=f"{rid}/tg", source="published", model=model.name, hardware=hw.name, metric="tpot",
        predicted_s=e.tpot_first, measured_s=1.0 / rec["decode_tokens_per_s"],
        group=f"llama.cpp decode {rec['weights']}", record=rid,
        notes=(f"{where}: measured 1 / decode_tokens_per_s (main's 'eval': {LLAMACPP_DECODE_STEPS} one-token steps "
               f"of -n {LLAMACPP_PREDICT_TOKENS} --ignore-eos in a {LLAMACPP_CONTEXT_WINDOW}-token window, sampling "
               f"excluded); predicted: one step with {ctx} tokens cached, the mean over those steps (the window's "
               f"context shift keeps about {LLAMACPP_CONTEXT_WINDOW // 2} to {LLAMACPP_CONTEXT_WINDOW - 1} cached), "
               f"{prec} weights, {e.decode_bound}-bound{peak_note}")))
    if dtype in hw.peak_flops:
        e = estimate(model, hw, prompt_tokens=LLAMACPP_PROMPT_TOKENS, new_tokens=1, precision=prec)
        acc = fp16_accumulate_peak(hw)
        acc_note = ""
        if acc is not None and acc > hw.flops(dtype) and prec == "fp16":
            e_acc = estimate(model, hw.with_peak(dtype, acc), prompt_tokens=LLAMACPP_PROMPT_TOKENS, new_tokens=1,
                             precision=prec)
            eff_acc = g.efficiency(e_acc.ttft, LLAMACPP_PROMPT_TOKENS / rec["prefill_tokens_per_s"])
            acc_note = (f"; assumes the catalog's fp16 peak with fp32 accumulation. If llama.cpp's cuBLAS f16 GEMMs "
                        f"accumulated in fp16 (CUBLAS_COMPUTE_16F, unverified for this build), the peak is "
                        f"{acc / 1e12:.0f} TFLOP/s, the floor {e_acc.ttft * 1e3:.2f} ms and the efficiency "
                        f"{eff_acc:.2f}")
        rows.append(Comparison(
            case=f"{rid}/pp", source="published", model=model.name, hardware=hw.name, metric="ttft",
            predicted_s=e.ttft, measured_s=LLAMACPP_PROMPT_TOKENS / rec["prefill_tokens_per_s"],
            group=f"llama.cpp prefill {rec['weights']}", record=rid,
            notes=(f"{where}: measured {LLAMACPP_PROMPT_TOKENS} tokens / prefill_tokens_per_s (main's 'prompt eval' "
                   f"of its {LLAMACPP_PROMPT_TOKENS}-token prompt); predicted: TTFT of a "
                   f"{LLAMACPP_PROMPT_TOKENS}-token prompt, {e.prefill_bound}-bound at the {dtype} peak{acc_note}")))
    else:
        skipped.append((rid, f"prefill: {hw.name} has no published dense {dtype} FLOP/s, so a compute-bound "
                             "prefill floor cannot be computed"))
    return rows, skipped


def _kipply(rec: dict) -> tuple[list[Comparison], list[tuple[str, str]]]:
    rid = rec["id"]
    hw = get_hardware(rec["hardware"])
    w = weight_bytes(rec["params"], "fp16")
    predicted = g.memory_time(w, hw.bandwidth, 1)
    row = Comparison(
        case=f"{rid}/decode", source="published", model=rec["model_description"], hardware=hw.name, metric="tpot",
        predicted_s=predicted, measured_s=rec["decode_ms_per_token"] / 1e3, group="FasterTransformer decode",
        record=rid,
        notes=(f"{rec['framework']} on {rec['device']}: the record names {rec['params']:.3g} parameters, not a model; "
               "predicted: every parameter read once per token in fp16 / the A100-40GB bandwidth (KV cache and "
               "prompt length not given, so not counted)"))
    return [row], [(rid, "prefill: the prompt length is not given, so its floor cannot be computed")]


def _published() -> tuple[list[Comparison], list[tuple[str, str]]]:
    rows, skipped = [], []
    for rec in measurements.published():
        rid = rec["id"]
        if rec["kind"] == "llamacpp_benchmark":
            r, s = _llamacpp(rec)
        elif rec["kind"] == "latency" and rec.get("hardware") and rec.get("params"):
            r, s = _kipply(rec)
        elif rec["kind"] == "latency":
            r, s = [], [(rid, f"no catalog hardware for {rec['device']!r} (the catalog has no TPU v4), and "
                              "the estimator does not model communication between chips")]
        else:
            r, s = [], [(rid, f"a {rec['kind']} record: no time to predict")]
        rows += r
        skipped += s
    return rows, skipped


def published_cases() -> list[Comparison]:
    """Every published measurement that can be predicted, in the order of the records (see module doc)."""
    return _published()[0]


def skipped_published() -> list[tuple[str, str]]:
    """``(record id, reason)`` for each published record (or half of one) without a prediction."""
    return _published()[1]


_ACC16 = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*TFLOP/s with fp16 accumulate")


def fp16_accumulate_peak(hardware) -> float | None:
    """The dense fp16 rate with fp16 accumulation (FLOP/s) where the catalog's ``accumulate`` note gives one.

    On GeForce cards it is twice the fp32-accumulate rate the catalog uses as the fp16 peak; on data
    centre GPUs the two rates are equal and the catalog gives no separate figure (``None``).
    """
    if not isinstance(hardware, (HardwareSpec, str)):
        raise TypeError(f"hardware must be a HardwareSpec or a catalog name, got {type(hardware).__name__}")
    hw = get_hardware(hardware)
    m = _ACC16.search(hw.accumulate.get("fp16", "") or "")
    return float(m.group(1)) * 1e12 if m else None


def llamacpp_fp16_accumulate_cases() -> list[Comparison]:
    """The llama.cpp f16 prefill cases again, on the fp16-accumulate peak where the catalog gives one.

    The alternative floor for rows whose cuBLAS GEMMs may have accumulated in fp16 (group
    ``llama.cpp prefill f16 (fp16 accumulate)``, case ids ending ``/pp-acc16``).
    """
    rows = []
    for r in published_cases():
        if r.metric != "ttft" or not r.group.startswith("llama.cpp prefill f16"):
            continue
        hw = get_hardware(measurements.record(r.record)["hardware"])
        acc = fp16_accumulate_peak(hw)
        if acc is None or acc <= hw.flops("fp16"):
            continue
        e = estimate(get_model(r.model), hw.with_peak("fp16", acc), prompt_tokens=LLAMACPP_PROMPT_TOKENS,
                     new_tokens=1, precision="fp16")
        rows.append(Comparison(
            case=f"{r.record}/pp-acc16", source="published", model=r.model, hardware=r.hardware, metric="ttft",
            predicted_s=e.ttft, measured_s=r.measured_s, group="llama.cpp prefill f16 (fp16 accumulate)",
            record=r.record,
            notes=(f"as {r.case}, but at the fp16-accumulate peak {acc / 1e12:.0f} TFLOP/s (catalog 'accumulate' "
                   "note): the floor if llama.cpp's cuBLAS f16 GEMMs used CUBLAS_COMPUTE_16F (an assumption)")))
    return rows


def fixed_cost_fit(a: Comparison, b: Comparison) -> tuple[float, float]:
    """Fit ``measured = t0 + predicted / eta`` (formula ``fixed_cost_time``) through two cases.

    Returns ``(t0 seconds, eta)``, the sympy solution of the two equations (formulas
    ``fixed_cost_fit_fixed_time`` and ``fixed_cost_fit_rate_fraction``).

    Two runs of the same program that move different bytes (f16 and q4_0 weights, fp16 and fp8)
    separate a fixed cost per step ``t0`` from the fraction ``eta`` of the floor's bandwidth the
    bytes move at: with a memory-bound floor Q / beta, ``measured = t0 + Q / (eta beta)``.
    """
    if not isinstance(a, Comparison) or not isinstance(b, Comparison):
        raise TypeError("fixed_cost_fit needs two Comparison rows (from course_lib.core.compare)")
    if a.predicted_s == b.predicted_s:
        raise ValueError(f"the two cases must have different floors to fit a slope, both are {a.predicted_s!r} s")
    args = (a.predicted_s, b.predicted_s, a.measured_s, b.measured_s)
    eta = g.fixed_cost_fit_rate_fraction(*args) if a.measured_s != b.measured_s else math.inf
    if not eta > 0 or math.isinf(eta):
        raise ValueError("the case with the larger floor must also have the larger measured time to fit "
                         f"measured = t0 + predicted / eta (got {a.case} and {b.case})")
    return g.fixed_cost_fit_fixed_time(*args), eta


# --------------------------------------------------------------------------------------------------
# The H200 set
# --------------------------------------------------------------------------------------------------
def h200_hardware(ceilings: str = "datasheet") -> HardwareSpec:
    """The H200 as the catalog has it (``"datasheet"``) or with the ceilings measured on it (``"measured"``).

    Measured: the bandwidth is the kernel copy's (read + write counted) and the fp16/bf16 peak the
    8192^3 fp16 matmul's, both from :func:`course_lib.core.measurements.h200_record`; capacity from the datasheet.
    """
    ceilings = require_choice("ceilings", ceilings, CEILINGS)
    hw = get_hardware("h200")
    if ceilings == "datasheet":
        return hw
    rec = measurements.h200_record()
    peak = rec.matmul_fp16_flops
    return custom_hardware(
        "h200-measured", bandwidth=rec.copy_bandwidth, peak_flops={"fp16": peak, "bf16": peak},
        capacity=hw.capacity, memory_type=hw.memory_type, cache_bytes=hw.cache_bytes,
        display="NVIDIA H200 (measured ceilings)",
        source="measurements.h200()['ceilings']: kernel copy (read + write counted) and 8192^3 fp16 matmul",
    )


def h200_model(window: bool = True) -> ModelSpec:
    """Mistral-7B's shape; ``window=False`` drops its sliding window (the H200 full-step program read every token)."""
    if not isinstance(window, bool):
        raise TypeError(f"window must be True or False, got {type(window).__name__}")
    m = get_model("mistral-7b")
    return m if window else m.scaled(name="mistral-7b (no window)", sliding_window=None)


def _weights_step(hw: HardwareSpec, wbytes: float, precision: str, batch: int) -> float:
    """Roofline time of a weights-only step: ``wbytes`` of weights, 2 FLOP per weight per sequence."""
    elements = wbytes / bytes_per_element(precision)
    flops = g.gemv_flops(elements, 1, batch)
    dtype = precision if precision in hw.peak_flops else "fp16"
    return g.phase_time(flops, hw.flops(dtype), 1, wbytes, hw.bandwidth, 1)


def h200_cases(ceilings: str = "datasheet") -> list[Comparison]:
    """Every H200 / Mistral-7B measurement beside its prediction on the ``ceilings`` of :func:`h200_hardware`.

    Groups: ``H200 ceilings`` (datasheet only: copy and matmul against the datasheet), ``H200 eager
    GEMV``, ``H200 CUDA-graph weights-only step``, ``H200 fp8 weights``, ``H200 CUDA-graph full step``,
    ``H200 HF eager TTFT``, ``H200 HF eager TPOT``, ``H200 HF prefix cache``.
    """
    ceilings = require_choice("ceilings", ceilings, CEILINGS)
    hw = h200_hardware(ceilings)
    h = measurements.h200()
    m = h200_model()
    full = h200_model(window=False)
    on = f"on the {ceilings} ceilings"
    rows: list[Comparison] = []

    def add(case, metric, predicted, measured, group, record, notes, model=m.name):
        rows.append(Comparison(case=f"h200/{case}", source="h200", model=model, hardware=hw.name, metric=metric,
                               predicted_s=predicted, measured_s=measured, group=group, record=record,
                               notes=f"{notes}; predicted {on}"))

    if ceilings == "datasheet":
        c = h["ceilings"]
        copy_bytes = 1e9
        add("ceiling/copy", "copy", g.memory_time(copy_bytes, hw.bandwidth, 1),
            copy_bytes / (c["copy_read_plus_write_GBps"] * 1e9), "H200 ceilings", "ceilings.copy_read_plus_write_GBps",
            "moving 1e9 bytes (read + write counted) at the datasheet bandwidth vs at the measured copy rate",
            model="none")
        n = 8192
        mm_flops = g.gemv_flops(n * n, 1, n)          # 2 n^3: n columns of an n x n matrix-vector product
        add("ceiling/matmul", "matmul", g.compute_time(mm_flops, hw.flops("fp16"), 1),
            mm_flops / (c["matmul_8192_fp16_TFLOPs"] * 1e12), "H200 ceilings", "ceilings.matmul_8192_fp16_TFLOPs",
            "an 8192^3 fp16 matmul (2 x 8192^3 FLOP) at the datasheet dense fp16 peak vs at the measured rate",
            model="none")

    for r in h["gemv_fp16_eager"]:
        b = g.weight_bytes(r["m"] * r["k"] + r["m"] + r["k"], bytes_per_element("fp16"))
        t = g.phase_time(g.gemv_flops(r["m"], r["k"], 1), hw.flops("fp16"), 1, b, hw.bandwidth, 1)
        add(f"gemv/{r['m']}x{r['k']}", "gemv", t, r["us"] / 1e6, "H200 eager GEMV", "gemv_fp16_eager",
            f"one torch.mv of a {r['m']} x {r['k']} fp16 matrix (m k + m + k elements moved)", model="none")

    step = h["weights_only_decode_step_cuda_graph"]
    for r in step["by_batch"]:
        add(f"weights-step/b{r['batch']}", "step", _weights_step(hw, step["weight_bytes"], "fp16", r["batch"]),
            r["ms"] / 1e3, "H200 CUDA-graph weights-only step", "weights_only_decode_step_cuda_graph.by_batch",
            f"every projection of a Mistral-7B step at batch {r['batch']} (weight_bytes as measured, 2 FLOP per "
            "weight per sequence; no attention, no KV), one CUDA graph")

    f8 = h["weights_only_decode_step_fp16_vs_fp8"]
    for key, prec in (("fp16", "fp16"), ("fp8_e4m3", "fp8")):
        add(f"fp8-test/{prec}", "step", _weights_step(hw, f8[key]["weight_bytes"], prec, 16), f8[key]["ms"] / 1e3,
            "H200 fp8 weights", f"weights_only_decode_step_fp16_vs_fp8.{key}",
            f"the weights-only step at batch 16 with {prec} weights ({f8[key]['weight_bytes']} bytes), CUDA graph")

    for r in h["full_decode_step_cuda_graph"]["runs"]:
        e = estimate(full, hw, prompt_tokens=r["context"], new_tokens=2, batch=r["batch"])
        add(f"full-step/b{r['batch']}-c{r['context']}", "step", e.tpot_first, r["ms"] / 1e3,
            "H200 CUDA-graph full step", "full_decode_step_cuda_graph.runs",
            f"a whole decoder step at batch {r['batch']} with {r['context']} tokens cached, one CUDA graph; "
            "predicted by estimate() for the step after a prompt of that length (it also reads the new token's own "
            "K/V), Mistral-7B without its sliding window (the program read every cached token)", model=full.name)

    hf = h["hf_transformers_eager"]
    for r in hf["ttft"]:
        e = estimate(m, hw, prompt_tokens=r["prompt"], new_tokens=1)
        add(f"hf/ttft-p{r['prompt']}", "ttft", e.ttft, r["ms"] / 1e3, "H200 HF eager TTFT",
            "hf_transformers_eager.ttft",
            f"Hugging Face MistralForCausalLM, eager, batch 1, a {r['prompt']}-token prompt ({e.prefill_bound}-bound)")
    for r in hf["tpot"]:
        e = estimate(m, hw, prompt_tokens=r["context"], new_tokens=2)
        add(f"hf/tpot-c{r['context']}", "tpot", e.tpot_first, r["ms"] / 1e3, "H200 HF eager TPOT",
            "hf_transformers_eager.tpot",
            f"Hugging Face MistralForCausalLM, eager, batch 1, one decode step with {r['context']} tokens cached")
    pc = hf["prefix_cache"]
    prompt = pc["prefix"] + pc["suffix"]
    e_full = estimate(m, hw, prompt_tokens=prompt, new_tokens=1)
    e_hit = estimate(m, hw, prompt_tokens=prompt, new_tokens=1, cached_prefix_tokens=pc["prefix"])
    add("hf/prefix-full", "ttft", e_full.ttft, pc["full_ms"] / 1e3, "H200 HF prefix cache",
        "hf_transformers_eager.prefix_cache.full_ms", f"TTFT of a {prompt}-token prompt, nothing cached")
    add("hf/prefix-cached", "ttft", e_hit.ttft, pc["cached_ms"] / 1e3, "H200 HF prefix cache",
        "hf_transformers_eager.prefix_cache.cached_ms",
        f"TTFT of the same prompt with its {pc['prefix']}-token prefix cached ({pc['suffix']} new tokens)")
    return rows


# --------------------------------------------------------------------------------------------------
# The learner's machine
# --------------------------------------------------------------------------------------------------
def _pairs(items, what: str, key: str) -> list[tuple[int, float]]:
    """(tokens, seconds) from tuples, mappings or objects with ``key``/``seconds`` attributes."""
    out = []
    for i, it in enumerate(require_list(what, items, f"a list of ({key}, seconds) pairs")):
        if isinstance(it, Mapping):
            tokens, seconds = it.get(key, it.get("prompt_tokens")), it.get("seconds")
        elif isinstance(it, (tuple, list)):
            if len(it) != 2:
                raise ValueError(f"{what}[{i}] must be a ({key}, seconds) pair, got {len(it)} values")
            tokens, seconds = it
        elif key == "context" and hasattr(it, "mean_context"):
            # a bench.DecodeTiming: its timed steps attend to first_context ... last_context tokens (their
            # own included); the step at the middle of them had round(mean_context) - 1 tokens cached
            tokens, seconds = max(1, round(it.mean_context) - 1), getattr(it, "seconds", None)
        else:
            tokens = getattr(it, key, getattr(it, "prompt_tokens", None))
            seconds = getattr(it, "seconds", None)
        if tokens is None or seconds is None:
            raise TypeError(f"{what}[{i}] must be a ({key}, seconds) pair or have '{key}' and 'seconds', "
                            f"got {type(it).__name__}")
        out.append((require_count(f"{what}[{i}] {key}", tokens, minimum=1),
                    require_positive(f"{what}[{i}] seconds", seconds)))
    return out


def machine_cases(model, hardware, *, decode=(), prefill=(), precision: str = "fp32", batch: int = 1,
                  label: str = "this machine") -> list[Comparison]:
    """The learner's measurements beside ``estimate`` on ``hardware`` (e.g. ``bench.this_machine()``).

    ``decode``: ``(context, seconds)`` pairs -- one decode step's median time with ``context`` tokens
    already cached (predicted: the step after a ``context``-token prompt). ``prefill``:
    ``(prompt_tokens, seconds)`` pairs (predicted: the TTFT). Items may also be mappings or objects
    with ``context``/``prompt_tokens`` and ``seconds``: a ``bench.PrefillTiming``, or a
    ``bench.DecodeTiming``, whose context is the tokens cached at its middle timed step
    (``round(mean_context) - 1``). ``precision`` is the model's weight format as run.
    """
    m = get_model(model)
    if not isinstance(hardware, (HardwareSpec, str)):
        raise TypeError(f"hardware must be a HardwareSpec (bench.this_machine()) or a catalog name, "
                        f"got {type(hardware).__name__}")
    hw = get_hardware(hardware)
    prec = get_precision(precision).name
    batch = require_count("batch", batch, minimum=1)
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label must be a non-empty string, got {label!r}")
    dec = _pairs(decode, "decode", "context")
    pre = _pairs(prefill, "prefill", "prompt_tokens")
    if not dec and not pre:
        raise ValueError("machine_cases needs at least one measurement: decode=[(context, seconds), ...] "
                         "and/or prefill=[(prompt_tokens, seconds), ...]")
    rows = []
    for ctx, sec in dec:
        e = estimate(m, hw, prompt_tokens=ctx, new_tokens=2, precision=prec, batch=batch)
        rows.append(Comparison(
            case=f"{label}/decode-c{ctx}", source="this machine", model=m.name, hardware=hw.name, metric="tpot",
            predicted_s=e.tpot_first, measured_s=sec, group=f"{label} decode", record="measured in this notebook",
            notes=f"one decode step, batch {batch}, {ctx} tokens cached, {prec} weights ({e.decode_bound}-bound)"))
    for p, sec in pre:
        e = estimate(m, hw, prompt_tokens=p, new_tokens=1, precision=prec, batch=batch)
        rows.append(Comparison(
            case=f"{label}/prefill-p{p}", source="this machine", model=m.name, hardware=hw.name, metric="ttft",
            predicted_s=e.ttft, measured_s=sec, group=f"{label} prefill", record="measured in this notebook",
            notes=f"prefill of {p} tokens, batch {batch}, {prec} weights ({e.prefill_bound}-bound)"))
    return rows


# --------------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------------
def all_cases(ceilings: str = "datasheet") -> list[Comparison]:
    """The published cases followed by the H200 cases on ``ceilings``."""
    return published_cases() + h200_cases(ceilings)


def _rows(rows, what: str = "rows") -> list[Comparison]:
    if isinstance(rows, Comparison):
        raise TypeError(f"{what} must be a list of Comparison rows; wrap a single row in a list")
    rows = require_list(what, rows, "a list of Comparison rows")
    for i, r in enumerate(rows):
        if not isinstance(r, Comparison):
            raise TypeError(f"{what}[{i}] must be a Comparison (from course_lib.core.compare), got {type(r).__name__}")
    return rows


def geomean(values) -> float:
    """Geometric mean of positive numbers: exp(mean(log v)). The right mean for ratios such as efficiencies."""
    values = require_list("values", values, "a list of positive numbers")
    vals = [require_positive(f"values[{i}]", v, minimum=0, maximum=math.inf) for i, v in enumerate(values)]
    if not vals:
        raise ValueError("values is empty: the geometric mean needs at least one number")
    return math.exp(math.fsum(math.log(v) for v in vals) / len(vals))


def summary(rows, by: str | Callable[[Comparison], str] = "group") -> list[dict]:
    """Geometric-mean efficiency per group, in order of first appearance.

    ``by``: a :class:`Comparison` field name (``"group"``, ``"source"``, ``"metric"``, ``"hardware"``,
    ...) or a function of a row. Each dict has ``group``, ``cases``, ``geomean_efficiency``,
    ``min_efficiency`` and ``max_efficiency``.
    """
    rows = _rows(rows)
    if not rows:
        raise ValueError("rows is empty: nothing to summarise")
    key = by if callable(by) else operator.attrgetter(require_choice("by", by, list(Comparison.__dataclass_fields__)))
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(str(key(r)), []).append(r.efficiency)
    return [{"group": k, "cases": len(v), "geomean_efficiency": geomean(v), "min_efficiency": min(v),
             "max_efficiency": max(v)} for k, v in groups.items()]


def find(rows, case: str) -> Comparison:
    """The row whose ``case`` id is ``case`` (close matches suggested for a misspelt id)."""
    by_case = {r.case: r for r in _rows(rows)}
    if not isinstance(case, str):
        raise TypeError(f"case must be a string case id, got {type(case).__name__}")
    key = case.strip()
    if key not in by_case:
        from course_lib.core.validation import suggest
        raise ValueError(f"no case {case!r} in rows.{suggest(key, by_case)}")
    return by_case[key]


def as_dicts(rows) -> list[dict]:
    """Each row as a dict (with efficiency, slowdown and excess_s), e.g. for a table or a DataFrame."""
    return [r.as_dict() for r in _rows(rows)]
