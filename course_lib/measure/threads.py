"""The one CPU thread policy of every measurement (lessons 05-08, exercise set 05, the app, validate, the probes).

Lessons: 05, 06, 07, 08, 09

::

    from course_lib.measure.threads import host_thread_policy, thread_policy
    policy = host_thread_policy()            # reads this host: affinity mask, cgroup quota, OMP_NUM_THREADS
    policy.threads                           # e.g. 2
    policy.description  # "2 threads (affinity mask: 2 cores; no cgroup quota; OMP_NUM_THREADS unset)"
    thread_policy(8, 1.5, None, None)        # pure: ThreadPolicy(threads=2, decided_by='cgroup quota', ...)

**The rule.** A measurement uses ``min(limits)`` threads, where the limits are

* the cores in this process's **affinity mask** (``os.sched_getaffinity``; ``os.cpu_count`` where the
  platform has no affinity call): more threads than cores only time-slice;
* the **cgroup CPU quota**, rounded up to whole cores (cgroup v2 ``cpu.max`` "quota period", cgroup v1
  ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``): a container limited to 1.5 CPUs of a 64-core host gets 2
  threads, not 64. The tightest quota on the way from this process's cgroup up to the root counts;
* the **physical cores**, where the caller knows them (hyper-threads add nothing to a bandwidth-bound loop);
* the user's **OMP_NUM_THREADS**, when it is set to a positive integer (the first entry of a nested list
  such as ``"4,2"``); any other value is ignored, and the description says so.

An **explicit request** (a ``threads=`` argument, or a torch setting the caller passes on) replaces the
automatic choice and is honoured as given; when it exceeds the host's limit the policy is marked
``oversubscribed`` and the description says so.

**Why.** On a 2-core VM shared with other work, ``torch.mv`` on a 1024x1024 matrix with 2 threads had a
median of 72 µs but a p90 of 16 ms; with 1 thread 148 µs and 171 µs. A thread that the OS
deschedules stalls the whole parallel region, so on a busy machine fewer threads than cores are often
faster *and* steadier. ``measure_machine`` there measured matmul at 54 GFLOP/s and copy at 6.8 GB/s with
2 threads, 160 GFLOP/s and 10.7 GB/s with 1. The policy itself does not guess at load (the load
average is no measure of it on a VM): it caps the threads at what the host grants, and
:mod:`course_lib.core.quality` judges the timings that result; a probe that finds its timing noisy
retries with fewer threads (:func:`fewer_threads`).

Every measurement prints :attr:`ThreadPolicy.description` in its header, so a reader sees which limit
decided the count.

This module reads files and the environment only; it imports no torch (the caller applies the count
with ``torch.set_num_threads``). :func:`proc_stat` reads the ``/proc/stat`` snapshot from which
:func:`course_lib.core.quality.read_cpu_steal` computes the CPU steal of an interval.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from course_lib.core.validation import require_count, require_positive

__all__ = ["ThreadPolicy", "thread_policy", "host_thread_policy", "affinity_cores", "cgroup_quota_cores",
           "omp_num_threads", "fewer_threads", "proc_stat", "AllocatorPolicy", "pin_allocator", "minor_faults",
           "PINNED_MMAP_THRESHOLD", "PINNED_TRIM_THRESHOLD"]

#: the names of the limits, in the order they are tried when two give the same count
LIMITS = ("affinity mask", "cgroup quota", "physical cores", "OMP_NUM_THREADS")


@dataclass(frozen=True)
class ThreadPolicy:
    """The thread count a measurement uses, and why.

    ``threads``: the count; ``decided_by``: "affinity mask", "cgroup quota", "physical cores",
    "OMP_NUM_THREADS" or "request"; ``limit``: the host's limit without the request (the minimum of the
    automatic limits); ``oversubscribed``: a request above that limit; ``description``: one line for the
    header of every measurement.
    """

    threads: int
    decided_by: str
    limit: int
    oversubscribed: bool
    affinity_cores: int
    cgroup_quota_cores: float | None
    physical_cores: int | None
    omp_num_threads: str | None
    requested: int | None
    description: str

    def __str__(self) -> str:
        return self.description


def _positive_int(name: str, value, *, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    return require_count(name, value, minimum=1, maximum=10**6)


def _parse_omp(value: str | None) -> int | None:
    """The thread count OMP_NUM_THREADS asks for (first entry of a nested list), None when unset or invalid."""
    if value is None:
        return None
    first = value.strip().split(",")[0].strip()
    if not first.isdigit():
        return None
    n = int(first)
    return n if n >= 1 else None


def thread_policy(affinity_cores: int, cgroup_quota_cores: float | None = None,
                  omp_num_threads: str | int | None = None,
                  requested: int | None = None, *, physical_cores: int | None = None) -> ThreadPolicy:
    """The thread count from the host's limits (pure: every input is passed in).

    ``affinity_cores``: cores in the affinity mask (>= 1); ``cgroup_quota_cores``: the CPU quota in cores
    (``quota / period``, > 0; None: no quota); ``omp_num_threads``: the raw ``OMP_NUM_THREADS`` value
    (None: unset; a value that is not a positive integer is ignored and reported); ``requested``: an
    explicit count (>= 1) that replaces the automatic choice; ``physical_cores``: physical cores when known.
    """
    affinity = _positive_int("affinity_cores", affinity_cores, allow_none=False)
    if cgroup_quota_cores is not None:
        cgroup_quota_cores = require_positive("cgroup_quota_cores", cgroup_quota_cores, minimum=1e-6, maximum=1e6)
    physical = _positive_int("physical_cores", physical_cores)
    requested = _positive_int("requested", requested)
    if omp_num_threads is not None and not isinstance(omp_num_threads, str):
        omp_num_threads = str(_positive_int("omp_num_threads", omp_num_threads))
    omp = _parse_omp(omp_num_threads)

    quota = None if cgroup_quota_cores is None else max(1, math.ceil(cgroup_quota_cores - 1e-9))
    candidates = [("affinity mask", affinity), ("cgroup quota", quota), ("physical cores", physical),
                  ("OMP_NUM_THREADS", omp)]
    decided_by, limit = min(((name, n) for name, n in candidates if n is not None),
                            key=lambda item: (item[1], LIMITS.index(item[0])))
    threads = limit if requested is None else requested
    oversubscribed = requested is not None and requested > limit

    parts = [f"affinity mask: {affinity} core{'s' if affinity != 1 else ''}"]
    parts.append("no cgroup quota" if cgroup_quota_cores is None
                 else f"cgroup quota: {cgroup_quota_cores:g} cores, counted as {quota}")
    if physical is not None:
        parts.append(f"physical cores: {physical}")
    if omp_num_threads is None:
        parts.append("OMP_NUM_THREADS unset")
    elif omp is None:
        parts.append(f"OMP_NUM_THREADS={omp_num_threads!r} ignored (not a positive integer)")
    else:
        parts.append(f"OMP_NUM_THREADS={omp_num_threads.strip()}")
    head = f"{threads} thread{'s' if threads != 1 else ''}"
    if requested is not None:
        decided_by = "request"
        head += (f", requested, above the host's limit of {limit} (oversubscribed)" if oversubscribed
                 else ", requested")
    elif decided_by != "affinity mask":
        head += f", limited by {'' if decided_by == 'OMP_NUM_THREADS' else 'the '}{decided_by}"
    description = f"{head} ({'; '.join(parts)})"
    return ThreadPolicy(threads=threads, decided_by=decided_by, limit=limit, oversubscribed=oversubscribed,
                        affinity_cores=affinity, cgroup_quota_cores=cgroup_quota_cores, physical_cores=physical,
                        omp_num_threads=omp_num_threads, requested=requested, description=description)


# --------------------------------------------------------------------------------------------------
# Reading the host
# --------------------------------------------------------------------------------------------------
def affinity_cores() -> int:
    """Cores in this process's affinity mask (``os.cpu_count()`` where there is no affinity call; at least 1)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, n)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _under(root: Path, absolute: str) -> Path:
    return root / absolute.lstrip("/")


def _cgroup_paths(root: Path) -> tuple[str | None, str | None]:
    """(cgroup v2 path, cgroup v1 cpu-controller path) of this process from /proc/self/cgroup."""
    text = _read(_under(root, "/proc/self/cgroup")) or ""
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _ancestors(path: str | None) -> list[str]:
    """``path`` and every cgroup above it up to the root ("/a/b" -> ["/a/b", "/a", "/"])."""
    parts = [p for p in (path or "/").split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _quota_v2(text: str | None) -> float | None:
    if not text:
        return None
    fields = text.split()
    if len(fields) not in (1, 2) or fields[0] == "max":
        return None
    try:
        quota = float(fields[0])
        period = float(fields[1]) if len(fields) == 2 else 100000.0
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(quota_text: str | None, period_text: str | None) -> float | None:
    try:
        quota, period = float(quota_text), float(period_text)
    except (TypeError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_quota_cores(root: str | os.PathLike = "/") -> float | None:
    """The tightest cgroup CPU quota of this process in cores (quota / period), None when there is none.

    cgroup v2: ``<mount>/<path>/cpu.max`` of this process's cgroup and of every cgroup above it
    ("max" = no quota); cgroup v1: ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of the cpu controller
    (-1 = no quota). In a container the cgroup namespace makes the process's cgroup "/", so the files at
    the mount point are the container's own. ``root``: where the file system starts (tests pass a fake tree).
    """
    base = Path(root)
    v2, v1 = _cgroup_paths(base)
    found = []
    mount2 = _under(base, "/sys/fs/cgroup")
    for cg in _ancestors(v2):
        found.append(_quota_v2(_read(_under(mount2, cg) / "cpu.max")))
    for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"):
        for cg in _ancestors(v1):
            d = _under(_under(base, mount), cg)
            found.append(_quota_v1(_read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")))
    quotas = [q for q in found if q is not None]
    return min(quotas) if quotas else None


def omp_num_threads(environ: Mapping[str, str] | None = None) -> str | None:
    """The raw ``OMP_NUM_THREADS`` value (None: unset or empty)."""
    value = (os.environ if environ is None else environ).get("OMP_NUM_THREADS")
    return value if value and value.strip() else None


def host_thread_policy(requested: int | None = None, *, root: str | os.PathLike = "/",
                       environ: Mapping[str, str] | None = None, physical_cores: int | None = None,
                       affinity: int | None = None) -> ThreadPolicy:
    """:func:`thread_policy` of this host: its affinity mask, cgroup quota and ``OMP_NUM_THREADS``.

    ``requested``: an explicit thread count (None: the automatic choice). ``root``, ``environ`` and
    ``affinity`` replace the file system root, the environment and the affinity count (for tests);
    ``physical_cores``: pass the physical core count when the caller knows it.
    """
    return thread_policy(affinity_cores() if affinity is None else affinity, cgroup_quota_cores(root),
                         omp_num_threads(environ), requested, physical_cores=physical_cores)


def fewer_threads(threads: int) -> int | None:
    """The thread count of a retry after a noisy timing: half of ``threads`` (at least 1); None at 1 thread."""
    threads = _positive_int("threads", threads, allow_none=False)
    return None if threads == 1 else max(1, threads // 2)


def proc_stat(root: str | os.PathLike = "/") -> str | None:
    """The text of ``/proc/stat`` (None where the system has none, e.g. macOS), for
    :func:`course_lib.core.quality.read_cpu_steal`: take one snapshot before and one after a measurement."""
    return _read(_under(Path(root), "/proc/stat"))


# --------------------------------------------------------------------------------------------------
# The memory allocator: the other host setting a measurement pins
# --------------------------------------------------------------------------------------------------
#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: the mmap threshold pinned: glibc's largest (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on 64-bit systems).
#: A block of this size or less comes from the heap; a larger one is mapped fresh, and faulted, every time.
PINNED_MMAP_THRESHOLD = 32 * 2**20
#: the trim threshold pinned (the largest a C int holds): the heap keeps what it has grown to
PINNED_TRIM_THRESHOLD = 2**31 - 1
_ALLOCATOR: "AllocatorPolicy | None" = None


@dataclass(frozen=True)
class AllocatorPolicy:
    """What :func:`pin_allocator` did: ``pinned`` True where glibc's thresholds are now fixed."""

    pinned: bool
    description: str


def pin_allocator() -> AllocatorPolicy:
    """Fix glibc malloc's mmap and trim thresholds for this process (once; later calls return the same policy).

    **Why.** glibc adapts both thresholds to what the program frees, and gives a heap's free top back to
    the operating system once it exceeds the trim threshold. A Hugging Face prefill allocates each layer's
    MLP activations (4 blocks of prompt × MLP width × 4 bytes: 74.8 MB per layer for Qwen2.5-0.5B at 960
    tokens) and frees them before the next layer: depending on the heap's history, every layer gets them
    back from the heap, or maps them fresh and pays a page fault for every 4 KiB page. Measured on the 2-core
    Xeon VM, five identical 960-token prefills of Qwen2.5-0.5B took 0 to 433,000 minor page faults and
    3.4 to 4.4 s (sys time up to 1.2 s); a probe, which frees and reallocates one block in a tight loop,
    almost never pays them, so a prediction from probes missed by the faults' share. With the thresholds
    fixed, a block of a given size behaves alike in the probes and in the engine: up to
    :data:`PINNED_MMAP_THRESHOLD` it comes from a heap that is never trimmed, larger it is mapped and
    faulted each time, in both. The same prefills then took 0 to 6,600 faults.

    Elsewhere (macOS, musl, Windows) nothing is changed and the description says so. The setting is
    process-wide and cannot be undone; it only keeps memory the process has already used.
    """
    global _ALLOCATOR
    if _ALLOCATOR is not None:
        return _ALLOCATOR
    why = "not glibc"
    try:
        import ctypes
        import platform
        if platform.libc_ver()[0] == "glibc":
            libc = ctypes.CDLL(None)
            ok = (libc.mallopt(_M_MMAP_THRESHOLD, PINNED_MMAP_THRESHOLD) == 1
                  and libc.mallopt(_M_TRIM_THRESHOLD, PINNED_TRIM_THRESHOLD) == 1)
            if ok:
                _ALLOCATOR = AllocatorPolicy(True, f"glibc malloc pinned: blocks up to "
                                                   f"{PINNED_MMAP_THRESHOLD // 2**20} MiB from a heap that is "
                                                   f"never trimmed, larger ones mapped fresh (page faults)")
                return _ALLOCATOR
            why = "glibc refused mallopt"
    except (OSError, AttributeError, ValueError) as e:     # no C library to load, or no mallopt in it
        why = f"mallopt unavailable ({type(e).__name__})"
    _ALLOCATOR = AllocatorPolicy(False, f"system allocator as it is ({why}): freed memory may go back to the "
                                        f"system between calls, and its page faults vary from run to run")
    return _ALLOCATOR


def minor_faults() -> int | None:
    """Minor page faults of this process so far (``getrusage``); None where the system does not count them."""
    try:
        import resource
    except ImportError:                 # Windows
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
