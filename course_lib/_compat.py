"""The old import paths of course_lib, kept working for this release.

Until the package was split into ``core/``, ``measure/``, ``lessons/`` and ``authoring/``, every
module sat at the top: ``course_lib.bench``, ``course_lib.dashboard``, ``course_lib.widgets.capstone``...
A learner's copy of an exercise notebook (``work/``) made before the move still imports them, and
``python -m course_lib.grade`` / ``python -m course_lib.validate`` are documented commands. This module
maps each old name to the module that now holds it, in one table, instead of a file of re-exports
per old path:

* ``import course_lib.bench`` (or ``from course_lib import bench``) returns the *same module object*
  as ``course_lib.measure.bench``, so attributes, monkeypatching and ``isinstance`` behave as before;
* ``python -m course_lib.validate`` runs ``course_lib.measure.benchmarks.validate`` as ``__main__``;
* an old module split into several (``course_lib.caching``: the model in ``core.caching``, the
  measurements in ``measure.cache_timing``) is a small module of its own that reads every name
  from the modules that now hold it (:class:`_Merged`).

New code imports the new paths; ``tests/test_compat.py`` executes answered copies of every exercise
set made before the move and checks each old name below.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

#: old name (under ``course_lib.``) -> new name. A package alias covers its submodules too:
#: ``course_lib.widgets.capstone`` is ``course_lib.lessons.widgets.capstone``. An old module whose names
#: now live in several modules maps to a tuple of them (see :class:`_Merged`).
ALIASES: dict[str, str | tuple[str, ...]] = {
    "validation": "core.validation",
    "units": "core.units",
    "precision": "core.precision",
    "models": "core.models",
    "hardware": "core.hardware",
    "formulas": "core.formulas",
    "codegen": "core.codegen",
    "_generated": "core._generated",
    "estimator": "core.estimator",
    "caching": ("core.caching", "measure.cache_timing"),   # the torch-free model, then the TinyLM measurements
    "prefix_cache": "core.prefix_cache",
    "compare": "core.compare",
    "dashboard": "core.capstone",
    "measurements": "core.measurements",
    "tinylm": "measure.tinylm",
    "validate": "measure.benchmarks.validate",
    "sysinfo": "measure.sysinfo",
    "prose": "lessons.prose",
    "glossary": "lessons.glossary",
    "widgets": "lessons.widgets",
    "plots": "lessons.plots",
    "exgen": "authoring.exgen",
    "grade": "authoring.grade",
}

_PREFIX = __name__.rpartition(".")[0] + "."  # "course_lib."


def new_name(fullname: str) -> str | tuple[str, ...] | None:
    """The module that now holds the old module ``fullname`` (a tuple where several do), or None if it is not
    an old name."""
    if not fullname.startswith(_PREFIX):
        return None
    rest = fullname[len(_PREFIX):]
    head, dot, tail = rest.partition(".")
    target = ALIASES.get(head)
    if target is None or (isinstance(target, tuple) and dot):
        return None
    if isinstance(target, tuple):
        return tuple(_PREFIX + t for t in target)
    return _PREFIX + target + dot + tail


class _Merged(types.ModuleType):
    """An old module split into several: each name is read from the first of ``targets`` that has it.

    The targets are imported when a name is first looked up, one after another as needed, so
    ``from course_lib import caching`` stays torch-free until a measurement name is used. Names are
    read, never copied: ``course_lib.caching.prefix_reuse is course_lib.core.caching.prefix_reuse``.
    """

    def __init__(self, name: str, targets: tuple[str, ...]):
        super().__init__(name, f"Old path of {', '.join(targets)} (course_lib._compat).")
        self._targets = targets

    def __getattr__(self, attr):
        if attr.startswith("__") and attr != "__all__":
            raise AttributeError(attr)
        if attr == "__all__":
            return [n for t in self._targets for n in importlib.import_module(t).__all__]
        for t in self._targets:
            module = importlib.import_module(t)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")

    def __dir__(self):
        return sorted({*super().__dir__(), *(n for t in self._targets for n in dir(importlib.import_module(t)))})


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        if isinstance(self.target, tuple):
            return _Merged(spec.name, self.target)
        module = importlib.import_module(self.target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import system stamped the alias's spec on the shared module; give it its own back.
        if not isinstance(module, _Merged):
            module.__spec__ = self._spec

    # ``python -m course_lib.validate``: runpy asks the loader for the code to run as __main__.
    def get_code(self, fullname):
        spec = importlib.util.find_spec(self.target)
        return spec.loader.get_code(self.target)

    def is_package(self, fullname):
        spec = importlib.util.find_spec(self.target)
        return spec.submodule_search_locations is not None


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        if isinstance(new, tuple):
            return importlib.util.spec_from_loader(fullname, _AliasLoader(new), is_package=False)
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(new), is_package=real.submodule_search_locations is not None)


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
