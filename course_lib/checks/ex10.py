"""Exercise set 10: serving many users (lesson ``notebooks/10_serving_many_users.ipynb``).

Objectives (as numbered in the lesson):

* O1 explain why continuous batching beats static batching, and price both on the same requests;
* O2 choose a token budget for chunked prefill and say what it trades (TTFT against TPOT);
* O3 apply Little's law to a server, and read a throughput–latency curve against the request rate;
* O4 size paged KV memory (blocks, fragmentation, the memory-utilisation fraction) and say what
  preemption costs;
* O5 price speculative decoding: expected tokens per verification step, cheap at a small batch only;
* O6 price prefill/decode disaggregation from the link that carries the K/V.

Every expected value is computed here from ``course_lib`` (``course_lib.core.serving`` and the
generated formulas), never typed in. Feedback never states an expected value.

Lessons: 10
"""
from __future__ import annotations

import math

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake, numbers_only
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core import units
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model
from course_lib.core.serving import (kv_pool, kv_transfer, littles_law, paged_utilisation, speculative_decoding,
                                     speculative_tokens_per_step)

__all__ = ["QUESTIONS", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "tokens_per_step_reference",
           "speculative_expression"]

SET = "ex10"


def tokens_per_step_reference(acceptance, draft_tokens):
    """Expected tokens one verification yields (``course_lib.core.serving.speculative_tokens_per_step``)."""
    return speculative_tokens_per_step(acceptance, draft_tokens)


def speculative_expression():
    """The closed form in the exercise's sympy symbols ``a, k``."""
    import sympy as sp

    a, k = sp.symbols("a k", positive=True)
    return (1 - a ** (k + 1)) / (1 - a)


_L3 = get_model("llama-3-8b")
_H100 = get_hardware("h100-sxm")

# --- O1: the slots a static wave wastes ---------------------------------------------------------------------
_Q1_ANSWERS = [20, 300, 80, 150]
_Q1 = sum(_Q1_ANSWERS) / (len(_Q1_ANSWERS) * max(_Q1_ANSWERS))
q1 = NumericQuestion(
    id="q1", set=SET, points=1,
    objective="O1 explain why continuous batching beats static batching",
    prompt=(f"A static batch of {len(_Q1_ANSWERS)} requests decodes until its longest answer is done; the answers "
            f"have {', '.join(map(str, _Q1_ANSWERS))} tokens. What fraction of the batch's decode slots (batch x the "
            f"longest answer) produce a token? Plain number between 0 and 1."),
    expected=_Q1, rel_tol=0.01,                 # 0.46, the fraction at two digits, is right
    mistakes=[
        Mistake(1 - _Q1, "That is the fraction that is wasted (padding); the question asks for the slots that "
                         "produce a token."),
        Mistake(sum(_Q1_ANSWERS) / len(_Q1_ANSWERS) / max(_Q1_ANSWERS) * 100,
                "That is a percentage; give the fraction (between 0 and 1)."),
        Mistake(min(_Q1_ANSWERS) / max(_Q1_ANSWERS),
                "That compares the shortest answer with the longest; every request's tokens count: sum them."),
    ],
    hints=["Slots = batch x the longest answer: every sequence keeps its slot until the wave ends.",
           "Useful slots = the sum of the answers' tokens."],
    solution=(f"{sum(_Q1_ANSWERS)} tokens / ({len(_Q1_ANSWERS)} x {max(_Q1_ANSWERS)}) = {_Q1:.4f}: a continuous "
              f"server refills each slot at the next step instead."),
)

# --- O3: Little's law -------------------------------------------------------------------------------------------
_Q2_RATE, _Q2_W = 12.0, 2.5
_Q2 = littles_law(_Q2_RATE, _Q2_W)
q2 = NumericQuestion(
    id="q2", set=SET, points=1,
    objective="O3 apply Little's law to a server",
    prompt=(f"Requests arrive at {_Q2_RATE:g} per second and each spends {_Q2_W:g} s in the server on average "
            f"(queueing, prefill and decode). How many requests are in the server on average?"),
    expected=_Q2, rel_tol=0.001,
    mistakes=[
        Mistake(_Q2_RATE / _Q2_W, "That divides the rate by the time. Little's law multiplies them: L = lambda W."),
        Mistake(_Q2_W / _Q2_RATE, "That divides the time by the rate. Little's law multiplies them: L = lambda W."),
        Mistake(_Q2_RATE * _Q2_W * 60, "That multiplies the rate per second by the time and then by 60: both are "
                                        "already in seconds, so L = lambda W needs no conversion."),
    ],
    hints=["Little's law: the mean number in the system L = arrival rate x mean time in the system."],
    solution=f"L = lambda W = {_Q2_RATE:g} x {_Q2_W:g} = {_Q2:g} requests (`littles_law({_Q2_RATE:g}, {_Q2_W:g})`).",
)

# --- O4 multi-step: KV blocks beside the weights ------------------------------------------------------------------
_Q3_FRAC, _Q3_B = 0.9, 16
_Q3 = kv_pool(_L3, _H100, block_tokens=_Q3_B, kv_memory_fraction=_Q3_FRAC)
_KV1 = _L3.kv_bytes_per_token("fp16")
_W = _L3.weight_bytes("fp16")
q3 = NumericQuestion(
    id="q3", set=SET, points=2,
    objective="O4 size paged KV memory",
    prompt=(f"Multi-step: Llama-3-8B in fp16 on one H100 SXM (`get_hardware('h100-sxm').capacity` bytes), "
            f"`gpu_memory_utilization` {_Q3_FRAC}. (a) Bytes for the KV pool: that fraction of the capacity less the "
            f"weights (`get_model('llama-3-8b').weight_bytes('fp16')`). (b) Bytes of one block of {_Q3_B} tokens "
            f"(`kv_bytes_per_token('fp16')` per token). (c) How many whole blocks fit?"),
    expected=_Q3.blocks, rel_tol=0, abs_tol=1e-6,        # a whole number of blocks: 29,043.3 is not one
    mistakes=[
        Mistake(math.ceil((_Q3_FRAC * _H100.capacity - _W) / (_Q3_B * _KV1)),
                "That rounds up: the last, partial block does not fit in the pool. Round down.", rel_tol=1e-9),
        Mistake((_Q3_FRAC * _H100.capacity - _W) / (_Q3_B * _KV1),
                "Round down: the pool holds only whole blocks (a partial block can hold no sequence's tokens), so "
                "take the floor of the quotient.", rel_tol=3e-5),
        Mistake(math.floor((_H100.capacity - _W) / (_Q3_B * _KV1)),
                "That gives the KV pool the whole capacity less the weights; the server keeps only the memory "
                "fraction (gpu_memory_utilization) for weights and pool together."),
        Mistake(math.floor(_Q3_FRAC * _H100.capacity / (_Q3_B * _KV1)),
                "That leaves the weights out: they take their share of the fraction first."),
        Mistake(math.floor((_Q3_FRAC * _H100.capacity - _W) / (_Q3_B * _KV1 / 2)),
                "That sizes a block for the keys only (or the values only); each token caches both."),
        Mistake(math.floor((_Q3_FRAC * _H100.capacity - _W) / _KV1),
                "That counts token slots; the question asks for blocks of 16 tokens."),
    ],
    hints=["Pool = fraction x capacity - weights.", "Block = 16 x K/V bytes per token; blocks = floor(pool / block)."],
    solution=(f"({_Q3_FRAC} x {units.format_bytes(_H100.capacity, digits=4)} - {units.format_bytes(_W, digits=4)}) / "
              f"{units.format_bytes(_Q3.block_bytes, digits=4)} per block, rounded down: {_Q3.blocks:,} blocks "
              f"(`kv_pool('llama-3-8b', 'h100-sxm').blocks`), {_Q3.token_slots:,} tokens."),
)

# --- O4: internal fragmentation -------------------------------------------------------------------------------------
_Q4_LEN, _Q4_B = [100, 17, 33], 16
_Q4 = paged_utilisation(_Q4_LEN, _Q4_B)
q4 = NumericQuestion(
    id="q4", set=SET, points=1,
    objective="O4 size paged KV memory",
    prompt=(f"Three sequences of {', '.join(map(str, _Q4_LEN))} tokens hold their K/V in blocks of {_Q4_B} tokens, "
            f"each allocated whole as the sequence grows. What fraction of the allocated token slots hold a token? "
            f"Plain number between 0 and 1."),
    expected=_Q4, rel_tol=0.002,
    mistakes=[
        Mistake(sum(_Q4_LEN) / sum(x // _Q4_B * _Q4_B for x in _Q4_LEN),
                "That rounds the blocks down: a sequence needs a block for its last, partly filled block too "
                "(ceil, not floor), so the fraction cannot exceed 1."),
        Mistake(sum(_Q4_LEN) / (len(_Q4_LEN) * max(_Q4_LEN)),
                "That reserves the longest sequence's length for every sequence: paged blocks are allocated per "
                "sequence, as it grows."),
        Mistake(1 - _Q4, "That is the fraction left empty (internal fragmentation); the question asks for the "
                         "fraction that holds tokens."),
    ],
    hints=["Blocks of a sequence of t tokens: ceil(t / 16).", "Fraction = tokens / (16 x all blocks)."],
    solution=(f"{sum(_Q4_LEN)} tokens in {sum(-(-x // _Q4_B) for x in _Q4_LEN)} blocks of {_Q4_B}: "
              f"{_Q4:.4f} (`paged_utilisation`)."),
)

# --- O5: the expected tokens per verification, as a formula ---------------------------------------------------------
class _GeneralCaseQuestion(ExpressionQuestion):
    """An expression question that reads a sympy answer's general case: ``Sum(...)`` is evaluated (``.doit()``,
    as the feedback suggests) and a ``Piecewise`` whose special cases are single points (``Eq(a, 1)``, where the
    geometric series' closed form is 0/0) stands for its ``True`` branch: what ``sympy.summation`` returns."""

    def _read(self, x):
        import sympy

        if isinstance(x, sympy.Basic):
            if x.has(sympy.Sum):
                x = x.doit()
            x = x.replace(lambda e: isinstance(e, sympy.Piecewise), _general_branch)
        return super()._read(x)


def _general_branch(pw):
    """The ``True`` branch of a Piecewise whose other conditions are equalities (points of measure zero)."""
    import sympy

    other = [c for _, c in pw.args if c is not sympy.true]
    general = [e for e, c in pw.args if c is sympy.true]
    if general and all(isinstance(c, sympy.Eq) for c in other):
        return general[0]
    return pw


q5 = _GeneralCaseQuestion(
    id="q5", set=SET, points=2,
    objective="O5 price speculative decoding",
    prompt=("Speculative decoding drafts k tokens; the target model accepts each with probability a, independently, "
            "until the first rejection, and always adds one token of its own. Give the expected number of tokens one "
            "verification yields, in closed form, as a sympy expression of `a, k = sympy.symbols('a k', "
            "positive=True)`."),
    expected=speculative_expression(), symbols=["a", "k"],
    mistakes=[
        Mistake("(1 - a**k)/(1 - a)", "That forgets the target model's own token: with k drafts the sum runs over "
                                      "a^0 ... a^k, k + 1 terms."),
        Mistake("a*(1 - a**k)/(1 - a)", "That counts the accepted drafts only; the verification also yields the "
                                        "target model's own token (the 1 in 1 + a + ... + a^k)."),
        Mistake("k*a + 1", "That assumes each draft is accepted independently of the ones before; a rejection ends "
                           "the round, so draft i counts only if all before it were accepted (a^i)."),
    ],
    hints=["Token i of the round (i = 0 ... k) comes out only if the i drafts before it were all accepted: "
           "probability a^i.", "Sum the geometric series 1 + a + ... + a^k."],
    solution="$\\sum_{i=0}^{k} a^i = \\frac{1 - a^{k+1}}{1 - a}$ (`formulas.equation('speculative_tokens_per_step')`).",
)

# --- O6 multi-step: the K/V transfer of disaggregation --------------------------------------------------------------
_Q6_P, _Q6_LINK = 2048, units.parse_bandwidth("400 Gbit/s")
_Q6 = kv_transfer(_L3, _H100, _Q6_P, 300, _Q6_LINK)
q6 = NumericQuestion(
    id="q6", set=SET, points=2,
    objective="O6 price prefill/decode disaggregation from the link",
    prompt=(f"Multi-step: prefill and decode of Llama-3-8B (fp16 K/V) run on different nodes joined by a 400 Gbit/s "
            f"link (per direction). (a) Bytes of K/V of a {_Q6_P:,}-token prompt "
            f"(`get_model('llama-3-8b').kv_bytes_per_token('fp16')` per token). (b) The link in bytes per second. "
            f"(c) How long does sending the prompt's K/V take, in ms?"),
    expected=_Q6.seconds * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s()],
    mistakes=[
        Mistake(_Q6.seconds * 1e3 / 8, "That reads 400 Gbit/s as 400 GB/s: a link's bits per second are eight times "
                                       "its bytes per second."),
        Mistake(_Q6.seconds * 1e3 / 2,
                "That is half the time: either the link's two directions were added (one transfer uses one "
                "direction: 400 Gbit/s here is per direction), or only the keys (or only the values) were sent "
                "(the decode GPU needs both)."),
        Mistake(_Q6.seconds * 1e3 * _L3.heads / _L3.kv_heads,
                "That sends K/V for every query head; Llama-3-8B caches only its KV heads (grouped-query attention)."),
    ],
    hints=["400 Gbit/s = 400e9 / 8 bytes per second.",
           "Time = prompt tokens x K/V bytes per token / link bytes per second."],
    solution=(f"{_Q6_P:,} x {units.format_bytes(_KV1, digits=4)} = {units.format_bytes(_Q6.bytes, digits=4)} over "
              f"{units.format_bandwidth(_Q6_LINK)}: {units.format_time(_Q6.seconds, digits=4)} "
              f"(`kv_transfer(...).seconds`), {_Q6.share_of_ttft:.0%} of the prefill's own time."),
)

# --- O2: what the token budget trades -------------------------------------------------------------------------------
_OPTIONS = (
    "the p99 TPOT falls and the p99 TTFT rises: decode steps stay short, but each prompt is cut into more chunks",
    "both fall: smaller steps are always faster",
    "the p99 TTFT falls and the p99 TPOT rises",
    "nothing changes: the same work is done in the end",
)
q7 = ChoiceQuestion(
    id="q7", set=SET, points=1,
    objective="O2 choose a token budget for chunked prefill and say what it trades",
    prompt=("A chunked-prefill server lowers its token budget per step from 2048 to 512 tokens at the same request "
            "rate (well below saturation). What happens to the p99 TTFT and the p99 TPOT? Answer with one of: "
            + "; ".join(repr(o) for o in _OPTIONS) + "."),
    expected=_OPTIONS[0], options=_OPTIONS,
    mistakes=[
        Mistake(_OPTIONS[1], "Smaller steps keep decodes short, but a prompt now needs more steps to finish its "
                             "prefill, and each of them also carries the decodes: its first token comes later."),
        Mistake(_OPTIONS[2], "That is the trade the wrong way round: the budget caps each step's work, which is "
                             "what bounds TPOT; the prompts pay in TTFT."),
        Mistake(_OPTIONS[3], "The total work is similar, but latency is about when each token comes out: the budget "
                             "moves time from the decodes to the prefills."),
    ],
    hints=["Which phase does a step's token budget protect? Which one has to wait for more steps?"],
    solution=("The budget bounds every step's work: decode steps (TPOT) stay short. A long prompt now needs "
              "several steps, each shared with the decodes, so its first token (TTFT) comes later: the lesson's "
              "table shows both p99s moving in opposite directions."),
)

# --- O5: the function -----------------------------------------------------------------------------------------------
_Q8_CASES = [(0.8, 4), (0.5, 1), (0.0, 3), (1.0, 4), (0.9, 8), (0.3, 0)]
_SPEC_SMALL = speculative_decoding(_L3, _H100, 1, 2048, 4, 0.8)
q8 = FunctionQuestion(
    id="q8", set=SET, points=2,
    objective="O5 price speculative decoding",
    prompt=("Write `tokens_per_step(acceptance, draft_tokens)` returning the expected tokens one verification yields "
            "(as in question 5), correct also at acceptance 1 (where every draft is accepted) and 0."),
    expected=tokens_per_step_reference, rel_tol=1e-9,
    cases=[(args, tokens_per_step_reference(*args)) for args in _Q8_CASES],
    mistakes=[
        Mistake(lambda a, k: (1 - a ** k) / (1 - a) if a != 1 else float(k),
                "Your function forgets the target model's own token: k drafts give up to k + 1 tokens."),
        Mistake(lambda a, k: k * a + 1, "Your function counts each draft independently; a rejection ends the round, "
                                        "so draft i counts with probability a^i."),
        Mistake(lambda a, k: sum(a ** i for i in range(1, k + 1)),
                "Your function counts only the accepted drafts: the verification step always adds the target "
                "model's own token (the i = 0 term, 1)."),
    ],
    hints=["Sum a**i for i in range(k + 1), or use the closed form and treat acceptance 1 apart."],
    solution=("```python\ndef tokens_per_step(acceptance, draft_tokens):\n"
              "    return sum(acceptance ** i for i in range(draft_tokens + 1))\n```\n"
              f"At batch 1 the verification is {_SPEC_SMALL.verify_bound}-bound, so these tokens come almost free "
              f"(speed-up {_SPEC_SMALL.speedup:.2f}x for Llama-3-8B on an H100 at acceptance 0.8, k = 4)."),
)

numbers_only(q8, "return a number, not text")

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8]
