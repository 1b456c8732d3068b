"""The calibrated latency model: predicted TPOT and TTFT of a dense transformer from a Calibration.

Lessons: 06, 07

    from course_lib.measure import calibrate, predict
    cal = calibrate.calibrate()                                   # the probes only
    p = predict.predict_tpot(calibrate.VALIDATION_MODELS["llama-S"], 1024, cal)
    p.seconds, p.terms                                            # total and its named terms
    predict.predict_ttft("llama-S", 512, cal, cached_tokens=256)  # a prefill from cached K/V (lesson 07)

**The model of a decode step** (formula ``calibrated_decode_time``)::

    t = t_W + t_KV + n_op · t_op + n_view · t_view

* ``t_W`` (weights): each weight matrix (m × k) is one matrix-vector product; its bytes are divided by
  the bandwidth a GEMV **of that shape** achieves (``probes.measure_linear(1, m, k)``, random matrices
  rotated beyond the last-level cache). On CPUs the achieved GEMV bandwidth depends on the row length
  k (short rows: each row's reduction and store weigh more), by 15–25 % between k = 1024 and
  k = 4096, so one bandwidth number for all matrices misses. Norm vectors and the embedding row are
  counted at the copy bandwidth (they are a few kB).
* ``t_KV`` (formula ``kv_read_time``): the K/V bytes of the context divided by the rate decode
  attention reads them (``probes.measure_kv_read``: softmax(q Kᵀ) V on random K/V of the model's
  kv_heads × group × head_dim, context 4096, rotated). Attention reads K/V in short rows (head_dim)
  and runs a softmax in between: it reaches well under the GEMV bandwidth.
* ``n_op · t_op + n_view · t_view`` (the **per-op overhead**, formulas ``overhead_time`` /
  ``step_time_with_overhead``): every other op the step runs (norms, rotary embedding, residual adds,
  cache writes …) costs a fixed time however few bytes it moves. ``n_op``/``n_view`` are **counted**,
  not fitted: the step is run once on a miniature copy of the model (same layers and structure, tiny
  widths) under a PyTorch dispatch counter; matrix products and the softmax are left out (their fixed
  cost is inside the GEMV / attention probes). ``t_op``/``t_view`` are **cold** costs: every layer
  runs the same small ops, so between two runs of one op a decode step streams one layer of weight
  matrices (:func:`~course_lib.measure.calibrate.stream_between_ops`, the op's reuse distance); once that
  exceeds the last-level cache the framework's code and data have been evicted and each op pays memory latency, several
  times its tight-loop cost.
  ``probes.measure_op_overhead(flush_bytes=…)`` times a run of distinct small ops right after
  streaming a buffer through memory; the calibration does that for streams of 0 … 4 × LLC and
  :meth:`Calibration.op_costs` interpolates at the model's stream. (On a GPU the weights stream
  through GPU memory, not the host caches: the ops stay hot.)
* A batch of B sequences reads the weights once (while memory-bound) and B × the K/V.

**The uncalibrated prediction** is the course's first-principles estimate with this machine's measured
copy bandwidth and square-matmul FLOP/s and no other term: ``course_lib.estimate`` on
``Calibration.hardware()`` (bytes / copy bandwidth for decode; FLOPs / matmul rate for TTFT).

**TTFT** (prefill): every linear layer is a GEMM of P rows timed at its shape
(``probes.measure_linear(P, m, k)``), TinyLM computes logits at every prompt position and a score for
every query-key pair (masked, not skipped): formula ``prefill_flops_dense``; the attention FLOPs run at
the rate the attention products reach at that shape (:func:`~course_lib.measure.probes.measure_attention_products`;
the square-matmul rate for a calibration without that probe); plus the counted ops' overhead; plus the elementwise
passes over the P × P scores (scale, mask, softmax: formula ``score_pass_time``, at the rate
:func:`~course_lib.measure.probes.measure_score_passes` measures at that shape). TTFT is reported, the accuracy
target is for decode.

**A prefill from cached K/V** (lesson 07: prefix and session caches), ``predict_ttft(...,
cached_tokens=C, reuse=...)``: only the n = P - C new tokens go through the linear layers (GEMMs of n
rows), their n × P scores through attention, the op count is that of the call the measurement runs
(``TinyLM.prefill(tokens, prefix=state)`` or ``TinyLM.extend``), and the prefix path first copies
the state's K/V into the cache (``kv_load``, at the copy bandwidth).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch

from course_lib.core import numeric as g
from course_lib.core.estimator import estimate
from course_lib.core.models import ModelSpec
from course_lib.core.validation import require_choice, require_count
from course_lib.measure.calibrate import Calibration, dense_spec, stream_between_ops, weight_matrices

__all__ = ["DECODE_COUNT_CONTEXT", "REUSE_PATHS", "count_ops", "Prediction", "check_calibration", "predict_tpot",
           "predict_ttft"]

#: ops whose fixed cost is already inside a probe's time (GEMV/GEMM, attention): not counted as overhead
_PROBED_OPS = {"linear", "mm", "addmm", "bmm", "matmul", "mv", "baddbmm", "_softmax", "softmax",
               "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
               "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu"}
#: ops that move no data (metadata only): they cost ``t_view``
_VIEW_OPS = {"view", "_unsafe_view", "reshape", "select", "slice", "transpose", "t", "permute", "expand",
             "unsqueeze", "squeeze", "as_strided", "alias", "detach", "lift_fresh", "split", "unbind",
             "narrow", "chunk", "unflatten", "flatten", "contiguous", "_reshape_alias", "to", "item",
             "_local_scalar_dense", "split_with_sizes", "view_as", "expand_as", "movedim"}



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
    spec = dense_spec(model)
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
            raise ValueError("cached_tokens needs batch=1 (the cached measurements run one sequence), "
                             f"got batch={batch}")
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


def check_calibration(calibration):
    if not isinstance(calibration, Calibration):
        raise TypeError(f"calibration must come from calibrate.calibrate(), got {type(calibration).__name__}")


def predict_tpot(spec, context: int, calibration: Calibration, batch: int = 1) -> Prediction:
    """Predicted seconds of one decode step whose attention covers ``context`` tokens (its own included).

    Terms (formula ``calibrated_decode_time``): ``weights`` Σ matrix bytes / GEMV bandwidth of its shape
    (+ norm vectors and embedding rows at the copy bandwidth), ``kv`` (``kv_read_time``), ``overhead``
    (n_op·t_op) and ``views`` (n_view·t_view). A batch reads the weights once and B × the K/V; when
    its FLOPs at the square-matmul rate exceed the weights' time, that compute time replaces it.
    """
    check_calibration(calibration)
    s = dense_spec(spec)
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
    (``prefill_flops_dense`` minus its linear part) at the rate
    :func:`~course_lib.measure.probes.measure_attention_products` measured at (or nearest) that shape, else
    the square-matmul rate, ``overhead``/``views`` the ops counted on the call the measurement runs
    (:func:`count_ops` with ``cached_tokens`` and ``reuse``), ``scores`` (formula ``score_pass_time``, when
    the calibration probed the score passes): the scale/mask/softmax passes over the n × P scores of every
    layer and query head at the rate :func:`~course_lib.measure.probes.measure_score_passes` measured at (or
    nearest) that shape, and, when C > 0, ``kv_load``: ``reuse="prefix"`` (``TinyLM.prefill(tokens,
    prefix=state)``) copies the state's K/V into the cache first, read + write at the copy bandwidth
    (``memory_time``); ``reuse="session"`` (``TinyLM.extend``) finds them in place (0 s).
    ``uncalibrated``: ``course_lib.estimate(..., cached_prefix_tokens=C)`` on :meth:`Calibration.hardware`.
    """
    check_calibration(calibration)
    s = dense_spec(spec)
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
