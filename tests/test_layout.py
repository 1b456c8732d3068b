"""The layout's import rules (issue 12), checked once for the whole package.

* **Light imports** -- one subprocess imports every torch-free module (``course_lib``, everything under
  ``course_lib/core/`` and ``course_lib/checks/``, ``lessons/lesson_map.py``, ``lessons/glossary.py``,
  ``lessons/prose.py``, and the old paths of the core modules, ``course_lib.dashboard``, ``course_lib.caching``
  ...), calls the core and a check, and reports what came with them: never torch,
  ipywidgets or matplotlib; and before the sympy modules (``core/formulas.py``, the question sets) and
  ``lessons/`` are imported, neither sympy nor IPython (the numeric core runs on the generated code), and
  IPython not even after a check has run;
  then the rest of ``lessons/`` (widgets, plots: ipywidgets and matplotlib) brings no torch either.
* **The core imports no torch, ipywidgets or matplotlib at all, not even lazily** -- an AST scan of
  ``course_lib/core/**`` for import statements (function bodies included), ``importlib.import_module``
  and ``__import__`` calls, naming those packages or the modules that use them (``course_lib.measure``,
  ``course_lib.lessons`` and their old names).
* **measure/ uses only public names of the core** -- an AST scan of ``course_lib/measure/**``: no
  ``from course_lib.core.x import _private``, no private core module, no ``core_module._private``.
* **The author benchmarks stand apart** -- what lessons import from ``course_lib/measure/`` (probes, steady,
  calibrate, predict, TinyLM, the engines' timing) never imports ``course_lib.measure.benchmarks`` (the
  benchmarks, their bracketed-measurement primitive and judging rule); nor do core/, checks/, lessons/ or
  authoring/. Only the command entry points at the top of the package may run them.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT as ROOT

from course_lib import _compat

PKG = ROOT / "course_lib"

HEAVY = ("torch", "ipywidgets", "matplotlib")
#: sympy comes only with core/formulas.py and the question sets (expression questions)
LATE = ("sympy", "IPython")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_under(folder: str) -> list[str]:
    return sorted(module_name(p) for p in (PKG / folder).rglob("*.py") if "__pycache__" not in p.parts)


def torch_free_modules() -> list[str]:
    found = ["course_lib", *modules_under("core"), *modules_under("checks"),
             "course_lib.lessons.lesson_map", "course_lib.lessons.glossary", "course_lib.lessons.prose"]
    return list(dict.fromkeys(found))


def uses_sympy(name: str) -> bool:
    """The modules allowed to bring sympy in: the formulas and the question sets."""
    last = name.rsplit(".", 1)[-1]
    return name == "course_lib.core.formulas" or (name.startswith("course_lib.checks.")
                                                  and (last.startswith("ex") or last == "_demo"))


_PROBE = r"""
import importlib, json, sys
early, late = json.loads(sys.argv[1]), json.loads(sys.argv[2])
report = {}
for name in early:
    importlib.import_module(name)
for old, merged_first in json.loads(sys.argv[4]).items():  # old paths of core modules (course_lib._compat)
    module = importlib.import_module(old)
    if merged_first:  # an old module split in several resolves its names lazily: use one
        getattr(module, importlib.import_module(merged_first).__all__[0])
import course_lib
from course_lib.core import capstone
course_lib.estimate("mistral-7b", "rtx-4090", prompt_tokens=100, new_tokens=10)
capstone.compute(capstone.DashboardState())
report["early"] = sorted(m for m in %(early_banned)r if m in sys.modules)
for name in late:
    importlib.import_module(name)
from course_lib.checks import _demo
_demo.q1.check(14e9)  # a check outside a notebook displays nothing: no IPython either
_demo.q1.check("14 GB")
report["late"] = sorted(m for m in %(late_banned)r if m in sys.modules)
for name in json.loads(sys.argv[3]):
    importlib.import_module(name)
report["display"] = sorted(m for m in ("torch",) if m in sys.modules)
print(json.dumps(report))
"""


def test_torch_free_modules_import_light():
    names = torch_free_modules()
    assert len(names) > 30 and "course_lib.core.estimator" in names and "course_lib.checks.ex09" in names
    early = [n for n in names if not uses_sympy(n) and not n.startswith("course_lib.lessons.")]
    late = [n for n in names if n not in early]
    code = _PROBE % {"early_banned": HEAVY + LATE, "late_banned": HEAVY + ("IPython",)}
    display = [n for n in modules_under("lessons") if n not in names]
    old_core = {}  # old name -> None, or for a merged alias the core module that holds its first names
    for old, new in _compat.ALIASES.items():
        first = f"course_lib.{new if isinstance(new, str) else new[0]}"
        if first.startswith("course_lib.core.") and first in early:
            old_core[f"course_lib.{old}"] = None if isinstance(new, str) else first
    assert "course_lib.dashboard" in old_core and "course_lib.caching" in old_core, old_core
    proc = subprocess.run([sys.executable, "-c", code, *(json.dumps(x) for x in (early, late, display, old_core))],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["early"] == [], (
        f"importing the numeric modules {early} (and calling estimate, capstone.compute) loaded {report['early']}")
    assert report["late"] == [], f"importing the torch-free modules loaded {report['late']}"
    assert report["display"] == [], f"importing lessons/ (display code: widgets, plots) loaded {report['display']}"


# --- AST scans ----------------------------------------------------------------------------------------------
def _sources(folder: str) -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(ROOT)), ast.parse(p.read_text(encoding="utf-8"), filename=str(p)))
            for p in sorted((PKG / folder).rglob("*.py")) if "__pycache__" not in p.parts]


def _resolve(module: str | None, level: int, filename: str) -> str:
    """The absolute module name of a (possibly relative) ``from ... import``."""
    if not level:
        return module or ""
    package = module_name(ROOT / filename).split(".")
    if not filename.endswith("__init__.py"):
        package = package[:-1]
    base = package[:len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(tree: ast.AST, filename: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``, anywhere (function bodies, try blocks) -- ``from a
    import b`` counts as ``a`` and ``a.b`` -- and of ``importlib.import_module("x")`` / ``__import__("x")``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, filename)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return found


def _banned_for_core() -> tuple[str, ...]:
    measure_or_lessons = ("course_lib.measure", "course_lib.lessons")
    old_names = tuple(f"course_lib.{old}" for old, new in _compat.ALIASES.items()
                      if any(str(t).startswith(("measure", "lessons"))
                             for t in (new if isinstance(new, tuple) else (new,))))
    return HEAVY + measure_or_lessons + old_names


def _is_under(name: str, roots) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def core_violations(sources) -> list[str]:
    banned = _banned_for_core()
    problems = {}  # one per statement
    for filename, tree in sources:
        for line, name in imported_modules(tree, filename):
            if _is_under(name, banned):
                problems.setdefault((filename, line), f"{filename}:{line} imports {name}")
    return list(problems.values())


def test_core_scan_can_fail():
    tree = ast.parse("def f():\n    import torch.nn\n\ndef g():\n    from course_lib import tinylm\n"
                     "def h():\n    return importlib.import_module('matplotlib.pyplot')\n"
                     "from ..measure import timing\n")
    problems = core_violations([("course_lib/core/x.py", tree)])
    assert len(problems) == 4, problems
    for name in ("torch.nn", "course_lib.tinylm", "matplotlib.pyplot", "course_lib.measure"):
        assert any(p.endswith(f"imports {name}") for p in problems), (name, problems)


def private_core_uses(sources) -> list[str]:
    problems = []
    for filename, tree in sources:
        core_aliases = set()  # local names bound to core modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(node.module, node.level, filename)
                if not _is_under(base, ("course_lib.core",)):
                    continue
                if any(part.startswith("_") for part in base.split(".")[2:]):
                    problems.append(f"{filename}:{node.lineno} imports the private module {base}")
                for a in node.names:
                    if a.name.startswith("_"):
                        problems.append(f"{filename}:{node.lineno} imports the private {base}.{a.name}")
                    elif base == "course_lib.core":  # a core module (or a re-exported name)
                        core_aliases.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if _is_under(a.name, ("course_lib.core",)):
                        if any(part.startswith("_") for part in a.name.split(".")[2:]):
                            problems.append(f"{filename}:{node.lineno} imports the private module {a.name}")
                        if a.asname:
                            core_aliases.add(a.asname)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in core_aliases and node.attr.startswith("_") \
                    and not (node.attr.startswith("__") and node.attr.endswith("__")):
                problems.append(f"{filename}:{node.lineno} uses the private {node.value.id}.{node.attr}")
    return problems


def test_private_scan_can_fail():
    tree = ast.parse("from course_lib.core.validation import require_count, _as_real\n"
                     "from course_lib.core import caching\n"
                     "import course_lib.core._generated as gen\n"
                     "from ..core import units\n"
                     "x = caching._model(1) + units._parse('1 B', 'bytes')\n")
    problems = private_core_uses([("course_lib/measure/x.py", tree)])
    assert len(problems) == 4, problems
    assert any("_as_real" in p for p in problems) and any("caching._model" in p for p in problems)
    assert any("_generated" in p for p in problems) and any("units._parse" in p for p in problems)


BENCHMARKS = "course_lib.measure.benchmarks"


def benchmark_imports(sources) -> list[str]:
    """Imports of the author benchmarks from a module outside them (the top-level modules of ``course_lib/``,
    the command entry points such as ``python -m course_lib.validate``, may run them)."""
    problems = {}
    for filename, tree in sources:
        name = module_name(ROOT / filename)
        if name.startswith(BENCHMARKS) or name.count(".") <= 1:
            continue
        for line, name in imported_modules(tree, filename):
            if _is_under(name, (BENCHMARKS,)):
                problems.setdefault((filename, line), f"{filename}:{line} imports {name}")
    return list(problems.values())


def test_benchmark_scan_can_fail():
    tree = ast.parse("def f():\n    from course_lib.measure.benchmarks import bracket\n"
                     "from .benchmarks.validate import run\nimport course_lib.measure.calibrate\n")
    problems = benchmark_imports([("course_lib/measure/calibrate.py", tree)])
    assert len(problems) == 2 and all("benchmarks" in p for p in problems), problems
    assert benchmark_imports([("course_lib/measure/benchmarks/validate.py", tree)]) == []


@pytest.mark.parametrize("folder, scan, rule", [
    ("core", core_violations, "the core must not import these, not even inside a function"),
    ("measure", private_core_uses, "measure/ must use the core's public names only"),
    (".", benchmark_imports, "only the author benchmarks may import course_lib.measure.benchmarks"),
], ids=["core-imports-no-torch-widgets-matplotlib", "measure-uses-public-core-names",
        "benchmarks-stand-apart"])
def test_import_rule(folder, scan, rule):
    sources = _sources(folder)
    assert len(sources) > 5
    problems = scan(sources)
    assert not problems, f"{rule}: " + "; ".join(problems)


@pytest.mark.parametrize("filename, module, level, expected", [
    ("course_lib/measure/predict.py", "timing", 1, "course_lib.measure.timing"),
    ("course_lib/measure/predict.py", "core.units", 2, "course_lib.core.units"),
    ("course_lib/measure/__init__.py", "benchmarks", 1, "course_lib.measure.benchmarks"),
    ("course_lib/core/x.py", None, 2, "course_lib"),
])
def test_relative_imports_are_resolved(filename, module, level, expected):
    assert _resolve(module, level, filename) == expected
