"""Lesson 09's deployment dashboard (also the Voila app of ``make app``).

Lessons: 09

    from course_lib.lessons.widgets.capstone import capstone_dashboard
    capstone_dashboard()                                   # Llama-3-8B on an H100 SXM, fp16, batch 1
    capstone_dashboard(hardware="h200", batch=32, precision="fp8")

The controls set a :class:`course_lib.core.capstone.DashboardState`; every output comes from the plain
functions of :mod:`course_lib.core.capstone` (tested without a browser): the TPOT label holds exactly
``tpot_text(state)``, the TTFT label ``ttft_text(state)``, and the figure is
``course_lib.lessons.plots.capstone.plot_latency_throughput(state)``. The widget only wires controls to them.

"This machine": the hardware dropdown lists ``"this-machine"``; the button *Measure this machine*
runs ``course_lib.measure.bench.this_machine(bench.measure_machine(...))`` (torch is imported then, inside the
callback, never when the dashboard loads) and selects it.

Stable CSS classes (``_dom_classes``) for the browser tests: the whole box ``course-capstone``;
controls ``course-capstone-model``, ``course-capstone-hardware`` (Dropdowns), ``course-capstone-batch``,
``course-capstone-prompt`` (IntSliders), ``course-capstone-new-tokens``, ``course-capstone-cached``,
``course-capstone-precision``, ``course-capstone-kv-precision``, ``course-capstone-compute-eff``,
``course-capstone-bandwidth-eff``, ``course-capstone-tp``, ``course-capstone-interconnect``,
``course-capstone-measure`` (button); outputs ``course-capstone-ttft``, ``course-capstone-tpot``,
``course-capstone-total``, ``course-capstone-tps``, ``course-capstone-memory``,
``course-capstone-bounds``, ``course-capstone-status`` and ``course-capstone-plot`` (the figure's Output).
"""
from __future__ import annotations

import base64
import html
from dataclasses import fields

import ipywidgets as widgets

from course_lib.core.capstone import (TENSOR_PARALLEL_CHOICES, THIS_MACHINE, DashboardState, DashboardView,
                                      dashboard_view, state_from_controls)
from course_lib.core.hardware import get_hardware, list_hardware
from course_lib.core.models import list_models
from course_lib.core.precision import PRECISIONS
from course_lib.core.units import format_bandwidth, parse_bandwidth
from course_lib.lessons.widgets import _html

__all__ = ["CapstoneDashboard", "capstone_dashboard", "status_html", "BATCH_RANGE", "PROMPT_RANGE",
           "NEW_TOKENS_RANGE", "EFFICIENCY_RANGE", "LINK_PLACEHOLDER", "LINK_HELP"]

#: (min, max, step) of the sliders, in sequences / tokens.
BATCH_RANGE = (1, 256, 1)
PROMPT_RANGE = (1, 32768, 1)
NEW_TOKENS_RANGE = (1, 8192, 1)
#: (min, max, step) of the efficiency sliders (fractions of the datasheet bandwidth / FLOP/s).
EFFICIENCY_RANGE = (0.05, 1.0, 0.01)


def status_html(view: DashboardView | None, error: str | None = None) -> str:
    """The status line under the numbers: the error, the warnings, or an all-clear."""
    if error is None and view is not None:
        error = view.error
    if error is not None:
        return _html.error_box(error, "Cannot price this setting: ")
    if view.warnings:
        return _html.notes((html.escape(w) for w in view.warnings), cls="course-warning")
    return '<p style="color:#060;margin:0.2em 0">Fits in memory.</p>'


def _link_text(bandwidth: float) -> str:
    """The link field's text for a bandwidth in bytes/s; it parses back to exactly the same number."""
    text = format_bandwidth(bandwidth, digits=15)
    return text if parse_bandwidth(text) == bandwidth else repr(float(bandwidth))


def _hardware_label(name: str) -> str:
    hw = get_hardware(name)
    return f"{hw.display or name} ({hw.memory_type}, {format_bandwidth(hw.bandwidth)})"


#: The link field's placeholder and tooltip: the all-reduce formula wants the bandwidth of each GPU's link in
#: ONE direction, while interconnect datasheets often add both directions together.
LINK_PLACEHOLDER = "GB/s per GPU, per direction"
LINK_HELP = ("Bandwidth of each GPU's link in one direction, e.g. '450 GB/s'. Datasheets often quote both "
             "directions added together (an H100 SXM's NVLink '900 GB/s' is 450 GB/s each way): halve such a figure.")

#: the KV-precision dropdown's value for "same rule as the estimator" (kv_precision=None)
_KV_AUTO = "auto"

class CapstoneDashboard(widgets.VBox):
    """The widget returned by :func:`capstone_dashboard`; controls and outputs are attributes.

    ``state`` is the current :class:`DashboardState` (``None`` while the controls hold an invalid
    combination, e.g. an unparsable interconnect bandwidth), ``view`` the latest
    :class:`DashboardView`, ``figure`` the latest figure, ``machine`` the measured spec of this machine.
    """

    def __init__(self, **state_overrides):
        init = DashboardState(**state_overrides)
        for name, (lo, hi, _) in (("batch", BATCH_RANGE), ("prompt_tokens", PROMPT_RANGE),
                                  ("new_tokens", NEW_TOKENS_RANGE)):
            if not lo <= getattr(init, name) <= hi:
                raise ValueError(f"{name} must be between {lo} and {hi} for the dashboard's slider, "
                                 f"got {getattr(init, name)}")
        for name in ("compute_efficiency", "bandwidth_efficiency"):
            if getattr(init, name) < EFFICIENCY_RANGE[0]:
                raise ValueError(f"{name} must be >= {EFFICIENCY_RANGE[0]} for the dashboard's slider, "
                                 f"got {getattr(init, name)}")
        self.machine = init.machine
        wide = {"description_width": "9em"}
        lay = widgets.Layout(width="34em")

        def cls(w, name):
            w.add_class(name)
            return w

        self.model = cls(widgets.Dropdown(options=list_models(), value=init.model, description="Model",
                                          style=wide), "course-capstone-model")
        hw_options = [(_hardware_label(h), h) for h in list_hardware()]
        hw_options.append(("this machine (measure first)", THIS_MACHINE))
        self.hardware = cls(widgets.Dropdown(options=hw_options, value=init.hardware, description="Hardware",
                                             style=wide), "course-capstone-hardware")
        self.precision = cls(widgets.Dropdown(options=list(PRECISIONS), value=init.precision,
                                              description="Weights", style=wide), "course-capstone-precision")
        # ipywidgets reads a Dropdown value of None as "nothing selected": the default gets a sentinel
        self.kv_precision = cls(widgets.Dropdown(options=[("as the weights (fp16 for integer formats)", _KV_AUTO)]
                                                 + [(p, p) for p in PRECISIONS],
                                                 value=_KV_AUTO if init.kv_precision is None else init.kv_precision,
                                                 description="KV cache", style=wide), "course-capstone-kv-precision")

        def slider(kind, value, lo, hi, step, label, css):
            # continuous_update=False: recompute (and redraw) when the handle is released, not on every pixel
            return cls(kind(value=value, min=lo, max=hi, step=step, description=label, style=wide, layout=lay,
                            continuous_update=False), css)

        self.batch = slider(widgets.IntSlider, init.batch, *BATCH_RANGE, "Batch", "course-capstone-batch")
        self.prompt_tokens = slider(widgets.IntSlider, init.prompt_tokens, *PROMPT_RANGE, "Prompt tokens",
                                    "course-capstone-prompt")
        self.new_tokens = slider(widgets.IntSlider, init.new_tokens, *NEW_TOKENS_RANGE, "New tokens",
                                 "course-capstone-new-tokens")
        self.cached_prefix_tokens = slider(widgets.IntSlider, init.cached_prefix_tokens, 0,
                                           max(init.prompt_tokens - 1, 0), 1, "Cached prefix", "course-capstone-cached")
        self.compute_efficiency = slider(widgets.FloatSlider, init.compute_efficiency, *EFFICIENCY_RANGE,
                                         "Compute eff.", "course-capstone-compute-eff")
        self.bandwidth_efficiency = slider(widgets.FloatSlider, init.bandwidth_efficiency, *EFFICIENCY_RANGE,
                                           "Bandwidth eff.", "course-capstone-bandwidth-eff")
        tp_options = sorted(set(TENSOR_PARALLEL_CHOICES) | {init.tensor_parallel})
        self.tensor_parallel = cls(widgets.Dropdown(options=tp_options, value=init.tensor_parallel,
                                                    description="GPUs (TP)", style=wide), "course-capstone-tp")
        link = "" if init.interconnect_bandwidth is None else _link_text(init.interconnect_bandwidth)
        self.interconnect_bandwidth = cls(widgets.Text(value=link, placeholder=LINK_PLACEHOLDER, tooltip=LINK_HELP,
                                                       description="Link bandwidth", style=wide),
                                          "course-capstone-interconnect")
        self.measure = cls(widgets.Button(description="Measure this machine", icon="tachometer",
                                          layout=widgets.Layout(width="auto"),
                                          tooltip="time copy, matmul and GEMV here (torch), then select it"),
                           "course-capstone-measure")

        big = {"font_weight": "bold", "font_size": "1.3em"}
        self.ttft = widgets.Label(style=big, _dom_classes=("course-capstone-ttft",))
        self.tpot = widgets.Label(style=big, _dom_classes=("course-capstone-tpot",))
        self.total = widgets.Label(_dom_classes=("course-capstone-total",))
        self.tps = widgets.Label(_dom_classes=("course-capstone-tps",))
        self.memory = widgets.Label(_dom_classes=("course-capstone-memory",))
        self.bounds = widgets.Label(_dom_classes=("course-capstone-bounds",))
        self.status = widgets.HTML(_dom_classes=("course-capstone-status",))
        self.plot = widgets.Output(_dom_classes=("course-capstone-plot",))

        self.state: DashboardState | None = None
        self.view: DashboardView | None = None
        self.figure = None
        row = lambda *ws: widgets.HBox(list(ws))  # noqa: E731
        super().__init__(children=[
            row(self.model, self.hardware, self.measure),
            row(self.precision, self.kv_precision),
            self.batch, self.prompt_tokens, self.new_tokens, self.cached_prefix_tokens,
            self.compute_efficiency, self.bandwidth_efficiency,
            row(self.tensor_parallel, self.interconnect_bandwidth),
            row(widgets.Label("TTFT:"), self.ttft, widgets.Label("TPOT:"), self.tpot,
                widgets.Label("total:"), self.total),
            row(widgets.Label("Throughput:"), self.tps),
            row(widgets.Label("Memory:"), self.memory),
            row(widgets.Label("Bounds:"), self.bounds),
            self.status,
            self.plot,
        ])
        self.add_class("course-capstone")
        self.prompt_tokens.observe(self._prompt_changed, names="value")
        for w in self.controls:
            w.observe(self._refresh, names="value")
        self.measure.on_click(self._measure)
        self._refresh()

    @property
    def controls(self) -> tuple:
        return (self.model, self.hardware, self.precision, self.kv_precision, self.batch, self.prompt_tokens,
                self.new_tokens, self.cached_prefix_tokens, self.compute_efficiency, self.bandwidth_efficiency,
                self.tensor_parallel, self.interconnect_bandwidth)

    def values(self) -> dict:
        """The controls' values, keyed by :class:`DashboardState` field."""
        names = [f.name for f in fields(DashboardState) if f.name != "machine"]
        values = {n: getattr(self, n).value for n in names}
        if values["kv_precision"] == _KV_AUTO:
            values["kv_precision"] = None
        return values

    def _prompt_changed(self, change) -> None:
        # the cached prefix must stay below the prompt (one new token at least produces the first output)
        self.cached_prefix_tokens.max = max(change["new"] - 1, 0)

    def _refresh(self, change=None) -> None:
        try:
            state = state_from_controls(machine=self.machine, **self.values())
        except (ValueError, TypeError) as exc:
            self.state, self.view = None, None
            for w in (self.ttft, self.tpot, self.total, self.tps, self.memory, self.bounds):
                w.value = "n/a"
            self.status.value = status_html(None, str(exc))
            return
        v = dashboard_view(state)
        self.state, self.view = state, v
        self.ttft.value, self.tpot.value, self.total.value = v.ttft_text, v.tpot_text, v.total_text
        self.tps.value, self.memory.value, self.bounds.value = v.tps_text, v.memory_text, v.bounds_text
        self.status.value = status_html(v)
        self._draw(state if v.error is None else None)

    def _draw(self, state: DashboardState | None) -> None:
        """Render the figure into the Output as a PNG display output (no capture context needed)."""
        from course_lib.lessons.plots.capstone import plot_latency_throughput

        self.figure = None if state is None else plot_latency_throughput(state)
        if self.figure is None:
            self.plot.outputs = ()
            return
        png = base64.b64encode(self.figure._repr_png_()).decode("ascii")
        title = self.figure.axes[0].get_title().replace("\n", ": ")
        self.plot.outputs = ({"output_type": "display_data", "metadata": {},
                              "data": {"image/png": png, "text/plain": f"<Figure: {title}>"}},)

    def _measure(self, button=None) -> None:
        """Measure this machine (torch imported here, on demand), then select it."""
        self.status.value = "<p>Measuring this machine (copy, matmul and GEMV timings)...</p>"
        try:
            from course_lib.measure import bench  # torch: imported only when asked for

            self.machine = bench.this_machine(bench.measure_machine(progress=False))
        except Exception as exc:
            self.status.value = status_html(None, f"measurement failed: {exc}")
            return
        if self.hardware.value == THIS_MACHINE:
            self._refresh()
        else:
            self.hardware.value = THIS_MACHINE          # triggers _refresh


def capstone_dashboard(**state_overrides) -> CapstoneDashboard:
    """The deployment dashboard; keyword arguments override :class:`DashboardState`'s defaults."""
    return CapstoneDashboard(**state_overrides)
