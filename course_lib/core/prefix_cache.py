"""A block-hash prefix cache, as in vLLM's automatic prefix caching and SGLang's radix cache.

Lessons: 05, 06, 07, 08

No lesson imports it directly; lessons 05-09 reach it through ``course_lib.core.caching`` and
``course_lib.measure.tinylm``.

    from course_lib.core.prefix_cache import PrefixCache, simulate
    cache = PrefixCache(block_tokens=16, capacity_bytes=64e6, bytes_per_token=131072)
    hit = cache.lookup(prompt)          # hit.tokens leading tokens have cached K/V (a multiple of 16)
    cache.insert(prompt, payloads)      # store the prompt's whole blocks that are not cached yet
    cache.hit_rate                      # reused tokens / looked-up tokens so far
    simulate(requests, block_tokens=16, capacity_bytes=64e6, bytes_per_token=131072).hit_rate

Plain Python: no torch. The cache only stores *payloads* (whatever the caller hands it: K/V
tensors in :meth:`course_lib.measure.tinylm.TinyLM.prefill_cached`, or nothing at all in a simulation) and
charges every block ``block_tokens * bytes_per_token`` bytes, so hit rates can be simulated for a
real model's K/V size without holding any K/V.

How it works
------------
* A prompt is cut into whole blocks of ``block_tokens`` ids; the tail that does not fill a block is
  never cached, so a 1000-token prompt with 16-token blocks can reuse at most
  ``block_aligned_tokens(1000, 16) = 992`` tokens.
* Block ``i`` is keyed by ``hash_fn(key of block i-1, tuple of its ids)`` (block 0 by
  ``hash_fn(namespace key, ids)``). The key of a block therefore stands for the *whole prefix* up to
  its end: two prompts share block ``i`` only if they agree on every token before it. K/V depend
  on every earlier token, which is why the cache is keyed by prefix and not by block content alone.
* A hash is only a lookup aid. Every entry also stores its own ids and a reference to its parent
  entry, and :meth:`PrefixCache.lookup` checks both, block by block. By induction a matched block
  stands for exactly the looked-up prefix, so a hash collision is a miss, never somebody else's
  K/V. (An insert whose key is taken by a different prefix stores nothing from that block on.)
* ``namespace`` separates callers that must never share K/V (different models or weights); it
  enters the first block's key and is checked like the ids.
* Eviction is LRU by bytes, and it only ever removes *leaves*: blocks are touched leaf-to-root
  (a lookup or insert touches the deepest matched block first and the first block last), so a
  parent is always more recently used than each of its children, and the least recently used
  block never has a child. No cached block is ever unreachable, and the cache never spends bytes
  on blocks that no lookup can reach. (The alternative, evicting a block with all its descendants,
  would throw away reachable-looking work in one go; leaves-first is what SGLang's radix cache does.)
* A block larger than the whole capacity is simply not cached; an insert that would have to
  evict the blocks of its own prefix stops instead.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Sequence

from course_lib.core.numeric import raw
from course_lib.core.validation import require_count, require_list, require_nonnegative, require_positive

__all__ = ["PrefixCache", "PrefixHit", "SimulationResult", "simulate", "default_hash"]


def default_hash(parent_key: Hashable, block: tuple) -> int:
    """The key of a block: Python's hash of (parent key, the block's token ids).

    Fast and deterministic for integer ids within one process (int and tuple hashes are not
    randomised). ``parent_key`` is ``None`` (or the namespace key) for the first block.
    """
    try:
        return hash((parent_key, block))
    except TypeError:
        raise TypeError(f"parent_key and block must be hashable (a block is a tuple of token ids), got "
                        f"{type(parent_key).__name__} and {type(block).__name__}") from None


@dataclass(frozen=True)
class PrefixHit:
    """What :meth:`PrefixCache.lookup` found.

    ``tokens``: leading tokens served from the cache (a multiple of ``block_tokens``);
    ``payloads``: the matched blocks' payloads, first block first; ``blocks``: how many blocks matched.
    """

    tokens: int
    payloads: list
    blocks: int

    @property
    def hit(self) -> bool:
        return self.blocks > 0


@dataclass(frozen=True)
class SimulationResult:
    """Totals of :func:`simulate`: token hit rate and the cache's counters after the last request."""

    requests: int
    lookup_tokens: int
    hit_tokens: int
    hits: int
    misses: int
    evictions: int
    bytes_used: float
    capacity_bytes: float
    block_tokens: int
    per_request_hit_tokens: tuple = field(repr=False)

    @property
    def hit_rate(self) -> float:
        """Token hit rate: reused tokens / prompt tokens looked up (0 when nothing was looked up)."""
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens that still had to be prefilled."""
        return self.lookup_tokens - self.hit_tokens

    @property
    def request_hit_rate(self) -> float:
        """Fraction of requests that reused at least one block."""
        return self.hits / self.requests if self.requests else 0.0


class _Entry:
    __slots__ = ("key", "parent", "block", "namespace", "payload", "children")

    def __init__(self, key, parent, block, namespace, payload):
        self.key = key
        self.parent = parent          # the parent _Entry (None for a first block)
        self.block = block            # tuple of this block's token ids
        self.namespace = namespace
        self.payload = payload
        self.children = 0             # cached children (0 = a leaf)


def _token_tuple(name: str, tokens) -> tuple:
    """``tokens`` (list, tuple, range, numpy array or torch tensor of ids) as a tuple of ints."""
    if isinstance(tokens, (str, bytes)) or tokens is None:
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(tokens).__name__}")
    shape = getattr(tokens, "shape", None)
    if shape is not None and len(tuple(shape)) != 1:
        raise ValueError(f"{name} must be a 1-D sequence of token ids, got shape {tuple(shape)}")
    if hasattr(tokens, "tolist"):
        tokens = tokens.tolist()
    try:
        seq = tuple(tokens)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(tokens).__name__}") from None
    for t in seq:
        if isinstance(t, bool) or not isinstance(t, int):
            raise TypeError(f"{name} must contain integer token ids, got {type(t).__name__} {t!r}")
    if seq and min(seq) < 0:
        raise ValueError(f"{name} must be token ids >= 0, got {min(seq)}")
    return seq


def _namespace(namespace):
    try:
        hash(namespace)
    except TypeError:
        raise TypeError(f"namespace must be hashable (a str, a tuple, ...), got {type(namespace).__name__}") from None
    return namespace


class PrefixCache:
    """An LRU cache of K/V blocks keyed by block hashes of the token prefix (see module docstring).

    ``block_tokens``: tokens per block (vLLM's default is 16). ``capacity_bytes``: the byte budget
    (``math.inf`` for an unbounded cache, 0 for none). ``bytes_per_token``: what one token's K/V
    costs, e.g. ``spec.kv_bytes_per_token('fp16')``; a block costs ``block_tokens * bytes_per_token``.
    ``hash_fn(parent_key, block_ids_tuple) -> hashable``: the block key (default :func:`default_hash`;
    tests inject a colliding one).
    """

    def __init__(self, block_tokens: int = 16, capacity_bytes: float | None = None,
                 bytes_per_token: float | None = None, *,
                 hash_fn: Callable[[Hashable, tuple], Hashable] | None = None):
        self.block_tokens = require_count("block_tokens", block_tokens, minimum=1)
        if capacity_bytes is None:
            raise TypeError("capacity_bytes is required: the cache's byte budget (math.inf for unbounded)")
        if bytes_per_token is None:
            raise TypeError("bytes_per_token is required: the K/V bytes of one token, e.g. "
                            "spec.kv_bytes_per_token('fp16')")
        if isinstance(capacity_bytes, float) and capacity_bytes == math.inf:
            self.capacity_bytes = math.inf
        else:
            self.capacity_bytes = require_nonnegative("capacity_bytes", capacity_bytes)
        self.bytes_per_token = require_positive("bytes_per_token", bytes_per_token)
        if hash_fn is not None and not callable(hash_fn):
            raise TypeError(f"hash_fn must be callable (parent_key, block_ids) -> key, got {type(hash_fn).__name__}")
        self.hash_fn = hash_fn or default_hash
        #: bytes one block costs
        self.block_bytes = self.block_tokens * self.bytes_per_token
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        self.reset_stats()

    # ---- stats ----------------------------------------------------------------------------------
    def reset_stats(self) -> None:
        """Zero the counters (the cached blocks stay)."""
        self.hits = 0           # lookups that reused at least one block
        self.misses = 0         # lookups that reused nothing
        self.hit_tokens = 0     # tokens served from the cache, over all lookups
        self.lookup_tokens = 0  # tokens looked up, over all lookups
        self.evictions = 0      # blocks evicted
        self.collisions = 0     # blocks whose key was taken by a different prefix (lookup or insert)

    @property
    def hit_rate(self) -> float:
        """Token hit rate: ``hit_tokens / lookup_tokens`` (0 before the first lookup)."""
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0

    @property
    def bytes_used(self) -> float:
        """Bytes charged for the cached blocks: ``len(self) * block_bytes``."""
        return len(self._entries) * self.block_bytes

    @property
    def cached_tokens(self) -> int:
        return len(self._entries) * self.block_tokens

    def __len__(self) -> int:
        """Number of cached blocks."""
        return len(self._entries)

    def clear(self) -> None:
        """Drop every block and zero the counters."""
        self._entries.clear()
        self.reset_stats()

    def __repr__(self) -> str:
        return (f"PrefixCache(block_tokens={self.block_tokens}, capacity_bytes={self.capacity_bytes:g}, "
                f"bytes_per_token={self.bytes_per_token:g}, blocks={len(self)}, hit_rate={self.hit_rate:.3f})")

    # ---- the walk ----------------------------------------------------------------------------------
    def _blocks(self, seq: tuple, limit: int) -> list[tuple]:
        bt = self.block_tokens
        n = int(raw.block_aligned_tokens(limit, bt)) // bt
        return [seq[i * bt:(i + 1) * bt] for i in range(n)]

    def _match(self, seq: tuple, limit: int, namespace) -> tuple[list[_Entry], list, list[tuple]]:
        """Verified entries for the longest cached prefix of ``seq[:limit]``.

        Returns (matched entries, key of the first unmatched block or None, all blocks).
        """
        blocks = self._blocks(seq, limit)
        matched: list[_Entry] = []
        parent_key = None if namespace is None else ("namespace", namespace)
        parent = None
        for block in blocks:
            key = self.hash_fn(parent_key, block)
            e = self._entries.get(key)
            if e is None:
                return matched, key, blocks
            if e.parent is not parent or e.block != block or e.namespace != namespace:
                self.collisions += 1
                return matched, key, blocks
            matched.append(e)
            parent, parent_key = e, key
        return matched, None, blocks

    def _touch(self, path: Sequence[_Entry]) -> None:
        """Mark ``path`` (first block first) most recently used, deepest first: parents stay newer."""
        for e in reversed(path):
            self._entries.move_to_end(e.key)

    def _evict_one(self, protected: set) -> bool:
        """Evict the least recently used block (a leaf) unless it is protected; True if one went."""
        if not self._entries:
            return False
        key, e = next(iter(self._entries.items()))
        if key in protected:
            return False
        assert e.children == 0, "LRU order broken: a parent is older than its child"
        del self._entries[key]
        if e.parent is not None:
            e.parent.children -= 1
        self.evictions += 1
        return True

    # ---- public API --------------------------------------------------------------------------------
    def lookup(self, tokens, *, max_tokens: int | None = None, namespace: Hashable = None) -> PrefixHit:
        """The longest cached whole-block prefix of ``tokens``; touches the matched blocks (LRU).

        ``max_tokens`` caps the reuse (a server recomputes at least the last prompt token, so it
        looks up with ``max_tokens=len(tokens) - 1``); the counters still count all of ``tokens``.
        """
        seq = _token_tuple("tokens", tokens)
        limit = len(seq) if max_tokens is None else min(len(seq), require_count("max_tokens", max_tokens))
        matched, _, _ = self._match(seq, limit, _namespace(namespace))
        self._touch(matched)
        n = len(matched) * self.block_tokens
        self.lookup_tokens += len(seq)
        self.hit_tokens += n
        if matched:
            self.hits += 1
        else:
            self.misses += 1
        return PrefixHit(tokens=n, payloads=[e.payload for e in matched], blocks=len(matched))

    def peek(self, tokens, *, namespace: Hashable = None) -> int:
        """Leading tokens of ``tokens`` that are cached, without touching blocks or counters."""
        seq = _token_tuple("tokens", tokens)
        saved = self.collisions
        matched, _, _ = self._match(seq, len(seq), _namespace(namespace))
        self.collisions = saved
        return len(matched) * self.block_tokens

    def insert(self, tokens, payloads: Sequence[Any] | Callable[[int, int, int], Any] | None = None, *,
               namespace: Hashable = None) -> int:
        """Store the whole blocks of ``tokens`` that are not cached yet; returns how many were stored.

        ``payloads``: ``None`` (store nothing but the bookkeeping, for simulations), a list with one
        payload per whole block of ``tokens``, or a callable ``(block_index, start, end) -> payload``
        called only for the blocks actually stored. Blocks already cached keep their payload and
        are touched. Evicts least recently used leaves to make room; stops (storing fewer blocks)
        when the room could only come from this prompt's own prefix, when a block is larger than
        the capacity, or when a block's key belongs to a different prefix (hash collision).
        """
        seq = _token_tuple("tokens", tokens)
        n_blocks = len(seq) // self.block_tokens
        if payloads is not None and not callable(payloads):
            if isinstance(payloads, (str, bytes)) or not hasattr(payloads, "__len__"):
                raise TypeError("payloads must be None, a list with one payload per whole block, or a callable "
                                f"(block_index, start, end) -> payload; got {type(payloads).__name__}")
            if len(payloads) != n_blocks:
                raise ValueError(f"payloads must have one entry per whole block of tokens ({len(seq)} tokens = "
                                 f"{n_blocks} blocks of {self.block_tokens}), got {len(payloads)}")
        matched, key, blocks = self._match(seq, len(seq), _namespace(namespace))
        self._touch(matched)
        if len(matched) == len(blocks):
            return 0
        if key in self._entries:  # the next block's key belongs to another prefix: stop here
            return 0
        path = list(matched)
        protected = {e.key for e in path}
        stored = 0
        parent = path[-1] if path else None
        for i in range(len(matched), len(blocks)):
            if self.block_bytes > self.capacity_bytes:
                break
            while (len(self._entries) + 1) * self.block_bytes > self.capacity_bytes:
                if not self._evict_one(protected):
                    break
            if (len(self._entries) + 1) * self.block_bytes > self.capacity_bytes:
                break
            if i > len(matched):
                key = self.hash_fn(parent.key, blocks[i])
                if key in self._entries:  # collision with a different prefix
                    self.collisions += 1
                    break
            bt = self.block_tokens
            if payloads is None:
                payload = None
            elif callable(payloads):
                payload = payloads(i, i * bt, (i + 1) * bt)
            else:
                payload = payloads[i]
            e = _Entry(key, parent, blocks[i], namespace, payload)
            self._entries[key] = e
            if parent is not None:
                parent.children += 1
            path.append(e)
            protected.add(key)
            parent = e
            stored += 1
        self._touch(path)
        return stored

    def check_invariants(self) -> None:
        """Raise AssertionError if the cache's structure is inconsistent (used by the tests)."""
        assert self.bytes_used <= self.capacity_bytes, "over capacity"
        children: dict[int, int] = {}
        order = {k: i for i, k in enumerate(self._entries)}
        for key, e in self._entries.items():
            assert e.key == key
            if e.parent is not None:
                assert self._entries.get(e.parent.key) is e.parent, "a cached block's parent is not cached"
                assert order[e.parent.key] > order[key], "a parent is older than its child"
                children[id(e.parent)] = children.get(id(e.parent), 0) + 1
        for e in self._entries.values():
            assert e.children == children.get(id(e), 0), "child count out of date"


def simulate(requests: Iterable, block_tokens: int = 16, capacity_bytes: float | None = None,
             bytes_per_token: float | None = None, *, min_new_tokens: int = 0,
             hash_fn: Callable | None = None) -> SimulationResult:
    """Replay ``requests`` (token-id sequences, in arrival order) through a fresh :class:`PrefixCache`.

    Each request is looked up and then inserted (its whole blocks become reusable by later
    requests). ``min_new_tokens``: tokens every request must still compute (1 models a server
    that always recomputes the last prompt token; 0, the default, counts every whole cached block).
    """
    requests = require_list("requests", requests, "a list of token-id sequences", maximum_items=10**7)
    cache = PrefixCache(block_tokens, capacity_bytes, bytes_per_token, hash_fn=hash_fn)
    m = require_count("min_new_tokens", min_new_tokens)
    per_request = []
    for i, r in enumerate(requests):
        seq = _token_tuple(f"requests[{i}]", r)
        hit = cache.lookup(seq, max_tokens=max(0, len(seq) - m))
        per_request.append(hit.tokens)
        cache.insert(seq)
    if not per_request:
        raise ValueError("requests must hold at least one token-id sequence")
    return SimulationResult(requests=len(per_request), lookup_tokens=cache.lookup_tokens, hit_tokens=cache.hit_tokens,
                            hits=cache.hits, misses=cache.misses, evictions=cache.evictions,
                            bytes_used=cache.bytes_used, capacity_bytes=cache.capacity_bytes,
                            block_tokens=cache.block_tokens, per_request_hit_tokens=tuple(per_request))
