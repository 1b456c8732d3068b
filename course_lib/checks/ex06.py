"""Exercise set 06: prefill vs decode.

Objectives (lesson ``notebooks/06_prefill_vs_decode.ipynb``):

- O1 count each phase's FLOPs and bytes, compute its arithmetic intensity and say which bound it hits;
- O2 predict TTFT (compute-bound prefill) and TPOT (memory-bound decode), and correct the source's
  recipe that divides decode FLOPs by compute;
- O3 explain what FlashAttention changes (bytes, not FLOPs) and why TTFT is near-linear in the prompt;
- O4 combine the phases: total = TTFT + (n - 1)·TPOT, tokens per second, the other conventions;
- O5 predict how batching raises aggregate throughput up to the critical batch;
- O6 measure on this machine and account for what the roofline leaves out (per-op dispatch overhead).

Every expected value is computed here from ``course_lib`` (the catalogs, the generated formulas and
the estimator); none is typed in.

Lessons: 06
"""
from __future__ import annotations

import math

from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core.numeric import raw as g
from course_lib.core import units
from course_lib.core.estimator import estimate, weight_bytes
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model

__all__ = ["QUESTIONS"]

SET = "ex06"

_SOURCE_7B = get_model("source-7b").params            # 7e9: the source's illustrative 7B
_A100 = get_hardware("a100-40gb")
_H100 = get_hardware("h100-sxm")

# --- q1: the TTFT floor of a 1000-token prompt (compute-bound) ------------------------------------------
_Q1_P = 1000
_Q1_FLOPS = 2 * _SOURCE_7B * _Q1_P
_Q1_MS = g.compute_time(_Q1_FLOPS, _A100.flops("fp16"), 1.0) * 1e3
q1 = NumericQuestion(
    id="q1", set=SET, points=2, unit="ms", dimension="time",
    objective="O2 predict TTFT as prefill FLOPs / peak compute",
    prompt=("The source's 7B model (7e9 parameters) in fp16 on an A100-40GB gets a 1000-token prompt. Counting "
            "2·N·P FLOPs for prefill (ignore attention and the lm_head) at 100 % of the fp16 peak "
            "(`get_hardware('a100-40gb').flops('fp16')`), what is the TTFT floor in milliseconds?"),
    expected=_Q1_MS, rel_tol=0.01,
    detect=[d.ms_vs_s(), d.alternative(
        weight_bytes(_SOURCE_7B, "fp16") / _A100.bandwidth * 1e3,
        "That is the time to read the weights once (bytes / bandwidth). Prefill reads them once too, but "
        "uses each weight for all 1000 prompt tokens: its FLOPs take far longer than its bytes. Prefill is "
        "compute-bound: FLOPs / peak FLOP/s.", name="memory_instead_of_compute")],
    mistakes=[
        Mistake(_Q1_MS / 2, "That is half the answer. Two slips give it: N·P FLOPs (each weight does a multiply AND "
                            "an add per token: 2·N·P), or the 2:4 structured-sparsity peak (twice the dense one; a "
                            "dense prefill gets the dense peak)."),
        Mistake(g.compute_time(_Q1_FLOPS, _A100.flops("fp16"), 0.6) * 1e3,
                "That applies the source's 60 % utilisation; the question asks for the floor at 100 %."),
        Mistake(g.compute_time(_Q1_FLOPS, _A100.flops("fp32"), 1.0) * 1e3,
                "That uses the fp32 peak (no tensor cores); the model runs in fp16."),
        Mistake(g.compute_time(2 * _SOURCE_7B, _A100.flops("fp16"), 1.0) * 1e3,
                "That is 1/1000 of the answer. Two slips give it: the time in seconds where milliseconds are asked "
                "(a bare number is read as ms), or one token's FLOPs (2·N) where the prompt has 1000 tokens, all "
                "processed in the prefill pass."),
    ],
    hints=["Prefill FLOPs ≈ 2 × parameters × prompt tokens.",
           "TTFT floor = FLOPs / peak FLOP/s; convert seconds to milliseconds."],
    solution=(f"2 × 7e9 × 1000 = {units.Quantity(_Q1_FLOPS, 'flops').format()}; / "
              f"{units.format_flop_rate(_A100.flops('fp16'))} = **{_Q1_MS:.1f} ms**. Reading the weights takes only "
              f"{units.format_time(weight_bytes(_SOURCE_7B, 'fp16') / _A100.bandwidth)}: prefill is compute-bound."),
)

# --- q2: arithmetic intensity of a batched decode step ----------------------------------------------------
_Q2_B = 8
_Q2_I = g.arithmetic_intensity(g.gemv_flops(1, _SOURCE_7B, _Q2_B), g.weight_bytes(_SOURCE_7B, 2))
q2 = NumericQuestion(
    id="q2", set=SET, points=1,
    objective="O1 compute a phase's arithmetic intensity",
    prompt=("A decode step of the source's 7B model in fp16 at batch 8: counting only the weights (2 FLOPs per "
            "weight per sequence, 2 bytes per weight; ignore the KV cache and attention), what is its arithmetic "
            "intensity in FLOP per byte?"),
    expected=_Q2_I, rel_tol=0.01,
    detect=[d.forgot_batch(_Q2_B, feedback=(
        "That is the batch-1 intensity. Every weight read once is used by all 8 sequences of the batch: "
        "the FLOPs grow with the batch, the bytes do not."))],
    mistakes=[
        Mistake(1 / _Q2_I, "Upside down: intensity is FLOPs divided by bytes."),
        Mistake(_Q2_I / 2, "That counts 4 bytes per weight (fp32) or 1 FLOP per weight; fp16 is 2 bytes and a "
                           "multiply-add is 2 FLOPs."),
        Mistake(_Q2_I * 2, "That counts 1 byte per weight (8-bit); fp16 weights take 2 bytes."),
    ],
    hints=["FLOPs = 2 × N × batch; bytes = 2 × N.", "Divide FLOPs by bytes: N cancels."],
    solution=f"(2 · N · 8) / (2 · N) = **{_Q2_I:g} FLOP/byte**: still far below an A100's ridge point of "
             f"{_A100.ridge_point('fp16'):.0f} FLOP/byte, so the step is memory-bound.",
)

# --- q3: the decode floor, and the source's recipe as the mistake -------------------------------------------
_Q3_MS = g.memory_time(weight_bytes(_SOURCE_7B, "fp16"), _A100.bandwidth, 1.0) * 1e3
_Q3_RECIPE_MS = g.compute_time(2 * _SOURCE_7B, _A100.flops("fp16"), 1.0) * 1e3
q3 = NumericQuestion(
    id="q3", set=SET, points=2, unit="ms", dimension="time",
    objective="O2 predict TPOT as bytes / bandwidth, not FLOPs / compute",
    prompt=("The same model on the same A100-40GB, batch 1: what is the floor of the time per output token "
            "(TPOT) in milliseconds? Count the weights only (7e9 × 2 bytes, read once per step)."),
    expected=_Q3_MS, rel_tol=0.01,
    detect=[d.compute_instead_of_memory(_Q3_RECIPE_MS, feedback=(
        "That is the source material's recipe: decode FLOPs (2·N) divided by peak compute. A decode step uses "
        "each weight for ONE multiply-add but must read it from memory: the bytes, not the FLOPs, set the "
        f"time. Use bytes / bandwidth ({_Q3_MS / _Q3_RECIPE_MS:.0f} times longer here).")),
        d.ms_vs_s(), d.gb_vs_gib()],
    mistakes=[
        Mistake(g.compute_time(2 * _SOURCE_7B, _A100.flops("fp16"), 0.6) * 1e3,
                "That is the source's recipe with its 60 % utilisation: FLOPs / compute. Decode is memory-bound: "
                "bytes / bandwidth."),
        Mistake(_Q3_MS * 2, "That is fp32 (4 bytes per weight); the model is in fp16."),
        Mistake(_Q3_MS / 2, "That is 8-bit weights (1 byte each); fp16 takes 2."),
        Mistake(1e3 / _Q3_MS, "That is tokens per second; the question asks for milliseconds per token."),
    ],
    hints=["Bytes per step: every weight once, 2 bytes each.", "TPOT floor = bytes / bandwidth, in ms."],
    solution=(f"{units.format_bytes(weight_bytes(_SOURCE_7B, 'fp16'))} / {units.format_bandwidth(_A100.bandwidth)} "
              f"= **{_Q3_MS:.2f} ms**. The source's recipe (2·N FLOPs / compute) gives {_Q3_RECIPE_MS:.4f} ms: "
              f"about two hundred times too fast at equal utilisation ({_Q3_MS / _Q3_RECIPE_MS:.0f} times here: the "
              f"A100's ridge point of {_A100.ridge_point('fp16'):.0f} FLOP per byte over the one FLOP per byte of a "
              f"weights-only decode step), and "
              f"{_Q3_MS / (_Q3_RECIPE_MS / 0.6):.0f} times against the recipe's 60 % utilisation. It treats decode as "
              f"compute-bound."),
)


# --- q4: total latency as a function ----------------------------------------------------------------------
def _total(ttft, tpot, n):
    return g.total_latency(ttft, n, tpot)


q4 = FunctionQuestion(
    id="q4", set=SET, points=2, dimension="time", rel_tol=1e-9,
    objective="O4 combine TTFT and TPOT into the total latency",
    prompt="Write total_latency(ttft, tpot, n) -> seconds until the n-th generated token has arrived.",
    expected=_total,
    cases=[((0.1, 0.02, 1), _total(0.1, 0.02, 1)), ((0.5, 0.01, 101), _total(0.5, 0.01, 101)),
           ((0.2, 0.05, 10), _total(0.2, 0.05, 10)), ((1e-3, 1e-3, 1000), _total(1e-3, 1e-3, 1000))],
    mistakes=[
        Mistake(lambda ttft, tpot, n: ttft + n * tpot,
                "One decode step too many: the first token comes out of prefill (TTFT), so n tokens need only "
                "n - 1 decode steps after it (check n = 1: the answer is the TTFT)."),
        Mistake(lambda ttft, tpot, n: n * tpot, "That leaves out the prefill: the first token costs the TTFT."),
        Mistake(lambda ttft, tpot, n: (ttft + (n - 1) * tpot) / n,
                "That is the end-to-end time per token; the question asks for the total."),
    ],
    hints=["Which token does prefill produce?", "After the first token, each further token costs one decode step."],
    solution="```python\nreturn ttft + (n - 1) * tpot\n```\nThe first token comes with the prefill; the other n - 1 "
             "each take one decode step.",
)

# --- q5: tokens per second for one user (multi-step, from the estimator) -----------------------------------
_Q5 = estimate("llama-3-8b", "h100-sxm", prompt_tokens=4000, new_tokens=50)
_Q5_N = 50
_Q5_TPS = g.tokens_per_second(_Q5_N, _Q5.ttft, _Q5.tpot)
q5 = NumericQuestion(
    id="q5", set=SET, points=2, rel_tol=0.003,
    objective="O4 compute tokens per second per user from TTFT and TPOT",
    prompt=("Run `e = estimate('llama-3-8b', 'h100-sxm', prompt_tokens=4000, new_tokens=50)`. From `e.ttft` and "
            "`e.tpot` (not `e.tps`), how many tokens per second does this user see over the whole 50-token "
            "response?"),
    expected=_Q5_TPS,
    detect=[d.decode_steps(g.tokens_per_second(_Q5_N, _Q5.ttft + _Q5.tpot, _Q5.tpot))],
    mistakes=[
        Mistake(1 / _Q5.tpot, "That is the decode speed once generation runs (1 / TPOT); the user also waits "
                              "for the TTFT of a 4000-token prompt."),
        Mistake(_Q5_N / _Q5.ttft, "That divides by the TTFT only; add the decode steps."),
        Mistake(1e3 / _Q5_TPS, "That is milliseconds per token (end-to-end / n); invert it for tokens per second."),
    ],
    hints=["Total = TTFT + (n − 1)·TPOT.", "Tokens per second = n / total."],
    solution=(f"TTFT = {units.format_time(_Q5.ttft)}, TPOT = {units.format_time(_Q5.tpot)}; total = TTFT + 49·TPOT = "
              f"{units.format_time(_Q5.total)}; 50 / total = **{_Q5_TPS:.1f} tokens/s** (1 / TPOT alone would say "
              f"{1 / _Q5.tpot:.0f})."),
)

# --- q6: the critical batch --------------------------------------------------------------------------------
_Q6_RATIO = g.critical_batch(_H100.flops("fp16"), 1, _H100.bandwidth)
_Q6 = math.ceil(_Q6_RATIO)  # a batch is whole: the first one at or above the quotient
q6 = NumericQuestion(
    id="q6", set=SET, points=2, rel_tol=0, whole="up",
    whole_feedback=("A batch is a whole number of sequences: the first whole batch at or above "
                    "peak · b_w / (2 · bandwidth), so round the quotient up."),
    objective="O5 predict the critical batch where decode turns compute-bound",
    prompt=("An H100 SXM decodes a model whose weights are stored in int8 (1 byte each) and computed in fp16 "
            "(`get_hardware('h100-sxm')`: fp16 peak and bandwidth). Ignoring the KV cache, from which batch size "
            "on are the weight GEMMs of a decode step compute-bound? Give a whole batch."),
    expected=_Q6,
    mistakes=[
        Mistake(_H100.ridge_point("fp16"),
                "That is twice the answer. Three slips give it: the ridge point in FLOP per byte taken as the batch, "
                "2-byte weights (these are int8, 1 byte), or the fp8 peak (the weights are computed in fp16). "
                "A batch of B does 2·B FLOPs per weight of b_w bytes: B = peak · b_w / (2 · bandwidth).",
                rel_tol=0.005),
        Mistake(math.floor(_Q6_RATIO), "That rounds the quotient down: at that batch the intensity is still just below "
                                       "the ridge point. The first compute-bound batch is the quotient rounded up."),
        Mistake(4 * _Q6_RATIO, "Multiplied by 2 instead of dividing: each weight gives 2 FLOPs per sequence.",
                rel_tol=0.005),
        Mistake(1 / _Q6_RATIO, "Upside down: peak FLOP/s × bytes per weight / (2 × bandwidth).", rel_tol=0.01),
    ],
    hints=["Intensity at batch B with b_w bytes per weight: 2·B / b_w FLOP per byte.",
           "Set it equal to the ridge point peak / bandwidth and solve for B."],
    solution=(f"B = Π · b_w / (2 β) = {units.format_flop_rate(_H100.flops('fp16'))} × 1 / (2 × "
              f"{units.format_bandwidth(_H100.bandwidth)}) = {_Q6_RATIO:.1f}, so from batch **{_Q6}** on. "
              f"Below it a step costs about the same at any batch, so aggregate tokens/s grows with the batch."),
)

# --- q7: where attention overtakes the weights (expression) -------------------------------------------------
_Q7_M = get_model("llama-3-8b")
# the two terms of prefill_flops at P = 1 (weights 2·N, causal attention 2·L·H·d): their ratio is the crossover
_Q7_P = (g.prefill_flops(1, _Q7_M.block_params, 1, 0, 0, 0, _Q7_M.heads, _Q7_M.attn_dim, 0)
         / g.prefill_flops(1, 0, 1, 0, 0, _Q7_M.layers, _Q7_M.heads, _Q7_M.attn_dim, 0))
q7 = ExpressionQuestion(
    id="q7", set=SET, points=2, symbols=["N", "L", "H", "d"],
    objective="O3 find where causal attention's FLOPs overtake 2·N·P",
    prompt=("Prefill FLOPs are 2·N·P for the weights plus 2·L·H·d·P² for causal attention (N block parameters, L "
            "layers, H query heads of dimension d). At which prompt length P are the two equal? A formula in "
            "N, L, H, d."),
    expected="N/(L*H*d)",
    mistakes=[
        Mistake("2*N/(L*H*d)", "Both terms carry the factor 2: it cancels."),
        Mistake("N/(2*L*H*d)", "That counts all P² (query, key) pairs, a full score matrix (4·L·H·d·P² FLOPs). "
                               "Causal attention scores each token only against itself and the earlier ones: "
                               "about P²/2 pairs, 2·L·H·d·P² FLOPs."),
        Mistake("sqrt(N/(L*H*d))", "Divide both sides by P first: 2·N = 2·L·H·d·P is linear in P."),
    ],
    hints=["Solve 2·N·P = 2·L·H·d·P² for P > 0.", "Divide both sides by 2·P."],
    solution=(f"P = N / (L·H·d). For Llama-3-8B: {_Q7_M.block_params:,} / ({_Q7_M.layers} · {_Q7_M.heads} · "
              f"{_Q7_M.attn_dim}) ≈ {_Q7_P:,.0f} tokens, beyond its {_Q7_M.max_positions:,}-token context window. "
              f"Below that the weights dominate and TTFT grows nearly linearly with the prompt; FlashAttention does "
              f"not change these FLOPs. (For a sliding-window model such as Mistral-7B v0.1 the P² term stops "
              f"growing quadratically past the window, so the formula is only an upper bound there.)"),
)

# --- q8: a roofline plus per-op overhead (multi-step) ----------------------------------------------------------
_Q8_ROOF_MS, _Q8_OPS, _Q8_OP_US = 0.4, 150, 12.0
_Q8_MS = g.step_time_with_overhead(_Q8_ROOF_MS / 1e3, _Q8_OPS, _Q8_OP_US / 1e6) * 1e3
q8 = NumericQuestion(
    id="q8", set=SET, points=2, unit="ms", dimension="time", rel_tol=0.01,
    objective="O6 add per-op dispatch overhead to a roofline time",
    prompt=("A small model's decode step has a roofline time of 0.4 ms on a laptop. The step runs 150 PyTorch "
            "ops one after another, and each costs 12 µs of dispatch however small it is. Predicted step time, "
            "in milliseconds?"),
    expected=_Q8_MS, detect=[d.ms_vs_s()],
    mistakes=[
        Mistake(_Q8_ROOF_MS, "That is the roofline alone: the dispatch cost of 150 ops comes on top."),
        Mistake(_Q8_OPS * _Q8_OP_US / 1e3, "That is the overhead alone: add the roofline time."),
        Mistake(_Q8_ROOF_MS + _Q8_OPS * _Q8_OP_US, "Mixed units: 12 µs is 0.012 ms."),
    ],
    hints=["Overhead = ops × seconds per op.", "Step time = roofline time + overhead; keep one unit."],
    solution=(f"0.4 ms + 150 × 0.012 ms = **{_Q8_MS:.1f} ms**: in this example the fixed cost is most of the step, "
              f"so such a model runs several times slower than bytes / bandwidth alone predicts (lesson 06 §9 "
              f"measures t_op on your machine)."),
)

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8]
