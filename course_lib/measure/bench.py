"""Timing probes for lesson 05: matrix-vector products (GEMV), memory copy and matrix multiply.

    from course_lib.measure import bench
    table = bench.measure_gemv()                 # y = W·x over sizes and dtypes, this machine
    copy = bench.measure_copy_bandwidth()        # practical memory ceiling (read + write counted)
    mm = bench.measure_matmul_flops()            # practical compute ceiling
    hw = bench.this_machine()                    # a HardwareSpec for course_lib.estimate

Whole-model timings of a :class:`course_lib.tinylm.TinyLM` (lesson 06) and the probes the
calibrated latency model (:mod:`course_lib.validate`) uses::

    bench.measure_prefill(lm, [128, 512])        # TTFT: fresh prompts from an empty cache
    bench.measure_decode(lm, batch=4)            # TPOT after a short prompt, B sequences per step
    bench.measure_decode_contexts(lm, [128, 1024, 4096])   # TPOT at each context length
    bench.measure_op_overhead()                  # fixed seconds per small op, hot and cold
    bench.measure_linear(1, 32000, 1024)         # one linear layer at a model's exact shape
    bench.measure_kv_read(8, 4, 128, 4096)       # the rate decode attention reads K/V

and for timing whole calls elsewhere (lesson 07's cache measurements)::

    with bench.Stopwatch(lm.device, threads=1) as sw:
        seconds, logits = sw.time(lm.prefill, ids)
    q1, median, q3 = bench.quartiles(times)

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
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import torch

from course_lib.core.hardware import HardwareSpec, custom_hardware
from course_lib.core.validation import require_choice, require_count, require_counts, require_nonnegative, require_positive

__all__ = [
    "DTYPES", "GemvResult", "GemvTable", "CopyResult", "MatmulResult", "DtypeProbe", "MachineMeasurements",
    "fast_mode", "default_device", "device_name", "cache_sizes", "last_level_cache_bytes",
    "default_sizes", "rotation_buffers", "gemv_bytes", "gemv_flops",
    "measure_gemv", "measure_copy_bandwidth", "measure_matmul_flops", "probe_dtypes", "fast_dtypes",
    "dtype_verdicts", "measure_machine", "this_machine", "DecodeTiming", "measure_decode",
    "PrefillTiming", "measure_prefill", "measure_decode_contexts", "OverheadResult", "measure_op_overhead",
    "OVERHEAD_KINDS", "CLOCKS", "use_clock", "clock_name", "LinearResult", "measure_linear", "KVReadResult", "measure_kv_read",
    "Stopwatch", "quartiles",
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
    from course_lib.measure.sysinfo import cpu_info
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
    from course_lib.measure.sysinfo import cache_info
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
    from course_lib.measure.sysinfo import cpu_info
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
    from course_lib.measure.sysinfo import memory_bytes
    ram = memory_bytes() or 8 * 2**30
    return int(ram // 4)


# --------------------------------------------------------------------------------------------------
# Timing core
# --------------------------------------------------------------------------------------------------
#: clocks the CPU timings can use: "wall" (default) or "process" (CPU seconds of this process)
CLOCKS = {"wall": time.perf_counter, "process": time.process_time}
_CLOCK = {"name": "wall"}


def _clock() -> float:
    return CLOCKS[_CLOCK["name"]]()


def clock_name() -> str:
    """The clock CPU timings use now: 'wall' or 'process'."""
    return _CLOCK["name"]


@contextmanager
def use_clock(name: str = "wall"):
    """Time CPU work with ``name``: ``"wall"`` (elapsed time, what a user waits) or ``"process"``.

    ``"process"`` counts only the CPU seconds of this process, so time the OS gave to other programs
    on a shared machine does not count. It is only meaningful single-threaded (with more threads it
    adds up every thread's time): ``torch.get_num_threads()`` must be 1 while it is active.
    GPU timings use CUDA events whatever the clock.
    """
    name = require_choice("clock", name, CLOCKS)
    previous = _CLOCK["name"]
    _CLOCK["name"] = name
    try:
        yield
    finally:
        _CLOCK["name"] = previous


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
    t0 = _clock()
    for i in range(start, start + number):
        calls[i % n]()
    return _clock() - t0


class _Spread:
    """Mixin for a result timed as a median with quartiles (fields seconds, q1_seconds, q3_seconds)."""

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median: how much the repeats disagree."""
        return (self.q3_seconds - self.q1_seconds) / self.seconds


class _Rates(_Spread):
    """Mixin for a timed result that moved ``bytes`` and/or did ``flops``: rates in base units and GB/s, G/TFLOP/s."""

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.bytes / self.seconds

    @property
    def gb_per_s(self) -> float:
        return self.bandwidth / 1e9

    @property
    def flop_rate(self) -> float:
        """FLOP per second."""
        return self.flops / self.seconds

    @property
    def gflop_per_s(self) -> float:
        return self.flop_rate / 1e9

    @property
    def tflop_per_s(self) -> float:
        return self.flop_rate / 1e12


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
class GemvResult(_Rates):
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
        from course_lib.core.units import format_bytes
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
class CopyResult(_Rates):
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
class MatmulResult(_Rates):
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
    the kernel is not memory-bound (typically no native half-precision kernel: compute-bound). A
    speed-up more than half again above the prediction is no evidence of memory-boundedness either:
    the fp32 reference itself missed the memory ceiling (its kernel or its cache behaviour differs), so
    that row is reported as ``"inconclusive"``. ``bound`` is ``"compute"``, ``"memory"`` or
    ``"inconclusive"``.
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
            bound = "compute"
            why = ("slower than its bytes predict: the time is set by converting and multiplying, not by memory "
                   "(no native kernel for this dtype here: compute-bound)")
        elif measured > predicted * 1.5:
            bound = "inconclusive"
            why = ("faster than its bytes predict: the fp32 reference did not run at the memory ceiling (another "
                   "kernel, or cache effects), so this ratio says nothing about the memory bound")
        else:
            bound = "memory"
            why = "as bytes/bandwidth predicts: memory-bound"
        out.append({"m": r.m, "k": r.k, "dtype": r.dtype, "predicted_speedup": predicted,
                    "measured_speedup": measured, "contradicts": contradicts, "bound": bound, "verdict": why})
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
    from course_lib.measure.sysinfo import memory_bytes
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
# A whole decode step / prefill of a real (small) model
# --------------------------------------------------------------------------------------------------
def _quartiles(times: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) of per-run seconds (all three equal for a single run)."""
    if len(times) >= 2:
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    else:
        q1 = q3 = times[0]
    return q1, statistics.median(times), q3


def quartiles(times: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) of per-run seconds (all three equal for a single run); ``times`` must not be empty."""
    if isinstance(times, (str, bytes)) or not isinstance(times, Iterable):
        raise TypeError(f"times must be a list of seconds, got {type(times).__name__}")
    ts = [require_nonnegative(f"times[{i}]", t) for i, t in enumerate(times)]
    if not ts:
        raise ValueError("times must hold at least one timing (seconds)")
    return _quartiles(ts)


class Stopwatch:
    """Time whole calls (a prefill, a turn of a chat) as the probes time theirs.

    ``with bench.Stopwatch(device, threads) as sw: seconds, result = sw.time(fn, *args)``: the CPU
    thread count is fixed inside the block (default: all physical cores; ignored on a GPU) and restored
    after it; each timed call is synchronised on a GPU before and after, and timed with the clock
    :func:`use_clock` selects (wall by default). ``sw.threads``: the thread count used (None on a GPU).
    """

    def __init__(self, device=None, threads: int | None = None):
        self.device = _device(device)
        self.threads = _threads(threads, self.device)
        self._pin = _Threads(self.threads)

    def __enter__(self) -> "Stopwatch":
        self._pin.__enter__()
        return self

    def __exit__(self, *exc):
        return self._pin.__exit__(*exc)

    def sync(self):
        """Wait for the device's queued work (a no-op on a CPU)."""
        _sync(self.device)

    def time(self, fn, *args, **kwargs) -> tuple[float, object]:
        """(seconds, return value) of one call ``fn(*args, **kwargs)``, synchronised on a GPU."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        _sync(self.device)
        t0 = _clock()
        out = fn(*args, **kwargs)
        _sync(self.device)
        return _clock() - t0, out


def _check_lm(lm):
    for attr in ("spec", "max_seq", "prefill", "decode_step", "device"):
        if not hasattr(lm, attr):
            raise TypeError(f"lm must be a course_lib.tinylm.TinyLM, got {type(lm).__name__} (no .{attr})")


def _lm_batch(lm, batch) -> int:
    built = int(getattr(lm, "batch", 1) or 1)
    if batch is None:
        return built
    b = require_count("batch", batch, minimum=1)
    if b > built:
        raise ValueError(f"batch={b} but the TinyLM was built with batch={built}: build it with TinyLM(..., batch={b})")
    return b


def _random_prompt(lm, batch: int, tokens: int, gen: torch.Generator) -> torch.Tensor:
    """Random token ids: shape (tokens,) for batch 1, else (batch, tokens)."""
    shape = (tokens,) if batch == 1 else (batch, tokens)
    return torch.randint(0, lm.spec.vocab, shape, generator=gen)


@dataclass(frozen=True)
class DecodeTiming(_Spread):
    """Seconds per decode step of a :class:`course_lib.tinylm.TinyLM` (median over ``steps`` steps).

    ``prompt_tokens``: tokens in the cache before the warm-up steps; the timed steps attend to
    ``first_context`` … ``last_context`` tokens (their own token included). ``batch``: sequences
    decoded together in each step.
    """

    seconds: float
    q1_seconds: float
    q3_seconds: float
    steps: int
    prompt_tokens: int
    threads: int | None
    warmup: int = 3
    batch: int = 1

    @property
    def first_context(self) -> int:
        """Tokens the first timed step attends to (the cached ones plus its own)."""
        return self.prompt_tokens + self.warmup + 1

    @property
    def last_context(self) -> int:
        return self.prompt_tokens + self.warmup + self.steps

    @property
    def mean_context(self) -> float:
        """Mean tokens attended over the timed steps."""
        return (self.first_context + self.last_context) / 2

    @property
    def tokens_per_second(self) -> float:
        """Tokens produced per second over the whole batch."""
        return self.batch / self.seconds


def _decode_run(lm, prompt_tokens, steps, warmup, batch, nthreads, seed) -> DecodeTiming:
    if prompt_tokens + warmup + steps > lm.max_seq:
        raise ValueError(f"prompt_tokens + warmup + steps = {prompt_tokens + warmup + steps} exceed the model's "
                         f"KV cache (max_seq={lm.max_seq})")
    dev = _device(lm.device)
    gen = torch.Generator().manual_seed(seed)
    prompt = _random_prompt(lm, batch, prompt_tokens, gen)
    times = []
    with _Threads(nthreads), torch.inference_mode():
        tok = lm.prefill(prompt)[..., -1, :].argmax(-1)
        for i in range(warmup + steps):
            _sync(dev)
            t0 = _clock()
            tok = lm.decode_step(tok).argmax(-1)
            _sync(dev)
            if i >= warmup:
                times.append(_clock() - t0)
    q1, med, q3 = _quartiles(times)
    return DecodeTiming(med, q1, q3, steps, prompt_tokens, nthreads, warmup, batch)


def measure_decode(lm, prompt_tokens: int = 16, steps: int = 16, threads: int | None = None,
                   warmup: int = 3, batch: int | None = None) -> DecodeTiming:
    """Prefill ``prompt_tokens`` random tokens, then time ``steps`` greedy decode steps one by one.

    Each step is timed separately (synchronised on a GPU); ``warmup`` untimed steps come first.
    ``batch``: sequences decoded together (default: the batch the TinyLM was built with); the
    TinyLM must have been built with ``batch`` at least that large.
    """
    _check_lm(lm)
    prompt_tokens = require_count("prompt_tokens", prompt_tokens, minimum=1)
    steps = require_count("steps", steps, minimum=1)
    warmup = require_count("warmup", warmup)
    b = _lm_batch(lm, batch)
    nthreads = _threads(threads, _device(lm.device))
    return _decode_run(lm, prompt_tokens, steps, warmup, b, nthreads, seed=0)


def measure_decode_contexts(lm, contexts, steps: int = 8, threads: int | None = None, warmup: int = 2,
                            batch: int | None = None) -> list[DecodeTiming]:
    """TPOT at each context length: prefill to that context, then time ``steps`` steps there.

    For each ``c`` in ``contexts``: prefill ``c - warmup`` random tokens, run ``warmup`` untimed
    steps, then time ``steps`` steps one by one (median and quartiles over them). The timed steps
    attend to ``c + 1`` … ``c + steps`` tokens, so the TPOT is that of context ``c`` (plus a few).
    ``c + steps`` must fit in the model's ``max_seq``.
    """
    _check_lm(lm)
    cs = require_counts("contexts", contexts, single=True)
    steps = require_count("steps", steps, minimum=1)
    warmup = require_count("warmup", warmup)
    b = _lm_batch(lm, batch)
    for c in cs:
        if c + steps > lm.max_seq:
            raise ValueError(f"contexts: {c} + steps ({steps}) = {c + steps} exceed the model's KV cache "
                             f"(max_seq={lm.max_seq})")
    nthreads = _threads(threads, _device(lm.device))
    out = []
    for i, c in enumerate(cs):
        w = min(warmup, c - 1)
        out.append(_decode_run(lm, c - w, steps, w, b, nthreads, seed=1000 + i))
    return out


@dataclass(frozen=True)
class PrefillTiming(_Spread):
    """Seconds to prefill ``prompt_tokens`` tokens from an empty cache (median over ``repeats`` prompts)."""

    prompt_tokens: int
    seconds: float
    q1_seconds: float
    q3_seconds: float
    repeats: int
    threads: int | None
    batch: int = 1

    @property
    def tokens_per_second(self) -> float:
        """Prompt tokens processed per second (over the whole batch)."""
        return self.batch * self.prompt_tokens / self.seconds


def measure_prefill(lm, prompt_lengths, repeats: int = 5, threads: int | None = None, warmup: int = 1,
                    batch: int | None = None) -> list[PrefillTiming]:
    """Time prefill (the pass that produces the first token, i.e. TTFT) at each prompt length.

    Each of the ``repeats`` timed runs prefills a fresh random prompt of that length from an empty
    cache (synchronised on a GPU); ``warmup`` untimed prefills of that length come first.
    """
    _check_lm(lm)
    lengths = require_counts("prompt_lengths", prompt_lengths, single=True)
    repeats = require_count("repeats", repeats, minimum=1)
    warmup = require_count("warmup", warmup)
    b = _lm_batch(lm, batch)
    for p in lengths:
        if p > lm.max_seq:
            raise ValueError(f"prompt_lengths: {p} tokens exceed the model's KV cache (max_seq={lm.max_seq})")
    dev = _device(lm.device)
    nthreads = _threads(threads, dev)
    gen = torch.Generator().manual_seed(0)
    out = []
    with _Threads(nthreads), torch.inference_mode():
        for p in lengths:
            times = []
            for i in range(warmup + repeats):
                prompt = _random_prompt(lm, b, p, gen).to(dev)
                _sync(dev)
                t0 = _clock()
                logits = lm.prefill(prompt)
                logits[..., -1, :].argmax(-1)  # the first token, as TTFT counts it
                _sync(dev)
                if i >= warmup:
                    times.append(_clock() - t0)
            q1, med, q3 = _quartiles(times)
            out.append(PrefillTiming(p, med, q1, q3, repeats, nthreads, b))
    return out


# --------------------------------------------------------------------------------------------------
# Per-op dispatch overhead
# --------------------------------------------------------------------------------------------------
#: what :func:`measure_op_overhead` times: tiny ops whose data movement and arithmetic are negligible
OVERHEAD_KINDS = ("elementwise", "matmul", "view")


@dataclass(frozen=True)
class OverheadResult(_Spread):
    """Fixed seconds per small op (framework dispatch + kernel launch), independent of tinylm.

    Hot (a tight loop of one op, everything cached): ``per_kind`` holds the median seconds per op of
    each kind in :data:`OVERHEAD_KINDS` (``elementwise``: an add of two 8-element vectors;
    ``matmul``: a 1×8 by 8×8 ``F.linear``; ``view``: a reshape that moves no data); ``seconds`` is
    the mean of ``elementwise`` and ``matmul`` (ops that launch a kernel), q1/q3 likewise.

    Cold (``cold_seconds``, ``cold_view_seconds``): seconds per op of a run of distinct small ops
    (norm-, rotary- and residual-style ops on a 1×1024 vector; then views) timed right after
    ``flush_bytes`` were streamed through memory, as a decode step streams its weights between its
    small ops. On a CPU that stream evicts the framework's code and data from the caches and every op
    pays memory latency: several times the hot cost. On a GPU the weights stream through the GPU's
    memory, not the host's caches: no flush is done (``flush_bytes=0``) and cold ≈ hot.
    """

    seconds: float
    q1_seconds: float
    q3_seconds: float
    per_kind: dict
    repeats: int
    device: str
    threads: int | None
    cold_seconds: float | None = None
    cold_view_seconds: float | None = None
    cold_q1_seconds: float | None = None
    cold_q3_seconds: float | None = None
    flush_bytes: int = 0
    cold_runs: int = 0

    @property
    def cold_spread(self) -> float | None:
        if self.cold_seconds is None:
            return None
        return (self.cold_q3_seconds - self.cold_q1_seconds) / self.cold_seconds

    @property
    def microseconds(self) -> float:
        return self.seconds * 1e6

    @property
    def cold_factor(self) -> float | None:
        """How many times a cold op costs a hot one."""
        return None if self.cold_seconds is None else self.cold_seconds / self.seconds

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(spread=self.spread, microseconds=self.microseconds, cold_factor=self.cold_factor)
        return d


#: small ops of the cold run (a norm, rotary embedding, residual and gated-MLP style sequence)
COLD_COMPUTE_OPS = 14
COLD_VIEW_OPS = 8


def _cold_runs(dev, flush_bytes: int, runs: int):
    """Per-op seconds of a run of distinct compute ops and of view ops, each timed after a flush."""
    from torch.nn import functional as F
    n = 1024
    a = torch.randn(1, 1, n, device=dev)
    b = torch.randn(1, 1, n, device=dev)
    w = torch.ones(n, device=dev)
    table = torch.randn(256, n // 16, device=dev)
    cache = torch.zeros(1, 4, 256, n // 16, device=dev)
    pos = torch.tensor([7], device=dev)

    def compute():  # 14 ops
        h = a.pow(2).mean(-1, keepdim=True)             # pow, mean
        h = a * torch.rsqrt(h + 1e-5) * w               # add, rsqrt, mul, mul
        c = table[pos]                                  # index
        r = torch.cat([-b[..., n // 2:], b[..., :n // 2]], -1)  # neg, cat
        r = b * c.repeat(1, 16).view(1, 1, n) + r       # repeat, mul, add
        cache[0, :, 7].copy_(r.view(4, n // 4)[:, : n // 16])    # copy_
        return h + F.silu(r)                            # silu, add

    def views():  # 8 views
        v = a.view(1, n).transpose(0, 1).reshape(n)
        v = v[: n // 2].unsqueeze(0).select(0, 0).view(2, -1)
        return v.t()

    flush_src = flush_dst = None
    if flush_bytes:
        flush_src = torch.ones(flush_bytes // 8, device=dev)
        flush_dst = torch.empty_like(flush_src)
    out = {"compute": [], "view": []}
    for i in range(runs + 2):
        for kind, fn, k in (("compute", compute, COLD_COMPUTE_OPS), ("view", views, COLD_VIEW_OPS)):
            if flush_src is not None:
                flush_dst.copy_(flush_src)
            _sync(dev)
            t0 = _clock()
            fn()
            _sync(dev)
            if i >= 2:  # two warm-up rounds
                out[kind].append((_clock() - t0) / k)
    return out


def measure_op_overhead(threads: int | None = None, device=None, repeats: int | None = None,
                        min_block: float | None = None, cold: bool = True, flush_bytes: int | None = None,
                        cold_runs: int | None = None) -> OverheadResult:
    """The fixed cost of one small PyTorch op on this machine: what a roofline leaves out.

    A decode step launches hundreds of ops; each costs a fixed time (Python call, dispatcher,
    allocation, and on a GPU the kernel launch) however few bytes it moves. Hot: ops on 8-element
    tensors in a tight loop (timed like the other probes: calibrated blocks, median and quartiles
    over ``repeats``). Cold (``cold=True``): runs of distinct small ops each timed after streaming
    ``flush_bytes`` (default 2 × the last-level cache, CPU only) through memory; ``cold_runs`` runs
    (default 30, fast mode 8). All under ``torch.inference_mode()``, as a model's forward pass runs.
    """
    from torch.nn import functional as F
    dev = _device(device)
    repeats, min_block = _settings(repeats, min_block)
    if not isinstance(cold, bool):
        raise TypeError(f"cold must be True or False, got {cold!r}")
    nthreads = _threads(threads, dev)
    if flush_bytes is None:
        flush_bytes = 0 if dev.type == "cuda" else 2 * (last_level_cache_bytes(dev) or FALLBACK_LLC_BYTES)
        flush_bytes = min(flush_bytes, _memory_budget(dev) // 4)
    flush_bytes = require_count("flush_bytes", flush_bytes)
    runs = (8 if fast_mode() else 30) if cold_runs is None else require_count("cold_runs", cold_runs, minimum=1)
    per_kind, q1s, q3s = {}, {}, {}
    cold_res = None
    with _Threads(nthreads), torch.inference_mode():
        x = torch.randn(1, 8, device=dev)
        y = torch.randn(1, 8, device=dev)
        w = torch.randn(8, 8, device=dev)
        calls = {"elementwise": lambda: x.add(y), "matmul": lambda: F.linear(x, w), "view": lambda: x.view(8)}
        for kind in OVERHEAD_KINDS:
            t = _timeit([calls[kind]], dev, repeats, min_block)
            per_kind[kind], q1s[kind], q3s[kind] = t.median, t.q1, t.q3
        if cold:
            cold_res = _cold_runs(dev, flush_bytes, runs)
    mean = lambda d: (d["elementwise"] + d["matmul"]) / 2  # noqa: E731
    extra = {}
    if cold_res is not None:
        cq1, cmed, cq3 = _quartiles(cold_res["compute"])
        extra = dict(cold_seconds=cmed, cold_q1_seconds=cq1, cold_q3_seconds=cq3,
                     cold_view_seconds=statistics.median(cold_res["view"]), flush_bytes=flush_bytes, cold_runs=runs)
    return OverheadResult(seconds=mean(per_kind), q1_seconds=mean(q1s), q3_seconds=mean(q3s), per_kind=per_kind,
                          repeats=repeats, device=dev.type, threads=nthreads, **extra)


# --------------------------------------------------------------------------------------------------
# A linear layer at a given shape (prefill's GEMMs, decode's GEMVs) and attention's K/V reads
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LinearResult(_Rates):
    """``F.linear(x, W)``: ``tokens`` rows of x (tokens × k) times W (m × k) transposed.

    ``tokens=1`` is a decode step's matrix-vector product; ``tokens=P`` a prefill GEMM. ``bytes``
    counts W and x read and the output written; ``flops`` = 2·tokens·m·k.
    """

    tokens: int
    m: int
    k: int
    dtype: str
    device: str
    bytes: int
    flops: int
    seconds: float
    q1_seconds: float
    q3_seconds: float
    repeats: int
    buffers: int
    threads: int | None





def measure_linear(tokens: int, m: int, k: int, dtype: str = "fp32", repeats: int | None = None,
                   threads: int | None = None, device=None, rotate: bool = True,
                   min_block: float | None = None) -> LinearResult:
    """Time one linear layer of shape (m × k) applied to ``tokens`` rows, weights rotated beyond the LLC.

    The achieved bytes/s (``tokens=1``) or FLOP/s (large ``tokens``) of a layer depends on its shape,
    not only on its size: a 32000 × 1024 matrix streams slower than a 4096 × 4096 one on many CPUs
    (short rows: each dot product's reduction and store weigh more). This probe times the shapes a
    model uses, on random matrices; the model itself is not run.
    """
    from torch.nn import functional as F
    dev = _device(device)
    tokens = require_count("tokens", tokens, minimum=1)
    m = require_count("m", m, minimum=1)
    k = require_count("k", k, minimum=1)
    dtype = require_choice("dtype", dtype, DTYPES)
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be True or False, got {rotate!r}")
    repeats, min_block = _settings(repeats, min_block)
    nthreads = _threads(threads, dev)
    tdt = DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    mbytes = m * k * esize
    budget = _memory_budget(dev)
    if mbytes + (tokens * (m + k)) * esize > budget:
        raise ValueError(f"a {m} × {k} {dtype} layer on {tokens} tokens needs more than the "
                         f"{budget / 1e9:.2f} GB this device allows the probe")
    llc = last_level_cache_bytes(dev)
    nbuf = min(rotation_buffers(mbytes, llc, rotate), max(1, budget // (2 * mbytes)), MAX_BUFFERS)
    with _Threads(nthreads), torch.inference_mode():
        gen = torch.Generator(device="cpu").manual_seed(m * 31 + k)
        first = (torch.randn(m, k, generator=gen) * 0.02).to(device=dev, dtype=tdt)
        if nbuf == 1:
            weights = [first]
        else:
            block = torch.empty((nbuf, m, k), device=dev, dtype=tdt)
            block.copy_(first.expand(nbuf, m, k))
            weights = list(block.unbind(0))
            del block
        x = torch.randn(1, tokens, k, generator=gen).to(device=dev, dtype=tdt)
        calls = [(lambda W=W: F.linear(x, W)) for W in weights]
        t = _timeit(calls, dev, repeats, min_block)
        del weights, calls, first
    return LinearResult(tokens=tokens, m=m, k=k, dtype=dtype, device=dev.type,
                        bytes=(m * k + tokens * k + tokens * m) * esize, flops=2 * tokens * m * k,
                        seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3, repeats=repeats, buffers=nbuf,
                        threads=nthreads)


@dataclass(frozen=True)
class KVReadResult(_Rates):
    """One decode step's attention over ``context`` cached tokens of one layer, on random K/V.

    ``bytes`` = the K and V read: 2·kv_heads·context·head_dim elements. ``bandwidth`` is the rate
    attention achieves reading them (scores = q·Kᵀ, softmax, weights·V, the ``group`` query heads of
    a KV head sharing its K/V without copies).
    """

    kv_heads: int
    group: int
    head_dim: int
    context: int
    dtype: str
    device: str
    bytes: int
    seconds: float
    q1_seconds: float
    q3_seconds: float
    repeats: int
    buffers: int
    threads: int | None





def measure_kv_read(kv_heads: int = 8, group: int = 4, head_dim: int = 128, context: int = 4096,
                    dtype: str = "fp32", repeats: int | None = None, threads: int | None = None, device=None,
                    min_block: float | None = None) -> KVReadResult:
    """The rate at which decode attention reads the KV cache, on random tensors (no model involved).

    Per call: q (kv_heads, group, head_dim) against K and V (kv_heads, context, head_dim):
    ``softmax(q Kᵀ / √d) V``: grouped-query attention with the K/V of each KV head read once for all
    its ``group`` query heads. K/V buffers rotate so that their total exceeds 4 × the LLC.
    """
    dev = _device(device)
    kvh = require_count("kv_heads", kv_heads, minimum=1)
    grp = require_count("group", group, minimum=1)
    d = require_count("head_dim", head_dim, minimum=1)
    c = require_count("context", context, minimum=1)
    dtype = require_choice("dtype", dtype, DTYPES)
    repeats, min_block = _settings(repeats, min_block)
    nthreads = _threads(threads, dev)
    tdt = DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    kv_bytes = 2 * kvh * c * d * esize
    budget = _memory_budget(dev)
    if kv_bytes > budget:
        raise ValueError(f"K/V of {c} tokens need {kv_bytes / 1e9:.2f} GB; this device allows the probe "
                         f"{budget / 1e9:.2f} GB")
    nbuf = min(rotation_buffers(kv_bytes, last_level_cache_bytes(dev)), max(1, budget // kv_bytes), 4096)
    scale = 1.0 / math.sqrt(d)
    with _Threads(nthreads), torch.inference_mode():
        gen = torch.Generator(device="cpu").manual_seed(c * 7 + d)
        first = torch.randn(2, kvh, c, d, generator=gen).to(device=dev, dtype=tdt)
        block = torch.empty((nbuf, 2, kvh, c, d), device=dev, dtype=tdt)
        block.copy_(first.expand(nbuf, 2, kvh, c, d))
        q = torch.randn(kvh, grp, d, generator=gen).to(device=dev, dtype=tdt)

        def attend(kv):
            return ((q @ kv[0].transpose(-1, -2)) * scale).softmax(-1) @ kv[1]

        calls = [(lambda kv=kv: attend(kv)) for kv in block.unbind(0)]
        t = _timeit(calls, dev, repeats, min_block)
        del block, calls, first
    return KVReadResult(kv_heads=kvh, group=grp, head_dim=d, context=c, dtype=dtype, device=dev.type,
                        bytes=kv_bytes, seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3, repeats=repeats,
                        buffers=nbuf, threads=nthreads)
