"""Read a weight file's header -- GGUF or safetensors -- and name the precision layout it ships.

Lessons: none

A catalog entry names the layout a model is published in (``published_layout``: gpt-oss's MXFP4 experts beside BF16
attention, a llama.cpp Q4 file's Q6_K output matrix). :func:`read_weight_file` reads the layout from a file you have
instead: only its header (tensor names, types, shapes), never the weights, so it is quick on a file of any size and
needs no third-party package.

- **GGUF** (llama.cpp): magic ``GGUF``, version, tensor and metadata counts, the metadata key/value pairs, then one
  entry per tensor (name, dimensions, ggml type, offset), all little-endian (ggml's ``docs/gguf.md``). A ggml type's
  bytes come from its block (``GGML_BLOCKS``: elements per block and bytes per block, as ggml's type traits give
  them), so a tensor's bytes are exact.
- **safetensors** (Hugging Face): an 8-byte little-endian header length, then a JSON header with each tensor's dtype,
  shape and byte range (``data_offsets``), which give its bytes exactly. FP8 checkpoints keep their scales in
  ``*_scale`` / ``*_scale_inv`` tensors and MXFP4 ones pack each weight matrix into ``*_blocks`` (two 4-bit values per
  byte) and ``*_scales`` (one E8M0 scale per 32 values): the scales count as their matrix's bytes, not its elements.

Tensors are sorted into the estimator's weight groups (:data:`~course_lib.core.precision.WEIGHT_GROUPS`) by name;
norms, biases and other one-dimensional tensors go to ``other`` (a step reads them, but they are a rounding error in
its bytes). :meth:`WeightFile.layout` turns the groups into a :class:`~course_lib.core.precision.Layout` for
``estimate(..., precision=...)``: a group whose tensors share one type gets that type's catalog format (exact); a group
that mixes types (a Q4_K_M file's ``ffn_down`` and ``attn_v`` in Q6_K beside Q4_K) gets the catalog format whose bits
per weight are nearest to the group's own, and :meth:`WeightFile.bits` and the layout's description give the exact
figure beside it. A model that ties its output matrix to the embedding has no output tensor: its ``lm_head`` takes the
embedding's format.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from course_lib.core.precision import PRECISIONS, WEIGHT_GROUPS, Layout

__all__ = ["GGML_TYPES", "GGML_BLOCKS", "GGML_FORMATS", "SAFETENSORS_FORMATS", "WeightFile", "read_weight_file",
           "tensor_group", "describe", "main"]

#: ggml's type ids (ggml/include/ggml.h, enum ggml_type) -> names
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
              11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
              19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
              27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}
#: (elements per block, bytes per block) of each ggml type (ggml's type traits: blck_size and type_size)
GGML_BLOCKS = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "F64": (1, 8), "I8": (1, 1), "I16": (1, 2),
               "I32": (1, 4), "I64": (1, 8), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
               "Q8_0": (32, 34), "Q8_1": (32, 36), "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144),
               "Q5_K": (256, 176), "Q6_K": (256, 210), "Q8_K": (256, 292), "IQ2_XXS": (256, 66),
               "IQ2_XS": (256, 74), "IQ3_XXS": (256, 98), "IQ1_S": (256, 50), "IQ4_NL": (32, 18),
               "IQ3_S": (256, 110), "IQ2_S": (256, 82), "IQ4_XS": (256, 136), "IQ1_M": (256, 56),
               "TQ1_0": (256, 54), "TQ2_0": (256, 66), "MXFP4": (32, 17)}
#: the catalog format of each ggml type whose bytes it prices exactly (others: the nearest, flagged)
GGML_FORMATS = {"F32": "fp32", "F16": "fp16", "BF16": "bf16", "Q4_0": "q4_0", "Q4_1": "q4_1", "Q8_0": "q8_0",
                "Q4_K": "q4_k", "Q6_K": "q6_k", "MXFP4": "mxfp4"}
#: the catalog format of each safetensors dtype (FP8 and packed MXFP4 checkpoints: see the module's docstring)
SAFETENSORS_FORMATS = {"F32": "fp32", "F16": "fp16", "BF16": "bf16", "F8_E4M3": "fp8", "F8_E5M2": "fp8",
                       "I8": "int8", "MXFP4": "mxfp4"}
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
             "I8": 1, "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                 12: "<d"}
_MAX_HEADER = 1 << 30      # a header bigger than this is not a weight file's
#: safetensors names of a matrix's scales: FP8's weight_scale / weight_scale_inv, MXFP4's <matrix>_scales
_SCALE_SUFFIXES = ("_scale_inv", "_scales", "_scale")


def tensor_group(name: str) -> str:
    """The weight group of a tensor named ``name`` (GGUF's ``blk.0.attn_q.weight`` or Hugging Face's
    ``model.layers.0.self_attn.q_proj.weight``): one of WEIGHT_GROUPS, else 'other' (norms, routers' biases...)."""
    n = name.lower()
    if "norm" in n or n.endswith(".bias") or "rotary" in n or n.endswith("_bias"):
        return "other"
    if n.startswith(("token_embd", "tok_embeddings")) or "embed_tokens" in n or n.endswith("wte.weight"):
        return "embedding"
    if n.startswith("output.") or n.startswith("lm_head") or ".lm_head." in n:
        return "lm_head"
    if "_exps" in n or ".experts." in n:
        return "experts"
    if "attn" in n or "attention" in n:
        return "attention"
    if "ffn" in n or ".mlp." in n or "feed_forward" in n:
        return "mlp"
    return "other"


@dataclass(frozen=True)
class WeightFile:
    """A weight file's tensors as its header lists them: (name, type, elements, bytes) each; ``kind`` is 'gguf' or
    'safetensors' and ``metadata`` the header's key/value pairs (GGUF's, or safetensors' ``__metadata__``)."""

    path: str
    kind: str
    tensors: tuple[tuple[str, str, int, int], ...]
    metadata: dict = field(default_factory=dict, compare=False)

    @cached_property
    def _by_group(self) -> dict:
        """{group: its own tensors}, sorted once (a big checkpoint has tens of thousands of tensors)."""
        out: dict = {}
        for t in self.tensors:
            out.setdefault(tensor_group(t[0]), []).append(t)
        return out

    def group_tensors(self, group: str) -> list[tuple[str, str, int, int]]:
        """The tensors of one weight group (or 'other'); a tied ``lm_head`` is the embedding's."""
        own = self._by_group.get(group, [])
        if group == "lm_head" and not own:
            return self.group_tensors("embedding")
        return own

    def bits(self, group: str) -> float:
        """Bits per weight of ``group`` in this file (its bytes x 8 / its elements); nan for an empty group."""
        ts = self.group_tensors(group)
        n = sum(t[2] for t in ts)
        return 8 * sum(t[3] for t in ts) / n if n else math.nan

    @property
    def weight_bytes(self) -> int:
        """Every tensor's bytes: what the file holds besides its header."""
        return sum(t[3] for t in self.tensors)

    def _format(self, group: str) -> tuple[str, bool]:
        ts = self.group_tensors(group)
        table = GGML_FORMATS if self.kind == "gguf" else SAFETENSORS_FORMATS
        types = {t[1] for t in ts}
        if len(types) == 1 and next(iter(types)) in table:
            return table[next(iter(types))], True
        bits = self.bits(group)
        if math.isnan(bits):
            raise ValueError(f"path: {Path(self.path).name} has no tensor of the {group!r} group "
                             f"(names seen: {', '.join(t[0] for t in self.tensors[:4])}...)")
        near = min((p for p in PRECISIONS.values() if p.name not in ("tf32", "w8a8")),
                   key=lambda p: (abs(p.bits - bits), p.name))
        return near.name, False

    def layout(self, name: str | None = None) -> Layout:
        """The file's :class:`Layout` (module docstring): exact where a group has one type, the nearest catalog
        format otherwise (its description gives each group's own bits per weight and types). A group the file lacks
        has no weights to price and takes a neighbour's format: ``experts`` the ``mlp``'s (a dense model), ``mlp``
        the attention's (a model whose every MLP is routed experts), ``embedding`` and ``lm_head`` each other's."""
        formats, notes = {}, []
        stand_in = {"experts": "mlp", "mlp": "attention", "embedding": "lm_head", "lm_head": "embedding"}
        for grp in ("attention", "mlp", "experts", "embedding", "lm_head"):
            if self.group_tensors(grp):
                fmt, exact = self._format(grp)
                kinds = sorted({t[1] for t in self.group_tensors(grp)})
                notes.append(f"{grp}: {'/'.join(kinds)}, {self.bits(grp):.3f} bits/weight"
                             + ("" if exact else f" (priced as {fmt}, {PRECISIONS[fmt].bits:g})"))
            elif grp in stand_in and (stand_in[grp] in formats or self.group_tensors(stand_in[grp])):
                fmt = formats.get(stand_in[grp]) or self._format(stand_in[grp])[0]
            else:
                raise ValueError(f"path: {Path(self.path).name} has no tensor of the {grp!r} group"
                                 + (f" nor of {stand_in[grp]!r}" if grp in stand_in else "")
                                 + ": not a transformer's weights, or tensor names this reader does not know")
            formats[grp] = fmt
        return Layout(name or Path(self.path).name, tuple((g_, formats[g_]) for g_ in WEIGHT_GROUPS),
                      description="read from the file's header: " + "; ".join(notes),
                      source=f"{self.kind} header of {self.path}")


def _gguf_string(f) -> str:
    (n,) = struct.unpack("<Q", _read(f, 8))
    if n > _MAX_HEADER:
        raise ValueError("path: a GGUF string longer than the file can hold: not a GGUF file, or a damaged one")
    return _read(f, n).decode("utf-8", errors="replace")


def _read(f, n: int) -> bytes:
    b = f.read(n)
    if len(b) != n:
        raise ValueError(f"path: the header ends early ({f.name}): a truncated or damaged weight file")
    return b


def _gguf_value(f, vtype: int):
    if vtype in _GGUF_SCALARS:
        fmt = _GGUF_SCALARS[vtype]
        return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    if vtype == 8:
        return _gguf_string(f)
    if vtype == 9:
        (itype,) = struct.unpack("<I", _read(f, 4))
        (count,) = struct.unpack("<Q", _read(f, 8))
        if count > _MAX_HEADER:
            raise ValueError("path: a GGUF array longer than the file can hold: a damaged file")
        return [_gguf_value(f, itype) for _ in range(count)]
    raise ValueError(f"path: unknown GGUF metadata type {vtype}: a damaged file, or a GGUF version this reader "
                     "does not know")


def _read_gguf(path: Path) -> WeightFile:
    with path.open("rb") as f:
        _read(f, 4)
        (version,) = struct.unpack("<I", _read(f, 4))
        if version not in (2, 3):
            raise ValueError(f"path: GGUF version {version}; this reader knows versions 2 and 3")
        n_tensors, n_kv = struct.unpack("<QQ", _read(f, 16))
        if n_tensors > 1_000_000 or n_kv > 1_000_000:
            raise ValueError("path: implausible GGUF tensor or metadata counts: a damaged file")
        meta = {}
        for _ in range(n_kv):
            key = _gguf_string(f)
            (vtype,) = struct.unpack("<I", _read(f, 4))
            meta[key] = _gguf_value(f, vtype)
        tensors = []
        for _ in range(n_tensors):
            name = _gguf_string(f)
            (ndim,) = struct.unpack("<I", _read(f, 4))
            dims = struct.unpack(f"<{ndim}Q", _read(f, 8 * ndim))
            ttype, _offset = struct.unpack("<IQ", _read(f, 12))
            tname = GGML_TYPES.get(ttype)
            if tname is None or tname not in GGML_BLOCKS:
                raise ValueError(f"path: tensor {name!r} has ggml type {ttype}, which this reader does not know")
            n = math.prod(dims)
            per, size = GGML_BLOCKS[tname]
            tensors.append((name, tname, n, n // per * size))
    return WeightFile(str(path), "gguf", tuple(tensors), meta)


def _read_safetensors(path: Path) -> WeightFile:
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", _read(f, 8))
        if not 2 <= n <= _MAX_HEADER:
            raise ValueError(f"path: {path.name} is neither a GGUF file nor a safetensors file (no header found)")
        try:
            header = json.loads(_read(f, n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"path: {path.name}'s safetensors header is not valid JSON: a damaged file") from None
    if not isinstance(header, dict):
        raise ValueError(f"path: {path.name}'s safetensors header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    raw = {}
    for name, t in header.items():
        if not isinstance(t, dict) or not {"dtype", "shape", "data_offsets"} <= set(t):
            raise ValueError(f"path: tensor {name!r} lacks dtype, shape or data_offsets in the header")
        a, b = t["data_offsets"]
        raw[name] = (str(t["dtype"]), math.prod(t["shape"]), int(b) - int(a))
    scale_bytes: dict[str, int] = {}                     # a matrix's name -> the bytes of its scales
    for name, (_, _, size) in raw.items():
        for suffix in _SCALE_SUFFIXES:
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                scale_bytes[base] = scale_bytes.get(base, 0) + size
                break
    tensors = []
    for name, (dtype, n, size) in raw.items():
        if name.endswith(_SCALE_SUFFIXES) or name.endswith(".input_scale"):
            continue                                      # counted with their matrix
        base = name.removesuffix("_blocks")
        if name.endswith("_blocks") and dtype == "U8":
            dtype, n = "MXFP4", 2 * n                        # two 4-bit values per byte
        tensors.append((base, dtype, n, size + scale_bytes.get(base, 0)))
    return WeightFile(str(path), "safetensors", tuple(tensors), meta)


def read_weight_file(path) -> WeightFile:
    """Read the header of a GGUF or safetensors file at ``path`` (its tensors' names, types, elements and bytes;
    never the weights). One clear ValueError for a missing file, another format, or a damaged header."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a file path (str or pathlib.Path), got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path: no such file {str(path)!r}")
    with p.open("rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return _read_gguf(p)
    return _read_safetensors(p)


def describe(wf: WeightFile) -> str:
    """A table of ``wf``'s weight groups: tensors, types, elements, bytes, bits per weight and the catalog format
    :meth:`WeightFile.layout` prices each with (``python -m course_lib.core.weightfile PATH`` prints it)."""
    if not isinstance(wf, WeightFile):
        raise TypeError(f"wf must be a WeightFile (from read_weight_file(path)), got {type(wf).__name__}")
    lay = wf.layout()
    lines = [f"{wf.path} ({wf.kind}): {len(wf.tensors)} tensors, {wf.weight_bytes / 1e9:.3f} GB of weights", "",
             f"{'group':<10}{'tensors':>8}  {'types':<16}{'elements':>16}{'GB':>10}{'bits/w':>8}   priced as"]
    for grp in (*WEIGHT_GROUPS, "other"):
        own = wf._by_group.get(grp, [])
        if not own:
            if grp == "lm_head" and wf.group_tensors("lm_head"):
                lines.append(f"{grp:<10}{'tied':>8}  {'(the embedding)':<16}{'':>16}{'':>10}{'':>8}   "
                             f"{lay.format(grp).name}")
            continue
        n, b = sum(t[2] for t in own), sum(t[3] for t in own)
        kinds = "/".join(sorted({t[1] for t in own}))
        priced = lay.format(grp).name if grp != "other" else "(norms, biases: not priced)"
        lines.append(f"{grp:<10}{len(own):>8}  {kinds:<16}{n:>16,}{b / 1e9:>10.3f}{8 * b / n:>8.3f}   {priced}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m course_lib.core.weightfile PATH [PATH ...]``: each file's groups and the layout to price it with."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m course_lib.core.weightfile",
                                 description="Read GGUF or safetensors headers (never the weights) and print the "
                                             "precision layout each file ships.")
    ap.add_argument("paths", nargs="+", help="GGUF or safetensors files")
    a = ap.parse_args(argv)
    for i, path in enumerate(a.paths):
        try:
            print(("\n" if i else "") + describe(read_weight_file(path)))
        except (ValueError, TypeError) as exc:
            print(f"{path}: {exc}")
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
