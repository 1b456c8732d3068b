"""Re-execute course notebooks top to bottom and save them in canonical form (``make notebooks``).

Lessons: none

    python -m course_lib.authoring.run_notebooks                 # notebooks/, solutions/ and app/
    python -m course_lib.authoring.run_notebooks notebooks/03_kv_cache.ipynb solutions/
    python -m course_lib.authoring.run_notebooks --timeout 900 notebooks/05_gemv_timing.ipynb
    python -m course_lib.authoring.run_notebooks --full notebooks/07_first_token_optimisation.ipynb

A notebook goes through two small nbconvert preprocessors, composed in :func:`run`:

1. :class:`ExecuteInCourseKernel` runs it in a fresh kernel of *this* Python environment with the
   kernel environment of :mod:`course_lib.authoring.kernel` (the one nbval's kernels get in
   ``make test``): ``COURSE_FAST=1`` and the inline matplotlib backend, the notebook's folder as
   working directory, so the stored outputs are what nbval regenerates. ``--full``
   (``make notebooks FULL=1``) runs the measurement lessons at their learner sizes instead
   (``COURSE_FAST=0``): their measured cells are tagged ``nbval-ignore-output``, so nbval still
   compares everything else, and readers see the measurements a learner gets;
2. :class:`Canonicalize` brings it into canonical form (:mod:`course_lib.authoring.nb_canonical`):
   images kept, no widget state, execution counts 1..n.

A notebook whose execution fails is left untouched on disk; the failing cell is reported and the
exit status is 1 after the remaining notebooks have run.

Serves no lesson: an authoring tool.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from nbconvert.preprocessors import Preprocessor
from traitlets import Any, Bool, Integer

from course_lib.authoring import kernel
from course_lib.authoring.nb_canonical import canonicalize, write_canonical

__all__ = ["ExecuteInCourseKernel", "Canonicalize", "find_notebooks", "run", "execute", "main"]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIRS = ("notebooks", "solutions", "app")


class ExecuteInCourseKernel(Preprocessor):
    """Execute every code cell in a kernel of this interpreter with :func:`kernel.kernel_env`.

    ``resources["metadata"]["path"]`` is the working directory. Raises nbclient's
    ``CellExecutionError`` / ``CellTimeoutError`` when a cell fails.
    """

    timeout = Integer(kernel.CELL_TIMEOUT_S, help="seconds allowed per cell").tag(config=True)
    fast = Bool(True, help="COURSE_FAST=1 (the tests' sizes); False: learner-size measurements").tag(config=True)
    on_cell_executed = Any(None, allow_none=True, help="nbclient's hook, called after each cell")

    def preprocess(self, nb, resources=None):
        resources = resources if resources is not None else {}
        client = NotebookClient(
            nb,
            timeout=self.timeout,
            startup_timeout=kernel.STARTUP_TIMEOUT_S,
            kernel_manager_class=kernel.CurrentEnvKernelManager,
            kernel_name=kernel.KERNEL_NAME,
            resources=resources,
            record_timing=False,
            store_widget_state=False,
            on_cell_executed=self.on_cell_executed,
        )
        # stderr: the kernel's own log chatter, not cell output
        client.execute(env=kernel.launch_env(fast=self.fast), stderr=subprocess.DEVNULL)
        return nb, resources


class Canonicalize(Preprocessor):
    """The canonical form of :func:`course_lib.authoring.nb_canonical.canonicalize`."""

    def preprocess(self, nb, resources=None):
        return canonicalize(nb), resources


def run(nb, path: Path, steps) -> nbformat.NotebookNode:
    """Apply the preprocessors ``steps`` in order to ``nb`` (working directory: ``path``'s folder)."""
    resources = {"metadata": {"path": str(Path(path).parent.resolve())}}
    for step in steps:
        nb, resources = step.preprocess(nb, resources)
    return nb


def find_notebooks(paths: list[Path]) -> list[Path]:
    """Expand folders into their ``*.ipynb`` files (sorted); keep files as given; no duplicates."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.ipynb") if not p.name.startswith(".")))
        elif path.suffix == ".ipynb" and path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"error: {path} is neither a notebook (.ipynb) nor a folder")
    unique: list[Path] = []
    for path in found:
        if path.resolve() not in {p.resolve() for p in unique}:
            unique.append(path)
    return unique


def execute(path: Path, timeout: int = kernel.CELL_TIMEOUT_S, *, fast: bool = True,
            position: int = 1) -> tuple[bool, str]:
    """Run one notebook; on success write it back canonically. Returns (ok, message)."""
    from tqdm.auto import tqdm

    nb = nbformat.read(path, as_version=4)
    n_code = sum(1 for c in nb.cells if c.cell_type == "code")
    bar = tqdm(total=n_code, desc=f"  {path.name}", unit="cell", leave=False, position=position)
    steps = [
        ExecuteInCourseKernel(timeout=timeout, fast=fast, on_cell_executed=lambda **_: bar.update(1)),
        Canonicalize(),
    ]
    try:
        nb = run(nb, path, steps)
    except CellTimeoutError as exc:
        return False, f"timed out after {timeout} s per cell: {exc}".strip()
    except CellExecutionError as exc:
        return False, str(exc)
    finally:
        bar.close()
    changed = write_canonical(nb, path)
    return True, "updated" if changed else "unchanged"


def main(argv: list[str] | None = None) -> int:
    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="python -m course_lib.authoring.run_notebooks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path,
                        help="notebooks or folders (default: notebooks/, solutions/ and app/)")
    parser.add_argument("--timeout", type=int, default=kernel.CELL_TIMEOUT_S,
                        help=f"seconds allowed per cell (default {kernel.CELL_TIMEOUT_S})")
    parser.add_argument("--full", action="store_true",
                        help="learner-size measurements (COURSE_FAST=0) instead of the test suite's fast mode")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--record", type=Path, metavar="DIR",
                       help="also record every lesson measurement into DIR (course_lib.measure.record), so that "
                            "the stored outputs and the recording come from the same run")
    where.add_argument("--replay", type=Path, metavar="DIR",
                       help="take the lessons' measurements from the recording in DIR instead of measuring")
    args = parser.parse_args(argv)
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    if args.replay is not None and not args.replay.is_dir():
        parser.error(f"--replay: {args.replay} is not a folder of recordings")
    if args.record is not None or args.replay is not None:
        from course_lib.measure.record import ENV
        kind, folder = ("record", args.record) if args.record is not None else ("replay", args.replay)
        os.environ[ENV] = f"{kind}:{folder.resolve()}"     # the kernels inherit it (kernel.launch_env)

    paths = args.paths or [REPO_ROOT / d for d in DEFAULT_DIRS if (REPO_ROOT / d).is_dir()]
    notebooks = find_notebooks(paths)
    if not notebooks:
        print("no notebooks found in: " + ", ".join(map(str, paths)))
        return 0

    failures: list[tuple[Path, str]] = []
    start = time.perf_counter()
    with tqdm(notebooks, desc="notebooks", unit="nb", position=0) as outer:
        for path in outer:
            outer.set_postfix_str(path.name)
            t0 = time.perf_counter()
            ok, message = execute(path, args.timeout, fast=not args.full)
            took = time.perf_counter() - t0
            shown = _relative(path)
            if ok:
                tqdm.write(f"ok      {shown}  ({took:.1f} s, {message})")
            else:
                failures.append((path, message))
                tqdm.write(f"FAILED  {shown}  ({took:.1f} s) -- left unchanged on disk")
    print(f"{len(notebooks) - len(failures)}/{len(notebooks)} notebooks executed "
          f"in {time.perf_counter() - start:.1f} s")
    for path, message in failures:
        print(f"\n=== {_relative(path)} ===\n{message}", file=sys.stderr)
    return 1 if failures else 0


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
