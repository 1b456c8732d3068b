"""Serving many users: an iteration-level scheduler simulated step by step, and its steady state (lesson 10).

Lessons: 10

Three pieces, all torch-free and pure Python:

* :class:`StepCost` -- the time of one forward step of a continuously batched server, priced with the
  estimator's generated formulas: the weights read once, the K/V of every sequence's context read
  once, the FLOPs of every token in the step, and ``max(FLOPs / (peak x compute_efficiency), bytes /
  (bandwidth x bandwidth_efficiency))``. It is the one replaceable piece: :func:`simulate` accepts any
  callable ``step_time(prefill_tokens, decode_seqs, context_tokens_total) -> seconds`` instead.
* :func:`simulate` -- a discrete-event simulation of a vLLM/Sarathi-style scheduler: requests arrive
  (Poisson, or a trace), wait FCFS, are admitted while the batch has room (``max_batch``) and the paged
  KV memory has free blocks, and every step gives each running sequence its tokens under a per-step
  ``token_budget`` (one token per decoding sequence, a chunk of the prompt for a prefilling one). When
  memory runs out, the youngest running sequence is preempted and later recomputed.
* :func:`continuous_batching_plan` -- the steady-state estimate: with ``C`` sequences in flight per GPU,
  each decode step is interleaved with the prefills of the sequences that replace finished ones, so
  ``TPOT ~ t_decode(C) + C x t_prefill / (n - 1)``; ``C`` is the largest that keeps TPOT within its
  budget and the KV cache within the memory fraction.

Also :func:`speculative_tokens_per_step`, the expected tokens one verification step of speculative
decoding yields, ``(1 - a^(k+1)) / (1 - a)``, and :func:`speculative_decoding`, which prices the
verification as a ``(k + 1)``-token step with the same step cost; :func:`static_batching` (the naive
baseline: waves of ``batch`` requests, each padded to its longest answer); :func:`kv_pool` (the paged KV
memory: blocks beside the weights), :func:`kv_slots`, :func:`paged_utilisation` and
:func:`reserved_utilisation` (how much of the allocated KV memory holds tokens); :func:`littles_law`;
:func:`kv_transfer` (prefill/decode disaggregation: the K/V of a prompt sent over a link); and
:func:`published_kv_slots`, the vLLM paper's Table 1 held against :func:`kv_slots`
(``course_lib/data/serving_measurements.json``).

The scheduler, in one step (times in seconds, sizes in tokens):

1. requests that have arrived join the waiting queue (FCFS; preempted sequences go back to its front);
2. running sequences, oldest first, are given their tokens: a decoding sequence 1, a prefilling one
   ``min(prompt left, budget left)`` (``chunked_prefill=True``). Each needs KV blocks of
   ``block_tokens`` tokens for the tokens it adds; when no block is free, the youngest running
   sequence is preempted (its blocks freed; it re-enters the queue and later recomputes its prompt
   and the tokens it had generated, as vLLM's recompute preemption does);
3. if nothing was preempted, waiting requests are admitted in order while the batch, the budget and
   free blocks allow (the first one that does not fit stops admission: FCFS, no overtaking);
4. with ``chunked_prefill=False`` a step is either a prefill step (whole prompts of newly admitted
   requests, while their sum fits the budget -- a prompt longer than the budget goes alone -- with
   the decodes stalled) or, when nobody can be admitted, a decode step for every running sequence:
   prefills first, as vLLM's scheduler did before chunked prefill;
5. the step's time is ``step_time(...)``; a prefill that completes produces the request's first token
   (TTFT is measured from arrival to the end of that step), each decode step one more token.

A mixed step costs ``max(compute, memory)`` of all its work together, so a prefill chunk riding on a
memory-bound decode step costs less than the two apart (Sarathi-Serve's piggybacking); the steady
state's ``t_decode + C x t_prefill / (n - 1)`` adds them and is therefore an upper bound of the
simulated TPOT at ``C`` sequences in flight. Defaults are the physical floor (efficiencies 1.0), as
in the estimator. A sliding-window model reads at most its window of K/V per decode step but keeps
every token's blocks (as vLLM's paged cache does).

What is not modelled: swapping to host memory (preemption is by recompute only), prefix-cache
misses (``cached_prefix_tokens`` are a hit for every request, held once), speculative decoding in
the simulator, tensor parallelism, sampling and framework overheads between steps.
"""
from __future__ import annotations

import math
import numbers
import random
from collections import deque
from dataclasses import dataclass, field

from course_lib.core.numeric import raw as g
from course_lib.core.data import load_catalog
from course_lib.core.estimator import _largest_passing, _step_work, compute_dtype, estimate
from course_lib.core.hardware import HardwareSpec, get_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.precision import default_kv_precision, get_precision
from course_lib.core.validation import require_count, require_fraction, require_nonnegative, require_positive

__all__ = ["MAX_REQUESTS", "MAX_WORK", "SimulationTooLarge", "StepCost", "step_cost", "RequestRecord",
           "ServingResult", "simulate", "percentile", "ServingPlan", "continuous_batching_plan",
           "speculative_tokens_per_step", "SpeculativeStep", "speculative_decoding", "StaticBatching",
           "static_batching", "KVPool", "kv_pool", "kv_slots", "paged_utilisation", "reserved_utilisation",
           "littles_law", "KVTransfer", "kv_transfer", "serving_measurements", "KVSlotsCheck",
           "published_kv_slots", "SweepPoint", "rate_sweep"]

#: The most requests one simulation takes.
MAX_REQUESTS = 10**6
#: The most scheduling work (sequence-steps: one per decode token, one per prefill chunk) one simulation does.
MAX_WORK = 10**8


class SimulationTooLarge(ValueError):
    """A simulation refused (or stopped) because its work would exceed :data:`MAX_REQUESTS` / :data:`MAX_WORK`."""


# --------------------------------------------------------------------------------------------------
# The cost of one step
# --------------------------------------------------------------------------------------------------
def _precisions(precision, kv_precision) -> tuple[str, str]:
    """The estimator's rule: the KV cache in the weights' format, or fp16 for integer/block formats."""
    wname = get_precision(precision).name
    if kv_precision is None:
        kv_precision = default_kv_precision(wname)
    try:
        kvname = get_precision(kv_precision).name
    except (ValueError, TypeError) as e:
        raise type(e)(str(e).replace("precision", "kv_precision", 1)) from None
    return wname, kvname


@dataclass(frozen=True, eq=False)
class StepCost:
    """Seconds of one forward step over a mixed batch: ``cost(prefill_tokens, decode_seqs, context_tokens_total)``.

    * ``prefill_tokens``: prompt tokens processed in the step (every chunk together);
    * ``decode_seqs``: sequences that decode one token;
    * ``context_tokens_total``: K/V tokens the step reads, summed over its sequences (a decoding
      sequence's attended context, itself included; a prefill chunk's cached tokens plus the chunk).

    Keyword-only extras make it exact (the simulator passes them, see ``accepts_details``):
    ``attention_pairs`` (query-key pairs: a decode token attends its context, a chunk of ``c`` tokens
    after ``k`` cached ones ``c·k + c²/2``; default ``context_tokens_total``, exact for decode-only
    steps) and ``logit_rows`` (sequences that produce a token: decodes plus the chunks that finish a
    prompt; default ``decode_seqs`` plus one when there is prefill).

    The step reads the weights its tokens use once (``streamed_params``; cached per token count),
    ``context_tokens_total`` K/V tokens (``decode_bytes``), and computes ``2·active_block_params``
    FLOPs per token, ``2·hidden·vocab`` per logit row and ``4·attn_dim·heads·layers`` per query-key
    pair: coefficients taken once from the generated ``decode_flops`` and ``linear_flops`` (the
    expansion of ``prefill_flops`` has the same three terms). The time is the generated
    ``phase_time``. A pure prefill and a pure decode step give exactly the estimator's ``ttft`` and
    decode step; a step costs a few multiplications whatever its batch.
    """

    model: ModelSpec
    hardware: HardwareSpec
    precision: str = "fp16"
    kv_precision: str | None = None
    compute_efficiency: float = 1.0
    bandwidth_efficiency: float = 1.0
    compute_dtype: str = field(init=False)
    accepts_details = True

    def __post_init__(self):
        set_ = object.__setattr__
        m, hw = get_model(self.model), get_hardware(self.hardware)
        set_(self, "model", m)
        set_(self, "hardware", hw)
        wname, kvname = _precisions(self.precision, self.kv_precision)
        set_(self, "precision", wname)
        set_(self, "kv_precision", kvname)
        set_(self, "compute_efficiency", require_fraction("compute_efficiency", self.compute_efficiency))
        set_(self, "bandwidth_efficiency", require_fraction("bandwidth_efficiency", self.bandwidth_efficiency))
        dtype = compute_dtype(wname, hw)      # the estimator's rule
        set_(self, "compute_dtype", dtype)
        peak = hw.flops(dtype)
        attn = m.attn_dim
        blk = m.active_block_params
        # decode_flops(1, ..., context) = 2·blk + 2·h·V + 4·attn·heads·layers·context  (linear in context)
        d0 = g.decode_flops(1, blk, m.vocab, m.hidden, m.layers, m.heads, attn, 0)
        d1 = g.decode_flops(1, blk, m.vocab, m.hidden, m.layers, m.heads, attn, 1)
        # and prefill_flops(1, blk, c, ..., cached=k) = 4·attn·heads·layers·(c·k + c²/2) + 2·blk·c + 2·h·V:
        # per query-key pair 4·attn·heads·layers, per token 2·blk, per logit row 2·h·V
        per_pair = d1 - d0
        per_token = g.linear_flops(blk, 1)
        set_(self, "_per_pair", per_pair)
        set_(self, "_per_token", per_token)
        set_(self, "_per_logit", d0 - per_token)
        set_(self, "_kv_token", m.kv_bytes_per_token(kvname))
        set_(self, "_w_bytes", get_precision(wname).bytes)
        set_(self, "_peak", peak)
        set_(self, "_weights_cache", {})
        set_(self, "_kv_bytes", get_precision(kvname).bytes)
        set_(self, "_work_cache", {})

    def weight_read_bytes(self, tokens: int) -> float:
        """Weight bytes a step over ``tokens`` tokens streams (cached per count)."""
        c = self._weights_cache
        b = c.get(tokens)
        if b is None:
            b = c[tokens] = self.model.streamed_params(tokens) * self._w_bytes
        return b

    def flops(self, prefill_tokens, decode_seqs, context_tokens_total, *, attention_pairs=None, logit_rows=None):
        """FLOPs of the step (the arguments as for the call)."""
        if attention_pairs is None:
            attention_pairs = context_tokens_total
        if logit_rows is None:
            logit_rows = decode_seqs + (1 if prefill_tokens else 0)
        return ((prefill_tokens + decode_seqs) * self._per_token + logit_rows * self._per_logit
                + attention_pairs * self._per_pair)

    def read_bytes(self, prefill_tokens, decode_seqs, context_tokens_total):
        """Bytes the step reads: the weights its tokens use, once, and ``context_tokens_total`` K/V tokens."""
        return g.decode_bytes(self.weight_read_bytes(prefill_tokens + decode_seqs), 1, context_tokens_total,
                              self._kv_token)

    def bound(self, prefill_tokens, decode_seqs, context_tokens_total, *, attention_pairs=None, logit_rows=None):
        """'compute' or 'memory': which term sets the step's time."""
        f = self.flops(prefill_tokens, decode_seqs, context_tokens_total, attention_pairs=attention_pairs,
                       logit_rows=logit_rows)
        tc = g.compute_time(f, self._peak, self.compute_efficiency)
        tm = g.memory_time(self.read_bytes(prefill_tokens, decode_seqs, context_tokens_total),
                           self.hardware.bandwidth, self.bandwidth_efficiency)
        return "memory" if tm >= tc else "compute"

    def __call__(self, prefill_tokens, decode_seqs, context_tokens_total, *, attention_pairs=None, logit_rows=None):
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            raise ValueError("a step must process at least one token (prefill_tokens + decode_seqs >= 1)")
        if attention_pairs is None:
            attention_pairs = context_tokens_total
        if logit_rows is None:
            logit_rows = decode_seqs + (1 if prefill_tokens else 0)
        return self._time(tokens, context_tokens_total, attention_pairs, logit_rows)

    def _time(self, tokens, context_tokens_total, attention_pairs, logit_rows) -> float:
        """The step's seconds, without the checks (the simulator's inner loop)."""
        # per operator, as the estimator: the step costs the sum of its operators' roofline times
        # (the weight-reading operators depend only on the token count: cached; attention and the lm_head's rows
        # are filled in per step)
        work = self._work_cache.get(tokens)
        if work is None:
            work = self._work_cache[tokens] = _step_work(self.model, tokens, 1, 0.0, 0, self._w_bytes, self._kv_bytes)
        peak, eta_c, bw, eta_b = self._peak, self.compute_efficiency, self.hardware.bandwidth, self.bandwidth_efficiency
        t = 0.0
        for name, f, b in work:
            if name == "attention":
                f, b = attention_pairs * self._per_pair, context_tokens_total * self._kv_token
            elif name == "lm_head":
                f = f * logit_rows
            t += g.operator_time(f, peak, eta_c, b, bw, eta_b)
        return t


def step_cost(model, hardware, precision="fp16", kv_precision=None, compute_efficiency=1.0,
              bandwidth_efficiency=1.0) -> StepCost:
    """The default step-time model of :func:`simulate` for a catalog model and device (or specs)."""
    return StepCost(get_model(model), get_hardware(hardware), *_precisions(precision, kv_precision),
                    compute_efficiency=compute_efficiency, bandwidth_efficiency=bandwidth_efficiency)


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------
def _lengths(name: str, spec, n: int, rng: random.Random) -> list[int]:
    """``n`` lengths: an int (fixed), a ``(lo, hi)`` tuple (uniform integers, both included) or a list.

    A list of exactly ``n`` values is used in order (a trace); any other list is sampled with
    replacement (its empirical distribution).
    """
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise ValueError(f"{name} as a tuple must be (lo, hi), a uniform range; got {len(spec)} items "
                             f"(pass a list for a list of lengths)")
        lo = require_count(f"{name}[0]", spec[0], minimum=1)
        hi = require_count(f"{name}[1]", spec[1], minimum=1)
        if hi < lo:
            raise ValueError(f"{name} = (lo, hi) needs lo <= hi, got ({lo}, {hi})")
        return [rng.randint(lo, hi) for _ in range(n)]
    if isinstance(spec, (list, range)):
        if not spec:
            raise ValueError(f"{name} must not be an empty list")
        if len(spec) > MAX_REQUESTS:
            raise SimulationTooLarge(f"{name} holds {len(spec):,} lengths; at most {MAX_REQUESTS:,} are accepted")
        values = [require_count(name, v, minimum=1) for v in spec]
        if len(values) == n:
            return values
        return [rng.choice(values) for _ in range(n)]
    if isinstance(spec, bool) or not isinstance(spec, numbers.Real):
        raise TypeError(f"{name} must be a token count, a (lo, hi) tuple or a list of counts, "
                        f"got {type(spec).__name__}")
    v = require_count(name, spec, minimum=1)
    return [v] * n


def _arrival_times(arrival_rate, requests, arrivals, seed) -> list[float]:
    if arrivals is not None:
        if isinstance(arrivals, (str, bytes)) or not hasattr(arrivals, "__len__"):
            raise TypeError(f"arrivals must be a list of arrival times in seconds, got {type(arrivals).__name__}")
        if len(arrivals) > MAX_REQUESTS:
            raise SimulationTooLarge(f"arrivals holds {len(arrivals):,} requests; at most {MAX_REQUESTS:,} "
                                     f"are simulated")
        times = [require_nonnegative("arrivals", a) for a in arrivals]
        if not times:
            raise ValueError("arrivals must hold at least one arrival time")
        if any(b < a for a, b in zip(times, times[1:])):
            raise ValueError("arrivals must be sorted in non-decreasing order (seconds from the start)")
        if arrival_rate is not None:
            raise ValueError("arrival_rate must be None when arrivals= gives the arrival times (a trace)")
        if requests is not None and require_count("requests", requests, minimum=1) != len(times):
            raise ValueError(f"requests ({requests}) must equal len(arrivals) ({len(times)}) or be None")
        return times
    if arrival_rate is None:
        raise ValueError("arrival_rate (requests/s, > 0) is required unless arrivals= gives a trace")
    rate = require_positive("arrival_rate", arrival_rate)
    if requests is None:
        raise ValueError("requests (how many requests to simulate, >= 1) is required with an arrival_rate")
    if isinstance(requests, numbers.Integral) and requests > MAX_REQUESTS:
        raise SimulationTooLarge(f"requests = {requests:,} is more than one simulation takes (at most "
                                 f"{MAX_REQUESTS:,} requests): simulate a sample of the traffic")
    n = require_count("requests", requests, minimum=1, maximum=MAX_REQUESTS)
    rng = random.Random(f"{seed}:arrivals")  # its own stream: the same draws at every rate
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1.0) / rate
        out.append(t)
    return out


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------
def percentile(values, q: float) -> float:
    """The ``q``-th percentile (0..100) of non-negative ``values`` (latencies), interpolating linearly
    between order statistics (numpy's default method)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"values must be a list of numbers, got {type(values).__name__}")
    xs = sorted(require_nonnegative("values", v) for v in values)
    if not xs:
        raise ValueError("values must hold at least one number")
    q = require_nonnegative("q", q, maximum=100)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class RequestRecord:
    """One request's life, in seconds from the simulation's start."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    admitted: float      # first scheduled (the end of its wait in the queue)
    first_token: float
    finish: float
    preemptions: int

    @property
    def wait(self) -> float:
        return self.admitted - self.arrival

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first; ``None`` for a one-token answer."""
        if self.output_tokens < 2:
            return None
        return (self.finish - self.first_token) / (self.output_tokens - 1)

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival


@dataclass(frozen=True)
class ServingResult:
    """What :func:`simulate` returns: every request's record plus the scheduler's totals.

    ``mean_in_system`` and ``mean_queued`` are integrated over time by the simulator itself (the
    number of requests present, and of requests not yet admitted, between the first arrival and the
    last completion), independently of the per-request records, so that Little's law can check one
    against the other.
    """

    records: tuple[RequestRecord, ...]
    steps: int
    sequence_steps: int          # the scheduler's work: a sequence in a step (a decoded token or a prompt chunk)
    busy_time: float
    prefill_time: float
    batch_time: float            # the integral of the step's sequence count over busy time
    mean_in_system: float
    mean_queued: float
    preemptions: int
    kv_blocks: int
    kv_blocks_free_at_end: int
    max_batch_seen: int
    settings: dict = field(default_factory=dict, repr=False)

    # --- per request --------------------------------------------------------------------------
    @property
    def ttft(self) -> list[float]:
        return [r.ttft for r in self.records]

    @property
    def tpot(self) -> list[float]:
        return [r.tpot for r in self.records if r.tpot is not None]

    @property
    def e2e(self) -> list[float]:
        return [r.e2e for r in self.records]

    @property
    def wait(self) -> list[float]:
        return [r.wait for r in self.records]

    # --- totals -------------------------------------------------------------------------------
    @property
    def start(self) -> float:
        return min(r.arrival for r in self.records)

    @property
    def end(self) -> float:
        return max(r.finish for r in self.records)

    @property
    def duration(self) -> float:
        """From the first arrival to the last completion (the system is empty at both ends)."""
        return self.end - self.start

    @property
    def arrival_rate(self) -> float:
        """The empirical arrival rate: requests / duration."""
        return len(self.records) / self.duration

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.records)

    @property
    def throughput(self) -> float:
        """Output tokens per second over the duration."""
        return self.output_tokens / self.duration

    @property
    def request_throughput(self) -> float:
        return len(self.records) / self.duration

    @property
    def utilisation(self) -> float:
        """The fraction of the duration the GPU was running steps."""
        return self.busy_time / self.duration

    @property
    def prefill_share(self) -> float:
        """The fraction of busy time spent in steps that carried prefill tokens."""
        return self.prefill_time / self.busy_time if self.busy_time else 0.0

    @property
    def mean_batch(self) -> float:
        """Sequences per step, weighted by the steps' times."""
        return self.batch_time / self.busy_time if self.busy_time else 0.0

    @property
    def tpot_excluded(self) -> int:
        """Requests left out of every TPOT figure: one-token answers, whose TPOT is undefined (no second token)."""
        return sum(1 for r in self.records if r.tpot is None)

    def percentiles(self, metric: str, qs=(50, 90, 99)) -> dict[int, float | None]:
        """``{q: value}`` for each percentile ``q`` of ``metric`` ('ttft', 'tpot', 'e2e' or 'wait'), in seconds.

        TPOT is undefined for a one-token answer: such requests are left out (:attr:`tpot_excluded` counts
        them), and when every answer has one token the TPOT percentiles are ``None``, never NaN.
        """
        if metric not in ("ttft", "tpot", "e2e", "wait"):
            raise ValueError(f"metric must be one of 'ttft', 'tpot', 'e2e', 'wait', got {metric!r}")
        values = getattr(self, metric)
        return {q: percentile(values, q) if values else None for q in qs}

    def summary(self) -> dict:
        """Plain numbers: p50/p90/p99 of TTFT, TPOT and end-to-end latency, throughput, mean batch, ...

        ``tpot_excluded`` says how many one-token answers the TPOT figures leave out (their TPOT is
        undefined); with no answer of two tokens or more, the TPOT figures are ``None`` (never NaN).
        """
        out = {"requests": len(self.records), "duration": self.duration, "steps": self.steps}
        for metric in ("ttft", "tpot", "e2e"):
            for q, v in self.percentiles(metric).items():
                out[f"{metric}_p{q}"] = v
        tp = self.tpot
        out.update(ttft_mean=sum(self.ttft) / len(self.records), tpot_mean=sum(tp) / len(tp) if tp else None,
                   tpot_excluded=self.tpot_excluded,
                   wait_mean=sum(self.wait) / len(self.records), throughput=self.throughput,
                   request_throughput=self.request_throughput, mean_batch=self.mean_batch,
                   max_batch=self.max_batch_seen, preemptions=self.preemptions, utilisation=self.utilisation,
                   prefill_share=self.prefill_share, arrival_rate=self.arrival_rate)
        return out


# --------------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------------
def simulate(model, hardware, arrival_rate, prompt_tokens, output_tokens, requests=None, seed=0, *,
             precision="fp16", kv_precision=None, cached_prefix_tokens=0, max_batch=256, token_budget=2048,
             chunked_prefill=True, block_tokens=16, kv_memory_fraction=0.9, compute_efficiency=1.0,
             bandwidth_efficiency=1.0, step_time=None, arrivals=None, max_work=MAX_WORK) -> ServingResult:
    """Simulate a continuously batching server (see the module docstring) and return a :class:`ServingResult`.

    ``arrival_rate`` requests/s arrive as a Poisson process (seeded ``random.Random``; the same
    unit-rate draws scaled by 1 / rate, so runs at different rates share their randomness), or
    ``arrivals`` gives the times (seconds, sorted; then ``arrival_rate`` and ``requests`` may be None).
    ``prompt_tokens`` and ``output_tokens``: an int (fixed), a ``(lo, hi)`` tuple (uniform, both
    included) or a list (used in order when it has one value per request, else sampled from).
    ``cached_prefix_tokens`` of every prompt are a prefix-cache hit (their K/V held once, shared).

    Memory: ``kv_memory_fraction`` of the device's capacity holds the weights and the KV pool, which
    is cut into blocks of ``block_tokens`` tokens (vLLM's ``gpu_memory_utilization`` and block size).
    ``step_time(prefill_tokens, decode_seqs, context_tokens_total) -> seconds`` replaces the default
    :class:`StepCost` (built from ``precision``, ``kv_precision`` and the efficiencies).

    Deterministic for a seed. Refused (:class:`SimulationTooLarge`) above :data:`MAX_REQUESTS` requests
    or an estimated ``max_work`` sequence-steps (<= :data:`MAX_WORK`); stopped with the same error if
    preemptions push the work past it.
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    max_work = require_count("max_work", max_work, minimum=1, maximum=MAX_WORK)
    if not isinstance(chunked_prefill, bool):
        raise TypeError(f"chunked_prefill must be True or False, got {type(chunked_prefill).__name__}")
    max_batch = require_count("max_batch", max_batch, minimum=1, maximum=10**6)
    block_tokens = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    token_budget = require_count("token_budget", token_budget, minimum=1, maximum=10**9)
    if token_budget < block_tokens:
        raise ValueError(f"token_budget must be at least one KV block (block_tokens = {block_tokens}) of tokens per "
                         f"step, got {token_budget}")
    frac = require_fraction("kv_memory_fraction", kv_memory_fraction)
    k_prefix = require_count("cached_prefix_tokens", cached_prefix_tokens)

    times = _arrival_times(arrival_rate, requests, arrivals, seed)
    n_req = len(times)
    rng = random.Random(f"{seed}:lengths")
    prompts = _lengths("prompt_tokens", prompt_tokens, n_req, rng)
    outputs = _lengths("output_tokens", output_tokens, n_req, rng)
    if k_prefix >= min(prompts):
        raise ValueError(f"cached_prefix_tokens must be < every prompt length (shortest {min(prompts)}): at least one "
                         f"prompt token is processed to produce the first output token; got {k_prefix}")
    limit = m.max_positions
    longest = max(p + o for p, o in zip(prompts, outputs))
    if limit is not None and longest > limit:
        worst = max(range(n_req), key=lambda i: prompts[i] + outputs[i])
        raise ValueError(f"prompt_tokens + output_tokens must be at most the model's context ({m.name}: "
                         f"max_positions = {limit:,}); a request has {prompts[worst]:,} + {outputs[worst]:,} = "
                         f"{longest:,}")
    work = sum(outputs) + sum(-(-(p - k_prefix) // token_budget) for p in prompts)
    if work > max_work:
        raise SimulationTooLarge(f"this simulation would take about {work:,} sequence-steps (one per output token, one "
                                 f"per prompt chunk), more than max_work = {max_work:,}: simulate fewer requests or "
                                 f"shorter answers (10**7 sequence-steps take several seconds of one CPU core)")

    if step_time is None:
        cost = step_cost(m, hw, precision, kv_precision, compute_efficiency, bandwidth_efficiency)
        w_bytes, kv_tok = m.weight_bytes(cost.precision), cost._kv_token
    else:
        if not callable(step_time):
            raise TypeError(f"step_time must be a callable (prefill_tokens, decode_seqs, context_tokens_total) -> "
                            f"seconds, got {type(step_time).__name__}")
        cost = step_time
        wname, kvname = _precisions(precision, kv_precision)
        w_bytes, kv_tok = m.weight_bytes(wname), m.kv_bytes_per_token(kvname)
    details = bool(getattr(cost, "accepts_details", False))
    fast = cost._time if isinstance(cost, StepCost) else None

    # --- the paged KV pool ------------------------------------------------------------------------
    pool = _pool(m, hw, w_bytes, kv_tok, block_tokens, frac, k_prefix)
    total_blocks = pool.blocks
    need_longest = -(-(longest - 1 - k_prefix) // block_tokens)
    if total_blocks < need_longest:
        raise ValueError(f"kv_memory_fraction x capacity ({frac:g} x {hw.capacity / 1e9:g} GB) leaves "
                         f"{total_blocks:,} KV blocks of {block_tokens} tokens beside the weights "
                         f"({w_bytes / 1e9:.3g} GB); the longest request needs {need_longest:,}: use a larger "
                         f"fraction, a device with more memory, a smaller KV precision or shorter requests")

    window = m.sliding_window
    bt = block_tokens

    # --- per-request state (lists indexed by request) -----------------------------------------------
    done = [k_prefix] * n_req            # tokens whose K/V are cached (the shared prefix included)
    target = list(prompts)               # tokens to prefill before the next token comes out
    gen = [0] * n_req                    # tokens generated so far
    blocks = [0] * n_req                 # private KV blocks held
    admitted = [None] * n_req
    first = [None] * n_req
    finish = [0.0] * n_req
    n_pre = [0] * n_req

    waiting: deque[int] = deque()
    running: list[int] = []
    free = total_blocks
    t = 0.0
    nxt = 0                              # the next arrival not yet in the queue
    finished = 0
    steps = 0
    busy = prefill_time = batch_time = 0.0
    area_sys = area_queue = 0.0          # integrals of requests present / not yet admitted
    in_system = queued = 0
    preemptions = 0
    max_seen = 0
    work_done = 0

    def preempt(v):
        nonlocal free, preemptions
        free += blocks[v]
        blocks[v] = 0
        done[v] = k_prefix
        target[v] = prompts[v] + gen[v]  # recompute the prompt and the tokens generated so far
        n_pre[v] += 1
        preemptions += 1
        waiting.appendleft(v)

    while finished < n_req:
        while nxt < n_req and times[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
            in_system += 1
            queued += 1
        if not running and not waiting:
            t = times[nxt]               # idle until the next arrival (nobody present: no area)
            continue

        budget = token_budget
        chunks: list[tuple[int, int]] = []   # (sequence, prompt tokens) prefilled this step
        nd = dctx = 0                        # decoding sequences and the contexts they attend
        enders: list[int] = []               # decoders whose answer ends with this step
        preempted = False

        def admit(whole: bool) -> None:
            """Admit waiting requests in order while the batch, the budget and free blocks allow."""
            nonlocal free, budget, queued
            while waiting and len(running) < max_batch and (whole or budget > 0):
                s = waiting[0]
                c = target[s] - done[s] if whole else min(target[s] - done[s], budget)
                if whole and chunks and c > budget:
                    break                    # whole prompts: the first of a step always goes in
                need = -(-(done[s] + c - k_prefix) // bt) - blocks[s]
                if need > free:
                    break
                waiting.popleft()
                free -= need
                blocks[s] += need
                if admitted[s] is None:
                    admitted[s] = t
                    queued -= 1
                running.append(s)
                chunks.append((s, c))
                budget -= c

        if not chunked_prefill and waiting and len(running) < max_batch:
            admit(whole=True)                # a prefill-only step, the decodes stalled
        if not chunks:
            # one pass, oldest first: a decoder gets 1 token (and is advanced here: nothing else reads it
            # before the step ends), a prefilling sequence a chunk; the youngest is preempted for blocks
            i = 0
            while i < len(running):
                s = running[i]
                d = done[s]
                decoding = d >= target[s]
                if decoding:
                    if chunked_prefill and budget <= 0:
                        break
                    c = 1
                    need = 1 if (d - k_prefix) % bt == 0 else 0   # a new block at each block boundary
                else:
                    if budget <= 0:
                        break
                    c = min(target[s] - d, budget)
                    need = -(-(d + c - k_prefix) // bt) - blocks[s]
                if need > free:
                    self_preempted = False
                    while need > free:
                        v = running.pop()    # the youngest running sequence (never one scheduled already)
                        preempt(v)
                        preempted = True
                        if v == s:
                            self_preempted = True
                            break
                    if self_preempted:
                        break
                free -= need
                blocks[s] += need
                budget -= c
                i += 1
                if decoding:
                    d += 1
                    done[s] = d
                    dctx += d if window is None or d < window else window
                    nd += 1
                    gen[s] += 1
                    if gen[s] == outputs[s]:
                        enders.append(s)
                else:
                    chunks.append((s, c))
            if chunked_prefill and not preempted:
                admit(whole=False)

        if not nd and not chunks:
            raise RuntimeError("the scheduler found nothing to run although requests are present "
                               "(a bug in course_lib.core.serving)")

        # --- price the step ---------------------------------------------------------------------------
        pf = 0
        ctx = 0
        pairs = 0.0
        finishing = 0
        for s, c in chunks:
            k = done[s]
            pf += c
            ctx += k + c
            pairs += c * k + c * c / 2
            if k + c == target[s]:
                finishing += 1
        ctx += dctx
        pairs += dctx
        if fast is not None:
            dt = fast(pf + nd, ctx, pairs, nd + finishing)
        else:
            if details:
                dt = cost(pf, nd, ctx, attention_pairs=pairs, logit_rows=nd + finishing)
            else:
                dt = cost(pf, nd, ctx)
            if isinstance(dt, bool) or not isinstance(dt, numbers.Real) or not 0 < dt < math.inf:
                raise ValueError(f"step_time must return a positive finite number of seconds, got {dt!r} for "
                                 f"({pf}, {nd}, {ctx})")
        t_end = t + dt

        # --- time integrals (arrivals during the step count from their arrival) ------------------------
        area_sys += in_system * dt
        area_queue += queued * dt
        j = nxt
        while j < n_req and times[j] <= t_end:
            area_sys += t_end - times[j]
            area_queue += t_end - times[j]
            j += 1
        steps += 1
        busy += dt
        if pf:
            prefill_time += dt
        batch_time += (nd + len(chunks)) * dt
        if nd + len(chunks) > max_seen:
            max_seen = nd + len(chunks)
        work_done += nd + len(chunks)
        if work_done > max_work:
            raise SimulationTooLarge(f"stopped after {work_done:,} sequence-steps (max_work = {max_work:,}): "
                                     f"{preemptions:,} preemptions made the scheduler recompute too much; give the "
                                     f"KV cache more memory or lower max_batch")

        # --- advance ----------------------------------------------------------------------------------
        ended = False
        for s, c in chunks:
            done[s] += c
            if done[s] == target[s]:
                gen[s] += 1
                if first[s] is None:
                    first[s] = t_end
                if gen[s] == outputs[s]:
                    finish[s] = t_end
                    ended = True
        for s in enders:
            finish[s] = t_end
            ended = True
        if ended:
            keep = []
            for s in running:
                if gen[s] == outputs[s]:
                    free += blocks[s]
                    blocks[s] = 0
                    finished += 1
                    in_system -= 1
                else:
                    keep.append(s)
            running = keep
        t = t_end

    records = tuple(RequestRecord(times[i], prompts[i], outputs[i], admitted[i], first[i], finish[i], n_pre[i])
                    for i in range(n_req))
    t0, t1 = times[0], max(finish)
    span = t1 - t0
    settings = dict(model=m.name, hardware=hw.name, max_batch=max_batch, token_budget=token_budget,
                    chunked_prefill=chunked_prefill, block_tokens=block_tokens, kv_memory_fraction=frac,
                    cached_prefix_tokens=k_prefix, seed=seed)
    return ServingResult(records=records, steps=steps, sequence_steps=work_done, busy_time=busy,
                         prefill_time=prefill_time, batch_time=batch_time,
                         mean_in_system=area_sys / span if span else 0.0,
                         mean_queued=area_queue / span if span else 0.0, preemptions=preemptions,
                         kv_blocks=total_blocks, kv_blocks_free_at_end=free, max_batch_seen=max_seen,
                         settings=settings)


# --------------------------------------------------------------------------------------------------
# The steady state
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServingPlan:
    """The steady state of continuous batching for ``users`` sequences generating at once.

    ``sequences_per_gpu`` (C) is the largest number in flight per GPU with ``tpot <= tpot_budget``
    (and ``ttft <= ttft_budget`` when given) whose KV caches, at their final length, fit beside the
    weights in ``kv_memory_fraction`` of the memory; ``binds`` names what the next sequence breaks.
    When not even one sequence passes, ``sequences_per_gpu`` is 0, ``gpus`` is ``None`` and the
    numbers are those of one sequence. Seconds, bytes, tokens/s.
    """

    model: str
    hardware: str
    precision: str
    kv_precision: str
    users: int
    sequences_per_gpu: int
    gpus: int | None
    binds: str
    decode_step: float           # t_decode(C): one decode step of C sequences, mean over the answer
    prefill_time: float          # t_prefill: one request's prefill (its uncached prompt tokens)
    tpot: float                  # t_decode(C) + C t_prefill / (n - 1)
    ttft: float                  # t_prefill + t_decode(C): the step that carries the prefill, no queueing
    prefill_share: float         # C t_prefill / ((n - 1) t_decode(C) + C t_prefill)
    tokens_per_s_per_gpu: float  # C n / ((n - 1) tpot)
    memory_needed: float
    memory_limit: float

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _steady_state_search(decode_tpot, memory, t_pf: float, n: int, limit: float, tpot_budget: float,
                        ttft_budget: float | None, cap_c: int):
    """The largest number of sequences in flight C (1 .. ``cap_c``) whose continuous-batching steady state keeps
    its TPOT (``steady_state_tpot`` of the decode step ``decode_tpot(C)`` and ``t_pf``), its TTFT (``t_pf`` + one
    decode step) and ``memory(C)`` within the budgets and ``limit``.

    Returns ``(best, binds, c, (t_dec, tpot, ttft))``: ``best`` (0 when even one sequence breaks a limit), what
    ``best + 1`` breaks (``binds``; "sequence limit" at ``cap_c``), and the numbers at ``c = max(best, 1)``.
    The one search behind :func:`continuous_batching_plan` and :func:`course_lib.core.capstone.continuous_plan`.
    """
    def numbers_at(c):
        t_dec = decode_tpot(c)
        return t_dec, g.steady_state_tpot(t_dec, c, t_pf, n - 1), t_pf + t_dec

    def broken(c) -> list[str]:
        _, tpot, ttft = numbers_at(c)
        out = []
        if tpot > tpot_budget:
            out.append("TPOT budget")
        if ttft_budget is not None and ttft > ttft_budget:
            out.append("TTFT budget")
        if memory(c) > limit:
            out.append("memory")
        return out

    # TPOT, TTFT and memory never fall as C grows: the C that pass form a prefix 1..C (bisection)
    best = _largest_passing(lambda c: not broken(c), cap_c)
    binds = "sequence limit" if best == cap_c else " and ".join(broken(best + 1))
    c = max(best, 1)
    return best, binds, c, numbers_at(c)


def continuous_batching_plan(model, hardware, users, prompt_tokens, output_tokens, *, precision="fp16",
                             kv_precision=None, cached_prefix_tokens=0, tpot_budget=0.05, ttft_budget=None,
                             kv_memory_fraction=0.9, compute_efficiency=1.0, bandwidth_efficiency=1.0,
                             max_sequences=4096) -> ServingPlan:
    """Plan a continuously batching deployment for ``users`` sequences generating at once (issue 16's steady state).

    Each GPU keeps ``C`` sequences in flight. In the steady state a sequence's ``n - 1`` decode steps
    are shared with the ``C`` prefills of the sequences that replace the ones finishing meanwhile, so
    ``TPOT = t_decode(C) + C · t_prefill / (n - 1)``, with ``t_decode(C)`` the estimator's mean decode
    step for a batch of C and ``t_prefill`` its TTFT for one request (the uncached prompt tokens).
    Memory: the weights, the shared prefix once, and ``C`` caches of the uncached tokens at their final
    length ``prompt + output`` must fit in ``kv_memory_fraction`` of the capacity. ``C`` grows while
    both hold (and TTFT ``t_prefill + t_decode(C)`` stays within ``ttft_budget`` when given), up to
    ``max_sequences``; the GPUs needed are ``ceil(users / C)`` (``None`` when not even one fits).
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    users = require_count("users", users, minimum=1)
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    n = require_count("output_tokens", output_tokens, minimum=2)
    k = require_count("cached_prefix_tokens", cached_prefix_tokens)
    if k >= P:
        raise ValueError(f"cached_prefix_tokens must be < prompt_tokens ({P}), got {k}")
    if m.max_positions is not None and P + n > m.max_positions:
        raise ValueError(f"prompt_tokens + output_tokens must be at most the model's context ({m.name}: "
                         f"max_positions = {m.max_positions:,}), got {P + n:,}")
    tpot_budget = require_positive("tpot_budget", tpot_budget)
    ttft_budget = None if ttft_budget is None else require_positive("ttft_budget", ttft_budget)
    frac = require_fraction("kv_memory_fraction", kv_memory_fraction)
    cap_c = require_count("max_sequences", max_sequences, minimum=1, maximum=10**6)
    wname, kvname = _precisions(precision, kv_precision)
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog")
    kw = dict(precision=wname, kv_precision=kvname, cached_prefix_tokens=k, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    t_pf = estimate(m, hw, P, n, batch=1, **kw).ttft
    kv_tok = m.kv_bytes_per_token(kvname)
    weights = m.weight_bytes(wname)
    limit = frac * hw.capacity

    def memory(c):
        return weights + g.kv_cache_bytes(m.kv_values_per_token, get_precision(kvname).bytes, k, 1) \
            + c * kv_tok * (P + n - k)

    best, binds, c, (t_dec, tpot, ttft) = _steady_state_search(
        lambda c: estimate(m, hw, P, n, batch=c, **kw).tpot, memory, t_pf, n, limit, tpot_budget, ttft_budget,
        cap_c)
    share = c * t_pf / ((n - 1) * t_dec + c * t_pf)
    return ServingPlan(model=m.name, hardware=hw.name, precision=wname, kv_precision=kvname, users=users,
                       sequences_per_gpu=best, gpus=math.ceil(users / best) if best else None, binds=binds,
                       decode_step=t_dec, prefill_time=t_pf, tpot=tpot, ttft=ttft, prefill_share=share,
                       tokens_per_s_per_gpu=c * n / ((n - 1) * tpot), memory_needed=memory(c), memory_limit=limit)


# --------------------------------------------------------------------------------------------------
# Speculative decoding
# --------------------------------------------------------------------------------------------------
# The formula is core/formulas.py's speculative_tokens_per_step (numeric.raw: the generated function).
def speculative_tokens_per_step(acceptance: float, draft_tokens: int) -> float:
    """Expected tokens one verification step yields: ``(1 - a^(k+1)) / (1 - a)`` (``k + 1`` at ``a = 1``).

    ``acceptance`` (a, in [0, 1]) is the probability that each drafted token is accepted, independently
    until the first rejection; ``draft_tokens`` (k >= 0) tokens are drafted per step. Verification is a
    ``(k + 1)``-token step of the target model for every sequence: cheap at a small batch
    (memory-bound: the weights are read once either way), not at a large one.
    """
    a = require_fraction("acceptance", acceptance, allow_zero=True)
    k = require_count("draft_tokens", draft_tokens, maximum=10**6)
    if a == 1:
        return float(k + 1)                   # the limit of the closed form (a removable singularity)
    return g.speculative_tokens_per_step(a, k)


@dataclass(frozen=True)
class SpeculativeStep:
    """One round of speculative decoding for ``batch`` sequences at ``context`` tokens (seconds).

    ``k`` drafted tokens per sequence are verified in one ``(k + 1)``-token step of the target model;
    ``tokens_per_step`` is :func:`speculative_tokens_per_step`; ``speedup`` is the ordinary decode
    step divided by ``time_per_token`` (below 1: speculation slows decoding down).
    """

    batch: int
    context: int
    draft_tokens: int
    acceptance: float
    tokens_per_step: float
    plain_step: float
    verify_step: float
    draft_time: float
    time_per_token: float
    speedup: float
    verify_bound: str


def speculative_decoding(model, hardware, batch, context, draft_tokens, acceptance, *, draft_step_time=0.0,
                         precision="fp16", kv_precision=None, compute_efficiency=1.0,
                         bandwidth_efficiency=1.0) -> SpeculativeStep:
    """Price speculative decoding with the step cost: a verification is a ``(k + 1)``-token step.

    Each of the ``batch`` sequences has ``context`` tokens cached; the verification processes ``k + 1``
    tokens per sequence (the last accepted one and ``k`` drafts: token ``j`` attends ``context + j``,
    every one produces logits) and reads the weights and the K/V once. ``draft_step_time`` is one step
    of the draft model (``k`` of them per round; 0 for a free drafter such as n-gram lookup). At a
    small batch the verification is memory-bound and costs about one decode step, so the expected
    ``(1 - a^(k+1)) / (1 - a)`` tokens come almost free; at a large batch with short contexts it turns
    compute-bound and costs up to ``k + 1`` steps.
    """
    cost = step_cost(model, hardware, precision, kv_precision, compute_efficiency, bandwidth_efficiency)
    B = require_count("batch", batch, minimum=1, maximum=10**6)
    c = require_count("context", context, minimum=1, maximum=10**9)
    k = require_count("draft_tokens", draft_tokens, maximum=10**4)
    a = require_fraction("acceptance", acceptance, allow_zero=True)
    t_draft = require_nonnegative("draft_step_time", draft_step_time)
    m = cost.model
    att = m.attended_tokens                    # min(x, sliding window); local/global layers: their mean
    plain = cost(0, B, B * att(c + 1))
    q = k + 1
    pairs = B * sum(att(c + j) for j in range(1, q + 1))
    kv = B * (c + q)
    verify = cost(B * q, 0, kv, attention_pairs=pairs, logit_rows=B * q)
    bound = cost.bound(B * q, 0, kv, attention_pairs=pairs, logit_rows=B * q)
    tokens = speculative_tokens_per_step(a, k)
    per_token = (verify + k * t_draft) / tokens
    return SpeculativeStep(batch=B, context=c, draft_tokens=k, acceptance=a, tokens_per_step=tokens,
                           plain_step=plain, verify_step=verify, draft_time=k * t_draft, time_per_token=per_token,
                           speedup=plain / per_token, verify_bound=bound)


# --------------------------------------------------------------------------------------------------
# The naive baseline: static batching
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StaticBatching:
    """Requests served in waves of ``batch`` (every request present at time 0; seconds, tokens).

    Each wave prefills its prompts together and decodes until its longest answer is done: a
    finished sequence keeps its slot (padding) until the wave ends, and the next wave waits.
    ``useful_tokens`` are the answers' tokens; ``slot_tokens`` the tokens the slots could have
    produced (batch x the longest answer, per wave); ``slot_use`` their ratio.
    """

    requests: int
    batch: int
    waves: int
    duration: float
    useful_tokens: int
    slot_tokens: int
    throughput: float             # useful output tokens per second
    slot_use: float
    mean_e2e: float               # a request finishes when its wave ends


def static_batching(model, hardware, prompt_tokens, output_tokens, batch, *, precision="fp16", kv_precision=None,
                    compute_efficiency=1.0, bandwidth_efficiency=1.0) -> StaticBatching:
    """The static-batch baseline for the answers ``output_tokens`` (a list, in arrival order), all present at 0.

    Waves of ``batch`` requests in order; a wave lasts the estimator's ``total`` for its longest answer
    (``estimate(prompt_tokens, max(n), batch=len(wave))``). This is lesson 09's plan, served back to back.
    """
    outs = [require_count("output_tokens", n, minimum=1) for n in _as_list("output_tokens", output_tokens)]
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    B = require_count("batch", batch, minimum=1, maximum=10**6)
    if len(outs) > MAX_REQUESTS:
        raise SimulationTooLarge(f"output_tokens holds {len(outs):,} answers; at most {MAX_REQUESTS:,} are accepted")
    kw = dict(precision=precision, kv_precision=kv_precision, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    t, finish_sum, slots, cache = 0.0, 0.0, 0, {}
    waves = 0
    for i in range(0, len(outs), B):
        wave = outs[i:i + B]
        key = (len(wave), max(wave))
        if key not in cache:
            cache[key] = estimate(model, hardware, P, key[1], batch=key[0], **kw).total
        t += cache[key]
        finish_sum += t * len(wave)
        slots += key[0] * key[1]
        waves += 1
    useful = sum(outs)
    return StaticBatching(requests=len(outs), batch=B, waves=waves, duration=t, useful_tokens=useful,
                          slot_tokens=slots, throughput=useful / t, slot_use=useful / slots,
                          mean_e2e=finish_sum / len(outs))


def _as_list(name, values) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range)):
        raise TypeError(f"{name} must be a list of token counts, got {type(values).__name__}")
    if not values:
        raise ValueError(f"{name} must hold at least one token count")
    return list(values)


# --------------------------------------------------------------------------------------------------
# Paged KV memory
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KVPool:
    """The paged KV pool of one device: ``kv_memory_fraction`` of its capacity less the weights (bytes).

    ``blocks`` blocks of ``block_tokens`` tokens each (``block_bytes``); ``token_slots`` = blocks x
    block_tokens, the tokens of K/V the pool holds at once (beside a shared prefix of
    ``prefix_blocks`` blocks, held once).
    """

    capacity: float
    memory_fraction: float
    weights_bytes: float
    kv_bytes_per_token: float
    block_tokens: int
    block_bytes: float
    prefix_blocks: int
    pool_bytes: float
    blocks: int
    token_slots: int


def _pool(m, hw, w_bytes, kv_tok, block_tokens, frac, k_prefix) -> KVPool:
    if hw.capacity is None:
        raise ValueError(f"hardware {hw.name!r} has no memory capacity in the catalog: the KV pool is unknown")
    if frac * hw.capacity <= w_bytes:
        raise ValueError(f"the weights ({w_bytes / 1e9:.3g} GB) do not fit in kv_memory_fraction x capacity "
                         f"({frac:g} x {hw.capacity / 1e9:g} GB) of {hw.name}: the simulator serves from one "
                         f"device (tensor parallelism is not modelled); use a smaller precision or model")
    block_bytes = block_tokens * kv_tok
    prefix_blocks = -(-k_prefix // block_tokens)
    pool = frac * hw.capacity - w_bytes - prefix_blocks * block_bytes
    blocks = max(0, math.floor(pool / block_bytes))
    return KVPool(capacity=hw.capacity, memory_fraction=frac, weights_bytes=w_bytes, kv_bytes_per_token=kv_tok,
                  block_tokens=block_tokens, block_bytes=block_bytes, prefix_blocks=prefix_blocks,
                  pool_bytes=max(0.0, pool), blocks=blocks, token_slots=blocks * block_tokens)


def kv_pool(model, hardware, *, precision="fp16", kv_precision=None, block_tokens=16, kv_memory_fraction=0.9,
            cached_prefix_tokens=0) -> KVPool:
    """The KV pool :func:`simulate` serves from (vLLM's ``gpu_memory_utilization`` and block size)."""
    m, hw = get_model(model), get_hardware(hardware)
    wname, kvname = _precisions(precision, kv_precision)
    bt = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    frac = require_fraction("kv_memory_fraction", kv_memory_fraction)
    k = require_count("cached_prefix_tokens", cached_prefix_tokens)
    return _pool(m, hw, m.weight_bytes(wname), m.kv_bytes_per_token(kvname), bt, frac, k)


def kv_slots(kv_memory_bytes, kv_bytes_per_token, block_tokens=1) -> int:
    """Token slots a KV memory of ``kv_memory_bytes`` holds: whole blocks of ``block_tokens`` tokens."""
    mem = require_nonnegative("kv_memory_bytes", kv_memory_bytes)
    per = require_positive("kv_bytes_per_token", kv_bytes_per_token)
    bt = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    return math.floor(mem / (per * bt)) * bt


def paged_utilisation(lengths, block_tokens) -> float:
    """Fraction of the allocated KV slots that hold tokens when each sequence gets whole blocks.

    Each sequence of ``t`` tokens holds ``ceil(t / b)`` blocks: at most ``b - 1`` slots of its last
    block are empty (internal fragmentation), and no block is reserved ahead.
    """
    ts = [require_count("lengths", x, minimum=1) for x in _as_list("lengths", lengths)]
    b = require_count("block_tokens", block_tokens, minimum=1, maximum=10**6)
    return sum(ts) / sum(-(-x // b) * b for x in ts)


def reserved_utilisation(lengths, reserve_tokens) -> float:
    """Fraction of the KV memory that holds tokens when every sequence reserves ``reserve_tokens`` slots up front.

    The pre-paging scheme: a contiguous chunk for the longest possible sequence per request, whatever
    its final length (the vLLM paper's 'reserved' and 'internal fragmentation' waste).
    """
    ts = [require_count("lengths", x, minimum=1) for x in _as_list("lengths", lengths)]
    r = require_count("reserve_tokens", reserve_tokens, minimum=1)
    if max(ts) > r:
        raise ValueError(f"reserve_tokens ({r:,}) must be at least the longest sequence ({max(ts):,})")
    return sum(ts) / (len(ts) * r)


# --------------------------------------------------------------------------------------------------
# Little's law and disaggregation
# --------------------------------------------------------------------------------------------------
def littles_law(arrival_rate, time_in_system) -> float:
    """Mean requests in the system, ``L = lambda W`` (requests/s times seconds): the generated ``littles_law``."""
    lam = require_positive("arrival_rate", arrival_rate)
    w = require_nonnegative("time_in_system", time_in_system)
    return g.littles_law(lam, w)


@dataclass(frozen=True)
class KVTransfer:
    """Prefill/decode disaggregation: the K/V of one prompt sent from the prefill GPU to the decode GPU.

    ``bytes`` over ``link_bandwidth`` (bytes/s) takes ``seconds``; ``ttft`` is the prefill alone
    (the estimator's, batch 1) and ``tpot`` one decode step of ``decode_batch`` sequences at the
    prompt's length: the transfer adds to the TTFT once, and a decode GPU receiving a prompt for
    every finishing sequence must take ``decode_batch / (output_tokens - 1)`` of them per step.
    """

    prompt_tokens: int
    bytes: float
    link_bandwidth: float
    seconds: float
    ttft: float
    tpot: float
    share_of_ttft: float
    transfers_per_step: float
    link_busy_fraction: float     # transfers_per_step x seconds / tpot: the link's load on the decode side


def kv_transfer(model, hardware, prompt_tokens, output_tokens, link_bandwidth, *, decode_batch=1, precision="fp16",
                kv_precision=None, compute_efficiency=1.0, bandwidth_efficiency=1.0) -> KVTransfer:
    """Price the K/V transfer of prefill/decode disaggregation from the link (the generated ``kv_transfer_time``)."""
    m, hw = get_model(model), get_hardware(hardware)
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    n = require_count("output_tokens", output_tokens, minimum=2)
    if m.max_positions is not None and P + n > m.max_positions:
        raise ValueError(f"prompt_tokens + output_tokens must be at most the model's context ({m.name}: "
                         f"max_positions = {m.max_positions:,}), got {P + n:,}")
    bw = require_positive("link_bandwidth", link_bandwidth)
    B = require_count("decode_batch", decode_batch, minimum=1, maximum=10**6)
    wname, kvname = _precisions(precision, kv_precision)
    kv_tok = m.kv_bytes_per_token(kvname)
    secs = g.kv_transfer_time(P, kv_tok, bw)
    kw = dict(precision=wname, kv_precision=kvname, compute_efficiency=compute_efficiency,
              bandwidth_efficiency=bandwidth_efficiency)
    ttft = estimate(m, hw, P, n, **kw).ttft
    tpot = estimate(m, hw, P, n, batch=B, **kw).tpot
    per_step = B / (n - 1)
    return KVTransfer(prompt_tokens=P, bytes=P * kv_tok, link_bandwidth=bw, seconds=secs, ttft=ttft, tpot=tpot,
                      share_of_ttft=secs / ttft, transfers_per_step=per_step, link_busy_fraction=per_step * secs / tpot)


# --------------------------------------------------------------------------------------------------
# Published measurements
# --------------------------------------------------------------------------------------------------
def serving_measurements() -> dict:
    """``course_lib/data/serving_measurements.json`` (a fresh copy): the transcribed serving figures and sources."""
    return load_catalog("serving_measurements", copy=True)


@dataclass(frozen=True)
class KVSlotsCheck:
    """One row of the vLLM paper's Table 1 held against :func:`kv_slots` (bytes, token slots).

    ``predicted_decimal`` reads the paper's 'GB' as 1e9 bytes, ``predicted_binary`` as 2**30;
    ``efficiency_*`` = predicted / published. ``bytes_per_slot`` is what the paper's two numbers
    imply (its memory, read as GiB, over its slots). ``predicted_*`` are None where the model's
    bytes per token are not known from a source.
    """

    model: str
    gpus: str
    kv_memory_gb: float
    published_slots: float
    bytes_per_token: float | None
    predicted_decimal: int | None
    predicted_binary: int | None
    efficiency_decimal: float | None
    efficiency_binary: float | None
    bytes_per_slot: float
    where: str


def published_kv_slots() -> list[KVSlotsCheck]:
    """The vLLM paper's Table 1, each row's KV slots predicted from its KV memory and the bytes per token.

    The bytes per token come from the paper itself (OPT-13B, section 3: 2 x 5120 x 40 x 2); the
    other rows' architectures are not in the paper, so only their implied bytes per slot are shown.
    """
    data = load_catalog("serving_measurements")
    per_token = {row["model"]: math.prod(row["factors"].values()) for row in data["kv_per_token"]}
    table = data["kv_slots"]
    out = []
    for row in table["rows"]:
        mem = row["kv_cache_memory_gb"]
        slots = row["max_kv_slots_k"] * 1000
        b = per_token.get(row["model"])
        dec = kv_slots(mem * 1e9, b) if b else None
        bina = kv_slots(mem * 2**30, b) if b else None
        out.append(KVSlotsCheck(model=row["model"], gpus=row["gpus"], kv_memory_gb=mem, published_slots=slots,
                                bytes_per_token=b, predicted_decimal=dec, predicted_binary=bina,
                                efficiency_decimal=g.efficiency(dec, slots) if b else None,
                                efficiency_binary=g.efficiency(bina, slots) if b else None,
                                bytes_per_slot=mem * 2**30 / slots, where=table["where"]))
    return out


# --------------------------------------------------------------------------------------------------
# Sweeps for the lesson's curves
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepPoint:
    """One request rate of :func:`rate_sweep`: the rate offered and the simulation's summary there."""

    rate: float
    summary: dict


def rate_sweep(model, hardware, rates, prompt_tokens, output_tokens, requests, seed=0, *, progress=None,
               **kwargs) -> list[SweepPoint]:
    """:func:`simulate` at each of ``rates`` (requests/s) with the same seed (common random numbers).

    ``progress`` wraps the rates for a progress bar (e.g. ``tqdm``); other keywords go to :func:`simulate`.
    """
    rs = [require_positive("rates", r) for r in _as_list("rates", rates)]
    it = progress(rs) if progress is not None else rs
    return [SweepPoint(r, simulate(model, hardware, r, prompt_tokens, output_tokens, requests, seed,
                                   **kwargs).summary()) for r in it]
