#!/usr/bin/env python3
"""Re-execute course notebooks top to bottom and save them in canonical form (``make notebooks``).

    python tools/run_notebooks.py                      # every notebook in notebooks/, solutions/ and app/
    python tools/run_notebooks.py notebooks/03_kv_cache.ipynb solutions/
    python tools/run_notebooks.py --timeout 900 notebooks/05_gemv_timing.ipynb
    python tools/run_notebooks.py --full notebooks/07_first_token_optimisation.ipynb

Each notebook runs in a fresh kernel of *this* Python environment (the same kernel nbval uses in
``make test`` with ``--nbval-current-env``), with the notebook's folder as working directory and
the same environment as the test suite: ``COURSE_FAST=1`` and the inline matplotlib backend, so
the stored outputs are what nbval regenerates. ``--full`` (``make notebooks FULL=1``) runs the
measurement lessons at their learner sizes instead (``COURSE_FAST=0``): their measured cells are
tagged ``nbval-ignore-output``, so nbval still compares everything else, and readers see the
measurements a learner gets rather than the test-mode miniatures. Outputs are saved with images, without widget
state, with execution counts 1..n (see ``tools/nb_canonical.py``).

A notebook whose execution fails is left untouched on disk; the failing cell is reported and the
exit status is 1 after the remaining notebooks have run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import ipykernel.kernelspec
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from tqdm.auto import tqdm
from traitlets import default

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nb_canonical import write_canonical  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIRS = ("notebooks", "solutions", "app")

#: What every kernel gets on top of the inherited environment (kept in step with tests/conftest.py).
KERNEL_ENV = {
    "COURSE_FAST": "1",
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
}


class CurrentEnvKernelSpecManager(KernelSpecManager):
    """Always hands out the ipykernel of the running interpreter, whatever the notebook names.

    A user-level ``python3`` kernelspec pointing at another Python must not decide which
    libraries the stored outputs come from.
    """

    def get_kernel_spec(self, kernel_name):
        spec = self.kernel_spec_class(
            resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict()
        )
        spec.env = {**dict(spec.env or {}), **KERNEL_ENV}
        return spec


class CurrentEnvKernelManager(KernelManager):
    """A KernelManager that starts the kernel of :class:`CurrentEnvKernelSpecManager`."""

    @default("kernel_spec_manager")
    def _default_current_env_ksm(self):
        return CurrentEnvKernelSpecManager(data_dir=self.data_dir)


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


def execute(path: Path, timeout: int, position: int = 1) -> tuple[bool, str]:
    """Run one notebook; on success write it back canonically. Returns (ok, message)."""
    nb = nbformat.read(path, as_version=4)
    n_code = sum(1 for c in nb.cells if c.cell_type == "code")
    bar = tqdm(total=n_code, desc=f"  {path.name}", unit="cell", leave=False, position=position)

    def on_cell_executed(cell, cell_index, execute_reply):  # nbclient hook
        bar.update(1)

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_manager_class=CurrentEnvKernelManager,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent.resolve())}},
        record_timing=False,
        store_widget_state=False,
        on_cell_executed=on_cell_executed,
    )
    try:
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's own log chatter, not cell output
    except CellTimeoutError as exc:
        return False, f"timed out after {timeout} s per cell: {exc}".strip()
    except CellExecutionError as exc:
        return False, str(exc)
    finally:
        bar.close()
    changed = write_canonical(nb, path)
    return True, "updated" if changed else "unchanged"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path,
                        help="notebooks or folders (default: notebooks/, solutions/ and app/)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    parser.add_argument("--full", action="store_true",
                        help="learner-size measurements (COURSE_FAST=0) instead of the test suite's fast mode")
    args = parser.parse_args(argv)
    if args.full:
        KERNEL_ENV["COURSE_FAST"] = "0"

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
            ok, message = execute(path, args.timeout)
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
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    sys.exit(main())
