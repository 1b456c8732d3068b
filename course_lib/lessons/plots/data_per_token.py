"""Lesson 02 figures: the weight bytes a decode step streams, and why a GEMV cannot use the compute.

Lessons: 02

    from course_lib.lessons.plots.data_per_token import plot_bytes_per_token, plot_ridge_points
    plot_bytes_per_token()                       # every catalog model x fp32/fp16/int8/q4_0/int4
    plot_ridge_points()                          # each device's fp16 ridge point vs GEMV intensity
    plot_cache_vs_weights("mistral-7b", "fp16")  # on-chip cache vs the bytes of one decode step
    plot_decode_step("mistral-7b", "fp16")       # one decode step: which matrices it reads, and how much

Every figure is a ``matplotlib.figure.Figure`` with a title and unit-carrying axis labels; the
numbers it draws come from ``course_lib`` (``ModelSpec.decode_weight_bytes``,
``HardwareSpec.ridge_point``, ``HardwareSpec.cache_bytes`` and the generated formulas), so a test
can read them back from the artists and compare. Devices without a published figure are left out
of a plot *and the plot says so* in a note under the axes; the course never invents a number.

The GEMV intensities come from :func:`course_lib.core.roofline.gemv_cost`, the one GEMV calculator
of the course (worked example, ridge plot, tests); the catalog look-ups that skip and name devices
without a published figure (:func:`ridge_points`, :func:`cache_bytes`) only filter the catalog.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from course_lib.core.hardware import get_hardware, list_hardware
from course_lib.core.models import get_model, list_models
from course_lib.core.precision import get_precision
from course_lib.core.roofline import bytes_per_token, gemv_cost
from course_lib.core.units import format_bytes
from course_lib.core.estimator import weight_bytes
from course_lib.lessons.plots._base import new_figure

__all__ = ["ridge_points", "cache_bytes", "plot_bytes_per_token", "plot_decode_step",
           "plot_ridge_points", "plot_cache_vs_weights", "DEFAULT_PRECISIONS", "GEMV_PRECISIONS"]

#: Weight formats of :func:`plot_bytes_per_token` (bf16 streams the same bytes as fp16).
DEFAULT_PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8", "q4_0", "int4")
#: Weight formats whose GEMV intensity :func:`plot_ridge_points` marks.
GEMV_PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8", "q4_0")

_GB = 1e9


# --------------------------------------------------------------------------------------------------
# Catalog look-ups that skip (and name) devices without a published figure
# --------------------------------------------------------------------------------------------------
def _hardware_list(hardware) -> list:
    if hardware is None:
        hardware = list_hardware()
    if isinstance(hardware, str) or not hasattr(hardware, "__iter__"):
        raise TypeError(f"hardware must be a list of catalog names or HardwareSpecs, got {hardware!r}")
    specs = [get_hardware(h) for h in hardware]
    if not specs:
        raise ValueError("hardware must name at least one device")
    return specs


def ridge_points(hardware=None, dtype: str = "fp16") -> tuple[dict[str, float], list[str]]:
    """({device name: ridge point in FLOP/byte}, [devices skipped: no published dense ``dtype`` peak])."""
    found, skipped = {}, []
    for hw in _hardware_list(hardware):
        if dtype in hw.peak_flops:
            found[hw.name] = hw.ridge_point(dtype)
        else:
            skipped.append(hw.name)
    return found, skipped


def cache_bytes(hardware=None) -> tuple[dict[str, float], list[str]]:
    """({device name: largest on-chip cache in bytes}, [devices skipped: no published cache size])."""
    found, skipped = {}, []
    for hw in _hardware_list(hardware):
        if hw.cache_bytes is None:
            skipped.append(hw.name)
        else:
            found[hw.name] = hw.cache_bytes
    return found, skipped


def _display(name: str) -> str:
    hw = get_hardware(name)
    return hw.display or hw.name


def _skipped_note(ax, skipped: list[str], what: str) -> None:
    """A note under the x label naming the devices left out (kept inside the constrained layout)."""
    if skipped:
        names = ", ".join(_display(s) for s in skipped)
        ax.annotate(f"Not shown (no published {what}): {names}", xy=(0, 0), xycoords="axes fraction",
                    xytext=(0, -42), textcoords="offset points", fontsize=8, color="#555", ha="left",
                    va="top", annotation_clip=False)


def _legend_outside(ax, **kw) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0, **kw)


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------
def plot_bytes_per_token(models=None, precisions=DEFAULT_PRECISIONS) -> Figure:
    """Weight bytes one batch-1 decode step streams, for each model (rows) and precision (bars).

    Bar widths are ``get_model(m).decode_weight_bytes(p) / 1e9`` (GB) on a log axis. ``models``
    defaults to the whole catalog.
    """
    names = list_models() if models is None else models
    if isinstance(names, str) or not hasattr(names, "__iter__"):
        raise TypeError(f"models must be a list of catalog names, got {names!r}")
    specs = [get_model(m) for m in names]
    if isinstance(precisions, str) or not hasattr(precisions, "__iter__"):
        raise TypeError(f"precisions must be a list of names such as ['fp16', 'q4_0'], got {precisions!r}")
    precs = [get_precision(p).name for p in precisions]
    if not specs:
        raise ValueError("models must name at least one model")
    if not precs:
        raise ValueError("precisions must name at least one precision")

    fig, ax = new_figure("Weight bytes streamed per decode step (batch 1)",
                         "bytes per token (GB, log scale)", "model (catalog name)",
                         figsize=(9, 0.14 * len(specs) * len(precs) + 1.5))
    height = 0.8 / len(precs)
    for i, p in enumerate(precs):
        ys = [k - 0.4 + height * (i + 0.5) for k in range(len(specs))]
        widths = [m.decode_weight_bytes(p) / _GB for m in specs]
        ax.barh(ys, widths, height=height, label=f"{p} ({get_precision(p).bits:g} bits)")
    ax.set_yticks(range(len(specs)), [m.name for m in specs])
    ax.invert_yaxis()
    ax.set_xscale("log")
    _legend_outside(ax, title="weights")
    return fig


def plot_ridge_points(hardware=None, dtype: str = "fp16", precisions=GEMV_PRECISIONS) -> Figure:
    """Each device's ridge point (dense ``dtype`` peak / bandwidth) against the GEMV intensity of
    each weight precision (2 FLOPs per weight / bytes per weight).

    Bars: ``HardwareSpec.ridge_point(dtype)`` in FLOP/byte, log axis. Dashed lines:
    ``gemv_cost(1, 1, p).weight_intensity``. Devices without a published peak are named in a note.
    """
    found, skipped = ridge_points(hardware, dtype)
    if isinstance(precisions, str) or not hasattr(precisions, "__iter__"):
        raise TypeError(f"precisions must be a list of names such as ['fp16', 'q4_0'], got {precisions!r}")
    precs = [get_precision(p).name for p in precisions]
    if not found:
        raise ValueError(f"none of the devices has a published dense {dtype} peak FLOP/s: {skipped}")

    fig, ax = new_figure(f"Ridge point ({dtype} dense peak / bandwidth) vs GEMV intensity",
                         "arithmetic intensity (FLOP/byte, log scale)", "device (catalog)",
                         figsize=(10, 0.38 * len(found) + 2.0))
    labels = [_display(n) for n in found]
    ax.barh(range(len(found)), list(found.values()), color="#4c72b0", label=f"ridge point ({dtype})")
    ax.set_yticks(range(len(found)), labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    styles = ["--", "-.", ":", (0, (5, 1, 1, 1))]
    for i, p in enumerate(precs):
        x = gemv_cost(1, 1, p).weight_intensity
        ax.axvline(x, color="#c44e52", linestyle=styles[i % len(styles)], linewidth=1.5,
                   label=f"GEMV, {p} weights: {x:.3g} FLOP/byte")
    _legend_outside(ax)
    _skipped_note(ax, skipped, f"dense {dtype} FLOP/s")
    return fig


def plot_cache_vs_weights(model="mistral-7b", precision="fp16", hardware=None) -> Figure:
    """Each device's largest on-chip cache next to the weight bytes one decode step of ``model`` streams.

    Bars: ``HardwareSpec.cache_bytes / 1e6`` (MB, log axis); the dashed line:
    ``decode_weight_bytes(precision) / 1e6``. Devices without a published cache size are named in a note.
    """
    m = get_model(model)
    p = get_precision(precision).name
    found, skipped = cache_bytes(hardware)
    if not found:
        raise ValueError(f"none of the devices has a published cache size: {skipped}")
    streamed = m.decode_weight_bytes(p)
    fig, ax = new_figure(f"On-chip cache vs the weights of one decode step ({m.name}, {p})",
                         "bytes (MB, log scale)", "device (catalog)", figsize=(10, 0.38 * len(found) + 2.0))
    ax.barh(range(len(found)), [b / 1e6 for b in found.values()], color="#55a868", label="largest on-chip cache")
    ax.set_yticks(range(len(found)), [_display(n) for n in found])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(streamed / 1e6, color="#c44e52", linestyle="--", linewidth=1.5,
               label=f"{m.name} weights streamed per token ({p})")
    _legend_outside(ax)
    _skipped_note(ax, skipped, "cache size")
    return fig


#: Colours of :func:`plot_decode_step`: read by the step, stored but not read.
READ_COLOUR, UNREAD_COLOUR = "#c44e52", "#bbbbbb"


def plot_decode_step(model="mistral-7b", precision="fp16") -> Figure:
    """One batch-1 decode step of ``model``, part by part in the order it runs: what it reads of each
    weight matrix, and what stays in memory unread.

    Bars (MB, log axis), top to bottom: the token-embedding table as stored (grey: the step looks up
    one row of it) and that one row (red); one transformer block's attention projections Q, K, V, O,
    its MLP (gate, up, down) and its two norms, each read in full; all ``layers`` blocks together;
    the lm_head (V x h), read in full whether or not it is tied to the embedding; the total the step
    streams. Every bar is a ``course_lib`` number: ``weight_bytes`` of ``ModelSpec``'s per-layer
    counts (``attention_params_per_layer``, ``dense_mlp_params``, ``norm_params_per_layer``) and the
    parts of :func:`course_lib.core.roofline.bytes_per_token`. Bars carry a ``gid``
    (``"step:<part>"``) so tests can find them. Mixture-of-experts models are refused (their blocks
    are not read in full; lesson 02's table covers them).
    """
    m = get_model(model)
    p = get_precision(precision).name
    if m.is_moe or m.is_mla:
        raise ValueError(f"model must be a dense model without MLA for this picture, got {m.name!r} "
                         f"(its blocks are {'mixture-of-experts' if m.is_moe else 'MLA'}: see plot_bytes_per_token)")
    r = bytes_per_token(m, p)
    tied = "tied: the embedding matrix itself" if m.tied_embeddings else "its own matrix"
    parts = [
        ("embedding_table", f"token embedding table, V x h = {m.vocab:,} x {m.hidden:,} (stored)",
         weight_bytes(m.embedding_params, p), UNREAD_COLOUR),
        ("embedding_row", f"... of which the step reads one row (h = {m.hidden:,} values)",
         r.part_bytes("embedding_row"), READ_COLOUR),
        ("attention", f"one block: attention Q, K, V, O ({m.heads} query heads, {m.kv_heads} KV heads "
                      f"of head_dim {m.head_dim})", weight_bytes(m.attention_params_per_layer, p), READ_COLOUR),
        ("mlp", f"one block: MLP ({'gate, up, down' if m.mlp == 'gated' else 'up, down'}; "
                f"h = {m.hidden:,}, intermediate {m.intermediate:,})",
         weight_bytes(m.dense_mlp_params, p), READ_COLOUR),
        ("norms", "one block: its two norms", weight_bytes(m.norm_params_per_layer, p), READ_COLOUR),
        ("blocks", f"all {m.layers} blocks (and the final norm)", r.part_bytes("blocks"), READ_COLOUR),
        ("lm_head", f"lm_head, h x V, read in full ({tied})", r.part_bytes("lm_head"), READ_COLOUR),
        ("total", "total streamed by one decode step", r.streamed_bytes, READ_COLOUR),
    ]
    fig, ax = new_figure(f"One decode step of {m.name} ({p}, batch 1): what it reads",
                         "bytes (MB, log scale)", "part of the model (in the order the step runs)",
                         figsize=(10, 4.6))
    for i, (key, label, nbytes, colour) in enumerate(parts):
        bar = ax.barh([i], [nbytes / 1e6], color=colour, edgecolor="#333", linewidth=0.5)
        bar.patches[0].set_gid(f"step:{key}")
        ax.annotate(format_bytes(nbytes), xy=(nbytes / 1e6, i), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_yticks(range(len(parts)), [label for _, label, _, _ in parts], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(right=ax.get_xlim()[1] * 8)   # room for the value labels
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=READ_COLOUR, label="read by the step"),
                       Patch(color=UNREAD_COLOUR, label="in memory, not read (except one row)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=2, fontsize=8)  # below: off the bars
    return fig
