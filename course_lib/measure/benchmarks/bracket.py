"""Bracketed measurement: every measurement between two probe sets, and one rule that judges a point.

Lessons: none

A benchmark that compares a prediction built on probes with a measurement taken minutes later would count the
machine's drift (a shared machine's memory bandwidth moves by 10 % within a minute, with no CPU steal to show for
it) as the model's error. So every measurement runs between two sets of the probes its prediction reads, and is
predicted from those two; the cases compared are interleaved, so that a drift lands on every case alike::

    from course_lib.measure.benchmarks.bracket import Bracketed, interleave, judge

    seq = Bracketed(probe=lambda: reprobe_gemv(calibration, shapes))   # what the prediction reads, run again
    seq.run(interleave([128, 1024, 4096], rounds=3), measure)          # probe, c1, probe, c2, probe, c3, probe, ...
    for c in (128, 1024, 4096):
        ms = seq.of(c)                                  # every measurement of c: .value, .before, .after, .index
        ratios = [m.value.seconds / predicted(c, m.before, m.after) for m in ms]
        j = judge(ratios, own=[verdict(m.value) for m in ms],
                  probe_steps=[disagreement(m.before, m.after) for m in ms])
        j.verdict, j.reason, ms[j.kept]                 # "reliable" or "noisy" / "contended", why, the point

**The rule** (:func:`judge`, pure: ratios in, verdict out). Each measurement of a point gives a ratio
measured / predicted, its prediction made from the probes just before and just after it. A drift the probes
followed moves a measurement and its prediction alike and leaves the ratio; one they missed does not. The point is
the measurement with the median ratio (the upper one of an even count). It is

* **contended** when the CPU steal of the interval (where the system reports it) is above
  :attr:`~course_lib.core.quality.Thresholds.contended_steal`; else
* **noisy** when the kept measurement's own timing is not reliable (its repeats or steps, judged by
  :func:`course_lib.core.quality.timing_verdict`); or when the ratios disagree: (max - min) / median of the
  middle ratios (the ``(n - 3) // 2`` highest and as many lowest set aside: all of 3, the middle 3 of 5) above
  :attr:`~course_lib.core.quality.Thresholds.noisy_relative_iqr`; or when the probe sets just before and just
  after the kept measurement disagree by more than that (the machine changed while it ran); or when there are
  fewer than :attr:`~course_lib.core.quality.Thresholds.min_repeats` ratios;
* **reliable** otherwise.

A benchmark may measure a point that is not reliable again (:meth:`Bracketed.run` continues the same sequence)
and judge it on all its measurements: with five, one disturbed measurement no longer decides the verdict, while a
disturbance that lasts still does. Nothing here imports torch or times anything: the caller passes the functions
that measure and probe, so the rule is tested with numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

from course_lib.core.quality import THRESHOLDS, Thresholds, TimingVerdict
from course_lib.core.validation import require_count

__all__ = ["Measurement", "Bracketed", "interleave", "Judgement", "judge", "middle", "Drift"]


@dataclass(frozen=True)
class Measurement:
    """One measurement of ``item`` and the probe sets run just before and just after it (``index``: the position
    of ``before`` in :attr:`Bracketed.probes`)."""

    item: Hashable
    value: Any
    before: Any
    after: Any
    index: int


class Bracketed:
    """A sequence probe, measurement, probe, measurement, probe, ...: every measurement between two probe sets.

    ``probe()`` runs what the prediction reads (e.g. the GEMV probes of a model's shapes) and returns it;
    :meth:`run` measures items in the order given. A later :meth:`run` continues from the last probe set.
    """

    def __init__(self, probe: Callable[[], Any]):
        if not callable(probe):
            raise TypeError(f"probe must be a function of no arguments, got {type(probe).__name__}")
        self.probe = probe
        self.probes: list = []
        self.measurements: list[Measurement] = []

    def run(self, order: Iterable[Hashable], measure: Callable[[Hashable], Any]) -> list[Measurement]:
        """Measure each item of ``order`` with ``measure(item)``, each between two probe sets; the new measurements."""
        if not callable(measure):
            raise TypeError(f"measure must be a function of one item, got {type(measure).__name__}")
        new = []
        for item in order:
            if not self.probes:
                self.probes.append(self.probe())
            value = measure(item)
            self.probes.append(self.probe())
            i = len(self.probes) - 2
            new.append(Measurement(item, value, self.probes[i], self.probes[i + 1], i))
        self.measurements += new
        return new

    def of(self, item: Hashable) -> list[Measurement]:
        """Every measurement of ``item``, in the order they ran."""
        return [m for m in self.measurements if m.item == item]


def interleave(items: Sequence[Hashable], rounds: int, *, alternate: bool = False) -> list:
    """The order of ``rounds`` interleaved rounds over ``items``: A B C A B C ... (``alternate``: A B C C B A A B C
    ..., so that no item always runs first)."""
    items = list(items)
    if not items:
        raise ValueError("items must name at least one case")
    rounds = require_count("rounds", rounds, minimum=1, maximum=10**6)
    return [x for r in range(rounds) for x in (items[::-1] if alternate and r % 2 else items)]


def middle(count: int) -> int:
    """How many of ``count`` ratios the agreement covers: all of 3 or fewer, else the middle 3 (4 of an even count)."""
    count = require_count("count", count, minimum=1)
    return count - 2 * (max(0, count - 3) // 2)


@dataclass(frozen=True)
class Judgement:
    """The verdict of one point (:func:`judge`).

    ``kept``: the index of the measurement the point is (median ratio); ``ratio``: its ratio; ``agreement``:
    (max - min) / median of the middle ``middle`` ratios; ``verdict``: "reliable", "noisy" or "contended";
    ``reason``: why ("" when reliable).
    """

    kept: int
    ratio: float
    agreement: float
    middle: int
    verdict: str
    reason: str

    @property
    def reliable(self) -> bool:
        return self.verdict == "reliable"


def _ratios(ratios) -> list[float]:
    try:
        out = [float(r) for r in ratios]
    except (TypeError, ValueError):
        raise TypeError(f"ratios must be a list of numbers (measured / predicted), got {ratios!r}") from None
    if not out:
        raise ValueError("ratios must hold at least one measured / predicted ratio")
    if not all(math.isfinite(r) and r > 0 for r in out):
        raise ValueError(f"ratios must be finite and > 0, got {out}")
    return out


def _per_measurement(name: str, values, n: int) -> list:
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{name} must give one value per ratio ({n}), got {len(values)}")
    return values


def judge(ratios: Sequence[float], *, own: Sequence[TimingVerdict | None] | None = None,
          probe_steps: Sequence[float | None] | None = None, steal: float | None = None,
          thresholds: Thresholds = THRESHOLDS, what: str = "measurements") -> Judgement:
    """Judge one point from its measurements' ratios measured / predicted (see the module's rule).

    ``own``: the verdict of each measurement's own timing (None: not judged); ``probe_steps``: for each
    measurement, how far the probe sets just before and just after it disagree (|b - a| / min(a, b); None: not
    known); ``steal``: the CPU steal of the whole interval (None: not reported); ``what``: the measurements' name
    in the reason ("interleaved rounds", "repeats").
    """
    rs = _ratios(ratios)
    n = len(rs)
    own = _per_measurement("own", own, n)
    steps = _per_measurement("probe_steps", probe_steps, n)
    if not isinstance(thresholds, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
    order = sorted(range(n), key=rs.__getitem__)
    kept = order[n // 2]
    k = middle(n)
    trim = (n - k) // 2
    inner = order[trim:n - trim]
    agreement = (rs[inner[-1]] - rs[inner[0]]) / rs[kept]
    limit = thresholds.noisy_relative_iqr
    which = f"the {n} {what}'" if k == n else f"the {n} {what}' middle {k}"
    verdict, reason = "reliable", ""
    if steal is not None and steal > thresholds.contended_steal:
        verdict = "contended"
        reason = (f"CPU steal was {steal:.1%} of the interval (above {thresholds.contended_steal:.0%}): the "
                  f"hypervisor gave this machine's CPU time to others")
    elif own[kept] is not None and own[kept].verdict != "reliable":
        verdict = own[kept].verdict
        reason = f"its own timing: {own[kept].reason or own[kept].verdict}"
    elif n < thresholds.min_repeats:
        verdict = "noisy"
        reason = f"only {n} {what} (at least {thresholds.min_repeats} are needed to see whether they agree)"
    elif agreement > limit:
        verdict = "noisy"
        reason = (f"{which} measured / predicted ratios disagree by {agreement:.0%} (above {limit:.0%}): the "
                  f"machine drifted in a way the probes around them did not follow")
    elif steps[kept] is not None and steps[kept] > limit:
        verdict = "noisy"
        reason = (f"the probes just before and just after it disagree by {steps[kept]:.0%} (above {limit:.0%}): "
                  f"the machine changed while it ran")
    return Judgement(kept=kept, ratio=rs[kept], agreement=agreement, middle=k, verdict=verdict, reason=reason)


@dataclass(frozen=True)
class Drift:
    """How one term of a prediction moved over the probe sets of a bracketed sequence.

    ``calibrated``: the term (seconds) from the calibration; ``bracketed``: the same term from each probe set, in
    the order they ran (e.g. a model's weights term from each set of GEMV probes).
    """

    model: str
    calibrated: float
    bracketed: tuple

    @property
    def relative(self) -> float:
        """(max - min) / min over the calibration and every probe set."""
        xs = (self.calibrated, *self.bracketed)
        return (max(xs) - min(xs)) / min(xs)

    def step(self, i: int) -> float:
        """How far the probe sets ``i`` and ``i + 1`` disagree: |difference| / the smaller."""
        a, b = self.bracketed[i], self.bracketed[i + 1]
        return abs(b - a) / min(a, b)

    def line(self) -> str:
        lo, hi = min(self.bracketed), max(self.bracketed)
        return (f"{self.model}: weights term {self.calibrated * 1e3:.1f} ms from the calibration, {lo * 1e3:.1f} to "
                f"{hi * 1e3:.1f} ms from the {len(self.bracketed)} sets of probes around its measurements "
                f"(all together they move by {self.relative:.0%})")
