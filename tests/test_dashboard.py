"""The capstone dashboard's plain functions (``core.capstone``, its texts ``core.app``): no widgets, no browser.

* on one GPU every number equals ``course_lib.estimate`` of the same setting (the dashboard adds
  nothing of its own), and the texts are ``course_lib.core.units`` formats of those numbers;
* tensor parallelism: the split work is the estimate on one device with G times the bandwidth and
  FLOP/s, plus 2 ring all-reduces per layer priced by ``numeric.ring_allreduce_time``;
* properties over the batch: aggregate tokens/s never falls and TPOT never falls as the batch grows;
  the memory verdict turns exactly at ``max_batch_that_fits``;
* bad input gets one clear error naming the field; importing the module pulls in no torch,
  ipywidgets or matplotlib.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.core.numeric import raw as g
from course_lib.core import app as A
from course_lib.core import capstone as D
from course_lib import estimate, get_hardware, get_model
from course_lib.core.hardware import custom_hardware
from course_lib.core.units import Quantity, format_bytes, format_time

#: settings the estimator can price (catalog devices with a published peak for the compute dtype)
SETTINGS = [
    dict(),
    dict(model="mistral-7b", hardware="h200", precision="fp8", batch=16, prompt_tokens=8000, new_tokens=500),
    dict(model="llama-2-7b", hardware="rtx-4090", precision="int4", batch=4, cached_prefix_tokens=512),
    dict(model="qwen2.5-7b", hardware="a100-80gb", kv_precision="fp8", batch=64, compute_efficiency=0.6,
         bandwidth_efficiency=0.8),
    dict(model="llama-2-70b", hardware="h100-sxm", batch=8),
    dict(model="gpt2-small", hardware="l4", precision="fp32", prompt_tokens=100, new_tokens=1),
]


def _estimate_of(state: D.DashboardState):
    return estimate(state.model, state.hardware, state.prompt_tokens, state.new_tokens, precision=state.precision,
                    kv_precision=state.kv_precision, batch=state.batch,
                    cached_prefix_tokens=state.cached_prefix_tokens, compute_efficiency=state.compute_efficiency,
                    bandwidth_efficiency=state.bandwidth_efficiency)


# --------------------------------------------------------------------------------------------------
# One GPU: the dashboard is the estimator
# --------------------------------------------------------------------------------------------------
def test_defaults_are_the_contracts():
    s = D.DashboardState()
    assert (s.model, s.hardware, s.precision, s.kv_precision, s.batch, s.prompt_tokens, s.new_tokens,
            s.cached_prefix_tokens, s.compute_efficiency, s.bandwidth_efficiency, s.tensor_parallel,
            s.interconnect_bandwidth, s.machine) == ("llama-3-8b", "h100-sxm", "fp16", None, 1, 1024, 256, 0,
                                                     1.0, 1.0, 1, None, None)


@pytest.mark.parametrize("overrides", SETTINGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_compute_equals_the_estimator(overrides):
    s = D.DashboardState(**overrides)
    r = D.compute(s)
    e = _estimate_of(s)
    assert r.estimate == e
    assert r.allreduce_prefill == r.allreduce_decode == 0.0
    assert (r.ttft, r.tpot, r.total, r.tps, r.tps_aggregate) == (e.ttft, e.tpot, e.total, e.tps, e.tps_aggregate)
    assert r.decode_tps == e.decode_tps and r.tps_aggregate_per_gpu == e.tps_aggregate
    assert (r.prefill_bound, r.decode_bound) == (e.prefill_bound, e.decode_bound)
    assert (r.memory_needed, r.memory_available, r.fits) == (e.memory_needed, e.memory_available, e.fits)
    assert A.tpot_text(s) == format_time(e.tpot)
    assert A.ttft_text(s) == format_time(e.ttft)
    rate = lambda x: f"{Quantity(x, 'number').format()} tokens/s"  # noqa: E731
    assert A.tps_text(s) == f"{rate(e.tps)} per user, {rate(e.tps_aggregate)} in all"
    verdict = "fits" if e.fits else "does NOT fit"
    needed, available = format_bytes(e.memory_needed), format_bytes(e.memory_available)
    assert A.memory_text(s) == f"{needed} of {available} per GPU: {verdict}"
    v = A.state_reading(s)
    assert (v.ttft_text, v.tpot_text, v.total_text, v.problem) == (A.ttft_text(s), A.tpot_text(s),
                                                                   format_time(e.total), None)
    assert v.bounds_text == f"prefill {e.prefill_bound}-bound, decode {e.decode_bound}-bound"


def test_the_default_setting_in_numbers():
    """Llama-3-8B, fp16, H100 SXM, batch 1: compute-bound prefill, memory-bound decode, fits."""
    r = D.compute(D.DashboardState())
    assert r.prefill_bound == "compute" and r.decode_bound == "memory" and r.fits is True
    m = get_model("llama-3-8b")
    assert r.memory_needed == m.weight_bytes("fp16") + m.kv_bytes_per_token("fp16") * (1024 + 256)
    assert r.total == pytest.approx(r.ttft + 255 * r.tpot, rel=1e-15)
    assert r.as_dict()["tpot"] == r.tpot


def test_llama70b_fp16_does_not_fit_one_h100_and_the_view_says_so():
    s = D.DashboardState(model="llama-2-70b")
    v = A.state_reading(s)
    assert v.result.fits is False and "does NOT fit" in v.memory_text
    assert any(w.startswith("Does not fit") for w in v.warnings)
    assert v.tpot_text == A.tpot_text(s) != A.NOT_AVAILABLE   # still priced: the arithmetic is shown


def test_unpriceable_settings_show_not_available_with_the_reason():
    # every catalog device prices a step now (Apple devices by their effective rates): a spec without a peak
    s = D.DashboardState(hardware="this-machine", machine=custom_hardware("no-peak", bandwidth=100e9, capacity=64e9))
    with pytest.raises(ValueError, match="FLOP/s"):
        D.compute(s)
    assert A.tpot_text(s) == A.ttft_text(s) == A.tps_text(s) == A.memory_text(s) == A.NOT_AVAILABLE
    v = A.state_reading(s)                                     # the reading prices the decode floor instead
    assert v.floor and not v.priced and "compute speed" in v.problem and v.tpot_text.startswith("at least")
    unmeasured = D.DashboardState(hardware="this-machine")
    v = A.state_reading(unmeasured)
    assert "not been measured" in v.problem and v.result is None and v.tpot_text == A.NOT_AVAILABLE
    assert A.tpot_text(unmeasured) == A.NOT_AVAILABLE


def test_this_machine_uses_the_measured_spec():
    spec = custom_hardware("this-machine", bandwidth=50e9, peak_flops=1e12, capacity=64e9)
    s = D.DashboardState(hardware="this-machine", machine=spec)
    e = estimate(s.model, spec, s.prompt_tokens, s.new_tokens)
    assert D.compute(s).estimate == e and A.tpot_text(s) == format_time(e.tpot)
    assert D.compute(s).memory_available == 64e9
    unknown = custom_hardware("this-machine", bandwidth=50e9, peak_flops=1e12)
    assert A.memory_text(s.replace(machine=unknown)).endswith("(capacity unknown)")
    assert D.compute(s.replace(machine=unknown)).fits is None


def test_prefix_cache_shortens_ttft_only():
    a = D.compute(D.DashboardState(prompt_tokens=4000))
    b = D.compute(D.DashboardState(prompt_tokens=4000, cached_prefix_tokens=3000))
    assert b.ttft < a.ttft and b.tpot == a.tpot and b.memory_needed == a.memory_needed


# --------------------------------------------------------------------------------------------------
# Tensor parallelism
# --------------------------------------------------------------------------------------------------
def test_tensor_parallel_is_g_devices_plus_ring_allreduces():
    link = 400e9
    s = D.DashboardState(model="llama-2-70b", hardware="h100-sxm", batch=8, prompt_tokens=2000, new_tokens=300,
                         tensor_parallel=4, interconnect_bandwidth=link)
    r = D.compute(s)
    hw = get_hardware("h100-sxm")
    quad = custom_hardware("4x", bandwidth=4 * hw.bandwidth, peak_flops={k: 4 * v for k, v in hw.peak_flops.items()})
    e = estimate("llama-2-70b", quad, 2000, 300, batch=8)
    assert (r.estimate.ttft, r.estimate.tpot) == (e.ttft, e.tpot)
    m = get_model("llama-2-70b")
    ring = D.COLLECTIVE_LATENCIES["ring"]
    per_step = 2 * m.layers * g.allreduce_ring_time(4, 8 * m.hidden * 2, link, ring.base, ring.hop)
    per_prefill = 2 * m.layers * g.allreduce_ring_time(4, 8 * 2000 * m.hidden * 2, link, ring.base, ring.hop)
    assert r.allreduce_decode == pytest.approx(per_step, rel=1e-12)
    assert r.allreduce_prefill == pytest.approx(per_prefill, rel=1e-12)
    assert r.tpot == e.tpot + r.allreduce_decode and r.ttft == e.ttft + r.allreduce_prefill
    assert r.total == pytest.approx(r.ttft + 299 * r.tpot, rel=1e-14)
    # each GPU holds a quarter of the weights and the cache, against its own capacity
    assert r.memory_needed == pytest.approx((m.weight_bytes("fp16") + e.kv_bytes) / 4, rel=1e-12)
    assert r.memory_available == hw.capacity and r.fits is True
    assert D.compute(s.replace(tensor_parallel=1)).fits is False
    assert r.tps_aggregate_per_gpu == r.tps_aggregate / 4
    assert "all-reduces add" in A.state_reading(s).bounds_text


def test_allreduce_helper():
    assert D.allreduce_time_per_pass(32, 16, 4096, 1, 2, None) == 0.0
    bandwidth_only = 2 * 32 * (16 * 4096 * 2) * 2 * (2 - 1) / 2 / 100e9
    assert D.allreduce_time_per_pass(32, 16, 4096, 2, 2, 100e9, base_latency=0, hop_latency=0) == pytest.approx(
        bandwidth_only, rel=1e-12)
    ring = D.COLLECTIVE_LATENCIES["ring"]
    assert D.allreduce_time_per_pass(32, 16, 4096, 2, 2, 100e9) == pytest.approx(
        bandwidth_only + 2 * 32 * (ring.base + 2 * (2 - 1) * ring.hop), rel=1e-12)
    with pytest.raises(ValueError, match="link_bandwidth"):
        D.allreduce_time_per_pass(32, 16, 4096, 2, 2, None)
    assert D.activation_bytes("fp32") == 4 and D.activation_bytes("fp16") == D.activation_bytes("fp8") == 2


@given(st.sampled_from([2, 4, 8]), st.floats(1e9, 2e12))
def test_a_faster_link_never_slows_tensor_parallel(tp, link):
    s = D.DashboardState(tensor_parallel=tp, interconnect_bandwidth=link, batch=8)
    assert D.compute(s).tpot >= D.compute(s.replace(interconnect_bandwidth=2 * link)).tpot


# --------------------------------------------------------------------------------------------------
# The latency-throughput curve and the batch
# --------------------------------------------------------------------------------------------------
def test_curve_points_equal_compute_at_each_batch():
    s = D.DashboardState(model="llama-3-8b", hardware="l40s", batch=24, prompt_tokens=4096, new_tokens=512)
    pts = D.latency_throughput_curve(s)
    assert [p.batch for p in pts] == D.default_batches(24) == [1, 2, 4, 8, 16, 24, 32, 64, 128, 256]
    for p in pts:
        e = _estimate_of(s.replace(batch=p.batch))
        assert (p.ttft, p.tpot, p.tps, p.tps_aggregate, p.memory_needed, p.fits) == (
            e.ttft, e.tpot, e.tps, e.tps_aggregate, e.memory_needed, e.fits)
    # memory runs out inside the default range on a 48 GB card
    limit = D.max_batch_that_fits(s)
    assert [p.fits for p in pts] == [p.batch <= limit for p in pts] and 1 < limit < 256


def test_max_batch_that_fits_is_the_turning_point():
    for overrides in SETTINGS[:4]:
        s = D.DashboardState(**overrides)
        b = D.max_batch_that_fits(s)
        assert b >= 1 and D.compute(s.replace(batch=b)).fits is True
        assert D.compute(s.replace(batch=b + 1)).fits is False
    assert D.max_batch_that_fits(D.DashboardState(model="llama-2-70b")) == 0
    assert D.max_batch_that_fits(D.DashboardState(model="gpt2-small"), limit=100) == 100
    with pytest.raises(ValueError, match="capacity"):
        D.max_batch_that_fits(D.DashboardState(hardware="this-machine",
                                               machine=custom_hardware("x", 1e9, 1e12)))


@given(st.sampled_from(SETTINGS[:5]), st.integers(1, 255), st.integers(1, 64))
def test_aggregate_throughput_and_tpot_never_fall_as_the_batch_grows(overrides, b, more):
    """Batching shares each weight read: aggregate tokens/s is non-decreasing in the batch (as long as it
    fits, and in the roofline model beyond), while each user's TPOT never gets shorter."""
    s = D.DashboardState(**overrides)
    lo, hi = D.latency_throughput_curve(s, [b, b + more])
    assert hi.tps_aggregate >= lo.tps_aggregate * (1 - 1e-12)
    assert hi.tpot >= lo.tpot * (1 - 1e-12)
    assert hi.memory_needed > lo.memory_needed
    if lo.fits is False:
        assert hi.fits is False


def test_default_batches():
    assert D.default_batches() == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert D.default_batches(3, 16) == [1, 2, 3, 4, 8, 16]
    assert D.default_batches(1000, 8)[-1] == 1000


# --------------------------------------------------------------------------------------------------
# Controls -> state, and bad input
# --------------------------------------------------------------------------------------------------
def test_state_normalises_names():
    s = D.DashboardState(model="Llama-3-8B", hardware="H200", precision="FP8", kv_precision="FP16")
    assert (s.model, s.hardware, s.precision, s.kv_precision) == ("llama-3-8b", "h200", "fp8", "fp16")
    assert s.replace(batch=3).batch == 3 and hash(s) == hash(D.DashboardState(**{**s.__dict__}))


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"model": "llama-3-9b"}, ValueError, "model"),
    ({"hardware": "h300"}, ValueError, "hardware"),
    ({"precision": "fp12"}, ValueError, "precision"),
    ({"kv_precision": "fp12"}, ValueError, "kv_precision"),
    ({"batch": 0}, ValueError, "batch"),
    ({"batch": 2.5}, ValueError, "batch"),
    ({"batch": "8"}, TypeError, "batch"),
    ({"prompt_tokens": 0}, ValueError, "prompt_tokens"),
    ({"new_tokens": -1}, ValueError, "new_tokens"),
    ({"cached_prefix_tokens": 1024}, ValueError, "cached_prefix_tokens"),
    ({"compute_efficiency": 1.5}, ValueError, "compute_efficiency"),
    ({"bandwidth_efficiency": 0}, ValueError, "bandwidth_efficiency"),
    ({"tensor_parallel": 0}, ValueError, "tensor_parallel"),
    ({"tensor_parallel": 2}, ValueError, "interconnect_bandwidth"),
    ({"tensor_parallel": 3, "interconnect_bandwidth": 1e11}, ValueError, "tensor_parallel"),
    ({"model": "deepseek-v3", "tensor_parallel": 3, "interconnect_bandwidth": 1e11}, ValueError, "tensor_parallel"),
    ({"expert_parallel": True}, ValueError, "expert_parallel"),
    ({"model": "deepseek-v3", "expert_parallel": 1}, TypeError, "expert_parallel"),
    ({"collective_algorithm": "butterfly"}, ValueError, "collective_algorithm"),
    ({"collective_hop_latency": -1e-6}, ValueError, "collective_hop_latency"),
    ({"collective_base_latency": "6 us"}, TypeError, "collective_base_latency"),
    ({"interconnect_bandwidth": -1.0}, ValueError, "interconnect_bandwidth"),
    ({"machine": "my laptop"}, TypeError, "machine"),
])
def test_bad_input_gets_one_clear_error(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        D.DashboardState(**kwargs)


def test_bad_arguments_of_the_functions():
    with pytest.raises(TypeError, match="state"):
        D.compute({"model": "llama-3-8b"})
    with pytest.raises(TypeError, match="state"):
        D.latency_throughput_curve("llama-3-8b")
    with pytest.raises(ValueError, match="batches"):
        D.latency_throughput_curve(D.DashboardState(), [])
    with pytest.raises(ValueError, match="batches"):
        D.latency_throughput_curve(D.DashboardState(), [0, 4])
    with pytest.raises(ValueError, match="limit"):
        D.max_batch_that_fits(D.DashboardState(), limit=0)


def test_numbers_stay_finite_over_the_slider_ranges():
    for b in (1, 256):
        for p in (1, 32768):
            r = D.compute(D.DashboardState(batch=b, prompt_tokens=p, new_tokens=8192))
            assert all(math.isfinite(x) and x > 0 for x in (r.ttft, r.tpot, r.total, r.tps_aggregate))


# --------------------------------------------------------------------------------------------------
# Planning: the largest batch within a budget
# --------------------------------------------------------------------------------------------------
def _best_batch_by_scan(state, ttft_budget, tpot_budget, limit):
    best = 0
    for b in range(1, limit + 1):
        r = D.compute(state.replace(batch=b))
        if r.fits is not False and r.ttft <= ttft_budget and r.tpot <= tpot_budget:
            best = b
    return best


@settings(deadline=None)   # a full scan of up to 256 batches per example: not a timing test
@given(st.sampled_from(SETTINGS[:4]), st.floats(0.01, 3.0), st.floats(0.002, 0.08))
def test_best_batch_equals_a_full_scan(overrides, ttft_budget, tpot_budget):
    s = D.DashboardState(**overrides)
    assert D.best_batch(s, ttft_budget, tpot_budget, limit=300) == _best_batch_by_scan(s, ttft_budget, tpot_budget, 300)


def test_best_batch_edges():
    s = D.DashboardState()
    assert D.best_batch(s, limit=64) == 64                                     # no budget: the limit
    assert D.best_batch(s, limit=10**4) == D.max_batch_that_fits(s)            # memory only
    assert D.best_batch(s, ttft_budget=1e-6) == 0                              # nothing meets it
    b = D.best_batch(s, ttft_budget=1.0, tpot_budget=0.05)
    assert D.meets_budget(D.compute(s.replace(batch=b)), 1.0, 0.05)
    assert not D.meets_budget(D.compute(s.replace(batch=b + 1)), 1.0, 0.05)
    assert D.best_batch(D.DashboardState(model="llama-2-70b")) == 0           # does not fit at all
    with pytest.raises(ValueError, match="ttft_budget"):
        D.best_batch(s, ttft_budget=-1)
    with pytest.raises(ValueError, match="limit"):
        D.best_batch(s, limit=0)
    with pytest.raises(TypeError, match="state"):
        D.best_batch("llama-3-8b")


def test_what_binds_names_the_limit_the_next_batch_breaks():
    s = D.DashboardState(prompt_tokens=2048, new_tokens=300)
    assert D.what_binds(s, ttft_budget=1.0, tpot_budget=0.05) == "TTFT budget"
    assert D.what_binds(s.replace(prompt_tokens=128), ttft_budget=100.0, tpot_budget=0.012) == "TPOT budget"
    assert D.what_binds(s, limit=10**4) == "memory"
    assert D.what_binds(s, limit=8) == "batch limit"
    short = s.replace(prompt_tokens=128)
    b = D.best_batch(short, 100.0, 0.012)
    r = D.compute(short.replace(batch=b + 1))
    assert r.tpot > 0.012 and r.ttft <= 100.0


# --------------------------------------------------------------------------------------------------
# Collectives with their latency (issue 15)
# --------------------------------------------------------------------------------------------------
def test_collective_latencies_are_nccls_with_their_source():
    ring, tree = D.COLLECTIVE_LATENCIES["ring"], D.COLLECTIVE_LATENCIES["tree"]
    assert (ring.base, ring.hop, tree.base, tree.hop) == (6.6e-6, 0.6e-6, 6.8e-6, 0.6e-6)
    assert "not published" in D.COLLECTIVE_LATENCIES["one-shot"].source
    for c in (ring, tree, D.COLLECTIVE_LATENCIES["one-shot"]):
        assert "github.com/NVIDIA/nccl" in c.source and "tuning.cc" in c.source
    assert D.collective_latency() == (ring.base, ring.hop)
    assert D.collective_latency("tree", hop_latency=0) == (tree.base, 0.0)


def test_collective_time_is_latency_times_steps_plus_bytes_over_bandwidth():
    a0, a, m, beta = 5e-6, 1e-6, 1e6, 100e9
    for G in (2, 3, 4, 8):
        ring = D.collective_time("all-reduce", G, m, beta, base_latency=a0, hop_latency=a)
        assert ring == pytest.approx(a0 + 2 * (G - 1) * a + 2 * (G - 1) / G * m / beta, rel=1e-12)
        tree = D.collective_time("all-reduce", G, m, beta, algorithm="tree", base_latency=a0, hop_latency=a)
        assert tree == pytest.approx(a0 + 2 * (G - 1) * a + 2 * m / beta, rel=1e-12)    # one node: a chain (NCCL)
        one = D.collective_time("all-reduce", G, m, beta, algorithm="one-shot", base_latency=a0, hop_latency=a)
        assert one == pytest.approx(a0 + a + (G - 1) * m / beta, rel=1e-12)
        gather = D.collective_time("all-gather", G, m, beta, base_latency=a0, hop_latency=a)
        assert gather == pytest.approx(a0 + (G - 1) * a + (G - 1) / G * m / beta, rel=1e-12)
        assert D.collective_time("all-to-all", G, m, beta, base_latency=a0, hop_latency=a) == gather
        # the bandwidth-only formula is the zero-latency case
        assert D.collective_time("all-reduce", G, m, beta, base_latency=0, hop_latency=0) == pytest.approx(
            g.ring_allreduce_time(G, m, beta), rel=1e-12)
    assert D.collective_time("all-reduce", 1, m, None) == 0.0
    # NCCL's numbers for 8 GPUs of one node: ring 6.6 + 14 x 0.6 = 15 us, tree (a chain) 6.8 + 14 x 0.6 = 15.2 us;
    # the one-shot kernel's single step wins at small messages, the ring at large ones
    assert D.collective_time("all-reduce", 8, 0, beta, algorithm="tree") == pytest.approx(15.2e-6, rel=1e-12)
    assert D.collective_time("all-reduce", 8, 0, beta) == pytest.approx(15.0e-6, rel=1e-12)
    small, large = 1e3, 1e9
    assert D.collective_time("all-reduce", 8, small, beta, algorithm="one-shot") < D.collective_time(
        "all-reduce", 8, small, beta)
    assert D.collective_time("all-reduce", 8, large, beta, algorithm="one-shot") > D.collective_time(
        "all-reduce", 8, large, beta)
    with pytest.raises(ValueError, match="collective"):
        D.collective_time("broadcast", 2, m, beta)
    with pytest.raises(ValueError, match="link_bandwidth"):
        D.collective_time("all-gather", 2, m, None)


def test_lesson09_finding_latency_alone_exceeds_the_budget_at_8_gpus():
    """Issue 15: 8 GPUs, batch 32 (0.5 MB messages): 160 all-reduces of several µs each exceed 10 % of the step."""
    m = get_model("llama-3-70b")
    s = D.DashboardState(model="llama-3-70b", batch=32, prompt_tokens=2048, new_tokens=300, tensor_parallel=8,
                         interconnect_bandwidth=1e30)
    r = D.compute(s)
    assert 2 * m.layers == 160 and 0.5e6 < 32 * m.hidden * 2 < 0.6e6
    budget = 0.1 * r.estimate.tpot
    assert 0.55e-3 < budget < 0.65e-3
    each = r.allreduce_decode / 160                       # an infinitely fast link: the latency alone
    assert 10e-6 < each < 20e-6 and r.allreduce_decode > 3 * budget
    # the bandwidth-only model asks for about 243 GB/s and misses the latency altogether
    need = D.allreduce_time_per_pass(m.layers, 32, m.hidden, 8, 2, 1.0, base_latency=0, hop_latency=0) / budget
    assert 240e9 < need < 246e9


def test_mla_tensor_parallel_replicates_the_latent_cache():
    s = D.DashboardState(model="deepseek-v3", hardware="h200", precision="fp8", batch=16, prompt_tokens=2048,
                         new_tokens=300, tensor_parallel=8, interconnect_bandwidth=450e9)
    r = D.compute(s)
    assert r.kv_replicated and r.kv_per_gpu == r.estimate.kv_bytes
    assert r.weights_per_gpu == pytest.approx(r.estimate.weights_bytes / 8, rel=1e-12)
    assert r.kv_replicated_decode > 0 and r.tpot == pytest.approx(
        r.estimate.tpot + r.communication_decode + r.kv_replicated_decode, rel=1e-12)
    # a GQA model's cache is split: nothing replicated
    s70 = D.DashboardState(model="llama-3-70b", tensor_parallel=8, interconnect_bandwidth=450e9)
    assert not D.compute(s70).kv_replicated and D.compute(s70).kv_replicated_decode == 0
    assert "latent KV cache" in A.state_reading(s).bounds_text


def test_expert_parallelism_prices_dispatch_and_combine():
    kw = dict(model="deepseek-v3", hardware="h200", precision="fp8", batch=16, prompt_tokens=1024, new_tokens=64,
              tensor_parallel=8, interconnect_bandwidth=450e9)
    tp, ep = D.compute(D.DashboardState(**kw)), D.compute(D.DashboardState(**kw, expert_parallel=True))
    m = get_model("deepseek-v3")
    assert tp.alltoall_decode == 0 and ep.alltoall_decode > 0
    ring = D.COLLECTIVE_LATENCIES["ring"]
    one = g.alltoall_time(8, 16 * m.experts_per_token * m.hidden * 2 / 8, 450e9, ring.base, ring.hop)
    assert ep.alltoall_decode == pytest.approx(2 * m.moe_layers * one, rel=1e-12)
    # the MoE layers' MLP all-reduce is gone: only the attention ones and the dense layers' MLP ones remain
    assert ep.allreduce_decode == pytest.approx(tp.allreduce_decode * (2 * m.layers - m.moe_layers) / (2 * m.layers),
                                                rel=1e-12)
    assert D.alltoall_time_per_pass(m.moe_layers, 16, m.hidden, m.experts_per_token, 1, 2, None) == 0.0
    assert "all-to-alls" in A.state_reading(D.DashboardState(**kw, expert_parallel=True)).bounds_text


# --------------------------------------------------------------------------------------------------
# Plans: static (the naive baseline) and continuous batching (issue 16)
# --------------------------------------------------------------------------------------------------
_EFF = dict(compute_efficiency=0.747, bandwidth_efficiency=0.546)


@pytest.mark.parametrize("hardware, precision, cached", [("h100-sxm", "fp16", 0), ("h100-sxm", "fp8", 1536),
                                                         ("l40s", "fp16", 0), ("a100-80gb", "fp8", 1536)])
def test_continuous_plan_on_one_gpu_is_the_serving_steady_state(hardware, precision, cached):
    from course_lib.core import serving

    s = D.DashboardState(hardware=hardware, precision=precision, prompt_tokens=2048, new_tokens=300,
                         cached_prefix_tokens=cached, **_EFF)
    ours = D.continuous_plan(s, 1000, tpot_budget=0.05, ttft_budget=1.0)
    theirs = serving.continuous_batching_plan("llama-3-8b", hardware, 1000, 2048, 300, precision=precision,
                                              cached_prefix_tokens=cached, tpot_budget=0.05, ttft_budget=1.0, **_EFF)
    assert (ours.sequences, ours.gpus, ours.binds) == (theirs.sequences_per_gpu, theirs.gpus, theirs.binds)
    for f in ("tpot", "ttft", "prefill_share", "tokens_per_s_per_gpu", "memory_needed", "memory_limit"):
        assert getattr(ours, f) == pytest.approx(getattr(theirs, f), rel=1e-12), f
    assert ours.tpot <= 0.05 and ours.state.batch == ours.sequences


def test_the_static_plan_overstates_the_gpus():
    """Issue 16's finding, as the course now computes it: 1,000 users, the lesson's efficiencies."""
    base = D.DashboardState(prompt_tokens=2048, new_tokens=300, **_EFF)
    naive = D.static_plan(base, 1000, 1.0, 0.05)
    cont = D.continuous_plan(base, 1000, 0.05, 1.0)
    best = base.replace(precision="fp8", cached_prefix_tokens=1536)
    assert naive.binds == "TTFT budget" and cont.binds == "TPOT budget"
    assert cont.gpus < naive.gpus / 3 and cont.ttft < 1.0
    assert D.continuous_plan(best, 1000, 0.05, 1.0).gpus < D.static_plan(best, 1000, 1.0, 0.05).gpus
    assert naive.gpus == math.ceil(1000 / naive.batch) and naive.result.state.batch == naive.batch


def test_continuous_plan_with_tensor_and_expert_parallelism():
    s = D.DashboardState(model="deepseek-v3", hardware="h200", precision="fp8", prompt_tokens=2048, new_tokens=300,
                         tensor_parallel=8, interconnect_bandwidth=450e9, expert_parallel=True, **_EFF)
    p = D.continuous_plan(s, 1000, 0.05, 1.0)
    assert p.sequences >= 1 and p.gpus == p.replicas * 8 and p.replicas == math.ceil(1000 / p.sequences)
    r = D.compute(s.replace(batch=p.sequences))
    assert p.decode_step == r.tpot and p.tpot == pytest.approx(
        g.steady_state_tpot(r.tpot, p.sequences, p.prefill_time, 299), rel=1e-12)
    assert p.memory_needed <= p.memory_limit
    with pytest.raises(ValueError, match="tensor parallelism"):
        D.simulate_plan(p)


def test_simulate_plan_runs_the_serving_simulator_at_the_plans_concurrency():
    s = D.DashboardState(precision="fp8", prompt_tokens=512, new_tokens=32, cached_prefix_tokens=256, **_EFF)
    p = D.continuous_plan(s, 200, 0.05)
    res = D.simulate_plan(p, requests=800, seed=1)
    n_in = math.ceil(200 / p.gpus)                         # users per GPU, in a closed loop
    assert len(res.records) == 800 and res.max_batch_seen <= min(p.sequences, n_in)
    assert res.settings["users"] == n_in and res.settings["warmup"] == n_in
    assert res.mean_in_system <= n_in and 0 < len(res.measured) <= 800 - n_in
    assert all(r.arrival >= res.window[0] and r.finish <= res.window[1] for r in res.measured)
    fewer = D.simulate_plan(p, requests=300, seed=1, gpus=p.gpus + 1)   # one more GPU: fewer users on each
    assert fewer.settings["users"] == math.ceil(200 / (p.gpus + 1))
    with pytest.raises(TypeError, match="plan"):
        D.simulate_plan(s)


def test_size_plan_adds_gpus_until_the_simulated_p99_meets_the_budgets_then_a_spare():
    s = D.DashboardState(prompt_tokens=512, new_tokens=32, **_EFF)
    p = D.continuous_plan(s, 300, 0.05, 1.0)
    sized = D.size_plan(p, 1.0, 0.05, requests=400)
    assert sized.serving_gpus >= p.gpus and sized.gpus == sized.serving_gpus + 1
    assert sized.summary["ttft_p99"] <= 1.0 and sized.summary["tpot_p99"] <= 0.05
    assert all(t["ttft_p99"] > 1.0 or t["tpot_p99"] > 0.05 for n, t in sized.tried[:-1])
    assert 0 <= sized.headroom < 1 and sized.users_per_gpu == math.ceil(300 / sized.serving_gpus)
    tight = D.size_plan(p, 1e-4, 0.05, requests=400, max_extra=1)   # a TTFT no prefill meets
    assert tight.serving_gpus is None and len(tight.tried) == 2


def test_plan_cost_is_the_generated_price_and_energy_per_token():
    ex = D.deployment_examples()
    price, watts = ex["gpu_hour_price"]["h200"]["usd_per_gpu_hour"], ex["board_power_w"]["h200"]["watts"]
    c = D.plan_cost(3, 20_000.0, price, watts)
    assert c.per_million_tokens == pytest.approx(1e6 * price * 3 / 3600 / 20_000, rel=1e-12)
    assert c.joules_per_token == pytest.approx(700 * 3 / 20_000, rel=1e-12)
    assert D.plan_cost(1, 1.0, 1.0).joules_per_token is None
    with pytest.raises(ValueError, match="gpu_hour_price"):
        D.plan_cost(1, 1.0, 0)


def test_plans_reject_bad_input():
    s = D.DashboardState()
    with pytest.raises(ValueError, match="users"):
        D.continuous_plan(s, 0)
    with pytest.raises(ValueError, match="new_tokens"):
        D.continuous_plan(s.replace(new_tokens=1), 10)
    with pytest.raises(ValueError, match="tpot_budget"):
        D.continuous_plan(s, 10, tpot_budget=0)
    with pytest.raises(ValueError, match="kv_memory_fraction"):
        D.continuous_plan(s, 10, kv_memory_fraction=1.5)
    with pytest.raises(ValueError, match="users"):
        D.static_plan(s, -1)
    with pytest.raises(TypeError, match="state"):
        D.continuous_plan("llama-3-8b", 10)


def test_the_apps_serving_reading_prices_tokens_and_reports_the_itl():
    from course_lib.core.app import serving_reading
    from course_lib.lessons.widgets.capstone import serving_html
    h200 = D.DashboardState(hardware="h200", precision="fp8", prompt_tokens=1024, new_tokens=64, **_EFF)
    example = serving_reading(h200, 20, 1.0, 0.05)
    price = D.deployment_examples()["gpu_hour_price"]["h200"]["usd_per_gpu_hour"]
    assert example.cost.gpu_hour_price == price and "example price" in example.price_note
    assert example.cost.per_million_tokens == pytest.approx(1e6 * price * example.gpus / 3600 / (20 * 64), rel=1e-12)
    mine = serving_reading(h200, 20, 1.0, 0.05, gpu_hour_price=2.0)
    assert mine.cost.gpu_hour_price == 2.0 and "your" in mine.price_note
    assert "ITL p99" in serving_html(mine) and "per M tokens" in serving_html(mine)
    unpriced = serving_reading(D.DashboardState(hardware="l40s", prompt_tokens=512, new_tokens=32), 2, 1.0, 0.05)
    assert unpriced.cost is None and "GPU-hour price" in unpriced.price_note
    with pytest.raises(ValueError, match="gpu_hour_price"):
        serving_reading(h200, 20, 1.0, 0.05, gpu_hour_price=0)


# --------------------------------------------------------------------------------------------------
# The engine choice (issue 27): None is the floor, an engine prices TTFT and TPOT with its profile
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", [None, "llama.cpp", "vllm", "SGLang", "TensorRT-LLM", "transformers"])
def test_the_engine_flows_into_the_estimate(engine):
    s = D.DashboardState(engine=engine, batch=4)
    r = D.compute(s)
    e = estimate(s.model, s.hardware, s.prompt_tokens, s.new_tokens, batch=4, engine=engine)
    assert (r.ttft, r.tpot) == (e.ttft, e.tpot) and r.estimate.engine == e.engine
    floor = D.compute(s.replace(engine=None))
    assert (r.estimate.floor_ttft, r.estimate.floor_tpot) == (floor.ttft, floor.tpot)
    if engine is not None:
        assert s.engine in ("llama.cpp", "vLLM", "SGLang", "TensorRT-LLM", "transformers")
        assert r.tpot > floor.tpot and f"with the {s.engine} profile" in D.describe(s)
        # the curve and the plans price every batch with the same profile
        (p,) = D.latency_throughput_curve(s, [16])
        assert p.tpot == D.compute(s.replace(batch=16)).tpot == estimate(
            s.model, s.hardware, s.prompt_tokens, s.new_tokens, batch=16, engine=engine).tpot
    else:
        assert "profile" not in D.describe(s)


@pytest.mark.parametrize("kwargs, match", [
    ({"engine": "vllm2"}, "engine"), ({"engine": 3}, "engine"),
    ({"engine": "vLLM", "compute_efficiency": 0.5}, "engine: the vLLM profile has its own fitted efficiencies"),
    ({"engine": "llama.cpp", "bandwidth_efficiency": 0.8}, "leave compute_efficiency and bandwidth_efficiency at 1"),
])
def test_a_bad_engine_setting_gets_one_clear_error(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        D.DashboardState(**kwargs)
