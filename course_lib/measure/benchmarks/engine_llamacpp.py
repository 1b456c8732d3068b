"""The llama.cpp engine benchmark: ``python -m course_lib.measure.validate --engine llama.cpp``.

Lessons: none

::

    from course_lib.measure.benchmarks import engine_llamacpp
    report = engine_llamacpp.run(fast=True)    # build the GGUFs, probe, predict, then measure generate()
    print(report.report())                     # conditions, probes, the table, terms, verdicts, the last line

For each configuration (default :data:`DEFAULT_CONFIGS`: a 1B- and a 3B-class model) in four formats at 1 and
all usable threads: the GGUF files are built first (cached, :mod:`course_lib.measure.engines.llamacpp`), then
the engine probes (llama.cpp's own kernels on probe files, never the model) run before the first model and
after each, so that every model's measurements lie between two probe sets
(:class:`~course_lib.measure.benchmarks.bracket.Bracketed`: probe, model 1, probe, model 2, probe); a model's
repeats run in rounds over its formats and thread counts, so that a disturbance lasting a minute lands on one
repeat of many points rather than on every repeat of one. A point is
the median of every repeat (every step for TPOT) against the prediction from the mean of its two probe sets; it
is judged by :func:`~course_lib.measure.benchmarks.bracket.judge`, the rule of every benchmark here, on its
repeats' ratios measured / predicted (TPOT: also on the median repeat's own steps), and on how far the two
probe sets disagree on the rates its prediction reads. See ``docs/VALIDATE.md``.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

from course_lib.core.quality import timing_verdict
from course_lib.core.validation import require_choice, require_count, require_counts
from course_lib.measure.benchmarks.bracket import Bracketed, judge
from course_lib.measure.engines.llamacpp import (FAST_LAYERS, FAST_NEW_TOKENS, FORMATS, NEW_TOKENS, PROMPTS,
                                                 REPEATS, EngineRates, GGUFPrediction, GGUFShape, _built,
                                                 gguf_bytes, measure_gguf, measure_read_bandwidth, open_gguf,
                                                 predict_gguf_tpot, predict_gguf_ttft, probe_engine_rates,
                                                 probe_files, require_llamacpp, shape_nominal_bytes, shape_of)
from course_lib.measure.benchmarks.report import LAST_LINE_RE, EngineErrors

__all__ = ["DEFAULT_CONFIGS", "FAST_CONFIGS", "COLUMNS", "NOISY_EXIT", "LAST_LINE_RE", "LlamaPoint", "LlamaReport",
           "run", "main", "judged_point"]

#: the benchmark's default configurations: a 1B- and a 3B-class model
DEFAULT_CONFIGS = ("llama-3.2-1b", "llama-3.2-3b")
#: ``--fast``: the 1B model cut to FAST_LAYERS layers (a smoke run)
FAST_CONFIGS = ("llama-3.2-1b",)
#: ``python -m course_lib.measure.validate --engine llama.cpp`` exits with this status when a point was not reliable
NOISY_EXIT = 3

COLUMNS = ("phase", "model", "format", "threads", "weights (GB)", "prompt", "predicted (ms)", "measured (ms)",
           "error %", "spread %", "verdict", "uncalibrated (ms)", "uncal. error %")


@dataclass(frozen=True)
class LlamaPoint:
    kind: str
    model: str
    fmt: str
    threads: int
    weight_bytes: int
    tokens: int
    predicted: float
    measured: float
    spread: float
    verdict: str
    uncalibrated: float | None     # the nominal-bytes floor of a TPOT; None for a TTFT (no such estimate here)
    prediction: GGUFPrediction
    reason: str = ""

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured

    @property
    def uncalibrated_error(self) -> float | None:
        return None if self.uncalibrated is None else (self.uncalibrated - self.measured) / self.measured


@dataclass
class LlamaReport(EngineErrors):
    points: list
    rates: dict                       # threads -> [EngineRates before, after] (one pair per model)
    read_bandwidth: dict              # threads -> bytes/s
    held: dict                        # (model, fmt) -> GGUFBytes
    threads: tuple
    policy: str
    seconds: float
    fast: bool = False
    skipped: list = field(default_factory=list)
    drifts: list = field(default_factory=list)

    def rows(self) -> list[tuple]:
        return [("TPOT" if p.kind == "tpot" else "TTFT", p.model, p.fmt, str(p.threads),
                 f"{p.weight_bytes / 1e9:.3f}", str(p.tokens), f"{p.predicted * 1e3:.2f}", f"{p.measured * 1e3:.2f}",
                 f"{p.error * 100:+.1f}", f"{p.spread * 100:.1f}", p.verdict,
                 "–" if p.uncalibrated is None else f"{p.uncalibrated * 1e3:.2f}",
                 "–" if p.uncalibrated is None else f"{p.uncalibrated_error * 100:+.1f}") for p in self.points]

    def table(self) -> str:
        rows = [COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]

        def line(r):
            return "  ".join(c.rjust(w) if i >= 3 and i != 10 else c.ljust(w)
                             for i, (c, w) in enumerate(zip(r, widths)))
        return "\n".join([line(rows[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in rows[1:]])

    def quality_line(self) -> str:
        if not self.noisy_points:
            return f"measurements: all {len(self.points)} points reliable"
        worst = next(p for p in self.points if p.verdict != "reliable")
        return (f"measurements: {self.noisy_points} of {len(self.points)} points not reliable (e.g. {worst.model} "
                f"{worst.fmt} {worst.kind.upper()} @ {worst.threads} threads: {worst.reason or worst.verdict}): their "
                f"errors mix the model's error with the machine's noise; close other programs and run again "
                f"(exit status {NOISY_EXIT})")

    def report(self) -> str:
        import llama_cpp
        lines = [f"engine: llama.cpp (llama-cpp-python {llama_cpp.__version__}) Llama.generate() on CPU, GGUF "
                 f"files of random weights, greedy, f16 K/V cache",
                 f"threads: {', '.join(map(str, self.threads))} ({self.policy})",
                 "read bandwidth (torch sum, beyond the cache): "
                 + ", ".join(f"{t} thread{'s' if t > 1 else ''} {bw / 1e9:.1f} GB/s"
                             for t, bw in sorted(self.read_bandwidth.items())),
                 "engine probes (llama.cpp's kernels on probe files; before / after each model, the mean used):"]
        for t, pairs in sorted(self.rates.items()):
            for before, after in pairs:
                lines.append("  before " + before.line())
                lines.append("  after  " + after.line())
        lines += [f"  {x.summary()}" for x in self.held.values()]
        lines += [f"skipped {n}: {why}" for n, why in self.skipped]
        lines += ["", self.table(), ""]
        lines += [f"terms {p.model} {p.fmt} {p.kind.upper()} @ {p.threads}t: {p.prediction.breakdown()}"
                  for p in self.points]
        unc = [abs(p.uncalibrated_error) for p in self._of("tpot")]
        lines += [f"uncalibrated TPOT (nominal bytes / read bandwidth): geomean |error| "
                  f"{statistics.geometric_mean(unc) if unc else math.nan:.3f}, max {max(unc, default=math.nan):.3f}",
                  *self.drifts, self.quality_line(), f"total {self.seconds:.1f} s", self.last_line()]
        return "\n".join(lines)


def _mean_rates(a: EngineRates, b: EngineRates) -> EngineRates:
    """The two probe sets' rates averaged as times (harmonic mean of the rates)."""
    def hm(x, y):
        return 2 / (1 / x + 1 / y)
    return replace(a, decode={t: hm(a.decode[t], b.decode[t]) for t in a.decode},
                   prefill={t: hm(a.prefill[t], b.prefill[t]) for t in a.prefill},
                   step_fixed=(a.step_fixed + b.step_fixed) / 2, prefill_fixed=(a.prefill_fixed + b.prefill_fixed) / 2,
                   verdicts=a.verdicts + b.verdicts)


def _configs(configs, fast: bool, layers: int | None) -> list[GGUFShape]:
    if configs is None or (isinstance(configs, (list, tuple)) and not configs):
        configs = FAST_CONFIGS if fast else DEFAULT_CONFIGS
    if isinstance(configs, (str, Path, Mapping)):
        configs = [configs]
    cut = FAST_LAYERS if fast and layers is None else layers
    out = []
    for c in configs:
        full = shape_of(c)
        out.append(shape_of(c, layers=min(cut, full.layers)) if cut else full)
    return out


def run(configs=None, *, fast: bool = False, threads: Sequence[int] | None = None, formats: Sequence[str] = FORMATS,
        prompt: int | None = None, new_tokens: int | None = None, repeats: int | None = None,
        layers: int | None = None, progress: bool = True) -> LlamaReport:
    """Build the GGUFs (cached), probe, predict, then measure every configuration x format x thread count.

    ``threads``: default 1 and all usable threads (:func:`course_lib.measure.timing.thread_policy_for`).
    ``layers``: cut every configuration to that many layers (``fast``: 2). The engine probes run before and
    after each model's measurements (:class:`~course_lib.measure.benchmarks.bracket.Bracketed`); each point is
    predicted from their mean and judged by :func:`~course_lib.measure.benchmarks.bracket.judge` on its repeats.
    """
    from course_lib.measure.timing import thread_policy_for
    from course_lib.measure.timing import progress_bar
    require_llamacpp()
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    t0 = time.perf_counter()
    policy = thread_policy_for(None, "cpu")
    if threads is None:
        threads = tuple(dict.fromkeys([1, policy.threads]))
    threads = tuple(require_counts("threads", threads))
    formats = tuple(require_choice("formats", f, FORMATS) for f in formats)
    prompt = require_count("prompt", PROMPTS[0] if prompt is None else prompt, minimum=2)
    new_tokens = require_count("new_tokens", (FAST_NEW_TOKENS if fast else NEW_TOKENS) if new_tokens is None
                               else new_tokens, minimum=2)
    repeats = require_count("repeats", REPEATS if repeats is None else repeats, minimum=1)
    shapes = _configs(configs, fast, layers)
    report = LlamaReport([], {t: [] for t in threads}, {}, {}, threads, policy.description, 0.0, fast)
    with progress_bar(total=2 * len(shapes), desc="llama.cpp", unit="step", enabled=progress) as bar:
        def note(s):
            bar.set_postfix_str(s)
        paths = {}
        for shape in shapes:                  # every file first (cached): the timed part runs without writing
            for f in formats:
                paths[(shape.name, f)] = _built(shape, f, None, 0, note)
                report.held[(shape.name, f)] = gguf_bytes(paths[(shape.name, f)])
        types = sorted({ty for h in report.held.values() for ty in h.types})
        vocabs = sorted({s.vocab for s in shapes})
        files = {v: probe_files(types, v, note) for v in vocabs}
        for t in threads:
            note(f"read bandwidth, {t} thread(s)")
            report.read_bandwidth[t] = measure_read_bandwidth(t)

        def probe():
            return {(t, v): probe_engine_rates(types, t, vocab=v, prompt=prompt, repeats=repeats, files=files[v])
                    for t in threads for v in vocabs}

        def measure(name):
            from course_lib.measure.engines.hf import EngineTiming
            # the repeats in rounds (every format and thread count once per round, the order reversed every
            # other round): a disturbance that lasts a minute lands on one repeat of every point, where the
            # judge sees the repeats disagree, not on every repeat of one point
            shape, runs = by_name[name], {(f, t): [] for f in formats for t in threads}
            for r in range(repeats):
                for f in (formats if r % 2 == 0 else formats[::-1]):
                    note(f"{shape.name} {f}, round {r + 1} of {repeats}")
                    llm = open_gguf(paths[(shape.name, f)], threads=threads[0], n_ctx=prompt + new_tokens + 8)
                    try:
                        for i, t in enumerate(threads if r % 2 == 0 else threads[::-1]):
                            runs[(f, t)] += measure_gguf(llm, threads=t, prompts=[prompt], new_tokens=new_tokens,
                                                         repeats=1, seed=r, warmup=i == 0)
                    finally:
                        llm.close()
            bar.update()
            note(f"{shape.name}: engine probes again")
            return {k: EngineTiming.pooled(v) for k, v in runs.items()}
        # probe, model 1, probe, model 2, probe ...: each model between two probe sets, predicted from both
        by_name = {s.name: s for s in shapes}
        note("engine probes")
        seq = Bracketed(probe)
        for m in seq.run(list(by_name), measure):
            shape = by_name[m.item]
            before = {t: m.before[(t, shape.vocab)] for t in threads}
            after = {t: m.after[(t, shape.vocab)] for t in threads}
            for t in threads:
                report.rates[t].append((before[t], after[t]))
            report.points += _points(shape, formats, threads, m.value, before, after, report)
            bar.update()
    report.seconds = time.perf_counter() - t0
    return report


def _apart(before: dict, after: dict, types) -> float:
    """How far two probe sets disagree on the rates of ``types``: the largest |b - a| / min(a, b)."""
    return max(abs(before[k] - after[k]) / min(before[k], after[k]) for k in types)


def _points(shape, formats, threads, timed, before, after, report) -> list:
    out = []
    for t in threads:
        moved = _apart(before[t].decode, after[t].decode, before[t].decode)
        report.drifts.append(f"engine probe drift {shape.name} @ {t} thread(s): decode rates moved by at most "
                             f"{moved:.0%} between before and after")
        out += [judged_point(kind, shape, f, report.held[(shape.name, f)], timed[(f, t)], before[t], after[t],
                             report.read_bandwidth[t]) for kind in ("tpot", "ttft") for f in formats]
    return out


def judged_point(kind: str, shape: GGUFShape, fmt: str, held, timing, before: EngineRates, after: EngineRates,
                 read_bandwidth: float) -> LlamaPoint:
    """One point: ``timing`` (a :func:`~course_lib.measure.engines.llamacpp.measure_gguf` timing of ``held``'s
    file, ``shape`` in ``fmt``) against the prediction from the mean of the probe sets ``before`` and ``after``,
    judged by :func:`~course_lib.measure.benchmarks.bracket.judge` on its repeats' ratios measured / predicted
    (TPOT: each repeat's median step, and its own steps' verdict; TTFT: each repeat's TTFT), and on how far the
    two probe sets disagree on the rates the prediction reads."""
    kind = require_choice("kind", kind, ("tpot", "ttft"))
    rates = _mean_rates(before, after)
    if kind == "tpot":
        pr = predict_gguf_tpot(held, rates, timing.mean_context)
        measured = list(timing.run_tpots)
        own = [timing_verdict(list(timing.repeat_steps(r)), steal=timing.steal) for r in range(timing.repeats)]
        read = ["F16", *(ty if ty != "F32" else "F16" for ty in held.by_type)]
        probe_step = _apart(before.decode, after.decode, read)
        unc = (shape_nominal_bytes(shape, fmt) + timing.mean_context * held.kv_bytes_per_token) / read_bandwidth
    else:
        pr = predict_gguf_ttft(held, rates, timing.prompt)
        measured, own = list(timing.ttft_times), None
        probe_step = max(_apart(before.prefill, after.prefill, list(held.prefill_params_by_type())),
                         _apart(before.decode, after.decode, ["F16", held._output()[1]]))
        unc = None       # the course's uncalibrated estimate here is the TPOT's bytes floor only
    j = judge([x / pr.seconds for x in measured], own=own, probe_steps=[probe_step] * len(measured),
              steal=timing.steal, what="repeats")
    return LlamaPoint(kind, shape.name, fmt, before.threads, held.file_weight_bytes, timing.prompt, pr.seconds,
                      timing.tpot if kind == "tpot" else timing.ttft, j.agreement, j.verdict, unc, pr, j.reason)


def main(argv: Sequence[str] | None = None, a=None) -> int:
    """``python -m course_lib.measure.validate --engine llama.cpp [--config PATH]... [--fast] [--threads N]``."""
    import sys
    if a is None:
        import argparse
        ap = argparse.ArgumentParser(prog="python -m course_lib.measure.validate --engine llama.cpp")
        ap.add_argument("--config", action="append", default=None)
        ap.add_argument("--threads", type=int, default=None)
        ap.add_argument("--fast", action="store_true")
        ap.add_argument("--layers", type=int, default=None)
        ap.add_argument("--no-progress", action="store_true")
        a = ap.parse_args(argv)
    threads = None if getattr(a, "threads", None) is None else tuple(dict.fromkeys([1, a.threads]))
    try:
        rep = run(a.config, fast=a.fast, threads=threads, layers=getattr(a, "layers", None),
                  progress=not a.no_progress)
    except (ImportError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(rep.report())
    return NOISY_EXIT if rep.noisy_points else 0


