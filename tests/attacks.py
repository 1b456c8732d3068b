"""Attacks on the grader shared by tests/test_grade_trust.py and tests/test_nbgrader.py."""

#: a ``sympy.py`` put beside a learner's notebook: the setup cell's ``import sympy`` loads it; it loads the real
#: sympy and patches the checker to call every answer correct
SHADOW_SYMPY = """
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["sympy"]
import sympy as _real
sys.modules["sympy"] = _real
import course_lib.checks.question as _q
_q.Question.evaluate = lambda self, a, strict=False, **k: self._result("correct", "", strict)
"""
