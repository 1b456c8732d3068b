"""course_lib: the library behind the course *LLM inference latency from first principles*.

The package has four layers; each module's docstring names the lessons it serves, and
``course_lib/data/lessons.json`` maps every lesson to the modules it uses:

* ``course_lib.core``      torch-free arithmetic: units, precision, models, hardware, the sympy formulas
  and the numeric module generated from them, the estimator, the roofline, caching, the serving
  and capstone logic, published measurements. Imports neither torch, ipywidgets nor matplotlib.
* ``course_lib.measure``   measurement on the learner's machine (torch): timing, probes, the machine's
  ceilings, TinyLM, calibration and the ``python -m course_lib.validate`` benchmark.
* ``course_lib.lessons``   display only: prose helpers, glossary, the lesson map, widgets and plots.
  They call the core and render what it returns; they compute nothing of their own.
* ``course_lib.checks``    the exercise checks (``course_lib.checks.ex01`` ... ``ex09``).
* ``course_lib.authoring`` exercise generation, grading and notebook execution for authors and teachers.

This module is the public, torch-free face: ``from course_lib import estimate, get_model, ...``.
The paths of the flat layout (``course_lib.bench``, ``course_lib.dashboard``, ...) still import, as
aliases of the modules that now hold them (``course_lib._compat``).
"""
from __future__ import annotations

__version__ = "0.1.0"

from course_lib import _compat

_compat.install()

from course_lib.core.estimator import Estimate, estimate, kv_cache_bytes, weight_bytes  # noqa: E402
from course_lib.core.hardware import HardwareSpec, get_hardware, list_hardware  # noqa: E402
from course_lib.core.models import ModelSpec, get_model, list_models  # noqa: E402
from course_lib.core.precision import bytes_per_element  # noqa: E402

__all__ = [
    "Estimate", "estimate", "kv_cache_bytes", "weight_bytes",
    "HardwareSpec", "get_hardware", "list_hardware",
    "ModelSpec", "get_model", "list_models",
    "bytes_per_element", "__version__",
]
