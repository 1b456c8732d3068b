"""Tampering checks for the grader: grade cells restored from ``solutions/``, patching found in the source.

Lessons: none

* :func:`find_reference` reads a question set's solution notebook (``solutions/NN_*.ipynb``, or any
  folder given to ``--solutions``) and keeps its *reference cells*: the code cells nbgrader marks as grade
  cells or locked (``metadata.nbgrader.grade`` / ``locked``, keyed by ``grade_id``), with the released
  source (:func:`course_lib.authoring.exgen.transform_code`: hidden tests removed) and the graded source
  (hidden tests kept).
* :func:`restore` compares a learner's notebook with them: an *edited* grade cell (its source differs from
  the released one), a *deleted* one (no cell with its ``grade_id``) and a *duplicated* one (a second cell
  with the same ``grade_id``) are tampering; the notebook that runs has every grade cell with the solution's
  source (hidden tests included), once, and the learner's other cells unchanged.  Locked cells that are not
  grade cells (the setup cell) are only compared (a warning: copies made with an older release of the course
  have older imports there) and run as the learner has them (the patching scan reads them); a deleted one
  is restored.
* :func:`scan_patching` reads the learner's code cells (not the restored ones) as Python (IPython magics
  translated) and finds assignments to attributes or items of objects reached from ``course_lib`` (or from
  a module the checks rely on: sympy, math, builtins, ...), ``setattr``/``delattr`` on them, rebinding a
  name imported from ``course_lib.checks``, and reads of the answer key (``.expected``, ``.cases``,
  ``.mistakes``, private attributes).  It is a static scan: code built at run time (``exec`` of a string,
  ``getattr`` with a computed name) is not seen.  It is linear in the code's size (aliases are followed
  as a graph, in any order) and stops at :data:`SCAN_TIME_S` seconds with a warning: the sandbox, not the
  scan, is what keeps graded code from the key.
* :func:`shadowing` lists modules beside the learner's notebook that would shadow an import (a
  ``sympy.py``); they are not copied into the grading folder, and are reported.

Serves no lesson: an authoring tool.
"""
from __future__ import annotations

import ast
import copy
import functools
import importlib.machinery
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RefCell", "Reference", "Finding", "find_reference", "restore", "scan_patching", "shadowing",
           "set_number_mismatch"]

#: Modules the checks' judgement relies on: patching them is tampering, like patching course_lib.
JUDGE_MODULES = frozenset({
    "course_lib", "sympy", "math", "cmath", "builtins", "__builtins__", "operator", "numbers", "fractions",
    "decimal", "re", "json", "numpy", "IPython", "ipykernel", "sys", "importlib", "inspect", "types",
    "functools",
})
#: Attributes of a question that carry the answer key.
KEY_ATTRS = frozenset({"expected", "cases", "mistakes"})
_WRAPPERS = frozenset({"type", "vars", "getattr"})
#: Seconds the static scan of one notebook may take; past it, the rest is not scanned (a warning).
SCAN_TIME_S = 10.0


@dataclass(frozen=True)
class RefCell:
    grade_id: str
    grade: bool  # a grade cell (else a locked cell)
    released: str  # the source learners got
    graded: str  # the source that runs when grading (hidden tests kept)


@dataclass(frozen=True)
class Reference:
    path: Path
    cells: tuple[RefCell, ...]
    order: tuple[str, ...]  # every grade_id of the solution notebook, in order


@dataclass(frozen=True)
class Finding:
    kind: str  # "tampered" or "warning"
    message: str
    cell: int | None = None


def _nbgrader(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


@functools.lru_cache(maxsize=32)
def _references(folder: str) -> dict[str, Reference]:
    import nbformat

    from course_lib.authoring.exgen import transform_code
    from course_lib.authoring.grade import sets_in_source

    out: dict[str, Reference] = {}
    for path in sorted(Path(folder).glob("*.ipynb")):
        try:
            nb = nbformat.read(str(path), as_version=4)
        except Exception:
            continue
        cells, order = [], []
        for cell in nb.cells:
            meta = _nbgrader(cell)
            gid = meta.get("grade_id")
            if not gid:
                continue
            order.append(gid)
            if cell.cell_type == "code" and (meta.get("grade") or meta.get("locked")):
                cells.append(RefCell(gid, bool(meta.get("grade")), transform_code(cell.source), cell.source))
        if cells:
            for name in sets_in_source(nb):
                out.setdefault(name, Reference(path, tuple(cells), tuple(order)))
    return out


def find_reference(solutions, set_name: str) -> Reference | None:
    """The reference cells of ``set_name`` from the solution notebooks in folder ``solutions``, or None."""
    folder = Path(solutions)
    if not folder.is_dir():
        return None
    return _references(str(folder.resolve())).get(set_name)


def restore(nb, ref: Reference):
    """``(graded notebook, origin, reference index, findings)``: ``origin[i]`` is the learner's cell index
    of graded cell ``i`` (None for a restored deleted cell); ``reference index`` maps a graded cell index to
    the :class:`RefCell` it runs."""
    by_id = {c.grade_id: c for c in ref.cells}
    cells, origin, refs, findings, seen = [], [], {}, [], {}
    for i, cell in enumerate(nb.cells):
        gid = _nbgrader(cell).get("grade_id")
        rc = by_id.get(gid) if cell.cell_type == "code" else None
        if rc is None:
            cells.append(cell)
            origin.append(i)
            continue
        edited = _norm(cell.source) not in (_norm(rc.released), _norm(rc.graded))  # the solution itself is fine
        if not rc.grade:  # a locked cell (the setup): older course versions differ, so the learner's runs
            if edited or gid in seen:
                findings.append(Finding("warning", f"locked cell {gid!r} (cell {i}) was "
                                        f"{'edited' if edited else 'duplicated'}; the learner's version ran"))
            seen.setdefault(gid, i)
            cells.append(cell)
            origin.append(i)
            continue
        what = "grade cell"
        if gid in seen:
            findings.append(Finding("tampered", f"{what} {gid!r} is duplicated (cells {seen[gid]} and {i}); "
                                    "the copy was not run", i))
            continue
        seen[gid] = i
        if edited:
            findings.append(Finding("tampered", f"{what} {gid!r} (cell {i}) was edited; graded with the "
                                    f"original from {ref.path.name}", i))
        new = copy.deepcopy(cell)
        new.source = rc.graded
        new.outputs = []
        refs[len(cells)] = rc
        cells.append(new)
        origin.append(i)
    for rc in ref.cells:
        if rc.grade_id in seen:
            continue
        what = "grade cell" if rc.grade else "locked cell"
        findings.append(Finding("tampered" if rc.grade else "warning", f"{what} {rc.grade_id!r} was deleted; "
                                f"graded with the original from {ref.path.name}"))
        pos = _insert_at(cells, ref.order, rc.grade_id)
        from nbformat.v4 import new_code_cell

        new = new_code_cell(rc.graded)
        new.metadata["nbgrader"] = {"grade_id": rc.grade_id, "grade": rc.grade, "locked": True}
        cells.insert(pos, new)
        origin.insert(pos, None)
        refs = {(k + 1 if k >= pos else k): v for k, v in refs.items()}
        refs[pos] = rc
        seen[rc.grade_id] = None
    graded = copy.copy(nb)
    graded.cells = cells
    return graded, origin, refs, findings


def _insert_at(cells, order, gid) -> int:
    """After the last present cell whose grade_id comes before ``gid`` in the solution (else first)."""
    earlier = set(order[: order.index(gid)]) if gid in order else set()
    pos = 0
    for i, cell in enumerate(cells):
        if _nbgrader(cell).get("grade_id") in earlier:
            pos = i + 1
    return pos


# ------------------------------------------------------------------------------------------------
# Patching in the learner's code
# ------------------------------------------------------------------------------------------------


def _python(source: str) -> ast.AST | None:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:
        pass
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, SystemError):  # 3.11: SystemError past the depth
        return None


def _root(node) -> ast.AST:
    """The innermost object an attribute/item chain starts from (through ``type()``, ``vars()``, ``getattr()``)."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _WRAPPERS
              and node.args):
            node = node.args[0]
        else:
            return node


def _is_course_lib_string(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        node.value.split(".")[0] in JUDGE_MODULES


def _tainted_expr(node, tainted: set[str]) -> bool:
    root = _root(node)
    if isinstance(root, ast.Name):
        return root.id in tainted
    if isinstance(root, ast.Call):  # importlib.import_module("course_lib..."), __import__("sympy")
        return any(_is_course_lib_string(a) for a in root.args)
    return False


def _sys_modules_item(node) -> bool:
    """``sys.modules["course_lib..."]`` anywhere in the chain."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and _is_course_lib_string(node.slice):
            return True
        node = node.value
    return False


def _label(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return "?"


def _imports(trees, roots) -> tuple[set[str], set[str]]:
    """Names bound by imports whose top module is in ``roots``, and those of them from course_lib.checks."""
    names, checks = set(), set()
    for _, tree in trees:
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in roots:
                        names.add((a.asname or a.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in roots:
                for a in node.names:
                    names.add(a.asname or a.name)
                    if node.module.startswith("course_lib.checks"):
                        checks.add(a.asname or a.name)
    return names, checks


class _ScanTimeout(Exception):
    pass


def _tick(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise _ScanTimeout


def _aliases(trees, tainted: set[str], deadline: float | None = None) -> set[str]:
    """``tainted`` with every name assigned an alias of a tainted object (``Q = q.q1``, ``C = type(Q)``),
    in whatever order the assignments come: one pass collects ``name -> names assigned from it``, a graph
    search follows it (linear in the code's size)."""
    tainted = set(tainted)
    edges: dict[str, set[str]] = {}
    for _, tree in trees:
        for node in ast.walk(tree) if tree is not None else ():
            _tick(deadline)
            if not isinstance(node, ast.Assign):
                continue
            v = node.value
            if isinstance(v, ast.Call) and not _alias_call(v):
                continue  # a call's result is data (get_model(...)), not the object
            targets = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            root = _root(v)
            if _sys_modules_item(v) or (isinstance(root, ast.Call) and _tainted_expr(v, set())):
                tainted |= targets  # sys.modules["course_lib..."], import_module("course_lib...")
            elif isinstance(root, ast.Name):
                edges.setdefault(root.id, set()).update(targets)
    todo = list(tainted)
    while todo:
        for t in edges.get(todo.pop(), ()):
            if t not in tainted:
                tainted.add(t)
                todo.append(t)
    return tainted


def _alias_call(call: ast.Call) -> bool:
    """A call whose result *is* an object reached from its argument (type(x), vars(x), getattr(x, ...),
    import_module(...)), not data."""
    f = call.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return name in _WRAPPERS or name in ("import_module", "__import__")


def scan_patching(cells, context=()) -> list[Finding]:
    """Findings in ``cells``, a list of ``(cell index, source)`` of the learner's code (in order);
    ``context``: other code cells of the notebook (the restored ones), whose imports count too."""
    findings: list[Finding] = []
    deadline = time.monotonic() + SCAN_TIME_S
    try:
        _scan(cells, context, findings, deadline)
    except _ScanTimeout:
        findings.append(Finding("warning", f"the static scan stopped at its time limit ({SCAN_TIME_S:g} s); the "
                                "rest of the code was not scanned (graded code runs in the sandbox all the same)"))
    return _dedupe(findings)


def _scan(cells, context, findings: list[Finding], deadline: float) -> None:
    trees = []
    for i, src in cells:
        _tick(deadline)
        trees.append((i, _python(src)))
    every = trees + [(i, _python(src)) for i, src in context]
    judge_names, checks_names = _imports(every, JUDGE_MODULES)
    course_names, _ = _imports(every, {"course_lib"})
    judged = _aliases(every, judge_names | JUDGE_MODULES, deadline)
    course = _aliases(every, course_names | {"course_lib"}, deadline)

    for i, tree in trees:
        if tree is None:
            continue
        for node in ast.walk(tree):
            _tick(deadline)
            targets = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in checks_names:
                findings.append(Finding("tampered", f"cell {i} redefines {node.name!r}, imported from "
                                        "course_lib.checks", i))
            for t in targets:
                for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                    if isinstance(el, (ast.Attribute, ast.Subscript)) and (
                            _tainted_expr(el.value, judged) or _sys_modules_item(el)):
                        findings.append(Finding("tampered", f"cell {i} patches {_label(el)} (code the grader "
                                                "relies on)", i))
                    elif isinstance(el, ast.Name) and el.id in checks_names:
                        findings.append(Finding("tampered", f"cell {i} rebinds {el.id!r}, imported from "
                                                "course_lib.checks", i))
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in ("setattr", "delattr", "__setattr__", "__delattr__") and node.args and (
                        _tainted_expr(node.args[0], judged) or _sys_modules_item(node.args[0])
                        or (isinstance(f, ast.Attribute) and _tainted_expr(f.value, judged))):
                    findings.append(Finding("tampered", f"cell {i} patches with {_label(node)[:120]}", i))
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and (
                    node.attr in KEY_ATTRS or (node.attr.startswith("_") and not node.attr.startswith("__"))) \
                    and _tainted_expr(node.value, course):
                findings.append(Finding("tampered", f"cell {i} reads the answer key or checker internals "
                                        f"({_label(node)})", i))


def _dedupe(findings):
    out, seen = [], set()
    for f in findings:
        if f.message not in seen:
            seen.add(f.message)
            out.append(f)
    return out


# ------------------------------------------------------------------------------------------------
# Files beside the notebook
# ------------------------------------------------------------------------------------------------


def _imported_modules(cells) -> set[str]:
    names = set()
    for _, src in cells:
        tree = _python(src)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def shadowing(folder: Path, cells) -> list[Finding]:
    """Modules in ``folder`` (the learner's) that shadow an importable module (tampered), and modules the
    notebook imports from there, which grading does not provide (a warning)."""
    folder = Path(folder)
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    here = {str(folder.resolve()), "", "."}
    path = [p for p in sys.path if p not in here and _resolved(p) not in here]
    imported = _imported_modules(cells)
    findings = []
    for entry in sorted(entries):
        if entry.suffix == ".py" or (entry.is_dir() and (entry / "__init__.py").exists()):
            name = entry.stem if entry.suffix == ".py" else entry.name
        elif entry.suffix in (".so", ".pyd") and "." in entry.stem:
            name = entry.name.split(".")[0]
        else:
            continue
        if not name.isidentifier():
            continue
        other = _elsewhere(name, path)
        if other is not None and _resolved(other) != _resolved(str(entry)):
            findings.append(Finding("tampered", f"{entry.name} beside the notebook would shadow the module "
                                    f"{name!r} ({other}); it was not used: the notebook ran alone"))
        elif name in imported:
            findings.append(Finding("warning", f"the notebook imports {name!r} from {entry.name} beside it, "
                                    "which grading does not provide (the notebook runs alone)"))
    return findings


def _resolved(p: str) -> str:
    try:
        return str(Path(p).resolve())
    except (OSError, RuntimeError):
        return p


def _elsewhere(name: str, path: list[str]) -> str | None:
    if name in sys.builtin_module_names:
        return "built-in"
    if name in getattr(sys, "stdlib_module_names", ()):
        return "standard library"
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        for finder in sys.meta_path:  # editable installs (course_lib)
            if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
                continue
            try:
                spec = finder.find_spec(name, None)
            except Exception:
                spec = None
            if spec is not None:
                break
    if spec is None:
        return None
    origin = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
    if origin is None and spec.submodule_search_locations:
        origin = list(spec.submodule_search_locations)[0]
    return str(Path(origin).parent if origin and origin.endswith("__init__.py") else origin or name)


def set_number_mismatch(file_name: str, sets: list[str]) -> str | None:
    """A warning when a file named ``NN_*.ipynb`` uses the question set of another number (``exMM``)."""
    m = re.match(r"^(\d{2})_", file_name)
    numbered = [s for s in sets if re.fullmatch(r"ex\d{2}", s)]
    if not m or not numbered or f"ex{m.group(1)}" in numbered:
        return None
    return (f"{file_name} is named for exercise set ex{m.group(1)} but uses "
            f"{', '.join(numbered)}: was a set saved under another set's name?")
