#!/usr/bin/env python3
"""Peak memory of each lesson's kernel, run as a learner runs it (``COURSE_FAST=0``).

    python benchmarks/lesson_memory.py                                  # every notebook in notebooks/
    python benchmarks/lesson_memory.py notebooks/06_prefill_vs_decode.ipynb
    python benchmarks/lesson_memory.py --fast                           # COURSE_FAST=1 (the tests' sizes)
    python benchmarks/lesson_memory.py --limit-gib 1.5                  # exit 1 when a kernel peaks above it
    python benchmarks/lesson_memory.py --cells 5 notebooks/06_*.ipynb   # and the 5 cells that raised the peak most

Each notebook runs top to bottom in a fresh kernel of this interpreter with the kernel environment of
``course_lib.authoring.kernel`` (the one ``make notebooks --full`` stores the outputs with), its folder as
working directory, one notebook at a time. The figure reported is the kernel's peak resident set size:
the kernel's own high-water mark (``VmHWM`` in ``/proc/<pid>/status``, exact on Linux, read just before
the kernel is shut down) plus the largest resident size its child processes were seen with (sampled
every 50 ms; lessons rarely start any). Elsewhere than Linux the sampled maximum of the kernel stands in
for ``VmHWM``. The Jupyter server a learner also runs (about 100-150 MiB) is not counted.

``--cells N`` adds, under each row, the N code cells after which the kernel's ``VmHWM`` had grown the most
(where to look when a lesson is over budget). The output is a table (one row per notebook), then one summary
line: the largest peak, its lesson, and how many kernels stay within ``--limit-gib`` (default 1.5 GiB: Binder
gives 2 GB to the kernel and the server together). Timings printed beside the peaks are wall times, on
whatever else the machine runs.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import nbformat  # noqa: E402
import psutil  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from course_lib.authoring import kernel  # noqa: E402

GIB = 1024**3
MIB = 1024**2


def _vm_hwm(pid: int) -> int | None:
    """Peak resident set size of ``pid`` in bytes (Linux ``VmHWM``), None where unavailable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class PeakSampler(threading.Thread):
    """Samples the resident size of a process and of its children until stopped."""

    def __init__(self, pid: int, period_s: float = 0.05):
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.period_s = period_s
        self.peak_self = 0
        self.peak_children = 0
        self.peak_total = 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            try:
                own = self.proc.memory_info().rss
                kids = 0
                for child in self.proc.children(recursive=True):
                    try:
                        kids += child.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                return
            self.peak_self = max(self.peak_self, own)
            self.peak_children = max(self.peak_children, kids)
            self.peak_total = max(self.peak_total, own + kids)
            self._stop_event.wait(self.period_s)

    def stop(self):
        self._stop_event.set()
        self.join(timeout=5)


def measure(path: Path, *, fast: bool, timeout: int) -> dict:
    """Run one notebook; return its peak memory figures and wall time."""
    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_manager_class=kernel.CurrentEnvKernelManager,
                            resources={"metadata": {"path": str(path.parent)}},
                            startup_timeout=kernel.STARTUP_TIMEOUT_S)
    out = {"notebook": path.name, "ok": True, "error": "", "growth": []}
    t0 = time.perf_counter()
    sampler = None
    with client.setup_kernel(env=kernel.launch_env(fast=fast), stderr=subprocess.DEVNULL):
        pid = client.km.provisioner.process.pid
        sampler = PeakSampler(pid)
        sampler.start()
        try:
            before = _vm_hwm(pid) or 0
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
                if cell.cell_type == "code":
                    now = _vm_hwm(pid) or 0
                    if now > before:
                        first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
                        out["growth"].append((now - before, index, first[:70]))
                    before = max(before, now)
        except Exception as exc:  # a failing cell still has a peak worth reporting
            out["ok"] = False
            out["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        finally:
            hwm = _vm_hwm(pid)
            sampler.stop()
    out["wall_s"] = time.perf_counter() - t0
    out["kernel_peak"] = hwm if hwm is not None else sampler.peak_self
    out["children_peak"] = sampler.peak_children
    out["peak"] = out["kernel_peak"] + out["children_peak"]
    out["sampled_peak"] = sampler.peak_total
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run (default: notebooks/*.ipynb)")
    p.add_argument("--fast", action="store_true", help="COURSE_FAST=1 (the tests' sizes) instead of learner sizes")
    p.add_argument("--timeout", type=int, default=kernel.CELL_TIMEOUT_S, help="seconds per cell")
    p.add_argument("--limit-gib", type=float, default=1.5, help="the per-kernel target in GiB (default 1.5)")
    p.add_argument("--cells", type=int, default=0, metavar="N",
                   help="also list, per notebook, the N cells that raised the kernel's peak the most")
    args = p.parse_args(argv)
    if args.limit_gib <= 0:
        p.error(f"--limit-gib must be a positive number of GiB, got {args.limit_gib}")
    paths = args.notebooks or sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        if not path.is_file():
            p.error(f"notebook {path} does not exist")
    mode = "COURSE_FAST=1" if args.fast else "learner mode (COURSE_FAST=0)"
    print(f"# peak kernel memory, {mode}, {psutil.cpu_count()} logical CPUs, "
          f"{psutil.virtual_memory().total / GIB:.1f} GiB RAM")
    print(f"{'notebook':36s} {'peak GiB':>9s} {'kernel MiB':>11s} {'children MiB':>13s} {'wall s':>7s}  status")
    rows = []
    for path in paths:
        r = measure(path.resolve(), fast=args.fast, timeout=args.timeout)
        rows.append(r)
        status = "ok" if r["ok"] else f"FAILED {r['error']}"
        over = "" if r["peak"] <= args.limit_gib * GIB else f"  over {args.limit_gib:g} GiB"
        print(f"{r['notebook']:36s} {r['peak'] / GIB:9.2f} {r['kernel_peak'] / MIB:11.0f} "
              f"{r['children_peak'] / MIB:13.0f} {r['wall_s']:7.1f}  {status}{over}", flush=True)
        for grew, index, first in sorted(r["growth"], reverse=True)[:args.cells]:
            print(f"    cell {index:3d} raised the peak by {grew / MIB:6.0f} MiB: {first}", flush=True)
    worst = max(rows, key=lambda r: r["peak"])
    within = sum(r["peak"] <= args.limit_gib * GIB for r in rows)
    failed = sum(not r["ok"] for r in rows)
    print(f"summary: largest peak {worst['peak'] / GIB:.2f} GiB ({worst['notebook']}); "
          f"{within}/{len(rows)} kernels within {args.limit_gib:g} GiB; {failed} failed")
    return 0 if within == len(rows) and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
