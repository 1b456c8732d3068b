"""The estimator reproduces the source's numbers and obeys the relations that hold on any machine."""
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from course_lib import estimate, get_hardware, get_model, kv_cache_bytes, weight_bytes
from course_lib.core.precision import PRECISIONS, bytes_per_element
from course_lib.core.units import GB, GiB, KiB, MB

# ---- the source's numbers ----------------------------------------------------------------------


def test_7b_fp16_is_14_gb_and_13_04_gib():
    b = weight_bytes(7e9, "fp16")
    assert b == 14 * GB
    assert round(b / GiB, 2) == 13.04


def test_kv_source_example():
    m = get_model("source-7b")
    assert m.kv_values_per_token == 65_536
    assert kv_cache_bytes(m, 1) == 128 * KiB
    assert kv_cache_bytes(m, 1000) == pytest.approx(131 * MB, rel=0.001)
    assert kv_cache_bytes("llama-2-7b", 1000) == 4 * kv_cache_bytes("mistral-7b", 1000)
    assert kv_cache_bytes("mistral-7b", 1000, batch=8) == 8 * kv_cache_bytes("mistral-7b", 1000)


def test_bandwidth_floor_rtx_4090():
    bw = get_hardware("rtx-4090").bandwidth
    assert weight_bytes(7e9, "fp16") / bw == pytest.approx(13.9e-3, abs=0.05e-3)
    assert weight_bytes(7e9, "int8") / bw == pytest.approx(7.0e-3, rel=0.01)  # 6.94 ms: "~7.0 ms"
    e = estimate("source-7b", "rtx-4090", prompt_tokens=1000, new_tokens=2)
    # the estimator streams blocks + lm_head + one embedding row + the KV: ~13.9 ms, memory-bound;
    # a little under 14 GB / bandwidth, because the embedding table is looked up (one row), not streamed
    assert e.tpot == pytest.approx(13.9e-3, rel=0.015)
    m = get_model("source-7b")
    assert e.tpot == pytest.approx((14e9 - (m.vocab - 1) * m.hidden * 2 + 1001 * 131072) / bw)
    assert e.decode_bound == "memory"
    e8 = estimate("source-7b", "rtx-4090", 1000, 2, precision="int8", kv_precision="fp16")
    assert e8.tpot == pytest.approx(7.0e-3, rel=0.03)


def test_a100_sixty_percent_and_ttft():
    e = estimate("source-7b", "a100-40gb", prompt_tokens=1000, new_tokens=100, compute_efficiency=0.6)
    assert e.prefill_bound == "compute"
    m = get_model("source-7b")
    flops = 2 * m.block_params * 1000 + 2 * m.vocab * m.hidden + 2 * m.layers * m.heads * m.head_dim * 1000 ** 2
    assert e.prefill.flops == flops
    # the single max over the whole pass is the compute term; per operator, the lm_head (one logit row: a GEMV
    # over V x h weights) and the embedding gather are memory-bound and add their reads to it
    assert e.prefill.single_max_time == pytest.approx(flops / (312e12 * 0.6))
    compute_bound = flops - 2 * m.vocab * m.hidden
    memory_bound = (m.vocab * m.hidden + 1000 * m.hidden) * 2
    assert e.ttft == pytest.approx(compute_bound / (312e12 * 0.6) + memory_bound / 1555e9)
    assert e.ttft == pytest.approx(2 * 7e9 * 1000 / 187.2e12, rel=0.05)


def test_source_tps_recipe_is_about_100x_too_optimistic():
    e = estimate("source-7b", "a100-40gb", 500, 200, compute_efficiency=0.6)
    ratio = e.tpot / e.source_recipe_tpot
    assert 50 < ratio < 300


def test_total_tps_and_conventions():
    e = estimate("mistral-7b", "h100-sxm", 512, 128, batch=4)
    assert e.total == pytest.approx(e.ttft + 127 * e.tpot)
    assert e.tps == pytest.approx(128 / e.total)
    assert e.tps_aggregate == pytest.approx(4 * e.tps)
    assert e.decode_tps == pytest.approx(1 / e.tpot)
    b, k = e.line
    assert b + k * 128 == pytest.approx(e.ttft + 127 * e.tpot_first)
    assert e.tpot_first <= e.tpot <= e.tpot_last


def test_exact_decode_sum_matches_brute_force_including_bound_switch():
    # large batch on a long response: per operator, the weight products (and lm_head) are compute-bound and the
    # K/V reads memory-bound; the step turns memory-bound once the K/V reads take longer than the products
    e = estimate("llama-3-8b", "h200", 100, 3000, batch=512)
    m, hw = e.model, e.hardware
    k = m.kv_bytes_per_token("fp16")
    blocks = 2 * m.block_params * 512 / 989e12          # the products, compute-bound at batch 512
    head = 2 * m.vocab * m.hidden * 512 / 989e12
    emb = 512 * m.hidden * 2 / hw.bandwidth            # the embedding gather, memory-bound
    ts, n_compute = [], 0
    for c in range(101, 100 + 3000):
        attn = max(512 * c * k / hw.bandwidth, 512 * 4 * m.layers * m.heads * m.head_dim * c / 989e12)
        ts.append(blocks + head + emb + attn)
        n_compute += blocks + head > emb + attn
    assert max(blocks, m.block_params * 2 / hw.bandwidth) == blocks
    assert e.decode_time_sum == pytest.approx(sum(ts), rel=1e-9)
    assert e.decode_bound == "mixed"
    assert e.decode_compute_steps == n_compute
    assert e.tpot_first == pytest.approx(ts[0]) and e.tpot_last == pytest.approx(ts[-1])


def test_sliding_window_caps_kv_reads():
    short = estimate("mistral-7b", "rtx-4090", 4000, 200)
    long = estimate("mistral-7b", "rtx-4090", 20000, 50)
    assert long.tpot_first == pytest.approx(short.tpot_last)  # both read the 4096-token window
    assert kv_cache_bytes("mistral-7b", 20000) == kv_cache_bytes("mistral-7b", 4096)
    assert estimate("llama-3-8b", "rtx-4090", 20000, 50).tpot > estimate("llama-3-8b", "rtx-4090", 4000, 50).tpot


def test_cached_prefix_lowers_ttft():
    full = estimate("llama-3-8b", "a100-80gb", 2048, 10)
    hit = estimate("llama-3-8b", "a100-80gb", 2048, 10, cached_prefix_tokens=2000)
    assert hit.ttft < full.ttft / 10
    assert hit.tpot == full.tpot


def test_memory_fit():
    assert estimate("llama-2-70b", "rtx-4090", 100, 10).fits is False
    assert estimate("llama-2-7b", "rtx-4090", 100, 10).fits is True
    e = estimate("llama-2-7b", "a100-80gb", 1000, 1000, batch=8)
    assert e.memory_needed == e.weights_bytes + kv_cache_bytes("llama-2-7b", 2000, batch=8)


def test_quantised_and_fp8_compute_dtype():
    assert estimate("mistral-7b", "a100-80gb", 100, 10, precision="fp8").compute_dtype == "fp16"
    assert estimate("mistral-7b", "h100-sxm", 100, 10, precision="fp8").compute_dtype == "fp8"
    e = estimate("mistral-7b", "rtx-4090", 100, 10, precision="q4_0")
    assert e.kv_precision == "fp16" and e.weights_bytes == get_model("mistral-7b").params * 4.5 / 8


def test_hardware_without_flops_explains():
    from course_lib.core.hardware import custom_hardware
    bare = custom_hardware("bare", bandwidth=100e9)                    # no peak and no effective rate
    with pytest.raises(ValueError, match="bare.*no published dense fp16"):
        estimate("mistral-7b", bare, 100, 10)
    m2 = get_hardware("m2-ultra")                                       # Apple publishes none: the effective rate
    assert estimate("mistral-7b", m2, 100, 10).ttft > 0 and m2.rate_is_effective("fp16")


# ---- bad input ----------------------------------------------------------------------------------

BAD = [
    (dict(prompt_tokens=-1), ValueError, "prompt_tokens"),
    (dict(prompt_tokens=1.5), ValueError, "prompt_tokens"),
    (dict(prompt_tokens=float("nan")), ValueError, "prompt_tokens"),
    (dict(new_tokens=float("inf")), ValueError, "new_tokens"),
    (dict(new_tokens=0), ValueError, "new_tokens"),
    (dict(batch=0), ValueError, "batch"),
    (dict(batch="4"), TypeError, "batch"),
    (dict(precision="fp12"), ValueError, "precision"),
    (dict(kv_precision="int3"), ValueError, "kv_precision"),
    (dict(compute_efficiency=1.5), ValueError, "compute_efficiency"),
    (dict(bandwidth_efficiency=0), ValueError, "bandwidth_efficiency"),
    (dict(cached_prefix_tokens=100), ValueError, "cached_prefix_tokens"),
    (dict(model="gpt-5"), ValueError, "model"),
    (dict(hardware="h100"), ValueError, "h100-sxm"),
]


@pytest.mark.parametrize("kw, exc, msg", BAD)
def test_bad_input_raises_one_clear_error(kw, exc, msg):
    args = dict(model="mistral-7b", hardware="rtx-4090", prompt_tokens=100, new_tokens=10)
    args.update(kw)
    with pytest.raises(exc, match=msg):
        estimate(**args)


def test_weight_bytes_bad():
    with pytest.raises(ValueError, match="params"):
        weight_bytes(-7e9, "fp16")
    with pytest.raises(TypeError, match="params"):
        weight_bytes(None, "fp16")
    with pytest.raises(ValueError, match="tokens"):
        kv_cache_bytes("mistral-7b", -1)


# ---- properties -----------------------------------------------------------------------------------

models = st.sampled_from(["gpt2-small", "llama-2-7b", "mistral-7b", "llama-3-8b", "qwen3-0.6b", "deepseek-v3",
                          "source-7b", "qwen2.5-7b"])
devices = st.sampled_from(["rtx-4090", "a100-80gb", "h100-sxm", "h200", "l4", "mi300x"])
precisions = st.sampled_from(sorted(PRECISIONS))


@given(models, devices, st.integers(1, 20000), st.integers(1, 4000), st.integers(1, 256), precisions)
def test_tpot_never_below_bandwidth_floor(model, hw, P, n, B, prec):
    e = estimate(model, hw, P, n, batch=B, precision=prec)
    floor = e.model.streamed_params(B) * bytes_per_element(prec) / e.hardware.bandwidth
    assert e.tpot >= floor * (1 - 1e-12)
    assert e.tpot_first >= floor * (1 - 1e-12)
    assert e.total >= e.ttft > 0
    assert math.isfinite(e.tps) and e.tps > 0


@given(models, devices, st.integers(1, 8000), st.integers(2, 2000), st.integers(1, 64))
def test_monotonic_in_tokens_and_batch(model, hw, P, n, B):
    e = estimate(model, hw, P, n, batch=B)
    assert estimate(model, hw, P + 17, n, batch=B).ttft >= e.ttft
    assert estimate(model, hw, P, n + 13, batch=B).total >= e.total
    assert estimate(model, hw, P, n, batch=B + 3).tpot >= e.tpot
    assert estimate(model, hw, P, n, batch=B + 3).tps_aggregate >= e.tps_aggregate * (1 - 1e-9)
    assert kv_cache_bytes(model, P + 1, batch=B) >= kv_cache_bytes(model, P, batch=B)
    assert kv_cache_bytes(model, P, batch=B + 1) > kv_cache_bytes(model, P, batch=B)


@given(st.integers(0, 10**12), precisions)
def test_weight_bytes_linear_in_bytes_per_element(params, prec):
    assert weight_bytes(params, prec) == pytest.approx(params * bytes_per_element(prec))
    assert weight_bytes(params, "fp32") == pytest.approx(2 * weight_bytes(params, "fp16"))


@given(models, st.integers(0, 10**6), precisions, st.integers(1, 64))
def test_kv_linear_in_precision(model, tokens, prec, batch):
    base = kv_cache_bytes(model, tokens, "fp16", batch)
    assert kv_cache_bytes(model, tokens, prec, batch) == pytest.approx(base * bytes_per_element(prec) / 2)


bad_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True).filter(
    lambda x: not (math.isfinite(x) and x >= 1 and x == int(x))), st.integers(max_value=0),
    st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2))


@given(st.sampled_from(["prompt_tokens", "new_tokens", "batch"]), bad_numbers)
def test_bad_counts_always_raise_documented_errors(arg, value):
    kw = dict(prompt_tokens=100, new_tokens=10, batch=1)
    kw[arg] = value
    with pytest.raises((ValueError, TypeError), match=arg):
        estimate("mistral-7b", "rtx-4090", **kw)


@given(st.text(max_size=12))
def test_unknown_names_raise(name):
    from course_lib.core import precision

    assume(name.strip().lower() not in PRECISIONS and name.strip().lower() not in precision._ALIASES)
    with pytest.raises((ValueError, TypeError), match="precision"):
        estimate("mistral-7b", "rtx-4090", 10, 10, precision=name)


def test_numpy_scalars_accepted():
    e = estimate("mistral-7b", "rtx-4090", np.int64(100), np.int32(10), batch=np.int64(2))
    assert e.prompt_tokens == 100 and isinstance(e.prompt_tokens, int)


def test_w8a8_prefill_runs_at_the_int8_rate_and_fp8_falls_back_where_no_fp8_rate_exists():
    """One rule for the arithmetic format (estimator.compute_dtype): W8A8 computes at the int8 tensor-core rate
    (A100: 624 dense TOPS, twice its fp16 312), fp8 weights on an A100 (no fp8 rate) in fp16."""
    from course_lib.core.estimator import compute_dtype

    assert compute_dtype("w8a8", "a100-80gb") == "int8" and compute_dtype("fp8", "a100-80gb") == "fp16"
    assert compute_dtype("fp8", "h100-sxm") == "fp8" and compute_dtype("int4") == "fp16"
    fp16 = estimate("llama-3-8b", "a100-80gb", 2048, 2, precision="fp16", batch=8)
    w8a8 = estimate("llama-3-8b", "a100-80gb", 2048, 2, precision="w8a8", batch=8)
    assert fp16.prefill_bound == w8a8.prefill_bound == "compute"
    assert w8a8.ttft < 0.6 * fp16.ttft
