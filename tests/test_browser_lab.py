"""Browser tests of `make lab`: a learner's JupyterLab, lesson 00, Run All, move a slider.

A real JupyterLab server (127.0.0.1, free port, random token, isolated Jupyter folders) serves a
temporary copy of notebooks/ (in a ``notebooks/`` folder, as `make lab` serves the repository's
root), so the repository's notebooks are never modified. The server is started as `make lab`
starts it: its environment and flags are read from ``make -n lab`` (see
``browser_util.make_lab_command``), and the test silences nothing itself (no news setting of its
own), so what the page shows is what `make lab` shows.

* The learner's lab opens lesson 00 and shows none of the instructor's tools -- no nbgrader menu,
  no "Validate" button, no "Create Assignment" panel, no nbgrader or announcements plugin
  activated -- and no "get notified about official Jupyter news?" prompt. Then headless Debian
  chromium, driven by Python playwright, runs all cells through the *Run* menu, moves the estimate
  explorer's prompt-length slider with the keyboard and checks that the displayed TTFT and TPOT
  become exactly what ``course_lib`` computes for the new setting.
* `make lab-instructor` is the control: the same page, started as that target starts it, shows
  every one of those tools and the news prompt, so each check above can fail.

Screenshots go to artifacts/ (git-ignored). Skipped when chromium or playwright is missing, except
under CI=true or COURSE_REQUIRE_ALL=1, where that is a failure (see tests/conftest.py ``require_tool``).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
import urllib.error
import urllib.request

import pytest

from browser_util import (ARTIFACTS, REPO_ROOT, JupyterLab, launch_chromium, make_lab_command, press_slider,
                          require_browser_tools, run_all_cells, serve_copy, wait_for_notebook_kernel)
from conftest import require_tool

pytestmark = pytest.mark.browser

#: What `make lab` opens (relative to the repository's root, which it serves).
START_NOTEBOOK = "notebooks/00_start_here.ipynb"
TIMEOUT_MS = 180_000  # generous: two cores shared with the rest of the suite
NEWS_PROMPT = "get notified about official Jupyter news"

#: The instructor's tools and the news announcements that are active in the page (plugin ids).
ACTIVE_INSTRUCTOR_PLUGINS_JS = """async () => {
    const app = window.jupyterapp;
    await app.restored;
    return app.listPlugins().filter(id => (id.startsWith('@jupyter/nbgrader:')
        || id === '@jupyterlab/apputils-extension:announcements') && app.isPluginActivated(id));
}"""


def _expected(settings: dict) -> tuple[str, str]:
    from course_lib import estimate
    from course_lib.core.units import format_time

    e = estimate(settings["model"], settings["hardware"], settings["prompt_tokens"], settings["new_tokens"],
                 precision=settings["precision"])
    return format_time(e.ttft), format_time(e.tpot)


def _serve_as_make(target: str, tmp_path, log_name: str):
    """A JupyterLab over a temporary copy of notebooks/, started as ``make <target>`` starts it."""
    require_browser_tools()
    require_tool("make", why="the course is built with make")
    cmd = make_lab_command(target)
    assert START_NOTEBOOK in cmd.args, f"`make {target}` should open {START_NOTEBOOK}: {cmd}"
    yield from serve_copy(JupyterLab, REPO_ROOT / "notebooks", tmp_path, log_name, subdir="notebooks",
                          extra_env=cmd.env, extra_args=cmd.lab_args(), quiet_news=False)


@pytest.fixture
def learner_lab(tmp_path):
    """`make lab`'s JupyterLab; stopped (with its kernels) afterwards."""
    yield from _serve_as_make("lab", tmp_path, "browser_lab_server.log")


@pytest.fixture
def instructor_lab(tmp_path):
    """`make lab-instructor`'s JupyterLab; stopped (with its kernels) afterwards."""
    yield from _serve_as_make("lab-instructor", tmp_path, "browser_lab_instructor_server.log")


@contextmanager
def _start_notebook_page(lab):
    """A chromium page on what `make lab` opens, once its kernel is ready and every plugin has started."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(lab.url(f"lab/tree/{START_NOTEBOOK}"))
            wait_for_notebook_kernel(page)
            page.wait_for_function("() => window.jupyterapp.restored.then(() => true)")
            yield page
        finally:
            browser.close()


def _instructor_tools(page) -> dict:
    """Locators of what only an instructor should see (each matches nothing in a learner's lab)."""
    return {
        "nbgrader menu": page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Nbgrader\s*$")),
        "Validate button": page.locator(".jp-NotebookPanel-toolbar .validate-button"),
        "Create Assignment panel": page.locator("#nbgrader-create_assignemnt, "  # nbgrader's spelling
                                                ".lm-TabBar-tab[title*='Create Assignment']"),
        "news prompt": page.get_by_text(NEWS_PROMPT),
    }


def _http_status(lab, path: str) -> int:
    """The HTTP status with which the lab's server answers ``path`` (after redirects)."""
    try:
        with urllib.request.urlopen(lab.url(path), timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_learner_lab_shows_the_course_only(learner_lab):
    from playwright.sync_api import expect

    with _start_notebook_page(learner_lab) as page:
        # The course is there (lesson 00, the lab's own menus and notebook toolbar) ...
        expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")).to_contain_text(
            "00_start_here.ipynb")
        expect(page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$"))).to_have_count(1)
        expect(page.locator(".jp-NotebookPanel-toolbar").first).to_be_visible()
        # ... and nothing of the instructor's tools, nor the news prompt; nbgrader's server
        # extensions are off too (its formgrader is not served).
        assert page.evaluate(ACTIVE_INSTRUCTOR_PLUGINS_JS) == []
        assert _http_status(learner_lab, "formgrader") == 404
        for what, locator in _instructor_tools(page).items():
            assert locator.count() == 0, f"a learner's lab shows the {what}"
        page.screenshot(path=str(ARTIFACTS / "browser_lab_opened.png"))

        run_all_cells(page)
        learner_lab.remember_children()

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

        # Still nothing of the instructor's tools once the lesson has run (no late prompt either).
        for what, locator in _instructor_tools(page).items():
            assert locator.count() == 0, f"a learner's lab shows the {what}"


def test_instructor_lab_shows_nbgrader(instructor_lab):
    """The control: every tool the learner's lab must not show is found where an instructor asks for it."""
    from playwright.sync_api import expect

    with _start_notebook_page(instructor_lab) as page:
        for what, locator in _instructor_tools(page).items():
            expect(locator.first, f"an instructor's lab shows the {what}").to_be_attached()
        active = page.evaluate(ACTIVE_INSTRUCTOR_PLUGINS_JS)
        assert "@jupyter/nbgrader:menu" in active and "@jupyterlab/apputils-extension:announcements" in active
        assert _http_status(instructor_lab, "formgrader") == 200
        page.screenshot(path=str(ARTIFACTS / "browser_lab_instructor.png"))
