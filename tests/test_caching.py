"""course_lib.core.caching (the prefix, module and session cache model, its costs, its argument checks and
limits) and course_lib.measure.cache_timing (the same cases on a TinyLM, and their calibrated predictions).

Unit tests pin the model to the estimator and the generated formulas; Hypothesis properties check the
relations that must hold for any input (a cache never prefills more tokens, the mean TTFT lies between
hit and miss, the break-even hit rate really breaks even) and that every public function of the model
answers any input with a result or a ValueError/TypeError naming an argument, in bounded work. Timing claims
are not tested here.
"""
from __future__ import annotations

import ast
import inspect
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.core.numeric import raw as g
from course_lib import estimate, get_hardware, get_model, kv_cache_bytes
from course_lib.core import caching

counts = st.integers(min_value=0, max_value=5000)
turns = st.integers(min_value=1, max_value=60)
times = st.floats(min_value=1e-6, max_value=10.0, allow_nan=False)


def _imports(module) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in ``module``'s source, function bodies included."""
    out = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", [a.name for a in node.names]))
    return out


def test_the_model_imports_no_measurement_code_anywhere():
    # no torch, and no shim that imports the measurement layer inside a function
    for mod, _ in _imports(caching):
        assert mod.split(".")[0] not in ("torch", "ipywidgets", "matplotlib"), mod
        assert not mod.startswith("course_lib.measure"), mod


def test_each_name_lives_in_one_module():
    cache_timing = pytest.importorskip("course_lib.measure.cache_timing")
    assert not set(caching.__all__) & set(cache_timing.__all__)


def test_the_measurements_use_only_public_names_of_the_core():
    cache_timing = pytest.importorskip("course_lib.measure.cache_timing")
    import importlib

    for mod, names in _imports(cache_timing):
        if mod.startswith("course_lib.core"):
            public = importlib.import_module(mod).__all__ if mod != "course_lib.core" else None
            for n in names:
                assert not n.startswith("_") and (public is None or n in public), f"{mod}.{n}"
    src = inspect.getsource(cache_timing)
    assert "bench._" not in src and "validate._" not in src and "caching._" not in src


# --------------------------------------------------------------------------------------------------
# Prefix sharing
# --------------------------------------------------------------------------------------------------
def test_prefix_reuse_is_two_estimates():
    r = caching.prefix_reuse("mistral-7b", "h200", 4000, 100)
    assert r.ttft_miss == estimate("mistral-7b", "h200", 4100, 1).ttft
    assert r.ttft_hit == estimate("mistral-7b", "h200", 4100, 1, cached_prefix_tokens=4000).ttft
    assert r.cached_tokens == 4000 and r.prompt_tokens == 4100
    assert r.speedup == pytest.approx(r.ttft_miss / r.ttft_hit)
    assert r.saved == pytest.approx(r.ttft_miss - r.ttft_hit)
    assert r.latency_reduction == pytest.approx(1 - r.ttft_hit / r.ttft_miss)
    assert r.hit.prefill_bound == "memory" and r.miss.prefill_bound == "compute"
    assert r.expected_ttft(0.25) == g.expected_ttft(0.25, r.ttft_hit, r.ttft_miss)


def test_block_alignment_and_minimum():
    assert caching.reusable_tokens(1000, 16) == 992
    assert caching.reusable_tokens(4100, 128, 1024) == 4096
    assert caching.reusable_tokens(1023, 128, 1024) == 0
    assert caching.reusable_tokens(1024, 128, 1024) == 1024
    r = caching.prefix_reuse("llama-3-8b", "a100-80gb", 1000, 10, block_tokens=16)
    assert r.cached_tokens == 992
    assert r.ttft_hit == estimate("llama-3-8b", "a100-80gb", 1010, 1, cached_prefix_tokens=992).ttft
    # nothing reusable: the hit is the miss
    r0 = caching.prefix_reuse("llama-3-8b", "a100-80gb", 10, 10, block_tokens=16)
    assert r0.cached_tokens == 0 and r0.ttft_hit == r0.ttft_miss


def test_write_overhead_and_break_even():
    r = caching.prefix_reuse("mistral-7b", "h200", 4000, 100)
    t_w = caching.write_overhead_time("mistral-7b", 4000, 64e9)
    assert t_w == pytest.approx(kv_cache_bytes("mistral-7b", 4000) / 64e9)
    h = r.break_even_hit_rate(t_w)
    assert h == pytest.approx(t_w / (r.ttft_miss - r.ttft_hit + t_w))
    mean_with_writes = h * r.ttft_hit + (1 - h) * (r.ttft_miss + t_w)
    assert mean_with_writes == pytest.approx(r.ttft_miss)
    assert caching.break_even_hit_rate(1.0, 2.0, 0.0) == 0.0


def test_derivations_match_the_formulas():
    d = caching.session_derivation()
    assert d["matches"]
    import sympy as sp

    from course_lib.core.formulas import S
    assert sp.simplify(d["sum_nocache"] - d["sum_cached"] - d["saved"]) == 0
    assert d["saved"].subs(S.turns, 1) == 0          # one turn: nothing to save
    b = caching.break_even_derivation()
    assert b["matches"]


@given(p=counts, n=st.integers(min_value=1, max_value=2000), b=st.integers(min_value=1, max_value=256))
def test_hit_never_slower_than_miss(p, n, b):
    r = caching.prefix_reuse("llama-3-8b", "h100-sxm", p, n, block_tokens=b)
    assert 0 <= r.cached_tokens <= p and r.cached_tokens % b == 0
    assert r.ttft_hit <= r.ttft_miss


@given(h=st.one_of(st.just(0.0), st.floats(min_value=1e-30, max_value=1)), t1=times, t2=times)
def test_expected_ttft_lies_between_hit_and_miss(h, t1, t2):
    hit, miss = min(t1, t2), max(t1, t2)
    e = caching.expected_ttft(h, hit, miss)
    assert hit * (1 - 1e-12) <= e <= miss * (1 + 1e-12)


@given(t1=times, t2=times, t_w=st.floats(min_value=0, max_value=10.0))
def test_break_even_breaks_even(t1, t2, t_w):
    if math.isclose(t1, t2, rel_tol=1e-9):
        return
    hit, miss = min(t1, t2), max(t1, t2)
    h = caching.break_even_hit_rate(hit, miss, t_w)
    assert 0 <= h < 1
    mean = h * hit + (1 - h) * (miss + t_w)
    assert mean == pytest.approx(miss, rel=1e-9, abs=1e-12)
    # above break-even the cache helps, below it hurts (when writes cost anything)
    if t_w > 0 and h < 0.99:
        above = min(1.0, h + 0.01)
        assert above * hit + (1 - above) * (miss + t_w) < miss


# --------------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------------
def test_module_reuse_costs_like_a_cached_prefix_of_the_same_size():
    m = caching.module_reuse("mistral-7b", "h200", [1000, 2000, 500], [True, False, True], 50)
    assert m.cached_tokens == 1500 and m.prompt_tokens == 3550
    assert m.reused.ttft == estimate("mistral-7b", "h200", 3550, 1, cached_prefix_tokens=1500).ttft
    assert m.full.ttft == estimate("mistral-7b", "h200", 3550, 1).ttft
    assert m.speedup > 1
    assert len(caching.MODULAR_REUSE_CAVEATS) >= 2
    assert any("position" in c for c in caching.MODULAR_REUSE_CAVEATS)


# --------------------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------------------
def test_turn_prompts_and_session_cost():
    # turns 2 and 3 prefill the new message and the previous reply's last token (sampled, never fed back)
    assert caching.turn_prompts(100, 10, 20, 3) == [(110, 0), (140, 129), (170, 159)]
    assert caching.turn_prompts(100, 10, 0, 3) == [(110, 0), (120, 110), (130, 120)]   # no reply: nothing pending
    s = caching.session_cost("mistral-7b", "h200", 100, 10, 20, 3)
    assert s.tokens_nocache == (110, 140, 170) and s.tokens_cached == (110, 11, 11)
    assert s.cumulative_tokens_nocache[-1] == caching.session_prefill_tokens(100, 10, 20, 3, cached=False) == 420
    assert s.cumulative_tokens_cached[-1] == caching.session_prefill_tokens(100, 10, 20, 3, cached=True) == 132
    assert s.ttft_nocache[2] == estimate("mistral-7b", "h200", 170, 1).ttft
    assert s.ttft_cached[2] == estimate("mistral-7b", "h200", 170, 1, cached_prefix_tokens=159).ttft
    assert s.cumulative_ttft_nocache[-1] == pytest.approx(sum(s.ttft_nocache))
    assert s.cache_tokens == 100 + 3 * 30


@given(S=counts, u=counts, r=counts, T=turns)
def test_cached_session_never_prefills_more(S, u, r, T):
    nc = caching.session_prefill_tokens(S, u, r, T, cached=False)
    c = caching.session_prefill_tokens(S, u, r, T, cached=True)
    assert c <= nc
    assert nc == sum(p for p, _ in caching.turn_prompts(S, u, r, T))
    assert c == sum(p - cached for p, cached in caching.turn_prompts(S, u, r, T))
    if T == 1:
        assert c == nc


@given(u=st.integers(min_value=0, max_value=5000), T=turns)
def test_one_turn_without_system_prompt_is_the_same_either_way(u, T):
    assert (caching.session_prefill_tokens(0, u, 0, 1, cached=True)
            == caching.session_prefill_tokens(0, u, 0, 1, cached=False) == u)
    # quadratic vs linear: with replies and users only, the no-cache total is u T (T + 1) / 2
    assert caching.session_prefill_tokens(0, u, 0, T, cached=False) == u * T * (T + 1) // 2
    assert caching.session_prefill_tokens(0, u, 0, T, cached=True) == u * T


@given(S=st.integers(0, 3000), u=st.integers(1, 300), r=st.integers(0, 300), T=st.integers(1, 8))
def test_session_cache_time_never_worse(S, u, r, T):
    s = caching.session_cost("llama-3-8b", "h100-sxm", S, u, r, T)
    for a, b in zip(s.ttft_cached, s.ttft_nocache):
        assert a <= b
    assert s.ttft_cached[0] == s.ttft_nocache[0]


# --------------------------------------------------------------------------------------------------
# Costs
# --------------------------------------------------------------------------------------------------
def test_cache_memory_and_sessions_fit():
    l3 = get_model("llama-3-8b")
    assert caching.cache_memory_bytes(l3, 8192, 10) == 10 * 8192 * l3.kv_bytes_per_token("fp16")
    h100 = get_hardware("h100-sxm")
    n = caching.sessions_fit(l3, h100, 8192)
    per = 8192 * l3.kv_bytes_per_token("fp16")
    assert n == math.floor((h100.capacity - l3.weight_bytes("fp16")) / per)
    assert n * per <= h100.capacity - l3.weight_bytes("fp16") < (n + 1) * per
    # a reserve lowers it; weights that do not fit give 0
    assert caching.sessions_fit(l3, h100, 8192, reserve_bytes=10e9) < n
    assert caching.sessions_fit("llama-3-70b", "rtx-4090", 1024) == 0
    # a sliding-window model keeps at most its window per session
    mis = get_model("mistral-7b")
    assert caching.sessions_fit(mis, "h200", 32768) == caching.sessions_fit(mis, "h200", mis.sliding_window)


def test_hit_rate_grows_with_the_budget_and_saturates():
    reqs = caching.shared_prefix_workload(requests=120, prefixes=6, prefix_tokens=256, suffix_tokens=16, vocab=1000)
    assert len(reqs) == 120 and all(len(r) == 272 for r in reqs)
    assert reqs == caching.shared_prefix_workload(requests=120, prefixes=6, prefix_tokens=256, suffix_tokens=16,
                                                  vocab=1000)
    bpt = 1000.0
    rows = caching.hit_rate_vs_budget(reqs, [16e3, 100e3, 400e3, 2e6, 1e9], bpt, block_tokens=16)
    rates = [r["hit_rate"] for r in rows]
    assert rates == sorted(rates)
    assert all(r["bytes_used"] <= r["budget_bytes"] for r in rows)
    distinct = len({tuple(r[:256]) for r in reqs})
    assert rows[-1]["hit_rate"] == pytest.approx((120 - distinct) / 120)   # only first uses miss
    assert rows[-1]["evictions"] == 0 and rows[0]["evictions"] > 0


def test_provider_claims():
    ids = {r["id"] for r in caching.provider_claims()}
    assert {"openai-prompt-caching", "anthropic-prompt-caching", "gim-2023-prompt-cache"} <= ids


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda: caching.prefix_reuse("mistral-7b", "h200", -1, 10), "prefix_tokens"),
    (lambda: caching.prefix_reuse("mistral-7b", "h200", 100, 0), "new_tokens"),
    (lambda: caching.prefix_reuse("mistral-7b", "h200", 100, 10, block_tokens=0), "block_tokens"),
    (lambda: caching.prefix_reuse("mistral-7b", "h200", 100.5, 10), "prefix_tokens"),
    (lambda: caching.expected_ttft(1.5, 1, 2), "hit_rate"),
    (lambda: caching.expected_ttft(0.5, 0, 2), "ttft_hit"),
    (lambda: caching.break_even_hit_rate(2, 1, 0.1), "ttft_hit"),
    (lambda: caching.break_even_hit_rate(1, 2, -0.1), "write_overhead"),
    (lambda: caching.session_cost("mistral-7b", "h200", 10, 0, 5, 3), "user_tokens"),
    (lambda: caching.session_prefill_tokens(10, 5, 5, 0, cached=True), "turns"),
    (lambda: caching.session_prefill_tokens(10, 5, 5, 2, cached="yes"), "cached"),
    (lambda: caching.sessions_fit("mistral-7b", "h200", 0), "session_tokens"),
    (lambda: caching.cache_memory_bytes("mistral-7b", 10, 0), "sessions"),
    (lambda: caching.module_reuse("mistral-7b", "h200", [10, 20], [True], 5), "cached"),
    (lambda: caching.module_reuse("mistral-7b", "h200", [10, 0], [True, False], 5), "module_tokens[1]"),
    (lambda: caching.hit_rate_vs_budget([[1, 2]], [0], 10), "budgets_bytes[0]"),
    (lambda: caching.hit_rate_vs_budget([], [1e6], 10), "requests"),
    (lambda: caching.shared_prefix_workload(prefixes=0), "prefixes"),
    (lambda: caching.write_overhead_time("mistral-7b", 10, 0), "bandwidth"),
])
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises((ValueError, TypeError)) as e:
        call()
    assert name in str(e.value)


def test_bad_model_name_suggests():
    with pytest.raises(ValueError, match="mistral"):
        caching.prefix_reuse("mistrall-7b", "h200", 10, 10)


# --------------------------------------------------------------------------------------------------
# Edges and limits: bounded work, a clear error naming the argument, never inf / nan / negative
# --------------------------------------------------------------------------------------------------
def test_a_steep_zipf_works():
    # 1 / rank^300 used to overflow; it sends every request to the most popular prefix
    reqs = caching.shared_prefix_workload(requests=50, prefixes=20, prefix_tokens=8, suffix_tokens=2, zipf=300)
    assert len({tuple(r[:8]) for r in reqs}) == 1
    first = caching.shared_prefix_workload(requests=1, prefixes=1, prefix_tokens=8, suffix_tokens=2)[0][:8]
    assert reqs[0][:8] == first                                   # prefix 0 is drawn first from the seed
    assert len(caching.shared_prefix_workload(requests=5, prefixes=3, prefix_tokens=4, suffix_tokens=1,
                                              zipf=1e30)) == 5
    uniform = caching.shared_prefix_workload(requests=300, prefixes=3, prefix_tokens=8, suffix_tokens=1, zipf=0)
    assert len({tuple(r[:8]) for r in uniform}) == 3


def test_a_workload_beyond_the_limit_is_refused_before_it_is_built():
    ok = caching.MAX_WORKLOAD_TOKENS // 2 - 1          # 1 prefix of 1 token + requests * 2 tokens
    with pytest.raises(ValueError, match="MAX_WORKLOAD_TOKENS") as e:
        caching.shared_prefix_workload(requests=ok + 1, prefixes=1, prefix_tokens=1, suffix_tokens=1)
    assert "requests" in str(e.value)
    with pytest.raises(ValueError, match="MAX_WORKLOAD_TOKENS"):
        caching.shared_prefix_workload(requests=1, prefixes=10**6, prefix_tokens=10**6)


@pytest.mark.parametrize("turns", [caching.MAX_TURNS + 1, 10**5, 1e308, 10**400])
def test_session_cost_refuses_more_turns_than_its_limit(turns):
    # 10**5 turns took over 10 s, 1e308 never returned: now refused at once, saying the limit
    with pytest.raises(ValueError, match="turns") as e:
        caching.session_cost("mistral-7b", "h200", 100, 10, 20, turns)
    if isinstance(turns, int) and turns < 10**15:
        assert f"{caching.MAX_TURNS}" in str(e.value)
    with pytest.raises(ValueError, match="turns"):
        caching.turn_prompts(100, 10, 20, turns)


def test_session_cost_at_its_limit():
    s = caching.session_cost("mistral-7b", "h200", 10, 1, 1, caching.MAX_TURNS)
    assert len(s.ttft_cached) == caching.MAX_TURNS
    assert s.cumulative_tokens_nocache[-1] == caching.session_prefill_tokens(10, 1, 1, caching.MAX_TURNS, False)


def test_session_totals_are_closed_form_and_exact_up_to_the_count_limit():
    S, u, r, T = 3, 7, 5, 12_345_677                      # far beyond MAX_TURNS: no per-turn work
    exact = T * S + u * T * (T + 1) // 2 + r * T * (T - 1) // 2
    assert exact <= 10**15
    assert caching.session_prefill_tokens(S, u, r, T, cached=False) == exact
    assert caching.session_prefill_tokens(S, u, r, T, cached=True) == S + T * u + (T - 1)
    with pytest.raises(ValueError, match="prefilled without a cache"):
        caching.session_prefill_tokens(S, u, r, 10**9, cached=False)      # 6e18 tokens
    with pytest.raises(ValueError, match="system_tokens"):                  # the conversation itself is too long
        caching.session_prefill_tokens(10**15, 1, 0, 2, cached=True)


def test_token_totals_beyond_the_count_limit_name_the_arguments():
    with pytest.raises(ValueError, match=r"prefix_tokens \+ new_tokens"):
        caching.prefix_reuse("mistral-7b", "h200", 10**15, 1)
    with pytest.raises(ValueError, match=r"sum\(module_tokens\)"):
        caching.module_reuse("mistral-7b", "h200", [10**15, 1], [True, False], 1)
    with pytest.raises(ValueError, match="module_tokens"):
        caching.module_reuse("mistral-7b", "h200", [1] * (caching.MAX_MODULES + 1),
                             [True] * (caching.MAX_MODULES + 1), 1)
    with pytest.raises(ValueError, match="prefix_tokens"):
        caching.reusable_tokens(10**400, 16)


def test_block_alignment_is_exact_at_the_count_limit():
    p = 10**15 - 1
    assert caching.reusable_tokens(p, 16) == p - p % 16
    assert caching.reusable_tokens(p, 10**15) == 0


def test_replays_beyond_the_limit_are_refused():
    reqs = [[1] * 1000] * 1000                                           # 10**6 tokens
    budgets = caching.MAX_REPLAY_TOKENS // 10**6
    with pytest.raises(ValueError, match="MAX_REPLAY_TOKENS"):
        caching.hit_rate_vs_budget(reqs, [1e6] * (budgets + 1), 10.0)
    with pytest.raises(ValueError, match="MAX_REPLAY_TOKENS"):            # an endless list of budgets too
        caching.hit_rate_vs_budget(reqs, itertools.repeat(1e6), 10.0)
    with pytest.raises(TypeError, match=r"requests\[1\]"):
        caching.hit_rate_vs_budget([[1, 2], 5], [1e6], 10.0)
    assert caching.hit_rate_vs_budget([[1, 2]], [], 10.0) == []


_BAD = [-1, 2.5, 10**400, -1e308, 1e308, math.inf, -math.inf, math.nan, 5e-324, 2**53 + 1, 10**15 + 1,
        True, None, "12", b"12", bytearray(b"1"), 1j, [3]]
_MODELS = st.sampled_from(["mistral-7b", "llama-3-8b", "mistrall-7b", 7, None])
_HARDWARE = st.sampled_from(["h200", "rtx-4090", "h2000", None])


def _any(good):
    return st.one_of(good, st.sampled_from(_BAD))


_TOKENS = _any(st.integers(0, 10**6))
_SMALL = _any(st.integers(0, 64))
_TIMES = _any(st.floats(1e-9, 1e3))
_EFFICIENCY = _any(st.floats(1e-6, 1.0))
_TURNS = st.one_of(st.integers(1, 20), st.sampled_from([caching.MAX_TURNS + 1, 10**5, *_BAD]))
_LISTS = st.one_of(st.lists(_TOKENS, max_size=4), st.sampled_from(["123", b"1", 5, None, range(10**9)]))

#: a strategy for the arguments of every public function of the model (positional, keyword)
STRATEGIES = {
    "prefix_reuse": st.tuples(st.tuples(_MODELS, _HARDWARE, _TOKENS, _TOKENS),
                              st.fixed_dictionaries({"block_tokens": _SMALL, "min_tokens": _TOKENS,
                                                     "compute_efficiency": _EFFICIENCY})),
    "ttft_with_cache": st.tuples(st.tuples(_MODELS, _HARDWARE, _TOKENS, _TOKENS),
                                 st.fixed_dictionaries({"bandwidth_efficiency": _EFFICIENCY})),
    "reusable_tokens": st.tuples(st.tuples(_TOKENS, _SMALL, _TOKENS), st.just({})),
    "expected_ttft": st.tuples(st.tuples(_any(st.floats(0, 1)), _TIMES, _TIMES), st.just({})),
    "break_even_hit_rate": st.tuples(st.tuples(_TIMES, _TIMES, _TIMES), st.just({})),
    "write_overhead_time": st.tuples(st.tuples(_MODELS, _TOKENS, _any(st.floats(1e-3, 1e15))), st.just({})),
    "module_reuse": st.tuples(st.tuples(_MODELS, _HARDWARE, _LISTS, st.lists(st.booleans(), max_size=4), _TOKENS),
                              st.just({})),
    "check_session": st.tuples(st.tuples(_TOKENS, _TOKENS, _TOKENS, _TURNS), st.just({})),
    "turn_prompts": st.tuples(st.tuples(_TOKENS, _TOKENS, _TOKENS, _TURNS), st.just({})),
    "session_prefill_tokens": st.tuples(st.tuples(_TOKENS, _TOKENS, _TOKENS, _any(st.integers(1, 10**9)),
                                                  st.sampled_from([True, False, 1, "yes"])), st.just({})),
    "session_cost": st.tuples(st.tuples(_MODELS, _HARDWARE, _TOKENS, _TOKENS, _TOKENS, _TURNS), st.just({})),
    "cache_memory_bytes": st.tuples(st.tuples(_MODELS, _TOKENS, _any(st.integers(1, 10**6))), st.just({})),
    "sessions_in_budget": st.tuples(st.tuples(_MODELS, _any(st.floats(0, 1e12)), _TOKENS), st.just({})),
    "sessions_fit": st.tuples(st.tuples(_MODELS, _HARDWARE, _TOKENS),
                              st.fixed_dictionaries({"reserve_bytes": _any(st.floats(0, 1e12))})),
    "shared_prefix_workload": st.tuples(st.tuples(_SMALL, _SMALL, _SMALL, _SMALL, _any(st.floats(0, 1e3)),
                                                  _any(st.integers(2, 10**6)), _TOKENS), st.just({})),
    "hit_rate_vs_budget": st.tuples(st.tuples(st.one_of(st.lists(st.lists(st.integers(0, 9), max_size=40),
                                                                 max_size=5), st.sampled_from(_BAD)),
                                              st.one_of(st.lists(_any(st.floats(1.0, 1e9)), max_size=3),
                                                        st.sampled_from(_BAD)),
                                              _any(st.floats(1e-3, 1e6)), _SMALL), st.just({})),
}
#: public functions that take no arguments (tested above)
NO_ARGUMENTS = {"session_derivation", "break_even_derivation", "provider_claims"}


def _public_functions():
    return sorted(n for n in caching.__all__ if inspect.isfunction(getattr(caching, n)))


def test_every_public_function_has_a_strategy():
    assert set(_public_functions()) == set(STRATEGIES) | NO_ARGUMENTS


def _numbers(result):
    """Every number a result holds that is a time, a count or a ratio (all must be finite and >= 0)."""
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        yield result
    elif isinstance(result, (list, tuple)):
        for x in result:
            yield from _numbers(x)
    elif isinstance(result, dict):
        yield from _numbers(list(result.values()))
    elif isinstance(result, caching.HitMiss):
        yield from (result.ttft_hit, result.ttft_miss, result.speedup, result.saved)
    elif isinstance(result, caching.SessionCost):
        yield from _numbers([result.ttft_nocache, result.ttft_cached, result.tokens_cached, result.tokens_nocache])


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_any_input_gets_a_result_or_a_clear_error(name):
    fn = getattr(caching, name)
    params = list(inspect.signature(fn).parameters)

    @settings(max_examples=40, deadline=None)
    @given(STRATEGIES[name])
    def check(call):
        args, kwargs = call
        try:
            result = fn(*args, **kwargs)
        except (ValueError, TypeError) as e:
            assert any(p in str(e) for p in params) or "unknown" in str(e), f"{name}: {e!r} names no argument"
            return
        for x in _numbers(result):
            assert math.isfinite(x) and x >= 0, f"{name}{args} returned {x!r}"

    check()


# --------------------------------------------------------------------------------------------------
# Measurement helpers on a real (tiny) TinyLM: structure and exactness, never timing claims
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cache_timing():
    """``course_lib.measure.cache_timing`` (torch), imported by the tests that use it: collection stays torch-free."""
    return pytest.importorskip("course_lib.measure.cache_timing")


@pytest.fixture(scope="module")
def tiny_lm():
    pytest.importorskip("torch")
    from course_lib.measure.tinylm import TinyLM

    spec = get_model("llama-3-8b").scaled(name="tiny-test", layers=2, hidden=64, heads=2, kv_heads=1, head_dim=32,
                                          intermediate=128, vocab=97)
    return TinyLM(spec, dtype="fp32", device="cpu", max_seq=160, seed=0)


def test_measure_prefix_ttft_is_exact(tiny_lm, cache_timing):
    t = cache_timing.measure_prefix_ttft(tiny_lm, 96, 8, repeats=2, warmup=0, threads=1)
    assert t.prefix_tokens == 96 and t.new_tokens == 8 and t.repeats == 2 and t.threads == 1
    assert t.full_q1 <= t.full_seconds <= t.full_q3 and t.cached_q1 <= t.cached_seconds <= t.cached_q3
    assert t.max_abs_diff <= 1e-4                        # prefix reuse is exact up to rounding
    assert t.state_bytes == 96 * tiny_lm.kv_cache_bytes_per_token()
    assert t.speedup == pytest.approx(t.full_seconds / t.cached_seconds)


def test_measure_session_and_modules(tiny_lm, cache_timing):
    s = cache_timing.measure_session_ttft(tiny_lm, 32, 4, 8, turns=3, repeats=1, threads=1)
    assert len(s.ttft_nocache) == len(s.ttft_cached) == 3 and all(x > 0 for x in s.ttft_cached)
    assert s.total_nocache == pytest.approx(sum(s.ttft_nocache))
    m = cache_timing.measure_module_reuse(tiny_lm, (16, 16), 4)
    assert m.prefix_exact["kl_mean"] <= 1e-9 and m.prefix_exact["top1_agreement"] == 1.0
    assert m.modules_in_place["max_abs_diff"] > 0          # skipping cross-module attention changes the logits
    assert m.modules_at_zero["positions"] == 4


def test_profile_prefill_groups(tiny_lm, cache_timing):
    p = cache_timing.profile_prefill(tiny_lm, 64, threads=1)
    assert set(p) == {*cache_timing.PROFILE_GROUPS, "other", "total", "calls", "group_calls"}
    assert p["matrix products"] > 0 and p["calls"] > 0
    assert set(p["group_calls"]) == {*cache_timing.PROFILE_GROUPS, "other"}
    assert sum(p["group_calls"].values()) == p["calls"] and p["group_calls"]["matrix products"] > 0
    assert p["total"] == pytest.approx(sum(p[k] for k in (*cache_timing.PROFILE_GROUPS, "other")))
    pc = cache_timing.profile_prefill(tiny_lm, 64, threads=1, prefix_tokens=48)
    assert pc["calls"] > 0
    with pytest.raises(ValueError, match="prefix_tokens"):
        cache_timing.profile_prefill(tiny_lm, 64, prefix_tokens=64)


def test_measurements_check_their_arguments(tiny_lm, cache_timing):
    with pytest.raises(ValueError, match="max_seq"):
        cache_timing.measure_prefix_ttft(tiny_lm, 150, 20)
    with pytest.raises(ValueError, match="user_tokens"):
        cache_timing.measure_session_ttft(tiny_lm, 10, 0, 5, 2)
    with pytest.raises(TypeError, match="lm must be"):
        cache_timing.measure_prefix_ttft(object(), 10, 2)
    with pytest.raises(TypeError, match="module_tokens"):
        cache_timing.measure_module_reuse(tiny_lm, [], 2)


# --------------------------------------------------------------------------------------------------
# The calibrated model's predictions of the same cases, and the public timing helper they use
# --------------------------------------------------------------------------------------------------
def _hand_calibration():
    """A Calibration with known numbers (no probe runs): predictions are then pure arithmetic."""
    torch = pytest.importorskip("torch")
    from course_lib.measure import calibrate, probes

    copy = probes.CopyResult(buffer_bytes=10**8, bytes=2 * 10**8, counted="read+write", seconds=0.02, q1_seconds=0.02,
                            q3_seconds=0.02, repeats=1, device="cpu", threads=1)
    mm = probes.MatmulResult(n=1000, dtype="fp32", flops=2e9, seconds=0.02, q1_seconds=0.02, q3_seconds=0.02,
                            repeats=1, device="cpu", threads=1)
    ov = probes.OverheadResult(seconds=2e-6, q1_seconds=2e-6, q3_seconds=2e-6,
                              per_kind={"elementwise": 2e-6, "matmul": 2e-6, "view": 5e-7}, repeats=1, device="cpu",
                              threads=1)
    return calibrate.Calibration(device="cpu", device_name="test CPU", threads=1, torch_version=torch.__version__,
                                load_before=(), copy=copy, matmul=mm, overhead=ov,
                                scores={(1, 2, 32, 32): 5e8, (1, 2, 8, 96): 5e8})


SMALL = get_model("llama-3-8b").scaled(name="tiny-cal", layers=2, hidden=64, heads=2, kv_heads=1, head_dim=32,
                                       intermediate=128, vocab=97)


def test_calibration_shapes_list_every_prefill_the_predictions_price(cache_timing):
    shapes = cache_timing.calibration_shapes(96, 8)
    assert shapes == {"prompt_lengths": [104], "cached_prefills": [(104, 96)]}
    both = cache_timing.calibration_shapes(96, 8, 32, 4, 8, 3)
    prompts = caching.turn_prompts(32, 4, 8, 3)
    assert both["prompt_lengths"] == sorted({104} | {p for p, _ in prompts})
    assert both["cached_prefills"] == sorted({(104, 96)} | {(p, c) for p, c in prompts if c})
    with pytest.raises(ValueError, match="prefix case"):
        cache_timing.calibration_shapes()
    with pytest.raises(ValueError, match="new_tokens"):
        cache_timing.calibration_shapes(96, 0)


def test_calibrated_prefix_prediction_is_two_validate_predictions(cache_timing):
    from course_lib.measure import predict

    cal = _hand_calibration()
    r = cache_timing.predict_prefix_ttft_calibrated(SMALL, 96, 8, cal)
    full = predict.predict_ttft(SMALL, 104, cal)
    hit = predict.predict_ttft(SMALL, 104, cal, cached_tokens=96, reuse="prefix")
    assert r.full.terms == full.terms and r.cached.terms == hit.terms
    assert r.ttft_hit < r.ttft_miss and r.speedup == pytest.approx(r.ttft_miss / r.ttft_hit)
    assert r.cached.terms["kv_load"] > 0                   # the prefix path copies the state's K/V in


def test_calibrated_session_prediction_per_turn(cache_timing):
    from course_lib.measure import predict

    cal = _hand_calibration()
    s = cache_timing.predict_session_ttft_calibrated(SMALL, 32, 4, 8, 3, cal)
    assert len(s.nocache) == len(s.cached) == 3
    assert s.ttft_cached[0] == pytest.approx(s.ttft_nocache[0])           # turn 1: a plain prefill either way
    for (prompt, cached), nc, c in zip(caching.turn_prompts(32, 4, 8, 3), s.nocache, s.cached):
        assert nc.tokens == c.tokens == prompt and c.cached_tokens == cached
        if cached:
            assert c.seconds < nc.seconds and c.terms["kv_load"] == 0     # extend: the K/V are in place
            assert c.terms == predict.predict_ttft(SMALL, prompt, cal, cached, reuse="session").terms
    assert s.total_nocache == pytest.approx(sum(s.ttft_nocache)) and s.total_cached < s.total_nocache


def test_calibrated_predictions_check_their_arguments(cache_timing):
    cal = _hand_calibration()
    with pytest.raises(TypeError, match="calibration"):
        cache_timing.predict_prefix_ttft_calibrated(SMALL, 96, 8, "fast")
    with pytest.raises(ValueError, match="new_tokens"):
        cache_timing.predict_prefix_ttft_calibrated(SMALL, 96, 0, cal)
    with pytest.raises(ValueError, match="user_tokens"):
        cache_timing.predict_session_ttft_calibrated(SMALL, 32, 0, 8, 3, cal)


def test_public_timing_helpers_the_measurements_use():
    timing = pytest.importorskip("course_lib.measure.timing")
    with timing.Stopwatch("cpu", threads=1) as sw:
        import torch

        assert torch.get_num_threads() == 1 and sw.threads == 1
        seconds, out = sw.time(sum, [1, 2, 3])
    assert out == 6 and seconds >= 0
    assert timing.quartiles([3.0, 1.0, 2.0]) == (1.5, 2.0, 2.5)
    with pytest.raises(ValueError, match="times"):
        timing.quartiles([])
    with pytest.raises(TypeError, match="fn"):
        timing.Stopwatch("cpu", 1).time(42)


def test_sessions_in_budget_is_the_whole_sessions_whose_cache_fits():
    per = caching.cache_memory_bytes("mistral-7b", 8192)
    assert caching.sessions_in_budget("mistral-7b", 10 * per, 8192) == 10
    assert caching.sessions_in_budget("mistral-7b", 10 * per - 1, 8192) == 9
    assert caching.sessions_in_budget("mistral-7b", 0, 8192) == 0
    with pytest.raises(ValueError, match="budget_bytes"):
        caching.sessions_in_budget("mistral-7b", -1, 8192)
