"""The sentences of the measurement lessons, one written for each outcome of a claim (:mod:`course_lib.core.claims`).

Lessons: 05, 06, 07, 08

Rendering only: every relation and number comes from the claim objects; nothing is decided here.
One module per lesson: :mod:`.gemv` (05), :mod:`.phases` (06), :mod:`.caching` (07), :mod:`.compare` (08).
"""
