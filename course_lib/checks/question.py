"""The ``Question`` base class: what every self-checking question has, whatever its kind.

Used by every exercise set (``ex01`` ... ``ex09``, lessons 01-09, and ``_demo``) and by the grader
(:mod:`course_lib.authoring.grade`).  A question has an id, a set, the learning objective it
assesses, points, hints, a worked solution and its bank of known mistakes; ``check(answer)``
displays a :class:`~course_lib.checks.display.Result` (and raises with ``strict=True``, in grade
cells), ``evaluate(answer)`` only returns it, and no exception from reading a learner's answer ever
escapes.  How an answer is read and matched is the business of one subclass per kind:

* :class:`~course_lib.checks.numeric.NumericQuestion`        ``"numeric"``
* :class:`~course_lib.checks.expression.ExpressionQuestion`  ``"expression"``
* :class:`~course_lib.checks.function.FunctionQuestion`      ``"function"``
* :class:`~course_lib.checks.choice.ChoiceQuestion`          ``"choice"``

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

from course_lib.checks.answers import DIMENSIONS, NotAttempted, Unreadable, noun, read_number, sentence
from course_lib.checks.display import (
    INCORRECT,
    NOT_ATTEMPTED,
    RECEIVED,
    Hint,
    Result,
    Solution,
    fmt,
    graded_outcome,
)
from course_lib.checks.mistakes import Detector, Mistake

__all__ = ["KINDS", "Question", "validate_set", "KeylessQuestion", "keyless_questions", "keyless_module_source"]

#: The question kinds, each the ``kind`` of one subclass of :class:`Question`.
KINDS = ("numeric", "expression", "function", "choice")

_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Question:
    """One self-checking exercise question.  See docs/CHECKS_API.md.

    Parameters (keyword-only), common to every kind:
      id, set        e.g. "q1", "ex01"; the question is ``<set module>.<id>``.
      objective      the learning objective it assesses, e.g. "O2 weights memory".
      expected       the right answer, written as the kind reads answers.
      rel_tol, abs_tol   numeric tolerances (math.isclose); defaults 1e-2 and 0.
      dimension      one of DIMENSIONS or None (a plain number).
      unit           how bare numbers are read, e.g. "GB" or "ms" (numeric questions only).
      accept_strings allow answers like "14 GB" (default: True when ``dimension`` is set, and for
                     expressions).
      points, prompt, hints, solution, mistakes, detect (list of Detector).
    Each subclass adds its own (``symbols``, ``cases``, ``options``).
    """

    #: Set by each subclass: one of :data:`KINDS`.
    kind: str = ""
    _strings_by_default = False
    symbols: tuple = ()
    cases: tuple = ()
    options: tuple = ()

    def __init__(
        self,
        *,
        id: str,
        set: str,
        objective: str,
        expected: Any = None,
        rel_tol: float = 1e-2,
        abs_tol: float = 0.0,
        dimension: str | None = None,
        unit: str | None = None,
        accept_strings: bool | None = None,
        points: float = 1,
        prompt: str = "",
        hints: Sequence[str] = (),
        solution: str = "",
        mistakes: Sequence[Mistake] = (),
        detect: Sequence[Detector] = (),
    ):
        from course_lib.core.validation import require_choice, require_nonnegative, require_positive

        if type(self) is Question or self.kind not in KINDS:
            raise TypeError("Question is the base class: build a NumericQuestion, ExpressionQuestion, "
                            "FunctionQuestion or ChoiceQuestion")
        for name, value in (("id", id), ("set", set)):
            if not isinstance(value, str) or not _ID_RE.match(value):
                raise ValueError(f"Question {name} must be an identifier such as 'q1' / 'ex01', got {value!r}")
        self.id = id
        self.set = set
        where = f"{set}.{id}"
        self._where = where
        if not isinstance(objective, str) or not objective.strip():
            raise ValueError(f"{where}: objective must be a non-empty string naming the learning objective")
        self.objective = objective
        self.points = require_positive("points", points)
        self.rel_tol = require_nonnegative("rel_tol", rel_tol)
        self.abs_tol = require_nonnegative("abs_tol", abs_tol)
        self.prompt = str(prompt)
        if isinstance(hints, str) or not all(isinstance(h, str) and h.strip() for h in hints):
            raise TypeError(f"{where}: hints must be a list of non-empty strings")
        self.hints = tuple(hints)
        if not isinstance(solution, str):
            raise TypeError(f"{where}: solution must be a markdown string")
        self.solution_text = solution
        if not all(isinstance(m, Mistake) for m in mistakes):
            raise TypeError(f"{where}: mistakes must be a list of Mistake(value, feedback)")
        self.mistakes = tuple(mistakes)
        if not all(isinstance(d, Detector) for d in detect):
            raise TypeError(f"{where}: detect must be a list of detectors (course_lib.checks.detectors)")
        self.detect = tuple(detect)
        self._hints_seen = 0  # highest hint number shown so far
        self.dimension = None if dimension is None else require_choice("dimension", dimension, DIMENSIONS)
        self.unit = unit
        self.accept_strings = (
            (self.dimension is not None or self._strings_by_default) if accept_strings is None
            else bool(accept_strings)
        )
        self.expected = expected
        self._scale = 1.0  # bare numbers are in `unit` (base units per unit); set by NumericQuestion
        self._bank: list[Mistake] = []  # explicit + detector-generated, in matching order
        self._matchers: list[tuple[Any, Mistake]] = []  # (prepared value, mistake)
        if unit is not None and self.kind not in ("numeric", "function"):
            raise self._definition_error("unit only applies to numeric and function questions")

    # ---- helpers for the subclasses ----------------------------------------------------------

    def _definition_error(self, message: str) -> ValueError:
        return ValueError(f"{self._where}: {message}")

    def _add_matcher(self, prepared, mistake: Mistake):
        self._matchers.append((prepared, mistake))
        self._bank.append(mistake)

    def _read_number(self, x, what: str = "your answer") -> tuple[float, str | None]:
        """(value in base units, dimension the answer itself carried or None)."""
        return read_number(x, scale=self._scale, dimension=self.dimension, accept_strings=self.accept_strings,
                           what=what)

    def _read_definition(self, value, what: str) -> float:
        """A number of the definition (expected, a mistake) in base units; a definition error if unreadable."""
        try:
            base, dim = self._read_number(value)
        except (Unreadable, NotAttempted) as exc:
            raise self._definition_error(f"{what} {value!r} can't be read: {exc}") from None
        if dim is not None and dim != self.dimension:
            raise self._definition_error(f"{what} {value!r} is {noun(dim)}, not {self.dimension}")
        return base

    def _close(self, a: float, b: float, rel_tol: float | None = None) -> bool:
        return math.isclose(a, b, rel_tol=self.rel_tol if rel_tol is None else rel_tol, abs_tol=self.abs_tol)

    # ---- checking ------------------------------------------------------------------------------

    def _check(self, answer) -> tuple[str, str]:  # pragma: no cover - each kind defines it
        """(status, feedback) for ``answer``; may raise NotAttempted or Unreadable."""
        raise NotImplementedError

    def _not_attempted_text(self) -> str:
        return "Replace `____` with your answer."

    def _result(self, status: str, feedback: str, strict: bool) -> Result:
        return Result(status=status, feedback=feedback, question=self.id, set=self.set, points=self.points,
                      objective=self.objective, strict=strict)

    def evaluate(self, answer, *, strict: bool = False) -> Result:
        """The Result for ``answer`` without displaying it or raising (``strict`` is only recorded)."""
        return self._result(*self._judge(lambda: self._check(answer)), strict)

    def _judge(self, check) -> tuple[str, str]:
        """(status, feedback) of ``check()``, a call of ``_check``: what a learner's answer raises becomes feedback."""
        try:
            return check()
        except NotAttempted:
            return NOT_ATTEMPTED, self._not_attempted_text()
        except Unreadable as exc:
            return INCORRECT, sentence(str(exc))
        except RecursionError:
            return INCORRECT, "Your answer is nested too deeply to read."
        except Exception as exc:  # a bug in the checker must not become a learner-facing traceback
            return INCORRECT, f"Internal checker error ({type(exc).__name__}: {exc}); please report it."

    def check(self, answer, strict: bool = False) -> Result:
        """Check ``answer``, display the result in Jupyter and return it.

        With ``strict=True`` (grade cells) an incorrect answer raises ``AssertionError`` (one line in
        IPython); a missing one only under a grader (:func:`~course_lib.checks.display.graded_outcome`).
        """
        result = self.evaluate(answer, strict=strict)
        result._show()
        return graded_outcome(result) if strict else result

    # ---- hints, solution, bank -----------------------------------------------------------------

    def hint(self, n: int | None = None) -> Hint:
        """Show hint ``n`` (1-based), or the next one on each call without ``n``."""
        if not self.hints:
            h = Hint(self.id, 0, 0, "No hints for this question.")
            h._show()
            return h
        total = len(self.hints)
        if n is None:
            n = min(self._hints_seen + 1, total)  # the next unseen hint; the last one repeats
        else:
            from course_lib.core.validation import require_count

            n = require_count("hint number", n, minimum=1)
            if n > total:
                raise ValueError(f"{self.id} has {total} hint(s); hint number must be 1..{total}, got {n}")
        self._hints_seen = max(self._hints_seen, n)
        h = Hint(self.id, n, len(self.hints), self.hints[n - 1])
        h._show()
        return h

    def solution(self) -> Solution:
        """Show the worked solution (honour system: try first!)."""
        s = Solution(self.id, self.solution_text or "No written solution for this question.")
        s._show()
        return s

    @property
    def bank(self) -> tuple[Mistake, ...]:
        """Every recognised wrong answer: the explicit mistakes, then those the detectors add.
        Each ``value`` is an answer a learner could give that earns exactly that ``feedback``."""
        return tuple(self._bank)

    def __repr__(self) -> str:
        return f"<Question {self.set}.{self.id} ({self.kind}, {fmt(self.points)} pt): {self.objective}>"

    # ---- without the key -----------------------------------------------------------------------

    #: A measurement question names here (``"package.module:function"``) the function of no arguments
    #: that measures the row its answer, a function of ``row``, is evaluated on; the grader calls it in
    #: a fresh interpreter and judges the learner's function on that row (docs/CHECKS_API.md).
    measure: str | None = None

    def public_spec(self) -> dict:
        """What a check without the answer key needs (JSON data): the question's form, dimension, unit,
        symbols and options, its prompt and hints; never ``expected``, the test cases (their inputs may
        hold another question's answer: ex05's reference rows hold q1's byte count), the mistakes or the
        worked solution."""
        from course_lib.checks.answers import to_plain

        spec = {"kind": self.kind, "id": self.id, "set": self.set, "objective": self.objective,
                "points": float(self.points), "prompt": self.prompt, "hints": list(self.hints),
                "dimension": self.dimension, "unit": self.unit, "accept_strings": self.accept_strings,
                "measure": self.measure}
        if self.symbols:
            spec["symbols"] = [s.name for s in self.symbols]
        if self.options:
            spec["options"] = [to_plain(o) for o in self.options]
        if getattr(self, "whole", None):
            spec["whole"] = self.whole
        return spec


def validate_set(module) -> list[Question]:
    """Check an exNN module's ``QUESTIONS`` and return them; raises ValueError on a broken set."""
    name = module.__name__.rsplit(".", 1)[-1]
    questions = getattr(module, "QUESTIONS", None)
    if not isinstance(questions, (list, tuple)) or not questions:
        raise ValueError(f"{module.__name__} must define a non-empty list QUESTIONS")
    seen = set()
    for q in questions:
        if not isinstance(q, Question):
            raise ValueError(f"{module.__name__}.QUESTIONS contains {q!r}, not a Question")
        if q.set != name:
            raise ValueError(f"{module.__name__}: question {q.id} says set={q.set!r}, expected {name!r}")
        if q.id in seen:
            raise ValueError(f"{module.__name__}: duplicate question id {q.id!r}")
        seen.add(q.id)
        if getattr(module, q.id, None) is not q:
            raise ValueError(f"{module.__name__}: question {q.id} must be bound to the module name {q.id!r}")
    return list(questions)


# ------------------------------------------------------------------------------------------------
# Questions without their answer key (a classroom release; the kernel a notebook is graded in)
# ------------------------------------------------------------------------------------------------


class KeylessQuestion(Question):
    """A question built from :meth:`Question.public_spec`: ``check`` says whether the answer has the
    right form (a number of the question's dimension and unit, a formula in its symbols, one of its
    options, a function that runs on its test inputs and returns such a number) with the status
    :data:`~course_lib.checks.display.RECEIVED`, or why not ("incorrect", "not attempted"); whether it
    is right is the grader's business, which has the key.  ``expected`` is None; no mistakes, no worked
    solution."""

    def __init__(self, spec: dict):  # noqa: D107 - not Question's keywords: a spec
        from course_lib.checks.answers import from_plain, parse_quantity

        self.kind = str(spec["kind"])
        self.id, self.set = str(spec["id"]), str(spec["set"])
        self._where = f"{self.set}.{self.id}"
        self.objective = str(spec.get("objective", ""))
        self.points = float(spec.get("points", 1))
        self.prompt = str(spec.get("prompt", ""))
        self.hints = tuple(spec.get("hints") or ())
        self.solution_text = ("The worked solution is not part of this release; your instructor shares it "
                              "after grading.")
        self.mistakes, self.detect, self._bank, self._matchers = (), (), [], []
        self._hints_seen = 0
        self.dimension, self.unit = spec.get("dimension"), spec.get("unit")
        self.accept_strings = bool(spec.get("accept_strings"))
        self.rel_tol, self.abs_tol = 1e-2, 0.0
        self.expected = None
        self.measure = spec.get("measure")
        self.whole = spec.get("whole")
        self._scale = 1.0
        if self.unit is not None and self.kind == "numeric":
            self._scale = parse_quantity(f"1 {self.unit}", self.dimension)[0]
        import sympy

        self.symbols = tuple(sympy.Symbol(n, positive=True) for n in spec.get("symbols") or ())
        self.options = tuple(from_plain(o) for o in spec.get("options") or ())
        self.cases = ()
        self._reader = None
        if self.kind == "choice" and self.options:
            from course_lib.checks.choice import ChoiceQuestion

            # reads an answer as one of the options (built with its first option, then without any key)
            self._reader = ChoiceQuestion(id=self.id, set=self.set, objective=self.objective or "-",
                                          options=list(self.options), expected=self.options[0])
            self._reader.expected = None

    def _not_attempted_text(self) -> str:
        if self.kind == "function" or self.measure:
            return "Write the body of the function (replace `raise NotImplementedError`)."
        return super()._not_attempted_text()

    def _received(self, what: str) -> tuple[str, str]:
        return RECEIVED, (f"{what}. It is graded with the answer key, which is not part of this release.")

    def _check(self, answer, measurement=None):
        from course_lib.checks.answers import NotAttempted, Unreadable, noun, short
        from course_lib.checks.placeholder import contains_placeholder, is_placeholder

        if self.kind == "numeric":
            value, dim = self._read_number(answer)
            if dim is not None and dim != self.dimension:
                return INCORRECT, (f"{short(answer)} is {noun(dim)}, but this question asks for "
                                   f"{noun(self.dimension)}. Check the dimension of your result.")
            if self.whole and abs(value - round(value)) > 1e-9:
                return INCORRECT, "This question asks for a whole number: " + (
                    "round down." if self.whole == "down" else "round up.")
            return self._received(f"Your answer reads as {fmt(value / self._scale)}"
                                  + (f" {self.unit}" if self.unit else "") + f", {noun(self.dimension)}")
        if self.kind == "expression":
            from course_lib.checks.evaluator import parse_expression

            expr = parse_expression(answer, self.symbols, accept_strings=self.accept_strings)
            return self._received(f"Your formula reads as {short(expr, 80)}")
        if self.kind == "choice":
            if contains_placeholder(answer):
                raise NotAttempted
            i = self._reader._index(answer)
            return self._received(f"Your answer reads as option ({'abcdefghijklmnopqrstuvwxyz'[i]})")
        # a function (of the question's inputs, or of a measured row)
        if is_placeholder(answer):
            raise NotAttempted
        if not callable(answer) or isinstance(answer, type):
            raise Unreadable(f"your answer is {short(answer)}; pass your function itself (without calling it)")
        calls = []
        if measurement is not None:  # the learner's own row: the function receives it as a dict
            as_dict = getattr(measurement, "as_dict", None)
            calls.append(((as_dict() if callable(as_dict) else measurement,), {}))
        for a, k in calls:
            try:
                got = answer(*a, **k)
            except NotImplementedError:
                raise NotAttempted from None
            except RecursionError:
                return INCORRECT, "Your function recursed without end."
            except Exception as exc:
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                return INCORRECT, f"Your function raised {type(exc).__name__}" + (f": {msg}" if msg else "") + "."
            if is_placeholder(got):
                raise NotAttempted
            if isinstance(got, str):
                return INCORRECT, (f"Your function returned text ({short(got, 40)}); return the number itself "
                                   "(a float or an int), not a string.")
            _, dim = self._read_number(got, what="what your function returned")
            if dim is not None and dim != self.dimension:
                return INCORRECT, f"Your function returned {noun(dim)}; it should return {noun(self.dimension)}."
        return self._received("Your function runs on your row and returns a number" if calls
                              else "Your function is recorded (it runs on the test inputs when graded)")

    def evaluate(self, answer, *, strict: bool = False, measurement=None) -> Result:
        return self._result(*self._judge(lambda: self._check(answer, measurement)), strict)

    def check(self, answer, strict: bool = False, measurement=None, row=None, **_ignored) -> Result:
        result = self.evaluate(answer, strict=strict, measurement=row if measurement is None else measurement)
        result._show()
        return graded_outcome(result) if strict else result

    def __repr__(self) -> str:
        return f"<Question {self.set}.{self.id} ({self.kind}, {fmt(self.points)} pt, no answer key): {self.objective}>"


def keyless_questions(specs) -> list[KeylessQuestion]:
    """The :class:`KeylessQuestion` of each spec (:meth:`Question.public_spec`), in order."""
    return [KeylessQuestion(s) for s in specs]


def keyless_module_source(module, public_names=()) -> str:
    """The text of a module that replaces question set ``module`` without its answer key: the public
    spec of each question as JSON, read by :func:`keyless_questions` (no expected value, mistake or
    solution, and no code of the set's own), and the module constants named in ``public_names`` that
    are plain data (what exercise notebooks read from the set, e.g. ``ex03.CONVERSATION``)."""
    import json

    from course_lib.checks.answers import to_plain

    name = module.__name__.rsplit(".", 1)[-1]
    questions = validate_set(module)
    specs = json.dumps([q.public_spec() for q in questions], indent=1, ensure_ascii=True, sort_keys=True)
    ids = [q.id for q in questions]
    # the set's public data that exercise notebooks read (e.g. ex03.CONVERSATION, the inputs of a question)
    data = {k: to_plain(v) for k, v in sorted(vars(module).items())
            if k in set(public_names) and not k.startswith("_") and k not in ids and k != "QUESTIONS"
            and type(v) in (int, float, str, list, tuple, dict)}
    return (f'"""Question set {name} without its answer key (a classroom release, or the kernel a notebook is\n'
            'graded in): checks say whether an answer has the right form; the grader, which has the key,\n'
            'judges it.  Generated by course_lib.authoring.exgen; do not edit.\n"""\n'
            "import json\n\n"
            "from course_lib.checks.answers import from_plain\n"
            "from course_lib.checks.question import keyless_questions\n\n"
            f"SPECS = json.loads({specs!r})\n"
            "QUESTIONS = keyless_questions(SPECS)\n"
            f"{', '.join(ids)}{',' if len(ids) == 1 else ''} = QUESTIONS\n"
            f"DATA = json.loads({json.dumps(data, sort_keys=True)!r})\n"
            "globals().update({k: from_plain(v) for k, v in DATA.items()})\n"
            f"__all__ = {ids + ['QUESTIONS'] + list(data)!r}\n")
