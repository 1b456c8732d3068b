"""The one loader of the JSON catalogs shipped in ``course_lib/data/`` (every lesson reads through it).

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09

No lesson imports it directly; every lesson reaches it, as the catalogs of models, hardware and
measurements load through it.

    from course_lib.core import data
    data.load_catalog("hardware")["hardware"]["h200"]       # the parsed file, read once and cached
    data.load_catalog("published_measurements", copy=True)  # a fresh deep copy the caller may modify
    data.catalog_names()                                    # ['glossary', 'h200_mistral7b', ...]

Files are read with ``importlib.resources`` (so they load from an installed wheel too), as UTF-8,
once per process. ``load_catalog`` returns the cached object itself: treat it as read-only, or pass
``copy=True``. Users: ``core.hardware``, ``core.models``, ``core.measurements``,
``lessons.glossary``, ``lessons.lesson_map``.
"""
from __future__ import annotations

import copy as _copy
import json
from functools import lru_cache
from importlib import resources

from course_lib.core.validation import require_choice

__all__ = ["load_catalog", "catalog_names"]

_PACKAGE = "course_lib"
_FOLDER = "data"


@lru_cache(maxsize=1)
def _files() -> tuple[str, ...]:
    folder = resources.files(_PACKAGE).joinpath(_FOLDER)
    return tuple(sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json")))


def catalog_names() -> list[str]:
    """The catalogs that ``load_catalog`` knows: the ``*.json`` files of ``course_lib/data/``, without ``.json``."""
    return list(_files())


@lru_cache(maxsize=None)
def _read(name: str):
    with resources.files(_PACKAGE).joinpath(_FOLDER, f"{name}.json").open("r", encoding="utf-8") as f:
        return json.load(f)


def load_catalog(name: str, *, copy: bool = False):
    """The parsed ``course_lib/data/<name>.json`` (``name`` with or without ``.json``).

    The same cached object on every call (read-only by convention); ``copy=True`` gives a deep copy.
    An unknown name is a ValueError listing the known ones.
    """
    if isinstance(name, str) and name.strip().lower().endswith(".json"):
        name = name.strip()[: -len(".json")]
    key = require_choice("name", name, _files())
    if not isinstance(copy, bool):
        raise TypeError(f"copy must be True or False, got {type(copy).__name__}")
    obj = _read(key)
    return _copy.deepcopy(obj) if copy else obj
