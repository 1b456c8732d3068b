"""Hypothesis throws arbitrary answers at every checker of every discovered question set.

Whatever comes in, ``check()`` (non-strict) must return a Result whose status is one of the three,
with a non-empty feedback unless correct, and must never let an exception escape -- nor hit the
checker's own "internal error" path, which would hide a bug behind a polite message.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from course_lib import checks
from course_lib.checks import ____
from course_lib.checks import _demo
from course_lib.checks import CORRECT, STATUSES, Result

SETS = {name: getattr(checks, name) for name in checks.available_sets()}
SETS["_demo"] = _demo
QUESTIONS = [(name, q.id) for name, module in SETS.items() for q in module.QUESTIONS]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    st.text(max_size=60),
    st.text(alphabet="0123456789.eE+-_, kKMGTiBbsmnuµ/FLOPSparmsLHdb*^()", max_size=40),
    st.from_regex(r"-?[0-9]{1,6}(\.[0-9]{1,3})? ?(GB|GiB|MB|ms|s|us|GB/s|TFLOP|B|K|M|T|bits?)?", fullmatch=True),
    st.from_regex(r"-?[0-9]{1,4}([, _][0-9]{2,4}){0,4}(\.[0-9]{0,3})?(e-?[0-9]{1,4})? ?(GB|ms|B|K)?", fullmatch=True),
    st.from_regex(r"(N|b|L|H|d|pi|e|[0-9]{1,3})( ?(\*\*|\^|[-+*/ .,]) ?(N|b|L|H|d|sqrt\(|Max\(|\(|\)|[0-9]{1,9})){0,8}",
                  fullmatch=True),
    st.binary(max_size=20),
    st.fractions(),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.just(____),
    st.just(...),
    st.sampled_from([np.float64("nan"), np.int8(3), np.bool_(True), np.str_("14 GB"), np.datetime64("2024-01-01"),
                     np.complex64(1 + 2j), object(), print, len, type, Result, lambda *a, **k: 1.0,
                     lambda *a, **k: "x", lambda *a, **k: None, lambda *a: 1 / 0, lambda *a, **k: ____]),
)
_arrays = hnp.arrays(
    dtype=st.sampled_from([np.float64, np.float32, np.int64, np.int8, np.bool_, np.complex128]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)
ANSWERS = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=5), children, max_size=3),
    ),
    max_leaves=8,
)


@pytest.mark.parametrize("set_name, qid", QUESTIONS)
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(answer=ANSWERS)
def test_check_survives_any_answer(set_name, qid, answer):
    q = getattr(SETS[set_name], qid)
    r = q.check(answer)  # non-strict: never raises
    assert isinstance(r, Result)
    assert r.status in STATUSES
    assert r.question == qid and r.set == set_name
    assert "Internal checker error" not in r.feedback, r.feedback
    assert r.status == CORRECT or r.feedback.strip()
    str(r), r._repr_html_(), r.record()


def _torch_answers():
    torch = pytest.importorskip("torch")
    return [torch.tensor(1.5), torch.tensor([1.0, 2.0]), torch.zeros(()), torch.tensor(3, dtype=torch.int64),
            torch.tensor(float("nan")), torch.tensor(True), torch.ones(2, 2), torch.tensor(1 + 2j)]


@pytest.mark.parametrize("set_name, qid", QUESTIONS)
def test_check_survives_torch_tensors(set_name, qid):
    q = getattr(SETS[set_name], qid)
    for answer in _torch_answers():
        r = q.check(answer)
        assert r.status in STATUSES and "Internal checker error" not in r.feedback, r.feedback
