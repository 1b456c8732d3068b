"""The torch-free core: every formula and every number the lessons print.

Imports neither torch, ipywidgets nor matplotlib. Modules: validation (argument checks and the
limits they enforce), units, precision, models, hardware, data (the one loader of the JSON catalogs
in ``course_lib/data/``), formulas (sympy) with codegen and the generated numeric module, estimator,
kv, roofline, caching (the model), prefix_cache, compare, capstone and measurements (published
figures).

Every public name below can be imported from here (``from course_lib.core import estimate,
PrefixCache``); a name is imported from its module on first use, so ``import course_lib.core`` stays
light (sympy is only loaded for the ``formulas`` names). ``tests/test_api_edges.py`` runs every
function and class of ``__all__`` on valid and invalid inputs: each either returns finite,
non-negative results or raises a ValueError/TypeError that names the argument. The limits the
checks enforce are stated once, in :mod:`course_lib.core.validation`.
"""
from __future__ import annotations

import importlib

#: module -> the public names it contributes (the order is that of the course)
_EXPORTS: dict[str, tuple[str, ...]] = {
    "validation": ("MAX_COUNT", "MAX_QUANTITY", "MIN_POSITIVE", "require_count", "require_counts", "require_list",
                   "require_positive", "require_nonnegative", "require_real", "require_fraction", "require_choice",
                   "suggest"),
    "units": ("KB", "MB", "GB", "TB", "PB", "KiB", "MiB", "GiB", "TiB", "PiB", "MAX_DIGITS",
              "SourceUnit", "SOURCE_TABLE", "Quantity", "DIMENSIONS", "CONVENTIONS", "SYSTEMS",
              "parse_bytes", "format_bytes", "parse_params", "format_params", "parse_bandwidth",
              "format_bandwidth", "parse_time", "format_time", "parse_flops", "format_flops",
              "parse_flop_rate", "format_flop_rate", "parse_quantity", "format_quantity", "accepted_units",
              "convention_gap_percent"),
    "precision": ("Precision", "PRECISIONS", "bytes_per_element", "get_precision", "FLOAT_KV_FORMATS",
                  "default_kv_precision", "block_format"),
    "data": ("load_catalog", "catalog_names"),
    "models": ("ModelSpec", "get_model", "list_models", "catalog_entry"),
    "hardware": ("HardwareSpec", "Interconnect", "get_hardware", "list_hardware", "custom_hardware"),
    "formulas": ("Formula", "FORMULAS", "latex", "equation", "expr", "derive_decode_sum"),
    "estimator": ("Estimate", "PhaseCost", "estimate", "weight_bytes", "kv_cache_bytes", "crossover_context",
                  "tokens_that_fit", "compute_dtype"),
    "prefix_cache": ("PrefixCache", "PrefixHit", "SimulationResult", "simulate", "default_hash"),
    # caching: the model only (the TinyLM measurements live in course_lib.measure)
    "caching": ("HitMiss", "PrefixReuse", "prefix_reuse", "ttft_with_cache", "reusable_tokens", "expected_ttft",
                "break_even_hit_rate", "write_overhead_time", "ModuleReuse", "module_reuse",
                "MODULAR_REUSE_CAVEATS", "check_session", "turn_prompts", "session_prefill_tokens", "SessionCost",
                "session_cost", "session_derivation", "break_even_derivation", "cache_memory_bytes", "sessions_fit",
                "sessions_in_budget", "shared_prefix_workload", "hit_rate_vs_budget", "provider_claims", "MAX_TURNS",
                "MAX_MODULES", "MAX_WORKLOAD_TOKENS", "MAX_REPLAY_TOKENS"),
    "compare": ("Comparison", "METRICS", "SOURCES", "CEILINGS", "LLAMACPP_CONTEXT_WINDOW", "LLAMACPP_PROMPT_TOKENS",
                "LLAMACPP_PREDICT_TOKENS", "LLAMACPP_DECODE_STEPS", "LLAMACPP_DECODE_CONTEXT", "MAX_DECODE_STEPS",
                "llamacpp_decode_contexts", "fp16_accumulate_peak", "llamacpp_fp16_accumulate_cases",
                "fixed_cost_fit", "published_cases", "skipped_published", "h200_cases", "h200_hardware",
                "h200_model", "machine_cases", "all_cases", "summary", "geomean", "find", "as_dicts"),
    "capstone": ("THIS_MACHINE", "NOT_AVAILABLE", "TENSOR_PARALLEL_CHOICES", "COLLECTIVE_ALGORITHMS", "COLLECTIVES",
                 "CollectiveLatency", "COLLECTIVE_LATENCIES", "DashboardState", "DashboardResult",
                 "DashboardView", "CurvePoint", "hardware_choices", "resolve_hardware", "activation_bytes",
                 "collective_latency", "collective_time", "allreduce_time_per_pass", "alltoall_time_per_pass",
                 "StaticPlan", "static_plan", "ContinuousPlan", "continuous_plan", "simulate_plan", "compute",
                 "tpot_text", "ttft_text", "tps_text", "memory_text",
                 "dashboard_view", "latency_throughput_curve", "default_batches", "max_batch_that_fits",
                 "state_from_controls", "parse_interconnect", "describe", "meets_budget", "best_batch",
                 "what_binds",
                 "SizedPlan", "size_plan", "PlanCost", "plan_cost", "deployment_examples"),
    "kv": ("KVRow", "kv_rows", "KVCrossover", "kv_crossover",
           "ContextLimits", "context_limits"),
    "roofline": ("compute_time", "memory_time", "ridge_point", "attainable_flop_rate", "roofline_curve",
                 "RooflinePoint", "activation_precision", "gemv_flops", "gemv_bytes", "GemvCost", "gemv_cost",
                 "BytesPerToken", "bytes_per_token", "prefill_flop_split", "prefill_flops", "attention_share",
                 "attention_crossover", "attention_scores_bytes", "qkv_bytes", "square_matmul_bytes",
                 "decode_step_bytes", "critical_batch", "batch_curve", "total_latency", "LatencyConventions",
                 "latency_conventions", "total_vs_generated", "fit_line", "relative_error", "nominal_params"),
    "measurements": ("published", "published_about", "h200", "record", "llamacpp_rows", "units_trap", "sources",
                     "KINDS"),
}

__all__ = [name for names in _EXPORTS.values() for name in names]

_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
assert len(_WHERE) == len(__all__), "a public name is exported by two core modules"


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'course_lib.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"course_lib.core.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
