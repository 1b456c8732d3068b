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

``Question(kind="numeric", ...)`` (the spelling of the sets written before the split) builds the
subclass of that kind.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import importlib
import math
import re
from typing import Any, Sequence

from course_lib.checks.answers import DIMENSIONS, NotAttempted, Unreadable, noun, read_number, sentence
from course_lib.checks.display import INCORRECT, NOT_ATTEMPTED, Hint, Result, Solution, fmt, graded_outcome
from course_lib.checks.mistakes import Detector, Mistake

__all__ = ["KINDS", "Question", "validate_set"]

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
    _by_kind: dict[str, type] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind") in KINDS:
            Question._by_kind.setdefault(cls.kind, cls)

    def __new__(cls, *args, kind: str | None = None, **kwargs):
        if cls is Question:
            from course_lib.core.validation import require_choice

            kind = require_choice("kind", "numeric" if kind is None else kind, KINDS)
            if kind not in Question._by_kind:
                importlib.import_module(f"{__package__}.{kind}")  # the module of that kind
            cls = Question._by_kind[kind]
        return super().__new__(cls)

    def __init__(
        self,
        *,
        id: str,
        set: str,
        objective: str,
        kind: str | None = None,
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
            raise TypeError("Question is the base class: build a question with Question(kind=...) or a subclass")
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
        if kind is not None and require_choice("kind", kind, KINDS) != self.kind:
            raise self._definition_error(f"kind={kind!r} given to {type(self).__name__}, a {self.kind!r} question")
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
        try:
            status, feedback = self._check(answer)
        except NotAttempted:
            status, feedback = NOT_ATTEMPTED, self._not_attempted_text()
        except Unreadable as exc:
            status, feedback = INCORRECT, sentence(str(exc))
        except RecursionError:
            status, feedback = INCORRECT, "Your answer is nested too deeply to read."
        except Exception as exc:  # a bug in the checker must not become a learner-facing traceback
            status, feedback = INCORRECT, f"Internal checker error ({type(exc).__name__}: {exc}); please report it."
        return self._result(status, feedback, strict)

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
