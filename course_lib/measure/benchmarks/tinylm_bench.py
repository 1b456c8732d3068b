"""Does the latency model predict TinyLM's timings? The benchmark of ``python -m course_lib.measure.validate``.

Lessons: none

The benchmark calibrates ONLY from microbenchmarks (:mod:`course_lib.measure.calibrate`: probes on random
tensors; the model under test, :class:`course_lib.measure.tinylm.TinyLM`, is held out), predicts TPOT and
TTFT (:mod:`course_lib.measure.predict`), then measures them on TinyLM models of realistic shape
(:mod:`course_lib.measure.model_timing`) and reports predicted vs measured::

    from course_lib.measure.benchmarks import tinylm_bench
    report = tinylm_bench.run(fast=True)                    # calibrate, predict, then measure
    print(report.report())                                  # what the command prints

Decode points are bracketed (:mod:`course_lib.measure.benchmarks.bracket`): interleaved rounds over the
contexts, each between two sets of GEMV probes of the model's shapes, each predicted from the probes around it,
and judged by the one rule :func:`~course_lib.measure.benchmarks.bracket.judge`. :func:`run` leaves the
process's allocator as it is (the command pins it). How to read the report: ``docs/VALIDATE.md``.
"""
from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass

from course_lib.core.quality import timing_verdict
from course_lib.core.validation import require_count, require_counts
from course_lib.measure.benchmarks.bracket import Bracketed, Drift, interleave, judge
from course_lib.measure.calibrate import (DECODE_CONTEXTS, FAST_CONTEXTS, FAST_PROMPTS, TTFT_PROMPTS, Calibration,
                                          calibrate, check_clock, dense_spec, load_average, model_specs, reprobe_gemv,
                                          weight_matrices)
from course_lib.measure.device import resolve_device
from course_lib.measure.model_timing import measure_decode_contexts, measure_prefill
from course_lib.measure.predict import Prediction, check_calibration, predict_tpot, predict_ttft
from course_lib.measure.timing import progress_bar, thread_count

__all__ = ["LAST_LINE_RE", "COLUMNS", "NOISY_EXIT", "DECODE_ROUNDS", "EXTRA_DECODE_ROUNDS", "Point",
           "ValidationReport", "Settings", "decode_points", "ttft_points", "run"]

#: the last line's format
LAST_LINE_RE = re.compile(r"^decode_geomean_abs_error=\d+\.\d+ decode_max_abs_error=\d+\.\d+$")


@dataclass(frozen=True)
class Point:
    """One row of the table: a prediction and its measurement."""

    kind: str
    model: str
    weights_bytes: float
    tokens: int
    predicted: float
    measured: float
    spread: float
    uncalibrated: float
    runs: int
    prediction: Prediction
    verdict: str = "reliable"        # the verdict of the measurement (decode: bracket.judge)
    reason: str = ""
    drift: Drift | None = None       # decode: the GEMV probes around the model's measurements
    rounds: int = 1                  # decode: how many interleaved rounds measured it (extra ones when noisy)

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured

    @property
    def uncalibrated_error(self) -> float:
        return (self.uncalibrated - self.measured) / self.measured


COLUMNS = ("phase", "model", "weights (GB)", "context/prompt", "predicted (ms)", "measured (ms)", "error %",
           "spread %", "verdict", "uncalibrated (ms)", "uncal. error %")
#: exit status of ``python -m course_lib.measure.validate`` when a measured point was not reliable (noisy or contended):
#: its errors then mix the model's error with the machine's noise (0: all reliable; 2: bad arguments)
NOISY_EXIT = 3


@dataclass
class ValidationReport:
    """Calibration, points, and the conditions the run had."""

    calibration: Calibration
    points: list
    load_after: tuple
    seconds: float

    @property
    def decode(self) -> list:
        return [p for p in self.points if p.kind == "tpot"]

    @property
    def ttft(self) -> list:
        return [p for p in self.points if p.kind == "ttft"]

    @property
    def decode_geomean_abs_error(self) -> float:
        errs = [max(abs(p.error), 1e-12) for p in self.decode]
        return statistics.geometric_mean(errs) if errs else math.nan

    @property
    def decode_max_abs_error(self) -> float:
        return max((abs(p.error) for p in self.decode), default=math.nan)

    @property
    def noisy_points(self) -> int:
        """Points whose measurement was not judged reliable (:func:`course_lib.core.quality.timing_verdict`)."""
        return sum(p.verdict != "reliable" for p in self.points)

    @property
    def noisy_decode_points(self) -> int:
        return sum(p.verdict != "reliable" for p in self.decode)

    def quality_line(self) -> str:
        """One sentence: were the measurements reliable, and if not, what the errors then mean."""
        if not self.noisy_points:
            return f"measurements: all {len(self.points)} points reliable"
        worst = [p for p in self.points if p.verdict != "reliable"]
        why = worst[0].reason or worst[0].verdict
        return (f"measurements: {self.noisy_points} of {len(self.points)} points not reliable "
                f"({self.noisy_decode_points} of {len(self.decode)} decode points; e.g. {worst[0].model} "
                f"{worst[0].kind.upper()} @ {worst[0].tokens}: {why}): their errors mix the model's error with "
                f"the machine's noise, so the last line does not judge the model; close other programs and run "
                f"again, or use --threads 1 --clock process (exit status {NOISY_EXIT})")

    def rounds_line(self) -> str:
        """Which decode points needed the extra rounds, and how they came out ('' when none did)."""
        extra = [p for p in self.decode if p.rounds > DECODE_ROUNDS]
        if not extra:
            return ""
        settled = sum(p.verdict == "reliable" for p in extra)
        which = ", ".join(f"{p.model} @ {p.tokens}" for p in extra)
        return (f"extra rounds: {len(extra)} of {len(self.decode)} decode points ({which}) were not reliable after "
                f"{DECODE_ROUNDS} rounds and were measured in {EXTRA_DECODE_ROUNDS} more; {settled} of them "
                f"then agreed (the median of {DECODE_ROUNDS + EXTRA_DECODE_ROUNDS} ratios, the highest and "
                f"lowest left out of the agreement)")

    def noisy_lines(self) -> list[str]:
        """The points that were not reliable, a line each with its reason (none when all were)."""
        lines = [f"  {p.model} {p.kind.upper()} @ {p.tokens}: {p.verdict}: {p.reason or p.verdict}"
                 for p in self.points if p.verdict != "reliable"]
        return ["points not reliable:", *lines] if lines else []

    def drift_lines(self) -> list[str]:
        """The bandwidth drift seen by the probes that bracketed each model's decode rounds (one line per model)."""
        seen = {p.model: p.drift for p in self.decode if p.drift is not None}
        if not seen:
            return []
        return ["bandwidth drift (each measurement is predicted from the GEMV probes run just before and after it):",
                *("  " + d.line() for d in seen.values())]

    def rows(self) -> list[tuple]:
        out = []
        for p in self.points:
            out.append(("TPOT" if p.kind == "tpot" else "TTFT", p.model, f"{p.weights_bytes / 1e9:.3f}",
                        str(p.tokens), f"{p.predicted * 1e3:.3f}", f"{p.measured * 1e3:.3f}", f"{p.error * 100:+.1f}",
                        f"{p.spread * 100:.1f}", p.verdict, f"{p.uncalibrated * 1e3:.3f}",
                        f"{p.uncalibrated_error * 100:+.1f}"))
        return out

    def table(self) -> str:
        rows = [COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
        def line(r):
            return "  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

        sep = "  ".join("-" * w for w in widths)
        return "\n".join([line(rows[0]), sep] + [line(r) for r in rows[1:]])

    def last_line(self) -> str:
        return (f"decode_geomean_abs_error={self.decode_geomean_abs_error:.3f} "
                f"decode_max_abs_error={self.decode_max_abs_error:.3f}")

    def report(self) -> str:
        load = ", ".join(f"{x:.2f}" for x in self.load_after) if self.load_after else "n/a"
        ttft = [abs(p.error) for p in self.ttft]
        unc = [abs(p.uncalibrated_error) for p in self.decode]
        lines = ["conditions: " + self.calibration.conditions() + f"; after={load}",
                 f"calibration ({self.calibration.seconds:.1f} s, probes only):",
                 *("  " + x for x in self.calibration.summary().splitlines()),
                 "", self.table(), "",
                 "decode terms: " + "; ".join(p.prediction.breakdown() for p in self.decode[:1]),
                 f"uncalibrated decode: geomean |error| {statistics.geometric_mean(unc) if unc else math.nan:.3f}, "
                 f"max {max(unc, default=math.nan):.3f}",
                 f"TTFT: max |error| {max(ttft, default=math.nan):.3f} (reported, not in the target)",
                 *self.drift_lines(),
                 *filter(None, [self.rounds_line()]),
                 f"total {self.seconds:.1f} s",
                 *self.noisy_lines(),
                 self.quality_line(),
                 self.last_line()]
        return "\n".join(lines)


@dataclass(frozen=True)
class Settings:
    """What every measurement of one run shares: the calibration, threads, clock, timed steps and repeats."""

    calibration: Calibration
    threads: int | None = None
    clock: str = "wall"
    steps: int = 8            # timed decode steps per decode measurement
    repeats: int = 5          # fresh prompts per TTFT point
    bar: object = None        # a progress bar (set_postfix_str, update), or None


class _NoBar:
    def set_postfix_str(self, s):
        pass

    def update(self, n=1):
        pass


def run(threads: int | None = None, fast: bool = False, device=None, models=None, contexts=None,
        prompt_lengths=None, ttft_model=None, runs: int | None = None, progress: bool = True,
        calibration: Calibration | None = None, clock: str = "wall") -> ValidationReport:
    """Calibrate from the probes, predict, then measure TinyLM and compare.

    Decode (:func:`decode_points`): every model × every context, median of ``runs`` timed steps (default 8),
    bracketed and judged by the one rule. TTFT (:func:`ttft_points`): ``ttft_model`` (default: the first model)
    at every prompt length, median of ``runs`` fresh prompts (default 5), judged on its own repeats. ``fast``:
    tiny models and contexts (seconds). ``clock``: see :func:`~course_lib.measure.calibrate.calibrate`; the same
    clock times the probes and the model.
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    t0 = time.perf_counter()
    dev = resolve_device(device)
    nthreads = thread_count(threads, dev)
    clock = check_clock(clock, dev, nthreads)
    specs = model_specs(models, fast)
    ctxs = require_counts("contexts", (FAST_CONTEXTS if fast else DECODE_CONTEXTS) if contexts is None else contexts)
    prompts = require_counts("prompt_lengths", (FAST_PROMPTS if fast else TTFT_PROMPTS) if prompt_lengths is None
                             else prompt_lengths)
    ttft_spec = list(specs.values())[0] if ttft_model is None else dense_spec(ttft_model)
    decode_runs = 8 if runs is None else require_count("runs", runs, minimum=5)
    if calibration is None:
        calibration = calibrate(nthreads, fast, models=specs, prompt_lengths=prompts, ttft_model=ttft_spec,
                                device=dev, progress=progress, clock=clock)
    else:
        check_calibration(calibration)
    from course_lib.measure.tinylm import TinyLM
    points = []
    with progress_bar(total=len(specs) * len(ctxs) + len(prompts), desc="measure TinyLM", unit="point",
                      enabled=progress) as bar:
        settings = Settings(calibration, nthreads, clock, decode_runs, 5 if runs is None else decode_runs, bar)
        for s in specs.values():
            lm = TinyLM(s, device=dev, max_seq=max(ctxs) + decode_runs + 1, seed=0)
            points += decode_points(lm, s, ctxs, settings)
            del lm
        lm = TinyLM(ttft_spec, device=dev, max_seq=max(prompts), seed=0)
        points += ttft_points(lm, ttft_spec, prompts, settings)
        del lm
    return ValidationReport(calibration, points, load_average(), time.perf_counter() - t0)


#: decode points are measured in this many interleaved rounds over the contexts, each between two sets of GEMV
#: probes and predicted from them; the point is the round with the median measured / predicted ratio
DECODE_ROUNDS = 3
#: a decode point that is not reliable after its :data:`DECODE_ROUNDS` rounds is measured in this many more (in an
#: interleaved sequence of its own, each round again between two probe sets) and judged on all five: the middle
#: three ratios must agree, so one round a burst of other work disturbed no longer decides the verdict
EXTRA_DECODE_ROUNDS = 2


def decode_points(lm, spec, contexts, settings: Settings) -> list[Point]:
    """The TPOT points of one model: probe, round, probe, round, ... over ``contexts`` (:data:`DECODE_ROUNDS`
    interleaved rounds); the points that are not reliable get :data:`EXTRA_DECODE_ROUNDS` more (not with a fast
    calibration, which keeps its own rates instead of re-probing)."""
    cal = settings.calibration
    bar = settings.bar or _NoBar()
    shapes = sorted(weight_matrices(spec))

    def probe():
        bar.set_postfix_str(f"{spec.name} GEMV probes")
        if cal.fast:     # a smoke run keeps the calibration's rates: re-probing would take most of its time
            return {sh: cal.gemv_bandwidth(*sh) for sh in shapes}
        return reprobe_gemv(cal, shapes)

    def measure(c):
        bar.set_postfix_str(f"{spec.name} TPOT @ {c} (round {len(seq.of(c)) + 1})")
        return measure_decode_contexts(lm, [c], steps=settings.steps, threads=settings.threads,
                                       clock=settings.clock)[0]

    seq = Bracketed(probe)
    seq.run(interleave(contexts, DECODE_ROUNDS), measure)
    points = {c: _decode_point(spec, c, seq, cal) for c in contexts}
    again = [c for c in contexts if points[c].verdict != "reliable"]
    if again and EXTRA_DECODE_ROUNDS and not cal.fast:
        seq.run(interleave(again, EXTRA_DECODE_ROUNDS), measure)
        points.update({c: _decode_point(spec, c, seq, cal) for c in again})
    bar.update(len(contexts))
    return [points[c] for c in contexts]


def _decode_point(spec, c, seq: Bracketed, cal: Calibration) -> Point:
    """The TPOT point of context ``c``: each round against the prediction from its own two probe sets (per-step
    time is linear in context: the mean of the first and last step's), judged by :func:`bracket.judge`."""
    c0 = min(m.item for m in seq.measurements)
    drift = Drift(spec.name, predict_tpot(spec, c0, cal).terms["weights"],
                  tuple(predict_tpot(spec, c0, cal.with_probes(gemv=[p])).terms["weights"] for p in seq.probes))
    rounds = seq.of(c)
    preds = []
    for m in rounds:
        around = cal.with_probes(gemv=[m.before, m.after])
        preds.append((predict_tpot(spec, m.value.first_context, around),
                      predict_tpot(spec, m.value.last_context, around)))
    ratios = [m.value.seconds / ((p1.seconds + p2.seconds) / 2) for m, (p1, p2) in zip(rounds, preds)]
    j = judge(ratios, own=[_judged(m.value, m.value.steps) for m in rounds],
              probe_steps=[drift.step(m.index) for m in rounds], what="interleaved rounds")
    t, (p1, p2) = rounds[j.kept].value, preds[j.kept]
    return Point(kind="tpot", model=spec.name, weights_bytes=spec.weight_bytes("fp32"), tokens=c,
                 predicted=(p1.seconds + p2.seconds) / 2, measured=t.seconds, spread=t.spread,
                 uncalibrated=(p1.uncalibrated + p2.uncalibrated) / 2, runs=t.steps, prediction=p1,
                 verdict=j.verdict, reason=j.reason, drift=None if cal.fast else drift, rounds=len(rounds))


def ttft_points(lm, spec, prompts, settings: Settings) -> list[Point]:
    """The TTFT points of one model: each prompt length timed on ``settings.repeats`` fresh prompts, judged on its
    own repeats (a prefill is not bracketed: reported, not in the target)."""
    bar = settings.bar or _NoBar()
    out = []
    for p in prompts:
        bar.set_postfix_str(f"{spec.name} TTFT @ {p}")
        t = measure_prefill(lm, [p], repeats=settings.repeats, threads=settings.threads, clock=settings.clock)[0]
        pr = predict_ttft(spec, p, settings.calibration)
        v = _judged(t, t.repeats)
        out.append(Point(kind="ttft", model=spec.name, weights_bytes=spec.weight_bytes("fp32"), tokens=p,
                         predicted=pr.seconds, measured=t.seconds, spread=t.spread, uncalibrated=pr.uncalibrated,
                         runs=t.repeats, prediction=pr, verdict=v.verdict, reason=v.reason))
        bar.update()
    return out


def _judged(timing, repeats: int):
    """The verdict of one measured timing, from its median, quartiles and number of repeats."""
    return timing_verdict({"seconds": timing.seconds, "q1_seconds": timing.q1_seconds,
                           "q3_seconds": timing.q3_seconds, "repeats": repeats})
