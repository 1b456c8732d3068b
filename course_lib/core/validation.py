"""Argument checks shared by the whole library.

Every public function validates its inputs here, so that bad input produces one clear
``ValueError``/``TypeError`` that names the argument and says what was expected, instead of a
traceback from deep inside or a silently wrong number.
"""
from __future__ import annotations

import difflib
import math
import numbers
from typing import Iterable

__all__ = [
    "require_count",
    "require_counts",
    "require_positive",
    "require_nonnegative",
    "require_fraction",
    "require_choice",
    "suggest",
]


def _as_real(name: str, value) -> float:
    """Return ``value`` as a float, or raise a TypeError naming ``name``."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    # numpy / torch scalars and 0-d arrays/tensors
    if hasattr(value, "item") and not isinstance(value, numbers.Number):
        shape = getattr(value, "shape", ())
        if tuple(shape) not in ((),):
            raise TypeError(f"{name} must be a single number, got an array of shape {tuple(shape)}")
        value = value.item()
    if not isinstance(value, numbers.Real):
        try:  # sympy numbers
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}") from None
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return value


def require_count(name: str, value, *, minimum: int = 0) -> int:
    """A whole number of things (tokens, layers, parameters, batch) that is >= ``minimum``."""
    v = _as_real(name, value)
    if v != int(v):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {int(v)}")
    return int(v)


def require_counts(name: str, values, *, single: bool = False) -> list[int]:
    """A non-empty list of token counts (each >= 1); with ``single=True`` a bare count is one item."""
    if single and isinstance(values, numbers.Integral) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of token counts, got {values!r}")
    out = [require_count(name, v, minimum=1) for v in values]
    if not out:
        raise ValueError(f"{name} must name at least one token count")
    return out


def require_positive(name: str, value) -> float:
    """A strictly positive finite real (bandwidth, FLOP/s, bytes per element)."""
    v = _as_real(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {v:g}")
    return v


def require_nonnegative(name: str, value) -> float:
    v = _as_real(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v:g}")
    return v


def require_fraction(name: str, value, *, allow_zero: bool = False) -> float:
    """A fraction in (0, 1] (or [0, 1] with ``allow_zero``), e.g. an efficiency or a hit rate."""
    v = _as_real(name, value)
    lo_ok = v >= 0 if allow_zero else v > 0
    if not (lo_ok and v <= 1):
        rng = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{name} must be a fraction in {rng}, got {v:g}")
    return v


def suggest(value: str, options: Iterable[str]) -> str:
    """' Did you mean ...?' with close matches, or ''."""
    close = difflib.get_close_matches(str(value).lower(), [str(o) for o in options], n=3, cutoff=0.5)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def require_choice(name: str, value, options: Iterable[str]) -> str:
    """A name from a fixed set (case-insensitive); unknown names get close-match suggestions."""
    opts = list(options)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {', '.join(map(repr, opts))}; got {type(value).__name__}")
    key = value.strip().lower()
    if key not in opts:
        raise ValueError(
            f"unknown {name} {value!r}.{suggest(key, opts)} Known: {', '.join(sorted(opts))}"
        )
    return key
