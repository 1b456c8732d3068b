"""Every formula of the course, once, as a sympy expression.

Lessons: 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10

This module is the single source of truth. ``python -m course_lib.core.codegen`` (``make codegen``) turns
each expression into a plain-Python function in ``course_lib/core/_generated.py``; the estimator and the
catalogs call those functions, so the derivation shown in a lesson and the number the calculator
prints cannot disagree. A test regenerates the module and fails on any difference.

Importing this module imports sympy; ``import course_lib`` does not (it only needs the generated
code). Lessons import it to display derivations: ``formulas.latex("weight_bytes")``.

Symbols are named like the Python arguments of the generated functions; ``LATEX_NAMES`` gives the
notation used in the lessons.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["Formula", "FORMULAS", "S", "latex", "equation", "expr", "derive_decode_sum", "LATEX_NAMES"]


def _sym(name: str, latex_name: str, **assumptions) -> sp.Symbol:
    s = sp.Symbol(name, **assumptions)
    LATEX_NAMES[s] = latex_name
    return s


LATEX_NAMES: dict[sp.Symbol, str] = {}
_pos = dict(positive=True)
_nn = dict(nonnegative=True)


class S:
    """The course's symbols (``S.params`` prints as N in LaTeX)."""

    params = _sym("params", "N", **_pos)
    bytes_per_weight = _sym("bytes_per_weight", r"b_w", **_pos)
    bytes_per_kv = _sym("bytes_per_kv", r"b_{kv}", **_pos)
    layers = _sym("layers", "L", integer=True, positive=True)
    hidden = _sym("hidden", "h", integer=True, positive=True)
    heads = _sym("heads", r"H_q", integer=True, positive=True)
    kv_heads = _sym("kv_heads", r"H_{kv}", integer=True, positive=True)
    head_dim = _sym("head_dim", "d", integer=True, positive=True)
    intermediate = _sym("intermediate", "I", integer=True, positive=True)
    vocab = _sym("vocab", "V", integer=True, positive=True)
    gated = _sym("gated", r"g", **_nn)            # 1 for a gated (SwiGLU) MLP, 0 for a plain one
    qkv_bias = _sym("qkv_bias", r"\beta_{qkv}", **_nn)
    o_bias = _sym("o_bias", r"\beta_o", **_nn)
    mlp_bias = _sym("mlp_bias", r"\beta_{mlp}", **_nn)
    norm_vectors = _sym("norm_vectors", r"\nu", **_pos)  # 1 for RMSNorm (weight), 2 for LayerNorm (weight, bias)
    qk_norm = _sym("qk_norm", r"\kappa", **_nn)
    block_norms = _sym("block_norms", r"n_{norm}", integer=True, positive=True)  # norms per block (Gemma 2/3: 4)
    local_layers = _sym("local_layers", r"L_{loc}", integer=True, nonnegative=True)  # sliding-window layers
    local_window = _sym("local_window", r"W_{loc}", integer=True, positive=True)
    q_rank = _sym("q_rank", r"r_q", **_nn)         # MLA query LoRA rank (0: no query compression)
    kv_rank = _sym("kv_rank", r"r_{kv}", integer=True, positive=True)
    rope_dim = _sym("rope_dim", r"d_{R}", integer=True, nonnegative=True)
    nope_dim = _sym("nope_dim", r"d_{qk}", integer=True, positive=True)
    v_dim = _sym("v_dim", r"d_v", integer=True, positive=True)
    experts = _sym("experts", "E", integer=True, positive=True)
    experts_per_token = _sym("experts_per_token", "k", integer=True, positive=True)
    routed_tokens = _sym("routed_tokens", "T", integer=True, positive=True)
    kv_values = _sym("kv_values", r"v_{kv}", **_pos)
    tokens = _sym("tokens", "T", integer=True, nonnegative=True)
    batch = _sym("batch", "B", integer=True, positive=True)
    context = _sym("context", "c", integer=True, positive=True)
    prompt = _sym("prompt", "P", integer=True, positive=True)
    new_prompt = _sym("new_prompt", r"P_{new}", integer=True, positive=True)
    cached = _sym("cached", r"P_{c}", integer=True, nonnegative=True)
    n = _sym("n", "n", integer=True, positive=True)
    step = _sym("step", "j", integer=True, positive=True)
    block_params = _sym("block_params", r"N_{blocks}", **_pos)
    streamed_weight_bytes = _sym("streamed_weight_bytes", r"W_s", **_pos)
    kv_bytes_per_token = _sym("kv_bytes_per_token", r"k_{tok}", **_nn)
    attn_dim = _sym("attn_dim", r"d_{att}", **_pos)
    rows = _sym("rows", "m", integer=True, positive=True)
    cols = _sym("cols", "k", integer=True, positive=True)
    flops = _sym("flops", r"F_{op}", **_nn)
    nbytes = _sym("nbytes", r"Q", **_pos)
    peak_flops = _sym("peak_flops", r"\Pi", **_pos)
    bandwidth = _sym("bandwidth", r"\beta", **_pos)
    compute_efficiency = _sym("compute_efficiency", r"\eta_c", **_pos)
    bandwidth_efficiency = _sym("bandwidth_efficiency", r"\eta_m", **_pos)
    first = _sym("first", "a", integer=True)
    last = _sym("last", "z", integer=True)
    intercept = _sym("intercept", r"\alpha", real=True)
    slope = _sym("slope", r"\sigma", real=True)
    ttft = _sym("ttft", r"t_{\mathrm{TTFT}}", **_pos)
    tpot = _sym("tpot", r"t_{\mathrm{TPOT}}", **_pos)
    # lesson 06: more conventions, batching, overhead
    ops = _sym("ops", r"n_{op}", integer=True, nonnegative=True)
    op_overhead = _sym("op_overhead", r"t_{op}", **_nn)
    roofline_time = _sym("roofline_time", r"t_{roof}", **_nn)
    # lesson 07: caching
    hit_rate = _sym("hit_rate", "h", **_nn)
    ttft_hit = _sym("ttft_hit", r"t_{hit}", **_pos)
    ttft_miss = _sym("ttft_miss", r"t_{miss}", **_pos)
    write_overhead = _sym("write_overhead", r"t_{w}", **_nn)
    system_tokens = _sym("system_tokens", r"S", integer=True, nonnegative=True)
    user_tokens = _sym("user_tokens", r"u", integer=True, nonnegative=True)
    reply_tokens = _sym("reply_tokens", r"r", integer=True, nonnegative=True)
    turns = _sym("turns", r"T", integer=True, positive=True)
    turn = _sym("turn", r"t", integer=True, positive=True)
    block_tokens = _sym("block_tokens", r"b", integer=True, positive=True)
    capacity = _sym("capacity", r"M", **_pos)
    weights_bytes = _sym("weights_bytes", r"W", **_nn)
    session_tokens = _sym("session_tokens", r"T_s", integer=True, positive=True)
    # lessons 06 and 08: roofline points, attention traffic, efficiency
    bytes_per_element = _sym("bytes_per_element", r"b_e", **_pos)
    predicted_time = _sym("predicted_time", r"t_{pred}", **_pos)
    measured_time = _sym("measured_time", r"t_{meas}", **_pos)
    fixed_time = _sym("fixed_time", r"t_0", real=True)
    rate_fraction = _sym("rate_fraction", r"\eta", **_pos)
    predicted_a = _sym("predicted_a", r"t_{pred,a}", **_pos)
    predicted_b = _sym("predicted_b", r"t_{pred,b}", **_pos)
    measured_a = _sym("measured_a", r"t_{meas,a}", **_pos)
    measured_b = _sym("measured_b", r"t_{meas,b}", **_pos)
    # lesson 09: tensor parallelism
    devices = _sym("devices", r"G", integer=True, positive=True)
    message_bytes = _sym("message_bytes", r"m", **_nn)
    link_bandwidth = _sym("link_bandwidth", r"\beta_{link}", **_pos)
    base_latency = _sym("base_latency", r"\alpha_0", **_nn)       # a collective's fixed start-up cost
    hop_latency = _sym("hop_latency", r"\alpha", **_nn)           # latency of each step (hop) of a collective
    tree_depth = _sym("tree_depth", r"d", integer=True, positive=True)   # ceil(log2 G) levels of a binary tree
    sequences = _sym("sequences", r"C", integer=True, positive=True)     # sequences in flight per GPU
    decode_step_time = _sym("decode_step_time", r"t_{dec}", **_nn)
    prefill_time = _sym("prefill_time", r"t_{pf}", **_nn)
    decode_steps = _sym("decode_steps", r"(n - 1)", integer=True, positive=True)   # n - 1 for n new tokens
    # lesson 10: serving many users
    arrival_rate = _sym("arrival_rate", r"\lambda", **_pos)
    gpu_hour_price = _sym("gpu_hour_price", r"p_{GPU}", **_pos)     # the price of one GPU for one hour
    board_power = _sym("board_power", r"P_{board}", **_pos)          # watts one GPU draws (at most its board power)
    token_rate = _sym("token_rate", r"X_{tok}", **_pos)              # output tokens per second of all the GPUs
    transfer_time = _sym("transfer_time", r"t_{x}", **_nn)           # a whole K/V transfer, sent at once
    time_in_system = _sym("time_in_system", r"W", **_nn)
    acceptance = _sym("acceptance", r"\alpha", **_nn)
    draft_tokens = _sym("draft_tokens", r"k", integer=True, nonnegative=True)
    # the calibrated decode model (course_lib.measure.validate)
    kv_bandwidth = _sym("kv_bandwidth", r"\beta_{kv}", **_pos)
    weights_time = _sym("weights_time", r"t_W", **_nn)
    kv_time = _sym("kv_time", r"t_{KV}", **_nn)
    view_ops = _sym("view_ops", r"n_{view}", integer=True, nonnegative=True)
    view_overhead = _sym("view_overhead", r"t_{view}", **_nn)
    # a real engine (Hugging Face transformers generate(), course_lib.measure.engines.hf; lesson 08)
    copy_bandwidth = _sym("copy_bandwidth", r"\beta_{copy}", **_pos)
    step_fixed = _sym("step_fixed", r"t_{step}", **_nn)
    step_per_layer = _sym("step_per_layer", r"t_{layer}", **_nn)
    prefill_fixed = _sym("prefill_fixed", r"t_{pf,0}", **_nn)
    prefill_per_layer = _sym("prefill_per_layer", r"t_{pf,layer}", **_nn)
    layer_passes_time = _sym("layer_passes_time", r"t_{pass}", **_nn)
    cold_factor = _sym("cold_factor", r"\chi", **_pos)
    linear_time = _sym("linear_time", r"t_{lin}", **_nn)
    attention_time = _sym("attention_time", r"t_{att}", **_nn)
    lm_head_time = _sym("lm_head_time", r"t_{head}", **_nn)
    # engine profiles fitted to published measurements (course_lib.core.forecast; lesson 08)
    steps = _sym("steps", r"n_{step}", integer=True, nonnegative=True)
    requests = _sym("requests", r"n_{req}", integer=True, nonnegative=True)
    request_fixed = _sym("request_fixed", r"t_{req}", **_nn)
    floor_memory_time = _sym("floor_memory_time", r"t_{mem}", **_nn)
    floor_compute_time = _sym("floor_compute_time", r"t_{gemm}", **_nn)
    floor_attention_time = _sym("floor_attention_time", r"t_{attn}", **_nn)
    attention_efficiency = _sym("attention_efficiency", r"\eta_a", **_pos)
    floor_prefill_attention_time = _sym("floor_prefill_attention_time", r"t_{attn,pf}", **_nn)
    prefill_attention_efficiency = _sym("prefill_attention_efficiency", r"\eta_{a,pf}", **_pos)
    dequant_penalty = _sym("dequant_penalty", r"\kappa_q", **_nn)
    step_tokens = _sym("step_tokens", r"n_{tok}", integer=True, nonnegative=True)
    token_fixed = _sym("token_fixed", r"t_{tok}", **_nn)
    floor_expanded_kv_time = _sym("floor_expanded_kv_time", r"t_{kv,x}", **_nn)
    expanded_kv_passes = _sym("expanded_kv_passes", r"\kappa_x", **_nn)
    floor_f16_copy_time = _sym("floor_f16_copy_time", r"t_{dq}", **_nn)
    f16_copy_passes = _sym("f16_copy_passes", r"\kappa_{dq}", **_nn)
    eager_layer_steps = _sym("eager_layer_steps", r"n_{eager}", **_nn)
    eager_fixed = _sym("eager_fixed", r"t_{eager}", **_nn)
    looped_experts = _sym("looped_experts", r"n_{exp}", integer=True, nonnegative=True)
    expert_dispatch_share = _sym("expert_dispatch_share", r"\rho_{exp}", **_nn)
    gemm_floor_time = _sym("gemm_floor_time", r"t_{gemm}", **_pos)
    weights_floor_time = _sym("weights_floor_time", r"t_{mem}", **_pos)


@dataclass(frozen=True)
class Formula:
    name: str
    expr: sp.Expr
    args: tuple[sp.Symbol, ...]
    doc: str
    unit: str

    @property
    def lhs(self) -> str:
        return r"\mathrm{" + self.name.replace("_", r"\_") + "}"


def _f(name, expr, args, doc, unit):
    missing = expr.free_symbols - set(args)
    assert not missing, f"{name}: symbols {missing} not in args"
    FORMULAS[name] = Formula(name, expr, tuple(args), doc, unit)


FORMULAS: dict[str, Formula] = {}
s = S

# --- sizes -------------------------------------------------------------------------------------------
_f("weight_bytes", s.params * s.bytes_per_weight, (s.params, s.bytes_per_weight),
   "Bytes needed to store params weights at bytes_per_weight each.", "B")
_f("kv_values_per_token", 2 * s.layers * s.kv_heads * s.head_dim, (s.layers, s.kv_heads, s.head_dim),
   "Values cached per token: K and V (the 2), for every layer and KV head, head_dim each.", "values")
_f("mla_kv_values_per_token", s.layers * (s.kv_rank + s.rope_dim), (s.layers, s.kv_rank, s.rope_dim),
   "Multi-head latent attention caches one compressed latent (kv_rank) plus the shared rotary key per layer.",
   "values")
_f("kv_cache_bytes", s.kv_values * s.bytes_per_kv * s.tokens * s.batch,
   (s.kv_values, s.bytes_per_kv, s.tokens, s.batch),
   "Bytes of KV cache for `tokens` tokens in each of `batch` sequences.", "B")
_f("interleaved_attended_tokens",
   ((s.layers - s.local_layers) * s.context + s.local_layers * sp.Min(s.context, s.local_window)) / s.layers,
   (s.layers, s.local_layers, s.local_window, s.context),
   "Tokens per layer, on average, whose K/V a model holds and reads at `context` when `local_layers` of its `layers` "
   "attend only the last `local_window` tokens and the rest the whole context (Gemma 2/3, gpt-oss); times the "
   "per-token K/V of all layers it is the per-layer sum.", "tokens")

# --- parameter counts of one transformer block --------------------------------------------------------
_f("attention_params",
   s.hidden * s.heads * s.head_dim + 2 * s.hidden * s.kv_heads * s.head_dim + s.heads * s.head_dim * s.hidden
   + s.qkv_bias * (s.heads + 2 * s.kv_heads) * s.head_dim + s.o_bias * s.hidden,
   (s.hidden, s.heads, s.kv_heads, s.head_dim, s.qkv_bias, s.o_bias),
   "Q, K, V and output projections of (grouped-query) attention, with optional biases.", "parameters")
_f("mla_attention_params",
   # query: optional low-rank path h -> r_q (+ its norm) -> heads*(nope+rope); else h -> heads*(nope+rope)
   sp.Piecewise((s.hidden * s.q_rank + s.q_rank + s.q_rank * s.heads * (s.nope_dim + s.rope_dim), s.q_rank > 0),
                (s.hidden * s.heads * (s.nope_dim + s.rope_dim), True))
   + s.hidden * (s.kv_rank + s.rope_dim) + s.kv_rank + s.kv_rank * s.heads * (s.nope_dim + s.v_dim)
   + s.heads * s.v_dim * s.hidden,
   (s.hidden, s.heads, s.q_rank, s.kv_rank, s.rope_dim, s.nope_dim, s.v_dim),
   "Multi-head latent attention (DeepSeek-V2/V3): low-rank query and KV projections with their norms.",
   "parameters")
_f("mlp_params", (2 + s.gated) * s.hidden * s.intermediate + s.mlp_bias * ((1 + s.gated) * s.intermediate + s.hidden),
   (s.hidden, s.intermediate, s.gated, s.mlp_bias),
   "Feed-forward block: up (+ gate when gated) and down projections, optional biases.", "parameters")
_f("block_norm_params", 2 * s.norm_vectors * s.hidden + 2 * s.qk_norm * s.head_dim,
   (s.hidden, s.norm_vectors, s.qk_norm, s.head_dim),
   "The two norms of a block (weight, + bias for LayerNorm) and optional per-head Q/K norms.", "parameters")
_f("block_norms_params", s.block_norms * s.norm_vectors * s.hidden + 2 * s.qk_norm * s.head_dim,
   (s.hidden, s.norm_vectors, s.block_norms, s.qk_norm, s.head_dim),
   "block_norm_params with `block_norms` norms per block (Gemma 2/3: four, before and after attention and the MLP).",
   "parameters")
_f("expected_experts",
   s.experts * (1 - (1 - s.experts_per_token / s.experts) ** s.routed_tokens),
   (s.experts, s.experts_per_token, s.routed_tokens),
   "Expected number of distinct experts touched when routed_tokens tokens each pick experts_per_token of "
   "experts (uniform routing): each expert is missed by one token with probability 1 - k/E.", "experts")

# --- FLOPs ---------------------------------------------------------------------------------------------
_f("prefill_flops",
   s.batch * (2 * s.block_params * s.new_prompt + 2 * s.vocab * s.hidden
              + 2 * s.layers * s.heads * s.attn_dim * (s.new_prompt ** 2 + 2 * s.new_prompt * s.cached)),
   (s.batch, s.block_params, s.new_prompt, s.vocab, s.hidden, s.layers, s.heads, s.attn_dim, s.cached),
   "Prefill: 2 FLOPs per block weight per new prompt token, the lm_head at the last position only, and causal "
   "attention (4 d FLOPs per query-key pair per head; new tokens attend to the cached ones and, causally, to each "
   "other).", "FLOP")
_f("decode_flops",
   s.batch * (2 * (s.block_params + s.vocab * s.hidden) + 4 * s.layers * s.heads * s.attn_dim * s.context),
   (s.batch, s.block_params, s.vocab, s.hidden, s.layers, s.heads, s.attn_dim, s.context),
   "One decode step: 2 FLOPs per weight (matrix-vector products, lm_head included) plus attention over "
   "`context` cached tokens.", "FLOP")

_f("prefill_attention_flops",
   s.batch * 2 * s.layers * s.heads * s.attn_dim * (s.new_prompt ** 2 + 2 * s.new_prompt * s.cached),
   (s.batch, s.layers, s.heads, s.attn_dim, s.new_prompt, s.cached),
   "The attention term of prefill_flops: scores and weighted values, 4 d FLOPs per query-key pair per head, "
   "causal (new tokens attend to the cached ones and to the new ones before them).", "FLOP")
_f("decode_attention_flops", 4 * s.batch * s.layers * s.heads * s.attn_dim * s.context,
   (s.batch, s.layers, s.heads, s.attn_dim, s.context),
   "The attention term of decode_flops: one query per sequence against `context` keys and values.", "FLOP")
_f("mla_latent_attn_dim", (s.kv_rank + s.rope_dim + s.kv_rank) / 2, (s.kv_rank, s.rope_dim),
   "attn_dim of multi-head latent attention computed on the compressed latent (absorbed projections, as "
   "FlashMLA decodes): scores over kv_rank + rope_dim values, weighted sums over kv_rank, so 4 attn_dim = "
   "2 (2 kv_rank + rope_dim) FLOPs per query-key pair per head.", "values")

_f("gemv_flops", 2 * s.rows * s.cols * s.batch, (s.rows, s.cols, s.batch),
   "A matrix-vector product y = W x (W rows x cols) for `batch` vectors: one multiply and one add per weight "
   "per vector.", "FLOP")
_f("streamed_params", s.block_params + s.vocab * s.hidden + s.routed_tokens * s.hidden,
   (s.block_params, s.vocab, s.hidden, s.routed_tokens),
   "Weights one forward step reads: every block weight it uses, the full lm_head (V x h, tied or not) and one "
   "embedding row per token.", "parameters")

# --- bytes moved -----------------------------------------------------------------------------------------
_f("decode_bytes", s.streamed_weight_bytes + s.batch * s.context * s.kv_bytes_per_token,
   (s.streamed_weight_bytes, s.batch, s.context, s.kv_bytes_per_token),
   "One decode step streams every weight it uses once, plus the K/V of `context` tokens of every sequence.",
   "B")
_f("prefill_bytes", s.streamed_weight_bytes + s.batch * (s.cached + s.new_prompt) * s.kv_bytes_per_token,
   (s.streamed_weight_bytes, s.batch, s.cached, s.new_prompt, s.kv_bytes_per_token),
   "Prefill reads the weights once, reads any cached K/V and writes the new tokens' K/V.", "B")

# --- roofline ----------------------------------------------------------------------------------------------
_f("arithmetic_intensity", s.flops / s.nbytes, (s.flops, s.nbytes), "FLOPs per byte moved.", "FLOP/B")
_f("ridge_point", s.peak_flops / s.bandwidth, (s.peak_flops, s.bandwidth),
   "Intensity at which a device turns from memory-bound to compute-bound.", "FLOP/B")
_f("compute_time", s.flops / (s.peak_flops * s.compute_efficiency), (s.flops, s.peak_flops, s.compute_efficiency),
   "Time if arithmetic were the only limit.", "s")
_f("memory_time", s.nbytes / (s.bandwidth * s.bandwidth_efficiency), (s.nbytes, s.bandwidth, s.bandwidth_efficiency),
   "Time if memory traffic were the only limit.", "s")
_f("operator_time",
   sp.Max(s.flops / (s.peak_flops * s.compute_efficiency), s.nbytes / (s.bandwidth * s.bandwidth_efficiency)),
   (s.flops, s.peak_flops, s.compute_efficiency, s.nbytes, s.bandwidth, s.bandwidth_efficiency),
   "Roofline time of one operator (kernel): the slower of its compute and its memory traffic. Kernels run one "
   "after another, so a step costs the sum of its operators' times.", "s")
_f("phase_time", FORMULAS["operator_time"].expr,
   (s.flops, s.peak_flops, s.compute_efficiency, s.nbytes, s.bandwidth, s.bandwidth_efficiency),
   "The single-max simplification of a phase: its total FLOPs and total bytes as if one operator did them all. "
   "Never above the sum of its operators' times; equal when every operator has the same bound.", "s")

# --- latency -------------------------------------------------------------------------------------------------
_f("linear_step_sum", sp.summation(s.intercept + s.slope * s.context, (s.context, s.first, s.last)),
   (s.intercept, s.slope, s.first, s.last),
   "Sum over integer contexts first..last of a per-step time intercept + slope * context (exact).", "s")
_f("total_latency", s.ttft + (s.n - 1) * s.tpot, (s.ttft, s.n, s.tpot),
   "Time to the n-th token: the first comes from prefill, the other n - 1 from decode steps.", "s")
_f("tokens_per_second", s.n / (s.ttft + (s.n - 1) * s.tpot), (s.n, s.ttft, s.tpot),
   "Tokens per second seen by one user over the whole response.", "token/s")

# --- other conventions, batching and overhead (lesson 06) ----------------------------------------------------
_f("total_latency_n_tpot", s.ttft + s.n * s.tpot, (s.ttft, s.n, s.tpot),
   "A common convention that counts n decode steps after the first token (one step too many).", "s")
_f("e2e_per_token", (s.ttft + (s.n - 1) * s.tpot) / s.n, (s.ttft, s.n, s.tpot),
   "End-to-end latency divided by the tokens generated: mixes prefill into a per-token figure.", "s")
_f("critical_batch", s.peak_flops * s.bytes_per_weight / (2 * s.bandwidth),
   (s.peak_flops, s.bytes_per_weight, s.bandwidth),
   "Batch at which a decode step's weight GEMMs turn compute-bound: 2 B FLOPs per weight of b_w bytes reach the "
   "ridge point peak / bandwidth (KV reads and attention ignored).", "sequences")
_f("overhead_time", s.ops * s.op_overhead, (s.ops, s.op_overhead),
   "Fixed cost of launching ops one after another (framework dispatch, kernel launch), independent of size.", "s")
_f("step_time_with_overhead", s.roofline_time + s.ops * s.op_overhead, (s.roofline_time, s.ops, s.op_overhead),
   "A step's roofline time plus the fixed per-op dispatch cost that the roofline leaves out.", "s")

# --- caching (lesson 07) ---------------------------------------------------------------------------------------
_f("expected_ttft", s.hit_rate * s.ttft_hit + (1 - s.hit_rate) * s.ttft_miss, (s.hit_rate, s.ttft_hit, s.ttft_miss),
   "Mean time to first token when a fraction hit_rate of requests find their prefix cached.", "s")
_f("cache_break_even_hit_rate", s.write_overhead / (s.ttft_miss - s.ttft_hit + s.write_overhead),
   (s.write_overhead, s.ttft_miss, s.ttft_hit),
   "Hit rate above which a cache lowers the mean TTFT when every miss also pays write_overhead to store its K/V: "
   "the solution h of h t_hit + (1 - h)(t_miss + t_w) = t_miss.", "fraction")
_f("block_aligned_tokens", s.block_tokens * sp.floor(s.tokens / s.block_tokens), (s.tokens, s.block_tokens),
   "Tokens a block-granular prefix cache can reuse: only whole blocks of block_tokens are cached.", "tokens")
_f("session_prefill_tokens_nocache",
   sp.factor(sp.summation(s.system_tokens + s.turn * s.user_tokens + (s.turn - 1) * s.reply_tokens,
                          (s.turn, 1, s.turns))),
   (s.system_tokens, s.user_tokens, s.reply_tokens, s.turns),
   "Prompt tokens prefilled over `turns` chat turns without a cache: turn t re-reads the system prompt, t user "
   "messages and t - 1 replies (quadratic in turns).", "tokens")
_f("session_prefill_tokens_cached",
   s.system_tokens + s.turns * s.user_tokens + (s.turns - 1) * sp.Min(s.reply_tokens, 1),
   (s.system_tokens, s.user_tokens, s.reply_tokens, s.turns),
   "Prompt tokens prefilled over `turns` turns with a session cache: the system prompt once, then each new user "
   "message plus the previous reply's last token (sampled but never fed back, so it has no K/V yet; every other "
   "reply token got its K/V while it was decoded). Linear in turns.", "tokens")
_f("sessions_that_fit", sp.floor((s.capacity - s.weights_bytes) / (s.kv_bytes_per_token * s.session_tokens)),
   (s.capacity, s.weights_bytes, s.kv_bytes_per_token, s.session_tokens),
   "Whole sessions whose cached K/V (session_tokens each) fit in the memory left beside the weights.", "sessions")

# --- tensor parallelism (lesson 09) ------------------------------------------------------------------------------
_f("ring_allreduce_time", 2 * (s.devices - 1) / s.devices * s.message_bytes / s.link_bandwidth,
   (s.devices, s.message_bytes, s.link_bandwidth),
   "Bandwidth term of a ring all-reduce of message_bytes over `devices` GPUs: each sends and receives "
   "2 (G - 1)/G of the message (per-hop latency not counted).", "s")
_f("allreduce_ring_time",
   s.base_latency + 2 * (s.devices - 1) * s.hop_latency + FORMULAS["ring_allreduce_time"].expr,
   (s.devices, s.message_bytes, s.link_bandwidth, s.base_latency, s.hop_latency),
   "A ring all-reduce with its latency (the alpha-beta model NCCL's tuner uses): a start-up cost, 2 (G - 1) "
   "steps of hop_latency each (a reduce-scatter, then an all-gather), and 2 (G - 1)/G of the message through "
   "each GPU's link. At small messages the latency terms dominate.", "s")
_f("allreduce_tree_time", s.base_latency + 2 * s.tree_depth * s.hop_latency + 2 * s.message_bytes / s.link_bandwidth,
   (s.tree_depth, s.message_bytes, s.link_bandwidth, s.base_latency, s.hop_latency),
   "A tree all-reduce: a reduce up d steps and a broadcast down them (2 d steps), pipelined, so each link carries "
   "the message once each way: 2 m / beta (NCCL's tree bandwidth is half its bus bandwidth). Inside one node "
   "NCCL's tree is a chain, d = G - 1 (tuning.cc: 2 ((nRanks/nNodes - 1) intraLat + log2(nNodes) interLat)); "
   "between nodes it adds log2(nodes) levels.", "s")
_f("allreduce_oneshot_time",
   s.base_latency + s.hop_latency + (s.devices - 1) * s.message_bytes / s.link_bandwidth,
   (s.devices, s.message_bytes, s.link_bandwidth, s.base_latency, s.hop_latency),
   "A one-shot all-reduce inside one switched node (NVSwitch): every GPU reads the G - 1 other partial sums "
   "straight from their memory and adds them, one step; its link carries (G - 1) m. The custom all-reduce of "
   "vLLM and TensorRT-LLM for small messages.", "s")
_f("allgather_ring_time",
   s.base_latency + (s.devices - 1) * s.hop_latency + (s.devices - 1) / s.devices * s.message_bytes / s.link_bandwidth,
   (s.devices, s.message_bytes, s.link_bandwidth, s.base_latency, s.hop_latency),
   "A ring all-gather of a message_bytes result: G - 1 steps, each GPU receiving the (G - 1)/G of the result it "
   "does not hold.", "s")
_f("alltoall_time", FORMULAS["allgather_ring_time"].expr,
   (s.devices, s.message_bytes, s.link_bandwidth, s.base_latency, s.hop_latency),
   "An all-to-all in which each GPU sends message_bytes in all, 1/G to every GPU (itself included): G - 1 "
   "exchanges, (G - 1)/G of the message leaving through its link (expert parallelism's dispatch and combine). "
   "Same cost as a ring all-gather of the same bytes.", "s")
_f("steady_state_tpot", s.decode_step_time + s.sequences * s.prefill_time / s.decode_steps,
   (s.decode_step_time, s.sequences, s.prefill_time, s.decode_steps),
   "Continuous batching in its steady state: with C sequences in flight per GPU, each sequence's n - 1 decode "
   "steps (decode_steps) also carry the C prefills of the sequences that replace the finished ones.", "s")


# --- serving many users (lesson 10) -------------------------------------------------------------------------------
_f("littles_law", s.arrival_rate * s.time_in_system, (s.arrival_rate, s.time_in_system),
   "Little's law: the mean number of requests in a system equals the arrival rate times the mean time each "
   "spends in it (any queue in a steady state, measured from empty to empty).", "requests")
_f("speculative_tokens_per_step", (1 - s.acceptance ** (s.draft_tokens + 1)) / (1 - s.acceptance),
   (s.acceptance, s.draft_tokens),
   "Expected tokens one verification step of speculative decoding yields: k drafted tokens, each accepted with "
   "probability alpha until the first rejection, plus the target model's own token (the sum of alpha**i for "
   "i = 0..k; its limit at alpha = 1 is k + 1).", "tokens")
_f("cost_per_million_tokens", 10**6 * s.gpu_hour_price * s.devices / (3600 * s.token_rate),
   (s.gpu_hour_price, s.devices, s.token_rate),
   "What a million output tokens cost on `devices` GPUs rented at gpu_hour_price each per hour that together "
   "deliver token_rate tokens/s (the currency of the price; idle and spare GPUs are paid for too).", "price/Mtok")
_f("energy_per_token", s.board_power * s.devices / s.token_rate, (s.board_power, s.devices, s.token_rate),
   "Joules per output token of `devices` GPUs drawing board_power watts each while they deliver token_rate "
   "tokens/s (the board power is an upper bound of the draw: host, network and cooling are not counted).", "J")
_f("kv_transfer_time", s.prompt * s.kv_bytes_per_token / s.link_bandwidth,
   (s.prompt, s.kv_bytes_per_token, s.link_bandwidth),
   "Seconds to send the K/V of a P-token prompt from a prefill GPU to a decode GPU over a link of "
   "link_bandwidth (prefill/decode disaggregation; latency per message not counted).", "s")
_f("kv_transfer_exposed_time",
   sp.Max(s.transfer_time / s.layers, s.transfer_time - s.prefill_time * (s.layers - 1) / s.layers),
   (s.transfer_time, s.prefill_time, s.layers),
   "The part of a K/V transfer the first token waits for when each layer's K/V is sent as soon as the prefill has "
   "computed it (layer by layer, as disaggregated servers stream it): the last layer's share, or, when the link is "
   "slower than the prefill, what the transfer has left once the prefill is done.", "s")


# --- the calibrated decode/prefill model (course_lib.measure.validate, lesson 06) --------------------------------
_f("kv_read_time", s.batch * s.context * s.kv_bytes_per_token / s.kv_bandwidth,
   (s.batch, s.context, s.kv_bytes_per_token, s.kv_bandwidth),
   "Time a decode step spends reading the K/V of `context` tokens of every sequence, at the rate attention "
   "achieves reading them (kv_bandwidth, measured on an attention-shaped probe, not the copy ceiling).", "s")
_f("calibrated_decode_time",
   s.weights_time + s.kv_time + s.ops * s.op_overhead + s.view_ops * s.view_overhead,
   (s.weights_time, s.kv_time, s.ops, s.op_overhead, s.view_ops, s.view_overhead),
   "A decode step as measured: the weight matrices at the GEMV bandwidth their shapes achieve, the K/V reads, "
   "and the fixed dispatch cost of every other op (ops that launch a kernel and cheaper view/metadata ops).", "s")
_f("prefill_flops_dense",
   s.batch * (2 * s.block_params * s.new_prompt + 2 * s.vocab * s.hidden * s.new_prompt
              + 4 * s.layers * s.heads * s.attn_dim * s.new_prompt * (s.new_prompt + s.cached)),
   (s.batch, s.block_params, s.new_prompt, s.vocab, s.hidden, s.layers, s.heads, s.attn_dim, s.cached),
   "Prefill FLOPs as a simple implementation spends them: logits at every prompt position (not just the last) "
   "and a score for every query-key pair, masked rather than skipped (twice the causal attention count).", "FLOP")


# --- a real engine: Hugging Face transformers generate() (course_lib.measure.engines.hf, lesson 08) --------------
# Both add the engine's own work to the course's calibrated terms: its dynamic cache concatenates every layer's
# K/V each step (read the old cache, write the new: 2 c k_tok bytes), the logits are copied and reduced in fp32
# (3 passes over 4 V bytes), and the engine's fixed per-step cost (Python and dispatch: t_step + L t_layer) is
# probed on tiny copies of the architecture, scaled by the cold/hot op-cost ratio chi of the calibration.
_f("engine_decode_time",
   s.weights_time + s.kv_time + 2 * s.context * s.kv_bytes_per_token / s.copy_bandwidth
   + 3 * 4 * s.vocab / s.copy_bandwidth + s.cold_factor * (s.step_fixed + s.layers * s.step_per_layer),
   (s.weights_time, s.kv_time, s.context, s.kv_bytes_per_token, s.vocab, s.copy_bandwidth, s.step_fixed,
    s.step_per_layer, s.layers, s.cold_factor),
   "A decode step of transformers' generate(): the calibrated weights and K/V terms, the dynamic cache's "
   "concatenation of all K/V, the fp32 logits' copy and argmax, and the engine's probed per-step cost.", "s")
_f("engine_prefill_time",
   s.linear_time + s.attention_time + s.lm_head_time + 2 * s.prompt * s.kv_bytes_per_token / s.copy_bandwidth
   + 3 * 4 * s.vocab / s.copy_bandwidth + s.cold_factor * (s.prefill_fixed + s.layers * s.prefill_per_layer)
   + s.layers * s.layer_passes_time,
   (s.linear_time, s.attention_time, s.lm_head_time, s.prompt, s.kv_bytes_per_token, s.vocab, s.copy_bandwidth,
    s.prefill_fixed, s.prefill_per_layer, s.layers, s.cold_factor, s.layer_passes_time),
   "The prefill of transformers' generate(): block GEMMs at P rows, causal attention products, the lm_head on "
   "the last position only, the prompt's K/V written into the cache, the logits' copy and argmax, the "
   "engine's probed per-prefill cost, and each layer's elementwise passes over its P-row activations (MLP "
   "activation, norms, residual adds, rotary embedding; probed at the model's widths).", "s")


# --- roofline points, attention traffic and efficiency (lessons 06 and 08) --------------------------------------
_f("linear_flops", 2 * s.params * s.tokens, (s.params, s.tokens),
   "Matrix products of `params` weights applied to `tokens` tokens: one multiply and one add per weight per token.",
   "FLOP")
_f("square_matmul_bytes", 3 * s.rows ** 2 * s.bytes_per_element, (s.rows, s.bytes_per_element),
   "Bytes an m x m by m x m matrix product must move at least: read A and B, write C.", "B")
_f("attention_scores_bytes", s.heads * s.new_prompt ** 2 * s.bytes_per_element,
   (s.heads, s.new_prompt, s.bytes_per_element),
   "One layer's P x P attention-score matrices (every query head) if a naive kernel writes them to memory; "
   "FlashAttention keeps them in on-chip SRAM.", "B")
_f("qkv_bytes", s.new_prompt * (s.heads + 2 * s.kv_heads) * s.head_dim * s.bytes_per_element,
   (s.new_prompt, s.heads, s.kv_heads, s.head_dim, s.bytes_per_element),
   "One layer's Q, K and V activations for P prompt tokens.", "B")
_f("efficiency", s.predicted_time / s.measured_time, (s.predicted_time, s.measured_time),
   "Fraction of the predicted floor's speed a measurement reaches: 1 means at the floor, 0.25 four times slower.",
   "fraction")
_f("fixed_cost_time", s.fixed_time + s.predicted_time / s.rate_fraction,
   (s.fixed_time, s.predicted_time, s.rate_fraction),
   "A measured step modelled as a fixed cost per step plus the floor's time at a fraction eta of its rate.", "s")
# the two-point fit: the same program at two floors (e.g. f16 and q4_0 weights) fixes t0 and eta
_fit = sp.solve([sp.Eq(s.measured_a, FORMULAS["fixed_cost_time"].expr.subs(s.predicted_time, s.predicted_a)),
                 sp.Eq(s.measured_b, FORMULAS["fixed_cost_time"].expr.subs(s.predicted_time, s.predicted_b))],
                [s.fixed_time, s.rate_fraction], dict=True)[0]
_f("fixed_cost_fit_rate_fraction", sp.simplify(_fit[s.rate_fraction]),
   (s.predicted_a, s.predicted_b, s.measured_a, s.measured_b),
   "eta of fixed_cost_time through two cases: the change in floor over the change in measured time.", "fraction")
_f("fixed_cost_fit_fixed_time", sp.simplify(_fit[s.fixed_time]),
   (s.predicted_a, s.predicted_b, s.measured_a, s.measured_b),
   "t0 of fixed_cost_time through two cases (the intercept of measured against floor).", "s")

# --- engine profiles (course_lib.core.forecast, lesson 08): the floor's parts, each at the engine's own rate ---------
# The floor takes the slower of compute and memory per operator; a real engine also pays a fixed cost per step
# (kernel launches, scheduling, sampling) and per request (tokenisation, admission), and overlaps its loads with
# its arithmetic imperfectly: the profile adds the parts, each divided by an efficiency fitted to published runs.
_f("engine_profile_time",
   s.steps * (s.step_fixed + (s.layers + s.expert_dispatch_share * s.looped_experts) * s.step_per_layer)
   + s.requests * s.request_fixed
   + s.floor_memory_time / s.bandwidth_efficiency
   + s.floor_compute_time * (1 / s.compute_efficiency + s.dequant_penalty)
   + s.floor_attention_time / s.attention_efficiency
   + s.floor_prefill_attention_time / s.prefill_attention_efficiency
   + s.step_tokens * s.token_fixed + s.floor_expanded_kv_time * s.expanded_kv_passes
   + s.floor_f16_copy_time * s.f16_copy_passes + s.eager_layer_steps * s.eager_fixed,
   (s.steps, s.step_fixed, s.layers, s.step_per_layer, s.requests, s.request_fixed, s.floor_memory_time,
    s.bandwidth_efficiency, s.floor_compute_time, s.compute_efficiency, s.dequant_penalty, s.floor_attention_time,
    s.attention_efficiency,
    s.floor_prefill_attention_time, s.prefill_attention_efficiency, s.step_tokens, s.token_fixed,
    s.floor_expanded_kv_time, s.expanded_kv_passes, s.looped_experts, s.expert_dispatch_share,
    s.floor_f16_copy_time, s.f16_copy_passes, s.eager_layer_steps, s.eager_fixed),
   "An engine's time for a unit of work: its fixed cost per step (t_step, plus t_layer for each of the L layers: "
   "kernel launches and framework dispatch; an engine that runs a mixture-of-experts layer as a Python loop over "
   "its experts adds rho_exp t_layer for each of the n_exp (MoE layer, expert) iterations of a step, rho_exp the "
   "share of a layer's kernel launches one iteration makes) and per request, plus the floor's parts at fitted "
   "efficiencies: the weight reads (eta_m), the matrix products (eta_c, and kappa_q more per floor-second when "
   "block-quantised weights are dequantised inside the kernel; 0 for float weights), the decode steps' attention "
   "(K/V reads, eta_a) and the prefill's attention (score products over the prompt, eta_a,pf); plus a cost per "
   "token processed (t_tok) and kappa_x passes over the K/V cache expanded to every query head (t_kv,x: the decode "
   "K/V reads times heads / kv_heads), both 0 for an engine that does not pay them; plus kappa_dq times t_dq, the "
   "time at the memory's peak to write and read back an f16 copy of each block-quantised weight matrix once per "
   "step (4 bytes per weight), for an engine build that dequantises to f16 and multiplies with cuBLAS instead "
   "of dequantising inside its kernel (0 otherwise); plus t_eager for each of the n_eager layer-steps an engine "
   "runs without a captured CUDA graph where its default captures them for other steps (0 otherwise).", "s")
_f("effective_step_efficiency", s.predicted_time / (s.step_fixed + s.predicted_time / s.bandwidth_efficiency),
   (s.predicted_time, s.step_fixed, s.bandwidth_efficiency),
   "The share of the floor's speed a memory-bound step reaches when it costs t_step plus the floor at efficiency "
   "eta: it grows with the bytes a step streams (a small step is dominated by the fixed cost).", "fraction")
_f("effective_gemm_efficiency",
   s.gemm_floor_time / (s.gemm_floor_time / s.compute_efficiency + s.weights_floor_time / s.bandwidth_efficiency),
   (s.gemm_floor_time, s.compute_efficiency, s.weights_floor_time, s.bandwidth_efficiency),
   "The share of the peak FLOP/s a step's matrix products reach when their weight reads and arithmetic add up: it "
   "grows with the tokens in the step (more FLOPs per weight byte) towards eta_c.", "fraction")


def expr(name: str) -> sp.Expr:
    """The sympy expression of formula ``name``."""
    return _formula(name).expr


def _formula(name, argname: str = "name") -> Formula:
    from course_lib.core.validation import suggest

    if not isinstance(name, str):
        raise TypeError(f"{argname} must be a formula name (a string such as 'weight_bytes'), "
                        f"got {type(name).__name__}")
    if name not in FORMULAS:
        raise ValueError(f"{argname} {name[:60]!r} is not a formula.{suggest(name[:60], FORMULAS)}")
    return FORMULAS[name]


def latex(name_or_expr) -> str:
    """LaTeX of a formula (by name) or of any expression, in the course's notation."""
    if isinstance(name_or_expr, str):
        e = _formula(name_or_expr, "name_or_expr").expr
    elif isinstance(name_or_expr, sp.Basic):
        e = name_or_expr
    else:
        raise TypeError(f"name_or_expr must be a formula name or a sympy expression, got {type(name_or_expr).__name__}")
    return sp.latex(e, symbol_names=LATEX_NAMES)


def equation(name: str) -> str:
    """``name = <expression>`` as display LaTeX."""
    return rf"{_formula(name).lhs} = {latex(name)}"


def derive_decode_sum() -> dict[str, sp.Expr]:
    """Derive the exact total decode time of a memory-bound response and its linearisation b + k n.

    Step j (j = 1 … n-1) attends to context P + j, so it moves W_s + B (P + j) k_tok bytes.
    """
    per_step = (s.streamed_weight_bytes + s.batch * (s.prompt + s.step) * s.kv_bytes_per_token) / s.bandwidth
    exact = sp.simplify(sp.summation(per_step, (s.step, 1, s.n - 1)))
    # the mean step sits at context P + n/2: a line whose slope is the step time there reproduces the exact
    # sum of a memory-bound response. ``Estimate.line`` instead takes the step at the start context, the
    # linearisation that drops the growth of the KV cache (exact - line = B k_tok (n-1)(n-2) / (2 beta)).
    k = per_step.subs(s.step, s.n / 2)
    return {"per_step": per_step, "exact_sum": sp.factor(exact), "mean_tpot": sp.simplify(exact / (s.n - 1)),
            "k_at_mean_context": k}


# --- prefill score passes (course_lib.measure.validate, lesson 07) --------------------------------------------------
S.score_rate = _sym("score_rate", r"r_{score}", **_pos)
_f("score_pass_time",
   s.batch * s.layers * s.heads * s.new_prompt * (s.new_prompt + s.cached) / s.score_rate,
   (s.batch, s.layers, s.heads, s.new_prompt, s.cached, s.score_rate),
   "Time a simple prefill spends on the elementwise passes over its attention scores (scale, causal mask, "
   "softmax), one score per query head, new token and key (cached + new, masked rather than skipped), at the "
   "rate (scores/s) a probe of those passes at that shape achieves. The FLOP count leaves this traffic out.", "s")
