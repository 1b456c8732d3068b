"""Lesson 06's measured sentences: one for each outcome of each claim (:mod:`course_lib.core.claims.phases`).

Lessons: 06

``say(claim)`` returns the Markdown for the claim's outcome (lesson 05's claims are rendered by
:mod:`course_lib.lessons.claims.gemv`, which ``say`` defers to). ``formula_without_cache(name)`` shows a
prefill formula with no cached tokens (P_c = 0, P_new = P): caching is lesson 07's subject.
"""
from __future__ import annotations

from course_lib.core.claims.gemv import Claim
from course_lib.core.units import format_time
from course_lib.lessons.claims import gemv as _gemv
from course_lib.lessons.claims.gemv import beside, decided, settled_note, unreliable

__all__ = ["say", "formula_without_cache", "fit_reading"]


def formula_without_cache(name: str) -> str:
    """``name``'s display equation with nothing cached: P_c = 0 and P_new written P."""
    from course_lib.core import formulas     # lazily: sympy
    S = formulas.S
    e = formulas.expr(name).subs(S.cached, 0).subs(S.new_prompt, S.prompt)
    lhs = formulas.equation(name).split(" = ", 1)[0]
    return f"$${lhs} = {formulas.latex(e)}$$"


def _tpot(c: Claim) -> str:
    o = c.operands
    xs = ", ".join(f"{x:g}" for x in o["xs"])
    ts = ", ".join(format_time(t) for t in o["seconds"])
    return decided(c, f"Measured TPOT at contexts {xs}: {ts}", {
        "grows": "It **grows** with the context, as the K/V reads predict.",
        "flat": "It stays **flat** within the spread: at these contexts the K/V reads are too small a share of the "
                "step to show.",
        "falls": "It **falls** as the context grows. More K/V cannot make a step cheaper: the machine got faster "
                 "during the run (other work stopped).",
        "mixed": "It goes up and down: the steps disagree, so the machine's speed changed during the run.",
    }, "How TPOT changes with the context")


def fit_reading(c: Claim, slope_ratio: float, basis: Claim | None = None) -> str:
    """What the line b + k·P fitted to the TTFT medians (``ttft_vs_prompt`` with ``fit=``) may be read as.

    Only a "grows" from reliable timings with a physical line (b >= 0, k > 0), whose FLOP rate (``basis``: the
    calibration claim the rate comes from) is settled, reads its slope against the FLOPs and its intercept as a
    fixed cost; otherwise the line measures nothing, and the text says so instead of quoting its numbers."""
    o = c.operands
    if c.outcome != "grows" or not c.reliable or not o.get("physical", False) or (
            basis is not None and basis.verdict != "reliable"):
        why = ("its timings cannot carry a line" if c.outcome in ("noisy", "contended") or not c.reliable else
               "the fitted line has a negative intercept or slope, which no cost can have" if not o.get("physical")
               else "TTFT did not grow steadily with the prompt" if c.outcome != "grows"
               else "the matmul rate it would be compared with is this run's, not the machine's")
        return (f"On this run neither the slope nor the intercept of the fitted line measures anything: {why}. On a "
                "quiet run the slope is compared with what those FLOPs cost at the measured matmul rate, and the "
                "intercept is the fixed cost no FLOP count has: the dispatch of every op, paid once per prompt.")
    return (f"The measured slope is {slope_ratio:.1f} times what those FLOPs cost at the measured matmul rate. The "
            f"intercept ({format_time(o['intercept'])}) is what no FLOP count has: the dispatch of every op, paid once "
            "per prompt.")


def _ttft(c: Claim) -> str:
    o = c.operands
    text = {
        "grows": "TTFT **grows** with the prompt, as its FLOPs do.",
        "flat": "TTFT stays flat within the spread over these prompt lengths: fixed costs dominate these short "
                "prompts.",
        "falls": "TTFT **fell** as the prompt grew: impossible for more work, so the machine's speed changed during "
                 "the run.",
        "mixed": "TTFT went up and down with the prompt length: the machine's speed changed during the run.",
    }.get(c.outcome, unreliable(c, "How TTFT grows with the prompt"))
    if "physical" in o and not o["physical"]:
        text += (" The fitted line has a negative intercept or slope, which no cost can have: the medians are too "
                 "noisy for a line.")
    return text


def _step_vs_batch(c: Claim) -> str:
    o = c.operands
    head = (f"The step took {format_time(o['seconds'][0])} at batch {o['first_batch']:g} and "
            f"{format_time(o['seconds'][-1])} at batch {o['last_batch']:g} ({o['growth']:.2f}×; the roofline line "
            f"predicts {o['predicted_growth']:.2f}×), so throughput rose {o['throughput_gain']:.1f}×")
    return decided(c, head, {
        "flat": "The step cost about the same at every batch: the weight read is shared by the whole batch.",
        "as_predicted": "The step grew about as the roofline predicts.",
        "grows_more": "The step grew more than the roofline predicts: on this machine the fp32 products with B rows "
                      "do not run at GEMV bandwidth, and each extra row adds time of its own. A fixed per-op cost, "
                      "paid once per step and shared by the batch, cannot explain a gap that grows with the batch.",
        "falls": "The larger batch took **less** time per step, impossible for more work: the machine's speed "
                 "changed during the run.",
        "mixed": "The step time went up and down with the batch: the machine's speed changed during the run.",
    }, "Whether the step grew more than the roofline predicts" if o.get("growth_settled")
       else "How the step time changes with the batch")


def _same_step(c: Claim) -> str:
    o = c.operands
    ts = ", ".join(f"{k}: {format_time(v)}" for k, v in o["seconds"].items())
    if c.outcome == "agree":
        return f"The batch-1 step measured in different cells agrees ({ts})."
    return (f"The same batch-1 step measured in different cells gave {ts}, {o['spread']:.2f}× apart. "
            + unreliable(c, "Which of these is this machine's TPOT"))


def _roofline_sides(c: Claim) -> str:
    o = c.operands
    if o.get("phase") == "prefill":
        return {"all_compute": "right of the ridge: compute-bound",
                "all_memory": "still left of the ridge for this small model and short prompt",
                "split": f"{o['left']} of {o['points']} left of the ridge"}[c.outcome]
    return {
        "all_memory": "all left of the ridge: memory-bound territory",
        "split": f"the first {o['left']} left of the ridge (memory-bound), the others right of it: larger batches "
                 "cross the ridge, as the critical batch of section 7 says they must",
        "all_compute": "all right of the ridge, even batch 1, whose decode step does about 2 FLOPs per 4 bytes read: "
                       "a ridge point that low means the matmul rate was measured low (a busy moment during its "
                       "measurement)",
    }[c.outcome]


def _below_roof(c: Claim) -> str:
    above = c.operands["above"]
    if c.outcome == "below":
        return "The points sit **below** their roofs:"
    return (f"Not every point sits below its roof ({', '.join(above)} at or above it): a ceiling measured lower "
            "than the machine delivers (a busy moment during the ceiling's measurement) or data served from cache. "
            "The points:")


def _latency_inputs(c: Claim) -> str:
    if c.relation == "settled":
        return ""
    return (f"**This run's numbers, not this machine's**: they are built on a TTFT and a TPOT that are not settled "
            f"({c.reason}), so they show the arithmetic, not the latency this machine gives.")


def _latency_inputs_ref(c: Claim) -> str:
    """The reference run's inputs of the latency table (its settled sentence is the table itself, which it lacks)."""
    o = c.operands
    if c.relation != "settled":
        return _latency_inputs(c)
    return (f"the same table is built on a TTFT of **{format_time(o['ttft'])}** and a TPOT of "
            f"**{format_time(o['tpot'])}**, both settled there.")


def _calibration_gain(c: Claim) -> str:
    o = c.operands

    def err(e):          # "0%", never "-0%", where the error rounds to nothing
        return "0%" if round(e * 100) == 0 else f"{e:+.0%}"
    head = (f"Measured **{format_time(o['seconds'])}**; the calibrated model predicted "
            f"{format_time(o['calibrated_seconds'])} ({err(o['calibrated_error'])}), the uncalibrated one "
            f"(bytes / copy bandwidth) {format_time(o['uncalibrated_seconds'])} ({err(o['uncalibrated_error'])})")
    return decided(c, head, {
        "calibrated_better": "Here the calibration earns its keep: the per-shape bandwidths and the per-op cost "
                             "bring the prediction closer than the copy bandwidth alone.",
        "uncalibrated_better": "Here the calibration did **not** help: the uncalibrated figure is closer. The probes "
                               "and the model ran under different conditions, or a term is priced wrong on this "
                               "machine; a single run cannot say which.",
        "no_difference": "Within this measurement's spread the two predictions are equally close: on this run the "
                         "calibration adds terms but no accuracy.",
    }, "Whether the calibration helps")


def _single_max(c: Claim) -> str:
    o = c.operands
    if c.outcome == "equal":
        return (f"One max over the whole step and the sum over its operators agree here "
                f"({format_time(o['per_operator_seconds'])}): every operator is bound the same way.")
    less = 1 - o["single_max_seconds"] / o["per_operator_seconds"]
    return (f"Summed per operator the step costs **{format_time(o['per_operator_seconds'])}**; one max over the whole "
            f"step gives **{format_time(o['single_max_seconds'])}**, {less:.0%} less. The single max lets "
            "compute-bound matrix products overlap memory-bound attention, but kernels run one after another.")


_SAY = {"tpot_vs_context": _tpot, "ttft_vs_prompt": _ttft, "step_vs_batch": _step_vs_batch, "same_step": _same_step,
        "roofline_sides": _roofline_sides, "below_roof": _below_roof, "calibration_gain": _calibration_gain,
        "single_max_vs_operators": _single_max, "latency_inputs": _latency_inputs}


#: where the reference run's sentence differs from this run's: a sentence that leans on a table this run printed
_REF_SAY = {"latency_inputs": _latency_inputs_ref}


def _noted(text: str, claim: Claim) -> str:
    """``text`` with :func:`~course_lib.lessons.claims.gemv.settled_note` where the claim is settled despite noise."""
    note = settled_note(claim)
    return text if note in text else text + note


def say(claim: Claim, ref: Claim | None = None) -> str:
    """The Markdown for ``claim``'s outcome (lesson 05's claims included); ``ref``: the same claim from the stored
    reference run, shown beside an undecided one (:func:`~course_lib.lessons.claims.gemv.beside`)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a course_lib.core.claims Claim, got {type(claim).__name__}")
    if claim.name in _SAY:
        return beside(_noted(_SAY[claim.name](claim), claim), claim, ref,
                      lambda c: _noted(_REF_SAY.get(c.name, _SAY[c.name])(c), c))
    return _gemv.say(claim, ref=ref)
