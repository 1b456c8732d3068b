"""What this machine is: the environment check at the start of the course.

Lessons: 00, 05, 06, 07, 08, 09

    from course_lib.measure.sysinfo import system_info, system_report
    info = system_info()          # a plain dict (JSON-serialisable)
    system_report()               # displays as a Markdown/HTML table in a notebook

Reports the Python and package versions, the CPU (model, cores, caches), the memory and, when
PyTorch is installed, its threads and any GPU (CUDA or Apple MPS). Later lessons compare
predictions with measurements made here, so the numbers that matter for speed are listed: cores,
cache sizes, memory. Nothing here fails when a piece is unknown: the value is ``None`` and the
report says "unknown". torch is imported only inside :func:`torch_info` (it takes a second or two)
and its absence is reported, not raised. No file-system paths are reported.
"""
from __future__ import annotations

import html
import math
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["system_info", "torch_info", "cpu_info", "cache_info", "memory_bytes", "package_versions",
           "to_markdown", "to_html", "system_report", "SystemReport", "PACKAGES", "SYSFS_CPU", "parse_cpu_list",
           "sysfs_cache_instances", "parse_size"]

#: Distributions whose versions the report lists (missing ones show as "not installed").
PACKAGES = ("course_lib", "numpy", "torch", "sympy", "matplotlib", "ipywidgets", "jupyterlab", "ipykernel",
            "nbval", "nbgrader", "voila")

#: where Linux describes the CPU caches: ``cpuN/cache/indexM/{level,type,size,shared_cpu_list}``
SYSFS_CPU = Path("/sys/devices/system/cpu")


def _run(cmd: list[str], timeout: float = 5.0) -> str | None:
    """stdout of ``cmd`` or None when the tool is missing, fails or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when not installed); nothing is imported."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    if versions.get("course_lib") is None and "course_lib" in versions:
        from course_lib import __version__  # running from a source tree that was not pip-installed
        versions["course_lib"] = __version__
    return versions


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def parse_size(text: str | None) -> int | None:
    """'32K' / '1024K' / '32 MiB' / '32768' (bytes) -> bytes; None when unreadable (or beyond a float)."""
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a size such as '32K' (a string) or None, got {type(text).__name__}")
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not m:
        return None
    size = float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ")
    return int(size) if math.isfinite(size) else None


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if m and m.group(1).strip():
            return m.group(1).strip()
    if sys.platform == "darwin":
        out = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
        if out and out.strip():
            return out.strip()
    return platform.processor() or None


def _physical_cores() -> int | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    pairs, phys = set(), None
    for block in text.split("\n\n"):
        p = re.search(r"^physical id\s*:\s*(\d+)", block, re.MULTILINE)
        c = re.search(r"^core id\s*:\s*(\d+)", block, re.MULTILINE)
        if p and c:
            pairs.add((p.group(1), c.group(1)))
    if pairs:
        return len(pairs)
    if sys.platform == "darwin":
        out = _run(["sysctl", "-n", "hw.physicalcpu"])
        if out and out.strip().isdigit():
            phys = int(out.strip())
    return phys


def cpu_info() -> dict:
    """CPU model, logical/physical cores and the cores this process may use."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "model": _cpu_model(),
        "architecture": platform.machine() or None,
        "logical_cores": os.cpu_count(),
        "physical_cores": _physical_cores(),
        "usable_cores": usable,
    }


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs of a Linux CPU list such as ``"0-3,8,10-11"`` (ValueError for anything else)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a cpu list, a string such as '0-3,8', got {type(text).__name__}")
    cpus: set[int] = set()
    for part in text.strip().split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"text must be a cpu list such as '0-3,8', got {text!r}")
        lo = int(m.group(1))
        cpus.update(range(lo, int(m.group(2) or lo) + 1))
    return frozenset(cpus)


def sysfs_cache_instances(root=None, cpus=None) -> list[dict]:
    """Every distinct cache that the CPUs ``cpus`` use, once, from a Linux sysfs tree under ``root``.

    ``root``: default :data:`SYSFS_CPU` (tests feed recorded trees); ``cpus``: default every CPU of the tree
    (:func:`course_lib.measure.device.cache_sizes` passes the CPUs in use). Each CPU's ``cache/index*`` folders
    describe the caches it uses; a cache shared by several CPUs appears under each of them with the same
    ``shared_cpu_list``, and is counted once. Returns ``[{level, type, size_bytes, cpus}]`` sorted by level and
    type (``cpus``: the frozenset of CPUs that share the instance); an empty list when the tree says nothing
    (no sysfs: macOS, Windows).
    """
    root = Path(SYSFS_CPU if root is None else root)
    if cpus is None:
        dirs = sorted(root.glob("cpu[0-9]*"))
    else:
        dirs = [root / f"cpu{int(c)}" for c in sorted(set(cpus))]
    found: dict[tuple, dict] = {}
    for cpu_dir in dirs:
        for idx in sorted((cpu_dir / "cache").glob("index[0-9]*")):
            level, ctype, size = _read(idx / "level"), _read(idx / "type"), parse_size(_read(idx / "size"))
            if not (level and level.isdigit() and ctype and size):
                continue
            shared_text = _read(idx / "shared_cpu_list")
            try:
                shared = parse_cpu_list(shared_text) if shared_text else frozenset({int(cpu_dir.name[3:])})
            except ValueError:
                shared = frozenset({int(cpu_dir.name[3:])})
            found.setdefault((int(level), ctype, shared),
                             {"level": int(level), "type": ctype, "size_bytes": size, "cpus": shared})
    return [found[k] for k in sorted(found, key=lambda k: (k[0], k[1], sorted(k[2])))]


def _caches_from_sys() -> list[dict]:
    """Cache levels from Linux sysfs: one entry per (level, type), its size per instance and how many instances."""
    out: dict[tuple[int, str], dict] = {}
    for c in sysfs_cache_instances():
        entry = out.setdefault((c["level"], c["type"]), {"level": c["level"], "type": c["type"],
                                                          "size_bytes": c["size_bytes"], "instances": 0})
        entry["instances"] += 1
    return [out[k] for k in sorted(out)]


def _caches_from_lscpu() -> list[dict]:
    out = _run(["lscpu", "--caches=NAME,ONE-SIZE,ALL-SIZE,LEVEL,TYPE", "--bytes"])
    caches = []
    for line in (out or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) != 5 or not parts[3].isdigit():
            continue
        name, one, total, level, ctype = parts
        one_b, total_b = parse_size(one), parse_size(total)
        if not one_b:
            continue
        caches.append({"level": int(level), "type": ctype, "size_bytes": one_b,
                       "instances": (total_b // one_b) if total_b else None})
    return caches


def _caches_from_sysctl() -> list[dict]:
    if sys.platform != "darwin":
        return []
    caches = []
    for level, ctype, key in [(1, "Data", "hw.l1dcachesize"), (1, "Instruction", "hw.l1icachesize"),
                              (2, "Unified", "hw.l2cachesize"), (3, "Unified", "hw.l3cachesize")]:
        out = _run(["sysctl", "-n", key])
        if out and out.strip().isdigit() and int(out.strip()) > 0:
            caches.append({"level": level, "type": ctype, "size_bytes": int(out.strip()), "instances": None})
    return caches


def cache_info() -> list[dict]:
    """CPU caches as the OS reports them: [{level, type, size_bytes (one instance), instances}].

    Linux sysfs first, then ``lscpu``, then macOS ``sysctl``; an empty list when none tells.
    """
    for source in (_caches_from_sys, _caches_from_lscpu, _caches_from_sysctl):
        try:
            caches = source()
        except OSError:
            caches = []
        if caches:
            return caches
    return []


def memory_bytes() -> int | None:
    """Total RAM in bytes (None when unknown)."""
    try:
        m = re.search(r"^MemTotal:\s*(\d+)\s*kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
        if m:
            return int(m.group(1)) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    out = _run(["sysctl", "-n", "hw.memsize"]) if sys.platform == "darwin" else None
    return int(out.strip()) if out and out.strip().isdigit() else None


def torch_info() -> dict | None:
    """PyTorch version, CPU threads and accelerators; None when torch is not installed.

    torch is imported here, lazily (the rest of the report needs no torch).
    """
    try:
        import torch
    except ImportError:
        return None
    except Exception as exc:  # a broken install must not break the environment check
        return {"version": None, "error": f"{type(exc).__name__}: {exc}"}
    info: dict = {"version": torch.__version__, "threads": torch.get_num_threads(),
                  "cuda_available": False, "cuda_version": torch.version.cuda, "gpus": [],
                  "mps_available": False}
    try:
        if torch.cuda.is_available():
            info["cuda_available"] = True
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                info["gpus"].append({"name": p.name, "memory_bytes": int(p.total_memory),
                                     "compute_capability": f"{p.major}.{p.minor}",
                                     "multiprocessors": int(p.multi_processor_count)})
    except Exception as exc:  # driver trouble: report, don't raise
        info["cuda_error"] = f"{type(exc).__name__}: {exc}"
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    try:
        info["mps_available"] = bool(mps is not None and mps.is_available())
    except Exception:
        info["mps_available"] = False
    return info


def system_info(include_torch: bool = True) -> dict:
    """Everything in one JSON-serialisable dict (``include_torch=False`` skips importing torch)."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}".strip() or None,
        "packages": package_versions(),
        "cpu": cpu_info(),
        "caches": cache_info(),
        "memory_bytes": memory_bytes(),
        "torch": torch_info() if include_torch else None,
    }


# --- rendering ----------------------------------------------------------------------------------------
def _bytes(n) -> str:
    if n is None:
        return "unknown"
    from course_lib.core.units import format_bytes
    return format_bytes(n, system="iec")


def _rows(info: dict) -> list[tuple[str, str]]:
    unknown = "unknown"
    cpu = info.get("cpu") or {}
    rows = [("Python", f"{info.get('python') or unknown} ({info.get('implementation') or unknown})"),
            ("Operating system", info.get("os") or unknown)]
    for name, version in (info.get("packages") or {}).items():
        rows.append((name, version or "not installed"))
    cores = (f"{cpu.get('logical_cores') or unknown} logical, {cpu.get('physical_cores') or unknown} physical, "
             f"{cpu.get('usable_cores') or unknown} usable by this process")
    rows += [("CPU", f"{cpu.get('model') or unknown} ({cpu.get('architecture') or unknown})"),
             ("CPU cores", cores)]
    caches = info.get("caches") or []
    if caches:
        for c in caches:
            count = f" × {c['instances']}" if c.get("instances") else ""
            rows.append((f"L{c['level']} cache ({c['type'].lower()})", f"{_bytes(c['size_bytes'])}{count}"))
    else:
        rows.append(("CPU caches", "not reported by the operating system"))
    rows.append(("Memory (RAM)", _bytes(info.get("memory_bytes"))))
    t = info.get("torch")
    if t is None:
        rows.append(("PyTorch", "not installed (only the measurement lessons need it)"))
    elif t.get("error"):
        rows.append(("PyTorch", f"installed but failed to import: {t['error']}"))
    else:
        rows.append(("PyTorch threads", str(t.get("threads"))))
        if t.get("gpus"):
            for i, g in enumerate(t["gpus"]):
                rows.append((f"GPU {i}", f"{g['name']}, {_bytes(g['memory_bytes'])}, "
                                         f"compute capability {g['compute_capability']}"))
        elif t.get("mps_available"):
            rows.append(("GPU", "Apple GPU via MPS"))
        else:
            rows.append(("GPU", "none visible to PyTorch (the course runs on the CPU)"))
    return rows


def to_markdown(info: dict | None = None) -> str:
    """A two-column Markdown table of :func:`system_info`."""
    info = system_info() if info is None else info
    lines = ["| What | This machine |", "|---|---|"]
    for k, v in _rows(info):
        lines.append(f"| {k.replace('|', '/')} | {str(v).replace('|', '/')} |")
    return "\n".join(lines)


def to_html(info: dict | None = None) -> str:
    """The same table as HTML."""
    info = system_info() if info is None else info
    body = "".join(f'<tr><th style="text-align:left">{html.escape(k)}</th>'
                   f'<td style="text-align:left">{html.escape(str(v))}</td></tr>' for k, v in _rows(info))
    return f'<table class="course-sysinfo">{body}</table>'


class SystemReport:
    """:func:`system_info` that displays itself as a table in notebooks and as Markdown as text."""

    def __init__(self, info: dict):
        self.info = info

    def _repr_markdown_(self) -> str:
        return to_markdown(self.info)

    def _repr_html_(self) -> str:
        return to_html(self.info)

    def __str__(self) -> str:
        return to_markdown(self.info)

    __repr__ = __str__


def system_report(include_torch: bool = True) -> SystemReport:
    """The environment check: ``system_report()`` as the last line of a notebook cell."""
    return SystemReport(system_info(include_torch=include_torch))
