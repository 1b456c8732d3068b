"""A small demonstration question set (one question of every kind).

It is not a lesson: the tests of the grader, the exercise generator and the nbgrader workflow use it
through the fixture notebooks in ``tests/fixtures``, and ``docs/CHECKS_API.md`` refers to it as a
worked example of every question kind.  The numbers are those of a hypothetical 7-billion-parameter
model on an accelerator with 1 TB/s of memory bandwidth and 100 TFLOP/s of fp16 compute.
"""
from __future__ import annotations

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion

_PARAMS = 7_000_000_000          # parameters
_BANDWIDTH = 1e12                # bytes/s
_PEAK = 100e12                   # FLOP/s (fp16, dense)

q1 = NumericQuestion(
    id="q1", set="_demo", objective="D1 weight memory from parameter count and precision", points=1,
    prompt="How many bytes do the weights of a 7B-parameter model take in fp16?",
    expected=_PARAMS * 2, dimension="bytes", rel_tol=0.01,
    detect=[d.gb_vs_gib(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(_PARAMS * 1, "That is 1 byte per parameter (int8/fp8). fp16 uses 16 bits = 2 bytes."),
        Mistake(_PARAMS * 4, "That is 4 bytes per parameter (fp32). fp16 uses 2 bytes."),
        Mistake(_PARAMS * 0.5, "That is 4 bits per parameter (int4). fp16 uses 2 bytes."),
    ],
    hints=["How many bits does one fp16 number have, and how many bytes is that?",
           "Multiply the parameter count by the bytes per parameter."],
    solution="$7 \\times 10^9$ parameters $\\times$ 2 bytes = $1.4 \\times 10^{10}$ bytes = 14 GB.",
)

q2 = NumericQuestion(
    id="q2", set="_demo", objective="D2 decode step time from bytes and bandwidth", points=2,
    prompt="At batch 1 every decode step reads all weights once. How long is one step, in ms?",
    expected=_PARAMS * 2 / _BANDWIDTH * 1e3, unit="ms", dimension="time", rel_tol=0.01,
    detect=[d.ms_vs_s(), d.bits_vs_bytes(),
            d.compute_instead_of_memory(2 * _PARAMS / _PEAK * 1e3)],
    mistakes=[
        Mistake(_PARAMS * 4 / _BANDWIDTH * 1e3, "That uses fp32 weights (4 bytes); the model is in fp16."),
        Mistake(_PARAMS / _BANDWIDTH * 1e3, "That reads 1 byte per parameter; fp16 is 2 bytes."),
        Mistake(_BANDWIDTH / (_PARAMS * 2), "That is steps per second (bandwidth / bytes), not seconds per step."),
    ],
    hints=["Time = bytes moved / bandwidth.", "Convert seconds to milliseconds at the end."],
    solution="$1.4 \\times 10^{10}$ B / $10^{12}$ B/s = 0.014 s = 14 ms.",
)

q3 = ExpressionQuestion(
    id="q3", set="_demo", objective="D3 KV cache bytes per token as a formula", points=1,
    prompt="Bytes of KV cache per token, for L layers, H KV heads of size d, b bytes per element.",
    expected="2*L*H*d*b", symbols=["L", "H", "d", "b"],
    detect=[d.forgot_kv()],
    mistakes=[
        Mistake("2*L*H*d", "That counts elements, not bytes: multiply by the bytes per element b."),
        Mistake("2*L*H*d*b*8", "That is bits: b is already in bytes."),
        Mistake("2*H*d*b", "That is one layer: every layer has its own cache."),
    ],
    hints=["Each layer stores one key and one value vector per KV head.",
           "Elements per token: 2 × L × H × d; then bytes."],
    solution="$2 \\cdot L \\cdot H \\cdot d \\cdot b$: keys and values, per layer, per KV head, per element.",
)


def _kv_cache_bytes(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_element


q4 = FunctionQuestion(
    id="q4", set="_demo", objective="D3 KV cache size as a function", points=2,
    prompt="Write kv_cache_bytes(layers, kv_heads, head_dim, tokens, bytes_per_element=2).",
    expected=_kv_cache_bytes, dimension="bytes", rel_tol=1e-9,
    cases=[((32, 8, 128, 4096), 536_870_912), ((32, 32, 128, 1), 524_288),
           ((80, 8, 128, 1000, 1), 163_840_000), ({"layers": 1, "kv_heads": 1, "head_dim": 64, "tokens": 10}, 2_560)],
    detect=[d.forgot_kv(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda layers, kv_heads, head_dim, tokens, bytes_per_element=2:
                2 * layers * kv_heads * head_dim * tokens,
                "Your function ignores bytes_per_element: it counts elements, not bytes."),
        Mistake(lambda layers, kv_heads, head_dim, tokens, bytes_per_element=2:
                2 * kv_heads * head_dim * tokens * bytes_per_element,
                "Your function leaves out the number of layers."),
        Mistake(lambda layers, kv_heads, head_dim, tokens, bytes_per_element=2:
                2 * layers * kv_heads * head_dim * bytes_per_element,
                "Your function gives the bytes of one token; multiply by the number of tokens."),
    ],
    hints=["Start from the bytes per token of q3.", "Multiply by the number of tokens."],
    solution="```python\nreturn 2 * layers * kv_heads * head_dim * tokens * bytes_per_element\n```",
)

q5 = ChoiceQuestion(
    id="q5", set="_demo", objective="D4 the bottleneck of batch-1 decoding", points=1,
    prompt="What limits the speed of batch-1 decoding on a GPU?",
    options=["memory bandwidth", "compute", "PCIe", "network", "disk"],
    expected="memory bandwidth",
    mistakes=[
        Mistake("compute", "Each weight byte read is used for only ~1 multiply-add at batch 1: the ALUs idle."),
        Mistake("PCIe", "The weights already sit in GPU memory; PCIe only carries tokens in and out."),
        Mistake("disk", "Weights are loaded from disk once, before the first request."),
    ],
    hints=["Compare FLOPs per byte of one decode step with the GPU's FLOP/s per byte/s."],
    solution="Memory bandwidth: a step does ~2 FLOP per parameter but reads 2 bytes per parameter.",
)

q6 = NumericQuestion(
    id="q6", set="_demo", objective="D4 ridge point of the roofline", points=1,
    prompt="Peak FLOP/s divided by bandwidth (FLOP per byte) for this accelerator?",
    expected=_PEAK / _BANDWIDTH, rel_tol=0.01,
    mistakes=[
        Mistake(_BANDWIDTH / _PEAK, "Upside down: FLOP/s divided by bytes/s."),
        Mistake(_PEAK / _BANDWIDTH * 8, "That divides by bits per second; bandwidth is in bytes/s."),
        Mistake(_PEAK / _BANDWIDTH / 2, "No factor 1/2 here: this is the ratio of the two peaks."),
    ],
    hints=["Units: (FLOP/s) / (bytes/s) = FLOP/byte."],
    solution="$10^{14} / 10^{12} = 100$ FLOP per byte.",
)

QUESTIONS = [q1, q2, q3, q4, q5, q6]
