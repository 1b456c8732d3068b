"""The course as a static HTML book: ``make site`` (Jupyter Book 1.x: Sphinx + MyST-NB).

Lessons: none

    python -m course_lib.authoring.site build [--out build/site] [--repo-url URL] [--branch main]
    python -m course_lib.authoring.site check [--out build/site]

``build`` stages the book's sources in ``OUT/src`` (the repository's files are only read), builds the HTML
into ``OUT/html`` and then checks it (``check`` alone re-checks a built site). The book holds every lesson
(``notebooks/``), every exercise set (``exercises/``, the hand-outs: they carry no answers), the glossary
(``course_lib/data/glossary.json`` as a page) and the instructors' guide (``docs/INSTRUCTORS.md``), from the
*stored* notebooks: nothing is executed (``execute_notebooks: off``).

Nothing is fetched when a page is viewed: no script, style sheet or font from a CDN. MathJax 3 comes from
npm's ``mathjax`` package, pinned (version and sha512 checked), unpacked into the site's ``_static/mathjax``;
``npm pack`` fetches it once into ``OUT/cache`` (CI has the npm registry; a machine without it can put the
tarball there by hand). The rest of the theme ships inside the Python packages.

While staging, each notebook gets what the site needs and the lab does not:

* code hidden in the lab (``jupyter.source_hidden``) gets MyST-NB's ``hide-input`` tag: hidden on the page
  too, behind a "Show code cell source" toggle; hidden outputs (``jupyter.outputs_hidden``) get ``hide-output``;
* a "Run this lesson" box under the title: ``make lab`` and Binder (``binder/`` holds its environment; the
  Binder link needs the repository's URL, ``--repo-url`` or ``SITE_REPO_URL``, and says so when it has none).

``check`` walks every built HTML page: each ``href``/``src`` inside the site must name a file that exists and,
with a ``#fragment``, an ``id`` on that page; no script, style sheet, image, font or frame may come from
another host (links to other sites, ``<a href="https://...">``, are allowed: following one is the reader's
choice); no ``href="http://README.md"``-style link born of linkify; every lesson page links to ``make lab``
and Binder. tests/test_site.py (``make tour``) runs the same checks and opens pages in a real browser.

JupyterLite (lessons running in the browser) is left out: the torch-free lessons 00-01 ran from npm's
Pyodide core, but the plotting lessons need numpy/matplotlib Pyodide wheels that PyPI does not carry.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "docs" / "site"
DEFAULT_OUT = ROOT / "build" / "site"

#: npm's mathjax package, pinned: version and the registry's sha512 integrity of its tarball.
MATHJAX_VERSION = "3.2.2"
MATHJAX_INTEGRITY = "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
MATHJAX_TARBALL = f"mathjax-{MATHJAX_VERSION}.tgz"

HIDE_INPUT, HIDE_OUTPUT = "hide-input", "hide-output"
RUN_BOX_CLASS = "course-run-box"


class SiteError(RuntimeError):
    """The site cannot be built or failed its checks; the message says what and why."""


# --- staging ---------------------------------------------------------------------------------------------
def _lessons() -> list[dict]:
    from course_lib.lessons.lesson_map import lessons

    return [dict(les) for les in lessons() if (ROOT / "notebooks" / f"{les['stem']}.ipynb").exists()]


def binder_url(repo_url: str | None, branch: str, path: str) -> str | None:
    """mybinder.org's URL that opens ``path`` in JupyterLab, for a GitHub repository; None without one."""
    if not repo_url:
        return None
    m = re.fullmatch(r"https?://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", repo_url.strip())
    if not m:
        raise SiteError(f"--repo-url must be a GitHub repository URL (https://github.com/OWNER/NAME), got {repo_url!r}")
    owner, name = m.groups()
    return f"https://mybinder.org/v2/gh/{owner}/{name}/{branch}?urlpath=lab/tree/{path}"


def run_box(path: str, *, exercise: bool, repo_url: str | None, branch: str, companion: str | None = None) -> str:
    """The "Run this lesson" box (HTML, so that MyST passes it through) for the notebook at ``path``.

    ``companion``: the site page (``../exercises/NN_x.html`` or ``../notebooks/NN_x.html``) of the lesson's
    exercise set, or of an exercise set's lesson, linked from the box.
    """
    stem = Path(path).stem
    # on Binder, binder/postBuild copies each exercise set into work/, the learner's own copy, as make lab does
    binder_path = f"work/{stem}.ipynb" if exercise else path
    if exercise:
        what, shows = "these exercises", "the questions; to answer them and have each answer checked"
        local = (f"<code>make lab</code> copies this set to <code>work/{stem}.ipynb</code>, your own copy that "
                 f"is never overwritten, and opens JupyterLab: answer there, and each check tells you at once.")
    else:
        what, shows = "this lesson", "the stored results; to change the numbers and use the widgets"
        local = (f"<code>make lab</code> sets everything up and opens JupyterLab; open <code>{path}</code> "
                 f"and run its cells (Run ▸ Run All Cells). Hidden code shows with a click, here and in the lab.")
    url = binder_url(repo_url, branch, binder_path)
    if url:
        binder = f'<a href="{url}">Open {what} on Binder</a> (mybinder.org builds <code>binder/</code>; no set-up).'
    else:
        binder = ('Binder: give the repository\'s address to <a href="https://mybinder.org/">mybinder.org</a>, which '
                  f"builds its <code>binder/</code> folder, and open <code>{binder_path}</code> there (this copy of "
                  "the site was built without the repository's address: <code>make site SITE_REPO_URL=...</code> "
                  "links it).")
    link = ""
    if companion:
        label = "The lesson these exercises go with" if exercise else "This lesson's exercises"
        name = f"{'lesson' if exercise else 'exercises'} {stem[:2]}"
        link = f'\n<p>{label}: <a href="{companion}">{name}</a>.</p>'
    return (f'<div class="{RUN_BOX_CLASS}">\n<p><b>Run {what}.</b> This page shows {shows}, run the notebook. '
            f"On your machine, in the course's folder: {local}</p>\n<p>{binder}</p>{link}\n</div>\n")


def stage_notebook(src: Path, dest: Path, box: str) -> dict:
    """Copy a notebook for the site: hidden-in-the-lab code gets ``hide-input``; the run box goes under the title.

    Computed markdown that ends one display formula and starts the next with no break (``$$a$$$$b$$``, as
    ``formula(a) + formula(b)`` gives: JupyterLab's renderer reads it as two formulas, MyST as garbage) gets a
    blank line between them. Returns counts: ``{"hidden_inputs": n, "hidden_outputs": n, "joined_formulas": n}``.
    """
    nb = json.loads(src.read_text(encoding="utf-8"))
    counts = {"hidden_inputs": 0, "hidden_outputs": 0, "joined_formulas": 0}
    for cell in nb["cells"]:
        meta = cell.setdefault("metadata", {})
        jup = meta.get("jupyter", {})
        tags = list(meta.get("tags", []))
        if cell["cell_type"] == "code" and jup.get("source_hidden") and HIDE_INPUT not in tags:
            tags.append(HIDE_INPUT)
            counts["hidden_inputs"] += 1
        if cell["cell_type"] == "code" and jup.get("outputs_hidden") and HIDE_OUTPUT not in tags:
            tags.append(HIDE_OUTPUT)
            counts["hidden_outputs"] += 1
        if tags:
            meta["tags"] = tags
        for out in cell.get("outputs", []):
            md = out.get("data", {}).get("text/markdown")
            if md is not None:
                text = "".join(md) if isinstance(md, list) else md
                fixed = text.replace("$$$$", "$$\n\n$$")
                counts["joined_formulas"] += fixed != text
                out["data"]["text/markdown"] = fixed
    first = nb["cells"][0] if nb["cells"] else None
    if first is None or first["cell_type"] != "markdown" or not "".join(first["source"]).startswith("# "):
        raise SiteError(f"{src.relative_to(ROOT)}: the first cell must be markdown starting with its '# ' title")
    text = "".join(first["source"])
    title, _, rest = text.partition("\n")
    first["source"] = f"{title}\n\n{box}\n{rest.lstrip(chr(10))}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return counts


def glossary_page() -> str:
    """The glossary (``course_lib/data/glossary.json``) as a MyST page: a Sphinx glossary, terms linked by lesson."""
    from course_lib.lessons.glossary import terms

    by_n = {int(les["n"]): les for les in _lessons()}
    lines = ["# Glossary", "",
             "Each term of the course with a short definition and the lesson that teaches it "
             "(from `course_lib/data/glossary.json`, the list lesson 00 shows).", ""]
    by_lesson: dict[int, list] = {}
    for t in terms():
        by_lesson.setdefault(t.lesson, []).append(t)
    for n, group in by_lesson.items():
        les = by_n.get(n)
        lines += [f"## Lesson {n:02d}" + (f": {les['title']}" if les else ""), ""]
        if les:
            lines += [f"Taught in [lesson {n:02d}](notebooks/{les['stem']}.ipynb).", ""]
        lines += ["```{glossary}"]
        for t in group:
            lines += [t.term, f"  {' '.join(t.definition.split())}", ""]
        lines += ["```", ""]
    return "\n".join(lines)


def index_page(lessons: list[dict], repo_url: str | None, branch: str) -> str:
    rows = ["| Lesson | Exercises | Time |", "|---|---|---|"]
    for les in lessons:
        ex = ROOT / "exercises" / f"{les['stem']}.ipynb"
        ex_link = f"[exercises {les['n']}](exercises/{les['stem']}.ipynb)" if ex.exists() else "–"
        rows.append(f"| [{les['n']} {les['title']}](notebooks/{les['stem']}.ipynb) | {ex_link} | "
                    f"{les['time_min']} min |")
    url = binder_url(repo_url, branch, "notebooks/00_start_here.ipynb")
    binder = f"[Open the course on Binder]({url})." if url else (
        "Give the repository's address to [mybinder.org](https://mybinder.org/) (this copy of the site was built "
        "without it).")
    intro = (CONFIG_DIR / "intro.md").read_text(encoding="utf-8")
    return intro.replace("{{ lesson_table }}", "\n".join(rows)).replace("{{ binder }}", binder)


def toc(lessons: list[dict]) -> str:
    exercises = [les for les in lessons if (ROOT / "exercises" / f"{les['stem']}.ipynb").exists()]
    lines = ["# the course site's table of contents, written by course_lib/authoring/site.py", "format: jb-book",
             "root: index", "parts:", "  - caption: Lessons", "    chapters:"]
    lines += [f"      - file: notebooks/{les['stem']}" for les in lessons]
    lines += ["  - caption: Exercises", "    chapters:"]
    lines += [f"      - file: exercises/{les['stem']}" for les in exercises]
    lines += ["  - caption: Reference", "    chapters:", "      - file: glossary", "      - file: instructors"]
    return "\n".join(lines) + "\n"


def vendor_mathjax(cache: Path, dest: Path) -> Path:
    """npm's mathjax@MATHJAX_VERSION (sha512 checked) unpacked into ``dest``: its ``es5`` folder, tex-chtml.js too."""
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / MATHJAX_TARBALL
    if not tarball.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise SiteError(f"npm is needed once to fetch mathjax@{MATHJAX_VERSION} (Debian: apt-get install npm), "
                            f"or put {MATHJAX_TARBALL} (from `npm pack mathjax@{MATHJAX_VERSION}`) in {cache}")
        run = subprocess.run([npm, "pack", f"mathjax@{MATHJAX_VERSION}", "--pack-destination", str(cache)],
                             capture_output=True, text=True)
        if run.returncode != 0 or not tarball.exists():
            raise SiteError(f"npm pack mathjax@{MATHJAX_VERSION} failed:\n{run.stdout}{run.stderr}")
    digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if digest != MATHJAX_INTEGRITY:
        raise SiteError(f"{tarball}: sha512 {digest} is not the pinned {MATHJAX_INTEGRITY}; delete it and build again")
    if dest.exists():
        shutil.rmtree(dest)
    prefix = "package/es5/"
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            if not member.name.startswith(prefix) or not (member.isfile() or member.isdir()):
                continue
            rel = Path(member.name[len(prefix):])
            if ".." in rel.parts:
                raise SiteError(f"{tarball}: unexpected path {member.name!r}")
            target = dest / rel
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as f:
                target.write_bytes(f.read())
    if not (dest / "tex-chtml.js").is_file():
        raise SiteError(f"{tarball} holds no es5/tex-chtml.js")
    return dest


def stage(src: Path, *, cache: Path, repo_url: str | None, branch: str) -> dict:
    """Lay the book's sources out in ``src`` (emptied first). Returns what was staged, for the report."""
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(CONFIG_DIR, src, ignore=shutil.ignore_patterns("intro.md", "README*", "__pycache__"))
    lessons = _lessons()
    report = {"lessons": 0, "exercises": 0, "hidden_inputs": 0, "joined_formulas": 0}
    for les in lessons:
        stem = les["stem"]
        has_exercises = (ROOT / "exercises" / f"{stem}.ipynb").exists()
        path = f"notebooks/{stem}.ipynb"
        box = run_box(path, exercise=False, repo_url=repo_url, branch=branch,
                      companion=f"../exercises/{stem}.html" if has_exercises else None)
        counts = stage_notebook(ROOT / path, src / path, box)
        report["lessons"] += 1
        report["hidden_inputs"] += counts["hidden_inputs"]
        report["joined_formulas"] += counts["joined_formulas"]
        if has_exercises:
            path = f"exercises/{stem}.ipynb"
            box = run_box(path, exercise=True, repo_url=repo_url, branch=branch, companion=f"../notebooks/{stem}.html")
            stage_notebook(ROOT / path, src / path, box)
            report["exercises"] += 1
    (src / "glossary.md").write_text(glossary_page(), encoding="utf-8")
    shutil.copyfile(ROOT / "docs" / "INSTRUCTORS.md", src / "instructors.md")
    (src / "index.md").write_text(index_page(lessons, repo_url, branch), encoding="utf-8")
    (src / "_toc.yml").write_text(toc(lessons), encoding="utf-8")
    vendor_mathjax(cache, src / "_assets" / "mathjax")
    return report


def build(out: Path = DEFAULT_OUT, *, repo_url: str | None = None, branch: str = "main") -> Path:
    """Stage and build the site into ``out/html``; returns that folder (its ``index.html`` is the book)."""
    out = Path(out).resolve()
    src, html_dir = out / "src", out / "html"
    report = stage(src, cache=out / "cache", repo_url=repo_url, branch=branch)
    if html_dir.exists():
        shutil.rmtree(html_dir)
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(src), "--path-output", str(out / "jb"),
           "--builder", "html", "--keep-going"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=out)
    log = out / "build.log"
    log.write_text(run.stdout + run.stderr, encoding="utf-8")
    if run.returncode != 0:
        raise SiteError(f"jupyter-book build failed (exit {run.returncode}); the log is {log}:\n"
                        + "\n".join((run.stdout + run.stderr).splitlines()[-40:]))
    shutil.move(str(out / "jb" / "_build" / "html"), html_dir)
    shutil.rmtree(out / "jb", ignore_errors=True)
    warnings = [line for line in (run.stdout + run.stderr).splitlines() if "WARNING" in line]
    print(f"site: {report['lessons']} lessons, {report['exercises']} exercise sets, the glossary and the "
          f"instructors' guide; {report['hidden_inputs']} hidden code cells kept hidden; "
          f"{report['joined_formulas']} outputs with back-to-back $$ formulas split; "
          f"{len(warnings)} Sphinx warnings (log: {log})")
    return html_dir


# --- checks ----------------------------------------------------------------------------------------------
#: (tag, attribute) pairs whose URL the page loads by itself; any of them from another host is a fault
LOADED = {("script", "src"), ("link", "href"), ("img", "src"), ("source", "src"), ("iframe", "src"),
          ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data"), ("image", "href"),
          ("use", "href"), ("input", "src"), ("track", "src")}
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)['"]?\s*\)|@import\s+['"]([^'"]+)['"]""")


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str]] = []   # (tag, attribute, url)
        self._style = False
        self.styles: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for attr in ("href", "src", "data", "xlink:href", "poster"):
            if a.get(attr) is not None:
                self.refs.append((tag, "href" if attr == "xlink:href" else attr, a[attr]))
        if a.get("srcset"):
            for part in a["srcset"].split(","):
                if part.strip():
                    self.refs.append((tag, "src", part.strip().split()[0]))
        if a.get("style"):
            self.styles.append(a["style"])
        self._style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._style = False

    def handle_data(self, data):
        if self._style:
            self.styles.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def _external(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.scheme and parts.scheme not in ("data", "blob", "about", "javascript", "mailto")) \
        or url.startswith("//")


def check_site(html_dir: Path) -> list[str]:
    """Every fault of the built site, one line each ([] when it is sound). See the module's docstring."""
    html_dir = Path(html_dir)
    if not (html_dir / "index.html").is_file():
        return [f"{html_dir}: no index.html (build the site first: make site)"]
    problems: list[str] = []
    # the pages: _static/ holds the themes' Jinja macro files (*.html templates), not pages
    pages = {p: _parse(p) for p in sorted(html_dir.rglob("*.html")) if "_static" not in p.relative_to(html_dir).parts}
    for path, page in pages.items():
        rel = path.relative_to(html_dir)
        for tag, attr, url in page.refs:
            if not url or url.startswith(("mailto:", "javascript:", "data:", "blob:")):
                continue
            if _external(url):
                if (tag, attr) in LOADED and not (tag == "link" and _link_is_navigation(path, url)):
                    problems.append(f"{rel}: <{tag} {attr}={url!r}> loads from another host")
                elif re.fullmatch(r"https?://[^/]*\.(md|ipynb|json|py|txt)/?", url):
                    problems.append(f"{rel}: <{tag} {attr}={url!r}> is a file name turned into a web address")
                continue
            parts = urlsplit(url)
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if parts.path.endswith("/") or (target.is_dir() and parts.path):
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{rel}: <{tag} {attr}={url!r}> points to a missing file")
                continue
            if html_dir.resolve() not in target.resolve().parents and target.resolve() != html_dir.resolve():
                problems.append(f"{rel}: <{tag} {attr}={url!r}> leaves the site")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{rel}: <{tag} {attr}={url!r}>: no id {parts.fragment!r} on that page")
        for css in page.styles:
            for m in CSS_URL.finditer(css):
                url = m.group(1) or m.group(2)
                if _external(url):
                    problems.append(f"{rel}: a style loads {url!r} from another host")
    for css_path in sorted(html_dir.rglob("*.css")):
        for m in CSS_URL.finditer(css_path.read_text(encoding="utf-8", errors="replace")):
            url = (m.group(1) or m.group(2)).strip()
            if _external(url):
                problems.append(f"{css_path.relative_to(html_dir)}: loads {url!r} from another host")
            elif not url.startswith(("data:", "#")):
                target = (css_path.parent / unquote(urlsplit(url).path)).resolve()
                if not target.exists():
                    problems.append(f"{css_path.relative_to(html_dir)}: url({url!r}) points to a missing file")
    for les in _lessons():
        page = html_dir / "notebooks" / f"{les['stem']}.html"
        if not page.exists():
            problems.append(f"notebooks/{les['stem']}.html is missing")
            continue
        text = page.read_text(encoding="utf-8")
        if RUN_BOX_CLASS not in text or "make lab" not in text or 'href="https://mybinder.org/' not in text:
            problems.append(f"{page.relative_to(html_dir)}: no box saying how to run it (make lab, Binder)")
    for name in ("glossary.html", "instructors.html"):
        if not (html_dir / name).exists():
            problems.append(f"{name} is missing")
    return problems


def _link_is_navigation(path: Path, url: str) -> bool:
    """A ``<link>`` that loads nothing (rel=canonical and friends): not a fault when it names another host."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for m in re.finditer(r"<link\b[^>]*>", text):
        tag = m.group(0)
        if url in tag:
            rel = re.search(r"""rel=["']?([^"' >]+)""", tag)
            return bool(rel) and rel.group(1) in ("canonical", "alternate", "author", "license", "help", "search")
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.authoring.site", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="build folder (default build/site)")
    parser.add_argument("--repo-url", default=os.environ.get("SITE_REPO_URL") or None,
                        help="the repository on GitHub, for the Binder links (default: $SITE_REPO_URL)")
    parser.add_argument("--branch", default=os.environ.get("SITE_BRANCH", "main"))
    args = parser.parse_args(argv)
    try:
        html_dir = build(args.out, repo_url=args.repo_url, branch=args.branch) if args.command == "build" \
            else Path(args.out).resolve() / "html"
    except SiteError as err:
        print(f"site: {err}", file=sys.stderr)
        return 1
    problems = check_site(html_dir)
    for line in problems:
        print(f"site check: {line}", file=sys.stderr)
    if problems:
        print(f"site check: {len(problems)} faults in {html_dir}", file=sys.stderr)
        return 1
    print(f"site check: every link and asset of {len(list(html_dir.rglob('*.html')))} pages resolves inside "
          f"{html_dir}; open {html_dir / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
