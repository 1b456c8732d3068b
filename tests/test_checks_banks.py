"""Every question of every question set: the expected answer passes, the placeholder is "not
attempted", every wrong-answer bank entry earns exactly its feedback, and the set is complete.

Sets are discovered: every ``course_lib/checks/exNN.py`` (plus the ``_demo`` set used by the
fixtures), so a new lesson's checks are covered without editing this file.
"""
from __future__ import annotations

import math
import re

import nbformat
import pytest

from course_lib import checks
from course_lib.checks import ____
from course_lib.checks import (
    CORRECT,
    INCORRECT,
    NOT_ATTEMPTED,
    ChoiceQuestion,
    ExpressionQuestion,
    FunctionQuestion,
    NumericQuestion,
    Question,
    validate_set,
)

SETS = checks.available_sets() + ["_demo"]


def _module(name):
    if name == "_demo":
        from course_lib.checks import _demo

        return _demo
    return getattr(checks, name)  # the lazy loader the notebooks use


QUESTIONS = [(s, q.id) for s in SETS for q in validate_set(_module(s))]


def _question(set_name: str, qid: str) -> Question:
    return getattr(_module(set_name), qid)


def test_sets_are_discovered():
    assert checks.available_sets() == sorted(checks.available_sets())
    assert all(re.fullmatch(r"ex\d\d", s) for s in checks.available_sets())


@pytest.mark.parametrize("set_name", SETS)
def test_set_is_complete(set_name):
    module = _module(set_name)
    questions = validate_set(module)
    assert len(questions) >= 6, f"{set_name} has {len(questions)} questions; each set needs at least 6"


@pytest.mark.parametrize("set_name", checks.available_sets())
def test_set_assesses_its_lesson_objectives(set_name, repo_root):
    """Each question names an objective (O1, O2, ...) that its lesson lists."""
    (lesson,) = (repo_root / "notebooks").glob(f"{set_name[2:]}_*.ipynb")
    nb = nbformat.read(lesson, as_version=4)
    objectives = "\n".join(c.source for c in nb.cells if "objectives" in c.metadata.get("tags", []))
    for q in validate_set(_module(set_name)):
        number = q.objective.split()[0]
        assert re.fullmatch(r"O\d+", number) and f"**{number}**" in objectives, q.objective


@pytest.mark.parametrize("set_name, qid", QUESTIONS)
def test_question_is_documented(set_name, qid):
    q = _question(set_name, qid)
    assert q.hints, "at least one hint"
    assert q.solution_text.strip(), "a worked solution"
    assert len(q.mistakes) >= 3, f"{set_name}.{qid} has {len(q.mistakes)} explicit mistakes; at least 3 are required"


@pytest.mark.parametrize("set_name, qid", QUESTIONS)
def test_expected_is_correct_and_placeholder_not_attempted(set_name, qid):
    q = _question(set_name, qid)
    r = q.evaluate(q.expected)
    assert r.status == CORRECT, r
    assert q.check(q.expected, strict=True).correct
    for unfilled in (____, ____ * 2, ...):
        assert q.evaluate(unfilled).status == NOT_ATTEMPTED
    with pytest.raises(AssertionError, match="Not attempted"):
        q.check(____, strict=True)


@pytest.mark.parametrize("set_name, qid", QUESTIONS)
def test_every_bank_entry_gets_its_feedback(set_name, qid):
    q = _question(set_name, qid)
    assert len(q.bank) >= len(q.mistakes)
    for mistake in q.bank:
        r = q.evaluate(mistake.value)
        assert r.status == INCORRECT, f"{set_name}.{qid}: bank value {mistake.value!r} is not incorrect: {r}"
        assert r.feedback == mistake.feedback, f"{set_name}.{qid}: {mistake.value!r} got {r.feedback!r}"
        with pytest.raises(AssertionError) as info:
            q.check(mistake.value, strict=True)
        assert mistake.feedback in str(info.value)


def _renderings(value: float) -> set[str]:
    """Ways a number could be printed in feedback (only distinctive ones: >= 3 significant digits)."""
    out = set()
    if not math.isfinite(value) or value == 0:
        return out
    for fmt in ("{:g}", "{:.4g}", "{:.3g}", "{:,.0f}", "{:.0f}", "{:.1f}", "{:.2f}"):
        text = fmt.format(value)
        digits = re.sub(r"[^0-9]", "", text.split("e")[0]).strip("0")
        if len(digits) >= 3:
            out.add(text)
    return out


def _scaled(fn, factor):
    return lambda *args, **kwargs: fn(*args, **kwargs) * factor


def _wrong_answers(q: Question) -> list:
    """Answers that are not the expected one: the bank, then the expected answer changed by a factor
    (numbers, function results, formulas) or every other option."""
    bank = [m.value for m in q.bank]
    if isinstance(q, NumericQuestion):
        return bank + [q.expected * f for f in (0.5, 0.9, 0.97, 1.04, 1.2, 3, 50, -1)]
    if isinstance(q, FunctionQuestion):
        return bank + [_scaled(q.expected, f) for f in (0.5, 1.2, 3, 50)]
    if isinstance(q, ExpressionQuestion):
        return bank + [q._expected_expr * 3, q._expected_expr / 2, q._expected_expr + 1, "1"]
    assert isinstance(q, ChoiceQuestion), type(q)
    return [o for o in q.options if o != q.expected]


@pytest.mark.parametrize("set_name, qid", QUESTIONS)
def test_a_wrong_answer_is_rejected(set_name, qid):
    q = _question(set_name, qid)
    for answer in _wrong_answers(q):
        r = q.evaluate(answer)
        assert r.status == INCORRECT and r.feedback.strip(), f"{set_name}.{qid}: {answer!r} is not rejected: {r}"


def _distinctive(value: float) -> set[str]:
    """The renderings of a case's result, except powers of two (1024, 2**30: unit constants that
    feedback may name)."""
    if value > 0 and value == int(value) and int(value) & (int(value) - 1) == 0:
        return set()
    return _renderings(value)


def _squashed(text: str) -> str:
    return "".join(str(text).lower().split())


@pytest.mark.parametrize("set_name, qid", QUESTIONS)
def test_feedback_never_states_the_expected_value(set_name, qid):
    """Numbers: no rendering of the expected value; functions: of any case's expected result;
    formulas: not the expected formula; choices: not the expected option."""
    q = _question(set_name, qid)
    if isinstance(q, NumericQuestion):
        values = {q._expected_base, q._expected_base / q._scale}
        shown = set().union(*(_renderings(v) for v in values))
    elif isinstance(q, FunctionQuestion):
        shown = set().union(*(_distinctive(expected) for _, expected in q.cases))
    elif isinstance(q, ExpressionQuestion):
        shown = {_squashed(q._expected_expr)} | ({_squashed(q.expected)} if isinstance(q.expected, str) else set())
    else:
        shown = {_squashed(q.expected)}
    for answer in _wrong_answers(q):
        feedback = q.evaluate(answer).feedback
        if isinstance(q, (NumericQuestion, FunctionQuestion)):
            leaked = [s for s in shown if re.search(rf"(?<![\d.]){re.escape(s)}(?![\d])", feedback)]
        else:
            leaked = [s for s in shown if s in _squashed(feedback)]
        assert not leaked, f"{set_name}.{qid}: feedback for {answer!r} shows the expected value {leaked}: {feedback}"


def test_a_failing_graded_check_is_one_short_assertion(monkeypatch):
    """Grade cells: an incorrect answer raises an AssertionError rendered in IPython as one line (no
    traceback into the checks package, the feedback shown once, in the result box); an unanswered one
    raises only under a grader, so Run All on a fresh exercise copy runs to the end."""
    from course_lib.checks import display, ex01

    with pytest.raises(AssertionError) as info:
        ex01.q1.check(ex01.q1.mistakes[0].value, strict=True)
    err = info.value
    assert type(err).__name__ == "AssertionError" and isinstance(err, display.CheckFailed)
    assert ex01.q1.mistakes[0].feedback in str(err)
    (line,) = err._render_traceback_()
    assert line.startswith("AssertionError: ex01.q1 is not yet right") and ex01.q1.mistakes[0].feedback not in line

    monkeypatch.setattr(display, "_shell", lambda: object())        # a learner's kernel
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    r = ex01.q1.check(____, strict=True)
    assert r.status == NOT_ATTEMPTED and r.record()["strict"] is True
    with pytest.raises(AssertionError):
        ex01.q1.check(ex01.q1.mistakes[0].value, strict=True)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")            # nbgrader scores by errors
    with pytest.raises(AssertionError, match="Not attempted") as info:
        ex01.q1.check(____, strict=True)
    assert "not attempted" in info.value._render_traceback_()[0]
