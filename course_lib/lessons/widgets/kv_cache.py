"""Lesson 03 widgets: how big the KV cache gets, and when it outweighs the weights.

Lessons: 03

    from course_lib.lessons.widgets.kv_cache import kv_cache_explorer, kv_crossover_explorer
    kv_cache_explorer()            # KV bytes of several catalog models at one context and batch
    kv_crossover_explorer()        # where KV bytes equal weight bytes, and what fits on a GPU

The numbers and verdicts come from :mod:`course_lib.core.kv`: ``kv_rows`` (one ``KVRow`` per model,
from ``kv_cache_bytes``, which caps a sliding-window model such as Mistral-7B v0.1 at its window) and
``kv_crossover`` (``crossover_context``, ``tokens_that_fit`` and what they mean). The functions below
only render them as HTML and are tested without a browser:

* :func:`kv_table_html` -- one row per model at a context and batch;
* :func:`crossover_html` -- the crossover widget's output;
* :func:`kv_shape` -- the factors of ``kv_values_per_token`` as text.

Stable CSS classes for browser tests: ``course-kv-explorer`` (whole widget), controls
``course-kv-models``, ``course-kv-context``, ``course-kv-batch``, ``course-kv-precision``,
``course-kv-weight-precision``, output ``course-kv-output`` (its cells carry ``course-kv-bytes``,
``course-kv-per-token``, ``course-kv-ratio``); ``course-kv-crossover`` (whole widget), controls
``course-kv-model``, ``course-kv-hardware``, ``course-kv-batch``, ``course-kv-precision``,
``course-kv-weight-precision``, output ``course-kv-crossover-output`` (its cells
``course-kv-crossover-context``, ``course-kv-crossover-product``, ``course-kv-fit-tokens``).
"""
from __future__ import annotations

import html

import ipywidgets as widgets

from course_lib.core.hardware import get_hardware, list_hardware
from course_lib.core.kv import kv_crossover, kv_rows
from course_lib.core.models import get_model, list_models
from course_lib.core.precision import PRECISIONS, get_precision
from course_lib.core.units import format_bytes
from course_lib.core.validation import require_choice, require_count
from course_lib.lessons.widgets import _html

__all__ = [
    "kv_shape", "kv_table_html", "crossover_html",
    "KVCacheExplorer", "kv_cache_explorer", "KVCrossoverExplorer", "kv_crossover_explorer",
    "DEFAULT_MODELS", "CONTEXT_RANGE", "BATCH_RANGE",
]

#: The models the explorer starts with: MHA, GQA (with and without a window), a 4-KV-head GQA and MLA.
DEFAULT_MODELS = ("llama-2-7b", "mistral-7b", "llama-3-8b", "qwen2.5-7b", "deepseek-v3")
#: (min, max, step) of the context slider, in tokens per sequence.
CONTEXT_RANGE = (0, 131072, 256)
#: (min, max, step) of the batch slider, in sequences.
BATCH_RANGE = (1, 256, 1)


# --------------------------------------------------------------------------------------------------
# What the widgets show (rendered from course_lib.core.kv)
# --------------------------------------------------------------------------------------------------
def kv_shape(model) -> str:
    """The factors of ``kv_values_per_token`` as text: ``"2 × 32 × 8 × 128"`` or, for MLA, ``"61 × (512 + 64)"``."""
    m = get_model(model)
    if m.is_mla:
        return f"{m.layers} × ({m.kv_rank} + {m.rope_dim})"
    return f"2 × {m.layers} × {m.kv_heads} × {m.head_dim}"


def _ratio_text(r: float) -> str:
    return f"{r:.3g}×" if r >= 0.01 else f"{r:.2g}×"


def kv_table_html(models=DEFAULT_MODELS, context: int = 4096, batch: int = 1, kv_precision: str = "fp16",
                  precision: str = "fp16") -> str:
    """The explorer's HTML: a table of :func:`kv_rows` (bytes printed with ``format_bytes``)."""
    rows = kv_rows(models, context, batch, kv_precision, precision)
    esc = html.escape
    head = ("<tr><th>Model</th><th>Attention</th><th>Values per token</th><th>KV per token</th>"
            "<th>KV cache</th><th>Weights</th><th>KV / weights</th></tr>")
    body = []
    for r in rows:
        note = ""
        if r.capped:
            note = (f'<br><span class="course-kv-capped" style="color:#555">window: last '
                    f"{r.sliding_window:,} tokens kept</span>")
        body.append(
            f'<tr class="course-kv-row" data-model="{esc(r.model)}"><td>{esc(r.model)}</td><td>{r.attention}</td>'
            f"<td>{esc(kv_shape(r.model))} = {r.values_per_token:,}</td>"
            f'<td class="course-kv-per-token">{format_bytes(r.bytes_per_token)}</td>'
            f'<td class="course-kv-bytes">{format_bytes(r.kv_bytes)}{note}</td>'
            f'<td class="course-kv-weights">{format_bytes(r.weight_bytes)}</td>'
            f'<td class="course-kv-ratio">{_ratio_text(r.ratio)}</td></tr>')
    seqs = "sequence" if batch == 1 else "sequences"
    caption = (f"{batch:,} {seqs} × {context:,} tokens, KV cache in {esc(get_precision(kv_precision).name)}, "
               f"weights in {esc(get_precision(precision).name)} (SI units: 1 kB = 1000 bytes)")
    return (f'<div class="course-kv"><table class="course-kv-table">\n{head}\n' + "\n".join(body)
            + f'\n</table><p class="course-kv-caption" style="color:#555">{caption}</p></div>')


def crossover_html(model: str = "llama-3-8b", hardware: str = "h100-sxm", batch: int = 8,
                   precision: str = "fp16", kv_precision: str = "fp16") -> str:
    """The crossover widget's HTML: :func:`course_lib.core.kv.kv_crossover` as a table."""
    x = kv_crossover(model, hardware, batch, precision, kv_precision)
    m, hw = get_model(x.model), get_hardware(x.hardware)
    esc = html.escape
    if x.never:
        cross, product = "never", "&ndash;"
        cross_note = (f"the {m.sliding_window:,}-token window caps the cache at "
                      f"{format_bytes(x.window_cache_bytes)}, less than the weights")
    else:
        cross, product = f"{x.context:,.0f} tokens", f"{x.context_times_batch:,.0f} tokens"
        cross_note = f"per sequence; then the KV cache holds {format_bytes(x.weight_bytes)}, as much as the weights"
        if x.beyond_trained_positions:
            cross_note += f" (beyond the model's {x.max_positions:,} trained positions)"
    device = hw.display or hw.name
    if x.weights_exceed_memory:
        fit_note = (f"the weights ({format_bytes(x.weight_bytes)}) alone exceed {esc(device)}'s "
                    f"{format_bytes(x.capacity)}")
    else:
        fit_note = (f"per sequence, {x.batch:,} sequences, in {esc(device)}'s {format_bytes(x.capacity)} "
                    f"minus {format_bytes(x.weight_bytes)} of weights")
    fit = "any length (the window's cache fits)" if x.any_length_fits else f"{int(x.tokens_that_fit):,} tokens"
    rows = [
        _html.row("KV cache = weights at", cross, cross_note, cls="course-kv-crossover-context", strong=True,
                  escape=False),
        _html.row("context × batch there", product, "the same for every batch size",
                  cls="course-kv-crossover-product", strong=True, escape=False),
        _html.row("Fits beside the weights", fit, fit_note, cls="course-kv-fit-tokens", strong=True),
    ]
    caption = (f"{esc(m.name)} ({m.attention_kind}, {format_bytes(x.kv_bytes_per_token)} of {esc(x.kv_precision)} "
               f"KV per token), {esc(x.precision)} weights, batch {x.batch:,}")
    return (f'<div class="course-kv-crossover-result">{_html.table(rows)}'
            f'<p style="color:#555">{caption}</p></div>')


def _error_html(exc: Exception) -> str:
    return _html.error_box(str(exc), "Cannot show this setting: ")


def _check_range(name: str, value, lo: int, hi: int) -> int:
    v = require_count(name, value, minimum=lo)
    if v > hi:
        raise ValueError(f"{name} must be between {lo} and {hi} for the widget's slider, got {v}")
    return v


_WIDE = {"description_width": "9em"}


def _slider(value, rng, description):
    lo, hi, step = rng
    return widgets.IntSlider(value=value, min=lo, max=hi, step=step, description=description, style=_WIDE,
                             continuous_update=False, layout=widgets.Layout(width="40em"))


def _precision_dropdown(value, description):
    return widgets.Dropdown(options=list(PRECISIONS), value=get_precision(value).name, description=description,
                            style=_WIDE)


# --------------------------------------------------------------------------------------------------
# Widgets
# --------------------------------------------------------------------------------------------------
class KVCacheExplorer(_html.Snapshot, widgets.VBox):
    """The widget of :func:`kv_cache_explorer`. Controls: ``models`` (SelectMultiple), ``context``,
    ``batch`` (IntSliders), ``kv_precision``, ``precision`` (Dropdowns); ``output`` (HTML) holds
    :func:`kv_table_html` of the current setting."""

    def __init__(self, models=DEFAULT_MODELS, context=4096, batch=1, kv_precision="fp16", precision="fp16"):
        names = tuple(require_choice("models", r.model, list_models()) for r in kv_rows(models, context=0))
        context = _check_range("context", context, CONTEXT_RANGE[0], CONTEXT_RANGE[1])
        batch = _check_range("batch", batch, BATCH_RANGE[0], BATCH_RANGE[1])
        self.models = widgets.SelectMultiple(options=list_models(), value=names, rows=6, description="Models",
                                             style=_WIDE)
        self.context = _slider(context, CONTEXT_RANGE, "Context (tokens)")
        self.batch = _slider(batch, BATCH_RANGE, "Batch (sequences)")
        self.kv_precision = _precision_dropdown(kv_precision, "KV cache")
        self.precision = _precision_dropdown(precision, "Weights")
        self.output = widgets.HTML()
        for w, cls in [(self.models, "course-kv-models"), (self.context, "course-kv-context"),
                       (self.batch, "course-kv-batch"), (self.kv_precision, "course-kv-precision"),
                       (self.precision, "course-kv-weight-precision"), (self.output, "course-kv-output")]:
            w.add_class(cls)
        super().__init__(children=[
            widgets.HBox([self.models, widgets.VBox([self.kv_precision, self.precision])]),
            self.context, self.batch, self.output])
        self.add_class("course-kv-explorer")
        for w in self.controls:
            w.observe(self._refresh, names="value")
        self._refresh()

    @property
    def controls(self) -> tuple:
        return (self.models, self.context, self.batch, self.kv_precision, self.precision)

    def settings(self) -> dict:
        """The current setting, as keyword arguments of :func:`kv_table_html`."""
        return {"models": tuple(self.models.value), "context": self.context.value, "batch": self.batch.value,
                "kv_precision": self.kv_precision.value, "precision": self.precision.value}

    def _refresh(self, change=None) -> None:
        try:
            self.output.value = kv_table_html(**self.settings())
        except (ValueError, TypeError) as exc:  # e.g. every model deselected
            self.output.value = _error_html(exc)


def kv_cache_explorer(models=DEFAULT_MODELS, context: int = 4096, batch: int = 1, kv_precision: str = "fp16",
                      precision: str = "fp16") -> KVCacheExplorer:
    """KV cache bytes of catalog models at a context and batch you choose, beside their weight bytes.

    ``models``: catalog names (``list_models()``); ``context`` within ``CONTEXT_RANGE`` and ``batch``
    within ``BATCH_RANGE``; ``kv_precision``/``precision``: names from ``PRECISIONS``.
    """
    return KVCacheExplorer(models, context, batch, kv_precision, precision)


class KVCrossoverExplorer(_html.Snapshot, widgets.VBox):
    """The widget of :func:`kv_crossover_explorer`. Controls: ``model``, ``hardware``,
    ``kv_precision``, ``precision`` (Dropdowns), ``batch`` (IntSlider); ``output`` (HTML) holds
    :func:`crossover_html` of the current setting."""

    def __init__(self, model="llama-3-8b", hardware="h100-sxm", batch=8, precision="fp16", kv_precision="fp16"):
        model = get_model(require_choice("model", model, list_models())).name
        hardware = require_choice("hardware", hardware, list_hardware())
        batch = _check_range("batch", batch, BATCH_RANGE[0], BATCH_RANGE[1])
        self.model = widgets.Dropdown(options=list_models(), value=model, description="Model", style=_WIDE)
        self.hardware = widgets.Dropdown(options=[(get_hardware(h).display or h, h) for h in list_hardware()],
                                         value=hardware, description="Hardware", style=_WIDE)
        self.batch = _slider(batch, BATCH_RANGE, "Batch (sequences)")
        self.kv_precision = _precision_dropdown(kv_precision, "KV cache")
        self.precision = _precision_dropdown(precision, "Weights")
        self.output = widgets.HTML()
        for w, cls in [(self.model, "course-kv-model"), (self.hardware, "course-kv-hardware"),
                       (self.batch, "course-kv-batch"), (self.kv_precision, "course-kv-precision"),
                       (self.precision, "course-kv-weight-precision"), (self.output, "course-kv-crossover-output")]:
            w.add_class(cls)
        super().__init__(children=[
            widgets.HBox([self.model, self.hardware]), widgets.HBox([self.kv_precision, self.precision]),
            self.batch, self.output])
        self.add_class("course-kv-crossover")
        for w in self.controls:
            w.observe(self._refresh, names="value")
        self._refresh()

    @property
    def controls(self) -> tuple:
        return (self.model, self.hardware, self.batch, self.kv_precision, self.precision)

    def settings(self) -> dict:
        """The current setting, as keyword arguments of :func:`crossover_html`."""
        return {"model": self.model.value, "hardware": self.hardware.value, "batch": self.batch.value,
                "precision": self.precision.value, "kv_precision": self.kv_precision.value}

    def _refresh(self, change=None) -> None:
        try:
            self.output.value = crossover_html(**self.settings())
        except (ValueError, TypeError) as exc:
            self.output.value = _error_html(exc)


def kv_crossover_explorer(model: str = "llama-3-8b", hardware: str = "h100-sxm", batch: int = 8,
                          precision: str = "fp16", kv_precision: str = "fp16") -> KVCrossoverExplorer:
    """Where the KV cache of ``batch`` sequences outweighs the weights, and how many tokens fit on a device."""
    return KVCrossoverExplorer(model, hardware, batch, precision, kv_precision)
