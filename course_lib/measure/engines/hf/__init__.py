"""Hugging Face transformers on this machine: ``generate()`` measured, and predicted from probes only.

Lessons: 08

::

    from course_lib.measure.engines import hf
    model, spec = hf.build_model("qwen2.5-0.5b")            # random weights, fp32, CPU; no download
    [t] = hf.measure_engine(model, prompts=[128], new_tokens=16, repeats=3)
    t.ttft, t.tpot, t.tpot_verdict.verdict                  # medians (s) and the measurement verdict
    ov = hf.probe_engine_overhead(hf.load_config("qwen2.5-0.5b")[1])   # tiny 2- and 8-layer copies
    cal = hf.calibrate_for({spec.name: spec}, [128])        # the course's probes (never the model)
    hf.predict_engine_tpot(spec, 128, 16, cal, ov).seconds

The package, one idea a module:

* :mod:`~course_lib.measure.engines.hf.config`: a ``config.json`` checked, its course spec, the model built
  offline with random weights (refused before allocation when it does not fit in memory);
* :mod:`~course_lib.measure.engines.hf.timing`: ``generate()`` timed through a streamer, TTFT and every step;
* :mod:`~course_lib.measure.engines.hf.overhead`: the engine's own per-step cost, probed on tiny copies;
* :mod:`~course_lib.measure.engines.hf.predict`: TTFT and TPOT predicted from the course's probes and that cost.

The benchmark that compares them over several configurations (``python -m course_lib.measure.validate --engine hf``) is
:mod:`course_lib.measure.benchmarks.engine_hf`. This package offers the public names of its four modules.
transformers is an optional extra (``pip install 'course-lib[engines]'``); it is imported when first needed.
"""
from __future__ import annotations

from course_lib.measure.engines.hf import config, overhead, predict, timing
from course_lib.measure.engines.hf.config import *  # noqa: F401,F403
from course_lib.measure.engines.hf.overhead import *  # noqa: F401,F403
from course_lib.measure.engines.hf.predict import *  # noqa: F401,F403
from course_lib.measure.engines.hf.timing import *  # noqa: F401,F403

__all__ = [*config.__all__, *timing.__all__, *overhead.__all__, *predict.__all__]
