"""Expression questions: the answer is a formula, checked for symbolic equivalence.

Every exercise set has them (``ex01`` ... ``ex09``, lessons 01-09, and ``_demo``), e.g. "bytes of
KV cache per token for L layers, H KV heads of size d".  The answer is a sympy expression, a
number or (by default) text such as ``"2*L*H*d*b"``; symbols are matched by name, so a learner's
``sympy.symbols('L H')`` without assumptions still counts.  Reading and comparing are the
expression evaluator's (:mod:`course_lib.checks.evaluator`).

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

from course_lib.checks.display import CORRECT, INCORRECT
from course_lib.checks.evaluator import equivalent, parse_expression, sample_points
from course_lib.checks.answers import NotAttempted, Unreadable
from course_lib.checks.mistakes import Mistake
from course_lib.checks.question import Question

__all__ = ["ExpressionQuestion"]


class ExpressionQuestion(Question):
    """A formula equivalent to ``expected`` (a sympy expression or string) in ``symbols`` (sympy
    Symbols or names; names become positive symbols); see :class:`~course_lib.checks.question.Question`."""

    kind = "expression"
    _strings_by_default = True

    def __init__(self, *, symbols=None, **common):
        super().__init__(**common)
        import sympy

        syms = []
        for s in symbols or ():
            if isinstance(s, str):
                syms.append(sympy.Symbol(s, positive=True))
            elif isinstance(s, sympy.Symbol):
                syms.append(s)
            else:
                raise TypeError(f"{self._where}: symbols must be sympy Symbols or names, got {s!r}")
        self.symbols = tuple(syms)
        if self.expected is None:
            raise self._definition_error("expression questions need expected=")
        try:
            self._expected_expr = self._read(self.expected)
        except (Unreadable, NotAttempted) as exc:
            raise self._definition_error(f"expected {self.expected!r} can't be read: {exc}") from None
        self._sample_points = sample_points(self.symbols)
        for m in self.mistakes:
            try:
                expr = self._read(m.value)
            except (Unreadable, NotAttempted) as exc:
                raise self._definition_error(f"mistake {m.value!r} can't be read: {exc}") from None
            if self._equivalent(expr, self._expected_expr):
                raise self._definition_error(f"mistake {m.value!r} is equivalent to the expected answer")
            self._add_matcher(expr, m)
        for d in self.detect:
            cands = ([self._read(d.value)] if d.value is not None
                     else [sympy.nsimplify(r) * self._expected_expr for r in d.ratios])
            for expr in cands:
                if self._equivalent(expr, self._expected_expr):
                    raise self._definition_error(f"detector {d.name} is equivalent to the expected answer")
                if any(self._equivalent(expr, prev) for prev, _ in self._matchers):
                    continue
                self._add_matcher(expr, Mistake(expr, d.feedback))

    def _read(self, x):
        return parse_expression(x, self.symbols, accept_strings=self.accept_strings)

    def _equivalent(self, a, b) -> bool:
        return equivalent(a, b, self._sample_points)

    def _check(self, answer):
        expr = self._read(answer)
        if self._equivalent(expr, self._expected_expr):
            return CORRECT, ""
        for prepared, m in self._matchers:
            if self._equivalent(expr, prepared):
                return INCORRECT, m.feedback
        return INCORRECT, ("Not equivalent to the expected formula, and not one of the mistakes this question knows. "
                           "Re-check each factor and its exponent.")
