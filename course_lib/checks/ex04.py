"""Exercise set 04: bandwidth-bound latency (lesson ``notebooks/04_bandwidth_bound_latency.ipynb``).

Objectives (as numbered in the lesson):

* O1 compute the batch-1 decode floor, TPOT >= bytes streamed per token / memory bandwidth, and
  the tokens per second it allows;
* O2 compare devices (HBM, GDDR, unified memory) and weight precisions, and tell a floor for one
  precision from a law ("8-bit is the theoretical minimum" is neither);
* O3 add the KV-cache reads: TPOT grows with the context, up to a sliding window;
* O4 compute the total time of a response (TTFT + the n - 1 decode steps, exactly and as the line
  b + k·n) and what hidden chain-of-thought tokens cost;
* O5 explain why measured systems sit above the floor (a preview of lesson 08).

Every expected value is computed here from ``course_lib`` (models, hardware, precision, the
estimator, the formulas and the shipped measurements), never typed in. Feedback never states an
expected value.

Lessons: 04
"""
from __future__ import annotations

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core.numeric import raw as g
from course_lib.core import measurements
from course_lib.core import units
from course_lib.core.estimator import estimate, kv_cache_bytes, weight_bytes
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model

__all__ = ["QUESTIONS", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9",
           "tpot_floor_reference", "exact_decode_sum", "fp8_measurement", "weights_only_batch1"]

SET = "ex04"

# --- the data the questions use ------------------------------------------------------------------


def fp8_measurement() -> dict:
    """The H200 measurement of one weights-only decode step with fp16 vs fp8 weights."""
    return measurements.h200()["weights_only_decode_step_fp16_vs_fp8"]


def weights_only_batch1() -> dict:
    """The H200 weights-only decode step (CUDA graph) at batch 1, with its weight bytes."""
    step = measurements.h200()["weights_only_decode_step_cuda_graph"]
    (row,) = [r for r in step["by_batch"] if r["batch"] == 1]
    return {**row, "weight_bytes": step["weight_bytes"]}


def tpot_floor_reference(weight_bytes, kv_bytes_per_token, context, bandwidth):
    """Seconds of one batch-1 decode step: (weights + context · KV bytes per token) / bandwidth."""
    return g.memory_time(g.decode_bytes(weight_bytes, 1, context, kv_bytes_per_token), bandwidth, 1)


def exact_decode_sum():
    """``formulas.derive_decode_sum()['exact_sum']`` at batch 1, in the exercise's symbols W, k, P, n, beta."""
    import sympy as sp

    from course_lib.core.formulas import S, derive_decode_sum

    W, k, P, n, beta = sp.symbols("W k P n beta", positive=True)
    return derive_decode_sum()["exact_sum"].subs({
        S.streamed_weight_bytes: W, S.kv_bytes_per_token: k, S.prompt: P, S.n: n, S.bandwidth: beta, S.batch: 1,
    })


_SOURCE_7B = get_model("source-7b").params                    # 7e9, the source's illustrative model
_RTX4090 = get_hardware("rtx-4090")

# --- O1 ---------------------------------------------------------------------------------------------
_Q1_TPOT = weight_bytes(_SOURCE_7B, "fp16") / _RTX4090.bandwidth       # seconds
_Q1_COMPUTE = g.compute_time(2 * _SOURCE_7B, _RTX4090.flops("fp16"), 1.0)
q1 = NumericQuestion(
    id="q1", set=SET, points=1,
    objective="O1 compute the batch-1 decode floor and the tokens per second it allows",
    prompt=("The source's 7B model (7e9 parameters) in fp16 on an RTX 4090 "
            "(`get_hardware('rtx-4090').bandwidth`): if every weight is read once per token, how many tokens "
            "per second can batch-1 decoding produce at most? Give a plain number (tokens/s)."),
    expected=1 / _Q1_TPOT, rel_tol=0.01,
    detect=[d.gb_vs_gib(), d.bits_vs_bytes(), d.compute_instead_of_memory(1 / _Q1_COMPUTE, feedback=(
        "That is the compute-bound rate (peak FLOP/s / FLOPs per token). At batch 1 every token has to read "
        "every weight from memory, and memory is far slower than the arithmetic: use bytes / bandwidth."))],
    mistakes=[
        Mistake(1 / (weight_bytes(_SOURCE_7B, "int8") / _RTX4090.bandwidth),
                "That is the rate for 8-bit weights (1 byte each). fp16 weights take 2 bytes each."),
        Mistake(_Q1_TPOT * 1e3,
                "That is the time per token in milliseconds. The question asks for tokens per second: "
                "its reciprocal, in seconds."),
        Mistake(_Q1_TPOT,
                "That is the time per token in seconds. Tokens per second is one over it."),
    ],
    hints=["Bytes per token: 7e9 parameters x 2 bytes. Seconds per token: bytes / bandwidth.",
           "Tokens per second = 1 / (seconds per token)."],
    solution=(f"{units.format_bytes(weight_bytes(_SOURCE_7B, 'fp16'))} / "
              f"{units.format_bandwidth(_RTX4090.bandwidth)} = {units.format_time(_Q1_TPOT)} per token, "
              f"so at most {1 / _Q1_TPOT:.1f} tokens/s."),
)

# --- O2 multi-step ------------------------------------------------------------------------------------
_MISTRAL = get_model("mistral-7b")
_M2 = get_hardware("m2-ultra")
_Q2 = _MISTRAL.decode_weight_bytes("q4_0") / _M2.bandwidth
q2 = NumericQuestion(
    id="q2", set=SET, points=2,
    objective="O2 compare devices and weight precisions",
    prompt=("Multi-step: Mistral-7B quantised to llama.cpp's q4_0 on an Apple M2 Ultra (unified memory). "
            "(a) How many weight bytes does one decode step stream? Use "
            "`get_model('mistral-7b').decode_weight_bytes('q4_0')`. (b) Divide by the M2 Ultra's bandwidth. "
            "Ignore the KV cache. Answer in ms."),
    expected=_Q2 * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s(), d.bits_vs_bytes(), d.gb_vs_gib()],
    mistakes=[
        Mistake(_MISTRAL.decode_weight_bytes("int4") / _M2.bandwidth * 1e3,
                "That counts 4 bits per weight. q4_0 also stores one fp16 scale per block of 32 weights: "
                "4.5 bits per weight (`bytes_per_element('q4_0')`)."),
        Mistake(_MISTRAL.decode_weight_bytes("q8_0") / _M2.bandwidth * 1e3,
                "That is q8_0 (8.5 bits per weight). The model here is quantised to q4_0."),
        Mistake(_MISTRAL.decode_weight_bytes("fp16") / _M2.bandwidth * 1e3,
                "That is the fp16 model (2 bytes per weight); the question is about q4_0."),
        Mistake(weight_bytes(_MISTRAL, "q4_0") / _M2.bandwidth * 1e3,
                "That reads every stored weight, including the whole embedding table. A decode step "
                "looks up one row of it; use `decode_weight_bytes`.", rel_tol=0.005),
    ],
    hints=["`bytes_per_element('q4_0')` is 4.5 / 8 bytes; `decode_weight_bytes` counts what one step streams.",
           "Time = bytes / the M2 Ultra's bandwidth (bytes/s); x 1000 for ms."],
    solution=(f"{units.format_bytes(_MISTRAL.decode_weight_bytes('q4_0'), digits=4)} / "
              f"{units.format_bandwidth(_M2.bandwidth)} = {units.format_time(_Q2, digits=4)}: "
              f"no FLOP/s figure is needed for the memory floor."),
)

# --- O2: what real kernels give -----------------------------------------------------------------------
_FP8 = fp8_measurement()
_Q3 = _FP8["fp16"]["ms"] / _FP8["fp8_e4m3"]["ms"]
q3 = NumericQuestion(
    id="q3", set=SET, points=1,
    objective="O2 compare devices and weight precisions",
    prompt=("From `measurements.h200()['weights_only_decode_step_fp16_vs_fp8']`, compute how many times "
            "faster the decode step ran with fp8 weights than with fp16 weights (time with fp16 / time with "
            "fp8), from the two measured times."),
    expected=_Q3, rel_tol=0.005,
    mistakes=[
        Mistake(_FP8["fp16"]["weight_bytes"] / _FP8["fp8_e4m3"]["weight_bytes"],
                "That is the ratio of the bytes (the theory). The question asks what the measured times give."),
        Mistake(1 / _Q3, "Upside down: divide the fp16 time by the fp8 time."),
        Mistake(_FP8["fp16"]["GBps"] / _FP8["fp8_e4m3"]["GBps"],
                "That is the ratio of the achieved bandwidths, not of the times."),
    ],
    hints=["The times are in the 'ms' fields of the 'fp16' and 'fp8_e4m3' entries.",
           "Divide the fp16 time by the fp8 time and compare with the ratio of the bytes."],
    solution=(f"{_FP8['fp16']['ms']} ms / {_FP8['fp8_e4m3']['ms']} ms = {_Q3:.3f}, not 2: the fp8 step "
              f"reached only {_FP8['fp8_e4m3']['GBps']} GB/s against {_FP8['fp16']['GBps']} GB/s for fp16."),
)

# --- O3 multi-step ------------------------------------------------------------------------------------
_H100 = get_hardware("h100-sxm")
_Q4_CONTEXT = 20_000
_Q4 = estimate(_MISTRAL, _H100, _Q4_CONTEXT, 2).tpot_first   # the one decode step of a 2-token answer
_WS = _MISTRAL.decode_weight_bytes("fp16")
_KTOK = _MISTRAL.kv_bytes_per_token("fp16")
_WINDOW = _MISTRAL.sliding_window
q4 = NumericQuestion(
    id="q4", set=SET, points=2,
    objective="O3 add the KV-cache reads: TPOT grows with the context, up to a sliding window",
    prompt=(f"Multi-step: Mistral-7B (v0.1, sliding window of {_WINDOW:,} tokens) in fp16 on an H100 SXM. "
            f"A prompt of {_Q4_CONTEXT:,} tokens has been prefilled. (a) Weight bytes per decode step: "
            f"`decode_weight_bytes('fp16')`. (b) K/V bytes the first decode step reads (it attends to its own "
            f"token too): `kv_cache_bytes('mistral-7b', {_Q4_CONTEXT + 1})`. (c) That step's TPOT floor in ms. "
            f"Check with `estimate('mistral-7b', 'h100-sxm', {_Q4_CONTEXT}, 2).tpot_first` (a two-token answer: "
            f"its second token is that step)."),
    expected=_Q4 * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s(), d.bits_vs_bytes()],
    mistakes=[
        Mistake((_WS + (_Q4_CONTEXT + 1) * _KTOK) / _H100.bandwidth * 1e3,
                "That reads the K/V of the whole context. Mistral-7B v0.1 attends only to the last "
                "sliding-window tokens, so a step reads at most that many tokens' K/V."),
        Mistake(_WS / _H100.bandwidth * 1e3,
                "That is the weights alone: the step also reads the K/V of the tokens it attends to."),
        Mistake((_WS + (_MISTRAL.heads // _MISTRAL.kv_heads) * _WINDOW * _KTOK) / _H100.bandwidth * 1e3,
                "That counts K/V for every query head. With grouped-query attention only the KV heads are "
                "cached and read."),
        Mistake((weight_bytes(_MISTRAL, "fp16") + _WINDOW * _KTOK) / _H100.bandwidth * 1e3,
                "That streams the whole embedding table too; a decode step reads one row of it "
                "(use `decode_weight_bytes`).", rel_tol=0.005, alters="weights"),
        Mistake((_WS + _WINDOW * _KTOK / 2) / _H100.bandwidth * 1e3,
                "That reads only the keys (or only the values) of the window: a step reads both K and V of "
                "every token it attends to (`kv_cache_bytes` counts both).", rel_tol=0.001),
        Mistake((7e9 * 2 + _WINDOW * _KTOK) / _H100.bandwidth * 1e3,
                "That uses the nominal 7B parameters from the name; take the weight bytes of a step from "
                "`decode_weight_bytes('fp16')`.", rel_tol=0.001, alters="weights"),
    ],
    hints=["`get_model('mistral-7b').attended_tokens(20001)` tells how many tokens' K/V the step reads.",
           "TPOT = (weight bytes + K/V bytes) / bandwidth; x 1000 for ms."],
    solution=(f"{units.format_bytes(_WS, digits=4)} + {units.format_bytes(kv_cache_bytes(_MISTRAL, _Q4_CONTEXT + 1))} "
              f"(the window's {_WINDOW:,} tokens) over {units.format_bandwidth(_H100.bandwidth)} = "
              f"{units.format_time(_Q4, digits=4)}."),
)

# --- O4 as a formula ------------------------------------------------------------------------------------
q5 = ExpressionQuestion(
    id="q5", set=SET, points=2,
    objective="O4 compute the total time of a response, exactly and as a line",
    prompt=("At batch 1, decode step j (j = 1 ... n-1) reads W weight bytes plus the K/V of P + j tokens, k bytes "
            "each, at bandwidth beta. Give the total decode time of the n - 1 steps as a sympy expression of "
            "`W, k, P, n, beta = sympy.symbols('W k P n beta', positive=True)` (a closed form, or "
            "`sympy.summation(..., (j, 1, n - 1))`)."),
    expected=exact_decode_sum(), symbols=["W", "k", "P", "n", "beta"],
    mistakes=[
        Mistake("n*(W + P*k)/beta + k*n*(n + 1)/(2*beta)",
                "That sums n steps. The first token comes out of prefill: only n - 1 decode steps follow."),
        Mistake("(n - 1)*(W + P*k)/beta",
                "That keeps every step at the prompt's context: each step reads one more token's K/V than "
                "the one before."),
        Mistake("(n - 1)*(W + (P + n)*k)/beta",
                "That charges every step the K/V of the final context; step j reads P + j tokens."),
        Mistake("(n - 1)*W/beta",
                "That leaves out the KV cache: every step also reads the K/V of its context."),
    ],
    hints=["Step j takes (W + (P + j) k) / beta seconds.",
           "Sum over j = 1 ... n - 1: sum of j is n (n - 1) / 2."],
    solution=("$\\sum_{j=1}^{n-1} \\frac{W + (P + j)k}{\\beta} = \\frac{(n-1)(W + Pk)}{\\beta} + "
              "\\frac{k\\,n(n-1)}{2\\beta}$, i.e. `formulas.derive_decode_sum()['exact_sum']` at batch 1."),
)

# --- O4 multi-step: chain of thought -----------------------------------------------------------------------
_COT_MODEL, _COT_HW, _COT_PROMPT, _ANSWER, _THINK = "llama-2-7b", "rtx-4090", 1000, 250, 2000
_DIRECT = estimate(_COT_MODEL, _COT_HW, _COT_PROMPT, _ANSWER)
_REASON = estimate(_COT_MODEL, _COT_HW, _COT_PROMPT, _ANSWER + _THINK)
_Q6 = _REASON.total - _DIRECT.total
q6 = NumericQuestion(
    id="q6", set=SET, points=2,
    objective="O4 compute the total time of a response and what hidden chain-of-thought tokens cost",
    prompt=(f"Multi-step: Llama-2-7B in fp16 on an RTX 4090, a prompt of {_COT_PROMPT:,} tokens. A direct answer "
            f"has {_ANSWER} tokens. A reasoning model first generates {_THINK:,} hidden thinking tokens, then the "
            f"same {_ANSWER}-token answer. How many seconds longer does the user wait for the complete answer? "
            f"Use `estimate(...).total` for both responses."),
    expected=_Q6, unit="s", dimension="time", rel_tol=0.002,
    detect=[d.ms_vs_s(),
            d.compute_instead_of_memory(_THINK * _DIRECT.decode_first.compute_time)],
    mistakes=[
        Mistake(_REASON.total, "That is the whole wait with reasoning; the question asks how much longer it is "
                               "than the direct answer."),
        Mistake(_THINK * _DIRECT.tpot_first,
                "That charges every thinking token the first step's TPOT. The thinking tokens come later, at "
                "longer contexts: each reads more K/V. Subtract the two totals.", rel_tol=0.002),
        Mistake(_THINK * _REASON.tpot,
                "That is the mean TPOT of the whole long response times the thinking tokens, but the extra "
                "steps are the later, slower ones. Subtract the two totals.", rel_tol=0.0015),
        Mistake(_THINK * _DIRECT.tpot,
                "That charges every thinking token the direct answer's TPOT. The thinking steps come later, at "
                "longer contexts (each reads more K/V), so they are slower: subtract the two totals.",
                rel_tol=0.002),
    ],
    hints=["Both responses share the prompt: the difference is decode steps only.",
           f"Estimate both responses (prompt {_COT_PROMPT:,}; {_ANSWER + _THINK:,} and {_ANSWER} new tokens) "
           "and compare their `total`s."],
    solution=(f"{units.format_time(_REASON.total, digits=4)} - {units.format_time(_DIRECT.total, digits=4)} = "
              f"{units.format_time(_Q6, digits=4)}: every hidden token is a full decode step."),
)

# --- O3 as a function ----------------------------------------------------------------------------------------
_GPT2 = get_model("gpt2-small")
_LLAMA2 = get_model("llama-2-7b")
_Q7_CASES = [
    (_WS, _KTOK, 4096, _RTX4090.bandwidth),
    (_LLAMA2.decode_weight_bytes("fp16"), _LLAMA2.kv_bytes_per_token("fp16"), 1, get_hardware("a100-80gb").bandwidth),
    (weight_bytes(_SOURCE_7B, "fp16"), get_model("source-7b").kv_bytes_per_token("fp16"), 0, _H100.bandwidth),
    (_GPT2.decode_weight_bytes("fp32"), _GPT2.kv_bytes_per_token("fp32"), 1024, get_hardware("l4").bandwidth),
    # a context beyond Mistral's 4,096-token window: a function that carries q4's window over is wrong here
    (_LLAMA2.decode_weight_bytes("fp16"), _LLAMA2.kv_bytes_per_token("fp16"), 20001, _H100.bandwidth),
]
q7 = FunctionQuestion(
    id="q7", set=SET, points=2,
    objective="O3 add the KV-cache reads: TPOT grows with the context",
    prompt=("Write `tpot_floor(weight_bytes, kv_bytes_per_token, context, bandwidth)` returning the batch-1 "
            "TPOT floor in seconds of a decode step that reads all weights once and the K/V of `context` "
            "tokens (`kv_bytes_per_token` already counts K and V)."),
    expected=tpot_floor_reference, dimension="time", rel_tol=1e-6,
    cases=[(args, tpot_floor_reference(*args)) for args in _Q7_CASES],
    detect=[d.ms_vs_s(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda weight_bytes, kv_bytes_per_token, context, bandwidth: weight_bytes / bandwidth,
                "Your function ignores the KV cache: the step also reads context x kv_bytes_per_token bytes."),
        Mistake(lambda weight_bytes, kv_bytes_per_token, context, bandwidth:
                (weight_bytes + 2 * kv_bytes_per_token * context) / bandwidth,
                "Your function doubles the K/V: kv_bytes_per_token already includes both K and V."),
        Mistake(lambda weight_bytes, kv_bytes_per_token, context, bandwidth:
                weight_bytes / bandwidth + kv_bytes_per_token * context,
                "Your function divides only the weights by the bandwidth: the K/V bytes take time too."),
    ],
    hints=["Bytes moved = weight_bytes + context x kv_bytes_per_token.", "Seconds = bytes / bandwidth."],
    solution=("```python\ndef tpot_floor(weight_bytes, kv_bytes_per_token, context, bandwidth):\n"
              "    return (weight_bytes + context * kv_bytes_per_token) / bandwidth\n```"),
)

# --- O5 ---------------------------------------------------------------------------------------------------------
_OPTIONS = (
    "kernels reach only part of the peak bandwidth, and every step adds fixed launch and synchronisation time",
    "batch-1 decoding is compute-bound, so the FLOPs set the time",
    "the weights are copied over PCIe for every token",
    "the KV cache is recomputed from scratch at every step",
    "datasheets give the bandwidth in bits per second",
)
q8 = ChoiceQuestion(
    id="q8", set=SET, points=1,
    objective="O5 explain why measured systems sit above the floor",
    prompt=("Measured decode steps are slower than bytes / datasheet bandwidth. Which explanation is right? "
            "Answer with one of the option strings: " + "; ".join(repr(o) for o in _OPTIONS) + "."),
    expected=_OPTIONS[0], options=_OPTIONS,
    mistakes=[
        Mistake(_OPTIONS[1], "At batch 1 a step does about 2 FLOPs per weight it reads: its compute time is a "
                             "small fraction of its memory time on every GPU in the catalog."),
        Mistake(_OPTIONS[2], "The weights are loaded into GPU memory once, before the first request; PCIe "
                             "only carries token ids in and logits out."),
        Mistake(_OPTIONS[3], "That is what the KV cache avoids (lesson 03): each step computes K and V for "
                             "its own token only and reads the rest."),
        Mistake(_OPTIONS[4], "Memory bandwidth is quoted in bytes per second (GB/s, TB/s); a bits-for-bytes "
                             "mix-up would be a factor 8, not the measured gap."),
    ],
    hints=["Compare the measured achieved GB/s with the datasheet bandwidth in the H200 data.",
           "What does a step do besides streaming bytes?"],
    solution=("Kernels sustain only part of the peak bandwidth (even a plain copy does not reach it), and each "
              "step pays fixed costs: kernel launches, synchronisation, small layers that cannot fill the "
              "memory system. Lesson 08 measures both."),
)

_B1 = weights_only_batch1()
_H200 = get_hardware("h200")
_Q9 = _B1["weight_bytes"] / (_B1["ms"] / 1e3) / _H200.bandwidth
q9 = NumericQuestion(
    id="q9", set=SET, points=2,
    objective="O5 explain why measured systems sit above the floor",
    prompt=("Multi-step: `measurements.h200()['weights_only_decode_step_cuda_graph']` gives the weight bytes of a "
            "Mistral-7B decode step and, per batch, its measured time. (a) For batch 1, compute the achieved "
            "bandwidth (bytes / seconds). (b) What fraction of the H200's datasheet bandwidth "
            "(`get_hardware('h200').bandwidth`) is that? Answer as a fraction between 0 and 1."),
    expected=_Q9, rel_tol=0.005,
    detect=[d.gb_vs_gib(), d.ratio(100, "That looks like a percentage; give the fraction (between 0 and 1).",
                                   name="percent")],
    mistakes=[
        Mistake(_B1["weight_bytes"] / (_B1["ms_eager_python_loop"] / 1e3) / _H200.bandwidth,
                "That uses the eager Python loop's time; the question asks about the CUDA-graph time ('ms')."),
        Mistake(_B1["weight_bytes"] / (_B1["ms"] / 1e3) / (measurements.h200()["ceilings"]["copy_read_plus_write_GBps"]
                                                          * units.GB),
                "That compares with the measured copy ceiling; the question asks for the datasheet bandwidth."),
        Mistake(1 / _Q9, "Upside down: achieved bandwidth / datasheet bandwidth."),
    ],
    hints=["Achieved bandwidth = weight_bytes / (ms / 1000).",
           "Divide by `get_hardware('h200').bandwidth` (bytes/s)."],
    solution=(f"{_B1['weight_bytes']:,} B / {_B1['ms'] / 1e3:g} s = "
              f"{units.format_bandwidth(_B1['weight_bytes'] / (_B1['ms'] / 1e3), digits=4)}; over "
              f"{units.format_bandwidth(_H200.bandwidth)} that is {_Q9:.3f}."),
)

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8, q9]
