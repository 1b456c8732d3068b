"""Measured claims as data: each sentence of a measurement lesson that states a relation is computed here.

Lessons: 05, 06, 07, 08

A claim is the relation a run shows (faster / slower / indistinguishable, grows / falls / flat, memory- or
compute-bound, within x %), its operands (the numbers it was decided from) and the measurement verdict
(reliable / noisy / contended, :mod:`course_lib.core.quality`). The lessons render the claims
(:mod:`course_lib.lessons.claims`), with one sentence written for each outcome; tests check every claim
against every recorded machine profile (``tests/fixtures/profiles``).

One module per lesson: :mod:`.gemv` (05), :mod:`.phases` (06), :mod:`.caching` (07), :mod:`.compare` (08).
"""
