"""A class graded two at a time in the sandbox, with one student who attacks the others (issue 32; `make tour`).

Mallory's notebook, graded beside her classmates' (``-j 2``), looks through ``/proc`` for their kernels and
grading folders, kills every kernel it sees and rewrites every notebook it finds, over and over while the
others run.  In the sandbox it sees only its own processes: every classmate is graded ``ok`` with full marks.
Then a fork bomb and a disk filler graded beside two classmates: each stops its own notebook only.
Five kernels, then four (about a minute on 2 cores): marked ``grading``, run by ``make tour``.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from attacks import DISK_FILLER, FORK_BOMB, KILL_SIBLINGS
from test_grade_sandbox import require_sandbox

from course_lib.authoring import grade, sandbox

pytestmark = [pytest.mark.grading, pytest.mark.notebook]

SOLUTIONS = Path(__file__).resolve().parent / "fixtures" / "solutions"


def test_a_student_graded_beside_the_others_cannot_kill_or_rewrite_them(tmp_path, monkeypatch):
    require_sandbox()
    monkeypatch.delenv(sandbox.ISOLATION_ENV, raising=False)
    nb = nbformat.read(str(SOLUTIONS / "00_demo.ipynb"), as_version=4)
    attack = "import time\nfor _ in range(20):\n" + "".join("    " + line + "\n" for line in
                                                          KILL_SIBLINGS.strip().splitlines()) + "    time.sleep(0.5)\n"
    nb.cells.insert(2, nbformat.v4.new_code_cell(attack))
    paths = []
    for student in ("mallory", "alice", "bob", "carol", "dave"):
        folder = tmp_path / "submissions" / student
        folder.mkdir(parents=True)
        if student == "mallory":
            nbformat.write(nb, str(folder / "00_demo.ipynb"))
        else:
            (folder / "00_demo.ipynb").write_bytes((SOLUTIONS / "00_demo.ipynb").read_bytes())
        paths.append(folder / "00_demo.ipynb")

    grades = grade.grade_notebooks(paths, jobs=2, timeout=30, solutions=SOLUTIONS)

    by = {g.student: g for g in grades}
    for student in ("alice", "bob", "carol", "dave"):
        g = by[student]
        assert (g.status, g.score) == ("ok", g.points), (student, g.to_dict())
    assert by["mallory"].status in grade.STATUSES, "her own notebook is graded (killing its own sandbox fails it)"


def test_a_fork_bomb_and_a_disk_filler_fail_their_own_notebooks_only(tmp_path, monkeypatch):
    """Mallory's notebook fork-bombs, Eve's fills the disk (a 64 MiB bound here), graded two at a time beside
    Alice and Bob: the two attackers' notebooks fail with process_limit and disk_limit, the others are ``ok``
    with full marks, the grader carries on, and the class takes bounded time."""
    import time

    require_sandbox()
    monkeypatch.delenv(sandbox.ISOLATION_ENV, raising=False)
    paths = []
    for student, attack in (("mallory", FORK_BOMB), ("eve", DISK_FILLER), ("alice", None), ("bob", None)):
        folder = tmp_path / "submissions" / student
        folder.mkdir(parents=True)
        nb = nbformat.read(str(SOLUTIONS / "00_demo.ipynb"), as_version=4)
        if attack:
            nb.cells.insert(2, nbformat.v4.new_code_cell(attack))
        nbformat.write(nb, str(folder / "00_demo.ipynb"))
        paths.append(folder / "00_demo.ipynb")

    t = time.monotonic()
    grades = grade.grade_notebooks(paths, jobs=2, timeout=30, solutions=SOLUTIONS, max_disk=64 << 20)
    took = time.monotonic() - t

    by = {g.student: g for g in grades}
    for student in ("alice", "bob"):
        assert (by[student].status, by[student].score) == ("ok", by[student].points), by[student].to_dict()
    kinds = {s: {p.kind for p in by[s].problems} for s in ("mallory", "eve")}
    assert by["mallory"].status == "failed" and "process_limit" in kinds["mallory"], by["mallory"].to_dict()
    assert by["eve"].status == "failed" and "disk_limit" in kinds["eve"], by["eve"].to_dict()
    assert took < 120, f"the class took {took:.0f} s"
