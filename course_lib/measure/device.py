"""Which device a measurement runs on, and what the OS and driver say about it.

Lessons: 05, 06, 07, 08, 09.

    from course_lib.measure.device import resolve_device, device_name, last_level_cache_bytes
    dev = resolve_device("cpu")             # a torch.device, or one clear error
    last_level_cache_bytes(dev)             # bytes of the last-level cache, or None
    memory_budget(dev)                      # bytes a probe may allocate

Nothing here times anything: :mod:`course_lib.measure.timing` times, :mod:`~course_lib.measure.probes`
sizes its buffers from the cache and memory figures read here, :mod:`~course_lib.measure.machine`
records them. Cache and memory sizes come from :mod:`course_lib.measure.sysinfo` (CPU) or the CUDA
driver (GPU).
"""
from __future__ import annotations

import os

import torch

__all__ = ["fast_mode", "default_device", "resolve_device", "device_name", "cache_sizes", "last_level_cache_bytes",
           "memory_budget", "memory_capacity", "FALLBACK_LLC_BYTES"]

#: last-level cache assumed when neither the OS nor the driver tells. A guess, not a bound: some CPUs
#: have more (an L3 of 260 or 300 MiB exists), so code that must exceed the cache reads the real size.
FALLBACK_LLC_BYTES = 256 * 2**20


def fast_mode() -> bool:
    """True when ``COURSE_FAST=1`` (tiny sizes and repeats, for tests and stored notebook outputs)."""
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


def cache_sizes(device=None) -> dict[str, int]:
    """Cache sizes in bytes, as the OS (or the CUDA driver) reports them.

    CPU: ``{"L1d": ..., "L1i": ..., "L2": ..., "L3": ...}`` per instance, from
    /sys/devices/system/cpu/cpu0/cache, ``lscpu`` or macOS ``sysctl`` (via :mod:`course_lib.measure.sysinfo`),
    plus ``"LLC"``: the last level summed over its instances (two 32 MiB L3 slices hold 64 MiB).
    GPU: ``{"L2": ..., "LLC": ...}``. An empty dict when nothing tells.
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
        return {"L2": l2, "LLC": l2} if l2 else {}
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


def last_level_cache_bytes(device=None) -> int | None:
    """Bytes of the last-level cache (all instances), or None when the OS does not say."""
    return cache_sizes(device).get("LLC")


def memory_budget(device=None) -> int:
    """Bytes a probe may allocate: a third of free GPU memory, or a quarter of RAM (8 GiB assumed if unknown)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free // 3)
    from course_lib.measure.sysinfo import memory_bytes
    ram = memory_bytes() or 8 * 2**30
    return int(ram // 4)


def memory_capacity(device=None) -> int | None:
    """Bytes of memory of the device: the GPU's total memory, or the machine's RAM (None if unknown)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).total_memory)
    from course_lib.measure.sysinfo import memory_bytes
    return memory_bytes()
