"""The generated module equals what codegen writes, and each generated function equals its sympy expression."""
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.core.numeric import raw as g
from course_lib.core import codegen
from course_lib.core import formulas


def test_generated_module_is_up_to_date():
    assert codegen.TARGET.read_text() == codegen.render(), "run `make codegen`"


def test_every_formula_has_a_generated_function_and_latex():
    for name, f in formulas.FORMULAS.items():
        assert callable(getattr(g, name))
        assert formulas.latex(name)
        assert f.doc and f.unit
    assert set(vars(g)) == set(formulas.FORMULAS)


@settings(deadline=None)  # sympy substitution of every formula per example: slow, not a timing test
@given(st.data())
def test_generated_equals_sympy_on_random_inputs(data):
    for name, f in formulas.FORMULAS.items():
        vals = {}
        for a in f.args:
            if a.is_integer:
                lo = 0 if a.is_nonnegative and not a.is_positive else 1
                vals[a] = data.draw(st.integers(min_value=lo, max_value=5000), label=a.name)
            elif a.is_nonnegative and not a.is_positive:
                vals[a] = data.draw(st.sampled_from([0, 1]), label=a.name)
            else:
                vals[a] = data.draw(st.floats(min_value=1e-3, max_value=1e6), label=a.name)
        if name == "linear_step_sum" and vals[formulas.S.first] > vals[formulas.S.last]:
            vals[formulas.S.first], vals[formulas.S.last] = vals[formulas.S.last], vals[formulas.S.first]
        if name == "expected_experts":
            vals[formulas.S.experts_per_token] = min(vals[formulas.S.experts_per_token], vals[formulas.S.experts])
        if name == "sessions_that_fit":  # a session of zero bytes is outside the formula's domain
            vals[formulas.S.kv_bytes_per_token] = 1
        if name.startswith("fixed_cost_fit"):   # two different cases: distinct floors and measured times
            vals[formulas.S.predicted_b] = vals[formulas.S.predicted_a] + vals[formulas.S.predicted_b]
            vals[formulas.S.measured_b] = vals[formulas.S.measured_a] + vals[formulas.S.measured_b]
        if name == "cache_break_even_hit_rate":  # defined where a hit is faster than a miss
            vals[formulas.S.ttft_miss] = vals[formulas.S.ttft_hit] + vals[formulas.S.ttft_miss]
        if name == "speculative_tokens_per_step":  # the closed form's removable singularity at acceptance = 1
            vals[formulas.S.acceptance] = vals[formulas.S.acceptance] / 2
        want = float(f.expr.subs(vals).evalf(30))
        got = getattr(g, name)(*[vals[a] for a in f.args])
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), name


def test_decode_sum_derivation_matches_brute_force():
    d = formulas.derive_decode_sum()
    S = formulas.S
    vals = {S.streamed_weight_bytes: 14e9, S.batch: 2, S.prompt: 100, S.kv_bytes_per_token: 131072,
            S.bandwidth: 1e12, S.n: 50}
    brute = sum((14e9 + 2 * (100 + j) * 131072) / 1e12 for j in range(1, 50))
    assert float(d["exact_sum"].subs(vals)) == __import__("pytest").approx(brute)
    # the linearisation at the mean context reproduces the exact sum for a memory-bound response
    assert float((d["k_at_mean_context"] * (S.n - 1)).subs(vals)) == __import__("pytest").approx(brute)

