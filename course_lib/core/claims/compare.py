"""The measured claims of lesson 08 (predicted vs measured), as data.

Lessons: 08

Every sentence of lesson 08 that reads a measurement against its floor or its prediction is one of these
functions: a case's efficiency (close to the floor, within 2x, far from it, or *above* 1 -- a ceiling measured
too low), whether any case beat its floor, what a fixed-cost fit says, and the learner's engine (Hugging Face
``generate()``) against its floor and the calibrated prediction, with where its time goes. Each returns a
:class:`~course_lib.core.claims.gemv.Claim` (relation, operands, verdict) that
:mod:`course_lib.lessons.claims.compare` renders, one sentence per outcome. Torch-free.

::

    from course_lib.core.claims import compare as claims
    claims.efficiency(row, timing).outcome       # 'close', 'within_2x', 'far', 'above_floor', 'noisy', ...
    claims.engine_vs_prediction(t.step_times, pred.seconds).outcome
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from course_lib.core import quality
from course_lib.core.claims.caching import model_sources
from course_lib.core.claims.gemv import TOLERANCE, Claim, _get, inherit, probes
from course_lib.core.validation import (require_choice, require_count, require_list, require_nonnegative,
                                        require_positive, require_real)

__all__ = ["CLOSE", "WITHIN_2X", "ABOVE", "efficiency", "floor_beaten", "fixed_cost_reading",
           "engine_vs_prediction", "engine_vs_floor", "engine_time_split", "ENGINE_TERMS", "engine_row",
           "engine_overhead", "llamacpp_probes", "hf_probes", "llamacpp_fixed_cost"]

#: an efficiency (floor / measured) at or above this is "close" to the floor
CLOSE = 0.8
#: at or above this (and below :data:`CLOSE`) "within 2x" of the floor
WITHIN_2X = 0.5
#: above this an efficiency beat its floor by more than rounding: a ceiling was measured too low
ABOVE = 1.05

#: the terms of ``hf.predict_engine_tpot``'s prediction, grouped as lesson 08 names them
ENGINE_TERMS = {"weights": ("weights",), "K/V": ("kv", "cache_concat"), "per-step overhead": ("engine", "logits")}


def _band(eff: float) -> str:
    if eff > ABOVE:
        return "above_floor"
    if eff >= CLOSE:
        return "close"
    if eff >= WITHIN_2X:
        return "within_2x"
    return "far"


def _judged(timing) -> tuple[float | None, str, tuple]:
    if timing is None:
        return None, "reliable", ()
    v = quality.timing_verdict(timing, name="timing")
    return v.median, v.verdict, ((v.reason,) if not v.reliable else ())


def _band_beyond(eff: float) -> float:
    """How far (natural log) an efficiency lies inside its band: the distance to the nearer band edge."""
    edges = [ABOVE, CLOSE, WITHIN_2X]
    return min(abs(math.log(eff / e)) for e in edges)


def _basis(basis) -> tuple[str, tuple]:
    """The verdict and reasons a claim inherits from the calibration its floor was computed from (None: nothing)."""
    return inherit(basis, "the floor")


def _worst(*verdicts: str) -> str:
    return max(verdicts, key=quality.VERDICTS.index)


def efficiency(row, timing=None, *, basis: Claim | None = None) -> Claim:
    """One case's efficiency (predicted floor / measured): "close" (>= :data:`CLOSE`), "within_2x"
    (>= :data:`WITHIN_2X`), "far", or "above_floor" (> :data:`ABOVE`: faster than the floor, so a measured
    ceiling was too low). ``row``: a ``compare.Comparison`` (or anything with ``predicted_s``/``measured_s``);
    ``timing``: the measurement behind it, whose verdict the claim carries (None: a published figure,
    "reliable"); ``basis``: the claim the floor was computed from (``gemv.calibration`` of the measured
    ceilings), whose verdict the claim inherits too. The band is ``settled`` despite a noisy timing when the
    efficiency lies inside it by more than the timing's uncertainty allows (:func:`quality.settles`); a floor
    on unsettled ceilings settles nothing. Operands: ``efficiency``, ``slowdown``, ``case``, ``metric``."""
    pred = require_positive("row.predicted_s", _get(row, "predicted_s"), maximum=1e6)
    meas = require_positive("row.measured_s", _get(row, "measured_s"), maximum=1e6)
    _, verdict, reasons = _judged(timing)
    b_verdict, b_reasons = _basis(basis)
    eff = pred / meas
    settled = (b_verdict == "reliable" and timing is not None and verdict != "reliable"
               and quality.settles(_band_beyond(eff), [quality.timing_verdict(timing, name="timing")]))
    return Claim("efficiency", _band(eff), {"efficiency": eff, "slowdown": meas / pred, "case": _get(row, "case"),
                                            "metric": _get(row, "metric"), "predicted": pred, "measured": meas},
                 _worst(verdict, b_verdict), reasons + b_reasons, settled)


def floor_beaten(rows) -> Claim:
    """Did any measurement beat its floor? "none_beat" or "some_beat" (a floor beaten means one of its inputs
    is wrong). Operands: ``beat`` (case names), ``cases`` (how many)."""
    rows = require_list("rows", rows, "a list of Comparison rows")
    for i, r in enumerate(rows):
        require_positive(f"rows[{i}].predicted_s", _get(r, "predicted_s"))
        require_positive(f"rows[{i}].measured_s", _get(r, "measured_s"))
    beat = tuple(_get(r, "case") for r in rows if _get(r, "predicted_s") >= _get(r, "measured_s"))
    return Claim("floor_beaten", "some_beat" if beat else "none_beat", {"beat": beat, "cases": len(rows)})


def fixed_cost_reading(t0: float, eta: float) -> Claim:
    """What a fit t = t0 + floor / eta through two runs says (``compare.fixed_cost_fit``): "fixed_cost_only"
    (eta in [:data:`CLOSE`, :data:`ABOVE`]: the bytes move at the floor's rate and a fixed cost per step explains
    the rest), "impossible_eta" (eta > :data:`ABOVE`: the two runs do not lie on one line) or "both" (eta below
    :data:`CLOSE`: a slow bandwidth and a fixed cost)."""
    t0 = require_real("t0", t0)     # an intercept: either sign, finite
    eta = require_positive("eta", eta, maximum=1e6)
    relation = "impossible_eta" if eta > ABOVE else ("fixed_cost_only" if eta >= CLOSE else "both")
    return Claim("fixed_cost_reading", relation, {"t0": t0, "eta": eta})


def _timing_of(name: str, timing):
    if timing is None:
        raise TypeError(f"{name} must be a timing (the engine's step_times or ttft_times, or a timing record)")
    return timing


def engine_vs_prediction(timing, predicted_seconds: float, *, tolerance: float = TOLERANCE,
                         metric: str = "tpot", basis: Claim | None = None) -> Claim:
    """The engine's measured TPOT or TTFT (``timing``: ``EngineTiming.step_times`` / ``ttft_times`` or a
    record) against the calibrated prediction: "within" ``tolerance``, "over" (predicted too long) or "under".
    ``basis``: the claim of the probes the prediction was computed from (:func:`llamacpp_probes`, :func:`hf_probes`),
    whose verdict the claim inherits: a prediction on unsettled probes decides nothing, whatever the margin.
    Operands: ``measured``, ``predicted``, ``error`` = (predicted - measured) / measured, ``metric``."""
    metric = require_choice("metric", metric, ("tpot", "ttft"))
    a = quality.within(require_positive("predicted_seconds", predicted_seconds, maximum=1e6),
                       _timing_of("timing", timing), require_positive("tolerance", tolerance, maximum=10.0),
                       names=("predicted_seconds", "timing"))
    m = a.measured
    b_verdict, b_reasons = inherit(basis, "the prediction")
    return Claim("engine_vs_prediction", a.relation,
                 {"measured": m.median, "predicted": predicted_seconds, "error": a.error, "tolerance": tolerance,
                  "metric": metric, "spread": m.spread},
                 _worst(a.verdict, b_verdict),
                 ((f"the measurement is {m.verdict}: {m.reason}",) if not m.reliable else ()) + b_reasons,
                 a.settled and b_verdict == "reliable")


def engine_vs_floor(timing, floor_seconds: float, *, metric: str = "tpot", basis: Claim | None = None) -> Claim:
    """The engine's measured time against the first-principles floor (``course_lib.estimate`` on this machine's
    measured ceilings): the efficiency bands of :func:`efficiency`; ``basis``: the claim of the ceilings the floor
    rests on, whose verdict the claim inherits. Operands: ``efficiency``, ``slowdown``, ``beyond`` (measured -
    floor, seconds)."""
    metric = require_choice("metric", metric, ("tpot", "ttft"))
    floor = require_positive("floor_seconds", floor_seconds, maximum=1e6)
    v = quality.timing_verdict(_timing_of("timing", timing), name="timing")
    b_verdict, b_reasons = _basis(basis)
    eff = floor / v.median
    settled = b_verdict == "reliable" and not v.reliable and quality.settles(_band_beyond(eff), [v])
    return Claim("engine_vs_floor", _band(eff),
                 {"efficiency": eff, "slowdown": v.median / floor, "beyond": v.median - floor, "floor": floor,
                  "measured": v.median, "metric": metric},
                 _worst(v.verdict, b_verdict), ((v.reason,) if not v.reliable else ()) + b_reasons, settled)


def engine_time_split(terms: Mapping) -> Claim:
    """Where the predicted decode step goes (``hf.predict_engine_tpot(...).terms``), grouped as
    :data:`ENGINE_TERMS`: ``relation`` is the largest group; operands ``seconds`` and ``shares`` per group.
    A prediction, not a timing: verdict "reliable"."""
    if not isinstance(terms, Mapping) or not terms:
        raise TypeError("terms must be the prediction's terms, a dict {name: seconds}")
    groups = {g: sum(float(terms.get(k, 0.0)) for k in keys) for g, keys in ENGINE_TERMS.items()}
    known = {k for keys in ENGINE_TERMS.values() for k in keys}
    other = sum(float(v) for k, v in terms.items() if k not in known)
    if other:
        groups["other"] = other
    total = sum(groups.values())
    if total <= 0:
        raise ValueError("terms must add up to a positive time")
    top = max(groups, key=groups.get)
    return Claim("engine_time_split", top, {"seconds": groups, "shares": {g: t / total for g, t in groups.items()},
                                            "total": total})


def _runs(timing) -> list:
    """A tiny copy's decode timing as its runs' median steps (``run_tpots``: the runs are the probe's repeats; the
    steps of one run share its state), or its steps where a timing has no runs."""
    runs = _get(timing, "run_tpots")
    return list(runs if runs is not None else _get(timing, "step_times"))


def engine_overhead(probe, prediction) -> Claim:
    """The per-step overhead term of the engine's predicted decode step, as arithmetic that adds up on the page.

    ``probe``: ``hf.probe_engine_overhead``'s result (tiny copies of ``layers`` = (a, b) layers: ``step_fixed``,
    ``step_per_layer``, ``clamped``, and the copies' timings ``decode``); ``prediction``:
    ``hf.predict_engine_tpot``'s result (``terms["engine"]``, ``terms["logits"]``, ``counts["cold_factor"]``,
    ``counts["layers"]``). ``relation``: "split" (per layer and fixed part both measured) or "clamped" (the
    copy with more layers was not slower per step, which more layers cannot be: the machine's speed changed
    between the copies' runs, a part was set to 0, and the split is not a measurement). ``verdict``: the worst
    of the copies' timings (over their runs: a run's median step each), and "noisy" when clamped. Operands:
    ``layers``, ``fixed``, ``per_layer``, ``model_layers``, ``uncorrected`` (fixed + model_layers x per_layer),
    ``cold_factor``, ``engine`` (uncorrected x cold_factor, the prediction's term), ``logits``, ``total`` (engine +
    logits: the table's "per-step overhead"), ``copy_steps`` (the median decode step of each copy)."""
    fixed = require_nonnegative("probe.step_fixed", _get(probe, "step_fixed"), maximum=1e6)
    per = require_nonnegative("probe.step_per_layer", _get(probe, "step_per_layer"), maximum=1e6)
    terms, counts = _get(prediction, "terms"), _get(prediction, "counts")
    if not isinstance(terms, Mapping) or not isinstance(counts, Mapping):
        raise TypeError("prediction must be hf.predict_engine_tpot's result (with terms and counts)")
    layers_m = require_count("prediction.counts['layers']", counts.get("layers"), minimum=1)
    cold = require_positive("prediction.counts['cold_factor']", counts.get("cold_factor", 1.0), maximum=1e6)
    uncorrected = fixed + layers_m * per
    engine = require_nonnegative("prediction.terms['engine']", terms.get("engine"), maximum=1e6)
    logits = require_nonnegative("prediction.terms['logits']", terms.get("logits", 0.0), maximum=1e6)
    if not math.isclose(engine, cold * uncorrected, rel_tol=1e-9, abs_tol=1e-15):
        raise ValueError(f"the prediction's engine term {engine!r} is not cold_factor x (fixed + layers x per "
                         f"layer) = {cold * uncorrected!r}: the prediction and the probe do not belong together")
    verdicts = [quality.timing_verdict(_runs(t), name=f"probe.decode[{i}]")
                for i, t in enumerate(require_list("probe.decode", _get(probe, "decode"), "the copies' timings"))]
    layers = require_list("probe.layers", _get(probe, "layers"), "the copies' layer counts")
    if len(layers) != len(verdicts):
        raise ValueError(f"probe.layers and probe.decode must have one entry per copy, got {len(layers)} and "
                         f"{len(verdicts)}")
    clamped = tuple(_get(probe, "clamped", ()) or ())
    verdict = max([v.verdict for v in verdicts] + (["noisy"] if any("decode" in c for c in clamped) else []),
                  key=quality.VERDICTS.index)
    reasons = tuple(f"the {n}-layer copy's steps are {v.verdict}: {v.reason}"
                    for n, v in zip(layers, verdicts) if not v.reliable)
    if any("decode" in c for c in clamped):
        reasons += (f"the split was clamped at 0 ({', '.join(c for c in clamped if 'decode' in c)})",)
    return Claim("engine_overhead", "clamped" if any("decode" in c for c in clamped) else "split",
                 {"layers": tuple(layers), "fixed": fixed, "per_layer": per, "model_layers": layers_m,
                  "uncorrected": uncorrected, "cold_factor": cold, "engine": engine,
                  "logits": logits, "total": engine + logits,
                  "copy_steps": tuple(v.median for v in verdicts)},
                 verdict, reasons)


def engine_row(timing, *, model: str, params: int, weight_bytes: float, **extra) -> dict:
    """The learner's engine measurement as a plain dict (the ``row`` exercise set 08 asks a function of):
    ``prompt``, ``new_tokens``, ``ttft_seconds`` and ``tpot_seconds`` (medians) of an ``hf.EngineTiming``
    (or anything with those attributes), the model's ``model``, ``params``, ``weight_bytes`` (read per decode
    step), and any ``extra`` numbers (e.g. ``floor_tpot_seconds``)."""
    if not isinstance(model, str):
        raise TypeError(f"model must be the model's name (a string), got {type(model).__name__}")
    row = {"model": model, "params": require_count("params", params, minimum=1),
           "weight_bytes": require_positive("weight_bytes", weight_bytes, maximum=1e15),
           "prompt": require_count("timing.prompt", _get(timing, "prompt"), minimum=1),
           "new_tokens": require_count("timing.new_tokens", _get(timing, "new_tokens"), minimum=1),
           "ttft_seconds": require_positive("timing.ttft", _get(timing, "ttft"), maximum=1e15),
           "tpot_seconds": require_positive("timing.tpot", _get(timing, "tpot"), maximum=1e15)}
    row.update({k: require_real(k, v) for k, v in extra.items()})
    return row


def llamacpp_probes(rates, held_types, *, metric: str = "tpot") -> Claim:
    """How settled llama.cpp's engine probes are for one prediction (``llamacpp.probe_engine_rates``' result): a
    :func:`~course_lib.core.claims.gemv.probes` claim over the timings that price it.

    ``rates.verdicts`` holds, for each probed type in the order of ``rates.decode``, the (TPOT, TTFT) verdicts of
    each of its probe files, then those of the tiny file. ``metric`` "tpot" reads the decode timings, "ttft" the
    prefill ones, of the types in ``held_types`` (the model file's; ``GGUFBytes.types``) and of the tiny file (the
    fixed cost). The F16 probe that is always run counts only where the model holds F16 matrices: otherwise it
    enters the prediction only through the tiny file's own bytes, taken out of its fixed cost (well under 1 % of a
    step). Where the verdicts do not have that layout, every one counts."""
    if metric not in ("tpot", "ttft"):
        raise ValueError(f"metric must be 'tpot' or 'ttft', got {metric!r}")
    types, verdicts = list(_get(rates, "decode") or {}), list(_get(rates, "verdicts") or ())
    if not verdicts:
        raise TypeError("rates must carry the verdicts of its probe timings (llamacpp.probe_engine_rates' result)")
    held = set(held_types)
    k = 0 if metric == "tpot" else 1
    what = "decode timing" if metric == "tpot" else "prefill timing"
    files, extra = divmod(len(verdicts) - 2, 2 * len(types)) if types and len(verdicts) > 2 else (0, 1)
    if files and not extra:
        nth = [""] if files == 1 else [f"{('first', 'second', 'third')[f]} " if f < 3 else f"number {f + 1} "
                                       for f in range(files)]
        sources = {f"the {nth[f]}{t} probe file's {what}": verdicts[2 * (i * files + f) + k]
                   for i, t in enumerate(types) if t in held for f in range(files)}
        sources[f"the tiny file's {what}"] = verdicts[-2 + k]
    else:
        sources = {f"probe timing {i + 1}": v for i, v in enumerate(verdicts)}
    return probes(sources, what=f"the calibrated prediction of the {'decode step' if metric == 'tpot' else 'prefill'}")


def hf_probes(calibration, probe) -> Claim:
    """How settled the probes behind a Hugging Face engine prediction are (``hf.predict_engine_tpot`` / ``_ttft``):
    the calibrated model's probes (:func:`~course_lib.core.claims.caching.model_sources` of ``calibration``, from
    ``hf.calibrate_for``) and the decode steps of the tiny copies that price the engine's per-step overhead
    (``probe``: ``hf.probe_engine_overhead``'s result; a split clamped at 0 is a contradiction, as in
    :func:`engine_overhead`)."""
    sources, contradictions = model_sources(calibration)
    for n, t in zip(_get(probe, "layers"), _get(probe, "decode")):
        sources[f"the {n}-layer copy's decode timing"] = _runs(t)
    clamped = [c for c in (_get(probe, "clamped", ()) or ()) if "decode" in c]
    if clamped:
        contradictions += (f"the overhead split was clamped at 0 ({', '.join(clamped)}): the copy with more layers "
                           "was not slower per step",)
    return probes(sources, what="the calibrated prediction", contradictions=contradictions)


def llamacpp_fixed_cost(rates) -> Claim:
    """llama.cpp's fixed cost per decode step as the probes gave it (``llamacpp.probe_engine_rates``' result):
    the tiny file's step minus its own bytes at the F16 probe's rate. ``relation`` "measured", or "clamped" where that
    difference was not positive and the probes set the cost to 0 (``step_fixed`` == 0): a step cannot take less
    than its bytes need, so the machine's speed changed between the probes, and the 0 is not a measurement (verdict
    "noisy"). Otherwise the verdict is the tiny file's decode timing's. Operands: ``seconds`` (``step_fixed``)."""
    fixed = _get(rates, "step_fixed")
    verdicts = list(_get(rates, "verdicts") or ())
    if fixed is None or isinstance(fixed, bool) or not isinstance(fixed, (int, float)) or fixed < 0:
        raise TypeError("rates must carry step_fixed, seconds >= 0 (llamacpp.probe_engine_rates' result)")
    tiny = quality.timing_verdict(verdicts[-2], name="tiny") if len(verdicts) >= 2 else None
    verdict = tiny.verdict if tiny is not None else "noisy"
    reasons = (f"the tiny file's decode timing is {tiny.verdict}: {tiny.reason}",) if tiny and not tiny.reliable else ()
    if tiny is None:
        reasons = ("the tiny file's timing was not recorded",)
    if fixed == 0:
        verdict = _worst(verdict, "noisy")
        reasons += ("the tiny file's step was not longer than its own bytes at the F16 probe's rate, so the fixed cost "
                    "was set to 0",)
    return Claim("engine_fixed_cost", "clamped" if fixed == 0 else "measured", {"seconds": float(fixed)},
                 verdict, reasons)
