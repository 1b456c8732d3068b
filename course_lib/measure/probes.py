"""Probes: small timed operations on random tensors, each counting its bytes and FLOP exactly.

Lessons: 05, 06, 07, 08, 09

GEMV, copy, matmul and which dtypes run well; for :mod:`course_lib.measure.calibrate`, a linear layer at a
model's shape, the K/V read of decode attention, the per-op overhead, the score passes and attention products
of a prefill::

    from course_lib.measure import probes
    table = probes.measure_gemv()                 # y = W·x over sizes and dtypes, this machine
    copy = probes.measure_copy_bandwidth()        # practical memory ceiling (read + write counted)
    mm = probes.measure_matmul_flops()            # practical compute ceiling
    probes.measure_op_overhead()                  # fixed seconds per small op, hot and cold
    probes.measure_linear(1, 32000, 1024)         # one linear layer at a model's exact shape
    probes.measure_kv_read(8, 4, 128, 4096)       # the rate decode attention reads K/V

A decode step at batch 1 is a chain of matrix-vector products: every weight is read once and used
for one multiply-add. The probes time that with :mod:`course_lib.measure.timing` (warm-up,
calibrated blocks, median and quartiles, a fixed thread count) and **rotate over distinct buffers**
whose total size in **bytes** exceeds 4 × the last-level cache the cores in use share
(:func:`rotation_plan` sizes it, :func:`rotated_copies` allocates it: written once, used by the GEMV,
linear-layer and K/V-read probes), so that a small matrix is read from memory and not from the cache
of the previous call. With ``rotate=False`` the same buffer is reused and small matrices are served
from cache: the difference is the "tens of MB of cache" effect. The rotation stops at the device's
memory budget (:func:`course_lib.measure.device.memory_budget`: a stated share of the memory
available, smaller in fast mode) and at :data:`MAX_BUFFERS` buffers; where either keeps the working
set within 4 × the LLC the result says so: ``beyond_cache`` is False and ``cache_reason`` says why,
in a sentence a lesson can print.

**Noisy timings are retried** (:func:`course_lib.measure.steady.steady_timeit`): when a probe's repeats disagree
(the verdict of :func:`course_lib.core.quality.timing_verdict` is noisy or contended), it is timed again with
fewer threads and longer blocks, up to :func:`course_lib.measure.steady.probe_attempts` attempts (one under
``COURSE_FAST=1``); the result's ``threads`` is the count of the attempt kept.

Bytes and FLOP per call are counted exactly: a GEMV reads the matrix (m·k elements) and the vector
(k) and writes the result (m); it does 2·m·k FLOP. A copy reads and writes its buffer: both are
counted (read + write), as GPU vendors and the course's H200 measurement do.

Every probe takes ``clock=`` (None: :func:`course_lib.measure.timing.clock_name`). Set the environment
variable ``COURSE_FAST=1`` for tiny sizes and few repeats (the test suite).
"""
from __future__ import annotations

import math
import numbers
import statistics
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from course_lib.core.validation import require_choice, require_count, require_flag, require_positive
from course_lib.measure.device import (FALLBACK_LLC_BYTES, fast_mode, last_level_cache_bytes, memory_budget,
                                       memory_budget_note, resolve_device)
from course_lib.measure.steady import steady_timeit
from course_lib.measure.timing import (Spread, Threads, clock_function, progress_bar, quartiles, repeat_settings,
                                       sync, thread_count, timeit)

__all__ = [
    "DTYPES", "ROTATION_FACTOR", "MAX_BUFFERS", "Rates", "cache_verdict", "CacheVerdict", "RotationPlan",
    "rotation_buffers", "rotation_plan", "rotated_copies", "probe_limits",
    "gemv_bytes", "gemv_flops", "GemvResult", "GemvTable", "SWEEP_SIZES", "beyond_cache_size",
    "default_sizes", "gemv_shapes", "measure_gemv",
    "CopyResult", "measure_copy_bandwidth", "MatmulResult", "measure_matmul_flops",
    "DtypeProbe", "FAST_FRACTION", "probe_dtypes", "fast_dtypes",
    "OVERHEAD_KINDS", "OverheadResult", "COLD_COMPUTE_OPS", "COLD_VIEW_OPS", "measure_op_overhead",
    "LinearResult", "measure_linear", "KVReadResult", "measure_kv_read",
    "measure_score_passes", "measure_attention_products",
]

#: the dtypes the probes time, by course precision name
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

#: rotation makes the working set larger than this many last-level caches
ROTATION_FACTOR = 4
#: at most this many rotation buffers in any probe: each costs about 1 KB of Python objects and 15 µs to set
#: up besides its bytes (64 × 64 fp32 matrices: 131072 × 16 KiB = 2 GiB, beyond 4 × an LLC of up to 512 MiB).
#: Not a silent cap: a result it stops short of 4 × the LLC has ``beyond_cache`` False and says so.
MAX_BUFFERS = 131072


class Rates(Spread):
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


# --------------------------------------------------------------------------------------------------
# Rotation beyond the cache: sized in bytes, bounded by the memory budget (one definition for every probe)
# --------------------------------------------------------------------------------------------------
def _iec(n: int, digits: int = 3) -> str:
    from course_lib.core.units import format_bytes
    return format_bytes(n, system="iec", digits=digits)


def _iec_apart(a: int, b: int) -> tuple[str, str]:
    """``a`` and ``b`` in IEC units, with as many digits as it takes to print different numbers differently."""
    for digits in range(3, 8):
        sa, sb = _iec(a, digits), _iec(b, digits)
        if sa != sb or a == b:
            break
    return sa, sb


def cache_verdict(working_set_bytes: int, llc_bytes: int | None, *, rotate: bool = True, buffers: int = 1,
                  wanted_buffers: int | None = None, budget_bytes: int | None = None,
                  budget_note: str = "") -> tuple[bool | None, str]:
    """(beyond_cache, cache_reason): whether ``working_set_bytes`` exceed 4 × ``llc_bytes``, and why in words.

    ``beyond_cache`` is None when the LLC is unknown. The reason names what kept the working set
    inside the cache: the reuse of one buffer (``rotate=False``), the :data:`MAX_BUFFERS` limit
    (``wanted_buffers`` above it) or the memory budget (``budget_bytes``, described by ``budget_note``).
    """
    working_set_bytes = require_count("working_set_bytes", working_set_bytes)
    llc_bytes = None if llc_bytes is None else require_count("llc_bytes", llc_bytes, minimum=1)
    rotate = require_flag("rotate", rotate)
    buffers = require_count("buffers", buffers, minimum=1)
    wanted_buffers = None if wanted_buffers is None else require_count("wanted_buffers", wanted_buffers, minimum=1)
    budget_bytes = None if budget_bytes is None else require_count("budget_bytes", budget_bytes)
    if not isinstance(budget_note, str):
        raise TypeError(f"budget_note must be a string, got {type(budget_note).__name__}")
    if llc_bytes is None:
        return None, (f"the OS did not report the last-level cache, so whether the working set "
                      f"{_iec(working_set_bytes)} exceeds it is unknown (the rotation was sized against an assumed "
                      f"{_iec(FALLBACK_LLC_BYTES)})")
    ws, four = _iec_apart(working_set_bytes, ROTATION_FACTOR * llc_bytes)
    limit = f"{ROTATION_FACTOR} × the {_iec(llc_bytes)} last-level cache ({four})"
    if working_set_bytes > ROTATION_FACTOR * llc_bytes:
        return True, f"working set {ws} is beyond {limit}: every call reads memory"
    why = f"working set {ws} is below {limit}"
    if not rotate:
        return False, f"{why}: one buffer is reused (rotate=False), so after the first call it can come from cache"
    if wanted_buffers is not None and wanted_buffers > buffers and buffers >= MAX_BUFFERS:
        return False, (f"{why}: it would take {wanted_buffers:,} buffers of {_iec(working_set_bytes // buffers)}, "
                       f"more than the {MAX_BUFFERS:,} a probe makes; time a larger matrix")
    if budget_bytes is not None and (wanted_buffers is None or wanted_buffers > buffers):
        note = f" ({budget_note})" if budget_note else ""
        return False, f"{why}: the memory budget {_iec(budget_bytes)}{note} allows no more"
    return False, why


class CacheVerdict:
    """Mixin for a result with ``working_set_bytes`` and ``llc_bytes``: ``beyond_cache``, a filled ``cache_reason``."""

    @property
    def beyond_cache(self) -> bool | None:
        """True when the bytes cycled through exceed 4 × the last-level cache (None: cache unknown)."""
        if self.llc_bytes is None:
            return None
        return self.working_set_bytes > ROTATION_FACTOR * self.llc_bytes

    def __post_init__(self):
        if not self.cache_reason:  # built by hand (tests, profiles): the reason follows from the fields
            _, why = cache_verdict(self.working_set_bytes, self.llc_bytes, rotate=getattr(self, "rotate", True),
                                   buffers=max(1, getattr(self, "buffers", 1)), budget_bytes=self.budget_bytes)
            object.__setattr__(self, "cache_reason", why)


@dataclass(frozen=True)
class RotationPlan:
    """How many buffers of ``item_bytes`` a probe cycles through, and whether that exceeds 4 × the LLC."""

    item_bytes: int
    buffers: int
    wanted_buffers: int         # what 4 × the LLC asks for, before the budget and MAX_BUFFERS
    llc_bytes: int | None
    budget_bytes: int
    beyond_cache: bool | None
    cache_reason: str

    @property
    def working_set_bytes(self) -> int:
        """Bytes of all buffers: what the probe holds (:func:`rotated_copies` makes no extra copy)."""
        return self.buffers * self.item_bytes


def rotation_buffers(matrix_bytes: int, llc_bytes: int | None, rotate: bool = True) -> int:
    """How many distinct buffers of ``matrix_bytes`` together exceed 4 × the LLC (no limit applied)."""
    matrix_bytes = require_count("matrix_bytes", matrix_bytes, minimum=1)
    llc_bytes = None if llc_bytes is None else require_count("llc_bytes", llc_bytes)  # 0: unknown, as None
    if not require_flag("rotate", rotate):
        return 1
    target = ROTATION_FACTOR * (llc_bytes if llc_bytes else FALLBACK_LLC_BYTES)
    return target // matrix_bytes + 1


def rotation_plan(item_bytes: int, llc_bytes: int | None, budget_bytes: int, rotate: bool = True,
                  reserve_bytes: int = 0, budget_note: str = "", what: str = "this probe") -> RotationPlan:
    """The rotation of every rotating probe: enough buffers of ``item_bytes`` to exceed 4 × ``llc_bytes``, as
    far as ``budget_bytes`` (less ``reserve_bytes`` for the probe's other tensors) and :data:`MAX_BUFFERS` allow.

    ValueError when even one buffer does not fit.
    """
    item_bytes = require_count("item_bytes", item_bytes, minimum=1)
    budget_bytes = require_count("budget_bytes", budget_bytes, minimum=1)
    reserve_bytes = require_count("reserve_bytes", reserve_bytes)
    room = budget_bytes - reserve_bytes
    if item_bytes > room:
        note = f" ({budget_note})" if budget_note else ""
        raise ValueError(f"{what} needs {_iec(item_bytes + reserve_bytes)}; the memory budget of one probe is "
                         f"{_iec(budget_bytes)}{note}: choose smaller sizes")
    wanted = rotation_buffers(item_bytes, llc_bytes, rotate)
    nbuf = max(1, min(wanted, room // item_bytes, MAX_BUFFERS))
    beyond, why = cache_verdict(nbuf * item_bytes, llc_bytes, rotate=rotate, buffers=nbuf, wanted_buffers=wanted,
                                budget_bytes=budget_bytes, budget_note=budget_note)
    return RotationPlan(item_bytes=item_bytes, buffers=nbuf, wanted_buffers=wanted, llc_bytes=llc_bytes,
                        budget_bytes=budget_bytes, beyond_cache=beyond, cache_reason=why)


def rotated_copies(first: torch.Tensor, count: int) -> list[torch.Tensor]:
    """``count`` distinct tensors holding ``first``'s values: ``first`` itself and ``count - 1`` copies in one block.

    The allocator of every rotating probe. The tensors share the values (timing ignores them) but not
    the memory: cycling through them reads ``count`` × ``first``'s bytes, and that is all they hold
    (``first`` is one of them, so no extra source copy is kept).
    """
    count = require_count("count", count, minimum=1)
    if count == 1:
        return [first]
    block = torch.empty((count - 1, *first.shape), device=first.device, dtype=first.dtype)
    block.copy_(first.expand(count - 1, *first.shape))
    return [first, *block.unbind(0)]


def probe_limits(device=None, llc_bytes: int | None = None, budget_bytes: int | None = None
                 ) -> tuple[int | None, int, str]:
    """(LLC bytes, budget bytes, how the budget was chosen) for a probe on ``device``: the values given, else
    the device's (:func:`~course_lib.measure.device.last_level_cache_bytes`,
    :func:`~course_lib.measure.device.memory_budget_note`). Tests pass both, so no host figure is read."""
    dev = resolve_device(device)
    llc = last_level_cache_bytes(dev) if llc_bytes is None else require_count("llc_bytes", llc_bytes, minimum=1)
    if budget_bytes is None:
        budget, note = memory_budget_note(dev)
    else:
        budget, note = require_count("budget_bytes", budget_bytes, minimum=1), "as given by budget_bytes"
    return llc, budget, note


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
class GemvResult(CacheVerdict, Rates):
    """One timed GEMV shape: seconds are per call (median over repeats; q1/q3 the quartiles).

    ``beyond_cache``: whether the bytes cycled through exceeded 4 × the LLC (None: LLC unknown);
    ``cache_reason``: that verdict in words, with what stopped the rotation short where it did.
    """

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
    budget_bytes: int | None = None     # the memory budget the rotation had
    cache_reason: str = ""              # beyond_cache in words (filled from the fields when not given)

    @property
    def matrix_bytes(self) -> int:
        return self.m * self.k * self.element_bytes

    @property
    def bandwidth_range(self) -> tuple[float, float]:
        """(low, high) achieved bytes/s over the middle half of the runs (from q3 and q1)."""
        return self.bytes / self.q3_seconds, self.bytes / self.q1_seconds

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(spread=self.spread, bandwidth=self.bandwidth, gb_per_s=self.gb_per_s,
                 gflop_per_s=self.gflop_per_s, matrix_bytes=self.matrix_bytes, beyond_cache=self.beyond_cache)
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
        lines = ["| m × k | dtype | matrix | rotate | time per call (median) | spread (IQR) | GB/s | GFLOP/s "
                 "| working set > 4 × LLC |",
                 "|---|---|---|---|---|---|---|---|---|"]
        beyond = {True: "yes", False: "no", None: "unknown"}
        for r in self:
            lines.append(f"| {r.m} × {r.k} | {r.dtype} | {format_bytes(r.matrix_bytes, system='iec')} | "
                         f"{'yes' if r.rotate else 'no'} | {r.seconds * 1e6:.1f} µs | ±{r.spread / 2:.1%} | "
                         f"{r.gb_per_s:.2f} | {r.gflop_per_s:.2f} | {beyond[r.beyond_cache]} |")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self._markdown()

    def __str__(self) -> str:
        return self._markdown()


#: the square sizes of the sweeps below the size that passes the cache (``full`` adds sizes up to it)
SWEEP_SIZES = {"fast": (64, 256, 1024), "default": (256, 512, 1024, 2048, 4096, 8192),
               "full": (128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)}


def beyond_cache_size(llc_bytes: int | None, element_bytes: int = 4, step: int = 1024) -> int:
    """The smallest n (a multiple of ``step``) whose n × n matrix of ``element_bytes`` exceeds 4 × ``llc_bytes``
    (:data:`~course_lib.measure.device.FALLBACK_LLC_BYTES` when unknown)."""
    llc = require_count("llc_bytes", llc_bytes, minimum=1) if llc_bytes is not None else FALLBACK_LLC_BYTES
    element_bytes = require_count("element_bytes", element_bytes, minimum=1)
    step = require_count("step", step, minimum=1)
    n = math.isqrt(ROTATION_FACTOR * llc // element_bytes)
    return (n // step + 1) * step


def default_sizes(device=None, full: bool = False, llc_bytes: int | None = None,
                  budget_bytes: int | None = None) -> list[tuple[int, int]]:
    """Square sizes for a sweep, each of whose fp32 matrices fits the memory budget (the smallest always kept).

    Fast mode (``COURSE_FAST=1``): 64, 256, 1024. Default: 256 to 8192 (a GPU adds 16384). ``full``: denser,
    and on to the first size whose one matrix exceeds 4 × the LLC (:func:`beyond_cache_size`; steps of
    about 1.5×), so that the same-buffer curve leaves the cache too, whatever its size, as far as the
    memory budget allows. ``llc_bytes`` / ``budget_bytes``: default the device's (:func:`probe_limits`).
    """
    dev = resolve_device(device)
    if not isinstance(full, bool):
        raise TypeError(f"full must be True or False, got {full!r}")
    llc, budget, _ = probe_limits(dev, llc_bytes, budget_bytes)
    if fast_mode():
        sizes = list(SWEEP_SIZES["fast"])
    elif full:
        sizes = list(SWEEP_SIZES["full"]) + ([12288, 16384] if dev.type == "cuda" else [])
        target = beyond_cache_size(llc)
        while sizes[-1] < target:
            sizes.append(min(target, -(-sizes[-1] * 3 // 2 // 1024) * 1024))
    else:
        sizes = list(SWEEP_SIZES["default"]) + ([16384] if dev.type == "cuda" else [])
    fits = [n for n in sizes if 4 * (n * n + 2 * n) <= budget]
    return [(n, n) for n in (fits or sizes[:1])]


def gemv_shapes(sizes) -> list[tuple[int, int]]:
    """``sizes`` (n, an (m, k) pair, or a list of them) as a checked list of (m, k) pairs."""
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
    for i, s in enumerate(items):
        if isinstance(s, (tuple, list)):
            if len(s) != 2:
                raise ValueError(f"sizes[{i}]: each entry is n or (m, k), got {s!r}")
            out.append((require_count(f"sizes[{i}] m", s[0], minimum=1),
                        require_count(f"sizes[{i}] k", s[1], minimum=1)))
        else:
            n = require_count("sizes" if len(items) == 1 else f"sizes[{i}]", s, minimum=1)
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


def _cpu(threads: int | None, dev) -> int | None:
    """The thread count a retry may lower: the CPU's; None on a GPU (its kernels ignore CPU threads)."""
    return threads if dev.type == "cpu" else None


def _random(shape, gen, dtype, dev) -> torch.Tensor:
    """Seeded standard-normal values of ``shape`` in ``dtype`` on ``dev`` (drawn on the CPU: one stream)."""
    return torch.randn(*shape, generator=gen).to(device=dev, dtype=dtype)


def _gemv_one(m, k, dtype, dev, rotate, llc, repeats, min_block, threads, budget, note, clock) -> GemvResult:
    tdt = DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    mbytes = m * k * esize
    plan = rotation_plan(mbytes, llc, budget, rotate, reserve_bytes=(m + k) * esize, budget_note=note,
                         what=f"a {m} × {k} {dtype} GEMV")
    gen = torch.Generator(device="cpu").manual_seed(m * 7919 + k)
    weights = rotated_copies(_random((m, k), gen, tdt, dev), plan.buffers)
    x = _random((k,), gen, tdt, dev)
    y = torch.empty(m, device=dev, dtype=tdt)
    calls = [(lambda W=W: torch.mv(W, x, out=y)) for W in weights]
    with torch.inference_mode():
        t = steady_timeit(calls, dev, repeats, min_block, clock, _cpu(threads, dev))
    del weights, calls
    return GemvResult(m=m, k=k, dtype=dtype, device=dev.type, element_bytes=esize,
                      bytes=(m * k + k + m) * esize, flops=2 * m * k,
                      seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3, min_seconds=t.minimum,
                      repeats=t.repeats, number=t.number, rotate=bool(rotate), buffers=plan.buffers,
                      working_set_bytes=plan.working_set_bytes, llc_bytes=llc, threads=t.threads or threads,
                      budget_bytes=budget, cache_reason=plan.cache_reason)


def measure_gemv(sizes=None, dtypes=None, repeats: int | None = None, rotate: bool = True,
                 threads: int | None = None, device=None, min_block: float | None = None,
                 progress: bool = True, llc_bytes: int | None = None, clock: str | None = None,
                 budget_bytes: int | None = None, reuse=None) -> GemvTable:
    """Time y = W·x for every (size, dtype); one :class:`GemvResult` row each.

    ``sizes``: n (square) or (m, k) pairs; default :func:`default_sizes`. ``dtypes``: names from
    :data:`DTYPES`; default the ones this device runs well (:func:`fast_dtypes`: fp32, plus fp16/bf16
    where a fast kernel exists). ``rotate``: cycle through distinct weight buffers totalling more than
    4 × the last-level cache (``False``: one buffer, so small matrices stay in cache). ``threads``:
    CPU threads (default: physical cores), restored afterwards. ``repeats``: timed blocks
    (median and quartiles over them); ``min_block``: seconds each block lasts at least. ``llc_bytes``:
    the last-level cache the rotation is sized against and ``budget_bytes`` the memory it may use
    (defaults: the device's, see :func:`probe_limits`). Each row's ``beyond_cache`` and ``cache_reason``
    say whether its working set exceeded 4 × the LLC. ``reuse``: rows already measured (another call's table, e.g.
    a sweep's): a (size, dtype) found there with the same rotation, device, last-level cache and memory budget is
    that very row, not timed again, so that one operation has one measurement however many tables show it.
    """
    dev = resolve_device(device)
    llc, budget, note = probe_limits(dev, llc_bytes, budget_bytes)
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be True or False, got {rotate!r}")
    have = _reusable(reuse, dev.type, rotate, llc, budget)
    shapes = gemv_shapes(default_sizes(dev, llc_bytes=llc, budget_bytes=budget) if sizes is None else sizes)
    names = _dtypes(dtypes, dev)
    repeats, min_block = repeat_settings(repeats, min_block)
    nthreads = thread_count(threads, dev)
    jobs = [(m, k, d) for (m, k) in shapes for d in names]
    table = GemvTable()
    with Threads(nthreads), progress_bar(jobs, desc="GEMV", unit="shape", enabled=progress) as bar:
        for m, k, d in bar:
            bar.set_postfix_str(f"{m}×{k} {d}")
            row = have.get((m, k, d))
            table.append(row if row is not None else
                         _gemv_one(m, k, d, dev, rotate, llc, repeats, min_block, nthreads, budget, note, clock))
    return table


def _reusable(reuse, device_type: str, rotate: bool, llc, budget) -> dict:
    """{(m, k, dtype): row} of the rows of ``reuse`` measured as this call would measure them."""
    if reuse is None:
        return {}
    if isinstance(reuse, (str, bytes)) or not hasattr(reuse, "__iter__"):
        raise TypeError(f"reuse must be a list of GemvResult rows (a measure_gemv() table), got {type(reuse).__name__}")
    rows = list(reuse)
    bad = [type(r).__name__ for r in rows if not isinstance(r, GemvResult)]
    if bad:
        raise TypeError(f"reuse must be a list of GemvResult rows (a measure_gemv() table), got a {bad[0]}")
    return {(r.m, r.k, r.dtype): r for r in rows
            if (r.device, r.rotate, r.llc_bytes, r.budget_bytes) == (device_type, rotate, llc, budget)}


# --------------------------------------------------------------------------------------------------
# Ceilings: copy bandwidth and matmul FLOP/s
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CopyResult(CacheVerdict, Rates):
    """``dst.copy_(src)`` of one buffer: bytes counts the read AND the write (2 × buffer bytes).

    ``working_set_bytes`` = source + destination; ``beyond_cache`` / ``cache_reason`` as for a GEMV row.
    """

    buffer_bytes: int
    bytes: int                  # moved per copy: read + write
    counted: str                # "read+write"
    seconds: float
    q1_seconds: float
    q3_seconds: float
    repeats: int
    device: str
    threads: int | None
    llc_bytes: int | None = None
    budget_bytes: int | None = None
    working_set_bytes: int = 0          # 0: 2 × buffer_bytes (filled in)
    cache_reason: str = ""

    def __post_init__(self):
        if not self.working_set_bytes:
            object.__setattr__(self, "working_set_bytes", 2 * self.buffer_bytes)
        super().__post_init__()

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(bandwidth=self.bandwidth, gb_per_s=self.gb_per_s, spread=self.spread, beyond_cache=self.beyond_cache)
        return d


def measure_copy_bandwidth(buffer_bytes: int | None = None, repeats: int | None = None, threads: int | None = None,
                           device=None, min_block: float | None = None, clock: str | None = None,
                           llc_bytes: int | None = None, budget_bytes: int | None = None) -> CopyResult:
    """The practical memory ceiling: copy a buffer of ``buffer_bytes`` (default: 2 × the LLC + 1 MiB, so that
    source and destination together exceed 4 × the LLC, and >= 64 MiB; at most half the memory budget).

    Both directions are counted (``counted="read+write"``): the copy reads ``buffer_bytes`` and writes
    ``buffer_bytes``. (A CPU may additionally read each destination line before writing it; that
    hidden traffic is not counted, so a CPU's copy figure understates its raw DRAM bandwidth.)
    ``beyond_cache``: whether source + destination exceeded 4 × the LLC (``cache_reason`` says why not).
    ``llc_bytes`` / ``budget_bytes``: default the device's (:func:`probe_limits`).
    """
    dev = resolve_device(device)
    repeats, min_block = repeat_settings(repeats, min_block)
    nthreads = thread_count(threads, dev)
    llc, budget, note = probe_limits(dev, llc_bytes, budget_bytes)
    wanted = max(ROTATION_FACTOR * (llc or FALLBACK_LLC_BYTES) // 2 + 2**20, 64 * 2**20)
    if buffer_bytes is None:
        buffer_bytes = max(4, min(wanted, budget // 2))
    buffer_bytes = require_count("buffer_bytes", buffer_bytes, minimum=4)
    if 2 * buffer_bytes > budget:
        raise ValueError(f"buffer_bytes={buffer_bytes} needs twice that much memory, more than the memory budget "
                         f"of one probe ({_iec(budget)}, {note})")
    n = buffer_bytes // 4
    with Threads(nthreads), torch.inference_mode():
        src = torch.ones(n, dtype=torch.float32, device=dev)
        dst = torch.empty_like(src)
        t = steady_timeit([lambda: dst.copy_(src)], dev, repeats, min_block, clock, _cpu(nthreads, dev))
    nbytes = n * 4
    capped = nbytes < wanted and 2 * wanted > budget
    _, why = cache_verdict(2 * nbytes, llc, budget_bytes=budget if capped else None, budget_note=note)
    return CopyResult(buffer_bytes=nbytes, bytes=2 * nbytes, counted="read+write", seconds=t.median,
                      q1_seconds=t.q1, q3_seconds=t.q3, repeats=repeats, device=dev.type,
                      threads=t.threads or nthreads, llc_bytes=llc, budget_bytes=budget,
                      working_set_bytes=2 * nbytes, cache_reason=why)


@dataclass(frozen=True)
class MatmulResult(Rates):
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
                         min_block: float | None = None, clock: str | None = None) -> MatmulResult:
    """The practical compute ceiling: C = A·B, n×n, in ``dtype``.

    With ``n=None`` the size grows (doubling from 256) while one call stays under
    ``max_call_seconds`` (0.05 s, fast mode 0.01 s), up to 2048 on a CPU and 8192 on a GPU: a dtype
    without fast kernels (fp16 on many CPUs) is then measured at a size that finishes.
    """
    dev = resolve_device(device)
    dtype = require_choice("dtype", dtype, DTYPES)
    tdt = DTYPES[dtype]
    repeats, min_block = repeat_settings(repeats, min_block)
    nthreads = thread_count(threads, dev)
    limit = (0.01 if fast_mode() else 0.05) if max_call_seconds is None else require_positive(
        "max_call_seconds", max_call_seconds)
    with Threads(nthreads), torch.inference_mode():
        if n is None:
            n_max = 8192 if dev.type == "cuda" else (512 if fast_mode() else 2048)
            n = 256
            while n < n_max:
                a = torch.ones(n, n, device=dev, dtype=tdt)
                torch.mm(a, a)  # warm-up: the first calls of a shape pay one-off costs
                t_call = math.inf
                for _ in range(3):  # the fastest of three: robust against a busy machine
                    sync(dev)
                    t0 = time.perf_counter()
                    torch.mm(a, a)
                    sync(dev)
                    t_call = min(t_call, time.perf_counter() - t0)
                if t_call * 8 > limit:  # doubling n multiplies the time by 8
                    break
                n *= 2
        n = require_count("n", n, minimum=1)
        gen = torch.Generator(device="cpu").manual_seed(n)
        a = torch.randn(n, n, generator=gen).to(device=dev, dtype=tdt)
        b = torch.randn(n, n, generator=gen).to(device=dev, dtype=tdt)
        c = torch.empty(n, n, device=dev, dtype=tdt)
        t = steady_timeit([lambda: torch.mm(a, b, out=c)], dev, repeats, min_block, clock, _cpu(nthreads, dev))
    return MatmulResult(n=n, dtype=dtype, flops=2 * n**3, seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3,
                        repeats=repeats, device=dev.type, threads=t.threads or nthreads)


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


def probe_dtypes(device=None, size: int | None = None, threads: int | None = None, llc_bytes: int | None = None,
                 budget_bytes: int | None = None) -> list[DtypeProbe]:
    """Time one GEMV (default 4096 × 4096; fast mode 512) per dtype and say which run well.

    Half precision moves half the bytes, so with a real kernel it runs at about fp32's GB/s and
    takes half the time. Without one (fp16 on most CPUs) each element is converted and computed
    slowly: the GEMV turns compute-bound and its GB/s collapses. ``llc_bytes`` / ``budget_bytes``: as
    :func:`measure_gemv`'s.
    """
    dev = resolve_device(device)
    size = (512 if fast_mode() else 4096) if size is None else require_count("size", size, minimum=1)
    table = measure_gemv([size], list(DTYPES), repeats=3, threads=threads, device=dev, progress=False,
                         llc_bytes=llc_bytes, budget_bytes=budget_bytes)
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
    dev = resolve_device(device)
    return list(_fast_dtypes_cached(dev.type, thread_count(threads, dev), fast_mode()))


# --------------------------------------------------------------------------------------------------
# Per-op dispatch overhead
# --------------------------------------------------------------------------------------------------
#: what :func:`measure_op_overhead` times: tiny ops whose data movement and arithmetic are negligible
OVERHEAD_KINDS = ("elementwise", "matmul", "view")


@dataclass(frozen=True)
class OverheadResult(Spread):
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


def _cold_runs(dev, flush_bytes: int, runs: int, clock: str | None):
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
    now = clock_function(clock)
    out = {"compute": [], "view": []}
    for i in range(runs + 2):
        for kind, fn, k in (("compute", compute, COLD_COMPUTE_OPS), ("view", views, COLD_VIEW_OPS)):
            if flush_src is not None:
                flush_dst.copy_(flush_src)
            sync(dev)
            t0 = now()
            fn()
            sync(dev)
            if i >= 2:  # two warm-up rounds
                out[kind].append((now() - t0) / k)
    return out


def measure_op_overhead(threads: int | None = None, device=None, repeats: int | None = None,
                        min_block: float | None = None, cold: bool = True, flush_bytes: int | None = None,
                        cold_runs: int | None = None, clock: str | None = None) -> OverheadResult:
    """The fixed cost of one small PyTorch op on this machine: what a roofline leaves out.

    A decode step launches hundreds of ops; each costs a fixed time (Python call, dispatcher,
    allocation, and on a GPU the kernel launch) however few bytes it moves. Hot: ops on 8-element
    tensors in a tight loop (timed like the other probes: calibrated blocks, median and quartiles
    over ``repeats``). Cold (``cold=True``): runs of distinct small ops each timed after streaming
    ``flush_bytes`` (default 2 × the last-level cache, CPU only) through memory; ``cold_runs`` runs
    (default 30, fast mode 8). All under ``torch.inference_mode()``, as a model's forward pass runs.
    """
    from torch.nn import functional as F
    dev = resolve_device(device)
    repeats, min_block = repeat_settings(repeats, min_block)
    if not isinstance(cold, bool):
        raise TypeError(f"cold must be True or False, got {cold!r}")
    nthreads = thread_count(threads, dev)
    if flush_bytes is None:
        flush_bytes = 0 if dev.type == "cuda" else 2 * (last_level_cache_bytes(dev) or FALLBACK_LLC_BYTES)
        flush_bytes = min(flush_bytes, memory_budget(dev) // 4)
    flush_bytes = require_count("flush_bytes", flush_bytes)
    runs = (8 if fast_mode() else 30) if cold_runs is None else require_count("cold_runs", cold_runs, minimum=1)
    per_kind, q1s, q3s = {}, {}, {}
    cold_res = None
    with Threads(nthreads), torch.inference_mode():
        x = torch.randn(1, 8, device=dev)
        y = torch.randn(1, 8, device=dev)
        w = torch.randn(8, 8, device=dev)
        calls = {"elementwise": lambda: x.add(y), "matmul": lambda: F.linear(x, w), "view": lambda: x.view(8)}
        for kind in OVERHEAD_KINDS:
            t = timeit([calls[kind]], dev, repeats, min_block, clock)
            per_kind[kind], q1s[kind], q3s[kind] = t.median, t.q1, t.q3
        if cold:
            cold_res = _cold_runs(dev, flush_bytes, runs, clock)

    def mean(d):
        return (d["elementwise"] + d["matmul"]) / 2

    extra = {}
    if cold_res is not None:
        cq1, cmed, cq3 = quartiles(cold_res["compute"])
        extra = dict(cold_seconds=cmed, cold_q1_seconds=cq1, cold_q3_seconds=cq3,
                     cold_view_seconds=statistics.median(cold_res["view"]), flush_bytes=flush_bytes, cold_runs=runs)
    return OverheadResult(seconds=mean(per_kind), q1_seconds=mean(q1s), q3_seconds=mean(q3s), per_kind=per_kind,
                          repeats=repeats, device=dev.type, threads=nthreads, **extra)


# --------------------------------------------------------------------------------------------------
# A linear layer at a given shape (prefill's GEMMs, decode's GEMVs) and attention's K/V reads
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LinearResult(CacheVerdict, Rates):
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
    rotate: bool = True
    working_set_bytes: int = 0          # bytes of all weight buffers
    llc_bytes: int | None = None
    budget_bytes: int | None = None
    cache_reason: str = ""


def measure_linear(tokens: int, m: int, k: int, dtype: str = "fp32", repeats: int | None = None,
                   threads: int | None = None, device=None, rotate: bool = True,
                   min_block: float | None = None, clock: str | None = None, llc_bytes: int | None = None,
                   budget_bytes: int | None = None) -> LinearResult:
    """Time one linear layer of shape (m × k) applied to ``tokens`` rows, weights rotated beyond the LLC.

    The achieved bytes/s (``tokens=1``) or FLOP/s (large ``tokens``) of a layer depends on its shape,
    not only on its size: a 32000 × 1024 matrix streams slower than a 4096 × 4096 one on many CPUs
    (short rows: each dot product's reduction and store weigh more). This probe times the shapes a
    model uses, on random matrices; the model itself is not run. The weights rotate as a GEMV's do
    (:func:`rotation_plan`; ``llc_bytes`` / ``budget_bytes`` default the device's); ``beyond_cache``
    and ``cache_reason`` say whether they exceeded 4 × the LLC.
    """
    from torch.nn import functional as F
    dev = resolve_device(device)
    tokens = require_count("tokens", tokens, minimum=1)
    m = require_count("m", m, minimum=1)
    k = require_count("k", k, minimum=1)
    dtype = require_choice("dtype", dtype, DTYPES)
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be True or False, got {rotate!r}")
    repeats, min_block = repeat_settings(repeats, min_block)
    nthreads = thread_count(threads, dev)
    tdt = DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    mbytes = m * k * esize
    llc, budget, note = probe_limits(dev, llc_bytes, budget_bytes)
    # the activations: x and the output, a few of each in flight
    plan = rotation_plan(mbytes, llc, budget, rotate, reserve_bytes=2 * tokens * (m + k) * esize, budget_note=note,
                         what=f"a {m} × {k} {dtype} layer on {tokens} tokens")
    with Threads(nthreads), torch.inference_mode():
        gen = torch.Generator(device="cpu").manual_seed(m * 31 + k)
        weights = rotated_copies((torch.randn(m, k, generator=gen) * 0.02).to(device=dev, dtype=tdt), plan.buffers)
        x = _random((1, tokens, k), gen, tdt, dev)
        calls = [(lambda W=W: F.linear(x, W)) for W in weights]
        t = steady_timeit(calls, dev, repeats, min_block, clock, _cpu(nthreads, dev))
        del weights, calls
    return LinearResult(tokens=tokens, m=m, k=k, dtype=dtype, device=dev.type,
                        bytes=(m * k + tokens * k + tokens * m) * esize, flops=2 * tokens * m * k,
                        seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3, repeats=repeats, buffers=plan.buffers,
                        threads=t.threads or nthreads, rotate=rotate, working_set_bytes=plan.working_set_bytes,
                        llc_bytes=llc, budget_bytes=budget, cache_reason=plan.cache_reason)


@dataclass(frozen=True)
class KVReadResult(CacheVerdict, Rates):
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
    working_set_bytes: int = 0          # bytes of all K/V buffers
    llc_bytes: int | None = None
    budget_bytes: int | None = None
    cache_reason: str = ""


def measure_kv_read(kv_heads: int = 8, group: int = 4, head_dim: int = 128, context: int = 4096,
                    dtype: str = "fp32", repeats: int | None = None, threads: int | None = None, device=None,
                    min_block: float | None = None, clock: str | None = None, llc_bytes: int | None = None,
                    budget_bytes: int | None = None) -> KVReadResult:
    """The rate at which decode attention reads the KV cache, on random tensors (no model involved).

    Per call: q (kv_heads, group, head_dim) against K and V (kv_heads, context, head_dim):
    ``softmax(q Kᵀ / √d) V``: grouped-query attention with the K/V of each KV head read once for all
    its ``group`` query heads. K/V buffers rotate so that their total exceeds 4 × the LLC
    (:func:`rotation_plan`; ``llc_bytes`` / ``budget_bytes`` default the device's; ``beyond_cache`` and
    ``cache_reason`` say whether they did).
    """
    dev = resolve_device(device)
    kvh = require_count("kv_heads", kv_heads, minimum=1)
    grp = require_count("group", group, minimum=1)
    d = require_count("head_dim", head_dim, minimum=1)
    c = require_count("context", context, minimum=1)
    dtype = require_choice("dtype", dtype, DTYPES)
    repeats, min_block = repeat_settings(repeats, min_block)
    nthreads = thread_count(threads, dev)
    tdt = DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    kv_bytes = 2 * kvh * c * d * esize
    llc, budget, note = probe_limits(dev, llc_bytes, budget_bytes)
    # q, the scores and their softmax, the output
    plan = rotation_plan(kv_bytes, llc, budget, True, reserve_bytes=kvh * grp * (2 * d + 2 * c) * esize,
                         budget_note=note, what=f"K/V of {c} tokens")
    scale = 1.0 / math.sqrt(d)
    with Threads(nthreads), torch.inference_mode():
        gen = torch.Generator(device="cpu").manual_seed(c * 7 + d)
        kvs = rotated_copies(_random((2, kvh, c, d), gen, tdt, dev), plan.buffers)
        q = _random((kvh, grp, d), gen, tdt, dev)

        def attend(kv):
            return ((q @ kv[0].transpose(-1, -2)) * scale).softmax(-1) @ kv[1]

        calls = [(lambda kv=kv: attend(kv)) for kv in kvs]
        t = steady_timeit(calls, dev, repeats, min_block, clock, _cpu(nthreads, dev))
        del kvs, calls
    return KVReadResult(kv_heads=kvh, group=grp, head_dim=d, context=c, dtype=dtype, device=dev.type,
                        bytes=kv_bytes, seconds=t.median, q1_seconds=t.q1, q3_seconds=t.q3, repeats=repeats,
                        buffers=plan.buffers, threads=t.threads or nthreads, working_set_bytes=plan.working_set_bytes,
                        llc_bytes=llc, budget_bytes=budget, cache_reason=plan.cache_reason)


def measure_score_passes(kv_heads: int, group: int, queries: int, keys: int, threads: int | None = None,
                         device=None, repeats: int | None = None, min_block: float | None = None,
                         clock: str | None = None) -> float:
    """Scores/s of the elementwise passes a simple prefill runs over its attention scores (a probe).

    Random fp32 scores of shape (kv_heads, group × queries, keys), as ``q @ kᵀ`` leaves them for one
    layer (the ``group`` query heads sharing a K/V head are rows of one matrix), then: scale by
    1/√d (a new tensor, as the matmul's output is), causal mask (``masked_fill_`` with the mask of
    ``queries`` new tokens after ``keys - queries`` cached ones) and softmax over the keys. Nothing
    of the model under test is used: only the shape. Returns ``kv_heads · group · queries · keys /
    seconds`` (median of the probe's timed blocks, :func:`course_lib.measure.timing.timeit`).
    """
    kvh = require_count("kv_heads", kv_heads, minimum=1)
    grp = require_count("group", group, minimum=1)
    q = require_count("queries", queries, minimum=1)
    k = require_count("keys", keys, minimum=1)
    if q > k:
        raise ValueError(f"queries must be <= keys (the new tokens are among the keys), got {q} > {k}")
    dev = resolve_device(device)
    nthreads = thread_count(threads, dev)
    repeats, min_block = repeat_settings(repeats, min_block)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(kvh, grp * q, k, generator=gen).to(dev)
    qslot = torch.arange(k - q, k, device=dev).view(-1, 1)
    blocked = ~(torch.arange(k, device=dev).view(1, -1) <= qslot)
    scale = math.sqrt(64.0)

    def passes():
        x = torch.div(base, scale)
        if q > 1:  # TinyLM masks only chunks of several queries (one query sees every key in its range)
            x.view(kvh, grp, q, k).masked_fill_(blocked, float("-inf"))
        return torch.softmax(x, -1)

    with Threads(nthreads), torch.inference_mode():
        t = timeit([passes], dev, repeats, min_block, clock)
    return kvh * grp * q * k / t.median


def measure_attention_products(kv_heads: int, group: int, head_dim: int, queries: int, keys: int,
                                threads: int | None = None, device=None, repeats: int | None = None,
                                min_block: float | None = None, clock: str | None = None) -> float:
    """FLOP/s of one layer's attention products in a prefill, ``q·kᵀ`` then ``p·v`` (a probe).

    Random fp32 tensors laid out as TinyLM's: q (1, kv_heads, group × queries, head_dim) against
    k and v (1, kv_heads, keys, head_dim), the scores (1, kv_heads, group × queries, keys) times v.
    ``4 · kv_heads · group · queries · keys · head_dim`` FLOP per call (the dense count of
    ``prefill_flops_dense``). Thin products (head_dim deep, few queries) run well below a square matmul.
    """
    kvh = require_count("kv_heads", kv_heads, minimum=1)
    grp = require_count("group", group, minimum=1)
    d = require_count("head_dim", head_dim, minimum=1)
    q = require_count("queries", queries, minimum=1)
    k = require_count("keys", keys, minimum=1)
    dev = resolve_device(device)
    nthreads = thread_count(threads, dev)
    repeats, min_block = repeat_settings(repeats, min_block)
    gen = torch.Generator().manual_seed(0)
    qq = torch.randn(1, kvh, grp * q, d, generator=gen).to(dev)
    kk = torch.randn(1, kvh, k, d, generator=gen).to(dev)
    vv = torch.randn(1, kvh, k, d, generator=gen).to(dev)
    pp = torch.rand(1, kvh, grp * q, k, generator=gen).to(dev)

    def products():
        return qq @ kk.transpose(-1, -2), pp @ vv

    with Threads(nthreads), torch.inference_mode():
        t = timeit([products], dev, repeats, min_block, clock)
    return 4 * kvh * grp * q * k * d / t.median
