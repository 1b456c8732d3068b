"""Engine-aware forecasts (issue 27): the published-measurement set, engine profiles, estimate(engine=...), and the
held-out benchmark `python -m course_lib.measure.validate --published`."""
import copy
import dataclasses
import math

import pytest

from course_lib import estimate, get_hardware, get_model
from course_lib.core.numeric import raw as g
from course_lib.core import forecast
from course_lib.core.data import load_catalog


@pytest.fixture(scope="module")
def records():
    return load_catalog("published_validation")["records"]


def test_every_published_record_passes_the_schema(records):
    for r in records:
        forecast.check_record(r)
    assert len({r["id"] for r in records}) == len(records)
    for r in records:                         # every record cites a table (with its row/column) and a date
        assert r["source"]["url"].startswith("https://") and "row" in r["source"]["table"] or \
            "column" in r["source"]["table"], r["id"]
        assert all(k in r for k in r.get("assumed", [])) and (not r.get("assumed") or r["note"])


@pytest.mark.parametrize("change, match", [
    (lambda r: r["source"].pop("url"), "source.url"),
    (lambda r: r.update(metric="tokens"), "metric"),
    (lambda r: r.update(unit="ms"), "unit"),
    (lambda r: r.update(value=-3.0), "value"),
    (lambda r: r.update(engine="vllm"), "spelled"),
    (lambda r: r.pop("engine_version"), "engine_version"),
    (lambda r: r.update(batch=0), "batch"),
    (lambda r: r.update(run_figures=[241.94]), "run_figures must be a dict"),
    (lambda r: r.update(run_figures={"p99_ttft_ms": 5.0}), "'p99_ttft_ms'"),
    (lambda r: r.update(run_figures={"mean_ttft_ms": 0}), "'mean_ttft_ms'"),
    (lambda r: r.update(run_figures={"median_tpot_ms": float("nan")}), "'median_tpot_ms'"),
    (lambda r: r.update(run_figures={"benchmark_duration_s": "241.94"}), "'benchmark_duration_s'"),
])
def test_a_bad_record_is_named(records, change, match):
    r = copy.deepcopy(records[0])
    change(r)
    with pytest.raises(ValueError, match=match):
        forecast.check_record(r)


def test_the_set_covers_engines_devices_vendors_and_moe(records):
    assert len(records) >= 100
    assert {r["engine"] for r in records} == set(forecast.ENGINES)
    devices = {r["device"] for r in records}
    assert len(devices) >= 10
    classes = {forecast.device_class(d) for d in devices}
    assert classes == {"hbm", "gddr", "unified", "cpu"}                  # datacenter, consumer, Apple, a CPU
    names = " ".join(get_hardware(d).display for d in devices)
    for part in ("A100", "H100", "B200", "RTX 3090", "RTX 4090", "Apple M", "Xeon"):   # Ampere..Blackwell, Apple, CPU
        assert part in names, part
    assert any(get_model(r["model"]).is_moe for r in records) and any(not get_model(r["model"]).is_moe
                                                                       for r in records)


def test_no_engine_keeps_the_floor_and_an_engine_adds_its_costs():
    floor = estimate("llama-3.1-8b", "h100-sxm", 512, 128)
    same = estimate("llama-3.1-8b", "h100-sxm", 512, 128, engine=None)
    assert same == floor and floor.engine is None and floor.tpot == floor.floor_tpot
    hf = estimate("llama-3.1-8b", "h100-sxm", 512, 128, engine="transformers")
    assert hf.engine == "transformers" and hf.floor_tpot == floor.tpot and hf.floor_ttft == floor.ttft
    assert hf.tpot > 2 * floor.tpot                       # Python's per-layer dispatch: several floors per token
    assert hf.total == pytest.approx(hf.ttft + 127 * hf.tpot)
    assert hf.tpot_first <= hf.tpot <= hf.tpot_last
    assert estimate("llama-3.1-8b", "h100-sxm", 512, 128, engine="hf").tpot == hf.tpot      # an alias
    for name in forecast.ENGINES:
        e = estimate("qwen3-30b-a3b", "m3-max", 256, 32, precision="q4_k_m", engine=name)
        assert 0 < e.ttft < 1e3 and 0 < e.tpot < 1 and e.as_dict()["engine"] == name


def test_engine_arguments_are_checked():
    with pytest.raises(ValueError, match="engine"):
        estimate("llama-3-8b", "rtx-4090", 16, 4, engine="exllama")
    with pytest.raises(TypeError, match="engine"):
        estimate("llama-3-8b", "rtx-4090", 16, 4, engine=3)
    with pytest.raises(ValueError, match="engine.*not both"):
        estimate("llama-3-8b", "rtx-4090", 16, 4, engine="vLLM", compute_efficiency=0.5)


def test_stored_profiles_are_what_the_fitting_code_gives(capsys):
    assert forecast.main(["--check"]) == 0
    doc = load_catalog("engine_profiles")
    assert doc["fitted_from"]["records"] == len(load_catalog("published_validation")["records"])
    for name in forecast.ENGINES:
        p = forecast.get_profile(name)
        assert p.points > 0 and p.sources and p.constants_source
        assert set(p.params) == set(forecast.PARAMS)
        assert all(v >= 0 for v in p.params.values())
    capsys.readouterr()


def test_the_effective_efficiencies_grow_as_the_profile_says():
    # a memory-bound step: the fixed cost matters less as the bytes grow
    small, big = (g.effective_step_efficiency(t, 2e-3, 0.8) for t in (1e-3, 30e-3))
    assert small < big < 0.8
    # matrix products: more tokens per weight byte -> closer to eta_c
    few, many = (g.effective_gemm_efficiency(c, 0.6, 1e-3, 0.8) for c in (1e-4, 1e-1))
    assert few < many < 0.6


def test_held_out_predictions_never_see_their_source(records):
    recs = [r for r in records if r["engine"] in ("vLLM", "transformers")]
    base = forecast.held_out(recs)
    src = forecast.source_of(recs[0])
    poisoned = [dict(r, value=r["value"] * 50) if forecast.source_of(r) == src else r for r in recs]
    again = forecast.held_out(poisoned)
    for (r0, f0, p0), (r1, f1, p1) in zip(base.rows, again.rows):
        assert r0["id"] == r1["id"]
        if forecast.source_of(r0) == src:                 # its own (poisoned) values were not in its fit
            assert p1 == pytest.approx(p0, rel=1e-9) and f1 == pytest.approx(f0)
    st = base.stats()
    assert st["points"] == len(recs) and 0 <= st["predicted"]["within_30"] <= 1
    assert math.isfinite(st["predicted"]["geomean_abs_error"])


def _row(records, metric, device, url, ratio):
    r = copy.deepcopy(next(x for x in records if x["metric"] == metric))
    r.update(device=device, id=f"{metric}-{device}-{url}")
    r["source"]["url"] = url
    return (r, r["value"], r["value"] * ratio)


def test_held_out_error_sources_sort_points_by_what_the_forecast_could_know(records):
    rows = (_row(records, "decode_tokens_per_s", "rtx-4090", "https://a", 2.0),     # the 4090 in two documents
            _row(records, "decode_tokens_per_s", "rtx-4090", "https://b", 1.0),
            _row(records, "decode_tokens_per_s", "h20", "https://a", 0.5),          # the H20 in one
            _row(records, "prefill_tokens_per_s", "h20", "https://a", 1.0),
            _row(records, "output_throughput_tokens_per_s", "rtx-4090", "https://b", 4.0))   # batch unpublished
    rep = forecast.HeldOutReport(rows, "document")
    assert [rep.error_source(r) for r, _, _ in rows] == ["the rest", "the rest", "one-source device",
                                                         "one-source device", "maximum-load"]
    groups = {g["group"]: g for g in rep.by_error_source()}
    assert list(groups) == list(forecast.ERROR_SOURCES)
    ln2 = math.log(2)
    assert groups["maximum-load"]["points"] == 1 and groups["maximum-load"]["geomean_abs_error"] == pytest.approx(3)
    assert groups["one-source device"]["points"] == 2
    assert groups["one-source device"]["geomean_abs_error"] == pytest.approx(math.sqrt(2) - 1)
    assert groups["one-source device"]["within_30"] == 0.5 and groups["the rest"]["within_30"] == 0.5
    assert groups["the rest"]["share_of_error"] == pytest.approx(ln2 / (4 * ln2))
    assert sum(g["share_of_error"] for g in groups.values()) == pytest.approx(1)
    # by table: two tables of one document are two sources, so a device both measured is no longer 'one source'
    a, b = (copy.deepcopy(rows[2]), copy.deepcopy(rows[3]))
    b[0]["source"]["table"] = "Table 9, row 1"
    assert forecast.source_of(a[0], "table") != forecast.source_of(b[0], "table")
    assert [forecast.HeldOutReport((a, b), by).error_source(a[0]) for by in ("document", "table")] == \
        ["one-source device", "the rest"]
    with pytest.raises(ValueError, match="r: a record of this report"):
        rep.error_source(dict(rows[0][0], id="not-in-the-report"))


def test_validate_published_prints_the_held_out_tables(capsys):
    from course_lib.measure.validate import main
    assert main(["--published", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for name in list(forecast.ENGINES) + ["overall", "floor: geomean", "profile: geomean", "Worst held-out",
                                          "leave one document out", "TABLE",
                                          "Where the held-out error sits"] + list(forecast.ERROR_SOURCES):
        assert name in out, name
    assert out.strip().splitlines()[-1].startswith("overall (tables held out)")
    # docs/FORECAST.md quotes both tables: they must be what the command prints today
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[1] / "docs" / "FORECAST.md").read_text()
    lines = out.splitlines()
    table_lines = [ln for ln in lines if ln.startswith(("llama.cpp ", "vLLM ", "SGLang ", "TensorRT-LLM ",
                                                          "transformers ", "overall  ", *forecast.ERROR_SOURCES))]
    assert len(table_lines) == 12 + 2 * len(forecast.ERROR_SOURCES)
    for ln in table_lines:
        assert ln in doc, f"docs/FORECAST.md is out of date: {ln!r}"


# --- per-tensor-group precision -------------------------------------------------------------------------------
def test_gpt_oss_published_layout_streams_more_than_all_mxfp4():
    from course_lib.core.precision import LAYOUTS, get_layout
    entry = load_catalog("models")["models"]["gpt-oss-20b"]
    lay = get_layout(entry["published_layout"])
    assert lay is LAYOUTS["gpt-oss-mxfp4"] and lay.format("experts").name == "mxfp4"
    assert {lay.format(grp).name for grp in ("attention", "mlp", "embedding", "lm_head")} == {"bf16"}
    for model in ("gpt-oss-20b", "gpt-oss-120b"):
        flat = estimate(model, "h100-sxm", 128, 8, precision="mxfp4")
        pub = estimate(model, "h100-sxm", 128, 8, precision="gpt-oss-mxfp4")
        ratio = pub.decode_first.bytes / flat.decode_first.bytes
        assert 1.3 < ratio < 2.2, (model, ratio)               # priced all-MXFP4, batch-1 decode bytes are too small
        assert pub.weights_bytes > flat.weights_bytes and pub.kv_precision == "bf16"
    # the checkpoint's size: 20.9B parameters, 19.1B of them in MXFP4 experts -> ~13.8 GB (HF lists 13.8 GB)
    assert 13.0e9 < estimate("gpt-oss-20b", "h100-sxm", 8, 2, precision="gpt-oss-mxfp4").weights_bytes < 14.5e9


def test_gguf_layouts_keep_the_output_matrix_in_q6_k_and_plain_formats_still_work():
    q4 = estimate("llama-3-8b", "rtx-4090", 64, 8, precision="q4_0")
    gg = estimate("llama-3-8b", "rtx-4090", 64, 8, precision="gguf-q4_0")
    m = get_model("llama-3-8b")
    extra = m.vocab * m.hidden * (6.5625 - 4.5) / 8                   # the lm_head in Q6_K instead of Q4_0
    assert gg.weights_bytes - q4.weights_bytes == pytest.approx(extra)
    assert gg.decode_first.bytes - q4.decode_first.bytes == pytest.approx(extra)
    tied = get_model("llama-3.2-3b")                                   # a tied embedding is the Q6_K matrix too
    t = estimate(tied, "rtx-4090", 64, 8, precision="gguf-q4_0").weights_bytes
    assert t - estimate(tied, "rtx-4090", 64, 8, precision="q4_0").weights_bytes == pytest.approx(
        tied.vocab * tied.hidden * (6.5625 - 4.5) / 8)
    # a dict names groups; the rest take 'default'
    d = estimate("llama-3-8b", "rtx-4090", 64, 8, precision={"default": "q4_0", "lm_head": "q6_k"})
    assert d.weights_bytes == pytest.approx(gg.weights_bytes) and "lm_head:q6_k" in d.precision
    assert estimate("llama-3-8b", "rtx-4090", 64, 8, precision="fp16").precision == "fp16"
    with pytest.raises(ValueError, match="precision.*groups"):
        estimate("llama-3-8b", "rtx-4090", 64, 8, precision={"ffn": "q4_0"})
    with pytest.raises(ValueError, match="precision"):
        estimate("llama-3-8b", "rtx-4090", 64, 8, precision={"default": "q3_x"})


def test_an_engines_own_terms_are_never_lent_and_the_terms_add_up(records):
    # t_tok and kappa_x belong to one engine's code: the pooled fit keeps them at 0, so an engine held out
    # (no records of its own) gets none, while the stored transformers profile pays for its expanded K/V
    without = forecast.fit_profiles([r for r in records if r["engine"] != "transformers"])
    for p in forecast.ENGINE_ONLY:
        assert without[None].params[p] == 0.0 and without["transformers"].params[p] == 0.0
    assert forecast.get_profile("transformers").params["kappa_x"] > 0
    e = estimate("qwen2.5-7b", "a100-80gb", 8192, 64, precision="bf16", engine="transformers")
    t = forecast.decode_step_terms(e)
    assert sum(t[k] for k in ("fixed", "weights", "matmuls", "attention")) == pytest.approx(e.tpot_last, rel=1e-12)
    assert t["floor"] == e.decode_last.time and e.tpot_last > t["floor"]
    with pytest.raises(ValueError, match="engine"):
        forecast.decode_step_terms(estimate("qwen2.5-7b", "a100-80gb", 8192, 64, precision="bf16"))


def test_a_runs_constants_follow_its_release_device_flags_and_request_count(records):
    # every maximum-load run of a vllm-bench-serve page (or one benchmarked like it) names its request count: it
    # caps the batch
    for r in records:
        if r["metric"] == "output_throughput_tokens_per_s" and "vllm bench serve" in r["note"]:
            n = forecast.benchmark_requests(r)
            assert n in (100, 500, 1000, 5000), r["id"]
            assert forecast.record_constants(r, forecast._CONSTS[r["engine"]])["max_batch"] <= n
    base = dict(records[0], engine="vLLM", metric="tpot_ms", batch=1, note="")
    v1 = forecast._CONSTS["vLLM"]
    chunk = {(ver, dev): forecast.record_constants(dict(base, engine_version=ver, device=dev), v1)
             ["prefill_chunk_tokens"]
             for ver in ("vLLM 0.11.0 (vllm serve)", "vLLM 0.11.0 (vllm serve --max-num-batched-tokens 4096)",
                         "vLLM 0.6.3") for dev in ("h100-sxm", "a100-80gb")}
    assert chunk[("vLLM 0.11.0 (vllm serve)", "h100-sxm")] == 8192             # V1 on a >= 70 GiB non-A100 device
    assert chunk[("vLLM 0.11.0 (vllm serve)", "a100-80gb")] == 2048            # an A100 keeps the small budget
    assert {chunk[("vLLM 0.11.0 (vllm serve --max-num-batched-tokens 4096)", d)] for d in ("h100-sxm", "a100-80gb")} \
        == {4096}
    assert chunk[("vLLM 0.6.3", "h100-sxm")] is None                          # older releases: the whole prompt
    assert forecast.benchmark_requests(dict(base, requests=64)) == 64 and forecast.benchmark_requests(base) is None
    assert forecast.benchmark_requests(dict(base, note="bench_serving --num-prompts 5,000 at rate inf")) == 5000
    # a TensorRT engine (v0.17's trtllm-bench) attends over the whole context: Mistral's window does not shrink its K/V
    trt = [r for r in records if r["engine_version"].startswith("TensorRT-LLM 0.17") and r["model"] == "mistral-7b"]
    c = forecast.record_constants(trt[0], forecast._CONSTS["TensorRT-LLM"])
    assert c["full_attention"] and not forecast.record_constants(dict(trt[0], engine_version="TensorRT-LLM 1.0"),
                                                                 forecast._CONSTS["TensorRT-LLM"]).get("full_attention")
    # kv_cache_dtype 'auto': FP8 weights, K/V in the activations' bf16 (serving engines); trtllm-bench's FP8 engines
    # store FP8 K/V, as the estimator assumes for FP8 weights
    fp8 = [r for r in records if r["precision"] == "fp8"]
    kv = {r["engine"] + (" serve" if "trtllm-serve" in r["engine_version"] else ""):
          forecast.record_constants(r, forecast._CONSTS[r["engine"]]).get("kv_precision") for r in fp8}
    assert kv == {"SGLang": "bf16", "TensorRT-LLM serve": "bf16", "TensorRT-LLM": None}
    # the KV memory: vLLM's and SGLang's shares are of the whole device, weights included; TensorRT-LLM's of what
    # the weights leave
    from course_lib.core.models import get_model
    m, hw = get_model("qwen3-32b"), get_hardware("h100-sxm")
    b = {e: forecast._max_load_batch(m, hw, "bf16", None, 217, 201, 4096, forecast._CONSTS[e].get("kv_share_of_total"))
         for e in ("vLLM", "SGLang", "TensorRT-LLM")}
    assert b["SGLang"] < b["vLLM"] < b["TensorRT-LLM"] / 1.5, b
    long = max(trt, key=lambda r: r["prompt_tokens"])
    assert forecast._work(long, c)[0] * 3 < forecast._work(long, dict(c, full_attention=False))[0]   # fewer in flight


def test_llamacpp_builds_that_dequantised_to_f16_pay_for_the_copy(records):
    # llama.cpp's CUDA backend, from PR #3776 (Oct 2023) to PR #8075 (Jun 2024), dequantised a quantised matrix to
    # an f16 copy before cuBLAS once a step had more than 32 tokens: those builds' prompt steps on NVIDIA GPUs pay
    # kappa_dq over 4 bytes per weight per step instead of kappa_q
    assert forecast.build_month("llama.cpp (Dec 2023 build)") == (2023, 12)
    assert forecast.build_month("llama.cpp (RunPod build, May 2024; CUDA 12.1.1 / Metal)") == (2024, 5)
    assert forecast.build_month("llama.cpp 335acd2 (2023-08-24)") == (2023, 8)
    assert forecast.build_month("llama.cpp build 4d3726278 (7315)") is None
    c = forecast._CONSTS["llama.cpp"]
    pp = next(r for r in records if r["engine"] == "llama.cpp" and r["device"] == "rtx-4090"
              and r["precision"] == "gguf-q4_k_m" and r["metric"] == "prefill_tokens_per_s"
              and r["engine_version"].startswith("llama.cpp (RunPod build, May 2024"))
    assert forecast.record_constants(pp, c).get("f16_copy")
    for change in ({"engine_version": "llama.cpp 335acd2 (2023-08-24)"},
                   {"engine_version": "llama.cpp b3400 (Jul 2024)"}, {"engine_version": "llama.cpp (build not stated)"},
                   {"device": "m2-ultra"}, {"device": "mi300x"}):
        assert not forecast.record_constants(dict(pp, **change), c).get("f16_copy"), change
    # through the public prediction: raising kappa_dq slows exactly the quantised prompt steps of those builds
    base = forecast.get_profile("llama.cpp")
    more = dataclasses.replace(base, params=dict(base.params, kappa_dq=base.params["kappa_dq"] + 1.0))

    def slower(r):
        return forecast.predict_record(r, more)["predicted"] < forecast.predict_record(r, base)["predicted"]
    assert base.params["kappa_dq"] > 0 and slower(pp)
    same = [dict(pp, precision="fp16"), dict(pp, device="m2-ultra"), dict(pp, engine_version="llama.cpp (Jul 2024)"),
            dict(pp, metric="decode_tokens_per_s", prompt_tokens=0, output_tokens=512)]
    for r in same:
        assert forecast.predict_record(r, more)["predicted"] == forecast.predict_record(r, base)["predicted"], r
    # a step of at most 32 tokens keeps the quantised kernels
    assert not slower(dict(pp, prompt_tokens=32))


def test_llamacpp_builds_before_march_2024_multiply_the_output_matrix_by_every_prompt_token(records):
    # before PR #6122 (merged 2024-03-26) llama.cpp's graph ran the lm_head over every token of a prompt batch, not
    # only over the last one whose logits are kept: those builds' prompt steps carry (P - 1) more lm_head products
    c = forecast._CONSTS["llama.cpp"]
    dec = next(r for r in records if r["id"] == "xd-llama2-7b-fp16-rtx-4090-pp")
    assert forecast.build_month(dec["engine_version"]) == (2023, 12) and dec["prompt_tokens"] == 494
    may = dict(dec, engine_version="llama.cpp (RunPod build, May 2024; CUDA 12.1.1 / Metal)")
    assert forecast.record_constants(dec, c).get("full_logits")
    for r in (may, dict(dec, engine_version="llama.cpp (build not stated)"), dict(dec, engine="vLLM")):
        assert not forecast.record_constants(r, c if r["engine"] == "llama.cpp" else forecast._CONSTS["vLLM"]) \
            .get("full_logits"), r["engine_version"]

    def extra(p):   # seconds the older build's prompt of p tokens takes beyond the newer one's
        a, b = (dict(r, prompt_tokens=p) for r in (dec, may))
        return p / forecast.predict_record(a)["predicted"] - p / forecast.predict_record(b)["predicted"]
    assert extra(494) > 0 and extra(494) / extra(248) == pytest.approx(493 / 247, rel=1e-9)
    tg = next(r for r in records if r["id"] == "xd-llama2-7b-fp16-rtx-4090-tg")     # a decode step: one token
    assert forecast.predict_record(tg) == forecast.predict_record(dict(tg, engine_version=may["engine_version"]))


def test_first_batch_timings_are_the_llama2_snapshots_prompt_rows(records):
    # the LLaMA 2 snapshot and issue #1 timed each prompt with ./main, as the first large batch after loading: their
    # 28 prompt rows are such timings, their decode rows and llama-bench's rows are not, and the reason says why
    cold = [r for r in records if forecast.first_batch_timing(r)]
    assert len(cold) == 28 and {r["metric"] for r in cold} == {"prefill_tokens_per_s", "prefill_ms_per_token"}
    assert {r["prompt_tokens"] for r in cold} == {494, 265, 128}       # 128: assumed in issue #1
    runs = {r["engine_version"] for r in cold}
    assert all(not forecast.first_batch_timing(r) for r in records
               if r["engine_version"] in runs and r["metric"] == "decode_tokens_per_s")
    assert not any(forecast.first_batch_timing(r) for r in records if "RunPod" in r["engine_version"])
    gpu = next(r for r in cold if r["device"] == "rtx-4090")
    assert "first launch of each matrix kernel" in forecast.reason(gpu)
    assert "right after loading" in forecast.reason(next(r for r in cold if r["device"] == "m3-max"))
    with pytest.raises(ValueError, match="metric"):
        forecast.first_batch_timing(dict(gpu, metric="tokens"))


def test_a_maximum_load_runs_own_figures_give_its_concurrency_and_reason(records):
    # Little's law on the run's own figures: output tokens/s x mean TPOT sequences decoding at once, never more
    # than the requests sent; the reason names it beside the batch the profile assumes
    with_figs = [r for r in records if r.get("run_figures")]
    assert len(with_figs) >= 90 and all(r["metric"] == "output_throughput_tokens_per_s" for r in with_figs)
    for r in with_figs:
        n, b = forecast.decoding_concurrency(r), forecast.assumed_batch(r)
        assert 0 < n <= forecast.benchmark_requests(r) and isinstance(b, int) and b >= 1
        assert f"assumes {b} in flight" in forecast.reason(r) and f"{n:.0f} sequences" in forecast.reason(r)
    r = with_figs[0]
    plain = {k: v for k, v in r.items() if k != "run_figures"}
    assert forecast.decoding_concurrency(plain) is None and "run's own" not in forecast.reason(plain)
    assert forecast.decoding_concurrency(dict(r, value=1.0, run_figures={"mean_tpot_ms": 500.0})) == 0.5
    tpot = next(x for x in records if x["metric"] == "tpot_ms")
    assert forecast.assumed_batch(tpot) is None and forecast.decoding_concurrency(tpot) is None


def test_a_sharegpt_run_decodes_its_tail_at_smaller_batches(records):
    # ShareGPT's output lengths spread around their mean: continuous batching of the run's requests decodes part
    # of the run at batches below the cap, which costs more steps (and step-bound time) per token
    lengths = forecast.sharegpt_output_lengths(1000, 194.0, 215)
    assert len(lengths) == 1000 and abs(lengths.mean() / 194.0 - 1) < 0.02
    assert lengths.min() >= forecast.SHAREGPT_MIN_OUTPUT - 1 and lengths.max() <= forecast.SHAREGPT_MAX_TOTAL - 215
    h = forecast.batch_histogram(1000, 256, 194.0, 215)
    assert sum(b * k for b, k in h.items()) == lengths.sum()            # every token decoded once
    assert max(h) == 256 and min(h) < 16 and sum(h.values()) > lengths.sum() / 256
    small = forecast.batch_histogram(10, 256, 194.0, 215)               # fewer requests than the cap: all at once
    assert max(small) == 10
    assert sum(b * k for b, k in small.items()) == forecast.sharegpt_output_lengths(10, 194.0, 215).sum()
    share = [r for r in records if forecast.is_sharegpt(r) and forecast.benchmark_requests(r)]
    assert share and not forecast.is_sharegpt(next(r for r in records if r["metric"] == "tpot_ms"))
    r = share[0]
    plain = dict(r, note=r["note"].replace("ShareGPT", "fixed-length"))
    assert not forecast.is_sharegpt(plain)
    assert forecast.predict_record(r)["predicted"] < forecast.predict_record(plain)["predicted"]


def test_trtllm_serve_steps_outside_its_default_cuda_graphs_pay_t_eager(records):
    # TensorRT-LLM's PyTorch backend replays CUDA graphs only for decode-only batches of 1..32, 64 and 128
    assert forecast.TRT_GRAPH_BATCHES == frozenset(list(range(1, 33)) + [64, 128])
    serve = [r for r in records if r["engine"] == "TensorRT-LLM" and "trtllm-serve" in r["engine_version"]]
    bench = [r for r in records if r["engine"] == "TensorRT-LLM" and "trtllm-serve" not in r["engine_version"]]
    c = forecast._CONSTS["TensorRT-LLM"]
    assert all(forecast.record_constants(r, c).get("graph_batches") for r in serve)
    assert not any(forecast.record_constants(r, c).get("graph_batches") for r in bench)
    base = forecast.get_profile("TensorRT-LLM")
    more = dataclasses.replace(base, params=dict(base.params, t_eager=base.params["t_eager"] + 1e-4))
    assert base.params["t_eager"] > 0

    def pays(r):
        return forecast.predict_record(r, more)["predicted"] != forecast.predict_record(r, base)["predicted"]

    tpot = next(r for r in serve if r["metric"] == "tpot_ms")
    assert not pays(dict(tpot, batch=4)) and pays(dict(tpot, batch=48)) and not pays(dict(tpot, batch=64))
    assert pays(next(r for r in serve if r["metric"] == "output_throughput_tokens_per_s"))
    assert not any(pays(r) for r in bench[:5])


def test_hoppers_have_a_gemm_share_of_their_own():
    # η_c is fitted apart for NVIDIA's Hopper GPUs (their peak needs wgmma/TMA); η_m stays per memory class
    assert {forecast.gemm_class(h) for h in ("h100-sxm", "h100-pcie", "h200", "h20")} == {"hopper"}
    assert forecast.gemm_class("a100-80gb") == "hbm" and forecast.gemm_class("rtx-4090") == "gddr"
    assert forecast.device_class("h100-sxm") == "hbm"
    prof = forecast.get_profile("TensorRT-LLM")
    assert prof.efficiency("compute", "hopper") != prof.efficiency("compute", "hbm")
    with pytest.raises(ValueError, match="cls"):
        prof.efficiency("memory", "hopper")
    with pytest.raises(ValueError, match="kind"):
        prof.efficiency("speed", "hbm")
    # the profile prices an H100's and an A100's matrix products at their own shares
    base = forecast.get_profile("vLLM")
    more = dataclasses.replace(base, params=dict(base.params, **{"inv_eta_c:hopper": 4.0}))
    h100 = estimate("llama-3.1-8b", "h100-sxm", 2048, 2, precision="bf16")
    a100 = estimate("llama-3.1-8b", "a100-80gb", 2048, 2, precision="bf16")
    assert forecast.with_engine(h100, more).ttft > forecast.with_engine(h100, base).ttft
    assert forecast.with_engine(a100, more).ttft == forecast.with_engine(a100, base).ttft
