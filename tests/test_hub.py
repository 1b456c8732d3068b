"""A classroom on a JupyterHub, end to end: the deployment docs/INSTRUCTORS.md describes, tested.

A JupyterHub on 127.0.0.1 (free ports, a temporary folder for everything it writes): DummyAuthenticator
with three allowed users -- ``instructor``, ``student1``, ``student2`` --, SimpleLocalProcessSpawner
(every user a process of this OS account, a home of its own under the temporary folder), the
configurable-http-proxy from npm, all started and stopped by the test. Single-user servers run this
interpreter's ``jupyterhub-singleuser`` with ``--allow-root`` when the test runs as root.

The two roles get different Jupyter configuration, by ``JUPYTER_CONFIG_PATH`` (``Spawner.environment``):

* the instructor's server has all of nbgrader (the formgrader, "Create Assignment") and an
  ``nbgrader_config.py`` naming the course directory, the course id and the exchange;
* a student's server has only nbgrader's "Assignments" list and "Validate" (server extensions
  ``assignment_list``, ``validate_assignment``; lab plugins ``assignment-list``, ``validate-assignment``,
  ``menu``) and an ``nbgrader_config.py`` naming the exchange, the course id and the student id (the
  hub user: with one OS account for everyone, the OS user name nbgrader would use is the same for all).

The flow, as in the guide: the instructor imports the roster, generates and releases exercise set 01
(``solutions/01_units.ipynb``, which needs no torch) as assignment ``ps1``; each student fetches it
through their own server's Assignments API (what the Assignments panel calls), saves an answer through
the contents API and submits; the instructor collects, autogrades and exports the grades to CSV.
student1 answers everything, student2 nothing: the grades must be the full points and 0.

Access: a student's server answers 404 for every formgrader and course-list URL, its lab page
disables every instructor plugin (the page config the lab front end reads), and a student's token
gets 403 at the instructor's server and at the other student's. The instructor's server serves the
formgrader (the control: each access check can fail).

Each step's wall time is printed (``-s`` shows it; docs/INSTRUCTORS.md quotes a run) and written to
``artifacts/hub_timings.json``. Runs in ``make tour``; skipped when jupyterhub, configurable-http-proxy or
nbgrader is missing, except under CI=true or COURSE_REQUIRE_ALL=1, where that is a failure.
"""
from __future__ import annotations

import csv
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from conftest import require_tool
from repo import ROOT as REPO

pytestmark = pytest.mark.classroom

COURSE_ID = "llm-latency"
ASSIGNMENT = "ps1"
SOURCE = REPO / "solutions" / "01_units.ipynb"
NOTEBOOK = SOURCE.name
INSTRUCTOR = "instructor"
STUDENTS = ("student1", "student2")
#: on the roster, but not hub users: student3 hands in through an LMS (zip_collect), student4 never does
LMS_STUDENT, ABSENT_STUDENT = "student3", "student4"
ROSTER = (*STUDENTS, LMS_STUDENT, ABSENT_STUDENT)
GUIDE = REPO / "docs" / "INSTRUCTORS.md"
#: the LMS download's file names (docs/INSTRUCTORS.md, zip_collect) and the regexp that reads them
LMS_FILE = f"{LMS_STUDENT}_48213_991827_{NOTEBOOK}"
LMS_REGEXP = r".*/(?P<student_id>[^_/]+)_\d+_\d+_(?P<file_id>[^/]+\.ipynb)$"
ARTIFACTS = REPO / "artifacts"
START_TIMEOUT_S = 120

#: nbgrader's lab plugins a student must not have, and those a student keeps.
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:course-list")
STUDENT_PLUGINS = ("@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:validate-assignment")
#: The instructor's URLs of a single-user server (relative to /user/<name>/).
FORMGRADER_URLS = ("formgrader", "formgrader/", "formgrader/manage_assignments", "formgrader/gradebook",
                   "formgrader/manage_students", f"formgrader/manage_submissions/{ASSIGNMENT}",
                   "formgrader/api/status", "formgrader/api/assignments", "formgrader/api/students",
                   "formgraders")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def student_config(config_dir: Path, exchange: Path) -> None:
    """A student's Jupyter config folder: the Assignments list and Validate, none of the instructor's tools."""
    _write_json(config_dir / "jupyter_server_config.json", {
        "ServerApp": {"jpserver_extensions": {
            "nbgrader.server_extensions.formgrader": False,
            "nbgrader.server_extensions.course_list": False,
            "nbgrader.server_extensions.assignment_list": True,
            "nbgrader.server_extensions.validate_assignment": True,
        }},
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
                   "expose_app_in_browser": True},  # test only: the browser check reads window.jupyterapp
    })
    _write_json(config_dir / "labconfig" / "page_config.json", {
        "disabledExtensions": {**{p: True for p in INSTRUCTOR_PLUGINS},
                               "@jupyterlab/apputils-extension:announcements": True},
    })
    (config_dir / "nbgrader_config.py").write_text(
        "import os\n"
        "c = get_config()\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        "# one OS account for every hub user (SimpleLocalProcessSpawner): name submissions by the hub user\n"
        "c.CourseDirectory.student_id = os.environ['JUPYTERHUB_USER']\n"
    )


def instructor_config(config_dir: Path, exchange: Path, course: Path) -> None:
    """The instructor's Jupyter config folder: all of nbgrader, the course directory and the exchange."""
    _write_json(config_dir / "jupyter_server_config.json", {
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
                   "expose_app_in_browser": True},  # test only: the browser check reads window.jupyterapp
    })
    (config_dir / "nbgrader_config.py").write_text(
        "from course_lib.authoring.nbgrader_autograde import configure\n"
        "c = get_config()\n"
        "configure(c)  # autograde through the course's grader: its sandbox, the answers judged outside the kernel\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        "# every hub user is the same OS account here, so nbgrader's owner check would flag each submission\n"
        "c.CollectApp.check_owner = False\n"
        "c.CourseAutograde.timeout = 120  # seconds per cell (c.Execute.* no longer applies)\n"
        "# zip_collect: how an LMS download names each file (see docs/INSTRUCTORS.md)\n"
        f"c.FileNameCollectorPlugin.named_regexp = {LMS_REGEXP!r}\n"
    )


def hub_config(tmp: Path, *, port: int, hub_port: int, api_port: int, token: str, chp: str) -> str:
    singleuser = Path(sys.executable).with_name("jupyterhub-singleuser")
    args = ["--allow-root"] if os.geteuid() == 0 else []
    return f"""\
c = get_config()
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.ConfigurableHTTPProxy.pid_file = {str(tmp / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{tmp / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(tmp / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(tmp / "jupyterhub.pid")!r}
c.JupyterHub.cleanup_servers = True
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set((INSTRUCTOR, *STUDENTS))!r}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(tmp / "home" / "{username}")!r}
c.Spawner.cmd = [{str(singleuser)!r}]
c.Spawner.args = {args!r}
c.Spawner.ip = "127.0.0.1"
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = {START_TIMEOUT_S}
c.Spawner.http_timeout = {START_TIMEOUT_S}
c.Spawner.environment = {{
    "JUPYTER_CONFIG_PATH": lambda spawner: {str(tmp / "config")!r} + "/"
        + ("instructor" if spawner.user.name == {INSTRUCTOR!r} else "student"),
}}
# the test's own client: an admin service that starts servers and makes each user a token
c.JupyterHub.services = [{{"name": "course-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["course-test"]}}]
"""


class Hub:
    """A running JupyterHub and the test's admin client for it."""

    def __init__(self, tmp: Path, hub_exe: str, chp: str):
        self.tmp = tmp
        self.port, hub_port, api_port = _free_port(), _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        (tmp / "jupyterhub_config.py").write_text(
            hub_config(tmp, port=self.port, hub_port=hub_port, api_port=api_port, token=self.token, chp=chp))
        self.log_path = tmp / "jupyterhub.log"
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([hub_exe, "-f", str(tmp / "jupyterhub_config.py")], cwd=tmp, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.user_tokens: dict[str, str] = {}

    def api(self, method: str, path: str, token: str | None = None, **kwargs):
        import requests

        headers = {"Authorization": f"token {token or self.token}"}
        return requests.request(method, f"{self.url}/hub/api/{path}", headers=headers, timeout=60, **kwargs)

    def user(self, method: str, name: str, path: str, *, as_user: str | None = None, **kwargs):
        """A request to ``/user/<name>/<path>`` with the token of ``as_user`` (default: ``name``)."""
        import requests

        headers = {"Authorization": f"token {self.user_tokens[as_user or name]}"}
        kwargs.setdefault("allow_redirects", False)
        return requests.request(method, f"{self.url}/user/{name}/{path}", headers=headers, timeout=120, **kwargs)

    def wait_ready(self) -> None:
        import requests

        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.25)
        raise AssertionError(f"jupyterhub did not answer within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def spawn_all(self, names) -> None:
        for name in names:
            r = self.api("POST", f"users/{name}/server")
            assert r.status_code in (201, 202), (name, r.status_code, r.text, self.log_tail())
            r = self.api("POST", f"users/{name}/tokens", json={"note": "course test", "expires_in": 3600})
            assert r.status_code == 201, (name, r.status_code, r.text)
            self.user_tokens[name] = r.json()["token"]
        deadline = time.monotonic() + START_TIMEOUT_S
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                info = self.api("GET", f"users/{name}").json()
                if info.get("servers", {}).get("", {}).get("ready"):
                    pending.discard(name)
            time.sleep(0.25)
        assert not pending, f"servers not ready after {START_TIMEOUT_S} s: {sorted(pending)}\n{self.log_tail()}"

    def log_tail(self, n: int = 80) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the hub stops the servers and the proxy it started
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:  # whatever of the hub's session is left (the hub, its proxy, servers started in its group)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(timeout=10)
        self.log.close()


class Timings(dict):
    def step(self, name: str):
        timings = self

        class _Step:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timings[name] = round(time.perf_counter() - self.t0, 2)
                print(f"[hub timing] {name}: {timings[name]:.2f} s")
        return _Step()


def _nbgrader(exe: str, args: list[str], course: Path, config_dir: Path) -> subprocess.CompletedProcess:
    """An instructor's nbgrader command, run in the course directory with the instructor's config."""
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = str(config_dir)
    env["PATH"] = os.pathsep.join([str(Path(exe).parent), env.get("PATH", "")])  # nbgrader runs alembic
    out = subprocess.run([exe, *args], cwd=course, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    hub_exe = require_tool("jupyterhub", why="pip install -c constraints.txt -e '.[classroom]'")
    chp = require_tool("configurable-http-proxy", why="npm install -g configurable-http-proxy (see .ci/run)")
    nbgrader = require_tool("nbgrader", why="pip install -c constraints.txt -e '.[classroom]'")
    tmp = tmp_path_factory.mktemp("hub")
    exchange = tmp / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)  # nbgrader's exchange: writable by everyone, sticky
    course = tmp / "home" / INSTRUCTOR / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(SOURCE, course / "source" / ASSIGNMENT / NOTEBOOK)
    instructor_config(tmp / "config" / "instructor", exchange, course)
    student_config(tmp / "config" / "student", exchange)

    timings = Timings()
    with timings.step("hub start (hub + proxy answering)"):
        hub = Hub(tmp, hub_exe, chp)
        try:
            hub.wait_ready()
        except BaseException:
            hub.stop()
            raise
    try:
        with timings.step("three single-user servers ready"):
            hub.spawn_all((INSTRUCTOR, *STUDENTS))
        yield {"hub": hub, "tmp": tmp, "course": course, "exchange": exchange, "nbgrader": nbgrader,
               "config": tmp / "config", "timings": timings}
    finally:
        timings.update(_resident_mib(hub.proc.pid))
        hub.stop()
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "hub_timings.json").write_text(json.dumps(timings, indent=2) + "\n")


def _resident_mib(hub_pid: int) -> dict:
    """Resident memory (MiB) of the hub, its proxy and each single-user server (no kernels run in them here)."""
    import psutil

    out = {}
    try:
        hub = psutil.Process(hub_pid)
        out["rss MiB: jupyterhub"] = round(hub.memory_info().rss / 2**20)
        for child in hub.children(recursive=True):
            cmd = " ".join(child.cmdline())
            if "jupyterhub-singleuser" in cmd:
                user = next((u for u in (INSTRUCTOR, *STUDENTS) if f"/home/{u}" in child.cwd()), str(child.pid))
                out[f"rss MiB: single-user server {user}"] = round(child.memory_info().rss / 2**20)
            elif "configurable-http-proxy" in cmd:
                out["rss MiB: configurable-http-proxy"] = round(child.memory_info().rss / 2**20)
    except psutil.Error:
        pass
    return out


def _page_config(html: str) -> dict:
    m = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
    assert m, "the lab page carries its page config"
    return json.loads(m.group(1))


def test_students_get_no_instructor_tools(classroom):
    hub = classroom["hub"]
    for student in STUDENTS:
        for url in FORMGRADER_URLS:
            r = hub.user("GET", student, url, allow_redirects=True)  # "formgrader/" redirects to "formgrader"
            assert r.status_code in (403, 404), (student, url, r.status_code, r.url)
        lab = hub.user("GET", student, "lab")
        assert lab.status_code == 200, (student, lab.status_code)
        disabled = set(_page_config(lab.text)["disabledExtensions"])
        assert set(INSTRUCTOR_PLUGINS) <= disabled, (student, sorted(disabled))
        assert not set(STUDENT_PLUGINS) & disabled, (student, sorted(disabled))
        # nor the instructor's server, nor another student's
        for other in (INSTRUCTOR, *STUDENTS):
            if other == student:
                continue
            r = hub.user("GET", other, "formgrader/api/status" if other == INSTRUCTOR else "api/contents",
                         as_user=student)
            assert r.status_code == 403, (student, other, r.status_code)
    # the control: the instructor's server serves the formgrader and the lab enables its plugins
    for url in ("formgrader", "formgrader/api/status", "formgraders"):
        r = hub.user("GET", INSTRUCTOR, url, allow_redirects=True)
        assert r.status_code == 200, (url, r.status_code, r.url, r.text[:300])
    disabled = set(_page_config(hub.user("GET", INSTRUCTOR, "lab").text)["disabledExtensions"])
    assert not set(INSTRUCTOR_PLUGINS) & disabled


def guide_snippet(name: str) -> str:
    """The Python block of docs/INSTRUCTORS.md that follows ``<!-- tested: NAME -->``."""
    m = re.search(rf"<!-- tested: {re.escape(name)} -->\s*```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert m, f"docs/INSTRUCTORS.md has the snippet {name!r}"
    return m.group(1)


def _run_snippet(name: str, course: Path, config_dir: Path, *args: str) -> str:
    script = course / f"{name}.py"
    script.write_text(guide_snippet(name))
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(config_dir)}
    out = subprocess.run([sys.executable, str(script), *args], cwd=course, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, f"the guide's {name} snippet failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


#: nbgrader's plugins active in the page, once the lab has started
ACTIVE_NBGRADER_PLUGINS_JS = """async () => {
    const app = window.jupyterapp;
    await app.restored;
    return app.listPlugins().filter(id => id.startsWith('@jupyter/nbgrader:') && app.isPluginActivated(id)).sort();
}"""
NBGRADER_COMMANDS_JS = """() => window.jupyterapp.commands.listCommands()
    .filter(c => c.startsWith("nbgrader:")).sort()"""


def _login_lab(browser, hub: Hub, name: str):
    """A page of ``name``'s lab, logged in through the hub's login form (any password: DummyAuthenticator)."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", "any")
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf".*/user/{name}/lab.*"))
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.restored.then(() => true)")
    return page


@pytest.mark.browser
def test_student_lab_shows_no_instructor_panel(classroom):
    """In a real browser: a student's lab has the Assignments list and none of the formgrader's panels or menus."""
    from browser_util import launch_chromium, require_browser_tools
    from playwright.sync_api import sync_playwright

    require_browser_tools()
    hub = classroom["hub"]
    t = classroom["timings"]
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            with t.step("student1: log in, lab restored (browser)"):
                page = _login_lab(browser, hub, "student1")
            active = page.evaluate(ACTIVE_NBGRADER_PLUGINS_JS)
            assert not set(INSTRUCTOR_PLUGINS) & set(active), active
            assert set(STUDENT_PLUGINS) <= set(active), active
            commands = page.evaluate(NBGRADER_COMMANDS_JS)
            assert not [c for c in commands if re.search("formgrader|create-assignment|course-list", c)], commands
            page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Nbgrader\s*$")).click()
            menu = page.locator("#jp-mainmenu-nbgrader")
            menu.wait_for()
            assert "Assignment List" in menu.inner_text()
            for hidden in ("Formgrader", "Course List", "Create Assignment"):
                assert hidden not in menu.inner_text(), f"a student's Nbgrader menu offers {hidden!r}"
            page.keyboard.press("Escape")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "hub_student_lab.png"))
            # the control: the instructor's lab has the formgrader and "Create Assignment"
            page = _login_lab(browser, hub, INSTRUCTOR)
            active = page.evaluate(ACTIVE_NBGRADER_PLUGINS_JS)
            assert set(INSTRUCTOR_PLUGINS) <= set(active), active
        finally:
            browser.close()


def _answered(released: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The released notebook with every solution cell filled in from the source (a perfect learner)."""
    source = nbformat.read(str(SOURCE), as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.from_dict(json.loads(nbformat.writes(released)))
    filled = 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell.source = answers[meta["grade_id"]]
            filled += 1
    assert filled == len(answers) > 0
    return nb


def test_release_fetch_submit_collect_autograde_export(classroom):
    hub, course, exe = classroom["hub"], classroom["course"], classroom["nbgrader"]
    cfg = classroom["config"] / "instructor"
    t = classroom["timings"]

    roster = course / "roster.csv"
    roster.write_text("id,first_name,last_name,email\n" + "".join(
        f"{s},{s.title()},Example,{s}@example.org\n" for s in ROSTER))
    with t.step("nbgrader db student import roster.csv"):
        _nbgrader(exe, ["db", "student", "import", str(roster)], course, cfg)
    with t.step("nbgrader generate_assignment ps1"):
        _nbgrader(exe, ["generate_assignment", ASSIGNMENT, "--force"], course, cfg)
    with t.step("nbgrader release_assignment ps1"):
        _nbgrader(exe, ["release_assignment", ASSIGNMENT, "--force"], course, cfg)
    assert (classroom["exchange"] / COURSE_ID / "outbound" / ASSIGNMENT / NOTEBOOK).exists()

    for i, student in enumerate(STUDENTS):
        body = {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
        listed = hub.user("GET", student, "assignments", params={"course_id": COURSE_ID})
        assert listed.status_code == 200 and listed.json()["success"], listed.text
        assert [a["status"] for a in listed.json()["value"] if a["assignment_id"] == ASSIGNMENT] == ["released"]
        with t.step(f"{student}: fetch"):
            r = hub.user("POST", student, "assignments/fetch", json=body)
        assert r.status_code == 200, (r.status_code, r.text)
        path = f"api/contents/{ASSIGNMENT}/{NOTEBOOK}"
        got = hub.user("GET", student, path)
        assert got.status_code == 200, f"{student} has {ASSIGNMENT}/{NOTEBOOK} after fetching"
        released = nbformat.from_dict(got.json()["content"])
        if i == 0:
            answer = _answered(released)  # student1 answers everything
        else:  # student2 answers nothing, and edits a locked cell (a real "checksum has changed")
            answer = nbformat.from_dict(json.loads(nbformat.writes(released)))
            locked = next(c for c in answer.cells if c.cell_type == "code"
                          and c.metadata.get("nbgrader", {}).get("locked") and not c.metadata["nbgrader"].get("grade"))
            locked.source += "\n# edited by the student"
            tampered_cell = locked.metadata["nbgrader"]["grade_id"]
        saved = hub.user("PUT", student, path, json={"type": "notebook", "format": "json",
                                                      "content": json.loads(nbformat.writes(answer))})
        assert saved.status_code in (200, 201), saved.text
        with t.step(f"{student}: submit"):
            r = hub.user("POST", student, "assignments/submit", json=body)
        assert r.status_code == 200 and r.json()["success"], r.text
        statuses = {a["status"] for a in r.json()["value"] if a["assignment_id"] == ASSIGNMENT}
        assert "submitted" in statuses, r.text
    inbound = sorted(p.name.split("+")[0] for p in (classroom["exchange"] / COURSE_ID / "inbound").iterdir())
    assert inbound == sorted(STUDENTS), "each submission is named by its hub user"

    with t.step("nbgrader collect ps1"):
        _nbgrader(exe, ["collect", ASSIGNMENT], course, cfg)
    for student in STUDENTS:
        assert (course / "submitted" / student / ASSIGNMENT / NOTEBOOK).exists()

    # student3 handed in through an LMS: its download is a zip of files named <student>_<n>_<n>_<file>
    import zipfile

    archive = course / "downloaded" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as z:
        z.writestr(f"submissions/{LMS_FILE}", nbformat.writes(_answered(released)))
    with t.step("nbgrader zip_collect ps1"):
        _nbgrader(exe, ["zip_collect", ASSIGNMENT, "--force"], course, cfg)
    assert (course / "submitted" / LMS_STUDENT / ASSIGNMENT / NOTEBOOK).exists()

    with t.step("nbgrader autograde ps1 (3 submissions)"):
        graded = _nbgrader(exe, ["autograde", ASSIGNMENT, "--force"], course, cfg)
    log = graded.stdout + graded.stderr
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "hub_autograde.log").write_text(log)
    modes = re.findall(r"course grader: \S+: grading in the (\w+) mode", log)
    assert modes == ["sandbox"] * 3, f"the protected mode graded each submission in the sandbox: {modes}"
    warned = re.findall(r"Attribute 'checksum' for cell (\S+) has changed", log)
    hidden = {c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(str(SOURCE), as_version=4).cells
              if "BEGIN HIDDEN TESTS" in c.source}
    print(f"[hub] autograde logged {len(warned)} 'checksum ... has changed' warning(s) for cells {sorted(set(warned))}")
    # nbgrader issue 1961: every submission warns for every cell with hidden tests, edited or not
    assert hidden and set(warned) == hidden | {tampered_cell}
    assert len(warned) == 3 * len(hidden) + 1
    # the guide's check names only the real change
    changed = _run_snippet("changed_cells", course, cfg, ASSIGNMENT).split("\n")
    assert [line.split() for line in changed if line.strip()] == [["student2", NOTEBOOK, tampered_cell, "changed"]]

    with t.step("nbgrader export"):
        _nbgrader(exe, ["export", "--to", "grades.csv"], course, cfg)
    scores = list(csv.DictReader(_run_snippet("scores", course, cfg).splitlines()))
    by_student = {r["student_id"]: r for r in scores}
    assert set(by_student) == set(ROSTER)
    assert by_student[ABSENT_STUDENT]["status"] == "missing" and by_student[ABSENT_STUDENT]["score"] == ""

    from course_lib.checks import load_set

    full = sum(q.points for q in load_set("ex01").QUESTIONS)
    with open(course / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == ASSIGNMENT}
    assert set(rows) == set(ROSTER)
    for student in ("student1", LMS_STUDENT):
        assert float(rows[student]["score"]) == pytest.approx(full)
        assert float(by_student[student]["score"]) == pytest.approx(full)
        assert float(rows[student]["max_score"]) == pytest.approx(full)
    assert float(rows["student2"]["score"]) == 0, "the edited locked cell was put back; nothing answered"
    assert float(rows[ABSENT_STUDENT]["score"]) == 0, "nbgrader export writes 0 for a missing submission"
    assert rows["student1"]["first_name"] == "Student1", "the roster's names reach the export"
