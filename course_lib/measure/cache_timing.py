"""K/V reuse on a real (small) model: timed on a TinyLM, profiled, and predicted by the calibrated model.

Lessons: 07

The caching *model* (estimates, sessions, costs) is torch-free: :mod:`course_lib.core.caching`.
This module measures the same cases on a :class:`course_lib.measure.tinylm.TinyLM` (torch):

    from course_lib.measure import cache_timing
    from course_lib.measure.tinylm import TinyLM
    t = cache_timing.measure_prefix_ttft(lm, prefix_tokens=1024, new_tokens=32)
    t.ttft_miss, t.ttft_hit, t.speedup
    s = cache_timing.measure_session_ttft(lm, system_tokens=512, user_tokens=32, reply_tokens=64, turns=5)
    m = cache_timing.measure_module_reuse(lm, (256, 256, 256), 32)     # how approximate modular reuse is
    cache_timing.profile_prefill(lm, 1056)                              # where a prefill's time goes
    cal = calibrate.calibrate(**cache_timing.calibration_shapes(1024, 32), ttft_model=lm.spec)
    cache_timing.predict_prefix_ttft_calibrated(lm.spec, 1024, 32, cal)

* **measurement**: :func:`measure_prefix_ttft`, :func:`measure_session_ttft` (timed with the public
  ``Stopwatch`` and ``quartiles`` of :mod:`course_lib.measure.timing`), :func:`measure_module_reuse`
  (logit agreement of reused module K/V, ``tinylm.logit_agreement``) and :func:`profile_prefill`
  (torch.profiler, operators grouped by :data:`PROFILE_GROUPS`);
* **calibrated prediction** of the same cases with the probes-only model of
  :mod:`course_lib.measure.calibrate` and :mod:`~course_lib.measure.predict`: :func:`calibration_shapes` (what
  to probe), :func:`predict_prefix_ttft_calibrated`, :func:`predict_session_ttft_calibrated`.

Uses only public names of :mod:`course_lib.core` (the session shape comes from
``caching.check_session`` / ``caching.turn_prompts``, hit-vs-miss ratios from ``caching.HitMiss``).
"""
from __future__ import annotations

import contextlib
import os
import random
import statistics
import sys
from dataclasses import dataclass
from typing import Sequence

from torch.profiler import ProfilerActivity, profile

from course_lib.core.caching import HitMiss, check_session, turn_prompts
from course_lib.core.validation import require_count
from course_lib.measure import predict
from course_lib.measure.timing import Stopwatch, quartiles
from course_lib.measure.tinylm import TinyLM, logit_agreement

__all__ = [
    "PrefixTiming", "measure_prefix_ttft", "SessionTiming", "measure_session_ttft", "ModuleAgreement",
    "measure_module_reuse", "PROFILE_GROUPS", "profile_prefill",
    "calibration_shapes", "CalibratedPrefix", "predict_prefix_ttft_calibrated", "CalibratedSession",
    "predict_session_ttft_calibrated",
]


# --------------------------------------------------------------------------------------------------
# Measurements on a TinyLM
# --------------------------------------------------------------------------------------------------
def _random_ids(rng: random.Random, vocab: int, n: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def _check_lm(lm, needed: int):
    if not isinstance(lm, TinyLM):
        raise TypeError(f"lm must be a course_lib.measure.tinylm.TinyLM, got {type(lm).__name__}")
    if needed > lm.max_seq:
        raise ValueError(f"the measurement needs {needed} tokens but the TinyLM's cache holds max_seq={lm.max_seq}; "
                         f"build it with TinyLM(..., max_seq={needed})")


def _session(system_tokens, user_tokens, reply_tokens, turns) -> tuple[int, int, int, int]:
    """The checked session of a measurement or prediction: every turn brings at least one user token."""
    return check_session(system_tokens, user_tokens, reply_tokens, turns, min_user_tokens=1)


@dataclass(frozen=True)
class PrefixTiming(HitMiss):
    """Measured TTFT (s, medians over ``repeats``) of a prefix + new-token prompt, full vs with the prefix's K/V loaded.

    ``max_abs_diff``: the largest difference between the cached prefill's logits and the same rows of
    the full prefill (prefix reuse is exact: rounding only). ``state_bytes``: the prefix's K/V.
    """

    prefix_tokens: int
    new_tokens: int
    full_seconds: float
    full_q1: float
    full_q3: float
    cached_seconds: float
    cached_q1: float
    cached_q3: float
    repeats: int
    threads: int | None
    max_abs_diff: float
    state_bytes: int

    ttft_hit = property(lambda self: self.cached_seconds, doc="Measured TTFT (s) with the prefix's K/V loaded.")
    ttft_miss = property(lambda self: self.full_seconds, doc="Measured TTFT (s) of the full prefill.")


def measure_prefix_ttft(lm, prefix_tokens: int = 1024, new_tokens: int = 32, repeats: int = 5, warmup: int = 1,
                        threads: int | None = None, seed: int = 0) -> PrefixTiming:
    """Time ``lm.prefill(prompt)`` against ``lm.prefill(prompt, prefix=state)`` (the prefix's saved K/V).

    The prompt is ``prefix_tokens`` + ``new_tokens`` random ids; the state comes from an untimed
    prefill of the prefix. The two kinds of run alternate (``warmup`` untimed pairs first), each
    synchronised on a GPU, with a fixed CPU thread count (``Stopwatch``).
    """
    P = require_count("prefix_tokens", prefix_tokens, minimum=1)
    n = require_count("new_tokens", new_tokens, minimum=1)
    reps = require_count("repeats", repeats, minimum=1)
    w = require_count("warmup", warmup)
    _check_lm(lm, P + n)
    ids = _random_ids(random.Random(require_count("seed", seed)), lm.spec.vocab, P + n)
    full_t, cached_t, diff = [], [], 0.0
    with Stopwatch(lm.device, threads) as sw:
        lm.prefill(ids[:P])
        state = lm.save_state()
        for i in range(w + reps):
            t_full, full = sw.time(lm.prefill, ids)
            t_cached, cached = sw.time(lm.prefill, ids, prefix=state)
            if i >= w:
                full_t.append(t_full)
                cached_t.append(t_cached)
            diff = max(diff, float((full[P:].float() - cached.float()).abs().max()))
    fq1, fmed, fq3 = quartiles(full_t)
    cq1, cmed, cq3 = quartiles(cached_t)
    return PrefixTiming(P, n, fmed, fq1, fq3, cmed, cq1, cq3, reps, sw.threads, diff, state.nbytes)


class _SessionTotals:
    """The summed TTFT (s) of a session, from its per-turn ``ttft_nocache`` and ``ttft_cached``."""

    @property
    def total_nocache(self) -> float:
        return sum(self.ttft_nocache)

    @property
    def total_cached(self) -> float:
        return sum(self.ttft_cached)


@dataclass(frozen=True)
class SessionTiming(_SessionTotals):
    """Measured TTFT (s) per turn of a chat, medians over ``repeats`` sessions: full re-prefill vs a session cache."""

    system_tokens: int
    user_tokens: int
    reply_tokens: int
    turns: int
    ttft_nocache: tuple
    ttft_cached: tuple
    repeats: int
    threads: int | None


def measure_session_ttft(lm, system_tokens: int = 512, user_tokens: int = 32, reply_tokens: int = 64,
                         turns: int = 5, repeats: int = 3, threads: int | None = None, seed: int = 0) -> SessionTiming:
    """Time each turn's first token: ``lm.prefill(whole conversation)`` vs ``lm.extend(new user message)``.

    The replies are random ids fed with ``lm.extend`` between turns (untimed), all but their last
    token: the cache then holds exactly what decoding them would have left there, and the next turn
    processes the reply's last token with its user message (as a server does). The first turn of a
    cached session is a plain prefill of the system prompt and the first message. One untimed
    session runs first (warm-up).
    """
    S, u, r, T = _session(system_tokens, user_tokens, reply_tokens, turns)
    reps = require_count("repeats", repeats, minimum=1)
    _check_lm(lm, S + T * (u + r))
    rng = random.Random(require_count("seed", seed))
    conv = _random_ids(rng, lm.spec.vocab, S)
    starts = []
    for _ in range(T):
        starts.append(len(conv))
        conv += _random_ids(rng, lm.spec.vocab, u + r)
    nc = [[] for _ in range(T)]
    c = [[] for _ in range(T)]
    with Stopwatch(lm.device, threads) as sw:
        def timed(fn, *args):
            return sw.time(fn, *args)[0]

        for rep in range(reps + 1):
            for t in range(T):
                dt = timed(lm.prefill, conv[:starts[t] + u])
                if rep:
                    nc[t].append(dt)
            for t in range(T):
                a = starts[t]
                pending = 1 if (t and r) else 0     # the previous reply's last token
                dt = timed(lm.prefill, conv[:a + u]) if t == 0 else timed(lm.extend, conv[a - pending:a + u])
                if rep:
                    c[t].append(dt)
                if r > 1:
                    lm.extend(conv[a + u:a + u + r - 1])
    return SessionTiming(S, u, r, T, tuple(statistics.median(x) for x in nc), tuple(statistics.median(x) for x in c),
                         reps, sw.threads)


@dataclass(frozen=True)
class ModuleAgreement:
    """How close reused K/V leave the new tokens' logits to a full prefill (``tinylm.logit_agreement`` dicts)."""

    module_tokens: tuple
    new_tokens: int
    prefix_exact: dict
    modules_in_place: dict
    modules_at_zero: dict


def measure_module_reuse(lm, module_tokens: Sequence[int] = (256, 256, 256), new_tokens: int = 32,
                         seed: int = 0) -> ModuleAgreement:
    """Logits of ``new_tokens`` after a prompt of modules, full prefill vs three kinds of reuse.

    * ``prefix_exact``: the modules' K/V saved from a prefill of them all (a shared prefix): exact;
    * ``modules_in_place``: each module encoded alone at the positions it has in this prompt
      (``encode_module(ids, start=offset)``): only the attention between modules is skipped;
    * ``modules_at_zero``: each module encoded alone at position 0, as a cache that stores a module
      once and reuses it anywhere: cross-module attention skipped AND positions wrong.
    """
    if isinstance(module_tokens, (str, bytes)) or not hasattr(module_tokens, "__len__") or not len(module_tokens):
        raise TypeError("module_tokens must be a non-empty list of token counts")
    mods = [require_count(f"module_tokens[{i}]", t, minimum=1) for i, t in enumerate(module_tokens)]
    n = require_count("new_tokens", new_tokens, minimum=1)
    total = sum(mods)
    _check_lm(lm, total + n)
    rng = random.Random(require_count("seed", seed))
    pieces = [_random_ids(rng, lm.spec.vocab, t) for t in mods]
    new = _random_ids(rng, lm.spec.vocab, n)
    ids = [x for p in pieces for x in p] + new
    ref = lm.prefill(ids)[total:].clone()
    lm.prefill(ids[:total])
    state = lm.save_state()
    exact = lm.prefill(ids, prefix=state)
    offsets = [sum(mods[:i]) for i in range(len(mods))]
    in_place = lm.prefill_modules([lm.encode_module(p, o) for p, o in zip(pieces, offsets)], new)
    at_zero = lm.prefill_modules([lm.encode_module(p, 0) for p in pieces], new)
    return ModuleAgreement(tuple(mods), n, logit_agreement(ref, exact), logit_agreement(ref, in_place),
                           logit_agreement(ref, at_zero))


#: how :func:`profile_prefill` groups PyTorch operators
PROFILE_GROUPS = {
    "matrix products": ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::linear", "aten::matmul"),
    "softmax and masking": ("aten::_softmax", "aten::softmax", "aten::masked_fill_", "aten::masked_fill",
                            "aten::le", "aten::gt", "aten::lt", "aten::ge", "aten::bitwise_not", "aten::bitwise_and",
                            "aten::logical_and", "aten::logical_not", "aten::__iand__", "aten::__and__"),
}


@contextlib.contextmanager
def _native_stderr_silenced():
    """Send file descriptor 2 to the null device for a moment (Python exceptions still propagate).

    torch.profiler's C++ layer writes "profiler_start/stop" trace lines straight to fd 2, which a
    Jupyter kernel shows under the cell; they say nothing to a learner.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no real fd 2 (an embedded interpreter): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_prefill(lm, prompt_tokens: int = 1056, seed: int = 0, threads: int | None = None,
                    prefix_tokens: int = 0) -> dict:
    """Seconds of one ``lm.prefill`` of ``prompt_tokens`` random ids, by kind of operator (torch.profiler).

    With ``prefix_tokens`` > 0 the first ``prefix_tokens`` ids are cached first (``save_state``) and the
    profiled call is ``lm.prefill(ids, prefix=state)``: the cached pass.

    Returns ``{"matrix products": s, "softmax and masking": s, "other": s, "total": s, "calls": n,
    "group_calls": {group: n}}``: the operators' own time (CPU time, or GPU kernel time on a GPU), after one
    untimed warm-up prefill. The roofline counts the FLOPs of the matrix products; softmax, masking and the
    elementwise rest are what it leaves out. ``calls``: aten operator calls (nested ones included, so an
    upper count); ``group_calls``: the same calls split by group (they add up to ``calls``).
    """
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    C = require_count("prefix_tokens", prefix_tokens)
    if C >= P:
        raise ValueError(f"prefix_tokens must be < prompt_tokens ({P}), got {C}")
    _check_lm(lm, P)
    ids = _random_ids(random.Random(require_count("seed", seed)), lm.spec.vocab, P)
    with Stopwatch(lm.device, threads) as sw:
        gpu = sw.device.type == "cuda"
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
        state = None
        if C:
            lm.prefill(ids[:C])
            state = lm.save_state()
        lm.prefill(ids, prefix=state)
        sw.sync()
        with _native_stderr_silenced(), profile(activities=acts) as prof:
            lm.prefill(ids, prefix=state)
            sw.sync()
    out = {k: 0.0 for k in PROFILE_GROUPS}
    out["other"] = 0.0
    group_calls = {k: 0 for k in out}
    for ev in prof.key_averages():
        us = (getattr(ev, "self_device_time_total", 0) or getattr(ev, "self_cuda_time_total", 0)
              if gpu else ev.self_cpu_time_total)
        group = next((name for name, ops in PROFILE_GROUPS.items() if ev.key in ops), "other")
        out[group] += us / 1e6
        if ev.key.startswith("aten::"):
            group_calls[group] += ev.count
    out["total"] = sum(out[k] for k in (*PROFILE_GROUPS, "other"))
    out["calls"] = sum(group_calls.values())
    out["group_calls"] = group_calls
    return out


# --------------------------------------------------------------------------------------------------
# The same cases predicted by the calibrated model (course_lib.measure.calibrate: probes only)
# --------------------------------------------------------------------------------------------------
def calibration_shapes(prefix_tokens=None, new_tokens=None, system_tokens=None, user_tokens=None,
                       reply_tokens=None, turns=None) -> dict:
    """The prefill shapes :func:`predict_prefix_ttft_calibrated` and/or :func:`predict_session_ttft_calibrated`
    price, as keyword arguments of ``calibrate.calibrate``: ``{"prompt_lengths": [...], "cached_prefills":
    [(prompt_tokens, cached_tokens), ...]}``, so that every GEMM and score pass is probed at its exact shape.

    A prefix case is a full prefill of ``prefix_tokens + new_tokens`` and the same prompt with the prefix
    cached; a session case is every turn's prompt without a cache and, from turn 2, with the session's
    cached tokens (``caching.turn_prompts``).
    """
    full: set[int] = set()
    cached: set[tuple[int, int]] = set()
    if prefix_tokens is not None or new_tokens is not None:
        P = require_count("prefix_tokens", prefix_tokens, minimum=1)
        n = require_count("new_tokens", new_tokens, minimum=1)
        full.add(P + n)
        cached.add((P + n, P))
    session = (system_tokens, user_tokens, reply_tokens, turns)
    if any(x is not None for x in session):
        for prompt, c in turn_prompts(*_session(*session)):
            full.add(prompt)
            if c:
                cached.add((prompt, c))
    if not full:
        raise ValueError("calibration_shapes needs a prefix case (prefix_tokens, new_tokens) and/or a "
                         "session case (system_tokens, user_tokens, reply_tokens, turns)")
    return {"prompt_lengths": sorted(full), "cached_prefills": sorted(cached)}


@dataclass(frozen=True)
class CalibratedPrefix(HitMiss):
    """:func:`measure_prefix_ttft`'s two passes predicted by the calibrated model (``predict.Prediction`` each)."""

    prefix_tokens: int
    new_tokens: int
    full: predict.Prediction      # lm.prefill(prompt)
    cached: predict.Prediction    # lm.prefill(prompt, prefix=state)

    ttft_hit = property(lambda self: self.cached.seconds, doc="Predicted TTFT (s) with the prefix's K/V loaded.")
    ttft_miss = property(lambda self: self.full.seconds, doc="Predicted TTFT (s) of the full prefill.")


def predict_prefix_ttft_calibrated(spec, prefix_tokens, new_tokens, calibration) -> CalibratedPrefix:
    """Predict :func:`measure_prefix_ttft` with the calibrated model (:mod:`course_lib.measure.predict`).

    ``full``: ``predict.predict_ttft(spec, P + n, calibration)``; ``cached``: the same with
    ``cached_tokens=P`` on the ``prefix`` path (the state's K/V copied in, n new tokens computed).
    ``calibration`` comes from ``calibrate.calibrate(...)`` (pass ``**calibration_shapes(...)`` for GEMM
    and score-pass rates at these exact shapes).
    """
    P = require_count("prefix_tokens", prefix_tokens, minimum=1)
    n = require_count("new_tokens", new_tokens, minimum=1)
    full = predict.predict_ttft(spec, P + n, calibration)
    cached = predict.predict_ttft(spec, P + n, calibration, cached_tokens=P, reuse="prefix")
    return CalibratedPrefix(P, n, full, cached)


@dataclass(frozen=True)
class CalibratedSession(_SessionTotals):
    """:func:`measure_session_ttft` predicted per turn by the calibrated model (``predict.Prediction`` each)."""

    system_tokens: int
    user_tokens: int
    reply_tokens: int
    turns: int
    nocache: tuple    # per turn: lm.prefill(the whole conversation)
    cached: tuple     # per turn: lm.prefill at turn 1, then lm.extend(pending reply token + new message)

    @property
    def ttft_nocache(self) -> tuple[float, ...]:
        return tuple(p.seconds for p in self.nocache)

    @property
    def ttft_cached(self) -> tuple[float, ...]:
        return tuple(p.seconds for p in self.cached)


def predict_session_ttft_calibrated(spec, system_tokens, user_tokens, reply_tokens, turns,
                                    calibration) -> CalibratedSession:
    """Predict :func:`measure_session_ttft` with the calibrated model, turn by turn.

    Turn t's prompt and cached tokens are ``caching.turn_prompts``'; without a cache each turn is
    ``predict.predict_ttft(spec, prompt, calibration)``, with one ``cached_tokens=<cached>`` on the
    ``session`` path (``TinyLM.extend``: the K/V are already in place).
    """
    S, u, r, T = _session(system_tokens, user_tokens, reply_tokens, turns)
    nc, c = [], []
    for prompt, cached in turn_prompts(S, u, r, T):
        nc.append(predict.predict_ttft(spec, prompt, calibration))
        c.append(predict.predict_ttft(spec, prompt, calibration, cached_tokens=cached, reuse="session"))
    return CalibratedSession(S, u, r, T, tuple(nc), tuple(c))
