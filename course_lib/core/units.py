"""Reading and printing quantities with units: bytes, parameter counts, bandwidth, time, FLOP, FLOP/s.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10

Inside the library every quantity is a plain float in a base unit -- bytes, bytes per second,
seconds, FLOP, FLOP per second, or a count of parameters. This module converts at the edges:
``parse_*`` reads text such as ``"14 GB"`` or ``"13.9 ms"`` into the base unit, ``format_*`` prints a
base-unit value for people.

Bytes: three conventions
------------------------
* **SI** (decimal): ``kB`` (also written ``KB``), ``MB``, ``GB``, ``TB``, ``PB`` are 1000**k bytes.
  Datasheets quote memory bandwidth and, mostly, capacities this way.
* **IEC** (binary): ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` are 1024**k bytes -- always, whatever
  the convention.
* **source** (alias ``jedec``): the course's source material, like memory-chip (JEDEC) usage and
  many tools, writes ``KB``, ``MB``, ``GB``, ``TB``, ``PB`` but means 1024**k bytes (see
  ``SOURCE_TABLE``). Only these five upper-case labels change meaning; the SI-only spelling ``kB``
  and the IEC labels keep theirs.

``parse_bytes(text, convention="si")`` reads the decimal-looking labels as SI unless
``convention="source"`` is given. A trailing lower-case ``b`` is a **bit**: ``"Gb"`` and ``"Gbit"``
are gigabits (10**9 / 8 bytes); ``"GB"`` is gigabytes. Bit units are always decimal (networking
usage); the binary bit units ``Kib``/``Kibit`` ... ``Tib``/``Tibit`` are accepted too. Unit symbols
are case-sensitive (``"gb"`` is rejected with the suggestion ``'GB'`` or ``'Gb'``); spelled-out
words (``"gigabytes"``, ``"seconds"``, ``"billion"``) are not.

FLOP versus FLOP/s
------------------
``FLOP`` and ``FLOPs`` (lower-case s, a plural) count operations; ``FLOP/s`` and ``FLOPS``
(upper-case S) are rates per second, as in "989 TFLOPS". The all-lower-case ``flops`` is
ambiguous and rejected with an explanation; write ``TFLOP`` for a count and ``TFLOP/s`` for a rate.

Printing rule (all ``format_*`` functions)
------------------------------------------
1. Pick the **largest unit in which the value is at least 1** (the smallest unit for values
   below it, the base unit for zero).
2. Round to ``digits`` **significant digits, but never round away digits before the decimal
   point**: ``14e9`` bytes -> ``"14 GB"``; in IEC with ``digits=4`` -> ``"13.04 GiB"``;
   ``1023.9`` KiB with ``digits=3`` -> ``"1024 KiB"``, which step 3 turns into ``"1 MiB"``.
   Trailing zeros are dropped (``"14 GB"``, not ``"14.0 GB"``).
3. If rounding reaches the next unit (``999.96 MB`` -> ``1000``), print in the next unit instead.

Hence ``parse(format(x))`` equals ``x`` to within half a unit in the last printed digit, a
relative error of at most ``0.5 * 10**(1 - digits)``. ``unit=`` pins the unit instead of step 1
(``format_bandwidth(1.008e12, unit="GB/s") == "1008 GB/s"``).

Answers of unknown dimension
----------------------------
``parse_quantity(text)`` returns ``Quantity(value, dimension)``, the unit deciding the dimension
(``"14 GB"`` -> bytes, ``"13.9 ms"`` -> time, ``"989 TFLOPS"`` -> flop_rate, ``"124.4M"`` or
``"7 billion"`` -> params, ``"42"`` -> number). The one clash is a lone ``B``/``b``: it is read as
bytes/bits, so ``"7B"`` is 7 bytes unless ``dimension="params"`` is passed, which reads the text
with ``parse_params`` (7 billion). Checkers that know the expected dimension should pass it.

Errors
------
Unreadable text raises one ``ValueError`` that names the argument ``text``, lists the accepted
units and suggests close matches (``"14 GBs"`` -> did you mean ``'GB'``?); negative values, NaN and
infinity are rejected; anything that is neither a string nor a real number raises ``TypeError``.
Plain numbers (int, float, numpy/torch/sympy scalars) are accepted as already in the base unit.

This module uses only the standard library and ``course_lib.core.validation``.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from course_lib.core.validation import MAX_QUANTITY, require_choice, require_count, require_nonnegative

__all__ = [
    "KB", "MB", "GB", "TB", "PB", "KiB", "MiB", "GiB", "TiB", "PiB",
    "SourceUnit", "SOURCE_TABLE", "Quantity", "DIMENSIONS", "CONVENTIONS", "SYSTEMS", "MAX_DIGITS",
    "parse_bytes", "format_bytes",
    "parse_params", "format_params",
    "parse_bandwidth", "format_bandwidth",
    "parse_time", "format_time",
    "parse_flops", "format_flops",
    "parse_flop_rate", "format_flop_rate", "convention_gap_percent",
    "parse_quantity", "format_quantity", "accepted_units",
]

# --------------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------------
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4
PB = 1000**5
KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
PiB = 1024**5

#: Dimensions a ``Quantity`` can have ("number" is a bare number without a unit).
DIMENSIONS = ("bytes", "params", "bandwidth", "time", "flops", "flop_rate", "number")
#: How to read KB/MB/GB/TB/PB when parsing ("jedec" is an alias of "source").
CONVENTIONS = ("si", "source", "jedec")
#: How to print bytes and bandwidth ("jedec" is an alias of "source").
SYSTEMS = ("si", "iec", "source", "jedec")

_PREFIXES = "KMGTP"  # kilo/kibi .. peta/pebi, in order of the power k = 1..5
_SI_NAMES = ("kilo", "mega", "giga", "tera", "peta")
_IEC_NAMES = ("kibi", "mebi", "gibi", "tebi", "pebi")


@dataclass(frozen=True)
class SourceUnit:
    """One row of the source's 1024-based byte table (``KB`` = 2**10 bytes, ...)."""

    label: str      #: as the source writes it, e.g. "GB"
    power: int      #: the unit is 1024**power bytes
    bytes: int      #: 1024**power
    iec_label: str  #: the unambiguous IEC name of the same size, e.g. "GiB"
    si_bytes: int   #: what the same label means in SI, 1000**power

    @property
    def ratio(self) -> float:
        """How much larger the 1024-based unit is than the SI one (1.024, 1.048576, ...)."""
        return self.bytes / self.si_bytes

    @property
    def percent_larger(self) -> float:
        """``(ratio - 1) * 100``: 2.4 % for KB, 7.37 % for GB, 9.95 % for TB."""
        return (self.ratio - 1) * 100


#: The source's 1024-based labels KB..TB with their IEC names and SI counterparts, for lessons to render.
SOURCE_TABLE: tuple[SourceUnit, ...] = tuple(
    SourceUnit(label=p + "B", power=k, bytes=1024**k, iec_label=p + "iB", si_bytes=1000**k)
    for k, p in enumerate("KMGT", start=1)
)


# --------------------------------------------------------------------------------------------------
# Unit tables.  A factor is a reduced Fraction: value_in_base_unit = number * factor.
# Each table is (symbols: exact, case-sensitive; words: matched after lower-casing).
# --------------------------------------------------------------------------------------------------
_F = Fraction


def _byte_tables(source: bool) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    sym: dict[str, Fraction] = {"B": _F(1)}
    words: dict[str, Fraction] = {"byte": _F(1), "bytes": _F(1)}
    for k, (p, si_name, iec_name) in enumerate(zip(_PREFIXES, _SI_NAMES, _IEC_NAMES), start=1):
        decimal = _F(1024**k if source else 1000**k)
        sym[p + "B"] = decimal
        sym[p + "iB"] = _F(1024**k)
        words[si_name + "byte"] = words[si_name + "bytes"] = decimal
        words[iec_name + "byte"] = words[iec_name + "bytes"] = _F(1024**k)
        # bits: always decimal prefixes (networking), binary ones with the 'i'
        for label in (p + "b", p + "bit", p + "bits"):
            sym[label] = _F(1000**k, 8)
        for label in (p + "ib", p + "ibit", p + "ibits"):
            sym[label] = _F(1024**k, 8)
        words[si_name + "bit"] = words[si_name + "bits"] = _F(1000**k, 8)
        words[iec_name + "bit"] = words[iec_name + "bits"] = _F(1024**k, 8)
    sym["kB"] = _F(1000)  # SI spelling: 1000 in every convention
    for label in ("kb", "kbit", "kbits"):
        sym[label] = _F(1000, 8)
    for label in ("b", "bit", "bits"):
        sym[label] = _F(1, 8)
    words["bit"] = words["bits"] = _F(1, 8)
    return sym, words


def _per_second(table: tuple[dict, dict], ps_suffix: bool) -> tuple[dict, dict]:
    sym, words = table
    rate_sym = {s + "/s": f for s, f in sym.items()}
    if ps_suffix:  # GBps, Gbps, MiBps, bps
        rate_sym.update({s + "ps": f for s, f in sym.items() if s.endswith(("B", "b"))})
    return rate_sym, {w + "/s": f for w, f in words.items()}


def _time_tables() -> tuple[dict, dict]:
    sym = {}
    for labels, f in [
        (("ns", "nsec"), _F(1, 10**9)),
        (("us", "µs", "usec", "µsec"), _F(1, 10**6)),
        (("ms", "msec"), _F(1, 10**3)),
        (("s", "sec", "secs"), _F(1)),
        (("min", "mins"), _F(60)),
        (("h", "hr", "hrs"), _F(3600)),
    ]:
        sym.update(dict.fromkeys(labels, f))
    words = {}
    for w, f in [("nanosecond", _F(1, 10**9)), ("microsecond", _F(1, 10**6)),
                 ("millisecond", _F(1, 10**3)), ("second", _F(1)), ("minute", _F(60)),
                 ("hour", _F(3600))]:
        words[w] = words[w + "s"] = f
    return sym, words


def _params_tables() -> tuple[dict, dict]:
    sym = {"": _F(1), "K": _F(10**3), "k": _F(10**3), "M": _F(10**6), "m": _F(10**6),
           "B": _F(10**9), "b": _F(10**9), "bn": _F(10**9), "T": _F(10**12), "t": _F(10**12)}
    words = {"thousand": _F(10**3), "million": _F(10**6), "billion": _F(10**9), "trillion": _F(10**12)}
    return sym, words


_FLOP_PREFIXES = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                  "P": 10**15, "E": 10**18}


def _flop_tables() -> tuple[dict, dict]:
    sym = {}
    for p, f in _FLOP_PREFIXES.items():
        for core in ("FLOP", "FLOPs", "flop", "Flop"):
            sym[p + core] = _F(f)
    return sym, {}


def _flop_rate_tables() -> tuple[dict, dict]:
    sym = {}
    for p, f in _FLOP_PREFIXES.items():
        for label in ("FLOP/s", "FLOPs/s", "flop/s", "Flop/s", "FLOPS"):
            sym[p + label] = _F(f)
    return sym, {}


def _number_tables() -> tuple[dict, dict]:
    return {"": _F(1)}, {}


_BYTES_SI = _byte_tables(source=False)
_BYTES_SOURCE = _byte_tables(source=True)
_TABLES: dict[tuple[str, str], tuple[dict, dict]] = {
    ("bytes", "si"): _BYTES_SI,
    ("bytes", "source"): _BYTES_SOURCE,
    ("bandwidth", "si"): _per_second(_BYTES_SI, ps_suffix=True),
    ("bandwidth", "source"): _per_second(_BYTES_SOURCE, ps_suffix=True),
    ("time", "si"): _time_tables(),
    ("params", "si"): _params_tables(),
    ("flops", "si"): _flop_tables(),
    ("flop_rate", "si"): _flop_rate_tables(),
}

#: What each dimension is called in messages.
_DESCRIPTION = {
    "bytes": "a size in bytes",
    "params": "a parameter count",
    "bandwidth": "a bandwidth in bytes per second",
    "time": "a time",
    "flops": "a FLOP count",
    "flop_rate": "a FLOP rate (FLOP per second)",
    "number": "a plain number",
}

#: The units listed in error messages (a readable summary, not every spelling).
_ACCEPTED_TEXT = {
    "bytes": ("B, kB/KB, MB, GB, TB, PB (SI, 1000-based; with convention='source' KB..PB are "
              "1024-based); KiB, MiB, GiB, TiB, PiB (IEC, 1024-based); bits: b/bit, kb, Mb/Mbit, "
              "Gb/Gbit, Tb/Tbit; words such as 'gigabytes'; a bare number is bytes"),
    "bandwidth": ("B/s, kB/s, MB/s, GB/s, TB/s (also GBps), KiB/s, MiB/s, GiB/s, TiB/s, bits per "
                  "second: Mb/s, Gb/s, Gbit/s, Gbps; a bare number is bytes per second"),
    "time": "ns, us/µs, ms, s, min, h (also sec, msec, usec and words such as 'seconds'); a bare number is seconds",
    "params": "K/k (thousand), M/m (million), B/b/bn (billion), T (trillion), the words thousand/million/"
              "billion/trillion, optionally followed by 'params'; a bare number is a count",
    "flops": "FLOP or FLOPs with a prefix k, M, G, T, P, E (e.g. '14 GFLOP'); a bare number is FLOP",
    "flop_rate": "FLOP/s or FLOPS with a prefix k, M, G, T, P, E (e.g. '312 TFLOP/s', '989 TFLOPS'); "
                 "a bare number is FLOP/s",
}

_ACCEPTED_SHORT = {
    "bytes": "bytes: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, bits (b, Mb, Gb)",
    "bandwidth": "bandwidth: GB/s, TB/s, GiB/s, Gbit/s",
    "time": "time: ns, µs, ms, s, min",
    "flops": "FLOP: GFLOP, TFLOP",
    "flop_rate": "FLOP/s: TFLOP/s, TFLOPS",
    "params": "parameters: K, M, B, T (e.g. '7.24B params')",
}

# Printing scales: (label, factor) in increasing order; the first is used below 1, ``_BASE`` for 0.
_SCALES = {
    ("bytes", "si"): [("B", 1)] + [(p, 1000**k) for k, p in enumerate(("kB", "MB", "GB", "TB", "PB"), 1)],
    ("bytes", "iec"): [("B", 1)] + [(p + "iB", 1024**k) for k, p in enumerate(_PREFIXES, 1)],
    ("bytes", "source"): [("B", 1)] + [(p + "B", 1024**k) for k, p in enumerate(_PREFIXES, 1)],
    ("time", "si"): [("ns", _F(1, 10**9)), ("µs", _F(1, 10**6)), ("ms", _F(1, 10**3)), ("s", 1)],
    ("params", "si"): [("", 1), ("K", 10**3), ("M", 10**6), ("B", 10**9), ("T", 10**12)],
    ("flops", "si"): [(p + "FLOP", 10**k) for k, p in
                      ((0, ""), (3, "k"), (6, "M"), (9, "G"), (12, "T"), (15, "P"), (18, "E"))],
}
for _name in ("si", "iec", "source"):
    _SCALES[("bandwidth", _name)] = [(lab + "/s", f) for lab, f in _SCALES[("bytes", _name)]]
del _name
_SCALES[("flop_rate", "si")] = [(lab + "/s", f) for lab, f in _SCALES[("flops", "si")]]
_BASE = {"bytes": "B", "bandwidth": "B/s", "time": "s", "params": "", "flops": "FLOP", "flop_rate": "FLOP/s"}


# --------------------------------------------------------------------------------------------------
# Reading numbers
# --------------------------------------------------------------------------------------------------
_NUMBER_RE = re.compile(
    r"""
    (?P<sign>[+\-\u2212])?\s*
    (?P<mantissa>
        (?: \d{1,3}(?:,\d{3})+(?!\d)            # 1,024  131,072,000
          | \d{1,3}(?:_\d{3})+(?!\d)            # 131_072
          | \d{1,3}(?:[\u2009\u202f]\d{3})+(?!\d)  # thin-space groups
          | \d+ )
        (?:\.\d*)?
      | \.\d+ )
    (?P<exponent>[eE][+\-]?\d+)?
    """,
    re.VERBOSE | re.ASCII,
)
_PER_SECOND_RE = re.compile(r"(?:/|\s+per\s+)(?:s|sec|secs|second|seconds)$", re.IGNORECASE)
_PARAMS_SUFFIX_RE = re.compile(r"\s*(?:params?|parameters?)$", re.IGNORECASE)


def _show(text: str, limit: int = 60) -> str:
    """``repr(text)``, shortened for error messages."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def _split(text: str, dimension: str) -> tuple[Fraction | float, str]:
    """Split ``text`` into its (non-negative, finite) number and the unit text after it."""
    what = _DESCRIPTION.get(dimension, "a quantity")
    example = _EXAMPLE.get(dimension, "14 GB")
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"text is empty; expected {what}, e.g. {example!r}")
    m = _NUMBER_RE.match(stripped)
    if m is None:
        raise ValueError(f"text {_show(text)} does not start with a number; expected {what}, e.g. {example!r}")
    unit = stripped[m.end():].strip()
    if unit[:1] in (",", "_") and unit[1:2].isdigit():
        raise ValueError(
            f"text {_show(text)}: write the decimal point as '.', and group thousands in threes "
            f"(1,024 or 1_024)"
        )
    mantissa = m.group("mantissa")
    for sep in (",", "_", "\u2009", "\u202f"):
        mantissa = mantissa.replace(sep, "")
    exponent = m.group("exponent") or ""
    approx = float(mantissa + exponent)
    if not math.isfinite(approx):
        raise ValueError(f"text {_show(text)}: the number is too large to represent")
    if m.group("sign") in ("-", "\u2212") and approx != 0:
        raise ValueError(f"text {_show(text)} is negative; {what} must be >= 0")
    # Exact decimal value, so that e.g. "13.9 ms" gives the float nearest to 0.0139 s. Absurdly
    # long numerals fall back to the (already correctly rounded) float.
    if len(mantissa) <= 400 and len(exponent) <= 5:
        return Fraction(mantissa) * Fraction(10) ** int(exponent[1:] or 0), unit
    return approx, unit


_EXAMPLE = {"bytes": "14 GB", "bandwidth": "1008 GB/s", "time": "13.9 ms", "params": "7.24B",
            "flops": "14 GFLOP", "flop_rate": "312 TFLOP/s", "number": "42"}


def _normalise_unit(unit: str, dimension: str) -> str:
    unit = re.sub(r"\s+", " ", unit.replace("\u03bc", "\u00b5"))  # Greek mu -> micro sign
    unit = re.sub(r"\s*/\s*", "/", unit)
    unit = _PER_SECOND_RE.sub("/s", unit)
    if dimension == "params":
        unit = _PARAMS_SUFFIX_RE.sub("", unit)
    return unit.strip()


def _lookup(dimension: str, unit: str, convention: str) -> Fraction | None:
    """The factor of ``unit`` in ``dimension`` (None when it is not a unit of it)."""
    sym, words = _TABLES[(dimension, convention if (dimension, convention) in _TABLES else "si")]
    unit = _normalise_unit(unit, dimension)
    if unit == "":  # a bare number is in the base unit
        return _F(1)
    if unit in sym:
        return sym[unit]
    return words.get(unit.lower())


def _suggestions(unit: str, dimensions: tuple[str, ...], convention: str) -> list[str]:
    keys: list[str] = []
    for dim in dimensions:
        sym, words = _TABLES[(dim, convention if (dim, convention) in _TABLES else "si")]
        keys += [k for k in sym if k] + list(words)
    keys = list(dict.fromkeys(keys))
    norm = _normalise_unit(unit, "bytes")
    found: list[str] = []
    if norm.endswith("s") and norm[:-1] in keys:  # "GBs" -> "GB"
        found.append(norm[:-1])
    found += sorted(k for k in keys if k.lower() == norm.lower() and k != norm)
    if not found:
        found = difflib.get_close_matches(norm, keys, n=3, cutoff=0.6)
    return list(dict.fromkeys(found))[:3]


def _unknown_unit(text: str, unit: str, dimensions: tuple[str, ...], convention: str) -> ValueError:
    if len(dimensions) == 1:
        msg = f"text {_show(text)} has unit {_show(unit)}, which is not a unit of {_DESCRIPTION[dimensions[0]]}."
    else:
        msg = f"text {_show(text)} has unit {_show(unit)}, which is not a unit the course knows."
    # a unit of another dimension?
    for other in ("bytes", "bandwidth", "time", "params", "flops", "flop_rate"):
        if other not in dimensions and unit and _lookup(other, unit, convention) is not None:
            msg += f" {_show(unit)} is a unit of {_DESCRIPTION[other]}."
            break
    else:
        close = _suggestions(unit, dimensions, convention)
        if close:
            msg += f" Did you mean {' or '.join(repr(c) for c in close)}?"
            if any(c.endswith("B") for c in close) and any(c.endswith("b") for c in close):
                msg += " (B is a byte, b a bit: 1 B = 8 b.)"
    if unit.lower().endswith("flops"):
        msg += (" By convention 'FLOPs' (lower-case s) counts operations and 'FLOPS' or 'FLOP/s' is a "
                "rate per second; write e.g. 'TFLOP' for a count and 'TFLOP/s' for a rate.")
    if len(dimensions) == 1:
        accepted = _ACCEPTED_TEXT[dimensions[0]]
    else:
        accepted = "; ".join(_ACCEPTED_SHORT[d] for d in dimensions)
    return ValueError(f"{msg} Accepted units: {accepted}.")


def _check_input(text, dimension: str):
    """Return ('number', float) for a real number, ('text', str) for a string; raise TypeError else."""
    if isinstance(text, str):
        return "text", text
    problem = TypeError(
        f"text must be a str such as {_EXAMPLE.get(dimension, '14 GB')!r} or a non-negative number "
        f"({_DESCRIPTION.get(dimension, 'a quantity')}), got {type(text).__name__}"
    )
    if isinstance(text, (bytes, bytearray, bool)) or text is None:
        raise problem
    try:
        return "number", require_nonnegative("text", text)
    except TypeError:
        raise problem from None


def _apply(number: Fraction | float, factor: Fraction, text: str) -> float:
    """``number * factor`` as the float nearest to the exact product."""
    try:
        result = float(Fraction(number) * factor)
    except OverflowError:
        result = math.inf
    if not math.isfinite(result):
        raise ValueError(f"text {_show(text)} is too large to represent as a float")
    if result > MAX_QUANTITY:
        raise ValueError(f"text {_show(text)} is {result:g} in base units, above the limit {MAX_QUANTITY:g}")
    return result


def _parse(text, dimension: str, convention: str = "si") -> float:
    kind, value = _check_input(text, dimension)
    if kind == "number":
        return value
    number, unit = _split(value, dimension)
    factor = _lookup(dimension, unit, convention)
    if factor is None:
        raise _unknown_unit(value, unit, (dimension,), convention)
    return _apply(number, factor, value)


def _convention(convention) -> str:
    key = require_choice("convention", convention, CONVENTIONS)
    return "source" if key == "jedec" else key


def _system(system) -> str:
    key = require_choice("system", system, SYSTEMS)
    return "source" if key == "jedec" else key


# --------------------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------------------
def _round_sig(v: float, digits: int) -> str:
    """``v`` (>= 0) rounded to ``digits`` significant digits, never rounding the integer part."""
    if v == 0:
        return "0"
    e = Decimal(v).adjusted()  # exact decimal exponent: 10**e <= v < 10**(e + 1)
    decimals = max(0, digits - 1 - e)
    s = f"{v:.{decimals}f}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def _format(value: float, dimension: str, system: str, digits: int, unit, sep: str = " ") -> str:
    scale = _SCALES[(dimension, system)]
    if unit is not None:
        if not isinstance(unit, str):
            raise TypeError(f"unit must be a str such as {scale[-2][0]!r} or None, got {type(unit).__name__}")
        factor = _lookup(dimension, unit, "source" if system == "source" else "si")
        if factor is None:
            labels = ", ".join(repr(lab) for lab, _ in scale if lab)
            raise ValueError(f"unit {unit!r} is not a unit of {_DESCRIPTION[dimension]}; use one of {labels}")
        v = float(Fraction(value) / factor)
        return f"{_round_sig(v, digits)}{sep}{_normalise_unit(unit, dimension)}".rstrip()
    if value == 0:
        return f"0{sep}{_BASE[dimension]}".rstrip()
    i = 0
    for j, (_, f) in enumerate(scale):
        if value >= f:
            i = j
    while True:
        label, f = scale[i]
        f = Fraction(f)
        s = _round_sig(float(Fraction(value) / f), digits)
        if i + 1 < len(scale) and float(s) >= Fraction(scale[i + 1][1]) / f:
            i += 1
            continue
        return f"{s}{sep}{label}".rstrip()


#: the most significant digits a ``format_*`` function prints (a float holds 17)
MAX_DIGITS = 17


def _check_format_args(name: str, value, digits) -> tuple[float, int]:
    return require_nonnegative(name, value), require_count("digits", digits, minimum=1, maximum=MAX_DIGITS)


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------
def parse_bytes(text, convention: str = "si") -> float:
    """A size in bytes from text such as ``"14 GB"``, ``"13.04 GiB"``, ``"1,024 B"``, ``"1.4e10 B"``.

    ``convention="si"`` (default) reads KB/MB/GB/TB/PB as powers of 1000; ``"source"`` (alias
    ``"jedec"``) reads them as powers of 1024, as the course's source material does. IEC units
    (KiB ...) are always 1024-based; ``b``/``bit`` units are bits (1/8 byte). A bare number is bytes.
    """
    return _parse(text, "bytes", _convention(convention))


def format_bytes(n, system: str = "si", digits: int = 3, unit: str | None = None) -> str:
    """Print ``n`` bytes: ``"14 GB"`` (si), ``"13 GiB"`` (iec), ``"13 GB"`` (source: 1024-based labels).

    See the module docstring for the rounding rule; ``unit`` pins the unit (e.g. ``"MB"``).
    """
    value, digits = _check_format_args("n", n, digits)
    return _format(value, "bytes", _system(system), digits, unit)


def parse_params(text) -> float:
    """A parameter count from ``"7B"``, ``"7.24B"``, ``"124.4M"``, ``"70b"``, ``"1.5T"``, ``"7 billion"``,
    ``"671e9"``, ``"7B params"``. Suffixes are 1000-based; here ``B``/``b`` mean billion."""
    return _parse(text, "params")


def format_params(n, digits: int = 3) -> str:
    """Print a parameter count without a space: ``format_params(7.24e9) == "7.24B"``, ``"124M"``."""
    value, digits = _check_format_args("n", n, digits)
    return _format(value, "params", "si", digits, None, sep="")


def parse_bandwidth(text, convention: str = "si") -> float:
    """Bytes per second from ``"1008 GB/s"``, ``"4.8 TB/s"``, ``"800 GiB/s"``, ``"100 Gbit/s"``, ``"25 GBps"``.

    ``convention`` is as for ``parse_bytes``; bit rates (``Gb/s``, ``Gbps``) are divided by 8.
    """
    return _parse(text, "bandwidth", _convention(convention))


def format_bandwidth(bytes_per_s, system: str = "si", digits: int = 3, unit: str | None = None) -> str:
    """Print a bandwidth: ``format_bandwidth(4.8e12) == "4.8 TB/s"``;
    ``format_bandwidth(1.008e12, unit="GB/s") == "1008 GB/s"``."""
    value, digits = _check_format_args("bytes_per_s", bytes_per_s, digits)
    return _format(value, "bandwidth", _system(system), digits, unit)


def parse_time(text) -> float:
    """Seconds from ``"13.9 ms"``, ``"42.94 us"``, ``"42.94 µs"``, ``"1.2 s"``, ``"300 ns"``, ``"2 min"``."""
    return _parse(text, "time")


def format_time(seconds, digits: int = 3, unit: str | None = None) -> str:
    """Print a time in ns, µs, ms or s (the largest with value >= 1): ``format_time(0.0139) == "13.9 ms"``."""
    value, digits = _check_format_args("seconds", seconds, digits)
    return _format(value, "time", "si", digits, unit)


def parse_flops(text) -> float:
    """A count of floating-point operations from ``"2 TFLOP"``, ``"14 GFLOPs"`` (lower-case s: plural)."""
    return _parse(text, "flops")


def format_flops(flops, digits: int = 3, unit: str | None = None) -> str:
    """Print a FLOP count: ``format_flops(2e12) == "2 TFLOP"``."""
    value, digits = _check_format_args("flops", flops, digits)
    return _format(value, "flops", "si", digits, unit)


def parse_flop_rate(text) -> float:
    """FLOP per second from ``"312 TFLOP/s"`` or ``"989 TFLOPS"`` (upper-case S: per second)."""
    return _parse(text, "flop_rate")


def format_flop_rate(flop_per_s, digits: int = 3, unit: str | None = None) -> str:
    """Print a FLOP rate: ``format_flop_rate(312e12) == "312 TFLOP/s"``."""
    value, digits = _check_format_args("flop_per_s", flop_per_s, digits)
    return _format(value, "flop_rate", "si", digits, unit)


_FORMATTERS = {
    "bytes": format_bytes, "bandwidth": format_bandwidth, "time": format_time,
    "params": format_params, "flops": format_flops, "flop_rate": format_flop_rate,
}
_PARSE_ORDER = ("bytes", "bandwidth", "time", "flops", "flop_rate", "params")


@dataclass(frozen=True)
class Quantity:
    """A value in its base unit (bytes, bytes/s, s, FLOP, FLOP/s, a count) and its dimension."""

    value: float
    dimension: str

    def __post_init__(self):
        object.__setattr__(self, "value", require_nonnegative("value", self.value))
        object.__setattr__(self, "dimension", require_choice("dimension", self.dimension, DIMENSIONS))

    def format(self, digits: int = 3) -> str:
        """The value printed with the dimension's ``format_*`` function (SI units)."""
        if self.dimension == "number":
            return _round_sig(self.value, require_count("digits", digits, minimum=1, maximum=MAX_DIGITS))
        return _FORMATTERS[self.dimension](self.value, digits=digits)

    def __str__(self) -> str:
        return self.format()


def parse_quantity(text, dimension: str | None = None, convention: str = "si") -> Quantity:
    """Read ``text`` (e.g. ``"14 GB"``, ``"13.9 ms"``, ``"989 TFLOPS"``) into a ``Quantity``.

    Without ``dimension`` the unit decides: a bare number (or a numeric argument) has dimension
    ``"number"``. The only clash is ``B``/``b`` with nothing before it, which is read as bytes/bits
    (``"7B"`` = 7 bytes) -- pass ``dimension="params"`` to read ``"7B"`` as 7 billion parameters.
    With ``dimension`` the text is read by that dimension's ``parse_*`` function (a bare number is
    then taken in its base unit).
    """
    conv = _convention(convention)
    if dimension is not None:
        dim = require_choice("dimension", dimension, DIMENSIONS)
        if dim == "number":
            kind, value = _check_input(text, "number")
            if kind == "text":
                number, unit = _split(value, "number")
                if unit:
                    raise ValueError(f"text {_show(value)} has a unit ({_show(unit)}); expected a plain number")
                value = _apply(number, _F(1), value)
            return Quantity(value, "number")
        return Quantity(_parse(text, dim, conv), dim)
    kind, value = _check_input(text, "any")
    if kind == "number":
        return Quantity(value, "number")
    number, unit = _split(value, "any")
    if not unit:
        return Quantity(_apply(number, _F(1), value), "number")
    for dim in _PARSE_ORDER:
        factor = _lookup(dim, unit, conv)
        if factor is not None:
            return Quantity(_apply(number, factor, value), dim)
    raise _unknown_unit(value, unit, _PARSE_ORDER, conv)


def format_quantity(q: Quantity, digits: int = 3) -> str:
    """``q`` printed in its dimension's units (same as ``q.format(digits)``)."""
    if not isinstance(q, Quantity):
        raise TypeError(f"q must be a Quantity (from parse_quantity), got {type(q).__name__}")
    return q.format(digits)


def accepted_units(dimension: str, convention: str = "si") -> list[str]:
    """Every unit spelling ``parse_*`` accepts for ``dimension`` (symbols, then words)."""
    dim = require_choice("dimension", dimension, DIMENSIONS)
    if dim == "number":
        return []
    conv = _convention(convention)
    sym, words = _TABLES[(dim, conv if (dim, conv) in _TABLES else "si")]
    return [k for k in sym if k] + list(words)


def convention_gap_percent(si_value, source_value) -> float:
    """How much larger (in %) the 1024-based reading of a label is than its SI reading: lesson 01's unit trap.

    ``source_value / si_value - 1`` in percent: "14 GB" read with 1024-based prefixes is 7.37 % more bytes.
    """
    si = require_nonnegative("si_value", si_value)
    source = require_nonnegative("source_value", source_value)
    gap = (source / si - 1) * 100 if si else 0.0
    if not math.isfinite(gap):
        raise ValueError(f"si_value ({si:g}) is too small against source_value ({source:g}) for a finite gap")
    return gap
