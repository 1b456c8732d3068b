"""Fuzz the public API: every public callable, one hostile value per argument, each outcome classified.

Lessons: none

    python -m course_lib.authoring.fuzz_api              # every callable, every hostile value
    python -m course_lib.authoring.fuzz_api --sample 500 --seed 1   # a seeded sample of the calls
    python -m course_lib.authoring.fuzz_api --callables 40 --all     # a seeded sample of the callables
    python -m course_lib.authoring.fuzz_api --only relative_error fixed_cost_reading --examples 5

The callables are the ``__all__`` of ``course_lib`` and ``course_lib.core`` (the flattened core), of the core
modules it does not flatten (``numeric``, ``quality``, ``serving``, ``app``, ``forecast``, ``core.claims.*``),
the torch-free arithmetic of ``course_lib.measure`` that a lesson calls without timing anything
(:data:`MEASURE_NAMES`) and the public helpers of ``course_lib.checks`` (:data:`CHECKS_NAMES`). Dataclasses
without ``__post_init__`` are records the library builds and returns, not inputs; they are listed, not fuzzed.

For each callable a *baseline* call is found first: every required argument gets the first value of its
candidates (:data:`BASELINES` for the callable, :data:`VALID` by argument name, then :data:`GENERIC`) that the
callable accepts; a callable without one is listed. Then each argument in turn (required or not; not the
:data:`DEVELOPER_ARGUMENTS` a library caller sets) is replaced by each value of :data:`HOSTILE` (0, negatives,
nan, +-inf, 10**400, huge ints, bools, text, None, numpy arrays, lists, wrong catalog names, empty containers).
Each call is:

* ``value``   a sensible result: finite, no nan, no undocumented inf or negative number (:func:`problems`);
* ``error``   a clear error: a ValueError, TypeError or KeyError whose message names the replaced argument
  (or its item, ``model`` for ``models``, or a word :data:`ALIASES` records);
* ``nonsense`` silent nonsense: nan, inf or a negative number in the result, or a nan / infinity accepted
  as an argument (a verdict read from nan means nothing);
* ``unclear`` anything else: a message that does not name the argument, or another exception
  (OverflowError, ZeroDivisionError, RecursionError, numpy's "truth value of an array is ambiguous", ...);
* ``slow``    a call stopped after :data:`TIME_LIMIT_S` (e.g. a simulation of 10**6 requests, within the
  simulator's documented MAX_REQUESTS): not judged, but counted and listed.

It prints one table row per callable that is not all ``value``/``error``, and a last summary line::

    calls 47480  value 5330  error 42146  nonsense 0  unclear 0  slow 4  (316 callables, 51 records not fuzzed, 0 ...)

(the same run on the library before issue 32's fixes: 47,040 calls, nonsense 437 in 40 callables, unclear 1,882 in
67, among them 48 numpy "truth value" errors and 28 OverflowErrors). Exit status 1 when a call returned nonsense
or raised an unclear error.

``tests/test_api_fuzz.py`` runs a deterministic sample in the suite; ``tests/test_api_edges.py`` reuses the
classifier (:func:`outcome`, :func:`problems`) for its hypothesis strategies.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import io
import math
import numbers
import random
import signal
import sys
import time
from collections import Counter
from fractions import Fraction

import numpy as np

TIME_LIMIT_S = 2.0
#: callables whose valid call does a whole catalog's work by design, with their own limit (seconds): the held-out
#: benchmark refits the engine profiles once per published document (about 1 s alone, more beside other tests)
TIME_LIMITS = {"published_report": 30.0, "held_out": 30.0}

#: (label, value): what every argument is replaced with, one at a time
HOSTILE: list[tuple[str, object]] = [
    ("0", 0), ("0.0", 0.0), ("-1", -1), ("-0.5", -0.5), ("0.5", 0.5), ("1e-300", 1e-300), ("5e-324", 5e-324),
    ("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("1e308", 1e308), ("-1e308", -1e308),
    ("10**400", 10**400), ("-10**400", -(10**400)), ("2**63", 2**63), ("10**15+1", 10**15 + 1),
    ("True", True), ("False", False), ("None", None), ("''", ""), ("'14'", "14"), ("'nan'", "nan"),
    ("'no-such-name'", "no-such-name"), ("b'512'", b"512"), ("np.array([1, 2])", np.array([1, 2])),
    ("np.array(['1', '2'])", np.array(["1", "2"])), ("np.array(3.0)", np.array(3.0)),
    ("np.float64(nan)", np.float64("nan")), ("np.int64(-3)", np.int64(-3)), ("3j", 3j),
    ("10**6", 10**6), ("1e12", 1e12), ("Fraction(10**400)", Fraction(10**400)),
    ("[]", []), ("[1, 2]", [1, 2]), ("[nan]", [math.nan]),
    ("[-1.0, 2.0]", [-1.0, 2.0]), ("{}", {}), ("()", ()), ("object()", object()),
]

#: valid values by argument name, tried in order until the baseline call is accepted
VALID: dict[str, list] = {
    "model": ["mistral-7b"], "models": [["mistral-7b", "llama-3-8b"]], "hardware": ["h100-sxm"], "hw": ["h100-sxm"],
    "precision": ["fp16"], "kv_precision": ["fp16"], "activation_precision": ["fp16"], "compute_dtype": ["fp16"],
    "dtype": ["fp16"], "name": ["fp16", "mistral-7b", "weight_bytes", "ex01", "x_arg"], "engine": ["vllm", "hf"],
    "metric": ["tpot"], "algorithm": ["ring"], "collective": ["all-reduce"], "ceilings": ["datasheet"],
    "phase": ["decode"], "direction": ["lower"], "relation": ["close"], "verdict": ["reliable"],
    "dimension": ["bytes"], "convention": ["si"], "system": ["si"], "unit": ["s"], "text": ["14 GB", "1"],
    "record_id": ["llamacpp-llama-2-7b-f16-rtx-4080-16gb"], "case": ["c"], "source": ["published"],
    "label": ["x"], "description": [""], "doc": [""], "by": ["group"], "where": ["x"], "problem": [""],
    "options": [("fp16", "bf16")], "value": [1.0, "fp16"], "values": [[1.0, 2.0]], "name_or_expr": ["weight_bytes"],
    "state": [lambda: _core("DashboardState")()],
    "plan": [lambda: _core("continuous_plan")(_core("DashboardState")(prompt_tokens=64, new_tokens=8), 10)],
    "result": [lambda: _core("compute")(_core("DashboardState")())],
    "spec": [lambda: _core("get_model")("mistral-7b")],
    "estimate": [lambda: _core("estimate")("mistral-7b", "h100-sxm", 512, 128)], "est": [
        lambda: _core("estimate")("mistral-7b", "h100-sxm", 512, 128)],
    "requests": [[[1, 2, 3, 4], [1, 2, 3, 5]], 10], "prompts": [[[1, 2, 3, 4], [1, 2, 3, 5]]],
    "rows": [lambda: list(_core("published_cases")()), 64], "row": [lambda: _core("published_cases")()[0]],
    "times": [[0.010, 0.011, 0.012, 0.010, 0.011]], "timings": [[[0.010, 0.011, 0.012], [0.020, 0.021, 0.022]]],
    "timing": [[0.010, 0.011, 0.012, 0.010, 0.011]], "measured": [[0.010, 0.011, 0.012, 0.010, 0.011], 0.01],
    "a_times": [[0.010, 0.011, 0.012]], "b_times": [[0.020, 0.021, 0.022]],
    "xs": [[1.0, 2.0, 3.0]], "ys": [[2.0, 4.0, 6.0]], "batches": [[1, 8, 32]], "budgets_bytes": [[1e3, 1e6]],
    "module_tokens": [[100, 200, 300]], "cached": [[True, False, True], True, 0], "new_tokens": [128, [64, 128]],
    "decode": [[(128, 0.01)]], "prefill": [[(128, 0.05)]], "sizes": [[(64, 64)]],
    "config": [{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100}],
    "block": [(1, 2)], "parent_key": [None], "formats": [(("mlp", "fp16"),)],
    "a": [lambda: _core("published_cases")()[0], 1.0], "b": [lambda: _core("published_cases")()[1], 1.0],
}
def _timings():
    return [0.010, 0.011, 0.012, 0.010, 0.011]


#: baselines of callables whose arguments the name table cannot guess (short name -> {argument: value});
#: a callable here and its other required arguments still go through :func:`baseline`
BASELINES: dict[str, dict] = {
    "require_flag": {"name": "x_arg", "value": True},
    "format_quantity": {"q": lambda: _core("parse_quantity")("14 GB")},
    "Layout": {"name": "l", "formats": lambda: tuple((grp, "fp16") for grp in _core("WEIGHT_GROUPS"))},
    "load_catalog": {"name": "hardware"},
    "PrefixCache": {"block_tokens": 4, "capacity_bytes": 1e6, "bytes_per_token": 2.0},
    "simulate": {"requests": [[1, 2, 3, 4], [1, 2, 3, 5]], "block_tokens": 2, "capacity_bytes": 1e6,
                 "bytes_per_token": 2.0},
    "serving.simulate": {"model": "mistral-7b", "hardware": "h100-sxm", "arrival_rate": 1.0, "prompt_tokens": 128,
                         "output_tokens": 16, "requests": 20},
    "machine_cases": {"model": "mistral-7b", "hardware": "h100-sxm", "decode": [(128, 0.02)]},
    "find": {"rows": lambda: list(_core("published_cases")()), "case": lambda: _core("published_cases")()[0].case},
    "fixed_cost_fit_rate_fraction": {"predicted_a": 1.0, "predicted_b": 2.0, "measured_a": 1.5, "measured_b": 2.5},
    "settles": {"beyond": 0.1, "timings": lambda: [_module("quality").timing_verdict(_timings())]},
    "trend": {"xs": [1, 2, 3], "times_per_x": [_timings(), [t * 2 for t in _timings()], [t * 3 for t in _timings()]]},
    "summarize_verdicts": {"items": ["reliable", "noisy"]},
    "read_cpu_steal": {"before": "cpu  1 2 3 4 5 6 7 8 0 0\n", "after": "cpu  2 3 4 5 6 7 8 9 0 0\n"},
    "weighted_percentile": {"pairs": [(0.01, 3), (0.02, 1)], "q": 50},
    "continuous_batching_plan": {"users": 10, "prompt_tokens": 128, "output_tokens": 16},
    "kv_transfer": {"prompt_tokens": 128, "output_tokens": 16, "link_bandwidth": 50e9},
    "device_word": {"hw": lambda: _core("get_hardware")("h100-sxm")},
    "is_gpu": {"hw": lambda: _core("get_hardware")("h100-sxm")},
    "memory_words": {"hw": lambda: _core("get_hardware")("h100-sxm")},
    "parse_time_field": {"text": "50 ms", "unit": "ms", "label": "TTFT budget"},
    "check_record": {"r": lambda: _module("forecast").load_published()[0]},
    "predict_record": {"r": lambda: _module("forecast").load_published()[0]},
    "decode_step_terms": {"est": lambda: _core("estimate")("mistral-7b", "h100-sxm", 512, 128, engine="vLLM")},
    "assumed_batch": {"r": lambda: next(r for r in _module("forecast").load_published() if r.get("run_figures"))},
    "decoding_concurrency": {"r": lambda: next(r for r in _module("forecast").load_published()
                                               if r.get("run_figures"))},
    "build_month": {"text": "llama.cpp (Dec 2023 build)"},
    "calibrated_summary": {"cases": lambda: [_module("claims.caching").model_case("a", 0.01, 0.011)]},
    "same_step": {"timings": {"a": _timings(), "b": _timings()}},
    "below_roof": {"fractions": {"a": 0.5, "b": 0.8}},
    "single_max_vs_operators": {"phase": lambda: _core("estimate")("mistral-7b", "h100-sxm", 512, 128).prefill},
    "cmath_isclose": {"a": 1 + 2j, "b": 1 + 2j},
}


def _row(n: int, dtype: str = "fp32", rotate: bool = True, scale: float = 1.0) -> dict:
    """A GEMV row as lesson 05's probe records it (shape, dtype, bytes moved, per-run seconds)."""
    size = {"fp32": 4, "fp16": 2}[dtype]
    return {"m": n, "k": n, "dtype": dtype, "rotate": rotate, "bytes": (n * n + 2 * n) * size,
            "times": [t * scale * n * n / 1e6 for t in _timings()]}


_PREFIX = {"full_seconds": 0.05, "cached_seconds": 0.01, "repeats": 5, "prefix_tokens": 1024, "new_tokens": 32,
           "full_q1": 0.049, "full_q3": 0.051, "cached_q1": 0.0098, "cached_q3": 0.0102}
_COPY = {"bytes": 1e8, "times": [0.010, 0.0101, 0.0102, 0.0100, 0.0101]}
BASELINES.update({
    "gemv_vs_copy": {"gemv": lambda: _row(1024), "copy": _COPY},
    "small_matrix": {"row": lambda: _row(64), "copy": _COPY},
    "dtype_speed": {"half": lambda: _row(1024, "fp16", scale=0.6), "fp32": lambda: _row(1024)},
    "dtype_summary": {"rows": lambda: [_row(1024), _row(1024, "fp16", scale=0.6)]},
    "time_vs_size": {"rows": lambda: [_row(256), _row(1024), _row(4096)]},
    "calibration": {"bandwidth": 1e10, "copy": _COPY, "rows": lambda: [_row(1024), _row(4096)]},
    "cache_reuse": {"rotated": lambda: [_row(1024), _row(4096)],
                    "same": lambda: [_row(1024, rotate=False, scale=0.5), _row(4096, rotate=False, scale=0.9)],
                    "llc_bytes": 32 * 2**20},
    "beyond_cache": {"rotated": lambda: [_row(1024), _row(4096)],
                     "same": lambda: [_row(1024, rotate=False, scale=0.5), _row(4096, rotate=False, scale=0.9)],
                     "llc_bytes": 32 * 2**20},
    "decode_from_gemv": {"weight_bytes": {"fp32": 2.8e10, "fp16": 1.4e10},
                         "rows": lambda: [_row(4096), _row(4096, "fp16", scale=0.6)]},
    "engine_time_split": {"terms": {"weights": 0.01, "kv": 0.002, "overhead": 0.003}},
    "steady_state_search": {"decode_tpot": lambda: (lambda c: 0.01 + 1e-4 * c), "memory": lambda: (lambda c: 1e9 * c),
                            "t_pf": 0.05, "n": 128, "limit": 64e9, "tpot_budget": 0.05, "ttft_budget": None,
                            "cap_c": 256},
    "reading": {"values": {"model": "mistral-7b", "hardware": "h100-sxm", "batch": 4}},
    # lesson 07's measurement records, as dicts of their fields
    "prefix_timings": {"measurement": _PREFIX},
    "prefix_cache": {"measurement": _PREFIX},
    "session_cache": {"measurement": {"ttft_nocache": (0.02, 0.03, 0.04), "ttft_cached": (0.02, 0.012, 0.013),
                                      "repeats": 3}},
    "largest_gap": {"profile": {"matrix products": 0.2, "softmax and masking": 0.08, "other": 0.03, "total": 0.31},
                    "terms": {"linear": 0.15, "attention": 0.1, "scores": 0.17, "overhead": 0.001, "views": 0.0003},
                    "measured_seconds": 0.40},
    "module_positions": {"agreement": {
        "prefix_exact": {"top1_agreement": 0.1, "max_abs_diff": 1.6, "kl_mean": 1e-14},
        "modules_in_place": {"top1_agreement": 0.1, "max_abs_diff": 1.6, "kl_mean": 0.060},
        "modules_at_zero": {"top1_agreement": 0.1, "max_abs_diff": 1.6, "kl_mean": 0.061},
        "module_tokens": (256,) * 3, "new_tokens": 32}},
    "calibrated_cases": {"prefix": _PREFIX, "session": {"ttft_nocache": (0.02, 0.03, 0.04),
                                                        "ttft_cached": (0.02, 0.012, 0.013), "repeats": 3},
                         "prefix_pred": {"ttft_miss": 0.05, "ttft_hit": 0.011},
                         "session_pred": {"total_nocache": 0.09, "total_cached": 0.045}},
    # lesson 08's engine records, as dicts of their fields
    "engine_row": {"timing": {"prompt": 128, "new_tokens": 16, "ttft": 0.3, "tpot": 0.05}, "model": "gpt2",
                   "params": 124_439_808, "weight_bytes": 4.9e8},
    "engine_overhead": {"probe": {"step_fixed": 0.281e-3, "step_per_layer": 0.305e-3, "layers": (2, 4), "clamped": (),
                                  "decode": ({"step_times": [0.89e-3 * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]},
                                             {"step_times": [1.5e-3 * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]})},
                        "prediction": {"terms": {"engine": 1.43 * (0.281e-3 + 12 * 0.305e-3), "logits": 26e-6},
                                       "counts": {"layers": 12, "cold_factor": 1.43}}},
})


def _module(name: str):
    return importlib.import_module(f"course_lib.core.{name}")


#: values tried for an argument not in VALID (a count, a quantity, a fraction, a name, a list)
GENERIC = [1, 0.5, 1e9, 10, "x", [1.0, 2.0], None]

#: core modules not flattened into course_lib.core, fuzzed through their own ``__all__``
MODULES = ["course_lib", "course_lib.core", "course_lib.core.numeric", "course_lib.core.quality",
           "course_lib.core.serving", "course_lib.core.app", "course_lib.core.forecast",
           "course_lib.core.claims.caching", "course_lib.core.claims.compare", "course_lib.core.claims.gemv",
           "course_lib.core.claims.phases"]
#: the arithmetic of course_lib.measure a lesson calls without timing anything
MEASURE_NAMES = ["probes.gemv_bytes", "probes.gemv_flops", "probes.cache_verdict", "probes.rotation_buffers",
                 "probes.beyond_cache_size", "probes.gemv_shapes", "sysinfo.parse_cpu_list", "sysinfo.parse_size",
                 "timing.quartiles"]
#: the public helpers of course_lib.checks
CHECKS_NAMES = ["is_placeholder", "cmath_isclose", "load_set", "questions", "available_sets"]

#: (function name -> paths inside the result) where a documented value may be infinite or negative;
#: "" is the whole result
DOCUMENTED: dict[str, dict[str, tuple[str, ...]]] = {
    "inf": {
        "crossover_context": ("",),             # a sliding-window model whose cache never outgrows the weights
        "tokens_that_fit": ("",),               # ... or whose whole window fits
        "PrefixCache": ("capacity_bytes",),     # math.inf: an unbounded cache
        "simulate": ("capacity_bytes",),
        # "never" under a sliding window whose cache stays below the weights
        "kv_crossover": ("context", "tokens_that_fit", "context_times_batch"),
        "KVCrossover": ("context", "tokens_that_fit", "context_times_batch"),
    },
    "negative": {
        "fixed_cost_fit": ("[0]",),             # the fitted fixed time t0 (an intercept)
        "fixed_cost_fit_fixed_time": ("",),     # the same intercept, as a formula (numeric.SIGNED)
        "default_hash": ("",),                  # a hash
        "relative_error": ("",),                # (predicted - measured) / measured: signed
        "require_real": ("",),                  # a real number of either sign, by definition
        "as_real": ("",),                       # the same, without a limit
        "convention_gap_percent": ("",),        # negative when the second reading is the smaller one
    },
}
#: fields that are signed wherever they appear (their docstrings say so)
SIGNED_FIELDS = {
    "line",       # Estimate.line = (b, k) of total ~ b + k n: b = ttft - k is below 0 when a step outlasts the prefill
    "excess_s",   # Comparison.excess_s = measured - predicted: negative when a measurement beats its floor
    "difference_bytes",  # BytesPerToken: streamed - stored, negative when a step reads less than the file holds
    "t0",         # fixed_cost_reading's operand: the fitted fixed time, an intercept
    "seed",       # a random seed: any integer
    "intercept", "slope",  # a fitted line's b and k (ttft_vs_prompt's fit): either sign, judged by "physical"
    # relative errors (predicted / measured - 1) and their intervals, and a measurement minus its floor: signed
    "error", "error_interval", "calibrated_error", "uncalibrated_error", "beyond",
}
#: arguments that accept an infinity as "no limit" (their docstrings say so)
INFINITY_MEANS_NO_LIMIT = {"capacity_bytes"}
#: arguments that are labels, shown as text and never computed with: any value is fine
LABELS = {"name", "label", "case", "source", "description", "doc", "where", "problem", "budget_note", "what"}
#: (callable, argument) -> the words its error may use instead of the argument's name: the argument called
#: ``name`` stands for the concept the callable looks up
ALIASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("get_precision", "name"): ("precision",), ("bytes_per_element", "name"): ("precision",),
    ("catalog_entry", "name"): ("model",), ("load_set", "name"): ("question set",),
    ("questions", "name"): ("question set",),
    # the dashboard's text fields: the error names the field the learner typed in
    ("parse_link_bandwidth", "text"): ("Link bandwidth",), ("parse_time_field", "text"): ("budget",),
}
#: callables that take any value by design (they ask what it is, hash it, or hand its items back), and
#: cmath_isclose, whose answer for inf and nan is documented (False: not close to anything)
ANY_VALUE = {"is_placeholder", "default_hash", "require_list", "cmath_isclose"}
#: arguments a library caller sets, never a learner, left at their defaults: the limits and names the checks of
#: ``course_lib.core.validation`` take from the function that calls them, and the names an error reports under
DEVELOPER_ARGUMENTS: dict[str, set[str]] = {
    "course_lib.core.validation": {"minimum", "maximum", "maximum_items", "allow_zero", "allow_none", "single",
                                   "what", "options"},
    "*": {"names", "argument"},
}


def _core(name: str):
    import course_lib.core as core

    return getattr(core, name)


# ---- the classifier -----------------------------------------------------------------------------------
def _documented(kind: str, label: str, path: str) -> bool:
    if kind == "negative" and any(part.split("[")[0] in SIGNED_FIELDS for part in path.split(".")):
        return True
    allowed = DOCUMENTED[kind].get(label, ())
    return any(a == "" or path == a or path.startswith(a + ".") or path.startswith(a + "[") for a in allowed)


_SKIP_TYPES = (str, bytes, type(None), type, type(math), type(len))


def problems(value, label: str, path: str = "", depth: int = 0, seen=None) -> list[str]:
    """nan anywhere; inf or a negative number where it is not documented (walks fields and properties)."""
    seen = set() if seen is None else seen
    out: list[str] = []
    if isinstance(value, bool) or isinstance(value, _SKIP_TYPES) or depth > 3:
        return out
    if isinstance(value, numbers.Real) and not hasattr(value, "free_symbols"):
        try:
            v = float(value)
        except OverflowError:  # an integer beyond a float: finite
            v = sys.float_info.max if value > 0 else -sys.float_info.max
        if math.isnan(v):
            out.append(f"{path or 'result'} is nan")
        elif math.isinf(v) and not _documented("inf", label, path):
            out.append(f"{path or 'result'} is {v}")
        elif v < 0 and not _documented("negative", label, path):
            out.append(f"{path or 'result'} is negative ({v:g})")
        return out
    if id(value) in seen:
        return out
    seen.add(id(value))

    def join(k):
        return f"{path}.{k}" if path else str(k)

    if isinstance(value, dict):
        for k, v in list(value.items())[:60]:
            if not (isinstance(k, str) and (k.startswith("_") or k in LABELS)):
                out += problems(v, label, join(k), depth + 1, seen)
        return out
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value[:60]):
            out += problems(v, label, f"{path}[{i}]", depth + 1, seen)
        return out
    if type(value).__module__.startswith("course_lib"):
        names = [f.name for f in dataclasses.fields(value)] if dataclasses.is_dataclass(value) else [
            k for k in vars(value) if not k.startswith("_")] if hasattr(value, "__dict__") else []
        names += [k for k, v in vars(type(value)).items() if isinstance(v, property) and not k.startswith("_")]
        for k in dict.fromkeys(names):
            if k in LABELS:
                continue
            try:
                v = getattr(value, k)
            except (ValueError, TypeError):
                continue  # a property that cannot be computed for this value says so with a clear error
            except Exception as exc:  # noqa: BLE001 - any other exception is a finding
                out.append(f"{join(k)} raised {type(exc).__name__}: {str(exc)[:100]}")
                continue
            out += problems(v, label, join(k), depth + 1, seen)
    return out


class CallTookTooLong(Exception):
    pass


def _alarm(signum, frame):
    raise CallTookTooLong("call took too long")


def limit_of(label: str) -> float:
    """The time limit of a callable (short name): :data:`TIME_LIMITS`, else :data:`TIME_LIMIT_S`."""
    return TIME_LIMITS.get(label, TIME_LIMIT_S)


def timed(fn, kwargs: dict, limit: float | None = None):
    """("result", value), ("raised", exception) or ("slow", None): ``fn(**kwargs)``, stopped after ``limit`` s
    (default :data:`TIME_LIMIT_S`, read when called).

    When another alarm is already set (a test-timeout plugin), it is left alone and only the elapsed time
    is judged.
    """
    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        try:
            return "result", fn(**kwargs)
        except Exception as exc:  # judged by the caller
            return "raised", exc
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        try:
            # fires again every 0.2 s: a timeout raised where Python swallows it (a gc callback) cannot end the watch
            signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S if limit is None else limit, 0.2)
            try:
                return "result", fn(**kwargs)
            except CallTookTooLong:
                return "slow", None
            except RecursionError as exc:
                return "raised", exc
            except Exception as exc:  # judged by the caller
                return "raised", exc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CallTookTooLong:  # fired between the end of the call and the disarm
        signal.setitimer(signal.ITIMER_REAL, 0)
        return "slow", None
    finally:
        signal.signal(signal.SIGALRM, old)


CLEAR_ERRORS = (ValueError, TypeError, KeyError)


def outcome(fn, kwargs: dict, label: str, names=(), *, errors=(ValueError, TypeError)) -> tuple[str, str]:
    """('ok', ''), ('error', message) for a clear error, or ('bad', what went wrong).

    A clear error is one of ``errors`` whose message names one of ``names`` (any message when ``names``
    is empty); a result is checked by :func:`problems`.
    """
    t0 = time.perf_counter()
    limit = limit_of(label)
    kind, value = timed(fn, kwargs, limit)
    took = time.perf_counter() - t0
    if kind == "slow" or took > limit:
        return "bad", f"call took more than {limit} s"
    if kind == "raised":
        msg = str(value)
        if not isinstance(value, errors):
            return "bad", f"{type(value).__name__}: {msg[:300]}"
        if names and not any(n in msg for n in names):
            return "bad", f"{type(value).__name__} names none of {tuple(names)}: {msg[:300]}"
        return "error", msg
    found = problems(value, label)
    if found:
        return "bad", "silent nonsense: " + "; ".join(found[:5])
    return "ok", ""


def _non_finite(value) -> bool:
    """nan or an infinity, also inside a numpy scalar, a 0-d array or a short list."""
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value[:8])
    try:
        if isinstance(value, (bool, str, bytes)) or not isinstance(value, (numbers.Real, np.ndarray, np.generic)):
            return False
        arr = np.asarray(value, dtype=float)
        return bool(arr.size) and not bool(np.isfinite(arr).all())
    except (TypeError, ValueError, OverflowError):
        return False


def classify(fn, kwargs: dict, label: str, argument: str, aliases=()) -> tuple[str, str]:
    """One of ``value``, ``error``, ``nonsense``, ``unclear`` and what happened, for ``fn(**kwargs)`` where
    ``argument`` holds the hostile value."""
    kind, what = outcome(fn, kwargs, label, (argument, *aliases), errors=CLEAR_ERRORS)
    if kind == "bad" and what.startswith("call took more"):
        return "slow", what
    if kind == "bad" and what.startswith("silent") and label in ANY_VALUE:
        kind = "ok"
    if kind == "ok":
        value = kwargs[argument]
        exempt = (argument in LABELS or label in ANY_VALUE
                  or (argument in INFINITY_MEANS_NO_LIMIT and not _is_nan(value)))
        if _non_finite(value) and not exempt:
            return "nonsense", f"accepted {argument}={value!r} (not a finite number) and returned"
        return "value", ""
    if kind == "error":
        return "error", what
    return ("nonsense" if what.startswith("silent") else "unclear"), what


def _is_nan(value) -> bool:
    try:
        return bool(np.isnan(np.asarray(value, dtype=float)).any())
    except (TypeError, ValueError):
        return False


# ---- the callables ----------------------------------------------------------------------------------------
def _is_record(obj) -> bool:
    """A dataclass that checks nothing (no ``__post_init__``): a record the library builds and returns; or a
    mixin without a constructor of its own."""
    if not inspect.isclass(obj):
        return False
    if dataclasses.is_dataclass(obj):
        return not hasattr(obj, "__post_init__")
    return obj.__init__ is object.__init__


def targets(*, measure: bool = True) -> tuple[dict[str, object], list[str]]:
    """{qualified name: callable} to fuzz, and the names of the records left out. ``measure=False`` leaves out
    :data:`MEASURE_NAMES` (their modules import torch: seconds)."""
    found: dict[str, object] = {}
    records: list[str] = []
    seen: set[int] = set()

    def add(qualified: str, obj):
        if not callable(obj) or id(obj) in seen:
            return
        seen.add(id(obj))
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            return
        if _is_record(obj):
            records.append(qualified)
            return
        found[qualified] = obj

    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            add(f"{module_name}.{name}", getattr(module, name))
    for path in MEASURE_NAMES if measure else ():
        module_name, _, name = path.rpartition(".")
        add(f"course_lib.measure.{path}", getattr(importlib.import_module(f"course_lib.measure.{module_name}"), name))
    checks = importlib.import_module("course_lib.checks")
    for name in CHECKS_NAMES:
        add(f"course_lib.checks.{name}", getattr(checks, name))
    return found, records


def _parameters(fn) -> list[inspect.Parameter]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and p.kind != p.POSITIONAL_ONLY]


def _candidates(name: str) -> list:
    out = list(VALID.get(name, []))
    return out + [g for g in GENERIC if not any(g is o for o in out)]


def _value(v):
    return v() if callable(v) and getattr(v, "__name__", "") == "<lambda>" else v


def baseline(fn, label: str, qualified: str = "") -> dict | None:
    """Keyword arguments for which ``fn`` returns a sensible value, or None when none was found.

    Required arguments start at their first candidate; an error naming one of them moves it to its next
    candidate (at most 40 tries).
    """
    required = [p.name for p in _parameters(fn) if p.default is inspect.Parameter.empty]
    given = BASELINES.get(qualified.removeprefix("course_lib.core."), BASELINES.get(label, {}))
    known = {p.name for p in _parameters(fn)}
    choice = {n: 0 for n in required}
    cands = {n: _candidates(n) for n in required}
    for n, v in given.items():   # the given value first (and given optional arguments join the baseline)
        if n in known:
            cands[n] = [v]
            choice[n] = 0
    required = list(dict.fromkeys(required + [n for n in given if n in known]))
    for _ in range(40):
        try:
            kwargs = {n: _value(cands[n][choice[n]]) for n in required}
        except Exception:  # a valid value that could not be built
            return None
        kind, what = outcome(fn, kwargs, label)
        if kind == "ok":
            return kwargs
        named = [n for n in required if n in what and choice[n] + 1 < len(cands[n])]
        if not named:
            movable = [n for n in required if choice[n] + 1 < len(cands[n])]
            if not movable:
                return None
            named = movable[:1]
        choice[named[0]] += 1
    return None


@dataclasses.dataclass
class Report:
    """What a fuzz run found: counts per callable and examples of the bad outcomes."""

    counts: dict[str, Counter]
    examples: dict[str, list[str]]
    records: list[str]
    no_baseline: list[str]

    def totals(self) -> Counter:
        out: Counter = Counter()
        for c in self.counts.values():
            out.update(c)
        return out

    def summary(self) -> str:
        t = self.totals()
        return (f"calls {sum(t.values())}  value {t['value']}  error {t['error']}  "
                f"nonsense {t['nonsense']}  unclear {t['unclear']}  slow {t['slow']}  ({len(self.counts)} callables, "
                f"{len(self.records)} records not fuzzed, {len(self.no_baseline)} without a baseline)")


def _short(qualified: str) -> str:
    return qualified.rpartition(".")[2]


def plan(names=None, *, callables: int | None = None, seed: int = 0,
         measure: bool = True) -> tuple[list[tuple[str, object, dict, str, str, object]], list[str], list[str]]:
    """Every (name, callable, baseline, argument, hostile label, hostile value), the records, the callables
    without a baseline. ``names``: only these callables (short or qualified names); ``callables``: a
    deterministic sample of that many callables (seeded by ``seed``)."""
    found, records = targets(measure=measure)
    if names:
        found = {q: fn for q, fn in found.items() if q in names or _short(q) in names}
    if callables is not None and callables < len(found):
        keep = set(random.Random(seed).sample(sorted(found), callables))
        found = {q: fn for q, fn in found.items() if q in keep}
    calls = []
    no_baseline = []
    for qualified, fn in found.items():
        if not _parameters(fn):
            continue   # nothing to replace
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            base = baseline(fn, _short(qualified), qualified)
        if base is None:
            no_baseline.append(qualified)
            continue
        skip = DEVELOPER_ARGUMENTS["*"] | DEVELOPER_ARGUMENTS.get(getattr(fn, "__module__", ""), set())
        for p in _parameters(fn):
            if p.name in skip:
                continue
            for label, value in HOSTILE:
                calls.append((qualified, fn, base, p.name, label, value))
    return calls, records, no_baseline


def run(names=None, *, sample: int | None = None, callables: int | None = None, seed: int = 0,
        examples: int = 3, measure: bool = True) -> Report:
    """Fuzz the public API (or the callables ``names``, or a sample of ``callables`` of them); with ``sample``,
    a deterministic sample of the calls."""
    calls, records, no_baseline = plan(names, callables=callables, seed=seed, measure=measure)
    if sample is not None and sample < len(calls):
        calls = random.Random(seed).sample(calls, sample)
    counts: dict[str, Counter] = {}
    found: dict[str, list[str]] = {}
    for qualified, fn, base, argument, label, value in calls:
        kwargs = {**base, argument: value}
        aliases = ALIASES.get((_short(qualified), argument), ())
        if argument.endswith("s") and len(argument) > 3:
            aliases += (argument[:-1],)   # an error about one item of a list: "unknown model" for models
        if qualified.startswith("course_lib.core.validation.") or fn.__module__ == "course_lib.core.validation":
            aliases += (str(kwargs.get("name")),)  # the checks name what they check by their ``name``
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            kind, what = classify(fn, kwargs, _short(qualified), argument, aliases)
        counts.setdefault(qualified, Counter())[kind] += 1
        if kind in ("nonsense", "unclear", "slow") and len(found.setdefault(qualified, [])) < examples:
            found[qualified].append(f"{kind}: {argument}={label}: {what}"[:300])
    return Report(counts, found, records, no_baseline)


def table(report: Report, *, everything: bool = False) -> str:
    rows = [f"{'callable':60s} {'calls':>6s} {'value':>6s} {'error':>6s} {'nonsense':>8s} {'unclear':>7s} "
            f"{'slow':>4s}"]
    for name, c in sorted(report.counts.items()):
        if everything or c["nonsense"] or c["unclear"] or c["slow"]:
            rows.append(f"{name:60s} {sum(c.values()):6d} {c['value']:6d} {c['error']:6d} {c['nonsense']:8d} "
                        f"{c['unclear']:7d} {c['slow']:4d}")
            rows += [f"    {line}" for line in report.examples.get(name, [])]
    for name in report.no_baseline:
        rows.append(f"{name:60s} no baseline call found (not fuzzed)")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.authoring.fuzz_api", description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="callables to fuzz (short or qualified names)")
    parser.add_argument("--sample", type=int, help="fuzz a deterministic sample of this many calls")
    parser.add_argument("--callables", type=int, help="fuzz a deterministic sample of this many callables")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=3, help="bad outcomes shown per callable")
    parser.add_argument("--all", action="store_true", help="a row for every callable, not only the bad ones")
    args = parser.parse_args(argv)
    import resource

    # a call that builds a huge list must fail with MemoryError here, not exhaust the machine
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    report = run(args.only, sample=args.sample, callables=args.callables, seed=args.seed, examples=args.examples)
    print(table(report, everything=args.all))
    print(report.summary())
    t = report.totals()
    return 1 if t["nonsense"] or t["unclear"] else 0


if __name__ == "__main__":
    sys.exit(main())
