"""The one thread policy (course_lib.measure.threads): min(affinity mask, cgroup quota, OMP_NUM_THREADS), or a request;
and its retry rule (course_lib.measure.steady): a noisy timing is retried with fewer threads and longer blocks.

Every host input is injected (a fake file tree, a fake environment, a fake affinity count): no test reads
this machine's core count to decide pass or fail.
"""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.measure import allocator
from course_lib.measure import threads as th
from course_lib.measure.steady import steady
from course_lib.measure.threads import fewer_threads, thread_policy


# --------------------------------------------------------------------------------------------------
# The pure policy
# --------------------------------------------------------------------------------------------------
def test_description_of_the_plain_case():
    p = thread_policy(2, None, None, None)
    assert (p.threads, p.decided_by, p.limit, p.oversubscribed) == (2, "affinity mask", 2, False)
    assert p.description == "2 threads (affinity mask: 2 cores; no cgroup quota; OMP_NUM_THREADS unset)"
    assert str(p) == p.description


@pytest.mark.parametrize("args, kwargs, threads, decided_by, says", [
    ((64, 1.5, None, None), {}, 2, "cgroup quota", "cgroup quota: 1.5 cores, counted as 2"),
    ((64, 0.25, None, None), {}, 1, "cgroup quota", "counted as 1"),
    ((64, 4.0, None, None), {}, 4, "cgroup quota", "cgroup quota: 4 cores, counted as 4"),
    ((8, None, "3", None), {}, 3, "OMP_NUM_THREADS", "OMP_NUM_THREADS=3"),
    ((8, None, "4,2", None), {}, 4, "OMP_NUM_THREADS", "OMP_NUM_THREADS=4,2"),
    ((8, None, " 16 ", None), {}, 8, "affinity mask", "OMP_NUM_THREADS=16"),
    ((8, None, None, None), {"physical_cores": 4}, 4, "physical cores", "physical cores: 4"),
    ((2, 8.0, "2", None), {}, 2, "affinity mask", "affinity mask: 2 cores"),   # a tie goes to the first limit
    ((1, None, None, None), {}, 1, "affinity mask", "1 thread (affinity mask: 1 core;"),
])
def test_the_smallest_limit_decides(args, kwargs, threads, decided_by, says):
    p = thread_policy(*args, **kwargs)
    assert (p.threads, p.decided_by) == (threads, decided_by)
    assert says in p.description
    assert p.description.startswith(f"{threads} thread")


@pytest.mark.parametrize("omp", ["abc", "0", "-2", "1.5", ",", "two"])
def test_an_invalid_omp_num_threads_is_ignored_and_reported(omp):
    p = thread_policy(4, None, omp, None)
    assert (p.threads, p.decided_by) == (4, "affinity mask")
    assert f"OMP_NUM_THREADS={omp!r} ignored" in p.description


def test_a_request_is_honoured_and_oversubscription_is_reported():
    p = thread_policy(2, None, "1", 1)
    assert (p.threads, p.decided_by, p.limit, p.oversubscribed) == (1, "request", 1, False)
    assert p.description.startswith("1 thread, requested (")
    q = thread_policy(2, None, None, 4)
    assert (q.threads, q.limit, q.oversubscribed) == (4, 2, True)
    assert "above the host's limit of 2 (oversubscribed)" in q.description


@given(affinity=st.integers(1, 512), quota=st.none() | st.floats(0.01, 1024),
       omp=st.none() | st.integers(1, 1024).map(str) | st.sampled_from(["", "x", "0", "2,1"]),
       physical=st.none() | st.integers(1, 512), requested=st.none() | st.integers(1, 1024))
def test_threads_is_the_minimum_of_the_limits_or_the_request(affinity, quota, omp, physical, requested):
    p = thread_policy(affinity, quota, omp, requested, physical_cores=physical)
    omp_n = int(omp.split(",")[0]) if omp and omp.split(",")[0].isdigit() and int(omp.split(",")[0]) > 0 else None
    limits = [affinity, physical, omp_n, None if quota is None else max(1, math.ceil(quota - 1e-9))]
    limit = min(x for x in limits if x is not None)
    assert p.limit == limit >= 1
    assert p.threads == (limit if requested is None else requested)
    assert p.oversubscribed == (requested is not None and requested > limit)
    assert p.decided_by == "request" if requested is not None else p.decided_by in th.LIMITS
    assert p.description.startswith(f"{p.threads} thread{'s' if p.threads != 1 else ''}")


@pytest.mark.parametrize("kwargs, error, name", [
    ({"affinity_cores": 0}, ValueError, "affinity_cores"),
    ({"affinity_cores": 2.5}, ValueError, "affinity_cores"),
    ({"affinity_cores": "2"}, TypeError, "affinity_cores"),
    ({"affinity_cores": None}, TypeError, "affinity_cores"),
    ({"affinity_cores": True}, TypeError, "affinity_cores"),
    ({"affinity_cores": 2, "cgroup_quota_cores": 0}, ValueError, "cgroup_quota_cores"),
    ({"affinity_cores": 2, "cgroup_quota_cores": -1.0}, ValueError, "cgroup_quota_cores"),
    ({"affinity_cores": 2, "cgroup_quota_cores": math.inf}, ValueError, "cgroup_quota_cores"),
    ({"affinity_cores": 2, "cgroup_quota_cores": math.nan}, ValueError, "cgroup_quota_cores"),
    ({"affinity_cores": 2, "cgroup_quota_cores": "2"}, TypeError, "cgroup_quota_cores"),
    ({"affinity_cores": 2, "requested": 0}, ValueError, "requested"),
    ({"affinity_cores": 2, "requested": 1.5}, ValueError, "requested"),
    ({"affinity_cores": 2, "requested": "1"}, TypeError, "requested"),
    ({"affinity_cores": 2, "omp_num_threads": 0}, ValueError, "omp_num_threads"),
    ({"affinity_cores": 2, "physical_cores": 0}, ValueError, "physical_cores"),
])
def test_bad_input_names_the_argument(kwargs, error, name):
    with pytest.raises(error, match=name):
        thread_policy(**kwargs)


# --------------------------------------------------------------------------------------------------
# Reading a (fake) host
# --------------------------------------------------------------------------------------------------
def tree(root, files: dict[str, str]):
    for path, text in files.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.mark.parametrize("files, quota", [
    ({}, None),
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "max 100000\n"}, None),
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "150000 100000\n"}, 1.5),
    ({"/sys/fs/cgroup/cpu.max": "200000 100000\n"}, 2.0),                       # no /proc/self/cgroup: the root
    # the tightest quota on the way up counts: the parent's 2 cores, though the leaf has none
    ({"/proc/self/cgroup": "0::/a/b\n", "/sys/fs/cgroup/a/b/cpu.max": "max 100000",
      "/sys/fs/cgroup/a/cpu.max": "200000 100000", "/sys/fs/cgroup/cpu.max": "max"}, 2.0),
    ({"/proc/self/cgroup": "0::/a\n", "/sys/fs/cgroup/a/cpu.max": "garbage"}, None),
    ({"/proc/self/cgroup": "2:cpu,cpuacct:/\n1:memory:/x\n",
      "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000"},
     None),
    ({"/proc/self/cgroup": "1:cpu:/\n", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000",
      "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 0.5),
    ({"/proc/self/cgroup": "1:cpu:/docker/x\n", "/sys/fs/cgroup/cpu/docker/x/cpu.cfs_quota_us": "300000",
      "/sys/fs/cgroup/cpu/docker/x/cpu.cfs_period_us": "100000"}, 3.0),
])
def test_cgroup_quota_from_a_fake_tree(tmp_path, files, quota):
    assert th.cgroup_quota_cores(tree(tmp_path, files)) == quota


def test_the_host_readers_feed_the_rule(tmp_path):
    root = tree(tmp_path, {"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "150000 100000\n"})
    quota = th.cgroup_quota_cores(root)
    p = thread_policy(8, quota, th.omp_num_threads({}))
    assert (p.threads, p.decided_by, p.cgroup_quota_cores) == (2, "cgroup quota", 1.5)
    p = thread_policy(8, quota, th.omp_num_threads({"OMP_NUM_THREADS": "1"}))
    assert (p.threads, p.decided_by) == (1, "OMP_NUM_THREADS")
    p = thread_policy(8, quota, th.omp_num_threads({"OMP_NUM_THREADS": "1"}), 3)
    assert (p.threads, p.decided_by, p.oversubscribed) == (3, "request", True)
    p = thread_policy(2, th.cgroup_quota_cores(tmp_path / "empty"), th.omp_num_threads({"OMP_NUM_THREADS": " "}))
    assert p.description == "2 threads (affinity mask: 2 cores; no cgroup quota; OMP_NUM_THREADS unset)"


def test_the_one_entry_point_applies_the_rule_to_this_host(monkeypatch):
    """timing.thread_policy_for: the host's affinity, quota, physical cores and OMP_NUM_THREADS; None on a GPU."""
    pytest.importorskip("torch")
    from course_lib.measure import sysinfo, timing
    monkeypatch.setattr(th, "affinity_cores", lambda: 8)
    monkeypatch.setattr(th, "cgroup_quota_cores", lambda root="/": None)
    monkeypatch.setattr(sysinfo, "cpu_info", lambda: {"physical_cores": 4})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    p = timing.thread_policy_for()
    assert (p.threads, p.decided_by, p.physical_cores) == (4, "physical cores", 4)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert timing.thread_policy_for().decided_by == "OMP_NUM_THREADS"
    assert timing.thread_policy_for(6, "cpu").oversubscribed is True and timing.thread_count(3, "cpu") == 3
    with pytest.raises(ValueError, match="threads"):
        timing.thread_policy_for(0)


def test_affinity_falls_back_to_cpu_count(monkeypatch):
    monkeypatch.setattr(th.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert th.affinity_cores() == 3

    def missing(pid):
        raise OSError("no affinity here")
    monkeypatch.setattr(th.os, "sched_getaffinity", missing, raising=False)
    monkeypatch.setattr(th.os, "cpu_count", lambda: 6)
    assert th.affinity_cores() == 6
    monkeypatch.setattr(th.os, "cpu_count", lambda: None)
    assert th.affinity_cores() == 1


def test_proc_stat_reads_the_snapshot_or_none(tmp_path):
    assert th.proc_stat(tmp_path) is None
    tree(tmp_path, {"/proc/stat": "cpu  1 2 3 4 5 6 7 8 0 0\n"})
    assert th.proc_stat(tmp_path).startswith("cpu  1 2")


@pytest.mark.parametrize("threads, retry", [(1, None), (2, 1), (3, 1), (8, 4)])
def test_fewer_threads_halves_down_to_one(threads, retry):
    assert fewer_threads(threads) == retry


def test_fewer_threads_rejects_bad_input():
    with pytest.raises(ValueError, match="threads"):
        fewer_threads(0)
    with pytest.raises(TypeError, match="threads"):
        fewer_threads("2")


def test_the_policy_modules_import_no_torch():
    code = "import sys, course_lib.measure.threads, course_lib.measure.steady; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------------------------------
# Retry a noisy timing with fewer threads and longer blocks; interleave compared cases
# --------------------------------------------------------------------------------------------------

TIGHT = [1.00, 1.01, 0.99, 1.00, 1.02]
NOISY = [0.07, 0.07, 0.07, 16.0, 16.0, 0.07, 0.07]       # median 0.07, p90 16: the 2-thread torch.mv case


def no_stat():
    return None


def test_steady_retries_with_fewer_threads_and_longer_blocks_until_reliable():
    calls = []

    def run(threads, min_block):
        calls.append((threads, min_block))
        return TIGHT if threads == 1 else NOISY

    s = steady(run, threads=4, min_block=1e-3, stat=no_stat)
    assert calls == [(4, 1e-3), (2, 4e-3), (1, 1.6e-2)]
    assert (s.threads, s.verdict.verdict, s.retried, s.times) == (1, "reliable", True, tuple(TIGHT))
    assert [a.verdict.verdict for a in s.attempts] == ["noisy", "noisy", "reliable"]


def test_inside_keep_threads_a_retry_keeps_the_thread_count():
    """A calibration predicts a model run with N threads: its retries lengthen the block but keep N."""
    from course_lib.measure.steady import keep_threads
    calls = []

    def run(threads, min_block):
        calls.append((threads, min_block))
        return NOISY if len(calls) < 3 else TIGHT

    with keep_threads():
        s = steady(run, threads=4, min_block=1e-3, stat=no_stat)
    assert calls == [(4, 1e-3), (4, 4e-3), (4, 1.6e-2)] and s.threads == 4 and s.verdict.verdict == "reliable"
    calls.clear()
    s = steady(run, threads=4, min_block=1e-3, stat=no_stat)        # outside the block: fewer threads again
    assert calls[1][0] == 2
    calls.clear()
    steady(run, threads=4, min_block=1e-3, stat=no_stat, fewer=False)
    assert [c[0] for c in calls] == [4, 4, 4]


def test_steady_stops_at_max_attempts_and_reports_the_last_verdict():
    s = steady(lambda t, b: NOISY, threads=1, min_block=1e-3, max_attempts=2, stat=no_stat)
    assert [(a.threads, a.min_block) for a in s.attempts] == [(1, 1e-3), (1, 4e-3)]
    assert s.verdict.verdict == "noisy" and "p90" in s.verdict.reason
    gpu = steady(lambda t, b: TIGHT, threads=None, min_block=1e-3, stat=no_stat)
    assert (gpu.threads, gpu.retried, gpu.verdict.verdict) == (None, False, "reliable")


def test_steady_reads_the_steal_of_each_attempt():
    snapshots = iter(["cpu  0 0 0 0 0 0 0 0\n", "cpu  50 0 0 40 0 0 0 10\n",     # 10 % steal: contended
                      "cpu  50 0 0 40 0 0 0 10\n", "cpu  150 0 0 140 0 0 0 10\n"])  # 0 % steal
    s = steady(lambda t, b: TIGHT, threads=2, min_block=1e-3, stat=lambda: next(snapshots))
    assert [a.verdict.verdict for a in s.attempts] == ["contended", "reliable"]
    assert [a.verdict.steal for a in s.attempts] == [0.1, 0.0]


@pytest.mark.parametrize("kwargs, error, name", [
    ({"run": None}, TypeError, "run"), ({"threads": 0}, ValueError, "threads"),
    ({"min_block": 0}, ValueError, "min_block"), ({"min_block": "1"}, TypeError, "min_block"),
    ({"max_attempts": 0}, ValueError, "max_attempts"), ({"block_growth": 0.5}, ValueError, "block_growth"),
    ({"stat": 3}, TypeError, "stat"), ({"fewer": "yes"}, TypeError, "fewer"),
])
def test_steady_refuses_bad_input(kwargs, error, name):
    args = {"run": lambda t, b: TIGHT, "threads": 1, "min_block": 1e-3, "stat": no_stat} | kwargs
    with pytest.raises(error, match=name):
        steady(**args)


def test_a_noisy_probe_is_timed_again_with_fewer_threads_and_the_result_says_so(monkeypatch):
    """The probes go through steady_timeit: a noisy first attempt (2 threads) is retried with 1 thread and a
    longer block, and the GEMV row records the thread count of the attempt kept."""
    import torch

    from course_lib.measure import probes, steady, timing

    seen = []

    def fake_timeit(calls, device=None, repeats=None, min_block=None, clock=None):
        seen.append((torch.get_num_threads(), min_block))
        per_call = [1e-3, 1e-3, 5e-3, 1e-3, 9e-3] if len(seen) == 1 else [1e-3] * 5
        q1, med, q3 = timing.quartiles(per_call)
        return timing.Timing(med, q1, q3, min(per_call), len(per_call), 1, tuple(per_call))

    monkeypatch.setattr(timing, "timeit", fake_timeit)
    monkeypatch.setattr(steady, "probe_attempts", lambda: 3)
    row = probes.measure_gemv([(64, 64)], ["fp32"], threads=2, device="cpu", progress=False, repeats=5,
                              min_block=1e-3)[0]
    assert [n for n, _ in seen] == [2, 1] and seen[1][1] == 4 * seen[0][1]
    assert row.threads == 1 and row.seconds == 1e-3


def test_fast_mode_probes_make_one_attempt(monkeypatch):
    from course_lib.measure import steady
    monkeypatch.setenv("COURSE_FAST", "1")
    assert steady.probe_attempts() == 1
    monkeypatch.setenv("COURSE_FAST", "0")
    assert steady.probe_attempts() == 3


# --------------------------------------------------------------------------------------------------
# The allocator: a library call leaves it alone; a benchmark's entry point pins it, once; faults counted
# --------------------------------------------------------------------------------------------------
def test_only_a_benchmark_entry_point_pins_the_allocator(monkeypatch):
    """A calibration (which a lesson runs in the learner's kernel) records the allocator as it is and never pins
    it; the benchmarks' command pins it before anything is measured."""
    pytest.importorskip("torch")
    from course_lib.measure import calibrate, validate
    pins = []
    monkeypatch.setattr(allocator, "pin", lambda: pins.append(1))
    fakes = {kind: (lambda key, settings: None) for kind in calibrate.PROBES}
    fakes["cold"] = lambda key, settings: (1e-6, 1e-7)             # no probe runs; the calibration is built
    monkeypatch.setattr(calibrate, "PROBES", fakes)
    cal = calibrate.calibrate(threads=1, fast=True, device="cpu", progress=False)
    assert pins == [] and cal.allocator == allocator.state().description
    assert validate.main(["--threads", "0", "--no-progress"]) == 2 and pins == [1]   # refused after the pin


def test_pin_is_done_once_and_says_what_it_did():
    a = allocator.pin()
    assert a is allocator.pin() is allocator.state() and isinstance(a.pinned, bool) and a.description
    import platform
    if platform.libc_ver()[0] == "glibc":
        # glibc refuses an mmap threshold above its DEFAULT_MMAP_THRESHOLD_MAX: pinned means the value was accepted
        assert a.pinned and f"{allocator.PINNED_MMAP_THRESHOLD // 2**20} MiB" in a.description
    else:
        assert not a.pinned and "system allocator as it is" in a.description


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="minor faults are counted this way on Linux")
def test_minor_faults_count_the_first_touch_of_fresh_pages():
    before = allocator.minor_faults()
    block = bytearray(b"\x01") * (64 * 2**20)                # above the mmap threshold: mapped fresh, written once
    after = allocator.minor_faults()
    assert len(block) == 64 * 2**20
    # 64 MiB is 16,384 pages of 4 KiB, or 32 transparent huge pages of 2 MiB where THP is "always"
    assert isinstance(before, int) and after - before >= 32
