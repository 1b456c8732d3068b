"""Helpers for browser tests: free ports, throw-away JupyterLab and Voila servers, headless chromium.

    from browser_util import JupyterLab, Voila, launch_chromium, ARTIFACTS

    with JupyterLab(root_dir=tmp_path / "root", home=tmp_path / "home") as lab, \\
            sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page()
        page.goto(lab.url("lab/tree/00_start_here.ipynb"))

    with Voila(root_dir=tmp_path / "app", home=tmp_path / "home", notebook="dashboard.ipynb") as app:
        page.goto(app.url())          # the notebook as a web app: outputs and widgets, no code

    cmd = make_lab_command("lab")     # what `make lab` runs: its environment and JupyterLab flags
    JupyterLab(root, home, extra_env=cmd.env, extra_args=cmd.lab_args(), quiet_news=False)

Both servers listen on 127.0.0.1 only, on a free port, with a random token; their configuration,
data, runtime and IPython folders live under ``home`` so nothing of the user's Jupyter set-up is
read or written. Stopping one asks the server to shut down (which stops its kernels), then
terminates its process group and any descendant still alive: no process is left behind, and
:meth:`JupyterLab.survivors` / :meth:`Voila.survivors` lets a test check that.

Browsers: the system's chromium (Debian package ``chromium``) driven by Python playwright; the
tests never download a browser (no ``playwright install``). The browser resolves no host name,
so a page can only reach the test's own server (given as 127.0.0.1): no test depends on the
network, and a page that wants something from the internet (Voila's template links a font from a
CDN) gets a quick "not found" instead.
"""
from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

from repo import ROOT as REPO_ROOT
#: Screenshots and server logs of browser tests (git-ignored).
ARTIFACTS = REPO_ROOT / "artifacts"

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # No name resolves: the servers are addressed as 127.0.0.1, nothing else is reachable.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def chromium_path() -> str | None:
    """The system chromium (Debian: /usr/bin/chromium), or None."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def launch_chromium(playwright, **kwargs):
    """Launch the system chromium headless through playwright (never a downloaded browser)."""
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium)")
    return playwright.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS), **kwargs)


def _descendants(pid: int) -> list:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with jupyter
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _process(pid: int):
    """psutil.Process(pid), or the pid itself when psutil cannot describe it."""
    try:
        import psutil

        return psutil.Process(pid)
    except Exception:  # ImportError, psutil.NoSuchProcess
        return pid


def _alive(process) -> bool:
    """True while a psutil process exists and is not a zombie (dead, only waiting to be reaped)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return False
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --- JupyterLab in a page ---------------------------------------------------------------------------
#: True once the notebook in JupyterLab's main area has a kernel that is idle (needs
#: ``--LabApp.expose_app_in_browser=True``, which :class:`JupyterLab` sets).
KERNEL_IDLE_JS = """() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return k && k.status === 'idle';
}"""


def wait_for_notebook_kernel(page) -> None:
    """Wait until the notebook panel is shown and its kernel is idle (the page's default timeout)."""
    page.locator(".jp-NotebookPanel").first.wait_for(state="visible")
    page.wait_for_function(KERNEL_IDLE_JS)


def run_all_cells(page) -> None:
    """Run ▸ Run All Cells, through the menu as a learner would."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()


def press_slider(slider, key: str, old) -> int:
    """Press ``key`` ("End", "Home", ...) on an ipywidgets slider and return the value it then shows.

    ``slider`` is the locator of the slider widget (its ``course-…`` class); waits until its readout
    no longer shows ``old``, as the learner would see it, before reading the new value.
    """
    from playwright.sync_api import expect

    handle = slider.locator(".noUi-handle").first
    handle.focus()
    handle.press(key)
    readout = slider.locator(".widget-readout").first
    expect(readout).not_to_have_text(str(old))
    return int(readout.inner_text().replace(",", "").strip())


# --- servers ---------------------------------------------------------------------------------------------
class _JupyterProcess:
    """What JupyterLab and Voila share: isolated folders, a free port, a token, a clean stop.

    Subclasses give :meth:`command`, the URL path that answers once the server is up
    (``ready_path``) and how to ask the server to shut down (:meth:`_request_shutdown`).
    """

    name = "server"
    ready_path = ""

    def __init__(self, root_dir: Path, home: Path, *, startup_timeout: float = 90.0,
                 extra_args: list[str] | None = None, extra_env: dict[str, str] | None = None):
        self.root_dir = Path(root_dir)
        self.home = Path(home)
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        #: Environment variables set for the server on top of the isolated folders (e.g. `make lab`'s).
        self.extra_env = dict(extra_env or {})
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.home / f"{self.name.lower()}-server.log"
        self._log = None
        self._known_children: dict[int, object] = {}
        #: Set by stop(): what still ran after the server was asked to shut down and given 15 s,
        #: before stop() killed it ([] when the server stopped itself and all its kernels).
        self.left_after_shutdown: list | None = None

    # --- URLs -------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path.lstrip('/')}{sep}token={self.token}"

    # --- life cycle -----------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")]:
            path = self.home / sub
            path.mkdir(parents=True, exist_ok=True)
            env[var] = str(path)
        # Kernels behave as under `make lab` / `make app` (inline figures), not as the test process (Agg).
        env.pop("MPLBACKEND", None)
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self):
        self.home.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), cwd=self.root_dir, env=self.env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise RuntimeError(f"{self.name} exited with code {code}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url(self.ready_path), timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer within {self.startup_timeout:.0f} s:\n{self.log_tail()}")

    def remember_children(self) -> None:
        """Record the server's current descendants (kernels) so stop() can reap them for sure."""
        if self.proc is not None:
            for p in _descendants(self.proc.pid):
                self._known_children[p.pid] = p

    @property
    def children_seen(self) -> list:
        """Every descendant (psutil.Process) recorded so far by remember_children() or stop()."""
        return list(self._known_children.values())

    def survivors(self) -> list:
        """Descendants seen during the server's life that still run (should be [] after stop())."""
        return [p for p in self._known_children.values() if _alive(p)]

    def _request_shutdown(self, proc: subprocess.Popen) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def stop(self) -> None:
        """Shut the server and its kernels down; kill whatever is left. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for p in _descendants(proc.pid):
            self._known_children[p.pid] = p
        try:
            if proc.poll() is None:
                self._request_shutdown(proc)  # a clean shutdown stops the kernels too
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
            self.left_after_shutdown = [p for p in self._known_children.values() if _alive(p)]
            if proc.poll() is None:
                self.left_after_shutdown.insert(0, _process(proc.pid))
            for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                if proc.poll() is not None:
                    break
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    pass
            # Kernels run in sessions of their own: reap any that survived.
            for child in list(self._known_children.values()):
                try:
                    if child.is_running():
                        child.kill()
                        child.wait(timeout=5)
                except Exception:  # psutil.NoSuchProcess and friends: already gone
                    pass
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class JupyterLab(_JupyterProcess):
    """A JupyterLab server for one test, as a context manager (``start()``/``stop()`` also work)."""

    name = "JupyterLab"
    ready_path = "api/status"

    def __init__(self, root_dir: Path, home: Path, *, startup_timeout: float = 90.0,
                 extra_args: list[str] | None = None, extra_env: dict[str, str] | None = None,
                 quiet_news: bool = True):
        super().__init__(root_dir, home, startup_timeout=startup_timeout, extra_args=extra_args,
                         extra_env=extra_env)
        self.log_path = self.home / "jupyter-server.log"
        #: True: the test silences JupyterLab's news (no "get notified about official Jupyter
        #: news?" toast, no news request). False: the lab's own configuration decides, as a test of
        #: `make lab`'s configuration needs.
        self.quiet_news = quiet_news

    def url(self, path: str = "lab") -> str:
        return super().url(path)

    def env(self) -> dict[str, str]:
        env = super().env()
        for var, sub in [("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces")]:
            path = self.home / sub
            path.mkdir(parents=True, exist_ok=True)
            env[var] = str(path)
        # User settings of the isolated JupyterLab: every cell of a notebook kept in the page, so that
        # tests can find outputs that are scrolled out of view; unless quiet_news is False, no "get
        # notified about Jupyter news?" toast over the page (and no request for news).
        settings = [("notebook-extension/tracker", '{"windowingMode": "none"}')]
        if self.quiet_news:
            settings.append(("apputils-extension/notification", '{"fetchNews": "false"}'))
        for plugin, setting in settings:
            path = self.home / "lab-settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(setting)
        return env

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "jupyterlab",
            "--no-browser", "--ServerApp.open_browser=False",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", "--ServerApp.password=",
            f"--ServerApp.root_dir={self.root_dir}",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.shutdown_no_activity_timeout=600",  # a safety net if a test run is killed
            "--MappingKernelManager.cull_idle_timeout=0",
        ]
        if self.quiet_news:
            cmd += ["--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        return cmd + self.extra_args

    def _request_shutdown(self, proc: subprocess.Popen) -> None:
        try:
            req = urllib.request.Request(self.url("api/shutdown"), method="POST", data=b"")
            urllib.request.urlopen(req, timeout=5).close()
        except (urllib.error.URLError, ConnectionError, OSError):
            pass


class Voila(_JupyterProcess):
    """A Voila server for one test: ``notebook`` (relative to ``root_dir``) as a web app.

    Voila runs in ``root_dir``, as ``make app`` runs it in app/, so the ``voila.json`` there
    (strip_sources, extensions, ...) applies to the test too. ``url()`` is the app's page; each
    visit starts a kernel that runs the notebook, and that kernel lives until the page is closed
    or the server stops. Voila needs no ``--allow-root``: unlike JupyterLab it never refuses root.
    Stopping sends SIGTERM, on which Voila stops its kernels and exits.
    """

    name = "Voila"
    # A static file: answers as soon as the server listens, without starting a kernel.
    ready_path = "voila/static/voila-style.js"

    def __init__(self, root_dir: Path, home: Path, notebook: str = "dashboard.ipynb", *,
                 startup_timeout: float = 90.0, extra_args: list[str] | None = None):
        super().__init__(root_dir, home, startup_timeout=startup_timeout, extra_args=extra_args)
        self.notebook = notebook
        if not (self.root_dir / notebook).is_file():
            raise FileNotFoundError(f"notebook {notebook!r} is not in {self.root_dir}")

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "voila", self.notebook,
            "--no-browser", "--Voila.ip=127.0.0.1", f"--Voila.port={self.port}", "--Voila.port_retries=0",
            f"--Voila.token={self.token}",
            # connection files of the kernels in the isolated runtime folder, not in /tmp
            f"--Voila.connection_dir_root={self.home / 'runtime'}",
        ] + self.extra_args

    def _request_shutdown(self, proc: subprocess.Popen) -> None:
        try:
            proc.send_signal(signal.SIGTERM)  # Voila: stop the loop, shut all kernels down, exit
        except ProcessLookupError:
            pass


def require_browser_tools(*, voila: bool = False) -> None:
    """chromium and playwright (and voila), or skip the test; under CI=true a missing tool fails it.

    Called before any server starts, so a skipped test costs nothing.
    """
    from conftest import require_tool

    require_tool("chromium", why="Debian package chromium; see .ci/run")
    require_tool("playwright", module=True, why="pip install playwright (Python package only)")
    if voila:
        require_tool("voila", module=True, why="the classroom extra: pip install -e '.[classroom]'")


def serve_copy(server_cls, source: Path, tmp_path: Path, log_name: str, *, subdir: str = "", **kwargs):
    """Start ``server_cls`` over a temporary copy of ``source``; stop it and keep its log afterwards.

    A generator for pytest fixtures (``yield from serve_copy(...)``): the repository's files are
    never served (a test run cannot modify them), and the server log lands in ``ARTIFACTS/log_name``
    whatever the test's outcome. With ``subdir`` (e.g. ``"notebooks"``) the copy lies in that
    folder of the served root, as in the repository (``make lab`` serves the repository's root).
    """
    root = tmp_path / "root"
    shutil.copytree(source, root / subdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    server = server_cls(root_dir=root, home=tmp_path / "jupyter-home", **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copyfile(server.log_path, ARTIFACTS / log_name)


# --- the command `make lab` runs -------------------------------------------------------------------
class LabCommand(NamedTuple):
    """The JupyterLab command of a Makefile target, as ``make -n`` prints it."""

    #: Environment variables the recipe sets for JupyterLab (``VAR=value`` before the program).
    env: dict
    #: Everything after ``jupyter lab``: flags and the notebook to open.
    args: list

    def lab_args(self) -> list[str]:
        """``args`` without the flags a test server sets itself (its own root folder, --allow-root)."""
        return [a for a in self.args if a != "--allow-root" and not a.startswith("--ServerApp.root_dir=")]


def make_lab_command(target: str = "lab") -> LabCommand:
    """What ``make <target>`` runs to start JupyterLab, read from ``make -n`` (nothing is run).

    So a test starts its lab exactly as ``make lab`` does (same environment, same flags) and
    follows the Makefile when it changes. Raises AssertionError unless the recipe has exactly one
    ``jupyter lab`` command.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-n", "-s", "--no-print-directory", target], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    found = []
    for line in out.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line)
        except ValueError:  # not a command we look for (e.g. part of a shell loop)
            continue
        n = 0
        while n < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[n]):
            n += 1
        if n + 1 < len(words) and Path(words[n]).name == "jupyter" and words[n + 1] == "lab":
            found.append(LabCommand(dict(w.split("=", 1) for w in words[:n]), words[n + 2:]))
    assert len(found) == 1, f"`make -n {target}` should run `jupyter lab` once; it prints:\n{out}"
    return found[0]
