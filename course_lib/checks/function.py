"""Function questions: the answer is a function, run on the question's test cases.

Every exercise set has them (``ex01`` ... ``ex09``, lessons 01-09, and ``_demo``), e.g. "write
``kv_cache_bytes(layers, kv_heads, head_dim, tokens)``".  The learner passes the function itself;
each case's result is read like a numeric answer (:mod:`course_lib.checks.answers`) and compared
with the expected value within the question's tolerance.  A body that still raises
``NotImplementedError`` (or returns ``____``) is "not attempted"; an exception the learner's
function raises is reported in one line, never as a traceback.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

from course_lib.checks.answers import NotAttempted, Unreadable, noun, sentence, short
from course_lib.checks.display import CORRECT, INCORRECT, NOT_ATTEMPTED
from course_lib.checks.mistakes import Mistake
from course_lib.checks.placeholder import is_placeholder
from course_lib.checks.question import _ID_RE, Question

__all__ = ["FunctionQuestion"]


class _CaseTable:
    """A function built from a question's cases (``factor`` × the expected output)."""

    def __init__(self, cases, factor: float = 1.0):
        self._cases = cases
        self._factor = factor

    def __call__(self, *args, **kwargs):
        for (a, k), expected in self._cases:
            if tuple(args) == tuple(a) and dict(kwargs) == dict(k):
                return expected * self._factor
        raise KeyError(f"no case for {args!r}")


def _call_repr(name: str, args, kwargs) -> str:
    parts = [short(a, 30) for a in args] + [f"{k}={short(v, 30)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


class FunctionQuestion(Question):
    """A function whose result on each of ``cases`` (``[((args...), expected), ...]``; args may be a
    tuple or a dict of keyword arguments) is within tolerance; ``expected`` is the reference
    function (optional: by default the cases' table).  See :class:`~course_lib.checks.question.Question`."""

    kind = "function"

    def __init__(self, *, cases=None, whole: bool = False, whole_feedback: str = "", **common):
        """``whole``: the function returns a whole count (tokens, sessions); a result that is not a whole number
        is refused with ``whole_feedback``."""
        super().__init__(**common)
        self.whole = bool(whole)
        self.whole_feedback = whole_feedback or ("returns a number that is not whole; it counts whole things: "
                                                 "round down (floor) where a part cannot be used.")
        if not cases:
            raise self._definition_error("function questions need cases=[((args...), expected), ...]")
        if self.unit is not None:
            raise self._definition_error("function questions compare returned numbers in base units; drop unit=")
        prepared = []
        for case in cases:
            if not (isinstance(case, (tuple, list)) and len(case) == 2):
                raise self._definition_error(f"each case must be ((args...), expected), got {case!r}")
            args, value = case
            if isinstance(args, dict):
                a, k = (), dict(args)
            elif isinstance(args, (tuple, list)):
                a, k = tuple(args), {}
            else:
                a, k = (args,), {}
            base = self._read_definition(value, "case expected value")
            prepared.append(((a, k), base))
        self.cases = tuple(prepared)
        if self.expected is None:
            self.expected = _CaseTable(self.cases)
        elif not callable(self.expected):
            raise self._definition_error("expected must be the reference function for function questions")
        else:
            outcome = self._run(self.expected, "reference")
            if outcome[0] != CORRECT:
                raise self._definition_error(f"the reference function disagrees with the cases: {outcome[1]}")
        for m in self.mistakes:
            if not callable(m.value):
                raise self._definition_error(f"mistake values of function questions must be functions, got {m.value!r}")
            outputs = self._outputs(m.value)
            if outputs is None:
                raise self._definition_error(f"mistake function {m.value!r} fails on the cases")
            if all(self._close(o, e) for o, (_, e) in zip(outputs, self.cases)):
                raise self._definition_error(f"mistake function {m.value!r} gives the expected results")
            self._add_matcher(outputs, m)
        for d in self.detect:
            if d.value is not None:
                raise self._definition_error(f"detector {d.name} needs a fixed value; not usable with functions")
            for r in d.ratios:
                outputs = [e * r for _, e in self.cases]
                if all(self._close(o, e) for o, (_, e) in zip(outputs, self.cases)):
                    raise self._definition_error(f"detector {d.name} can't be told apart under rel_tol")
                if any(all(self._close(o, p, m.rel_tol) for o, p in zip(outputs, prev)) for prev, m in self._matchers):
                    continue
                self._add_matcher(outputs, Mistake(_CaseTable(self.cases, r), d.feedback))

    def _outputs(self, fn) -> list[float] | None:
        out = []
        for (a, k), _ in self.cases:
            try:
                base, dim = self._read_number(fn(*a, **k))
            except Exception:
                return None
            if dim is not None and dim != self.dimension:
                return None
            out.append(base)
        return out

    def _not_attempted_text(self) -> str:
        return "Write the body of the function (replace `raise NotImplementedError`)."

    def _run(self, fn, name: str):
        """(status, feedback, outputs-or-None) for calling ``fn`` on every case."""
        outputs: list[float] = []
        failures = []
        not_whole = None  # the first call whose result is not a whole number (when whole counts are asked)
        for (a, k), expected in self.cases:
            call = _call_repr(name, a, k)
            try:
                got = fn(*a, **k)
            except NotImplementedError:
                return NOT_ATTEMPTED, self._not_attempted_text(), None
            except RecursionError:
                return INCORRECT, f"{call} recursed without end.", None
            except Exception as exc:
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                return INCORRECT, f"{call} raised {type(exc).__name__}" + (f": {msg}" if msg else "") + ".", None
            if is_placeholder(got):
                return NOT_ATTEMPTED, self._not_attempted_text(), None
            if isinstance(got, str):
                return INCORRECT, (f"{call} returned text ({short(got, 40)}); return the number itself "
                                   "(a float or an int), not a string."), None
            try:
                value, dim = self._read_number(got, what=f"the result of {call}")
            except NotAttempted:
                return NOT_ATTEMPTED, self._not_attempted_text(), None
            except Unreadable as exc:
                return INCORRECT, sentence(str(exc)), None
            if dim is not None and dim != self.dimension:
                return INCORRECT, (f"{call} returned {short(got)}, which is {noun(dim)}; "
                                   f"the function should return {noun(self.dimension)}."), None
            if self.whole and not_whole is None and abs(value - round(value)) > 1e-9:
                not_whole = call
            outputs.append(value)
            if not self._close(value, expected):
                failures.append((call, got))
        if not_whole is not None:  # a known mistake (matched by _check on the outputs) first, else this
            return INCORRECT, f"{not_whole} {self.whole_feedback}", outputs
        if not failures:
            return CORRECT, "", outputs
        call, got = failures[0]
        passed = len(self.cases) - len(failures)
        return INCORRECT, (f"{call} returned {short(got, 40)}, which is not right "
                           f"({passed} of {len(self.cases)} test cases pass), and not one of the mistakes this "
                           "question knows."), outputs

    def _check(self, answer):
        if is_placeholder(answer):
            raise NotAttempted
        if not callable(answer) or isinstance(answer, type):
            raise Unreadable(f"your answer is {short(answer)}; pass your function itself (without calling it)")
        name = getattr(answer, "__name__", "f")
        if not isinstance(name, str) or not _ID_RE.match(name):
            name = "f"
        status, feedback, outputs = self._run(answer, name)
        if status != INCORRECT or outputs is None or len(outputs) != len(self.cases):
            return status, feedback
        for prepared, m in self._matchers:
            if all(self._close(o, p, m.rel_tol) for o, p in zip(outputs, prepared)):
                return INCORRECT, m.feedback
        return INCORRECT, feedback
