"""Measurements the course compares its predictions with, shipped in ``course_lib/data/``.

Lessons: 01, 04, 05, 06, 07, 08, 09, 10

* ``published()``: public benchmark figures (llama.cpp on 13 devices, kipply's FasterTransformer
  numbers, Pope et al.'s PaLM, prompt-caching claims, the "14.96 GB" units trap), one dict per
  record. Every record has an ``id``, a ``kind`` and a ``source`` (repository/paper/document,
  section, snapshot date as given); units are in the field names (``decode_tokens_per_s``,
  ``prefill_ms``, ``max_latency_reduction_fraction`` ...). ``hardware`` is the
  ``course_lib.core.hardware`` catalog key where one exists, else ``None``.
* ``h200()``: a Mistral-7B-shaped model measured on one NVIDIA H200 (bandwidth and matmul
  ceilings, GEMV, CUDA-graph decode steps by batch and context, fp16 vs fp8 weights, Hugging Face
  eager TTFT/TPOT and prefix caching). Its ``source`` says where, when and how it was measured.
  :func:`h200_record` is the same set as a typed record in SI units (seconds, bytes, bytes/s, FLOP/s), so
  that no lesson converts the raw fields' units itself.

The files are read once by ``course_lib.core.data`` (``importlib.resources``: an installed wheel works too);
every call returns a fresh deep copy, so callers may modify what they get.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from course_lib.core import data
from course_lib.core.validation import require_choice, require_count

__all__ = [
    "published", "published_about", "h200", "record", "llamacpp_rows", "units_trap", "sources",
    "KINDS", "FP8_TEST_BATCH", "H200Record", "StepRun", "GemvRun", "PromptRun", "ContextRun", "PrefixCacheRun",
    "h200_record",
]

#: The kinds of record in ``published()``.
KINDS = ("llamacpp_benchmark", "units_trap", "latency", "prompt_caching")


def _load(name: str) -> dict:
    return data.load_catalog(name)


def published() -> list[dict]:
    """Every published measurement record (a fresh copy on each call)."""
    return copy.deepcopy(_load("published_measurements.json")["records"])


def published_about() -> str:
    """What ``published()`` contains and how its fields are named."""
    return _load("published_measurements.json")["about"]


def h200() -> dict:
    """The H200 / Mistral-7B measurement set (a fresh copy), numbers exactly as measured."""
    return copy.deepcopy(_load("h200_mistral7b.json"))


def record(record_id: str) -> dict:
    """One published record by its ``id`` (close matches are suggested for a misspelt id)."""
    by_id = {r["id"]: r for r in _load("published_measurements.json")["records"]}
    key = require_choice("record_id", record_id, by_id)
    return copy.deepcopy(by_id[key])


def llamacpp_rows(model: str = "llama-2-7b", weights: str | None = None,
                  hardware: str | None = None) -> list[dict]:
    """The llama.cpp batch-1 benchmark rows for ``model``, optionally only one ``weights`` format
    (``"f16"`` or ``"q4_0"``) and/or one ``hardware`` catalog key, in the source's table order.

    Each row has ``device`` (as printed), ``hardware`` (catalog key or None), ``weights``,
    ``decode_tokens_per_s`` and ``prefill_tokens_per_s``.
    """
    rows = [r for r in _load("published_measurements.json")["records"] if r["kind"] == "llamacpp_benchmark"]
    model = require_choice("model", model, sorted({r["model"] for r in rows}))
    rows = [r for r in rows if r["model"] == model]
    if weights is not None:
        weights = require_choice("weights", weights, sorted({r["weights"] for r in rows}))
        rows = [r for r in rows if r["weights"] == weights]
    if hardware is not None:
        hardware = require_choice("hardware", hardware, sorted({r["hardware"] for r in rows if r["hardware"]}))
        rows = [r for r in rows if r["hardware"] == hardware]
    return copy.deepcopy(rows)


def units_trap() -> dict:
    """The record of the benchmark README's '14.96 GB' (really GiB) model size."""
    (trap,) = [r for r in _load("published_measurements.json")["records"] if r["kind"] == "units_trap"]
    return copy.deepcopy(trap)


def sources() -> list[str]:
    """The distinct sources cited by ``published()``, in order of first appearance, then the H200 set."""
    seen = dict.fromkeys(r["source"] for r in _load("published_measurements.json")["records"])
    return list(seen) + [_load("h200_mistral7b.json")["source"]["provenance"]]


# --------------------------------------------------------------------------------------------------
# The H200 set as a typed record in SI units
# --------------------------------------------------------------------------------------------------
#: the fp16-vs-fp8 runs' batch, as the record's ``about`` states it
FP8_TEST_BATCH = 16


@dataclass(frozen=True)
class StepRun:
    """One timed decode step: ``seconds`` per step at ``batch`` sequences (``context`` cached tokens for the
    full step, None for the weights-only one); ``eager_loop_seconds`` the same step launched from a Python loop
    (None where not measured); ``bytes_per_s`` the bandwidth it achieved; ``weight_bytes`` the weights it read."""

    batch: int
    seconds: float
    context: int | None = None
    eager_loop_seconds: float | None = None
    bytes_per_s: float | None = None
    weight_bytes: int | None = None


@dataclass(frozen=True)
class GemvRun:
    """One eager ``torch.mv`` of an ``m`` × ``k`` fp16 matrix: ``seconds`` per call, ``bytes_per_s`` achieved."""

    m: int
    k: int
    seconds: float
    bytes_per_s: float


@dataclass(frozen=True)
class PromptRun:
    """One Hugging Face eager prefill: ``prompt_tokens`` in ``seconds`` (the time to first token)."""

    prompt_tokens: int
    seconds: float


@dataclass(frozen=True)
class ContextRun:
    """One Hugging Face eager decode step at ``context`` cached tokens, in ``seconds``."""

    context: int
    seconds: float


@dataclass(frozen=True)
class PrefixCacheRun:
    """Hugging Face eager TTFT of ``prefix_tokens`` + ``suffix_tokens``: without (``full_seconds``) and with the
    prefix's KV cache reused (``cached_seconds``)."""

    prefix_tokens: int
    suffix_tokens: int
    full_seconds: float
    cached_seconds: float


@dataclass(frozen=True)
class H200Record:
    """The H200 / Mistral-7B set (:func:`h200`) in SI units.

    ``copy_bandwidth``: bytes/s of a kernel copy, read + write counted; ``matmul_fp16_flops``: FLOP/s of the
    8192³ fp16 matmul; ``weight_bytes``: the fp16 weights every step reads. ``fp8_test``: the weights-only step
    at batch 16 with ``"fp16"`` and ``"fp8_e4m3"`` weights. ``hf_tpot_other_machine_seconds``: the same
    Hugging Face decode on another machine the same day.
    """

    copy_bandwidth: float
    matmul_fp16_flops: float
    weight_bytes: int
    gemv: tuple[GemvRun, ...]
    weights_steps: tuple[StepRun, ...]
    full_steps: tuple[StepRun, ...]
    fp8_test: Mapping[str, StepRun]
    hf_ttft: tuple[PromptRun, ...]
    hf_tpot: tuple[ContextRun, ...]
    hf_tpot_other_machine_seconds: tuple[float, ...]
    hf_prefix_cache: PrefixCacheRun

    def weights_step(self, batch: int = 1) -> StepRun:
        """The weights-only CUDA-graph step at ``batch``."""
        by_batch = {r.batch: r for r in self.weights_steps}
        batch = require_count("batch", batch, minimum=1)
        if batch not in by_batch:
            raise ValueError(f"batch must be one of the measured batches {sorted(by_batch)}, got {batch}")
        return by_batch[batch]

    def full_step(self, batch: int = 1, context: int = 1) -> StepRun:
        """The full CUDA-graph decode step at ``batch`` and ``context``."""
        runs = {(r.batch, r.context): r for r in self.full_steps}
        key = (require_count("batch", batch, minimum=1), require_count("context", context, minimum=1))
        if key not in runs:
            raise ValueError(f"(batch, context) must be one of the measured pairs {sorted(runs)}, got {key}")
        return runs[key]


@lru_cache(maxsize=1)
def h200_record() -> H200Record:
    """The H200 set (:func:`h200`) as an :class:`H200Record`: every time in seconds, every rate in bytes/s or
    FLOP/s, each field converted here once from the unit its raw name gives (``ms``, ``us``, ``GBps``, ...)."""
    h = _load("h200_mistral7b.json")
    wo, hf = h["weights_only_decode_step_cuda_graph"], h["hf_transformers_eager"]
    f8, pc = h["weights_only_decode_step_fp16_vs_fp8"], hf["prefix_cache"]
    return H200Record(
        copy_bandwidth=h["ceilings"]["copy_read_plus_write_GBps"] * 1e9,
        matmul_fp16_flops=h["ceilings"]["matmul_8192_fp16_TFLOPs"] * 1e12,
        weight_bytes=int(wo["weight_bytes"]),
        gemv=tuple(GemvRun(r["m"], r["k"], r["us"] / 1e6, r["GBps"] * 1e9) for r in h["gemv_fp16_eager"]),
        weights_steps=tuple(StepRun(r["batch"], r["ms"] / 1e3, None, r["ms_eager_python_loop"] / 1e3,
                                    r["GBps"] * 1e9, int(wo["weight_bytes"])) for r in wo["by_batch"]),
        full_steps=tuple(StepRun(r["batch"], r["ms"] / 1e3, r["context"], None, r["achieved_GBps"] * 1e9)
                         for r in h["full_decode_step_cuda_graph"]["runs"]),
        fp8_test=MappingProxyType({k: StepRun(FP8_TEST_BATCH, f8[k]["ms"] / 1e3, None, None, f8[k]["GBps"] * 1e9,
                                              int(f8[k]["weight_bytes"])) for k in ("fp16", "fp8_e4m3")}),
        hf_ttft=tuple(PromptRun(r["prompt"], r["ms"] / 1e3) for r in hf["ttft"]),
        hf_tpot=tuple(ContextRun(r["context"], r["ms"] / 1e3) for r in hf["tpot"]),
        hf_tpot_other_machine_seconds=tuple(ms / 1e3 for ms in hf["tpot_other_machine_same_day_ms"]),
        hf_prefix_cache=PrefixCacheRun(pc["prefix"], pc["suffix"], pc["full_ms"] / 1e3, pc["cached_ms"] / 1e3),
    )
