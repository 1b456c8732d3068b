"""course_lib: the library behind the course *LLM inference latency from first principles*.

The package has four layers; each module's docstring names the lessons it serves, and
``course_lib/data/lessons.json`` maps every lesson to the modules it uses:

* ``course_lib.core``      torch-free arithmetic: units, precision, models, hardware, the sympy formulas
  and the numeric module generated from them, the estimator, the roofline, caching, the serving
  and capstone logic, published measurements. Imports neither torch, ipywidgets nor matplotlib.
* ``course_lib.measure``   measurement on the learner's machine (torch): timing, probes, the machine's
  ceilings, TinyLM, calibration and the ``python -m course_lib.measure.validate`` benchmark.
* ``course_lib.lessons``   display only: prose helpers, glossary, the lesson map, widgets and plots.
  They call the core and render what it returns; they compute nothing of their own.
* ``course_lib.checks``    the exercise checks (``course_lib.checks.ex01`` ... ``ex10``).
* ``course_lib.authoring`` exercise generation, grading and notebook execution for authors and teachers.

This module is the public, torch-free face: ``from course_lib import estimate, get_model, ...``.
docs/ARCHITECTURE.md says how the layers fit together.
"""
from __future__ import annotations

__version__ = "0.1.0"

from course_lib.core.estimator import Estimate, estimate, kv_cache_bytes, weight_bytes
from course_lib.core.hardware import HardwareSpec, get_hardware, list_hardware
from course_lib.core.models import ModelSpec, get_model, list_models
from course_lib.core.precision import bytes_per_element

__all__ = [
    "Estimate", "estimate", "kv_cache_bytes", "weight_bytes",
    "HardwareSpec", "get_hardware", "list_hardware",
    "ModelSpec", "get_model", "list_models",
    "bytes_per_element", "__version__",
]
