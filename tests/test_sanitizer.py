"""The nbval sanitizer (tests/nbval_sanitize.cfg) masks run-to-run noise and no number the course computes.

* its rules are what nbval reads, and they mask progress bars, addresses, temporary paths, widget ids;
* they change no time, size or rate: a corrupted latency in a stored lesson fails nbval (lesson 04's
  "13.9 ms" turned into "999 s", run by nbval in a subprocess on a trimmed copy of the lesson);
* applied to the stored outputs of every compared cell of the deterministic lessons (01-04, 09), they
  leave every number as it is -- the check is shown to catch the blanket time rule this file once had.
"""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys

import nbformat
import pytest
from conftest import REPO_ROOT as ROOT

CFG = ROOT / "tests" / "nbval_sanitize.cfg"
#: Lessons whose compared cells compute everything from the catalogs: no output may be rewritten.
DETERMINISTIC = ("01_units", "02_data_per_token", "03_kv_cache", "04_bandwidth_bound_latency", "09_capstone")
#: A number as it appears in prose and tables: "13.9", "1,008", "2**30" counts as 2 and 30.
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
#: The rule tests/nbval_sanitize.cfg had until issue 12: every time value became <TIME>.
OLD_TIME_RULE = (r"(?<![\w.])\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)? ?(?:ns|us|µs|μs|ms|s|sec|secs|seconds|min)(?!\w)",
                 "<TIME>")


def rules() -> list[tuple[str, str]]:
    nbval_plugin = pytest.importorskip("nbval.plugin")
    return nbval_plugin.get_sanitize_patterns(CFG.read_text(encoding="utf-8"))


def sanitize(text: str, patterns=None) -> str:
    """What nbval does to an output before comparing it (``IPyNbCell.sanitize``)."""
    for regex, replace in rules() if patterns is None else patterns:
        text = re.sub(regex, replace, text)
    return text


def test_sanitizer_is_what_nbval_reads():
    text = CFG.read_text(encoding="utf-8")
    # every `regex:` line is read as a rule (a rule nbval skipped would be a silent no-op)
    assert len(rules()) == len(re.findall(r"^regex: ", text, flags=re.MULTILINE)) >= 5
    for regex, _ in rules():
        re.compile(regex)


@pytest.mark.parametrize("a, b", [
    ("100%|██████████| 10/10 [00:01<00:00, 12.34it/s]", "100%|██████████| 10/10 [00:03<00:00,  3.02it/s]"),
    (" 40%|████      | 4/10 [00:00<?, ?it/s]", " 40%|████      | 4/10 [00:02<00:03,  1.80s/it]"),
    ("<Model at 0x7f3a2c1b9d90>", "<Model at 0x55d0c0ffee00>"),
    ("saved to /tmp/tmpa1b2c3/trace.json", "saved to /tmp/pytest-of-x/9/trace.json"),
    ("model_id 8f14e45fceea167a5a36dedd4bea2543", "model_id 0cc175b9c0f1b6a831c399e269772661"),
])
def test_sanitizer_masks_noise(a, b):
    assert a != b and sanitize(a) == sanitize(b)


@pytest.mark.parametrize("a, b", [
    ("TPOT >= 13.9 ms", "TPOT >= 999 s"),
    ("took 1.23 s", "took 2.5 s"),
    ("12.3 ms per step", "9.87 ms per step"),
    ("133.2 µs", "133.3 µs"),
    ("2 min", "3 min"),
    ("14 GB", "15 GB"),
    ("1008 GB/s", "936 GB/s"),
    ("32 layers, 8 KV heads", "32 layers, 32 KV heads"),
    ("7.24B parameters", "6.74B parameters"),
    ("q1: correct", "q1: incorrect"),
    ("memory-bound", "compute-bound"),
    ("312 TFLOP/s", "989 TFLOP/s"),
    ("72.0 tokens/s", "144.0 tokens/s"),
    ("<Figure size 640x480 with 1 Axes>", "<Figure size 800x300 with 2 Axes>"),
])
def test_sanitizer_keeps_course_numbers(a, b):
    assert sanitize(a) != sanitize(b)


# --- the stored outputs of the deterministic lessons ---------------------------------------------------
def compared_texts(nb) -> list[tuple[int, str, str]]:
    """(code cell index, kind, text) of every output nbval compares *after sanitizing* (streams and the
    text MIME types; nbval leaves text/latex unsanitized), in cells not tagged ``nbval-ignore-output``."""
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        tags = cell.metadata.get("tags", [])
        if "nbval-ignore-output" in tags or "nbval-skip" in tags:
            continue
        for out in cell.outputs:
            if out.output_type == "stream":
                found.append((i, f"stream:{out.name}", out.text))
            elif out.output_type in ("display_data", "execute_result"):
                for mime, data in out.data.items():
                    if mime.startswith("text/") and mime != "text/latex" and isinstance(data, str):
                        found.append((i, mime, data))
    return found


def rewritten_numbers(nb, patterns=None) -> list[str]:
    """One line per compared output whose numbers the sanitizer changes."""
    problems = []
    for i, kind, text in compared_texts(nb):
        before, after = NUMBER.findall(text), NUMBER.findall(sanitize(text, patterns))
        if before != after:
            lost = sorted(set(before) - set(after)) or before
            problems.append(f"code cell {i} ({kind}): numbers {lost[:6]} rewritten")
    return problems


@pytest.mark.parametrize("stem", DETERMINISTIC)
def test_sanitizer_rewrites_no_number_of_a_deterministic_lesson(stem):
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    assert compared_texts(nb), f"{stem}: no compared output found"
    problems = rewritten_numbers(nb)
    assert not problems, f"tests/nbval_sanitize.cfg hides numbers of {stem}: " + "; ".join(problems)


def test_the_number_check_catches_a_time_rule():
    """The check above can fail: with the old blanket time rule, lesson 04's numbers are rewritten."""
    nb = nbformat.read(ROOT / "notebooks" / "04_bandwidth_bound_latency.ipynb", as_version=4)
    problems = rewritten_numbers(nb, rules() + [OLD_TIME_RULE])
    assert any("13.9" in p for p in problems), problems


# --- nbval fails on a corrupted number ------------------------------------------------------------------
def _trimmed_lesson04(corrupt: bool) -> nbformat.NotebookNode:
    """Lesson 04's code cells up to the first one that prints "13.9 ms" (its TPOT floor), that one's
    stored output turned into "999 s" when ``corrupt``."""
    nb = nbformat.read(ROOT / "notebooks" / "04_bandwidth_bound_latency.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    target = next(i for i, c in enumerate(code) if any("13.9 ms" in t for _, _, t in compared_texts(
        nbformat.v4.new_notebook(cells=[c]))))
    cells = copy.deepcopy(code[:target + 1])
    if corrupt:
        for out in cells[-1].outputs:
            if out.output_type == "stream":
                assert "13.9 ms" in out.text
                out.text = out.text.replace("13.9 ms", "999 s")
    trimmed = copy.deepcopy(nb)
    trimmed.cells = cells
    return trimmed


@pytest.mark.notebook
def test_nbval_fails_on_a_corrupted_number(tmp_path):
    """nbval with tests/nbval_sanitize.cfg fails a copy of lesson 04 whose "13.9 ms" reads "999 s",
    and passes the same trimmed copy left intact (so the failure is the corrupted number's)."""
    nbformat.write(_trimmed_lesson04(corrupt=False), tmp_path / "intact.ipynb")
    nbformat.write(_trimmed_lesson04(corrupt=True), tmp_path / "corrupted.ipynb")
    env = {**os.environ, "COURSE_FAST": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    # tests/conftest.py as a plugin: the course's kernel environment, as in `make test`
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "conftest",
         f"--rootdir={tmp_path}", "--nbval", "--nbval-current-env", "--nbval-sanitize-with", str(CFG),
         "intact.ipynb", "corrupted.ipynb"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout
    results = dict((m.group(2), m.group(1)) for m in re.finditer(
        r"^(PASSED|FAILED|ERROR) (\w+\.ipynb::Cell \d+)", out, flags=re.MULTILINE))
    cells = len(_trimmed_lesson04(corrupt=False).cells)
    last = f"Cell {cells - 1}"
    assert all(results.get(f"intact.ipynb::Cell {i}") == "PASSED" for i in range(cells)), (results, out[-3000:])
    assert all(results.get(f"corrupted.ipynb::Cell {i}") == "PASSED" for i in range(cells - 1)), results
    assert results.get(f"corrupted.ipynb::{last}") == "FAILED", (results, out[-3000:])
    assert proc.returncode == 1 and "999 s" in out, out[-3000:]
