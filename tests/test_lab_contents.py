"""The lab's contents manager: a notebook opens with the kernel's Python version in ``language_info``, so
JupyterLab finds nothing to change when the kernel connects and the tab does not open as modified."""
from __future__ import annotations

import asyncio
import platform

import nbformat
import pytest

pytest.importorskip("jupyter_server")

from course_lib.authoring.lab_contents import KERNEL_PYTHON_VERSION, CourseContentsManager, with_kernel_version  # noqa: E402
from course_lib.authoring.nb_canonical import canonicalize  # noqa: E402

from repo import ROOT  # noqa: E402


def test_the_canonical_form_drops_the_version_that_the_kernel_reports():
    nb = canonicalize(nbformat.read(ROOT / "notebooks" / "01_units.ipynb", as_version=4))
    assert "version" not in nb.metadata.language_info         # why a stored notebook opened as modified
    assert KERNEL_PYTHON_VERSION == platform.python_version()


def test_with_kernel_version_fills_in_only_a_missing_python_version():
    nb = {"metadata": {"language_info": {"name": "python", "mimetype": "text/x-python"}}}
    assert with_kernel_version(nb, "3.11.7")["metadata"]["language_info"]["version"] == "3.11.7"
    kept = {"metadata": {"language_info": {"name": "python", "version": "3.12.1"}}}
    assert with_kernel_version(kept, "3.11.7")["metadata"]["language_info"]["version"] == "3.12.1"
    other = {"metadata": {"language_info": {"name": "R"}}}
    assert "version" not in with_kernel_version(other)["metadata"]["language_info"]
    for odd in ({}, {"metadata": None}, {"metadata": {"language_info": "python"}}, []):
        assert with_kernel_version(odd) == odd


def test_the_lab_serves_notebooks_with_the_kernel_version_and_leaves_files_alone(tmp_path):
    src = ROOT / "notebooks" / "00_start_here.ipynb"
    (tmp_path / "lesson.ipynb").write_bytes(src.read_bytes())
    (tmp_path / "notes.txt").write_text("plain text")
    cm = CourseContentsManager(root_dir=str(tmp_path))
    model = asyncio.run(cm.get("lesson.ipynb"))
    assert model["content"]["metadata"]["language_info"]["version"] == KERNEL_PYTHON_VERSION
    assert (tmp_path / "lesson.ipynb").read_bytes() == src.read_bytes()      # nothing written
    assert asyncio.run(cm.get("notes.txt"))["content"] == "plain text"
    listing = asyncio.run(cm.get(""))
    assert {c["name"] for c in listing["content"]} == {"lesson.ipynb", "notes.txt"}
