"""Browser test: lesson 04 in JupyterLab, Run All, move the TPOT explorer's context slider.

A real JupyterLab server (127.0.0.1, free port, random token, isolated Jupyter folders) serves a
temporary copy of notebooks/, so the repository's notebooks are never modified. Headless Debian
chromium, driven by Python playwright, opens notebooks/04_bandwidth_bound_latency.ipynb, runs all
cells through the *Run* menu, waits for the live TPOT explorer the lesson displays with
``tpot_explorer()`` (``course_lib/lessons/widgets/latency.py``), checks its TPOT and tokens/s labels for the
default setting, moves the context slider to its maximum with the keyboard and checks that both
labels become exactly what ``tpot_reading`` -- the plain function the widget calls -- gives for the
new context. Screenshots go to artifacts/ (git-ignored).

Skipped when chromium or playwright is missing, except under CI=true or COURSE_REQUIRE_ALL=1,
where that is a failure (see tests/conftest.py ``require_tool``).
"""
from __future__ import annotations

import inspect

import pytest

from browser_util import (ARTIFACTS, REPO_ROOT, JupyterLab, launch_chromium, press_slider, require_browser_tools,
                          run_all_cells, serve_copy, wait_for_notebook_kernel)

pytestmark = pytest.mark.browser

NOTEBOOK = "04_bandwidth_bound_latency.ipynb"
TIMEOUT_MS = 180_000  # generous: two cores shared with the rest of the suite


def _lesson_setting() -> dict:
    """The setting the lesson's ``tpot_explorer()`` call starts with: the function's defaults."""
    from course_lib.lessons.widgets.latency import tpot_explorer

    return {name: p.default for name, p in inspect.signature(tpot_explorer).parameters.items()}


def _expected(setting: dict) -> tuple[str, str]:
    """(TPOT label, tokens/s label) of the explorer for ``setting``, from course_lib directly."""
    from course_lib.lessons.widgets.latency import tpot_reading

    r = tpot_reading(**setting)
    return r.tpot_text, r.tps_text


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server over a temporary copy of notebooks/; stopped (with its kernels) afterwards."""
    require_browser_tools()
    yield from serve_copy(JupyterLab, REPO_ROOT / "notebooks", tmp_path, "browser_lesson04_server.log")


def test_lesson04_tpot_explorer_in_jupyterlab(lab):
    from playwright.sync_api import expect, sync_playwright

    from course_lib.lessons.widgets.latency import CONTEXT_RANGE

    start = _lesson_setting()
    assert start["context"] < CONTEXT_RANGE[1], "the slider must have room to move up"
    tpot0, tps0 = _expected(start)

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(lab.url(f"lab/tree/{NOTEBOOK}"))
            wait_for_notebook_kernel(page)
            page.screenshot(path=str(ARTIFACTS / "browser_lesson04_opened.png"))

            run_all_cells(page)
            lab.remember_children()

            # The live explorer (notebooks are stored without widget state) with the lesson's setting.
            widget = page.locator(".course-tpot-explorer").first
            widget.wait_for(state="visible")
            tpot = widget.locator(".course-tpot")
            tps = widget.locator(".course-tps")
            readout = widget.locator(".course-context .widget-readout").first
            expect(readout).to_have_text(str(start["context"]))
            expect(tpot).to_have_text(tpot0)
            expect(tps).to_have_text(tps0)
            widget.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "browser_lesson04_widget_before.png"))

            # Context slider to its maximum with the keyboard.
            context = press_slider(widget.locator(".course-context"), "End", start["context"])
            expect(readout).to_have_text(str(CONTEXT_RANGE[1]))

            tpot1, tps1 = _expected({**start, "context": context})
            expect(tpot).to_have_text(tpot1)
            expect(tps).to_have_text(tps1)
            assert (tpot1, tps1) != (tpot0, tps0), "a longer context should change what is shown"
            page.screenshot(path=str(ARTIFACTS / "browser_lesson04_widget_after.png"))
        finally:
            browser.close()

    # JupyterLab's shutdown stops the notebook's kernel; nothing the server started survives.
    assert lab.children_seen, "JupyterLab should have started a kernel for the notebook"
    lab.stop()
    assert lab.left_after_shutdown == [], (
        f"still running 15 s after the shutdown request (then killed): {lab.left_after_shutdown}\n{lab.log_tail()}")
    assert lab.survivors() == [], f"processes left behind by JupyterLab: {lab.survivors()}"
