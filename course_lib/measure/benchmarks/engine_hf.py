"""The Hugging Face engine benchmark: ``python -m course_lib.measure.validate --engine hf``.

Lessons: none

::

    from course_lib.measure.benchmarks import engine_hf
    report = engine_hf.run(fast=True)         # calibrate, probe the engine, predict, then measure generate()
    print(report.report())                    # conditions, the table, terms, verdicts, the last line

For each configuration (default :data:`~course_lib.measure.engines.hf.DEFAULT_CONFIGS`): the course's calibration
(probes only), the engine probe on tiny copies, then ``generate()`` measured in :data:`BENCHMARK_REPEATS` repeats,
each repeat over every prompt length. Every repeat runs between two probe sets
(:class:`~course_lib.measure.benchmarks.bracket.Bracketed`): the GEMV and prefill GEMM probes of the model's shapes,
the cold-op probes and the engine probe, so the prediction sees the rates the machine had while the engine ran.
A point is the median of every repeat (every step for TPOT) against the prediction from the mean of every probe
set and the pooled engine probe; it is judged by :func:`~course_lib.measure.benchmarks.bracket.judge` on the
repeats' ratios measured / predicted, each repeat predicted from the two probe sets around it (TPOT: also on the
median repeat's own steps and on its two GEMV probe sets). ``--fast`` keeps the calibration's rates and probes the
engine once per architecture (a smoke run). See ``docs/VALIDATE.md``.
"""
from __future__ import annotations

import gc
import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch

from course_lib.core.models import ModelSpec
from course_lib.core.quality import summarize_verdicts, timing_verdict
from course_lib.core.validation import require_count, require_counts
from course_lib.measure import allocator as _allocator
from course_lib.measure.benchmarks.bracket import Bracketed, Drift, judge
from course_lib.measure.benchmarks.report import LAST_LINE_RE, EngineErrors
from course_lib.measure.calibrate import Calibration, reprobe, reprobe_gemv, stream_between_ops, weight_matrices
from course_lib.measure.device import last_level_cache_bytes
from course_lib.measure.engines.hf import (DEFAULT_CONFIGS, FAST_CONFIGS, FAST_NEW_TOKENS, FAST_PROMPTS, NEW_TOKENS,
                                           PROMPTS, REPEATS, EngineOverhead, EngineTiming, ModelTooLarge,
                                           build_model, calibrate_for, check_config, check_fits, fast_config,
                                           load_config, measure_engine, pool_overheads, predict_engine_tpot,
                                           predict_engine_ttft, probe_engine_overhead, require_transformers,
                                           spec_of, tiny_config, weights_and_kv)
from course_lib.measure.predict import Prediction, check_calibration
from course_lib.measure.timing import progress_bar, thread_policy_for

__all__ = ["BENCHMARK_REPEATS", "NOISY_EXIT", "LAST_LINE_RE", "COLUMNS", "EnginePoint", "EngineReport", "run",
           "compare"]

#: repeats of the benchmark (a lesson measures :data:`~course_lib.measure.engines.hf.REPEATS`): each is bracketed
#: by probe sets, and five of them average the machine's drift better than three
BENCHMARK_REPEATS = 5
#: ``python -m course_lib.measure.validate --engine hf`` exits with this status when a measured point was not reliable
NOISY_EXIT = 3
COLUMNS = ("phase", "model", "parameters", "prompt/context", "predicted (ms)", "measured (ms)", "error %",
           "spread %", "verdict", "uncalibrated (ms)", "uncal. error %")


@dataclass(frozen=True)
class EnginePoint:
    """One row: a prediction against its measurement."""

    kind: str
    model: str
    params: int
    tokens: int
    predicted: float
    measured: float
    spread: float
    verdict: str
    uncalibrated: float
    prediction: Prediction
    #: measured / predicted of every repeat, each against the probes run just before and after it (what the
    #: verdict judges; empty where the point was not compared repeat by repeat)
    ratios: tuple = ()
    reason: str = ""

    error = property(lambda self: self.predicted / self.measured - 1, doc="(predicted - measured) / measured")
    uncalibrated_error = property(lambda self: self.uncalibrated / self.measured - 1,
                                  doc="(uncalibrated - measured) / measured")


@dataclass
class EngineReport(EngineErrors):
    """The engine benchmark's points, probes and conditions."""

    points: list
    overheads: dict
    calibration: Calibration
    threads: str
    seconds: float
    fast: bool = False
    skipped: list = field(default_factory=list)
    #: bytes of the last-level cache the cores in use share (None: unknown)
    llc_bytes: int | None = None
    #: the CPU threads the measurements used
    thread_count: int | None = None
    #: configuration name -> its weights term from each GEMV probe set run around its repeats
    drifts: dict = field(default_factory=dict)
    #: what the allocator did while the engine ran (:func:`course_lib.measure.allocator.state`)
    allocator: str = ""
    #: configuration name -> its :class:`EngineTiming` per prompt length (their page-fault counts)
    timings: dict = field(default_factory=dict)

    def faults_line(self) -> str | None:
        """The median minor page faults of a timed ``generate()``, per model and prompt (None: not counted)."""
        parts = []
        for name, ts in self.timings.items():
            counts = [(t.prompt, t.median_faults) for t in ts if t.median_faults is not None]
            if counts:
                parts.append(f"{name} " + ", ".join(f"P={p}: {f:,.0f}" for p, f in counts))
        if not parts:
            return None
        return "page faults per timed generate() (median; each is a page the allocator handed out fresh): " \
            + "; ".join(parts)

    def engine_drift_lines(self) -> list[str]:
        """Per model with pooled engine probes: its decode step's engine cost over the sets, and the pool's."""
        out = []
        for name, o in self.overheads.items():
            layers = next((p.prediction.counts.get("layers") for p in self.points if p.model == name), None)
            if not o.sets or layers is None:
                continue
            lo, hi = o.step_range(layers)
            out.append(f"{name}: tiny-copy decode step at {layers} layers {lo * 1e3:.2f} to {hi * 1e3:.2f} ms over "
                       f"{len(o.sets)} probe sets ({(hi - lo) / lo:.0%} apart), {o.step(layers) * 1e3:.2f} ms pooled")
        return out

    def in_cache(self) -> list[str]:
        """Models whose fp32 weights fit in the last-level cache: a decode step reads them from the cache, not
        from memory, so the weights term (GEMV probes rotated beyond the cache) over-predicts them."""
        if not self.llc_bytes:
            return []
        out = []
        for p in self.points:
            if p.params * 4 <= self.llc_bytes and p.model not in out:
                out.append(p.model)
        return out

    @property
    def quality(self):
        return summarize_verdicts([p.verdict for p in self.points] + [v for o in self._probes() for v in o.verdicts])

    def _probes(self) -> list:
        """The distinct engine probes (configurations of one architecture share theirs)."""
        out = []
        for o in self.overheads.values():
            if not any(o is x for x in out):
                out.append(o)
        return out

    def rows(self) -> list[tuple]:
        return [("TPOT" if p.kind == "tpot" else "TTFT", p.model, f"{p.params / 1e6:.1f}M", str(p.tokens),
                 f"{p.predicted * 1e3:.2f}", f"{p.measured * 1e3:.2f}", f"{p.error * 100:+.1f}",
                 f"{p.spread * 100:.1f}", p.verdict, f"{p.uncalibrated * 1e3:.2f}",
                 f"{p.uncalibrated_error * 100:+.1f}") for p in self.points]

    def table(self) -> str:
        rows = [COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]

        def line(r):
            return "  ".join(c.rjust(w) if i >= 2 and i != 8 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

        return "\n".join([line(rows[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in rows[1:]])

    def quality_line(self) -> str:
        q = self.quality
        if q.verdict == "reliable":
            return f"measurements: all {q.total} timings reliable"
        worst = next((p for p in self.points if p.verdict != "reliable" and p.reason), None)
        example = (f"; e.g. {worst.model} {worst.kind.upper()} @ {worst.tokens}: {worst.reason}" if worst else "")
        return (f"measurements: {self.noisy_points} of {len(self.points)} points not reliable "
                f"({q.counts['noisy']} noisy, {q.counts['contended']} contended timings of {q.total}, probes "
                f"included{example}): the errors below mix the model's error with the machine's noise; close other "
                f"programs" + (", or run with --threads 1" if (self.thread_count or 2) > 1 else " and run again"))

    def report(self) -> str:
        tr = require_transformers()
        lines = [f"engine: Hugging Face transformers {tr.__version__} generate() on CPU, fp32, random weights, "
                 f"dynamic cache, greedy; torch {torch.__version__}",
                 f"threads: {self.threads}",
                 *([f"allocator: {self.allocator}"]                # unless the calibration's conditions say it
                   if self.allocator and self.allocator != self.calibration.allocator else []),
                 "calibration (probes only): " + self.calibration.conditions(),
                 *("  " + x for i, x in enumerate(self.calibration.summary().splitlines())
                   if i < 3 or x.startswith(("GEMV", "attention K/V", "op overhead after"))),
                 *(f"  {', '.join(n for n, x in self.overheads.items() if x is o)}: {o.summary()}"
                   for o in self._probes()),
                 *(f"skipped {name}: {why}" for name, why in self.skipped),
                 "", self.table(), ""]
        lines += [f"terms: {p.prediction.breakdown()}; measured {p.measured * 1e3:.3f} ms"
                  + (f"; measured / predicted by repeat: {' '.join(f'{x:.3f}' for x in p.ratios)}" if p.ratios else "")
                  for p in self.points]
        unc = [abs(p.uncalibrated_error) for p in self._of("tpot")]
        lines += [f"uncalibrated TPOT: geomean |error| {statistics.geometric_mean(unc) if unc else math.nan:.3f}, "
                  f"max {max(unc, default=math.nan):.3f}",
                  self.quality_line()]
        faults = self.faults_line()
        if faults:
            lines.append(faults)
        cached = self.in_cache()
        if cached:
            lines.append(f"note: the fp32 weights of {', '.join(cached)} fit in this machine's "
                         f"{self.llc_bytes / 2**20:.0f} MiB last-level cache: decode reads them from the cache and "
                         f"the weights term, probed beyond the cache, over-predicts"
                         + (" (--fast uses small models; the targets apply to the full run)" if self.fast else ""))
        if self.drifts:
            lines.append("bandwidth drift (each model is predicted from the GEMV and prefill GEMM probes run before "
                         "and after each of its repeats):")
            lines += ["  " + d.line() for d in self.drifts.values()]
        engine_drift = self.engine_drift_lines()
        if engine_drift:
            lines.append("engine probe drift (each model's engine term is pooled from the probe sets run before and "
                         "after each of its repeats):")
            lines += ["  " + x for x in engine_drift]
        lines += [f"total {self.seconds:.1f} s", self.last_line()]
        return "\n".join(lines)


def _configs(configs, fast: bool) -> list[tuple[str, dict]]:
    if configs is None or (isinstance(configs, (list, tuple)) and not configs):
        names = FAST_CONFIGS if fast else DEFAULT_CONFIGS
        out = [load_config(n) for n in names]
        if fast:
            out = [(f"{n}-2L", fast_config(c)) for n, c in out]
        return out
    if isinstance(configs, (str, Path, Mapping)):
        configs = [configs]
    out = []
    seen: dict[str, int] = {}
    for c in configs:
        name, cfg = load_config(c)
        check_config(cfg, f"config {name!r}")
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", cfg))
    return out


def run(configs=None, *, fast: bool = False, threads: int | None = None, prompts=None, new_tokens=None,
        repeats=None, calibration: Calibration | None = None, progress: bool = True,
        available: int | None = None) -> EngineReport:
    """Calibrate from the probes, probe the engine on tiny copies, predict, then measure each configuration
    (``repeats``: default :data:`BENCHMARK_REPEATS`, :data:`~course_lib.measure.engines.hf.REPEATS` with ``fast``).

    ``configs``: names, paths or dicts (default :data:`~course_lib.measure.engines.hf.DEFAULT_CONFIGS`; ``fast``:
    :data:`~course_lib.measure.engines.hf.FAST_CONFIGS` cut to 2 layers). A configuration that does not fit in
    memory is skipped with its reason. The allocator is left as it is (the command line pins it first).
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    t0 = time.perf_counter()
    policy = thread_policy_for(threads, "cpu")
    prompts = require_counts("prompts", (FAST_PROMPTS if fast else PROMPTS) if prompts is None else prompts)
    new_tokens = require_count("new_tokens", (FAST_NEW_TOKENS if fast else NEW_TOKENS) if new_tokens is None
                               else new_tokens, minimum=2, maximum=4096)
    repeats = require_count("repeats", (REPEATS if fast else BENCHMARK_REPEATS) if repeats is None else repeats,
                            minimum=1, maximum=1000)
    specs, skipped = {}, []
    for name, cfg in _configs(configs, fast):
        spec = spec_of(cfg, name)
        try:
            check_fits(spec, available)
        except ModelTooLarge as e:
            skipped.append((name, str(e)))
            continue
        if spec.max_positions is not None and max(prompts) + new_tokens > spec.max_positions:
            skipped.append((name, f"the longest prompt ({max(prompts)}) + {new_tokens} new tokens exceeds its "
                                  f"{spec.max_positions} positions"))
            continue
        specs[name] = (spec, cfg)
    if not specs:
        raise ModelTooLarge("no configuration can be measured: " + "; ".join(f"{n}: {w}" for n, w in skipped))
    require_transformers()
    if calibration is None:
        calibration = calibrate_for({n: s for n, (s, _) in specs.items()}, prompts, threads=policy.threads,
                                    fast=fast, progress=progress)
    else:
        check_calibration(calibration)
    report = EngineReport(points=[], overheads={}, calibration=calibration, threads=policy.description,
                          seconds=0.0, fast=fast, skipped=skipped, llc_bytes=last_level_cache_bytes("cpu"),
                          thread_count=policy.threads, allocator=_allocator.state().description)
    probed: dict[str, EngineOverhead] = {}      # --fast: tiny configuration -> its probe (one per architecture)
    with progress_bar(total=len(specs), desc="measure transformers generate()", unit="model",
                      enabled=progress) as bar:
        for name, (spec, cfg) in specs.items():
            bar.set_postfix_str(name)
            model, _ = build_model(cfg, available=available)
            seq = Bracketed(_prober(spec, cfg, prompts, calibration, policy.threads, fast))

            def one_repeat(r, model=model):
                order = list(prompts) if r % 2 == 0 else list(prompts)[::-1]   # no prompt always first
                return {t.prompt: t for t in measure_engine(model, order, new_tokens, 1, seed=r, warmup=r == 0,
                                                            threads=policy.threads)}
            seq.run(range(repeats), one_repeat)
            del model
            gc.collect()
            if fast:
                key = json.dumps(tiny_config(cfg), sort_keys=True)
                if key not in probed:
                    probed[key] = probe_engine_overhead(cfg, threads=policy.threads)
                ov = probed[key]
            else:
                ov = pool_overheads([p["engine"] for p in seq.probes])
            report.overheads[name] = ov
            report.timings[name] = [EngineTiming.pooled([m.value[p] for m in seq.measurements]) for p in prompts]
            if not fast:
                report.drifts[name] = _drift(spec, calibration, seq.probes)
            report.points += compare(name, spec, seq, calibration, ov, new_tokens)
            bar.update()
    report.seconds = time.perf_counter() - t0
    return report


def _prober(spec: ModelSpec, cfg: dict, prompts, calibration: Calibration, threads: int | None, fast: bool):
    """The probe set run before and after each repeat: everything the prediction reads (None with ``fast``: the
    calibration's rates are kept, re-probing would take most of a smoke run)."""
    if fast:
        return lambda: None
    shapes = sorted(weight_matrices(spec))
    gemms = [(p, m, k) for p in prompts for (m, k) in shapes if (m, k) != (spec.vocab, spec.hidden)]
    colds = calibration.cold_points_for(stream_between_ops(spec))

    def probe():
        return {"gemv": reprobe_gemv(calibration, shapes), "gemm": reprobe(calibration, "gemm", gemms),
                "cold": reprobe(calibration, "cold", colds) if colds else None,
                "engine": probe_engine_overhead(cfg, threads=threads)}
    return probe


def compare(name: str, spec: ModelSpec, seq: Bracketed, calibration: Calibration, overhead: EngineOverhead,
            new_tokens: int) -> list[EnginePoint]:
    """The TPOT and TTFT points of one model from its bracketed repeats (``seq``: each measurement a repeat,
    {prompt: :class:`~course_lib.measure.engines.hf.EngineTiming`}, between two probe sets, or None probe sets
    where the calibration's rates are kept).

    The point is the median of every repeat (every step for TPOT) against the prediction from the mean of every
    probe set and ``overhead``. It is judged by :func:`~course_lib.measure.benchmarks.bracket.judge` on the
    repeats' ratios measured / predicted, each repeat predicted from the two probe sets around it; a TPOT point
    also on its median repeat's own steps and on that repeat's two GEMV probe sets.
    """
    sets = [p for p in seq.probes if p is not None]
    cold = [p["cold"] for p in sets if p["cold"]]
    pooled = calibration.with_probes(cold=cold)
    everything = calibration.with_probes(gemv=[p["gemv"] for p in sets], gemm=[p["gemm"] for p in sets], cold=cold)
    drift = _drift(spec, calibration, seq.probes) if sets else None

    def around(m):
        if m.before is None:
            return pooled
        return pooled.with_probes(gemv=[m.before["gemv"], m.after["gemv"]], gemm=[m.before["gemm"], m.after["gemm"]])

    def predicted(kind, prompt, cal):
        return (predict_engine_tpot(spec, prompt, new_tokens, cal, overhead) if kind == "tpot"
                else predict_engine_ttft(spec, prompt, cal, overhead))

    out = []
    for kind in ("tpot", "ttft"):
        for prompt in seq.measurements[0].value:
            repeats = [m.value[prompt] for m in seq.measurements]
            measured = [statistics.median(t.step_times) if kind == "tpot" else t.ttft for t in repeats]
            ratios = tuple(x / predicted(kind, prompt, around(m)).seconds
                           for x, m in zip(measured, seq.measurements))
            steals = [t.steal for t in repeats if t.steal is not None]
            j = judge(ratios, what="repeats", steal=max(steals) if steals else None,
                      own=[timing_verdict(list(t.step_times)) for t in repeats] if kind == "tpot" else None,
                      probe_steps=([drift.step(m.index) for m in seq.measurements]
                                   if kind == "tpot" and drift is not None else None))
            t = EngineTiming.pooled(repeats)
            pr = predicted(kind, prompt, everything)
            out.append(EnginePoint(kind=kind, model=name, params=spec.params, tokens=prompt, predicted=pr.seconds,
                                   measured=t.tpot if kind == "tpot" else t.ttft, spread=j.agreement,
                                   verdict=j.verdict, uncalibrated=pr.uncalibrated, prediction=pr, ratios=ratios,
                                   reason=j.reason))
    return out


def _drift(spec: ModelSpec, calibration: Calibration, probes: list) -> Drift:
    """The decode step's weights term from the calibration and from each GEMV probe set run around the repeats."""
    def weights(cal):
        return weights_and_kv(spec, 1, cal)[0]
    return Drift(spec.name, weights(calibration), tuple(weights(calibration.with_probes(gemv=[p["gemv"]]))
                                                        for p in probes))
