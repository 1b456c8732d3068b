"""Models added for 2026 learners: counts to the parameter against their config.json, MoE active vs total,
and the engine configurations shared with course_lib/data/engine_configs.json."""
import pytest

from course_lib import get_model, list_models
from course_lib.core.data import load_catalog
from course_lib.core.models import ModelSpec, catalog_entry

# the count of the transformers model built from each config.json (meta device), stored as published_params
ADDED = {"llama-3.1-8b": 8_030_261_248, "llama-3.1-70b": 70_553_706_496, "llama-3.1-405b": 405_853_388_800,
         "llama-3.2-1b": 1_235_814_400, "llama-3.2-3b": 3_212_749_824, "qwen2.5-0.5b": 494_032_768,
         "qwen2.5-1.5b": 1_543_714_304, "qwen2.5-3b": 3_085_938_688, "qwen2.5-14b": 14_770_033_664,
         "qwen2.5-32b": 32_763_876_352, "qwen2.5-72b": 72_706_203_648, "qwen3-8b": 8_190_735_360,
         "qwen3-32b": 32_762_123_264, "qwen3-30b-a3b": 30_532_122_624, "mixtral-8x7b": 46_702_792_704}
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


def test_unrepresentable_models_are_listed_as_missing():
    about = load_catalog("models")["_about"]
    assert "Gemma" in about and "gpt-oss" in about
    assert not [n for n in list_models() if n.startswith(("gemma", "gpt-oss"))]
