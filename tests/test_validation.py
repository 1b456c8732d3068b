"""course_lib.core.validation: the one set of argument checks, and the limits they state (issue 12, API edges)."""
import math
from fractions import Fraction

import numpy as np
import pytest

from course_lib.core import validation as v
from course_lib.core.validation import require_counts


def test_require_counts_accepts_lists_and_a_bare_count_only_when_allowed():
    assert require_counts("contexts", (128, 1024)) == [128, 1024]
    assert require_counts("contexts", 128, single=True) == [128]
    with pytest.raises(TypeError, match="contexts must be a list of token counts"):
        require_counts("contexts", 128)
    with pytest.raises(TypeError, match="prompt_lengths"):
        require_counts("prompt_lengths", "128", single=True)
    with pytest.raises(ValueError, match="at least one"):
        require_counts("contexts", [])
    with pytest.raises(ValueError, match="contexts"):
        require_counts("contexts", [128, 0])


# ---- the stated limits (issue 12, API edges) --------------------------------------------------------
def test_limits_are_stated_once_and_enforced():
    assert v.require_count("tokens", v.MAX_COUNT) == v.MAX_COUNT
    with pytest.raises(ValueError, match=r"tokens must be a whole number in \[0, 1e15\]"):
        v.require_count("tokens", v.MAX_COUNT + 1)
    assert v.require_positive("bandwidth", 1e30) == 1e30 and v.require_positive("bandwidth", 1e-30) == 1e-30
    for bad in (1.01e30, 0.99e-30, 5e-324):
        with pytest.raises(ValueError, match="bandwidth must be between 1e-30 and 1e30"):
            v.require_positive("bandwidth", bad)
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        v.require_positive("bandwidth", -1)
    with pytest.raises(ValueError, match="cache_bytes must be between 0 and 1e30"):
        v.require_nonnegative("cache_bytes", 1e31)
    with pytest.raises(ValueError, match="compute_efficiency must be a fraction in \\(0, 1\\]"):
        v.require_fraction("compute_efficiency", 5e-324)
    assert v.require_fraction("hit_rate", 0, allow_zero=True) == 0


def test_integers_stay_exact_and_huge_numbers_are_refused_not_overflowing():
    n = v.require_count("batch", v.MAX_COUNT - 1)
    assert n == 10**15 - 1 and type(n) is int
    with pytest.raises(ValueError, match="batch"):
        v.require_count("batch", 2**53 + 1)          # refused, never rounded to 2**53
    for huge in (10**400, -(10**400), 1e308, Fraction(10**400), 10**5000):
        with pytest.raises(ValueError, match="params"):
            v.require_count("params", huge)
    with pytest.raises(ValueError, match="an integer of about 10\\*\\*400"):
        v.require_count("params", 10**400)
    with pytest.raises(ValueError, match="x must be a finite number no larger than 1e30"):
        v.require_positive("x", Fraction(10**400))
    assert v.require_count("n", np.int64(7)) == 7 and v.require_count("n", np.array(7.0)) == 7
    assert v.require_count("n", 7e9) == 7_000_000_000


@pytest.mark.parametrize("value", ["14", b"512", bytearray(b"512"), memoryview(b"1"), np.array("14"),
                                   np.array(["1", "2"]), np.array(True), np.str_("3"), True, None, 3j, [1]])
def test_text_bytes_and_arrays_of_text_are_type_errors_never_parsed(value):
    for check in (v.require_count, v.require_positive, v.require_nonnegative, v.require_fraction):
        with pytest.raises(TypeError, match="params"):
            check("params", value)


def test_non_finite_values_are_value_errors():
    for value in (math.inf, -math.inf, math.nan, np.float64("nan")):
        with pytest.raises(ValueError, match="x must be a finite number"):
            v.require_positive("x", value)


def test_require_list_refuses_text_and_bare_values():
    assert v.require_list("rows", (1, 2)) == [1, 2] and v.require_list("rows", range(3)) == [0, 1, 2]
    for bad in ("ab", b"ab", 3, np.array(5), None):
        with pytest.raises(TypeError, match="rows must be a list"):
            v.require_list("rows", bad)
    with pytest.raises(ValueError, match="rows must hold at most 3 items"):
        v.require_list("rows", range(10), maximum_items=3)
    with pytest.raises(TypeError, match="options"):
        v.suggest("fq16", 5)
