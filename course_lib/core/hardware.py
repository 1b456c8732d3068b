"""Accelerators: memory bandwidth, capacity, on-chip cache and dense peak FLOP/s, each with its source.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09

Everything is stored in base units (bytes, bytes/s, FLOP/s). ``peak_flops`` holds *dense* figures
only (no structured sparsity, which goes to ``sparse_flops``), keyed by the dtype of the tensor-core
inputs; ``accumulate`` says how each was measured (fp16 inputs with fp32 accumulation is the rate
a transformer actually gets on consumer GPUs: half of the fp16-accumulate headline). ``None`` or a
missing key means no published value exists: the course does not invent one.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Mapping

from course_lib.core import data
from course_lib.core.validation import require_choice, require_nonnegative, require_positive

__all__ = ["HardwareSpec", "get_hardware", "list_hardware", "custom_hardware"]


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    bandwidth: float                     # bytes/s
    capacity: float | None = None        # bytes
    memory_type: str = "unknown"
    cache_bytes: float | None = None     # largest on-chip cache (L2 / last level)
    peak_flops: Mapping[str, float] = field(default_factory=dict)    # dense FLOP/s by dtype
    accumulate: Mapping[str, str] = field(default_factory=dict)
    sparse_flops: Mapping[str, float] = field(default_factory=dict)  # with 2:4 structured sparsity
    display: str = ""
    source: str = ""
    measured: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {type(self.name).__name__}")
        require_positive("bandwidth", self.bandwidth)
        if self.capacity is not None:
            require_positive("capacity", self.capacity)
        if self.cache_bytes is not None:
            require_nonnegative("cache_bytes", self.cache_bytes)
        for field_name in ("memory_type", "display", "source"):
            if not isinstance(getattr(self, field_name), str):
                raise TypeError(f"{field_name} must be a string, got {type(getattr(self, field_name)).__name__}")
        for field_name in ("peak_flops", "accumulate", "sparse_flops", "measured"):
            value = getattr(self, field_name)
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise TypeError(f"{field_name} must be a dict with string keys (dtype names such as 'fp16'), "
                                f"got {type(value).__name__}")
        for field_name in ("peak_flops", "sparse_flops"):
            for k, v in getattr(self, field_name).items():
                require_positive(f"{field_name}[{k!r}]", v)

    def flops(self, dtype: str = "fp16") -> float:
        """Dense peak FLOP/s for ``dtype``; a clear error when no figure is published."""
        if not isinstance(dtype, str):
            raise TypeError(f"dtype must be a string such as 'fp16', got {type(dtype).__name__}")
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        have = ", ".join(sorted(self.peak_flops)) or "none"
        raise ValueError(
            f"hardware {self.name!r} has no published dense {dtype[:40]} peak FLOP/s (dtype; published: {have}); "
            f"pass a spec with one, e.g. get_hardware({self.name!r}).with_peak({dtype[:40]!r}, 50e12)"
        )

    def ridge_point(self, dtype: str = "fp16") -> float:
        """FLOP per byte at which a kernel turns compute-bound on this device."""
        from course_lib.core import _generated as g
        return g.ridge_point(self.flops(dtype), self.bandwidth)

    def with_peak(self, dtype: str, flops: float) -> "HardwareSpec":
        if not isinstance(dtype, str) or not dtype.strip():
            raise TypeError(f"dtype must be a non-empty string such as 'fp16', got {dtype!r}")
        peak = dict(self.peak_flops)
        peak[dtype] = require_positive("flops", flops)
        return replace(self, peak_flops=peak)


def custom_hardware(name: str, bandwidth: float, peak_flops: float | Mapping[str, float] | None = None,
                    capacity: float | None = None, **kw) -> HardwareSpec:
    """A device of your own: ``custom_hardware("my-gpu", bandwidth=500e9, peak_flops=100e12)``.

    A single ``peak_flops`` number is taken as the fp16/bf16 rate.
    """
    if peak_flops is None:
        peak = {}
    elif isinstance(peak_flops, Mapping):
        peak = dict(peak_flops)
    else:
        peak = {"fp16": peak_flops, "bf16": peak_flops}
    return HardwareSpec(name=name, bandwidth=bandwidth, capacity=capacity, peak_flops=peak, **kw)


def _catalog() -> dict:
    return data.load_catalog("hardware")["hardware"]


@lru_cache(maxsize=None)
def _build(key: str) -> HardwareSpec:
    e = _catalog()[key]
    cache = e.get("cache_MB")
    return HardwareSpec(
        name=key, display=e["display"], bandwidth=e["bandwidth_GBps"] * 1e9, capacity=e["capacity_GB"] * 1e9,
        memory_type=e["memory_type"], cache_bytes=None if cache is None else cache * 1e6,
        peak_flops={k: v * 1e12 for k, v in e["peak_TFLOPs"].items() if v is not None},
        accumulate=dict(e.get("accumulate", {})),
        sparse_flops={k: v * 1e12 for k, v in e.get("sparse_TFLOPs", {}).items() if v is not None},
        source=e["source"], measured=dict(e.get("measured", {})),
    )


def get_hardware(hardware) -> HardwareSpec:
    """A catalog device by name ('rtx-4090', 'a100-80gb', 'h100-sxm', 'h200', …); a spec passes through."""
    if isinstance(hardware, HardwareSpec):
        return hardware
    return _build(require_choice("hardware", hardware, _catalog()))


def list_hardware() -> list[str]:
    return list(_catalog())
