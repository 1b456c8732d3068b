"""Models added for 2026 learners: counts to the parameter against their config.json, MoE active vs total,
and the engine configurations shared with course_lib/data/engine_configs.json."""
import math

import pytest

from course_lib import get_model
from course_lib.core.data import load_catalog
from course_lib.core.models import ModelSpec, catalog_entry

# the count of the transformers model built from each config.json (meta device), stored as published_params
ADDED = {"llama-3.1-8b": 8_030_261_248, "llama-3.1-70b": 70_553_706_496, "llama-3.1-405b": 405_853_388_800,
         "llama-3.2-1b": 1_235_814_400, "llama-3.2-3b": 3_212_749_824, "qwen2.5-0.5b": 494_032_768,
         "qwen2.5-1.5b": 1_543_714_304, "qwen2.5-3b": 3_085_938_688, "qwen2.5-14b": 14_770_033_664,
         "qwen2.5-32b": 32_763_876_352, "qwen2.5-72b": 72_706_203_648, "qwen3-8b": 8_190_735_360,
         "qwen3-32b": 32_762_123_264, "qwen3-30b-a3b": 30_532_122_624, "mixtral-8x7b": 46_702_792_704,
         "qwen3-14b": 14_768_307_200}
ENGINE = {"gpt2-small": "gpt2", "qwen3-0.6b": "qwen3-0.6b", "llama-3.2-1b": "llama-3.2-1b",
          "qwen2.5-0.5b": "qwen2.5-0.5b"}


@pytest.mark.parametrize("name", sorted(ADDED))
def test_added_models_match_their_configs_to_the_parameter(name):
    e = catalog_entry(name)
    assert get_model(name).params == e["published_params"] == ADDED[name]
    assert e["source"].startswith("https://huggingface.co/") and "config.json" in e["source"]
    assert get_model(name).source == e["source"]


@pytest.mark.parametrize("name, engine", sorted(ENGINE.items()))
def test_engine_models_reuse_the_raw_config_json(name, engine):
    raw = load_catalog("engine_configs")["configs"][engine]
    e = catalog_entry(name)
    assert e["engine_config"] == engine and "config" not in load_catalog("models")["models"][name]
    assert e["config"] is raw["config"] and e["config_source"] == raw["source"]
    assert get_model(name).params == raw["params"] == e["published_params"]


@pytest.mark.parametrize("name, total, active", [("mixtral-8x7b", 46.7e9, 12.9e9), ("qwen3-30b-a3b", 30.5e9, 3.3e9)])
def test_moe_active_and_total_parameters(name, total, active):
    m, e = get_model(name), catalog_entry(name)
    assert m.is_moe and e["published_active_params"] == active
    assert abs(m.params / total - 1) < 0.005 and abs(m.active_params / active - 1) < 0.02
    # active = everything but the routed experts a token does not use
    unused = m.moe_layers * (m.experts - m.experts_per_token) * m.expert_params
    assert m.active_params == m.params - unused
    assert m.experts_touched(1) == pytest.approx(m.experts_per_token)


def test_mixtral_by_hand():
    m = get_model("mixtral-8x7b")
    h, f, v, L = 4096, 14336, 32000, 32
    attn = h * 32 * 128 + 2 * h * 8 * 128 + 32 * 128 * h
    per_layer = attn + 8 * 3 * h * f + 8 * h + 2 * h          # 8 SwiGLU experts, router, two norms
    assert m.params == 2 * v * h + L * per_layer + h
    assert m.active_params == 2 * v * h + L * (attn + 2 * 3 * h * f + 8 * h + 2 * h) + h


def test_qwen3_moe_keeps_the_per_head_qk_norm():
    m = get_model("qwen3-30b-a3b")
    assert m.qk_norm and m.head_dim * m.heads != m.hidden and m.shared_experts == 0 and m.dense_layers == 0
    no_norm = ModelSpec.from_hf_config(catalog_entry("qwen3-30b-a3b")["config"], qk_norm=False)
    assert m.params - no_norm.params == m.layers * 2 * m.head_dim


def test_family_shapes():
    assert get_model("llama-3.1-8b").params == get_model("llama-3-8b").params          # same weights' shapes
    assert get_model("llama-3.1-70b").params == get_model("llama-3-70b").params
    assert get_model("llama-3.2-3b").tied_embeddings and not get_model("llama-3.1-405b").tied_embeddings
    for name in ("qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b"):
        m = get_model(name)
        assert m.qkv_bias and m.sliding_window is None          # use_sliding_window: false
    assert get_model("qwen2.5-72b").kv_values_per_token == 2 * 80 * 8 * 128
    assert get_model("llama-3.1-405b").kv_bytes_per_token("fp16") == 2 * 126 * 8 * 128 * 2


# interleaved local (sliding-window) and global layers: counts of the transformers model built from each config
# (Gemma2ForCausalLM, Gemma3ForCausalLM from the text_config, GptOssForCausalLM; meta device, transformers 5.23)
LOCAL_GLOBAL = {"gemma-2-2b": 2_614_341_888, "gemma-2-9b": 9_241_705_984, "gemma-2-27b": 27_227_128_320,
                "gemma-3-4b": 3_880_263_168, "gemma-3-12b": 11_766_034_176, "gemma-3-27b": 27_009_346_304,
                "gpt-oss-20b": 20_914_757_184, "gpt-oss-120b": 116_829_156_672}
# (layers, local layers, window) from each config's layer pattern
PATTERN = {"gemma-2-2b": (26, 13, 4096), "gemma-2-9b": (42, 21, 4096), "gemma-2-27b": (46, 23, 4096),
           "gemma-3-4b": (34, 29, 1024), "gemma-3-12b": (48, 40, 1024), "gemma-3-27b": (62, 52, 1024),
           "gpt-oss-20b": (24, 12, 128), "gpt-oss-120b": (36, 18, 128)}


@pytest.mark.parametrize("name", sorted(LOCAL_GLOBAL))
def test_local_global_models_match_their_configs_to_the_parameter(name):
    m, e = get_model(name), catalog_entry(name)
    assert m.params == e["published_params"] == LOCAL_GLOBAL[name]
    assert e["source"].startswith("https://huggingface.co/") and "config.json" in e["source"]
    assert (m.layers, m.local_layers, m.local_window) == PATTERN[name]
    assert m.sliding_window is None and m.global_layers == m.layers - m.local_layers


@pytest.mark.parametrize("name", ["gemma-2-2b", "gemma-2-9b", "gemma-2-27b"])
def test_gemma2_non_embedding_count_is_the_reports(name):
    m, e = get_model(name), catalog_entry(name)
    assert m.params - m.vocab * m.hidden == e["published_non_embedding_params"]       # tied: one V x h matrix


def test_gemma_by_hand():
    m = get_model("gemma-3-27b")
    h, f, v, L, H, K, d = 5376, 21504, 262208, 62, 32, 16, 128
    attn = h * H * d + 2 * h * K * d + H * d * h                 # head_dim 128 x 32 heads = 4096 != hidden 5376
    per_layer = attn + 3 * h * f + 4 * h + 2 * d                  # four RMSNorms, per-head Q/K RMSNorm
    assert m.tied_embeddings and m.block_norms == 4 and m.qk_norm
    assert m.params == v * h + L * per_layer + h
    g2 = get_model("gemma-2-9b")
    assert g2.block_norms == 4 and not g2.qk_norm and g2.tied_embeddings and g2.head_dim * g2.heads != g2.hidden


def test_gpt_oss_by_hand():
    m = get_model("gpt-oss-20b")
    h, f, v, L, H, K, d, E = 2880, 2880, 201088, 24, 64, 8, 64, 32
    attn = h * H * d + 2 * h * K * d + H * d * h + (H + 2 * K) * d + h + H     # biases, and one sink per head
    expert = 3 * h * f + 2 * f + h                                            # gate_up and down, with biases
    per_layer = attn + E * expert + E * h + E + 2 * h                         # router with bias, two norms
    assert m.attention_sinks and m.mlp_bias and m.router_bias and not m.tied_embeddings
    assert m.params == 2 * v * h + L * per_layer + h
    assert m.active_params == m.params - L * (E - 4) * expert


@pytest.mark.parametrize("name, total, active", [("gpt-oss-20b", 20.9e9, 3.6e9), ("gpt-oss-120b", 116.8e9, 5.1e9)])
def test_gpt_oss_totals_and_active_match_the_model_card(name, total, active):
    m, e = get_model(name), catalog_entry(name)
    assert e["published_active_params"] == active
    assert abs(m.params / total - 1) < 0.001
    # the model card's active count leaves out the embedding table (and keeps the lm_head)
    assert abs((m.active_params - m.embedding_params) / active - 1) < 0.01


def _per_layer_kv_bytes(m, context, bytes_per_value):
    """The KV bytes summed layer by layer: a local layer holds min(context, window) tokens, a global one all."""
    per_token_layer = 2 * m.kv_heads * m.head_dim * bytes_per_value
    kinds = catalog_entry(m.name)["config"].get("layer_types")
    if kinds is None:                                   # Gemma 3: every 6th layer global
        kinds = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(m.layers)]
    return sum(per_token_layer * (min(context, m.local_window) if k == "sliding_attention" else context)
               for k in kinds)


@pytest.mark.parametrize("name, context", [("gemma-3-27b", 32_768), ("gemma-3-4b", 32_768), ("gemma-3-12b", 100_000),
                                           ("gpt-oss-120b", 32_768), ("gpt-oss-20b", 131_072),
                                           ("gemma-3-27b", 700), ("gpt-oss-20b", 100)])
def test_kv_bytes_follow_the_layer_pattern(name, context):
    from course_lib.core.estimator import kv_cache_bytes

    m = get_model(name)
    want = _per_layer_kv_bytes(m, context, 2)
    assert kv_cache_bytes(m, context, "bf16") == pytest.approx(want, rel=1e-12)
    assert m.attended_tokens(context) * m.kv_bytes_per_token("bf16") == pytest.approx(want, rel=1e-12)
    assert kv_cache_bytes(m, context, "bf16", batch=3) == pytest.approx(3 * want, rel=1e-12)
    if context <= m.local_window:                       # inside the window every layer holds the whole context
        assert m.attended_tokens(context) == context


def test_gemma3_27b_kv_at_32k_by_hand():
    from course_lib.core.estimator import kv_cache_bytes

    # 10 global layers x 32,768 tokens + 52 local layers x 1,024 tokens, 16 KV heads x 128, K and V, 2 bytes
    want = (10 * 32_768 + 52 * 1_024) * 2 * 16 * 128 * 2
    assert kv_cache_bytes("gemma-3-27b", 32_768, "bf16") == want == 3_120_562_176
    full = get_model("gemma-3-27b").scaled(local_window=None, local_layers=0)
    assert kv_cache_bytes(full, 32_768, "bf16") == 62 * 32_768 * 2 * 16 * 128 * 2       # 5.2x more without windows


def test_decode_step_reads_follow_the_layer_pattern():
    from course_lib import estimate

    m = get_model("gpt-oss-120b")
    e = estimate(m, "h100-sxm", prompt_tokens=32_767, new_tokens=1, precision="bf16")
    attention = {o.name: o for o in e.decode_first.operators}["attention"]
    assert attention.bytes == pytest.approx(_per_layer_kv_bytes(m, 32_768, 2), rel=1e-12)


def test_a_mixed_pattern_needs_both_fields_and_some_global_layers():
    m = get_model("gemma-3-27b")
    with pytest.raises(ValueError, match="local_window and local_layers"):
        m.scaled(local_window=None)
    with pytest.raises(ValueError, match="local_layers"):
        m.scaled(local_layers=62)
    with pytest.raises(ValueError, match="exclude each other"):
        m.scaled(sliding_window=4096)


@pytest.mark.parametrize("name, prompt, new", [("gemma-3-27b", 900, 400), ("gpt-oss-20b", 50, 300),
                                                ("gemma-2-9b", 5000, 64), ("gemma-3-4b", 20, 30)])
def test_decode_sums_follow_the_layer_pattern(name, prompt, new):
    """The estimator's decode sums equal step-by-step sums, across the window (requires the estimator patch)."""
    from course_lib import estimate
    from course_lib.core import estimator as est

    m = get_model(name)
    e = estimate(m, "h100-sxm", prompt_tokens=prompt, new_tokens=new, precision="bf16", batch=4)
    hw = e.hardware
    steps = [est.estimate(m, hw, prompt_tokens=c - 1, new_tokens=1, precision="bf16", batch=4).decode_first
             for c in range(prompt + 1, prompt + new)]
    assert e.decode_bytes_sum == pytest.approx(sum(s.bytes for s in steps), rel=1e-9)
    assert e.decode_flops_sum == pytest.approx(sum(s.flops for s in steps), rel=1e-9)
    assert e.decode_time_sum == pytest.approx(sum(s.time for s in steps), rel=1e-9)


@pytest.mark.parametrize("name", ["gemma-3-27b", "gpt-oss-120b"])
def test_crossover_and_fit_follow_the_layer_pattern(name):
    from course_lib.core.estimator import crossover_context, kv_cache_bytes, tokens_that_fit
    from course_lib.core.hardware import get_hardware

    m = get_model(name)
    c = crossover_context(m, batch=8)
    assert c > m.local_window
    w = m.weight_bytes("fp16")
    assert kv_cache_bytes(m, math.floor(c), batch=8) <= w < kv_cache_bytes(m, math.ceil(c), batch=8)
    hw = get_hardware("h200")
    n = tokens_that_fit(m, hw, batch=1, precision="fp8")
    free = hw.capacity - m.weight_bytes("fp8")
    assert n > m.local_window and kv_cache_bytes(m, n) <= free < kv_cache_bytes(m, n + 1)


def test_unlisted_models_are_in_the_catalog_but_not_in_the_lessons_lists():
    from course_lib import list_models
    every = list_models(every=True)
    assert set(list_models()) < set(every) and "qwen3-14b" in every and "qwen3-14b" not in list_models()
    assert [n for n in every if n in list_models()] == list_models()      # the lessons' order is kept
    assert get_model("qwen3-14b").params == 14_768_307_200
    with pytest.raises(TypeError, match="every"):
        list_models(every="yes")
