"""The one door every lesson measurement goes through: measure live, record, or replay a recording.

Lessons: 05, 06, 07, 08

    from course_lib.measure.record import measured
    copy = measured("05/copy", probes.measure_copy_bandwidth, device=device)

:func:`measured` calls ``fn(*args, **kwargs)`` and returns its result, unless the environment variable
``COURSE_MEASUREMENTS`` says otherwise:

* unset or empty: measure live (what a learner gets);
* ``record:DIR``: measure live and also write the result into ``DIR/<prefix>.json`` (``prefix`` is the part of
  the key before the first ``/``, e.g. ``05``), so that a whole lesson run is kept as data;
* ``replay:DIR``: return the result recorded in ``DIR/<prefix>.json`` instead of measuring. A lesson whose
  file is absent is measured live. A key the file lacks is one clear error (the recording is out of date).

The same key may be measured several times in one run (in a loop): the n-th call with a key returns the
n-th recorded result. Results are course dataclasses, lists, tuples, dicts, numbers and strings; they are
stored as JSON (:func:`encode` / :func:`decode`), and only classes defined in ``course_lib`` are rebuilt.

While replaying, :func:`recorded_fast_mode` tells :func:`course_lib.measure.device.fast_mode` the mode the
recording was made in, so the lesson asks for the same measurements that were recorded.

This is how tests execute the measurement lessons against a recorded run of another machine (and how the
stored notebooks, executed while recording, agree with the test run cell by cell).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import os
from collections import Counter
from pathlib import Path

__all__ = ["ENV", "measured", "mode", "encode", "decode", "recorded_fast_mode", "RecordingError", "reset"]

#: the environment variable that selects live, record or replay
ENV = "COURSE_MEASUREMENTS"
_SCHEMA = 1
_calls: Counter = Counter()
_started: set = set()          # recording files this process has begun afresh


class RecordingError(RuntimeError):
    """A recording that is missing a key, or is not a recording."""


def reset() -> None:
    """Forget how many times each key was measured (a new run starts from the first recorded result)."""
    _calls.clear()
    _started.clear()
    _fast_of.cache_clear()


def mode() -> tuple[str, Path | None]:
    """``("live", None)``, ``("record", DIR)`` or ``("replay", DIR)`` from :data:`ENV`."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return "live", None
    kind, sep, path = raw.partition(":")
    if not sep or kind not in ("record", "replay") or not path:
        raise ValueError(f"{ENV} must be 'record:DIR' or 'replay:DIR' (or unset), got {raw!r}")
    return kind, Path(path).expanduser()


def _prefix(key: str) -> str:
    if not isinstance(key, str) or "/" not in key or not key.split("/", 1)[0] or not key.split("/", 1)[1]:
        raise ValueError(f"key must look like 'LESSON/name' (e.g. '05/copy'), got {key!r}")
    return key.split("/", 1)[0]


def _file(directory: Path, key: str) -> Path:
    return directory / f"{_prefix(key)}.json"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RecordingError(f"{path} is not a readable recording: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != _SCHEMA or not isinstance(data.get("results"), dict):
        raise RecordingError(f"{path} is not a recording of schema {_SCHEMA}")
    return data


def recorded_fast_mode() -> bool | None:
    """While replaying a directory that has recordings: the ``COURSE_FAST`` mode they were made in (else None).

    All recordings in one directory must agree (one run of the lessons); the first one found decides.
    """
    kind, directory = mode()
    if kind != "replay" or directory is None:
        return None
    return _fast_of(str(directory))


@functools.lru_cache(maxsize=8)
def _fast_of(directory: str) -> bool | None:
    folder = Path(directory)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        return bool(_read(path).get("fast"))
    return None


def measured(key: str, fn, /, *args, **kwargs):
    """``fn(*args, **kwargs)``, or its recorded result (see the module docstring)."""
    if not callable(fn):
        raise TypeError(f"fn must be the measuring function, got {type(fn).__name__}")
    _prefix(key)
    kind, directory = mode()
    path = None if directory is None else _file(directory, key)
    index = _calls[key]
    _calls[key] += 1
    if kind == "replay" and path is not None and path.exists():
        results = _read(path)["results"]
        runs = results.get(key)
        if runs is None or index >= len(runs):
            raise RecordingError(f"the recording {path} has no measurement {key!r} (call {index + 1}); "
                                 f"it was made by an older version of the lesson: record it again with "
                                 f"{ENV}=record:{directory}")
        return decode(runs[index])
    result = fn(*args, **kwargs)
    if kind == "record" and path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        from course_lib.measure.device import fast_mode
        if path in _started and path.exists():
            data = _read(path)
        else:               # the first measurement of this run: the run replaces any older recording
            data = {"schema": _SCHEMA, "fast": fast_mode(), "results": {}}
            _started.add(path)
        data["results"].setdefault(key, []).append(encode(result))
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")   # key order kept: dicts replay in order
        tmp.replace(path)
    return result


# --- the codec ----------------------------------------------------------------------------------

def _name(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _float(x: float):
    if math.isfinite(x):
        return x
    return {"__float__": repr(x)}        # inf, -inf, nan: JSON has no literal for them


def encode(value):
    """``value`` as JSON-ready data (course dataclasses keep their class name)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return _float(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return {"__dataclass__": _name(type(value)), "fields": fields}
    if isinstance(value, (list, tuple)):
        items = [encode(v) for v in value]
        if type(value) in (list, tuple):
            return items if type(value) is list else {"__tuple__": items}
        return {"__sequence__": _name(type(value)), "items": items}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not any(k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    type_name = type(value).__module__ + "." + type(value).__qualname__
    if type_name == "torch.device":
        return {"__device__": str(value)}
    if hasattr(value, "item") and callable(value.item):        # numpy / torch scalars
        return encode(value.item())
    raise TypeError(f"cannot record a {type_name}: record plain numbers, strings and course dataclasses")


def _class(name: str):
    module, _, qual = name.partition(":")
    if not (module == "course_lib" or module.startswith("course_lib.")):
        raise RecordingError(f"a recording may only rebuild course_lib classes, not {name!r}")
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def decode(data):
    """The value :func:`encode` wrote."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "__float__" in data:
        return float(data["__float__"])
    if "__tuple__" in data:
        return tuple(decode(v) for v in data["__tuple__"])
    if "__dict__" in data:
        return {decode(k): decode(v) for k, v in data["__dict__"]}
    if "__device__" in data:
        import torch
        return torch.device(data["__device__"])
    if "__sequence__" in data:
        return _class(data["__sequence__"])(decode(v) for v in data["items"])
    if "__dataclass__" in data:
        cls = _class(data["__dataclass__"])
        return cls(**{k: decode(v) for k, v in data["fields"].items()})
    return {k: decode(v) for k, v in data.items()}
