"""The one definition of the kernel that executes course notebooks, for every tool that runs them.

Lessons: none

Three tools execute notebooks, and they must agree on what the kernel sees:

* ``make notebooks`` (:mod:`course_lib.authoring.run_notebooks`) stores the outputs;
* nbval in ``make test`` (``tests/conftest.py`` calls :func:`patch_nbval`) re-runs them and compares;
* the grader (``python -m course_lib.authoring.grade``, :mod:`course_lib.authoring.grade`) runs learners' copies.

What they share, defined here only:

* **the interpreter**: the ipykernel of the Python that runs the tool (:class:`CurrentEnvKernelManager`),
  whatever kernelspec a notebook names or a user-level ``python3`` kernelspec points at, so the stored
  outputs, the test run and the grade all come from the same libraries;
* **the environment** on top of the inherited one (:func:`kernel_env`): ``COURSE_FAST`` (the lessons'
  measurement sizes: ``1`` for the stored outputs and the tests, ``0`` for ``make notebooks FULL=1``),
  ``MPLBACKEND`` (the inline backend a notebook has under Jupyter, so figures are drawn as a learner
  sees them; ipykernel picks it only when ``MPLBACKEND`` is unset, and the test suite sets ``Agg``),
  ``PYDEVD_DISABLE_FILE_VALIDATION`` (silences the debugger's frozen-modules warning);
* **the timeouts** (:data:`CELL_TIMEOUT_S`, :data:`NBVAL_CELL_TIMEOUT_S`, :data:`GRADE_CELL_TIMEOUT_S`,
  :data:`STARTUP_TIMEOUT_S`).

The grader differs in two stated ways: it leaves ``COURSE_FAST`` as its caller has it (a teacher grades at
learner sizes unless asked otherwise) and draws no figures (``Agg``): it keeps check records, not images.

Serves no lesson: an authoring tool.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from traitlets import default

__all__ = [
    "KERNEL_NAME", "INLINE_BACKEND", "HEADLESS_BACKEND", "CELL_TIMEOUT_S", "NBVAL_CELL_TIMEOUT_S",
    "GRADE_CELL_TIMEOUT_S", "STARTUP_TIMEOUT_S", "kernel_env", "launch_env", "current_env_kernel_spec",
    "CurrentEnvKernelSpecManager", "CurrentEnvKernelManager", "patch_nbval",
]

#: The kernel name stored in every course notebook (see :mod:`course_lib.authoring.nb_canonical`).
KERNEL_NAME = "python3"
#: The matplotlib backend of a notebook under Jupyter: figures become PNG outputs.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
#: No figures at all (the grader).
HEADLESS_BACKEND = "Agg"

#: Seconds one cell may run in ``make notebooks`` (learner-size measurements included).
CELL_TIMEOUT_S = 600
#: Seconds one cell may run under nbval in ``make test`` (tests/conftest.py applies it).
NBVAL_CELL_TIMEOUT_S = 300
#: Seconds one cell of a learner's notebook may run in the grader (``--timeout``).
GRADE_CELL_TIMEOUT_S = 60
#: Seconds a kernel may take to start.
STARTUP_TIMEOUT_S = 60


def kernel_env(*, fast: bool | None = True, backend: str = INLINE_BACKEND,
               measurements: str | None = None) -> dict[str, str]:
    """The variables every notebook kernel gets on top of the environment it inherits.

    ``fast``: True sets ``COURSE_FAST=1`` and ``OMP_NUM_THREADS=1`` (the stored outputs and the tests),
    False ``COURSE_FAST=0`` (learner-size measurements), None leaves ``COURSE_FAST`` as the caller's environment has it.
    ``backend``: the ``MPLBACKEND`` value, :data:`INLINE_BACKEND` unless figures are not wanted.
    ``measurements``: ``COURSE_MEASUREMENTS`` for the kernel only ('record:DIR' or 'replay:DIR',
    :mod:`course_lib.measure.record`): the test suite replays the recorded lesson runs in the kernels without
    changing what its own process measures.
    """
    if fast is not None and not isinstance(fast, bool):
        raise TypeError(f"fast must be True, False or None, got {fast!r}")
    if not isinstance(backend, str) or not backend:
        raise TypeError(f"backend must be a non-empty str (a matplotlib backend), got {backend!r}")
    env = {"MPLBACKEND": backend, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    if measurements is not None:
        from course_lib.measure.record import ENV
        env[ENV] = measurements
    if fast is not None:
        env["COURSE_FAST"] = "1" if fast else "0"
    if fast:
        # The test suite runs two notebooks at once on two cores: one thread each, through the same thread
        # policy a learner's OMP_NUM_THREADS goes through (course_lib.measure.threads), not a lesson's own rule.
        env["OMP_NUM_THREADS"] = "1"
    return env


def launch_env(base: Mapping[str, str] | None = None, **kwargs) -> dict[str, str]:
    """``base`` (default: this process's environment) with :func:`kernel_env` (``**kwargs``) on top:
    the ``env`` to pass to ``NotebookClient.execute``."""
    return {**(os.environ if base is None else base), **kernel_env(**kwargs)}


def current_env_kernel_spec() -> KernelSpec:
    """The kernelspec of the ipykernel of the running interpreter (no ``env`` of its own)."""
    import ipykernel.kernelspec

    return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())


class CurrentEnvKernelSpecManager(KernelSpecManager):
    """Always hands out the ipykernel of the running interpreter, whatever the notebook names.

    A user-level ``python3`` kernelspec pointing at another Python must not decide which libraries
    the stored outputs, the tests or a grade come from.
    """

    def get_kernel_spec(self, kernel_name):
        return current_env_kernel_spec()


class CurrentEnvKernelManager(AsyncKernelManager):
    """A kernel manager that starts the kernel of :class:`CurrentEnvKernelSpecManager`.

    Asynchronous, as nbclient's default manager: a blocking one can hang nbclient when it abandons a
    kernel that ignores interrupts (the grader's "did not respond to interrupts" case).

    Give it the environment through ``NotebookClient.execute(env=launch_env(...))``.
    """

    @default("kernel_spec_manager")
    def _default_current_env_ksm(self):
        return CurrentEnvKernelSpecManager(data_dir=self.data_dir)


def patch_nbval(**kwargs) -> bool:
    """Make every kernel nbval starts get :func:`kernel_env` (``**kwargs``) in its kernelspec.

    nbval builds its kernels itself (``--nbval-current-env`` already picks this interpreter) and takes
    no environment, so its kernelspec manager is patched, once. Returns False when nbval is not installed.
    """
    try:
        from nbval.kernel import NbvalKernelspecManager
    except ImportError:
        return False
    extra = kernel_env(**kwargs)
    current = NbvalKernelspecManager.get_kernel_spec
    original = getattr(current, "_course_original", current)  # patched again: wrap nbval's own, not ours

    def get_kernel_spec(self, kernel_name):
        spec = original(self, kernel_name)
        spec.env = {**dict(spec.env or {}), **extra}
        return spec

    get_kernel_spec._course_original = original
    NbvalKernelspecManager.get_kernel_spec = get_kernel_spec
    return True
