"""Browser tour: every lesson in JupyterLab, as a learner opens it -- Run All, every widget live, sliders moved.

One JupyterLab server (127.0.0.1, free port, random token, isolated Jupyter folders) serves a temporary copy
of notebooks/. For each lesson, headless chromium opens it, runs all cells through the *Run* menu and waits
until every cell has run. Then the tour checks, as a learner would see it:

* no cell shows an error (a traceback) and every cell ran (no ``[*]`` or empty prompt left);
* every widget the lesson displays is live: as many widget views on the page as the stored notebook
  shows widget outputs, each of them visible;
* moving each widget's first slider to its other end changes what that widget shows (its readings follow
  the control);
* a screenshot of the lesson after Run All, and of each widget after its slider moved, in
  ``artifacts/tour/``.

Then the notebook is closed and its kernel shut down, so one kernel runs at a time. The measurement
lessons (05-08) replay the recorded run their stored outputs came from (``COURSE_MEASUREMENTS``, as nbval
does in ``make test``): the tour checks what a learner sees, not this machine's timings. ``COURSE_FAST=1``
keeps the rest small. The voila app has its own browser test (``tests/test_browser_voila.py``).

Part of ``make tour`` (marker ``browser``): skipped when chromium or playwright is missing, except under
CI=true or COURSE_REQUIRE_ALL=1, where that is a failure.
"""
from __future__ import annotations

import json
import time

import pytest

from browser_util import (ARTIFACTS, REPO_ROOT, JupyterLab, launch_chromium, require_browser_tools, run_all_cells,
                          serve_copy, wait_for_notebook_kernel)

pytestmark = pytest.mark.browser

LESSONS = sorted(p.name for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RECORDING = REPO_ROOT / "tests" / "fixtures" / "recordings" / "stored"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TIMEOUT_MS = 240_000           # Run All of one lesson on two shared cores
SHOTS = ARTIFACTS / "tour"

# Run All has finished: the kernel is idle and every code cell has an execution count -- or a cell failed
# (Run All stops there), which the test then reports with its traceback
_RUN_ALL_DONE_JS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.content || !w.content.model || !w.sessionContext.session) return false;
  if (document.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
      && [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
           .some(e => /Traceback|Error/.test(e.textContent))) return true;
  const cells = w.content.model.cells;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type === 'code' && (c.executionCount === null || c.executionCount === undefined)) return false;
  }
  return w.sessionContext.session.kernel.status === 'idle';
}"""


def stored_widget_outputs(name: str) -> int:
    """How many widgets the stored lesson shows (each must become a live widget view after Run All).

    Stored notebooks keep no widget state: a widget's output is its static snapshot, whose plain-text form
    says "run the cell to use it" (course_lib/lessons/widgets/_html.py); a raw widget view counts too.
    """
    nb = json.loads((REPO_ROOT / "notebooks" / name).read_text())
    return sum(WIDGET_MIME in out.get("data", {}) or "run the cell to use it" in "".join(
               out.get("data", {}).get("text/plain", "")) for cell in nb["cells"] if cell["cell_type"] == "code"
               for out in cell.get("outputs", []))


def test_the_stored_lessons_are_what_the_tour_walks():
    assert len(LESSONS) >= 10 and LESSONS[0].startswith("00_")
    assert sum(stored_widget_outputs(n) for n in LESSONS) >= 8, "the lessons display widgets"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_browser_tools()
    tmp = tmp_path_factory.mktemp("tour")
    env = {"COURSE_FAST": "1", "OMP_NUM_THREADS": "1", "COURSE_MEASUREMENTS": f"replay:{RECORDING}"}
    yield from serve_copy(JupyterLab, REPO_ROOT / "notebooks", tmp, "browser_tour_server.log", extra_env=env)


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_chromium(p)
        try:
            yield b
        finally:
            b.close()


def _close_and_shut_down(page) -> None:
    """Shut the notebook's kernel down (its session context: no confirmation dialog), then the page closes."""
    page.evaluate("""async () => {
      const w = window.jupyterapp.shell.currentWidget;
      if (w && w.sessionContext) { await w.sessionContext.shutdown(); }
    }""")


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_and_its_widgets_respond(lab, browser, name):
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    stem = name.removesuffix(".ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        # a workspace of its own: JupyterLab would otherwise restore the lessons opened before in the same tab set
        page.goto(lab.url(f"lab/workspaces/tour-{stem.replace('_', '-')}/tree/{name}?reset"))
        wait_for_notebook_kernel(page)
        t0 = time.monotonic()
        run_all_cells(page)
        page.wait_for_function(_RUN_ALL_DONE_JS, timeout=TIMEOUT_MS, polling=1000)
        ran_s = time.monotonic() - t0
        lab.remember_children()
        page.screenshot(path=str(SHOTS / f"{stem}_run_all.png"), full_page=True)

        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                              ", .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
        tracebacks = [t[:300] for t in errors.all_inner_texts() if "Traceback" in t or "Error" in t]
        assert not tracebacks, f"{name}: a cell failed after Run All ({ran_s:.0f} s):\n" + "\n".join(tracebacks)

        expected = stored_widget_outputs(name)
        views = page.locator(".jp-OutputArea-output .jupyter-widgets.widget-container, "
                             ".jp-OutputArea-output > .jupyter-widgets")
        if expected:
            expect(views.first).to_be_visible()
        roots = page.locator(".jp-OutputArea-child:has(.jupyter-widgets)")
        assert roots.count() >= expected, (f"{name}: {expected} widget outputs stored, {roots.count()} live "
                                           f"widget views after Run All")
        for i in range(roots.count()):
            root = roots.nth(i)
            slider = root.locator(".widget-slider .noUi-handle, .widget-hslider .noUi-handle").first
            if slider.count() == 0:
                continue
            root.scroll_into_view_if_needed()
            before = root.inner_text()
            slider.focus()
            for key in ("End", "Home"):                 # whichever end the slider is not at
                slider.press(key)
                try:
                    page.wait_for_function("([el, old]) => el.innerText !== old", arg=[root.element_handle(), before],
                                           timeout=20_000)
                    break
                except Exception:                       # noqa: BLE001 - already at that end: try the other
                    continue
            else:
                pytest.fail(f"{name}: widget {i + 1}'s reading did not change when its slider moved")
            root.screenshot(path=str(SHOTS / f"{stem}_widget{i + 1}.png"))
    finally:
        try:
            _close_and_shut_down(page)
        finally:
            page.close()
