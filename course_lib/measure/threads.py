"""The one CPU thread policy of every measurement: how many threads, and why.

Lessons: 05, 06, 07, 08, 09

::

    from course_lib.measure.timing import thread_policy_for   # the entry point: this host, this device
    policy = thread_policy_for()              # affinity mask, cgroup quota, physical cores, OMP_NUM_THREADS
    policy.threads                            # e.g. 2
    policy.description  # "2 threads (affinity mask: 2 cores; no cgroup quota; ...; OMP_NUM_THREADS unset)"

    from course_lib.measure.threads import thread_policy
    thread_policy(8, 1.5, None, None)         # the rule, pure: ThreadPolicy(threads=2, decided_by='cgroup quota', ...)

**The rule.** A measurement uses ``min(limits)`` threads, where the limits are

* the cores in this process's **affinity mask** (``os.sched_getaffinity``; ``os.cpu_count`` where the
  platform has no affinity call): more threads than cores only time-slice;
* the **cgroup CPU quota**, rounded up to whole cores (cgroup v2 ``cpu.max`` "quota period", cgroup v1
  ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``): a container limited to 1.5 CPUs of a 64-core host gets 2
  threads, not 64. The tightest quota on the way from this process's cgroup up to the root counts;
* the **physical cores** (hyper-threads add nothing to a bandwidth-bound loop);
* the user's **OMP_NUM_THREADS**, when it is set to a positive integer (the first entry of a nested list
  such as ``"4,2"``); any other value is ignored, and the description says so.

An **explicit request** (a ``threads=`` argument) replaces the automatic choice and is honoured as given;
when it exceeds the host's limit the policy is marked ``oversubscribed`` and the description says so.

**Why.** A thread that the OS deschedules stalls the whole parallel region, so on a machine shared with
other work fewer threads than cores are often faster *and* steadier. The policy itself does not guess at
load (the load average is no measure of it on a virtual machine): it caps the threads at what the host grants,
:mod:`course_lib.core.quality` judges the timings that result, and a probe that finds its timing noisy
retries with fewer threads (:func:`fewer_threads`, :func:`course_lib.measure.steady.steady`).

Every measurement prints :attr:`ThreadPolicy.description` in its header, so a reader sees which limit
decided the count.

This module reads files and the environment only; it imports no torch. :func:`proc_stat` reads the
``/proc/stat`` snapshot from which :func:`course_lib.core.quality.read_cpu_steal` computes the CPU steal
of an interval.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from course_lib.core.quality import read_cpu_steal
from course_lib.core.validation import require_count, require_positive

__all__ = ["ThreadPolicy", "thread_policy", "affinity_cores", "cgroup_quota_cores", "omp_num_threads",
           "fewer_threads", "proc_stat", "steal_between"]

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


def fewer_threads(threads: int) -> int | None:
    """The thread count of a retry after a noisy timing: half of ``threads`` (at least 1); None at 1 thread."""
    threads = _positive_int("threads", threads, allow_none=False)
    return None if threads == 1 else max(1, threads // 2)


def proc_stat(root: str | os.PathLike = "/") -> str | None:
    """The text of ``/proc/stat`` (None where the system has none, e.g. macOS), for
    :func:`course_lib.core.quality.read_cpu_steal`: take one snapshot before and one after a measurement."""
    return _read(_under(Path(root), "/proc/stat"))


def steal_between(before: str | None, after: str | None) -> float | None:
    """The CPU steal between two :func:`proc_stat` snapshots (a fraction of the interval); None where either is
    missing or the counters do not belong together (another system, or reset)."""
    if not (before and after):
        return None
    try:
        return read_cpu_steal(before, after)
    except ValueError:
        return None
