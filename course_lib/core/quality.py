"""Measurement quality as data: is a timing reliable, and what does a set of timings show? (lessons 05-08, validate)

Lessons: 07

::

    from course_lib.core import quality
    v = quality.timing_verdict([1.02e-3, 1.01e-3, 1.05e-3, 0.99e-3, 1.00e-3])
    v.verdict, v.reasons                     # 'reliable', ('spread 3.0% of the median, ...',)
    c = quality.compare_timings(bf16_times, fp32_times)
    c.relation, c.ratio, c.interval          # 'faster', 0.93, (0.90, 0.96): a takes 0.93x b's time
    quality.trend([128, 1024, 4096], [t128, t1024, t4096]).direction   # 'grows' / 'falls' / 'flat' / 'inconclusive'
    quality.read_cpu_steal(before, after)    # CPU steal fraction between two /proc/stat snapshots

A lesson renders these results; it decides nothing itself. Each claim (a relation such as
faster/slower, grows/falls, within x %) is computed from the run it describes and carries its
operands and a **verdict**:

* ``"reliable"``: the repeats agree (every test below passes);
* ``"noisy"``: the repeats disagree, too few were taken, no spread was recorded, or (for a claim) the
  spread is larger than the effect shown; the numbers cannot carry the claim;
* ``"contended"``: the system reports CPU steal above the threshold during the measurement: the
  hypervisor gave this machine's CPU time to other guests.

The load average is deliberately not used: a VM, or the test suite's own workers, keep it at 2 or more
on a machine whose timings are fine, and a quiet load average says nothing about steal.

**Timings** are accepted in three shapes: a sequence of per-run seconds (raw; p10/p90 known); a mapping
with the measurement modules' keys (``seconds`` = median, ``q1_seconds``, ``q3_seconds``, optional
``min_seconds``, ``p10_seconds``, ``p90_seconds``, ``repeats``; or ``times`` = raw seconds), as the
probes' ``as_dict()`` and the measurement profiles store them; or an object with those attributes
(a probe result, ``timing.Timing`` with ``median``/``q1``/``q3``/``minimum``; an object whose ``times``
attribute holds the raw seconds is read from those). A record with a median
only is accepted and judged "noisy" (its spread is unknown).

**The thresholds** are :class:`Thresholds`, written once below with the measurements behind each
value; pass ``thresholds=`` to change them.

This module is torch-free (core): the steal *reading* is
:func:`course_lib.measure.threads.proc_stat`; here only the text is parsed.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from course_lib.core.validation import require_count, require_list, require_positive, require_real

__all__ = ["VERDICTS", "RELATIONS", "DIRECTIONS", "Thresholds", "THRESHOLDS", "TimingSummary", "summarize_timing",
           "TimingVerdict", "timing_verdict", "settles", "TimingComparison", "compare_timings", "Trend", "trend",
           "Agreement", "within", "QualitySummary", "summarize_verdicts", "read_cpu_steal"]

#: verdicts from best to worst
VERDICTS = ("reliable", "noisy", "contended")
#: relations of :func:`compare_timings` (the time of a against the time of b)
RELATIONS = ("faster", "slower", "indistinguishable")
#: directions of :func:`trend` (the time as x grows)
DIRECTIONS = ("grows", "falls", "flat", "inconclusive")


@dataclass(frozen=True)
class Thresholds:
    """Every threshold of the quality verdicts, in one place.

    * ``noisy_p90_ratio`` = 1.5: a timing whose p90 exceeds 1.5 x its median is noisy (one run in ten
      or more was much slower).
    * ``noisy_relative_iqr`` = 0.20: a timing whose interquartile range exceeds 20 % of its median is
      noisy.
    * ``noisy_median_over_min`` = 1.25: a median more than 1.25 x the fastest repeat means that most
      repeats were slowed by something other than the work.
    * ``contended_steal`` = 0.05: CPU steal above 5 % of the measured interval (where the system
      reports steal: Linux ``/proc/stat``) makes the verdict "contended".
    * ``min_repeats`` = 3: fewer repeats cannot show a spread (the course's fast mode takes 3).
    * ``min_effect`` = 0.03: two timings closer than 3 % are "indistinguishable" however tight their
      spreads.
    * ``decisive_margin`` = 2.0: a relation between timings that are not all reliable still **stands** (is
      *settled*) when its effect exceeds their spread by this factor: each timing's spread is its uncertainty u =
      max(IQR / median, median / fastest - 1) (:attr:`TimingVerdict.uncertainty`), and the relation must survive
      moving every operand by the factor (1 + u) ** margin against it (:func:`settles`). A busy laptop slows and
      scatters its repeats, but it does not turn a 4.7x cache effect or a 1,000x growth with size into their
      opposites. In a recorded run of lesson 05 at load 9-10 (``tests/fixtures/recordings/busy/05.json``) the 23
      timings had uncertainties of 0.02-0.33 (median 0.16; 4 of them noisy), so the margin asks a two-operand
      relation for 1.1x-3.1x. Why 2 and not 1: drift between runs exceeds one timing's own spread under load (a busy
      run timed the same GEMV at 40.7 and 27.7 ms, 1.47x apart, both "reliable"); with uncertainties of 0.2 a margin
      of 1 would accept a 1.44x relation, which such drift produces, while 2 asks for 2.07x.

    The recorded machine profiles (``tests/fixtures/profiles/``, quiet and loaded runs of the same probes)
    are the evidence for each value: the quiet runs pass them, the loaded runs fail them, and
    ``tests/test_quality.py`` checks the verdicts of every profile.
    """

    noisy_p90_ratio: float = 1.5
    noisy_relative_iqr: float = 0.20
    noisy_median_over_min: float = 1.25
    contended_steal: float = 0.05
    min_repeats: int = 3
    min_effect: float = 0.03
    decisive_margin: float = 2.0

    def __post_init__(self):
        for name in ("noisy_p90_ratio", "noisy_median_over_min"):
            value = require_positive(name, getattr(self, name), maximum=1e6)
            if value < 1:
                raise ValueError(f"{name} must be >= 1 (a ratio to the median), got {value}")
        for name in ("noisy_relative_iqr", "min_effect", "decisive_margin"):
            require_positive(name, getattr(self, name), maximum=1e6)
        steal = require_positive("contended_steal", self.contended_steal, maximum=1.0)
        if steal >= 1:
            raise ValueError(f"contended_steal must be a fraction in (0, 1), got {steal}")
        require_count("min_repeats", self.min_repeats, minimum=1, maximum=10**6)


#: the thresholds in force unless a call passes its own
THRESHOLDS = Thresholds()


def _thresholds(thresholds) -> Thresholds:
    if not isinstance(thresholds, Thresholds):
        raise TypeError(f"thresholds must be a quality.Thresholds, got {type(thresholds).__name__}")
    return thresholds


# --------------------------------------------------------------------------------------------------
# Summaries of one timing
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingSummary:
    """Seconds of one timing: the median and, where known, quartiles, deciles, fastest run and repeats."""

    median: float
    q1: float | None = None
    q3: float | None = None
    p10: float | None = None
    p90: float | None = None
    minimum: float | None = None
    repeats: int | None = None

    def __post_init__(self):
        checked = _validated("TimingSummary", {f.name: getattr(self, f.name) for f in fields(self)})
        for key, value in checked.items():
            object.__setattr__(self, key, value)

    @property
    def spread(self) -> float | None:
        """Interquartile range relative to the median (None when the quartiles are unknown)."""
        if self.q1 is None or self.q3 is None:
            return None
        return (self.q3 - self.q1) / self.median


_SECONDS = 1e6  # no timing in this course is longer than 11 days


def _seconds(name: str, value) -> float:
    return require_positive(name, value, maximum=_SECONDS)


def _from_times(name: str, times: list) -> TimingSummary:
    if not times:
        raise ValueError(f"{name} must hold at least one timing (seconds)")
    if len(times) > 10**6:
        raise ValueError(f"{name} may hold at most 10**6 timings, got {len(times)}")
    ts = [_seconds(f"{name}[{i}]", t) for i, t in enumerate(times)]
    if len(ts) == 1:
        q1 = q3 = p10 = p90 = ts[0]
    else:
        q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
        deciles = statistics.quantiles(ts, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    return TimingSummary(statistics.median(ts), q1, q3, p10, p90, min(ts), len(ts))


_KEYS = {  # field -> keys (mapping) / attributes (object) that hold it, first found wins
    "median": ("seconds", "median"),
    "q1": ("q1_seconds", "q1"),
    "q3": ("q3_seconds", "q3"),
    "p10": ("p10_seconds", "p10"),
    "p90": ("p90_seconds", "p90"),
    "minimum": ("min_seconds", "minimum"),
    "repeats": ("repeats",),
}


def _validated(name: str, values: dict) -> dict:
    """The fields of a summary checked (seconds > 0, repeats >= 1, min <= p10 <= q1 <= median <= q3 <= p90)."""
    if values.get("median") is None:
        raise ValueError(f"{name} must give its median as 'seconds' (or 'median'), or raw 'times'")
    out = {"median": _seconds(f"{name}.median", values["median"])}
    for f in ("q1", "q3", "p10", "p90", "minimum"):
        if values.get(f) is not None:
            out[f] = _seconds(f"{name}.{f}", values[f])
    if values.get("repeats") is not None:
        out["repeats"] = require_count(f"{name}.repeats", values["repeats"], minimum=1, maximum=10**9)
    if ("q1" in out) != ("q3" in out):
        raise ValueError(f"{name} must give both quartiles (q1 and q3) or neither")
    order = [f for f in ("minimum", "p10", "q1", "median", "q3", "p90") if f in out]
    for lo, hi in zip(order, order[1:]):
        if out[lo] > out[hi] * (1 + 1e-9):
            raise ValueError(f"{name}.{lo} ({out[lo]:g} s) must not exceed {name}.{hi} ({out[hi]:g} s)")
    return out


def _checked_summary(name: str, values: dict) -> TimingSummary:
    return TimingSummary(**_validated(name, values))


def summarize_timing(timing, name: str = "timing") -> TimingSummary:
    """A :class:`TimingSummary` of ``timing`` in any of the accepted shapes (see the module docstring).

    ``name`` is the argument named in the ValueError/TypeError for bad input.
    """
    if isinstance(timing, TimingSummary):
        return _checked_summary(name, {f.name: getattr(timing, f.name) for f in fields(TimingSummary)})
    if isinstance(timing, (str, bytes, bytearray)) or timing is None or isinstance(timing, (bool, int, float)):
        raise TypeError(f"{name} must be a list of seconds, a mapping with 'seconds'/'q1_seconds'/'q3_seconds' "
                        f"or a timing result, got {type(timing).__name__}")
    if isinstance(timing, Mapping):
        if timing.get("times") is not None:
            return _from_times(f"{name}.times", _sequence(f"{name}.times", timing["times"]))
        return _checked_summary(name, {f: next((timing[k] for k in keys if timing.get(k) is not None), None)
                                       for f, keys in _KEYS.items()})
    if getattr(timing, "times", None) is not None and not isinstance(timing, Iterable):
        return _from_times(f"{name}.times", _sequence(f"{name}.times", timing.times))
    if any(hasattr(timing, k) for k in ("seconds", "median")) and not isinstance(timing, Iterable):
        return _checked_summary(name, {f: next((getattr(timing, k) for k in keys
                                                if getattr(timing, k, None) is not None), None)
                                       for f, keys in _KEYS.items()})
    return _from_times(name, _sequence(name, timing))


def _sequence(name: str, value, what: str = "a list of seconds") -> list:
    if isinstance(value, Mapping):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return require_list(name, value, what)


def _steal(steal) -> float | None:
    if steal is None:
        return None
    if isinstance(steal, bool) or not isinstance(steal, (int, float)):
        raise TypeError(f"steal must be a fraction in [0, 1] or None, got {type(steal).__name__}")
    if not (0 <= steal <= 1):
        raise ValueError(f"steal must be a fraction in [0, 1] or None, got {steal}")
    return float(steal)


# --------------------------------------------------------------------------------------------------
# One timing
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingVerdict:
    """One timing judged: its statistics, the verdict and the reasons (text, one per test that decided)."""

    median: float
    q1: float | None
    q3: float | None
    p10: float | None
    p90: float | None
    minimum: float | None
    repeats: int | None
    spread: float | None          # IQR / median
    p90_ratio: float | None       # p90 / median
    median_over_min: float | None
    steal: float | None
    verdict: str
    reasons: tuple[str, ...]

    @property
    def reliable(self) -> bool:
        return self.verdict == "reliable"

    @property
    def reason(self) -> str:
        """The reasons as one sentence."""
        return "; ".join(self.reasons)

    @property
    def uncertainty(self) -> float | None:
        """How far this timing's median may be off, as a fraction: max(IQR / median, median / fastest - 1).

        None when the spread is unknown (a median only): such a timing can settle nothing (:func:`settles`)."""
        if self.spread is None:
            return None
        return max(self.spread, (self.median_over_min - 1) if self.median_over_min is not None else 0.0)


def timing_verdict(times, *, steal: float | None = None, thresholds: Thresholds = THRESHOLDS,
                   name: str = "times") -> TimingVerdict:
    """Judge one timing from its own numbers and, where known, the CPU steal of its interval.

    "contended" when ``steal`` > ``thresholds.contended_steal``; else "noisy" when any of: fewer than
    ``min_repeats`` repeats, no spread recorded, IQR/median > ``noisy_relative_iqr``, p90/median >
    ``noisy_p90_ratio``, median/fastest > ``noisy_median_over_min``; else "reliable".
    """
    th = _thresholds(thresholds)
    s = summarize_timing(times, name)
    steal = _steal(steal)
    spread = s.spread
    p90_ratio = None if s.p90 is None else s.p90 / s.median
    over_min = None if s.minimum is None else s.median / s.minimum
    noisy, fine = [], []
    if s.repeats is not None and s.repeats < th.min_repeats:
        noisy.append(f"only {s.repeats} repeat{'s' if s.repeats != 1 else ''} (at least {th.min_repeats} "
                     f"are needed to see the spread)")
    if spread is None:
        noisy.append("no spread recorded (a median only): its reliability cannot be judged")
    elif spread > th.noisy_relative_iqr:
        noisy.append(f"the middle half of the repeats spans {spread:.0%} of the median "
                     f"(above {th.noisy_relative_iqr:.0%})")
    else:
        fine.append(f"spread {spread:.1%} of the median")
    ratio_tests = (  # (value, threshold, reason when above, note when not)
        (p90_ratio, th.noisy_p90_ratio, "p90 is {v:.2f}x the median (above {t:g}x): some repeats were much slower",
         "p90 {v:.2f}x the median"),
        (over_min, th.noisy_median_over_min,
         "the median is {v:.2f}x the fastest repeat (above {t:g}x): most repeats were slowed",
         "median {v:.2f}x the fastest repeat"))
    for value, limit, above, below in ratio_tests:
        if value is not None:
            (noisy if value > limit else fine).append((above if value > limit else below).format(v=value, t=limit))
    if steal is not None and steal > th.contended_steal:
        verdict = "contended"
        reasons = [f"CPU steal was {steal:.1%} of the interval (above {th.contended_steal:.0%}): the "
                   f"hypervisor gave this machine's CPU time to others"] + noisy
    elif noisy:
        verdict, reasons = "noisy", noisy
    else:
        verdict = "reliable"
        reasons = fine + ([f"CPU steal {steal:.1%}"] if steal is not None else [])
    return TimingVerdict(median=s.median, q1=s.q1, q3=s.q3, p10=s.p10, p90=s.p90, minimum=s.minimum,
                         repeats=s.repeats, spread=spread, p90_ratio=p90_ratio, median_over_min=over_min,
                         steal=steal, verdict=verdict, reasons=tuple(reasons))


def _worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=VERDICTS.index, default="reliable")


def settles(beyond: float, timings, *, thresholds: Thresholds = THRESHOLDS) -> bool:
    """Does a relation stand although its timings are not all reliable? (``thresholds.decisive_margin``)

    ``beyond``: how far the relation's ratio lies past the boundary that would reverse it, as a natural
    logarithm (e.g. ln(9) for "9x faster" against the boundary 1x; ln(ratio) - ln(1 + tolerance) for
    "slower than predicted, beyond the tolerance"). ``timings``: the :class:`TimingVerdict` of every
    measured operand. True when every uncertainty is known and ``beyond`` exceeds ``decisive_margin`` x
    the sum of ln(1 + uncertainty): the relation survives moving each operand by (1 + u) ** margin
    against it. Reliable timings need no margin: a lesson asks this only of the others.
    """
    th = _thresholds(thresholds)
    beyond = require_real("beyond", beyond)
    verdicts = require_list("timings", timings, "a non-empty list of TimingVerdict (quality.timing_verdict results)")
    if not verdicts or not all(isinstance(v, TimingVerdict) for v in verdicts):
        raise TypeError("timings must be a non-empty list of TimingVerdict (quality.timing_verdict results)")
    us = [v.uncertainty for v in verdicts]
    if None in us or beyond <= 0 or any(v.repeats is not None and v.repeats < th.min_repeats for v in verdicts):
        return False
    return beyond > th.decisive_margin * sum(math.log1p(u) for u in us)


# --------------------------------------------------------------------------------------------------
# Two timings: a faster/slower claim
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingComparison:
    """The time of ``a`` against the time of ``b``, as a claim.

    ``relation``: "faster" (a takes less time), "slower" or "indistinguishable"; ``ratio``: median(a) /
    median(b); ``interval``: (q1(a) / q3(b), q3(a) / q1(b)), the ratio's range when each timing may lie
    anywhere in its middle half (both ends the ratio itself when a spread is unknown); ``effect``: the
    relative difference, slower / faster - 1; ``spread_exceeds_effect``: the larger of the two spreads
    (IQR / median) exceeds ``effect`` (None when a spread is unknown); ``verdict``: the worse of the two
    operands' verdicts, and "noisy" when a relation other than "indistinguishable" rests on a spread
    larger than its effect; ``settled``: the relation stands, because the verdict is "reliable" or because
    "faster" / "slower" clears the operands' uncertainties by ``decisive_margin`` (:func:`settles`).
    """

    relation: str
    ratio: float
    interval: tuple[float, float]
    effect: float
    spread_exceeds_effect: bool | None
    verdict: str
    a: TimingVerdict
    b: TimingVerdict
    reasons: tuple[str, ...]
    settled: bool = False

    @property
    def speedup(self) -> float:
        """How many times faster the faster operand is (>= 1)."""
        return 1 + self.effect

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def compare_timings(a_times, b_times, *, steal: float | None = None,
                    thresholds: Thresholds = THRESHOLDS) -> TimingComparison:
    """Is ``a`` faster than ``b``? The relation, the time ratio with its interval, and its verdict.

    "faster" needs a's upper quartile below b's lower quartile *and* a ratio below 1 / (1 + min_effect);
    "slower" the mirror image; anything else is "indistinguishable". ``compare_timings(a, b)`` is "faster"
    exactly when ``compare_timings(b, a)`` is "slower". ``steal`` applies to both (they were timed together).
    """
    th = _thresholds(thresholds)
    va = timing_verdict(a_times, steal=steal, thresholds=th, name="a_times")
    vb = timing_verdict(b_times, steal=steal, thresholds=th, name="b_times")
    d = math.log(va.median) - math.log(vb.median)       # antisymmetric: d(a, b) == -d(b, a) exactly
    a_lo, a_hi = (va.q1, va.q3) if va.q1 is not None else (va.median, va.median)
    b_lo, b_hi = (vb.q1, vb.q3) if vb.q1 is not None else (vb.median, vb.median)
    cut = math.log1p(th.min_effect)
    if a_hi < b_lo and d < -cut:
        relation = "faster"
    elif a_lo > b_hi and d > cut:
        relation = "slower"
    else:
        relation = "indistinguishable"
    effect = math.expm1(abs(d))
    spreads = [va.spread, vb.spread]
    exceeds = None if None in spreads else max(spreads) > effect
    verdict = _worst([va.verdict, vb.verdict])
    reasons = [f"a takes {va.median / vb.median:.3g}x the time of b (middle halves give "
               f"{a_lo / b_hi:.3g}x to {a_hi / b_lo:.3g}x)"]
    if relation == "indistinguishable":
        if abs(d) <= cut:
            reasons.append(f"the difference is below {th.min_effect:.0%}")
        else:
            reasons.append("the middle halves of the two timings overlap")
    elif exceeds:
        verdict = _worst([verdict, "noisy"])
        reasons.append(f"the spread ({max(spreads):.0%}) is larger than the effect ({effect:.0%})")
    for label, v in (("a", va), ("b", vb)):
        if not v.reliable:
            reasons.append(f"{label} is {v.verdict}: {v.reason}")
    settled = verdict == "reliable" or (relation != "indistinguishable"
                                        and settles(abs(d) - cut, [va, vb], thresholds=th))
    return TimingComparison(relation=relation, ratio=va.median / vb.median, interval=(a_lo / b_hi, a_hi / b_lo),
                      effect=effect, spread_exceeds_effect=exceeds, verdict=verdict, a=va, b=vb,
                      reasons=tuple(reasons), settled=settled)


# --------------------------------------------------------------------------------------------------
# A series: grows / falls / flat
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trend:
    """How a time changes as x grows: ``direction`` in :data:`DIRECTIONS`, with its evidence.

    ``xs`` sorted; ``medians`` per x; ``steps``: the relation of each point to the one before
    (:func:`compare_timings`; "slower" = the time grew); ``overall``: last point against the first;
    ``verdict``: the worst point's verdict; ``settled``: the direction stands (every point reliable, or
    "grows" / "falls" settled by :func:`settles` with no step against it).
    """

    direction: str
    xs: tuple[float, ...]
    medians: tuple[float, ...]
    overall: TimingComparison
    steps: tuple[str, ...]
    verdict: str
    points: tuple[TimingVerdict, ...]
    reasons: tuple[str, ...]
    settled: bool = False

    @property
    def ratio(self) -> float:
        """median(last) / median(first)."""
        return self.overall.ratio

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def trend(xs, times_per_x, *, steal: float | None = None, thresholds: Thresholds = THRESHOLDS,
          names: tuple[str, str] = ("xs", "times_per_x")) -> Trend:
    """Does the time grow, fall or stay flat as x grows? "inconclusive" when the numbers cannot say.

    "grows": the last point is slower than the first (:func:`compare_timings`) and no step falls; "falls": the
    mirror image; "flat": last and first indistinguishable and no step either way; "inconclusive":
    the steps disagree (e.g. up, then down), or a point is not reliable, unless the last point against the
    first is settled (:func:`settles`) and no step goes against it: then "grows" or "falls" stands.
    ``names``: what bad ``xs`` and ``times_per_x`` are called in the error (the caller's arguments).
    """
    nx, nt = names
    th = _thresholds(thresholds)
    xs = _sequence(nx, xs, "a list of numbers")
    series = _sequence(nt, times_per_x, "a list of timings, one per x")
    if len(xs) != len(series):
        raise ValueError(f"{nx} and {nt} must have the same length, got {len(xs)} and {len(series)}")
    if len(xs) < 2:
        raise ValueError(f"{nx} must hold at least 2 points for a trend, got {len(xs)}")
    if len(xs) > 10**4:
        raise ValueError(f"{nx} may hold at most 10**4 points, got {len(xs)}")
    for i, x in enumerate(xs):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"{nx}[{i}] must be a number, got {type(x).__name__}")
        if not math.isfinite(x):
            raise ValueError(f"{nx}[{i}] must be finite, got {x}")
    if len(set(xs)) != len(xs):
        raise ValueError(f"{nx} must not repeat a value")
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    points = [timing_verdict(series[i], steal=steal, thresholds=th, name=f"{nt}[{i}]") for i in order]
    sx = tuple(xs[i] for i in order)
    step_cmp = [compare_timings(points[i + 1], points[i], thresholds=th) for i in range(len(points) - 1)]
    steps = [c.relation for c in step_cmp]
    overall = compare_timings(points[-1], points[0], thresholds=th)
    verdict = _worst(p.verdict for p in points)
    reasons = [f"from x={sx[0]:g} to x={sx[-1]:g} the time changes {overall.ratio:.3g}x"]
    bad = [f"x={x:g} is {p.verdict} ({p.reason})" for x, p in zip(sx, points) if not p.reliable]
    want = {"slower": ("grows", "faster"), "faster": ("falls", "slower"),
            "indistinguishable": ("flat", None)}[overall.relation]
    against = [f"x={sx[i]:g} to x={sx[i + 1]:g} is {s}" for i, s in enumerate(steps)
               if (s == want[1] if want[1] else s != "indistinguishable")]
    if bad and want[1] and overall.settled and not against:
        direction = want[0]
        reasons += bad
        reasons.append(f"the change ({overall.ratio:.3g}x) exceeds the spread of the first and last points by "
                       f"more than {th.decisive_margin:g}x, and no step goes against it")
    elif bad:
        direction = "inconclusive"
        reasons += bad
    elif against:
        direction = "inconclusive"
        reasons.append("the steps disagree: " + ", ".join(against))
    else:
        direction = want[0]
    return Trend(direction=direction, xs=sx, medians=tuple(p.median for p in points), overall=overall,
                 steps=tuple(steps), verdict=verdict, points=tuple(points), reasons=tuple(reasons),
                 settled=direction != "inconclusive")


# --------------------------------------------------------------------------------------------------
# A prediction against a measurement: within x %
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Agreement:
    """A predicted time against a measured one: ``relation`` "within", "over" (predicted too long) or
    "under"; ``error`` = predicted / median - 1; ``error_interval`` over the measurement's middle half;
    ``decided``: the whole interval lies on one side of the tolerance; ``verdict``: the measurement's;
    ``settled``: the relation stands (a reliable measurement, or "over" / "under" by more than the
    measurement's uncertainty allows, :func:`settles`)."""

    relation: str
    error: float
    error_interval: tuple[float, float]
    tolerance: float
    decided: bool
    verdict: str
    measured: TimingVerdict
    reasons: tuple[str, ...]
    settled: bool = False


def within(predicted: float, measured_times, tolerance: float, *, steal: float | None = None,
           thresholds: Thresholds = THRESHOLDS, names: tuple[str, str] = ("predicted", "measured_times")) -> Agreement:
    """Is the ``predicted`` time (seconds) within ``tolerance`` (a fraction, e.g. 0.15) of the measured one?

    ``names``: what a bad ``predicted`` and ``measured_times`` are called in the error (the caller's arguments)."""
    th = _thresholds(thresholds)
    predicted = _seconds(names[0], predicted)
    tolerance = require_positive("tolerance", tolerance, maximum=1e6)
    m = timing_verdict(measured_times, steal=steal, thresholds=th, name=names[1])
    error = predicted / m.median - 1
    lo, hi = ((predicted / m.q3 - 1, predicted / m.q1 - 1) if m.q1 is not None else (error, error))
    relation = "within" if abs(error) <= tolerance else ("over" if error > 0 else "under")

    def side(e: float) -> str:
        return "within" if abs(e) <= tolerance else ("over" if e > 0 else "under")

    decided = side(lo) == side(hi) == relation
    reasons = [f"predicted {predicted:.4g} s, measured {m.median:.4g} s: error {error:+.1%} "
               f"(tolerance ±{tolerance:.0%})"]
    if not decided:
        reasons.append(f"over the measurement's middle half the error runs from {lo:+.1%} to {hi:+.1%}")
    if not m.reliable:
        reasons.append(f"the measurement is {m.verdict}: {m.reason}")
    if relation == "over":
        beyond = math.log(predicted / m.median) - math.log1p(tolerance)
    elif relation == "under":
        beyond = (math.log(m.median / predicted) + math.log1p(-tolerance)) if tolerance < 1 else -1.0
    else:
        beyond = -1.0       # "within" from a noisy measurement: its spread can always carry it out
    settled = m.reliable or settles(beyond, [m], thresholds=th)
    return Agreement(relation=relation, error=error, error_interval=(lo, hi), tolerance=tolerance,
                     decided=decided, verdict=m.verdict, measured=m, reasons=tuple(reasons), settled=settled)


# --------------------------------------------------------------------------------------------------
# Many verdicts: the header of a table
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QualitySummary:
    """Verdicts counted: ``counts`` per verdict, ``verdict`` the worst, ``unreliable`` how many are not reliable."""

    verdict: str
    counts: dict
    total: int

    @property
    def unreliable(self) -> int:
        return self.total - self.counts["reliable"]


def summarize_verdicts(items) -> QualitySummary:
    """Count the verdicts of ``items`` (verdict strings, or results with a ``verdict`` attribute)."""
    items = _sequence("items", items, "a list of verdicts")
    names = []
    for i, item in enumerate(items):
        v = item if isinstance(item, str) else getattr(item, "verdict", None)
        if not isinstance(v, str):
            raise TypeError(f"items[{i}] must be a verdict or a result with one, got {type(item).__name__}")
        if v not in VERDICTS:
            raise ValueError(f"items[{i}] must be one of {', '.join(VERDICTS)}, got {v!r}")
        names.append(v)
    counts = {v: names.count(v) for v in VERDICTS}
    return QualitySummary(verdict=_worst(names), counts=counts, total=len(names))


# --------------------------------------------------------------------------------------------------
# CPU steal from /proc/stat
# --------------------------------------------------------------------------------------------------
def _cpu_line(name: str, text) -> list[int] | None:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be the text of /proc/stat, got {type(text).__name__}")
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            try:
                values = [int(p) for p in parts[1:]]
            except ValueError:
                raise ValueError(f"{name}: the 'cpu' line must hold whole numbers, got {line.strip()!r}") from None
            if len(values) < 4 or any(v < 0 for v in values):
                raise ValueError(f"{name}: the 'cpu' line must hold at least 4 counters >= 0, got {line.strip()!r}")
            return values
    raise ValueError(f"{name} must contain the aggregate 'cpu' line of /proc/stat")


def read_cpu_steal(before: str, after: str) -> float | None:
    """The fraction of CPU time stolen by the hypervisor between two ``/proc/stat`` snapshots.

    The aggregate ``cpu`` line holds user nice system idle iowait irq softirq steal [guest guest_nice]
    in ticks; guest time is already inside user, so the total is the first eight. None when the kernel
    reports no steal column (fewer than 8 counters) or no tick passed between the snapshots.
    """
    b, a = _cpu_line("before", before), _cpu_line("after", after)
    if len(a) != len(b):
        raise ValueError(f"before and after must come from the same system: {len(b)} and {len(a)} counters")
    if any(x < y for x, y in zip(a, b)):
        raise ValueError("after must be taken after before: a counter went down")
    if len(b) < 8:
        return None
    total = sum(a[:8]) - sum(b[:8])
    if total == 0:
        return None
    return (a[7] - b[7]) / total
