"""Isolation and limits for the grader: a learner's notebook runs alone, bounded, and leaves nothing running.

Lessons: none

What :func:`course_lib.authoring.grade.grade_notebook` gets from here:

* **a bare working folder** (:func:`workdir`): a fresh temporary directory that holds the notebook copy and
  nothing else (no links to the learner's files); the kernel's current directory, ``TMPDIR`` and
  ``IPYTHONDIR`` are inside it, so whatever graded code writes with relative paths or :mod:`tempfile` stays
  there and is deleted with it;
* **a course without its answer key** (:func:`write_keyless`): a copy of ``course_lib`` whose question sets
  are the key-less modules of the notebook's sets only, written into the grading folder and put first on
  ``PYTHONPATH``; :func:`run_python` starts the fresh interpreters that run a learner's function (same
  environment, watched like the kernel);
* **a clean environment** (:func:`clean_env`): the grader's own, without ``PYTHONPATH``, ``PYTHONSTARTUP``,
  ``PYTHONHOME``, ``PYTHONUSERBASE``, ``JPY_*`` or Jupyter path overrides; the course root is put on
  ``PYTHONPATH`` only when ``course_lib`` is not importable otherwise (not installed);
* **output caps while the cell runs** (:class:`LimitedClient`, nbclient's ``process_message`` hook): output
  beyond ``max_cell_output`` bytes of one cell is dropped; once the notebook has *sent* ``max_output`` bytes
  the cell that keeps printing is interrupted and later output is dropped (check records are kept, up to
  :data:`MAX_RECORDS`), so ``while True: print(...)`` cannot grow the grader's memory;
* **a memory watch and an overall time budget** (:class:`Watch`, a thread polling psutil): the kernel and
  its descendants are killed when their summed RSS passes ``max_memory`` bytes (an address-space limit would
  break ``import torch``) or when the budget plus :data:`BUDGET_GRACE_S` has passed (the per-cell timeouts
  are also cut to what is left of the budget, and no cell starts after it);
* **every child ended** (:func:`become_subreaper`, :func:`end_processes`): on Linux the grader process is a
  child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so processes the kernel started, even after ``setsid``
  and a double fork, are re-parented to it when the kernel exits and are killed after the kernel stops.
  Elsewhere (macOS, Windows) only the processes seen under the kernel while the watch polled (every
  :data:`POLL_S` s) are killed; a process that detaches between two polls escapes.

Not a sandbox: graded code runs as the grader's user and can read and write whatever that user can by
absolute path. Grade untrusted notebooks as a separate user or in a container.

Serves no lesson: an authoring tool.
"""
from __future__ import annotations

import asyncio
import ctypes
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.util import run_hook

__all__ = [
    "MAX_CELL_OUTPUT", "MAX_OUTPUT", "MAX_MEMORY", "MAX_RECORDS", "POLL_S", "BUDGET_GRACE_S",
    "become_subreaper", "kernel_arguments", "workdir", "clean_env", "LimitedClient", "Watch", "snapshot",
    "end_processes", "BudgetExceeded", "keyless_files", "write_keyless", "run_python", "KEYLESS_DIR", "public_names",
]

#: Bytes of output kept per cell (default of ``--max-cell-output``).
MAX_CELL_OUTPUT = 1 << 20
#: Bytes of output a notebook may send in all (default of ``--max-output``).
MAX_OUTPUT = 16 << 20
#: Bytes of resident memory the kernel and its children may use together (default of ``--max-memory``).
MAX_MEMORY = 4 << 30
#: Check records kept per notebook (more are dropped as output).
MAX_RECORDS = 2000
#: Bytes a single kernel message may have beyond ``max_cell_output`` (headers, metadata).
MESSAGE_SLACK = 64 << 10
#: Kernel output messages the grader's transport holds before it drops new ones.
RCVHWM = 64
#: Seconds between two looks at the kernel's memory and processes.
POLL_S = 0.1
#: Seconds past the time budget before the watch kills a kernel that did not stop on its own.
BUDGET_GRACE_S = 5.0

PR_SET_CHILD_SUBREAPER = 36
_DROP_ENV = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT",
             "IPYTHONDIR", "JUPYTER_PATH", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR")


class BudgetExceeded(Exception):
    """The notebook's time budget is spent: no further cell is started."""


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux 3.4+); False where unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@contextmanager
def workdir():
    """A fresh temporary directory for one notebook (removed afterwards, whatever graded code left)."""
    with tempfile.TemporaryDirectory(prefix="course-grade-", ignore_cleanup_errors=True) as tmp:
        path = Path(tmp)
        for sub in (".tmp", ".ipython"):
            (path / sub).mkdir()
        yield path


def _course_root() -> Path:
    import course_lib

    return Path(course_lib.__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def _course_lib_installed() -> bool:
    """Whether a fresh interpreter without ``PYTHONPATH``, in an empty folder, finds ``course_lib``."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    with tempfile.TemporaryDirectory() as empty:
        done = subprocess.run(
            [sys.executable, "-c",
             "import importlib.util, sys; sys.exit(importlib.util.find_spec('course_lib') is None)"],
            cwd=empty, env=env, capture_output=True, timeout=60)
    return done.returncode == 0


def clean_env(work: Path, base=None, keyless: Path | None = None) -> dict[str, str]:
    """The kernel's environment: ``base`` (default: this process's) without what points into other folders.

    ``keyless``: the folder of a key-less ``course_lib`` (:func:`write_keyless`), put first on
    ``PYTHONPATH`` (before an installed course_lib, whose question sets carry the key)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k not in _DROP_ENV and not k.startswith("JPY_")}
    tmp = str(work / ".tmp")
    env.update(TMPDIR=tmp, TEMP=tmp, TMP=tmp, IPYTHONDIR=str(work / ".ipython"))
    if keyless is not None:
        env["PYTHONPATH"] = str(keyless)
    elif not _course_lib_installed():
        env["PYTHONPATH"] = str(_course_root())
    return env


def _size(content: dict) -> int:
    """Bytes of one output message's payload (text, data values, traceback)."""
    if "text" in content:
        return len(str(content["text"]))
    n = 0
    for v in (content.get("data") or {}).values():
        n += len(v) if isinstance(v, str) else len(json.dumps(v, default=str))
    for v in content.get("traceback") or ():
        n += len(str(v))
    return n + 64


#: Bytes a kernel stream buffers before it sends them (ipykernel otherwise sends what 0.2 s of printing made).
STREAM_CHUNK = 256 << 10

# Run in the kernel before the notebook (IPKernelApp.exec_lines): a stream that has buffered more than
# STREAM_CHUNK bytes flushes at once, so a flood arrives as messages the grader can count (and the printing
# slows down to what the transport carries). ipykernel's OutStream._schedule_flush runs after every write
# (``write`` itself cannot be patched: IPython re-binds it per cell). Graded code can undo this; the
# transport limits of LimitedClient still bound the grader then, only the report of the flood is lost.
_KERNEL_SETUP = """
def _course_bounded_streams(chunk):
    import ipykernel.iostream
    schedule = ipykernel.iostream.OutStream._schedule_flush
    def bounded_schedule(self):
        try:
            size = sum(b.tell() for b in list(self._buffers.values()))
        except Exception:
            size = 0
        if size > chunk:
            self.flush()
        else:
            schedule(self)
    ipykernel.iostream.OutStream._schedule_flush = bounded_schedule
_course_bounded_streams(%d)
del _course_bounded_streams
"""


def kernel_arguments(chunk: int = STREAM_CHUNK) -> list[str]:
    """Extra kernel command-line arguments: the bounded streams of :data:`STREAM_CHUNK` bytes."""
    return ["--IPKernelApp.exec_lines=" + _KERNEL_SETUP % chunk]


class LimitedClient(NotebookClient):
    """nbclient with output capped in bytes while cells run, and the hooks of :class:`Watch`.

    ``is_record(content)`` says which display messages are check records (kept up to :data:`MAX_RECORDS`).
    After execution, :attr:`capped` maps a cell index to why its output was cut.
    """

    def __init__(self, nb, *, max_cell_output: int, max_output: int, is_record, watch: Watch | None = None, **kw):
        kw.setdefault("extra_arguments", kernel_arguments(min(STREAM_CHUNK, max_cell_output)))
        super().__init__(nb, **kw)
        self.max_cell_output, self.max_output = max_cell_output, max_output
        self._is_record, self.watch = is_record, watch
        self.cell_bytes: dict[int, int] = {}
        self.total_bytes = 0
        self.records = 0
        self.capped: dict[int, str] = {}
        self.interrupted: set[int] = set()
        self._tasks: list = []

    async def async_start_new_kernel_client(self):
        """nbclient's, with the iopub transport bounded: a message larger than ``max_cell_output`` (plus
        :data:`MESSAGE_SLACK`) is refused by zmq before it is buffered, and at most :data:`RCVHWM` messages
        wait in the grader (ipykernel sends what a cell printed in 0.2 s as one message: 80 MB in a flood)."""
        import zmq

        self.kc = self.km.client()
        self.kc.context.setsockopt(zmq.MAXMSGSIZE, self.max_cell_output + MESSAGE_SLACK)
        self.kc.context.setsockopt(zmq.RCVHWM, RCVHWM)
        try:
            await ensure_async(self.kc.start_channels())
            await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))
        except Exception:
            await self._async_cleanup_kernel()
            raise
        self.kc.allow_stdin = False
        await run_hook(self.on_notebook_start, notebook=self.nb)
        return self.kc

    async def async_start_new_kernel(self, **kwargs):
        await super().async_start_new_kernel(**kwargs)
        if self.watch is not None:
            process = getattr(getattr(self.km, "provisioner", None), "process", None)
            if process is not None:
                self.watch.attach(process.pid)

    def process_message(self, msg, cell, cell_index):
        msg_type = msg["msg_type"]
        if msg_type in ("stream", "display_data", "execute_result", "update_display_data", "error") \
                or msg_type.startswith("comm"):
            content = msg.get("content") or {}
            size = _size(content)
            self.total_bytes += size
            if self._is_record(content) and self.records < MAX_RECORDS:
                self.records += 1
                return super().process_message(msg, cell, cell_index)
            if self.total_bytes > self.max_output:
                self.capped[cell_index] = (f"the notebook sent more than {self.max_output} bytes of output; the "
                                           "cell was interrupted and later output dropped")
                self._interrupt(cell_index)
                return None
            used = self.cell_bytes.get(cell_index, 0) + size
            if used > self.max_cell_output:
                self.capped.setdefault(cell_index, f"output beyond {self.max_cell_output} bytes was dropped")
                return None
            self.cell_bytes[cell_index] = used
        return super().process_message(msg, cell, cell_index)

    def _interrupt(self, cell_index: int) -> None:
        if cell_index in self.interrupted or self.km is None:
            return
        self.interrupted.add(cell_index)
        try:
            result = self.km.interrupt_kernel()
            if asyncio.iscoroutine(result):
                self._tasks.append(asyncio.ensure_future(result))
        except Exception:  # the kernel is already gone: nothing to interrupt
            pass


def _key(p: psutil.Process):
    try:
        return (p.pid, p.create_time())
    except psutil.Error:
        return None


class Watch:
    """A thread that sums the RSS of the kernel and its descendants, kills them past ``max_memory`` bytes or
    past ``deadline`` (a :func:`time.monotonic` value, or None) plus :data:`BUDGET_GRACE_S`, and remembers
    every descendant it saw (for :func:`end_processes`).  ``reason`` is ``"memory"`` or ``"budget"`` once
    it has killed; ``peak_rss`` is the largest sum seen."""

    def __init__(self, max_memory: int, deadline: float | None = None):
        self.max_memory, self.deadline = max_memory, deadline
        self.reason: str | None = None
        self.peak_rss = 0
        self.seen: dict[tuple, psutil.Process] = {}
        self._pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="course-grade-watch", daemon=True)

    def attach(self, pid: int) -> None:
        self._pid = pid
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self._pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return []
        for p in procs:
            k = _key(p)
            if k is not None:
                self.seen.setdefault(k, p)
        return procs

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            procs = self._tree()
            if not procs:
                continue
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.max_memory:
                self.reason = "memory"
            elif self.deadline is not None and time.monotonic() > self.deadline + BUDGET_GRACE_S:
                self.reason = "budget"
            if self.reason:
                _kill(procs)
                return


def _kill(procs) -> int:
    alive = []
    for p in procs:
        try:
            p.kill()
            alive.append(p)
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(alive)


def end_processes(before: set, seen: dict | None = None) -> int:
    """Kill this process's descendants that were not in ``before`` (keys from :func:`snapshot`) and every
    still-running process of ``seen`` (the watch's); returns how many were running."""
    found = {}
    try:
        for p in psutil.Process().children(recursive=True):
            k = _key(p)
            if k is not None and k not in before:
                found[k] = p
    except psutil.Error:
        pass
    for k, p in (seen or {}).items():
        if k not in before and _key(p) == k:
            found.setdefault(k, p)
    running = [p for p in found.values() if _running(p)]
    _kill(list(found.values()))  # zombies too: waiting reaps them
    return len(running)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def snapshot() -> set:
    """Keys of this process's descendants now (left alone by :func:`end_processes`)."""
    try:
        return {k for k in map(_key, psutil.Process().children(recursive=True)) if k is not None}
    except psutil.Error:
        return set()


# ------------------------------------------------------------------------------------------------
# The course without its answer key, for the kernel and the fresh interpreters that grading starts
# ------------------------------------------------------------------------------------------------

#: The folder, inside a grading folder, that holds the key-less copy of ``course_lib`` (on ``PYTHONPATH``).
KEYLESS_DIR = ".course"
_SET_FILE_RE = __import__("re").compile(r"^(ex\d{2}|_demo)\.py$")


@functools.lru_cache(maxsize=1)
def _base_files() -> tuple[tuple[str, bytes], ...]:
    root = _course_root() / "course_lib"
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root.parent)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if path.parent == root / "checks" and _SET_FILE_RE.match(path.name):
            continue
        out.append((rel.as_posix(), path.read_bytes()))
    return tuple(out)


def public_names(name: str) -> set[str]:
    """Module attributes of question set ``name`` that the course's exercise and solution notebooks read
    (``q.CONVERSATION`` after ``from course_lib.checks import ex03 as q``), question ids left out."""
    import re

    root = _course_root()
    found: set[str] = set()
    for path in sorted((root / "exercises").glob("*.ipynb")) + sorted((root / "solutions").glob("*.ipynb")):
        try:
            cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        except (OSError, ValueError):
            continue
        text = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
        for alias in re.findall(rf"from course_lib\.checks import[^\n]*\b{re.escape(name)} as (\w+)", text):
            found |= {a for a in re.findall(rf"\b{re.escape(alias)}\.([A-Za-z_]\w*)", text)
                      if not re.fullmatch(r"q\d+", a)}
    return found


@functools.lru_cache(maxsize=64)
def _keyless_set(name: str) -> bytes | None:
    import importlib

    from course_lib.checks.question import keyless_module_source

    if not _SET_FILE_RE.match(name + ".py"):
        return None
    try:
        module = importlib.import_module(f"course_lib.checks.{name}")
    except ImportError:
        return None
    return keyless_module_source(module, public_names(name)).encode("utf-8")


def keyless_files(sets=()) -> list[tuple[str, bytes]]:
    """``(path relative to the folder above course_lib, content)`` of every file of ``course_lib``
    except the question sets (``checks/exNN.py``, ``checks/_demo.py``, the answer key), and the key-less
    module (:func:`course_lib.checks.question.keyless_module_source`) of each set in ``sets``; caches and
    compiled files left out.  Other sets are not there at all."""
    out = list(_base_files())
    for name in sets:
        data = _keyless_set(name)
        if data is not None:
            out.append((f"course_lib/checks/{name}.py", data))
    return out


def write_keyless(folder: Path, sets=()) -> Path:
    """Write the key-less ``course_lib`` (with the key-less modules of ``sets``) under ``folder``;
    returns ``folder`` (to put on ``PYTHONPATH``)."""
    folder = Path(folder)
    for rel, data in keyless_files(sets):
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder


def run_python(code: str, stdin: bytes, *, env: dict, cwd: Path, timeout: float, max_memory: int,
               max_output: int = MAX_CELL_OUTPUT) -> tuple[int | None, str, str | None]:
    """Run ``python -c code`` with ``stdin`` in ``cwd`` and ``env``: ``(exit status or None, the last
    ``max_output`` characters of its stdout, why it was stopped: "timeout" | "memory" | None)``.  Its
    memory is watched like a kernel's (:class:`Watch`); it and every process it started are ended."""
    before = snapshot()
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=str(cwd), env=env)
    watch = Watch(max_memory, deadline=time.monotonic() + timeout - BUDGET_GRACE_S)
    watch.attach(proc.pid)
    chunks: list[bytes] = []
    kept = [0]

    def read():
        for chunk in iter(lambda: proc.stdout.read(65536), b""):
            chunks.append(chunk)
            kept[0] += len(chunk)
            while kept[0] > max_output and len(chunks) > 1:
                kept[0] -= len(chunks.pop(0))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except OSError:
        pass
    reason = None
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        reason, rc = "timeout", None
        _kill([psutil.Process(proc.pid)] if psutil.pid_exists(proc.pid) else [])
        proc.wait()
    watch.stop()
    if watch.reason == "memory":
        reason, rc = "memory", None
    elif watch.reason == "budget":
        reason, rc = "timeout", None
    end_processes(before, watch.seen)
    reader.join(timeout=5)
    return rc, b"".join(chunks)[-max_output:].decode("utf-8", "replace"), reason
