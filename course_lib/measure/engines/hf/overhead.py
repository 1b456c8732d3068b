"""The Hugging Face engine's own cost per step, probed on tiny copies of the architecture (never the model).

Lessons: 08

What ``generate()`` does per step beyond the weights, the K/V and the logits (Python, module calls and dispatch
per layer, cache bookkeeping, the generation loop and its stopping checks) is measured by
:func:`probe_engine_overhead` on tiny copies of the same architecture (same ``model_type`` and options, hidden 64,
vocabulary 256) with 2 and 8 layers: per layer = (t8 - t2) / 6, fixed = t2 - 2 x per layer, for a decode step and
for a prefill. The per-layer cost is a difference of two timings, and 6 layers apart it varies several times less
than 2 apart.

Each copy's step time is judged by its **runs**, not its pooled steps (:attr:`EngineTiming.run_tpot_verdict`): a
tiny copy's step lasts about a millisecond, and the 15 steps of one ``generate()`` share that run's state, so
pooled they put every shift of the machine between runs into the spread of 75 "repeats" (the course's quiet stored
run: 24 % and 21 %, noisy, while the median steps of its runs agreed within 1 % and 18 %). The runs are the
repeats: :data:`PROBE_REPEATS` of them, interleaved a b a b, so that a machine that changes during the probe still
shows (the busy recording's runs disagree by 141 % and 53 %).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from course_lib.core.validation import require_count
from course_lib.measure.engines.hf.config import PROBE_VOCAB, build_model, check_config, load_config, tiny_config
from course_lib.measure.engines.hf.timing import EngineTiming, generate_timed
from course_lib.measure.threads import proc_stat, steal_between
from course_lib.measure.timing import Threads, thread_policy_for

__all__ = ["PROBE_LAYERS", "PROBE_PROMPT", "PROBE_NEW_TOKENS", "PROBE_REPEATS", "EngineOverhead",
           "probe_engine_overhead", "pool_overheads", "check_overhead"]

#: the tiny copies of the engine probe: layers, prompt, new tokens, repeats
PROBE_LAYERS = (2, 8)
PROBE_PROMPT = 16
PROBE_NEW_TOKENS = 16
PROBE_REPEATS = 9        # runs of each copy: the spread of 9 run medians has quartiles of its own (5 had 2nd and 4th)


@dataclass(frozen=True)
class EngineOverhead:
    """The engine's fixed cost per decode step and per prefill, split into a part per layer and a fixed part.

    From tiny copies (:func:`tiny_config`) with ``layers`` = (a, b) layers: per layer = (t_b - t_a) / (b - a),
    fixed = t_a - a x per layer (each clamped at 0, ``clamped`` says which). ``decode``/``prefill``: the
    :class:`EngineTiming` of each copy.
    """

    model_type: str
    layers: tuple[int, int]
    step_fixed: float
    step_per_layer: float
    prefill_fixed: float
    prefill_per_layer: float
    decode: tuple[EngineTiming, EngineTiming]
    clamped: tuple[str, ...] = ()
    threads: int | None = None
    #: the probe sets pooled into this one (:func:`pool_overheads`; empty for a single probe)
    sets: tuple = ()

    @property
    def verdicts(self) -> list:
        """Each copy's decode verdict (over its runs: :attr:`EngineTiming.run_tpot_verdict`), then each TTFT's."""
        return [t.run_tpot_verdict for t in self.decode] + [t.ttft_verdict for t in self.decode]

    def step(self, layers: int) -> float:
        return self.step_fixed + layers * self.step_per_layer

    def step_range(self, layers: int) -> tuple[float, float]:
        """The lowest and highest decode-step cost at ``layers`` layers over the pooled probe sets (both the
        pooled value for a single probe)."""
        steps = [o.step(layers) for o in self.sets] or [self.step(layers)]
        return min(steps), max(steps)

    def summary(self) -> str:
        a, b = self.layers
        return (f"engine probe ({self.model_type}, tiny copies of {a} and {b} layers"
                + (f", {len(self.sets)} probe sets pooled" if self.sets else "") + "): decode step "
                f"{self.step_fixed * 1e3:.3f} ms + {self.step_per_layer * 1e3:.3f} ms/layer, prefill "
                f"{self.prefill_fixed * 1e3:.3f} ms + {self.prefill_per_layer * 1e3:.3f} ms/layer"
                + (f" (clamped at 0: {', '.join(self.clamped)})" if self.clamped else ""))


def _split(ta: float, tb: float, a: int, b: int, what: str, clamped: list) -> tuple[float, float]:
    per = (tb - ta) / (b - a)
    if per < 0:
        clamped.append(f"{what} per layer")
        per = 0.0
    fixed = ta - a * per
    if fixed < 0:
        clamped.append(f"{what} fixed")
        fixed = 0.0
    return fixed, per


def probe_engine_overhead(config, *, layers: tuple[int, int] = PROBE_LAYERS, prompt: int = PROBE_PROMPT,
                          new_tokens: int = PROBE_NEW_TOKENS, repeats: int = PROBE_REPEATS,
                          threads: int | None = None, seed: int = 0) -> EngineOverhead:
    """Measure the engine's per-step cost on tiny copies of ``config``'s architecture (never the model itself).

    Both copies are built, then timed in turn (a b a b ...; each round one ``generate()`` of ``new_tokens``
    after a ``prompt``-token prompt), so a drift of the machine lands on both.
    """
    _, cfg = load_config(config)
    cfg = check_config(cfg)
    a, b = (require_count("layers", n, minimum=1, maximum=64) for n in layers)
    if b <= a:
        raise ValueError(f"layers must be two counts (a, b) with b > a, got {layers}")
    repeats = require_count("repeats", repeats, minimum=1, maximum=1000)
    models = [build_model(tiny_config(cfg, n), seed=seed)[0] for n in (a, b)]
    nthreads = thread_policy_for(threads, "cpu").threads
    gen = torch.Generator().manual_seed(seed)
    ttft = ([], [])
    steps = ([], [])
    with Threads(nthreads):
        for m in models:
            generate_timed(m, torch.randint(0, PROBE_VOCAB, (1, prompt), generator=gen), new_tokens)  # warm-up
        before = proc_stat()
        for _ in range(repeats):
            for i, m in enumerate(models):
                t, gaps = generate_timed(m, torch.randint(0, PROBE_VOCAB, (1, prompt), generator=gen), new_tokens)
                ttft[i].append(t)
                steps[i].extend(gaps)
        steal = steal_between(before, proc_stat())
    timings = tuple(EngineTiming(prompt, new_tokens, tuple(ttft[i]), tuple(steps[i]), steal) for i in (0, 1))
    return _overhead_from(cfg["model_type"], (a, b), timings, nthreads)


def _overhead_from(model_type: str, layers: tuple[int, int], timings: tuple, threads: int | None,
                   sets: tuple = ()) -> EngineOverhead:
    """The per-step and per-layer costs split from the timings of the two tiny copies (medians)."""
    a, b = layers
    clamped: list[str] = []
    sf, sp_ = _split(timings[0].tpot, timings[1].tpot, a, b, "decode", clamped)
    pf, pp = _split(timings[0].ttft, timings[1].ttft, a, b, "prefill", clamped)
    return EngineOverhead(model_type, layers, sf, sp_, pf, pp, timings, tuple(clamped), threads, sets)


def pool_overheads(probes: Sequence[EngineOverhead]) -> EngineOverhead:
    """One engine probe from several sets of the same probe (same architecture, layers and settings): every
    set's timings of each tiny copy pooled, then split once (medians of the pooled times).

    The benchmark probes the engine again before and after each repeat of a model, as it does the GEMVs, and
    predicts from the pool: sets run around the model's own repeats see the state the machine was in while it
    ran, where one set taken before the model was built may not. The steal of the pool is the largest of its
    sets'.
    """
    probes = list(probes)
    if not probes or not all(isinstance(o, EngineOverhead) for o in probes):
        raise TypeError("probes must be a non-empty list of probe_engine_overhead() results")
    first = probes[0]
    for o in probes[1:]:
        if (o.model_type, o.layers) != (first.model_type, first.layers) or \
                o.decode[0].prompt != first.decode[0].prompt or o.decode[0].new_tokens != first.decode[0].new_tokens:
            raise ValueError(f"probes must share one architecture, layers, prompt and new tokens: "
                             f"{first.model_type} {first.layers} and {o.model_type} {o.layers}")
    if len(probes) == 1:
        return first
    timings = tuple(EngineTiming.pooled([o.decode[i] for o in probes]) for i in (0, 1))
    return _overhead_from(first.model_type, first.layers, timings, first.threads,
                          tuple(x for o in probes for x in (o.sets or (o,))))


def check_overhead(overhead) -> None:
    """A TypeError unless ``overhead`` is an :class:`EngineOverhead`."""
    if not isinstance(overhead, EngineOverhead):
        raise TypeError(f"overhead must come from probe_engine_overhead(), got {type(overhead).__name__}")
