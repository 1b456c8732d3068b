"""Numeric formats and how many bytes one element occupies.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09

Weights and the KV cache may use different precisions, so every function that needs a size takes
the precision as its own argument. Block-quantised formats store a scale per block, so their cost
per weight is fractional: llama.cpp's ``q4_0`` packs 32 four-bit weights with one fp16 scale,
(32 * 4 + 16) / 32 = 4.5 bits per weight.

Where the cost is structural (fixed blocks: GPTQ/AWQ groups, llama.cpp's q4_0/q4_K, OCP MXFP4, NVFP4)
:class:`Precision` records the block (``block``, ``element_bits``, ``scale_bits``, ``zero_bits``) and its
``bits`` are computed from it; llama.cpp's ``q4_k_m`` mixes block types tensor by tensor, so its bits
per weight is the measured average llama.cpp itself reports, with its model named. ``compute_dtype``
names the tensor-core rate a format computes at when the device publishes one (``HardwareSpec.flops``):
``w8a8`` (int8 weights *and* activations) runs at the int8 rate, MXFP4/NVFP4 at the fp4 rate, while
weight-only formats (``int4-g128``, ``q4_0``...) dequantise to fp16. ``source`` cites each definition.
"""
from __future__ import annotations

from dataclasses import dataclass

from course_lib.core.validation import require_choice, require_count, require_positive

__all__ = ["Precision", "PRECISIONS", "bytes_per_element", "get_precision", "FLOAT_KV_FORMATS", "default_kv_precision",
           "block_format", "WEIGHT_GROUPS", "Layout", "LAYOUTS", "get_layout"]


@dataclass(frozen=True)
class Precision:
    name: str
    bits: float
    description: str
    source: str = ""
    compute_dtype: str = "fp16"          # the tensor-core rate it computes at (HardwareSpec.flops key)
    block: int | None = None             # elements sharing one scale (block formats)
    element_bits: int | None = None      # bits of each element
    scale_bits: int = 0                  # bits of the block's scale (+ any super-block share)
    zero_bits: int = 0                   # bits of the block's zero point / minimum

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {type(self.name).__name__}")
        require_positive("bits", self.bits, minimum=1, maximum=64)
        for f in ("description", "source", "compute_dtype"):
            if not isinstance(getattr(self, f), str):
                raise TypeError(f"{f} must be a string, got {type(getattr(self, f)).__name__}")
        if self.block is not None:
            require_count("block", self.block, minimum=1)
            if self.element_bits is None:
                raise ValueError(f"block ({self.block!r}) needs element_bits: a block format gives both")
        if self.block is not None or self.element_bits is not None:
            require_count("element_bits", self.element_bits, minimum=1, maximum=64)
        require_count("scale_bits", self.scale_bits)
        require_count("zero_bits", self.zero_bits)

    @property
    def bytes(self) -> float:
        """Bytes per element (may be fractional for block formats)."""
        return self.bits / 8


def _block(bits_per_weight: int, block: int, scale_bits: int, min_bits: int = 0) -> float:
    return (block * bits_per_weight + scale_bits + min_bits) / block


def block_format(name: str, element_bits: int, block: int, scale_bits: int, zero_bits: int = 0,
                 description: str = "", source: str = "", compute_dtype: str = "fp16") -> Precision:
    """A block format: ``block`` elements of ``element_bits`` bits share one ``scale_bits`` scale (and a
    ``zero_bits`` zero point or minimum), so one element costs (block·element_bits + scale_bits + zero_bits) / block
    bits: ``block_format("int4-g128", 4, 128, 16).bits == 4.125``."""
    element_bits = require_count("element_bits", element_bits, minimum=1, maximum=64)
    block = require_count("block", block, minimum=1)
    scale_bits, zero_bits = require_count("scale_bits", scale_bits), require_count("zero_bits", zero_bits)
    bits = _block(element_bits, block, scale_bits, zero_bits)
    if bits > 64:
        raise ValueError(f"element_bits + (scale_bits + zero_bits) / block must be at most 64 bits per element, got "
                         f"{element_bits} + ({scale_bits} + {zero_bits}) / {block} = {bits:g}")
    return Precision(name, bits, description, source=source,
                     compute_dtype=compute_dtype, block=block, element_bits=element_bits, scale_bits=scale_bits,
                     zero_bits=zero_bits)


_LLAMA_CPP = "llama.cpp ggml/src/ggml-common.h (block_q4_0, block_q4_1, block_q8_0, block_q4_K, block_q6_K)"
_GPTQ = ("GPTQ (Frantar et al., arXiv 2210.17323) and AWQ (Lin et al., arXiv 2306.00978) as packed by "
         "AutoGPTQ/AutoAWQ: int4 weights, one fp16 scale per group of 128 (group_size 128), asymmetric: a 4-bit "
         "zero point per group packed in qzeros")
_MX = ("OCP Microscaling Formats (MX) Specification v1.0 (2023): MXFP4 = blocks of 32 FP4 (E2M1) elements sharing one "
       "E8M0 8-bit scale")
_NVFP4 = ("NVIDIA, 'Introducing NVFP4 for efficient and accurate low-precision inference' (NVIDIA technical "
          "blog, 2025) and the Blackwell architecture technical brief: blocks of 16 FP4 (E2M1) elements sharing one "
          "FP8 E4M3 scale, plus one fp32 scale per tensor (negligible)")

PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in [
        Precision("fp32", 32, "IEEE 754 single precision", source="IEEE 754-2019", compute_dtype="fp32"),
        Precision("tf32", 32, "stored as fp32; TF32 only changes the tensor-core arithmetic, not the bytes",
                  source="NVIDIA A100 architecture whitepaper (TF32)", compute_dtype="tf32"),
        Precision("fp16", 16, "IEEE 754 half precision", source="IEEE 754-2019"),
        Precision("bf16", 16, "bfloat16: fp32's 8-bit exponent with 7 explicit mantissa bits (8 bits of precision)",
                  source="Google, bfloat16 (Cloud TPU documentation); Intel BF16 specification", compute_dtype="bf16"),
        Precision("fp8", 8, "8-bit float (e4m3 or e5m2); per-tensor scales are negligible",
                  source="Micikevicius et al., 'FP8 formats for deep learning' (arXiv 2209.05433)",
                  compute_dtype="fp8"),
        Precision("int8", 8, "8-bit integer weights (weight-only: dequantised to fp16); per-channel scales are "
                  "negligible", source="LLM.int8() (Dettmers et al., arXiv 2208.07339)"),
        Precision("w8a8", 8, "int8 weights and int8 activations (SmoothQuant-style W8A8): the matrix products run at "
                  "the int8 tensor-core rate; per-channel/per-token scales are negligible",
                  source="SmoothQuant (Xiao et al., arXiv 2211.10438)", compute_dtype="int8"),
        Precision("int4", 4, "4-bit integer weights, scales not counted (an idealisation: see int4-g128)",
                  source="the bare element width; real formats add a scale per group"),
        block_format("int4-g128", 4, 128, 16, description="GPTQ/AWQ int4, symmetric: groups of 128 weights share one "
                     "fp16 scale: (128 x 4 + 16) / 128 = 4.125 bits/weight", source=_GPTQ),
        block_format("int4-g128-asym", 4, 128, 16, 4, description="GPTQ/AWQ int4, asymmetric: groups of 128 weights "
                     "share one fp16 scale and one 4-bit zero point: (128 x 4 + 16 + 4) / 128 = 4.15625 bits/weight",
                     source=_GPTQ),
        block_format("q8_0", 8, 32, 16, description="llama.cpp: blocks of 32 int8 weights + one fp16 scale = "
                     "8.5 bits/weight", source=_LLAMA_CPP),
        block_format("q4_0", 4, 32, 16, description="llama.cpp: blocks of 32 4-bit weights + one fp16 scale = "
                     "4.5 bits/weight", source=_LLAMA_CPP),
        block_format("q4_1", 4, 32, 16, 16, description="llama.cpp: blocks of 32 4-bit weights + fp16 scale and "
                     "min = 5 bits/weight", source=_LLAMA_CPP),
        # q4_K: a 256-weight super-block of 8 sub-blocks of 32; each sub-block a 6-bit scale and a 6-bit min, the
        # super-block an fp16 scale and an fp16 min: per 32 weights, 6 + 2·16/8 = 10 scale bits and 6 min bits
        block_format("q4_k", 4, 32, 6 + 2 * 16 // 8, 6, description="llama.cpp k-quant: super-blocks of 256 4-bit "
                     "weights in 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min, plus an fp16 scale and "
                     "min per super-block: (256 x 4 + 8 x 12 + 32) / 256 = 4.5 bits/weight", source=_LLAMA_CPP),
        # q6_K: 16 sub-blocks of 16 six-bit weights with an 8-bit scale each, plus one fp16 scale per 256 weights
        block_format("q6_k", 6, 16, 8 + 16 // 16, description="llama.cpp k-quant: super-blocks of 256 6-bit weights "
                     "in 16 sub-blocks of 16 with an 8-bit scale each, plus one fp16 scale: (256 x 6 + 16 x 8 + 16) "
                     "/ 256 = 6.5625 bits/weight", source=_LLAMA_CPP),
        Precision("q4_k_m", 4.84, "llama.cpp Q4_K_M: a mix, tensor by tensor: q4_K for most weights, q6_K for half "
                  "of attn_v and ffn_down and for the output matrix; on average 4.84 bits/weight for Llama-2-7B "
                  "(the average depends on the model's shapes)",
                  source="llama.cpp examples/quantize/README.md (2024, before the file moved to tools/quantize/), "
                  "section 'Quantization', table 'Llama 2 7B' (Quantization | Bits per Weight (BPW)): Q4_K_M 4.84 "
                  "(Q4_K_S 4.58, Q6_K 6.56); today's tools/quantize/README.md tabulates Llama-3.1-8B instead "
                  "(Q4_K_M 4.8944 bits/weight)"),
        block_format("mxfp4", 4, 32, 8, description="OCP MXFP4: blocks of 32 FP4 (E2M1) elements + one E8M0 8-bit "
                     "scale: (32 x 4 + 8) / 32 = 4.25 bits/weight", source=_MX, compute_dtype="fp4"),
        block_format("nvfp4", 4, 16, 8, description="NVIDIA NVFP4: blocks of 16 FP4 (E2M1) elements + one FP8 E4M3 "
                     "scale: (16 x 4 + 8) / 16 = 4.5 bits/weight (the per-tensor fp32 scale is negligible)",
                     source=_NVFP4, compute_dtype="fp4"),
    ]
}
# Common aliases people type.
_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "f16": "fp16",
            "f32": "fp32", "e4m3": "fp8", "fp8_e4m3": "fp8", "e5m2": "fp8", "8bit": "int8", "4bit": "int4",
            "gptq": "int4-g128-asym", "awq": "int4-g128-asym", "mx-fp4": "mxfp4",
            "nv-fp4": "nvfp4", "int8-w8a8": "w8a8"}


def get_precision(name, *, argument: str = "precision") -> Precision:
    """Look up a precision by name (case-insensitive; common aliases such as 'float16' accepted).

    ``argument`` is the name a bad value is reported under (``kv_precision``, ``activation_precision``)."""
    if isinstance(name, Precision):
        return name
    if isinstance(name, str) and name.strip().lower() in _ALIASES:
        name = _ALIASES[name.strip().lower()]
    key = require_choice(argument, name, PRECISIONS)
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
        return get_precision(kv_precision, argument="kv_precision").name
    w = get_precision(precision).name
    return w if w in FLOAT_KV_FORMATS else "fp16"


# --- per-tensor-group precision: a layout gives each group of weights (and the KV cache) its own format --------
#: the groups of weights a layout names (attention: Q/K/V/O projections; mlp: dense MLPs, shared experts, routers and
#: norms; experts: the routed experts of a mixture of experts; embedding: the token table; lm_head: the output matrix)
WEIGHT_GROUPS: tuple[str, ...] = ("attention", "mlp", "experts", "embedding", "lm_head")


@dataclass(frozen=True)
class Layout:
    """Formats per group of weights (``formats``: group -> precision name) and the KV cache's (``kv``, or None for
    the weights' default). A plain format is the layout with every group in it. ``models``: the catalog models the
    layout is published for (empty: any)."""

    name: str
    formats: tuple[tuple[str, str], ...]
    kv: str | None = None
    description: str = ""
    source: str = ""
    models: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {type(self.name).__name__}")
        for f in ("description", "source"):
            if not isinstance(getattr(self, f), str):
                raise TypeError(f"{f} must be a string, got {type(getattr(self, f)).__name__}")
        if not isinstance(self.models, tuple) or not all(isinstance(m, str) for m in self.models):
            raise TypeError("models must be a tuple of catalog model names")
        if not isinstance(self.formats, tuple) or not all(
                isinstance(x, tuple) and len(x) == 2 and all(isinstance(y, str) for y in x) for x in self.formats):
            raise TypeError("formats must be a tuple of (group, format) pairs of strings, e.g. (('attention', "
                            "'bf16'), ...)")
        groups = [g_ for g_, _ in self.formats]
        if sorted(groups) != sorted(WEIGHT_GROUPS):
            raise ValueError(f"precision: a layout's formats name every group of {WEIGHT_GROUPS} once, got {groups}")
        for grp, f in self.formats:
            get_precision(f, argument=f"precision (formats, group {grp!r})")
        if self.kv is not None:
            get_precision(self.kv, argument="kv (the KV cache's precision)")

    def format(self, group: str) -> Precision:
        """The :class:`Precision` of ``group`` (one of :data:`WEIGHT_GROUPS`)."""
        group = require_choice("group", group, WEIGHT_GROUPS)
        return get_precision(dict(self.formats)[group])

    def bytes(self, group: str) -> float:
        return self.format(group).bytes

    @property
    def uniform(self) -> bool:
        return len({get_precision(f).name for _, f in self.formats}) == 1

    @property
    def kv_precision(self) -> str:
        """The KV cache's format: the layout's own, else the default for its dense weights' format."""
        return get_precision(self.kv).name if self.kv is not None else default_kv_precision(self.format("mlp").name)

    @property
    def compute_format(self) -> str:
        """The format the matrix products compute in: the dense weights' (the 'mlp' group's)."""
        return self.format("mlp").name


def _layout(name, kv=None, description="", source="", models=(), **formats) -> Layout:
    return Layout(name, tuple((g_, formats[g_]) for g_ in WEIGHT_GROUPS), kv, description, source, tuple(models))


_GPT_OSS = ("OpenAI gpt-oss model card (arXiv 2508.10925, 'Quantization') and the checkpoints' config.json "
            "quantization_config: quant_method mxfp4 with modules_to_not_convert = the attention (self_attn), the "
            "routers, embed_tokens and lm_head, which stay BF16")
_LLAMA_CPP_OUT = ("llama.cpp src/llama-quant.cpp (llama_tensor_get_type): the output matrix -- or the token embedding "
                  "when the model ties them and has no separate output -- is quantised to Q6_K in Q4_0/Q4_K files")
LAYOUTS: dict[str, Layout] = {lay.name: lay for lay in [
    _layout("gpt-oss-mxfp4", attention="bf16", mlp="bf16", experts="mxfp4", embedding="bf16", lm_head="bf16",
            kv="bf16", description="gpt-oss as published: MXFP4 routed experts, everything else BF16",
            source=_GPT_OSS, models=("gpt-oss-20b", "gpt-oss-120b")),
    _layout("gguf-gpt-oss-mxfp4", attention="q8_0", mlp="q8_0", experts="mxfp4", embedding="q8_0", lm_head="q8_0",
            kv="fp16", description="gpt-oss's GGUF (ggml-org): MXFP4 experts kept, the BF16 tensors as Q8_0",
            source="ggml-org/gpt-oss-20b-GGUF and gpt-oss-120b-GGUF model cards (MXFP4 experts, other tensors "
                   "Q8_0)", models=("gpt-oss-20b", "gpt-oss-120b")),
    _layout("gguf-q4_0", attention="q4_0", mlp="q4_0", experts="q4_0", embedding="q4_0", lm_head="q6_k",
            description="a llama.cpp Q4_0 file: Q4_0 weights, the output matrix (or a tied embedding) in Q6_K",
            source=_LLAMA_CPP_OUT),
    _layout("gguf-q4_k_m", attention="q4_k_m", mlp="q4_k_m", experts="q4_k_m", embedding="q4_k", lm_head="q6_k",
            description="a llama.cpp Q4_K_M file: the Q4_K/Q6_K mix of its blocks (the 4.84 bits/weight average), "
                        "the token embedding in Q4_K, the output matrix (or a tied embedding) in Q6_K",
            source=_LLAMA_CPP_OUT + "; block average as for q4_k_m"),
]}


def get_layout(precision) -> Layout:
    """The :class:`Layout` for ``precision``: a layout name (:data:`LAYOUTS`), a dict {group: format} (every group
    of :data:`WEIGHT_GROUPS` not named takes ``'default'``'s format, fp16 if absent), a Layout, or a plain format
    (every group in it)."""
    if isinstance(precision, Layout):
        return precision
    if isinstance(precision, dict):
        unknown = sorted(set(precision) - set(WEIGHT_GROUPS) - {"default", "kv"})
        if unknown:
            raise ValueError(f"precision: a layout's groups are {WEIGHT_GROUPS} (plus 'default' and 'kv'), got "
                             f"{unknown}")
        base = precision.get("default", "fp16")
        fm = {g_: precision.get(g_, base) for g_ in WEIGHT_GROUPS}
        name = "+".join(f"{g_}:{get_precision(f).name}" for g_, f in fm.items())
        return _layout(name, kv=precision.get("kv"), **fm)
    if isinstance(precision, str) and precision.strip().lower() in LAYOUTS:
        return LAYOUTS[precision.strip().lower()]
    p = get_precision(precision)
    return _layout(p.name, **dict.fromkeys(WEIGHT_GROUPS, p.name))
