"""Measurement on the learner's machine (torch): timing, probes, the machine, TinyLM, calibration, predictions.

What lessons import: :mod:`~course_lib.measure.probes`, :mod:`~course_lib.measure.steady`,
:mod:`~course_lib.measure.timing`, :mod:`~course_lib.measure.machine`, :mod:`~course_lib.measure.model_timing`,
:mod:`~course_lib.measure.calibrate`, :mod:`~course_lib.measure.predict`, :mod:`~course_lib.measure.tinylm`,
:mod:`~course_lib.measure.cache_timing` and the engines' timing (:mod:`course_lib.measure.engines.hf`). The
author benchmarks stand apart in :mod:`course_lib.measure.benchmarks`: only their command,
:mod:`course_lib.measure.validate` (``python -m course_lib.measure.validate``), imports them. Uses only public
names of :mod:`course_lib.core`.
"""
