"""Lesson 08 (predicted vs measured): figures, exercise set 08 and the notebooks' structure.

* the figures (``course_lib.plots.compare``) carry titles and axis labels with units and plot exactly
  the rows' own predicted/measured times (in ms) and ``compare.summary``'s efficiencies;
* ex08's expected answers equal the ``course_lib.compare`` cases they are about;
* every cell of the lesson that measures is tagged ``nbval-ignore-output``; the exercise source has a
  prompt, an answer and a grade cell per question.
"""
from __future__ import annotations

from types import SimpleNamespace

import nbformat
import pytest

pytest.importorskip("matplotlib")

from course_lib.core import compare

from course_lib.core import measurements
from course_lib.checks import ex08
from course_lib.lessons.plots import label_has_unit
from course_lib.lessons.plots import compare as plots


@pytest.fixture(scope="module")
def nb_paths(repo_root):
    """This lesson's notebooks (paths under conftest's ``repo_root``)."""
    return SimpleNamespace(lesson=repo_root / "notebooks" / "08_predicted_vs_measured.ipynb",
                           solution=repo_root / "solutions" / "08_predicted_vs_measured.ipynb")


@pytest.fixture(scope="module")
def rows():
    return compare.published_cases() + compare.h200_cases("datasheet")


def _labels_ok(fig):
    ax = fig.axes[0]
    assert ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    return ax


def test_comparison_plot_shows_each_groups_times_in_ms_and_the_identity_line(rows):
    fig = plots.plot_comparison(rows)
    ax = _labels_ok(fig)
    assert "(ms)" in ax.get_xlabel() and "(ms)" in ax.get_ylabel() and "predicted" in ax.get_xlabel()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    groups = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    for g, rs in groups.items():
        assert list(lines[g].get_xdata()) == [r.predicted_s * 1e3 for r in rs]
        assert list(lines[g].get_ydata()) == [r.measured_s * 1e3 for r in rs]
    ident = lines["measured = predicted (y = x)"]
    assert list(ident.get_xdata()) == list(ident.get_ydata())
    lo, hi = ident.get_xdata()
    assert lo < min(r.predicted_s * 1e3 for r in rows) and hi > max(r.measured_s * 1e3 for r in rows)


def test_comparison_plot_groups_by_any_field(rows):
    ax = plots.plot_comparison(rows, by="source").axes[0]
    labels = {ln.get_label() for ln in ax.get_lines()}
    assert {"published", "h200"} <= labels


def test_efficiency_plot_bars_equal_the_summary(rows):
    fig = plots.plot_efficiencies(rows)
    ax = _labels_ok(fig)
    stats = compare.summary(rows)
    widths = [p.get_width() for p in ax.patches]
    assert widths == [s["geomean_efficiency"] for s in stats]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(ticks) == sorted(f"{s['group']} ({s['cases']})" for s in stats)
    assert "fraction" in ax.get_xlabel()


@pytest.mark.parametrize("call, exc", [
    (lambda: plots.plot_comparison([]), ValueError),
    (lambda: plots.plot_comparison([1, 2]), TypeError),
    (lambda: plots.plot_comparison(compare.h200_cases()[0]), TypeError),
    (lambda: plots.plot_comparison(compare.h200_cases(), by="colour"), ValueError),
    (lambda: plots.plot_efficiencies(None), TypeError),
])
def test_plot_bad_input(call, exc):
    with pytest.raises(exc):
        call()


# --- exercise set 08 -------------------------------------------------------------------------------
def test_ex08_answers_are_the_compare_cases():
    pub = compare.published_cases()
    ds = compare.h200_cases("datasheet")
    assert ex08.q1.expected == pytest.approx(compare.find(pub, "llamacpp-llama-2-7b-f16-rtx-4090-24gb/tg").efficiency,
                                             rel=1e-12)
    assert ex08.q3.expected == pytest.approx(compare.find(ds, "h200/hf/tpot-c2048").excess_s * 1e3, rel=1e-12)
    full, hit = compare.find(ds, "h200/hf/prefix-full"), compare.find(ds, "h200/hf/prefix-cached")
    assert ex08.q8.expected == pytest.approx(full.predicted_s / hit.predicted_s, rel=1e-12)
    f8 = measurements.h200()["weights_only_decode_step_fp16_vs_fp8"]
    assert 1 < f8["fp16"]["ms"] / f8["fp8_e4m3"]["ms"] < 2          # q7's option: less than 2x
    assert f8["fp8_e4m3"]["GBps"] < f8["fp16"]["GBps"]


def test_ex08_geomean_reference_matches_compare_summary():
    rows = compare.h200_cases("measured")
    pairs = [(r.predicted_s, r.measured_s) for r in rows]
    (s,) = compare.summary(rows, by="source")
    assert ex08.geomean_efficiency_reference(pairs) == pytest.approx(s["geomean_efficiency"], rel=1e-12)


# --- notebooks -------------------------------------------------------------------------------------
def test_measuring_cells_are_ignored_by_nbval(nb_paths):
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    def code_lines(c):  # the import lines name measure_machine without measuring anything
        return "\n".join(ln for ln in c.source.splitlines() if not ln.lstrip().startswith(("from ", "import ")))
    measuring = [c for c in nb.cells if c.cell_type == "code"
                 and any(k in code_lines(c) for k in ("measure_", "machine_cases", "mine"))]
    assert measuring
    for c in measuring:
        assert "nbval-ignore-output" in c.metadata.get("tags", []), c.source[:80]


def test_lesson_uses_course_lib_compare_and_its_plots(nb_paths):
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for name in ("compare.published_cases()", 'compare.h200_cases("datasheet")', 'compare.h200_cases("measured")',
                 "compare.machine_cases(", "plot_comparison(", "plot_efficiencies("):
        assert name in code


def test_set_08_has_six_questions_two_of_them_multi_step():
    assert len(ex08.QUESTIONS) >= 6
    assert sum("Multi-step" in q.prompt for q in ex08.QUESTIONS) >= 2
