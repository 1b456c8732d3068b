"""The author's benchmarks: does the course's latency model predict real timings on this machine?

Lessons: none

Lessons import :mod:`course_lib.measure`'s probes, calibration, predictions, TinyLM and engine timing; nothing
they import reaches this package (only the command, :mod:`course_lib.measure.validate`, runs it;
``tests/test_layout.py`` checks).

* :mod:`~course_lib.measure.benchmarks.bracket`: the one bracketed-measurement primitive (every measurement
  between two probe sets, interleaved) and the one rule that judges a point (:func:`~.bracket.judge`);
* :mod:`~course_lib.measure.benchmarks.tinylm_bench`: TinyLM predicted and measured
  (``python -m course_lib.measure.validate``);
* :mod:`~course_lib.measure.benchmarks.engine_hf`: ``--engine hf``, Hugging Face ``generate()`` predicted and
  measured;
* :mod:`~course_lib.measure.benchmarks.engine_llamacpp`: ``--engine llama.cpp``, llama.cpp ``Llama.generate()``
  on GGUF files predicted and measured.

How a point is judged and how to read a report: ``docs/VALIDATE.md``.
"""
