"""Measurement quality as data (course_lib.core.quality): verdicts and claims that agree with their operands.

Unit tests, Hypothesis properties (every verdict and every relation agrees with the numbers it was
computed from), and the recorded measurement profiles of tests/fixtures/profiles/ (a quiet and a loaded
2-core VM, this development machine while busy, an H200): each claim computed from a profile's timings
must say what those timings show.
"""
from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.core import quality as q
from course_lib.core.quality import (THRESHOLDS, Thresholds, compare_timings, read_cpu_steal, timing_verdict, trend,
                                     within)
from profiles import all_profiles, load_profile, schema_problems

PROFILES = all_profiles()
TH = THRESHOLDS


# --------------------------------------------------------------------------------------------------
# Independent restatements of the rules (what "agrees with its operands" means)
# --------------------------------------------------------------------------------------------------
def noise_tests(v: q.TimingVerdict, th: Thresholds = TH) -> list[str]:
    """The noise tests a timing fails, recomputed from its statistics."""
    failed = []
    if v.repeats is not None and v.repeats < th.min_repeats:
        failed.append("repeats")
    if v.q1 is None:
        failed.append("no spread")
    elif (v.q3 - v.q1) / v.median > th.noisy_relative_iqr:
        failed.append("iqr")
    if v.p90 is not None and v.p90 / v.median > th.noisy_p90_ratio:
        failed.append("p90")
    if v.minimum is not None and v.median / v.minimum > th.noisy_median_over_min:
        failed.append("min")
    return failed


def assert_verdict_agrees(v: q.TimingVerdict, th: Thresholds = TH):
    contended = v.steal is not None and v.steal > th.contended_steal
    failed = noise_tests(v, th)
    expected = "contended" if contended else ("noisy" if failed else "reliable")
    assert v.verdict == expected, (v, failed)
    assert v.reasons, "every verdict gives its reasons"


def assert_comparison_agrees(c: q.TimingComparison, th: Thresholds = TH):
    a, b = c.a, c.b
    assert c.ratio == pytest.approx(a.median / b.median)
    assert c.interval[0] <= c.ratio * (1 + 1e-12) and c.ratio <= c.interval[1] * (1 + 1e-12)
    if c.relation == "faster":
        assert a.median < b.median / (1 + th.min_effect) * (1 + 1e-12)
        assert c.interval[1] < 1
    elif c.relation == "slower":
        assert a.median > b.median * (1 + th.min_effect) * (1 - 1e-12)
        assert c.interval[0] > 1
    else:
        assert c.relation == "indistinguishable"
        assert c.interval[0] <= 1 <= c.interval[1] or abs(math.log(c.ratio)) <= math.log1p(th.min_effect) * (1 + 1e-9)
    assert c.effect == pytest.approx(max(a.median, b.median) / min(a.median, b.median) - 1)
    assert q.VERDICTS.index(c.verdict) >= max(q.VERDICTS.index(a.verdict), q.VERDICTS.index(b.verdict))
    if c.spread_exceeds_effect is not None:
        assert c.spread_exceeds_effect == (max(a.spread, b.spread) > c.effect)
    if c.settled and c.verdict != "reliable":       # settled by the margin: the effect clears both uncertainties
        assert c.relation != "indistinguishable"
        assert abs(math.log(c.ratio)) > th.decisive_margin * (math.log1p(c.a.uncertainty) + math.log1p(c.b.uncertainty))
    assert c.settled == (c.verdict == "reliable") or c.settled == q.settles(
        abs(math.log(c.ratio)) - math.log1p(th.min_effect), [c.a, c.b], thresholds=th)


def assert_trend_agrees(t: q.Trend):
    assert list(t.xs) == sorted(t.xs)
    first, last = t.medians[0], t.medians[-1]
    if t.direction == "grows":
        assert last > first and "faster" not in t.steps
    elif t.direction == "falls":
        assert last < first and "slower" not in t.steps
    elif t.direction == "flat":
        assert set(t.steps) == {"indistinguishable"} and t.overall.relation == "indistinguishable"
    else:
        assert t.direction == "inconclusive"
    if any(not p.reliable for p in t.points):
        assert t.direction == "inconclusive" or (t.direction in ("grows", "falls") and t.overall.settled)
    assert t.settled == (t.direction != "inconclusive")


# --------------------------------------------------------------------------------------------------
# Thresholds
# --------------------------------------------------------------------------------------------------
def test_the_thresholds_are_the_documented_ones():
    """Each default is the value the class's docstring states for it (``name`` = value): the text the lessons
    and the docs quote cannot drift from the rule the verdicts apply."""
    import dataclasses
    import re

    documented = {name: float(value) for name, value in
                  re.findall(r"``(\w+)`` = ([0-9.]+)", type(TH).__doc__ or "")}
    fields = {f.name: getattr(TH, f.name) for f in dataclasses.fields(TH)}
    assert documented == pytest.approx(fields) and len(fields) >= 6
    with pytest.raises(Exception):
        TH.noisy_p90_ratio = 2  # frozen


@pytest.mark.parametrize("field, value, error", [
    ("noisy_p90_ratio", 0.5, ValueError), ("noisy_p90_ratio", "2", TypeError),
    ("noisy_relative_iqr", 0, ValueError), ("noisy_median_over_min", math.nan, ValueError),
    ("contended_steal", 1.0, ValueError), ("contended_steal", 0, ValueError),
    ("min_repeats", 0, ValueError), ("min_repeats", 2.5, ValueError), ("min_repeats", "3", TypeError),
    ("min_effect", -0.1, ValueError), ("decisive_margin", 0, ValueError),
])
def test_bad_thresholds_name_the_field(field, value, error):
    with pytest.raises(error, match=field):
        Thresholds(**{field: value})


def test_thresholds_must_be_a_thresholds():
    with pytest.raises(TypeError, match="thresholds"):
        timing_verdict([1.0, 1.0, 1.0], thresholds={"noisy_p90_ratio": 2})


# --------------------------------------------------------------------------------------------------
# One timing
# --------------------------------------------------------------------------------------------------
TIGHT = [1.00e-3, 1.01e-3, 0.99e-3, 1.02e-3, 1.00e-3, 0.995e-3, 1.005e-3]


def test_a_tight_timing_is_reliable():
    v = timing_verdict(TIGHT)
    assert v.verdict == "reliable" and v.reliable
    assert v.median == pytest.approx(1.0e-3) and v.repeats == 7
    assert v.spread < 0.02 and v.p90_ratio < 1.05
    assert "spread" in v.reason


def test_one_slow_run_in_ten_makes_it_noisy_by_p90():
    # the measured case: torch.mv with 2 threads under load, median 72 µs, p90 16 ms
    times = [72e-6] * 8 + [16e-3] * 2
    v = timing_verdict(times)
    assert v.verdict == "noisy" and v.spread == 0
    assert v.p90_ratio > 100 and "p90" in v.reason


def test_a_wide_middle_half_is_noisy():
    v = timing_verdict({"seconds": 1.0, "q1_seconds": 0.85, "q3_seconds": 1.1, "repeats": 7})
    assert v.verdict == "noisy" and "25%" in v.reason


def test_a_median_far_above_the_fastest_run_is_noisy():
    v = timing_verdict({"seconds": 1.0, "q1_seconds": 0.95, "q3_seconds": 1.05, "min_seconds": 0.5, "repeats": 7})
    assert v.verdict == "noisy" and "fastest" in v.reason


def test_too_few_repeats_and_a_bare_median_are_noisy():
    assert timing_verdict([1.0, 1.0]).verdict == "noisy"
    v = timing_verdict({"seconds": 1e-3})
    assert v.verdict == "noisy" and "no spread" in v.reason and v.spread is None


def test_steal_makes_it_contended_and_below_the_threshold_it_is_reported():
    v = timing_verdict(TIGHT, steal=0.08)
    assert v.verdict == "contended" and "steal" in v.reason
    v = timing_verdict(TIGHT, steal=0.01)
    assert v.verdict == "reliable" and "CPU steal 1.0%" in v.reason


def test_thresholds_can_be_changed_in_one_place():
    loose = Thresholds(noisy_p90_ratio=1e6, noisy_relative_iqr=1e6, noisy_median_over_min=1e6)
    assert timing_verdict([72e-6] * 8 + [16e-3] * 2, thresholds=loose).verdict == "reliable"


def test_every_accepted_shape_gives_the_same_summary():
    s = q.summarize_timing(TIGHT)
    shapes = [
        {"times": TIGHT},
        tuple(TIGHT),
        s,
        {"seconds": s.median, "q1_seconds": s.q1, "q3_seconds": s.q3, "min_seconds": s.minimum,
         "p10_seconds": s.p10, "p90_seconds": s.p90, "repeats": 7},
    ]
    for shape in shapes:
        assert q.summarize_timing(shape) == s
    probe_result = SimpleNamespace(seconds=s.median, q1_seconds=s.q1, q3_seconds=s.q3, repeats=7)
    assert q.summarize_timing(probe_result) == replace(s, p10=None, p90=None, minimum=None)
    timeit_result = SimpleNamespace(median=s.median, q1=s.q1, q3=s.q3, minimum=s.minimum, repeats=7, number=10)
    assert q.summarize_timing(timeit_result) == replace(s, p10=None, p90=None)
    assert q.summarize_timing(SimpleNamespace(times=TIGHT, seconds=1.0)) == s      # raw times win


@pytest.mark.parametrize("kwargs, match", [
    ({"median": -1.0}, "TimingSummary.median"), ({"median": 1.0, "q1": 0.9}, "both quartiles"),
    ({"median": 1.0, "minimum": 2.0}, "TimingSummary.minimum"), ({"median": "1"}, "TimingSummary.median"),
    ({"median": 1.0, "repeats": 0}, "TimingSummary.repeats"),
])
def test_a_timing_summary_checks_its_fields(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        q.TimingSummary(**kwargs)


@pytest.mark.parametrize("times, error, match", [
    ([], ValueError, "times must hold at least one"),
    ("1.0 2.0", TypeError, "times must be"),
    (1.0, TypeError, "times must be"),
    (None, TypeError, "times must be"),
    ([1.0, "2"], TypeError, r"times\[1\]"),
    ([1.0, -1.0], ValueError, r"times\[1\]"),
    ([1.0, 0.0], ValueError, r"times\[1\]"),
    ([1.0, math.nan], ValueError, r"times\[1\]"),
    ([1.0, math.inf], ValueError, r"times\[1\]"),
    ({"q1_seconds": 1.0}, ValueError, "median"),
    ({"seconds": 1.0, "q1_seconds": 0.9}, ValueError, "both quartiles"),
    ({"seconds": 1.0, "q1_seconds": 1.2, "q3_seconds": 1.3}, ValueError, "q1"),
    ({"seconds": 1.0, "repeats": 0}, ValueError, "repeats"),
    ({"times": "abc"}, TypeError, "times.times"),
])
def test_bad_timings_name_the_argument(times, error, match):
    with pytest.raises(error, match=match):
        timing_verdict(times)


@pytest.mark.parametrize("steal, error", [(-0.1, ValueError), (1.5, ValueError), ("0.1", TypeError),
                                          (True, TypeError)])
def test_bad_steal_is_refused(steal, error):
    with pytest.raises(error, match="steal"):
        timing_verdict(TIGHT, steal=steal)


seconds = st.floats(1e-7, 10.0, allow_nan=False)
time_lists = st.lists(seconds, min_size=1, max_size=30)


@given(times=time_lists, steal=st.none() | st.floats(0, 1))
def test_every_verdict_agrees_with_its_timings(times, steal):
    v = timing_verdict(times, steal=steal)
    assert_verdict_agrees(v)
    assert v.median == pytest.approx(statistics.median(times))
    assert v.minimum == min(times) and v.repeats == len(times)


# --------------------------------------------------------------------------------------------------
# Two timings
# --------------------------------------------------------------------------------------------------
def test_compare_a_clear_case_both_ways():
    fast, slow = [1.0, 1.01, 0.99, 1.0, 1.02], [2.0, 2.02, 1.98, 2.01, 2.0]
    c = compare_timings(fast, slow)
    assert (c.relation, c.verdict, c.spread_exceeds_effect) == ("faster", "reliable", False)
    assert c.ratio == pytest.approx(0.5) and c.speedup == pytest.approx(2.0)
    assert compare_timings(slow, fast).relation == "slower"


def test_a_difference_below_min_effect_is_indistinguishable():
    c = compare_timings([1.0] * 5, [1.02] * 5)
    assert c.relation == "indistinguishable" and "below 3%" in c.reason


def test_overlapping_middle_halves_are_indistinguishable():
    c = compare_timings({"seconds": 1.0, "q1_seconds": 0.9, "q3_seconds": 1.15},
                {"seconds": 1.1, "q1_seconds": 1.0, "q3_seconds": 1.2})
    assert c.relation == "indistinguishable" and "overlap" in c.reason


def test_a_relation_resting_on_a_spread_larger_than_its_effect_is_noisy():
    a = {"seconds": 1.0, "q1_seconds": 0.92, "q3_seconds": 1.01, "repeats": 7}   # spread 9 %, reliable alone
    b = {"seconds": 1.06, "q1_seconds": 1.02, "q3_seconds": 1.08, "repeats": 7}
    c = compare_timings(a, b)
    assert c.relation == "faster" and c.spread_exceeds_effect is True
    assert (c.a.verdict, c.b.verdict, c.verdict) == ("reliable", "reliable", "noisy")


def test_medians_only_give_a_relation_marked_noisy():
    c = compare_timings({"seconds": 2.656e-3}, {"seconds": 4.489e-3})
    assert (c.relation, c.verdict, c.spread_exceeds_effect) == ("faster", "noisy", None)
    assert c.interval == (c.ratio, c.ratio)


def test_compare_names_its_arguments():
    with pytest.raises(ValueError, match=r"a_times\[0\]"):
        compare_timings([-1.0], [1.0])
    with pytest.raises(TypeError, match="b_times"):
        compare_timings([1.0], "fast")


@given(a=time_lists, b=time_lists, steal=st.none() | st.floats(0, 1))
def test_every_comparison_agrees_with_its_operands(a, b, steal):
    c = compare_timings(a, b, steal=steal)
    assert_comparison_agrees(c)
    mirror = {"faster": "slower", "slower": "faster", "indistinguishable": "indistinguishable"}
    assert compare_timings(b, a, steal=steal).relation == mirror[c.relation]
    assert compare_timings(a, a).relation == "indistinguishable"


# --------------------------------------------------------------------------------------------------
# Series
# --------------------------------------------------------------------------------------------------
def tight(x: float) -> list[float]:
    return [x * f for f in (1.0, 1.01, 0.99, 1.005, 0.995)]


@pytest.mark.parametrize("medians, direction", [
    ([1, 2, 3], "grows"), ([3, 2, 1], "falls"), ([1, 1.01, 0.995], "flat"),
    ([1, 2, 1], "inconclusive"), ([2, 1, 2], "inconclusive"), ([1, 1, 2], "grows"), ([1, 1.5], "grows"),
])
def test_trend_directions(medians, direction):
    t = trend(range(1, len(medians) + 1), [tight(m) for m in medians])
    assert t.direction == direction
    assert_trend_agrees(t)


def test_a_noisy_point_makes_the_trend_inconclusive():
    # lesson 06 in a fast run: TPOT 11 -> 5.8 -> 1.86 ms with huge error bars
    points = [{"seconds": 11e-3, "q1_seconds": 2e-3, "q3_seconds": 30e-3}, tight(5.8e-3), tight(1.86e-3)]
    t = trend([128, 256, 512], points)
    assert t.direction == "inconclusive" and "x=128 is noisy" in t.reason


def test_trend_sorts_by_x():
    t = trend([4096, 128, 1024], [tight(3), tight(1), tight(2)])
    assert t.xs == (128, 1024, 4096) and t.direction == "grows"


@pytest.mark.parametrize("xs, series, error, match", [
    ([1], [TIGHT], ValueError, "at least 2"),
    ([1, 2], [TIGHT], ValueError, "same length"),
    ([1, 1], [TIGHT, TIGHT], ValueError, "repeat"),
    ([1, math.inf], [TIGHT, TIGHT], ValueError, r"xs\[1\]"),
    ([1, "2"], [TIGHT, TIGHT], TypeError, r"xs\[1\]"),
    ([1, 2], [TIGHT, [0.0]], ValueError, r"times_per_x\[1\]"),
    ("12", [TIGHT, TIGHT], TypeError, "xs"),
])
def test_bad_series_name_the_argument(xs, series, error, match):
    with pytest.raises(error, match=match):
        trend(xs, series)


@given(st.lists(st.tuples(st.floats(0.5, 2.0), st.floats(0, 0.4)), min_size=2, max_size=6))
def test_every_trend_agrees_with_its_points(points):
    series = [{"seconds": m, "q1_seconds": m * (1 - s / 2), "q3_seconds": m * (1 + s / 2)} for m, s in points]
    assert_trend_agrees(trend(list(range(len(series))), series))


# --------------------------------------------------------------------------------------------------
# Predicted against measured
# --------------------------------------------------------------------------------------------------
def test_within_over_under():
    assert within(1.1, [1.0, 1.0, 1.0], 0.15).relation == "within"
    a = within(1.3, [1.0, 1.0, 1.0], 0.15)
    assert (a.relation, a.error, a.decided) == ("over", pytest.approx(0.3), True)
    assert within(0.5, [1.0, 1.0, 1.0], 0.15).relation == "under"
    edge = within(1.14, {"seconds": 1.0, "q1_seconds": 0.98, "q3_seconds": 1.02}, 0.15)
    assert edge.relation == "within" and not edge.decided


@given(pred=seconds, times=time_lists, tol=st.floats(0.01, 1.0))
def test_every_agreement_agrees_with_its_error(pred, times, tol):
    a = within(pred, times, tol)
    error = pred / statistics.median(times) - 1
    assert a.error == pytest.approx(error)
    assert a.relation == ("within" if abs(a.error) <= tol else "over" if a.error > 0 else "under")
    slack = 1e-9 * abs(a.error) + 1e-12
    assert a.error_interval[0] - slack <= a.error <= a.error_interval[1] + slack
    assert a.verdict == timing_verdict(times).verdict


def test_within_names_its_arguments():
    with pytest.raises(ValueError, match="predicted"):
        within(0, [1.0], 0.1)
    with pytest.raises(ValueError, match="tolerance"):
        within(1.0, [1.0], -0.1)


# --------------------------------------------------------------------------------------------------
# Counting verdicts, CPU steal
# --------------------------------------------------------------------------------------------------
def test_summarize_verdicts():
    s = q.summarize_verdicts(["reliable", timing_verdict([1.0]), "reliable"])
    assert (s.verdict, s.counts, s.total, s.unreliable) == ("noisy", {"reliable": 2, "noisy": 1, "contended": 0}, 3, 1)
    assert q.summarize_verdicts([]).verdict == "reliable"
    with pytest.raises(ValueError, match=r"items\[0\]"):
        q.summarize_verdicts(["fine"])
    with pytest.raises(TypeError, match=r"items\[0\]"):
        q.summarize_verdicts([3])


STAT_BEFORE = "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 50 0 25 400 5 0 2 18 0 0\nintr 1 2 3\n"
STAT_AFTER = "cpu  160 0 70 880 10 0 10 70 20 0\ncpu0 80 0 35 440 5 0 5 35 10 0\nintr 4 5 6\n"


def test_cpu_steal_between_two_snapshots():
    # deltas: user 60, system 20, idle 80, softirq 5, steal 35 -> total 200 (guest 20 is inside user)
    assert read_cpu_steal(STAT_BEFORE, STAT_AFTER) == pytest.approx(35 / 200)
    assert read_cpu_steal(STAT_BEFORE, STAT_BEFORE) is None                    # no tick passed
    assert read_cpu_steal("cpu 1 2 3 4\n", "cpu 2 3 4 5\n") is None            # a kernel without a steal column


@pytest.mark.parametrize("before, after, error, match", [
    (None, STAT_AFTER, TypeError, "before"),
    (STAT_BEFORE, b"cpu 1", TypeError, "after"),
    ("intr 1 2\n", STAT_AFTER, ValueError, "before must contain"),
    (STAT_BEFORE, "cpu  1 x 3 4 5 6 7 8\n", ValueError, "after"),
    (STAT_BEFORE, "cpu  1 2\n", ValueError, "after"),
    (STAT_AFTER, STAT_BEFORE, ValueError, "after must be taken after before"),
    (STAT_BEFORE, "cpu 1 2 3 4 5 6 7 8 9\n", ValueError, "same system"),
])
def test_bad_proc_stat_is_refused(before, after, error, match):
    with pytest.raises(error, match=match):
        read_cpu_steal(before, after)


# --------------------------------------------------------------------------------------------------
# The recorded profiles
# --------------------------------------------------------------------------------------------------
def test_the_profiles_are_there_and_follow_the_schema():
    names = {p.name for p in PROFILES}
    assert {"intel-xeon-2core-260mib-l3-quiet", "intel-xeon-2core-260mib-l3-loaded", "h200-mistral7b"} <= names
    assert any(n.startswith("this-machine") for n in names)
    assert {p.device for p in PROFILES} == {"cpu", "cuda"}
    for p in PROFILES:
        assert schema_problems(p.data) == []
    assert schema_problems({"schema": 1}) and "unknown key 'x'" in schema_problems({**PROFILES[0].data, "x": 1})


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_every_verdict_of_a_profile_agrees_with_its_numbers(profile):
    for run in profile.runs:
        for probe, timing in run.timings.items():
            assert_verdict_agrees(timing_verdict(timing, steal=run.steal))
    for s in profile.series:
        assert_trend_agrees(trend(s.xs, s.timings))
        for point in s.points:
            if "predicted_seconds" in point:
                a = within(point["predicted_seconds"], point["timing"], 0.15)
                assert a.relation == ("within" if abs(a.error) <= 0.15 else "over" if a.error > 0 else "under")


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_every_comparison_in_a_profile_agrees_with_its_numbers(profile):
    # the same probe across runs (1 thread against 2), and neighbouring probes within a run
    by_probe: dict[str, list] = {}
    for run in profile.runs:
        items = list(run.timings.items())
        for (_, a), (_, b) in zip(items, items[1:]):
            assert_comparison_agrees(compare_timings(a, b, steal=run.steal))
        for probe, t in items:
            by_probe.setdefault(probe, []).append(t)
    for timings in by_probe.values():
        for a, b in itertools.combinations(timings, 2):
            assert_comparison_agrees(compare_timings(a, b))


def counts(profile_name: str, label: str) -> dict:
    run = load_profile(profile_name).run(label)
    return q.summarize_verdicts([timing_verdict(t, steal=run.steal) for t in run.timings.values()]).counts


def test_the_quiet_vm_is_reliable_with_one_thread_and_the_loaded_one_is_not():
    assert counts("intel-xeon-2core-260mib-l3-quiet", "1 thread") == {"reliable": 10, "noisy": 0, "contended": 0}
    # quiet with 2 threads: the 256x256 GEMV's middle half spans 890 % of its median
    assert counts("intel-xeon-2core-260mib-l3-quiet", "2 threads")["noisy"] == 1
    assert counts("intel-xeon-2core-260mib-l3-loaded", "1 thread")["noisy"] == 4
    assert counts("intel-xeon-2core-260mib-l3-loaded", "2 threads")["noisy"] == 5
    assert counts("this-machine-xeon-2core-300mib-l3-quiet", "1 thread") == {"reliable": 11, "noisy": 0, "contended": 0}
    assert counts("this-machine-xeon-2core-300mib-l3-shared", "1 thread")["reliable"] == 8
    assert counts("this-machine-xeon-2core-300mib-l3-shared", "2 threads")["noisy"] == 8
    # a 32 MiB-L3 AMD EPYC VM, quiet: every probe reliable with either thread count; only raw single calls are not
    for label in ("1 thread", "2 threads"):
        run = load_profile("amd-epyc-2core-32mib-l3-quiet").run(label)
        assert {k for k, t in run.timings.items() if timing_verdict(t, steal=run.steal).verdict != "reliable"} == \
            {"mv_single_calls.fp32.1024x1024"}


def test_the_quiet_amd_vm_validate_runs_are_within_the_accuracy_target():
    # the two runs of python -m course_lib.measure.validate recorded on the 32 MiB-L3 AMD VM (both judged reliable
    # by their own verdicts): every decode point within 15 %, geomean at most 10 %
    profile = load_profile("amd-epyc-2core-32mib-l3-quiet")
    for k in (1, 2):
        points = [pt for s in profile.series if s.name.startswith("tpot") and s.name.endswith(f"(validate run {k})")
                  for pt in s.points]
        errors = [within(pt["predicted_seconds"], pt["timing"], 0.15) for pt in points]
        assert len(errors) == 9 and all(a.relation == "within" for a in errors)
        assert statistics.geometric_mean([abs(a.error) for a in errors]) <= 0.10


def test_relations_the_numbers_show():
    quiet = load_profile("intel-xeon-2core-260mib-l3-quiet")
    one, two = quiet.run("1 thread").timings, quiet.run("2 threads").timings
    c = compare_timings(two["matmul.fp32"], one["matmul.fp32"])          # 7.7 ms against 14.3 ms
    assert (c.relation, c.verdict) == ("faster", "reliable")
    c = compare_timings(two["gemv.fp32.256x256"], one["gemv.fp32.256x256"])   # the noisy 2-thread GEMV
    assert c.verdict == "noisy"

    gpu = load_profile("h200-mistral7b").run("fp16, CUDA events").timings
    c = compare_timings(gpu["weights_step.graph.batch16.fp8_e4m3"], gpu["weights_step.graph.batch16.fp16"])
    assert (c.relation, c.verdict) == ("faster", "noisy")        # 2.656 ms against 4.489 ms; spread unknown
    assert c.speedup > 1 + TH.min_effect                          # a clear effect, however uncertain its size
    c = compare_timings(gpu["weights_step.graph.batch1"], gpu["weights_step.eager.batch1"])
    assert c.relation == "faster"                                 # CUDA graph 4.43 ms, eager loop 6.23 ms

    busy = load_profile("this-machine-xeon-2core-300mib-l3-busy")
    b1, b2 = busy.run("1 thread").timings, busy.run("2 threads").timings
    c = compare_timings(b2["gemv.fp32.256x256"], b1["gemv.fp32.256x256"])
    assert c.relation == "slower"         # 2 threads on 2 busy cores: every call waits for a time slice

    shared = load_profile("this-machine-xeon-2core-300mib-l3-shared")
    s1, s2 = (shared.run(x).timings["mv_single_calls.fp32.1024x1024"] for x in ("1 thread", "2 threads"))
    assert (timing_verdict(s1).verdict, timing_verdict(s2).verdict) == ("reliable", "noisy")
    c = compare_timings(s2, s1)
    assert (c.relation, c.verdict) == ("slower", "noisy")        # 12 ms against 0.17 ms per call


def test_trends_the_numbers_show():
    def series(profile, name):
        return next(s for s in load_profile(profile).series if s.name == name)

    quiet_ttft = series("intel-xeon-2core-260mib-l3-quiet", "ttft llama-S")
    assert trend(quiet_ttft.xs, quiet_ttft.timings).direction == "grows"
    # loaded: measured TPOT fell from 23.9 ms at context 128 to 17.8 ms at 1024, then rose: not a trend
    loaded = series("intel-xeon-2core-260mib-l3-loaded", "tpot llama-S")
    t = trend(loaded.xs, loaded.timings)
    assert t.direction == "inconclusive" and "disagree" in t.reason
    # the GPU's medians grow with context, but without a spread the trend cannot be called
    gpu = series("h200-mistral7b", "full decode step (CUDA graph), batch 1, by context")
    t = trend(gpu.xs, gpu.timings)
    assert t.direction == "inconclusive" and t.overall.relation == "slower"


# --------------------------------------------------------------------------------------------------
# settles: a relation that clears the spread by the margin stands on noisy timings
# --------------------------------------------------------------------------------------------------
def _noisy(median, spread):
    return {"seconds": median, "q1_seconds": median * (1 - spread / 2), "q3_seconds": median * (1 + spread / 2),
            "min_seconds": median * (1 - spread / 2), "repeats": 7}


def test_a_large_effect_settles_on_noisy_timings_and_a_small_one_does_not():
    # issue 29: a 9x cache effect between timings whose middle halves span 40 % is settled ...
    big = compare_timings(_noisy(1.0, 0.4), _noisy(9.0, 0.4))
    assert big.verdict == "noisy" and big.relation == "faster" and big.settled
    # ... a 1.47x difference with the same spreads is not (run-to-run drift of that size is common under load)
    small = compare_timings(_noisy(1.0, 0.4), _noisy(1.47, 0.25))
    assert small.verdict == "noisy" and not small.settled
    # the rule, stated once: beyond > margin x sum ln(1 + u)
    va, vb = q.timing_verdict(_noisy(1.0, 0.4)), q.timing_verdict(_noisy(9.0, 0.4))
    need = TH.decisive_margin * (math.log1p(va.uncertainty) + math.log1p(vb.uncertainty))
    assert q.settles(need * 1.01, [va, vb]) and not q.settles(need * 0.99, [va, vb])


def test_nothing_settles_on_a_median_only_or_too_few_repeats():
    median_only = q.timing_verdict({"seconds": 1.0})
    assert median_only.uncertainty is None and not q.settles(10.0, [median_only])
    few = q.timing_verdict([1.0, 1.1])
    assert not q.settles(10.0, [few])
    with pytest.raises(TypeError, match="beyond"):
        q.settles("1", [median_only])
    with pytest.raises(TypeError, match="timings"):
        q.settles(1.0, [])


def test_a_trend_over_noisy_points_stands_only_when_settled_and_no_step_goes_back():
    xs = [1, 10, 100, 1000]
    rising = [_noisy(1e-3 * x, 0.3) for x in xs]
    t = q.trend(xs, rising)
    assert t.verdict == "noisy" and t.direction == "grows" and t.settled
    wobble = [_noisy(1e-3, 0.3), _noisy(3e-3, 0.3), _noisy(1.2e-3, 0.3), _noisy(1.1e-3, 0.3)]
    assert q.trend(xs, wobble).direction == "inconclusive"


def test_an_agreement_is_settled_far_outside_the_tolerance_only():
    far = q.within(1e-3, _noisy(8.67e-3, 0.4), 0.25)      # issue 29: a model step 8.67x its estimate
    assert far.relation == "under" and far.verdict == "noisy" and far.settled
    near = q.within(1e-3, _noisy(1.1e-3, 0.4), 0.25)
    assert near.relation == "within" and not near.settled
