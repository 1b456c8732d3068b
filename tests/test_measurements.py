"""Tests for the shipped measurement and glossary data and their loaders.

The expected numbers below are typed from the reference tables (published_measurements.md and
h200_mistral7b_measurements.json) so that a transcription error fails a test.
"""
from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from course_lib.lessons import glossary

from course_lib.core import data, measurements
from course_lib.core.units import GiB, format_bytes, parse_bytes

LLAMACPP_SOURCE = 'XiongjieDai/GPU-Benchmarks-on-LLM-Inference, README.md, section "Overview", snapshot Dec 2023'

# device as printed: (q4_0 decode, f16 decode, q4_0 prefill, f16 prefill), tokens/s, from the README table
LLAMACPP_TABLE = {
    "RTX 4080 16GB": (118.01, 44.2, 3774.79, 5158.19),
    "RTX 4000 Ada 20GB": (64.53, 22.96, 1819.86, 2369.09),
    "RTX 3090 24GB": (120.6, 51.85, 2601.81, 3075.37),
    "RTX 4090 24GB": (149.37, 60.78, 5531.19, 7348.69),
    "RTX 5000 Ada 32GB": (99.19, 36.31, 3525.7, 4936.59),
    "RTX A6000 48GB": (111.57, 44.01, 2979.12, 3707.88),
    "RTX 6000 Ada 48GB": (127.45, 50.56, 3911.18, 5403.6),
    "A100 80GB": (136.24, 73.83, 3443.98, 5105.77),
    "H100 PCIe 80GB": (133.77, 83.32, 4868.59, 7367),
    "M1 Max 24-core GPU 32GB": (48.65, 13.83, 199.65, 213.14),
    "M2 Ultra 76-core GPU 192GB": (91.89, 40.68, 1217.03, 1379.54),
    "M3 10-core GPU 16GB": (20.79, 3.61, 184.51, 25.21),
    "M3 Max 40-core GPU 48GB": (63.11, 24.76, 740.97, 761.4),
}
HARDWARE_KEYS = {
    "RTX 3090 24GB": "rtx-3090", "RTX 4090 24GB": "rtx-4090", "A100 80GB": "a100-80gb",
    "H100 PCIe 80GB": "h100-pcie", "M2 Ultra 76-core GPU 192GB": "m2-ultra",
    "M3 Max 40-core GPU 48GB": "m3-max",
}


# --- published measurements -----------------------------------------------------------------------
def test_every_record_has_id_kind_and_source():
    records = measurements.published()
    assert len(records) == 26 + 1 + 6
    ids = [r["id"] for r in records]
    assert len(set(ids)) == len(ids)
    for r in records:
        assert isinstance(r["source"], str) and r["source"].strip(), r["id"]
        assert r["kind"] in measurements.KINDS, r["id"]
        assert "hardware" in r and "device" in r, r["id"]
    assert measurements.published_about()


def test_llamacpp_table_transcribed_exactly():
    rows = measurements.llamacpp_rows()
    assert len(rows) == 2 * len(LLAMACPP_TABLE)
    assert list(dict.fromkeys(r["device"] for r in rows)) == list(LLAMACPP_TABLE)  # table order
    for r in rows:
        q4_dec, f16_dec, q4_pre, f16_pre = LLAMACPP_TABLE[r["device"]]
        expected = (q4_dec, q4_pre) if r["weights"] == "q4_0" else (f16_dec, f16_pre)
        assert (r["decode_tokens_per_s"], r["prefill_tokens_per_s"]) == expected, r["id"]
        assert r["source"] == LLAMACPP_SOURCE
        assert r["model"] == "llama-2-7b" and r["batch"] == 1
        assert r["hardware"] == HARDWARE_KEYS.get(r["device"]), r["device"]


def test_llamacpp_spot_checks():
    (rtx4090_q4,) = measurements.llamacpp_rows(weights="q4_0", hardware="rtx-4090")
    assert rtx4090_q4["decode_tokens_per_s"] == 149.37
    assert rtx4090_q4["prefill_tokens_per_s"] == 5531.19
    (h100_f16,) = measurements.llamacpp_rows(weights="f16", hardware="h100-pcie")
    assert h100_f16["prefill_tokens_per_s"] == 7367
    (m2_f16,) = measurements.llamacpp_rows(weights="F16", hardware="m2-ultra")
    assert m2_f16["decode_tokens_per_s"] == 40.68
    m3 = [r for r in measurements.llamacpp_rows(weights="f16") if r["device"] == "M3 10-core GPU 16GB"]
    assert m3[0]["prefill_tokens_per_s"] == 25.21 and m3[0]["hardware"] is None


def test_a100_80gb_variant_is_flagged_as_unknown():
    rows = measurements.llamacpp_rows(hardware="a100-80gb")
    assert {r["weights"] for r in rows} == {"f16", "q4_0"}
    for r in rows:
        assert r["device"] == "A100 80GB"
        assert "SXM" in r["note"] and "PCIe" in r["note"] and "unknown" in r["note"]


def test_hardware_keys_exist_in_catalog():
    from course_lib.core.hardware import list_hardware

    known = set(list_hardware())
    for r in measurements.published():
        if r.get("hardware") is not None:
            assert r["hardware"] in known, r["id"]


def test_q4_0_decodes_faster_than_f16_on_every_gpu():
    """A relation the data must satisfy: fewer weight bytes, faster memory-bound decode."""
    for device in LLAMACPP_TABLE:
        rows = {r["weights"]: r for r in measurements.llamacpp_rows() if r["device"] == device}
        assert rows["q4_0"]["decode_tokens_per_s"] > rows["f16"]["decode_tokens_per_s"], device


def test_other_published_records():
    kipply = measurements.record("kipply-13b-a100-40gb-fastertransformer")
    assert (kipply["prefill_ms"], kipply["decode_ms_per_token"], kipply["generated_tokens"],
            kipply["total_ms"]) == (63.17, 22.0, 10, 283.6)
    assert kipply["hardware"] == "a100-40gb" and kipply["framework"] == "FasterTransformer"
    assert "kipply" in kipply["source"] and "llm-analysis" in kipply["source"]

    pope = measurements.record("pope-2022-palm-540b-int8-64-tpu-v4")
    assert (pope["decode_ms_per_token"], pope["chips"], pope["weights"]) == (29, 64, "int8")
    assert pope["params"] == 540e9 and pope["hardware"] is None
    assert "Pope" in pope["source"] and "2022" in pope["source"]

    gim = measurements.record("gim-2023-prompt-cache")
    assert (gim["ttft_reduction_factor_gpu"], gim["ttft_reduction_factor_cpu"]) == (8, 60)

    openai = measurements.record("openai-prompt-caching")
    assert (openai["max_latency_reduction_fraction"], openai["min_prompt_tokens"],
            openai["cache_hit_increment_tokens"]) == (0.80, 1024, 128)
    assert measurements.record("anthropic-prompt-caching")["max_latency_reduction_fraction"] == 0.85
    assert measurements.record("sglang-radixattention")["max_throughput_gain_factor"] == 5


def test_units_trap_record():
    trap = measurements.units_trap()
    assert trap["model"] == "llama-3-8b" and trap["weights"] == "f16"
    assert trap["printed"] == "14.96 GB" and trap["actual_unit"] == "GiB"
    size = parse_bytes(trap["printed"], convention="source")
    assert size == trap["size_gib"] * GiB
    assert format_bytes(size, digits=4) == f'{trap["size_gb_si"]} GB' == "16.06 GB"
    # the Llama-3 line is from a later revision of the same README than the Dec 2023 LLaMA 2 table
    assert trap["source"].startswith("XiongjieDai/GPU-Benchmarks-on-LLM-Inference, README.md")
    assert "April 2024" in trap["source"] and trap["source"] != LLAMACPP_SOURCE


def test_units_trap_agrees_with_model_catalog():
    from course_lib.core.models import get_model

    fp16_bytes = get_model("llama-3-8b").params * 2
    assert fp16_bytes == pytest.approx(measurements.units_trap()["size_gb_si"] * 1e9, rel=1e-3)


def test_loaders_return_copies():
    first = measurements.published()
    first[0]["decode_tokens_per_s"] = -1
    first.clear()
    assert measurements.published()[0]["decode_tokens_per_s"] > 0
    data = measurements.h200()
    data["ceilings"]["copy_read_plus_write_GBps"] = 0
    assert measurements.h200()["ceilings"]["copy_read_plus_write_GBps"] == 4150.4


def test_lookup_errors():
    with pytest.raises(ValueError, match="record_id"):
        measurements.record("no-such-record")
    with pytest.raises(ValueError, match="model"):
        measurements.llamacpp_rows(model="llama-9-7b")
    with pytest.raises(ValueError, match="weights"):
        measurements.llamacpp_rows(weights="q8_0")
    with pytest.raises(ValueError, match="hardware"):
        measurements.llamacpp_rows(hardware="h200")
    with pytest.raises(TypeError, match="weights"):
        measurements.llamacpp_rows(weights=16)


def test_sources_listed():
    srcs = measurements.sources()
    assert srcs[0] == LLAMACPP_SOURCE
    assert len(srcs) == len(set(srcs)) == 9


# --- the H200 measurement set -----------------------------------------------------------------------
def test_h200_source():
    data = measurements.h200()
    src = data["source"]
    assert src["description"] == data["_about"]
    assert src["description"].startswith("Measured on one NVIDIA H200")
    assert src["date"] == "2026-11-29" and src["device"] == "NVIDIA H200"
    assert src["software"] == {"torch": "2.11.0+cu130", "transformers": "5.17.0"}


def test_h200_numbers_unchanged():
    d = measurements.h200()
    assert d["ceilings"]["copy_read_plus_write_GBps"] == 4150.4
    assert d["ceilings"]["matmul_8192_fp16_TFLOPs"] == 739.0
    assert d["gemv_fp16_eager"][0] == {"m": 4096, "k": 4096, "us": 42.94, "GBps": 781.7}
    assert d["gemv_fp16_eager"][2] == {"m": 16384, "k": 16384, "us": 150.67, "GBps": 3563.6}
    w = d["weights_only_decode_step_cuda_graph"]
    assert w["weight_bytes"] == 14220787712
    assert w["by_batch"][0] == {"batch": 1, "ms": 4.434, "ms_eager_python_loop": 6.227, "GBps": 3207.5,
                                "TFLOPs": 3.2}
    assert w["by_batch"][-1] == {"batch": 1024, "ms": 22.891, "ms_eager_python_loop": 22.849,
                                 "GBps": 621.2, "TFLOPs": 636.1}
    runs = d["full_decode_step_cuda_graph"]["runs"]
    assert len(runs) == 9
    assert runs[4] == {"batch": 1, "context": 32768, "ms": 7.886, "kv_bytes_read": 4294967296,
                       "achieved_GBps": 2348.1}
    hf = d["hf_transformers_eager"]
    assert [t["ms"] for t in hf["ttft"]] == [40.21, 37.1, 64.35, 271.4]
    assert [t["ms"] for t in hf["tpot"]] == [94.95, 95.62, 95.99]
    assert hf["tpot_other_machine_same_day_ms"] == [61.8, 84.8, 71.7]
    assert hf["prefix_cache"] == {"prefix": 4000, "suffix": 100, "full_ms": 129.75, "cached_ms": 39.31,
                                  "speedup": 3.3}
    fp8 = d["weights_only_decode_step_fp16_vs_fp8"]
    assert (fp8["fp16"]["ms"], fp8["fp8_e4m3"]["ms"], fp8["time_ratio_fp16_over_fp8"]) == (4.489, 2.656, 1.69)
    assert fp8["copy_read_plus_write_GBps"] == 4150.1


def test_h200_internal_relations():
    """Relations any correct copy satisfies (KV bytes = batch x context x 128 KiB; fp8 = fp16 / 2)."""
    d = measurements.h200()
    kv_per_token = parse_bytes("128 KiB")
    for run in d["full_decode_step_cuda_graph"]["runs"]:
        assert run["kv_bytes_read"] == run["batch"] * run["context"] * kv_per_token
    fp8 = d["weights_only_decode_step_fp16_vs_fp8"]
    assert fp8["fp8_e4m3"]["weight_bytes"] * 2 == fp8["fp16"]["weight_bytes"]
    assert fp8["fp16"]["weight_bytes"] == d["weights_only_decode_step_cuda_graph"]["weight_bytes"]
    assert round(fp8["fp16"]["ms"] / fp8["fp8_e4m3"]["ms"], 2) == fp8["time_ratio_fp16_over_fp8"]
    pc = d["hf_transformers_eager"]["prefix_cache"]
    assert round(pc["full_ms"] / pc["cached_ms"], 1) == pc["speedup"]


def test_data_files_ship_inside_the_package():
    data = resources.files("course_lib").joinpath("data")
    for name in ("published_measurements.json", "h200_mistral7b.json", "glossary.json"):
        text = data.joinpath(name).read_text(encoding="utf-8")
        json.loads(text)
    src = resources.files("course_lib").joinpath("core", "measurements.py").read_text(encoding="utf-8")
    assert "shared/" not in src and "../" not in src


# --- glossary --------------------------------------------------------------------------------------
REQUIRED_TERMS = [
    "bit", "byte", "SI prefix", "IEC prefix", "GiB", "parameter count", "precision (bytes per element)",
    "FP16", "BF16", "INT8", "q4_0", "weight bytes", "GEMV", "GEMM", "arithmetic intensity", "roofline",
    "ridge point", "memory-bound", "compute-bound", "prefill", "decode", "TTFT", "TPOT", "TPS", "KV cache",
    "GQA", "MQA", "MHA", "MLA", "MoE", "batch", "context", "prefix caching", "prompt cache",
    "session cache", "HBM", "GDDR6X", "unified memory", "bandwidth", "FLOP/s",
]
# a number followed by a unit symbol or word (the lessons' prose rule)
_NUMBER_WITH_UNIT = re.compile(
    r"(?<![\w.\-^])\d+(?:[.,]\d+)*\s?(?:[kKMGTPE]i?)?(?:B|b|bits?|bytes?|FLOPS?|FLOPs?|flops?|s|ms|[µμu]s|ns"
    r"|%|x|tokens?|billion|million|thousand|trillion|[KMBT])(?![A-Za-z0-9_])"
)


def lesson_numbers() -> list[int]:
    """The lessons of course_lib/data/lessons.json (the one list of lessons)."""
    import json

    from repo import ROOT
    return [int(e["n"]) for e in json.loads((ROOT / "course_lib" / "data" / "lessons.json").read_text())["lessons"]]


def test_glossary_terms():
    ts = glossary.terms()
    names = [t.term for t in ts]
    assert len(names) == len({n.lower() for n in names}), "terms must be unique"
    for name in REQUIRED_TERMS:
        assert name in names, name
    for t in ts:
        assert t.term.strip() and t.definition.strip(), t
        assert isinstance(t.lesson, int) and 0 <= t.lesson <= max(lesson_numbers()), t
        assert not _NUMBER_WITH_UNIT.search(t.definition), (t.term, _NUMBER_WITH_UNIT.search(t.definition))
    assert [t.lesson for t in ts] == sorted(t.lesson for t in ts)


def test_number_with_unit_pattern_catches_numbers():
    """The check above can fail: it flags typed numbers with units."""
    for bad in ("about 14 GB", "reads 1008 GB/s", "takes 13.9 ms", "7B parameters", "4.5 bits", "a 3.3x speedup"):
        assert _NUMBER_WITH_UNIT.search(bad), bad
    for fine in ("FP16 and BF16", "the RTX 4090", "Llama-3 models", "ten to the ninth"):
        assert not _NUMBER_WITH_UNIT.search(fine), fine


def test_glossary_lookup_and_markdown():
    assert glossary.define("kv cache").term == "KV cache"
    assert glossary.define("TTFT").lesson == 6
    with pytest.raises(ValueError, match="term"):
        glossary.define("KV cash")
    lesson3 = glossary.for_lesson(3)
    assert {"KV cache", "GQA", "MQA", "MHA", "MLA"} <= {t.term for t in lesson3}
    assert glossary.for_lesson(0) == []
    with pytest.raises(ValueError, match="lesson"):
        glossary.for_lesson(-1)
    table = glossary.as_markdown()
    lines = table.splitlines()
    assert lines[0] == "| Term | Definition | Lesson |"
    assert len(lines) == 2 + len(glossary.terms())
    assert "| **GiB** |" in table
    assert len(glossary.as_markdown(lesson=3).splitlines()) == 2 + len(lesson3)


# ---- course_lib.core.data: the one loader of every JSON catalog --------------------------------------
def test_one_loader_reads_every_catalog_once():
    names = data.catalog_names()
    assert {"hardware", "models", "published_measurements", "h200_mistral7b", "glossary", "lessons"} <= set(names)
    for name in names:
        assert data.load_catalog(name) is data.load_catalog(f"{name}.json")   # read once, cached
    copy = data.load_catalog("hardware", copy=True)
    assert copy == data.load_catalog("hardware") and copy is not data.load_catalog("hardware")
    with pytest.raises(ValueError, match="unknown name 'hardwear'.*Did you mean 'hardware'"):
        data.load_catalog("hardwear")
    with pytest.raises(TypeError, match="name must be a string"):
        data.load_catalog(3)


def test_no_module_reads_the_data_folder_but_the_loader():
    from pathlib import Path

    import course_lib

    root = Path(course_lib.__file__).parent
    readers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if p.name != "data.py" and re.search(r"resources\.files\(|data/[a-z_0-9]+\.json\"", p.read_text()))
    assert readers == [], f"read course_lib/data/*.json through course_lib.core.data.load_catalog: {readers}"


def test_the_h200_record_is_the_raw_set_in_si_units():
    raw, rec = measurements.h200(), measurements.h200_record()
    assert rec.copy_bandwidth == raw["ceilings"]["copy_read_plus_write_GBps"] * 1e9          # bytes/s
    assert rec.matmul_fp16_flops == raw["ceilings"]["matmul_8192_fp16_TFLOPs"] * 1e12        # FLOP/s
    wo = raw["weights_only_decode_step_cuda_graph"]
    assert [r.batch for r in rec.weights_steps] == [r["batch"] for r in wo["by_batch"]]
    assert [r.seconds * 1e3 for r in rec.weights_steps] == pytest.approx([r["ms"] for r in wo["by_batch"]])
    b1 = rec.weights_step(1)
    assert b1.eager_loop_seconds > b1.seconds and b1.weight_bytes == wo["weight_bytes"] == rec.weight_bytes
    assert rec.full_step(1, 1).context == 1 and rec.full_step(1, 1).seconds > b1.seconds  # the full step does more
    assert [g.seconds * 1e6 for g in rec.gemv] == pytest.approx([g["us"] for g in raw["gemv_fp16_eager"]])
    assert rec.fp8_test["fp8_e4m3"].seconds < rec.fp8_test["fp16"].seconds
    pc = rec.hf_prefix_cache
    assert pc.cached_seconds < pc.full_seconds and (pc.prefix_tokens, pc.suffix_tokens) == (4000, 100)
    assert [r.prompt_tokens for r in rec.hf_ttft] == sorted(r.prompt_tokens for r in rec.hf_ttft)
    with pytest.raises(ValueError, match="batch"):
        rec.weights_step(3)
    with pytest.raises(ValueError, match="context"):
        rec.full_step(1, 0)
    with pytest.raises(TypeError):
        rec.fp8_test["fp16"] = b1                                                            # read-only
