"""Lesson 07's measured sentences: one for each outcome of each claim (:mod:`course_lib.core.claims.caching`).

Lessons: 06, 07

``say(claim)`` returns the Markdown for the claim's outcome; ``cases_table(cases, roofline)`` the table of the
calibrated model's cases. Rendering only: every relation and number comes from the claims.
"""
from __future__ import annotations

from course_lib.core.claims.gemv import Claim
from course_lib.core.units import format_time
from course_lib.lessons.claims.gemv import UNDECIDED_MARK, beside, settled_note, unreliable
from course_lib.lessons.prose import table

__all__ = ["say", "cases_table", "error_text", "value_text"]


def error_text(error: float) -> str:
    """A signed error, (predicted - measured) / measured, as a percentage."""
    return f"{error:+.0%}"


def value_text(value: float, kind: str) -> str:
    return f"{value:.1f}×" if kind == "ratio" else format_time(value)


def _prefix_cache(c: Claim) -> str:
    o = c.operands
    head = (f"The full prefill took **{format_time(o['full_seconds'])}**, the one that loaded the cached prefix "
            f"**{format_time(o['cached_seconds'])}**")
    return head + ". " + {
        "cache_faster": f"The cache made the first token **{o['speedup']:.1f}× faster**.",
        "same": "The two are indistinguishable within their spread: on this run the cache saved nothing measurable.",
        "cache_slower": f"The cached pass was **slower** ({1 / o['speedup']:.1f}× the full prefill's time), which less "
                        "work cannot be: the machine's speed changed between the runs.",
    }.get(c.outcome, unreliable(c, "Whether the cache is faster"))


def _session_cache(c: Claim) -> str:
    o = c.operands
    n1, c1 = o["turn1"]
    head = (f"Turn 1 took **{format_time(n1)}** without the cache and **{format_time(c1)}** with it (the same full "
            f"prefill both times); over {o['turns']} turns the session took {format_time(o['total_nocache'])} "
            f"without the cache and {format_time(o['total_cached'])} with it ({o['speedup']:.1f}×)")
    if c.verdict != "reliable":
        return head + ". " + unreliable(c, "How much the session cache saves")
    return head + ". " + {
        "cache_faster": "From turn 2 on every cached turn was faster: it prefills only the new message and one "
                        "pending token.",
        "mixed": "From turn 2 on the cache was faster on the whole, but not by a clear margin on every turn.",
        "cache_slower": f"Yet turn{'s' if len(o['slower_turns']) > 1 else ''} "
                        f"{', '.join(str(t) for t in o['slower_turns'])} took longer with the cache, which less work "
                        "cannot: the machine's speed changed during the run.",
        "one_turn": "A one-turn session has no later turn to compare.",
    }[c.outcome]


def _model_case(c: Claim, why: str = "") -> str:
    o = c.operands
    what = (f"*{o['case']}*: measured {value_text(o['measured'], o['kind'])}, calibrated "
            f"{value_text(o['predicted'], o['kind'])} ({error_text(o['error'])})")
    if c.verdict != "reliable":
        return what + ". " + unreliable(c, f"Whether the model is within ±{o['tolerance']:.0%} here")
    if c.outcome == "within":
        return what + f": within ±{o['tolerance']:.0%}."
    side = "too long" if c.outcome == "over" else "too short"
    return what + f": the model predicts {side}, outside ±{o['tolerance']:.0%}" + (f". Where to look: {why}." if why
                                                                                    else ".")


def _calibrated_summary(c: Claim) -> str:
    o = c.operands
    tol = f"±{o['tolerance']:.0%}"
    inside = "; ".join(f"*{k}*" for k in o["inside"])
    outside = "; ".join(f"*{k}*" for k in o["outside"])
    if c.verdict != "reliable":
        which = "; ".join(f"*{k}*" for k in o["unreliable"])
        why = ("the hypervisor took CPU time away during the measurement" if c.verdict == "contended"
               else "the timings behind them are not settled (the reasons are in the case-by-case list below)")
        decided = (f"Of the cases this run decides, within {tol}: {inside or 'none'}; outside: {outside or 'none'}. "
                   if c.relation != "none_decided" else "")
        return (decided + f"**Whether the model is within {tol} {UNDECIDED_MARK}** for {which}: **your timings are "
                f"unreliable** there, because {why}; on those rows the table cannot say how good the model is on "
                "this machine.")
    return {
        "all_within": f"The calibrated model is within {tol} on every case.",
        "some_within": f"The calibrated model is within {tol} on {inside}, and outside it on {outside}.",
        "none_within": f"The calibrated model is within {tol} on **no case** ({outside}): on this machine a term "
                       "is priced wrong, or the probes and the model ran under different conditions.",
    }[c.outcome]


def _roofline(c: Claim) -> str:
    o = c.operands
    if c.outcome == "below":
        factor = f"{o['factor']:.2f}" if o["factor"] < 10 else f"{o['factor']:.1f}"
        return (f"The roofline is {factor}× below the measured {o['case']}: it is a floor, and it leaves out "
                "the costs the calibrated model adds.")
    if c.outcome == "at":
        return (f"The measured {o['case']} sits on its roofline (measured / roofline {o['factor']:.2f}): the bytes "
                "streamed at the measured bandwidth account for the whole step, and the costs the calibrated model "
                "adds are too small to show in it.")
    if c.outcome == "above":
        return (f"The measured {o['case']} beat its roofline ({1 / o['factor']:.1f}× faster than the floor): a ceiling "
                f"measured at the top of this section was too low (a busy moment).")
    return unreliable(c, f"Whether the roofline is a floor under the measured {o['case']} (roofline "
                         f"{format_time(o['roofline'])}, measured {format_time(o['measured'])})")


def _largest_gap(c: Claim) -> str:
    o = c.operands
    return (f"the profile puts the largest difference in {c.relation}: {format_time(o['profiled'])} profiled "
            f"against {format_time(o['predicted'])} predicted")


def _profile_vs_measured(c: Claim) -> str:
    o = c.operands
    if c.outcome in ("noisy", "contended"):
        return (f"The profiled operator time and the measured median are {format_time(o['gap'])} apart. "
                + unreliable(c, "Which of the two is longer"))
    if c.outcome == "measured_longer":
        return (f"The profile's operator time leaves out the Python between the operators: the measured median is "
                f"{format_time(o['gap'])} longer.")
    if c.outcome == "conditions_differ":
        side = "longer" if o["measured"] > o["profiled"] else "shorter"
        return (f"The measured median is {format_time(o['gap'])} {side} than the profiled operator time: more than "
                f"the Python between, or the profiler's cost for, {o['calls']:,} calls can be (at most "
                f"{format_time(o['dispatch_seconds'])} each, {format_time(o['per_call_bound'])} in all). The measured "
                "and the profiled pass ran under different conditions: the machine's other work changed between them.")
    return (f"Here the profiled operator time exceeds the measured median by {format_time(o['gap'])}: the profiler "
            "adds its own cost to every call it records.")


def _module_positions(c: Claim) -> str:
    o = c.operands
    z, p = o["modules_at_zero"], o["modules_in_place"]
    if c.outcome == "same":
        return (f"Why do the two module rows agree (mean KL {p['kl_mean']:.2g} at their positions, "
                f"{z['kl_mean']:.2g} at position 0)? Rotary embeddings make attention depend on relative positions "
                "only, so a module encoded alone computes the same hidden states and values at position 0 as at its "
                "own offset; only its keys, seen from the new tokens, are rotated by a different angle. With random "
                "weights the attention scores are nearly uniform, so that rotation hardly changes what the new tokens "
                "attend to: almost all of the error is the skipped attention between modules, which both rows share. "
                "In a trained model attention is sharp and position-dependent, and re-encoding at position 0 costs "
                "more.")
    if c.outcome == "zero_worse":
        return (f"Re-encoding at position 0 made it worse (mean KL {z['kl_mean']:.2g} against {p['kl_mean']:.2g}): "
                "on top of the skipped cross-module attention, the keys carry the wrong rotary positions.")
    return (f"Here position 0 came out slightly better (mean KL {z['kl_mean']:.2g} against {p['kl_mean']:.2g}): with "
            "random weights both errors come from the skipped cross-module attention, and which is smaller is "
            "chance.")


_SAY = {"prefix_cache": _prefix_cache, "session_cache": _session_cache, "model_case": _model_case,
        "calibrated_summary": _calibrated_summary, "roofline_vs_measured": _roofline, "largest_gap": _largest_gap,
        "profile_vs_measured": _profile_vs_measured, "module_positions": _module_positions}


def _noted(text: str, claim: Claim) -> str:
    """``text`` with :func:`~course_lib.lessons.claims.gemv.settled_note` where the claim is settled despite noise."""
    note = settled_note(claim)
    return text if note in text else text + note


def say(claim: Claim, ref: Claim | None = None, **extra) -> str:
    """The Markdown for ``claim``'s outcome. ``why=`` (model cases only): where to look when the case is outside
    its tolerance, appended to that sentence only. ``ref``: the same claim computed from the course's stored
    reference run, shown beside an undecided one (:func:`~course_lib.lessons.claims.gemv.beside`)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a course_lib.core.claims Claim, got {type(claim).__name__}")
    if claim.name not in _SAY:
        raise ValueError(f"lesson 07 has no sentence for the claim {claim.name!r}")
    if extra and claim.name != "model_case":
        raise TypeError(f"say() takes extra arguments for model_case claims only, got {sorted(extra)}")
    if isinstance(ref, Claim) and ref.name != claim.name:
        raise ValueError(f"ref must be a {claim.name!r} claim (the same claim from the reference run), "
                         f"got {ref.name!r}")
    return beside(_noted(_SAY[claim.name](claim, **extra), claim), claim, ref,
                  lambda c: _noted(_SAY[c.name](c), c))


def cases_table(cases, roofline) -> str:
    """The table of the calibrated model's cases (:func:`~course_lib.core.claims.caching.model_case` claims) with
    the roofline's prediction of each (``{case: seconds or ratio}``)."""
    rows = []
    for c in cases:
        o = c.operands
        r = roofline[o["case"]]
        rows.append([o["case"], value_text(o["measured"], o["kind"]), value_text(r, o["kind"]),
                     value_text(o["predicted"], o["kind"]), error_text(o["error"]),
                     ("yes" if c.relation == "within" else "no") if c.decided else "undecided", c.verdict])
    return table(["case", "measured", "roofline", "calibrated", "calibrated error",
                  f"within ±{cases[0].operands['tolerance']:.0%}", "measurement"], rows)
