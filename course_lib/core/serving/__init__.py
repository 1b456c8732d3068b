"""Serving many users: an iteration-level scheduler simulated step by step, and its steady state (lesson 10).

Lessons: 10

Three pieces, all torch-free and pure Python:

* :class:`StepCost` -- the time of one forward step of a continuously batched server, priced with the
  estimator's generated formulas: the weights read once, the K/V of every sequence's context read
  once, the FLOPs of every token in the step, and ``max(FLOPs / (peak x compute_efficiency), bytes /
  (bandwidth x bandwidth_efficiency))``. It is the one replaceable piece: :func:`simulate` accepts any
  callable ``step_time(prefill_tokens, decode_seqs, context_tokens_total) -> seconds`` instead.
* :func:`simulate` -- a discrete-event simulation of a vLLM/Sarathi-style scheduler: requests arrive
  (Poisson, a trace, or ``users`` in a closed loop with think time), wait FCFS, are admitted while the batch
  has room (``max_batch``) and the paged KV memory has free blocks, and every step gives each running sequence
  its tokens under a per-step ``token_budget`` (one token per decoding sequence, a chunk of the prompt for a
  prefilling one). When memory runs out, the youngest running sequence is preempted and later recomputed
  (``recomputed_tokens`` counts what that costs). The result reports per-request TTFT and TPOT (a request's
  mean gap) and per-token ITL (every gap between two tokens), each percentile with the samples it rests on,
  over a measured window (warm-up and, in a closed loop, cool-down left out).
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
in the estimator. Windowed layers (every layer of a ``sliding_window`` model; the ``local_layers`` of Gemma 2/3
and gpt-oss, ``local_window``) read at most their window of K/V per decode step and hold only the blocks their
window reaches (vLLM's hybrid KV-cache manager; :class:`LayerGroups`), so one request alone is the estimator's
TTFT and TPOT for every catalog model. A prefill chunk is priced over its whole context in every layer, as the
estimator's prefill.

Also: :func:`plans.steady_state_search` (the one steady-state search, also behind
:func:`course_lib.core.capstone.continuous_plan`); :func:`disaggregated_plan` (prefill and decode pools for a rate)
and the layer-by-layer streamed K/V transfer (``KVTransfer.exposed_seconds``); :func:`published_serving_checks`, the
simulator against a published closed-loop benchmark.

What is not modelled: swapping to host memory (preemption is by recompute only), prefix-cache
misses (``cached_prefix_tokens`` are a hit for every request, held once), speculative decoding in
the simulator, tensor parallelism, sampling and framework overheads between steps (a served request's TTFT also
pays the API, tokenizer and scheduler: :func:`published_serving_checks` shows how much).
"""
from __future__ import annotations

from course_lib.core.serving.disaggregation import (DisaggregatedPlan, KVTransfer, disaggregated_plan,
                                                   kv_transfer)
from course_lib.core.serving.memory import (KVPool, LayerGroups, kv_pool, kv_slots, layer_groups, paged_utilisation,
                                            reserved_utilisation)
from course_lib.core.serving.plans import (ServingPlan, StaticBatching, continuous_batching_plan, static_batching,
                                           steady_state_search)
from course_lib.core.serving.published import (KVSlotsCheck, ServingCheck, published_kv_slots, published_serving_checks,
                                              serving_measurements)
from course_lib.core.serving.results import (RequestRecord, ServingResult, TokenGaps, littles_law, percentile,
                                             samples_above, weighted_percentile)
from course_lib.core.serving.simulator import SweepPoint, rate_sweep, simulate
from course_lib.core.serving.speculative import SpeculativeStep, speculative_decoding, speculative_tokens_per_step
from course_lib.core.serving.step import StepCost, step_cost
from course_lib.core.serving.workload import MAX_REQUESTS, MAX_WORK, SimulationTooLarge

__all__ = ["MAX_REQUESTS", "MAX_WORK", "SimulationTooLarge", "StepCost", "step_cost", "RequestRecord",
           "ServingResult", "simulate", "percentile", "weighted_percentile", "samples_above", "TokenGaps",
           "ServingPlan", "continuous_batching_plan", "speculative_tokens_per_step", "SpeculativeStep",
           "speculative_decoding", "StaticBatching", "static_batching", "KVPool", "kv_pool", "LayerGroups",
           "layer_groups", "kv_slots", "paged_utilisation", "reserved_utilisation", "littles_law", "KVTransfer",
           "kv_transfer", "serving_measurements", "KVSlotsCheck", "published_kv_slots", "steady_state_search",
           "SweepPoint", "rate_sweep", "DisaggregatedPlan", "disaggregated_plan",
           "ServingCheck", "published_serving_checks"]
