"""The course's stored reference run: the measurements a quiet machine gave, shown beside a learner's noisy ones.

Lessons: 05, 06, 07, 08

    from course_lib.lessons.claims.reference import reference
    ref = reference("05")
    ref["05/rotated"]            # the reference run's rotated GEMV sweep (the first call of that key)
    ref.every("06/decode_batch") # every call of a key measured in a loop, in order
    label()                      # what machine and condition the reference run comes from, in words

``course_lib/data/reference_runs.json`` holds the recorded run the stored lessons 05-08 were executed from (the
format of :mod:`course_lib.measure.record`, copied unchanged with its source). A lesson computes the same claim
from it as from the learner's run and renders it beside an undecided one, labelled
(:func:`course_lib.lessons.claims.gemv.beside`): the learner on a busy laptop still sees what the lesson means,
and never mistakes it for their own machine's numbers.
"""
from __future__ import annotations

from course_lib.core.data import load_catalog

__all__ = ["reference", "label", "Reference"]


def _data() -> dict:
    return load_catalog("reference_runs")


class Reference(dict):
    """One lesson's reference measurements: {key: the first recorded result of that key}, decoded."""

    lesson: str

    def every(self, key: str) -> list:
        """Every recorded result of ``key``, in the order measured (a key measured in a loop has one per call)."""
        results = _data()["lessons"][self.lesson]["results"]
        if key not in results:
            raise KeyError(f"the reference run of lesson {self.lesson} has no {key!r}; it has {', '.join(results)}")
        from course_lib.measure.record import decode
        return [decode(v) for v in results[key]]


def reference(lesson: str) -> Reference:
    """The reference run of ``lesson`` ("05", "06", "07" or "08")."""
    lessons = _data()["lessons"]
    if lesson not in lessons:
        raise ValueError(f"lesson must be one of {', '.join(sorted(lessons))}, got {lesson!r}")
    from course_lib.measure.record import decode     # lazily: rebuilding the results needs their classes
    out = Reference({k: decode(v[0]) for k, v in lessons[lesson]["results"].items()})
    out.lesson = lesson
    return out


def label() -> str:
    """The reference run in words: the course's stored run and its machine."""
    return f"the course's stored run on {_data()['about']}"
