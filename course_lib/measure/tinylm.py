"""A small but real decoder-only transformer in plain PyTorch, built from a ``ModelSpec``.

Lessons: 05, 06, 07, 08

    from course_lib.core.models import get_model
    from course_lib.measure.tinylm import TinyLM
    spec = get_model("llama-3-8b").scaled(layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64,
                                          intermediate=512, vocab=1000)
    lm = TinyLM(spec, seed=0)                 # random weights from the seed: nothing is downloaded
    logits = lm.prefill(torch.tensor([1, 2, 3]))
    logits = lm.decode_step(torch.tensor(7))
    tokens = lm.generate(torch.tensor([1, 2, 3]), new_tokens=5)

What it contains (Llama/Mistral/Qwen layout): token embedding, per layer RMSNorm → grouped-query
attention (``heads`` query heads sharing ``kv_heads`` K/V heads of ``head_dim``, rotary positions,
optional Q/K/V and output biases, optional per-head Q/K RMSNorm as in Qwen3, optional sliding
window) → RMSNorm → SwiGLU MLP (or a plain GELU MLP), a final RMSNorm and the lm_head (tied to the
embedding when the spec says so). The KV cache is preallocated: one tensor
``(layers, 2, batch, kv_heads, max_seq, head_dim)``.

It exists to make the course's byte counts tangible: :meth:`TinyLM.decode_step` with
``trace=True`` records every tensor (or slice) the step reads, and the tests check that their
``nbytes`` add up to ``spec.decode_weight_bytes(precision)`` plus the KV read.

Attention never copies K/V per query head: the ``group = heads / kv_heads`` query heads that share
a K/V head are laid side by side, ``(B, kv_heads, group * T, head_dim)`` against K of
``(B, kv_heads, S, head_dim)``, which is one batched matmul. Queries are processed in chunks so
that the fp32 scores and probabilities of one chunk stay within ``attention_score_bytes``
(256 MiB by default): a 4096-token prefill of a 32-head model works on 256-row chunks.

Reusing K/V (lesson 07, first-token optimisation)
-------------------------------------------------
* **prefix reuse** -- :meth:`TinyLM.save_state` snapshots the cached K/V of a prompt as a
  :class:`KVState`; ``prefill(tokens, prefix=state)`` loads it and computes only the new tokens.
  Exact: the keys and values of a prefix do not depend on anything after it.
* **session reuse** -- :meth:`TinyLM.extend` processes the next turn after what is in the cache.
* **block prefix cache** -- :meth:`TinyLM.prefill_cached` looks the prompt up in a
  :class:`course_lib.prefix_cache.PrefixCache` (whole blocks, keyed by prefix hashes), loads the
  matched blocks and stores the new ones.
* **modular prompt cache** (approximate, Gim et al. 2023) -- :meth:`TinyLM.encode_module` and
  :meth:`TinyLM.prefill_modules`; see :func:`logit_agreement` for measuring the approximation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from course_lib.core.models import ModelSpec, get_model
from course_lib.core.validation import require_choice, require_count, require_positive

__all__ = ["TinyLM", "StepReads", "KVState", "logit_agreement", "TORCH_DTYPES", "precision_of", "rms_norm", "rotary",
           "DEFAULT_ATTENTION_SCORE_BYTES"]

#: course precision names and the torch dtypes they map to
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

#: default cap on the fp32 attention scores + probabilities one query chunk holds (per layer)
DEFAULT_ATTENTION_SCORE_BYTES = 256 * 2**20

_INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def precision_of(dtype: torch.dtype) -> str:
    """The course precision name of a torch dtype ('fp32', 'fp16', 'bf16')."""
    for k, v in TORCH_DTYPES.items():
        if v == dtype:
            return k
    raise ValueError(f"dtype must be one of {', '.join(map(str, TORCH_DTYPES.values()))}, got {dtype}")


@dataclass
class StepReads:
    """What one traced decode step read: bytes per tensor name, weights and KV cache apart."""

    weights: dict
    kv: dict
    attended_tokens: int

    @property
    def weight_bytes(self) -> int:
        return sum(self.weights.values())

    @property
    def kv_bytes(self) -> int:
        return sum(self.kv.values())

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes


@dataclass(frozen=True, eq=False)
class KVState:
    """An immutable snapshot of the cached keys and values of ONE sequence.

    ``tokens``: the ids (1-D int64, CPU); ``start``: the rotary position of the first token
    (0 for a prompt prefix; a module encoded further into a prompt has its own start); ``k`` and
    ``v``: ``(layers, kv_heads, length, head_dim)``, already rotated (RoPE) at positions
    ``start .. start + length - 1``.

    Everything is cloned on creation and copied again whenever a model loads the state, so one
    state can serve any number of requests: nothing a model does changes it.
    """

    tokens: torch.Tensor = field(repr=False)
    start: int
    k: torch.Tensor = field(repr=False)
    v: torch.Tensor = field(repr=False)

    def __post_init__(self):
        tokens = torch.as_tensor(self.tokens)
        if tokens.dtype not in _INTEGER_DTYPES:
            raise TypeError(f"tokens must be integer token ids, got dtype {tokens.dtype}")
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be a 1-D tensor of ids (one sequence), got shape {tuple(tokens.shape)}")
        start = require_count("start", self.start)
        for name in ("k", "v"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() != 4 or t.shape[2] != tokens.numel():
                raise ValueError(f"{name} must be shaped (layers, kv_heads, length={tokens.numel()}, head_dim), "
                                 f"got {tuple(t.shape)}")
        if self.k.shape != self.v.shape or self.k.dtype != self.v.dtype:
            raise ValueError(f"k and v must have the same shape and dtype, got {tuple(self.k.shape)} {self.k.dtype} "
                             f"and {tuple(self.v.shape)} {self.v.dtype}")
        object.__setattr__(self, "tokens", tokens.detach().to("cpu", torch.int64).clone())
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "k", self.k.detach().clone())
        object.__setattr__(self, "v", self.v.detach().clone())

    @property
    def length(self) -> int:
        """Tokens in the state."""
        return self.tokens.numel()

    @property
    def end(self) -> int:
        """The position after the last token (where a continuation starts)."""
        return self.start + self.length

    @property
    def nbytes(self) -> int:
        """Bytes of the cached keys and values (the token ids are not counted)."""
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    def slice(self, begin: int, end: int | None = None) -> "KVState":
        """The state of tokens ``begin .. end - 1`` (positions ``start + begin ..``)."""
        b = require_count("begin", begin)
        e = self.length if end is None else require_count("end", end)
        if not b <= e <= self.length:
            raise ValueError(f"slice must satisfy 0 <= begin <= end <= {self.length}, got begin={b}, end={e}")
        return KVState(self.tokens[b:e], self.start + b, self.k[:, :, b:e], self.v[:, :, b:e])

    def __repr__(self) -> str:
        return (f"KVState(length={self.length}, start={self.start}, layers={self.k.shape[0]}, "
                f"kv_heads={self.k.shape[1]}, head_dim={self.k.shape[3]}, dtype={self.k.dtype}, nbytes={self.nbytes})")


class _Tracer:
    def __init__(self):
        self.weights: dict[str, int] = {}
        self.kv: dict[str, int] = {}

    def weight(self, name: str, t: torch.Tensor):
        self.weights[name] = self.weights.get(name, 0) + t.numel() * t.element_size()

    def cache(self, name: str, t: torch.Tensor):
        self.kv[name] = self.kv.get(name, 0) + t.numel() * t.element_size()


@dataclass(frozen=True)
class _Chunk:
    """Query rows q0..q1-1 (relative to the call) attend to cache slots k0..k1-1; ``blocked``: mask or None."""

    q0: int
    q1: int
    k0: int
    k1: int
    blocked: torch.Tensor | None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, computed in fp32 and returned in ``x``'s dtype (as Llama and transformers)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary position embedding of ``x`` (last dimension: head_dim) with the angles' ``cos`` and ``sin``
    (the two halves of the head dimension rotated against each other: Llama's ``rotate_half`` layout)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class _RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class _Block(nn.Module):
    def __init__(self, spec: ModelSpec, eps: float):
        super().__init__()
        h, hd = spec.hidden, spec.head_dim
        self.attn_norm = _RMSNorm(h, eps)
        self.q_proj = nn.Linear(h, spec.heads * hd, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(h, spec.kv_heads * hd, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(h, spec.kv_heads * hd, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(spec.heads * hd, h, bias=spec.o_bias)
        self.q_norm = _RMSNorm(hd, eps) if spec.qk_norm else None
        self.k_norm = _RMSNorm(hd, eps) if spec.qk_norm else None
        self.mlp_norm = _RMSNorm(h, eps)
        self.gated = spec.mlp == "gated"
        self.gate_proj = nn.Linear(h, spec.intermediate, bias=spec.mlp_bias) if self.gated else None
        self.up_proj = nn.Linear(h, spec.intermediate, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(spec.intermediate, h, bias=spec.mlp_bias)


class TinyLM(nn.Module):
    """A decoder-only transformer with the shapes of ``spec`` and random weights from ``seed``.

    ``dtype``: a torch dtype or 'fp32'/'fp16'/'bf16' (default fp32, which every CPU runs well).
    ``max_seq``: KV-cache length and the largest rotary position (default ``min(spec.max_positions or 2048, 2048)``).
    ``batch``: sequences decoded together. ``device``: default CUDA when available, else CPU.
    ``attention_score_bytes``: cap on the fp32 scores + probabilities of one query chunk (see module doc).

    The cache has *slots* 0..max_seq-1; normally slot i holds position i. Only
    :meth:`prefill_modules` (modules encoded at their own positions) and a prefix whose ``start``
    is not 0 break that; the causal mask and the sliding window work on slots, RoPE on positions.
    """

    def __init__(self, spec, *, dtype="fp32", device=None, seed: int = 0, max_seq: int | None = None,
                 batch: int = 1, rope_theta: float = 10000.0, norm_eps: float = 1e-5, init_std: float = 0.02,
                 attention_score_bytes: int = DEFAULT_ATTENTION_SCORE_BYTES):
        super().__init__()
        spec = get_model(spec)
        unsupported = []
        if spec.norm != "rmsnorm":
            unsupported.append(f"norm={spec.norm!r} (only 'rmsnorm')")
        if spec.positional != "rope":
            unsupported.append(f"positional={spec.positional!r} (only 'rope')")
        if spec.is_mla:
            unsupported.append("multi-head latent attention")
        if spec.is_moe:
            unsupported.append("mixture of experts")
        if spec.nominal_params is not None:
            unsupported.append("a nominal parameter count (no full shape)")
        if unsupported:
            raise ValueError(f"TinyLM cannot build {spec.name!r}: " + "; ".join(unsupported))
        self.spec = spec
        if isinstance(dtype, str):
            dtype = TORCH_DTYPES[require_choice("dtype", dtype, TORCH_DTYPES)]
        self.precision = precision_of(dtype)
        self.max_seq = require_count("max_seq", max_seq if max_seq is not None
                                     else min(spec.max_positions or 2048, 2048), minimum=1)
        self.batch = require_count("batch", batch, minimum=1)
        self.rope_theta = require_positive("rope_theta", rope_theta)
        self.norm_eps = require_positive("norm_eps", norm_eps)
        self.init_std = require_positive("init_std", init_std)
        self.seed = require_count("seed", seed)
        self.attention_score_bytes = require_count("attention_score_bytes", attention_score_bytes, minimum=1)
        dev = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")

        self.embed = nn.Embedding(spec.vocab, spec.hidden)
        self.blocks = nn.ModuleList(_Block(spec, norm_eps) for _ in range(spec.layers))
        self.final_norm = _RMSNorm(spec.hidden, norm_eps)
        self.lm_head = None if spec.tied_embeddings else nn.Linear(spec.hidden, spec.vocab, bias=False)
        gen = torch.Generator().manual_seed(self.seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.fill_(1.0)
                elif name.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=gen) * init_std)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * init_std)
        self.to(device=dev, dtype=dtype)
        self.eval()
        # the preallocated KV cache, the ids it holds, and the rotary tables
        self.kv = torch.zeros(spec.layers, 2, self.batch, spec.kv_heads, self.max_seq, spec.head_dim,
                              device=dev, dtype=dtype)
        self._ids = torch.zeros(self.batch, self.max_seq, device=dev, dtype=torch.int64)
        inv = 1.0 / (self.rope_theta ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float64) / spec.head_dim))
        ang = torch.outer(torch.arange(self.max_seq, dtype=torch.float64), inv)
        self._cos = torch.cat([ang.cos(), ang.cos()], -1).to(dev, torch.float32)
        self._sin = torch.cat([ang.sin(), ang.sin()], -1).to(dev, torch.float32)
        self.reset()

    # ---- bookkeeping ---------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    @property
    def cache_namespace(self) -> tuple:
        """What makes two TinyLMs compute the same K/V: a :class:`PrefixCache` namespace.

        Models built with the same spec, seed, dtype and constants share cached blocks; any other
        model never sees them. (Weights changed by hand after construction are not tracked.)
        """
        return ("TinyLM", self.spec, self.seed, self.precision, self.rope_theta, self.norm_eps, self.init_std)

    def num_parameters(self) -> int:
        """Stored parameters (a tied embedding/lm_head matrix once): equals ``spec.params``."""
        return sum(p.numel() for p in self.parameters())

    def kv_cache_bytes_per_token(self) -> int:
        """Bytes the preallocated cache holds per token of one sequence."""
        return self.kv.numel() * self.kv.element_size() // (self.batch * self.max_seq)

    def make_prefix_cache(self, capacity_bytes: float, block_tokens: int = 16):
        """A :class:`course_lib.prefix_cache.PrefixCache` charging this model's K/V bytes per token."""
        from course_lib.core.prefix_cache import PrefixCache

        return PrefixCache(block_tokens, capacity_bytes, self.kv_cache_bytes_per_token())

    def reset(self):
        """Forget the cached tokens (the cache memory stays allocated)."""
        self.length = 0          # slots filled
        self.next_position = 0   # rotary position of the next token
        self._rows = 0           # sequences the cache holds
        self._pos0 = 0           # position of slot 0
        self._contiguous = 0     # leading slots whose position is _pos0 + slot

    def _note_positions(self, slot: int, position: int, n: int):
        """Bookkeeping after slots slot..slot+n-1 were written at positions position.."""
        if slot == 0:
            self._pos0 = position
        self._contiguous = min(self._contiguous, slot)
        if self._contiguous == slot and position == self._pos0 + slot:
            self._contiguous = slot + n
        self.length = slot + n
        self.next_position = position + n

    # ---- pieces ----------------------------------------------------------------------------
    def _tokens(self, tokens, what="tokens") -> torch.Tensor:
        t = torch.as_tensor(tokens, device=self.device)
        if t.dtype not in _INTEGER_DTYPES:
            raise TypeError(f"{what} must be integer token ids, got dtype {t.dtype}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.spec.vocab):
            raise ValueError(f"{what} must be ids in [0, {self.spec.vocab}), "
                             f"got min {int(t.min())}, max {int(t.max())}")
        return t.long()

    def _sequence(self, tokens, what="tokens", *, batched=True) -> tuple[torch.Tensor, bool]:
        """``tokens`` as (B, T) with T >= 1, and whether the input was 1-D."""
        t = self._tokens(tokens, what)
        squeeze = t.dim() == 1
        t = t.view(1, -1) if squeeze else t
        if t.dim() != 2 or t.shape[1] == 0 or (not batched and not squeeze):
            shape = "a non-empty 1-D (T,)" + ("" if not batched else " or 2-D (batch, T)")
            raise ValueError(f"{what} must be {shape} tensor, got shape {tuple(torch.as_tensor(tokens).shape)}")
        if t.shape[0] > self.batch:
            raise ValueError(f"batch of {t.shape[0]} sequences but the cache was built for batch={self.batch}")
        return t, squeeze

    def _check_room(self, slots: int, positions: int):
        if slots > self.max_seq:
            raise ValueError(f"{slots} tokens exceed the KV cache (max_seq={self.max_seq})")
        if positions > self.max_seq:
            raise ValueError(f"positions up to {positions - 1} exceed the rotary table (max_seq={self.max_seq})")

    def _check_state(self, state, what: str):
        if not isinstance(state, KVState):
            raise TypeError(f"{what} must be a KVState (from save_state or encode_module), got {type(state).__name__}")
        s = self.spec
        want = (s.layers, s.kv_heads, state.length, s.head_dim)
        if tuple(state.k.shape) != want or state.dtype != self.dtype:
            raise ValueError(f"{what} does not fit this model: K/V shaped {tuple(state.k.shape)} {state.dtype}, "
                             f"expected {want} {self.dtype}")

    def _load(self, state: KVState, slot: int, rows: int):
        """Copy ``state`` into slots slot.. of the first ``rows`` sequences (the state is never aliased)."""
        end = slot + state.length
        self.kv[:, 0, :rows, :, slot:end] = state.k.to(self.device).unsqueeze(1)
        self.kv[:, 1, :rows, :, slot:end] = state.v.to(self.device).unsqueeze(1)
        self._ids[:rows, slot:end] = state.tokens.to(self.device)
        self._note_positions(slot, state.start, state.length)
        self._rows = rows

    def _rope(self, x, positions):
        return rotary(x, self._cos[positions].to(x.dtype), self._sin[positions].to(x.dtype))

    def _linear(self, lin: nn.Linear, x, name, tr):
        if tr is not None:
            tr.weight(f"{name}.weight", lin.weight)
            if lin.bias is not None:
                tr.weight(f"{name}.bias", lin.bias)
        return F.linear(x, lin.weight, lin.bias)

    def _norm(self, norm: _RMSNorm, x, name, tr):
        if tr is not None:
            tr.weight(f"{name}.weight", norm.weight)
        return norm(x)

    def _first_key(self, slot: int) -> int:
        """The oldest cache slot a query in ``slot`` attends to."""
        w = self.spec.sliding_window
        return 0 if w is None else max(0, slot - w + 1)

    def attention_chunk_rows(self, batch: int, start: int, rows_left: int, q0: int = 0) -> int:
        """Query rows of the chunk beginning at row ``q0`` of a call writing slots ``start ..``.

        The largest ``r`` (at least 1, at most ``rows_left``) whose fp32 scores and probabilities,
        ``2 * 4 * batch * heads * r * keys`` bytes with ``keys`` = the slots the chunk attends to,
        fit in ``attention_score_bytes``.
        """
        q = start + q0
        before = q - self._first_key(q)          # keys older than the chunk's first query
        budget = self.attention_score_bytes // (2 * 4 * batch * self.spec.heads)  # rows x keys allowed
        r = (math.isqrt(before * before + 4 * budget) - before) // 2  # largest r with r (before + r) <= budget
        while r > 1 and r * (before + r) > budget:
            r -= 1
        while (r + 1) * (before + r + 1) <= budget:
            r += 1
        return max(1, min(rows_left, r))

    def _attention_plan(self, batch: int, start: int, T: int) -> list[_Chunk]:
        """Query chunks of a call writing slots start..start+T-1, with their key ranges and masks."""
        w = self.spec.sliding_window
        plan, q0 = [], 0
        while q0 < T:
            q1 = q0 + self.attention_chunk_rows(batch, start, T - q0, q0)
            k0, k1 = self._first_key(start + q0), start + q1
            blocked = None
            if q1 - q0 > 1:  # a single query attends to every key in its range: no mask needed
                qslot = torch.arange(start + q0, start + q1, device=self.device).view(-1, 1)
                kslot = torch.arange(k0, k1, device=self.device).view(1, -1)
                allowed = kslot <= qslot
                if w is not None:
                    allowed &= kslot > qslot - w
                blocked = ~allowed
            plan.append(_Chunk(q0, q1, k0, k1, blocked))
            q0 = q1
        return plan

    def _attention(self, q, keys, values, first: int, plan: list[_Chunk]):
        """q (B, heads, T, d); keys/values (B, kv_heads, S, d) for slots first..: -> (B, heads, T, d) fp32.

        The ``group`` query heads sharing a K/V head become extra rows of one matmul against that
        head's keys: no per-head copy of K/V is made.
        """
        s = self.spec
        B, H, T, d = q.shape
        G = H // s.kv_heads
        kf, vf = keys.float(), values.float()   # no copy in fp32
        out = None if len(plan) == 1 else torch.empty(B, s.kv_heads, G, T, d, device=q.device, dtype=torch.float32)
        for c in plan:
            n = c.q1 - c.q0
            qc = q[:, :, c.q0:c.q1].float().reshape(B, s.kv_heads, G * n, d)
            kc = kf[:, :, c.k0 - first:c.k1 - first]
            vc = vf[:, :, c.k0 - first:c.k1 - first]
            scores = (qc @ kc.transpose(-1, -2)).div_(math.sqrt(d))   # (B, kv_heads, G*n, S)
            if c.blocked is not None:
                scores = scores.view(B, s.kv_heads, G, n, -1).masked_fill_(c.blocked, float("-inf"))
                scores = scores.view(B, s.kv_heads, G * n, -1)
            o = torch.softmax(scores, -1) @ vc                        # (B, kv_heads, G*n, d)
            if out is None:
                return o.view(B, H, T, d)
            out[:, :, :, c.q0:c.q1] = o.view(B, s.kv_heads, G, n, d)
        return out.view(B, H, T, d)

    def _layer(self, i, blk: _Block, x, start: int, pos, plan, tr):
        """x: (B, T, h) in slots start..start+T-1 at rotary positions ``pos``; writes K/V, attends per ``plan``."""
        s = self.spec
        B, T, _ = x.shape
        p = f"blocks.{i}"
        hx = self._norm(blk.attn_norm, x, f"{p}.attn_norm", tr)
        q = self._linear(blk.q_proj, hx, f"{p}.q_proj", tr).view(B, T, s.heads, s.head_dim).transpose(1, 2)
        k = self._linear(blk.k_proj, hx, f"{p}.k_proj", tr).view(B, T, s.kv_heads, s.head_dim).transpose(1, 2)
        v = self._linear(blk.v_proj, hx, f"{p}.v_proj", tr).view(B, T, s.kv_heads, s.head_dim).transpose(1, 2)
        if blk.q_norm is not None:
            q = self._norm(blk.q_norm, q, f"{p}.q_norm", tr)
            k = self._norm(blk.k_norm, k, f"{p}.k_norm", tr)
        q, k = self._rope(q, pos), self._rope(k, pos)
        end = start + T
        self.kv[i, 0, :B, :, start:end] = k
        self.kv[i, 1, :B, :, start:end] = v
        first = plan[0].k0  # oldest key any query needs
        keys = self.kv[i, 0, :B, :, first:end]
        values = self.kv[i, 1, :B, :, first:end]
        if tr is not None:
            tr.cache(f"{p}.k_cache", keys)
            tr.cache(f"{p}.v_cache", values)
        attn = self._attention(q, keys, values, first, plan).to(x.dtype)
        attn = attn.transpose(1, 2).reshape(B, T, s.heads * s.head_dim)
        x = x + self._linear(blk.o_proj, attn, f"{p}.o_proj", tr)
        hx = self._norm(blk.mlp_norm, x, f"{p}.mlp_norm", tr)
        up = self._linear(blk.up_proj, hx, f"{p}.up_proj", tr)
        if blk.gated:
            act = F.silu(self._linear(blk.gate_proj, hx, f"{p}.gate_proj", tr)) * up
        else:
            act = F.gelu(up)
        return x + self._linear(blk.down_proj, act, f"{p}.down_proj", tr)

    def _forward(self, tokens: torch.Tensor, start: int, tr=None, position: int | None = None) -> torch.Tensor:
        """tokens (B, T) into slots start.. at positions ``position`` (default ``start``).. -> logits (B, T, vocab).

        Updates the bookkeeping: afterwards the cache holds ``start + T`` slots of ``B`` sequences.
        """
        B, T = tokens.shape
        position = start if position is None else position
        if B > self.batch:
            raise ValueError(f"batch of {B} sequences but the cache was built for batch={self.batch}")
        self._check_room(start + T, position + T)
        x = self.embed.weight[tokens]
        if tr is not None:
            tr.weight("embed.weight[rows]", x)  # one row of the table per token
        pos = torch.arange(position, position + T, device=x.device)
        plan = self._attention_plan(B, start, T)
        for i, blk in enumerate(self.blocks):
            x = self._layer(i, blk, x, start, pos, plan, tr)
        x = self._norm(self.final_norm, x, "final_norm", tr)
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        if tr is not None:
            tr.weight("lm_head.weight" if self.lm_head is not None else "embed.weight (tied lm_head)", head)
        self._ids[:B, start:start + T] = tokens
        self._note_positions(start, position, T)
        self._rows = B
        return F.linear(x, head)

    # ---- public API --------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, tokens) -> torch.Tensor:
        """Full recomputation of a sequence without using earlier cache contents: logits (B, T, vocab)."""
        t, squeeze = self._sequence(tokens)
        out = self._forward(t, 0)
        return out[0] if squeeze else out

    def prefill(self, tokens, prefix: KVState | None = None) -> torch.Tensor:
        """Process a prompt from an empty cache (fills it).

        Without ``prefix``: logits for every prompt position, ``(T, vocab)`` or ``(B, T, vocab)``.
        With ``prefix`` (a :class:`KVState` whose tokens are the start of ``tokens``): its K/V are
        copied into the cache and only the remaining tokens are computed; the logits returned are
        those of the NEW positions only, ``(T - prefix.length, vocab)``. Exact: equal to the
        matching rows of a full prefill. A 2-D ``tokens`` shares the prefix across its rows.
        """
        if prefix is None:
            self.reset()
            return self.forward(tokens)
        return self._prefill_prefix(tokens, prefix)

    @torch.inference_mode()
    def _prefill_prefix(self, tokens, prefix: KVState) -> torch.Tensor:
        self._check_state(prefix, "prefix")
        t, squeeze = self._sequence(tokens)
        B, T = t.shape
        P = prefix.length
        if T <= P:
            raise ValueError(f"tokens must add at least one token to the prefix: prefix holds {P} tokens, "
                             f"tokens has {T}")
        head = t[:, :P].cpu()
        same = head == prefix.tokens.view(1, -1)
        if not bool(same.all()):
            i = int((~same).any(0).nonzero()[0])
            raise ValueError(f"prefix does not match tokens: position {i} is {int(prefix.tokens[i])} in prefix.tokens "
                             f"but {int(head[(~same[:, i]).nonzero()[0, 0], i])} in tokens")
        self._check_room(T, prefix.start + T)
        self.reset()
        self._load(prefix, 0, B)
        out = self._forward(t[:, P:], P, position=prefix.end)
        return out[0] if squeeze else out

    @torch.inference_mode()
    def extend(self, tokens) -> torch.Tensor:
        """Process ``tokens`` after the current cache contents (a session's next turn): their logits.

        Positions continue where the cache ends; the result equals the matching rows of a full
        recomputation of everything cached plus ``tokens``. On an empty cache this is a prefill.
        """
        t, squeeze = self._sequence(tokens)
        if self.length and t.shape[0] != self._rows:
            raise ValueError(f"tokens has {t.shape[0]} sequences but the cache holds {self._rows}")
        out = self._forward(t, self.length, position=self.next_position)
        return out[0] if squeeze else out

    @torch.inference_mode()
    def save_state(self, length: int | None = None) -> KVState:
        """A :class:`KVState` of sequence 0's first ``length`` cached tokens (default: all of them)."""
        n = self.length if length is None else require_count("length", length)
        if n > self.length:
            raise ValueError(f"length must be <= the {self.length} cached tokens, got {n}")
        if self.length == 0:
            raise ValueError("save_state needs cached tokens: call prefill(tokens) first")
        if n > self._contiguous:
            raise ValueError(f"length: the first {n} cached tokens do not sit at consecutive positions "
                             f"(cached modules); at most {self._contiguous} can be saved as one state")
        return KVState(self._ids[0, :n], self._pos0, self.kv[:, 0, 0, :, :n], self.kv[:, 1, 0, :, :n])

    @torch.inference_mode()
    def prefill_cached(self, tokens, cache) -> tuple[torch.Tensor, int]:
        """Prefill a 1-D prompt through a block prefix cache: ``(logits of the new positions, hit_tokens)``.

        Looks ``tokens`` up in ``cache`` (a :class:`course_lib.prefix_cache.PrefixCache`, namespace
        :attr:`cache_namespace`), loads the matched blocks' K/V, computes the rest (always at least
        the last token, so that there are logits to sample from), then stores the prompt's new whole
        blocks: each block's payload is a :class:`KVState` of its ``block_tokens`` tokens. The logits
        are those of positions ``hit_tokens ..``, equal to the same rows of a full prefill.
        """
        from course_lib.core.prefix_cache import PrefixCache

        if not isinstance(cache, PrefixCache):
            raise TypeError(f"cache must be a course_lib.prefix_cache.PrefixCache, got {type(cache).__name__}")
        t, _ = self._sequence(tokens, batched=False)
        T = t.shape[1]
        self._check_room(T, T)
        ids = t[0].cpu()
        hit = cache.lookup(ids, max_tokens=T - 1, namespace=self.cache_namespace)
        self.reset()
        bt = cache.block_tokens
        for j, block in enumerate(hit.payloads):
            s = j * bt
            if not (isinstance(block, KVState) and block.start == s and block.length == bt
                    and torch.equal(block.tokens, ids[s:s + bt])):
                raise ValueError(f"cache: block {j} of the hit is not the K/V of tokens {s}..{s + bt - 1} "
                                 f"(got {block!r}); use one PrefixCache per purpose")
            self._check_state(block, f"cache block {j}")
            self._load(block, s, 1)
        n = hit.tokens
        logits = self._forward(t[:, n:], n)[0]

        def payload(i, s, e):
            return KVState(ids[s:e], s, self.kv[:, 0, 0, :, s:e], self.kv[:, 1, 0, :, s:e])

        cache.insert(ids, payloads=payload, namespace=self.cache_namespace)
        return logits, n

    @torch.inference_mode()
    def encode_module(self, tokens, start: int) -> KVState:
        """K/V of a prompt *module* computed on its own at positions ``start .. start + len - 1``.

        The module attends only to itself. Replaces the cache contents (like :meth:`prefill`).
        """
        t, _ = self._sequence(tokens, batched=False)
        s = require_count("start", start)
        if s + t.shape[1] > self.max_seq:
            raise ValueError(f"start: positions {s}..{s + t.shape[1] - 1} exceed the rotary table "
                             f"(max_seq={self.max_seq})")
        self.reset()
        self._forward(t, 0, position=s)
        return self.save_state()

    @torch.inference_mode()
    def prefill_modules(self, modules, tokens) -> torch.Tensor:
        """Prompt-cache prefill: the modules' K/V in order, then ``tokens`` after them: logits of ``tokens``.

        Approximate, as in Gim et al. 2023 ("Prompt Cache"): each module was encoded alone, so
        (1) its tokens never attended to the modules before it -- in a real prefill they would
        have, and every layer's keys and values after the first depend on that attention; and
        (2) its keys carry the rotary positions it was encoded at (RoPE rotates keys before they
        are cached), so a module is only right at the positions it was encoded for. Only a module
        at the very start of the prompt, encoded at ``start=0``, is exact. ``tokens`` continue at
        the position after the last module (``modules[-1].end``) and attend to every module.
        """
        if isinstance(modules, KVState) or not isinstance(modules, (list, tuple)) or not modules:
            raise TypeError(f"modules must be a non-empty list of KVState (from encode_module), "
                            f"got {type(modules).__name__}")
        for i, m in enumerate(modules):
            self._check_state(m, f"modules[{i}]")
        t, _ = self._sequence(tokens, batched=False)
        total = sum(m.length for m in modules)
        self._check_room(total + t.shape[1], modules[-1].end + t.shape[1])
        self.reset()
        slot = 0
        for m in modules:
            self._load(m, slot, 1)
            slot += m.length
        return self._forward(t, total, position=modules[-1].end)[0]

    @torch.inference_mode()
    def decode_step(self, token, trace: bool = False):
        """One token per sequence at the next position: logits (vocab,) or (batch, vocab).

        With ``trace=True`` returns ``(logits, StepReads)``: the bytes of every tensor the step read.
        """
        if self.length == 0:
            raise ValueError("decode_step needs a prompt first: call prefill(tokens)")
        t = self._tokens(token, "token")
        squeeze = t.dim() == 0
        t = t.view(1, 1) if squeeze else t.view(-1, 1)
        tr = _Tracer() if trace else None
        logits = self._forward(t, self.length, tr, position=self.next_position)[:, -1]
        logits = logits[0] if squeeze else logits
        if trace:
            attended = self.spec.attended_tokens(self.length)
            return logits, StepReads(tr.weights, tr.kv, attended)
        return logits

    def generate(self, prompt, new_tokens: int, prefix: KVState | None = None) -> torch.Tensor:
        """Greedy decoding: ``new_tokens`` ids (the first from prefill, the rest from n-1 decode steps).

        ``prefix``: reuse a saved prompt prefix (see :meth:`prefill`); the ids are the same.
        """
        n = require_count("new_tokens", new_tokens, minimum=1)
        logits = self.prefill(prompt, prefix=prefix)
        nxt = logits[..., -1, :].argmax(-1)
        out = [nxt]
        for _ in range(n - 1):
            nxt = self.decode_step(nxt).argmax(-1)
            out.append(nxt)
        return torch.stack(out, -1)


def logit_agreement(reference_logits, approx_logits) -> dict:
    """How far ``approx_logits`` are from ``reference_logits`` (same shape, ``(..., vocab)``).

    Returns ``positions`` (rows compared), ``top1_agreement`` (fraction of positions whose argmax
    agrees), ``kl_mean`` and ``kl_max`` (KL(reference || approx) of the softmax distributions, in
    nats, computed in float64) and ``max_abs_diff`` (largest absolute logit difference).

    Use it to measure modular K/V reuse (:meth:`TinyLM.prefill_modules`), which is approximate
    because a cached module skipped the attention to everything before it and its keys carry the
    positions baked in by RoPE when it was encoded; prefix and session reuse are exact (KL ~ 0).
    """
    ref = torch.as_tensor(reference_logits)
    app = torch.as_tensor(approx_logits)
    for name, x in (("reference_logits", ref), ("approx_logits", app)):
        if not x.is_floating_point():
            raise TypeError(f"{name} must be floating-point logits, got dtype {x.dtype}")
        if x.dim() == 0 or x.numel() == 0:
            raise ValueError(f"{name} must be shaped (..., vocab) with at least one position, got {tuple(x.shape)}")
    if ref.shape != app.shape:
        raise ValueError(f"approx_logits must have the shape of reference_logits {tuple(ref.shape)}, "
                         f"got {tuple(app.shape)}")
    r = ref.detach().to("cpu", torch.float64).reshape(-1, ref.shape[-1])
    a = app.detach().to("cpu", torch.float64).reshape(-1, app.shape[-1])
    for name, x in (("reference_logits", r), ("approx_logits", a)):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite")
    lp, lq = torch.log_softmax(r, -1), torch.log_softmax(a, -1)
    kl = (lp.exp() * (lp - lq)).sum(-1).clamp_min(0.0)
    return {
        "positions": r.shape[0],
        "top1_agreement": float((r.argmax(-1) == a.argmax(-1)).double().mean()),
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "max_abs_diff": float((r - a).abs().max()),
    }
