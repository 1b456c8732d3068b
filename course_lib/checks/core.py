"""The question machinery under its old name: a re-export of the modules it was split into.

Exercise sets (``ex01`` ... ``ex09``, lessons 01-09), learners' notebooks written before the split
and :mod:`course_lib.authoring.grade` import from here, so every name stays importable::

    from course_lib.checks.core import Question, Mistake, detectors as d

New code imports the module that owns a name:

* :mod:`course_lib.checks.placeholder`  ``____`` / ``PLACEHOLDER``, ``is_placeholder``
* :mod:`course_lib.checks.answers`      reading an answer as a number (``DIMENSIONS``)
* :mod:`course_lib.checks.display`      ``Result``, ``Hint``, ``Solution``, the statuses, ``MIME_TYPE``
* :mod:`course_lib.checks.mistakes`     ``Mistake``, ``Detector``, ``detectors``
* :mod:`course_lib.checks.evaluator`    the expression evaluator
* :mod:`course_lib.checks.question`     the ``Question`` base, ``KINDS``, ``validate_set``
* one module per kind: :mod:`~course_lib.checks.numeric`, :mod:`~course_lib.checks.expression`,
  :mod:`~course_lib.checks.function`, :mod:`~course_lib.checks.choice`

Lessons: 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

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
from course_lib.checks.placeholder import _Placeholder  # noqa: F401  (a pickled ____ names it here)
from course_lib.checks.question import KINDS, KeylessQuestion, Question, validate_set

__all__ = [
    "____",
    "PLACEHOLDER",
    "is_placeholder",
    "CORRECT",
    "INCORRECT",
    "NOT_ATTEMPTED",
    "RECEIVED",
    "STATUSES",
    "KINDS",
    "DIMENSIONS",
    "MIME_TYPE",
    "RECORD_VERSION",
    "Mistake",
    "Detector",
    "detectors",
    "Question",
    "NumericQuestion",
    "ExpressionQuestion",
    "FunctionQuestion",
    "ChoiceQuestion",
    "KeylessQuestion",
    "Result",
    "Hint",
    "Solution",
    "validate_set",
    "cmath_isclose",
]
