"""Numeric questions: the answer is a number (or a quantity with units) within a tolerance.

The most common kind: every exercise set has them (``ex01`` ... ``ex09``, lessons 01-09, and
``_demo``), e.g. "how many bytes do the weights take", "how long is one decode step, in ms".
Answers are read by :mod:`course_lib.checks.answers` (bare numbers, also typed as text and with
thousands grouped as "14,483,464,192", are in the question's ``unit``; strings such as "14 GB" where
allowed; "1,5" is refused as ambiguous) and compared with :func:`math.isclose` using the question's
``rel_tol``/``abs_tol``.  A wrong answer earns the feedback of the first mistake it matches, else
a generic hint on its size or sign that never states the expected value.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

from course_lib.checks.answers import noun, parse_quantity, short
from course_lib.checks.display import CORRECT, INCORRECT
from course_lib.checks.mistakes import Mistake
from course_lib.checks.question import Question

__all__ = ["NumericQuestion"]


class NumericQuestion(Question):
    """A number within ``rel_tol``/``abs_tol`` of ``expected`` (a number in ``unit``, or a string
    with units), optionally of a ``dimension``; see :class:`~course_lib.checks.question.Question`."""

    kind = "numeric"

    #: the phrase every generic (unrecognised) wrong answer's feedback carries: the checker says honestly that it
    #: does not know the cause, rather than guessing one
    UNKNOWN = "not one of the mistakes this question knows"

    def __init__(self, *, whole: str | None = None, whole_feedback: str = "", **common):
        """``whole``: the answer is a whole count, reached by rounding a quotient ``"down"`` (sessions that fit)
        or ``"up"`` (the first batch that is compute-bound); an answer that is not a whole number is then
        refused with ``whole_feedback`` (default: says which way to round), whatever the tolerance."""
        super().__init__(**common)
        if whole not in (None, "down", "up"):
            raise self._definition_error(f"whole must be None, 'down' or 'up', got {whole!r}")
        self.whole = whole
        self.whole_feedback = whole_feedback or (
            "Only whole ones count: " + ("round down (take the floor of the quotient): a part of one cannot be used."
                                        if whole == "down" else
                                        "round up, to the first whole number at or above the quotient."))
        if self.unit is not None:
            if self.dimension is None:
                raise self._definition_error("unit needs a dimension")
            try:
                value, dim = parse_quantity(f"1 {self.unit}", self.dimension)
            except (ValueError, TypeError) as exc:
                raise self._definition_error(f"unit {self.unit!r} can't be read: {exc}") from None
            if dim != self.dimension:
                raise self._definition_error(f"unit {self.unit!r} is not a unit of {self.dimension}")
            self._scale = value
        if self.expected is None:
            raise self._definition_error("numeric questions need expected=")
        self._expected_base = self._read_definition(self.expected, "expected")
        if whole and (self.unit is not None or self.expected != round(self.expected)):
            raise self._definition_error("a whole-count question needs a whole expected value and no unit")
        for m in self.mistakes:
            base = self._read_definition(m.value, "mistake value")
            if self._close(base, self._expected_base):
                raise self._definition_error(f"mistake {m.value!r} is within tolerance of the expected answer")
            self._add_matcher(base, m)
        for d in self.detect:
            if d.value is not None:
                candidates = [self._read_definition(d.value, f"{d.name} value")]
            else:
                candidates = [self._expected_base * r for r in d.ratios]
            for base in candidates:
                if self._close(base, self._expected_base):
                    raise self._definition_error(
                        f"detector {d.name} gives a value within tolerance of the expected answer; "
                        f"tighten rel_tol (now {self.rel_tol:g}) or drop the detector")
                if any(self._close(base, prev, m.rel_tol) for prev, m in self._matchers):
                    continue  # an earlier (explicit) mistake already covers this value
                value = d.value if d.value is not None else base / self._scale
                self._add_matcher(base, Mistake(value, d.feedback))

    def _check(self, answer):
        value, dim = self._read_number(answer)
        if dim is not None and dim != self.dimension:
            return INCORRECT, (f"{short(answer)} is {noun(dim)}, but this question asks for "
                               f"{noun(self.dimension)}. Check the dimension of your result.")
        if self.whole and abs(value - round(value)) > 1e-9:  # a known mistake first, else "a whole count"
            known = next((m for prepared, m in self._matchers if self._close(value, prepared, m.rel_tol)), None)
            return INCORRECT, known.feedback if known else self.whole_feedback
        if self._close(value, self._expected_base):
            return CORRECT, ""
        for prepared, m in self._matchers:
            if self._close(value, prepared, m.rel_tol):
                return INCORRECT, m.feedback
        return INCORRECT, self._generic_feedback(value)

    def _generic_feedback(self, value: float) -> str:
        """What an unrecognised wrong answer hears: that it is none of the known mistakes, and its size against
        the answer (never the answer itself).  "Rounding" is named only for a value just outside the tolerance,
        where rounding an intermediate result is the likely cause; a miss of a few per cent is more often a
        small term left out or a different constant, and is told so."""
        unknown = f"Not right, and {self.UNKNOWN}"
        e = self._expected_base
        if e == 0 or value == 0:
            return f"{unknown}. Re-check your calculation."
        if (value > 0) != (e > 0):
            return f"{unknown}: your answer has the wrong sign."
        ratio = value / e
        tol = max(self.rel_tol, 1e-12)
        if abs(ratio - 1) <= 2 * tol:
            return (f"Close, but outside the tolerance (±{self.rel_tol:.2%}). If you rounded an intermediate "
                    "result, avoid rounding it and check the constants you used.")
        if abs(ratio - 1) <= 0.1:
            return (f"{unknown}: your answer is slightly too {'high' if ratio > 1 else 'low'} (less than 10 % "
                    "off), more than rounding explains. Look for a small term left out or added, or a constant "
                    "taken from another source.")
        if ratio >= 10 or ratio <= 0.1:
            size = "large" if ratio > 1 else "small"
            return (f"{unknown}: your answer is much too {size} (by more than a factor of 10). Check unit "
                    "conversions (k, M, G; ms vs s) and whether you multiplied where you should divide.")
        return f"{unknown}: your answer is too {'high' if ratio > 1 else 'low'}. Re-check each factor."
