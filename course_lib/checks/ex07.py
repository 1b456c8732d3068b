"""Exercise set 07: first-token optimisation (lesson ``notebooks/07_first_token_optimisation.ipynb``).

Objectives (as numbered in the lesson):

* O1 predict the TTFT of a request on a prefix-cache hit and on a miss, the mean at a hit rate, and the speed-up;
* O2 say which tokens a cache can reuse (whole blocks of a shared prefix; modules, approximately) and why
  reuse away from the start of the prompt is an approximation;
* O3 derive the prefill tokens of a chat session without a cache (quadratic in turns) and with one (linear);
* O4 price a cache: bytes held, sessions that fit beside the weights, LRU hit rate, the break-even hit
  rate when misses pay a write overhead;
* O5 compare measured and predicted TTFT with and without a cache, and check published caching claims
  against first principles.

Every expected value is computed here from ``course_lib`` (the caching model, the estimator, the
formulas and the shipped measurements), never typed in. Feedback never states an expected value.

Lessons: 07
"""
from __future__ import annotations

import math

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake, numbers_only
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core import caching
from course_lib.core import measurements
from course_lib.core import units
from course_lib.core.estimator import estimate, kv_cache_bytes
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model

__all__ = ["QUESTIONS", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "reusable_reference",
           "session_nocache_expression", "break_even_expression", "h200_prefix_cache"]

SET = "ex07"


def h200_prefix_cache() -> dict:
    """The H200 prefix-cache measurement (Hugging Face eager, Mistral-7B shape, fp16)."""
    return measurements.h200()["hf_transformers_eager"]["prefix_cache"]


def reusable_reference(prefix_tokens, block_tokens, min_tokens):
    """Tokens a block cache reuses: whole blocks of the prefix, none below ``min_tokens``."""
    return caching.reusable_tokens(prefix_tokens, block_tokens, min_tokens)


def session_nocache_expression():
    """``formulas.expr('session_prefill_tokens_nocache')`` in the exercise's symbols S, u, r, T."""
    import sympy as sp

    from course_lib.core.formulas import S as F

    S, u, r, T = sp.symbols("S u r T", positive=True)
    return sp.expand(caching.session_derivation()["sum_nocache"].subs(
        {F.system_tokens: S, F.user_tokens: u, F.reply_tokens: r, F.turns: T}))


def break_even_expression():
    """``formulas.expr('cache_break_even_hit_rate')`` in the symbols t_hit, t_miss, t_w."""
    import sympy as sp

    from course_lib.core.formulas import S as F
    from course_lib.core.formulas import expr

    th, tm, tw = sp.symbols("t_hit t_miss t_w", positive=True)
    return expr("cache_break_even_hit_rate").subs({F.ttft_hit: th, F.ttft_miss: tm, F.write_overhead: tw})


_MISTRAL = get_model("mistral-7b")
_H200 = get_hardware("h200")
_PC = h200_prefix_cache()
_P, _N = _PC["prefix"], _PC["suffix"]
_R = caching.prefix_reuse(_MISTRAL, _H200, _P, _N)

# --- O1 ------------------------------------------------------------------------------------------------
q1 = NumericQuestion(
    id="q1", set=SET, points=1,
    objective="O1 predict the TTFT on a prefix-cache hit and on a miss",
    prompt=(f"Mistral-7B in fp16 on an H200: a request brings a {_P:,}-token shared prefix and {_N} tokens of its "
            f"own. On a cache **hit** the prefix's K/V are already cached. Predict the TTFT of the hit with "
            f"`estimate('mistral-7b', 'h200', {_P + _N}, 1, cached_prefix_tokens={_P}).ttft`. Answer in ms."),
    # 2 %: lesson 07 prints this TTFT to three digits and learners round it to two ("3.2 ms"); the nearest known
    # mistake is 6.7 % away
    expected=_R.ttft_hit * 1e3, unit="ms", dimension="time", rel_tol=0.02,
    detect=[d.ms_vs_s()],
    mistakes=[
        Mistake(_R.ttft_miss * 1e3, "That is the TTFT of a miss (the whole prompt prefilled). On a hit only the "
                                    "request's own tokens are prefilled."),
        Mistake(estimate(_MISTRAL, _H200, _N, 1).ttft * 1e3,
                "That prefills the new tokens as if the prefix did not exist. On a hit they still attend to the "
                "cached prefix and its K/V must be read: pass cached_prefix_tokens.", rel_tol=0.002),
        Mistake(estimate(_MISTRAL, _H200, _P, 1).ttft * 1e3,
                "That prefills the prefix, which is exactly the work a hit skips."),
    ],
    hints=["The prompt is prefix + new tokens; the cached part is the prefix.",
           "A hit of 100 tokens is memory-bound: the weights are read once whatever the token count."],
    solution=(f"`estimate('mistral-7b', 'h200', {_P + _N}, 1, cached_prefix_tokens={_P}).ttft` = "
              f"{units.format_time(_R.ttft_hit, digits=4)} ({_R.hit.prefill_bound}-bound: the weights, read once, "
              f"dominate), against {units.format_time(_R.ttft_miss, digits=4)} on a miss."),
)

_H = 0.7
_Q2 = _R.expected_ttft(_H)
q2 = NumericQuestion(
    id="q2", set=SET, points=2,
    objective="O1 predict the mean TTFT at a hit rate and the speed-up",
    prompt=(f"Multi-step, same request as question 1. (a) Predict the TTFT of a miss (`cached_prefix_tokens=0`). "
            f"(b) Take the hit from question 1. (c) If {_H:.0%} of requests hit, what is the mean TTFT? Answer in ms."),
    expected=_Q2 * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s()],
    mistakes=[
        Mistake(_R.expected_ttft(1 - _H) * 1e3, "The weights are swapped: the hit rate multiplies the hit's TTFT, "
                                                "1 - hit rate the miss's."),
        Mistake((_R.ttft_hit + _R.ttft_miss) / 2 * 1e3, "That is the plain average of hit and miss; weight them by "
                                                        "how often each happens."),
        Mistake(_R.ttft_miss / _R.speedup * 1e3, "That is the hit's TTFT; the mean includes the misses."),
        Mistake(_H * _R.ttft_miss * 1e3, "The hit rate multiplies the miss time there: the hit rate weights the "
                                         "hit's TTFT, and only the misses' share (1 - h) weights the miss's."),
        Mistake((1 - _H) * _R.ttft_miss * 1e3, "Only the misses' share is counted: add the hits' share, h x t_hit."),
    ],
    hints=["Mean TTFT = h t_hit + (1 - h) t_miss (`formulas.latex('expected_ttft')`).",
           "`caching.prefix_reuse('mistral-7b', 'h200', 4000, 100).expected_ttft(0.7)` checks the answer."],
    solution=(f"t_miss = {units.format_time(_R.ttft_miss, digits=4)}, t_hit = "
              f"{units.format_time(_R.ttft_hit, digits=4)}; "
              f"{_H} x t_hit + {1 - _H:.1f} x t_miss = {units.format_time(_Q2, digits=4)}. The mean is "
              f"dominated by the "
              f"misses: even at {_H:.0%} hits it is {_R.ttft_miss / _Q2:.1f} times below the miss, not "
              f"{_R.speedup:.0f} times."),
)

# --- O2 as a function -------------------------------------------------------------------------------------------
_Q3_CASES = [(1000, 16, 0), (4100, 128, 1024), (1023, 128, 1024), (1024, 128, 1024), (15, 16, 0), (4096, 16, 0),
             (2000, 1, 0)]
q3 = FunctionQuestion(
    id="q3", set=SET, points=2,
    objective="O2 say which tokens a cache can reuse",
    prompt=("Write `reusable(prefix_tokens, block_tokens, min_tokens)` returning how many tokens of a shared prefix a "
            "block cache reuses: only whole blocks of `block_tokens` count, and prefixes shorter than `min_tokens` "
            "are not cached at all (OpenAI: blocks of 128 from 1,024 tokens)."),
    expected=reusable_reference, rel_tol=0, whole=True,
    cases=[(args, reusable_reference(*args)) for args in _Q3_CASES],
    mistakes=[
        Mistake(lambda prefix_tokens, block_tokens, min_tokens: prefix_tokens if prefix_tokens >= min_tokens else 0,
                "Your function reuses the partial last block too: only whole blocks are cached."),
        Mistake(lambda prefix_tokens, block_tokens, min_tokens: block_tokens * (prefix_tokens // block_tokens),
                "Your function ignores min_tokens: shorter prefixes are not cached at all."),
        Mistake(lambda prefix_tokens, block_tokens, min_tokens:
                (block_tokens * -(-prefix_tokens // block_tokens)) if prefix_tokens >= min_tokens else 0,
                "Your function rounds up to the next block: a block that is not full has no cached K/V."),
    ],
    hints=["`block_aligned_tokens` in `course_lib.core.formulas`: b floor(T / b).",
           "Return 0 first when prefix_tokens < min_tokens."],
    solution=("```python\ndef reusable(prefix_tokens, block_tokens, min_tokens):\n"
              "    if prefix_tokens < min_tokens:\n        return 0\n"
              "    return block_tokens * (prefix_tokens // block_tokens)\n```"),
)

# --- O3 as a formula ---------------------------------------------------------------------------------------------
q4 = ExpressionQuestion(
    id="q4", set=SET, points=2,
    objective="O3 derive the prefill tokens of a chat session without a cache",
    prompt=("A chat has a system prompt of S tokens; every turn adds a user message of u tokens and a reply of r "
            "tokens. Without a cache, turn t prefills the system prompt, the t user messages and the t - 1 replies "
            "so far. Give the total prefilled tokens over T turns as a sympy expression of "
            "`S, u, r, T = sympy.symbols('S u r T', positive=True)` (a closed form, or `sympy.summation`)."),
    expected=session_nocache_expression(), symbols=["S", "u", "r", "T"],
    mistakes=[
        Mistake("S + T*u", "That is (but for the pending reply tokens) the total *with* a session cache. Without "
                           "one, every turn prefills the whole "
                           "conversation again."),
        Mistake("T*S + T*(T + 1)/2*(u + r)", "That counts t replies in turn t: the reply of turn t comes after "
                                             "its prompt, so turn t re-reads only t - 1 replies."),
        Mistake("T*(S + T*u + (T - 1)*r)", "That charges every turn the last turn's prompt; turn t's prompt grows "
                                           "with t: sum S + t u + (t - 1) r over t = 1 ... T."),
        Mistake("T*S + T*(T + 1)/2*u", "The replies are missing: every later turn re-reads them too."),
    ],
    hints=["Turn t prefills S + t u + (t - 1) r tokens.",
           "Sum of t over 1..T is T (T + 1) / 2; sum of t - 1 is T (T - 1) / 2."],
    solution=("$\\sum_{t=1}^{T} (S + t u + (t-1) r) = T S + \\frac{T(T+1)}{2} u + \\frac{T(T-1)}{2} r$: quadratic in "
              "T, `formulas.latex('session_prefill_tokens_nocache')`."),
)

_S5, _U5, _R5, _T5 = 1500, 120, 250, 8
_Q5 = (caching.session_prefill_tokens(_S5, _U5, _R5, _T5, cached=False)
       - caching.session_prefill_tokens(_S5, _U5, _R5, _T5, cached=True))
q5 = NumericQuestion(
    id="q5", set=SET, points=2,
    objective="O3 derive the prefill tokens of a chat session without and with a cache",
    prompt=(f"Multi-step: a {_T5}-turn chat with a {_S5:,}-token system prompt, {_U5}-token user messages and "
            f"{_R5}-token replies. (a) Tokens prefilled without a cache. (b) With a session cache (the system "
            f"prompt once, then each user message together with the previous reply's last token, which was "
            f"sampled but never fed back). (c) How many prefill tokens does the cache save? Give a count."),
    expected=_Q5, rel_tol=0, abs_tol=0.5,
    mistakes=[
        Mistake(caching.session_prefill_tokens(_S5, _U5, _R5, _T5, cached=False) - (_S5 + _T5 * _U5),
                "Almost: after turn 1 every turn also prefills the previous reply's last token (it was sampled, "
                "never processed, so it has no K/V yet): the cached total is S + T u + (T - 1)."),
        Mistake(caching.session_prefill_tokens(_S5, _U5, _R5, _T5, cached=False),
                "That is the total without a cache, (a); subtract the cached total (b)."),
        Mistake(caching.session_prefill_tokens(_S5, _U5, _R5, _T5, cached=True),
                "That is the total with the cache, (b); the question asks for the difference."),
        Mistake(_T5 * _S5 + _T5 * (_T5 + 1) // 2 * (_U5 + _R5) - (_S5 + _T5 * _U5 + _T5 - 1),
                "Turn t re-reads t - 1 replies, not t: the reply of turn t is generated after its prefill."),
        Mistake(_T5 * (_S5 + _T5 * _U5 + (_T5 - 1) * _R5) - (_S5 + _T5 * _U5 + _T5 - 1),
                "That charges every turn the last turn's prompt; the prompt grows turn by turn."),
    ],
    hints=["`caching.session_prefill_tokens(S, u, r, T, cached=False)` and `cached=True`.",
           "Without: T S + T (T + 1) / 2 u + T (T - 1) / 2 r. With: S + T u + (T - 1) (one pending reply token "
           "per later turn)."],
    solution=(f"{caching.session_prefill_tokens(_S5, _U5, _R5, _T5, cached=False):,} - "
              f"{caching.session_prefill_tokens(_S5, _U5, _R5, _T5, cached=True):,} = {_Q5:,} tokens."),
)

# --- O4 -----------------------------------------------------------------------------------------------------------
_L3 = get_model("llama-3-8b")
_H100 = get_hardware("h100-sxm")
_ST = 8192
_Q6 = caching.sessions_fit(_L3, _H100, _ST)
_free = _H100.capacity - _L3.weight_bytes("fp16")
_ktok = kv_cache_bytes(_L3, 1)
q6 = NumericQuestion(
    id="q6", set=SET, points=2,
    objective="O4 price a cache: bytes held and sessions that fit",
    prompt=(f"Multi-step: Llama-3-8B with fp16 weights and fp16 K/V on an H100 SXM "
            f"(`get_hardware('h100-sxm').capacity`). (a) How many bytes does one token's K/V take "
            f"(`kv_cache_bytes('llama-3-8b', 1)`)? (b) How many bytes are left beside the weights? (c) How many whole "
            f"sessions of {_ST:,} cached tokens fit there? Give a whole number."),
    expected=_Q6, rel_tol=0, whole="down",
    whole_feedback=("Round down: only whole sessions fit (a part of a session cannot be served), so take the floor "
                    "of the quotient."),
    mistakes=[
        Mistake(int(_free // (_ktok / 2 * _ST)), "That is twice the answer: one token's cache holds a key AND a value "
                                                 "vector per layer and KV head."),
        Mistake(int(_free // (_ktok * _L3.heads / _L3.kv_heads * _ST)),
                "That caches one K/V per query head; with grouped-query attention only the KV heads are cached."),
        Mistake(int(_H100.capacity // (_ktok * _ST)), "The weights need memory too: subtract them first."),
        Mistake(math.ceil(_free / (_ktok * _ST)),
                "One session too many: was the quotient rounded up or to the nearest whole number? Only whole "
                "sessions fit, so take the floor. (If you did, one of your sizes is slightly too small.)"),
        Mistake(int((_H100.capacity / 1.024 ** 3 - _L3.weight_bytes("fp16")) // (_ktok * _ST)),
                "That starts from about 80e9 bytes: the '80 GB' printed on the box, or the capacity converted to "
                "GiB and then used as bytes. `capacity` is already in bytes: the "
                f"{_H100.capacity / 1e9:.2f}e9 bytes ({_H100.capacity / 2**30:.2f} GiB) the driver reports for a "
                "card sold as '80 GB'. Use it as given.", alters="capacity"),
        Mistake(int((_H100.capacity * 1.024 ** 3 - _L3.weight_bytes("fp16")) // (_ktok * _ST)),
                f"That multiplies the capacity by 1.024^3, as if its {_H100.capacity / 1e9:.2f} were GiB. `capacity` "
                "is already in bytes (the driver's figure for a card sold as '80 GB'): use it as given.",
                alters="capacity"),
    ],
    hints=["K/V bytes per token = 2 x layers x KV heads x head_dim x 2 bytes.",
           "floor((capacity - weight bytes) / (bytes per token x session tokens)): "
           "`formulas.latex('sessions_that_fit')`."],
    solution=(f"{units.format_bytes(_ktok, digits=4)} per token x {_ST:,} = "
              f"{units.format_bytes(_ktok * _ST, digits=4)} "
              f"per session; ({units.format_bytes(_H100.capacity)} - "
              f"{units.format_bytes(_L3.weight_bytes('fp16'), digits=4)}) "
              f"/ that = {_Q6} whole sessions (activations and workspace not counted)."),
)

q7 = ExpressionQuestion(
    id="q7", set=SET, points=2,
    objective="O4 the break-even hit rate when misses pay a write overhead",
    prompt=("A hit costs t_hit, a miss t_miss, and a cache that stores every miss's K/V adds t_w to each miss. "
            "Solve h t_hit + (1 - h)(t_miss + t_w) = t_miss for the hit rate h above which the cache lowers the mean "
            "TTFT. Give a sympy expression of `t_hit, t_miss, t_w = sympy.symbols('t_hit t_miss t_w', "
            "positive=True)`."),
    expected=break_even_expression(), symbols=["t_hit", "t_miss", "t_w"],
    mistakes=[
        Mistake("t_w/(t_miss - t_hit)", "Close, but the write overhead also enters the denominator: expand "
                                        "(1 - h)(t_miss + t_w) fully."),
        Mistake("(t_miss - t_hit)/(t_miss - t_hit + t_w)", "That is 1 - h*: you solved for the miss rate at break "
                                                           "even. The question asks for the hit rate, its complement."),
        Mistake("t_hit/t_miss", "That is the hit's share of the miss time, unrelated to the write overhead."),
    ],
    hints=["Expand: h t_hit + t_miss + t_w - h t_miss - h t_w = t_miss.",
           "Collect h: h (t_miss - t_hit + t_w) = t_w."],
    solution=("$h^* = \\frac{t_w}{t_{miss} - t_{hit} + t_w}$ (`caching.break_even_derivation()`): 0 when writes "
              "are free, "
              "close to 1 when writing costs much more than a hit saves."),
)

# --- O2 / O5: why modular reuse is approximate --------------------------------------------------------------------
_OPTIONS = (
    "its keys were encoded at other positions and without attending to the modules placed before it",
    "the cached values are stored in lower precision than the weights",
    "a reused module makes the prefill memory-bound",
    "the cache stores one K/V per query head, not per KV head",
)
q8 = ChoiceQuestion(
    id="q8", set=SET, points=1,
    objective="O2 why reuse away from the start of the prompt is an approximation",
    prompt=("Prompt Cache (Gim et al. 2023) reuses the K/V of a module (a document, a tool description) wherever it "
            "appears in a prompt. Why does the first token then differ (slightly) from full prefill? Answer with one "
            "of: " + "; ".join(repr(o) for o in _OPTIONS) + "."),
    expected=_OPTIONS[0], options=_OPTIONS,
    mistakes=[
        Mistake(_OPTIONS[1], "The cache can keep K/V in exactly the precision prefill computed them; the difference "
                             "remains even then."),
        Mistake(_OPTIONS[2], "Whether prefill is memory- or compute-bound changes its time, not its result."),
        Mistake(_OPTIONS[3], "Caches store the KV heads only (grouped-query attention), reused or not: that is "
                             "not what changes the result."),
    ],
    hints=["What do rotary embeddings do to a key?", "What did the module's tokens attend to when it was cached?"],
    solution=("A cached key carries the rotation of the position it was encoded at, and the module's tokens attended "
              "only to themselves (and what preceded them then), not to the modules before them in this prompt; full "
              "prefill would let every token attend to every earlier token. Only a shared *prefix* is exact."),
)

_Q9 = 1 - _PC["cached_ms"] / _PC["full_ms"]
q9 = NumericQuestion(
    id="q9", set=SET, points=2,
    objective="O5 compare measured caching gains with published claims",
    prompt=("Multi-step: `measurements.h200()['hf_transformers_eager']['prefix_cache']` gives the measured TTFT of a "
            "4,000-token prefix + 100 tokens, full and with the prefix cached. (a) Compute the fraction of the TTFT "
            "the cache removed (1 - cached / full). (b) Compare with OpenAI's 'up to 80% lower latency'. Answer (a) "
            "as a fraction between 0 and 1."),
    expected=_Q9, rel_tol=0.005,
    detect=[d.ratio(100, "That looks like a percentage; give the fraction (between 0 and 1).", name="percent")],
    mistakes=[
        Mistake(_PC["cached_ms"] / _PC["full_ms"], "That is the fraction that remains (cached / full); the question "
                                                   "asks for the part removed."),
        Mistake(_PC["full_ms"] / _PC["cached_ms"], "That is the speed-up (full / cached), not the fraction removed."),
        Mistake(_R.latency_reduction, "That is the model's prediction at 100 % of peak; the question asks what was "
                                      "measured.", rel_tol=0.002),
    ],
    hints=["The fields are full_ms and cached_ms.", "1 - cached_ms / full_ms."],
    solution=(f"1 - {_PC['cached_ms']} / {_PC['full_ms']} = {_Q9:.3f}: about what the providers claim, though "
              f"the model "
              f"predicts {_R.latency_reduction:.0%} at 100 % of peak: the measured hit is dominated by eager-mode "
              f"overhead, not by its bytes."),
)

numbers_only(q3, "return a number, not text")  # its result is a plain number: text is a mistake

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8, q9]
