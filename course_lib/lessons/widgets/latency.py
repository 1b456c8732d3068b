"""Lesson 04's explorer: the batch-1 time-per-token floor of a model on a device.

Lessons: 04

Pick a model, a device and the weights' precision, slide the context (the prompt's tokens, already
in the KV cache) and read the TPOT floor -- the time of the first decode step after that prompt when
every byte it needs comes out of memory at the device's full bandwidth -- and the tokens per second
it allows:

    from course_lib.lessons.widgets.latency import tpot_explorer
    tpot_explorer()                                       # the source's 7B on an RTX 4090, fp16
    tpot_explorer("mistral-7b", "h200", precision="fp8", context=8192)

Everything shown comes from one call of the estimator, :func:`tpot_estimate`::

    estimate(model, hardware, prompt_tokens=context, new_tokens=2, precision=precision)

a response of two tokens: the prefill gives the first, and its one decode step, ``tpot_first``, is
the first decode step after ``context`` tokens (it reads the K/V of those tokens and writes and reads
its own). (With ``new_tokens=1`` there would be no decode step at all.) The TPOT label holds exactly
``format_time(estimate(...).tpot_first)`` and the tokens/s label
``Quantity(estimate(...).decode_tps, "number").format() + " tokens/s"`` (1 / that step's time).
The plain function :func:`tpot_reading` computes all of it (tested without a browser); the widget
only wires controls to it.

Stable CSS classes (``_dom_classes``) for the browser tests: the whole box
``course-tpot-explorer``; controls ``course-model``, ``course-hardware``, ``course-precision`` and
the context slider ``course-context``; outputs ``course-tpot`` (the TPOT text), ``course-tps``
(tokens per second) and ``course-tpot-details`` (the HTML breakdown).
"""
from __future__ import annotations

import html
from dataclasses import dataclass, replace

import ipywidgets as widgets

from course_lib.core.estimator import Estimate, estimate, kv_cache_bytes
from course_lib.core.hardware import get_hardware, list_hardware
from course_lib.core.kv import context_limits
from course_lib.core.models import get_model, list_models
from course_lib.core.precision import PRECISIONS, get_precision
from course_lib.core.units import Quantity, format_bandwidth, format_bytes, format_time
from course_lib.core.validation import require_choice, require_count
from course_lib.lessons.widgets import _html

__all__ = ["TpotReading", "TpotExplorer", "tpot_estimate", "tpot_reading", "tpot_explorer",
           "CONTEXT_RANGE", "NOT_AVAILABLE"]

#: (min, max, step) of the context slider, in tokens.
CONTEXT_RANGE = (1, 32768, 1)

#: What the TPOT and tokens/s labels show when the estimator cannot estimate a setting.
NOT_AVAILABLE = "n/a"


def tpot_estimate(model, hardware, precision="fp16", context: int = 1024) -> Estimate:
    """The estimate behind the explorer: the first decode step after ``context`` tokens, batch 1.

    ``estimate(model, hardware, prompt_tokens=context, new_tokens=2, precision=precision)``: a
    two-token response, whose one decode step (``tpot_first``, here also ``tpot``) is that step's
    roofline time at 100 % of peak bandwidth and compute.
    """
    context = require_count("context", context, minimum=1)
    return estimate(model, hardware, prompt_tokens=context, new_tokens=2, precision=precision)


@dataclass(frozen=True)
class TpotReading:
    """What the explorer shows for one setting.

    ``estimate`` is :func:`tpot_estimate`'s result (``None`` when the setting cannot be estimated,
    e.g. a device without a published peak FLOP/s; ``error`` then holds the estimator's message).
    ``tpot_text``/``tps_text`` are the two labels, ``details_html`` the breakdown below them.
    """

    model: str
    hardware: str
    precision: str
    context: int
    estimate: Estimate | None
    error: str | None
    tpot_text: str
    tps_text: str
    details_html: str

    @property
    def weight_bytes_per_step(self) -> float | None:
        """Weight bytes the step streams (all blocks and the lm_head, one embedding row)."""
        e = self.estimate
        return None if e is None else e.model.decode_weight_bytes(e.precision, batch=e.batch)

    @property
    def kv_bytes_per_step(self) -> float | None:
        """K/V bytes the step reads: its context plus itself, capped by a sliding window."""
        e = self.estimate
        return None if e is None else kv_cache_bytes(e.model, self.context + 1, e.kv_precision)


def tpot_reading(model, hardware, precision="fp16", context: int = 1024) -> TpotReading:
    """Everything the explorer displays for one setting (see the module docstring).

    Bad model/hardware/precision names or a context that is not a whole number >= 1 raise one
    ValueError/TypeError naming the argument; a valid setting the estimator cannot handle (no
    published peak FLOP/s for the device) gives a reading with ``error`` set instead.
    """
    m = get_model(model)
    hw = get_hardware(hardware)
    prec = get_precision(precision).name
    context = require_count("context", context, minimum=1)
    esc = html.escape
    device = hw.display or hw.name
    try:
        e = tpot_estimate(m, hw, prec, context)
    except ValueError as exc:
        details = _html.error_box(
            str(exc), "Cannot estimate this setting: ", cls="course-tpot-breakdown",
            after=(f"<br>The memory floor alone needs only the bandwidth ({esc(format_bandwidth(hw.bandwidth))}), "
                   f"but the estimator also checks that the step is not compute-bound, and for that it needs a "
                   f"published peak FLOP/s."))
        return TpotReading(m.name, hw.name, prec, context, None, str(exc), NOT_AVAILABLE, NOT_AVAILABLE,
                           details)

    step = e.decode_first
    reading = TpotReading(m.name, hw.name, prec, context, e, None, format_time(e.tpot_first),
                          f"{Quantity(e.decode_tps, 'number').format()} tokens/s", "")
    w_bytes, kv_bytes = reading.weight_bytes_per_step, reading.kv_bytes_per_step
    limits = context_limits(m, context + 1)
    kv_note = f"K/V of {limits.attended:,.0f} tokens in {esc(e.kv_precision)}"
    if m.local_window is not None and limits.tokens > m.local_window:
        kv_note += (f" per layer on average: its {m.global_layers} global layers read all {limits.tokens:,}, its "
                    f"{m.local_layers} local layers the last {m.local_window:,}")
    if limits.window_capped:
        kv_note += (f": the sliding window caps the read at the last {m.sliding_window:,} tokens, "
                    f"so the TPOT stops growing")
    bound = ("memory-bound: the floor is bytes / bandwidth" if step.bound == "memory"
             else "compute-bound: FLOPs / peak FLOP/s exceeds bytes / bandwidth here")
    rows = [
        _html.row("Weights streamed", format_bytes(w_bytes),
             f"every block and the lm_head in {esc(e.precision)}; one row of the embedding table"),
        _html.row("K/V read", format_bytes(kv_bytes), kv_note),
        _html.row("Bytes per step", format_bytes(step.bytes), "weights + K/V"),
        _html.row("Memory bandwidth", format_bandwidth(hw.bandwidth), f"{esc(hw.memory_type)} on {esc(device)}"),
        _html.row("Memory time", format_time(step.memory_time), "bytes per step / bandwidth"),
        _html.row("Compute time", format_time(step.compute_time),
             f"FLOPs / peak {esc(e.compute_dtype)} FLOP/s; {bound}"),
    ]
    notes = []
    if limits.beyond_trained:
        notes.append(f"{esc(m.name)} was trained for at most {m.max_positions:,} positions: a longer context "
                     f"is arithmetic only.")
    if e.fits is False:
        notes.append(f"The weights and this KV cache ({esc(format_bytes(e.memory_needed))}) do NOT fit in the "
                     f"{esc(format_bytes(hw.capacity))} of {esc(device)}.")
    caption = (f"{esc(m.name)}, batch 1, {esc(e.precision)} weights, {esc(e.kv_precision)} KV cache: the first "
               f"decode step after a prompt of {context:,} tokens, at 100 % of peak bandwidth and compute "
               f"(the physical floor; real kernels are slower, see lesson 08)")
    details = (f'<div class="course-tpot-breakdown">\n{_html.table(rows)}\n{_html.notes(notes)}'
               f"{_html.caption(caption)}\n</div>")
    return replace(reading, details_html=details)


class TpotExplorer(_html.Snapshot, widgets.VBox):
    """The widget returned by :func:`tpot_explorer`; controls and outputs are attributes.

    Controls: ``model``, ``hardware``, ``precision`` (Dropdowns) and ``context`` (IntSlider).
    Outputs: ``tpot`` and ``tps`` (Labels) and ``details`` (HTML). Changing a control re-renders
    the outputs from :func:`tpot_reading`; ``reading`` holds the latest one.
    """

    def __init__(self, model="source-7b", hardware="rtx-4090", precision="fp16", context=1024):
        model = get_model(require_choice("model", model, list_models())).name
        hardware = require_choice("hardware", hardware, list_hardware())
        precision = get_precision(precision).name
        lo, hi, step = CONTEXT_RANGE
        context = require_count("context", context, minimum=1)
        if not lo <= context <= hi:
            raise ValueError(f"context must be between {lo} and {hi} tokens for the explorer's slider, got {context}")

        wide = {"description_width": "7em"}
        self.model = widgets.Dropdown(options=list_models(), value=model, description="Model", style=wide)
        self.hardware = widgets.Dropdown(
            options=[(f"{get_hardware(h).display or h} ({get_hardware(h).memory_type})", h) for h in list_hardware()],
            value=hardware, description="Hardware", style=wide)
        self.precision = widgets.Dropdown(options=list(PRECISIONS), value=precision, description="Weights",
                                          style=wide)
        self.context = widgets.IntSlider(value=context, min=lo, max=hi, step=step, description="Context",
                                         style=wide, layout=widgets.Layout(width="40em"),
                                         _dom_classes=("course-context",))
        self.tpot = widgets.Label(value="", style={"font_weight": "bold", "font_size": "1.3em"},
                                  _dom_classes=("course-tpot",))
        self.tps = widgets.Label(value="", style={"font_size": "1.1em"}, _dom_classes=("course-tps",))
        self.details = widgets.HTML(_dom_classes=("course-tpot-details",))
        for w, cls in [(self.model, "course-model"), (self.hardware, "course-hardware"),
                       (self.precision, "course-precision")]:
            w.add_class(cls)
        self.reading: TpotReading | None = None
        super().__init__(children=[
            widgets.HBox([self.model, self.hardware, self.precision]),
            self.context,
            widgets.HBox([widgets.Label("TPOT floor:"), self.tpot, widgets.Label("i.e. at most"), self.tps]),
            self.details,
        ])
        self.add_class("course-tpot-explorer")
        for w in self.controls:
            w.observe(self._refresh, names="value")
        self._refresh()

    @property
    def controls(self) -> tuple:
        return (self.model, self.hardware, self.precision, self.context)

    def settings(self) -> dict:
        """The current setting, as keyword arguments of :func:`tpot_reading` / :func:`tpot_estimate`."""
        return {"model": self.model.value, "hardware": self.hardware.value, "precision": self.precision.value,
                "context": self.context.value}

    def _refresh(self, change=None) -> None:
        r = tpot_reading(**self.settings())
        self.reading = r
        self.tpot.value = r.tpot_text
        self.tps.value = r.tps_text
        self.details.value = r.details_html


def tpot_explorer(model: str = "source-7b", hardware: str = "rtx-4090", precision: str = "fp16",
                  context: int = 1024) -> TpotExplorer:
    """The TPOT-floor explorer: model x hardware x weight precision x context -> TPOT and tokens/s.

    ``model``/``hardware`` are catalog names (``list_models()``, ``list_hardware()``), ``precision``
    one of ``PRECISIONS`` and ``context`` a token count within ``CONTEXT_RANGE``.
    """
    return TpotExplorer(model=model, hardware=hardware, precision=precision, context=context)
