"""``python -m course_lib.measure.validate``: does the latency model predict real timings on this machine?

Lessons: none

The command of the author benchmarks (:mod:`course_lib.measure.benchmarks`)::

    python -m course_lib.measure.validate                # TinyLM, full run (about 5 minutes on a 2-core CPU)
    python -m course_lib.measure.validate --fast         # tiny models: a smoke run
    python -m course_lib.measure.validate --threads 1 --clock process   # a busy shared machine: CPU seconds
    python -m course_lib.measure.validate --engine hf [--config path/config.json]... [--fast]   # transformers
    python -m course_lib.measure.validate --engine hf --device cuda [--dtype bf16] [--cache static]...  # on a GPU
    python -m course_lib.measure.validate --published    # held-out forecasts of published figures (times nothing)

``--published`` runs :func:`course_lib.core.forecast.published_main` (it times nothing). Otherwise it pins the
allocator first (:func:`course_lib.measure.allocator.pin`: a block of a given size then allocates alike in the
probes and in the model they predict), then runs :func:`course_lib.measure.benchmarks.tinylm_bench.run` or, with
``--engine hf``, :func:`course_lib.measure.benchmarks.engine_hf.run` (with ``--device cuda``, ``--dtype`` or
``--cache``: :func:`course_lib.measure.benchmarks.engine_gpu.run`, the engine in bf16 per K/V cache mode, CUDA graphs
included), and prints the report. Exit status: 0 when
every measured point was reliable; 3 (``NOISY_EXIT``) when any was noisy or contended (the report says how many
and why: its errors then mix the model's error with the machine's noise, and the last line does not judge the
model); 2 for bad arguments. How a point is judged and how to read the report: ``docs/VALIDATE.md``.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from course_lib.measure import allocator
from course_lib.measure.benchmarks.tinylm_bench import NOISY_EXIT, run
from course_lib.measure.device import default_device

__all__ = ["main", "NOISY_EXIT"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_lib.measure.validate",
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
    ap.add_argument("--dtype", default=None, choices=("bf16", "fp16", "fp32"),
                    help="with --engine hf: the weights' format of the GPU benchmark (default bf16 with --device cuda)")
    ap.add_argument("--cache", action="append", default=None, choices=("dynamic", "static", "graphs"),
                    help="with --engine hf on a GPU: a K/V cache mode of generate() (repeat for more; default all "
                         "three: dynamic, static, static with the decode step replayed as CUDA graphs)")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="with --engine hf on a GPU: also write the report's data as JSON to PATH")
    ap.add_argument("--published", action="store_true", help="held-out forecasts of published measurements, "
                    "floor and engine profiles (course_lib.core.forecast; times nothing)")
    a = ap.parse_args(argv)
    if a.published:
        from course_lib.core.forecast import published_main
        return published_main(progress=not a.no_progress)
    if a.engine != "hf" and (a.dtype is not None or a.cache is not None or a.json is not None):
        print("error: --dtype, --cache and --json belong to --engine hf (on a GPU: --device cuda)", file=sys.stderr)
        return 2
    allocator.pin()      # a block of a given size allocates alike in the probes and in the model they predict
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
    """``--engine hf``: the engine benchmark (:mod:`course_lib.measure.benchmarks.engine_hf`)."""
    if a.engine is None:
        print("error: --config needs --engine hf", file=sys.stderr)
        return 2
    if a.engine == "hf" and (a.device not in (None, "cpu") or a.dtype is not None or a.cache is not None):
        return _gpu_main(a)
    if a.json is not None:
        print("error: --json belongs to --engine hf on a GPU (--device cuda, or --dtype / --cache)", file=sys.stderr)
        return 2
    if a.device not in (None, "cpu") or a.clock != "wall" or a.runs is not None:
        print("error: --engine hf runs on the CPU with the wall clock; --device, --clock and --runs do not apply",
              file=sys.stderr)
        return 2
    if a.engine == "llama.cpp":     # GGUF files of four formats at 1 and all threads (benchmarks/engine_llamacpp.py)
        from course_lib.measure.benchmarks import engine_llamacpp
        return engine_llamacpp.main(a=a)
    try:
        from course_lib.measure.benchmarks import engine_hf
        rep = engine_hf.run(a.config, fast=a.fast, threads=a.threads, progress=not a.no_progress)
    except (ImportError, ValueError, TypeError) as e:   # transformers missing; a bad config or argument
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(rep.report())
    return engine_hf.NOISY_EXIT if rep.noisy_points else 0


def _gpu_main(a) -> int:
    """``--engine hf --device cuda`` (or ``--dtype`` / ``--cache``): :mod:`course_lib.measure.benchmarks.engine_gpu`."""
    if a.clock != "wall" or a.runs is not None or a.threads is not None:
        print("error: --engine hf on a GPU times with the wall clock; --clock, --runs and --threads do not apply",
              file=sys.stderr)
        return 2
    try:
        from course_lib.measure.benchmarks import engine_gpu
        rep = engine_gpu.run(a.config, device=a.device or default_device(), dtype=a.dtype or "bf16",
                             caches=a.cache, fast=a.fast, progress=not a.no_progress)
    except (ImportError, ValueError, TypeError) as e:   # transformers missing, no CUDA GPU, a bad config or argument
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(rep.report())
    if a.json:
        import json
        from pathlib import Path
        Path(a.json).write_text(json.dumps(rep.as_dict(), indent=1, allow_nan=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
