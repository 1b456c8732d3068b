"""Lesson 07 (first-token optimisation): the explorers, the figures, the lesson's numbers, ex07.

* the three explorers (``course_lib.lessons.widgets.caching``), driven in-process, show exactly what
  ``course_lib.core.caching`` computes for every control, and keep their CSS classes;
* the figures (``course_lib.lessons.plots.caching``) have titles and axis labels with units and plot
  ``course_lib.core.caching``'s values;
* the lesson's stored (deterministic) outputs contain the values the library computes now, and the
  measurement cells are marked ``nbval-ignore-output``;
* ex07's solutions pass and its expected values come from course_lib.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import nbformat
import pytest
from nbtext import shown_text

from course_lib import estimate, get_hardware, get_model, kv_cache_bytes

from course_lib.core import caching

from course_lib.core import measurements
from course_lib.checks import ex07
from course_lib.core.units import format_bytes, format_time

widgets = pytest.importorskip("ipywidgets")

from course_lib.lessons.plots import label_has_unit  # noqa: E402
from course_lib.lessons.plots.caching import (plot_cache_memory, plot_hit_rate_vs_budget,  # noqa: E402
                                      plot_measured_vs_predicted_ttft, plot_session_prefill,
                                      plot_ttft_hit_vs_miss, prefix_grid)
from course_lib.lessons.widgets.caching import (BUDGET_WORKLOAD, cache_budget_explorer, cache_budget_reading,  # noqa: E402
                                        prefix_cache_explorer, prefix_cache_reading, session_cache_explorer,
                                        session_cache_reading)


@pytest.fixture(scope="module")
def nb_paths(repo_root):
    """This lesson's notebooks (paths under conftest's ``repo_root``)."""
    return SimpleNamespace(lesson=repo_root / "notebooks" / "07_first_token_optimisation.ipynb",
                           solution=repo_root / "solutions" / "07_first_token_optimisation.ipynb")


# --------------------------------------------------------------------------------------------------
# Widgets
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix, new, h", [(4000, 100, 0.5), (0, 1, 0.0), (16384, 2048, 1.0), (1000, 7, 0.85)])
def test_prefix_explorer_shows_caching_values(prefix, new, h):
    w = prefix_cache_explorer()
    w.prefix.value, w.new.value, w.hit_rate.value = prefix, new, h
    r = caching.prefix_reuse("mistral-7b", "h200", prefix, new, block_tokens=16)
    assert w.miss.value == format_time(r.ttft_miss)
    assert w.hit.value == format_time(r.ttft_hit)
    assert w.expected.value == format_time(r.expected_ttft(w.hit_rate.value))
    assert f"{r.speedup:.2f}x" in w.speedup.value and f"{r.cached_tokens:,} tokens reused" in w.speedup.value
    assert w.reading == prefix_cache_reading(**w.settings())


def test_prefix_explorer_other_model_and_classes():
    w = prefix_cache_explorer("llama-3-8b", "h100-sxm", 2000, 50, 0.3, block_tokens=128)
    r = caching.prefix_reuse("llama-3-8b", "h100-sxm", 2000, 50, block_tokens=128)
    assert w.hit.value == format_time(r.ttft_hit) and r.cached_tokens == 1920
    assert "course-prefix-cache-explorer" in w._dom_classes
    for ctl, cls in [(w.prefix, "course-prefix-tokens"), (w.new, "course-new-tokens"), (w.hit_rate, "course-hit-rate"),
                     (w.miss, "course-ttft-miss"), (w.hit, "course-ttft-hit"), (w.expected, "course-ttft-expected"),
                     (w.speedup, "course-speedup")]:
        assert cls in ctl._dom_classes


@pytest.mark.parametrize("turns", [1, 5, 17, 50])
def test_session_explorer_shows_caching_values(turns):
    w = session_cache_explorer()
    w.turns.value = turns
    s = caching.session_cost("mistral-7b", "h200", 1000, 50, 200, turns)
    assert w.tokens_nocache.value == f"{caching.session_prefill_tokens(1000, 50, 200, turns, cached=False):,} tokens"
    assert w.tokens_cached.value == f"{caching.session_prefill_tokens(1000, 50, 200, turns, cached=True):,} tokens"
    assert w.time_nocache.value == format_time(s.cumulative_ttft_nocache[-1])
    assert w.time_cached.value == format_time(s.cumulative_ttft_cached[-1])
    assert "course-session-cache-explorer" in w._dom_classes and "course-turns" in w.turns._dom_classes
    assert "course-session-tokens-nocache" in w.tokens_nocache._dom_classes


@pytest.mark.parametrize("budget", [0.1, 1.0, 4.0])
def test_budget_explorer_shows_caching_values(budget):
    w = cache_budget_explorer()
    w.budget.value = budget
    m = get_model("mistral-7b")
    per = caching.cache_memory_bytes(m, 8192)
    n = int(budget * 1e9 // per)
    assert w.sessions.value.startswith(f"{n:,} session{'' if n == 1 else 's'} of 8,192 tokens")
    assert format_bytes(per) in w.sessions.value
    assert f"last {m.sliding_window:,} tokens" in w.sessions.value  # the window's cap is said, not silent
    reqs = caching.shared_prefix_workload(vocab=m.vocab, **BUDGET_WORKLOAD)
    (row,) = caching.hit_rate_vs_budget(reqs, [budget * 1e9], kv_cache_bytes(m, 1), 16)
    assert w.hit_rate.value == f"{row['hit_rate']:.1%} of requests hit"
    assert w.reading == cache_budget_reading(**w.settings())
    assert "course-cache-budget" in w.budget._dom_classes and "course-budget-hit-rate" in w.hit_rate._dom_classes


def test_explorers_reject_bad_settings():
    with pytest.raises(ValueError, match="hit_rate"):
        prefix_cache_reading(hit_rate=2)
    with pytest.raises(ValueError, match="prefix_tokens"):
        prefix_cache_explorer(prefix_tokens=-5)
    with pytest.raises(ValueError, match="user_tokens"):
        session_cache_reading(user_tokens=0)
    with pytest.raises(ValueError, match="budget_gb"):
        cache_budget_reading(budget_gb=0)


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------
def _line(fig, gid):
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == gid]
    return line


def _labels_ok(fig):
    ax = fig.axes[0]
    assert ax.get_title() and label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    return ax


def test_ttft_plot_data():
    fig = plot_ttft_hit_vs_miss("mistral-7b", "h200", new_tokens=100, max_prefix=8192, hit_rates=(0.5,), points=9)
    ax = _labels_ok(fig)
    assert "(ms)" in ax.get_ylabel() and "(tokens)" in ax.get_xlabel()
    xs = prefix_grid(8192, 9)
    rs = [caching.prefix_reuse("mistral-7b", "h200", p, 100) for p in xs]
    assert list(_line(fig, "miss").get_xdata()) == xs
    assert list(_line(fig, "miss").get_ydata()) == pytest.approx([r.ttft_miss * 1e3 for r in rs])
    assert list(_line(fig, "hit").get_ydata()) == pytest.approx([r.ttft_hit * 1e3 for r in rs])
    assert list(_line(fig, "expected:0.5").get_ydata()) == pytest.approx([r.expected_ttft(0.5) * 1e3 for r in rs])


def test_session_plot_data():
    fig = plot_session_prefill(1000, 50, 200, max_turns=12)
    ax = _labels_ok(fig)
    assert "(tokens)" in ax.get_ylabel()
    ts = list(range(1, 13))
    for label, cached in (("nocache", False), ("cached", True)):
        want = [caching.session_prefill_tokens(1000, 50, 200, t, cached=cached) for t in ts]
        assert list(_line(fig, label).get_ydata()) == want


def test_memory_plot_data():
    fig = plot_cache_memory("llama-3-8b", "h200", session_tokens=8192, max_sessions=20)
    ax = _labels_ok(fig)
    assert "(GB)" in ax.get_ylabel()
    assert list(_line(fig, "memory").get_ydata()) == pytest.approx(
        [caching.cache_memory_bytes("llama-3-8b", 8192, n) / 1e9 for n in range(1, 21)])
    free = _line(fig, "free").get_ydata()[0]
    assert free == pytest.approx((get_hardware("h200").capacity - get_model("llama-3-8b").weight_bytes("fp16")) / 1e9)


def test_hit_rate_plot_data_and_measured_bars():
    reqs = caching.shared_prefix_workload(requests=60, prefixes=4, prefix_tokens=64, suffix_tokens=8, vocab=100)
    rows = caching.hit_rate_vs_budget(reqs, [5e3, 2e4, 1e6], 100.0)
    fig = plot_hit_rate_vs_budget(rows)
    ax = _labels_ok(fig)
    assert "(GB)" in ax.get_xlabel() and "(%)" in ax.get_ylabel()
    assert list(_line(fig, "hit-rate").get_ydata()) == pytest.approx([100 * r["hit_rate"] for r in rows])
    assert list(_line(fig, "token-hit-rate").get_ydata()) == pytest.approx([100 * r["token_hit_rate"] for r in rows])
    bars = plot_measured_vs_predicted_ttft({"a": (0.1, 0.05), "b": (0.002, 0.003)})
    ax = _labels_ok(bars)
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == pytest.approx(sorted([100.0, 50.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="rows"):
        plot_hit_rate_vs_budget([])


# --------------------------------------------------------------------------------------------------
# The lesson's stored numbers and structure
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lesson(nb_paths):
    return nbformat.read(nb_paths.lesson, as_version=4)


def test_lesson_worked_example_numbers_are_current(nb_paths, lesson):
    text = shown_text(nb_paths.lesson)
    r = caching.prefix_reuse("mistral-7b", "h200", 4000, 100)
    for value in (format_time(r.ttft_miss), format_time(r.ttft_hit), format_time(r.expected_ttft(0.7))):
        assert value in text
    pc = measurements.h200()["hf_transformers_eager"]["prefix_cache"]
    assert format_time(pc["full_ms"] / 1e3) in text and format_time(pc["cached_ms"] / 1e3) in text
    s = caching.session_cost("mistral-7b", "h200", 1000, 50, 200, 5)
    assert format_time(s.cumulative_ttft_nocache[-1]) in text
    assert f"**{caching.sessions_fit('llama-3-8b', 'h200', 8192)}**" in text


#: the measuring calls and host reads of the lesson: each must be handed to measured(key, ...), never called directly
MEASURES = re.compile(r"(?<![/\w.])(?:probes|cache_timing)\.(?:measure_\w+|profile_prefill)"
                      r"|(?<![/\w.])calibrate\.calibrate\b|(?<![/\w])device_name\b|(?:machine\.)?MachineMeasurements\.collect")
THROUGH = re.compile(r"measured\(f?\"[\w/{}]+\", (lambda: )?$")


def test_every_measurement_goes_through_measured(lesson):
    uses = []
    for c in lesson.cells:
        if c.cell_type != "code":
            continue
        for line in c.source.splitlines():
            if line.lstrip().startswith(("from ", "import ")):
                continue
            uses += [(m.group(0), bool(THROUGH.search(line[:m.start()]))) for m in MEASURES.finditer(line)]
    assert len(uses) >= 9
    assert all(ok for _, ok in uses), [name for name, ok in uses if not ok]
    # only the widgets (and nothing measured) keep nbval-ignore-output: the rest replays the recording
    for c in lesson.cells:
        if "nbval-ignore-output" in c.metadata.get("tags", []):
            assert "explorer()" in c.source, c.source[:80]


def test_the_lessons_verdicts_come_from_the_claims(lesson):
    src = "\n".join(c.source for c in lesson.cells if c.cell_type == "code")
    for call in ("claims.calibrated_cases(", "claims.calibrated_summary(", "claims.prefix_cache(",
                 "claims.session_cache(", "claims.roofline_vs_measured(", "claims.profile_vs_measured(",
                 "claims.module_positions(", "claims.largest_gap("):
        assert call in src, call
    for gone in ("if not outside", "gap > 0", "ratio_text", "Timings on a shared machine vary"):
        assert gone not in src, gone


def test_solution_checks_and_expected_values():
    assert len(ex07.QUESTIONS) >= 6
    assert sum(1 for q in ex07.QUESTIONS if "Multi-step" in q.prompt) >= 2
    hit = estimate("mistral-7b", "h200", 4100, 1, cached_prefix_tokens=4000)
    assert ex07.q1.expected == pytest.approx(hit.ttft * 1e3)
    assert ex07.q6.expected == caching.sessions_fit("llama-3-8b", "h100-sxm", 8192)
    assert ex07.q1.check(ex07.q1.expected).correct and not ex07.q1.check(ex07.q1.expected * 1e-3).correct


def test_measured_vs_predicted_bars_take_any_number_of_series():
    cases = {"full": (0.3, 0.1, 0.28), "cached": (0.02, 0.005, 0.018)}
    fig = plot_measured_vs_predicted_ttft(cases, series=("measured", "roofline", "calibrated"))
    ax = _labels_ok(fig)
    for j, gid in enumerate(("measured", "roofline", "calibrated")):
        heights = [p.get_height() for p in ax.patches if p.get_gid() == gid]
        assert heights == pytest.approx([cases["full"][j] * 1e3, cases["cached"][j] * 1e3])
    with pytest.raises(ValueError, match="3 times"):
        plot_measured_vs_predicted_ttft({"full": (0.3, 0.1)}, series=("measured", "roofline", "calibrated"))
    with pytest.raises(ValueError, match="cases"):
        plot_measured_vs_predicted_ttft({})


def test_lesson_measured_demo_compares_roofline_and_calibrated(lesson):
    src = "\n".join(c.source for c in lesson.cells if c.cell_type == "code")
    for call in ("calibrate.calibrate, ", "cache_timing.calibration_shapes(",
                 "cache_timing.predict_prefix_ttft_calibrated(", "cache_timing.predict_session_ttft_calibrated(",
                 "caching.prefix_reuse(spec, me", "caching.session_cost(spec, me", "plot_measured_vs_predicted_ttft("):
        assert call in src, call


def test_the_stored_run_and_a_busy_run_read_against_their_numbers(repo_root):
    """The stored (quiet) run says the rerun advice once and calls its calibration settled; the recorded busy run
    (tests/fixtures/recordings/busy/07.json) has a matmul probe stalled at n = 256 and a session whose no-cache
    turns got faster: its calibration is this run's, not the machine's, and its session claim is noisy."""
    import json

    from nbtext import shown_text
    from replay import RECORDINGS

    from course_lib.core.claims import caching
    from course_lib.core.claims import gemv as gemv_claims
    from course_lib.lessons.claims.gemv import RERUN_ADVICE
    from course_lib.measure import machine
    from course_lib.measure.record import decode
    text = shown_text(repo_root / "notebooks" / "07_first_token_optimisation.ipynb")
    assert text.count(RERUN_ADVICE) == 1 and "stands for this machine" in text
    rec = {k: decode(v[0]) for k, v in json.loads((RECORDINGS / "busy" / "07.json").read_text())["results"].items()}
    me = machine.this_machine(rec["07/machine"])
    calib = gemv_claims.calibration(me.bandwidth, rec["07/copy"], [], {"fp32": rec["07/matmul"]})
    assert rec["07/matmul"].n == gemv_claims.MATMUL_FIRST_N and calib.relation == "unsettled"
    session = caching.session_cache(rec["07/session"])
    assert session.verdict == "noisy" and "the time fell" in session.reason
