"""Does the latency model predict a real model's timings?  ``python -m course_lib.validate``

Lessons: 07

The benchmark calibrates ONLY from microbenchmarks (:mod:`course_lib.measure.calibrate`: probes on random
tensors; the model under test, :class:`course_lib.measure.tinylm.TinyLM`, is held out), predicts TPOT and
TTFT (:mod:`course_lib.measure.predict`), then measures them on TinyLM models of realistic shape
(:mod:`course_lib.measure.model_timing`) and prints predicted vs measured:

    python -m course_lib.validate                # full run (a few minutes on a 2-core CPU)
    python -m course_lib.validate --fast         # tiny models, a few seconds
    python -m course_lib.validate --threads 4 --device cpu
    python -m course_lib.validate --threads 1 --clock process   # a busy shared machine: CPU seconds
    python -m course_lib.validate --engine hf [--config path/config.json]... [--fast]   # transformers
                                                 # generate() (course_lib.measure.engines.hf)

Exit status: 0 when every measured point was reliable; 3 (:data:`NOISY_EXIT`) when any was noisy or
contended (the report says how many and why: its errors then mix the model's error with the machine's
noise, and the last line does not judge the model); 2 for bad arguments.

On a machine shared with other busy programs, wall-clock timings with several threads are
dominated by the others: every small parallel op waits for a thread the OS has descheduled. The
conditions line records the load average before and after; ``--clock process`` (single thread)
times only this process's CPU seconds, for both the probes and the model.

From Python (lesson 06)::

    from course_lib.measure import validate
    report = validate.run()                                 # calibrate, predict, then measure
    print(report.table()); print(report.last_line())

This module is the benchmark (:func:`run`, its report and the command line). For this release it also
offers the names the calibration and prediction had when they lived here (``validate.calibrate``,
``validate.predict_tpot``, ``validate.VALIDATION_MODELS`` ...): the same objects as in
:mod:`~course_lib.measure.calibrate`, :mod:`~course_lib.measure.predict` and :mod:`~course_lib.measure.probes`.
"""
from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Sequence

from course_lib.core.quality import THRESHOLDS, timing_verdict
from course_lib.core.validation import require_count, require_counts
from course_lib.measure.calibrate import (DECODE_CONTEXTS, FAST_CONTEXTS, FAST_MODELS, FAST_PROMPTS, TTFT_PROMPTS,
                                          VALIDATION_MODELS, Calibration, calibrate, check_clock, dense_spec,
                                          Drift, load_average, model_specs, reprobe_gemv,
                                          stream_between_ops, weight_matrices)
from course_lib.measure.device import default_device, resolve_device
from course_lib.measure.model_timing import measure_decode_contexts, measure_prefill
from course_lib.measure.predict import (DECODE_COUNT_CONTEXT, REUSE_PATHS, Prediction, check_calibration, count_ops,
                                        predict_tpot, predict_ttft)
from course_lib.measure.probes import measure_attention_products, measure_score_passes
from course_lib.measure.timing import progress_bar, thread_count

__all__ = ["LAST_LINE_RE", "COLUMNS", "NOISY_EXIT", "Point", "ValidationReport", "run", "main",
           # the names of the calibrated model, offered here as before the split (see the docstring)
           "VALIDATION_MODELS", "FAST_MODELS", "DECODE_CONTEXTS", "TTFT_PROMPTS", "FAST_CONTEXTS", "FAST_PROMPTS",
           "Calibration", "calibrate", "weight_matrices", "stream_between_ops", "DECODE_COUNT_CONTEXT",
           "REUSE_PATHS", "Prediction", "count_ops", "predict_tpot", "predict_ttft", "measure_score_passes",
           "measure_attention_products"]

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
    verdict: str = "reliable"        # course_lib.core.quality.timing_verdict of the measurement
    reason: str = ""
    drift: "Drift | None" = None     # decode: the GEMV probes around the model's measurements
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
#: exit status of ``python -m course_lib.validate`` when a measured point was not reliable (noisy or contended):
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


def run(threads: int | None = None, fast: bool = False, device=None, models=None, contexts=None,
        prompt_lengths=None, ttft_model=None, runs: int | None = None, progress: bool = True,
        calibration: Calibration | None = None, clock: str = "wall") -> ValidationReport:
    """Calibrate from the probes, predict, then measure TinyLM and compare.

    Decode: every model × every context (median of ``runs`` timed steps, default 8; spread = IQR /
    median), in :data:`DECODE_ROUNDS` interleaved rounds over the contexts. The GEMV probes of the
    model's shapes run again before the first measurement and after each one (:func:`reprobe_gemv`),
    and each measurement is predicted from the probes just before and after it: the machine's
    bandwidth drifts between the calibration and the measurement (by tens of % on a shared VM), and
    comparing the model with probes minutes older would count that drift as its error. The point is the
    round whose measured / predicted ratio is the median of the rounds'; ratios that disagree by more than
    the noisy spread make it noisy (a drift the probes followed moves a round's time and its prediction
    alike and leaves the ratio; one they missed does not). The report's drift lines show how far the
    probes moved; probes before and after the kept round that disagree by more than the noisy spread
    make it noisy. A decode point that is not reliable after :data:`DECODE_ROUNDS` rounds is measured in
    :data:`EXTRA_DECODE_ROUNDS` more (not in a ``fast`` run), and judged again on all of them: the median
    ratio, with the highest and lowest left out of the agreement (the report's "extra rounds" line).
    TTFT: ``ttft_model`` (default: the first model) at every prompt length (median of ``runs`` fresh
    prompts, default 5). ``fast``: tiny models and contexts (seconds). ``clock``: see :func:`calibrate`;
    the same clock times the probes and the model.
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
    ttft_runs = 5 if runs is None else decode_runs
    if calibration is None:
        calibration = calibrate(nthreads, fast, models=specs, prompt_lengths=prompts, ttft_model=ttft_spec,
                                device=dev, progress=progress, clock=clock)
    else:
        check_calibration(calibration)
    points = _measure(specs, ctxs, prompts, ttft_spec, decode_runs, ttft_runs, dev, nthreads, calibration,
                      progress, clock)
    return ValidationReport(calibration, points, load_average(), time.perf_counter() - t0)


#: decode points are measured in this many interleaved rounds over the contexts, each predicted from the GEMV probes
#: just before and after it; the point is the round with the median measured / predicted ratio, and ratios that
#: disagree by more than the noisy spread make the point noisy
DECODE_ROUNDS = 3
#: a decode point that is not reliable after its :data:`DECODE_ROUNDS` rounds is measured in this many more (once, in
#: an interleaved sequence of its own, each round again between two GEMV probe sets); with five rounds the point is
#: still the median ratio, and the one highest and one lowest ratio are left out of the agreement, so that one round a
#: burst of other work disturbed no longer decides the verdict while a drift that lasts still does
EXTRA_DECODE_ROUNDS = 2


def _median_round(values: Sequence[float], trim: int = 0) -> tuple[int, float]:
    """The index of the median of ``values`` (one per round), and how far they disagree: (max - min) / median,
    over the values left when the ``trim`` highest and ``trim`` lowest are set aside."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    if not 0 <= 2 * trim < len(order):
        raise ValueError(f"trim must leave at least one of the {len(order)} values, got {trim!r}")
    mid = order[len(order) // 2]
    kept = order[trim:len(order) - trim]
    return mid, (values[kept[-1]] - values[kept[0]]) / values[mid]


def _judged(timing, repeats: int):
    """The verdict of one measured point, from its median, quartiles and number of repeats."""
    return timing_verdict({"seconds": timing.seconds, "q1_seconds": timing.q1_seconds,
                           "q3_seconds": timing.q3_seconds, "repeats": repeats})


def _decode_points(lm, s, ctxs, steps, nthreads, clock, calibration, bar) -> list:
    """The TPOT points of one model: probe, round, probe, round, ... (see :func:`run`); the points that are not
    reliable after :data:`DECODE_ROUNDS` rounds get :data:`EXTRA_DECODE_ROUNDS` more."""
    shapes = sorted(weight_matrices(s))
    n = DECODE_ROUNDS * len(ctxs)
    def probe_again():
        # a --fast smoke run (tiny models that fit in the cache, seconds in all) keeps the calibration's rates:
        # re-probing would take most of its time
        if calibration.fast:
            return {sh: calibration.gemv_bandwidth(*sh) for sh in shapes}
        return reprobe_gemv(calibration, shapes)
    brackets = []
    rounds: dict[int, list] = {c: [] for c in ctxs}
    where: dict[int, list] = {c: [] for c in ctxs}     # context -> index of the probes just before it

    def measure(order, label):
        # probe, c1, probe, c2, probe, ...: each measurement between two sets of GEMV probes of the model's shapes
        # (a sequence that follows another starts from that one's last probes)
        if not brackets:
            bar.set_postfix_str(f"{s.name} GEMV probes")
            brackets.append(probe_again())
        for k, c in enumerate(order):
            bar.set_postfix_str(f"{s.name} TPOT @ {c} ({label} {k + 1}/{len(order)})")
            where[c].append(len(brackets) - 1)
            rounds[c].append(measure_decode_contexts(lm, [c], steps=steps, threads=nthreads, clock=clock)[0])
            bar.set_postfix_str(f"{s.name} GEMV probes ({label} {k + 1}/{len(order)})")
            brackets.append(probe_again())

    c0 = min(ctxs)
    def drift():
        return Drift(s.name, predict_tpot(s, c0, calibration).terms["weights"],
                     tuple(predict_tpot(s, c0, calibration.with_probes(gemv=[b])).terms["weights"] for b in brackets))

    # interleaved rounds c1 c2 c3 c1 c2 c3 ..., so that a drift of the machine lands on every context alike
    measure([ctxs[j % len(ctxs)] for j in range(n)], "round")
    moved = drift()
    points = {c: _decode_point(s, c, rounds[c], where[c], brackets, calibration, moved) for c in ctxs}
    again = [c for c in ctxs if points[c].verdict != "reliable"]
    if again and EXTRA_DECODE_ROUNDS and not calibration.fast:
        measure([c for _ in range(EXTRA_DECODE_ROUNDS) for c in again], "extra round")
        moved = drift()
        points.update({c: _decode_point(s, c, rounds[c], where[c], brackets, calibration, moved) for c in again})
    bar.update(len(ctxs))
    return [points[c] for c in ctxs]


def _decode_point(s, c, rounds, where, brackets, calibration, drift) -> Point:
    """The TPOT point of context ``c`` from its decode rounds, each against its own probes (``where``: the index
    of the probe set just before each round). ``drift``: the model's weights term from every probe set."""
    preds = []
    for t, j in zip(rounds, where):
        around = calibration.with_probes(gemv=brackets[j:j + 2])    # the probes just before and just after it
        preds.append((predict_tpot(s, t.first_context, around), predict_tpot(s, t.last_context, around)))
    # a round's comparison is its measured time against its own probes' prediction: a drift the probes
    # followed moves both, and only a disagreement of those ratios says the comparison is noisy
    ratios = [t.seconds / ((p1.seconds + p2.seconds) / 2) for t, (p1, p2) in zip(rounds, preds)]
    trim = max(0, len(rounds) - DECODE_ROUNDS) // 2
    r, agree = _median_round(ratios, trim)
    _, apart = _median_round([t.seconds for t in rounds], trim)
    t, j, (p1, p2) = rounds[r], where[r], preds[r]
    pred = (p1.seconds + p2.seconds) / 2  # per-step time is linear in context: the mean step
    unc = (p1.uncalibrated + p2.uncalibrated) / 2
    v = _judged(t, t.steps)
    verdict, reason = v.verdict, v.reason
    moved = drift.step(j)
    which = (f"{len(rounds)} interleaved rounds'" if not trim else
             f"{len(rounds)} interleaved rounds' middle {len(rounds) - 2 * trim}")
    if verdict == "reliable" and agree > THRESHOLDS.noisy_relative_iqr:
        verdict = "noisy"
        reason = (f"the {which} measured / predicted ratios disagree by {agree:.0%} "
                  f"(above {THRESHOLDS.noisy_relative_iqr:.0%}; their times by {apart:.0%}): the machine "
                  f"drifted in a way the GEMV probes around them did not follow")
    elif verdict == "reliable" and moved > THRESHOLDS.noisy_relative_iqr:
        verdict = "noisy"
        reason = (f"the GEMV probes just before and just after it disagree by {moved:.0%} (above "
                  f"{THRESHOLDS.noisy_relative_iqr:.0%}): the machine's bandwidth changed while it ran")
    return Point("tpot", s.name, s.weight_bytes("fp32"), c, pred, t.seconds, t.spread, unc, t.steps, p1, verdict,
                 reason, None if calibration.fast else drift, len(rounds))


def _measure(specs, ctxs, prompts, ttft_spec, decode_runs, ttft_runs, dev, nthreads, calibration, progress, clock):
    from course_lib.measure.tinylm import TinyLM
    steps = decode_runs
    points = []
    jobs = [("tpot", s) for s in specs.values()] + [("ttft", ttft_spec)]
    with progress_bar(total=len(specs) * len(ctxs) + len(prompts), desc="measure TinyLM", unit="point",
                      enabled=progress) as bar:
        for kind, s in jobs:
            need = max(ctxs) + steps + 1 if kind == "tpot" else max(prompts)
            lm = TinyLM(s, device=dev, max_seq=need, seed=0)
            wbytes = s.weight_bytes("fp32")
            if kind == "tpot":
                points += _decode_points(lm, s, ctxs, steps, nthreads, clock, calibration, bar)
            else:
                for p in prompts:
                    bar.set_postfix_str(f"{s.name} TTFT @ {p}")
                    t = measure_prefill(lm, [p], repeats=ttft_runs, threads=nthreads, clock=clock)[0]
                    pr = predict_ttft(s, p, calibration)
                    v = _judged(t, t.repeats)
                    points.append(Point("ttft", s.name, wbytes, p, pr.seconds, t.seconds, t.spread, pr.uncalibrated,
                                        t.repeats, pr, v.verdict, v.reason))
                    bar.update()
            del lm
    return points


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_lib.validate",
                                 description="Calibrate from microbenchmarks, then predict and measure TinyLM "
                                             "TPOT/TTFT. Last line: decode_geomean_abs_error=… "
                                             "decode_max_abs_error=…",
                                 epilog=f"exit status: 0 when every measured point was reliable, {NOISY_EXIT} when "
                                        f"any was noisy or contended (the report says how many and why), 2 for "
                                        f"bad arguments")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all physical cores)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--fast", action="store_true", help="tiny models and contexts: a few seconds")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per point (>= 5)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    ap.add_argument("--clock", default="wall", help="wall (default) or process: CPU seconds of this process, "
                                                    "for a busy shared machine; needs --threads 1 --device cpu")
    ap.add_argument("--engine", choices=("hf", "llama.cpp"), default=None,
                    help="hf: predict and measure Hugging Face transformers generate() instead of TinyLM "
                         "(last line: engine_tpot_geomean_abs_error=... engine_tpot_max_abs_error=... "
                         "engine_ttft_max_abs_error=...; exit status 3 when a point was not reliable)")
    ap.add_argument("--config", action="append", default=None, metavar="PATH",
                    help="with --engine hf: a config.json (or a name of course_lib/data/engine_configs.json); "
                         "repeat to add more (default: GPT-2, Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-1B); with --engine "
                         "llama.cpp the same, default Llama-3.2-1B and Llama-3.2-3B")
    a = ap.parse_args(argv)
    if a.engine is not None or a.config:
        return _engine_main(a)
    try:
        rep = run(threads=a.threads, fast=a.fast, device=a.device or default_device(), runs=a.runs,
                  progress=not a.no_progress, clock=a.clock)
    except (ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(rep.report())
    return NOISY_EXIT if rep.noisy_points else 0


def _engine_main(a) -> int:
    """``--engine hf``: the engine benchmark of :mod:`course_lib.measure.engines.hf`."""
    if a.engine is None:
        print("error: --config needs --engine hf", file=sys.stderr)
        return 2
    if a.device not in (None, "cpu") or a.clock != "wall" or a.runs is not None:
        print("error: --engine hf runs on the CPU with the wall clock; --device, --clock and --runs do not apply",
              file=sys.stderr)
        return 2
    if a.engine == "llama.cpp":     # GGUF files of four formats at 1 and all threads (engines/llamacpp.py)
        from course_lib.measure.engines import llamacpp
        return llamacpp.main(a=a)
    from course_lib.measure.engines import hf
    try:
        rep = hf.run(a.config, fast=a.fast, threads=a.threads, progress=not a.no_progress)
    except (ImportError, ValueError, TypeError) as e:   # transformers missing; a bad config or argument
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(rep.report())
    return hf.NOISY_EXIT if rep.noisy_points else 0


if __name__ == "__main__":
    raise SystemExit(main())
