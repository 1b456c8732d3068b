"""The two ways to install the course must install the same things, and the environment check
(``course_lib.measure.sysinfo``) must work on any machine.

* ``pyproject.toml`` (core dependencies + the ``test`` and ``classroom`` extras; ``make install``)
* ``environment.yml`` (conda-forge, with a pip section for what conda-forge lacks and ``-e .``)

Package names are compared after normalisation (PEP 503: case, ``-``/``_``/``.``) and the
conda-only spellings (``pytorch``/``pytorch-cpu`` are ``torch``); version specifiers too.
"""
from __future__ import annotations

import re
import sys

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

from repo import ROOT

#: conda-forge name -> PyPI name, where they differ
CONDA_TO_PYPI = {"pytorch": "torch", "pytorch-cpu": "torch", "pytorch-gpu": "torch"}
#: conda entries that are tools of the environment, not dependencies of the course
CONDA_ONLY = {"python", "pip"}
#: extras of pyproject that environment.yml must cover
EXTRAS = ("test", "classroom", "engines", "site", "llamacpp")


def normalise(name: str) -> str:
    name = re.sub(r"[-_.]+", "-", name).lower()
    return CONDA_TO_PYPI.get(name, name)


def pyproject_requirements() -> dict[str, SpecifierSet]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    reqs = list(project.get("dependencies", []))
    for extra in EXTRAS:
        reqs += project.get("optional-dependencies", {}).get(extra, [])
    out: dict[str, SpecifierSet] = {}
    for text in reqs:
        r = Requirement(text)
        out[normalise(r.name)] = out.get(normalise(r.name), SpecifierSet()) & r.specifier
    return out


def _conda_requirement(text: str) -> tuple[str, SpecifierSet]:
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*(.*?)\s*", text)
    assert m, f"cannot read conda dependency {text!r}"
    name, spec = m.groups()
    spec = spec.replace(" ", "")
    exact = re.fullmatch(r"=?([\w.*+!]+)(?:=\S+)?", spec)  # conda "=1.2", "1.2", "1.2=build_0"
    if exact:
        spec = f"=={exact.group(1)}"
    return normalise(name), SpecifierSet(spec)


def environment_requirements() -> tuple[dict[str, SpecifierSet], list[str]]:
    """(name -> specifier for conda + pip entries, the pip entries that are not packages)."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    out: dict[str, SpecifierSet] = {}
    local: list[str] = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for pip_dep in dep.get("pip", []):
                if pip_dep.startswith("-"):
                    local.append(pip_dep)
                    continue
                r = Requirement(pip_dep)
                out[normalise(r.name)] = r.specifier
        else:
            name, spec = _conda_requirement(dep)
            if name not in CONDA_ONLY:
                out[name] = spec
    return out, local


def test_environment_yml_basics():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "llm-latency-course"
    assert env["channels"] == ["conda-forge"]
    _, local = environment_requirements()
    assert "-e ." in local, "environment.yml must install the course itself (pip: -e .)"


def test_same_package_names():
    py = set(pyproject_requirements())
    conda = set(environment_requirements()[0])
    assert py == conda, (
        f"pyproject.toml and environment.yml disagree. Only in pyproject: {sorted(py - conda)}; "
        f"only in environment.yml: {sorted(conda - py)}"
    )


def test_same_version_bounds():
    py = pyproject_requirements()
    conda, _ = environment_requirements()
    differ = {n: (str(py[n]), str(conda[n])) for n in py.keys() & conda.keys() if py[n] != conda[n]}
    assert not differ, f"version bounds differ (pyproject, environment.yml): {differ}"


def test_normalisation():
    assert normalise("PyTorch") == "torch"
    assert normalise("pytest_xdist") == normalise("pytest-xdist") == "pytest-xdist"
    assert _conda_requirement("jupyterlab>=4.2,<5") == ("jupyterlab", SpecifierSet(">=4.2,<5"))
    assert _conda_requirement("pytorch-cpu >=2.2") == ("torch", SpecifierSet(">=2.2"))
    assert _conda_requirement("numpy=1.26=py311_0") == ("numpy", SpecifierSet("==1.26"))
    assert _conda_requirement("tqdm") == ("tqdm", SpecifierSet())


def test_drift_is_detected(tmp_path, monkeypatch):
    """The check can fail: a package missing from environment.yml is reported by name."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*- sympy", text, re.MULTILINE)
    (tmp_path / "environment.yml").write_text(re.sub(r"^\s*- sympy.*\n", "", text, flags=re.MULTILINE))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="sympy"):
        test_same_package_names()


# --- the environment check (course_lib.measure.sysinfo) -----------------------------------------------------------
from course_lib.measure import sysinfo  # noqa: E402


def test_sysinfo_basic_facts():
    info = sysinfo.system_info(include_torch=False)
    assert info["python"].count(".") == 2
    assert info["packages"]["course_lib"]
    assert info["cpu"]["logical_cores"] >= 1
    assert info["torch"] is None
    for c in info["caches"]:
        assert c["level"] in (1, 2, 3, 4) and c["size_bytes"] > 0
    md = sysinfo.to_markdown(info)
    assert md.startswith("| What | This machine |") and "CPU cores" in md
    assert "<table" in sysinfo.to_html(info)


def test_sysinfo_without_torch(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert sysinfo.torch_info() is None
    info = sysinfo.system_info()
    assert info["torch"] is None
    assert "not installed" in sysinfo.to_markdown(info)


def test_sysinfo_size_parsing():
    assert sysinfo.parse_size("32K") == 32 * 1024
    assert sysinfo.parse_size("1024K") == 1024**2
    assert sysinfo.parse_size("32 MiB") == 32 * 1024**2
    assert sysinfo.parse_size("33554432") == 33554432
    assert sysinfo.parse_size("n/a") is None and sysinfo.parse_size(None) is None


def test_sysinfo_report_has_no_machine_paths():
    info = sysinfo.system_info(include_torch=False)
    text = sysinfo.to_markdown(info) + sysinfo.to_html(info)
    assert not re.search(r"(?<![\w.])/(root|home|tmp|work)\b", text)
    report = sysinfo.SystemReport(info)
    assert report._repr_markdown_() == sysinfo.to_markdown(info)


# --- the test harness itself (tests/conftest.py) ------------------------------------------------------------
import os  # noqa: E402

import conftest  # noqa: E402


def test_harness_environment():
    assert os.environ["COURSE_FAST"] == "1"
    assert os.environ["MPLBACKEND"] == "Agg"


def test_nbval_kernels_get_the_course_kernel_env():
    from course_lib.authoring import kernel as course_kernel

    nbval_kernel = pytest.importorskip("nbval.kernel")
    spec = nbval_kernel.NbvalKernelspecManager().get_kernel_spec(nbval_kernel.CURRENT_ENV_KERNEL_NAME)
    assert spec.env["MPLBACKEND"] == course_kernel.INLINE_BACKEND
    assert spec.env["COURSE_FAST"] == "1"
    assert course_kernel.kernel_env().items() <= spec.env.items()


def test_require_tool_finds_skips_or_fails(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("COURSE_REQUIRE_ALL", raising=False)
    assert conftest.require_tool("python")            # the interpreter's own bin/ is searched
    assert conftest.require_tool("json", module=True) == "json"
    with pytest.raises(pytest.skip.Exception, match="no-such-tool-xyz"):
        conftest.require_tool("no-such-tool-xyz")
    for var, value in (("CI", "true"), ("COURSE_REQUIRE_ALL", "1")):
        monkeypatch.setenv(var, value)
        with pytest.raises(pytest.fail.Exception, match="no-such-tool-xyz"):
            conftest.require_tool("no-such-tool-xyz")
        with pytest.raises(pytest.fail.Exception, match="no_such_module_xyz"):
            conftest.require_tool("no_such_module_xyz", module=True)
        monkeypatch.delenv(var)


def test_hypothesis_profile_is_bounded():
    from hypothesis import settings

    profile = settings.get_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
    assert settings.default.max_examples == profile.max_examples <= 50
    assert settings.get_profile("ci").derandomize and settings.get_profile("ci").deadline is None
