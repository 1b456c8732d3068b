"""Grading that does not trust the student's kernel (issue 18, "Integrity"): each attack earns no point.

Answers leave the kernel as plain data and are judged in the grader's process; the kernel imports a
``course_lib`` without the answer key; functions run in a fresh interpreter on their own source.  The
attacks: reading the key (``answer = q.q1.expected``, also spelled so the static scan cannot see it), a
patched checker in an answer cell (``c.Question.evaluate = lambda ...``, also through ``exec``), grade
cells edited to check the key, a function that calls the key, and a ``sympy.py`` beside an untouched
notebook that patches the checker.  Two kernels in all (question set ``_demo``); the plain-data round
trip and the key-less checks need none.
"""
from __future__ import annotations

import fractions
import math
import types
from pathlib import Path

import nbformat
import pytest
from attacks import SHADOW_SYMPY

from course_lib.authoring import grade, sandbox
from course_lib.checks import _demo
from course_lib.checks.answers import from_plain, to_plain
from course_lib.checks import CORRECT, INCORRECT, NOT_ATTEMPTED, RECEIVED, ____
from course_lib.checks.question import keyless_module_source

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOLUTIONS = FIXTURES / "solutions"
EXERCISE = FIXTURES / "exercises" / "00_demo.ipynb"

PATCH = "c.Question.evaluate = lambda self, a, strict=False: self._result('correct', '', strict)"


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.notebook
def test_every_integrity_attack_earns_nothing(tmp_path):
    """One kernel: the key read statically and dynamically, the checker patched statically and through
    exec, a grade cell edited to check the key, a function that calls the key: 0 points, status tampered."""
    nb = nbformat.read(str(EXERCISE), as_version=4)
    _cell(nb, "q1-answer").source = "weights_bytes = q.q1.expected\nq.q1.check(weights_bytes)"
    _cell(nb, "q2-answer").source = "step_ms = getattr(q.q2, 'exp' + 'ected')\nq.q2.check(step_ms)"
    _cell(nb, "q3-answer").source = ("import course_lib.checks.question as c\n" + PATCH + "\n"
                                     "kv_per_token = '2*L*H*d'\nq.q3.check(kv_per_token)")
    _cell(nb, "q4-answer").source = ("def kv_cache_bytes(*args, **kwargs):\n"
                                     "    return getattr(q.q4, 'expected')(*args, **kwargs)\n"
                                     "q.q4.check(kv_cache_bytes)")
    _cell(nb, "q5-answer").source = ("exec(\"import course_lib.checks.question as c; " + PATCH.replace('"', "'")
                                     + "\")\nbottleneck = 'compute'\nq.q5.check(bottleneck)")
    _cell(nb, "q6-grade").source = "q.q6.check(q.q6.expected, strict=True)"
    path = tmp_path / "00_demo.ipynb"
    nbformat.write(nb, str(path))

    g = grade.grade_notebook(path, timeout=30, solutions=SOLUTIONS)

    assert g.score == 0, [(q.question, q.status, q.feedback) for q in g.questions]
    statuses = {q.question: q.status for q in g.questions}
    assert statuses["q1"] == statuses["q2"] == INCORRECT, "the kernel's q.qN.expected is None: no key there"
    assert statuses["q3"] == statuses["q5"] == INCORRECT, "a patched checker in the kernel does not judge"
    assert statuses["q4"] == INCORRECT and statuses["q6"] == NOT_ATTEMPTED
    q4 = next(q for q in g.questions if q.question == "q4")
    assert "raised TypeError" in q4.feedback, q4.feedback  # None(*args): the fresh interpreter has no key
    assert g.status == "tampered"
    messages = " | ".join(p.message for p in g.problems if p.kind == "tampered")
    assert "reads the answer key" in messages and "patches c.Question.evaluate" in messages
    assert "grade cell 'q6-grade'" in messages and "was edited" in messages


@pytest.mark.notebook
def test_a_shadowing_sympy_beside_an_untouched_notebook_earns_nothing(tmp_path):
    """One kernel: the untouched exercise next to a sympy.py that patches the checker: 0 points, tampered;
    the solution next to the same file still gets every point (the file is never used)."""
    (tmp_path / "sympy.py").write_text(SHADOW_SYMPY)
    untouched = tmp_path / "00_demo.ipynb"
    untouched.write_bytes(EXERCISE.read_bytes())
    g = grade.grade_notebook(untouched, timeout=30, solutions=SOLUTIONS)
    assert g.score == 0 and g.status == "tampered"
    assert "sympy.py beside the notebook would shadow the module 'sympy'" in " ".join(p.message for p in g.problems)
    assert {q.status for q in g.questions} == {NOT_ATTEMPTED}


def test_answers_survive_the_plain_data_round_trip():
    """What leaves the kernel reads back as the same answer: judged the same in the grader's process."""
    import numpy as np
    import sympy

    from course_lib.core.units import Quantity

    L, H, d, b = sympy.symbols("L H d b", positive=True)
    for q, answer in [(_demo.q1, 14e9), (_demo.q1, "14 GB"), (_demo.q1, 14_000_000_000), (_demo.q1, np.float32(14e9)),
                      (_demo.q1, Quantity(14e9, "bytes")), (_demo.q1, fractions.Fraction(28_000_000_000, 2)),
                      (_demo.q1, 10 ** 5000), (_demo.q1, np.array([1.0, 2.0, 3.0])), (_demo.q1, None),
                      (_demo.q1, ____), (_demo.q3, 2 * L * H * d * b), (_demo.q3, "2*L*H*d"),
                      (_demo.q3, sympy.Symbol("x") * 2), (_demo.q5, "memory bandwidth"), (_demo.q5, "b"),
                      (_demo.q6, 100), (_demo.q6, sympy.Integer(100)), (_demo.q6, float("nan"))]:
        direct, judged = q.evaluate(answer), q.evaluate(from_plain(to_plain(answer)))
        assert (judged.status, judged.feedback) == (direct.status, direct.feedback), (q.id, answer)
    assert to_plain(10 ** 5000) == {"huge": 1} and math.isinf(float(from_plain({"float": "inf"})))


def test_keyless_checks_give_form_feedback_and_carry_no_key():
    module = types.ModuleType("course_lib.checks._demo")
    exec(keyless_module_source(_demo), module.__dict__)
    q = {x.id: x for x in module.QUESTIONS}
    assert all(x.expected is None and not x.mistakes for x in q.values())
    assert q["q1"].evaluate(_demo.q1.expected).status == RECEIVED
    assert q["q1"].evaluate("13.9 ms").status == INCORRECT  # the wrong dimension is certain without a key
    assert q["q1"].evaluate(____).status == NOT_ATTEMPTED
    assert q["q3"].evaluate("2*L*H*x").status == INCORRECT and q["q3"].evaluate("2*L*H*d").status == RECEIVED
    assert q["q4"].evaluate(_demo.q4.expected).status == RECEIVED and q["q4"].evaluate(3).status == INCORRECT
    assert q["q5"].evaluate("zzz").status == INCORRECT and q["q5"].evaluate("compute").status == RECEIVED
    assert q["q1"].check(1.0, strict=True).status == RECEIVED, "a graded check of the right form does not raise"
    assert "worked solution is not part of this release" in q["q1"].solution_text


def test_the_grading_kernel_gets_course_lib_without_the_key(tmp_path):
    root = sandbox.write_keyless(tmp_path, ["_demo"])
    demo = (root / "course_lib" / "checks" / "_demo.py").read_text()
    assert "Mistake" not in demo and "expected" not in demo.replace('"expected"', "")
    assert not (root / "course_lib" / "checks" / "ex01.py").exists(), "only the notebook's own set, key-less"
    assert (root / "course_lib" / "checks" / "answers.py").exists()
    assert CORRECT not in {_demo.q1.evaluate(None).status}


def test_the_text_report_shows_the_feedback():
    g = grade.NotebookGrade(path="x.ipynb", sets=["_demo"], questions=[
        grade.QuestionGrade("_demo", "q1", "D1", 1, 1, CORRECT, "", 2, 1),
        grade.QuestionGrade("_demo", "q2", "D2", 2, 0, INCORRECT, "That is in seconds;\nthe question asks for ms.",
                            2, 1)])
    text = grade.format_report([g])
    assert "_demo.q2      0/2  incorrect\n" in text and "That is in seconds; the question asks for ms." in text
    assert text.count("\n") == 6, text  # header, column names, two questions, one feedback line, total


def test_a_measurement_question_is_judged_on_the_graders_own_row(tmp_path):
    """No kernel, three fresh interpreters: ``measure`` names the grader's probe (here a stand-in written
    into the key-less course folder); the learner's function is judged on that row, whatever row the
    learner's kernel sent, and a function that only fits the reference row fails."""
    from course_lib.authoring import kernel
    from course_lib.checks.function import FunctionQuestion

    reference = {"bytes": 10.0, "seconds": 1.0}

    class RowQ(FunctionQuestion):
        measure = "grader_probe:row"

        def __init__(self, rows=(reference,)):
            self._rows = rows
            super().__init__(id="q1", set="_demo", objective="D1 row", dimension="bandwidth",
                             cases=[((r,), r["bytes"] / r["seconds"]) for r in rows])

        def bind(self, row):
            return RowQ((*self._rows, dict(row)))

    q = RowQ()
    keyless = sandbox.write_keyless(tmp_path / ".course", ["_demo"])
    (keyless / "grader_probe.py").write_text("def row():\n    return {'bytes': 600.0, 'seconds': 2.0}\n")
    (tmp_path / ".tmp").mkdir()
    env = kernel.launch_env(sandbox.clean_env(tmp_path, keyless=keyless), fast=None, backend=kernel.HEADLESS_BACKEND)
    limits = grade._Limits(60, 300, 4 << 30, 1 << 20, 16 << 20)
    right = {"answer": {"function": ["bw", "def bw(row):\n    return row['bytes'] / row['seconds']\n"]},
             "measurement": to_plain(reference), "row_keyword": "row"}
    fitted = {**right, "answer": {"function": ["bw", "def bw(row):\n    return 10.0\n"]}}
    assert grade._judge(q, right, [], tmp_path, env, limits) == (CORRECT, "")
    status, feedback = grade._judge(q, fitted, [], tmp_path, env, limits)
    assert status == INCORRECT and "bw({'bytes': 600.0" in feedback, feedback
