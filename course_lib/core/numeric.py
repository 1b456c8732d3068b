"""Every formula of the course as a checked numeric function: the public form of the generated code.

Lessons: 06, 07, 09

``course_lib.core.formulas`` holds each formula once, as a sympy expression;
``python -m course_lib.core.codegen`` prints it as plain Python into the private
``course_lib.core._generated``, which the estimator calls after validating its own arguments.
This module offers the same functions to lessons and to ``course_lib.measure``, with the checks
the library promises everywhere: each argument is checked against the kind its sympy symbol
declares (an integer count, a non-negative quantity, a real number; see
:data:`course_lib.core._generated.ARGUMENTS`), within the limits of :mod:`course_lib.core.validation`,
and a result that is not finite (the arguments overflow a float) is refused, naming the formula.

    >>> from course_lib.core import numeric
    >>> numeric.weight_bytes(7e9, 2)
    14000000000.0
    >>> numeric.memory_time(14e9, 1008e9, 1.0)      # seconds
    0.013888888888888888

``numeric.raw`` holds the same functions unchecked, exactly as generated: for the library's own modules,
which check their arguments once where a learner calls them and then evaluate many formulas, and for
sympy symbols (an expression question's reference evaluates a formula on symbols). ``numeric.ARGUMENTS``
gives each formula's arguments and their kinds.

The names are the formulas' own (``numeric.weight_bytes`` is the formula; ``course_lib.weight_bytes`` is
the estimator's function taking a model and a precision), so this module is not flattened into
``course_lib.core``.
"""
from __future__ import annotations

import functools
import inspect
import math
import types
from typing import Callable

from course_lib.core import _generated
from course_lib.core.validation import require_count, require_nonnegative, require_real

__all__ = sorted(_generated.ARGUMENTS)

#: formula name -> ((argument, kind), ...), the kinds its sympy symbols declare
ARGUMENTS: dict[str, tuple[tuple[str, str], ...]] = _generated.ARGUMENTS
#: every formula unchecked, as generated (numbers or sympy symbols in, the expression's value out)
raw = types.SimpleNamespace(**{_n: getattr(_generated, _n) for _n in __all__})


#: The check each argument kind gets. Zero is accepted for the positive kinds too: the library evaluates
#: terms on their own (a weights-only step has context 0; attention-only FLOPs have block_params 0), and a
#: zero that makes a denominator vanish is refused below, naming the formula.
_CHECKS: dict[str, Callable] = {
    "count1": require_count,
    "count0": require_count,
    "positive": require_nonnegative,
    "nonnegative": require_nonnegative,
    "real": require_real,
}


#: formulas whose value may be negative (a fitted intercept); every other formula's value is a count, a size, a
#: time or a rate, and a negative one is refused, naming the arguments that gave it
SIGNED: frozenset[str] = frozenset({"fixed_cost_fit_fixed_time"})

#: what a formula needs of its arguments together, beyond each one's kind: (smaller, larger, why), checked as
#: smaller <= larger
RELATIONS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "expected_experts": (("experts_per_token", "experts", "each token picks experts_per_token of the experts"),),
    "sessions_that_fit": (("weights_bytes", "capacity", "the weights must fit in memory before any session"),),
}


def _listing(values: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


def _checked(name: str) -> Callable:
    raw = getattr(_generated, name)
    kinds = dict(_generated.ARGUMENTS[name])
    signature = inspect.signature(raw)

    @functools.wraps(raw)
    def formula(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}{signature}: {exc}") from None
        values = {arg: _CHECKS[kinds[arg]](arg, value) for arg, value in bound.arguments.items()}
        for small, large, why in RELATIONS.get(name, ()):
            if small in values and large in values and values[small] > values[large]:
                raise ValueError(f"{name}: {small} ({values[small]!r}) must be <= {large} ({values[large]!r}): {why}")
        try:
            result = raw(**values)
        except ZeroDivisionError:
            raise ValueError(f"{name}: the arguments {_listing(values)} make a denominator of "
                             f"{raw.__doc__.split('sympy: ')[-1].split(chr(10))[0].strip()} zero") from None
        except OverflowError:
            raise ValueError(f"{name}: the arguments {_listing(values)} overflow a float") from None
        if isinstance(result, float) and not math.isfinite(result):
            raise ValueError(f"{name}: the arguments {', '.join(values)} give a result that is not a finite "
                             f"number ({result}); each is checked on its own, but together they overflow")
        if name not in SIGNED and not isinstance(result, bool) and result < 0:
            raise ValueError(f"{name}: the arguments {_listing(values)} give a negative value ({result:g}), which "
                             f"{name} cannot be: check that each is what its name says")
        return result

    formula.__doc__ = (raw.__doc__ or "") + (
        "\n    Arguments are checked: " + ", ".join(f"{a} ({k})" for a, k in kinds.items()) + ".\n")
    return formula


for _name in __all__:
    globals()[_name] = _checked(_name)
del _name
