"""Helpers for browser tests: free ports, a throw-away JupyterLab server, headless Debian chromium.

    from browser_util import JupyterLab, launch_chromium, ARTIFACTS

    with JupyterLab(root_dir=tmp_path / "root", home=tmp_path / "home") as lab, \\
            sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page()
        page.goto(lab.url("lab/tree/00_start_here.ipynb"))

The server listens on 127.0.0.1 only, on a free port, with a random token; its configuration,
data, runtime and IPython folders live under ``home`` so nothing of the user's Jupyter set-up is
read or written. Stopping it asks the server to shut down (which stops its kernels), then
terminates its process group and any descendant still alive: no process is left behind.

Browsers: the system's chromium (Debian package ``chromium``) driven by Python playwright; the
tests never download a browser (no ``playwright install``).
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Screenshots and server logs of browser tests (git-ignored).
ARTIFACTS = REPO_ROOT / "artifacts"

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
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


class JupyterLab:
    """A JupyterLab server for one test, as a context manager (``start()``/``stop()`` also work)."""

    def __init__(self, root_dir: Path, home: Path, *, startup_timeout: float = 90.0,
                 extra_args: list[str] | None = None):
        self.root_dir = Path(root_dir)
        self.home = Path(home)
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.home / "jupyter-server.log"
        self._log = None
        self._known_children: dict[int, object] = {}

    # --- URLs -------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "lab") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path.lstrip('/')}{sep}token={self.token}"

    # --- life cycle -----------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
                         ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces")]:
            path = self.home / sub
            path.mkdir(parents=True, exist_ok=True)
            env[var] = str(path)
        # User settings of the isolated JupyterLab: no "get notified about Jupyter news?" toast over
        # the page (and no request for news); every cell of a notebook kept in the page, so that
        # tests can find outputs that are scrolled out of view.
        for plugin, setting in [("apputils-extension/notification", '{"fetchNews": "false"}'),
                                ("notebook-extension/tracker", '{"windowingMode": "none"}')]:
            path = self.home / "lab-settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(setting)
        # Kernels behave as under `make lab` (inline figures), not as the test process (Agg).
        env.pop("MPLBACKEND", None)
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        return env

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "jupyterlab",
            "--no-browser", "--ServerApp.open_browser=False",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", "--ServerApp.password=",
            f"--ServerApp.root_dir={self.root_dir}",
            "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.shutdown_no_activity_timeout=600",  # a safety net if a test run is killed
            "--MappingKernelManager.cull_idle_timeout=0",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        return cmd + self.extra_args

    def start(self) -> "JupyterLab":
        self.home.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), cwd=self.root_dir, env=self.env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {self.startup_timeout:.0f} s:\n{self.log_tail()}")

    def remember_children(self) -> None:
        """Record the server's current descendants (kernels) so stop() can reap them for sure."""
        if self.proc is not None:
            for p in _descendants(self.proc.pid):
                self._known_children[p.pid] = p

    def stop(self) -> None:
        """Shut the server and its kernels down; kill whatever is left. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for p in _descendants(proc.pid):
            self._known_children[p.pid] = p
        try:
            if proc.poll() is None:
                try:  # a clean shutdown stops the kernels too
                    req = urllib.request.Request(self.url("api/shutdown"), method="POST", data=b"")
                    urllib.request.urlopen(req, timeout=5).close()
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
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

    def __enter__(self) -> "JupyterLab":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
