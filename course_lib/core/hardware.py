"""Accelerators: memory bandwidth, capacity, on-chip cache, dense peak FLOP/s and interconnects, each with its source.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10

Everything is stored in base units (bytes, bytes/s, FLOP/s). ``peak_flops`` holds *dense* figures
only (no structured sparsity, which goes to ``sparse_flops``), keyed by the dtype of the tensor-core
inputs; ``accumulate`` says how each was measured (fp16 inputs with fp32 accumulation is the rate
a transformer actually gets on consumer GPUs: half of the fp16-accumulate headline). ``None`` or a
missing key means no published value exists: the course does not invent one. ``int8`` is the int8
tensor-core rate in operations per second (TOPS x 1e12), the rate W8A8 matrix products run at.

Capacity: ``capacity`` is in bytes, as the driver reports it where a printout is cited (nvidia-smi's
memory.total: an H200 sold as "141 GB" reports 143,771 MiB), else the vendor's figure read as 10^9
bytes; ``capacity_marketing_gb`` is the number printed on the box and ``capacity_source`` says which.

Interconnects: ``interconnects`` maps 'nvlink' / 'infinity_fabric' (GPU to GPU) and 'pcie' (host) to an
:class:`Interconnect`, whose ``bidirectional_bandwidth`` is the vendor's headline and
``per_direction_bandwidth`` half of it (bytes/s); ``scale_up`` is the GPU-to-GPU link, if any.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Mapping

from course_lib.core import data
from course_lib.core.validation import require_choice, require_count, require_nonnegative, require_positive

__all__ = ["HardwareSpec", "Interconnect", "get_hardware", "list_hardware", "custom_hardware"]


@dataclass(frozen=True)
class Interconnect:
    """One link type of a device. Bandwidths in bytes/s; ``per_direction_bandwidth`` defaults to half the
    bidirectional headline (links are full duplex); ``achieved_per_direction`` is a measured rate or None."""

    name: str
    bidirectional_bandwidth: float
    per_direction_bandwidth: float | None = None
    links: int | None = None
    per_link_bidirectional_bandwidth: float | None = None
    topology: str = ""
    achieved_per_direction: float | None = None
    achieved_source: str = ""
    source: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {type(self.name).__name__}")
        require_positive("bidirectional_bandwidth", self.bidirectional_bandwidth)
        if self.per_direction_bandwidth is None:
            object.__setattr__(self, "per_direction_bandwidth", self.bidirectional_bandwidth / 2)
        require_positive("per_direction_bandwidth", self.per_direction_bandwidth)
        if self.links is not None:
            require_count("links", self.links, minimum=1)
        for f in ("per_link_bidirectional_bandwidth", "achieved_per_direction"):
            if getattr(self, f) is not None:
                require_positive(f, getattr(self, f))
        for f in ("topology", "achieved_source", "source"):
            if not isinstance(getattr(self, f), str):
                raise TypeError(f"{f} must be a string, got {type(getattr(self, f)).__name__}")

    @property
    def per_link_per_direction_bandwidth(self) -> float:
        """One link's rate in one direction (what one peer gets over AMD's point-to-point links); the whole
        per-direction figure when the vendor gives no per-link split."""
        if self.per_link_bidirectional_bandwidth is None:
            return self.per_direction_bandwidth
        return self.per_link_bidirectional_bandwidth / 2


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    bandwidth: float                     # bytes/s
    capacity: float | None = None        # bytes, as the driver (or else the vendor) reports them
    memory_type: str = "unknown"
    cache_bytes: float | None = None     # largest on-chip cache (L2 / last level)
    peak_flops: Mapping[str, float] = field(default_factory=dict)    # dense FLOP/s by dtype
    accumulate: Mapping[str, str] = field(default_factory=dict)
    sparse_flops: Mapping[str, float] = field(default_factory=dict)  # with 2:4 structured sparsity
    display: str = ""
    source: str = ""
    measured: Mapping[str, object] = field(default_factory=dict)
    capacity_marketing_gb: float | None = None   # the number printed on the box ("141" for an H200)
    capacity_source: str = ""
    interconnects: Mapping[str, Interconnect] = field(default_factory=dict)
    effective_flops: Mapping[str, float] = field(default_factory=dict)   # FLOP/s derived from a measurement
    effective_basis: str = ""                    # how ``effective_flops`` was derived, with its source

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {type(self.name).__name__}")
        require_positive("bandwidth", self.bandwidth)
        if self.capacity is not None:
            require_positive("capacity", self.capacity)
        if self.cache_bytes is not None:
            require_nonnegative("cache_bytes", self.cache_bytes)
        if self.capacity_marketing_gb is not None:
            require_positive("capacity_marketing_gb", self.capacity_marketing_gb)
        if not isinstance(self.interconnects, Mapping) or not all(
                isinstance(k, str) and isinstance(v, Interconnect) for k, v in self.interconnects.items()):
            raise TypeError("interconnects must be a dict of name -> Interconnect, e.g. {'pcie': Interconnect(...)}")
        for field_name in ("memory_type", "display", "source", "capacity_source", "effective_basis"):
            if not isinstance(getattr(self, field_name), str):
                raise TypeError(f"{field_name} must be a string, got {type(getattr(self, field_name)).__name__}")
        for field_name in ("peak_flops", "accumulate", "sparse_flops", "measured", "effective_flops"):
            value = getattr(self, field_name)
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise TypeError(f"{field_name} must be a dict with string keys (dtype names such as 'fp16'), "
                                f"got {type(value).__name__}")
        for field_name in ("peak_flops", "sparse_flops", "effective_flops"):
            for k, v in getattr(self, field_name).items():
                require_positive(f"{field_name}[{k!r}]", v)

    @property
    def scale_up(self) -> Interconnect | None:
        """The GPU-to-GPU link (NVLink or Infinity Fabric), or None (PCIe only)."""
        for key in ("nvlink", "infinity_fabric"):
            if key in self.interconnects:
                return self.interconnects[key]
        return None

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

    def compute_rate(self, dtype: str = "fp16") -> float:
        """FLOP/s the estimator prices ``dtype`` work at: the datasheet's dense peak (:meth:`flops`) where one is
        published, else the catalog's *effective* rate (``effective_flops``, derived from a sourced measurement and
        marked so in ``effective_basis``: Apple GPUs, DGX Spark's fp16); a clear error when neither exists."""
        if isinstance(dtype, str) and dtype not in self.peak_flops and dtype in self.effective_flops:
            return self.effective_flops[dtype]
        return self.flops(dtype)

    def rate_is_effective(self, dtype: str = "fp16") -> bool:
        """True when :meth:`compute_rate` returns a measured effective rate rather than a datasheet peak."""
        return dtype not in self.peak_flops and dtype in self.effective_flops

    def ridge_point(self, dtype: str = "fp16") -> float:
        """FLOP per byte at which a kernel turns compute-bound on this device (at :meth:`compute_rate`: an
        effective rate where no datasheet peak is published)."""
        from course_lib.core.numeric import raw as g
        return g.ridge_point(self.compute_rate(dtype), self.bandwidth)

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


def _gbps(value):
    return None if value is None else value * 1e9


def _interconnect(e: Mapping) -> Interconnect:
    return Interconnect(name=e["name"], bidirectional_bandwidth=e["bidirectional_GBps"] * 1e9,
                        per_direction_bandwidth=e["per_direction_GBps"] * 1e9, links=e.get("links"),
                        per_link_bidirectional_bandwidth=_gbps(e.get("per_link_bidirectional_GBps")),
                        topology=e.get("topology", ""),
                        achieved_per_direction=_gbps(e.get("achieved_per_direction_GBps")),
                        achieved_source=e.get("achieved_source", ""), source=e["source"])


@lru_cache(maxsize=None)
def _build(key: str) -> HardwareSpec:
    e = _catalog()[key]
    cache = e.get("cache_MB")
    return HardwareSpec(
        name=key, display=e["display"], bandwidth=e["bandwidth_GBps"] * 1e9, capacity=float(e["capacity_bytes"]),
        capacity_marketing_gb=float(e["capacity_GB"]), capacity_source=e["capacity_source"],
        interconnects={k: _interconnect(v) for k, v in e.get("interconnects", {}).items()},
        memory_type=e["memory_type"], cache_bytes=None if cache is None else cache * 1e6,
        peak_flops={k: v * 1e12 for k, v in e["peak_TFLOPs"].items() if v is not None},
        accumulate=dict(e.get("accumulate", {})),
        sparse_flops={k: v * 1e12 for k, v in e.get("sparse_TFLOPs", {}).items() if v is not None},
        source=e["source"], measured=dict(e.get("measured", {})),
        effective_flops={k: v * 1e12 for k, v in e.get("effective_TFLOPs", {}).items() if k != "basis"},
        effective_basis=e.get("effective_TFLOPs", {}).get("basis", ""),
    )


def get_hardware(hardware) -> HardwareSpec:
    """A catalog device by name ('rtx-4090', 'a100-80gb', 'h100-sxm', 'h200', …); a spec passes through."""
    if isinstance(hardware, HardwareSpec):
        return hardware
    return _build(require_choice("hardware", hardware, _catalog()))


def list_hardware(every: bool = False) -> list[str]:
    """Catalog device names: the lessons' devices, or with ``every=True`` also those marked ``listed: false``
    (added with the published-measurement set; every one of them works with :func:`get_hardware`)."""
    if not isinstance(every, bool):
        raise TypeError(f"every must be True or False, got {type(every).__name__}")
    return [k for k, e in _catalog().items() if every or e.get("listed", True)]
