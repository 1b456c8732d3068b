"""The nbgrader workflow of docs/INSTRUCTORS.md, end to end, with nbgrader's own command line.

In a temporary course directory: ``source/ps1/<notebook>`` is one of our solution notebooks;
``nbgrader generate_assignment ps1`` makes the student version in ``release/``; two submissions are
made from it -- one with every solution cell filled in from the source (a perfect learner) and one
left as released -- plus the same two made from the course's own exercise notebook (the exgen output,
which instructors may hand out instead), and ``nbgrader autograde ps1`` grades all four.  The filled-in
submissions must get every point of the question set, the untouched ones none.

Autograde runs through the course's trusted checks (``course_lib.authoring.nbgrader_autograde``, set in
``nbgrader_config.py``; its log says each submission was graded in the sandbox), and six cheating
submissions get no point: answers read from the key (``answer_qN = q.qN.expected``), a patched checker in an
answer cell, grade cells edited to check the key, an untouched notebook beside a ``sympy.py`` that patches
the checker, answers read from the key's file on the grading machine's disk, and a notebook that prints the
gradebook into its own output (it finds nothing to print).
"""
from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from attacks import SHADOW_SYMPY

from course_lib.authoring import exgen
from course_lib.checks import load_set
from repo import ROOT as REPO

pytestmark = pytest.mark.nbgrader

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _subject() -> tuple[Path, str]:
    """(solution notebook, question set): the real lesson 01 once it exists, else the fixture."""
    real = REPO / "solutions" / "01_units.ipynb"
    if real.exists():
        return real, "ex01"
    return FIXTURES / "solutions" / "00_demo.ipynb", "_demo"


def _points(set_name: str) -> float:
    if set_name == "_demo":
        from course_lib.checks import _demo

        return sum(q.points for q in _demo.QUESTIONS)
    return sum(q.points for q in load_set(set_name).QUESTIONS)


def _run(exe: str, args: list[str], course: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # nbgrader runs `alembic` (its database migrations) from PATH: put the venv's bin/ first, as an
    # activated virtual environment does
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(exe).parent), env.get("PATH")]))
    out = subprocess.run([exe, *args], cwd=course, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out


def test_solution_autogrades_to_full_points(tmp_path, require_tool):
    exe = require_tool("nbgrader", why="pip install -c constraints.txt -e '.[classroom]'")
    solution, set_name = _subject()
    course = tmp_path / "course"
    (course / "source" / "ps1").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        "c.CourseDirectory.course_id = 'llm-latency'\n"
        "from course_lib.authoring.nbgrader_autograde import configure\n"
        "configure(c)\n"
        "c.CourseAutograde.timeout = 120\n"
    )
    shutil.copy(solution, course / "source" / "ps1" / solution.name)

    _run(exe, ["generate_assignment", "ps1", "--force"], course)
    released = course / "release" / "ps1" / solution.name
    assert released.exists()
    release_nb = nbformat.read(str(released), as_version=4)
    release_text = "\n".join(c.source for c in release_nb.cells)
    assert "### BEGIN SOLUTION" not in release_text and "### BEGIN HIDDEN TESTS" not in release_text

    # a perfect learner: every solution cell of the released notebook filled in from the source
    source_nb = nbformat.read(str(solution), as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source_nb.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    assert answers, "the solution notebook has nbgrader solution cells"
    def filled_in(nb):
        nb = copy.deepcopy(nb)
        filled = 0
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.metadata.get("nbgrader", {}).get("solution") and gid in answers:
                cell.source = answers[gid]
                filled += 1
        assert filled == len(answers)
        return nb

    # the course's own exercise notebook (exgen output) works as the hand-out as well
    exercise_nb = nbformat.reads(exgen.exercise_text(solution), as_version=4)
    submissions = {"perfect": filled_in(release_nb), "blank": release_nb,
                   "exercise-solved": filled_in(exercise_nb), "exercise-blank": exercise_nb}
    submissions.update(_cheats(exercise_nb, set_name, course))  # the exercise notebook: `answer_qN = ____`
    for student, nb in submissions.items():
        target = course / "submitted" / student / "ps1"
        target.mkdir(parents=True)
        nbformat.write(nb, str(target / solution.name))
    (course / "submitted" / "shadow" / "ps1" / "sympy.py").write_text(SHADOW_SYMPY)

    done = _run(exe, ["autograde", "ps1", "--force"], course)
    modes = re.findall(r"course grader: \S+: grading in the (\w+) mode", done.stdout + done.stderr)
    assert modes == ["sandbox"] * len(submissions), f"configure(c) graded each submission in the sandbox: {modes}"

    from nbgrader.api import Gradebook

    expected = _points(set_name)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        perfect_sub = gb.find_submission("ps1", "perfect")
        blank_sub = gb.find_submission("ps1", "blank")
        assert perfect_sub.max_score == pytest.approx(expected), "grade-cell points = the question set's points"
        assert perfect_sub.score == pytest.approx(expected), [
            (g.name, g.score, g.max_score) for g in gb.find_submission_notebook(solution.stem, "ps1", "perfect").grades]
        assert blank_sub.score == 0
        assert gb.find_submission("ps1", "exercise-solved").score == pytest.approx(expected)
        assert gb.find_submission("ps1", "exercise-blank").score == 0
        for student in CHEATS:
            sub = gb.find_submission("ps1", student)
            assert sub.score == 0, (student, [(g.name, g.score) for g in gb.find_submission_notebook(
                solution.stem, "ps1", student).grades if g.score])
    graded = nbformat.read(str(course / "autograded" / "perfect" / "ps1" / solution.name), as_version=4)
    errors = [o for c in graded.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    roster = nbformat.read(str(course / "autograded" / "roster" / "ps1" / solution.name), as_version=4)
    shown = nbformat.writes(roster)
    assert "LEAK" in shown and "exercise-solved" not in shown, "the gradebook is out of graded code's reach"


CHEATS = ("key", "patched", "edited", "shadow", "disk", "roster")

#: Reads the answer key from the grading machine's disk (by its path, and through sys.path), loading the set's
#: module from the file itself: the static scan sees no course_lib in it.
DISK = """
import importlib.util, os, sys
def _stolen(qid):
    for p in [{key!r}] + [os.path.join(e or ".", "course_lib", "checks", {name!r}) for e in sys.path]:
        if os.path.exists(p) and os.sep + ".course" + os.sep not in p:
            spec = importlib.util.spec_from_file_location("stolen", p)
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            return getattr(m, qid).expected
    return None
"""
#: Prints the gradebook (student ids, names, emails) into its own feedback.
ROSTER_LEAK = """
try:
    _got = open({gradebook!r}, "rb").read().decode("latin-1")
except Exception as exc:
    _got = type(exc).__name__
print("LEAK " + _got[-4000:])
"""
PATCH = ("import course_lib.checks.question as c\n"
         "c.Question.evaluate = lambda self, a, strict=False, **k: self._result('correct', '', strict)")


def _cheats(nb, set_name: str, course: Path) -> dict:
    """The attacks of issues 18 and 32 on an unanswered notebook (its answers otherwise left blank)."""
    key, patched, edited, disk, roster = (copy.deepcopy(nb) for _ in range(5))
    import course_lib.checks

    key_file = Path(course_lib.checks.__file__).resolve().parent / f"{set_name}.py"
    for cell in disk.cells:  # every answer read from the key's file on the grading machine
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = re.sub(r"^answer_(q\d+) = ____.*$", r'answer_\1 = _stolen("\1")', cell.source,
                                 flags=re.MULTILINE)
    at = next(i for i, c in enumerate(disk.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    disk.cells.insert(at + 1, nbformat.v4.new_code_cell(DISK.format(key=str(key_file), name=key_file.name)))
    roster.cells.insert(at + 1, nbformat.v4.new_code_cell(ROSTER_LEAK.format(gradebook=str(course / "gradebook.db"))))
    for cell in key.cells:  # every answer taken from the key the checks package ships
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = re.sub(r"^answer_(q\d+) = ____.*$", r"answer_\1 = q.\1.expected", cell.source,
                                 flags=re.MULTILINE)
    setup = next(i for i, c in enumerate(patched.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    patched.cells.insert(setup + 1, nbformat.v4.new_code_cell(PATCH))
    for cell in edited.cells:  # grade cells that check the key instead of the answer
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and ".check(" in cell.source:
            qid = cell.source.split(".check(")[0].strip().splitlines()[-1]
            cell.source = f"{qid}.check({qid}.expected, strict=True)"
    return {"key": key, "patched": patched, "edited": edited, "shadow": copy.deepcopy(nb), "disk": disk,
            "roster": roster}
