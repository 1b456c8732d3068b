"""Lesson 08's measured sentences: one for each outcome of each claim (:mod:`course_lib.core.claims.compare`).

Lessons: 08

``say(claim)`` returns the Markdown for the claim's outcome. Rendering only: every relation and number comes from
the claims.
"""
from __future__ import annotations

from course_lib.core.claims.gemv import Claim
from course_lib.core.units import format_time
from course_lib.core.claims.gemv import UNDECIDED
from course_lib.lessons.claims import gemv as _gemv
from course_lib.lessons.claims.gemv import beside, decided, settled_note, unreliable

__all__ = ["say"]
_METRIC = {"tpot": "decode step", "ttft": "time to the first token"}


def _efficiency(c: Claim) -> str:
    o = c.operands
    head = f"efficiency {o['efficiency']:.2f}"
    if c.outcome in UNDECIDED:
        return head + ". " + unreliable(c, "How far this case is from its floor")
    return head + ", " + {
        "above_floor": "faster than the floor, which is impossible for a true floor: a ceiling measured here was too "
                       "low (small matrices in `COURSE_FAST` mode, or a busy moment during the ceiling measurement); "
                       "rerun section 6",
        "close": "close to the floor: bytes and FLOPs explain the time",
        "within_2x": f"within 2× of the floor ({o['slowdown']:.1f}×): bytes and FLOPs explain most of the time, "
                     "kernels below the measured ceilings and fixed costs the rest",
        "far": f"{o['slowdown']:.1f}× the floor, dominated by overhead: the tiny model's matrices are small, so the "
               "fixed cost per operation of eager PyTorch and kernels below the measured ceilings take a large share "
               "of the time",
    }[c.outcome] + "."


def _floor_beaten(c: Claim) -> str:
    if c.outcome == "none_beat":
        return "Every point lies **above** the line y = x: no measurement beat its floor."
    return (f"{len(c.operands['beat'])} of {c.operands['cases']} points lie on or below the line y = x "
            f"({', '.join(c.operands['beat'])}): a measurement that beats its floor means one of the floor's inputs is "
            "wrong.")


def _fixed_cost(c: Claim) -> str:
    o = c.operands
    return {
        "fixed_cost_only": f"the bytes move at {o['eta']:.0%} of the floor's rate in both runs, so a fixed cost per "
                           "step alone explains the shortfall. The run with the smaller floor loses the larger share "
                           "only because the same fixed cost is a bigger fraction of a shorter step.",
        "impossible_eta": "η above 1 is impossible for a true floor: the two runs do not lie on one line, so here the "
                          "fixed cost is only a rough estimate.",
        "both": f"the bytes move at only {o['eta']:.0%} of the floor's rate, and a fixed cost per step comes on top: "
                "both effects are needed to explain the shortfall.",
    }[c.outcome]


def _engine_vs_prediction(c: Claim) -> str:
    o = c.operands
    what = _METRIC[o["metric"]]
    head = (f"Measured {what}: **{format_time(o['measured'])}**; the calibrated prediction "
            f"{format_time(o['predicted'])} ({o['error']:+.0%})")
    return decided(c, head, {
        "within": f"Within ±{o['tolerance']:.0%}: the probes, never this model, predicted it.",
        "over": f"The prediction is too long, outside ±{o['tolerance']:.0%}: a term is priced above what this engine "
                "pays here (read the terms below).",
        "under": f"The prediction is too short, outside ±{o['tolerance']:.0%}: the engine does work the terms below "
                 "do not count, or pays more for it.",
    }, f"Whether the prediction of the {what} holds")


def _engine_vs_floor(c: Claim) -> str:
    o = c.operands
    what = _METRIC[o["metric"]]
    head = (f"The first-principles floor of the {what} is {format_time(o['floor'])}: efficiency "
            f"**{o['efficiency']:.2f}**, {format_time(abs(o['beyond']))} {'beyond' if o['beyond'] >= 0 else 'below'} "
            "the floor")
    return decided(c, head, {
        "above_floor": "Faster than the floor, impossible for a true floor: a ceiling of section 6 was measured too "
                       "low.",
        "close": "Close to the floor: the engine streams its bytes about as fast as the machine allows.",
        "within_2x": f"Within 2× of the floor ({o['slowdown']:.1f}×): most of the time is the bytes and FLOPs, "
                     "the rest the engine's own work.",
        "far": f"{o['slowdown']:.1f}× the floor: most of the time is not the bytes or the FLOPs but what the engine "
               "does around them.",
    }, f"How far the engine's {what} is from its floor")


def _engine_split(c: Claim) -> str:
    o = c.operands
    parts = ", ".join(f"{g} {format_time(t)} ({o['shares'][g]:.0%})" for g, t in o["seconds"].items())
    return (f"Of the predicted {format_time(o['total'])} per step: {parts}. The largest share is **{c.relation}**.")


def _engine_overhead(c: Claim) -> str:
    o = c.operands
    a, b = o["layers"]
    ta, tb = o["copy_steps"]
    head = (f"The per-step overhead comes from tiny copies of the engine's architecture with {a} and {b} layers, "
            f"whose decode steps took {format_time(ta)} and {format_time(tb)}")
    if c.relation == "clamped":
        return (head + f". The copy with more layers was not slower per added layer, which more layers cannot be: the "
                "machine's speed changed between the copies' runs, the split was clamped at 0 "
                f"({c.reason}), and the overhead term below is not a measurement. "
                + unreliable(c, "What this engine costs per step and per layer"))
    arithmetic = (f": {format_time(o['fixed'])} per step plus {format_time(o['per_layer'])} per layer "
                  f"(= ({format_time(tb)} − {format_time(ta)}) / {b - a}), so {format_time(o['fixed'])} + "
                  f"{o['model_layers']} × {format_time(o['per_layer'])} = **{format_time(o['uncorrected'])}** for "
                  f"this model's {o['model_layers']} layers.")
    cold = (f" The tiny copies' weights stay in cache; this model streams one layer's weights between two runs of "
            f"the same small operation, and the calibration's op probes measured such a *cold* operation at "
            f"**{o['cold_factor']:.2f}×** the cost of a warm one (the cold factor), so the engine term is "
            f"{format_time(o['uncorrected'])} × {o['cold_factor']:.2f} = **{format_time(o['engine'])}**; with "
            f"the logits ({format_time(o['logits'])}) the table's per-step overhead is "
            f"**{format_time(o['total'])}**.")
    text = head + arithmetic + cold
    if c.verdict != "reliable":
        text += " " + unreliable(c, "How precise this split is")
    return text


def _engine_fixed_cost(c: Claim) -> str:
    if c.relation == "clamped":
        return ("The fixed cost per step comes from a tiny file of the same vocabulary, but here its step was not "
                "longer than its own bytes take at the F16 probe's rate, which a real step cannot be: the machine's "
                "speed changed between the probes, the fixed cost was set to 0, and the 0 above is not a measurement. "
                + unreliable(c, "What this engine costs per step beyond its bytes"))
    head = (f"The fixed cost comes from a tiny file of the same vocabulary: {format_time(c.operands['seconds'])} per "
            "step")
    return head + ("." if c.verdict == "reliable" else ". " + unreliable(c, "How precise this fixed cost is"))


_SAY = {"efficiency": _efficiency, "floor_beaten": _floor_beaten, "fixed_cost_reading": _fixed_cost,
        "engine_vs_prediction": _engine_vs_prediction, "engine_vs_floor": _engine_vs_floor,
        "engine_time_split": _engine_split, "engine_overhead": _engine_overhead,
        "engine_fixed_cost": _engine_fixed_cost}


def _noted(text: str, claim: Claim) -> str:
    """``text`` with :func:`~course_lib.lessons.claims.gemv.settled_note` where the claim is settled despite noise."""
    note = settled_note(claim)
    return text if note in text else text + note


def say(claim: Claim, ref: Claim | None = None) -> str:
    """The Markdown for ``claim``'s outcome (lesson 05's claims, e.g. ``calibration``, included); ``ref``: the same
    claim computed from the stored reference run, shown beside an undecided one (:func:`~.gemv.beside`)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a course_lib.core.claims Claim, got {type(claim).__name__}")
    if claim.name not in _SAY:
        if claim.name in _gemv_names():
            return _gemv.say(claim, ref=ref)
        raise ValueError(f"lesson 08 has no sentence for the claim {claim.name!r}")
    return beside(_noted(_SAY[claim.name](claim), claim), claim, ref, lambda c: _noted(_SAY[c.name](c), c))


def _gemv_names() -> tuple:
    return tuple(_gemv._SAY)
