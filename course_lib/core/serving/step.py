"""The cost of one step of a continuously batching server: :class:`StepCost`, priced with the estimator's
generated formulas.

Lessons: 10
"""
from __future__ import annotations

from dataclasses import dataclass, field

from course_lib.core.numeric import raw as g
from course_lib.core.estimator import _step_work, compute_dtype
from course_lib.core.hardware import HardwareSpec, get_hardware
from course_lib.core.models import ModelSpec, get_model
from course_lib.core.precision import default_kv_precision, get_precision
from course_lib.core.validation import require_fraction

# --------------------------------------------------------------------------------------------------
# The cost of one step
# --------------------------------------------------------------------------------------------------
def _precisions(precision, kv_precision) -> tuple[str, str]:
    """The estimator's rule: the KV cache in the weights' format, or fp16 for integer/block formats."""
    wname = get_precision(precision).name
    if kv_precision is None:
        kv_precision = default_kv_precision(wname)
    try:
        kvname = get_precision(kv_precision).name
    except (ValueError, TypeError) as e:
        raise type(e)(str(e).replace("precision", "kv_precision", 1)) from None
    return wname, kvname


@dataclass(frozen=True, eq=False)
class StepCost:
    """Seconds of one forward step over a mixed batch: ``cost(prefill_tokens, decode_seqs, context_tokens_total)``.

    * ``prefill_tokens``: prompt tokens processed in the step (every chunk together);
    * ``decode_seqs``: sequences that decode one token;
    * ``context_tokens_total``: K/V tokens the step reads, summed over its sequences (a decoding
      sequence's attended context, itself included; a prefill chunk's cached tokens plus the chunk).

    Keyword-only extras make it exact (the simulator passes them, see ``accepts_details``):
    ``attention_pairs`` (query-key pairs: a decode token attends its context, a chunk of ``c`` tokens
    after ``k`` cached ones ``c·k + c²/2``; default ``context_tokens_total``, exact for decode-only
    steps) and ``logit_rows`` (sequences that produce a token: decodes plus the chunks that finish a
    prompt; default ``decode_seqs`` plus one when there is prefill). :func:`simulate` weights a decode token's
    pairs by ``decode_pair_weight`` (``decode_attn_dim / attn_dim``: MLA decodes on its latent).

    The step reads the weights its tokens use once (``streamed_params``; cached per token count),
    ``context_tokens_total`` K/V tokens (``decode_bytes``), and computes ``2·active_block_params``
    FLOPs per token, ``2·hidden·vocab`` per logit row and ``4·attn_dim·heads·layers`` per query-key
    pair: coefficients taken once from the generated ``decode_flops`` and ``linear_flops`` (the
    expansion of ``prefill_flops`` has the same three terms). The time is the generated
    ``phase_time``. A pure prefill and a pure decode step give exactly the estimator's ``ttft`` and
    decode step; a step costs a few multiplications whatever its batch.
    """

    model: ModelSpec
    hardware: HardwareSpec
    precision: str = "fp16"
    kv_precision: str | None = None
    compute_efficiency: float = 1.0
    bandwidth_efficiency: float = 1.0
    compute_dtype: str = field(init=False)
    kv_token_bytes: float = field(init=False)  # K/V bytes of one token in every layer
    # a decode token's query-key pair costs decode_attn_dim / attn_dim of a prefill pair (MLA's absorbed latent
    # attention; 1 otherwise): the simulator weights decode pairs by it
    decode_pair_weight: float = field(init=False)
    accepts_details = True

    def __post_init__(self):
        set_ = object.__setattr__
        m, hw = get_model(self.model), get_hardware(self.hardware)
        set_(self, "model", m)
        set_(self, "hardware", hw)
        wname, kvname = _precisions(self.precision, self.kv_precision)
        set_(self, "precision", wname)
        set_(self, "kv_precision", kvname)
        set_(self, "compute_efficiency", require_fraction("compute_efficiency", self.compute_efficiency))
        set_(self, "bandwidth_efficiency", require_fraction("bandwidth_efficiency", self.bandwidth_efficiency))
        dtype = compute_dtype(wname, hw)      # the estimator's rule
        set_(self, "compute_dtype", dtype)
        peak = hw.flops(dtype)
        attn = m.attn_dim
        blk = m.active_block_params
        # decode_flops(1, ..., context) = 2·blk + 2·h·V + 4·attn·heads·layers·context  (linear in context)
        d0 = g.decode_flops(1, blk, m.vocab, m.hidden, m.layers, m.heads, attn, 0)
        d1 = g.decode_flops(1, blk, m.vocab, m.hidden, m.layers, m.heads, attn, 1)
        # and prefill_flops(1, blk, c, ..., cached=k) = 4·attn·heads·layers·(c·k + c²/2) + 2·blk·c + 2·h·V:
        # per query-key pair 4·attn·heads·layers, per token 2·blk, per logit row 2·h·V
        per_pair = d1 - d0
        per_token = g.linear_flops(blk, 1)
        set_(self, "_per_pair", per_pair)
        set_(self, "_per_token", per_token)
        set_(self, "_per_logit", d0 - per_token)
        set_(self, "kv_token_bytes", m.kv_bytes_per_token(kvname))
        set_(self, "decode_pair_weight", m.decode_attn_dim / attn)
        set_(self, "_w_bytes", get_precision(wname).bytes)
        set_(self, "_peak", peak)
        set_(self, "_weights_cache", {})
        set_(self, "_kv_bytes", get_precision(kvname).bytes)
        set_(self, "_work_cache", {})

    def weight_read_bytes(self, tokens: int) -> float:
        """Weight bytes a step over ``tokens`` tokens streams (cached per count)."""
        c = self._weights_cache
        b = c.get(tokens)
        if b is None:
            b = c[tokens] = self.model.streamed_params(tokens) * self._w_bytes
        return b

    def flops(self, prefill_tokens, decode_seqs, context_tokens_total, *, attention_pairs=None, logit_rows=None):
        """FLOPs of the step (the arguments as for the call)."""
        if attention_pairs is None:
            attention_pairs = context_tokens_total
        if logit_rows is None:
            logit_rows = decode_seqs + (1 if prefill_tokens else 0)
        return ((prefill_tokens + decode_seqs) * self._per_token + logit_rows * self._per_logit
                + attention_pairs * self._per_pair)

    def read_bytes(self, prefill_tokens, decode_seqs, context_tokens_total):
        """Bytes the step reads: the weights its tokens use, once, and ``context_tokens_total`` K/V tokens."""
        return g.decode_bytes(self.weight_read_bytes(prefill_tokens + decode_seqs), 1, context_tokens_total,
                              self.kv_token_bytes)

    def bound(self, prefill_tokens, decode_seqs, context_tokens_total, *, attention_pairs=None, logit_rows=None):
        """'compute' or 'memory': which term sets the step's time."""
        f = self.flops(prefill_tokens, decode_seqs, context_tokens_total, attention_pairs=attention_pairs,
                       logit_rows=logit_rows)
        tc = g.compute_time(f, self._peak, self.compute_efficiency)
        tm = g.memory_time(self.read_bytes(prefill_tokens, decode_seqs, context_tokens_total),
                           self.hardware.bandwidth, self.bandwidth_efficiency)
        return "memory" if tm >= tc else "compute"

    def __call__(self, prefill_tokens, decode_seqs, context_tokens_total, *, attention_pairs=None, logit_rows=None):
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            raise ValueError("a step must process at least one token (prefill_tokens + decode_seqs >= 1)")
        if attention_pairs is None:
            attention_pairs = context_tokens_total
        if logit_rows is None:
            logit_rows = decode_seqs + (1 if prefill_tokens else 0)
        return self.time_of(tokens, context_tokens_total, attention_pairs, logit_rows)

    def time_of(self, tokens, context_tokens_total, attention_pairs, logit_rows) -> float:
        """The step's seconds for ``tokens`` tokens in all (prefill and decode), without the argument checks (the
        simulator's inner loop calls it once per step)."""
        # per operator, as the estimator: the step costs the sum of its operators' roofline times
        # (the weight-reading operators depend only on the token count: cached; attention and the lm_head's rows
        # are filled in per step)
        work = self._work_cache.get(tokens)
        if work is None:
            work = self._work_cache[tokens] = _step_work(self.model, tokens, 1, 0.0, 0, self._w_bytes, self._kv_bytes)
        peak, eta_c, bw, eta_b = self._peak, self.compute_efficiency, self.hardware.bandwidth, self.bandwidth_efficiency
        t = 0.0
        for name, f, b in work:
            if name == "attention":
                f, b = attention_pairs * self._per_pair, context_tokens_total * self.kv_token_bytes
            elif name == "lm_head":
                f = f * logit_rows
            t += g.operator_time(f, peak, eta_c, b, bw, eta_b)
        return t


def step_cost(model, hardware, precision="fp16", kv_precision=None, compute_efficiency=1.0,
              bandwidth_efficiency=1.0) -> StepCost:
    """The default step-time model of :func:`simulate` for a catalog model and device (or specs)."""
    return StepCost(get_model(model), get_hardware(hardware), *_precisions(precision, kv_precision),
                    compute_efficiency=compute_efficiency, bandwidth_efficiency=bandwidth_efficiency)
