"""Speculative decoding priced with the step cost: expected tokens per verification and the speed-up.

Lessons: 10
"""
from __future__ import annotations

from dataclasses import dataclass

from course_lib.core.numeric import raw as g
from course_lib.core.serving.step import step_cost
from course_lib.core.validation import require_count, require_fraction, require_nonnegative

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
