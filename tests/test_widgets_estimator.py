"""The estimate explorer widget, driven in-process (no browser): controls -> estimate_summary."""
from __future__ import annotations

import html
import re

import pytest

widgets = pytest.importorskip("ipywidgets")

from course_lib import estimate  # noqa: E402
from course_lib.core.units import Quantity, format_bytes, format_time  # noqa: E402
from course_lib.lessons.widgets import EstimateExplorer, estimate_explorer, estimate_summary  # noqa: E402
from course_lib.lessons.widgets.estimator import NEW_TOKENS_RANGE, PROMPT_RANGE  # noqa: E402


def cell(summary: str, cls: str) -> str:
    """Text of the <td class="cls"> in a summary (what the browser test reads)."""
    found = re.findall(rf'<td class="{cls}"[^>]*>(.*?)</td>', summary)
    assert len(found) == 1, f"expected one {cls} cell, found {len(found)}"
    return html.unescape(found[0])


def test_summary_numbers_are_the_estimators_formatted():
    e = estimate("mistral-7b", "rtx-4090", 512, 256, precision="fp16")
    s = estimate_summary("mistral-7b", "rtx-4090", "fp16", 512, 256)
    assert cell(s, "course-ttft") == format_time(e.ttft)
    assert cell(s, "course-tpot") == format_time(e.tpot)
    assert cell(s, "course-total") == format_time(e.total)
    assert cell(s, "course-tps") == Quantity(e.tps, "number").format()
    assert cell(s, "course-memory") == format_bytes(e.memory_needed)
    assert "255 decode steps" in s and "memory-bound" in s


def test_summary_known_values_mistral_on_4090():
    # Mistral-7B fp16 streams ~14.5 GB of weights per decode step over 1008 GB/s: ~14 ms per token.
    s = estimate_summary("mistral-7b", "rtx-4090", "fp16", 512, 256)
    tpot = float(cell(s, "course-tpot").removesuffix(" ms"))
    assert 14.0 <= tpot <= 15.0
    assert cell(s, "course-tps") == Quantity(256 / estimate("mistral-7b", "rtx-4090", 512, 256).total,
                                             "number").format()


def test_summary_single_token_has_no_decode_steps():
    s = estimate_summary("llama-2-7b", "a100-80gb", "fp16", 128, 16)
    assert "15 decode steps" in s
    e = estimate("llama-2-7b", "a100-80gb", 128, 1)
    s1 = estimate_summary("llama-2-7b", "a100-80gb", "fp16", 128, 1)
    assert cell(s1, "course-total") == format_time(e.ttft)
    assert "TTFT alone" in s1


def test_summary_reports_when_model_does_not_fit():
    s = estimate_summary("llama-2-70b", "rtx-4090", "fp16", 512, 256)
    assert "does NOT fit" in s
    assert "fits" in estimate_summary("llama-2-7b", "h100-sxm", "fp16", 512, 256)


def test_summary_bad_input_raises_one_clear_error():
    with pytest.raises(ValueError, match="model"):
        estimate_summary("mistral-8b", "rtx-4090", "fp16", 512, 256)
    with pytest.raises(ValueError, match="new_tokens"):
        estimate_summary("mistral-7b", "rtx-4090", "fp16", 512, 0)


@pytest.fixture
def explorer() -> EstimateExplorer:
    return estimate_explorer()


def test_initial_html_matches_summary(explorer):
    assert explorer.output.value == estimate_summary("mistral-7b", "rtx-4090", "fp16", 512, 256)
    assert explorer.settings() == {"model": "mistral-7b", "hardware": "rtx-4090", "precision": "fp16",
                                   "prompt_tokens": 512, "new_tokens": 256}


@pytest.mark.parametrize("control, value", [
    ("new_tokens", 1024),
    ("prompt_tokens", 4096),
    ("model", "llama-3-8b"),
    ("hardware", "h100-sxm"),
    ("precision", "int4"),
])
def test_setting_a_control_rerenders(explorer, control, value):
    before = explorer.output.value
    getattr(explorer, control).value = value
    expected = estimate_summary(**{**explorer.settings(), control: value})
    assert explorer.settings()[control] == value
    assert explorer.output.value == expected
    assert explorer.output.value != before


def test_tpot_text_changes_with_prompt_length(explorer):
    # What the browser test relies on: a longer prompt means more KV cache read per token.
    before = cell(explorer.output.value, "course-tpot")
    explorer.prompt_tokens.value = PROMPT_RANGE[1]
    after = cell(explorer.output.value, "course-tpot")
    e = estimate("mistral-7b", "rtx-4090", PROMPT_RANGE[1], 256)
    assert after == format_time(e.tpot) != before


def test_unestimable_setting_shows_error_instead_of_raising(explorer):
    # No fp32 peak FLOP/s published for some devices: the widget shows the message.
    explorer.precision.value = "fp32"
    explorer.hardware.value = "m3-max"
    try:
        estimate_summary(**explorer.settings())
    except ValueError as exc:
        assert "course-error" in explorer.output.value
        assert html.escape(str(exc)) in explorer.output.value
    else:  # the catalog gained a peak: then the widget shows numbers
        assert explorer.output.value == estimate_summary(**explorer.settings())


def test_stable_dom_classes(explorer):
    assert "course-estimate-explorer" in explorer._dom_classes
    for name, cls in [("model", "course-model"), ("hardware", "course-hardware"),
                      ("precision", "course-precision"), ("prompt_tokens", "course-prompt-tokens"),
                      ("new_tokens", "course-new-tokens"), ("output", "course-estimate-output")]:
        assert cls in getattr(explorer, name)._dom_classes


def test_slider_ranges():
    w = estimate_explorer(prompt_tokens=PROMPT_RANGE[1], new_tokens=NEW_TOKENS_RANGE[0])
    assert (w.prompt_tokens.min, w.prompt_tokens.max, w.prompt_tokens.step) == PROMPT_RANGE
    assert (w.new_tokens.min, w.new_tokens.max, w.new_tokens.step) == NEW_TOKENS_RANGE


@pytest.mark.parametrize("kwargs, match", [
    ({"model": "mistrall-7b"}, "model"),
    ({"hardware": "rtx-5090x"}, "hardware"),
    ({"precision": "fp12"}, "precision"),
    ({"prompt_tokens": 10**6}, "prompt_tokens"),
    ({"new_tokens": 0}, "new_tokens"),
    ({"new_tokens": 2.5}, "new_tokens"),
])
def test_factory_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        estimate_explorer(**kwargs)


def test_factory_rejects_wrong_types():
    with pytest.raises(TypeError, match="model"):
        estimate_explorer(model=7)


def test_every_widget_draws_rows_and_error_boxes_with_the_one_html_helper():
    from course_lib.lessons.widgets import _html
    r = _html.row("TTFT", "1 < 2 ms", "<b>note</b>", cls="course-ttft", strong=True, nowrap=True)
    assert ('<td class="course-ttft" style="text-align:right;padding-right:1em;font-weight:bold;'
            'white-space:nowrap">') in r
    assert "1 &lt; 2 ms" in r and "<b>note</b>" in r
    assert "&ndash;" in _html.row("x", "&ndash;", escape=False)
    box = _html.error_box("bad <input>", "Cannot estimate this setting: ", cls="course-estimate")
    assert box.startswith('<div class="course-estimate course-error"') and "bad &lt;input&gt;" in box
    assert _html.notes([]) == "" and _html.notes(["a", "b"]).count("<p") == 2
    from course_lib.lessons.widgets import estimator as explorer_module   # its error box is the helper's
    assert explorer_module._error_html(ValueError("x < y")) == _html.error_box(
        "x < y", "Cannot estimate this setting: ", cls="course-estimate")
