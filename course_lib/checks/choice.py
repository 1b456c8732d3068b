"""Choice questions: the answer is one of the options offered.

Used by exercise sets ``ex01`` ... ``ex05``, ``ex07`` ... ``ex09`` (lessons 01-05, 07-09) and
``_demo``, e.g. "what limits the decode time at batch 1: memory bandwidth, compute, ...".  A learner
may answer with an option's text (compared without case, repeated spaces, surrounding quotes or a final
full stop; ``**`` reads as ``^``), its letter (``"b"``, ``"(B)"``, ``"b)"``) or its number (``2``, 1-based)
as the options are listed, or a distinctive part of it: text that occurs in exactly one option (at
least 3 characters), or an answer that contains exactly one option whole.  Text that fits several options
is "incorrect" with the options it fits; anything else is "incorrect" with the whole list of options.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import numbers
import re

from course_lib.checks.answers import NotAttempted, Unreadable, short
from course_lib.checks.display import CORRECT, INCORRECT
from course_lib.checks.placeholder import contains_placeholder
from course_lib.checks.question import Question

__all__ = ["ChoiceQuestion", "MIN_PART"]

#: The shortest distinctive part of an option that is read as that option.
MIN_PART = 3

_LETTER_RE = re.compile(r"^\(?([a-z])[).:]?$")
#: words that, outside the option an answer quotes, turn it into "not that option"
_NEGATION_RE = re.compile(r"\b(not|no|never|none|neither|nor|false|wrong|except|incorrect|isn't|aren't|"
                          r"doesn't|isnt|n't)\b|n't\b")


def _text(value: str) -> str:
    """An option or answer as it is compared: lower case, single spaces, no quotes or final stop."""
    s = " ".join(value.strip().lower().split()).replace("**", "^")
    s = s.strip("'\"`").strip()
    return s[:-1].rstrip() if s.endswith(".") else s


def _choice_key(value):
    """What two options or answers are compared by ('  Memory BANDWIDTH' is 'memory bandwidth')."""
    if isinstance(value, str):
        return ("s", _text(value))
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


def _letter(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i]


class ChoiceQuestion(Question):
    """``expected`` is one of ``options``; each mistake is another option; no detectors.
    See :class:`~course_lib.checks.question.Question`."""

    kind = "choice"

    def __init__(self, *, options=None, **common):
        super().__init__(**common)
        if not options or isinstance(options, str):
            raise self._definition_error("choice questions need options=[...]")
        self.options = tuple(options)
        if len(self.options) > 26:
            raise self._definition_error("at most 26 options (one letter each)")
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
        self._keys = keys
        # letters and numbers name options only where no option is itself a letter or a number
        self._by_letter = not any(k[0] == "s" and _LETTER_RE.match(k[1]) for k in keys)
        self._by_number = not any(k[0] in ("n", "b") for k in keys)

    def listing(self, indices=None) -> str:
        """The options, whole, each with its letter: "(a) 'memory bandwidth'; (b) 'compute'; ..."."""
        indices = range(len(self.options)) if indices is None else indices
        return "; ".join(f"({_letter(i)}) {short(self.options[i], 400)}" for i in indices)

    def _index(self, answer) -> int:
        """The index of the option ``answer`` names; Unreadable when it names none or several."""
        key = _choice_key(answer)
        if key in self._keys:
            return self._keys.index(key)
        if (self._by_number and isinstance(answer, numbers.Integral) and not isinstance(answer, bool)):
            if 1 <= answer <= len(self.options):
                return int(answer) - 1
            raise Unreadable(f"there are {len(self.options)} options: answer with a number from 1 to "
                             f"{len(self.options)}, a letter, or the option's text: {self.listing()}")
        if key[0] == "s":
            text = key[1]
            m = _LETTER_RE.match(text)
            if self._by_letter and m and m.group(1) < _letter(len(self.options)):
                return "abcdefghijklmnopqrstuvwxyz".index(m.group(1))
            if self._by_number and text.isdigit() and 1 <= int(text) <= len(self.options):
                return int(text) - 1
            texts = [k[1] if k[0] == "s" else None for k in self._keys]
            fits = [i for i, t in enumerate(texts) if t is not None and len(text) >= MIN_PART and text in t]
            if not fits:
                fits = [i for i, t in enumerate(texts) if t is not None and len(t) >= MIN_PART and t in text]
                if len(fits) == 1 and _NEGATION_RE.search(text.replace(texts[fits[0]], " ")):
                    raise Unreadable(f"your answer {short(answer)} names option ({_letter(fits[0])}) with a word "
                                     "that negates it; answer with the option you think is right (its text or "
                                     "its letter), not with one you rule out")
            if len(fits) == 1:
                return fits[0]
            if len(fits) > 1:
                raise Unreadable(f"your answer {short(answer)} fits more than one option: "
                                 f"{self.listing(fits)}; give more of the one you mean, or its letter")
        raise Unreadable(f"your answer {short(answer)} is not one of the options: {self.listing()} "
                         "(the text, a distinctive part of it, or its letter)")

    def _check(self, answer):
        if contains_placeholder(answer):
            raise NotAttempted
        key = self._keys[self._index(answer)]
        if key == _choice_key(self.expected):
            return CORRECT, ""
        for prepared, m in self._matchers:
            if prepared == key:
                return INCORRECT, m.feedback
        return INCORRECT, ("Not this one, and not one of the mistakes this question knows. Re-read the options "
                           "and the lesson section they come from.")
