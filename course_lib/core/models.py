"""Model shapes, exact parameter counts, and the bytes a decode step streams.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10

A :class:`ModelSpec` holds what exact counts need. Every count is computed by the functions that
``course_lib.core.codegen`` generated from the sympy expressions in ``course_lib.core.formulas``.

Conventions (taught in lessons 02 and 03):

* ``params`` counts every stored parameter once (a tied embedding/lm_head matrix once).
* ``block_params`` (N_blocks) is everything but the token embedding, learned positions and lm_head.
* Per decode step the embedding lookup reads one row per sequence, while the lm_head (tied or not)
  is read in full: V x h weights every step.
* MoE: a step streams the shared weights plus the experts its tokens are routed to; with B tokens the
  expected number of distinct experts per layer is E (1 - (1 - k/E)^B) (uniform routing).
* Interleaved local and global attention (Gemma 2/3, gpt-oss): ``local_layers`` layers hold and read the K/V of
  the last ``local_window`` tokens, the others of the whole context; ``attended_tokens`` is their mean over the
  layers, so KV bytes = attended tokens x ``kv_bytes_per_token`` is the per-layer sum.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from course_lib.core.numeric import raw as g
from course_lib.core import data
from course_lib.core.precision import bytes_per_element
from course_lib.core.validation import MAX_COUNT, require_choice, require_count, require_flag, require_nonnegative

__all__ = ["ModelSpec", "get_model", "list_models", "catalog_entry"]


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape. Fields mirror Hugging Face config names where they exist."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    mlp: str = "gated"                 # "gated" (SwiGLU: gate, up, down) or "plain" (up, down)
    norm: str = "rmsnorm"              # "rmsnorm" (weight) or "layernorm" (weight + bias)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False              # per-head RMSNorm on Q and K (Qwen3)
    positional: str = "rope"           # "rope" (no parameters) or "learned" (max_positions x hidden table)
    max_positions: int | None = None
    sliding_window: int | None = None  # attention (and the KV cache read) limited to the last W tokens
    # interleaved local and global attention (Gemma 2/3, gpt-oss): `local_layers` of the layers attend only the last
    # `local_window` tokens (and cache only those), the others the whole context; `sliding_window` stays None
    local_window: int | None = None
    local_layers: int = 0
    block_norms: int = 2               # norms per block: 2 (pre-attention, pre-MLP); Gemma 2/3: 4 (also after each)
    attention_sinks: bool = False      # gpt-oss: one learned sink logit per head per layer
    # multi-head latent attention (DeepSeek-V2/V3); kv_rank set => MLA
    q_rank: int | None = None
    kv_rank: int | None = None
    rope_dim: int | None = None
    nope_dim: int | None = None
    v_dim: int | None = None
    # mixture of experts; experts set => MoE
    experts: int | None = None
    experts_per_token: int | None = None
    shared_experts: int = 0
    moe_intermediate: int | None = None
    dense_layers: int = 0              # the first `dense_layers` layers keep a dense MLP
    router_bias: bool = False
    nominal_params: int | None = None  # illustrative models whose count is stated, not derived
    source: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {type(self.name).__name__}")
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            require_count(f, getattr(self, f), minimum=1)
        for f in ("tied_embeddings", "qkv_bias", "o_bias", "mlp_bias", "qk_norm", "attention_sinks", "router_bias"):
            require_flag(f, getattr(self, f))
        require_choice("mlp", self.mlp, ("gated", "plain"))
        require_choice("norm", self.norm, ("rmsnorm", "layernorm"))
        require_choice("positional", self.positional, ("rope", "learned"))
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.positional == "learned" and not self.max_positions:
            raise ValueError("max_positions is required when positional='learned'")
        if self.sliding_window is not None:
            require_count("sliding_window", self.sliding_window, minimum=1)
        require_count("block_norms", self.block_norms, minimum=1)
        require_count("local_layers", self.local_layers)
        if (self.local_window is None) != (self.local_layers == 0):
            raise ValueError("local_window and local_layers go together: a window for the local layers and how many "
                             f"there are (>= 1); got local_window={self.local_window!r}, "
                             f"local_layers={self.local_layers!r}")
        if self.local_window is not None:
            require_count("local_window", self.local_window, minimum=1)
            if self.local_layers >= self.layers:
                raise ValueError(f"local_layers ({self.local_layers}) must be < layers ({self.layers}); a model whose "
                                 "every layer slides takes sliding_window instead")
            if self.sliding_window is not None:
                raise ValueError("sliding_window (every layer) and local_window (some layers) exclude each other")
        if self.max_positions is not None:
            require_count("max_positions", self.max_positions, minimum=1)
        if self.nominal_params is not None:
            floor = self.embedding_params + self.lm_head_params
            require_count("nominal_params", self.nominal_params, minimum=max(1, floor))
        for f in ("q_rank", "kv_rank", "rope_dim", "nope_dim", "v_dim", "experts", "experts_per_token",
                  "moe_intermediate"):
            if getattr(self, f) is not None:
                require_count(f, getattr(self, f), minimum=1 if f != "rope_dim" else 0)
        require_count("shared_experts", self.shared_experts)
        require_count("dense_layers", self.dense_layers)
        if self.is_mla:
            missing = [f for f in ("rope_dim", "nope_dim", "v_dim") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"kv_rank ({self.kv_rank!r}) makes the attention latent (MLA), which needs "
                                 f"{', '.join(missing)} too")
        if self.is_moe:
            missing = [f for f in ("experts_per_token", "moe_intermediate") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"experts ({self.experts!r}) makes the model a mixture of experts, which needs "
                                 f"{', '.join(missing)} too")
            require_count("experts", self.experts, minimum=1)
            require_count("experts_per_token", self.experts_per_token, minimum=1)
            require_count("moe_intermediate", self.moe_intermediate, minimum=1)
            require_count("dense_layers", self.dense_layers)
            if self.experts_per_token > self.experts:
                raise ValueError("experts_per_token must be <= experts")
            if self.dense_layers > self.layers:
                raise ValueError("dense_layers must be <= layers")

    # --- structure -----------------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.experts is not None

    @property
    def global_layers(self) -> int:
        """Layers that attend (and cache) the whole context: all but the ``local_layers``."""
        return self.layers - self.local_layers

    @property
    def attention_kind(self) -> str:
        """'MLA', 'MHA' (one KV head per query head), 'MQA' (one KV head) or 'GQA' (in between)."""
        if self.is_mla:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    @property
    def attn_dim(self) -> float:
        """Mean of the query-key and value head widths: attention costs 4·attn_dim FLOPs per query-key pair."""
        if self.is_mla:
            return ((self.nope_dim + self.rope_dim) + self.v_dim) / 2
        return self.head_dim

    @property
    def decode_attn_dim(self) -> float:
        """attn_dim of a decode step: ``attn_dim``, except for MLA, whose decode kernels (FlashMLA) work on the
        compressed latent: ``mla_latent_attn_dim`` = (2·kv_rank + rope_dim) / 2 (DeepSeek-V3: 544, i.e. 2,176
        FLOPs per query-key pair per head, against 640 with the heads' own widths)."""
        if self.is_mla:
            return g.mla_latent_attn_dim(self.kv_rank, self.rope_dim)
        return self.attn_dim

    @property
    def _gated(self) -> int:
        return int(self.mlp == "gated")

    @property
    def attention_params_per_layer(self) -> int:
        if self.is_mla:
            return g.mla_attention_params(self.hidden, self.heads, self.q_rank or 0, self.kv_rank, self.rope_dim,
                                          self.nope_dim, self.v_dim)
        sinks = self.heads if self.attention_sinks else 0     # one learned logit per head (gpt-oss)
        return g.attention_params(self.hidden, self.heads, self.kv_heads, self.head_dim, int(self.qkv_bias),
                                  int(self.o_bias)) + sinks

    @property
    def norm_params_per_layer(self) -> int:
        nv = 2 if self.norm == "layernorm" else 1
        if self.block_norms != 2:
            return g.block_norms_params(self.hidden, nv, self.block_norms, int(self.qk_norm), self.head_dim)
        return g.block_norm_params(self.hidden, nv, int(self.qk_norm), self.head_dim)

    @property
    def dense_mlp_params(self) -> int:
        return g.mlp_params(self.hidden, self.intermediate, self._gated, int(self.mlp_bias))

    @property
    def expert_params(self) -> int:
        """Parameters of one expert of one MoE layer (0 for a dense model)."""
        if not self.is_moe:
            return 0
        return g.mlp_params(self.hidden, self.moe_intermediate, self._gated, int(self.mlp_bias))

    @property
    def router_params(self) -> int:
        return self.experts * self.hidden + (self.experts if self.router_bias else 0) if self.is_moe else 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def embedding_params(self) -> int:
        pos = self.max_positions * self.hidden if self.positional == "learned" else 0
        return self.vocab * self.hidden + pos

    @property
    def lm_head_params(self) -> int:
        """Stored lm_head parameters: 0 when tied to the embedding (the same matrix is still read every step)."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def _final_norm_params(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.hidden

    def _blocks(self, experts_touched: float | None) -> float:
        per_layer = self.attention_params_per_layer + self.norm_params_per_layer
        total = self.layers * per_layer + self._final_norm_params
        if not self.is_moe:
            return total + self.layers * self.dense_mlp_params
        e = self.experts if experts_touched is None else experts_touched
        moe = self.router_params + (self.shared_experts + e) * self.expert_params
        return total + self.dense_layers * self.dense_mlp_params + self.moe_layers * moe

    @property
    def block_params(self) -> int:
        """N_blocks: all parameters except the embedding (and learned positions) and the lm_head."""
        if self.nominal_params is not None:
            return self.nominal_params - self.embedding_params - self.lm_head_params
        return int(self._blocks(None))

    @property
    def active_block_params(self) -> float:
        """Block parameters one token uses (MoE: shared weights + experts_per_token routed experts)."""
        if not self.is_moe:
            return self.block_params
        return self._blocks(self.experts_per_token)

    @property
    def params(self) -> int:
        """Total parameter count (each stored matrix once)."""
        if self.nominal_params is not None:
            return self.nominal_params
        return self.embedding_params + self.lm_head_params + self.block_params

    @property
    def active_params(self) -> float:
        """Parameters used per token (= params for a dense model)."""
        if not self.is_moe:
            return self.params
        return self.embedding_params + self.lm_head_params + self.active_block_params

    # --- KV cache ------------------------------------------------------------------------------
    @property
    def kv_values_per_token(self) -> int:
        """Values cached per token over all layers (2 × layers × kv_heads × head_dim; MLA: its latent)."""
        if self.is_mla:
            return g.mla_kv_values_per_token(self.layers, self.kv_rank, self.rope_dim)
        return g.kv_values_per_token(self.layers, self.kv_heads, self.head_dim)

    def kv_bytes_per_token(self, precision="fp16") -> float:
        """KV-cache bytes one token occupies (one sequence)."""
        return g.kv_cache_bytes(self.kv_values_per_token, bytes_per_element(precision), 1, 1)

    def attended_tokens(self, context: int) -> int | float:
        """Tokens whose K/V a step at ``context`` reads (capped by the sliding window).

        With interleaved local and global layers (``local_window``) the mean over the layers,
        ``interleaved_attended_tokens``: the global layers hold and read ``context`` tokens, the local ones
        ``min(context, local_window)``, so ``attended_tokens(c) * kv_bytes_per_token()`` is their per-layer sum
        (a float where the mean is not whole).
        ``context`` may reach ``2 * MAX_COUNT``: a prompt and an answer of up to ``MAX_COUNT`` tokens each.
        """
        context = require_count("context", context, maximum=2 * MAX_COUNT)
        if self.local_window is not None:
            a = g.interleaved_attended_tokens(self.layers, self.local_layers, self.local_window, context)
            return int(a) if a == int(a) else a
        return context if self.sliding_window is None else min(context, self.sliding_window)

    # --- bytes streamed ------------------------------------------------------------------------
    def experts_touched(self, routed_tokens: float) -> float:
        """Expected distinct routed experts per MoE layer for ``routed_tokens`` tokens (0 for dense)."""
        routed_tokens = require_nonnegative("routed_tokens", routed_tokens, maximum=MAX_COUNT)
        if not self.is_moe:
            return 0.0
        return g.expected_experts(self.experts, self.experts_per_token, routed_tokens)

    def streamed_params(self, routed_tokens: int = 1) -> float:
        """Weights one forward step reads for ``routed_tokens`` tokens processed together.

        Blocks (MoE: shared weights + the expected distinct experts), the full lm_head, and one
        embedding row (+ one learned position row) per token.
        """
        p = self.streamed_param_parts(routed_tokens)
        return g.streamed_params(p["blocks"], self.vocab, self.hidden, p["embedding_rows"])

    def streamed_param_parts(self, routed_tokens: int = 1) -> dict:
        """The terms of :meth:`streamed_params` for ``routed_tokens`` tokens processed together.

        ``blocks`` (block weights read), split into ``dense_blocks`` (every block weight but the routed
        experts: attention, dense MLPs, shared experts, routers, norms) and ``experts`` (the expected distinct
        routed experts touched; 0 for a dense model); ``lm_head`` (V·h, read even when tied); ``embedding``
        (parameters of the ``embedding_rows`` rows gathered).
        """
        routed_tokens = require_count("routed_tokens", routed_tokens, minimum=1)
        if self.is_moe:
            touched = self.experts_touched(routed_tokens)
            blocks, dense = self._blocks(touched), self._blocks(0)
            experts = self.moe_layers * touched * self.expert_params
        else:
            blocks = dense = self.block_params
            experts = 0
        # one token-embedding row per token (+ one learned-position row), never more rows than the table has
        rows = min(routed_tokens, self.vocab) * (2 if self.positional == "learned" else 1)
        return {"blocks": blocks, "dense_blocks": dense, "experts": experts, "lm_head": self.vocab * self.hidden,
                "embedding": rows * self.hidden, "embedding_rows": rows}

    @property
    def active_expert_params(self) -> int:
        """Routed-expert parameters one token uses (experts_per_token per MoE layer; 0 for a dense model)."""
        return self.moe_layers * self.experts_per_token * self.expert_params if self.is_moe else 0

    def decode_weight_bytes(self, precision="fp16", batch: int = 1) -> float:
        """Weight bytes one decode step streams for ``batch`` sequences (KV reads not included)."""
        batch = require_count("batch", batch, minimum=1)
        return self.streamed_params(batch) * bytes_per_element(precision)

    def weight_bytes(self, precision="fp16") -> float:
        """Bytes needed to hold all weights."""
        return g.weight_bytes(self.params, bytes_per_element(precision))

    # --- construction --------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any] | str | Path, name: str | None = None,
                       **overrides) -> "ModelSpec":
        """Build a spec from a Hugging Face ``config.json`` (a dict or a path to the file)."""
        if isinstance(config, (str, Path)):
            p = Path(config)
            if not p.is_file():
                raise ValueError(f"config: no such file {str(config)!r}")
            try:
                config = json.loads(p.read_text(encoding="utf-8"))
            except ValueError as e:  # not JSON, not UTF-8
                raise ValueError(f"config: {str(config)!r} is not a JSON config file ({e})") from None
        if not isinstance(config, Mapping):
            raise TypeError(f"config must be a dict or a path to config.json, got {type(config).__name__}")
        c = dict(config)
        for k, v in c.items():
            if not isinstance(v, (str, int, float, list, dict, type(None))):
                raise TypeError(f"config[{k!r}] must be a JSON value (number, string, bool, list, dict or null), "
                                f"got {type(v).__name__}")
        mt = str(c.get("model_type", "")).lower()

        def get(*keys, default=None):
            for k in keys:
                if c.get(k) is not None:
                    return c[k]
            return default

        try:
            layers = get("num_hidden_layers", "n_layer", "num_layers")
            hidden = get("hidden_size", "n_embd", "d_model")
            heads = get("num_attention_heads", "n_head")
            if None in (layers, hidden, heads) or get("vocab_size") is None:
                raise KeyError("num_hidden_layers/hidden_size/num_attention_heads/vocab_size")
        except KeyError as e:
            raise ValueError(f"config: missing required key(s) {e.args[0]}") from None
        # checked before the defaults derived from them (head_dim = hidden // heads, ...)
        layers = require_count("layers", layers, minimum=1)
        hidden = require_count("hidden", hidden, minimum=1)
        heads = require_count("heads", heads, minimum=1)
        is_gpt2 = mt in ("gpt2", "gpt_neo", "gptj")
        is_gemma = mt in ("gemma2", "gemma3_text")        # tied embeddings and four norms per block by default
        kw: dict[str, Any] = dict(
            name=name or c.get("_name_or_path") or mt or "custom",
            layers=layers, hidden=hidden, heads=heads,
            kv_heads=get("num_key_value_heads", default=heads),
            head_dim=get("head_dim", default=hidden // heads),
            intermediate=get("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden),
            vocab=get("vocab_size"),
            tied_embeddings=bool(get("tie_word_embeddings", default=is_gpt2 or is_gemma)),
            mlp="plain" if is_gpt2 else "gated",
            norm="layernorm" if is_gpt2 else "rmsnorm",
            qkv_bias=bool(is_gpt2 or mt == "qwen2" or get("attention_bias", default=False)),
            o_bias=bool(is_gpt2 or get("attention_bias", default=False)),
            mlp_bias=bool(is_gpt2 or mt == "gpt_oss" or get("mlp_bias", default=False)),
            qk_norm=mt in ("qwen3", "qwen3_moe", "gemma3_text"),
            positional="learned" if is_gpt2 else "rope",
            max_positions=get("n_positions", "max_position_embeddings"),
        )
        if get("use_sliding_window", default=True) and get("sliding_window") and mt in ("mistral", "qwen2", "qwen3"):
            kw["sliding_window"] = c["sliding_window"]
        if is_gemma:
            kw["block_norms"] = 4
        if mt == "gpt_oss":
            kw["attention_sinks"] = True
        if get("sliding_window") and mt in ("gemma2", "gemma3_text", "gpt_oss"):
            kinds = c.get("layer_types")
            if kinds is None:       # transformers' defaults: Gemma 2 alternates; Gemma 3 has every 6th layer global
                every = 2 if mt == "gemma2" else get("sliding_window_pattern", default=6)
                kinds = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]
            if not isinstance(kinds, list) or len(kinds) != layers:
                raise ValueError(f"config: layer_types must list one attention kind per layer ({layers})")
            n_local = sum(k == "sliding_attention" for k in kinds)
            if n_local == layers:
                kw["sliding_window"] = c["sliding_window"]
            elif n_local:
                kw.update(local_window=c["sliding_window"], local_layers=n_local)
        mla_keys = ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        if get("kv_lora_rank") is not None and any(c.get(k) is None for k in mla_keys):
            raise ValueError(f"config: kv_lora_rank (multi-head latent attention) needs {', '.join(mla_keys)}")
        if get("kv_lora_rank") is not None:
            kw.update(q_rank=get("q_lora_rank"), kv_rank=c["kv_lora_rank"], rope_dim=c["qk_rope_head_dim"],
                      nope_dim=c["qk_nope_head_dim"], v_dim=c["v_head_dim"], head_dim=c["v_head_dim"],
                      kv_heads=heads)
        n_experts = get("n_routed_experts", "num_local_experts", "num_experts")
        if n_experts:
            kw.update(experts=n_experts, experts_per_token=get("num_experts_per_tok"),
                      shared_experts=get("n_shared_experts", default=0),
                      moe_intermediate=get("moe_intermediate_size", default=kw["intermediate"]),
                      dense_layers=get("first_k_dense_replace", default=0),
                      router_bias=get("topk_method") == "noaux_tc" or mt == "gpt_oss")
        kw.update(overrides)
        return cls(**kw)

    def scaled(self, **changes) -> "ModelSpec":
        """A copy with some fields changed (e.g. fewer layers for a model that fits a laptop)."""
        valid = {f.name for f in fields(self)}
        bad = sorted(set(changes) - valid)
        if bad:
            raise TypeError(f"unknown ModelSpec field(s) {bad}; valid fields: {sorted(valid)}")
        return replace(self, **changes)

    def summary(self) -> dict:
        return {"name": self.name, "params": self.params, "attention": self.attention_kind, "layers": self.layers,
                "hidden": self.hidden, "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "kv_values_per_token": self.kv_values_per_token}


def _catalog() -> dict:
    return data.load_catalog("models")["models"]


@lru_cache(maxsize=None)
def _entry(key: str) -> dict:
    e = _catalog()[key]
    if "engine_config" not in e:
        return e
    # the raw config.json (course_lib/data/engine_configs.json), kept whole: one copy of the file
    raw = data.load_catalog("engine_configs")["configs"][e["engine_config"]]
    return {**e, "config": raw["config"], "config_source": raw["source"]}


def catalog_entry(name: str) -> dict:
    """The raw catalog record (config, source, published_params) of a catalog model.

    Entries that name an ``engine_config`` carry that raw config.json of ``course_lib/data/engine_configs.json``
    (the file the Hugging Face engine builds) as their ``config``, with its address as ``config_source``.
    """
    key = require_choice("model", name, _catalog())
    return _entry(key)


@lru_cache(maxsize=None)
def _build(key: str) -> ModelSpec:
    e = _entry(key)
    extra = {"nominal_params": e["nominal_params"]} if e.get("nominal_params") else {}
    return ModelSpec.from_hf_config(e["config"], name=key, source=e["source"], **extra)


def get_model(model) -> ModelSpec:
    """A catalog model by name (lowercase, hyphens: 'mistral-7b', 'llama-2-7b', …); a ModelSpec passes through."""
    if isinstance(model, ModelSpec):
        return model
    return _build(require_choice("model", model, _catalog()))


def list_models(every: bool = False) -> list[str]:
    """Catalog model names: the lessons' models, or with ``every=True`` also those marked ``listed: false``
    (added with the published-measurement set; every one of them works with :func:`get_model`)."""
    if not isinstance(every, bool):
        raise TypeError(f"every must be True or False, got {type(every).__name__}")
    return [k for k, e in _catalog().items() if every or e.get("listed", True)]
