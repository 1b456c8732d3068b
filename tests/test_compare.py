"""course_lib.core.compare: every prediction equals the estimator's value for the same work, every measured
number is the record's own, efficiency = predicted / measured, and bad input gets one clear error."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.core.numeric import raw as g
from course_lib import estimate, get_hardware, get_model, weight_bytes
from course_lib.core import compare
from course_lib.core import measurements
from course_lib.core.hardware import custom_hardware


@pytest.fixture(scope="module")
def pub():
    return {r.case: r for r in compare.published_cases()}


@pytest.fixture(scope="module")
def datasheet():
    return {r.case: r for r in compare.h200_cases("datasheet")}


@pytest.fixture(scope="module")
def measured():
    return {r.case: r for r in compare.h200_cases("measured")}


# --- published -------------------------------------------------------------------------------------
def test_llamacpp_decode_cases_equal_estimator_and_records(pub):
    rows = [r for r in measurements.published() if r["kind"] == "llamacpp_benchmark" and r["hardware"]]
    assert rows
    for rec in rows:
        c = pub[f"{rec['id']}/tg"]
        hw = get_hardware(rec["hardware"])
        if "fp16" not in hw.peak_flops:      # Apple GPUs: the memory term alone
            assert c.predicted_s == pytest.approx(
                estimate(rec["model"], hw.with_peak("fp16", 1e30), compare.LLAMACPP_DECODE_CONTEXT, 2,
                         precision=rec["weights"]).tpot_first, rel=1e-12)
        else:
            assert c.predicted_s == estimate(rec["model"], hw, compare.LLAMACPP_DECODE_CONTEXT, 2,
                                             precision=rec["weights"]).tpot_first
        assert c.measured_s == 1 / rec["decode_tokens_per_s"]
        assert c.efficiency == c.predicted_s * rec["decode_tokens_per_s"] or \
            math.isclose(c.efficiency, c.predicted_s * rec["decode_tokens_per_s"], rel_tol=1e-12)
        assert c.metric == "tpot" and c.source == "published" and c.record == rec["id"]


def test_llamacpp_prefill_cases_only_where_a_peak_is_published(pub):
    skipped = dict(compare.skipped_published())
    for rec in (r for r in measurements.published() if r["kind"] == "llamacpp_benchmark" and r["hardware"]):
        hw = get_hardware(rec["hardware"])
        case = f"{rec['id']}/pp"
        if "fp16" in hw.peak_flops:
            c = pub[case]
            assert c.predicted_s == estimate(rec["model"], hw, compare.LLAMACPP_PROMPT_TOKENS, 1,
                                             precision=rec["weights"]).ttft
            assert c.measured_s == compare.LLAMACPP_PROMPT_TOKENS / rec["prefill_tokens_per_s"]
        else:
            assert case not in pub
            assert "FLOP/s" in skipped[rec["id"]]


def test_llamacpp_run_shape_and_context_shift():
    # the README's LLaMA 2 logs: n_ctx = 512, n_predict = 1024, a 494-token prompt, 1023 "eval" runs
    # (transcribed from the logs, so typed here again: a transcription error fails)
    assert (compare.LLAMACPP_CONTEXT_WINDOW, compare.LLAMACPP_PROMPT_TOKENS,
            compare.LLAMACPP_PREDICT_TOKENS) == (512, 494, 1024)
    assert compare.LLAMACPP_DECODE_STEPS == compare.LLAMACPP_PREDICT_TOKENS - 1   # the first token is prefill's
    ctx = compare.llamacpp_decode_contexts()
    assert len(ctx) == 1023
    assert ctx[:18] == list(range(494, 512))            # fills the window
    assert ctx[18] == 512 - (512 - 1) // 2              # then drops half of it (n_keep = 0)
    assert max(ctx) == 511 and min(ctx) == 257
    assert compare.LLAMACPP_DECODE_CONTEXT == round(sum(ctx) / len(ctx)) == 384
    # a run that never fills the window is a plain count
    assert compare.llamacpp_decode_contexts(10, 5, 512) == [10, 11, 12, 13]
    assert all(c < 64 for c in compare.llamacpp_decode_contexts(60, 500, 64, keep=3))


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt_tokens=600), "must fit"), (dict(predict_tokens=0), "predict_tokens"),
    (dict(keep=510), "keep"), (dict(prompt_tokens=1.5), "prompt_tokens")])
def test_llamacpp_decode_contexts_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        compare.llamacpp_decode_contexts(**kwargs)


def test_fp16_accumulate_peak_from_the_catalog_notes():
    assert compare.fp16_accumulate_peak("rtx-4090") == 330e12
    assert compare.fp16_accumulate_peak("rtx-3090") == 142e12
    assert compare.fp16_accumulate_peak("rtx-4090") == pytest.approx(2 * get_hardware("rtx-4090").flops("fp16"),
                                                                     rel=2e-3)
    assert compare.fp16_accumulate_peak("h100-pcie") is None
    with pytest.raises(TypeError, match="hardware"):
        compare.fp16_accumulate_peak(3)


def test_fp16_accumulate_cases_halve_the_geforce_f16_prefill_floors(pub):
    rows = compare.llamacpp_fp16_accumulate_cases()
    assert {r.hardware for r in rows} == {"rtx-3090", "rtx-4090"}
    for r in rows:
        base = pub[f"{r.record}/pp"]
        assert r.measured_s == base.measured_s and "-f16-" in r.record
        assert r.predicted_s < base.predicted_s
        hw = get_hardware(r.hardware)
        assert r.predicted_s == estimate("llama-2-7b", hw.with_peak("fp16", compare.fp16_accumulate_peak(hw)),
                                         compare.LLAMACPP_PROMPT_TOKENS, 1, precision="fp16").ttft
        assert f"{r.efficiency:.2f}" in base.notes


def test_fixed_cost_fit_recovers_a_line_and_rejects_bad_pairs(pub):
    def row(case, p, m):
        return compare.Comparison(case=case, source="published", model="m", hardware="h", metric="tpot",
                                  predicted_s=p, measured_s=m)
    t0, eta = compare.fixed_cost_fit(row("a", 8e-3, 3e-3 + 8e-3 / 0.9), row("b", 2e-3, 3e-3 + 2e-3 / 0.9))
    assert t0 == pytest.approx(3e-3, rel=1e-9) and eta == pytest.approx(0.9, rel=1e-9)
    f, q = pub["llamacpp-llama-2-7b-f16-rtx-4090-24gb/tg"], pub["llamacpp-llama-2-7b-q4_0-rtx-4090-24gb/tg"]
    t0, eta = compare.fixed_cost_fit(f, q)
    assert f.measured_s == pytest.approx(t0 + f.predicted_s / eta)
    assert q.measured_s == pytest.approx(t0 + q.predicted_s / eta)
    assert compare.fixed_cost_fit(q, f) == pytest.approx((t0, eta))
    with pytest.raises(ValueError, match="different floors"):
        compare.fixed_cost_fit(f, f)
    with pytest.raises(ValueError, match="larger"):
        compare.fixed_cost_fit(row("a", 8e-3, 1e-3), row("b", 2e-3, 5e-3))
    with pytest.raises(TypeError, match="Comparison"):
        compare.fixed_cost_fit(f, 3)


def test_every_published_record_is_either_compared_or_skipped_with_a_reason(pub):
    compared = {c.record for c in pub.values()}
    skipped = {rid for rid, why in compare.skipped_published() if why.strip()}
    assert {r["id"] for r in measurements.published()} <= compared | skipped
    assert "pope-2022-palm-540b-int8-64-tpu-v4" in skipped and "pope-2022-palm-540b-int8-64-tpu-v4" not in compared


def test_kipply_floor_is_all_parameters_over_bandwidth(pub):
    rec = measurements.record("kipply-13b-a100-40gb-fastertransformer")
    c = pub[f"{rec['id']}/decode"]
    assert c.predicted_s == g.memory_time(weight_bytes(rec["params"], "fp16"), get_hardware("a100-40gb").bandwidth, 1)
    assert c.measured_s == rec["decode_ms_per_token"] / 1e3


# --- H200 ------------------------------------------------------------------------------------------
def test_measured_ceilings_come_from_the_h200_record():
    c = measurements.h200()["ceilings"]
    hw = compare.h200_hardware("measured")
    assert hw.bandwidth == c["copy_read_plus_write_GBps"] * 1e9
    assert hw.flops("fp16") == c["matmul_8192_fp16_TFLOPs"] * 1e12
    assert compare.h200_hardware("datasheet") is get_hardware("h200")


def test_full_step_predictions_are_the_estimators_without_the_window(datasheet, measured):
    m = compare.h200_model(window=False)
    assert m.sliding_window is None and get_model("mistral-7b").sliding_window is not None
    for rows, ceilings in ((datasheet, "datasheet"), (measured, "measured")):
        hw = compare.h200_hardware(ceilings)
        for r in measurements.h200()["full_decode_step_cuda_graph"]["runs"]:
            c = rows[f"h200/full-step/b{r['batch']}-c{r['context']}"]
            assert c.predicted_s == estimate(m, hw, r["context"], 2, batch=r["batch"]).tpot_first
            assert c.measured_s == r["ms"] / 1e3
            # the model's K/V per token is what the program read per cached token
            assert r["kv_bytes_read"] == r["batch"] * r["context"] * m.kv_bytes_per_token()


def test_weights_only_steps_are_memory_bound_until_the_batch_is_large(datasheet):
    step = measurements.h200()["weights_only_decode_step_cuda_graph"]
    hw = get_hardware("h200")
    floor = g.memory_time(step["weight_bytes"], hw.bandwidth, 1)
    assert datasheet["h200/weights-step/b1"].predicted_s == floor
    assert datasheet["h200/weights-step/b1024"].predicted_s > floor     # compute-bound at batch 1024


def test_fp8_prediction_halves_the_time_and_the_measurement_does_not(datasheet):
    f16, f8 = datasheet["h200/fp8-test/fp16"], datasheet["h200/fp8-test/fp8"]
    assert f16.predicted_s / f8.predicted_s == pytest.approx(2.0, rel=1e-12)
    assert 1 < f16.measured_s / f8.measured_s < 2


def test_measured_ceilings_predict_longer_times_than_the_datasheet(datasheet, measured):
    assert set(measured) < set(datasheet)            # ceiling cases only exist against the datasheet
    for case, m in measured.items():
        assert m.predicted_s >= datasheet[case].predicted_s
        assert m.measured_s == datasheet[case].measured_s
        assert m.efficiency >= datasheet[case].efficiency


def test_hf_and_prefix_cache_predictions(datasheet):
    hf = measurements.h200()["hf_transformers_eager"]
    for r in hf["tpot"]:
        assert datasheet[f"h200/hf/tpot-c{r['context']}"].predicted_s == \
            estimate("mistral-7b", "h200", r["context"], 2).tpot_first
    for r in hf["ttft"]:
        assert datasheet[f"h200/hf/ttft-p{r['prompt']}"].predicted_s == \
            estimate("mistral-7b", "h200", r["prompt"], 1).ttft
    pc = hf["prefix_cache"]
    p = pc["prefix"] + pc["suffix"]
    assert datasheet["h200/hf/prefix-cached"].predicted_s == \
        estimate("mistral-7b", "h200", p, 1, cached_prefix_tokens=pc["prefix"]).ttft
    assert datasheet["h200/hf/prefix-full"].measured_s == pc["full_ms"] / 1e3


def test_case_ids_are_unique():
    rows = compare.all_cases() + compare.h200_cases("measured")
    ds = compare.all_cases()
    assert len({r.case for r in ds}) == len(ds)
    assert len(rows) > len(ds)


# --- this machine ----------------------------------------------------------------------------------
SPEC = get_model("llama-3-8b").scaled(name="tiny", layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64,
                                      intermediate=704, vocab=8000)
HW = custom_hardware("laptop", bandwidth=40e9, peak_flops={"fp32": 5e11, "fp16": 1e12})


def test_machine_cases_accept_pairs_mappings_and_timing_objects():
    # a DecodeTiming-like object: 16 cached + 3 warm-up steps, 8 timed steps attend to 20 ... 27 tokens
    timing = SimpleNamespace(seconds=2e-3, prompt_tokens=16, mean_context=23.5)
    prefill = SimpleNamespace(seconds=5e-3, prompt_tokens=64)
    rows = compare.machine_cases(SPEC, HW, decode=[(16, 1e-3), {"context": 32, "seconds": 1.5e-3}, timing],
                                 prefill=[prefill])
    assert [r.case for r in rows] == ["this machine/decode-c16", "this machine/decode-c32",
                                      "this machine/decode-c23", "this machine/prefill-p64"]
    assert rows[0].predicted_s == estimate(SPEC, HW, 16, 2, precision="fp32").tpot_first
    assert rows[3].predicted_s == estimate(SPEC, HW, 64, 1, precision="fp32").ttft
    assert rows[2].measured_s == 2e-3 and rows[3].metric == "ttft"


@pytest.mark.parametrize("kwargs, exc, match", [
    ({}, ValueError, "at least one measurement"),
    ({"decode": [(0, 1e-3)]}, ValueError, "context"),
    ({"decode": [(16, -1.0)]}, ValueError, "seconds"),
    ({"decode": [(16, 1e-3, 3)]}, ValueError, "pair"),
    ({"decode": "16"}, TypeError, "decode"),
    ({"prefill": [object()]}, TypeError, "prefill"),
    ({"decode": [(16, 1e-3)], "precision": "fp17"}, ValueError, "precision"),
])
def test_machine_cases_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        compare.machine_cases(SPEC, HW, **kwargs)


def test_machine_cases_bad_hardware():
    with pytest.raises(TypeError, match="hardware"):
        compare.machine_cases(SPEC, 40e9, decode=[(16, 1e-3)])


@given(st.integers(1, 2000), st.floats(1e-6, 10.0), st.sampled_from(["fp32", "fp16"]))
def test_machine_predictions_equal_the_estimator(context, seconds, precision):
    (row,) = compare.machine_cases(SPEC, HW, decode=[(context, seconds)], precision=precision)
    assert row.predicted_s == estimate(SPEC, HW, context, 2, precision=precision).tpot_first
    assert row.efficiency == row.predicted_s / seconds


# --- Comparison, summary -----------------------------------------------------------------------------
def _row(pred, meas, group="a", case="x"):
    return compare.Comparison(case=case, source="h200", model="m", hardware="h", metric="step",
                              predicted_s=pred, measured_s=meas, group=group)


@given(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0), st.floats(0.01, 100.0))
def test_efficiency_scales_inversely_with_the_measured_time(pred, meas, k):
    a, b = _row(pred, meas), _row(pred, meas * k)
    assert b.efficiency == pytest.approx(a.efficiency / k, rel=1e-12)
    assert a.efficiency * a.slowdown == pytest.approx(1.0, rel=1e-12)
    assert a.excess_s == meas - pred


@given(st.lists(st.tuples(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0)), min_size=1, max_size=8),
       st.floats(0.1, 10.0))
def test_geomean_efficiency_scales_with_a_common_factor(pairs, k):
    rows = [_row(p, m) for p, m in pairs]
    slower = [_row(p, m * k) for p, m in pairs]
    (s,), (t,) = compare.summary(rows), compare.summary(slower)
    assert t["geomean_efficiency"] == pytest.approx(s["geomean_efficiency"] / k, rel=1e-9)
    assert s["min_efficiency"] <= s["geomean_efficiency"] * (1 + 1e-12)
    assert s["geomean_efficiency"] <= s["max_efficiency"] * (1 + 1e-12)


def test_summary_groups_in_order_and_by_other_fields():
    rows = [_row(1, 2, "b"), _row(1, 8, "b"), _row(1, 1, "a")]
    s = compare.summary(rows)
    assert [x["group"] for x in s] == ["b", "a"]
    assert s[0]["geomean_efficiency"] == pytest.approx(0.25) and s[0]["cases"] == 2
    assert compare.summary(rows, by="metric")[0]["cases"] == 3
    assert compare.summary(rows, by=lambda r: r.measured_s > 1)[0]["group"] == "True"


@pytest.mark.parametrize("call, exc, match", [
    (lambda: compare.summary([]), ValueError, "empty"),
    (lambda: compare.summary([_row(1, 2)], by="colour"), ValueError, "by"),
    (lambda: compare.summary(_row(1, 2)), TypeError, "list"),
    (lambda: compare.summary([1.0]), TypeError, "Comparison"),
    (lambda: compare.geomean([]), ValueError, "empty"),
    (lambda: compare.geomean([1.0, -2.0]), ValueError, "values"),
    (lambda: _row(0, 1), ValueError, "predicted_s"),
    (lambda: _row(1, float("nan")), ValueError, "measured_s"),
    (lambda: compare.Comparison("c", "h200", "m", "h", "tpott", 1, 1), ValueError, "tpot"),
    (lambda: compare.Comparison("c", "lab", "m", "h", "tpot", 1, 1), ValueError, "source"),
    (lambda: compare.Comparison("", "h200", "m", "h", "tpot", 1, 1), ValueError, "case"),
    (lambda: compare.h200_cases("datasheat"), ValueError, "datasheet"),
    (lambda: compare.find(compare.h200_cases(), "h200/hf/tpot-c2049"), ValueError, "h200/hf/tpot-c2048"),
])
def test_clear_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_find_and_as_dicts(datasheet):
    rows = list(datasheet.values())
    r = compare.find(rows, "h200/hf/tpot-c2048")
    d = compare.as_dicts([r])[0]
    assert d["efficiency"] == r.efficiency and d["case"] == r.case and d["slowdown"] == r.slowdown
