"""Grade exercise notebooks: ``python -m course_lib.authoring.grade NOTEBOOK... [-j N] [--json FILE] [--csv FILE]``.

Lessons: none

Each notebook is executed as a *copy*, in a fresh kernel, alone in a fresh temporary folder (no links to
the learner's files, no ``PYTHONPATH`` into their folder), inside an OS sandbox (bubblewrap: no key, no
gradebook, no other submission, no grader process, no other kernel, no network; the grader refuses without
it unless the insecure mode is chosen), against a ``course_lib`` *without the answer key* (the key-less
modules of its question sets: ``q.q1.expected`` is None there).  See :mod:`course_lib.authoring.sandbox`
for the sandbox and the limits: output bytes per cell and per notebook (every byte of a message), kernel
memory, an overall time budget besides the per-cell timeout, every child process ended.  What graded code
sends out (answers, a function's results) is read only as plain JSON data of bounded depth and size, and
whatever it makes the grader raise fails that answer, or that notebook, only.

The kernel is not trusted to judge: before each check of a grade cell the grader inserts
:func:`course_lib.checks.answers.export_answer`, which sends the answer out as plain data (numbers,
text, printed formulas; a function as its source), and the answers are judged *here*, by the real
questions (:func:`run_and_judge`): text through the bounded parser, functions run on their test inputs in
a fresh interpreter that loads only the setup cell and the function's source, measurement questions on
the grader's own row (``Question.measure``) or on the row the grade cell passes.  A patched checker in
the kernel or a shadowing module changes nothing (docs/CHECKS_API.md, "How the grader judges").  The
kernel's own check records (MIME ``application/vnd.course.check+json``) are only counted and screened
for graded checks outside the grade cells.

Before it runs, the notebook's grade cells are compared with the set's solution notebook (``solutions/``
or ``--solutions DIR``; :mod:`course_lib.authoring.integrity`): edited, deleted and duplicated ones are
reported as *tampered*, and the notebook runs with the solution's grade cells (hidden tests included) and
the learner's other cells (an edited locked setup cell is only a warning: older releases differ there).
Graded checks outside the grade cells are then ignored (and reported).  The learner's code is scanned for
patching of ``course_lib`` or of the modules the checks rely on, and for reads of the answer key; modules
beside the notebook that shadow an import are reported.

Per question it reports ``correct``, ``incorrect``, ``not_attempted`` or ``missing`` (no judged answer:
no grade cell, or its check did not run), with the feedback; a grade cell whose hidden test fails makes
its question incorrect.  Per notebook the status is ``ok``, ``problems``
(a cell raised or timed out, a check is missing...), ``failed`` (the notebook could not be graded to the
end: unreadable, no question set, dead kernel, memory limit, time budget; its score is not a grade) or
``tampered`` (takes precedence).  The exit status is 0 when every notebook is ``ok``, 1 otherwise, 2 for
bad command-line arguments.
"""
from __future__ import annotations

import argparse
import ast
import copy
import csv
import importlib
import io
import json
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_lib.authoring import integrity, kernel, sandbox
from course_lib.checks.answers import ANSWER_MIME, from_plain
from course_lib.checks import CORRECT, INCORRECT, MIME_TYPE, NOT_ATTEMPTED, Question

__all__ = ["MISSING", "STATUSES", "QuestionGrade", "Problem", "NotebookGrade", "grade_notebook",
           "grade_notebooks", "student_id", "format_report", "write_csv", "main", "run_and_judge",
           "inject_exports", "set_aliases", "grade_cell_indices", "setup_sources", "ROW_KEYWORDS"]

MISSING = "missing"
#: Notebook statuses, from best to worst.
STATUSES = ("ok", "problems", "failed", "tampered")
#: Problem kinds after which the notebook's score is not a grade.
FAILED_KINDS = frozenset({"unreadable", "no_questions", "not_run", "dead_kernel", "hung", "memory_limit",
                          "process_limit", "disk_limit", "time_budget"})
#: Problem kinds that mean the notebook or its environment was tampered with.
TAMPERED_KINDS = frozenset({"tampered", "unknown_set"})
#: Default time budget of a notebook, as a multiple of the per-cell timeout.
BUDGET_PER_TIMEOUT = 5
#: Where a student id is read from a notebook's path by default: the folder after ``submissions/``,
#: ``submitted/`` or ``autograded/`` (nbgrader's layout).
STUDENT_RE = r"(?:^|/)(?:submissions?|submitted|autograded)/(?P<student>[^/]+)/"
_STATUS_ORDER = {INCORRECT: 0, NOT_ATTEMPTED: 1, CORRECT: 2}
_TIMEOUT_ENAME = "CellTimeout"
# [ \t]* after ^, not \s*: \s* also spans newlines, and a cell of 20,000 blank lines took 4 s (quadratic)
_IMPORT_RE = re.compile(r"^[ \t]*from[ \t]+course_lib\.checks[ \t]+import[ \t]+(\(?[^#\n]+(?:\n[^#)]*\))?)",
                        re.MULTILINE)
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
    graded_checks: int  # of which strict=True (and, when grade cells are verified, from a grade cell)


@dataclass
class Problem:
    # error | timeout | hung | dead_kernel | memory_limit | process_limit | disk_limit | time_budget | output_limit
    # | missing | duplicate
    # | no_questions | unreadable | not_run | unknown_set | tampered
    kind: str
    message: str
    cell: int | None = None


@dataclass
class NotebookGrade:
    path: str
    sets: list[str] = field(default_factory=list)
    questions: list[QuestionGrade] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    student: str | None = None
    verified: bool = False  # grade cells compared with (and restored from) a solution notebook

    @property
    def score(self) -> float:
        return sum(q.score for q in self.questions)

    @property
    def points(self) -> float:
        return sum(q.points for q in self.questions)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def status(self) -> str:
        kinds = {p.kind for p in self.problems}
        if kinds & TAMPERED_KINDS:
            return "tampered"
        if kinds & FAILED_KINDS:
            return "failed"
        return "problems" if kinds else "ok"

    def to_dict(self) -> dict:
        graded = self.status not in ("failed",)
        return {
            "path": self.path,
            "student": self.student,
            "status": self.status,
            "sets": list(self.sets),
            "questions": [asdict(q) for q in self.questions],
            "problems": [asdict(p) for p in self.problems],
            "warnings": list(self.warnings),
            "grade_cells_verified": self.verified,
            "score": self.score if graded else None,  # a failed notebook has no grade, not 0
            "partial_score": self.score,
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
    except Exception:  # a set whose definitions do not validate: not a set this notebook can be graded on
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


def _solutions_dir() -> Path:
    import course_lib

    return Path(course_lib.__file__).resolve().parent.parent / "solutions"


# ------------------------------------------------------------------------------------------------
# Execution
# ------------------------------------------------------------------------------------------------


class _Hung(Exception):
    """Two cells in a row timed out: the kernel does not respond to interrupts."""


def _tail(fh, limit: int = 600) -> str:
    """The last lines of the kernel's stderr log, without jupyter's transport warnings."""
    try:
        fh.flush()
        fh.seek(0)
        lines = fh.read()[-65536:].decode("utf-8", "replace").splitlines()
    except Exception:
        return ""
    lines = [ln for ln in lines if ln.strip() and "running over TCP without encryption" not in ln]
    return " | ".join(lines)[-limit:]


def _is_record(content: dict) -> bool:
    data = content.get("data") if isinstance(content, dict) else None
    return isinstance(data, dict) and (MIME_TYPE in data or ANSWER_MIME in data)


@dataclass
class _Limits:
    timeout: float
    budget: float
    max_memory: int
    max_cell_output: int
    max_output: int
    isolation: str = sandbox.SANDBOX  # sandbox.SANDBOX or sandbox.INSECURE (already resolved)
    max_disk: int = sandbox.MAX_DISK


class _Where:
    """Cell labels in the learner's numbering (``origin``), restored cells named by their grade id."""

    def __init__(self, nb, origin=None, refs=None):
        self.origin = origin if origin is not None else list(range(len(nb.cells)))
        self.refs = refs or {}

    def index(self, i):
        return self.origin[i] if i is not None and i < len(self.origin) else None

    def label(self, i) -> str:
        j = self.index(i)
        if j is not None:
            return f"cell {j}"
        rc = self.refs.get(i)
        return f"the restored {'grade' if rc.grade else 'locked'} cell {rc.grade_id!r}" if rc else f"cell {i}"


def _execute(nb, name: str, limits: _Limits, kernel_name: str, startup_timeout: float, where: _Where,
             sets=(), after=None):
    """Execute ``nb`` (already a copy) alone in a fresh folder, against the key-less ``course_lib`` of
    ``sets``; then ``after(work, env)`` in that folder; return (cell replies, problems, warnings)."""
    from nbclient.exceptions import DeadKernelError

    replies: dict[int, dict] = {}
    problems: list[Problem] = []
    warnings: list[str] = []
    consecutive_timeouts = [0]
    clock = {"deadline": None}
    seconds = max(1, math.ceil(limits.timeout))
    watch = sandbox.Watch(limits.max_memory, max_disk=limits.max_disk)

    def on_notebook_start(notebook):
        clock["deadline"] = time.monotonic() + limits.budget
        watch.deadline = clock["deadline"]

    def on_cell_start(cell, cell_index):
        if cell.cell_type == "code" and cell.source.strip() and time.monotonic() >= clock["deadline"]:
            raise sandbox.BudgetExceeded(cell_index)

    def timeout_func(cell):
        left = clock["deadline"] - time.monotonic() if clock["deadline"] else limits.timeout
        clock["given"] = max(1, math.ceil(min(limits.timeout, left)))  # nbclient counts whole seconds
        return clock["given"]

    def on_cell_executed(cell, cell_index, execute_reply):
        content = (execute_reply or {}).get("content", {})
        if content.get("status") == "error" and content.get("ename") == _TIMEOUT_ENAME:
            given = clock.get("given", seconds)
            content = {**content, "evalue": f"cell did not finish within {given} s" + (
                "" if given >= seconds else " (what was left of the time budget)")}
        replies[cell_index] = content
        if content.get("status") == "error" and content.get("ename") == _TIMEOUT_ENAME \
                and clock.get("given", seconds) < seconds:
            raise sandbox.BudgetExceeded(cell_index, "cut short")
        if content.get("status") == "error" and content.get("ename") == _TIMEOUT_ENAME:
            consecutive_timeouts[0] += 1
            if consecutive_timeouts[0] >= 2:
                raise _Hung
        else:
            consecutive_timeouts[0] = 0

    sandbox.become_subreaper()
    before = sandbox.snapshot()
    with sandbox.workdir() as work:
        import nbformat

        watch.work = work  # its disk use and its cgroup watched too

        nbformat.write(nb, str(work / Path(name).name))  # the copy that runs, alone in its folder
        keyless = sandbox.write_keyless(work / sandbox.KEYLESS_DIR, sets)  # course_lib without the answer key
        # the course's kernel environment, cleaned; COURSE_FAST as the caller has it, no figures
        env = kernel.launch_env(sandbox.clean_env(work, keyless=keyless), fast=None,
                                backend=kernel.HEADLESS_BACKEND)
        for sub in (".home", ".home/.matplotlib", sandbox.MODEL_CACHE_DIR):
            (work / sub).mkdir(exist_ok=True)
        env["COURSE_GGUF_CACHE"] = str(work / sandbox.MODEL_CACHE_DIR)  # the grader's GGUFs, read-only
        manager = kernel.CurrentEnvKernelManager if kernel_name == kernel.KERNEL_NAME else None
        sockets = None
        if limits.isolation == sandbox.SANDBOX:  # the kernel in bubblewrap, over Unix sockets in the folder
            from jupyter_client.manager import AsyncKernelManager

            sockets = sandbox.socket_dir(work)
            manager = sandbox.sandboxed_kernel_manager(manager or AsyncKernelManager, work, sockets)
            sandbox.hand_over(work)
        else:
            warnings.append(sandbox.INSECURE_WARNING)
        client = sandbox.LimitedClient(
            nb,
            max_cell_output=limits.max_cell_output, max_output=limits.max_output, is_record=_is_record,
            watch=watch,
            timeout=seconds,
            timeout_func=timeout_func,
            startup_timeout=startup_timeout,
            kernel_name=kernel_name,
            # the default kernel is this interpreter's, whatever a user-level kernelspec says
            **({"kernel_manager_class": manager} if manager is not None else {}),
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": _TIMEOUT_ENAME, "evalue": "cell did not finish within its time",
                              "traceback": []},
            resources={"metadata": {"path": str(work)}},
            on_notebook_start=on_notebook_start,
            on_cell_start=on_cell_start,
            on_cell_executed=on_cell_executed,
            shutdown_kernel="immediate",
            iopub_timeout=2,  # only waited for after a timeout: outputs precede the reply otherwise
        )
        log = open(work / ".kernel-stderr.log", "w+b")  # the kernel's own warnings go here, not to the report

        def last():
            return where.index(max(replies)) if replies else None

        try:
            client.execute(env=env, cwd=str(work), stderr=log)
        except _Hung:
            problems.append(Problem("hung", "two cells in a row timed out and the kernel did not respond to "
                                    "interrupts; the remaining cells were not run", last()))
        except sandbox.BudgetExceeded as exc:
            at = exc.args[0]
            what = (f"{where.label(at)} was stopped and later cells were not run" if len(exc.args) > 1
                    else f"cells from {where.label(at)} on were not run")
            problems.append(Problem("time_budget", f"time budget exceeded ({limits.budget:g} s for the whole "
                                    f"notebook): {what}", where.index(at)))
        except DeadKernelError as exc:
            if watch.reason == "memory":
                problems.append(Problem("memory_limit", f"the kernel used more than {limits.max_memory} bytes "
                                        "of memory and was stopped; later cells were not run", last()))
            elif watch.reason == "processes":
                problems.append(Problem("process_limit", f"the kernel ran {sandbox.MAX_PROCESSES} processes and "
                                        "threads or more and was stopped; later cells were not run", last()))
            elif watch.reason == "disk":
                problems.append(Problem("disk_limit", f"the notebook's files took more than {limits.max_disk} "
                                        f"bytes or {sandbox.MAX_FILES} entries and the kernel was stopped; later "
                                        "cells were not run", last()))
            elif watch.reason == "budget":
                problems.append(Problem("time_budget", f"time budget exceeded ({limits.budget:g} s for the "
                                        "whole notebook); the kernel was stopped", last()))
            else:
                tail = sandbox.scrub(_tail(log))
                problems.append(Problem("dead_kernel", f"the kernel died ({exc}); later cells were not run"
                                        + (f"; kernel log: {tail}" if tail else ""), last()))
        except Exception as exc:  # kernel failed to start, etc.
            tail = _tail(log)
            problems.append(Problem("not_run", f"could not execute the notebook: {type(exc).__name__}: {exc}"
                                    + (f"; kernel log: {tail}" if tail else "")))
        finally:
            watch.stop()
            log.close()
            if sockets is not None and not sockets.is_relative_to(work):
                import shutil

                shutil.rmtree(sockets, ignore_errors=True)
            if sockets is not None:  # the sandbox's PID namespace ends with its kernel: let it finish ending
                sandbox.settle(watch.seen)
            left = sandbox.end_processes(before, watch.seen)
            if left:
                warnings.append(f"ended {left} process(es) the notebook left running")
        if after is not None:
            after(work, env)
    for i in client.interrupted:  # the grader's own interrupt (output cap): reported as output_limit below
        if replies.get(i, {}).get("ename") == "KeyboardInterrupt":
            replies[i] = {**replies[i], "status": "stopped"}
    for i, why in sorted(client.capped.items()):
        problems.append(Problem("output_limit", f"{where.label(i)}: {why}", where.index(i)))
    return replies, problems, warnings


# ------------------------------------------------------------------------------------------------
# Answers out of the kernel, judged here
# ------------------------------------------------------------------------------------------------

_EXPORT = ('__import__("course_lib.checks.answers", fromlist=["export_answer"]).export_answer('
           '{set!r}, {question!r}, lambda: ({answer}){measurement})')


#: Keywords of a check call that pass the measured row a measurement question is judged on.
ROW_KEYWORDS = ("row", "measurement")


@dataclass
class _Export:
    cell: int  # index in the graded notebook
    set: str
    question: str


def set_aliases(nb) -> dict[str, str]:
    """Names bound to question sets by the notebook's imports (``from course_lib.checks import ex01 as q``)."""
    out: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = integrity._python(cell.source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.ImportFrom) and node.module == "course_lib.checks":
                for a in node.names:
                    if _load_questions(a.name) is not None:
                        out[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("course_lib.checks."):
                name = node.module.rsplit(".", 1)[-1]
                if _load_questions(name) is not None:
                    for a in node.names:
                        out.setdefault(f"{name}.{a.asname or a.name}", name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("course_lib.checks.") and a.asname:
                        name = a.name.rsplit(".", 1)[-1]
                        if _load_questions(name) is not None:
                            out[a.asname] = name
    return out


def _check_calls(source: str, aliases: dict[str, str]):
    """``(statement, set, question id, call)`` for each top-level ``<set>.<qN>.check(answer, ...)``."""
    tree = integrity._python(source)
    found = []
    for stmt in tree.body if tree is not None else ():
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "check"
                and isinstance(call.func.value, ast.Attribute) and isinstance(call.func.value.value, ast.Name)
                and call.args):
            continue
        alias, qid = call.func.value.value.id, call.func.value.attr
        if alias in aliases:
            found.append((stmt, aliases[alias], qid, call))
    return found


def _is_strict(call) -> bool:
    return any(k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def inject_exports(nb, grade_cells, aliases) -> list[_Export]:
    """Put an :func:`~course_lib.checks.answers.export_answer` call before each check in the grade cells
    of ``nb`` (changed in place): the answer leaves the kernel as plain data and is judged here."""
    exports = []
    for i in sorted(grade_cells):
        cell = nb.cells[i]
        source = cell.source
        tree = integrity._python(source)
        if tree is None:
            continue
        lines = source.splitlines()
        calls = _check_calls(source, aliases)
        for stmt, set_name, qid, call in reversed(calls):
            answer = ast.get_source_segment(source, call.args[0]) or ast.unparse(call.args[0])
            meas = next((k for k in call.keywords if k.arg in ROW_KEYWORDS), None)
            measurement = ""
            if meas is not None:  # the row the check was given, e.g. row=row
                measurement = (f", measurement=lambda: ({ast.unparse(meas.value)}), row_keyword={meas.arg!r}")
            if "\n" in answer:
                answer = ast.unparse(call.args[0])
            line = _EXPORT.format(set=set_name, question=qid, answer=answer, measurement=measurement)
            lines.insert(stmt.lineno - 1, line)
            exports.append(_Export(i, set_name, qid))
        cell.source = "\n".join(lines)
    return exports


def _answer_records(cell) -> list[dict]:
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data", {}) if o.get("output_type") in ("display_data", "execute_result") else {}
        rec = data.get(ANSWER_MIME) if isinstance(data, dict) else None
        if isinstance(rec, str):
            try:
                rec = json.loads(rec)
            except (ValueError, RecursionError, MemoryError):
                rec = None
        if not (isinstance(rec, dict) and isinstance(rec.get("set"), str) and isinstance(rec.get("question"), str)):
            continue
        if not _plain_data(rec):  # forged or too deep or too large: the check ran, its answer is unreadable
            rec = {"set": rec["set"], "question": rec["question"],
                   "error": "the exported answer was not plain data within the limits (forged or too large)"}
        out.append(rec)
    return out


# Runs in a fresh interpreter, against the key-less course_lib: the setup cell of the solution, then
# only the learner's function source; each call's result (or what it raised) is printed as plain data.
_CHILD = r"""
import base64, json, pickle, sys
MARK = "\n@@course-result@@"
req = pickle.loads(base64.b64decode(sys.stdin.buffer.read()))
out = {"results": []}
ns = {"__name__": "__main__"}
from course_lib.checks.answers import to_plain
def first(exc):
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
for src in req["setup"]:
    try:
        exec(compile(src, "<setup cell>", "exec"), ns)
    except BaseException as exc:
        out.setdefault("setup_errors", []).append(f"{type(exc).__name__}: {first(exc)}")
row = None
if req.get("row") is not None:
    row = pickle.loads(req["row"])
if req.get("measure"):
    import importlib
    mod, _, attr = req["measure"].partition(":")
    try:
        row = getattr(importlib.import_module(mod), attr)()
        out["row"] = to_plain(row)
        out["row_pickle"] = base64.b64encode(pickle.dumps(row)).decode()
    except BaseException as exc:
        out["measure_error"] = f"{type(exc).__name__}: {first(exc)}"
    sys.stdout.write(MARK + json.dumps(out) + "\n")
    sys.exit(0)
fn = None
try:
    exec(compile(req["source"], "<your function>", "exec"), ns)
    fn = ns.get(req["name"])
    if not callable(fn):
        fn = ns.get(req["fallback"])
except BaseException as exc:
    out["source_error"] = f"{type(exc).__name__}: {first(exc)}"
calls = [((row,), {})] if row is not None else req["calls"]
if fn is not None and callable(fn):
    for a, k in calls:
        try:
            got = fn(*a, **k)
            out["results"].append({"value": to_plain(got)})
        except NotImplementedError:
            out["results"].append({"raised": ["NotImplementedError", ""]})
        except RecursionError:
            out["results"].append({"raised": ["RecursionError", ""]})
        except BaseException as exc:
            out["results"].append({"raised": [type(exc).__name__, first(exc)]})
elif "source_error" not in out:
    out["source_error"] = f"NameError: no function {req['name']!r} in its source"
sys.stdout.write(MARK + json.dumps(out) + "\n")
"""
_MARK = "\n@@course-result@@"


class _Raised(Exception):
    pass


def _child(request: dict, work: Path, env: dict, limits: _Limits) -> tuple[dict | None, str]:
    """Run :data:`_CHILD` on ``request`` in a fresh subfolder of ``work``: (its result, or None and why)."""
    import base64
    import pickle
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="fn-", dir=str(work)))
    if limits.isolation == sandbox.SANDBOX:
        sandbox.hand_over(work)  # the grading folder, this fresh subfolder included
    rc, out, reason = sandbox.run_python(_CHILD, base64.b64encode(pickle.dumps(request)), env=env, cwd=folder,
                                         timeout=limits.timeout, max_memory=limits.max_memory,
                                         max_output=limits.max_cell_output, max_disk=limits.max_disk,
                                         work=work if limits.isolation == sandbox.SANDBOX else None)
    if reason == "timeout":
        return None, f"did not finish within {limits.timeout:g} s"
    if reason == "memory":
        return None, f"used more than {limits.max_memory} bytes of memory"
    if reason == "processes":
        return None, f"ran {sandbox.MAX_PROCESSES} processes and threads or more"
    if reason == "disk":
        return None, f"wrote more than {limits.max_disk} bytes or {sandbox.MAX_FILES} files"
    at = out.rfind(_MARK)
    if at < 0:
        return None, f"ended without a result (exit status {rc})"
    try:
        got = json.loads(out[at + len(_MARK):].strip().splitlines()[0])
    except (ValueError, IndexError, RecursionError, MemoryError):
        return None, "gave a result the grader could not read"
    if not isinstance(got, dict) or not _plain_data(got):
        return None, "gave a result the grader could not read (not plain data within the limits)"
    return got, ""


#: How deep and how many items the data that crosses from graded code may be (answers, results).
MAX_DATA_DEPTH, MAX_DATA_ITEMS, MAX_DATA_TEXT = 12, 20000, 1 << 20


def _plain_data(x, depth: int = 0, count=None) -> bool:
    """Whether ``x`` is JSON data (dict with str keys, list, str, int, float, bool, None) at most
    :data:`MAX_DATA_DEPTH` deep with at most :data:`MAX_DATA_ITEMS` items: what graded code sends out is
    checked so before the grader reads it."""
    count = [0] if count is None else count
    count[0] += 1
    if depth > MAX_DATA_DEPTH or count[0] > MAX_DATA_ITEMS:
        return False
    if x is None or isinstance(x, (str, int, float, bool)):  # parsed from JSON (nbformat's dict subclass)
        return not isinstance(x, str) or len(x) <= MAX_DATA_TEXT
    if isinstance(x, list):
        return all(_plain_data(v, depth + 1, count) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _plain_data(v, depth + 1, count) for k, v in x.items())
    return False


def _replay(name: str, calls: list, results: list[dict]):
    """A function that gives, for each call of ``calls`` (``(args, kwargs)``), what the learner's function
    gave in the fresh interpreter (its value rebuilt from plain data, or the exception it raised)."""

    def replay(*args, **kwargs):
        for i, (a, k) in enumerate(calls):
            if tuple(args) == tuple(a) and dict(kwargs) == dict(k):
                break
        else:
            raise KeyError(f"no case for {args!r}")
        r = results[i] if i < len(results) else {"raised": ["RuntimeError", "no result"]}
        if "raised" in r:
            ename, msg = (list(r["raised"]) + ["", ""])[:2]
            if ename == "NotImplementedError":
                raise NotImplementedError
            if ename == "RecursionError":
                raise RecursionError
            raise type(str(ename) if str(ename).isidentifier() else "Error", (_Raised,), {})(msg)
        return from_plain(r.get("value"))

    replay.__name__ = name if isinstance(name, str) and name.isidentifier() else "f"
    return replay


def _grader_row(q, setup, work, env, limits):
    """The row a measurement question is judged on, measured by ``q.measure`` in a fresh interpreter that
    runs no learner code: (row as plain data rebuilt, None) or (None, why not)."""
    got, why = _child({"setup": setup, "measure": q.measure}, work, env, limits)
    if got is None or "measure_error" in got:
        return None, why or got["measure_error"]
    return from_plain(got["row"]), None


def _judge(q, rec: dict, setup: list[str], work: Path, env: dict, limits: _Limits):
    """``(status, feedback)`` of question ``q`` for the exported answer ``rec``, judged in this process.

    A measurement question (one with ``bind(row)``) is judged on the grader's own row when it names
    ``measure``, else on the row the learner's kernel passed to the check (``row=`` / ``measurement=``)."""
    answer = rec.get("answer")
    keyword = rec.get("row_keyword") if rec.get("row_keyword") in ROW_KEYWORDS else "row"
    try:
        row = None
        if getattr(q, "measure", None) and callable(getattr(q, "bind", None)):
            row, why = _grader_row(q, setup, work, env, limits)
            if row is None:
                return INCORRECT, f"The grader could not measure the row this question is judged on ({why})."
        elif "measurement" in rec:
            row = from_plain(rec["measurement"])
        judge = q
        if row is not None and callable(getattr(q, "bind", None)):
            judge = q.bind(row)
        fn = answer.get("function") if isinstance(answer, dict) else None
        if fn is not None and judge.kind == "function":
            name, source = (list(fn) + [None, None])[:2]
            if not isinstance(source, str):
                return INCORRECT, "Your function's source could not be read (define it with def in a cell)."
            calls = [ak for ak, _ in judge.cases]
            got, why = _child({"setup": setup, "source": source, "name": str(name), "fallback": str(name),
                               "calls": calls}, work, env, limits)
            if got is None:
                return INCORRECT, f"Your function {why} when the grader ran it."
            if "source_error" in got:
                return INCORRECT, (f"Your function could not be loaded on its own ({got['source_error']}); a graded "
                                   "function may use only its arguments and what the setup cell imports.")
            value = _replay(str(name), calls, got.get("results", []))
        elif fn is not None:
            value = from_plain({"opaque": ["function", f"<function {fn[0]}>", []]})
        else:
            value = from_plain(answer)
        if row is not None and judge is q:  # a question that takes the row itself (no bind)
            r = q.evaluate(value, strict=True, **{keyword: row})
        else:
            r = judge.evaluate(value, strict=True)
        return r.status, r.feedback
    except Exception as exc:  # noqa: BLE001 - whatever graded data makes a checker raise scores this answer only
        text = " ".join(str(_safe_str(exc)).split())[:200]
        return INCORRECT, f"The answer exported from the notebook could not be read ({type(exc).__name__}: {text})."


def _safe_str(x) -> str:
    try:
        return str(x)
    except Exception:  # noqa: BLE001 - a str() that raises
        return "?"


# ------------------------------------------------------------------------------------------------
# Collecting the results
# ------------------------------------------------------------------------------------------------


def _records(cell) -> list[dict]:
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data", {}) if o.get("output_type") in ("display_data", "execute_result") else {}
        rec = data.get(MIME_TYPE) if isinstance(data, dict) else None
        if isinstance(rec, str):
            try:
                rec = json.loads(rec)
            except (ValueError, RecursionError, MemoryError):
                rec = None
        if isinstance(rec, dict) and {"set", "question", "status"} <= set(rec) and _plain_data(rec):
            out.append(rec)
    return out


def _collect(nb, replies: dict[int, dict], grade: NotebookGrade, where: _Where, judged: dict,
             grade_cells=frozenset()) -> None:
    verified = grade.verified
    records: list[tuple[int, dict]] = []
    failed_grade_cells: dict[int, str] = {}  # a grade cell whose hidden test (or anything) raised
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell_records = _records(cell)
        in_grade_cell = i in where.refs and where.refs[i].grade
        for r in cell_records:  # the kernel's own checks: without the key, they only say "received"
            if verified and r.get("strict") and not in_grade_cell:
                grade.problems.append(Problem("tampered", f"{where.label(i)} runs a graded check of "
                                              f"{r.get('set')}.{r.get('question')} outside the grade cells; "
                                              "it was ignored", where.index(i)))
                r = {**r, "strict": False}
            records.append((i, r))
        content = replies.get(i)
        if not content or content.get("status") != "error":
            continue
        ename, evalue = str(content.get("ename", "Error"))[:100], sandbox.scrub(str(content.get("evalue", "")).strip())
        first = evalue.splitlines()[0] if evalue else ""
        here = [st for cell_judged in judged.values() for c, st, _ in cell_judged if c == i]
        if ename == _TIMEOUT_ENAME:
            grade.problems.append(Problem("timeout", f"{where.label(i)} timed out: {evalue}", where.index(i)))
        elif here and all(st == MISSING for st in here):
            grade.problems.append(Problem("error", f"{where.label(i)} raised {ename}" + (f": {first}" if first else ""),
                                          where.index(i)))
        elif ename == "AssertionError" and any(r.get("strict") and r.get("status") in (INCORRECT, NOT_ATTEMPTED)
                                               for r in cell_records):
            continue  # the kernel's graded check refused the answer's form: the judged result says why
        elif here:
            # the answer was exported and judged, then a hidden test failed or raised: a result, as in nbgrader
            failed_grade_cells[i] = ("a hidden test failed" if ename == "AssertionError"
                                     else f"a hidden test raised {ename}") + (f": {first}" if first else "")
        else:
            grade.problems.append(Problem("error", f"{where.label(i)} raised {ename}" + (f": {first}" if first else ""),
                                          where.index(i)))

    for name in sorted({str(r["set"]) for _, r in records} - set(grade.sets)):
        if _load_questions(name) is not None:
            grade.sets.append(name)
        else:
            grade.problems.append(Problem("unknown_set", f"checks report question set {name!r}, which does not "
                                          "exist: forged check records?"))
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
            graded = judged.get((set_name, q.id), [])  # (cell, status, feedback), judged in this process
            feedback_override = None
            if graded:
                i, status, feedback = min(graded, key=lambda g: _STATUS_ORDER.get(g[1], 0))
                if len(graded) > 1:
                    cells = sorted({c for c, _, _ in graded})
                    grade.problems.append(Problem(
                        "duplicate", f"{set_name}.{q.id} is graded {len(graded)} times "
                        f"({', '.join(where.label(c) for c in cells)}): was a grade cell duplicated?",
                        where.index(cells[-1])))
                bad = [failed_grade_cells[c] for c, _, _ in graded if c in failed_grade_cells]
                if bad and status == CORRECT:
                    status, feedback_override = INCORRECT, bad[0]
                if status == MISSING:
                    grade.problems.append(Problem("missing", f"the check of {set_name}.{q.id} ({where.label(i)}) "
                                                  "did not run to completion", where.index(i)))
            else:
                status, feedback = MISSING, ""
                if q.id in source_calls:
                    why = (f"the check of {set_name}.{q.id} ({where.label(source_calls[q.id])}) did not run to "
                           "completion")
                else:
                    why = f"no check of {set_name}.{q.id} in the notebook: was its cell deleted?"
                grade.problems.append(Problem("missing", why, where.index(source_calls.get(q.id))))
            if status not in (CORRECT, INCORRECT, NOT_ATTEMPTED, MISSING):
                status = INCORRECT
            grade.questions.append(QuestionGrade(
                set=set_name, question=q.id, objective=q.objective, points=q.points,
                score=q.points if status == CORRECT else 0.0, status=status,
                feedback=feedback_override or str(feedback), checks=len(mine),
                graded_checks=len(graded)))


def student_id(path, pattern: str | None = None) -> str | None:
    """The student id in a notebook's path: group ``student`` (or the first group) of ``pattern`` (default
    :data:`STUDENT_RE`, the folder after ``submissions/``, ``submitted/`` or ``autograded/``), searched in
    the path with ``/`` separators; None when it does not match."""
    text = Path(path).as_posix()
    m = re.search(pattern or STUDENT_RE, text)
    if not m:
        return None
    if "student" in m.re.groupindex:
        return m.group("student")
    return m.group(1) if m.re.groups else m.group(0)


def _check_arguments(timeout: float = kernel.GRADE_CELL_TIMEOUT_S, time_budget: float | None = None,
                     max_memory: int = sandbox.MAX_MEMORY, max_cell_output: int = sandbox.MAX_CELL_OUTPUT,
                     max_output: int = sandbox.MAX_OUTPUT, max_disk: int = sandbox.MAX_DISK) -> tuple[float, float]:
    """The limits checked (a clear ValueError naming the argument): (timeout, time budget) in seconds."""
    from course_lib.core.validation import require_positive

    timeout = require_positive("timeout", timeout)
    budget = require_positive("time_budget", BUDGET_PER_TIMEOUT * timeout if time_budget is None else time_budget)
    for arg, value in (("max_memory", max_memory), ("max_cell_output", max_cell_output), ("max_output", max_output),
                       ("max_disk", max_disk)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{arg} must be a positive int (bytes), got {value!r}")
    if not math.isfinite(timeout) or not math.isfinite(budget):
        raise ValueError(f"timeout and time_budget must be finite seconds, got {timeout!r} and {budget!r}")
    return timeout, budget


def grade_notebook(path, *, timeout: float = kernel.GRADE_CELL_TIMEOUT_S, kernel_name: str = kernel.KERNEL_NAME,
                   startup_timeout: float = kernel.STARTUP_TIMEOUT_S, time_budget: float | None = None,
                   max_memory: int = sandbox.MAX_MEMORY, max_cell_output: int = sandbox.MAX_CELL_OUTPUT,
                   max_output: int = sandbox.MAX_OUTPUT, solutions=None,
                   student_pattern: str | None = None, isolation: str | None = None,
                   max_disk: int = sandbox.MAX_DISK) -> NotebookGrade:
    """Execute a copy of the notebook at ``path`` alone in a fresh folder and grade it (the file itself is
    never written).

    ``time_budget``: seconds for the whole notebook (default :data:`BUDGET_PER_TIMEOUT` × ``timeout``);
    ``max_memory``, ``max_cell_output``, ``max_output``, ``max_disk``: bytes (see
    :mod:`course_lib.authoring.sandbox`);
    ``solutions``: the folder of solution notebooks whose grade cells are the reference (default the
    course's ``solutions/``; False: do not verify grade cells);
    ``isolation``: :data:`~course_lib.authoring.sandbox.SANDBOX` (default, unless ``$COURSE_GRADE_ISOLATION``
    says otherwise: graded code in bubblewrap; :class:`~course_lib.authoring.sandbox.IsolationUnavailable`
    when it cannot start) or :data:`~course_lib.authoring.sandbox.INSECURE` (opt-in, a warning per notebook).
    """
    isolation = sandbox.resolve_isolation(isolation)
    timeout, budget = _check_arguments(timeout, time_budget, max_memory, max_cell_output, max_output, max_disk)
    src = Path(path)
    grade = NotebookGrade(path=str(path), student=student_id(path, student_pattern))
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
    pre: list[Problem] = []
    mismatch = integrity.set_number_mismatch(src.name, grade.sets)
    if mismatch:
        grade.warnings.append(mismatch)

    where = _Where(nb)
    reference = None
    if solutions is not False and grade.sets:
        folder = _solutions_dir() if solutions is None else Path(solutions)
        reference = integrity.find_reference(folder, grade.sets[0])
        if reference is None:
            grade.warnings.append(f"no solution notebook of {grade.sets[0]} in {folder}: grade cells were not "
                                  "verified")
    if reference is not None:
        nb, origin, refs, findings = integrity.restore(nb, reference)
        where = _Where(nb, origin, refs)
        grade.verified = True
        pre += [Problem(f.kind, f.message, f.cell) for f in findings if f.kind != "warning"]
        grade.warnings += [f.message for f in findings if f.kind == "warning"]
    learner_cells = [(where.index(i), c.source) for i, c in enumerate(nb.cells)
                     if c.cell_type == "code" and i not in where.refs]
    restored_cells = [(None, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code" and i in where.refs]
    for f in (integrity.scan_patching(learner_cells, restored_cells)
              + integrity.shadowing(src.parent, learner_cells + restored_cells)):
        if f.kind == "warning":
            grade.warnings.append(f.message)
        else:
            pre.append(Problem(f.kind, f.message, f.cell))

    limits = _Limits(timeout, budget, max_memory, max_cell_output, max_output, isolation, max_disk)
    replies, problems, warnings, judged = run_and_judge(nb, src.name, grade.sets, limits, kernel_name,
                                                        startup_timeout, where, reference)
    grade.warnings += warnings
    _collect(nb, replies, grade, where, judged)
    grade.problems[:0] = pre + problems
    return grade


def grade_cell_indices(nb, where: _Where, reference) -> set[int]:
    """The cells whose checks are graded: the restored grade cells when verified; otherwise the cells
    nbgrader marks as grade cells and those with a top-level ``check(..., strict=True)``."""
    if reference is not None:
        return {i for i, rc in where.refs.items() if rc.grade}
    aliases = set_aliases(nb)
    out = set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        if meta.get("grade") or any(_is_strict(c) for _, _, _, c in _check_calls(cell.source, aliases)):
            out.add(i)
    return out


def setup_sources(nb, reference) -> list[str]:
    """The code a fresh interpreter runs before a learner's function: the solution's locked cells
    (the setup) when verified, else the notebook's cells that import a question set."""
    if reference is not None:
        return [rc.graded for rc in reference.cells if not rc.grade]
    return [c.source for c in nb.cells if c.cell_type == "code" and "course_lib.checks" in c.source
            and not _CHECK_CALL_RE.search(c.source)][:1]


def run_and_judge(nb, name: str, sets, limits: _Limits, kernel_name: str, startup_timeout: float, where: _Where,
                  reference, grade_cells=None):
    """Inject the answer exports into the grade cells of ``nb`` (a copy), execute it alone against the
    key-less course_lib, and judge each exported answer in this process (functions in a fresh
    interpreter).  Returns (replies, problems, warnings, judged: (set, qid) -> [(cell, status, feedback)])."""
    grade_cells = grade_cell_indices(nb, where, reference) if grade_cells is None else grade_cells
    exports = inject_exports(nb, grade_cells, set_aliases(nb))
    setup = setup_sources(nb, reference)
    judged: dict[tuple[str, str], list] = {}
    questions = {(s_, q.id): q for s_ in sets for q in (_load_questions(s_) or [])}

    def after(work, env):
        deadline = time.monotonic() + limits.budget  # judging has the notebook's time budget of its own
        for e in exports:
            q = questions.get((e.set, e.question))
            if q is None:
                continue
            recs = [r for r in _answer_records(nb.cells[e.cell]) if (r["set"], r["question"]) == (e.set, e.question)]
            if not recs:
                continue  # the export did not run (an earlier error in the cell, a timeout): missing
            rec = recs[-1]
            if "error" in rec:
                status, feedback = MISSING, str(rec["error"])[:300]
            elif time.monotonic() > deadline:
                status, feedback = MISSING, (f"not judged: judging this notebook's answers took more than its time "
                                             f"budget ({limits.budget:g} s)")
            else:
                status, feedback = _judge(q, rec, setup, work, env, limits)
            judged.setdefault((e.set, e.question), []).append((e.cell, status, sandbox.scrub(feedback)))

    replies, problems, warnings = _execute(nb, name, limits, kernel_name, startup_timeout, where, sets, after)
    return replies, problems, warnings, judged


def _grade_one(args: tuple) -> NotebookGrade:
    """:func:`grade_notebook`, whatever happens a grade: an error of the grader on one notebook (a bug that
    hostile data found) fails that notebook only, with its reason, and the class goes on."""
    path, kwargs = args
    try:
        return grade_notebook(path, **kwargs)
    except sandbox.IsolationUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - anything, on this notebook only
        reason = exc
    text = " ".join(sandbox.scrub(_safe_str(reason)).split())[:300]
    return NotebookGrade(path=str(path), student=student_id(path, kwargs.get("student_pattern")),
                         problems=[Problem("not_run", f"the grader could not grade this notebook "
                                           f"({type(reason).__name__}: {text}); the other notebooks are not affected")])


def grade_notebooks(paths, *, jobs: int = 1, **kwargs) -> list[NotebookGrade]:
    """:func:`grade_notebook` on each path, ``jobs`` at a time (worker processes), in the order given; a
    notebook the grader fails on is reported ``failed`` (problem ``not_run``), the others are graded."""
    paths = list(paths)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    kwargs["isolation"] = sandbox.resolve_isolation(kwargs.get("isolation"))  # refuse once, before any notebook
    _check_arguments(**{k: kwargs[k] for k in ("timeout", "time_budget", "max_memory", "max_cell_output",
                                                "max_output", "max_disk") if k in kwargs})
    if jobs == 1 or len(paths) <= 1:
        return [_grade_one((p, kwargs)) for p in paths]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    out: list[NotebookGrade] = []
    ctx = multiprocessing.get_context("spawn")  # no forked copy of this process's threads and event loops
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)), mp_context=ctx) as pool:
        futures = [pool.submit(_grade_one, (p, kwargs)) for p in paths]
        for p, fut in zip(paths, futures):
            try:
                out.append(fut.result())
            except Exception as exc:  # the worker died (killed for memory...)
                out.append(NotebookGrade(path=str(p), student=student_id(p, kwargs.get("student_pattern")),
                                         problems=[Problem("not_run", f"the grading worker failed: "
                                                           f"{type(exc).__name__}: {exc}")]))
    return out


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------


def _pts(x: float) -> str:
    return f"{x:g}"


def format_report(grades: list[NotebookGrade]) -> str:
    lines = []
    for g in grades:
        who = f"  student {g.student}" if g.student else ""
        lines.append(f"{g.path}  [{', '.join(g.sets) or 'no question set'}]{who}  status: {g.status}")
        if g.questions:
            width = max(8, max(len(f"{q.set}.{q.question}") for q in g.questions))
            lines.append(f"  {'question':<{width}}  {'points':>7}  status")
            for q in g.questions:
                pts = f"{_pts(q.score)}/{_pts(q.points)}"
                lines.append(f"  {q.set + '.' + q.question:<{width}}  {pts:>7}  {q.status.replace('_', ' ')}")
                if q.feedback and q.status != CORRECT:  # what the learner was told, one line
                    text = " ".join(str(q.feedback).split())
                    lines.append(f"  {'':<{width}}  {'':>7}    {text if len(text) <= 200 else text[:199] + '…'}")
            total = _pts(g.score) + "/" + _pts(g.points)
            lines.append(f"  {'total':<{width}}  {total:>7}" + ("  (incomplete: not a grade)"
                                                               if g.status == "failed" else ""))
        for p in g.problems:
            lines.append(f"  PROBLEM ({p.kind}): {p.message}")
        for w in g.warnings:
            lines.append(f"  warning: {w}")
        lines.append("")
    if len(grades) > 1:
        counts = ", ".join(f"{sum(g.status == s for g in grades)} {s}" for s in STATUSES)
        lines.append(f"all notebooks: {_pts(sum(g.score for g in grades))}/{_pts(sum(g.points for g in grades))}"
                     f" points, {sum(not g.ok for g in grades)} notebook(s) with problems ({counts})")
    return "\n".join(lines).rstrip() + "\n"


def write_csv(grades: list[NotebookGrade], fh) -> None:
    """One row per notebook: student, path, status, score (empty when failed), points, sets, problem kinds,
    then one column per question (``set.qN``, its score; empty when the notebook lacks it)."""
    columns: list[str] = []
    for g in grades:
        for q in g.questions:
            if f"{q.set}.{q.question}" not in columns:
                columns.append(f"{q.set}.{q.question}")
    w = csv.writer(fh)
    w.writerow(["student", "path", "status", "score", "points", "sets", "problems"] + columns)
    for g in grades:
        scores = {f"{q.set}.{q.question}": _pts(q.score) for q in g.questions}
        w.writerow([g.student or "", g.path, g.status, "" if g.status == "failed" else _pts(g.score),
                    _pts(g.points), " ".join(g.sets), " ".join(sorted({p.kind for p in g.problems}))]
                   + [scores.get(c, "") for c in columns])


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def _bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected bytes such as 4G, 512M or 1048576 (units K, M, G), got {text!r}")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 bytes, got {text!r}")
    return value


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of notebooks at a time, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _regex(text: str) -> str:
    try:
        r = re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc}): {text!r}") from None
    if not r.groups:
        raise argparse.ArgumentTypeError(f"needs a group, (?P<student>...) or (...), for the id: {text!r}")
    return text


def _check_outputs(parser, args) -> None:
    """Output files: their folder exists and is writable, none is an input notebook, none is given twice."""
    inputs = {}
    for p in args.notebooks:
        try:
            inputs[os.path.realpath(p)] = p
        except OSError:
            pass
    outs = {}
    for flag in ("json", "csv"):
        value = getattr(args, flag)
        if value is None or value == "-":
            continue
        real = os.path.realpath(value)
        if real in inputs:
            parser.error(f"--{flag} {value} is the input notebook {inputs[real]}: refusing to overwrite it")
        if real in outs:
            parser.error(f"--{flag} and --{outs[real]} name the same file {value}")
        outs[real] = flag
        folder = os.path.dirname(real) or "."
        if not os.path.isdir(folder):
            parser.error(f"--{flag} {value}: no such directory {folder}")
        if not os.access(folder, os.W_OK):
            parser.error(f"--{flag} {value}: directory {folder} is not writable")
        if os.path.isdir(real):
            parser.error(f"--{flag} {value} is a directory")
    if args.json == "-" and args.csv == "-":
        parser.error("--json - and --csv - cannot both write to stdout")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.authoring.grade",
        description="Execute copies of exercise notebooks, each alone in a fresh folder, and report per-question "
                    "results; grade cells are verified against (and restored from) the solution notebooks.")
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="notebook files (.ipynb)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE ('-' = stdout)")
    parser.add_argument("--csv", metavar="FILE", help="also write one row per notebook as CSV to FILE ('-' = stdout)")
    parser.add_argument("-j", "--jobs", type=_jobs, default=1, metavar="N",
                        help="grade N notebooks at a time (worker processes; default 1)")
    parser.add_argument("--timeout", type=_seconds, default=float(kernel.GRADE_CELL_TIMEOUT_S), metavar="S",
                        help="seconds each cell may run before it is interrupted "
                             f"(default {kernel.GRADE_CELL_TIMEOUT_S})")
    parser.add_argument("--time-budget", type=_seconds, default=None, metavar="S",
                        help=f"seconds for a whole notebook (default {BUDGET_PER_TIMEOUT} x --timeout)")
    parser.add_argument("--max-memory", type=_bytes, default=sandbox.MAX_MEMORY, metavar="BYTES",
                        help="resident memory of the kernel and its children, e.g. 2G (default 4G)")
    parser.add_argument("--max-cell-output", type=_bytes, default=sandbox.MAX_CELL_OUTPUT, metavar="BYTES",
                        help="output kept per cell (default 1M)")
    parser.add_argument("--max-output", type=_bytes, default=sandbox.MAX_OUTPUT, metavar="BYTES",
                        help="output a notebook may send in all; beyond it the printing cell is interrupted "
                             "(default 16M)")
    parser.add_argument("--max-disk", type=_bytes, default=sandbox.MAX_DISK, metavar="BYTES",
                        help="disk the notebook's grading folder may hold, its /tmp included (default 8G)")
    parser.add_argument("--solutions", metavar="DIR", default=None,
                        help="folder of the solution notebooks whose grade cells are the reference "
                             "(default: the course's solutions/)")
    parser.add_argument("--no-verify", action="store_true",
                        help="do not compare grade cells with the solutions (not recommended)")
    parser.add_argument("--student-id-from", type=_regex, default=None, metavar="REGEX",
                        help="regular expression searched in each notebook's path; its group 'student' (or "
                             "first group) is the student id (default: the folder after submissions/, "
                             "submitted/ or autograded/)")
    parser.add_argument("--insecure", action="store_true",
                        help="grade without the sandbox (graded code runs as your user and can read the answer "
                             "key, the gradebook and other submissions): only for notebooks you trust")
    parser.add_argument("--kernel", default=kernel.KERNEL_NAME,
                        help=f"Jupyter kernel name (default {kernel.KERNEL_NAME}: the ipykernel of this Python)")
    args = parser.parse_args(argv)
    _check_outputs(parser, args)
    if args.solutions is not None and not Path(args.solutions).is_dir():
        parser.error(f"--solutions {args.solutions}: no such directory")
    try:
        isolation = sandbox.resolve_isolation(sandbox.INSECURE if args.insecure else None)
    except sandbox.IsolationUnavailable as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    if isolation == sandbox.INSECURE:
        sys.stderr.write(f"WARNING: {sandbox.INSECURE_WARNING.replace('graded', 'grading', 1)}\n")
    grades = grade_notebooks(
        args.notebooks, jobs=args.jobs, timeout=args.timeout, kernel_name=args.kernel,
        time_budget=args.time_budget, max_memory=args.max_memory, max_cell_output=args.max_cell_output,
        max_output=args.max_output, max_disk=args.max_disk, solutions=False if args.no_verify else args.solutions,
        student_pattern=args.student_id_from, isolation=isolation)
    graded = [g for g in grades if g.status != "failed"]
    report = {
        "notebooks": [g.to_dict() for g in grades],
        "score": sum(g.score for g in graded),
        "points": sum(g.points for g in grades),
        "statuses": {s: sum(g.status == s for g in grades) for s in STATUSES},
        "ok": all(g.ok for g in grades),
    }
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.csv == "-":
        write_csv(grades, sys.stdout)
    else:
        sys.stdout.write(format_report(grades))
    if args.json and args.json != "-":
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.csv and args.csv != "-":
        buf = io.StringIO()
        write_csv(grades, buf)
        Path(args.csv).write_text(buf.getvalue(), encoding="utf-8")
    return 0 if report["ok"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
