"""Real inference engines measured and predicted on the learner's machine.

Lessons: 08

* :mod:`course_lib.measure.engines.hf`: Hugging Face transformers ``generate()`` on a CPU (fp32, random
  weights of a real ``config.json``), its TTFT and TPOT measured through a streamer and predicted from
  the course's probes plus a probe of the engine's own per-step cost on a tiny configuration.

The benchmarks that compare an engine's predictions with its measurements live in
:mod:`course_lib.measure.benchmarks`. Importing this package imports no engine.
"""
