"""The old import paths keep working (issue 12: a learner's ``work/`` copies made before the split).

* every entry of ``course_lib._compat.ALIASES``: the old name imports, *is* the new module (same
  object, so monkeypatching and ``isinstance`` behave as before), and a submodule of an aliased package
  resolves too;
* ``python -m course_lib.grade --help`` and ``python -m course_lib.validate --help`` run through the alias;
* every answered exercise notebook saved before the split (``tests/fixtures/answered_before_split/``,
  the solutions' answers with the old imports: ``course_lib.measurements``, ``course_lib.precision``,
  ``course_lib.bench`` ...) runs top to bottom in a course kernel (``course_lib.authoring.kernel``,
  ``COURSE_FAST=1``) without an error, and every check in it reports ``correct``. Where a question itself
  changed since (ex05 q7/q8 became functions of ``row``, ex08 gained q9, ex09's q3/q7-q9 price collective
  latency), the copy holds the new answers, still imported through the old paths (``course_lib.bench``,
  ``course_lib.measurements``, ``course_lib.dashboard``, ``from course_lib import compare``).
"""
from __future__ import annotations

import importlib
import json
import subprocess
import sys

import nbformat
import pytest
from conftest import REPO_ROOT as ROOT

import course_lib
from course_lib import _compat

ANSWERED = sorted((ROOT / "tests" / "fixtures" / "answered_before_split").glob("*.ipynb"))
#: MIME type of a check's machine-readable record (course_lib.checks, read by the grader)
CHECK_MIME = "application/vnd.course.check+json"


# --- the alias table -------------------------------------------------------------------------------------
SINGLE = sorted((old, new) for old, new in _compat.ALIASES.items() if isinstance(new, str))
MERGED = sorted((old, new) for old, new in _compat.ALIASES.items() if not isinstance(new, str))


@pytest.mark.parametrize("old, new", SINGLE)
def test_alias_is_the_new_module(old, new):
    module = importlib.import_module(f"course_lib.{old}")
    target = importlib.import_module(f"course_lib.{new}")
    assert module is target
    assert sys.modules[f"course_lib.{old}"] is target
    assert module.__name__ == f"course_lib.{new}"  # its own spec back, not the alias's
    assert module.__spec__.name == f"course_lib.{new}"
    # `from course_lib import <old>` as in a learner's notebook
    namespace: dict = {}
    exec(f"from course_lib import {old} as m", namespace)
    assert namespace["m"] is target
    assert _compat.new_name(f"course_lib.{old}") == f"course_lib.{new}"


@pytest.mark.parametrize("old, new", MERGED)
def test_merged_alias_offers_every_name_of_its_modules(old, new):
    """An old module split into several: each public name of each new module, the same object."""
    module = importlib.import_module(f"course_lib.{old}")
    namespace: dict = {}
    exec(f"from course_lib import {old} as m", namespace)
    assert namespace["m"] is module
    seen = set()
    for target_name in new:
        target = importlib.import_module(f"course_lib.{target_name}")
        for name in target.__all__:
            if name not in seen:  # the first module that has a name wins
                assert getattr(module, name) is getattr(target, name), f"course_lib.{old}.{name}"
                seen.add(name)
    assert seen and set(module.__all__) >= seen
    with pytest.raises(AttributeError):
        module.no_such_name_xyz


def test_alias_of_a_package_covers_its_submodules():
    import pkgutil

    packages = {old: new for old, new in SINGLE
                if getattr(importlib.import_module(f"course_lib.{new}"), "__path__", None) is not None}
    assert packages, "no package among the aliases: nothing to check here"
    for old, new in packages.items():
        package = importlib.import_module(f"course_lib.{new}")
        subs = [m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")]
        assert subs, f"course_lib.{new} has no public submodule"
        for sub in subs:
            old_sub = importlib.import_module(f"course_lib.{old}.{sub}")
            assert old_sub is importlib.import_module(f"course_lib.{new}.{sub}")


def test_names_that_are_not_aliases_are_left_alone():
    assert _compat.new_name("course_lib.no_such_module") is None
    assert _compat.new_name("json") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("course_lib.no_such_module")
    assert any(isinstance(f, _compat._AliasFinder) for f in sys.meta_path)
    assert course_lib  # the package installs the finder on import


@pytest.mark.parametrize("old, prog", [("grade", "course_lib.grade"), ("validate", "course_lib.validate")])
def test_old_commands_run(old, prog):
    assert old in _compat.ALIASES
    proc = subprocess.run([sys.executable, "-m", f"course_lib.{old}", "--help"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.lower().startswith("usage:"), proc.stdout[:500]


# --- the learners' copies made before the split ------------------------------------------------------------
def _records(nb) -> list[dict]:
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            rec = out.get("data", {}).get(CHECK_MIME) if out.get("output_type") in (
                "display_data", "execute_result") else None
            if isinstance(rec, str):
                rec = json.loads(rec)
            if rec is not None:
                found.append(rec)
    return found


def test_the_answered_copies_are_all_there():
    assert [p.name[:2] for p in ANSWERED] == [f"{n:02d}" for n in range(1, 10)]
    for path in ANSWERED:
        src = path.read_text(encoding="utf-8")
        assert "from course_lib.checks import" in src, path.name


@pytest.mark.notebook
@pytest.mark.parametrize("path", ANSWERED, ids=[p.stem for p in ANSWERED])
def test_answered_copy_from_before_the_split_is_all_correct(path, tmp_path):
    from nbclient import NotebookClient

    from course_lib.authoring import kernel

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    client = NotebookClient(
        nb, timeout=kernel.NBVAL_CELL_TIMEOUT_S, startup_timeout=kernel.STARTUP_TIMEOUT_S,
        kernel_manager_class=kernel.CurrentEnvKernelManager, kernel_name=kernel.KERNEL_NAME,
        resources={"metadata": {"path": str(tmp_path)}}, store_widget_state=False)
    client.execute(env=kernel.launch_env(fast=True, backend=kernel.HEADLESS_BACKEND),
                   stderr=subprocess.DEVNULL)  # a failing cell raises CellExecutionError, naming it

    records = _records(nb)
    sets = {r["set"] for r in records}
    assert len(sets) == 1, f"{path.name}: checks of {sorted(sets)}"
    (set_name,) = sets
    questions = importlib.import_module(f"course_lib.checks.{set_name}").QUESTIONS
    wrong = [f"{r['question']}{' (graded)' if r.get('strict') else ''}: {r['status']} -- {r.get('feedback', '')}"
             for r in records if r["status"] != "correct"]
    assert not wrong, f"{path.name}: " + "; ".join(wrong)
    checked = {r["question"] for r in records}
    graded = {r["question"] for r in records if r.get("strict")}
    ids = {q.id for q in questions}
    assert checked == ids and graded == ids, (f"{path.name}: questions without a check {sorted(ids - checked)}, "
                                              f"without a graded check {sorted(ids - graded)}")
