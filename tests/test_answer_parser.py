"""The answer reader as an attack surface, and as the one rule for numbers typed as text.

Formulas typed as text are parsed by ``course_lib.checks.evaluator`` (never ``eval``, ``sympify`` or
``parse_expr``), within ``course_lib.checks.answers.LIMITS``: the known attacks (a space before the
bracket defeated the old allowlist: ``Pow (10, 10000000)`` took 17 s, ``pi.evalf (1000000)`` 77 s)
return a clear "incorrect" at once.  Numbers typed as text follow one rule (thousands grouped in threes
by ``,`` ``_`` or a space; "1,5" refused as ambiguous), in the question's unit unless a unit is written.
Every expression question of every set still accepts its expected formula in each of its forms.
"""
from __future__ import annotations

import ast
import math
import pathlib
import re
import time
from datetime import timedelta

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_lib import checks
from course_lib.checks import _demo, ex01, ex06
from course_lib.checks.answers import LIMITS, Unreadable, read_number, split_number
from course_lib.checks import CORRECT, INCORRECT, STATUSES, ExpressionQuestion, NumericQuestion, Mistake
from course_lib.checks.evaluator import parse_expression, parse_formula

#: Each refusal below takes well under a millisecond; the old reader took 8 to 77 s on the first two.
#: The bound leaves a margin of several hundred times for a slow or busy machine.
ATTACK_BOUND_S = 0.5
#: A formula that is read and compared (float screen, then simplify) within the limits.
EVALUATE_BOUND_S = 3.0

SETS = {name: getattr(checks, name) for name in checks.available_sets()}
SETS["_demo"] = _demo
EXPRESSIONS = [(name, q.id) for name, module in SETS.items() for q in module.QUESTIONS
               if isinstance(q, ExpressionQuestion)]
N, b = sympy.symbols("N b", positive=True)


def _timed(q, answer):
    q.evaluate("N")  # sympy imported and warm before timing
    start = time.perf_counter()
    r = q.evaluate(answer)
    return r, time.perf_counter() - start


# --- attacks ------------------------------------------------------------------------------------

ATTACKS = [
    ("Pow (10, 10000000)", "Pow()"),              # 17 s before: the allowlist missed "Pow ("
    ("pi.evalf (1000000)", "attribute"),          # 77 s before
    ("pi.evalf(1000000)", "attribute"),
    ("N.evalf()", "attribute"),
    ("Pow(10, 10000000)", "Pow()"),
    ("Integer (10)**Integer (10000000)", "Integer()"),
    ("10**10000000", "too large"),
    ("10^10000000", "too large"),
    ("9**9**9**9", "too large"),
    ("2**2**2**2**2**2", "too large"),
    ("2**-10000000", "too small"),
    ("e**(10**30)", "too large"),
    ("exp(10**30)", "too large"),
    ("exp(exp(exp(exp(10))))", "too large"),
    ("pi**1000000", "too large"),
    ("sqrt(2)**100000", "too large"),
    ("(N+b)**1000", "too high"),
    ("N*b/8 + 1/(N+b)**1000 - 1/(N**2+2*N*b+b**2)**500", "too high"),
    ("N*b/8*" + "*".join(["(N+b)"] * 16) + "/" + "/".join(["(N+b)"] * 16), "terms"),
    ("N" + "**N" * 40, "nested too deeply"),
    ("(" * 100 + "N" + ")" * 100, "nested too deeply"),
    ("-" * 250 + "N", "nested too deeply"),
    ("1" * 250, "digits"),
    ("N*b/8" + "+0" * 148, "characters"),
    ("N" + "+N" * 149, "too long"),
    ("1e999*N", "too large"),
    ("1e-999*N", "too small"),
    ("__import__('os').system('true')", "'"),
    ("().__class__.__bases__[0]", "unexpected ')'"),
    ("N.__class__.__bases__[0]", "attribute"),
    ("N.__class__", "attribute"),
    ("lambda: 0", "':'"),
    ("[N]", "'['"),
    ("N; import os", "';'"),
    ("N if N else b", "N, b"),
    ("open('x')", "open()"),
    ("eval('N')", "eval()"),
    ("S('N')", "S()"),
    ("sympify('N')", "sympify()"),
    ("Symbol('x')", "Symbol()"),
    ("N @ b", "'@'"),
    ("N // b", "unexpected"),
    ("N % b", "'%'"),
    ("N == b", "'='"),
    ("N ** ", "ends too early"),
    ("sqrt", "without brackets"),
    ("max()", "unexpected ')'"),
    ("log(N, b, 2)", "1 to 2 argument"),
    ("1/0", "divides by zero"),
    ("0**-1", "divides by zero"),
    ("log(0)", "not finite"),
    ("2 3", "two numbers in a row"),
    ("N\u00b2", "'\u00b2'"),
    ("\u03b2*N", "ASCII"),
]


def _id(value) -> str:
    text = value if isinstance(value, str) else f"<{type(value).__name__}>"
    return text if len(text) <= 30 else text[:27] + "..."


@pytest.mark.parametrize("answer, fragment", ATTACKS, ids=[_id(a) for a, _ in ATTACKS])
def test_attack_strings_get_a_clear_verdict_at_once(answer, fragment):
    r, seconds = _timed(ex01.q5, answer)
    assert seconds < ATTACK_BOUND_S, f"{answer[:40]!r} took {seconds:.2f} s"
    assert r.status == INCORRECT and "Internal checker error" not in r.feedback, r.feedback
    assert fragment.lower() in r.feedback.lower(), r.feedback
    assert r.feedback.endswith("."), r.feedback


@pytest.mark.parametrize("make, fragment", [
    (lambda: sympy.Pow(10, 10**7, evaluate=False), "too large"),
    (lambda: sympy.Integer(10) ** 5000, "too large"),
    (lambda: (N + b) ** 1000, "too high"),
    (lambda: sympy.Add(*[N ** i for i in range(1, 400)]), "too large to check"),
    (lambda: sympy.Integer(10**5000), "too large"),
    (lambda: sympy.sin(N), "sin()"),
    (lambda: sympy.Symbol("x") * N, "x, which"),
    (lambda: sympy.Eq(N, b), "not an algebraic expression"),
    (lambda: sympy.Sum(N * b, (sympy.Symbol("j"), 1, 8)), ".doit()"),
])
def test_sympy_objects_are_read_back_within_the_same_limits(make, fragment):
    answer = make()
    r, seconds = _timed(ex01.q5, answer)
    assert seconds < ATTACK_BOUND_S, f"{type(answer).__name__} took {seconds:.2f} s"
    assert r.status == INCORRECT and fragment.lower() in r.feedback.lower(), r.feedback


HUGE = [(10**5000, "too large"), (-(10**5000), "too large"), (10**400, "too large"), (1e308 * 10, "finite"),
        ("1e999", "too large"), ("9" * 79, "too large")]


@pytest.mark.parametrize("answer, fragment", HUGE, ids=[_id(a) for a, _ in HUGE])
def test_numbers_too_large_are_refused_clearly(answer, fragment):
    for q, fragments in ((ex01.q6, (fragment,)), (ex01.q5, (fragment, "digits"))):
        r = q.evaluate(answer)
        assert r.status == INCORRECT and "Internal checker error" not in r.feedback, r.feedback
        assert any(f in r.feedback for f in fragments), r.feedback


def test_a_choice_question_refuses_a_huge_integer_clearly():
    r = ex01.q9.evaluate(10**5000)
    assert r.status == INCORRECT and "Internal checker error" not in r.feedback, r.feedback


def test_no_student_text_reaches_eval_sympify_or_parse_expr():
    """Statically: the reading modules call none of them.  At run time: sympy's own text readers never
    see the learner's text."""
    banned_names = {"eval", "exec", "compile", "__import__", "sympify", "parse_expr", "S"}
    banned_attributes = {"sympify", "parse_expr", "S", "eval"}
    root = pathlib.Path(checks.__file__).parent
    for name in ("evaluator", "answers", "expression", "numeric"):
        tree = ast.parse((root / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else None
                assert called not in banned_names, f"{name}.py line {node.lineno} calls {called}"
                assert not (isinstance(f, ast.Attribute) and f.attr in banned_attributes), \
                    f"{name}.py line {node.lineno} calls .{f.attr}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                assert "sympy_parser" not in ast.dump(node), f"{name}.py imports sympy's parser"


def test_sympy_text_readers_never_see_the_answer(monkeypatch):
    import importlib

    sympify_module = importlib.import_module("sympy.core.sympify")
    parser_module = importlib.import_module("sympy.parsing.sympy_parser")

    seen = []
    real = sympify_module.sympify

    def spy(a, *args, **kwargs):
        if isinstance(a, str):
            seen.append(a)
        return real(a, *args, **kwargs)

    monkeypatch.setattr(sympify_module, "sympify", spy)
    monkeypatch.setattr(parser_module, "parse_expr", lambda *a, **k: seen.append(a) or 1 / 0)
    answers = ["N*b/8", "N b / 8", "(N*b)/2^3", "Pow (10, 10000000)", "sqrt(N)*b", "Min(N, b)", "pi*N", "e**N"]
    for answer in answers:
        ex01.q5.evaluate(answer)
    assert not [s for s in seen if any(a in s for a in answers)], seen


# --- the one rule for numbers typed as text -----------------------------------------------------


@pytest.mark.parametrize("text, plain, rest", [
    ("1,234,567", "1234567", ""), ("1 234 567", "1234567", ""), ("1_234_567", "1234567", ""),
    ("1\u2009234\u2009567", "1234567", ""), ("1\u00a0234", "1234", ""), ("14,483,464,192 B", "14483464192", "B"),
    ("1,000.5", "1000.5", ""), ("12", "12", ""), ("14GB", "14", "GB"), ("14 GB", "14", "GB"), ("7B", "7", "B"),
    (".5", "0.5", ""), ("5.", "5.", ""), ("-3", "-3", ""), ("+3", "3", ""), ("\u22122", "-2", ""),
    ("14e9 B", "14e9", "B"), ("1,024 MiB", "1024", "MiB"),
])
def test_thousands_grouped_numbers(text, plain, rest):
    assert split_number(text) == (plain, rest)


@pytest.mark.parametrize("text", ["1,5", "1,2345", "0,500", "1.234,5", "1_0", "1,234 567", "1 5", "1e5.5", "3,14 ms"])
def test_ambiguous_separators_are_refused_with_the_rule(text):
    with pytest.raises(Unreadable, match="decimal point as '.'"):
        split_number(text)
    for q in (ex01.q6, ex06.q8):
        r = q.evaluate(text)
        assert r.status == INCORRECT and "group thousands in threes" in r.feedback, r.feedback


def test_a_bare_number_is_in_the_question_unit_whatever_its_form():
    # ex01 q6 asks in GB: a grouped or plain byte count typed bare is read as GB (much too large) alike.
    forms = ["14,483,464,192", "14483464192", "14 483 464 192", "14_483_464_192", 14483464192]
    results = [ex01.q6.evaluate(a) for a in forms]
    assert {r.status for r in results} == {INCORRECT}
    assert len({r.feedback for r in results}) == 1, [r.feedback for r in results]
    assert ex01.q6.evaluate("14,483,464,192 B").correct  # an explicit unit is read as written
    assert ex01.q6.evaluate("14.48 GB").correct and ex01.q6.evaluate("14.48").correct
    # ex06 q8 asks in ms: "2,200" is 2200 ms, as 2200 and "2200" are.
    r = [ex06.q8.evaluate(a) for a in ("2,200", "2200", 2200, "2 200")]
    assert len({(x.status, x.feedback) for x in r}) == 1, r
    assert ex06.q8.evaluate("2.2").correct and ex06.q8.evaluate("2.2 ms").correct
    assert ex06.q8.evaluate("2,200 us").correct


def test_grouped_numbers_are_numbers_even_where_text_is_not_accepted():
    q = NumericQuestion(id="q1", set="ex99", objective="O1 test", expected=1_000_000, accept_strings=False,
                        mistakes=[Mistake(1, "a"), Mistake(2, "b"), Mistake(3, "c")])
    for form in ("1,000,000", "1 000 000", "1_000_000", "1000000", "1e6"):
        assert q.evaluate(form).correct, form
    assert "plain number" in q.evaluate("1,000,000 B").feedback


@settings(max_examples=300, deadline=timedelta(seconds=2), suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(max_size=90), st.text(alphabet="0123456789,._ eE+-\u2009kMGBmsi", max_size=30)))
def test_any_text_is_a_number_or_a_documented_refusal(text):
    for accept in (True, False):
        try:
            value, dim = read_number(text, scale=1e9, dimension="bytes", accept_strings=accept)
        except Unreadable as exc:
            assert str(exc).strip()
        else:
            assert math.isfinite(value) and dim in (None, "bytes", "time", "bandwidth", "params", "flops",
                                                      "flop_rate", "number")


# --- formulas: right answers still pass -----------------------------------------------------------


def _forms(q):
    """The expected formula as a learner might give it: the object, its symbols without assumptions,
    printed, with ^ and implicit multiplication, with spaces."""
    expr = q._expected_expr
    plain = {s: sympy.Symbol(s.name) for s in expr.free_symbols}
    text = sympy.sstr(expr)
    return [expr, expr.xreplace(plain), text, text.replace("**", "^").replace("*", " "),
            " ".join(text.replace("(", " ( ").replace(")", " ) ").split()), q.expected]


@pytest.mark.parametrize("set_name, qid", EXPRESSIONS)
def test_every_expression_question_accepts_its_expected_formula_in_every_form(set_name, qid):
    q = getattr(SETS[set_name], qid)
    for form in _forms(q):
        r = q.evaluate(form)
        assert r.status == CORRECT, f"{set_name}.{qid}: {form!r} -> {r.feedback}"


@pytest.mark.parametrize("set_name, qid", EXPRESSIONS)
def test_every_expression_question_rejects_near_misses_in_text(set_name, qid):
    q = getattr(SETS[set_name], qid)
    text = sympy.sstr(q._expected_expr)
    for wrong in (f"2*({text})", f"({text})/2", f"({text}) + 1", f"({text})^2"):
        r = q.evaluate(wrong)
        assert r.status == INCORRECT and r.feedback.strip(), f"{set_name}.{qid}: {wrong!r} accepted"
    for mistake in q.bank:  # each bank mistake, printed as text, still earns its own feedback
        if not isinstance(mistake.value, str):
            continue
        assert q.evaluate(mistake.value).feedback == mistake.feedback


def test_the_grammar():
    syms = (N, b)
    same = {
        "N*b/8": ["N b/8", "N*b*2**-3", "N*b/2^3", "(N)(b)/8", "N(b)/8", "b N / 8", "0.125 N b", "N*b*1/8",
                  "+N*b/8", "--N*b/8", "N*b/(4+4)", "N*b*8**(-1)", "N*b/sqrt(64)", "N*b/Max(8, 1)",
                  "N*b/min(8, 9)", "N*b/abs(-8)", "N*b/8 + 0*pi", "N*b/8*e**0", "N*b/8*exp(0)", "N*b/8*log(e)",
                  "1.25e-1*N*b", "N*b/8e0", "N*b*.125"],
        "-N**2": ["-N^2", "-(N**2)", "0 - N*N"],
        "N**b**2": ["N**(b**2)", "N^b^2"],
        "2**-1*N": ["N/2", "N*2^-1", "1/2 N"],
        "log(N, b)": ["log(N)/log(b)"],
    }
    for reference, forms in same.items():
        ref = parse_formula(reference, syms)
        for form in forms:
            assert sympy.simplify(parse_formula(form, syms) - ref) == 0, form
    assert parse_formula("e", syms) == sympy.E and parse_formula("pi", syms) == sympy.pi
    e_symbol = sympy.Symbol("e", positive=True)
    assert parse_formula("2 e", (e_symbol,)) == 2 * e_symbol  # a question's symbol wins over the constant
    assert parse_formula("2.5", syms) == sympy.Rational(5, 2)  # decimals are exact


def test_the_limits_are_the_stated_ones():
    syms = (N,)
    ok_depth = "(" * (LIMITS.max_depth - 1) + "N" + ")" * (LIMITS.max_depth - 1)
    assert parse_formula(ok_depth, syms) == N
    with pytest.raises(Unreadable, match=f"more than {LIMITS.max_depth}"):
        parse_formula("(" * (LIMITS.max_depth + 1) + "N" + ")" * (LIMITS.max_depth + 1), syms)
    assert parse_formula("N" + " " * (LIMITS.max_formula_text - 1), syms) == N
    with pytest.raises(Unreadable, match=f"at most {LIMITS.max_formula_text}"):
        parse_formula("N" + "+0" * LIMITS.max_formula_text, syms)
    assert parse_formula(f"N**{LIMITS.max_degree}", syms) == N ** LIMITS.max_degree
    with pytest.raises(Unreadable, match="too high"):
        parse_formula(f"N**{LIMITS.max_degree + 1}", syms)
    assert parse_formula(f"10**{LIMITS.max_log10}", syms) == 10 ** LIMITS.max_log10
    with pytest.raises(Unreadable, match="too large"):
        parse_formula(f"10**{LIMITS.max_log10 + 1}", syms)
    with pytest.raises(Unreadable, match="too large"):
        parse_formula("10**20 * 10**20", syms)  # a product beyond 10**30, refused once built
    assert parse_formula("2**30", syms) == 2**30  # GiB stays readable
    with pytest.raises(Unreadable, match="too long"):
        parse_formula("+".join(["N"] * (LIMITS.max_nodes // 2 + 1)), syms)


# --- any text, any formula: a verdict, in bounded time ------------------------------------------

_LEAVES = st.one_of(
    st.sampled_from(["N", "b", "x", "pi", "e", "E", "sqrt", "__class__", "evalf", "Pow", "0", "1", "2", "8", "0.5",
                     "1e9", "1e40", "1e-40", "10", "2**30", "9" * 45]),
    st.integers(min_value=0, max_value=10**12).map(str),
)
_FORMULAS = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "**", "^", " ", ".", ",", ""]), inner).map("".join),
        inner.map(lambda a: f"({a})"),
        inner.map(lambda a: f"-{a}"),
        st.tuples(st.sampled_from(["sqrt", "exp", "log", "Abs", "min", "Max", "sin", "Pow ", "N", "pi."]),
                  st.lists(inner, min_size=0, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
    ),
    max_leaves=25,
)


@settings(max_examples=250, deadline=timedelta(seconds=EVALUATE_BOUND_S),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(text=st.one_of(_FORMULAS, st.text(max_size=120),
                      st.text(alphabet="Nb0123456789+-*/^().,_ eEpisqrtxlogMaxin", max_size=80)))
def test_any_text_is_a_formula_or_a_documented_refusal(text):
    try:
        expr = parse_expression(text, (N, b))
    except Unreadable as exc:
        assert str(exc).strip()
    else:
        assert isinstance(expr, sympy.Expr) and expr.free_symbols <= {N, b}
    r = ex01.q5.evaluate(text)
    assert r.status in STATUSES and "Internal checker error" not in r.feedback, r.feedback


def test_the_documented_limits_are_the_code_s(repo_root):
    doc = (repo_root / "docs" / "CHECKS_API.md").read_text()
    section = doc[doc.index("### Reading answers"):doc.index("## Result")]
    for value in (LIMITS.max_formula_text, LIMITS.max_formula_printed, LIMITS.max_nodes, LIMITS.max_depth,
                  LIMITS.max_digits, LIMITS.max_degree, LIMITS.max_terms, LIMITS.max_number_text):
        assert re.search(rf"(?<![\d.*]){value}(?![\d])", section), f"{value} is not in the documented limits"
    assert f"10**-{LIMITS.max_log10} .. 10**{LIMITS.max_log10}" in section
