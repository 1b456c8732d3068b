"""Choice questions: the answer is one of the options offered.

Used by exercise sets ``ex01`` ... ``ex05``, ``ex07`` ... ``ex09`` (lessons 01-05, 07-09) and
``_demo``, e.g. "what limits the decode time at batch 1: memory bandwidth, compute, ...".  Text is
compared without case or repeated spaces, numbers as floats; an answer that is not an option is
"incorrect" with the list of options.

Lessons: 00, 01, 02, 03, 04, 05, 07, 08, 09
"""
from __future__ import annotations

import numbers

from course_lib.checks.answers import NotAttempted, Unreadable, short
from course_lib.checks.display import CORRECT, INCORRECT
from course_lib.checks.placeholder import contains_placeholder
from course_lib.checks.question import Question

__all__ = ["ChoiceQuestion"]


def _choice_key(value):
    """What two options or answers are compared by ('  Memory BANDWIDTH' is 'memory bandwidth')."""
    if isinstance(value, str):
        return ("s", " ".join(value.strip().lower().split()))
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, numbers.Real):
        try:
            return ("n", float(value))
        except (OverflowError, ValueError, TypeError):
            return ("r", short(value))
    try:
        hash(value)
        return ("o", value)
    except TypeError:
        return ("r", short(value))


class ChoiceQuestion(Question):
    """``expected`` is one of ``options``; each mistake is another option; no detectors.
    See :class:`~course_lib.checks.question.Question`."""

    kind = "choice"

    def __init__(self, *, options=None, **common):
        super().__init__(**common)
        if not options or isinstance(options, str):
            raise self._definition_error("choice questions need options=[...]")
        self.options = tuple(options)
        keys = [_choice_key(o) for o in self.options]
        if len(set(keys)) != len(keys):
            raise self._definition_error("options must be distinct")
        if _choice_key(self.expected) not in keys:
            raise self._definition_error(f"expected {self.expected!r} is not one of the options")
        for m in self.mistakes:
            if _choice_key(m.value) not in keys:
                raise self._definition_error(f"mistake {m.value!r} is not one of the options")
            if _choice_key(m.value) == _choice_key(self.expected):
                raise self._definition_error(f"mistake {m.value!r} is the expected answer")
            self._add_matcher(_choice_key(m.value), m)
        if self.detect:
            raise self._definition_error("detectors do not apply to choice questions")

    def _check(self, answer):
        if contains_placeholder(answer):
            raise NotAttempted
        key = _choice_key(answer)
        keys = [_choice_key(o) for o in self.options]
        if key not in keys:
            raise Unreadable(f"your answer {short(answer)} is not one of the options: "
                             + ", ".join(short(o, 40) for o in self.options))
        if key == _choice_key(self.expected):
            return CORRECT, ""
        for prepared, m in self._matchers:
            if prepared == key:
                return INCORRECT, m.feedback
        return INCORRECT, "Not this one. Re-read the options and think about which quantity limits the time."
