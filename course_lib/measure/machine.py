"""This machine as a :class:`~course_lib.core.hardware.HardwareSpec`, from its measured ceilings.

Lessons: 05, 08, 09.

Lesson 05 (the ceilings), lesson 08 (predicted vs measured), exercise set 05 and the app (lesson 09's
"Measure this machine")::

    from course_lib.measure import machine
    m = machine.measure_machine()        # copy bandwidth, matmul FLOP/s per dtype, a rotated GEMV sweep
    hw = machine.this_machine(m)         # a HardwareSpec for course_lib.estimate
    m.llc_bytes, m.caches                # the caches as the OS reports them (course_lib.measure.device)

The measurements themselves are :mod:`course_lib.measure.probes`; the cache and memory sizes are read
by :mod:`course_lib.measure.device`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from course_lib.core.hardware import HardwareSpec, custom_hardware
from course_lib.core.validation import require_choice
from course_lib.measure.device import cache_sizes, device_name, last_level_cache_bytes, memory_capacity, resolve_device
from course_lib.measure.probes import (DTYPES, CopyResult, GemvResult, GemvTable, MatmulResult, default_sizes,
                                       gemv_shapes, measure_copy_bandwidth, measure_gemv, measure_matmul_flops)
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

    @classmethod
    def collect(cls, copy: CopyResult, gemv: Iterable[GemvResult] = (),
                matmul: Mapping[str, MatmulResult] | None = None, device=None) -> "MachineMeasurements":
        """Bundle measurements already taken (no new timing) for :func:`this_machine`."""
        if not isinstance(copy, CopyResult):
            raise TypeError(f"copy must come from measure_copy_bandwidth(), got {type(copy).__name__}")
        dev = resolve_device(device if device is not None else copy.device)
        return cls(device=dev.type, device_name=device_name(dev), threads=copy.threads, caches=cache_sizes(dev),
                   llc_bytes=last_level_cache_bytes(dev), copy=copy, matmul=dict(matmul or {}),
                   gemv=GemvTable(gemv), capacity_bytes=memory_capacity(dev))

    def as_dict(self) -> dict:
        return {"device": self.device, "device_name": self.device_name, "threads": self.threads,
                "caches": dict(self.caches), "llc_bytes": self.llc_bytes, "copy": self.copy.as_dict(),
                "matmul": {k: v.as_dict() for k, v in self.matmul.items()}, "gemv": self.gemv.as_dicts(),
                "capacity_bytes": self.capacity_bytes}


def measure_machine(device=None, threads: int | None = None, gemv_sizes=None, dtypes=("fp32",),
                    matmul_dtypes=None, progress: bool = True) -> MachineMeasurements:
    """Copy bandwidth, matmul FLOP/s per dtype and a rotated GEMV sweep, in one object.

    ``matmul_dtypes`` default: every dtype in :data:`DTYPES` (so estimates in fp16 have a measured peak).
    The GEMV sweep is :func:`~course_lib.measure.probes.default_sizes` unless ``gemv_sizes`` is given; whether
    a row's rotated working set exceeded 4 × the LLC is its ``beyond_cache``.
    """
    dev = resolve_device(device)
    nthreads = thread_count(threads, dev)
    llc = last_level_cache_bytes(dev)
    shapes = gemv_shapes(default_sizes(dev) if gemv_sizes is None else gemv_sizes)
    copy = measure_copy_bandwidth(threads=nthreads, device=dev)
    mm_dtypes = list(DTYPES) if matmul_dtypes is None else [require_choice("dtype", x, DTYPES) for x in matmul_dtypes]
    mm = {d: measure_matmul_flops(dtype=d, threads=nthreads, device=dev) for d in mm_dtypes}
    table = measure_gemv(shapes, dtypes, threads=nthreads, device=dev, progress=progress)
    return MachineMeasurements(device=dev.type, device_name=device_name(dev), threads=nthreads,
                               caches=cache_sizes(dev), llc_bytes=llc, copy=copy, matmul=mm, gemv=table,
                               capacity_bytes=memory_capacity(dev))


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
