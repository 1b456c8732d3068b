"""Measurements the course compares its predictions with, shipped in ``course_lib/data/``.

Lessons: 01, 04, 05, 06, 07, 08, 09

* ``published()``: public benchmark figures (llama.cpp on 13 devices, kipply's FasterTransformer
  numbers, Pope et al.'s PaLM, prompt-caching claims, the "14.96 GB" units trap), one dict per
  record. Every record has an ``id``, a ``kind`` and a ``source`` (repository/paper/document,
  section, snapshot date as given); units are in the field names (``decode_tokens_per_s``,
  ``prefill_ms``, ``max_latency_reduction_fraction`` ...). ``hardware`` is the
  ``course_lib.hardware`` catalog key where one exists, else ``None``.
* ``h200()``: a Mistral-7B-shaped model measured on one NVIDIA H200 (bandwidth and matmul
  ceilings, GEMV, CUDA-graph decode steps by batch and context, fp16 vs fp8 weights, Hugging Face
  eager TTFT/TPOT and prefix caching). Its ``source`` says where, when and how it was measured.

The files are read once by ``course_lib.core.data`` (``importlib.resources``: an installed wheel works too);
every call returns a fresh deep copy, so callers may modify what they get.
"""
from __future__ import annotations

import copy

from course_lib.core import data
from course_lib.core.validation import require_choice

__all__ = [
    "published", "published_about", "h200", "record", "llamacpp_rows", "units_trap", "sources",
    "KINDS",
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
