"""Lesson 06 (prefill vs decode): the explorer, the figures and their data, ex06, the notebooks.

* the explorer (``course_lib.lessons.widgets.prefill_decode``), driven in-process, shows exactly the
  estimator's TTFT, TPOT, total and tokens/s for every control, and keeps its CSS classes;
* the figures (``course_lib.lessons.plots.prefill_decode``) carry titles and axis labels with units and plot
  exactly course_lib's values (the roofline from ``phase_time``, attention's share from
  ``prefill_flops``, the batching line from ``estimate``, measured points as passed in);
* ex06's expected answers come from course_lib, and its central wrong answers (decode FLOPs /
  compute, n instead of n - 1 decode steps) earn their feedback;
* every measurement of the lesson goes through ``measured(...)`` (nbval replays the recording and compares every
  cell but the live widget); P_c waits for lesson 07; the single max is shown against the per-operator sum;
  the exercise source has an answer and a grade cell per question, all passing.

No timing claim is asserted: measured objects are built by hand where a plot needs them.
"""
from __future__ import annotations

import math

import re
from dataclasses import dataclass
from types import SimpleNamespace

import nbformat
import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.core.numeric import raw as g
from course_lib import estimate, get_hardware, get_model, weight_bytes
from course_lib.core import measurements
from course_lib.checks import ex06
from course_lib.core.units import format_time

widgets = pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from course_lib.lessons.plots import label_has_unit  # noqa: E402
from course_lib.lessons.plots import prefill_decode as plots  # noqa: E402
from course_lib.core import roofline  # noqa: E402
from course_lib.lessons.widgets.prefill_decode import (BATCH_RANGE, NOT_AVAILABLE, PrefillDecodeExplorer,  # noqa: E402
                                               prefill_decode_explorer, prefill_decode_reading, rate_text)


@pytest.fixture(scope="module")
def nb_paths(repo_root):
    """This lesson's notebooks (paths under conftest's ``repo_root``)."""
    return SimpleNamespace(lesson=repo_root / "notebooks" / "06_prefill_vs_decode.ipynb",
                           solution=repo_root / "solutions" / "06_prefill_vs_decode.ipynb",
                           exercise=repo_root / "exercises" / "06_prefill_vs_decode.ipynb")


def _labels_ok(fig):
    ax = fig.axes[0]
    assert ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    return ax


def _lines(ax):
    return {ln.get_label(): ln for ln in ax.get_lines()}


# --------------------------------------------------------------------------------------------------
# The explorer
# --------------------------------------------------------------------------------------------------
SETTINGS = [("mistral-7b", "h100-sxm", "fp16", 1000, 200, 1), ("llama-3-8b", "rtx-4090", "int8", 4000, 50, 4),
            ("source-7b", "a100-40gb", "fp16", 500, 1, 1), ("qwen2.5-7b", "h200", "fp8", 32768, 4096, 256)]


@pytest.mark.parametrize("model, hardware, precision, prompt, new, batch", SETTINGS)
def test_reading_shows_the_estimators_numbers(model, hardware, precision, prompt, new, batch):
    r = prefill_decode_reading(model, hardware, precision, prompt, new, batch)
    e = estimate(model, hardware, prompt, new, precision=precision, batch=batch)
    assert r.error is None and r.estimate == e
    assert r.ttft_text == format_time(e.ttft)
    assert r.tpot_text == format_time(e.tpot)
    assert r.total_text == format_time(e.total)
    assert r.tps_text == rate_text(e.tps) and r.tps_aggregate_text == rate_text(batch * e.tps)
    assert r.bound_text == f"prefill {e.prefill_bound}-bound, decode {e.decode_bound}-bound"
    html = r.details_html
    for value in (format_time(g.total_latency_n_tpot(e.ttft, new, e.tpot)),
                  format_time(g.e2e_per_token(e.ttft, new, e.tpot)), format_time(e.source_recipe_tpot)):
        assert value in html


def test_every_control_updates_the_outputs():
    w = prefill_decode_explorer()
    assert isinstance(w, PrefillDecodeExplorer)
    changes = [("model", "llama-3-8b"), ("hardware", "h200"), ("precision", "fp8"), ("prompt_tokens", 8000),
               ("new_tokens", 1000), ("batch", 64)]
    for attr, value in changes:
        getattr(w, attr).value = value
        s = w.settings()
        e = estimate(s["model"], s["hardware"], s["prompt_tokens"], s["new_tokens"], precision=s["precision"],
                     batch=s["batch"])
        assert w.ttft.value == format_time(e.ttft), attr
        assert w.tpot.value == format_time(e.tpot), attr
        assert w.total.value == format_time(e.total), attr
        assert w.tps.value == rate_text(e.tps), attr
        assert w.tps_aggregate.value == rate_text(e.tps_aggregate), attr
        assert w.bound.value == f"prefill {e.prefill_bound}-bound, decode {e.decode_bound}-bound"


def test_batch_raises_aggregate_throughput_below_the_critical_batch():
    w = prefill_decode_explorer("mistral-7b", "h200", prompt_tokens=100, new_tokens=2)
    one = w.reading.estimate.decode_tps
    w.batch.value = 64
    assert 64 * w.reading.estimate.decode_tps > 30 * one      # decode tokens/s over the batch
    assert w.reading.estimate.decode_bound == "memory"


def test_a_device_with_an_effective_rate_is_priced_and_says_so():
    """Apple publishes no FLOP/s: the catalog's effective rate prices the prefill, and the breakdown says it is
    an effective rate, not a datasheet peak (a datasheet device shows no such row)."""
    w = prefill_decode_explorer()
    w.hardware.value = "m2-ultra"
    assert NOT_AVAILABLE not in (w.ttft.value, w.tpot.value, w.total.value)
    assert "Compute rate" in w.details.value and "not a datasheet peak" in w.details.value
    w.hardware.value = "h100-sxm"
    assert w.ttft.value != NOT_AVAILABLE and "not a datasheet peak" not in w.details.value


def test_stable_css_classes():
    w = prefill_decode_explorer()
    assert "course-prefill-decode" in w._dom_classes
    expected = {"model": "course-model", "hardware": "course-hardware", "precision": "course-precision",
                "prompt_tokens": "course-prompt", "new_tokens": "course-new-tokens", "batch": "course-batch",
                "ttft": "course-ttft", "tpot": "course-tpot", "total": "course-total", "tps": "course-tps",
                "tps_aggregate": "course-tps-aggregate", "bound": "course-bound", "details": "course-pd-details"}
    for attr, cls in expected.items():
        assert cls in getattr(w, attr)._dom_classes, attr


def test_bad_arguments_raise_one_clear_error():
    with pytest.raises(ValueError, match="model"):
        prefill_decode_reading("mistral-7", "h100-sxm")
    with pytest.raises(ValueError, match="prompt_tokens"):
        prefill_decode_reading("mistral-7b", "h100-sxm", prompt_tokens=0)
    with pytest.raises(ValueError, match="batch"):
        prefill_decode_explorer(batch=BATCH_RANGE[1] + 1)
    with pytest.raises(ValueError, match="new_tokens"):
        prefill_decode_reading("mistral-7b", "h100-sxm", new_tokens=2.5)
    with pytest.raises(TypeError, match="new_tokens"):
        prefill_decode_reading("mistral-7b", "h100-sxm", new_tokens="many")


@given(prompt=st.integers(1, 32768), new=st.integers(1, 4096), batch=st.integers(1, 1024))
def test_reading_is_consistent_for_any_setting(prompt, new, batch):
    r = prefill_decode_reading("llama-3-8b", "h100-sxm", "fp16", prompt, new, batch)
    e = r.estimate
    assert e.total == pytest.approx(e.ttft + (new - 1) * e.tpot)
    assert r.total_text == format_time(e.total)
    assert e.tps_aggregate == pytest.approx(batch * new / e.total)


# --------------------------------------------------------------------------------------------------
# Figures and their data
# --------------------------------------------------------------------------------------------------
def test_attainable_rate_is_the_roof():
    peak, bw = 100e9, 20e9
    assert roofline.attainable_flop_rate(1.0, peak, bw) == pytest.approx(20e9)
    assert roofline.attainable_flop_rate(100.0, peak, bw) == pytest.approx(peak)
    ridge = g.ridge_point(peak, bw)
    assert roofline.attainable_flop_rate(ridge, peak, bw) == pytest.approx(peak)


def test_roofline_plots_the_roof_and_the_points():
    peak, bw = 200e9, 25e9
    pts = [roofline.RooflinePoint("decode", 2e6, 4e6, 1e-3), roofline.RooflinePoint("prefill", 4e9, 5e7, 0.05)]
    ax = _labels_ok(plots.plot_roofline(peak, bw, pts))
    assert "FLOP/byte" in ax.get_xlabel() and "GFLOP/s" in ax.get_ylabel()
    lines = _lines(ax)
    roof = lines["roof of this machine"]
    for x, y in zip(roof.get_xdata(), roof.get_ydata()):
        assert y == pytest.approx(min(peak, x * bw) / 1e9)
    for p in pts:
        ln = lines[p.label]
        assert ln.get_xdata()[0] == pytest.approx(p.flops / p.bytes)
        assert ln.get_ydata()[0] == pytest.approx(p.flops / p.seconds / 1e9)
    ridge = [ln for k, ln in lines.items() if k.startswith("ridge point")][0]
    assert ridge.get_xdata()[0] == pytest.approx(peak / bw)


def test_roofline_point_rejects_bad_values():
    with pytest.raises(ValueError, match="seconds"):
        roofline.RooflinePoint("x", 1.0, 1.0, 0.0)
    with pytest.raises(TypeError, match="RooflinePoint"):
        plots.plot_roofline(1e9, 1e9, [(1, 2)])


def test_prefill_split_adds_up_to_prefill_flops():
    for name in ("mistral-7b", "llama-3-8b", "gpt2-small"):
        m = get_model(name)
        for p in (1, 100, 8192):
            s = roofline.prefill_flop_split(m, p)
            assert s["weights"] + s["lm_head"] + s["attention"] == pytest.approx(s["total"], rel=1e-12)
            assert s["total"] == estimate(m, "h100-sxm", p, 1).prefill.flops
            assert s["weights"] == 2 * m.block_params * p
            assert s["attention"] == 2 * m.layers * m.heads * m.attn_dim * p * p


def test_attention_crossover_is_where_the_terms_meet():
    m = get_model("mistral-7b")
    x = roofline.attention_crossover(m)
    assert x == pytest.approx(m.block_params / (m.layers * m.heads * m.head_dim))
    p = round(x)
    s = roofline.prefill_flop_split(m, p)
    assert s["attention"] == pytest.approx(s["weights"], rel=1 / p)
    assert roofline.attention_share(m, 1000) < 0.05 < 0.4 < roofline.attention_share(m, 100_000)


def test_attention_share_plot_uses_prefill_flops():
    lengths = [128, 1024, 8192, 65536, 131072]
    ax = _labels_ok(plots.plot_attention_share(["llama-3-8b", "qwen2.5-7b", "mistral-7b"], lengths))
    lines = _lines(ax)
    for name in ("llama-3-8b", "qwen2.5-7b"):
        window = get_model(name).max_positions
        inside = [p for p in lengths if p <= window]
        ln = lines[name]
        assert list(ln.get_xdata()) == inside           # each line stops at the model's context window
        assert list(ln.get_ydata()) == pytest.approx([roofline.attention_share(name, p) for p in inside])
    # Llama-3-8B's crossover (53,250) lies past its 8192-token window: not marked; Qwen2.5-7B's is
    assert not any("53,250" in k for k in lines)
    assert any(f"{roofline.attention_crossover('qwen2.5-7b'):,.0f}" in k for k in lines)
    # a sliding-window model's full-causal count is an upper bound past the window, and the legend says so
    assert any(k.startswith("mistral-7b (upper bound past its 4,096-token sliding window") for k in lines)


def test_fit_line_recovers_a_line():
    b, k = roofline.fit_line([1, 2, 3, 4], [3.5, 5.5, 7.5, 9.5])
    assert (b, k) == pytest.approx((1.5, 2.0))
    with pytest.raises(ValueError, match="distinct"):
        roofline.fit_line([2, 2], [1, 2])


@dataclass
class _Timing:
    prompt_tokens: int
    seconds: float
    q1_seconds: float
    q3_seconds: float


def test_ttft_plot_shows_measurements_fit_and_prediction():
    ts = [_Timing(32, 0.010, 0.009, 0.012), _Timing(128, 0.030, 0.028, 0.031), _Timing(256, 0.061, 0.06, 0.07)]
    b, k = roofline.fit_line([t.prompt_tokens for t in ts], [t.seconds for t in ts])
    ax = _labels_ok(plots.plot_ttft_fit(ts, predicted=[(32, 0.005), (256, 0.04)]))
    assert "ms" in ax.get_ylabel() and "tokens" in ax.get_xlabel()
    fit = [ln for lab, ln in _lines(ax).items() if lab.startswith("fit b + k·n")][0]
    assert list(fit.get_ydata()) == pytest.approx([b * 1e3, (b + k * 256) * 1e3])
    measured = ax.containers[0].lines[0]
    assert list(measured.get_ydata()) == pytest.approx([10.0, 30.0, 61.0])
    pred = _lines(ax)["predicted (roofline, this machine)"]
    assert list(pred.get_ydata()) == pytest.approx([5.0, 40.0])


def test_tpot_plot_takes_several_predictions():
    ts = [_Timing(16, 0.004, 0.004, 0.005), _Timing(240, 0.005, 0.0045, 0.006)]
    ax = _labels_ok(plots.plot_tpot_measured(ts, {"a": [(16, 0.001), (240, 0.002)], "b": [(16, 0.003)]}))
    lines = _lines(ax)
    assert list(lines["a"].get_ydata()) == pytest.approx([1.0, 2.0]) and list(lines["b"].get_ydata()) == [3.0]
    with pytest.raises(TypeError, match="prompt_tokens"):
        plots.plot_tpot_measured([object()])


def test_batching_plot_uses_the_estimator_and_the_critical_batch():
    batches = [1, 4, 16, 64, 256, 1024]
    hd = measurements.h200()["weights_only_decode_step_cuda_graph"]["by_batch"]
    meas = [(r["batch"], r["batch"] / (r["ms"] / 1e3)) for r in hd]
    ax = _labels_ok(plots.plot_batching("mistral-7b", "h200", batches, context=1, measured=meas))
    lines = _lines(ax)
    pred = [ln for k, ln in lines.items() if k.startswith("predicted")][0]
    for b, tps in zip(pred.get_xdata(), pred.get_ydata()):
        e = estimate("mistral-7b", "h200", 1, 1, batch=int(b))
        assert tps == pytest.approx(b / e.tpot)
    h = get_hardware("h200")
    crit = [ln for k, ln in lines.items() if k.startswith("critical batch")][0]
    assert crit.get_xdata()[0] == pytest.approx(h.flops("fp16") * 2 / (2 * h.bandwidth))
    assert list(lines["measured"].get_ydata()) == pytest.approx([m[1] for m in meas])
    curve = roofline.batch_curve("mistral-7b", "h200", [1, 2048], context=1)
    assert curve[0][2] == "memory" and curve[1][2] == "compute"


def test_total_vs_generated_is_ttft_plus_n_minus_1_tpot():
    pts = roofline.total_vs_generated("mistral-7b", "h100-sxm", 500, [1, 50, 1050])
    for n, total in pts:
        e = estimate("mistral-7b", "h100-sxm", 500, n)
        assert total == e.total == pytest.approx(e.ttft + (n - 1) * e.tpot)
    ax = _labels_ok(plots.plot_total_vs_generated("mistral-7b", "h100-sxm", 500, [1, 100, 2000], marks=[50, 1050]))
    line = [ln for ln in ax.get_lines() if ln.get_label().startswith("mistral-7b")][0]
    assert list(line.get_xdata()) == [1, 50, 100, 1050, 2000]
    assert list(line.get_ydata()) == pytest.approx([estimate("mistral-7b", "h100-sxm", 500, n).total
                                                    for n in (1, 50, 100, 1050, 2000)])


# --------------------------------------------------------------------------------------------------
# ex06
# --------------------------------------------------------------------------------------------------
def test_expected_answers_come_from_course_lib():
    a100, h100 = get_hardware("a100-40gb"), get_hardware("h100-sxm")
    assert ex06.q1.expected == pytest.approx(2 * 7e9 * 1000 / a100.flops("fp16") * 1e3)
    assert ex06.q2.expected == pytest.approx(8)
    assert ex06.q3.expected == pytest.approx(weight_bytes(7e9, "fp16") / a100.bandwidth * 1e3)
    e = estimate("llama-3-8b", "h100-sxm", 4000, 50)
    assert ex06.q5.expected == pytest.approx(e.tps)
    assert ex06.q6.expected == math.ceil(h100.flops("fp16") / (2 * h100.bandwidth))   # a whole batch
    assert ex06.q8.expected == pytest.approx(0.4 + 150 * 0.012)


def test_source_recipe_and_step_count_mistakes_are_recognised():
    a100 = get_hardware("a100-40gb")
    recipe_ms = 2 * 7e9 / a100.flops("fp16") * 1e3
    r = ex06.q3.evaluate(recipe_ms)
    assert not r.correct and "source material's recipe" in r.feedback
    assert ex06.q3.expected / recipe_ms > 100          # two orders of magnitude (about 200 at equal utilisation)
    r = ex06.q4.evaluate(lambda ttft, tpot, n: ttft + n * tpot)
    assert not r.correct and "n - 1" in r.feedback
    e = estimate("llama-3-8b", "h100-sxm", 4000, 50)
    r = ex06.q5.evaluate(50 / (e.ttft + 50 * e.tpot))
    assert not r.correct and "n - 1 decode steps" in r.feedback


# --------------------------------------------------------------------------------------------------
# Notebooks
# --------------------------------------------------------------------------------------------------
#: the measuring calls and host reads of the lesson: each must be handed to measured(key, ...), never called directly
MEASURES = re.compile(r"(?<![/\w.])(?:probes|model_timing)\.measure_\w+|calibrate\.calibrate\b"
                      r"|(?<![/\w])device_name\b|(?:machine\.)?MachineMeasurements\.collect")
THROUGH = re.compile(r"measured\(f?\"[\w/{}]+\", (lambda: )?$")


def test_every_measurement_goes_through_measured(nb_paths):
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    uses = [(m.group(0), bool(THROUGH.search(line[:m.start()]))) for c in code for line in c.source.splitlines()
            if not line.lstrip().startswith(("from ", "import ")) for m in MEASURES.finditer(line)]
    assert len(uses) >= 9
    assert all(ok for _, ok in uses), [name for name, ok in uses if not ok]
    src = "\n".join(c.source for c in code)
    for u in ("measure_prefill", "measure_decode_contexts", "measure_decode", "measure_matmul_flops",
              "measure_copy_bandwidth", "measure_gemv", "calibrate.calibrate", "predict_tpot"):
        assert u in src
    assert "TinyLM(" in src and "cache(lambda: TinyLM(" in src      # built only when something is measured live
    # replayed, every output is a function of the recording: only the live widget is left out of nbval
    ignored = [c for c in code if "nbval-ignore-output" in c.metadata.get("tags", [])]
    assert ignored and all("prefill_decode_explorer(" in c.source for c in ignored)


def test_cached_tokens_wait_for_lesson_07(nb_paths):
    """P_c (cached tokens) is lesson 07's; lesson 06 shows its formulas with nothing cached."""
    from nbtext import shown_text
    text = shown_text(nb_paths.lesson)
    assert "P_{c}" not in text and "P_{new}" not in text


def test_the_single_max_is_shown_against_the_per_operator_sum(nb_paths):
    from nbtext import shown_text
    text = shown_text(nb_paths.lesson)
    step = estimate("llama-3-8b", "h100-sxm", prompt_tokens=512, new_tokens=2, batch=512).decode_first
    from course_lib.core.units import format_time
    assert f"**{format_time(step.time)}**" in text and f"**{format_time(step.single_max_time)}**" in text


def test_the_h200_eager_figures_are_one_set_ups_suspect_measurement(nb_paths):
    from nbtext import shown_text
    text = shown_text(nb_paths.lesson)
    assert "one set-up's measurement" in text and "inconsistent" in text
    assert "17x" not in text and "efficiency 0.031" not in text


def test_lesson_reproduces_the_source_recipe_and_its_gap(nb_paths):
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    assert any("source-quote" in c.metadata.get("tags", []) for c in nb.cells)
    text = "\n".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []))
    src = estimate("source-7b", "a100-40gb", 500, 200, compute_efficiency=0.6)
    assert f"**{src.tpot / src.source_recipe_tpot:.0f} times too fast**" in text
    assert f"**{roofline.attention_crossover('llama-3-8b'):,.0f} tokens**" in text
    assert "sliding window" in text     # why Mistral-7B (v0.1) is not the section 4 example


def test_exercise_copy_hides_the_solutions_cell_for_cell(nb_paths):
    nb = nbformat.read(nb_paths.solution, as_version=4)
    ex = nbformat.read(nb_paths.exercise, as_version=4)
    assert "### BEGIN nb_paths.solution" not in "\n".join(c.source for c in ex.cells)
    assert len(ex.cells) == len(nb.cells)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in ex.cells]
    assert ids == [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]


def test_reading_flags_the_sliding_window_upper_bound():
    long = prefill_decode_reading("mistral-7b", "h100-sxm", prompt_tokens=8192, new_tokens=2)
    assert "sliding window" in long.details_html and "upper bound" in long.details_html
    assert "sliding window" not in prefill_decode_reading("mistral-7b", "h100-sxm", prompt_tokens=4096).details_html
    assert "sliding window" not in prefill_decode_reading("llama-3-8b", "h100-sxm", prompt_tokens=8192).details_html


def test_roofline_helpers_validate_and_match_the_formulas():
    assert roofline.compute_time(2e12, 1e12) == 2.0 and roofline.memory_time(1e9, 1e9, 0.5) == 2.0
    assert roofline.critical_batch("h200", "fp16") == pytest.approx(
        get_hardware("h200").flops("fp16") * 2 / (2 * get_hardware("h200").bandwidth))
    c = roofline.latency_conventions(0.5, 0.01, 101)
    assert (c.total, c.total_n_tpot) == pytest.approx((1.5, 1.51)) and c.tokens_per_second == pytest.approx(101 / 1.5)
    assert roofline.relative_error(2.0, 2.5) == pytest.approx(0.25) and roofline.relative_error(2.0, 1.0) == -0.5
    m = get_model("mistral-7b")
    assert roofline.decode_step_bytes(m, 2001) == m.decode_weight_bytes("fp16") + 2001 * m.kv_bytes_per_token("fp16")
    assert roofline.prefill_flops(m, 100, dense=True) > roofline.prefill_flops(m, 100)
    assert roofline.RooflinePoint("decode", 2e6, 4e6, 1e-3).bound(1e12, 1e11) == "memory"
    for call, match in [(lambda: roofline.compute_time(1e300, 1e-300), "flops|not finite"),
                        (lambda: roofline.memory_time(-1, 1e9), "nbytes"),
                        (lambda: roofline.latency_conventions(0.1, 0.01, 0), "n"),
                        (lambda: roofline.relative_error(0, 1), "measured"),
                        (lambda: roofline.relative_error(2.0, -1), "predicted"),   # a time is never negative
                        (lambda: roofline.relative_error(3, 0), "predicted"),      # issue 32: it gave -1.0
                        (lambda: roofline.roofline_curve(1e12, 1e11, 10, 1), "hi")]:
        with pytest.raises(ValueError, match=match):
            call()
    with pytest.raises(TypeError, match="xs"):
        roofline.fit_line(["a", "b"], [1, 2])


# --- what the stored (quiet) run and a recorded busy run let the lesson say ----------------------------------
def test_the_stored_run_says_the_rerun_advice_once_and_no_busy_warning(repo_root):
    from nbtext import shown_text

    from course_lib.lessons.claims.gemv import RERUN_ADVICE
    text = shown_text(repo_root / "notebooks" / "06_prefill_vs_decode.ipynb")
    assert text.count(RERUN_ADVICE) == 1
    assert "a ridge point that low" not in text and "a busy machine?" not in text   # the ridge warning: batch 1 only
    per, single, less = re.search(r"the step costs \*\*([\d.]+) ms\*\*; one max over the whole step gives "
                                  r"\*\*([\d.]+) ms\*\*, (\d+)% less", text).groups()
    assert int(less) == round(100 * (1 - float(single) / float(per)))      # 14.8 / 18.0: 18 % less, not 22 %
    assert "stands for this machine" in text and "not this machine's" not in text
    # section 9's calibration reuses section 5's copy (same settings); the matmul ran at 1 thread after a thread retry,
    # so the calibration times it again at 2 and says why
    assert re.search(r"\| copy \(read \+ write\) \| [\d.]+ GB/s, 2 threads \| section 5's, reused", text)
    row = re.search(r"\| matmul fp32 \| ([\d.]+) GFLOP/s, n = 1024, 1 thread \| timed again, ([\d.]+) GFLOP/s "
                    r"\(n = 1024, 2 threads\): section 5's cannot stand in, it ran at 1 thread, the calibration's "
                    r"probes at 2 threads \|", text)
    assert row and float(row[1]) != float(row[2])


def test_a_busy_runs_critical_batch_and_latency_table_are_labelled_as_this_runs():
    """The recorded busy run (tests/fixtures/recordings/busy/06.json): its matmul probe stalled, so the
    calibration, the critical batch and the latency table built on its TPOT are this run's, not the machine's."""
    import json

    from replay import RECORDINGS

    from course_lib.core.claims import gemv as gemv_claims
    from course_lib.core.claims import phases
    from course_lib.lessons.claims.gemv import this_run_note
    from course_lib.lessons.claims.phases import fit_reading, say
    from course_lib.measure import machine
    from course_lib.measure.record import decode
    rec = {k: decode(v[0]) for k, v in json.loads((RECORDINGS / "busy" / "06.json").read_text())["results"].items()}
    me = machine.this_machine(rec["06/machine"])
    calib = gemv_claims.calibration(me.bandwidth, rec["06/copy"], rec["06/gemv"], {"fp32": rec["06/matmul"]})
    assert calib.relation == "unsettled" and "not this machine's" in this_run_note(calib)
    by_context, by_batch, prefill = rec["06/decode_contexts"], rec["06/decode_batch"], rec["06/prefill"]
    step1 = phases.same_step({"a": by_batch, "b": by_context[0]})
    inputs = phases.latency_inputs(prefill[-1], by_context[0], step1)
    assert inputs.relation == "unsettled" and "not this machine's" in say(inputs)
    lengths = [t.prompt_tokens for t in prefill]
    ttft = phases.ttft_vs_prompt(lengths, prefill, fit=(0.4, 1e-3))
    assert "measures anything" in fit_reading(ttft, 0.1, basis=calib)     # no slope read off a stalled matmul


def _calls(code: str, name: str) -> list[str]:
    """The argument text of every call ``name(...)`` in ``code`` (parentheses matched)."""
    out = []
    for m in re.finditer(rf"(?<![\w.]){name}\(", code):
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        out.append(code[m.end():i - 1])
    return out


def test_every_measured_sentence_has_the_reference_run_beside_it(nb_paths):
    """Issue 29: an undecided sentence shows the stored reference run's, labelled. Every claim lesson 06 says on its
    measurements passes ``ref=`` (the same claim from ``reference("06")``); only the claims on catalog figures
    (the H100's operators) or on intensities, which no timing can unsettle, go without."""
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    calls = _calls(code, "say") + _calls(code, "say_floor")
    bare = [c for c in calls if "ref=" not in c]
    assert len(calls) >= 12
    assert all(re.search(r"single_max_vs_operators|\bsides\b|pf_side|\broof\)|\broof$", c) for c in bare), bare


def test_the_reference_runs_latency_inputs_name_their_numbers():
    """The latency table's claim says nothing when settled (the table is the sentence); beside a busy run's table
    the reference run's must say what its table would be built on."""
    from course_lib.core.claims import phases
    from course_lib.lessons.claims.phases import say
    from course_lib.lessons.claims.reference import reference
    ref = reference("06")
    ctx, batch, prefill = ref["06/decode_contexts"], ref.every("06/decode_batch"), ref["06/prefill"]
    settled = phases.latency_inputs(prefill[-1], ctx[0], phases.same_step({"a": batch[0], "b": ctx[0]}))
    noisy = phases.latency_inputs(prefill[-1], [0.1, 0.2, 0.4, 0.15, 0.3])
    assert settled.relation == "settled" and say(settled) == ""
    text = say(noisy, ref=settled)
    assert "**Reference run**" in text and format_time(ctx[0].seconds) in text.split("Reference run")[1]
