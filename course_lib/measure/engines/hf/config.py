"""The Hugging Face engine's configurations: a ``config.json`` checked, its course spec, and the model built offline.

Lessons: 08

A causal LM is built from a ``config.json`` (a dict, a path, or a name of ``course_lib/data/engine_configs.json``)
with ``AutoConfig.for_model`` and ``AutoModelForCausalLM.from_config``: random weights, fp32 on the CPU whatever
``torch_dtype`` the file names (or, asked for, bf16 / fp16 on a CUDA GPU, drawn there), the default (SDPA) attention,
end-of-sequence disabled. The process is set offline
(``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``) before transformers is imported: nothing is downloaded. Before
anything is allocated the weights (``ModelSpec.from_hf_config(...).params`` x 4 bytes in fp32) are compared with the
memory the device has available; a model that does not fit is refused with both numbers.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import torch

from course_lib.core import data
from course_lib.core.models import ModelSpec
from course_lib.core.validation import require_choice, require_count
from course_lib.measure.device import available_memory, resolve_device

__all__ = ["SUPPORTED_TYPES", "DEFAULT_CONFIGS", "FAST_CONFIGS", "FAST_OVERRIDES", "ModelTooLarge",
           "transformers_available", "require_transformers", "engine_configs", "load_config", "check_config",
           "hf_config", "spec_of", "count_parameters", "check_fits", "tiny_config",
           "fast_config", "build_model", "disable_eos", "PROBE_HIDDEN", "PROBE_HEADS", "PROBE_VOCAB", "DTYPES",
           "ATTENTION"]

#: the architectures whose parameter count ``ModelSpec.from_hf_config`` reproduces (tested on tiny configs)
SUPPORTED_TYPES = ("gpt2", "llama", "mistral", "qwen2", "qwen3")
#: the benchmark's default configurations (names of ``course_lib/data/engine_configs.json``)
DEFAULT_CONFIGS = ("gpt2", "qwen2.5-0.5b", "qwen3-0.6b", "llama-3.2-1b")
#: ``--fast``: two of them cut to 2 layers and a vocabulary of 8192 (a smoke run of a few tens of seconds)
FAST_CONFIGS = ("gpt2", "qwen3-0.6b")
FAST_OVERRIDES = {"layers": 2, "vocab_size": 8192}
#: the weight formats :func:`build_model` makes (the course's names, as :mod:`course_lib.measure.probes` has them)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: the attention implementations :func:`build_model` accepts: PyTorch's fused SDPA (transformers' default), eager
ATTENTION = ("sdpa", "eager")
#: the tiny copies of the engine probe (:func:`tiny_config`): hidden size, heads, vocabulary
PROBE_HIDDEN = 64
PROBE_HEADS = 4
PROBE_VOCAB = 256
#: memory kept free beyond the fp32 weights (activations, K/V cache, the interpreter): 15 % and 0.5 GB
MEMORY_HEADROOM = (1.15, 0.5e9)

_REQUIRED = {  # model_type -> (what, accepted keys) the engine and the spec need
    "gpt2": (("layers", ("n_layer", "num_hidden_layers")), ("hidden size", ("n_embd", "hidden_size")),
             ("heads", ("n_head", "num_attention_heads")), ("vocabulary", ("vocab_size",))),
}
_DECODER = (("layers", ("num_hidden_layers",)), ("hidden size", ("hidden_size",)),
            ("heads", ("num_attention_heads",)), ("MLP width", ("intermediate_size",)),
            ("vocabulary", ("vocab_size",)))


#: keys a config.json may leave out whose transformers default changes the parameter count or the K/V size
_FILLED = ("head_dim", "num_key_value_heads", "tie_word_embeddings", "attention_bias", "mlp_bias", "n_inner",
           "sliding_window", "use_sliding_window")


class ModelTooLarge(ValueError):
    """A model whose fp32 weights would not fit in this machine's available memory (raised before allocation)."""


# --------------------------------------------------------------------------------------------------
# transformers, offline
# --------------------------------------------------------------------------------------------------
def transformers_available() -> bool:
    """Whether transformers can be imported (the ``engines`` extra is installed)."""
    import importlib.util
    return importlib.util.find_spec("transformers") is not None


def require_transformers():
    """Import transformers offline (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1`` set first) and return it."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import transformers
    except ImportError as e:
        raise ImportError("the Hugging Face engine needs transformers: pip install 'course-lib[engines]' "
                          "(or make install)") from e
    transformers.logging.set_verbosity_error()
    return transformers


# --------------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------------
def engine_configs() -> dict:
    """{name: {"display", "source", "params", "config"}} of ``course_lib/data/engine_configs.json`` (a copy)."""
    return data.load_catalog("engine_configs", copy=True)["configs"]


def load_config(config) -> tuple[str, dict]:
    """(name, raw config dict) of ``config``: a dict, a path to a config.json, or a name of :func:`engine_configs`."""
    if isinstance(config, Mapping):
        cfg = dict(config)
        return str(cfg.get("_name_or_path") or cfg.get("model_type") or "config"), cfg
    if isinstance(config, Path) or (isinstance(config, str) and (config.endswith(".json") or os.sep in config)):
        p = Path(config)
        if not p.is_file():
            raise ValueError(f"config: no such file {str(config)!r}")
        try:
            cfg = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"config: {str(config)!r} is not valid JSON ({e})") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"config: {str(config)!r} must hold a JSON object, got {type(cfg).__name__}")
        name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
        return name, cfg
    if isinstance(config, str):
        catalog = engine_configs()
        key = require_choice("config", config, catalog)
        return key, catalog[key]["config"]
    raise TypeError(f"config must be a dict, a path to config.json or a name of {', '.join(DEFAULT_CONFIGS)}, "
                    f"got {type(config).__name__}")


def check_config(cfg: Mapping[str, Any], name: str = "config") -> dict:
    """``cfg`` checked: a supported ``model_type`` and every key the engine needs, each a whole number >= 1."""
    if not isinstance(cfg, Mapping):
        raise TypeError(f"{name} must be a dict (a config.json), got {type(cfg).__name__}")
    mt = cfg.get("model_type")
    if mt is None:
        raise ValueError(f"{name}: missing key 'model_type' (one of {', '.join(SUPPORTED_TYPES)})")
    if mt not in SUPPORTED_TYPES:
        raise ValueError(f"{name}['model_type']: unknown architecture {mt!r}; supported: {', '.join(SUPPORTED_TYPES)}")
    for what, keys in _REQUIRED.get(mt, _DECODER):
        present = [k for k in keys if cfg.get(k) is not None]
        if not present:
            raise ValueError(f"{name}: missing key {keys[0]!r} ({what}) for model_type {mt!r}")
        v = cfg[present[0]]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}[{present[0]!r}] must be a whole number >= 1, got {v!r}")
    for key in ("num_key_value_heads", "head_dim"):
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name}[{key!r}] must be a whole number >= 1, got {v!r}")
    return dict(cfg)


def hf_config(cfg: Mapping[str, Any]):
    """The transformers config object of a checked config (no weights): ``AutoConfig.for_model``."""
    tr = require_transformers()
    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "transformers_version",
                                                         "torch_dtype", "dtype", "_name_or_path")}
    return tr.AutoConfig.for_model(cfg["model_type"], **kwargs)


def spec_of(cfg: Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """The course's :class:`ModelSpec` of a checked config (``ModelSpec.from_hf_config``).

    Keys the file leaves out are filled with the defaults transformers builds the model with (Qwen3's
    ``head_dim`` is 128 whatever ``hidden_size / num_attention_heads`` gives), so that the spec counts the
    parameters of the model :func:`build_model` instantiates; without transformers, the raw file is used.
    """
    c = check_config(cfg)
    if transformers_available():
        full = hf_config(c).to_dict()
        filled = {k: full[k] for k in _FILLED if k in full and k not in c}
        kv, heads = filled.get("num_key_value_heads"), c.get("num_attention_heads", c.get("n_head"))
        if kv is not None and heads is not None and (kv > heads or heads % kv):
            raise ValueError(f"config: missing key 'num_key_value_heads'; transformers' default for model_type "
                             f"{c['model_type']!r} ({kv}) does not divide num_attention_heads ({heads}): give it")
        c = {**filled, **c}
    return ModelSpec.from_hf_config(c, name=name or c.get("model_type"))


def count_parameters(config) -> int:
    """Parameters of the transformers model of ``config``, instantiated on the meta device (no memory)."""
    _, cfg = load_config(config)
    tr = require_transformers()
    hfc = hf_config(check_config(cfg))
    with torch.device("meta"):
        model = tr.AutoModelForCausalLM.from_config(hfc, dtype=torch.float32)
    return sum(p.numel() for p in model.parameters())


def check_fits(spec: ModelSpec, available: int | None = None, *, dtype: str = "fp32", device="cpu") -> int:
    """The bytes a model needs (its weights in ``dtype`` x 1.15 + 0.5 GB); :class:`ModelTooLarge` when ``available``
    (default: the memory ``device`` may still allocate, :func:`course_lib.measure.device.available_memory`) is less."""
    element = require_choice("dtype", dtype, DTYPES)
    weights = spec.params * torch.tensor([], dtype=DTYPES[element]).element_size()
    need = int(weights * MEMORY_HEADROOM[0] + MEMORY_HEADROOM[1])
    have = available_memory(device)[0] if available is None else require_count("available", available)
    where = "this machine has" if resolve_device(device).type == "cpu" else "the GPU has"
    if need > have:
        raise ModelTooLarge(f"model {spec.name!r} does not fit: {spec.params:,} parameters need "
                            f"{weights / 1e9:.2f} GB in {element} ({need / 1e9:.2f} GB with activations and cache), "
                            f"{where} {have / 1e9:.2f} GB available")
    return need


def tiny_config(cfg: Mapping[str, Any], layers: int = 2) -> dict:
    """A tiny copy of ``cfg``, same architecture and options: ``layers`` layers, hidden 64, 4 heads of 16 (the
    key/value grouping kept where 4 heads allow it), MLP 128, vocabulary 256, no token ids."""
    c = check_config(cfg)
    layers = require_count("layers", layers, minimum=1, maximum=64)
    out = dict(c)
    mt = c["model_type"]
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        out.pop(k, None)
    if mt == "gpt2":
        out.update(n_layer=layers, n_embd=PROBE_HIDDEN, n_head=PROBE_HEADS, vocab_size=PROBE_VOCAB)
        out.pop("n_inner", None)
        return out
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    group = heads // kv if heads % kv == 0 else 1
    out.update(num_hidden_layers=layers, hidden_size=PROBE_HIDDEN, num_attention_heads=PROBE_HEADS,
               num_key_value_heads=max(1, PROBE_HEADS // min(group, PROBE_HEADS)),
               head_dim=PROBE_HIDDEN // PROBE_HEADS, intermediate_size=2 * PROBE_HIDDEN, vocab_size=PROBE_VOCAB)
    for k in ("layer_types", "max_window_layers"):
        out.pop(k, None)
    return out


def _with_overrides(cfg: dict, layers: int | None = None, vocab_size: int | None = None) -> dict:
    """``cfg`` with ``layers`` layers and a ``vocab_size`` vocabulary (token ids dropped: they may not fit it)."""
    out = dict(cfg)
    if layers is not None:
        out["n_layer" if out.get("model_type") == "gpt2" else "num_hidden_layers"] = layers
        out.pop("layer_types", None)
        out.pop("max_window_layers", None)
    if vocab_size is not None:
        out["vocab_size"] = vocab_size
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            out.pop(k, None)
    return out


def fast_config(config) -> dict:
    """The smoke-run cut of ``config`` (a name, path or dict) that ``--fast`` measures: :data:`FAST_OVERRIDES`
    (2 layers, a vocabulary of 8192; token ids dropped, they may not fit it)."""
    _, cfg = load_config(config)
    return _with_overrides(cfg, FAST_OVERRIDES["layers"], FAST_OVERRIDES["vocab_size"])


def build_model(config, *, seed: int = 0, available: int | None = None, device="cpu", dtype: str = "fp32",
                attention: str = "sdpa"):
    """(model, spec): a transformers causal LM of ``config`` with random weights, in eval mode.

    ``config``: a dict, a path to a config.json, or a name of :func:`engine_configs`. Refused before
    allocation when it would not fit (:func:`check_fits`; ``available`` replaces the device's figure).
    ``device`` ('cpu' or 'cuda'), ``dtype`` (a name of :data:`DTYPES`): where and in what the weights are made;
    on a GPU they are drawn there directly (an 8B model in seconds, never through the CPU). ``attention``: the
    attention implementation (:data:`ATTENTION`; ``"sdpa"``, PyTorch's fused attention, is transformers' default).
    """
    name, cfg = load_config(config)
    spec = spec_of(cfg, name)
    dev = resolve_device(device)
    dtype = require_choice("dtype", dtype, DTYPES)
    attention = require_choice("attention", attention, ATTENTION)
    check_fits(spec, available, dtype=dtype, device=dev)
    tr = require_transformers()
    hfc = hf_config(cfg)
    torch.manual_seed(seed)
    with dev:
        model = tr.AutoModelForCausalLM.from_config(hfc, dtype=DTYPES[dtype], attn_implementation=attention)
    model.to(dev).eval()
    disable_eos(model)
    return model, spec


def disable_eos(model) -> None:
    """No end-of-sequence on the model's own generation config: ``generate()`` fills unset values from it."""
    gc = model.generation_config
    gc.eos_token_id = None
    gc.pad_token_id = 0
    gc.bos_token_id = None
