"""The layout's import rules, checked once for the whole package (docs/ARCHITECTURE.md describes them).

* **Light imports** -- one subprocess imports every torch-free module (``course_lib``, everything under
  ``course_lib/core/`` and ``course_lib/checks/``, ``lessons/lesson_map.py``, ``lessons/glossary.py``,
  ``lessons/prose.py``), calls the core and a check, and reports what came with them: never torch,
  ipywidgets or matplotlib; and before the sympy modules (``core/formulas.py``, the question sets) and
  ``lessons/`` are imported, neither sympy nor IPython (the numeric core runs on the generated code), and
  IPython not even after a check has run;
  then the rest of ``lessons/`` (widgets, plots: ipywidgets and matplotlib) brings no torch either.
* **The core imports no torch, ipywidgets or matplotlib at all, not even lazily** -- an AST scan of
  ``course_lib/core/**`` for import statements (function bodies included), ``importlib.import_module``
  and ``__import__`` calls, naming those packages or the modules that use them (``course_lib.measure``,
  ``course_lib.lessons``).
* **Outside the core, only its public names** -- an AST scan of ``course_lib/measure/**``, ``lessons/**``,
  ``checks/**`` and ``authoring/**``: no ``from course_lib.core.x import _private``, no private core module
  (``_generated``: the public face of the generated code is ``course_lib.core.numeric``), no
  ``core_module._private``.
* **No compatibility layer** -- no module aliases another (no import hook on ``sys.meta_path``), and every
  ``python -m course_lib...`` command that the README, docs/, the Makefile and the library's docstrings
  document names a real module with a ``__main__`` block.
* **The author benchmarks stand apart** -- what lessons import from ``course_lib/measure/`` (probes, steady,
  calibrate, predict, TinyLM, the engines' timing) never imports ``course_lib.measure.benchmarks`` (the
  benchmarks, their bracketed-measurement primitive and judging rule); nor do core/, checks/, lessons/ or
  authoring/. Only their command, ``course_lib/measure/validate.py``, runs them.
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
    proc = subprocess.run([sys.executable, "-c", code, *(json.dumps(x) for x in (early, late, display))],
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
    return HEAVY + ("course_lib.measure", "course_lib.lessons")


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
    tree = ast.parse("def f():\n    import torch.nn\n\ndef g():\n    from course_lib.lessons import plots\n"
                     "def h():\n    return importlib.import_module('matplotlib.pyplot')\n"
                     "from ..measure import timing\n")
    problems = core_violations([("course_lib/core/x.py", tree)])
    assert len(problems) == 4, problems
    for name in ("torch.nn", "course_lib.lessons", "matplotlib.pyplot", "course_lib.measure"):
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
#: the one module outside the benchmarks that runs them: their command, ``python -m course_lib.measure.validate``
BENCHMARK_COMMAND = "course_lib.measure.validate"


def benchmark_imports(sources) -> list[str]:
    """Imports of the author benchmarks from a module outside them, except their command."""
    problems = {}
    for filename, tree in sources:
        name = module_name(ROOT / filename)
        if _is_under(name, (BENCHMARKS,)) or name == BENCHMARK_COMMAND:
            continue
        for line, name in imported_modules(tree, filename):
            if _is_under(name, (BENCHMARKS,)):
                problems.setdefault((filename, line), f"{filename}:{line} imports {name}")
    return list(problems.values())


def test_benchmark_scan_can_fail():
    tree = ast.parse("def f():\n    from course_lib.measure.benchmarks import bracket\n"
                     "from .benchmarks.tinylm_bench import run\nimport course_lib.measure.calibrate\n")
    problems = benchmark_imports([("course_lib/measure/calibrate.py", tree)])
    assert len(problems) == 2 and all("benchmarks" in p for p in problems), problems
    assert benchmark_imports([("course_lib/measure/benchmarks/tinylm_bench.py", tree)]) == []
    assert benchmark_imports([("course_lib/measure/validate.py", tree)]) == []


@pytest.mark.parametrize("folder, scan, rule", [
    ("core", core_violations, "the core must not import these, not even inside a function"),
    ("measure", private_core_uses, "measure/ must use the core's public names only"),
    ("lessons", private_core_uses, "lessons/ must use the core's public names only"),
    ("checks", private_core_uses, "checks/ must use the core's public names only"),
    ("authoring", private_core_uses, "authoring/ must use the core's public names only"),
    (".", benchmark_imports, "only the author benchmarks may import course_lib.measure.benchmarks"),
], ids=["core-imports-no-torch-widgets-matplotlib", "measure-uses-public-core-names",
        "lessons-use-public-core-names", "checks-use-public-core-names", "authoring-uses-public-core-names",
        "benchmarks-stand-apart"])
def test_import_rule(folder, scan, rule):
    sources = _sources(folder)
    assert len(sources) > 5
    problems = scan(sources)
    assert not problems, f"{rule}: " + "; ".join(problems)


@pytest.mark.parametrize("filename, module, level, expected", [
    ("course_lib/measure/probes.py", "timing", 1, "course_lib.measure.timing"),
    ("course_lib/measure/probes.py", "core.units", 2, "course_lib.core.units"),
    ("course_lib/measure/__init__.py", "probes", 1, "course_lib.measure.probes"),
    ("course_lib/core/x.py", None, 2, "course_lib"),
])
def test_relative_imports_are_resolved(filename, module, level, expected):
    assert _resolve(module, level, filename) == expected


# --- no compatibility layer; documented commands are real modules ---------------------------------------------
def test_no_import_hook_aliases_a_module():
    """Importing the package installs nothing on ``sys.meta_path``: every module has one name."""
    code = ("import sys; before = list(sys.meta_path); import course_lib, course_lib.checks; "
            "print(len(sys.meta_path) - len(before))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "0"


def documented_commands() -> dict[str, list[str]]:
    """``python -m course_lib.X`` module -> the files that document it (README, docs/, Makefile, benchmarks/, and
    the library's own docstrings and ``--help`` texts)."""
    import re

    found: dict[str, list[str]] = {}
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "benchmarks").rglob("*.md")), *sorted(PKG.rglob("*.py"))]
    for f in files:
        for m in re.finditer(r"python -m (course_lib(?:\.\w+)+)", f.read_text(encoding="utf-8")):
            found.setdefault(m.group(1), []).append(str(f.relative_to(ROOT)))
    return found


def test_documented_commands_are_real_modules():
    commands = documented_commands()
    assert "course_lib.authoring.exgen" in commands, sorted(commands)
    problems = []
    for module, where in sorted(commands.items()):
        path = PKG.joinpath(*module.split(".")[1:])
        source = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__main__.py"
        if not source.exists():
            problems.append(f"{module} (in {', '.join(sorted(set(where)))}) is no module of course_lib")
        elif "__main__" not in source.read_text(encoding="utf-8"):
            problems.append(f"{module} (in {', '.join(sorted(set(where)))}) has no __main__ block")
    assert not problems, "; ".join(problems)


def test_only_numeric_imports_the_generated_code():
    """Inside the core too, the generated module has one importer: ``numeric`` (``codegen`` writes it)."""
    importers = sorted({filename for filename, tree in _sources("core")
                        for _, name in imported_modules(tree, filename)
                        if _is_under(name, ("course_lib.core._generated",))})
    assert importers == ["course_lib/core/numeric.py"], importers


def test_documented_dotted_names_use_the_current_layout():
    """A ``course_lib.X...`` name in the README or docs/ starts with a real part of the package (``core``,
    ``measure``, ...) or a name of ``course_lib.__all__``: no flat path of an older layout."""
    import re

    import course_lib

    parts = {p.stem for p in PKG.iterdir() if (p.is_dir() and (p / "__init__.py").exists())}
    allowed = parts | set(course_lib.__all__) | {"data"}
    stale = {}
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for m in re.finditer(r"\bcourse_lib\.(\w+)", f.read_text(encoding="utf-8")):
            if m.group(1) not in allowed:
                stale.setdefault(str(f.relative_to(ROOT)), set()).add(m.group(0))
    assert not stale, stale
