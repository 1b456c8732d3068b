"""The expression evaluator: a formula answer read safely and compared with the expected one.

Used by the expression questions (:mod:`course_lib.checks.expression`), which every exercise set
has (``ex01`` ... ``ex09``, lessons 01-09, and ``_demo``).

Reading.  A formula typed as text is never given to ``eval``, ``sympify`` or ``parse_expr``: it is
tokenised and parsed here (recursive descent) into a small tree of numbers, the question's
symbols, the constants ``pi`` and ``e``, ``+ - * / ** ^ ( )``, implicit multiplication
(``2 L H``, ``2(L + 1)``) and the calls of :data:`ALLOWED_FUNCTIONS`.  Attribute access (``.``
after a name), any other name followed by ``(`` and any other character are refused.  The tree is
checked against :data:`course_lib.checks.answers.LIMITS` (text length, nodes, nesting, numeral
digits, the size of every number and of every power of numbers, polynomial degree, terms once
multiplied out) *before* the sympy expression is built from it node by node, so nothing that could
take long (``10**10000000``, ``pi.evalf(1000000)``, ``(a+b+c)**1000``) is ever computed.  A sympy
expression given as an object is printed (after a bounded walk checks its size and its symbols)
and read back by the same parser: one reader, one set of limits, whatever the answer's form.

Comparing.  Two formulas are equivalent when a float screen at three points agrees and
``simplify(a - b)`` is zero; the screen evaluates with Python complex floats, so a huge power
overflows to "not equal" instead of building a giant integer.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import cmath
import math
import numbers
import random
import re
from fractions import Fraction

from course_lib.checks.answers import LIMITS, NotAttempted, Opaque, PrintedExpression, Unreadable, short
from course_lib.checks.placeholder import contains_placeholder, is_placeholder
from course_lib.core.validation import require_positive

__all__ = ["ALLOWED_FUNCTIONS", "CONSTANTS", "parse_formula", "parse_expression", "sample_points", "equivalent",
           "cmath_isclose"]

#: The functions a formula may call (name -> (sympy function name, fewest arguments, most arguments)).
_FUNCTIONS = {
    "sqrt": ("sqrt", 1, 1), "exp": ("exp", 1, 1), "log": ("log", 1, 2),
    "Abs": ("Abs", 1, 1), "abs": ("Abs", 1, 1),
    "Min": ("Min", 1, 8), "Max": ("Max", 1, 8), "min": ("Min", 1, 8), "max": ("Max", 1, 8),
}
#: The functions a formula typed as text may call.
ALLOWED_FUNCTIONS = tuple(_FUNCTIONS)
#: The constants a formula may name (unless the question has a symbol of that name).
CONSTANTS = ("pi", "e", "E")

_ALLOWED_TEXT = "sqrt, exp, log, Abs, Min, Max"
_TOKEN_RE = re.compile(
    r"""(?P<space>\s+)
      | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+\-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>\*\*|[-+*/^(),])""",
    re.VERBOSE | re.ASCII,
)


def _symbol_names(symbols) -> str:
    return ", ".join(s.name for s in symbols) or "numbers only"


def _usage(x, symbols) -> str:
    return (f"can't read {short(x)} as a formula; use symbols {_symbol_names(symbols)}, "
            "numbers and + - * / ** ( )")


# ---- tokens and tree -----------------------------------------------------------------------------


def _tokens(text: str, x, symbols) -> list[tuple[str, str]]:
    """(kind, text) for each token of ``text``: number, name or op.  A character no token starts with
    ends the list with an ("error", message) token, raised when the parser reaches it, so that the
    learner hears of the first problem in reading order (``open('x')``: the function, not the quote)."""
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            char = text[pos]
            if char == ".":
                why = (f"{short(x)} uses '.', attribute access, which formulas here can't use; "
                       "write sqrt(x), not x.sqrt()")
            elif char == "_" or char.isalpha():
                why = (f"{short(x)} contains {char!r}: names are ASCII letters, digits and '_'; "
                       f"use symbols {_symbol_names(symbols)}")
            else:
                why = f"{_usage(x, symbols)} ({char!r} is not allowed)"
            out.append(("error", why))
            break
        kind = m.lastgroup
        if kind != "space":
            out.append((kind, m.group()))
        pos = m.end()
    return out


class _Parser:
    """Recursive descent over the tokens, Python's precedence (``**``/``^`` right-associative and
    binding tighter than a sign, so ``-x**2`` is ``-(x**2)``; implicit multiplication binds like
    ``*``).  Nodes are tuples: ("num", text), ("name", text), ("neg", a), ("add"|"sub"|"mul"|"div"|
    "pow", a, b), ("call", name, [args])."""

    def __init__(self, tokens, x, symbols, symbol_names):
        self.tokens, self.pos, self.depth, self.nodes = tokens, 0, 0, 0
        self.x, self.symbols, self.symbol_names = x, symbols, symbol_names

    def fail(self, why: str = "check the brackets and operators"):
        raise Unreadable(f"can't read {short(self.x)} as a formula: {why}")

    def peek(self):
        tok = self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")
        if tok[0] == "error":
            raise Unreadable(tok[1])
        return tok

    def take(self):
        tok = self.peek()
        self.pos += 1
        return tok

    def node(self, *parts):
        self.nodes += 1
        if self.nodes > LIMITS.max_nodes:
            raise Unreadable(f"your formula is too long to check (more than {LIMITS.max_nodes} numbers, "
                             "names and operators); simplify it first")
        return parts

    def enter(self):
        self.depth += 1
        if self.depth > LIMITS.max_depth:
            raise Unreadable(f"your formula is nested too deeply to check (more than {LIMITS.max_depth} "
                             "levels of brackets, signs and powers)")

    def parse(self):
        if not self.tokens:
            self.fail("it is empty")
        tree = self.expr()
        kind, text = self.peek()
        if kind != "end":
            self.fail(f"unexpected {text!r}")
        return tree

    def expr(self):
        left = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            left = self.node("add" if op == "+" else "sub", left, self.term())
        return left

    def _starts_factor(self, tok) -> bool:
        return tok[0] in ("number", "name") or tok == ("op", "(")

    def term(self):
        left = self.factor()
        while True:
            tok = self.peek()
            if tok in (("op", "*"), ("op", "/")):
                self.take()
                left = self.node("mul" if tok[1] == "*" else "div", left, self.factor())
            elif self._starts_factor(tok):  # implicit multiplication: "2 L", "2(L+1)", "(a)(b)"
                if tok[0] == "number" and self.tokens[self.pos - 1][0] == "number":
                    self.fail("two numbers in a row")
                left = self.node("mul", left, self.factor())
            else:
                return left

    def factor(self):
        tok = self.peek()
        if tok in (("op", "+"), ("op", "-")):
            self.take()
            self.enter()
            operand = self.factor()
            self.depth -= 1
            return operand if tok[1] == "+" else self.node("neg", operand)
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek() in (("op", "**"), ("op", "^")):
            self.take()
            self.enter()
            exponent = self.factor()
            self.depth -= 1
            return self.node("pow", base, exponent)
        return base

    def atom(self):
        kind, text = self.take()
        if kind == "number":
            return self.node("num", text)
        if kind == "name":
            if "__" in text:
                self.fail(f"{text!r} is not a name formulas here can use")
            if self.peek() == ("op", "(") and text not in self.symbol_names:
                if text not in _FUNCTIONS:
                    raise Unreadable(f"{short(self.x)} uses the function {text}(), which formulas here can't "
                                     f"use; allowed: {_ALLOWED_TEXT}")
                return self.call(text)
            return self.node("name", text)
        if (kind, text) == ("op", "("):
            self.enter()
            inner = self.expr()
            if self.take() != ("op", ")"):
                self.fail("a bracket is not closed")
            self.depth -= 1
            return inner
        if kind == "end":
            self.fail("it ends too early")
        self.fail(f"unexpected {text!r}")

    def call(self, name):
        self.take()  # "("
        self.enter()
        args = [self.expr()]
        while self.peek() == ("op", ","):
            self.take()
            args.append(self.expr())
        if self.take() != ("op", ")"):
            self.fail(f"the bracket of {name}( is not closed")
        self.depth -= 1
        _, low, high = _FUNCTIONS[name]
        if not low <= len(args) <= high:
            count = f"{low}" if low == high else f"{low} to {high}"
            self.fail(f"{name}() takes {count} argument(s), got {len(args)}")
        return self.node("call", name, args)


# ---- from the tree to sympy, within the limits ---------------------------------------------------


def _too_large(what: str = "numbers", small: bool = False) -> Unreadable:
    return Unreadable(f"your expression contains {what} too {'small' if small else 'large'} to check")


def _log10_abs(value) -> float | None:
    """log10 |value| for a sympy number (None for 0); refuses what is beyond a float."""
    try:
        v = abs(complex(value))
    except (TypeError, ValueError, OverflowError):
        raise _too_large() from None
    if not math.isfinite(v):
        raise _too_large()
    return None if v == 0 else math.log10(v)


def _numeral(text: str):
    """A typed numeral as an exact sympy Rational ("2.5" is 5/2), within the digit and size limits."""
    import sympy

    mantissa = re.split("[eE]", text)[0]
    if len(mantissa) > LIMITS.max_digits:
        raise Unreadable(f"the number {text[:20]}… in your formula has more than {LIMITS.max_digits} digits")
    value = float(text)  # decides the size before any exact arithmetic
    if math.isinf(value) or (value != 0 and math.log10(value) > LIMITS.max_log10):
        raise _too_large()
    if (value == 0 and mantissa.strip("0.")) or (value != 0 and math.log10(value) < -LIMITS.max_log10):
        raise _too_large(small=True)
    exact = Fraction(text)
    return sympy.Rational(exact.numerator, exact.denominator)


class _Built:
    """A sympy expression with its generous size estimates: polynomial degree and terms."""

    __slots__ = ("expr", "degree", "terms")

    def __init__(self, expr, degree: int, terms: int):
        if degree > LIMITS.max_degree:
            raise Unreadable(f"your formula's powers are too high to check (degree above {LIMITS.max_degree})")
        if terms > LIMITS.max_terms:
            raise Unreadable(f"your formula would have more than {LIMITS.max_terms} terms multiplied out; "
                             "simplify it first")
        self.expr, self.degree, self.terms = expr, degree, terms


def _build(tree, names: dict) -> _Built:
    """The sympy expression of a parsed tree; every power and number checked before it is computed."""
    import sympy

    kind = tree[0]
    if kind == "num":
        return _Built(_numeral(tree[1]), 0, 1)
    if kind == "name":
        value = names[tree[1]]
        return _Built(value, 1 if value.free_symbols else 0, 1)
    if kind == "neg":
        a = _build(tree[1], names)
        return _Built(-a.expr, a.degree, a.terms)
    if kind == "call":
        args = [_build(t, names) for t in tree[2]]
        fname = _FUNCTIONS[tree[1]][0]
        if fname == "exp" and args[0].expr.is_number:  # e**x stays within 10**±30
            lg = _log10_abs(args[0].expr)
            if lg is not None and 10 ** lg / math.log(10) > LIMITS.max_log10:
                raise _too_large("powers", small=bool(args[0].expr.is_extended_negative))
        fn = getattr(sympy, fname)
        return _Built(fn(*(a.expr for a in args)), max(a.degree for a in args), sum(a.terms for a in args))
    a, b = _build(tree[1], names), _build(tree[2], names)
    if kind in ("add", "sub"):
        return _Built(a.expr + b.expr if kind == "add" else a.expr - b.expr, max(a.degree, b.degree),
                      a.terms + b.terms)
    if kind == "mul":
        return _Built(a.expr * b.expr, a.degree + b.degree, a.terms * b.terms)
    if kind == "div":
        if b.expr == 0:
            raise Unreadable("your formula divides by zero")
        return _Built(a.expr / b.expr, a.degree + b.degree, a.terms * b.terms)
    assert kind == "pow", kind
    base, exponent = a.expr, b.expr
    if exponent.is_number:
        lg_exp = _log10_abs(exponent)
        if base.is_number:
            lg_base = _log10_abs(base)
            if lg_base is None:
                if exponent.is_extended_real and exponent < 0:
                    raise Unreadable("your formula divides by zero (0 to a negative power)")
            elif lg_exp is not None and abs(lg_base) * 10 ** lg_exp > LIMITS.max_log10:
                raise _too_large("powers", small=(lg_base > 0) != (exponent.is_extended_real and exponent > 0))
            return _Built(base ** exponent, 0, 1)
        n = 0 if lg_exp is None else abs(complex(exponent))
        if n > LIMITS.max_degree:
            raise Unreadable(f"your formula's powers are too high to check (exponent above {LIMITS.max_degree})")
        whole = max(1, math.ceil(n))
        return _Built(base ** exponent, a.degree * whole, math.comb(a.terms + whole - 1, whole))
    return _Built(base ** exponent, a.degree + b.degree, a.terms + b.terms)


def _names(tree, out: set) -> set:
    """Every name a tree uses (not the functions it calls)."""
    if tree[0] == "name":
        out.add(tree[1])
    elif tree[0] == "call":
        for t in tree[2]:
            _names(t, out)
    elif tree[0] != "num":
        for t in tree[1:]:
            _names(t, out)
    return out


def parse_formula(text: str, symbols, *, max_length: int | None = None, what=None):
    """The sympy expression of a formula typed as ``text``, in ``symbols`` (sympy Symbols, matched by
    name); raises Unreadable, with a message for the learner, for anything else or anything beyond
    :data:`~course_lib.checks.answers.LIMITS`.  Never evaluates the text as code."""
    import sympy

    x = text if what is None else what
    symbol_map = {s.name: s for s in symbols}
    limit = LIMITS.max_formula_text if max_length is None else max_length
    s = text.strip()
    if not s:
        raise Unreadable(_usage(x, symbols))
    if len(s) > limit:
        raise Unreadable(f"your formula is {len(s)} characters long; at most {limit} are read")
    tree = _Parser(_tokens(s, x, symbols), x, symbols, symbol_map).parse()
    used = _names(tree, set())
    unknown = sorted(n for n in used if n not in symbol_map and n not in CONSTANTS)
    for name in unknown:
        if name in _FUNCTIONS:
            raise Unreadable(f"{short(x)} names the function {name} without brackets; write {name}(...)")
    if unknown:
        raise Unreadable(f"your expression uses {', '.join(unknown)}, which this question does not define; "
                         f"use {_symbol_names(symbols)}")
    names = {"pi": sympy.pi, "e": sympy.E, "E": sympy.E, **symbol_map}
    expr = _build(tree, names).expr
    if expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise Unreadable("your formula is not finite (a division by zero?)")
    if _too_big(expr):
        raise _too_large()
    return expr


# ---- answers of every form -----------------------------------------------------------------------


def _too_big(expr) -> bool:
    """A number in the built expression beyond 10**30 (e.g. from 10**20 * 10**20)."""
    import sympy

    for atom in expr.atoms(sympy.Number):
        try:
            if abs(float(atom)) > 10.0 ** LIMITS.max_log10:
                return True
        except (TypeError, OverflowError, ValueError):
            return True
    return False


def _sympy_as_text(x, symbol_map, symbols) -> str:
    """A sympy expression object printed, after a bounded walk checks its size, its numbers and its
    symbols (so that printing and reading it back cost little)."""
    import sympy

    count = 0
    max_bits = int(LIMITS.max_log10 * 3.33) + 8
    for node in sympy.preorder_traversal(x):
        count += 1
        if count > 4 * LIMITS.max_nodes:
            raise Unreadable(f"your expression is too large to check (more than {LIMITS.max_nodes} parts); "
                             "simplify it first")
        if isinstance(node, sympy.Rational) and max(int(node.p).bit_length(), int(node.q).bit_length()) > max_bits:
            raise _too_large()
        if isinstance(node, (sympy.Sum, sympy.Product, sympy.Integral, sympy.Derivative, sympy.Limit)):
            raise Unreadable(f"your expression still contains an unevaluated {type(node).__name__}; call .doit() "
                             "on it (or use sympy.summation) to get a closed form")
    unknown = sorted({s.name for s in x.free_symbols if getattr(s, "name", None) not in symbol_map}
                     | {str(s) for s in x.free_symbols if not hasattr(s, "name")})
    if unknown:
        raise Unreadable(f"your expression uses {', '.join(unknown)}, which this question does not define; "
                         f"use {_symbol_names(symbols)}")
    return sympy.sstr(x)


def parse_expression(x, symbols, *, accept_strings: bool = True):
    """``x`` (a sympy expression, a number or, with ``accept_strings``, text) as a sympy expression
    in ``symbols`` (a question's sympy Symbols, matched by name); raises Unreadable/NotAttempted.

    Text is read by :func:`parse_formula`; a sympy expression is printed and read back by it too."""
    import sympy

    symbol_map = {s.name: s for s in symbols}
    if is_placeholder(x):
        raise NotAttempted
    if isinstance(x, PrintedExpression):  # a sympy object the learner's kernel printed (grading)
        return parse_formula(str(x), symbols, max_length=LIMITS.max_formula_printed, what=x)
    if isinstance(x, Opaque):
        raise Unreadable(f"your answer is a {x.type_name}; give a sympy expression")
    if isinstance(x, str):
        if not accept_strings:
            raise Unreadable("this question wants a sympy expression, not text")
        return parse_formula(x, symbols)
    if type(x).__module__.startswith("sympy"):
        if not isinstance(x, sympy.Expr):
            raise Unreadable(f"your answer ({short(x)}) is not an algebraic expression")
        text = _sympy_as_text(x, symbol_map, symbols)
        return parse_formula(text, symbols, max_length=LIMITS.max_formula_printed, what=x)
    if isinstance(x, (int, float, numbers.Rational)) and not isinstance(x, bool):
        if isinstance(x, float) and not math.isfinite(x):
            raise Unreadable("your answer is not a finite number")
        if isinstance(x, numbers.Integral) and abs(int(x)).bit_length() > int(LIMITS.max_log10 * 3.33) + 8:
            raise _too_large()
        try:
            expr = sympy.nsimplify(x, rational=True) if isinstance(x, float) else sympy.Rational(x)
        except (TypeError, ValueError):
            raise Unreadable(f"can't read your answer ({short(x)}) as a number") from None
        if _too_big(expr):
            raise _too_large()
        return expr
    if x is None:
        raise Unreadable("your answer is None: did you forget to assign a value?")
    if isinstance(x, (list, tuple, set, dict)) and contains_placeholder(x):
        raise NotAttempted
    raise Unreadable(f"your answer is a {type(x).__name__}; give a sympy expression")


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
    for name, v in (("a", a), ("b", b)):
        if isinstance(v, bool) or not isinstance(v, numbers.Number):
            raise TypeError(f"{name} must be a number, got {type(v).__name__}")
    rel = require_positive("rel", rel, maximum=1.0)
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
