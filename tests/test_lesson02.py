"""Lesson 02 (data per token): the widget, the figures, the GEMV calculator and the exercise set.

Widgets are driven in-process (no browser): each control is set and the displayed HTML is compared
with course_lib's own computation. Figures are read back from their artists.
"""
from __future__ import annotations

import html
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

widgets = pytest.importorskip("ipywidgets")

from course_lib.core.numeric import raw as g  # noqa: E402
from course_lib.core.hardware import get_hardware, list_hardware  # noqa: E402
from course_lib.core.models import get_model, list_models  # noqa: E402
from course_lib.lessons.plots import label_has_unit  # noqa: E402
from course_lib.lessons.plots.data_per_token import (  # noqa: E402
    DEFAULT_PRECISIONS, GEMV_PRECISIONS, cache_bytes, plot_bytes_per_token, plot_cache_vs_weights,
    plot_ridge_points, ridge_points,
)
from course_lib.core.precision import PRECISIONS, bytes_per_element  # noqa: E402
from course_lib.core.roofline import bytes_per_token, gemv_cost  # noqa: E402
from course_lib.core.units import format_bytes  # noqa: E402
from course_lib.lessons.widgets.data_per_token import (  # noqa: E402
    PRECISION_OPTIONS, BytesPerTokenExplorer, bytes_per_token_explorer, render_bytes_per_token,
)

NO_FP16_PEAK = sorted(h for h in list_hardware() if "fp16" not in get_hardware(h).peak_flops)
NO_CACHE = sorted(h for h in list_hardware() if get_hardware(h).cache_bytes is None)


def cell(summary: str, cls: str) -> str:
    found = re.findall(rf'<td class="{cls}"[^>]*>(.*?)</td>', summary)
    assert len(found) == 1, f"expected one {cls} cell, found {len(found)}"
    return html.unescape(found[0])


# --------------------------------------------------------------------------------------------------
# bytes_per_token: the numbers the widget shows
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", list_models())
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8", "q4_0", "int4"])
def test_bytes_per_token_is_modelspecs(model, precision):
    m = get_model(model)
    r = bytes_per_token(model, precision)
    assert r.streamed_bytes == m.decode_weight_bytes(precision)
    assert r.stored_bytes == m.weight_bytes(precision)
    assert r.streamed_params == m.streamed_params(1)
    assert r.lm_head_params_read == m.vocab * m.hidden
    parts = sum(r.part_bytes(p) for p in ("blocks", "lm_head", "embedding_row"))
    assert math.isclose(parts, r.streamed_bytes, rel_tol=1e-12)


def test_embedding_row_tied_and_untied():
    # untied: one row of the h-wide table (h values); GPT-2 also reads one learned-position row
    for name in ("mistral-7b", "llama-3-8b", "source-7b"):
        m, r = get_model(name), bytes_per_token(name, "fp16")
        assert r.embedding_params_read == m.hidden
        assert r.difference_bytes == -(m.vocab - 1) * m.hidden * 2      # all the other rows are skipped
    gpt2 = bytes_per_token("gpt2-small", "fp32")
    assert gpt2.embedding_params_read == 2 * get_model("gpt2-small").hidden
    # tied: the matrix is read in full as lm_head plus one row: streamed = stored + one row
    qwen = get_model("qwen3-0.6b")
    r = bytes_per_token("qwen3-0.6b", "fp16")
    assert r.tied_embeddings and r.difference_bytes == qwen.hidden * 2
    assert r.streamed_bytes > r.stored_bytes


def test_source_claim_and_its_refinement():
    src = get_model("source-7b")
    assert bytes_per_token("source-7b", "fp16").stored_bytes == 14e9          # "14 GB per token" as stated
    assert bytes_per_token("source-7b", "fp16").streamed_bytes == 14e9 - (src.vocab - 1) * src.hidden * 2


def test_moe_streams_only_routed_experts():
    r = bytes_per_token("deepseek-v3", "fp16")
    assert r.moe and r.streamed_bytes < r.stored_bytes / 10


def test_bytes_per_token_bad_input():
    with pytest.raises(ValueError, match="model"):
        bytes_per_token("mistral-8b")
    with pytest.raises(ValueError, match="precision"):
        bytes_per_token("mistral-7b", "fp17")
    with pytest.raises(TypeError, match="precision"):
        bytes_per_token("mistral-7b", 16)
    with pytest.raises(ValueError, match="part"):
        bytes_per_token().part_bytes("head")


def test_render_shows_course_lib_values():
    r = bytes_per_token("llama-3-8b", "bf16")
    s = render_bytes_per_token(r)
    assert cell(s, "course-bpt-stored") == format_bytes(get_model("llama-3-8b").weight_bytes("bf16"))
    assert cell(s, "course-bpt-streamed") == format_bytes(get_model("llama-3-8b").decode_weight_bytes("bf16"))
    assert cell(s, "course-bpt-lm-head") == format_bytes(r.part_bytes("lm_head"))
    assert cell(s, "course-bpt-embedding-row") == format_bytes(r.part_bytes("embedding_row"))
    assert cell(s, "course-bpt-difference") == "\u2212" + format_bytes(-r.difference_bytes)
    assert "its own V" in s and "tied to the embedding" not in s
    assert "tied to the embedding" in render_bytes_per_token(bytes_per_token("qwen3-0.6b"))
    assert "+" in cell(render_bytes_per_token(bytes_per_token("qwen3-0.6b")), "course-bpt-difference")


# --------------------------------------------------------------------------------------------------
# The widget, driven in-process
# --------------------------------------------------------------------------------------------------
@pytest.fixture
def explorer() -> BytesPerTokenExplorer:
    return bytes_per_token_explorer()


def test_explorer_initial_state(explorer):
    assert explorer.settings() == {"model": "mistral-7b", "precision": "fp16"}
    assert explorer.output.value == render_bytes_per_token(bytes_per_token("mistral-7b", "fp16"))
    assert "course-bpt-explorer" in explorer._dom_classes
    assert "course-bpt-model" in explorer.model._dom_classes
    assert "course-bpt-precision" in explorer.precision._dom_classes
    assert "course-bpt-output" in explorer.output._dom_classes


@pytest.mark.parametrize("model, precision", [("qwen3-0.6b", "q4_0"), ("llama-2-70b", "int8"),
                                              ("deepseek-v3", "fp8"), ("gpt2-small", "fp32")])
def test_explorer_controls_drive_the_output(explorer, model, precision):
    explorer.model.value = model
    explorer.precision.value = precision
    expected = get_model(model).decode_weight_bytes(precision)
    assert explorer.result.streamed_bytes == expected
    assert cell(explorer.output.value, "course-bpt-streamed") == format_bytes(expected)
    assert explorer.output.value == render_bytes_per_token(bytes_per_token(model, precision))


def test_explorer_offers_every_model_and_storage_precision(explorer):
    assert list(explorer.model.options) == list_models()
    assert [v for _, v in explorer.precision.options] == list(PRECISION_OPTIONS)
    assert "tf32" not in PRECISION_OPTIONS and set(PRECISION_OPTIONS) < set(PRECISIONS)


def test_explorer_bad_arguments():
    with pytest.raises(ValueError, match="model"):
        bytes_per_token_explorer("mistral")
    with pytest.raises(ValueError, match="precision"):
        bytes_per_token_explorer("mistral-7b", "tf32")
    assert bytes_per_token_explorer("llama-2-7b", "float16").precision.value == "fp16"


# --------------------------------------------------------------------------------------------------
# GEMV
# --------------------------------------------------------------------------------------------------
def test_gemv_8192_example():
    c = gemv_cost(8192, 8192, "fp16")
    assert c.weight_bytes == 8192 * 8192 * 2 == 134_217_728
    assert c.flops == 2 * 8192 * 8192
    assert c.vector_bytes == 2 * 8192 * 2
    assert c.weight_intensity == 1.0
    assert c.intensity == pytest.approx(134_217_728 / (134_217_728 + 32_768), rel=1e-15)
    gpu = get_hardware("rtx-4090")
    assert c.memory_time(gpu) == g.memory_time(c.bytes, gpu.bandwidth, 1.0)
    assert c.compute_time("rtx-4090") == c.flops / gpu.flops("fp16")
    assert c.memory_time(gpu) > 100 * c.compute_time(gpu)          # memory-bound by two orders of magnitude
    assert c.memory_time(gpu, bandwidth_efficiency=0.5) == 2 * c.memory_time(gpu)


@given(rows=st.integers(1, 65536), cols=st.integers(1, 65536), precision=st.sampled_from(sorted(PRECISIONS)))
def test_gemv_intensity_is_two_over_bytes_per_element(rows, cols, precision):
    c = gemv_cost(rows, cols, precision)
    assert c.flops == 2 * rows * cols
    assert math.isclose(c.weight_intensity, 2 / bytes_per_element(precision), rel_tol=1e-12)
    assert c.intensity < c.weight_intensity                   # the vectors only add bytes


def test_gemv_bad_input():
    with pytest.raises(ValueError, match="rows"):
        gemv_cost(0, 8)
    with pytest.raises(ValueError, match="cols"):
        gemv_cost(8, 2.5)
    with pytest.raises(ValueError, match="precision"):
        gemv_cost(8, 8, "fp17")
    with pytest.raises(ValueError, match="no published dense fp16"):
        gemv_cost(8, 8).compute_time("m3-max")
    with pytest.raises(ValueError, match="bandwidth_efficiency"):
        gemv_cost(8, 8).memory_time("h200", bandwidth_efficiency=1.5)


def test_ridge_points_skip_devices_without_peak():
    found, skipped = ridge_points()
    assert sorted(skipped) == NO_FP16_PEAK and NO_FP16_PEAK           # the Apple parts publish none
    for name, ridge in found.items():
        assert ridge == get_hardware(name).ridge_point("fp16")
        assert ridge > 50 * gemv_cost(1, 1, "fp16").weight_intensity
    c_found, c_skipped = cache_bytes()
    assert sorted(c_skipped) == NO_CACHE
    assert all(v == get_hardware(k).cache_bytes for k, v in c_found.items())


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------
def _check_labels(fig):
    ax = fig.axes[0]
    assert ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    return ax


def test_plot_bytes_per_token_data():
    models = ["mistral-7b", "qwen3-0.6b", "llama-2-70b"]
    fig = plot_bytes_per_token(models, ["fp16", "q4_0"])
    ax = _check_labels(fig)
    assert "GB" in ax.get_xlabel() and ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_yticklabels()] == models
    assert len(ax.containers) == 2
    for container, p in zip(ax.containers, ["fp16", "q4_0"]):
        assert container.get_label().startswith(p)
        widths = [bar.get_width() for bar in container]
        assert widths == [get_model(m).decode_weight_bytes(p) / 1e9 for m in models]


def test_plot_bytes_per_token_defaults_cover_the_catalog():
    ax = plot_bytes_per_token().axes[0]
    assert len(ax.containers) == len(DEFAULT_PRECISIONS)
    assert [t.get_text() for t in ax.get_yticklabels()] == list_models()


def test_plot_ridge_points_data_and_skip_note():
    fig = plot_ridge_points()
    ax = _check_labels(fig)
    found, skipped = ridge_points()
    assert [bar.get_width() for bar in ax.containers[0]] == list(found.values())
    assert [t.get_text() for t in ax.get_yticklabels()] == [get_hardware(h).display for h in found]
    lines = [ln.get_xdata()[0] for ln in ax.get_lines()]
    assert lines == [gemv_cost(1, 1, p).weight_intensity for p in GEMV_PRECISIONS]
    note = " ".join(t.get_text() for t in ax.texts)
    assert "no published" in note
    for h in skipped:
        assert get_hardware(h).display in note


def test_plot_cache_vs_weights_data():
    fig = plot_cache_vs_weights("llama-3-8b", "int8")
    ax = _check_labels(fig)
    found, skipped = cache_bytes()
    assert [bar.get_width() for bar in ax.containers[0]] == [v / 1e6 for v in found.values()]
    assert ax.get_lines()[0].get_xdata()[0] == get_model("llama-3-8b").decode_weight_bytes("int8") / 1e6
    note = " ".join(t.get_text() for t in ax.texts)
    assert all(get_hardware(h).display in note for h in skipped)


def test_plots_bad_input():
    with pytest.raises(TypeError, match="models"):
        plot_bytes_per_token("mistral-7b")
    with pytest.raises(ValueError, match="model"):
        plot_bytes_per_token(["mistral-8b"])
    with pytest.raises(ValueError, match="at least one"):
        plot_bytes_per_token([])
    with pytest.raises(ValueError, match="precision"):
        plot_bytes_per_token(["mistral-7b"], ["fp17"])
    with pytest.raises(TypeError, match="hardware"):
        plot_ridge_points("h200")
    with pytest.raises(ValueError, match="no published|none of the devices"):
        plot_ridge_points(["m3-max", "m2-ultra"])
    with pytest.raises(ValueError, match="hardware"):
        plot_cache_vs_weights(hardware=["h300"])


# --------------------------------------------------------------------------------------------------
# The exercise set agrees with the lesson's library values
# --------------------------------------------------------------------------------------------------
def test_exercise_expected_values():
    from course_lib.checks import ex02

    assert len(ex02.QUESTIONS) >= 6
    assert ex02.q2.evaluate(get_model("llama-3-8b").decode_weight_bytes("bf16")).correct
    assert ex02.q3.evaluate(get_model("qwen3-0.6b").decode_weight_bytes("fp16")).correct
    assert ex02.q5.evaluate(gemv_cost(8192, 8192).weight_bytes / get_hardware("rtx-4090").bandwidth * 1e6).correct
    assert ex02.q5.evaluate(f"{gemv_cost(8192, 8192).memory_time('rtx-4090') * 1e3} ms").correct
    ridge = get_hardware("h100-sxm").ridge_point("fp16")
    assert ex02.q6.evaluate(ridge / gemv_cost(1, 1, "fp16").weight_intensity).correct
    # the function question accepts the widget's formula and rejects the whole checkpoint
    assert ex02.q8.evaluate(ex02.streamed_bytes).correct
    wrong = ex02.q8.evaluate(lambda block_params, vocab, hidden, bytes_per_weight:
                             (block_params + 2 * vocab * hidden) * bytes_per_weight)
    assert not wrong.correct and "embedding" in wrong.feedback


# --- the layer-by-layer count, the decode step's picture, the roofline -------------------------------
def _lesson02_text() -> str:
    from nbtext import shown_text
    from repo import ROOT

    return shown_text(ROOT / "notebooks" / "02_data_per_token.ipynb")


def test_lesson_counts_the_parameters_from_config_and_defines_the_symbols():
    text = _lesson02_text()
    m = get_model("mistral-7b")
    assert f"{m.params:,}" in text and f"{m.block_params:,}" in text
    for field in ("num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings"):
        assert field in text, field
    # every symbol of decode_flops is defined where the formula is shown
    for words in ("$B$ sequences", "$N_{blocks}$ the block", "$h$ the hidden size", "$V$ the vocabulary",
                  "$L$ the layers", "$H_q$ the query heads", "$d_{att}$", "$c$ the tokens"):
        assert words in text, words
    # the ridge-point text names the intensities the figure marks
    from course_lib.lessons.plots.data_per_token import GEMV_PRECISIONS
    for p in GEMV_PRECISIONS:
        assert f"{gemv_cost(1, 1, p).weight_intensity:.3g} ({p})" in text, p


@pytest.mark.parametrize("model", ["mistral-7b", "llama-2-7b", "qwen3-0.6b", "gpt2-small"])
def test_decode_step_picture_draws_course_lib_numbers(model):
    from course_lib.core.estimator import weight_bytes
    from course_lib.lessons.plots.data_per_token import plot_decode_step

    m = get_model(model)
    r = bytes_per_token(model, "fp16")
    fig = plot_decode_step(model, "fp16")
    ax = fig.axes[0]
    assert ax.get_title() and label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    bars = {p.get_gid(): p.get_width() for p in ax.patches if p.get_gid()}
    want = {"step:embedding_table": weight_bytes(m.embedding_params, "fp16"),
            "step:embedding_row": r.part_bytes("embedding_row"),
            "step:attention": weight_bytes(m.attention_params_per_layer, "fp16"),
            "step:mlp": weight_bytes(m.dense_mlp_params, "fp16"),
            "step:norms": weight_bytes(m.norm_params_per_layer, "fp16"),
            "step:blocks": r.part_bytes("blocks"), "step:lm_head": r.part_bytes("lm_head"),
            "step:total": m.decode_weight_bytes("fp16")}
    assert set(bars) == set(want)
    for k, v in want.items():
        assert math.isclose(bars[k], v / 1e6, rel_tol=1e-12), k
    assert math.isclose(want["step:blocks"] + want["step:lm_head"] + want["step:embedding_row"], want["step:total"])


def test_decode_step_picture_refuses_moe_models():
    from course_lib.lessons.plots.data_per_token import plot_decode_step

    with pytest.raises(ValueError, match="model must be a dense model"):
        plot_decode_step("deepseek-v3")
