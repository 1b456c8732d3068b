"""Reading a learner's answer as a number, with a reason in the learner's words when it can't be.

Used by the numeric and function questions of every exercise set (``ex01`` ... ``ex09``, lessons
01-09, and ``_demo``).  An answer may be an int, float, ``fractions.Fraction``, ``decimal.Decimal``,
a numpy or torch scalar (0-d; torch is never imported here, the tensor's own methods are used), a
sympy number, a ``course_lib.core.units.Quantity`` or, where the question allows strings, text such
as ``"14 GB"`` (read by :func:`course_lib.core.units.parse_quantity`).

The conversion of a real number to a finite float is the core's one reader,
:func:`course_lib.core.validation._as_real`; this module adds what a learner needs on top of it:
"not attempted" for the placeholder, and for everything that is not a number a sentence saying
what could not be read (a tensor of shape (3,), a list, a complex number, NaN ...).

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import decimal
import math
import numbers
import re

from course_lib.checks.placeholder import contains_placeholder, is_placeholder
from course_lib.core.validation import _as_real

__all__ = [
    "DIMENSIONS",
    "NotAttempted",
    "Unreadable",
    "noun",
    "norm_dimension",
    "parse_quantity",
    "read_number",
    "read_real",
    "sentence",
    "short",
]

DIMENSIONS = ("bytes", "time", "bandwidth", "params", "flops", "flop_rate")

_NOUNS = {
    "bytes": "an amount of memory (bytes)",
    "time": "a time (seconds)",
    "bandwidth": "a bandwidth (bytes per second)",
    "params": "a parameter count",
    "flops": "an amount of compute (FLOP)",
    "flop_rate": "a compute rate (FLOP per second)",
    None: "a plain number without units",
}

# Names that course_lib.units (or a learner) might use for the same dimension.
_DIMENSION_ALIASES = {
    "bytes": "bytes", "byte": "bytes", "memory": "bytes", "size": "bytes", "b": "bytes",
    "time": "time", "seconds": "time", "second": "time", "s": "time", "duration": "time",
    "bandwidth": "bandwidth", "bytes/s": "bandwidth", "bytes_per_second": "bandwidth", "b/s": "bandwidth",
    "params": "params", "parameters": "params", "param": "params", "count": "params",
    "flops": "flops", "flop": "flops", "compute": "flops",
    "flop_rate": "flop_rate", "flop/s": "flop_rate", "flops/s": "flop_rate", "flops_per_second": "flop_rate",
    "dimensionless": None, "number": None, "none": None, "": None, "1": None,
}

_FLOAT_RE = re.compile(r"^[+-]?(\d[\d_]*\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class NotAttempted(Exception):
    """The answer (or part of it) is still the placeholder."""


class Unreadable(Exception):
    """The answer cannot be read as what the question asks for; the message is for the learner."""


def noun(dimension) -> str:
    """How feedback names a dimension: 'a time (seconds)'; an unknown one verbatim."""
    return _NOUNS.get(dimension, dimension)


def norm_dimension(dim) -> str | None:
    """One of :data:`DIMENSIONS` (or None for a plain number) for the names units and learners use."""
    if dim is None:
        return None
    key = str(getattr(dim, "value", dim)).strip().lower()
    if key in _DIMENSION_ALIASES:
        return _DIMENSION_ALIASES[key]
    return key  # unknown dimension: kept verbatim so that a mismatch is still reported


def short(value, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (for quoting an answer in feedback)."""
    try:
        text = repr(value)
    except Exception:  # a learner object with a broken __repr__
        text = f"<{type(value).__name__} object>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sentence(text: str) -> str:
    """Capitalised, ending in one full stop (or ? / !)."""
    text = text.strip()
    if not text:
        return text
    text = text[:1].upper() + text[1:]
    return text if text[-1] in ".?!…" else text + "."


def _first_sentence(message: str, limit: int = 160) -> str:
    message = " ".join(str(message).split())
    m = re.search(r"(?<!e\.g)(?<!i\.e)\. ", message)
    if m and 0 < m.start() < limit:
        return message[: m.start()]
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _shape(x) -> tuple:
    try:
        return tuple(int(s) for s in x.shape)
    except Exception:
        return ()


def _single_item(x, what: str, noun: str, size: int):
    """The one value of a 0-d numpy array or torch tensor (``.item()``); a reason for any other shape."""
    shape = _shape(x)
    if shape != ():
        tip = " (use .item() to take the single value out)" if size == 1 else ""
        raise Unreadable(f"{what} is {noun} of shape {shape}; give a single number{tip}")
    try:
        return x.item()
    except Exception:
        raise Unreadable(f"can't read {what} ({type(x).__name__}) as a number") from None


def _finite(x, what: str) -> float:
    """A real number (int, float, Fraction, ...) as a finite float, through the core's reader."""
    try:
        return _as_real(what, x)
    except (TypeError, ValueError, OverflowError):
        pass
    # Refused: say why in the learner's words.
    try:
        v = float(x)
    except (OverflowError, ValueError, TypeError):
        raise Unreadable(f"{what} is too large to be a sensible answer") from None
    if math.isnan(v):
        raise Unreadable(f"{what} is NaN (not a number); check for 0/0 or a missing value")
    if math.isinf(v):
        raise Unreadable(f"{what} is infinite; check for a division by zero")
    raise Unreadable(f"can't read {what} ({short(x)}) as a number")


def read_real(x, what: str = "your answer") -> float:
    """A finite float from a number-like object (no strings), or raise Unreadable/NotAttempted."""
    if is_placeholder(x):
        raise NotAttempted
    if x is None:
        raise Unreadable(f"{what} is None: did you forget to assign (or return) a value?")
    if isinstance(x, bool):
        raise Unreadable(f"{what} is {x}, a boolean; give a number")
    module = type(x).__module__ or ""
    if module.startswith("torch"):
        try:
            numel = int(x.numel())
        except Exception:
            raise Unreadable(f"can't read {what} ({type(x).__name__}) as a number") from None
        return read_real(_single_item(x, what, "a tensor", numel), what)
    if module.startswith("numpy") and not isinstance(x, (str, bytes)):
        item = _single_item(x, what, "an array", math.prod(_shape(x)))
        if type(item).__module__.startswith("numpy") or item is x:
            raise Unreadable(f"can't read {what} ({type(x).__name__}) as a number")
        return read_real(item, what)
    if module.startswith("sympy"):
        try:
            free = getattr(x, "free_symbols", set())
        except Exception:
            free = set()
        if free:
            names = ", ".join(sorted(str(s) for s in free))
            raise Unreadable(f"{what} still contains the symbol(s) {names}; give a number")
        try:
            c = complex(x)
        except Exception:
            raise Unreadable(f"can't read {what} ({short(x)}) as a number") from None
        x = c
    if hasattr(x, "value") and hasattr(x, "dimension") and not isinstance(x, numbers.Number):
        raise Unreadable(f"{what} is a quantity with units; this question asks for a plain number")
    if isinstance(x, decimal.Decimal):
        try:
            x = float(x)
        except Exception:
            raise Unreadable(f"can't read {what} ({short(x)}) as a number") from None
    if isinstance(x, numbers.Real):
        return _finite(x, what)
    if isinstance(x, numbers.Complex):
        try:
            c = complex(x)
        except Exception:
            raise Unreadable(f"can't read {what} ({short(x)}) as a number") from None
        if c.imag != 0 and not math.isnan(c.imag):
            raise Unreadable(f"{what} is a complex number ({short(x)}); give a real number")
        return _finite(c.real, what)
    if isinstance(x, (str, bytes)):
        raise Unreadable(f"{what} is text ({short(x)}); give a number (without quotes)")
    if isinstance(x, (list, tuple, set, frozenset, dict)):
        if contains_placeholder(x):
            raise NotAttempted
        raise Unreadable(f"{what} is a {type(x).__name__}; give a single number")
    if callable(x):
        raise Unreadable(f"{what} is a function; call it and give the number it returns")
    raise Unreadable(f"can't read {what} (a {type(x).__name__}) as a number")


def parse_quantity(text: str, dimension: str | None = None) -> tuple[float, str | None]:
    """(value in base units, normalised dimension) for a string such as '14 GB'.

    With ``dimension`` the text is first read as that dimension (so '7B' is 7 billion for a
    parameter count); if that fails it is read on its own so that a unit of another dimension
    is recognised as such.  Raises ValueError/TypeError with course_lib.units' message."""
    from course_lib.core import units

    q = None
    if dimension is not None:
        try:
            q = units.parse_quantity(text, dimension=dimension)
        except (ValueError, TypeError):
            q = None
    if q is None:
        q = units.parse_quantity(text)
    return float(q.value), norm_dimension(q.dimension)


def read_number(x, *, scale: float = 1.0, dimension: str | None = None, accept_strings: bool = False,
                what: str = "your answer") -> tuple[float, str | None]:
    """(value in base units, dimension the answer itself carried or None).

    A bare number is in the question's unit: it is multiplied by ``scale`` (base units per unit).
    Strings with units are read only with ``accept_strings``; ``dimension`` is the question's, so
    that '7B' reads as 7e9 for a parameter count."""
    if is_placeholder(x):
        raise NotAttempted
    if isinstance(x, bytes):
        raise Unreadable(f"{what} is bytes data ({short(x)}); give a number")
    if isinstance(x, str):
        s = x.strip()
        if not s:
            raise Unreadable(f"{what} is an empty string; give a number")
        if _FLOAT_RE.match(s):
            return read_real(float(s), what) * scale, None
        if s.lower() in ("nan", "inf", "-inf", "+inf", "infinity"):
            raise Unreadable(f"{what} ({short(x)}) is not a finite number")
        if not accept_strings:
            raise Unreadable(f"{what} is text ({short(x)}); this question wants a plain number (no units, no quotes)")
        if len(s) > 80:
            raise Unreadable(f"can't read {what} ({short(x)}) as a quantity; write e.g. '14 GB' or '20 ms'")
        try:
            value, dim = parse_quantity(s, dimension)
        except Exception as exc:
            raise Unreadable(f"can't read {what} ({short(x)}): {_first_sentence(exc)}") from None
        if not math.isfinite(value):
            raise Unreadable(f"{what} ({short(x)}) is not a finite number")
        return (value * scale, None) if dim is None else (value, dim)
    if hasattr(x, "value") and hasattr(x, "dimension") and type(x).__module__.startswith("course_lib"):
        value = read_real(getattr(x, "value"), what)
        dim = norm_dimension(getattr(x, "dimension"))
        return (value * scale, None) if dim is None else (value, dim)
    return read_real(x, what) * scale, None
