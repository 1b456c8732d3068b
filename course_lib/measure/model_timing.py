"""Whole-model timings of a :class:`course_lib.measure.tinylm.TinyLM`: TTFT and TPOT.

Lessons: 05, 06, 08

    from course_lib.measure import model_timing as mt
    mt.measure_prefill(lm, [128, 512])                   # TTFT: fresh prompts from an empty cache
    mt.measure_decode(lm, batch=4)                       # TPOT after a short prompt, B sequences per step
    mt.measure_decode_contexts(lm, [128, 1024, 4096])    # TPOT at each context length

Each prefill or decode step is one timed call, synchronised on a GPU, with a fixed CPU thread count and
the clock of :mod:`course_lib.measure.timing` (``clock=``; None: the one in force). The results carry
their median and quartiles (``spread``). :mod:`course_lib.measure.benchmarks.tinylm_bench` compares them with the
calibrated prediction.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from course_lib.core.validation import require_count, require_counts
from course_lib.measure.device import resolve_device
from course_lib.measure.timing import Spread, Threads, clock_function, quartiles, sync, thread_count

__all__ = ["DecodeTiming", "PrefillTiming", "measure_decode", "measure_decode_contexts", "measure_prefill"]


def _check_lm(lm):
    for attr in ("spec", "max_seq", "prefill", "decode_step", "device"):
        if not hasattr(lm, attr):
            raise TypeError(f"lm must be a course_lib.measure.tinylm.TinyLM, got {type(lm).__name__} (no .{attr})")


def _checked_run(lm, what: str, counts, timed_name: str, timed, warmup, batch) -> tuple[list[int], int, int, int]:
    """The arguments shared by the timings of several lengths, checked: (lengths, timed runs, warm-up, batch)."""
    _check_lm(lm)
    lengths = require_counts(what, counts, single=True)
    timed = require_count(timed_name, timed, minimum=1)
    warmup = require_count("warmup", warmup)
    return lengths, timed, warmup, _lm_batch(lm, batch)


def _lm_batch(lm, batch) -> int:
    built = int(getattr(lm, "batch", 1) or 1)
    if batch is None:
        return built
    b = require_count("batch", batch, minimum=1)
    if b > built:
        raise ValueError(f"batch={b} but the TinyLM was built with batch={built}: build it with TinyLM(..., batch={b})")
    return b


def _random_prompt(lm, batch: int, tokens: int, gen: torch.Generator) -> torch.Tensor:
    """Random token ids: shape (tokens,) for batch 1, else (batch, tokens)."""
    shape = (tokens,) if batch == 1 else (batch, tokens)
    return torch.randint(0, lm.spec.vocab, shape, generator=gen)


@dataclass(frozen=True)
class DecodeTiming(Spread):
    """Seconds per decode step of a :class:`course_lib.measure.tinylm.TinyLM` (median over ``steps`` steps).

    ``prompt_tokens``: tokens in the cache before the warm-up steps; the timed steps attend to
    ``first_context`` … ``last_context`` tokens (their own token included). ``batch``: sequences
    decoded together in each step.
    """

    seconds: float
    q1_seconds: float
    q3_seconds: float
    steps: int
    prompt_tokens: int
    threads: int | None
    warmup: int = 3
    batch: int = 1

    @property
    def first_context(self) -> int:
        """Tokens the first timed step attends to (the cached ones plus its own)."""
        return self.prompt_tokens + self.warmup + 1

    @property
    def last_context(self) -> int:
        return self.prompt_tokens + self.warmup + self.steps

    @property
    def mean_context(self) -> float:
        """Mean tokens attended over the timed steps."""
        return (self.first_context + self.last_context) / 2

    @property
    def tokens_per_second(self) -> float:
        """Tokens produced per second over the whole batch."""
        return self.batch / self.seconds


def _decode_run(lm, prompt_tokens, steps, warmup, batch, nthreads, seed, clock) -> DecodeTiming:
    if prompt_tokens + warmup + steps > lm.max_seq:
        raise ValueError(f"prompt_tokens + warmup + steps = {prompt_tokens + warmup + steps} exceed the model's "
                         f"KV cache (max_seq={lm.max_seq})")
    dev = resolve_device(lm.device)
    gen = torch.Generator().manual_seed(seed)
    prompt = _random_prompt(lm, batch, prompt_tokens, gen)
    now = clock_function(clock)
    times = []
    with Threads(nthreads), torch.inference_mode():
        tok = lm.prefill(prompt)[..., -1, :].argmax(-1)
        for i in range(warmup + steps):
            sync(dev)
            t0 = now()
            tok = lm.decode_step(tok).argmax(-1)
            sync(dev)
            if i >= warmup:
                times.append(now() - t0)
    q1, med, q3 = quartiles(times)
    return DecodeTiming(med, q1, q3, steps, prompt_tokens, nthreads, warmup, batch)


def measure_decode(lm, prompt_tokens: int = 16, steps: int = 16, threads: int | None = None,
                   warmup: int = 3, batch: int | None = None, clock: str | None = None) -> DecodeTiming:
    """Prefill ``prompt_tokens`` random tokens, then time ``steps`` greedy decode steps one by one.

    Each step is timed separately (synchronised on a GPU); ``warmup`` untimed steps come first.
    ``batch``: sequences decoded together (default: the batch the TinyLM was built with); the
    TinyLM must have been built with ``batch`` at least that large.
    """
    _check_lm(lm)
    prompt_tokens = require_count("prompt_tokens", prompt_tokens, minimum=1)
    steps = require_count("steps", steps, minimum=1)
    warmup = require_count("warmup", warmup)
    b = _lm_batch(lm, batch)
    nthreads = thread_count(threads, resolve_device(lm.device))
    return _decode_run(lm, prompt_tokens, steps, warmup, b, nthreads, 0, clock)


def measure_decode_contexts(lm, contexts, steps: int = 8, threads: int | None = None, warmup: int = 2,
                            batch: int | None = None, clock: str | None = None) -> list[DecodeTiming]:
    """TPOT at each context length: prefill to that context, then time ``steps`` steps there.

    For each ``c`` in ``contexts``: prefill ``c - warmup`` random tokens, run ``warmup`` untimed
    steps, then time ``steps`` steps one by one (median and quartiles over them). The timed steps
    attend to ``c + 1`` … ``c + steps`` tokens, so the TPOT is that of context ``c`` (plus a few).
    ``c + steps`` must fit in the model's ``max_seq``.
    """
    cs, steps, warmup, b = _checked_run(lm, "contexts", contexts, "steps", steps, warmup, batch)
    for c in cs:
        if c + steps > lm.max_seq:
            raise ValueError(f"contexts: {c} + steps ({steps}) = {c + steps} exceed the model's KV cache "
                             f"(max_seq={lm.max_seq})")
    nthreads = thread_count(threads, resolve_device(lm.device))
    out = []
    for i, c in enumerate(cs):
        w = min(warmup, c - 1)
        out.append(_decode_run(lm, c - w, steps, w, b, nthreads, 1000 + i, clock))
    return out


@dataclass(frozen=True)
class PrefillTiming(Spread):
    """Seconds to prefill ``prompt_tokens`` tokens from an empty cache (median over ``repeats`` prompts)."""

    prompt_tokens: int
    seconds: float
    q1_seconds: float
    q3_seconds: float
    repeats: int
    threads: int | None
    batch: int = 1

    @property
    def tokens_per_second(self) -> float:
        """Prompt tokens processed per second (over the whole batch)."""
        return self.batch * self.prompt_tokens / self.seconds


def measure_prefill(lm, prompt_lengths, repeats: int = 5, threads: int | None = None, warmup: int = 1,
                    batch: int | None = None, clock: str | None = None) -> list[PrefillTiming]:
    """Time prefill (the pass that produces the first token, i.e. TTFT) at each prompt length.

    Each of the ``repeats`` timed runs prefills a fresh random prompt of that length from an empty
    cache (synchronised on a GPU); ``warmup`` untimed prefills of that length come first.
    """
    lengths, repeats, warmup, b = _checked_run(lm, "prompt_lengths", prompt_lengths, "repeats", repeats, warmup, batch)
    for p in lengths:
        if p > lm.max_seq:
            raise ValueError(f"prompt_lengths: {p} tokens exceed the model's KV cache (max_seq={lm.max_seq})")
    dev = resolve_device(lm.device)
    nthreads = thread_count(threads, dev)
    now = clock_function(clock)
    gen = torch.Generator().manual_seed(0)
    out = []
    with Threads(nthreads), torch.inference_mode():
        for p in lengths:
            times = []
            for i in range(warmup + repeats):
                prompt = _random_prompt(lm, b, p, gen).to(dev)
                sync(dev)
                t0 = now()
                logits = lm.prefill(prompt)
                logits[..., -1, :].argmax(-1)  # the first token, as TTFT counts it
                sync(dev)
                if i >= warmup:
                    times.append(now() - t0)
            q1, med, q3 = quartiles(times)
            out.append(PrefillTiming(p, med, q1, q3, repeats, nthreads, b))
    return out
