"""Self-checking exercises.

    from course_lib.checks import ex01 as q, ____
    q.q1.check(answer); q.q1.hint(); q.q1.solution()

Question sets (``ex01``, ``ex02``, ...) are imported lazily on first access, so importing this
package is cheap and a broken set only affects the notebook that uses it.  The placeholder
``____`` and the machinery (listed in :mod:`course_lib.checks.core`) live in modules by concern:
placeholder, answers, display, mistakes, evaluator, question (the base class) and one module per
question kind (numeric, expression, function, choice).  Used by every exercise notebook (lessons
01-09) and by the grader.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

from course_lib.checks import core
from course_lib.checks.core import Question, validate_set

__all__ = [*core.__all__, "available_sets", "load_set", "questions"]

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
    if name in core.__all__:  # the machinery's names: one list, in course_lib.checks.core
        value = getattr(core, name)
        globals()[name] = value
        return value
    if _SET_RE.match(name):
        if name not in available_sets():
            available = ", ".join(available_sets()) or "none"
            raise AttributeError(f"no question set {name!r} in {__name__}; available: {available}")
        return load_set(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(core.__all__) | set(available_sets()))
