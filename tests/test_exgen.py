"""The exercise generator (python -m course_lib.authoring.exgen): the transformation, the files, and the real
exercises (in sync with solutions/, run unfilled without error, every question "not attempted")."""
from __future__ import annotations

import copy
import json
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from course_lib.authoring import exgen

from course_lib.authoring import grade
from repo import ROOT as REPO

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEMO_SOLUTION = FIXTURES / "solutions" / "00_demo.ipynb"


def t(src: str) -> str:
    return exgen.transform_code(textwrap.dedent(src).strip("\n"))


def d(src: str) -> str:
    return textwrap.dedent(src).strip("\n")


# --- code cells -------------------------------------------------------------------------------------


def test_assignments_become_placeholders():
    assert t("""
        ### BEGIN SOLUTION
        bpp = 2
        weights = 7e9 * bpp
        weights = round(weights)
        a, b = 1, 2
        x: float = 3.0
        print(weights)
        ### END SOLUTION
        q.q1.check(weights)
    """) == d("""
        bpp = ____  # your answer
        weights = ____  # your answer
        a, b = ____, ____  # your answer
        x: float = ____  # your answer
        q.q1.check(weights)
    """)


def test_markers_inside_a_function_keep_def_docstring_and_indentation():
    assert t('''
        def kv(layers, heads,
               tokens):
            """Bytes.

            More."""
            ### BEGIN SOLUTION
            y = 2
            return y * layers
            ### END SOLUTION


        q.q4.check(kv)
    ''') == d('''
        def kv(layers, heads,
               tokens):
            """Bytes.

            More."""
            raise NotImplementedError  # your code here


        q.q4.check(kv)
    ''')


def test_a_whole_def_between_the_markers():
    assert t('''
        ### BEGIN SOLUTION
        @functools.cache
        def f(x: int) -> int:  # keep me
            """Doc."""
            return x


        def g(x): return x
        answer = f(3)
        ### END SOLUTION
    ''') == d('''
        @functools.cache
        def f(x: int) -> int:  # keep me
            """Doc."""
            raise NotImplementedError  # your code here


        def g(x):
            raise NotImplementedError  # your code here
        answer = ____  # your answer
    ''')


def test_other_code_becomes_a_comment_or_pass():
    assert t("""
        ### BEGIN SOLUTION
        print(3)
        ### END SOLUTION
    """) == "# your code here"
    assert t("""
        for i in range(3):
            ### BEGIN SOLUTION
            total = i
            ### END SOLUTION
        x = 1
    """) == d("""
        for i in range(3):
            total = ____  # your answer
        x = 1
    """)
    assert t("""
        if True:
            ### BEGIN SOLUTION
            print(1)
            ### END SOLUTION
    """) == d("""
        if True:
            pass  # your code here
    """)


def test_cells_with_magics_fall_back_to_simple_assignments():
    assert t("""
        %%time
        ### BEGIN SOLUTION
        x = 3
        !ls
        ### END SOLUTION
    """) == "%%time\nx = ____  # your answer"


def test_hidden_tests_are_removed_and_unmarked_code_is_untouched():
    assert t("""
        q.q4.check(f, strict=True)
        ### BEGIN HIDDEN TESTS
        assert f(1) == 2
        ### END HIDDEN TESTS
    """) == "q.q4.check(f, strict=True)"
    src = "x = 1\n\n# a comment  \n"
    assert exgen.transform_code(src) == src


@pytest.mark.parametrize("src, match", [
    ("### BEGIN SOLUTION\nx = 1", "never closed"),
    ("x = 1\n### END SOLUTION", "without"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "nested"),
    ("### BEGIN HIDDEN TESTS\nassert 1", "never closed"),
])
def test_unbalanced_markers_are_errors(src, match):
    with pytest.raises(exgen.ExgenError, match=match):
        exgen.transform_code(src, "demo cell 3")


def test_markdown_solution_region():
    assert exgen.transform_markdown("Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION\nEnd") == \
        "Why?\n_Your answer here._\nEnd"


# --- notebooks -----------------------------------------------------------------------------------


def test_fixture_solution_gives_the_golden_exercise():
    golden = (FIXTURES / "exercises" / "00_demo.ipynb").read_text(encoding="utf-8")
    assert exgen.exercise_text(DEMO_SOLUTION) == golden
    assert exgen.exercise_text(DEMO_SOLUTION) == golden  # deterministic


def test_make_exercise_rules():
    sol = nbformat.read(str(DEMO_SOLUTION), as_version=4)
    before = copy.deepcopy(sol)
    ex = exgen.make_exercise(sol, "00_demo.ipynb")
    assert sol == before, "the solution notebook object is not modified"
    assert len(ex.cells) == len(sol.cells) - 1, "the solution-only cell is dropped"
    assert all("solution-only" not in c.metadata.get("tags", []) for c in ex.cells)
    code = [c for c in ex.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert "widgets" not in ex.metadata and ex.metadata["course"]["generated_from"] == "solutions/00_demo.ipynb"
    assert [c.id for c in ex.cells] == [c.id for c in sol.cells if "solution-only" not in c.metadata.get("tags", [])]
    for old, new in zip([c for c in sol.cells if "solution-only" not in c.metadata.get("tags", [])], ex.cells):
        assert old.metadata.get("nbgrader") == new.metadata.get("nbgrader"), "nbgrader metadata is kept"
    text = "\n".join(c.source for c in ex.cells)
    for leaked in ("### BEGIN", "### END", "7_000_000_000", "    per_token =", "memory bandwidth\"", "assert kv_cache"):
        assert leaked not in text
    assert "weights_bytes = ____  # your answer" in text and "raise NotImplementedError  # your code here" in text


def test_missing_cell_ids_get_stable_ids():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    del nb.cells[0]["id"]
    a = exgen.make_exercise(nb, "07_x.ipynb")
    b = exgen.make_exercise(copy.deepcopy(nb), "07_x.ipynb")
    assert a.cells[0].id == b.cells[0].id


def test_generate_and_check_a_course_tree(tmp_path, capsys):
    (tmp_path / "solutions").mkdir()
    shutil.copy(DEMO_SOLUTION, tmp_path / "solutions" / "00_demo.ipynb")
    (tmp_path / "solutions" / "notes.ipynb").write_text("{}")  # not NN_*: ignored
    assert exgen.main(["--check", "--root", str(tmp_path)]) == 1
    assert "exercises/00_demo.ipynb: missing" in capsys.readouterr().out
    assert exgen.main(["--root", str(tmp_path)]) == 0
    written = tmp_path / "exercises" / "00_demo.ipynb"
    assert written.read_text() == (FIXTURES / "exercises" / "00_demo.ipynb").read_text()
    assert json.loads(written.read_text())["cells"][0]["cell_type"] == "markdown"
    assert exgen.main(["--check", "--root", str(tmp_path)]) == 0
    assert exgen.generate(tmp_path) == [], "nothing changes on a second run"
    written.write_text(written.read_text().replace("your answer", "my answer"))
    (tmp_path / "exercises" / "09_old.ipynb").write_text("{}")
    capsys.readouterr()
    assert exgen.main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "exercises/00_demo.ipynb: differs" in out and "exercises/09_old.ipynb: no solutions/09_old.ipynb" in out
    assert "my answer" in written.read_text(), "--check writes nothing"


def test_bad_markers_exit_2(tmp_path, capsys):
    (tmp_path / "solutions").mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1")])
    nbformat.write(nb, str(tmp_path / "solutions" / "01_bad.ipynb"))
    assert exgen.main(["--root", str(tmp_path)]) == 2
    assert "01_bad.ipynb cell 0" in capsys.readouterr().err


# --- the real course -----------------------------------------------------------------------------

REAL = exgen.pairs(REPO)


def test_exercises_are_in_sync_with_solutions():
    if not REAL:
        pytest.skip("solutions/ has no NN_*.ipynb yet")
    assert exgen.check(REPO) == [], "run `python -m course_lib.authoring.exgen` and commit exercises/"


@pytest.mark.notebook
@pytest.mark.parametrize("solution, exercise", REAL or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="solutions/ has no NN_*.ipynb yet"))], ids=[s.name for s, _ in REAL] or ["none"])
def test_generated_exercise_runs_unfilled_and_is_not_attempted(solution, exercise, tmp_path):
    path = tmp_path / exercise.name
    path.write_text(exgen.exercise_text(solution), encoding="utf-8")
    g = grade.grade_notebook(path, timeout=120)
    assert g.ok, [p.message for p in g.problems]
    assert g.questions, "the exercise checks questions"
    assert {q.status for q in g.questions} == {"not_attempted"}, [(q.question, q.status, q.feedback)
                                                                  for q in g.questions]
