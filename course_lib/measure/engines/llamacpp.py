"""llama.cpp on this machine: quantized GGUF files built offline, timed, and predicted from probes only.

Lessons: 08

(Reached through ``python -m course_lib.measure.validate --engine llama.cpp``; lesson 08's "your engine" section
uses it.)

::

    from course_lib.measure.engines import llamacpp
    path = llamacpp.build_gguf("llama-3.2-1b", "q4_k_m")      # random weights of the real shapes; no download
    held = llamacpp.gguf_bytes(path)                          # per-tensor types and bytes read back from the file
    held.decode_bytes, held.by_type                           # bytes one decode step streams, by ggml type
    [t] = llamacpp.measure_gguf(path, threads=1, prompts=[64], new_tokens=16, repeats=3)
    t.ttft, t.tpot                                            # medians, seconds
    rates = llamacpp.probe_engine_rates(held.types, threads=1)  # llama.cpp's own kernels on probe files
    llamacpp.predict_gguf_tpot(held, rates).seconds
    # the benchmark, python -m course_lib.measure.validate --engine llama.cpp: measure/benchmarks/engine_llamacpp.py

**The files.** :func:`write_gguf` writes a Llama-architecture GGUF with the ``gguf`` package: the shapes of a
``config.json`` (a dict, a path, or a name of ``course_lib/data/engine_configs.json`` or
``course_lib/data/gguf_configs.json``), random normal weights (std 0.02) in f16, norms in f32, the output
matrix tied to the embedding where the config ties them. Qwen2/Qwen3/Mistral configurations are written with
the Llama architecture and their own shapes (widths, heads, grouped K/V, head dim, vocabulary): their q/k/v
biases and Qwen3's q/k norms (a few thousand values per layer) are left out, which changes no shape that
streams. The tokenizer is a SentencePiece-style ("llama") vocabulary of the model's size with the 256 byte
tokens ``<0x00>``..``<0xFF>``: without them llama.cpp cannot encode a character it has no token for and ends
the process with an uncaught C++ exception. :func:`quantize` then writes q8_0, q4_0 and q4_k_m with
llama.cpp's own ``llama_model_quantize``. Files are cached in a git-ignored folder (:func:`cache_dir`).

**The bytes.** :func:`gguf_bytes` reads every tensor's ggml type and byte size back from the file with the
``gguf`` reader: q4_k_m mixes Q4_K with Q6_K (half the ``ffn_down`` and ``attn_v`` tensors and the output),
the tied output stays Q6_K in every 4-bit file, and a width not divisible by 256 makes llama.cpp fall back
to other types (Q5_0, Q8_0 ...). One decode step streams every tensor but the embedding table, which it
reads one row of; where the output is tied to the embedding, the output matmul streams the whole table.

**The measurement** is ``Llama.generate()`` (llama-cpp-python) as a user runs it: greedy (``temp=0``), the
engine's own KV cache (f16), random prompt token ids, a timestamp at every token it yields: TTFT = first
token - call start, the step times are the gaps. Repeats are interleaved over the prompts.

**The prediction** uses probes only, never the model it predicts (:func:`predict_gguf_tpot`,
:func:`predict_gguf_ttft`):

* the rate at which llama.cpp's own kernels stream each ggml type (:func:`probe_engine_rates`): two probe files
  of a generic shape (hidden 2048, MLP 8192, vocabulary 512) with 5 and 16 layers, every matrix of the one type
  (``pure`` quantization); each file's bytes per second = 1 / the median over its decode steps of (step - the
  fixed cost) / its decode bytes, and the type's rate is the higher of the two files'
  (:func:`engine_rates_from_timings`, :func:`fastest_rate`): a disturbance only slows a step. A prefill's
  FLOP/s: the two files' FLOP apart / their TTFTs apart (long, steady times; the difference leaves out what
  every prefill pays). On the course's VM at one thread the two files give the same rate within 3 % (F16 22.0-24.2 and
  23.1-23.5 GB/s), so the fixed cost per step is a small share of a step; at two threads disturbed steps,
  several times their usual length, landed on one file or the other, and a rate taken from the two files'
  times apart swung with them (F16 30.5-44.6 GB/s, Q4_K 10.8-98.0 GB/s). The engine's per-layer cost rides in
  the rate;
* at every thread count the benchmark measures (1 and all usable threads): a memory-bound decode scales
  with threads as far as the memory system lets it, and so do the probes;
* the engine's fixed cost per step and per prefill (graph building, sampling over the vocabulary, the
  Python generator): a tiny file of the same vocabulary (hidden 64, one layer), its own bytes taken out.

TPOT = fixed + sum over types of decode bytes / rate + K/V bytes / f16 rate; TTFT = fixed + sum over types of
2 x prompt x (matrix parameters) / FLOP rate + the output matrix (one row of logits) at the decode rate.
``uncalibrated`` is the course's first-principles estimate: the model's nominal bytes in the format
(:mod:`course_lib.core.precision`) over the read bandwidth of a plain ``torch`` sum at the same thread count
(:func:`measure_read_bandwidth`).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import io
import json
import logging
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from course_lib.core import data
from course_lib.core.precision import bytes_per_element
from course_lib.core.validation import require_choice, require_count, require_counts

__all__ = ["FORMATS", "PROMPTS", "NEW_TOKENS", "REPEATS", "FAST_LAYERS", "FAST_NEW_TOKENS", "SUPPORTED_TYPES",
           "llamacpp_available", "require_llamacpp", "gguf_configs", "load_config", "GGUFShape", "shape_of",
           "cache_dir", "vocabulary",
           "write_gguf", "quantize", "build_gguf", "GGUFBytes", "gguf_bytes", "open_gguf", "generate_timed",
           "measure_gguf", "measure_read_bandwidth", "EngineRates", "probe_engine_rates", "median_rate",
           "fastest_rate", "engine_rates_from_timings", "probe_files", "GGUFPrediction", "predict_gguf_tpot",
           "predict_gguf_ttft", "lesson_measurement", "q4_row", "shape_nominal_bytes", "cpu_fast_compute"]

#: the formats the benchmark builds: llama.cpp's ftype of each (llama.h, ``enum llama_ftype``)
FORMATS = ("f16", "q8_0", "q4_0", "q4_k_m")
FTYPES = {"f16": 1, "q4_0": 2, "q8_0": 7, "q4_k_m": 15}
#: a ggml type -> the ftype whose every matrix is that type with ``pure`` quantization (the probe files)
PURE_FTYPES = {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K": 12,
               "Q4_K": 15, "Q5_K": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32}
#: the course's precision name of each format (:mod:`course_lib.core.precision`), for the uncalibrated estimate
PRECISION_OF = {"f16": "fp16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_k_m": "q4_k_m"}
#: the architectures whose shapes are written (as a Llama-architecture GGUF)
SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
PROMPTS = (64,)
NEW_TOKENS = 16
REPEATS = 3
#: the course's fast mode (lessons, exercises, ``--fast``): models cut to 2 layers, 8 new tokens
FAST_LAYERS = 2
FAST_NEW_TOKENS = 8
#: the probe files: hidden, MLP width, heads, K/V heads, vocabulary, and the layer count
PROBE_SHAPE = dict(hidden=2048, ffn=8192, heads=32, kv_heads=8, vocab=512)
PROBE_LAYERS = (5, 16)
#: the tiny file of the engine's fixed cost: hidden, MLP width, heads, layers (the vocabulary is the model's)
TINY_SHAPE = dict(hidden=64, ffn=128, heads=4, kv_heads=4, layers=1)
#: weights' standard deviation (a trained model's initialisation scale)
WEIGHT_STD = 0.02
#: random values drawn per file; tensors are runs of them from random offsets (see write_gguf)
POOL_SIZE = 2**22 + 1



# --------------------------------------------------------------------------------------------------
# llama-cpp-python, optional
# --------------------------------------------------------------------------------------------------
def llamacpp_available() -> bool:
    """Whether llama-cpp-python and gguf can be imported (the ``llamacpp`` extra: ``make llamacpp``)."""
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "gguf"))


def require_llamacpp():
    """Import llama_cpp (llama-cpp-python) and return it; a clear ImportError naming the install command."""
    try:
        import gguf  # noqa: F401
        import llama_cpp
    except ImportError as e:
        raise ImportError("the llama.cpp engine needs llama-cpp-python and gguf: make llamacpp "
                          "(or pip install 'course-lib[llamacpp]'; it compiles llama.cpp, about 11 minutes on "
                          "2 cores)") from e
    logger = logging.getLogger("llama-cpp-python")
    if logger.level == logging.NOTSET:     # llama-cpp-python's callback then prints every loader line, a close's too
        logger.setLevel(logging.ERROR)
    return llama_cpp


@contextlib.contextmanager
def _quiet():
    """llama.cpp's log lines (loading, quantizing) silenced on both of their routes: llama-cpp-python's log callback
    prints them to Python's ``sys.stderr`` (in a Jupyter kernel, the cell's output) unless its logger is above their
    level, and C code that writes to the process's stderr directly goes to file descriptor 2, sent to /dev/null."""
    logger = logging.getLogger("llama-cpp-python")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                fd = os.dup(2)
            except OSError:
                yield
                return
            try:
                with open(os.devnull, "w") as null:
                    os.dup2(null.fileno(), 2)
                    try:
                        yield
                    finally:
                        os.dup2(fd, 2)
            finally:
                os.close(fd)
    finally:
        logger.setLevel(level)


# --------------------------------------------------------------------------------------------------
# Configurations and shapes
# --------------------------------------------------------------------------------------------------
def gguf_configs() -> dict:
    """{name: entry} of ``course_lib/data/gguf_configs.json`` (configurations this engine adds to the catalog)."""
    return data.load_catalog("gguf_configs", copy=True)["configs"]


def load_config(config) -> tuple[str, dict]:
    """(name, config dict) of a dict, a path to a config.json, or a name of ``engine_configs.json`` or
    ``gguf_configs.json``."""
    from course_lib.measure.engines import hf
    if isinstance(config, str) and not config.endswith(".json") and os.sep not in config:
        extra = gguf_configs()
        if config in extra:
            return config, extra[config]["config"]
        names = sorted(set(hf.engine_configs()) | set(extra))
        if config not in names:
            require_choice("config", config, names)
    return hf.load_config(config)


@dataclass(frozen=True)
class GGUFShape:
    """The shapes a GGUF is written with (Llama architecture)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool
    rope_theta: float = 10000.0
    eps: float = 1e-5
    max_positions: int = 4096

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token in every layer, f16 (llama.cpp's default cache type)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def tensors(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(name, numpy shape (rows, columns), dtype) of every tensor, in file order."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        out = [("token_embd.weight", (self.vocab, h), "f16")]
        for i in range(self.layers):
            b = f"blk.{i}."
            out += [(b + "attn_norm.weight", (h,), "f32"), (b + "attn_q.weight", (q, h), "f16"),
                    (b + "attn_k.weight", (kv, h), "f16"), (b + "attn_v.weight", (kv, h), "f16"),
                    (b + "attn_output.weight", (h, q), "f16"), (b + "ffn_norm.weight", (h,), "f32"),
                    (b + "ffn_gate.weight", (self.ffn, h), "f16"), (b + "ffn_up.weight", (self.ffn, h), "f16"),
                    (b + "ffn_down.weight", (h, self.ffn), "f16")]
        out.append(("output_norm.weight", (h,), "f32"))
        if not self.tied:
            out.append(("output.weight", (self.vocab, h), "f16"))
        return out

    @property
    def params(self) -> int:
        return sum(math.prod(s) for _, s, _ in self.tensors())

    def key(self, seed: int = 0) -> str:
        text = json.dumps({**self.__dict__, "name": None, "seed": seed, "v": 1}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


def _whole(cfg, key, name):
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}[{key!r}] must be a whole number >= 1, got {v!r}")
    return v


def shape_of(config, *, layers: int | None = None, name: str | None = None) -> GGUFShape:
    """The :class:`GGUFShape` of a config (a name, path or dict); ``layers`` cuts it to that many layers."""
    cname, cfg = load_config(config)
    where = f"config {cname!r}"
    mt = cfg.get("model_type")
    if mt not in SUPPORTED_TYPES:
        raise ValueError(f"{where}['model_type']: llama.cpp GGUFs are written for {', '.join(SUPPORTED_TYPES)}, "
                         f"got {mt!r}")
    n_layers = _whole(cfg, "num_hidden_layers", where)
    hidden = _whole(cfg, "hidden_size", where)
    heads = _whole(cfg, "num_attention_heads", where)
    kv = cfg.get("num_key_value_heads") or heads
    kv = _whole({"num_key_value_heads": kv}, "num_key_value_heads", where)
    if heads % kv:
        raise ValueError(f"{where}: num_key_value_heads ({kv}) must divide num_attention_heads ({heads})")
    head_dim = cfg.get("head_dim") or hidden // heads
    head_dim = _whole({"head_dim": head_dim}, "head_dim", where)
    ffn = _whole(cfg, "intermediate_size", where)
    vocab = _whole(cfg, "vocab_size", where)
    if vocab < 260:
        raise ValueError(f"{where}['vocab_size'] must be at least 260 (3 control tokens and the 256 byte tokens), "
                         f"got {vocab}")
    if layers is not None:
        n_layers = require_count("layers", layers, minimum=1, maximum=n_layers)
    tied = bool(cfg.get("tie_word_embeddings", mt != "mistral" and mt != "llama"))
    if mt == "llama" and "tie_word_embeddings" not in cfg:
        tied = False
    label = name or (cname if layers is None or layers == cfg["num_hidden_layers"] else f"{cname}-{n_layers}L")
    return GGUFShape(label, n_layers, hidden, heads, kv, head_dim, ffn, vocab, tied,
                     float(cfg.get("rope_theta") or 10000.0), float(cfg.get("rms_norm_eps") or 1e-5),
                     int(cfg.get("max_position_embeddings") or 4096))


def _probe_shape(layers: int) -> GGUFShape:
    p = PROBE_SHAPE
    return GGUFShape(f"probe-{layers}L", layers, p["hidden"], p["heads"], p["kv_heads"], p["hidden"] // p["heads"],
                     p["ffn"], p["vocab"], True)


def _tiny_shape(vocab: int) -> GGUFShape:
    t = TINY_SHAPE
    return GGUFShape(f"tiny-v{vocab}", t["layers"], t["hidden"], t["heads"], t["kv_heads"], t["hidden"] // t["heads"],
                     t["ffn"], vocab, True)


# --------------------------------------------------------------------------------------------------
# Writing and quantizing GGUF files
# --------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where built GGUFs are kept: ``$COURSE_GGUF_CACHE``, else the course checkout's git-ignored
    ``artifacts/gguf/``, else ``~/.cache/course_lib/gguf``."""
    env = os.environ.get("COURSE_GGUF_CACHE")
    if env:
        d = Path(env)
    else:
        root = Path(__file__).resolve().parents[3]
        d = root / "artifacts" / "gguf" if (root / ".git").exists() else Path.home() / ".cache" / "course_lib" / "gguf"
    d.mkdir(parents=True, exist_ok=True)
    return d


def vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types) of a SentencePiece-style vocabulary of ``size`` tokens: ``<unk>``, ``<s>``,
    ``</s>``, the 256 byte tokens ``<0x00>``..``<0xFF>`` (type BYTE), then the printable ASCII characters
    and filler pieces."""
    size = require_count("size", size, minimum=260)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(33, 127)] + ["\u2581" + chr(c) for c in range(33, 127)]
    i = 0
    while len(tokens) < size:
        tokens.append(pieces[i] if i < len(pieces) else f"\u2581t{i}")
        types.append(1)
        i += 1
    scores = [0.0] * 259 + [-float(j) for j in range(size - 259)]
    return tokens, scores, types


def write_gguf(shape: GGUFShape, path, *, seed: int = 0) -> Path:
    """Write ``shape`` as an f16 GGUF with random weights to ``path`` (streamed tensor by tensor)."""
    import gguf
    path = Path(path)
    tmp = path.with_suffix(".part")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(shape.name)
    w.add_context_length(min(shape.max_positions, 131072))
    w.add_embedding_length(shape.hidden)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.eps)
    w.add_vocab_size(shape.vocab)
    w.add_file_type(FTYPES["f16"])
    tokens, scores, types = vocabulary(shape.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    tensors = shape.tensors()
    for name, shp, dt in tensors:
        npdt = np.dtype(np.float16 if dt == "f16" else np.float32)
        w.add_tensor_info(name, shp, npdt, math.prod(shp) * npdt.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    # a pool of 2**22 + 1 random normal values (a prime-free odd length), each tensor a run of it from a random
    # offset: random values at the speed of a memory copy (drawing billions of normals would take minutes)
    pool = (rng.standard_normal(POOL_SIZE, dtype=np.float32) * WEIGHT_STD).astype(np.float16)
    for name, shp, dt in tensors:
        if dt == "f32":
            a = np.ones(shp, dtype=np.float32)
        else:
            n = math.prod(shp)
            start = int(rng.integers(0, POOL_SIZE))
            a = np.empty(n, dtype=np.float16)
            done = 0
            while done < n:
                k = min(n - done, POOL_SIZE - start)
                a[done:done + k] = pool[start:start + k]
                done, start = done + k, 0
            a = a.reshape(shp)
        w.write_tensor_data(a)
        del a
    w.close()
    tmp.replace(path)
    return path


def _ggml_type(name: str, value) -> str:
    """``value`` when it is a ggml type name of :data:`PURE_FTYPES` (upper case, as the gguf reader writes it)."""
    if value not in PURE_FTYPES:
        raise ValueError(f"{name}: unknown ggml type {value!r}; known: {', '.join(sorted(PURE_FTYPES))}")
    return value


def quantize(src, dst, fmt: str | None = None, *, ggml_type: str | None = None, threads: int | None = None) -> Path:
    """Quantize the f16 GGUF ``src`` to ``dst`` with llama.cpp's ``llama_model_quantize``: a format of
    :data:`FORMATS` (llama.cpp's own mix of tensor types), or ``ggml_type`` (every matrix that type: ``pure``)."""
    llama_cpp = require_llamacpp()
    if (fmt is None) == (ggml_type is None):
        raise ValueError("quantize needs one of fmt (a format) or ggml_type (a pure type)")
    p = llama_cpp.llama_model_quantize_default_params()
    if fmt is not None:
        p.ftype = FTYPES[require_choice("fmt", fmt, FORMATS)]
    else:
        p.ftype = PURE_FTYPES[_ggml_type("ggml_type", ggml_type)]
        p.pure = True
    p.nthread = 0 if threads is None else require_count("threads", threads)
    dst = Path(dst)
    tmp = dst.with_suffix(".part")
    with _quiet():
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(p))
    if rc != 0 or not tmp.is_file():
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}, {fmt or ggml_type}) failed with status {rc}")
    tmp.replace(dst)
    return dst


def _built(shape: GGUFShape, fmt: str | None, ggml_type: str | None, seed: int, progress=None) -> Path:
    d = cache_dir()
    stem = f"{shape.name}-{shape.key(seed)}"
    f16 = d / f"{stem}-f16.gguf"
    if not f16.is_file():
        if progress:
            progress(f"writing {f16.name}")
        write_gguf(shape, f16, seed=seed)
    if fmt == "f16" or ggml_type == "F16":
        return f16
    out = d / f"{stem}-{fmt or 'pure-' + ggml_type}.gguf"
    if not out.is_file():
        if progress:
            progress(f"quantizing {out.name}")
        quantize(f16, out, fmt, ggml_type=ggml_type)
    return out


def build_gguf(config, fmt: str = "f16", *, layers: int | None = None, seed: int = 0) -> Path:
    """The path of ``config``'s GGUF in format ``fmt`` (:data:`FORMATS`), built offline with random weights
    and cached (:func:`cache_dir`): the f16 file first, then llama.cpp's quantization of it."""
    fmt = require_choice("fmt", fmt, FORMATS)
    shape = config if isinstance(config, GGUFShape) else shape_of(config, layers=layers)
    if fmt != "f16":
        require_llamacpp()
    return _built(shape, fmt, None, seed)


# --------------------------------------------------------------------------------------------------
# What the file holds
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GGUFBytes:
    """Per-tensor (name, ggml type, elements, bytes) of a GGUF file, and the bytes one decode step streams."""

    path: str
    tensors: tuple[tuple[str, str, int, int], ...]
    kv_bytes_per_token: int
    layers: int
    vocab: int
    hidden: int

    def _output(self) -> tuple[str, str, int, int]:
        by = {t[0]: t for t in self.tensors}
        return by.get("output.weight") or by["token_embd.weight"]

    @property
    def tied(self) -> bool:
        return not any(t[0] == "output.weight" for t in self.tensors)

    @property
    def file_weight_bytes(self) -> int:
        return sum(t[3] for t in self.tensors)

    def streamed(self) -> list[tuple[str, str, int, int]]:
        """The tensors one decode step reads whole: all but the embedding table (one row of it is read),
        which the output matmul reads whole where it is tied."""
        out = [t for t in self.tensors if t[0] != "token_embd.weight"]
        return out + [self._output()] if self.tied else out

    @property
    def decode_bytes(self) -> int:
        return sum(t[3] for t in self.streamed())

    @property
    def by_type(self) -> dict[str, int]:
        """Decode bytes by ggml type."""
        out: dict[str, int] = {}
        for _, ty, _, nb in self.streamed():
            out[ty] = out.get(ty, 0) + nb
        return out

    def prefill_params_by_type(self) -> dict[str, int]:
        """Matrix elements a prefill multiplies for every prompt token (all matrices but the embedding and the
        output, which a prefill computes for the last position only), by ggml type."""
        out: dict[str, int] = {}
        for name, ty, n, _ in self.tensors:
            if name in ("token_embd.weight", "output.weight") or ty == "F32":
                continue
            out[ty] = out.get(ty, 0) + n
        return out

    @property
    def types(self) -> tuple[str, ...]:
        """The ggml types of the streamed matrices (1-D F32 norms left out)."""
        return tuple(sorted({t for t in self.by_type if t != "F32"}))

    def summary(self) -> str:
        parts = ", ".join(f"{ty} {nb / 1e9:.3f} GB" for ty, nb in sorted(self.by_type.items(), key=lambda x: -x[1]))
        return f"{Path(self.path).name}: decode streams {self.decode_bytes / 1e9:.3f} GB ({parts})"


def gguf_bytes(path) -> GGUFBytes:
    """Read the per-tensor types and bytes of a GGUF file (the ``gguf`` package's reader)."""
    import gguf
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path: no such GGUF file {str(path)!r}")
    r = gguf.GGUFReader(str(p))
    tensors = tuple((t.name, t.tensor_type.name, int(t.n_elements), int(t.n_bytes)) for t in r.tensors)

    def field_int(suffix):
        for k, f in r.fields.items():
            if k.endswith(suffix):
                return int(f.parts[f.data[0]][0])
        raise ValueError(f"{p.name}: no {suffix} in its metadata")
    layers, hidden = field_int(".block_count"), field_int(".embedding_length")
    kv_heads, key_len = field_int(".attention.head_count_kv"), field_int(".attention.key_length")
    vocab = next(t[2] for t in tensors if t[0] == "token_embd.weight") // hidden
    return GGUFBytes(str(p), tensors, 2 * layers * kv_heads * key_len * 2, layers, vocab, hidden)


# --------------------------------------------------------------------------------------------------
# Timing Llama.generate()
# --------------------------------------------------------------------------------------------------
def open_gguf(path, *, threads: int = 1, n_ctx: int = 512):
    """A ``llama_cpp.Llama`` of the file: ``threads`` for decode and prefill, a context of ``n_ctx`` tokens."""
    llama_cpp = require_llamacpp()
    threads = require_count("threads", threads)
    with _quiet():
        return llama_cpp.Llama(model_path=str(path), n_ctx=require_count("n_ctx", n_ctx, minimum=16),
                               n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False, seed=0)


def _set_threads(llm, threads: int) -> None:
    import llama_cpp
    llama_cpp.llama_set_n_threads(llm.ctx, threads, threads)
    llm.n_threads = llm.n_threads_batch = threads
    llm.context_params.n_threads = llm.context_params.n_threads_batch = threads


def generate_timed(llm, tokens: Sequence[int], new_tokens: int) -> tuple[float, list[float]]:
    """(TTFT, step times) of one greedy ``llm.generate()`` of ``new_tokens`` tokens after the prompt ``tokens``."""
    new_tokens = require_count("new_tokens", new_tokens, minimum=2)
    llm.reset()
    stamps = []
    t0 = time.perf_counter()
    for _ in llm.generate(list(tokens), temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
        stamps.append(time.perf_counter())
        if len(stamps) >= new_tokens:
            break
    if len(stamps) != new_tokens:
        raise RuntimeError(f"generate() yielded {len(stamps)} tokens, expected {new_tokens}")
    return stamps[0] - t0, [b - a for a, b in zip(stamps, stamps[1:])]


def _prompt(vocab: int, n: int, rng) -> list[int]:
    return [1] + [int(x) for x in rng.integers(259, vocab, n - 1)]


def measure_gguf(path_or_llm, *, threads: int = 1, prompts: Sequence[int] = PROMPTS, new_tokens: int = NEW_TOKENS,
                 repeats: int = REPEATS, seed: int = 0, warmup: bool = True) -> list:
    """Time ``generate()`` of a GGUF file (or an open ``Llama``) at each prompt length, ``repeats`` times,
    interleaved; one :class:`course_lib.measure.engines.hf.EngineTiming` per prompt."""
    from course_lib.measure.engines.hf import EngineTiming
    from course_lib.measure.threads import proc_stat, steal_between
    prompts = require_counts("prompts", prompts)
    new_tokens = require_count("new_tokens", new_tokens, minimum=2, maximum=4096)
    repeats = require_count("repeats", repeats, minimum=1, maximum=1000)
    threads = require_count("threads", threads)
    need = max(prompts) + new_tokens + 8
    own = not hasattr(path_or_llm, "generate")
    llm = open_gguf(path_or_llm, threads=threads, n_ctx=need) if own else path_or_llm
    if not own:
        if llm.n_ctx() < need:
            raise ValueError(f"prompts: the longest prompt ({max(prompts)}) + new_tokens ({new_tokens}) exceeds the "
                             f"model's context of {llm.n_ctx()} tokens")
        _set_threads(llm, threads)
    vocab = llm.n_vocab()
    rng = np.random.default_rng(seed)
    ttft = {p: [] for p in prompts}
    steps = {p: [] for p in prompts}
    try:
        if warmup:
            generate_timed(llm, _prompt(vocab, min(prompts), rng), 2)
        before = proc_stat()
        for r in range(repeats):
            for p in (prompts if r % 2 == 0 else prompts[::-1]):
                t, gaps = generate_timed(llm, _prompt(vocab, p, rng), new_tokens)
                ttft[p].append(t)
                steps[p].extend(gaps)
        steal = steal_between(before, proc_stat())
    finally:
        if own:
            llm.close()
    return [EngineTiming(p, new_tokens, tuple(ttft[p]), tuple(steps[p]), steal) for p in prompts]


# --------------------------------------------------------------------------------------------------
# Probes: a plain read bandwidth, and the engine's own kernels
# --------------------------------------------------------------------------------------------------
def measure_read_bandwidth(threads: int = 1, *, buffer_bytes: int | None = None, repeats: int = 7) -> float:
    """Bytes/s a plain reduction (``torch.sum`` of an fp32 buffer beyond the last-level cache) reads with
    ``threads`` threads: the bandwidth a memory-bound decode can reach, as the learner's own probe measures it."""
    import torch
    from course_lib.measure.device import last_level_cache_bytes
    from course_lib.measure.timing import Threads
    threads = require_count("threads", threads)
    llc = last_level_cache_bytes("cpu") or 32 * 2**20
    nbytes = buffer_bytes or max(256 * 2**20, 8 * llc)
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    times = []
    with Threads(threads), torch.inference_mode():
        x.sum()
        for _ in range(require_count("repeats", repeats)):
            t0 = time.perf_counter()
            x.sum()
            times.append(time.perf_counter() - t0)
    return x.numel() * 4 / statistics.median(times)


@dataclass(frozen=True)
class EngineRates:
    """What llama.cpp's own kernels reached on the probe files at one thread count.

    ``decode``: bytes/s of a decode step per ggml type; ``prefill``: FLOP/s of a ``prompt``-token prefill per
    type; ``step_fixed`` / ``prefill_fixed``: the engine's fixed seconds per step and per prefill (the tiny
    file of the vocabulary ``vocab``, its own bytes and FLOP taken out); ``timings``: what was measured.
    """

    threads: int
    prompt: int
    decode: Mapping[str, float]
    prefill: Mapping[str, float]
    step_fixed: float
    prefill_fixed: float
    vocab: int
    verdicts: tuple = ()

    def line(self) -> str:
        d = ", ".join(f"{t} {r / 1e9:.1f} GB/s" for t, r in sorted(self.decode.items()))
        p = ", ".join(f"{t} {r / 1e9:.0f}" for t, r in sorted(self.prefill.items()))
        return (f"{self.threads} thread{'s' if self.threads > 1 else ''}: decode {d}; prefill GFLOP/s @ "
                f"{self.prompt}: {p}; fixed {self.step_fixed * 1e3:.2f} ms/step, "
                f"{self.prefill_fixed * 1e3:.2f} ms/prefill (vocabulary {self.vocab})")


def probe_engine_rates(types: Sequence[str], threads: int = 1, *, vocab: int = 32000, prompt: int = PROMPTS[0],
                       new_tokens: int = 8, repeats: int = REPEATS, files: Mapping | None = None,
                       progress: bool = False) -> EngineRates:
    """Measure llama.cpp's decode bytes/s and prefill FLOP/s for each ggml type in ``types`` on probe files
    (never the model): for each type two files of :data:`PROBE_SHAPE` with :data:`PROBE_LAYERS` layers, every
    matrix that type; decode: each file's rate is its median step per byte after the fixed cost, the type's the
    higher of its files'; prefill: their FLOP apart / their TTFTs apart (:func:`engine_rates_from_timings`).
    The fixed cost: a tiny file (:data:`TINY_SHAPE`) of vocabulary ``vocab``."""
    threads = require_count("threads", threads)
    prompt = require_count("prompt", prompt, minimum=2)
    types = tuple(dict.fromkeys(["F16", *types]))
    for t in types:
        _ggml_type("types", t)
    from course_lib.measure.timing import progress_bar
    with progress_bar(total=len(types) + 1, desc="llama.cpp engine probes", unit="type", enabled=progress) as bar:
        files = dict(files) if files is not None else probe_files(types, vocab, note=bar.set_postfix_str)
        return _probe_rates(types, threads, prompt, new_tokens, repeats, files, bar)


def median_rate(samples: Sequence[tuple[float, float]], fixed: float = 0.0, *, name: str = "samples") -> float:
    """Work per second of one probe file's timed samples ``(seconds, work)`` that each pay ``fixed`` seconds:
    1 / the median over the samples of (seconds - fixed) / work (robust to a minority of disturbed samples)."""
    try:
        per = [(float(s) - fixed) / float(w) for s, w in samples]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be (seconds, work) pairs of numbers, got {samples!r}") from None
    except ZeroDivisionError:
        raise ValueError(f"{name} must be finite with work > 0, got {list(samples)}") from None
    if not per:
        raise ValueError(f"{name} must hold at least one (seconds, work) pair")
    if not all(math.isfinite(x) for x in per) or any(float(w) <= 0 for _, w in samples):
        raise ValueError(f"{name} must be finite with work > 0, got {list(samples)}")
    m = statistics.median(per)
    if m <= 0:
        raise ValueError(f"{name}: the median time per unit of work after the fixed {fixed:.3g} s is {m:.3g} s, "
                         f"not > 0 (the fixed cost is larger than the samples' times)")
    return 1.0 / m


def fastest_rate(files: Sequence[Sequence[tuple[float, float]]], fixed: float = 0.0, *, name: str = "files") -> float:
    """The rate of a type from several probe files' samples: the highest of their :func:`median_rate`.

    A disturbance (another program, the hypervisor) only ever slows a step, so of files that should agree the
    least disturbed is the fastest: each file's median passes a minority of disturbed samples, the highest of
    the files passes a file disturbed throughout. A rate taken from two files' times apart amplifies a
    disturbance instead (course VM, 2 threads: Q4_K 29 GB/s from either file alone, 98 GB/s from their times
    apart when the smaller file's steps were disturbed).
    """
    if isinstance(files, (str, bytes)) or not isinstance(files, Sequence) or not files:
        raise ValueError(f"{name} must be a list of at least one probe file's (seconds, work) samples")
    return max(median_rate(f, fixed, name=f"{name}[{i}]") for i, f in enumerate(files))


def _probe_rates(types, threads, prompt, new_tokens, repeats, files, bar) -> EngineRates:
    verdicts = []
    kw = dict(threads=threads, prompts=[prompt], new_tokens=new_tokens, repeats=repeats)
    tiny = gguf_bytes(files["tiny"])
    [tt] = measure_gguf(files["tiny"], **kw)
    verdicts += [tt.tpot_verdict, tt.ttft_verdict]
    timed = {}
    for t in types:
        bar.set_postfix_str(f"{t}, {threads} thread(s)")
        timed[t] = [(gguf_bytes(f), measure_gguf(f, **kw)[0]) for f in files[t]]
        verdicts += [x for _, tm in timed[t] for x in (tm.tpot_verdict, tm.ttft_verdict)]
        bar.update()
    decode, prefill, step_fixed, prefill_fixed = engine_rates_from_timings(tiny, tt, timed, prompt)
    bar.update()
    return EngineRates(threads, prompt, decode, prefill, step_fixed, prefill_fixed, tiny.vocab, tuple(verdicts))


def engine_rates_from_timings(tiny: GGUFBytes, tiny_timing, timed: Mapping[str, Sequence[tuple]], prompt: int
                              ) -> tuple[dict, dict, float, float]:
    """(decode bytes/s per type, prefill FLOP/s per type, fixed seconds per step, fixed seconds per prefill) from
    the probe timings: ``tiny`` / ``tiny_timing``: the tiny file and its timing; ``timed``: {ggml type: [(the
    probe file's :class:`GGUFBytes`, its timing), ...]} with "F16" among them; ``prompt``: the prefill's tokens.

    Decode: every step time of a probe file is one sample (its decode bytes the work); a type's rate is the
    highest of its files' (:func:`fastest_rate`); the fixed cost per step is the tiny file's fastest step less
    its own bytes at the F16 rate, solved together with that rate (a few rounds: the tiny file's bytes are about 1 % of
    a probe step). Prefill: the two files' FLOP apart / their fastest TTFTs apart (a prefill is long and steady,
    and the difference leaves out a cost every prefill pays that the tiny file does not show: with each file's
    own rate instead, after the tiny file's fixed cost, the course's TTFTs came out 6-19 % fast; with their median
    TTFTs, one disturbed 2-thread probe put Q4_0 at 43 GFLOP/s against 157-168 in the sets around it); the fixed
    cost per prefill is the tiny file's fastest TTFT less its FLOP and its output row at those rates.
    """
    if "F16" not in timed:
        raise ValueError(f"timed must hold the F16 probe files, got {sorted(timed)}")
    # the tiny file's fastest step and prefill: a disturbance only slows them, and its steps (about 0.3 ms on the
    # course's VM) are short enough that one stall of the process is most of a step (a 2-thread run's median
    # tiny step was 148 ms once, more than a probe file's whole step)
    st, pt = min(tiny_timing.step_times), min(tiny_timing.ttft_times)
    steps = {t: [[(s, h.decode_bytes) for s in tm.step_times] for h, tm in fs] for t, fs in timed.items()}
    step_fixed = 0.0
    for _ in range(4):
        f16 = fastest_rate(steps["F16"], step_fixed, name="F16 probe steps")
        step_fixed = max(0.0, st - tiny.decode_bytes / f16)
    decode = {t: fastest_rate(s, step_fixed, name=f"{t} probe steps") for t, s in steps.items()}

    prefill = {}
    for t, fs in timed.items():
        if len(fs) != 2:
            raise ValueError(f"timed[{t!r}] must hold two probe files (fewer and more layers), got {len(fs)}")
        (ha, ta), (hb, tb) = fs
        # where noise made the difference implausible (under a third of the larger file's time), the larger file's
        # FLOP over its whole TTFT
        fa, fb = (2 * prompt * sum(h.prefill_params_by_type().values()) for h in (ha, hb))
        pa, pb = min(ta.ttft_times), min(tb.ttft_times)     # each file's fastest: a disturbance only slows
        prefill[t] = (fb - fa) / (pb - pa) if pb - pa > pb / 3 else fb / pb
    tiny_flops = 2 * prompt * sum(tiny.prefill_params_by_type().values())
    prefill_fixed = max(0.0, pt - tiny_flops / prefill["F16"] - tiny._output()[3] / decode["F16"])
    return decode, prefill, step_fixed, prefill_fixed


def probe_files(types: Sequence[str], vocab: int, note=None) -> dict:
    """{type: (paths of the probe files of that type, PROBE_LAYERS layers), "tiny": path of the tiny file of
    ``vocab``}, built and cached."""
    out: dict[str, Any] = {}
    for t in dict.fromkeys(["F16", *types]):
        out[t] = tuple(_built(_probe_shape(n), None, t, 1, note) for n in PROBE_LAYERS)
    out["tiny"] = _built(_tiny_shape(vocab), "f16", None, 1, note)
    return out


def lesson_measurement(config, fmt: str = "q4_k_m", threads: int | None = None, prompt: int = PROMPTS[0],
                       new_tokens: int = NEW_TOKENS, repeats: int = REPEATS, progress: bool = True) -> tuple:
    """(GGUFBytes, EngineTiming) of ``config`` in ``fmt`` at ``threads`` (default all usable): the file built
    (cached), its bytes read back, ``generate()`` timed. What lesson 08's "your engine" section measures."""
    from course_lib.measure.timing import thread_policy_for
    from course_lib.measure.timing import progress_bar
    threads = thread_policy_for(None, "cpu").threads if threads is None else require_count("threads", threads)
    shape = config if isinstance(config, GGUFShape) else shape_of(config)
    with progress_bar(total=2, desc=f"llama.cpp {shape.name} {fmt}", unit="step", enabled=progress) as bar:
        path = _built(shape, require_choice("fmt", fmt, FORMATS), None, 0, bar.set_postfix_str)
        held = gguf_bytes(path)
        bar.update()
        bar.set_postfix_str(f"generate(), {threads} thread(s)")
        [t] = measure_gguf(path, threads=threads, prompts=[prompt], new_tokens=new_tokens, repeats=repeats)
        bar.update()
    return held, t


def q4_row(config="llama-3.2-1b", *, layers: int | None = None, threads: int | None = None) -> dict:
    """The row exercise set 08's q10 asks a function of: the q4_k_m file's ``decode_bytes`` (read back from the
    file where llama.cpp is installed; else the course's nominal count, ``bytes_from`` says which), the read
    ``bandwidth`` at ``threads`` (default all usable), and the model's ``params``."""
    from course_lib.measure.timing import thread_policy_for
    threads = thread_policy_for(None, "cpu").threads if threads is None else require_count("threads", threads)
    shape = shape_of(config, layers=layers)
    if llamacpp_available():
        decode, source = gguf_bytes(build_gguf(shape, "q4_k_m")).decode_bytes, "the q4_k_m file"
    else:
        decode, source = shape_nominal_bytes(shape, "q4_k_m"), "the course's nominal q4_k_m bytes (no llama.cpp)"
    return {"model": shape.name, "format": "q4_k_m", "params": shape.params, "decode_bytes": float(decode),
            "bandwidth": measure_read_bandwidth(threads), "threads": threads, "bytes_from": source}


# --------------------------------------------------------------------------------------------------
# The prediction
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GGUFPrediction:
    """A predicted time and its terms (seconds)."""

    kind: str
    seconds: float
    terms: Mapping[str, float]

    def breakdown(self) -> str:
        return ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.terms.items())


def _rate(table: Mapping[str, float], ty: str) -> float:
    if ty == "F32":
        ty = "F16"
    if ty not in table:
        raise ValueError(f"rates: no probe of ggml type {ty} (probed: {', '.join(sorted(table))})")
    return table[ty]


def predict_gguf_tpot(held: GGUFBytes, rates: EngineRates, context: float = PROMPTS[0] + NEW_TOKENS / 2
                      ) -> GGUFPrediction:
    """Mean decode step of ``held``'s file at ``context`` tokens: fixed + bytes of each type / its probed rate +
    the f16 K/V at the F16 rate."""
    terms = {f"weights {ty}": nb / _rate(rates.decode, ty) for ty, nb in sorted(held.by_type.items())}
    terms["kv"] = context * held.kv_bytes_per_token / _rate(rates.decode, "F16")
    terms["fixed"] = rates.step_fixed
    return GGUFPrediction("tpot", sum(terms.values()), terms)


def predict_gguf_ttft(held: GGUFBytes, rates: EngineRates, prompt: int) -> GGUFPrediction:
    """TTFT of ``held``'s file with a ``prompt``-token prompt: fixed + 2 x prompt x matrix elements of each type
    / its probed FLOP rate + the output matrix for the last position at its decode rate."""
    prompt = require_count("prompt", prompt)
    scale = prompt / rates.prompt
    terms = {f"matmul {ty}": 2 * prompt * n / _rate(rates.prefill, ty)
             for ty, n in sorted(held.prefill_params_by_type().items())}
    out = held._output()
    terms["output"] = out[3] / _rate(rates.decode, out[1])
    terms["fixed"] = rates.prefill_fixed * (scale if prompt != rates.prompt else 1.0)
    return GGUFPrediction("ttft", sum(terms.values()), terms)


def shape_nominal_bytes(shape: GGUFShape, fmt: str) -> float:
    """The course's count of the bytes a decode step streams in ``fmt``: every matrix but the embedding (the
    tied output reads it) at the format's nominal bytes per weight."""
    per = bytes_per_element(PRECISION_OF[fmt])
    n = sum(math.prod(s) for name, s, dt in shape.tensors() if dt == "f16" and name != "token_embd.weight")
    if shape.tied:
        n += shape.vocab * shape.hidden
    return n * per


def cpu_fast_compute(spec):
    """``spec`` with, on a CPU, the fp16 rate raised to the fastest matmul rate it measured (fp32 or bf16).

    The estimator computes fp16 weights, and every weight-only or block format that dequantises (int4, q4_0,
    q4_k_m ...), at the fp16 rate (:func:`course_lib.core.estimator.compute_dtype`). On a GPU that is its tensor
    cores' rate; on a CPU torch's fp16 matmul has no fast kernel (2.3 GFLOP/s on the course's 2-core EPYC, which
    made a 70B q4_k_m decode step 60 s), while the engines a CPU user runs compute those formats at the speed of
    fp32 or bf16 SIMD (llama.cpp: f16 converted on the fly, quantized blocks with int8 dot products). The app's
    "Measure this machine" estimates with this spec. A GPU spec (``memory_type`` "GPU memory", as
    :func:`course_lib.measure.machine.this_machine` writes it for CUDA), or one without fp32/bf16 rates, is
    returned as it is; a rate is only ever raised.
    """
    from course_lib.core.hardware import HardwareSpec
    if not isinstance(spec, HardwareSpec):
        raise TypeError(f"spec must be a HardwareSpec (this_machine()), got {type(spec).__name__}")
    fast = max((spec.peak_flops[d] for d in ("fp32", "bf16") if d in spec.peak_flops), default=None)
    if spec.memory_type == "GPU memory" or fast is None or spec.peak_flops.get("fp16", 0.0) >= fast:
        return spec
    return spec.with_peak("fp16", fast)
