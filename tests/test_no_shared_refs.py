"""The course must not read the project's reference folder (``shared/``) at run time.

``shared/`` holds the authors' reference material; it is not part of the course a learner gets.
Anything the library or a notebook needs is shipped in ``course_lib/data/``. This test fails when
a file in course_lib/, notebooks/, solutions/ or exercises/ mentions the folder: ``shared/``,
``../shared`` or a path join such as ``Path("..") / "shared"``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from repo import ROOT
SCANNED = ("course_lib", "notebooks", "solutions", "exercises")
SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}
BINARY_SUFFIXES = {".pyc", ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".so", ".npz", ".npy", ".pt", ".db"}

SHARED_REF = re.compile(
    r"\.\./shared\b"                     # ../shared
    r"|(?<![\w-])shared/"                 # shared/...
    r"""|/\s*['"]shared['"]"""            # Path(...) / "shared"
    r"""|\bjoin\(.*['"]shared['"]"""      # os.path.join(..., "shared", ...)
)


def scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        base = ROOT / top
        if not base.exists():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and not (SKIP_DIRS & set(path.relative_to(ROOT).parts)) \
                    and path.suffix.lower() not in BINARY_SUFFIXES:
                files.append(path)
    return files


def readable_text(path: Path) -> list[tuple[str, str]]:
    """(where, text) pieces of a file; for notebooks: sources and text outputs (not images)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    if path.suffix != ".ipynb":
        return [("", raw)]
    nb = json.loads(raw)
    pieces = []
    for i, cell in enumerate(nb.get("cells", [])):
        src = cell.get("source", "")
        pieces.append((f"cell {i} source", "".join(src) if isinstance(src, list) else src))
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items()
                                             if not k.startswith("image/") or k == "image/svg+xml"]
            for t in texts:
                pieces.append((f"cell {i} output", "".join(t) if isinstance(t, list) else str(t)))
    pieces.append(("metadata", json.dumps(nb.get("metadata", {}))))
    return pieces


def find_refs(text: str) -> list[tuple[int, str]]:
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        if SHARED_REF.search(line):
            hits.append((n, line.strip()[:120]))
    return hits


def test_scans_something():
    assert any(p.suffix == ".py" for p in scanned_files()), "course_lib/ should contain Python files"


@pytest.mark.parametrize("line", [
    'json.load(open("../shared/models.json"))',
    "data = Path('shared/hardware.csv')",
    'ROOT / "shared"',
    'os.path.join(root, "shared", "x.json")',
    "see ../shared for the source",
])
def test_detects_references(line):
    assert find_refs(line), line


@pytest.mark.parametrize("line", [
    "the KV cache is shared by all heads in a group",
    "shared_experts = 1",
    "n_shared_experts: 1",
    "weights are shared between embedding and lm_head",
])
def test_ignores_the_word_shared(line):
    assert not find_refs(line), line


def test_no_file_mentions_shared_folder():
    offenders = []
    for path in scanned_files():
        for where, text in readable_text(path):
            for n, line in find_refs(text):
                loc = f"{path.relative_to(ROOT)}" + (f" ({where})" if where else "") + f":{n}"
                offenders.append(f"{loc}: {line}")
    assert not offenders, (
        "the course must not read the reference folder shared/ at run time; ship data in "
        "course_lib/data/ instead:\n" + "\n".join(offenders)
    )
