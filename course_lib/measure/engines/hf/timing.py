"""Timing the Hugging Face engine: ``model.generate()`` as a user runs it, TTFT and every step time.

Lessons: 08

``generate()`` runs greedy, ``max_new_tokens`` = ``min_new_tokens`` = N, end-of-sequence disabled, with the
engine's own dynamic KV cache (or, asked for, a static one, with its decode step replayed as CUDA graphs on a GPU:
:data:`CACHES`). A streamer (:func:`TokenClock`, a ``BaseStreamer``) records
``time.perf_counter()`` at every token it is handed: TTFT = first new token - call start; the step times are the
gaps between consecutive tokens (N - 1 per run). Prompts are random token ids. Repeats are interleaved over the
prompts (P1 P2, P2 P1, ...), so that a drift of the machine lands on every prompt alike. TPOT is the median of
all step times of a prompt, TTFT the median over the repeats; each timed call's minor page faults are counted.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from course_lib.core.quality import timing_verdict
from course_lib.core.validation import require_choice, require_count, require_counts
from course_lib.measure.allocator import minor_faults
from course_lib.measure.engines.hf.config import require_transformers
from course_lib.measure.threads import proc_stat, steal_between
from course_lib.measure.timing import Threads, thread_policy_for

__all__ = ["PROMPTS", "NEW_TOKENS", "REPEATS", "FAST_PROMPTS", "FAST_NEW_TOKENS", "CACHES", "generation_config",
           "TokenClock", "generate_timed", "EngineTiming", "measure_engine"]

PROMPTS = (128, 960)
NEW_TOKENS = 16
REPEATS = 3
FAST_PROMPTS = (16, 64)
FAST_NEW_TOKENS = 8
#: how ``generate()`` keeps its K/V cache and runs its decode step: ``dynamic`` (the engine's default: a cache that
#: grows, every op launched from Python), ``static`` (a cache allocated once at its full length, still launched op by
#: op: ``disable_compile``), ``graphs`` (the static cache with the decode step compiled by ``torch.compile`` in mode
#: "reduce-overhead", which replays it as CUDA graphs: a CUDA GPU only)
CACHES = ("dynamic", "static", "graphs")


def generation_config(new_tokens: int, cache: str = "dynamic"):
    """The ``GenerationConfig`` of every timed call: greedy, exactly ``new_tokens`` new tokens, no end-of-sequence,
    the K/V cache of ``cache`` (:data:`CACHES`)."""
    new_tokens = require_count("new_tokens", new_tokens, minimum=1)
    cache = require_choice("cache", cache, CACHES)
    tr = require_transformers()
    extra = {}
    if cache == "static":
        extra = dict(cache_implementation="static", disable_compile=True)
    elif cache == "graphs":
        extra = dict(cache_implementation="static", compile_config=tr.CompileConfig(mode="reduce-overhead"))
    return tr.GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1,
                               eos_token_id=None, pad_token_id=0, use_cache=True, **extra)


_STREAMER = None


def TokenClock():
    """A ``transformers`` ``BaseStreamer`` whose ``put`` records ``time.perf_counter()``: ``.times[0]`` is the
    prompt (handed over when generation starts), ``.times[1:]`` one per new token; ``.tokens`` counts them."""
    global _STREAMER
    if _STREAMER is None:
        tr = require_transformers()

        class _TokenClock(tr.generation.streamers.BaseStreamer):
            def __init__(self):
                self.times: list[float] = []
                self.tokens = 0
                self.ended = False

            def put(self, value):
                self.times.append(time.perf_counter())
                if len(self.times) > 1:
                    self.tokens += int(value.numel())

            def end(self):
                self.ended = True

        _STREAMER = _TokenClock
    return _STREAMER()


def generate_timed(model, prompt_ids: torch.Tensor, new_tokens: int, cache: str = "dynamic"
                   ) -> tuple[float, list[float]]:
    """(TTFT, step times) of one ``model.generate()`` of ``new_tokens`` greedy tokens after ``prompt_ids`` (1 x P),
    with the K/V cache of ``cache`` (:data:`CACHES`). The prompt is moved to the model's device first; on a GPU the
    clock starts when the device is idle, and each token's time is taken when it reaches the host (the engine
    copies every token to the CPU before handing it to the streamer, which waits for the GPU)."""
    new_tokens = require_count("new_tokens", new_tokens, minimum=2)
    gc = generation_config(new_tokens, cache)
    if cache == "graphs" and model.device.type != "cuda":
        raise ValueError(f"cache='graphs' replays CUDA graphs: it needs a model on a CUDA GPU, not on {model.device}")
    clock = TokenClock()
    prompt_ids = prompt_ids.to(model.device)
    mask = torch.ones_like(prompt_ids)
    with torch.inference_mode():
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        t0 = time.perf_counter()
        out = model.generate(prompt_ids, attention_mask=mask, generation_config=gc, streamer=clock)
    produced = out.shape[-1] - prompt_ids.shape[-1]
    if produced != new_tokens or clock.tokens != new_tokens:
        raise RuntimeError(f"generate() produced {produced} tokens ({clock.tokens} streamed), expected {new_tokens}: "
                           f"end-of-sequence was not disabled")
    stamps = clock.times[1:]
    return stamps[0] - t0, [b - a for a, b in zip(stamps, stamps[1:])]


def _max_positions(model) -> int | None:
    c = model.config
    return getattr(c, "n_positions", None) or getattr(c, "max_position_embeddings", None)


@dataclass(frozen=True)
class EngineTiming:
    """``generate()`` at one prompt length: every repeat's TTFT and every step time, with their verdicts."""

    prompt: int
    new_tokens: int
    ttft_times: tuple[float, ...]
    step_times: tuple[float, ...]
    steal: float | None = None
    #: minor page faults of each timed ``generate()`` (one per repeat; empty where the system does not count)
    faults: tuple[int, ...] = ()

    @property
    def ttft_verdict(self):
        return timing_verdict(list(self.ttft_times), steal=self.steal)

    @property
    def tpot_verdict(self):
        return timing_verdict(list(self.step_times), steal=self.steal)

    @property
    def ttft(self) -> float:
        return statistics.median(self.ttft_times)

    @property
    def tpot(self) -> float:
        return statistics.median(self.step_times)

    @property
    def median_faults(self) -> float | None:
        """The median minor page faults of one timed ``generate()`` (None where they were not counted)."""
        return statistics.median(self.faults) if self.faults else None

    @property
    def mean_context(self) -> float:
        """Mean context of the timed steps: step i (1 .. N-1) attends to prompt + i tokens."""
        return self.prompt + self.new_tokens / 2

    @property
    def repeats(self) -> int:
        return len(self.ttft_times)

    @classmethod
    def pooled(cls, timings: Sequence["EngineTiming"]) -> "EngineTiming":
        """One timing from several of the same prompt and new tokens (e.g. one per repeat): their times joined
        in order, the largest of their steals."""
        timings = list(timings)
        if not timings or any((t.prompt, t.new_tokens) != (timings[0].prompt, timings[0].new_tokens) for t in timings):
            raise ValueError("timings must be a non-empty list of timings of one prompt length and new tokens")
        steals = [t.steal for t in timings if t.steal is not None]
        return cls(timings[0].prompt, timings[0].new_tokens, tuple(x for t in timings for x in t.ttft_times),
                   tuple(x for t in timings for x in t.step_times), max(steals) if steals else None,
                   tuple(x for t in timings for x in t.faults))

    @property
    def run_tpots(self) -> tuple[float, ...]:
        """The median step time of each repeat (each ``generate()``), in order.

        The steps of one ``generate()`` are not independent repeats: they run back to back in one state of the
        machine, and their position in the run (the first steps after the prefill, the cache growing) shapes them
        alike in every run. Pooled, a shift of the whole machine between runs and a few slow steps within a run
        both widen the spread; per run, each repeat is one sample, and their agreement is what says whether the
        runs measured the same thing (:attr:`run_tpot_verdict`)."""
        return tuple(statistics.median(self.repeat_steps(r)) for r in range(self.repeats))

    @property
    def run_tpot_verdict(self):
        """The verdict of :attr:`run_tpots`: do the repeats agree on the step time?"""
        return timing_verdict(list(self.run_tpots), steal=self.steal)

    def repeat_steps(self, r: int) -> tuple[float, ...]:
        """The step times of repeat ``r`` (0-based; its ``new_tokens - 1`` gaps)."""
        r = require_count("r", r, minimum=0, maximum=max(0, self.repeats - 1))
        n = self.new_tokens - 1
        return self.step_times[r * n:(r + 1) * n]


def measure_engine(model, prompts: Sequence[int], new_tokens: int = NEW_TOKENS, repeats: int = REPEATS, *,
                   seed: int = 0, warmup: bool = True, threads: int | None = None,
                   cache: str = "dynamic") -> list[EngineTiming]:
    """Time ``generate()`` at each prompt length, ``repeats`` times, interleaved and counterbalanced
    (P1 P2, P2 P1, P1 P2 ...: a drift lands on every prompt alike).

    ``threads``: CPU threads (default: the course's thread policy,
    :func:`~course_lib.measure.timing.thread_policy_for`). A warm-up generation (8 tokens, 2 new) runs first
    unless ``warmup=False``; with a static ``cache`` (:data:`CACHES`) the warm-up is the longest prompt and all
    ``new_tokens``, twice, so that the cache is allocated at its final length and the decode step compiled and
    captured before any timed call. Each timed call's minor page faults are counted (``EngineTiming.faults``).
    """
    prompts = require_counts("prompts", prompts)
    new_tokens = require_count("new_tokens", new_tokens, minimum=2, maximum=4096)
    repeats = require_count("repeats", repeats, minimum=1, maximum=1000)
    cache = require_choice("cache", cache, CACHES)
    limit = _max_positions(model)
    if limit is not None and max(prompts) + new_tokens > limit:
        raise ValueError(f"prompts: the longest prompt ({max(prompts)}) + new_tokens ({new_tokens}) exceeds the "
                         f"model's {limit} positions")
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    nthreads = thread_policy_for(threads, "cpu").threads
    ttft = {p: [] for p in prompts}
    steps = {p: [] for p in prompts}
    faults: dict[int, list[int]] = {p: [] for p in prompts}
    with Threads(nthreads):
        if warmup and cache == "dynamic":
            generate_timed(model, torch.randint(0, vocab, (1, 8), generator=gen), 2)
        elif warmup:
            for _ in range(2):
                generate_timed(model, torch.randint(0, vocab, (1, max(prompts)), generator=gen), new_tokens, cache)
        before = proc_stat()
        for r in range(repeats):
            for p in (prompts if r % 2 == 0 else prompts[::-1]):   # P1 P2, P2 P1, ...: no prompt always first
                ids = torch.randint(0, vocab, (1, p), generator=gen)
                f0 = minor_faults()
                t, gaps = generate_timed(model, ids, new_tokens, cache)
                f1 = minor_faults()
                ttft[p].append(t)
                steps[p].extend(gaps)
                if f0 is not None and f1 is not None:
                    faults[p].append(f1 - f0)
        steal = steal_between(before, proc_stat())
    return [EngineTiming(p, new_tokens, tuple(ttft[p]), tuple(steps[p]), steal, tuple(faults[p])) for p in prompts]
