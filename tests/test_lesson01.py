"""Lesson 01 (units): the converter widget, the numbers the lesson states, its exercise set.

* the converter's logic (``course_lib.lessons.widgets.units.convert``) agrees with ``course_lib.core.units``, and
  the widget, driven in-process, shows exactly what ``course_lib.core.units`` computes;
* every number the lesson states comes from ``course_lib``: the stored outputs contain the values
  the library computes now (nbval re-executes the notebook; these tests pin the claims);
* ``course_lib.lessons.prose``, which turns those numbers into Markdown;
* the exercise source ``solutions/01_units.ipynb`` (nbgrader cells, one answer and one grade cell per
  question of ``course_lib.checks.ex01``) and ex01's expected values.
"""
from __future__ import annotations

import html
import re
from types import SimpleNamespace

import nbformat
import pytest
from nbtext import shown_text
from hypothesis import given
from hypothesis import strategies as st

from course_lib import bytes_per_element, get_hardware, get_model, weight_bytes

from course_lib.core import measurements

from course_lib.core import units
from course_lib.checks import ex01
from course_lib.lessons.prose import count, details, formula, md, md_text, table
from course_lib.lessons.widgets.units import (CONVENTION_OPTIONS, DIGITS, Readings, UnitConverter, convert,
                                      render_readings, unit_converter)


@pytest.fixture(scope="module")
def nb_paths(repo_root):
    """This lesson's notebooks (paths under conftest's ``repo_root``)."""
    return SimpleNamespace(lesson=repo_root / "notebooks" / "01_units.ipynb",
                           solution=repo_root / "solutions" / "01_units.ipynb",
                           exercise=repo_root / "exercises" / "01_units.ipynb")


def _expected(text: str, convention: str) -> dict:
    """What course_lib.core.units says the converter must show."""
    q = units.parse_quantity(text, convention=convention)
    dim = "bytes" if q.dimension == "number" else q.dimension
    fmt = units.format_bytes if dim == "bytes" else units.format_bandwidth
    return {"dimension": dim, "value": q.value,
            **{s: fmt(q.value, s, DIGITS) for s in ("si", "iec", "source")}}


# --------------------------------------------------------------------------------------------------
# convert(): the converter's logic
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, convention", [
    ("14 GB", "si"), ("14 GB", "source"), ("13.04 GiB", "si"), ("14.96 GB", "source"),
    ("1008 GB/s", "si"), ("4.8 TB/s", "source"), ("128 KiB", "source"), ("16060522496", "si"),
    ("100 Gbit/s", "si"), ("2 gigabytes", "source"), ("1,024 B", "si"), ("7B", "si"),
])
def test_convert_agrees_with_units(text, convention):
    r = convert(text, convention)
    want = _expected(text, convention)
    assert (r.dimension, r.value, r.si, r.iec, r.source) == (
        want["dimension"], want["value"], want["si"], want["iec"], want["source"])


def test_convert_the_lessons_headline_numbers():
    r = convert("14 GB")
    assert (r.si, r.iec, r.source) == ("14 GB", "13.04 GiB", "13.04 GB")
    assert r.exact == "14,000,000,000 B"
    trap = convert(measurements.units_trap()["printed"], "source")
    assert trap.si == units.format_bytes(weight_bytes(get_model("llama-3-8b").params, "fp16"), digits=DIGITS)
    assert trap.iec == "14.96 GiB"


def test_ambiguous_labels_get_the_other_reading():
    r = convert("14 GB", "si")
    assert r.ambiguous_label == "GB" and r.other_convention == "source"
    assert r.other_value == units.parse_bytes("14 GB", convention="source")
    assert r.difference_percent == pytest.approx(units.SOURCE_TABLE[2].percent_larger, rel=1e-12)
    back = convert("14 GB", "source")
    assert back.other_value == units.parse_bytes("14 GB") and back.difference_percent == pytest.approx(
        r.difference_percent, rel=1e-12)
    bw = convert("1 MB/s", "si")
    assert bw.dimension == "bandwidth" and bw.difference_percent == pytest.approx(
        units.SOURCE_TABLE[1].percent_larger, rel=1e-12)


@pytest.mark.parametrize("text", ["13.04 GiB", "14 kB", "2 Gbit", "12345", "1 TiB/s"])
def test_unambiguous_inputs_have_no_other_reading(text):
    r = convert(text, "source")
    assert r.ambiguous_label is r.other_value is r.other_si is r.difference_percent is None
    assert convert(text, "si").value == r.value


@given(n=st.integers(min_value=0, max_value=2**53), convention=st.sampled_from(["si", "source"]))
def test_convert_round_trips_exact_bytes(n, convention):
    r = convert(f"{n:,} B", convention)
    assert r.value == n
    assert r.exact == f"{n:,} B"
    assert (r.si, r.iec, r.source) == tuple(units.format_bytes(n, s, DIGITS) for s in ("si", "iec", "source"))


@given(x=st.floats(min_value=0.001, max_value=9999, allow_nan=False), prefix=st.sampled_from("KMGT"),
       convention=st.sampled_from(["si", "source"]))
def test_convert_reads_prefixed_sizes_like_parse_bytes(x, prefix, convention):
    text = f"{x:.3f} {prefix}B"
    assert convert(text, convention).value == units.parse_bytes(text, convention=convention)


@pytest.mark.parametrize("text, exc, words", [
    ("7 ms", ValueError, ["'7 ms'", "a time", "size or a bandwidth"]),
    ("312 TFLOP/s", ValueError, ["FLOP rate"]),
    ("fourteen GB", ValueError, ["text", "number"]),
    ("14 GBs", ValueError, ["GB"]),
    (None, TypeError, ["text must be a str"]),
    (14e9, TypeError, ["text must be a str"]),
])
def test_convert_rejects_bad_text_with_one_clear_error(text, exc, words):
    with pytest.raises(exc) as info:
        convert(text)
    for w in words:
        assert w in str(info.value)


def test_convert_rejects_unknown_convention():
    with pytest.raises(ValueError, match="convention"):
        convert("14 GB", "binary")
    assert convert("14 GB", "jedec").convention == "source"


def test_render_readings_shows_every_reading_escaped():
    r = convert("14 GB", "si")
    out = render_readings(r)
    for cls, value in (("exact", r.exact), ("si", r.si), ("iec", r.iec), ("source", r.source)):
        assert f'<td class="course-units-{cls}">{html.escape(value)}</td>' in out
    assert "course-units-note" in out and html.escape(r.other_exact) in out
    hostile = Readings(text="<b>", convention="si", dimension="bytes", value=1.0, si="<x>", iec="1 B", source="1 B")
    assert "<x>" not in render_readings(hostile) and "&lt;x&gt;" in render_readings(hostile)


def test_render_readings_explains_a_bare_B():
    assert "billions of parameters" in render_readings(convert("7B"))
    assert "billions of parameters" not in render_readings(convert("7 GB"))


# --------------------------------------------------------------------------------------------------
# The widget, driven in-process
# --------------------------------------------------------------------------------------------------
def _shown(w: UnitConverter, cls: str) -> str:
    m = re.search(rf'<td class="course-units-{cls}">(.*?)</td>', w.readings.value)
    assert m, f"no {cls} reading in {w.readings.value!r}"
    return html.unescape(m.group(1))


def test_widget_shows_what_units_computes():
    w = unit_converter()
    assert isinstance(w, UnitConverter)
    for text, convention in [("14.96 GB", "source"), ("1008 GB/s", "si"), ("13.04 GiB", "source"),
                             ("14 GB", "si")]:
        w.text.value = text
        w.system.value = convention
        want = _expected(text, convention)
        for system in ("si", "iec", "source"):
            assert _shown(w, system) == want[system]
        assert w.result.value == want["value"]


def test_widget_updates_on_each_control():
    w = unit_converter("14 GB", convention="si")
    assert _shown(w, "exact") == "14,000,000,000 B"
    w.system.value = "source"
    assert _shown(w, "exact") == f"{units.parse_bytes('14 GB', convention='source'):,.0f} B"
    w.text.value = "1 TiB"
    assert _shown(w, "iec") == "1 TiB" and _shown(w, "si") == units.format_bytes(units.TiB, "si", DIGITS)


def test_widget_shows_errors_instead_of_raising():
    w = unit_converter()
    w.text.value = "13.9 ms"
    assert w.result is None
    assert "course-units-error" in w.readings.value and "size or a bandwidth" in w.readings.value
    w.text.value = "13.9 GB"
    assert w.result is not None and "course-units-error" not in w.readings.value


def test_widget_has_stable_dom_classes_and_options():
    w = unit_converter()
    assert "course-units-converter" in w._dom_classes
    assert "course-units-text" in w.text._dom_classes
    assert "course-units-system" in w.system._dom_classes
    assert "course-units-readings" in w.readings._dom_classes
    assert [v for _, v in CONVENTION_OPTIONS] == ["si", "source"]
    assert w.children == (w.text, w.system, w.readings)


def test_widget_factory_validates_its_arguments():
    with pytest.raises(ValueError, match="convention"):
        unit_converter(convention="iec")
    with pytest.raises(TypeError, match="text"):
        unit_converter(text=14)


# --------------------------------------------------------------------------------------------------
# course_lib.lessons.prose
# --------------------------------------------------------------------------------------------------
def test_md_text_dedents_and_formats():
    assert md_text("""
        A {x}
          indented
    """, x=1) == "A 1\n  indented"
    assert md_text("{not formatted}") == "{not formatted}"
    with pytest.raises(ValueError, match="size"):
        md_text("{size}", other=1)
    with pytest.raises(TypeError, match="template"):
        md_text(42)


def test_md_is_a_markdown_display_object():
    from IPython.display import Markdown

    obj = md("**{n}**", n=count(7241732096))
    assert isinstance(obj, Markdown) and obj.data == "**7,241,732,096**"
    assert obj._repr_markdown_() == "**7,241,732,096**"


def test_count_and_its_errors():
    assert count(get_model("mistral-7b").params) == "7,241,732,096"
    assert count(14e9) == "14,000,000,000"
    with pytest.raises(ValueError):
        count(1.5)
    with pytest.raises(TypeError):
        count("7")
    with pytest.raises(TypeError):
        count(True)


def test_details_hides_the_answer_and_escapes_the_question():
    out = details("Is 1 < 2?", "Yes, **of course**.")
    assert out.startswith("<details><summary>Is 1 &lt; 2?</summary>") and out.endswith("</details>")
    assert "**of course**" in out
    with pytest.raises(ValueError, match="answer"):
        details("Q?", "  ")


def test_table_and_formula():
    assert table(["a", "b"], [[1, "x|y"]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |"
    with pytest.raises(ValueError, match="rows\\[0\\]"):
        table(["a", "b"], [[1]])
    from course_lib.core import formulas

    assert formula("weight_bytes") == f"$${formulas.equation('weight_bytes')}$$"


# --------------------------------------------------------------------------------------------------
# Every number the lesson states comes from course_lib
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lesson_text(nb_paths) -> str:
    return shown_text(nb_paths.lesson)


def _claims():
    """(description, text the lesson must show) pairs, each computed from course_lib now."""
    mistral = get_model("mistral-7b").params
    llama3 = weight_bytes(get_model("llama-3-8b").params, "fp16")
    src = weight_bytes(get_model("source-7b").params, "fp16")
    rtx = get_hardware("rtx-4090")
    mistral_bf16 = weight_bytes(mistral, "bf16")
    trap = measurements.units_trap()
    return [
        ("Mistral-7B's exact count", count(mistral)),
        ("Mistral-7B's count with a suffix", units.format_params(mistral)),
        ("the source's 7B in fp16, SI", units.format_bytes(src, digits=4)),
        ("the source's 7B in fp16, IEC", units.format_bytes(src, "iec", digits=4)),
        ("the RTX 4090's bandwidth", units.format_bandwidth(rtx.bandwidth, unit="GB/s")),
        ("one read of the source's 7B on the RTX 4090", units.format_time(src / rtx.bandwidth)),
        ("Llama-3-8B fp16 in SI", units.format_bytes(llama3, digits=4)),
        ("Llama-3-8B fp16 in IEC", units.format_bytes(llama3, "iec", digits=4)),
        ("the README's printed size", trap["printed"]),
        ("Mistral-7B bf16 in SI", units.format_bytes(mistral_bf16, digits=4)),
        ("Mistral-7B bf16 read time", units.format_time(mistral_bf16 / rtx.bandwidth, digits=4)),
        ("GiB vs GB", f"{units.SOURCE_TABLE[2].percent_larger:.2f}%"),
        ("bytes in a GiB", count(units.GiB)),
    ]


@pytest.mark.parametrize("what, shown", _claims(), ids=[c[0] for c in _claims()])
def test_lesson_states_the_numbers_course_lib_computes(lesson_text, what, shown):
    assert shown in lesson_text, f"the lesson should show {what} = {shown!r} (computed by course_lib)"


def test_the_units_trap_is_real_in_the_library_data():
    """The lesson's claim: the README's '14.96 GB' is the fp16 size in GiB, not in GB."""
    trap = measurements.units_trap()
    true_size = weight_bytes(get_model(trap["model"]).params, "fp16")
    assert units.format_bytes(true_size, "iec", digits=4) == f"{trap['printed_value']:g} GiB"
    assert units.format_bytes(true_size, "si", digits=4) == f"{trap['size_gb_si']:g} GB"
    as_si = units.parse_bytes(trap["printed"], convention="si")
    assert abs(as_si / true_size - 1) > 0.05      # read as SI, the printed label is far off
    as_source = units.parse_bytes(trap["printed"], convention="source")
    assert abs(as_source / true_size - 1) < 0.001  # read 1024-based, it matches


def test_the_lessons_source_example_is_14_gb():
    src = weight_bytes(get_model("source-7b").params, "fp16")
    assert src == units.parse_bytes("14 GB") == get_model("source-7b").params * bytes_per_element("fp16")


def test_nominal_counts_come_from_model_names():
    assert ex01.nominal_params("mistral-7b") == units.parse_params("7B")
    assert ex01.nominal_params("llama-3-8b") == units.parse_params("8B")
    assert ex01.nominal_params("qwen3-0.6b") == units.parse_params("0.6B")
    with pytest.raises(ValueError, match="gpt2-small"):
        ex01.nominal_params("gpt2-small")


# --------------------------------------------------------------------------------------------------
# The exercise set: ex01 and solutions/01_units.ipynb
# --------------------------------------------------------------------------------------------------
def test_ex01_expected_values_come_from_course_lib():
    mistral = get_model("mistral-7b").params
    rtx = get_hardware("rtx-4090").bandwidth
    assert ex01.q1.evaluate(mistral * 4 / 8).correct
    assert ex01.q2.evaluate(units.parse_bytes("14 GB") / units.GiB).correct
    assert ex01.q3.evaluate(128 * units.KiB).correct
    assert ex01.q6.evaluate(weight_bytes(mistral, "bf16") / units.GB).correct
    assert ex01.q7.evaluate(weight_bytes(mistral, "bf16") / rtx * 1e3).correct
    assert ex01.q8.evaluate(weight_bytes(get_model("llama-3-8b").params, "fp16") / units.GB).correct


def test_ex01_targets_the_units_mistakes():
    mistral = get_model("mistral-7b").params
    assert "bits" in ex01.q1.evaluate(mistral * 4).feedback                       # bits vs bytes
    assert "different units" in ex01.q2.evaluate(14).feedback                      # GB vs GiB
    assert not ex01.q2.evaluate("14 GB").correct                                   # the conversion is the point
    assert "1000" in ex01.q3.evaluate("128 KB").feedback                           # 1000 vs 1024
    assert "parameter count" in ex01.q6.evaluate(mistral / 1e9).feedback           # params vs bytes
    assert "nominal" in ex01.q6.evaluate(7e9 * 2 / 1e9).feedback                   # nominal vs real
    assert "GiB/s" in ex01.q7.evaluate(weight_bytes(mistral, "bf16") / (1008 * units.GiB) * 1e3).feedback
    assert "GiB" in ex01.q8.evaluate(measurements.units_trap()["printed_value"]).feedback


def test_ex01_mixes_every_kind_of_question_with_multi_step_problems():
    # objectives and bank sizes of every set: tests/test_checks_banks.py
    assert sum("Multi-step" in q.prompt for q in ex01.QUESTIONS) >= 2
    assert {q.kind for q in ex01.QUESTIONS} >= {"numeric", "expression", "function", "choice"}


# nbgrader structure and stored grade outputs: tests/test_solutions_structure.py (all solutions)


def test_exercise_is_generated_from_the_solution(nb_paths):
    """exercises/01_units.ipynb is exactly what the generator makes of the solution (never hand-edited)."""
    from course_lib.authoring import exgen

    assert nb_paths.exercise.exists(), "exercises/01_units.ipynb is missing: run `python -m course_lib.authoring.exgen`"
    assert nb_paths.exercise.read_text(encoding="utf-8") == exgen.exercise_text(nb_paths.solution), (
        "exercises/01_units.ipynb is out of date: run `python -m course_lib.authoring.exgen`")


def test_generated_exercise_holds_no_solutions(nb_paths):
    nb = nbformat.read(nb_paths.exercise, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "BEGIN nb_paths.solution" not in text and "BEGIN HIDDEN TESTS" not in text
    assert 'answer_q9 = "GiB' not in text and "n_bytes / 2**30" not in text
    for q in ex01.QUESTIONS:
        assert f"q.{q.id}.check(" in text


def test_unfilled_exercise_reads_as_not_attempted(nb_paths):
    """Run the learner's starting cells (not the strict grade cells): every check says 'not attempted'."""
    nb = nbformat.read(nb_paths.exercise, as_version=4)
    ns: dict = {}
    for c in nb.cells:
        if c.cell_type != "code" or c.metadata.get("nbgrader", {}).get("grade"):
            continue
        exec(compile(c.source, c.metadata.get("nbgrader", {}).get("grade_id", "cell"), "exec"), ns)
    answers = {"q4": ns["to_gib"]}
    answers.update({q.id: ns[f"answer_{q.id}"] for q in ex01.QUESTIONS if q.id != "q4"})
    for q in ex01.QUESTIONS:
        assert q.evaluate(answers[q.id]).status == "not_attempted", q.id


def test_lesson_00_shows_the_glossary_grouped_by_lesson_and_explains_the_source():
    import nbformat

    from course_lib.lessons import glossary
    from repo import ROOT

    grouped = glossary.grouped_markdown()
    assert grouped.count("<details>") == len({t.lesson for t in glossary.terms()})
    for t in glossary.terms():
        assert f"| **{t.term}** |" in grouped
    nb = nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4)
    shown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown") + "\n".join(
        o.get("data", {}).get("text/markdown", "") for c in nb.cells for o in c.get("outputs", []))
    assert grouped in shown
    assert "## The source material" in shown and "`source-7b`" in shown and "not a released model" in shown
    assert "end-to-end tokens per second" in shown and "decode tokens per second" in shown
