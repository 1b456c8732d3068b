"""Lesson 08's measured claims (course_lib.core.claims.compare) against every recorded machine profile.

A case's efficiency band, the engine against its floor and its calibrated prediction, where the engine's step
goes, whether a floor was beaten and what a fixed-cost fit says: each claim agrees with its operands, its verdict
comes from the timing (profiles' timings stand in for the engine's), and a noisy verdict gives the noisy sentence
of course_lib.lessons.claims.compare.
"""
from __future__ import annotations

import pytest
from profiles import all_profiles

from course_lib.core import compare, quality
from course_lib.core.claims import compare as claims
from course_lib.lessons.claims.compare import say

PROFILES = all_profiles()
TIMINGS = [(p, r, k, t) for p in PROFILES for r in p.runs for k, t in list(r.timings.items())[:6]]
IDS = [f"{p.name}:{r.label}:{k}" for p, r, k, _ in TIMINGS]
FACTORS = (0.3, 0.6, 0.9, 1.0, 1.2, 2.0)


def _check(c):
    assert c.outcome == (c.relation if c.verdict == "reliable" or c.settled else c.verdict)
    text = say(c)
    assert isinstance(text, str) and text
    assert ("unreliable" in text) == (c.outcome in ("noisy", "contended"))
    assert ("so this run settles it" in text) == (c.verdict != "reliable" and c.settled)


def _band_ok(relation, eff):
    return {"above_floor": eff > claims.ABOVE, "close": claims.CLOSE <= eff <= claims.ABOVE,
            "within_2x": claims.WITHIN_2X <= eff < claims.CLOSE, "far": eff < claims.WITHIN_2X}[relation]


@pytest.mark.parametrize("profile,run,key,timing", TIMINGS, ids=IDS)
def test_efficiency_and_engine_floor_claims_agree_with_their_operands(profile, run, key, timing):
    v = quality.timing_verdict(timing)
    for f in FACTORS:
        row = compare.Comparison(case=f"x/{key}", source="this machine", model="m", hardware="h", metric="tpot",
                                 predicted_s=v.median * f, measured_s=v.median)
        c = claims.efficiency(row, timing)
        assert c.operands["efficiency"] == pytest.approx(f)
        assert _band_ok(c.relation, c.operands["efficiency"])
        assert c.verdict == v.verdict
        _check(c)
        e = claims.engine_vs_floor(timing, v.median * f)
        assert e.operands["efficiency"] == pytest.approx(f) and _band_ok(e.relation, f)
        assert e.operands["beyond"] == pytest.approx(v.median * (1 - f))
        assert e.verdict == v.verdict
        _check(e)


@pytest.mark.parametrize("profile,run,key,timing", TIMINGS, ids=IDS)
def test_engine_prediction_claim_agrees_with_within(profile, run, key, timing):
    v = quality.timing_verdict(timing)
    for f in FACTORS:
        c = claims.engine_vs_prediction(timing, v.median * f, tolerance=0.25, metric="ttft")
        a = quality.within(v.median * f, timing, 0.25)
        assert c.relation == a.relation and c.verdict == a.verdict
        assert c.operands["error"] == pytest.approx(f - 1)
        assert (c.relation == "within") == (abs(f - 1) <= 0.25)
        _check(c)


def test_published_efficiencies_are_reliable_and_banded():
    for r in compare.published_cases() + compare.h200_cases("datasheet"):
        c = claims.efficiency(r)
        assert c.verdict == "reliable" and _band_ok(c.relation, r.efficiency)
        _check(c)
    pub = compare.published_cases()
    fb = claims.floor_beaten(pub)
    assert (fb.relation == "none_beat") == all(r.efficiency < 1 for r in pub)
    _check(fb)


def test_fixed_cost_reading_follows_eta():
    pub = compare.published_cases()
    for r in pub:
        if r.metric == "tpot" and "-f16-" in r.case:
            t0, eta = compare.fixed_cost_fit(r, compare.find(pub, r.case.replace("-f16-", "-q4_0-")))
            c = claims.fixed_cost_reading(t0, eta)
            want = "impossible_eta" if eta > claims.ABOVE else ("fixed_cost_only" if eta >= claims.CLOSE else "both")
            assert c.relation == want
            _check(c)


def test_engine_time_split_names_the_largest_group():
    terms = {"weights": 0.105, "kv": 0.0027, "cache_concat": 0.0019, "logits": 0.00006, "engine": 0.0055}
    c = claims.engine_time_split(terms)
    assert c.relation == "weights"
    assert sum(c.operands["seconds"].values()) == pytest.approx(sum(terms.values()))
    assert sum(c.operands["shares"].values()) == pytest.approx(1.0)
    assert c.operands["seconds"]["K/V"] == pytest.approx(0.0046)
    assert claims.engine_time_split({"weights": 0.001, "engine": 0.05}).relation == "per-step overhead"
    _check(c)
    with pytest.raises(TypeError):
        claims.engine_time_split({})


def test_engine_row_and_bad_input():
    t = type("T", (), {"prompt": 128, "new_tokens": 16, "ttft": 0.3, "tpot": 0.05})()
    row = claims.engine_row(t, model="gpt2", params=124_439_808, weight_bytes=4.9e8, floor_tpot_seconds=0.04)
    assert row["tpot_seconds"] == 0.05 and row["new_tokens"] == 16 and row["floor_tpot_seconds"] == 0.04
    with pytest.raises(ValueError, match="metric"):
        claims.engine_vs_prediction([0.1, 0.1, 0.1], 0.1, metric="x")
    with pytest.raises(TypeError, match="timing"):
        claims.engine_vs_floor(None, 0.1)


def test_the_engine_overhead_adds_up_and_a_clamped_split_is_not_a_measurement():
    from types import SimpleNamespace as NS

    def timing(step):
        return NS(step_times=[step * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)])
    probe = NS(step_fixed=0.281e-3, step_per_layer=0.305e-3, layers=(2, 4), clamped=(),
               decode=(timing(0.89e-3), timing(1.5e-3)))
    cold = 1.43
    engine = cold * (0.281e-3 + 12 * 0.305e-3)
    pred = NS(terms={"weights": 20e-3, "engine": engine, "logits": 26e-6}, counts={"layers": 12, "cold_factor": cold})
    c = claims.engine_overhead(probe, pred)
    o = c.operands
    assert c.relation == "split" and c.verdict == "reliable"
    assert o["uncorrected"] == pytest.approx(0.281e-3 + 12 * 0.305e-3)
    assert o["engine"] == pytest.approx(o["uncorrected"] * o["cold_factor"])
    assert o["total"] == pytest.approx(o["engine"] + o["logits"])
    text = say(c)
    assert "2 and 4 layers" in text and "1.43×" in text and "cold factor" in text
    clamped = NS(**{**vars(probe), "step_per_layer": 0.0, "clamped": ("decode per layer",)})
    pred0 = NS(terms={**pred.terms, "engine": cold * 0.281e-3}, counts=pred.counts)
    c0 = claims.engine_overhead(clamped, pred0)
    assert c0.relation == "clamped" and c0.verdict == "noisy" and "not a measurement" in say(c0)
    with pytest.raises(ValueError, match="do not belong together"):
        claims.engine_overhead(probe, pred0)


# --- the probes behind the engine's prediction: recorded runs of lesson 08 ---------------------------------------
def test_the_engine_prediction_inherits_the_recorded_probes_verdict():
    """The stored run's llama.cpp engine (reliable timings) against its calibrated prediction: on the stored run's
    own probes (the types the file holds and the tiny file, every one reliable) both claims are decided; on the busy
    run's Hugging Face probes (op-overhead probe and overhead copies noisy) the same comparison is worded as
    undecided, naming the calibration. The floor's claim inherits the ceilings' verdict the same way."""
    import json

    from replay import RECORDINGS

    from course_lib.core.claims import gemv as gemv_claims
    from course_lib.lessons.claims.gemv import UNDECIDED_MARK
    from course_lib.measure.engines import llamacpp
    from course_lib.measure.machine import this_machine
    from course_lib.measure.record import decode

    def recorded(run):
        raw = json.loads((RECORDINGS / run / "08.json").read_text())["results"]
        return {k: decode(v[0]) for k, v in raw.items()}
    quiet, busy = recorded("stored"), recorded("busy")
    held, eng = quiet["08/llamacpp"]
    rates = quiet["08/llamacpp_rates"]
    assert eng.tpot_verdict.reliable and eng.ttft_verdict.reliable
    noisy = claims.hf_probes(busy["08/engine_calibration"], busy["08/engine_probe"])
    assert noisy.relation == "unsettled" and "the op-overhead probe" in noisy.operands["unsettled"]
    for metric, timing, pred in (("tpot", eng.step_times, llamacpp.predict_gguf_tpot(held, rates, eng.mean_context)),
                                 ("ttft", eng.ttft_times, llamacpp.predict_gguf_ttft(held, rates, eng.prompt))):
        basis = claims.llamacpp_probes(rates, held.types, metric=metric)
        assert basis.relation == "settled" and len(basis.operands["sources"]) == len(held.types) + 1
        assert not any("F16" in s for s in basis.operands["sources"])     # the file holds no F16 matrix
        c = claims.engine_vs_prediction(timing, pred.seconds, metric=metric, basis=basis)
        assert c.decided and c.verdict == "reliable" and UNDECIDED_MARK not in say(c)
        u = claims.engine_vs_prediction(timing, pred.seconds, metric=metric, basis=noisy)
        assert (u.relation, u.operands) == (c.relation, c.operands) and not u.decided
        text = say(u)
        assert UNDECIDED_MARK in text and "calibration, which is not settled" in text
        assert not any(w in text for w in ("Within ±", "too long", "too short"))
    me = this_machine(busy["08/machine"])
    calib = gemv_claims.calibration(me.bandwidth, busy["08/machine"].copy, busy["08/machine"].gemv,
                                    busy["08/machine"].matmul)
    f = claims.engine_vs_floor(eng.ttft_times, eng.ttft * 0.9, metric="ttft", basis=calib)
    assert calib.relation == "unsettled" and not f.decided and UNDECIDED_MARK in say(f)
    assert claims.engine_vs_floor(eng.ttft_times, eng.ttft * 0.9, metric="ttft").decided


def test_calibration_bases_reject_what_they_cannot_read():
    from course_lib.core.claims import gemv as gemv_claims
    with pytest.raises(TypeError, match="sources"):
        gemv_claims.probes({}, what="the prediction")
    with pytest.raises(TypeError, match="what"):
        gemv_claims.probes({"a": [1e-3] * 5}, what="")
    with pytest.raises(TypeError, match="basis"):
        claims.engine_vs_prediction([1e-3] * 5, 1e-3, basis=claims.fixed_cost_reading(0.001, 0.9))
    with pytest.raises(ValueError, match="metric"):
        claims.llamacpp_probes({"decode": {"F16": 1e9}, "verdicts": ()}, ("F16",), metric="tokens")
    with pytest.raises(TypeError, match="verdicts"):
        claims.llamacpp_probes({"decode": {"F16": 1e9}, "verdicts": ()}, ("F16",))
    # a probe whose repeats disagree, or probes that contradict each other, leave the basis unsettled
    steady, scattered = [1e-3, 1.01e-3, 0.99e-3, 1e-3, 1.02e-3], [1e-3, 3e-3, 0.9e-3, 2e-3, 1.1e-3]
    assert gemv_claims.probes({"a": steady}, what="x").relation == "settled"
    assert gemv_claims.probes({"a": scattered}, what="x").verdict == "noisy"
    split = gemv_claims.probes({"a": steady}, what="x", contradictions=("a fell",))
    assert split.relation == "unsettled" and "1 contradiction between its probes" in gemv_claims.inherit(split)[1][0]


def test_a_fixed_cost_clamped_at_zero_is_not_a_measurement():
    """llama.cpp's fixed cost per step: the stored run's (0.80 ms, its tiny file's timing reliable) is stated; a 0
    from the clamp (the busy acceptance run of lesson 08: the tiny file's step no longer than its bytes) is said to be
    no measurement."""
    import json

    from replay import RECORDINGS

    from course_lib.lessons.claims.gemv import UNDECIDED_MARK
    from course_lib.measure.record import decode
    rates = decode(json.loads((RECORDINGS / "stored" / "08.json").read_text())["results"]["08/llamacpp_rates"][0])
    c = claims.llamacpp_fixed_cost(rates)
    assert c.relation == "measured" and c.decided and "per step." in say(c) and UNDECIDED_MARK not in say(c)
    clamped = claims.llamacpp_fixed_cost({"step_fixed": 0.0, "verdicts": rates.verdicts})
    assert clamped.relation == "clamped" and not clamped.decided
    assert "not a measurement" in say(clamped) and UNDECIDED_MARK in say(clamped)
    with pytest.raises(TypeError, match="step_fixed"):
        claims.llamacpp_fixed_cost({"verdicts": rates.verdicts})


def test_a_busy_llamacpp_run_decides_nothing_on_its_probes():
    """The recorded busy llama.cpp run of lesson 08 (tests/fixtures/recordings/busy-llamacpp/08.json): its probes are
    unsettled, so the engine's decode and prefill against their calibrated predictions are worded as undecided and
    name the probes, and its fixed cost, clamped at 0, is no measurement."""
    import json

    from replay import RECORDINGS

    from course_lib.lessons.claims.gemv import UNDECIDED_MARK
    from course_lib.measure.engines import llamacpp
    from course_lib.measure.record import decode
    raw = json.loads((RECORDINGS / "busy-llamacpp" / "08.json").read_text())["results"]
    rec = {k: decode(v[0]) for k, v in raw.items()}
    held, eng = rec["08/llamacpp"]
    rates = rec["08/llamacpp_rates"]
    for metric, timing, pred in (("tpot", eng.step_times, llamacpp.predict_gguf_tpot(held, rates, eng.mean_context)),
                                 ("ttft", eng.ttft_times, llamacpp.predict_gguf_ttft(held, rates, eng.prompt))):
        basis = claims.llamacpp_probes(rates, held.types, metric=metric)
        assert basis.relation == "unsettled" and "not this machine's" in say(basis)
        c = claims.engine_vs_prediction(timing, pred.seconds, metric=metric, basis=basis)
        assert not c.decided and UNDECIDED_MARK in say(c) and "probe file's" in say(c)
    fixed = claims.llamacpp_fixed_cost(rates)
    assert rates.step_fixed == 0 and fixed.relation == "clamped" and "not a measurement" in say(fixed)
