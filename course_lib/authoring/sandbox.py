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
* **an OS sandbox** (:func:`isolation_prefix`, mode :data:`SANDBOX`, the default): the kernel and every
  fresh interpreter run under bubblewrap (``bwrap``) as an unprivileged user (uid 65534, no capabilities)
  in their own mount, PID, IPC, UTS and network namespaces.  An unprivileged grader adds a user namespace
  (its uid is ``nobody`` inside); a grader running as root does not (a user namespace would map ``nobody``
  to root outside, whose ``/etc/shadow`` it could read): bubblewrap makes the mounts as root, then
  ``setpriv`` becomes the real ``nobody`` with no groups, capabilities or new privileges, and the grading
  folder is handed to that user (:func:`hand_over`).  They see a read-only view of the system
  folders (``/usr``, ``/etc``, ``/lib*``, ``/bin``, ``/sbin``) and of Python's prefixes, with the course's
  own package and source folder masked; a private ``/proc`` (only their own processes: not the grader,
  not other notebooks' kernels) and ``/dev``; and, read-write, only the notebook's grading folder (its
  key-less ``course_lib`` read-only), whose ``.tmp`` is also their ``/tmp`` (on disk, counted).
  No network, not even the host's 127.0.0.1
  (a local Jupyter server): the grader talks to the kernel over Unix sockets in the grading folder.
  Files are limited to :data:`MAX_FILE_SIZE` bytes each.  Processes: the sandbox joins a pids cgroup of its
  grading folder (``pids.max`` :data:`MAX_PROCESSES`) where the grader can make one (:func:`cgroup_base`);
  without, ``RLIMIT_NPROC`` holds it at :data:`MAX_PROCESSES` + :data:`NPROC_SLACK`, counted for that sandbox
  alone (a root grader then runs graded code as a uid of its own per grading process, :func:`sandbox_uid`;
  an unprivileged one's user namespace has its own count).  When bubblewrap is not usable the grader
  refuses (:class:`IsolationUnavailable`, with the reason) unless the caller opts into the
  :data:`INSECURE` mode (``--insecure``, ``COURSE_GRADE_ISOLATION=insecure``), where graded code runs as
  the grader's user and can read whatever that user can; each notebook graded so carries a warning;
* **a clean environment** (:func:`clean_env`): only the variables of :data:`KEEP_ENV` (``PATH``, the
  locale, thread counts, ``COURSE_FAST``), with ``HOME``, ``TMPDIR`` and ``IPYTHONDIR`` inside the grading
  folder and ``PYTHONPATH`` the key-less course: no grader secret reaches graded code;
* **output caps while the cell runs** (:class:`LimitedClient`, nbclient's ``process_message`` hook): output
  beyond ``max_cell_output`` bytes of one cell is dropped; once the notebook has *sent* ``max_output`` bytes
  the cell that keeps printing is interrupted and later output is dropped, so ``while True: print(...)``
  cannot grow the grader's memory.  A message's size counts everything it carries (display metadata,
  every MIME key); check records (the answer exports) are kept apart, up to :data:`MAX_RECORDS` of at
  most :data:`MAX_RECORD_BYTES` each and ``max_output`` bytes in all, so a flood before a grade cell does
  not drop its answer;
* **a memory, process and disk watch and an overall time budget** (:class:`Watch`, a thread polling psutil):
  the kernel and its descendants are killed when their summed RSS passes ``max_memory`` bytes (an
  address-space limit would break ``import torch``), when they hold :data:`MAX_PROCESSES` tasks or their
  cgroup refused a fork (``"processes"``), when the grading folder holds more than ``max_disk`` bytes
  (default :data:`MAX_DISK`) or :data:`MAX_FILES` entries (looked at every :data:`DISK_POLL_S` s:
  ``"disk"``), or when the budget plus :data:`BUDGET_GRACE_S` has passed (the per-cell timeouts
  are also cut to what is left of the budget, and no cell starts after it);
* **every child ended** (:func:`become_subreaper`, :func:`end_processes`): on Linux the grader process is a
  child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so processes the kernel started, even after ``setsid``
  and a double fork, are re-parented to it when the kernel exits and are killed after the kernel stops.
  Elsewhere (macOS, Windows) only the processes seen under the kernel while the watch polled (every
  :data:`POLL_S` s) are killed; a process that detaches between two polls escapes.

In the insecure mode there is no sandbox: graded code runs as the grader's user and can read and write
whatever that user can by absolute path (the answer key included).  Use it only for notebooks you trust.

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
    "SANDBOX", "INSECURE", "ISOLATION_ENV", "IsolationUnavailable", "resolve_isolation", "bwrap_status",
    "isolation_prefix", "sandboxed_kernel_manager", "KEEP_ENV", "MAX_RECORD_BYTES", "MAX_FILE_SIZE", "scrub",
    "message_size", "INSECURE_WARNING", "hand_over", "socket_dir", "settle", "MODEL_CACHE_DIR", "model_cache_files",
    "MAX_PROCESSES", "MAX_DISK", "MAX_FILES", "DISK_POLL_S", "NPROC_SLACK", "sandbox_uid", "PRIVATE_UID_BASE",
    "cgroup_base",
    "cgroup_of", "disk_use",
]

#: Bytes of output kept per cell (default of ``--max-cell-output``).
MAX_CELL_OUTPUT = 1 << 20
#: Bytes of output a notebook may send in all (default of ``--max-output``).
MAX_OUTPUT = 16 << 20
#: Bytes of resident memory the kernel and its children may use together (default of ``--max-memory``).
MAX_MEMORY = 4 << 30
#: Check records kept per notebook (more are dropped as output).
MAX_RECORDS = 2000
#: Bytes of one check record (an answer export); a larger one is dropped.
MAX_RECORD_BYTES = 256 << 10
#: Bytes of one file graded code writes (``RLIMIT_FSIZE`` in the sandbox).
MAX_FILE_SIZE = 4 << 30  # a lesson writes a model file (ex08: 262 MB in fast mode, GBs at full size)
#: Tasks (processes and threads) one sandbox may run at once: its cgroup's ``pids.max`` where the grader can
#: make one, and the watch's bound everywhere (past it, the sandbox is killed: ``"processes"``).
MAX_PROCESSES = 512
#: Tasks ``RLIMIT_NPROC`` allows beyond :data:`MAX_PROCESSES`: the kernel's bound sits above the watch's, so that a
#: fork bomb held at the kernel's is seen past the watch's (a cgroup reports its refusals; RLIMIT_NPROC does not).
NPROC_SLACK = MAX_PROCESSES
#: Bytes of disk the grading folder may hold (``/tmp`` inside the sandbox is in it); past it, killed: ``"disk"``.
MAX_DISK = 8 << 30
#: Files and folders the grading folder may hold.
MAX_FILES = 100_000
#: Seconds between two looks at the grading folder's disk use.
DISK_POLL_S = 0.5
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
#: The grader's environment variables graded code gets (every other one is dropped), and prefixes of such.
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COURSE_FAST", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "OPENBLAS_NUM_THREADS", "LC_")
#: Isolation modes: graded code in an OS sandbox (bubblewrap), or run as the grader's user (opt-in).
SANDBOX, INSECURE = "sandbox", "insecure"
#: Environment variable that chooses the isolation mode when the caller does not (``insecure`` to opt in).
ISOLATION_ENV = "COURSE_GRADE_ISOLATION"
#: The uid and gid graded code runs as inside the sandbox (``nobody``).
SANDBOX_UID = 65534
#: A root grader with no cgroup to hold a sandbox runs its graded code as uid and gid this plus the grader's
#: process id instead (an account-less user of its own, so that its ``RLIMIT_NPROC`` counts that sandbox only).
PRIVATE_UID_BASE = 1 << 30


class IsolationUnavailable(RuntimeError):
    """The sandbox cannot be started here and the insecure mode was not chosen."""


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
    """A fresh temporary directory for one notebook (removed afterwards, whatever graded code left), with
    its own cgroup of at most :data:`MAX_PROCESSES` tasks where one can be made (:func:`cgroup_of`)."""
    with tempfile.TemporaryDirectory(prefix="course-grade-", ignore_cleanup_errors=True) as tmp:
        path = Path(tmp)
        for sub in (".tmp", ".ipython"):
            (path / sub).mkdir()
        group = _make_cgroup(path)
        try:
            yield path
        finally:
            if group is not None:
                _remove_cgroup(group)


# ------------------------------------------------------------------------------------------------
# Processes and disk: a cgroup per grading folder where one can be made, RLIMIT_NPROC, and the watch
# ------------------------------------------------------------------------------------------------


def _cgroup_candidates() -> list[Path]:
    """Folders where a child pids cgroup of this process's own could be made (cgroup v1's pids hierarchy,
    cgroup v2 with the pids controller enabled below this process's group)."""
    out = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if "pids" in controllers.split(","):
            out.append(Path("/sys/fs/cgroup/pids") / rel)
        elif controllers == "":
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                base = root / rel
                try:
                    if "pids" in (base / "cgroup.subtree_control").read_text().split():
                        out.append(base)
                except OSError:
                    pass
    return out


def _join_cgroup_prefix(group: Path) -> list[str]:
    """A command prefix that moves itself into ``group`` and then runs the command (its children follow)."""
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs")]


@functools.lru_cache(maxsize=1)
def cgroup_base() -> Path | None:
    """The folder where this grader makes one pids cgroup per grading folder, or None (not Linux, no pids
    controller, no right to make one: the grader is not root and has no delegated cgroup).  Tried once."""
    if not sys.platform.startswith("linux"):
        return None
    for base in _cgroup_candidates():
        probe = base / f"course-grade-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            (probe / "pids.max").write_text("8\n")
            done = subprocess.run(_join_cgroup_prefix(probe) + ["/bin/true"], capture_output=True, timeout=10)
            if done.returncode == 0:
                return base
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            _remove_cgroup(probe)
    return None


def cgroup_of(work: Path) -> Path | None:
    """The pids cgroup of grading folder ``work`` (made by :func:`workdir`), or None where there is none."""
    base = cgroup_base()
    if base is None:
        return None
    import hashlib

    group = base / ("course-grade-" + hashlib.sha256(str(work).encode()).hexdigest()[:16])
    return group if group.is_dir() else None


def _make_cgroup(work: Path) -> Path | None:
    base = cgroup_base()
    if base is None:
        return None
    import hashlib

    group = base / ("course-grade-" + hashlib.sha256(str(work).encode()).hexdigest()[:16])
    try:
        group.mkdir()
        (group / "pids.max").write_text(f"{MAX_PROCESSES}\n")
    except OSError:
        _remove_cgroup(group)
        return None
    return group


def _remove_cgroup(group: Path, timeout: float = 5.0) -> None:
    """Kill what is left in ``group`` and remove it."""
    end = time.monotonic() + timeout
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > end:
                return
        for pid in _cgroup_pids(group):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.05)


def _cgroup_pids(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _cgroup_refused(group: Path) -> bool:
    """Whether ``group`` refused a new task (its ``pids.events`` counts forks past ``pids.max``)."""
    try:
        for line in (group / "pids.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and int(value) > 0:
                return True
    except (OSError, ValueError):
        pass
    return False


def disk_use(folder: Path, max_files: int | None = None) -> tuple[int, int]:
    """``(bytes of disk, entries)`` under ``folder`` (allocated blocks: a sparse file counts what it holds);
    stops counting once past ``max_files`` entries, so one look costs at most that many ``stat`` calls."""
    used = files = 0
    todo = [str(folder)]
    while todo:
        try:
            it = os.scandir(todo.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                files += 1
                if max_files is not None and files > max_files:
                    return used, files
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                used += getattr(st, "st_blocks", 0) * 512 or st.st_size
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
    return used, files


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
    """The kernel's environment: of ``base`` (default: this process's), only the variables of
    :data:`KEEP_ENV`; ``HOME``, ``TMPDIR`` and ``IPYTHONDIR`` inside ``work``.

    ``keyless``: the folder of a key-less ``course_lib`` (:func:`write_keyless`), put on ``PYTHONPATH``
    (before an installed course_lib, whose question sets carry the key); without it the course root is put
    there only when ``course_lib`` is not importable otherwise (not installed)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k in KEEP_ENV or any(k.startswith(p) for p in KEEP_ENV if p.endswith("_"))}
    env.setdefault("PATH", os.defpath)
    tmp = str(work / ".tmp")
    env.update(TMPDIR=tmp, TEMP=tmp, TMP=tmp, IPYTHONDIR=str(work / ".ipython"), HOME=str(work / ".home"),
               MPLCONFIGDIR=str(work / ".home" / ".matplotlib"), PYTHONDONTWRITEBYTECODE="1")
    if keyless is not None:
        env["PYTHONPATH"] = str(keyless)
    elif not _course_lib_installed():
        env["PYTHONPATH"] = str(_course_root())
    return env


def scrub(text: str, base=None) -> str:
    """``text`` without the values of the grader's environment variables that graded code does not get
    (``base``, default this process's; values of 6 characters or more): what crosses into feedback."""
    base = os.environ if base is None else base
    text = str(text)
    for k, v in base.items():
        if len(v) >= 6 and not (k in KEEP_ENV or any(k.startswith(p) for p in KEEP_ENV if p.endswith("_"))) \
                and v in text:
            text = text.replace(v, "[hidden]")
    return text


# ------------------------------------------------------------------------------------------------
# The OS sandbox (bubblewrap)
# ------------------------------------------------------------------------------------------------


def _system_paths() -> list[str]:
    """Folders graded code sees read-only: the system's and Python's (prefixes, site folders)."""
    import site

    paths = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc"]
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()):
        paths += [p, os.path.realpath(p)]
    out: list[str] = []
    for p in paths:
        if p and os.path.isabs(p) and os.path.exists(p) and p not in out:
            out.append(p)
    return out


def _masked(paths: list[str]) -> list[str]:
    """Folders inside ``paths`` graded code must not see: the course's package (the key) and source."""
    import course_lib

    hide = {str(_course_root()), os.path.dirname(os.path.realpath(course_lib.__file__))}
    for entry in sys.path:  # an installed copy of the course elsewhere (site-packages/course_lib)
        candidate = os.path.join(entry or ".", "course_lib")
        if os.path.isabs(candidate) and os.path.isdir(candidate):
            hide.add(os.path.realpath(candidate))
    out = []
    for h in sorted(hide):
        if any(h == p or h.startswith(p.rstrip("/") + "/") for p in paths):
            out.append(h)
    return out


def isolation_prefix(work: Path, cwd: Path | None = None, bwrap: str | None = None, also=()) -> list[str]:
    """The ``bwrap`` command line (up to ``--``) that runs a command in the sandbox of grading folder
    ``work``, in ``cwd`` (default ``work``); see the module's docstring for what it sees.  ``also``: more
    folders it may write (the kernel's sockets, when the grading folder's path is too long for them)."""
    bwrap = bwrap or bwrap_status()[0] or "bwrap"
    work = Path(work)
    paths = _system_paths()
    root = _as_root()
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]
    if not root:  # an unprivileged grader: a user namespace, its uid mapped to nobody inside
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]
    # /tmp and /run first: the system's and Python's folders are mounted over them, so that a Python that lives
    # under /tmp (a virtual environment in a checkout there, as a CI clone may be) stays visible
    if (work / ".tmp").is_dir():  # /tmp is the grading folder's .tmp: on its disk, under the disk watch
        args += ["--bind", str(work / ".tmp"), "/tmp"]
    else:  # (a RAM tmpfs nothing counts: only for the start-up probe)
        args += ["--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--tmpfs", "/run"]
    bound: list[str] = []
    for p in paths:
        args += _parents(p, bound, made=("/tmp", "/run")) + ["--ro-bind", p, p]
        bound.append(p)
    args += ["--proc", "/proc", "--dev", "/dev"]
    for h in _masked(paths):
        args += ["--tmpfs", h]
    for folder in (work, *also):
        args += _parents(str(folder), bound, made=("/tmp", "/run")) + ["--bind", str(folder), str(folder)]
    if (work / KEYLESS_DIR).is_dir():
        args += ["--ro-bind", str(work / KEYLESS_DIR), str(work / KEYLESS_DIR)]
    if (work / MODEL_CACHE_DIR).is_dir():
        for f in model_cache_files():
            args += ["--ro-bind", str(f), str(work / MODEL_CACHE_DIR / f.name)]
    args += ["--chdir", str(cwd or work), "--setenv", "JPY_PARENT_PID", "1", "--setenv", "USER", "nobody",
             "--setenv", "LOGNAME", "nobody", "--"]
    group = cgroup_of(work)
    join = _join_cgroup_prefix(group) if group is not None else []
    return join + args + _drop_root() + _limits_prefix()


#: Folder, inside a grading folder, where graded code finds the grader's built model files (GGUFs, read-only;
#: ``COURSE_GGUF_CACHE`` points there) and writes those it builds (deleted with the folder).
MODEL_CACHE_DIR = ".gguf-cache"


def model_cache_files(limit: int = 64) -> list[Path]:
    """The grader's cached GGUF files (:func:`course_lib.measure.engines.llamacpp.cache_dir`, then
    ``~/.cache/course_lib/gguf``), shown read-only in the sandbox: a lesson that reads a built model (ex08)
    does not rebuild it per notebook, and cannot change it for the next one."""
    found: dict[str, Path] = {}
    try:
        from course_lib.measure.engines import llamacpp

        folders = [llamacpp.cache_dir(), Path.home() / ".cache" / "course_lib" / "gguf"]  # checkout's, user's
    except Exception:  # noqa: BLE001 - no cache: graded code builds its own
        return []
    for folder in folders:
        for f in sorted(folder.glob("*.gguf")) if folder.is_dir() else ():
            if f.is_file() and not f.is_symlink():
                found.setdefault(f.name, f)
    return list(found.values())[:limit]


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _parents(path: str, bound: list[str], made=()) -> list[str]:
    """``--dir`` arguments (mode 0755) for the folders above ``path`` that no bound folder provides, so that
    the unprivileged user reaches ``path`` (bubblewrap would copy a 0700 ``/root`` otherwise)."""
    out = []
    parts = Path(path).parts
    for i in range(2, len(parts)):
        a = str(Path(*parts[:i]))
        if a not in made and not any(a == b or a.startswith(b.rstrip("/") + "/") for b in bound):
            out += ["--perms", "0755", "--dir", a]
    return out


def sandbox_uid() -> int:
    """The uid (and gid) graded code runs as: :data:`SANDBOX_UID` (``nobody``), or, for a root grader that
    cannot make cgroups, :data:`PRIVATE_UID_BASE` plus this process's id: one user per grading process, so
    that a fork bomb's ``RLIMIT_NPROC`` takes no process slot from a classmate graded beside it (``-j``)."""
    if _as_root() and cgroup_base() is None:
        return PRIVATE_UID_BASE + os.getpid()
    return SANDBOX_UID


def _drop_root() -> list[str]:
    """For a grader that runs as root: the command that becomes ``nobody`` (uid and gid :data:`SANDBOX_UID`, no
    groups, no capabilities, no new privileges) inside the sandbox, after bubblewrap made its mounts.  A user
    namespace would map the sandbox's user to root outside, whose files (``/etc/shadow``) it could then read."""
    import shutil

    if not _as_root():
        return []
    setpriv = shutil.which("setpriv") or "setpriv"
    uid = sandbox_uid()
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs"]


def hand_over(path: Path) -> None:
    """Make ``path`` (a grading folder, or a folder or file inside it) and what it holds the sandbox user's,
    when the grader runs as root (graded code then runs as ``nobody`` and writes only there)."""
    if not _as_root():
        return
    path, uid = Path(path), sandbox_uid()
    todo = [path]
    if path.is_dir():
        todo += list(path.rglob("*"))
    for p in todo:
        try:
            os.chown(p, uid, uid, follow_symlinks=False)
        except OSError:
            pass


def _nproc_limit() -> int | None:
    """``RLIMIT_NPROC`` of graded code (:data:`MAX_PROCESSES` plus :data:`NPROC_SLACK`, or None). An unprivileged
    grader's sandbox is a user namespace of its own, where Linux 5.14+ counts the sandbox's tasks apart; older
    kernels would count all of the grader user's processes, so none is set there (the watch bounds them). As
    root with cgroups, each sandbox's cgroup holds it (``nobody``'s count is shared by concurrent sandboxes:
    none is set); as root without, graded code runs as a user of its own (:func:`sandbox_uid`), whose count is
    that sandbox's."""
    if _as_root():  # a cgroup per sandbox, nobody's count shared: none; a user per grading process: its own
        return None if cgroup_base() is not None else MAX_PROCESSES + NPROC_SLACK
    release = tuple(int(x) for x in __import__("re").findall(r"\d+", os.uname().release)[:2])
    return MAX_PROCESSES + NPROC_SLACK if release >= (5, 14) else None


def _limits_prefix() -> list[str]:
    import shutil

    prlimit = shutil.which("prlimit")
    if not prlimit:
        return []
    nproc = _nproc_limit()
    return [prlimit, f"--fsize={MAX_FILE_SIZE}", "--core=0"] + ([f"--nproc={nproc}"] if nproc else [])


@functools.lru_cache(maxsize=1)
def bwrap_status() -> tuple[str | None, str]:
    """``(path of bwrap, "")`` when a sandbox starts here (tried once: Python runs in it), else
    ``(None, why not)``."""
    import shutil

    if not sys.platform.startswith("linux"):
        return None, f"bubblewrap runs on Linux only (this is {sys.platform})"
    path = shutil.which("bwrap")
    if path is None:
        return None, "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    with tempfile.TemporaryDirectory(prefix="course-grade-probe-") as tmp:
        hand_over(Path(tmp))
        try:
            done = subprocess.run(isolation_prefix(Path(tmp), bwrap=path) + [sys.executable, "-c", "print(6 * 7)"],
                                  capture_output=True, timeout=60, env={"PATH": os.defpath})
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"bwrap could not be started: {type(exc).__name__}: {exc}"
    if done.returncode != 0 or done.stdout.strip() != b"42":
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, (f"bwrap cannot start a sandbox here ({why[-1] if why else f'exit status {done.returncode}'}; "
                      "unprivileged user namespaces may be disabled: sysctl kernel.unprivileged_userns_clone=1, "
                      "or AppArmor's kernel.apparmor_restrict_unprivileged_userns=0)")
    return path, ""


def resolve_isolation(mode: str | None = None) -> str:
    """The isolation mode to grade with: ``mode``, else ``$COURSE_GRADE_ISOLATION``, else
    :data:`SANDBOX`.  Raises :class:`IsolationUnavailable` when the sandbox is asked for and cannot start."""
    mode = mode or os.environ.get(ISOLATION_ENV) or SANDBOX
    if mode not in (SANDBOX, INSECURE):
        raise ValueError(f"isolation must be {SANDBOX!r} or {INSECURE!r}, got {mode!r}")
    if mode == SANDBOX:
        path, why = bwrap_status()
        if path is None:
            raise IsolationUnavailable(
                f"cannot grade in a sandbox: {why}. Graded code would run as the grader's user and could read "
                f"the answer key, the gradebook and other submissions. Install bubblewrap, or choose the insecure "
                f"mode ({ISOLATION_ENV}=insecure, --insecure, CourseAutograde.insecure=True) for notebooks you trust.")
    return mode


#: The warning every notebook graded in the insecure mode carries.
INSECURE_WARNING = ("graded in the INSECURE mode (no sandbox): its code ran as the grader's user and could read the "
                    "answer key, the gradebook and other submissions")


#: Longest path of a Unix socket (``sun_path`` holds 108 bytes with its NUL), less room for ``-65535``.
MAX_SOCKET_DIR = 90


def socket_dir(work: Path) -> Path:
    """Where the kernel's Unix sockets go: ``work/.ipc``, or a fresh short folder in ``/tmp`` when that path
    is too long for a socket (a deep ``TMPDIR``); the caller removes the latter."""
    ipc = Path(work) / ".ipc"
    if len(str(ipc / "k")) > MAX_SOCKET_DIR:
        ipc = Path(tempfile.mkdtemp(prefix="cg-", dir="/tmp" if os.path.isdir("/tmp") else None))
    ipc.mkdir(exist_ok=True)
    return ipc


def sandboxed_kernel_manager(base, work: Path, ipc: Path | None = None):
    """A subclass of kernel manager class ``base`` whose kernel runs in the sandbox of ``work``, talks
    over Unix sockets in ``ipc`` (default ``work/.ipc``; see :func:`socket_dir`) and is interrupted by a
    message (signals do not cross into it)."""
    ipc = Path(ipc) if ipc is not None else socket_dir(work)
    also = () if ipc.is_relative_to(work) else (ipc,)

    class SandboxedKernelManager(base):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.transport, self.ip = "ipc", str(ipc / "k")
            self.connection_file = str(ipc / "kernel.json")

        def write_connection_file(self, **kw):
            out = super().write_connection_file(**kw)
            hand_over(ipc)  # the kernel, as the sandbox user, reads it and makes its sockets there
            return out

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            self.kernel_spec.interrupt_mode = "message"
            return isolation_prefix(work, also=also) + cmd

    return SandboxedKernelManager


def message_size(content) -> int:
    """Bytes of one output message's content, everything it carries counted (text, every MIME key's data,
    display metadata, traceback); a content too deep to measure counts as :data:`MAX_OUTPUT` bytes."""
    try:
        return len(json.dumps(content, default=str)) + 64
    except (ValueError, TypeError, RecursionError):
        return MAX_OUTPUT


_size = message_size


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
        self.record_bytes = 0
        self.over: dict[int, int] = {}
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
            size = message_size(content)
            if self._is_record(content):  # the answer exports: a budget of their own, bounded too
                if self.records < MAX_RECORDS and size <= MAX_RECORD_BYTES \
                        and self.record_bytes + size <= self.max_output:
                    self.records += 1
                    self.record_bytes += size
                    return super().process_message(msg, cell, cell_index)
                self.capped.setdefault(cell_index, f"a check record beyond the limits ({MAX_RECORDS} records of "
                                                   f"{MAX_RECORD_BYTES} bytes) was dropped")
                return None
            self.total_bytes += size
            if self.total_bytes > self.max_output:
                # interrupt the cell that floods, not one that prints a line after the flood (an interrupt
                # that reaches an idle kernel can end it)
                self.over[cell_index] = self.over.get(cell_index, 0) + size
                if self.over[cell_index] > MESSAGE_SLACK:
                    self._interrupt(cell_index)
                self.capped[cell_index] = (f"the notebook sent more than {self.max_output} bytes of output; "
                                           + ("the cell was interrupted and " if cell_index in self.interrupted
                                              else "") + "later output dropped")
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

    def __init__(self, max_memory: int, deadline: float | None = None, work: Path | None = None,
                 max_processes: int | None = None, max_disk: int | None = None, max_files: int | None = None):
        self.max_memory, self.deadline, self.work = max_memory, deadline, work
        self.max_processes = MAX_PROCESSES if max_processes is None else max_processes
        self.max_disk = MAX_DISK if max_disk is None else max_disk
        self.max_files = MAX_FILES if max_files is None else max_files
        self.reason: str | None = None
        self.peak_rss = self.peak_tasks = self.peak_disk = 0
        self._disk_at = 0.0
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

    def _disk_over(self) -> bool:
        """Whether the grading folder holds more than ``max_disk`` bytes or ``max_files`` entries (looked at
        every :data:`DISK_POLL_S` s)."""
        if self.work is None or time.monotonic() < self._disk_at:
            return False
        self._disk_at = time.monotonic() + DISK_POLL_S
        used, files = disk_use(self.work, self.max_files)
        self.peak_disk = max(self.peak_disk, used)
        return used > self.max_disk or files > self.max_files

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            procs = self._tree()
            if not procs:
                continue
            rss, tasks = 0, len(procs)  # a process that ended since the listing still counts (a bomb's churn)
            for p in procs:
                try:
                    with p.oneshot():
                        rss += p.memory_info().rss
                        tasks += p.num_threads() - 1
                except psutil.Error:
                    pass
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_tasks = max(self.peak_tasks, tasks)
            group = cgroup_of(self.work) if self.work is not None else None
            if rss > self.max_memory:
                self.reason = "memory"
            elif tasks >= self.max_processes or (group is not None and _cgroup_refused(group)):
                self.reason = "processes"
            elif self._disk_over():
                self.reason = "disk"
            elif self.deadline is not None and time.monotonic() > self.deadline + BUDGET_GRACE_S:
                self.reason = "budget"
            if self.reason:
                _kill(procs)
                if group is not None:
                    for pid in _cgroup_pids(group):
                        try:
                            os.kill(pid, 9)
                        except OSError:
                            pass
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


def settle(seen: dict, timeout: float = 2.0) -> None:
    """Wait up to ``timeout`` s for the processes of ``seen`` (a watch's) to end on their own: a sandbox's
    processes die with its namespace when the kernel is stopped, and are not left running by the notebook."""
    procs = [p for p in seen.values() if _running(p)]
    if procs:
        psutil.wait_procs(procs, timeout=timeout)


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
               max_output: int = MAX_CELL_OUTPUT, work: Path | None = None,
               max_disk: int | None = None) -> tuple[int | None, str, str | None]:
    """Run ``python -c code`` with ``stdin`` in ``cwd`` and ``env``: ``(exit status or None, the last
    ``max_output`` characters of its stdout, why it was stopped: "timeout" | "memory" | "processes" | "disk" |
    None)``.  Its
    memory is watched like a kernel's (:class:`Watch`); it and every process it started are ended.
    ``work``: run it in the sandbox of that grading folder (:func:`isolation_prefix`), whose disk use is
    bounded by ``max_disk`` bytes (default :data:`MAX_DISK`)."""
    before = snapshot()
    prefix = isolation_prefix(work, cwd) if work is not None else []
    proc = subprocess.Popen(prefix + [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=str(cwd), env=env)
    watch = Watch(max_memory, deadline=time.monotonic() + timeout - BUDGET_GRACE_S, work=work, max_disk=max_disk)
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
    elif watch.reason in ("processes", "disk"):
        reason, rc = watch.reason, None
    end_processes(before, watch.seen)
    reader.join(timeout=5)
    return rc, b"".join(chunks)[-max_output:].decode("utf-8", "replace"), reason
