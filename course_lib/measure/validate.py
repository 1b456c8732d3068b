"""Does the latency model predict a real model's timings?  ``python -m course_lib.validate``

The benchmark calibrates ONLY from microbenchmarks (course_lib.bench probes on random tensors; the
model under test, :class:`course_lib.tinylm.TinyLM`, is held out), predicts TPOT and TTFT, then
measures them on TinyLM models of realistic shape and prints predicted vs measured:

    python -m course_lib.validate                # full run (a few minutes on a 2-core CPU)
    python -m course_lib.validate --fast         # tiny models, a few seconds
    python -m course_lib.validate --threads 4 --device cpu
    python -m course_lib.validate --threads 1 --clock process   # a busy shared machine: CPU seconds

On a machine shared with other busy programs, wall-clock timings with several threads are
dominated by the others: every small parallel op waits for a thread the OS has descheduled. The
conditions line records the load average before and after; ``--clock process`` (single thread)
times only this process's CPU seconds, for both the probes and the model.

From Python (lesson 06)::

    from course_lib.measure import validate
    cal = validate.calibrate()                              # the probes only
    p = validate.predict_tpot(validate.VALIDATION_MODELS["llama-S"], 1024, cal)
    p.seconds, p.terms                                      # total and its named terms
    report = validate.run()                                 # predict, then measure
    print(report.table()); print(report.last_line())

**The model of a decode step** (formula ``calibrated_decode_time``)::

    t = t_W + t_KV + n_op · t_op + n_view · t_view

* ``t_W`` (weights): each weight matrix (m × k) is one matrix-vector product; its bytes are divided by
  the bandwidth a GEMV **of that shape** achieves (``bench.measure_linear(1, m, k)``, random matrices
  rotated beyond the last-level cache). On CPUs the achieved GEMV bandwidth depends on the row length
  k (short rows: each row's reduction and store weigh more), by 15–25 % between k = 1024 and
  k = 4096, so one bandwidth number for all matrices misses. Norm vectors and the embedding row are
  counted at the copy bandwidth (they are a few kB).
* ``t_KV`` (formula ``kv_read_time``): the K/V bytes of the context divided by the rate decode
  attention reads them (``bench.measure_kv_read``: softmax(q Kᵀ) V on random K/V of the model's
  kv_heads × group × head_dim, context 4096, rotated). Attention reads K/V in short rows (head_dim)
  and runs a softmax in between: it reaches well under the GEMV bandwidth.
* ``n_op · t_op + n_view · t_view`` (the **per-op overhead**, formulas ``overhead_time`` /
  ``step_time_with_overhead``): every other op the step runs (norms, rotary embedding, residual adds,
  cache writes …) costs a fixed time however few bytes it moves. ``n_op``/``n_view`` are **counted**,
  not fitted: the step is run once on a miniature copy of the model (same layers and structure, tiny
  widths) under a PyTorch dispatch counter; matrix products and the softmax are left out (their fixed
  cost is inside the GEMV / attention probes). ``t_op``/``t_view`` are **cold** costs: every layer
  runs the same small ops, so between two runs of one op a decode step streams one layer of weight
  matrices (:func:`stream_between_ops`, the op's reuse distance); once that exceeds the last-level
  cache the framework's code and data have been evicted and each op pays memory latency, several
  times its tight-loop cost.
  ``bench.measure_op_overhead(flush_bytes=…)`` times a run of distinct small ops right after
  streaming a buffer through memory; the calibration does that for streams of 0 … 4 × LLC and
  :meth:`Calibration.op_costs` interpolates at the model's stream. (On a GPU the weights stream
  through GPU memory, not the host caches: the ops stay hot.)
* A batch of B sequences reads the weights once (while memory-bound) and B × the K/V.

**The uncalibrated prediction** is the course's first-principles estimate with this machine's measured
copy bandwidth and square-matmul FLOP/s and no other term: ``course_lib.estimate`` on
``Calibration.hardware()`` (bytes / copy bandwidth for decode; FLOPs / matmul rate for TTFT).

**TTFT** (prefill): every linear layer is a GEMM of P rows timed at its shape
(``bench.measure_linear(P, m, k)``), TinyLM computes logits at every prompt position and a score for
every query-key pair (masked, not skipped): formula ``prefill_flops_dense``; the attention FLOPs run at
the rate the attention products reach at that shape (:func:`measure_attention_products`; the square-matmul
rate for a calibration without that probe); plus the counted ops' overhead; plus the elementwise passes over the P × P
scores (scale, mask, softmax: formula ``score_pass_time``, at the rate :func:`measure_score_passes`
measures at that shape). TTFT is reported, the accuracy target is for decode.

**A prefill from cached K/V** (lesson 07: prefix and session caches), ``predict_ttft(...,
cached_tokens=C, reuse=...)``: only the n = P - C new tokens go through the linear layers (GEMMs of n
rows), their n × P scores through attention, the op count is that of the call the measurement runs
(``TinyLM.prefill(tokens, prefix=state)`` or ``TinyLM.extend``), and the prefix path first copies
the state's K/V into the cache (``kv_load``, at the copy bandwidth).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import torch

from course_lib.core import _generated as g
from course_lib.measure import bench
from course_lib.core.estimator import estimate
from course_lib.core.hardware import HardwareSpec, custom_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.validation import require_choice, require_count, require_counts

__all__ = ["VALIDATION_MODELS", "FAST_MODELS", "DECODE_CONTEXTS", "TTFT_PROMPTS", "Calibration", "Prediction",
           "Point", "ValidationReport", "calibrate", "predict_tpot", "predict_ttft", "count_ops", "weight_matrices",
           "run", "main", "LAST_LINE_RE", "REUSE_PATHS", "measure_score_passes", "measure_attention_products"]

_BASE = get_model("llama-3-8b")

#: Llama-shaped models (SwiGLU, RMSNorm, RoPE, GQA; vocab 32000 as Llama-2/Mistral) with fewer layers so
#: that fp32 weights span 0.3–1.6 GB. Shapes: "S" = hidden 1024 with 16/4 heads of 64 (Qwen2-0.5B-like
#: widths); "M" = Llama-3.2-1B widths (hidden 2048, 32/8 heads of 64, intermediate 8192); "L" =
#: Llama-3.2-3B widths (hidden 3072, 24/8 heads of 128, intermediate 8192).
VALIDATION_MODELS: dict[str, ModelSpec] = {
    "llama-S": _BASE.scaled(name="llama-S", layers=4, hidden=1024, heads=16, kv_heads=4, head_dim=64,
                            intermediate=2816, vocab=32000),
    "llama-M": _BASE.scaled(name="llama-M", layers=2, hidden=2048, heads=32, kv_heads=8, head_dim=64,
                            intermediate=8192, vocab=32000),
    "llama-L": _BASE.scaled(name="llama-L", layers=2, hidden=3072, heads=24, kv_heads=8, head_dim=128,
                            intermediate=8192, vocab=32000),
}
#: ``--fast``: two tiny models (a few MB) so that the whole run takes seconds
FAST_MODELS: dict[str, ModelSpec] = {
    "tiny-A": _BASE.scaled(name="tiny-A", layers=2, hidden=128, heads=4, kv_heads=2, head_dim=32,
                           intermediate=256, vocab=1000),
    "tiny-B": _BASE.scaled(name="tiny-B", layers=1, hidden=256, heads=8, kv_heads=2, head_dim=32,
                           intermediate=512, vocab=2000),
}
DECODE_CONTEXTS = (128, 1024, 4096)
TTFT_PROMPTS = (128, 512, 1024)
FAST_CONTEXTS = (16, 64)
FAST_PROMPTS = (8, 32)
#: the last line's format
LAST_LINE_RE = re.compile(r"^decode_geomean_abs_error=\d+\.\d+ decode_max_abs_error=\d+\.\d+$")

#: ops whose fixed cost is already inside a probe's time (GEMV/GEMM, attention): not counted as overhead
_PROBED_OPS = {"linear", "mm", "addmm", "bmm", "matmul", "mv", "baddbmm", "_softmax", "softmax",
               "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
               "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu"}
#: ops that move no data (metadata only): they cost ``t_view``
_VIEW_OPS = {"view", "_unsafe_view", "reshape", "select", "slice", "transpose", "t", "permute", "expand",
             "unsqueeze", "squeeze", "as_strided", "alias", "detach", "lift_fresh", "split", "unbind",
             "narrow", "chunk", "unflatten", "flatten", "contiguous", "_reshape_alias", "to", "item",
             "_local_scalar_dense", "split_with_sizes", "view_as", "expand_as", "movedim"}


# ------------------------------------------------------------------------------------------------
# Structure: weight matrices and op counts of a spec
# ------------------------------------------------------------------------------------------------
def _spec(model) -> ModelSpec:
    spec = get_model(model)
    if spec.is_mla or spec.is_moe or spec.nominal_params is not None:
        raise ValueError(f"model {spec.name!r}: the calibrated model covers dense GQA/MHA transformers (TinyLM's)")
    return spec


def weight_matrices(model) -> dict[tuple[int, int], int]:
    """{(m, k): how many} over the weight matrices one decode step multiplies (lm_head included)."""
    s = _spec(model)
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    out: dict[tuple[int, int], int] = {}

    def add(shape, n):
        out[shape] = out.get(shape, 0) + n

    add((q, s.hidden), s.layers)
    add((kv, s.hidden), 2 * s.layers)
    add((s.hidden, q), s.layers)
    add((s.intermediate, s.hidden), (2 if s.mlp == "gated" else 1) * s.layers)
    add((s.hidden, s.intermediate), s.layers)
    add((s.vocab, s.hidden), 1)
    return out


def stream_between_ops(model) -> float:
    """Weight bytes (fp32) a decode step streams between two runs of the same small op: one layer's matrices.

    Every layer runs the same sequence of small ops, so the code and data an op needs were last used
    one layer earlier, and one layer of weight matrices has streamed through the caches since (its
    reuse distance). When that exceeds the last-level cache the op finds them evicted (a cold op).
    """
    s = _spec(model)
    per_model = sum(m * k * n for (m, k), n in weight_matrices(s).items() if (m, k) != (s.vocab, s.hidden))
    return per_model * 4 / s.layers


def _miniature(spec: ModelSpec) -> ModelSpec:
    """Same layers and structure, tiny widths: runs in milliseconds with the same ops."""
    return spec.scaled(name=spec.name + "-mini", hidden=8, head_dim=2, intermediate=8, vocab=16)


def _classify(counts: Mapping[str, int]) -> tuple[int, int]:
    ops = views = 0
    for name, n in counts.items():
        base = name.split(".")[1] if name.startswith("aten.") else name.split(".")[0]
        if base in _PROBED_OPS:
            continue
        if base in _VIEW_OPS:
            views += n
        else:
            ops += n
    return ops, views


_OPS_CACHE: dict = {}
#: decode op counts are taken at this context (or less)
DECODE_COUNT_CONTEXT = 64
#: how a prefill finds cached K/V: ``TinyLM.prefill(tokens, prefix=state)`` or ``TinyLM.extend`` (a session)
REUSE_PATHS = ("prefix", "session")


def count_ops(model, phase: str = "decode", tokens: int = 1, batch: int = 1, cached_tokens: int = 0,
              reuse: str = "prefix") -> dict:
    """Ops a TinyLM runs per step, counted with a PyTorch dispatch counter on a miniature of ``model``.

    ``phase="decode"``: one decode step at context ``tokens`` (counted at context
    ``min(tokens, DECODE_COUNT_CONTEXT)``: a decode step's ops do not depend on the context).
    ``phase="prefill"``: the prefill of ``tokens`` tokens (query chunking is kept: same heads). With
    ``cached_tokens`` = C > 0 (batch 1) the first C tokens' K/V are already there and the counted call
    is the one the cached measurements run: ``reuse="prefix"`` counts
    ``TinyLM.prefill(tokens, prefix=state)`` (state saved from a prefill of the first C tokens; it loads
    the state, checks its tokens and computes the others), ``reuse="session"`` counts
    ``TinyLM.extend(new tokens)`` on a cache holding the C tokens (a chat's next turn).
    Returns ``{"ops": n_op, "views": n_view, "by_name": {...}}`` where matrix
    products and softmax (timed inside the probes) are left out of ``ops``/``views``.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from course_lib.measure.tinylm import TinyLM
    spec = _spec(model)
    phase = require_choice("phase", phase, ("decode", "prefill"))
    tokens = require_count("tokens", tokens, minimum=1)
    batch = require_count("batch", batch, minimum=1)
    cached = require_count("cached_tokens", cached_tokens)
    reuse = require_choice("reuse", reuse, REUSE_PATHS)
    if cached:
        if phase != "prefill":
            raise ValueError(f"cached_tokens applies to phase='prefill' only, got phase={phase!r}")
        if cached >= tokens:
            raise ValueError(f"cached_tokens must be < tokens ({tokens}): a prefill computes at least one new "
                             f"token, got cached_tokens={cached}")
        if batch != 1:
            raise ValueError(f"cached_tokens needs batch=1 (the cached measurements run one sequence), got batch={batch}")
    else:
        reuse = "prefix"  # no cache: one prefill whatever the path
    if phase == "decode":
        tokens = min(tokens, DECODE_COUNT_CONTEXT)
    key = (spec, phase, tokens, batch) if not cached else (spec, phase, tokens, batch, cached, reuse)
    if key in _OPS_CACHE:
        return _OPS_CACHE[key]
    counts: dict[str, int] = {}

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            counts[name] = counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    if phase == "decode":
        # a decode step runs the same ops at every context (one query row: one attention chunk, no mask),
        # so it is counted after a short real prefill; tests check that the count does not change with context
        filled = max(tokens - 1, 1)
        lm = TinyLM(_miniature(spec), device="cpu", max_seq=filled + 1, batch=batch)
        lm.prefill(torch.zeros((batch, filled) if batch > 1 else (filled,), dtype=torch.long))
        tok = torch.zeros(batch, dtype=torch.long) if batch > 1 else torch.tensor(0)
        with _Count():
            lm.decode_step(tok)
    elif not cached:
        lm = TinyLM(_miniature(spec), device="cpu", max_seq=tokens, batch=batch)
        prompt = torch.zeros((batch, tokens) if batch > 1 else (tokens,), dtype=torch.long)
        with _Count():
            lm.prefill(prompt)
    else:
        lm = TinyLM(_miniature(spec), device="cpu", max_seq=tokens, batch=1)
        prompt = torch.zeros(tokens, dtype=torch.long)
        lm.prefill(prompt[:cached])
        if reuse == "prefix":
            state = lm.save_state()
            with _Count():
                lm.prefill(prompt, prefix=state)
        else:
            with _Count():
                lm.extend(prompt[cached:])
    ops, views = _classify(counts)
    out = {"ops": ops, "views": views, "by_name": dict(sorted(counts.items()))}
    _OPS_CACHE[key] = out
    return out


# ------------------------------------------------------------------------------------------------
# Calibration (probes only)
# ------------------------------------------------------------------------------------------------
@dataclass
class Calibration:
    """What the probes measured on this machine: everything a prediction uses, nothing from TinyLM.

    ``gemv``: {(m, k): bytes/s of a 1-token linear of that shape}; ``gemm``: {(P, m, k): FLOP/s};
    ``kv``: {(kv_heads, group, head_dim): bytes/s decode attention reads K/V at}.
    """

    device: str
    device_name: str
    threads: int | None
    torch_version: str
    load_before: tuple
    copy: "bench.CopyResult"
    matmul: "bench.MatmulResult"
    overhead: "bench.OverheadResult"
    gemv: dict = field(default_factory=dict)
    gemm: dict = field(default_factory=dict)
    kv: dict = field(default_factory=dict)
    seconds: float = 0.0
    #: (bytes streamed before the ops, t_op, t_view) from bench.measure_op_overhead at several flush sizes
    cold_ops: list = field(default_factory=list)
    clock: str = "wall"
    #: {(kv_heads, group, queries, keys): scores/s} of the prefill score passes (:func:`measure_score_passes`)
    scores: dict = field(default_factory=dict)
    #: whether the GEMM probes read their weights from memory (rotated beyond the LLC) rather than from cache
    gemm_rotated: bool = False
    #: {(kv_heads, group, head_dim, queries, keys): FLOP/s} of a prefill's attention products (q·kᵀ, p·v)
    attention: dict = field(default_factory=dict)

    def op_costs(self, streamed_bytes: float) -> tuple[float, float]:
        """(t_op, t_view): seconds per small op / view when ``streamed_bytes`` went through memory since
        the ops last ran. Piecewise linear between the probed flush sizes, clamped at both ends; with no
        cold probe, the hot (tight-loop) costs."""
        pts = sorted(self.cold_ops)
        if not pts:
            return self.overhead.seconds, self.overhead.per_kind["view"]
        x = max(0.0, float(streamed_bytes))
        if x <= pts[0][0]:
            return pts[0][1], pts[0][2]
        for (x0, a0, v0), (x1, a1, v1) in zip(pts, pts[1:]):
            if x <= x1:
                f = (x - x0) / (x1 - x0)
                return a0 + f * (a1 - a0), v0 + f * (v1 - v0)
        return pts[-1][1], pts[-1][2]

    def hardware(self) -> HardwareSpec:
        """This machine as the uncalibrated estimate sees it: copy bandwidth and square-matmul fp32 FLOP/s."""
        return custom_hardware("this-machine (copy, matmul)", bandwidth=self.copy.bandwidth,
                               peak_flops={"fp32": self.matmul.flop_rate},
                               display=f"this machine ({self.device_name})",
                               source="course_lib.validate.calibrate: copy bandwidth (read+write) and n×n matmul")

    def gemv_bandwidth(self, m: int, k: int) -> float:
        """Bytes/s of an m × k GEMV: measured when this shape was probed, else interpolated on log k."""
        if (m, k) in self.gemv:
            return self.gemv[(m, k)]
        return _interpolate_k(self.gemv, k, fallback=self.copy.bandwidth)

    def gemm_rate(self, tokens: int, m: int, k: int) -> float:
        """FLOP/s of a P-row linear of shape m × k: measured, else the square-matmul rate."""
        return self.gemm.get((tokens, m, k), self.matmul.flop_rate)

    def score_rate(self, kv_heads: int, group: int, queries: int, keys: int) -> float | None:
        """Scores/s of the prefill score passes at this shape: measured, else the probe of the same head layout
        (any layout if none) whose queries and keys are nearest (sum of their log distances); None if unprobed."""
        if (kv_heads, group, queries, keys) in self.scores:
            return self.scores[(kv_heads, group, queries, keys)]
        if not self.scores:
            return None
        same = [k for k in self.scores if k[:2] == (kv_heads, group)] or list(self.scores)
        best = min(same, key=lambda k: abs(math.log(k[2] / queries)) + abs(math.log(k[3] / keys)))
        return self.scores[best]

    def attention_rate(self, kv_heads: int, group: int, head_dim: int, queries: int, keys: int) -> float:
        """FLOP/s of the attention products (q·kᵀ and p·v) at this shape: measured, else the probe of the same
        layout nearest in queries and keys, else (no probe of this layout) the square-matmul rate."""
        key = (kv_heads, group, head_dim, queries, keys)
        if key in self.attention:
            return self.attention[key]
        same = [k for k in self.attention if k[:3] == key[:3]]
        if not same:
            return self.matmul.flop_rate
        best = min(same, key=lambda k: abs(math.log(k[3] / queries)) + abs(math.log(k[4] / keys)))
        return self.attention[best]

    def kv_bandwidth(self, kv_heads: int, group: int, head_dim: int) -> float:
        """Bytes/s at which decode attention reads K/V of this layout (else the nearest probed head_dim)."""
        if (kv_heads, group, head_dim) in self.kv:
            return self.kv[(kv_heads, group, head_dim)]
        if not self.kv:
            return self.copy.bandwidth
        best = min(self.kv, key=lambda key: (abs(math.log(key[2] / head_dim)), abs(math.log(key[1] / group))))
        return self.kv[best]

    def conditions(self) -> str:
        load = ", ".join(f"{x:.2f}" for x in self.load_before) if self.load_before else "n/a"
        return (f"device={self.device} ({self.device_name}) threads={self.threads} torch={self.torch_version} "
                f"clock={self.clock} load_avg(1,5,15 min) before={load}")

    def summary(self) -> str:
        lines = [f"copy bandwidth (read+write): {self.copy.gb_per_s:.2f} GB/s (spread {self.copy.spread:.1%})",
                 f"matmul fp32 {self.matmul.n}×{self.matmul.n}: {self.matmul.gflop_per_s:.1f} GFLOP/s",
                 f"op overhead, hot (tight loop): {self.overhead.seconds * 1e6:.2f} µs per op, "
                 f"{self.overhead.per_kind['view'] * 1e6:.2f} µs per view"]
        for x, a, v in sorted(self.cold_ops):
            lines.append(f"op overhead after streaming {x / 2**20:.0f} MiB: {a * 1e6:.2f} µs per op, "
                         f"{v * 1e6:.2f} µs per view")
        for (m, k), bw in sorted(self.gemv.items()):
            lines.append(f"GEMV {m}×{k}: {bw / 1e9:.2f} GB/s")
        for (kvh, grp, d), bw in sorted(self.kv.items()):
            lines.append(f"attention K/V read (kv_heads={kvh}, group={grp}, head_dim={d}): {bw / 1e9:.2f} GB/s")
        rot = " (weights from memory)" if self.gemm_rotated else ""
        for (p, m, k), r in sorted(self.gemm.items()):
            lines.append(f"GEMM {p} tokens × {m}×{k}{rot}: {r / 1e9:.1f} GFLOP/s")
        for (kvh, grp, d, q, k), r in sorted(self.attention.items()):
            lines.append(f"attention products (kv_heads={kvh}, group={grp}, head_dim={d}, {q} queries × {k} keys): "
                         f"{r / 1e9:.1f} GFLOP/s")
        for (kvh, grp, q, k), r in sorted(self.scores.items()):
            lines.append(f"score passes (kv_heads={kvh}, group={grp}, {q} queries × {k} keys): "
                         f"{r / 1e9:.3f} G scores/s")
        return "\n".join(lines)


def _interpolate_k(table: Mapping[tuple[int, int], float], k: int, fallback: float) -> float:
    """Bandwidth at row length k: geometric mean per probed k, linear in log k between them (clamped)."""
    if not table:
        return fallback
    by_k: dict[int, list[float]] = {}
    for (_m, kk), bw in table.items():
        by_k.setdefault(kk, []).append(bw)
    ks = sorted(by_k)
    val = {kk: statistics.geometric_mean(v) for kk, v in by_k.items()}
    if k <= ks[0]:
        return val[ks[0]]
    if k >= ks[-1]:
        return val[ks[-1]]
    for a, b in zip(ks, ks[1:]):
        if a <= k <= b:
            f = math.log(k / a) / math.log(b / a)
            return val[a] * (1 - f) + val[b] * f
    return fallback  # unreachable


def _load() -> tuple:
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except (AttributeError, OSError):
        return ()


def _models_arg(models, fast: bool) -> dict[str, ModelSpec]:
    if models is None:
        return dict(FAST_MODELS if fast else VALIDATION_MODELS)
    if isinstance(models, (str, ModelSpec)):
        models = [models]
    if isinstance(models, Mapping):
        items = {str(k): _spec(v) for k, v in models.items()}
    else:
        try:
            items = {(s := _spec(m)).name: s for m in models}
        except TypeError:
            raise TypeError(f"models must be a list of model names/ModelSpecs, got {type(models).__name__}") from None
    if not items:
        raise ValueError("models must name at least one model")
    return items


def _check_clock(clock, dev, nthreads) -> str:
    clock = require_choice("clock", clock, bench.CLOCKS)
    if clock == "process" and (dev.type != "cpu" or nthreads != 1):
        raise ValueError("clock='process' (CPU seconds of this process) needs device='cpu' and threads=1; "
                         f"got device={dev.type!r}, threads={nthreads}")
    return clock


def measure_score_passes(kv_heads: int, group: int, queries: int, keys: int, threads: int | None = None,
                         device=None, repeats: int | None = None, min_block: float | None = None) -> float:
    """Scores/s of the elementwise passes a simple prefill runs over its attention scores (a probe).

    Random fp32 scores of shape (kv_heads, group × queries, keys), as ``q @ kᵀ`` leaves them for one
    layer (the ``group`` query heads sharing a K/V head are rows of one matrix), then: scale by
    1/√d (a new tensor, as the matmul's output is), causal mask (``masked_fill_`` with the mask of
    ``queries`` new tokens after ``keys - queries`` cached ones) and softmax over the keys. Nothing
    of the model under test is used: only the shape. Returns ``kv_heads · group · queries · keys /
    seconds`` (median of the probe's timed blocks, :mod:`course_lib.bench`'s timing core).
    """
    kvh = require_count("kv_heads", kv_heads, minimum=1)
    grp = require_count("group", group, minimum=1)
    q = require_count("queries", queries, minimum=1)
    k = require_count("keys", keys, minimum=1)
    if q > k:
        raise ValueError(f"queries must be <= keys (the new tokens are among the keys), got {q} > {k}")
    dev = bench._device(device)
    nthreads = bench._threads(threads, dev)
    repeats, min_block = bench._settings(repeats, min_block)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(kvh, grp * q, k, generator=gen).to(dev)
    qslot = torch.arange(k - q, k, device=dev).view(-1, 1)
    blocked = ~(torch.arange(k, device=dev).view(1, -1) <= qslot)
    scale = math.sqrt(64.0)

    def passes():
        x = torch.div(base, scale)
        if q > 1:  # TinyLM masks only chunks of several queries (one query sees every key in its range)
            x.view(kvh, grp, q, k).masked_fill_(blocked, float("-inf"))
        return torch.softmax(x, -1)

    with bench._Threads(nthreads), torch.inference_mode():
        t = bench._timeit([passes], dev, repeats, min_block)
    return kvh * grp * q * k / t.median


def measure_attention_products(kv_heads: int, group: int, head_dim: int, queries: int, keys: int,
                                threads: int | None = None, device=None, repeats: int | None = None,
                                min_block: float | None = None) -> float:
    """FLOP/s of one layer's attention products in a prefill, ``q·kᵀ`` then ``p·v`` (a probe).

    Random fp32 tensors laid out as TinyLM's: q (1, kv_heads, group × queries, head_dim) against
    k and v (1, kv_heads, keys, head_dim), the scores (1, kv_heads, group × queries, keys) times v.
    ``4 · kv_heads · group · queries · keys · head_dim`` FLOP per call (the dense count of
    ``prefill_flops_dense``). Thin products (head_dim deep, few queries) run well below a square matmul.
    """
    kvh = require_count("kv_heads", kv_heads, minimum=1)
    grp = require_count("group", group, minimum=1)
    d = require_count("head_dim", head_dim, minimum=1)
    q = require_count("queries", queries, minimum=1)
    k = require_count("keys", keys, minimum=1)
    dev = bench._device(device)
    nthreads = bench._threads(threads, dev)
    repeats, min_block = bench._settings(repeats, min_block)
    gen = torch.Generator().manual_seed(0)
    qq = torch.randn(1, kvh, grp * q, d, generator=gen).to(dev)
    kk = torch.randn(1, kvh, k, d, generator=gen).to(dev)
    vv = torch.randn(1, kvh, k, d, generator=gen).to(dev)
    pp = torch.rand(1, kvh, grp * q, k, generator=gen).to(dev)

    def products():
        return qq @ kk.transpose(-1, -2), pp @ vv

    with bench._Threads(nthreads), torch.inference_mode():
        t = bench._timeit([products], dev, repeats, min_block)
    return 4 * kvh * grp * q * k * d / t.median


def calibrate(threads: int | None = None, fast: bool = False, models=None, prompt_lengths=None,
              ttft_model=None, device=None, progress: bool = True, clock: str = "wall",
              cached_prefills=(), rotate_gemm: bool = False) -> Calibration:
    """Run the probes (never the model under test) and return a :class:`Calibration`.

    Copy bandwidth, square-matmul FLOP/s, the per-op overhead, the GEMV bandwidth of every weight
    shape of ``models`` (default: :data:`VALIDATION_MODELS`, or :data:`FAST_MODELS` with ``fast``),
    the attention K/V read rate of their head layouts, and the GEMM rate of ``ttft_model``'s shapes at
    ``prompt_lengths`` (default :data:`TTFT_PROMPTS`), and the rate of the prefill score passes
    (:func:`measure_score_passes`) of ``ttft_model``'s head layout at each prompt length.
    ``cached_prefills``: (prompt_tokens, cached_tokens) pairs of prefills that start from cached K/V
    (:func:`predict_ttft` with ``cached_tokens``): their new-token GEMM rows and score / attention-product
    shapes (new × prompt) are probed too; the attention products (:func:`measure_attention_products`)
    are probed at the same shapes as the score passes. ``rotate_gemm``: time the GEMMs with their weights read from memory
    (rotated beyond the last-level cache, as a model larger than the cache reads them) instead of
    from cache (default, as before): it matters for short prefills, whose few rows per weight cannot
    hide the read. ``threads``: CPU threads (default: all physical cores); recorded in the result.
    ``clock``: "wall" (default) or "process" (CPU seconds of this process: for a shared machine, only
    with ``threads=1`` on a CPU; see :func:`bench.use_clock`).
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    if not isinstance(rotate_gemm, bool):
        raise TypeError(f"rotate_gemm must be True or False, got {rotate_gemm!r}")
    pairs = _cached_pairs(cached_prefills)
    dev = bench._device(device)
    nthreads = bench._threads(threads, dev)
    clock = _check_clock(clock, dev, nthreads)
    with bench.use_clock(clock):
        return _calibrate(dev, nthreads, fast, models, prompt_lengths, ttft_model, progress, clock, pairs,
                          rotate_gemm)


def _cached_pairs(cached_prefills) -> list[tuple[int, int]]:
    if isinstance(cached_prefills, (str, bytes)) or not isinstance(cached_prefills, Iterable):
        raise TypeError(f"cached_prefills must be a list of (prompt_tokens, cached_tokens) pairs, got "
                        f"{cached_prefills!r}")
    out = []
    for i, pair in enumerate(cached_prefills):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Iterable) or len(tuple(pair)) != 2:
            raise TypeError(f"cached_prefills[{i}] must be a (prompt_tokens, cached_tokens) pair, got {pair!r}")
        p, c = tuple(pair)
        p = require_count(f"cached_prefills[{i}] prompt_tokens", p, minimum=1)
        c = require_count(f"cached_prefills[{i}] cached_tokens", c)
        if c >= p:
            raise ValueError(f"cached_prefills[{i}]: cached_tokens must be < prompt_tokens, got ({p}, {c})")
        out.append((p, c))
    return out


def _calibrate(dev, nthreads, fast, models, prompt_lengths, ttft_model, progress, clock, pairs=(),
               rotate_gemm=False) -> Calibration:
    specs = _models_arg(models, fast)
    prompts = require_counts("prompt_lengths", (FAST_PROMPTS if fast else TTFT_PROMPTS) if prompt_lengths is None
                      else prompt_lengths)
    ttft_spec = list(specs.values())[0] if ttft_model is None else _spec(ttft_model)
    repeats, min_block = (3, 2e-4) if fast else (7, 2e-3)
    t0 = time.perf_counter()
    load = _load()
    shapes = sorted({sh for s in specs.values() for sh in weight_matrices(s)})
    layouts = sorted({(s.kv_heads, s.heads // s.kv_heads, s.head_dim) for s in specs.values()})
    rows = sorted(set(prompts) | {p - c for p, c in pairs})
    gemm_jobs = [(p, m, k) for p in rows for (m, k) in sorted(weight_matrices(ttft_spec))]
    layout = (ttft_spec.kv_heads, ttft_spec.heads // ttft_spec.kv_heads)
    score_jobs = sorted({(*layout, p, p) for p in prompts} | {(*layout, p - c, p) for p, c in pairs})
    llc = bench.last_level_cache_bytes(dev) or bench.FALLBACK_LLC_BYTES
    if dev.type == "cuda":
        streams = [0]  # the weights stream through GPU memory, not the host caches the dispatcher runs from
    elif fast:
        streams = [0, llc]
    else:
        streams = [0, llc // 4, llc // 2, llc, 2 * llc, 4 * llc]
    jobs = ["copy", "matmul", "overhead"] + [("cold", x) for x in streams] + [("gemv", sh) for sh in shapes] \
        + [("kv", lay) for lay in layouts] \
        + [("gemm", j) for j in gemm_jobs] + [("scores", j) for j in score_jobs] \
        + [("attention", (*j[:2], ttft_spec.head_dim, *j[2:])) for j in score_jobs]
    kw = dict(threads=nthreads, device=dev)
    res: dict = {"gemv": {}, "kv": {}, "gemm": {}, "cold": [], "scores": {}, "attention": {}}
    kv_context = 256 if fast else 4096
    tqdm = bench._tqdm()
    with tqdm(jobs, desc="calibrate (probes)", unit="probe", disable=not progress, file=sys.stderr) as bar:
        for job in bar:
            if job == "copy":
                res["copy"] = bench.measure_copy_bandwidth(buffer_bytes=(16 << 20) if fast else None, repeats=repeats,
                                                           min_block=min_block, **kw)
            elif job == "matmul":
                n = 256 if fast else (1024 if dev.type == "cpu" else 4096)  # fixed: a busy machine cannot shrink it
                res["matmul"] = bench.measure_matmul_flops(n=n, repeats=repeats, min_block=min_block, **kw)
            elif job == "overhead":
                res["overhead"] = bench.measure_op_overhead(repeats=repeats, min_block=min_block, cold=False, **kw)
            elif job[0] == "cold":
                r = bench.measure_op_overhead(repeats=1, min_block=min_block, flush_bytes=job[1] // 2,
                                              cold_runs=8 if fast else 30, **kw)
                res["cold"].append((job[1], r.cold_seconds, r.cold_view_seconds))
            elif job[0] == "gemv":
                m, k = job[1]
                r = bench.measure_linear(1, m, k, repeats=repeats, min_block=min_block, **kw)
                res["gemv"][(m, k)] = r.bandwidth
            elif job[0] == "kv":
                kvh, grp, d = job[1]
                r = bench.measure_kv_read(kvh, grp, d, kv_context, repeats=repeats, min_block=min_block, **kw)
                res["kv"][job[1]] = r.bandwidth
            elif job[0] == "attention":
                res["attention"][job[1]] = measure_attention_products(*job[1], repeats=max(3, repeats // 2),
                                                                      min_block=min_block, **kw)
            elif job[0] == "scores":
                res["scores"][job[1]] = measure_score_passes(*job[1], repeats=max(3, repeats // 2),
                                                             min_block=min_block, **kw)
            else:
                p, m, k = job[1]
                r = bench.measure_linear(p, m, k, repeats=max(3, repeats // 2), min_block=min_block,
                                         rotate=rotate_gemm, **kw)
                res["gemm"][job[1]] = r.flop_rate
    return Calibration(device=dev.type, device_name=bench.device_name(dev), threads=nthreads,
                       torch_version=torch.__version__, load_before=load, copy=res["copy"], matmul=res["matmul"],
                       overhead=res["overhead"], gemv=res["gemv"], gemm=res["gemm"], kv=res["kv"],
                       seconds=time.perf_counter() - t0, cold_ops=res["cold"], clock=clock, scores=res["scores"],
                       gemm_rotated=rotate_gemm, attention=res["attention"])


# ------------------------------------------------------------------------------------------------
# Predictions
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """A predicted time with its named terms (seconds) and the uncalibrated first-principles figure."""

    kind: str                  # "tpot" or "ttft"
    model: str
    tokens: int                # context (tpot) or prompt tokens (ttft)
    batch: int
    terms: dict                # name -> seconds; they add up to ``seconds``
    uncalibrated: float        # course_lib.estimate on Calibration.hardware(): no overhead, no shape effects
    counts: dict               # bytes, FLOPs and op counts behind the terms
    cached_tokens: int = 0     # ttft: prompt tokens whose K/V were already cached (prefilled: tokens - cached_tokens)

    @property
    def seconds(self) -> float:
        return sum(self.terms.values())

    def breakdown(self) -> str:
        parts = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.terms.items())
        cached = f" ({self.cached_tokens} cached)" if self.cached_tokens else ""
        return f"{self.kind} {self.model} @ {self.tokens}{cached}: {self.seconds * 1e3:.3f} ms = {parts}"


def _check_cal(calibration):
    if not isinstance(calibration, Calibration):
        raise TypeError(f"calibration must come from validate.calibrate(), got {type(calibration).__name__}")


def predict_tpot(spec, context: int, calibration: Calibration, batch: int = 1) -> Prediction:
    """Predicted seconds of one decode step whose attention covers ``context`` tokens (its own included).

    Terms (formula ``calibrated_decode_time``): ``weights`` Σ matrix bytes / GEMV bandwidth of its shape
    (+ norm vectors and embedding rows at the copy bandwidth), ``kv`` (``kv_read_time``), ``overhead``
    (n_op·t_op) and ``views`` (n_view·t_view). A batch reads the weights once and B × the K/V; when
    its FLOPs at the square-matmul rate exceed the weights' time, that compute time replaces it.
    """
    _check_cal(calibration)
    s = _spec(spec)
    c = require_count("context", context, minimum=1)
    b = require_count("batch", batch, minimum=1)
    esize = 4
    mats = weight_matrices(s)
    mat_bytes = sum(m * k * esize * n for (m, k), n in mats.items())
    mat_time = sum(m * k * esize * n / calibration.gemv_bandwidth(m, k) for (m, k), n in mats.items())
    streamed = s.decode_weight_bytes("fp32", b)
    rest = streamed - mat_bytes
    weights_time = mat_time + g.memory_time(rest, calibration.copy.bandwidth, 1.0)
    a = s.attended_tokens(c)
    flops = g.decode_flops(b, s.active_block_params, s.vocab, s.hidden, s.layers, s.heads, s.attn_dim, a)
    weight_flops = flops - g.decode_flops(b, 0, 0, 0, s.layers, s.heads, s.attn_dim, a)
    weights_time = max(weights_time, g.compute_time(weight_flops, calibration.matmul.flop_rate, 1.0))
    k_tok = s.kv_bytes_per_token("fp32")
    kv_time = g.kv_read_time(b, a, k_tok, calibration.kv_bandwidth(s.kv_heads, s.heads // s.kv_heads, s.head_dim))
    ops = count_ops(s, "decode", c, b)
    between = stream_between_ops(s)
    t_op, t_view = calibration.op_costs(between)
    total = g.calibrated_decode_time(weights_time, kv_time, ops["ops"], t_op, ops["views"], t_view)
    terms = {"weights": weights_time, "kv": kv_time, "overhead": g.overhead_time(ops["ops"], t_op),
             "views": g.overhead_time(ops["views"], t_view)}
    assert math.isclose(sum(terms.values()), total, rel_tol=1e-12)
    est = estimate(s, calibration.hardware(), prompt_tokens=max(c - 1, 1), new_tokens=2, precision="fp32", batch=b)
    unc = est.decode_first.time  # the step at context c: max(FLOPs / matmul rate, bytes / copy bandwidth)
    counts = {"weight_bytes": streamed, "kv_bytes": b * a * k_tok, "flops": flops, "ops": ops["ops"],
              "views": ops["views"], "stream_between_ops": between, "t_op": t_op, "t_view": t_view}
    return Prediction("tpot", s.name, c, b, terms, unc, counts)


def predict_ttft(spec, prompt_tokens: int, calibration: Calibration, cached_tokens: int = 0,
                 reuse: str = "prefix") -> Prediction:
    """Predicted seconds to prefill ``prompt_tokens`` tokens (batch 1), the first ``cached_tokens`` from a cache.

    With ``cached_tokens`` = 0 (default) the prefill starts from an empty cache. With C > 0 only the
    n = P - C new tokens are computed; they attend to the C cached tokens and causally to each other.
    Terms: ``linear`` Σ 2·n·m·k / GEMM rate of that shape (n rows; logits at every new position, as
    TinyLM computes them), ``attention`` the dense score FLOPs of the n queries against all C + n keys
    (``prefill_flops_dense`` minus its linear part) at the rate :func:`measure_attention_products` measured
    at (or nearest) that shape, else the square-matmul rate, ``overhead``/``views``
    the ops counted on the call the measurement runs (:func:`count_ops` with ``cached_tokens`` and
    ``reuse``), ``scores`` (formula ``score_pass_time``, when the calibration probed the score passes):
    the scale/mask/softmax passes over the n × P scores of every layer and query head at the rate
    :func:`measure_score_passes` measured at (or nearest) that shape, and, when C > 0, ``kv_load``: ``reuse="prefix"`` (``TinyLM.prefill(tokens,
    prefix=state)``) copies the state's K/V into the cache first, read + write at the copy bandwidth
    (``memory_time``); ``reuse="session"`` (``TinyLM.extend``) finds them in place (0 s).
    ``uncalibrated``: ``course_lib.estimate(..., cached_prefix_tokens=C)`` on :meth:`Calibration.hardware`.
    """
    _check_cal(calibration)
    s = _spec(spec)
    p = require_count("prompt_tokens", prompt_tokens, minimum=1)
    c = require_count("cached_tokens", cached_tokens)
    reuse = require_choice("reuse", reuse, REUSE_PATHS)
    if c >= p:
        raise ValueError(f"cached_tokens must be < prompt_tokens ({p}): a prefill computes at least one new token, "
                         f"got cached_tokens={c}")
    n = p - c
    mats = weight_matrices(s)
    linear_time = sum(2 * n * m * k * cnt / calibration.gemm_rate(n, m, k) for (m, k), cnt in mats.items())
    dense = g.prefill_flops_dense(1, s.active_block_params, n, s.vocab, s.hidden, s.layers, s.heads, s.attn_dim, c)
    attn_flops = dense - g.prefill_flops_dense(1, s.active_block_params, n, s.vocab, s.hidden, s.layers, s.heads,
                                               0, 0)
    attn_rate = calibration.attention_rate(s.kv_heads, s.heads // s.kv_heads, s.head_dim, n, p)
    attn_time = g.compute_time(attn_flops, attn_rate, 1.0)
    ops = count_ops(s, "prefill", p, cached_tokens=c, reuse=reuse)
    t_op, t_view = calibration.op_costs(stream_between_ops(s))
    terms = {"linear": linear_time, "attention": attn_time, "overhead": g.overhead_time(ops["ops"], t_op),
             "views": g.overhead_time(ops["views"], t_view)}
    counts = {"flops_dense": dense, "attention_flops": attn_flops, "ops": ops["ops"], "views": ops["views"]}
    rate = calibration.score_rate(s.kv_heads, s.heads // s.kv_heads, n, p)
    if rate is not None:  # a calibration without the score probe (older ones) leaves the term out
        terms["scores"] = g.score_pass_time(1, s.layers, s.heads, n, c, rate)
        counts.update(scores=s.layers * s.heads * n * p, score_rate=rate)
    if c:
        # the copy probe counts read + write, as the state's K/V are read and written into the cache
        load_bytes = 2 * c * s.kv_bytes_per_token("fp32") if reuse == "prefix" else 0
        terms["kv_load"] = g.memory_time(load_bytes, calibration.copy.bandwidth, 1.0)
        counts.update(new_tokens=n, kv_load_bytes=load_bytes, reuse=reuse)
    unc = estimate(s, calibration.hardware(), prompt_tokens=p, new_tokens=1, precision="fp32",
                   cached_prefix_tokens=c).ttft
    return Prediction("ttft", s.name, p, 1, terms, unc, counts, c)


# ------------------------------------------------------------------------------------------------
# Measure and compare
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One row of the table: a prediction and its measurement."""

    kind: str
    model: str
    weights_bytes: float
    tokens: int
    predicted: float
    measured: float
    spread: float
    uncalibrated: float
    runs: int
    prediction: Prediction

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured

    @property
    def uncalibrated_error(self) -> float:
        return (self.uncalibrated - self.measured) / self.measured


COLUMNS = ("phase", "model", "weights (GB)", "context/prompt", "predicted (ms)", "measured (ms)", "error %",
           "spread %", "uncalibrated (ms)", "uncal. error %")


@dataclass
class ValidationReport:
    """Calibration, points, and the conditions the run had."""

    calibration: Calibration
    points: list
    load_after: tuple
    seconds: float

    @property
    def decode(self) -> list:
        return [p for p in self.points if p.kind == "tpot"]

    @property
    def ttft(self) -> list:
        return [p for p in self.points if p.kind == "ttft"]

    @property
    def decode_geomean_abs_error(self) -> float:
        errs = [max(abs(p.error), 1e-12) for p in self.decode]
        return statistics.geometric_mean(errs) if errs else math.nan

    @property
    def decode_max_abs_error(self) -> float:
        return max((abs(p.error) for p in self.decode), default=math.nan)

    def rows(self) -> list[tuple]:
        out = []
        for p in self.points:
            out.append(("TPOT" if p.kind == "tpot" else "TTFT", p.model, f"{p.weights_bytes / 1e9:.3f}",
                        str(p.tokens), f"{p.predicted * 1e3:.3f}", f"{p.measured * 1e3:.3f}", f"{p.error * 100:+.1f}",
                        f"{p.spread * 100:.1f}", f"{p.uncalibrated * 1e3:.3f}", f"{p.uncalibrated_error * 100:+.1f}"))
        return out

    def table(self) -> str:
        rows = [COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
        def line(r):
            return "  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

        sep = "  ".join("-" * w for w in widths)
        return "\n".join([line(rows[0]), sep] + [line(r) for r in rows[1:]])

    def last_line(self) -> str:
        return (f"decode_geomean_abs_error={self.decode_geomean_abs_error:.3f} "
                f"decode_max_abs_error={self.decode_max_abs_error:.3f}")

    def report(self) -> str:
        load = ", ".join(f"{x:.2f}" for x in self.load_after) if self.load_after else "n/a"
        ttft = [abs(p.error) for p in self.ttft]
        unc = [abs(p.uncalibrated_error) for p in self.decode]
        lines = ["conditions: " + self.calibration.conditions() + f"; after={load}",
                 f"calibration ({self.calibration.seconds:.1f} s, probes only):",
                 *("  " + x for x in self.calibration.summary().splitlines()),
                 "", self.table(), "",
                 "decode terms: " + "; ".join(p.prediction.breakdown() for p in self.decode[:1]),
                 f"uncalibrated decode: geomean |error| {statistics.geometric_mean(unc) if unc else math.nan:.3f}, "
                 f"max {max(unc, default=math.nan):.3f}",
                 f"TTFT: max |error| {max(ttft, default=math.nan):.3f} (reported, not in the target)",
                 f"total {self.seconds:.1f} s",
                 self.last_line()]
        return "\n".join(lines)


def run(threads: int | None = None, fast: bool = False, device=None, models=None, contexts=None,
        prompt_lengths=None, ttft_model=None, runs: int | None = None, progress: bool = True,
        calibration: Calibration | None = None, clock: str = "wall") -> ValidationReport:
    """Calibrate from the probes, predict, then measure TinyLM and compare.

    Decode: every model × every context (median of ``runs`` timed steps, default 8; spread = IQR /
    median). TTFT: ``ttft_model`` (default: the first model) at every prompt length (median of
    ``runs`` fresh prompts, default 5). ``fast``: tiny models and contexts (seconds). ``clock``: see
    :func:`calibrate`; the same clock times the probes and the model.
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    t0 = time.perf_counter()
    dev = bench._device(device)
    nthreads = bench._threads(threads, dev)
    clock = _check_clock(clock, dev, nthreads)
    specs = _models_arg(models, fast)
    ctxs = require_counts("contexts", (FAST_CONTEXTS if fast else DECODE_CONTEXTS) if contexts is None else contexts)
    prompts = require_counts("prompt_lengths", (FAST_PROMPTS if fast else TTFT_PROMPTS) if prompt_lengths is None
                      else prompt_lengths)
    ttft_spec = list(specs.values())[0] if ttft_model is None else _spec(ttft_model)
    decode_runs = 8 if runs is None else require_count("runs", runs, minimum=5)
    ttft_runs = 5 if runs is None else decode_runs
    if calibration is None:
        calibration = calibrate(nthreads, fast, models=specs, prompt_lengths=prompts, ttft_model=ttft_spec,
                                device=dev, progress=progress, clock=clock)
    else:
        _check_cal(calibration)
    with bench.use_clock(clock):
        points = _measure(specs, ctxs, prompts, ttft_spec, decode_runs, ttft_runs, dev, nthreads, calibration,
                          progress)
    return ValidationReport(calibration, points, _load(), time.perf_counter() - t0)


def _measure(specs, ctxs, prompts, ttft_spec, decode_runs, ttft_runs, dev, nthreads, calibration, progress):
    from course_lib.measure.tinylm import TinyLM
    steps = decode_runs
    points = []
    jobs = [("tpot", s) for s in specs.values()] + [("ttft", ttft_spec)]
    tqdm = bench._tqdm()
    with tqdm(total=len(specs) * len(ctxs) + len(prompts), desc="measure TinyLM", unit="point",
              disable=not progress, file=sys.stderr) as bar:
        for kind, s in jobs:
            need = max(ctxs) + steps + 1 if kind == "tpot" else max(prompts)
            lm = TinyLM(s, device=dev, max_seq=need, seed=0)
            wbytes = s.weight_bytes("fp32")
            if kind == "tpot":
                for c in ctxs:
                    bar.set_postfix_str(f"{s.name} TPOT @ {c}")
                    t = bench.measure_decode_contexts(lm, [c], steps=steps, threads=nthreads)[0]
                    p1 = predict_tpot(s, t.first_context, calibration)
                    p2 = predict_tpot(s, t.last_context, calibration)
                    pred = (p1.seconds + p2.seconds) / 2  # per-step time is linear in context: the mean step
                    unc = (p1.uncalibrated + p2.uncalibrated) / 2
                    points.append(Point("tpot", s.name, wbytes, c, pred, t.seconds, t.spread, unc, t.steps, p1))
                    bar.update()
            else:
                for p in prompts:
                    bar.set_postfix_str(f"{s.name} TTFT @ {p}")
                    t = bench.measure_prefill(lm, [p], repeats=ttft_runs, threads=nthreads)[0]
                    pr = predict_ttft(s, p, calibration)
                    points.append(Point("ttft", s.name, wbytes, p, pr.seconds, t.seconds, t.spread, pr.uncalibrated,
                                        t.repeats, pr))
                    bar.update()
            del lm
    return points


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_lib.validate",
                                 description="Calibrate from microbenchmarks, then predict and measure TinyLM "
                                             "TPOT/TTFT. Last line: decode_geomean_abs_error=… "
                                             "decode_max_abs_error=…")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all physical cores)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--fast", action="store_true", help="tiny models and contexts: a few seconds")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per point (>= 5)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    ap.add_argument("--clock", default="wall", help="wall (default) or process: CPU seconds of this process, "
                                                    "for a busy shared machine; needs --threads 1 --device cpu")
    a = ap.parse_args(argv)
    try:
        rep = run(threads=a.threads, fast=a.fast, device=a.device or bench.default_device(), runs=a.runs,
                  progress=not a.no_progress, clock=a.clock)
    except (ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(rep.report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
