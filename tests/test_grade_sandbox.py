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

Then the machine itself: a fork bomb and a disk filler, graded beside a classmate who forks and writes
normally, are stopped at the process and disk bounds (the bomb's author only); the sandbox of a grader that is
not root (a user namespace) holds too.

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
import time
from pathlib import Path

import nbformat
import pytest
from attacks import (BAD_DECIMAL, DISK_FILLER, FILE_FILLER, FORGE_EXPORT, FORK_BOMB, METADATA_FLOOD,
                     NESTED_RESULT, RECORD_FLOOD, STEAL, STEAL_IN_FUNCTION)
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


# --- the machine: processes and disk ---------------------------------------------------------------------------

#: A grading process of its own (as ``grade -j 2`` runs one per worker): runs argv[1] in a fresh sandbox with a
#: time limit of argv[2] s (env NO_CGROUP=1: as if no cgroup could be made) and prints what came back as JSON.
GRADER = """
import json, os, sys, time
from course_lib.authoring import sandbox
if os.environ.get("NO_CGROUP"):
    sandbox.cgroup_base = lambda: None
with sandbox.workdir() as work:
    env = sandbox.clean_env(work)
    sandbox.hand_over(work)
    t = time.monotonic()
    rc, out, why = sandbox.run_python(sys.argv[1], b"", env=env, cwd=work, timeout=float(sys.argv[2]),
                                      max_memory=sandbox.MAX_MEMORY, work=work)
    took = time.monotonic() - t
    group = str(sandbox.cgroup_of(work) or "")
print(json.dumps({"rc": rc, "out": out, "why": why, "s": took, "euid": os.geteuid(), "cgroup": group}))
"""

#: A classmate's code: 90 short-lived processes, 30 at a time; prints how many ran.
CLASSMATE = """
import subprocess
ran = 0
for _ in range(3):
    procs = [subprocess.Popen(["/bin/sleep", "0.2"]) for _ in range(30)]
    ran += sum(p.wait() == 0 for p in procs)
print("ran", ran)
"""


def _grader(code: str, prefix=(), timeout: float = 30, **env) -> subprocess.Popen:
    root = str(Path(__file__).resolve().parent.parent)
    return subprocess.Popen([*prefix, sys.executable, "-c", GRADER, code, str(timeout)], stdout=subprocess.PIPE,
                            text=True,
                            cwd=tempfile.gettempdir(), env={**os.environ, "PYTHONPATH": root, **env})


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, f"the grading process died (exit status {proc.returncode})"
    return json.loads(out.strip().splitlines()[-1])


def _fork_bomb_beside_a_classmate(killed: bool = True, **env) -> None:
    """``killed``: the watch stops the bomb at the bound (a cgroup reports every refused fork); otherwise the
    kernel holds it at its RLIMIT_NPROC and the watch stops it when it sees the bound (a fork bomb can starve the
    watch's polling of CPU) or at the time limit (8 s here; ending a bomb's sandbox then took up to 22 s on 2
    busy cores)."""
    classmate = _grader(CLASSMATE, **env)
    bomb = _grader(FORK_BOMB, timeout=8, **env)
    b, c = _result(bomb), _result(classmate)
    assert b["rc"] is None and b["why"] in (("processes",) if killed else ("processes", "timeout")), b
    assert b["s"] < (15 if killed else 30), f"the bomb ran {b['s']:.1f} s before it was stopped"
    assert (c["rc"], c["why"], c["out"].strip()) == (0, None, "ran 90"), "the classmate's forks all succeeded"
    assert not any(r["cgroup"] and Path(r["cgroup"]).exists() for r in (b, c)), "the sandboxes' cgroups are gone"
    assert subprocess.run(["/bin/true"]).returncode == 0, "the grader still forks"


def test_a_fork_bomb_is_stopped_at_the_process_bound_and_the_classmate_beside_it_is_not(tmp_path):
    """Two grading processes at once (``-j 2``): the bomb's sandbox is killed once it holds MAX_PROCESSES tasks
    (its cgroup's pids.max where one can be made, else RLIMIT_NPROC under a uid of its own); the classmate's
    90 processes all run."""
    require_sandbox()
    _fork_bomb_beside_a_classmate(killed=sandbox.cgroup_base() is not None)


@pytest.mark.grading
def test_without_cgroups_a_fork_bomb_still_takes_no_process_slot_of_a_classmate(tmp_path):
    """As if no cgroup could be made (a container's read-only /sys/fs/cgroup): as root, each grading process's
    sandbox runs as a uid of its own, so the bomb's RLIMIT_NPROC counts its own processes only."""
    require_sandbox()
    _fork_bomb_beside_a_classmate(killed=False, NO_CGROUP="1")


def _sandboxed(tmp_path, code: str, **kw) -> tuple:
    with sandbox.workdir() as work:
        env = sandbox.clean_env(work)
        sandbox.hand_over(work)
        t = time.monotonic()
        rc, out, why = sandbox.run_python(code, b"", env=env, cwd=work, timeout=30, max_memory=sandbox.MAX_MEMORY,
                                          work=work, **kw)
        return rc, out, why, time.monotonic() - t, sandbox.disk_use(work)


def test_a_disk_filler_is_stopped_at_the_disk_bound_and_its_files_go_with_its_folder(tmp_path):
    """1 MiB files, first in /tmp (by absolute path: the grading folder's own .tmp in the sandbox), then in the
    folder, against a 64 MiB bound: stopped within a look of the watch, its files gone with its folder."""
    require_sandbox()
    free = shutil.disk_usage(tempfile.gettempdir()).free
    rc, _, why, took, (used, _) = _sandboxed(tmp_path, DISK_FILLER, max_disk=64 << 20)
    assert (rc, why) == (None, "disk") and took < 15, (rc, why, took)
    assert used >= 64 << 20, "the files in /tmp counted: they are in the grading folder"
    assert shutil.disk_usage(tempfile.gettempdir()).free > free - (256 << 20), "the folder and its files are gone"


@pytest.mark.grading
def test_a_folder_of_empty_files_is_stopped_and_a_model_file_is_not(tmp_path, monkeypatch):
    """Empty files are stopped at MAX_FILES (here 2,000); a 300 MB file (ex08's model is 262 MB) is written under
    the default bounds."""
    require_sandbox()
    monkeypatch.setattr(sandbox, "MAX_FILES", 2000)
    rc, _, why, took, _ = _sandboxed(tmp_path, FILE_FILLER)
    assert (rc, why) == (None, "disk") and took < 15, (rc, why, took)
    model = "with open('model.gguf', 'wb') as f:\n    for _ in range(300):\n        f.write(b'\\1' * (1 << 20))\n"
    rc, _, why, _, (used, _) = _sandboxed(tmp_path, model)
    assert (rc, why) == (0, None) and used >= 300 << 20, (rc, why, used)


def _as_non_root() -> tuple[list[str], str]:
    """A command prefix that runs the grader as a user other than root (nothing when it is not root), or the
    reason there is none.  As root: a user namespace where the grader is uid 1000 (a real unprivileged user
    cannot reach this root-owned Python)."""
    if os.geteuid() != 0:
        return [], ""
    unshare = shutil.which("unshare")
    if unshare is None:
        return [], "unshare (util-linux) is not installed"
    prefix = [unshare, "--user", "--map-user=1000", "--map-group=1000"]
    done = subprocess.run(prefix + [sys.executable, "-c", "import os; print(os.geteuid())"], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0 or done.stdout.strip() != "1000":
        return [], f"cannot become a user other than root here: {done.stderr.strip()[-200:]}"
    return prefix, ""


@pytest.mark.grading
def test_the_sandbox_of_a_grader_that_is_not_root_holds(tmp_path):
    """Run by a non-root user, the grader's sandbox is a user namespace: graded code is uid 65534 there, cannot
    read the answer key, and its fork bomb is held at the process bound (RLIMIT_NPROC, counted per namespace on
    Linux 5.14+) and stopped by the watch or at the time limit, and a classmate graded next runs all its processes
    (nothing of the bomb is left behind)."""
    require_sandbox()
    prefix, why = _as_non_root()
    if why:
        pytest.skip(why)
    key = str(Path(_demo.__file__).resolve())
    probe = (f"import os\nprint('uid', os.getuid())\ntry:\n    open({key!r}).read()\n    print('KEY READ')\n"
             f"except OSError as exc:\n    print('no key', type(exc).__name__)\n"
             "import sys\nsys.stdout.flush()\n") + FORK_BOMB
    # one after the other, as a non-root grader must grade (-j 1): two sandboxes of one non-root grader share its
    # uid's process count outside their namespaces, so a bomb at its bound can starve a classmate graded beside it
    # (seen here: the classmate's forks failed); the root grader's cgroups (the test above) keep classmates apart
    got = _result(_grader(probe, prefix=prefix, timeout=8))
    mate = _result(_grader(CLASSMATE, prefix=prefix))
    assert got["euid"] != 0 and mate["euid"] != 0, "the grader ran as a user other than root"
    assert "uid 65534" in got["out"] and "no key" in got["out"] and "KEY READ" not in got["out"], got["out"]
    assert got["rc"] is None and got["why"] in ("processes", "timeout") and got["s"] < 30, got
    assert (mate["rc"], mate["out"].strip()) == (0, "ran 90"), mate
