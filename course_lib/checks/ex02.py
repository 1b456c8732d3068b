"""Exercise set 02: data per token (lesson ``notebooks/02_data_per_token.ipynb``).

Objectives (as numbered in the lesson):

* O1 explain why the decode steps of one sequence are sequential, and which parallelism remains
  (batching across requests, speculative decoding);
* O2 compute the bytes of weights from a parameter count and a precision (fp32, fp16/bf16, int8,
  int4, q4_0 at 4.5 bits per weight);
* O3 compute the weight bytes one decode step streams: every block, the full lm_head, one embedding
  row (tied or not);
* O4 compute a GEMV's FLOPs, bytes and arithmetic intensity, and compare it with a device's ridge point;
* O5 show with numbers why an on-chip cache cannot keep the weights between decode steps.

Every expected value is computed here from ``course_lib`` (ModelSpec, HardwareSpec, precision and
the generated formulas), never typed in. Feedback never states an expected value.

Lessons: 02
"""
from __future__ import annotations

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core.numeric import raw as g
from course_lib.core import units
from course_lib.core.hardware import get_hardware
from course_lib.core.models import catalog_entry, get_model
from course_lib.core.precision import get_precision

__all__ = ["QUESTIONS", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q10", "streamed_bytes"]

SET = "ex02"

_FP32 = get_precision("fp32").bytes
_FP16 = get_precision("fp16").bytes
_BF16 = get_precision("bf16").bytes
_INT4 = get_precision("int4").bytes
_Q4_0 = get_precision("q4_0")

# --- O2 -------------------------------------------------------------------------------------------
_L2 = get_model("llama-2-7b")
_L2_Q4 = _L2.weight_bytes("q4_0")
q1 = NumericQuestion(
    id="q1", set=SET, points=1,
    objective="O2 compute the bytes of weights from a parameter count and a precision",
    prompt=("How many bytes do Llama-2-7B's weights take in llama.cpp's q4_0 format (4.5 bits per weight: "
            "blocks of 32 four-bit weights plus one fp16 scale)? Use `get_model('llama-2-7b').params`."),
    expected=_L2_Q4, dimension="bytes", rel_tol=0.01,
    detect=[d.bits_vs_bytes(), d.gb_vs_gib()],
    mistakes=[
        Mistake(_L2.params * _INT4,
                "That is plain int4 (4 bits per weight). q4_0 also stores one 16-bit scale per block of 32 "
                "weights: (32 x 4 + 16) / 32 bits per weight."),
        Mistake(_L2.params * _Q4_0.bits,
                "That takes 4.5 *bytes* per weight. q4_0 uses 4.5 *bits* per weight; a byte holds 8 bits."),
        Mistake(_L2.weight_bytes("fp16"),
                "That is the fp16 size (2 bytes per weight), the checkpoint before quantisation."),
        Mistake(_L2.params,
                "That is the parameter count itself (one byte per weight). Multiply the count by the bytes "
                "per weight of q4_0."),
        Mistake(7e9 * _Q4_0.bits / 8,
                "That uses the nominal 7B from the name. Llama-2-7B has fewer parameters: take the count from "
                "`get_model('llama-2-7b').params`.", rel_tol=0.003),
    ],
    hints=["q4_0 stores 32 weights in 32 x 4 bits plus a 16-bit scale. How many bits per weight is that?",
           "bytes = parameters x bits per weight / 8."],
    solution=(f"(32 x 4 + 16) / 32 = {_Q4_0.bits:g} bits = {_Q4_0.bytes:g} B per weight; "
              f"{_L2.params:,} x {_Q4_0.bytes:g} B = {_L2_Q4:,.0f} B = {units.format_bytes(_L2_Q4, digits=4)}."),
)

# --- O3 (multi-step) -------------------------------------------------------------------------------
_L3 = get_model("llama-3-8b")
_L3_STREAM = _L3.decode_weight_bytes("bf16")
q2 = NumericQuestion(
    id="q2", set=SET, points=2,
    objective="O3 compute the weight bytes one decode step streams",
    prompt=("Multi-step: Llama-3-8B in bf16, batch 1. (a) From `get_model('llama-3-8b')` take `block_params`, "
            "`vocab` and `hidden` (its lm_head is not tied); (b) add what one decode step reads: every block "
            "weight, the whole lm_head, the one embedding row of the current token; (c) turn it into bytes. "
            "How many weight bytes does one decode step stream?"),
    expected=_L3_STREAM, dimension="bytes", rel_tol=0.002,
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake(_L3.weight_bytes("bf16"),
                "That is the size of the whole checkpoint. The embedding table is not streamed: a step looks "
                "up one row of it (the current token), not all of its vocab rows."),
        Mistake(g.weight_bytes(_L3.block_params, _BF16),
                "That leaves out the lm_head. Turning the last hidden state into vocab logits multiplies by the "
                "whole V x h output matrix every step."),
        Mistake(_L3.streamed_params(1),
                "That is the number of parameters read, not bytes: bf16 stores each one in 2 bytes."),
        Mistake(g.weight_bytes(_L3.params + _L3.hidden, _FP32),
                "That is fp32 (4 bytes per weight) and counts the whole embedding table. bf16 is 2 bytes, and a "
                "step reads one embedding row."),
    ],
    hints=["The blocks and the lm_head are read in full; of the embedding table only one row (h values).",
           "Streamed parameters = block_params + vocab x hidden + hidden; then x 2 bytes."],
    solution=(f"({_L3.block_params:,} + {_L3.vocab:,} x {_L3.hidden:,} + {_L3.hidden:,}) parameters x 2 B = "
              f"{_L3_STREAM:,.0f} B = {units.format_bytes(_L3_STREAM, digits=4)}; the whole checkpoint is "
              f"{units.format_bytes(_L3.weight_bytes('bf16'), digits=4)}."),
)

_QW = get_model("qwen3-0.6b")
_QW_STREAM = _QW.decode_weight_bytes("fp16")
q3 = NumericQuestion(
    id="q3", set=SET, points=1,
    objective="O3 compute the weight bytes one decode step streams",
    prompt=("Qwen3-0.6B ties its lm_head to its token embedding: one V x h matrix serves both. In fp16 at "
            "batch 1, how many weight bytes does one decode step stream?"),
    # 0.3 %: the nominal 0.6B x 2 bytes (0.66 % above) is a mistake, not the answer
    expected=_QW_STREAM, dimension="bytes", rel_tol=0.003,
    detect=[d.bits_vs_bytes(), d.gb_vs_gib()],
    mistakes=[
        Mistake(0.6e9 * _FP16,
                "That is the nominal 0.6B from the name x 2 bytes. Count what a step streams from the real shapes: "
                "`block_params`, `vocab` and `hidden` of `get_model('qwen3-0.6b')`.", rel_tol=0.001),
        Mistake(g.weight_bytes(_QW.block_params + _QW.hidden, _FP16),
                "That leaves out the lm_head. Tied or not, the output projection multiplies the hidden state "
                "by all V x h weights every step; tying saves memory, not reads."),
        Mistake(g.weight_bytes(_QW.params + _QW.vocab * _QW.hidden, _FP16),
                "That counts the tied matrix twice in full. It is stored once; a step reads it in full for the "
                "lm_head and only one row of it for the embedding lookup."),
        Mistake(_QW.decode_weight_bytes("fp32"),
                "That is fp32 (4 bytes per weight); the question is about fp16."),
    ],
    hints=["Which parts are read in full, and of which matrix is only a row read?",
           "Streamed parameters = block_params + vocab x hidden + hidden, whether or not the matrix is tied."],
    solution=(f"({_QW.block_params:,} + {_QW.vocab:,} x {_QW.hidden:,} + {_QW.hidden:,}) x 2 B = "
              f"{_QW_STREAM:,.0f} B = {units.format_bytes(_QW_STREAM, digits=4)}: a tied model streams one row "
              f"*more* than it stores."),
)

# --- O4 -------------------------------------------------------------------------------------------
q4 = ExpressionQuestion(
    id="q4", set=SET, points=1,
    objective="O4 compute a GEMV's arithmetic intensity",
    prompt=("A GEMV multiplies an m x n weight matrix (b bytes per weight) by one vector. Counting only the "
            "weight bytes, give its arithmetic intensity in FLOP per byte as a sympy expression of `m`, `n` "
            "and `b`."),
    expected="2*m*n/(m*n*b)", symbols=["m", "n", "b"],
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake("1/b", "That counts one FLOP per weight. Each weight takes part in a multiply AND an add: "
                       "2 FLOPs."),
        Mistake("b/2", "Upside down: intensity is FLOPs divided by bytes."),
        Mistake("2*m*n", "That is the FLOP count. Intensity divides it by the bytes moved."),
        Mistake("2/(m*n*b)", "The FLOPs grow with the matrix too: 2 m n FLOPs over m n b bytes."),
    ],
    hints=["FLOPs: every weight is used once, in one multiply-add.", "Bytes: m n weights of b bytes."],
    solution="$\\frac{2 m n}{m n b} = \\frac{2}{b}$: 1 FLOP/byte in fp16, 2 in int8, 0.5 in fp32.",
)

_GEMV = 8192
_GEMV_ELEMENTS = _GEMV * _GEMV
_GEMV_BYTES = g.weight_bytes(_GEMV_ELEMENTS, _FP16)
_GEMV_FLOPS = g.decode_flops(batch=1, block_params=_GEMV_ELEMENTS, vocab=0, hidden=0, layers=0, heads=0,
                             attn_dim=0, context=0)
_RTX4090 = get_hardware("rtx-4090")
_GEMV_T = g.memory_time(_GEMV_BYTES, _RTX4090.bandwidth, 1.0)
_US = units.parse_time("1 us")
q5 = NumericQuestion(
    id="q5", set=SET, points=2,
    objective="O4 compute a GEMV's bytes and its time at a device's bandwidth",
    prompt=("Multi-step: an 8192 x 8192 fp16 weight matrix times one vector on an RTX 4090 "
            "(`get_hardware('rtx-4090').bandwidth`). (a) bytes of the matrix; (b) time to read them at the full "
            "bandwidth (ignore the two small vectors). Answer in microseconds (a bare number is read as µs)."),
    expected=_GEMV_T / _US, unit="us", dimension="time", rel_tol=0.01,
    detect=[d.ms_vs_s(feedback=(
                "That is a factor of 1000 off: a time-unit slip (ns, µs, ms and s are each 1000 apart). A bare "
                "number is read as microseconds; or write the unit, e.g. '0.5 ms'.")), d.bits_vs_bytes(),
            d.compute_instead_of_memory(g.compute_time(_GEMV_FLOPS, _RTX4090.flops("fp16"), 1.0) / _US)],
    mistakes=[
        Mistake(g.memory_time(g.weight_bytes(_GEMV_ELEMENTS, _FP32), _RTX4090.bandwidth, 1.0) / _US,
                "That reads 4 bytes per element (fp32); fp16 is 2 bytes."),
        Mistake(g.memory_time(_GEMV_ELEMENTS, _RTX4090.bandwidth, 1.0) / _US,
                "That reads 1 byte per element: count bytes, not elements (fp16 = 2 bytes)."),
        Mistake(_RTX4090.bandwidth / _GEMV_BYTES / _US,
                "Upside down: that is bandwidth / bytes (reads per second). Time = bytes / bandwidth."),
    ],
    hints=["Bytes = 8192 x 8192 x 2.", "Time = bytes / (bytes per second); 1 µs = 10^-6 s."],
    solution=(f"{_GEMV_ELEMENTS:,} x 2 B = {_GEMV_BYTES:,.0f} B; / "
              f"{units.format_bandwidth(_RTX4090.bandwidth, unit='GB/s')} "
              f"= {units.format_time(_GEMV_T, digits=4)}. The {units.format_flops(_GEMV_FLOPS)} would take only "
              f"{units.format_time(g.compute_time(_GEMV_FLOPS, _RTX4090.flops('fp16'), 1.0))} at the fp16 peak."),
)

_H100 = get_hardware("h100-sxm")
_GEMV_AI = g.arithmetic_intensity(_GEMV_FLOPS, _GEMV_BYTES)
_RIDGE = _H100.ridge_point("fp16")
q6 = NumericQuestion(
    id="q6", set=SET, points=2,
    objective="O4 compare a GEMV's arithmetic intensity with a device's ridge point",
    prompt=("Multi-step: (a) the H100 SXM's fp16 ridge point (dense peak FLOP/s / bandwidth, "
            "`get_hardware('h100-sxm')`); (b) an fp16 GEMV's intensity (weights only). By what factor must the "
            "intensity grow before the GEMV becomes compute-bound? Give the plain number (ridge / intensity)."),
    expected=_RIDGE / _GEMV_AI, rel_tol=0.01,
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake(_GEMV_AI / _RIDGE, "Upside down: divide the ridge point by the GEMV's intensity."),
        Mistake(_H100.sparse_flops["fp16"] / _H100.bandwidth / _GEMV_AI,
                "That is twice the answer. Three slips give it: the datasheet's 2:4 structured-sparsity peak "
                "(twice the dense one; dense matrix products get the dense peak), the fp8 peak (the GEMV is fp16), "
                "or a GEMV intensity of 0.5 FLOP/byte (one FLOP per 2-byte weight; a multiply-add is 2 FLOPs)."),
        Mistake(_RIDGE / (2 * _GEMV_AI),
                "That gives the GEMV 2 FLOP/byte. In fp16 each weight is 2 bytes and yields 2 FLOPs: 1 FLOP/byte."),
        Mistake(0.5, "That looks like an intensity (1 FLOP per 2-byte weight), not the factor. The GEMV's "
                     "intensity is 2 FLOPs per 2-byte weight; the answer is ridge point / that intensity.",
                rel_tol=0.01),
    ],
    hints=["Ridge point = peak FLOP/s / bandwidth (bytes/s) = FLOP per byte.",
           "An fp16 GEMV does 2 FLOPs per 2-byte weight."],
    solution=(f"{units.format_flop_rate(_H100.flops('fp16'))} / {units.format_bandwidth(_H100.bandwidth)} = "
              f"{_RIDGE:.1f} FLOP/byte; the GEMV has {_GEMV_AI:g} FLOP/byte, so the factor is {_RIDGE / _GEMV_AI:.1f}. "
              f"Batching B sequences multiplies the intensity by about B."),
)

# --- O5 -------------------------------------------------------------------------------------------
_MI = get_model("mistral-7b")
_MI_STREAM = _MI.decode_weight_bytes("fp16")
_CACHE = _RTX4090.cache_bytes
q7 = NumericQuestion(
    id="q7", set=SET, points=1,
    objective="O5 compare on-chip cache with the weight bytes of a decode step",
    prompt=("How many times larger are the weight bytes one fp16 decode step of Mistral-7B streams than the "
            "RTX 4090's L2 cache (`get_hardware('rtx-4090').cache_bytes`)? Give the plain ratio."),
    expected=_MI_STREAM / _CACHE, rel_tol=0.005,
    detect=[d.bits_vs_bytes(), d.gb_vs_gib(2)],
    mistakes=[
        Mistake(_MI.weight_bytes("fp16") / _CACHE,
                "That uses the whole checkpoint. A decode step streams the blocks, the lm_head and one "
                "embedding row, not the whole embedding table.", alters="weights"),
        Mistake(_MI.streamed_params(1) / _CACHE,
                "That compares a parameter count with bytes: each fp16 weight takes 2 bytes."),
        Mistake(_CACHE / _MI_STREAM, "Upside down: the question asks how many caches the weights fill."),
        Mistake(7e9 * 2 / _CACHE,
                "That uses the nominal 7B parameters from the name; take the bytes one step streams from "
                "`decode_weight_bytes('fp16')`.", rel_tol=0.003, alters="weights"),
    ],
    hints=["`get_model('mistral-7b').decode_weight_bytes('fp16')` gives the bytes of one step.",
           "Both numbers in bytes, then divide."],
    solution=(f"{units.format_bytes(_MI_STREAM, digits=4)} / {units.format_bytes(_CACHE)} = "
              f"{_MI_STREAM / _CACHE:.1f}: the cache holds about {100 * _CACHE / _MI_STREAM:.2f} % of one step's "
              f"weights, and each step needs all of them again."),
)


# --- O3 as a function --------------------------------------------------------------------------------
def streamed_bytes(block_params, vocab, hidden, bytes_per_weight):
    """Reference: weight bytes one batch-1 decode step streams (blocks + full lm_head + one embedding row)."""
    return g.weight_bytes(block_params + vocab * hidden + hidden, bytes_per_weight)


q8 = FunctionQuestion(
    id="q8", set=SET, points=2,
    objective="O3 compute the weight bytes one decode step streams",
    prompt=("Write `streamed_bytes(block_params, vocab, hidden, bytes_per_weight)`: the weight bytes one "
            "batch-1 decode step streams (every block weight, the whole lm_head, one embedding row). Should "
            "it need to know whether the lm_head is tied?"),
    expected=streamed_bytes, dimension="bytes", rel_tol=1e-9,
    cases=[
        ((1000, 10, 4, 2), 2088),
        ((_MI.block_params, _MI.vocab, _MI.hidden, _FP16), _MI.decode_weight_bytes("fp16")),
        ((_QW.block_params, _QW.vocab, _QW.hidden, _FP16), _QW.decode_weight_bytes("fp16")),
        ({"block_params": 500, "vocab": 100, "hidden": 8, "bytes_per_weight": _Q4_0.bytes},
         (500 + 100 * 8 + 8) * _Q4_0.bytes),
    ],
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda block_params, vocab, hidden, bytes_per_weight: (block_params + hidden) * bytes_per_weight,
                "Your function leaves out the lm_head: the V x h output projection is read every step."),
        Mistake(lambda block_params, vocab, hidden, bytes_per_weight:
                (block_params + 2 * vocab * hidden) * bytes_per_weight,
                "Your function reads the whole embedding table as well. A step looks up one row of it."),
        Mistake(lambda block_params, vocab, hidden, bytes_per_weight:
                (block_params + vocab * hidden) * bytes_per_weight,
                "Close: your function forgets the one embedding row (hidden values) of the current token."),
        Mistake(lambda block_params, vocab, hidden, bytes_per_weight: block_params + vocab * hidden + hidden,
                "Your function returns parameters, not bytes: multiply by bytes_per_weight."),
    ],
    hints=["Three parts: the blocks, the lm_head (vocab x hidden), one embedding row (hidden).",
           "Multiply the parameter sum by bytes_per_weight. Tying changes what is stored, not what is read."],
    solution=("```python\nreturn (block_params + vocab * hidden + hidden) * bytes_per_weight\n```\n"
              "No: tied or not, the lm_head is read in full and the embedding contributes one row."),
)

# --- O1 -------------------------------------------------------------------------------------------
q9 = ChoiceQuestion(
    id="q9", set=SET, points=1,
    objective="O1 explain why decoding one sequence is sequential and which parallelism remains",
    prompt=("One user, one response. Which technique lets the GPU work on several *future tokens of that same "
            "response* in one pass over the weights?"),
    options=["speculative decoding", "running the layers of one step in parallel",
             "computing all the response's tokens in one pass, like the prompt",
             "batching other users' requests with it", "a larger L2 cache"],
    expected="speculative decoding",
    mistakes=[
        Mistake("running the layers of one step in parallel",
                "Layer l + 1 needs layer l's output: the layers of one step run one after another too."),
        Mistake("computing all the response's tokens in one pass, like the prompt",
                "The prompt's tokens are known in advance; a response's token t + 1 depends on token t, "
                "which does not exist until its step is done."),
        Mistake("batching other users' requests with it",
                "Batching shares each weight read among *different* sequences: more tokens per second in "
                "total, but still one token per step for this response."),
        Mistake("a larger L2 cache",
                "A cache of tens of MB cannot hold gigabytes of weights, and it would not remove the "
                "dependence of each token on the previous one."),
    ],
    hints=["What does token t + 1 need as its input?",
           "Which technique guesses several tokens cheaply and then checks them all in one pass?"],
    solution=("Speculative decoding: a small draft model (or heuristic) proposes k tokens, and the large model "
              "verifies them in one forward pass that reads the weights once, accepting the longest correct "
              "prefix. Batching other requests raises total throughput, not this response's speed."),
)

# --- O6: a config.json, layer by layer ---------------------------------------------------------------
_CFG = catalog_entry("llama-3-8b")["config"]
_H, _HQ, _HKV = _CFG["hidden_size"], _CFG["num_attention_heads"], _CFG["num_key_value_heads"]
_D, _I = _H // _HQ, _CFG["intermediate_size"]
_ATTN = _H * _HQ * _D + 2 * _H * _HKV * _D + _HQ * _D * _H
_MLP = 3 * _H * _I
_Q10 = _L3.attention_params_per_layer + _L3.dense_mlp_params + _L3.norm_params_per_layer
assert _Q10 == _ATTN + _MLP + 2 * _H  # the catalog's count is the config's, read layer by layer
q10 = NumericQuestion(
    id="q10", set=SET, points=2,
    objective="O6 read a model's config.json and count its parameters layer by layer",
    prompt=("Multi-step: `catalog_entry('llama-3-8b')['config']` is Llama-3-8B's `config.json` (the fields that "
            "fix its shape). Count the parameters of ONE transformer block: (a) attention: the Q and O projections "
            "(h x H_q·d each) and the K and V projections (h x H_kv·d each), with d = hidden_size / "
            "num_attention_heads; (b) the gated MLP: gate, up and down (h x intermediate_size each); (c) its two "
            "RMSNorm weight vectors (h each). No biases. How many parameters has one block?"),
    expected=_Q10, rel_tol=0,
    mistakes=[
        Mistake(_H * _HQ * _D * 4 + _MLP + 2 * _H,
                "That gives K and V as many heads as Q (multi-head attention). Llama-3-8B uses grouped-query "
                "attention: `num_key_value_heads` K/V heads, fewer than `num_attention_heads`."),
        Mistake(_ATTN + 2 * _H * _I + 2 * _H,
                "That counts two MLP matrices. Llama's MLP is gated: gate, up AND down, three h x I matrices."),
        Mistake(_ATTN + _MLP,
                "That leaves out the block's two RMSNorm weight vectors (h values each): small, but part of the "
                "count."),
        Mistake(_H * _HQ * _D + _H * _HKV * _D + _HQ * _D * _H + _MLP + 2 * _H,
                "That counts one of K and V: a block has a K projection AND a V projection."),
        Mistake(_ATTN + _MLP + 2 * _H + _CFG["vocab_size"] * _H,
                "That adds the embedding table: it belongs to the model, not to each block."),
        Mistake(_L3.params / _CFG["num_hidden_layers"],
                "That divides the whole model by the number of layers: it spreads the embedding table and the "
                "lm_head over the blocks. Count one block from its shapes."),
    ],
    hints=["d = 4096 / 32 = 128; the K and V projections have num_key_value_heads x d outputs each.",
           "Attention h·H_q·d + 2·h·H_kv·d + H_q·d·h; MLP 3·h·I; norms 2·h."],
    solution=(f"d = {_H} / {_HQ} = {_D}. Attention: {_H:,} x {_HQ * _D:,} x 2 + {_H:,} x {_HKV * _D:,} x 2 = "
              f"{_ATTN:,}; MLP: 3 x {_H:,} x {_I:,} = {_MLP:,}; norms: 2 x {_H:,}. One block: **{_Q10:,}**. "
              f"`get_model('llama-3-8b').block_params` is {_CFG['num_hidden_layers']} of them plus the final norm."),
)

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8, q9, q10]
