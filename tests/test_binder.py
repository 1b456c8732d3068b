"""The student-only environment for Binder / repo2docker (``binder/``): pinned, complete, and it resolves.

There is no Docker here, so the image is not built. What is checked instead:

* ``binder/requirements.txt`` pins every line exactly (``==``) at the version of the course's lock
  (``constraints.txt``), constrains the rest with that lock (``-c ../constraints.txt``), covers the
  course's core dependencies (pyproject.toml: ``postBuild`` installs the course with ``--no-deps``) and
  names none of the instructor's or the tests' tools; ``binder/runtime.txt`` names this Python minor version;
* ``binder/postBuild`` copies exercises/ into work/ and never overwrites a learner's copy (run in a
  temporary copy of the repository, with ``python`` a stub that records what pip would have installed);
* ``pip install --dry-run --ignore-installed`` resolves the requirements against the package indexes this
  machine reaches (the registry, or its mirror here), and every package it would install is pinned by the
  lock at that version. The ``--extra-index-url`` line (PyTorch's CPU wheels, what Binder installs) is left
  out of that run: that index is not among the registries reached here, and the lock pins torch's version
  whichever index serves it.

Runs in ``make tour`` (the resolution takes 10-60 s). Skipped with a reason when the package index cannot be
reached, except under CI=true or COURSE_REQUIRE_ALL=1, where that is a failure.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

from conftest import strict_tools
from repo import ROOT

pytestmark = pytest.mark.binder

BINDER = ROOT / "binder"
#: packages a student's environment must not have (instructor's and tests' tools, the optional engines)
NOT_FOR_STUDENTS = {"nbgrader", "jupyterhub", "playwright", "hypothesis", "ruff", "pytest-xdist", "transformers"}
#: what ``pip freeze`` leaves out of a lock: binder/requirements.txt pins these itself
FREEZE_OMITS = {"pip", "setuptools", "wheel", "distribute"}


def lock() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            r = Requirement(line)
            (spec,) = r.specifier
            assert spec.operator == "==", f"constraints.txt pins exactly: {line!r}"
            out[canonicalize_name(r.name)] = spec.version
    return out


def binder_lines() -> tuple[list[str], list[Requirement]]:
    """(option lines, requirements) of binder/requirements.txt."""
    options, reqs = [], []
    for line in (BINDER / "requirements.txt").read_text().splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        (options if line.startswith("-") else reqs).append(line if line.startswith("-") else Requirement(line))
    return options, reqs


def test_requirements_are_pinned_by_the_lock():
    options, reqs = binder_lines()
    assert "-c ../constraints.txt" in options, "the lock constrains everything the student's packages pull in"
    pins = lock()
    for r in reqs:
        (spec,) = r.specifier
        name = canonicalize_name(r.name)
        assert spec.operator == "==", f"{r} is pinned exactly"
        if name in FREEZE_OMITS and name not in pins:
            continue
        assert pins.get(name) == spec.version, f"{r}: the lock has {name}=={pins.get(name)}"
    names = {canonicalize_name(r.name) for r in reqs}
    assert not names & NOT_FOR_STUDENTS, sorted(names & NOT_FOR_STUDENTS)
    core = {canonicalize_name(Requirement(t).name)
            for t in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert core <= names, f"the course's core dependencies are missing: {sorted(core - names)}"
    assert any(o.startswith("--extra-index-url") and "/whl/cpu" in o for o in options), "CPU-only torch on Binder"


def test_runtime_is_this_python():
    text = (BINDER / "runtime.txt").read_text().strip()
    assert text == f"python-{sys.version_info.major}.{sys.version_info.minor}", text


def test_post_build_copies_exercises_without_overwriting(tmp_path):
    repo = tmp_path / "repo"
    (repo / "binder").mkdir(parents=True)
    shutil.copy(BINDER / "postBuild", repo / "binder" / "postBuild")
    shutil.copytree(ROOT / "exercises", repo / "exercises")
    shutil.copytree(ROOT / "jupyter", repo / "jupyter")
    (repo / "work").mkdir()
    mine = repo / "work" / "01_units.ipynb"
    mine.write_text("my answers")
    # `python` stands in for the image's interpreter: it records pip's arguments and has a prefix of its own
    stub_bin = tmp_path / "bin"
    stub_bin.mkdir()
    prefix = tmp_path / "prefix"
    (stub_bin / "python").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ]; then echo {prefix}; exit 0; fi\n'
        f'echo "$@" >> {tmp_path / "pip_calls.txt"}\n')
    (stub_bin / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{stub_bin}{os.pathsep}{os.environ['PATH']}"}
    for _ in range(2):  # a second build (or a restart) keeps everything
        out = subprocess.run(["bash", str(repo / "binder" / "postBuild")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
    assert mine.read_text() == "my answers", "a learner's copy is never overwritten"
    assert "kept    work/01_units.ipynb" in out.stdout
    expected = sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    assert sorted(p.name for p in (repo / "work").glob("*.ipynb")) == expected
    for name in expected:
        if name != mine.name:
            assert (repo / "work" / name).read_bytes() == (ROOT / "exercises" / name).read_bytes()
    calls = (tmp_path / "pip_calls.txt").read_text().splitlines()
    assert calls[0].split() == ["-m", "pip", "install", "--no-deps", "--no-cache-dir", "-e", "."]
    assert (prefix / "etc" / "jupyter" / "jupyter_server_config.d" / "course_learner.json").exists()


def _index_unreachable(text: str) -> bool:
    return bool(re.search(r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                          r"Network is unreachable|ConnectTimeoutError", text))


def test_requirements_resolve_against_the_lock(tmp_path):
    """pip resolves binder/requirements.txt (dry run, nothing installed) to exactly the lock's versions."""
    text = (BINDER / "requirements.txt").read_text()
    text = re.sub(r"^--extra-index-url .*$", "", text, flags=re.M)
    text = text.replace("-c ../constraints.txt", f"-c {ROOT / 'constraints.txt'}")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(text)
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                          "--disable-pip-version-check", "--report", str(report), "-r", str(reqs)],
                         capture_output=True, text=True, timeout=500)
    if out.returncode != 0 and _index_unreachable(out.stdout + out.stderr):
        reason = "the package index cannot be reached: pip cannot resolve binder/requirements.txt here"
        if strict_tools():
            pytest.fail(reason + " (CI=true / COURSE_REQUIRE_ALL=1 require it)", pytrace=False)
        pytest.skip(reason)
    assert out.returncode == 0, f"pip could not resolve binder/requirements.txt:\n{out.stdout}\n{out.stderr[-4000:]}"
    installs = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    pins = {**{canonicalize_name(r.name): next(iter(r.specifier)).version for r in binder_lines()[1]}, **lock()}
    unpinned = sorted(set(installs) - set(pins))
    assert not unpinned, f"packages the lock does not pin: {unpinned}"
    differ = {n: (v, pins[n]) for n, v in installs.items() if Version(v).public != Version(pins[n]).public}
    assert not differ, f"resolved (pip, lock) versions differ: {differ}"
    assert {"torch", "jupyterlab", "ipywidgets", "voila"} <= set(installs)
    assert not set(installs) & NOT_FOR_STUDENTS, sorted(set(installs) & NOT_FOR_STUDENTS)
