"""A unit converter for sizes and bandwidths: one text box, one convention dropdown, three readings.

Lessons: 01

The learner types a size (``"14 GB"``, ``"13.04 GiB"``, ``"16060522496"``) or a bandwidth
(``"1008 GB/s"``) and picks how the labels KB/MB/GB/TB/PB are to be read: SI (powers of 1000, as
datasheets and this course write them) or the source's convention (powers of 1024). The widget
shows the exact number of bytes and the same quantity printed three ways: SI (``GB``), IEC
(``GiB``) and the source's 1024-based labels (``GB`` meaning GiB). When the typed label means
different things in the two conventions, it also shows the other reading and how far apart the two
are -- the trap this lesson is about.

``convert(text, convention)`` computes everything the widget shows and is tested without a browser;
``unit_converter()`` only wires it to the controls. All arithmetic is ``course_lib.core.units``'.

Stable CSS classes (``_dom_classes``) for the browser tests: ``course-units-converter`` (the whole
widget), ``course-units-text`` (text box), ``course-units-system`` (dropdown) and
``course-units-readings`` (the output); inside the output each reading is a ``<td>`` with class
``course-units-si``, ``course-units-iec``, ``course-units-source`` or ``course-units-exact``.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

import ipywidgets as widgets

from course_lib.core import units
from course_lib.core.validation import require_choice
from course_lib.lessons.widgets import _html

__all__ = ["Readings", "convert", "render_readings", "UnitConverter", "unit_converter",
           "CONVENTION_OPTIONS", "DIGITS"]

#: Significant digits of the readings: enough to tell 14 GB from 13.04 GiB.
DIGITS = 4

#: Dropdown label -> ``convention`` argument of ``course_lib.core.units.parse_*``.
CONVENTION_OPTIONS: tuple[tuple[str, str], ...] = (
    ("SI: KB, MB, GB, TB are powers of 1000", "si"),
    ("Source: KB, MB, GB, TB are powers of 1024", "source"),
)

_LEADING_NUMBER = re.compile(r"^\s*[+\-]?[\d.,_\u2009\u202f]*(?:[eE][+\-]?\d+)?\s*")


@dataclass(frozen=True)
class Readings:
    """What the converter shows for one input.

    ``value`` is in bytes (``dimension == "bytes"``) or bytes per second (``"bandwidth"``);
    ``si``, ``iec`` and ``source`` are that value printed with ``course_lib.core.units`` in each system.
    When the typed unit means different amounts in the two conventions (``GB``, ``MB/s``,
    ``gigabytes``; never ``GiB``, ``kB`` or bits), ``ambiguous_label`` is that unit,
    ``other_value``/``other_si`` the reading under the other convention and
    ``difference_percent`` how much larger the 1024-based reading is; otherwise they are ``None``.
    """

    text: str
    convention: str
    dimension: str
    value: float
    si: str
    iec: str
    source: str
    ambiguous_label: str | None = None
    other_convention: str | None = None
    other_value: float | None = None
    other_si: str | None = None
    difference_percent: float | None = None

    @property
    def exact(self) -> str:
        """The value in the base unit with thousands separators, e.g. ``"14,000,000,000 B"``."""
        return _exact(self.value, self.dimension)

    @property
    def other_exact(self) -> str | None:
        """The other convention's reading in the base unit (``None`` when not ambiguous)."""
        return None if self.other_value is None else _exact(self.other_value, self.dimension)

    @property
    def other_iec(self) -> str | None:
        """The other convention's reading in IEC units (``None`` when not ambiguous)."""
        if self.other_value is None:
            return None
        fmt = units.format_bytes if self.dimension == "bytes" else units.format_bandwidth
        return fmt(self.other_value, "iec", DIGITS)


def _exact(value: float, dimension: str) -> str:
    unit = "B" if dimension == "bytes" else "B/s"
    number = f"{int(value):,}" if value == int(value) else f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{number} {unit}"


def convert(text, convention: str = "si") -> Readings:
    """Read ``text`` as a size or bandwidth under ``convention`` and print it in all three systems.

    ``text`` is a string such as ``"14 GB"``, ``"13.04 GiB"`` or ``"1008 GB/s"`` (a bare number is
    bytes); ``convention`` is ``"si"`` or ``"source"`` (``"jedec"`` is an alias), as in
    ``course_lib.core.units.parse_bytes``. Raises ``ValueError``/``TypeError`` from ``course_lib.core.units``
    for text that is not a size or a bandwidth.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str such as '14 GB' or '1008 GB/s', got {type(text).__name__}")
    conv = require_choice("convention", convention, units.CONVENTIONS)
    conv = "source" if conv == "jedec" else conv
    dimension, value = _read(text, conv)
    fmt = units.format_bytes if dimension == "bytes" else units.format_bandwidth
    readings = {system: fmt(value, system, DIGITS) for system in ("si", "iec", "source")}

    other = "source" if conv == "si" else "si"
    _, other_value = _read(text, other)
    if other_value == value:  # IEC labels, kB, bits and bare numbers mean the same in both
        return Readings(text, conv, dimension, value, **readings)
    si_value, source_value = (value, other_value) if conv == "si" else (other_value, value)
    return Readings(
        text, conv, dimension, value, **readings,
        ambiguous_label=_LEADING_NUMBER.sub("", text).strip(), other_convention=other, other_value=other_value,
        other_si=fmt(other_value, "si", DIGITS),
        difference_percent=units.convention_gap_percent(si_value, source_value),
    )


_WHAT = {"time": "a time", "params": "a parameter count", "flops": "a FLOP count",
         "flop_rate": "a FLOP rate"}


def _read(text: str, convention: str) -> tuple[str, float]:
    """(dimension, value in base units) of a size or bandwidth; anything else is a ValueError."""
    q = units.parse_quantity(text, convention=convention)
    if q.dimension == "number":
        return "bytes", q.value
    if q.dimension not in ("bytes", "bandwidth"):
        raise ValueError(
            f"text {text!r} is {_WHAT.get(q.dimension, q.dimension)}, not a size or a bandwidth; "
            f"type e.g. '14 GB', '13.04 GiB' or '1008 GB/s'"
        )
    return q.dimension, q.value


_CONVENTION_WORDS = {"si": "powers of 1000 (SI)", "source": "powers of 1024 (the source's convention)"}
_BARE_B = re.compile(r"^\s*[\d.,_]+(?:[eE][+\-]?\d+)?B\s*$")


def render_readings(r: Readings) -> str:
    """The HTML the widget shows for ``r``."""
    rows = [
        ("exact", "Exact", r.exact),
        ("si", "SI (kB, MB, GB: powers of 1000)", r.si),
        ("iec", "IEC (KiB, MiB, GiB: powers of 1024)", r.iec),
        ("source", "Source (KB, MB, GB meaning powers of 1024)", r.source),
    ]
    body = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{html.escape(name)}</th>'
        f'<td class="course-units-{key}">{html.escape(value)}</td></tr>'
        for key, name, value in rows
    )
    out = f'<table class="course-units-table">{body}</table>'
    if r.ambiguous_label is not None:
        out += (
            f'<p class="course-units-note">Read the other way, with KB..TB as '
            f'{html.escape(_CONVENTION_WORDS[r.other_convention])}, {html.escape(r.text.strip())} would be '
            f'<b class="course-units-other">{html.escape(r.other_exact)}</b> '
            f'({html.escape(r.other_si)} = {html.escape(r.other_iec)}): the 1024-based reading is '
            f'{r.difference_percent:.2f}% larger. Always say which {html.escape(r.ambiguous_label)} you mean.</p>'
        )
    if r.dimension == "bytes" and _BARE_B.match(r.text):
        out += ('<p class="course-units-note">Note: a unit symbol B right after a number is a <b>byte</b>. '
                'In a model name the same B counts <b>billions of parameters</b> (read those with '
                '<code>course_lib.core.units.parse_params</code>).</p>')
    return out


def _render_error(exc: Exception) -> str:
    return f'<p class="course-units-error" style="color:#b3261e">{html.escape(str(exc))}</p>'


class UnitConverter(_html.Snapshot, widgets.VBox):
    """The converter: ``.text`` (Text), ``.system`` (Dropdown of conventions), ``.readings`` (HTML).

    ``.result`` is the latest ``Readings`` (``None`` while the input cannot be read, in which case
    ``.readings`` shows the error message instead).
    """

    def __init__(self, text: str = "14 GB", convention: str = "si"):
        conv = require_choice("convention", convention, [v for _, v in CONVENTION_OPTIONS])
        if not isinstance(text, str):
            raise TypeError(f"text must be a str such as '14 GB', got {type(text).__name__}")
        self.text = widgets.Text(value=text, description="Quantity", placeholder="e.g. 14 GB, 13.04 GiB, 1008 GB/s",
                                 continuous_update=True, layout=widgets.Layout(width="24em"))
        self.text.add_class("course-units-text")
        self.system = widgets.Dropdown(options=list(CONVENTION_OPTIONS), value=conv, description="Read KB..TB as",
                                       style={"description_width": "initial"}, layout=widgets.Layout(width="30em"))
        self.system.add_class("course-units-system")
        self.readings = widgets.HTML()
        self.readings.add_class("course-units-readings")
        self.result: Readings | None = None
        super().__init__(children=[self.text, self.system, self.readings])
        self.add_class("course-units-converter")
        self.text.observe(self._update, names="value")
        self.system.observe(self._update, names="value")
        self._update()

    def _update(self, _change=None) -> None:
        try:
            self.result = convert(self.text.value, self.system.value)
        except (ValueError, TypeError) as exc:
            self.result = None
            self.readings.value = _render_error(exc)
        else:
            self.readings.value = render_readings(self.result)


def unit_converter(text: str = "14 GB", convention: str = "si") -> UnitConverter:
    """A ready-to-display unit converter, starting with ``text`` read under ``convention``."""
    return UnitConverter(text, convention)
