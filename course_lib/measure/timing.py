"""How the course times things: clocks, the CPU thread count, timeit, Stopwatch.

Lessons: 05, 06, 07, 08, 09

    from course_lib.measure.timing import Stopwatch, quartiles, timeit
    with Stopwatch("cpu", threads=1) as sw:          # lesson 07's cache measurements
        seconds, logits = sw.time(lm.prefill, ids)
    q1, median, q3 = quartiles(times)
    t = timeit([fn], "cpu")                          # per-call seconds: t.median, t.q1, t.q3

Every probe (:mod:`course_lib.measure.probes`) and model timing (:mod:`~course_lib.measure.model_timing`)
times through this module, with the care a benchmark needs:

* **warm-up** before timing (first calls allocate, load kernels, fault pages in);
* **synchronisation**: on a GPU the kernels are timed with CUDA events and the host waits for them;
* **enough calls per timed block** (calibrated like ``timeit``) that the clock's resolution and the
  timer call itself do not matter, and **repeats** summarised by the median and the interquartile
  range (robust against the odd slow run);
* **a fixed CPU thread count** (:class:`Threads`; the previous value is restored).

**Clocks.** CPU work is timed with the clock named by the ``clock`` argument of each timing function:
``"wall"`` (elapsed time, what a user waits) or ``"process"`` (CPU seconds of this process: time the OS
gave to other programs does not count; meaningful single-threaded only). ``clock=None`` means
:attr:`SETTINGS.clock <TimingSettings.clock>`, ``"wall"`` unless changed inside a :func:`use_clock`
block. GPU timings use CUDA events whatever the clock.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from course_lib.core.validation import (require_choice, require_count, require_list, require_nonnegative,
                                        require_positive)
from course_lib.measure.device import fast_mode, resolve_device

__all__ = ["CLOCKS", "TimingSettings", "SETTINGS", "use_clock", "clock_name", "clock_function", "Threads",
           "thread_policy_for", "thread_count", "repeat_settings", "sync", "time_block",
           "Timing", "timeit", "quartiles", "Spread", "Stopwatch", "progress_bar"]

#: clocks the CPU timings can use: "wall" (default) or "process" (CPU seconds of this process)
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "process": time.process_time}


@dataclass
class TimingSettings:
    """Defaults of the timing functions, used where a call passes ``clock=None``."""

    clock: str = "wall"


#: the defaults in force (change the clock with :func:`use_clock`, or pass ``clock=`` to each call)
SETTINGS = TimingSettings()


def clock_name() -> str:
    """The clock CPU timings use when a call names none: 'wall' or 'process'."""
    return SETTINGS.clock


def clock_function(clock: str | None = None) -> Callable[[], float]:
    """The function that reads ``clock`` (None: :func:`clock_name`); ValueError for an unknown name."""
    return CLOCKS[require_choice("clock", SETTINGS.clock if clock is None else clock, CLOCKS)]


@contextmanager
def use_clock(name: str = "wall"):
    """Within the block, timings that name no clock use ``name``: ``"wall"`` or ``"process"``.

    ``"process"`` counts only the CPU seconds of this process, so time the OS gave to other programs
    on a shared machine does not count. It is only meaningful single-threaded (with more threads it
    adds up every thread's time): ``torch.get_num_threads()`` must be 1 while it is active.
    """
    name = require_choice("clock", name, CLOCKS)
    previous = SETTINGS.clock
    SETTINGS.clock = name
    try:
        yield
    finally:
        SETTINGS.clock = previous


# --------------------------------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------------------------------
def thread_policy_for(threads: int | None = None, device=None):
    """The :class:`~course_lib.measure.threads.ThreadPolicy` a measurement on ``device`` follows (None on a GPU):
    the one entry point of the course's thread policy.

    The rule (:func:`course_lib.measure.threads.thread_policy`) applied to this host: its affinity mask, cgroup
    quota, physical cores and ``OMP_NUM_THREADS``. ``threads`` is an explicit request (honoured, flagged
    ``oversubscribed`` above the host's limit); ``description`` is the line every measurement header prints.
    """
    from course_lib.measure import threads as th
    from course_lib.measure.sysinfo import cpu_info
    if device is not None and resolve_device(device).type != "cpu":
        return None
    requested = None if threads is None else require_count("threads", threads, minimum=1)
    return th.thread_policy(th.affinity_cores(), th.cgroup_quota_cores(), th.omp_num_threads(), requested,
                            physical_cores=cpu_info().get("physical_cores"))


def thread_count(threads: int | None, device=None) -> int | None:
    """The CPU thread count a measurement on ``device`` uses: ``threads`` checked, or the policy's count.

    None on a GPU (the thread count does not apply).
    """
    policy = thread_policy_for(threads, resolve_device(device))
    return None if policy is None else policy.threads


class Threads:
    """Context manager: a fixed torch CPU thread count (None: leave it), the previous one restored afterwards."""

    def __init__(self, threads: int | None):
        self.threads = threads
        self.previous = None

    def __enter__(self):
        self.previous = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc):
        torch.set_num_threads(self.previous)
        return False


# --------------------------------------------------------------------------------------------------
# Timing core
# --------------------------------------------------------------------------------------------------
def repeat_settings(repeats: int | None, min_block: float | None) -> tuple[int, float]:
    """(repeats, min_block) checked, with the defaults: 7 blocks of >= 2 ms (fast mode: 3 of >= 0.2 ms)."""
    fast = fast_mode()
    repeats = (3 if fast else 7) if repeats is None else require_count("repeats", repeats, minimum=1)
    min_block = (2e-4 if fast else 2e-3) if min_block is None else require_positive("min_block", min_block)
    return repeats, min_block


def sync(device) -> None:
    """Wait for the device's queued work (a no-op on a CPU)."""
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_block(calls: Sequence[Callable], number: int, start: int, device, clock: str | None = None) -> float:
    """Seconds for ``number`` calls, rotating through ``calls`` from index ``start``."""
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    n = len(calls)
    if dev.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sync(dev)
        begin.record()
        for i in range(start, start + number):
            calls[i % n]()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3
    now = clock_function(clock)
    t0 = now()
    for i in range(start, start + number):
        calls[i % n]()
    return now() - t0


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of a :func:`timeit` run: median, quartiles and fastest of ``repeats`` blocks of ``number``."""

    median: float
    q1: float
    q3: float
    minimum: float
    repeats: int
    number: int
    times: tuple = ()           # per-call seconds of each timed block, in the order they ran
    threads: int | None = None  # the CPU threads of the attempt kept (course_lib.measure.steady.steady_timeit)
    attempts: int = 1           # attempts made (more than 1: a noisy attempt was retried)


def quartiles(times: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) of per-run seconds (all three equal for a single run); ``times`` must not be empty."""
    ts = [require_nonnegative(f"times[{i}]", t)
          for i, t in enumerate(require_list("times", times, "a list of seconds"))]
    if not ts:
        raise ValueError("times must hold at least one timing (seconds)")
    if len(ts) >= 2:
        q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    else:
        q1 = q3 = ts[0]
    return q1, statistics.median(ts), q3


def timeit(calls: Sequence[Callable], device=None, repeats: int | None = None, min_block: float | None = None,
           clock: str | None = None) -> Timing:
    """Per-call seconds: calibrate the calls per block (>= ``min_block`` s), warm up, time ``repeats`` blocks.

    ``calls`` are cycled through (the rotation over distinct buffers of :mod:`course_lib.measure.probes`);
    the thread count is whatever is in force (wrap the call in :class:`Threads`).
    """
    dev = resolve_device(device)
    repeats, min_block = repeat_settings(repeats, min_block)
    clock = require_choice("clock", SETTINGS.clock if clock is None else clock, CLOCKS)
    number, counter = 1, 0
    while True:  # calibration doubles as warm-up
        t = time_block(calls, number, counter, dev, clock)
        counter += number
        if t >= min_block or number >= 2**20:
            break
        number *= 2 if t <= 0 else max(2, min(8, math.ceil(min_block / t)))
    time_block(calls, number, counter, dev, clock)  # one more warm block at the final size
    counter += number
    per_call = []
    for _ in range(repeats):
        per_call.append(time_block(calls, number, counter, dev, clock) / number)
        counter += number
    q1, median, q3 = quartiles(per_call)
    return Timing(median, q1, q3, min(per_call), repeats, number, tuple(per_call))


class Spread:
    """Mixin for a result timed as a median with quartiles (fields seconds, q1_seconds, q3_seconds)."""

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median: how much the repeats disagree."""
        return (self.q3_seconds - self.q1_seconds) / self.seconds


class Stopwatch:
    """Time whole calls (a prefill, a turn of a chat) as the probes time theirs.

    ``with Stopwatch(device, threads) as sw: seconds, result = sw.time(fn, *args)``: the CPU thread
    count is fixed inside the block (default: all physical cores; ignored on a GPU) and restored after
    it; each timed call is synchronised on a GPU before and after, and timed with ``clock`` (None: the
    clock in force, see :func:`use_clock`). ``sw.threads``: the thread count used (None on a GPU).
    """

    def __init__(self, device=None, threads: int | None = None, clock: str | None = None):
        self.device = resolve_device(device)
        self.threads = thread_count(threads, self.device)
        self.clock = None if clock is None else require_choice("clock", clock, CLOCKS)
        self._pin = Threads(self.threads)

    def __enter__(self) -> "Stopwatch":
        self._pin.__enter__()
        return self

    def __exit__(self, *exc):
        return self._pin.__exit__(*exc)

    def sync(self):
        """Wait for the device's queued work (a no-op on a CPU)."""
        sync(self.device)

    def time(self, fn, *args, **kwargs) -> tuple[float, object]:
        """(seconds, return value) of one call ``fn(*args, **kwargs)``, synchronised on a GPU."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        now = clock_function(self.clock)
        sync(self.device)
        t0 = now()
        out = fn(*args, **kwargs)
        sync(self.device)
        return now() - t0, out


def progress_bar(iterable=None, *, desc: str, unit: str, total: int | None = None, enabled: bool = True):
    """A tqdm bar on stderr: text under tests and fast mode (stable stored outputs), notebook-aware otherwise."""
    if fast_mode() or "PYTEST_CURRENT_TEST" in os.environ:
        from tqdm import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(iterable, desc=desc, unit=unit, total=total, disable=not enabled, file=sys.stderr)
