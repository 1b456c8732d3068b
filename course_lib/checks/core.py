"""Self-checking exercises: questions, answers, mistakes, results.

Learner side (in an exercise notebook)::

    from course_lib.checks import ex01 as q, ____
    answer = ____                 # the learner replaces ____ with an answer
    q.q1.check(answer)            # shows correct / incorrect (+ feedback) / not attempted
    q.q1.hint(); q.q1.hint(2)     # next hint / hint number 2
    q.q1.solution()               # worked solution (honour system)

Grade cells (nbgrader) call ``q.q1.check(answer, strict=True)``, which raises ``AssertionError``
with the feedback when the answer is incorrect or not attempted.

Definition side, ``course_lib/checks/exNN.py``::

    from course_lib.checks.core import Question, Mistake, detectors as d
    q1 = Question(id="q1", set="ex01", objective="O2 ...", kind="numeric",
                  expected=14e9, dimension="bytes", rel_tol=0.01,
                  detect=[d.gb_vs_gib(), d.bits_vs_bytes()],
                  mistakes=[Mistake(7e9, "..."), ...], hints=[...], solution="...")
    QUESTIONS = [q1, ...]

Every answer goes through one reader that accepts int, float, ``fractions.Fraction``,
``decimal.Decimal``, numpy and torch scalars (0-d; torch is never imported here, the tensor's
own methods are used), sympy numbers, ``course_lib.units.Quantity`` objects and strings such as
``"14 GB"`` (parsed by :func:`course_lib.units.parse_quantity` when the question allows strings).
Anything else gives an "incorrect" result with a message that says what could not be read;
``check`` never lets an exception escape unless ``strict=True``.

Feedback never states the expected value.  Numbers are compared with :func:`math.isclose`
using the per-question ``rel_tol``/``abs_tol``.

Each result is displayed in Jupyter as a coloured box (``text/html``), as plain text, and as a
machine-readable record under the MIME type :data:`MIME_TYPE` that :mod:`course_lib.grade`
collects.
"""
from __future__ import annotations

import decimal
import html
import math
import numbers
import random
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

__all__ = [
    "____",
    "PLACEHOLDER",
    "is_placeholder",
    "CORRECT",
    "INCORRECT",
    "NOT_ATTEMPTED",
    "STATUSES",
    "KINDS",
    "DIMENSIONS",
    "MIME_TYPE",
    "RECORD_VERSION",
    "Mistake",
    "Detector",
    "detectors",
    "Question",
    "Result",
    "Hint",
    "Solution",
    "validate_set",
]

CORRECT = "correct"
INCORRECT = "incorrect"
NOT_ATTEMPTED = "not_attempted"
STATUSES = (CORRECT, INCORRECT, NOT_ATTEMPTED)
KINDS = ("numeric", "expression", "function", "choice")
DIMENSIONS = ("bytes", "time", "bandwidth", "params", "flops", "flop_rate")
MIME_TYPE = "application/vnd.course.check+json"
RECORD_VERSION = 1

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


def _norm_dimension(dim) -> str | None:
    if dim is None:
        return None
    key = str(getattr(dim, "value", dim)).strip().lower()
    if key in _DIMENSION_ALIASES:
        return _DIMENSION_ALIASES[key]
    return key  # unknown dimension: kept verbatim so that a mismatch is still reported


# --------------------------------------------------------------------------------------------
# The placeholder
# --------------------------------------------------------------------------------------------

_PLACEHOLDER_MSG = "____ is a placeholder: replace it with your answer"


def _self(self, *args, **kwargs):
    return self


def _refuse(self, *args, **kwargs):
    raise TypeError(_PLACEHOLDER_MSG)


class _Placeholder:
    """The ``____`` sentinel that exercise notebooks ship with.

    Arithmetic, comparisons, calls, indexing, attribute access and numpy ufuncs on it all give
    back the placeholder, so ``x = ____ * 2`` or ``np.sqrt(____) / 1e9`` still reads as
    "not attempted" and an unfilled notebook runs top to bottom without errors.  Converting it to
    ``float``/``int`` raises a ``TypeError`` that says what to do.
    """

    __slots__ = ()
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "____"

    __str__ = __repr__

    def __format__(self, spec):
        return "____"

    def __bool__(self):
        return False

    def __hash__(self):
        return 0x5F5F5F5F

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self

    def __reduce__(self):
        return (_Placeholder, ())

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return self

    def __array_function__(self, func, types, args, kwargs):
        return self

    def __len__(self):
        raise TypeError(_PLACEHOLDER_MSG)


for _name in (
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow matmul rmatmul "
    "lshift rlshift rshift rrshift and rand or ror xor rxor divmod rdivmod neg pos abs invert round "
    "floor ceil trunc lt le gt ge call getitem"
).split():
    setattr(_Placeholder, f"__{_name}__", _self)
for _name in ("float", "int", "index", "complex", "iter"):
    setattr(_Placeholder, f"__{_name}__", _refuse)
del _name

PLACEHOLDER = ____ = _Placeholder()


def is_placeholder(value) -> bool:
    """True for ``____`` and ``...`` (Ellipsis), the two ways an exercise says "fill me in"."""
    return value is PLACEHOLDER or value is Ellipsis


def _contains_placeholder(value, depth: int = 0) -> bool:
    if is_placeholder(value):
        return True
    if depth > 3:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_contains_placeholder(v, depth + 1) for v in list(value)[:50])
    if isinstance(value, dict):
        return any(_contains_placeholder(v, depth + 1) for v in list(value.values())[:50])
    return False


# --------------------------------------------------------------------------------------------
# Reading answers
# --------------------------------------------------------------------------------------------


class _NotAttempted(Exception):
    """The answer (or part of it) is still the placeholder."""


class _Unreadable(Exception):
    """The answer cannot be read as what the question asks for; the message is for the learner."""


def _short(value, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # a learner object with a broken __repr__
        text = f"<{type(value).__name__} object>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def _shape(x) -> tuple:
    try:
        return tuple(int(s) for s in x.shape)
    except Exception:
        return ()


def _real_from_object(x, what: str = "your answer") -> float:
    """A finite float from a number-like object (no strings), or raise _Unreadable/_NotAttempted."""
    if is_placeholder(x):
        raise _NotAttempted
    if x is None:
        raise _Unreadable(f"{what} is None: did you forget to assign (or return) a value?")
    if isinstance(x, bool):
        raise _Unreadable(f"{what} is {x}, a boolean; give a number")
    module = type(x).__module__ or ""
    if module.startswith("torch"):
        shape = _shape(x)
        try:
            numel = int(x.numel())
        except Exception:
            raise _Unreadable(f"can't read {what} ({type(x).__name__}) as a number") from None
        if shape != ():
            tip = " (use .item() to take the single value out)" if numel == 1 else ""
            raise _Unreadable(f"{what} is a tensor of shape {shape}; give a single number{tip}")
        try:
            x = x.item()
        except Exception:
            raise _Unreadable(f"can't read {what} ({type(x).__name__}) as a number") from None
        return _real_from_object(x, what)
    if module.startswith("numpy") and not isinstance(x, (str, bytes)):
        shape = _shape(x)
        if shape != ():
            size = 1
            for s in shape:
                size *= s
            tip = " (use .item() to take the single value out)" if size == 1 else ""
            raise _Unreadable(f"{what} is an array of shape {shape}; give a single number{tip}")
        try:
            item = x.item()
        except Exception:
            raise _Unreadable(f"can't read {what} ({type(x).__name__}) as a number") from None
        if type(item).__module__.startswith("numpy") or item is x:
            raise _Unreadable(f"can't read {what} ({type(x).__name__}) as a number")
        return _real_from_object(item, what)
    if module.startswith("sympy"):
        try:
            free = getattr(x, "free_symbols", set())
        except Exception:
            free = set()
        if free:
            names = ", ".join(sorted(str(s) for s in free))
            raise _Unreadable(f"{what} still contains the symbol(s) {names}; give a number")
        try:
            c = complex(x)
        except Exception:
            raise _Unreadable(f"can't read {what} ({_short(x)}) as a number") from None
        x = c
    if hasattr(x, "value") and hasattr(x, "dimension") and not isinstance(x, numbers.Number):
        raise _Unreadable(f"{what} is a quantity with units; this question asks for a plain number")
    if isinstance(x, decimal.Decimal):
        try:
            x = float(x)
        except Exception:
            raise _Unreadable(f"can't read {what} ({_short(x)}) as a number") from None
    if isinstance(x, numbers.Real):
        try:
            v = float(x)
        except (OverflowError, ValueError, TypeError):
            raise _Unreadable(f"{what} is too large to be a sensible answer") from None
    elif isinstance(x, numbers.Complex):
        try:
            c = complex(x)
        except Exception:
            raise _Unreadable(f"can't read {what} ({_short(x)}) as a number") from None
        if c.imag != 0 and not math.isnan(c.imag):
            raise _Unreadable(f"{what} is a complex number ({_short(x)}); give a real number")
        v = c.real
    elif isinstance(x, (str, bytes)):
        raise _Unreadable(f"{what} is text ({_short(x)}); give a number (without quotes)")
    elif isinstance(x, (list, tuple, set, frozenset, dict)):
        if _contains_placeholder(x):
            raise _NotAttempted
        raise _Unreadable(f"{what} is a {type(x).__name__}; give a single number")
    elif callable(x):
        raise _Unreadable(f"{what} is a function; call it and give the number it returns")
    else:
        raise _Unreadable(f"can't read {what} (a {type(x).__name__}) as a number")
    if math.isnan(v):
        raise _Unreadable(f"{what} is NaN (not a number); check for 0/0 or a missing value")
    if math.isinf(v):
        raise _Unreadable(f"{what} is infinite; check for a division by zero")
    return v


def _units():
    try:
        from course_lib.core import units
    except ImportError as exc:  # pragma: no cover - only while the library is being assembled
        raise RuntimeError("course_lib.units is needed to read answers with units") from exc
    return units


def _parse_quantity(text: str, dimension: str | None = None) -> tuple[float, str | None]:
    """(value in base units, normalised dimension) for a string such as '14 GB'.

    With ``dimension`` the text is first read as that dimension (so '7B' is 7 billion for a
    parameter count); if that fails it is read on its own so that a unit of another dimension
    is recognised as such.  Raises ValueError/TypeError with course_lib.units' message."""
    units = _units()
    q = None
    if dimension is not None:
        try:
            q = units.parse_quantity(text, dimension=dimension)
        except (ValueError, TypeError):
            q = None
    if q is None:
        q = units.parse_quantity(text)
    return float(q.value), _norm_dimension(q.dimension)


def _first_sentence(message: str, limit: int = 160) -> str:
    message = " ".join(str(message).split())
    m = re.search(r"(?<!e\.g)(?<!i\.e)\. ", message)
    if m and 0 < m.start() < limit:
        return message[: m.start()]
    return message if len(message) <= limit else message[: limit - 1] + "…"


_FLOAT_RE = re.compile(r"^[+-]?(\d[\d_]*\.?\d*|\.\d+)([eE][+-]?\d+)?$")


# --------------------------------------------------------------------------------------------
# Results, hints and solutions: things that display themselves in Jupyter
# --------------------------------------------------------------------------------------------

_cell_serial = 0
_hooked_shells: set[int] = set()


def _bump_cell_serial(*_args, **_kwargs):
    global _cell_serial
    _cell_serial += 1


def _shell():
    """The running IPython shell, or None (IPython is never imported from here)."""
    ipy = sys.modules.get("IPython")
    if ipy is None:
        return None
    try:
        shell = ipy.get_ipython()
    except Exception:
        return None
    if shell is not None and id(shell) not in _hooked_shells:
        try:
            shell.events.register("pre_run_cell", _bump_cell_serial)
            _hooked_shells.add(id(shell))
        except Exception:
            pass
    return shell


class _Displayable:
    """Shows itself when created inside IPython; the echo of the same object in the same cell
    (``q.q1.check(x)`` as the last line) is swallowed so that it appears exactly once."""

    _shown_in: int | None = None

    def _bundle(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self._bundle()

    def _ipython_display_(self):
        if self._shown_in is not None and self._shown_in == _cell_serial:
            object.__setattr__(self, "_shown_in", None)  # swallow one echo only
            return
        from IPython.display import display

        display(self._bundle(), raw=True)

    def _show(self):
        if _shell() is None:
            return
        try:
            from IPython.display import display

            display(self._bundle(), raw=True)
            object.__setattr__(self, "_shown_in", _cell_serial)
        except Exception:
            pass


_STYLE = {
    CORRECT: ("#1e7b34", "#e8f5e9", "✔", "Correct"),
    INCORRECT: ("#b3261e", "#fdecea", "✘", "Not yet"),
    NOT_ATTEMPTED: ("#5f6368", "#f1f3f4", "○", "Not attempted"),
}


def _inline_code(escaped: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


@dataclass(frozen=True, eq=False)
class Result(_Displayable):
    """The outcome of one check.  ``status`` is one of :data:`STATUSES`."""

    status: str
    feedback: str
    question: str
    set: str
    points: float
    objective: str = ""
    strict: bool = False

    @property
    def correct(self) -> bool:
        return self.status == CORRECT

    @property
    def attempted(self) -> bool:
        return self.status != NOT_ATTEMPTED

    @property
    def score(self) -> float:
        return float(self.points) if self.correct else 0.0

    def __bool__(self) -> bool:
        return self.correct

    def record(self) -> dict:
        """The machine-readable record the grader collects (published as :data:`MIME_TYPE`)."""
        return {
            "version": RECORD_VERSION,
            "set": self.set,
            "question": self.question,
            "status": self.status,
            "points": float(self.points),
            "score": self.score,
            "feedback": self.feedback,
            "objective": self.objective,
            "strict": bool(self.strict),
        }

    @property
    def label(self) -> str:
        return f"{self.set}.{self.question}"

    def __str__(self) -> str:
        mark, word = _STYLE[self.status][2], _STYLE[self.status][3]
        text = f"{mark} {self.label}: {word}"
        if self.feedback:
            text += f": {self.feedback}"
        return text

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        fg, bg, mark, word = _STYLE[self.status]
        body = _inline_code(html.escape(self.feedback)) if self.feedback else ""
        pts = f"{_fmt(self.score)}/{_fmt(float(self.points))} pt"
        return (
            f'<div class="course-check course-check-{self.status}" style="border-left:6px solid {fg};'
            f'background:{bg};color:#202124;padding:6px 10px;margin:4px 0;border-radius:4px;'
            f'font-family:sans-serif;font-size:14px">'
            f'<b style="color:{fg}">{mark} {html.escape(word)}</b>'
            f' <span style="color:#5f6368">({html.escape(self.label)}, {pts})</span>'
            + (f"<div style=\"margin-top:3px\">{body}</div>" if body else "")
            + "</div>"
        )

    def _bundle(self) -> dict:
        return {"text/plain": str(self), "text/html": self._repr_html_(), MIME_TYPE: self.record()}


@dataclass(frozen=True, eq=False)
class Hint(_Displayable):
    """One hint of a question (markdown; rendered with math in Jupyter)."""

    question: str
    number: int
    total: int
    text: str

    def __str__(self) -> str:
        return f"Hint {self.number}/{self.total} ({self.question}): {self.text}"

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        return f"**💡 Hint {self.number}/{self.total}** ({self.question}): {self.text}"

    def _bundle(self) -> dict:
        return {"text/plain": str(self), "text/markdown": self._repr_markdown_()}


@dataclass(frozen=True, eq=False)
class Solution(_Displayable):
    """The worked solution of a question (markdown)."""

    question: str
    text: str

    def __str__(self) -> str:
        return f"Solution ({self.question}):\n{self.text}"

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        return (
            f"**Worked solution ({self.question})**: honour system, try it yourself first!\n\n"
            f"{self.text}"
        )

    def _bundle(self) -> dict:
        return {"text/plain": str(self), "text/markdown": self._repr_markdown_()}


# --------------------------------------------------------------------------------------------
# Mistakes and generic mistake detectors
# --------------------------------------------------------------------------------------------


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
    """Factories for the generic mistake detectors (``from course_lib.checks.core import detectors``)."""

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


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------

_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE_EXPR_RE = re.compile(r"^[\w\s+\-*/^().,]*$")


class _CaseTable:
    """A function built from a question's cases (``factor`` × the expected output)."""

    def __init__(self, cases, factor: float = 1.0):
        self._cases = cases
        self._factor = factor

    def __call__(self, *args, **kwargs):
        for (a, k), expected in self._cases:
            if tuple(args) == tuple(a) and dict(kwargs) == dict(k):
                return expected * self._factor
        raise KeyError(f"no case for {args!r}")


def _call_repr(name: str, args, kwargs) -> str:
    parts = [_short(a, 30) for a in args] + [f"{k}={_short(v, 30)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


class Question:
    """One self-checking exercise question.  See the module docstring and docs/CHECKS_API.md.

    Parameters (keyword-only):
      id, set        e.g. "q1", "ex01"; the question is ``<set module>.<id>``.
      objective      the learning objective it assesses, e.g. "O2 weights memory".
      kind           "numeric" | "expression" | "function" | "choice".
      expected       numeric: a number in ``unit`` or a string with units; expression: a sympy
                     expression or string; function: the reference function (optional when
                     ``cases`` carry expected values); choice: the right option.
      rel_tol, abs_tol   numeric tolerances (math.isclose); defaults 1e-2 and 0.
      dimension      one of DIMENSIONS or None (a plain number).
      unit           how bare numbers are read, e.g. "GB" or "ms" (default: base unit).
      accept_strings allow answers like "14 GB" (default: True when ``dimension`` is set, and for
                     expressions).
      symbols        expression: sympy symbols or names (names become positive symbols).
      cases          function: [((args...), expected), ...]; args may be a tuple or a dict of kwargs.
      options        choice: the options offered.
      points, prompt, hints, solution, mistakes, detect (list of Detector).
    """

    def __init__(
        self,
        *,
        id: str,
        set: str,
        objective: str,
        kind: str = "numeric",
        expected: Any = None,
        rel_tol: float = 1e-2,
        abs_tol: float = 0.0,
        dimension: str | None = None,
        unit: str | None = None,
        accept_strings: bool | None = None,
        symbols: Iterable | None = None,
        cases: Sequence | None = None,
        options: Sequence | None = None,
        points: float = 1,
        prompt: str = "",
        hints: Sequence[str] = (),
        solution: str = "",
        mistakes: Sequence[Mistake] = (),
        detect: Sequence[Detector] = (),
    ):
        from course_lib.core.validation import require_choice, require_nonnegative, require_positive

        for name, value in (("id", id), ("set", set)):
            if not isinstance(value, str) or not _ID_RE.match(value):
                raise ValueError(f"Question {name} must be an identifier such as 'q1' / 'ex01', got {value!r}")
        self.id = id
        self.set = set
        where = f"{set}.{id}"
        if not isinstance(objective, str) or not objective.strip():
            raise ValueError(f"{where}: objective must be a non-empty string naming the learning objective")
        self.objective = objective
        self.kind = require_choice("kind", kind, KINDS)
        self.points = require_positive("points", points)
        self.rel_tol = require_nonnegative("rel_tol", rel_tol)
        self.abs_tol = require_nonnegative("abs_tol", abs_tol)
        self.prompt = str(prompt)
        if isinstance(hints, str) or not all(isinstance(h, str) and h.strip() for h in hints):
            raise TypeError(f"{where}: hints must be a list of non-empty strings")
        self.hints = tuple(hints)
        if not isinstance(solution, str):
            raise TypeError(f"{where}: solution must be a markdown string")
        self.solution_text = solution
        if not all(isinstance(m, Mistake) for m in mistakes):
            raise TypeError(f"{where}: mistakes must be a list of Mistake(value, feedback)")
        self.mistakes = tuple(mistakes)
        if not all(isinstance(d, Detector) for d in detect):
            raise TypeError(f"{where}: detect must be a list of detectors (course_lib.checks.core.detectors)")
        self.detect = tuple(detect)
        self._hints_seen = 0  # highest hint number shown so far
        self.dimension = None if dimension is None else require_choice("dimension", dimension, DIMENSIONS)
        self.unit = unit
        self.accept_strings = (
            (self.dimension is not None or self.kind == "expression") if accept_strings is None else bool(accept_strings)
        )
        self.symbols = ()
        self.cases = ()
        self.options = ()
        self.expected = expected
        self._where = where
        self._scale = 1.0  # bare numbers are in `unit`; set by _init_numeric
        self._bank: list[Mistake] = []  # explicit + detector-generated, in matching order
        self._matchers: list[tuple[Any, Mistake]] = []  # (prepared value, mistake)

        if unit is not None and self.kind not in ("numeric", "function"):
            raise ValueError(f"{where}: unit only applies to numeric and function questions")
        if self.kind == "numeric":
            self._init_numeric()
        elif self.kind == "expression":
            self._init_expression(symbols)
        elif self.kind == "function":
            self._init_function(cases)
        else:
            self._init_choice(options)

    # ---- construction helpers -----------------------------------------------------------

    def _definition_error(self, message: str) -> ValueError:
        return ValueError(f"{self._where}: {message}")

    def _init_numeric(self):
        if self.unit is not None:
            if self.dimension is None:
                raise self._definition_error("unit needs a dimension")
            try:
                value, dim = _parse_quantity(f"1 {self.unit}", self.dimension)
            except (ValueError, TypeError) as exc:
                raise self._definition_error(f"unit {self.unit!r} can't be read: {exc}") from None
            if dim != self.dimension:
                raise self._definition_error(f"unit {self.unit!r} is not a unit of {self.dimension}")
            self._scale = value
        if self.expected is None:
            raise self._definition_error("numeric questions need expected=")
        self._expected_base = self._read_definition(self.expected, "expected")
        for m in self.mistakes:
            base = self._read_definition(m.value, "mistake value")
            if self._close(base, self._expected_base):
                raise self._definition_error(f"mistake {m.value!r} is within tolerance of the expected answer")
            self._add_matcher(base, m)
        for d in self.detect:
            if d.value is not None:
                candidates = [self._read_definition(d.value, f"{d.name} value")]
            else:
                candidates = [self._expected_base * r for r in d.ratios]
            for base in candidates:
                if self._close(base, self._expected_base):
                    raise self._definition_error(
                        f"detector {d.name} gives a value within tolerance of the expected answer; "
                        f"tighten rel_tol (now {self.rel_tol:g}) or drop the detector")
                if any(self._close(base, prev, m.rel_tol) for prev, m in self._matchers):
                    continue  # an earlier (explicit) mistake already covers this value
                value = d.value if d.value is not None else base / self._scale
                self._add_matcher(base, Mistake(value, d.feedback))

    def _add_matcher(self, prepared, mistake: Mistake):
        self._matchers.append((prepared, mistake))
        self._bank.append(mistake)

    def _read_definition(self, value, what: str) -> float:
        try:
            base, dim = self._read_number(value)
        except (_Unreadable, _NotAttempted) as exc:
            raise self._definition_error(f"{what} {value!r} can't be read: {exc}") from None
        if dim is not None and dim != self.dimension:
            raise self._definition_error(f"{what} {value!r} is {_NOUNS.get(dim, dim)}, not {self.dimension}")
        return base

    def _close(self, a: float, b: float, rel_tol: float | None = None) -> bool:
        return math.isclose(a, b, rel_tol=self.rel_tol if rel_tol is None else rel_tol, abs_tol=self.abs_tol)

    def _init_expression(self, symbols):
        import sympy

        syms = []
        for s in symbols or ():
            if isinstance(s, str):
                syms.append(sympy.Symbol(s, positive=True))
            elif isinstance(s, sympy.Symbol):
                syms.append(s)
            else:
                raise TypeError(f"{self._where}: symbols must be sympy Symbols or names, got {s!r}")
        self.symbols = tuple(syms)
        self._symbol_map = {s.name: s for s in self.symbols}
        if self.expected is None:
            raise self._definition_error("expression questions need expected=")
        try:
            self._expected_expr = self._read_expression(self.expected)
        except (_Unreadable, _NotAttempted) as exc:
            raise self._definition_error(f"expected {self.expected!r} can't be read: {exc}") from None
        rng = random.Random(12345)
        self._points = [{s.name: rng.uniform(1.5, 9.5) for s in self.symbols} for _ in range(3)]
        for m in self.mistakes:
            try:
                expr = self._read_expression(m.value)
            except (_Unreadable, _NotAttempted) as exc:
                raise self._definition_error(f"mistake {m.value!r} can't be read: {exc}") from None
            if self._sym_equal(expr, self._expected_expr):
                raise self._definition_error(f"mistake {m.value!r} is equivalent to the expected answer")
            self._add_matcher(expr, m)
        for d in self.detect:
            cands = ([self._read_expression(d.value)] if d.value is not None
                     else [sympy.nsimplify(r) * self._expected_expr for r in d.ratios])
            for expr in cands:
                if self._sym_equal(expr, self._expected_expr):
                    raise self._definition_error(f"detector {d.name} is equivalent to the expected answer")
                if any(self._sym_equal(expr, prev) for prev, _ in self._matchers):
                    continue
                self._add_matcher(expr, Mistake(expr, d.feedback))

    def _init_function(self, cases):
        if not cases:
            raise self._definition_error("function questions need cases=[((args...), expected), ...]")
        if self.unit is not None:
            raise self._definition_error("function questions compare returned numbers in base units; drop unit=")
        prepared = []
        for case in cases:
            if not (isinstance(case, (tuple, list)) and len(case) == 2):
                raise self._definition_error(f"each case must be ((args...), expected), got {case!r}")
            args, value = case
            if isinstance(args, dict):
                a, k = (), dict(args)
            elif isinstance(args, (tuple, list)):
                a, k = tuple(args), {}
            else:
                a, k = (args,), {}
            base = self._read_definition(value, "case expected value")
            prepared.append(((a, k), base))
        self.cases = tuple(prepared)
        if self.expected is None:
            self.expected = _CaseTable(self.cases)
        elif not callable(self.expected):
            raise self._definition_error("expected must be the reference function for function questions")
        else:
            outcome = self._run_function(self.expected, "reference")
            if outcome[0] != CORRECT:
                raise self._definition_error(f"the reference function disagrees with the cases: {outcome[1]}")
        for m in self.mistakes:
            if not callable(m.value):
                raise self._definition_error(f"mistake values of function questions must be functions, got {m.value!r}")
            outputs = self._outputs(m.value)
            if outputs is None:
                raise self._definition_error(f"mistake function {m.value!r} fails on the cases")
            if all(self._close(o, e) for o, (_, e) in zip(outputs, self.cases)):
                raise self._definition_error(f"mistake function {m.value!r} gives the expected results")
            self._add_matcher(outputs, m)
        for d in self.detect:
            if d.value is not None:
                raise self._definition_error(f"detector {d.name} needs a fixed value; not usable with functions")
            for r in d.ratios:
                outputs = [e * r for _, e in self.cases]
                if all(self._close(o, e) for o, (_, e) in zip(outputs, self.cases)):
                    raise self._definition_error(f"detector {d.name} can't be told apart under rel_tol")
                if any(all(self._close(o, p, m.rel_tol) for o, p in zip(outputs, prev)) for prev, m in self._matchers):
                    continue
                self._add_matcher(outputs, Mistake(_CaseTable(self.cases, r), d.feedback))

    def _init_choice(self, options):
        if not options or isinstance(options, str):
            raise self._definition_error("choice questions need options=[...]")
        self.options = tuple(options)
        keys = [self._choice_key(o) for o in self.options]
        if len(set(keys)) != len(keys):
            raise self._definition_error("options must be distinct")
        if self._choice_key(self.expected) not in keys:
            raise self._definition_error(f"expected {self.expected!r} is not one of the options")
        for m in self.mistakes:
            if self._choice_key(m.value) not in keys:
                raise self._definition_error(f"mistake {m.value!r} is not one of the options")
            if self._choice_key(m.value) == self._choice_key(self.expected):
                raise self._definition_error(f"mistake {m.value!r} is the expected answer")
            self._add_matcher(self._choice_key(m.value), m)
        if self.detect:
            raise self._definition_error("detectors do not apply to choice questions")

    # ---- reading answers ---------------------------------------------------------------

    def _read_number(self, x, what: str = "your answer") -> tuple[float, str | None]:
        """(value in base units, dimension the answer itself carried or None)."""
        if is_placeholder(x):
            raise _NotAttempted
        if isinstance(x, bytes):
            raise _Unreadable(f"{what} is bytes data ({_short(x)}); give a number")
        if isinstance(x, str):
            s = x.strip()
            if not s:
                raise _Unreadable(f"{what} is an empty string; give a number")
            if _FLOAT_RE.match(s):
                return _real_from_object(float(s), what) * self._scale, None
            if s.lower() in ("nan", "inf", "-inf", "+inf", "infinity"):
                raise _Unreadable(f"{what} ({_short(x)}) is not a finite number")
            if not self.accept_strings:
                raise _Unreadable(f"{what} is text ({_short(x)}); this question wants a plain number (no units, no quotes)")
            if len(s) > 80:
                raise _Unreadable(f"can't read {what} ({_short(x)}) as a quantity; write e.g. '14 GB' or '20 ms'")
            try:
                value, dim = _parse_quantity(s, self.dimension)
            except RuntimeError:
                raise
            except Exception as exc:
                raise _Unreadable(f"can't read {what} ({_short(x)}): {_first_sentence(exc)}") from None
            if not math.isfinite(value):
                raise _Unreadable(f"{what} ({_short(x)}) is not a finite number")
            return (value * self._scale, None) if dim is None else (value, dim)
        if hasattr(x, "value") and hasattr(x, "dimension") and type(x).__module__.startswith("course_lib"):
            value = _real_from_object(getattr(x, "value"), what)
            dim = _norm_dimension(getattr(x, "dimension"))
            return (value * self._scale, None) if dim is None else (value, dim)
        return _real_from_object(x, what) * self._scale, None

    def _read_expression(self, x):
        import sympy

        if is_placeholder(x):
            raise _NotAttempted
        if isinstance(x, str):
            s = x.strip()
            if not self.accept_strings:
                raise _Unreadable("this question wants a sympy expression, not text")
            if not s or len(s) > 300 or not _SAFE_EXPR_RE.match(s) or "__" in s:
                raise _Unreadable(f"can't read {_short(x)} as a formula; use symbols {self._symbol_names()}, numbers and + - * / ** ( )")
            from sympy.parsing.sympy_parser import (convert_xor, implicit_multiplication, parse_expr,
                                                    standard_transformations)

            allowed = _expression_globals()
            for name in re.findall(r"([A-Za-z_]\w*)\(", s):
                if name in self._symbol_map:
                    continue
                if name not in ("sqrt", "exp", "log", "Abs", "abs", "Min", "Max", "min", "max"):
                    raise _Unreadable(f"{_short(x)} uses the function {name}(), which formulas here can't use; "
                                      "allowed: sqrt, exp, log, Abs, Min, Max")
            local = dict(self._symbol_map)
            try:
                expr = parse_expr(s, local_dict=local, global_dict=allowed, evaluate=False,
                                  transformations=(standard_transformations
                                                   + (convert_xor, implicit_multiplication)))
            except Exception as exc:
                raise _Unreadable(f"can't read {_short(x)} as a formula: check the brackets and operators "
                                  f"({type(exc).__name__})") from None
        elif type(x).__module__.startswith("sympy"):
            expr = x
        elif isinstance(x, (int, float, numbers.Rational)) and not isinstance(x, bool):
            if isinstance(x, float) and not math.isfinite(x):
                raise _Unreadable("your answer is not a finite number")
            expr = sympy.nsimplify(x, rational=True) if isinstance(x, float) else sympy.Rational(x)
        elif x is None:
            raise _Unreadable("your answer is None: did you forget to assign a value?")
        else:
            if isinstance(x, (list, tuple, set, dict)) and _contains_placeholder(x):
                raise _NotAttempted
            raise _Unreadable(f"your answer is a {type(x).__name__}; give a sympy expression")
        if not isinstance(expr, sympy.Expr):
            raise _Unreadable(f"your answer ({_short(x)}) is not an algebraic expression")
        free = expr.free_symbols
        unknown = sorted(s.name for s in free if s.name not in self._symbol_map)
        if unknown:
            raise _Unreadable(f"your expression uses {', '.join(unknown)}, which this question does not define; "
                              f"use {self._symbol_names()}")
        expr = expr.xreplace({s: self._symbol_map[s.name] for s in free})
        if self._too_big(expr):
            raise _Unreadable("your expression contains numbers too large to check")
        return expr

    def _symbol_names(self) -> str:
        return ", ".join(s.name for s in self.symbols) or "numbers only"

    @staticmethod
    def _too_big(expr) -> bool:
        import sympy

        for atom in expr.atoms(sympy.Number):
            try:
                if abs(float(atom)) > 1e30:
                    return True
            except (TypeError, OverflowError, ValueError):
                return True
        return len(str(expr)) > 2000

    def _sym_equal(self, a, b) -> bool:
        """Symbolic equivalence: a float screen at three points, then simplify(a - b) == 0.

        The screen evaluates with Python floats (see :func:`_numeric_value`), so an answer such
        as ``9**9**9**9`` overflows to "not equal" instead of building a giant integer."""
        import sympy

        for point in self._points:
            va = _numeric_value(a, point)
            vb = _numeric_value(b, point)
            if va is None or vb is None or not cmath_isclose(va, vb):
                return False
        try:
            if sympy.simplify(a - b) == 0:
                return True
            return bool((a - b).equals(0))
        except Exception:
            return False

    @staticmethod
    def _choice_key(value):
        if isinstance(value, str):
            return ("s", " ".join(value.strip().lower().split()))
        if isinstance(value, bool):
            return ("b", value)
        if isinstance(value, numbers.Real):
            try:
                return ("n", float(value))
            except (OverflowError, ValueError, TypeError):
                return ("r", repr(value))
        try:
            hash(value)
            return ("o", value)
        except TypeError:
            return ("r", repr(value))

    def _outputs(self, fn) -> list[float] | None:
        out = []
        for (a, k), _ in self.cases:
            try:
                base, dim = self._read_number(fn(*a, **k))
            except Exception:
                return None
            if dim is not None and dim != self.dimension:
                return None
            out.append(base)
        return out

    # ---- checking --------------------------------------------------------------------------

    def _result(self, status: str, feedback: str, strict: bool) -> Result:
        return Result(status=status, feedback=feedback, question=self.id, set=self.set, points=self.points,
                      objective=self.objective, strict=strict)

    def evaluate(self, answer, *, strict: bool = False) -> Result:
        """The Result for ``answer`` without displaying it or raising (``strict`` is only recorded)."""
        try:
            if self.kind == "numeric":
                status, feedback = self._check_numeric(answer)
            elif self.kind == "expression":
                status, feedback = self._check_expression(answer)
            elif self.kind == "function":
                status, feedback = self._check_function(answer)
            else:
                status, feedback = self._check_choice(answer)
        except _NotAttempted:
            status, feedback = NOT_ATTEMPTED, self._not_attempted_text()
        except _Unreadable as exc:
            status, feedback = INCORRECT, _sentence(str(exc))
        except RecursionError:
            status, feedback = INCORRECT, "Your answer is nested too deeply to read."
        except Exception as exc:  # a bug in the checker must not become a learner-facing traceback
            status, feedback = INCORRECT, f"Internal checker error ({type(exc).__name__}: {exc}); please report it."
        return self._result(status, feedback, strict)

    def check(self, answer, strict: bool = False) -> Result:
        """Check ``answer``, display the result in Jupyter and return it.

        With ``strict=True`` (nbgrader grade cells) an incorrect or missing answer raises
        ``AssertionError`` carrying the feedback.
        """
        result = self.evaluate(answer, strict=strict)
        result._show()
        if strict and not result.correct:
            raise AssertionError(str(result))
        return result

    def _not_attempted_text(self) -> str:
        if self.kind == "function":
            return "Write the body of the function (replace `raise NotImplementedError`)."
        return "Replace `____` with your answer."

    def _check_numeric(self, answer):
        value, dim = self._read_number(answer)
        if dim is not None and dim != self.dimension:
            return INCORRECT, (f"{_short(answer)} is {_NOUNS.get(dim, dim)}, but this question asks for "
                               f"{_NOUNS[self.dimension]}. Check the dimension of your result.")
        if self._close(value, self._expected_base):
            return CORRECT, ""
        for prepared, m in self._matchers:
            if self._close(value, prepared, m.rel_tol):
                return INCORRECT, m.feedback
        return INCORRECT, self._generic_numeric_feedback(value)

    def _generic_numeric_feedback(self, value: float) -> str:
        e = self._expected_base
        if e == 0 or value == 0:
            return "Not yet right. Re-check your calculation."
        if (value > 0) != (e > 0):
            return "Your answer has the wrong sign."
        ratio = value / e
        tol = max(self.rel_tol, 1e-12)
        if abs(ratio - 1) <= 5 * tol:
            return (f"Close, but outside the tolerance (±{self.rel_tol:.2%}): avoid rounding intermediate "
                    "results and check the constants you used.")
        if ratio >= 10 or ratio <= 0.1:
            size = "large" if ratio > 1 else "small"
            return (f"Your answer is much too {size} (by more than a factor of 10). Check unit "
                    "conversions (k, M, G; ms vs s) and whether you multiplied where you should divide.")
        return f"Your answer is too {'high' if ratio > 1 else 'low'}. Re-check each factor."

    def _check_expression(self, answer):
        expr = self._read_expression(answer)
        if self._sym_equal(expr, self._expected_expr):
            return CORRECT, ""
        for prepared, m in self._matchers:
            if self._sym_equal(expr, prepared):
                return INCORRECT, m.feedback
        return INCORRECT, "Not equivalent to the expected formula. Re-check each factor and its exponent."

    def _run_function(self, fn, name: str):
        """(status, feedback, outputs-or-None) for calling ``fn`` on every case."""
        outputs: list[float] = []
        failures = []
        for (a, k), expected in self.cases:
            call = _call_repr(name, a, k)
            try:
                got = fn(*a, **k)
            except NotImplementedError:
                return NOT_ATTEMPTED, self._not_attempted_text(), None
            except RecursionError:
                return INCORRECT, f"{call} recursed without end.", None
            except Exception as exc:
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                return INCORRECT, f"{call} raised {type(exc).__name__}" + (f": {msg}" if msg else "") + ".", None
            if is_placeholder(got):
                return NOT_ATTEMPTED, self._not_attempted_text(), None
            try:
                value, dim = self._read_number(got, what=f"the result of {call}")
            except _NotAttempted:
                return NOT_ATTEMPTED, self._not_attempted_text(), None
            except _Unreadable as exc:
                return INCORRECT, _sentence(str(exc)), None
            if dim is not None and dim != self.dimension:
                return INCORRECT, (f"{call} returned {_short(got)}, which is {_NOUNS.get(dim, dim)}; "
                                   f"the function should return {_NOUNS[self.dimension]}."), None
            outputs.append(value)
            if not self._close(value, expected):
                failures.append((call, got))
        if not failures:
            return CORRECT, "", outputs
        call, got = failures[0]
        passed = len(self.cases) - len(failures)
        return INCORRECT, (f"{call} returned {_short(got, 40)}, which is not right "
                           f"({passed} of {len(self.cases)} test cases pass)."), outputs

    def _check_function(self, answer):
        if is_placeholder(answer):
            raise _NotAttempted
        if not callable(answer) or isinstance(answer, type):
            raise _Unreadable(f"your answer is {_short(answer)}; pass your function itself (without calling it)")
        name = getattr(answer, "__name__", "f")
        if not isinstance(name, str) or not _ID_RE.match(name):
            name = "f"
        status, feedback, outputs = self._run_function(answer, name)
        if status != INCORRECT or outputs is None or len(outputs) != len(self.cases):
            return status, feedback
        for prepared, m in self._matchers:
            if all(self._close(o, p, m.rel_tol) for o, p in zip(outputs, prepared)):
                return INCORRECT, m.feedback
        return INCORRECT, feedback

    def _check_choice(self, answer):
        if _contains_placeholder(answer):
            raise _NotAttempted
        key = self._choice_key(answer)
        keys = [self._choice_key(o) for o in self.options]
        if key not in keys:
            raise _Unreadable(f"your answer {_short(answer)} is not one of the options: "
                              + ", ".join(_short(o, 40) for o in self.options))
        if key == self._choice_key(self.expected):
            return CORRECT, ""
        for prepared, m in self._matchers:
            if prepared == key:
                return INCORRECT, m.feedback
        return INCORRECT, "Not this one. Re-read the options and think about which quantity limits the time."

    # ---- hints, solution, bank -------------------------------------------------------------

    def hint(self, n: int | None = None) -> Hint:
        """Show hint ``n`` (1-based), or the next one on each call without ``n``."""
        if not self.hints:
            h = Hint(self.id, 0, 0, "No hints for this question.")
            h._show()
            return h
        total = len(self.hints)
        if n is None:
            n = min(self._hints_seen + 1, total)  # the next unseen hint; the last one repeats
        else:
            from course_lib.core.validation import require_count

            n = require_count("hint number", n, minimum=1)
            if n > total:
                raise ValueError(f"{self.id} has {total} hint(s); hint number must be 1..{total}, got {n}")
        self._hints_seen = max(self._hints_seen, n)
        h = Hint(self.id, n, len(self.hints), self.hints[n - 1])
        h._show()
        return h

    def solution(self) -> Solution:
        """Show the worked solution (honour system: try first!)."""
        s = Solution(self.id, self.solution_text or "No written solution for this question.")
        s._show()
        return s

    @property
    def bank(self) -> tuple[Mistake, ...]:
        """Every recognised wrong answer: the explicit mistakes, then those the detectors add.
        Each ``value`` is an answer a learner could give that earns exactly that ``feedback``."""
        return tuple(self._bank)

    def __repr__(self) -> str:
        return f"<Question {self.set}.{self.id} ({self.kind}, {_fmt(self.points)} pt): {self.objective}>"


def cmath_isclose(a: complex, b: complex, rel: float = 1e-9) -> bool:
    """Close in the relative sense (or both essentially zero); False for inf/nan."""
    try:
        diff = abs(a - b)
    except OverflowError:
        return False
    if not math.isfinite(diff):
        return False
    return diff <= rel * max(abs(a), abs(b)) or diff < 1e-12


def _expression_globals() -> dict:
    """The only names a formula typed as text may use besides the question's symbols (anything
    else becomes an unknown symbol): no sympy function that could run for ages on a big argument."""
    import sympy

    return {
        "Integer": sympy.Integer, "Float": sympy.Float, "Rational": sympy.Rational, "Symbol": sympy.Symbol,
        "Add": sympy.Add, "Mul": sympy.Mul, "Pow": sympy.Pow,
        "sqrt": sympy.sqrt, "exp": sympy.exp, "log": sympy.log, "Abs": sympy.Abs, "abs": sympy.Abs,
        "Min": sympy.Min, "Max": sympy.Max, "min": sympy.Min, "max": sympy.Max, "pi": sympy.pi,
        "__builtins__": {},
    }


def _numeric_value(expr, point: dict[str, float]) -> complex | None:
    """``expr`` evaluated with complex floats at ``point`` (symbol name -> value); None when it
    cannot be evaluated or overflows.  Never builds exact big numbers."""
    import cmath

    import sympy

    def ev(e, depth=0):
        if depth > 200:
            raise OverflowError
        if e.is_Number:
            return complex(float(e))
        if e.is_Symbol:
            return complex(point[e.name])
        if e.is_NumberSymbol or e is sympy.I:
            return complex(e.evalf(20))
        args = [ev(a, depth + 1) for a in e.args]
        if e.is_Add:
            return sum(args, 0j)
        if e.is_Mul:
            out = 1 + 0j
            for v in args:
                out *= v
            return out
        if e.is_Pow:
            base, exp = args
            if base == 0 and exp.real <= 0:
                raise ZeroDivisionError
            return base ** exp
        fname = type(e).__name__
        if fname == "Abs":
            return complex(abs(args[0]))
        fn = getattr(cmath, fname.lower(), None) if fname in ("exp", "log", "sqrt", "sin", "cos", "tan") else None
        if fn is not None and len(args) == 1:
            return fn(args[0])
        if fname in ("Max", "Min") and all(v.imag == 0 for v in args):
            return complex((max if fname == "Max" else min)(v.real for v in args))
        raise TypeError(f"can't evaluate {fname}")

    try:
        v = ev(expr)
    except Exception:
        return None
    if not (math.isfinite(v.real) and math.isfinite(v.imag)):
        return None
    return v


def _sentence(text: str) -> str:
    """Capitalised, ending in one full stop (or ? / !)."""
    text = text.strip()
    if not text:
        return text
    text = text[:1].upper() + text[1:]
    return text if text[-1] in ".?!…" else text + "."


def validate_set(module) -> list[Question]:
    """Check an exNN module's ``QUESTIONS`` and return them; raises ValueError on a broken set."""
    name = module.__name__.rsplit(".", 1)[-1]
    questions = getattr(module, "QUESTIONS", None)
    if not isinstance(questions, (list, tuple)) or not questions:
        raise ValueError(f"{module.__name__} must define a non-empty list QUESTIONS")
    seen = set()
    for q in questions:
        if not isinstance(q, Question):
            raise ValueError(f"{module.__name__}.QUESTIONS contains {q!r}, not a Question")
        if q.set != name:
            raise ValueError(f"{module.__name__}: question {q.id} says set={q.set!r}, expected {name!r}")
        if q.id in seen:
            raise ValueError(f"{module.__name__}: duplicate question id {q.id!r}")
        seen.add(q.id)
        if getattr(module, q.id, None) is not q:
            raise ValueError(f"{module.__name__}: question {q.id} must be bound to the module name {q.id!r}")
    return list(questions)
