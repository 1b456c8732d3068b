"""The map of the course is kept current: README and lesson 00 show the table generated from lessons.json,
each lesson's ``modules`` list is exactly what its notebooks import, and each module's docstring names the
lessons it serves.

What a lesson "uses" is read statically (no notebook runs, torch is never imported): the ``import`` and
``from ... import`` statements of the lesson notebook, its exercise set (``exercises/NN_*.ipynb`` and
``solutions/NN_*.ipynb``, which import the same modules: exgen copies the solutions' import cell) and, for
lesson 09, the app (``app/dashboard.ipynb``, the lesson's dashboard as a web app). A name imported from a
package that re-exports it (``from course_lib import estimate``) counts as its defining module
(``course_lib.core.estimator``).
Notebooks import public names only, and no display module (``course_lib.lessons``) evaluates the
generated formulas itself.

    python tests/test_lessons_map.py     # print each lesson's modules and each module's lessons
"""
from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from pathlib import Path

import nbformat

from course_lib.lessons import lesson_map as lessons

from repo import ROOT
PKG = ROOT / "course_lib"
APP_LESSON = {"app/dashboard.ipynb": "09"}


def test_readme_map_is_current(repo_root):
    assert lessons.map_markdown() in (repo_root / "README.md").read_text(), (
        "README's lesson map is stale: paste course_lib.lessons.map_markdown() into it")


def test_lesson_00_renders_the_map_from_code(repo_root):
    nb = nbformat.read(repo_root / "notebooks" / "00_start_here.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and "lessons.map_markdown()" in c.source]
    assert code, "00_start_here must display lessons.map_markdown()"
    out = "".join(o.get("data", {}).get("text/markdown", "") for o in code[0].outputs)
    assert lessons.map_markdown() in out


def test_every_lesson_notebook_is_on_the_map_and_ready_ones_exist(repo_root):
    stems = {les["stem"] for les in lessons.lessons()}
    on_disk = {p.stem for p in (repo_root / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert on_disk <= stems, f"notebooks missing from the map: {sorted(on_disk - stems)}"
    assert [les["n"] for les in lessons.lessons()] == [f"{i:02d}" for i in range(len(lessons.lessons()))]
    for les in lessons.lessons():
        assert les["time_min"] > 0 and les["outcome"] and les["title"]


# --------------------------------------------------------------------------------------------------
# Static import analysis
# --------------------------------------------------------------------------------------------------
def _file(module: str) -> Path | None:
    """The source file of ``course_lib.x.y`` (a module or a package's ``__init__``), or None."""
    parts = module.split(".")
    if parts[0] != "course_lib":
        return None
    base = ROOT.joinpath(*parts)
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


@lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
    return ast.parse(_file(module).read_text(encoding="utf-8"))


def defining_module(module: str, name: str, _depth: int = 0) -> str:
    """The module ``from module import name`` gets ``name`` from: a submodule, or the module whose
    re-export it is (followed through package ``__init__`` files), else ``module`` itself."""
    sub = f"{module}.{name}"
    if _file(sub) is not None:
        return sub
    if _depth < 5 and _file(module) is not None:
        for node in _tree(module).body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("course_lib"):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return defining_module(node.module, alias.name, _depth + 1)
    return module


def imports_in(code: str) -> set[str]:
    """The course_lib modules that ``code`` imports (every statement, including those inside functions)."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "course_lib"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "course_lib":
            found |= {defining_module(node.module, a.name) for a in node.names}
    return {m for m in found if _file(m) is not None}


def notebook_imports(path: Path) -> set[str]:
    nb = nbformat.read(path, as_version=4)
    return set().union(*(imports_in(c.source) for c in nb.cells if c.cell_type == "code"))


def lesson_notebooks(n: str) -> list[Path]:
    """The notebooks of lesson ``n``: the lesson, its exercise set (both copies) and, for 09, the app."""
    paths = sorted(ROOT.glob(f"notebooks/{n}_*.ipynb")) + sorted(ROOT.glob(f"exercises/{n}_*.ipynb")) + sorted(
        ROOT.glob(f"solutions/{n}_*.ipynb"))
    return paths + [ROOT / p for p, les in APP_LESSON.items() if les == n]


def direct_modules(n: str) -> list[str]:
    return sorted(set().union(*(notebook_imports(p) for p in lesson_notebooks(n))))


@lru_cache(maxsize=None)
def module_imports(module: str) -> frozenset[str]:
    return frozenset(imports_in(_file(module).read_text(encoding="utf-8")) - {module})


def closure(modules) -> set[str]:
    """``modules`` and every course_lib module they import, transitively (explicit imports only)."""
    seen, todo = set(), list(modules)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(module_imports(m))
    return seen


def public_modules() -> list[str]:
    """Every module file under course_lib/ except packages' ``__init__`` and private modules (``_x.py``)."""
    out = []
    for f in sorted(PKG.rglob("*.py")):
        if f.name == "__init__.py" or any(p.startswith("_") for p in f.relative_to(ROOT).with_suffix("").parts):
            continue
        out.append(".".join(f.relative_to(ROOT).with_suffix("").parts))
    return out


_LESSONS_LINE = re.compile(r"^Lessons: (.+)$", re.MULTILINE)


def docstring_lessons(module: str) -> set[str] | None:
    """The lessons a module's docstring names on its ``Lessons: 01, 06`` line (``none``: no lesson); None
    when there is no such line."""
    doc = ast.get_docstring(_tree(module)) or ""
    m = _LESSONS_LINE.search(doc)
    if m is None:
        return None
    text = m.group(1).strip().rstrip(".")
    return set() if text == "none" else {x.strip() for x in text.split(",")}


def expected_map() -> dict[str, dict]:
    """{lesson: {"modules": direct imports, "closure": everything they reach}} computed from the sources."""
    out = {}
    for les in lessons.lessons():
        direct = direct_modules(les["n"])
        out[les["n"]] = {"modules": direct, "closure": closure(direct)}
    return out


# --------------------------------------------------------------------------------------------------
# The map and the docstrings
# --------------------------------------------------------------------------------------------------
def test_the_analysis_resolves_re_exports():
    assert imports_in("from course_lib import estimate, get_model") == {"course_lib.core.estimator",
                                                                         "course_lib.core.models"}
    assert imports_in("from course_lib.core import capstone\nimport course_lib.measure.probes") == {
        "course_lib.core.capstone", "course_lib.measure.probes"}
    assert imports_in("%matplotlib inline\nfrom course_lib.lessons.widgets import estimate_explorer") == {
        "course_lib.lessons.widgets.estimator"}
    assert imports_in("from course_lib.checks import ex01 as q\nimport math") == {"course_lib.checks.ex01"}


def test_every_lesson_has_notebooks_and_exercises_match_solutions():
    for les in lessons.lessons():
        paths = lesson_notebooks(les["n"])
        assert ROOT / "notebooks" / f"{les['stem']}.ipynb" in paths
        ex, sol = (sorted(ROOT.glob(f"{d}/{les['n']}_*.ipynb")) for d in ("exercises", "solutions"))
        assert [p.name for p in ex] == [p.name for p in sol]
        for e, s in zip(ex, sol):
            assert notebook_imports(e) == notebook_imports(s), f"{e.name}: exercise and solution import differently"


def test_lessons_json_lists_the_modules_each_lesson_imports():
    expected = expected_map()
    for les in lessons.lessons():
        want = expected[les["n"]]["modules"]
        assert les.get("modules") == want, (
            f"lesson {les['n']}: course_lib/data/lessons.json 'modules' should be {json.dumps(want)}")


def test_every_module_names_the_lessons_it_serves():
    """``Lessons:`` in every public module's docstring: each lesson whose notebooks import the module
    directly, and only lessons that reach it (directly or through the modules they import)."""
    expected = expected_map()
    problems = []
    for mod in public_modules():
        named = docstring_lessons(mod)
        direct = {n for n, e in expected.items() if mod in e["modules"]}
        reach = {n for n, e in expected.items() if mod in e["closure"]}
        if named is None:
            problems.append(f"{mod}: no 'Lessons: ...' line in its docstring (lessons reaching it: "
                            f"{', '.join(sorted(reach)) or 'none'})")
        elif not direct <= named <= reach:
            problems.append(f"{mod}: docstring names lessons {sorted(named)}; imported directly by {sorted(direct)}, "
                            f"reached by {sorted(reach)}")
    assert not problems, "\n".join(problems)


#: private modules a notebook still imports, each with the reason (rename it public to drop it from here)
PRIVATE_IMPORT_EXCEPTIONS = {
    "course_lib.checks._demo": "lesson 00's demo question set (owned by course_lib.checks; to be made public)",
}


def _private_names(code: str) -> set[str]:
    """Dotted names of course_lib imported by ``code`` that have a private part (``_generated``, ``_x``)."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith("course_lib.")
                  and any(part.startswith("_") and not part.startswith("__") for part in n.split("."))}
    return found


def test_notebooks_import_public_names_only():
    problems = {}
    for les in lessons.lessons():
        for path in lesson_notebooks(les["n"]):
            nb = nbformat.read(path, as_version=4)
            private = set().union(*(_private_names(c.source) for c in nb.cells if c.cell_type == "code"))
            private -= set(PRIVATE_IMPORT_EXCEPTIONS)
            if private:
                problems[str(path.relative_to(ROOT))] = sorted(private)
    assert not problems, f"notebooks importing private names (use the public core instead): {problems}"
    assert _private_names("from course_lib.core import _generated as g") == {"course_lib.core._generated"}


def test_display_modules_take_their_numbers_from_the_public_core():
    """lessons/ renders what the core computes: no widget or plot evaluates the generated formulas itself."""
    display = [m for m in public_modules() if m.startswith("course_lib.lessons.")]
    assert display
    offenders = {m: sorted(mods) for m in display
                 if (mods := {x for x in module_imports(m) if x == "course_lib.core._generated"})}
    assert not offenders, offenders


if __name__ == "__main__":
    exp = expected_map()
    for n, e in exp.items():
        print(n, json.dumps(e["modules"]))
    for mod in public_modules():
        reach = sorted(n for n, e in exp.items() if mod in e["closure"])
        print(f"{mod}: Lessons: {', '.join(reach) or 'none'}   (docstring: {docstring_lessons(mod)})")
