"""Real inference engines measured and predicted on the learner's machine (issue 14).

Lessons: 06, 07

(Reached through ``python -m course_lib.measure.validate --engine hf``; lesson 08's engine section is to use it.)

* :mod:`course_lib.measure.engines.hf`: Hugging Face transformers ``generate()`` on a CPU (fp32, random
  weights of a real ``config.json``), its TTFT and TPOT measured through a streamer and predicted from
  the course's probes plus a probe of the engine's own per-step cost on a tiny configuration.

transformers is an optional extra (``pip install course-lib[engines]``); importing this package does not
import it.
"""
__all__ = ["hf"]
