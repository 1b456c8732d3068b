"""Exercise set 09: capstone, plan a deployment (lesson ``notebooks/09_capstone.ipynb``).

Objectives (as numbered in the lesson):

* O1 price a deployment: TTFT, TPOT, total time, tokens per second per user and for the whole batch,
  and which bound (memory or compute) holds in prefill and in decode;
* O2 check the memory one GPU needs (the weights plus the KV cache of every sequence at its final
  length) and find the largest batch that fits;
* O3 find the largest batch that meets a latency budget (a small planning function, the static-batch
  baseline) and plan with continuous batching (sequences in flight per GPU, the steady-state TPOT);
* O4 choose hardware, precision and prefix caching and defend the choice with numbers (which resource
  sets which budget);
* O5 split a model over several GPUs with tensor (and expert) parallelism: memory per GPU and the
  cost of the collectives, their latency and the link bandwidth.

Every expected value is computed here from ``course_lib`` (the estimator, the dashboard's functions
and the generated formulas), never typed in. Feedback never states an expected value.

Lessons: 09
"""
from __future__ import annotations

import math

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake, numbers_only
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core.numeric import raw as g
from course_lib.core import units
from course_lib.core.capstone import COLLECTIVE_LATENCIES, DashboardState, best_batch, compute, max_batch_that_fits
from course_lib.core.estimator import estimate
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model

__all__ = ["QUESTIONS", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "largest_batch_reference",
           "allreduce_per_step", "allreduce_expression", "BATCH_LIMIT"]

SET = "ex09"

#: The planning function searches batches 1 ... BATCH_LIMIT.
BATCH_LIMIT = 256


def largest_batch_reference(model, hardware, prompt_tokens, new_tokens, ttft_budget, tpot_budget):
    """Largest batch in 1..BATCH_LIMIT that fits one GPU and meets both budgets (seconds); 0 if none."""
    state = DashboardState(model=model, hardware=hardware, prompt_tokens=prompt_tokens, new_tokens=new_tokens)
    return best_batch(state, ttft_budget, tpot_budget, limit=BATCH_LIMIT)


def allreduce_per_step(L, G, B, h, b, beta, alpha0, alpha):
    """Seconds of one decode step's all-reduces: 2 per layer of B·h values of b bytes over G GPUs, each paying
    its start-up latency alpha0 and 2 (G - 1) steps of alpha (a ring)."""
    return 2 * L * g.allreduce_ring_time(G, B * h * b, beta, alpha0, alpha)


def allreduce_expression():
    """:func:`allreduce_per_step` in the exercise's sympy symbols L, G, B, h, b, beta, alpha0, alpha."""
    import sympy as sp

    return allreduce_per_step(*sp.symbols("L G B h b beta alpha0 alpha", positive=True))


_L3 = get_model("llama-3-8b")
_A100 = get_hardware("a100-80gb")
_H100 = get_hardware("h100-sxm")
_L40S = get_hardware("l40s")
_P, _N = 2048, 300                    # the exercises' chat requests: prompt and answer tokens

# --- O1: TTFT of a batch of prompts ---------------------------------------------------------------------
_Q1_B, _Q1_P = 8, 1500
_Q1 = estimate(_L3, _A100, _Q1_P, _N, batch=_Q1_B)
q1 = NumericQuestion(
    id="q1", set=SET, points=1,
    objective="O1 price a deployment: TTFT, TPOT, tokens per second and the bound in each phase",
    prompt=(f"Llama-3-8B in fp16 on an A100 80GB (efficiencies 1). {_Q1_B} requests of {_Q1_P:,} prompt tokens "
            f"arrive together and are prefilled in one pass. What is their TTFT, in ms? Use `estimate(...)` with "
            f"`batch={_Q1_B}`."),
    expected=_Q1.ttft * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s(), d.forgot_batch(_Q1_B, feedback=(
        "That is the TTFT of a single request. All the prompts of the batch are prefilled in the same pass: "
        "the pass does the work of every one of them."))],
    mistakes=[
        Mistake(_Q1.prefill.memory_time * 1e3,
                "That is the prefill's memory time (bytes / bandwidth). Prefill multiplies every weight by "
                "thousands of tokens: it is compute-bound, so its time is FLOPs / peak FLOP/s."),
        Mistake(estimate(_L3, _A100, _Q1_P * _Q1_B, _N).ttft * 1e3,
                "That prefills one prompt as long as all of them together. Each request attends only to its own "
                "tokens: the attention FLOPs grow with each prompt's length squared, times the batch."),
        Mistake(2 * _L3.params * _Q1_P * _Q1_B / _A100.flops("fp16") * 1e3,
                "That is 2 x all parameters x tokens / peak: it multiplies the embedding table (a lookup) and "
                "runs the lm_head on every prompt token, but prefill needs the logits of the last token only. "
                "Use the estimator's prefill FLOPs.", rel_tol=0.005),
    ],
    hints=["`estimate('llama-3-8b', 'a100-80gb', 1500, 300, batch=8)` has a `ttft` in seconds.",
           "Check `prefill_bound`: which term, FLOPs or bytes, sets the time?"],
    solution=(f"`estimate('llama-3-8b', 'a100-80gb', {_Q1_P}, {_N}, batch={_Q1_B}).ttft` = "
              f"{units.format_time(_Q1.ttft, digits=4)}, compute-bound: "
              f"{units.format_flops(_Q1.prefill.flops)} at {units.format_flop_rate(_A100.flops('fp16'))}."),
)

# --- O2 multi-step: memory per GPU ------------------------------------------------------------------------
_Q2_B = 32
_Q2 = estimate(_L3, _H100, _P, _N, batch=_Q2_B)
_KV1 = _L3.kv_bytes_per_token("fp16")
_NOMINAL_WEIGHTS = 8e9 * 2          # the name's 8B at 2 bytes: the nominal count, not the model's
q2 = NumericQuestion(
    id="q2", set=SET, points=2,
    objective="O2 check the memory one GPU needs and find the largest batch that fits",
    prompt=(f"Multi-step: Llama-3-8B in fp16 serves a batch of {_Q2_B} chats, each with a {_P:,}-token prompt and "
            f"a {_N}-token answer. (a) Bytes of the weights (`get_model('llama-3-8b').weight_bytes('fp16')`). "
            f"(b) KV-cache bytes of all the sequences at their final length (prompt + answer). (c) The total "
            f"memory needed, in GB (1 GB = 1e9 bytes)."),
    expected=_Q2.memory_needed / 1e9, unit="GB", dimension="bytes", rel_tol=0.002,
    detect=[d.gb_vs_gib(), d.bits_vs_bytes()],
    mistakes=[
        Mistake((_NOMINAL_WEIGHTS + _Q2.kv_bytes) / 1e9,
                "That prices the weights from the nominal 8B (8e9 x 2 bytes). Llama-3-8B has "
                f"{units.format_params(_L3.params)} parameters: take `weight_bytes('fp16')` from the catalog."),
        Mistake((_Q2.weights_bytes + _Q2.kv_bytes / 2) / 1e9,
                "The KV cache holds a key AND a value vector per token, layer and KV head: count both."),
        Mistake((_Q2.weights_bytes + _Q2.kv_bytes * _L3.heads // _L3.kv_heads) / 1e9,
                "That caches K/V for every query head. Llama-3-8B uses grouped-query attention: only its "
                "KV heads are cached."),
        Mistake((_Q2.weights_bytes + _KV1 * (_P + _N)) / 1e9,
                "That is the KV cache of one chat. Every sequence of the batch keeps its own cache."),
        Mistake((_Q2.weights_bytes + _KV1 * _P * _Q2_B) / 1e9,
                "That caches the prompts only. The answers' tokens are cached too as they are generated: size "
                "the memory for the final length."),
        Mistake(_Q2.weights_bytes / 1e9, "That is the weights alone; add the KV cache of every sequence."),
    ],
    hints=["KV bytes per token: `get_model('llama-3-8b').kv_bytes_per_token('fp16')` (K and V, all layers).",
           f"KV cache = bytes per token x ({_P} + {_N}) tokens x {_Q2_B} sequences; add the weights; / 1e9."],
    solution=(f"{units.format_bytes(_Q2.weights_bytes, digits=4)} of weights + "
              f"{units.format_bytes(_KV1, digits=4)} x {_P + _N:,} x {_Q2_B} = "
              f"{units.format_bytes(_Q2.kv_bytes, digits=4)} of KV cache: "
              f"{units.format_bytes(_Q2.memory_needed, digits=4)} (`estimate(...).memory_needed`)."),
)

# --- O2 multi-step: the largest batch that fits -------------------------------------------------------------
_Q3_STATE = DashboardState(model="llama-3-8b", hardware="l40s", prompt_tokens=_P, new_tokens=_N)
_Q3 = max_batch_that_fits(_Q3_STATE)
_SEQ = _KV1 * (_P + _N)
q3 = NumericQuestion(
    id="q3", set=SET, points=2,
    objective="O2 check the memory one GPU needs and find the largest batch that fits",
    prompt=(f"Multi-step: the same chats ({_P:,} + {_N} tokens) with Llama-3-8B in fp16 on one L40S "
            f"(`get_hardware('l40s').capacity` bytes). (a) Memory left after the weights. (b) KV bytes of one "
            f"chat at its final length. (c) The largest whole number of chats whose caches fit beside the "
            f"weights (activations not counted)."),
    expected=_Q3, rel_tol=0, whole="down",
    mistakes=[
        Mistake(math.floor(_L40S.capacity / _SEQ), "That gives the whole memory to the KV cache: the weights "
                                                   "take their share first."),
        Mistake(math.floor((_L40S.capacity - _L3.weight_bytes()) / (_SEQ * _L3.heads // _L3.kv_heads)),
                "That caches K/V for every query head; only the KV heads are cached (grouped-query attention)."),
        Mistake(math.floor((_L40S.capacity_marketing_gb * 2 ** 30 - _L3.weight_bytes()) / _SEQ),
                "That reads the box's 48 GB as binary GiB (48 x 2^30 bytes). The card reports less: `capacity` is "
                "the memory the driver reports (nvidia-smi), already in bytes: use it as it is. What it leaves "
                "beside the caches is headroom a real server keeps back anyway for activations and the runtime."),
        Mistake(math.floor((_L40S.capacity_marketing_gb * 1e9 - _L3.weight_bytes()) / _SEQ),
                "That takes the box's 48 GB as 48e9 bytes. The catalog's `capacity` is what the driver reports "
                "(a little more here): use it as it is."),
        Mistake(math.floor((_L40S.capacity - _L3.weight_bytes()) / (_KV1 * _P)),
                "That sizes each cache for the prompt only; the answers' tokens are cached too."),
        Mistake((_L40S.capacity - _L3.weight_bytes()) / _SEQ,
                "Round down: only whole chats fit (part of a chat's cache serves nobody), so take the floor of "
                "the quotient."),
    ],
    hints=["Free memory = capacity - `get_model('llama-3-8b').weight_bytes('fp16')`.",
           "Divide by the KV bytes of one chat (prompt + answer tokens) and round down."],
    solution=(f"({units.format_bytes(_L40S.capacity)} - {units.format_bytes(_L3.weight_bytes(), digits=4)}) / "
              f"{units.format_bytes(_SEQ, digits=4)} per chat, rounded down: {_Q3} chats "
              f"(`course_lib.core.capstone.max_batch_that_fits`)."),
)

# --- O1: aggregate tokens per second ---------------------------------------------------------------------------
_Q4 = _Q2                                   # Llama-3-8B, H100 SXM, batch 32, 2048 + 300 tokens
q4 = NumericQuestion(
    id="q4", set=SET, points=1,
    objective="O1 price a deployment: TTFT, TPOT, tokens per second and the bound in each phase",
    prompt=(f"Llama-3-8B in fp16 on an H100 SXM, a batch of {_Q2_B} chats ({_P:,}-token prompts, {_N}-token "
            f"answers, all starting together). How many tokens per second does the GPU produce for all users "
            f"together, counted over the whole response (prefill included)? Plain number (tokens/s)."),
    expected=_Q4.tps_aggregate, rel_tol=0.001,
    detect=[d.forgot_batch(_Q2_B, feedback=(
        "That is the rate one user sees. The GPU produces that for every sequence of the batch at once."))],
    mistakes=[
        Mistake(_Q2_B / _Q4.tpot, "That is the batch's decode rate alone (batch / TPOT): it leaves out the "
                                  "time of the prefill, which every response waits for first.", rel_tol=0.005),
        Mistake(1 / _Q4.tpot, "That is one user's decode speed (1 / TPOT); the question asks for all users over "
                              "the whole response."),
        Mistake(_H100.flops("fp16") / (2 * _L3.params),
                "That is peak FLOP/s / FLOPs per token: the rate if every token cost only its FLOPs at the "
                "datasheet peak. Decoding at this batch is limited by memory (each step reads the weights and "
                "every sequence's KV cache), and the prefill takes time too: use the estimator's total."),
        Mistake(_Q2_B * (_N - 1) / _Q4.total,
                f"That counts {_N - 1} tokens per response; each response has {_N}: the first comes out of the "
                "prefill, the other n - 1 out of the decode steps.", rel_tol=0.0004),
        Mistake(_Q2_B * _N / (_Q4.ttft + _N * _Q4.tpot),
                "Count the decode steps again: the first new token comes out of prefill, so n new tokens "
                "need n - 1 decode steps after it (total = TTFT + (n - 1) x TPOT).", rel_tol=0.0004),
    ],
    hints=["`estimate(..., batch=32)` has `tps` (one user: n / total) and `tps_aggregate`.",
           "Aggregate = batch x n / total, where total = TTFT + (n - 1) x TPOT."],
    solution=(f"{_Q2_B} x {_N} tokens / {units.format_time(_Q4.total, digits=4)} = {_Q4.tps_aggregate:.0f} "
              f"tokens/s (`tps_aggregate`); each user sees {_Q4.tps:.1f} tokens/s."),
)

# --- O3: the planning function -----------------------------------------------------------------------------------
_Q5_CASES = [
    ("llama-3-8b", "h100-sxm", 2048, 300, 1.0, 0.05),      # the TTFT budget binds
    ("llama-3-8b", "l40s", 128, 300, 5.0, 0.025),          # the TPOT budget binds
    ("llama-3-8b", "rtx-4090", 2048, 2000, 30.0, 0.5),     # memory binds
    ("llama-2-13b", "rtx-4090", 512, 100, 1.0, 0.1),       # the weights alone do not fit: 0
    ("mistral-7b", "h200", 1024, 256, 0.03, 0.02),         # a generous device, a tight TTFT
]


def _scan(model, hardware, P, n, ttft_b, tpot_b, *, memory=True, ttft=True, tpot=True, first_fail=False):
    best = 0
    for b in range(1, BATCH_LIMIT + 1):
        e = estimate(model, hardware, P, n, batch=b)
        ok = ((not memory or e.fits) and (not ttft or e.ttft <= ttft_b) and (not tpot or e.tpot <= tpot_b))
        if not ok:
            return b if first_fail else best
        best = b
    return best


q5 = FunctionQuestion(
    id="q5", set=SET, points=2,
    objective="O3 find the largest batch that meets a latency budget",
    prompt=(f"Write `largest_batch(model, hardware, prompt_tokens, new_tokens, ttft_budget, tpot_budget)` returning "
            f"the largest batch in 1 ... {BATCH_LIMIT} whose `estimate(...)` (fp16, efficiencies 1) fits in memory "
            f"(`.fits`) and meets both budgets (`.ttft <= ttft_budget`, `.tpot <= tpot_budget`, in seconds); "
            f"0 if even batch 1 fails."),
    expected=largest_batch_reference, rel_tol=0, abs_tol=0,
    cases=[(args, largest_batch_reference(*args)) for args in _Q5_CASES],
    mistakes=[
        Mistake(lambda *a: _scan(*a, memory=False),
                "Your function ignores memory: a batch whose weights and KV cache do not fit cannot run, however "
                "fast it would be. Check `.fits`."),
        Mistake(lambda *a: _scan(*a, ttft=False),
                "Your function ignores the TTFT budget: all prompts of a batch are prefilled together, so TTFT "
                "grows with the batch."),
        Mistake(lambda *a: _scan(*a, tpot=False),
                "Your function ignores the TPOT budget: every decode step reads the KV cache of the whole batch, "
                "so TPOT grows with the batch."),
        Mistake(lambda *a: _scan(*a, first_fail=True),
                "Off by one: your function returns the first batch that fails, not the last one that passes."),
    ],
    hints=["Loop b = 1, 2, ...; compute `e = estimate(model, hardware, prompt_tokens, new_tokens, batch=b)`.",
           "TTFT, TPOT and memory only grow with the batch: stop at the first batch that fails and return the one "
           "before it."],
    solution=("```python\ndef largest_batch(model, hardware, prompt_tokens, new_tokens, ttft_budget, tpot_budget):\n"
              "    best = 0\n"
              f"    for b in range(1, {BATCH_LIMIT + 1}):\n"
              "        e = estimate(model, hardware, prompt_tokens, new_tokens, batch=b)\n"
              "        if not (e.fits and e.ttft <= ttft_budget and e.tpot <= tpot_budget):\n"
              "            break\n"
              "        best = b\n"
              "    return best\n```\n"
              "`course_lib.core.capstone.best_batch` does the same by bisection."),
)

# --- O4: which resource sets which budget -----------------------------------------------------------------------------
_OPTIONS = (
    "it stays the same: the TTFT of a batch is compute-bound and both have the same fp16 FLOP/s; "
    "the H200 lowers TPOT and holds more sequences",
    "it grows in proportion to the memory bandwidth",
    "it grows in proportion to the memory capacity",
    "it shrinks, because the H200's larger memory is slower to fill",
)
_H200 = get_hardware("h200")
q6 = ChoiceQuestion(
    id="q6", set=SET, points=1,
    objective="O4 choose hardware, precision and prefix caching and defend the choice with numbers",
    prompt=("A deployment of Llama-3-8B in fp16 is limited by its TTFT budget (all prompts of a batch are "
            "prefilled together). You move it from an H100 SXM to an H200, which has more memory bandwidth and "
            "capacity but the same dense fp16 FLOP/s. What happens to the largest batch that meets the TTFT "
            "budget? Answer with one of: " + "; ".join(repr(o) for o in _OPTIONS) + "."),
    expected=_OPTIONS[0], options=_OPTIONS,
    mistakes=[
        Mistake(_OPTIONS[1], "Bandwidth sets the decode steps (memory-bound), not the prefill: a batch's prefill "
                             "multiplies each weight by thousands of tokens and is compute-bound."),
        Mistake(_OPTIONS[2], "Capacity decides how many sequences fit, not how fast their prompts are processed; "
                             "here the TTFT budget binds first."),
        Mistake(_OPTIONS[3], "Memory is not filled per request: the weights are loaded once, and the prefill's time "
                             "is set by its FLOPs."),
    ],
    hints=["Check `prefill_bound` of `estimate('llama-3-8b', 'h200', 2048, 300, batch=16)`.",
           "Compare `get_hardware('h100-sxm').flops('fp16')` with the H200's."],
    solution=(f"Prefill of a batch is compute-bound: both GPUs have {units.format_flop_rate(_H200.flops('fp16'))} "
              f"(fp16, dense), so the same batch gives the same TTFT and the TTFT-limited batch does not change. The "
              f"H200's {units.format_bandwidth(_H200.bandwidth)} (against "
              f"{units.format_bandwidth(_H100.bandwidth)}) shortens each decode step, and its capacity holds more "
              f"caches: it helps when TPOT or memory binds."),
)

# --- O5: the all-reduce term as a formula -----------------------------------------------------------------------------
q7 = ExpressionQuestion(
    id="q7", set=SET, points=2,
    objective="O5 split a model over several GPUs with tensor parallelism",
    prompt=("Tensor parallelism over G GPUs adds two all-reduces per layer to every decode step, each of the "
            "activations of the batch: B x h values of b bytes. A ring all-reduce pays a start-up latency alpha0, "
            "then 2 (G - 1) steps of latency alpha each, and moves 2 (G - 1) / G of the message through each GPU's "
            "link of bandwidth beta. Give the all-reduce time of one decode step of an L-layer model as a sympy "
            "expression of `L, G, B, h, b, beta, alpha0, alpha = sympy.symbols('L G B h b beta alpha0 alpha', "
            "positive=True)`."),
    expected=allreduce_expression(),
    symbols=["L", "G", "B", "h", "b", "beta", "alpha0", "alpha"],
    mistakes=[
        Mistake("2*L*2*(G - 1)/G*B*h*b/beta",
                "That is the bandwidth term alone. Every all-reduce also pays its latency, alpha0 + 2 (G - 1) alpha: "
                "at a decode step's small messages it is most of the time."),
        Mistake("alpha0 + 2*(G - 1)*alpha + 2*L*2*(G - 1)/G*B*h*b/beta",
                "That pays the latency once per step. Each of the 2 L all-reduces is its own collective and pays "
                "its own start-up and steps."),
        Mistake("2*L*(alpha0 + (G - 1)*alpha + 2*(G - 1)/G*B*h*b/beta)",
                "A ring all-reduce takes 2 (G - 1) steps, not G - 1: a reduce-scatter, then an all-gather."),
        Mistake("L*(alpha0 + 2*(G - 1)*alpha + 2*(G - 1)/G*B*h*b/beta)",
                "That is one all-reduce per layer: there are two, one after the attention and one after the MLP."),
        Mistake("2*L*(alpha0 + 2*(G - 1)*alpha + B*h*b/beta)",
                "That sends the message once: a ring all-reduce moves 2 (G - 1) / G of it through each link (a "
                "reduce-scatter, then an all-gather)."),
    ],
    hints=["One ring all-reduce of M bytes takes alpha0 + 2 (G - 1) alpha + M x 2 (G - 1) / (G x beta) "
           "(`formulas.equation('allreduce_ring_time')`).",
           "M = B h b; two per layer; L layers."],
    solution=("$2L \\left(\\alpha_0 + 2(G-1)\\alpha + \\frac{2(G-1)}{G} \\cdot \\frac{B h b}{\\beta}\\right)$: "
              "`2 * L * allreduce_ring_time(G, B*h*b, beta, alpha0, alpha)`."),
)

# --- O5 multi-step: the all-reduce time of a decode step, from a datasheet ------------------------------------------
_L70 = get_model("llama-3-70b")
_Q8_G, _Q8_B = 8, 32
_NVLINK = _H100.scale_up                                      # the catalog's NVLink entry of the H100 SXM
_Q8_BOTH = _NVLINK.bidirectional_bandwidth                    # the datasheet's headline: both directions added
_Q8_LINK = _NVLINK.per_direction_bandwidth
_RING = COLLECTIVE_LATENCIES["ring"]
_Q8_MSG = _Q8_B * _L70.hidden * 2                             # one all-reduce: batch x hidden fp16 values
_Q8_STATE = DashboardState(model="llama-3-70b", hardware="h100-sxm", batch=_Q8_B, prompt_tokens=_P, new_tokens=_N,
                           tensor_parallel=_Q8_G, interconnect_bandwidth=_Q8_LINK)
_Q8_R = compute(_Q8_STATE)
_Q8 = _Q8_R.allreduce_decode                                  # seconds per decode step


def _q8(msg=_Q8_MSG, link=_Q8_LINK, base=_RING.base, hop=_RING.hop, per_layer=2, steps=None, ring=True):
    steps = 2 * (_Q8_G - 1) if steps is None else steps
    factor = 2 * (_Q8_G - 1) / _Q8_G if ring else 1
    return per_layer * _L70.layers * (base + steps * hop + factor * msg / link) * 1e3


assert abs(_q8() - _Q8 * 1e3) <= 1e-9 * _Q8 * 1e3
q8 = NumericQuestion(
    id="q8", set=SET, points=2,
    objective="O5 split a model over several GPUs with tensor parallelism",
    prompt=(f"Multi-step: Llama-3-70B in fp16 split over {_Q8_G} H100 SXM GPUs, a decode step of a batch of {_Q8_B} "
            f"chats. The datasheet quotes NVLink at {units.format_bandwidth(_Q8_BOTH)} "
            f"(`get_hardware('h100-sxm').scale_up.bidirectional_bandwidth`, both directions added). NCCL's cost "
            f"model gives a ring all-reduce over NVLink a start-up latency of "
            f"{units.format_time(_RING.base)} and {units.format_time(_RING.hop)} per step "
            f"(`course_lib.core.capstone.COLLECTIVE_LATENCIES['ring']`). (a) The bytes of one all-reduce (batch x "
            f"hidden fp16 values). (b) The time of one ring all-reduce: start-up + 2 (G - 1) steps + 2 (G - 1) / G of "
            f"the message at the link's bandwidth in one direction. (c) The all-reduce time of the whole decode step "
            f"(two per layer), in ms."),
    expected=_Q8 * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s()],
    mistakes=[
        Mistake(_q8(link=_Q8_BOTH),
                "That uses the datasheet's figure with both directions added. A ring sends and receives at the same "
                "time: each direction carries its own share at half the headline, the per-direction bandwidth "
                "(`scale_up.per_direction_bandwidth`)."),
        Mistake(_q8(msg=2 * _Q8_MSG),
                "That sends 4-byte values: the activations travel in fp16, 2 bytes each."),
        Mistake(_q8(base=0, hop=0),
                "That is the bandwidth term alone: every all-reduce also pays its start-up and its 2 (G - 1) steps, "
                "which at a decode step's small messages cost more than the bytes."),
        Mistake(_q8(per_layer=1),
                "That is one all-reduce per layer; there are two (after attention and after the MLP)."),
        Mistake(_q8(steps=_Q8_G - 1),
                "A ring all-reduce takes 2 (G - 1) steps, not G - 1: a reduce-scatter, then an all-gather."),
        Mistake(_q8(ring=False),
                "That sends the whole message once; a ring moves 2 (G - 1) / G of it through each link."),
        Mistake((_q8(base=0, hop=0) / 1e3 + _RING.base + 2 * (_Q8_G - 1) * _RING.hop) * 1e3,
                "That pays the latency once per step: each of the all-reduces pays its own."),
    ],
    hints=[f"Message = {_Q8_B} x {_L70.hidden} x 2 bytes; per-direction bandwidth = the headline / 2.",
           f"One all-reduce = alpha0 + 2 x ({_Q8_G} - 1) x alpha + 2 x ({_Q8_G} - 1) / {_Q8_G} x message / bandwidth; "
           f"x 2 per layer x {_L70.layers} layers."],
    solution=(f"(a) {units.format_bytes(_Q8_MSG, digits=4)}. (b) {units.format_time(_RING.base)} + "
              f"{2 * (_Q8_G - 1)} x {units.format_time(_RING.hop)} + "
              f"{units.format_time(2 * (_Q8_G - 1) / _Q8_G * _Q8_MSG / _Q8_LINK, digits=3)} = "
              f"{units.format_time(_Q8 / (2 * _L70.layers), digits=4)}. (c) x {2 * _L70.layers}: "
              f"{units.format_time(_Q8, digits=4)} per step (`compute(...).allreduce_decode`), against a split step "
              f"of {units.format_time(_Q8_R.estimate.tpot, digits=3)}: the latency, not the link's bandwidth, is "
              f"most of it."),
)

# --- O3: continuous batching, the steady state ------------------------------------------------------------------------
_Q9_C, _Q9_N = 64, 50     # short answers: dividing by n instead of n - 1 is then 2 % off, beyond the tolerance
_Q9_PF = estimate(_L3, _H100, _P, _Q9_N, batch=1).ttft
_Q9_DEC = estimate(_L3, _H100, _P, _Q9_N, batch=_Q9_C).tpot
_Q9 = g.steady_state_tpot(_Q9_DEC, _Q9_C, _Q9_PF, _Q9_N - 1)
q9 = NumericQuestion(
    id="q9", set=SET, points=2,
    objective="O3 find the largest batch that meets a latency budget and plan with continuous batching",
    prompt=(f"Multi-step: a continuously batching server runs Llama-3-8B in fp16 on an H100 SXM (efficiencies 1), "
            f"chats of {_P:,} + {_Q9_N} tokens, {_Q9_C} sequences in flight. When one finishes, a new one is admitted "
            f"and its prompt is prefilled between the decode steps. (a) The prefill of one request: "
            f"`estimate('llama-3-8b', 'h100-sxm', {_P}, {_Q9_N}).ttft`. (b) The mean decode step of {_Q9_C} sequences: "
            f"`estimate(..., batch={_Q9_C}).tpot`. (c) In the steady state each sequence's {_Q9_N - 1} decode steps "
            f"also carry the {_Q9_C} prefills that replace the sequences finishing meanwhile: what TPOT does each "
            f"user see, in ms?"),
    expected=_Q9 * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s()],
    mistakes=[
        Mistake(_Q9_DEC * 1e3, "That is the decode step alone: the prefills of the newcomers run on the same GPU "
                               "and every user waits for them too."),
        Mistake((_Q9_DEC + _Q9_C * _Q9_PF / _Q9_N) * 1e3,
                "That spreads the prefills over n steps; the first token comes out of the prefill itself, so a "
                "sequence's life has n - 1 decode steps to carry them."),
        Mistake((_Q9_DEC + _Q9_PF / (_Q9_N - 1)) * 1e3,
                f"That spreads one prefill over a sequence's life; while it decodes, all {_Q9_C} sequences are "
                f"replaced once: {_Q9_C} prefills."),
        Mistake((_Q9_DEC + _Q9_PF) * 1e3, "That puts a whole prefill into every decode step; the newcomers' prefills "
                                          "are spread over the n - 1 steps of a sequence's life."),
        Mistake((_Q9_DEC + _Q9_C * _Q9_PF) * 1e3,
                "That puts all the prefills into each step; they are spread over the n - 1 steps of a "
                "sequence's life."),
    ],
    hints=["TPOT = t_decode(C) + C x t_prefill / (n - 1) (`formulas.equation('steady_state_tpot')`).",
           f"n - 1 = {_Q9_N - 1} decode steps per answer."],
    solution=(f"{units.format_time(_Q9_DEC, digits=4)} + {_Q9_C} x {units.format_time(_Q9_PF, digits=4)} / "
              f"{_Q9_N - 1} = "
              f"{units.format_time(_Q9, digits=4)} (`steady_state_tpot`; `course_lib.core.capstone.continuous_plan` "
              f"finds the largest C within a TPOT budget)."),
)

numbers_only(q5, "return a number, not text")  # its result is a plain number: text is a mistake

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8, q9]
