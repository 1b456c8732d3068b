"""TinyLM K/V reuse: prefix states, sessions, the block prefix cache, modular prompt caching, chunked attention."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from course_lib.core.models import get_model  # noqa: E402
from course_lib.core.prefix_cache import PrefixCache  # noqa: E402
from course_lib.measure.tinylm import DEFAULT_ATTENTION_SCORE_BYTES, KVState, TinyLM, logit_agreement  # noqa: E402

VOCAB = 256
TINY = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=VOCAB)
SPECS = {
    "gqa": ("llama-3-8b", {}),                                   # 4 query heads share 2 K/V heads
    "window": ("mistral-7b", {"sliding_window": 5}),             # window shorter than the prompts
    "qknorm-tied": ("qwen3-0.6b", {"kv_heads": 1}),              # MQA, per-head Q/K norms, tied head
}
ATOL, RTOL = 1e-5, 1e-4


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _spec(name="gqa", **extra):
    base, more = SPECS[name]
    return get_model(base).scaled(**{**TINY, **more, **extra})


def _lm(name="gqa", seed=3, max_seq=64, **kw):
    return TinyLM(_spec(name), seed=seed, max_seq=max_seq, device="cpu", **kw)


def _tokens(n, seed=0):
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def _close(a, b):
    return a.shape == b.shape and torch.allclose(a, b, atol=ATOL, rtol=RTOL)


# ---- prefix states -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SPECS))
def test_prefix_reuse_is_exact(name):
    lm = _lm(name)
    toks = _tokens(20)
    full = lm.forward(toks)
    lm.prefill(toks[:8])
    state = lm.save_state()
    assert isinstance(state, KVState) and state.length == 8 and state.start == 0
    assert torch.equal(state.tokens, toks[:8]) and state.tokens.dtype == torch.int64
    assert state.nbytes == 8 * lm.kv_cache_bytes_per_token() == 8 * _spec(name).kv_bytes_per_token("fp32")
    new = lm.prefill(toks, prefix=state)
    assert _close(new, full[8:]) and lm.length == 20
    # decoding after a prefix prefill continues exactly as after a full prefill
    nxt = lm.decode_step(torch.tensor(9))
    ref = lm.forward(torch.cat([toks, torch.tensor([9])]))[-1]
    assert _close(nxt, ref)
    # identical greedy generations
    assert torch.equal(lm.generate(toks, 6, prefix=state), lm.generate(toks, 6))
    # a shorter saved prefix works too
    lm.prefill(toks[:12])
    five = lm.save_state(5)
    assert five.length == 5 and _close(lm.prefill(toks[:15], prefix=five), full[5:15])


def test_one_state_serves_two_requests_unchanged():
    lm = _lm()
    system = _tokens(10, seed=1)
    lm.prefill(system)
    state = lm.save_state()
    k0, v0, t0 = state.k.clone(), state.v.clone(), state.tokens.clone()
    assert state.k.data_ptr() != lm.kv.data_ptr()
    a = torch.cat([system, _tokens(5, seed=2)])
    b = torch.cat([system, _tokens(7, seed=3)])
    la = lm.prefill(a, prefix=state)
    lb = lm.prefill(b, prefix=state)
    lm.decode_step(torch.tensor(1))
    lm.kv.zero_()                                   # even wiping the model's cache leaves the state alone
    assert torch.equal(state.k, k0) and torch.equal(state.v, v0) and torch.equal(state.tokens, t0)
    assert _close(la, lm.forward(a)[10:]) and _close(lb, lm.forward(b)[10:])


def test_batched_prefill_shares_one_prefix():
    lm = TinyLM(_spec(), seed=3, max_seq=32, device="cpu", batch=2)
    system = _tokens(6, seed=4)
    lm.prefill(system)
    state = lm.save_state()
    rows = torch.stack([torch.cat([system, _tokens(4, seed=s)]) for s in (5, 6)])
    new = lm.prefill(rows, prefix=state)
    assert new.shape == (2, 4, VOCAB) and _close(new, lm.forward(rows)[:, 6:])


def test_kv_state_is_validated_and_sliceable():
    lm = _lm()
    lm.prefill(_tokens(9))
    s = lm.save_state()
    part = s.slice(2, 6)
    assert (part.start, part.length, part.end) == (2, 4, 6)
    assert torch.equal(part.k, s.k[:, :, 2:6]) and torch.equal(part.tokens, s.tokens[2:6])
    assert "length=9" in repr(s)
    with pytest.raises(ValueError, match="slice"):
        s.slice(5, 3)
    with pytest.raises(ValueError, match="k must be shaped"):
        KVState(torch.tensor([1, 2]), 0, torch.zeros(2, 2, 3, 16), torch.zeros(2, 2, 3, 16))
    with pytest.raises(ValueError, match="same shape"):
        KVState(torch.tensor([1, 2]), 0, torch.zeros(2, 2, 2, 16), torch.zeros(2, 2, 2, 8))
    with pytest.raises(TypeError, match="integer token ids"):
        KVState(torch.tensor([1.0]), 0, torch.zeros(2, 2, 1, 16), torch.zeros(2, 2, 1, 16))
    with pytest.raises(ValueError, match="start"):
        KVState(torch.tensor([1]), -1, torch.zeros(2, 2, 1, 16), torch.zeros(2, 2, 1, 16))
    with pytest.raises(ValueError, match="length"):
        lm.save_state(10)
    lm.reset()
    with pytest.raises(ValueError, match="prefill"):
        lm.save_state()


def test_prefix_mismatch_and_bad_prefixes_raise_clear_errors():
    lm = _lm()
    toks = _tokens(12)
    lm.prefill(toks[:6])
    state = lm.save_state()
    other = toks.clone()
    other[3] = (other[3] + 1) % VOCAB
    with pytest.raises(ValueError, match="prefix does not match tokens: position 3"):
        lm.prefill(other, prefix=state)
    with pytest.raises(ValueError, match="at least one token"):
        lm.prefill(toks[:6], prefix=state)
    with pytest.raises(TypeError, match="prefix must be a KVState"):
        lm.prefill(toks, prefix=state.k)
    with pytest.raises(ValueError, match="prefix does not fit"):
        TinyLM(_spec(kv_heads=1), max_seq=64, device="cpu").prefill(toks, prefix=state)
    with pytest.raises(ValueError, match="prefix does not fit"):
        TinyLM(_spec(), dtype="bf16", max_seq=64, device="cpu").prefill(toks, prefix=state)


# ---- sessions ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gqa", "window"])
def test_session_extend_is_exact(name):
    lm = _lm(name)
    turn1, turn2 = _tokens(9, seed=7), _tokens(6, seed=8)
    lm.prefill(turn1)
    reply = lm.generate(turn1, 4)                       # the model's greedy reply (ends with 3 decode steps)
    lm.prefill(turn1)
    for t in reply[:-1]:
        lm.decode_step(t)
    lm.extend(reply[-1:])                               # the last reply token still needs its K/V
    got = lm.extend(turn2)
    history = torch.cat([turn1, reply, turn2])
    assert lm.length == history.numel() and lm.next_position == history.numel()
    assert _close(got, lm.forward(history)[-6:])
    # greedy continuation after the extend equals the full-recomputation generation
    lm.prefill(torch.cat([turn1, reply]))
    cont = [lm.extend(turn2)[-1].argmax()]
    for _ in range(3):
        cont.append(lm.decode_step(cont[-1]).argmax())
    assert torch.equal(torch.stack(cont), lm.generate(history, 4))


def test_extend_checks_its_input():
    lm = _lm()
    assert _close(lm.extend(_tokens(4)), lm.forward(_tokens(4)))   # on an empty cache: a prefill
    with pytest.raises(ValueError, match="sequences"):
        lm.extend(torch.stack([_tokens(2), _tokens(2)]))
    with pytest.raises(ValueError, match="max_seq"):
        lm.extend(_tokens(61))


# ---- the block prefix cache -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gqa", "window"])
def test_prefill_cached_hits_partial_hits_and_stays_exact(name):
    lm = _lm(name)
    cache = lm.make_prefix_cache(math.inf, block_tokens=4)
    assert cache.bytes_per_token == lm.kv_cache_bytes_per_token()
    a = _tokens(18, seed=10)
    logits, hit = lm.prefill_cached(a, cache)
    full_a = lm.forward(a)
    assert hit == 0 and _close(logits, full_a) and len(cache) == 4
    logits, hit = lm.prefill_cached(a, cache)            # 4 whole blocks cached: 16 reused, 2 computed
    assert hit == 16 and _close(logits, full_a[16:])
    assert cache.lookup_tokens == 36 and cache.hit_tokens == 16
    b = torch.cat([a[:8], _tokens(9, seed=11)])           # shares the first 2 blocks only
    logits, hit = lm.prefill_cached(b, cache)
    assert hit == 8 and _close(logits, lm.forward(b)[8:])
    exact = a[:16]                                        # all 4 blocks cached, but the last token is computed
    logits, hit = lm.prefill_cached(exact, cache)
    assert hit == 12 and _close(logits, full_a[12:16])
    # decoding continues from the cached prefill
    lm.prefill_cached(a, cache)
    assert _close(lm.decode_step(torch.tensor(5)), lm.forward(torch.cat([a, torch.tensor([5])]))[-1])
    cache.check_invariants()


def test_prefill_cached_under_a_small_budget_evicts_and_stays_exact():
    lm = _lm()
    block_bytes = 4 * lm.kv_cache_bytes_per_token()
    cache = lm.make_prefix_cache(4 * block_bytes, block_tokens=4)   # room for two 9-token prompts (2 blocks each)
    a, b, c = (_tokens(9, seed=s) for s in (20, 21, 22))
    hits = []
    for p in (a, b, a, c, a, b):
        logits, hit = lm.prefill_cached(p, cache)
        hits.append(hit)
        assert _close(logits, lm.forward(p)[hit:])
        assert cache.bytes_used <= 4 * block_bytes
        cache.check_invariants()
    # c evicts b (least recently used, a was just reused); b then evicts c
    assert hits == [0, 0, 8, 0, 8, 0]
    assert cache.evictions == 4


def test_prefill_cached_never_uses_another_prefixs_kv():
    lm = _lm()
    cache = PrefixCache(4, math.inf, lm.kv_cache_bytes_per_token(), hash_fn=lambda parent, block: 7)
    a = _tokens(12, seed=30)
    b = torch.cat([_tokens(4, seed=31), a[4:]])           # same blocks 1, 2 after a different first block
    for p in (a, b, a, b):
        logits, hit = lm.prefill_cached(p, cache)
        assert _close(logits, lm.forward(p)[hit:])
    assert cache.collisions > 0
    # a different model (another seed) never sees these blocks
    other = _lm(seed=4)
    shared = other.make_prefix_cache(math.inf, block_tokens=4)
    lm.prefill_cached(a, shared)
    logits, hit = other.prefill_cached(a, shared)
    assert hit == 0 and _close(logits, other.forward(a))
    twin = _lm(seed=3)                                     # same spec, seed and dtype: same K/V, may share
    logits, hit = twin.prefill_cached(a, shared)
    assert hit == 8 and _close(logits, twin.forward(a)[8:])


def test_prefill_cached_bad_input():
    lm = _lm()
    with pytest.raises(TypeError, match="PrefixCache"):
        lm.prefill_cached(_tokens(4), {})
    cache = lm.make_prefix_cache(math.inf, block_tokens=4)
    with pytest.raises(ValueError, match="1-D"):
        lm.prefill_cached(torch.stack([_tokens(4), _tokens(4)]), cache)
    foreign = lm.make_prefix_cache(math.inf, block_tokens=4)
    nine = _tokens(9)
    foreign.insert(nine[:8].tolist(), payloads=["not K/V", "either"], namespace=lm.cache_namespace)
    with pytest.raises(ValueError, match="cache: block 0"):
        lm.prefill_cached(nine, foreign)


# ---- modular prompt cache -------------------------------------------------------------------------------------------
def test_modular_reuse_is_exact_only_for_a_module_at_the_start():
    lm = _lm()
    system, doc, user = _tokens(8, seed=40), _tokens(6, seed=41), _tokens(5, seed=42)
    m1 = lm.encode_module(system, start=0)
    assert (m1.start, m1.length) == (0, 8)
    approx1 = lm.prefill_modules([m1], user)
    ref1 = lm.forward(torch.cat([system, user]))[8:]
    assert _close(approx1, ref1)
    exact = logit_agreement(ref1, approx1)
    assert exact["top1_agreement"] == 1.0 and exact["kl_mean"] < 1e-9 and exact["positions"] == 5
    # a second module at its true positions, but encoded without attending to the first
    m2 = lm.encode_module(doc, start=8)
    assert (m2.start, m2.end) == (8, 14)
    approx2 = lm.prefill_modules([m1, m2], user)
    ref2 = lm.forward(torch.cat([system, doc, user]))[14:]
    assert not torch.allclose(approx2, ref2, atol=1e-6, rtol=0)
    rep = logit_agreement(ref2, approx2)
    assert rep["kl_mean"] > 0 and rep["kl_max"] >= rep["kl_mean"] and rep["max_abs_diff"] > 1e-6
    assert 0.0 <= rep["top1_agreement"] <= 1.0
    # the second module's own K/V differ from those of the full prefill at the same positions
    lm.prefill(torch.cat([system, doc]))
    assert not torch.allclose(lm.save_state().slice(8).k, m2.k, atol=1e-6, rtol=0)
    assert torch.allclose(lm.save_state().slice(0, 8).k, m1.k, atol=ATOL, rtol=RTOL)


def test_modules_positions_continue_after_the_last_module():
    lm = _lm()
    a, user = _tokens(4, seed=50), _tokens(3, seed=51)
    m = lm.encode_module(a, start=10)                       # encoded at positions 10..13
    assert m.start == 10 and lm.next_position == 14
    lm.prefill_modules([m], user)
    assert lm.length == 7 and lm.next_position == 17
    # a state saved from slots at consecutive positions keeps its start
    assert lm.save_state().start == 10
    # two modules with a gap in positions cannot be saved as one state
    gap = lm.encode_module(a, start=30)
    lm.prefill_modules([m, gap], user)
    with pytest.raises(ValueError, match="consecutive positions"):
        lm.save_state()
    assert lm.save_state(4).start == 10
    with pytest.raises(TypeError, match="modules"):
        lm.prefill_modules(m, user)
    with pytest.raises(TypeError, match=r"modules\[1\]"):
        lm.prefill_modules([m, "x"], user)
    with pytest.raises(ValueError, match="start"):
        lm.encode_module(a, start=62)


def test_logit_agreement_definition_and_errors():
    ref = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    app = torch.tensor([[2.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    r = logit_agreement(ref, app)
    assert r["top1_agreement"] == 0.5 and r["max_abs_diff"] == 1.0 and r["positions"] == 2
    p = torch.softmax(ref[1].double(), -1)
    q = torch.softmax(app[1].double(), -1)
    assert r["kl_mean"] == pytest.approx(float((p * (p / q).log()).sum()) / 2, rel=1e-12)
    same = logit_agreement(ref, ref)
    assert same["kl_mean"] == 0.0 and same["top1_agreement"] == 1.0 and same["max_abs_diff"] == 0.0
    with pytest.raises(ValueError, match="approx_logits must have the shape"):
        logit_agreement(ref, app[:1])
    with pytest.raises(TypeError, match="reference_logits"):
        logit_agreement(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="finite"):
        logit_agreement(ref, torch.full((2, 3), float("nan")))


# ---- attention: grouped, chunked ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SPECS))
def test_chunked_attention_equals_unchunked(name, monkeypatch):
    big = _lm(name)
    small = _lm(name, attention_score_bytes=2 * 4 * 4 * 30)     # 30 rows x keys per chunk
    toks = _tokens(24, seed=60)
    seen = []
    real_softmax = torch.softmax

    def spy(x, dim):
        seen.append(x.numel())
        return real_softmax(x, dim)

    monkeypatch.setattr(torch, "softmax", spy)
    chunked = small.forward(toks)
    assert len(seen) > 2 * small.spec.layers                       # several chunks per layer
    # every chunk within budget: 4 query heads x rows x keys <= 4 x 30 scores
    assert max(seen) <= 4 * 30
    seen.clear()
    whole = big.forward(toks)
    assert len(seen) == big.spec.layers                            # one chunk per layer
    assert _close(chunked, whole)
    small.prefill(toks[:10])
    steps = torch.stack([small.decode_step(t) for t in toks[10:]])
    assert _close(steps, whole[10:])


def test_a_4096_token_prefill_of_a_32_head_model_keeps_scores_under_256_mib():
    assert DEFAULT_ATTENTION_SCORE_BYTES == 256 * 2**20
    for window in (None, 512):
        spec = get_model("llama-3-8b").scaled(**{**TINY, "heads": 32, "kv_heads": 8, "head_dim": 2},
                                              sliding_window=window)
        lm = TinyLM(spec, max_seq=4096, device="cpu")
        q0, chunks = 0, 0
        while q0 < 4096:
            rows = lm.attention_chunk_rows(1, 0, 4096 - q0, q0)
            keys = q0 + rows - (0 if window is None else max(0, q0 - window + 1))
            assert 2 * 4 * spec.heads * rows * keys <= 256 * 2**20      # fp32 scores + probabilities
            q0, chunks = q0 + rows, chunks + 1
        assert chunks > 1
        if window is None:   # full causal attention: the last chunk attends to everything
            assert 2 * 4 * spec.heads * 4096 * 4096 > 256 * 2**20


def test_attention_never_repeats_kv_heads(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("repeat_interleave copies K/V")

    monkeypatch.setattr(torch.Tensor, "repeat_interleave", boom)
    monkeypatch.setattr(torch, "repeat_interleave", boom)
    lm = _lm()
    toks = _tokens(10, seed=70)
    full = lm.forward(toks)
    lm.prefill(toks[:6])
    steps = torch.stack([lm.decode_step(t) for t in toks[6:]])
    assert _close(steps, full[6:])
