"""The GPU session (course_lib.authoring.gpu_session) and the GPU engine benchmark, on the CPU.

The pieces run here in seconds: the stages' time limits and process-group kill, the commands each stage runs on the
GPU and in the dry run, the wheels' download command, adopting a returned run, the validate command's GPU options and
the GPU benchmark on a tiny model. The whole dry run (every stage, lessons 05-08 executed and recorded) is
``test_the_dry_run_end_to_end``, marked ``gpu`` for ``make tour``: one stage of each kind (about 2 minutes on 2 cores),
every stage with ``COURSE_GPU_DRY_RUN=full`` (about 5).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from course_lib.authoring import gpu_session as gs

REPO = Path(__file__).resolve().parents[1]
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"


# --- the stages' time limits ---------------------------------------------------------------------------------------
def test_a_stage_gets_its_cap_or_what_the_budget_leaves_less_the_packing_reserve():
    assert gs.stage_timeout(100, deadline=1000, now=0) == 100
    assert gs.stage_timeout(100, deadline=1000, now=950) == 50 - gs.PACK_RESERVE_S
    assert gs.stage_timeout(100, deadline=1000, now=1000) == 0          # never negative
    # the default budget, packing included, fits in one device call's 600 s with half a minute to spare
    assert gs.DEFAULT_BUDGET_S + 30 <= 600


def test_the_stages_run_the_wanted_work_first_and_each_has_a_cap():
    names = [s.name for s in gs.STAGES]
    assert names[:2] == ["machine", "install"]
    assert names[2:6] == [f"lesson{n}" for n in gs.LESSONS] == ["lesson05", "lesson06", "lesson07", "lesson08"]
    assert names.index("engine") < names.index("graphs") and len(set(names)) == len(names)
    assert all(0 < s.cap_s < gs.DEFAULT_BUDGET_S for s in gs.STAGES)
    assert [s.name for s in gs.STAGES if s.gpu_only] == ["graphs"]


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process: a killed one that nobody has reaped yet (a zombie, state Z: its parent was
    the killed stage, and the process it was handed to -- PID 1 of a container -- may reap late or never) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_stage_that_overruns_is_stopped_with_its_children_and_the_next_one_runs(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(c.pid)); print('started', flush=True); time.sleep(60)")
    t0 = time.monotonic()
    r = gs.run_stage("slow", [sys.executable, "-c", code], tmp_path / "slow.log", 2.0)
    assert r.status == "timed out" and r.returncode is None and time.monotonic() - t0 < 30
    child = int(pidfile.read_text())
    for _ in range(50):                           # the whole process group is gone, the grandchild too
        if not _running(child):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the stage's child process outlived the stage")
    assert "started" in (tmp_path / "slow.log").read_text()
    ok = gs.run_stage("quick", [sys.executable, "-c", "print('hello')"], tmp_path / "quick.log", 30)
    assert ok.status == "ok" and ok.returncode == 0 and "hello" in (tmp_path / "quick.log").read_text()
    noisy = gs.run_stage("v", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "v.log", 30, noisy_codes=(3,))
    failed = gs.run_stage("v", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "f.log", 30)
    assert (noisy.status, failed.status) == ("noisy", "failed") and failed.note == "exit status 3"


# --- what each stage runs ------------------------------------------------------------------------------------------
def _stage(name):
    return next(s for s in gs.STAGES if s.name == name)


def test_the_gpu_stages_measure_at_learner_sizes_on_cuda_and_the_dry_run_on_the_cpu_in_fast_mode(tmp_path):
    lesson, _ = gs.stage_command(_stage("lesson05"), False, tmp_path)
    assert "--full" in lesson and "--record" in lesson and str(tmp_path / "recordings") in map(str, lesson)
    assert Path(lesson[-1]).parent == tmp_path / "notebooks"          # a copy: the repository's notebook is not written
    dry, _ = gs.stage_command(_stage("lesson05"), True, tmp_path)
    assert "--full" not in dry and "--record" in dry
    engine, _ = gs.stage_command(_stage("engine"), False, tmp_path)
    assert engine[engine.index("--device") + 1] == "cuda" and engine[engine.index("--dtype") + 1] == "bf16"
    assert [engine[i + 1] for i, a in enumerate(engine) if a == "--cache"] == ["dynamic", "static"]
    graphs, _ = gs.stage_command(_stage("graphs"), False, tmp_path)
    assert [graphs[i + 1] for i, a in enumerate(graphs) if a == "--cache"] == ["graphs"]
    assert graphs[graphs.index("--config") + 1] == gs.GRAPHS_CONFIG == "llama-3-8b"
    dry_engine, _ = gs.stage_command(_stage("engine"), True, tmp_path)
    assert dry_engine[dry_engine.index("--device") + 1] == "cpu" and "--fast" in dry_engine
    validate, opts = gs.stage_command(_stage("validate"), False, tmp_path)
    assert validate[validate.index("--device") + 1] == "cuda" and opts == {"noisy_codes": (3,)}
    solution, _ = gs.stage_command(_stage("exercise08"), False, tmp_path)
    assert Path(solution[-1]).parent == tmp_path / "solutions" and Path(solution[-1]).name.startswith("08_")


def test_the_dry_run_hides_the_gpu_and_shrinks_the_sizes_and_every_stage_imports_this_checkout():
    dry = gs.session_env(True, {"PYTHONPATH": "/elsewhere", "COURSE_MEASUREMENTS": "replay:/x"})
    assert dry["COURSE_FAST"] == "1" and dry["CUDA_VISIBLE_DEVICES"] == ""
    assert dry["PYTHONPATH"].split(os.pathsep) == [str(gs.REPO_ROOT), "/elsewhere"]
    assert "COURSE_MEASUREMENTS" not in dry and dry["HF_HUB_OFFLINE"] == "1"
    gpu = gs.session_env(False, {"COURSE_FAST": "1"})
    assert "COURSE_FAST" not in gpu and "CUDA_VISIBLE_DEVICES" not in gpu


def test_the_gpu_install_checks_the_imports_and_falls_back_to_every_wheel_without_the_resolver(tmp_path):
    (tmp_path / "w").mkdir()
    for name in ("nbval-0.11.0-py2.py3-none-any.whl", "pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl"):
        (tmp_path / "w" / name).write_bytes(b"")
    plan = gs.install_plan(tmp_path / "w", dry_run=False, scratch=tmp_path / "s", site=tmp_path / "site")
    assert list(plan) == ["install", "check", "fallback", "course"]
    assert "--no-index" in plan["install"] and set(gs.REQUIREMENTS) <= set(plan["install"])
    assert plan["check"][-1] == "import " + ", ".join(gs.REQUIREMENTS)
    fallback = plan["fallback"]
    assert {"--no-deps", "--no-index"} <= set(fallback) and fallback[fallback.index("--target") + 1] == str(
        tmp_path / "site") and sum(a.endswith(".whl") for a in fallback) == 2
    assert plan["course"][-2:] == ["-e", str(gs.REPO_ROOT)] and "--no-deps" in plan["course"]
    dry = gs.install_plan(tmp_path / "w", dry_run=True, scratch=tmp_path / "s", site=tmp_path / "site")
    assert list(dry) == ["resolve"] and "--dry-run" in dry["resolve"] and "--ignore-installed" in dry["resolve"]
    assert dry["resolve"][dry["resolve"].index("--python-version") + 1] == gs.DEVICE_PYTHON


def test_the_wheels_are_fetched_for_the_devices_python_and_never_torch(tmp_path):
    cmd = gs.prepare_command(tmp_path, "3.12")
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--only-binary=:all:" in cmd
    assert set(gs.REQUIREMENTS) <= set(cmd) and {"nbclient", "nbval", "ipykernel", "ipywidgets"} <= set(cmd)
    assert not {"torch", "transformers"} & set(cmd)
    assert cmd[cmd.index("--constraint") + 1] == str(REPO / "constraints.txt")
    assert all(p.endswith("x86_64") for i, p in enumerate(cmd) if i and cmd[i - 1] == "--platform")


# --- a session's output and its adoption ---------------------------------------------------------------------------
def test_a_session_packs_a_summary_and_an_archive_even_when_nothing_could_run(tmp_path):
    summary = gs.run_session(tmp_path / "out", dry_run=True, stages=["graphs"], log=lambda *_: None)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [gs.ARCHIVE, "summary.json", "summary.txt"]
    assert summary["dry_run"] and [s["status"] for s in summary["stages"]] == ["skipped"]
    assert "needs a CUDA GPU" in (tmp_path / "out" / "summary.txt").read_text()
    with tarfile.open(tmp_path / "out" / gs.ARCHIVE) as tar:
        names = tar.getnames()
    assert "gpu_session/summary.json" in names and "gpu_session/notebooks/05_gemv_timing.ipynb" in names
    with pytest.raises(SystemExit, match="recorded nothing"):
        gs.adopt(tmp_path / "out", "scratch", dest=tmp_path / "rec", allow_dry_run=True, partial=True)
    with pytest.raises(SystemExit, match="unknown stage"):
        gs.run_session(tmp_path / "out2", dry_run=True, stages=["lesson99"])


def _fake_run(root: Path, *, dry_run: bool, lessons=gs.LESSONS) -> Path:
    run = root / "gpu_session"
    (run / "recordings").mkdir(parents=True)
    (run / "notebooks").mkdir()
    for n in lessons:
        shutil.copy2(RECORDINGS / "stored" / f"{n}.json", run / "recordings" / f"{n}.json")
    shutil.copy2(REPO / "notebooks" / "05_gemv_timing.ipynb", run / "notebooks" / "05_gemv_timing.ipynb")
    summary = {"schema": 1, "dry_run": dry_run, "budget_s": 510, "seconds": 400.0, "finished": "2026-12-05T00:00:00Z",
               "machine": {"device_name": "NVIDIA H200", "python": "3.12.3", "torch": "2.11.0", "cuda": "13.0",
                           "cpus": 16, "transformers": "5.17.0"},
               "stages": [{"name": "lesson05", "status": "ok", "seconds": 60.0, "returncode": 0, "limit_s": 110,
                           "log": "lesson05.log", "note": "", "command": []}],
               "recordings": [f"{n}.json" for n in lessons], "executed_notebooks": ["notebooks/05_gemv_timing.ipynb"],
               "last_lines": {}}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_adopting_a_run_writes_its_recordings_and_their_provenance(tmp_path):
    run = _fake_run(tmp_path / "returned", dry_run=False)
    target = gs.adopt(run, "h200", dest=tmp_path / "recordings", repo=tmp_path / "repo")
    assert sorted(p.name for p in target.iterdir()) == ["05.json", "06.json", "07.json", "08.json", "README.md"]
    readme = (target / "README.md").read_text()
    assert "NVIDIA H200" in readme and "2.11.0" in readme and "learner sizes" in readme
    assert not (tmp_path / "recordings" / "stored").exists() and not (tmp_path / "repo").exists()
    # --stored: also the recording nbval replays, and the executed notebooks over the repository's
    gs.adopt(run, "h200", dest=tmp_path / "recordings", repo=tmp_path / "repo", stored=True)
    assert (tmp_path / "recordings" / "stored" / "08.json").is_file()
    assert (tmp_path / "repo" / "notebooks" / "05_gemv_timing.ipynb").is_file()


def test_adopting_refuses_a_dry_run_a_missing_lesson_a_bad_name_and_a_file_that_is_no_recording(tmp_path):
    with pytest.raises(SystemExit, match="dry run"):
        gs.adopt(_fake_run(tmp_path / "a", dry_run=True), "x", dest=tmp_path / "r")
    with pytest.raises(SystemExit, match="lesson.* 08"):
        gs.adopt(_fake_run(tmp_path / "b", dry_run=False, lessons=("05", "06", "07")), "x", dest=tmp_path / "r")
    assert gs.adopt(_fake_run(tmp_path / "c", dry_run=False, lessons=("05",)), "x", dest=tmp_path / "r",
                    partial=True).joinpath("05.json").is_file()
    for bad in ("stored", "../up", ""):
        with pytest.raises(SystemExit, match="--name"):
            gs.adopt(tmp_path / "c" / "gpu_session", bad, dest=tmp_path / "r")
    run = _fake_run(tmp_path / "d", dry_run=False)
    (run / "recordings" / "06.json").write_text(json.dumps({"schema": 1, "results": {
        "06/x": [{"__dataclass__": "os:path", "fields": {}}]}}))
    with pytest.raises(Exception, match="course_lib"):       # only course classes are rebuilt from a recording
        gs.adopt(run, "x", dest=tmp_path / "r")
    with pytest.raises(SystemExit, match="no summary.json"):
        gs.adopt(tmp_path, "x", dest=tmp_path / "r")


# --- the validate command and the GPU benchmark ----------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--dtype", "bf16"], "belong to --engine hf"),
    (["--engine", "hf", "--json", "x.json"], "--json belongs"),
    (["--engine", "hf", "--device", "cuda", "--threads", "2"], "do not apply"),
])
def test_validate_refuses_gpu_options_where_they_do_not_apply(argv, message, capsys):
    pytest.importorskip("transformers")
    from course_lib.measure import validate
    assert validate.main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_gpu_benchmark_runs_on_the_cpu_as_a_dry_run(tmp_path):
    pytest.importorskip("transformers")
    from course_lib.measure.benchmarks import engine_gpu
    from course_lib.measure.calibrate import weight_matrices
    from course_lib.measure.engines import hf
    cfg = dict(model_type="llama", tie_word_embeddings=False, num_hidden_layers=2, hidden_size=64,
               num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, vocab_size=256,
               max_position_embeddings=512)
    rep = engine_gpu.run([cfg], device="cpu", caches=["static", "graphs"], prompts=(8, 16), new_tokens=3, repeats=1,
                         progress=False)
    assert [(p.cache, p.prompt) for p in rep.points] == [("static", 8), ("static", 16)]
    assert ("cache graphs", "CUDA graphs need a CUDA device; this run is on cpu") in rep.skipped
    assert {(o.m, o.k) for o in rep.operators} == set(weight_matrices(hf.spec_of(cfg)))
    assert all(o.predicted == pytest.approx(o.bytes / rep.ceilings["copy_bandwidth"]) for o in rep.operators)
    assert rep.hardware is None and all(p.datasheet_tpot is None for p in rep.points)   # a CPU: no datasheet floor
    assert all(p.predicted_tpot > 0 and p.tpot > 0 and math.isfinite(p.tpot_error) for p in rep.points)
    text = rep.report()
    assert engine_gpu.LAST_LINE_RE.match(text.splitlines()[-1]) and "static" in rep.table()
    assert json.loads(json.dumps(rep.as_dict()))["points"][0]["cache"] == "static"
    assert engine_gpu.catalog_hardware("NVIDIA H200") == "h200"
    assert engine_gpu.catalog_hardware("NVIDIA H100 80GB HBM3") is None       # SXM or PCIe: not guessed
    with pytest.raises(ValueError, match="cache"):
        engine_gpu.run([cfg], device="cpu", caches=["paged"], progress=False)


# --- the whole dry run (make tour) ----------------------------------------------------------------------------------
def _digest(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("0[5-8]_*.ipynb"))}


#: the stages the tour's dry run runs: one of each kind (the machine, the install, a lesson and an exercise set
#: recorded, the engine, the CUDA-graph stage's skip), about 2 minutes; COURSE_GPU_DRY_RUN=full runs all of them
#: (about 5 minutes on 2 cores: more than make tour's budget can spare beside the browser and classroom checks)
TOUR_STAGES = ("machine", "install", "lesson05", "engine", "graphs", "exercise05")


@pytest.mark.gpu
def test_the_dry_run_end_to_end(tmp_path):
    """The GPU session's stages on this CPU: the output a device call would return, and its adoption."""
    pytest.importorskip("transformers")
    full = os.environ.get("COURSE_GPU_DRY_RUN", "").strip().lower() == "full"
    stages = [s.name for s in gs.STAGES] if full else list(TOUR_STAGES)
    before = (_digest(REPO / "notebooks"), _digest(REPO / "solutions"))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "course_lib.authoring.gpu_session", "run", "--dry-run", "--out",
                           str(out), "--budget", "1500", "--stages", *stages], capture_output=True, text=True,
                          env=env, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (_digest(REPO / "notebooks"), _digest(REPO / "solutions")) == before    # only copies were executed
    # what a device call returns: at most 8 plain files, none over 16 MiB
    files = sorted(p.name for p in out.iterdir())
    assert files == [gs.ARCHIVE, "summary.json", "summary.txt"]
    assert all((out / f).stat().st_size < 16 * 2**20 for f in files)
    summary = json.loads((out / "summary.json").read_text())
    status = {s["name"]: s["status"] for s in summary["stages"]}
    assert list(status) == stages and status["graphs"] == "skipped" and status["install"] in ("ok", "skipped")
    others = [n for n in stages if n not in ("graphs", "install", "validate")]
    assert {n: status[n] for n in others} == {n: "ok" for n in others}
    assert status.get("validate", "ok") in ("ok", "noisy")       # noisy: the shared machine, not a failure
    lessons = [n[-2:] for n in stages if n.startswith("lesson")]
    exercises = [n[-2:] for n in stages if n.startswith("exercise")]
    assert summary["recordings"] == [f"{n}.json" for n in lessons] + [f"ex{n}.json" for n in exercises]
    assert len(summary["executed_notebooks"]) == len(lessons) + len(exercises)
    assert summary["last_lines"]["engine"].startswith("gpu_engine_tpot_max_abs_error=")
    assert "DRY RUN" in (out / "summary.txt").read_text()
    with tarfile.open(out / gs.ARCHIVE) as tar:
        tar.extractall(tmp_path / "unpacked")
    run = tmp_path / "unpacked" / "gpu_session"
    for name in ("machine.json", "engine.json", "summary.txt", "logs/lesson05.log", "logs/engine.log",
                 *(["logs/install_resolve.log"] if status["install"] == "ok" else [])):
        assert (run / name).is_file(), name
    engine = json.loads((run / "engine.json").read_text())
    assert engine["dtype"] == "bf16" and {p["cache"] for p in engine["points"]} == {"dynamic", "static"}
    assert {p["model"] for p in engine["points"]} == {"llama-3.2-1b-tiny", "llama-3-8b-tiny"}
    executed = json.loads((run / "notebooks" / "05_gemv_timing.ipynb").read_text())
    assert any(c.get("outputs") for c in executed["cells"] if c["cell_type"] == "code")
    # adopted: a dry run only when asked, into a scratch folder here
    with pytest.raises(SystemExit, match="dry run"):
        gs.adopt(out, "cpu-dry-run", dest=tmp_path / "recordings")
    target = gs.adopt(out, "cpu-dry-run", dest=tmp_path / "recordings", allow_dry_run=True, partial=not full)
    assert sorted(p.name for p in target.glob("*.json")) == sorted(summary["recordings"])
    assert "a dry run" in (target / "README.md").read_text()
