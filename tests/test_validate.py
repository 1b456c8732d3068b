"""The TinyLM benchmark (course_lib.measure.benchmarks.tinylm_bench; its command course_lib.measure.validate),
calibrate and predict: the run; predictions follow the formulas.

No timing thresholds: the predictions are checked on a hand-made Calibration (known numbers), the
``--fast`` run only for its shape (columns, last line) and error handling.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import math

import pytest

from course_lib import estimate
from course_lib.core import numeric as g

torch = pytest.importorskip("torch")

from course_lib.measure import calibrate, predict, probes  # noqa: E402
from course_lib.measure import validate  # noqa: E402  (the command)
from course_lib.measure.benchmarks import tinylm_bench as bench  # noqa: E402

SPEC = calibrate.VALIDATION_MODELS["llama-S"]


def _calibration(gemv_bw=10e9, copy_bw=10e9, kv_bw=5e9, flops=1e11, t_op=2e-6, t_view=5e-7, gemm=None):
    copy = probes.CopyResult(buffer_bytes=10**8, bytes=2 * 10**8, counted="read+write", seconds=2 * 10**8 / copy_bw,
                            q1_seconds=2 * 10**8 / copy_bw, q3_seconds=2 * 10**8 / copy_bw, repeats=1, device="cpu",
                            threads=1)
    mm = probes.MatmulResult(n=1000, dtype="fp32", flops=2 * 10**9, seconds=2e9 / flops, q1_seconds=2e9 / flops,
                            q3_seconds=2e9 / flops, repeats=1, device="cpu", threads=1)
    ov = probes.OverheadResult(seconds=t_op, q1_seconds=t_op, q3_seconds=t_op,
                              per_kind={"elementwise": t_op, "matmul": t_op, "view": t_view}, repeats=1, device="cpu",
                              threads=1)
    specs = list(calibrate.VALIDATION_MODELS.values())
    gemv = {sh: gemv_bw for s in specs for sh in calibrate.weight_matrices(s)}
    kv = {(s.kv_heads, s.heads // s.kv_heads, s.head_dim): kv_bw for s in specs}
    return calibrate.Calibration(device="cpu", device_name="test CPU", threads=1, torch_version=torch.__version__,
                                load_before=(0.1, 0.2, 0.3), copy=copy, matmul=mm, overhead=ov, gemv=gemv,
                                gemm=dict(gemm or {}), kv=kv)


def test_weight_matrices_plus_vectors_are_the_streamed_weights():
    for s in calibrate.VALIDATION_MODELS.values():
        mats = calibrate.weight_matrices(s)
        mat_params = sum(m * k * n for (m, k), n in mats.items())
        vectors = s.layers * 2 * s.hidden + s.hidden + s.hidden  # block norms, final norm, one embedding row
        assert mat_params + vectors == s.streamed_params(1)
        assert sum(mats.values()) == 7 * s.layers + 1


def test_models_span_the_promised_weight_sizes():
    sizes = sorted(s.weight_bytes("fp32") for s in calibrate.VALIDATION_MODELS.values())
    assert len(sizes) >= 3 and 0.25e9 <= sizes[0] and sizes[-1] <= 2e9
    for s in calibrate.VALIDATION_MODELS.values():
        assert s.kv_heads < s.heads and s.mlp == "gated"  # Llama-like: GQA, SwiGLU


def test_tpot_terms_follow_the_formulas():
    cal = _calibration()
    c = 1000
    p = predict.predict_tpot(SPEC, c, cal)
    ops = predict.count_ops(SPEC, "decode", c)
    k_tok = SPEC.kv_bytes_per_token("fp32")
    # same GEMV and copy bandwidth: the weights term is the streamed bytes over that bandwidth
    assert math.isclose(p.terms["weights"], SPEC.decode_weight_bytes("fp32") / 10e9, rel_tol=1e-12)
    assert math.isclose(p.terms["kv"], g.kv_read_time(1, c, k_tok, 5e9), rel_tol=1e-12)
    assert math.isclose(p.terms["overhead"], ops["ops"] * 2e-6) and math.isclose(p.terms["views"], ops["views"] * 5e-7)
    assert math.isclose(p.seconds, g.calibrated_decode_time(p.terms["weights"], p.terms["kv"], ops["ops"], 2e-6,
                                                            ops["views"], 5e-7))
    # uncalibrated: the course's estimate with the copy bandwidth, i.e. decode bytes / copy bandwidth
    est = estimate(SPEC, cal.hardware(), prompt_tokens=c - 1, new_tokens=2, precision="fp32")
    assert math.isclose(p.uncalibrated, est.decode_first.time)
    assert math.isclose(p.uncalibrated, (SPEC.decode_weight_bytes("fp32") + c * k_tok) / 10e9, rel_tol=1e-12)
    # faster shapes, faster weights term; more context, more K/V time; a batch reads the weights once
    assert predict.predict_tpot(SPEC, c, _calibration(gemv_bw=20e9)).terms["weights"] < p.terms["weights"]
    assert predict.predict_tpot(SPEC, 2 * c, cal).terms["kv"] == pytest.approx(2 * p.terms["kv"])
    b4 = predict.predict_tpot(SPEC, c, cal, batch=4)
    assert b4.terms["kv"] == pytest.approx(4 * p.terms["kv"]) and b4.batch == 4
    assert b4.terms["weights"] >= p.terms["weights"]


def test_cold_op_costs_interpolate_between_probed_streams():
    cal = _calibration()
    assert cal.op_costs(10**9) == (2e-6, 5e-7)  # no cold probe: the hot costs
    cal.cold_ops = [(0, 3e-6, 1e-6), (2**25, 9e-6, 3e-6), (2**26, 2e-5, 5e-6)]
    assert cal.op_costs(0) == (3e-6, 1e-6) and cal.op_costs(2**30) == (2e-5, 5e-6)
    t_op, t_view = cal.op_costs(2**24)
    assert math.isclose(t_op, 6e-6) and math.isclose(t_view, 2e-6)
    s = SPEC
    per_layer = (s.heads * s.head_dim * s.hidden * 2 + 2 * s.kv_heads * s.head_dim * s.hidden
                 + 3 * s.hidden * s.intermediate) * 4
    assert calibrate.stream_between_ops(s) == per_layer
    p = predict.predict_tpot(s, 100, cal)
    ops = predict.count_ops(s, "decode", 100)
    t_op, t_view = cal.op_costs(per_layer)
    assert math.isclose(p.terms["overhead"], ops["ops"] * t_op)
    assert math.isclose(p.terms["views"], ops["views"] * t_view)


def test_decode_op_count_does_not_depend_on_context():
    small = SPEC.scaled(name="ctx-check", layers=1)
    a = predict.count_ops(small, "decode", 5)
    b = predict.count_ops(small, "decode", 40)
    c = predict.count_ops(small, "decode", 4096)
    assert a["by_name"] == b["by_name"] == c["by_name"]


def test_op_counts_grow_by_a_fixed_amount_per_layer():
    counts = [predict.count_ops(SPEC.scaled(name=f"x{n}", layers=n), "decode", 20) for n in (1, 2, 3)]
    per_layer = counts[1]["ops"] - counts[0]["ops"]
    assert per_layer > 0 and counts[2]["ops"] - counts[1]["ops"] == per_layer
    assert counts[1]["views"] - counts[0]["views"] == counts[2]["views"] - counts[1]["views"]
    assert not any("linear" in k for k in counts[0]["by_name"]) or counts[0]["ops"] < sum(counts[0]["by_name"].values())


def test_ttft_terms_follow_the_formulas():
    P = 128
    gemm = {(P, m, k): 5e10 for (m, k) in calibrate.weight_matrices(SPEC)}
    cal = _calibration(gemm=gemm)
    p = predict.predict_ttft(SPEC, P, cal)
    dense = g.prefill_flops_dense(1, SPEC.block_params, P, SPEC.vocab, SPEC.hidden, SPEC.layers, SPEC.heads,
                                  SPEC.head_dim, 0)
    attn = 4 * SPEC.layers * SPEC.heads * SPEC.head_dim * P * P
    assert math.isclose(p.terms["attention"], attn / 1e11)
    # every linear at 5e10 FLOP/s: logits at every position, so the linear FLOPs are dense minus attention
    vectors_flops = 2 * P * (SPEC.block_params - sum(m * k * n for (m, k), n in calibrate.weight_matrices(SPEC).items()
                                                      if (m, k) != (SPEC.vocab, SPEC.hidden)))
    assert math.isclose(p.terms["linear"] * 5e10 + vectors_flops, dense - attn, rel_tol=1e-9)
    assert math.isclose(p.uncalibrated, estimate(SPEC, cal.hardware(), P, 1, precision="fp32").ttft)
    assert p.uncalibrated < p.seconds  # the estimate counts causal attention and one position's logits


@pytest.fixture(scope="module")
def fast_output():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = validate.main(["--fast", "--threads", "1", "--device", "cpu", "--no-progress"])
    return rc, out.getvalue()


def test_fast_run_prints_the_table_and_the_last_line(fast_output):
    rc, text = fast_output
    lines = text.strip().splitlines()
    # the exit status says whether the run judged its own measurements reliable (this machine may be busy)
    assert (rc, lines[-2].startswith("measurements: all")) in ((0, True), (bench.NOISY_EXIT, False)), lines[-2]
    assert bench.LAST_LINE_RE.match(lines[-1]), lines[-1]
    header = next(line for line in lines if line.startswith("phase"))
    for col in bench.COLUMNS:
        assert col in header
    rows = [line.split() for line in lines if line.split()[:1] in (["TPOT"], ["TTFT"])]
    rows = [r for r in rows if len(r) > 1 and r[1] in calibrate.FAST_MODELS]
    n_models, n_ctx, n_prompts = len(calibrate.FAST_MODELS), len(calibrate.FAST_CONTEXTS), len(calibrate.FAST_PROMPTS)
    assert len(rows) == n_models * n_ctx + n_prompts
    assert "threads=1" in text and "load_avg" in text and "torch=" in text and "device=cpu" in text


def test_report_numbers_are_consistent():
    cal = _calibration()
    pts = []
    for c, measured in ((128, 0.02), (1024, 0.03)):
        pr = predict.predict_tpot(SPEC, c, cal)
        pts.append(bench.Point("tpot", SPEC.name, 3e8, c, pr.seconds, measured, 0.05, pr.uncalibrated, 8, pr))
    rep = bench.ValidationReport(cal, pts, (0.0, 0.0, 0.0), 1.0)
    errs = [abs(p.predicted - p.measured) / p.measured for p in pts]
    assert math.isclose(rep.decode_max_abs_error, max(errs))
    assert math.isclose(rep.decode_geomean_abs_error, math.sqrt(errs[0] * errs[1]))
    assert bench.LAST_LINE_RE.match(rep.last_line())
    assert rep.last_line() == (f"decode_geomean_abs_error={rep.decode_geomean_abs_error:.3f} "
                               f"decode_max_abs_error={rep.decode_max_abs_error:.3f}")
    assert len(rep.table().splitlines()) == 2 + len(pts)


def test_noisy_points_are_counted_and_named_in_the_report():
    cal = _calibration()
    pr = predict.predict_tpot(SPEC, 128, cal)
    quiet = bench.Point("tpot", SPEC.name, 3e8, 128, pr.seconds, 0.02, 0.05, pr.uncalibrated, 8, pr)
    noisy = bench.Point("tpot", SPEC.name, 3e8, 1024, pr.seconds, 0.03, 0.9, pr.uncalibrated, 8, pr, "noisy",
                           "the middle half of the repeats spans 90% of the median")
    assert bench.ValidationReport(cal, [quiet], (0.0,) * 3, 1.0).quality_line() == \
        "measurements: all 1 points reliable"
    rep = bench.ValidationReport(cal, [quiet, noisy], (0.0,) * 3, 1.0)
    assert rep.noisy_points == 1 and rep.noisy_decode_points == 1
    line = rep.quality_line()
    assert line.startswith("measurements: 1 of 2 points not reliable") and "spans 90%" in line
    assert f"exit status {bench.NOISY_EXIT}" in line and "noisy" in rep.table()
    assert rep.report().splitlines()[-2] == line


@pytest.mark.parametrize("call,err,match", [
    (lambda cal: predict.predict_tpot(SPEC, 0, cal), ValueError, "context"),
    (lambda cal: predict.predict_tpot(SPEC, 10, cal, batch=0), ValueError, "batch"),
    (lambda cal: predict.predict_tpot(SPEC, 10, "fast"), TypeError, "calibration"),
    (lambda cal: predict.predict_ttft(SPEC, -1, cal), ValueError, "prompt_tokens"),
    (lambda cal: predict.predict_tpot("no-such-model", 10, cal), ValueError, "model"),
    (lambda cal: predict.predict_tpot("deepseek-v3", 10, cal), ValueError, "dense"),
    (lambda cal: bench.run(models=[], calibration=cal), ValueError, "models"),
    (lambda cal: bench.run(contexts=[0], calibration=cal), ValueError, "contexts"),
    (lambda cal: bench.run(fast="yes"), TypeError, "fast"),
    (lambda cal: bench.run(runs=2, calibration=cal), ValueError, "runs"),
    (lambda cal: predict.count_ops(SPEC, "training"), ValueError, "phase"),
    (lambda cal: bench.run(clock="process", threads=2, device="cpu", calibration=cal), ValueError, "threads=1"),
    (lambda cal: calibrate.calibrate(clock="sundial"), ValueError, "clock"),
])
def test_bad_input_gets_one_clear_error(call, err, match):
    with pytest.raises(err, match=match):
        call(_calibration())


def test_main_reports_bad_arguments_without_a_traceback(capsys):
    assert validate.main(["--threads", "0", "--fast", "--no-progress"]) == 2
    assert "threads" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Prefill from cached K/V (lesson 07) and the score-pass term
# --------------------------------------------------------------------------------------------------
def test_cached_tokens_zero_is_the_full_prefill():
    cal = _calibration()
    a, b = predict.predict_ttft(SPEC, 96, cal), predict.predict_ttft(SPEC, 96, cal, cached_tokens=0, reuse="session")
    assert a.terms == b.terms and a.uncalibrated == b.uncalibrated and a.counts == b.counts
    assert set(a.terms) == {"linear", "attention", "overhead", "views"} and a.cached_tokens == 0


@pytest.mark.parametrize("reuse", predict.REUSE_PATHS)
def test_cached_prefill_terms_follow_the_formulas(reuse):
    P, C = 80, 64
    n = P - C
    cal = _calibration(gemm={(n, m, k): 4e10 for (m, k) in calibrate.weight_matrices(SPEC)})
    full, hit = predict.predict_ttft(SPEC, P, cal), predict.predict_ttft(SPEC, P, cal, cached_tokens=C, reuse=reuse)
    assert hit.seconds < full.seconds and hit.cached_tokens == C and hit.tokens == P
    assert math.isclose(sum(hit.terms.values()), hit.seconds, rel_tol=1e-12)          # the terms add up
    mats = calibrate.weight_matrices(SPEC)
    assert math.isclose(hit.terms["linear"], sum(2 * n * m * k * c for (m, k), c in mats.items()) / 4e10)
    attn = 4 * SPEC.layers * SPEC.heads * SPEC.head_dim * n * P                      # n queries x all P keys
    assert math.isclose(hit.terms["attention"], attn / 1e11)
    load = 2 * C * SPEC.kv_bytes_per_token("fp32") / 10e9 if reuse == "prefix" else 0.0
    assert math.isclose(hit.terms["kv_load"], load)
    ops = predict.count_ops(SPEC, "prefill", P, cached_tokens=C, reuse=reuse)
    assert hit.counts["ops"] == ops["ops"] and math.isclose(hit.terms["overhead"], ops["ops"] * 2e-6)
    assert math.isclose(hit.uncalibrated, estimate(SPEC, cal.hardware(), P, 1, precision="fp32",
                                                   cached_prefix_tokens=C).ttft)
    more = predict.predict_ttft(SPEC, P + 32, cal, cached_tokens=C + 32, reuse=reuse)  # more cached, same new
    assert more.terms["attention"] > hit.terms["attention"] and more.terms["linear"] == hit.terms["linear"]


def test_cached_op_counts_are_those_of_the_real_call():
    plain = predict.count_ops(SPEC, "prefill", 48)
    prefix = predict.count_ops(SPEC, "prefill", 48, cached_tokens=40, reuse="prefix")
    session = predict.count_ops(SPEC, "prefill", 48, cached_tokens=40, reuse="session")
    # the prefix path also checks the state's tokens and copies its K/V into the cache: more ops than extend
    assert prefix["ops"] + prefix["views"] > session["ops"] + session["views"] > 0
    assert any("copy_" in name for name in prefix["by_name"])
    assert predict.count_ops(SPEC, "prefill", 48, cached_tokens=0, reuse="session") == plain


def test_score_term_uses_the_probed_rate_and_nearest_shape():
    cal = _calibration()
    cal.scores = {(SPEC.kv_heads, SPEC.heads // SPEC.kv_heads, 128, 128): 1e9,
                  (SPEC.kv_heads, SPEC.heads // SPEC.kv_heads, 16, 1024): 2e9}
    p = predict.predict_ttft(SPEC, 128, cal)
    assert math.isclose(p.terms["scores"], g.score_pass_time(1, SPEC.layers, SPEC.heads, 128, 0, 1e9))
    assert math.isclose(p.terms["scores"], SPEC.layers * SPEC.heads * 128 * 128 / 1e9)
    h = predict.predict_ttft(SPEC, 1040, cal, cached_tokens=1024)   # 16 x 1040: nearest probe 16 x 1024
    assert math.isclose(h.terms["scores"], SPEC.layers * SPEC.heads * 16 * 1040 / 2e9)
    assert math.isclose(sum(p.terms.values()), p.seconds)
    assert "scores" not in predict.predict_ttft(SPEC, 128, _calibration()).terms   # older calibrations: no term


def test_score_probe_runs_on_random_scores():
    rate = probes.measure_score_passes(2, 2, 8, 32, threads=1, device="cpu", repeats=1, min_block=1e-4)
    assert rate > 0
    with pytest.raises(ValueError, match="queries"):
        probes.measure_score_passes(1, 1, 64, 32)


@pytest.mark.parametrize("call,err,match", [
    (lambda cal: predict.predict_ttft(SPEC, 64, cal, cached_tokens=64), ValueError, "cached_tokens"),
    (lambda cal: predict.predict_ttft(SPEC, 64, cal, cached_tokens=-1), ValueError, "cached_tokens"),
    (lambda cal: predict.predict_ttft(SPEC, 64, cal, cached_tokens=8, reuse="sesion"), ValueError, "session"),
    (lambda cal: predict.count_ops(SPEC, "decode", 64, cached_tokens=8), ValueError, "prefill"),
    (lambda cal: predict.count_ops(SPEC, "prefill", 64, batch=2, cached_tokens=8), ValueError, "batch"),
    (lambda cal: calibrate.calibrate(cached_prefills=[(64, 64)]), ValueError, "cached_prefills"),
    (lambda cal: calibrate.calibrate(cached_prefills=[64]), TypeError, "cached_prefills"),
    (lambda cal: calibrate.calibrate(rotate_gemm="yes"), TypeError, "rotate_gemm"),
])
def test_cached_prefill_bad_input(call, err, match):
    with pytest.raises(err, match=match):
        call(_calibration())


def test_attention_products_use_the_probed_rate():
    cal = _calibration()
    layout = (SPEC.kv_heads, SPEC.heads // SPEC.kv_heads, SPEC.head_dim)
    cal.attention = {(*layout, 16, 1040): 2e10}
    h = predict.predict_ttft(SPEC, 1040, cal, cached_tokens=1024)
    assert math.isclose(h.terms["attention"], 4 * SPEC.layers * SPEC.heads * SPEC.head_dim * 16 * 1040 / 2e10)
    assert cal.attention_rate(*layout, 32, 1056) == 2e10                 # nearest probe of the same layout
    assert cal.attention_rate(layout[0], layout[1], 2 * SPEC.head_dim, 16, 1040) == cal.matmul.flop_rate
    rate = probes.measure_attention_products(1, 2, 8, 4, 16, threads=1, device="cpu", repeats=1, min_block=1e-4)
    assert rate > 0
    with pytest.raises(ValueError, match="head_dim"):
        probes.measure_attention_products(1, 1, 0, 4, 16)


# --------------------------------------------------------------------------------------------------
# The calibration's table of probes
# --------------------------------------------------------------------------------------------------
def test_probe_jobs_run_in_order_and_each_kind_has_a_probe():
    specs = calibrate.model_specs(None, fast=True)
    ttft = list(specs.values())[0]
    jobs = calibrate.probe_jobs(specs, [8, 32], ttft, [(32, 24)], [0, 100])
    kinds = [k for k, _ in jobs]
    order = ["copy", "matmul", "overhead", "cold", "gemv", "kv", "gemm", "scores", "attention"]
    assert sorted(set(kinds), key=order.index) == order and set(order) == set(calibrate.PROBES)
    assert kinds == sorted(kinds, key=order.index)                     # grouped, in that order
    shapes = {sh for s in specs.values() for sh in calibrate.weight_matrices(s)}
    assert {key for k, key in jobs if k == "gemv"} == shapes
    assert [key for k, key in jobs if k == "cold"] == [0, 100]
    rows = {key[0] for k, key in jobs if k == "gemm"}
    assert rows == {8, 32, 32 - 24}                                    # prompt rows and the cached pair's new tokens
    layout = (ttft.kv_heads, ttft.heads // ttft.kv_heads)
    assert [key for k, key in jobs if k == "scores"] == [(*layout, 8, 8), (*layout, 8, 32), (*layout, 32, 32)]
    assert [key for k, key in jobs if k == "attention"] == [(*layout, ttft.head_dim, q, k) for q, k in
                                                            ((8, 8), (8, 32), (32, 32))]


def test_calibrate_stores_what_each_probe_returns(monkeypatch):
    cal = _calibration()
    seen = []

    def fake(kind, value):
        def run(key, settings):
            seen.append((kind, key, settings.clock, settings.threads))
            return value(key) if callable(value) else value
        return run

    monkeypatch.setattr(calibrate, "PROBES", {
        "copy": fake("copy", cal.copy), "matmul": fake("matmul", cal.matmul),
        "overhead": fake("overhead", cal.overhead),
        "cold": fake("cold", lambda x: (1e-6 + x * 1e-15, 2e-7)), "gemv": fake("gemv", 1e10), "kv": fake("kv", 5e9),
        "gemm": fake("gemm", 4e10), "scores": fake("scores", 1e9), "attention": fake("attention", 2e10)})
    got = calibrate.calibrate(threads=1, fast=True, device="cpu", progress=False, clock="process")
    assert got.copy is cal.copy and got.matmul is cal.matmul and got.overhead is cal.overhead
    assert [x for x, _, _ in got.cold_ops] == calibrate.cold_streams("cpu", fast=True)
    assert set(got.gemv.values()) == {1e10} and set(got.kv.values()) == {5e9} and set(got.gemm.values()) == {4e10}
    assert got.clock == "process" and got.threads == 1
    assert {(c, t) for _, _, c, t in seen} == {("process", 1)}        # the clock is passed to every probe
    assert len(seen) == len(calibrate.probe_jobs(calibrate.FAST_MODELS, calibrate.FAST_PROMPTS,
                                                 list(calibrate.FAST_MODELS.values())[0],
                                                 streams=calibrate.cold_streams("cpu", fast=True)))


def test_calibrate_passes_the_memory_budget_to_every_probe(monkeypatch):
    """A lesson kernel that must stay small passes budget_bytes; every probe gets it through its settings."""
    cal = _calibration()
    budgets = set()

    def fake(value):
        def run(key, settings):
            budgets.add(settings.budget_bytes)
            return value(key) if callable(value) else value
        return run

    monkeypatch.setattr(calibrate, "PROBES", {
        "copy": fake(cal.copy), "matmul": fake(cal.matmul), "overhead": fake(cal.overhead),
        "cold": fake(lambda x: (1e-6, 2e-7)), "gemv": fake(1e10), "kv": fake(5e9), "gemm": fake(4e10),
        "scores": fake(1e9), "attention": fake(2e10)})
    calibrate.calibrate(threads=1, fast=True, device="cpu", progress=False, budget_bytes=2**30)
    assert budgets == {2**30}
    with pytest.raises(ValueError, match="budget_bytes"):
        calibrate.calibrate(threads=1, fast=True, device="cpu", progress=False, budget_bytes=10)


def test_cold_streams_are_sized_against_the_given_llc():
    assert calibrate.cold_streams("cpu", llc_bytes=2**20) == [0, 2**18, 2**19, 2**20, 2**21, 2**22]
    assert calibrate.cold_streams("cpu", fast=True, llc_bytes=2**30) == [0, 2**30]


def _fake_decode(seconds_by_call, spread=0.01):
    """A stand-in for measure_decode_contexts: each call returns the next of ``seconds_by_call`` (no model runs)."""
    from course_lib.measure.model_timing import DecodeTiming
    it = iter(seconds_by_call)

    def fake(lm, contexts, steps=8, threads=None, clock=None, **kw):
        sec = next(it)
        return [DecodeTiming(sec, sec * (1 - spread), sec * (1 + spread), steps, contexts[0] - 2, threads, 2, 1)]
    return fake


def _points(cal, contexts=(128,)):
    return bench.decode_points(None, SPEC, list(contexts), bench.Settings(cal, threads=1))


def _mean_step(cal, *bws, first=129, last=136):
    """The mean predicted decode step from ``first`` to ``last`` with the GEMV probe sets at ``bws``."""
    c = cal.with_probes(gemv=[{sh: bw for sh in cal.gemv} for bw in bws])
    return (predict.predict_tpot(SPEC, first, c).seconds + predict.predict_tpot(SPEC, last, c).seconds) / 2


def _probes_at(monkeypatch, bandwidths):
    """reprobe_gemv returns every shape at the next of ``bandwidths``; the list of calls made."""
    it = iter(bandwidths)
    calls = []

    def reprobe(c, shapes):
        calls.append(next(it))
        return {sh: calls[-1] for sh in shapes}
    monkeypatch.setattr(bench, "reprobe_gemv", reprobe)
    return calls


def test_each_decode_round_is_predicted_from_the_gemv_probes_around_it(monkeypatch):
    """probe, round, probe, round ...: a round's prediction uses the mean of the probes just before and after it, so
    a bandwidth that drifts between the calibration and the measurement is not counted as the model's error."""
    cal = _calibration(gemv_bw=10e9)
    calls = _probes_at(monkeypatch, [10e9, 12e9, 14e9, 16e9])   # the machine speeds up at each probe set
    monkeypatch.setattr(bench, "EXTRA_DECODE_ROUNDS", 0)
    # three rounds: 30, 20, 25 ms at about 11, 13 and 15 GB/s: the median ratio is the first round's
    monkeypatch.setattr(bench, "measure_decode_contexts", _fake_decode([0.030, 0.020, 0.025]))
    [pt] = _points(cal)
    assert calls == [10e9, 12e9, 14e9, 16e9] and pt.measured == 0.030
    assert pt.predicted == pytest.approx(_mean_step(cal, 10e9, 12e9)) and pt.predicted < _mean_step(cal, 10e9)
    # the drift is reported: the weights term at 10 GB/s (calibration) against 16 GB/s: 60 % (norms at the copy rate)
    assert pt.drift.relative == pytest.approx(0.6, rel=1e-3) and "move by 60%" in pt.drift.line()
    # their ratios to their own predictions disagree by about 35 % (above 20 %): noisy, and it says why
    assert pt.verdict == "noisy" and "measured / predicted ratios disagree" in pt.reason


def test_a_drift_the_probes_follow_leaves_the_comparison_reliable(monkeypatch):
    """The machine slows down round after round (probes at 10, 9, 8, 7 GB/s) and every round takes 1.1x what its
    own probes predict: the rounds' times disagree by about 27 %, their comparisons not at all."""
    cal = _calibration(gemv_bw=10e9)
    bws = [10e9, 9e9, 8e9, 7e9]
    preds = [_mean_step(cal, a, b) for a, b in zip(bws, bws[1:])]
    _probes_at(monkeypatch, bws)
    monkeypatch.setattr(bench, "measure_decode_contexts", _fake_decode([1.1 * x for x in preds]))
    [pt] = _points(cal)
    assert (max(preds) - min(preds)) / preds[1] > 0.2                 # the times disagree
    assert pt.verdict == "reliable" and pt.reason == "" and pt.rounds == bench.DECODE_ROUNDS
    assert pt.measured == pytest.approx(1.1 * preds[1]) and pt.error == pytest.approx(1 / 1.1 - 1)


def test_a_round_whose_probes_disagree_is_noisy(monkeypatch):
    cal = _calibration(gemv_bw=10e9)
    _probes_at(monkeypatch, [10e9, 10e9, 10e9, 15e9])              # the bandwidth jumps during the third round
    monkeypatch.setattr(bench, "EXTRA_DECODE_ROUNDS", 0)
    # measured / predicted 1.00, 1.05 and 1.02: the third round (its probes 10 and 15 GB/s) is the median ratio
    third = 1.02 * _mean_step(cal, 10e9, 15e9)
    monkeypatch.setattr(bench, "measure_decode_contexts",
                        _fake_decode([_mean_step(cal, 10e9), 1.05 * _mean_step(cal, 10e9), third]))
    [pt] = _points(cal)
    assert pt.measured == third and pt.verdict == "noisy"
    assert "probes just before and just after it disagree by 50%" in pt.reason


def test_a_round_with_a_wide_spread_of_its_own_is_noisy(monkeypatch):
    cal = _calibration(gemv_bw=10e9)
    _probes_at(monkeypatch, [10e9] * 10)
    monkeypatch.setattr(bench, "measure_decode_contexts", _fake_decode([_mean_step(cal, 10e9)] * 5, spread=0.3))
    [pt] = _points(cal)
    assert pt.verdict == "noisy" and pt.reason.startswith("its own timing: the middle half of the repeats spans")
    assert pt.rounds == bench.DECODE_ROUNDS + bench.EXTRA_DECODE_ROUNDS


def test_a_reliable_point_gets_no_extra_rounds(monkeypatch):
    cal = _calibration(gemv_bw=10e9)
    calls = _probes_at(monkeypatch, [10e9] * 10)
    monkeypatch.setattr(bench, "measure_decode_contexts",
                        _fake_decode([_mean_step(cal, 10e9) * f for f in (1.0, 1.05, 1.1)]))
    [pt] = _points(cal)
    assert pt.verdict == "reliable" and pt.rounds == bench.DECODE_ROUNDS and len(calls) == 4


def test_one_disturbed_round_is_outvoted_by_the_extra_rounds(monkeypatch):
    """Rounds at 1.00, 1.40 (a burst of other work) and 1.02 x the prediction disagree by 39 %: two more rounds
    are run, each between probes, and with 1.01 and 0.99 the middle three of five agree: reliable, median kept."""
    cal = _calibration(gemv_bw=10e9)
    calls = _probes_at(monkeypatch, [10e9] * 10)
    times = [_mean_step(cal, 10e9) * f for f in (1.00, 1.40, 1.02, 1.01, 0.99)]
    monkeypatch.setattr(bench, "measure_decode_contexts", _fake_decode(times))
    [pt] = _points(cal)
    assert pt.rounds == 5 and len(calls) == 6 and len(pt.drift.bracketed) == 6
    assert pt.verdict == "reliable" and pt.measured == times[3]
    rep = bench.ValidationReport(cal, [pt], (0.0,) * 3, 1.0)
    assert rep.rounds_line().startswith(f"extra rounds: 1 of 1 decode points ({SPEC.name} @ 128) were not reliable "
                                        "after 3 rounds")
    assert "1 of them then agreed" in rep.rounds_line() and rep.rounds_line() in rep.report()
    assert rep.noisy_lines() == []


def test_a_lasting_disagreement_stays_noisy_after_the_extra_rounds(monkeypatch):
    cal = _calibration(gemv_bw=10e9)
    _probes_at(monkeypatch, [10e9] * 10)
    times = [_mean_step(cal, 10e9) * f for f in (1.00, 1.40, 1.02, 1.35, 1.30)]    # the slow state came back
    monkeypatch.setattr(bench, "measure_decode_contexts", _fake_decode(times))
    [pt] = _points(cal)
    assert pt.rounds == 5 and pt.verdict == "noisy" and pt.measured == times[4]
    assert "5 interleaved rounds' middle 3 measured / predicted ratios disagree by 25%" in pt.reason
    rep = bench.ValidationReport(cal, [pt], (0.0,) * 3, 1.0)
    assert "0 of them then agreed" in rep.rounds_line()
    assert rep.noisy_lines() == ["points not reliable:", f"  {SPEC.name} TPOT @ 128: noisy: {pt.reason}"]
    lines = rep.report().splitlines()
    assert lines[-3] == rep.noisy_lines()[-1] and lines[-2] == rep.quality_line()


def test_only_the_disturbed_contexts_are_measured_again(monkeypatch):
    cal = _calibration(gemv_bw=10e9)
    _probes_at(monkeypatch, [10e9] * 20)
    seen = []
    base = _fake_decode([1.0] * 20)

    def fake(lm, contexts, **kw):
        seen.append(contexts[0])
        [t] = base(lm, contexts, **kw)
        f = 1.5 if (contexts[0] == 256 and len(seen) == 4) else 1.0     # the second round of 256 only: disturbed
        step = _mean_step(cal, 10e9, first=t.first_context, last=t.last_context)
        return [dataclasses.replace(t, seconds=f * step, q1_seconds=0.99 * f * step, q3_seconds=1.01 * f * step)]
    monkeypatch.setattr(bench, "measure_decode_contexts", fake)
    pts = _points(cal, [128, 256])
    assert seen == [128, 256] * 3 + [256, 256]
    assert [p.rounds for p in pts] == [3, 5] and all(p.verdict == "reliable" for p in pts)


def test_a_fast_run_takes_no_extra_rounds_and_keeps_the_calibrations_rates(monkeypatch):
    cal = dataclasses.replace(_calibration(gemv_bw=10e9), fast=True)
    monkeypatch.setattr(bench, "reprobe_gemv", lambda c, shapes: pytest.fail("a fast run re-probed"))
    monkeypatch.setattr(bench, "measure_decode_contexts",
                        _fake_decode([_mean_step(cal, 10e9) * f for f in (1.0, 1.4, 1.0)]))
    [pt] = _points(cal)
    assert pt.rounds == 3 and pt.verdict == "noisy" and pt.drift is None


def test_reprobe_gemv_runs_the_gemv_probe_with_the_calibrations_settings(monkeypatch):
    cal = calibrate.Calibration(**{**_calibration().__dict__, "fast": True, "budget_bytes": 64 << 20})
    seen = []

    def fake(mk, ps):
        seen.append((mk, ps.fast, ps.budget_bytes, ps.threads))
        return 1e9 * mk[0]
    monkeypatch.setitem(calibrate.PROBES, "gemv", fake)
    assert calibrate.reprobe_gemv(cal, [(4, 8), (2, 8), (4, 8)]) == {(2, 8): 2e9, (4, 8): 4e9}
    assert seen == [((2, 8), True, 64 << 20, 1), ((4, 8), True, 64 << 20, 1)]
    with pytest.raises(TypeError, match="calibration must be a Calibration"):
        calibrate.reprobe_gemv("cal", [(2, 8)])
    with pytest.raises(ValueError, match="shapes must name at least one"):
        calibrate.reprobe_gemv(cal, [])
    with pytest.raises(ValueError, match="kind"):
        calibrate.reprobe(cal, "nope", [(2, 8)])
    with pytest.raises(ValueError, match="keys must name at least one"):
        calibrate.reprobe(cal, "gemm", [])
