"""Browser test: the capstone planner as ``make app`` serves it (Voila), moved with the keyboard.

A real Voila server (127.0.0.1, free port, random token, isolated Jupyter folders) serves a
temporary copy of app/ -- ``dashboard.ipynb`` with the ``voila.json`` that ``make app`` uses (read
because Voila runs in that folder, as under ``make app``), started as ``make app`` starts it: the
environment and flags are read from ``make -n app`` (the course's template, ``--template=course`` from
app/share/jupyter, which names no CDN asset). Headless Debian chromium, driven by Python playwright,
opens the app and checks that

* the dashboard (``course_lib.lessons.widgets.capstone``) appears, and no code does (``strip_sources``);
* every request the page makes goes to the Voila server itself (no CDN: the app works offline);
* its TPOT and TTFT labels show ``course_lib.core.capstone.tpot_text`` / ``ttft_text`` of the default
  ``DashboardState()``, and the serving plan (continuous batching, simulated p99, static baseline) shows;
* after the batch slider is moved to its maximum with the keyboard, then the prompt slider to its
  minimum, both labels show exactly what those functions give for the new state, and the figure is
  redrawn each time;
* a batch typed beyond the slider's range is set to its end with a notice;
* tensor parallelism without a link says in words what is missing and clears the figure; a bare ``450``
  typed in "Link bandwidth" is read as 450 GB/s;
* once the test stops the server (SIGTERM), Voila has stopped the page's kernel and exited by
  itself, and no process it started is still running.

Screenshots and the server log go to artifacts/ (git-ignored). Skipped when chromium, playwright or
voila is missing, except under CI=true or COURSE_REQUIRE_ALL=1, where that is a failure (see
tests/conftest.py ``require_tool``).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from browser_util import ARTIFACTS, REPO_ROOT, Voila, launch_chromium, require_browser_tools, serve_copy

pytestmark = pytest.mark.browser

APP_DIR = REPO_ROOT / "app"
NOTEBOOK = "dashboard.ipynb"
TIMEOUT_MS = 180_000  # generous: two cores shared with the rest of the suite


def _expected(state) -> tuple[str, str]:
    """(TPOT label, TTFT label) of the dashboard for ``state``, from course_lib directly."""
    from course_lib.core.app import tpot_text, ttft_text

    return tpot_text(state), ttft_text(state)


def _box_value(dash, css: str) -> int:
    return int(dash.locator(f".{css}-box input").first.input_value().replace(",", "").strip())


def _press(dash, css: str, key: str, old: int) -> int:
    """Press ``key`` on the slider ``css``; wait until its number box no longer shows ``old``; return the value."""
    from playwright.sync_api import expect

    handle = dash.locator(f".{css} .noUi-handle").first
    handle.focus()
    handle.press(key)
    expect(dash.locator(f".{css}-box input").first).not_to_have_value(str(old))
    return _box_value(dash, css)


def _type(locator, text: str) -> None:
    field = locator.locator("input").first
    field.fill(text)
    field.press("Enter")


def _expand(value: str) -> str:
    """A shell word as the recipe's shell expands it: ``${VAR:+text}`` and ``$VAR``."""
    value = re.sub(r"\$\{(\w+):\+([^}]*)\}", lambda m: m.group(2) if os.environ.get(m.group(1)) else "", value)
    return os.path.expandvars(value)


def make_app_command() -> tuple[dict, list]:
    """(environment, flags) of the ``voila`` command ``make app`` runs, read from ``make -n app`` (nothing runs).

    The flags a test server sets itself (address, port) and the notebook are left out.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-n", "-s", "--no-print-directory", "app"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    found = []
    for line in out.replace("\\\n", " ").splitlines():
        for part in line.split("&&"):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            n = 0
            while n < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[n]):
                n += 1
            if n < len(words) and Path(words[n]).name == "voila":
                variables = dict(w.split("=", 1) for w in words[:n])
                flags = [w for w in words[n + 1:]
                         if w != NOTEBOOK and not w.startswith(("--Voila.ip=", "--Voila.port="))]
                found.append(({k: _expand(v) for k, v in variables.items()}, flags))
    assert len(found) == 1, f"`make -n app` should run `voila` once; it prints:\n{out}"
    return found[0]


class AppVoila(Voila):
    """Voila started with the environment and flags of ``make app``, the app's folder being the served copy."""

    def __init__(self, root_dir, home, **kwargs):
        env, flags = make_app_command()
        super().__init__(root_dir, home, extra_args=flags, **kwargs)
        here = str(APP_DIR)
        self.extra_env.update({k: v.replace(here, str(self.root_dir)) for k, v in env.items()})


@pytest.fixture
def app(tmp_path):
    """A Voila server over a temporary copy of app/, started as ``make app`` does; stopped afterwards."""
    require_browser_tools(voila=True)
    yield from serve_copy(AppVoila, APP_DIR, tmp_path, "browser_voila_server.log", notebook=NOTEBOOK)


def test_capstone_dashboard_in_voila(app):
    from playwright.sync_api import expect, sync_playwright

    from course_lib.core.capstone import DashboardState
    from course_lib.lessons.widgets.capstone import BATCH_RANGE

    start = DashboardState()  # the dashboard's initial values
    tpot0, ttft0 = _expected(start)
    server = urlsplit(app.url()).netloc
    requests: list[str] = []

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            page.on("request", lambda req: requests.append(req.url))
            page.on("requestfailed", lambda req: requests.append(req.url))
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
            figure = dash.locator(".course-capstone-plot img")
            status = dash.locator(".course-capstone-status")
            expect(figure).to_have_count(1)
            assert _box_value(dash, "course-capstone-batch") == start.batch
            assert _box_value(dash, "course-capstone-prompt") == start.prompt_tokens
            expect(tpot).to_have_text(tpot0)
            expect(ttft).to_have_text(ttft0)
            expect(dash.locator(".course-capstone-serving-gpus")).to_contain_text("GPU")
            expect(dash.locator(".course-capstone-serving-p99")).to_contain_text("TTFT")
            expect(dash.locator(".course-capstone-serving-static")).to_contain_text("GPU")
            figure0 = figure.get_attribute("src")
            page.screenshot(path=str(ARTIFACTS / "browser_voila_before.png"), full_page=True)

            # Batch slider to its maximum with the keyboard.
            new_batch = _press(dash, "course-capstone-batch", "End", start.batch)
            assert new_batch > start.batch
            state1 = start.replace(batch=new_batch)
            tpot1, ttft1 = _expected(state1)
            expect(tpot).to_have_text(tpot1)
            expect(ttft).to_have_text(ttft1)
            assert tpot1 != tpot0, "a bigger batch should change the TPOT shown"
            expect(figure).not_to_have_attribute("src", figure0)  # redrawn for the new state
            figure1 = figure.get_attribute("src")

            # Prompt slider to its minimum.
            new_prompt = _press(dash, "course-capstone-prompt", "Home", start.prompt_tokens)
            assert new_prompt < start.prompt_tokens
            state2 = state1.replace(prompt_tokens=new_prompt)
            tpot2, ttft2 = _expected(state2)
            expect(tpot).to_have_text(tpot2)
            expect(ttft).to_have_text(ttft2)
            assert ttft2 != ttft1, "a shorter prompt should change the TTFT shown"
            expect(figure).not_to_have_attribute("src", figure1)
            page.screenshot(path=str(ARTIFACTS / "browser_voila_after.png"), full_page=True)

            # A batch typed beyond the slider: set to its end, and said so.
            _type(dash.locator(".course-capstone-batch-box"), "100000")
            expect(dash.locator(".course-capstone-notices")).to_contain_text("100,000")
            expect(dash.locator(".course-capstone-notices")).to_contain_text(f"set to {BATCH_RANGE[1]}")

            # Tensor parallelism without a link: what is missing, in words; the figure is cleared.
            dash.locator(".course-capstone-tp select").select_option("4")
            expect(status).to_contain_text("Missing: the link bandwidth")
            expect(status).not_to_contain_text("interconnect_bandwidth")
            expect(figure).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "browser_voila_tp_no_link.png"), full_page=True)

            # A bare 450 is 450 GB/s.
            _type(dash.locator(".course-capstone-interconnect"), "450")
            state3 = DashboardState(batch=BATCH_RANGE[1], prompt_tokens=new_prompt, tensor_parallel=4,
                                    interconnect_bandwidth=450e9)
            tpot3, ttft3 = _expected(state3)
            expect(tpot).to_have_text(tpot3)
            expect(ttft).to_have_text(ttft3)
            expect(status).to_contain_text("Fits in memory")
            expect(figure).to_have_count(1)
            page.screenshot(path=str(ARTIFACTS / "browser_voila_tp_450.png"), full_page=True)

            # An engine's profile instead of the floor (issue 27): the times follow the profile, the line under
            # them says so, and the efficiency sliders are disabled (the profile has its own).
            expect(dash.locator(".course-capstone-engine-text")).to_contain_text("The floor")
            from course_lib.lessons.widgets.capstone import ENGINE_OPTIONS   # the <option>s carry the labels

            dash.locator(".course-capstone-engine select").select_option(
                next(label for label, value in ENGINE_OPTIONS if value == "vLLM"))
            tpot4, ttft4 = _expected(state3.replace(engine="vLLM"))
            assert tpot4 != tpot3, "an engine's profile should change the TPOT shown"
            expect(tpot).to_have_text(tpot4)
            expect(ttft).to_have_text(ttft4)
            expect(dash.locator(".course-capstone-engine-text")).to_contain_text("The vLLM profile")
            expect(dash.locator(".course-capstone-compute-eff-box input").first).to_be_disabled()
            page.screenshot(path=str(ARTIFACTS / "browser_voila_engine.png"), full_page=True)
        finally:
            browser.close()

    # No CDN: every request went to the Voila server (or stayed in the page: data:, blob:).
    outside = [u for u in requests if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).netloc != server]
    assert requests and outside == [], (
        f"the page fetched from outside the Voila server: {outside}; `make app` should serve the course's "
        f"template (voila --template=course, with app/share/jupyter on JUPYTER_PATH), which names no CDN asset")

    # On SIGTERM Voila shuts the page's kernel down and exits by itself; nothing it started survives.
    app.stop()
    assert app.left_after_shutdown == [], (
        f"still running 15 s after SIGTERM (then killed): {app.left_after_shutdown}\n{app.log_tail()}")
    assert app.survivors() == [], f"processes left behind by Voila: {app.survivors()}"
