"""Lesson 05 (GEMV timing): figures, the measured questions of ex05, and the notebooks' structure.

* the figures (``course_lib.lessons.plots.gemv``) carry titles and axis labels with units, and plot exactly
  the rows' own values (achieved GB/s, bytes / bandwidth, times) and the H200's measured rows;
* ex05's fixed answers come from course_lib; q7 and q8 are functions of the measured ``row``, checked on
  reference rows and on the learner's own row;
* every measurement of the lesson and its exercise set goes through ``measured(...)`` (so nbval replays the
  recording and compares every cell); the verdicts are the claims'; the full sweep is behind
  ``FULL_SWEEP = False``; the exercise source has an answer and a grade cell per question.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import nbformat
import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from course_lib import get_hardware, get_model

from course_lib.measure import probes

from course_lib.core import measurements
from course_lib.checks import ex05
from course_lib.lessons.plots import label_has_unit
from course_lib.lessons.plots import gemv as plots


@pytest.fixture(scope="module")
def nb_paths(repo_root):
    """This lesson's notebooks (paths under conftest's ``repo_root``)."""
    return SimpleNamespace(lesson=repo_root / "notebooks" / "05_gemv_timing.ipynb",
                           solution=repo_root / "solutions" / "05_gemv_timing.ipynb")


def row(m, k, dtype="fp32", seconds=1e-3, rotate=True, q1=None, q3=None):
    b = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
    mb = m * k * b
    return probes.GemvResult(m=m, k=k, dtype=dtype, device="cpu", element_bytes=b, bytes=(m * k + m + k) * b,
                            flops=2 * m * k, seconds=seconds, q1_seconds=q1 or seconds, q3_seconds=q3 or seconds,
                            min_seconds=q1 or seconds, repeats=5, number=1, rotate=rotate,
                            buffers=1 if not rotate else 9, working_set_bytes=mb * (9 if rotate else 1),
                            llc_bytes=32 * 2**20, threads=2)


ROTATED = [row(256, 256, seconds=2e-5), row(2048, 2048, seconds=1e-3), row(8192, 8192, seconds=2e-2)]
SAME = [row(256, 256, seconds=4e-6, rotate=False), row(2048, 2048, seconds=8e-4, rotate=False),
        row(8192, 8192, seconds=2e-2, rotate=False)]
CACHES = {"L1d": 32 * 2**10, "L2": 2**20, "L3": 32 * 2**20, "LLC": 32 * 2**20}


def _labels_ok(fig):
    ax = fig.axes[0]
    assert ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    return ax


def test_bandwidth_vs_size_plots_each_rows_gb_per_s_and_marks_caches():
    fig = plots.plot_bandwidth_vs_size({"rotated": ROTATED, "same": SAME}, caches=CACHES, copy_bandwidth=20e9)
    ax = _labels_ok(fig)
    assert "GB/s" in ax.get_ylabel() and "bytes" in ax.get_xlabel()
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    for label, rows in (("rotated", ROTATED), ("same", SAME)):
        assert list(lines[label].get_xdata()) == [r.matrix_bytes for r in rows]
        assert list(lines[label].get_ydata()) == pytest.approx([r.gb_per_s for r in rows])
    vlines = {k: ln for k, ln in lines.items() if k.endswith("cache: " + k.split(": ")[-1]) and "cache" in k}
    assert {ln.get_xdata()[0] for ln in vlines.values()} == {32 * 2**10, 2**20, 32 * 2**20}  # LLC == L3: once
    assert lines["copy ceiling (read + write)"].get_ydata()[0] == pytest.approx(20.0)


def test_predicted_vs_measured_uses_bytes_over_bandwidth():
    bw = 15e9
    ax = _labels_ok(plots.plot_predicted_vs_measured(ROTATED, bw))
    pts = [ln for ln in ax.get_lines() if ln.get_label() == "fp32"][0]
    assert list(pts.get_xdata()) == pytest.approx([r.bytes / bw * 1e6 for r in ROTATED])
    assert list(pts.get_ydata()) == pytest.approx([r.seconds * 1e6 for r in ROTATED])
    assert "µs" in ax.get_xlabel() and "µs" in ax.get_ylabel()


def test_dtype_times_bars_are_measured_and_ticks_are_predicted():
    rows = [row(1024, 1024, "fp32", 4e-4), row(1024, 1024, "fp16", 3e-3), row(1024, 1024, "bf16", 1e-3)]
    ax = _labels_ok(plots.plot_dtype_times(rows, 10e9))
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == pytest.approx(sorted(r.seconds * 1e3 for r in rows))
    ticks = {ln.get_label(): ln.get_ydata()[0] for ln in ax.get_lines()}
    for r in rows:
        assert ticks[f"{r.dtype} bytes / bandwidth"] == pytest.approx(r.bytes / 10e9 * 1e3)
    # the predictions stay visible over their bars: black edges, drawn above, one marker shape per dtype
    from matplotlib.colors import to_rgba
    marks = [ln for ln in ax.get_lines() if ln.get_label().endswith("bytes / bandwidth")]
    assert all(to_rgba(ln.get_markeredgecolor()) == to_rgba("black") for ln in marks)
    assert all(ln.get_zorder() > max(p.get_zorder() for p in ax.patches) for ln in marks)
    assert len({ln.get_marker() for ln in marks}) == len(marks)


def test_machines_plot_uses_the_h200_measurements():
    h = measurements.h200()
    ax = _labels_ok(plots.plot_machines(ROTATED, 20e9, h))
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    copy = h["ceilings"]["copy_read_plus_write_GBps"]
    expect = sorted(h["gemv_fp16_eager"], key=lambda r: r["m"] * r["k"])
    assert list(lines["H200, fp16, eager torch.mv"].get_ydata()) == pytest.approx([r["GBps"] / copy for r in expect])
    assert list(lines["this machine"].get_ydata()) == pytest.approx([r.bandwidth / 20e9 for r in ROTATED])
    # the H200's own GB/s agree with bytes / time counted like bench.gemv_bytes (to the 4 digits published)
    for r in plots.h200_rows(h):
        assert r["bytes"] == probes.gemv_bytes(r["m"], r["k"], "fp16")
        assert r["bytes"] / r["seconds"] / 1e9 == pytest.approx(r["gb_per_s"], rel=2e-3)


def test_plots_reject_bad_input():
    with pytest.raises(ValueError, match="empty"):
        plots.plot_predicted_vs_measured([], 1e9)
    with pytest.raises(TypeError, match="GemvResult"):
        plots.plot_predicted_vs_measured([{"m": 1}], 1e9)
    with pytest.raises(ValueError, match="bandwidth"):
        plots.plot_predicted_vs_measured(ROTATED, 0)
    with pytest.raises(TypeError, match="series"):
        plots.plot_bandwidth_vs_size(ROTATED)


# --- ex05 ---------------------------------------------------------------------------------------
def test_fixed_answers_come_from_course_lib():
    b = probes.gemv_bytes(8192, 8192, "fp16")
    assert ex05.q1.expected == b
    assert ex05.q2.expected == pytest.approx(b / get_hardware("h200").bandwidth * 1e6)
    h = measurements.h200()
    r = [x for x in h["gemv_fp16_eager"] if x["m"] == 8192][0]
    assert ex05.q4.expected == pytest.approx(b / (r["us"] / 1e6) / (h["ceilings"]["copy_read_plus_write_GBps"] * 1e9))


@pytest.mark.parametrize("seconds", [0.02, 3e-4, 1.7])
def test_row_questions_are_functions_checked_on_the_learners_row(seconds):
    r = row(8192, 8192, "fp32", seconds)
    d = r.as_dict()
    gbps = lambda x: x["bytes"] / x["seconds"] / 1e9                                            # noqa: E731
    ms = lambda x: get_model("llama-3-8b").decode_weight_bytes("fp16") / (x["bytes"] / x["seconds"]) * 1e3  # noqa: E731
    assert ex05.q7.evaluate(gbps, measurement=d).correct and ex05.q7.evaluate(gbps).correct
    assert ex05.q7.evaluate(lambda x: x["gb_per_s"], measurement=d).correct
    assert ex05.q8.evaluate(ms, measurement=d).correct and ex05.q8.evaluate(ms, measurement=r).correct
    # a number typed from one printout is no function; a constant function fails on the other rows
    assert not ex05.q7.evaluate(r.gb_per_s, measurement=d).correct
    assert not ex05.q7.evaluate(lambda x: r.gb_per_s, measurement=d).correct
    wrong = ex05.q8.evaluate(lambda x: get_model("llama-3-8b").decode_weight_bytes("fp32")
                             / (x["bytes"] / x["seconds"]) * 1e3, measurement=d)
    assert wrong.correct is False and "fp32" in wrong.feedback
    assert ex05.q7.evaluate(lambda x: gbps(x) / x["element_bytes"], measurement=d).feedback.startswith(
        "That is elements per second")


def test_the_reference_rows_include_the_h200_row():
    r = [x for x in measurements.h200()["gemv_fp16_eager"] if x["m"] == 8192][0]
    h = ex05.ROWS[0]
    assert h["bytes"] == probes.gemv_bytes(8192, 8192, "fp16")
    assert h["bytes"] / h["seconds"] / 1e9 == pytest.approx(r["GBps"], rel=1e-4)


@pytest.mark.parametrize("bad", [3, None.__class__, {"m": 1}, "row"])
def test_a_bad_row_is_reported_not_raised(bad):
    res = ex05.q7.evaluate(lambda x: 1.0, measurement=bad)
    assert not res.correct and "row" in res.feedback
    with pytest.raises(AssertionError):
        ex05.q7.check(lambda x: 1.0, strict=True, row=bad)


def test_a_real_fast_measurement_checks_correct():
    r = probes.measure_gemv([(128, 96)], ["fp32"], repeats=2, min_block=1e-5, device="cpu", progress=False)[0]
    assert ex05.q7.check(lambda x: x["bytes"] / x["seconds"] / 1e9, row=r.as_dict()).correct


# --- notebooks ----------------------------------------------------------------------------------
#: the measuring calls and host reads of the lesson: each must be handed to measured(key, ...), never called directly
MEASURES = re.compile(r"(?<![/\w.])(?:probes|model_timing|bench)\.(?:measure_\w+|probe_dtypes|default_sizes)"
                      r"|(?<![/\w])(?:device_name|cache_sizes)\b|MachineMeasurements\.collect")
THROUGH = re.compile(r"measured\(f?\"[\w/{}]+\", (lambda: )?$")


def measuring_uses(source: str) -> list[tuple[str, bool]]:
    """(match, whether it is handed to measured) for every measuring name in a cell (imports excluded)."""
    out = []
    for line in source.splitlines():
        if line.lstrip().startswith(("from ", "import ")):
            continue
        for m in MEASURES.finditer(line):
            out.append((m.group(0), bool(THROUGH.search(line[:m.start()]))))
    return out


def test_every_measurement_goes_through_measured(nb_paths):
    for path in (nb_paths.lesson, nb_paths.solution):
        nb = nbformat.read(path, as_version=4)
        uses = [u for c in nb.cells if c.cell_type == "code" for u in measuring_uses(c.source)]
        assert uses, path
        assert all(ok for _, ok in uses), [name for name, ok in uses if not ok]
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    assert len([u for c in nb.cells if c.cell_type == "code" for u in measuring_uses(c.source)]) >= 10
    # the lesson's outputs are a function of the recording: nbval compares every cell
    assert not [c.source[:60] for c in nb.cells if "nbval-ignore-output" in c.metadata.get("tags", [])]
    assert any("FULL_SWEEP = False" in c.source for c in nb.cells if c.cell_type == "code")
    assert any("h200_record()" in c.source and ".gemv" in c.source for c in nb.cells if c.cell_type == "code")


def test_the_lessons_verdicts_come_from_the_claims(nb_paths):
    """No if/else verdict logic in the notebook: the sentences are the claims' (course_lib.lessons.claims.gemv)."""
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    branches = re.findall(r"^\s*(?:if|elif|else)\b.*:$", code, re.M)
    assert branches == []
    for name in ("gemv_vs_copy", "cache_reuse", "beyond_cache", "time_vs_size", "small_matrix", "dtype_summary",
                 "decode_from_gemv", "model_vs_estimate", "calibration"):
        assert f"claims.{name}(" in code
    # each measurement once: the worked example is the sweep's largest row, never a second timing of it
    assert code.count('measured("05/rotated"') == 1 and '"05/big"' not in code and "probe_dtypes" not in code


def test_measured_questions_are_graded_on_the_measured_row(nb_paths):
    """Set 05's own grade-cell rule (the generic structure is tests/test_solutions_structure.py's): q3 checks the
    learner's function ``gemv_time``, and exactly the measured questions pass the measured ``row``."""
    nb = nbformat.read(nb_paths.solution, as_version=4)
    grades = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    for q in ex05.QUESTIONS:
        c = grades[f"{q.id}-grade"]
        answer = {"q3": "gemv_time", "q7": "achieved_gbps", "q8": "decode_ms"}.get(q.id, f"answer_{q.id}")
        assert f"q.{q.id}.check({answer}, strict=True" in c.source
        assert ("row=row" in c.source) == isinstance(q, ex05.RowQuestion)


# --- the lesson as a learner on a busy laptop meets it ------------------------------------------------
def _numbers(pattern: str, text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(pattern, text)]


def _consistent(text: str) -> None:
    """What must hold in any run, quiet or busy: no sentence contradicts the numbers printed beside it."""
    from course_lib.lessons.claims.gemv import ADVICE, RERUN_ADVICE, UNDECIDED_MARK
    assert text.count(RERUN_ADVICE) == 1 and ADVICE not in text          # the advice once, in the note
    undecided = text.count(UNDECIDED_MARK + ": your timings are unreliable")
    assert text.count("**Reference run**") >= undecided                  # each undecided one has the reference
    # the worked example: the printed ratio is the sentence's ratio
    printed = _numbers(r"= (\d+\.\d+) x the copy bandwidth", text)
    said = _numbers(r"\*\*(\d+\.\d+)\*\* times the copy's", text)
    assert printed and printed[0] == said[0]
    # §4's table lists each matrix once (the 8192² GEMV is timed once)
    table = text.split("| matrix | predicted (bytes / copy) |")[1].split("\n\n")[0]
    shapes = re.findall(r"^\| (\d+ × \d+) \|", table, re.M)
    assert shapes and len(shapes) == len(set(shapes))
    # each GEMV is measured once: §7's fp32 row is the sweep's row of that size (reuse=rotated), not a second timing
    sweep = {shape: float(gb) for shape, gb in
             re.findall(r"^\| (\d+ × \d+) \| fp32 \| [^|]+\| yes \| [^|]+\| [^|]+\| ([\d.]+) \|", text, re.M)}
    fp32 = re.findall(r"^\| fp32 \| (\d+ × \d+) \| ([\d.]+) GB/s \|", text, re.M)
    assert fp32 and all(float(gb) == pytest.approx(sweep[shape], rel=5e-3) for shape, gb in fp32)
    # a per-call excess called overhead is within the bound it names
    for excess, bound in re.findall(r"([\d.]+ µs) more, within the ([\d.]+ µs) a call can cost", text):
        assert float(excess.split()[0]) <= float(bound.split()[0]) <= 10
    # a calibration from a stalled matmul probe is never presented as the machine's
    if re.search(r"matmul fp32: .*\(n = 256\)", text):
        assert "not this machine's" in text and "stands for this machine" not in text.split("Reference run")[0]
    return undecided


def test_the_stored_quiet_run_decides_everything(nb_paths):
    from nbtext import shown_text
    text = shown_text(nb_paths.lesson)
    assert _consistent(text) == 0 and "**Reference run**" not in text and "settles it" not in text


def test_under_load_lesson_05_decides_its_main_claims(nb_paths):
    """The recorded busy run (tests/fixtures/recordings/busy, README there) replayed through the whole lesson."""
    from replay import RECORDINGS, executed, shown
    text = shown(executed(nb_paths.lesson, RECORDINGS / "busy"))
    assert _consistent(text) <= 3
    assert "**Reference run**" in text                # the run was busy: the reference shows somewhere
