"""Exercise set 03: the KV cache (``exercises/03_kv_cache.ipynb``).

Every expected value is computed here from ``course_lib`` (the catalog shapes, ``kv_cache_bytes``,
``ModelSpec.weight_bytes``, ``HardwareSpec.capacity``), so the checks and the lesson cannot
disagree. Objectives are those of ``notebooks/03_kv_cache.ipynb``:

O1 values and bytes per token, O2 MHA/GQA/MQA/MLA, O3 tokens of a conversation, O4 attention's
arithmetic intensity in decode, O5 the KV = weights crossover, O6 tokens that fit beside the weights.

Lessons: 03
"""
from __future__ import annotations

import math

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake, numbers_only
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core.estimator import kv_cache_bytes
from course_lib.core.hardware import get_hardware
from course_lib.core.models import get_model

SET = "ex03"

# ---------------------------------------------------------------------------------------------
# q1: bytes per token of Llama-3-8B
# ---------------------------------------------------------------------------------------------
_L3 = get_model("llama-3-8b")
_Q1 = _L3.kv_bytes_per_token("fp16")                      # 2 * 32 * 8 * 128 * 2 bytes
_Q1_RATIO = _L3.heads / _L3.kv_heads                       # 4 query heads share each KV head

q1 = NumericQuestion(
    id="q1", set=SET, objective="O1 bytes one token adds to the KV cache", points=1,
    prompt="Llama-3-8B (32 layers, 32 query heads, 8 KV heads, head_dim 128) caches fp16 keys and values. "
           "How many bytes does one token add to the KV cache of one sequence?",
    expected=_Q1, dimension="bytes", rel_tol=0.005,
    detect=[d.forgot_kv(), d.query_heads(_Q1_RATIO), d.bits_vs_bytes(), d.gb_vs_gib(1)],
    mistakes=[
        Mistake(_Q1 / 2, "That is half the answer: either the number of cached *values* (multiply by the "
                         "bytes per fp16 value) or only the keys (the values are cached too)."),
        Mistake(_Q1 / _L3.layers, "That is one layer's K and V; every layer keeps its own cache."),
        Mistake(_Q1 * 2, "That is twice the answer: either 4 bytes per value (fp32; the cache here is fp16), "
                         "or the 32 query heads with only K or only V counted. Count the 8 KV heads, and both "
                         "a key and a value per head."),
    ],
    hints=["Per layer, each KV head stores one key and one value vector of head_dim numbers.",
           "Values per token = 2 × layers × KV heads × head_dim; then multiply by the bytes per fp16 value."],
    solution=f"$2 \\times 32 \\times 8 \\times 128 = {_L3.kv_values_per_token:,}$ values per token, "
             f"$\\times 2$ bytes $= {_Q1:,.0f}$ bytes (128 KiB, or 131 kB). "
             f"`get_model('llama-3-8b').kv_bytes_per_token('fp16')` gives the same.",
)

# ---------------------------------------------------------------------------------------------
# q2: MHA Llama-2-7B, 4096 tokens, batch 8
# ---------------------------------------------------------------------------------------------
_L2 = get_model("llama-2-7b")
_Q2_TOKENS, _Q2_BATCH = 4096, 8
_Q2 = kv_cache_bytes(_L2, _Q2_TOKENS, "fp16", _Q2_BATCH) / 1e9   # in GB

q2 = NumericQuestion(
    id="q2", set=SET, objective="O2 MHA vs GQA cache sizes (with O1)", points=2,
    prompt="Llama-2-7B uses multi-head attention: 32 layers, 32 heads (all of them KV heads), head_dim 128. "
           "A server runs a batch of 8 sequences of 4096 tokens each with an fp16 KV cache. "
           "How many GB (10^9 bytes) does the KV cache take?",
    expected=_Q2, unit="GB", dimension="bytes", rel_tol=0.01,
    detect=[d.gb_vs_gib(), d.forgot_batch(_Q2_BATCH), d.forgot_kv(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(_Q2 / 4, "That is the size with 8 KV heads (the source's 32 × 8 × 128 shape, as in Mistral-7B "
                         "or Llama-3-8B). Llama-2-7B is MHA: all 32 heads have their own keys and values."),
        Mistake(_Q2 * 2, "That uses 4 bytes per value (fp32); the cache here is fp16."),
        Mistake(_Q2 / _L2.layers, "That is one layer; all 32 layers keep a cache."),
    ],
    hints=["Bytes per token first: 2 × layers × KV heads × head_dim × bytes per value.",
           "Then multiply by the tokens of one sequence and by the number of sequences; divide by 10^9."],
    solution=f"$2 \\times 32 \\times 32 \\times 128 \\times 2$ B $= {_L2.kv_bytes_per_token():,.0f}$ B per token; "
             f"$\\times 4096 \\times 8 = {_Q2 * 1e9:,.0f}$ B $\\approx {_Q2:.2f}$ GB (exactly 16 GiB). "
             f"`kv_cache_bytes('llama-2-7b', 4096, batch=8) / 1e9`.",
)

# ---------------------------------------------------------------------------------------------
# q3: arithmetic intensity of decode attention
# ---------------------------------------------------------------------------------------------
q3 = ExpressionQuestion(
    id="q3", set=SET, objective="O4 arithmetic intensity of attention in decode", points=2,
    prompt="In one decode step the attention of one sequence does 4·L·H_q·d·c FLOPs (course_lib's decode_flops "
           "term) and reads the K and V of c cached tokens: 2·L·H_kv·d·c values of b bytes each. "
           "Write the FLOPs per byte as an expression in H_q, H_kv and b.",
    expected="2*H_q/(H_kv*b)", symbols=["H_q", "H_kv", "b", "L", "d", "c"],
    detect=[d.ratio(2, "That is twice the answer: your bytes count only the keys or only the values. "
                       "The step reads both K and V of every cached token.", name="forgot_kv_bytes")],
    mistakes=[
        Mistake("H_q/H_kv", "That is the fp16 value (b = 2). Keep b as a symbol: the answer must hold for fp8 "
                            "or fp32 caches too."),
        Mistake("2*H_q/H_kv", "That is FLOPs per cached *value*; divide by the bytes per value b."),
        Mistake("2/b", "That counts bytes for every query head. Only the H_kv KV heads are cached and read; "
                       "each is shared by H_q/H_kv query heads."),
        Mistake("2*H_kv/(H_q*b)", "Upside down in the heads: FLOPs grow with the query heads, bytes with the KV "
                                  "heads."),
    ],
    hints=["Divide the FLOPs by (values × b): L, d and c cancel.",
           "Write FLOPs over bytes as one fraction and cancel every factor that appears on both sides."],
    solution="$\\dfrac{4 L H_q d c}{2 L H_{kv} d c\\, b} = \\dfrac{2 H_q}{H_{kv}\\, b}$: in fp16 ($b = 2$) "
             "that is $H_q/H_{kv}$ FLOP per byte (4 for Llama-3-8B, 1 for MHA) -- far below any GPU's ridge "
             "point, and independent of the batch, since every sequence reads its own cache.",
)

# ---------------------------------------------------------------------------------------------
# q4: the KV cache size as a function
# ---------------------------------------------------------------------------------------------
def _kv_cache_bytes(layers, kv_heads, head_dim, tokens, batch=1, bytes_per_value=2):
    """Reference: 2 × layers × kv_heads × head_dim × bytes_per_value per token, × tokens × batch."""
    return 2 * layers * kv_heads * head_dim * bytes_per_value * tokens * batch


def _case(model, tokens, batch=1, precision="fp16"):
    m = get_model(model)
    from course_lib.core.precision import bytes_per_element
    b = bytes_per_element(precision)
    args = {"layers": m.layers, "kv_heads": m.kv_heads, "head_dim": m.head_dim, "tokens": tokens, "batch": batch,
            "bytes_per_value": b}
    return args, kv_cache_bytes(m, tokens, precision, batch)


_Q4_CASES = [
    ((32, 8, 128, 1000), kv_cache_bytes("llama-3-8b", 1000)),              # the source's example shape
    ((32, 32, 128, 4096, 8), kv_cache_bytes("llama-2-7b", 4096, batch=8)),
    _case("qwen2.5-7b", 32768, 4, "fp8"),
    _case("llama-2-70b", 8192, 16),
    ((1, 1, 64, 10, 3, 4), 2 * 64 * 10 * 3 * 4),
]

q4 = FunctionQuestion(
    id="q4", set=SET, objective="O1 the KV cache size as a function", points=2,
    prompt="Write kv_cache_bytes(layers, kv_heads, head_dim, tokens, batch=1, bytes_per_value=2) returning the "
           "bytes of KV cache for `batch` sequences of `tokens` tokens (no sliding window).",
    expected=_kv_cache_bytes, dimension="bytes", rel_tol=1e-9, cases=_Q4_CASES,
    detect=[d.forgot_kv(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda layers, kv_heads, head_dim, tokens, batch=1, bytes_per_value=2:
                2 * layers * kv_heads * head_dim * bytes_per_value * tokens,
                "Your function ignores `batch`: every sequence has its own cache."),
        Mistake(lambda layers, kv_heads, head_dim, tokens, batch=1, bytes_per_value=2:
                2 * layers * kv_heads * head_dim * tokens * batch,
                "Your function counts values, not bytes: multiply by bytes_per_value."),
        Mistake(lambda layers, kv_heads, head_dim, tokens, batch=1, bytes_per_value=2:
                2 * kv_heads * head_dim * bytes_per_value * tokens * batch,
                "Your function leaves out the number of layers: each layer caches its own K and V."),
    ],
    hints=["Start from the bytes of one token (q1), then scale by tokens and batch.",
           "2 × layers × kv_heads × head_dim × bytes_per_value × tokens × batch."],
    solution="```python\ndef kv_cache_bytes(layers, kv_heads, head_dim, tokens, batch=1, bytes_per_value=2):\n"
             "    return 2 * layers * kv_heads * head_dim * bytes_per_value * tokens * batch\n```",
)

# ---------------------------------------------------------------------------------------------
# q5: a multi-turn conversation
# ---------------------------------------------------------------------------------------------
#: tokens of the conversation in q5, in order
CONVERSATION = {"system": 400, "user_1": 150, "assistant_1": 350, "user_2": 60, "assistant_2": 220}
_Q5_TOKENS = sum(CONVERSATION.values())


def _q5_mb(tokens):
    return kv_cache_bytes(_L3, tokens, "fp16") / 1e6


_Q5 = _q5_mb(_Q5_TOKENS)

q5 = NumericQuestion(
    id="q5", set=SET, objective="O3 tokens in the cache of a conversation", points=2,
    prompt="A chat with Llama-3-8B (fp16 cache): a 400-token system prompt; turn 1: the user writes 150 tokens, "
           "the model answers 350; turn 2: the user writes 60 tokens, the model answers 220. The server keeps "
           "the conversation's cache between turns. How many MB (10^6 bytes) of KV cache does the conversation "
           "hold after the second answer?",
    expected=_Q5, unit="MB", dimension="bytes", rel_tol=0.01,
    detect=[d.gb_vs_gib(2), d.query_heads(_Q1_RATIO), d.forgot_kv()],
    mistakes=[
        Mistake(_q5_mb(CONVERSATION["user_2"] + CONVERSATION["assistant_2"]),
                "That is only the second turn. The model attends to the whole conversation: the system prompt "
                "and turn 1 stay in the cache."),
        Mistake(_q5_mb(_Q5_TOKENS - CONVERSATION["system"]),
                "You left out the system prompt: it is the first thing in the context and stays cached."),
        Mistake(_q5_mb(CONVERSATION["system"] + CONVERSATION["user_1"] + CONVERSATION["user_2"]),
                "You counted only the prompts. The model's own answers are tokens of the context too: each "
                "generated token's K and V are cached."),
        Mistake(_q5_mb(_Q5_TOKENS - CONVERSATION["assistant_2"]),
                "That is the cache before the second answer; the question asks after it."),
    ],
    hints=["Which tokens does the model attend to while writing the last token of turn 2?",
           "Add up every token of the conversation, then multiply by the bytes per token (q1)."],
    solution=f"$400 + 150 + 350 + 60 + 220 = {_Q5_TOKENS:,}$ tokens $\\times {_Q1:,.0f}$ B "
             f"$= {_Q5 * 1e6:,.0f}$ B $\\approx {_Q5:.1f}$ MB.",
)

# ---------------------------------------------------------------------------------------------
# q6: the crossover context at batch 16
# ---------------------------------------------------------------------------------------------
_Q6_BATCH = 16
_Q6 = _L3.weight_bytes("fp16") / kv_cache_bytes(_L3, 1, "fp16", _Q6_BATCH)   # tokens per sequence

q6 = NumericQuestion(
    id="q6", set=SET, objective="O5 context at which the KV cache equals the weights", points=2,
    prompt="Llama-3-8B has 8,030,261,248 parameters, stored in fp16, and an fp16 KV cache. A server decodes a "
           "batch of 16 sequences of equal length. At how many tokens per sequence does the KV cache hold as "
           "many bytes as the weights? (A plain number of tokens; fractions allowed.)",
    # 0.2 %: the prompt gives the exact parameter count; the nominal 8e9 (0.4 % off) is a slip, not an answer
    expected=_Q6, rel_tol=0.002,
    detect=[d.ratio(2, "That is twice the answer: your bytes per token count only K or only V.",
                    name="forgot_kv_bytes"), d.bits_vs_bytes()],
    mistakes=[
        Mistake(_Q6 * _Q6_BATCH, "That is the crossover for one sequence: with 16 sequences, each holding its own "
                                 "cache, the cache grows 16 times faster."),
        Mistake(_Q6 / 2, "You used the parameter count as the weights' bytes; fp16 stores 2 bytes per parameter."),
        Mistake(_Q6 / _Q1_RATIO, "You used the 32 query heads; only the 8 KV heads are cached."),
    ],
    hints=["Set batch × c × (bytes per token) equal to parameters × 2 bytes and solve for c.",
           "c = weight bytes / (batch × KV bytes per token)."],
    solution=f"$c = \\dfrac{{N b_w}}{{B\\, k_{{tok}}}} = \\dfrac{{{_L3.params:,} \\times 2}}"
             f"{{16 \\times {_Q1:,.0f}}} \\approx {_Q6:,.0f}$ tokens: context × batch ≈ "
             f"{_Q6 * _Q6_BATCH:,.0f} tokens in total.",
)

# ---------------------------------------------------------------------------------------------
# q7: tokens that fit beside the weights
# ---------------------------------------------------------------------------------------------
def _max_tokens(capacity, weight_bytes, kv_bytes_per_token, batch=1):
    """Reference: whole tokens per sequence that fit beside the weights (0 when the weights don't fit)."""
    free = capacity - weight_bytes
    if free <= 0:
        return 0
    return math.floor(free / (kv_bytes_per_token * batch))


def _fit_case(model, hardware, batch=1, precision="fp16"):
    m, hw = get_model(model), get_hardware(hardware)
    args = (hw.capacity, m.weight_bytes(precision), m.kv_bytes_per_token("fp16"), batch)
    return args, _max_tokens(*args)


_Q7_CASES = [
    _fit_case("llama-3-8b", "rtx-4090"),
    _fit_case("llama-2-7b", "a100-80gb", batch=4),
    _fit_case("llama-3-70b", "h100-sxm"),                  # fp16 weights exceed the capacity: 0
    _fit_case("llama-3-70b", "h100-sxm", batch=8, precision="int4"),
    _fit_case("qwen2.5-7b", "l4", batch=2),
]

q7 = FunctionQuestion(
    id="q7", set=SET, objective="O6 tokens that fit beside the weights", points=2,
    prompt="Write max_tokens(capacity, weight_bytes, kv_bytes_per_token, batch=1): the largest whole number of "
           "tokens per sequence whose KV cache, for `batch` sequences, fits in `capacity` bytes beside the "
           "weights. Return 0 when the weights alone do not fit.",
    expected=_max_tokens, rel_tol=0, whole=True, cases=_Q7_CASES,
    mistakes=[
        Mistake(lambda capacity, weight_bytes, kv_bytes_per_token, batch=1:
                max(capacity - weight_bytes, 0) / (kv_bytes_per_token * batch),
                "Round down: a fraction of a token cannot be cached (math.floor)."),
        Mistake(lambda capacity, weight_bytes, kv_bytes_per_token, batch=1:
                math.floor(capacity / (kv_bytes_per_token * batch)),
                "The weights occupy memory too: subtract them from the capacity first."),
        Mistake(lambda capacity, weight_bytes, kv_bytes_per_token, batch=1:
                max(math.floor((capacity - weight_bytes) / kv_bytes_per_token), 0),
                "Your function ignores `batch`: each sequence needs its own cache, so divide by batch too."),
        Mistake(lambda capacity, weight_bytes, kv_bytes_per_token, batch=1:
                math.floor((capacity - weight_bytes) / (kv_bytes_per_token * batch)),
                "When the weights alone exceed the capacity your function returns a negative count; return 0."),
    ],
    hints=["Free memory = capacity - weight bytes.",
           "Divide the free memory by the bytes one token costs across the batch, and round down."],
    solution="```python\nimport math\n\ndef max_tokens(capacity, weight_bytes, kv_bytes_per_token, batch=1):\n"
             "    free = capacity - weight_bytes\n    if free <= 0:\n        return 0\n"
             "    return math.floor(free / (kv_bytes_per_token * batch))\n```",
)

# ---------------------------------------------------------------------------------------------
# q8: which model caches the fewest bytes per token?
# ---------------------------------------------------------------------------------------------
_Q8_OPTIONS = {"Llama-2-7B": "llama-2-7b", "Mistral-7B": "mistral-7b", "Llama-3-8B": "llama-3-8b",
               "Qwen2.5-7B": "qwen2.5-7b", "DeepSeek-V3": "deepseek-v3"}
_Q8 = min(_Q8_OPTIONS, key=lambda k: get_model(_Q8_OPTIONS[k]).kv_bytes_per_token())

q8 = ChoiceQuestion(
    id="q8", set=SET, objective="O2 MHA, GQA and MLA from the catalog", points=1,
    prompt="Which of these models adds the fewest KV-cache bytes per token (fp16 cache)?",
    options=list(_Q8_OPTIONS), expected=_Q8,
    mistakes=[
        Mistake("DeepSeek-V3", "MLA compresses each layer to a 512 + 64 latent, but DeepSeek-V3 has 61 layers: "
                               "61 × 576 values per token. Compare with 2 × layers × KV heads × head_dim of the "
                               "others."),
        Mistake("Mistral-7B", "Mistral-7B caches 2 × 32 × 8 × 128 values per token (its window limits how many "
                              "tokens, not the bytes per token). One of the others has fewer layers and KV heads."),
        Mistake("Llama-2-7B", "Llama-2-7B is MHA: 32 KV heads per layer, the largest cache per token here."),
        Mistake("Llama-3-8B", "Llama-3-8B has the same 2 × 32 × 8 × 128 shape as Mistral-7B; one model has fewer "
                              "layers and KV heads."),
    ],
    hints=["Compute 2 × layers × KV heads × head_dim for each (MLA: layers × (512 + 64)).",
           "`get_model(name).kv_values_per_token` gives them all."],
    solution="Values per token: Llama-2-7B 262,144; Mistral-7B and Llama-3-8B 65,536; DeepSeek-V3 "
             "61 × 576 = 35,136; Qwen2.5-7B 2 × 28 × 4 × 128 = 28,672. Qwen2.5-7B (GQA with 4 KV heads) "
             "caches the fewest.",
)

numbers_only(q7, "return a number, not text")  # its result is a plain number: text is a mistake

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8]
