"""Per-operator phase costs and MLA's latent attention FLOPs (the estimator-fidelity issue).

A step is a sequence of operators (the blocks' matrix products, attention, the lm_head, the embedding
gather); it costs the sum of their roofline times, not one max over its totals.
"""
import math

import pytest
import sympy as sp

from course_lib import get_hardware, get_model, list_hardware, list_models
from course_lib.core import numeric as g
from course_lib.core import formulas
from course_lib.core.estimator import OperatorCost, PhaseCost, estimate

OPERATORS = ["matmuls", "attention", "lm_head", "embedding"]


def test_llama3_8b_h100_batch_512_costs_the_sum_of_its_operators():
    # the case: one decode step at context 512, batch 512, efficiencies 1.0
    step = estimate("llama-3-8b", "h100-sxm", 511, 2, batch=512).decode_first
    assert [o.name for o in step.operators] == OPERATORS
    bound = {o.name: o.bound for o in step.operators}
    assert bound == {"matmuls": "compute", "attention": "memory", "lm_head": "compute", "embedding": "memory"}
    m = get_model("llama-3-8b")
    products = (2 * m.block_params * 512 + 2 * m.vocab * m.hidden * 512) / 989e12
    kv_reads = 512 * 512 * m.kv_bytes_per_token() / 3.35e12
    assert products + kv_reads >= 18.0e-3
    assert step.time == pytest.approx(products + kv_reads + 512 * m.hidden * 2 / 3.35e12)
    assert step.time >= 18.0e-3
    assert step.time == pytest.approx(18.03e-3, abs=0.01e-3)
    # the single max: every byte at the bandwidth, the products hidden under it
    assert step.single_max_time == pytest.approx(step.bytes / 3.35e12)
    assert step.single_max_time == pytest.approx(14.74e-3, abs=0.01e-3)
    assert step.time / step.single_max_time == pytest.approx(1.22, abs=0.01)
    assert step.time == pytest.approx(math.fsum(o.time for o in step.operators))


@pytest.mark.parametrize("model", ["llama-3-8b", "deepseek-v3", "mistral-7b", "gpt2-small", "qwen3-0.6b"])
@pytest.mark.parametrize("batch, cached", [(1, 0), (64, 300)])
def test_operators_add_up_to_the_phase_totals(model, batch, cached):
    e = estimate(model, "h200", 1000, 50, batch=batch, cached_prefix_tokens=cached)
    for phase in (e.prefill, e.decode_first, e.decode_last):
        assert math.fsum(o.flops for o in phase.operators) == pytest.approx(phase.flops, rel=1e-12)
        assert math.fsum(o.bytes for o in phase.operators) == pytest.approx(phase.bytes, rel=1e-12)
        for o in phase.operators:
            assert o.time == max(o.compute_time, o.memory_time)
        assert phase.single_max_time <= phase.time * (1 + 1e-12)
        assert phase.time <= (phase.compute_time + phase.memory_time) * (1 + 1e-12)


def test_every_operator_memory_bound_leaves_the_step_time_unchanged():
    # batch-1 decode of every dense (non-MLA) model on every device: one max or the sum, the same number
    for model in list_models():
        if get_model(model).is_mla:
            continue
        for hw in list_hardware():
            if "fp16" not in get_hardware(hw).peak_flops:   # Apple parts: no published peak, no estimate
                continue
            step = estimate(model, hw, 512, 2).decode_first
            assert all(o.bound == "memory" for o in step.operators), (model, hw)
            assert step.time == pytest.approx(step.single_max_time, rel=1e-12)
            assert step.bound == "memory"
    # the source's 7B model on an RTX 4090: 13.9 ms per token, as before
    assert estimate("source-7b", "rtx-4090", 1000, 2).tpot == pytest.approx(13.9e-3, rel=0.015)


def test_a_short_prefill_pays_for_the_lm_head_read():
    # one logit row per sequence: the lm_head is a GEMV, memory-bound, while the rest of the pass computes
    pf = estimate("llama-3-8b", "h100-sxm", 2048, 2).prefill
    assert pf.operator("lm_head").bound == "memory" and pf.operator("matmuls").bound == "compute"
    assert pf.bound == "compute"
    m = get_model("llama-3-8b")
    extra = (m.vocab * m.hidden + 2048 * m.hidden) * 2 / 3.35e12
    assert pf.time == pytest.approx(pf.single_max_time + extra - 2 * m.vocab * m.hidden / 989e12)


@pytest.mark.parametrize("model, hw, P, n, B", [
    ("llama-3-8b", "h200", 400, 300, 512),    # the step's bound turns from compute to memory in the range
    ("mistral-7b", "h100-sxm", 4000, 200, 256),   # the sliding window (4096) is crossed
    ("deepseek-v3", "h200", 100, 120, 8),
])
def test_decode_sum_is_the_sum_of_the_steps(model, hw, P, n, B):
    e = estimate(model, hw, P, n, batch=B)
    steps = [estimate(model, hw, c - 1, 2, batch=B).decode_first for c in range(P + 1, P + n)]
    assert e.decode_time_sum == pytest.approx(math.fsum(s.time for s in steps), rel=1e-9)
    assert e.decode_compute_steps == sum(s.bound == "compute" for s in steps)
    assert e.tpot_first == steps[0].time and e.tpot_last == steps[-1].time


def test_moe_routed_experts_are_their_own_operator():
    # DeepSeek-V3 at batch 512: the shared weights see 512 tokens (compute-bound in fp8 on an H200), each routed
    # expert about 16 (memory-bound); one max over the products would hide one behind the other
    step = estimate("deepseek-v3", "h200", 1023, 2, precision="fp8", batch=512).decode_first
    assert [o.name for o in step.operators] == ["matmuls", "experts"] + OPERATORS[1:]
    ds = get_model("deepseek-v3")
    experts = step.operator("experts")
    assert experts.flops == 2 * ds.active_expert_params * 512
    assert experts.bound == "memory" and step.operator("matmuls").bound == "compute"
    assert experts.bytes == pytest.approx(ds.streamed_param_parts(512)["experts"])     # fp8: one byte each
    assert step.time > step.single_max_time


def test_the_llama_range_switches_bound():
    e = estimate("llama-3-8b", "h200", 400, 300, batch=512)
    assert e.decode_bound == "mixed" and 0 < e.decode_compute_steps < 299


def test_operator_time_formula_is_the_max_and_phase_time_its_single_max():
    S = formulas.S
    want = sp.Max(S.flops / (S.peak_flops * S.compute_efficiency), S.nbytes / (S.bandwidth * S.bandwidth_efficiency))
    assert formulas.expr("operator_time") == want
    assert formulas.expr("phase_time") == want
    assert g.operator_time(2e12, 1e15, 0.5, 1e9, 1e12, 1.0) == pytest.approx(4e-3)
    assert g.operator_time(1e12, 1e15, 1.0, 3e9, 1e12, 0.5) == pytest.approx(6e-3)


def test_prefill_and_decode_attention_terms_are_those_of_the_totals():
    S = formulas.S
    prefill_rest = formulas.expr("prefill_flops").subs({S.layers: 0})
    assert sp.expand(formulas.expr("prefill_flops") - prefill_rest - formulas.expr("prefill_attention_flops")) == 0
    decode_rest = formulas.expr("decode_flops").subs({S.layers: 0})
    attn = formulas.expr("decode_attention_flops")
    assert sp.expand(formulas.expr("decode_flops") - decode_rest - attn) == 0


def test_mla_decode_attention_uses_the_latent():
    ds = get_model("deepseek-v3")
    assert ds.attn_dim == (192 + 128) / 2                     # the heads' own widths: 640 FLOP per pair per head
    assert ds.decode_attn_dim == (512 + 64 + 512) / 2         # the latent: 2 x (576 + 512) = 2,176
    assert 4 * ds.decode_attn_dim == 2 * (576 + 512)
    step = estimate("deepseek-v3", "h200", 4096, 2, batch=4).decode_first
    attn = step.operator("attention")
    assert attn.flops == 4 * 4 * ds.layers * ds.heads * 544 * 4097
    assert attn.intensity == pytest.approx(242, abs=0.5)      # lesson 03 section 5 showed 71.1 with attn_dim
    assert attn.intensity == pytest.approx(4 * ds.layers * ds.heads * 544 / ds.kv_bytes_per_token("fp16"))
    assert 4 * ds.layers * ds.heads * ds.attn_dim / ds.kv_bytes_per_token("fp16") == pytest.approx(71.1, abs=0.05)
    # prefill keeps the heads' widths (kernels decompress the latent for long prompts)
    pf = estimate("deepseek-v3", "h200", 4096, 2).prefill
    assert pf.operator("attention").flops == g.prefill_attention_flops(1, ds.layers, ds.heads, 160, 4096, 0)
    # a model without MLA: the decode attn_dim is the head dim
    assert get_model("llama-3-8b").decode_attn_dim == 128


def test_phase_cost_without_operators_is_its_single_max_and_bad_operators_are_refused():
    p = PhaseCost(1e12, 1e9, 2e-3, 1e-3)
    assert p.time == p.single_max_time == 2e-3 and p.bound == "compute" and p.operators == ()
    with pytest.raises(TypeError, match="operators"):
        PhaseCost(1e12, 1e9, 2e-3, 1e-3, ("matmuls",))
    with pytest.raises(ValueError, match="flops"):
        OperatorCost("x", -1.0, 1.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="name must be one of"):
        estimate("llama-3-8b", "h100-sxm", 10, 2).prefill.operator("softmax")
    o = OperatorCost("embedding", 0.0, 0.0, 0.0, 0.0, 0.0)
    assert o.bound == "memory" and o.intensity == math.inf
