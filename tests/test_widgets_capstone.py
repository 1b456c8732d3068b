"""The ``make app`` planner (``course_lib.lessons.widgets.capstone`` over ``course_lib.core.app``), driven in-process.

One test per finding of issue 17's app section, then issue 16's serving controls:

* a bare number in "Link bandwidth" is read in the field's unit (GB/s), never as bytes/s; a link so slow
  that the all-reduces outweigh the GPUs' work turns the status red instead of a green "Fits in memory";
* tensor parallelism without a link says in words what is missing (no Python parameter name) and clears
  the figure; an Apple device shows its decode floor and says what is missing, with no code advice;
* after "Measure this machine" the dropdown names the measured device and the measured ceilings are listed;
  a CPU's memory is not "per GPU";
* the figure plots against the batch, so points never stack on one x; typed values beyond a slider's range
  are set to its end with a notice (batch 100000 -> 256, cached prefix 1536 -> 999);
* the serving plan (continuous batching, simulated p99, static baseline) comes from
  ``app.serving_reading`` and its simulation is bounded;
* the stored output is a static snapshot, not the widget tree's repr; the CSS classes the browser test uses
  are stable; loading the dashboard imports no torch.

Relations only (no timing): every number is compared with what the core computes for the same setting.
"""
from __future__ import annotations

import html
import math
import os
import subprocess
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import estimate
from course_lib.core import app as A
from course_lib.core import capstone as D
from course_lib.core.hardware import custom_hardware, get_hardware
from course_lib.core.units import format_bandwidth, format_time
from course_lib.core.validation import MAX_QUANTITY

widgets = pytest.importorskip("ipywidgets")

from course_lib.lessons.plots import label_has_unit  # noqa: E402
from course_lib.lessons.plots.capstone_app import (APP_TITLE, BATCH_LABEL, LATENCY_LABEL,  # noqa: E402
                                                   THROUGHPUT_LABEL, plot_app_curve)
from course_lib.lessons.widgets.capstone import (BATCH_RANGE, PROMPT_RANGE, CapstoneDashboard,  # noqa: E402
                                                 capstone_dashboard, serving_html, status_html)


@pytest.fixture(autouse=True)
def _quick_png(monkeypatch):
    """Rendering the PNG (about a second of matplotlib) is not what these tests check: a stand-in byte string
    (the figure itself, its data and its labels, is still built and checked)."""
    from course_lib.lessons.plots._base import CourseFigure

    monkeypatch.setattr(CourseFigure, "_repr_png_", lambda self: b"\x89PNG stand-in")


@pytest.fixture
def dash() -> CapstoneDashboard:
    return capstone_dashboard()


def _assert_priced(dash: CapstoneDashboard, state: D.DashboardState):
    """The labels hold exactly the core's texts for ``state``, and the figure is drawn."""
    assert dash.state == state
    v = A.state_reading(state)
    assert (dash.ttft.value, dash.tpot.value, dash.total.value, dash.tps.value, dash.bounds.value) == (
        A.ttft_text(state), A.tpot_text(state), v.total_text, v.tps_text, v.bounds_text)
    assert dash.figure is not None and len(dash.plot.outputs) == 1


# --------------------------------------------------------------------------------------------------
# Link bandwidth: a bare number is GB/s
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [("450", 450e9), ("450 GB/s", 450e9), (" 450 ", 450e9),
                                            ("3.6 Tbit/s", 450e9), ("0.45 TB/s", 450e9), ("", None), ("  ", None)])
def test_link_field_reads_bare_numbers_in_its_unit(text, expected):
    assert A.LINK_UNIT == "GB/s"
    assert A.parse_link_bandwidth(text) == pytest.approx(expected) if expected else A.parse_link_bandwidth(text) is None


@settings(max_examples=40, deadline=None)
@given(st.floats(1e-3, 1e6, allow_nan=False))
def test_a_bare_number_equals_the_same_number_with_gb_per_s(x):
    assert A.parse_link_bandwidth(repr(x)) == A.parse_link_bandwidth(f"{x!r} GB/s")


@pytest.mark.parametrize("text", ["fast", "GB/s", "-450", "0"])
def test_an_unreadable_link_says_what_to_type(text):
    with pytest.raises(ValueError, match="Link bandwidth") as info:
        A.parse_link_bandwidth(text)
    assert "GB/s" in str(info.value) and "interconnect_bandwidth" not in str(info.value)


def test_typing_450_prices_450_gb_per_s(dash):
    dash.model.value = "llama-2-70b"
    dash.tensor_parallel.value = 4
    dash.interconnect_bandwidth.value = "450"
    s = D.DashboardState(model="llama-2-70b", tensor_parallel=4, interconnect_bandwidth=450e9)
    _assert_priced(dash, s)
    assert dash.reading.green and "Fits in memory" in dash.status.value


def test_a_link_slower_than_the_gpus_is_never_green(dash):
    """450 B/s (typed with its unit) makes the all-reduces dominate: a red warning, not 'Fits in memory'."""
    dash.model.value = "llama-2-70b"
    dash.tensor_parallel.value = 4
    dash.interconnect_bandwidth.value = "450 B/s"
    r = dash.reading
    assert r.priced and not r.green and r.result.allreduce_decode > r.result.estimate.tpot
    assert "Fits in memory" not in dash.status.value and "link dominates" in dash.status.value.lower()


# --------------------------------------------------------------------------------------------------
# Tensor parallelism without a link; Apple devices; this machine
# --------------------------------------------------------------------------------------------------
def test_tensor_parallel_without_link_says_what_is_missing_and_clears_the_plot(dash):
    assert dash.figure is not None and dash.plot.outputs
    dash.model.value = "llama-2-70b"
    dash.tensor_parallel.value = 4
    r = dash.reading
    assert dash.state is None and not r.priced and r.problem.startswith("Missing: the link bandwidth")
    assert dash.ttft.value == dash.tpot.value == "needs the link bandwidth"
    assert "interconnect_bandwidth" not in dash.status.value and "'Link bandwidth'" in dash.status.value.replace(
        "&#x27;", "'")
    assert dash.figure is None and dash.plot.outputs == ()
    assert "course-capstone-serving-missing" in dash.serving.value


@pytest.mark.parametrize("device", ["h100-sxm", "l40s", "mi300x", "m3-max"])
def test_the_missing_link_message_quotes_the_catalog(device):
    hw = get_hardware(device)
    r = A.reading(dict(hardware=device, tensor_parallel=2))
    assert r.problem.startswith("Missing: the link bandwidth") and A.link_hint(device) in r.problem
    if hw.scale_up is not None:
        typed = format_bandwidth(hw.scale_up.per_direction_bandwidth, unit="GB/s")
        assert f"type {typed!r}" in r.problem
        assert A.parse_link_bandwidth(typed) == pytest.approx(hw.scale_up.per_direction_bandwidth)
    else:
        assert "no GPU-to-GPU link" in r.problem or "no interconnect" in r.problem


@pytest.mark.parametrize("device", ["m3-max", "m2-ultra"])
def test_apple_devices_are_priced_from_a_marked_effective_rate(dash, device):
    """Apple publishes no FLOP/s: the catalog's effective rate (derived from a sourced measurement) prices the
    prefill, the dashboard shows the full estimate and says the rate is effective, not a datasheet peak."""
    dash.hardware.value = device
    hw = get_hardware(device)
    assert hw.rate_is_effective("fp16") and "fp16" not in hw.peak_flops
    e = estimate("llama-3-8b", hw, 1024, 256)
    assert dash.tpot.value == format_time(e.tpot) and dash.ttft.value == format_time(e.ttft)
    # decode stays memory-bound: the effective rate only prices what compute sets
    floor = estimate("llama-3-8b", hw.with_peak("fp16", MAX_QUANTITY), 1024, 256)
    assert e.decode_bound == "memory" and e.tpot == pytest.approx(floor.tpot, rel=0.05)
    status = dash.status.value.replace("&#x27;", "'")
    assert "effective rate" in status and "not a datasheet peak" in status and "with_peak" not in status
    assert "per GPU" not in dash.memory.value and "of the device's memory" in dash.memory.value.replace("&#x27;", "'")


def test_unmeasured_machine_says_to_press_the_button(dash):
    dash.hardware.value = "this-machine"
    assert dash.tpot.value == "measure first" and "Measure this machine" in dash.status.value
    assert dash.figure is None


def _fake_bench(monkeypatch, spec):
    import course_lib.measure

    calls = []
    fake = types.SimpleNamespace(measure_machine=lambda **kw: calls.append(kw) or "m",
                                 this_machine=lambda m: spec if m == "m" else None)
    monkeypatch.setitem(sys.modules, "course_lib.measure.machine", fake)
    monkeypatch.setattr(course_lib.measure, "machine", fake, raising=False)
    return calls


def test_measuring_names_the_machine_and_lists_its_ceilings(monkeypatch, dash):
    spec = custom_hardware("this-machine", bandwidth=40e9, peak_flops={"fp32": 1e12, "fp16": 2e12}, capacity=64e9,
                           memory_type="DRAM", display="this machine (Test CPU)",
                           measured={"copy_GBps": 30.0, "bandwidth_from": "GEMV 4096x4096 fp32, rotated",
                                     "threads": 8})
    before = dict((v, k) for k, v in dash.hardware.options)["this-machine"]
    assert "measure first" in before
    calls = _fake_bench(monkeypatch, spec)
    assert calls == []
    dash.measure.click()
    assert calls == [{"progress": False}] and dash.machine is spec and dash.hardware.value == "this-machine"
    label = dict((v, k) for k, v in dash.hardware.options)["this-machine"]
    assert "measure first" not in label and "Test CPU" in label and "40 GB/s measured" in label
    assert dash.machine_line.value and A.machine_text(spec) in dash.machine_line.value.replace("&#x27;", "'")
    for part in ("40 GB/s", "fp16 matmul 2 TFLOP/s", "fp32 matmul 1 TFLOP/s", "copy 30 GB/s", "64 GB"):
        assert part in dash.machine_line.value
    s = D.DashboardState(hardware="this-machine", machine=spec)
    _assert_priced(dash, s)
    assert "per GPU" not in dash.memory.value and "of the device" in dash.memory.value


def test_a_failed_measurement_is_shown_not_raised(monkeypatch, dash):
    import course_lib.measure

    def boom(**kw):
        raise RuntimeError("no timer")

    fake = types.SimpleNamespace(measure_machine=boom, this_machine=None)
    monkeypatch.setitem(sys.modules, "course_lib.measure.machine", fake)
    monkeypatch.setattr(course_lib.measure, "machine", fake, raising=False)
    dash.measure.click()
    assert "measurement failed: no timer" in dash.status.value and dash.machine is None
    assert dash.state == D.DashboardState()


def test_gpu_memory_is_per_gpu():
    assert A.is_gpu(get_hardware("h100-sxm")) and not A.is_gpu(get_hardware("m3-max"))
    assert A.memory_words(get_hardware("h200")) == "per GPU"


# --------------------------------------------------------------------------------------------------
# Sliders: typed values beyond the range are set to its end, and said so
# --------------------------------------------------------------------------------------------------
def test_a_batch_beyond_the_slider_is_clamped_with_a_notice(dash):
    dash.box("batch").value = 100000
    assert dash.batch.value == dash.box("batch").value == BATCH_RANGE[1]
    assert "100,000" in dash.notices.value and f"set to {BATCH_RANGE[1]}" in dash.notices.value
    _assert_priced(dash, D.DashboardState(batch=BATCH_RANGE[1]))
    dash.box("batch").value = 8                      # an in-range value clears the notice
    assert dash.batch.value == 8 and dash.notices.value == ""


def test_a_cached_prefix_beyond_the_prompt_is_clamped_with_a_notice(dash):
    dash.box("prompt_tokens").value = 1000
    dash.box("cached_prefix_tokens").value = 1536
    assert dash.cached_prefix_tokens.value == 999 and dash.box("cached_prefix_tokens").value == 999
    assert "1,536" in dash.notices.value and "999" in dash.notices.value and "below the prompt" in dash.notices.value
    _assert_priced(dash, D.DashboardState(prompt_tokens=1000, cached_prefix_tokens=999))


def test_a_shorter_prompt_pulls_the_cached_prefix_down_with_a_notice(dash):
    dash.prompt_tokens.value = 4000
    dash.cached_prefix_tokens.value = 3000
    dash.prompt_tokens.value = 500
    assert dash.cached_prefix_tokens.value == 499 == dash.box("cached_prefix_tokens").value
    assert "lowered from 3,000 to 499" in dash.notices.value
    _assert_priced(dash, D.DashboardState(prompt_tokens=500, cached_prefix_tokens=499))


def test_a_slider_and_its_box_agree(dash):
    dash.batch.value = 64
    assert dash.box("batch").value == 64
    dash.box("prompt_tokens").value = PROMPT_RANGE[0]
    assert dash.prompt_tokens.value == PROMPT_RANGE[0]
    _assert_priced(dash, D.DashboardState(batch=64, prompt_tokens=PROMPT_RANGE[0]))


@pytest.mark.parametrize("control, value, field", [
    ("prompt_tokens", 8000, "prompt_tokens"), ("new_tokens", 4000, "new_tokens"), ("model", "mistral-7b", "model"),
    ("hardware", "h200", "hardware"), ("precision", "fp8", "precision"), ("kv_precision", "fp8", "kv_precision"),
    ("compute_efficiency", 0.5, "compute_efficiency"),
])
def test_setting_a_control_shows_the_new_states_texts(dash, control, value, field):
    getattr(dash, control).value = value
    _assert_priced(dash, D.DashboardState().replace(**{field: value}))


# --------------------------------------------------------------------------------------------------
# The figure
# --------------------------------------------------------------------------------------------------
def test_figure_plots_against_the_batch_so_points_never_stack():
    s = D.DashboardState(hardware="l40s", prompt_tokens=32000, new_tokens=16, batch=2)  # prefill dominates
    fig = plot_app_curve(s)
    left, right = fig.axes
    assert fig._suptitle.get_text().startswith(APP_TITLE)
    assert all(len(line) <= 100 for line in fig._suptitle.get_text().splitlines())
    for ax, ylabel in ((left, LATENCY_LABEL), (right, THROUGHPUT_LABEL)):
        assert ax.get_xlabel() == BATCH_LABEL and ax.get_ylabel() == ylabel and label_has_unit(ylabel)
    pts = D.latency_throughput_curve(s)
    fit = [p for p in pts if p.fits is not False]
    lines = {ln.get_label(): ln for ln in left.get_lines()}
    assert list(lines["TPOT"].get_xdata()) == [p.batch for p in fit]
    assert list(lines["TPOT"].get_ydata()) == pytest.approx([p.tpot * 1e3 for p in fit], rel=1e-12)
    assert list(lines["TTFT"].get_ydata()) == pytest.approx([p.ttft * 1e3 for p in fit], rel=1e-12)
    xs = list(lines["TPOT"].get_xdata())
    assert len(set(xs)) == len(xs) > 1
    # the aggregate throughput hardly moves here: plotted against it, the points would stack on one x
    tps = [p.tps_aggregate for p in fit]
    assert (max(tps) - min(tps)) / max(tps) < 0.25


# --------------------------------------------------------------------------------------------------
# Serving a request rate (issue 16)
# --------------------------------------------------------------------------------------------------
def test_the_serving_plan_is_the_cores(dash):
    s = A.serving_reading(D.DashboardState(), dash.arrival_rate.value, 1.0, 0.05, True)
    got = dash.serving_plan
    assert got is not None and (got.gpus, got.static_gpus, got.requests) == (s.gpus, s.static_gpus, s.requests)
    assert got.simulated == s.simulated
    assert dash.serving.value == serving_html(s)
    assert s.plan.sequences >= 1 and s.gpus >= 1 and s.meets_targets is not None
    assert s.static_gpus >= s.gpus          # the naive baseline never needs fewer GPUs here
    assert 1 <= s.requests <= A.SIM_MAX_REQUESTS
    # Little's law: rate x e2e requests in flight, C per copy of the model
    assert s.in_flight == pytest.approx(s.arrival_rate * (s.plan.ttft + (256 - 1) * s.plan.tpot), rel=1e-12)
    assert s.gpus == math.ceil(s.in_flight / s.plan.sequences)
    assert s.plan == D.continuous_plan(D.DashboardState(), 1, tpot_budget=0.05, ttft_budget=1.0)


def test_serving_controls_feed_the_plan(monkeypatch, dash):
    seen = []
    real = A.serving.simulate

    def spy(*args, **kw):
        seen.append((args, kw))
        return real(*args, **kw)

    monkeypatch.setattr(A.serving, "simulate", spy)
    dash.chunked_prefill.value = False
    dash.tpot_target.value = "30"             # a bare number is ms
    dash.ttft_target.value = "800 ms"
    dash.arrival_rate.value = 50.0
    args, kw = seen[-1]
    assert kw["chunked_prefill"] is False and kw["max_work"] <= A.SIM_MAX_WORK
    assert kw["requests"] <= A.SIM_MAX_REQUESTS and kw["max_batch"] == dash.serving_plan.plan.sequences
    assert dash.serving_plan.tpot_target == pytest.approx(0.03) and dash.serving_plan.ttft_target == pytest.approx(0.8)
    assert args[2] == pytest.approx(50.0 / dash.serving_plan.replicas)   # one GPU's share of the rate
    assert "chunked prefill off" in dash.serving.value


def test_bad_serving_input_is_said_in_words(dash):
    dash.tpot_target.value = "soon"
    assert "p99 TPOT target" in dash.serving.value and "course-error" in dash.serving.value
    dash.tpot_target.value = "50 ms"
    dash.arrival_rate.value = 0.0
    assert "Requests/s" in dash.serving.value.replace("&#x27;", "'") and "arrival_rate" not in dash.serving.value


def test_tensor_parallel_serving_plan_is_not_simulated():
    s = A.serving_reading(D.DashboardState(model="llama-2-70b", tensor_parallel=4, interconnect_bandwidth=450e9),
                          20.0, 1.0, 0.05)
    assert s.problem is None and s.gpus == 4 * s.replicas and s.simulated is None and "tensor" in s.sim_note


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(arrival_rate=0), ValueError, "arrival_rate"), (dict(ttft_target=-1), ValueError, "ttft_target"),
    (dict(tpot_target="x"), TypeError, "tpot_target"), (dict(chunked_prefill=1), TypeError, "chunked_prefill"),
    (dict(state="llama"), TypeError, "state"),
])
def test_serving_reading_rejects_bad_arguments(kwargs, exc, match):
    args = dict(state=D.DashboardState(), arrival_rate=10.0, ttft_target=1.0, tpot_target=0.05) | kwargs
    with pytest.raises(exc, match=match):
        A.serving_reading(**args)


def test_reading_rejects_a_non_dict():
    with pytest.raises(TypeError, match="values"):
        A.reading("llama-3-8b")


# --------------------------------------------------------------------------------------------------
# The stored notebook, the DOM classes, the import
# --------------------------------------------------------------------------------------------------
def test_the_stored_output_is_a_static_snapshot(dash):
    data = dash._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    html_out, plain = data["text/html"], data["text/plain"]
    assert "course-widget-snapshot" in html_out and dash.ttft.value in html_out and dash.tpot.value in html_out
    assert "<img" in html_out and "course-capstone-serving-table" in html_out
    assert "children=" not in plain and "llama-3-8b" in plain


def test_status_is_green_only_when_nothing_is_missing(dash):
    assert dash.reading.green and status_html(dash.reading) == dash.status.value
    dash.tensor_parallel.value = 2
    assert not dash.reading.green and "course-error" in dash.status.value


def test_stable_dom_classes(dash):
    assert "course-capstone" in dash._dom_classes
    for name, cls, kind in [("batch", "course-capstone-batch", widgets.IntSlider),
                            ("prompt_tokens", "course-capstone-prompt", widgets.IntSlider),
                            ("model", "course-capstone-model", widgets.Dropdown),
                            ("hardware", "course-capstone-hardware", widgets.Dropdown),
                            ("tensor_parallel", "course-capstone-tp", widgets.Dropdown),
                            ("interconnect_bandwidth", "course-capstone-interconnect", widgets.Text),
                            ("tpot", "course-capstone-tpot", widgets.Label),
                            ("ttft", "course-capstone-ttft", widgets.Label),
                            ("status", "course-capstone-status", widgets.HTML),
                            ("notices", "course-capstone-notices", widgets.HTML),
                            ("serving", "course-capstone-serving", widgets.HTML),
                            ("arrival_rate", "course-capstone-rate", widgets.FloatText),
                            ("chunked_prefill", "course-capstone-chunked", widgets.Checkbox),
                            ("plot", "course-capstone-plot", widgets.Output),
                            ("measure", "course-capstone-measure", widgets.Button)]:
        w = getattr(dash, name)
        assert cls in w._dom_classes and isinstance(w, kind), name
    assert "course-capstone-batch-box" in dash.box("batch")._dom_classes
    assert not dash.batch.readout and (dash.batch.min, dash.batch.max) == BATCH_RANGE[:2]
    assert dash.measure.icon == ""            # no Font Awesome icon: the app loads no CDN stylesheet


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"model": "llama-3-9b"}, ValueError, "model"), ({"batch": 1000}, ValueError, "batch"),
    ({"compute_efficiency": 0.01}, ValueError, "compute_efficiency"), ({"batch": "8"}, TypeError, "batch"),
])
def test_factory_rejects_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        capstone_dashboard(**kwargs)


@pytest.mark.parametrize("link", [450e9, 123456789.123, 1.0])
def test_initial_link_bandwidth_round_trips_through_the_text_field(link):
    dash = capstone_dashboard(model="llama-2-70b", tensor_parallel=8, interconnect_bandwidth=link)
    assert dash.state.interconnect_bandwidth == link


def test_loading_the_dashboard_does_not_import_torch():
    code = ("import sys; from course_lib.lessons.widgets.capstone import capstone_dashboard; capstone_dashboard(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "MPLBACKEND": "Agg"}).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_link_bandwidth_field_asks_for_one_direction(dash):
    """The all-reduce formula wants the per-direction bandwidth; the field says so and warns about datasheets."""
    from course_lib.lessons.widgets.capstone import LINK_HELP, LINK_PLACEHOLDER

    assert "per direction" in dash.interconnect_bandwidth.placeholder == LINK_PLACEHOLDER
    assert dash.interconnect_bandwidth.tooltip == LINK_HELP and "both directions" in LINK_HELP and "450" in LINK_HELP


def test_a_measured_machine_given_at_start_is_used():
    spec = custom_hardware("this-machine", bandwidth=60e9, peak_flops={"fp16": 2e12, "fp32": 1e12}, capacity=32e9)
    dash = capstone_dashboard(hardware="this-machine", machine=spec)
    _assert_priced(dash, D.DashboardState(hardware="this-machine", machine=spec))
    assert dash.tpot.value == format_time(estimate("llama-3-8b", spec, 1024, 256).tpot)


@settings(max_examples=25, deadline=None)
@given(hardware=st.sampled_from(["h100-sxm", "l4", "m3-max", "this-machine"]),
       precision=st.sampled_from(["fp16", "fp8", "int4"]), batch=st.integers(1, 256),
       prompt=st.integers(1, 32768), tp=st.sampled_from([1, 2, 8]),
       link=st.sampled_from(["", "450", "450 GB/s", "1 B/s", "fast"]))
def test_a_reading_is_priced_or_says_what_is_missing(hardware, precision, batch, prompt, tp, link):
    """Any control values: a reading never raises; it is green only when priced with nothing missing or wrong,
    and a priced TPOT is exactly the core's."""
    r = A.reading(dict(model="llama-3-8b", hardware=hardware, precision=precision, batch=batch, prompt_tokens=prompt,
                       tensor_parallel=tp, interconnect_bandwidth=link))
    assert r.priced or r.floor or r.problem
    if r.problem:
        assert not r.green and "interconnect_bandwidth" not in r.problem and "with_peak" not in r.problem
    if r.priced:
        assert r.tpot_text == A.tpot_text(r.state)
    if r.green:
        assert r.priced and not r.warnings


# --------------------------------------------------------------------------------------------------
# The engine choice (issue 27)
# --------------------------------------------------------------------------------------------------
def test_the_engine_dropdown_offers_the_floor_and_every_profile(dash):
    from course_lib.core.forecast import ENGINES
    from course_lib.lessons.widgets.capstone import ENGINE_OPTIONS

    assert "course-capstone-engine" in dash.engine._dom_classes and isinstance(dash.engine, widgets.Dropdown)
    assert [v for _, v in ENGINE_OPTIONS] == ["floor", *ENGINES] and dash.engine.value == "floor"
    assert dash.state.engine is None and dash.engine_line.value == f"<p>{html.escape(A.FLOOR_TEXT)}</p>"
    assert "course-capstone-engine-text" in dash.engine_line._dom_classes


def test_choosing_an_engine_prices_with_its_profile_and_disables_the_efficiency_sliders(dash):
    dash.compute_efficiency.value = 0.5
    dash.engine.value = "vLLM"
    assert dash.state.engine == "vLLM" and dash.state.compute_efficiency == 1.0
    assert dash.compute_efficiency.disabled and dash.box("bandwidth_efficiency").disabled
    r = A.reading(dict(dash.values()))
    assert dash.tpot.value == r.tpot_text == format_time(D.compute(D.DashboardState(engine="vLLM")).tpot)
    assert "The vLLM profile" in dash.engine_line.value and "vLLM profile" in repr(dash)
    shown = dash._repr_mimebundle_()["text/html"]
    assert "The vLLM profile" in shown                      # the stored snapshot shows what priced it
    assert "prices its steps at the floor" in dash.serving.value
    dash.engine.value = "floor"
    assert not dash.compute_efficiency.disabled and dash.state.compute_efficiency == 0.5 and dash.state.engine is None


def test_an_engine_given_at_start_is_selected():
    d = capstone_dashboard(engine="llamacpp", hardware="rtx-4090", precision="q4_k_m")
    assert d.engine.value == "llama.cpp" and d.state.engine == "llama.cpp" and d.compute_efficiency.disabled
