"""Argument checks shared by the whole library.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09

No lesson imports it directly; every lesson reaches it, as each function of the library checks its
arguments here.

Every public function validates its inputs here, so that bad input produces one clear
``ValueError``/``TypeError`` that names the argument and says what was expected, instead of a
traceback from deep inside or a silently wrong number.

The limits, stated once (every ``require_*`` enforces them unless a caller narrows them):

* counts (tokens, parameters, layers, batch, ...): whole numbers up to :data:`MAX_COUNT` = 10**15.
  Integers stay exact; above the limit the call is refused, never rounded.
* quantities in base units (bytes, bytes/s, FLOP, FLOP/s, seconds): finite, at most
  :data:`MAX_QUANTITY` = 1e30; strictly positive ones at least :data:`MIN_POSITIVE` = 1e-30.
  With these limits every product and quotient the estimator forms stays a finite float.
* fractions (efficiencies, hit rates): in (0, 1] (or [0, 1]); non-zero ones at least 1e-30.
* numbers are int, float, Fraction, Decimal, numpy/torch scalars or sympy numbers. bool, None,
  str, bytes, bytearray and arrays (also 0-d arrays holding text) are TypeErrors, never parsed.
* switches (``dense``, ``rotate``, ``settled``, a model's ``qkv_bias`` ...) are True or False
  (:func:`require_flag`): a number, text or None is a TypeError, never read as true; a callback is a function
  or None (:func:`require_callable`).
"""
from __future__ import annotations

import contextlib
import difflib
import math
import numbers
from typing import Iterable

__all__ = [
    "MAX_COUNT",
    "MAX_QUANTITY",
    "MIN_POSITIVE",
    "require_count",
    "require_counts",
    "require_list",
    "require_positive",
    "require_nonnegative",
    "require_real",
    "as_real",
    "require_fraction",
    "require_choice",
    "require_flag",
    "require_callable",
    "in_argument",
    "suggest",
]


#: The limits every check enforces, in one place (see the module docstring).
MAX_COUNT = 10**15
MAX_QUANTITY = 1e30
MIN_POSITIVE = 1e-30

_STRINGLIKE = (str, bytes, bytearray, memoryview)


def _limit(v) -> str:
    """A limit as people write it: ``10**15`` as ``1e15``, small ints as they are."""
    if isinstance(v, int) and abs(v) < 10**6:
        return str(v)
    return f"{v:.0e}".replace("e+", "e").replace("e0", "e").replace("e-0", "e-")


def _show(value) -> str:
    """``repr(value)``, shortened (a 400-digit integer is shown by its size, not digit by digit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {'-' if value < 0 else ''}10**{int(value.bit_length() * 0.30103)}"
    try:
        r = repr(value)
    except Exception:  # a repr that fails must not hide the real message
        r = f"<{type(value).__name__}>"
    return r if len(r) <= 60 else r[:57] + "..."


def _not_a_number(name: str, value, what: str = "a number") -> TypeError:
    return TypeError(f"{name} must be {what}, got {type(value).__name__} {_show(value)}")


def _unwrap(name: str, value):
    """numpy / torch scalars and 0-d arrays as Python numbers; arrays of text, or of more than one value, refused."""
    if isinstance(value, bool) or value is None or isinstance(value, _STRINGLIKE):
        raise _not_a_number(name, value)
    if hasattr(value, "item") and not isinstance(value, numbers.Number):
        kind = getattr(getattr(value, "dtype", None), "kind", None)
        if kind is not None and kind in "USOVb":  # text, bytes, objects, records, booleans
            raise TypeError(f"{name} must be a number, got an array of {getattr(value, 'dtype', kind)}")
        shape = getattr(value, "shape", ())
        if tuple(shape) != ():
            raise TypeError(f"{name} must be a single number, got an array of shape {tuple(shape)}")
        value = value.item()
        if isinstance(value, bool) or value is None or isinstance(value, _STRINGLIKE):
            raise _not_a_number(name, value)
    return value


def as_real(name: str, value) -> float:
    """Return ``value`` as a finite float, or raise a TypeError/ValueError naming ``name``.

    Accepted: int, float, Fraction, Decimal, numpy/torch scalars and 0-d arrays, sympy numbers.
    Refused (TypeError): bool, None, str, bytes, bytearray, arrays (also 0-d ones holding text),
    complex numbers and anything else. Refused (ValueError): nan, inf, and numbers beyond a float.
    """
    value = _unwrap(name, value)
    if not isinstance(value, numbers.Real) and not hasattr(type(value), "__float__"):
        raise _not_a_number(name, value, "a real number")
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number no larger than {_limit(MAX_QUANTITY)}, "
                         f"got {_show(value)}") from None
    except (TypeError, ValueError):  # sympy symbols, complex numbers, ...
        raise _not_a_number(name, value, "a real number") from None
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    return v


def require_count(name: str, value, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """A whole number of things (tokens, layers, parameters, batch) in ``[minimum, maximum]``.

    Integers stay exact (``2**53 + 1`` is not rounded to ``2**53``); a float is accepted when it
    holds a whole number (``7e9``). The default ``maximum`` is :data:`MAX_COUNT` (``10**15``).
    """
    value = _unwrap(name, value)
    if isinstance(value, numbers.Integral):
        v = int(value)
    else:
        f = as_real(name, value)
        if f != math.floor(f):
            raise ValueError(f"{name} must be a whole number, got {_show(value)}")
        v = int(f)
    if v < minimum:
        raise ValueError(f"{name} must be >= {_limit(minimum)}, got {_show(value)}")
    if v > maximum:
        why = " (the largest count the course computes with)" if maximum == MAX_COUNT else ""
        raise ValueError(f"{name} must be a whole number in [{_limit(minimum)}, {_limit(maximum)}]{why}, "
                         f"got {_show(value)}")
    return v


def require_list(name: str, values, what: str = "a list", *, maximum_items: int = 10**6) -> list:
    """``values`` (a list, tuple, range, generator, 1-D array ...) as a list of at most ``maximum_items`` items.

    A str, bytes, a bare number or a 0-d array is a TypeError saying ``name must be <what>``.
    """
    try:
        if isinstance(values, _STRINGLIKE) or getattr(values, "shape", None) == ():
            raise TypeError
        iterator = iter(values)
    except TypeError:
        raise TypeError(f"{name} must be {what}, got {type(values).__name__} {_show(values)}") from None
    out = []
    for v in iterator:
        out.append(v)
        if len(out) > maximum_items:
            raise ValueError(f"{name} must hold at most {_limit(maximum_items)} items")
    return out


def require_counts(name: str, values, *, single: bool = False, maximum_items: int = 10**6,
                   what: str = "token count") -> list[int]:
    """A non-empty list of counts (each >= 1: token counts, batch sizes).

    With ``single=True`` a bare count is one item.
    """
    if single and isinstance(values, numbers.Integral) and not isinstance(values, bool):
        values = [values]
    out = [require_count(name, v, minimum=1)
           for v in require_list(name, values, f"a list of {what}s", maximum_items=maximum_items)]
    if not out:
        raise ValueError(f"{name} must name at least one {what}")
    return out


def require_positive(name: str, value, *, minimum: float = MIN_POSITIVE, maximum: float = MAX_QUANTITY) -> float:
    """A strictly positive finite real (bandwidth, FLOP/s, bytes per element, seconds).

    Accepted range: ``[minimum, maximum]``, by default [:data:`MIN_POSITIVE`, :data:`MAX_QUANTITY`]
    = [1e-30, 1e30] in base units, so that products and quotients of a few of them stay finite.
    """
    v = as_real(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {v:g}")
    if not minimum <= v <= maximum:
        raise ValueError(f"{name} must be between {_limit(minimum)} and {_limit(maximum)}, got {v:g}")
    return v


def require_nonnegative(name: str, value, *, maximum: float = MAX_QUANTITY) -> float:
    """A finite real in ``[0, maximum]`` (by default :data:`MAX_QUANTITY` = 1e30 in base units)."""
    v = as_real(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v:g}")
    if v > maximum:
        raise ValueError(f"{name} must be between 0 and {_limit(maximum)}, got {v:g}")
    return v


def require_real(name: str, value, *, maximum: float = MAX_QUANTITY) -> float:
    """A finite real number of either sign (a fitted slope or intercept) with ``|value| <= maximum``."""
    v = as_real(name, value)
    if abs(v) > maximum:
        raise ValueError(f"{name} must be a number between -{_limit(maximum)} and {_limit(maximum)}, "
                         f"got {_show(value)}")
    return v


def require_fraction(name: str, value, *, allow_zero: bool = False) -> float:
    """A fraction in (0, 1] (or [0, 1] with ``allow_zero``), e.g. an efficiency or a hit rate.

    A non-zero fraction is at least :data:`MIN_POSITIVE` (1e-30): an efficiency of 5e-324 would
    make times infinite.
    """
    v = as_real(name, value)
    ok = (v == 0 and allow_zero) or MIN_POSITIVE <= v <= 1
    if not ok:
        rng = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{name} must be a fraction in {rng} (non-zero values at least "
                         f"{_limit(MIN_POSITIVE)}), got {v:g}")
    return v


def require_flag(name: str, value) -> bool:
    """A yes/no switch: True or False (numpy booleans too). Numbers, text and None are TypeErrors: ``dense=nan``
    or ``rotate="no"`` would otherwise be read as true."""
    if isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"):  # numpy.bool_
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {_show(value)}")


def require_callable(name: str, value, what: str = "a function", *, allow_none: bool = True):
    """A function to call back (a progress report, a hash), or None where ``allow_none``."""
    if (value is None and allow_none) or callable(value):
        return value
    raise TypeError(f"{name} must be {what}{' or None' if allow_none else ''}, got {type(value).__name__} "
                    f"{_show(value)}")


@contextlib.contextmanager
def in_argument(name: str):
    """Checks of the parts of argument ``name`` (a record's fields, checked by another function): their
    ValueError/TypeError is prefixed with ``name`` unless it names it already (``session: ttft_nocache must ...``)."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        if name in str(exc):
            raise
        try:
            renamed = type(exc)(f"{name}: {exc}")
        except Exception:  # an exception class with another constructor: its base kind
            renamed = (TypeError if isinstance(exc, TypeError) else ValueError)(f"{name}: {exc}")
        raise renamed from None


def suggest(value: str, options: Iterable[str]) -> str:
    """' Did you mean ...?' with close matches, or ''."""
    if not isinstance(value, str):
        raise TypeError(f"value must be a string (a name to find close matches of), got {type(value).__name__}")
    names = [str(o) for o in require_list("options", options, "a list of names")]
    close = difflib.get_close_matches(str(value)[:200].lower(), names, n=3, cutoff=0.5)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def require_choice(name: str, value, options: Iterable[str]) -> str:
    """A name from a fixed set (case-insensitive); unknown names get close-match suggestions."""
    opts = list(options)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {', '.join(map(repr, opts))}; got {type(value).__name__}")
    key = value.strip().lower()
    if key not in opts:
        raise ValueError(
            f"unknown {name} {_show(value)}.{suggest(key[:200], opts)} Known: {', '.join(sorted(opts))}"
        )
    return key
