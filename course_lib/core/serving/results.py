"""What a simulation returns: each request's record, the totals, percentiles, and Little's law.

Lessons: 10
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from course_lib.core import _generated as g
from course_lib.core.validation import require_nonnegative, require_positive

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
# Little's law and disaggregation
# --------------------------------------------------------------------------------------------------
def littles_law(arrival_rate, time_in_system) -> float:
    """Mean requests in the system, ``L = lambda W`` (requests/s times seconds): the generated ``littles_law``."""
    lam = require_positive("arrival_rate", arrival_rate)
    w = require_nonnegative("time_in_system", time_in_system)
    return g.littles_law(lam, w)
