"""nbgrader's autograde through the course's trusted checks: a preprocessor that replaces nbgrader's ``Execute``.

Lessons: none

nbgrader scores a grade cell by its outputs (an error: no points; else full points), and runs the
notebook in a kernel that imports the course as installed, answer key included, beside whatever files
the student submitted.  :class:`CourseAutograde` runs it the way ``python -m course_lib.authoring.grade`` does
(:func:`course_lib.authoring.grade.run_and_judge`): a copy, alone in a fresh temporary folder, against
the key-less ``course_lib`` (so ``q.q1.expected`` is None there), with the output, memory and time
limits of :mod:`course_lib.authoring.sandbox`; each answer leaves the kernel as plain data and is judged
in this process (functions in a fresh interpreter).  Then every grade cell that has a check gets *only*
the verdict as its outputs: a line "✔ ex01.q1: correct (judged by the course grader)", or that line and an
error output when the answer is not right (nbgrader then gives the cell no points).  A patched checker in
the kernel, an edited grade cell (nbgrader's ``OverwriteCells`` restores it first) or a ``sympy.py``
beside the notebook therefore cannot earn points; what the static scan and the shadowing check find is
logged as a warning.  Graded code runs in the grader's OS sandbox (bubblewrap: no key, no gradebook, no
other submission, no network; :mod:`course_lib.authoring.sandbox`); without bubblewrap the preprocessor
refuses unless ``c.CourseAutograde.insecure = True``.  Its limits are ``c.CourseAutograde.timeout`` (per
cell), ``time_budget``, ``max_memory``, ``max_cell_output`` and ``max_output`` (``c.Execute.*`` no longer
applies: ``Execute`` is replaced).

Configure it in ``nbgrader_config.py``::

    from course_lib.authoring.nbgrader_autograde import configure
    configure(c)      # c.Autograde.autograde_preprocessors with CourseAutograde instead of Execute

Serves no lesson: an authoring tool.
"""
from __future__ import annotations

import copy
from pathlib import Path

from nbformat.v4 import new_output
from traitlets import Bool, Float, Integer, Unicode

try:
    from nbgrader.preprocessors import Execute, NbGraderPreprocessor
except ImportError:  # nbgrader is an optional dependency (the `classroom` extra)
    from nbconvert.preprocessors import Preprocessor as NbGraderPreprocessor

    Execute = None

from course_lib.authoring import grade, integrity, kernel, sandbox
from course_lib.checks.answers import ANSWER_MIME
from course_lib.checks import CORRECT

__all__ = ["CourseAutograde", "configure", "autograde_preprocessors"]


class CourseAutograde(NbGraderPreprocessor):
    """Execute the notebook with the course grader's isolation and judge the grade cells' answers."""

    timeout = Integer(kernel.GRADE_CELL_TIMEOUT_S, help="seconds each cell may run").tag(config=True)
    time_budget = Float(0.0, help="seconds for the whole notebook (0: 5 x timeout)").tag(config=True)
    max_memory = Integer(sandbox.MAX_MEMORY, help="bytes of resident memory of the kernel").tag(config=True)
    max_cell_output = Integer(sandbox.MAX_CELL_OUTPUT, help="bytes of output kept per cell").tag(config=True)
    max_output = Integer(sandbox.MAX_OUTPUT, help="bytes of output a notebook may send").tag(config=True)
    kernel_name = Unicode(kernel.KERNEL_NAME, help="Jupyter kernel name").tag(config=True)
    insecure = Bool(False, help="grade without the sandbox (graded code runs as the grader's user and can read the "
                               "answer key and the gradebook): only for notebooks you trust").tag(config=True)

    def preprocess(self, nb, resources):
        name = f"{resources.get('unique_key') or 'notebook'}.ipynb"
        folder = (resources.get("metadata") or {}).get("path")
        sets = grade.sets_in_source(nb)
        budget = self.time_budget or grade.BUDGET_PER_TIMEOUT * self.timeout
        isolation = sandbox.resolve_isolation(sandbox.INSECURE if self.insecure else None)  # refuses without bwrap
        self.log.info("course grader: %s: grading in the %s mode", name, isolation)
        limits = grade._Limits(float(self.timeout), float(budget), int(self.max_memory), int(self.max_cell_output),
                               int(self.max_output), isolation)
        run = copy.deepcopy(nb)
        where = grade._Where(run)
        cells = [(i, c.source) for i, c in enumerate(run.cells) if c.cell_type == "code"]
        findings = integrity.scan_patching(cells) + (integrity.shadowing(Path(folder), cells) if folder else [])
        for f in findings:
            self.log.warning("course grader: %s: %s", name, f.message)
        grade_cells = {i for i, c in enumerate(run.cells) if c.cell_type == "code"
                       and (c.get("metadata", {}).get("nbgrader") or {}).get("grade")}
        replies, problems, warnings, judged = grade.run_and_judge(
            run, name, sets, limits, self.kernel_name, kernel.STARTUP_TIMEOUT_S, where, None, grade_cells)
        for p in problems:
            self.log.warning("course grader: %s: %s: %s", name, p.kind, p.message)
        for w in warnings:
            self.log.warning("course grader: %s: %s", name, w)
        for original, ran in zip(nb.cells, run.cells):
            if original.cell_type == "code":
                original.outputs = [o for o in ran.get("outputs", []) if ANSWER_MIME not in (o.get("data") or {})]
                original.execution_count = ran.get("execution_count")
        verdicts: dict[int, list] = {}
        for (set_name, qid), entries in judged.items():
            for cell, status, feedback in entries:
                verdicts.setdefault(cell, []).append((f"{set_name}.{qid}", status, feedback))
        for i in grade_cells:
            checks = grade._check_calls(nb.cells[i].source, grade.set_aliases(nb))
            if not checks and i not in verdicts:
                continue  # a grade cell of tests only: nbgrader's rule (its errors) applies
            self._verdict(nb.cells[i], verdicts.get(i, []), replies.get(i) or {})
        return nb, resources

    @staticmethod
    def _verdict(cell, verdicts, reply) -> None:
        """The grade cell's outputs become the verdict alone (an error output unless every answer is right)."""
        lines, right = [], bool(verdicts)
        for label, status, feedback in verdicts:
            ok = status == CORRECT
            right = right and ok
            lines.append(f"{'✔' if ok else '✘'} {label}: {status.replace('_', ' ')} (judged by the course grader)"
                         + (f": {feedback}" if feedback and not ok else ""))
        if not verdicts:
            lines.append("✘ the check in this cell did not run to completion (judged by the course grader)")
        hidden = reply.get("status") == "error" and right
        if hidden:  # every answer right, but the cell's hidden tests failed or raised
            right = False
            lines.append(f"✘ a hidden test raised {reply.get('ename', 'an error')}")
        outputs = [new_output("display_data", data={"text/plain": "\n".join(lines)})]
        if not right:
            outputs.append(new_output("error", ename="AssertionError", evalue=lines[-1],
                                      traceback=[f"AssertionError: {lines[-1]}"]))
        cell.outputs = outputs


def autograde_preprocessors(current=None) -> list:
    """nbgrader's autograde preprocessors with :class:`CourseAutograde` in place of ``Execute``."""
    from nbgrader.converters.autograde import Autograde

    chain = list(current) if current else list(Autograde.class_traits()["autograde_preprocessors"].default())
    return [CourseAutograde if p is Execute else p for p in chain]


def configure(c) -> None:
    """Route ``nbgrader autograde`` through the course's trusted checks (call it in ``nbgrader_config.py``)."""
    c.Autograde.autograde_preprocessors = autograde_preprocessors()
