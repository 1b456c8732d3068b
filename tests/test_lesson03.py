"""Lesson 03 (the KV cache): widgets driven in-process, figures' data, the exercise set's numbers."""
from __future__ import annotations

import html
import dataclasses
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from course_lib import estimate, get_hardware, get_model, kv_cache_bytes
from course_lib.lessons.plots import label_has_unit
from course_lib.lessons.plots.kv_cache import batch_grid, context_grid, plot_kv_crossover, plot_kv_vs_context
from course_lib.core.units import format_bytes
from course_lib.core.estimator import crossover_context, tokens_that_fit
from course_lib.core.kv import kv_crossover, kv_rows
from course_lib.core.precision import default_kv_precision
from course_lib.lessons.widgets.kv_cache import (
    BATCH_RANGE, CONTEXT_RANGE, DEFAULT_MODELS, crossover_html, kv_cache_explorer, kv_crossover_explorer, kv_shape,
    kv_table_html,
)


# --------------------------------------------------------------------------------------------------
# Numbers the lesson states
# --------------------------------------------------------------------------------------------------
def test_source_example_and_its_real_models():
    src = get_model("source-7b")
    assert src.kv_values_per_token == 2 * 32 * 8 * 128 == 65_536
    assert src.kv_bytes_per_token("fp16") == 131_072 == 128 * 1024
    assert kv_cache_bytes(src, 1000) == 131_072_000
    for name in ("mistral-7b", "llama-3-8b"):
        assert get_model(name).kv_bytes_per_token() == src.kv_bytes_per_token()
    assert get_model("llama-2-7b").kv_bytes_per_token() == 4 * src.kv_bytes_per_token()


def test_attention_kinds_and_mla_latent():
    kinds = {n: get_model(n).attention_kind for n in ("llama-2-7b", "llama-3-8b", "deepseek-v3")}
    assert kinds == {"llama-2-7b": "MHA", "llama-3-8b": "GQA", "deepseek-v3": "MLA"}
    ds = get_model("deepseek-v3")
    assert (ds.kv_rank, ds.rope_dim, ds.layers) == (512, 64, 61)
    assert ds.kv_values_per_token == 61 * (512 + 64)
    assert kv_shape(ds) == "61 × (512 + 64)"
    assert kv_shape("llama-3-8b") == "2 × 32 × 8 × 128"


def test_sliding_window_caps_mistral_but_not_llama3():
    mi, l3 = get_model("mistral-7b"), get_model("llama-3-8b")
    assert kv_cache_bytes(mi, 32768) == kv_cache_bytes(mi, mi.sliding_window) == 4096 * 131_072
    assert kv_cache_bytes(l3, 32768) == 8 * kv_cache_bytes(l3, 4096)


def test_attention_intensity_is_hq_over_hkv_in_fp16():
    sp = pytest.importorskip("sympy")
    from course_lib.core import formulas
    from course_lib.core.formulas import S
    flops = sp.diff(formulas.expr("decode_flops"), S.context)
    nbytes = sp.diff(formulas.expr("decode_bytes"), S.context)
    k_tok = formulas.expr("kv_cache_bytes").subs({S.kv_values: formulas.expr("kv_values_per_token"),
                                                  S.tokens: 1, S.batch: 1})
    i = sp.simplify((flops / nbytes).subs({S.kv_bytes_per_token: k_tok, S.attn_dim: S.head_dim}))
    assert sp.simplify(i - 2 * S.heads / (S.kv_heads * S.bytes_per_kv)) == 0
    assert S.batch not in i.free_symbols


def test_crossover_solves_kv_equals_weights_with_sympy():
    sp = pytest.importorskip("sympy")
    from course_lib.core import formulas
    from course_lib.core.formulas import S
    t = sp.solve(sp.Eq(formulas.expr("kv_cache_bytes"), formulas.expr("weight_bytes")), S.tokens)[0]
    m = get_model("llama-3-8b")
    for b in (1, 3, 16, 200):
        value = float(t.subs({S.params: m.params, S.bytes_per_weight: 2, S.bytes_per_kv: 2,
                              S.kv_values: m.kv_values_per_token, S.batch: b}))
        assert math.isclose(value, crossover_context(m, b), rel_tol=1e-12)
        # at the crossover the cache (real-valued context) equals the weights
        assert math.isclose(value * kv_cache_bytes(m, 1, batch=b), m.weight_bytes(), rel_tol=1e-12)


@given(batch=st.integers(1, 512), model=st.sampled_from(["llama-2-7b", "llama-3-8b", "qwen2.5-7b", "llama-3-70b"]))
def test_crossover_context_times_batch_is_constant(batch, model):
    assert math.isclose(crossover_context(model, batch) * batch, crossover_context(model, 1), rel_tol=1e-12)


def test_mistral_crossover_needs_enough_sequences():
    mi = get_model("mistral-7b")
    finite = [b for b in range(1, 64) if math.isfinite(crossover_context(mi, b))]
    first = finite[0]
    assert finite == list(range(first, 64))
    # below `first` even a full window per sequence stays under the weights; from `first` on it does not
    assert kv_cache_bytes(mi, mi.sliding_window, batch=first - 1) < mi.weight_bytes()
    assert kv_cache_bytes(mi, mi.sliding_window, batch=first) >= mi.weight_bytes()
    assert first == 27


@given(batch=st.integers(1, 256), model=st.sampled_from(["llama-2-7b", "llama-3-8b", "qwen2.5-7b", "qwen3-0.6b"]),
       hw=st.sampled_from(["rtx-4090", "a100-80gb", "h100-sxm", "h200", "l4"]))
def test_tokens_that_fit_is_the_largest_count_that_fits(batch, model, hw):
    m, h = get_model(model), get_hardware(hw)
    n = tokens_that_fit(m, h, batch)
    if m.weight_bytes() >= h.capacity:
        assert n == 0
        return
    assert m.weight_bytes() + kv_cache_bytes(m, n, batch=batch) <= h.capacity
    assert m.weight_bytes() + kv_cache_bytes(m, n + 1, batch=batch) > h.capacity


def test_tokens_that_fit_known_values_and_window():
    rtx = get_hardware("rtx-4090")
    # capacity: the bytes the driver reports (24,564 MiB), not the box's "24 GB" read as 24e9 bytes
    assert tokens_that_fit("llama-3-8b", rtx) == (rtx.capacity - 16_060_522_496) // 131_072
    box = dataclasses.replace(rtx, capacity=rtx.capacity_marketing_gb * 1e9)
    assert tokens_that_fit("llama-3-8b", box) == 60_573 < tokens_that_fit("llama-3-8b", rtx)
    assert tokens_that_fit("llama-3-70b", "h100-sxm") == 0             # fp16 weights (141 GB) exceed 80 GB
    assert math.isinf(tokens_that_fit("mistral-7b", "rtx-4090", batch=16))   # 16 full windows fit
    assert tokens_that_fit("mistral-7b", "rtx-4090", batch=64) < 4096


@pytest.mark.parametrize("call, match", [
    (lambda: kv_rows(["llama-3-9b"]), "model"),
    (lambda: kv_rows([]), "models"),
    (lambda: kv_rows(DEFAULT_MODELS, context=-1), "context"),
    (lambda: kv_rows(DEFAULT_MODELS, batch=0), "batch"),
    (lambda: kv_rows(DEFAULT_MODELS, kv_precision="fp12"), "precision"),
    (lambda: kv_crossover("llama-3-8b", "rtx-4090", batch=0), "batch"),
    (lambda: crossover_context("llama-3-8b", batch=2.5), "batch"),
    (lambda: tokens_that_fit("llama-3-8b", "rtx-5090x"), "hardware"),
    (lambda: kv_cache_explorer(context=10**7), "context"),
    (lambda: kv_crossover_explorer(batch=0), "batch"),
])
def test_bad_input_raises_one_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_wrong_types_raise_type_error():
    with pytest.raises(TypeError, match="models"):
        kv_rows(7)
    with pytest.raises(TypeError, match="batch"):
        crossover_context("llama-3-8b", batch="8")


# --------------------------------------------------------------------------------------------------
# Widgets, driven in-process
# --------------------------------------------------------------------------------------------------
def cells(text: str, cls: str) -> list[str]:
    return [html.unescape(re.sub(r"<br>.*", "", c)) for c in re.findall(rf'<td class="{cls}"[^>]*>(.*?)</td>', text)]


def test_table_numbers_are_course_libs():
    t = kv_table_html(DEFAULT_MODELS, 8192, 4, "fp8", "int4")
    assert cells(t, "course-kv-bytes") == [format_bytes(kv_cache_bytes(m, 8192, "fp8", 4)) for m in DEFAULT_MODELS]
    assert cells(t, "course-kv-per-token") == [format_bytes(get_model(m).kv_bytes_per_token("fp8"))
                                               for m in DEFAULT_MODELS]
    assert cells(t, "course-kv-weights") == [format_bytes(get_model(m).weight_bytes("int4")) for m in DEFAULT_MODELS]
    assert "window: last 4,096 tokens kept" in t


def test_rows_ratio_and_cap():
    rows = {r.model: r for r in kv_rows(("mistral-7b", "llama-3-8b"), 10_000, 2)}
    assert rows["mistral-7b"].capped and not rows["llama-3-8b"].capped
    assert rows["mistral-7b"].cached_tokens == 4096
    kv = kv_cache_bytes("llama-3-8b", 10_000, batch=2)
    assert rows["llama-3-8b"].ratio == kv / get_model("llama-3-8b").weight_bytes()


@pytest.fixture
def explorer():
    return kv_cache_explorer()


def test_explorer_initial_state(explorer):
    assert explorer.output.value == kv_table_html(**explorer.settings())
    assert explorer.settings()["models"] == DEFAULT_MODELS


@pytest.mark.parametrize("control, value", [
    ("models", ("gpt2-small", "llama-2-70b")),
    ("context", 32768),
    ("batch", 64),
    ("kv_precision", "fp8"),
    ("precision", "q4_0"),
])
def test_explorer_controls_rerender(explorer, control, value):
    before = explorer.output.value
    getattr(explorer, control).value = value
    s = explorer.settings()
    assert s[control] == value
    assert explorer.output.value == kv_table_html(**s) != before
    shown = cells(explorer.output.value, "course-kv-bytes")
    assert shown == [format_bytes(kv_cache_bytes(m, s["context"], s["kv_precision"], s["batch"])) for m in s["models"]]


def test_explorer_with_no_model_selected_shows_error(explorer):
    explorer.models.value = ()
    assert "course-error" in explorer.output.value


def test_explorer_dom_classes_and_ranges(explorer):
    assert "course-kv-explorer" in explorer._dom_classes
    for name, cls in [("models", "course-kv-models"), ("context", "course-kv-context"), ("batch", "course-kv-batch"),
                      ("kv_precision", "course-kv-precision"), ("precision", "course-kv-weight-precision"),
                      ("output", "course-kv-output")]:
        assert cls in getattr(explorer, name)._dom_classes
    assert (explorer.context.min, explorer.context.max, explorer.context.step) == CONTEXT_RANGE
    assert (explorer.batch.min, explorer.batch.max, explorer.batch.step) == BATCH_RANGE


@pytest.fixture
def crossover():
    return kv_crossover_explorer()


def test_crossover_widget_numbers(crossover):
    s = crossover.settings()
    out = crossover.output.value
    assert out == crossover_html(**s)
    c = crossover_context(s["model"], s["batch"], s["precision"], s["kv_precision"])
    assert cells(out, "course-kv-crossover-context") == [f"{c:,.0f} tokens"]
    assert cells(out, "course-kv-crossover-product") == [f"{c * s['batch']:,.0f} tokens"]
    n = tokens_that_fit(s["model"], s["hardware"], s["batch"], s["precision"], s["kv_precision"])
    assert cells(out, "course-kv-fit-tokens") == [f"{n:,} tokens"]


@pytest.mark.parametrize("control, value", [
    ("model", "llama-2-7b"), ("hardware", "rtx-4090"), ("batch", 100), ("kv_precision", "fp8"), ("precision", "fp8"),
])
def test_crossover_controls_rerender(crossover, control, value):
    before = crossover.output.value
    getattr(crossover, control).value = value
    assert crossover.settings()[control] == value
    assert crossover.output.value == crossover_html(**crossover.settings()) != before


def test_crossover_widget_window_and_no_fit(crossover):
    crossover.model.value = "mistral-7b"
    crossover.batch.value = 4
    assert cells(crossover.output.value, "course-kv-crossover-context") == ["never"]
    assert "any length" in crossover.output.value
    crossover.model.value = "llama-3-70b"
    crossover.hardware.value = "rtx-4090"
    assert cells(crossover.output.value, "course-kv-fit-tokens") == ["0 tokens"]
    assert "alone exceed" in crossover.output.value
    assert "course-kv-crossover" in crossover._dom_classes


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------
def _line(ax, gid):
    found = [ln for ln in ax.get_lines() if ln.get_gid() == gid]
    assert len(found) == 1, f"expected one line {gid!r}"
    return found[0]


def test_kv_vs_context_plot_data():
    models = ("llama-2-7b", "mistral-7b", "llama-3-8b")
    fig = plot_kv_vs_context(models, max_context=16384, batch=2, kv_precision="fp8", points=33)
    ax = fig.axes[0]
    assert "KV cache" in ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and "tokens" in ax.get_xlabel()
    assert label_has_unit(ax.get_ylabel()) and "(GB)" in ax.get_ylabel()
    xs = context_grid(16384, 33)
    for name in models:
        line = _line(ax, f"kv:{name}")
        assert list(line.get_xdata()) == xs
        assert list(line.get_ydata()) == [kv_cache_bytes(name, c, "fp8", 2) / 1e9 for c in xs]
        w = _line(ax, f"weights:{name}")
        assert set(w.get_ydata()) == {get_model(name).weight_bytes("fp16") / 1e9}
    assert max(_line(ax, "kv:mistral-7b").get_ydata()) == kv_cache_bytes("mistral-7b", 4096, "fp8", 2) / 1e9


def test_crossover_plot_data():
    fig = plot_kv_crossover(("llama-3-8b", "mistral-7b"), max_batch=64)
    ax = fig.axes[0]
    assert "KV cache equals the weights" in ax.get_title()
    assert label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    bs = batch_grid(64)
    ys = list(_line(ax, "crossover:llama-3-8b").get_ydata())
    assert ys == [crossover_context("llama-3-8b", b) for b in bs]
    mys = list(_line(ax, "crossover:mistral-7b").get_ydata())
    assert all(math.isnan(y) for y in mys[:26]) and all(math.isfinite(y) for y in mys[26:])
    assert set(_line(ax, "max-positions:llama-3-8b").get_ydata()) == {8192}


def test_grids():
    assert context_grid(100, 5) == [0, 25, 50, 75, 100]
    assert batch_grid(3) == [1, 2, 3]
    with pytest.raises(ValueError, match="points"):
        context_grid(100, 1)


# --------------------------------------------------------------------------------------------------
# The exercise set agrees with the library
# --------------------------------------------------------------------------------------------------
def test_exercise_answers_agree_with_library():
    from course_lib.checks import ex03 as q
    assert q.q1.expected == get_model("llama-3-8b").kv_bytes_per_token()
    assert math.isclose(q.q2.expected * 1e9, kv_cache_bytes("llama-2-7b", 4096, batch=8))
    assert math.isclose(q.q5.expected * 1e6, kv_cache_bytes("llama-3-8b", sum(q.CONVERSATION.values())))
    assert math.isclose(q.q6.expected, crossover_context("llama-3-8b", 16))
    # q7's reference equals tokens_that_fit on the catalog cases it was built from
    assert q._max_tokens(*q._fit_case("llama-3-8b", "rtx-4090")[0]) == tokens_that_fit("llama-3-8b", "rtx-4090")
    assert q._max_tokens(*q._fit_case("llama-2-7b", "a100-80gb", 4)[0]) == tokens_that_fit("llama-2-7b", "a100-80gb", 4)
    assert q.q8.expected == min(("Llama-2-7B", "Mistral-7B", "Llama-3-8B", "Qwen2.5-7B", "DeepSeek-V3"),
                                key=lambda k: get_model(k.lower()).kv_bytes_per_token())
    assert len(q.QUESTIONS) >= 6


def test_kv_crossover_states_the_widgets_verdicts_as_data():
    x = kv_crossover("llama-3-8b", "h100-sxm", 8)
    assert x.context == crossover_context("llama-3-8b", 8) and x.context_times_batch == x.context * 8
    assert x.tokens_that_fit == tokens_that_fit("llama-3-8b", "h100-sxm", 8)
    assert x.beyond_trained_positions and not x.never and not x.weights_exceed_memory
    w = kv_crossover("mistral-7b", "h100-sxm", 4)
    assert w.never and w.any_length_fits and w.window_cache_bytes == kv_cache_bytes("mistral-7b", 4096, batch=4)
    assert kv_crossover("llama-3-70b", "rtx-4090", 1).weights_exceed_memory


@pytest.mark.parametrize("weights, kv", [("fp32", "fp32"), ("bf16", "bf16"), ("fp8", "fp8"), ("int8", "fp16"),
                                         ("q4_0", "fp16"), ("int4", "fp16")])
def test_default_kv_precision_follows_float_weights_else_fp16(weights, kv):
    assert default_kv_precision(weights) == kv
    assert default_kv_precision(weights, "fp8") == "fp8"
    assert estimate("llama-3-8b", "h100-sxm", 16, 1, precision=weights).kv_precision == kv


def test_context_limits_say_when_a_window_caps_and_when_positions_run_out():
    from course_lib.core.kv import context_limits
    mi = context_limits("mistral-7b", 5000)
    assert mi.window_capped and mi.attended == 4096 and not mi.beyond_trained
    l3 = context_limits("llama-3-8b", 8193)
    assert not l3.window_capped and l3.attended == 8193 and l3.beyond_trained
    assert not context_limits("llama-3-8b", 8192).beyond_trained
    with pytest.raises(ValueError, match="tokens"):
        context_limits("llama-3-8b", 0)


@pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b", "qwen2.5-7b"])
def test_kv_layout_picture_has_one_slab_per_layer_and_kv_head_for_k_and_v(model):
    from course_lib.lessons.plots.kv_cache import plot_kv_layout

    m = get_model(model)
    fig = plot_kv_layout(model, tokens=3)
    ax = fig.axes[0]
    assert ax.get_title() and label_has_unit(ax.get_xlabel()) and label_has_unit(ax.get_ylabel())
    gids = [p.get_gid() for p in ax.patches if p.get_gid()]
    for name in ("K", "V"):
        slabs = {g for g in gids if g.startswith(name + ":")}
        assert len(slabs) == m.layers * m.kv_heads
    assert f"{m.kv_values_per_token:,} values" in "".join(t.get_text() for t in ax.texts)
    with pytest.raises(ValueError, match="model must cache per-head K and V"):
        plot_kv_layout("deepseek-v3")
    with pytest.raises(ValueError, match="tokens"):
        plot_kv_layout(model, tokens=0)


def test_lesson_teaches_driver_bytes_against_the_box_figure():
    from nbtext import shown_text
    from repo import ROOT

    text = shown_text(ROOT / "notebooks" / "03_kv_cache.ipynb")
    rtx = get_hardware("rtx-4090")
    box = dataclasses.replace(rtx, capacity=rtx.capacity_marketing_gb * 1e9)
    assert f"{tokens_that_fit('llama-3-8b', box):,}" in text and f"{tokens_that_fit('llama-3-8b', rtx):,}" in text
    assert f"{int(rtx.capacity):,} bytes" in text
