"""Generate the learners' exercise notebooks from the hand-written solutions.

Lessons: none

``python -m course_lib.authoring.exgen [--check] [--root DIR]`` writes ``exercises/NN_*.ipynb`` for every
``solutions/NN_*.ipynb``:

* code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` is replaced by a placeholder:
  each assignment ``x = ...`` becomes ``x = ____  # your answer``; a function body (the markers
  inside a ``def``, or a whole ``def`` between the markers) becomes
  ``raise NotImplementedError  # your code here`` with the ``def`` line(s), the docstring and the
  indentation kept; anything else becomes ``# your code here`` (``pass  # your code here`` inside
  another block).  In markdown cells the region becomes ``_Your answer here._``;
* lines from ``### BEGIN HIDDEN TESTS`` to ``### END HIDDEN TESTS`` are removed (a cell that is
  left empty and carries no nbgrader metadata is dropped);
* cells tagged ``solution-only`` are dropped;
* outputs, execution counts, execution timing metadata and widget state are cleared; nbgrader
  metadata is kept;
* the output is deterministic (``nbformat.write``: sorted keys, stable cell ids).

``--check`` writes nothing: it lists the exercise files that differ from what would be generated
(or are missing, or have no solution any more) and exits 1 if there are any.

``--classroom OUTDIR`` writes a *classroom release* (:func:`classroom_release`): the exercise notebooks
and a ``course_lib`` whose question sets carry no answer key (each ``checks/exNN.py`` is replaced by
its key-less module, :func:`course_lib.checks.question.keyless_module_source`: the questions' form,
dimension, unit, symbols, options, test inputs, prompts and hints; no expected value, case result,
mistake or worked solution), with a ``pyproject.toml`` to ``pip install`` it.  Checks there say whether
an answer has the right form ("Answer recorded"); the key stays with ``solutions/`` and the grader.
"""
from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import re
import sys
import textwrap
from pathlib import Path

__all__ = [
    "BEGIN_SOLUTION",
    "END_SOLUTION",
    "BEGIN_HIDDEN",
    "END_HIDDEN",
    "SOLUTION_ONLY_TAG",
    "ExgenError",
    "transform_code",
    "transform_markdown",
    "make_exercise",
    "exercise_text",
    "pairs",
    "generate",
    "check",
    "classroom_release",
    "RELEASE_MARKER",
    "main",
]

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
SOLUTION_ONLY_TAG = "solution-only"
CODE_HERE = "# your code here"
RAISE = "raise NotImplementedError  # your code here"
MARKDOWN_ANSWER = "_Your answer here._"
_NAME_RE = re.compile(r"^\d{2}_.*\.ipynb$")


class ExgenError(ValueError):
    """A solution notebook whose markers are unbalanced or nested."""


# ------------------------------------------------------------------------------------------------
# Code cells
# ------------------------------------------------------------------------------------------------


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _is_marker(line: str, marker: str) -> bool:
    return line.strip() == marker


def _regions(lines: list[str], begin: str, end: str, where: str) -> list[tuple[int, int]]:
    """(begin index, end index) of each marked region; raises ExgenError when unbalanced."""
    out, start = [], None
    for i, line in enumerate(lines):
        if _is_marker(line, begin):
            if start is not None:
                raise ExgenError(f"{where}: nested {begin!r} at line {i + 1}")
            start = i
        elif _is_marker(line, end):
            if start is None:
                raise ExgenError(f"{where}: {end!r} without {begin!r} at line {i + 1}")
            out.append((start, i))
            start = None
    if start is not None:
        raise ExgenError(f"{where}: {begin!r} at line {start + 1} is never closed")
    return out


def _enclosing_def(source_lines: list[str], marker_index: int) -> bool:
    """Is line ``marker_index`` inside a function body?  AST when the cell parses, else indentation."""
    try:
        tree = ast.parse("\n".join(source_lines))
    except SyntaxError:
        tree = None
    if tree is not None:
        lineno = marker_index + 1
        return any(
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno < lineno <= (node.end_lineno or 0)
            for node in ast.walk(tree)
        )
    indent = len(_indent(source_lines[marker_index]))
    for line in reversed(source_lines[:marker_index]):
        if not line.strip() or line.strip().startswith("#"):
            continue
        if len(_indent(line)) < indent:
            return bool(re.match(r"\s*(async\s+)?def\s", line))
    return False


def _targets(node, source: str) -> list[str]:
    """Source text of each assignment target (names, tuples, attributes, subscripts)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    return [" ".join((ast.get_source_segment(source, t) or ast.unparse(t)).split()) for t in targets]


def _placeholder_for(target_src: str) -> str:
    """``____`` for a plain target, ``____, ____`` for a tuple target ``a, b``."""
    try:
        node = ast.parse(target_src, mode="eval").body
    except SyntaxError:
        return "____"
    if isinstance(node, (ast.Tuple, ast.List)):
        return ", ".join("____" for _ in node.elts)
    return "____"


def _def_stub(node, region_lines: list[str], indent: str) -> list[str]:
    """A function definition with its body replaced by ``raise NotImplementedError``."""
    first_body = node.body[0]
    doc = None
    if (isinstance(first_body, ast.Expr) and isinstance(getattr(first_body, "value", None), ast.Constant)
            and isinstance(first_body.value.value, str)):
        doc = first_body
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    body_start = first_body.lineno - 1
    own_line = (body_start < len(region_lines)
                and len(_indent(region_lines[body_start])) == first_body.col_offset
                and body_start > node.lineno - 1)
    if own_line:
        keep = region_lines[start:body_start]
        if doc is not None:
            keep += region_lines[doc.lineno - 1: doc.end_lineno]
        keep.append(_indent(region_lines[body_start]) + RAISE)
        return [indent + line if line.strip() else line for line in keep]
    # a one-line def (``def f(x): return x``): rebuild it
    stub = copy.deepcopy(node)
    raise_stmt = ast.parse("raise NotImplementedError").body[0]
    stub.body = ([doc] if doc is not None else []) + [raise_stmt]
    text = ast.unparse(stub).splitlines()
    text[-1] = text[-1] + "  " + CODE_HERE
    return [indent + line for line in text]


def _replace_solution(region: list[str], indent: str, in_function: bool) -> list[str]:
    """The placeholder lines for one solution region (``region`` excludes the markers)."""
    if in_function:
        return [indent + RAISE]
    body = textwrap.dedent("\n".join(region))
    out: list[str] = []
    try:
        tree = ast.parse(body)
    except SyntaxError:
        tree = None
    if tree is not None:
        dedented = body.splitlines()
        seen: set[str] = set()
        last_end = None  # last source line (1-based) of the previous statement that produced output

        def gap(first_line: int) -> list[str]:
            """The blank lines (at most 2) the source had before ``first_line``."""
            if last_end is None:
                return []
            blank = sum(1 for ln in dedented[last_end: first_line - 1] if not ln.strip())
            return [""] * min(blank, 2)

        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                out += gap(first) + _def_stub(node, dedented, indent)
                last_end = node.end_lineno
                continue
            produced = []
            for target in _targets(node, body):
                if target in seen:
                    continue
                seen.add(target)
                annotation = ""
                if isinstance(node, ast.AnnAssign):
                    annotation = ": " + ast.unparse(node.annotation)
                produced.append(f"{indent}{target}{annotation} = {_placeholder_for(target)}  # your answer")
            if produced:
                out += gap(node.lineno) + produced
                last_end = node.end_lineno
    else:  # not plain Python (magics): keep simple assignments only
        seen = set()
        for line in region:
            m = re.match(r"^\s*([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=(?!=)", line)
            if m and _indent(line) == indent and m.group(1) not in seen:
                seen.add(m.group(1))
                out.append(f"{indent}{m.group(1)} = {_placeholder_for(m.group(1))}  # your answer")
    if not out:
        out = [indent + (("pass  " + CODE_HERE) if indent else CODE_HERE)]
    return out


def transform_code(source: str, where: str = "cell") -> str:
    """The exercise version of one code cell's source (see the module docstring)."""
    lines = source.split("\n")
    # hidden tests first: they are removed entirely
    for b, e in reversed(_regions(lines, BEGIN_HIDDEN, END_HIDDEN, where)):
        del lines[b: e + 1]
    regions = _regions(lines, BEGIN_SOLUTION, END_SOLUTION, where)
    for b, e in reversed(regions):
        indent = _indent(lines[b])
        in_function = bool(indent) and _enclosing_def(
            lines[:b] + [indent + "pass"] + lines[e + 1:], b)
        lines[b: e + 1] = _replace_solution(lines[b + 1: e], indent, in_function)
    text = "\n".join(lines)
    return text if text == source else text.rstrip()


def transform_markdown(source: str, where: str = "cell") -> str:
    lines = source.split("\n")
    for b, e in reversed(_regions(lines, BEGIN_SOLUTION, END_SOLUTION, where)):
        lines[b: e + 1] = [MARKDOWN_ANSWER]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Notebooks
# ------------------------------------------------------------------------------------------------


def _stable_id(name: str, index: int) -> str:
    return hashlib.sha1(f"{name}:{index}".encode()).hexdigest()[:12]


def make_exercise(nb, name: str = "notebook"):
    """A new notebook node: the exercise version of solution notebook ``nb`` (not modified)."""
    import nbformat

    ex = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(ex.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if SOLUTION_ONLY_TAG in tags:
            continue
        where = f"{name} cell {index}"
        source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        if cell.cell_type == "code":
            new = transform_code(source, where)
            if not new.strip() and source.strip() and "nbgrader" not in cell.metadata:
                continue  # only hidden tests were in it
            cell.source = new
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source = transform_markdown(source, where)
        cell.metadata.pop("execution", None)
        if "id" in cell or (ex.nbformat, ex.nbformat_minor) >= (4, 5):
            cell["id"] = cell.get("id") or _stable_id(name, index)
        cells.append(cell)
    ex.cells = cells
    ex.metadata.pop("widgets", None)
    ex.metadata["course"] = {"generated_from": f"solutions/{name}", "generator": "course_lib.authoring.exgen",
                             "note": "Generated file: edit the solution notebook and run "
                                     "`python -m course_lib.authoring.exgen`."}
    nbformat.validate(ex)
    return ex


def exercise_text(solution_path) -> str:
    """The exact file content ``exercises/<name>`` should have for ``solution_path``."""
    import nbformat

    path = Path(solution_path)
    nb = nbformat.read(str(path), as_version=4)
    ex = make_exercise(nb, path.name)
    text = nbformat.writes(ex, version=4)
    return text if text.endswith("\n") else text + "\n"


def _root(root) -> Path:
    if root is not None:
        return Path(root)
    import course_lib

    here = Path(course_lib.__file__).resolve().parent.parent
    return here if (here / "solutions").is_dir() else Path.cwd()


def pairs(root=None) -> list[tuple[Path, Path]]:
    """(solution, exercise) paths for every ``solutions/NN_*.ipynb`` under ``root``."""
    base = _root(root)
    sols = sorted(p for p in (base / "solutions").glob("*.ipynb") if _NAME_RE.match(p.name))
    return [(s, base / "exercises" / s.name) for s in sols]


def generate(root=None) -> list[Path]:
    """Write every exercise notebook; return the paths written (only those that changed)."""
    written = []
    for sol, ex in pairs(root):
        text = exercise_text(sol)
        if not ex.exists() or ex.read_text(encoding="utf-8") != text:
            ex.parent.mkdir(parents=True, exist_ok=True)
            ex.write_text(text, encoding="utf-8")
            written.append(ex)
    return written


def check(root=None) -> list[str]:
    """Problems: exercise files that differ from the generator's output, are missing, or are stale."""
    base = _root(root)
    problems = []
    expected = set()
    for sol, ex in pairs(base):
        expected.add(ex.name)
        if not ex.exists():
            problems.append(f"{ex.relative_to(base)}: missing (generate it from {sol.relative_to(base)})")
        elif ex.read_text(encoding="utf-8") != exercise_text(sol):
            problems.append(f"{ex.relative_to(base)}: differs from the output for {sol.relative_to(base)}")
    ex_dir = base / "exercises"
    if ex_dir.is_dir():
        for ex in sorted(ex_dir.glob("*.ipynb")):
            if _NAME_RE.match(ex.name) and ex.name not in expected:
                problems.append(f"{ex.relative_to(base)}: no solutions/{ex.name} (stale exercise)")
    return problems


#: The file that marks a folder as a classroom release (so that ``--classroom`` may replace it).
RELEASE_MARKER = ".course-classroom-release"

_RELEASE_README = """# Classroom release

The exercise notebooks (`exercises/`) and the course library (`course_lib/`) without the answer key:
each check says whether an answer has the right form (a number of the right dimension and unit, a
formula in the question's symbols, one of the options, a function that runs) and records it; whether it
is right is decided by your instructor's grader. Install with `pip install .` (or put this folder on
`PYTHONPATH`) and open the notebooks in `exercises/`.
"""


def classroom_release(outdir, root=None) -> list[Path]:
    """Write a classroom release into ``outdir`` (created; a previous release there is replaced): the
    exercise notebooks of ``root`` under ``exercises/``, the key-less ``course_lib`` and a ``pyproject.toml``.
    Returns the files written.  Raises ExgenError for a folder that is not empty and not a release."""
    import shutil

    from course_lib.authoring import sandbox

    base = _root(root)
    out = Path(outdir)
    if out.exists() and any(out.iterdir()):
        if not (out / RELEASE_MARKER).exists():
            raise ExgenError(f"{out} is not empty and is not a classroom release: refusing to write there")
        shutil.rmtree(out)
    course = Path(sandbox._course_root()).resolve()
    if out.resolve() in (course, base.resolve()) or course in out.resolve().parents and \
            out.resolve().is_relative_to(course / "course_lib"):
        raise ExgenError(f"{out} is inside the course itself: give another folder")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    from course_lib import checks

    sets = [*checks.available_sets(), "_demo"]
    for rel, data in sandbox.keyless_files(sets):
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(target)
    for sol, ex in pairs(base):
        target = out / "exercises" / ex.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(exercise_text(sol), encoding="utf-8")
        written.append(target)
    pyproject = course / "pyproject.toml"
    if pyproject.exists():
        text = pyproject.read_text(encoding="utf-8")
        cut = text.find("\n[tool.pytest")
        text = text if cut < 0 else text[: cut + 1]
        (out / "pyproject.toml").write_text(text, encoding="utf-8")
        written.append(out / "pyproject.toml")
    (out / "README.md").write_text(_RELEASE_README, encoding="utf-8")
    (out / RELEASE_MARKER).write_text("written by python -m course_lib.authoring.exgen --classroom\n",
                                      encoding="utf-8")
    return written + [out / "README.md", out / RELEASE_MARKER]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.authoring.exgen",
                                     description="Generate exercises/NN_*.ipynb from solutions/NN_*.ipynb.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and list the files that are out of date")
    parser.add_argument("--root", help="course root containing solutions/ and exercises/ (default: the repository)")
    parser.add_argument("--classroom", metavar="OUTDIR",
                        help="write a classroom release to OUTDIR: the exercises and a course_lib without the "
                             "answer key (see docs/CHECKS_API.md, 'Two modes')")
    args = parser.parse_args(argv)
    try:
        if args.classroom:
            written = classroom_release(args.classroom, args.root)
            print(f"classroom release in {args.classroom}: {len(written)} file(s), no answer key")
            return 0
        if args.check:
            problems = check(args.root)
            for p in problems:
                print(p)
            if problems:
                print(f"{len(problems)} exercise notebook(s) out of date: run `python -m course_lib.authoring.exgen`")
                return 1
            print(f"exercises up to date ({len(pairs(args.root))} notebook(s))")
            return 0
        written = generate(args.root)
        for p in written:
            print(f"wrote {p}")
        print(f"{len(written)} written, {len(pairs(args.root)) - len(written)} unchanged")
        return 0
    except ExgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
