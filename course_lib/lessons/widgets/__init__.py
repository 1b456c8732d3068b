"""Interactive widgets for the lessons (ipywidgets).

Each module holds one family of widgets: a factory that returns a ready-to-display widget, and the
plain function that computes what the widget shows (tested without a browser). Importing this
package imports ipywidgets; the core of ``course_lib`` never does.

Stable CSS classes (``_dom_classes``) starting with ``course-`` mark the controls and outputs that
the browser tests look for; keep them when changing a layout. The numbers and verdicts a widget
shows are computed in :mod:`course_lib.core`; the markup they share is ``_html``.

Every widget class mixes in ``_html.Snapshot``: displayed, it sends the live widget view plus a static
``text/html`` snapshot of its current reading (its settings and every HTML/Label output of its tree) and a
one-line ``text/plain``, so a stored notebook shows the reading, never the widget tree's repr, to a reader
who has not run it (tests/test_widget_snapshots.py).

Lessons: 00, 01, 02, 03, 04, 06, 07, 09
"""
from __future__ import annotations

from course_lib.lessons.widgets.data_per_token import bytes_per_token_explorer
from course_lib.lessons.widgets.estimator import EstimateExplorer, estimate_explorer, estimate_summary
from course_lib.lessons.widgets.kv_cache import kv_cache_explorer, kv_crossover_explorer
from course_lib.lessons.widgets.latency import TpotExplorer, tpot_explorer, tpot_reading
from course_lib.lessons.widgets.units import UnitConverter, convert, unit_converter
from course_lib.lessons.widgets.prefill_decode import (PrefillDecodeExplorer, prefill_decode_explorer,
                                                       prefill_decode_reading)
from course_lib.lessons.widgets.caching import (cache_budget_explorer, cache_budget_reading, prefix_cache_explorer,
                                                prefix_cache_reading, session_cache_explorer, session_cache_reading)
from course_lib.lessons.widgets.capstone import CapstoneDashboard, capstone_dashboard

__all__ = [
    "EstimateExplorer", "estimate_explorer", "estimate_summary",        # 00
    "UnitConverter", "convert", "unit_converter",                       # 01
    "bytes_per_token_explorer",                                         # 02
    "kv_cache_explorer", "kv_crossover_explorer",                       # 03
    "TpotExplorer", "tpot_explorer", "tpot_reading",                    # 04
    "PrefillDecodeExplorer", "prefill_decode_explorer", "prefill_decode_reading",  # 06
    "cache_budget_explorer", "cache_budget_reading", "prefix_cache_explorer", "prefix_cache_reading",  # 07
    "session_cache_explorer", "session_cache_reading",
    "CapstoneDashboard", "capstone_dashboard",                          # 09
]
