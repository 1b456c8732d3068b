"""The torch-free core: every formula and every number the lessons print.

Imports neither torch, ipywidgets nor matplotlib. Modules: validation (argument checks and the
limits they enforce), units, precision, models, hardware, data (the one loader of the JSON catalogs
in ``course_lib/data/``), formulas (sympy) with codegen and the generated numeric module, estimator,
kv, roofline, caching (the model), prefix_cache, compare, capstone and measurements (published
figures).

Every public name of the modules in :data:`MODULES` (each module's ``__all__``) can be imported from here
(``from course_lib.core import estimate, PrefixCache``); a name is imported from its module on first use,
so ``import course_lib.core`` stays light (sympy is only loaded for the ``formulas`` names). Every function
and class of ``__all__`` either returns finite, non-negative results or raises a ValueError/TypeError that
names the argument (``tests/test_api_edges.py``); the limits are stated once, in
:mod:`course_lib.core.validation`.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

#: the modules whose public names (their ``__all__``) this package offers, in the order of the course.
#: The core's other modules keep their names to themselves, each for a reason that
#: tests/test_api_edges.py records (codegen, numeric, quality, serving, app).
MODULES: tuple[str, ...] = ("validation", "units", "precision", "data", "models", "hardware", "formulas",
                            "estimator", "prefix_cache", "caching", "compare", "capstone", "kv", "roofline",
                            "measurements")

#: names of a module's ``__all__`` not offered here: sympy's symbol namespace (a one-letter name would be a
#: trap) and the symbol -> LaTeX table behind ``formulas.latex``
NOT_REEXPORTED: frozenset[str] = frozenset({"formulas.S", "formulas.LATEX_NAMES"})


def _all_of(module: str) -> list[str]:
    """The literal ``__all__`` of ``course_lib/core/<module>.py``, read without importing it (so that
    ``import course_lib.core`` loads no module, and sympy only comes with a ``formulas`` name)."""
    tree = ast.parse((Path(__file__).parent / f"{module}.py").read_text(encoding="utf-8"))
    names: list[str] | None = None
    for node in tree.body:                      # __all__ = [...], then any __all__ += [...]
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) or node.value is None:
            continue
        if isinstance(node, ast.AugAssign) and names is not None:
            names += list(ast.literal_eval(node.value))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            names = list(ast.literal_eval(node.value))
    if names is None:
        raise ImportError(f"course_lib.core.{module} has no literal __all__")
    return names


#: public name -> the module that defines it
_WHERE: dict[str, str] = {}
for _module in MODULES:
    for _name in _all_of(_module):
        if f"{_module}.{_name}" in NOT_REEXPORTED:
            continue
        if _name in _WHERE:
            raise ImportError(f"{_name} is public in both course_lib.core.{_WHERE[_name]} and {_module}")
        _WHERE[_name] = _module
del _module, _name

__all__ = list(_WHERE)


def where(name: str) -> str:
    """The full name of the module that defines the public name ``name`` (``"course_lib.core.estimator"``)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'course_lib.core' has no attribute {name!r}")
    return f"{__name__}.{_WHERE[name]}"


def __getattr__(name: str):
    value = getattr(importlib.import_module(where(name)), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
