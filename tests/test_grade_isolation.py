"""The grader against a hostile notebook: isolation, limits, tampering, and grading many at once.

Each test that starts kernels says so; the notebooks are tiny (question set ``_demo``, the fixture
solution in tests/fixtures/solutions) so the file costs a handful of kernel starts.
"""
from __future__ import annotations

import contextlib
import copy
import csv
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course_lib.authoring import grade, integrity, sandbox

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOLUTIONS = FIXTURES / "solutions"
SOLUTION = SOLUTIONS / "00_demo.ipynb"


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _index(nb, grade_id):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _plain(cells, path: Path) -> Path:
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


ATTACK = '''
import json, os, subprocess, sys, tempfile
SPY = {spy!r}
for name in ("notes.txt", "sub/data.txt"):          # through sibling links, if there were any
    try:
        open(name, "w").write("overwritten")
    except OSError:
        pass
try:
    os.remove("sub/data.txt")
except OSError:
    pass
for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):   # into the learner's folder, if on the path
    try:
        open(os.path.join(p, "pwned.txt"), "w").write("x")
    except OSError:
        pass
open("new_file.txt", "w").write("x")
try:
    import helper  # beside the learner's notebook: not available when grading
except ImportError:
    pass
fd, tmpname = tempfile.mkstemp()
os.close(fd)
where = {{"cwd": os.getcwd(), "tmp": tmpname, "pythonpath": os.environ.get("PYTHONPATH", ""), "sys_path": sys.path}}
print("WHERE " + json.dumps(where))
try:  # outside the grading folder: the sandbox does not let it
    json.dump(where, open(os.path.join(SPY, "where.json"), "w"))
except OSError:
    pass
# a detached grandchild: setsid, its parent exits (the kernel's process group does not hold it)
sleeper = "import os, time; os.setsid(); time.sleep(300)"
middle = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', %r, %r])" % (sleeper, {token!r})
subprocess.Popen([sys.executable, "-c", middle]).wait()
if False:  # never runs: the static scan still reports it
    type(q.q1).evaluate = lambda self, answer, strict=False: None
'''


@pytest.mark.notebook
def test_a_hostile_notebook_is_isolated_restored_and_reported(tmp_path, monkeypatch):
    """One kernel: sibling files untouched, writes stay in the deleted temp folder, no PYTHONPATH into the
    learner's folder, a setsid grandchild killed, edited / deleted / duplicated grade cells restored (hidden
    tests included) and reported, a patch of Question.evaluate and a shadowing sympy.py reported (status
    tampered)."""
    learner = tmp_path / "learner"
    (learner / "sub").mkdir(parents=True)
    (learner / "notes.txt").write_text("my notes\n")
    (learner / "sub" / "data.txt").write_text("data\n")
    (learner / "sympy.py").write_text("raise SystemExit('shadowed')\n")
    (learner / "helper.py").write_text("WEIGHTS = 14e9\n")
    spy = tmp_path / "spy"
    spy.mkdir()
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(systmp))  # where the grader's own temp folders go

    token = f"course-grade-test-sleeper-{os.getpid()}-{time.time_ns()}"  # in the grandchild's command line
    ran = []
    collect = grade._collect
    monkeypatch.setattr(grade, "_collect", lambda nb, *a, **k: (ran.append(nb), collect(nb, *a, **k))[1])
    nb = nbformat.read(str(SOLUTION), as_version=4)
    nb.cells.insert(2, new_code_cell(ATTACK.format(spy=str(spy), token=token)))
    _cell(nb, "q2-answer").source = "step_ms = 999.0\nq.q2.check(step_ms)"               # a wrong answer
    _cell(nb, "q2-grade").source = "q.q2.check(q.q2.expected, strict=True)"              # edited grade cell
    _cell(nb, "q4-answer").source = (  # right on the question's cases, wrong on the hidden test's
        "def kv_cache_bytes(layers, kv_heads, head_dim, tokens, bytes_per_element=2):\n"
        "    return 0 if head_dim == 1 else 2 * layers * kv_heads * head_dim * tokens * bytes_per_element\n"
        "q.q4.check(kv_cache_bytes)")
    del nb.cells[_index(nb, "q5-grade")]                                                 # deleted
    i6 = _index(nb, "q6-grade")
    dup = copy.deepcopy(nb.cells[i6])
    dup.id = "copied-q6-grade"
    nb.cells.insert(i6 + 1, dup)                                                         # duplicated
    path = learner / "00_demo.ipynb"
    nbformat.write(nb, str(path))
    before = {p.relative_to(learner): p.read_bytes() for p in learner.rglob("*") if p.is_file()}

    g = grade.grade_notebook(path, timeout=30, solutions=SOLUTIONS)

    after = {p.relative_to(learner): p.read_bytes() for p in learner.rglob("*") if p.is_file()}
    assert after == before, "the learner's folder is never written"
    printed = "".join(o.get("text", "") for o in ran[0].cells[2].outputs if o.get("output_type") == "stream")
    where = json.loads(printed.split("WHERE ", 1)[1].splitlines()[0])
    if sandbox.resolve_isolation() == sandbox.SANDBOX:
        assert not (spy / "where.json").exists(), "the sandbox lets graded code write only its grading folder"
    assert Path(where["cwd"]).parent == systmp and Path(where["tmp"]).is_relative_to(where["cwd"])
    assert not Path(where["cwd"]).exists(), "the grading folder, and what graded code wrote there, is removed"
    assert list(systmp.iterdir()) == [], "nothing is left in the temporary directory"
    assert str(learner) not in where["pythonpath"] and str(learner) not in where["sys_path"]
    time.sleep(0.5)
    left = [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]
    assert left == [], "the setsid grandchild was ended"
    if sandbox.resolve_isolation() == sandbox.INSECURE:  # in the sandbox, its PID namespace ends with the kernel
        assert any("ended" in w and "process" in w for w in g.warnings), g.warnings
    assert any("imports 'helper' from helper.py beside it" in w for w in g.warnings), g.warnings

    assert g.verified and g.status == "tampered"
    messages = " | ".join(p.message for p in g.problems if p.kind == "tampered")
    assert "grade cell 'q2-grade' (cell 8) was edited" in messages
    assert "grade cell 'q5-grade' was deleted" in messages
    assert "grade cell 'q6-grade' is duplicated" in messages
    assert "patches type(q.q1).evaluate" in messages
    assert "sympy.py beside the notebook would shadow the module 'sympy'" in messages
    statuses = {q.question: (q.status, q.graded_checks) for q in g.questions}
    assert statuses["q2"] == ("incorrect", 1), "the restored grade cell judged the learner's own answer"
    assert statuses["q5"] == ("correct", 1) and statuses["q6"] == ("correct", 1)
    assert statuses["q1"] == statuses["q3"] == ("correct", 1)
    q4 = next(q for q in g.questions if q.question == "q4")
    assert (q4.status, q4.feedback) == ("incorrect", "a hidden test failed"), "hidden tests are restored and run"
    assert not [p for p in g.problems if p.kind not in ("tampered",)], g.problems


@contextlib.contextmanager
def growth():
    """Yields a one-item list that holds, on exit, how many bytes this process's RSS grew above its start at
    its peak (sampled every 50 ms)."""
    me = psutil.Process()
    base = me.memory_info().rss
    grew = [0]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            grew[0] = max(grew[0], me.memory_info().rss - base)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield grew
    finally:
        done.set()
        t.join()


@pytest.mark.notebook
def test_output_flood_and_time_budget_are_bounded(tmp_path):
    """One kernel: ``while True: print`` is cut at the notebook's output cap while it runs (the grader's
    memory stays bounded), then sleeping cells hit the overall time budget, reported as such."""
    flood = "while True:\n    print('x' * 10000)"
    sleeps = ["import time\ntime.sleep(1.5)"] * 5 + ["open('never.txt', 'w')"]
    path = _plain([flood] + sleeps, tmp_path / "flood.ipynb")
    start = time.monotonic()
    with growth() as grew:
        g = grade.grade_notebook(path, timeout=2, time_budget=3.5, max_output=8 << 20, solutions=False)
    elapsed = time.monotonic() - start
    assert grew[0] < 200 << 20, f"the grader grew by {grew[0] >> 20} MiB"
    kinds = [p.kind for p in g.problems]
    assert "output_limit" in kinds and "time_budget" in kinds, g.problems
    assert "KeyboardInterrupt" not in " ".join(p.message for p in g.problems), "the grader's own interrupt"
    flood_problem = next(p for p in g.problems if p.kind == "output_limit")
    assert flood_problem.cell == 0 and "interrupted" in flood_problem.message
    assert "time budget exceeded (3.5 s" in " ".join(p.message for p in g.problems)
    assert g.status == "failed"
    assert elapsed < 25, f"grading took {elapsed:.0f} s"  # kernel start + 3.5 s budget + one cut-short cell


@pytest.mark.notebook
def test_a_kernel_past_the_memory_limit_is_stopped(tmp_path):
    """One kernel, grown by 32 MiB blocks: stopped past --max-memory (RSS, not an address-space limit)."""
    cells = ["blocks = []\nfor _ in range(100):\n    blocks.append(b'x' * (32 << 20))", "x = 1"]
    path = _plain(cells, tmp_path / "hog.ipynb")
    g = grade.grade_notebook(path, timeout=30, max_memory=400 << 20, solutions=False)
    problem = next(p for p in g.problems if p.kind == "memory_limit")
    assert problem.cell is None or problem.cell <= 0
    assert "more than 419430400 bytes" in problem.message and g.status == "failed"


@pytest.mark.notebook
def test_many_notebooks_with_jobs_csv_json_and_student_ids(tmp_path, capsys):
    """-j 2 over three students (two kernels at once, one unreadable file): CSV and JSON carry the student
    ids from submissions/<student>/, the unreadable one is 'failed' with no score (not 0)."""
    subs = tmp_path / "submissions"
    for student, src in (("alice", SOLUTION), ("bob", FIXTURES / "exercises" / "00_demo.ipynb")):
        (subs / student).mkdir(parents=True)
        shutil.copy(src, subs / student / "00_demo.ipynb")
    (subs / "carol").mkdir()
    (subs / "carol" / "00_demo.ipynb").write_text("{not json")
    paths = [str(subs / s / "00_demo.ipynb") for s in ("alice", "bob", "carol")]
    out_csv, out_json = tmp_path / "grades.csv", tmp_path / "grades.json"
    rc = grade.main(paths + ["-j", "2", "--timeout", "60", "--solutions", str(SOLUTIONS),
                             "--csv", str(out_csv), "--json", str(out_json)])
    assert rc == 1
    rows = list(csv.DictReader(out_csv.open()))
    assert [(r["student"], r["status"], r["score"], r["points"]) for r in rows] == [
        ("alice", "ok", "8", "8"), ("bob", "ok", "0", "8"), ("carol", "failed", "", "0")]
    assert rows[0]["_demo.q4"] == "2" and rows[1]["_demo.q4"] == "0" and rows[2]["_demo.q4"] == ""
    assert rows[2]["problems"] == "unreadable"
    report = json.loads(out_json.read_text())
    assert [n["student"] for n in report["notebooks"]] == ["alice", "bob", "carol"]
    assert report["notebooks"][2]["score"] is None and report["notebooks"][1]["score"] == 0
    assert report["statuses"] == {"ok": 2, "problems": 0, "failed": 1, "tampered": 0}
    assert all(n["grade_cells_verified"] for n in report["notebooks"][:2])
    assert "status: failed" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# No kernel
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, message", [
    (["--json", "/nonexistent/dir/out.json"], "no such directory /nonexistent/dir"),
    (["--csv", "/nonexistent/dir/out.csv"], "no such directory /nonexistent/dir"),
    (["--timeout", "inf"], "finite number of seconds"),
    (["--timeout", "nan"], "finite number of seconds"),
    (["--timeout", "-3"], "finite number of seconds > 0"),
    (["--timeout", "soon"], "expected a number of seconds"),
    (["--time-budget", "0"], "> 0"),
    (["--max-memory", "lots"], "expected bytes such as 4G"),
    (["-j", "0"], "must be >= 1"),
    (["--student-id-from", "("], "not a regular expression"),
    (["--student-id-from", "submissions/"], "needs a group"),
    (["--solutions", "/nonexistent/solutions"], "--solutions /nonexistent/solutions: no such directory"),
])
def test_bad_flags_are_argparse_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as info:
        grade.main([str(SOLUTION)] + flags)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_output_path_equal_to_an_input_is_refused(tmp_path, capsys):
    nb = tmp_path / "x.ipynb"
    shutil.copy(SOLUTION, nb)
    before = nb.read_bytes()
    for flags in (["--json", str(nb)], ["--csv", str(tmp_path / "." / "x.ipynb")],
                  ["--json", str(tmp_path / "r"), "--csv", str(tmp_path / "r")]):
        with pytest.raises(SystemExit) as info:
            grade.main([str(nb)] + flags)
        assert info.value.code == 2
    err = capsys.readouterr().err
    assert "is the input notebook" in err and "name the same file" in err
    assert nb.read_bytes() == before


def test_student_ids_from_paths():
    assert grade.student_id("course/submissions/alice/01_units.ipynb") == "alice"
    assert grade.student_id("submitted/bob/ps1/01_units.ipynb") == "bob"
    assert grade.student_id("work/01_units.ipynb") is None
    assert grade.student_id("lms/carol_01_units.ipynb", r"/(\w+?)_\d") == "carol"
    assert grade.student_id("x/dave--01.ipynb", r"(?P<student>[a-z]+)--") == "dave"


def test_restore_puts_back_grade_cells_and_keeps_answers():
    ref = integrity.find_reference(SOLUTIONS, "_demo")
    assert ref is not None and {c.grade_id for c in ref.cells if c.grade} == {f"q{i}-grade" for i in range(1, 7)}
    q4 = next(c for c in ref.cells if c.grade_id == "q4-grade")
    assert "HIDDEN" not in q4.released and "assert kv_cache_bytes(1, 1, 1, 1, 1) == 2" in q4.graded
    exercise = nbformat.read(str(FIXTURES / "exercises" / "00_demo.ipynb"), as_version=4)
    graded, origin, refs, findings = integrity.restore(exercise, ref)
    assert findings == [] and origin == list(range(len(exercise.cells)))
    assert graded.cells[_index(exercise, "q4-grade")].source == q4.graded, "hidden tests run when grading"
    assert graded.cells[_index(exercise, "q1-answer")].source == _cell(exercise, "q1-answer").source
    del exercise.cells[_index(exercise, "setup")]
    graded, origin, refs, findings = integrity.restore(exercise, ref)
    assert [(f.kind, f.message) for f in findings] == [
        ("warning", "locked cell 'setup' was deleted; graded with the original from 00_demo.ipynb")]
    assert graded.cells[1].source.startswith("from course_lib.checks import _demo") and origin[1] is None


@pytest.mark.parametrize("source, found", [
    ("answer_q1 = q.q1.expected", "reads the answer key or checker internals (q.q1.expected)"),
    ("from course_lib.checks.question import Question\nQuestion.evaluate = lambda *a, **k: None",
     "patches Question.evaluate"),
    ("import course_lib.checks.question as c\nc.Question.evaluate = None", "patches c.Question.evaluate"),
    ("Q = type(q.q1)\nsetattr(Q, 'evaluate', print)", "patches with setattr(Q, 'evaluate', print)"),
    ("import sympy\nsympy.simplify = lambda e: 0", "patches sympy.simplify"),
    ("import sys\nsys.modules['course_lib.checks.display'].CORRECT = 'x'",
     "patches sys.modules['course_lib.checks.display'].CORRECT"),
    ("q = object()", "rebinds 'q', imported from course_lib.checks"),
    ("%time x = 1\nq.q2.__class__.check = print", "patches q.q2.__class__.check"),
])
def test_patching_is_found_in_the_learners_code(source, found):
    cells = [(0, "from course_lib.checks import _demo as q, ____\nfrom course_lib import get_model"), (1, source)]
    messages = [f.message for f in integrity.scan_patching(cells) if f.kind == "tampered"]
    assert any(found in m for m in messages), messages


def test_ordinary_answers_are_not_patching():
    cells = [(0, "from course_lib.checks import _demo as q, ____\nfrom course_lib import get_model\nimport os"),
             (1, "m = get_model('mistral-7b')\nanswer = m.params * 2\nq.q1.check(answer)\n"
                 "d = {}\nd['a'] = 1\nos.environ['X'] = '1'\n%matplotlib inline")]
    assert integrity.scan_patching(cells) == []


def test_a_set_saved_under_another_sets_name_is_a_warning():
    assert "named for exercise set ex03 but uses ex01" in integrity.set_number_mismatch("03_kv_cache.ipynb", ["ex01"])
    assert integrity.set_number_mismatch("01_units.ipynb", ["ex01"]) is None
    assert integrity.set_number_mismatch("alice.ipynb", ["ex01"]) is None


def test_subreaper_is_available_on_linux():
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_CHILD_SUBREAPER is Linux-only; elsewhere only processes seen while polling are ended")
    assert sandbox.become_subreaper() is True


def test_clean_env_drops_paths_into_other_folders(tmp_path):
    env = sandbox.clean_env(tmp_path, {"PYTHONPATH": "/learner", "PYTHONSTARTUP": "/x.py", "JPY_SESSION_NAME": "/l/a",
                                       "HOME": "/home/t", "PATH": os.defpath, "GRADER_TOKEN": "s3cret"})
    assert "GRADER_TOKEN" not in env and env["PATH"] == os.defpath, "only the variables of KEEP_ENV pass"
    assert "PYTHONSTARTUP" not in env and "JPY_SESSION_NAME" not in env and env["HOME"] == str(tmp_path / ".home")
    assert "/learner" not in env.get("PYTHONPATH", "")
    assert env["TMPDIR"] == str(tmp_path / ".tmp") and env["IPYTHONDIR"] == str(tmp_path / ".ipython")
