"""Lesson 04 (bandwidth-bound latency): the TPOT explorer, the figures, the lesson's numbers, ex04.

* the explorer (``course_lib.lessons.widgets.latency``), driven in-process, shows exactly
  ``format_time(estimate(model, hardware, prompt_tokens=context, new_tokens=2, precision=...).tpot_first)``
  for every control, and keeps the CSS classes the browser test relies on;
* the figures (``course_lib.lessons.plots.latency``) have titles and axis labels with units, and plot the
  estimator's values;
* every number the lesson states comes from ``course_lib`` (the stored outputs contain the values the
  library computes now; nbval re-executes the notebook);
* ex04's expected values come from course_lib, and ``solutions/04_*.ipynb`` has an nbgrader answer and
  grade cell per question, all passing.
"""
from __future__ import annotations

import html

import nbformat
import pytest
from nbtext import shown_text
from hypothesis import given
from hypothesis import strategies as st

from course_lib import estimate, get_hardware, get_model, kv_cache_bytes, list_models, weight_bytes

from course_lib.core import measurements
from course_lib.checks import ex04
from course_lib.core.units import Quantity, format_bandwidth, format_bytes, format_time

widgets = pytest.importorskip("ipywidgets")

from course_lib.lessons.plots import label_has_unit  # noqa: E402
from course_lib.lessons.plots.latency import (DEFAULT_DEVICES, context_grid, plot_total_vs_tokens,  # noqa: E402
                                      plot_tpot_vs_context, total_curve, tpot_curve)
from course_lib.lessons.widgets.latency import (CONTEXT_RANGE, NOT_AVAILABLE, TpotExplorer, tpot_estimate,  # noqa: E402
                                        tpot_explorer, tpot_reading)
from repo import ROOT  # noqa: E402

LESSON = ROOT / "notebooks" / "04_bandwidth_bound_latency.ipynb"
SOLUTION = ROOT / "solutions" / "04_bandwidth_bound_latency.ipynb"
EXERCISE = ROOT / "exercises" / "04_bandwidth_bound_latency.ipynb"

#: (model, hardware, precision) settings the estimator can price on every context.
ESTIMABLE = [("source-7b", "rtx-4090", "fp16"), ("mistral-7b", "h100-sxm", "fp8"),
             ("llama-2-7b", "a100-80gb", "int4"), ("qwen2.5-7b", "h200", "q4_0"), ("gpt2-small", "l4", "fp32")]


def expected_tpot_text(model, hardware, precision, context) -> str:
    return format_time(estimate(model, hardware, prompt_tokens=context, new_tokens=2, precision=precision).tpot_first)


# --------------------------------------------------------------------------------------------------
# tpot_reading / tpot_estimate: the explorer's logic
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model, hardware, precision", ESTIMABLE)
@pytest.mark.parametrize("context", [1, 1000, 4096, 20_000])
def test_reading_shows_the_estimators_tpot(model, hardware, precision, context):
    r = tpot_reading(model, hardware, precision, context)
    e = estimate(model, hardware, prompt_tokens=context, new_tokens=2, precision=precision)
    assert r.error is None and r.estimate == e == tpot_estimate(model, hardware, precision, context)
    assert r.tpot_text == format_time(e.tpot) == expected_tpot_text(model, hardware, precision, context)
    assert r.tps_text == f"{Quantity(e.decode_tps, 'number').format()} tokens/s"
    # the breakdown adds up to the step's bytes and shows them with course_lib.core.units
    assert r.weight_bytes_per_step + r.kv_bytes_per_step == pytest.approx(e.decode_first.bytes, rel=1e-12)
    assert html.escape(format_bytes(e.decode_first.bytes)) in r.details_html
    assert html.escape(format_bandwidth(e.hardware.bandwidth)) in r.details_html


def test_reading_of_the_source_example():
    """The lesson's worked example: the estimator sits a little under 14 GB / 1008 GB/s."""
    r = tpot_reading("source-7b", "rtx-4090", "fp16", 1)
    simple = weight_bytes(7e9, "fp16") / get_hardware("rtx-4090").bandwidth
    assert r.estimate.tpot < simple
    assert format_time(simple) == "13.9 ms" and r.tpot_text == "13.6 ms"
    assert r.weight_bytes_per_step == get_model("source-7b").decode_weight_bytes("fp16")
    assert "memory-bound" in r.details_html


def test_reading_notes_the_sliding_window_and_the_trained_context():
    inside = tpot_reading("mistral-7b", "h100-sxm", "fp16", 1000)
    beyond = tpot_reading("mistral-7b", "h100-sxm", "fp16", 20_000)
    assert "sliding window" not in inside.details_html and "sliding window" in beyond.details_html
    assert beyond.kv_bytes_per_step == kv_cache_bytes("mistral-7b", 4096)
    assert beyond.tpot_text == tpot_reading("mistral-7b", "h100-sxm", "fp16", 30_000).tpot_text
    assert "trained for at most" in tpot_reading("gpt2-small", "l4", "fp16", 5000).details_html
    assert "trained for at most" not in tpot_reading("gpt2-small", "l4", "fp16", 1000).details_html
    assert "do NOT fit" in tpot_reading("llama-2-70b", "rtx-4090", "fp16", 1).details_html
    assert "do NOT fit" not in tpot_reading("llama-2-7b", "rtx-4090", "fp16", 1).details_html


def test_unestimable_device_gives_a_reading_with_the_estimators_message():
    from course_lib.core.hardware import custom_hardware
    bare = custom_hardware("bare-gpu", bandwidth=500e9)            # no peak and no effective rate (every catalog
    r = tpot_reading("mistral-7b", bare, "fp16", 1024)              # device prices a step since issue 27)
    with pytest.raises(ValueError) as info:
        estimate("mistral-7b", bare, 1024, 1)
    assert r.estimate is None and r.error == str(info.value)
    assert r.tpot_text == r.tps_text == NOT_AVAILABLE
    assert "course-error" in r.details_html and html.escape(str(info.value)) in r.details_html
    assert r.weight_bytes_per_step is None and r.kv_bytes_per_step is None


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"model": "mistral-8b"}, ValueError, "model"),
    ({"hardware": "rtx-5090x"}, ValueError, "hardware"),
    ({"precision": "fp12"}, ValueError, "precision"),
    ({"context": 0}, ValueError, "context"),
    ({"context": 2.5}, ValueError, "context"),
    ({"context": "1k"}, TypeError, "context"),
])
def test_reading_rejects_bad_input_with_one_clear_error(kwargs, exc, match):
    args = {"model": "mistral-7b", "hardware": "rtx-4090", "precision": "fp16", "context": 1024, **kwargs}
    with pytest.raises(exc, match=match):
        tpot_reading(**args)


@given(st.sampled_from(ESTIMABLE), st.integers(CONTEXT_RANGE[0], CONTEXT_RANGE[1] - 1), st.integers(1, 4096))
def test_tpot_never_falls_as_the_context_grows(setting, context, more):
    model, hardware, precision = setting
    a = tpot_estimate(model, hardware, precision, context).tpot
    b = tpot_estimate(model, hardware, precision, min(context + more, CONTEXT_RANGE[1])).tpot
    assert b >= a
    assert tpot_reading(model, hardware, precision, context).tpot_text == format_time(a)


# --------------------------------------------------------------------------------------------------
# The widget, driven in-process
# --------------------------------------------------------------------------------------------------
@pytest.fixture
def explorer() -> TpotExplorer:
    return tpot_explorer()


def test_initial_state(explorer):
    assert explorer.settings() == {"model": "source-7b", "hardware": "rtx-4090", "precision": "fp16",
                                   "context": 1024}
    assert explorer.tpot.value == expected_tpot_text("source-7b", "rtx-4090", "fp16", 1024)
    assert explorer.reading == tpot_reading(**explorer.settings())
    assert explorer.details.value == explorer.reading.details_html


@pytest.mark.parametrize("control, value", [
    ("context", CONTEXT_RANGE[1]), ("context", CONTEXT_RANGE[0]), ("context", 7777),
    ("model", "llama-2-7b"), ("hardware", "h200"), ("precision", "int4"), ("precision", "q8_0"),
])
def test_setting_a_control_updates_the_tpot_label(explorer, control, value):
    before = explorer.tpot.value
    getattr(explorer, control).value = value
    s = explorer.settings()
    assert s[control] == value
    assert explorer.tpot.value == expected_tpot_text(**s) != before
    assert explorer.tps.value == tpot_reading(**s).tps_text
    assert explorer.details.value == tpot_reading(**s).details_html


def test_every_model_and_device_in_the_dropdowns(explorer):
    for model in list_models():
        explorer.model.value = model
        explorer.context.value = 2048
        assert explorer.tpot.value == expected_tpot_text(model, "rtx-4090", "fp16", 2048)
    explorer.model.value = "mistral-7b"
    for _, hardware in explorer.hardware.options:
        explorer.hardware.value = hardware
        r = tpot_reading(**explorer.settings())
        assert explorer.tpot.value == r.tpot_text
        if r.error is None:
            assert r.tpot_text == expected_tpot_text("mistral-7b", hardware, "fp16", 2048)


def test_unestimable_device_shows_the_error_instead_of_raising(explorer):
    # every catalog device now prices a step (issue 27: Apple parts get effective rates), so the dropdown reaches no
    # error; the error path itself is test_unestimable_device_gives_a_reading_with_the_estimators_message's
    explorer.hardware.value = "m3-max"
    assert explorer.tpot.value == expected_tpot_text("source-7b", "m3-max", "fp16", 1024)
    assert "course-error" not in explorer.details.value
    explorer.hardware.value = "h100-sxm"
    assert explorer.tpot.value == expected_tpot_text("source-7b", "h100-sxm", "fp16", 1024)


def test_stable_dom_classes(explorer):
    """The browser test moves .course-context and reads .course-tpot."""
    assert explorer.tpot._dom_classes == ("course-tpot",)
    assert explorer.context._dom_classes == ("course-context",)
    assert "course-tpot-explorer" in explorer._dom_classes
    for name, cls in [("model", "course-model"), ("hardware", "course-hardware"),
                      ("precision", "course-precision"), ("tps", "course-tps"), ("details", "course-tpot-details")]:
        assert cls in getattr(explorer, name)._dom_classes
    assert isinstance(explorer.context, widgets.IntSlider)
    assert (explorer.context.min, explorer.context.max, explorer.context.step) == CONTEXT_RANGE


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"model": "mistrall-7b"}, ValueError, "model"),
    ({"hardware": "h300"}, ValueError, "hardware"),
    ({"precision": "fp7"}, ValueError, "precision"),
    ({"context": 10**6}, ValueError, "context"),
    ({"context": 0}, ValueError, "context"),
    ({"model": 7}, TypeError, "model"),
])
def test_factory_rejects_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        tpot_explorer(**kwargs)


# --------------------------------------------------------------------------------------------------
# The figures
# --------------------------------------------------------------------------------------------------
def test_context_grid():
    g = context_grid(4096, 5, include=(1000, 10**6))
    assert g == sorted(set(g)) and g[0] == 1 and g[-1] == 4096 and 1000 in g and 10**6 not in g
    assert len(context_grid(10, 100)) == 10
    with pytest.raises(ValueError, match="points"):
        context_grid(100, 1)
    with pytest.raises(ValueError, match="max_context"):
        context_grid(0)


def test_tpot_vs_context_plots_the_estimators_values():
    fig = plot_tpot_vs_context("mistral-7b", precision="fp16", points=33)
    ax = fig.axes[0]
    assert "TPOT" in ax.get_title() and "mistral-7b" in ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and "tokens" in ax.get_xlabel()
    assert label_has_unit(ax.get_ylabel()) and "(ms)" in ax.get_ylabel()
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("sliding")]
    assert len(lines) == len(DEFAULT_DEVICES)
    for ln, hw in zip(lines, DEFAULT_DEVICES):
        x = [int(v) for v in ln.get_xdata()]
        assert 4096 in x  # the window is always sampled
        assert list(ln.get_ydata()) == pytest.approx([t * 1e3 for t in tpot_curve("mistral-7b", hw, x)], rel=1e-12)
        assert get_hardware(hw).display in ln.get_label()
    window = [ln for ln in ax.get_lines() if ln.get_label().startswith("sliding")]
    assert len(window) == 1 and list(window[0].get_xdata()) == [4096, 4096]
    # the ordering the lesson describes: more bandwidth, lower floor
    finals = {hw: ln.get_ydata()[-1] for ln, hw in zip(lines, DEFAULT_DEVICES)}
    assert finals["h200"] < finals["h100-sxm"] < finals["a100-80gb"] < finals["rtx-4090"] < finals["l40s"]


def test_tpot_vs_context_without_window_and_errors():
    ax = plot_tpot_vs_context("llama-3-8b", hardware="h100-sxm", max_context=8000, points=9).axes[0]
    (ln,) = ax.get_lines()
    y = list(ln.get_ydata())
    assert y == sorted(y) and y[-1] > y[0] and ax.get_xlim()[1] == 8000
    from course_lib.core.hardware import custom_hardware
    with pytest.raises(ValueError, match="bare-gpu"):
        plot_tpot_vs_context("llama-3-8b", hardware=[custom_hardware("bare-gpu", bandwidth=500e9)], points=3)
    with pytest.raises(ValueError, match="hardware"):
        plot_tpot_vs_context("llama-3-8b", hardware=[])
    with pytest.raises(ValueError, match="model"):
        plot_tpot_vs_context("llama-4-8b")


def test_total_vs_tokens_plots_exact_totals_and_the_line():
    marks = {"direct": 300, "with reasoning": 2300}
    fig = plot_total_vs_tokens("llama-2-7b", "rtx-4090", prompt_tokens=512, points=17, marks=marks)
    ax = fig.axes[0]
    assert "Total latency" in ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel()) and "(s)" in ax.get_ylabel()
    exact, line, *points = ax.get_lines()
    ns = [int(v) for v in exact.get_xdata()]
    assert ns[-1] == get_model("llama-2-7b").max_positions - 512 and {300, 2300} <= set(ns)
    assert list(exact.get_ydata()) == pytest.approx(total_curve("llama-2-7b", "rtx-4090", 512, ns), rel=1e-12)
    b, k = estimate("llama-2-7b", "rtx-4090", 512, 1).line
    assert list(line.get_ydata()) == pytest.approx([b + k * n for n in ns], rel=1e-12)
    # the line prices every step like the first: it never exceeds the exact total
    assert all(lv <= ev * (1 + 1e-12) for lv, ev in zip(line.get_ydata(), exact.get_ydata()))
    assert [(int(p.get_xdata()[0]), p.get_ydata()[0]) for p in points] == [
        (n, pytest.approx(estimate("llama-2-7b", "rtx-4090", 512, n).total, rel=1e-12)) for n in marks.values()]
    assert len(ax.texts) == 2 and "with reasoning" in ax.texts[1].get_text()


def test_total_vs_tokens_options_and_errors():
    ax = plot_total_vs_tokens("mistral-7b", "h100-sxm", 100, max_new_tokens=500, points=5, show_line=False).axes[0]
    assert len(ax.get_lines()) == 1 and ax.get_xlim()[1] == 500
    with pytest.raises(ValueError, match="prompt_tokens"):
        plot_total_vs_tokens(prompt_tokens=0)
    with pytest.raises(ValueError, match="marks"):
        plot_total_vs_tokens(marks={"bad": 0})
    with pytest.raises(ValueError, match="hardware"):
        plot_total_vs_tokens(hardware="gtx-1080")


# --------------------------------------------------------------------------------------------------
# Every number the lesson states comes from course_lib
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lesson_text() -> str:
    return shown_text(LESSON)


def _claims():
    """(description, text the lesson must show) pairs, each computed from course_lib now."""
    rtx = get_hardware("rtx-4090")
    t16 = weight_bytes(7e9, "fp16") / rtx.bandwidth
    t8 = weight_bytes(7e9, "int8") / rtx.bandwidth
    e = estimate("source-7b", "rtx-4090", 1, 2)          # one decode step: the answer's second token
    fp8 = measurements.h200()["weights_only_decode_step_fp16_vs_fp8"]
    l3 = get_model("llama-3-8b")
    llama = estimate(l3, "h100-sxm", 512, l3.max_positions - 512)   # within its trained positions
    b, k = estimate("llama-2-7b", "rtx-4090", 512, 3000).line
    return [
        ("the source's fp16 floor on the RTX 4090", format_time(t16)),
        ("the source's 8-bit floor", format_time(t8)),
        ("the tokens/s of the fp16 floor", f"{1 / t16:.1f}"),
        ("the estimator's TPOT for source-7b", format_time(e.tpot_first)),
        ("the embedding table skipped", format_bytes(get_model("source-7b").embedding_params * 2)),
        ("decode's arithmetic intensity", f"{e.decode_first.intensity:.2f} FLOP per byte"),
        ("the RTX 4090's ridge point", f"{rtx.ridge_point('fp16'):.0f} FLOP per byte"),
        ("measured fp16/fp8 time ratio", f"time ratio fp16/fp8: {fp8['fp16']['ms'] / fp8['fp8_e4m3']['ms']:.2f}"),
        ("Llama-3-8B's TPOT growth", f"first {format_time(llama.tpot_first)}  last {format_time(llama.tpot_last)}"),
        ("Mistral's window", f"{get_model('mistral-7b').sliding_window:,}"),
        ("the batch of the fp16-vs-fp8 record", "at batch 16"),
        ("the batch-1 weights-only step of section 8", "**4.434 ms**: that is batch 1"),
        ("the line's k", f"k = first decode step {format_time(k)}"),
        ("the M2 Ultra floor for Llama-2-70B",
         format_time(get_model("llama-2-70b").weight_bytes("fp16") / get_hardware("m2-ultra").bandwidth)),
    ]


@pytest.mark.parametrize("what, shown", _claims(), ids=[c[0] for c in _claims()])
def test_lesson_states_the_numbers_course_lib_computes(lesson_text, what, shown):
    assert shown in lesson_text, f"the lesson should show {what} = {shown!r} (computed by course_lib)"


def test_the_measured_fp8_ratio_is_not_the_bytes_ratio():
    """The lesson's claim: halving the bytes gave 1.69x on the H200, and the stored ratio agrees."""
    fp8 = measurements.h200()["weights_only_decode_step_fp16_vs_fp8"]
    ratio = fp8["fp16"]["ms"] / fp8["fp8_e4m3"]["ms"]
    assert round(ratio, 2) == fp8["time_ratio_fp16_over_fp8"] == 1.69
    assert fp8["fp16"]["weight_bytes"] == 2 * fp8["fp8_e4m3"]["weight_bytes"]


def test_the_exact_sum_minus_the_line_is_the_quadratic_gap():
    """Estimate.total - line = (n - 1)(n - 2)/2 · k_tok / bandwidth for a memory-bound response."""
    m, hw = get_model("llama-2-7b"), get_hardware("rtx-4090")
    for n in (2, 10, 1000, 3000):
        e = estimate(m, hw, 512, n)
        b, k = e.line
        gap = (n - 1) * (n - 2) / 2 * m.kv_bytes_per_token() / hw.bandwidth
        assert e.total - (b + k * n) == pytest.approx(gap, rel=1e-9, abs=1e-12)


# --------------------------------------------------------------------------------------------------
# ex04
# --------------------------------------------------------------------------------------------------
def test_ex04_expected_values_come_from_course_lib():
    import sympy as sp

    from course_lib.core import formulas

    rtx = get_hardware("rtx-4090")
    assert ex04.q1.evaluate(rtx.bandwidth / weight_bytes(7e9, "fp16")).correct
    assert ex04.q2.evaluate(get_model("mistral-7b").decode_weight_bytes("q4_0")
                            / get_hardware("m2-ultra").bandwidth * 1e3).correct
    fp8 = measurements.h200()["weights_only_decode_step_fp16_vs_fp8"]
    assert ex04.q3.evaluate(fp8["fp16"]["ms"] / fp8["fp8_e4m3"]["ms"]).correct
    assert ex04.q4.evaluate(estimate("mistral-7b", "h100-sxm", 20_000, 1).tpot * 1e3).correct
    assert ex04.q4.evaluate(f"{estimate('mistral-7b', 'h100-sxm', 20_000, 1).tpot * 1e3:.4f} ms").correct
    W, k, P, n, beta, j = sp.symbols("W k P n beta j", positive=True)
    assert ex04.q5.evaluate(sp.summation((W + (P + j) * k) / beta, (j, 1, n - 1))).correct
    exact = formulas.derive_decode_sum()["exact_sum"]
    S = formulas.S
    assert sp.simplify(ex04.exact_decode_sum() - exact.subs({S.streamed_weight_bytes: W, S.kv_bytes_per_token: k,
                                                             S.prompt: P, S.n: n, S.bandwidth: beta,
                                                             S.batch: 1})) == 0
    cot = estimate("llama-2-7b", "rtx-4090", 1000, 2250).total - estimate("llama-2-7b", "rtx-4090", 1000, 250).total
    assert ex04.q6.evaluate(cot).correct
    h = measurements.h200()["weights_only_decode_step_cuda_graph"]
    b1 = next(r for r in h["by_batch"] if r["batch"] == 1)
    assert ex04.q9.evaluate(h["weight_bytes"] / (b1["ms"] / 1e3) / get_hardware("h200").bandwidth).correct


def test_ex04_function_reference_is_the_estimators_memory_time():
    m, hw = get_model("mistral-7b"), get_hardware("rtx-4090")
    e = estimate(m, hw, 3000, 1)
    ref = ex04.tpot_floor_reference(m.decode_weight_bytes("fp16"), m.kv_bytes_per_token(), 3001, hw.bandwidth)
    assert ref == pytest.approx(e.decode_first.memory_time, rel=1e-12)

    def learner(weight_bytes, kv_bytes_per_token, context, bandwidth):
        return (weight_bytes + context * kv_bytes_per_token) / bandwidth

    assert ex04.q7.evaluate(learner).correct


def test_ex04_targets_the_lessons_mistakes():
    rtx = get_hardware("rtx-4090")
    t16 = weight_bytes(7e9, "fp16") / rtx.bandwidth
    assert "milliseconds" in ex04.q1.evaluate(t16 * 1e3).feedback                        # time instead of rate
    assert "compute-bound" in ex04.q1.evaluate(rtx.flops("fp16") / (2 * 7e9)).feedback   # FLOPs instead of bytes
    assert "4.5 bits" in ex04.q2.evaluate(get_model("mistral-7b").decode_weight_bytes("int4")
                                          / get_hardware("m2-ultra").bandwidth * 1e3).feedback
    assert "theory" in ex04.q3.evaluate(2).feedback                                       # the 8-bit "law"
    m, hw = get_model("mistral-7b"), get_hardware("h100-sxm")
    no_window = (m.decode_weight_bytes("fp16") + 20_001 * m.kv_bytes_per_token()) / hw.bandwidth * 1e3
    assert "sliding" in ex04.q4.evaluate(no_window).feedback
    assert "n - 1" in ex04.q5.evaluate("n*(W + P*k)/beta + k*n*(n + 1)/(2*beta)").feedback
    first = estimate("llama-2-7b", "rtx-4090", 1000, 250).tpot_first
    assert "first step" in ex04.q6.evaluate(2000 * first).feedback                       # the line, not the sum
    assert "bytes per second" in ex04.q8.evaluate(ex04.q8.options[4]).feedback


def test_ex04_covers_every_objective_with_every_kind_and_multi_step_problems():
    # objectives named by the lesson and bank sizes of every set: tests/test_checks_banks.py
    assert {q.objective.split()[0] for q in ex04.QUESTIONS} == {"O1", "O2", "O3", "O4", "O5"}
    assert sum("Multi-step" in q.prompt for q in ex04.QUESTIONS) >= 2
    assert {q.kind for q in ex04.QUESTIONS} >= {"numeric", "expression", "function", "choice"}


# --------------------------------------------------------------------------------------------------
# The exercise source
# --------------------------------------------------------------------------------------------------
# nbgrader structure and stored grade outputs: tests/test_solutions_structure.py (all solutions)


@pytest.mark.skipif(not EXERCISE.exists(),
                    reason="exercises/04_bandwidth_bound_latency.ipynb not generated yet "
                           "(python -m course_lib.authoring.exgen)")
def test_generated_exercise_holds_no_solutions():
    nb = nbformat.read(EXERCISE, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "context * kv_bytes_per_token) / bandwidth" not in text
    assert f"answer_q8 = {ex04.q8.expected!r}" not in text and "answer_q8 = ____" in text
    for q in ex04.QUESTIONS:
        assert f"q.{q.id}.check(" in text


def test_no_decode_step_is_read_from_a_one_token_answer():
    """With new_tokens=1 a response has no decode step: the lesson prices decode steps from answers of two or
    more tokens (tpot_first is the first real step), and stays within Llama-3-8B's trained positions."""
    import nbformat

    nb = nbformat.read(LESSON, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "new_tokens=1)" not in code and ", 1, 1)" not in code and "16384" not in code


def test_the_eager_hf_figures_are_one_set_up_and_the_jargon_is_defined(lesson_text):
    h = measurements.h200_record()
    steps = [r.seconds for r in h.hf_tpot] + list(h.hf_tpot_other_machine_seconds)
    assert f"{format_time(min(steps))} to {format_time(max(steps))} per decode step" in lesson_text
    assert "one set-up's measurement" in lesson_text and "Lesson 08 measures the overhead" in lesson_text
    for word in ("**kernel launch**", "**eager**", "**CUDA graph**", "**synchronisation**"):
        assert word in lesson_text, word


def test_the_jargon_of_section_8_and_both_tokens_per_second_are_in_the_glossary():
    from course_lib.lessons import glossary

    for term in ("CUDA graph", "eager execution", "kernel launch", "synchronisation"):
        assert glossary.define(term).lesson == 4
    tps = glossary.define("TPS").definition
    assert "end-to-end tokens per second" in tps and "decode tokens per second" in tps
