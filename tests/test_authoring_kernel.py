"""The one kernel definition (course_lib.authoring.kernel) that `make notebooks`, nbval and the grader share."""
from __future__ import annotations

import os
import sys

import pytest

from course_lib.authoring import kernel


def test_kernel_env_modes():
    assert kernel.kernel_env() == {"COURSE_FAST": "1", "MPLBACKEND": kernel.INLINE_BACKEND,
                                   "PYDEVD_DISABLE_FILE_VALIDATION": "1", "OMP_NUM_THREADS": "1"}
    assert kernel.kernel_env(fast=False)["COURSE_FAST"] == "0"
    assert "OMP_NUM_THREADS" not in kernel.kernel_env(fast=False)  # learner size: the host's thread policy
    assert "COURSE_FAST" not in kernel.kernel_env(fast=None)  # the caller's own setting is kept
    assert kernel.kernel_env(backend=kernel.HEADLESS_BACKEND)["MPLBACKEND"] == "Agg"
    with pytest.raises(TypeError, match="fast"):
        kernel.kernel_env(fast=1)
    with pytest.raises(TypeError, match="backend"):
        kernel.kernel_env(backend="")


def test_launch_env_puts_the_kernel_env_on_top():
    env = kernel.launch_env({"COURSE_FAST": "0", "MPLBACKEND": "Agg", "PATH": "/bin"})
    assert env["COURSE_FAST"] == "1" and env["MPLBACKEND"] == kernel.INLINE_BACKEND and env["PATH"] == "/bin"
    assert kernel.launch_env({"COURSE_FAST": "0"}, fast=None)["COURSE_FAST"] == "0"
    assert kernel.launch_env()["PATH"] == os.environ["PATH"]


def test_the_kernel_is_this_interpreter_whatever_the_name():
    for name in (kernel.KERNEL_NAME, "python3-somewhere-else"):
        spec = kernel.CurrentEnvKernelSpecManager().get_kernel_spec(name)
        assert spec.argv[0] == sys.executable and spec.language == "python"
    assert isinstance(kernel.CurrentEnvKernelManager().kernel_spec_manager, kernel.CurrentEnvKernelSpecManager)


def test_patch_nbval_wraps_nbval_once():
    nbval_kernel = pytest.importorskip("nbval.kernel")
    assert kernel.patch_nbval() and kernel.patch_nbval(fast=False)
    try:
        spec = nbval_kernel.NbvalKernelspecManager().get_kernel_spec(nbval_kernel.CURRENT_ENV_KERNEL_NAME)
        assert spec.env["COURSE_FAST"] == "0"  # the last patch wins: nbval's own method is wrapped, not ours
        patched = nbval_kernel.NbvalKernelspecManager.get_kernel_spec
        assert not hasattr(patched._course_original, "_course_original")
    finally:
        kernel.patch_nbval()  # back to what tests/conftest.py set
    spec = nbval_kernel.NbvalKernelspecManager().get_kernel_spec(nbval_kernel.CURRENT_ENV_KERNEL_NAME)
    assert spec.env["COURSE_FAST"] == "1"


def test_nbval_cell_timeout_comes_from_the_kernel_module(pytestconfig):
    if not hasattr(pytestconfig.option, "nbval_cell_timeout"):
        pytest.skip("nbval is not installed")
    if any(str(a).startswith("--nbval-cell-timeout") for a in pytestconfig.invocation_params.args):
        pytest.skip("--nbval-cell-timeout given on the command line")
    assert pytestconfig.option.nbval_cell_timeout == kernel.NBVAL_CELL_TIMEOUT_S


def test_the_tools_use_the_kernel_module():
    from course_lib.authoring import grade, nb_canonical, run_notebooks

    assert nb_canonical.KERNELSPEC["name"] == kernel.KERNEL_NAME
    assert run_notebooks.ExecuteInCourseKernel().timeout == kernel.CELL_TIMEOUT_S
    assert grade.grade_notebook.__kwdefaults__.items() >= {
        "timeout": kernel.GRADE_CELL_TIMEOUT_S, "kernel_name": kernel.KERNEL_NAME,
        "startup_timeout": kernel.STARTUP_TIMEOUT_S}.items()
