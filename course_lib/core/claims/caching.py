"""The measured claims of lesson 07 (first-token optimisation), as data.

Lessons: 06, 07

Every sentence of lesson 07 §7 that states a relation between measurements is one of these functions: the
cache against no cache (prefix and session), the calibrated model within ±25 % or not (per case), the
roofline against the measurement, where the profile and the model disagree most, and how far reused modules
move the logits. Each returns a :class:`~course_lib.core.claims.gemv.Claim` (relation, operands, verdict;
``outcome`` is what :mod:`course_lib.lessons.claims.caching` renders). Torch-free.

Timings: a prefix measurement is anything with ``full_seconds``/``full_q1``/``full_q3``,
``cached_seconds``/``cached_q1``/``cached_q3`` and ``repeats`` (``cache_timing.PrefixTiming`` or its dict);
a session measurement anything with per-turn medians ``ttft_nocache``/``ttft_cached`` and ``repeats``
(``cache_timing.SessionTiming``). A session records medians only, so its verdict comes from the one check
the run itself offers: turn 1 is the same full prefill with and without the cache, and its two medians must
agree within :data:`~course_lib.core.claims.phases.CONSISTENT_RATIO`.

::

    from course_lib.core.claims import caching as claims
    claims.prefix_cache(pt).outcome                   # 'cache_faster', 'same', 'cache_slower', 'noisy', ...
    claims.session_cache(st).operands["turn1"]       # (no cache, cache) seconds of turn 1
"""
from __future__ import annotations

import math

from collections.abc import Mapping

from course_lib.core import quality
from course_lib.core.claims.gemv import DISPATCH_SECONDS, TOLERANCE, Claim, _get, _named, _worst, inherit, probes
from course_lib.core.claims.phases import CONSISTENT_RATIO
from course_lib.core.validation import in_argument, require_choice, require_count, require_list, require_positive

__all__ = ["prefix_timings", "prefix_cache", "session_cache", "model_calibration", "model_sources", "model_case",
           "calibrated_cases",
           "calibrated_summary", "roofline_vs_measured", "largest_gap", "profile_vs_measured", "module_positions",
           "PROFILE_KINDS"]

#: the kinds of work a ``cache_timing.profile_prefill`` profile splits a pass into, and the calibrated terms
#: (``predict.Prediction.terms``) that price each kind
PROFILE_KINDS = {
    "the matrix products": (("matrix products",), ("linear", "attention")),
    "the softmax and masking of the scores": (("softmax and masking",), ("scores",)),
    "the other operators and the Python between them": (("other",), ("overhead", "views", "kv_load")),
}


def _timing(obj, prefix: str) -> dict:
    med = _get(obj, f"{prefix}_seconds")
    if med is None:
        raise TypeError(f"the prefix measurement must carry {prefix}_seconds (a cache_timing.PrefixTiming), got "
                        f"{type(obj).__name__}")
    out = {"seconds": med, "repeats": _get(obj, "repeats")}
    q1, q3 = _get(obj, f"{prefix}_q1"), _get(obj, f"{prefix}_q3")
    if q1 is not None and q3 is not None:
        out.update(q1_seconds=q1, q3_seconds=q3)
    return out


def prefix_timings(measurement) -> tuple[dict, dict]:
    """(full, cached) timing records of a prefix measurement, as :func:`quality.timing_verdict` reads them."""
    return _timing(measurement, "full"), _timing(measurement, "cached")


def prefix_cache(measurement, *, steal: float | None = None) -> Claim:
    """The cached prefill against the full one: "cache_faster", "same" (indistinguishable) or "cache_slower".

    Operands: ``full_seconds``, ``cached_seconds``, ``speedup`` (full / cached), ``tokens`` (prefix, new)."""
    full, cached = prefix_timings(measurement)
    c = quality.compare_timings(cached, full, steal=steal)
    relation = {"faster": "cache_faster", "slower": "cache_slower", "indistinguishable": "same"}[c.relation]
    return Claim("prefix_cache", relation,
                 {"full_seconds": c.b.median, "cached_seconds": c.a.median, "speedup": c.b.median / c.a.median,
                  "prefix_tokens": _get(measurement, "prefix_tokens"), "new_tokens": _get(measurement, "new_tokens")},
                 c.verdict, _named(c.reasons[1:], "the cached timing", "the full timing")
                 if c.verdict != "reliable" else (), c.settled and relation != "same")


def _per_turn(name: str, values) -> tuple[float, ...]:
    values = require_list(name, values, "a list of seconds, one per turn")
    return tuple(require_positive(f"{name}[{i}]", v, maximum=1e6) for i, v in enumerate(values))


def session_cache(measurement, *, ratio: float = CONSISTENT_RATIO, min_repeats: int | None = None) -> Claim:
    """Turns 2 .. T of a session with the cache against without it.

    ``relation``: "cache_faster" (every later turn faster with the cache, by more than ``ratio``),
    "cache_slower" (some later turn slower with it), "mixed" (otherwise), or "one_turn" (a one-turn session
    has nothing to compare). ``verdict``: "noisy" when turn 1 -- the same full prefill in both sessions --
    gave medians more than ``ratio`` apart (the run's timings of one piece of work disagree), or when fewer
    than ``quality.THRESHOLDS.min_repeats`` sessions were timed; else "reliable". Operands: per-turn
    seconds, ``turn1`` (no cache, cache), ``turn1_ratio``, the summed totals and their ``speedup``.
    """
    nc = _per_turn("measurement.ttft_nocache", _get(measurement, "ttft_nocache"))
    ca = _per_turn("measurement.ttft_cached", _get(measurement, "ttft_cached"))
    if len(nc) != len(ca):
        raise ValueError(f"ttft_nocache and ttft_cached must have one entry per turn, got {len(nc)} and {len(ca)}")
    ratio = require_positive("ratio", ratio, maximum=100.0)
    repeats = _get(measurement, "repeats")
    repeats = None if repeats is None else require_count("measurement.repeats", repeats)
    need = quality.THRESHOLDS.min_repeats if min_repeats is None else require_count("min_repeats", min_repeats)
    t1 = max(nc[0], ca[0]) / min(nc[0], ca[0])
    reasons = []
    if t1 > ratio:
        reasons.append(f"turn 1 is the same full prefill with and without the cache, yet its two medians are "
                       f"{t1:.2f}x apart (above {ratio:g}x)")
    if repeats is not None and repeats < need:
        reasons.append(f"only {repeats} session{'s' if repeats != 1 else ''} timed (at least {need} are needed to "
                       f"trust a median)")
    # without the cache every turn prefills the whole, longer conversation: its time cannot fall from turn to turn
    cut = 1 + quality.THRESHOLDS.min_effect
    falls = [i for i in range(1, len(nc)) if nc[i - 1] > nc[i] * cut]
    if falls:
        steps = ", ".join(f"turn {i} {nc[i - 1]:.3g} s to turn {i + 1} {nc[i]:.3g} s" for i in falls)
        reasons.append(f"without the cache each turn prefills a longer prompt, yet the time fell ({steps}): the "
                       "machine's speed changed during the run")
    later = list(zip(nc[1:], ca[1:]))
    if not later:
        relation = "one_turn"
    elif all(n > c * ratio for n, c in later):
        relation = "cache_faster"
    elif any(c > n for n, c in later):
        relation = "cache_slower"
    else:
        relation = "mixed"
    total_nc, total_c = sum(nc), sum(ca)
    return Claim("session_cache", relation,
                 {"nocache": nc, "cached": ca, "turn1": (nc[0], ca[0]), "turn1_ratio": t1, "ratio": ratio,
                  "total_nocache": total_nc, "total_cached": total_c, "speedup": total_nc / total_c,
                  "slower_turns": tuple(i + 2 for i, (n, c) in enumerate(later) if c > n),
                  "repeats": repeats, "turns": len(nc)},
                 "noisy" if reasons else "reliable", tuple(reasons))


# --------------------------------------------------------------------------------------------------
# The calibrated model: how settled its probes are, then case by case
# --------------------------------------------------------------------------------------------------
def model_sources(calibration, *, ratio: float = CONSISTENT_RATIO) -> tuple[dict, tuple]:
    """The probe timings a calibrated model (``calibrate.Calibration``) rests on, and the contradictions between its
    probes: ``({label: timing}, (sentence, ...))``, what :func:`~course_lib.core.claims.gemv.probes` reads.

    The timings are its copy, square-matmul and op-overhead probes (the calibration keeps their quartiles; its
    tables of rates per shape keep medians only, so their spread is not known). The contradiction it can show: the
    cold-op series (``cold_ops``: bytes streamed before the ops, seconds per op, per view) must not fall by more than
    ``ratio`` from one flush size to a larger one, because streaming more bytes only empties the caches further (a
    busy run of lesson 07 gave 27.1 µs after 16 MiB and 4.7 µs after 32 MiB)."""
    ratio = require_positive("ratio", ratio, maximum=100.0)
    sources = {}
    for label, attr in (("the copy probe", "copy"), ("the fp32 matmul probe", "matmul"),
                        ("the op-overhead probe", "overhead")):
        timing = _get(calibration, attr)
        if timing is None:
            raise TypeError(f"calibration must carry its {attr} probe (a calibrate.Calibration), got "
                            f"{type(calibration).__name__}")
        sources[label] = timing
    cold = sorted(tuple(p) for p in (_get(calibration, "cold_ops") or ()))
    fell = [f"after {a[0] / 2**20:.0f} MiB {a[1] * 1e6:.3g} µs, after {b[0] / 2**20:.0f} MiB {b[1] * 1e6:.3g} µs"
            for a, b in zip(cold, cold[1:]) if a[1] > b[1] * ratio]
    contradictions = ((f"the cold-op probe's cost per operator fell while more bytes streamed before it ("
                       f"{'; '.join(fell)}), which emptier caches cannot cause: the machine's speed changed between "
                       "its runs",) if fell else ())
    return sources, contradictions


def model_calibration(calibration, *, what: str = "the calibrated model") -> Claim:
    """How settled a calibrated model's probes are (``calibrate.Calibration``): a
    :func:`~course_lib.core.claims.gemv.probes` claim over :func:`model_sources`. Every prediction of the model
    inherits its verdict (``basis=`` of :func:`model_case`, :func:`calibrated_cases`)."""
    sources, contradictions = model_sources(calibration)
    return probes(sources, what=what, contradictions=contradictions)


def model_case(case: str, measured, predicted: float, *, tolerance: float = TOLERANCE, verdict: str | None = None,
               reasons=(), kind: str = "time", basis: Claim | None = None) -> Claim:
    """One case of the calibrated model: "within" ``tolerance`` of the measurement, "over" (predicted too long)
    or "under" (too short).

    ``measured``: a timing (then :func:`quality.within` decides, with the timing's own verdict) or a number
    (seconds, or a ratio for ``kind="ratio"``; then ``verdict`` and ``reasons`` give the verdict of the
    measurements behind it, default "reliable"). ``basis``: the claim of the calibration the prediction was
    computed on (:func:`model_calibration`), whose verdict the case inherits (:func:`~.gemv.inherit`). Operands:
    ``measured``, ``predicted``, ``error`` = (predicted - measured) / measured, ``tolerance``, ``kind``.
    """
    if not isinstance(case, str) or not case:
        raise TypeError(f"case must be a non-empty string, got {case!r}")
    kind = require_choice("kind", kind, ("time", "ratio"))
    tolerance = require_positive("tolerance", tolerance, maximum=10.0)
    predicted = require_positive("predicted", predicted, maximum=1e6)
    verdict = None if verdict is None else require_choice("verdict", verdict, quality.VERDICTS)
    reasons = require_list("reasons", reasons, "a list of sentences")
    if not all(isinstance(r, str) for r in reasons):
        raise TypeError("reasons must be a list of sentences (strings)")
    b_verdict, b_reasons = inherit(basis, "the calibrated prediction")
    if isinstance(measured, (int, float)) and not isinstance(measured, bool):
        m = require_positive("measured", measured, maximum=1e6)
        error = predicted / m - 1
        relation = "within" if abs(error) <= tolerance else ("over" if error > 0 else "under")
        v = verdict or "reliable"
        why = tuple(reasons) if v != "reliable" else ()
    else:
        a = quality.within(predicted, measured, tolerance, names=("predicted", "measured"))
        m, error, relation, v = a.measured.median, a.error, a.relation, a.verdict
        if verdict is not None:
            v = _worst(v, verdict)
        why = ((f"the measurement is {a.measured.verdict}: {a.measured.reason}",) if not a.measured.reliable
               else ()) + (tuple(reasons) if v != "reliable" else ())
    return Claim("model_case", relation, {"case": case, "measured": m, "predicted": predicted, "error": error,
                                          "tolerance": tolerance, "kind": kind},
                 _worst(v, b_verdict), why + b_reasons)


def calibrated_cases(prefix, session, prefix_pred, session_pred, *, tolerance: float = TOLERANCE,
                     labels: Mapping | None = None, basis: Claim | None = None) -> list[Claim]:
    """The calibrated model on lesson 07's six cases: the full and the cached prefill (timings), the two
    session sums, and the two speed-ups (ratios; their verdict is the worse of the timings behind them).

    ``prefix_pred``/``session_pred``: anything with ``ttft_miss``/``ttft_hit`` and ``total_nocache``/
    ``total_cached`` (``cache_timing.CalibratedPrefix`` / ``CalibratedSession``). ``labels``: the case names,
    keys "full", "cached", "nocache_sum", "cached_sum", "prefix_speedup", "session_speedup". ``basis``: the claim
    of the calibration behind the predictions (:func:`model_calibration`): every case inherits its verdict, so a
    noisy calibration leaves every case undecided.
    """
    names = {"full": "full prefill", "cached": "cached prefix", "nocache_sum": "session, no cache (sum)",
             "cached_sum": "session, session cache (sum)", "prefix_speedup": "prefix cache speed-up",
             "session_speedup": "session cache speed-up"}
    if labels is not None:
        if not isinstance(labels, Mapping):
            raise TypeError(f"labels must be a dict of case names, got {type(labels).__name__}")
        unknown = set(labels) - set(names)
        if unknown:
            raise ValueError(f"labels has unknown keys {sorted(unknown)}; known: {sorted(names)}")
        names.update(labels)
    with in_argument("prefix"):
        full, cached = prefix_timings(prefix)
        pc = prefix_cache(prefix)
    with in_argument("session"):
        sc = session_cache(session)
    pred = {attr: require_positive(f"{arg}.{attr}", _get(obj, attr), maximum=1e6)
            for arg, obj, attrs in (("prefix_pred", prefix_pred, ("ttft_miss", "ttft_hit")),
                                    ("session_pred", session_pred, ("total_nocache", "total_cached")))
            for attr in attrs}
    out = [model_case(names["full"], full, pred["ttft_miss"], tolerance=tolerance, basis=basis),
           model_case(names["cached"], cached, pred["ttft_hit"], tolerance=tolerance, basis=basis)]
    for key, attr in (("nocache_sum", "total_nocache"), ("cached_sum", "total_cached")):
        out.append(model_case(names[key], sc.operands[attr], pred[attr], tolerance=tolerance,
                              verdict=sc.verdict, reasons=sc.reasons, basis=basis))
    p_speed = pred["ttft_miss"] / pred["ttft_hit"]
    s_speed = pred["total_nocache"] / pred["total_cached"]
    pv = _worst(quality.timing_verdict(full).verdict, quality.timing_verdict(cached).verdict)
    out.append(model_case(names["prefix_speedup"], pc.operands["speedup"], p_speed, tolerance=tolerance,
                          verdict=pv, reasons=("a ratio of two timings, at least one of them not reliable",),
                          kind="ratio", basis=basis))
    out.append(model_case(names["session_speedup"], sc.operands["speedup"], s_speed, tolerance=tolerance,
                          verdict=sc.verdict, reasons=sc.reasons, kind="ratio", basis=basis))
    return out


def calibrated_summary(cases) -> Claim:
    """How many of ``cases`` (:func:`model_case` claims) are within tolerance, among the cases the run decides:
    "all_within", "some_within", "none_within", or "none_decided" (no case is decided). ``verdict``: the worst of
    the cases'. Operands: ``inside``/``outside`` (names of the decided cases within / outside the tolerance),
    ``unreliable`` (the cases whose measurements or calibration are not reliable: neither inside nor outside)."""
    cases = require_list("cases", cases, "a list of model_case claims")
    if not cases:
        raise ValueError("cases must hold at least one model_case claim")
    for i, c in enumerate(cases):
        if not isinstance(c, Claim) or c.name != "model_case":
            raise TypeError(f"cases[{i}] must be a model_case Claim, got {type(c).__name__}")
    decided = [c for c in cases if c.decided]
    inside = tuple(c.operands["case"] for c in decided if c.relation == "within")
    outside = tuple(c.operands["case"] for c in decided if c.relation != "within")
    relation = ("none_decided" if not decided else
                "all_within" if not outside else ("none_within" if not inside else "some_within"))
    bad = [c for c in cases if not c.decided]
    return Claim("calibrated_summary", relation,
                 {"inside": inside, "outside": outside, "tolerance": cases[0].operands["tolerance"],
                  "unreliable": tuple(c.operands["case"] for c in bad)},
                 _worst(*(c.verdict for c in cases)),
                 tuple(f"{c.operands['case']}: {c.reason}" for c in bad))


#: measured / roofline within this of 1 is "at" the floor: the 0.5 % a factor printed to two decimals cannot show.
AT_FLOOR = 0.005


def roofline_vs_measured(case: str, measured, roofline_seconds: float, *, basis: Claim | None = None) -> Claim:
    """The roofline (a floor) against a measurement: "below" (the floor is under the measured time, as a floor
    must be), "at" (measured / roofline within :data:`AT_FLOOR` of 1: the step runs at its floor) or "above" (the
    measurement beat its floor: a ceiling was measured too low). Operands: ``factor`` =
    measured / roofline. ``measured``: a timing or seconds (then "reliable"); ``basis``: the claim of the ceilings
    the roofline was computed on (``gemv.calibration``), whose verdict the claim inherits (:func:`~.gemv.inherit`)."""
    roofline_seconds = require_positive("roofline_seconds", roofline_seconds, maximum=1e6)
    if isinstance(measured, (int, float)) and not isinstance(measured, bool):
        med, v, why = require_positive("measured", measured, maximum=1e6), "reliable", ()
    else:
        tv = quality.timing_verdict(measured, name="measured")
        med, v, why = tv.median, tv.verdict, ((tv.reason,) if not tv.reliable else ())
    b_verdict, b_reasons = inherit(basis, "the roofline")
    factor = med / roofline_seconds
    relation = "at" if abs(factor - 1) < AT_FLOOR else ("below" if roofline_seconds <= med else "above")
    return Claim("roofline_vs_measured", relation,
                 {"case": case, "measured": med, "roofline": roofline_seconds, "factor": factor},
                 _worst(v, b_verdict), why + b_reasons)


# --------------------------------------------------------------------------------------------------
# The profile against the model; modular reuse
# --------------------------------------------------------------------------------------------------
def largest_gap(profile: Mapping, terms: Mapping, measured_seconds: float) -> Claim:
    """The kind of work (:data:`PROFILE_KINDS`) where a ``torch.profiler`` split of one pass
    (``cache_timing.profile_prefill``: seconds per kind and ``total``) and the calibrated model's ``terms``
    differ most. The Python between the operators, which the profiler does not see (measured - profiled
    total, when positive), is counted with "the other operators". ``relation``: that kind; operands:
    ``profiled`` and ``predicted`` seconds for each kind."""
    if not isinstance(profile, Mapping) or not isinstance(terms, Mapping):
        raise TypeError("profile and terms must be dicts (cache_timing.profile_prefill(), Prediction.terms)")
    measured_seconds = require_positive("measured_seconds", measured_seconds, maximum=1e6)
    unseen = max(measured_seconds - float(profile.get("total", 0.0)), 0.0)
    kinds = {}
    for name, (pkeys, tkeys) in PROFILE_KINDS.items():
        prof = sum(float(profile.get(k, 0.0)) for k in pkeys) + (unseen if "other" in pkeys else 0.0)
        kinds[name] = (prof, sum(float(terms.get(k, 0.0)) for k in tkeys))
    name = max(kinds, key=lambda k: abs(kinds[k][0] - kinds[k][1]))
    return Claim("largest_gap", name, {"kinds": kinds, "profiled": kinds[name][0], "predicted": kinds[name][1]})


def profile_vs_measured(measured_seconds: float, profiled_seconds: float, *, timing=None,
                        calls: int | None = None) -> Claim:
    """The measured median of a pass against its profiled operator time: "measured_longer" (the Python between
    the operators, which the profiler leaves out), "profiled_longer" (the profiler's own cost per call), or
    "conditions_differ": the gap exceeds ``calls`` (the operators the profile recorded) x
    :data:`~course_lib.core.claims.gemv.DISPATCH_SECONDS`, more than any per-call cost on either side can be, so the
    measured and the profiled pass ran under different conditions (the machine's other work between them; a busy
    run of lesson 07 gave 1.6 s measured against 264 ms profiled over 1,189 calls). ``timing``: the measurement
    behind ``measured_seconds`` (e.g. :func:`prefix_timings`' cached one), whose verdict the claim carries (None:
    "reliable"); the gap is settled from a noisy timing only by the margin."""
    m = require_positive("measured_seconds", measured_seconds, maximum=1e6)
    p = require_positive("profiled_seconds", profiled_seconds, maximum=1e6)
    verdict, reasons, settled = "reliable", (), False
    if timing is not None:
        v = quality.timing_verdict(timing, name="timing")
        if not v.reliable:
            verdict, reasons = v.verdict, (f"the measured timing is {v.verdict}: {v.reason}",)
            settled = quality.settles(abs(math.log(m / p)), [v])
    relation = "measured_longer" if m > p else "profiled_longer"
    bound = None
    if calls is not None:
        bound = require_count("calls", calls, minimum=1, maximum=10**9) * DISPATCH_SECONDS
        if abs(m - p) > bound:
            relation = "conditions_differ"
    return Claim("profile_vs_measured", relation,
                 {"measured": m, "profiled": p, "gap": abs(m - p), "calls": calls, "per_call_bound": bound,
                  "dispatch_seconds": DISPATCH_SECONDS},
                 verdict, reasons, settled)


def module_positions(agreement, *, ratio: float = CONSISTENT_RATIO) -> Claim:
    """Modules reused at their own positions against modules re-encoded at position 0
    (``cache_timing.ModuleAgreement``: ``modules_in_place`` and ``modules_at_zero`` dicts with ``kl_mean``,
    ``top1_agreement``, ``max_abs_diff``; ``prefix_exact`` likewise).

    ``relation``: "same" when their mean KL is within ``ratio`` of each other (the wrong positions add
    little to the error that skipping cross-module attention already makes), "zero_worse" or "zero_better".
    Deterministic (no timing): verdict "reliable"."""
    ratio = require_positive("ratio", ratio, maximum=100.0)
    rows = {}
    for key in ("prefix_exact", "modules_in_place", "modules_at_zero"):
        row = _get(agreement, key)
        if not isinstance(row, Mapping) or "kl_mean" not in row:
            raise TypeError(f"agreement.{key} must be a dict with 'kl_mean' (cache_timing.measure_module_reuse)")
        rows[key] = row
    a, z = max(rows["modules_in_place"]["kl_mean"], 1e-300), max(rows["modules_at_zero"]["kl_mean"], 1e-300)
    r = z / a
    relation = "same" if 1 / ratio <= r <= ratio else ("zero_worse" if r > 1 else "zero_better")
    return Claim("module_positions", relation,
                 {"kl_ratio": r, "ratio": ratio, **{k: dict(v) for k, v in rows.items()},
                  "module_tokens": _get(agreement, "module_tokens"), "new_tokens": _get(agreement, "new_tokens")})
