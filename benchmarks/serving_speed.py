#!/usr/bin/env python3
"""How long the serving simulator takes: requests, scheduler steps and wall time per configuration.

    python benchmarks/serving_speed.py            # the table, then one summary line
    python benchmarks/serving_speed.py --quick    # the 1,000-request rows only

Every row is Llama-3-8B on an H100 SXM with lesson 09's efficiencies (0.747 compute, 0.546
bandwidth). "seq-steps" counts the scheduler's inner work (one per decoded token, one per prompt
chunk): the wall time grows with it, not with the number of requests. The last line is issue 16's
figure of merit: 10,000 requests, continuous batching with chunked prefill, 10 requests/s (the
server is never idle; mean batch about 35). Wall and CPU time are both shown: on a shared machine
the wall time also counts other processes.
The step costs are precomputed linear coefficients (``course_lib.core.serving.StepCost``), so a
step costs a few multiplications whatever its batch.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib.core.estimator import estimate
from course_lib.core.serving import continuous_batching_plan, simulate

EFF = dict(compute_efficiency=0.747, bandwidth_efficiency=0.546)
M, H = "llama-3-8b", "h100-sxm"

#: one request of 256 + 16 tokens alone: the M/D/1 rows run at half its service rate
MD1_RATE = 0.5 / estimate(M, H, 256, 16, **EFF).total

#: (label, requests, rate/s, prompt, output, keyword arguments)
ROWS = [
    ("M/D/1 (max_batch 1), rho 0.5", 1_000, MD1_RATE, 256, 16, dict(max_batch=1)),
    ("chunked, 10 req/s", 1_000, 10.0, (256, 2048), (32, 512), {}),
    ("no chunking, 10 req/s", 1_000, 10.0, (256, 2048), (32, 512), dict(chunked_prefill=False)),
    ("chunked, 40 req/s, small KV pool", 1_000, 40.0, (256, 2048), (32, 512), dict(kv_memory_fraction=0.3)),
    ("M/D/1 (max_batch 1), rho 0.5", 10_000, MD1_RATE, 256, 16, dict(max_batch=1)),
    ("chunked, 10 req/s", 10_000, 10.0, (256, 2048), (32, 512), {}),
    ("no chunking, 10 req/s", 10_000, 10.0, (256, 2048), (32, 512), dict(chunked_prefill=False)),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="only the 1,000-request rows")
    args = p.parse_args(argv)
    rows = [r for r in ROWS if not args.quick or r[1] <= 1_000]
    print(f"{'configuration':34s} {'requests':>9s} {'steps':>9s} {'seq-steps':>10s} {'wall s':>7s} {'CPU s':>6s} "
          f"{'us/seq-step':>11s} {'p99 TTFT':>10s} {'p99 TPOT':>9s} {'preempt':>8s}")
    headline = None
    for label, n, rate, prompt, output, kw in rows:
        t0, c0 = time.perf_counter(), time.process_time()
        r = simulate(M, H, rate, prompt, output, n, 0, **EFF, **kw)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        work = r.sequence_steps
        s = r.summary()
        print(f"{label:34s} {n:9,d} {r.steps:9,d} {work:10,d} {wall:7.2f} {cpu:6.2f} {1e6 * wall / work:11.2f} "
              f"{s['ttft_p99'] * 1e3:8.1f}ms {s['tpot_p99'] * 1e3:7.1f}ms {r.preemptions:8,d}")
        if n == 10_000 and label.startswith("chunked"):
            headline = (n, wall, cpu, r.steps, s)
    t0 = time.perf_counter()
    plan = continuous_batching_plan(M, H, 1000, 2048, 300, tpot_budget=0.05, **EFF)
    t_plan = time.perf_counter() - t0
    print(f"continuous_batching_plan (1,000 users, fp16): {plan.gpus} GPUs, {t_plan * 1e3:.1f} ms")
    if headline:
        n, wall, cpu, steps, s = headline
        print(f"SUMMARY: {n:,} requests (chunked prefill, 10 req/s, mean batch {s['mean_batch']:.0f}, "
              f"{steps:,} steps) simulated in {wall:.2f} s wall, {cpu:.2f} s CPU on this machine")
    else:
        print("SUMMARY: --quick: the 10,000-request rows were skipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
