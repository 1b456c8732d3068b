#!/usr/bin/env python3
"""Print this machine's copy bandwidth and GEMV bandwidth by matrix size, and their ratio.

    python benchmarks/gemv_table.py                  # CUDA GPU when present, else the CPU
    python benchmarks/gemv_table.py --device cpu --dtype fp32 --threads 4
    python benchmarks/gemv_table.py --no-rotate      # small matrices served from cache

The copy counts read + write (2 × buffer bytes). GEMV bytes are the matrix plus both vectors. The
sweep always includes a matrix of at least 4 × the last-level cache, the size a decode step's weight
matrices have. Rotation (default) cycles through weight buffers totalling > 4 × the LLC.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib.core.units import format_bytes
from course_lib.measure import device as dev_info
from course_lib.measure import probes


def sizes_for(llc: int | None, esize: int, device: str) -> list[tuple[int, int]]:
    """Powers of two from 256, up to the first square matrix of >= 4 × LLC (and 8192 at least)."""
    target = 4 * (llc or dev_info.FALLBACK_LLC_BYTES)
    big = 2 ** math.ceil(math.log2(math.sqrt(target / esize)))
    top = max(big, 8192 if device == "cpu" else 16384)
    sizes, n = [], 256
    while n <= top:
        sizes.append((n, n))
        n *= 2
    return sizes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="fp32, fp16 or bf16 (default: fp16 on a GPU, fp32 on a CPU)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--no-rotate", action="store_true", help="reuse one weight buffer (cache effect)")
    a = p.parse_args(argv)
    device = a.device or dev_info.default_device()
    dtype = a.dtype or ("fp16" if device.startswith("cuda") else "fp32")
    esize = 2 if dtype in ("fp16", "bf16") else 4
    llc = dev_info.last_level_cache_bytes(device)
    copy = probes.measure_copy_bandwidth(threads=a.threads, device=device, repeats=a.repeats)
    table = probes.measure_gemv(sizes_for(llc, esize, device.split(":")[0]), [dtype], repeats=a.repeats,
                                rotate=not a.no_rotate, threads=a.threads, device=device)
    print(f"device: {dev_info.device_name(device)}; threads: {copy.threads or '-'}; "
          f"last-level cache: {format_bytes(llc, system='iec') if llc else 'unknown'}")
    print(f"copy (read+write counted, {format_bytes(copy.buffer_bytes, system='iec')} buffer): "
          f"{copy.gb_per_s:.2f} GB/s  (IQR ±{copy.spread / 2:.1%})")
    print()
    print(f"{'m × k':>13} {'matrix':>10} {'× LLC':>7} {'µs/call':>10} {'GB/s':>9} {'IQR':>7} {'GEMV/copy':>9}")
    for r in table:
        x_llc = f"{r.matrix_bytes / llc:.2f}" if llc else "?"
        print(f"{r.m:>6} × {r.k:<5} {format_bytes(r.matrix_bytes, system='iec'):>10} {x_llc:>7} "
              f"{r.seconds * 1e6:>10.1f} {r.gb_per_s:>9.2f} {f'±{r.spread / 2:.0%}':>7} "
              f"{r.bandwidth / copy.bandwidth:>9.2f}")
    big = [r for r in table if llc and r.matrix_bytes >= 4 * llc]
    if big:
        r = big[0]
        print(f"\nfirst matrix >= 4 × LLC ({r.m} × {r.k}): GEMV {r.gb_per_s:.2f} GB/s = "
              f"{r.bandwidth / copy.bandwidth:.2f} × the copy bandwidth")
    return 0


if __name__ == "__main__":
    sys.exit(main())
