"""The serving simulator and the steady-state plan (issue 16): analytic limits, each with its tolerance stated.

* one request alone is the estimator's TTFT / TPOT / total (relative 1e-9: the same formulas, summed in
  a different order);
* saturation: requests that all arrive at once, served in waves of ``max_batch``, give exactly the
  throughput of the estimator's static batch (relative 1e-9);
* ``max_batch=1`` and fixed lengths is an M/D/1 queue: the mean wait matches Pollaczek-Khinchine's
  ``rho S / (2 (1 - rho))`` within 5 % (40,000 requests at rho = 0.5: over 12 seeds the error's standard
  deviation is 1 %, so 5 % is 5 of them; the M/M/1 value, twice as large, fails by 50 %);
* Little's law from empty to empty with the empirical arrival rate, the time integral kept by the
  simulator against the per-request records (relative 1e-9), also with preemptions;
* determinism for a seed, monotonicity in the rate (fixed seeds, common random numbers);
* the steady-state plan reproduces issue 16's 1,000-user numbers and bounds the simulated TPOT.
"""
from __future__ import annotations

import numpy as np
import pytest

from course_lib.core.estimator import estimate
from course_lib.core.serving import (MAX_REQUESTS, SimulationTooLarge, StepCost, continuous_batching_plan,
                                     percentile, simulate, speculative_decoding, speculative_tokens_per_step,
                                     step_cost)

M, H = "llama-3-8b", "h100-sxm"
EFF = dict(compute_efficiency=0.747, bandwidth_efficiency=0.546)   # lesson 09's measured efficiencies


def rel(a, b):
    return abs(a - b) / abs(b)


# --------------------------------------------------------------------------------------------------
# The step cost is the estimator's
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision, cached", [("fp16", 0), ("fp8", 1536), ("fp16", 100)])
def test_one_request_alone_is_the_estimate(precision, cached):
    r = simulate(M, H, None, 2048, 300, arrivals=[0.5], precision=precision, cached_prefix_tokens=cached,
                 token_budget=4096, **EFF)
    e = estimate(M, H, 2048, 300, precision=precision, cached_prefix_tokens=cached, **EFF)
    rec = r.records[0]
    assert rel(rec.ttft, e.ttft) < 1e-9
    assert rel(rec.tpot, e.tpot) < 1e-9
    assert rel(rec.e2e, e.total) < 1e-9
    assert rec.wait == 0 and r.steps == 300


def test_sliding_window_decode_reads_at_most_the_window():
    e = estimate("mistral-7b", H, 4000, 400)          # the window (4096) is crossed during the answer
    rec = simulate("mistral-7b", H, None, 4000, 400, arrivals=[0.0], token_budget=4096).records[0]
    assert rel(rec.e2e, e.total) < 1e-9


def test_step_cost_prices_a_mixed_step_as_max_of_compute_and_memory():
    cost = step_cost(M, H, **EFF)
    pure_decode = cost(0, 64, 64 * 2000)
    e = estimate(M, H, 1999, 2, batch=64, **EFF)       # one decode step at context 2000
    assert rel(pure_decode, e.decode_first.time) < 1e-9
    mixed = cost(512, 64, 64 * 2000 + 512, attention_pairs=64 * 2000 + 512 ** 2 / 2, logit_rows=65)
    prefill = cost(512, 0, 512, attention_pairs=512 ** 2 / 2, logit_rows=1)
    assert max(pure_decode, prefill) < mixed < pure_decode + prefill   # piggybacking saves the sum
    with pytest.raises(ValueError, match="at least one token"):
        cost(0, 0, 0)


# --------------------------------------------------------------------------------------------------
# Saturation
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunked", [False, True])
def test_saturation_throughput_is_the_static_batch_bound(chunked):
    B, P, n, waves = 16, 512, 64, 3
    r = simulate(M, H, None, P, n, arrivals=[0.0] * (B * waves), max_batch=B, token_budget=B * P,
                 chunked_prefill=chunked, **EFF)
    e = estimate(M, H, P, n, batch=B, **EFF)
    bound = B * n / e.total                          # output tokens/s of one static batch, back to back
    assert rel(r.throughput, bound) < 1e-9
    assert r.max_batch_seen == B and r.preemptions == 0
    assert rel(r.utilisation, 1.0) < 1e-12


# --------------------------------------------------------------------------------------------------
# Queueing theory
# --------------------------------------------------------------------------------------------------
def test_max_batch_one_is_md1():
    P, n, rho, N = 256, 2, 0.5, 40_000
    S = estimate(M, H, P, n).total                   # deterministic service: one prefill + one decode step
    r = simulate(M, H, rho / S, P, n, N, 0, max_batch=1)
    wq = sum(r.wait) / N
    pk = rho * S / (2 * (1 - rho))                   # Pollaczek-Khinchine for M/D/1
    assert rel(wq, pk) < 0.05
    assert all(abs(rec.e2e - rec.wait - S) < 1e-12 for rec in r.records[:100])


@pytest.mark.parametrize("memory_fraction", [0.9, 0.215])
def test_littles_law_empty_to_empty(memory_fraction):
    r = simulate(M, H, 40.0, (128, 1024), (16, 256), 1500, 3, max_batch=64, token_budget=1024,
                 kv_memory_fraction=memory_fraction, **EFF)
    if memory_fraction < 0.5:
        assert r.preemptions > 0                     # the small KV pool forces recomputation
    lam = r.arrival_rate                             # empirical: requests / (last completion - first arrival)
    W = sum(r.e2e) / len(r.records)
    Wq = sum(r.wait) / len(r.records)
    assert rel(r.mean_in_system, lam * W) < 1e-9
    assert rel(r.mean_queued, lam * Wq) < 1e-9
    assert r.kv_blocks_free_at_end == r.kv_blocks  # every block came back


@pytest.mark.parametrize("kw", [
    dict(),
    dict(chunked_prefill=False),
    dict(max_batch=4, token_budget=64, block_tokens=32),
    dict(kv_memory_fraction=0.215, max_batch=64),
    dict(kv_memory_fraction=0.215, chunked_prefill=False),
    dict(cached_prefix_tokens=100, block_tokens=8, token_budget=256),
])
def test_every_request_completes_no_sooner_than_alone(kw):
    r = simulate(M, H, 30.0, (128, 1024), (1, 200), 300, 5, **kw)
    k = kw.get("cached_prefix_tokens", 0)
    alone = {}
    for x in r.records:
        assert x.arrival <= x.admitted <= x.first_token <= x.finish
        key = (x.prompt_tokens, x.output_tokens)
        if key not in alone:
            alone[key] = estimate(M, H, *key, cached_prefix_tokens=k)
        e = alone[key]                               # a step with more work never takes less time
        assert x.ttft >= e.ttft * (1 - 1e-9) and x.e2e >= e.total * (1 - 1e-9)
    assert sum(x.preemptions for x in r.records) == r.preemptions
    assert r.kv_blocks_free_at_end == r.kv_blocks
    assert r.max_batch_seen <= kw.get("max_batch", 256)


def test_deterministic_for_a_seed():
    args = (M, H, 20.0, (64, 512), [8, 32, 128], 300)
    a, b, c = simulate(*args, 7), simulate(*args, 7), simulate(*args, 8)
    assert a.records == b.records and a.steps == b.steps
    assert a.records != c.records


def test_higher_rate_never_lowers_the_median_ttft():
    p50 = [simulate(M, H, rate, (256, 1024), (32, 128), 600, seed, max_batch=32, **EFF).percentiles("ttft")[50]
           for seed in (0, 1) for rate in (5.0, 20.0, 40.0, 60.0)]
    for runs in (p50[:4], p50[4:]):
        assert runs == sorted(runs)
        assert runs[-1] > 2 * runs[0]                # and the load shows


def test_chunked_prefill_trades_ttft_for_tpot_and_raises_capacity():
    kw = dict(max_batch=64, token_budget=2048, **EFF)

    def run(rate, chunked):
        return simulate(M, H, rate, 1536, 128, 800, 0, chunked_prefill=chunked, **kw).summary()

    on, off = run(10.0, True), run(10.0, False)      # light load (about half the capacity)
    assert on["tpot_p99"] < off["tpot_p99"]          # prefills no longer stall the decodes ...
    assert on["ttft_p99"] > off["ttft_p99"]          # ... and a prompt shares its steps with them
    on, off = run(20.0, True), run(20.0, False)      # 2,560 output tokens/s offered
    assert on["throughput"] > 1.1 * off["throughput"]  # a prefill riding on decode steps costs less


def test_lengths_fixed_uniform_or_list():
    r = simulate(M, H, 10.0, (100, 200), [5, 7], 400, 1)
    ps = [x.prompt_tokens for x in r.records]
    assert min(ps) >= 100 and max(ps) <= 200 and len(set(ps)) > 50
    assert {x.output_tokens for x in r.records} == {5, 7}
    r = simulate(M, H, None, [10, 20, 30], 4, arrivals=[0.0, 1.0, 2.0])
    assert [x.prompt_tokens for x in r.records] == [10, 20, 30]


def test_custom_step_time():
    calls = []

    def constant(prefill_tokens, decode_seqs, context_tokens_total):
        calls.append((prefill_tokens, decode_seqs, context_tokens_total))
        return 0.001

    r = simulate(M, H, None, 100, 10, arrivals=[0.0], step_time=constant)
    assert rel(r.records[0].e2e, 0.010) < 1e-12     # one prefill step, nine decode steps
    assert calls[0] == (100, 0, 100) and calls[1] == (0, 1, 101)
    with pytest.raises(ValueError, match="step_time must return"):
        simulate(M, H, None, 100, 10, arrivals=[0.0], step_time=lambda p, d, c: 0.0)


def test_percentile_is_numpys_linear():
    xs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    with pytest.raises(ValueError, match="values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q"):
        percentile(xs, 101)


# --------------------------------------------------------------------------------------------------
# The steady state
# --------------------------------------------------------------------------------------------------
def test_thousand_users_plan_of_issue_16():
    fp16 = continuous_batching_plan(M, H, 1000, 2048, 300, tpot_budget=0.05, **EFF)
    fp8 = continuous_batching_plan(M, H, 1000, 2048, 300, precision="fp8", cached_prefix_tokens=1536,
                                   tpot_budget=0.05, **EFF)
    # issue 16: "about 7 and about 3" (static batching: 42 and 6). With the per-operator step cost (a prefill's
    # memory-bound lm_head read is no longer hidden under its compute) fp16 needs 142 sequences per GPU: 8 GPUs.
    assert (fp16.gpus, fp8.gpus) == (8, 3)
    assert abs(fp16.prefill_share - 0.38) < 0.01     # "prefill taking about 38% of each GPU"
    for p in (fp16, fp8):
        assert p.binds == "TPOT budget" and p.tpot <= 0.05 and p.ttft < 0.2
        assert p.memory_needed <= p.memory_limit
        nxt = continuous_batching_plan(M, H, 1000, 2048, 300, precision=p.precision,
                                       cached_prefix_tokens=1536 if p.precision == "fp8" else 0,
                                       tpot_budget=p.tpot * 0.999, **EFF)
        assert nxt.sequences_per_gpu < p.sequences_per_gpu


def test_plan_memory_binds_with_a_small_memory_fraction():
    p = continuous_batching_plan(M, H, 100, 2048, 300, kv_memory_fraction=0.25, **EFF)
    assert p.binds == "memory" and p.memory_needed <= p.memory_limit


def test_plan_bounds_the_simulated_tpot():
    """The plan adds the prefills to the decode steps; a mixed step costs max(compute, memory) <= the sum.

    So the simulated mean TPOT at C sequences in flight is at most the plan's, and within 15 % of it
    when the token budget lets prefills ride whole on a decode step (measured 10 % with these numbers).
    """
    plan = continuous_batching_plan(M, H, 100, 1024, 128, tpot_budget=0.03, **EFF)
    C = plan.sequences_per_gpu
    r = simulate(M, H, None, 1024, 128, arrivals=[0.0] * (8 * C), max_batch=C, token_budget=8192, **EFF)
    sim = r.summary()["tpot_mean"]
    assert sim <= plan.tpot and rel(sim, plan.tpot) < 0.15


# --------------------------------------------------------------------------------------------------
# Speculative decoding
# --------------------------------------------------------------------------------------------------
def test_speculative_tokens_per_step():
    import sympy as sp
    a, k = sp.symbols("a k", positive=True)
    closed = (1 - a ** (k + 1)) / (1 - a)            # the formula the lead moves into core/formulas.py
    for kv in range(0, 6):
        series = sum(a ** i for i in range(kv + 1))  # accepted drafts until the first rejection, plus one
        assert sp.cancel(closed.subs(k, kv) - series) == 0
        for av in (0.0, 0.3, 0.8):
            assert speculative_tokens_per_step(av, kv) == pytest.approx(float(series.subs(a, av)), rel=1e-12)
    assert speculative_tokens_per_step(1, 4) == 5
    assert speculative_tokens_per_step(0, 4) == 1
    for bad, name in (((1.5, 4), "acceptance"), ((0.5, -1), "draft_tokens")):
        with pytest.raises(ValueError, match=name):
            speculative_tokens_per_step(*bad)


def test_speculative_verification_is_cheap_at_small_batch_not_at_large():
    spec = lambda b, c, k: speculative_decoding(M, H, b, c, k, 0.8, **EFF)  # noqa: E731
    assert spec(8, 512, 0).speedup == pytest.approx(1.0, rel=1e-12)        # k = 0 is plain decoding
    small = spec(1, 2048, 4)
    assert small.verify_bound == "memory"
    assert rel(small.speedup, small.tokens_per_step) < 0.01  # the 5-token step costs one step (within 1 %)
    large = spec(512, 128, 4)
    assert large.verify_bound == "compute" and large.speedup < 1
    with pytest.raises(ValueError, match="draft_step_time"):
        speculative_decoding(M, H, 1, 100, 4, 0.8, draft_step_time=-1)


# --------------------------------------------------------------------------------------------------
# Bad input: one clear error each, naming the argument
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(arrival_rate=0), "arrival_rate"),
    (dict(arrival_rate=-1.0), "arrival_rate"),
    (dict(prompt_tokens=8000, output_tokens=300), "max_positions"),
    (dict(output_tokens=(10, 9000)), "max_positions"),
    (dict(token_budget=8, block_tokens=16), "token_budget"),
    (dict(requests=0), "requests"),
    (dict(prompt_tokens=(5, 1)), "prompt_tokens"),
    (dict(prompt_tokens=[]), "prompt_tokens"),
    (dict(max_batch=0), "max_batch"),
    (dict(kv_memory_fraction=1.5), "kv_memory_fraction"),
    (dict(kv_memory_fraction=0.18), "kv_memory_fraction"),   # 0.18 x 80 GiB < the 16 GB of weights
    (dict(cached_prefix_tokens=100), "cached_prefix_tokens"),
    (dict(arrival_rate=None), "arrival_rate"),
    (dict(arrival_rate=None, arrivals=[1.0, 0.5]), "arrivals"),
    (dict(arrival_rate=None, arrivals=[0.0, 1.0], requests=3), "requests"),
    (dict(arrivals=[0.0, 1.0]), "arrival_rate must be None"),
    (dict(model="deepseek-v3"), "weights .* do not fit"),
])
def test_bad_input(kwargs, match):
    args = dict(model=M, hardware=H, arrival_rate=1.0, prompt_tokens=100, output_tokens=10, requests=5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        simulate(**args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(seed=1.5), "seed"), (dict(chunked_prefill="yes"), "chunked_prefill"),
    (dict(prompt_tokens="100"), "prompt_tokens"), (dict(step_time=3), "step_time"),
])
def test_bad_types(kwargs, match):
    args = dict(model=M, hardware=H, arrival_rate=1.0, prompt_tokens=100, output_tokens=10, requests=5)
    args.update(kwargs)
    with pytest.raises(TypeError, match=match):
        simulate(**args)


def test_too_much_work_is_refused_with_the_reason():
    with pytest.raises(SimulationTooLarge, match="requests"):
        simulate(M, H, 1.0, 100, 10, MAX_REQUESTS + 1)
    with pytest.raises(SimulationTooLarge, match="sequence-steps"):
        simulate(M, H, 1.0, 100, 4000, 100_000)      # 4 * 10**8 output tokens
    with pytest.raises(SimulationTooLarge, match="max_work"):
        simulate(M, H, 1.0, 100, 100, 50, max_work=1000)
    assert issubclass(SimulationTooLarge, ValueError)


def test_plan_bad_input():
    with pytest.raises(ValueError, match="output_tokens"):
        continuous_batching_plan(M, H, 10, 100, 1)
    with pytest.raises(ValueError, match="tpot_budget"):
        continuous_batching_plan(M, H, 10, 100, 10, tpot_budget=0)
    with pytest.raises(ValueError, match="max_positions"):
        continuous_batching_plan(M, H, 10, 8000, 500)
    with pytest.raises(ValueError, match="users"):
        continuous_batching_plan(M, H, 0, 100, 10)
    assert isinstance(step_cost(M, H), StepCost)


# --------------------------------------------------------------------------------------------------
# One-token answers, static batching, paged KV, Little's law, disaggregation (lesson 10)
# --------------------------------------------------------------------------------------------------
def test_one_token_answers_are_left_out_of_tpot_never_nan():
    import math

    r = simulate(M, H, 5.0, 100, 1, 40, 0)
    s = r.summary()
    assert s["tpot_excluded"] == 40 and s["tpot_mean"] is None
    assert all(s[f"tpot_p{q}"] is None for q in (50, 90, 99))
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.values())
    mixed = simulate(M, H, 5.0, 100, [1, 8], 40, 0).summary()
    assert 0 < mixed["tpot_excluded"] < 40 and mixed["tpot_p50"] > 0


def test_static_batching_is_the_estimators_waves_and_continuous_beats_it():
    from course_lib.core.serving import static_batching

    answers = [20, 300, 80, 150, 40, 60]
    st = static_batching(M, H, 256, answers, 3, **EFF)
    e1, e2 = estimate(M, H, 256, 300, batch=3, **EFF), estimate(M, H, 256, 150, batch=3, **EFF)
    assert rel(st.duration, e1.total + e2.total) < 1e-12 and st.waves == 2
    assert st.slot_use == pytest.approx(sum(answers) / (3 * 300 + 3 * 150))
    cont = simulate(M, H, None, 256, answers, arrivals=[0.0] * 6, max_batch=3, token_budget=4096, **EFF)
    assert cont.duration < st.duration           # a freed slot is refilled at the next step


def test_kv_pool_is_the_simulators_and_slots_round_down_to_blocks():
    from course_lib.core.serving import kv_pool, kv_slots, paged_utilisation, reserved_utilisation

    p = kv_pool(M, H, block_tokens=16, kv_memory_fraction=0.5)
    r = simulate(M, H, None, 100, 4, arrivals=[0.0], kv_memory_fraction=0.5)
    assert r.kv_blocks == p.blocks and p.token_slots == 16 * p.blocks
    assert kv_slots(1000, 10, 16) == 96 and kv_slots(1000, 10) == 100
    assert paged_utilisation([16, 17], 16) == pytest.approx(33 / 48)
    assert reserved_utilisation([16, 17], 64) == pytest.approx(33 / 128)
    with pytest.raises(ValueError, match="reserve_tokens"):
        reserved_utilisation([100], 64)
    with pytest.raises(ValueError, match="block_tokens"):
        kv_pool(M, H, block_tokens=0)


def test_littles_law_and_the_kv_transfer_are_the_generated_formulas():
    from course_lib.core.serving import kv_transfer, littles_law

    assert littles_law(12.0, 2.5) == 30.0
    with pytest.raises(ValueError, match="arrival_rate"):
        littles_law(0, 1.0)
    t = kv_transfer(M, H, 2048, 300, 50e9)
    assert t.bytes == 2048 * 131072 and rel(t.seconds, t.bytes / 50e9) < 1e-12
    with pytest.raises(ValueError, match="link_bandwidth"):
        kv_transfer(M, H, 2048, 300, 0)
    with pytest.raises(ValueError, match="max_positions"):
        kv_transfer(M, H, 8000, 300, 50e9)


# --------------------------------------------------------------------------------------------------
# Windowed layers (issue 30): sliding windows and Gemma/gpt-oss local layers, in the steps and the block pool
# --------------------------------------------------------------------------------------------------
def _roomy(hw="h200"):
    """The H200 with memory for any catalog model on one device (the steps' prices are the H200's)."""
    import dataclasses

    from course_lib.core.hardware import get_hardware
    return dataclasses.replace(get_hardware(hw), name="h200 (4 TB)", capacity=4e12)


def test_one_request_alone_is_the_estimate_for_every_catalog_model_at_long_context():
    """Local/global layers, sliding windows, MLA and MoE: TTFT, TPOT and total within 1 % (they agree to ~1e-13)."""
    from course_lib.core.models import get_model, list_models
    hw = _roomy()
    worst = {}
    for name in list_models():
        m = get_model(name)
        P = min(16384, m.max_positions) - 128                # long: past every local window in the catalog
        rec = simulate(m, hw, None, P, 128, arrivals=[0.0], token_budget=P).records[0]
        e = estimate(m, hw, P, 128)
        worst[name] = max(rel(rec.ttft, e.ttft), rel(rec.tpot, e.tpot), rel(rec.e2e, e.total))
    assert max(worst.values()) < 0.01, {k: v for k, v in worst.items() if v >= 0.01}
    assert len(worst) >= 30


def test_a_windowed_decode_step_reads_the_window_in_its_local_layers():
    """Batch 32 of Gemma-3-27B at 16k on an H200: the simulated step is the estimator's (once 2.86x too slow)."""
    e = estimate("gemma-3-27b", "h200", 16000, 2, batch=32)
    r = simulate("gemma-3-27b", "h200", None, 16000, 2, arrivals=[0.0] * 32, token_budget=16000 * 32,
                 max_batch=32, kv_memory_fraction=1.0)
    decode = r.busy_time - r.prefill_time                     # the one decode step of all 32
    assert rel(decode, e.decode_first.time) < 1e-9


def test_kv_memory_per_sequence_follows_each_layer_group():
    from course_lib.core.serving import kv_pool, layer_groups
    pool = kv_pool("gemma-3-27b", "h200")
    per_token = pool.kv_bytes_per_token
    # 10 global layers hold 8,192 tokens, 52 local ones their 1,024-token window (65 blocks of 16): 1.11 GB, not 4.16
    assert per_token * 8192 / 1e9 == pytest.approx(4.16, abs=0.005)
    assert pool.sequence_bytes(8192) / 1e9 == pytest.approx(1.114, abs=0.001)
    assert pool.sequence_bytes(8192) == pytest.approx(per_token * (10 * 8192 + 52 * 65 * 16) / 62, rel=1e-12)
    assert pool.sequences_that_fit(8192) >= 3 * pool.blocks // 512   # ~3.7x the sequences of a full cache
    full = layer_groups("llama-3-8b", 16)
    assert full.layer_blocks(100) == 32 * 7 and full.window is None
    slide = layer_groups("mistral-7b", 16)                    # every layer slides: the window's 257 blocks
    assert slide.layer_blocks(10**5) == 32 * 257 == slide.layer_blocks(4097 + 16)


def test_the_simulator_admits_as_many_windowed_sequences_as_their_blocks_allow():
    """Gemma-3-27B at 8k in an H200: the pool holds ~3.7x the sequences a whole-context cache would."""
    from course_lib.core.serving import kv_pool
    pool = kv_pool("gemma-3-27b", "h200")
    fit = pool.sequences_that_fit(7000 + 1000 - 1)              # the last token's K/V is never written
    r = simulate("gemma-3-27b", "h200", None, 7000, 1000, arrivals=[0.0] * (fit + 20), max_batch=4096)
    first_done = min(x.finish for x in r.records)
    together = sum(1 for x in r.records if x.admitted < first_done)     # in flight before anyone finished
    # admission asks for the blocks of the tokens so far (growth later preempts, as vLLM), so at least `fit` go in
    assert together >= fit - 2 and together > 3 * (pool.blocks * 16 // 8000)
    assert r.kv_blocks_free_at_end == r.kv_blocks


def test_plans_hold_only_the_window_in_local_layers():
    from course_lib.core import capstone
    plan = continuous_batching_plan("gemma-3-27b", "h200", 100, 8000, 192, tpot_budget=1.0, max_sequences=10**5)
    per_seq = (plan.memory_needed - get_weights("gemma-3-27b")) / plan.sequences_per_gpu
    m = get_model_("gemma-3-27b")
    assert per_seq == pytest.approx(m.kv_bytes_per_token() * m.attended_tokens(8192), rel=1e-9)
    state = capstone.DashboardState(model="gemma-3-27b", hardware="h200", prompt_tokens=8000, new_tokens=192)
    cp = capstone.continuous_plan(state, 100, tpot_budget=1.0)
    assert cp.sequences == plan.sequences_per_gpu


def get_weights(name):
    return get_model_(name).weight_bytes("fp16")


def get_model_(name):
    from course_lib.core.models import get_model
    return get_model(name)


# --------------------------------------------------------------------------------------------------
# Which p99: per-request TPOT and per-token ITL; closed-loop users; what preemption costs (issue 30)
# --------------------------------------------------------------------------------------------------
def test_weighted_percentile_is_the_percentile_of_the_repeated_values():
    from course_lib.core.serving import samples_above, weighted_percentile
    pairs = [(0.03, 5), (0.01, 1), (0.02, 0), (0.05, 2), (0.02, 3)]
    flat = [v for v, c in pairs for _ in range(c)]
    for q in (0, 10, 50, 90, 99, 100):
        assert weighted_percentile(pairs, q) == pytest.approx(np.percentile(flat, q), rel=1e-12)
    assert (samples_above(200, 99), samples_above(10_000, 99), samples_above(1, 99)) == (2, 100, 0)


@pytest.mark.parametrize("chunked", [True, False])
def test_itl_counts_every_gap_and_its_mean_is_the_token_weighted_tpot(chunked):
    r = simulate(M, H, 12, (256, 2048), (20, 200), 300, chunked_prefill=chunked, **EFF)
    pairs = r.itl_pairs()
    assert r.itl_samples == sum(x.output_tokens - 1 for x in r.records)
    gaps = sum(v * c for v, c in pairs)
    assert rel(gaps, sum(x.finish - x.first_token for x in r.records)) < 1e-9
    s = r.summary()
    assert s["itl_p50"] <= s["itl_p99"] and s["measured"] == 300 and s["p99_rests_on"] == 3


def test_chunked_prefill_shortens_the_itl_tail():
    """Without chunking a whole 2,048-token prefill stalls every decode: the ITL p99 shows it, TPOT means hide it."""
    kw = dict(requests=400, **EFF)
    on = simulate(M, H, 10, (256, 2048), (50, 300), chunked_prefill=True, **kw).summary()
    off = simulate(M, H, 10, (256, 2048), (50, 300), chunked_prefill=False, **kw).summary()
    assert on["itl_p99"] < 0.75 * off["itl_p99"]
    stall = step_cost(M, H, **EFF)(2048, 0, 2048, attention_pairs=2048 ** 2 / 2, logit_rows=1)
    assert off["itl_p99"] > stall > on["itl_p99"] / 2


def test_closed_loop_users_hold_their_concurrency_and_obey_the_response_time_law():
    """N users with think time Z: N = X (R + Z) in the measured window (X requests/s, R the mean response)."""
    N, Z = 24, 1.5
    r = simulate(M, H, None, (256, 1024), (20, 200), 600, users=N, think_time=Z, **EFF)
    assert r.settings["users"] == N and r.mean_in_system <= N
    lo, hi = r.window
    inside = [x for x in r.records if lo <= x.arrival <= hi]
    X = len(inside) / (hi - lo)
    R = sum(x.e2e for x in r.measured) / len(r.measured)
    assert rel(X * (R + Z), N) < 0.08
    assert 0 < len(r.measured) <= 600 - N and r.summary()["measured"] == len(r.measured)
    # without think time the users keep exactly N requests present until the last one is sent
    r0 = simulate(M, H, None, 512, 64, 200, users=8, **EFF)
    assert r0.max_batch_seen == 8 and rel(r0.mean_in_system, 8) < 0.15


def test_preemption_costs_gpu_time_the_step_count_hides():
    kw = dict(arrivals=[0.0] * 120, **EFF)
    tight = simulate(M, H, None, 2048, 600, kv_memory_fraction=0.3, **kw)
    roomy = simulate(M, H, None, 2048, 600, kv_memory_fraction=0.9, **kw)
    assert tight.preemptions > 0 and roomy.preemptions == 0
    assert tight.recomputed_tokens > 0 and roomy.recomputed_tokens == 0
    assert tight.busy_time > 1.2 * roomy.busy_time


def test_streaming_the_kv_layer_by_layer_hides_all_but_the_last_layer_and_pools_are_sized_for_the_rate():
    from course_lib.core.serving import disaggregated_plan, kv_transfer
    fast = kv_transfer(M, H, 2048, 300, 50e9, **EFF)                   # 400 Gb/s: faster than the prefill
    assert fast.exposed_seconds == pytest.approx(fast.seconds / 32, rel=1e-12)
    slow = kv_transfer(M, H, 2048, 300, 1e9, **EFF)                    # 8 Gb/s: slower than the prefill
    assert slow.exposed_seconds == pytest.approx(slow.seconds - slow.ttft * 31 / 32, rel=1e-12)
    gemma = kv_transfer("gemma-3-27b", "h200", 8000, 100, 50e9)        # local layers send their window only
    m = get_model_("gemma-3-27b")
    assert gemma.bytes == pytest.approx(m.kv_bytes_per_token() * m.attended_tokens(8000), rel=1e-12)
    lo, hi = (disaggregated_plan(M, H, r, 2048, 300, **EFF) for r in (10, 60))
    assert hi.prefill_gpus >= lo.prefill_gpus and hi.decode_gpus >= lo.decode_gpus
    assert hi.prefill_utilisation <= 0.8 and hi.decode_tpot <= 0.05
    assert hi.in_flight == pytest.approx(60 * 299 * hi.decode_tpot, rel=1e-12)
    assert hi.decode_gpus == -(-hi.in_flight // hi.decode_sequences)


@pytest.mark.parametrize("kwargs, match", [
    (dict(arrival_rate=5.0, users=4), "users"),
    (dict(users=0), "users"),
    (dict(users=8, requests=4), "requests"),
    (dict(users=4, think_time=-1.0), "think_time"),
    (dict(users=4, warmup=100), "warmup"),
    (dict(users=4, requests=None), "requests"),
])
def test_closed_loop_bad_input_names_the_argument(kwargs, match):
    args = dict(arrival_rate=None, requests=50)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        simulate(M, H, args.pop("arrival_rate"), 512, 32, **args)
