"""Reading a learner's answer as a number, with a reason in the learner's words when it can't be.

Used by the numeric and function questions of every exercise set (``ex01`` ... ``ex09``, lessons
01-09, and ``_demo``).  An answer may be an int, float, ``fractions.Fraction``, ``decimal.Decimal``,
a numpy or torch scalar (0-d; torch is never imported here, the tensor's own methods are used), a
sympy number, a ``course_lib.core.units.Quantity`` or, where the question allows strings, text such
as ``"14 GB"`` (read by :func:`course_lib.core.units.parse_quantity`).

Text is read by one rule (:func:`split_number`, documented in docs/CHECKS_API.md, "Reading
answers"): a number is digits with an optional ``.`` fraction and ``e`` exponent; thousands may be
grouped in threes by ``,``, ``_`` or a space ("1,234,567", "1 234 567", "1_234_567" all read
1234567); anything else next to a digit ("1,5", "0,500", "1.234,5") is refused as ambiguous.  A bare
number is in the question's unit; only a unit written after it changes that.  How much text and
how large a number the checker reads at all is stated once, in :data:`LIMITS`.

The conversion of a real number to a finite float is the core's one reader,
:func:`course_lib.core.validation.as_real`; this module adds what a learner needs on top of it:
"not attempted" for the placeholder, and for everything that is not a number a sentence saying
what could not be read (a tensor of shape (3,), a list, a complex number, NaN ...).

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import decimal
import math
import numbers
import re
from dataclasses import dataclass

from course_lib.checks.placeholder import contains_placeholder, is_placeholder
from course_lib.core.validation import as_real

__all__ = [
    "DIMENSIONS",
    "LIMITS",
    "Limits",
    "NotAttempted",
    "Unreadable",
    "noun",
    "norm_dimension",
    "parse_quantity",
    "read_number",
    "read_real",
    "sentence",
    "short",
    "split_number",
    "ANSWER_MIME",
    "Opaque",
    "to_plain",
    "from_plain",
    "export_answer",
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

# Names that course_lib.core.units (or a learner) might use for the same dimension.
_DIMENSION_ALIASES = {
    "bytes": "bytes", "byte": "bytes", "memory": "bytes", "size": "bytes", "b": "bytes",
    "time": "time", "seconds": "time", "second": "time", "s": "time", "duration": "time",
    "bandwidth": "bandwidth", "bytes/s": "bandwidth", "bytes_per_second": "bandwidth", "b/s": "bandwidth",
    "params": "params", "parameters": "params", "param": "params", "count": "params",
    "flops": "flops", "flop": "flops", "compute": "flops",
    "flop_rate": "flop_rate", "flop/s": "flop_rate", "flops/s": "flop_rate", "flops_per_second": "flop_rate",
    "dimensionless": None, "number": None, "none": None, "": None, "1": None,
}



@dataclass(frozen=True)
class Limits:
    """How much the checker reads of an answer typed as text (or given as a sympy object); beyond
    any of these the answer is refused with a message saying so, before anything costly is computed."""

    #: characters of a number typed as text, with or without its unit ("14,483,464,192 B")
    max_number_text: int = 80
    #: characters of a formula typed as text ("2*L*H*d*b")
    max_formula_text: int = 300
    #: characters of a sympy expression given as an object, once printed
    max_formula_printed: int = 2000
    #: numbers, names, operators and calls in one formula
    max_nodes: int = 150
    #: nesting of brackets, signs, powers and calls in one formula
    max_depth: int = 30
    #: digits (and point) of one numeral in a formula
    max_digits: int = 40
    #: every number in a formula, as typed or as a power of numbers, is 0 or within 10**-30 .. 10**30
    max_log10: int = 30
    #: polynomial degree of a formula, counted generously (a*b and a/b: degrees added; a**n: n times)
    max_degree: int = 16
    #: terms of the formula once fully multiplied out (an upper estimate)
    max_terms: int = 1000


#: The one statement of the reading limits (see :class:`Limits`).
LIMITS = Limits()

# A number as typed: sign, digits (optionally grouped in threes by one separator), fraction, exponent.
_SEPARATORS = ",_ \u00a0\u2009\u202f"
_NUMBER_RE = re.compile(
    rf"""(?P<sign>[+\-\u2212]?)[ ]*
    (?P<int>\d{{1,3}}(?P<sep>[{_SEPARATORS}])\d{{3}}(?:(?P=sep)\d{{3}})*(?!\d) | \d+ | (?=\.\d))
    (?P<frac>\.\d*)?
    (?P<exp>[eE][+\-]?\d+)?""",
    re.VERBOSE | re.ASCII,
)
_CALCULATION_RE = re.compile(r"[\d\s.,_*/+\-()^x×eE]+")
_PER_TOKEN_RE = re.compile(r"\s*(?:/|\bper\s+)\s*(?:output\s+)?(?:token|tok|step)s?\s*$", re.IGNORECASE)
_AMBIGUOUS_RE = re.compile(rf"^[{_SEPARATORS}.]\d", re.ASCII)


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
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        return f"<an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits>"  # repr would refuse
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
        return as_real(what, x)
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
    if isinstance(x, Opaque):  # exported from a kernel as its type only
        return _read_opaque(x, what)
    if isinstance(x, PrintedExpression):  # a sympy object, printed by the kernel: read back bounded
        return read_real(_printed_as_sympy(x), what)
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
    is recognised as such.  Raises ValueError/TypeError with course_lib.core.units' message."""
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


def split_number(text: str, what: str = "your answer") -> tuple[str, str] | None:
    """(the number at the start of ``text`` written plainly, the rest of the text stripped), e.g.
    ``"14,483,464,192 B"`` -> ``("14483464192", "B")``; None when ``text`` does not start with a number.

    Thousands are grouped in threes by one of ``,`` ``_`` or a space (also thin and no-break spaces):
    "1,234,567", "1 234 567" and "1_234_567" are 1234567.  A separator or a second point followed by
    a digit that does not form such groups ("1,5", "1,2345", "0,500", "1.234,5", "1_0") is refused
    (Unreadable) as ambiguous: is it a decimal comma?"""
    m = _NUMBER_RE.match(text)
    if m is None or not (m.group("int") or m.group("frac")):
        return None
    rest = text[m.end():]
    integer = m.group("int") or "0"
    grouped = m.group("sep") is not None
    if _AMBIGUOUS_RE.match(rest) or (grouped and integer.startswith("0")):
        raise Unreadable(f"can't tell what {what} ({short(text)}) means: write the decimal point as '.', "
                         "and group thousands in threes (1,234,567 or 1 234 567 or 1_234_567)")
    if grouped:
        integer = integer.replace(m.group("sep"), "")
    sign = "-" if m.group("sign") in ("-", "\u2212") else ""
    return sign + integer + (m.group("frac") or "") + (m.group("exp") or ""), rest.strip()


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
    if isinstance(x, str) and not isinstance(x, PrintedExpression):
        return _read_text(x, scale=scale, dimension=dimension, accept_strings=accept_strings, what=what)
    if hasattr(x, "value") and hasattr(x, "dimension") and type(x).__module__.startswith("course_lib"):
        value = read_real(getattr(x, "value"), what)
        dim = norm_dimension(getattr(x, "dimension"))
        return (_scaled(value, scale, what), None) if dim is None else (value, dim)
    return _scaled(read_real(x, what), scale, what), None


def _read_text(x: str, *, scale: float, dimension: str | None, accept_strings: bool,
               what: str) -> tuple[float, str | None]:
    """:func:`read_number` for text: a bare number (grouped or not) in the question's unit, or,
    with ``accept_strings``, a number with its unit read by :func:`parse_quantity`."""
    s = x.strip()
    if not s:
        raise Unreadable(f"{what} is an empty string; give a number")
    if len(s) > LIMITS.max_number_text:
        raise Unreadable(f"{what} is {len(s)} characters of text; a number (with its unit) is at most "
                         f"{LIMITS.max_number_text}")
    if s.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        raise Unreadable(f"{what} ({short(x)}) is not a finite number")
    bare = s.strip("'\"` ")
    if _CALCULATION_RE.fullmatch(bare) and re.search(r"\d\s*[*/+^x×-]\s*[\d(]", bare):
        raise Unreadable(f"{what} is text holding a calculation ({short(x)}); remove the quotes so that Python "
                         "computes it, and give the number")
    split = split_number(s, what)
    if split is not None and not split[1]:
        value = float(split[0])
        if math.isinf(value):
            raise Unreadable(f"{what} ({short(x)}) is too large to be a sensible answer")
        return _scaled(read_real(value, what), scale, what), None
    if not accept_strings:
        raise Unreadable(f"{what} is text ({short(x)}); this question wants a plain number (no units, no quotes)")
    text = s if split is None else f"{split[0]} {split[1]}"
    if dimension == "time":  # "4.405 ms/token", "4.4 ms per token": a time per token is a time per step
        text = _PER_TOKEN_RE.sub("", text)
    try:
        value, dim = parse_quantity(text, dimension)
    except Exception as exc:
        raise Unreadable(f"can't read {what} ({short(x)}): {_first_sentence(exc)}") from None
    if not math.isfinite(value):
        raise Unreadable(f"{what} ({short(x)}) is not a finite number")
    return (_scaled(value, scale, what), None) if dim is None else (value, dim)


def _scaled(value: float, scale: float, what: str) -> float:
    """``value`` (in the question's unit) in base units; refused when that is beyond a float."""
    out = value * scale
    if not math.isfinite(out):
        raise Unreadable(f"{what} is too large to be a sensible answer")
    return out


# ---- answers as plain data (the grader judges them in its own process) ------------------------------

#: MIME type of an answer exported from a kernel when grading (:func:`export_answer`).
ANSWER_MIME = "application/vnd.course.answer+json"
#: Characters of text, and of a function's source, that leave a kernel; longer is cut (and then unreadable).
MAX_PLAIN_TEXT = 20000
#: Bits of an int sent as its digits; a larger int is sent as "huge" (read as too large).
MAX_PLAIN_INT_BITS = 4000
_MAX_PLAIN_ITEMS = 200
_MAX_PLAIN_DEPTH = 6


@dataclass(frozen=True)
class Opaque:
    """An answer that left the kernel only as its type and a short repr (an array of shape (3,), an
    object): the grader reads it as what it was, a thing that is not a number, formula or option."""

    type_name: str
    text: str
    shape: tuple = ()

    def __repr__(self) -> str:
        return self.text


def _cut(text: str) -> str:
    return text if len(text) <= MAX_PLAIN_TEXT else text[:MAX_PLAIN_TEXT] + "…[cut]"


def to_plain(x, depth: int = 0) -> dict:
    """``x`` as JSON-ready plain data that :func:`from_plain` reads back in another process: numbers
    (ints as digits), text, Fractions, Decimals, numpy/torch scalars (their ``.item()``), sympy objects
    (printed), ``Quantity`` (value and dimension), lists, dicts and the placeholder; anything else as its
    type name and a short repr.  Runs in the learner's kernel, so it computes nothing costly."""
    if is_placeholder(x):
        return {"placeholder": True}
    if x is None:
        return {"none": True}
    if isinstance(x, bool):
        return {"bool": x}
    if isinstance(x, numbers.Integral) and type(x).__module__ == "builtins":
        v = int(x)
        if v.bit_length() > MAX_PLAIN_INT_BITS:
            return {"huge": -1 if v < 0 else 1}
        return {"int": str(v)}
    if isinstance(x, float):
        return {"float": repr(float(x))}
    if isinstance(x, str):
        return {"str": _cut(x)}
    if isinstance(x, bytes):
        return {"bytes": _cut(x[:MAX_PLAIN_TEXT].decode("latin-1"))}
    if isinstance(x, complex):
        return {"complex": [repr(x.real), repr(x.imag)]}
    module = type(x).__module__ or ""
    try:
        import fractions

        if isinstance(x, fractions.Fraction):
            return {"fraction": [to_plain(x.numerator), to_plain(x.denominator)]}
        if isinstance(x, decimal.Decimal):
            return {"decimal": _cut(str(x))}
        if module.startswith(("numpy", "torch")) and not isinstance(x, (str, bytes)):
            shape = _shape(x)
            if shape == () and hasattr(x, "item"):
                item = x.item()
                if type(item).__module__ == "builtins":
                    return to_plain(item, depth + 1)
            return {"opaque": [type(x).__name__, short(x, 60), list(shape)]}
        if module.startswith("sympy"):
            import sympy

            if isinstance(x, sympy.Integer):
                return to_plain(int(x), depth + 1)
            if isinstance(x, sympy.Rational):
                return {"fraction": [to_plain(int(x.p)), to_plain(int(x.q))]}
            if isinstance(x, sympy.Float):
                return {"float": repr(float(x))}
            if isinstance(x, sympy.Expr):
                return {"sympy": _cut(sympy.sstr(x)), "symbols": sorted(str(s) for s in x.free_symbols)[:50]}
            return {"opaque": [type(x).__name__, short(x, 60), []]}
        if hasattr(x, "value") and hasattr(x, "dimension") and module.startswith("course_lib"):
            return {"quantity": [to_plain(x.value, depth + 1), str(x.dimension)]}
        if depth < _MAX_PLAIN_DEPTH:
            if isinstance(x, (list, tuple)):
                return {type(x).__name__: [to_plain(v, depth + 1) for v in list(x)[:_MAX_PLAIN_ITEMS]]}
            if isinstance(x, dict):
                items = list(x.items())[:_MAX_PLAIN_ITEMS]
                return {"dict": [[to_plain(k, depth + 1), to_plain(v, depth + 1)] for k, v in items]}
            as_dict = getattr(x, "as_dict", None)
            if callable(as_dict) and not isinstance(x, type):
                d = as_dict()
                if isinstance(d, dict):
                    return {"record": [type(x).__name__, to_plain(d, depth + 1)]}
        if isinstance(x, numbers.Integral):
            return to_plain(int(x), depth + 1)
        if isinstance(x, numbers.Real):
            return {"float": repr(float(x))}
    except Exception:  # a learner's object whose methods raise: it leaves as what it is
        pass
    if callable(x):
        return {"opaque": ["function", short(x, 60), []]}
    try:
        text = short(x, 60)
    except Exception:
        text = f"<{type(x).__name__}>"
    return {"opaque": [type(x).__name__, text, []]}


def from_plain(data):
    """The value :func:`to_plain` described, rebuilt in the grader (no code of the learner's is run:
    text stays text, a sympy expression comes back as a :class:`PrintedExpression` that the bounded
    parser reads, an unknown object as an :class:`Opaque`)."""
    if not isinstance(data, dict) or len(data) != 1 and not ("sympy" in data and len(data) == 2):
        raise ValueError(f"not an exported answer: {short(data)}")
    if "sympy" in data:
        return PrintedExpression(str(data["sympy"]))
    (kind, v), = data.items()
    if kind == "placeholder":
        from course_lib.checks.placeholder import PLACEHOLDER

        return PLACEHOLDER
    if kind == "none":
        return None
    if kind == "bool":
        return bool(v)
    if kind == "int":
        text = str(v)
        if not re.fullmatch(r"-?\d{1,1300}", text):
            raise ValueError("an exported int must be at most 1300 digits")
        return int(text)
    if kind == "huge":
        return (-1 if v == -1 else 1) * 10 ** 400
    if kind == "float":
        return float(str(v))
    if kind == "str":
        return str(v)
    if kind == "bytes":
        return str(v).encode("latin-1", "replace")
    if kind == "complex":
        return complex(float(v[0]), float(v[1]))
    if kind == "fraction":
        import fractions

        num, den = from_plain(v[0]), from_plain(v[1])
        if not (isinstance(num, int) and isinstance(den, int)) or den == 0 or max(abs(num), den) > 10 ** 400:
            raise ValueError("a bad exported fraction")
        return fractions.Fraction(num, den)
    if kind == "decimal":
        text = str(v)
        if len(text) > 100:
            return Opaque("Decimal", short(text))
        return decimal.Decimal(text)
    if kind == "quantity":
        from course_lib.core.units import Quantity

        try:
            return Quantity(from_plain(v[0]), str(v[1]))
        except Exception:
            return Opaque("Quantity", f"Quantity({short(v[0])}, {short(v[1])})")
    if kind in ("list", "tuple"):
        items = [from_plain(e) for e in list(v)[:_MAX_PLAIN_ITEMS]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        out = {}
        for k, val in list(v)[:_MAX_PLAIN_ITEMS]:
            key = from_plain(k)
            try:
                hash(key)
            except TypeError:
                key = repr(key)
            out[key] = from_plain(val)
        return out
    if kind == "record":
        return from_plain(v[1])
    if kind == "opaque":
        name, text, shape = (list(v) + ["", "", []])[:3]
        return Opaque(str(name), str(text), tuple(int(s) for s in shape if isinstance(s, int))[:8])
    raise ValueError(f"unknown exported kind {kind!r}")


class PrintedExpression(str):
    """A sympy expression as the learner's kernel printed it: text, read back by the bounded parser with
    the limits of a printed expression (not those of text the learner typed)."""


def export_answer(set_name: str, question: str, get, measurement=None, row_keyword: str = "row") -> dict:
    """Display the answer ``get()`` as plain data (:data:`ANSWER_MIME`) for the grader, which injects the
    call into each grade cell.  A function is sent as its source (the grader runs it in a fresh
    interpreter), anything else by :func:`to_plain`; an error in ``get`` (a name that is not defined) is
    sent as such.  ``measurement``: a function returning the row the check was given (sent as data)."""
    record = {"set": str(set_name), "question": str(question)}
    try:
        value = get()
    except BaseException as exc:  # noqa: BLE001 - anything: the grader reports it
        record["error"] = f"{type(exc).__name__}: {_first_sentence(exc)}"
    else:
        record["answer"] = _function_plain(value) or to_plain(value)
    if measurement is not None:
        record["row_keyword"] = str(row_keyword)
        try:
            record["measurement"] = to_plain(measurement())
        except BaseException as exc:  # noqa: BLE001
            record["measurement_error"] = f"{type(exc).__name__}: {_first_sentence(exc)}"
    try:
        from IPython.display import display

        display({ANSWER_MIME: record, "text/plain": f"(answer of {set_name}.{question} recorded for grading)"},
                raw=True)
    except Exception:
        pass
    return record


def _function_plain(value) -> dict | None:
    """A learner's function as its source text (None for anything that is not a plain function)."""
    import inspect
    import textwrap
    import types

    if not isinstance(value, types.FunctionType):
        return None
    try:
        source = textwrap.dedent(inspect.getsource(value))
    except (OSError, TypeError):
        source = None
    name = getattr(value, "__name__", "f")
    return {"function": [str(name), _cut(source) if source is not None else None]}


def _read_opaque(x: Opaque, what: str) -> float:
    if x.type_name == "function":
        raise Unreadable(f"{what} is a function; call it and give the number it returns")
    if x.shape:
        noun = "a tensor" if x.type_name == "Tensor" else "an array"
        size = math.prod(x.shape)
        tip = " (use .item() to take the single value out)" if size == 1 else ""
        raise Unreadable(f"{what} is {noun} of shape {x.shape}; give a single number{tip}")
    raise Unreadable(f"can't read {what} (a {x.type_name}) as a number")


def _printed_as_sympy(text: str):
    """A printed sympy expression back as sympy, by the bounded parser (its names become symbols)."""
    import sympy

    from course_lib.checks.evaluator import ALLOWED_FUNCTIONS, CONSTANTS, parse_formula

    names = sorted(set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) - set(ALLOWED_FUNCTIONS) - set(CONSTANTS))
    symbols = [sympy.Symbol(n) for n in names if "__" not in n][:50]
    return parse_formula(str(text), symbols, max_length=LIMITS.max_formula_printed)
