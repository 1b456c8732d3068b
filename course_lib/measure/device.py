"""Which device a measurement runs on, and what the OS and driver say about it.

Lessons: 05, 06, 07, 08, 09

    from course_lib.measure.device import resolve_device, device_name, last_level_cache_bytes
    dev = resolve_device("cpu")             # a torch.device, or one clear error
    last_level_cache_bytes(dev)             # bytes of the last-level cache the CPUs in use share, or None
    memory_budget(dev)                      # bytes one probe may allocate (MEMORY_BUDGET_FRACTION of what is free)

Nothing here times anything: :mod:`course_lib.measure.timing` times, :mod:`~course_lib.measure.probes`
sizes its buffers from the cache and memory figures read here, :mod:`~course_lib.measure.machine`
records them. CPU caches are read from Linux sysfs (the caches the CPUs in use share, through the one sysfs
reader :func:`course_lib.measure.sysinfo.sysfs_cache_instances`), else from ``lscpu`` / macOS ``sysctl``; GPU
figures come from the CUDA driver. The memory budget of one probe is defined here once
(:data:`MEMORY_BUDGET_FRACTION`, :data:`FAST_MEMORY_BUDGET_BYTES`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

import torch

__all__ = ["fast_mode", "default_device", "resolve_device", "device_name", "cpus_in_use", "cache_sizes",
           "last_level_cache_bytes",
           "MEMORY_BUDGET_FRACTION", "FAST_MEMORY_BUDGET_BYTES", "ASSUMED_RAM_BYTES", "cgroup_memory_room",
           "available_memory", "memory_budget_note", "memory_budget", "memory_capacity", "FALLBACK_LLC_BYTES"]

#: last-level cache assumed when neither the OS nor the driver tells. A guess, not a bound: some CPUs
#: have more (an L3 of 260 or 300 MiB exists), so code that must exceed the cache reads the real size.
FALLBACK_LLC_BYTES = 256 * 2**20


def fast_mode() -> bool:
    """True when ``COURSE_FAST=1`` (tiny sizes and repeats, for tests and stored notebook outputs).

    While a recorded lesson run is replayed (:mod:`course_lib.measure.record`), the mode it was recorded in.
    """
    from course_lib.measure.record import recorded_fast_mode
    recorded = recorded_fast_mode()
    if recorded is not None:
        return recorded
    return os.environ.get("COURSE_FAST", "").strip().lower() in {"1", "true", "yes", "on"}


def default_device() -> str:
    """'cuda' when PyTorch sees a CUDA GPU, else 'cpu'."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device=None) -> torch.device:
    """``device`` ('cpu', 'cuda', 'cuda:N', a torch.device or None for :func:`default_device`) as a torch.device.

    Raises ValueError for another device type or for 'cuda' on a machine without a CUDA GPU, TypeError
    for something that is not a device name.
    """
    if device is None:
        return torch.device(default_device())
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {device!r}") from None
    else:
        raise TypeError(f"device must be a string such as 'cpu' or 'cuda', got {type(device).__name__}")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but PyTorch sees no CUDA GPU on this machine; use device='cpu'")
    return dev


def device_name(device=None) -> str:
    """The GPU's name, or the CPU model as the OS reports it."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    from course_lib.measure.sysinfo import cpu_info
    return cpu_info().get("model") or "CPU"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpus_in_use() -> frozenset[int] | None:
    """The CPUs this process may run on (its affinity mask), or None where the OS does not say."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _sizes_from_instances(instances: list[dict]) -> dict[str, int]:
    """{"L1d", "L1i", "L2", "L3", ...: one instance's bytes, "LLC": the top level's total over ``instances``}."""
    out: dict[str, int] = {}
    for c in instances:
        name = f"L{c['level']}" + {"Data": "d", "Instruction": "i"}.get(c["type"], "")
        out[name] = max(out.get(name, 0), int(c["size_bytes"]))
    data = [c for c in instances if c["type"] != "Instruction"]
    if data:
        top = max(c["level"] for c in data)
        out["LLC"] = sum(int(c["size_bytes"]) for c in data if c["level"] == top)
    return out


def cache_sizes(device=None, *, sysfs_root=None, cpus: Iterable[int] | None = None) -> dict[str, int]:
    """Cache sizes in bytes, as the OS (or the CUDA driver) reports them.

    CPU: ``{"L1d": ..., "L1i": ..., "L2": ..., "L3": ...}`` (one instance each), plus ``"LLC"``: the
    last level **the measuring threads see**, the total of the last-level instances shared by the
    CPUs in use (the affinity mask, or ``cpus``): two sockets with a 32 MiB L3 each give 32 MiB to a
    process pinned to one socket and 64 MiB to one that spans both. Read from Linux sysfs
    (``sysfs_root``, default :data:`course_lib.measure.sysinfo.SYSFS_CPU`;
    :func:`course_lib.measure.sysinfo.sysfs_cache_instances`); where sysfs says
    nothing, ``lscpu`` or macOS ``sysctl`` (:func:`course_lib.measure.sysinfo.cache_info`), whose
    last level is summed over all its instances (they do not say which CPUs share which).
    GPU: ``{"L2": ..., "LLC": ...}``. An empty dict when nothing tells.
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
        return {"L2": l2, "LLC": l2} if l2 else {}
    from course_lib.measure import sysinfo
    instances = sysinfo.sysfs_cache_instances(sysinfo.SYSFS_CPU if sysfs_root is None else sysfs_root,
                                              cpus_in_use() if cpus is None else cpus)
    if instances or sysfs_root is not None:
        return _sizes_from_instances(instances)
    from course_lib.measure.sysinfo import cache_info
    out: dict[str, int] = {}
    top = None
    for c in cache_info():
        kind = {"Data": "d", "Instruction": "i"}.get(c["type"], "")
        out[f"L{c['level']}{kind}"] = int(c["size_bytes"])
        if c["type"] != "Instruction" and (top is None or c["level"] >= top["level"]):
            top = c
    if top is not None:
        out["LLC"] = int(top["size_bytes"]) * int(top.get("instances") or 1)
    return out


def last_level_cache_bytes(device=None, *, sysfs_root=None, cpus: Iterable[int] | None = None) -> int | None:
    """Bytes of the last-level cache the CPUs in use share (see :func:`cache_sizes`), or None when unknown."""
    return cache_sizes(device, sysfs_root=sysfs_root, cpus=cpus).get("LLC")


# --------------------------------------------------------------------------------------------------
# The memory budget of one probe: written here once
# --------------------------------------------------------------------------------------------------
#: the share of the memory available now (RAM: ``MemAvailable``; GPU: the driver's free memory) that one
#: probe may allocate: its rotated buffers, activations and temporaries together
MEMORY_BUDGET_FRACTION = 0.5
#: in fast mode (``COURSE_FAST=1``: the test suite and stored notebook outputs) no probe allocates more
#: than this, whatever the machine (enough for lesson 05's one 8192 × 8192 fp32 matrix, and a kernel stays
#: well within 1.5 GiB); where that is not enough to exceed 4 × the LLC the results say so
#: (``beyond_cache`` False, with a ``cache_reason``) instead of allocating gigabytes
FAST_MEMORY_BUDGET_BYTES = 512 * 2**20
#: RAM assumed when the OS reports neither the available nor the total memory
ASSUMED_RAM_BYTES = 8 * 2**30


def _meminfo_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemAvailable:\s*(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


#: the cgroup files that limit this process's memory (v2, then v1): (limit, usage), relative to /sys/fs/cgroup
CGROUP_MEMORY_FILES = (("memory.max", "memory.current"),
                       ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"))


def cgroup_memory_room(root="/sys/fs/cgroup") -> int | None:
    """Bytes a container's memory limit still leaves (limit - usage), or None where no limit is set."""
    for limit_name, usage_name in CGROUP_MEMORY_FILES:
        limit, usage = _read_text(Path(root) / limit_name), _read_text(Path(root) / usage_name)
        if limit and usage and limit.isdigit() and usage.isdigit() and int(limit) < 2**60:
            return max(0, int(limit) - int(usage))
    return None


def available_memory(device=None) -> tuple[int, str]:
    """(bytes available now, where the figure comes from) for ``device``.

    GPU: the driver's free memory. CPU: Linux ``MemAvailable`` (capped by a container's cgroup memory
    limit: :func:`cgroup_memory_room`), else ``psutil`` (macOS, Windows) when installed, else half the
    total RAM (:data:`ASSUMED_RAM_BYTES` when that is unknown too).
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free), "free GPU memory"
    avail, room = _meminfo_available(), cgroup_memory_room()
    if room is not None and (avail is None or room < avail):
        return room, "memory the container's limit leaves"
    if avail:
        return avail, "available memory"
    try:
        import psutil
        return int(psutil.virtual_memory().available), "available memory"
    except Exception:  # psutil missing or failing: fall back to the total
        pass
    from course_lib.measure.sysinfo import memory_bytes
    ram = memory_bytes()
    if ram:
        return ram // 2, "half the RAM (the available memory is not reported)"
    return ASSUMED_RAM_BYTES // 2, "half of an assumed 8 GiB of RAM"


def memory_budget_note(device=None, fast: bool | None = None) -> tuple[int, str]:
    """(the bytes one probe may allocate, how that figure was chosen): the one definition of the budget.

    ``MEMORY_BUDGET_FRACTION`` × :func:`available_memory`; in fast mode (``fast=None``: :func:`fast_mode`)
    at most :data:`FAST_MEMORY_BUDGET_BYTES`.
    """
    from course_lib.core.units import format_bytes
    avail, source = available_memory(device)
    budget = int(avail * MEMORY_BUDGET_FRACTION)
    note = f"{MEMORY_BUDGET_FRACTION:.0%} of the {format_bytes(avail, system='iec')} of {source}"
    if (fast_mode() if fast is None else fast) and budget > FAST_MEMORY_BUDGET_BYTES:
        budget = FAST_MEMORY_BUDGET_BYTES
        note = "fast mode's limit under COURSE_FAST=1; run without it for more"
    return max(budget, 1), note


def memory_budget(device=None, fast: bool | None = None) -> int:
    """Bytes one probe may allocate: :data:`MEMORY_BUDGET_FRACTION` of the memory available now
    (fast mode: at most :data:`FAST_MEMORY_BUDGET_BYTES`); see :func:`memory_budget_note`."""
    return memory_budget_note(device, fast)[0]


def memory_capacity(device=None) -> int | None:
    """Bytes of memory of the device: the GPU's total memory, or the machine's RAM (None if unknown)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).total_memory)
    from course_lib.measure.sysinfo import memory_bytes
    return memory_bytes()
