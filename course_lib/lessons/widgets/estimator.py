"""A first interactive view of :func:`course_lib.estimate`: pick a model, a device and a precision,
slide the prompt and response lengths, and read TTFT, TPOT, total time and tokens per second.

Lessons: 00

    from course_lib.lessons.widgets import estimate_explorer
    estimate_explorer()                                  # Mistral-7B on an RTX 4090, fp16
    estimate_explorer("llama-3-8b", "h100-sxm", precision="fp8", prompt_tokens=2048)

What the widget shows is computed by the plain function :func:`estimate_summary` (HTML), so it
can be tested without a browser; the widget only wires controls to it. The numbers are the
estimator's defaults: the physical floor, at 100 % of peak bandwidth and compute.

Stable CSS classes for browser tests: the whole box ``course-estimate-explorer``; controls
``course-model``, ``course-hardware``, ``course-precision``, ``course-prompt-tokens``,
``course-new-tokens``; the output ``course-estimate-output``; inside its HTML, the values
``course-ttft``, ``course-tpot``, ``course-total``, ``course-tps``, ``course-memory``.
"""
from __future__ import annotations

import html

import ipywidgets as widgets

from course_lib.core.estimator import estimate
from course_lib.core.hardware import get_hardware, list_hardware
from course_lib.core.models import get_model, list_models
from course_lib.core.precision import PRECISIONS, get_precision
from course_lib.core.units import Quantity, format_bytes, format_time
from course_lib.core.validation import require_choice, require_count
from course_lib.lessons.widgets import _html

__all__ = ["EstimateExplorer", "estimate_explorer", "estimate_summary",
           "PROMPT_RANGE", "NEW_TOKENS_RANGE"]

#: (min, max, step) of the prompt-length slider.
PROMPT_RANGE = (16, 32768, 16)
#: (min, max, step) of the response-length slider.
NEW_TOKENS_RANGE = (16, 4096, 16)

_BOUND_WORDS = {"memory": "memory-bound", "compute": "compute-bound",
                "mixed": "memory-bound, turning compute-bound as the context grows"}


def _count_word(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def estimate_summary(model: str, hardware: str, precision: str, prompt_tokens: int, new_tokens: int) -> str:
    """The explorer's HTML for one setting: TTFT, TPOT, total and tokens/s, plus memory.

    Every number is ``course_lib.estimate(model, hardware, prompt_tokens, new_tokens,
    precision=precision)`` printed with ``course_lib.core.units``: e.g. the TPOT cell holds exactly
    ``format_time(estimate(...).tpot)``. Bad arguments raise the estimator's ValueError/TypeError.
    """
    e = estimate(model, hardware, prompt_tokens, new_tokens, precision=precision)
    m, hw = e.model, e.hardware
    n, steps = e.new_tokens, e.decode_steps
    device = hw.display or hw.name
    esc = html.escape

    if e.fits is None:
        memory_note = "weights + KV cache; the device's memory size is not in the catalog"
    else:
        verdict = "fits" if e.fits else "does NOT fit"
        sold = getattr(hw, "capacity_marketing_gb", None)
        driver = format_bytes(e.memory_available, "iec", digits=4)
        as_sold = (f" (the memory its driver reports, {driver}, of a card sold as '{sold:g} GB': lesson 03 "
                   "explains the difference)") if sold else ""
        memory_note = (f"weights + KV cache at the end of the response; "
                       f"{esc(device)} has {format_bytes(e.memory_available)}{esc(as_sold)}: {verdict}")

    if steps:
        tpot_note = f"mean of {_count_word(steps, 'decode step')}, {_BOUND_WORDS[e.decode_bound]}"
        total_note = f"TTFT + {steps:,} &times; TPOT"
    else:
        tpot_note = f"the next decode step, {_BOUND_WORDS[e.decode_bound]}"
        total_note = "TTFT alone: the first token comes out of the prefill"
    rows = [
        ("Time to first token (TTFT)", "course-ttft", format_time(e.ttft),
         f"prefill of {_count_word(e.prompt_tokens, 'prompt token')}, {_BOUND_WORDS[e.prefill_bound]}"),
        ("Time per output token (TPOT)", "course-tpot", format_time(e.tpot), tpot_note),
        (f"Total for {_count_word(n, 'token')}", "course-total", format_time(e.total), total_note),
        ("Tokens per second", "course-tps", Quantity(e.tps, "number").format(),
         f"{_count_word(n, 'token')} / total"),
        ("Memory needed", "course-memory", format_bytes(e.memory_needed), memory_note),
    ]
    body = _html.table((_html.row(label, value, note, cls=cls, strong=True, nowrap=True)
                        for label, cls, value, note in rows), cls="course-estimate-table")
    caption = (f"{esc(m.name)} on {esc(device)}, {esc(e.precision)} weights, "
               f"{esc(e.kv_precision)} KV cache, batch {e.batch}: the physical floor "
               f"(100 % of peak bandwidth and compute)")
    return f'<div class="course-estimate">\n{body}\n{_html.caption(caption, "course-estimate-caption")}\n</div>'


def _error_html(exc: Exception) -> str:
    return _html.error_box(str(exc), "Cannot estimate this setting: ", cls="course-estimate")


def _check_range(name: str, value, lo: int, hi: int) -> int:
    v = require_count(name, value, minimum=1)
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi} for the explorer's slider, got {v}")
    return v


class EstimateExplorer(_html.Snapshot, widgets.VBox):
    """The widget returned by :func:`estimate_explorer`; controls are attributes.

    ``model``, ``hardware``, ``precision`` (Dropdowns), ``prompt_tokens``, ``new_tokens``
    (IntSliders) and ``output`` (HTML). Changing any control re-renders ``output.value`` with
    :func:`estimate_summary`.
    """

    def __init__(self, model="mistral-7b", hardware="rtx-4090", precision="fp16",
                 prompt_tokens=512, new_tokens=256):
        model = get_model(require_choice("model", model, list_models())).name
        hardware = require_choice("hardware", hardware, list_hardware())
        precision = get_precision(precision).name
        p_lo, p_hi, p_step = PROMPT_RANGE
        n_lo, n_hi, n_step = NEW_TOKENS_RANGE
        prompt_tokens = _check_range("prompt_tokens", prompt_tokens, p_lo, p_hi)
        new_tokens = _check_range("new_tokens", new_tokens, n_lo, n_hi)

        wide = {"description_width": "8em"}
        self.model = widgets.Dropdown(options=list_models(), value=model, description="Model",
                                      style=wide)
        self.hardware = widgets.Dropdown(
            options=[(get_hardware(h).display or h, h) for h in list_hardware()], value=hardware,
            description="Hardware", style=wide)
        self.precision = widgets.Dropdown(options=list(PRECISIONS), value=precision,
                                          description="Weights", style=wide)
        self.prompt_tokens = widgets.IntSlider(value=prompt_tokens, min=p_lo, max=p_hi, step=p_step,
                                               description="Prompt tokens", style=wide,
                                               layout=widgets.Layout(width="36em"))
        self.new_tokens = widgets.IntSlider(value=new_tokens, min=n_lo, max=n_hi, step=n_step,
                                            description="New tokens", style=wide,
                                            layout=widgets.Layout(width="36em"))
        self.output = widgets.HTML()
        for w, cls in [(self.model, "course-model"), (self.hardware, "course-hardware"),
                       (self.precision, "course-precision"), (self.prompt_tokens, "course-prompt-tokens"),
                       (self.new_tokens, "course-new-tokens"), (self.output, "course-estimate-output")]:
            w.add_class(cls)
        super().__init__(children=[
            widgets.HBox([self.model, self.hardware, self.precision]),
            self.prompt_tokens,
            self.new_tokens,
            self.output,
        ])
        self.add_class("course-estimate-explorer")
        for w in self.controls:
            w.observe(self._refresh, names="value")
        self._refresh()

    @property
    def controls(self) -> tuple:
        return (self.model, self.hardware, self.precision, self.prompt_tokens, self.new_tokens)

    def settings(self) -> dict:
        """The current setting, as keyword arguments of :func:`estimate_summary`."""
        return {"model": self.model.value, "hardware": self.hardware.value,
                "precision": self.precision.value, "prompt_tokens": self.prompt_tokens.value,
                "new_tokens": self.new_tokens.value}

    def __repr__(self) -> str:
        s = self.settings()
        return (f"estimate_explorer({s['model']!r}, {s['hardware']!r}, {s['precision']!r}, "
                f"prompt_tokens={s['prompt_tokens']}, new_tokens={s['new_tokens']})")

    def snapshot_body(self) -> str:
        """The static snapshot a stored notebook shows (see ``_html.Snapshot``): the current table.

        Front ends without the widget (a saved notebook opened before it is run, a notebook viewer)
        show it instead of "model not found".
        """
        return f'<div class="course-estimate-snapshot">{self.output.value}</div>'

    def snapshot_text(self) -> str:
        return f"{self!r}: an interactive widget (run the cell to use it)"

    def _refresh(self, change=None) -> None:
        try:
            self.output.value = estimate_summary(**self.settings())
        except (ValueError, TypeError) as exc:  # e.g. no published peak for this precision
            self.output.value = _error_html(exc)


def estimate_explorer(model: str = "mistral-7b", hardware: str = "rtx-4090", precision: str = "fp16",
                      prompt_tokens: int = 512, new_tokens: int = 256) -> EstimateExplorer:
    """An interactive latency estimate: dropdowns for model, hardware and weight precision,
    sliders for prompt and response length, and the resulting TTFT/TPOT/total/TPS.

    ``model``/``hardware`` are catalog names (``list_models()``, ``list_hardware()``);
    ``prompt_tokens`` must lie in ``PROMPT_RANGE`` and ``new_tokens`` in ``NEW_TOKENS_RANGE``.
    """
    return EstimateExplorer(model=model, hardware=hardware, precision=precision,
                            prompt_tokens=prompt_tokens, new_tokens=new_tokens)
