"""Every exercise source in solutions/ has valid nbgrader metadata, one prompt/answer/grade cell per question of its
set, and stored outputs showing each grade cell passed (nbval re-runs them)."""
import importlib
import re
from pathlib import Path

import nbformat
import pytest

from repo import ROOT
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def _set_for(path: Path):
    return importlib.import_module(f"course_lib.checks.ex{path.name[:2]}")


@pytest.fixture(params=SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def solution(request):
    return request.param, nbformat.read(request.param, as_version=4), _set_for(request.param)


def test_solution_has_valid_nbgrader_metadata(solution):
    _, nb, _ = solution
    nbgraderformat = pytest.importorskip("nbgrader.nbgraderformat")
    nbgraderformat.MetadataValidator().validate_nb(nb)
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells]
    assert len(ids) == len(set(ids)), "grade_ids must be unique"
    assert all(c.metadata["nbgrader"]["schema_version"] == 3 for c in nb.cells)


def test_solution_has_a_prompt_answer_and_grade_cell_per_question(solution):
    _, nb, qs = solution
    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells}
    for q in qs.QUESTIONS:
        ans, grd = cells[f"{q.id}-answer"], cells[f"{q.id}-grade"]
        a, g = ans.metadata.nbgrader, grd.metadata.nbgrader
        assert a["solution"] and not a["grade"] and not a["locked"]
        assert g["grade"] and g["locked"] and not g["solution"] and g["points"] == q.points
        assert "### BEGIN SOLUTION" in ans.source and "### END SOLUTION" in ans.source
        assert re.search(rf"q\.{q.id}\.check\(\w+(, [^)]*)?strict=True", grd.source), grd.source
        assert q.objective.split()[0] in cells[f"{q.id}-prompt"].source


def test_solution_stored_outputs_show_every_check_passed(solution):
    _, nb, qs = solution
    graded = [c for c in nb.cells if c.metadata["nbgrader"].get("grade")]
    assert len(graded) == len(qs.QUESTIONS)
    for c in graded:
        assert c.outputs, f"{c.metadata.nbgrader.grade_id} has no stored output"
        assert not any(o.output_type == "error" for o in c.outputs)
        records = [o.data.get("application/vnd.course.check+json") for o in c.outputs if "data" in o]
        assert any(r and r["status"] == "correct" and r["strict"] for r in records)
