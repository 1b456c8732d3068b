"""The old ``bench`` module, kept for this release: every name it had, re-exported from the modules that hold it now.

Lessons: 07

``course_lib.bench``, ``from course_lib import bench`` and ``course_lib.measure.bench`` (exercise set 05,
lessons 05-08 and the app before the split, and learners' ``work/`` copies) keep working::

    from course_lib.measure import bench
    bench.measure_gemv(); bench.this_machine(bench.measure_machine())

New code imports the module that holds a name:

* :mod:`course_lib.measure.device`: fast mode, device selection, cache and memory sizes;
* :mod:`course_lib.measure.timing`: clocks, the thread count, ``timeit``, ``Stopwatch``, ``quartiles``;
* :mod:`course_lib.measure.probes`: GEMV, copy, matmul, dtypes, linear layer, K/V read, op overhead,
  score passes and attention products;
* :mod:`course_lib.measure.machine`: ``measure_machine``, ``this_machine``;
* :mod:`course_lib.measure.model_timing`: ``measure_prefill``, ``measure_decode``, ``measure_decode_contexts``.

This is the one compatibility mechanism for a module that was split: a thin module at the old path whose
names are the public names (``__all__``) of the new modules, the same objects (``bench.measure_gemv is
probes.measure_gemv``). Rebinding a name here does not change the module that holds it: patch that one.
((The flat ``course_lib.bench`` path is gone with the compatibility layer.))
"""
from __future__ import annotations

from course_lib.measure import device, machine, model_timing, probes, timing

#: the modules whose public names this one offers, in the order they are looked up
PARTS = (device, timing, probes, machine, model_timing)

__all__ = [name for part in PARTS for name in part.__all__]
globals().update({name: getattr(part, name) for part in PARTS for name in part.__all__})
