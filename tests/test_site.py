"""The course site (`make site`, course_lib/authoring/site.py): the built book, checked as files and in a browser.

Part of `make tour` (marker ``site``), never of `make test`: it reads the site that `make site` built into
build/site/html (`.ci/run` builds it before the tour) and

* runs the site's own checker over every page: each internal link and asset resolves (files and #ids), nothing
  is loaded from another host (scripts, styles, fonts, images), no file name became a web address;
* checks what the pages hold: every lesson and exercise set, the glossary (every term of glossary.json) and the
  instructors' guide; each lesson's code hidden in the lab is hidden on the page too, behind a toggle; no raw
  ``$$`` or ``http://README.md`` link in a lesson; no answer of solutions/ in an exercise page;
* opens the index and three lessons in Debian's chromium (playwright, the system browser, never a downloaded
  one), served from 127.0.0.1, and asserts that no request leaves 127.0.0.1 and every request succeeds,
  that MathJax typeset the formulas (``mjx-container`` elements, no ``mjx-merror``), that every image loaded
  (``naturalWidth > 0``), that widget snapshots show, that a hidden cell's code opens with a click, and that the
  search finds a word from the site's own index.

Skipped with the reason when the built site, chromium or playwright is missing -- except under CI=true or
COURSE_REQUIRE_ALL=1, where that fails (tests/conftest.py ``require_tool``).
"""
from __future__ import annotations

import functools
import html
import http.server
import json
import re
import threading
from pathlib import Path

import pytest

from browser_util import ARTIFACTS, free_port, launch_chromium, require_browser_tools
from conftest import strict_tools
from repo import ROOT

from course_lib.authoring import site

pytestmark = pytest.mark.site

SITE = ROOT / "build" / "site" / "html"
#: the lessons the browser opens besides the index: prose and formulas, a widget snapshot, many figures
BROWSER_LESSONS = ("02_data_per_token", "03_kv_cache", "06_prefill_vs_decode")
TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def built() -> Path:
    if not (SITE / "index.html").is_file():
        reason = f"the built site is missing ({SITE.relative_to(ROOT)}/index.html): run `make site`"
        if strict_tools():
            pytest.fail(f"{reason}; CI=true requires it (.ci/run builds it before the tour)", pytrace=False)
        pytest.skip(reason)
    return SITE


def _text(path: Path, *, code: bool = True) -> str:
    """A page's text: tags dropped, entities decoded (code stays on its lines: highlighting only adds spans).

    ``code=False`` leaves the code blocks (``<pre>``) out: the prose and the computed outputs only.
    """
    page = path.read_text(encoding="utf-8")
    if not code:
        page = re.sub(r"<pre\b.*?</pre>", "", page, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    return text.replace("\u2019", "'").replace("\u2018", "'")   # Sphinx's smart quotes, back to the source's


def _stems(folder: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / folder).glob("[0-9][0-9]_*.ipynb"))


# --- the built files ----------------------------------------------------------------------------------------
def test_every_link_and_asset_resolves_inside_the_site(built):
    assert site.check_site(built) == []


def test_the_checker_finds_broken_links_and_outside_assets(built, tmp_path):
    """The checker can fail: a missing page, a missing #id, a CDN script and a linkified file name are each reported."""
    import shutil

    copy = tmp_path / "html"
    shutil.copytree(built, copy, ignore=shutil.ignore_patterns("mathjax", "_images", "_sources"))
    page = copy / "glossary.html"
    page.write_text(page.read_text(encoding="utf-8").replace(
        "</body>", '<a href="notebooks/99_missing.html">x</a><a href="index.html#no-such-id">y</a>'
                   '<script src="https://cdn.example.org/x.js"></script><a href="http://README.md">z</a></body>'),
        encoding="utf-8")
    problems = "\n".join(site.check_site(copy))
    for expected in ("99_missing.html", "no-such-id", "cdn.example.org", "http://README.md", "mathjax"):
        assert expected in problems


def test_every_lesson_exercise_set_and_reference_page_is_built(built):
    for stem in _stems("notebooks"):
        assert (built / "notebooks" / f"{stem}.html").is_file(), stem
    for stem in _stems("exercises"):
        assert (built / "exercises" / f"{stem}.html").is_file(), stem
    glossary = _text(built / "glossary.html")
    for term in json.loads((ROOT / "course_lib" / "data" / "glossary.json").read_text())["terms"]:
        assert term["term"] in glossary, term["term"]
    guide = _text(built / "instructors.html")
    first_heading = next(line for line in (ROOT / "docs" / "INSTRUCTORS.md").read_text().splitlines()
                         if line.startswith("# "))
    assert first_heading[2:].strip() in guide
    index = (built / "index.html").read_text(encoding="utf-8")
    for stem in _stems("notebooks"):
        assert f'href="notebooks/{stem}.html"' in index, stem


@pytest.mark.parametrize("stem", _stems("notebooks"))
def test_lesson_page_keeps_hidden_code_hidden_renders_math_and_shows_every_figure(built, stem):
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    hidden = sum(1 for c in nb["cells"] if c["cell_type"] == "code" and c["metadata"].get("jupyter", {}).get(
        "source_hidden"))
    page = (built / "notebooks" / f"{stem}.html").read_text(encoding="utf-8")
    # MyST-NB marks each hide-input cell with the tag's class and puts its code in a <details> toggle
    assert len(re.findall(r'class="cell [^"]*\btag_hide-input\b', page)) == hidden
    text = _text(built / "notebooks" / f"{stem}.html", code=False)
    assert "$$" not in text, "a formula of a computed output was left as raw TeX"
    assert "$\\(" not in text and "\\)$" not in text, "a $$...$$ formula was read as $ + inline math + $"
    assert "http://README.md" not in page   # linkify is off (site.check_site reports any such link)
    # every stored figure and widget snapshot is on the page
    outputs = [o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", [])]
    figures = sum("image/png" in d for d in outputs)
    snapshots = sum("course-widget-snapshot" in "".join(d.get("text/html", "")) for d in outputs)
    assert len(re.findall(r'<img [^>]*src="\.\./_images/', page)) == figures
    assert page.count('<div class="course-widget-snapshot"') == snapshots
    assert site.RUN_BOX_CLASS in page and "make lab" in text and 'href="https://mybinder.org/' in page


@pytest.mark.parametrize("stem", _stems("exercises"))
def test_exercise_page_carries_no_answer(built, stem):
    """The page's code is the hand-out's (exercises/), and no line of an answer of solutions/ is in it.

    Only the code is searched: a question's prose may spell out a step (ex08 q10 gives its first line).
    """
    page = (built / "exercises" / f"{stem}.html").read_text(encoding="utf-8")
    blocks = re.findall(r"<pre\b.*?</pre>", page, re.S)
    code = "\n".join(html.unescape(re.sub(r"<[^>]+>", "", block)) for block in blocks)
    assert "____" in code and "BEGIN SOLUTION" not in page
    handout = json.loads((ROOT / "exercises" / f"{stem}.ipynb").read_text())
    for cell in handout["cells"]:
        if cell["cell_type"] == "code" and "".join(cell["source"]).strip():
            assert "".join(cell["source"]).strip() in code, f"exercises/{stem}.ipynb: a code cell is not on the page"
    solution = json.loads((ROOT / "solutions" / f"{stem}.ipynb").read_text())
    answers = []
    for cell in solution["cells"]:
        src = "".join(cell["source"])
        for block in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", src, re.S):
            answers += [line.split("#")[0].strip() for line in block.splitlines()
                        if "=" in line.split("#")[0] and len(line.split("#")[0].strip()) > 12]
    assert answers, f"solutions/{stem}.ipynb: no answer lines found (the check would pass vacuously)"
    leaked = [a for a in answers if a in code]
    assert not leaked, f"answers of solutions/{stem}.ipynb on the exercise page: {leaked}"


# --- in a browser ---------------------------------------------------------------------------------------------
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(built):
    require_browser_tools()
    port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Quiet, directory=str(built)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


MATH_DONE_JS = """async () => {
    if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) return false;
    await MathJax.startup.promise;
    return true;
}"""

IMAGES_JS = """async () => {
    const imgs = Array.from(document.querySelectorAll('img'));
    for (const img of imgs) { img.loading = 'eager'; img.scrollIntoView(); }
    await Promise.all(imgs.map(img => img.complete ? null : new Promise(r => { img.onload = img.onerror = r; })));
    return imgs.map(img => [img.getAttribute('src'), img.naturalWidth]);
}"""


#: the formulas Sphinx marked (``span.math``, ``div.math``) that hold no MathJax output: TeX left as text
UNTYPESET_JS = """() => Array.from(document.querySelectorAll('main .math'))
    .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80))"""

#: the text of the page's article without its code blocks and MathJax's hidden MathML: what a reader reads
PROSE_JS = """() => {
    const main = document.querySelector('main').cloneNode(true);
    main.querySelectorAll('pre, mjx-assistive-mml').forEach(e => e.remove());
    return main.textContent;
}"""


def test_index_and_three_lessons_in_a_browser_load_nothing_from_outside(server):
    from playwright.sync_api import expect, sync_playwright

    shots = ARTIFACTS / "site"
    shots.mkdir(parents=True, exist_ok=True)
    requests, failures = [], []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            page.on("request", lambda r: requests.append(r.url))
            page.on("requestfailed", lambda r: failures.append(f"{r.url}: {r.failure}"))
            page.on("response", lambda r: r.status >= 400 and failures.append(f"{r.url}: HTTP {r.status}"))
            for path in ["index.html"] + [f"notebooks/{stem}.html" for stem in BROWSER_LESSONS]:
                page.goto(f"{server}/{path}", wait_until="load")
                images = page.evaluate(IMAGES_JS)
                assert all(width > 0 for _, width in images), f"{path}: images not loaded: {images}"
                if path == "index.html":
                    page.screenshot(path=str(shots / "index.png"))
                    continue
                assert images, f"{path}: no image (the lesson's figures)"
                assert page.evaluate(MATH_DONE_JS), f"{path}: MathJax did not start"
                typeset = page.locator("mjx-container").count()
                assert typeset > 0, f"{path}: no formula typeset"
                assert page.locator("mjx-merror").count() == 0, f"{path}: MathJax reported a TeX error"
                assert page.locator("main .math").count() > 0, f"{path}: no formula marked up for MathJax"
                untypeset = page.evaluate(UNTYPESET_JS)
                assert not untypeset, f"{path}: formulas MathJax left as text: {untypeset[:3]}"
                prose = page.evaluate(PROSE_JS)
                assert "$$" not in prose and "\\frac" not in prose, f"{path}: raw TeX on the page"
                # code hidden in the lab: closed on the page, opened by its toggle
                cell = page.locator(".cell.tag_hide-input").first
                code = cell.locator(".cell_input pre").first
                expect(code).to_be_hidden()
                cell.locator("summary").first.click()
                expect(code).to_be_visible()
                if "03_kv_cache" in path:
                    snapshot = page.locator(".course-widget-snapshot").first
                    snapshot.scroll_into_view_if_needed()
                    expect(snapshot).to_be_visible()
                page.screenshot(path=str(shots / f"{Path(path).stem}.png"), full_page=False)
            # the search runs in the page, over the site's own index
            page.goto(f"{server}/search.html?q=bandwidth", wait_until="load")
            expect(page.locator("#search-results li").first).to_be_visible()
        finally:
            browser.close()
    outside = [u for u in requests if not u.startswith((server + "/", "data:", "blob:"))]
    assert not outside, f"requests that left 127.0.0.1: {outside}"
    assert not failures, f"failed requests: {failures}"
    assert any("/_static/mathjax/" in u for u in requests), "MathJax was not loaded from the site"
