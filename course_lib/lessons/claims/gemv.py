"""Lesson 05's measured sentences: one written for each outcome of each claim (:mod:`course_lib.core.claims.gemv`).

Lessons: 05, 06, 07, 08

``say(claim)`` returns the Markdown sentence(s) for the claim's outcome; nothing is decided here.
Every claim has a sentence for its "noisy" and "contended" outcomes (:func:`unreliable`), which says that
the timings cannot carry the claim, instead of explaining the noise; what to do about it is said once per
lesson (:func:`rerun_note`). A relation the timings settle despite their noise (``Claim.settled``) is stated
with a note saying so (:func:`settled_note`). ``say(claim, ref=reference_claim)`` puts the same claim computed
from the course's stored reference run (:mod:`course_lib.lessons.claims.reference`) beside an undecided one,
labelled, so that a learner on a busy machine still sees the intended picture.
"""
from __future__ import annotations

from course_lib.core import quality
from course_lib.core.claims.gemv import Claim
from course_lib.core.units import format_bandwidth, format_bytes, format_time

__all__ = ["say", "unreliable", "decided", "RERUN_ADVICE", "ADVICE", "rerun_note", "settled_note", "beside", "paired",
           "UNDECIDED_MARK", "this_run_note"]

#: what a learner can do about unreliable timings
RERUN_ADVICE = ("close other programs (or wait for the machine's other work to finish) and rerun the measuring "
                "cells; on a machine with few cores, `OMP_NUM_THREADS=1` before starting Jupyter often helps")


#: :data:`RERUN_ADVICE` as a sentence of its own
ADVICE = RERUN_ADVICE[0].upper() + RERUN_ADVICE[1:] + "."
#: the words every undecided sentence carries (tests count them)
UNDECIDED_MARK = "cannot be decided from this run"


def rerun_note() -> str:
    """The lesson's one paragraph of advice for unreliable timings (each lesson shows it once, before it measures)."""
    return (f"**Noisy runs.** Timings are only as steady as the machine. Where a sentence below says it "
            f"*{UNDECIDED_MARK}*, the repeats of the timings behind it disagreed by more than the effect: "
            f"{RERUN_ADVICE}. A relation whose effect clears the spread by more than "
            f"{quality.THRESHOLDS.decisive_margin:g}× is stated even from a noisy run, with a note saying so, and "
            "where a sentence cannot be decided the same sentence from the course's stored **reference run** is "
            "shown beside it, labelled, so you still see what a quiet machine shows.")


def settled_note(claim: Claim) -> str:
    """For a relation stated from timings that are not all reliable (``claim.settled``): the note saying why it
    stands; empty otherwise."""
    if claim.verdict == "reliable" or not claim.settled:
        return ""
    return (f" *(The timings are {claim.verdict}, but the effect exceeds their spread by more than "
            f"{quality.THRESHOLDS.decisive_margin:g}×, so this run settles it.)*")


def beside(text: str, claim: Claim, ref: Claim | None, render) -> str:
    """``text`` (the sentence for ``claim``), followed by ``render(ref)`` labelled as the reference run when
    ``claim``'s verdict is not reliable (undecided, or settled despite the noise) and ``ref`` is given."""
    if ref is None:
        return text
    if not isinstance(ref, Claim):
        raise TypeError(f"ref must be the same claim computed from the reference run, got {type(ref).__name__}")
    if ref == claim:                       # this run is the reference run (the stored lesson): nothing to add
        return text
    if claim.verdict == "reliable" and not claim.operands.get("busy_run"):
        return text                     # else: undecided, decided from noisy timings, or in a run shown to be busy
    from course_lib.lessons.claims.reference import label
    shown = render(ref) if ref.decided else (
        f"this is undecided there too: its timings were {ref.verdict} ({ref.reason or 'the repeats disagree'})")
    return text + "\n\n  > **Reference run** (" + label() + "): " + shown

def decided(claim: Claim, head: str, sentences: dict, question: str) -> str:
    """``head``, then the sentence written for ``claim``'s outcome. A noisy or contended claim's outcome is its
    verdict, which has no sentence there: it gets :func:`unreliable` (``question``: what could not be decided)."""
    if claim.outcome in sentences:
        return f"{head}. " + sentences[claim.outcome] + settled_note(claim)
    return f"{head}. " + unreliable(claim, question)


def unreliable(claim: Claim, what: str) -> str:
    """The sentence for a noisy or contended claim: what could not be decided, and why (what to do is said once
    per lesson, :func:`rerun_note`)."""
    why = claim.reason or "the repeats disagree"
    if claim.verdict == "contended":
        return (f"**{what} {UNDECIDED_MARK}: your timings are unreliable** because the hypervisor "
                f"took CPU time away during the measurement ({why}).")
    return f"**{what} {UNDECIDED_MARK}: your timings are unreliable** because {why}."


def _gemv_vs_copy(c: Claim) -> str:
    o = c.operands
    head = (f"The {o['shape']} GEMV achieved **{format_bandwidth(o['gemv_bandwidth'])}**, **{o['ratio']:.2f}** times "
            f"the copy's {format_bandwidth(o['copy_bandwidth'])}")
    if c.outcome == "matches":
        return (head + f": within ±{o['tolerance']:.0%} of the copy ceiling. The GEMV is a memory-bound stream, and "
                "bytes / copy bandwidth predicts its time.")
    if c.outcome == "below":
        return (head + ": well below the copy ceiling. Something besides memory limits this GEMV (too few threads, "
                "a slow kernel); the copy figure overstates what a GEMV gets here.")
    if c.outcome == "above":
        cache = ("" if o.get("beyond_cache") is True else
                 " Its buffers did not exceed four times the last-level cache, so part of each call may come from "
                 "cache." if o.get("beyond_cache") is False else
                 " The OS reported no cache size, so whether its buffers left the cache is unknown.")
        return (head + ": **above** the copy ceiling. A GEMV cannot read memory faster than memory delivers, so the "
                "copy figure understates what memory gives a read-mostly kernel: the copy counts each byte it writes "
                "once, but a CPU first reads the line it overwrites (write-allocate), and writes are the slower "
                f"direction on many memory systems.{cache} For predicting decoding, which mostly reads weights, the "
                "GEMV's own bandwidth is the better figure, and the lessons use it.")
    return head + ". " + unreliable(c, "Whether the GEMV reaches the copy ceiling")


def _time_vs_size(c: Claim) -> str:
    o = c.operands
    tr = o["time_ratio"]
    span = (f"from {o['first']} to {o['last']} the bytes grew {o['bytes_ratio']:,.0f}×, the time "
            + (f"{tr:,.0f}×" if tr >= 100 else f"{tr:.3g}×"))
    if c.outcome == "grows":
        return f"The time per call grows with the bytes ({span}), as bytes / bandwidth says."
    if c.outcome == "flat":
        return (f"The time per call did **not** grow with the matrix ({span}). No memory system behaves like that: "
                f"the calls waited for CPU time (other programs on the cores, or more threads than free cores).")
    if c.outcome in ("falls", "mixed"):
        return (f"The time per call did not follow the bytes ({span}, with steps up and down): the machine's "
                f"speed changed during the sweep.")
    return f"Over the sweep {span}. " + unreliable(c, "How the time grows with the size")


def _cache_reuse(c: Claim) -> str:
    o = c.operands
    if c.outcome == "unknown_cache":
        return "The OS did not report a cache size, so this sweep cannot say which matrices fit in it."
    if c.outcome == "none_fits":
        return (f"No matrix of this sweep fits well inside the {format_bytes(o['llc_bytes'], system='iec')} "
                "last-level cache, so the same buffer cannot be served from it.")
    head = (f"At {o['shape']} ({format_bytes(o['matrix_bytes'], system='iec')}, well inside the "
            f"{format_bytes(o['llc_bytes'], system='iec')} last-level cache) the same buffer gave "
            f"**{format_bandwidth(o['same_bandwidth'])}** against **{format_bandwidth(o['rotated_bandwidth'])}** "
            "with rotation")
    if c.outcome == "cache_faster":
        return (head + f", {o['speedup']:.1f} times as much: after the first call a matrix that fits is read from "
                "cache, and the timing measures the cache, not memory.")
    if c.outcome == "no_gain":
        return (head + ": no faster beyond the spread. Here reuse did not help (the rotated buffers may themselves "
                "stay cached, or the kernel, not the memory, sets the time at this size).")
    return head + ". " + unreliable(c, "Whether the cache speeds up a reused matrix")


def _beyond_cache(c: Claim) -> str:
    o = c.operands
    n, k = o["rotated_rows"], o["rotated_beyond"]
    if k == n:
        reach = (f"All {n} rotated sizes cycled through more than four times the last-level cache: every call "
                 "read memory")
    elif k == 0:
        reach = (f"None of the {n} rotated sizes could cycle through more than four times the last-level cache (the "
                 "memory budget did not allow it), so even the rotated timings may be partly served from cache")
    else:
        reach = (f"{k} of the {n} rotated sizes cycled through more than four times the last-level cache; the "
                 "others had to reuse buffers that may stay in cache")
    if c.outcome == "unknown_cache":
        return "The OS did not report a cache size, so this sweep cannot say where the cache ends."
    if c.outcome == "none_beyond":
        return (f"{reach}. No size of this sweep exceeds the {format_bytes(o['llc_bytes'], system='iec')} last-level "
                f"cache (the largest matrix is {format_bytes(o['largest_bytes'], system='iec')}), so it cannot show "
                "what happens beyond it, where the two curves are expected to meet.")
    head = (f"{reach}. Beyond the cache, at {o['shape']} ({format_bytes(o['matrix_bytes'], system='iec')}), the "
            f"same buffer gives {format_bandwidth(o['same_bandwidth'])} and rotation "
            f"{format_bandwidth(o['rotated_bandwidth'])}")
    if c.outcome == "meet":
        return head + ": the two curves meet, because a matrix larger than the cache cannot stay in it."
    if c.outcome == "apart":
        return (head + f", still {o['ratio']:.2f} times apart although neither can stay in the cache: the two "
                "measurements saw different conditions (the machine's other work changed between them).")
    return head + ". " + unreliable(c, "Whether the curves meet beyond the cache")


def _small_matrix(c: Claim) -> str:
    o = c.operands
    head = (f"The smallest matrix ({o['shape']}) took {format_time(o['seconds'])} per call against a predicted "
            f"{format_time(o['predicted_seconds'])}")
    if c.outcome == "matches":
        return head + ": close to bytes / bandwidth."
    if c.outcome == "faster":
        return (head + ": faster than memory allows. A matrix this small is partly served from cache even with "
                "rotation (hardware prefetch, a cache larger than reported), so it says nothing about memory.")
    if c.outcome == "overhead":
        return (head + f": {format_time(o['excess_seconds'])} more, within the "
                f"{format_time(o['dispatch_seconds'])} a call can cost before any byte moves (Python, dispatch).")
    if c.outcome == "waited":
        return (head + f": {format_time(o['excess_seconds'])} more per call, more than the "
                f"{format_time(o['dispatch_seconds'])} any per-call cost explains: the calls waited for CPU time, "
                "or the rotation did not keep this small matrix at the memory ceiling.")
    return head + ". " + unreliable(c, "What sets the smallest matrix's time")


def _dtype_speed(c: Claim) -> str:
    o = c.operands
    if c.relation == "disagree":
        sizes = ", ".join(f"{r:.3g}× fp32's time at {shape}" for shape, r in o["ratios"].items())
        return (f"**{o['dtype']}**: {sizes} (its bytes predict {o['predicted_ratio']:.2f}×). "
                + unreliable(c, f"Whether {o['dtype']} is faster than fp32"))
    head = (f"**{o['dtype']}, {o['shape']}**: {o['ratio']:.3g}× fp32's time (its bytes predict "
            f"{o['predicted_ratio']:.2f}×)")
    text = {
        "as_bytes_predict": ": faster, about as its halved bytes predict: memory-bound.",
        "faster_than_bytes": ": faster than even its halved bytes allow: the fp32 reference did not run at the "
                             "memory ceiling (another kernel, or cache), so this ratio says nothing about memory.",
        "faster_less": ": faster, but well short of its halved bytes: the conversion work costs part of the gain.",
        "same": ": the same time as fp32 within the spread, although it reads half the bytes: converting each element "
                "costs as much as the bytes it saves.",
        "slower": ": **slower** than fp32 although it reads half the bytes. Memory is not the limit: without native "
                  "half-precision arithmetic each element is converted to fp32 before the multiply-add: "
                  "**compute-bound**.",
    }.get(c.outcome)
    if text is None:
        return head + ". " + unreliable(c, f"Whether {o['dtype']} is faster than fp32 at {o['shape']}")
    return head + text


def _decode_from_gemv(c: Claim) -> str:
    o = c.operands
    body = (f"**{format_time(o['seconds'])}** per token ({o['tokens_per_second']:.2f} tokens/s) in {o['dtype']}, at "
            f"the {format_bandwidth(o['bandwidth'])} its {o['shape']} GEMV achieved")
    if c.reliable:
        return body + "."
    return (body + f". **This run's estimate, not this machine's**: the GEMV timings it rests on are not "
            f"settled ({c.reason}), so the figure is only as good as they are.")


def _calibration(c: Claim) -> str:
    o = c.operands
    head = f"Calibrated bandwidth **{format_bandwidth(o['bandwidth'])}**, from {o['source']}"
    if o.get("fallback"):
        head += (" (no rotated GEMV's buffers exceeded four times the last-level cache, so `this_machine` took the "
                 "copy bandwidth instead)")
    if c.relation == "settled":
        u = f" (uncertainty {o['uncertainty']:.0%} of its median)" if o.get("uncertainty") is not None else ""
        return head + u + ": every timing it was built from is reliable, so it stands for this machine."
    return (head + f". **Not settled: this is this run's calibration, not this machine's**, because {c.reason}. "
            "The predictions below use it to show the method; their numbers say how this run went, not what the "
            "machine can do.")


def _probes(c: Claim) -> str:
    o = c.operands
    n = len(o["sources"])
    what = o["what"][0].upper() + o["what"][1:]
    if c.relation == "settled":
        u = (f" (the largest uncertainty {o['uncertainty']:.0%} of a median)" if o.get("uncertainty") is not None
             else "")
        return (f"{what} rests on {n} probe timing{'s' if n != 1 else ''}, every one reliable{u}: what it predicts "
                "stands for this machine.")
    return (f"{what} rests on {n} probe timing{'s' if n != 1 else ''}. **Not settled: these are this run's probes, "
            f"not this machine's**, because {c.reason}. Every comparison of what it predicts with a measurement below "
            "inherits this and is left undecided: its numbers say how this run went, not how good the model is.")


def _model_vs_estimate(c: Claim) -> str:
    o = c.operands
    head = (f"The tiny model's step took **{format_time(o['seconds'])}**, **{o['ratio']:.2f}** times the estimate "
            f"({format_time(o['predicted_seconds'])})")
    if c.outcome == "matches":
        return head + f": within ±{o['tolerance']:.0%}."
    if c.outcome == "slower" and c.reliable and not o.get("busy_run"):
        return (head + ". Its matrices are small, so the fixed cost of each of eager PyTorch's dozens of operations "
                "per layer is a large share of the step: a cost no byte count includes (lesson 06 §9 measures it).")
    if c.outcome == "slower":
        why = (f"slower by far more than the spread of its timings ({c.reason})" if c.reason else
               f"slower, in a run whose other timings show the machine was busy ({o['busy_run']})")
        return (head + f": {why}. On a quiet machine "
                "the gap is the fixed cost of eager PyTorch's many small operations (lesson 06 §9 measures it); in "
                "this run the machine's other work slowed those operations too, so the factor is this run's, not "
                "the model's (the reference run shows a quiet machine's).")
    if c.outcome == "faster":
        return (head + ": faster than bytes / bandwidth allows, so the weights of this small model were partly "
                "served from cache.")
    return head + ". " + unreliable(c, "How far the step is from the estimate")


_SAY = {"gemv_vs_copy": _gemv_vs_copy, "time_vs_size": _time_vs_size, "cache_reuse": _cache_reuse,
        "beyond_cache": _beyond_cache, "small_matrix": _small_matrix, "dtype_speed": _dtype_speed,
        "decode_from_gemv": _decode_from_gemv, "model_vs_estimate": _model_vs_estimate,
        "calibration": _calibration, "probes": _probes}
def _render(claim: Claim) -> str:
    return _SAY[claim.name](claim) + settled_note(claim)


def say(claim: Claim, ref: Claim | None = None) -> str:
    """The Markdown sentence(s) for ``claim``'s outcome; ``ref``: the same claim from the reference run, shown
    beside an undecided one (:func:`beside`)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a course_lib.core.claims Claim, got {type(claim).__name__}")
    if claim.name not in _SAY:
        raise ValueError(f"no sentences for a {claim.name!r} claim here; lesson 05's are {', '.join(_SAY)}")
    if isinstance(ref, Claim) and ref.name != claim.name:
        raise ValueError(f"ref must be a {claim.name!r} claim (the same claim from the reference run), "
                         f"got {ref.name!r}")
    return beside(_render(claim), claim, ref, _render)


def paired(claims: list, ref_claims: list) -> list:
    """Each of ``claims`` with the claim of the reference run that says the same thing (same name, dtype and
    shape), or None where the reference run has none: ``[(claim, ref or None), ...]`` for ``say(c, ref=r)``."""
    def key(c: Claim):
        return c.name, c.operands.get("dtype"), c.operands.get("shape")
    refs = {key(r): r for r in ref_claims}
    by_dtype = {}
    for r in ref_claims:                  # a claim over several shapes: the reference's first of that dtype
        by_dtype.setdefault((r.name, r.operands.get("dtype")), r)
    return [(c, refs.get(key(c), by_dtype.get(key(c)[:2]))) for c in claims]


def this_run_note(calibration: Claim) -> str:
    """For a figure computed from a calibration (a critical batch, a ridge point): empty when the calibration is
    settled, else the words that keep it from being read as the machine's."""
    if not isinstance(calibration, Claim) or calibration.name != "calibration":
        raise TypeError("calibration must be the calibration claim the figure was computed from")
    if calibration.verdict == "reliable":
        return ""
    return " (from this run's calibration, which is not settled: this run's figure, not this machine's)"
