"""Lesson 03 figures: KV cache bytes against context, and the context at which they equal the weights.

Lessons: 03

Both functions return a ``matplotlib.figure.Figure`` (never shown here) whose plotted data are
``course_lib`` values in the units of the axis labels:

* :func:`plot_kv_vs_context` -- ``course_lib.kv_cache_bytes`` / 1e9 (GB) per model against the
  context, with each model's weight bytes (``ModelSpec.weight_bytes``) as a dashed line of the same
  colour. A sliding-window model (Mistral-7B v0.1) flattens at its window.
* :func:`plot_kv_layout` -- a picture of the cache's layout: for K and for V, one slab per layer
  and KV head, each holding ``head_dim`` values for every cached token (MHA/GQA/MQA only).
* :func:`plot_kv_crossover` -- :func:`course_lib.lessons.widgets.kv_cache.crossover_context` per model
  against the batch size (log-log), with the model's trained context length as a dotted line.
  Where a sliding window keeps the cache below the weights there is no crossover: NaN (no point).

Lines carry a ``gid`` (``"kv:<model>"``, ``"weights:<model>"``, ``"crossover:<model>"``,
``"max-positions:<model>"``) so tests can find them.
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import FuncFormatter

from course_lib.core.estimator import kv_cache_bytes
from course_lib.core.models import get_model
from course_lib.core.precision import get_precision
from course_lib.core.validation import require_count
from course_lib.core.estimator import crossover_context
from course_lib.core.units import format_bytes
from course_lib.lessons.plots._base import new_figure

__all__ = ["plot_kv_vs_context", "plot_kv_crossover", "plot_kv_layout", "context_grid", "batch_grid",
           "KV_MODELS", "CROSSOVER_MODELS"]

#: Default models: MHA Llama-2-7B, windowed Mistral-7B, Llama-3-8B (same KV shape, no window), Qwen2.5-7B.
KV_MODELS = ("llama-2-7b", "mistral-7b", "llama-3-8b", "qwen2.5-7b")
CROSSOVER_MODELS = KV_MODELS


def _names(models) -> tuple[str, ...]:
    if isinstance(models, str):
        models = (models,)
    names = tuple(get_model(m).name for m in models)
    if not names:
        raise ValueError("models must name at least one catalog model")
    return names


def context_grid(max_context: int = 32768, points: int = 129) -> list[int]:
    """``points`` whole contexts from 0 to ``max_context`` (evenly spaced, endpoints included)."""
    max_context = require_count("max_context", max_context, minimum=1)
    points = require_count("points", points, minimum=2)
    return sorted({round(max_context * i / (points - 1)) for i in range(points)})


def batch_grid(max_batch: int = 256) -> list[int]:
    """Batch sizes 1, 2, 3, ... ``max_batch`` (every whole batch)."""
    max_batch = require_count("max_batch", max_batch, minimum=1)
    return list(range(1, max_batch + 1))


def plot_kv_vs_context(models=KV_MODELS, max_context: int = 32768, batch: int = 1, kv_precision: str = "fp16",
                       precision: str = "fp16", points: int = 129, show_weights: bool = True):
    """KV cache (GB) of ``batch`` sequences against context (tokens) per model, with the weights' bytes.

    Plotted values: ``kv_cache_bytes(model, c, kv_precision, batch) / 1e9`` for every ``c`` of
    ``context_grid(max_context, points)``; weights: ``get_model(model).weight_bytes(precision) / 1e9``.
    """
    names = _names(models)
    batch = require_count("batch", batch, minimum=1)
    kv_p, w_p = get_precision(kv_precision).name, get_precision(precision).name
    xs = context_grid(max_context, points)
    who = "one sequence" if batch == 1 else f"{batch} sequences"
    fig, ax = new_figure(f"KV cache vs context ({who}, {kv_p} cache; dashed: {w_p} weights)",
                         "context (tokens per sequence)", "bytes (GB)")
    for name in names:
        m = get_model(name)
        ys = [kv_cache_bytes(m, c, kv_p, batch) / 1e9 for c in xs]
        label = f"{name} ({m.attention_kind}" + (f", window {m.sliding_window}" if m.sliding_window else "") + ")"
        (line,) = ax.plot(xs, ys, label=label, gid=f"kv:{name}")
        if show_weights:
            w = m.weight_bytes(w_p) / 1e9
            ax.plot([xs[0], xs[-1]], [w, w], linestyle="--", color=line.get_color(), linewidth=1,
                    label=f"{name} weights", gid=f"weights:{name}")
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(bottom=0)
    _legend_below(ax)
    return fig


def _legend_below(ax) -> None:
    """The legend under the axes, where it covers none of the lines the text discusses."""
    ax.legend(fontsize="small", ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))


def plot_kv_crossover(models=CROSSOVER_MODELS, max_batch: int = 256, precision: str = "fp16",
                      kv_precision: str = "fp16", show_max_positions: bool = True):
    """Context per sequence (tokens) at which the KV cache equals the weights, against batch (sequences).

    Plotted values: ``crossover_context(model, b, precision, kv_precision)`` for ``b`` in
    ``batch_grid(max_batch)``, NaN where a sliding window prevents a crossover (no point drawn).
    The dotted line is the model's ``max_positions`` (its trained context length).
    """
    names = _names(models)
    w_p, kv_p = get_precision(precision).name, get_precision(kv_precision).name
    bs = batch_grid(max_batch)
    fig, ax = new_figure(f"Where the KV cache equals the weights ({w_p} weights, {kv_p} cache)",
                         "batch (sequences)", "context at crossover (tokens per sequence)")
    for name in names:
        m = get_model(name)
        ys = []
        for b in bs:
            c = crossover_context(m, b, w_p, kv_p)
            ys.append(math.nan if math.isinf(c) else c)
        label = f"{name} ({m.attention_kind}" + (f", window {m.sliding_window}" if m.sliding_window else "") + ")"
        (line,) = ax.plot(bs, np.array(ys, dtype=float), label=label, gid=f"crossover:{name}")
        if show_max_positions and m.max_positions:
            ax.axhline(m.max_positions, linestyle=":", color=line.get_color(), linewidth=1,
                       label=f"{name} trained context", gid=f"max-positions:{name}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    plain = FuncFormatter(lambda v, _pos: f"{v:,.0f}")
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    _legend_below(ax)
    return fig


def plot_kv_layout(model="llama-3-8b", tokens: int = 4, precision: str = "fp16"):
    """The KV cache's layout for ``model``: K and V side by side, each ``layers`` x ``kv_heads`` slabs
    (rows: layers, columns: KV heads) of ``head_dim`` values per cached token.

    Each slab is drawn as ``tokens`` thin columns, one per token (a new token appends one column to
    every slab of K and of V). The caption under the axes is
    ``kv_values_per_token`` and ``kv_bytes_per_token(precision)`` from ``ModelSpec``. Slabs carry a
    ``gid`` (``"K:<layer>:<head>"``, ``"V:<layer>:<head>"``) so tests can count them. MLA models are
    refused: they cache one latent per layer, not per-head K and V.
    """
    from matplotlib.patches import Rectangle

    m = get_model(model)
    if m.is_mla:
        raise ValueError(f"model must cache per-head K and V (MHA, GQA or MQA), got {m.name!r} (MLA caches "
                         f"one latent of {m.kv_rank} + {m.rope_dim} values per layer)")
    tokens = require_count("tokens", tokens, minimum=1)
    if tokens > 64:
        raise ValueError(f"tokens must be between 1 and 64 for the picture, got {tokens}")
    p = get_precision(precision).name
    fig, ax = new_figure(f"Layout of the KV cache of {m.name}\nK and V, each {m.layers} layers x {m.kv_heads} KV heads "
                         f"x {m.head_dim} values x tokens",
                         "KV head (index; K on the left, V on the right)", "layer (index)", figsize=(10, 5.2))
    gap = 1.0
    colours = {"K": "#4c72b0", "V": "#55a868"}
    for t, (name, x0) in enumerate((("K", 0.0), ("V", m.kv_heads + gap))):
        for layer in range(m.layers):
            for head in range(m.kv_heads):
                x, y = x0 + head, layer
                slab = Rectangle((x + 0.06, y + 0.08), 0.88, 0.84, facecolor="white", edgecolor=colours[name],
                                 linewidth=0.6)
                slab.set_gid(f"{name}:{layer}:{head}")
                ax.add_patch(slab)
                for k in range(tokens):  # one column per cached token
                    ax.add_patch(Rectangle((x + 0.1 + 0.8 * k / tokens, y + 0.14), 0.8 / tokens * 0.8, 0.72,
                                           facecolor=colours[name], alpha=0.55, linewidth=0))
        ax.text(x0 + m.kv_heads / 2, -0.6, f"{name} (keys)" if name == "K" else f"{name} (values)",
                ha="center", va="center", fontsize=11, color=colours[name], fontweight="bold")
    ax.set_xlim(-0.3, 2 * m.kv_heads + gap + 0.3)
    ax.set_ylim(m.layers + 0.3, -1.3)
    heads = list(range(m.kv_heads))
    ax.set_xticks([h + 0.5 for h in heads] + [m.kv_heads + gap + h + 0.5 for h in heads], heads + heads,
                  fontsize=7)
    step = max(1, m.layers // 8)
    ax.set_yticks([layer + 0.5 for layer in range(0, m.layers, step)], list(range(0, m.layers, step)),
                  fontsize=7)
    ax.grid(False)
    ax.annotate(f"Each slab: head_dim = {m.head_dim} values for every cached token (here {tokens} token columns;\n"
                f"a new token adds one column to every slab of K and of V). Per token: "
                f"{m.kv_values_per_token:,} values = {format_bytes(m.kv_bytes_per_token(p))} in {p}.",
                xy=(0, 0), xycoords="axes fraction", xytext=(0, -34), textcoords="offset points", fontsize=8,
                color="#333", ha="left", va="top", annotation_clip=False)
    return fig
