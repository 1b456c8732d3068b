"""Lesson 06's explorer: prefill and decode of one request, from the estimator.

Lessons: 06

Pick a model, a device and the weights' precision; slide the prompt length, the tokens to generate
and the batch; read the time to first token (prefill), the mean time per output token (decode), the
total, tokens per second per user and over the batch, and which bound each phase hits:

    from course_lib.lessons.widgets.prefill_decode import prefill_decode_explorer
    prefill_decode_explorer()                                   # Mistral-7B on an H100 SXM, fp16
    prefill_decode_explorer("llama-3-8b", "rtx-4090", prompt_tokens=4000, new_tokens=1000)

Everything shown comes from one call of the estimator::

    e = estimate(model, hardware, prompt_tokens, new_tokens, precision=precision, batch=batch)

The labels hold exactly ``format_time(e.ttft)``, ``format_time(e.tpot)``, ``format_time(e.total)``,
``_rate(e.tps)`` and ``_rate(e.tps_aggregate)``; the breakdown adds each phase's FLOPs, bytes,
arithmetic intensity and bound, the other TPOT conventions (``course_lib.core.roofline.latency_conventions``:
``total_latency_n_tpot``, ``e2e_per_token``) and the source material's recipe (``e.source_recipe_tpot``).
The plain function
:func:`prefill_decode_reading` computes all of it (tested without a browser); the widget only wires
controls to it.

Stable CSS classes (``_dom_classes``) for the browser tests: the box ``course-prefill-decode``;
controls ``course-model``, ``course-hardware``, ``course-precision``, ``course-prompt``,
``course-new-tokens``, ``course-batch``; outputs ``course-ttft``, ``course-tpot``, ``course-total``,
``course-tps``, ``course-tps-aggregate``, ``course-bound`` and ``course-pd-details`` (HTML).
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as widgets

from course_lib.core.estimator import Estimate, estimate
from course_lib.core.hardware import get_hardware, list_hardware
from course_lib.core.kv import context_limits
from course_lib.core.models import get_model, list_models
from course_lib.core.precision import PRECISIONS, get_precision
from course_lib.core.roofline import latency_conventions
from course_lib.core.units import Quantity, format_bytes, format_flop_rate, format_time
from course_lib.core.validation import require_choice, require_count
from course_lib.lessons.widgets import _html

__all__ = ["PrefillDecodeReading", "PrefillDecodeExplorer", "prefill_decode_reading", "prefill_decode_explorer",
           "PROMPT_RANGE", "NEW_TOKENS_RANGE", "BATCH_RANGE", "NOT_AVAILABLE", "rate_text"]

#: (min, max, step) of the sliders
PROMPT_RANGE = (1, 32768, 1)
NEW_TOKENS_RANGE = (1, 4096, 1)
BATCH_RANGE = (1, 1024, 1)

NOT_AVAILABLE = "n/a"


def rate_text(tokens_per_second: float) -> str:
    """'1,234 tokens/s'-style text of a rate (three significant figures, via ``Quantity``)."""
    return f"{Quantity(tokens_per_second, 'number').format()} tokens/s"


def _flop_text(f: float) -> str:
    return Quantity(f, "flops").format()


@dataclass(frozen=True)
class PrefillDecodeReading:
    """What the explorer shows for one setting; ``estimate`` is None (and ``error`` set) when the
    estimator cannot price it (e.g. a device without a published peak FLOP/s)."""

    settings: dict
    estimate: Estimate | None
    error: str | None
    ttft_text: str
    tpot_text: str
    total_text: str
    tps_text: str
    tps_aggregate_text: str
    bound_text: str
    details_html: str


def _check_range(name, value, rng):
    lo, hi, _ = rng
    value = require_count(name, value, minimum=lo)
    if value > hi:
        raise ValueError(f"{name} must be between {lo} and {hi} for the explorer's slider, got {value}")
    return value


def prefill_decode_reading(model="mistral-7b", hardware="h100-sxm", precision="fp16", prompt_tokens: int = 1000,
                           new_tokens: int = 200, batch: int = 1) -> PrefillDecodeReading:
    """Everything the explorer displays for one setting (see the module docstring)."""
    m, hw = get_model(model), get_hardware(hardware)
    prec = get_precision(precision).name
    P = require_count("prompt_tokens", prompt_tokens, minimum=1)
    n = require_count("new_tokens", new_tokens, minimum=1)
    B = require_count("batch", batch, minimum=1)
    settings = dict(model=m.name, hardware=hw.name, precision=prec, prompt_tokens=P, new_tokens=n, batch=B)
    esc = html.escape
    try:
        e = estimate(m, hw, P, n, precision=prec, batch=B)
    except ValueError as exc:
        details = _html.error_box(str(exc), "Cannot estimate this setting: ", cls="course-pd-breakdown",
                                  after="<br>Prefill is priced by its FLOPs, so the estimator needs the "
                                        "device's peak FLOP/s.")
        na = NOT_AVAILABLE
        return PrefillDecodeReading(settings, None, str(exc), na, na, na, na, na, na, details)

    bound = f"prefill {e.prefill_bound}-bound, decode {e.decode_bound}-bound"
    pf, d1 = e.prefill, e.decode_first
    ridge = hw.ridge_point(e.compute_dtype)
    steps = e.decode_steps
    conv = latency_conventions(e.ttft, e.tpot, n)
    rows = [
        _html.row("Prefill FLOPs", _flop_text(pf.flops),
                  f"{B} × ({P:,} prompt tokens: 2·N·P + causal attention + lm_head)"),
        _html.row("Prefill bytes", format_bytes(pf.bytes), "weights once + the prompt's K/V written"),
        *([_html.row("Compute rate", format_flop_rate(hw.compute_rate(e.compute_dtype)),
                     "an effective rate derived from a published measurement, not a datasheet peak")]
          if hw.rate_is_effective(e.compute_dtype) else []),
        _html.row("Prefill intensity", f"{pf.intensity:,.1f} FLOP/B",
             f"ridge point {ridge:,.0f} FLOP/B: {esc(pf.bound)}-bound"),
        _html.row("Decode FLOPs (first step)", _flop_text(d1.flops), f"{B} × (2·N + attention over the context)"),
        _html.row("Decode bytes (first step)", format_bytes(d1.bytes), "weights once + K/V of the context"),
        _html.row("Decode intensity", f"{d1.intensity:,.2f} FLOP/B", f"{esc(d1.bound)}-bound"),
        _html.row("TTFT + (n − 1)·TPOT", format_time(e.total), f"{steps:,} decode steps after the first token"),
        _html.row("TTFT + n·TPOT", format_time(conv.total_n_tpot),
             "another convention: one step too many"),
        _html.row("End-to-end / n", format_time(conv.e2e_per_token),
             "another 'per-token' figure: prefill smeared over the tokens"),
        _html.row("Source recipe TPOT", format_time(e.source_recipe_tpot),
             f"decode FLOPs / peak compute: {e.source_recipe_factor:,.0f}× too optimistic"
             if e.decode_bound == "memory" else "decode FLOPs / peak compute"),
    ]
    notes = []
    if e.fits is False:
        notes.append(f"Weights + KV cache ({esc(format_bytes(e.memory_needed))}) do NOT fit in the "
                     f"{esc(format_bytes(hw.capacity))} of {esc(hw.display or hw.name)}.")
    if context_limits(m, P).window_capped:
        notes.append(f"{esc(m.name)} attends to at most the last {m.sliding_window:,} tokens (sliding window): the "
                     f"prefill FLOPs count full causal attention, an upper bound for a {P:,}-token prompt.")
    if context_limits(m, P + n).beyond_trained:
        notes.append(f"{esc(m.name)} was trained for {m.max_positions:,} positions: "
                     "a longer sequence is arithmetic only.")
    caption = (f"{esc(m.name)} on {esc(hw.display or hw.name)}, {esc(e.precision)} weights, batch {B}: roofline "
               f"times at 100 % of peak compute and bandwidth (the physical floor)")
    details = (f'<div class="course-pd-breakdown">\n{_html.table(rows)}\n{_html.notes(notes)}'
               f"{_html.caption(caption)}\n</div>")
    return PrefillDecodeReading(settings, e, None, format_time(e.ttft), format_time(e.tpot), format_time(e.total),
                                rate_text(e.tps), rate_text(e.tps_aggregate), bound, details)


class PrefillDecodeExplorer(_html.Snapshot, widgets.VBox):
    """The widget returned by :func:`prefill_decode_explorer`; controls and outputs are attributes."""

    def __init__(self, model="mistral-7b", hardware="h100-sxm", precision="fp16", prompt_tokens=1000,
                 new_tokens=200, batch=1):
        model = get_model(require_choice("model", model, list_models())).name
        hardware = require_choice("hardware", hardware, list_hardware())
        precision = get_precision(precision).name
        prompt_tokens = _check_range("prompt_tokens", prompt_tokens, PROMPT_RANGE)
        new_tokens = _check_range("new_tokens", new_tokens, NEW_TOKENS_RANGE)
        batch = _check_range("batch", batch, BATCH_RANGE)
        wide = {"description_width": "8em"}
        long = widgets.Layout(width="40em")
        self.model = widgets.Dropdown(options=list_models(), value=model, description="Model", style=wide)
        self.hardware = widgets.Dropdown(
            options=[(f"{get_hardware(h).display or h}", h) for h in list_hardware()], value=hardware,
            description="Hardware", style=wide)
        self.precision = widgets.Dropdown(options=list(PRECISIONS), value=precision, description="Weights", style=wide)

        def slider(value, rng, desc, cls):
            lo, hi, step = rng
            return widgets.IntSlider(value=value, min=lo, max=hi, step=step, description=desc, style=wide,
                                     layout=long, _dom_classes=(cls,))

        self.prompt_tokens = slider(prompt_tokens, PROMPT_RANGE, "Prompt tokens", "course-prompt")
        self.new_tokens = slider(new_tokens, NEW_TOKENS_RANGE, "New tokens", "course-new-tokens")
        self.batch = slider(batch, BATCH_RANGE, "Batch", "course-batch")
        big = {"font_weight": "bold", "font_size": "1.2em"}
        self.ttft = widgets.Label(style=big, _dom_classes=("course-ttft",))
        self.tpot = widgets.Label(style=big, _dom_classes=("course-tpot",))
        self.total = widgets.Label(style=big, _dom_classes=("course-total",))
        self.tps = widgets.Label(_dom_classes=("course-tps",))
        self.tps_aggregate = widgets.Label(_dom_classes=("course-tps-aggregate",))
        self.bound = widgets.Label(_dom_classes=("course-bound",))
        self.details = widgets.HTML(_dom_classes=("course-pd-details",))
        for w, cls in [(self.model, "course-model"), (self.hardware, "course-hardware"),
                       (self.precision, "course-precision")]:
            w.add_class(cls)
        self.reading: PrefillDecodeReading | None = None
        super().__init__(children=[
            widgets.HBox([self.model, self.hardware, self.precision]),
            self.prompt_tokens, self.new_tokens, self.batch,
            widgets.HBox([widgets.Label("TTFT:"), self.ttft, widgets.Label("TPOT:"), self.tpot,
                          widgets.Label("total:"), self.total]),
            widgets.HBox([widgets.Label("per user:"), self.tps, widgets.Label("whole batch:"), self.tps_aggregate]),
            self.bound, self.details,
        ])
        self.add_class("course-prefill-decode")
        for w in self.controls:
            w.observe(self._refresh, names="value")
        self._refresh()

    @property
    def controls(self) -> tuple:
        return (self.model, self.hardware, self.precision, self.prompt_tokens, self.new_tokens, self.batch)

    def settings(self) -> dict:
        """The current setting, as keyword arguments of :func:`prefill_decode_reading`."""
        return {"model": self.model.value, "hardware": self.hardware.value, "precision": self.precision.value,
                "prompt_tokens": self.prompt_tokens.value, "new_tokens": self.new_tokens.value,
                "batch": self.batch.value}

    def _refresh(self, change=None) -> None:
        r = prefill_decode_reading(**self.settings())
        self.reading = r
        self.ttft.value, self.tpot.value, self.total.value = r.ttft_text, r.tpot_text, r.total_text
        self.tps.value, self.tps_aggregate.value = r.tps_text, r.tps_aggregate_text
        self.bound.value = r.bound_text
        self.details.value = r.details_html


def prefill_decode_explorer(model: str = "mistral-7b", hardware: str = "h100-sxm", precision: str = "fp16",
                            prompt_tokens: int = 1000, new_tokens: int = 200, batch: int = 1) -> PrefillDecodeExplorer:
    """The prefill/decode explorer: model × hardware × precision × prompt × new tokens × batch."""
    return PrefillDecodeExplorer(model=model, hardware=hardware, precision=precision, prompt_tokens=prompt_tokens,
                                 new_tokens=new_tokens, batch=batch)
