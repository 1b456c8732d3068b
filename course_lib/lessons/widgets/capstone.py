"""Lesson 09's deployment dashboard (also the Voila app of ``make app``).

Lessons: 09

    from course_lib.lessons.widgets.capstone import capstone_dashboard
    capstone_dashboard()                                   # Llama-3-8B on an H100 SXM, fp16, batch 1
    capstone_dashboard(hardware="h200", batch=32, precision="fp8")

The controls set a :class:`course_lib.core.capstone.DashboardState`; every output is a text of the plain
functions of :mod:`course_lib.core.app` (tested without a browser), which price it with
:mod:`course_lib.core.capstone`: the TPOT label holds ``reading(...).tpot_text`` (for a priced setting,
exactly ``capstone.tpot_text(state)``), the TTFT label ``reading(...).ttft_text``; what is missing (a link
bandwidth, a measurement, a device's FLOP/s) is said in words under them, and the figure
(``course_lib.lessons.plots.capstone_app.plot_app_curve``) is cleared while the setting is not priced.
The widget only wires controls to them.

Each slider has a number box beside it: a value typed there beyond the slider's range is set to the
nearest end and a notice says so (a slider's own readout would clamp it silently), as does the cached
prefix when a shorter prompt pulls it down.

*Serving a request rate*: the request rate, the p99 targets of TTFT and TPOT and the
chunked-prefill switch feed :func:`course_lib.core.app.serving_reading`: the continuous-batching plan,
the simulated p99 at that plan, and lesson 09's static plan as the naive baseline.

"This machine": the hardware dropdown lists ``"this-machine"``; the button *Measure this machine*
runs ``course_lib.measure.machine.this_machine(measure_machine(...))`` (torch is imported then, inside the
callback, never when the dashboard loads), selects it, renames its entry with the measured bandwidth and
lists the measured ceilings (``app.machine_text``).

In a stored notebook (or any front end without the widget) the output shows a static snapshot of the
current reading: the numbers, the status, the serving plan and the figure.

Stable CSS classes (``_dom_classes``) for the browser tests: the whole box ``course-capstone``;
controls ``course-capstone-model``, ``course-capstone-hardware`` (Dropdowns), ``course-capstone-batch``,
``course-capstone-prompt``, ``course-capstone-new-tokens``, ``course-capstone-cached``,
``course-capstone-compute-eff``, ``course-capstone-bandwidth-eff`` (sliders; their number boxes carry
the same class plus ``-box``), ``course-capstone-precision``, ``course-capstone-kv-precision``,
``course-capstone-tp``, ``course-capstone-interconnect``, ``course-capstone-engine`` (Dropdown: the floor or an
engine's profile; with an engine the two efficiency sliders are disabled, the profile's own efficiencies
apply), ``course-capstone-measure`` (button),
``course-capstone-rate``, ``course-capstone-ttft-target``, ``course-capstone-tpot-target``,
``course-capstone-chunked``; outputs ``course-capstone-ttft``, ``course-capstone-tpot``,
``course-capstone-total``, ``course-capstone-tps``, ``course-capstone-memory``, ``course-capstone-bounds``,
``course-capstone-status``, ``course-capstone-notices``, ``course-capstone-machine``, ``course-capstone-engine-text``
(what prices the times: ``Reading.engine_text``),
``course-capstone-serving`` and ``course-capstone-plot`` (the figure's Output).
"""
from __future__ import annotations

import base64
import html
import ipywidgets as widgets

from course_lib.core.app import (LINK_UNIT, Reading, ServingReading, device_word, machine_text, parse_time_field,
                                 reading, serving_reading)
from course_lib.core.capstone import TENSOR_PARALLEL_CHOICES, THIS_MACHINE, DashboardState, resolve_hardware
from course_lib.core.forecast import list_engines
from course_lib.core.hardware import get_hardware, list_hardware
from course_lib.core.models import list_models
from course_lib.core.precision import PRECISIONS
from course_lib.core.units import Quantity, format_bandwidth, format_time, parse_bandwidth
from course_lib.lessons.widgets import _html

__all__ = ["CapstoneDashboard", "capstone_dashboard", "status_html", "serving_html", "snapshot_body",
           "BATCH_RANGE", "PROMPT_RANGE", "NEW_TOKENS_RANGE", "EFFICIENCY_RANGE", "LINK_PLACEHOLDER", "LINK_HELP",
           "RATE_DEFAULT", "TTFT_TARGET_DEFAULT", "TPOT_TARGET_DEFAULT", "ENGINE_OPTIONS"]

#: (min, max, step) of the sliders, in sequences / tokens.
BATCH_RANGE = (1, 256, 1)
PROMPT_RANGE = (1, 32768, 1)
NEW_TOKENS_RANGE = (1, 8192, 1)
#: (min, max, step) of the efficiency sliders (fractions of the datasheet bandwidth / FLOP/s).
EFFICIENCY_RANGE = (0.05, 1.0, 0.01)

#: The serving controls' initial values: requests per second, and the p99 targets as the fields show them.
RATE_DEFAULT = 100.0
TTFT_TARGET_DEFAULT = "1 s"
TPOT_TARGET_DEFAULT = "50 ms"


def status_html(view, error: str | None = None) -> str:
    """The status line under the numbers: what is missing, the warnings, or an all-clear (green).

    ``view`` is a :class:`course_lib.core.app.Reading` (or None with ``error``). Green only when the setting
    is priced and nothing is missing or wrong.
    """
    if error is None and view is not None:
        error = view.problem
    if error is not None:
        return _html.error_box(error, "Cannot price this setting fully. ", cls="course-capstone-missing")
    if view.warnings:
        return _html.notes((html.escape(w) for w in view.warnings), cls="course-warning")
    return '<p style="color:#060;margin:0.2em 0">Fits in memory.</p>'


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _gpus(n: int, word: str = "GPU") -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _num(x: float) -> str:
    """A count or rate in the serving table: thousands grouped from 1,000 on, three significant digits below."""
    return f"{x:,.0f}" if abs(x) >= 1000 else Quantity(x, "number").format()


def serving_html(s: ServingReading | None, error: str | None = None) -> str:
    """The serving plan's table (HTML): continuous batching, the simulated p99, the static baseline."""
    if s is None or s.problem is not None:
        return _html.error_box(error or s.problem, "No serving plan: ", cls="course-capstone-serving-missing")
    p, sim = s.plan, s.simulated
    num = _num
    word = device_word(resolve_hardware(p.state))          # "GPU", or "device" for a CPU or unified memory
    tp = p.state.tensor_parallel
    copies = "" if tp == 1 else f" ({s.replicas:,} copies of {tp} GPUs)"
    rows = [_html.row(
        "Continuous batching", _gpus(s.gpus, word) + copies,
        f"for {num(s.arrival_rate)} requests/s: {p.sequences:,} sequences in flight per copy "
        f"({html.escape(p.binds)} stops more); steady-state TPOT {format_time(p.tpot)}, TTFT {format_time(p.ttft)}, "
        f"prefill {p.prefill_share:.0%} of the time; Little's law: {num(s.in_flight)} requests in flight "
        f"({num(s.arrival_rate)}/s × {format_time(s.e2e)} each)",
        strong=True, nowrap=True, cls="course-capstone-serving-gpus")]
    if sim is not None:
        short = not s.representative
        if s.meets_targets:
            verdict = "meets both targets in this short run" if short else "meets both targets"
        else:
            verdict = "MISSES a target: add GPUs or relax the targets"
        caveat = (f". Not representative of the steady state: {s.requests:,} requests from an empty server, while "
                  f"about {num(s.in_flight / s.replicas)} are in flight per copy there; the server never fills up, "
                  f"so the p99 is likely optimistic" if short else "")
        itl = "" if sim["itl_p99"] is None else (
            f"; ITL p99 {format_time(sim['itl_p99'])} (every gap between two tokens, {sim['itl_samples']:,} of them; "
            f"TPOT is each request's mean gap)")
        rows.append(_html.row(
            "Simulated p99", f"TTFT {format_time(sim['ttft_p99'])}, TPOT {format_time(sim['tpot_p99'])}",
            f"{verdict} (targets {format_time(s.ttft_target)} and {format_time(s.tpot_target)}); one {word}'s share, "
            f"{num(s.share_rate)} requests/s ({num(sim['arrival_rate'])}/s arrived in the simulated sample), "
            f"{s.requests:,} requests from an empty server, chunked prefill "
            f"{'on' if s.chunked_prefill else 'off'}; p50 TTFT {format_time(sim['ttft_p50'])}, mean batch "
            f"{num(sim['mean_batch'])}{itl}; the p99 rests on the {sim['p99_rests_on']} slowest of {sim['measured']:,} "
            f"requests{caveat}", strong=True, nowrap=True, cls="course-capstone-serving-p99"))
    else:
        rows.append(_html.row("Simulated p99", "not simulated", html.escape(s.sim_note or ""),
                              cls="course-capstone-serving-p99"))
    if s.cost is not None:
        c = s.cost
        energy = "" if c.joules_per_token is None else f", at most {c.joules_per_token:.3g} J per output token"
        rows.append(_html.row(
            "Cost per million tokens", f"{c.per_million_tokens:.3g} per M tokens",
            f"{_gpus(c.gpus)} at {c.gpu_hour_price:g} per GPU-hour for {num(c.tokens_per_s)} output tokens/s{energy} "
            f"({html.escape(s.price_note or '')})", nowrap=True, cls="course-capstone-serving-cost"))
    elif s.price_note:
        rows.append(_html.row("Cost per million tokens", "no price", html.escape(s.price_note),
                              cls="course-capstone-serving-cost"))
    if s.static_gpus is None:
        rows.append(_html.row("Naive baseline (static)", "none", "no static batch meets the targets",
                              cls="course-capstone-serving-static"))
    else:
        rows.append(_html.row(
            "Naive baseline (static)", _gpus(s.static_gpus, word),
            f"lesson 09's plan: batches of {s.static_batch:,} prefilled together, one every "
            f"{format_time(s.static_total)} per copy, queueing ignored: {num(s.static_over_continuous)}× the "
            f"continuous plan's {word}s", nowrap=True, cls="course-capstone-serving-static"))
    return _html.table(rows, cls="course-capstone-serving-table")


def _link_text(bandwidth: float) -> str:
    """The link field's text for a bandwidth in bytes/s; it parses back to exactly the same number."""
    text = format_bandwidth(bandwidth, digits=15)
    return text if parse_bandwidth(text) == bandwidth else f"{float(bandwidth)!r} B/s"


def _hardware_label(name: str, machine=None) -> str:
    if name == THIS_MACHINE:
        if machine is None:
            return "this machine (measure first)"
        bw = format_bandwidth(machine.bandwidth)
        return f"{machine.display or 'this machine'} ({machine.memory_type}, {bw} measured)"
    hw = get_hardware(name)
    return f"{hw.display or name} ({hw.memory_type}, {format_bandwidth(hw.bandwidth)})"


#: The link field's placeholder and tooltip: the all-reduce formula wants the bandwidth of each GPU's link in
#: ONE direction, while interconnect datasheets often add both directions together.
LINK_PLACEHOLDER = "GB/s per GPU, per direction"
LINK_HELP = (f"Bandwidth of each GPU's link in one direction, e.g. 450 (read as {LINK_UNIT}) or '450 GB/s'. "
             "Datasheets often quote both directions added together (an H100 SXM's NVLink '900 GB/s' is 450 GB/s "
             "each way): halve such a figure.")

#: the DashboardState fields the dashboard has a control for (the others keep their defaults)
_CONTROL_FIELDS = ("model", "hardware", "precision", "kv_precision", "batch", "prompt_tokens", "new_tokens",
                   "cached_prefix_tokens", "compute_efficiency", "bandwidth_efficiency", "tensor_parallel",
                   "interconnect_bandwidth", "engine")

#: the engine dropdown's value for "no engine: the floor" (engine=None)
_FLOOR = "floor"
#: the engine dropdown's choices: the floor, then each engine profile
ENGINE_OPTIONS = [("none: the floor", _FLOOR)] + [(f"{e} (profile)", e) for e in list_engines()]

#: the KV-precision dropdown's value for "same rule as the estimator" (kv_precision=None)
_KV_AUTO = "auto"


def _png_output(fig) -> dict:
    png = base64.b64encode(fig._repr_png_()).decode("ascii")
    title = fig._suptitle.get_text().split("\n")[0] if fig._suptitle else ""
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": png, "text/plain": f"<Figure: {title}>"}}


def snapshot_body(dash: "CapstoneDashboard") -> str:
    """The static snapshot's body (HTML): the readings, the status and notices, the serving plan, the figure."""
    rows = [_html.row(label, w.value, strong=True, escape=True) for label, w in (
        ("TTFT", dash.ttft), ("TPOT", dash.tpot), ("Total", dash.total), ("Throughput", dash.tps),
        ("Memory", dash.memory), ("Bounds", dash.bounds))]
    parts = [_html.table(rows, cls="course-capstone-snapshot"), dash.engine_line.value, dash.status.value,
             dash.notices.value,
             dash.machine_line.value, "<p><b>Serving a request rate</b></p>", dash.serving.value]
    if dash.figure is not None and dash.plot.outputs:
        png = dash.plot.outputs[0]["data"]["image/png"]          # the figure as drawn, base64
        parts.append(f'<img alt="latency and throughput over the batch" src="data:image/png;base64,{png}"/>')
    return "\n".join(p for p in parts if p)


class CapstoneDashboard(_html.Snapshot, widgets.VBox):
    """The widget returned by :func:`capstone_dashboard`; controls and outputs are attributes.

    ``state`` is the current :class:`DashboardState` (``None`` while the controls do not make one, e.g.
    tensor parallelism without a link bandwidth), ``reading`` the latest :class:`course_lib.core.app.Reading`,
    ``serving_plan`` the latest :class:`course_lib.core.app.ServingReading`, ``figure`` the latest figure
    (``None`` when the setting is not priced), ``machine`` the measured spec of this machine.
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
        lay = widgets.Layout(width="30em")

        def cls(w, name):
            w.add_class(name)
            return w

        self.model = cls(widgets.Dropdown(options=list_models(), value=init.model, description="Model",
                                          style=wide), "course-capstone-model")
        self.hardware = cls(widgets.Dropdown(options=self._hardware_options(), value=init.hardware,
                                             description="Hardware", style=wide, layout=widgets.Layout(width="36em")),
                            "course-capstone-hardware")
        self.precision = cls(widgets.Dropdown(options=list(PRECISIONS), value=init.precision,
                                              description="Weights", style=wide), "course-capstone-precision")
        # ipywidgets reads a Dropdown value of None as "nothing selected": the default gets a sentinel
        self.kv_precision = cls(widgets.Dropdown(options=[("as the weights (fp16 for integer formats)", _KV_AUTO)]
                                                 + [(p, p) for p in PRECISIONS],
                                                 value=_KV_AUTO if init.kv_precision is None else init.kv_precision,
                                                 description="KV cache", style=wide,
                                                 layout=widgets.Layout(width="30em")), "course-capstone-kv-precision")

        self.engine = cls(widgets.Dropdown(options=ENGINE_OPTIONS, value=init.engine or _FLOOR,
                                           description="Engine", style=wide, layout=widgets.Layout(width="30em"),
                                           tooltip="the floor, or an engine's profile fitted to published "
                                                   "measurements (its own efficiencies replace the sliders')"),
                          "course-capstone-engine")

        self._boxes: dict[str, widgets.Widget] = {}
        self._notes: dict[str, str] = {}
        self._labels: dict[str, str] = {}

        def slider(name, kind, box_kind, value, lo, hi, step, label, css):
            # continuous_update=False: recompute (and redraw) when the handle is released, not on every pixel.
            # readout=False: the number box beside it shows the value and takes typed ones (the slider's own
            # readout would clamp a typed value silently).
            s = cls(kind(value=value, min=lo, max=hi, step=step, description=label, style=wide, layout=lay,
                         readout=False, continuous_update=False), css)
            b = cls(box_kind(value=value, layout=widgets.Layout(width="7em")), css + "-box")
            self._boxes[name], self._labels[name] = b, label
            b.observe(lambda ch, n=name: self._typed(n, ch), names="value")
            s.observe(lambda ch, n=name: self._slid(n, ch), names="value")
            return s

        self.batch = slider("batch", widgets.IntSlider, widgets.IntText, init.batch, *BATCH_RANGE, "Batch",
                            "course-capstone-batch")
        self.prompt_tokens = slider("prompt_tokens", widgets.IntSlider, widgets.IntText, init.prompt_tokens,
                                    *PROMPT_RANGE, "Prompt tokens", "course-capstone-prompt")
        self.new_tokens = slider("new_tokens", widgets.IntSlider, widgets.IntText, init.new_tokens,
                                 *NEW_TOKENS_RANGE, "New tokens", "course-capstone-new-tokens")
        self.cached_prefix_tokens = slider("cached_prefix_tokens", widgets.IntSlider, widgets.IntText,
                                           init.cached_prefix_tokens, 0, max(init.prompt_tokens - 1, 0), 1,
                                           "Cached prefix", "course-capstone-cached")
        self.compute_efficiency = slider("compute_efficiency", widgets.FloatSlider, widgets.FloatText,
                                         init.compute_efficiency, *EFFICIENCY_RANGE, "Compute eff.",
                                         "course-capstone-compute-eff")
        self.bandwidth_efficiency = slider("bandwidth_efficiency", widgets.FloatSlider, widgets.FloatText,
                                           init.bandwidth_efficiency, *EFFICIENCY_RANGE, "Bandwidth eff.",
                                           "course-capstone-bandwidth-eff")
        tp_options = sorted(set(TENSOR_PARALLEL_CHOICES) | {init.tensor_parallel})
        self.tensor_parallel = cls(widgets.Dropdown(options=tp_options, value=init.tensor_parallel,
                                                    description="GPUs (TP)", style=wide), "course-capstone-tp")
        link = "" if init.interconnect_bandwidth is None else _link_text(init.interconnect_bandwidth)
        self.interconnect_bandwidth = cls(widgets.Text(value=link, placeholder=LINK_PLACEHOLDER, tooltip=LINK_HELP,
                                                       description="Link bandwidth", style=wide,
                                                       layout=widgets.Layout(width="30em"),
                                                       continuous_update=False), "course-capstone-interconnect")
        self.measure = cls(widgets.Button(description="Measure this machine", layout=widgets.Layout(width="auto"),
                                          tooltip="time copy, matmul and GEMV here (torch), then select it"),
                           "course-capstone-measure")
        # serving a request rate
        self.arrival_rate = cls(widgets.FloatText(value=RATE_DEFAULT, description="Requests/s", style=wide,
                                                  tooltip="requests arriving per second (Poisson)"),
                                "course-capstone-rate")
        self.ttft_target = cls(widgets.Text(value=TTFT_TARGET_DEFAULT, description="p99 TTFT target", style=wide,
                                            continuous_update=False, placeholder="ms, e.g. 800 or '1 s'"),
                               "course-capstone-ttft-target")
        self.tpot_target = cls(widgets.Text(value=TPOT_TARGET_DEFAULT, description="p99 TPOT target", style=wide,
                                            continuous_update=False, placeholder="ms, e.g. 50 or '0.05 s'"),
                               "course-capstone-tpot-target")
        self.gpu_hour_price = cls(widgets.Text(value="", description="GPU-hour price", style=wide,
                                               placeholder="per GPU-hour (empty: the example price)",
                                               continuous_update=False),
                                  "course-capstone-price")
        self.chunked_prefill = cls(widgets.Checkbox(value=True, description="Chunked prefill", indent=False,
                                                    tooltip="split long prompts into chunks that ride along with "
                                                            "the decode steps (Sarathi-Serve)"),
                                   "course-capstone-chunked")

        big = {"font_weight": "bold", "font_size": "1.3em"}
        self.ttft = widgets.Label(style=big, _dom_classes=("course-capstone-ttft",))
        self.tpot = widgets.Label(style=big, _dom_classes=("course-capstone-tpot",))
        self.total = widgets.Label(_dom_classes=("course-capstone-total",))
        self.tps = widgets.Label(_dom_classes=("course-capstone-tps",))
        self.memory = widgets.Label(_dom_classes=("course-capstone-memory",))
        self.bounds = widgets.Label(_dom_classes=("course-capstone-bounds",))
        self.status = widgets.HTML(_dom_classes=("course-capstone-status",))
        self.notices = widgets.HTML(_dom_classes=("course-capstone-notices",))
        self.machine_line = widgets.HTML(machine_text(self.machine), _dom_classes=("course-capstone-machine",))
        self.engine_line = widgets.HTML(_dom_classes=("course-capstone-engine-text",))
        self.serving = widgets.HTML(_dom_classes=("course-capstone-serving",))
        self.plot = widgets.Output(_dom_classes=("course-capstone-plot",))

        self.state: DashboardState | None = None
        self.reading: Reading | None = None
        self.serving_plan: ServingReading | None = None
        self.figure = None
        row = lambda *ws: widgets.HBox(list(ws))  # noqa: E731
        pair = lambda name: row(getattr(self, name), self._boxes[name])  # noqa: E731
        super().__init__(children=[
            row(self.model, self.hardware, self.measure),
            self.machine_line,
            row(self.precision, self.kv_precision),
            self.engine,
            pair("batch"), pair("prompt_tokens"), pair("new_tokens"), pair("cached_prefix_tokens"),
            pair("compute_efficiency"), pair("bandwidth_efficiency"),
            row(self.tensor_parallel, self.interconnect_bandwidth),
            self.notices,
            row(widgets.Label("TTFT:"), self.ttft, widgets.Label("TPOT:"), self.tpot,
                widgets.Label("total:"), self.total),
            row(widgets.Label("Throughput:"), self.tps),
            row(widgets.Label("Memory:"), self.memory),
            row(widgets.Label("Bounds:"), self.bounds),
            self.engine_line,
            self.status,
            widgets.HTML("<b>Serving a request rate</b> (continuous batching; the static plan as the naive "
                         "baseline)"),
            row(self.arrival_rate, self.chunked_prefill),
            row(self.ttft_target, self.tpot_target),
            row(self.gpu_hour_price),
            self.serving,
            self.plot,
        ])
        self.add_class("course-capstone")
        self.prompt_tokens.observe(self._prompt_changed, names="value")
        self.engine.observe(self._engine_changed, names="value")
        self._engine_changed()
        for w in self.controls:
            w.observe(self._refresh, names="value")
        for w in self.serving_controls:
            w.observe(self._refresh_serving, names="value")
        self.measure.on_click(self._measure)
        self._refresh()

    # --- controls ----------------------------------------------------------------------------------
    @property
    def controls(self) -> tuple:
        return (self.model, self.hardware, self.precision, self.kv_precision, self.batch, self.prompt_tokens,
                self.new_tokens, self.cached_prefix_tokens, self.compute_efficiency, self.bandwidth_efficiency,
                self.tensor_parallel, self.interconnect_bandwidth, self.engine)

    @property
    def serving_controls(self) -> tuple:
        return (self.arrival_rate, self.ttft_target, self.tpot_target, self.chunked_prefill, self.gpu_hour_price)

    def box(self, name: str) -> widgets.Widget:
        """The number box beside the slider of field ``name`` (e.g. ``"batch"``)."""
        return self._boxes[name]

    def values(self) -> dict:
        """The controls' values, keyed by :class:`DashboardState` field (the link as the field's text)."""
        values = {n: getattr(self, n).value for n in _CONTROL_FIELDS}
        if values["kv_precision"] == _KV_AUTO:
            values["kv_precision"] = None
        if values["engine"] == _FLOOR:
            values["engine"] = None
        else:       # the profile's fitted efficiencies replace the sliders' (disabled meanwhile)
            values["compute_efficiency"] = values["bandwidth_efficiency"] = 1.0
        return values

    def describe_controls(self) -> str:
        v = self.values()
        return (f"{v['model']} on {_hardware_label(v['hardware'], self.machine)}, {v['precision']} weights, batch "
                f"{v['batch']:,}, prompt {v['prompt_tokens']:,} (cached {v['cached_prefix_tokens']:,}), "
                f"{v['new_tokens']:,} new tokens, {v['tensor_parallel']} GPU(s), "
                + ("the floor" if v["engine"] is None else f"the {v['engine']} profile"))

    def _hardware_options(self) -> list:
        return [(_hardware_label(h), h) for h in list_hardware()] + [(_hardware_label(THIS_MACHINE, self.machine),
                                                                      THIS_MACHINE)]

    def _show_notes(self) -> None:
        self.notices.value = _html.notes((html.escape(t) for t in self._notes.values()), cls="course-capstone-notice")

    def _typed(self, name: str, change) -> None:
        """A number typed in the box beside a slider: clamp it to the slider's range and say so."""
        s, b = getattr(self, name), self._boxes[name]
        v = change["new"]
        if v is None:
            return
        clamped = min(max(v, s.min), s.max)
        if clamped != v:
            why = (f" (it must stay below the prompt, {self.prompt_tokens.value:,} tokens)"
                   if name == "cached_prefix_tokens" and v > s.max else "")
            note = (f"{self._labels[name]}: {v:,} is outside the slider's range {s.min:,} to {s.max:,}{why}; "
                    f"set to {clamped:,}.")
            self._sync = name
            try:
                b.value = clamped
                s.value = clamped
            finally:
                self._sync = None
            self._notes[name] = note
            self._show_notes()
            return
        if self._sync == name:
            return
        self._notes.pop(name, None)
        self._show_notes()
        self._sync = name
        try:
            s.value = v
        finally:
            self._sync = None

    _sync: str | None = None

    def _slid(self, name: str, change) -> None:
        """The slider moved (by hand, or pulled by its range): the box follows, and an old notice goes."""
        if self._sync == name:
            return
        self._notes.pop(name, None)
        self._show_notes()
        self._sync = name
        try:
            self._boxes[name].value = change["new"]
        finally:
            self._sync = None

    def _engine_changed(self, change=None) -> None:
        """An engine's profile has its own efficiencies: the sliders (and their boxes) are disabled with one."""
        on = self.engine.value != _FLOOR
        for name in ("compute_efficiency", "bandwidth_efficiency"):
            getattr(self, name).disabled = self._boxes[name].disabled = on

    def _prompt_changed(self, change) -> None:
        # the cached prefix must stay below the prompt (one new token at least produces the first output)
        cached = self.cached_prefix_tokens.value
        new_max = max(change["new"] - 1, 0)
        self.cached_prefix_tokens.max = new_max
        if cached > new_max:
            self._notes["cached_prefix_tokens"] = (f"Cached prefix lowered from {cached:,} to {new_max:,}: it must "
                                                   f"stay below the prompt ({change['new']:,} tokens).")
            self._show_notes()

    # --- outputs -----------------------------------------------------------------------------------
    def _refresh(self, change=None) -> None:
        r = reading(self.values(), self.machine)
        self.reading, self.state = r, r.state
        self.ttft.value, self.tpot.value, self.total.value = r.ttft_text, r.tpot_text, r.total_text
        self.tps.value, self.memory.value, self.bounds.value = r.tps_text, r.memory_text, r.bounds_text
        self.status.value = status_html(r)
        self.engine_line.value = f"<p>{html.escape(r.engine_text)}</p>" if r.engine_text else ""
        self._draw(r.state if r.priced else None)
        self._refresh_serving()

    def _refresh_serving(self, change=None) -> None:
        self.serving_plan = None
        r = self.reading
        if r is None or r.state is None or not (r.priced or r.floor):
            self.serving.value = serving_html(None, "price the setting above first (see its message).")
            return
        if not r.priced:
            self.serving.value = serving_html(None, "the serving plan needs the device's compute speed too "
                                                    "(the prefill is compute-bound).")
            return
        try:
            ttft = parse_time_field(self.ttft_target.value, "ms", "p99 TTFT target")  # bare numbers: ms, as TPOT
            tpot = parse_time_field(self.tpot_target.value, "ms", "p99 TPOT target")
            price_text = self.gpu_hour_price.value.strip().lstrip("$").replace(",", "")
            try:
                price = float(price_text) if price_text else None
            except ValueError:
                raise ValueError(f"'GPU-hour price' must be a number (per GPU-hour), got {self.gpu_hour_price.value!r}")
            s = serving_reading(r.state, self.arrival_rate.value, ttft, tpot, bool(self.chunked_prefill.value),
                                gpu_hour_price=price)
        except (ValueError, TypeError) as exc:
            self.serving.value = serving_html(None, str(exc).replace("arrival_rate", "'Requests/s'")
                                              .replace("gpu_hour_price", "'GPU-hour price'"))
            return
        self.serving_plan = s
        self.serving.value = serving_html(s)

    def _draw(self, state: DashboardState | None) -> None:
        """Render the figure into the Output as a PNG display output; clear it when nothing is priced."""
        from course_lib.lessons.plots.capstone_app import plot_app_curve

        self.figure = None if state is None else plot_app_curve(state)
        self.plot.outputs = () if self.figure is None else (_png_output(self.figure),)

    def _measure(self, button=None) -> None:
        """Measure this machine (torch imported here, on demand), then select it."""
        self.status.value = "<p>Measuring this machine (copy, matmul and GEMV timings)...</p>"
        try:
            from course_lib.measure import machine  # torch: imported only when asked for
            from course_lib.measure.engines.llamacpp import cpu_fast_compute

            # on a CPU: fp16 and the quantized formats at the rate the CPU runs fast (fp32/bf16), not torch's fp16
            self.machine = cpu_fast_compute(machine.this_machine(machine.measure_machine(progress=False)))
        except Exception as exc:
            self.status.value = status_html(None, f"The measurement failed: {exc}")
            return
        self.machine_line.value = f"<p>{html.escape(machine_text(self.machine))}</p>"
        with self.hold_trait_notifications():
            current = self.hardware.value
            self.hardware.unobserve(self._refresh, names="value")
            self.hardware.options = self._hardware_options()
            self.hardware.value = current
            self.hardware.observe(self._refresh, names="value")
        if self.hardware.value == THIS_MACHINE:
            self._refresh()
        else:
            self.hardware.value = THIS_MACHINE          # triggers _refresh

    # --- the stored notebook -----------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"capstone dashboard: {self.describe_controls()}"

    def snapshot_body(self) -> str:
        return snapshot_body(self)

    def snapshot_text(self) -> str:
        return f"{self!r} (an interactive widget: run the cell to use it)"


def capstone_dashboard(**state_overrides) -> CapstoneDashboard:
    """The deployment dashboard; keyword arguments override :class:`DashboardState`'s defaults."""
    return CapstoneDashboard(**state_overrides)
