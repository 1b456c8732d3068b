"""What a simulation returns: each request's record, the totals, percentiles, and Little's law.

Lessons: 09, 10
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from course_lib.core.numeric import raw as g
from course_lib.core.validation import require_count, require_list, require_nonnegative, require_positive

# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------
def percentile(values, q: float) -> float:
    """The ``q``-th percentile (0..100) of non-negative ``values`` (latencies), interpolating linearly
    between order statistics (numpy's default method)."""
    xs = sorted(require_nonnegative(f"values[{i}]", v)
                for i, v in enumerate(require_list("values", values, "a list of numbers")))
    if not xs:
        raise ValueError("values must hold at least one number")
    q = require_nonnegative("q", q, maximum=100)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def weighted_percentile(pairs, q: float) -> float:
    """:func:`percentile` of the values ``pairs`` hold as ``(value, count)``: each value repeated ``count`` times
    (the simulator's inter-token gaps, one pair per step), without building the list."""
    checked = []
    for i, p in enumerate(require_list("pairs", pairs, "a list of (value, count) pairs")):
        p = require_list(f"pairs[{i}]", p, "a (value, count) pair")
        if len(p) != 2:
            raise ValueError(f"pairs[{i}] must be a (value, count) pair, got {len(p)} items")
        checked.append((require_nonnegative(f"pairs[{i}] value", p[0]), require_count(f"pairs[{i}] count", p[1])))
    return _weighted_percentile(checked, q)


def _weighted_percentile(pairs, q: float) -> float:
    q = require_nonnegative("q", q, maximum=100)
    xs = sorted((v, c) for v, c in pairs if c > 0)
    n = sum(c for _, c in xs)
    if not n:
        raise ValueError("pairs must hold at least one value with a positive count")
    pos = (n - 1) * q / 100
    lo = math.floor(pos)
    seen, v_lo, v_hi = 0, None, None
    for v, c in xs:
        if v_lo is None and seen + c > lo:
            v_lo = v
        if seen + c > lo + 1 or seen + c == n:
            v_hi = v
            break
        seen += c
    return v_lo + (v_hi - v_lo) * (pos - lo)


def samples_above(n: int, q: float) -> int:
    """How many of ``n`` samples lie above the order statistic the ``q``-th percentile starts from: what a
    p99 "rests on" (200 samples: 2; 10,000: 100). ``n - 1 - floor((n - 1) q / 100)``."""
    n = require_count("n", n)
    return n - 1 - math.floor((n - 1) * require_nonnegative("q", q, maximum=100) / 100) if n else 0


@dataclass(frozen=True)
class TokenGaps:
    """The simulator's record of the time between consecutive tokens of each request (inter-token latency).

    Per step ``k``: its end ``ends[k]``, its time ``step[k]`` and ``count[k]``, how many tokens it emitted that
    follow a token of the same request emitted by step ``k - 1`` (their gap is the step's time); ``late`` holds
    ``(step, gap)`` of the other tokens (after a preemption's recompute, or decodes stalled by a prefill step).
    A request's first token is no gap (that is its TTFT).
    """

    ends: object
    step: object
    count: object
    late: tuple

    def pairs(self, start: float = -math.inf, stop: float = math.inf) -> list[tuple[float, int]]:
        """``(gap, count)`` of the tokens emitted at times in ``[start, stop]``."""
        e = self.ends
        out = [(self.step[k], self.count[k]) for k in range(len(e)) if start <= e[k] <= stop and self.count[k]]
        out += [(gap, 1) for k, gap in self.late if start <= e[k] <= stop]
        return out


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
    window: tuple = (None, None)  # the measured window's (start, end) in seconds; None: unbounded (simulate's warmup)
    recomputed_tokens: int = 0   # tokens prefilled again after preemptions (busy time the answers did not need)
    token_gaps: TokenGaps | None = field(default=None, repr=False)

    # --- the measured window --------------------------------------------------------------------
    @property
    def measured(self) -> tuple[RequestRecord, ...]:
        """The requests every percentile is taken over: sent inside the window (after the warm-up) and, in a
        closed loop, finished before the last request was sent (all users active throughout)."""
        lo, hi = self._bounds
        if lo == -math.inf and hi == math.inf:
            return self.records
        return tuple(r for r in self.records if r.arrival >= lo and r.finish <= hi)

    @property
    def _bounds(self) -> tuple[float, float]:
        lo, hi = self.window
        return (-math.inf if lo is None else lo), (math.inf if hi is None else hi)

    # --- inter-token latency --------------------------------------------------------------------
    def itl_pairs(self) -> list[tuple[float, int]]:
        """``(gap, count)`` of every inter-token gap emitted inside the window (see :class:`TokenGaps`)."""
        if self.token_gaps is None:
            return []
        return self.token_gaps.pairs(*self._bounds)

    @property
    def itl_samples(self) -> int:
        """How many inter-token gaps the ITL figures rest on (tokens after each request's first, in the window)."""
        return sum(c for _, c in self.itl_pairs())

    # --- per request --------------------------------------------------------------------------
    @property
    def ttft(self) -> list[float]:
        return [r.ttft for r in self.measured]

    @property
    def tpot(self) -> list[float]:
        """Each measured request's mean time per output token after its first (TPOT: one number per request)."""
        return [r.tpot for r in self.measured if r.tpot is not None]

    @property
    def e2e(self) -> list[float]:
        return [r.e2e for r in self.measured]

    @property
    def wait(self) -> list[float]:
        return [r.wait for r in self.measured]

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
        return sum(1 for r in self.measured if r.tpot is None)

    @property
    def steady_throughput(self) -> float:
        """Output tokens per second inside the measured window (the whole run when it has no bounds)."""
        lo, hi = self._bounds
        if lo == -math.inf and hi == math.inf:
            return self.throughput
        lo, hi = max(lo, self.start), min(hi, self.end)
        firsts = sum(1 for r in self.records if lo <= r.first_token <= hi)
        return (self.token_gaps and sum(c for _, c in self.token_gaps.pairs(lo, hi)) + firsts) / (hi - lo)

    def percentiles(self, metric: str, qs=(50, 90, 99)) -> dict[int, float | None]:
        """``{q: value}`` for each percentile ``q`` of ``metric`` ('ttft', 'tpot', 'itl', 'e2e' or 'wait'), seconds.

        Per request: TTFT, TPOT (each request's mean gap after its first token), end-to-end and wait, over the
        :attr:`measured` requests. Per token: ITL (inter-token latency, also called TBT), every gap between two
        consecutive tokens of a request, over the window (:attr:`itl_samples` of them): its tail shows the stalls
        a request's mean smooths away. TPOT is undefined for a one-token answer: such requests are left out
        (:attr:`tpot_excluded` counts them), and when every answer has one token the TPOT and ITL percentiles are
        ``None``, never NaN.
        """
        if metric not in ("ttft", "tpot", "itl", "e2e", "wait"):
            raise ValueError(f"metric must be one of 'ttft', 'tpot', 'itl', 'e2e', 'wait', got {metric!r}")
        if metric == "itl":
            pairs = self.itl_pairs()
            return {q: _weighted_percentile(pairs, q) if pairs else None for q in qs}
        values = getattr(self, metric)
        return {q: percentile(values, q) if values else None for q in qs}

    def summary(self) -> dict:
        """Plain numbers: p50/p90/p99 of TTFT, TPOT, ITL and end-to-end latency, throughput, mean batch, ...

        ``measured`` requests (and ``itl_samples`` gaps) make the percentiles; ``p99_rests_on`` says how many of
        them lie above the p99's order statistic (:func:`samples_above`): a p99 of 200 requests rests on two.

        ``tpot_excluded`` says how many one-token answers the TPOT figures leave out (their TPOT is
        undefined); with no answer of two tokens or more, the TPOT figures are ``None`` (never NaN).
        """
        out = {"requests": len(self.records), "duration": self.duration, "steps": self.steps}
        for metric in ("ttft", "tpot", "itl", "e2e"):
            for q, v in self.percentiles(metric).items():
                out[f"{metric}_p{q}"] = v
        tp, measured = self.tpot, len(self.measured)
        pairs = self.itl_pairs()
        n_itl = sum(c for _, c in pairs)
        out.update(measured=measured, p99_rests_on=samples_above(measured, 99), itl_samples=n_itl,
                   itl_p99_rests_on=samples_above(n_itl, 99),
                   itl_mean=sum(v * c for v, c in pairs) / n_itl if n_itl else None,
                   ttft_mean=sum(self.ttft) / measured, tpot_mean=sum(tp) / len(tp) if tp else None,
                   tpot_excluded=self.tpot_excluded, recomputed_tokens=self.recomputed_tokens,
                   steady_throughput=self.steady_throughput,
                   wait_mean=sum(self.wait) / measured, throughput=self.throughput,
                   request_throughput=self.request_throughput, mean_batch=self.mean_batch,
                   max_batch=self.max_batch_seen, preemptions=self.preemptions, utilisation=self.utilisation,
                   prefill_share=self.prefill_share, arrival_rate=self.arrival_rate)
        return out


# --------------------------------------------------------------------------------------------------
# Little's law and disaggregation
# --------------------------------------------------------------------------------------------------
def littles_law(arrival_rate, time_in_system) -> float:
    """Mean requests in the system, ``L = lambda W`` (requests/s times seconds): the generated ``littles_law``."""
    lam = require_positive("arrival_rate", arrival_rate)
    w = require_nonnegative("time_in_system", time_in_system)
    return g.littles_law(lam, w)
