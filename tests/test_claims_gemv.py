"""Lesson 05's measured claims (course_lib.core.claims.gemv) against every recorded machine profile.

Each claim must agree with its own operands (a "matches" only where the numbers are within the tolerance,
"slower" only where the comparison says so, ...), its verdict must be the worst of its timings' verdicts, and
its outcome is the verdict whenever that is not "reliable": the noisy profiles produce the noisy sentence.
The sentences (course_lib.lessons.claims.gemv) are checked to follow the outcome.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import all_profiles

from course_lib.core import quality
from course_lib.core.claims import gemv as claims
from course_lib.lessons.claims.gemv import ADVICE, RERUN_ADVICE, UNDECIDED_MARK, say

PROFILES = all_profiles()
RUNS = [(p, r) for p in PROFILES for r in p.runs]


def _rows(run) -> list[dict]:
    """The run's GEMV rows; the H200's records carry no bytes: they are (m·k + m + k) × 2 (fp16, as measured)."""
    out = []
    for key, t in run.timings.items():
        if key.startswith("gemv."):
            row = dict(t, dtype=t.get("dtype", "fp32"))
            if "bytes" not in row:
                row["bytes"] = (row["m"] * row["k"] + row["m"] + row["k"]) * {"fp16": 2, "fp32": 4}[row["dtype"]]
            out.append(row)
    return out


def _worst(*timings) -> str:
    return max((quality.timing_verdict(t).verdict for t in timings), key=quality.VERDICTS.index)


def _check_outcome(c):
    """The outcome is the relation when the numbers carry it (reliable, or settled by the margin), else the verdict;
    an undecided sentence says so (and never states the relation), a settled one says why it stands."""
    assert c.outcome == (c.relation if c.verdict == "reliable" or c.settled else c.verdict)
    text = say(c)
    assert isinstance(text, str) and text
    assert (UNDECIDED_MARK in text) == (c.outcome in ("noisy", "contended")) or c.name == "decode_from_gemv"
    assert ("so this run settles it" in text) == (c.verdict != "reliable" and c.settled)
    assert ADVICE not in text and RERUN_ADVICE not in text          # said once per lesson, by rerun_note()


CPU_RUNS = [(p, r) for p, r in RUNS if "copy" in r.timings]


@pytest.mark.parametrize("profile,run", CPU_RUNS, ids=[f"{p.name}:{r.label}" for p, r in CPU_RUNS])
def test_gemv_vs_copy_agrees_with_its_ratio(profile, run):
    copy = run.timings["copy"]
    for row in _rows(run):
        c = claims.gemv_vs_copy(row, copy)
        ratio = (row["bytes"] / quality.timing_verdict(row).median) / (copy["bytes"] / copy["seconds"])
        assert c.operands["ratio"] == pytest.approx(ratio)
        expected = "matches" if abs(ratio - 1) <= c.operands["tolerance"] else ("above" if ratio > 1 else "below")
        assert c.relation == expected
        assert c.verdict == _worst(row, copy)
        _check_outcome(c)


@pytest.mark.parametrize("profile,run", CPU_RUNS, ids=[f"{p.name}:{r.label}" for p, r in CPU_RUNS])
def test_time_vs_size_agrees_with_the_trend(profile, run):
    rows = _rows(run)
    c = claims.time_vs_size(rows)
    ordered = sorted(rows, key=lambda r: r["bytes"])
    t = quality.trend([r["bytes"] for r in ordered], ordered)
    assert c.verdict == t.verdict == _worst(*rows)
    if c.relation == "grows":
        assert quality.compare_timings(ordered[-1], ordered[0]).relation == "slower"
    if c.verdict != "reliable" and not c.settled:
        assert c.outcome == c.verdict
    assert c.operands["bytes_ratio"] == pytest.approx(ordered[-1]["bytes"] / ordered[0]["bytes"])
    _check_outcome(c)


@pytest.mark.parametrize("profile,run", CPU_RUNS, ids=[f"{p.name}:{r.label}" for p, r in CPU_RUNS])
def test_small_matrix_calls_overhead_only_a_small_excess(profile, run):
    copy = run.timings["copy"]
    row = min(_rows(run), key=lambda r: r["bytes"])
    c = claims.small_matrix(row, copy)
    o = c.operands
    assert o["predicted_seconds"] == pytest.approx(row["bytes"] / (copy["bytes"] / copy["seconds"]))
    if c.relation == "overhead":
        assert 0 < o["excess_seconds"] <= claims.DISPATCH_SECONDS
    if c.relation == "waited":
        assert o["excess_seconds"] > claims.DISPATCH_SECONDS
    if c.relation == "faster":
        assert o["seconds"] < o["predicted_seconds"]
    assert c.verdict == _worst(row, copy)
    _check_outcome(c)


PAIRS = [(p, a, b) for p in PROFILES for a in p.runs for b in p.runs if a.label != b.label and "copy" in a.timings]


@pytest.mark.parametrize("profile,a,b", PAIRS, ids=[f"{p.name}:{a.label}/{b.label}" for p, a, b in PAIRS])
def test_dtype_speed_agrees_with_the_comparison(profile, a, b):
    """Real timings of two runs stand in for a half-precision row (half the bytes) and its fp32 row."""
    for key, fp32 in a.timings.items():
        if not key.startswith("gemv.") or key not in b.timings:
            continue
        half = dict(b.timings[key], dtype="fp16", bytes=fp32["bytes"] / 2)
        fp32 = dict(fp32, dtype="fp32")
        c = claims.dtype_speed(half, fp32)
        cmp = quality.compare_timings(half, fp32)
        assert c.operands["ratio"] == pytest.approx(cmp.ratio)
        assert c.verdict == cmp.verdict
        if c.relation == "slower":
            assert cmp.relation == "slower"
        elif c.relation == "same":
            assert cmp.relation == "indistinguishable"
        else:
            assert cmp.relation == "faster"
        _check_outcome(c)


@pytest.mark.parametrize("profile,run", CPU_RUNS, ids=[f"{p.name}:{r.label}" for p, r in CPU_RUNS])
def test_decode_from_gemv_is_weight_bytes_over_the_largest_rows_bandwidth(profile, run):
    rows = _rows(run)
    c = claims.decode_from_gemv({"fp32": 16e9}, rows)
    big = max(rows, key=lambda r: r["bytes"])
    assert c.operands["seconds"] == pytest.approx(16e9 / (big["bytes"] / quality.timing_verdict(big).median))
    assert c.verdict == quality.timing_verdict(big).verdict
    _check_outcome(c)


SERIES = [(p, s) for p in PROFILES for s in p.series if any("predicted_seconds" in x for x in s.points)]


@pytest.mark.parametrize("profile,series", SERIES, ids=[f"{p.name}:{s.name}" for p, s in SERIES])
def test_model_vs_estimate_agrees_with_within(profile, series):
    for point in series.points:
        c = claims.model_vs_estimate(point["timing"], point["predicted_seconds"])
        a = quality.within(point["predicted_seconds"], point["timing"], claims.TOLERANCE)
        assert c.relation == {"within": "matches", "over": "faster", "under": "slower"}[a.relation]
        assert c.operands["ratio"] == pytest.approx(1 / (1 + a.error))
        _check_outcome(c)


def test_the_noisy_profiles_give_the_noisy_sentences():
    for name in ("intel-xeon-2core-260mib-l3-loaded", "this-machine-xeon-2core-300mib-l3-busy"):
        p = next(x for x in PROFILES if x.name == name)
        cs = [claims.time_vs_size(_rows(r)) for r in p.runs]
        assert any(c.verdict != "reliable" for c in cs), name          # the load shows in the verdicts
        for c in cs:        # a 1000x bytes span clears their spread: "grows" stands, with its note, or nothing does
            assert c.outcome in ("grows", "noisy"), (name, c.outcome)
            assert c.outcome == "noisy" or c.verdict == "reliable" or c.settled
    h200 = next(x for x in PROFILES if x.name == "h200-mistral7b")      # medians only: nothing is reliable
    rows = _rows(h200.runs[0])
    assert claims.time_vs_size(rows).outcome == "noisy"
    assert claims.decode_from_gemv({"fp16": 14e9}, rows).outcome == "noisy"


def test_the_quiet_one_thread_runs_show_time_growing_with_size():
    for name in ("intel-xeon-2core-260mib-l3-quiet", "this-machine-xeon-2core-300mib-l3-quiet"):
        p = next(x for x in PROFILES if x.name == name)
        assert claims.time_vs_size(_rows(p.run("1 thread"))).outcome == "grows"


# --- synthetic timings: the cache claims (no profile records same-buffer rows) ----------------------
def _timing(median, spread, nbytes, m=1024, k=1024):
    return {"seconds": median, "q1_seconds": median * (1 - spread / 2), "q3_seconds": median * (1 + spread / 2),
            "min_seconds": median * (1 - spread / 2), "repeats": 7, "bytes": nbytes, "m": m, "k": k,
            "element_bytes": 4, "beyond_cache": False}


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-5, 1e-1), st.floats(0.1, 10), st.floats(0.0, 0.6), st.floats(0.0, 0.6))
def test_cache_claims_agree_with_the_comparison(t_rot, factor, s_rot, s_same):
    rot = [_timing(t_rot, s_rot, 4 * 2**20)]
    same = [_timing(t_rot / factor, s_same, 4 * 2**20)]
    c = claims.cache_reuse(rot, same, 32 * 2**20)
    cmp = quality.compare_timings(same[0], rot[0])
    assert (c.relation == "cache_faster") == (cmp.relation == "faster")
    assert c.verdict == cmp.verdict
    b = claims.beyond_cache(rot, same, 2 * 2**20)
    assert (b.relation == "meet") == (cmp.relation == "indistinguishable")
    assert claims.beyond_cache(rot, same, 64 * 2**20).relation == "none_beyond"
    assert claims.cache_reuse(rot, same, 2 * 2**20).relation == "none_fits"
    assert claims.cache_reuse(rot, same, None).relation == "unknown_cache"
    for x in (c, b):
        _check_outcome(x)


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-5, 1e-1), st.floats(0.2, 5), st.floats(0.0, 0.5))
def test_dtype_speed_relation_follows_the_ratio(t32, factor, spread):
    fp32 = dict(_timing(t32, spread, 4_000_000), dtype="fp32")
    half = dict(_timing(t32 * factor, spread, 2_000_000), dtype="bf16")
    c = claims.dtype_speed(half, fp32)
    if c.relation == "as_bytes_predict":
        assert 0.5 / 1.5 <= c.operands["ratio"] <= 0.5 * 1.5
    if c.relation in ("slower", "same"):
        assert c.operands["ratio"] > 1 / (1 + quality.THRESHOLDS.min_effect) or c.relation == "same"
    _check_outcome(c)


def test_bad_input_is_refused_with_clear_errors():
    with pytest.raises(TypeError, match="bytes"):
        claims.gemv_vs_copy({"seconds": 1.0, "q1_seconds": 1.0, "q3_seconds": 1.0}, {"seconds": 1.0, "bytes": 2})
    with pytest.raises(ValueError, match="rows"):
        claims.time_vs_size([_timing(1e-3, 0.1, 100)])
    with pytest.raises(ValueError, match="same sizes"):
        claims.cache_reuse([_timing(1e-3, 0.1, 100)], [], 2**20)
    with pytest.raises(TypeError, match="weight_bytes"):
        claims.decode_from_gemv([], [_timing(1e-3, 0.1, 100)])
    with pytest.raises(TypeError, match="Claim"):
        say("faster")


# --- calibration, the reference run beside an undecided claim, one dtype both ways ------------------------------
def _row(m, seconds, dtype="fp32", spread=0.02, flops=None):
    e = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
    return {"m": m, "k": m, "dtype": dtype, "bytes": (m * m + 2 * m) * e, "flops": flops or 2 * m * m,
            **_timing(seconds, spread, (m * m + 2 * m) * e, m, m)}


def test_calibration_is_settled_only_on_steady_and_physically_consistent_probes():
    copy = dict(_timing(0.05, 0.02, 10**9), bytes=10**9)
    big = _row(4096, 4096 * 4096 * 4 / 20e9)
    bw = big["bytes"] / big["seconds"]
    fast_mm = {"n": 1024, "device": "cpu", "flops": 2 * 1024**3, **_timing(2 * 1024**3 / 300e9, 0.02, 1)}
    c = claims.calibration(bw, copy, [big], {"fp32": fast_mm})
    assert c.relation == "settled" and c.verdict == "reliable" and c.operands["source"] == "the 4096 × 4096 GEMV"
    # a matmul slower than the GEMV's FLOP rate (each timing steady): a stalled probe, not the machine
    slow_mm = dict(fast_mm, **_timing(2 * 1024**3 / 1.4e9, 0.02, 1))
    c = claims.calibration(bw, copy, [big], {"fp32": slow_mm})
    assert c.relation == "unsettled" and c.verdict == "noisy" and "no machine allows" in c.reason
    assert c.operands["bandwidth_verdict"] == "reliable"           # the bandwidth part still stands
    # an fp32 matmul probe left at its first size on a CPU
    first = dict(fast_mm, n=claims.MATMUL_FIRST_N, flops=2 * 256**3, **_timing(2 * 256**3 / 36.6e9, 0.02, 1))
    assert claims.calibration(bw, copy, [big], {"fp32": first}).relation == "unsettled"
    # a noisy copy feeding the bandwidth
    noisy_copy = dict(_timing(0.05, 0.5, 10**9), bytes=10**9)
    c = claims.calibration(noisy_copy["bytes"] / 0.05, noisy_copy, [], {})
    assert c.operands["source"] == "the copy" and c.operands["bandwidth_verdict"] == "noisy"
    assert "not this machine's" in say(c)


def test_an_estimate_inherits_the_calibration_part_it_rests_on():
    copy = dict(_timing(0.05, 0.02, 10**9), bytes=10**9)
    big = _row(4096, 4096 * 4096 * 4 / 20e9)
    bw = big["bytes"] / big["seconds"]
    stalled = {"n": claims.MATMUL_FIRST_N, "device": "cpu", "flops": 2 * 256**3,
               **_timing(2 * 256**3 / 36.6e9, 0.02, 1)}
    calib = claims.calibration(bw, copy, [big], {"fp32": stalled})
    step = _timing(0.17, 0.02, 1)
    memory = claims.model_vs_estimate(step, 0.111, basis=calib, bound="memory")
    compute = claims.model_vs_estimate(step, 0.111, basis=calib, bound="compute")
    assert memory.verdict == "reliable" and compute.outcome == "noisy"
    # a gap in a busy run is not blamed on the model's own costs; the reference run goes beside it
    ref = claims.model_vs_estimate(_timing(0.017, 0.02, 1), 0.0144)
    text = say(memory, ref=ref)
    assert "this run's, not the model's" in text and "**Reference run**" in text and "within ±25%" in text


def test_the_reference_run_goes_beside_an_undecided_claim_only():
    from course_lib.lessons.claims.gemv import UNDECIDED_MARK
    noisy = claims.dtype_speed(dict(_row(1024, 1.0e-3, "fp16", 0.5)), _row(1024, 0.95e-3, "fp32", 0.5))
    ref = claims.dtype_speed(_row(1024, 1.5e-3, "fp16"), _row(1024, 1e-3, "fp32"))
    assert noisy.outcome == "noisy" and ref.outcome == "slower"
    text = say(noisy, ref=ref)
    assert UNDECIDED_MARK in text and "**Reference run**" in text and "**slower**" in text.split("Reference run")[1]
    assert "Reference run" not in say(ref, ref=ref)                     # a decided claim needs no reference
    with pytest.raises(ValueError, match="ref must be"):
        say(noisy, ref=claims.small_matrix(_row(256, 1e-5), dict(_timing(0.05, 0.02, 10**9), bytes=10**9)))


def test_a_dtype_whose_sizes_point_both_ways_is_one_undecided_claim():
    rows = [_row(1024, 1e-3), _row(1024, 0.2e-3, "bf16"), _row(4096, 16e-3), _row(4096, 31e-3, "bf16")]
    [c] = claims.dtype_summary(rows)
    assert c.relation == "disagree" and c.verdict == "noisy" and "the sizes disagree" in c.reason
    assert say(c).count("cannot be decided") == 1
    consistent = [_row(1024, 1e-3), _row(1024, 1.5e-3, "bf16"), _row(4096, 16e-3), _row(4096, 25e-3, "bf16")]
    assert [x.relation for x in claims.dtype_summary(consistent)] == ["slower", "slower"]


def test_the_reference_run_ships_with_the_course_and_is_quiet():
    from course_lib.lessons.claims.reference import label, reference
    ref = reference("05")
    assert claims.time_vs_size(ref["05/rotated"]).outcome == "grows"
    assert all(claims.verdict(r) == "reliable" for r in ref["05/rotated"])
    assert "stored run" in label() and "quiet" in label()
    with pytest.raises(ValueError, match="lesson must be"):
        reference("04")
    batches = reference("06").every("06/decode_batch")        # a key measured in a loop: every call, in order
    assert [t.batch for t in batches] == [1, 2, 4, 8, 16] and batches[0] == reference("06")["06/decode_batch"]
    with pytest.raises(KeyError, match="no '06/nothing'"):
        reference("06").every("06/nothing")
    # lesson 05 measures each GEMV once: the dtype section's fp32 rows are the sweep's rows (reuse=rotated)
    rotated = {(r.m, r.k): r for r in ref["05/rotated"]}
    assert all(r == rotated[(r.m, r.k)] for r in ref["05/by_dtype"] if r.dtype == "fp32")


def test_the_reference_and_busy_runs_decode_with_the_current_classes():
    """A class renamed or moved under course_lib.measure must take the shipped reference run and the busy recordings
    with it (course_lib/data/reference_runs.json, tests/fixtures/recordings/busy)."""
    import json

    from replay import RECORDINGS

    from course_lib.lessons.claims.reference import reference
    from course_lib.measure.record import decode
    for n in ("05", "06", "07", "08"):
        assert reference(n)
    for path in sorted((RECORDINGS / "busy").glob("*.json")):
        data = json.loads(path.read_text())
        assert data["about"] and not data["fast"]
        for runs in data["results"].values():
            [decode(x) for x in runs]
