"""Lesson 09 (capstone: plan a deployment): the dashboard widget, its figure, the lesson's numbers, ex09.

* the dashboard (``course_lib.widgets.capstone``), driven in-process: after setting each control the
  TPOT label shows exactly ``tpot_text(new state)`` and the TTFT label ``ttft_text(new state)``, and
  the figure is rebuilt from the new state; the CSS classes the browser tests use are stable;
  "this machine" is measured only when its button is pressed (never on load);
* the figure (``course_lib.plots.capstone``) has a title, axis units, and plots the dashboard's values;
* every number the lesson states comes from ``course_lib``;
* ex09's expected values come from course_lib and its bank targets the lesson's mistakes.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import nbformat
import pytest
from nbtext import shown_text

from course_lib.core import capstone as D
from course_lib import estimate
from course_lib.core.hardware import custom_hardware
from course_lib.core.units import format_time

widgets = pytest.importorskip("ipywidgets")

from course_lib.lessons.plots import label_has_unit  # noqa: E402
from course_lib.lessons.plots.capstone import TITLE, XLABEL, YLABEL, plot_latency_throughput  # noqa: E402
from course_lib.lessons.widgets.capstone import (BATCH_RANGE, NEW_TOKENS_RANGE, PROMPT_RANGE,  # noqa: E402
                                         CapstoneDashboard, capstone_dashboard, status_html)


@pytest.fixture(scope="module")
def nb_paths(repo_root):
    """This lesson's notebooks (paths under conftest's ``repo_root``)."""
    return SimpleNamespace(lesson=repo_root / "notebooks" / "09_capstone.ipynb",
                           solution=repo_root / "solutions" / "09_capstone.ipynb",
                           app=repo_root / "app" / "dashboard.ipynb")


def _plotted(fig):
    """(batches that fit: x, y), (batches that do not: x, y) of the figure's first two series."""
    ax = fig.axes[0]
    by_label = {ln.get_label(): ln for ln in ax.get_lines()}
    return ax, by_label


# --------------------------------------------------------------------------------------------------
# The widget, driven in-process
# --------------------------------------------------------------------------------------------------
@pytest.fixture
def dash() -> CapstoneDashboard:
    return capstone_dashboard()


def _assert_shows(dash: CapstoneDashboard, state: D.DashboardState):
    assert dash.state == state
    assert dash.tpot.value == D.tpot_text(state)
    assert dash.ttft.value == D.ttft_text(state)
    v = D.dashboard_view(state)
    assert (dash.total.value, dash.tps.value, dash.memory.value, dash.bounds.value) == (
        v.total_text, v.tps_text, v.memory_text, v.bounds_text)
    assert dash.status.value == status_html(v)


def test_initial_state_is_the_default_state(dash):
    assert dash.state == D.DashboardState()
    _assert_shows(dash, D.DashboardState())
    e = estimate("llama-3-8b", "h100-sxm", 1024, 256)
    assert dash.tpot.value == format_time(e.tpot) and dash.ttft.value == format_time(e.ttft)
    assert dash.figure is not None and TITLE in dash.figure.axes[0].get_title()


@pytest.mark.parametrize("control, value, field", [
    ("batch", 64, "batch"), ("batch", BATCH_RANGE[1], "batch"),
    ("prompt_tokens", 8000, "prompt_tokens"), ("prompt_tokens", PROMPT_RANGE[0], "prompt_tokens"),
    ("prompt_tokens", PROMPT_RANGE[1], "prompt_tokens"),
    ("new_tokens", NEW_TOKENS_RANGE[1], "new_tokens"),
    ("cached_prefix_tokens", 1000, "cached_prefix_tokens"),
    ("model", "mistral-7b", "model"), ("model", "llama-2-70b", "model"),
    ("hardware", "h200", "hardware"), ("hardware", "l40s", "hardware"),
    ("precision", "fp8", "precision"), ("precision", "q4_0", "precision"),
    ("kv_precision", "fp8", "kv_precision"),
    ("compute_efficiency", 0.5, "compute_efficiency"), ("bandwidth_efficiency", 0.6, "bandwidth_efficiency"),
])
def test_setting_a_control_shows_the_new_states_texts(dash, control, value, field):
    before = dash.tpot.value, dash.ttft.value
    getattr(dash, control).value = value
    expected = D.DashboardState().replace(**{field: value})
    _assert_shows(dash, expected)
    assert (dash.tpot.value, dash.ttft.value) != before
    ax = dash.figure.axes[0]
    cur = [ln for ln in ax.get_lines() if ln.get_label().startswith("current")][0]
    r = D.compute(expected)
    assert list(cur.get_xdata()) == [r.tps_aggregate] and list(cur.get_ydata()) == [r.tpot * 1e3]


def test_a_sequence_of_changes(dash):
    dash.model.value = "qwen2.5-7b"
    dash.hardware.value = "a100-80gb"
    dash.batch.value = 32
    dash.prompt_tokens.value = 4000
    dash.cached_prefix_tokens.value = 3000
    s = D.DashboardState(model="qwen2.5-7b", hardware="a100-80gb", batch=32, prompt_tokens=4000,
                         cached_prefix_tokens=3000)
    _assert_shows(dash, s)
    # shrinking the prompt below the cached prefix pulls the prefix down with it
    dash.prompt_tokens.value = 500
    assert dash.cached_prefix_tokens.value == 499 and dash.cached_prefix_tokens.max == 499
    _assert_shows(dash, s.replace(prompt_tokens=500, cached_prefix_tokens=499))


def test_tensor_parallel_needs_the_link_bandwidth(dash):
    dash.model.value = "llama-2-70b"
    dash.tensor_parallel.value = 4
    assert dash.state is None and dash.tpot.value == "n/a" and "interconnect_bandwidth" in dash.status.value
    dash.interconnect_bandwidth.value = "300 GB/s"
    s = D.DashboardState(model="llama-2-70b", tensor_parallel=4, interconnect_bandwidth=300e9)
    _assert_shows(dash, s)
    assert "all-reduces add" in dash.bounds.value
    dash.interconnect_bandwidth.value = "fast"
    assert dash.state is None and dash.ttft.value == "n/a" and "course-error" in dash.status.value


@pytest.mark.parametrize("link", [450e9, 123456789.123, 1.0])
def test_initial_link_bandwidth_round_trips_through_the_text_field(link):
    dash = capstone_dashboard(model="llama-2-70b", tensor_parallel=8, interconnect_bandwidth=link)
    s = D.DashboardState(model="llama-2-70b", tensor_parallel=8, interconnect_bandwidth=link)
    assert dash.state.interconnect_bandwidth == link
    _assert_shows(dash, s)


def test_unpriceable_device_and_unmeasured_machine_show_na(dash):
    dash.hardware.value = "m3-max"
    assert dash.tpot.value == dash.ttft.value == D.NOT_AVAILABLE and "course-error" in dash.status.value
    assert dash.figure is None
    dash.hardware.value = "this-machine"
    assert dash.tpot.value == D.NOT_AVAILABLE and "not been measured" in dash.status.value
    dash.hardware.value = "h200"
    _assert_shows(dash, D.DashboardState(hardware="h200"))


def test_a_measured_machine_is_used_once_given():
    spec = custom_hardware("this-machine", bandwidth=60e9, peak_flops={"fp16": 2e12, "fp32": 1e12}, capacity=32e9)
    dash = capstone_dashboard(hardware="this-machine", machine=spec)
    s = D.DashboardState(hardware="this-machine", machine=spec)
    _assert_shows(dash, s)
    assert dash.tpot.value == format_time(estimate("llama-3-8b", spec, 1024, 256).tpot)


def test_measure_button_measures_on_click_only(monkeypatch, dash):
    """The button calls bench.this_machine(bench.measure_machine(...)); a fake bench stands in (timing is not a
    unit test, and the fake keeps torch out of this test)."""
    import types

    import course_lib.measure

    spec = custom_hardware("this-machine", bandwidth=40e9, peak_flops=1e12, capacity=16e9)
    calls = []
    fake = types.SimpleNamespace(measure_machine=lambda **kw: calls.append(kw) or "m",
                                 this_machine=lambda m: spec if m == "m" else None)
    monkeypatch.setitem(sys.modules, "course_lib.measure.bench", fake)
    monkeypatch.setattr(course_lib.measure, "bench", fake, raising=False)
    assert calls == []
    dash.measure.click()
    assert calls == [{"progress": False}] and dash.machine is spec and dash.hardware.value == "this-machine"
    _assert_shows(dash, D.DashboardState(hardware="this-machine", machine=spec))


def test_a_failed_measurement_is_shown_not_raised(monkeypatch, dash):
    import types

    import course_lib.measure

    def boom(**kw):
        raise RuntimeError("no timer")

    fake = types.SimpleNamespace(measure_machine=boom, this_machine=None)
    monkeypatch.setitem(sys.modules, "course_lib.measure.bench", fake)
    monkeypatch.setattr(course_lib.measure, "bench", fake, raising=False)
    dash.measure.click()
    assert "measurement failed: no timer" in dash.status.value and dash.machine is None
    assert dash.state == D.DashboardState()


def test_loading_the_dashboard_does_not_import_torch():
    code = ("import sys; from course_lib.widgets.capstone import capstone_dashboard; capstone_dashboard(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "MPLBACKEND": "Agg"}).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_stable_dom_classes(dash):
    assert "course-capstone" in dash._dom_classes
    for name, cls, kind in [("batch", "course-capstone-batch", widgets.IntSlider),
                            ("prompt_tokens", "course-capstone-prompt", widgets.IntSlider),
                            ("model", "course-capstone-model", widgets.Dropdown),
                            ("hardware", "course-capstone-hardware", widgets.Dropdown),
                            ("tpot", "course-capstone-tpot", widgets.Label),
                            ("ttft", "course-capstone-ttft", widgets.Label),
                            ("plot", "course-capstone-plot", widgets.Output),
                            ("measure", "course-capstone-measure", widgets.Button)]:
        w = getattr(dash, name)
        assert cls in w._dom_classes and isinstance(w, kind), name
    assert (dash.batch.min, dash.batch.max) == BATCH_RANGE[:2]
    assert (dash.prompt_tokens.min, dash.prompt_tokens.max) == PROMPT_RANGE[:2]
    assert "this-machine" in [v for _, v in dash.hardware.options]


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"model": "llama-3-9b"}, ValueError, "model"),
    ({"hardware": "h300"}, ValueError, "hardware"),
    ({"batch": 1000}, ValueError, "batch"),
    ({"prompt_tokens": 10**6}, ValueError, "prompt_tokens"),
    ({"compute_efficiency": 0.01}, ValueError, "compute_efficiency"),
    ({"batch": "8"}, TypeError, "batch"),
])
def test_factory_rejects_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        capstone_dashboard(**kwargs)


# --------------------------------------------------------------------------------------------------
# The figure
# --------------------------------------------------------------------------------------------------
def test_figure_plots_the_curve_with_units():
    s = D.DashboardState(hardware="l40s", prompt_tokens=4096, new_tokens=512, batch=24)
    fig = plot_latency_throughput(s, tpot_budget=0.05)
    ax, lines = _plotted(fig)
    assert ax.get_title().startswith(TITLE) and "llama-3-8b" in ax.get_title()
    assert ax.get_xlabel() == XLABEL and ax.get_ylabel() == YLABEL
    assert label_has_unit(XLABEL) and "tokens/s" in XLABEL and label_has_unit(YLABEL) and "(ms)" in YLABEL
    pts = D.latency_throughput_curve(s)
    fit = [p for p in pts if p.fits]
    over = [p for p in pts if p.fits is False]
    assert fit and over                                  # memory runs out inside the plotted range
    assert list(lines["fits in memory"].get_xdata()) == [p.tps_aggregate for p in fit]
    assert list(lines["fits in memory"].get_ydata()) == pytest.approx([p.tpot * 1e3 for p in fit], rel=1e-12)
    assert list(lines["does not fit in memory"].get_xdata()) == [p.tps_aggregate for p in over]
    assert list(lines["does not fit in memory"].get_ydata()) == pytest.approx([p.tpot * 1e3 for p in over],
                                                                              rel=1e-12)
    budget = [ln for lab, ln in lines.items() if lab.startswith("TPOT budget")][0]
    assert list(budget.get_ydata()) == [50.0, 50.0]
    assert [t.get_text() for t in ax.texts] == [f"B={p.batch}" for p in fit]


def test_figure_defaults_and_errors():
    ax = plot_latency_throughput().axes[0]
    (fit,) = [ln for ln in ax.get_lines() if ln.get_label() == "fits in memory"]
    assert len(fit.get_xdata()) == len(D.default_batches(1))
    with pytest.raises(TypeError, match="state"):
        plot_latency_throughput("llama-3-8b")
    with pytest.raises(ValueError, match="tpot_budget"):
        plot_latency_throughput(tpot_budget=0)
    with pytest.raises(ValueError, match="m2-ultra"):
        plot_latency_throughput(D.DashboardState(hardware="m2-ultra"))


# --------------------------------------------------------------------------------------------------
# Every number the lesson states comes from course_lib
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lesson_text(nb_paths) -> str:
    return shown_text(nb_paths.lesson)


def _claims():
    """(description, text the lesson must show) pairs, each computed from course_lib now."""
    import math

    from course_lib import get_hardware, get_model

    from course_lib.core import measurements
    from course_lib.core import _generated as g
    from course_lib.core.units import format_bandwidth, format_bytes

    h = measurements.h200()
    h200 = get_hardware("h200")
    run = next(r for r in h["full_decode_step_cuda_graph"]["runs"] if r["batch"] == 1 and r["context"] == 1)
    eta_b = run["achieved_GBps"] * 1e9 / h200.bandwidth
    eta_c = h["ceilings"]["matmul_8192_fp16_TFLOPs"] * 1e12 / h200.flops("fp16")
    base = D.DashboardState(prompt_tokens=2048, new_tokens=300, compute_efficiency=eta_c, bandwidth_efficiency=eta_b)
    h100_8 = base.replace(precision="fp8")
    b_plain = D.best_batch(h100_8, 1.0, 0.05)
    cached = h100_8.replace(cached_prefix_tokens=1536)
    b_cached = D.best_batch(cached, 1.0, 0.05)
    r_cached = D.compute(cached.replace(batch=b_cached))
    l40s = D.compute(base.replace(hardware="l40s"))
    m70 = get_model("llama-3-70b")
    tp4 = D.compute(D.DashboardState(model="llama-3-70b", batch=32, prompt_tokens=2048, new_tokens=300,
                                     tensor_parallel=4, interconnect_bandwidth=1.0))
    link = 2 * m70.layers * g.ring_allreduce_time(4, 32 * m70.hidden * 2, 1.0) / (0.1 * tp4.estimate.tpot)
    recipe = D.compute(D.DashboardState(prompt_tokens=2048, new_tokens=300, compute_efficiency=0.6))
    return [
        ("the measured bandwidth efficiency", f"bandwidth efficiency {eta_b:.3f}"),
        ("the measured compute efficiency", f"compute efficiency {eta_c:.3f}"),
        ("the L40S at batch 1", f"| NVIDIA L40S | {D.ttft_text(l40s.state)} | {D.tpot_text(l40s.state)} |"),
        ("the H100 fp8 plan without the cache", f"| NVIDIA H100 SXM | fp8 | {b_plain} | TTFT budget |"),
        ("the H100 fp8 plan with the cache", f"| NVIDIA H100 SXM | fp8 | {b_cached} | TTFT budget |"),
        ("the GPUs of the chosen plan", f"need **{math.ceil(1000 / b_cached)}** GPUs for 1,000 users"),
        ("the chosen plan's TPOT", format_time(r_cached.tpot)),
        ("the 70B split over 4 GPUs", f"| 4 | 32 | {format_bytes(tp4.memory_needed)} | yes |"),
        ("the link bandwidth for 4 GPUs at batch 32", format_bandwidth(link)),
        ("the source recipe's TPOT", format_time(recipe.estimate.source_recipe_tpot)),
        ("chats that fit an L40S",
         f"**{D.max_batch_that_fits(D.DashboardState(hardware='l40s', prompt_tokens=2048, new_tokens=300))}**"),
    ]


@pytest.mark.parametrize("what, shown", _claims(), ids=[c[0] for c in _claims()])
def test_lesson_states_the_numbers_course_lib_computes(lesson_text, what, shown):
    assert shown in lesson_text, f"the lesson should show {what} = {shown!r} (computed by course_lib)"


def test_lesson_tp_link_bandwidth_is_ex09_q8():
    """The lesson's table and exercise q8 compute the same break-even link bandwidth."""
    from course_lib.checks import ex09

    assert ex09.q8.evaluate(ex09.q8.expected).correct
    m70 = __import__("course_lib").get_model("llama-3-70b")
    s = D.DashboardState(model="llama-3-70b", batch=32, prompt_tokens=2048, new_tokens=300, tensor_parallel=4,
                         interconnect_bandwidth=ex09.q8.expected * 1e9)
    r = D.compute(s)
    assert r.allreduce_decode == pytest.approx(0.1 * r.estimate.tpot, rel=1e-12)
    assert m70.layers == 80


def test_h100_and_h200_nearly_share_the_ttft_the_lesson_claims():
    """Same fp16 FLOP/s: the prefill differs only by its memory-bound operators (lm_head, embedding rows)."""
    a = D.compute(D.DashboardState(hardware="h100-sxm", prompt_tokens=2048, new_tokens=300))
    b = D.compute(D.DashboardState(hardware="h200", prompt_tokens=2048, new_tokens=300))
    assert b.ttft < a.ttft and (a.ttft - b.ttft) / a.ttft < 0.05 and b.tpot < a.tpot
    memory_bound = [op.name for op in a.estimate.prefill.operators if op.bound == "memory"]
    assert memory_bound and "matmuls" not in memory_bound


def test_the_dashboard_cell_is_ignored_by_nbval_and_stores_no_widget_state(nb_paths):
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    dash = [c for c in nb.cells if c.cell_type == "code" and "capstone_dashboard(" in c.source]
    assert dash and all("nbval-ignore-output" in c.metadata.get("tags", []) for c in dash)
    assert "widgets" not in nb.metadata


# --------------------------------------------------------------------------------------------------
# The app notebook that `make app` serves with Voila
# --------------------------------------------------------------------------------------------------
def test_app_notebook_only_displays_the_dashboard(nb_paths):
    nb = nbformat.read(nb_paths.app, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert 1 <= len(code) <= 2
    assert "from course_lib.lessons.widgets.capstone import capstone_dashboard" in code[0].source
    assert code[-1].source.strip().endswith("capstone_dashboard()")
    assert "widgets" not in nb.metadata
    assert all(c.outputs for c in code), "the app notebook is stored with its outputs"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    for line in "\n".join(c.source for c in code).splitlines():
        assert not re.search(r"\bimport torch\b|bench\.", line), "the app must not measure on load"


# --------------------------------------------------------------------------------------------------
# ex09
# --------------------------------------------------------------------------------------------------
def test_ex09_expected_values_come_from_course_lib():
    import math

    import sympy as sp

    from course_lib.core import _generated as g
    from course_lib import get_hardware, get_model
    from course_lib.checks import ex09

    assert ex09.q1.evaluate(estimate("llama-3-8b", "a100-80gb", 1500, 300, batch=8).ttft * 1e3).correct
    assert ex09.q1.evaluate(f"{estimate('llama-3-8b', 'a100-80gb', 1500, 300, batch=8).ttft:.4f} s").correct
    assert ex09.q2.evaluate(estimate("llama-3-8b", "h100-sxm", 2048, 300, batch=32).memory_needed / 1e9).correct
    m = get_model("llama-3-8b")
    fit = math.floor((get_hardware("l40s").capacity - m.weight_bytes()) / (m.kv_bytes_per_token() * 2348))
    assert ex09.q3.evaluate(fit).correct
    assert fit == D.max_batch_that_fits(D.DashboardState(hardware="l40s", prompt_tokens=2048, new_tokens=300))
    assert ex09.q4.evaluate(estimate("llama-3-8b", "h100-sxm", 2048, 300, batch=32).tps_aggregate).correct
    L, G, B, h, b, beta = sp.symbols("L G B h b beta", positive=True)
    assert ex09.q7.evaluate(2 * L * g.ring_allreduce_time(G, B * h * b, beta)).correct
    assert ex09.q7.evaluate(4 * L * B * h * b * (G - 1) / (G * beta)).correct


def test_ex09_planning_function_reference_is_a_scan():
    from course_lib.checks import ex09

    def learner(model, hardware, prompt_tokens, new_tokens, ttft_budget, tpot_budget):
        best = 0
        for b in range(1, ex09.BATCH_LIMIT + 1):
            e = estimate(model, hardware, prompt_tokens, new_tokens, batch=b)
            if not (e.fits and e.ttft <= ttft_budget and e.tpot <= tpot_budget):
                break
            best = b
        return best

    assert ex09.q5.evaluate(learner).correct
    # every case of the question exercises a different limit
    reasons = {D.what_binds(D.DashboardState(model=m, hardware=hw, prompt_tokens=p, new_tokens=n), t1, t2,
                            limit=ex09.BATCH_LIMIT) for ((m, hw, p, n, t1, t2), _kw), _ in ex09.q5.cases}
    assert {"TTFT budget", "TPOT budget", "memory"} <= reasons


def test_ex09_targets_the_lessons_mistakes():
    from course_lib.checks import ex09

    e1 = estimate("llama-3-8b", "a100-80gb", 1500, 300, batch=8)
    assert "compute-bound" in ex09.q1.evaluate(e1.prefill.memory_time * 1e3).feedback
    assert "single request" in ex09.q1.evaluate(e1.ttft * 1e3 / 8).feedback
    e4 = estimate("llama-3-8b", "h100-sxm", 2048, 300, batch=32)
    assert "one user" in ex09.q4.evaluate(e4.tps).feedback
    assert "prefill" in ex09.q4.evaluate(32 / e4.tpot).feedback
    # the compute-only recipe a student would write: peak FLOP/s / FLOPs per token (no batch factor)
    from course_lib import get_hardware, get_model
    peak_rate = get_hardware("h100-sxm").flops("fp16") / (2 * get_model("llama-3-8b").params)
    assert "peak FLOP/s / FLOPs per token" in ex09.q4.evaluate(peak_rate).feedback
    assert not ex09.q4.evaluate(peak_rate).correct
    # reading the capacity as GiB gets feedback that does not claim the memory chips hold 1e9-byte GB
    l40s, m8 = get_hardware("l40s"), get_model("llama-3-8b")
    gib = int((l40s.capacity * 1.024 ** 3 - m8.weight_bytes()) // (m8.kv_bytes_per_token("fp16") * 2348))
    fb = ex09.q3.evaluate(gib).feedback
    assert "binary GiB" in fb and "headroom" in fb
    assert "Bandwidth sets the decode" in ex09.q6.evaluate(ex09.q6.options[1]).feedback
    assert "ring factor" in ex09.q8.evaluate(ex09.q8.expected * 4 / 6).feedback
    assert "one sequence" in ex09.q8.evaluate(ex09.q8.expected / 32).feedback


def test_ex09_covers_every_objective_with_multi_step_problems_and_a_function():
    # objectives named by the lesson and bank sizes of every set: tests/test_checks_banks.py
    from course_lib.checks import ex09

    assert {q.objective.split()[0] for q in ex09.QUESTIONS} == {"O1", "O2", "O3", "O4", "O5"}
    assert sum("Multi-step" in q.prompt for q in ex09.QUESTIONS) >= 2
    assert any(q.kind == "function" for q in ex09.QUESTIONS)


def test_link_bandwidth_field_asks_for_one_direction(dash):
    """The all-reduce formula wants the per-direction bandwidth; the field says so and warns about datasheets."""
    from course_lib.lessons.widgets.capstone import LINK_HELP, LINK_PLACEHOLDER

    assert "per direction" in dash.interconnect_bandwidth.placeholder == LINK_PLACEHOLDER
    assert dash.interconnect_bandwidth.tooltip == LINK_HELP and "both directions" in LINK_HELP


def test_lesson_states_the_fp8_kv_cache_and_the_fp16_alternative(lesson_text):
    """fp8 in the plans means an fp8 KV cache too; the lesson shows what an fp16 cache changes (computed)."""
    s70 = D.DashboardState(model="llama-3-70b", precision="fp8", prompt_tokens=2048, new_tokens=300)
    assert "fp8 weights, activations and KV cache" in lesson_text
    assert f"and {D.max_batch_that_fits(s70.replace(kv_precision='fp16'))} chats fit" in lesson_text
    # the L40S row of the fp8-KV -> fp16-KV table, with the prefix cached and the lesson's efficiencies
    from course_lib import get_hardware
    from course_lib.core import measurements

    h, h200 = measurements.h200(), get_hardware("h200")
    run = next(r for r in h["full_decode_step_cuda_graph"]["runs"] if r["batch"] == 1 and r["context"] == 1)
    s = D.DashboardState(hardware="l40s", precision="fp8", prompt_tokens=2048, new_tokens=300,
                         cached_prefix_tokens=1536,
                         bandwidth_efficiency=run["achieved_GBps"] * 1e9 / h200.bandwidth,
                         compute_efficiency=h["ceilings"]["matmul_8192_fp16_TFLOPs"] * 1e12 / h200.flops("fp16"))
    b8, b16 = D.best_batch(s, 1.0, 0.05), D.best_batch(s.replace(kv_precision="fp16"), 1.0, 0.05)
    assert b16 <= b8 and f"| NVIDIA L40S | {b8} → {b16} |" in lesson_text
