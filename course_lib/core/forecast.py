"""Engine-aware forecasts: the floor, then an engine's profile fitted to published measurements.

Lessons: 08

The floor (:func:`course_lib.estimate`) is what the hardware allows: bytes over bandwidth, FLOPs over the peak.
A real engine adds costs of its own, and this module models them with a few explainable terms
(``formulas.engine_profile_time``)::

    t = n_step · t_step + n_req · t_req + n_tok · t_tok + t_mem / η_m + t_gemm / η_c + t_attn / η_a + κ_x · t_kv,x
        + κ_dq · t_dq + n_eager · t_eager

* ``t_step``: a fixed cost per forward step (kernel launches, the scheduler, sampling);
* ``t_req``: a fixed cost per request (tokenisation, admission, detokenisation), apart from the prefill itself;
* ``η_m``: the share of the memory bandwidth the weight reads reach, one per device class (HBM, GDDR, unified
  LPDDR, CPU DDR); with ``t_step`` it makes the achieved efficiency grow with the bytes a step streams
  (``formulas.effective_step_efficiency``);
* ``η_c``: the share of the peak FLOP/s the matrix products reach, per device class; weight reads and arithmetic
  add up, so the achieved GEMM efficiency grows with the tokens in the step (``formulas.effective_gemm_efficiency``);
* ``η_a``: attention's efficiency (its K/V reads and score products), which carries the cost of long contexts;
* ``t_tok`` and ``κ_x``: a cost per token processed, and passes over the K/V cache expanded to every query head
  (transformers' ``repeat_kv``);
* ``κ_dq``: passes over an f16 copy of block-quantised weights (``t_dq``: 4 bytes per weight per step at the peak
  bandwidth), for the llama.cpp builds that dequantised to f16 and multiplied with cuBLAS (``F16_COPY_BUILDS``);
* ``t_eager``: a cost per layer and step run without a captured CUDA graph (trtllm-serve's steps outside its default
  graph batch sizes, ``TRT_GRAPH_BATCHES``); ``t_tok``, ``κ_x``, ``κ_dq`` and ``t_eager`` are each engine's own
  (``ENGINE_ONLY``): the pooled fit keeps them at 0.

``η_c`` has a fifth class besides the memory classes, NVIDIA's Hopper GPUs (``gemm_class``, ``HOPPER``). A
maximum-load ShareGPT run is priced as continuous batching of its requests with spread reply lengths
(``batch_histogram``), so its tail decodes at smaller batches.

``t_mem``, ``t_gemm`` and ``t_attn`` are the floor's own parts (the estimator's operators at efficiency 1).
Every parameter is fitted (:func:`fit_profiles`) to the published measurements the course ships
(``course_lib/data/published_validation.json``) by least squares on relative error, each engine shrunk towards the
pooled fit of all engines (so an engine or device class with few points borrows from the rest), and stored with
its provenance in ``course_lib/data/engine_profiles.json``; ``python -m course_lib.core.forecast --refit`` rewrites
it. :func:`held_out` refits with each source left out and predicts that source (``python -m course_lib.measure.validate
--published``). Nothing here times anything.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from course_lib.core.numeric import raw as g
from course_lib.core import data
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.precision import get_layout, get_precision
from course_lib.core.validation import require_choice, require_flag, require_list

__all__ = ["ENGINES", "ENGINE_ONLY", "EngineProfile", "get_profile", "list_engines", "device_class", "load_published",
           "check_record", "predict_record", "fit_profiles", "held_out", "HeldOutReport", "with_engine",
           "published_report", "decode_step_terms", "decoding_concurrency", "assumed_batch", "build_month",
           "gemm_class", "ERROR_SOURCES", "first_batch_timing"]

#: the engines the course profiles, with the names people type for them
ENGINES = ("llama.cpp", "vLLM", "SGLang", "TensorRT-LLM", "transformers")
_ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "llama_cpp": "llama.cpp", "ollama": "llama.cpp",
            "vllm": "vLLM", "sglang": "SGLang", "trt-llm": "TensorRT-LLM", "trtllm": "TensorRT-LLM",
            "tensorrt-llm": "TensorRT-LLM", "tensorrt_llm": "TensorRT-LLM", "hf": "transformers",
            "huggingface": "transformers", "hugging face transformers": "transformers", "transformers": "transformers",
            "llama.cpp": "llama.cpp"}
CLASSES = ("hbm", "gddr", "unified", "cpu")
#: the classes of the GEMM share η_c: the memory classes, and NVIDIA Hopper apart (:func:`gemm_class`)
GEMM_CLASSES = CLASSES + ("hopper",)
#: the catalog's NVIDIA Hopper (GH100) devices: their datasheet FLOP/s assume Hopper's own tensor-core instructions
#: (wgmma with TMA), which kernels written for Ampere (mma.sync) do not issue: FlashAttention-2 reaches about 35 % of
#: an H100's peak (Shah et al., FlashAttention-3, 2024, section 1) against 50-73 % of an A100's (Dao,
#: FlashAttention-2, 2023, abstract), so an engine's GEMM share on them is fitted apart
HOPPER = frozenset({"h100-sxm", "h100-pcie", "h200", "h20"})
PARAMS = (("t_step", "t_layer", "t_req", "t_tok") + tuple(f"inv_eta_m:{c}" for c in CLASSES)
          + tuple(f"inv_eta_c:{c}" for c in GEMM_CLASSES)
          + ("kappa_q", "inv_eta_a", "inv_eta_a_pf", "kappa_x", "kappa_dq", "t_eager"))
# the prior each fit is shrunk towards: the floor (no fixed costs, every efficiency 1), with the scale of each term
_FLOOR_PRIOR = {p: (0.0 if p.startswith(("t_", "kappa")) else 1.0) for p in PARAMS}
_SCALE = {"t_step": 1e-2, "t_layer": 1e-3, "t_req": 1e-1, "t_tok": 1e-4, "kappa_q": 1.0, "kappa_x": 1.0,
          "kappa_dq": 1.0, "t_eager": 1e-4,
          **{p: 1.0 for p in PARAMS if p.startswith("inv_")}}
# no engine streams weights faster than the memory's peak (η_m <= 1); the GEMM and attention rates may beat the
# floor's (the Apple and CPU rates are effective ones; the floor adds attention's reads and products)
_LOWER = {"t_step": 0.0, "t_layer": 0.0, "t_req": 0.0, "t_tok": 0.0, "kappa_q": 0.0, "kappa_x": 0.0, "kappa_dq": 0.0,
          "t_eager": 0.0,
          **{p: (1.0 if p.startswith("inv_eta_m") else 0.25) for p in PARAMS if p.startswith("inv_")}}
#: the costs of one engine's own code, which no engine lends another: the pooled fit keeps them at 0, so an engine
#: held out (no points of its own) has none. t_tok: a cost per token processed (llama.cpp's prompt steps cost
#: ~50 µs more per token than their weight reads and products); kappa_x: extra passes over the K/V cache expanded
#: to every query head (transformers' repeat_kv before attention, with the cache re-concatenated every step);
#: kappa_dq: passes over an f16 copy of the quantised weights (llama.cpp's dequantise-then-cuBLAS prompt steps of
#: late 2023 to mid 2024, :func:`record_constants`); t_eager: a cost per layer and step run without a captured CUDA
#: graph (trtllm-serve's steps outside its default graph batch sizes, ``TRT_GRAPH_BATCHES``)
ENGINE_ONLY = ("t_tok", "kappa_x", "kappa_dq", "t_eager")
#: shrinkage weights (a pseudo-observation's weight, in units of one point's squared relative error): the pooled fit
#: towards the floor, and the weak first pass of each engine towards the pooled fit from which
#: :func:`engine_priors` estimates, by empirical Bayes, the pull of each term in the final engine fit
SHRINK_GLOBAL = 0.05
SHRINK_ENGINE = 0.1
METRICS = ("decode_tokens_per_s", "prefill_tokens_per_s", "tpot_ms", "prefill_ms_per_token",
           "generation_tokens_per_s", "total_tokens_per_s", "output_throughput_tokens_per_s")
_UNITS = {"decode_tokens_per_s": "tokens/s", "prefill_tokens_per_s": "tokens/s", "tpot_ms": "ms/token",
          "prefill_ms_per_token": "ms/token", "generation_tokens_per_s": "tokens/s", "total_tokens_per_s": "tokens/s",
          "output_throughput_tokens_per_s": "tokens/s"}
_DATA = Path(__file__).resolve().parents[1] / "data"


def canonical_engine(name) -> str:
    """The engine's canonical name ('llama.cpp', 'vLLM', 'SGLang', 'TensorRT-LLM', 'transformers')."""
    if not isinstance(name, str):
        raise TypeError(f"engine must be a string such as 'llama.cpp' or 'vLLM', got {type(name).__name__}")
    key = _ALIASES.get(name.strip().lower())
    if key is None:
        require_choice("engine", name, ENGINES)      # raises with the list of engines
    return key


def list_engines() -> list[str]:
    return list(ENGINES)


def gemm_class(hardware) -> str:
    """The class of a device's GEMM share η_c: 'hopper' for the catalog's NVIDIA Hopper GPUs (``HOPPER``), else its
    memory class (:func:`device_class`)."""
    hw = get_hardware(hardware)
    return "hopper" if hw.name in HOPPER else device_class(hw)


def device_class(hardware) -> str:
    """'hbm', 'gddr', 'unified' (Apple, DGX Spark) or 'cpu', from the device's memory type."""
    mt = get_hardware(hardware).memory_type.lower()
    if "hbm" in mt:
        return "hbm"
    if "gddr" in mt:
        return "gddr"
    if "unified" in mt:
        return "unified"
    return "cpu"


# --- the published measurements --------------------------------------------------------------------------------
# optional on an output_throughput_tokens_per_s record: the other figures of the same benchmark result block, as printed
RUN_FIGURES = ("benchmark_duration_s", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
               "peak_concurrent_requests", "peak_output_tokens_per_s")
_REQUIRED = {"id": str, "engine": str, "engine_version": str, "model": str, "device": str, "precision": str,
             "prompt_tokens": int, "output_tokens": int, "metric": str, "value": (int, float), "unit": str,
             "source": dict, "note": str}


def check_record(r: dict) -> None:
    """Raise ValueError naming the first problem of one published-measurement record (the schema the test checks)."""
    if not isinstance(r, dict):
        raise TypeError(f"a record must be a dict, got {type(r).__name__}")
    rid = r.get("id", "?")
    for k, t in _REQUIRED.items():
        if k not in r:
            raise ValueError(f"record {rid!r}: missing field {k!r}")
        if not isinstance(r[k], t) or isinstance(r[k], bool):
            raise ValueError(f"record {rid!r}: field {k!r} must be {t}, got {r[k]!r}")
    if canonical_engine(r["engine"]) != r["engine"]:
        raise ValueError(f"record {rid!r}: engine must be spelled {canonical_engine(r['engine'])!r}")
    get_model(r["model"])
    get_hardware(r["device"])
    get_layout(r["precision"])
    if r.get("kv_precision") is not None:
        get_precision(r["kv_precision"])
    if r["metric"] not in METRICS:
        raise ValueError(f"record {rid!r}: metric must be one of {METRICS}, got {r['metric']!r}")
    if r["unit"] != _UNITS[r["metric"]]:
        raise ValueError(f"record {rid!r}: unit of {r['metric']} must be {_UNITS[r['metric']]!r}, got {r['unit']!r}")
    if not (r["value"] > 0 and math.isfinite(r["value"])):
        raise ValueError(f"record {rid!r}: value must be a finite number > 0, got {r['value']!r}")
    b = r.get("batch")
    if r["metric"] == "output_throughput_tokens_per_s":
        if b is not None:
            raise ValueError(f"record {rid!r}: a maximum-load throughput has batch null (the engine picks it)")
    elif not (isinstance(b, int) and b >= 1):
        raise ValueError(f"record {rid!r}: batch must be an integer >= 1, got {b!r}")
    needs_prompt = r["metric"] not in ("decode_tokens_per_s", "tpot_ms")
    needs_output = r["metric"] not in ("prefill_tokens_per_s", "prefill_ms_per_token")
    if needs_prompt and r["prompt_tokens"] < 1 or needs_output and r["output_tokens"] < 1:
        raise ValueError(f"record {rid!r}: {r['metric']} needs prompt_tokens/output_tokens >= 1")
    src = r["source"]
    for k in ("url", "table", "date"):
        if not (isinstance(src.get(k), str) and src[k].strip()):
            raise ValueError(f"record {rid!r}: source.{k} must be a non-empty string")
    for k in r.get("assumed", []):
        if k not in r:
            raise ValueError(f"record {rid!r}: assumed field {k!r} is not a field")
    figs = r.get("run_figures")
    if figs is not None:
        if not isinstance(figs, dict):
            raise ValueError(f"record {rid!r}: run_figures must be a dict, got {figs!r}")
        for k, v in figs.items():
            if k not in RUN_FIGURES:
                raise ValueError(f"record {rid!r}: run_figures key {k!r} must be one of {RUN_FIGURES}")
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
                raise ValueError(f"record {rid!r}: run_figures[{k!r}] must be a finite number > 0, got {v!r}")


@lru_cache(maxsize=None)
def _published() -> tuple:
    recs = data.load_catalog("published_validation")["records"]
    for r in recs:
        check_record(r)
    return tuple(recs)


def load_published(engine: str | None = None) -> list[dict]:
    """The published measurements (copies), all or one engine's."""
    recs = [dict(r) for r in _published()]
    if engine is not None:
        e = canonical_engine(engine)
        recs = [r for r in recs if r["engine"] == e]
    return recs


def source_of(r: dict, by: str = "document") -> str:
    """The source a record belongs to for leave-one-source-out: its document (URL), or with ``by='table'`` the
    table within it (the cited table up to its row)."""
    if by == "table":
        return r["source"]["url"] + " | " + r["source"]["table"].split(", row")[0]
    return r["source"]["url"]


# --- features: the floor's parts for the unit of work a metric describes ---------------------------------------
@dataclass(frozen=True)
class _Work:
    """The floor's parts of a unit of work (seconds at efficiency 1) and the counts of steps and requests."""

    steps: float
    requests: float
    mem: float
    gemm: float
    attn: float               # decode attention (K/V reads and score products)
    attn_pf: float            # prefill attention (score products over the prompt, K/V writes)
    cls: str
    gemm_q: float             # the part of gemm whose block-quantised weights are dequantised inside the kernels
    layers: int
    floor: float              # the floor's own time for the same work (max per operator)
    tokens: float = 0.0       # the tokens the steps process
    kv_x: float = 0.0         # decode attention's K/V reads times heads / kv_heads (the cache expanded per query head)
    looped: float = 0.0       # per step: rho_exp x the (MoE layer, expert) iterations of an engine's Python expert loop
    dq: float = 0.0           # an f16 copy of the quantised weights written and read back per step, at peak bandwidth
    eager: float = 0.0        # layer-steps run without a captured CUDA graph (an engine that captures others)
    gcls: str = ""            # the class of the GEMM share η_c (:func:`gemm_class`; empty: the memory class)

    def __add__(self, o):
        return _Work(self.steps + o.steps, self.requests + o.requests, self.mem + o.mem, self.gemm + o.gemm,
                     self.attn + o.attn, self.attn_pf + o.attn_pf, self.cls, self.gemm_q + o.gemm_q, self.layers,
                     self.floor + o.floor, self.tokens + o.tokens, self.kv_x + o.kv_x, self.looped, self.dq + o.dq,
                     self.eager + o.eager, self.gcls)

    def scaled(self, k):
        return _Work(self.steps * k, self.requests * k, self.mem * k, self.gemm * k, self.attn * k,
                     self.attn_pf * k, self.cls, self.gemm_q * k, self.layers, self.floor * k, self.tokens * k,
                     self.kv_x * k, self.looped, self.dq * k, self.eager * k, self.gcls)

    def vector(self) -> dict:
        x = dict.fromkeys(PARAMS, 0.0)
        x["t_step"], x["t_layer"], x["t_req"] = self.steps, self.steps * (self.layers + self.looped), self.requests
        x["t_tok"], x["kappa_x"] = self.tokens, self.kv_x
        x[f"inv_eta_m:{self.cls}"] = self.mem
        x[f"inv_eta_c:{self.gcls or self.cls}"] = self.gemm
        x["kappa_q"] = self.gemm_q
        x["kappa_dq"] = self.dq
        x["t_eager"] = self.eager
        x["inv_eta_a"] = self.attn
        x["inv_eta_a_pf"] = self.attn_pf
        return x


#: weight formats whose matrix products dequantise blocks inside the kernel (float formats run natively)
_NATIVE = ("fp32", "tf32", "fp16", "bf16", "fp8", "nvfp4", "mxfp4", "w8a8")


def _gemm_speedup(hw, consts) -> float:
    """How much faster than the catalog's fp16 rate an engine's matrix products can run on ``hw``: 2 on GeForce
    cards for an engine that accumulates in fp16 (their fp32-accumulate rate is half the fp16-accumulate one)."""
    e = data.load_catalog("hardware")["hardware"].get(getattr(hw, "name", ""), {})
    fast = e.get("fp16_accumulate_TFLOPs")
    if consts.get("fp16_accumulate") and fast and "fp16" in e.get("peak_TFLOPs", {}):
        return fast / e["peak_TFLOPs"]["fp16"]
    return 1.0


def _parts(phase, cls, steps, requests, weight_reads=1.0, prefill=False, precision="fp16", layers=1,
           gemm_speedup=1.0, tokens=0.0, group=1.0, looped=0.0) -> _Work:
    """The floor's parts of ``phase``; ``tokens`` the tokens its steps process, ``group`` heads / kv_heads,
    ``looped`` the layer-equivalents of dispatch an engine's Python expert loop adds per step (:func:`_looped`)."""
    mem = gemm = attn = kv = 0.0
    for o in phase.operators:
        if o.name == "attention":
            attn += o.memory_time + o.compute_time
            kv += o.memory_time
        else:
            mem += o.memory_time * weight_reads
            gemm += o.compute_time / gemm_speedup
    quant = get_precision(get_layout(precision).compute_format).name not in _NATIVE
    return _Work(steps, requests, mem, gemm, 0.0 if prefill else attn, attn if prefill else 0.0, cls,
                 gemm if quant else 0.0, layers, phase.time, tokens, 0.0 if prefill else kv * group, looped)


def _looped(model, share) -> float:
    """Layer-equivalents of dispatch per step of an engine that runs each mixture-of-experts layer as a Python loop
    over all its experts: ``share`` (the engine's rho_exp, 0 for a fused MoE kernel) x MoE layers x experts."""
    return share * model.moe_layers * model.experts if share and model.is_moe else 0.0


def _prefill_work(e, cls, chunk, requests, speedup=1.0, share=0.0) -> _Work:
    tokens = e.batch * (e.prompt_tokens - e.cached_prefix_tokens)
    chunks = max(1, math.ceil(tokens / chunk)) if chunk else 1
    w = _parts(e.prefill, cls, chunks, requests, weight_reads=chunks, prefill=True, precision=e.precision,
               layers=e.model.layers, gemm_speedup=speedup, tokens=tokens, looped=_looped(e.model, share))
    return replace(w, gcls=gemm_class(e.hardware))


def _decode_work(e, cls, speedup=1.0, share=0.0) -> _Work:
    """The mean decode step of ``e`` (its per-step costs are linear in the context: the mean of the first and last)."""
    a, b = (_decode_parts(e, p, cls, speedup, share) for p in (e.decode_first, e.decode_last))
    mean = (a + b).scaled(0.5)
    return replace(mean, floor=e.tpot)


def _decode_parts(e, phase, cls, speedup=1.0, share=0.0) -> _Work:
    """One decode step of ``e`` (``phase``: its first or last): ``e.batch`` tokens."""
    w = _parts(phase, cls, 1, 0, precision=e.precision, layers=e.model.layers, gemm_speedup=speedup,
               tokens=e.batch, group=e.model.heads / e.model.kv_heads, looped=_looped(e.model, share))
    return replace(w, gcls=gemm_class(e.hardware))


def _with_f16_copy(w: _Work, e, hw, full_logits: bool = False) -> _Work:
    """``w``, a prefill of ``e``, in a build that dequantises block-quantised weights to an f16 copy before each
    step's matrix products (F16_COPY_BUILDS): the copy is written and read back (4 bytes per weight) once per step
    at the memory's peak (t_dq), and the products run on f16 weights (no κ_q). Steps of at most
    F16_COPY_MIN_TOKENS tokens keep the quantised kernels; the output matrix is copied too where every prompt token
    multiplies it (``full_logits``) and its format is block-quantised."""
    if not w.gemm_q or w.tokens / w.steps <= F16_COPY_MIN_TOKENS:
        return w
    mm = sum(o.flops for o in e.prefill.operators if o.name == "matmuls")   # lm_head: apart, below
    weights = mm / (2 * w.tokens)                     # weight elements the products multiply, once per step
    if full_logits and get_precision(get_layout(e.precision).format("lm_head").name).name not in _NATIVE:
        weights += e.model.lm_head_params
    return replace(w, gemm_q=0.0, dq=w.steps * 4 * weights / hw.bandwidth)


def _with_full_logits(w: _Work, e, speedup=1.0) -> _Work:
    """``w``, a prefill of ``e``, in a build that multiplies the output matrix by every prompt token
    (FULL_LOGITS_BEFORE) where the estimator counts one token per sequence: the other tokens' lm_head FLOPs join the
    matrix products (and the quantised ones, for a block-quantised output matrix)."""
    lm = sum(o.compute_time for o in e.prefill.operators if o.name == "lm_head")
    extra = lm * (w.tokens - e.batch) / e.batch / speedup if e.batch else 0.0
    return replace(w, gemm=w.gemm + extra, gemm_q=w.gemm_q + (extra if w.gemm_q else 0.0))


_prefill_work_ = _prefill_work
_decode_work_ = _decode_work


def _kv_for(r):
    return r.get("kv_precision")


def _max_load_batch(m, hw, precision, kv_precision, isl, osl, cap, of_total=None):
    """Sequences in flight at maximum load: as many as the KV cache holds, at most ``cap``. The KV cache gets 90 %
    of the memory the weights leave (TensorRT-LLM's kv_cache_free_gpu_memory_fraction 0.9), or with ``of_total``
    that share of the device's whole memory less the weights (vLLM's gpu_memory_utilization 0.9 and SGLang's
    mem_fraction_static 0.88 are shares of the whole device, weights included)."""
    from course_lib.core.estimator import estimate, kv_cache_bytes
    weights = estimate(m, hw, 1, 2, precision=precision).weights_bytes     # a layout's bytes too
    free = of_total * hw.capacity - weights if of_total else 0.9 * (hw.capacity - weights)
    per_seq = kv_cache_bytes(m, isl + osl, kv_precision or "fp16", 1)
    return max(1, min(cap, int(free // per_seq)))


def benchmark_requests(r: dict) -> int | None:
    """The requests a maximum-load benchmark sent (``vllm bench serve`` / ``sglang.bench_serving --num-prompts``):
    the record's ``requests`` field, else the count its note quotes from the page's command line ('--num-prompts
    5000') or output ('... over 1000 requests'); None if none of these."""
    if isinstance(r.get("requests"), int):
        return r["requests"]
    import re
    note = r.get("note", "")
    m = re.search(r"--num-prompts ([\d,]+)", note) or re.search(r"over ([\d,]+) requests", note)
    return int(m.group(1).replace(",", "")) if m else None


def _version(text: str) -> tuple:
    import re
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _flag(text: str, name: str) -> int | None:
    import re
    m = re.search(rf"{name}[ =](\d+)", text)
    return int(m.group(1)) if m else None


#: llama.cpp's CUDA backend multiplied a block-quantised weight matrix by more than MMQ_MAX_BATCH_SIZE = 32 tokens
#: by dequantising it to an f16 copy and calling cuBLAS (ggml-org/llama.cpp PR #3412, 2023-09-30, for -nommq; made
#: the default on NVIDIA GPUs with tensor cores by PR #3776, merged 2023-10-27) until PR #8075 (merged 2024-06-24)
#: made its int8 tensor-core MMQ kernels the default again: builds dated in between pay for the copy
F16_COPY_BUILDS = ((2023, 11), (2024, 5))
#: the most tokens a step of those builds multiplies in its own quantised kernels (MMQ_MAX_BATCH_SIZE)
F16_COPY_MIN_TOKENS = 32
#: llama.cpp builds before PR #6122 ("llama : greatly reduce output buffer memory usage", merged 2024-03-26)
#: multiplied the output matrix (lm_head) by every token of a prompt batch, not by the tokens whose logits are
#: asked for (the last one): builds dated before this month pay for it (March 2024 builds could be either)
FULL_LOGITS_BEFORE = (2024, 3)
#: trtllm-serve (TensorRT-LLM's PyTorch backend) replays a captured CUDA graph only for a decode-only step whose
#: batch is one of CudaGraphConfig's default sizes: max_batch_size 0 becomes 128 and, without padding,
#: _generate_cuda_graph_batch_sizes gives 1..31, 32, 64, 128 (tensorrt_llm/llmapi/llm_args.py); other steps,
#: and every step that carries prompt tokens, run eagerly
TRT_GRAPH_BATCHES = frozenset(range(1, 33)) | {64, 128}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def build_month(text: str) -> tuple | None:
    """(year, month) of a build named in an engine version such as 'llama.cpp (Dec 2023 build)', 'RunPod build,
    May 2024' or '335acd2 (2023-08-24)'; None when the text dates nothing."""
    import re
    m = re.search(r"\b(20\d\d)-(\d\d)(?:-\d\d)?\b", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.search(r"\b(" + "|".join(_MONTHS) + r")[a-z]*\.? (20\d\d)\b", text.lower())
    return (int(m.group(2)), _MONTHS.index(m.group(1)) + 1) if m else None


def _nvidia_gpu(hw) -> bool:
    """A discrete NVIDIA GPU of the catalog (its datasheet source is NVIDIA's; HBM or GDDR memory)."""
    return device_class(hw) in ("hbm", "gddr") and "NVIDIA" in (hw.source or "")


def record_constants(r: dict, consts: dict) -> dict:
    """The engine's constants for the run of record ``r``: the step budget of its release and device, the flags its
    command line sets, and at maximum load the benchmark's own request count as a cap on the batch (every request
    is sent at once: no more sequences can be in flight than were sent)."""
    c = dict(consts)
    ver = r.get("engine_version", "")
    if r["engine"] == "vLLM" and _version(ver) >= (0, 10):
        # vLLM V1 `vllm serve` (vllm/engine/arg_utils.py, EngineArgs batch defaults): chunked prefill always on,
        # max_num_batched_tokens 8192 tokens per step on a device of >= 70 GiB that is not an A100, else 2048 (an
        # A100 is excluded because the larger budget lowered its throughput, vLLM PR #17885); a
        # --max-num-batched-tokens flag overrides it. The same defaults give max_num_seqs 1024 on such a device,
        # else 256: the H100 runs' own figures (run_figures) put 710-790 sequences decoding at once, more than 256
        hw = get_hardware(r["device"])
        big = hw.capacity >= 70 * 2 ** 30 and "a100" not in hw.name
        c["prefill_chunk_tokens"] = _flag(ver, "--max-num-batched-tokens") or (8192 if big else 2048)
        c["max_batch"] = _flag(ver, "--max-num-seqs") or (1024 if big else 256)
    if r["engine"] == "TensorRT-LLM" and "TensorRT engines" in ver:
        # a TensorRT engine attends over the whole context unless the run sets max_attention_window_size (its
        # Mistral 7B example passes --max_attention_window_size=4096 to run.py for the sliding window, TensorRT-LLM
        # examples/llama/README.md); trtllm-bench sets none: v0.17's Mistral-7B and Llama-3.1-8B (same K/V shapes)
        # reach the same throughput within 3 % at 20000/2000 tokens on all four devices
        c["full_attention"] = True
    if r.get("kv_precision") is None and get_layout(r["precision"]).compute_format == "fp8" and (
            r["engine"] in ("vLLM", "SGLang") or "trtllm-serve" in ver):
        # kv_cache_dtype 'auto' stores the K/V cache in the model's data type (the activations', bf16), not in the
        # FP8 of the weights (vLLM and SGLang server arguments; TensorRT-LLM's PyTorch backend follows the
        # checkpoint's kv_cache_quant_algo, which Qwen's FP8 checkpoints leave unset); trtllm-bench's FP8 engines
        # do store FP8 K/V (the records' notes), as the estimator assumes for FP8 weights
        c["kv_precision"] = "bf16"
    if r["engine"] == "TensorRT-LLM" and "trtllm-serve" in ver:
        c["graph_batches"] = TRT_GRAPH_BATCHES   # the PyTorch backend's default CUDA graphs (TRT_GRAPH_BATCHES)
    month = build_month(ver) if r["engine"] == "llama.cpp" else None
    if month is not None and _nvidia_gpu(get_hardware(r["device"])) \
            and F16_COPY_BUILDS[0] <= month <= F16_COPY_BUILDS[1]:
        c["f16_copy"] = True            # dequantise to f16, then cuBLAS (F16_COPY_BUILDS)
    if month is not None and month < FULL_LOGITS_BEFORE:
        c["full_logits"] = True         # the output matrix for every prompt token (FULL_LOGITS_BEFORE)
    if r["metric"] == "output_throughput_tokens_per_s":
        n = benchmark_requests(r)
        if n:
            c["max_batch"] = min(c.get("max_batch") or 2048, n)
    return c


def _work(r: dict, profile_consts: dict):  # noqa: C901 (one branch per metric)
    """(measured seconds of the unit of work, its _Work, k) for record ``r``: the metric's value is k / seconds for a
    rate or seconds · 1000 / k for a ms figure."""
    from course_lib.core.estimator import estimate
    m, hw = _run_model(r, profile_consts), get_hardware(r["device"])
    cls = device_class(hw)
    prec, kv = r["precision"], _kv_for(r) or profile_consts.get("kv_precision")
    P, n, metric, v = r["prompt_tokens"], r["output_tokens"], r["metric"], float(r["value"])
    chunk = profile_consts.get("prefill_chunk_tokens")
    sp = _gemm_speedup(hw, profile_consts)
    share = profile_consts.get("expert_dispatch_share", 0.0)

    def _prefill_work(e, cls, chunk, requests):
        w = _prefill_work_(e, cls, chunk, requests, sp, share)
        if profile_consts.get("full_logits"):
            w = _with_full_logits(w, e, sp)
        return _with_f16_copy(w, e, hw, profile_consts.get("full_logits", False)) \
            if profile_consts.get("f16_copy") else w

    def _decode_work(e, cls):
        return _decode_work_(e, cls, sp, share)

    if metric == "decode_tokens_per_s":
        e = estimate(m, hw, max(P, 1), n + 1, precision=prec, kv_precision=kv, batch=r["batch"])
        return n / v, _decode_work(e, cls).scaled(n)
    if metric == "tpot_ms":
        e = estimate(m, hw, max(P, 1), max(n, 2), precision=prec, kv_precision=kv, batch=r["batch"])
        w = _decode_work(e, cls)
        graphs = profile_consts.get("graph_batches")
        return v / 1000, replace(w, eager=m.layers) if graphs and r["batch"] not in graphs else w
    if metric in ("prefill_tokens_per_s", "prefill_ms_per_token"):
        e = estimate(m, hw, P, 1, precision=prec, kv_precision=kv, batch=r["batch"])
        y = P / v if metric == "prefill_tokens_per_s" else v * P / 1000
        return y, _prefill_work(e, cls, chunk, 0)
    if metric in ("generation_tokens_per_s", "total_tokens_per_s"):
        e = estimate(m, hw, P, n, precision=prec, kv_precision=kv, batch=r["batch"])
        w = _prefill_work(e, cls, chunk, 1) + _decode_work(e, cls).scaled(n - 1)
        k = n if metric == "generation_tokens_per_s" else P + n
        return k / v, w
    # output_throughput_tokens_per_s: B sequences in flight, each wave a prefill of B prompts and n-1 decode steps
    B = _run_batch(r, m, profile_consts)
    e = estimate(m, hw, P, n, precision=prec, kv_precision=kv, batch=B)
    pf = _prefill_work(e, cls, chunk, B)
    wave = _decode_work(e, cls).scaled(n - 1)          # every request n tokens: one wave decodes at batch B
    N = benchmark_requests(r)
    if not (N and is_sharegpt(r)):
        steps, dec = {B: n - 1}, wave
    else:
        # ShareGPT's output lengths spread around their mean: continuous batching of the run's N requests, at most
        # B in flight, decodes part of the run at smaller batches (batch_histogram); each bin of steps is priced at
        # its own batch, and the run is scaled to one wave's B (n - 1) decode tokens
        h = batch_histogram(N, B, n, P)
        scale = B * (n - 1) / sum(b * k for b, k in h.items())
        steps = {b: k * scale for b, k in h.items()}
        dec = None
        for lo, hi in _bins(B):
            group = [(b, k) for b, k in h.items() if lo <= b < hi]
            k, tok = sum(k for _, k in group), sum(b * k for b, k in group)
            if not k:
                continue
            bb = max(1, round(tok / k))                 # the bin's mean batch; its tokens exactly
            eb = estimate(m, hw, P, n, precision=prec, kv_precision=kv, batch=bb)
            part = _decode_work(eb, cls).scaled(k * scale)
            f = tok / (bb * k)
            part = replace(part, gemm=part.gemm * f, gemm_q=part.gemm_q * f, tokens=part.tokens * f,
                           attn=part.attn * f, kv_x=part.kv_x * f)
            dec = part if dec is None else dec + part
    w = replace(pf + dec, floor=(pf + wave).floor)
    graphs = profile_consts.get("graph_batches")
    if graphs:
        # decode steps at a batch without a captured graph, and every step that carries prompt chunks, run eagerly
        eager = sum(k for b, k in steps.items() if b not in graphs) + pf.steps
        w = replace(w, eager=eager * m.layers)
    return B * n / v, w


#: vllm bench serve's ShareGPT sampling keeps a request whose reply has at least 4 tokens and whose prompt and reply
#: together have at most 2048 (vllm/benchmarks/datasets.py, ShareGPTDataset.sample and is_valid_sequence)
SHAREGPT_MIN_OUTPUT, SHAREGPT_MAX_TOTAL = 4, 2048
#: geometric bins of batch size in which :func:`_work` prices a ShareGPT run's decode steps
TAIL_BINS = 12


def is_sharegpt(r: dict) -> bool:
    """A maximum-load record of a run that sampled ShareGPT conversations (its note says so)."""
    return r.get("metric") == "output_throughput_tokens_per_s" and "sharegpt" in r.get("note", "").lower()


def sharegpt_output_lengths(requests: int, mean: float, prompt: int):
    """The output lengths of ``requests`` ShareGPT requests with mean ``mean``: an exponential distribution (the
    maximum-entropy one for a stated mean; the records publish only the mean) truncated to ShareGPT's filter
    [SHAREGPT_MIN_OUTPUT, SHAREGPT_MAX_TOTAL - prompt], its scale solved so that the truncated mean is ``mean``;
    the lengths are its quantiles at (i + 0.5) / requests, in a fixed shuffled order (seed 0)."""
    import numpy as np
    lo_len, hi_len = SHAREGPT_MIN_OUTPUT, max(SHAREGPT_MAX_TOTAL - prompt, 2 * mean)

    def truncated_mean(scale):
        a, b = math.exp(-lo_len / scale), math.exp(-hi_len / scale)
        return scale + (lo_len * a - hi_len * b) / (a - b)

    lo, hi = 1.0, 1e5
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if truncated_mean(mid) < mean else (lo, mid)
    a, b = math.exp(-lo_len / lo), math.exp(-hi_len / lo)
    q = (np.arange(requests) + 0.5) / requests
    lengths = np.maximum(1, np.round(-lo * np.log(a - q * (a - b)))).astype(int)
    np.random.default_rng(0).shuffle(lengths)
    return lengths


@lru_cache(maxsize=None)
def batch_histogram(requests: int, batch: int, mean: float, prompt: int) -> dict:
    """{batch size: decode steps at it} of continuous batching: ``requests`` ShareGPT requests
    (:func:`sharegpt_output_lengths`), at most ``batch`` in flight, each running request decoding one token per step
    and a finished one replaced at once by the next queued request."""
    import heapq
    lengths = sharegpt_output_lengths(requests, mean, prompt)
    running = [int(x) for x in lengths[:min(batch, requests)]]
    heapq.heapify(running)
    queued, t, hist = len(running), 0, {}
    while running:
        done = running[0]
        hist[len(running)] = hist.get(len(running), 0) + done - t
        t = done
        while running and running[0] == t:
            heapq.heappop(running)
            if queued < requests:
                heapq.heappush(running, t + int(lengths[queued]))
                queued += 1
    return {b: k for b, k in hist.items() if k}


def _bins(batch: int) -> list:
    """TAIL_BINS geometric [lo, hi) bins of batch size covering 1..batch."""
    import numpy as np
    edges = [int(x) for x in np.unique(np.round(np.geomspace(1, batch + 1, TAIL_BINS + 1)))]
    return list(zip(edges[:-1], edges[1:-1] + [batch + 1]))


def _to_metric(r: dict, seconds: float, measured_seconds: float) -> float:
    """The metric's value for a predicted time of the same unit of work."""
    return float(r["value"]) * measured_seconds / seconds if not r["metric"].endswith("_ms") and \
        r["metric"] != "prefill_ms_per_token" else float(r["value"]) * seconds / measured_seconds


# --- profiles --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineProfile:
    """One engine's fitted parameters (``params``: PARAMS -> value) and constants with their sources."""

    engine: str
    params: dict
    prefill_chunk_tokens: int | None
    max_batch: int | None
    constants_source: str
    points: int
    sources: tuple

    def time(self, w: _Work) -> float:
        p = self.params
        return g.engine_profile_time(w.steps, p["t_step"], w.layers, p["t_layer"], w.requests, p["t_req"], w.mem,
                                     1 / p[f"inv_eta_m:{w.cls}"], w.gemm, 1 / p[f"inv_eta_c:{w.gcls or w.cls}"],
                                     p["kappa_q"] * w.gemm_q / w.gemm if w.gemm else 0.0, w.attn, 1 / p["inv_eta_a"],
                                     w.attn_pf, 1 / p["inv_eta_a_pf"], w.tokens, p.get("t_tok", 0.0), w.kv_x,
                                     p.get("kappa_x", 0.0), w.looped, 1.0, w.dq, p.get("kappa_dq", 0.0), w.eager,
                                     p.get("t_eager", 0.0))

    def terms(self, w: _Work) -> dict:
        """``time(w)`` split into its parts (seconds): 'fixed' (per step, per layer, per request, per token, per
        layer-step without a CUDA graph),
        'weights' (the weight reads at η_m, and κ_dq's f16 copies of quantised weights), 'matmuls' (the matrix
        products at η_c, with κ_q), 'attention'
        (η_a, η_a,pf and the expanded K/V's κ_x). They add up to ``time(w)``."""
        z = dict(steps=0.0, requests=0.0, tokens=0.0, mem=0.0, gemm=0.0, gemm_q=0.0, attn=0.0, attn_pf=0.0, kv_x=0.0,
                 dq=0.0, eager=0.0)
        keep = {"fixed": ("steps", "requests", "tokens", "eager"), "weights": ("mem", "dq"),
                "matmuls": ("gemm", "gemm_q"), "attention": ("attn", "attn_pf", "kv_x")}
        return {name: self.time(replace(w, **{**z, **{k: getattr(w, k) for k in ks}})) for name, ks in keep.items()}

    def efficiency(self, kind: str, cls: str) -> float:
        """η_m ('memory') for a device class (:func:`device_class`), η_c ('compute') for a GEMM class
        (:func:`gemm_class`: the memory classes and 'hopper'), η_a ('attention', decode) or η_a,pf
        ('prefill_attention'; ``cls`` is then ignored)."""
        require_choice("kind", kind, ("memory", "compute", "attention", "prefill_attention"))
        require_choice("cls", cls, GEMM_CLASSES if kind == "compute" else CLASSES)
        key = {"memory": f"inv_eta_m:{cls}", "compute": f"inv_eta_c:{cls}", "attention": "inv_eta_a",
               "prefill_attention": "inv_eta_a_pf"}[kind]
        return 1 / self.params[key]

    def describe(self) -> str:
        p = self.params
        cls = ", ".join(f"{c} η_m={1 / p[f'inv_eta_m:{c}']:.2f} η_c={1 / p[f'inv_eta_c:{c}']:.2f}" for c in CLASSES)
        cls += f", hopper η_c={1 / p['inv_eta_c:hopper']:.2f}"
        return (f"{self.engine}: t_step={p['t_step'] * 1e3:.2f} ms + {p['t_layer'] * 1e6:.0f} µs/layer, "
                f"t_req={p['t_req'] * 1e3:.1f} ms, t_tok={p.get('t_tok', 0.0) * 1e6:.0f} µs/token, "
                f"t_eager={p.get('t_eager', 0.0) * 1e6:.0f} µs/layer-step, "
                f"κ_q={p['kappa_q']:.2f}, κ_x={p.get('kappa_x', 0.0):.2f}, κ_dq={p.get('kappa_dq', 0.0):.2f}, "
                f"η_a={1 / p['inv_eta_a']:.2f}, "
                f"η_a,pf={1 / p['inv_eta_a_pf']:.2f}; {cls} "
                f"(fitted to {self.points} points from {len(self.sources)} sources)")


_CONSTS = {
    "llama.cpp": {"prefill_chunk_tokens": 512, "max_batch": None, "fp16_accumulate": True,
                  "constants_source": "llama-bench's default micro-batch (n_ubatch 512): a prompt is processed 512 "
                                      "tokens per step, each step reading the weights again; its CUDA F16 matrix "
                                      "products accumulate in fp16 (cuBLAS compute type 16F), which GeForce cards run "
                                      "at twice their fp32-accumulate rate (hardware.json fp16_accumulate_TFLOPs)"},
    "vLLM": {"prefill_chunk_tokens": None, "max_batch": 256, "kv_share_of_total": 0.9,
             "constants_source": "vLLM 0.6 defaults: the whole prompt in one step at max_model_len 32768 (chunked "
                                 "prefill off), max_num_seqs 256; gpu_memory_utilization 0.9 is a share of the whole "
                                 "device, so the KV cache gets 0.9 x memory - weights. vLLM >= 0.10 (V1 `vllm serve`, "
                                 "vllm/engine/arg_utils.py batch defaults): chunked prefill of max_num_batched_tokens "
                                 "8192 per step on a device of >= 70 GiB other than an A100, 2048 otherwise, unless "
                                 "--max-num-batched-tokens is set, and max_num_seqs 1024 there (256 elsewhere; "
                                 "record_constants). At maximum load the batch is "
                                 "also capped by the benchmark's request count (vllm bench serve --num-prompts)"},
    "SGLang": {"prefill_chunk_tokens": 8192, "max_batch": None, "kv_share_of_total": 0.88,
               "constants_source": "SGLang 0.4 default chunked_prefill_size 8192 (GPUs above 80 GB); "
                                   "mem_fraction_static 0.88 at tensor parallelism 1 (server_args.py; 0.5's rule, "
                                   "(memory - 10 GiB) / memory on an 80 GB device, gives 0.875): the weights and the "
                                   "KV cache share 0.88 of the whole device"},
    "TensorRT-LLM": {"prefill_chunk_tokens": 8192, "max_batch": 2048,
                     "constants_source": "trtllm-bench defaults: max_num_tokens 8192 per step, max_batch_size 2048"},
    "transformers": {"prefill_chunk_tokens": None, "max_batch": None, "expert_dispatch_share": 10 / 59,
                     "constants_source": "generate(): the whole prompt in one forward pass. Its mixture-of-experts "
                                         "blocks (transformers 4.51 Qwen3MoeSparseMoeBlock, like Mixtral's and "
                                         "Qwen2-MoE's) loop in Python over all experts of a layer, each iteration "
                                         "launching 10 kernels (torch.where, which also waits for the GPU; the "
                                         "index of its tokens; gate, SiLU, up, product, down; the routing weights' "
                                         "index and product; index_add_), against 59 for a Qwen3 decoder layer in "
                                         "eager mode (two RMSNorms of 8, q/k/v/o projections, q/k RMSNorms of 8 "
                                         "each, RoPE on q and k 10, cache concatenation 2, repeat_kv 2, SDPA and "
                                         "its layout copy 2, two residual adds, the MLP 5): expert_dispatch_share "
                                         "10/59 of a layer's dispatch cost t_layer per (MoE layer, expert) and step"},
}


@lru_cache(maxsize=None)
def _stored() -> dict:
    return data.load_catalog("engine_profiles")


def get_profile(engine) -> EngineProfile:
    """The fitted profile of ``engine`` ('llama.cpp', 'vLLM', 'SGLang', 'TensorRT-LLM', 'transformers')."""
    name = canonical_engine(engine)
    e = _stored()["engines"][name]
    return EngineProfile(name, dict(e["params"]), e["prefill_chunk_tokens"], e["max_batch"], e["constants_source"],
                         e["points"], tuple(e["sources"]))


def _profile_from(name, params, points=0, sources=()) -> EngineProfile:
    c = _CONSTS[name]
    return EngineProfile(name, dict(params), c["prefill_chunk_tokens"], c["max_batch"], c["constants_source"],
                         points, tuple(sources))


# --- fitting: least squares on relative error, each engine shrunk towards the pooled fit -------------------------
#: Huber threshold of the robust fit: a point whose relative time error exceeds it counts with weight HUBER / |error|
HUBER = 0.3
ROBUST_ROUNDS = 6


def _theta(params: dict):
    import numpy as np
    return np.array([params[p] for p in PARAMS])


def _solve(X, y, prior, weight, zero=(), hold=None):
    """The robust fit of the points ``X``, ``y`` (:func:`_rows`): iteratively reweighted :func:`_solve_once` with
    Huber weights on the relative errors, so that a run far off every similar one (a broken measurement, a device
    quirk) cannot drag a whole profile; no point is dropped, each keeps a weight of at least HUBER / |its error|."""
    import numpy as np
    w = np.ones(len(y))
    theta = _solve_once(X, y, prior, weight, w, zero, hold)
    for _ in range(ROBUST_ROUNDS):
        res = np.abs(X @ _theta(theta) / y - 1)
        w = np.where(res <= HUBER, 1.0, HUBER / np.maximum(res, HUBER))
        theta = _solve_once(X, y, prior, weight, w, zero, hold)
    return theta


def _solve_once(X, y, prior, weight, w, zero=(), hold=None):
    """argmin Σ w_i ((x·θ - y)/y)² + Σ_j weight_j ((θ_j - prior_j)/scale_j)², with θ_j >= lower_j (fixed at the
    bound and refitted when the free solution crosses it), the parameters ``zero`` held at 0 and those in ``hold``
    at their prior. ``X``, ``y``: the points (:func:`_rows`), ``w`` their weights;
    ``weight``: one number, or {parameter: weight}."""
    import numpy as np
    fixed: dict[str, float] = {**dict.fromkeys(zero, 0.0), **{p: prior[p] for p in (hold or ())}}
    col = {p: i for i, p in enumerate(PARAMS)}
    sw = np.sqrt(w)
    for _ in range(len(PARAMS)):
        free = [p for p in PARAMS if p not in fixed]
        known = X[:, [col[p] for p in fixed]] @ np.array([fixed[p] for p in fixed]) if fixed else 0.0
        A = X[:, [col[p] for p in free]] * (sw / y)[:, None]
        b = sw * (1.0 - known / y)
        s = np.array([math.sqrt(weight[p] if isinstance(weight, dict) else weight) / _SCALE[p] for p in free])
        A = np.vstack([A, np.diag(s)])
        b = np.concatenate([b, s * np.array([prior[p] for p in free])])
        theta = np.linalg.lstsq(A, b, rcond=None)[0]
        sol = dict(zip(free, theta.tolist()))
        low = [p for p in free if sol[p] < _LOWER[p]]
        if not low:
            return {**fixed, **sol}
        worst = min(low, key=lambda p: (sol[p] - _LOWER[p]) / _SCALE[p])
        fixed[worst] = _LOWER[worst]
    return {**fixed, **dict.fromkeys([p for p in PARAMS if p not in fixed], 0.0)}


_WORK_CACHE: dict = {}


def _cached_work(r, name):
    """_work(r) for engine ``name``'s constants, cached on the record's content (a fit never changes it)."""
    key = (name, json.dumps(r, sort_keys=True))
    if key not in _WORK_CACHE:
        _WORK_CACHE[key] = _work(r, record_constants(r, _CONSTS[name]))
    return _WORK_CACHE[key]


def _rows(records, name):
    """The points of ``records`` for engine ``name``'s fit: (X, y), one row of X per record with its work in each
    of PARAMS (the floor's seconds each term multiplies), y its measured seconds."""
    import numpy as np
    vectors, times = [], []
    for r in records:
        y, w = _cached_work(r, name)
        x = w.vector()
        vectors.append([x[p] for p in PARAMS])
        times.append(y)
    return np.array(vectors, dtype=float).reshape(len(times), len(PARAMS)), np.array(times, dtype=float)


def _records(records) -> list[dict]:
    """``records`` (default: all shipped) as a list, each checked by :func:`check_record`."""
    if records is None:
        return _published()
    out = require_list("records", records, "a list of published-measurement records (dicts)")
    for i, r in enumerate(out):
        try:
            check_record(r)
        except (TypeError, ValueError) as e:
            raise type(e)(f"records[{i}]: {e}") from None
    return out


#: an engine's own points identify a term when the term's column is not reproduced by its other columns: a variance
#: inflation factor (1 / the share of the column's squared norm the others leave) over this limit marks it as not
#: identified, and it stays at the pooled value. Set in-sample: at 100 the full fit is unchanged (19 %, 84 %
#: in-sample), at 10 transformers' in-sample error goes from 39 % to 132 % (its distinct terms are held)
MAX_VIF = 100.0


def unidentified(X, y, limit: float = MAX_VIF) -> tuple:
    """The terms an engine's own points (``X``, ``y``: :func:`_rows`) cannot tell apart from its other terms: those
    whose column (each point's floor time of the term over its measured time, in the term's scale) the other columns
    reproduce to within 1 / ``limit`` of its squared norm. A term no point prices is left out (the prior alone sets
    it)."""
    import numpy as np
    cols = {p: X[:, i] * _SCALE[p] / y for i, p in enumerate(PARAMS)}
    active = [p for p in PARAMS if np.any(cols[p] > 0)]
    out = []
    for p in active:
        others = [cols[q] for q in active if q != p]
        left = 1.0
        if others:
            A = np.stack(others, axis=1)
            c = cols[p]
            left = float(np.sum((c - A @ np.linalg.lstsq(A, c, rcond=None)[0]) ** 2) / np.sum(c ** 2))
        if left * limit < 1.0:
            out.append(p)
    return tuple(out)


def _huber_sq(e):
    return e * e if abs(e) <= HUBER else HUBER * abs(e)


def engine_priors(rows, pooled) -> dict:
    """{engine: ({parameter: weight of the pull towards the pooled fit}, parameters held at the pooled value)} for
    the engines' points ``rows`` ({engine: (X, y)}, :func:`_rows`), by empirical Bayes: a first fit of every
    engine with the weak prior SHRINK_ENGINE gives the spread τ_j² of the engines' term j around the pooled value
    (mean over the engines whose points price it, in the term's scale) and the residual variance σ² of a point
    (Huber's loss, averaged over all points); the pull on term j is then σ² / τ_j², the prior weight of a normal
    prior of variance τ_j² against points of variance σ². Terms on which the engines agree are pulled hard, terms
    on which they differ are left to each engine's points; a term the engine's points do not identify
    (:func:`unidentified`) stays at the pooled value."""
    first = {n: _solve(*rows[n], pooled, SHRINK_ENGINE) for n in ENGINES if len(rows[n][1])}
    res = [float(e) for n in first for e in rows[n][0] @ _theta(first[n]) / rows[n][1] - 1]
    sigma2 = sum(_huber_sq(e) for e in res) / max(len(res), 1)
    priced = {n: {p for i, p in enumerate(PARAMS) if (rows[n][0][:, i] > 0).any()} for n in first}
    tau2 = {}
    for p in PARAMS:
        dev = [((first[n][p] - pooled[p]) / _SCALE[p]) ** 2 for n in first if p in priced[n]]
        tau2[p] = max(sum(dev) / len(dev), 1e-6) if dev else 1.0
    weight = {p: sigma2 / tau2[p] for p in PARAMS}
    return {n: (weight, unidentified(*rows[n])) for n in first}


def fit_profiles(records=None) -> dict:
    """Fit every engine's profile to ``records`` (default: all shipped). Returns {engine: EngineProfile}; the
    pooled fit of all engines is under the key None (the prior an engine with no points of its own gets)."""
    return _fit_profiles(_records(records))


def _fit_profiles(records: list[dict]) -> dict:
    by_engine = {name: [r for r in records if r["engine"] == name] for name in ENGINES}
    import numpy as np
    rows = {name: _rows(by_engine[name], name) for name in ENGINES}
    pooled = _solve(np.vstack([rows[n][0] for n in ENGINES]), np.concatenate([rows[n][1] for n in ENGINES]),
                    _FLOOR_PRIOR, SHRINK_GLOBAL, ENGINE_ONLY)
    out = {None: _profile_from("transformers", pooled, sum(len(rows[n][1]) for n in ENGINES))}
    out[None] = replace(out[None], engine="pooled")
    priors = engine_priors(rows, pooled)
    for name in ENGINES:
        if name in priors:
            weight, hold = priors[name]
            params = _solve(*rows[name], pooled, weight, hold=hold)
        else:
            params = dict(pooled)
        out[name] = _profile_from(name, params, len(rows[name][1]), sorted({source_of(r) for r in by_engine[name]}))
    return out


def predict_record(r: dict, profile: EngineProfile | None = None) -> dict:
    """{'measured', 'floor', 'predicted'} in the record's metric and unit (``predicted`` with ``profile``, default
    the stored profile of the record's engine)."""
    check_record(r)
    if profile is not None and not isinstance(profile, EngineProfile):
        raise TypeError(f"profile must be an EngineProfile (get_profile(...)) or None, got {type(profile).__name__}")
    return _predict_record(r, profile)


def _predict_record(r: dict, profile: EngineProfile | None) -> dict:
    profile = get_profile(r["engine"]) if profile is None else profile
    y, w = _cached_work(r, profile.engine if profile.engine in _CONSTS else r["engine"])
    return {"measured": float(r["value"]), "floor": _to_metric(r, w.floor, y),
            "predicted": _to_metric(r, profile.time(w), y)}


# --- held out: leave one source out ----------------------------------------------------------------------------
#: The three kinds of held-out point, by what the forecast could know about it (HeldOutReport.error_source)
ERROR_SOURCES = {
    "maximum-load": "maximum-load throughput: the batch the engine reached is not published, the profile assumes one",
    "one-source device": "a device no other source measured: held out, the profiles know it by its datasheet only",
    "the rest": "a stated batch on a device other sources measured too",
}


@dataclass(frozen=True)
class HeldOutReport:
    """Every record predicted by profiles fitted without its source: rows of (record, floor, predicted)."""

    rows: tuple
    by: str = "document"

    @staticmethod
    def _err(pred, meas, rate):
        return pred / meas - 1

    def _device_sources(self) -> dict:
        srcs: dict = {}
        for x in self.rows:
            srcs.setdefault(x[0]["device"], set()).add(source_of(x[0], self.by))
        return srcs

    @staticmethod
    def _kind(r: dict, srcs: dict) -> str:
        if r["metric"] == "output_throughput_tokens_per_s":
            return "maximum-load"
        return "one-source device" if len(srcs.get(r["device"], ())) <= 1 else "the rest"

    def error_source(self, r: dict) -> str:
        """Which of :data:`ERROR_SOURCES` a record of this report falls in, the first that fits: a maximum-load run
        (the batch the engine reached is not published, the profile assumes one); a device that no other source of
        the report measured (held out, the profiles know the device by its datasheet only); or the rest."""
        if not any(x[0] is r or x[0].get("id") == r.get("id") for x in self.rows):
            raise ValueError(f"r: a record of this report (one of its rows), got id {r.get('id')!r}")
        return self._kind(r, self._device_sources())

    def by_error_source(self) -> list:
        """For each of :data:`ERROR_SOURCES`: its points, held-out geomean |error|, share within ±30 % and its part
        of the summed |ln(predicted / measured)| (the parts add up to 1)."""
        srcs = self._device_sources()
        logs = [(self._kind(x[0], srcs), math.log(x[2] / x[0]["value"])) for x in self.rows]
        total = sum(abs(v) for _, v in logs) or 1.0
        out = []
        for name, why in ERROR_SOURCES.items():
            vals = [v for k, v in logs if k == name]
            n = len(vals)
            out.append({"group": name, "why": why, "points": n,
                        "geomean_abs_error": math.expm1(sum(map(abs, vals)) / n) if n else math.nan,
                        "within_30": sum(abs(math.expm1(v)) <= 0.30 for v in vals) / n if n else math.nan,
                        "share_of_error": sum(map(abs, vals)) / total})
        return out

    def stats(self, engine: str | None = None) -> dict:
        rows = [x for x in self.rows if engine is None or x[0]["engine"] == engine]
        out = {"points": len(rows)}
        for key in ("floor", "predicted"):
            logs = [abs(math.log(x[1 if key == "floor" else 2] / x[0]["value"])) for x in rows]
            within = [abs(x[1 if key == "floor" else 2] / x[0]["value"] - 1) <= 0.30 for x in rows]
            out[key] = {"geomean_abs_error": math.expm1(sum(logs) / len(logs)) if logs else math.nan,
                        "within_30": sum(within) / len(within) if within else math.nan}
        return out

    def worst(self, k: int = 10) -> list:
        return sorted(self.rows, key=lambda x: -abs(math.log(x[2] / x[0]["value"])))[:k]


def held_out(records=None, progress=False, by: str = "document") -> HeldOutReport:
    """Refit with each source left out and predict that source's records: ``by='document'`` (a whole publication:
    the strict test) or ``'table'`` (one table of a publication: the rest of the campaign stays in)."""
    require_choice("by", by, ("document", "table"))
    progress = require_flag("progress", progress)
    records = list(_records(records))
    sources = sorted({source_of(r, by) for r in records})
    rows = []
    for i, s in enumerate(sources):
        if progress:
            print(f"  [{i + 1}/{len(sources)}] leaving out {s[:90]}", file=sys.stderr)
        fitted = _fit_profiles([r for r in records if source_of(r, by) != s])
        for r in records:
            if source_of(r, by) == s:
                p = _predict_record(r, fitted[r["engine"]])
                rows.append((r, p["floor"], p["predicted"]))
    return HeldOutReport(tuple(rows), by)


_REASONS = (
    (lambda r: r["engine"] == "transformers" and r["model"] == "qwen3-30b-a3b",
     "transformers' MoE path (4.51) loops over all 128 experts of each layer in Python (priced as 10/59 of a "
     "layer's dispatch per expert); each iteration's torch.where also waits for the GPU, which that count omits"),
    (lambda r: r["engine"] == "SGLang" and r["device"] == "h20" and r["batch"] == 1,
     "held out by document, SGLang's own points are GPUStack's two maximum-load runs, which identify none of its "
     "terms: the pooled profile prices its batch-1 H20 steps"),
    (lambda r: r["device"] == "h20", "H20: one source only, whose runs sit several times further from the floor than "
     "the same engines elsewhere (a device or setup effect no other source shows)"),
    (lambda r: r["metric"] == "output_throughput_tokens_per_s",
     "maximum-load throughput: the batch the engine reached is not published (the model assumes as many "
     "sequences as its default KV memory holds, capped by its batch limit and the benchmark's request count)"),
    (lambda r: r["device"] == "a100-80gb" and r["precision"] == "fp16" and r["metric"] == "prefill_tokens_per_s"
     and r["model"] == "llama-3-8b", "the A100 SXM F16 prefill row is ~10x below every other GPU's (a run problem "
     "in the source)"),
    (lambda r: r["device"] == "l40s" and r["precision"] == "fp16" and r["metric"] == "prefill_tokens_per_s",
     "the L40S F16 prefill row is 2-3x below its Q4_K_M row and rises with the prompt (a run problem in the "
     "source)"),
    (lambda r: r["device"] == "m3" and r["precision"] == "fp16", "the run used the M3's CPU (-ngl 0, 4 threads: "
     "13.5 GB of f16 weights do not fit the GPU's working set on a 16 GB Mac), while the forecast prices its GPU"),
    (lambda r: first_batch_timing(r) and _nvidia_gpu(get_hardware(r["device"])),
     "llama.cpp's ./main timed this prompt as one batch right after loading (its warm-up is a 2-token batch), so "
     "that build's one-time costs (the CUDA memory pool growing by cudaMalloc, the first launch of each matrix "
     "kernel) and its copy of every prompt token's logits to the host fall inside it; llama-bench, which the May "
     "2024 rows used, warms up and averages five runs"),
    (lambda r: first_batch_timing(r),
     "llama.cpp's ./main timed this prompt as one batch right after loading (its warm-up is a 2-token batch), not "
     "warmed up and averaged over runs as llama-bench's rows are"),
    (lambda r: r["engine"] == "llama.cpp" and r["device"].startswith("h100") and r["metric"].startswith("prefill"),
     "likely llama.cpp's CUDA matrix kernels (Ampere-era mma instructions, no Hopper wgmma) reaching a smaller "
     "share of the H100's datasheet peak than of the A100's, which share one device class in the profile"),
    (lambda r: r["device"] in ("a40", "rtx-6000-ada") and r["metric"].startswith("prefill"),
     "likely power: a workstation card held to its board power (300 W on both datasheets) runs long "
     "compute-bound prompt steps below the boost clock its datasheet peak assumes"),
    (lambda r: r["device"] == "m1-7c", "the 7-core M1's effective fp16 rate is the M1 Max's per-core rate times 7 "
     "(no measurement of its own): its prompt steps are forecast from a bigger chip"),
    (lambda r: r["metric"].startswith("prefill") and "prompt_tokens" in r.get("assumed", ()),
     "the source states no prompt length (the record assumes one): prefill speed depends on it"),
    (lambda r: r["engine"] == "vLLM" and r["engine_version"].startswith("vLLM 0.4")
     and r["prompt_tokens"] + r["output_tokens"] > 8192,
     "vLLM 0.4 captures CUDA graphs for sequences up to max_context_len_to_capture = 8192 tokens and decodes longer "
     "ones in eager mode: the Qwen2 table's 0.5B and 1.5B runs halve their speed from the 6144- to the "
     "14336-token prompt"),
    (lambda r: r["metric"] in ("total_tokens_per_s", "generation_tokens_per_s") and r["prompt_tokens"] > 30000,
     "very long prompts: prefill attention dominates and the engines' kernels differ most there"),
    (lambda r: r["engine"] in ("SGLang", "vLLM", "TensorRT-LLM") and len({source_of(x) for x in _published()
                                                                           if x["engine"] == r["engine"]}) == 1,
     "the only source for this engine: held out, the engine gets the pooled profile of the others"),
)


def first_batch_timing(r: dict) -> bool:
    """Whether record ``r``'s prompt speed is llama.cpp ``./main``'s timing of the first large batch after loading
    (its engine version says "./main's prompt-eval"; main's warm-up is a 2-token batch), not a warmed-up average
    such as llama-bench's pp512: one-time costs of the build fall inside it, which no profile term prices."""
    check_record(r)
    return (r["engine"] == "llama.cpp" and "./main's prompt-eval" in r["engine_version"]
            and r["metric"] in ("prefill_tokens_per_s", "prefill_ms_per_token"))


def decoding_concurrency(r: dict) -> float | None:
    """The sequences a maximum-load run kept decoding at once, on average, by its own published figures: output
    tokens per second times the mean time per output token (Little's law: each sequence in flight adds one token
    per TPOT), at most the requests the benchmark sent. An estimate: the mean TPOT is taken over requests, not
    tokens. None where the record carries no mean TPOT (``run_figures``) or is not a maximum-load run."""
    fig = r.get("run_figures") or {}
    if r.get("metric") != "output_throughput_tokens_per_s" or "mean_tpot_ms" not in fig:
        return None
    n = float(r["value"]) * fig["mean_tpot_ms"] / 1000
    sent = benchmark_requests(r)
    # the mean of the requests' TPOTs weights a short request like a long one: where a few slow short requests
    # inflate it past the requests sent, no more than those were in flight
    return min(n, sent) if sent else n


def assumed_batch(r: dict) -> int | None:
    """The sequences in flight the profile assumes for a maximum-load record: as many as the engine's default KV
    memory holds, capped by its batch limit and the benchmark's request count (None for other metrics)."""
    check_record(r)
    if r["metric"] != "output_throughput_tokens_per_s":
        return None
    c = record_constants(r, _CONSTS[r["engine"]])
    return _run_batch(r, _run_model(r, c), c)


def _run_model(r: dict, consts: dict):
    """The record's model as the run's engine sees it (an engine that ignores the sliding window keeps every K/V)."""
    m = get_model(r["model"])
    return replace(m, sliding_window=None) if consts.get("full_attention") and m.sliding_window is not None else m


def _run_batch(r: dict, m, consts: dict) -> int:
    """Sequences in flight at maximum load for record ``r`` (:func:`_max_load_batch` with the run's constants)."""
    return _max_load_batch(m, get_hardware(r["device"]), r["precision"], _kv_for(r) or consts.get("kv_precision"),
                           r["prompt_tokens"], r["output_tokens"], consts.get("max_batch") or 2048,
                           of_total=consts.get("kv_share_of_total"))


def reason(r: dict) -> str:
    n = decoding_concurrency(r)
    if n is not None:
        fig = r["run_figures"]
        med = f", median {fig['median_tpot_ms']:g} ms" if "median_tpot_ms" in fig else ""
        return (f"maximum-load throughput, batch unpublished (the profile assumes {assumed_batch(r)} in flight); "
                f"the run's own mean TPOT was {fig['mean_tpot_ms']:g} ms{med}, so about {n:.0f} sequences decoded "
                f"at once (output tokens/s x mean TPOT)")
    for test, why in _REASONS:
        if test(r):
            return why
    return "no known cause"


def published_report(progress=True, by="document") -> tuple[HeldOutReport, str]:
    """The held-out benchmark: (report, text) with per-engine and overall tables and the worst points."""
    rep = held_out(progress=progress, by=by)
    lines = [f"Held-out forecasts of published measurements (leave one {by} out; geomean |error| = "
             "exp(mean |ln(predicted/measured)|) - 1)", "",
             f"{'engine':<14}{'points':>7}{'sources':>8}   {'floor: geomean':>15}{'within 30%':>11}   "
             f"{'profile: geomean':>17}{'within 30%':>11}"]
    for name in list(ENGINES) + [None]:
        st = rep.stats(name)
        if not st["points"]:
            continue
        nsrc = len({source_of(x[0], by) for x in rep.rows if name is None or x[0]["engine"] == name})
        lines.append(f"{name or 'overall':<14}{st['points']:>7}{nsrc:>8}   "
                     f"{st['floor']['geomean_abs_error']:>14.0%}{st['floor']['within_30']:>11.0%}   "
                     f"{st['predicted']['geomean_abs_error']:>16.0%}{st['predicted']['within_30']:>11.0%}")
    lines += ["", "Where the held-out error sits (share: the group's part of the summed |ln(predicted/measured)|):",
              f"{'group':<19}{'points':>7}{'geomean':>9}{'within 30%':>12}{'share':>7}   what sets it apart"]
    for grp in rep.by_error_source():
        if grp["points"]:
            lines.append(f"{grp['group']:<19}{grp['points']:>7}{grp['geomean_abs_error']:>9.0%}"
                         f"{grp['within_30']:>12.0%}{grp['share_of_error']:>7.0%}   {grp['why']}")
    lines += ["", "Worst held-out points (predicted / measured):"]
    for r, fl, pr in rep.worst(12):
        lines.append(f"  {pr / r['value']:6.2f}x  {r['id']:<46} — {reason(r)}")
    st = rep.stats()
    lines += ["", f"overall ({by}s held out): {st['points']} points, held-out geomean |error| "
              f"{st['predicted']['geomean_abs_error']:.0%}"
              f" (floor {st['floor']['geomean_abs_error']:.0%}), {st['predicted']['within_30']:.0%} within ±30 % "
              f"(floor {st['floor']['within_30']:.0%}); target <= 15 % and >= 90 %: "
              + ("met" if st['predicted']['geomean_abs_error'] <= 0.15 and st['predicted']['within_30'] >= 0.9
                 else "NOT met")]
    return rep, "\n".join(lines)


def published_main(progress: bool = True) -> int:
    """``python -m course_lib.measure.validate --published``: the held-out tables by document and by table."""
    _, text = published_report(progress=progress)
    _, by_table = published_report(progress=progress, by="table")
    print(text)
    print("")
    print("The same, leaving out one TABLE at a time (the rest of its publication stays in the fit):")
    print("\n".join(by_table.splitlines()[2:]))
    return 0


# --- estimate(..., engine=...) -----------------------------------------------------------------------------------
def _require_estimate(est) -> None:
    from course_lib.core.estimator import Estimate   # the estimator imports this module
    if not isinstance(est, Estimate):
        raise TypeError(f"est must be an Estimate (from course_lib.estimate(...)), got {type(est).__name__}")


def with_engine(est, engine):
    """``est`` (a floor :class:`Estimate` at efficiency 1) with the engine's times: TTFT = its prefill under the
    profile plus one request's fixed cost, each decode step the profile's time at that context. ``engine``: a name
    (the stored profile) or an :class:`EngineProfile` (e.g. one of :func:`fit_profiles`' held-out fits)."""
    _require_estimate(est)
    prof = engine if isinstance(engine, EngineProfile) else get_profile(engine)
    cls = device_class(est.hardware)
    sp = _gemm_speedup(est.hardware, _CONSTS[prof.engine])
    share = _CONSTS[prof.engine].get("expert_dispatch_share", 0.0)
    pf = _prefill_work(est, cls, prof.prefill_chunk_tokens, 1, sp, share)
    first, last = (_decode_parts(est, p, cls, sp, share) for p in (est.decode_first, est.decode_last))
    t_first, t_last = prof.time(first), prof.time(last)
    steps = est.new_tokens - 1
    # per-step costs are linear in the context (the estimator sums them in closed form): the profile's mean step is
    # the mean of its first and last steps, exactly, for a model without a window
    t_sum = (t_first + t_last) / 2 * steps
    return replace(est, engine=prof.engine, engine_ttft=prof.time(pf), engine_tpot_sum=t_sum,
                   engine_tpot_first=t_first, engine_tpot_last=t_last)


def decode_step_terms(est, engine=None) -> dict:
    """The last decode step of ``est`` under an engine's profile, split as :meth:`EngineProfile.terms` (seconds),
    with the floor's time of the same step under 'floor'. ``engine``: a name or profile (default ``est.engine``)."""
    _require_estimate(est)
    engine = est.engine if engine is None else engine
    if engine is None:
        raise ValueError("engine: the estimate has no engine; pass engine='vLLM' (or another) or estimate with one")
    prof = engine if isinstance(engine, EngineProfile) else get_profile(engine)
    cls = device_class(est.hardware)
    c = _CONSTS[prof.engine]
    w = _decode_parts(est, est.decode_last, cls, _gemm_speedup(est.hardware, c), c.get("expert_dispatch_share", 0.0))
    return {**prof.terms(w), "floor": est.decode_last.time}


# --- storing the fit ----------------------------------------------------------------------------------------------
def _digest() -> str:
    """sha256 of the published set's canonical JSON (sorted keys): changes whenever a record does."""
    canon = json.dumps(data.load_catalog("published_validation"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()


def profiles_document(fitted=None) -> dict:
    fitted = fit_profiles() if fitted is None else fitted
    engines = {}
    for name in ENGINES:
        p = fitted[name]
        X, y = _rows([r for r in _published() if r["engine"] == name], name)
        engines[name] = {"params": {k: round(v, 9) for k, v in p.params.items()}, "points": p.points,
                         "held_at_pooled": list(unidentified(X, y)) if len(y) else list(PARAMS),
                         "sources": list(p.sources), "prefill_chunk_tokens": p.prefill_chunk_tokens,
                         "max_batch": p.max_batch, "constants_source": p.constants_source}
    return {
        "_about": ("Engine profiles (course_lib.core.forecast) FITTED by `python -m course_lib.core.forecast --refit` "
                   "(fit_profiles) to every record of the published_validation catalog: least squares on "
                   "relative time error, each engine shrunk towards the pooled fit of all engines (per term, by "
                   "empirical Bayes; held_at_pooled: the terms its own points do not identify). Parameters: t_step "
                   "(s per forward step), t_layer (s per layer per step), t_req (s per request), t_tok (s per "
                   "token processed), kappa_x (passes over the K/V cache expanded to every query head), kappa_dq "
                   "(passes, at peak bandwidth, over the 4 bytes per weight of an f16 copy of quantised weights in "
                   "llama.cpp builds that multiplied through cuBLAS), t_eager (s per layer and step run without a "
                   "captured CUDA graph: trtllm-serve's steps outside its default graph batch sizes); t_tok, kappa_x, "
                   "kappa_dq and t_eager are each "
                   "engine's own: the pooled fit keeps them at 0), inv_eta_m:<class> and "
                   "inv_eta_c:<class> (1 / the bandwidth and GEMM efficiency per device class: hbm, gddr, "
                   "unified, cpu; the GEMM efficiency also for hopper, NVIDIA's Hopper GPUs), inv_eta_a "
                   "(1 / attention's efficiency); an engine with no points for a class keeps the pooled value. "
                   "The constants (prefill_chunk_tokens, max_batch) are the engines' documented defaults, not fitted."),
        "fitted_from": {"catalog": "published_validation", "sha256_canonical_json": _digest(),
                        "records": fitted[None].points, "code": "course_lib.core.forecast.fit_profiles",
                        "shrinkage": {"pooled_towards_floor": SHRINK_GLOBAL, "engine_first_pass": SHRINK_ENGINE,
                                      "engine_towards_pooled": "empirical Bayes, sigma^2 / tau_j^2 per term "
                                                               "(engine_priors)",
                                      "max_vif": MAX_VIF},
                        "engine_only": list(ENGINE_ONLY),
                        "lower_bounds": _LOWER},
        "pooled": {k: round(v, 9) for k, v in fitted[None].params.items()},
        "engines": engines,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_lib.core.forecast", description=__doc__.splitlines()[0])
    ap.add_argument("--refit", action="store_true", help="refit the profiles and rewrite engine_profiles.json")
    ap.add_argument("--check", action="store_true", help="exit 1 if the stored profiles differ from a refit")
    ns = ap.parse_args(argv)
    doc = profiles_document()
    path = _DATA / "engine_profiles.json"
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    if ns.check:
        ok = path.exists() and path.read_text() == text
        print("engine_profiles.json is up to date" if ok else "engine_profiles.json is out of date: --refit")
        return 0 if ok else 1
    if ns.refit:
        path.write_text(text)
        print(f"wrote {path}")
    for name in ENGINES:
        p = doc["engines"][name]
        print(_profile_from(name, p["params"], p["points"], p["sources"]).describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
