"""One GPU session, prepared here and run there in one go: lessons 05-08 recorded on the GPU, validate, the engine.

Lessons: none

Three commands (docs/GPU.md says when to use each)::

    python -m course_lib.authoring.gpu_session prepare            # here, with the network: wheels into build/gpu_wheels
    python -m course_lib.authoring.gpu_session run --out DIR      # there, on the GPU machine (no network)
    python -m course_lib.authoring.gpu_session run --out DIR --dry-run   # here: the same stages, CPU, tiny sizes
    python -m course_lib.authoring.gpu_session adopt DIR --name h200     # here: the returned run into the repository

**prepare** downloads the wheels of what the notebooks need to run and a GPU machine's image lacks (nbclient,
nbconvert, nbformat, ipykernel, jupyter_client, nbval, ipywidgets and their dependencies; never torch or
transformers: the machine's own are used) for that machine's Python (:data:`DEVICE_PYTHON`), at the versions of
``constraints.txt``, into the git-ignored ``build/gpu_wheels``, and checks that they and the working tree stay under
what a device call carries (:data:`CARRY_LIMIT_BYTES`).

**run** executes the stages of :data:`STAGES` in order, each in its own process group under its own time limit
(``min(its cap, what the session's --budget still leaves)``, less :data:`PACK_RESERVE_S` for packing): a stage that
fails or runs out of time is recorded and the next one starts. The stages: the machine (``nvidia-smi``, torch, CUDA,
transformers), the offline install of the carried wheels and of the course (``pip install --no-deps -e .``), lessons
05-08 executed at learner sizes with ``COURSE_MEASUREMENTS=record:...`` (on copies: the repository's notebooks are
never written), ``python -m course_lib.measure.validate``, the engine benchmark (``validate --engine hf --device
cuda``: bf16, SDPA, Llama-3.2-1B and a Llama-3-8B shape, dynamic and static cache), its CUDA-graph mode (the 8B
shape only: one compilation), and the exercise sets 05 and 08 (their recordings ``ex05``, ``ex08``). Everything
lands in a staging folder that is packed into ``DIR/gpu_session.tar.gz``, beside ``DIR/summary.txt`` and
``DIR/summary.json`` (a device call returns at most 8 files). ``--dry-run`` runs the same stages on the CPU with
``COURSE_FAST=1`` and tiny models, no CUDA device visible and nothing installed (the carried wheels are only
resolved, for the device's Python, when ``build/gpu_wheels`` exists).

**adopt** checks a returned run (its summary, every recording readable as one) and writes its recordings into
``tests/fixtures/recordings/NAME/`` with a README of where they come from; ``--stored`` also makes it the run nbval
replays: the recordings into ``tests/fixtures/recordings/stored/`` and the executed notebooks over ``notebooks/`` and
``solutions/``. A dry run's output is refused unless ``--allow-dry-run`` (the tests adopt one into a temporary
folder).

This module imports only the standard library at its top: on the GPU machine it runs before anything is installed.

Serves no lesson: an authoring tool.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["REPO_ROOT", "WHEELS", "DEVICE_PYTHON", "DEVICE_PLATFORMS", "REQUIREMENTS", "CARRY_LIMIT_BYTES",
           "WHEELS_LIMIT_BYTES", "LESSONS", "EXERCISES", "PACK_RESERVE_S", "DEFAULT_BUDGET_S", "ARCHIVE",
           "GRAPHS_CONFIG", "Stage", "StageResult", "STAGES", "stage_timeout", "run_stage", "stage_command",
           "install_plan", "session_env", "prepare_command", "prepare", "run_session", "summary_text", "adopt", "main"]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: where ``prepare`` puts the wheels (git-ignored: build/); name it in the device call's ``carry``
WHEELS = Path("build") / "gpu_wheels"
#: the GPU machine's Python (its image's python3) and the platforms its pip accepts
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
                    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: what executing and checking notebooks needs beyond the GPU image (torch, transformers, matplotlib, sympy, psutil
#: and tqdm are there)
REQUIREMENTS = ("nbclient", "nbconvert", "nbformat", "ipykernel", "jupyter_client", "nbval", "ipywidgets")
#: a device call carries the working tree and its carried paths up to 64 MiB in all
CARRY_LIMIT_BYTES = 64 * 2**20
#: the wheels' own share of it (the tree is about 8 MB)
WHEELS_LIMIT_BYTES = 40 * 2**20
#: the measurement lessons, and the exercise sets that record measurements
LESSONS = ("05", "06", "07", "08")
EXERCISES = ("05", "08")
#: seconds kept back from every stage's limit for packing the output
PACK_RESERVE_S = 20
#: the session's default budget: a device call's command may run 600 s; packing is inside it (PACK_RESERVE_S)
DEFAULT_BUDGET_S = 560
#: the archive that carries everything back (a device call returns at most 8 files, 16 MiB each)
ARCHIVE = "gpu_session.tar.gz"
#: the configuration the CUDA-graph stage compiles (one compilation of the model the lessons price: a minute or two)
GRAPHS_CONFIG = "llama-3-8b"
#: the summary's schema
SCHEMA = 1


def _notebook(folder: str, number: str) -> Path:
    found = sorted((REPO_ROOT / folder).glob(f"{number}_*.ipynb"))
    if len(found) != 1:
        raise SystemExit(f"error: expected one {folder}/{number}_*.ipynb, found {len(found)}")
    return found[0]


# --------------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stage:
    """One step of the session: a command, its cap in seconds on the GPU and in the dry run, and where it runs."""

    name: str
    cap_s: int
    dry_cap_s: int
    what: str
    gpu_only: bool = False


#: the stages, in the order they run (the most wanted first: a budget that runs out cuts the last ones)
STAGES = (
    Stage("machine", 60, 60, "nvidia-smi, python, torch, CUDA and transformers versions"),
    Stage("install", 120, 120, "the carried wheels (offline) and the course (pip install --no-deps -e .)"),
    *(Stage(f"lesson{n}", 150 if n == "08" else 110, 300, f"notebooks/{n}_*.ipynb at learner sizes, recorded")
      for n in LESSONS),
    Stage("engine", 150, 240, "validate --engine hf --device cuda: bf16 SDPA, dynamic and static cache"),
    Stage("validate", 120, 180, "python -m course_lib.measure.validate on the GPU (TinyLM)"),
    Stage("graphs", 150, 0, "validate --engine hf --device cuda --cache graphs --config llama-3-8b (CUDA graphs)",
          gpu_only=True),
    *(Stage(f"exercise{n}", 90, 240, f"solutions/{n}_*.ipynb, recorded (ex{n})") for n in EXERCISES),
)


@dataclass
class StageResult:
    """What a stage did: ``status`` is ok, failed, timed out, noisy or skipped."""

    name: str
    status: str
    seconds: float = 0.0
    returncode: int | None = None
    limit_s: float | None = None
    log: str = ""
    note: str = ""
    command: list = field(default_factory=list)


def stage_timeout(cap_s: float, deadline: float, now: float, reserve_s: float = PACK_RESERVE_S) -> float:
    """Seconds a stage may run: its cap, or what is left before ``deadline`` less ``reserve_s`` (never below 0)."""
    return max(0.0, min(float(cap_s), deadline - now - reserve_s))


def run_stage(name: str, argv: list, log: Path, timeout_s: float, *, env=None, cwd=None,
              ok_codes=(0,), noisy_codes=()) -> StageResult:
    """Run ``argv`` in its own process group with its output in ``log``; kill the group after ``timeout_s``."""
    t0 = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        out.write(f"$ {' '.join(map(str, argv))}\n")
        out.flush()
        try:
            proc = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=cwd, start_new_session=True)
        except OSError as e:
            return StageResult(name, "failed", 0.0, None, timeout_s, log.name, f"could not start: {e}", list(argv))
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return StageResult(name, "timed out", time.monotonic() - t0, None, timeout_s, log.name,
                               f"stopped after {timeout_s:.0f} s", list(map(str, argv)))
    took = time.monotonic() - t0
    status = "ok" if rc in ok_codes else "noisy" if rc in noisy_codes else "failed"
    return StageResult(name, status, took, rc, timeout_s, log.name, "" if status == "ok" else f"exit status {rc}",
                       list(map(str, argv)))


def _kill_group(proc) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# --------------------------------------------------------------------------------------------------
# prepare (here, with the network)
# --------------------------------------------------------------------------------------------------
def prepare_command(dest: Path, python: str = DEVICE_PYTHON) -> list[str]:
    """The ``pip download`` that fetches :data:`REQUIREMENTS` and their dependencies for the device's Python."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", "--dest", str(dest)]
    constraints = REPO_ROOT / "constraints.txt"
    if constraints.is_file():
        cmd += ["--constraint", str(constraints)]
    for plat in DEVICE_PLATFORMS:
        cmd += ["--platform", plat]
    return cmd + list(REQUIREMENTS)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _tree_bytes() -> int | None:
    """Bytes of the files git would send (tracked and untracked-not-ignored), None outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    total = 0
    for name in filter(None, out.split(b"\0")):
        p = REPO_ROOT / os.fsdecode(name)
        if p.is_file():
            total += p.stat().st_size
    return total


def prepare(dest: Path = WHEELS, python: str = DEVICE_PYTHON) -> int:
    dest = (REPO_ROOT / dest) if not Path(dest).is_absolute() else Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = prepare_command(dest, python)
    print("$ " + " ".join(cmd))
    if subprocess.run(cmd).returncode != 0:
        print("error: pip download failed (the network, or a version of constraints.txt without a wheel for "
              f"Python {python})", file=sys.stderr)
        return 1
    wheels = sorted(dest.glob("*.whl"))
    size, tree = _size(dest), _tree_bytes()
    print(f"{len(wheels)} wheels, {size / 2**20:.1f} MiB in {dest}")
    if tree is not None:
        print(f"working tree {tree / 2**20:.1f} MiB + wheels = {(tree + size) / 2**20:.1f} MiB of the "
              f"{CARRY_LIMIT_BYTES / 2**20:.0f} MiB a device call carries")
    if size > WHEELS_LIMIT_BYTES or (tree is not None and tree + size > CARRY_LIMIT_BYTES):
        print(f"error: too large to carry (wheels at most {WHEELS_LIMIT_BYTES / 2**20:.0f} MiB)", file=sys.stderr)
        return 1
    print(f"carry it: run(..., carry=['{WHEELS.as_posix()}'])")
    return 0


# --------------------------------------------------------------------------------------------------
# run (there; or here with --dry-run)
# --------------------------------------------------------------------------------------------------
def _machine_script() -> str:
    return r'''
import json, os, platform, subprocess, sys
info = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
        "cpus": os.cpu_count()}
try:
    import torch
    info.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(device_name=p.name, total_memory=p.total_memory, multiprocessors=p.multi_processor_count,
                    capability=f"{p.major}.{p.minor}", l2_cache_bytes=getattr(p, "L2_cache_size", None),
                    cudnn=torch.backends.cudnn.version())
except Exception as e:
    info["torch_error"] = repr(e)
for mod in ("transformers", "nbclient", "nbval", "ipykernel", "ipywidgets", "matplotlib", "sympy", "numpy"):
    try:
        info[mod] = __import__(mod).__version__
    except Exception as e:
        info[mod] = None
try:
    smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
except Exception as e:
    smi = f"nvidia-smi: {e}"
print(smi)
print(json.dumps(info, indent=1))
json.dump(info, open(sys.argv[1], "w"), indent=1)
'''


def install_plan(wheels: Path, *, dry_run: bool, scratch: Path, site: Path) -> dict[str, list[str]]:
    """The install stage's commands by role.

    Dry run: ``resolve`` (the carried wheels resolved on their own for the device's Python, nothing installed).
    GPU: ``install`` (pip's resolver, offline, keeping what the image has), ``check`` (every requirement imports),
    ``fallback`` (where the resolver or the check failed: every wheel with ``--no-deps`` into ``site``, which then
    leads ``PYTHONPATH``), ``course`` (``pip install --no-deps -e .``; the course is on ``PYTHONPATH`` anyway).
    """
    py = sys.executable
    if dry_run:
        plats = [a for p in DEVICE_PLATFORMS for a in ("--platform", p)]
        return {"resolve": [py, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                            "--find-links", str(wheels), "--only-binary=:all:", "--python-version", DEVICE_PYTHON,
                            "--implementation", "cp", *plats, "--target", str(scratch), *REQUIREMENTS]}
    return {"install": [py, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), *REQUIREMENTS],
            "check": [py, "-c", "import " + ", ".join(REQUIREMENTS)],
            "fallback": [py, "-m", "pip", "install", "--no-index", "--no-deps", "--upgrade", "--target", str(site),
                         *sorted(str(w) for w in Path(wheels).glob("*.whl"))],
            "course": [py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-e",
                       str(REPO_ROOT)]}


def _install(wheels: Path, dry_run: bool, logs: Path, timeout_s: float, env: dict, site: Path) -> StageResult:
    """The install stage; on the GPU ``env``'s PYTHONPATH gains ``site`` where the fallback was needed."""
    if not wheels.is_dir() or not any(wheels.glob("*.whl")):
        if dry_run:
            return StageResult("install", "skipped", note=f"no wheels in {wheels} (python -m "
                               f"course_lib.authoring.gpu_session prepare); the dry run installs nothing")
        return StageResult("install", "failed", note=f"no wheels in {wheels}: carry build/gpu_wheels")
    t0 = time.monotonic()

    def step(role, cmd):
        left = max(timeout_s - (time.monotonic() - t0), 1)
        return run_stage("install", cmd, logs / f"install_{role}.log", left, env=env, cwd=REPO_ROOT)

    with tempfile.TemporaryDirectory() as scratch:
        plan = install_plan(wheels, dry_run=dry_run, scratch=Path(scratch), site=site)
        if dry_run:
            r = step("resolve", plan["resolve"])
            note = (f"the carried wheels resolve for Python {DEVICE_PYTHON} on their own" if r.status == "ok"
                    else f"the carried wheels do not resolve for Python {DEVICE_PYTHON}: {r.log}")
            return StageResult("install", r.status, time.monotonic() - t0, r.returncode, timeout_s, r.log, note,
                               r.command)
    notes = []
    installed = step("install", plan["install"])
    check = step("check", plan["check"]) if installed.status == "ok" else installed
    if check.status != "ok":
        notes.append(f"pip's resolver or the imports failed ({check.log}): every wheel --no-deps into {site}")
        fell = step("fallback", plan["fallback"])
        if fell.status == "ok":
            env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        check = step("check_fallback", plan["check"])
    course = step("course", plan["course"])
    if course.status != "ok":
        notes.append(f"pip install -e . failed ({course.log}); the course is on PYTHONPATH")
    return StageResult("install", check.status, time.monotonic() - t0, check.returncode, timeout_s, check.log,
                       "; ".join(notes), plan["install"])


def stage_command(stage: Stage, dry_run: bool, stage_dir: Path) -> tuple[list, dict]:
    """(argv, extra options of run_stage) of a stage that is one command."""
    py = sys.executable
    rec = stage_dir / "recordings"
    if stage.name.startswith(("lesson", "exercise")):
        folder = "notebooks" if stage.name.startswith("lesson") else "solutions"
        copy = stage_dir / folder / _notebook(folder, stage.name[-2:]).name
        full = [] if dry_run else ["--full"]
        return [py, "-m", "course_lib.authoring.run_notebooks", *full, "--record", rec, copy], {}
    device = "cpu" if dry_run else "cuda"
    fast = ["--fast"] if dry_run else []
    if stage.name == "validate":
        return [py, "-m", "course_lib.measure.validate", "--device", device, "--no-progress", *fast], \
            {"noisy_codes": (3,)}
    if stage.name == "engine":
        return [py, "-m", "course_lib.measure.validate", "--engine", "hf", "--device", device, "--dtype", "bf16",
                "--cache", "dynamic", "--cache", "static", "--no-progress", "--json", stage_dir / "engine.json",
                *fast], {}
    if stage.name == "graphs":
        return [py, "-m", "course_lib.measure.validate", "--engine", "hf", "--device", device, "--dtype", "bf16",
                "--cache", "graphs", "--config", GRAPHS_CONFIG, "--no-progress", "--json",
                stage_dir / "engine_graphs.json", *fast], {}
    if stage.name == "machine":
        script = stage_dir / "machine.py"
        script.write_text(_machine_script())
        return [py, script, stage_dir / "machine.json"], {}
    raise ValueError(f"unknown stage {stage.name!r}")


def _copy_notebooks(stage_dir: Path) -> None:
    """The notebooks the stages execute, copied (run_notebooks writes them back in place: the copies, not ours)."""
    for folder, numbers in (("notebooks", LESSONS), ("solutions", EXERCISES)):
        (stage_dir / folder).mkdir(parents=True, exist_ok=True)
        for n in numbers:
            src = _notebook(folder, n)
            shutil.copy2(src, stage_dir / folder / src.name)


def session_env(dry_run: bool, base=None) -> dict:
    """The environment of every stage: the course importable from this checkout; in a dry run fast mode and no GPU."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                             if p and Path(p).resolve() != REPO_ROOT])
    env["PYTHONUNBUFFERED"] = "1"
    env["HF_HUB_OFFLINE"] = env["TRANSFORMERS_OFFLINE"] = "1"
    env.pop("COURSE_MEASUREMENTS", None)          # run_notebooks --record sets it for the kernels
    if dry_run:
        env["COURSE_FAST"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("COURSE_FAST", None)
    return env


def run_session(out: Path, *, dry_run: bool = False, budget_s: float = DEFAULT_BUDGET_S, wheels: Path = WHEELS,
                stages=None, log=print) -> dict:
    """Run the stages (all of :data:`STAGES`, or those named in ``stages``) and pack the output into ``out``."""
    t_start = time.monotonic()
    deadline = t_start + budget_s
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    wheels = (REPO_ROOT / wheels) if not Path(wheels).is_absolute() else Path(wheels)
    wanted = [s for s in STAGES if stages is None or s.name in stages]
    unknown = set(stages or ()) - {s.name for s in STAGES}
    if unknown:
        raise SystemExit(f"error: unknown stage(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(s.name for s in STAGES)}")
    work = Path(tempfile.mkdtemp(prefix="gpu_session_"))
    stage_dir = work / "gpu_session"
    logs = stage_dir / "logs"
    logs.mkdir(parents=True)
    _copy_notebooks(stage_dir)
    env = session_env(dry_run)
    results: list[StageResult] = []
    for stage in wanted:
        cap = stage.dry_cap_s if dry_run else stage.cap_s
        if stage.gpu_only and dry_run:
            results.append(StageResult(stage.name, "skipped", note="needs a CUDA GPU (dry run)"))
        elif (limit := stage_timeout(cap, deadline, time.monotonic())) < 10:
            results.append(StageResult(stage.name, "skipped", note=f"the session's budget of {budget_s:.0f} s "
                                                                   f"was spent"))
        elif stage.name == "install":
            results.append(_install(wheels, dry_run, logs, limit, env, work / "site"))
        else:
            argv, opts = stage_command(stage, dry_run, stage_dir)
            results.append(run_stage(stage.name, argv, logs / f"{stage.name}.log", limit, env=env, cwd=REPO_ROOT,
                                     **opts))
        r = results[-1]
        log(f"{r.name:<11} {r.status:<9} {r.seconds:6.1f} s  {r.note}")
    summary = _summary(results, dry_run, budget_s, time.monotonic() - t_start, stage_dir)
    (stage_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (stage_dir / "summary.txt").write_text(summary_text(summary))
    with tarfile.open(out / ARCHIVE, "w:gz") as tar:
        tar.add(stage_dir, arcname="gpu_session")
    shutil.copy2(stage_dir / "summary.json", out / "summary.json")
    shutil.copy2(stage_dir / "summary.txt", out / "summary.txt")
    shutil.rmtree(work, ignore_errors=True)
    size = (out / ARCHIVE).stat().st_size
    log(f"packed {out / ARCHIVE} ({size / 2**20:.1f} MiB) in {time.monotonic() - t_start:.0f} s of {budget_s:.0f}")
    return summary


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _summary(results, dry_run, budget_s, seconds, stage_dir: Path) -> dict:
    rec = stage_dir / "recordings"
    machine = {}
    if (stage_dir / "machine.json").is_file():
        machine = json.loads((stage_dir / "machine.json").read_text())
    executed = []
    for folder in ("notebooks", "solutions"):
        for nb in sorted((stage_dir / folder).glob("*.ipynb")):
            stage = ("lesson" if folder == "notebooks" else "exercise") + nb.name[:2]
            if any(r.name == stage and r.status == "ok" for r in results):
                executed.append(f"{folder}/{nb.name}")
    return {"schema": SCHEMA, "dry_run": dry_run, "budget_s": budget_s, "seconds": round(seconds, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine,
            "stages": [asdict(r) for r in results],
            "recordings": sorted(p.name for p in rec.glob("*.json")) if rec.is_dir() else [],
            "executed_notebooks": executed,
            "last_lines": {name: _last_line(logs) for name in ("validate", "engine", "graphs")
                           if (logs := stage_dir / "logs" / f"{name}.log").is_file()}}


def summary_text(summary: dict) -> str:
    """The summary as a reader wants it: the machine, one line per stage, the benchmarks' last lines."""
    m = summary.get("machine") or {}
    lines = [f"GPU session ({'DRY RUN on the CPU' if summary['dry_run'] else 'on the GPU'}), finished "
             f"{summary['finished']}, {summary['seconds']:.0f} s of a {summary['budget_s']:.0f} s budget",
             f"machine: {m.get('device_name') or 'no CUDA device'}; python {m.get('python')}, torch {m.get('torch')}, "
             f"CUDA {m.get('cuda')}, transformers {m.get('transformers')}", "",
             f"{'stage':<11} {'status':<9} {'seconds':>7}  {'limit':>5}  note"]
    for r in summary["stages"]:
        limit = "" if r["limit_s"] is None else f"{r['limit_s']:.0f}"
        lines.append(f"{r['name']:<11} {r['status']:<9} {r['seconds']:7.1f}  {limit:>5}  {r['note']}")
    lines += ["", "recordings: " + (", ".join(summary["recordings"]) or "none"),
              "executed notebooks: " + (", ".join(summary["executed_notebooks"]) or "none")]
    lines += [f"{k}: {v}" for k, v in summary["last_lines"].items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# adopt (here: the returned run into the repository)
# --------------------------------------------------------------------------------------------------
def _unpacked(source: Path, scratch: Path) -> Path:
    """The ``gpu_session`` folder of ``source``: an output folder (with the archive), the archive, or the folder."""
    source = Path(source)
    if source.is_dir() and (source / ARCHIVE).is_file():
        source = source / ARCHIVE
    if source.is_file():
        with tarfile.open(source) as tar:
            for member in tar.getmembers():
                if member.name.startswith(("/", "..")) or ".." in Path(member.name).parts or not (
                        member.isfile() or member.isdir()):
                    raise SystemExit(f"error: {source} holds an unsafe entry {member.name!r}")
            tar.extractall(scratch)
        source = scratch / "gpu_session"
    if not (source / "summary.json").is_file():
        raise SystemExit(f"error: {source} is not a GPU session's output (no summary.json)")
    return source


def adopt(source: Path, name: str, *, dest: Path | None = None, stored: bool = False,
          allow_dry_run: bool = False, partial: bool = False, repo: Path = REPO_ROOT) -> Path:
    """Write the recordings of a returned session into ``dest/NAME`` (default tests/fixtures/recordings); with
    ``stored`` also into ``stored/`` and the executed notebooks over the repository's. Returns the folder written."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name in ("stored", ".", ".."):
        raise SystemExit(f"error: --name must be a folder name of letters, digits, '-', '_' or '.' (not 'stored'), "
                         f"got {name!r}")
    dest = Path(dest) if dest is not None else repo / "tests" / "fixtures" / "recordings"
    with tempfile.TemporaryDirectory() as scratch:
        run = _unpacked(source, Path(scratch))
        summary = json.loads((run / "summary.json").read_text())
        if summary.get("schema") != SCHEMA:
            raise SystemExit(f"error: {run / 'summary.json'} is not of schema {SCHEMA}")
        if summary.get("dry_run") and not allow_dry_run:
            raise SystemExit("error: this is a dry run's output (CPU, tiny sizes): it is no GPU profile "
                             "(--allow-dry-run to adopt it anyway, e.g. into a scratch --dest)")
        recordings = sorted((run / "recordings").glob("*.json"))
        have = {p.stem for p in recordings}
        missing = [n for n in LESSONS if n not in have]
        if missing and not partial:
            raise SystemExit(f"error: no recording of lesson(s) {', '.join(missing)} (see its summary.txt); "
                             f"--partial adopts what there is")
        if not recordings:
            raise SystemExit("error: the run recorded nothing")
        from course_lib.measure import record
        for p in recordings:                 # every file must be a recording whose results all decode
            data = json.loads(p.read_text())
            if data.get("schema") != 1 or not isinstance(data.get("results"), dict):
                raise SystemExit(f"error: {p.name} is not a recording")
            for key, runs in data["results"].items():
                for value in runs:
                    record.decode(value)
        target = dest / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for p in recordings:
            shutil.copy2(p, target / p.name)
        (target / "README.md").write_text(_readme(name, summary))
        if stored:
            stored_dir = dest / "stored"
            stored_dir.mkdir(parents=True, exist_ok=True)
            for p in recordings:
                shutil.copy2(p, stored_dir / p.name)
            for folder in ("notebooks", "solutions"):
                for nb in summary.get("executed_notebooks", []):
                    if nb.startswith(folder + "/") and (run / nb).is_file():
                        (repo / folder).mkdir(parents=True, exist_ok=True)
                        shutil.copy2(run / nb, repo / nb)
    return target


def _readme(name: str, summary: dict) -> str:
    m = summary.get("machine") or {}
    rows = "\n".join(f"| {r['name']} | {r['status']} | {r['seconds']:.1f} | {r['note']} |" for r in summary["stages"])
    return f"""# {name}: lessons 05-08 recorded on {m.get('device_name') or 'the CPU (a dry run)'}

Each `NN.json` is a recording (`course_lib.measure.record`, `COURSE_MEASUREMENTS=record:DIR`) of one lesson
{'in fast mode (COURSE_FAST=1, a dry run on the CPU)' if summary.get('dry_run') else 'at learner sizes'}, made by
`python -m course_lib.authoring.gpu_session run` (finished {summary.get('finished')}) and adopted with
`python -m course_lib.authoring.gpu_session adopt ... --name {name}`. Nothing here was edited.

Machine: {m.get('device_name') or 'no CUDA device'}, {m.get('cpus')} CPUs; Python {m.get('python')}, torch
{m.get('torch')}, CUDA {m.get('cuda')}, cuDNN {m.get('cudnn')}, transformers {m.get('transformers')}.

| stage | status | seconds | note |
|---|---|---|---|
{rows}

Replay a lesson against it: `python -m course_lib.authoring.run_notebooks --replay tests/fixtures/recordings/{name}
notebooks/05_gemv_timing.ipynb` (writes the notebook), or `tests/replay.py`'s `executed_text(path, RECORDINGS /
"{name}")` in a test.
"""


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_lib.authoring.gpu_session",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="download the wheels the GPU machine lacks into build/gpu_wheels")
    p.add_argument("--dest", type=Path, default=WHEELS)
    p.add_argument("--python", default=DEVICE_PYTHON, help=f"the device's Python version (default {DEVICE_PYTHON})")
    r = sub.add_parser("run", help="run the stages and pack everything into --out")
    r.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None,
                   help="output folder (default: $OUT, the device call's)")
    r.add_argument("--dry-run", action="store_true",
                   help="on the CPU: fast mode, tiny models, no GPU, nothing installed")
    r.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                   help=f"seconds for the whole session, packing included (default {DEFAULT_BUDGET_S})")
    r.add_argument("--wheels", type=Path, default=WHEELS)
    r.add_argument("--stages", nargs="+", default=None, metavar="STAGE",
                   help="only these stages (of: " + ", ".join(s.name for s in STAGES) + ")")
    a = sub.add_parser("adopt", help="a returned run's recordings into tests/fixtures/recordings/NAME")
    a.add_argument("source", type=Path, help="the output folder, its gpu_session.tar.gz, or an unpacked gpu_session/")
    a.add_argument("--name", required=True, help="the recordings' folder name, e.g. h200")
    a.add_argument("--dest", type=Path, default=None, help="default tests/fixtures/recordings")
    a.add_argument("--stored", action="store_true",
                   help="also make it the run nbval replays: recordings into stored/, executed notebooks over ours")
    a.add_argument("--allow-dry-run", action="store_true")
    a.add_argument("--partial", action="store_true", help="adopt even when a lesson's recording is missing")
    args = ap.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.dest, args.python)
    if args.command == "run":
        if args.out is None:
            ap.error("run needs --out DIR (or $OUT)")
        if args.budget < 60:
            ap.error("--budget must be at least 60 seconds")
        summary = run_session(args.out, dry_run=args.dry_run, budget_s=args.budget, wheels=args.wheels,
                              stages=args.stages)
        print(summary_text(summary))
        failed = [s["name"] for s in summary["stages"] if s["status"] in ("failed", "timed out")]
        return 1 if failed else 0
    target = adopt(args.source, args.name, dest=args.dest, stored=args.stored, allow_dry_run=args.allow_dry_run,
                   partial=args.partial)
    print(f"recordings written to {target}" + (" and to stored/, notebooks replaced" if args.stored else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
