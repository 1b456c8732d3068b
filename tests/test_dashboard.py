"""The capstone dashboard's plain functions (``course_lib.dashboard``): no widgets, no browser.

* on one GPU every number equals ``course_lib.estimate`` of the same setting (the dashboard adds
  nothing of its own), and the texts are ``course_lib.units`` formats of those numbers;
* tensor parallelism: the split work is the estimate on one device with G times the bandwidth and
  FLOP/s, plus 2 ring all-reduces per layer priced by ``_generated.ring_allreduce_time``;
* properties over the batch: aggregate tokens/s never falls and TPOT never falls as the batch grows;
  the memory verdict turns exactly at ``max_batch_that_fits``;
* bad input gets one clear error naming the field; importing the module pulls in no torch,
  ipywidgets or matplotlib.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.core import _generated as g
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
    assert D.tpot_text(s) == format_time(e.tpot)
    assert D.ttft_text(s) == format_time(e.ttft)
    rate = lambda x: f"{Quantity(x, 'number').format()} tokens/s"  # noqa: E731
    assert D.tps_text(s) == f"{rate(e.tps)} per user, {rate(e.tps_aggregate)} in all"
    verdict = "fits" if e.fits else "does NOT fit"
    needed, available = format_bytes(e.memory_needed), format_bytes(e.memory_available)
    assert D.memory_text(s) == f"{needed} of {available} per GPU: {verdict}"
    v = D.dashboard_view(s)
    assert (v.ttft_text, v.tpot_text, v.total_text, v.error) == (D.ttft_text(s), D.tpot_text(s),
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
    v = D.dashboard_view(s)
    assert v.result.fits is False and "does NOT fit" in v.memory_text
    assert any(w.startswith("Does not fit") for w in v.warnings)
    assert v.tpot_text == D.tpot_text(s) != D.NOT_AVAILABLE   # still priced: the arithmetic is shown


def test_unpriceable_settings_show_not_available_with_the_reason():
    s = D.DashboardState(hardware="m2-ultra")                  # no published peak FLOP/s
    with pytest.raises(ValueError) as info:
        D.compute(s)
    v = D.dashboard_view(s)
    assert v.result is None and v.error == str(info.value)
    assert D.tpot_text(s) == D.ttft_text(s) == D.tps_text(s) == D.memory_text(s) == D.NOT_AVAILABLE
    unmeasured = D.DashboardState(hardware="this-machine")
    assert "not been measured" in D.dashboard_view(unmeasured).error
    assert D.tpot_text(unmeasured) == D.NOT_AVAILABLE


def test_this_machine_uses_the_measured_spec():
    spec = custom_hardware("this-machine", bandwidth=50e9, peak_flops=1e12, capacity=64e9)
    s = D.DashboardState(hardware="this-machine", machine=spec)
    e = estimate(s.model, spec, s.prompt_tokens, s.new_tokens)
    assert D.compute(s).estimate == e and D.tpot_text(s) == format_time(e.tpot)
    assert D.compute(s).memory_available == 64e9
    unknown = custom_hardware("this-machine", bandwidth=50e9, peak_flops=1e12)
    assert D.memory_text(s.replace(machine=unknown)).endswith("(capacity unknown)")
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
    per_step = 2 * m.layers * g.ring_allreduce_time(4, 8 * m.hidden * 2, link)
    per_prefill = 2 * m.layers * g.ring_allreduce_time(4, 8 * 2000 * m.hidden * 2, link)
    assert r.allreduce_decode == pytest.approx(per_step, rel=1e-12)
    assert r.allreduce_prefill == pytest.approx(per_prefill, rel=1e-12)
    assert r.tpot == e.tpot + r.allreduce_decode and r.ttft == e.ttft + r.allreduce_prefill
    assert r.total == pytest.approx(r.ttft + 299 * r.tpot, rel=1e-14)
    # each GPU holds a quarter of the weights and the cache, against its own capacity
    assert r.memory_needed == pytest.approx((m.weight_bytes("fp16") + e.kv_bytes) / 4, rel=1e-12)
    assert r.memory_available == hw.capacity and r.fits is True
    assert D.compute(s.replace(tensor_parallel=1)).fits is False
    assert r.tps_aggregate_per_gpu == r.tps_aggregate / 4
    assert "all-reduces add" in D.dashboard_view(s).bounds_text


def test_allreduce_helper():
    assert D.allreduce_time_per_pass(32, 16, 4096, 1, 2, None) == 0.0
    assert D.allreduce_time_per_pass(32, 16, 4096, 2, 2, 100e9) == pytest.approx(
        2 * 32 * (16 * 4096 * 2) * 2 * (2 - 1) / 2 / 100e9, rel=1e-12)
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
def test_state_from_controls_parses_the_link_text():
    s = D.state_from_controls(tensor_parallel=2, interconnect_bandwidth="450 GB/s")
    assert s.interconnect_bandwidth == 450e9
    assert D.state_from_controls(interconnect_bandwidth="").interconnect_bandwidth is None
    assert D.state_from_controls(interconnect_bandwidth=1e11).interconnect_bandwidth == 1e11
    with pytest.raises(ValueError, match="interconnect_bandwidth"):
        D.state_from_controls(interconnect_bandwidth="450 Gfoo")
    with pytest.raises(ValueError, match="interconnect_bandwidth"):
        D.state_from_controls(interconnect_bandwidth="-3 GB/s")


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
    ({"model": "deepseek-v3", "tensor_parallel": 8, "interconnect_bandwidth": 1e11}, ValueError, "latent"),
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
