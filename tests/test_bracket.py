"""course_lib.measure.benchmarks.bracket: the bracketed sequence and the one rule that judges a point.

Pure: fake probes and measurements, tables of ratios (no torch, no timing).
"""
from __future__ import annotations

import pytest

from course_lib.core.quality import THRESHOLDS, Thresholds, timing_verdict
from course_lib.measure.benchmarks.bracket import Bracketed, Drift, interleave, judge, middle

TIGHT = timing_verdict([1.0, 1.0, 1.01, 1.0, 0.99])
WIDE = timing_verdict([1.0, 0.5, 1.6, 1.0, 0.9])


def test_every_measurement_runs_between_two_probe_sets_and_a_sequence_continues():
    log = []
    probes = iter(range(100))

    def probe():
        log.append("probe")
        return next(probes)

    def measure(item):
        log.append(item)
        return f"t{item}"

    seq = Bracketed(probe)
    first = seq.run(interleave(["a", "b"], 2), measure)
    assert log == ["probe", "a", "probe", "b", "probe", "a", "probe", "b", "probe"]
    assert [(m.item, m.value, m.before, m.after, m.index) for m in first] == [
        ("a", "ta", 0, 1, 0), ("b", "tb", 1, 2, 1), ("a", "ta", 2, 3, 2), ("b", "tb", 3, 4, 3)]
    more = seq.run(["b"], measure)                           # again: starts from the last probe set
    assert log[-2:] == ["b", "probe"] and (more[0].before, more[0].after, more[0].index) == (4, 5, 4)
    assert [m.index for m in seq.of("b")] == [1, 3, 4] and seq.probes == list(range(6))


@pytest.mark.parametrize("items, rounds, alternate, order", [
    ([1, 2, 3], 2, False, [1, 2, 3, 1, 2, 3]),
    ([1, 2], 3, True, [1, 2, 2, 1, 1, 2]),
    (["x"], 1, False, ["x"]),
])
def test_interleave(items, rounds, alternate, order):
    assert interleave(items, rounds, alternate=alternate) == order


@pytest.mark.parametrize("call, error, match", [
    (lambda: interleave([], 2), ValueError, "items"),
    (lambda: interleave([1], 0), ValueError, "rounds"),
    (lambda: Bracketed("probe"), TypeError, "probe"),
    (lambda: Bracketed(lambda: 0).run([1], None), TypeError, "measure"),
])
def test_the_sequence_refuses_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("count, kept", [(1, 1), (2, 2), (3, 3), (4, 4), (5, 3), (6, 4), (7, 3), (9, 3)])
def test_the_agreement_covers_the_middle_three(count, kept):
    assert middle(count) == kept


# (ratios, keyword arguments, kept index, verdict, words of the reason)
CASES = [
    ([1.2, 1.0, 1.1], {}, 2, "reliable", ""),
    ([1.0, 1.3, 1.05], {}, 2, "noisy", "the 3 measurements' measured / predicted ratios disagree by 29% (above 20%)"),
    ([1.00, 1.40, 1.02, 1.01, 0.99], {}, 3, "reliable", ""),                       # one outlier, outvoted
    ([1.00, 1.40, 1.02, 1.35, 1.30], {}, 4, "noisy", "the 5 measurements' middle 3 measured / predicted ratios "
                                                     "disagree by 25%"),             # a lasting change
    ([1.0, 1.0, 1.0], {"own": [TIGHT, WIDE, TIGHT]}, 1, "noisy", "its own timing: "),
    ([1.0, 1.0, 1.0], {"own": [WIDE, TIGHT, WIDE]}, 1, "reliable", ""),            # only the kept one's own counts
    ([1.0, 1.01, 1.02], {"probe_steps": [0.0, 0.5, 0.0]}, 1, "noisy",
     "the probes just before and just after it disagree by 50% (above 20%)"),
    ([1.0, 1.01, 1.02], {"probe_steps": [0.9, 0.1, None]}, 1, "reliable", ""),
    ([1.0, 1.0, 1.0], {"steal": 0.2}, 1, "contended", "CPU steal was 20.0% of the interval"),
    ([1.0, 1.0], {}, 1, "noisy", "only 2 measurements"),
    ([1.0, 1.3, 1.05], {"thresholds": Thresholds(noisy_relative_iqr=0.3)}, 2, "reliable", ""),
]


@pytest.mark.parametrize("ratios, kwargs, kept, verdict, reason", CASES)
def test_one_rule_judges_a_point(ratios, kwargs, kept, verdict, reason):
    j = judge(ratios, **kwargs)
    assert (j.kept, j.verdict) == (kept, verdict), j
    assert (reason in j.reason) if reason else j.reason == ""
    assert j.ratio == ratios[kept] and j.reliable == (verdict == "reliable")


def test_the_agreement_is_the_spread_of_the_middle_ratios_over_the_median():
    j = judge([0.012, 0.010, 0.011], what="rounds")
    assert j.kept == 2 and j.middle == 3 and j.agreement == pytest.approx((0.012 - 0.010) / 0.011)
    j = judge([1.00, 1.40, 1.02, 1.01, 0.99])
    assert j.middle == 3 and j.agreement == pytest.approx((1.02 - 1.00) / 1.01)
    assert judge([1.0, 1.0 + THRESHOLDS.noisy_relative_iqr * 0.99, 1.0]).verdict == "reliable"   # at the threshold


@pytest.mark.parametrize("ratios, kwargs, error, match", [
    ([], {}, ValueError, "at least one"),
    ([1.0, -1.0], {}, ValueError, "> 0"),
    ([1.0, float("nan")], {}, ValueError, "finite"),
    ("fast", {}, TypeError, "ratios"),
    ([1.0, 1.0], {"own": [TIGHT]}, ValueError, "own must give one value per ratio"),
    ([1.0, 1.0], {"probe_steps": [0.1, 0.1, 0.1]}, ValueError, "probe_steps"),
    ([1.0], {"thresholds": 0.2}, TypeError, "thresholds"),
])
def test_judge_refuses_bad_input(ratios, kwargs, error, match):
    with pytest.raises(error, match=match):
        judge(ratios, **kwargs)


def test_drift_says_how_far_the_probe_sets_moved():
    d = Drift("m", 1.0e-3, (1.0e-3, 1.2e-3, 0.9e-3))
    assert d.relative == pytest.approx(0.3 / 0.9) and d.step(0) == pytest.approx(0.2)
    assert d.step(1) == pytest.approx(0.3 / 0.9)
    assert d.line() == ("m: weights term 1.0 ms from the calibration, 0.9 to 1.2 ms from the 3 sets of probes around "
                        "its measurements (all together they move by 33%)")
