"""PrefixCache: block-hash prefix caching with verified lookups and leaves-first LRU eviction."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.core.numeric import raw
from course_lib.core.prefix_cache import PrefixCache, PrefixHit, SimulationResult, simulate


def _cache(**kw):
    kw = {"block_tokens": 4, "capacity_bytes": math.inf, "bytes_per_token": 2.0, **kw}
    return PrefixCache(**kw)


def _prefix_payloads(tokens, bt):
    """Payload of block i = the whole prefix it stands for (so a test can see which prefix came back)."""
    return [tuple(tokens[:(i + 1) * bt]) for i in range(len(tokens) // bt)]


def test_only_whole_blocks_are_cached_and_reused():
    c = PrefixCache(block_tokens=16, capacity_bytes=math.inf, bytes_per_token=1)
    prompt = list(range(1000))
    assert c.lookup(prompt) == PrefixHit(tokens=0, payloads=[], blocks=0)
    assert c.insert(prompt) == 62
    assert len(c) == 62 and c.bytes_used == 62 * 16
    hit = c.lookup(prompt)
    assert hit.tokens == raw.block_aligned_tokens(1000, 16) == 992 and hit.blocks == 62
    # a longer prompt with the same start reuses the same 992 tokens; a shorter one its whole blocks
    assert c.lookup(prompt + [5, 6, 7]).tokens == 992
    assert c.lookup(prompt[:40]).tokens == 32
    assert c.hits == 3 and c.misses == 1
    assert c.lookup_tokens == 1000 + 1000 + 1003 + 40
    assert c.hit_tokens == 992 + 992 + 32
    assert c.hit_rate == pytest.approx(c.hit_tokens / c.lookup_tokens)


def test_payloads_come_back_in_order_and_partial_hits_stop_at_the_first_difference():
    c = _cache()
    a = list(range(12))                       # 3 blocks
    c.insert(a, payloads=["a0", "a1", "a2"])
    b = a[:4] + [99] + a[5:] + [50, 51, 52, 53]  # shares only block 0
    hit = c.lookup(b)
    assert (hit.tokens, hit.payloads, hit.blocks) == (4, ["a0"], 1)
    # inserting b stores its own blocks 1..3 (block 0 already there keeps its payload)
    calls = []
    assert c.insert(b, payloads=lambda i, s, e: calls.append((i, s, e)) or f"b{i}") == 3
    assert calls == [(1, 4, 8), (2, 8, 12), (3, 12, 16)]
    assert c.lookup(b).payloads == ["a0", "b1", "b2", "b3"]
    assert c.lookup(a).payloads == ["a0", "a1", "a2"]
    # the same block contents after a different prefix are a different block
    shifted = [7, 7, 7, 7] + a[4:8]
    assert c.lookup(shifted).tokens == 0


def test_max_tokens_leaves_tokens_to_compute():
    c = _cache()
    toks = list(range(8))
    c.insert(toks)
    assert c.lookup(toks).tokens == 8
    assert c.lookup(toks, max_tokens=7).tokens == 4
    assert c.lookup(toks, max_tokens=0).tokens == 0
    assert c.lookup_tokens == 24


def test_hash_collision_is_a_miss_never_another_prefixs_payload():
    c = _cache(hash_fn=lambda parent, block: 0)   # every block has the same key
    a, b = [1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 9, 9, 5, 6, 7, 8]
    assert c.insert(a, payloads=["a0", "a1"]) == 1  # block 1's key is taken by block 0
    assert c.lookup(a).payloads == ["a0"]
    hit = c.lookup(b)
    assert hit.tokens == 0 and hit.payloads == [] and c.collisions >= 1
    assert c.insert(b, payloads=["b0", "b1"]) == 0   # its key belongs to a's block: stores nothing
    assert c.lookup(b).tokens == 0 and c.lookup(a).payloads == ["a0"]
    c.check_invariants()


def test_colliding_hash_between_depths_is_caught_by_the_parent_check():
    # keys ignore the parent: block [5,6,7,8] after [1,2,3,4] has the key of [5,6,7,8] at the start
    c = _cache(hash_fn=lambda parent, block: block)
    c.insert([5, 6, 7, 8], payloads=["first"])
    assert c.lookup([1, 2, 3, 4, 5, 6, 7, 8]).tokens == 0
    assert c.insert([1, 2, 3, 4, 5, 6, 7, 8], payloads=["x", "second"]) == 1
    hit = c.lookup([1, 2, 3, 4, 5, 6, 7, 8])
    assert hit.payloads == ["x"]                   # not "first": that block stands for another prefix
    assert c.lookup([5, 6, 7, 8]).payloads == ["first"]


def test_namespaces_never_share_blocks():
    c = _cache()
    c.insert([1, 2, 3, 4], payloads=["model-a"], namespace="a")
    assert c.lookup([1, 2, 3, 4], namespace="b").tokens == 0
    assert c.lookup([1, 2, 3, 4]).tokens == 0
    assert c.lookup([1, 2, 3, 4], namespace="a").payloads == ["model-a"]


def test_lru_eviction_by_bytes_evicts_leaves_first():
    c = _cache(capacity_bytes=3 * 4 * 2.0)         # room for 3 blocks of 4 tokens x 2 B
    a = list(range(8))                              # blocks a0, a1
    b = list(range(100, 104))                       # block b0
    c.insert(a)
    c.insert(b)
    assert len(c) == 3 and c.bytes_used == 24
    c.lookup(a)                                     # a is now more recent than b
    c.insert(list(range(200, 204)))                 # needs room: b0 (LRU) goes
    assert c.evictions == 1 and c.peek(b) == 0 and c.peek(a) == 8
    c.insert(list(range(300, 304)))                 # a's leaf a1 goes before its parent a0
    assert c.evictions == 2 and c.peek(a) == 4
    c.check_invariants()


def test_insert_never_evicts_its_own_prefix_and_oversized_blocks_are_not_cached():
    c = _cache(capacity_bytes=2 * 8.0)              # 2 blocks
    assert c.insert(list(range(12))) == 2           # the third block would need its own parent's room
    assert c.peek(list(range(12))) == 8 and c.evictions == 0
    tiny = _cache(capacity_bytes=7.9)                # a block costs 8 B
    assert tiny.insert(list(range(8))) == 0 and len(tiny) == 0 and tiny.lookup(range(8)).tokens == 0
    none = _cache(capacity_bytes=0)
    assert none.insert(list(range(8))) == 0


def test_clear_and_reset_stats():
    c = _cache()
    c.insert(range(8))
    c.lookup(range(8))
    c.reset_stats()
    assert (c.hits, c.lookup_tokens, len(c)) == (0, 0, 2)
    c.clear()
    assert len(c) == 0 and c.bytes_used == 0 and c.hit_rate == 0.0


def test_inputs_accept_arrays_and_bad_input_gets_one_clear_error():
    np = pytest.importorskip("numpy")
    c = _cache()
    c.insert(np.arange(8))
    assert c.lookup((0, 1, 2, 3, 4, 5, 6, 7)).tokens == 8
    with pytest.raises(ValueError, match="block_tokens"):
        PrefixCache(block_tokens=0, capacity_bytes=1, bytes_per_token=1)
    with pytest.raises(TypeError, match="capacity_bytes"):
        PrefixCache(16, bytes_per_token=1)
    with pytest.raises(ValueError, match="capacity_bytes"):
        PrefixCache(16, capacity_bytes=-1, bytes_per_token=1)
    with pytest.raises(ValueError, match="bytes_per_token"):
        PrefixCache(16, capacity_bytes=1, bytes_per_token=0)
    with pytest.raises(TypeError, match="hash_fn"):
        _cache(hash_fn=3)
    with pytest.raises(TypeError, match="tokens"):
        c.lookup("abc")
    with pytest.raises(TypeError, match="tokens"):
        c.lookup([1.5, 2])
    with pytest.raises(ValueError, match="tokens"):
        c.lookup([-1])
    with pytest.raises(ValueError, match="1-D"):
        c.lookup(np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="payloads"):
        c.insert(range(8), payloads=["only one"])
    with pytest.raises(TypeError, match="payloads"):
        c.insert(range(8), payloads=5)
    with pytest.raises(ValueError, match="max_tokens"):
        c.lookup(range(8), max_tokens=-1)
    with pytest.raises(TypeError, match="namespace"):
        c.lookup(range(8), namespace=["unhashable"])
    with pytest.raises(TypeError, match="requests"):
        simulate("abc", 4, 10, 1)
    with pytest.raises(ValueError, match="at least one"):
        simulate([], 4, 10, 1)
    with pytest.raises(TypeError, match=r"requests\[1\]"):
        simulate([[1, 2], "x"], 4, 10, 1)


def test_simulate_counts_shared_prefixes_and_budget_matters():
    system = list(range(64))
    requests = [system + [1000 + 10 * i + j for j in range(10)] for i in range(5)]
    big = simulate(requests, block_tokens=16, capacity_bytes=math.inf, bytes_per_token=1)
    assert isinstance(big, SimulationResult)
    # the first request misses; every later one reuses the 64-token system prompt
    assert big.per_request_hit_tokens == (0, 64, 64, 64, 64)
    assert big.hit_tokens == 256 and big.lookup_tokens == 5 * 74 and big.computed_tokens == 5 * 74 - 256
    assert big.hit_rate == pytest.approx(256 / 370) and big.hits == 4 and big.misses == 1
    assert big.request_hit_rate == pytest.approx(0.8)
    none = simulate(requests, 16, 0, 1)
    assert none.hit_tokens == 0 and none.hit_rate == 0.0 and none.bytes_used == 0
    # a budget of 2 blocks keeps only part of the system prompt
    small = simulate(requests, 16, 2 * 16, 1)
    assert small.hit_tokens == 4 * 32 and small.bytes_used <= 32
    # a server that always recomputes the last token reuses 48 of 64 for a 64-token prompt
    exact = simulate([system, system], 16, math.inf, 1, min_new_tokens=1)
    assert exact.per_request_hit_tokens == (0, 48)


# ---- property test -------------------------------------------------------------------------------------------------
_ops = st.lists(
    st.tuples(st.sampled_from(["lookup", "insert", "both"]),
              st.lists(st.integers(0, 3), min_size=0, max_size=14)),
    min_size=1, max_size=25)


@given(ops=_ops, block_tokens=st.integers(1, 4), capacity_blocks=st.integers(0, 6),
       bytes_per_token=st.sampled_from([1.0, 0.5, 3.25]), hash_mod=st.sampled_from([None, 1, 3]))
def test_prefix_cache_properties(ops, block_tokens, capacity_blocks, bytes_per_token, hash_mod):
    hash_fn = None if hash_mod is None else (lambda parent, block: hash((parent, block)) % hash_mod)
    capacity = capacity_blocks * block_tokens * bytes_per_token
    c = PrefixCache(block_tokens, capacity, bytes_per_token, hash_fn=hash_fn)
    for op, tokens in ops:
        if op in ("lookup", "both"):
            hit = c.lookup(tokens)
            assert hit.tokens % block_tokens == 0 and 0 <= hit.tokens <= len(tokens)
            assert hit.blocks * block_tokens == hit.tokens and len(hit.payloads) == hit.blocks
            # each payload was inserted for exactly this prefix
            assert hit.payloads == _prefix_payloads(tokens, block_tokens)[:hit.blocks]
        if op in ("insert", "both"):
            c.insert(tokens, payloads=_prefix_payloads(tokens, block_tokens))
        assert c.bytes_used <= capacity
        c.check_invariants()
        assert c.hit_tokens <= c.lookup_tokens
