"""This machine as a :class:`~course_lib.core.hardware.HardwareSpec`, from its measured ceilings.

Lessons: 05, 06, 07, 08, 09

The ceilings a learner's machine reaches, as hardware the estimator takes::

    from course_lib.measure import machine
    m = machine.measure_machine()        # copy bandwidth, matmul FLOP/s per dtype, a rotated GEMV sweep
    hw = machine.this_machine(m)         # a HardwareSpec for course_lib.estimate
    m.llc_bytes, m.caches                # the caches the cores in use share (course_lib.measure.device)
    m.beyond_cache, m.cache_reason       # whether every measurement read memory, not cache; why not
    machine.measure_machine(full=True)   # a denser sweep, on past 4 × the LLC as far as memory allows

The measurements themselves are :mod:`course_lib.measure.probes`; the cache and memory sizes are read
by :mod:`course_lib.measure.device`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from course_lib.core.hardware import HardwareSpec, custom_hardware
from course_lib.core.validation import require_choice
from course_lib.measure.device import cache_sizes, device_name, memory_capacity, resolve_device
from course_lib.measure.probes import (DTYPES, CopyResult, GemvResult, GemvTable, MatmulResult, default_sizes,
                                       gemv_shapes, measure_copy_bandwidth, measure_gemv, measure_matmul_flops,
                                       probe_limits)
from course_lib.measure.timing import thread_count

__all__ = ["MachineMeasurements", "measure_machine", "this_machine"]


@dataclass
class MachineMeasurements:
    """Everything :func:`this_machine` needs: ceilings, GEMV rows and caches of one device."""

    device: str
    device_name: str
    threads: int | None
    caches: dict
    llc_bytes: int | None
    copy: CopyResult
    matmul: dict = field(default_factory=dict)      # dtype -> MatmulResult
    gemv: GemvTable = field(default_factory=GemvTable)
    capacity_bytes: int | None = None
    budget_bytes: int | None = None     # the memory budget the copy probe had (each probe reads its own)
    full: bool = False                  # the full sweep (measure_machine(full=True))

    def _cache_rows(self) -> list:
        """The measurements that are meant to read memory: the copy and the rotated GEMV rows."""
        return [self.copy] + [r for r in self.gemv if r.rotate]

    @property
    def beyond_cache(self) -> bool | None:
        """True when the copy and every rotated GEMV row exceeded 4 × the LLC, False when one did not,
        None when the LLC is unknown."""
        verdicts = [r.beyond_cache for r in self._cache_rows()]
        if any(v is False for v in verdicts):
            return False
        return None if any(v is None for v in verdicts) else True

    @property
    def cache_reason(self) -> str:
        """Why :attr:`beyond_cache` is what it is: the reason of the first measurement within the cache,
        with how many were, or that all read memory."""
        rows = self._cache_rows()
        short = [r for r in rows if r.beyond_cache is False]
        if short:
            names = ["the copy" if r is self.copy else f"GEMV {r.m} × {r.k} {r.dtype}" for r in short]
            head = names[0] if len(short) == 1 else f"{len(short)} of {len(rows)} measurements ({', '.join(names)})"
            return f"{head} stayed within the cache: {short[0].cache_reason}"
        unknown = [r for r in rows if r.beyond_cache is None]
        if unknown:
            return unknown[0].cache_reason
        what = f"the copy and all {len(rows) - 1} rotated GEMV rows" if len(rows) > 1 else "the copy"
        return f"{what} had working sets beyond 4 × the LLC: they read memory"

    @classmethod
    def collect(cls, copy: CopyResult, gemv: Iterable[GemvResult] = (),
                matmul: Mapping[str, MatmulResult] | None = None, device=None) -> "MachineMeasurements":
        """Bundle measurements already taken (no new timing) for :func:`this_machine`."""
        if not isinstance(copy, CopyResult):
            raise TypeError(f"copy must come from measure_copy_bandwidth(), got {type(copy).__name__}")
        dev = resolve_device(device if device is not None else copy.device)
        caches = cache_sizes(dev)
        return cls(device=dev.type, device_name=device_name(dev), threads=copy.threads, caches=caches,
                   llc_bytes=caches.get("LLC"), copy=copy, matmul=dict(matmul or {}),
                   gemv=GemvTable(gemv), capacity_bytes=memory_capacity(dev), budget_bytes=copy.budget_bytes)

    def as_dict(self) -> dict:
        return {"device": self.device, "device_name": self.device_name, "threads": self.threads,
                "caches": dict(self.caches), "llc_bytes": self.llc_bytes, "copy": self.copy.as_dict(),
                "matmul": {k: v.as_dict() for k, v in self.matmul.items()}, "gemv": self.gemv.as_dicts(),
                "capacity_bytes": self.capacity_bytes, "budget_bytes": self.budget_bytes, "full": self.full,
                "beyond_cache": self.beyond_cache, "cache_reason": self.cache_reason}


def measure_machine(device=None, threads: int | None = None, gemv_sizes=None, dtypes=("fp32",),
                    matmul_dtypes=None, progress: bool = True, full: bool = False, llc_bytes: int | None = None,
                    budget_bytes: int | None = None) -> MachineMeasurements:
    """Copy bandwidth, matmul FLOP/s per dtype and a rotated GEMV sweep, in one object.

    ``matmul_dtypes`` default: every dtype in :data:`DTYPES` (so estimates in fp16 have a measured peak).
    The GEMV sweep is :func:`~course_lib.measure.probes.default_sizes` (``full=True``: the denser sweep
    that goes on past 4 × the LLC, memory permitting) unless ``gemv_sizes`` is given. ``llc_bytes`` /
    ``budget_bytes``: the last-level cache and the memory budget of each probe (default the device's:
    :func:`~course_lib.measure.probes.probe_limits`). Whether each row's working set exceeded 4 × the
    LLC is its ``beyond_cache``; :attr:`MachineMeasurements.beyond_cache` and ``cache_reason`` sum them up.
    """
    dev = resolve_device(device)
    if not isinstance(full, bool):
        raise TypeError(f"full must be True or False, got {full!r}")
    nthreads = thread_count(threads, dev)
    caches = cache_sizes(dev)
    llc, budget, _ = probe_limits(dev, caches.get("LLC") if llc_bytes is None else llc_bytes, budget_bytes)
    limits = dict(llc_bytes=llc, budget_bytes=budget_bytes)   # None: each probe reads the budget (and says how)
    shapes = gemv_shapes(default_sizes(dev, full=full, llc_bytes=llc, budget_bytes=budget)
                         if gemv_sizes is None else gemv_sizes)
    copy = measure_copy_bandwidth(threads=nthreads, device=dev, **limits)
    mm_dtypes = list(DTYPES) if matmul_dtypes is None else [require_choice("dtype", x, DTYPES) for x in matmul_dtypes]
    mm = {d: measure_matmul_flops(dtype=d, threads=nthreads, device=dev) for d in mm_dtypes}
    table = measure_gemv(shapes, dtypes, threads=nthreads, device=dev, progress=progress, **limits)
    return MachineMeasurements(device=dev.type, device_name=device_name(dev), threads=nthreads,
                               caches=caches, llc_bytes=llc, copy=copy, matmul=mm, gemv=table,
                               capacity_bytes=memory_capacity(dev), budget_bytes=copy.budget_bytes, full=full)


def _large_gemv(m: MachineMeasurements) -> GemvResult | None:
    """The largest rotated fp32 (else any dtype) GEMV whose working set is beyond 4 × the LLC."""
    rows = [r for r in m.gemv if r.rotate and r.beyond_cache is not False]
    for pick in (lambda r: r.dtype == "fp32", lambda r: True):
        cand = [r for r in rows if pick(r)]
        if cand:
            return max(cand, key=lambda r: r.matrix_bytes)
    return None


def this_machine(measurements: MachineMeasurements | None = None, bandwidth: str = "auto",
                 name: str = "this-machine") -> HardwareSpec:
    """A :class:`~course_lib.core.hardware.HardwareSpec` of this machine, from measurements.

    ``bandwidth``: ``"gemv"`` = the achieved bytes/s of the largest rotated GEMV (what a decode step
    gets), ``"copy"`` = the copy ceiling (read + write counted), ``"auto"`` = gemv when a GEMV row
    exists, else copy. Peak FLOP/s per dtype are the measured matmul rates. With
    ``measurements=None`` :func:`measure_machine` runs first.
    """
    if measurements is None:
        measurements = measure_machine()
    if not isinstance(measurements, MachineMeasurements):
        raise TypeError(f"measurements must come from measure_machine(), got {type(measurements).__name__}")
    choice = require_choice("bandwidth", bandwidth, ("auto", "gemv", "copy"))
    big = _large_gemv(measurements)
    if choice == "gemv" and big is None:
        raise ValueError("bandwidth='gemv' needs a rotated GEMV row in measurements.gemv; none found")
    use_gemv = choice == "gemv" or (choice == "auto" and big is not None)
    bw = big.bandwidth if use_gemv else measurements.copy.bandwidth
    how = (f"GEMV {big.m}×{big.k} {big.dtype}, rotated" if use_gemv else "copy, read+write counted")
    measured = {"copy_GBps": measurements.copy.gb_per_s,
                "bandwidth_from": how,
                "threads": measurements.threads}
    if big is not None:
        measured["gemv_GBps"] = big.gb_per_s
    for d, r in measurements.matmul.items():
        measured[f"matmul_{d}_TFLOPs"] = r.tflop_per_s
    return custom_hardware(
        name, bandwidth=bw, peak_flops={d: r.flop_rate for d, r in measurements.matmul.items()},
        capacity=measurements.capacity_bytes, cache_bytes=measurements.llc_bytes,
        memory_type="GPU memory" if measurements.device == "cuda" else "DRAM",
        display=f"this machine ({measurements.device_name})",
        source=f"measured with course_lib.measure on {measurements.device_name}; bandwidth from {how}",
        measured=measured,
    )
