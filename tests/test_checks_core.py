"""Unit tests of the exercise-check machinery (course_lib.checks and the package loader)."""
from __future__ import annotations

import copy
import decimal
import fractions
import html
import json
import math
import pickle
import sys

import numpy as np
import pytest
import sympy

from course_lib import checks
from course_lib.checks import ____
from course_lib.checks import _demo as demo
from course_lib.checks import (
    CORRECT,
    INCORRECT,
    KINDS,
    MIME_TYPE,
    NOT_ATTEMPTED,
    ChoiceQuestion,
    Detector,
    ExpressionQuestion,
    FunctionQuestion,
    Mistake,
    NumericQuestion,
    Question,
    Result,
    detectors as d,
    is_placeholder,
    validate_set,
)

MISTAKES = [Mistake(7e9, "one byte"), Mistake(28e9, "fp32"), Mistake(3.5e9, "int4")]


def numeric(**kw) -> Question:
    args = dict(id="q1", set="ex99", objective="O1 test", expected=14e9, dimension="bytes",
                rel_tol=0.01, mistakes=MISTAKES)
    args.update(kw)
    return NumericQuestion(**args)


# --- the placeholder ----------------------------------------------------------------------------


def test_placeholder_absorbs_arithmetic_and_calls():
    x = ____
    for expr in (x * 2, 2 * x, x + 1, 1 - x, x / 3, 3 / x, x ** 2, 2 ** x, -x, abs(x), round(x),
                 x // 2, x % 2, x(1, 2), x[0], x.item(), x.anything().more, x @ x, math.ceil(x),
                 np.sqrt(x), np.float64(2.0) * x, np.sum(x)):
        assert expr is ____
    assert f"{x:.1f} GB" == "____ GB"
    assert str(x) == repr(x) == "____"
    assert not x
    assert copy.copy(x) is x and copy.deepcopy(x) is x and pickle.loads(pickle.dumps(x)) is x
    assert is_placeholder(x) and is_placeholder(...) and not is_placeholder(None) and not is_placeholder(0)


@pytest.mark.parametrize("convert", [float, int, complex, len, iter])
def test_placeholder_refuses_conversion_with_a_clear_message(convert):
    with pytest.raises(TypeError, match="placeholder"):
        convert(____)


def test_placeholder_has_no_private_attributes():
    # IPython probes _repr_html_, _ipython_canary_method_should_not_exist_ ...: they must not exist
    assert not hasattr(____, "_repr_html_")
    assert not hasattr(____, "__array__")


# --- reading numeric answers ----------------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    14e9, 14_000_000_000, np.float64(14e9), np.int64(14_000_000_000), np.float32(14e9), np.array(14e9),
    fractions.Fraction(14_000_000_000), decimal.Decimal("14e9"), sympy.Integer(14_000_000_000),
    sympy.Float(14e9), sympy.Rational(28_000_000_000, 2), "14e9", " 14000000000 ", "14 GB", "14e9 B",
    "13.0385 GiB", "14,000,000,000", "112 Gbit", complex(14e9, 0), 14.1e9, 13.9e9,
])
def test_numeric_accepts_many_types(answer):
    r = numeric().evaluate(answer)
    assert r.status == CORRECT, r


def test_torch_scalars_without_importing_torch_in_core():
    torch = pytest.importorskip("torch")
    q = numeric()
    assert q.evaluate(torch.tensor(14e9, dtype=torch.float64)).correct
    assert q.evaluate(torch.tensor(14e9, requires_grad=True)).correct
    r = q.evaluate(torch.tensor([14e9]))
    assert r.status == INCORRECT and "shape (1,)" in r.feedback and ".item()" in r.feedback
    r = q.evaluate(torch.zeros(2, 3))
    assert r.status == INCORRECT and "shape (2, 3)" in r.feedback


@pytest.mark.parametrize("answer, fragment", [
    (None, "None"), (True, "boolean"), ([14e9], "list"), ({"a": 1}, "dict"), (np.array([1.0, 2.0]), "shape (2,)"),
    (np.array([14e9]), ".item()"), (float("nan"), "NaN"), (float("inf"), "infinite"), (3 + 4j, "complex"),
    ("", "empty"), ("abc", "Can't read"), ("13.9 ms", "time"), ("14 GB/s", "bandwidth"), ("-14 GB", "negative"),
    (b"14", "bytes data"), (sympy.Symbol("x") * 2, "symbol"), (print, "function"), (object(), "object"),
    (sympy.zoo, "NaN"), ("nan", "finite"),
])
def test_numeric_unreadable_answers_are_incorrect_with_a_reason(answer, fragment):
    r = numeric().evaluate(answer)
    assert r.status == INCORRECT
    assert fragment.lower() in r.feedback.lower(), r.feedback
    assert r.feedback.endswith((".", "?", "!"))


def test_wrong_dimension_names_both_dimensions():
    r = numeric().evaluate("13.9 ms")
    assert r.status == INCORRECT
    assert "'13.9 ms' is a time" in r.feedback and "memory (bytes)" in r.feedback


def test_strings_with_units_only_where_allowed():
    q = numeric(dimension=None, accept_strings=False, expected=100, mistakes=[Mistake(1, "a"), Mistake(2, "b"),
                                                                                Mistake(3, "c")])
    assert q.evaluate("100").correct  # a bare number in quotes is still a number
    r = q.evaluate("100 GB")
    assert r.status == INCORRECT and "plain number" in r.feedback


def test_unit_scales_bare_numbers_and_expected():
    q = NumericQuestion(id="q2", set="ex99", objective="O", expected=13.9, unit="ms", dimension="time", rel_tol=0.01,
                        detect=[d.ms_vs_s()], mistakes=[Mistake(1, "a"), Mistake(2, "b"), Mistake(3, "c")])
    assert q.evaluate(13.9).correct and q.evaluate("13.9 ms").correct and q.evaluate("0.0139 s").correct
    assert q.evaluate(0.0139).feedback == q.bank[-1].feedback  # seconds given as a bare number
    assert "millisecond" in q.evaluate(13900).feedback


def test_params_dimension_reads_b_as_billion():
    q = NumericQuestion(id="q3", set="ex99", objective="O", expected=7, unit="B", dimension="params",
                        mistakes=[Mistake(7e-3, "M"), Mistake(70, "x10"), Mistake(0.7, "/10")])
    assert q.evaluate(7).correct and q.evaluate("7B").correct and q.evaluate("7000M").correct
    assert "parameter count" in q.evaluate("7 GB").feedback


def test_quantity_objects_are_accepted():
    from course_lib.core.units import parse_quantity

    q = numeric()
    assert q.evaluate(parse_quantity("14 GB")).correct
    assert "time" in q.evaluate(parse_quantity("14 ms")).feedback


# --- mistakes, detectors, generic feedback --------------------------------------------------------


def test_explicit_mistakes_win_over_detectors_and_feedback_is_exact():
    q = numeric(detect=[d.forgot_kv()])  # forgot_kv gives 7e9, which the explicit bank already has
    assert q.evaluate(7e9).feedback == "one byte"
    assert len(q.bank) == 3


@pytest.mark.parametrize("detector, factor, word", [
    (d.gb_vs_gib(), 1 / 1.073741824, "GiB"), (d.gb_vs_gib(), 1.073741824, "GiB"),
    (d.gb_vs_gib(2), 1.048576, "MiB"), (d.gb_vs_gib(1), 1 / 1.024, "KiB"), (d.gb_vs_gib(4), 1.024 ** 4, "TiB"),
    (d.bits_vs_bytes(), 8, "bits"), (d.bits_vs_bytes(), 1 / 8, "bits"), (d.ms_vs_s(), 1000, "milliseconds"),
    (d.ms_vs_s(), 1e-3, "milliseconds"), (d.forgot_kv(), 0.5, "key AND a value"),
    (d.query_heads(4), 4, "query"), (d.forgot_batch(8), 1 / 8, "batch"),
    (d.ratio(3, "thrice"), 3, "thrice"),
])
def test_ratio_detectors(detector, factor, word):
    q = numeric(expected=1e9, rel_tol=0.005, detect=[detector], mistakes=[
        Mistake(1e3, "a"), Mistake(2e3, "b"), Mistake(3e3, "c")])
    r = q.evaluate(1e9 * factor)
    assert r.status == INCORRECT and word in r.feedback, r.feedback


def test_value_detectors():
    q = numeric(expected=14, unit="ms", dimension="time", detect=[
        d.decode_steps(13.0), d.compute_instead_of_memory(0.14), d.alternative(20, "twenty")],
        mistakes=[Mistake(1, "a"), Mistake(2, "b"), Mistake(3, "c")])
    assert "decode steps" in q.evaluate(13.0).feedback
    assert "memory" in q.evaluate("0.14 ms").feedback
    assert q.evaluate(20).feedback == "twenty"
    assert q.evaluate(14).correct


def test_detector_feedback_can_be_overridden():
    q = numeric(detect=[d.bits_vs_bytes(feedback="custom bits")])
    assert q.evaluate(14e9 * 8).feedback == "custom bits"


def test_generic_feedback_never_states_the_expected_value():
    q = numeric(expected=13_476_831_232, mistakes=MISTAKES)
    for answer in (1, 13.7e9, 13.3e9, 20e9, 5e9, 2e12, -13e9, 0):
        r = q.evaluate(answer)
        assert r.status == INCORRECT
        for shown in ("13476831232", "13,476,831,232", "1.3476", "13.48", "13.5"):
            assert shown not in r.feedback
    assert "close" in q.evaluate(13.7e9).feedback.lower()
    assert "much too large" in q.evaluate(2e12).feedback
    assert "wrong sign" in q.evaluate(-13e9).feedback
    assert "too low" in q.evaluate(9e9).feedback


@pytest.mark.parametrize("kwargs, match", [
    (dict(mistakes=[Mistake(14.05e9, "too close")]), "within tolerance"),
    (dict(rel_tol=0.1, detect=[d.gb_vs_gib()]), "tighten rel_tol"),
    (dict(mistakes=[Mistake("13 ms", "x")]), "time"),
    (dict(expected="many"), "can't be read"),
    (dict(unit="ms"), "not a unit of bytes"),
    (dict(unit="GB", dimension=None), "unit needs a dimension"),
    (dict(dimension="byte"), "dimension"),
    (dict(objective=""), "objective"),
    (dict(id="q 1"), "identifier"),
    (dict(points=0), "points"),
    (dict(rel_tol=-1), "rel_tol"),
])
def test_bad_definitions_raise_one_clear_error(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        numeric(**kwargs)


def test_mistake_and_detector_validation():
    with pytest.raises(TypeError, match="feedback"):
        Mistake(1, "")
    with pytest.raises(ValueError, match="placeholder"):
        Mistake(____, "x")
    with pytest.raises(ValueError, match="ratios"):
        Detector("x", "y", (1.0,))
    with pytest.raises(ValueError, match="powers"):
        d.gb_vs_gib(5)
    with pytest.raises(ValueError, match="batch"):
        d.forgot_batch(1)
    with pytest.raises(ValueError, match="ratio"):
        d.query_heads(0)


# --- expressions --------------------------------------------------------------------------------


def test_expression_equivalence_and_symbols_by_name():
    q = demo.q3
    L, H, dd, b = sympy.symbols("L H d b")  # no assumptions: matched by name
    for ok in (2 * L * H * dd * b, "2*L*H*d*b", "2 L H d b", "b*d*H*L*2", "(L*H)*(2*d*b)", 2.0 * L * H * dd * b,
               "L*H*d*b + L*H*d*b"):
        assert q.evaluate(ok).correct, ok
    assert "half" in q.evaluate(L * H * dd * b).feedback  # forgot_kv detector
    assert q.evaluate("2*L*H*d").feedback == demo.q3.mistakes[0].feedback
    r = q.evaluate("2*L*H*d*x")
    assert r.status == INCORRECT and "x" in r.feedback and "L, H, d, b" in r.feedback
    for bad in ("__import__('os')", "9**9**9**9", "L**L**L**L", "exp(L)", "(", "L,H", 5, None, [L]):
        assert q.evaluate(bad).status == INCORRECT


def test_expression_definition_errors():
    with pytest.raises(ValueError, match="equivalent"):
        ExpressionQuestion(id="q1", set="ex99", objective="O", expected="2*a", symbols=["a"],
                 mistakes=[Mistake("a+a", "same")])


# --- functions ------------------------------------------------------------------------------------


def _kv(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_element


def test_function_outcomes():
    q = demo.q4

    def todo(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
        """Docstring kept by the generator."""
        raise NotImplementedError  # your code here

    def returns_placeholder(*a, **k):
        return ____

    def crashes(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
        return layers / 0

    def bits(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
        return 8 * _kv(layers, kv_heads, head_dim, tokens, bytes_per_element)

    def off(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
        return _kv(layers, kv_heads, head_dim, tokens, bytes_per_element) + 1

    def recurse(*a, **k):
        return recurse(*a, **k)

    assert q.evaluate(_kv).correct
    assert q.evaluate(lambda *a, **k: np.float64(_kv(*a, **k))).correct
    assert q.evaluate(todo).status == NOT_ATTEMPTED
    assert q.evaluate(returns_placeholder).status == NOT_ATTEMPTED
    assert q.evaluate(____).status == NOT_ATTEMPTED
    r = q.evaluate(crashes)
    assert r.status == INCORRECT
    assert r.feedback == "crashes(32, 8, 128, 4096) raised ZeroDivisionError: division by zero."
    assert "Traceback" not in r.feedback
    assert "bits" in q.evaluate(bits).feedback
    r = q.evaluate(off)
    assert r.status == INCORRECT and "0 of 4 test cases pass" in r.feedback
    assert "recursed" in q.evaluate(recurse).feedback
    assert "pass your function itself" in q.evaluate(_kv(1, 1, 1, 1)).feedback
    assert "None" in q.evaluate(lambda *a, **k: None).feedback
    assert "shape" in q.evaluate(lambda *a, **k: np.zeros(3)).feedback


def test_function_definition_checks_reference_against_cases():
    with pytest.raises(ValueError, match="reference function disagrees"):
        FunctionQuestion(id="q1", set="ex99", objective="O", expected=lambda x: x + 1,
                 cases=[((1,), 1)], mistakes=[])
    with pytest.raises(ValueError, match="must be functions"):
        FunctionQuestion(id="q1", set="ex99", objective="O", cases=[((1,), 1)],
                 mistakes=[Mistake(3, "x")])
    q = FunctionQuestion(id="q1", set="ex99", objective="O", cases=[((1,), 2), ({"x": 2}, 4)],
                 mistakes=[Mistake(lambda x: x, "identity")])
    assert q.evaluate(lambda x: 2 * x).correct  # the expected function comes from the cases
    assert q.evaluate(lambda x: x).feedback == "identity"
    assert q.evaluate(q.expected).correct


# --- choice ----------------------------------------------------------------------------------------


def test_choice():
    q = demo.q5
    assert q.evaluate("  Memory   BANDWIDTH ").correct
    assert q.evaluate("disk").feedback == demo.q5.mistakes[2].feedback
    assert q.evaluate("network").status == INCORRECT
    r = q.evaluate("gpu")
    assert r.status == INCORRECT and "'memory bandwidth'" in r.feedback  # lists the options
    assert q.evaluate(____).status == NOT_ATTEMPTED
    with pytest.raises(ValueError, match="not one of the options"):
        ChoiceQuestion(id="q1", set="ex99", objective="O", options=["a", "b"], expected="c")


# --- results, strict mode, hints, solutions -------------------------------------------------------


def test_strict_raises_with_feedback_and_returns_result_when_correct():
    q = numeric()
    assert q.check(14e9, strict=True).correct
    with pytest.raises(AssertionError, match="fp32"):
        q.check(28e9, strict=True)
    with pytest.raises(AssertionError, match="Not attempted"):
        q.check(____, strict=True)
    assert q.check(28e9).status == INCORRECT  # non-strict never raises


def test_result_rendering_and_record():
    q = numeric()
    r = q.check(28e9)
    assert isinstance(r, Result) and not r and r.score == 0 and r.attempted
    assert str(r) == repr(r) == "✘ ex99.q1: Not yet: fp32"
    page = r._repr_html_()
    assert "fp32" in page and "course-check-incorrect" in page and "#b3261e" in page
    bundle = r._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", MIME_TYPE}
    assert json.loads(json.dumps(bundle[MIME_TYPE])) == {
        "version": 1, "set": "ex99", "question": "q1", "status": "incorrect", "points": 1.0, "score": 0.0,
        "feedback": "fp32", "objective": "O1 test", "strict": False}
    ok = q.evaluate(14e9, strict=True)
    assert ok and ok.score == 1 and ok.record()["strict"] is True and "✔" in str(ok)
    na = q.evaluate(____)
    assert na.status == NOT_ATTEMPTED and not na.attempted and "○" in str(na)


def test_feedback_is_html_escaped():
    q = numeric(mistakes=[Mistake(7e9, "<script>x</script> `code`"), Mistake(28e9, "b"), Mistake(3.5e9, "c")])
    page = q.evaluate(7e9)._repr_html_()
    assert "<script>" not in page and html.escape("<script>") in page and "<code>code</code>" in page


def test_hints_are_successive_and_numbered():
    q = numeric(hints=["first", "second"], solution="the **way**")
    assert q.hint().text == "first" and q.hint().text == "second" and q.hint().text == "second"
    h = q.hint(1)
    assert h.number == 1 and h.total == 2 and "Hint 1/2" in h._repr_markdown_()
    with pytest.raises(ValueError, match="1..2"):
        q.hint(3)
    with pytest.raises(ValueError, match="hint number"):
        q.hint(0)
    s = q.solution()
    assert "the **way**" in s._repr_markdown_() and "honour" in s._repr_markdown_()
    assert "No hints" in numeric().hint().text


def test_echo_in_the_same_cell_is_swallowed_once(monkeypatch):
    """check() displays itself; the cell's echo of the same Result must not display it again."""
    from course_lib.checks import display

    shown = []

    class FakeShell:
        class events:
            @staticmethod
            def register(name, fn):
                assert name == "pre_run_cell"

    fake_ipython = type(sys)("IPython")
    fake_ipython.get_ipython = lambda: FakeShell()
    fake_display = type(sys)("IPython.display")
    fake_display.display = lambda obj, raw=False: shown.append(obj)
    monkeypatch.setitem(sys.modules, "IPython", fake_ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", fake_display)
    r = numeric().check(14e9)
    assert len(shown) == 1 and MIME_TYPE in shown[0]
    r._ipython_display_()  # the echo at the end of the same cell
    assert len(shown) == 1
    display._bump_cell_serial()  # next cell
    r._ipython_display_()
    assert len(shown) == 2


# --- one subclass per kind -----------------------------------------------------------------------

KIND_CLASSES = {"numeric": NumericQuestion, "expression": ExpressionQuestion, "function": FunctionQuestion,
                "choice": ChoiceQuestion}
KIND_ARGS = {"numeric": dict(expected=2.0), "expression": dict(expected="2*a", symbols=["a"]),
             "function": dict(cases=[((1,), 2.0)]), "choice": dict(options=["a", "b"], expected="a")}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_one_subclass(kind):
    args = dict(id="q1", set="ex99", objective="O1 test", **KIND_ARGS[kind])
    q = KIND_CLASSES[kind](**args)
    assert q.kind == kind and isinstance(q, Question)
    assert q.evaluate(q.expected).correct
    assert repr(q) == f"<Question ex99.q1 ({kind}, 1 pt): O1 test>"


def test_the_base_class_builds_no_question_and_a_subclass_refuses_other_kinds_options():
    with pytest.raises(TypeError, match="base class"):
        Question(id="q1", set="ex99", objective="O", expected=1.0)
    with pytest.raises(TypeError, match="kind"):
        NumericQuestion(id="q1", set="ex99", objective="O", kind="choice", expected=1.0)
    with pytest.raises(TypeError, match="options"):
        NumericQuestion(id="q1", set="ex99", objective="O", expected=1.0, options=["a"])


def test_every_set_builds_its_questions_from_the_subclasses():
    for name in checks.available_sets() + ["_demo"]:
        module = demo if name == "_demo" else checks.load_set(name)
        for q in module.QUESTIONS:
            assert isinstance(q, KIND_CLASSES[q.kind]), f"{name}.{q.id} is a {type(q).__name__}"


def test_the_facade_offers_each_owners_object():
    """Every name of ``course_lib.checks.__all__`` is the object of the module that owns it."""
    for name in checks.__all__:
        obj = getattr(checks, name)
        owner = getattr(type(obj) if name == "detectors" else obj, "__module__", None)
        if isinstance(owner, str) and owner.startswith("course_lib.checks.") and hasattr(sys.modules[owner], name):
            assert getattr(sys.modules[owner], name) is obj, f"{name} is not {owner}.{name}"
    assert checks.____ is checks.PLACEHOLDER


MODULES = ["placeholder", "answers", "display", "mistakes", "evaluator", "question", "numeric", "expression",
           "function", "choice"]


@pytest.mark.parametrize("name", MODULES)
def test_each_module_says_what_it_does_and_which_sets_use_it(name):
    import importlib

    module = importlib.import_module(f"course_lib.checks.{name}")
    doc = module.__doc__ or ""
    assert len(doc.split()) >= 20, f"{name}: a docstring that says what the module does"
    assert "ex0" in doc or "lesson" in doc, f"{name}: the docstring names the exercise sets or lessons it serves"


# --- the package ----------------------------------------------------------------------------------


def test_sets_load_lazily_and_unknown_sets_fail_clearly():
    assert set(checks.available_sets()) >= set()
    assert all(name.startswith("ex") for name in checks.available_sets())
    with pytest.raises(AttributeError, match="no question set 'ex98'"):
        checks.ex98
    with pytest.raises(ValueError, match="unknown question set"):
        checks.load_set("ex98")
    assert "available_sets" in dir(checks)


def test_validate_set_catches_broken_sets():
    assert validate_set(demo) == demo.QUESTIONS
    broken = type(sys)("course_lib.checks.ex97")
    broken.QUESTIONS = [demo.q1]
    with pytest.raises(ValueError, match="set='_demo'"):
        validate_set(broken)
    broken.QUESTIONS = []
    with pytest.raises(ValueError, match="non-empty"):
        validate_set(broken)

