"""Measurement on the learner's machine (torch): timing, probes, the machine, TinyLM, validate.

Uses only public names of :mod:`course_lib.core`. Lessons 05-08 and exercise set 05 use it.
"""
