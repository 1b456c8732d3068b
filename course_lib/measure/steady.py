"""Timings that judge themselves: a noisy one is retried with fewer threads and longer blocks.

Lessons: none

::

    from course_lib.measure.steady import steady
    def run(threads, min_block):               # times the work; returns per-call seconds of each repeat
        with Threads(threads):
            t = timeit([fn], "cpu", min_block=min_block)
        return t.times
    s = steady(run, threads=policy.threads, min_block=2e-3)
    s.verdict.verdict, s.threads, len(s.attempts)      # 'reliable', 1, 2: the retry with 1 thread held

The probes' rule: **on a noisy verdict, retry with fewer threads and longer blocks** (:func:`steady`; the thread
count halves, :func:`course_lib.measure.threads.fewer_threads`, and the block grows ``block_growth`` times). Each
attempt records the CPU steal of its interval from two ``/proc/stat`` snapshots
(:func:`course_lib.measure.threads.proc_stat`), which the verdict uses. Comparing a prediction with a measurement
over time (interleaving, probes before and after) is the benchmarks' part:
:mod:`course_lib.measure.benchmarks.bracket`.

Nothing here imports torch or times anything by itself: the caller passes the function that times its
work, so the policy is tested with fake timings.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from course_lib.core.quality import THRESHOLDS, Thresholds, TimingVerdict, timing_verdict
from course_lib.core.validation import require_count, require_positive
from course_lib.measure.threads import fewer_threads, proc_stat, steal_between

__all__ = ["Attempt", "SteadyTiming", "steady", "steady_timeit", "probe_attempts", "keep_threads"]

#: inside :func:`keep_threads`: retries keep the thread count (they only lengthen the block)
_KEEP_THREADS: ContextVar[bool] = ContextVar("course_keep_threads", default=False)


@contextmanager
def keep_threads() -> Iterator[None]:
    """Within this block a retry of :func:`steady` keeps its thread count and only lengthens the block.

    A calibration predicts a model that runs with a given thread count: a rate timed with fewer threads is
    the rate of another configuration (a GEMV on one of two cores streams well under the bandwidth of two),
    so :func:`course_lib.measure.calibrate.calibrate` and ``reprobe_gemv`` run their probes in this block.
    A probe that shows a rate on its own retries with fewer threads.
    """
    token = _KEEP_THREADS.set(True)
    try:
        yield
    finally:
        _KEEP_THREADS.reset(token)


@dataclass(frozen=True)
class Attempt:
    """One try of :func:`steady`: its settings and the verdict of its timings."""

    threads: int | None
    min_block: float
    verdict: TimingVerdict


@dataclass(frozen=True)
class SteadyTiming:
    """The last attempt's per-call seconds, settings and verdict, and every attempt made."""

    times: tuple[float, ...]
    threads: int | None
    min_block: float
    verdict: TimingVerdict
    attempts: tuple[Attempt, ...]

    @property
    def retried(self) -> bool:
        return len(self.attempts) > 1


def _seconds(name: str, value) -> float:
    return require_positive(name, value, maximum=1e6)


def steady(run: Callable[[int | None, float], list], *, threads: int | None, min_block: float,
           max_attempts: int = 3, block_growth: float = 4.0, thresholds: Thresholds = THRESHOLDS,
           stat: Callable[[], str | None] = proc_stat, fewer: bool | None = None) -> SteadyTiming:
    """Time with ``run(threads, min_block)`` until the verdict is "reliable" or ``max_attempts`` are spent.

    After a noisy or contended attempt the next uses :func:`fewer_threads` (unchanged at 1 thread, or
    on a GPU where ``threads`` is None) and a block ``block_growth`` times longer. ``run`` returns the
    per-call seconds of each repeat; ``stat`` returns a ``/proc/stat`` snapshot (None: no steal figure).
    ``fewer``: whether a retry may use fewer threads (None: yes, except inside :func:`keep_threads`).
    """
    if fewer is None:
        fewer = not _KEEP_THREADS.get()
    elif not isinstance(fewer, bool):
        raise TypeError(f"fewer must be True, False or None, got {fewer!r}")
    if not callable(run):
        raise TypeError(f"run must be a function run(threads, min_block) -> seconds, got {type(run).__name__}")
    if threads is not None:
        threads = require_count("threads", threads, minimum=1, maximum=10**6)
    min_block = _seconds("min_block", min_block)
    max_attempts = require_count("max_attempts", max_attempts, minimum=1, maximum=100)
    block_growth = require_positive("block_growth", block_growth, minimum=1.0, maximum=1e3)
    if not callable(stat):
        raise TypeError(f"stat must be a function returning /proc/stat text or None, got {type(stat).__name__}")
    attempts = []
    for n in range(max_attempts):
        before = stat()
        times = tuple(run(threads, min_block))
        verdict = timing_verdict(list(times), steal=steal_between(before, stat()), thresholds=thresholds,
                                 name="run(...)")
        attempts.append(Attempt(threads, min_block, verdict))
        if verdict.reliable or n == max_attempts - 1:
            break
        if threads is not None and fewer:
            threads = fewer_threads(threads) or threads
        min_block = min(min_block * block_growth, 1e5)
    return SteadyTiming(times=times, threads=attempts[-1].threads, min_block=attempts[-1].min_block,
                        verdict=attempts[-1].verdict, attempts=tuple(attempts))


def probe_attempts() -> int:
    """Attempts a probe makes (:func:`steady_timeit`): 3 for a learner's run, 1 under ``COURSE_FAST=1`` (the test
    suite and the stored fast outputs time tiny sizes on purpose: their verdicts are reported, not retried)."""
    from course_lib.measure.device import fast_mode
    return 1 if fast_mode() else 3


def steady_timeit(calls, device, repeats, min_block, clock, threads: int | None, *, max_attempts: int | None = None):
    """:func:`course_lib.measure.timing.timeit` under :func:`steady`'s rule: a noisy or contended attempt is
    timed again with fewer threads and longer blocks. Returns the kept attempt's ``Timing`` with its
    ``threads`` and ``attempts`` filled in. ``threads`` None: the count in force (a GPU, or the caller's)."""
    from dataclasses import replace

    from course_lib.measure.timing import Threads, repeat_settings, timeit

    repeats, min_block = repeat_settings(repeats, min_block)
    kept = {}

    def run(n_threads, block):
        if n_threads is None:
            t = timeit(calls, device, repeats, block, clock)
        else:
            with Threads(n_threads):
                t = timeit(calls, device, repeats, block, clock)
        kept["t"] = t
        return list(t.times)

    s = steady(run, threads=threads, min_block=min_block,
               max_attempts=probe_attempts() if max_attempts is None else max_attempts)
    return replace(kept["t"], threads=s.threads, attempts=len(s.attempts))
