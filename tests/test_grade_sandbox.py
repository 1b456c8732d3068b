"""The grader's sandbox against a student who wants marks without answers, or wants to harm classmates (issue 32).

A class of three graded as ``python -m course_lib.authoring.grade`` grades it (one at a time): mallory's two
notebooks attack, bob's is right.  Mallory's code, in the kernel and in the fresh interpreter that runs her
function, tries to read the answer key from the grading machine's disk (by its path, through ``sys.path`` and
the editable install's finder), the gradebook, bob's submission and the grader's environment (its own, and
through ``/proc``); to rewrite bob's submission and ``grades.csv``; to kill a classmate's process; to reach a
server on 127.0.0.1; and to put all it got into her own feedback.  Then she sends answers that crash a
trusting grader (a ``Decimal`` whose ``str`` is ``'abc'``, a forged export hook, a function whose interpreter
writes deeply nested JSON) and output that used to skip the caps (1 MB of display metadata per message,
outputs under the check-record MIME key).  Each attack fails; bob is graded as if she were not there.

Needs bubblewrap: skipped with the reason where it cannot start, required under CI=true.  Two kernels.
The static scan's time bound needs none.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import nbformat
import pytest
from attacks import (BAD_DECIMAL, FORGE_EXPORT, METADATA_FLOOD, NESTED_RESULT, RECORD_FLOOD, STEAL,
                     STEAL_IN_FUNCTION)
from conftest import sandbox_reason, strict_tools
from test_grade_isolation import growth

from course_lib.authoring import grade, integrity, sandbox
from course_lib.checks import _demo

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOLUTIONS = FIXTURES / "solutions"
EXERCISE = FIXTURES / "exercises" / "00_demo.ipynb"
ROSTER = "alice.liddell@example.edu,Alice Liddell"


def require_sandbox() -> None:
    why = sandbox_reason()
    if why:
        if strict_tools():
            pytest.fail(f"the grader's sandbox cannot start: {why}; CI=true requires it (see .ci/run)", pytrace=False)
        pytest.skip(f"the grader's sandbox cannot start: {why}")


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


class _Listener:
    """A TCP server on 127.0.0.1 (a local Jupyter server's place) that counts connections."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port, self.connections = self.sock.getsockname()[1], 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.mark.notebook
def test_graded_code_reaches_no_key_no_classmate_no_grader_and_one_notebook_stops_nothing(tmp_path, monkeypatch):
    require_sandbox()
    monkeypatch.delenv(sandbox.ISOLATION_ENV, raising=False)
    secret_name, secret = "COURSE_GRADER_TOKEN", "grader-secret-" + secrets.token_hex(8)
    monkeypatch.setenv(secret_name, secret)
    course = tmp_path / "course"
    (course / "submitted" / "bob").mkdir(parents=True)
    (course / "submitted" / "mallory").mkdir(parents=True)
    gradebook = course / "gradebook.db"
    gradebook.write_text(ROSTER + "\n")
    grades_csv = course / "grades.csv"
    grades_csv.write_text("student,score\nbob,6\n")
    bob = course / "submitted" / "bob" / "00_demo.ipynb"
    bob.write_bytes((SOLUTIONS / "00_demo.ipynb").read_bytes())
    bob_before = bob.read_bytes()
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    listener = _Listener()
    key = str(Path(_demo.__file__).resolve())
    targets = {"key": key, "gradebook": str(gradebook), "bob": str(bob), "csv": str(grades_csv),
               "grader": os.getpid(), "sentinel": sentinel.pid, "port": listener.port, "secret": secret_name}

    nb = nbformat.read(str(EXERCISE), as_version=4)
    _cell(nb, "q1-answer").source = STEAL.format(targets=targets)
    _cell(nb, "q2-answer").source = BAD_DECIMAL
    _cell(nb, "q4-answer").source = STEAL_IN_FUNCTION.format(key=key)
    _cell(nb, "q5-answer").source = FORGE_EXPORT
    _cell(nb, "q3-answer").source = RECORD_FLOOD
    nb.cells.append(nbformat.v4.new_code_cell(METADATA_FLOOD))  # last: interrupted mid-flood, the kernel may die
    mallory = course / "submitted" / "mallory" / "00_demo.ipynb"
    nbformat.write(nb, str(mallory))

    try:
        with growth() as grew:
            grades = grade.grade_notebooks([mallory, bob], timeout=20, solutions=SOLUTIONS,
                                           max_output=4 << 20, max_cell_output=1 << 20)
    finally:
        listener.close()
        alive = sentinel.poll() is None
        sentinel.kill()
        sentinel.wait()

    report = json.dumps([g.to_dict() for g in grades])
    m, b = grades
    # nothing crossed: the key, the roster, the grader's secret are nowhere in the class report
    for text in (secret, "alice.liddell", "2*L*H*d*b", "memory bandwidth\"]"):
        assert text not in report, text
    leak = next(p.message for p in m.problems if "LEAK " in p.message)
    assert json.loads(leak.split("LEAK ", 1)[1]) == {"env": {}}, "the kernel read, wrote, killed or reached nothing"
    q = {x.question: x for x in m.questions}
    assert q["q4"].status == "incorrect" and "LEAK" in q["q4"].feedback and secret_name not in q["q4"].feedback
    assert q["q5"].status != "correct", "the key read from disk earns nothing"
    # nothing harmed: bob's file, the class's CSV, a classmate's process, the local server
    assert bob.read_bytes() == bob_before and grades_csv.read_text() == "student,score\nbob,6\n"
    assert alive, "a classmate's process survived"
    assert listener.connections == 0, "graded code reached 127.0.0.1"
    # one notebook stops nothing: the hostile answers score their author only, with a clear status
    assert q["q2"].status == "incorrect" and "could not be read" in q["q2"].feedback, q["q2"]
    assert q["q5"].status == "missing" and "not plain data" in q["q5"].feedback, q["q5"]
    assert m.status in ("problems", "failed"), "a flood that ends its own kernel fails its own notebook"
    capped = {p.cell: p.message for p in m.problems if p.kind == "output_limit"}
    assert any("more than" in m for m in capped.values()), "1 MB of metadata per message counts in the caps"
    assert any("check record" in m for m in capped.values()), "outputs under the check-record key are bounded"
    assert grew[0] < 200 << 20, f"the grader grew by {grew[0] >> 20} MiB"
    assert b.status == "ok" and b.score == b.points > 0, b.to_dict()


def test_a_function_whose_interpreter_writes_deeply_nested_output_scores_incorrect(tmp_path):
    """The fresh interpreter that runs a function answer (in the sandbox) writes the result marker and
    100,000 nested brackets: the grader reads no result, the answer is incorrect, nothing raises."""
    require_sandbox()
    source = NESTED_RESULT.split("q.q4.check")[0]
    (tmp_path / sandbox.KEYLESS_DIR).mkdir()
    env = sandbox.clean_env(tmp_path, keyless=sandbox.write_keyless(tmp_path / sandbox.KEYLESS_DIR, ["_demo"]))
    limits = grade._Limits(10.0, 50.0, sandbox.MAX_MEMORY, sandbox.MAX_CELL_OUTPUT, sandbox.MAX_OUTPUT)
    got, why = grade._child({"setup": [], "source": source, "name": "kv_cache_bytes", "fallback": "kv_cache_bytes",
                             "calls": [((1, 1, 1, 1), {})]}, tmp_path, env, limits)
    assert got is None and "could not read" in why


def test_judging_stops_at_the_notebooks_time_budget(tmp_path, monkeypatch):
    """Judging has a time budget of its own: answers left when it is spent are missing, not judged (no kernel:
    the notebook's exported answers are given as its outputs)."""
    from course_lib.checks.answers import ANSWER_MIME, to_plain

    cells = [nbformat.v4.new_code_cell("from course_lib.checks import _demo as q")]
    for qid in ("q1", "q2"):
        cell = nbformat.v4.new_code_cell(f"q.{qid}.check(1.0, strict=True)")
        cell.outputs = [nbformat.v4.new_output("display_data", data={
            ANSWER_MIME: {"set": "_demo", "question": qid, "answer": to_plain(1.0)}, "text/plain": "x"})]
        cells.append(cell)
    nb = nbformat.v4.new_notebook(cells=cells)
    monkeypatch.setattr(grade, "_execute", lambda nb, name, limits, *a: (a[-1](tmp_path, {}), ({}, [], []))[1])
    limits = grade._Limits(10.0, 1e-9, sandbox.MAX_MEMORY, sandbox.MAX_CELL_OUTPUT, sandbox.MAX_OUTPUT)
    *_, judged = grade.run_and_judge(nb, "x.ipynb", ["_demo"], limits, "python3", 10.0, grade._Where(nb), None)
    assert {k: [s for _, s, _ in v] for k, v in judged.items()} == {("_demo", "q1"): ["missing"],
                                                                      ("_demo", "q2"): ["missing"]}
    assert all("time budget" in f for v in judged.values() for _, _, f in v)


def test_the_sockets_of_a_deep_grading_folder_go_to_a_short_one(tmp_path):
    """A Unix socket's path holds at most 107 bytes: under a deep TMPDIR the kernel's sockets go elsewhere."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    ipc = sandbox.socket_dir(deep)
    try:
        assert len(str(ipc / "k-65535")) < 108 and not ipc.is_relative_to(deep)
    finally:
        shutil.rmtree(ipc)
    short = Path(tempfile.mkdtemp(prefix="cg-test-", dir="/tmp"))
    try:
        assert sandbox.socket_dir(short) == short / ".ipc", "a short grading folder holds its own sockets"
    finally:
        shutil.rmtree(short)


def test_the_static_scan_is_linear_and_time_bounded():
    """2,000 aliases in reverse order in one 34 KB cell (each pass of a fixed-point search found one): the
    scan reads them in one pass, and still finds the patch at the end of the chain."""
    lines = [f"ali{i:04d} = ali{i - 1:04d}" for i in range(2000, 0, -1)] + ["ali0000 = q", "ali2000.q1.expected = 1"]
    source = "from course_lib.checks import _demo as q\n" + "\n".join(lines)
    assert len(source) > 34_000
    found = integrity.scan_patching([(0, source)])
    assert [f.kind for f in found] == ["tampered"], "finished within its time limit (no warning)"
    assert "patches ali2000.q1.expected" in found[0].message


def test_reading_a_notebook_is_linear_in_its_size():
    """The import finder reads 100,000 blank lines and 100,000 spaces as fast as it reads the code around them
    (it was quadratic in a run of newlines: 20,000 took 4 s); a cell no one can read takes no time either."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("\n" * 100_000 + " " * 100_000 + "x = (" * 300
                                                                    + "\nfrom course_lib.checks import _demo as q")])
    assert grade.sets_in_source(nb) == ["_demo"]
    assert grade.set_aliases(nb) == {} and integrity.scan_patching([(0, nb.cells[0].source)]) == []


def test_the_static_scan_stops_at_its_time_limit(monkeypatch):
    monkeypatch.setattr(integrity, "SCAN_TIME_S", 0.0)
    found = integrity.scan_patching([(0, "import course_lib\nx = 1\n")])
    assert [f.kind for f in found] == ["warning"] and "time limit" in found[0].message


def test_feedback_is_scrubbed_of_the_graders_environment():
    env = {"COURSE_GRADER_TOKEN": "tok-123456789", "PATH": "/usr/bin:/bin", "HOME": "/root/secret-home"}
    text = "ValueError: {'COURSE_GRADER_TOKEN': 'tok-123456789', 'HOME': '/root/secret-home', 'PATH': '/usr/bin:/bin'}"
    out = sandbox.scrub(text, env)
    assert "tok-123456789" not in out and "/root/secret-home" not in out and "/usr/bin:/bin" in out


def test_without_bubblewrap_the_grader_refuses_unless_the_insecure_mode_is_chosen(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sandbox, "bwrap_status", lambda: (None, "bubblewrap (bwrap) is not installed"))
    monkeypatch.delenv(sandbox.ISOLATION_ENV, raising=False)
    with pytest.raises(sandbox.IsolationUnavailable, match="not installed.*insecure"):
        grade.grade_notebook(EXERCISE)
    with pytest.raises(SystemExit) as exc:
        grade.main([str(EXERCISE)])
    assert exc.value.code == 2 and "cannot grade in a sandbox" in capsys.readouterr().err
    assert sandbox.resolve_isolation("insecure") == "insecure"
    with pytest.raises(ValueError, match="isolation must be"):
        sandbox.resolve_isolation("container")
