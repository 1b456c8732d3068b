"""The grader (python -m course_lib.authoring.grade): real kernels on small notebooks in a temp directory."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from course_lib.authoring import grade
from course_lib.checks import _demo

pytestmark = pytest.mark.notebook

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SETUP = "from course_lib.checks import _demo as q, ____"
# the solution's answers, one code cell per question, with the graded check after each
ANSWERS = {
    "q1": "weights_bytes = 7e9 * 2\nq.q1.check(weights_bytes)",
    "q2": "step_ms = 14.0\nq.q2.check(step_ms)",
    "q3": "kv = '2*L*H*d*b'\nq.q3.check(kv)",
    "q4": "def kv_cache_bytes(layers, kv_heads, head_dim, tokens, bytes_per_element=2):\n"
          "    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_element\nq.q4.check(kv_cache_bytes)",
    "q5": "bottleneck = 'memory bandwidth'\nq.q5.check(bottleneck)",
    "q6": "ridge_point = 100\nq.q6.check(ridge_point)",
}
VARS = {"q1": "weights_bytes", "q2": "step_ms", "q3": "kv", "q4": "kv_cache_bytes", "q5": "bottleneck",
        "q6": "ridge_point"}


def _notebook(cells: list[str]) -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_markdown_cell("# test")] + [new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _write(path: Path, cells: list[str]) -> Path:
    nbformat.write(_notebook(cells), str(path))
    return path


def _graded(qid: str) -> str:
    return f"q.{qid}.check({VARS[qid]}, strict=True)"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _statuses(g: grade.NotebookGrade) -> dict[str, str]:
    return {q.question: q.status for q in g.questions}


def test_errors_deleted_and_duplicated_questions_are_problems(tmp_path):
    cells = [SETUP]
    cells += [ANSWERS["q1"], _graded("q1"), _graded("q1")]                 # q1: grade cell duplicated
    # q2: deleted entirely
    cells += ["kv = '2*L*H*d'\nq.q3.check(kv)", _graded("q3")]              # q3: wrong (not a problem)
    cells += ["undefined_name + 1\n" + ANSWERS["q4"], _graded("q4")]        # q4: cell raises before its check
    cells += [ANSWERS["q5"], _graded("q5")]
    cells += ["ridge_point = ____\nq.q6.check(ridge_point)", _graded("q6")]  # q6: not attempted
    path = _write(tmp_path / "broken.ipynb", cells)
    g = grade.grade_notebook(path, timeout=60)
    assert _statuses(g) == {"q1": "correct", "q2": "missing", "q3": "incorrect", "q4": "missing",
                            "q5": "correct", "q6": "not_attempted"}
    q3 = next(q for q in g.questions if q.question == "q3")
    assert q3.feedback == _demo.q3.mistakes[0].feedback
    kinds = sorted(p.kind for p in g.problems)
    assert kinds == ["duplicate", "error", "error", "missing", "missing"], g.problems
    messages = " | ".join(p.message for p in g.problems)
    assert "_demo.q1 is graded 2 times" in messages
    assert "no check of _demo.q2 in the notebook: was its cell deleted?" in messages
    assert "raised NameError: name 'undefined_name' is not defined" in messages
    # q4's grade cell raises NameError (kv_cache_bytes never defined): reported, not mistaken for a failed check
    assert sum("NameError" in p.message for p in g.problems) == 2
    assert "the check of _demo.q4 (cell 8) did not run to completion" in messages
    assert g.score == _demo.q1.points + _demo.q5.points
    assert not g.ok


def test_a_hanging_cell_times_out_and_the_rest_still_runs(tmp_path):
    cells = [SETUP, "import time\ntime.sleep(120)", ANSWERS["q1"], _graded("q1")]
    path = _write(tmp_path / "hang.ipynb", cells)
    g = grade.grade_notebook(path, timeout=1.5)  # fractions are rounded up to whole seconds
    assert [p.kind for p in g.problems if p.kind == "timeout"] == ["timeout"]
    assert "cell 2 timed out: cell did not finish within 2 s" in " ".join(p.message for p in g.problems)
    assert _statuses(g)["q1"] == "correct", "the kernel was interrupted and grading went on"


def test_an_uninterruptible_kernel_is_abandoned(tmp_path):
    cells = [SETUP, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
             "x = 1", ANSWERS["q1"]]
    path = _write(tmp_path / "stuck.ipynb", cells)
    g = grade.grade_notebook(path, timeout=1)
    messages = " ".join(p.message for p in g.problems)
    assert "did not respond to interrupts" in messages
    assert _statuses(g)["q1"] == "missing"


def test_cli_table_json_and_exit_codes(tmp_path, capsys):
    """The solution fixture gets full marks, its grade cells verified, and the file is not modified."""
    learner = tmp_path / "learner"
    learner.mkdir()
    good = learner / "00_demo.ipynb"
    shutil.copy(FIXTURES / "solutions" / "00_demo.ipynb", good)
    before = _digest(good)
    plain = _write(tmp_path / "plain.ipynb", ["x = 1"])
    out_json = tmp_path / "out.json"
    assert grade.main([str(good), "--json", str(out_json), "--timeout", "60",
                       "--solutions", str(FIXTURES / "solutions")]) == 0
    table = capsys.readouterr().out
    assert "_demo.q4      2/2  correct" in table and "total         8/8" in table and "status: ok" in table
    report = json.loads(out_json.read_text())
    assert report["ok"] is True and report["score"] == report["points"] == sum(q.points for q in _demo.QUESTIONS)
    nbrep = report["notebooks"][0]
    assert nbrep["path"] == str(good) and [q["status"] for q in nbrep["questions"]] == ["correct"] * 6
    assert nbrep["grade_cells_verified"] is True and nbrep["status"] == "ok" and nbrep["problems"] == []
    assert all(q["graded_checks"] == 1 and q["checks"] == 2 for q in nbrep["questions"])
    assert _digest(good) == before, "the learner's notebook must never be written"
    assert sorted(p.name for p in learner.iterdir()) == ["00_demo.ipynb"], "nothing is written next to it"

    assert grade.main([str(plain), str(tmp_path / "nope.ipynb"), "--json", "-"]) == 1
    report = json.loads(capsys.readouterr().out)
    kinds = [[p["kind"] for p in nb["problems"]] for nb in report["notebooks"]]
    assert kinds == [["no_questions"], ["unreadable"]] and report["ok"] is False

    with pytest.raises(SystemExit) as info:
        grade.main([str(good), "--timeout", "0"])
    assert info.value.code == 2


def test_sets_in_source_reads_the_import_forms():
    nb = _notebook(["from course_lib.checks import (\n    _demo as q,\n    ____,\n)",
                    "import course_lib.checks._demo", "from course_lib.checks import core, nosuchset"])
    assert grade.sets_in_source(nb) == ["_demo"]
    with pytest.raises(ValueError, match="timeout"):
        grade.grade_notebook(FIXTURES / "exercises" / "00_demo.ipynb", timeout=0)
