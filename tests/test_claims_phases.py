"""Lesson 06's measured claims (course_lib.core.claims.phases) against every recorded machine profile.

TPOT against context, TTFT against prompt, the step against the batch, the calibrated against the
uncalibrated prediction: each claim agrees with its operands, its verdict comes from the timings, and a
noisy verdict gives the noisy sentence (course_lib.lessons.claims.phases). The single max against the
per-operator sum is checked on the issue's case (Llama-3-8B / H100 SXM / batch 512 / context 512).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import all_profiles

from course_lib import estimate
from course_lib.core import quality
from course_lib.core.claims import phases as claims
from course_lib.lessons.claims.phases import formula_without_cache, say

from course_lib.lessons.claims.gemv import ADVICE, RERUN_ADVICE, UNDECIDED_MARK

PROFILES = all_profiles()
SERIES = [(p, s) for p in PROFILES for s in p.series]
IDS = [f"{p.name}:{s.name}" for p, s in SERIES]


def _check_outcome(c):
    """The outcome is the relation when the numbers carry it (reliable, or settled by the margin), else the verdict;
    an undecided sentence says so (and never states the relation), a settled one says why it stands."""
    assert c.outcome == (c.relation if c.verdict == "reliable" or c.settled else c.verdict)
    text = say(c)
    assert isinstance(text, str) and text
    assert (UNDECIDED_MARK in text) == (c.outcome in ("noisy", "contended")) or c.name == "decode_from_gemv"
    assert ("so this run settles it" in text) == (c.verdict != "reliable" and c.settled)
    assert ADVICE not in text and RERUN_ADVICE not in text          # said once per lesson, by rerun_note()


@pytest.mark.parametrize("profile,series", SERIES, ids=IDS)
def test_trend_claims_agree_with_the_trend(profile, series):
    t = quality.trend(list(series.xs), list(series.timings))
    for c in (claims.tpot_vs_context(series.xs, series.timings), claims.ttft_vs_prompt(series.xs, series.timings)):
        assert c.verdict == t.verdict
        if c.relation == "grows":
            assert t.overall.relation == "slower" and "faster" not in t.steps
        if c.relation == "falls":
            assert t.overall.relation == "faster" and "slower" not in t.steps
        if c.relation == "mixed":
            assert t.verdict == "reliable" and t.direction == "inconclusive"
        assert c.operands["seconds"] == t.medians
        _check_outcome(c)


@pytest.mark.parametrize("profile,series", SERIES, ids=IDS)
def test_step_vs_batch_agrees_with_its_growth(profile, series):
    c = claims.step_vs_batch(series.xs, series.timings, predicted_growth=1.0)
    t = quality.trend(list(series.xs), list(series.timings))
    assert c.operands["growth"] == pytest.approx(t.ratio)
    if c.relation == "grows_more":
        assert c.operands["growth"] > 1.25 * c.operands["predicted_growth"]
    if c.relation == "falls":
        assert t.direction == "falls"
    assert c.verdict == t.verdict
    _check_outcome(c)


@pytest.mark.parametrize("profile,series", SERIES, ids=IDS)
def test_same_step_disagrees_only_beyond_its_ratio(profile, series):
    c = claims.same_step({f"x={x}": t for x, t in zip(series.xs, series.timings)})
    med = [quality.timing_verdict(t).median for t in series.timings]
    assert (c.relation == "agree") == (max(med) / min(med) <= claims.CONSISTENT_RATIO)
    if c.relation == "disagree":
        assert c.outcome == c.verdict != "reliable"
    _check_outcome(c)


CAL = [(p, s) for p, s in SERIES if all("uncalibrated_seconds" in x for x in s.points)]


@pytest.mark.parametrize("profile,series", CAL, ids=[f"{p.name}:{s.name}" for p, s in CAL])
def test_calibration_gain_agrees_with_both_errors(profile, series):
    for point in series.points:
        c = claims.calibration_gain(point["timing"], point["predicted_seconds"], point["uncalibrated_seconds"])
        m = quality.timing_verdict(point["timing"]).median
        ea, eb = abs(point["predicted_seconds"] / m - 1), abs(point["uncalibrated_seconds"] / m - 1)
        assert c.operands["calibrated_error"] == pytest.approx(point["predicted_seconds"] / m - 1)
        if c.relation == "calibrated_better":
            assert ea < eb
        if c.relation == "uncalibrated_better":
            assert eb < ea
        assert c.verdict == quality.timing_verdict(point["timing"]).verdict
        _check_outcome(c)


def test_the_noisy_profiles_give_the_noisy_sentences():
    loaded = next(p for p in PROFILES if p.name == "intel-xeon-2core-260mib-l3-loaded")
    cs = [claims.tpot_vs_context(s.xs, s.timings) for s in loaded.series if s.x == "context"]
    assert any(c.verdict != "reliable" for c in cs)               # the load shows in the verdicts
    for c in cs:            # and a relation is stated from them only where it clears their spread by the margin
        assert c.outcome == c.verdict or c.verdict == "reliable" or (c.settled and c.relation in ("grows", "falls"))
    h200 = next(p for p in PROFILES if p.name == "h200-mistral7b")   # medians only
    for s in h200.series:
        assert claims.tpot_vs_context(s.xs, s.timings).outcome == "noisy"


def test_single_max_against_the_per_operator_sum_on_the_issues_case():
    step = estimate("llama-3-8b", "h100-sxm", prompt_tokens=512, new_tokens=2, batch=512).decode_first
    c = claims.single_max_vs_operators(step)
    assert c.relation == "sum_larger"
    assert c.operands["per_operator_seconds"] == pytest.approx(18.0e-3, rel=0.01)
    assert c.operands["single_max_seconds"] == pytest.approx(14.8e-3, rel=0.01)
    assert c.operands["per_operator_seconds"] == pytest.approx(sum(o.time for o in step.operators))
    assert "18 ms" in say(c) and "14.8 ms" in say(c)
    one = estimate("llama-3-8b", "h100-sxm", prompt_tokens=512, new_tokens=2).decode_first   # batch 1: all memory
    assert claims.single_max_vs_operators(one).relation in ("equal", "sum_larger")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 1e3), min_size=1, max_size=8), st.floats(0.1, 100))
def test_roofline_sides_counts_the_points_left_of_the_ridge(xs, ridge):
    c = claims.roofline_sides(xs, ridge)
    left = sum(x < ridge for x in xs)
    assert c.operands["left"] == left
    assert c.relation == ("all_memory" if left == len(xs) else "all_compute" if left == 0 else "split")
    assert say(c) and say(claims.roofline_sides(xs, ridge, phase="prefill"))


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.floats(0.01, 3), min_size=1))
def test_below_roof_names_every_point_at_or_above_its_roof(fractions):
    c = claims.below_roof(fractions)
    assert set(c.operands["above"]) == {k for k, v in fractions.items() if v >= 1}
    assert (c.relation == "below") == all(v < 1 for v in fractions.values())
    assert say(c)


def test_prefill_formulas_are_shown_without_cached_tokens():
    for name in ("prefill_flops", "prefill_bytes", "prefill_flops_dense"):
        text = formula_without_cache(name)
        assert "P_{c}" not in text and "P_{new}" not in text and text.startswith("$$")


def test_bad_input_is_refused_with_clear_errors():
    with pytest.raises(ValueError, match="same length"):
        claims.tpot_vs_context([1, 2], [1e-3])
    with pytest.raises(TypeError, match="timings"):
        claims.same_step({"a": 1e-3})
    with pytest.raises(TypeError, match="PhaseCost"):
        claims.single_max_vs_operators(3)
    with pytest.raises(ValueError, match="phase"):
        claims.roofline_sides([1.0], 2.0, phase="both")
