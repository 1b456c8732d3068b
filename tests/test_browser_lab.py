"""Browser smoke test: JupyterLab, notebooks/00_start_here.ipynb, Run All, move a slider.

A real JupyterLab server (127.0.0.1, free port, random token, isolated Jupyter folders) serves a
temporary copy of notebooks/, so the repository's notebooks are never modified. Headless Debian
chromium, driven by Python playwright, opens the start notebook, runs all cells through the
*Run* menu, waits for the estimate explorer widget, moves its prompt-length slider with the
keyboard and checks that the displayed TTFT and TPOT become exactly what ``course_lib`` computes
for the new setting. Screenshots go to artifacts/ (git-ignored).

Skipped when chromium or playwright is missing, except under CI=true or COURSE_REQUIRE_ALL=1,
where that is a failure (see tests/conftest.py ``require_tool``).
"""
from __future__ import annotations

import pytest

from browser_util import (ARTIFACTS, REPO_ROOT, JupyterLab, launch_chromium, press_slider, require_browser_tools,
                          run_all_cells, serve_copy, wait_for_notebook_kernel)

pytestmark = pytest.mark.browser

NOTEBOOK = "00_start_here.ipynb"
TIMEOUT_MS = 180_000  # generous: two cores shared with the rest of the suite


def _expected(settings: dict) -> tuple[str, str]:
    from course_lib import estimate
    from course_lib.core.units import format_time

    e = estimate(settings["model"], settings["hardware"], settings["prompt_tokens"], settings["new_tokens"],
                 precision=settings["precision"])
    return format_time(e.ttft), format_time(e.tpot)


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server over a temporary copy of notebooks/; stopped (with its kernels) afterwards."""
    require_browser_tools()
    yield from serve_copy(JupyterLab, REPO_ROOT / "notebooks", tmp_path, "browser_lab_server.log")


def test_start_notebook_widget_in_jupyterlab(lab):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(lab.url(f"lab/tree/{NOTEBOOK}"))

            # The notebook is open and its kernel is ready.
            wait_for_notebook_kernel(page)
            page.screenshot(path=str(ARTIFACTS / "browser_lab_opened.png"))

            run_all_cells(page)
            lab.remember_children()

            # The live widget (not the stored snapshot) appears with the default setting.
            widget = page.locator(".course-estimate-explorer").first
            widget.wait_for(state="visible")
            tpot = widget.locator(".course-estimate-output .course-tpot")
            ttft = widget.locator(".course-estimate-output .course-ttft")
            start = {"model": "mistral-7b", "hardware": "rtx-4090", "precision": "fp16",
                     "prompt_tokens": 512, "new_tokens": 256}
            ttft0, tpot0 = _expected(start)
            expect(tpot).to_have_text(tpot0)
            expect(ttft).to_have_text(ttft0)
            widget.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "browser_lab_widget_before.png"))

            # Move the prompt-length slider to its maximum with the keyboard.
            prompt_tokens = press_slider(widget.locator(".course-prompt-tokens"), "End", start["prompt_tokens"])
            assert prompt_tokens > start["prompt_tokens"]

            ttft1, tpot1 = _expected({**start, "prompt_tokens": prompt_tokens})
            expect(tpot).to_have_text(tpot1)
            expect(ttft).to_have_text(ttft1)
            assert (ttft1, tpot1) != (ttft0, tpot0), "the new setting should change what is shown"
            page.screenshot(path=str(ARTIFACTS / "browser_lab_widget_after.png"))
        finally:
            browser.close()
