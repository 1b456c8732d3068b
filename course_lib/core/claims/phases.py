"""The measured claims of lesson 06 (prefill vs decode), as data.

Lessons: 06

Each function returns a :class:`~course_lib.core.claims.gemv.Claim` (relation, operands, verdict, and the
``outcome`` a lesson renders with :mod:`course_lib.lessons.claims.phases`). Timings are whatever
:func:`course_lib.core.quality.timing_verdict` reads (the TinyLM timings of ``model_timing``, the
profiles' timing records). Torch-free.

::

    from course_lib.core.claims import phases
    phases.tpot_vs_context([16, 256, 512], by_context).outcome     # 'grows', 'falls', 'flat', 'noisy', ...
"""
from __future__ import annotations

import math

from collections.abc import Mapping

from course_lib.core import quality
from course_lib.core.claims.gemv import TOLERANCE, Claim, _verdict, _worst, inherit
from course_lib.core.validation import require_choice, require_list, require_positive, require_real

__all__ = ["latency_inputs", "CONSISTENT_RATIO", "tpot_vs_context", "ttft_vs_prompt", "step_vs_batch", "same_step",
           "roofline_sides", "below_roof", "calibration_gain", "single_max_vs_operators"]

#: two timings of the same work (a batch-1 decode step measured twice in one run) "agree" when their
#: medians are within this factor of each other; beyond it the run cannot say which one is the step's time
CONSISTENT_RATIO = 1.25


def _series(name: str, xs, timings, xs_name: str = "xs") -> tuple[list, list]:
    """``xs`` (positive numbers: contexts, prompts, batches; kept as given) and one timing per x."""
    xs = require_list(xs_name, xs, "a list of numbers")
    timings = require_list("timings", timings, "a list of timings")
    if len(xs) != len(timings) or len(xs) < 2:
        raise ValueError(f"{name}: {xs_name} and timings must have the same length, at least 2 (got {len(xs)} and "
                         f"{len(timings)})")
    for i, x in enumerate(xs):
        require_positive(f"{xs_name}[{i}]", x)
    return xs, timings


def _axis(reasons, axis: str) -> tuple:
    """quality.trend's reasons with "x=" named (e.g. "context 128")."""
    return tuple(r.replace("x=", f"{axis} ") for r in reasons)


def _trend_claim(name: str, xs, timings, steal, axis: str = "x", xs_name: str = "xs") -> Claim:
    t = quality.trend(xs, timings, steal=steal, names=(xs_name, "timings"))
    direction = t.direction
    if direction == "inconclusive" and t.verdict == "reliable":
        direction = "mixed"           # reliable points whose steps disagree: up then down
    return Claim(name, direction,
                 {"xs": t.xs, "seconds": t.medians, "ratio": t.ratio, "first": t.medians[0], "last": t.medians[-1],
                  "steps": t.steps},
                 t.verdict, _axis(t.reasons[1:], axis) if t.verdict != "reliable" else (), t.settled)


def tpot_vs_context(contexts, timings, *, steal: float | None = None) -> Claim:
    """TPOT against the context: "grows" (what the K/V reads predict), "flat", "falls", "mixed" (reliable
    points that go up and down), or the verdict when a point is not reliable."""
    xs, ts = _series("tpot_vs_context", contexts, timings, "contexts")
    return _trend_claim("tpot_vs_context", xs, ts, steal, "context", "contexts")


def ttft_vs_prompt(prompts, timings, fit: tuple[float, float] | None = None, *, steal: float | None = None) -> Claim:
    """TTFT against the prompt length: "grows" expected. ``fit``: (b, k) of a line b + k·P fitted to the
    medians; operands ``physical`` says whether b >= 0 and k > 0 (a line a physical cost can have)."""
    xs, ts = _series("ttft_vs_prompt", prompts, timings, "prompts")
    c = _trend_claim("ttft_vs_prompt", xs, ts, steal, "prompt", "prompts")
    ops = dict(c.operands)
    if fit is not None:
        pair = require_list("fit", fit, "a pair (b, k): the fitted line's intercept and slope")
        if len(pair) != 2:
            raise ValueError(f"fit must be a pair (b, k), got {len(pair)} values")
        b, k = require_real("fit[0]", pair[0]), require_real("fit[1]", pair[1])
        ops.update(intercept=b, slope=k, physical=bool(b >= 0 and k > 0))
    return Claim(c.name, c.relation, ops, c.verdict, c.reasons, c.settled)


def step_vs_batch(batches, timings, predicted_growth: float, *, steal: float | None = None) -> Claim:
    """The decode step time from the smallest to the largest batch against the roofline's growth.

    ``relation``: "flat" (the step cost about the same: the weight read is shared), "as_predicted" (it grew,
    within a factor 1.25 of ``predicted_growth``, the roofline's ratio), "grows_more" (it grew more: each
    extra row costs time of its own), "falls" (the larger batch was faster: impossible for the same work,
    read as noise), "mixed"; or the verdict. Operands: ``growth`` (time ratio), ``throughput_gain``,
    ``growth_settled`` (the step's growth itself stands, :func:`quality.trend`, even where its comparison with the
    roofline does not).
    """
    xs, ts = _series("step_vs_batch", batches, timings, "batches")
    predicted_growth = require_positive("predicted_growth", predicted_growth)
    t = quality.trend(xs, ts, steal=steal, names=("batches", "timings"))
    growth = t.ratio
    if t.direction == "flat" or (t.direction == "grows" and growth <= 1.25 and predicted_growth <= 1.25):
        relation = "flat"
    elif t.direction == "grows":
        relation = "as_predicted" if growth <= 1.25 * predicted_growth else "grows_more"
    elif t.direction == "falls":
        relation = "falls"
    else:
        relation = "mixed"
    settled = (t.settled and relation == "grows_more"
               and quality.settles(math.log(growth / (1.25 * predicted_growth)), [t.points[0], t.points[-1]]))
    reasons = _axis(t.reasons[1:], "batch") if t.verdict != "reliable" else ()
    if t.verdict != "reliable" and t.settled and not settled:
        # the growth stands, what it is compared with does not: say so, not that the change clears the spread
        reasons = tuple(r for r in reasons if "exceeds the spread of the first and last points" not in r) + (
            f"the step grew {growth:.3g}x, which the spread settles, but not whether that is more than the roofline's "
            f"{predicted_growth:.3g}x allows (1.25x of it): the difference does not clear the spread by "
            f"{quality.THRESHOLDS.decisive_margin:g}x",)
    return Claim("step_vs_batch", relation,
                 {"batches": t.xs, "seconds": t.medians, "growth": growth, "predicted_growth": predicted_growth,
                  "throughput_gain": t.xs[-1] / t.xs[0] / growth, "first_batch": t.xs[0], "last_batch": t.xs[-1],
                  "growth_settled": t.settled},
                 t.verdict, reasons, settled)


def same_step(timings: Mapping, *, ratio: float = CONSISTENT_RATIO) -> Claim:
    """Several timings of the same work (``{label: timing}``, e.g. the batch-1 step of two sections): "agree"
    when the largest median is within ``ratio`` of the smallest, else "disagree" (the run's timings of one
    thing differ: noise, not physics). ``verdict`` is "noisy" on disagreement whatever the single verdicts."""
    if not isinstance(timings, Mapping) or len(timings) < 2:
        raise TypeError("timings must be a dict {label: timing} with at least 2 entries")
    ratio = require_positive("ratio", ratio)
    vs = {k: _verdict(str(k), t) for k, t in timings.items()}
    med = {k: v.median for k, v in vs.items()}
    spread = max(med.values()) / min(med.values())
    relation = "agree" if spread <= ratio else "disagree"
    verdict = _worst(*(v.verdict for v in vs.values()))
    reasons = [f"{k} is {v.verdict}: {v.reason}" for k, v in vs.items() if not v.reliable]
    if relation == "disagree":
        verdict = _worst(verdict, "noisy")
        reasons.insert(0, f"the same step measured {spread:.2f}x apart (above {ratio:g}x)")
    return Claim("same_step", relation, {"seconds": med, "spread": spread, "ratio": ratio}, verdict, tuple(reasons))


def roofline_sides(intensities, ridge: float, phase: str = "decode") -> Claim:
    """Which side of the ridge point a phase's points sit: "all_memory", "split" or "all_compute".

    Not a timing claim (the intensities are counted), but the ridge is measured: for small-batch
    ``phase="decode"`` points, "split" or "all_compute" means the measured matmul rate was low; for
    ``"prefill"`` "all_compute" is what is expected."""
    xs = require_list("intensities", intensities, "a list of FLOP per byte")
    for i, x in enumerate(xs):      # checked, kept as given
        require_positive(f"intensities[{i}]", x)
    if not xs:
        raise ValueError("intensities must hold at least one point")
    ridge = require_positive("ridge", ridge)
    phase = require_choice("phase", phase, ("decode", "prefill"))
    left = sum(1 for x in xs if x < ridge)
    relation = "all_memory" if left == len(xs) else ("all_compute" if left == 0 else "split")
    return Claim("roofline_sides", relation, {"left": left, "points": len(xs), "ridge": ridge, "phase": phase,
                                             "lowest": min(xs), "highest": max(xs)})


def below_roof(fractions: Mapping) -> Claim:
    """Measured points against their roofs: ``{label: achieved / roof}``. "below" when every fraction is below 1,
    else "above" (operand ``above``: the labels at or over their roof: a ceiling measured low, or cache)."""
    if not isinstance(fractions, Mapping) or not fractions:
        raise TypeError("fractions must be a dict {label: achieved / roof}")
    vals = {k: require_positive(f"fractions[{k!r}]", v) for k, v in fractions.items()}
    above = tuple(k for k, v in vals.items() if v >= 1)
    return Claim("below_roof", "above" if above else "below", {"fractions": vals, "above": above})


def calibration_gain(measured, calibrated_seconds: float, uncalibrated_seconds: float, *,
                     tolerance: float = TOLERANCE, steal: float | None = None, basis: Claim | None = None) -> Claim:
    """What the calibration adds: the calibrated and the uncalibrated prediction against one measurement.

    ``relation``: "calibrated_better" (its error is the smaller by more than the measurement's own spread
    allows either way), "uncalibrated_better", "no_difference"; operands: both errors, both
    :func:`quality.within` relations at ``tolerance``. ``basis``: the claim of the calibration both predictions
    were computed on (``caching.model_calibration``), whose verdict the claim inherits (``gemv.inherit``).
    """
    a = quality.within(require_positive("calibrated_seconds", calibrated_seconds, maximum=1e6), measured, tolerance,
                       steal=steal, names=("calibrated_seconds", "measured"))
    b = quality.within(require_positive("uncalibrated_seconds", uncalibrated_seconds, maximum=1e6), measured, tolerance,
                       steal=steal, names=("uncalibrated_seconds", "measured"))
    ea, eb = abs(a.error), abs(b.error)
    spread = a.measured.spread or 0.0
    b_verdict, b_reasons = inherit(basis, "each prediction")
    if ea + spread < eb:
        relation = "calibrated_better"
    elif eb + spread < ea:
        relation = "uncalibrated_better"
    else:
        relation = "no_difference"
    return Claim("calibration_gain", relation,
                 {"seconds": a.measured.median, "calibrated_seconds": calibrated_seconds,
                  "uncalibrated_seconds": uncalibrated_seconds, "calibrated_error": a.error,
                  "uncalibrated_error": b.error, "calibrated_within": a.relation, "uncalibrated_within": b.relation,
                  "tolerance": tolerance},
                 _worst(a.verdict, b_verdict), ((f"the measurement is {a.measured.verdict}: {a.measured.reason}",)
                                                if not a.measured.reliable else ()) + b_reasons)


def single_max_vs_operators(phase) -> Claim:
    """One phase's single max(FLOPs / peak, bytes / bandwidth) against the sum over its operators.

    ``phase``: an estimator ``PhaseCost`` (``time``, ``single_max_time``, ``operators``). Computed, not
    measured (verdict "reliable"): relation "sum_larger" or "equal" (one operator bound, or all bound
    the same way). Operands: both times, the excess, each operator's (name, time, bound)."""
    for attr in ("time", "single_max_time", "operators"):
        if not hasattr(phase, attr):
            raise TypeError(f"phase must be an estimator PhaseCost (with {attr}), got {type(phase).__name__}")
    total, single = phase.time, phase.single_max_time
    relation = "sum_larger" if total > single * (1 + 1e-9) else "equal"
    ops = tuple((o.name, o.time, "compute" if o.compute_time >= o.memory_time else "memory",
                 o.compute_time, o.memory_time) for o in phase.operators)
    return Claim("single_max_vs_operators", relation,
                 {"per_operator_seconds": total, "single_max_seconds": single, "excess": total / single - 1,
                  "operators": ops})


def latency_inputs(ttft, tpot, same: Claim | None = None) -> Claim:
    """Whether a latency built from measured TTFT and TPOT (``TTFT + (n - 1)·TPOT`` and what follows from it)
    stands for this machine: "settled" when both timings are reliable and, where given, ``same`` (the
    :func:`same_step` claim of the TPOT measured in two cells) agrees; else "unsettled", and the numbers built on
    them are this run's, not the machine's. Operands: ``ttft``, ``tpot`` (medians)."""
    vt, vd = _verdict("ttft", ttft), _verdict("tpot", tpot)
    reasons = [f"the {n} timing is {v.verdict}: {v.reason}" for n, v in (("TTFT", vt), ("TPOT", vd)) if not v.reliable]
    verdict = _worst(vt.verdict, vd.verdict)
    if same is not None:
        if not isinstance(same, Claim) or same.name != "same_step":
            raise TypeError("same must be the same_step claim of the TPOT")
        if same.outcome != "agree":
            verdict = _worst(verdict, "noisy")
            reasons.append(f"the same batch-1 step measured in two cells came out {same.operands['spread']:.2f}× "
                           "apart")
    return Claim("latency_inputs", "settled" if verdict == "reliable" else "unsettled",
                 {"ttft": vt.median, "tpot": vd.median}, verdict, tuple(reasons))

