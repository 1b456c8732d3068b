"""Reading a weight file's layout from its header (issue 27's stretch goal): GGUF and safetensors headers written
here byte by byte (no weights, no download), read back through course_lib.core.weightfile's public names."""
import json
import math
import struct

import pytest

from course_lib import estimate
from course_lib.core.precision import LAYOUTS, PRECISIONS
from course_lib.core.weightfile import GGML_BLOCKS, read_weight_file, tensor_group

GGML_ID = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30, "MXFP4": 39}


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, tensors, meta=None):
    """A GGUF v3 header (metadata, then (name, dims, ggml type) per tensor) with no tensor data after it."""
    meta = meta or {"general.architecture": "llama", "llama.block_count": 1, "tokenizer.ggml.tokens": ["a", "b"]}
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for key, v in meta.items():
        out += _s(key)
        if isinstance(v, str):
            out += struct.pack("<I", 8) + _s(v)
        elif isinstance(v, int):
            out += struct.pack("<II", 4, v)
        else:
            out += struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_s(x) for x in v)
    offset = 0
    for name, dims, ttype in tensors:
        out += _s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", GGML_ID[ttype], offset)
        per, size = GGML_BLOCKS[ttype]
        offset += math.prod(dims) // per * size
    path.write_bytes(out)
    return path


def write_safetensors(path, tensors, meta=None):
    """A safetensors header ((name, dtype, shape, bytes) per tensor) with no tensor data after it."""
    header, at = {"__metadata__": meta or {"format": "pt"}}, 0
    for name, dtype, shape, size in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + size]}
        at += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


def _llama_block(t_embd, t_out, t_attn, t_v, t_mlp, t_down, h=4096, ff=11008, vocab=32000):
    ts = [("token_embd.weight", (h, vocab), t_embd), ("blk.0.attn_norm.weight", (h,), "F32")]
    ts += [(f"blk.0.attn_{x}.weight", (h, h), t_v if x == "v" else t_attn) for x in ("q", "k", "v", "output")]
    ts += [("blk.0.ffn_gate.weight", (h, ff), t_mlp), ("blk.0.ffn_up.weight", (h, ff), t_mlp),
           ("blk.0.ffn_down.weight", (ff, h), t_down)]
    return ts + ([("output.weight", (h, vocab), t_out)] if t_out else [])


def test_a_q4_0_file_reads_back_as_the_catalogs_gguf_q4_0_layout(tmp_path):
    wf = read_weight_file(write_gguf(tmp_path / "m.gguf", _llama_block("Q4_0", "Q6_K", "Q4_0", "Q4_0", "Q4_0",
                                                                        "Q4_0")))
    assert wf.kind == "gguf" and wf.metadata["llama.block_count"] == 1
    assert wf.metadata["tokenizer.ggml.tokens"] == ["a", "b"]
    assert dict(wf.layout().formats) == dict(LAYOUTS["gguf-q4_0"].formats)
    assert wf.bits("mlp") == 4.5 and wf.bits("lm_head") == 8 * 210 / 256
    q6 = next(t for t in wf.tensors if t[0] == "output.weight")
    assert q6[1:] == ("Q6_K", 4096 * 32000, 4096 * 32000 // 256 * 210)          # bytes from the type's block
    assert tensor_group("blk.0.attn_norm.weight") == "other" and wf.weight_bytes == sum(t[3] for t in wf.tensors)


def test_a_mixed_group_is_priced_at_the_nearest_format_and_says_so(tmp_path):
    # a Q4_K_M-style file: attn_v and ffn_down in Q6_K beside Q4_K, a tied output (no output.weight)
    wf = read_weight_file(write_gguf(tmp_path / "km.gguf", _llama_block("Q4_K", None, "Q4_K", "Q6_K", "Q4_K",
                                                                         "Q6_K")))
    lay = wf.layout("mine")
    mlp_bits = (2 * 4.5 + 6.5625) / 3                                    # three equal matrices, one in Q6_K
    assert wf.bits("mlp") == pytest.approx(mlp_bits)
    nearest = min(PRECISIONS.values(), key=lambda p: abs(p.bits - mlp_bits) if p.name not in ("tf32", "w8a8")
                  else math.inf)
    assert lay.format("mlp").name == nearest.name != "q4_k"
    assert f"mlp: Q4_K/Q6_K, {mlp_bits:.3f} bits/weight (priced as {nearest.name}" in lay.description
    assert lay.format("lm_head").name == lay.format("embedding").name == "q4_k"      # tied: the embedding's
    assert lay.format("experts") == lay.format("mlp") and lay.name == "mine"


def test_gpt_oss_safetensors_read_back_as_the_published_layout(tmp_path):
    # gpt-oss ships its experts as MXFP4 blocks (two values per byte) and scales (one byte per 32 values)
    h, e, ff = 2880, 32, 5760
    ts = [("model.embed_tokens.weight", "BF16", (201088, h), 201088 * h * 2),
          ("lm_head.weight", "BF16", (201088, h), 201088 * h * 2),
          ("model.layers.0.self_attn.q_proj.weight", "BF16", (4096, h), 4096 * h * 2),
          ("model.layers.0.self_attn.sinks", "BF16", (64,), 128),
          ("model.layers.0.mlp.router.weight", "BF16", (e, h), e * h * 2),
          ("model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", (e, 2 * ff, h // 32, 16), e * 2 * ff * h // 2),
          ("model.layers.0.mlp.experts.gate_up_proj_scales", "U8", (e, 2 * ff, h // 32), e * 2 * ff * h // 32),
          ("model.layers.0.input_layernorm.weight", "BF16", (h,), 2 * h)]
    wf = read_weight_file(write_safetensors(tmp_path / "model.safetensors", ts))
    assert wf.kind == "safetensors" and wf.bits("experts") == 4.25 and wf.bits("attention") == 16
    assert dict(wf.layout().formats) == dict(LAYOUTS["gpt-oss-mxfp4"].formats)
    # the estimator prices the file's layout as it prices the catalog's
    a, b = (estimate("gpt-oss-20b", "h100-sxm", 1, 2, precision=p).weights_bytes
            for p in (wf.layout(), "gpt-oss-mxfp4"))
    assert a == b


def test_fp8_scales_count_as_their_matrix_bytes(tmp_path):
    ts = [("model.embed_tokens.weight", "BF16", (1000, 64), 128000),
          ("model.layers.0.mlp.down_proj.weight", "F8_E4M3", (128, 256), 128 * 256),
          ("model.layers.0.mlp.down_proj.weight_scale_inv", "F32", (1, 2), 8),
          ("model.layers.0.self_attn.o_proj.weight", "F8_E4M3", (128, 128), 128 * 128)]
    wf = read_weight_file(write_safetensors(tmp_path / "fp8.safetensors", ts))
    assert [t[0] for t in wf.tensors if "scale" in t[0]] == []
    assert wf.bits("mlp") == pytest.approx(8 * (128 * 256 + 8) / (128 * 256))
    assert wf.layout().format("mlp").name == "fp8" and wf.layout().format("embedding").name == "bf16"


def test_the_gguf_packages_own_files_read_the_same(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the gguf package comes with the llamacpp extra (make llamacpp)")
    import numpy as np
    w = gguf.GGUFWriter(str(tmp_path / "w.gguf"), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float16))
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((64, 64), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    wf = read_weight_file(tmp_path / "w.gguf")
    assert [t[:3] for t in wf.tensors] == [("token_embd.weight", "F16", 512), ("blk.0.ffn_up.weight", "F32", 4096),
                                           ("blk.0.attn_q.weight", "F16", 4096)]
    assert wf.metadata["llama.block_count"] == 1
    assert dict(wf.layout().formats)["mlp"] == "fp32"


@pytest.mark.parametrize("content, match", [
    (b"GGUF" + struct.pack("<I", 1), "version 1"),
    (b"GGUF" + struct.pack("<IQQ", 3, 1, 0), "ends early"),
    (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + _s("t") + struct.pack("<I", 1) + struct.pack("<QIQ", 4, 99, 0),
     "ggml type 99"),
    (struct.pack("<Q", 11) + b"not json at", "not valid JSON"),
    (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    (b"\x00" * 3, "ends early"),
    (struct.pack("<Q", 1 << 40), "neither a GGUF file nor a safetensors file"),
])
def test_a_damaged_or_foreign_file_gets_one_clear_error(tmp_path, content, match):
    p = tmp_path / "bad.bin"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        read_weight_file(p)


def test_bad_paths_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="path: no such file"):
        read_weight_file(tmp_path / "missing.gguf")
    with pytest.raises(TypeError, match="path must be a file path"):
        read_weight_file(42)
    norms = read_weight_file(write_gguf(tmp_path / "n.gguf", [("blk.0.attn_norm.weight", (64,), "F32")]))
    with pytest.raises(ValueError, match="no tensor of the 'attention' group"):
        norms.layout()


def test_the_command_prints_each_group_and_its_priced_format(tmp_path, capsys):
    from course_lib.core.weightfile import describe, main
    path = write_gguf(tmp_path / "km.gguf", _llama_block("Q4_K", None, "Q4_K", "Q6_K", "Q4_K", "Q6_K"))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    wf = read_weight_file(path)
    assert out.strip() == describe(wf)
    rows = {line.split()[0]: line for line in out.splitlines()[3:]}
    assert set(rows) == {"attention", "mlp", "embedding", "lm_head", "other"}
    assert "tied" in rows["lm_head"] and rows["mlp"].split()[-1] == wf.layout().format("mlp").name
    assert f"{wf.bits('mlp'):.3f}" in rows["mlp"] and "Q4_K/Q6_K" in rows["mlp"]
    assert main([str(tmp_path / "missing.gguf")]) == 2
    assert "no such file" in capsys.readouterr().out
    with pytest.raises(TypeError, match="wf must be a WeightFile"):
        describe("m.gguf")
