"""The contents manager of the course's JupyterLab: notebooks open unmodified.

Lessons: none

Why a notebook tab shows the unsaved-changes dot the moment it opens: when the notebook's kernel
connects, JupyterLab copies the kernel's ``language_info`` into the notebook's metadata, and any
difference marks the notebook modified. The kernel reports the Python version
(``"version": "3.11.7"``); the course stores its notebooks without it (the canonical form of
:mod:`course_lib.authoring.nb_canonical` drops it, so that re-running a notebook on another Python
changes nothing), so every stored notebook differed, lessons and exercises alike. (An exercise copy
in ``work/`` that the learner has saved once carries the version and opens clean: that is why only
lesson tabs seemed affected.)

:class:`CourseContentsManager` is Jupyter Server's default contents manager with one addition: a
notebook read for the browser gets ``metadata.language_info.version`` filled in with this
interpreter's Python version (the kernel of ``make lab`` is this interpreter) when the file has none.
Files on disk are not touched; a notebook the learner saves keeps the version, which is harmless.
``make lab`` selects it in its Jupyter Server configuration::

    "ServerApp": {"contents_manager_class": "course_lib.authoring.lab_contents.CourseContentsManager"}

Serves no lesson: part of the lab set-up.
"""
from __future__ import annotations

import platform

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

__all__ = ["CourseContentsManager", "with_kernel_version", "KERNEL_PYTHON_VERSION"]

#: What an ipykernel of this interpreter reports as ``language_info.version``.
KERNEL_PYTHON_VERSION = platform.python_version()


def with_kernel_version(content: dict, version: str = KERNEL_PYTHON_VERSION) -> dict:
    """``content`` (a notebook as JSON) with ``metadata.language_info.version`` set to ``version`` when a
    Python notebook has none; anything else is returned unchanged. Modifies and returns ``content``."""
    meta = content.get("metadata") if isinstance(content, dict) else None
    info = meta.get("language_info") if isinstance(meta, dict) else None
    if isinstance(info, dict) and info.get("name") == "python" and "version" not in info:
        info["version"] = version
    return content


class CourseContentsManager(AsyncLargeFileManager):
    """Jupyter Server's default contents manager; notebooks come with the kernel's Python version."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
            with_kernel_version(model["content"])
        return model
