"""A small but real decoder-only transformer in plain PyTorch, built from a ``ModelSpec``.

    from course_lib.models import get_model
    from course_lib.tinylm import TinyLM
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
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .models import ModelSpec, get_model
from .validation import require_choice, require_count, require_positive

__all__ = ["TinyLM", "StepReads", "TORCH_DTYPES", "precision_of"]

#: course precision names and the torch dtypes they map to
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


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


class _Tracer:
    def __init__(self):
        self.weights: dict[str, int] = {}
        self.kv: dict[str, int] = {}

    def weight(self, name: str, t: torch.Tensor):
        self.weights[name] = self.weights.get(name, 0) + t.numel() * t.element_size()

    def cache(self, name: str, t: torch.Tensor):
        self.kv[name] = self.kv.get(name, 0) + t.numel() * t.element_size()


class _RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


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
    ``max_seq``: KV-cache length (default ``min(spec.max_positions or 2048, 2048)``).
    ``batch``: sequences decoded together. ``device``: default CUDA when available, else CPU.
    """

    def __init__(self, spec, *, dtype="fp32", device=None, seed: int = 0, max_seq: int | None = None,
                 batch: int = 1, rope_theta: float = 10000.0, norm_eps: float = 1e-5, init_std: float = 0.02):
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
        self.seed = require_count("seed", seed)
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
        # the preallocated KV cache and the rotary tables
        self.kv = torch.zeros(spec.layers, 2, self.batch, spec.kv_heads, self.max_seq, spec.head_dim,
                              device=dev, dtype=dtype)
        inv = 1.0 / (self.rope_theta ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float64) / spec.head_dim))
        ang = torch.outer(torch.arange(self.max_seq, dtype=torch.float64), inv)
        self._cos = torch.cat([ang.cos(), ang.cos()], -1).to(dev, torch.float32)
        self._sin = torch.cat([ang.sin(), ang.sin()], -1).to(dev, torch.float32)
        self.length = 0  # tokens in the cache

    # ---- bookkeeping ---------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def num_parameters(self) -> int:
        """Stored parameters (a tied embedding/lm_head matrix once): equals ``spec.params``."""
        return sum(p.numel() for p in self.parameters())

    def kv_cache_bytes_per_token(self) -> int:
        """Bytes the preallocated cache holds per token of one sequence."""
        return self.kv.numel() * self.kv.element_size() // (self.batch * self.max_seq)

    def reset(self):
        """Forget the cached tokens (the cache memory stays allocated)."""
        self.length = 0

    # ---- pieces ----------------------------------------------------------------------------
    def _tokens(self, tokens, what="tokens") -> torch.Tensor:
        t = torch.as_tensor(tokens, device=self.device)
        if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise TypeError(f"{what} must be integer token ids, got dtype {t.dtype}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.spec.vocab):
            raise ValueError(f"{what} must be ids in [0, {self.spec.vocab}), got min {int(t.min())}, max {int(t.max())}")
        return t.long()

    def _rope(self, x, positions):
        cos, sin = self._cos[positions].to(x.dtype), self._sin[positions].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

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

    def _layer(self, i, blk: _Block, x, start: int, tr):
        """x: (B, T, h) for positions start..start+T-1; writes K/V there, attends to 0..start+T-1."""
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
        pos = torch.arange(start, start + T, device=x.device)
        q, k = self._rope(q, pos), self._rope(k, pos)
        end = start + T
        self.kv[i, 0, :B, :, start:end] = k
        self.kv[i, 1, :B, :, start:end] = v
        first = 0 if s.sliding_window is None else max(0, start - s.sliding_window + 1)  # oldest key any query needs
        keys = self.kv[i, 0, :B, :, first:end]
        values = self.kv[i, 1, :B, :, first:end]
        if tr is not None:
            tr.cache(f"{p}.k_cache", keys)
            tr.cache(f"{p}.v_cache", values)
        group = s.heads // s.kv_heads
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        qpos = pos.view(T, 1)
        kpos = torch.arange(first, end, device=x.device).view(1, -1)
        allowed = kpos <= qpos
        if s.sliding_window is not None:
            allowed &= kpos > qpos - s.sliding_window
        scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(s.head_dim)
        scores = scores.masked_fill(~allowed, float("-inf"))
        attn = (scores.softmax(-1) @ values.float()).to(x.dtype)
        attn = attn.transpose(1, 2).reshape(B, T, s.heads * s.head_dim)
        x = x + self._linear(blk.o_proj, attn, f"{p}.o_proj", tr)
        hx = self._norm(blk.mlp_norm, x, f"{p}.mlp_norm", tr)
        up = self._linear(blk.up_proj, hx, f"{p}.up_proj", tr)
        if blk.gated:
            act = F.silu(self._linear(blk.gate_proj, hx, f"{p}.gate_proj", tr)) * up
        else:
            act = F.gelu(up)
        return x + self._linear(blk.down_proj, act, f"{p}.down_proj", tr)

    def _forward(self, tokens: torch.Tensor, start: int, tr=None) -> torch.Tensor:
        """tokens (B, T) at positions start.. -> logits (B, T, vocab)."""
        B, T = tokens.shape
        if B > self.batch:
            raise ValueError(f"batch of {B} sequences but the cache was built for batch={self.batch}")
        if start + T > self.max_seq:
            raise ValueError(f"{start + T} tokens exceed the KV cache (max_seq={self.max_seq})")
        x = self.embed.weight[tokens]
        if tr is not None:
            tr.weight("embed.weight[rows]", x)  # one row of the table per token
        for i, blk in enumerate(self.blocks):
            x = self._layer(i, blk, x, start, tr)
        x = self._norm(self.final_norm, x, "final_norm", tr)
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        if tr is not None:
            tr.weight("lm_head.weight" if self.lm_head is not None else "embed.weight (tied lm_head)", head)
        return F.linear(x, head)

    # ---- public API --------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, tokens) -> torch.Tensor:
        """Full recomputation of a sequence without using earlier cache contents: logits (B, T, vocab)."""
        t = self._tokens(tokens)
        squeeze = t.dim() == 1
        t = t.view(1, -1) if squeeze else t
        if t.dim() != 2 or t.shape[1] == 0:
            raise ValueError(f"tokens must be a non-empty 1-D (T,) or 2-D (batch, T) tensor, got shape {tuple(t.shape)}")
        out = self._forward(t, 0)
        self.length = t.shape[1]
        return out[0] if squeeze else out

    def prefill(self, tokens) -> torch.Tensor:
        """Process a prompt from an empty cache (fills it); logits for every prompt position."""
        self.reset()
        return self.forward(tokens)

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
        logits = self._forward(t, self.length, tr)[:, -1]
        self.length += 1
        logits = logits[0] if squeeze else logits
        if trace:
            attended = self.spec.attended_tokens(self.length)
            return logits, StepReads(tr.weights, tr.kv, attended)
        return logits

    def generate(self, prompt, new_tokens: int) -> torch.Tensor:
        """Greedy decoding: ``new_tokens`` ids (the first from prefill, the rest from n-1 decode steps)."""
        n = require_count("new_tokens", new_tokens, minimum=1)
        logits = self.prefill(prompt)
        nxt = logits[..., -1, :].argmax(-1)
        out = [nxt]
        for _ in range(n - 1):
            nxt = self.decode_step(nxt).argmax(-1)
            out.append(nxt)
        return torch.stack(out, -1)
