"""Interactive widgets for the lessons (ipywidgets).

Each module holds one family of widgets: a factory that returns a ready-to-display widget, and the
plain function that computes what the widget shows (tested without a browser). Importing this
package imports ipywidgets; the core of ``course_lib`` never does.

Stable CSS classes (``_dom_classes``) starting with ``course-`` mark the controls and outputs that
the browser tests look for; keep them when changing a layout.
"""
from __future__ import annotations

from .estimator import EstimateExplorer, estimate_explorer, estimate_summary
from .units import UnitConverter, unit_converter

__all__ = ["EstimateExplorer", "estimate_explorer", "estimate_summary", "UnitConverter", "unit_converter"]
