"""Lesson 02: how many weight bytes one decode step streams, for a model and a weight precision.

Lessons: 02

    from course_lib.lessons.widgets.data_per_token import bytes_per_token_explorer
    bytes_per_token_explorer()                          # Mistral-7B in fp16
    bytes_per_token_explorer("qwen3-0.6b", "q4_0")      # a model with a tied embedding / lm_head

The learner picks a catalog model and a weight precision; the widget shows the bytes needed to
*store* the weights (``ModelSpec.weight_bytes``) next to the bytes one decode step *streams*
(``ModelSpec.decode_weight_bytes``), and where the difference comes from: the blocks are read in
full, the lm_head (V × h) is read in full whether or not it is tied to the embedding, and the
embedding table contributes only the one row of the current token (plus one learned-position row
for GPT-2).

Everything the widget shows is computed by :func:`course_lib.core.roofline.bytes_per_token` (a
``BytesPerToken`` record: ``ModelSpec.streamed_params`` split into its terms) and rendered by
:func:`render_bytes_per_token`; both are tested without a browser.

Stable CSS classes for browser tests: the whole box ``course-bpt-explorer``; controls
``course-bpt-model`` and ``course-bpt-precision``; the output ``course-bpt-output``; inside its
HTML, ``<td>`` cells ``course-bpt-stored``, ``course-bpt-streamed``, ``course-bpt-blocks``,
``course-bpt-lm-head``, ``course-bpt-embedding-row`` and ``course-bpt-difference``.
"""
from __future__ import annotations

import html

import ipywidgets as widgets

from course_lib.core.models import get_model, list_models
from course_lib.core.precision import PRECISIONS, get_precision
from course_lib.core.roofline import BytesPerToken, bytes_per_token
from course_lib.core.units import format_bytes, format_params
from course_lib.core.validation import require_choice
from course_lib.lessons.widgets import _html

__all__ = ["render_bytes_per_token", "BytesPerTokenExplorer", "bytes_per_token_explorer", "PRECISION_OPTIONS"]

#: Weight formats offered by the precision dropdown (tf32 is left out: it is stored as fp32).
PRECISION_OPTIONS: tuple[str, ...] = tuple(p for p in PRECISIONS if p != "tf32")


def _signed_bytes(n: float) -> str:
    return ("+" if n >= 0 else "\u2212") + format_bytes(abs(n))


def _difference_note(r: BytesPerToken) -> str:
    if r.tied_embeddings:
        return ("the shared matrix is stored once but read in full as the lm_head, and the current "
                "token's row is read again as its embedding")
    skipped = "the embedding rows of all the other tokens"
    if r.moe:
        skipped += " and the experts this token is not routed to"
    return f"not read: {skipped}"


def render_bytes_per_token(r: BytesPerToken) -> str:
    """The HTML the explorer shows for ``r`` (every value printed with ``course_lib.core.units``)."""
    esc = html.escape
    tied = ("tied to the embedding: one matrix stored, still read in full every step"
            if r.tied_embeddings else "its own V \u00d7 h matrix, read in full every step")
    blocks_note = (f"{format_params(r.block_params_read)} parameters: attention and MLP of every layer"
                   if not r.moe else
                   f"{format_params(r.block_params_read)} parameters: attention, shared weights and the "
                   f"routed experts one token uses (the rest of the experts stay in memory, unread)")
    rows = [
        ("Stored (the checkpoint)", "course-bpt-stored", format_bytes(r.stored_bytes),
         f"{format_params(r.params)} parameters \u00d7 {r.bytes_per_element:g} B ({esc(r.precision)})"),
        ("Streamed per decode step", "course-bpt-streamed", format_bytes(r.streamed_bytes),
         f"{format_params(r.streamed_params)} parameters read once per generated token"),
        ("\u2003blocks", "course-bpt-blocks", format_bytes(r.part_bytes("blocks")), blocks_note),
        ("\u2003lm_head", "course-bpt-lm-head", format_bytes(r.part_bytes("lm_head")),
         f"{format_params(r.lm_head_params_read)} parameters, {tied}"),
        ("\u2003embedding", "course-bpt-embedding-row", format_bytes(r.part_bytes("embedding_row")),
         f"only the current token's row of the {format_params(r.embedding_params)}-parameter table"),
        ("Streamed \u2212 stored", "course-bpt-difference", _signed_bytes(r.difference_bytes),
         _difference_note(r)),
    ]
    body = _html.table((_html.row(label, value, note, cls=cls, strong=True) for label, cls, value, note in rows),
                       cls="course-bpt-table")
    caption = (f"{esc(r.model)}, {esc(r.precision)} weights ({r.bytes_per_element:g} bytes per weight), "
               f"batch 1; KV-cache reads are not included (lesson 03)")
    return f'<div class="course-bpt">\n{body}\n{_html.caption(caption, "course-bpt-caption")}\n</div>'


def _error_html(exc: Exception) -> str:
    return _html.error_box(str(exc), cls="course-bpt")


class BytesPerTokenExplorer(_html.Snapshot, widgets.VBox):
    """The widget returned by :func:`bytes_per_token_explorer`.

    ``model`` and ``precision`` are Dropdowns, ``output`` an HTML widget; ``result`` is the latest
    :class:`BytesPerToken`. Changing a control re-renders ``output.value``.
    """

    def __init__(self, model="mistral-7b", precision="fp16"):
        model = get_model(require_choice("model", model, list_models())).name
        precision = require_choice("precision", get_precision(precision).name, PRECISION_OPTIONS)
        wide = {"description_width": "6em"}
        self.model = widgets.Dropdown(options=list_models(), value=model, description="Model", style=wide)
        self.precision = widgets.Dropdown(
            options=[(f"{p} ({PRECISIONS[p].bits:g} bits)", p) for p in PRECISION_OPTIONS], value=precision,
            description="Weights", style=wide)
        self.output = widgets.HTML()
        self.result: BytesPerToken | None = None
        for w, cls in [(self.model, "course-bpt-model"), (self.precision, "course-bpt-precision"),
                       (self.output, "course-bpt-output")]:
            w.add_class(cls)
        super().__init__(children=[widgets.HBox([self.model, self.precision]), self.output])
        self.add_class("course-bpt-explorer")
        self.model.observe(self._refresh, names="value")
        self.precision.observe(self._refresh, names="value")
        self._refresh()

    def settings(self) -> dict:
        """The current setting, as keyword arguments of :func:`bytes_per_token`."""
        return {"model": self.model.value, "precision": self.precision.value}

    def _refresh(self, change=None) -> None:
        try:
            self.result = bytes_per_token(**self.settings())
        except (ValueError, TypeError) as exc:  # pragma: no cover - the dropdowns only offer valid names
            self.result = None
            self.output.value = _error_html(exc)
        else:
            self.output.value = render_bytes_per_token(self.result)


def bytes_per_token_explorer(model: str = "mistral-7b", precision: str = "fp16") -> BytesPerTokenExplorer:
    """Dropdowns for a catalog model and a weight precision; shows stored vs streamed bytes per token."""
    return BytesPerTokenExplorer(model=model, precision=precision)
