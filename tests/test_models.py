"""Catalog models reproduce their published parameter counts; structural accounting is exact."""
import json

import pytest

from course_lib import get_model, list_models
from course_lib.core.models import ModelSpec, catalog_entry

REQUIRED = ["gpt2-small", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b",
            "qwen2.5-7b", "qwen3-0.6b", "deepseek-v3", "source-7b"]


def test_catalog_has_required_models_with_sources():
    assert set(REQUIRED) <= set(list_models())
    for name in list_models():
        e = catalog_entry(name)
        assert e["source"].strip(), name
        assert get_model(name).source == e["source"]


@pytest.mark.parametrize("name", [n for n in REQUIRED if n != "deepseek-v3"])
def test_dense_models_match_published_counts_exactly(name):
    assert get_model(name).params == catalog_entry(name)["published_params"]


def test_deepseek_v3_within_one_percent_with_definition():
    m, e = get_model("deepseek-v3"), catalog_entry("deepseek-v3")
    assert m.params == 671_026_419_200  # main model, MTP module excluded (see params_definition)
    assert abs(m.params / e["published_params"] - 1) < e["params_tolerance"] == 0.01
    assert abs(m.active_params / e["published_active_params"] - 1) < 0.02
    assert "excluded" in e["params_definition"]
    assert m.attention_kind == "MLA" and m.is_moe


def test_gpt2_small_by_hand():
    m = get_model("gpt2-small")
    per_layer = 2 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + 2 * 768 + (768 * 3072 + 3072) + (3072 * 768 + 768)
    assert m.params == 50257 * 768 + 1024 * 768 + 12 * per_layer + 2 * 768
    assert m.lm_head_params == 0 and m.tied_embeddings


def test_kv_values_source_example_and_attention_kinds():
    assert get_model("mistral-7b").kv_values_per_token == 2 * 32 * 8 * 128 == 65_536
    assert get_model("mistral-7b").kv_bytes_per_token("fp16") == 128 * 1024
    assert get_model("llama-2-7b").kv_bytes_per_token("fp16") == 4 * 128 * 1024
    assert get_model("llama-2-7b").attention_kind == "MHA"
    assert get_model("llama-3-8b").attention_kind == "GQA"
    assert get_model("deepseek-v3").kv_values_per_token == 61 * 576
    assert get_model("qwen3-0.6b").head_dim * get_model("qwen3-0.6b").heads != get_model("qwen3-0.6b").hidden
    mqa = get_model("llama-2-7b").scaled(kv_heads=1)
    assert mqa.attention_kind == "MQA"


def test_decode_streams_lm_head_in_full_but_one_embedding_row():
    m = get_model("llama-2-7b")
    assert m.streamed_params(1) == m.block_params + m.vocab * m.hidden + m.hidden
    tied = get_model("qwen3-0.6b")  # tied: the shared matrix is still read in full as the lm_head
    assert tied.streamed_params(1) == tied.block_params + tied.vocab * tied.hidden + tied.hidden
    assert tied.streamed_params(1) > tied.params - tied.embedding_params


def test_moe_expected_experts_grows_with_batch_and_saturates():
    m = get_model("deepseek-v3")
    one = m.experts_touched(1)
    assert one == pytest.approx(8)
    assert m.experts_touched(64) < 256
    assert m.experts_touched(10_000) == pytest.approx(256)
    assert m.streamed_params(1) < m.streamed_params(64) < m.params + m.vocab * m.hidden


def test_from_hf_config_dict_and_path(tmp_path):
    cfg = catalog_entry("llama-3-8b")["config"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert ModelSpec.from_hf_config(p).params == ModelSpec.from_hf_config(cfg).params == 8_030_261_248


@pytest.mark.parametrize("bad, err", [
    ({"layers": 0}, "layers"), ({"heads": 7}, "kv_heads"), ({"mlp": "swiglu"}, "mlp"), ({"hidden": 1.5}, "hidden"),
    ({"layers": float("nan")}, "layers"),
])
def test_bad_specs_raise_clear_errors(bad, err):
    with pytest.raises((ValueError, TypeError), match=err):
        get_model("llama-3-8b").scaled(**bad)


def test_unknown_model_suggests():
    with pytest.raises(ValueError, match="mistral-7b"):
        get_model("mistral7b")
    with pytest.raises(TypeError, match="unknown ModelSpec field"):
        get_model("mistral-7b").scaled(layer=3)
    with pytest.raises(ValueError, match="missing required"):
        ModelSpec.from_hf_config({"hidden_size": 10})


@pytest.mark.parametrize("name", ["gpt2-small", "llama-3-8b", "deepseek-v3"])
@pytest.mark.parametrize("tokens", [1, 7, 100_000])
def test_streamed_param_parts_add_up_to_streamed_params(name, tokens):
    m = get_model(name)
    p = m.streamed_param_parts(tokens)
    assert p["blocks"] + p["lm_head"] + p["embedding"] == pytest.approx(m.streamed_params(tokens), rel=1e-15)
    assert p["lm_head"] == m.vocab * m.hidden                     # read whole, tied or not
    rows = min(tokens, m.vocab) * (2 if m.positional == "learned" else 1)
    assert p["embedding_rows"] == rows and p["embedding"] == rows * m.hidden
    with pytest.raises(ValueError, match="routed_tokens"):
        m.streamed_param_parts(0)


def test_moe_parts_split_the_routed_experts():
    ds = get_model("deepseek-v3")
    for tokens in (1, 512):
        p = ds.streamed_param_parts(tokens)
        assert p["dense_blocks"] + p["experts"] == pytest.approx(p["blocks"], rel=1e-15)
        assert p["experts"] == ds.moe_layers * ds.experts_touched(tokens) * ds.expert_params
    assert ds.active_expert_params == ds.moe_layers * ds.experts_per_token * ds.expert_params
    assert ds.streamed_param_parts(1)["dense_blocks"] + ds.active_expert_params == ds.active_block_params
    llama = get_model("llama-3-8b")
    assert llama.active_expert_params == 0 and llama.streamed_param_parts(5)["experts"] == 0


def _small(mt, **kw):
    return {"model_type": mt, "num_hidden_layers": 12, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 1000,
            "sliding_window": 32, **kw}


def test_from_hf_config_reads_the_layer_pattern():
    g2 = ModelSpec.from_hf_config(_small("gemma2"))                   # transformers' default: alternate
    assert (g2.local_layers, g2.local_window, g2.global_layers) == (6, 32, 6) and g2.sliding_window is None
    g3 = ModelSpec.from_hf_config(_small("gemma3_text"))              # every 6th layer global
    assert (g3.local_layers, g3.global_layers) == (10, 2) and g3.qk_norm and g3.block_norms == 4
    untied = ModelSpec.from_hf_config(_small("gemma3_text", tie_word_embeddings=False))
    assert g3.tied_embeddings and untied.lm_head_params == 1000 * 64
    kinds = ["sliding_attention"] * 9 + ["full_attention"] * 3
    oss = ModelSpec.from_hf_config(_small("gpt_oss", layer_types=kinds, num_local_experts=4, num_experts_per_tok=2))
    assert (oss.local_layers, oss.global_layers) == (9, 3) and oss.attention_sinks and oss.router_bias
    every = ModelSpec.from_hf_config(_small("gpt_oss", layer_types=["sliding_attention"] * 12))
    assert every.sliding_window == 32 and every.local_window is None   # every layer slides: one window for all
    none = ModelSpec.from_hf_config(_small("gpt_oss", layer_types=["full_attention"] * 12))
    assert none.sliding_window is None and none.local_window is None
    with pytest.raises(ValueError, match="layer_types"):
        ModelSpec.from_hf_config(_small("gpt_oss", layer_types=["full_attention"] * 3))


def test_interleaved_layers_change_only_the_kv_and_the_counted_extras():
    base = ModelSpec("m", layers=6, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=1000)
    mixed = base.scaled(local_window=10, local_layers=5)
    assert mixed.params == base.params and mixed.kv_values_per_token == base.kv_values_per_token
    assert [mixed.attended_tokens(c) for c in (1, 10, 16)] == [1, 10, 11]     # (1 x 16 + 5 x 10) / 6 = 11
    assert mixed.attended_tokens(11) == pytest.approx((11 + 5 * 10) / 6)
    assert base.scaled(block_norms=4).params - base.params == 6 * 2 * 64
    assert base.scaled(attention_sinks=True).params - base.params == 6 * 4
    for bad, match in (({"local_window": 10}, "go together"), ({"local_layers": 2}, "go together"),
                       ({"local_window": 10, "local_layers": 6}, "must be < layers"),
                       ({"local_window": 0, "local_layers": 2}, "local_window"), ({"block_norms": 0}, "block_norms")):
        with pytest.raises(ValueError, match=match):
            base.scaled(**bad)
