"""The expression evaluator: a formula answer read safely and compared with the expected one.

Used by the expression questions (:mod:`course_lib.checks.expression`), which every exercise set
has (``ex01`` ... ``ex09``, lessons 01-09, and ``_demo``).
A formula typed as text is parsed with sympy using only the question's symbols, numbers,
``+ - * / ** ^ ( )`` and a few functions (sqrt, exp, log, Abs, Min, Max), so text can never run
code or a sympy function that takes ages.  Two formulas are equivalent when a float screen at
three points agrees and ``simplify(a - b)`` is zero; the screen evaluates with Python floats, so
``9**9**9**9`` overflows to "not equal" instead of building a giant integer.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import cmath
import math
import numbers
import random
import re

from course_lib.checks.answers import NotAttempted, Unreadable, short
from course_lib.checks.placeholder import contains_placeholder, is_placeholder

__all__ = ["ALLOWED_FUNCTIONS", "parse_expression", "sample_points", "equivalent", "cmath_isclose"]

#: The functions a formula typed as text may call.
ALLOWED_FUNCTIONS = ("sqrt", "exp", "log", "Abs", "abs", "Min", "Max", "min", "max")

_SAFE_EXPR_RE = re.compile(r"^[\w\s+\-*/^().,]*$")


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


def _symbol_names(symbols) -> str:
    return ", ".join(s.name for s in symbols) or "numbers only"


def _too_big(expr) -> bool:
    import sympy

    for atom in expr.atoms(sympy.Number):
        try:
            if abs(float(atom)) > 1e30:
                return True
        except (TypeError, OverflowError, ValueError):
            return True
    return len(str(expr)) > 2000


def parse_expression(x, symbols, *, accept_strings: bool = True):
    """``x`` (a sympy expression, a number or, with ``accept_strings``, text) as a sympy expression
    in ``symbols`` (a question's sympy Symbols, matched by name); raises Unreadable/NotAttempted."""
    import sympy

    symbol_map = {s.name: s for s in symbols}
    if is_placeholder(x):
        raise NotAttempted
    if isinstance(x, str):
        s = x.strip()
        if not accept_strings:
            raise Unreadable("this question wants a sympy expression, not text")
        if not s or len(s) > 300 or not _SAFE_EXPR_RE.match(s) or "__" in s:
            raise Unreadable(f"can't read {short(x)} as a formula; use symbols {_symbol_names(symbols)}, "
                             "numbers and + - * / ** ( )")
        from sympy.parsing.sympy_parser import (convert_xor, implicit_multiplication, parse_expr,
                                                standard_transformations)

        allowed = _expression_globals()
        for name in re.findall(r"([A-Za-z_]\w*)\(", s):
            if name in symbol_map:
                continue
            if name not in ALLOWED_FUNCTIONS:
                raise Unreadable(f"{short(x)} uses the function {name}(), which formulas here can't use; "
                                 "allowed: sqrt, exp, log, Abs, Min, Max")
        try:
            expr = parse_expr(s, local_dict=dict(symbol_map), global_dict=allowed, evaluate=False,
                              transformations=(standard_transformations
                                               + (convert_xor, implicit_multiplication)))
        except Exception as exc:
            raise Unreadable(f"can't read {short(x)} as a formula: check the brackets and operators "
                             f"({type(exc).__name__})") from None
    elif type(x).__module__.startswith("sympy"):
        expr = x
    elif isinstance(x, (int, float, numbers.Rational)) and not isinstance(x, bool):
        if isinstance(x, float) and not math.isfinite(x):
            raise Unreadable("your answer is not a finite number")
        expr = sympy.nsimplify(x, rational=True) if isinstance(x, float) else sympy.Rational(x)
    elif x is None:
        raise Unreadable("your answer is None: did you forget to assign a value?")
    else:
        if isinstance(x, (list, tuple, set, dict)) and contains_placeholder(x):
            raise NotAttempted
        raise Unreadable(f"your answer is a {type(x).__name__}; give a sympy expression")
    if not isinstance(expr, sympy.Expr):
        raise Unreadable(f"your answer ({short(x)}) is not an algebraic expression")
    free = expr.free_symbols
    unknown = sorted(s.name for s in free if s.name not in symbol_map)
    if unknown:
        raise Unreadable(f"your expression uses {', '.join(unknown)}, which this question does not define; "
                         f"use {_symbol_names(symbols)}")
    expr = expr.xreplace({s: symbol_map[s.name] for s in free})
    if _too_big(expr):
        raise Unreadable("your expression contains numbers too large to check")
    return expr


def sample_points(symbols, count: int = 3) -> list[dict[str, float]]:
    """``count`` points (symbol name -> value in [1.5, 9.5]) for the float screen; the same every run."""
    rng = random.Random(12345)
    return [{s.name: rng.uniform(1.5, 9.5) for s in symbols} for _ in range(count)]


def equivalent(a, b, points) -> bool:
    """Symbolic equivalence: a float screen at ``points``, then simplify(a - b) == 0."""
    import sympy

    for point in points:
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


def cmath_isclose(a: complex, b: complex, rel: float = 1e-9) -> bool:
    """Close in the relative sense (or both essentially zero); False for inf/nan."""
    try:
        diff = abs(a - b)
    except OverflowError:
        return False
    if not math.isfinite(diff):
        return False
    return diff <= rel * max(abs(a), abs(b)) or diff < 1e-12


def _numeric_value(expr, point: dict[str, float]) -> complex | None:
    """``expr`` evaluated with complex floats at ``point`` (symbol name -> value); None when it
    cannot be evaluated or overflows.  Never builds exact big numbers."""
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
