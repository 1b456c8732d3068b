"""Hugging Face transformers on this machine: ``generate()`` measured, and predicted from probes only.

Lessons: 07, 08

(Reached through ``python -m course_lib.measure.validate --engine hf``; lesson 08's engine section is to use it.)

::

    from course_lib.measure.engines import hf
    model, spec = hf.build_model("qwen2.5-0.5b")            # random weights, fp32, CPU; no download
    [t] = hf.measure_engine(model, prompts=[128], new_tokens=16, repeats=3)
    t.ttft, t.tpot, t.tpot_verdict.verdict                  # medians (s) and the measurement verdict
    ov = hf.probe_engine_overhead(hf.load_config("qwen2.5-0.5b")[1])   # tiny 2- and 8-layer copies
    cal = hf.calibrate_for({spec.name: spec}, [128])        # the course's probes (never the model)
    hf.predict_engine_tpot(spec, 128, 16, cal, ov).seconds
    report = hf.run()                                        # python -m course_lib.measure.validate --engine hf

**The engine.** A causal LM is built from a ``config.json`` (a dict, a path, or a name of
``course_lib/data/engine_configs.json``) with ``AutoConfig.for_model`` and
``AutoModelForCausalLM.from_config``: random weights, fp32 on the CPU whatever ``torch_dtype`` the file
names, the default (SDPA) attention. The process is set offline (``HF_HUB_OFFLINE=1``,
``TRANSFORMERS_OFFLINE=1``) before transformers is imported: nothing is downloaded. Before anything is
allocated the fp32 weights (``ModelSpec.from_hf_config(...).params`` x 4 bytes) are compared with the
memory this machine has available; a model that does not fit is refused with both numbers.

**The measurement** is ``model.generate()`` as a user runs it: greedy, ``max_new_tokens`` =
``min_new_tokens`` = N, end-of-sequence disabled in the generation config (``eos_token_id=None``, set
on the model's own generation config too, since ``generate()`` fills unset values from it), the
engine's own dynamic KV cache. A streamer (:class:`TokenClock`, a ``BaseStreamer``) records
``time.perf_counter()`` at every token it is handed: TTFT = first new token - call start; the step
times are the gaps between consecutive tokens (N - 1 per run). Prompts are random token ids. Repeats
are interleaved over the prompts (P1 P2 P1 P2 ...), so that a drift of the machine lands on every point
alike. TPOT is the median of all step times of a prompt, TTFT the median over the repeats. The
benchmark re-runs its probes before and after each repeat and judges each point repeat by repeat, on
the ratios measured / predicted of its repeats (:func:`_compared`, through
:func:`course_lib.core.quality.timing_verdict`, with the CPU steal of the interval where
``/proc/stat`` reports it). The CPU threads follow
:func:`course_lib.measure.threads.host_thread_policy`.

**The allocator.** A prefill allocates each layer's activations and frees them before the next layer.
Left to itself, glibc sometimes serves them from its heap and sometimes maps them fresh and pays a page
fault per 4 KiB page: five identical 960-token prefills of Qwen2.5-0.5B took 0 to 433,000 faults and
3.4 to 4.4 s. The probes and the engine therefore run with the allocator pinned
(:func:`course_lib.measure.threads.pin_allocator`): a block of a given size then allocates alike in both
(at most 32 MiB: from a heap that keeps its memory; larger: mapped fresh every time, in the probe as in the
model). Each timed ``generate()`` counts its minor page faults (``EngineTiming.faults``), and the report
prints them: with the allocator pinned, the default configurations' medians were 0 to 22,000 per call (0 at
128 tokens), and about 330,000-610,000 per 960-token prefill of
Qwen2-1.5B, whose 34 MB MLP activations exceed the threshold (the GEMM probes of those shapes pay the same
faults).

**The prediction** (formulas ``engine_decode_time`` and ``engine_prefill_time`` of
:mod:`course_lib.core.formulas`, evaluated through :mod:`course_lib.core.numeric`) uses probes only,
never the model it predicts:

* the course's calibrated terms (:mod:`course_lib.measure.calibrate`, :mod:`course_lib.measure.predict`):
  weights at the GEMV bandwidth of each matrix shape, the K/V read at the attention probe's rate
  (``predict_tpot``'s ``weights`` and ``kv`` terms), for prefill the GEMM rate of each shape at P rows and
  the attention products at their rate;
* what this engine does per step beyond that: its **dynamic cache concatenates** every layer's K and V
  with the new token's (``torch.cat``: the whole cache read and written again, 2 x context x K/V bytes per
  token at the copy bandwidth), right before attention reads them (at the attention probe's rate: K/V
  just written are read no faster for being in the cache, see :func:`predict_engine_tpot`);
  ``generate()`` copies the last position's logits to fp32 and takes the
  argmax (3 x vocab x 4 bytes at the copy bandwidth); the prefill writes the prompt's K/V into the cache
  and computes the logits of the last position only (``logits_to_keep=1``: the lm_head is one GEMV);
  SDPA skips the masked half of the causal scores (causal FLOPs); a prefill's **elementwise passes** over
  its P-row activations (MLP activation, norms, residual adds, rotary embedding) at the time
  :func:`measure_prefill_passes` measures for the model's widths (``Calibration.passes``, filled by
  :func:`calibrate_for`): the tiny copies below cannot show them, and at 960 rows they were 8 % of
  Qwen2.5-0.5B's prefill here;
* the engine's **fixed per-step cost** (Python, module calls and dispatch per layer, cache bookkeeping,
  the generation loop and its stopping checks), measured by :func:`probe_engine_overhead` on tiny copies
  of the same architecture (same ``model_type`` and options, hidden 64, vocab 256) with 2 and 8 layers:
  per layer = (t8 - t2) / 6, fixed = t2 - 2 x per layer, for a decode step and for a prefill. The tiny
  model runs from cache; in the real model one layer of weights streams through the caches between two
  runs of the same layer's code, so both costs are scaled by the course's cold/hot op-cost ratio at that
  stream (``Calibration.op_costs``; 1 for a calibration without the cold probes).

``uncalibrated`` is the course's first-principles estimate on this machine's copy bandwidth and
square-matmul rate (``course_lib.estimate``), no engine term.
"""
from __future__ import annotations

import gc
import json
import math
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from course_lib.core import data
from course_lib.core import numeric
from course_lib.core.estimator import estimate
from course_lib.core.models import ModelSpec
from course_lib.core.quality import THRESHOLDS, read_cpu_steal, summarize_verdicts, timing_verdict
from course_lib.core.roofline import compute_time, memory_time
from course_lib.core.validation import require_choice, require_count, require_counts
from course_lib.measure.calibrate import (PROBES, Calibration, Drift, ProbeSettings, calibrate, probe_jobs,
                                          reprobe, reprobe_gemv, stream_between_ops,
                                          weight_matrices)
from course_lib.measure.device import last_level_cache_bytes
from course_lib.measure.predict import Prediction, check_calibration
from course_lib.measure.steady import keep_threads, steady_timeit
from course_lib.measure.threads import host_thread_policy, minor_faults, pin_allocator, proc_stat
from course_lib.measure.timing import Threads, progress_bar

__all__ = ["SUPPORTED_TYPES", "DEFAULT_CONFIGS", "FAST_CONFIGS", "PROMPTS", "NEW_TOKENS", "REPEATS",
           "BENCHMARK_REPEATS", "FAST_PROMPTS", "FAST_NEW_TOKENS", "PROBE_LAYERS", "ModelTooLarge",
           "transformers_available", "require_transformers",
           "engine_configs", "load_config", "check_config", "spec_of", "count_parameters", "available_memory_bytes",
           "check_fits", "tiny_config", "fast_config", "build_model", "TokenClock", "generate_timed", "EngineTiming",
           "measure_engine", "EngineOverhead", "probe_engine_overhead", "pool_overheads",
           "cold_factor",
           "predict_engine_tpot", "predict_engine_ttft", "calibrate_for", "passes_key", "measure_prefill_passes",
           "EnginePoint", "EngineReport", "run",
           "LAST_LINE_RE", "COLUMNS", "NOISY_EXIT"]

#: the architectures whose parameter count ``ModelSpec.from_hf_config`` reproduces (tested on tiny configs)
SUPPORTED_TYPES = ("gpt2", "llama", "mistral", "qwen2", "qwen3")
#: the benchmark's default configurations (names of ``course_lib/data/engine_configs.json``)
DEFAULT_CONFIGS = ("gpt2", "qwen2.5-0.5b", "qwen3-0.6b", "llama-3.2-1b")
#: ``--fast``: two of them cut to 2 layers and a vocabulary of 8192 (a smoke run of a few tens of seconds)
FAST_CONFIGS = ("gpt2", "qwen3-0.6b")
FAST_OVERRIDES = {"layers": 2, "vocab_size": 8192}
PROMPTS = (128, 960)
NEW_TOKENS = 16
REPEATS = 3
#: repeats of the benchmark (``run``; a lesson measures ``REPEATS``): each is bracketed by probe sets, and 5 of
#: them average the machine's drift better than 3 (five unseen configurations on the 2-core Xeon: TPOT max
#: |error| 0.140, 0.158 and 0.197 in three runs of 3 repeats, 0.063 with 5; 12 min instead of 7)
BENCHMARK_REPEATS = 5
FAST_PROMPTS = (16, 64)
FAST_NEW_TOKENS = 8
#: the tiny copies of the engine probe: layers, hidden size, heads, vocabulary, prompt, new tokens, repeats.
#: 2 and 8 layers: the per-layer cost is a difference of two timings, and 6 layers apart it varies 3x less than
#: 2 apart (five probes of Qwen2-1.5B's architecture on the 2-core Xeon: 0.213-0.232 ms per layer with 2 and 8;
#: 0.214-0.410 with 2 and 4, whose outlier made a 28-layer step's overhead 12.2 ms instead of 6.7)
PROBE_LAYERS = (2, 8)
PROBE_HIDDEN = 64
PROBE_HEADS = 4
PROBE_VOCAB = 256
PROBE_PROMPT = 16
PROBE_NEW_TOKENS = 16
PROBE_REPEATS = 5
#: memory kept free beyond the fp32 weights (activations, K/V cache, the interpreter): 15 % and 0.5 GB
MEMORY_HEADROOM = (1.15, 0.5e9)
#: ``python -m course_lib.measure.validate --engine hf`` exits with this status when a measured point was not reliable
NOISY_EXIT = 3

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


def _hf_config(cfg: Mapping[str, Any]):
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
        full = _hf_config(c).to_dict()
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
    hf_config = _hf_config(check_config(cfg))
    with torch.device("meta"):
        model = tr.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
    return sum(p.numel() for p in model.parameters())


def available_memory_bytes() -> int | None:
    """Memory this process may still allocate: ``MemAvailable`` of ``/proc/meminfo``, capped by the cgroup
    limit (v2 or v1, :func:`course_lib.measure.device.cgroup_memory_room`); None where neither is known."""
    from course_lib.measure import device

    found = [x for x in (device._meminfo_available(), device.cgroup_memory_room()) if x is not None]
    return min(found) if found else None


def check_fits(spec: ModelSpec, available: int | None = None) -> int:
    """The bytes a model needs (fp32 weights x 1.15 + 0.5 GB); :class:`ModelTooLarge` when ``available``
    (default :func:`available_memory_bytes`; None: unknown, not checked) is less."""
    weights = spec.params * 4
    need = int(weights * MEMORY_HEADROOM[0] + MEMORY_HEADROOM[1])
    have = available_memory_bytes() if available is None else require_count("available", available)
    if have is not None and need > have:
        raise ModelTooLarge(f"model {spec.name!r} does not fit: {spec.params:,} parameters need "
                            f"{weights / 1e9:.2f} GB in fp32 ({need / 1e9:.2f} GB with activations and cache), "
                            f"this machine has {have / 1e9:.2f} GB available")
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


def build_model(config, *, seed: int = 0, available: int | None = None):
    """(model, spec): a transformers causal LM of ``config`` with random weights, fp32, on the CPU, in eval mode.

    ``config``: a dict, a path to a config.json, or a name of :func:`engine_configs`. Refused before
    allocation when it would not fit (:func:`check_fits`; ``available`` replaces the machine's figure).
    """
    name, cfg = load_config(config)
    spec = spec_of(cfg, name)
    check_fits(spec, available)
    tr = require_transformers()
    hf_config = _hf_config(cfg)
    torch.manual_seed(seed)
    model = tr.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
    model.to("cpu").eval()
    _disable_eos(model)
    return model, spec


# --------------------------------------------------------------------------------------------------
# Timing generate()
# --------------------------------------------------------------------------------------------------
def _generation_config(new_tokens: int):
    tr = require_transformers()
    return tr.GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1,
                               eos_token_id=None, pad_token_id=0, use_cache=True)


def _disable_eos(model) -> None:
    """No end-of-sequence on the model's own generation config either: ``generate()`` fills unset values from it."""
    gc = model.generation_config
    gc.eos_token_id = None
    gc.pad_token_id = 0
    gc.bos_token_id = None


_STREAMER = None


def TokenClock():
    """A ``transformers`` ``BaseStreamer`` whose ``put`` records ``time.perf_counter()``: ``.times[0]`` is the
    prompt (handed over when generation starts), ``.times[1:]`` one per new token; ``.tokens`` counts them."""
    global _STREAMER
    if _STREAMER is None:
        tr = require_transformers()

        class _TokenClock(tr.generation.streamers.BaseStreamer):
            def __init__(self):
                self.times: list[float] = []
                self.tokens = 0
                self.ended = False

            def put(self, value):
                self.times.append(time.perf_counter())
                if len(self.times) > 1:
                    self.tokens += int(value.numel())

            def end(self):
                self.ended = True

        _STREAMER = _TokenClock
    return _STREAMER()


def generate_timed(model, prompt_ids: torch.Tensor, new_tokens: int) -> tuple[float, list[float]]:
    """(TTFT, step times) of one ``model.generate()`` of ``new_tokens`` greedy tokens after ``prompt_ids`` (1 x P)."""
    new_tokens = require_count("new_tokens", new_tokens, minimum=2)
    gc = _generation_config(new_tokens)
    clock = TokenClock()
    mask = torch.ones_like(prompt_ids)
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model.generate(prompt_ids, attention_mask=mask, generation_config=gc, streamer=clock)
    produced = out.shape[-1] - prompt_ids.shape[-1]
    if produced != new_tokens or clock.tokens != new_tokens:
        raise RuntimeError(f"generate() produced {produced} tokens ({clock.tokens} streamed), expected {new_tokens}: "
                           f"end-of-sequence was not disabled")
    stamps = clock.times[1:]
    return stamps[0] - t0, [b - a for a, b in zip(stamps, stamps[1:])]


def _max_positions(model) -> int | None:
    c = model.config
    return getattr(c, "n_positions", None) or getattr(c, "max_position_embeddings", None)


def _verdict(times, steal):
    return timing_verdict(list(times), steal=steal)


def _steal(before, after):
    if not (before and after):
        return None
    try:
        return read_cpu_steal(before, after)
    except ValueError:
        return None


@dataclass(frozen=True)
class EngineTiming:
    """``generate()`` at one prompt length: every repeat's TTFT and every step time, with their verdicts."""

    prompt: int
    new_tokens: int
    ttft_times: tuple[float, ...]
    step_times: tuple[float, ...]
    steal: float | None = None
    #: minor page faults of each timed ``generate()`` (one per repeat; empty where the system does not count)
    faults: tuple[int, ...] = ()

    @property
    def ttft_verdict(self):
        return _verdict(self.ttft_times, self.steal)

    @property
    def tpot_verdict(self):
        return _verdict(self.step_times, self.steal)

    @property
    def ttft(self) -> float:
        return statistics.median(self.ttft_times)

    @property
    def tpot(self) -> float:
        return statistics.median(self.step_times)

    @property
    def median_faults(self) -> float | None:
        """The median minor page faults of one timed ``generate()`` (None where they were not counted)."""
        return statistics.median(self.faults) if self.faults else None

    @property
    def mean_context(self) -> float:
        """Mean context of the timed steps: step i (1 .. N-1) attends to prompt + i tokens."""
        return self.prompt + self.new_tokens / 2

    @property
    def repeats(self) -> int:
        return len(self.ttft_times)

    def repeat_steps(self, r: int) -> tuple[float, ...]:
        """The step times of repeat ``r`` (0-based; its ``new_tokens - 1`` gaps)."""
        r = require_count("r", r, minimum=0, maximum=max(0, self.repeats - 1))
        n = self.new_tokens - 1
        return self.step_times[r * n:(r + 1) * n]


def measure_engine(model, prompts: Sequence[int], new_tokens: int = NEW_TOKENS, repeats: int = REPEATS, *,
                   seed: int = 0, warmup: bool = True, threads: int | None = None,
                   between: Callable[[], object] | None = None) -> list[EngineTiming]:
    """Time ``generate()`` at each prompt length, ``repeats`` times, interleaved and counterbalanced
    (P1 P2, P2 P1, P1 P2 ...: a drift, or whatever ``between`` leaves behind, lands on every prompt alike).

    ``threads``: CPU threads (default: :func:`~course_lib.measure.threads.host_thread_policy`). A warm-up
    generation (8 tokens, 2 new) runs first unless ``warmup=False``. ``between``: called (untimed) before
    the first repeat and after each one; the benchmark re-runs its GEMV and GEMM probes there, so that the
    prediction sees the rates the machine had while the engine ran. The allocator is pinned first
    (:func:`~course_lib.measure.threads.pin_allocator`, as the probes are), and each timed call's minor page
    faults are counted (``EngineTiming.faults``).
    """
    if between is not None and not callable(between):
        raise TypeError(f"between must be a function of no arguments or None, got {type(between).__name__}")
    prompts = require_counts("prompts", prompts)
    new_tokens = require_count("new_tokens", new_tokens, minimum=2, maximum=4096)
    repeats = require_count("repeats", repeats, minimum=1, maximum=1000)
    limit = _max_positions(model)
    if limit is not None and max(prompts) + new_tokens > limit:
        raise ValueError(f"prompts: the longest prompt ({max(prompts)}) + new_tokens ({new_tokens}) exceeds the "
                         f"model's {limit} positions")
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    nthreads = host_thread_policy(threads).threads
    ttft = {p: [] for p in prompts}
    steps = {p: [] for p in prompts}
    faults: dict[int, list[int]] = {p: [] for p in prompts}
    pin_allocator()
    with Threads(nthreads):
        if warmup:
            generate_timed(model, torch.randint(0, vocab, (1, 8), generator=gen), 2)
        before = proc_stat()
        for r in range(repeats):
            if between is not None:
                between()
            for p in (prompts if r % 2 == 0 else prompts[::-1]):   # P1 P2, P2 P1, ...: no prompt always first
                ids = torch.randint(0, vocab, (1, p), generator=gen)
                f0 = minor_faults()
                t, gaps = generate_timed(model, ids, new_tokens)
                f1 = minor_faults()
                ttft[p].append(t)
                steps[p].extend(gaps)
                if f0 is not None and f1 is not None:
                    faults[p].append(f1 - f0)
        steal = _steal(before, proc_stat())
        if between is not None:
            between()
    return [EngineTiming(p, new_tokens, tuple(ttft[p]), tuple(steps[p]), steal, tuple(faults[p])) for p in prompts]


# --------------------------------------------------------------------------------------------------
# The engine probe: per-step cost of tiny copies at 2 and 8 layers
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineOverhead:
    """The engine's fixed cost per decode step and per prefill, split into a part per layer and a fixed part.

    From tiny copies (:func:`tiny_config`) with ``layers`` = (a, b) layers: per layer = (t_b - t_a) / (b - a),
    fixed = t_a - a x per layer (each clamped at 0, ``clamped`` says which). ``decode``/``prefill``: the
    :class:`EngineTiming` of each copy.
    """

    model_type: str
    layers: tuple[int, int]
    step_fixed: float
    step_per_layer: float
    prefill_fixed: float
    prefill_per_layer: float
    decode: tuple[EngineTiming, EngineTiming]
    clamped: tuple[str, ...] = ()
    threads: int | None = None
    #: the probe sets pooled into this one (:func:`pool_overheads`; empty for a single probe)
    sets: tuple = ()

    @property
    def verdicts(self) -> list:
        return [t.tpot_verdict for t in self.decode] + [t.ttft_verdict for t in self.decode]

    def step(self, layers: int) -> float:
        return self.step_fixed + layers * self.step_per_layer

    def step_range(self, layers: int) -> tuple[float, float]:
        """The lowest and highest decode-step cost at ``layers`` layers over the pooled probe sets (both the
        pooled value for a single probe)."""
        steps = [o.step(layers) for o in self.sets] or [self.step(layers)]
        return min(steps), max(steps)

    def summary(self) -> str:
        a, b = self.layers
        return (f"engine probe ({self.model_type}, tiny copies of {a} and {b} layers"
                + (f", {len(self.sets)} probe sets pooled" if self.sets else "") + "): decode step "
                f"{self.step_fixed * 1e3:.3f} ms + {self.step_per_layer * 1e3:.3f} ms/layer, prefill "
                f"{self.prefill_fixed * 1e3:.3f} ms + {self.prefill_per_layer * 1e3:.3f} ms/layer"
                + (f" (clamped at 0: {', '.join(self.clamped)})" if self.clamped else ""))


def _split(ta: float, tb: float, a: int, b: int, what: str, clamped: list) -> tuple[float, float]:
    per = (tb - ta) / (b - a)
    if per < 0:
        clamped.append(f"{what} per layer")
        per = 0.0
    fixed = ta - a * per
    if fixed < 0:
        clamped.append(f"{what} fixed")
        fixed = 0.0
    return fixed, per


def probe_engine_overhead(config, *, layers: tuple[int, int] = PROBE_LAYERS, prompt: int = PROBE_PROMPT,
                          new_tokens: int = PROBE_NEW_TOKENS, repeats: int = PROBE_REPEATS,
                          threads: int | None = None, seed: int = 0) -> EngineOverhead:
    """Measure the engine's per-step cost on tiny copies of ``config``'s architecture (never the model itself).

    Both copies are built, then timed in turn (a b a b ...; each round one ``generate()`` of ``new_tokens``
    after a ``prompt``-token prompt), so a drift of the machine lands on both.
    """
    _, cfg = load_config(config)
    cfg = check_config(cfg)
    a, b = (require_count("layers", n, minimum=1, maximum=64) for n in layers)
    if b <= a:
        raise ValueError(f"layers must be two counts (a, b) with b > a, got {layers}")
    repeats = require_count("repeats", repeats, minimum=1, maximum=1000)
    models = [build_model(tiny_config(cfg, n), seed=seed)[0] for n in (a, b)]
    nthreads = host_thread_policy(threads).threads
    pin_allocator()
    gen = torch.Generator().manual_seed(seed)
    ttft = ([], [])
    steps = ([], [])
    with Threads(nthreads):
        for m in models:
            generate_timed(m, torch.randint(0, PROBE_VOCAB, (1, prompt), generator=gen), new_tokens)  # warm-up
        before = proc_stat()
        for _ in range(repeats):
            for i, m in enumerate(models):
                t, gaps = generate_timed(m, torch.randint(0, PROBE_VOCAB, (1, prompt), generator=gen), new_tokens)
                ttft[i].append(t)
                steps[i].extend(gaps)
        steal = _steal(before, proc_stat())
    timings = tuple(EngineTiming(prompt, new_tokens, tuple(ttft[i]), tuple(steps[i]), steal) for i in (0, 1))
    return _overhead_from(cfg["model_type"], (a, b), timings, nthreads)


def _overhead_from(model_type: str, layers: tuple[int, int], timings: tuple, threads: int | None,
                   sets: tuple = ()) -> EngineOverhead:
    """The per-step and per-layer costs split from the timings of the two tiny copies (medians)."""
    a, b = layers
    clamped: list[str] = []
    sf, sp_ = _split(timings[0].tpot, timings[1].tpot, a, b, "decode", clamped)
    pf, pp = _split(timings[0].ttft, timings[1].ttft, a, b, "prefill", clamped)
    return EngineOverhead(model_type, layers, sf, sp_, pf, pp, timings, tuple(clamped), threads, sets)


def _pooled_timing(timings: Sequence[EngineTiming]) -> EngineTiming:
    steals = [t.steal for t in timings if t.steal is not None]
    def pooled(field):
        return tuple(x for t in timings for x in getattr(t, field))
    return EngineTiming(timings[0].prompt, timings[0].new_tokens, pooled("ttft_times"), pooled("step_times"),
                        max(steals) if steals else None, pooled("faults"))


def pool_overheads(probes: Sequence[EngineOverhead]) -> EngineOverhead:
    """One engine probe from several sets of the same probe (same architecture, layers and settings): every
    set's timings of each tiny copy pooled, then split once (medians of the pooled times).

    The benchmark probes the engine again before and after each repeat of a model, as it does the GEMVs, and
    predicts from the pool: one probe set taken before the model was built varied 2-3x between runs on the
    2-core Xeon (Llama's architecture: 0.21-0.62 ms per layer), while sets run around the model's own repeats
    see the state the machine was in while it ran. The steal of the pool is the largest of its sets'.
    """
    probes = list(probes)
    if not probes or not all(isinstance(o, EngineOverhead) for o in probes):
        raise TypeError("probes must be a non-empty list of probe_engine_overhead() results")
    first = probes[0]
    for o in probes[1:]:
        if (o.model_type, o.layers) != (first.model_type, first.layers) or \
                o.decode[0].prompt != first.decode[0].prompt or o.decode[0].new_tokens != first.decode[0].new_tokens:
            raise ValueError(f"probes must share one architecture, layers, prompt and new tokens: "
                             f"{first.model_type} {first.layers} and {o.model_type} {o.layers}")
    if len(probes) == 1:
        return first
    timings = tuple(_pooled_timing([o.decode[i] for o in probes]) for i in (0, 1))
    return _overhead_from(first.model_type, first.layers, timings, first.threads,
                          tuple(x for o in probes for x in (o.sets or (o,))))


def cold_factor(spec: ModelSpec, calibration: Calibration) -> float:
    """Cold/hot op-cost ratio at one layer's weight stream (``Calibration.op_costs``); 1 without cold probes."""
    hot = calibration.op_costs(0)[0]
    cold = calibration.op_costs(stream_between_ops(spec))[0]
    return max(1.0, cold / hot) if hot > 0 else 1.0


def _check_overhead(overhead):
    if not isinstance(overhead, EngineOverhead):
        raise TypeError(f"overhead must come from probe_engine_overhead(), got {type(overhead).__name__}")


def _weights_and_kv(spec: ModelSpec, context: int, calibration: Calibration) -> tuple[float, float]:
    """The course's calibrated weights and K/V terms of one batch-1 decode step (as ``predict.predict_tpot``'s
    ``weights`` and ``kv``, without its TinyLM op count, which a GPT-2 spec cannot build): every weight matrix
    at the GEMV bandwidth of its shape, the other streamed weights at the copy bandwidth, the K/V at the rate
    of the attention probe."""
    mats = weight_matrices(spec)
    mat_bytes = sum(m * k * 4 * n for (m, k), n in mats.items())
    mat_time = sum(m * k * 4 * n / calibration.gemv_bandwidth(m, k) for (m, k), n in mats.items())
    rest = spec.decode_weight_bytes("fp32") - mat_bytes
    weights_time = mat_time + memory_time(rest, calibration.copy.bandwidth)
    kv_bw = calibration.kv_bandwidth(spec.kv_heads, spec.heads // spec.kv_heads, spec.head_dim)
    kv_time = memory_time(spec.attended_tokens(context) * spec.kv_bytes_per_token("fp32"), kv_bw)  # kv_read_time
    return weights_time, kv_time


def predict_engine_tpot(spec: ModelSpec, prompt: int, new_tokens: int, calibration: Calibration,
                        overhead: EngineOverhead) -> Prediction:
    """Predicted mean decode step of ``generate()`` after a ``prompt``-token prompt (steps 1 .. new_tokens - 1).

    The dynamic cache writes each layer's whole K/V (``torch.cat``: ``cache_concat``, the read of the old cache
    and the write of the new at the copy bandwidth) right before attention reads it (``kv``, at the attention
    probe's rate). The K/V just written may still be in the last-level cache, but attention does not read it
    faster for that: scaled-dot-product attention over one query reads K/V at about 21 GB/s from a hot cache
    and 13 GB/s from memory on the 2-core Xeon this was measured on (qwen3-0.6b's shapes at context 968),
    against 15-20 GB/s for the attention probe; an earlier version set ``kv`` to 0 when one layer's K/V fit in
    the cache and under-predicted long contexts by 10-17 %.
    """
    check_calibration(calibration)
    _check_overhead(overhead)
    prompt = require_count("prompt", prompt, minimum=1)
    new_tokens = require_count("new_tokens", new_tokens, minimum=2)
    ctx = prompt + new_tokens // 2
    weights_time, kv_time = _weights_and_kv(spec, ctx, calibration)
    k_tok = spec.kv_bytes_per_token("fp32")
    a = spec.attended_tokens(ctx)
    bw = calibration.copy.bandwidth
    cold = cold_factor(spec, calibration)
    args = dict(weights_time=weights_time, kv_time=kv_time, context=a, kv_bytes_per_token=k_tok,
                vocab=spec.vocab, copy_bandwidth=bw, step_fixed=overhead.step_fixed,
                step_per_layer=overhead.step_per_layer, layers=spec.layers, cold_factor=cold)
    total = numeric.engine_decode_time(**args)
    terms = {"weights": weights_time, "kv": kv_time, "cache_concat": 2 * a * k_tok / bw,
             "logits": 12 * spec.vocab / bw, "engine": cold * overhead.step(spec.layers)}
    assert math.isclose(sum(terms.values()), total, rel_tol=1e-9)
    unc = estimate(spec, calibration.hardware(), prompt_tokens=ctx - 1, new_tokens=2,
                   precision="fp32").decode_first.time
    counts = {"context": ctx, "cold_factor": cold, "kv_bytes_per_token": k_tok, "layers": spec.layers,
              "weight_bytes": spec.decode_weight_bytes("fp32"), "kv_bytes": a * k_tok}
    return Prediction("tpot", spec.name, ctx, 1, terms, unc, counts)


def predict_engine_ttft(spec: ModelSpec, prompt: int, calibration: Calibration,
                        overhead: EngineOverhead) -> Prediction:
    """Predicted TTFT of ``generate()`` with a ``prompt``-token prompt (prefill and the first token)."""
    check_calibration(calibration)
    _check_overhead(overhead)
    p = require_count("prompt", prompt, minimum=1)
    mats = weight_matrices(spec)
    head = (spec.vocab, spec.hidden)
    linear = sum(2 * p * m * k * n / calibration.gemm_rate(p, m, k) for (m, k), n in mats.items() if (m, k) != head)
    lm_head = spec.vocab * spec.hidden * 4 / calibration.gemv_bandwidth(*head)
    causal_flops = 4 * spec.layers * spec.heads * spec.attn_dim * p * (p + 1) / 2
    rate = calibration.attention_rate(spec.kv_heads, spec.heads // spec.kv_heads, spec.head_dim, p, p)
    attention = compute_time(causal_flops, rate)
    k_tok = spec.kv_bytes_per_token("fp32")
    bw = calibration.copy.bandwidth
    cold = cold_factor(spec, calibration)
    layer_passes = calibration.passes.get(passes_key(spec, p), 0.0)   # 0 where the calibration did not probe them
    args = dict(linear_time=linear, attention_time=attention, lm_head_time=lm_head, prompt=p, kv_bytes_per_token=k_tok,
                vocab=spec.vocab, copy_bandwidth=bw, prefill_fixed=overhead.prefill_fixed,
                prefill_per_layer=overhead.prefill_per_layer, layers=spec.layers, cold_factor=cold,
                layer_passes_time=layer_passes)
    total = numeric.engine_prefill_time(**args)
    terms = {"linear": linear, "attention": attention, "lm_head": lm_head, "cache_write": 2 * p * k_tok / bw,
             "logits": 12 * spec.vocab / bw,
             "engine": cold * (overhead.prefill_fixed + spec.layers * overhead.prefill_per_layer),
             "passes": spec.layers * layer_passes}
    assert math.isclose(sum(terms.values()), total, rel_tol=1e-9)
    unc = estimate(spec, calibration.hardware(), prompt_tokens=p, new_tokens=1, precision="fp32").ttft
    return Prediction("ttft", spec.name, p, 1, terms, unc, {"causal_flops": causal_flops, "cold_factor": cold})


# --------------------------------------------------------------------------------------------------
# Calibration for the engine's shapes
# --------------------------------------------------------------------------------------------------
def calibrate_for(specs: Mapping[str, ModelSpec], prompts: Sequence[int], *, threads: int | None = None,
                  fast: bool = False, progress: bool = False, budget_bytes: int | None = None) -> Calibration:
    """The course's calibration (probes only) for ``specs``: GEMV and K/V probes of every model, and the
    GEMM and attention-product probes of every model at every prompt length (weights read from memory).
    ``budget_bytes``: the memory one probe may allocate (default the device's; a lesson kernel passes less)."""
    specs = dict(specs)
    if not specs:
        raise ValueError("specs must hold at least one model")
    prompts = require_counts("prompts", prompts)
    first, *rest = specs.values()
    cal = calibrate(threads, fast, models=specs, prompt_lengths=prompts, ttft_model=first, device="cpu",
                    progress=progress, rotate_gemm=True, budget_bytes=budget_bytes)
    settings = ProbeSettings(torch.device("cpu"), cal.threads, cal.clock, fast, True, budget_bytes)
    with keep_threads():                 # as calibrate(): a retry keeps the thread count
        for s in rest:
            for kind, key in probe_jobs({s.name: s}, prompts, s):
                store = {"gemm": cal.gemm, "attention": cal.attention}.get(kind)
                if kind == "gemm" and key[1:] == (s.vocab, s.hidden):
                    continue             # the engine's prefill computes the last position's logits only: a GEMV
                if store is not None and key not in store:
                    store[key] = PROBES[kind](key, settings)
        for s in specs.values():
            for p in prompts:
                key = passes_key(s, p)
                if key not in cal.passes:
                    cal.passes[key] = measure_prefill_passes(s, p, threads=cal.threads, fast=fast)
    return cal


def passes_key(spec: ModelSpec, rows: int) -> tuple:
    """The key of :attr:`Calibration.passes`: what the elementwise passes of a prefill depend on."""
    return (spec.mlp, spec.norm, spec.block_norms, spec.qk_norm, spec.positional, spec.hidden, spec.intermediate,
            spec.heads, spec.kv_heads, spec.head_dim, rows)


def measure_prefill_passes(spec: ModelSpec, rows: int, *, threads: int | None = None, fast: bool = False) -> float:
    """Seconds per layer of the elementwise passes a prefill of ``rows`` tokens runs over its activations (a probe).

    Random fp32 tensors of the layer's widths, the ops transformers runs between the matrix products: the MLP's
    activation (SiLU times the up projection for a gated MLP, GPT-2's tanh GELU otherwise, transformers' own
    ``ACT2FN``), the block's norms (RMSNorm as transformers writes it, or LayerNorm), Qwen3's per-head norms of
    Q and K, the two residual adds, the rotary embedding of Q and K, and the copy of the attention output back
    to (rows, heads × head_dim). At a decode step these are a few kB and cost only their dispatch (inside
    :func:`probe_engine_overhead`); at hundreds of rows they stream megabytes, which the tiny copies of the
    engine probe cannot show. Nothing of the model under test is used: only its widths.
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    rows = require_count("rows", rows, minimum=1)
    tr = require_transformers()
    act = tr.activations.ACT2FN["silu" if spec.mlp == "gated" else "gelu_new"]
    h, inter, d = spec.hidden, spec.intermediate, spec.head_dim
    nq, nkv = spec.heads, spec.kv_heads
    gen = torch.Generator().manual_seed(rows)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen)

    x, y, w, b = rnd(1, rows, h), rnd(1, rows, h), rnd(h), rnd(h)
    gate, up = rnd(1, rows, inter), (rnd(1, rows, inter) if spec.mlp == "gated" else None)
    q, k = rnd(1, nq, rows, d), rnd(1, nkv, rows, d)
    cos, sin = rnd(1, 1, rows, d), rnd(1, 1, rows, d)
    wd = rnd(d)

    def rms(t, weight):
        return weight * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6))

    def norm(t):
        return rms(t, w) if spec.norm == "rmsnorm" else torch.nn.functional.layer_norm(t, (h,), w, b)

    def rotate_half(t):
        return torch.cat((-t[..., d // 2:], t[..., : d // 2]), dim=-1)

    def layer():
        for _ in range(spec.block_norms):
            norm(x)
        x + y
        x + y
        act(gate) * up if up is not None else act(gate)
        if spec.qk_norm:
            rms(q, wd)
            rms(k, wd)
        if spec.positional == "rope":
            q * cos + rotate_half(q) * sin
            k * cos + rotate_half(k) * sin
        q.transpose(1, 2).reshape(1, rows, nq * d)

    nthreads = host_thread_policy(threads).threads
    with Threads(nthreads), torch.inference_mode(), keep_threads():
        t = steady_timeit([layer], "cpu", 3 if fast else 7, 2e-4 if fast else 2e-3, "wall", nthreads)
    return t.median


# --------------------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------------------
LAST_LINE_RE = re.compile(r"^engine_tpot_geomean_abs_error=\d+\.\d+ engine_tpot_max_abs_error=\d+\.\d+ "
                          r"engine_ttft_max_abs_error=\d+\.\d+$")
COLUMNS = ("phase", "model", "parameters", "prompt/context", "predicted (ms)", "measured (ms)", "error %",
           "spread %", "verdict", "uncalibrated (ms)", "uncal. error %")


@dataclass(frozen=True)
class EnginePoint:
    """One row: a prediction against its measurement."""

    kind: str
    model: str
    params: int
    tokens: int
    predicted: float
    measured: float
    spread: float
    verdict: str
    uncalibrated: float
    prediction: Prediction
    #: measured / predicted of every repeat, each against the probes run just before and after it (what the
    #: verdict judges; empty where the point was not compared repeat by repeat)
    ratios: tuple = ()
    reason: str = ""

    error = property(lambda self: self.predicted / self.measured - 1, doc="(predicted - measured) / measured")
    uncalibrated_error = property(lambda self: self.uncalibrated / self.measured - 1,
                                  doc="(uncalibrated - measured) / measured")


@dataclass
class EngineReport:
    """The engine benchmark's points, probes and conditions."""

    points: list
    overheads: dict
    calibration: Calibration
    threads: str
    seconds: float
    fast: bool = False
    skipped: list = field(default_factory=list)
    #: bytes of the last-level cache the cores in use share (None: unknown)
    llc_bytes: int | None = None
    #: the CPU threads the measurements used
    thread_count: int | None = None
    #: configuration name -> the GEMV probes run around its repeats (:class:`~course_lib.measure.calibrate.Drift`)
    drifts: dict = field(default_factory=dict)
    #: what :func:`~course_lib.measure.threads.pin_allocator` did
    allocator: str = ""
    #: configuration name -> its :class:`EngineTiming` per prompt length (their page-fault counts)
    timings: dict = field(default_factory=dict)
    #: configuration name -> the probe sets run before and after each repeat: {"gemv": [...], "gemm": [...],
    #: "cold": [...]} (one set per bracket; empty lists with --fast)
    probe_sets: dict = field(default_factory=dict)

    def faults_line(self) -> str | None:
        """The median minor page faults of a timed ``generate()``, per model and prompt (None: not counted)."""
        parts = []
        for name, ts in self.timings.items():
            counts = [(t.prompt, t.median_faults) for t in ts if t.median_faults is not None]
            if counts:
                parts.append(f"{name} " + ", ".join(f"P={p}: {f:,.0f}" for p, f in counts))
        if not parts:
            return None
        return "page faults per timed generate() (median; each is a page the allocator handed out fresh): " \
            + "; ".join(parts)

    def engine_drift_lines(self) -> list[str]:
        """Per model with pooled engine probes: its decode step's engine cost over the sets, and the pool's."""
        out = []
        for name, o in self.overheads.items():
            layers = next((p.prediction.counts.get("layers") for p in self.points if p.model == name), None)
            if not o.sets or layers is None:
                continue
            lo, hi = o.step_range(layers)
            out.append(f"{name}: tiny-copy decode step at {layers} layers {lo * 1e3:.2f} to {hi * 1e3:.2f} ms over "
                       f"{len(o.sets)} probe sets ({(hi - lo) / lo:.0%} apart), {o.step(layers) * 1e3:.2f} ms pooled")
        return out

    def in_cache(self) -> list[str]:
        """Models whose fp32 weights fit in the last-level cache: a decode step reads them from the cache, not
        from memory, so the weights term (GEMV probes rotated beyond the cache) over-predicts them."""
        if not self.llc_bytes:
            return []
        out = []
        for p in self.points:
            if p.params * 4 <= self.llc_bytes and p.model not in out:
                out.append(p.model)
        return out

    def _of(self, kind):
        return [p for p in self.points if p.kind == kind]

    @property
    def tpot_geomean_abs_error(self) -> float:
        errs = [max(abs(p.error), 1e-12) for p in self._of("tpot")]
        return statistics.geometric_mean(errs) if errs else math.nan

    @property
    def tpot_max_abs_error(self) -> float:
        return max((abs(p.error) for p in self._of("tpot")), default=math.nan)

    @property
    def ttft_max_abs_error(self) -> float:
        return max((abs(p.error) for p in self._of("ttft")), default=math.nan)

    @property
    def quality(self):
        return summarize_verdicts([p.verdict for p in self.points] + [v for o in self._probes() for v in o.verdicts])

    def _probes(self) -> list:
        """The distinct engine probes (configurations of one architecture share theirs)."""
        out = []
        for o in self.overheads.values():
            if not any(o is x for x in out):
                out.append(o)
        return out

    @property
    def noisy_points(self) -> int:
        return sum(p.verdict != "reliable" for p in self.points)

    def rows(self) -> list[tuple]:
        return [("TPOT" if p.kind == "tpot" else "TTFT", p.model, f"{p.params / 1e6:.1f}M", str(p.tokens),
                 f"{p.predicted * 1e3:.2f}", f"{p.measured * 1e3:.2f}", f"{p.error * 100:+.1f}",
                 f"{p.spread * 100:.1f}", p.verdict, f"{p.uncalibrated * 1e3:.2f}",
                 f"{p.uncalibrated_error * 100:+.1f}") for p in self.points]

    def table(self) -> str:
        rows = [COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]

        def line(r):
            return "  ".join(c.rjust(w) if i >= 2 and i != 8 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

        return "\n".join([line(rows[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in rows[1:]])

    def last_line(self) -> str:
        return (f"engine_tpot_geomean_abs_error={self.tpot_geomean_abs_error:.3f} "
                f"engine_tpot_max_abs_error={self.tpot_max_abs_error:.3f} "
                f"engine_ttft_max_abs_error={self.ttft_max_abs_error:.3f}")

    def quality_line(self) -> str:
        q = self.quality
        if q.verdict == "reliable":
            return f"measurements: all {q.total} timings reliable"
        worst = next((p for p in self.points if p.verdict != "reliable" and p.reason), None)
        example = (f"; e.g. {worst.model} {worst.kind.upper()} @ {worst.tokens}: {worst.reason}" if worst else "")
        return (f"measurements: {self.noisy_points} of {len(self.points)} points not reliable "
                f"({q.counts['noisy']} noisy, {q.counts['contended']} contended timings of {q.total}, probes "
                f"included{example}): the errors below mix the model's error with the machine's noise; close other "
                f"programs" + (", or run with --threads 1" if (self.thread_count or 2) > 1 else " and run again"))

    def report(self) -> str:
        tr = require_transformers()
        lines = [f"engine: Hugging Face transformers {tr.__version__} generate() on CPU, fp32, random weights, "
                 f"dynamic cache, greedy; torch {torch.__version__}",
                 f"threads: {self.threads}",
                 *([f"allocator: {self.allocator}"]                # unless the calibration's conditions say it
                   if self.allocator and self.allocator != self.calibration.allocator else []),
                 "calibration (probes only): " + self.calibration.conditions(),
                 *("  " + x for i, x in enumerate(self.calibration.summary().splitlines())
                   if i < 3 or x.startswith(("GEMV", "attention K/V", "op overhead after"))),
                 *(f"  {', '.join(n for n, x in self.overheads.items() if x is o)}: {o.summary()}"
                   for o in self._probes()),
                 *(f"skipped {name}: {why}" for name, why in self.skipped),
                 "", self.table(), ""]
        lines += [f"terms: {p.prediction.breakdown()}; measured {p.measured * 1e3:.3f} ms"
                  + (f"; measured / predicted by repeat: {' '.join(f'{x:.3f}' for x in p.ratios)}" if p.ratios else "")
                  for p in self.points]
        unc = [abs(p.uncalibrated_error) for p in self._of("tpot")]
        lines += [f"uncalibrated TPOT: geomean |error| {statistics.geometric_mean(unc) if unc else math.nan:.3f}, "
                  f"max {max(unc, default=math.nan):.3f}",
                  self.quality_line()]
        faults = self.faults_line()
        if faults:
            lines.append(faults)
        cached = self.in_cache()
        if cached:
            lines.append(f"note: the fp32 weights of {', '.join(cached)} fit in this machine's "
                         f"{self.llc_bytes / 2**20:.0f} MiB last-level cache: decode reads them from the cache and "
                         f"the weights term, probed beyond the cache, over-predicts"
                         + (" (--fast uses small models; the targets apply to the full run)" if self.fast else ""))
        if self.drifts:
            lines.append("bandwidth drift (each model is predicted from the GEMV and prefill GEMM probes run before "
                         "and after each of its repeats):")
            lines += ["  " + d.line() for d in self.drifts.values()]
        engine_drift = self.engine_drift_lines()
        if engine_drift:
            lines.append("engine probe drift (each model's engine term is pooled from the probe sets run before and "
                         "after each of its repeats):")
            lines += ["  " + x for x in engine_drift]
        lines += [f"total {self.seconds:.1f} s", self.last_line()]
        return "\n".join(lines)


def _configs(configs, fast: bool) -> list[tuple[str, dict]]:
    if configs is None or (isinstance(configs, (list, tuple)) and not configs):
        names = FAST_CONFIGS if fast else DEFAULT_CONFIGS
        out = [load_config(n) for n in names]
        if fast:
            out = [(f"{n}-2L", fast_config(c)) for n, c in out]
        return out
    if isinstance(configs, (str, Path, Mapping)):
        configs = [configs]
    out = []
    seen: dict[str, int] = {}
    for c in configs:
        name, cfg = load_config(c)
        check_config(cfg, f"config {name!r}")
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", cfg))
    return out


def run(configs=None, *, fast: bool = False, threads: int | None = None, prompts=None, new_tokens=None,
        repeats=None, calibration: Calibration | None = None, progress: bool = True,
        available: int | None = None) -> EngineReport:
    """Calibrate from the probes, probe the engine on tiny copies, predict, then measure each configuration
    (``repeats``: default :data:`BENCHMARK_REPEATS`, :data:`REPEATS` with ``fast``).

    ``configs``: names, paths or dicts (default :data:`DEFAULT_CONFIGS`; ``fast``: :data:`FAST_CONFIGS` cut
    to 2 layers). A configuration that does not fit in memory is skipped with its reason.
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    t0 = time.perf_counter()
    policy = host_thread_policy(threads)
    allocator = pin_allocator()
    prompts = require_counts("prompts", (FAST_PROMPTS if fast else PROMPTS) if prompts is None else prompts)
    new_tokens = require_count("new_tokens", (FAST_NEW_TOKENS if fast else NEW_TOKENS) if new_tokens is None
                               else new_tokens, minimum=2, maximum=4096)
    repeats = require_count("repeats", (REPEATS if fast else BENCHMARK_REPEATS) if repeats is None else repeats,
                            minimum=1, maximum=1000)
    items = _configs(configs, fast)
    specs, skipped = {}, []
    for name, cfg in items:
        spec = spec_of(cfg, name)
        try:
            check_fits(spec, available)
        except ModelTooLarge as e:
            skipped.append((name, str(e)))
            continue
        if spec.max_positions is not None and max(prompts) + new_tokens > spec.max_positions:
            skipped.append((name, f"the longest prompt ({max(prompts)}) + {new_tokens} new tokens exceeds its "
                                  f"{spec.max_positions} positions"))
            continue
        specs[name] = (spec, cfg)
    if not specs:
        raise ModelTooLarge("no configuration can be measured: " + "; ".join(f"{n}: {w}" for n, w in skipped))
    require_transformers()
    if calibration is None:
        calibration = calibrate_for({n: s for n, (s, _) in specs.items()}, prompts, threads=policy.threads,
                                    fast=fast, progress=progress)
    else:
        check_calibration(calibration)
    overheads: dict[str, EngineOverhead] = {}   # configuration name -> its probe (pooled over its brackets)
    probe_sets: dict[str, dict] = {}             # configuration name -> the probe sets around its repeats
    drifts: dict[str, Drift] = {}                # configuration name -> the GEMV probes around its repeats
    probed: dict[str, EngineOverhead] = {}      # --fast: tiny configuration -> probe (one per architecture)
    timed: dict[str, list] = {}                  # configuration name -> its EngineTimings
    points = []
    with progress_bar(total=len(specs), desc="measure transformers generate()", unit="model",
                      enabled=progress) as bar:
        for name, (spec, cfg) in specs.items():
            bar.set_postfix_str(name)
            shapes = sorted(weight_matrices(spec))
            gemms = [(p, m, k) for p in prompts for (m, k) in shapes if (m, k) != (spec.vocab, spec.hidden)]
            model, _ = build_model(cfg, available=available)
            brackets: list[dict] = []
            gemm_brackets: list[dict] = []
            cold_brackets: list[dict] = []
            engine_sets: list[EngineOverhead] = []
            colds = calibration.cold_points_for(stream_between_ops(spec))

            def probe_again():     # everything the prediction reads, before and after each repeat
                brackets.append(reprobe_gemv(calibration, shapes))
                gemm_brackets.append(reprobe(calibration, "gemm", gemms))
                if colds:
                    cold_brackets.append(reprobe(calibration, "cold", colds))
                engine_sets.append(probe_engine_overhead(cfg, threads=policy.threads))

            # a --fast smoke run keeps the calibration's rates and probes the engine once per architecture:
            # re-probing would take most of its time
            timings = measure_engine(model, prompts, new_tokens, repeats, threads=policy.threads,
                                     between=None if fast else probe_again)
            timed[name] = timings
            if fast:
                key = json.dumps(tiny_config(cfg), sort_keys=True)
                if key not in probed:
                    probed[key] = probe_engine_overhead(cfg, threads=policy.threads)
                ov = probed[key]
            else:
                ov = pool_overheads(engine_sets)
            overheads[name] = ov
            del model
            gc.collect()
            sets = probe_sets[name] = {"gemv": brackets, "gemm": gemm_brackets, "cold": cold_brackets}
            if brackets:
                drifts[name] = _drift(spec, calibration, brackets, min(prompts) + new_tokens // 2)
            points += _compared(name, spec, timings, new_tokens, calibration, ov, sets,
                                drifts[name] if brackets else None)
            bar.update()
    return EngineReport(points, overheads, calibration, policy.description, time.perf_counter() - t0, fast, skipped,
                        last_level_cache_bytes("cpu"), policy.threads, drifts, allocator.description, timed,
                        probe_sets)


def _compared(name: str, spec: ModelSpec, timings: Sequence[EngineTiming], new_tokens: int,
              calibration: Calibration, overhead: EngineOverhead, sets: Mapping, drift: Drift | None) -> list:
    """The TPOT and TTFT points of one model.

    The point is the median of every repeat (every step for TPOT) against the prediction from the mean of
    every probe set run around them (GEMVs, GEMMs, cold-op costs) and the pooled engine probe. It is judged
    repeat by repeat: repeat r ran between the probe sets r and r + 1, so it is predicted from their mean
    GEMV and GEMM rates, and the ratios measured / predicted of the repeats go through
    :func:`timing_verdict` (a drift the probes followed moves a repeat's time and its prediction alike and
    leaves the ratio; one they missed does not). A TPOT point is also judged on the step times of its median
    repeat and on that repeat's two GEMV probe sets' disagreement. Each repeat's prediction rests on two probe
    sets and the point's on all of them: on the 2-core Xeon, a run of the four default configurations and one
    of the five unseen ones gave TPOT geomean |error| 0.016 and 0.011 predicted from all sets, against 0.026
    and 0.025 from the median repeat's two.
    """
    gemv, gemm, cold = sets.get("gemv", []), sets.get("gemm", []), sets.get("cold", [])
    pooled = calibration.with_probes(cold=cold)
    everything = calibration.with_probes(gemv=gemv, gemm=gemm, cold=cold)

    def around(r):
        if len(gemv) < r + 2:          # --fast, or a measurement without brackets: the calibration's rates
            return pooled
        return pooled.with_probes(gemv=gemv[r:r + 2], gemm=gemm[r:r + 2])

    def predicted(kind, t, cal):
        return (predict_engine_tpot(spec, t.prompt, new_tokens, cal, overhead) if kind == "tpot"
                else predict_engine_ttft(spec, t.prompt, cal, overhead))

    def measured(kind, t, r):
        return statistics.median(t.repeat_steps(r)) if kind == "tpot" else t.ttft_times[r]

    out = []
    for kind in ("tpot", "ttft"):
        for t in timings:
            ratios = tuple(measured(kind, t, r) / predicted(kind, t, around(r)).seconds for r in range(t.repeats))
            order = sorted(range(len(ratios)), key=ratios.__getitem__)
            r = order[len(order) // 2]
            compared = _verdict(ratios, t.steal)
            verdict, reason = compared.verdict, compared.reason
            spread = compared.spread or 0.0
            if kind == "tpot":
                own = _verdict(t.repeat_steps(r), t.steal)
                if verdict == "reliable" and own.verdict != "reliable":
                    verdict, reason = own.verdict, f"its repeat's steps: {own.reason}"
                if verdict == "reliable" and drift is not None and len(drift.bracketed) >= r + 2 \
                        and drift.step(r) > THRESHOLDS.noisy_relative_iqr:
                    verdict = "noisy"
                    reason = (f"the GEMV probes just before and just after its repeat disagree by {drift.step(r):.0%} "
                              f"(above {THRESHOLDS.noisy_relative_iqr:.0%})")
            if compared.verdict != "reliable":
                reason = f"the repeats' measured / predicted ratios: {reason}"
            elif verdict == "reliable":
                reason = ""
            pr = predicted(kind, t, everything)
            out.append(EnginePoint(kind, name, spec.params, t.prompt, pr.seconds, t.tpot if kind == "tpot" else t.ttft,
                                   spread, verdict, pr.uncalibrated, pr, ratios, reason))
    return out


def _drift(spec: ModelSpec, calibration: Calibration, brackets: list, context: int) -> Drift:
    """The weights term at ``context`` from the calibration and from each set of GEMV probes run around the
    engine's repeats (:func:`measure_engine`'s ``between``: before the first and after each one)."""
    def weights(cal):
        return _weights_and_kv(spec, context, cal)[0]
    return Drift(spec.name, weights(calibration), tuple(weights(calibration.with_probes(gemv=[b])) for b in brackets))
