"""The map of the course is kept current: README and lesson 00 show the table generated from lessons.json."""
from pathlib import Path

import nbformat

from course_lib.lessons import lesson_map as lessons

ROOT = Path(__file__).resolve().parents[1]


def test_readme_map_is_current():
    assert lessons.map_markdown() in (ROOT / "README.md").read_text(), (
        "README's lesson map is stale: paste course_lib.lessons.map_markdown() into it")


def test_lesson_00_renders_the_map_from_code():
    nb = nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and "lessons.map_markdown()" in c.source]
    assert code, "00_start_here must display lessons.map_markdown()"
    out = "".join(o.get("data", {}).get("text/markdown", "") for o in code[0].outputs)
    assert lessons.map_markdown() in out


def test_every_lesson_notebook_is_on_the_map_and_ready_ones_exist():
    stems = {les["stem"] for les in lessons.lessons()}
    on_disk = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert on_disk <= stems, f"notebooks missing from the map: {sorted(on_disk - stems)}"
    assert [les["n"] for les in lessons.lessons()] == [f"{i:02d}" for i in range(10)]
    for les in lessons.lessons():
        assert les["time_min"] > 0 and les["outcome"] and les["title"]
