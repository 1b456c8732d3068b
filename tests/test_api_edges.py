"""API edges: every public function and class of the core, on valid and invalid inputs (issue 12, item 4).

``PUBLIC`` is every callable in ``course_lib.core.__all__`` and ``course_lib.__all__``;
``test_every_public_callable_has_a_strategy`` fails when one of them has no entry in ``CASES``.
Each entry draws calls that mix valid arguments with bad ones (``BAD``: huge integers, 1e308, inf,
nan, 5e-324, negatives, bools, None, str, bytes, bytearray, numpy arrays of strings, ...). A call
must either

* return a result in which no number (walked through dataclass fields, properties, lists and
  dicts) is nan, and none is infinite or negative unless ``DOCUMENTED`` says so, or
* raise a ValueError or TypeError whose message names one of the call's arguments;

never any other exception, and within ``fuzz_api.TIME_LIMIT_S`` (a SIGALRM stops a call that runs longer). The
classifier is ``course_lib.authoring.fuzz_api``'s (``python -m course_lib.authoring.fuzz_api`` fuzzes every public
callable from its signature; this registry draws richer valid values per callable with hypothesis).
The same registry drives a larger fuzz run outside the suite: ``python tests/test_api_edges.py 2000``
prints how many calls returned, raised a clear error, raised another exception, raised an error
naming no argument, returned nonsense (nan, undocumented inf or negative) or ran too long.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_lib.authoring import fuzz_api as _fuzz

EXAMPLES_PER_CALLABLE = 5

BAD = [10**400, -(10**400), 2**53 + 1, 10**15 + 1, 10**16, 1e308, -1e308, math.inf, -math.inf, math.nan, 5e-324,
       -5e-324, 1e-300, -1, -0.5, 0, 0.0, True, False, None, "14", "", "nan", b"512", bytearray(b"512"),
       np.array("14"), np.array(["1", "2"]), np.array([1, 2]), np.float64("nan"), np.int64(-3), 3j,
       Fraction(10**400), [], {}, object()]
bad = st.sampled_from(BAD)


def mod(name: str):
    return importlib.import_module(f"course_lib.core.{name}")


def R(path: str):
    """``"estimator.estimate"`` -> the function (resolved when called, so the registry imports lazily)."""
    module, _, attr = path.partition(".")
    obj = mod(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


# ---- valid values ----------------------------------------------------------------------------------
def counts(lo=0, hi=10**5):
    return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 10**15, 10**15 + 1]),
                     st.integers(lo, hi).map(float))


def positive(lo=1e-6, hi=1e15):
    return st.one_of(st.floats(lo, hi), st.sampled_from([1e-30, 1e30, 1e-31, 1e31]))


def fraction():
    return st.one_of(st.floats(0.01, 1), st.floats(0.01, 1), st.sampled_from([1, 0, 1e-30, 1e-31, 5e-324]))


@dataclasses.dataclass(frozen=True)
class Keep:
    """An argument drawn from its strategy only (a developer's switch, not a learner's input)."""

    strategy: object


MODELS = ["mistral-7b", "llama-2-7b", "llama-3-8b", "gpt2-small", "source-7b", "deepseek-v3", "qwen3-0.6b",
          "mixtral-8x7b", "qwen3-30b-a3b"]
HARDWARE = ["h100-sxm", "a100-80gb", "rtx-4090", "h200", "m2-ultra", "b200", "mi355x", "rtx-5090"]
PRECS = ["fp16", "bf16", "fp32", "fp8", "int8", "int4", "q4_0", "float16", "int4-g128", "q4_k_m", "nvfp4", "w8a8"]


def models():
    return st.sampled_from(MODELS + ["no-such-model"])


def devices():
    return st.sampled_from(HARDWARE + ["no-such-gpu"])


def _extreme_model(moe: bool):
    """A model whose every dimension is at the count limit: the estimator's results must stay finite."""
    n = 10**15
    extra = dict(experts=n, experts_per_token=n, moe_intermediate=n) if moe else {}
    return R("models.ModelSpec")("huge", layers=n, hidden=n, heads=n, kv_heads=n, head_dim=n, intermediate=n,
                                 vocab=n, **extra)


def extreme_specs():
    """Catalog names, or specs at the limits (largest model; slowest and fastest device the checks accept)."""
    return (st.one_of(models(), st.booleans().map(_extreme_model)),
            st.one_of(devices(), st.sampled_from([1e-30, 1e30]).map(
                lambda x: R("hardware.custom_hardware")("edge", bandwidth=x, peak_flops=x, capacity=1e30))))


def precisions():
    return st.sampled_from(PRECS + ["fp12"])


@dataclasses.dataclass(frozen=True)
class Call:
    label: str
    fn: object
    kwargs: dict
    names: tuple

    def __repr__(self):
        return f"{self.label}(**{self.kwargs!r})"


def call(path_or_fn, label=None, names=(), **args):
    """A strategy of calls of ``path_or_fn``: every keyword argument valid, or one of them replaced by a bad value.

    ``args[k]`` is the strategy of valid values of argument ``k`` (valid in type: they include values
    beyond the stated limits); ``("fixed", value)`` passes ``value`` as it is and ``Keep(strategy)``
    never replaces it. ``names`` are names an error may give besides the keyword arguments (those of
    the object a method works on, or the concept an argument stands for).
    """
    label = label or (path_or_fn if isinstance(path_or_fn, str) else path_or_fn.__name__)
    fixed = {k: v[1] for k, v in args.items() if isinstance(v, tuple) and v[:1] == ("fixed",)}
    valid = {k: (v.strategy if isinstance(v, Keep) else v) for k, v in args.items() if k not in fixed}
    corruptible = [k for k, v in args.items() if k not in fixed and not isinstance(v, Keep)]
    which = st.one_of(st.none(), st.sampled_from(corruptible)) if corruptible else st.none()

    def build(drawn):
        kw, replaced, value = drawn
        fn = R(path_or_fn) if isinstance(path_or_fn, str) else path_or_fn
        kw = {**fixed, **kw}
        if replaced is not None:
            kw[replaced] = value
        return Call(label, fn, kw, tuple(args) + tuple(names))

    return st.tuples(st.fixed_dictionaries(valid), which, bad).map(build)


def no_args(path):
    return st.just(None).map(lambda _: Call(path, R(path), {}, ()))


def thunk(label, fn):
    """A call without arguments of ``fn`` (for classes whose instances the core builds itself)."""
    return st.just(None).map(lambda _: Call(label, fn, {}, ()))


def on(factory, method, label, names=(), **args):
    """Calls of ``factory().method(**args)``."""
    return call(lambda **kw: getattr(factory(), method)(**kw), label=label, names=names, **args)


def mistral():
    return R("models.get_model")("mistral-7b")


def h100():
    return R("hardware.get_hardware")("h100-sxm")


def state_strategy():
    return st.builds(
        lambda **kw: R("capstone.DashboardState")(**kw),
        model=st.sampled_from(["llama-3-8b", "mistral-7b", "llama-2-7b"]),
        hardware=st.sampled_from(["h100-sxm", "a100-80gb", "h200"]),
        batch=st.integers(1, 256), prompt_tokens=st.integers(2, 8192), new_tokens=st.integers(1, 2048),
        precision=st.sampled_from(["fp16", "fp8", "int4"]),
        tensor_parallel=st.sampled_from([1, 2]), interconnect_bandwidth=st.just(450e9),
    )


def states():
    """Valid states, or a bad value for ``state``."""
    return st.one_of(state_strategy(), state_strategy(), bad)


def results():
    return state_strategy().map(lambda s: R("capstone.compute")(s))


def comparisons():
    return st.builds(
        lambda p, m, case: R("compare.Comparison")(case=case, source="published", model="m", hardware="h",
                                                    metric="tpot", predicted_s=p, measured_s=m),
        st.floats(1e-30, 1e30), st.floats(1e-30, 1e30), st.sampled_from(["a", "b", "c"]))


def token_lists(max_len=200):
    return st.lists(st.lists(st.integers(0, 9), max_size=max_len), min_size=1, max_size=8)


def small_plans():
    """Continuous plans of short requests on one GPU (cheap to simulate)."""
    return st.builds(
        lambda p, n, users: R("capstone.continuous_plan")(R("capstone.DashboardState")(prompt_tokens=p, new_tokens=n),
                                                          users),
        st.integers(16, 256), st.integers(2, 16), st.integers(1, 100))


def state_call(path, **more):
    return call(path, state=states(), **more)


# ---- the registry: one entry per public callable ------------------------------------------------------
CASES = {
    # validation
    "require_count": call("validation.require_count", names=("n_arg",), name=("fixed", "n_arg"), value=counts(),
                          minimum=Keep(st.integers(0, 3))),
    "require_counts": call("validation.require_counts", names=("n_arg",), name=("fixed", "n_arg"),
                           values=st.lists(counts(1, 100), max_size=5), single=Keep(st.booleans())),
    "require_list": call("validation.require_list", names=("l_arg",), name=("fixed", "l_arg"),
                         values=st.lists(st.integers(0, 10), max_size=5), what=("fixed", "a list of numbers")),
    "require_positive": call("validation.require_positive", names=("x_arg",), name=("fixed", "x_arg"),
                             value=positive()),
    "require_nonnegative": call("validation.require_nonnegative", names=("x_arg",), name=("fixed", "x_arg"),
                                value=positive()),
    "require_real": call("validation.require_real", names=("x_arg",), name=("fixed", "x_arg"),
                         value=st.one_of(positive(), positive().map(lambda v: -v))),
    "as_real": call("validation.as_real", names=("x_arg",), name=("fixed", "x_arg"),
                    value=st.one_of(positive(), positive().map(lambda v: -v))),
    "require_fraction": call("validation.require_fraction", names=("f_arg",), name=("fixed", "f_arg"),
                             value=fraction(), allow_zero=Keep(st.booleans())),
    "require_choice": call("validation.require_choice", names=("c_arg",), name=("fixed", "c_arg"),
                           value=st.sampled_from(["fp16", "FP16 ", "fq16", "x" * 300]),
                           options=("fixed", ("fp16", "bf16"))),
    "require_flag": call("validation.require_flag", names=("b_arg",), name=("fixed", "b_arg"),
                         value=st.sampled_from([True, False, np.bool_(True)])),
    "require_callable": call("validation.require_callable", names=("fn_arg",), name=("fixed", "fn_arg"),
                             value=st.sampled_from([len, None, print]), allow_none=Keep(st.booleans())),
    "in_argument": call("validation.in_argument", name=st.sampled_from(["prefix", "session"])),
    "suggest": call("validation.suggest", value=st.sampled_from(["fp16", "fq16", "x" * 300]),
                    options=st.sampled_from([("fp16", "bf16"), ()])),
    # units
    **{f"parse_{d}": call(f"units.parse_{d}", text=st.one_of(st.text(max_size=20), st.sampled_from(
        ["14 GB", "1e29 GB", "1e400 B", "13.9 ms", "7B", "312 TFLOP/s", "1,024 B", "1008 GB/s", "2 TFLOP",
         "989 TFLOPS", "1e31 B"]), st.floats(0, 1e29)), **(
        {"convention": st.sampled_from(["si", "source", "iec"])} if d in ("bytes", "bandwidth") else {}))
       for d in ("bytes", "params", "bandwidth", "time", "flops", "flop_rate")},
    **{f"format_{d}": call(f"units.format_{d}", **{arg: positive(0, 1e29)}, digits=counts(1, 20),
                           **({"system": st.sampled_from(["si", "iec", "source"])} if d in ("bytes", "bandwidth")
                              else {}))
       for d, arg in (("bytes", "n"), ("params", "n"), ("bandwidth", "bytes_per_s"), ("time", "seconds"),
                      ("flops", "flops"), ("flop_rate", "flop_per_s"))},
    "parse_quantity": call("units.parse_quantity", text=st.sampled_from(["14 GB", "7B", "13.9 ms", "42", "1e31"]),
                           dimension=st.sampled_from([None, "params", "number", "volts"])),
    "format_quantity": call("units.format_quantity",
                            q=st.builds(lambda v: R("units.Quantity")(v, "bytes"), st.floats(0, 1e29)),
                            digits=counts(1, 20)),
    "convention_gap_percent": call("units.convention_gap_percent", si_value=positive(0, 1e15),
                                   source_value=positive(0, 1e15)),
    "accepted_units": call("units.accepted_units", dimension=st.sampled_from(["bytes", "time", "number", "volts"]),
                           convention=st.sampled_from(["si", "jedec"])),
    "Quantity": st.one_of(call("units.Quantity", value=positive(0, 1e20),
                               dimension=st.sampled_from(["bytes", "number", "volts"])),
                          on(lambda: R("units.Quantity")(14e9, "bytes"), "format", "Quantity.format",
                             digits=counts(1, 30))),
    # a row class of the table lessons render: its rows' derived numbers
    "SourceUnit": thunk("SourceUnit", lambda: [(u.ratio, u.percent_larger) for u in R("units.SOURCE_TABLE")]),
    # precision
    "Precision": call("precision.Precision", name=st.just("p"), bits=positive(1, 64), description=st.just("")),
    "get_precision": call("precision.get_precision", names=("precision",), name=precisions()),
    "bytes_per_element": call("precision.bytes_per_element", names=("precision",), name=precisions()),
    "get_layout": call("precision.get_layout", names=("precision",), precision=st.one_of(precisions(), st.sampled_from(
        ["gpt-oss-mxfp4", "gguf-q4_0", {"default": "q4_0", "lm_head": "q6_k"}, {"ffn": "q4_0"}, {"mlp": "fp12"}]))),
    "Layout": call("precision.Layout", names=("precision", "group"), name=st.just("l"), formats=st.sampled_from(
        [tuple((grp, "fp16") for grp in ("attention", "mlp", "experts", "embedding", "lm_head")),
         (("mlp", "fp16"),)]), kv=st.sampled_from([None, "fp8", "fp12"])),
    "block_format": call("precision.block_format", name=st.just("b"), element_bits=counts(0, 65),
                         block=counts(0, 4096), scale_bits=counts(0, 64), zero_bits=counts(0, 64)),
    # data
    "load_catalog": call("data.load_catalog", name=st.sampled_from(["hardware", "models.json", "nope"]),
                         copy=Keep(st.booleans())),
    "catalog_names": no_args("data.catalog_names"),
    # models
    "get_model": call("models.get_model", model=models()),
    "list_models": no_args("models.list_models"),
    "catalog_entry": call("models.catalog_entry", names=("model",), name=models()),
    "ModelSpec": st.one_of(
        call("models.ModelSpec", name=st.just("m"), layers=counts(1, 100), hidden=counts(1, 8192),
             heads=st.sampled_from([1, 8, 32]), kv_heads=st.sampled_from([1, 8]), head_dim=counts(1, 256),
             intermediate=counts(1, 30000), vocab=counts(1, 10**5), sliding_window=st.sampled_from([None, 4096]),
             nominal_params=st.sampled_from([None, 7 * 10**9])),
        call("models.ModelSpec", name=st.just("m"), layers=counts(2, 64), hidden=counts(1, 8192), heads=st.just(8),
             kv_heads=st.sampled_from([1, 8]), head_dim=counts(1, 256), intermediate=counts(1, 30000),
             vocab=counts(1, 10**5), local_window=st.sampled_from([None, 128, 1024]), local_layers=counts(0, 70),
             block_norms=counts(0, 4), attention_sinks=st.booleans()),
        on(lambda: R("models.get_model")("gemma-3-27b"), "attended_tokens", "ModelSpec.attended_tokens",
           context=counts()),
        on(mistral, "streamed_params", "ModelSpec.streamed_params", routed_tokens=counts(1)),
        on(mistral, "decode_weight_bytes", "ModelSpec.decode_weight_bytes", precision=precisions(), batch=counts(1)),
        on(mistral, "kv_bytes_per_token", "ModelSpec.kv_bytes_per_token", precision=precisions()),
        on(mistral, "attended_tokens", "ModelSpec.attended_tokens", context=counts()),
        on(lambda: R("models.get_model")("deepseek-v3"), "experts_touched", "ModelSpec.experts_touched",
           routed_tokens=counts()),
        on(mistral, "weight_bytes", "ModelSpec.weight_bytes", precision=precisions()),
        on(mistral, "scaled", "ModelSpec.scaled", layers=counts(1, 64)),
        call(lambda **kw: R("models.ModelSpec").from_hf_config(**kw), label="ModelSpec.from_hf_config",
             names=("config", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
                    "experts", "max_positions"),
             config=st.one_of(st.sampled_from([{"hidden_size": 64}, "/no/such/config.json", "/etc/hostname"]),
                              st.fixed_dictionaries({k: st.one_of(st.sampled_from(v), bad) for k, v in {
                                  "num_hidden_layers": [2, 32], "hidden_size": [64, 4096],
                                  "num_attention_heads": [4, 32],
                                  "vocab_size": [100, 32000], "num_key_value_heads": [1, 4, 3],
                                  "model_type": ["llama", "gpt2", "qwen3"], "n_routed_experts": [None, 8],
                                  "num_experts_per_tok": [None, 2], "kv_lora_rank": [None, 8]}.items()}))),
    ),
    # hardware
    "get_hardware": call("hardware.get_hardware", hardware=devices()),
    "list_hardware": no_args("hardware.list_hardware"),
    "Interconnect": st.one_of(
        call("hardware.Interconnect", name=st.just("link"), bidirectional_bandwidth=positive(),
             per_direction_bandwidth=st.one_of(st.none(), positive()), links=st.one_of(st.none(), counts(0, 64)),
             per_link_bidirectional_bandwidth=st.one_of(st.none(), positive())),
        thunk("Interconnect.per_link_per_direction_bandwidth",
              lambda: [(R("hardware.get_hardware")(n).scale_up or R("hardware.Interconnect")("x", 1.0))
                       .per_link_per_direction_bandwidth for n in R("hardware.list_hardware")()])),
    "custom_hardware": call("hardware.custom_hardware", name=st.just("mine"), bandwidth=positive(),
                            peak_flops=st.one_of(st.none(), positive()), capacity=st.one_of(st.none(), positive())),
    "HardwareSpec": st.one_of(
        call("hardware.HardwareSpec", name=st.just("x"), bandwidth=positive(), capacity=positive(),
             cache_bytes=positive()),
        on(h100, "flops", "HardwareSpec.flops", dtype=st.sampled_from(["fp16", "fp8", "int3"])),
        on(h100, "ridge_point", "HardwareSpec.ridge_point", dtype=st.sampled_from(["fp16", "int3"])),
        on(h100, "with_peak", "HardwareSpec.with_peak", dtype=st.just("fp16"), flops=positive()),
    ),
    # formulas
    "Formula": thunk("Formula", lambda: [f.lhs for f in R("formulas.FORMULAS").values()]),
    "latex": call("formulas.latex", name_or_expr=st.sampled_from(["weight_bytes", "nope"])),
    "equation": call("formulas.equation", name=st.sampled_from(["weight_bytes", "memory_time", "nope"])),
    "expr": call("formulas.expr", name=st.sampled_from(["weight_bytes", "nope"])),
    "derive_decode_sum": no_args("formulas.derive_decode_sum"),
    # estimator
    "estimate": call("estimator.estimate", model=models(), hardware=devices(), prompt_tokens=counts(1, 10**5),
                     new_tokens=counts(1, 10**5), precision=precisions(), batch=counts(1, 512),
                     cached_prefix_tokens=counts(0, 10), compute_efficiency=fraction(),
                     bandwidth_efficiency=fraction()),
    "Estimate": call("estimator.estimate", label="Estimate", model=extreme_specs()[0], hardware=extreme_specs()[1],
                     prompt_tokens=counts(1, 10**15), new_tokens=counts(1, 10**15), batch=counts(1, 10**15)),
    "PhaseCost": call("estimator.PhaseCost", flops=positive(), bytes=positive(), compute_time=positive(),
                      memory_time=positive()),
    "weight_bytes": call("estimator.weight_bytes", params=st.one_of(counts(0, 10**13), models()),
                         precision=precisions()),
    "kv_cache_bytes": call("estimator.kv_cache_bytes", model=models(), tokens=counts(), precision=precisions(),
                           batch=counts(1)),
    "crossover_context": call("estimator.crossover_context", model=models(), batch=counts(1),
                              precision=precisions(), kv_precision=precisions()),
    "tokens_that_fit": call("estimator.tokens_that_fit", model=models(), hardware=devices(), batch=counts(1),
                            precision=precisions(), kv_precision=precisions()),
    "compute_dtype": call("estimator.compute_dtype", precision=precisions(), hardware=st.one_of(st.none(), devices())),
    # prefix cache
    "PrefixCache": st.one_of(
        call("prefix_cache.PrefixCache", block_tokens=counts(1, 64), capacity_bytes=st.one_of(
            positive(0, 1e12), st.just(math.inf)), bytes_per_token=positive()),
        call(lambda capacity_bytes, bytes_per_token, tokens: _cache_roundtrip(capacity_bytes, bytes_per_token,
                                                                              tokens),
             label="PrefixCache.lookup/insert", capacity_bytes=st.one_of(positive(0, 1e6), st.just(math.inf)),
             bytes_per_token=positive(1, 1e4), tokens=st.lists(st.integers(0, 5), max_size=100),
             names=("max_tokens",)),
    ),
    "PrefixHit": call(lambda tokens: _cache_roundtrip(math.inf, 2.0, tokens)[0], label="PrefixHit",
                      tokens=st.lists(st.integers(0, 5), max_size=100)),
    "SimulationResult": call("prefix_cache.simulate", label="SimulationResult", requests=token_lists(),
                             block_tokens=counts(1, 32), capacity_bytes=positive(0, 1e9), bytes_per_token=positive()),
    "simulate": call("prefix_cache.simulate", requests=token_lists(), block_tokens=counts(1, 32),
                     capacity_bytes=st.one_of(positive(0, 1e9), st.just(math.inf)), bytes_per_token=positive(),
                     min_new_tokens=counts(0, 5)),
    "default_hash": call("prefix_cache.default_hash", parent_key=st.sampled_from([None, 1, "ns"]),
                         block=st.sampled_from([(1, 2), ()])),
    # compare
    "Comparison": call("compare.Comparison", case=st.just("c"), source=st.sampled_from(["published", "x"]),
                       model=st.just("m"), hardware=st.just("h"), metric=st.sampled_from(["tpot", "x"]),
                       predicted_s=positive(), measured_s=positive()),
    "llamacpp_decode_contexts": call("compare.llamacpp_decode_contexts", prompt_tokens=counts(1, 500),
                                     predict_tokens=counts(1, 3000), context_window=counts(500, 1024),
                                     keep=counts(0, 10)),
    "fp16_accumulate_peak": call("compare.fp16_accumulate_peak", hardware=devices()),
    "llamacpp_fp16_accumulate_cases": no_args("compare.llamacpp_fp16_accumulate_cases"),
    "fixed_cost_fit": call("compare.fixed_cost_fit", a=comparisons(), b=comparisons()),
    "published_cases": no_args("compare.published_cases"),
    "skipped_published": no_args("compare.skipped_published"),
    "h200_cases": call("compare.h200_cases", ceilings=st.sampled_from(["datasheet", "measured", "guessed"])),
    "h200_hardware": call("compare.h200_hardware", ceilings=st.sampled_from(["datasheet", "measured", "guessed"])),
    "h200_model": call("compare.h200_model", window=st.booleans()),
    "machine_cases": call("compare.machine_cases", model=models(), hardware=devices(),
                          decode=st.lists(st.tuples(counts(1, 4096), positive(1e-6, 1)), max_size=3),
                          prefill=st.lists(st.tuples(counts(1, 4096), positive(1e-6, 1)), max_size=3),
                          batch=counts(1, 8)),
    "all_cases": call("compare.all_cases", ceilings=st.sampled_from(["datasheet", "measured"])),
    "summary": call("compare.summary", rows=st.lists(comparisons(), max_size=4),
                    by=st.sampled_from(["group", "metric", "colour"])),
    "geomean": call("compare.geomean", values=st.lists(positive(), max_size=5)),
    "find": call("compare.find", rows=st.lists(comparisons(), max_size=3), case=st.sampled_from(["a", "z"])),
    "as_dicts": call("compare.as_dicts", rows=st.lists(comparisons(), max_size=3)),
    # capstone
    "DashboardState": call("capstone.DashboardState", model=st.sampled_from(["llama-3-8b", "nope"]),
                           hardware=st.sampled_from(["h100-sxm", "this-machine"]), batch=counts(1, 512),
                           prompt_tokens=counts(1, 10**5), new_tokens=counts(1, 10**4),
                           cached_prefix_tokens=counts(0, 10), compute_efficiency=fraction(),
                           tensor_parallel=st.sampled_from([1, 2, 3]),
                           interconnect_bandwidth=st.one_of(st.none(), positive())),
    "DashboardResult": state_call("capstone.compute", label="DashboardResult"),
    "CurvePoint": state_call("capstone.latency_throughput_curve", label="CurvePoint"),
    "hardware_choices": no_args("capstone.hardware_choices"),
    "resolve_hardware": state_call("capstone.resolve_hardware"),
    "activation_bytes": call("capstone.activation_bytes", compute_dtype=st.sampled_from(["fp16", "fp32", "fp4"])),
    "allreduce_time_per_pass": call("capstone.allreduce_time_per_pass", layers=counts(1, 100),
                                    tokens=counts(1, 10**6), hidden=counts(1, 10**4), devices=counts(1, 8),
                                    value_bytes=positive(1, 4), link_bandwidth=positive()),
    "compute": state_call("capstone.compute"),
    "latency_throughput_curve": state_call("capstone.latency_throughput_curve",
                                           batches=st.lists(counts(1, 512), max_size=4)),
    "default_batches": call("capstone.default_batches", current=counts(1, 1000), largest=counts(1, 10**6)),
    "max_batch_that_fits": state_call("capstone.max_batch_that_fits", limit=counts(1, 10**6)),
    "describe": state_call("capstone.describe"),
    "meets_budget": call("capstone.meets_budget", result=results(), ttft_budget=st.one_of(st.none(), positive()),
                         tpot_budget=st.one_of(st.none(), positive())),
    "best_batch": state_call("capstone.best_batch", ttft_budget=st.one_of(st.none(), positive(1e-3, 10)),
                             tpot_budget=st.one_of(st.none(), positive(1e-3, 1)), limit=counts(1, 10**15)),
    "what_binds": state_call("capstone.what_binds", ttft_budget=st.one_of(st.none(), positive(1e-3, 10)),
                             tpot_budget=st.one_of(st.none(), positive(1e-3, 1)), limit=counts(1, 4096)),
    "CollectiveLatency": thunk("CollectiveLatency", lambda: R("capstone.COLLECTIVE_LATENCIES")["ring"]),
    "collective_latency": call("capstone.collective_latency", algorithm=st.sampled_from(["ring", "tree", "mesh"]),
                               base_latency=st.one_of(st.none(), positive(0, 1e-3)),
                               hop_latency=st.one_of(st.none(), positive(0, 1e-3))),
    "collective_time": call("capstone.collective_time",
                            collective=st.sampled_from(["all-reduce", "all-gather", "all-to-all", "scan"]),
                            devices=counts(1, 64), message_bytes=positive(0, 1e9),
                            link_bandwidth=st.one_of(st.none(), positive(1e6, 1e13)),
                            algorithm=st.sampled_from(["ring", "tree", "one-shot"])),
    "alltoall_time_per_pass": call("capstone.alltoall_time_per_pass", moe_layers=counts(0, 100),
                                   tokens=counts(1, 10**6), hidden=counts(1, 10**4), experts_per_token=counts(1, 16),
                                   devices=counts(1, 8), value_bytes=positive(1, 4), link_bandwidth=positive()),
    "StaticPlan": state_call("capstone.static_plan", label="StaticPlan", users=counts(1, 10**4),
                             ttft_budget=st.one_of(st.none(), positive(1e-3, 10)),
                             tpot_budget=st.one_of(st.none(), positive(1e-3, 1)), limit=counts(1, 256)),
    "static_plan": state_call("capstone.static_plan", users=counts(1, 10**4),
                              ttft_budget=st.one_of(st.none(), positive(1e-3, 10)),
                              tpot_budget=st.one_of(st.none(), positive(1e-3, 1)), limit=counts(1, 256)),
    "ContinuousPlan": state_call("capstone.continuous_plan", label="ContinuousPlan", users=counts(1, 10**4),
                                 tpot_budget=positive(1e-3, 1)),
    "continuous_plan": state_call("capstone.continuous_plan", users=counts(1, 10**4), tpot_budget=positive(1e-3, 1),
                                  ttft_budget=st.one_of(st.none(), positive(1e-3, 10)),
                                  kv_memory_fraction=fraction(), max_sequences=counts(1, 512)),
    "simulate_plan": call("capstone.simulate_plan", plan=st.one_of(small_plans(), bad), requests=counts(1, 40),
                          seed=st.integers(0, 5), token_budget=counts(16, 4096)),
    "size_plan": call("capstone.size_plan", plan=st.one_of(small_plans(), bad), ttft_budget=positive(1e-3, 10),
                      tpot_budget=positive(1e-3, 1), spare=counts(0, 2), requests=Keep(st.just(200)),
                      max_extra=counts(0, 1)),
    "SizedPlan": call("capstone.size_plan", label="SizedPlan", plan=small_plans(), ttft_budget=positive(1e-3, 10),
                      tpot_budget=positive(1e-3, 1), requests=Keep(st.just(200)), max_extra=Keep(st.just(0))),
    "plan_cost": call("capstone.plan_cost", gpus=counts(1, 64), tokens_per_s=positive(), gpu_hour_price=positive(),
                      board_power=st.one_of(st.none(), positive(1, 2000))),
    "PlanCost": call("capstone.plan_cost", label="PlanCost", gpus=counts(1, 64), tokens_per_s=positive(),
                     gpu_hour_price=positive()),
    "deployment_examples": no_args("capstone.deployment_examples"),
    # measurements
    "published": no_args("measurements.published"),
    "published_about": no_args("measurements.published_about"),
    "h200": no_args("measurements.h200"),
    "record": call("measurements.record", record_id=st.sampled_from(["llamacpp-llama-2-7b-f16-rtx-4080-16gb", "nope"])),
    "llamacpp_rows": call("measurements.llamacpp_rows", model=st.sampled_from(["llama-2-7b", "gpt2"]),
                          weights=st.sampled_from([None, "f16", "q4_0", "q8"]),
                          hardware=st.sampled_from([None, "rtx-4090", "tpu"])),
    "units_trap": no_args("measurements.units_trap"),
    "sources": no_args("measurements.sources"),
    "h200_record": no_args("measurements.h200_record"),
    "H200Record": call(lambda batch, context: (R("measurements.h200_record")().weights_step(batch),
                                               R("measurements.h200_record")().full_step(batch, context)),
                       label="H200Record.weights_step/full_step", batch=st.sampled_from([1, 64, 3, 0, -1]),
                       context=st.sampled_from([1, 32768, 5, 0])),
    "StepRun": thunk("StepRun", lambda: R("measurements.h200_record")().fp8_test["fp8_e4m3"]),
    "GemvRun": thunk("GemvRun", lambda: R("measurements.h200_record")().gemv),
    "PromptRun": thunk("PromptRun", lambda: R("measurements.h200_record")().hf_ttft),
    "ContextRun": thunk("ContextRun", lambda: R("measurements.h200_record")().hf_tpot),
    "PrefixCacheRun": thunk("PrefixCacheRun", lambda: R("measurements.h200_record")().hf_prefix_cache),
}


def _cache_roundtrip(capacity_bytes, bytes_per_token, tokens):
    cache = R("prefix_cache.PrefixCache")(4, capacity_bytes, bytes_per_token)
    first = cache.lookup(tokens, max_tokens=max(0, len(tokens) - 1) if isinstance(tokens, list) else None)
    cache.insert(tokens)
    second = cache.lookup(tokens)
    cache.check_invariants()
    return first, second, cache.bytes_used, cache.hit_rate, cache.peek(tokens)


# caching (the model part): its edges belong to course_lib/core/caching.py
_CACHING = {
    "prefix_reuse": dict(model=models(), hardware=devices(), prefix_tokens=counts(1, 10**5),
                         new_tokens=counts(1, 10**4)),
    "ttft_with_cache": dict(model=models(), hardware=devices(), prompt_tokens=counts(1, 10**5),
                            cached_tokens=counts(0, 10)),
    "reusable_tokens": dict(prefix_tokens=counts(), block_tokens=counts(1, 128), min_tokens=counts(0, 2048)),
    "expected_ttft": dict(hit_rate=fraction(), ttft_hit=positive(), ttft_miss=positive()),
    "break_even_hit_rate": dict(ttft_hit=positive(), ttft_miss=positive(), write_overhead=positive(0, 10)),
    "write_overhead_time": dict(model=models(), tokens=counts(), bandwidth=positive()),
    "module_reuse": dict(model=models(), hardware=devices(), module_tokens=st.lists(counts(1, 1000), min_size=3,
                                                                                  max_size=3),
                         cached=st.lists(st.booleans(), min_size=3, max_size=3), new_tokens=counts(1, 100)),
    "turn_prompts": dict(system_tokens=counts(), user_tokens=counts(1), reply_tokens=counts(), turns=counts(1, 50)),
    "session_prefill_tokens": dict(system_tokens=counts(), user_tokens=counts(1), reply_tokens=counts(),
                                   turns=counts(1, 10**6), cached=st.booleans()),
    "session_cost": dict(model=models(), hardware=devices(), system_tokens=counts(0, 2000),
                         user_tokens=counts(1, 200), reply_tokens=counts(0, 200), turns=counts(1, 20)),
    "cache_memory_bytes": dict(model=models(), cached_tokens=counts(), sessions=counts(1)),
    "sessions_fit": dict(model=models(), hardware=devices(), session_tokens=counts(1)),
    "sessions_in_budget": dict(model=models(), budget_bytes=positive(0, 1e12), session_tokens=counts(1)),
    "shared_prefix_workload": dict(requests=counts(1, 50), prefixes=counts(1, 10), prefix_tokens=counts(1, 200),
                                   suffix_tokens=counts(1, 50), zipf=positive(0, 400)),
    "hit_rate_vs_budget": dict(requests=token_lists(50), budgets_bytes=st.lists(positive(0, 1e6), max_size=3),
                               bytes_per_token=positive(1, 1e4), block_tokens=counts(1, 16)),
}
CASES.update({name: call(f"caching.{name}", **args) for name, args in _CACHING.items()})
CASES.update({
    "PrefixReuse": call("caching.prefix_reuse", label="PrefixReuse", **_CACHING["prefix_reuse"]),
    "ModuleReuse": call("caching.module_reuse", label="ModuleReuse", **_CACHING["module_reuse"]),
    "SessionCost": call("caching.session_cost", label="SessionCost", **_CACHING["session_cost"]),
    "HitMiss": call("caching.prefix_reuse", label="HitMiss", **_CACHING["prefix_reuse"]),
    "check_session": call("caching.check_session", system_tokens=counts(), user_tokens=counts(),
                          reply_tokens=counts(), turns=counts(1, 10**6)),
    "session_derivation": no_args("caching.session_derivation"),
    "break_even_derivation": no_args("caching.break_even_derivation"),
    "provider_claims": no_args("caching.provider_claims"),
})

# kv and roofline: the lesson arithmetic
CASES.update({
    "default_kv_precision": call("precision.default_kv_precision", names=("precision",), precision=precisions(),
                                 kv_precision=st.one_of(st.none(), precisions())),
    "kv_rows": call("kv.kv_rows", names=("model",), models=st.lists(models(), max_size=3), context=counts(1),
                    batch=counts(1, 64),
                    kv_precision=precisions(), precision=precisions()),
    "KVRow": call("kv.kv_rows", label="KVRow", names=("model",), models=st.lists(models(), min_size=1, max_size=2),
                  context=counts(1)),
    "kv_crossover": call("kv.kv_crossover", model=models(), hardware=devices(), batch=counts(1, 64),
                         precision=precisions(), kv_precision=precisions()),
    "KVCrossover": call("kv.kv_crossover", label="KVCrossover", model=models(), hardware=devices(), batch=counts(1)),
    "context_limits": call("kv.context_limits", model=models(), tokens=counts()),
    "ContextLimits": call("kv.context_limits", label="ContextLimits", model=models(), tokens=counts()),
    "compute_time": call("roofline.compute_time", flops=positive(0, 1e20), peak_flops=positive(),
                         efficiency=fraction()),
    "memory_time": call("roofline.memory_time", nbytes=positive(0, 1e20), bandwidth=positive(),
                        efficiency=fraction()),
    "ridge_point": call("roofline.ridge_point", peak_flops=positive(), bandwidth=positive()),
    "attainable_flop_rate": call("roofline.attainable_flop_rate", intensity=positive(0, 1e6), peak_flops=positive(),
                                 bandwidth=positive()),
    "roofline_curve": call("roofline.roofline_curve", peak_flops=positive(), bandwidth=positive(),
                           lo=positive(1e-3, 1), hi=positive(1, 1e4), points=counts(2, 500)),
    "RooflinePoint": call(lambda **kw: R("roofline.RooflinePoint")(label="k", **kw), label="RooflinePoint",
                          flops=positive(0, 1e15),
                          bytes=positive(1, 1e12), seconds=positive(1e-9, 10)),
    "activation_precision": call("roofline.activation_precision", names=("precision",), precision=precisions()),
    "gemv_flops": call("roofline.gemv_flops", rows=counts(1), cols=counts(1), batch=counts(1, 64)),
    "gemv_bytes": call("roofline.gemv_bytes", rows=counts(1), cols=counts(1), precision=precisions(),
                       activation_precision=st.one_of(st.none(), precisions())),
    "gemv_cost": call("roofline.gemv_cost", rows=counts(1), cols=counts(1), precision=precisions()),
    "GemvCost": call("roofline.gemv_cost", label="GemvCost", rows=counts(1), cols=counts(1)),
    "bytes_per_token": call("roofline.bytes_per_token", model=models(), precision=precisions()),
    "BytesPerToken": call("roofline.bytes_per_token", label="BytesPerToken", model=models(), precision=precisions()),
    "prefill_flop_split": call("roofline.prefill_flop_split", model=models(), prompt_tokens=counts(1),
                               cached=counts(0, 10), dense=Keep(st.booleans())),
    "prefill_flops": call("roofline.prefill_flops", model=models(), prompt_tokens=counts(1), cached=counts(0, 10),
                          batch=counts(1, 64), dense=Keep(st.booleans())),
    "attention_share": call("roofline.attention_share", model=models(), prompt_tokens=counts(1)),
    "attention_crossover": call("roofline.attention_crossover", model=models()),
    "attention_scores_bytes": call("roofline.attention_scores_bytes", model=models(), prompt_tokens=counts(1),
                                   precision=precisions()),
    "qkv_bytes": call("roofline.qkv_bytes", model=models(), prompt_tokens=counts(1), precision=precisions()),
    "square_matmul_bytes": call("roofline.square_matmul_bytes", n=counts(1), precision=precisions()),
    "decode_step_bytes": call("roofline.decode_step_bytes", model=models(), context=counts(), precision=precisions(),
                              batch=counts(1, 64)),
    "critical_batch": call("roofline.critical_batch", hardware=devices(), precision=precisions(),
                           dtype=st.sampled_from([None, "fp16", "int3"])),
    "batch_curve": call("roofline.batch_curve", model=models(), hardware=devices(),
                        batches=st.lists(counts(1, 512), max_size=4), context=counts(1)),
    "total_latency": call("roofline.total_latency", ttft=positive(0, 10), n=counts(1), tpot=positive(0, 1)),
    "latency_conventions": call("roofline.latency_conventions", ttft=positive(0, 10), tpot=positive(0, 1),
                                n=counts(1)),
    "LatencyConventions": call("roofline.latency_conventions", label="LatencyConventions", ttft=positive(0, 10),
                               tpot=positive(0, 1), n=counts(1)),
    "total_vs_generated": call("roofline.total_vs_generated", model=models(), hardware=devices(),
                               prompt_tokens=counts(1), new_tokens=st.lists(counts(1, 4096), max_size=4)),
    "fit_line": call("roofline.fit_line", xs=st.lists(positive(0, 1e6), max_size=5),
                     ys=st.lists(positive(0, 1e6), max_size=5)),
    "relative_error": call("roofline.relative_error", measured=positive(), predicted=positive()),
    "nominal_params": call("roofline.nominal_params", model=models()),
})

# the classifier (what counts as a clear error, which negative or infinite values are documented, the time
# limit) is the fuzz benchmark's, course_lib.authoring.fuzz_api, shared so that the two judge alike
DOCUMENTED = _fuzz.DOCUMENTED
problems = _fuzz.problems


def outcome(c: Call, name: str = "") -> tuple[str, str]:
    """('ok', ''), ('error', message) for a clear ValueError/TypeError, or ('bad', what went wrong)."""
    return _fuzz.outcome(c.fn, c.kwargs, name or c.label, c.names)


def _public() -> list[str]:
    import course_lib
    import course_lib.core as core

    names = {n for n in getattr(core, "__all__", ()) if callable(getattr(core, n))}
    names |= {n for n in course_lib.__all__ if callable(getattr(course_lib, n))}
    return sorted(names)


PUBLIC = _public()


def test_every_public_callable_has_a_strategy():
    missing = [n for n in PUBLIC if n not in CASES]
    assert not missing, f"public callables of the core without a strategy in tests/test_api_edges.py: {missing}"


#: core modules whose names ``course_lib.core`` does not flatten, with the reason
MODULES_NOT_FLATTENED = {
    "codegen": "an authoring tool (python -m course_lib.core.codegen), not an API",
    "quality": "measurement verdicts (issue 13); its Comparison/compare would clash with core.compare's names",
    "serving": "the serving simulator; its simulate would clash with prefix_cache.simulate",
    "app": "the make-app planner's texts (reading, serving_reading, ...), for the app's widget only; its edges are "
           "tested in tests/test_widgets_capstone.py",
    "forecast": "engine profiles fitted to published measurements (issue 27): reached through estimate(..., "
                "engine=) and python -m course_lib.measure.validate --published; tested in tests/test_forecast.py",
    "numeric": "the checked formulas; their names (weight_bytes, kv_cache_bytes, ...) are the estimator's too; "
               "fuzzed from the formulas' own argument kinds in tests/test_numeric.py",
    "weightfile": "reads a GGUF or safetensors header into a Layout (issue 27's stretch goal): file input, so its "
                  "edges (missing, foreign, truncated and damaged files) are tested in tests/test_weightfile.py",
}


def test_every_core_module_is_flattened_or_says_why_not():
    from pathlib import Path

    import course_lib.core as core

    modules = {p.stem for p in Path(core.__file__).parent.glob("*.py") if not p.stem.startswith("_")}
    undecided = sorted(modules - set(core.MODULES) - set(MODULES_NOT_FLATTENED))
    assert not undecided, f"list these core modules in course_lib/core/__init__.py MODULES: {undecided}"


def test_core_reexports_every_public_name_of_its_modules():
    import course_lib.core as core

    missing = [f"{module}.{name}" for module in core.MODULES for name in mod(module).__all__
               if name not in core.__all__ and f"{module}.{name}" not in core.NOT_REEXPORTED]
    assert not missing, f"these names of the modules' __all__ are not offered by course_lib.core: {missing}"
    for name in core.__all__:
        assert getattr(core, name) is getattr(importlib.import_module(core.where(name)), name)
    assert set(core.__all__) == {n for m in core.MODULES for n in mod(m).__all__} - {
        n.split(".")[1] for n in core.NOT_REEXPORTED}


def test_the_known_failures_are_refused_with_clear_errors():
    from course_lib import estimate, weight_bytes
    from course_lib.core.prefix_cache import PrefixCache

    for bad_params in (10**400, 1e308, np.array("14"), bytearray(b"512"), b"512", "14"):
        with pytest.raises((ValueError, TypeError), match="params"):
            weight_bytes(bad_params)
    with pytest.raises(ValueError, match="prompt_tokens"):
        estimate("mistral-7b", "h100-sxm", prompt_tokens=1e308, new_tokens=128)
    with pytest.raises(ValueError, match="compute_efficiency"):
        estimate("mistral-7b", "h100-sxm", 512, 128, compute_efficiency=5e-324)
    with pytest.raises(ValueError, match="bytes_per_token"):
        PrefixCache(16, math.inf, 1e308)
    cache = PrefixCache(16, math.inf, 1e30)
    assert cache.bytes_used == 0
    cache.check_invariants()
    with pytest.raises(ValueError, match="batch"):
        estimate("mistral-7b", "h100-sxm", 512, 128, batch=2**53 + 1)


def test_the_harness_catches_each_kind_of_failure(monkeypatch):
    monkeypatch.setattr(_fuzz, "TIME_LIMIT_S", 0.05)

    def spin(n):
        while True:
            n += 1

    def raises(exc):
        raise exc

    cases = {
        "slow": Call("spin", spin, {"n": 0}, ("n",)),
        "nan": Call("nan", lambda x: {"t": math.nan}, {"x": 1}, ("x",)),
        "negative": Call("neg", lambda x: (1.0, -2.0), {"x": 1}, ("x",)),
        "inf": Call("inf", lambda x: [math.inf], {"x": 1}, ("x",)),
        "overflow": Call("overflow", lambda x: raises(OverflowError("big")), {"x": 1}, ("x",)),
        "unnamed": Call("unnamed", lambda x: raises(ValueError("bad value")), {"x": 1}, ("x",)),
    }
    for what, c in cases.items():
        kind, message = outcome(c)
        assert kind == "bad", (what, message)
    assert outcome(Call("named", lambda x: raises(ValueError("x must be > 0")), {"x": 1}, ("x",)))[0] == "error"
    assert outcome(Call("fine", lambda x: {"t": 1.0, "line": (-1.0, 2.0)}, {"x": 1}, ("x",)))[0] == "ok"


@pytest.mark.parametrize("name", PUBLIC)
def test_public_callable_edges(name):
    if name not in CASES:
        pytest.fail(f"{name} has no strategy")

    @settings(max_examples=EXAMPLES_PER_CALLABLE, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(CASES[name])
    def run(c):
        kind, what = outcome(c, name)
        assert kind != "bad", f"{c!r}: {what}"

    run()


def fuzz(n_per_callable: int, names=None) -> dict:
    """Draw ``n_per_callable`` calls of each callable; count the outcomes (for the issue's closing note)."""
    totals = {"calls": 0, "ok": 0, "error": 0, "other_exception": 0, "unnamed_error": 0, "nonsense": 0, "slow": 0}
    examples: dict[str, list[str]] = {}
    for name in names or sorted(CASES):
        strategy = CASES[name]

        @settings(max_examples=n_per_callable, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def run(c):
            try:
                kind, what = outcome(c, name)
            except Exception as exc:  # a strategy that cannot even be built
                kind, what = "bad", f"{type(exc).__name__}: {exc}"
            totals["calls"] += 1
            if kind == "bad":
                key = ("nonsense" if what.startswith("silent") else "slow" if what.startswith("call took more")
                       else "unnamed_error" if " names none of " in what.split(":")[0] else "other_exception")
                totals[key] += 1
                examples.setdefault(name, []).append(f"{key}: {c!r}: {what}"[:400])
            else:
                totals[kind] += 1

        try:
            run()
        except Exception as exc:  # e.g. the callable does not exist in this version
            examples.setdefault(name, []).append(f"skipped: {type(exc).__name__}: {exc}"[:300])
    return {"totals": totals, "examples": examples}


if __name__ == "__main__":  # python tests/test_api_edges.py [total calls, spread over every callable]
    import json
    import resource

    # a call that builds a huge list must fail with MemoryError here, not exhaust the machine
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    # derandomized draws stop early for small argument spaces: ask each callable for a fifth more
    report = fuzz(max(1, math.ceil(total * 1.2 / len(CASES))))
    print(json.dumps(report["totals"]))
    for name, ex in sorted(report["examples"].items()):
        print(f"== {name} ({len(ex)})")
        for line in ex[:3]:
            print("  ", line)
