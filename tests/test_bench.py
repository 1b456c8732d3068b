"""course_lib.measure (timing, probes, machine, model_timing): what is timed and counted.

Never how fast this machine is, nor how large its caches or its free memory are: where a result depends on
the last-level cache or the memory budget, the test injects them (a fake LLC of 1 MiB and of 1 GiB, small
budgets, recorded sysfs cache trees).
"""
from __future__ import annotations

import dataclasses
import math

import pytest

from course_lib import estimate, get_model
from course_lib.core.hardware import HardwareSpec

torch = pytest.importorskip("torch")

from course_lib.measure import device, machine, model_timing, probes, sysinfo, timing  # noqa: E402

MiB, GiB = 2**20, 2**30
#: the LLC and memory budget the timed probes below are given (no host figure decides a test)
LIMITS = dict(llc_bytes=MiB, budget_bytes=64 * MiB)
FAST = dict(repeats=2, min_block=1e-5, progress=False, device="cpu", **LIMITS)


def test_fast_mode_is_on_under_the_test_suite():
    assert device.fast_mode()
    assert all(m <= 1024 for m, _ in probes.default_sizes("cpu"))


def test_gemv_rows_count_bytes_and_flops_exactly():
    table = probes.measure_gemv([(48, 80), 64], ["fp32", "bf16"], threads=1, **FAST)
    assert [(r.m, r.k, r.dtype) for r in table] == [(48, 80, "fp32"), (48, 80, "bf16"), (64, 64, "fp32"),
                                                    (64, 64, "bf16")]
    for r in table:
        b = 4 if r.dtype == "fp32" else 2
        assert r.bytes == (r.m * r.k + r.k + r.m) * b == probes.gemv_bytes(r.m, r.k, r.dtype)
        assert r.flops == 2 * r.m * r.k == probes.gemv_flops(r.m, r.k)
        assert r.matrix_bytes == r.m * r.k * b
        assert r.q1_seconds <= r.seconds <= r.q3_seconds and r.min_seconds <= r.seconds
        assert math.isclose(r.bandwidth, r.bytes / r.seconds) and math.isclose(r.gb_per_s, r.bandwidth / 1e9)
        assert math.isclose(r.gflop_per_s, r.flops / r.seconds / 1e9)
        assert r.spread >= 0 and r.threads == 1 and r.device == "cpu" and r.repeats == 2
        d = r.as_dict()
        assert {"m", "k", "dtype", "bytes", "seconds", "spread", "gb_per_s", "gflop_per_s"} <= set(d)


def test_reuse_takes_a_row_already_measured_instead_of_timing_it_again():
    """Lesson 05's dtype section shows fp32 beside fp16/bf16: its fp32 rows are the sweep's, one measurement each."""
    sweep = probes.measure_gemv([48, 64], ["fp32"], threads=1, **FAST)
    table = probes.measure_gemv([64], ["fp32", "bf16"], threads=1, reuse=sweep, **FAST)
    assert table[0] is sweep[1] and table[1].dtype == "bf16" and table[1] not in sweep
    # a row measured differently (no rotation, another memory budget) is no substitute: timed again
    other = probes.measure_gemv([64], ["fp32"], threads=1, rotate=False, reuse=sweep, **FAST)
    assert other[0] is not sweep[1] and not other[0].rotate
    assert probes.measure_gemv([64], ["fp32"], threads=1, reuse=sweep, **{**FAST, "budget_bytes": 32 * MiB}
                               )[0] is not sweep[1]
    with pytest.raises(TypeError, match="reuse must be a list of GemvResult"):
        probes.measure_gemv([64], ["fp32"], reuse=[{"m": 64}], **FAST)
    with pytest.raises(TypeError, match="reuse must be a list of GemvResult"):
        probes.measure_gemv([64], ["fp32"], reuse=3, **FAST)


def test_a_calibration_reuses_a_copy_and_matmul_measured_with_its_settings_and_says_why_not(monkeypatch):
    """Lessons 06-08 hand their ceilings to the calibration: taken with its settings, they are not timed again."""
    from course_lib.measure import calibrate
    copy = probes.measure_copy_bandwidth(buffer_bytes=16 * MiB, threads=1, repeats=2, min_block=1e-5, device="cpu",
                                         **LIMITS)
    mm = probes.measure_matmul_flops(n=256, threads=1, repeats=2, min_block=1e-5, device="cpu")
    ran = []
    fakes = {kind: (lambda key, settings, kind=kind: ran.append(kind)) for kind in calibrate.PROBES}
    fakes["cold"] = lambda key, settings: (1e-6, 1e-7)             # no other probe runs
    monkeypatch.setattr(calibrate, "PROBES", fakes)

    def cal(**given):
        ran.clear()
        return calibrate.calibrate(threads=1, fast=True, device="cpu", progress=False, **given)
    c = cal(copy=copy, matmul=mm)
    assert c.copy is copy and c.matmul is mm and "copy" not in ran and "matmul" not in ran
    assert c.reuse_problem("copy", copy) == c.reuse_problem("matmul", mm) == ""
    # another thread count (lesson 06's thread retry), size, dtype or device: timed again, and the reason says which
    for kind, other, why in [("matmul", dataclasses.replace(mm, threads=2), "2 threads, the calibration's probes at 1"),
                             ("matmul", dataclasses.replace(mm, n=512), "512×512, the calibration's matmul 256×256"),
                             ("matmul", dataclasses.replace(mm, dtype="bf16"), "bf16"),
                             ("copy", dataclasses.replace(copy, buffer_bytes=32 * MiB), "32 MiB"),
                             ("copy", dataclasses.replace(copy, device="cuda"), "cuda")]:
        c = cal(**{kind: other})
        assert getattr(c, kind) is not other and ran.count(kind) == 1 and why in c.reuse_problem(kind, other)
    full = calibrate.ProbeSettings(torch.device("cpu"), 1, "wall", False, budget_bytes=32 * MiB)
    assert "memory budget" in calibrate.reuse_problem("copy", copy, full)        # another budget: another buffer
    with pytest.raises(TypeError, match="copy must be a CopyResult"):
        cal(copy=mm)
    with pytest.raises(TypeError, match="matmul must be a MatmulResult"):
        cal(matmul=3.0)


def test_rotation_exceeds_four_times_the_last_level_cache():
    llc = 32 * 2**20
    for mb in (1, 4096, 2**20, 16 * 2**20, 256 * 2**20):
        n = probes.rotation_buffers(mb, llc)  # before the MAX_BUFFERS cap of measure_gemv
        assert n * mb > 4 * llc and (n - 1) * mb <= 4 * llc or n == 1 and mb > 4 * llc
        assert probes.rotation_buffers(mb, llc, rotate=False) == 1
    assert probes.rotation_buffers(1000, None) * 1000 > 4 * device.FALLBACK_LLC_BYTES


@pytest.mark.parametrize("llc,budget", [(MiB, 64 * MiB), (GiB, 8 * MiB)], ids=["llc-1MiB", "llc-1GiB-small-budget"])
def test_rotate_flag_sets_the_working_set(llc, budget):
    """The rotation is sized in bytes against the LLC given; where the budget keeps it within 4 x LLC, it says so."""
    limits = dict(repeats=2, min_block=1e-5, progress=False, device="cpu", llc_bytes=llc, budget_bytes=budget)
    rot, = probes.measure_gemv([64], ["fp32"], rotate=True, **limits)
    same, = probes.measure_gemv([64], ["fp32"], rotate=False, **limits)
    assert same.buffers == 1 and same.working_set_bytes == same.matrix_bytes and not same.rotate
    assert rot.llc_bytes == same.llc_bytes == llc and rot.budget_bytes == budget
    assert rot.buffers > 1 and rot.working_set_bytes == rot.buffers * rot.matrix_bytes
    held = rot.working_set_bytes + (rot.m + rot.k) * 4                      # the buffers, x and y
    assert held <= budget and (rot.beyond_cache or budget < held + rot.matrix_bytes)   # stopped by nothing else
    assert rot.beyond_cache == (rot.working_set_bytes > probes.ROTATION_FACTOR * llc)
    assert same.beyond_cache is False and "rotate=False" in same.cache_reason
    if llc == MiB:      # 4 MiB is 257 matrices of 16 KiB: rotated beyond the cache
        assert rot.buffers == probes.rotation_buffers(rot.matrix_bytes, llc) == 257 and rot.beyond_cache
        assert "beyond 4 × the 1 MiB last-level cache" in rot.cache_reason
    else:               # 4 GiB would be 262,145 matrices: the 8 MiB budget holds 510 of them, and the row says so
        assert rot.buffers == (budget - 2 * 64 * 4) // rot.matrix_bytes == 511
        assert rot.beyond_cache is False
        assert "below 4 × the 1 GiB last-level cache (4 GiB)" in rot.cache_reason
        assert "memory budget 8 MiB" in rot.cache_reason and "allows no more" in rot.cache_reason
    assert rot.as_dict()["beyond_cache"] == rot.beyond_cache and rot.as_dict()["cache_reason"] == rot.cache_reason


def test_rotation_plan_is_sized_in_bytes_up_to_the_budget():
    item = 16 * 2**10
    full = probes.rotation_plan(item, MiB, GiB)
    assert full.buffers == full.wanted_buffers == 257 and full.beyond_cache and full.working_set_bytes <= GiB
    short = probes.rotation_plan(item, GiB, 100 * MiB, reserve_bytes=MiB)
    assert short.buffers == (99 * MiB) // item and short.working_set_bytes <= 99 * MiB < short.working_set_bytes + item
    assert short.beyond_cache is False and "memory budget 100 MiB" in short.cache_reason
    capped = probes.rotation_plan(item, GiB, 64 * GiB)                     # arithmetic only: nothing is allocated
    assert capped.buffers == probes.MAX_BUFFERS < capped.wanted_buffers and capped.beyond_cache is False
    assert f"{probes.MAX_BUFFERS:,}" in capped.cache_reason and "larger matrix" in capped.cache_reason
    big = probes.rotation_plan(5 * GiB, GiB, 8 * GiB)                        # one matrix beyond 4 x LLC is enough
    assert big.buffers == 1 and big.beyond_cache
    unknown = probes.rotation_plan(item, None, 2 * GiB)
    assert unknown.beyond_cache is None and "did not report" in unknown.cache_reason
    assert unknown.buffers * item > 4 * device.FALLBACK_LLC_BYTES           # sized against the assumed LLC
    with pytest.raises(ValueError, match="memory budget"):
        probes.rotation_plan(2 * MiB, MiB, 3 * MiB, reserve_bytes=2 * MiB)


def test_rotation_buffer_count_and_copies():
    def buffers(item, llc, rotate, budget):
        return probes.rotation_plan(item, llc, budget, rotate).buffers
    assert buffers(1000, 2**20, True, 10**12) == probes.rotation_buffers(1000, 2**20)
    assert buffers(1000, 2**20, False, 10**12) == 1
    assert buffers(1000, 2**40, True, 10**12) == probes.MAX_BUFFERS      # the object limit
    assert buffers(1000, 2**20, True, 5000) == 5                          # the budget
    assert buffers(1000, 2**20, True, 1500) == 1                          # at least one
    first = torch.arange(6.0).view(2, 3)
    copies = probes.rotated_copies(first, 3)
    assert len(copies) == 3 and all(torch.equal(c, first) for c in copies)
    assert len({c.data_ptr() for c in copies}) == 3 and copies[0] is first              # distinct memory, no spare
    assert probes.rotated_copies(first, 1)[0] is first


@pytest.mark.parametrize("llc,budget,beyond", [(MiB, 64 * MiB, True), (GiB, 2 * MiB, False)])
def test_every_rotating_probe_uses_the_one_rotation(llc, budget, beyond):
    kv = probes.measure_kv_read(2, 3, 16, 50, threads=1, device="cpu", repeats=1, min_block=1e-5,
                                llc_bytes=llc, budget_bytes=budget)
    lin = probes.measure_linear(1, 40, 24, threads=1, device="cpu", repeats=1, min_block=1e-5,
                                llc_bytes=llc, budget_bytes=budget)
    for r, item in ((kv, kv.bytes), (lin, 40 * 24 * 4)):
        assert r.llc_bytes == llc and r.budget_bytes == budget and r.working_set_bytes == r.buffers * item
        assert r.beyond_cache is beyond and r.working_set_bytes <= budget
        if beyond:
            assert r.buffers == probes.rotation_buffers(item, llc) and "beyond" in r.cache_reason
        else:
            assert "memory budget 2 MiB" in r.cache_reason


def test_thread_count_is_fixed_and_restored(monkeypatch):
    before = torch.get_num_threads()
    seen = []
    original = timing.time_block

    def spy(*args):
        seen.append(torch.get_num_threads())
        return original(*args)

    monkeypatch.setattr(timing, "time_block", spy)
    probes.measure_gemv([32], ["fp32"], threads=1, **FAST)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before


def test_copy_counts_read_and_write():
    c = probes.measure_copy_bandwidth(buffer_bytes=1 << 20, repeats=2, min_block=1e-5, device="cpu",
                                      llc_bytes=MiB // 8, budget_bytes=64 * MiB)
    assert c.counted == "read+write" and c.bytes == 2 * c.buffer_bytes == 2 << 20
    assert math.isclose(c.bandwidth, c.bytes / c.seconds) and c.q1_seconds <= c.seconds <= c.q3_seconds
    assert c.working_set_bytes == 2 * MiB and c.beyond_cache                   # source + destination > 4 x 128 KiB
    with pytest.raises(ValueError, match="memory budget"):
        probes.measure_copy_bandwidth(buffer_bytes=8 * MiB, device="cpu", llc_bytes=MiB, budget_bytes=8 * MiB)


def test_copy_buffer_stays_within_the_budget_and_says_so():
    c = probes.measure_copy_bandwidth(repeats=1, min_block=1e-5, device="cpu", llc_bytes=GiB, budget_bytes=16 * MiB)
    assert c.buffer_bytes == 8 * MiB and c.beyond_cache is False                # half the budget each way
    assert "memory budget 16 MiB" in c.cache_reason and "below 4 × the 1 GiB" in c.cache_reason


def test_matmul_counts_two_n_cubed():
    r = probes.measure_matmul_flops(n=32, dtype="fp32", repeats=2, min_block=1e-5, device="cpu")
    assert r.flops == 2 * 32**3 and math.isclose(r.flop_rate, r.flops / r.seconds)
    auto = probes.measure_matmul_flops(dtype="fp32", repeats=1, min_block=1e-5, device="cpu", max_call_seconds=1e-9)
    assert auto.n == 256  # a tiny time limit keeps the starting size


#: the Intel Xeon VM of issue 13 (2 cores, one 260 MiB L3): cpu0's caches as recorded in its profile
INTEL_VM_CPU0 = {"index0": {"level": "1", "type": "Data", "size": "48K", "shared_cpu_list": "0"},
                 "index1": {"level": "1", "type": "Instruction", "size": "32K", "shared_cpu_list": "0"},
                 "index2": {"level": "2", "type": "Unified", "size": "2048K", "shared_cpu_list": "0"},
                 "index3": {"level": "3", "type": "Unified", "size": "266240K", "shared_cpu_list": "0-1"}}


def _private_and_shared(cpus, l1d, l2, l3, l3_shared):
    """A sysfs tree of ``cpus``: private L1d/L1i/L2 per CPU, an L3 shared by the CPU list ``l3_shared(cpu)``."""
    return {cpu: {"index0": {"level": "1", "type": "Data", "size": l1d, "shared_cpu_list": str(cpu)},
                  "index1": {"level": "1", "type": "Instruction", "size": "32K", "shared_cpu_list": str(cpu)},
                  "index2": {"level": "2", "type": "Unified", "size": l2, "shared_cpu_list": str(cpu)},
                  "index3": {"level": "3", "type": "Unified", "size": l3, "shared_cpu_list": l3_shared(cpu)}}
            for cpu in cpus}


SYSFS_TREES = {
    # the machine this course was developed on: one 300 MiB L3 shared by cpus 0-1
    "dev-300MiB": _private_and_shared([0, 1], "48K", "2048K", "307200K", lambda c: "0-1"),
    # the Intel VM: cpu0 as recorded, cpu1 the same with its own private caches
    "intel-vm-260MiB": {0: INTEL_VM_CPU0, 1: {i: {**e, "shared_cpu_list": "1" if e["shared_cpu_list"] == "0"
                                                 else e["shared_cpu_list"]} for i, e in INTEL_VM_CPU0.items()}},
    # two sockets of 4 cores, each with its own 32 MiB L3
    "two-socket-2x32MiB": _private_and_shared(range(8), "32K", "1024K", "32768K",
                                              lambda c: "0-3" if c < 4 else "4-7"),
}


def _write_sysfs(root, tree):
    for cpu, indices in tree.items():
        for index, files in indices.items():
            d = root / f"cpu{cpu}" / "cache" / index
            d.mkdir(parents=True)
            for name, text in files.items():
                (d / name).write_text(text + "\n")
    return root


@pytest.mark.parametrize("tree,cpus,llc,l3", [
    ("dev-300MiB", {0, 1}, 300 * MiB, 300 * MiB),
    ("dev-300MiB", {1}, 300 * MiB, 300 * MiB),                      # one core still sees the whole shared L3
    ("intel-vm-260MiB", {0, 1}, 260 * MiB, 260 * MiB),
    ("two-socket-2x32MiB", {0, 1}, 32 * MiB, 32 * MiB),             # pinned to one socket: its L3 only
    ("two-socket-2x32MiB", {4, 5, 6, 7}, 32 * MiB, 32 * MiB),
    ("two-socket-2x32MiB", {2, 5}, 64 * MiB, 32 * MiB),             # one core on each socket: both L3s
    ("two-socket-2x32MiB", None, 64 * MiB, 32 * MiB),               # no affinity known: every CPU of the tree
])
def test_llc_is_the_last_level_the_cores_in_use_share(monkeypatch, tmp_path, tree, cpus, llc, l3):
    root = _write_sysfs(tmp_path, SYSFS_TREES[tree])
    if cpus is None:
        monkeypatch.setattr(device, "cpus_in_use", lambda: None)
    sizes = device.cache_sizes("cpu", sysfs_root=root, cpus=cpus)
    assert sizes["LLC"] == llc and sizes["L3"] == l3
    assert sizes["L1i"] == 32 * 2**10 and sizes["L2"] in (2 * MiB, MiB)
    assert device.last_level_cache_bytes("cpu", sysfs_root=root, cpus=cpus) == llc
    l3s = [c for c in sysinfo.sysfs_cache_instances(root, device.cpus_in_use() if cpus is None else cpus)
           if c["level"] == 3]
    assert sum(c["size_bytes"] for c in l3s) == llc and len({c["cpus"] for c in l3s}) == len(l3s)   # once each


def test_the_system_report_counts_every_cache_instance_of_the_same_sysfs_tree(monkeypatch, tmp_path):
    """sysinfo.cache_info (the environment report) reads sysfs through the same reader as cache_sizes: every CPU of
    the tree, one entry per level and type with its instances."""
    monkeypatch.setattr(sysinfo, "SYSFS_CPU", _write_sysfs(tmp_path, SYSFS_TREES["two-socket-2x32MiB"]))
    caches = {(c["level"], c["type"]): (c["size_bytes"], c["instances"]) for c in sysinfo.cache_info()}
    assert caches[(3, "Unified")] == (32 * MiB, 2) and caches[(2, "Unified")] == (MiB, 8)
    assert caches[(1, "Data")] == (32 * 2**10, 8)


def test_sysfs_tree_without_caches_reports_none(tmp_path):
    (tmp_path / "cpu0").mkdir()
    assert device.cache_sizes("cpu", sysfs_root=tmp_path, cpus={0}) == {}
    assert device.last_level_cache_bytes("cpu", sysfs_root=tmp_path, cpus={0}) is None
    assert sysinfo.parse_cpu_list("0-3,8, 10-11") == {0, 1, 2, 3, 8, 10, 11}
    for bad in ("3-1", "a", "1,,2"):
        with pytest.raises(ValueError, match="cpu list"):
            sysinfo.parse_cpu_list(bad)


@pytest.mark.parametrize("reported,expected", [
    ([{"level": 1, "type": "Data", "size_bytes": 32 << 10, "instances": 8},
      {"level": 1, "type": "Instruction", "size_bytes": 32 << 10, "instances": 8},
      {"level": 2, "type": "Unified", "size_bytes": 1 << 20, "instances": 8},
      {"level": 3, "type": "Unified", "size_bytes": 32 << 20, "instances": 2}],
     {"L1d": 32 << 10, "L1i": 32 << 10, "L2": 1 << 20, "L3": 32 << 20, "LLC": 64 << 20}),   # two L3 slices
    ([{"level": 2, "type": "Unified", "size_bytes": 4 << 20, "instances": None}], {"L2": 4 << 20, "LLC": 4 << 20}),
    ([], {}),                                                                                 # the OS says nothing
])
def test_without_sysfs_the_fallback_sums_the_last_level(monkeypatch, tmp_path, reported, expected):
    """lscpu / macOS sysctl do not say which CPUs share a cache: their last level is summed over its instances."""
    monkeypatch.setattr(sysinfo, "SYSFS_CPU", tmp_path)         # an empty tree: no sysfs here
    monkeypatch.setattr(sysinfo, "cache_info", lambda: reported)
    assert device.cache_sizes("cpu") == expected
    assert device.last_level_cache_bytes("cpu") == expected.get("LLC")


def test_memory_budget_is_a_share_of_the_available_memory(monkeypatch):
    monkeypatch.setattr(device, "available_memory", lambda dev=None: (10 * GiB, "available memory"))
    assert device.memory_budget("cpu", fast=False) == int(10 * GiB * device.MEMORY_BUDGET_FRACTION)
    assert device.memory_budget("cpu", fast=True) == device.FAST_MEMORY_BUDGET_BYTES
    budget, note = device.memory_budget_note("cpu", fast=False)
    assert "10 GiB" in note and "available memory" in note
    assert "COURSE_FAST" in device.memory_budget_note("cpu", fast=True)[1]
    monkeypatch.setattr(device, "available_memory", lambda dev=None: (100 * MiB, "available memory"))
    assert device.memory_budget("cpu", fast=True) == int(100 * MiB * device.MEMORY_BUDGET_FRACTION)


def test_a_container_memory_limit_caps_the_available_memory(monkeypatch, tmp_path):
    v2, v1, none = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    (v1 / "memory").mkdir(parents=True)
    v2.mkdir()
    none.mkdir()
    (v2 / "memory.max").write_text(f"{2 * GiB}\n")
    (v2 / "memory.current").write_text(f"{GiB // 2}\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text(f"{GiB}\n")
    (v1 / "memory" / "memory.usage_in_bytes").write_text(f"{GiB // 4}\n")
    (none / "memory.max").write_text("max\n")
    (none / "memory.current").write_text("123\n")
    assert device.cgroup_memory_room(v2) == 3 * GiB // 2 and device.cgroup_memory_room(v1) == 3 * GiB // 4
    assert device.cgroup_memory_room(none) is None and device.cgroup_memory_room(tmp_path / "absent") is None
    monkeypatch.setattr(device, "_meminfo_available", lambda: 20 * GiB)
    monkeypatch.setattr(device, "cgroup_memory_room", lambda root=None: 3 * GiB // 2)
    assert device.available_memory("cpu") == (3 * GiB // 2, "memory the container's limit leaves")
    monkeypatch.setattr(device, "cgroup_memory_room", lambda root=None: None)
    assert device.available_memory("cpu") == (20 * GiB, "available memory")


def test_full_sweep_goes_past_four_times_the_llc_as_far_as_memory_allows(monkeypatch):
    monkeypatch.setattr(probes, "fast_mode", lambda: False)
    for llc in (32 * MiB, 260 * MiB, 300 * MiB, GiB):
        sizes = [n for n, _ in probes.default_sizes("cpu", full=True, llc_bytes=llc, budget_bytes=64 * GiB)]
        assert sizes == sorted(sizes) and 4 * sizes[-1] ** 2 > 4 * llc            # one fp32 matrix beyond 4 x LLC
        assert 4 * sizes[-2] ** 2 <= 4 * llc or sizes[-1] == 8192                 # and no further
        assert sizes[-1] == probes.beyond_cache_size(llc) or sizes[-1] == 8192
        short = [n for n, _ in probes.default_sizes("cpu", full=True, llc_bytes=llc, budget_bytes=600 * MiB)]
        assert all(4 * (n * n + 2 * n) <= 600 * MiB for n in short) and short == sizes[:len(short)]
    assert probes.beyond_cache_size(300 * MiB) == 18432 and probes.beyond_cache_size(260 * MiB) == 17408
    default = [n for n, _ in probes.default_sizes("cpu", llc_bytes=GiB, budget_bytes=64 * GiB)]
    assert default[-1] == 8192                                                     # the default sweep is unchanged
    assert probes.default_sizes("cpu", llc_bytes=MiB, budget_bytes=1024) == [(256, 256)]   # the smallest stays
    with pytest.raises(TypeError, match="full"):
        probes.default_sizes("cpu", full="yes")


def _row(dtype, seconds, m=64, k=64):
    b = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
    return probes.GemvResult(m=m, k=k, dtype=dtype, device="cpu", element_bytes=b, bytes=(m * k + m + k) * b,
                            flops=2 * m * k, seconds=seconds, q1_seconds=seconds, q3_seconds=seconds,
                            min_seconds=seconds, repeats=1, number=1, rotate=True, buffers=1,
                            working_set_bytes=m * k * b, llc_bytes=None, threads=1)


def test_probe_reports_every_dtype_and_fp32_is_always_fast():
    found = probes.probe_dtypes("cpu", size=64, **LIMITS)
    assert [p.dtype for p in found] == list(probes.DTYPES)
    fp32 = found[0]
    assert fp32.fast and fp32.relative_to_fp32 == 1.0
    for p in found[1:]:
        assert p.fast == (p.relative_to_fp32 >= probes.FAST_FRACTION)
        assert ("no fast kernel" in p.note) != p.fast


def _machine():
    table = probes.GemvTable([_row("fp32", 2e-4, 1024, 1024), _row("fp32", 1e-7)])
    copy = probes.CopyResult(buffer_bytes=10**8, bytes=2 * 10**8, counted="read+write", seconds=0.01,
                            q1_seconds=0.01, q3_seconds=0.01, repeats=1, device="cpu", threads=1)
    mm = {d: probes.MatmulResult(n=100, dtype=d, flops=2 * 10**6, seconds=1e-5, q1_seconds=1e-5, q3_seconds=1e-5,
                                repeats=1, device="cpu", threads=1) for d in ("fp32", "fp16")}
    return machine.MachineMeasurements(device="cpu", device_name="test CPU", threads=1, caches={}, llc_bytes=None,
                                     copy=copy, matmul=mm, gemv=table, capacity_bytes=16 * 10**9)


def test_this_machine_is_a_hardware_spec_the_estimator_uses():
    m = _machine()
    hw = machine.this_machine(m)
    assert isinstance(hw, HardwareSpec)
    big = m.gemv.largest("fp32")
    assert big.m == 1024 and hw.bandwidth == big.bandwidth            # auto: the largest rotated GEMV
    assert machine.this_machine(m, bandwidth="copy").bandwidth == 2e10   # 2e8 bytes in 0.01 s
    assert math.isclose(hw.flops("fp32"), 2e11) and hw.capacity == 16e9
    assert math.isclose(hw.measured["copy_GBps"], 20.0)
    e = estimate(get_model("qwen3-0.6b"), hw, prompt_tokens=10, new_tokens=3, precision="fp32")
    assert e.decode_bound == "memory"
    assert math.isclose(e.tpot_first, e.decode_first.bytes / hw.bandwidth)
    m.gemv = probes.GemvTable()
    assert machine.this_machine(m).bandwidth == 2e10                    # no GEMV rows: the copy ceiling
    with pytest.raises(ValueError, match="gemv"):
        machine.this_machine(m, bandwidth="gemv")


@pytest.mark.parametrize("llc,budget", [(MiB, 16 * MiB), (GiB, 16 * MiB)], ids=["llc-1MiB", "llc-1GiB"])
def test_measure_machine_end_to_end_in_fast_mode(llc, budget):
    m = machine.measure_machine(device="cpu", threads=1, gemv_sizes=[64], matmul_dtypes=["fp32"], progress=False,
                                llc_bytes=llc, budget_bytes=budget)
    hw = machine.this_machine(m)
    assert hw.bandwidth > 0 and set(hw.peak_flops) == {"fp32"} and m.gemv[0].m == 64
    d = m.as_dict()
    assert d["copy"]["counted"] == "read+write" and d["llc_bytes"] == llc and d["budget_bytes"] == budget
    assert m.copy.budget_bytes == m.gemv[0].budget_bytes == budget and m.gemv[0].llc_bytes == llc
    assert d["beyond_cache"] == m.beyond_cache and d["cache_reason"] == m.cache_reason
    if llc == MiB:
        assert m.beyond_cache is True and m.copy.beyond_cache and m.gemv[0].beyond_cache
        assert "read memory" in m.cache_reason
    else:   # 16 MiB cannot exceed 4 GiB: both measurements say so, and the summary names them
        assert m.beyond_cache is False and m.copy.beyond_cache is False and m.gemv[0].beyond_cache is False
        assert m.cache_reason.startswith("2 of 2 measurements (the copy, GEMV 64 × 64 fp32)")
        assert "memory budget 16 MiB" in m.cache_reason
        assert hw.bandwidth == m.copy.bandwidth                 # no GEMV row beyond the cache to take it from
    with pytest.raises(TypeError, match="full"):
        machine.measure_machine(device="cpu", full=1)


def test_progress_bar_is_text_under_test(capsys):
    probes.measure_gemv([16], ["fp32"], repeats=1, min_block=1e-5, device="cpu", progress=True, **LIMITS)
    err = capsys.readouterr().err
    assert "GEMV" in err and "100%" in err


def test_table_helpers_and_display():
    t = probes.GemvTable([_row("fp32", 1e-6), _row("bf16", 1e-6, 128, 128)])
    assert t.where(dtype="bf16")[0].m == 128 and t.largest().m == 128 and t.largest("fp32").m == 64
    md = t._repr_markdown_()
    assert md.count("\n") == 3 and "| 64 × 64 | fp32 |" in md
    assert md.splitlines()[2].endswith("| unknown |")                   # the rows' LLC is not known
    with pytest.raises(TypeError, match="unknown field"):
        t.where(colour="red")
    with pytest.raises(ValueError, match="no rows"):
        t.largest("fp16")


@pytest.mark.parametrize("kwargs,err,match", [
    ({"sizes": [0]}, ValueError, "size"),
    ({"sizes": [(4, 4, 4)]}, ValueError, r"\(m, k\)"),
    ({"sizes": "big"}, TypeError, "sizes"),
    ({"sizes": []}, ValueError, "at least one"),
    ({"dtypes": ["fp64"]}, ValueError, "dtype"),
    ({"repeats": 0}, ValueError, "repeats"),
    ({"threads": 0}, ValueError, "threads"),
    ({"rotate": "yes"}, TypeError, "rotate"),
    ({"device": "tpu"}, ValueError, "device"),
    ({"device": 3}, TypeError, "device"),
])
def test_bad_input_gets_one_clear_error(kwargs, err, match):
    args = {"sizes": [16], "dtypes": ["fp32"], "progress": False, "device": "cpu", **LIMITS, **kwargs}
    with pytest.raises(err, match=match):
        probes.measure_gemv(**args)


def test_results_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _row("fp32", 1.0).seconds = 2.0


# --- whole-model timings (prefill, decode at contexts and batch) and the op-overhead probe ------------------
def _tiny_lm(batch=1, max_seq=64):
    from course_lib.measure.tinylm import TinyLM
    spec = get_model("llama-3-8b").scaled(layers=1, hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=64,
                                          vocab=50)
    return TinyLM(spec, seed=0, batch=batch, max_seq=max_seq, device="cpu")


def test_measure_prefill_times_each_length_from_an_empty_cache():
    lm = _tiny_lm()
    rows = model_timing.measure_prefill(lm, [4, 9], repeats=3, threads=1, warmup=1)
    assert [r.prompt_tokens for r in rows] == [4, 9]
    for r in rows:
        assert r.repeats == 3 and r.threads == 1 and r.batch == 1
        assert r.q1_seconds <= r.seconds <= r.q3_seconds and r.spread >= 0
        assert math.isclose(r.tokens_per_second, r.prompt_tokens / r.seconds)
    assert lm.length == 9  # the last prefill filled the cache from empty


def test_measure_decode_batch_and_contexts():
    lm = _tiny_lm(batch=2)
    t = model_timing.measure_decode(lm, prompt_tokens=4, steps=3, warmup=1, threads=1)
    assert t.batch == 2 and t.steps == 3 and t.first_context == 6 and t.last_context == 8
    assert math.isclose(t.tokens_per_second, 2 / t.seconds)
    one = model_timing.measure_decode(lm, prompt_tokens=4, steps=3, warmup=1, threads=1, batch=1)
    assert one.batch == 1 and lm.length == 4 + 1 + 3
    rows = model_timing.measure_decode_contexts(lm, [10, 30], steps=4, threads=1)
    assert [(r.first_context, r.last_context) for r in rows] == [(11, 14), (31, 34)]
    assert all(r.q1_seconds <= r.seconds <= r.q3_seconds and r.steps == 4 for r in rows)
    with pytest.raises(ValueError, match="batch=3"):
        model_timing.measure_decode(lm, batch=3)
    with pytest.raises(ValueError, match="max_seq"):
        model_timing.measure_decode_contexts(lm, [60], steps=8)
    with pytest.raises(ValueError, match="contexts"):
        model_timing.measure_decode_contexts(lm, [])
    with pytest.raises(TypeError, match="contexts"):
        model_timing.measure_decode_contexts(lm, "long")
    with pytest.raises(ValueError, match="prompt_lengths"):
        model_timing.measure_prefill(lm, [0])
    with pytest.raises(ValueError, match="max_seq"):
        model_timing.measure_prefill(lm, [65])
    with pytest.raises(TypeError, match="TinyLM"):
        model_timing.measure_prefill("model", [4])


def test_op_overhead_reports_every_kind():
    r = probes.measure_op_overhead(threads=1, device="cpu", repeats=3, min_block=1e-4, cold=False)
    assert set(r.per_kind) == set(probes.OVERHEAD_KINDS)
    assert all(v > 0 for v in r.per_kind.values())
    assert math.isclose(r.seconds, (r.per_kind["elementwise"] + r.per_kind["matmul"]) / 2)
    assert r.q1_seconds <= r.q3_seconds and r.threads == 1 and r.device == "cpu"
    assert math.isclose(r.microseconds, r.seconds * 1e6)
    assert r.cold_seconds is None and r.cold_factor is None  # cold run not asked for below
    c = probes.measure_op_overhead(threads=1, device="cpu", repeats=1, min_block=1e-5, cold=True, flush_bytes=1 << 20,
                                  cold_runs=3)
    assert c.cold_seconds > 0 and c.cold_view_seconds > 0 and c.flush_bytes == 1 << 20 and c.cold_runs == 3
    assert c.cold_q1_seconds <= c.cold_seconds <= c.cold_q3_seconds
    assert math.isclose(c.cold_factor, c.cold_seconds / c.seconds)
    with pytest.raises(TypeError, match="cold"):
        probes.measure_op_overhead(cold="yes")


def test_linear_and_kv_read_probes_count_bytes_exactly():
    r = probes.measure_linear(3, 40, 24, threads=1, device="cpu", repeats=2, min_block=1e-5, rotate=False, **LIMITS)
    assert r.flops == 2 * 3 * 40 * 24 and r.bytes == (40 * 24 + 3 * 24 + 3 * 40) * 4 and r.buffers == 1
    assert math.isclose(r.flop_rate, r.flops / r.seconds) and math.isclose(r.bandwidth, r.bytes / r.seconds)
    assert r.beyond_cache is False and "rotate=False" in r.cache_reason
    kv = probes.measure_kv_read(2, 3, 16, 50, threads=1, device="cpu", repeats=2, min_block=1e-5, **LIMITS)
    assert kv.bytes == 2 * 2 * 50 * 16 * 4 and kv.buffers > 1 and math.isclose(kv.bandwidth, kv.bytes / kv.seconds)
    with pytest.raises(ValueError, match="context"):
        probes.measure_kv_read(context=0)
    with pytest.raises(ValueError, match="tokens"):
        probes.measure_linear(0, 4, 4)


def test_quartiles_is_one_definition():
    assert timing.quartiles([3.0]) == (3.0, 3.0, 3.0)
    assert timing.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    t = timing.timeit([lambda: None], "cpu", repeats=5, min_block=1e-5)
    assert t.q1 <= t.median <= t.q3 and t.minimum <= t.median and t.repeats == 5
    with pytest.raises(ValueError, match="at least one"):
        timing.quartiles([])
    with pytest.raises(ValueError, match="times"):
        timing.quartiles([1.0, -1.0])


def test_clock_is_passed_explicitly(monkeypatch):
    ticks = iter(range(10**6))
    monkeypatch.setitem(timing.CLOCKS, "process", lambda: float(next(ticks)))
    with timing.Stopwatch("cpu", threads=1, clock="process") as sw:
        seconds, out = sw.time(lambda: 7)
    assert (seconds, out) == (1.0, 7)                       # read the fake clock, not the wall
    assert timing.clock_name() == "wall"                    # nothing global changed
    t = timing.timeit([lambda: None], "cpu", repeats=2, min_block=1e-9, clock="process")
    assert t.median == 1.0 and t.number == 1                # one tick per block of one call
    with pytest.raises(ValueError, match="clock"):
        timing.timeit([lambda: None], "cpu", clock="sundial")


def test_process_clock_is_scoped_and_checked():
    assert timing.clock_name() == "wall"
    with timing.use_clock("process"):
        assert timing.clock_name() == "process"
        lm = _tiny_lm()
        t = model_timing.measure_decode(lm, prompt_tokens=3, steps=2, warmup=0, threads=1)
        assert t.seconds > 0
    assert timing.clock_name() == "wall"
    with pytest.raises(ValueError, match="clock"):
        with timing.use_clock("sundial"):
            pass
