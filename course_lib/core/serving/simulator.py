"""The discrete-event simulation of an iteration-level (continuous-batching) scheduler, and rate sweeps over it.

Lessons: 10
"""
from __future__ import annotations

import math
import numbers
import random
from array import array
from collections import deque
from dataclasses import dataclass
from heapq import heappop, heappush

from course_lib.core.numeric import raw as g
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.serving.memory import _pool
from course_lib.core.serving.results import RequestRecord, ServingResult, TokenGaps
from course_lib.core.serving.step import StepCost, _precisions, step_cost
from course_lib.core.serving.workload import (MAX_REQUESTS, MAX_WORK, SimulationTooLarge, _arrival_times, _as_list,
                                              _lengths)
from course_lib.core.validation import (require_callable, require_count, require_fraction, require_nonnegative,
                                        require_positive)

# --------------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------------
def simulate(model, hardware, arrival_rate, prompt_tokens, output_tokens, requests=None, seed=0, *,
             precision="fp16", kv_precision=None, cached_prefix_tokens=0, max_batch=256, token_budget=2048,
             chunked_prefill=True, block_tokens=16, kv_memory_fraction=0.9, compute_efficiency=1.0,
             bandwidth_efficiency=1.0, step_time=None, arrivals=None, max_work=MAX_WORK, users=None, think_time=0.0,
             warmup=None) -> ServingResult:
    """Simulate a continuously batching server (see the module docstring) and return a :class:`ServingResult`.

    ``arrival_rate`` requests/s arrive as a Poisson process (seeded ``random.Random``; the same
    unit-rate draws scaled by 1 / rate, so runs at different rates share their randomness), or
    ``arrivals`` gives the times (seconds, sorted; then ``arrival_rate`` and ``requests`` may be None), or
    ``users`` closes the loop (``arrival_rate=None``): ``users`` clients each send a request, wait for its last
    token, think for an exponential time of mean ``think_time`` seconds (0: none) and send the next, until
    ``requests`` have been sent (a benchmark's ``--max-concurrency``, a chat service's N users).

    Measured window: the first ``warmup`` requests sent (closed loop: default ``users``, the opening burst; open
    loop: default 0) are left out of every percentile, and so, in a closed loop, are requests still running once
    the last one was sent (fewer than ``users`` remain: the load falls). ``ServingResult.measured`` holds the
    requests inside, the ITL samples are the gaps between tokens emitted inside the window.
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

    closed = users is not None
    think_time = None if think_time is None else require_nonnegative("think_time", think_time)
    if closed:
        if arrival_rate is not None or arrivals is not None:
            raise ValueError("users= closes the loop (each user sends its next request when the last one ended): "
                             "arrival_rate and arrivals must be None with it")
        users = require_count("users", users, minimum=1, maximum=MAX_REQUESTS)
        think = require_nonnegative("think_time", think_time)
        if requests is None:
            raise ValueError("requests (how many requests the users send in all, >= users) is required with users=")
        n_req = require_count("requests", requests, minimum=1, maximum=MAX_REQUESTS)
        if n_req < users:
            raise ValueError(f"requests ({n_req}) must be at least users ({users}): each user sends one at least")
        think_rng = random.Random(f"{seed}:think")
        times = [0.0] * n_req
        user_of = [0] * n_req
        for u in range(users):
            times[u] = think_rng.expovariate(1.0) * think if think else 0.0
            user_of[u] = u
        future = sorted((times[u], u) for u in range(users))
        issued = users
    else:
        times = _arrival_times(arrival_rate, requests, arrivals, seed)
        n_req = len(times)
        future = [(x, i) for i, x in enumerate(times)]       # sorted already: a valid heap
    warm = min(users, n_req - 1) if closed else 0
    if warmup is not None:
        warm = require_count("warmup", warmup, maximum=n_req - 1)
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
        w_bytes, kv_tok = m.weight_bytes(cost.precision), cost.kv_token_bytes
    else:
        if not callable(step_time):
            raise TypeError(f"step_time must be a callable (prefill_tokens, decode_seqs, context_tokens_total) -> "
                            f"seconds, got {type(step_time).__name__}")
        cost = step_time
        wname, kvname = _precisions(precision, kv_precision)
        w_bytes, kv_tok = m.weight_bytes(wname), m.kv_bytes_per_token(kvname)
    details = bool(getattr(cost, "accepts_details", False))
    pair_w = cost.decode_pair_weight if isinstance(cost, StepCost) else 1.0
    fast = cost.time_of if isinstance(cost, StepCost) else None

    # --- the paged KV pool ------------------------------------------------------------------------
    pool = _pool(m, hw, w_bytes, kv_tok, block_tokens, frac, k_prefix)
    total_blocks = pool.blocks
    groups = pool.groups                 # blocks are counted per layer: windowed layers hold only their window
    held = groups.layer_blocks           # one-layer blocks a sequence of t private tokens holds
    n_layers = groups.layers
    need_longest = held(longest - 1 - k_prefix)
    if total_blocks * n_layers < need_longest:
        raise ValueError(f"kv_memory_fraction x capacity ({frac:g} x {hw.capacity / 1e9:g} GB) leaves "
                         f"{total_blocks:,} KV blocks of {block_tokens} tokens beside the weights "
                         f"({w_bytes / 1e9:.3g} GB); the longest request needs {need_longest / n_layers:,.1f}: "
                         f"use a larger "
                         f"fraction, a device with more memory, a smaller KV precision or shorter requests")

    # the K/V a decoding sequence at context d reads: d, its window (every layer slides), or the mean over local
    # and global layers (the generated interleaved_attended_tokens) past the local window
    window = groups.window
    interleaved = m.local_window is not None
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
    free = total_blocks * n_layers      # free one-layer blocks
    t = 0.0
    ends = array("d")                    # each step's end
    itl_dt = array("d")                  # each step's time: the gap of a token following one of the step before
    itl_n = array("l")                   # how many such tokens the step emitted
    late: list[tuple[int, float]] = []   # (step, gap) of tokens after a stall (preempted, or decodes stalled)
    last_step = [-2] * n_req             # the step that emitted each request's last token so far
    recomputed = 0                       # prompt and generated tokens prefilled again after a preemption
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
        while future and future[0][0] <= t:
            waiting.append(heappop(future)[1])
            in_system += 1
            queued += 1
        if not running and not waiting:
            t = future[0][0]             # idle until the next arrival (nobody present: no area)
            continue
        k_step = steps
        bulk = 0                         # tokens this step that follow one from the step before
        stalled: list[int] = []          # decoders whose last token came earlier than that

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
                need = held(done[s] + c - k_prefix) - blocks[s]
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
                    # new blocks at each block boundary (a windowed layer reuses the block its window left)
                    need = 0 if (d - k_prefix) % bt else (
                        n_layers if window is None else held(d + 1 - k_prefix) - blocks[s])
                else:
                    if budget <= 0:
                        break
                    c = min(target[s] - d, budget)
                    need = held(d + c - k_prefix) - blocks[s]
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
                    if last_step[s] == k_step - 1:
                        bulk += 1
                    else:
                        stalled.append(last_step[s])
                    last_step[s] = k_step
                    d += 1
                    done[s] = d
                    if window is None or d <= window:
                        dctx += d
                    elif interleaved:
                        dctx += g.interleaved_attended_tokens(n_layers, groups.window_layers, window, d)
                    else:
                        dctx += window
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
        pairs += dctx * pair_w
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
        while future and future[0][0] <= t_end:      # they join the queue before the next step
            a, i = heappop(future)
            area_sys += t_end - a
            area_queue += t_end - a
            waiting.append(i)
            in_system += 1
            queued += 1
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
            if n_pre[s]:
                recomputed += c
            done[s] += c
            if done[s] == target[s]:
                gen[s] += 1
                if first[s] is None:
                    first[s] = t_end
                elif last_step[s] == k_step - 1:
                    bulk += 1
                else:
                    stalled.append(last_step[s])            # the first token after a recompute
                last_step[s] = k_step
                if gen[s] == outputs[s]:
                    finish[s] = t_end
                    ended = True
        for s in enders:
            finish[s] = t_end
            ended = True
        ends.append(t_end)
        itl_dt.append(dt)
        itl_n.append(bulk)
        for j in stalled:
            late.append((k_step, t_end - ends[j]))
        if ended:
            keep = []
            for s in running:
                if gen[s] == outputs[s]:
                    free += blocks[s]
                    blocks[s] = 0
                    finished += 1
                    in_system -= 1
                    if closed and issued < n_req:       # the user thinks, then sends the next request
                        times[issued] = t_end + (think_rng.expovariate(1.0) * think if think else 0.0)
                        user_of[issued] = user_of[s]
                        heappush(future, (times[issued], issued))
                        issued += 1
                else:
                    keep.append(s)
            running = keep
        t = t_end

    records = tuple(RequestRecord(times[i], prompts[i], outputs[i], admitted[i], first[i], finish[i], n_pre[i])
                    for i in range(n_req))
    t0, t1 = min(times), max(finish)
    span = t1 - t0
    # the measured window: from the first request after the warm-up to (closed loop) the last request sent
    order = sorted(range(n_req), key=times.__getitem__) if closed else range(n_req)
    w_from = times[order[warm]] if warm else -math.inf
    w_to = times[order[-1]] if closed else math.inf
    if not any(w_from <= times[i] and finish[i] <= w_to for i in range(n_req)):
        w_from, w_to = -math.inf, math.inf    # too short for a steady window: every request is measured
    settings = dict(model=m.name, hardware=hw.name, max_batch=max_batch, token_budget=token_budget,
                    chunked_prefill=chunked_prefill, block_tokens=block_tokens, kv_memory_fraction=frac,
                    cached_prefix_tokens=k_prefix, seed=seed, users=users, think_time=think if closed else None,
                    warmup=warm)
    return ServingResult(records=records, steps=steps, sequence_steps=work_done, busy_time=busy,
                         prefill_time=prefill_time, batch_time=batch_time,
                         mean_in_system=area_sys / span if span else 0.0,
                         mean_queued=area_queue / span if span else 0.0, preemptions=preemptions,
                         kv_blocks=total_blocks, kv_blocks_free_at_end=free // n_layers, max_batch_seen=max_seen,
                         settings=settings, recomputed_tokens=recomputed,
                         window=(None if w_from == -math.inf else w_from, None if w_to == math.inf else w_to),
                         token_gaps=TokenGaps(ends, itl_dt, itl_n, tuple(late)))


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
    wrap = require_callable("progress", progress, "a function wrapping the rates (e.g. tqdm)")
    it = wrap(rs) if wrap is not None else rs
    return [SweepPoint(r, simulate(model, hardware, r, prompt_tokens, output_tokens, requests, seed,
                                   **kwargs).summary()) for r in it]
