"""The public API under hostile input (issue 32): a clear error or a sensible value, never nonsense.

``course_lib.authoring.fuzz_api`` calls every public callable with one hostile value per argument (0,
negatives, nan, +-inf, 10**400, bools, text, None, numpy arrays, lists, wrong names, empty containers) and
classifies each outcome. Here a deterministic sample of it runs in the suite (the whole run, ~46,000 calls, is
``python -m course_lib.authoring.fuzz_api``), the classifier is shown to catch each kind of failure, and each
case the issue lists is pinned through public names.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from course_lib.authoring import fuzz_api


def test_a_sample_of_the_fuzz_run_has_no_nonsense_and_no_unclear_error():
    # 40 callables of the core and the checks (seeded), 600 of their hostile calls; measure's modules import
    # torch and are left to the full run
    report = fuzz_api.run(callables=40, sample=600, seed=4, measure=False, examples=5)
    totals = report.totals()
    assert sum(totals.values()) == 600
    assert totals["error"] > 300 and totals["value"] > 0        # the sample reaches both outcomes
    assert totals["nonsense"] == 0 and totals["unclear"] == 0, fuzz_api.table(report)
    assert not report.no_baseline, report.no_baseline


def _raises(exc):
    raise exc


@pytest.mark.parametrize("fn, kwargs, expected", [
    (lambda x: {"t": math.nan}, {"x": 1}, "nonsense"),
    (lambda x: (1.0, -2.0), {"x": 1}, "nonsense"),
    (lambda x: [math.inf], {"x": 1}, "nonsense"),
    (lambda x: "reliable", {"x": math.nan}, "nonsense"),            # a verdict read from nan
    (lambda x: _raises(OverflowError("int too large")), {"x": 10**400}, "unclear"),
    (lambda x: _raises(ValueError("The truth value of an array is ambiguous")), {"x": np.array([1, 2])}, "unclear"),
    (lambda x: _raises(ValueError("bad value")), {"x": -1}, "unclear"),   # names no argument
    (lambda x: _raises(ZeroDivisionError("division by zero")), {"x": 0}, "unclear"),
    (lambda x: _raises(ValueError("x must be > 0, got -1")), {"x": -1}, "error"),
    (lambda x: _raises(KeyError("unknown x 'nope'")), {"x": "nope"}, "error"),
    (lambda x: 2.0 * x, {"x": 3}, "value"),
])
def test_the_classifier_tells_each_outcome(fn, kwargs, expected):
    assert fuzz_api.classify(fn, kwargs, "f", "x")[0] == expected


def test_the_classifier_stops_a_slow_call(monkeypatch):
    monkeypatch.setattr(fuzz_api, "TIME_LIMIT_S", 0.05)

    def spin(x):
        while True:
            x += 1

    assert fuzz_api.classify(spin, {"x": 0}, "spin", "x")[0] == "slow"


# ---- the cases issue 32 lists, through public names ------------------------------------------------------------
def test_sessions_that_fit_refuses_weights_larger_than_memory():
    from course_lib.core import numeric

    assert numeric.raw.sessions_that_fit(80e9, 90e9, 1e6, 80) == -125          # what the unchecked formula gives
    with pytest.raises(ValueError, match="weights_bytes .* must be <= capacity"):
        numeric.sessions_that_fit(80e9, 90e9, 1e6, 80)
    assert numeric.sessions_that_fit(80e9, 70e9, 1e6, 80) == 125


def test_expected_experts_refuses_more_picks_than_experts():
    from course_lib.core import numeric

    assert numeric.raw.expected_experts(8, 30, 2) < 0
    with pytest.raises(ValueError, match="experts_per_token .* must be <= experts"):
        numeric.expected_experts(8, 30, 2)
    assert 0 < numeric.expected_experts(8, 2, 4) <= 8


def test_a_formula_never_returns_a_negative_value_unless_it_is_signed():
    from course_lib.core import numeric

    with pytest.raises(ValueError, match="cache_break_even_hit_rate: .*negative"):
        numeric.cache_break_even_hit_rate(write_overhead=0.5, ttft_miss=1.0, ttft_hit=2.0)
    # the fitted fixed time is an intercept: it may be negative
    assert numeric.fixed_cost_fit_fixed_time(1.0, 2.0, 0.5, 2.0) < 0


def test_relative_error_refuses_a_zero_prediction():
    from course_lib.core import relative_error

    with pytest.raises(ValueError, match="predicted"):
        relative_error(3, 0)
    assert relative_error(3, 2.7) == pytest.approx(-0.1)


@pytest.mark.parametrize("t0", [math.nan, math.inf, -math.inf, 10**400, np.float64("nan")])
def test_fixed_cost_reading_refuses_a_non_finite_intercept(t0):
    from course_lib.core.claims.compare import fixed_cost_reading

    with pytest.raises(ValueError, match="t0"):
        fixed_cost_reading(t0=t0, eta=1.0)


def test_fixed_cost_reading_keeps_a_negative_intercept():
    from course_lib.core.claims.compare import fixed_cost_reading

    assert fixed_cost_reading(t0=-0.002, eta=1.0).operands["t0"] == -0.002


def _truth_value_cases():
    from course_lib.core import critical_batch, get_model, prefill_flops
    from course_lib.core.app import link_hint
    from course_lib.core.claims.compare import engine_vs_floor
    from course_lib.core.claims.gemv import model_vs_estimate, outcome_of
    from course_lib.core.claims.phases import roofline_sides
    from course_lib.core.forecast import held_out

    times = [0.010, 0.011, 0.012, 0.010, 0.011]
    arr = np.array([1, 2])
    return [
        ("hardware", lambda: link_hint(arr)),
        ("verdict", lambda: outcome_of("faster", arr)),
        ("settled", lambda: outcome_of("faster", "noisy", arr)),
        ("bound", lambda: model_vs_estimate(times, 0.01, bound=arr)),
        ("metric", lambda: engine_vs_floor(times, 0.01, metric=arr)),
        ("phase", lambda: roofline_sides([1.0, 2.0], 10.0, phase=arr)),
        ("dtype", lambda: critical_batch("h100-sxm", dtype=arr)),
        ("dense", lambda: prefill_flops(get_model("mistral-7b"), 128, dense=arr)),
        ("progress", lambda: held_out(progress=arr)),
    ]


@pytest.mark.parametrize("argument", [a for a, _ in _truth_value_cases()])
def test_an_array_where_one_value_belongs_is_refused_by_name(argument):
    call = dict(_truth_value_cases())[argument]
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert argument in str(info.value) and "truth value" not in str(info.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.5, "yes", None])
def test_a_switch_takes_true_or_false_only(value):
    from course_lib.core import get_model, prefill_flops
    from course_lib.core.validation import require_flag

    with pytest.raises(TypeError, match="dense must be True or False"):
        prefill_flops(get_model("mistral-7b"), 128, dense=value)
    assert require_flag("f", np.bool_(True)) is True


def test_errors_name_the_argument_the_learner_passed():
    from course_lib.core import gemv_cost, tokens_that_fit
    from course_lib.core.claims.phases import tpot_vs_context

    with pytest.raises(ValueError, match="kv_precision"):
        tokens_that_fit("mistral-7b", "h100-sxm", kv_precision="fp12")
    with pytest.raises(TypeError, match="activation_precision"):
        gemv_cost(64, 64, activation_precision=0)
    with pytest.raises(ValueError, match=r"contexts\[0\]"):
        tpot_vs_context([-1, 2], [[0.01] * 5, [0.02] * 5])
