"""Self-checking exercises.

    from course_lib.checks import ex01 as q, ____
    q.q1.check(answer); q.q1.hint(); q.q1.solution()

Question sets (``ex01``, ``ex02``, ...) are imported lazily on first access, so importing this
package is cheap and a broken set only affects the notebook that uses it.  The placeholder
``____`` and the machinery live in modules by concern: placeholder, answers, display, mistakes,
evaluator, question (the base class) and one module per question kind (numeric, expression,
function, choice); this package is their façade and re-exports each public name listed below.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

from course_lib.checks.answers import DIMENSIONS
from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.display import (
    CORRECT,
    INCORRECT,
    MIME_TYPE,
    NOT_ATTEMPTED,
    RECEIVED,
    RECORD_VERSION,
    STATUSES,
    Hint,
    Result,
    Solution,
)
from course_lib.checks.evaluator import cmath_isclose
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Detector, Mistake, detectors
from course_lib.checks.numeric import NumericQuestion
from course_lib.checks.placeholder import PLACEHOLDER, ____, is_placeholder
from course_lib.checks.question import KINDS, KeylessQuestion, Question, validate_set

__all__ = [
    "____", "PLACEHOLDER", "is_placeholder",
    "CORRECT", "INCORRECT", "NOT_ATTEMPTED", "RECEIVED", "STATUSES", "MIME_TYPE", "RECORD_VERSION",
    "KINDS", "DIMENSIONS",
    "Mistake", "Detector", "detectors",
    "Question", "NumericQuestion", "ExpressionQuestion", "FunctionQuestion", "ChoiceQuestion", "KeylessQuestion",
    "Result", "Hint", "Solution", "validate_set", "cmath_isclose",
    "available_sets", "load_set", "questions",
]

_SET_RE = re.compile(r"^ex\d{2}$")


def available_sets() -> list[str]:
    """Names of the question sets shipped in this package, sorted ('ex01', 'ex02', ...)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if _SET_RE.match(m.name))


def load_set(name: str) -> ModuleType:
    """Import question set ``name`` (e.g. 'ex01'), validate it and return the module."""
    from course_lib.core.validation import require_choice

    name = require_choice("question set", name, available_sets())
    module = importlib.import_module(f"{__name__}.{name}")
    validate_set(module)
    return module


def questions(name: str) -> list[Question]:
    """The questions of set ``name`` in order."""
    return list(load_set(name).QUESTIONS)


def __getattr__(name: str):
    if _SET_RE.match(name):
        if name not in available_sets():
            available = ", ".join(available_sets()) or "none"
            raise AttributeError(f"no question set {name!r} in {__name__}; available: {available}")
        return load_set(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(available_sets()))
