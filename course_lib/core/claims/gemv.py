"""The measured claims of lesson 05 (GEMV timing), as data.

Lessons: 05, 06, 07, 08

Every sentence of lesson 05 and of exercise set 05 that states a relation between measurements is one of
these functions. Each returns a :class:`Claim`: the ``relation`` the numbers show, the ``operands`` it
was decided from, and the measurement ``verdict`` (:mod:`course_lib.core.quality`). ``outcome`` is what
the lesson renders (:mod:`course_lib.lessons.claims.gemv`): the relation when the timings behind it are
reliable or the relation is ``settled`` (its effect exceeds the timings' spread by
``quality.THRESHOLDS.decisive_margin``: a busy machine does not turn a 9x effect into its opposite), else the
verdict ("noisy" / "contended"), so that noise is never explained as overhead, caching or compute-boundness.

::

    from course_lib.core.claims import gemv as claims
    c = claims.gemv_vs_copy(big, copy)          # big: a GEMV row, copy: the copy probe (objects or dicts)
    c.relation, c.outcome, c.operands["ratio"]   # 'above', 'noisy', 1.9

Timings are what :func:`course_lib.core.quality.timing_verdict` reads (probe results, the profiles'
timing records). A GEMV row also needs ``bytes`` (and ``m``, ``k``, ``dtype`` where named); the copy
``bytes`` (read + write counted). This module is torch-free.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from course_lib.core import quality
from course_lib.core.validation import require_choice, require_count, require_flag, require_list, require_positive

__all__ = ["Claim", "TOLERANCE", "DISPATCH_SECONDS", "outcome_of", "verdict", "gemv_vs_copy", "time_vs_size",
           "cache_reuse", "beyond_cache", "small_matrix", "dtype_speed", "dtype_summary", "decode_from_gemv",
           "model_vs_estimate", "calibration", "probes", "inherit", "CALIBRATIONS", "UNDECIDED"]

#: a measured time within this fraction of its bytes / bandwidth prediction "matches" it
TOLERANCE = 0.25
#: the most a per-call fixed cost (Python call, dispatcher, allocation) of one small CPU op costs: a few
#: microseconds measured by ``probes.measure_op_overhead`` (lesson 06 §9: 3-8 µs per op on the course's 2-core
#: VMs); 10 µs leaves a margin. A time beyond bytes / bandwidth by more than this is not "per-call overhead":
#: the calls waited for CPU time (or the rotation missed the memory ceiling).
DISPATCH_SECONDS = 10e-6
#: the outcomes of a claim its numbers could not decide (the verdicts other than "reliable")
UNDECIDED = ("noisy", "contended")
#: the size ``probes.measure_matmul_flops`` starts its search at (n x n); it grows while a call stays short, so
#: an fp32 matmul left at this size means a 2n x 2n product was slow: on a CPU, whose fp32 kernels are fast, the
#: sign that other work held the cores (the stored quiet runs of lessons 05 and 08 reached n = 1024 with 315 and
#: 274 GFLOP/s; under load, a run of lesson 05 on the 2-core EPYC stopped at 256 with 1.4 GFLOP/s, and a busy
#: run of lesson 07 at 256 with 36.6 GFLOP/s)
MATMUL_FIRST_N = 256


@dataclass(frozen=True)
class Claim:
    """One measured relation: ``relation`` (what the numbers show), ``operands`` (the numbers), ``verdict``.

    ``outcome``: ``relation`` when ``verdict`` is "reliable" or the relation is ``settled`` (it clears the
    timings' uncertainty by ``quality.THRESHOLDS.decisive_margin``, :func:`quality.settles`), else the verdict
    ("noisy", "contended"): the sentence a lesson writes. ``reasons``: why the verdict is what it is (from the
    timings).
    """

    name: str
    relation: str
    operands: dict = field(default_factory=dict)
    verdict: str = "reliable"
    reasons: tuple = ()
    settled: bool = False

    @property
    def outcome(self) -> str:
        return outcome_of(self.relation, self.verdict, self.settled)

    @property
    def decided(self) -> bool:
        """The numbers carry the relation: reliable timings, or a relation settled despite their noise."""
        return self.outcome not in UNDECIDED

    @property
    def reliable(self) -> bool:
        return self.verdict == "reliable"

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def outcome_of(relation: str, verdict: str, settled: bool = False) -> str:
    """The relation when the verdict is reliable or the relation is settled, else the verdict."""
    if not isinstance(relation, str):
        raise TypeError(f"relation must be a string (the claim's relation), got {type(relation).__name__}")
    verdict = require_choice("verdict", verdict, quality.VERDICTS)
    settled = require_flag("settled", settled)
    return relation if verdict == "reliable" or settled else verdict


def _log(x: float) -> float:
    return math.log(x)


def verdict(timing, steal: float | None = None) -> str:
    """One timing's verdict ("reliable", "noisy", "contended"): :func:`quality.timing_verdict`'s, for a table column."""
    return quality.timing_verdict(timing, steal=steal, name="timing").verdict


def _get(obj, key: str, default=None):
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _bytes(name: str, obj) -> float:
    value = _get(obj, "bytes")
    if value is None:
        raise TypeError(f"{name} must carry 'bytes' (a GEMV row or the copy probe), got {type(obj).__name__}")
    return require_positive(f"{name}.bytes", value)


def _verdict(name: str, timing, steal=None) -> quality.TimingVerdict:
    return quality.timing_verdict(timing, steal=steal, name=name)


def _worst(*verdicts: str) -> str:
    return max(verdicts, key=quality.VERDICTS.index)


def _named(reasons, a: str, b: str) -> tuple:
    """``compare_timings``' reasons with its operands "a" and "b" named."""
    out = []
    for r in reasons:
        if r.startswith("a is "):
            r = a + r[1:]
        elif r.startswith("b is "):
            r = b + r[1:]
        out.append(r)
    return tuple(out)


def _reasons(verdicts: dict) -> tuple:
    return tuple(f"{label} is {v.verdict}: {v.reason}" for label, v in verdicts.items() if not v.reliable)


def _bandwidth(name: str, obj) -> float:
    return _bytes(name, obj) / _verdict(name, obj).median


def _shape(row) -> str:
    m, k = _get(row, "m"), _get(row, "k")
    return f"{m} × {k}" if m is not None and k is not None else "?"


# --------------------------------------------------------------------------------------------------
def gemv_vs_copy(gemv, copy, *, tolerance: float = TOLERANCE, steal: float | None = None) -> Claim:
    """The GEMV's achieved bandwidth against the copy's: "matches", "above" or "below" the copy ceiling.

    A GEMV "above" the copy is a real result that needs its explanation (the copy counts bytes it writes
    once though a write costs more, and the GEMV's buffers may not have left the cache: ``beyond_cache``
    operand); it is never silently used as a ceiling.
    """
    tolerance = require_positive("tolerance", tolerance, maximum=10.0)
    vg, vc = _verdict("gemv", gemv, steal), _verdict("copy", copy, steal)
    g_bw, c_bw = _bytes("gemv", gemv) / vg.median, _bytes("copy", copy) / vc.median
    ratio = g_bw / c_bw
    agreement = quality.within(_bytes("gemv", gemv) / c_bw, gemv, tolerance, steal=steal)
    relation = {"within": "matches", "over": "above", "under": "below"}[agreement.relation]
    beyond = {"above": _log(ratio) - _log(1 + tolerance),
              "below": -_log(ratio) + _log(1 - tolerance) if tolerance < 1 else -1.0}.get(relation, -1.0)
    return Claim("gemv_vs_copy", relation,
                 {"gemv_bandwidth": g_bw, "copy_bandwidth": c_bw, "ratio": ratio, "tolerance": tolerance,
                  "shape": _shape(gemv), "beyond_cache": _get(gemv, "beyond_cache"),
                  "gemv_seconds": vg.median, "predicted_seconds": _bytes("gemv", gemv) / c_bw},
                 _worst(vg.verdict, vc.verdict), _reasons({"the GEMV timing": vg, "the copy timing": vc}),
                 quality.settles(beyond, [vg, vc]))


def time_vs_size(rows, *, steal: float | None = None) -> Claim:
    """Does the time per call grow with the bytes of the rows (the rotated sweep)? "grows" is what bytes /
    bandwidth says; "flat" (the same time whatever the size) means the calls waited for something else.

    ``relation`` is :func:`quality.trend`'s direction over the rows' bytes; operands: bytes, medians, the
    ratio of the time to the bytes ratio (``time_ratio`` / ``bytes_ratio``).
    """
    rows = require_list("rows", rows, "a list of GEMV rows")
    if len(rows) < 2:
        raise ValueError(f"rows must hold at least 2 GEMV rows of different sizes, got {len(rows)}")
    by_bytes, xs = [], []
    for r in sorted(rows, key=lambda r: _bytes("rows[i]", r)):
        if not xs or _bytes("rows[i]", r) != xs[-1]:      # one row per byte count (m × k and k × m move the same)
            by_bytes.append(r)
            xs.append(_bytes("rows[i]", r))
    if len(xs) < 2:
        raise ValueError("rows must hold at least 2 GEMV rows of different sizes")
    t = quality.trend(xs, by_bytes, steal=steal)
    reasons = list(t.reasons[1:])
    for x, r in sorted(zip(xs, by_bytes), key=lambda p: -p[0]):      # "x=16896" -> the matrix's shape
        reasons = [why.replace(f"x={x:g} ", f"{_shape(r)} ").replace(f"x={x:g})", f"{_shape(r)})") for why in reasons]
    direction = t.direction
    if direction == "inconclusive" and t.verdict == "reliable":
        direction = "mixed"
    return Claim("time_vs_size", direction,
                 {"bytes": tuple(xs), "seconds": t.medians, "bytes_ratio": xs[-1] / xs[0],
                  "time_ratio": t.medians[-1] / t.medians[0], "first": _shape(by_bytes[0]),
                  "last": _shape(by_bytes[-1])},
                 t.verdict, tuple(reasons) if t.verdict != "reliable" else (), t.settled)


def _pairs(rotated, same):
    rotated = require_list("rotated", rotated, "a list of rotated GEMV rows")
    same = require_list("same", same, "a list of same-buffer GEMV rows")
    if len(rotated) != len(same) or not rotated:
        raise ValueError(f"rotated and same must hold the same sizes (one row each), got {len(rotated)} "
                         f"and {len(same)}")
    for name, rows in (("rotated", rotated), ("same", same)):
        for i, r in enumerate(rows):
            _verdict(f"{name}[{i}]", r)
            if _get(r, "matrix_bytes") is None and None in (_get(r, "m"), _get(r, "k"), _get(r, "element_bytes")):
                _bytes(f"{name}[{i}]", r)      # the size comes from its bytes then
    return list(zip(rotated, same))


def _llc(llc_bytes) -> int | None:
    """The last-level cache in bytes; None (or 0) when the OS reported none."""
    return None if llc_bytes is None else require_count("llc_bytes", llc_bytes)


def _matrix_bytes(row) -> float:
    mb = _get(row, "matrix_bytes")
    if mb is None:
        m, k, e = _get(row, "m"), _get(row, "k"), _get(row, "element_bytes")
        mb = m * k * e if None not in (m, k, e) else _bytes("row", row)
    return mb


def cache_reuse(rotated, same, llc_bytes: int | None, *, steal: float | None = None) -> Claim:
    """Among matrices well inside the last-level cache (at most half of it), the clearest case of the same
    buffer against rotation: "cache_faster" (reuse is faster), "no_gain" (indistinguishable or slower),
    "none_fits" (no matrix of the sweep fits), "unknown_cache" (the OS reported no LLC)."""
    pairs = _pairs(rotated, same)
    llc_bytes = _llc(llc_bytes)
    if not llc_bytes:
        return Claim("cache_reuse", "unknown_cache", {})
    fits = [(r, s) for r, s in pairs if _matrix_bytes(r) <= llc_bytes / 2]
    if not fits:
        return Claim("cache_reuse", "none_fits", {"llc_bytes": llc_bytes,
                                                  "smallest_bytes": min(_matrix_bytes(r) for r, _ in pairs)})
    r, s = max(fits, key=lambda p: _verdict("r", p[0]).median / _verdict("s", p[1]).median)
    c = quality.compare_timings(s, r, steal=steal)
    relation = "cache_faster" if c.relation == "faster" else "no_gain"
    return Claim("cache_reuse", relation,
                 {"shape": _shape(r), "matrix_bytes": _matrix_bytes(r), "llc_bytes": llc_bytes,
                  "same_bandwidth": _bytes("same", s) / c.a.median,
                  "rotated_bandwidth": _bytes("rotated", r) / c.b.median,
                  "speedup": c.b.median / c.a.median},
                 c.verdict, _named(c.reasons[1:], "the same-buffer timing", "the rotated timing")
                 if c.verdict != "reliable" else (), c.settled and relation == "cache_faster")


def beyond_cache(rotated, same, llc_bytes: int | None, *, steal: float | None = None) -> Claim:
    """Beyond the cache the two curves should meet. At the largest matrix larger than the LLC: "meet"
    (indistinguishable), "apart" (they still differ), or "none_beyond" (no matrix of the sweep exceeds
    the LLC: the sweep cannot show it), "unknown_cache". Operands also count the rotated rows whose
    working set exceeded 4 × the LLC (``rotated_beyond`` of ``rotated_rows``)."""
    pairs = _pairs(rotated, same)
    llc_bytes = _llc(llc_bytes)
    beyond_rows = sum(1 for r, _ in pairs if _get(r, "beyond_cache") is True)
    base = {"llc_bytes": llc_bytes, "rotated_beyond": beyond_rows, "rotated_rows": len(pairs),
            "largest_bytes": max(_matrix_bytes(r) for r, _ in pairs),
            "largest": _shape(max((r for r, _ in pairs), key=_matrix_bytes))}
    if not llc_bytes:
        return Claim("beyond_cache", "unknown_cache", base)
    big = [(r, s) for r, s in pairs if _matrix_bytes(r) > llc_bytes]
    if not big:
        return Claim("beyond_cache", "none_beyond", base)
    r, s = max(big, key=lambda p: _matrix_bytes(p[0]))
    c = quality.compare_timings(s, r, steal=steal)
    relation = "meet" if c.relation == "indistinguishable" else "apart"
    return Claim("beyond_cache", relation,
                 {**base, "shape": _shape(r), "matrix_bytes": _matrix_bytes(r),
                  "same_bandwidth": _bytes("same", s) / c.a.median,
                  "rotated_bandwidth": _bytes("rotated", r) / c.b.median, "ratio": c.b.median / c.a.median},
                 c.verdict, _named(c.reasons[1:], "the same-buffer timing", "the rotated timing")
                 if c.verdict != "reliable" else (), c.settled and relation == "apart")


def small_matrix(row, copy, *, tolerance: float = TOLERANCE, steal: float | None = None) -> Claim:
    """The smallest rotated matrix against bytes / copy bandwidth: "matches", "faster" (faster than memory
    allows: partly served from cache), "overhead" (slower by at most :data:`DISPATCH_SECONDS` per call:
    a fixed per-call cost) or "waited" (slower by more than any per-call cost: the calls waited for CPU
    time)."""
    vr, vc = _verdict("row", row, steal), _verdict("copy", copy, steal)
    c_bw = _bytes("copy", copy) / vc.median
    predicted = _bytes("row", row) / c_bw
    a = quality.within(predicted, row, tolerance, steal=steal)
    excess = vr.median - predicted
    if a.relation == "within":
        relation = "matches"
    elif a.relation == "over":
        relation = "faster"
    else:
        relation = "overhead" if excess <= DISPATCH_SECONDS else "waited"
    beyond = {"faster": _log(predicted / vr.median) - _log(1 + tolerance),
              "waited": _log(vr.median / (predicted + DISPATCH_SECONDS))}.get(relation, -1.0)
    return Claim("small_matrix", relation,
                 {"shape": _shape(row), "seconds": vr.median, "predicted_seconds": predicted,
                  "excess_seconds": excess, "dispatch_seconds": DISPATCH_SECONDS, "ratio": vr.median / predicted},
                 _worst(vr.verdict, vc.verdict), _reasons({"the smallest matrix's timing": vr, "the copy timing": vc}),
                 quality.settles(beyond, [vr, vc]))


# --------------------------------------------------------------------------------------------------
# data types
# --------------------------------------------------------------------------------------------------
def dtype_speed(half, fp32, *, steal: float | None = None) -> Claim:
    """A half-precision GEMV against fp32 of the same shape.

    ``relation``: "as_bytes_predict" (faster, within a factor 1.5 of the bytes ratio: memory-bound),
    "faster_than_bytes" (faster than even the halved bytes allow: the fp32 reference missed the memory
    ceiling), "faster_less" (faster, but well short of the halved bytes: partly limited by conversion
    work), "same" (indistinguishable), "slower" (slower although it reads half the bytes:
    compute-bound). Operands: ``ratio`` (time of half / time of fp32), ``predicted_ratio`` (bytes ratio).
    """
    predicted = _bytes("half", half) / _bytes("fp32", fp32)
    _verdict("half", half), _verdict("fp32", fp32)
    c = quality.compare_timings(half, fp32, steal=steal)
    if c.relation == "slower":
        relation = "slower"
    elif c.relation == "indistinguishable":
        relation = "same"
    elif c.ratio < predicted / 1.5:
        relation = "faster_than_bytes"
    elif c.ratio <= predicted * 1.5:
        relation = "as_bytes_predict"
    else:
        relation = "faster_less"
    # settled: the relation to fp32 clears the spread, and so does the side of the bytes ratio it names
    lr, lp, cut = _log(c.ratio), _log(predicted), _log(1.5)
    beyond = {"slower": lr - _log(1 + quality.THRESHOLDS.min_effect),
              "faster_than_bytes": (lp - cut) - lr,
              "faster_less": min(lr - (lp + cut), -lr - _log(1 + quality.THRESHOLDS.min_effect))}.get(relation, -1.0)
    return Claim("dtype_speed", relation,
                 {"dtype": _get(half, "dtype"), "shape": _shape(half), "ratio": c.ratio,
                  "interval": c.interval, "predicted_ratio": predicted, "speedup": 1 / c.ratio,
                  "predicted_speedup": 1 / predicted},
                 c.verdict, _named(c.reasons[1:], f"the {_get(half, 'dtype')} timing", "the fp32 timing")
                 if c.verdict != "reliable" else (), quality.settles(beyond, [c.a, c.b]))


_DIRECTION = {"slower": 1, "same": 0, "as_bytes_predict": -1, "faster_than_bytes": -1, "faster_less": -1}


def dtype_summary(rows) -> list[Claim]:
    """:func:`dtype_speed` for every half-precision row of a GEMV table with an fp32 row of the same shape.

    A dtype's kernel is faster or slower than fp32's at every size alike; where the decided claims of one dtype
    point both ways (faster at one size, slower at another), the run contradicts itself (the machine's speed
    changed between the rows): those claims are replaced by one "disagree" claim, verdict "noisy", whose
    operands list each shape's ``ratios``."""
    rows = require_list("rows", rows, "a list of GEMV rows")
    for i, r in enumerate(rows):
        if not isinstance(_get(r, "dtype"), str):
            raise TypeError(f"rows[{i}] must be a GEMV row (with a 'dtype'), got {type(r).__name__}")
    out = []
    for r in rows:
        if _get(r, "dtype") == "fp32":
            continue
        ref = [x for x in rows if _get(x, "dtype") == "fp32" and _shape(x) == _shape(r)
               and _get(x, "rotate", True) == _get(r, "rotate", True)]
        if ref:
            out.append(dtype_speed(r, ref[0]))
    merged, done = [], set()
    for c in out:
        d = c.operands["dtype"]
        if d in done:
            continue
        same = [x for x in out if x.operands["dtype"] == d]
        ways = {_DIRECTION[x.relation] for x in same if x.decided}
        if {1, -1} <= ways:
            done.add(d)
            ratios = {x.operands["shape"]: x.operands["ratio"] for x in same}
            sizes = ", ".join(f"{ratio:.3g}× at {shape}" for shape, ratio in ratios.items())
            why = (f"the sizes disagree ({sizes} of fp32's time), which one kernel cannot: the machine's speed "
                   "changed between the rows")
            merged.append(Claim("dtype_speed", "disagree",
                                {"dtype": d, "shape": " and ".join(ratios), "ratios": ratios,
                                 "predicted_ratio": same[0].operands["predicted_ratio"]},
                                "noisy", (why,) + tuple(r for x in same for r in x.reasons)))
        else:
            merged.append(c)
    return merged


def decode_from_gemv(weight_bytes: Mapping, rows) -> Claim:
    """A batch-1 decode step estimated from the measured GEMV rate: weight bytes / achieved bandwidth.

    ``weight_bytes``: {dtype: bytes one decode step reads in that dtype} (e.g.
    ``get_model(...).decode_weight_bytes(dtype)``); ``rows``: GEMV rows of those dtypes, the largest
    shape of each used. A decode step at batch 1 is a chain of GEMVs, so their measured rate (which
    already contains any conversion cost of the dtype) prices it, not a matrix-multiply rate. The dtype
    with the shortest estimate is chosen; ``relation`` is that dtype, ``verdict`` its row's.
    """
    if not isinstance(weight_bytes, Mapping) or not weight_bytes:
        raise TypeError("weight_bytes must be a dict {dtype: bytes per decode step}")
    rows = require_list("rows", rows, "a list of GEMV rows")
    per = {}
    for dt, wb in weight_bytes.items():
        cands = [r for r in rows if _get(r, "dtype") == dt]
        if not cands:
            continue
        r = max(cands, key=_matrix_bytes)
        v = _verdict(f"rows[{dt}]", r)
        bw = _bytes("row", r) / v.median
        per[dt] = {"seconds": require_positive(f"weight_bytes[{dt!r}]", wb) / bw, "bandwidth": bw,
                   "shape": _shape(r), "verdict": v.verdict, "reason": v.reason, "timing": v}
    if not per:
        raise ValueError(f"rows hold none of the dtypes {sorted(weight_bytes)}")
    best = min(per, key=lambda d: per[d]["seconds"])
    b = per[best]
    verdict, reasons = b["verdict"], [b["reason"]] if b["verdict"] != "reliable" else []
    # "the fastest dtype" compares the rows: it stands only where every rival is reliable or clearly slower
    for d, x in per.items():
        if d == best or (x["verdict"] == "reliable" and b["verdict"] == "reliable"):
            continue
        if not quality.settles(math.log(x["seconds"] / b["seconds"]), [x["timing"], b["timing"]]):
            verdict = _worst(verdict, x["verdict"])
            reasons.append(f"whether {best} is faster than {d} is not settled: the {d} GEMV is {x['verdict']} "
                           f"({x['reason']})")
    for x in per.values():
        del x["timing"]
    return Claim("decode_from_gemv", best,
                 {"dtype": best, "seconds": b["seconds"], "bandwidth": b["bandwidth"], "shape": b["shape"],
                  "tokens_per_second": 1 / b["seconds"], "per_dtype": per},
                 verdict, tuple(reasons))


def model_vs_estimate(measured, predicted_seconds: float, *, tolerance: float = TOLERANCE,
                      steal: float | None = None, basis: Claim | None = None, bound: str = "memory") -> Claim:
    """A measured model step against its estimate: "matches", "slower" or "faster" (than the estimate).

    Operands: ``ratio`` = measured / predicted. A reliable "slower" on a small model is the fixed cost
    of its many small operations; a noisy one says nothing. ``basis``: the :func:`calibration` the estimate
    was computed on, ``bound``: what bounds the estimate ("memory": it inherits the verdict of the calibration's
    bandwidth; "compute": of the whole calibration); an estimate on an unsettled part settles nothing.
    ``busy_run`` (operand): why the calibration is unsettled, if it is: then other work shared the machine during
    the run, and a gap is not attributed to the model's own costs.
    """
    a = quality.within(require_positive("predicted_seconds", predicted_seconds, maximum=1e6), measured, tolerance,
                       steal=steal, names=("predicted_seconds", "measured"))
    relation = {"within": "matches", "over": "faster", "under": "slower"}[a.relation]
    m = a.measured
    reasons = (f"the measurement is {m.verdict}: {m.reason}",) if not m.reliable else ()
    verdict, settled = a.verdict, a.settled
    bound = require_choice("bound", bound, ("memory", "compute"))
    if basis is not None:
        if not isinstance(basis, Claim) or basis.name != "calibration":
            raise TypeError("basis must be the calibration claim the estimate was computed on")
        part = basis.operands["bandwidth_verdict"] if bound == "memory" else basis.verdict
        if part != "reliable":
            why = basis.operands["bandwidth_reason"] if bound == "memory" else basis.reason
            verdict, settled = _worst(verdict, part), False
            reasons += (f"the estimate rests on this run's calibration, which is {part} ({why})",)
    busy = "" if basis is None or basis.verdict == "reliable" else basis.reason
    return Claim("model_vs_estimate", relation,
                 {"seconds": m.median, "predicted_seconds": predicted_seconds, "ratio": m.median / predicted_seconds,
                  "tolerance": tolerance, "busy_run": busy},
                 verdict, reasons, settled)


def calibration(bandwidth: float, copy, rows, matmul: Mapping | None = None) -> Claim:
    """How settled a calibration (``machine.this_machine``) is: the verdicts of the timings it was built from.

    ``bandwidth``: the calibrated bandwidth (bytes/s); ``copy``: the copy probe; ``rows``: the GEMV rows the
    calibration saw (the bandwidth came from the row whose achieved bandwidth equals it, else from the copy);
    ``matmul``: {dtype: matmul probe} behind the peak FLOP/s. ``relation`` "settled" (every source timing
    reliable) or "unsettled" (not: this run's calibration is not the machine's, and its ``verdict`` says why).
    A calibration is a number, not a relation: no margin can settle a noisy one. Operands: ``bandwidth``,
    ``source`` (what it came from), ``uncertainty`` (its timing's, :attr:`quality.TimingVerdict.uncertainty`),
    ``unsettled`` (the sources that are not reliable), ``fallback`` (GEMV rows were given but none was used: no
    rotated row's buffers left the last-level cache, so the copy stood in)."""
    bw = require_positive("bandwidth", bandwidth)
    rows = require_list("rows", rows, "a list of GEMV rows")
    src, label = copy, "the copy"
    for r in rows:
        rb = _bytes("rows[i]", r) / _verdict("rows[i]", r).median
        if abs(rb / bw - 1) < 1e-9:
            src, label = r, f"the {_shape(r)} GEMV"
            break
    sources = {label: _verdict(label, src)}
    if matmul is not None and not isinstance(matmul, Mapping):
        raise TypeError(f"matmul must be a dict {{dtype: matmul probe}} or None, got {type(matmul).__name__}")
    for d, mm in (matmul or {}).items():
        sources[f"the {d} matmul"] = _verdict(f"matmul[{d!r}]", mm)
    bad = tuple(k for k, v in sources.items() if not v.reliable)
    reasons = list(_reasons(sources))
    # each timing may look steady and still come from a slowed moment: the relations between them cannot lie
    slowed = []
    for d, mm in (matmul or {}).items():
        gemv_rate = max((_get(r, "flops") / _verdict("rows[i]", r).median for r in rows
                         if _get(r, "flops") and _get(r, "dtype", "fp32") == d), default=0)
        rate = _get(mm, "flops") / _verdict(f"matmul[{d!r}]", mm).median if _get(mm, "flops") else None
        if rate is not None and rate < gemv_rate:
            slowed.append(f"the {d} matmul")
            reasons.append(f"the {d} matmul reached {rate / 1e9:.3g} GFLOP/s, less than the {d} GEMV's "
                           f"{gemv_rate / 1e9:.3g} GFLOP/s, which no machine allows (a matrix product reuses every "
                           "weight it reads): other work slowed it")
        elif d == "fp32" and _get(mm, "device", "cpu") == "cpu" and _get(mm, "n") == MATMUL_FIRST_N:
            slowed.append(f"the {d} matmul")
            reasons.append(f"the fp32 matmul probe stopped at its first size (n = {MATMUL_FIRST_N}): a "
                           f"{2 * MATMUL_FIRST_N} × {2 * MATMUL_FIRST_N} product was too slow, which a CPU's fp32 "
                           "kernels are only when other work holds the cores")
    bad += tuple(k for k in slowed if k not in bad)
    verdict = _worst(*(v.verdict for v in sources.values()), *(("noisy",) if slowed else ()))
    bw_v = sources[label]
    compute = [v.verdict for k, v in sources.items() if k != label] + (["noisy"] if slowed else [])
    return Claim("calibration", "unsettled" if bad else "settled",
                 {"bandwidth": bw, "source": label, "uncertainty": bw_v.uncertainty, "unsettled": bad,
                  "fallback": src is copy and bool(rows),
                  "bandwidth_verdict": bw_v.verdict, "bandwidth_reason": bw_v.reason if not bw_v.reliable else "",
                  "compute_verdict": _worst("reliable", *compute)},
                 verdict, tuple(reasons))


#: the names of the claims that say how settled a calibration is: :func:`calibration` (the ceilings of lesson 05)
#: and :func:`probes` (the probes of a calibrated model or an engine); a claim computed on one inherits its verdict
CALIBRATIONS = ("calibration", "probes")


def probes(sources: Mapping, *, what: str, contradictions=()) -> Claim:
    """How settled the probes behind a calibrated prediction are: ``relation`` "settled" (every timing reliable and
    no contradiction) or "unsettled" (this run's calibration, not the machine's; ``verdict`` and ``reasons`` say why).

    ``sources``: {label: timing} of every probe timing the prediction rests on (what :func:`quality.timing_verdict`
    reads, or a :class:`quality.TimingVerdict`); ``what``: the prediction in words (e.g. "the calibrated model");
    ``contradictions``: sentences naming relations between the probes that no machine allows (each makes the
    calibration "noisy": the numbers look steady one by one, yet disagree with each other). Like
    :func:`calibration` it is a number, not a relation: no margin settles a noisy one. Operands: ``what``,
    ``sources`` (labels), ``unsettled`` (labels of the probes that are not reliable), ``uncertainty`` (the largest
    :attr:`quality.TimingVerdict.uncertainty`, None when a spread is unknown)."""
    if not isinstance(sources, Mapping) or not sources:
        raise TypeError("sources must be a non-empty dict {label: timing} of the probes behind the prediction")
    if not isinstance(what, str) or not what:
        raise TypeError(f"what must name the prediction in words, got {what!r}")
    verdicts = {k: v if isinstance(v, quality.TimingVerdict) else _verdict(str(k), v) for k, v in sources.items()}
    contradictions = tuple(str(c) for c in contradictions)
    bad = tuple(k for k, v in verdicts.items() if not v.reliable)
    us = [v.uncertainty for v in verdicts.values()]
    verdict = _worst(*(v.verdict for v in verdicts.values()), *(("noisy",) if contradictions else ()))
    return Claim("probes", "unsettled" if bad or contradictions else "settled",
                 {"what": what, "sources": tuple(verdicts), "unsettled": bad, "contradictions": len(contradictions),
                  "uncertainty": None if None in us else max(us)},
                 verdict, _reasons(verdicts) + contradictions)


def inherit(basis: Claim | None, what: str = "the prediction") -> tuple[str, tuple]:
    """The verdict and reasons a claim inherits from the calibration it was computed on (``basis``: a
    :func:`calibration` or :func:`probes` claim; None: nothing to inherit, "reliable"). A settled calibration passes
    on "reliable"; an unsettled one its verdict, with one reason naming it: a claim on it cannot be settled by any
    margin, because the calibration may be off by more than its own timings show (a busy run times every probe
    slow)."""
    if basis is None:
        return "reliable", ()
    if not isinstance(basis, Claim) or basis.name not in CALIBRATIONS:
        raise TypeError(f"basis must be the calibration claim ({' or '.join(CALIBRATIONS)}) the prediction was "
                        f"computed on, got {type(basis).__name__ if not isinstance(basis, Claim) else basis.name!r}")
    if basis.verdict == "reliable":
        return "reliable", ()
    n = basis.operands.get("contradictions", 0)
    which = ", ".join([*basis.operands.get("unsettled", ()),
                       *([f"{n} contradiction{'s' if n > 1 else ''} between its probes"] if n else [])]) or basis.reason
    return basis.verdict, (f"{what} rests on this run's calibration, which is not settled ({which}): its numbers "
                           "are this run's, not this machine's",)
