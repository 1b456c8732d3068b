"""The Hugging Face engine predicted from probes only, never from the model it predicts.

Lessons: 08

The formulas ``engine_decode_time`` and ``engine_prefill_time`` of :mod:`course_lib.core.formulas` (evaluated
through :mod:`course_lib.core.numeric`) with

* the course's calibrated terms (:mod:`course_lib.measure.calibrate`, :mod:`course_lib.measure.predict`):
  weights at the GEMV bandwidth of each matrix shape, the K/V read at the attention probe's rate, for prefill
  the GEMM rate of each shape at P rows and the attention products at their rate;
* what this engine does per step beyond that: its **dynamic cache concatenates** every layer's K and V with the
  new token's (``torch.cat``: the whole cache read and written again, 2 x context x K/V bytes per token at the
  copy bandwidth); ``generate()`` copies the last position's logits to fp32 and takes the argmax (3 x vocab x 4
  bytes at the copy bandwidth); the prefill writes the prompt's K/V into the cache and computes the logits of the
  last position only (the lm_head is one GEMV); SDPA skips the masked half of the causal scores; a prefill's
  **elementwise passes** over its P-row activations at the time :func:`measure_prefill_passes` measures;
* the engine's **fixed per-step cost** (:mod:`~course_lib.measure.engines.hf.overhead`), scaled by the course's
  cold/hot op-cost ratio at one layer's weight stream (:func:`cold_factor`): the tiny copies run from cache,
  while in the real model one layer of weights streams through the caches between two runs of the same code.

``uncalibrated`` is the course's first-principles estimate on this machine's copy bandwidth and square-matmul
rate (``course_lib.estimate``), no engine term.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch

from course_lib.core import numeric
from course_lib.core.estimator import estimate
from course_lib.core.models import ModelSpec
from course_lib.core.roofline import compute_time, memory_time
from course_lib.core.validation import require_count, require_counts
from course_lib.measure.calibrate import (PROBES, Calibration, ProbeSettings, calibrate, probe_jobs,
                                          stream_between_ops, weight_matrices)
from course_lib.measure.engines.hf.config import require_transformers
from course_lib.measure.engines.hf.overhead import EngineOverhead, check_overhead
from course_lib.measure.predict import Prediction, check_calibration
from course_lib.measure.steady import keep_threads, steady_timeit
from course_lib.measure.timing import Threads, thread_policy_for
from course_lib.measure.tinylm import rms_norm, rotary

__all__ = ["cold_factor", "weights_and_kv", "predict_engine_tpot", "predict_engine_ttft", "calibrate_for",
           "passes_key", "measure_prefill_passes"]


def cold_factor(spec: ModelSpec, calibration: Calibration) -> float:
    """Cold/hot op-cost ratio at one layer's weight stream (``Calibration.op_costs``); 1 without cold probes."""
    hot = calibration.op_costs(0)[0]
    cold = calibration.op_costs(stream_between_ops(spec))[0]
    return max(1.0, cold / hot) if hot > 0 else 1.0


def weights_and_kv(spec: ModelSpec, context: int, calibration: Calibration) -> tuple[float, float]:
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
    probe's rate): K/V just written may still be in the last-level cache, but scaled-dot-product attention over
    one query does not read it much faster for that, so ``kv`` is counted in full.
    """
    check_calibration(calibration)
    check_overhead(overhead)
    prompt = require_count("prompt", prompt, minimum=1)
    new_tokens = require_count("new_tokens", new_tokens, minimum=2)
    ctx = prompt + new_tokens // 2
    weights_time, kv_time = weights_and_kv(spec, ctx, calibration)
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
    check_overhead(overhead)
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


def calibrate_for(specs: Mapping[str, ModelSpec], prompts: Sequence[int], *, threads: int | None = None,
                  fast: bool = False, progress: bool = False, budget_bytes: int | None = None,
                  copy=None, matmul=None) -> Calibration:
    """The course's calibration (probes only) for ``specs``: GEMV and K/V probes of every model, and the
    GEMM and attention-product probes of every model at every prompt length (weights read from memory).
    ``budget_bytes``: the memory one probe may allocate (default the device's; a lesson kernel passes less).
    Also the elementwise passes of every prefill (:func:`measure_prefill_passes`, ``Calibration.passes``).
    ``copy`` / ``matmul``: measured already (a lesson's machine ceilings), reused where taken with the same settings
    (:func:`~course_lib.measure.calibrate.calibrate`)."""
    specs = dict(specs)
    if not specs:
        raise ValueError("specs must hold at least one model")
    prompts = require_counts("prompts", prompts)
    first, *rest = specs.values()
    cal = calibrate(threads, fast, models=specs, prompt_lengths=prompts, ttft_model=first, device="cpu",
                    progress=progress, rotate_gemm=True, budget_bytes=budget_bytes, copy=copy, matmul=matmul)
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

    def norm(t):
        return rms_norm(t, w, 1e-6) if spec.norm == "rmsnorm" else torch.nn.functional.layer_norm(t, (h,), w, b)

    def layer():
        for _ in range(spec.block_norms):
            norm(x)
        x + y
        x + y
        act(gate) * up if up is not None else act(gate)
        if spec.qk_norm:
            rms_norm(q, wd, 1e-6)
            rms_norm(k, wd, 1e-6)
        if spec.positional == "rope":
            rotary(q, cos, sin)
            rotary(k, cos, sin)
        q.transpose(1, 2).reshape(1, rows, nq * d)

    nthreads = thread_policy_for(threads, "cpu").threads
    with Threads(nthreads), torch.inference_mode(), keep_threads():
        t = steady_timeit([layer], "cpu", 3 if fast else 7, 2e-4 if fast else 2e-3, "wall", nthreads)
    return t.median
