"""Grade exercise notebooks: ``python -m course_lib.grade NOTEBOOK... [--json FILE] [--timeout S]``.

Each notebook is executed as a *copy*, in a fresh kernel, in a temporary directory (the learner's
file is only read).  The temporary directory links to the notebook's sibling files and the kernel's
``PYTHONPATH`` starts with the notebook's own directory and the course root, so relative paths and
imports behave as they do when the learner runs the notebook.  Every ``q.qN.check(...)`` publishes
a machine-readable record (MIME type ``application/vnd.course.check+json``, see
:mod:`course_lib.checks.core`); the grader collects those records and compares them with the question
set the notebook imports.

Per question it reports ``correct``, ``incorrect``, ``not_attempted`` or ``missing``.  Graded checks
(``strict=True``, the nbgrader grade cells) decide when present; otherwise the last self-check counts.
A notebook has a *problem* when a cell raises (other than a failed strict check), a cell times out, the
kernel dies, a question's check is missing (cell deleted) or a graded check appears twice (cell
duplicated), or no question set can be found.  The exit status is 0 when no notebook has a problem,
1 otherwise, 2 for bad command-line arguments.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_lib.authoring import kernel
from course_lib.checks.core import CORRECT, INCORRECT, MIME_TYPE, NOT_ATTEMPTED, Question

__all__ = ["MISSING", "QuestionGrade", "Problem", "NotebookGrade", "grade_notebook", "main"]

MISSING = "missing"
_STATUS_ORDER = {INCORRECT: 0, NOT_ATTEMPTED: 1, CORRECT: 2}
_TIMEOUT_ENAME = "CellTimeout"
_IMPORT_RE = re.compile(r"^\s*from\s+course_lib\.checks\s+import\s+(\(?[^#\n]+(?:\n[^#)]*\))?)", re.MULTILINE)
_MODULE_RE = re.compile(r"course_lib\.checks\.(\w+)")
_CHECK_CALL_RE = re.compile(r"\.(\w+)\s*\.\s*check\s*\(")


@dataclass
class QuestionGrade:
    set: str
    question: str
    objective: str
    points: float
    score: float
    status: str
    feedback: str
    checks: int  # number of check records seen for this question
    graded_checks: int  # of which strict=True


@dataclass
class Problem:
    kind: str  # error | timeout | dead_kernel | missing | duplicate | no_questions | unreadable | unknown_set
    message: str
    cell: int | None = None


@dataclass
class NotebookGrade:
    path: str
    sets: list[str] = field(default_factory=list)
    questions: list[QuestionGrade] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(q.score for q in self.questions)

    @property
    def points(self) -> float:
        return sum(q.points for q in self.questions)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "sets": list(self.sets),
            "questions": [asdict(q) for q in self.questions],
            "problems": [asdict(p) for p in self.problems],
            "score": self.score,
            "points": self.points,
            "ok": self.ok,
        }


# ------------------------------------------------------------------------------------------------
# Question sets used by a notebook
# ------------------------------------------------------------------------------------------------


def _load_questions(name: str) -> list[Question] | None:
    """The questions of ``course_lib.checks.<name>``, or None when there is no such set."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name) or name == "core":
        return None
    try:
        module = importlib.import_module(f"course_lib.checks.{name}")
    except ImportError:
        return None
    questions = getattr(module, "QUESTIONS", None)
    if not isinstance(questions, (list, tuple)):
        return None
    return list(questions)


def sets_in_source(nb) -> list[str]:
    """Names imported from ``course_lib.checks`` in the notebook's code cells (in order)."""
    names: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = cell.source
        for m in _IMPORT_RE.finditer(src):
            for part in m.group(1).strip("() \n").replace("\n", " ").split(","):
                token = part.strip().split(" as ")[0].strip()
                if token:
                    names.append(token)
        names.extend(_MODULE_RE.findall(src))
    out = []
    for n in names:
        if n not in out and _load_questions(n) is not None:
            out.append(n)
    return out


# ------------------------------------------------------------------------------------------------
# Execution
# ------------------------------------------------------------------------------------------------


class _Hung(Exception):
    """Two cells in a row timed out: the kernel does not respond to interrupts."""


def _prepare_workdir(src: Path, workdir: Path) -> None:
    """Link the notebook's siblings into ``workdir`` so relative paths work (notebooks excluded)."""
    for entry in src.parent.iterdir():
        if entry.suffix == ".ipynb" or entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        target = workdir / entry.name
        if target.exists():
            continue
        try:
            target.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        except OSError:  # no symlinks (some filesystems): relative paths then need PYTHONPATH only
            pass


def _tail(fh, limit: int = 600) -> str:
    """The last lines of the kernel's stderr log, without jupyter's transport warnings."""
    try:
        fh.flush()
        fh.seek(0)
        lines = fh.read().decode("utf-8", "replace").splitlines()
    except Exception:
        return ""
    lines = [ln for ln in lines if ln.strip() and "running over TCP without encryption" not in ln]
    return " | ".join(lines)[-limit:]


def _course_root() -> Path:
    import course_lib

    return Path(course_lib.__file__).resolve().parent.parent


def _execute(nb, src: Path, timeout: float, kernel_name: str, startup_timeout: float):
    """Execute ``nb`` (already a copy); return (cell reports, problems)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    replies: dict[int, dict] = {}
    problems: list[Problem] = []
    consecutive_timeouts = [0]

    def on_cell_executed(cell, cell_index, execute_reply):
        content = (execute_reply or {}).get("content", {})
        replies[cell_index] = content
        if content.get("status") == "error" and content.get("ename") == _TIMEOUT_ENAME:
            consecutive_timeouts[0] += 1
            if consecutive_timeouts[0] >= 2:
                raise _Hung
        else:
            consecutive_timeouts[0] = 0

    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        workdir = Path(tmp)
        _prepare_workdir(src, workdir)
        import nbformat

        nbformat.write(nb, str(workdir / src.name))  # the copy that runs, for the record
        paths = [str(src.parent.resolve()), str(_course_root())]
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        # the course's kernel environment; COURSE_FAST as the caller has it, no figures
        env = kernel.launch_env({**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
                                fast=None, backend=kernel.HEADLESS_BACKEND)
        seconds = max(1, math.ceil(timeout))  # nbclient counts whole seconds
        client = NotebookClient(
            nb,
            timeout=seconds,
            startup_timeout=startup_timeout,
            kernel_name=kernel_name,
            # the default kernel is this interpreter's, whatever a user-level kernelspec says
            **({"kernel_manager_class": kernel.CurrentEnvKernelManager} if kernel_name == kernel.KERNEL_NAME else {}),
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": _TIMEOUT_ENAME, "evalue": f"cell did not finish within {seconds} s",
                              "traceback": []},
            resources={"metadata": {"path": str(workdir)}},
            on_cell_executed=on_cell_executed,
            shutdown_kernel="immediate",
            iopub_timeout=2,  # only waited for after a timeout: outputs precede the reply otherwise
        )
        log_path = workdir / ".kernel-stderr.log"
        log = open(log_path, "w+b")  # the kernel's own warnings go here, not to the report
        try:
            client.execute(env=env, cwd=str(workdir), stderr=log)
        except _Hung:
            idx = max(replies) if replies else None
            problems.append(Problem("timeout", "two cells in a row timed out and the kernel did not respond to "
                                    "interrupts; the remaining cells were not run", idx))
        except DeadKernelError as exc:
            tail = _tail(log)
            problems.append(Problem("dead_kernel", f"the kernel died ({exc}); later cells were not run"
                                    + (f"; kernel log: {tail}" if tail else ""), max(replies) if replies else None))
        except Exception as exc:  # kernel failed to start, etc.
            tail = _tail(log)
            problems.append(Problem("error", f"could not execute the notebook: {type(exc).__name__}: {exc}"
                                    + (f"; kernel log: {tail}" if tail else "")))
        finally:
            log.close()
    return replies, problems


# ------------------------------------------------------------------------------------------------
# Collecting the results
# ------------------------------------------------------------------------------------------------


def _records(cell) -> list[dict]:
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data", {}) if o.get("output_type") in ("display_data", "execute_result") else {}
        rec = data.get(MIME_TYPE)
        if isinstance(rec, str):
            try:
                rec = json.loads(rec)
            except ValueError:
                rec = None
        if isinstance(rec, dict) and {"set", "question", "status"} <= set(rec):
            out.append(rec)
    return out


def _collect(nb, replies: dict[int, dict], grade: NotebookGrade) -> None:
    records: list[tuple[int, dict]] = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell_records = _records(cell)
        records.extend((i, r) for r in cell_records)
        content = replies.get(i)
        if not content or content.get("status") != "error":
            continue
        ename, evalue = content.get("ename", "Error"), str(content.get("evalue", "")).strip()
        if ename == _TIMEOUT_ENAME:
            grade.problems.append(Problem("timeout", f"cell {i} timed out: {evalue}", i))
        elif ename == "AssertionError" and any(r.get("strict") and r.get("status") != CORRECT for r in cell_records):
            continue  # a graded check that failed: already a result, not a crash
        else:
            first = evalue.splitlines()[0] if evalue else ""
            grade.problems.append(Problem("error", f"cell {i} raised {ename}" + (f": {first}" if first else ""), i))

    for name in sorted({r["set"] for _, r in records} - set(grade.sets)):
        if _load_questions(str(name)) is not None:
            grade.sets.append(str(name))
        else:
            grade.problems.append(Problem("unknown_set", f"checks report question set {name!r}, which does not exist"))
    if not grade.sets:
        grade.problems.append(Problem("no_questions", "no question set imported from course_lib.checks"))
        return

    source_calls = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for qid in _CHECK_CALL_RE.findall(cell.source):
                source_calls.setdefault(qid, i)

    for set_name in grade.sets:
        for q in _load_questions(set_name) or []:
            mine = [(i, r) for i, r in records if r.get("set") == set_name and r.get("question") == q.id]
            graded = [(i, r) for i, r in mine if r.get("strict")]
            if graded:
                i, rec = min(graded, key=lambda ir: _STATUS_ORDER.get(ir[1].get("status"), 0))
                status = rec.get("status")
                if len(graded) > 1:
                    cells = sorted({i for i, _ in graded})
                    grade.problems.append(Problem(
                        "duplicate", f"{set_name}.{q.id} is graded {len(graded)} times (cells "
                        f"{', '.join(map(str, cells))}): was a grade cell duplicated?", cells[-1]))
            elif mine:
                i, rec = mine[-1]
                status = rec.get("status")
            else:
                rec, status = {}, MISSING
                if q.id in source_calls:
                    why = f"the check of {set_name}.{q.id} (cell {source_calls[q.id]}) did not run to completion"
                else:
                    why = f"no check of {set_name}.{q.id} in the notebook: was its cell deleted?"
                grade.problems.append(Problem("missing", why, source_calls.get(q.id)))
            if status not in (CORRECT, INCORRECT, NOT_ATTEMPTED, MISSING):
                status = INCORRECT
            grade.questions.append(QuestionGrade(
                set=set_name, question=q.id, objective=q.objective, points=q.points,
                score=q.points if status == CORRECT else 0.0, status=status,
                feedback=str(rec.get("feedback", "")), checks=len(mine), graded_checks=len(graded)))


def grade_notebook(path, *, timeout: float = kernel.GRADE_CELL_TIMEOUT_S, kernel_name: str = kernel.KERNEL_NAME,
                   startup_timeout: float = kernel.STARTUP_TIMEOUT_S) -> NotebookGrade:
    """Execute a copy of the notebook at ``path`` and grade it (the file itself is never written)."""
    from course_lib.core.validation import require_positive

    timeout = require_positive("timeout", timeout)
    src = Path(path)
    grade = NotebookGrade(path=str(path))
    try:
        import nbformat

        original = nbformat.read(str(src), as_version=4)
    except FileNotFoundError:
        grade.problems.append(Problem("unreadable", f"no such file: {path}"))
        return grade
    except Exception as exc:
        grade.problems.append(Problem("unreadable", f"not a readable notebook: {type(exc).__name__}: {exc}"))
        return grade
    nb = copy.deepcopy(original)
    grade.sets = sets_in_source(nb)
    replies, problems = _execute(nb, src, timeout, kernel_name, startup_timeout)
    _collect(nb, replies, grade)
    grade.problems[:0] = problems
    return grade


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------


def _pts(x: float) -> str:
    return f"{x:g}"


def format_report(grades: list[NotebookGrade]) -> str:
    lines = []
    for g in grades:
        lines.append(f"{g.path}  [{', '.join(g.sets) or 'no question set'}]")
        if g.questions:
            width = max(8, max(len(f"{q.set}.{q.question}") for q in g.questions))
            lines.append(f"  {'question':<{width}}  {'points':>7}  status")
            for q in g.questions:
                pts = f"{_pts(q.score)}/{_pts(q.points)}"
                lines.append(f"  {q.set + '.' + q.question:<{width}}  {pts:>7}  {q.status.replace('_', ' ')}")
            lines.append(f"  {'total':<{width}}  {_pts(g.score) + '/' + _pts(g.points):>7}")
        for p in g.problems:
            lines.append(f"  PROBLEM ({p.kind}): {p.message}")
        lines.append("")
    if len(grades) > 1:
        lines.append(f"all notebooks: {_pts(sum(g.score for g in grades))}/{_pts(sum(g.points for g in grades))}"
                     f" points, {sum(not g.ok for g in grades)} notebook(s) with problems")
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grade",
        description="Execute copies of exercise notebooks and report per-question results.")
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="notebook files (.ipynb)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE ('-' = stdout)")
    parser.add_argument("--timeout", type=float, default=float(kernel.GRADE_CELL_TIMEOUT_S), metavar="S",
                        help="seconds each cell may run before it is interrupted "
                             f"(default {kernel.GRADE_CELL_TIMEOUT_S})")
    parser.add_argument("--kernel", default=kernel.KERNEL_NAME,
                        help=f"Jupyter kernel name (default {kernel.KERNEL_NAME}: the ipykernel of this Python)")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error("--timeout must be > 0 seconds")
    grades = [grade_notebook(p, timeout=args.timeout, kernel_name=args.kernel) for p in args.notebooks]
    report = {
        "notebooks": [g.to_dict() for g in grades],
        "score": sum(g.score for g in grades),
        "points": sum(g.points for g in grades),
        "ok": all(g.ok for g in grades),
    }
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(grades))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["ok"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
