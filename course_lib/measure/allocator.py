"""The memory allocator: the other host setting a benchmark pins, and the page faults it shows.

Lessons: none

A lesson only reads :func:`state` (through a calibration's conditions); the benchmarks' entry points pin it.

::

    from course_lib.measure import allocator
    allocator.pin()                  # once, at a benchmark's entry point: process-wide, cannot be undone
    allocator.state().description    # what the allocator does in this process (pinned or as it is)
    allocator.minor_faults()         # minor page faults of this process so far

**Why a benchmark pins it.** glibc adapts its mmap and trim thresholds to what the program frees, and gives a
heap's free top back to the operating system once it exceeds the trim threshold. A prefill allocates each
layer's activations (for a Hugging Face model, its MLP activations: 4 blocks of prompt × MLP width × 4 bytes)
and frees them before the next layer: depending on the heap's history, every layer gets them back from the heap,
or maps them fresh and pays a page fault for every 4 KiB page, and identical prefills then differ by tens of %.
A probe, which frees and reallocates one block in a tight loop, almost never pays those faults, so a prediction
from probes misses by their share. With the thresholds fixed (:func:`pin`), a block of a given size behaves alike
in the probes and in the model: up to :data:`PINNED_MMAP_THRESHOLD` it comes from a heap that is never trimmed,
larger it is mapped and faulted each time, in both.

Only the benchmarks' command (``python -m course_lib.measure.validate``, ``--engine`` runs too) pins: the setting
is process-wide and cannot be undone, so a library call made from a learner's kernel never changes it. Elsewhere
(macOS, musl, Windows) nothing is changed and the description says so.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AllocatorPolicy", "pin", "state", "minor_faults", "PINNED_MMAP_THRESHOLD", "PINNED_TRIM_THRESHOLD"]

#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: the mmap threshold pinned: glibc's largest (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on 64-bit systems).
#: A block of this size or less comes from the heap; a larger one is mapped fresh, and faulted, every time.
PINNED_MMAP_THRESHOLD = 32 * 2**20
#: the trim threshold pinned (the largest a C int holds): the heap keeps what it has grown to
PINNED_TRIM_THRESHOLD = 2**31 - 1
_PINNED: "AllocatorPolicy | None" = None


@dataclass(frozen=True)
class AllocatorPolicy:
    """What the allocator does in this process: ``pinned`` True where glibc's thresholds are fixed."""

    pinned: bool
    description: str


def _as_it_is(why: str) -> AllocatorPolicy:
    return AllocatorPolicy(False, f"system allocator as it is ({why}): freed memory may go back to the system "
                                  f"between calls, and its page faults vary from run to run")


def state() -> AllocatorPolicy:
    """What the allocator does now, without changing it: pinned (by :func:`pin`) or as the system left it."""
    return _PINNED if _PINNED is not None else _as_it_is("not pinned")


def pin() -> AllocatorPolicy:
    """Fix glibc malloc's mmap and trim thresholds for this process (once; later calls return the same policy).

    For benchmark entry points only: the setting is process-wide and cannot be undone; it only keeps memory
    the process has already used.
    """
    global _PINNED
    if _PINNED is not None:
        return _PINNED
    why = "not glibc"
    try:
        import ctypes
        import platform
        if platform.libc_ver()[0] == "glibc":
            libc = ctypes.CDLL(None)
            if (libc.mallopt(_M_MMAP_THRESHOLD, PINNED_MMAP_THRESHOLD) == 1
                    and libc.mallopt(_M_TRIM_THRESHOLD, PINNED_TRIM_THRESHOLD) == 1):
                _PINNED = AllocatorPolicy(True, f"glibc malloc pinned: blocks up to {PINNED_MMAP_THRESHOLD // 2**20} "
                                                f"MiB from a heap that is never trimmed, larger ones mapped fresh "
                                                f"(page faults)")
                return _PINNED
            why = "glibc refused mallopt"
    except (OSError, AttributeError, ValueError) as e:     # no C library to load, or no mallopt in it
        why = f"mallopt unavailable ({type(e).__name__})"
    _PINNED = _as_it_is(why)
    return _PINNED


def minor_faults() -> int | None:
    """Minor page faults of this process so far (``getrusage``); None where the system does not count them."""
    try:
        import resource
    except ImportError:                 # Windows
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
