"""course_lib: the library behind the course *LLM inference latency from first principles*.

The core (units, precision, models, hardware, the generated formulas and the estimator) is pure
Python: importing it pulls in neither torch, ipywidgets, matplotlib nor sympy. Lessons use
``course_lib.formulas`` (sympy) for derivations, ``course_lib.widgets`` and ``course_lib.plots`` for
interaction and figures, and ``course_lib.bench``/``course_lib.tinylm`` (torch) for measurements.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .estimator import Estimate, estimate, kv_cache_bytes, weight_bytes
from .hardware import HardwareSpec, get_hardware, list_hardware
from .models import ModelSpec, get_model, list_models
from .precision import bytes_per_element

__all__ = [
    "Estimate", "estimate", "kv_cache_bytes", "weight_bytes",
    "HardwareSpec", "get_hardware", "list_hardware",
    "ModelSpec", "get_model", "list_models",
    "bytes_per_element", "__version__",
]
