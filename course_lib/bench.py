"""Timing probes for lesson 05: matrix-vector products (GEMV), memory copy and matrix multiply.

    from course_lib import bench
    table = bench.measure_gemv()                 # y = W·x over sizes and dtypes, this machine
    copy = bench.measure_copy_bandwidth()        # practical memory ceiling (read + write counted)
    mm = bench.measure_matmul_flops()            # practical compute ceiling
    hw = bench.this_machine()                    # a HardwareSpec for course_lib.estimate

A decode step at batch 1 is a chain of matrix-vector products: every weight is read once and used
for one multiply-add. This module times exactly that operation with the care a benchmark needs:

* **warm-up** before timing (first calls allocate, load kernels, fault pages in);
* **synchronisation**: on a GPU the kernels are timed with CUDA events and the host waits for them;
* **enough calls per timed block** (calibrated like ``timeit``) that the clock's resolution and the
  timer call itself do not matter, and **repeats** summarised by the median and the interquartile
  range (robust against the odd slow run);
* **a fixed CPU thread count** (``torch.set_num_threads``; the previous value is restored);
* **rotation over distinct weight buffers** whose total size exceeds 4 × the last-level cache, so
  that a small matrix is read from memory and not from the cache of the previous call. With
  ``rotate=False`` the same buffer is reused and small matrices are served from cache: the
  difference is the "tens of MB of cache" effect.

Bytes and FLOP per call are counted exactly: a GEMV reads the matrix (m·k elements) and the vector
(k) and writes the result (m); it does 2·m·k FLOP. A copy reads and writes its buffer: both are
counted (read + write), as GPU vendors and the course's H200 measurement do.

torch is imported here (and by :mod:`course_lib.tinylm`), never by the core of course_lib.
Set the environment variable ``COURSE_FAST=1`` for tiny sizes and few repeats (the test suite).
"""
from __future__ import annotations

import math
import numbers
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import torch

from .hardware import HardwareSpec, custom_hardware
from .validation import require_choice, require_count, require_positive

__all__ = [
    "DTYPES", "GemvResult", "GemvTable", "CopyResult", "MatmulResult", "DtypeProbe", "MachineMeasurements",
    "fast_mode", "default_device", "device_name", "cache_sizes", "last_level_cache_bytes",
    "default_sizes", "rotation_buffers", "gemv_bytes", "gemv_flops",
    "measure_gemv", "measure_copy_bandwidth", "measure_matmul_flops", "probe_dtypes", "fast_dtypes",
    "dtype_verdicts", "measure_machine", "this_machine", "DecodeTiming", "measure_decode",
]

#: the dtypes the probes time, by course precision name
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

#: rotation makes the working set larger than this many last-level caches
ROTATION_FACTOR = 4
#: last-level cache assumed when the OS does not tell (larger than any current CPU's or GPU's)
FALLBACK_LLC_BYTES = 256 * 2**20
#: at most this many rotation buffers (a 64 × 64 fp32 matrix × 16384 = 256 MiB, beyond any LLC × 4 up to 64 MiB)
MAX_BUFFERS = 16384


# --------------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------------
def fast_mode() -> bool:
    """True when ``COURSE_FAST=1`` (tiny sizes and repeats, for tests and stored notebook outputs)."""
    return os.environ.get("COURSE_FAST", "").strip().lower() in {"1", "true", "yes", "on"}


def _tqdm():
    """Text progress bars under tests / fast mode (stable stored outputs), notebook-aware otherwise."""
    if fast_mode() or "PYTEST_CURRENT_TEST" in os.environ:
        from tqdm import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm


def default_device() -> str:
    """'cuda' when PyTorch sees a CUDA GPU, else 'cpu'."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _device(device) -> torch.device:
    if device is None:
        return torch.device(default_device())
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {device!r}") from None
    else:
        raise TypeError(f"device must be a string such as 'cpu' or 'cuda', got {type(device).__name__}")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but PyTorch sees no CUDA GPU on this machine; use device='cpu'")
    return dev


def device_name(device=None) -> str:
    """The GPU's name, or the CPU model as the OS reports it."""
    dev = _device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    from .sysinfo import cpu_info
    return cpu_info().get("model") or "CPU"


def cache_sizes(device=None) -> dict[str, int]:
    """Cache sizes in bytes, as the OS (or the CUDA driver) reports them.

    CPU: ``{"L1d": ..., "L1i": ..., "L2": ..., "L3": ...}`` per instance, from
    /sys/devices/system/cpu/cpu0/cache, ``lscpu`` or macOS ``sysctl`` (via course_lib.sysinfo), plus
    ``"LLC"``: the last level summed over its instances (two 32 MiB L3 slices hold 64 MiB).
    GPU: ``{"L2": ..., "LLC": ...}``. An empty dict when nothing tells.
    """
    dev = _device(device)
    if dev.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
        return {"L2": l2, "LLC": l2} if l2 else {}
    from .sysinfo import cache_info
    out: dict[str, int] = {}
    top = None
    for c in cache_info():
        kind = {"Data": "d", "Instruction": "i"}.get(c["type"], "")
        out[f"L{c['level']}{kind}"] = int(c["size_bytes"])
        if c["type"] != "Instruction" and (top is None or c["level"] >= top["level"]):
            top = c
    if top is not None:
        out["LLC"] = int(top["size_bytes"]) * int(top.get("instances") or 1)
    return out


def last_level_cache_bytes(device=None) -> int | None:
    """Bytes of the last-level cache (all instances), or None when the OS does not say."""
    return cache_sizes(device).get("LLC")


def _default_threads() -> int:
    """Physical cores this process may use (hyper-threads add nothing to a bandwidth-bound loop)."""
    from .sysinfo import cpu_info
    info = cpu_info()
    usable = info.get("usable_cores") or os.cpu_count() or 1
    phys = info.get("physical_cores")
    return max(1, min(usable, phys) if phys else usable)


class _Threads:
    """Context manager: a fixed torch CPU thread count, the previous one restored afterwards."""

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


def _threads(threads, dev: torch.device) -> int | None:
    if dev.type != "cpu":
        return None
    return _default_threads() if threads is None else require_count("threads", threads, minimum=1)


def _memory_budget(dev: torch.device) -> int:
    """Bytes a probe may allocate: a third of free GPU memory, or a quarter of RAM."""
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free // 3)
    from .sysinfo import memory_bytes
    ram = memory_bytes() or 8 * 2**30
    return int(ram // 4)


# --------------------------------------------------------------------------------------------------
# Timing core
# --------------------------------------------------------------------------------------------------
def _sync(dev: torch.device):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _time_block(calls: Sequence, number: int, start: int, dev: torch.device) -> float:
    """Seconds for ``number`` calls, rotating through ``calls`` from index ``start``."""
    n = len(calls)
    if dev.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _sync(dev)
        begin.record()
        for i in range(start, start + number):
            calls[i % n]()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    for i in range(start, start + number):
        calls[i % n]()
    return time.perf_counter() - t0


@dataclass(frozen=True)
class _Timing:
    median: float
    q1: float
    q3: float
    minimum: float
    repeats: int
    number: int


def _timeit(calls: Sequence, dev: torch.device, repeats: int, min_block: float) -> _Timing:
    """Per-call seconds: calibrate the calls per block (>= ``min_block`` s), warm up, time ``repeats`` blocks."""
    number, counter = 1, 0
    while True:  # calibration doubles as warm-up
        t = _time_block(calls, number, counter, dev)
        counter += number
        if t >= min_block or number >= 2**20:
            break
        number *= 2 if t <= 0 else max(2, min(8, math.ceil(min_block / t)))
    _time_block(calls, number, counter, dev)  # one more warm block at the final size
    counter += number
    per_call = []
    for _ in range(repeats):
        per_call.append(_time_block(calls, number, counter, dev) / number)
        counter += number
    if len(per_call) >= 2:
        q1, _, q3 = statistics.quantiles(per_call, n=4, method="inclusive")
    else:
        q1 = q3 = per_call[0]
    return _Timing(statistics.median(per_call), q1, q3, min(per_call), repeats, number)


def _settings(repeats, min_block):
    fast = fast_mode()
    repeats = (3 if fast else 7) if repeats is None else require_count("repeats", repeats, minimum=1)
    min_block = (2e-4 if fast else 2e-3) if min_block is None else require_positive("min_block", min_block)
    return repeats, min_block


# --------------------------------------------------------------------------------------------------
# GEMV
# --------------------------------------------------------------------------------------------------
def gemv_bytes(m: int, k: int, dtype: str = "fp32") -> int:
    """Bytes one y = W·x moves: the m×k matrix and the k-vector read, the m-vector written."""
    m = require_count("m", m, minimum=1)
    k = require_count("k", k, minimum=1)
    b = torch.empty((), dtype=DTYPES[require_choice("dtype", dtype, DTYPES)]).element_size()
    return (m * k + k + m) * b


def gemv_flops(m: int, k: int) -> int:
    """FLOP of one y = W·x: one multiply and one add per matrix element."""
    return 2 * require_count("m", m, minimum=1) * require_count("k", k, minimum=1)


@dataclass(frozen=True)
class GemvResult:
    """One timed GEMV shape: seconds are per call (median over repeats; q1/q3 the quartiles)."""

    m: int
    k: int
    dtype: str
    device: str
    element_bytes: int
    bytes: int                  # moved per call: matrix + x read, y written
    flops: int                  # 2·m·k
    seconds: float              # median per call
    q1_seconds: float
    q3_seconds: float
    min_seconds: float
    repeats: int
    number: int                 # calls per timed block
    rotate: bool
    buffers: int                # distinct weight matrices cycled through
    working_set_bytes: int      # bytes of all weight buffers
    llc_bytes: int | None       # last-level cache the rotation was sized against
    threads: int | None

    @property
    def matrix_bytes(self) -> int:
        return self.m * self.k * self.element_bytes

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = the middle half of runs within 5 %)."""
        return (self.q3_seconds - self.q1_seconds) / self.seconds

    @property
    def bandwidth(self) -> float:
        """Achieved bytes per second (median)."""
        return self.bytes / self.seconds

    @property
    def gb_per_s(self) -> float:
        return self.bandwidth / 1e9

    @property
    def flop_rate(self) -> float:
        return self.flops / self.seconds

    @property
    def gflop_per_s(self) -> float:
        return self.flop_rate / 1e9

    @property
    def bandwidth_range(self) -> tuple[float, float]:
        """(low, high) achieved bytes/s over the middle half of the runs (from q3 and q1)."""
        return self.bytes / self.q3_seconds, self.bytes / self.q1_seconds

    @property
    def beyond_cache(self) -> bool | None:
        """True when the bytes cycled through exceed 4 × the last-level cache (None: cache unknown)."""
        if self.llc_bytes is None:
            return None
        ws = self.working_set_bytes if self.rotate else self.matrix_bytes
        return ws > ROTATION_FACTOR * self.llc_bytes

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(spread=self.spread, bandwidth=self.bandwidth, gb_per_s=self.gb_per_s,
                 gflop_per_s=self.gflop_per_s, matrix_bytes=self.matrix_bytes)
        return d


class GemvTable(list):
    """A list of :class:`GemvResult` rows that shows itself as a table in a notebook."""

    def where(self, **conditions) -> "GemvTable":
        """Rows whose fields equal the given values: ``table.where(dtype="fp32", rotate=True)``."""
        fields = set(GemvResult.__dataclass_fields__)
        bad = sorted(set(conditions) - fields)
        if bad:
            raise TypeError(f"unknown field(s) {bad}; rows have {sorted(fields)}")
        return GemvTable(r for r in self if all(getattr(r, k) == v for k, v in conditions.items()))

    def largest(self, dtype: str | None = None) -> GemvResult:
        """The row with the biggest matrix (of ``dtype`` when given)."""
        rows = self.where(dtype=dtype) if dtype else self
        if not rows:
            raise ValueError(f"no rows{' of dtype ' + repr(dtype) if dtype else ''} in this table")
        return max(rows, key=lambda r: (r.matrix_bytes, r.rotate))

    def as_dicts(self) -> list[dict]:
        return [r.as_dict() for r in self]

    def _markdown(self) -> str:
        from .units import format_bytes
        lines = ["| m × k | dtype | matrix | rotate | time per call (median) | spread (IQR) | GB/s | GFLOP/s |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in self:
            lines.append(f"| {r.m} × {r.k} | {r.dtype} | {format_bytes(r.matrix_bytes, system='iec')} | "
                         f"{'yes' if r.rotate else 'no'} | {r.seconds * 1e6:.1f} µs | ±{r.spread / 2:.1%} | "
                         f"{r.gb_per_s:.2f} | {r.gflop_per_s:.2f} |")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self._markdown()

    def __str__(self) -> str:
        return self._markdown()


def rotation_buffers(matrix_bytes: int, llc_bytes: int | None, rotate: bool = True) -> int:
    """How many distinct matrices to cycle through so that together they exceed 4 × the LLC."""
    matrix_bytes = require_count("matrix_bytes", matrix_bytes, minimum=1)
    if not rotate:
        return 1
    target = ROTATION_FACTOR * (llc_bytes if llc_bytes else FALLBACK_LLC_BYTES)
    return target // matrix_bytes + 1


def default_sizes(device=None, full: bool = False) -> list[tuple[int, int]]:
    """Square sizes for a sweep: fast mode tiny, the default up to 8192 (CPU) / 16384 (GPU), ``full`` denser."""
    dev = _device(device)
    if fast_mode():
        sizes = [64, 256, 1024]
    elif full:
        sizes = [128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
        if dev.type == "cuda":
            sizes += [12288, 16384]
    else:
        sizes = [256, 512, 1024, 2048, 4096, 8192] + ([16384] if dev.type == "cuda" else [])
    return [(n, n) for n in sizes]


def _shapes(sizes) -> list[tuple[int, int]]:
    if isinstance(sizes, numbers.Integral) or (hasattr(sizes, "item") and getattr(sizes, "shape", None) == ()):
        sizes = [sizes]
    if isinstance(sizes, (str, bytes)):
        raise TypeError(f"sizes must be a list of n (square) or (m, k) pairs, got {sizes!r}")
    out = []
    try:
        items = list(sizes)
    except TypeError:
        raise TypeError(f"sizes must be a list of n (square) or (m, k) pairs, got {type(sizes).__name__}") from None
    if not items:
        raise ValueError("sizes must name at least one matrix size")
    for s in items:
        if isinstance(s, (tuple, list)):
            if len(s) != 2:
                raise ValueError(f"sizes: each entry is n or (m, k), got {s!r}")
            out.append((require_count("m", s[0], minimum=1), require_count("k", s[1], minimum=1)))
        else:
            n = require_count("size", s, minimum=1)
            out.append((n, n))
    return out


def _dtypes(dtypes, dev) -> list[str]:
    if dtypes is None or (isinstance(dtypes, str) and dtypes == "auto"):
        return fast_dtypes(dev.type)
    if isinstance(dtypes, str):
        dtypes = [dtypes]
    names = [require_choice("dtype", d, DTYPES) for d in dtypes]
    if not names:
        raise ValueError("dtypes must name at least one of " + ", ".join(DTYPES))
    return names


def _gemv_one(m, k, dtype, dev, rotate, llc, repeats, min_block, threads, budget) -> GemvResult:
    tdt = DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    mbytes = m * k * esize
    if mbytes > budget:
        raise ValueError(f"a {m} × {k} {dtype} matrix needs {mbytes / 1e9:.2f} GB; this device allows "
                         f"{budget / 1e9:.2f} GB for the probe: choose smaller sizes")
    nbuf = min(rotation_buffers(mbytes, llc, rotate), max(1, budget // mbytes), MAX_BUFFERS)
    gen = torch.Generator(device="cpu").manual_seed(m * 7919 + k)
    first = torch.randn(m, k, generator=gen).to(device=dev, dtype=tdt)
    if nbuf == 1:
        weights = [first]
    else:  # one allocation, nbuf distinct matrices (copies of the same values: timing ignores values)
        block = torch.empty((nbuf, m, k), device=dev, dtype=tdt)
        block.copy_(first.expand(nbuf, m, k))
        weights = list(block.unbind(0))
        del block
    x = torch.randn(k, generator=gen).to(device=dev, dtype=tdt)
    y = torch.empty(m, device=dev, dtype=tdt)
    calls = [(lambda W=W: torch.mv(W, x, out=y)) for W in weights]
    with torch.inference_mode():
        t = _timeit(calls, dev, repeats, min_block)
    del weights, calls, first
    return GemvResult(m=m, k=k, dtype=dtype, device=dev.type, element_bytes=esize,
                      bytes=(m * k + k + m) * esize, flops=2 * m * k,
                      seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3, min_seconds=t.minimum,
                      repeats=t.repeats, number=t.number, rotate=bool(rotate), buffers=nbuf,
                      working_set_bytes=nbuf * mbytes, llc_bytes=llc, threads=threads)


def measure_gemv(sizes=None, dtypes=None, repeats: int | None = None, rotate: bool = True,
                 threads: int | None = None, device=None, min_block: float | None = None,
                 progress: bool = True) -> GemvTable:
    """Time y = W·x for every (size, dtype); one :class:`GemvResult` row each.

    ``sizes``: n (square) or (m, k) pairs; default :func:`default_sizes`. ``dtypes``: names from
    :data:`DTYPES`; default the ones this device runs well (:func:`fast_dtypes`: fp32, plus fp16/bf16
    where a fast kernel exists). ``rotate``: cycle through distinct weight buffers totalling more than
    4 × the last-level cache (``False``: one buffer, so small matrices stay in cache). ``threads``:
    CPU threads (default: physical cores), restored afterwards. ``repeats``: timed blocks
    (median and quartiles over them); ``min_block``: seconds each block lasts at least.
    """
    dev = _device(device)
    shapes = _shapes(default_sizes(dev) if sizes is None else sizes)
    names = _dtypes(dtypes, dev)
    repeats, min_block = _settings(repeats, min_block)
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be True or False, got {rotate!r}")
    nthreads = _threads(threads, dev)
    llc = last_level_cache_bytes(dev)
    budget = _memory_budget(dev)
    jobs = [(m, k, d) for (m, k) in shapes for d in names]
    table = GemvTable()
    tqdm = _tqdm()
    with _Threads(nthreads), tqdm(jobs, desc="GEMV", unit="shape", disable=not progress, file=sys.stderr) as bar:
        for m, k, d in bar:
            bar.set_postfix_str(f"{m}×{k} {d}")
            table.append(_gemv_one(m, k, d, dev, rotate, llc, repeats, min_block, nthreads, budget))
    return table


# --------------------------------------------------------------------------------------------------
# Ceilings: copy bandwidth and matmul FLOP/s
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CopyResult:
    """``dst.copy_(src)`` of one buffer: bytes counts the read AND the write (2 × buffer bytes)."""

    buffer_bytes: int
    bytes: int                  # moved per copy: read + write
    counted: str                # "read+write"
    seconds: float
    q1_seconds: float
    q3_seconds: float
    repeats: int
    device: str
    threads: int | None

    @property
    def bandwidth(self) -> float:
        return self.bytes / self.seconds

    @property
    def gb_per_s(self) -> float:
        return self.bandwidth / 1e9

    @property
    def spread(self) -> float:
        return (self.q3_seconds - self.q1_seconds) / self.seconds

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(bandwidth=self.bandwidth, gb_per_s=self.gb_per_s, spread=self.spread)
        return d


def measure_copy_bandwidth(buffer_bytes: int | None = None, repeats: int | None = None, threads: int | None = None,
                           device=None, min_block: float | None = None) -> CopyResult:
    """The practical memory ceiling: copy a buffer of ``buffer_bytes`` (default 4 × LLC, >= 64 MiB).

    Both directions are counted (``counted="read+write"``): the copy reads ``buffer_bytes`` and writes
    ``buffer_bytes``. (A CPU may additionally read each destination line before writing it; that
    hidden traffic is not counted, so a CPU's copy figure understates its raw DRAM bandwidth.)
    """
    dev = _device(device)
    repeats, min_block = _settings(repeats, min_block)
    nthreads = _threads(threads, dev)
    llc = last_level_cache_bytes(dev) or FALLBACK_LLC_BYTES
    if buffer_bytes is None:
        buffer_bytes = max(ROTATION_FACTOR * llc, 64 * 2**20)
    buffer_bytes = require_count("buffer_bytes", buffer_bytes, minimum=4)
    if 2 * buffer_bytes > _memory_budget(dev):
        raise ValueError(f"buffer_bytes={buffer_bytes} needs twice that much memory; too large for this device")
    n = buffer_bytes // 4
    with _Threads(nthreads), torch.inference_mode():
        src = torch.ones(n, dtype=torch.float32, device=dev)
        dst = torch.empty_like(src)
        t = _timeit([lambda: dst.copy_(src)], dev, repeats, min_block)
    nbytes = n * 4
    return CopyResult(buffer_bytes=nbytes, bytes=2 * nbytes, counted="read+write", seconds=t.median,
                      q1_seconds=t.q1, q3_seconds=t.q3, repeats=repeats, device=dev.type, threads=nthreads)


@dataclass(frozen=True)
class MatmulResult:
    """C = A·B for n×n matrices: 2·n³ FLOP per call."""

    n: int
    dtype: str
    flops: int
    seconds: float
    q1_seconds: float
    q3_seconds: float
    repeats: int
    device: str
    threads: int | None

    @property
    def flop_rate(self) -> float:
        return self.flops / self.seconds

    @property
    def tflop_per_s(self) -> float:
        return self.flop_rate / 1e12

    @property
    def gflop_per_s(self) -> float:
        return self.flop_rate / 1e9

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(flop_rate=self.flop_rate, gflop_per_s=self.gflop_per_s)
        return d


def measure_matmul_flops(n: int | None = None, dtype: str = "fp32", repeats: int | None = None,
                         threads: int | None = None, device=None, max_call_seconds: float | None = None,
                         min_block: float | None = None) -> MatmulResult:
    """The practical compute ceiling: C = A·B, n×n, in ``dtype``.

    With ``n=None`` the size grows (doubling from 256) while one call stays under
    ``max_call_seconds`` (0.05 s, fast mode 0.01 s), up to 2048 on a CPU and 8192 on a GPU: a dtype
    without fast kernels (fp16 on many CPUs) is then measured at a size that finishes.
    """
    dev = _device(device)
    dtype = require_choice("dtype", dtype, DTYPES)
    tdt = DTYPES[dtype]
    repeats, min_block = _settings(repeats, min_block)
    nthreads = _threads(threads, dev)
    limit = (0.01 if fast_mode() else 0.05) if max_call_seconds is None else require_positive(
        "max_call_seconds", max_call_seconds)
    with _Threads(nthreads), torch.inference_mode():
        if n is None:
            n_max = 8192 if dev.type == "cuda" else (512 if fast_mode() else 2048)
            n = 256
            while n < n_max:
                a = torch.ones(n, n, device=dev, dtype=tdt)
                torch.mm(a, a)  # warm-up: the first calls of a shape pay one-off costs
                t_call = math.inf
                for _ in range(3):  # the fastest of three: robust against a busy machine
                    _sync(dev)
                    t0 = time.perf_counter()
                    torch.mm(a, a)
                    _sync(dev)
                    t_call = min(t_call, time.perf_counter() - t0)
                if t_call * 8 > limit:  # doubling n multiplies the time by 8
                    break
                n *= 2
        n = require_count("n", n, minimum=1)
        gen = torch.Generator(device="cpu").manual_seed(n)
        a = torch.randn(n, n, generator=gen).to(device=dev, dtype=tdt)
        b = torch.randn(n, n, generator=gen).to(device=dev, dtype=tdt)
        c = torch.empty(n, n, device=dev, dtype=tdt)
        t = _timeit([lambda: torch.mm(a, b, out=c)], dev, repeats, min_block)
    return MatmulResult(n=n, dtype=dtype, flops=2 * n**3, seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3,
                        repeats=repeats, device=dev.type, threads=nthreads)


# --------------------------------------------------------------------------------------------------
# Which dtypes run well here
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DtypeProbe:
    """Whether ``dtype`` has a fast GEMV here: its achieved GB/s relative to fp32's on the same shape."""

    dtype: str
    supported: bool
    gb_per_s: float | None
    relative_to_fp32: float | None
    fast: bool
    note: str


#: a half-precision GEMV counts as fast when it reaches this fraction of fp32's bytes per second
FAST_FRACTION = 0.7


def probe_dtypes(device=None, size: int | None = None, threads: int | None = None) -> list[DtypeProbe]:
    """Time one GEMV (default 4096 × 4096; fast mode 512) per dtype and say which run well.

    Half precision moves half the bytes, so with a real kernel it runs at about fp32's GB/s and
    takes half the time. Without one (fp16 on most CPUs) each element is converted and computed
    slowly: the GEMV turns compute-bound and its GB/s collapses.
    """
    dev = _device(device)
    size = (512 if fast_mode() else 4096) if size is None else require_count("size", size, minimum=1)
    table = measure_gemv([size], list(DTYPES), repeats=3, threads=threads, device=dev, progress=False)
    ref = table.where(dtype="fp32")[0].bandwidth
    out = []
    for r in table:
        rel = r.bandwidth / ref
        fast = r.dtype == "fp32" or rel >= FAST_FRACTION
        if r.dtype == "fp32":
            note = "reference"
        elif fast:
            note = f"fast kernel: {rel:.2f}× fp32's bytes per second, so about {rel * 2:.1f}× fp32's speed"
        else:
            note = (f"no fast kernel: {rel:.2f}× fp32's bytes per second; half the bytes but "
                    f"{1 / (rel * 2):.1f}× fp32's time: compute-bound, not memory-bound")
        out.append(DtypeProbe(r.dtype, True, r.gb_per_s, rel, fast, note))
    return out


@lru_cache(maxsize=None)
def _fast_dtypes_cached(device_type: str, threads: int | None, fast: bool) -> tuple[str, ...]:
    return tuple(p.dtype for p in probe_dtypes(device_type, threads=threads) if p.fast)


def fast_dtypes(device=None, threads: int | None = None) -> list[str]:
    """Dtypes this device runs well (probed once per session): always fp32, plus fp16/bf16 if fast."""
    dev = _device(device)
    return list(_fast_dtypes_cached(dev.type, _threads(threads, dev), fast_mode()))


def dtype_verdicts(table: Iterable[GemvResult]) -> list[dict]:
    """For each (shape, dtype) row: the speed-up over fp32 bytes/bandwidth predicts vs the one measured.

    bytes/bandwidth predicts time ∝ bytes, so a 2-byte dtype should take half fp32's time. When the
    measured speed-up falls short by more than a third, the row is flagged ``contradicts=True``:
    the kernel is not memory-bound (typically no native half-precision kernel: compute-bound).
    """
    rows = list(table)
    out = []
    for r in rows:
        ref = [x for x in rows if x.dtype == "fp32" and (x.m, x.k, x.rotate) == (r.m, r.k, r.rotate)]
        if not ref or r.dtype == "fp32":
            continue
        f = ref[0]
        predicted = f.bytes / r.bytes
        measured = f.seconds / r.seconds
        contradicts = measured < predicted * (1 - 1 / 3)
        if contradicts:
            why = ("slower than its bytes predict: the time is set by converting and multiplying, not by memory "
                   "(no native kernel for this dtype here: compute-bound)")
        else:
            why = "as bytes/bandwidth predicts: memory-bound"
        out.append({"m": r.m, "k": r.k, "dtype": r.dtype, "predicted_speedup": predicted,
                    "measured_speedup": measured, "contradicts": contradicts, "verdict": why})
    return out


# --------------------------------------------------------------------------------------------------
# This machine as a HardwareSpec
# --------------------------------------------------------------------------------------------------
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
    def collect(cls, copy: CopyResult, gemv: Iterable[GemvResult] = (), matmul: Mapping[str, MatmulResult] | None = None,
                device=None) -> "MachineMeasurements":
        """Bundle measurements already taken (no new timing) for :func:`this_machine`."""
        if not isinstance(copy, CopyResult):
            raise TypeError(f"copy must come from measure_copy_bandwidth(), got {type(copy).__name__}")
        dev = _device(device if device is not None else copy.device)
        return cls(device=dev.type, device_name=device_name(dev), threads=copy.threads, caches=cache_sizes(dev),
                   llc_bytes=last_level_cache_bytes(dev), copy=copy, matmul=dict(matmul or {}),
                   gemv=GemvTable(gemv), capacity_bytes=_capacity(dev))

    def as_dict(self) -> dict:
        return {"device": self.device, "device_name": self.device_name, "threads": self.threads,
                "caches": dict(self.caches), "llc_bytes": self.llc_bytes, "copy": self.copy.as_dict(),
                "matmul": {k: v.as_dict() for k, v in self.matmul.items()}, "gemv": self.gemv.as_dicts(),
                "capacity_bytes": self.capacity_bytes}


def _capacity(dev: torch.device) -> int | None:
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).total_memory)
    from .sysinfo import memory_bytes
    return memory_bytes()


def measure_machine(device=None, threads: int | None = None, gemv_sizes=None, dtypes=("fp32",),
                    matmul_dtypes=None, progress: bool = True) -> MachineMeasurements:
    """Copy bandwidth, matmul FLOP/s per dtype and a rotated GEMV sweep, in one object.

    ``matmul_dtypes`` default: every dtype in :data:`DTYPES` (so estimates in fp16 have a measured peak).
    The GEMV sweep adds one matrix larger than 4 × the LLC when ``gemv_sizes`` has none (outside fast mode).
    """
    dev = _device(device)
    nthreads = _threads(threads, dev)
    llc = last_level_cache_bytes(dev)
    shapes = _shapes(default_sizes(dev) if gemv_sizes is None else gemv_sizes)
    copy = measure_copy_bandwidth(threads=nthreads, device=dev)
    mm = {d: measure_matmul_flops(dtype=d, threads=nthreads, device=dev)
          for d in (list(DTYPES) if matmul_dtypes is None else [require_choice("dtype", x, DTYPES) for x in matmul_dtypes])}
    table = measure_gemv(shapes, dtypes, threads=nthreads, device=dev, progress=progress)
    return MachineMeasurements(device=dev.type, device_name=device_name(dev), threads=nthreads,
                               caches=cache_sizes(dev), llc_bytes=llc, copy=copy, matmul=mm, gemv=table,
                               capacity_bytes=_capacity(dev))


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
    """A :class:`~course_lib.hardware.HardwareSpec` of this machine, from measurements.

    ``bandwidth``: ``"gemv"`` = the achieved bytes/s of the largest rotated GEMV (what a decode step
    gets), ``"copy"`` = the copy ceiling (read + write counted), ``"auto"`` = gemv when a GEMV row
    exists, else copy. Peak FLOP/s per dtype are the measured matmul rates. With
    ``measurements=None`` :func:`measure_machine` runs first.
    """
    if measurements is None:
        measurements = measure_machine()
    if not isinstance(measurements, MachineMeasurements):
        raise TypeError(f"measurements must come from bench.measure_machine(), got {type(measurements).__name__}")
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
        source=f"measured with course_lib.bench on {measurements.device_name}; bandwidth from {how}",
        measured=measured,
    )


# --------------------------------------------------------------------------------------------------
# A whole decode step of a real (small) model
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeTiming:
    """Seconds per decode step of a :class:`course_lib.tinylm.TinyLM` (median over ``steps`` steps)."""

    seconds: float
    q1_seconds: float
    q3_seconds: float
    steps: int
    prompt_tokens: int
    threads: int | None

    @property
    def spread(self) -> float:
        return (self.q3_seconds - self.q1_seconds) / self.seconds


def measure_decode(lm, prompt_tokens: int = 16, steps: int = 16, threads: int | None = None,
                   warmup: int = 3) -> DecodeTiming:
    """Prefill ``prompt_tokens`` random tokens, then time ``steps`` greedy decode steps one by one.

    Each step is timed separately (synchronised on a GPU); ``warmup`` untimed steps come first.
    """
    prompt_tokens = require_count("prompt_tokens", prompt_tokens, minimum=1)
    steps = require_count("steps", steps, minimum=1)
    warmup = require_count("warmup", warmup)
    if prompt_tokens + warmup + steps > lm.max_seq:
        raise ValueError(f"prompt_tokens + warmup + steps = {prompt_tokens + warmup + steps} exceed the model's "
                         f"KV cache (max_seq={lm.max_seq})")
    dev = lm.device
    nthreads = _threads(threads, dev)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, lm.spec.vocab, (prompt_tokens,), generator=gen)
    times = []
    with _Threads(nthreads):
        tok = lm.prefill(prompt)[-1].argmax()
        for i in range(warmup + steps):
            _sync(dev)
            t0 = time.perf_counter()
            tok = lm.decode_step(tok).argmax()
            _sync(dev)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive") if len(times) >= 2 else (times[0],) * 3
    return DecodeTiming(statistics.median(times), q1, q3, steps, prompt_tokens, nthreads)
