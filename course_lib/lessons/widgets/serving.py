"""Lesson 10's explorer: a continuously batching server under load, simulated.

Lessons: 10

Slide the request rate, switch chunked prefill on or off, set the token budget per step and the
largest batch, and read the p50/p99 TTFT and TPOT, the delivered throughput, the mean batch and the
preemptions of one :func:`course_lib.core.serving.simulate` run (a few hundred Poisson requests,
seed 0, Llama-3-8B on an H100 SXM by default):

    from course_lib.lessons.widgets.serving import serving_explorer
    serving_explorer()
    serving_explorer(rate=12.0, chunked_prefill=False)

The plain function :func:`serving_reading` computes everything shown (tested without a browser);
the widget only wires controls to it. A stored notebook shows a static snapshot of the reading
(``_html.Snapshot``). CSS classes: ``course-serving-explorer`` (the box), ``course-rate``,
``course-chunked``, ``course-budget``, ``course-max-batch`` and ``course-serving-table``.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as widgets

from course_lib.core.serving import simulate
from course_lib.core.units import format_time
from course_lib.core.validation import require_count, require_positive
from course_lib.lessons.widgets import _html

__all__ = ["ServingReading", "serving_reading", "ServingExplorer", "serving_explorer", "RATE_RANGE",
           "BUDGET_CHOICES", "REQUESTS"]

#: (min, max, step) of the rate slider, requests/s.
RATE_RANGE = (1.0, 40.0, 1.0)
#: token budgets per step offered by the dropdown (each at least one KV block of 16 tokens).
BUDGET_CHOICES = (256, 512, 1024, 2048, 4096, 8192)
#: requests per simulation: enough for a p99, few enough to answer in well under a second.
REQUESTS = 400


@dataclass(frozen=True)
class ServingReading:
    """What the explorer shows for one setting: the simulation's summary and its settings."""

    settings: dict
    summary: dict

    def rows(self) -> list[tuple[str, str]]:
        s = self.summary

        def t(v):
            return "undefined (every answer has one token)" if v is None else format_time(v)

        return [("TTFT p50 / p99", f"{t(s['ttft_p50'])} / {t(s['ttft_p99'])}"),
                ("TPOT p50 / p99", f"{t(s['tpot_p50'])} / {t(s['tpot_p99'])} (each request's mean gap)"),
                ("ITL p50 / p99", f"{t(s['itl_p50'])} / {t(s['itl_p99'])} (every gap between two tokens, "
                                  f"{s['itl_samples']:,} of them)"),
                ("p99 rests on", f"the {s['p99_rests_on']} slowest of {s['measured']:,} requests"),
                ("throughput", f"{s['throughput']:,.0f} tokens/s ({s['request_throughput']:.2f} requests/s)"),
                ("mean batch", f"{s['mean_batch']:.1f} sequences (largest {s['max_batch']})"),
                ("GPU busy", f"{s['utilisation']:.0%} of the time, {s['prefill_share']:.0%} of it in steps with "
                             f"prefill"),
                ("preemptions", f"{s['preemptions']:,}")]


def serving_reading(rate=8.0, chunked_prefill=True, token_budget=2048, max_batch=64, *, model="llama-3-8b",
                    hardware="h100-sxm", prompt_tokens=(256, 2048), output_tokens=(32, 512), requests=REQUESTS,
                    seed=0, compute_efficiency=0.747, bandwidth_efficiency=0.546) -> ServingReading:
    """One simulation behind the explorer (defaults: lesson 09's efficiencies, mixed chat lengths)."""
    rate = require_positive("rate", rate)
    token_budget = require_count("token_budget", token_budget, minimum=1)
    max_batch = require_count("max_batch", max_batch, minimum=1)
    r = simulate(model, hardware, rate, prompt_tokens, output_tokens, requests, seed, max_batch=max_batch,
                 token_budget=token_budget, chunked_prefill=chunked_prefill, compute_efficiency=compute_efficiency,
                 bandwidth_efficiency=bandwidth_efficiency)
    return ServingReading(settings=dict(r.settings, rate=rate, requests=requests), summary=r.summary())


class ServingExplorer(_html.Snapshot, widgets.VBox):
    """The widget returned by :func:`serving_explorer`: controls ``rate``, ``chunked``, ``budget``, ``max_batch``;
    output ``table`` (HTML); ``reading`` holds the latest :class:`ServingReading`."""

    def __init__(self, rate=8.0, chunked_prefill=True, token_budget=2048, max_batch=64, **fixed):
        lo, hi, step = RATE_RANGE
        wide = {"description_width": "9em"}
        self.fixed = fixed
        self.rate = widgets.FloatSlider(value=rate, min=lo, max=hi, step=step, description="Rate (req/s)",
                                        style=wide, layout=widgets.Layout(width="36em"), continuous_update=False)
        self.chunked = widgets.Checkbox(value=chunked_prefill, description="chunked prefill")
        self.budget = widgets.Dropdown(options=list(BUDGET_CHOICES), value=token_budget,
                                       description="Token budget", style=wide)
        self.max_batch = widgets.IntSlider(value=max_batch, min=1, max=256, description="Max batch", style=wide,
                                           continuous_update=False)
        self.table = widgets.HTML()
        for w, cls in [(self.rate, "course-rate"), (self.chunked, "course-chunked"), (self.budget, "course-budget"),
                       (self.max_batch, "course-max-batch"), (self.table, "course-serving-table")]:
            w.add_class(cls)
        self.reading: ServingReading | None = None
        super().__init__(children=[self.rate, widgets.HBox([self.chunked, self.budget, self.max_batch]), self.table])
        self.add_class("course-serving-explorer")
        for w in (self.rate, self.chunked, self.budget, self.max_batch):
            w.observe(self._refresh, names="value")
        self._refresh()

    def _refresh(self, *_):
        try:
            self.reading = serving_reading(self.rate.value, self.chunked.value, self.budget.value,
                                           self.max_batch.value, **self.fixed)
        except (ValueError, TypeError) as e:
            self.reading = None
            self.table.value = _html.error_box(str(e), "Cannot simulate: ")
            return
        rows = [_html.row(html.escape(k), v) for k, v in self.reading.rows()]
        s = self.reading.settings
        cap = (f"{s['requests']:,} Poisson requests at {s['rate']:g} requests/s, {html.escape(s['model'])} on "
               f"{html.escape(s['hardware'])}, seed {s['seed']}")
        self.table.value = _html.table(rows) + _html.caption(cap)

    def snapshot_body(self) -> str:
        return self.table.value

    def snapshot_text(self) -> str:
        return "ServingExplorer: an interactive serving simulation (run the cell to use it)"


def serving_explorer(rate=8.0, chunked_prefill=True, token_budget=2048, max_batch=64, **fixed) -> ServingExplorer:
    """The explorer (see the module docstring); ``fixed`` keywords go to :func:`serving_reading`."""
    return ServingExplorer(rate, chunked_prefill, token_budget, max_batch, **fixed)
