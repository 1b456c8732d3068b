"""course_lib.core.numeric: every formula, checked by the kinds its sympy symbols declare.

The strategies come from the formulas themselves (``numeric.ARGUMENTS``), so a new formula is
fuzzed without a line added here; a formula whose argument kind has no strategy fails the test.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_lib.core import numeric

VALID = {
    "count1": st.integers(1, 10**6),
    "count0": st.integers(0, 10**6),
    "positive": st.floats(1e-6, 1e12),
    "nonnegative": st.floats(0, 1e12),
    "real": st.floats(-1e12, 1e12),
}
BAD = st.sampled_from([None, True, "14", b"512", bytearray(b"512"), np.array("14"), math.nan, math.inf, -math.inf,
                       1e308, 10**400, -1.0, 5e-324, 2**53 + 1.5, 1j])


def test_every_formula_has_a_checked_form_and_every_kind_a_strategy():
    assert sorted(numeric.__all__) == sorted(numeric.ARGUMENTS) == sorted(vars(numeric.raw))
    kinds = {kind for args in numeric.ARGUMENTS.values() for _, kind in args}
    assert kinds <= set(VALID), f"no strategy for argument kinds {kinds - set(VALID)}"


@pytest.mark.parametrize("name", numeric.__all__)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_checked_formula_edges(name, data):
    args = numeric.ARGUMENTS[name]
    values = {a: data.draw(VALID[k], label=a) for a, k in args}
    broken = data.draw(st.one_of(st.none(), st.sampled_from([a for a, _ in args])), label="broken") if args else None
    if broken is not None:
        values[broken] = data.draw(BAD, label="bad value")
    try:
        result = getattr(numeric, name)(**values)
    except (TypeError, ValueError) as exc:
        named = [a for a, _ in args if a in str(exc)] + [name] * (name in str(exc))
        assert named, f"{name}: error names no argument: {exc}"
        return
    # Valid (or harmlessly valid) input: the checked form equals the generated expression, and is finite.
    assert isinstance(result, (int, float)) and math.isfinite(result), (name, values, result)
    assert result == getattr(numeric.raw, name)(**values)


def test_a_bad_value_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match="params"):
        numeric.weight_bytes("7e9", 2)
    with pytest.raises(ValueError, match="layers"):
        numeric.kv_values_per_token(layers=-1, kv_heads=8, head_dim=128)
    with pytest.raises(ValueError, match="memory_time.*zero"):
        numeric.memory_time(14e9, 0, 1.0)
    with pytest.raises(TypeError, match=r"weight_bytes\(params, bytes_per_weight\)"):
        numeric.weight_bytes(7e9)


def test_the_checked_form_keeps_the_generated_docstring_and_numbers():
    assert numeric.weight_bytes(7e9, 2) == 14e9
    assert "sympy: bytes_per_weight*params" in numeric.weight_bytes.__doc__
    assert numeric.memory_time(14e9, 1008e9, 1.0) == pytest.approx(14e9 / 1008e9)
