"""The placeholder ``____`` that every exercise notebook ships with.

Used by every exercise set (``ex01`` ... ``ex09`` for lessons 01-09, and ``_demo`` for the fixture
notebooks): learners import it as ``from course_lib.checks import exNN as q, ____`` and replace it
with their answer.  An unfilled notebook still runs top to bottom, because arithmetic, calls,
indexing and numpy ufuncs on the placeholder give the placeholder back; each question kind reads
it (or ``...``) as "not attempted".

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10
"""
from __future__ import annotations

__all__ = ["PLACEHOLDER", "____", "is_placeholder", "contains_placeholder"]

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


def contains_placeholder(value, depth: int = 0) -> bool:
    """True when ``value`` is the placeholder or a (shallowly) nested list/tuple/set/dict holding it."""
    if is_placeholder(value):
        return True
    if depth > 3:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(contains_placeholder(v, depth + 1) for v in list(value)[:50])
    if isinstance(value, dict):
        return any(contains_placeholder(v, depth + 1) for v in list(value.values())[:50])
    return False
