"""Browser test: the capstone dashboard as ``make app`` serves it (Voila), moved with the keyboard.

A real Voila server (127.0.0.1, free port, random token, isolated Jupyter folders) serves a
temporary copy of app/ -- ``dashboard.ipynb`` with the ``voila.json`` that ``make app`` uses, read
because Voila runs in that folder, as under ``make app``. Headless Debian chromium, driven by Python
playwright, opens the app and checks that

* the dashboard (``course_lib.widgets.capstone``) appears, and no code does (``strip_sources``);
* its TPOT and TTFT labels show ``course_lib.dashboard.tpot_text`` / ``ttft_text`` of the default
  ``DashboardState()``;
* after the batch slider is moved to its maximum, then the prompt slider to its minimum, both labels
  show exactly what those functions give for the new state, and the figure is redrawn each time;
* once the test stops the server (SIGTERM), Voila has stopped the page's kernel and exited by
  itself, and no process it started is still running.

Screenshots and the server log go to artifacts/ (git-ignored). Skipped when chromium, playwright or
voila is missing, except under CI=true or COURSE_REQUIRE_ALL=1, where that is a failure (see
tests/conftest.py ``require_tool``).
"""
from __future__ import annotations


import pytest

from browser_util import ARTIFACTS, REPO_ROOT, Voila, launch_chromium, press_slider, require_browser_tools, serve_copy

pytestmark = pytest.mark.browser

APP_DIR = REPO_ROOT / "app"
NOTEBOOK = "dashboard.ipynb"
TIMEOUT_MS = 180_000  # generous: two cores shared with the rest of the suite


def _expected(state) -> tuple[str, str]:
    """(TPOT label, TTFT label) of the dashboard for ``state``, from course_lib directly."""
    from course_lib.core.capstone import tpot_text, ttft_text

    return tpot_text(state), ttft_text(state)


@pytest.fixture
def app(tmp_path):
    """A Voila server over a temporary copy of app/; stopped (with its kernels) afterwards."""
    require_browser_tools(voila=True)
    yield from serve_copy(Voila, APP_DIR, tmp_path, "browser_voila_server.log", notebook=NOTEBOOK)


def test_capstone_dashboard_in_voila(app):
    from playwright.sync_api import expect, sync_playwright

    from course_lib.core.capstone import DashboardState

    start = DashboardState()  # the dashboard's initial values
    tpot0, ttft0 = _expected(start)

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            # Voila runs the notebook in a new kernel before it answers, then the page renders the widgets.
            page.goto(app.url(), timeout=TIMEOUT_MS)
            dash = page.locator(".course-capstone").first
            dash.wait_for(state="visible")
            app.remember_children()
            assert app.children_seen, "Voila should have started a kernel for the page"

            # App mode: the cells' outputs, none of their code.
            expect(page.locator(".jp-CodeCell").first).to_be_attached()
            expect(page.locator(".jp-CodeCell .jp-InputArea")).to_have_count(0)

            tpot = dash.locator(".course-capstone-tpot")
            ttft = dash.locator(".course-capstone-ttft")
            batch = dash.locator(".course-capstone-batch")
            prompt = dash.locator(".course-capstone-prompt")
            figure = dash.locator(".course-capstone-plot img")
            expect(figure).to_have_count(1)
            expect(batch.locator(".widget-readout")).to_have_text(str(start.batch))
            expect(prompt.locator(".widget-readout")).to_have_text(str(start.prompt_tokens))
            expect(tpot).to_have_text(tpot0)
            expect(ttft).to_have_text(ttft0)
            figure0 = figure.get_attribute("src")
            page.screenshot(path=str(ARTIFACTS / "browser_voila_before.png"))

            # Batch slider to its maximum with the keyboard.
            new_batch = press_slider(batch, "End", start.batch)
            assert new_batch > start.batch
            state1 = start.replace(batch=new_batch)
            tpot1, ttft1 = _expected(state1)
            expect(tpot).to_have_text(tpot1)
            expect(ttft).to_have_text(ttft1)
            assert tpot1 != tpot0, "a bigger batch should change the TPOT shown"
            expect(figure).not_to_have_attribute("src", figure0)  # redrawn for the new state
            figure1 = figure.get_attribute("src")

            # Prompt slider to its minimum.
            new_prompt = press_slider(prompt, "Home", start.prompt_tokens)
            assert new_prompt < start.prompt_tokens
            state2 = state1.replace(prompt_tokens=new_prompt)
            tpot2, ttft2 = _expected(state2)
            expect(tpot).to_have_text(tpot2)
            expect(ttft).to_have_text(ttft2)
            assert ttft2 != ttft1, "a shorter prompt should change the TTFT shown"
            expect(figure).not_to_have_attribute("src", figure1)
            page.screenshot(path=str(ARTIFACTS / "browser_voila_after.png"))
        finally:
            browser.close()

    # On SIGTERM Voila shuts the page's kernel down and exits by itself; nothing it started survives.
    app.stop()
    assert app.left_after_shutdown == [], (
        f"still running 15 s after SIGTERM (then killed): {app.left_after_shutdown}\n{app.log_tail()}")
    assert app.survivors() == [], f"processes left behind by Voila: {app.survivors()}"
