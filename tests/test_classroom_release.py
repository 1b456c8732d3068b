"""A classroom release (``python -m course_lib.authoring.exgen --classroom OUTDIR``) carries no answer key.

The release holds the exercise notebooks and a ``course_lib`` whose question sets are key-less: only what
feedback without the answer needs (form, dimension, unit, symbols, options, test inputs, prompts, hints).
Checked three ways: the key-less modules hold nothing but the public spec; no expected value (numbers in
several spellings, case results, formulas) that the course's public files do not already contain occurs
in any released file; and importing the released package, in a fresh interpreter, reaches no expected
value from any question or module object.  No kernel; one interpreter.
"""
from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib import checks
from course_lib.authoring import exgen
from repo import ROOT

ALLOWED = {"kind", "id", "set", "objective", "points", "prompt", "hints", "dimension", "unit", "accept_strings",
           "measure", "symbols", "options",
           "whole"}  # the answer's form ("a whole number, rounded down"), as public as its unit; never its value
SETS = checks.available_sets()


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("classroom") / "release"
    assert exgen.main(["--classroom", str(out)]) == 0
    return out


def _texts(folder: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*")
            if p.is_file() and p.suffix in (".py", ".ipynb", ".json", ".md", ".toml", ".txt")}


def _number_forms(v: float) -> set[str]:
    v = float(v)
    forms = {repr(v), f"{v:.6g}", f"{v:.5g}"}
    if v == int(v) and abs(v) < 1e18:
        forms |= {str(int(v)), f"{int(v):,}"}
    return {f for f in forms if sum(ch.isdigit() for ch in f) >= 4}  # 3-digit numbers are everywhere


def _key_tokens(q) -> set[str]:
    if q.kind == "numeric":
        return _number_forms(q._expected_base / q._scale) | _number_forms(q._expected_base)
    if q.kind == "function":
        return {t for _, e in q.cases for t in _number_forms(e)}
    if q.kind == "expression":
        return {str(q._expected_expr)} if len(str(q._expected_expr)) >= 6 else set()
    return set()


def test_the_release_has_the_exercises_and_a_key_less_course_lib(release):
    for sol, ex in exgen.pairs():
        assert (release / "exercises" / ex.name).read_text(encoding="utf-8") == exgen.exercise_text(sol)
    for name in SETS:
        assert (release / "course_lib" / "checks" / f"{name}.py").exists()
    assert not (release / "solutions").exists() and (release / "pyproject.toml").exists()
    assert (release / exgen.RELEASE_MARKER).exists()
    with pytest.raises(exgen.ExgenError, match="not a classroom release"):
        exgen.classroom_release(release / "exercises")
    exgen.classroom_release(release)  # a release is replaced


def test_the_key_less_modules_hold_only_the_public_spec(release):
    for name in SETS:
        tree = ast.parse((release / "course_lib" / "checks" / f"{name}.py").read_text(encoding="utf-8"))
        specs = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SPECS")
        data = json.loads(ast.literal_eval(specs.args[0]))
        assert [s["id"] for s in data] == [q.id for q in checks.load_set(name).QUESTIONS]
        for s in data:
            assert set(s) <= ALLOWED, (name, s["id"], set(s) - ALLOWED)
        imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert imports == {"course_lib.checks.question", "course_lib.checks.answers"}, "no code of the set itself"


def test_no_expected_value_occurs_in_the_released_files(release):
    public = _texts(ROOT / "course_lib")
    public = {p: t for p, t in public.items() if not (p.parent.name == "checks" and
                                                      (p.stem.startswith("ex") or p.stem == "_demo"))}
    public.update({p: p.read_text(encoding="utf-8") for p in (ROOT / "exercises").glob("*.ipynb")})
    # the options of every question are public by design; prompts and hints are not
    inputs = [q.public_spec().get("options") for name in SETS for q in checks.load_set(name).QUESTIONS]
    public_text = "\n".join(public.values()) + json.dumps(inputs)
    released = _texts(release)
    distinctive, leaks = 0, []
    for name in SETS:
        for q in checks.load_set(name).QUESTIONS:
            for token in _key_tokens(q):
                if token in public_text:
                    continue  # the course's own data or code has it, in both modes: not the key
                distinctive += 1
                leaks += [f"{name}.{q.id}: {token!r} in {p.relative_to(release)}" for p, t in released.items()
                          if token in t]
    assert not leaks, leaks
    # the same grep on a careless key-less module (the spec with the key added, as JSON) finds the key
    careless = json.dumps([{**q.public_spec(), "expected": _plain_key(q)} for name in SETS
                           for q in checks.load_set(name).QUESTIONS])
    found = sum(t in careless for name in SETS for q in checks.load_set(name).QUESTIONS
                for t in _key_tokens(q) if t not in public_text)
    assert distinctive >= 20 and found >= distinctive // 3, (distinctive, found, "the grep finds a key")


def _plain_key(q):
    if q.kind == "numeric":
        return [q._expected_base, q._expected_base / q._scale]
    if q.kind == "function":
        return [e for _, e in q.cases]
    return str(getattr(q, "_expected_expr", q.expected))


_WALK = r"""
import importlib, json, numbers, sys
out = {}
def walk(x, seen, depth, acc):
    if id(x) in seen or depth > 5:
        return
    seen.add(id(x))
    if isinstance(x, bool):
        return
    if isinstance(x, numbers.Real):
        try:
            acc["numbers"].append(float(x))
        except Exception:
            pass
    elif isinstance(x, str):
        acc["strings"].append(x)
    elif isinstance(x, dict):
        for k, v in x.items():
            walk(k, seen, depth + 1, acc); walk(v, seen, depth + 1, acc)
    elif isinstance(x, (list, tuple, set, frozenset)):
        for v in x:
            walk(v, seen, depth + 1, acc)
    elif hasattr(x, "__dict__") and type(x).__module__.startswith("course_lib"):
        walk(vars(x), seen, depth + 1, acc)
for name in sys.argv[1:]:
    m = importlib.import_module("course_lib.checks." + name)
    acc = {"numbers": [], "strings": [], "expected": [q.expected is None for q in m.QUESTIONS],
           "solutions": [q.solution_text for q in m.QUESTIONS], "file": m.__file__}
    walk({k: v for k, v in vars(m).items() if not k.startswith("__")}, set(), 0, acc)
    out[name] = acc
print(json.dumps(out))
"""


def test_importing_the_release_reaches_no_expected_value(release, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(release)
    done = subprocess.run([sys.executable, "-c", _WALK, *SETS], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for name in SETS:
        got = found[name]
        assert Path(got["file"]).is_relative_to(release), "the release's own package is the one imported"
        assert all(got["expected"]) and len(set(got["solutions"])) == 1
        numbers = sorted(set(got["numbers"]))
        for q in checks.load_set(name).QUESTIONS:
            spec_numbers = set(_numbers_in(q.public_spec()))  # points, options: public by design
            if q.kind == "numeric":
                keys = [q._expected_base, q._expected_base / q._scale]
            elif q.kind == "function":
                keys = [e for _, e in q.cases]
            else:
                keys = []
            for k in keys:
                if k in (0, 1) or any(math.isclose(k, s, rel_tol=1e-9) for s in spec_numbers):
                    continue
                hit = [v for v in numbers if math.isclose(v, k, rel_tol=1e-9)]
                assert not hit, f"{name}.{q.id}: the expected value {k!r} is reachable in the release"
            if q.kind == "expression":
                assert str(q._expected_expr) not in got["strings"] or str(q._expected_expr) in q.prompt


def _numbers_in(x):
    if isinstance(x, bool):
        return
    if isinstance(x, (int, float)):
        yield float(x)
    elif isinstance(x, str):
        try:
            yield float(x)
        except ValueError:
            return
    elif isinstance(x, dict):
        for v in x.values():
            yield from _numbers_in(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _numbers_in(v)
