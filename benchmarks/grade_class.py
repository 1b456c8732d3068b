#!/usr/bin/env python3
"""Time the course grader on a class: N copies of a solution notebook, graded ``-j J`` at a time in the sandbox.

    python benchmarks/grade_class.py                          # 30 copies of solutions/01_units.ipynb, -j 2
    python benchmarks/grade_class.py -n 10 -j 1 solutions/03_kv_cache.ipynb
    python benchmarks/grade_class.py --insecure               # without the sandbox (its cost, by difference)

Each copy is ``submissions/student-NN/<notebook>`` in a temporary folder, graded as
``python -m course_lib.authoring.grade submissions/*/<notebook> -j J`` grades it (this process calls
:func:`course_lib.authoring.grade.grade_notebooks`): a fresh kernel per notebook in bubblewrap, the answers
judged in the grader, function answers in a fresh sandboxed interpreter.  The output is one row per notebook
(its status, score, and wall time from the class's start to its result), then one summary line: the class's
wall time, seconds per notebook, the load average, and how many were graded ``ok`` with full marks.
Wall times are of whatever else the machine runs: read them with the load average.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from course_lib.authoring import grade, sandbox  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", default=str(REPO / "solutions" / "01_units.ipynb"))
    parser.add_argument("-n", type=int, default=30, help="notebooks in the class (default 30)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="notebooks at a time (default 2)")
    parser.add_argument("--insecure", action="store_true", help="grade without the sandbox")
    args = parser.parse_args(argv)
    if args.n < 1 or args.jobs < 1:
        parser.error("-n and -j must be >= 1")
    source = Path(args.notebook)
    if not source.is_file():
        parser.error(f"no such notebook: {source}")
    isolation = sandbox.resolve_isolation(sandbox.INSECURE if args.insecure else None)
    with tempfile.TemporaryDirectory(prefix="grade-class-") as tmp:
        paths = []
        for i in range(args.n):
            folder = Path(tmp) / "submissions" / f"student-{i + 1:02d}"
            folder.mkdir(parents=True)
            shutil.copy(source, folder / source.name)
            paths.append(folder / source.name)
        t0 = time.perf_counter()
        grades = grade.grade_notebooks(paths, jobs=args.jobs, isolation=isolation)
        wall = time.perf_counter() - t0
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{'student':<12} {'status':<9} {'score':>7}")
    for g in grades:
        print(f"{g.student or '?':<12} {g.status:<9} {g.score:>3g}/{g.points:g}")
    full = sum(g.status == "ok" and g.score == g.points for g in grades)
    print(f"class of {args.n} ({source.name}, -j {args.jobs}, {isolation} mode): {wall:.0f} s wall, "
          f"{wall / args.n:.1f} s per notebook, load average {load:.1f} on {os.cpu_count()} cores; "
          f"{full}/{args.n} ok with full marks")
    return 0 if full == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
