"""Test-suite set-up shared by every test and by the nbval notebook checks.

What happens here, in order:

* The environment that the tests *and the notebook kernels nbval starts* see is fixed before any
  test module is imported: ``COURSE_FAST=1`` (lessons shrink their measurement loops; the stored
  notebook outputs were produced with the same setting by ``make notebooks``) and
  ``MPLBACKEND=Agg`` (no plot window can ever block a test).
* The kernels nbval starts get the kernel environment of ``course_lib.authoring.kernel``, the one
  ``make notebooks`` stored the outputs with (``COURSE_FAST=1``, the inline matplotlib backend: a
  kernel inheriting ``MPLBACKEND=Agg`` would draw no figures), and its per-cell timeout
  (``NBVAL_CELL_TIMEOUT_S``) unless ``--nbval-cell-timeout`` is given.
* Hypothesis profiles: "dev" (50 examples) and "ci" (30 examples, no deadline, derandomized);
  "ci" is loaded when ``CI=true``, else "dev". ``HYPOTHESIS_PROFILE`` overrides both.
* ``require_tool``: skip a test when an external tool (chromium, nbgrader, ...) is missing, but
  fail it when ``CI=true`` or ``COURSE_REQUIRE_ALL=1`` -- CI must never go green by skipping.
* nbval compares text outputs (text/plain, text/html, text/markdown, streams, ...) after the
  regexes in ``tests/nbval_sanitize.cfg``; it already ignores PNG/JPEG images and widget model
  ids, and here SVG images are ignored as well. Each notebook runs in one kernel, top to bottom,
  because ``make test`` distributes with ``--dist loadfile`` (all cells of a file go to one
  worker, in order).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

# --- environment: set before anything else imports matplotlib or starts a kernel ---------------
os.environ["COURSE_FAST"] = "1"
os.environ["MPLBACKEND"] = "Agg"

from repo import ROOT as REPO_ROOT  # noqa: E402

# The measurement lessons (05-08) take their measurements from the recorded run their stored outputs were
# made from (course_lib.measure.record; `make notebooks FULL=1` records it), so nbval executes them against
# that machine's numbers, whatever machine runs the suite. A test that wants live measurements unsets it.
# Only the notebook kernels replay (course_kernel.patch_nbval below): the tests' own process measures live.
RECORDING = REPO_ROOT / "tests" / "fixtures" / "recordings" / "stored"
os.environ.pop("COURSE_MEASUREMENTS", None)

# Notebooks under tests/ (fixtures for other tests) are data, never nbval subjects.
collect_ignore_glob = ["*.ipynb", "**/*.ipynb"]


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def strict_tools() -> bool:
    """True when a missing tool must fail the run instead of skipping (CI, or asked for)."""
    return _truthy("CI") or _truthy("COURSE_REQUIRE_ALL")


# --- the grader's sandbox (bubblewrap) ---------------------------------------------------------------
# The grader refuses to run graded code without its sandbox. Where bubblewrap cannot start (a laptop without
# it), the grading tests run in the opt-in insecure mode -- except under CI=true / COURSE_REQUIRE_ALL=1, where
# they must fail; the attack tests (tests/test_grade_sandbox.py) need the sandbox and skip or fail there.
def sandbox_reason() -> str:
    """Why the grader's sandbox cannot start here ("" when it can)."""
    from course_lib.authoring import sandbox

    return sandbox.bwrap_status()[1]


if not strict_tools() and "COURSE_GRADE_ISOLATION" not in os.environ and sandbox_reason():
    os.environ["COURSE_GRADE_ISOLATION"] = "insecure"


# --- Hypothesis ----------------------------------------------------------------------------------
try:
    from hypothesis import settings as _hyp_settings
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    _hyp_settings = None
else:
    _hyp_settings.register_profile("dev", max_examples=50)
    _hyp_settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
    _hyp_settings.load_profile(
        os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _truthy("CI") else "dev")
    )


# --- nbval kernels ----------------------------------------------------------------------------------
from course_lib.authoring import kernel as course_kernel  # noqa: E402  (after the environment is set)

course_kernel.patch_nbval(measurements=f"replay:{RECORDING}")


def pytest_configure(config):
    """nbval's per-cell timeout from the kernel module, unless given on the command line."""
    given = any(str(arg).startswith("--nbval-cell-timeout") for arg in config.invocation_params.args)
    if hasattr(config.option, "nbval_cell_timeout") and not given:
        config.option.nbval_cell_timeout = course_kernel.NBVAL_CELL_TIMEOUT_S
    # markers of `make tour`'s classroom checks (tests/test_hub.py, tests/test_binder.py)
    config.addinivalue_line("markers", "classroom: starts a JupyterHub classroom (make tour)")
    config.addinivalue_line("markers", "binder: resolves the Binder environment with pip (make tour)")


#: MIME types nbval must not compare, on top of its own list (PNG, JPEG, widget views).
NBVAL_EXTRA_SKIP = ("image/svg+xml", "image/gif", "application/pdf")


def pytest_collection_modifyitems(session, config, items):
    """Ignore image outputs in nbval comparisons; mark notebook cells."""
    seen = set()
    for item in items:
        parent = getattr(item, "parent", None)
        if parent is None or type(parent).__name__ != "IPyNbFile":
            continue
        item.add_marker(pytest.mark.notebook)
        if id(parent) not in seen:
            seen.add(id(parent))
            parent.skip_compare = tuple(parent.skip_compare) + tuple(
                m for m in NBVAL_EXTRA_SKIP if m not in parent.skip_compare
            )


# --- external tools -------------------------------------------------------------------------------
def find_tool(name: str) -> str | None:
    """Path of executable ``name`` on PATH or next to this interpreter (the venv's bin/)."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=search)


def require_tool(name: str, *, module: bool = False, why: str = "") -> str:
    """Return the path of executable ``name`` (or the module name when ``module=True``).

    When it is missing the calling test is skipped with a reason -- or *fails* when
    ``CI=true`` or ``COURSE_REQUIRE_ALL=1``, so that CI never passes by skipping.
    """
    found = (name if importlib.util.find_spec(name) is not None else None) if module else find_tool(name)
    if found:
        return found
    what = f"Python module {name!r}" if module else f"tool {name!r}"
    reason = f"{what} is not installed" + (f" ({why})" if why else "")
    if strict_tools():
        pytest.fail(
            f"{reason}; CI=true / COURSE_REQUIRE_ALL=1 require every tool. "
            f"Install it (see .ci/run) or unset COURSE_REQUIRE_ALL for a local run.",
            pytrace=False,
        )
    pytest.skip(reason)


@pytest.fixture(name="require_tool")
def _require_tool_fixture():
    """Fixture form: ``def test_x(require_tool): exe = require_tool("nbgrader")``."""
    return require_tool


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="module")
def torch_one_thread():
    """Run a module's torch code on one thread (restored afterwards).

    Tiny test models gain nothing from threads, and on a shared CPU (two xdist workers on two cores)
    spinning threads cost seconds. Use with ``pytestmark = pytest.mark.usefixtures("torch_one_thread")``.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
