"""Measurement profiles for tests: recorded timings of real machines, as data (``tests/fixtures/profiles/``).

    from profiles import all_profiles, load_profile
    p = load_profile("intel-xeon-2core-260mib-l3-loaded")
    p.run("2 threads").timings["gemv.fp32.1024x1024"]      # a timing record (seconds, q1_seconds, ...)
    for s in p.series: s.xs, s.timings                     # e.g. TPOT by context from validate

The schema is documented in ``tests/fixtures/profiles/README.md`` and checked by :func:`schema_problems`
(every load checks it, so a malformed profile fails loudly, naming the field).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PROFILE_DIR = Path(__file__).resolve().parent / "fixtures" / "profiles"
SCHEMA = 1
CONDITIONS = ("quiet", "loaded", "busy")
DEVICES = ("cpu", "cuda")
TOP_KEYS = ("schema", "name", "about", "source", "machine", "thread_policy", "condition", "condition_detail",
            "runs", "series")
TIMING_NUMBERS = ("seconds", "q1_seconds", "q3_seconds", "min_seconds", "p10_seconds", "p90_seconds")


@dataclass(frozen=True)
class Run:
    label: str
    threads: int | None
    steal: float | None
    context: dict
    timings: dict


@dataclass(frozen=True)
class Series:
    name: str
    x: str
    xs: tuple
    timings: tuple
    points: tuple           # the raw point dicts (with predicted_seconds etc. where recorded)


@dataclass(frozen=True)
class Profile:
    name: str
    data: dict

    @property
    def device(self) -> str:
        return self.data["machine"]["device"]

    @property
    def condition(self) -> str:
        return self.data["condition"]

    @property
    def runs(self) -> tuple[Run, ...]:
        return tuple(Run(r["label"], r["threads"], r["steal"], r["context"], r["timings"]) for r in self.data["runs"])

    def run(self, label: str) -> Run:
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(f"profile {self.name} has no run {label!r}; it has {[r.label for r in self.runs]}")

    @property
    def series(self) -> tuple[Series, ...]:
        return tuple(Series(s["name"], s["x"], tuple(p["x"] for p in s["points"]),
                            tuple(p["timing"] for p in s["points"]), tuple(s["points"]))
                     for s in self.data["series"])


def _timing_problems(where: str, t) -> list[str]:
    if not isinstance(t, dict):
        return [f"{where} must be an object"]
    out = []
    if "times" in t:
        times = t["times"]
        if not (isinstance(times, list) and times and all(isinstance(x, (int, float)) and x > 0 for x in times)):
            out.append(f"{where}.times must be a non-empty list of seconds > 0")
    elif not isinstance(t.get("seconds"), (int, float)) or t["seconds"] <= 0:
        out.append(f"{where} needs 'seconds' (the median, > 0) or 'times'")
    for k in TIMING_NUMBERS:
        if k in t and not (isinstance(t[k], (int, float)) and t[k] > 0):
            out.append(f"{where}.{k} must be seconds > 0")
    if ("q1_seconds" in t) != ("q3_seconds" in t):
        out.append(f"{where} must give both q1_seconds and q3_seconds or neither")
    if "repeats" in t and not (isinstance(t["repeats"], int) and t["repeats"] >= 1):
        out.append(f"{where}.repeats must be a whole number >= 1")
    return out


def schema_problems(data) -> list[str]:
    """Everything wrong with ``data`` as a profile (empty list: it follows the schema)."""
    if not isinstance(data, dict):
        return ["a profile must be a JSON object"]
    out = [f"missing key {k!r}" for k in TOP_KEYS if k not in data]
    out += [f"unknown key {k!r}" for k in data if k not in TOP_KEYS]
    if out:
        return out
    if data["schema"] != SCHEMA:
        out.append(f"schema must be {SCHEMA}, got {data['schema']!r}")
    for k in ("name", "about", "source", "condition_detail"):
        if not isinstance(data[k], str) or not data[k]:
            out.append(f"{k} must be a non-empty string")
    if data["condition"] not in CONDITIONS:
        out.append(f"condition must be one of {CONDITIONS}, got {data['condition']!r}")
    m = data["machine"]
    if not isinstance(m, dict) or m.get("device") not in DEVICES or not m.get("device_name"):
        out.append(f"machine needs device in {DEVICES} and a device_name")
    if not isinstance(data["runs"], list) or not data["runs"]:
        out.append("runs must be a non-empty list")
        return out
    for i, r in enumerate(data["runs"]):
        where = f"runs[{i}]"
        if set(r) != {"label", "threads", "steal", "context", "timings"}:
            out.append(f"{where} must have exactly label, threads, steal, context, timings")
            continue
        if r["threads"] is not None and not (isinstance(r["threads"], int) and r["threads"] >= 1):
            out.append(f"{where}.threads must be null or a whole number >= 1")
        if r["steal"] is not None and not (isinstance(r["steal"], (int, float)) and 0 <= r["steal"] <= 1):
            out.append(f"{where}.steal must be null or a fraction in [0, 1]")
        if not isinstance(r["timings"], dict) or not r["timings"]:
            out.append(f"{where}.timings must be a non-empty object")
            continue
        for k, t in r["timings"].items():
            out += _timing_problems(f"{where}.timings[{k!r}]", t)
    if not isinstance(data["series"], list):
        out.append("series must be a list")
        return out
    for i, s in enumerate(data["series"]):
        where = f"series[{i}]"
        if not isinstance(s, dict) or not {"name", "x", "points"} <= set(s):
            out.append(f"{where} needs name, x and points")
            continue
        xs = [p.get("x") for p in s["points"]]
        if len(xs) < 2 or len(set(xs)) != len(xs) or not all(isinstance(x, (int, float)) for x in xs):
            out.append(f"{where}.points need at least 2 distinct numeric x")
        for j, p in enumerate(s["points"]):
            out += _timing_problems(f"{where}.points[{j}].timing", p.get("timing"))
    return out


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name: str) -> Profile:
    data = json.loads((PROFILE_DIR / f"{name}.json").read_text())
    problems = schema_problems(data)
    if problems:
        raise ValueError(f"profile {name}: " + "; ".join(problems))
    if data["name"] != name:
        raise ValueError(f"profile {name}: its name field says {data['name']!r}")
    return Profile(name, data)


def all_profiles() -> list[Profile]:
    return [load_profile(n) for n in profile_names()]
