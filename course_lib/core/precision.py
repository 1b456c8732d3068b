"""Numeric formats and how many bytes one element occupies.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09

Weights and the KV cache may use different precisions, so every function that needs a size takes
the precision as its own argument. Block-quantised formats store a scale per block, so their cost
per weight is fractional: llama.cpp's ``q4_0`` packs 32 four-bit weights with one fp16 scale,
(32 * 4 + 16) / 32 = 4.5 bits per weight.
"""
from __future__ import annotations

from dataclasses import dataclass

from course_lib.core.validation import require_choice, require_positive

__all__ = ["Precision", "PRECISIONS", "bytes_per_element", "get_precision", "FLOAT_KV_FORMATS", "default_kv_precision"]


@dataclass(frozen=True)
class Precision:
    name: str
    bits: float
    description: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {type(self.name).__name__}")
        require_positive("bits", self.bits, minimum=1, maximum=64)
        if not isinstance(self.description, str):
            raise TypeError(f"description must be a string, got {type(self.description).__name__}")

    @property
    def bytes(self) -> float:
        """Bytes per element (may be fractional for block formats)."""
        return self.bits / 8


def _block(bits_per_weight: int, block: int, scale_bits: int, min_bits: int = 0) -> float:
    return (block * bits_per_weight + scale_bits + min_bits) / block


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in [
        Precision("fp32", 32, "IEEE 754 single precision"),
        Precision("tf32", 32, "stored as fp32; TF32 only changes the tensor-core arithmetic, not the bytes"),
        Precision("fp16", 16, "IEEE 754 half precision"),
        Precision("bf16", 16, "bfloat16: fp32's 8-bit exponent with 7 explicit mantissa bits (8 bits of precision)"),
        Precision("fp8", 8, "8-bit float (e4m3 or e5m2); per-tensor scales are negligible"),
        Precision("int8", 8, "8-bit integer weights; per-channel scales are negligible"),
        Precision("int4", 4, "4-bit integer weights, scales not counted"),
        Precision("q8_0", _block(8, 32, 16), "llama.cpp: blocks of 32 int8 weights + one fp16 scale = 8.5 bits/weight"),
        Precision("q4_0", _block(4, 32, 16),
                  "llama.cpp: blocks of 32 4-bit weights + one fp16 scale = 4.5 bits/weight"),
        Precision("q4_1", _block(4, 32, 16, 16),
                  "llama.cpp: blocks of 32 4-bit weights + fp16 scale and min = 5 bits/weight"),
    ]
}
# Common aliases people type.
_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "f16": "fp16",
            "f32": "fp32", "e4m3": "fp8", "fp8_e4m3": "fp8", "e5m2": "fp8", "8bit": "int8", "4bit": "int4"}


def get_precision(name) -> Precision:
    """Look up a precision by name (case-insensitive; common aliases such as 'float16' accepted)."""
    if isinstance(name, Precision):
        return name
    if isinstance(name, str) and name.strip().lower() in _ALIASES:
        name = _ALIASES[name.strip().lower()]
    key = require_choice("precision", name, PRECISIONS)
    return PRECISIONS[key]


def bytes_per_element(name) -> float:
    """Bytes one element occupies in precision ``name`` (e.g. 2 for fp16, 0.5625 for q4_0)."""
    return get_precision(name).bytes


#: Weight formats whose K/V are kept in the same format by default (others: fp16).
FLOAT_KV_FORMATS: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8")


def default_kv_precision(precision="fp16", kv_precision=None) -> str:
    """The KV cache's precision name: ``kv_precision`` if given, else the weights' ``precision`` when it is
    a float format (:data:`FLOAT_KV_FORMATS`), else fp16 (integer and block formats quantise weights only)."""
    if kv_precision is not None:
        return get_precision(kv_precision).name
    w = get_precision(precision).name
    return w if w in FLOAT_KV_FORMATS else "fp16"
