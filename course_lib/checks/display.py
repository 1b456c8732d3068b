"""Results, hints and worked solutions, and how they show themselves in Jupyter.

Used by every exercise set (``ex01`` ... ``ex09``, lessons 01-09, and ``_demo``) and by the grader
(:mod:`course_lib.authoring.grade`, which collects the records published under :data:`MIME_TYPE`).
A :class:`Result` displays as a coloured box (``text/html``), as plain text and as that
machine-readable record; hints and solutions display as markdown.  The hooks into IPython are
here: a check shows itself when it is made, and the echo of the same object as the cell's last
line is swallowed so that it appears exactly once.  IPython is never imported from here: it is
used only when it is already running.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09
"""
from __future__ import annotations

import html
import os
import re
import sys
from dataclasses import dataclass

__all__ = [
    "CORRECT",
    "INCORRECT",
    "NOT_ATTEMPTED",
    "RECEIVED",
    "STATUSES",
    "MIME_TYPE",
    "RECORD_VERSION",
    "Result",
    "Hint",
    "Solution",
    "CheckFailed",
    "graded_outcome",
]

CORRECT = "correct"
INCORRECT = "incorrect"
NOT_ATTEMPTED = "not_attempted"
STATUSES = (CORRECT, INCORRECT, NOT_ATTEMPTED)
#: The status of a check without the answer key (a classroom release, a grading kernel): the answer has
#: the right form (a number of the right dimension, a formula in the question's symbols, one of the
#: options, a function that runs) and is judged by the grader.
RECEIVED = "received"
MIME_TYPE = "application/vnd.course.check+json"
RECORD_VERSION = 1

_cell_serial = 0
_hooked_shells: set[int] = set()


def _bump_cell_serial(*_args, **_kwargs):
    global _cell_serial
    _cell_serial += 1


def _shell():
    """The running IPython shell, or None (IPython is never imported from here)."""
    ipy = sys.modules.get("IPython")
    if ipy is None:
        return None
    try:
        shell = ipy.get_ipython()
    except Exception:
        return None
    if shell is not None and id(shell) not in _hooked_shells:
        try:
            shell.events.register("pre_run_cell", _bump_cell_serial)
            _hooked_shells.add(id(shell))
        except Exception:
            pass
    return shell


def fmt(v: float) -> str:
    """A number as feedback and labels print it (six significant digits)."""
    return f"{v:.6g}"


class _Displayable:
    """Shows itself when created inside IPython; the echo of the same object in the same cell
    (``q.q1.check(x)`` as the last line) is swallowed so that it appears exactly once."""

    _shown_in: int | None = None

    def _bundle(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self._bundle()

    def _ipython_display_(self):
        if self._shown_in is not None and self._shown_in == _cell_serial:
            object.__setattr__(self, "_shown_in", None)  # swallow one echo only
            return
        from IPython.display import display

        display(self._bundle(), raw=True)

    def _show(self):
        if _shell() is None:
            return
        try:
            from IPython.display import display

            display(self._bundle(), raw=True)
            object.__setattr__(self, "_shown_in", _cell_serial)
        except Exception:
            pass


_STYLE = {
    CORRECT: ("#1e7b34", "#e8f5e9", "✔", "Correct"),
    INCORRECT: ("#b3261e", "#fdecea", "✘", "Not yet"),
    NOT_ATTEMPTED: ("#5f6368", "#f1f3f4", "○", "Not attempted"),
    RECEIVED: ("#1a5fb4", "#e8f0fe", "●", "Answer recorded"),
}


def _inline_code(escaped: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


@dataclass(frozen=True, eq=False)
class Result(_Displayable):
    """The outcome of one check.  ``status`` is one of :data:`STATUSES`."""

    status: str
    feedback: str
    question: str
    set: str
    points: float
    objective: str = ""
    strict: bool = False

    @property
    def correct(self) -> bool:
        return self.status == CORRECT

    @property
    def attempted(self) -> bool:
        return self.status != NOT_ATTEMPTED

    @property
    def score(self) -> float:
        return float(self.points) if self.correct else 0.0

    def __bool__(self) -> bool:
        return self.correct

    def record(self) -> dict:
        """The machine-readable record the grader collects (published as :data:`MIME_TYPE`)."""
        return {
            "version": RECORD_VERSION,
            "set": self.set,
            "question": self.question,
            "status": self.status,
            "points": float(self.points),
            "score": self.score,
            "feedback": self.feedback,
            "objective": self.objective,
            "strict": bool(self.strict),
        }

    @property
    def label(self) -> str:
        return f"{self.set}.{self.question}"

    def __str__(self) -> str:
        mark, word = _STYLE[self.status][2], _STYLE[self.status][3]
        text = f"{mark} {self.label}: {word}"
        if self.feedback:
            text += f": {self.feedback}"
        return text

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        fg, bg, mark, word = _STYLE[self.status]
        body = _inline_code(html.escape(self.feedback)) if self.feedback else ""
        pts = f"{fmt(self.score)}/{fmt(float(self.points))} pt"
        return (
            f'<div class="course-check course-check-{self.status}" style="border-left:6px solid {fg};'
            f'background:{bg};color:#202124;padding:6px 10px;margin:4px 0;border-radius:4px;'
            f'font-family:sans-serif;font-size:14px">'
            f'<b style="color:{fg}">{mark} {html.escape(word)}</b>'
            f' <span style="color:#5f6368">({html.escape(self.label)}, {pts})</span>'
            + (f"<div style=\"margin-top:3px\">{body}</div>" if body else "")
            + "</div>"
        )

    def _bundle(self) -> dict:
        return {"text/plain": str(self), "text/html": self._repr_html_(), MIME_TYPE: self.record()}


class _Markdown(_Displayable):
    """A note shown as markdown with a plain-text fallback (``__str__``)."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _bundle(self) -> dict:
        return {"text/plain": str(self), "text/markdown": self._repr_markdown_()}


class CheckFailed(AssertionError):
    """What a graded check (``check(answer, strict=True)``, a grade cell) raises when the answer is not right.

    An ``AssertionError`` (nbgrader takes points away for it, and :mod:`course_lib.authoring.grade` reads
    the result's record, not the error); its message is the result (``"✘ ex01.q1: Not yet: <feedback>"``).
    In IPython it renders as one line that points at the result box shown just above it, so the feedback
    appears once and no traceback into the checks package is shown.
    """

    def __init__(self, result: "Result"):
        super().__init__(str(result))
        self.result = result

    def _render_traceback_(self) -> list[str]:
        r = self.result
        word = "not attempted" if r.status == NOT_ATTEMPTED else "not yet right"
        return [f"AssertionError: {r.label} is {word} (0/{fmt(float(r.points))} pt): see the feedback above."]


# the error a kernel reports is named by the class: graders (nbgrader, course_lib.authoring.grade) look for this name
CheckFailed.__name__ = CheckFailed.__qualname__ = "AssertionError"


def _grading() -> bool:
    """True under a grader that scores grade cells by their errors (nbgrader sets NBGRADER_EXECUTION), and
    outside IPython (a script, a test): there a graded check that was not attempted must fail."""
    return bool(os.environ.get("NBGRADER_EXECUTION")) or _shell() is None


def graded_outcome(result: "Result") -> "Result":
    """What a graded check does once its result is shown: return it when correct; raise
    :class:`CheckFailed` when incorrect; when not attempted, raise only under a grader, so that "Run All"
    on a fresh copy of an exercise notebook runs to the end (the box says "Not attempted", and the record
    :mod:`course_lib.authoring.grade` collects says so too)."""
    if result.correct or result.status == RECEIVED or (result.status == NOT_ATTEMPTED and not _grading()):
        return result
    raise CheckFailed(result)


@dataclass(frozen=True, eq=False, repr=False)
class Hint(_Markdown):
    """One hint of a question (markdown; rendered with math in Jupyter)."""

    question: str
    number: int
    total: int
    text: str

    def __str__(self) -> str:
        return f"Hint {self.number}/{self.total} ({self.question}): {self.text}"

    def _repr_markdown_(self) -> str:
        return f"**💡 Hint {self.number}/{self.total}** ({self.question}): {self.text}"


@dataclass(frozen=True, eq=False, repr=False)
class Solution(_Markdown):
    """The worked solution of a question (markdown)."""

    question: str
    text: str

    def __str__(self) -> str:
        return f"Solution ({self.question}):\n{self.text}"

    def _repr_markdown_(self) -> str:
        return (
            f"**Worked solution ({self.question})**: honour system, try it yourself first!\n\n"
            f"{self.text}"
        )
