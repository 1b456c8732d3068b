"""Display only: prose helpers, the glossary, the lesson map, widgets/ and plots/.

Everything here renders what :mod:`course_lib.core` and :mod:`course_lib.measure` compute; it
computes nothing of its own. ``from course_lib import lessons`` keeps giving the lesson map
(``lessons.lessons()``, ``lessons.map_markdown()``) as before the package was split.
"""
from course_lib.lessons.lesson_map import is_ready, lessons, map_markdown

__all__ = ["lessons", "is_ready", "map_markdown"]
