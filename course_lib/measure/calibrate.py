"""Calibration: what the probes measure on this machine, for the calibrated latency model.

Lessons: 06, 07

    from course_lib.measure import calibrate as cal
    c = cal.calibrate()                    # the probes only: never the model under test
    c = cal.calibrate(copy=copy, matmul=mm)   # a lesson's own ceilings, reused where taken with the same settings
    c.gemv_bandwidth(4096, 1024)           # bytes/s of a GEMV of that shape (measured or interpolated)
    c.op_costs(64 * 2**20)                 # (t_op, t_view) after 64 MiB streamed since the ops last ran
    print(c.summary())

:func:`calibrate` runs the probes of :mod:`course_lib.measure.probes` on random tensors at the shapes
of the models it calibrates for (their weight matrices, head layouts and prompt lengths) and returns
a :class:`Calibration`. Which probes run, and with which settings, is one table (:data:`PROBES`, one
entry per kind of measurement) and one list of jobs (:func:`probe_jobs`). The predictions built on it
are :mod:`course_lib.measure.predict`; the benchmark that checks them is ``python -m course_lib.measure.validate``.

The models of the benchmark (:data:`VALIDATION_MODELS`, :data:`FAST_MODELS`) and their structure
(:func:`weight_matrices`, :func:`stream_between_ops`) are here because the calibration probes their shapes.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Sequence

import torch

from course_lib.core.hardware import HardwareSpec, custom_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.validation import require_choice, require_count, require_counts
from course_lib.measure.device import FALLBACK_LLC_BYTES, device_name, last_level_cache_bytes, resolve_device
from course_lib.measure.probes import (CopyResult, MatmulResult, OverheadResult, measure_attention_products,
                                       measure_copy_bandwidth, measure_kv_read, measure_linear, measure_matmul_flops,
                                       measure_op_overhead, measure_score_passes, probe_limits)
from course_lib.measure.steady import keep_threads
from course_lib.measure import allocator as _allocator
from course_lib.measure.timing import CLOCKS, progress_bar, thread_policy_for

__all__ = ["VALIDATION_MODELS", "FAST_MODELS", "DECODE_CONTEXTS", "TTFT_PROMPTS", "FAST_CONTEXTS", "FAST_PROMPTS",
           "dense_spec", "model_specs", "weight_matrices", "stream_between_ops", "Calibration", "calibrate",
           "check_clock", "load_average", "PROBES", "ProbeSettings", "probe_jobs", "cold_streams", "reprobe_gemv",
           "reprobe", "reuse_problem"]

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


# ------------------------------------------------------------------------------------------------
# Structure: the weight matrices of a spec
# ------------------------------------------------------------------------------------------------
def dense_spec(model) -> ModelSpec:
    """``model`` (a name or ModelSpec) as a spec the calibrated model covers: a dense GQA/MHA transformer."""
    spec = get_model(model)
    if spec.is_mla or spec.is_moe or spec.nominal_params is not None:
        raise ValueError(f"model {spec.name!r}: the calibrated model covers dense GQA/MHA transformers (TinyLM's)")
    return spec


def weight_matrices(model) -> dict[tuple[int, int], int]:
    """{(m, k): how many} over the weight matrices one decode step multiplies (lm_head included)."""
    s = dense_spec(model)
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
    s = dense_spec(model)
    per_model = sum(m * k * n for (m, k), n in weight_matrices(s).items() if (m, k) != (s.vocab, s.hidden))
    return per_model * 4 / s.layers


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
    copy: CopyResult
    matmul: MatmulResult
    overhead: OverheadResult
    gemv: dict = field(default_factory=dict)
    gemm: dict = field(default_factory=dict)
    kv: dict = field(default_factory=dict)
    seconds: float = 0.0
    #: (bytes streamed before the ops, t_op, t_view) from measure_op_overhead at several flush sizes
    cold_ops: list = field(default_factory=list)
    clock: str = "wall"
    #: the thread policy's one-line description (course_lib.measure.threads), printed in every header
    thread_policy: str = ""
    #: {(kv_heads, group, queries, keys): scores/s} of the prefill score passes (:func:`measure_score_passes`)
    scores: dict = field(default_factory=dict)
    #: whether the GEMM probes read their weights from memory (rotated beyond the LLC) rather than from cache
    gemm_rotated: bool = False
    #: {(kv_heads, group, head_dim, queries, keys): FLOP/s} of a prefill's attention products (q·kᵀ, p·v)
    attention: dict = field(default_factory=dict)
    #: {(architecture and widths, rows): seconds per layer} of a prefill's elementwise passes over its activations
    #: (``course_lib.measure.engines.hf.measure_prefill_passes``; filled by ``hf.calibrate_for``)
    passes: dict = field(default_factory=dict)
    #: the probe settings a re-probe (:func:`reprobe_gemv`) repeats: fast settings, and one probe's memory budget
    fast: bool = False
    budget_bytes: int | None = None
    #: what the allocator did while the probes ran (:func:`course_lib.measure.allocator.state`; "" on a GPU)
    allocator: str = ""

    def with_probes(self, gemv: Sequence[Mapping] = (), gemm: Sequence[Mapping] = (),
                    cold: Sequence[Mapping] = ()) -> "Calibration":
        """This calibration with the mean of re-run probe sets (:func:`reprobe`) in place of its own rates:
        ``gemv`` / ``gemm``, each a list of {key: rate} sets taken at different moments; ``cold``, a list of
        {bytes streamed: (t_op, t_view)} sets of the cold-op probe (empty: kept)."""
        def merged(own: dict, sets: Sequence[Mapping]) -> dict:
            sets = list(sets)
            return {**own, **{k: statistics.fmean(st[k] for st in sets) for k in sets[0]}} if sets else own
        cold = list(cold)
        ops = {x: (a, v) for x, a, v in self.cold_ops}
        if cold:
            ops.update({x: (statistics.fmean(st[x][0] for st in cold), statistics.fmean(st[x][1] for st in cold))
                        for x in cold[0]})
        return replace(self, gemv=merged(self.gemv, gemv), gemm=merged(self.gemm, gemm),
                       cold_ops=[(x, a, v) for x, (a, v) in sorted(ops.items())] if cold else self.cold_ops)

    def cold_points_for(self, streamed_bytes: float) -> list:
        """The flush sizes of the cold-op probes that :meth:`op_costs` reads at ``streamed_bytes`` and at 0 (the
        smallest, and the two around it): what a benchmark re-probes to follow them (empty without cold probes)."""
        xs = sorted(x for x, _, _ in self.cold_ops)
        if not xs:
            return []
        s = max(0.0, float(streamed_bytes))
        below = [x for x in xs if x <= s]
        above = [x for x in xs if x >= s]
        return sorted({xs[0], below[-1] if below else xs[0], above[0] if above else xs[-1]})

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
                               source="course_lib.measure.calibrate: copy bandwidth (read+write) and n×n matmul")

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
        policy = f" [{self.thread_policy}]" if self.thread_policy else ""
        alloc = f" allocator=[{self.allocator}]" if self.allocator else ""
        return (f"device={self.device} ({self.device_name}) threads={self.threads}{policy} "
                f"torch={self.torch_version} clock={self.clock}{alloc} load_avg(1,5,15 min) before={load}")

    def reuse_problem(self, kind: str, result) -> str:
        """Why ``result`` (a :class:`CopyResult` for ``kind="copy"``, a :class:`MatmulResult` for "matmul") is not
        what this calibration's own probe measures ("" where it is: same device, threads and size), the test
        :func:`calibrate` applies to the ``copy`` / ``matmul`` it is given."""
        return reuse_problem(kind, result, ProbeSettings(resolve_device(self.device), self.threads, self.clock,
                                                         self.fast, self.gemm_rotated, self.budget_bytes))

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


def load_average() -> tuple:
    """The 1, 5 and 15 minute load averages (rounded), or () where the OS does not report them."""
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except (AttributeError, OSError):
        return ()


def model_specs(models, fast: bool = False) -> dict[str, ModelSpec]:
    """{name: spec} of ``models`` (names, specs or a mapping).

    None: :data:`VALIDATION_MODELS` (``fast``: :data:`FAST_MODELS`).
    """
    if models is None:
        return dict(FAST_MODELS if fast else VALIDATION_MODELS)
    if isinstance(models, (str, ModelSpec)):
        models = [models]
    if isinstance(models, Mapping):
        items = {str(k): dense_spec(v) for k, v in models.items()}
    else:
        try:
            items = {(s := dense_spec(m)).name: s for m in models}
        except TypeError:
            raise TypeError(f"models must be a list of model names/ModelSpecs, got {type(models).__name__}") from None
    if not items:
        raise ValueError("models must name at least one model")
    return items


def check_clock(clock, device, threads) -> str:
    """``clock`` checked: a name of :data:`~course_lib.measure.timing.CLOCKS`; "process" needs one thread on a CPU."""
    dev = resolve_device(device)
    clock = require_choice("clock", clock, CLOCKS)
    if clock == "process" and (dev.type != "cpu" or threads != 1):
        raise ValueError("clock='process' (CPU seconds of this process) needs device='cpu' and threads=1; "
                         f"got device={dev.type!r}, threads={threads}")
    return clock


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


# ------------------------------------------------------------------------------------------------
# The probes of a calibration: one table, one list of jobs
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeSettings:
    """What every probe of one calibration shares: device, threads, clock, and fast or full settings."""

    device: torch.device
    threads: int | None
    clock: str
    fast: bool
    rotate_gemm: bool = False
    budget_bytes: int | None = None      # memory one probe may allocate (None: the device's memory budget)

    def timed(self, short: bool = False) -> dict:
        """Keyword arguments of a timed probe: 7 blocks of >= 2 ms (fast: 3 of >= 0.2 ms); ``short``: half, >= 3."""
        repeats = 3 if self.fast else 7
        return dict(repeats=max(3, repeats // 2) if short else repeats, min_block=2e-4 if self.fast else 2e-3,
                    threads=self.threads, device=self.device, clock=self.clock)

    @property
    def kv_context(self) -> int:
        """Context of the K/V read probe: 4096 tokens (fast: 256)."""
        return 256 if self.fast else 4096

    @property
    def matmul_n(self) -> int:
        """Square matmul size, fixed (a busy machine cannot shrink it): 1024 on a CPU, 4096 on a GPU (fast 256)."""
        return 256 if self.fast else (1024 if self.device.type == "cpu" else 4096)


def _cold_costs(flush: int, ps: ProbeSettings) -> tuple[float, float]:
    r = measure_op_overhead(**{**ps.timed(), "repeats": 1}, flush_bytes=flush // 2, cold_runs=8 if ps.fast else 30)
    return r.cold_seconds, r.cold_view_seconds


#: kind of job -> how one job of that kind is measured: ``PROBES[kind](key, settings)`` returns what
#: :class:`Calibration` stores under ``key`` (for copy, matmul and overhead the key is None and the whole
#: result is kept). Keys: cold = bytes streamed before the ops; gemv = (m, k); kv = (kv_heads, group,
#: head_dim); gemm = (prompt rows, m, k); scores = (kv_heads, group, queries, keys); attention =
#: (kv_heads, group, head_dim, queries, keys).
PROBES: dict[str, Callable[[object, ProbeSettings], object]] = {
    "copy": lambda _, ps: measure_copy_bandwidth(buffer_bytes=(16 << 20) if ps.fast else None,
                                                 budget_bytes=ps.budget_bytes, **ps.timed()),
    "matmul": lambda _, ps: measure_matmul_flops(n=ps.matmul_n, **ps.timed()),
    "overhead": lambda _, ps: measure_op_overhead(cold=False, **ps.timed()),
    "cold": _cold_costs,
    "gemv": lambda mk, ps: measure_linear(1, *mk, budget_bytes=ps.budget_bytes, **ps.timed()).bandwidth,
    "kv": lambda layout, ps: measure_kv_read(*layout, ps.kv_context, budget_bytes=ps.budget_bytes,
                                             **ps.timed()).bandwidth,
    "gemm": lambda pmk, ps: measure_linear(*pmk, rotate=ps.rotate_gemm, budget_bytes=ps.budget_bytes,
                                           **ps.timed(short=True)).flop_rate,
    "scores": lambda shape, ps: measure_score_passes(*shape, **ps.timed(short=True)),
    "attention": lambda shape, ps: measure_attention_products(*shape, **ps.timed(short=True)),
}


def cold_streams(device, fast: bool = False, llc_bytes: int | None = None) -> list[int]:
    """Bytes streamed before the cold-op probes: 0 ... 4 × LLC on a CPU (fast: 0 and 1 LLC); [0] on a GPU.

    On a GPU the weights stream through GPU memory, not the host caches the dispatcher runs from.
    ``llc_bytes``: default the device's (:func:`~course_lib.measure.device.last_level_cache_bytes`).
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        return [0]
    llc = llc_bytes or last_level_cache_bytes(dev) or FALLBACK_LLC_BYTES
    return [0, llc] if fast else [0, llc // 4, llc // 2, llc, 2 * llc, 4 * llc]


def probe_jobs(specs: Mapping[str, ModelSpec], prompts: Iterable[int], ttft_spec: ModelSpec,
               cached_pairs: Iterable[tuple[int, int]] = (), streams: Iterable[int] = (0,)) -> list[tuple[str, object]]:
    """The (kind, key) jobs of a calibration, in the order they run (kinds: :data:`PROBES`).

    Copy, matmul, hot overhead; the cold overhead after each of ``streams``; a GEMV per weight shape of
    ``specs``; a K/V read per head layout; then for ``ttft_spec`` a GEMM per weight shape and prompt
    row count (the prompt lengths, and the new tokens of each (prompt, cached) pair), and the score
    passes and attention products at (new tokens × prompt) of each prefill.
    """
    prompts = list(prompts)
    pairs = list(cached_pairs)
    shapes = sorted({sh for s in specs.values() for sh in weight_matrices(s)})
    layouts = sorted({(s.kv_heads, s.heads // s.kv_heads, s.head_dim) for s in specs.values()})
    rows = sorted(set(prompts) | {p - c for p, c in pairs})
    gemm = [(p, m, k) for p in rows for (m, k) in sorted(weight_matrices(ttft_spec))]
    layout = (ttft_spec.kv_heads, ttft_spec.heads // ttft_spec.kv_heads)
    scores = sorted({(*layout, p, p) for p in prompts} | {(*layout, p - c, p) for p, c in pairs})
    attention = [(*j[:2], ttft_spec.head_dim, *j[2:]) for j in scores]
    return ([("copy", None), ("matmul", None), ("overhead", None)] + [("cold", x) for x in streams]
            + [("gemv", sh) for sh in shapes] + [("kv", lay) for lay in layouts] + [("gemm", j) for j in gemm]
            + [("scores", j) for j in scores] + [("attention", j) for j in attention])


def _threads_text(n) -> str:
    return "no thread setting (GPU)" if n is None else f"{n} thread{'' if n == 1 else 's'}"


def reuse_problem(kind: str, result, settings: ProbeSettings) -> str:
    """Why a copy or matmul measured earlier is not what the calibration's probe of ``kind`` measures with
    ``settings`` ("" where it is): another device, another thread count (a retry that lowered the threads), another
    size (the matmul's n, the copy's buffer: its memory budget, or fast mode's 16 MiB), another dtype."""
    kind = require_choice("kind", kind, ("copy", "matmul"))
    want = {"copy": CopyResult, "matmul": MatmulResult}[kind]
    if not isinstance(result, want):
        raise TypeError(f"{kind} must be a {want.__name__} (course_lib.measure.probes), got {type(result).__name__}")
    if result.device != settings.device.type:
        return f"it was measured on {result.device}, the calibration runs on {settings.device.type}"
    if result.threads != settings.threads:
        return (f"it ran at {_threads_text(result.threads)}, the calibration's probes at "
                f"{_threads_text(settings.threads)}")
    if kind == "matmul":
        if result.dtype != "fp32":
            return f"it is a {result.dtype} matmul, the calibration's is fp32"
        if result.n != settings.matmul_n:
            return f"it is {result.n}×{result.n}, the calibration's matmul {settings.matmul_n}×{settings.matmul_n}"
        return ""
    if settings.fast:
        if result.buffer_bytes != 16 << 20:
            return f"its buffer is {result.buffer_bytes / 2**20:.0f} MiB, the calibration's fast copy 16 MiB"
        return ""
    budget = probe_limits(settings.device, None, settings.budget_bytes)[1]
    if result.budget_bytes != budget:
        return (f"it ran under a {(result.budget_bytes or 0) / 2**20:.0f} MiB memory budget, the calibration's "
                f"probes under {budget / 2**20:.0f} MiB (another buffer size)")
    return ""


def calibrate(threads: int | None = None, fast: bool = False, models=None, prompt_lengths=None,
              ttft_model=None, device=None, progress: bool = True, clock: str = "wall",
              cached_prefills=(), rotate_gemm: bool = False, budget_bytes: int | None = None,
              copy: CopyResult | None = None, matmul: MatmulResult | None = None) -> Calibration:
    """Run the probes (never the model under test) and return a :class:`Calibration`.

    Copy bandwidth, square-matmul FLOP/s, the per-op overhead, the GEMV bandwidth of every weight
    shape of ``models`` (default: :data:`VALIDATION_MODELS`, or :data:`FAST_MODELS` with ``fast``),
    the attention K/V read rate of their head layouts, and the GEMM rate of ``ttft_model``'s shapes at
    ``prompt_lengths`` (default :data:`TTFT_PROMPTS`), and the rate of the prefill score passes
    (:func:`~course_lib.measure.probes.measure_score_passes`) of ``ttft_model``'s head layout at each prompt length.
    ``cached_prefills``: (prompt_tokens, cached_tokens) pairs of prefills that start from cached K/V
    (:func:`~course_lib.measure.predict.predict_ttft` with ``cached_tokens``): their new-token GEMM rows and
    score / attention-product shapes (new × prompt) are probed too; the attention products
    (:func:`~course_lib.measure.probes.measure_attention_products`) are probed at the same shapes as the
    score passes. ``rotate_gemm``: time the GEMMs with their weights read from memory
    (rotated beyond the last-level cache, as a model larger than the cache reads them) instead of
    from cache (default, as before): it matters for short prefills, whose few rows per weight cannot
    hide the read. ``threads``: CPU threads (default: all physical cores); recorded in the result.
    ``clock``: "wall" (default) or "process" (CPU seconds of this process: for a shared machine, only
    with ``threads=1`` on a CPU; see :func:`course_lib.measure.timing.use_clock`).
    ``budget_bytes``: the memory one probe may allocate (default: the device's memory budget,
    :func:`course_lib.measure.device.memory_budget`); a lesson kernel that must stay small passes less, and
    the probes' ``cache_reason`` says where that kept a working set within 4 × the last-level cache.
    ``copy`` / ``matmul``: a copy bandwidth / fp32 matmul the caller measured already (a lesson's ceilings), used
    instead of timing the same operation again where it was measured with the calibration's settings (device,
    threads, size: :func:`reuse_problem`); where not, the probe runs and :meth:`Calibration.reuse_problem` says why
    (so ``calibration.copy is copy`` tells which).
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    if not isinstance(rotate_gemm, bool):
        raise TypeError(f"rotate_gemm must be True or False, got {rotate_gemm!r}")
    pairs = _cached_pairs(cached_prefills)
    dev = resolve_device(device)
    policy = thread_policy_for(threads, dev)            # None on a GPU
    nthreads = None if policy is None else policy.threads
    clock = check_clock(clock, dev, nthreads)
    allocator = _allocator.state().description if dev.type == "cpu" else ""   # recorded, never changed here
    specs = model_specs(models, fast)
    prompts = require_counts("prompt_lengths", (FAST_PROMPTS if fast else TTFT_PROMPTS) if prompt_lengths is None
                             else prompt_lengths)
    ttft_spec = list(specs.values())[0] if ttft_model is None else dense_spec(ttft_model)
    if budget_bytes is not None:
        budget_bytes = require_count("budget_bytes", budget_bytes, minimum=2**20)
    settings = ProbeSettings(dev, nthreads, clock, fast, rotate_gemm, budget_bytes)
    given = {kind: r for kind, r in (("copy", copy), ("matmul", matmul))
             if r is not None and not reuse_problem(kind, r, settings)}
    jobs = [j for j in probe_jobs(specs, prompts, ttft_spec, pairs, cold_streams(dev, fast)) if j[0] not in given]
    t0 = time.perf_counter()
    load = load_average()
    res: dict[str, dict] = {kind: {} for kind in PROBES}
    for kind, r in given.items():
        res[kind][None] = r
    # a retry keeps the thread count: the rates predict a model run with these threads
    with progress_bar(jobs, desc="calibrate (probes)", unit="probe", enabled=progress) as bar, keep_threads():
        for kind, key in bar:
            res[kind][key] = PROBES[kind](key, settings)
    return Calibration(device=dev.type, device_name=device_name(dev), threads=nthreads,
                       torch_version=torch.__version__, load_before=load, copy=res["copy"][None],
                       matmul=res["matmul"][None], overhead=res["overhead"][None], gemv=res["gemv"],
                       gemm=res["gemm"], kv=res["kv"], seconds=time.perf_counter() - t0,
                       cold_ops=[(x, t_op, t_view) for x, (t_op, t_view) in res["cold"].items()], clock=clock,
                       scores=res["scores"], gemm_rotated=rotate_gemm, attention=res["attention"],
                       thread_policy="" if policy is None else policy.description, fast=fast,
                       budget_bytes=budget_bytes, allocator=allocator)


def reprobe_gemv(calibration: Calibration, shapes: Iterable[tuple[int, int]]) -> dict:
    """The GEMV probes of ``shapes`` run again with ``calibration``'s settings: {(m, k): bytes/s} now.

    A machine's memory bandwidth drifts (other tenants of a shared machine share its memory controllers,
    with no CPU steal to show for it). A benchmark that compares a prediction with a
    measurement taken minutes after the calibration would count that drift as the model's error, so a
    benchmark re-runs the probes around each measurement (probe, model, probe, ...: :mod:`course_lib.measure.
    benchmarks.bracket`) and predicts each from the probes around it. Only probes run here, never the model.
    """
    keys = [(require_count("m", m, minimum=1), require_count("k", k, minimum=1)) for m, k in shapes]
    if not keys:
        raise ValueError("shapes must name at least one (m, k) weight shape")
    return reprobe(calibration, "gemv", keys)


def reprobe(calibration: Calibration, kind: str, keys: Iterable) -> dict:
    """The probes of one ``kind`` of :data:`PROBES` ("gemv", "gemm", ...) run again for ``keys`` with
    ``calibration``'s settings (threads, clock, fast, rotation, memory budget): {key: what the probe returns}.

    :func:`reprobe_gemv` is this for the GEMVs; a benchmark of prefills re-runs the GEMMs too (their rate
    drifts by as much as the bandwidth).
    """
    if not isinstance(calibration, Calibration):
        raise TypeError(f"calibration must be a Calibration, got {type(calibration).__name__}")
    kind = require_choice("kind", kind, tuple(PROBES))
    keys = sorted(set(keys))
    if not keys:
        raise ValueError("keys must name at least one probe")
    settings = ProbeSettings(resolve_device(calibration.device), calibration.threads, calibration.clock,
                             calibration.fast, calibration.gemm_rotated, calibration.budget_bytes)
    with keep_threads():
        return {key: PROBES[kind](key, settings) for key in keys}
