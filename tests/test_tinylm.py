"""TinyLM: a real transformer whose byte counts match the course's formulas exactly."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from course_lib.core.models import get_model  # noqa: E402
from course_lib.measure.tinylm import TinyLM  # noqa: E402

TINY = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=101)


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _spec(base="llama-3-8b", **extra):
    return get_model(base).scaled(**{**TINY, **extra})


def _tokens(n, vocab=101, seed=0):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("base,extra", [
    ("llama-3-8b", {}),                                   # GQA, untied, SwiGLU
    ("qwen2.5-7b", {}),                                   # QKV biases
    ("qwen3-0.6b", {}),                                   # per-head Q/K norms, tied embeddings
    ("mistral-7b", {"sliding_window": 5}),                # sliding window shorter than the sequence
    ("llama-2-7b", {"kv_heads": 4}),                      # MHA
    ("llama-3-8b", {"kv_heads": 1, "mlp": "plain"}),      # MQA, plain MLP
])
def test_cached_decode_equals_full_recomputation(base, extra):
    spec = _spec(base, **extra)
    lm = TinyLM(spec, seed=3, max_seq=32, device="cpu")
    toks = _tokens(14)
    full = lm.forward(toks)
    lm.prefill(toks[:5])
    steps = torch.stack([lm.decode_step(t) for t in toks[5:]])
    assert torch.allclose(steps, full[5:], atol=1e-5, rtol=1e-4)
    assert lm.length == 14


@pytest.mark.parametrize("base", ["llama-3-8b", "qwen2.5-7b", "qwen3-0.6b", "mistral-7b"])
def test_parameter_count_equals_spec(base):
    spec = _spec(base)
    assert TinyLM(spec, device="cpu", max_seq=8).num_parameters() == spec.params


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("base,window", [("llama-3-8b", None), ("qwen3-0.6b", None), ("mistral-7b", 4)])
def test_decode_step_reads_exactly_the_predicted_bytes(base, window, precision):
    spec = _spec(base, sliding_window=window)
    lm = TinyLM(spec, dtype=precision, device="cpu", max_seq=16)
    lm.prefill(_tokens(3))
    for step in range(6):
        _, reads = lm.decode_step(torch.tensor(step), trace=True)
        assert reads.weight_bytes == spec.decode_weight_bytes(precision)
        context = 3 + step + 1
        assert reads.attended_tokens == spec.attended_tokens(context)
        assert reads.kv_bytes == spec.kv_bytes_per_token(precision) * spec.attended_tokens(context)
    # the embedding table is read one row at a time; the lm_head in full
    assert reads.weights["embed.weight[rows]"] == spec.hidden * lm.kv.element_size()
    head = "embed.weight (tied lm_head)" if spec.tied_embeddings else "lm_head.weight"
    assert reads.weights[head] == spec.vocab * spec.hidden * lm.kv.element_size()


def test_batched_decode_reads_one_embedding_row_per_sequence():
    spec = _spec()
    lm = TinyLM(spec, device="cpu", max_seq=8, batch=3)
    lm.prefill(torch.stack([_tokens(2, seed=s) for s in range(3)]))
    logits, reads = lm.decode_step(torch.tensor([1, 2, 3]), trace=True)
    assert logits.shape == (3, spec.vocab)
    assert reads.weight_bytes == spec.decode_weight_bytes("fp32", batch=3)
    assert reads.kv_bytes == 3 * 3 * spec.kv_bytes_per_token("fp32")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_kv_cache_bytes_per_token_equal_spec(precision):
    spec = _spec(kv_heads=1)
    lm = TinyLM(spec, dtype=precision, device="cpu", max_seq=10, batch=2)
    assert lm.kv_cache_bytes_per_token() == spec.kv_bytes_per_token(precision)
    assert lm.kv.numel() * lm.kv.element_size() == spec.kv_bytes_per_token(precision) * 10 * 2


def test_same_seed_same_weights_and_greedy_generation_is_deterministic():
    spec = _spec()
    a, b = TinyLM(spec, seed=7, device="cpu", max_seq=16), TinyLM(spec, seed=7, device="cpu", max_seq=16)
    c = TinyLM(spec, seed=8, device="cpu", max_seq=16)
    assert torch.equal(a.embed.weight, b.embed.weight) and not torch.equal(a.embed.weight, c.embed.weight)
    out = a.generate(_tokens(4), new_tokens=5)
    assert out.shape == (5,) and torch.equal(out, b.generate(_tokens(4), new_tokens=5))
    # greedy: each generated token is the argmax of the full recomputation at the previous position
    seq = torch.cat([_tokens(4), out])
    full = a.forward(seq)
    assert torch.equal(full[3:8].argmax(-1), out)


def test_bad_input_gets_one_clear_error():
    with pytest.raises(ValueError, match="layernorm"):
        TinyLM(get_model("gpt2-small"), device="cpu", max_seq=4)
    with pytest.raises(ValueError, match="mixture of experts|latent"):
        TinyLM(get_model("deepseek-v3"), device="cpu", max_seq=4)
    lm = TinyLM(_spec(), device="cpu", max_seq=4)
    with pytest.raises(ValueError, match="prefill"):
        lm.decode_step(torch.tensor(1))
    with pytest.raises(ValueError, match="ids in"):
        lm.prefill(torch.tensor([1, 500]))
    with pytest.raises(TypeError, match="integer token ids"):
        lm.prefill(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="max_seq"):
        lm.prefill(_tokens(5))
    with pytest.raises(ValueError, match="unknown dtype"):
        TinyLM(_spec(), dtype="fp13", device="cpu", max_seq=4)
    with pytest.raises(ValueError, match="new_tokens"):
        lm.generate(_tokens(2), new_tokens=0)
