"""A mutation harness over every question of ex01 ... ex09: wrong answers a learner plausibly gives.

Three families of mutations, each with its rule:

* **bank** -- every entry of a question's own bank (explicit mistakes and detectors): rejected, with exactly
  that entry's feedback (so each known mistake is named as itself).
* **generic** -- made from the expected answer by rule: a value just outside the tolerance, the
  neighbouring integer, the other unit convention written *with* its unit (bare numbers are read in the
  question's unit), a factor of 2, a missing or extra term and n against n - 1 in formulas, every other
  option of a choice question by its letter.  Rejected; the feedback may be an honest "not recognised,
  re-check ..." but must not name a cause the mutation does not have (here: "avoid rounding" is only for a
  value just outside the tolerance).
* **specific** -- the near misses a learner tried (issue 17): n - 1 tokens, TTFT + n x TPOT, the matrix
  alone, forgetting to round down, both link directions, ... Rejected, with feedback naming that mistake
  (a word it must contain).

And the other way round, **right** answers in the forms a lesson prints or a learner types (an option's
letter or a distinctive part of it, "134 MB") must be accepted.

Feedback modes (issue 18): in **self-study** the key ships with the exercises and the rules above apply.
In a **classroom** release the students' checks have no key (:class:`course_lib.checks.question.KeylessQuestion`,
built from the question's public spec exactly as ``exgen --classroom`` releases it): a right answer must be
received (not refused for its form), and no mutation may be judged -- it is received, or refused for its form,
dimension or unit only, never with a bank entry's feedback or a verdict on its value ("too high", "close",
"avoid rounding"). The grader, which has the key, then judges it by the self-study rules.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
import sympy

from course_lib.checks import available_sets, load_set
from course_lib.checks import CORRECT, INCORRECT, Question
from course_lib.checks.display import RECEIVED
from course_lib.checks.question import KeylessQuestion

MODES = ["self-study", "classroom"]
#: words that judge a value: a key-less (classroom) check must never say them
_VERDICT_WORDS = ("too high", "too low", "close", "avoid rounding", "off by", "factor of")

SETS = [s for s in available_sets() if s != "_demo"]
_ROUNDING = "avoid rounding"


@dataclass
class Mutation:
    q: Question
    label: str
    answer: Any
    kind: str  # bank | generic | specific | right
    names: str = ""  # specific: a word the feedback must contain; bank: the exact feedback

    @property
    def where(self) -> str:
        return f"{self.q.set}.{self.q.id} [{self.kind}: {self.label}]"


def _questions():
    return [q for s in SETS for q in load_set(s).QUESTIONS]


# ---- generic mutations, by kind ------------------------------------------------------------------------


def _numeric(q) -> list[Mutation]:
    e = q.expected if isinstance(q.expected, (int, float)) else None
    out = []
    if e is None:
        return out
    if q.rel_tol > 0:
        for sign, word in ((1, "above"), (-1, "below")):
            out.append(Mutation(q, f"just {word} the tolerance", e * (1 + sign * 1.5 * q.rel_tol), "generic"))
    integer = q.rel_tol == 0 or (isinstance(e, int) and abs(e) * q.rel_tol < 1)
    if integer:
        for step in (1, -1):
            out.append(Mutation(q, f"neighbouring integer {step:+d}", round(e) + step, "generic"))
    other = {"GB": "GiB", "MB": "MiB", "kB": "KiB", "TB": "TiB", "GB/s": "GiB/s",
             "GiB": "GB", "MiB": "MB", "KiB": "kB"}
    if q.unit in other:
        out.append(Mutation(q, "the other unit convention", f"{e:.6g} {other[q.unit]}", "generic"))
    elif q.dimension == "bytes" and q.unit is None:
        out.append(Mutation(q, "the other unit convention", f"{e / 1e9:.6g} GiB", "generic"))
    return out


def _function(q) -> list[Mutation]:
    ref = q.expected
    out = []
    tol = q.rel_tol

    if tol > 0:
        out.append(Mutation(q, "just outside the tolerance",
                            lambda *a, **k: ref(*a, **k) * (1 + 3 * tol), "generic"))
    else:
        out.append(Mutation(q, "off by one", lambda *a, **k: ref(*a, **k) + 1, "generic"))
    out.append(Mutation(q, "twice the answer", lambda *a, **k: ref(*a, **k) * 2, "generic"))
    if not q.accept_strings:  # where text is accepted, "14 GB" is an answer and "14" is in base units
        out.append(Mutation(q, "the number as text", lambda *a, **k: str(ref(*a, **k)), "generic"))
    return out


def _expression(q) -> list[Mutation]:
    e = q._expected_expr
    out = [Mutation(q, "a factor of 2", 2 * e, "generic"), Mutation(q, "an extra term", e + 1, "generic")]
    terms = sympy.Add.make_args(sympy.expand(e))
    if len(terms) > 1:
        for t in terms:
            out.append(Mutation(q, f"missing term {t}", sympy.expand(e) - t, "generic"))
    for s in q.symbols:
        for shift, word in ((-1, "n - 1"), (1, "n + 1")):
            m = e.subs(s, s + shift)
            if sympy.simplify(m - e) != 0:
                out.append(Mutation(q, f"{s} against {word.replace('n', str(s))}", m, "generic"))
    return out


def _letter(i: int) -> str:
    return "abcdefghij"[i]


def _choice(q) -> list[Mutation]:
    out = []
    right = q.options.index(q.expected)
    for i, opt in enumerate(q.options):
        if i == right:
            out += [Mutation(q, "its letter", _letter(i), "right"),
                    Mutation(q, "its letter in capitals with a bracket", f"({_letter(i).upper()})", "right"),
                    Mutation(q, "its number", i + 1, "right"),
                    Mutation(q, "capitalised", str(opt).capitalize() if isinstance(opt, str) else opt, "right"),
                    Mutation(q, "in capitals", str(opt).upper() if isinstance(opt, str) else opt, "right")]
        else:
            fb = next((m.feedback for m in q.bank if m.value == opt), "")
            out.append(Mutation(q, f"option {_letter(i)} by its letter", _letter(i), "bank" if fb else "generic", fb))
    return out


# ---- specific near misses (issue 17), computed from the course's data, not from the banks ---------------


def _q8_at(link: float) -> float:
    """ex09.q8's answer (ms of one decode step's all-reduces) at another link bandwidth."""
    from course_lib.core import capstone

    s = capstone.DashboardState(model="llama-3-70b", batch=32, prompt_tokens=2048, new_tokens=300, tensor_parallel=8,
                                interconnect_bandwidth=link)
    return capstone.compute(s).allreduce_decode * 1e3


def _specific() -> list[Mutation]:
    from course_lib.checks import ex01, ex02, ex03, ex04, ex05, ex07, ex08, ex09
    from course_lib.core import compare
    from course_lib.core.caching import kv_cache_bytes
    from course_lib.core.estimator import estimate
    from course_lib.core.hardware import get_hardware
    from course_lib.core.models import get_model

    l3 = get_model("llama-3-8b")
    mistral = get_model("mistral-7b")
    h100, h200 = get_hardware("h100-sxm"), get_hardware("h200")
    hf = next(r for r in compare.h200_cases("datasheet") if r.case == "h200/hf/tpot-c2048")
    w_h200 = mistral.decode_weight_bytes("fp16") / h200.bandwidth
    kv_h200 = estimate("mistral-7b", "h200", 2048, 2).tpot_first - w_h200
    e4 = estimate("llama-3-8b", "h100-sxm", 2048, 300, batch=32)
    direct = estimate("llama-2-7b", "rtx-4090", 1000, 250)
    out = [
        Mutation(ex01.q2, "the right number typed as text", f"{ex01.q2.expected:.4g}", "specific", "text"),
        Mutation(ex01.q2, "rounded to 13", 13, "specific", "round"),
        Mutation(ex01.q3, "rounded to 131000", 131000, "specific", "exact"),
        Mutation(ex01.q4, "returns the GiB as a string", lambda n: str(n / 2**30), "specific", "number"),
        Mutation(ex01.q8, "the size in GiB", get_model("llama-3-8b").params * 2 / 2**30, "specific", "GiB"),
        Mutation(ex01.q9, "GiB = 2**30 bytes", "GiB = 2**30 bytes", "right"),
        Mutation(ex02.q1, "the nominal 7B parameters", 7e9 * 4.5 / 8, "specific", "nominal"),
        Mutation(ex02.q6, "the GEMV intensity in FLOP per byte, 0.5", 0.5, "specific", "intensity"),
        Mutation(ex03.q1, "query heads, K or V only", 2 * l3.layers * l3.heads * l3.head_dim, "specific",
                 "query"),
        Mutation(ex04.q6, "2000 x the direct answer's TPOT", 2000 * direct.tpot, "specific", "later"),
        Mutation(ex05.q1, "the matrix alone", 8192 * 8192 * 2, "specific", "x"),
        Mutation(ex05.q1, "128 MiB (the matrix alone)", "128 MiB", "specific", "x"),
        Mutation(ex05.q1, "the figure lesson 05 prints", "134 MB", "right"),
        Mutation(ex07.q6, "not rounded down", (h100.capacity - l3.weight_bytes("fp16"))
                 / (l3.kv_bytes_per_token("fp16") * ex07._ST), "specific", "round down"),
        Mutation(ex09.q3, "not rounded down", (get_hardware("l40s").capacity - l3.weight_bytes("fp16"))
                 / (l3.kv_bytes_per_token("fp16") * (2048 + 300)), "specific", "round down"),
        Mutation(ex09.q4, "299 tokens instead of 300", 32 * 299 / e4.total, "specific", "300"),
        Mutation(ex09.q4, "TTFT + n x TPOT", 32 * 300 / (e4.ttft + 300 * e4.tpot), "specific", "n - 1"),
        Mutation(ex09.q8, "both link directions added",
                 _q8_at(get_hardware("h100-sxm").scale_up.bidirectional_bandwidth), "specific", "direction"),
        Mutation(ex02.q7, "the nominal 7B parameters", 7e9 * 2 / get_hardware("rtx-4090").cache_bytes, "specific",
                 "nominal"),
        Mutation(ex04.q4, "K (or V) only", (mistral.decode_weight_bytes("fp16") + kv_cache_bytes(mistral, 4096) / 2)
                 / h100.bandwidth * 1e3, "specific", "only the keys"),
        Mutation(ex08.q3, "a floor with K (or V) only", (hf.measured_s - w_h200 - kv_h200 / 2) * 1e3, "specific",
                 "only the keys"),
        Mutation(ex08.q3, "a floor with the nominal 7B parameters",
                 (hf.measured_s - 7e9 * 2 / h200.bandwidth - kv_h200) * 1e3, "specific", "nominal"),
    ]
    return out


# ---- the judge -----------------------------------------------------------------------------------------


_KEYLESS: dict = {}


def _keyless(q: Question) -> KeylessQuestion:
    """The question as a classroom release ships it: its public spec, no key."""
    key = (q.set, q.id)
    if key not in _KEYLESS:
        _KEYLESS[key] = KeylessQuestion(q.public_spec())
    return _KEYLESS[key]


def _judge_classroom(m: Mutation) -> str | None:
    r = _keyless(m.q).evaluate(m.answer)
    if m.kind == "right":
        return None if r.status == RECEIVED else f"classroom: a right answer refused: {r.feedback[:90]}"
    if r.status not in (RECEIVED, INCORRECT):
        return f"classroom: {r.status}"
    if r.status == INCORRECT:
        said = r.feedback.lower()
        if any(b.feedback == r.feedback for b in m.q.bank):
            return f"classroom: names a bank mistake without the key: {r.feedback[:90]}"
        if any(w in said for w in _VERDICT_WORDS):
            return f"classroom: judges the value without the key: {r.feedback[:90]}"
    return None


def _judge(m: Mutation, mode: str) -> str | None:
    """None when the check treats ``m`` as it should in ``mode``, else what went wrong."""
    if mode == "classroom":
        return _judge_classroom(m)
    r = m.q.evaluate(m.answer)
    if m.kind == "right":
        return None if r.status == CORRECT else f"rejected: {r.feedback}"
    if r.status != INCORRECT:
        return f"not rejected ({r.status})"
    if m.kind == "bank":
        return None if r.feedback == m.names else f"names another mistake: {r.feedback[:90]}"
    if m.kind == "specific":
        return None if m.names.lower() in r.feedback.lower() else f"feedback lacks {m.names!r}: {r.feedback[:90]}"
    if _ROUNDING in r.feedback and not m.label.startswith("just"):
        return f"blames rounding: {r.feedback[:90]}"
    return None


def _mutations() -> list[Mutation]:
    out = []
    for q in _questions():
        if q.kind != "choice":
            out += [Mutation(q, f"bank entry {i}", b.value, "bank", b.feedback) for i, b in enumerate(q.bank)]
        out += {"numeric": _numeric, "function": _function, "expression": _expression,
                "choice": _choice}[q.kind](q)
    return out + _specific()


@pytest.mark.parametrize("mode", MODES)
def test_every_mutation_is_treated_as_it_should(mode):
    mutations = _mutations()
    failures = [f"{m.where}: {why}" for m in mutations if (why := _judge(m, mode))]
    n_questions = len(_questions())
    for q in _questions():  # each of the bank's own mistakes has its own feedback
        texts = [m.feedback for m in q.mistakes]
        assert len(set(texts)) == len(texts), f"{q.set}.{q.id}: two explicit mistakes share a feedback"
    assert not failures, (f"{len(failures)} of {len(mutations)} mutations over {n_questions} questions:\n"
                          + "\n".join(failures))
    assert n_questions >= 70 and len(mutations) > 5 * n_questions


def test_choice_answers_by_letter_number_or_a_distinctive_part():
    from course_lib.checks import ex04, ex09

    q = ex04.q8
    assert q.evaluate("kernels reach only part").correct
    assert q.evaluate("A").correct and q.evaluate("a)").correct
    ambiguous = ex09.q6.evaluate("it grows in proportion to the memory")
    assert ambiguous.status == INCORRECT and "more than one" in ambiguous.feedback
    r = ex04.q8.evaluate("something else entirely")
    assert r.status == INCORRECT
    assert all(str(o) in r.feedback for o in q.options), "options are shown whole"
    assert ex04.q8.evaluate(9).status == INCORRECT and "1 to" in ex04.q8.evaluate(9).feedback


@pytest.mark.parametrize("set_name", SETS)
def test_hints_lead_and_the_solution_gives(set_name):
    for q in load_set(set_name).QUESTIONS:
        for h in q.hints:
            code = [c for c in h.split("`")[1::2] if c.startswith("return ")
                    or ("(" in c and any(op in c for op in (" - ", " / ", " * ")))]
            assert not code, f"{set_name}.{q.id}: a hint gives the solution's code: {h}"
            assert not h.rstrip().endswith("= ?"), f"{set_name}.{q.id}: a hint is the solution less its result: {h}"


def test_the_harness_can_fail():
    """A check that accepted everything, or named the wrong mistake, would be caught."""
    from course_lib.checks import ex01

    q = ex01.q1
    good = Mutation(q, "bank entry 0", q.bank[0].value, "bank", q.bank[0].feedback)
    assert _judge(good, "self-study") is None
    assert _judge(Mutation(q, "bank entry 0", q.bank[0].value, "bank", "other"), "self-study")
    assert _judge(Mutation(q, "right", q.expected, "generic"), "self-study") == "not rejected (correct)"
    assert math.isfinite(q.expected)
