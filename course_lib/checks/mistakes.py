"""Known wrong answers: explicit mistakes and the generic mistake detectors.

Used by every exercise set (``ex01`` ... ``ex09``, lessons 01-09, and ``_demo``): each question
lists its ``Mistake(value, feedback)`` entries, and switches on generic detectors
(``detectors.gb_vs_gib()``, ``bits_vs_bytes()``, ``ms_vs_s()``, ``forgot_kv()``, ...) that turn the
expected answer into the wrong answers a unit or counting slip gives.  Each question kind turns
them into the values it matches (a number, a formula, a function's outputs, an option).

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from course_lib.checks.placeholder import is_placeholder

__all__ = ["Mistake", "Detector", "detectors", "numbers_only", "exact_mistakes_first"]


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer and the feedback it earns.

    ``value`` is written the way a learner would answer: for numeric questions a number in the
    question's ``unit`` or a string with units; for expressions a sympy expression or string; for
    functions a (wrong) function; for choices one of the options.  ``rel_tol`` (numeric only)
    overrides the question's tolerance for recognising this mistake.
    """

    value: Any
    feedback: str
    rel_tol: float | None = None
    #: the part of the computation the mistake replaces ("weights", "capacity"), where two mistakes of a question
    #: are alternatives for that part (the nominal 7B and the whole checkpoint both replace the streamed weights):
    #: such a pair cannot be made at once, and the mutation harness does not combine them
    alters: str = ""

    def __post_init__(self):
        if not isinstance(self.feedback, str) or not self.feedback.strip():
            raise TypeError(f"Mistake feedback must be a non-empty string, got {self.feedback!r}")
        if is_placeholder(self.value):
            raise ValueError("Mistake value must not be the placeholder ____")
        if self.rel_tol is not None:
            from course_lib.core.validation import require_nonnegative

            require_nonnegative("Mistake rel_tol", self.rel_tol)


@dataclass(frozen=True)
class Detector:
    """A generic mistake: the wrong answer is ``ratio`` × the expected one (each of ``ratios``),
    or the fixed alternative answer ``value`` (written like an answer to the question).

    Build them with the functions in :data:`detectors`; switch them on per question with
    ``Question(detect=[...])``.
    """

    name: str
    feedback: str
    ratios: tuple[float, ...] = ()
    value: Any = None

    def __post_init__(self):
        if not self.ratios and self.value is None:
            raise ValueError(f"detector {self.name!r} needs ratios or a value")
        for r in self.ratios:
            if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0 and r != 1):
                raise ValueError(f"detector {self.name!r}: ratios must be finite, > 0 and != 1, got {r!r}")


class _Detectors:
    """Factories for the generic mistake detectors (``from course_lib.checks import detectors``)."""

    @staticmethod
    def gb_vs_gib(*powers: int, feedback: str | None = None) -> Detector:
        """Decimal vs binary prefixes: ratio 1.024**p (and its inverse) for each p in ``powers``.
        p = 1 kB/KiB, 2 MB/MiB, 3 GB/GiB (default), 4 TB/TiB."""
        powers = powers or (3,)
        for p in powers:
            if p not in (1, 2, 3, 4):
                raise ValueError(f"gb_vs_gib powers must be among 1 (KiB), 2 (MiB), 3 (GiB), 4 (TiB), got {p!r}")
        names = {1: ("kB", "KiB", "10^3", "2^10"), 2: ("MB", "MiB", "10^6", "2^20"),
                 3: ("GB", "GiB", "10^9", "2^30"), 4: ("TB", "TiB", "10^12", "2^40")}
        if feedback is None:
            parts = [f"1 {names[p][0]} = {names[p][2]} bytes but 1 {names[p][1]} = {names[p][3]} bytes"
                     for p in sorted(powers)]
            feedback = ("This looks like a decimal vs binary prefix mix-up: " + "; ".join(parts)
                        + ". Check which unit the question asks for and which divisor you used.")
        ratios = tuple(sorted({1.024 ** p for p in powers} | {1.024 ** -p for p in powers}))
        return Detector("gb_vs_gib", feedback, ratios)

    @staticmethod
    def bits_vs_bytes(feedback: str | None = None) -> Detector:
        """Bits vs bytes: ratio 8 or 1/8."""
        return Detector("bits_vs_bytes", feedback or (
            "This looks like a bits vs bytes mix-up: 1 byte = 8 bits. Check whether a value you used "
            "was given in bits (e.g. '4-bit' weights, Gbit/s links) or in bytes."), (8.0, 1 / 8))

    @staticmethod
    def ms_vs_s(feedback: str | None = None) -> Detector:
        """Milliseconds vs seconds: ratio 1000 or 1/1000."""
        return Detector("ms_vs_s", feedback or (
            "This looks like a milliseconds vs seconds mix-up (1 s = 1000 ms). Check the unit the "
            "question asks for."), (1000.0, 1e-3))

    @staticmethod
    def forgot_kv(feedback: str | None = None) -> Detector:
        """Counted only K or only V: ratio 1/2."""
        return Detector("forgot_kv", feedback or (
            "This is about half of the answer: the KV cache stores both a key AND a value vector "
            "per token, layer and KV head. Did you count only one of them?"), (0.5,))

    @staticmethod
    def query_heads(ratio: float, feedback: str | None = None) -> Detector:
        """Used the number of query heads instead of KV heads: ratio ``heads / kv_heads``."""
        from course_lib.core.validation import require_positive

        ratio = require_positive("query_heads ratio", ratio)
        return Detector("query_heads", feedback or (
            "Did you use the number of query (attention) heads instead of the number of key/value "
            "heads? With grouped-query attention only the KV heads are cached and read."), (ratio,))

    @staticmethod
    def forgot_batch(batch: int, feedback: str | None = None) -> Detector:
        """Computed for one sequence instead of the whole batch: ratio 1/batch."""
        from course_lib.core.validation import require_count

        batch = require_count("forgot_batch batch", batch, minimum=2)
        return Detector("forgot_batch", feedback or (
            "This looks like the value for a single sequence: did you forget to multiply by the "
            "batch size?"), (1 / batch,))

    @staticmethod
    def decode_steps(value, feedback: str | None = None) -> Detector:
        """n vs n-1 decode steps: ``value`` is the answer with the other step count."""
        return Detector("decode_steps", feedback or (
            "Count the decode steps again: the first new token comes out of prefill, so n new tokens "
            "need n - 1 decode steps after it."), value=value)

    @staticmethod
    def compute_instead_of_memory(value, feedback: str | None = None) -> Detector:
        """Decode time from FLOPs / peak compute instead of bytes / bandwidth: ``value`` is that answer."""
        return Detector("compute_instead_of_memory", feedback or (
            "That is the compute-bound time (FLOPs / peak FLOP/s). At small batch, decoding is limited "
            "by memory: every step reads all the weights, so use bytes moved / memory bandwidth."),
            value=value)

    @staticmethod
    def ratio(ratio: float, feedback: str, name: str = "custom_ratio") -> Detector:
        """Any other wrong-by-a-factor answer."""
        return Detector(name, feedback, (float(ratio),))

    @staticmethod
    def alternative(value, feedback: str, name: str = "alternative") -> Detector:
        """Any other fixed wrong answer."""
        return Detector(name, feedback, value=value)


detectors = _Detectors()


def numbers_only(question, reason: str = "this question wants a number, not text"):
    """Refuse text where a question asks for a number (a numeric answer or a function's result): the
    bare number "13.04" typed in quotes, or ``str(x)`` returned, is a mistake there, not an answer.
    Returns ``question`` (used as ``q2 = numbers_only(NumericQuestion(...))``)."""
    from course_lib.checks.answers import Unreadable

    read = question._read_number

    def _read_number(x, what: str = "your answer"):
        if isinstance(x, str):
            raise Unreadable(f"{what} is text ({x[:40]!r}): {reason}")
        return read(x, what=what)

    question._read_number = _read_number
    return question


def exact_mistakes_first(question, *mistakes: "Mistake"):
    """Recognise ``mistakes`` before the tolerance is applied: each is an exact figure a learner reaches by
    leaving a small term out (the matrix without its vectors), which lies inside the question's tolerance.
    Each is matched within its own ``rel_tol`` (default 1e-6) and joins the question's bank, so the bank's
    tests cover it.  Numeric questions only; returns ``question``."""
    if question.kind != "numeric":
        raise ValueError(f"{question._where}: exact_mistakes_first applies to numeric questions")
    from course_lib.checks.display import INCORRECT

    prepared = []
    for m in mistakes:
        base = question._read_definition(m.value, "mistake value")
        if question._close(base, question._expected_base, m.rel_tol or 1e-6):
            raise question._definition_error(f"mistake {m.value!r} is the expected answer")
        prepared.append((base, m))
    check = question._check

    def _check(answer):
        value, dim = question._read_number(answer)
        if dim is None or dim == question.dimension:
            for base, m in prepared:
                if question._close(value, base, m.rel_tol or 1e-6):
                    return INCORRECT, m.feedback
        return check(answer)

    question._check = _check
    question._bank[:0] = [m for _, m in prepared]
    return question
