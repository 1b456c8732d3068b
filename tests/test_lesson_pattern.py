"""The lesson pattern, enforced for every lesson ``notebooks/NN_*.ipynb`` with NN >= 01.

Lesson 01 sets the pattern; every later lesson follows it. A lesson has cells tagged

- ``objectives``: numbered objectives O1, O2, ... (what the learner will be able to do), an
  estimated time and the prerequisites;
- ``worked-example``: a fully worked problem (with at least one code cell that computes it),
  placed before the summary and the exercises;
- ``misconceptions``: at least two wrong ideas the topic invites, each stated and answered
  (one Markdown list item each);
- ``summary``: the key formulas rendered from ``course_lib`` (a code cell whose output is math)
  and at least two self-check questions whose answers stay hidden (``<details><summary>``);
- ``exercises``: a pointer to the lesson's exercise set ``exercises/NN_*.ipynb`` (and the
  learner's working copy ``work/NN_*.ipynb``).

Numbers with units in prose are produced by code: Markdown displayed from a code cell whose input
is hidden (``metadata.jupyter.source_hidden``). The only exception is quoted source material,
marked as such: a Markdown cell tagged ``source-quote`` (which must say where it quotes from), or a
blockquote whose first line starts with ``> Source:``. ``unit_number_findings`` is the lint; it
also reads the literal (non-computed) text of ``md(...)``/``Markdown(...)`` calls in code cells,
so a number typed into a template string is caught too. The fixtures at the end prove the lint
catches deliberately bad prose and leaves marked quotations and model names alone.

Deliberately not flagged: minutes and hours (a lesson's estimated time is about the learner, not
the subject), counts without a unit ("32 layers") and model names ("Mistral-7B", "Llama-3-8B").
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from repo import ROOT
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = ROOT / "solutions"

REQUIRED_TAGS = ("objectives", "worked-example", "misconceptions", "summary", "exercises")
SOURCE_QUOTE_TAG = "source-quote"
# functions whose string arguments become displayed prose
PROSE_CALLS = {"md", "md_text", "Markdown", "HTML", "details", "display_markdown", "display_html"}

_LESSON_NAME = re.compile(r"^(\d\d)_[A-Za-z0-9][\w-]*\.ipynb$")


def lesson_paths(folder: Path = NOTEBOOKS) -> list[Path]:
    """Lessons NN_*.ipynb with NN >= 01 (lesson 00 is the set-up notebook, not a lesson)."""
    out = []
    for p in sorted(folder.glob("*.ipynb")):
        m = _LESSON_NAME.match(p.name)
        if m and int(m.group(1)) >= 1:
            out.append(p)
    return out


# --------------------------------------------------------------------------------------------------
# The lint: numbers with units typed into prose
# --------------------------------------------------------------------------------------------------
_NUMBER = r"(?<![\w.])(?<!\w-)(?<!\w\.)(\d+(?:[.,]\d+)*(?:\.\d+)?)"
_GAP = r"(?:[ \t\u00a0\u202f\u2009~]|&nbsp;|\\,|\\ )?"
_PREFIX = r"(?:[kKMGTPE]i?)"
_UNIT = (
    r"("
    # bytes, bits and their rates: 14 GB, 128 KiB, 1008 GB/s, 900 Gbps, 16 Gbit
    rf"{_PREFIX}?B(?:/s|ps)?|{_PREFIX}?b(?:it)?s?(?:/s|ps)?"
    r"|(?:kilo|mega|giga|tera|peta|kibi|mebi|gibi|tebi|pebi)?(?:bytes?|bits?)(?:/s| per second)?"
    # FLOP and FLOP/s: 312 TFLOP/s, 2 FLOPs, 989 TFLOPS
    rf"|{_PREFIX}?FLOPS|{_PREFIX}?FLOPs?(?:/s)?|{_PREFIX}?flops?(?:/s)?"
    # time (minutes and hours deliberately left out)
    r"|ms|[µμu]s|ns|ps|s|secs?|seconds?|milli-?seconds?|micro-?seconds?|nano-?seconds?"
    # parameter counts and their words: 7B, 124M, 8K, 1.5T, 7 billion
    r"|[KkMBT]|thousand|million|billion|trillion"
    # throughput and frequency
    r"|tok(?:en)?s?/s|tokens? per second|[kMG]?Hz"
    r")"
)
UNIT_NUMBER = re.compile(_NUMBER + _GAP + _UNIT + r"(?![A-Za-z0-9_])")


def strip_source_blockquotes(text: str) -> str:
    """Drop every blockquote whose first line starts with ``> Source:`` (a marked quotation)."""
    out, in_quote = [], False
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(">"):
            body = stripped.lstrip("> \t")
            if not in_quote and body.lower().startswith("source:") and _starts_blockquote(out):
                in_quote = True
            if in_quote:
                continue
        else:
            in_quote = False
        out.append(line)
    return "\n".join(out)


def _starts_blockquote(previous_lines: list[str]) -> bool:
    """True when the next ``>`` line opens a new blockquote (not a continuation of one)."""
    return not previous_lines or not previous_lines[-1].lstrip().startswith(">")


def unit_number_findings(text: str) -> list[str]:
    """Each number-with-unit typed into ``text`` (outside ``> Source:`` blockquotes)."""
    return [m.group(0) for m in UNIT_NUMBER.finditer(strip_source_blockquotes(text))]


def _literal_prose(call: ast.Call) -> list[str]:
    """The typed (not computed) text in the arguments of a prose call."""
    texts: list[str] = []

    def visit(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
        elif isinstance(node, ast.JoinedStr):  # f-string: only the literal parts are typed
            for part in node.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    texts.append(part.value)
        elif isinstance(node, ast.FormattedValue):
            return  # computed
        elif isinstance(node, ast.Call) and _call_name(node) not in PROSE_CALLS:
            return  # some other function's arguments are code, not prose
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)

    for arg in [*call.args, *(k.value for k in call.keywords)]:
        visit(arg)
    return texts


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _parse_code(source: str) -> ast.Module | None:
    # IPython magics and shell escapes are not Python
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def prose_calls(source: str) -> list[ast.Call]:
    tree = _parse_code(source)
    if tree is None:
        return []
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) in PROSE_CALLS]


# --------------------------------------------------------------------------------------------------
# Checks of one notebook; each returns a list of problems (empty: fine)
# --------------------------------------------------------------------------------------------------
def tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def tagged(nb, tag: str) -> list:
    return [c for c in nb.cells if tag in tags(c)]


def cell_text(cell) -> str:
    """What a reader sees of a cell: Markdown source, or a code cell's Markdown/HTML/text output."""
    if cell.cell_type == "markdown":
        return cell.source
    parts = []
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        for mime in ("text/markdown", "text/html", "text/latex", "text/plain"):
            if mime in data:
                value = data[mime]
                parts.append("".join(value) if isinstance(value, list) else value)
                break
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
    return "\n".join(parts)


def check_tags(nb) -> list[str]:
    return [f"no cell tagged {t!r}" for t in REQUIRED_TAGS if not tagged(nb, t)]


def check_objectives(nb) -> list[str]:
    cells = tagged(nb, "objectives")
    if not cells:
        return []
    text = "\n".join(cell_text(c) for c in cells)
    problems = []
    numbers = [int(n) for n in re.findall(r"\bO(\d+)\b", text)]
    distinct = sorted(set(numbers))
    if not distinct:
        problems.append("objectives are not numbered O1, O2, ...")
    elif distinct != list(range(1, len(distinct) + 1)):
        problems.append(f"objectives must be numbered O1..On without gaps, found {distinct}")
    if not re.search(r"estimated time|time needed|time:", text, re.I):
        problems.append("objectives cell does not give an estimated time")
    if not re.search(r"prerequisite", text, re.I):
        problems.append("objectives cell does not list prerequisites")
    first = nb.cells.index(cells[0])
    if first > 2:
        problems.append(f"the objectives come at cell {first}; they belong at the top (cell 0-2)")
    return problems


def _first_index(nb, tag: str) -> int | None:
    for i, c in enumerate(nb.cells):
        if tag in tags(c):
            return i
    return None


def check_worked_example(nb) -> list[str]:
    cells = tagged(nb, "worked-example")
    if not cells:
        return []
    problems = []
    if not any(c.cell_type == "code" for c in cells):
        problems.append("the worked example has no code cell computing its answer")
    w = _first_index(nb, "worked-example")
    for later in ("summary", "exercises"):
        i = _first_index(nb, later)
        if i is not None and i < w:
            problems.append(f"the worked example must come before the {later}")
    return problems


_LIST_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+", re.M)


def check_misconceptions(nb) -> list[str]:
    cells = tagged(nb, "misconceptions")
    if not cells:
        return []
    text = "\n".join(cell_text(c) for c in cells)
    starts = [m.start() for m in _LIST_ITEM.finditer(text)]
    items = [text[a:b].strip() for a, b in zip(starts, starts[1:] + [len(text)])]
    # "stated and answered": an item must be more than a bare slogan
    answered = [it for it in items if len(re.sub(r"\s+", " ", it)) >= 60]
    if len(answered) < 2:
        return [f"misconceptions: need >= 2 list items, each stating a wrong idea and answering it; "
                f"found {len(answered)}"]
    return []


_DETAILS = re.compile(r"<details>\s*<summary>(.+?)</summary>(.+?)</details>", re.S | re.I)


def check_summary(nb) -> list[str]:
    cells = tagged(nb, "summary")
    if not cells:
        return []
    problems = []
    text = "\n".join(cell_text(c) for c in cells)
    qa = [(q.strip(), a.strip()) for q, a in _DETAILS.findall(text)]
    if len([1 for q, a in qa if q and a]) < 2:
        problems.append(f"summary: need >= 2 self-check questions with hidden answers "
                        f"(<details><summary>question</summary>answer</details>), found {len(qa)}")
    formula_cells = [
        c for c in cells
        if c.cell_type == "code" and "course_lib" in c.source
        and re.search(r"\$[^$]+\$|\\\[|\\begin\{", cell_text(c))
    ]
    if not formula_cells:
        problems.append("summary: no code cell rendering the key formulas from course_lib "
                        "(executed, with math in its output)")
    return problems


def check_exercises_pointer(nb, nn: str) -> list[str]:
    cells = tagged(nb, "exercises")
    if not cells:
        return []
    text = "\n".join(cell_text(c) for c in cells)
    pointed = set(re.findall(rf"exercises/({nn}_[\w-]+)\.ipynb", text))
    if not pointed:
        return [f"exercises cell does not point to exercises/{nn}_*.ipynb"]
    problems = []
    for stem in sorted(pointed):
        if f"work/{stem}.ipynb" not in text:
            problems.append(f"exercises cell names exercises/{stem}.ipynb but not the working copy work/{stem}.ipynb")
    sources = sorted(p.stem for p in SOLUTIONS.glob(f"{nn}_*.ipynb"))
    if sources and not pointed & set(sources):
        problems.append(f"exercises cell points to {sorted(pointed)}, but the exercise source is {sources}")
    return problems


def check_prose_numbers(nb) -> list[str]:
    """The lint over Markdown cells (except source quotes) and the typed text of prose calls."""
    problems = []
    for i, c in enumerate(nb.cells):
        if c.cell_type == "markdown":
            if SOURCE_QUOTE_TAG in tags(c):
                continue
            for hit in unit_number_findings(c.source):
                problems.append(f"cell {i}: {hit!r} typed into Markdown; display it from code "
                                f"(or mark a quotation: tag 'source-quote' / '> Source:')")
        elif c.cell_type == "code":
            for call in prose_calls(c.source):
                for literal in _literal_prose(call):
                    for hit in unit_number_findings(literal):
                        problems.append(f"cell {i}: {hit!r} typed into the text of {_call_name(call)}(...); "
                                        f"compute it with course_lib")
    return problems


def check_source_quotes(nb) -> list[str]:
    problems = []
    for i, c in enumerate(nb.cells):
        if SOURCE_QUOTE_TAG in tags(c):
            if c.cell_type != "markdown":
                problems.append(f"cell {i}: tag 'source-quote' belongs on Markdown cells")
            elif not re.search(r"\bsource\b", c.source, re.I):
                problems.append(f"cell {i}: a source-quote cell must say where it quotes from ('Source: ...')")
    return problems


def check_hidden_prose_code(nb) -> list[str]:
    problems = []
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and prose_calls(c.source):
            if not c.get("metadata", {}).get("jupyter", {}).get("source_hidden", False):
                problems.append(f"cell {i} displays prose from code; hide its input with "
                                f'metadata {{"jupyter": {{"source_hidden": true}}}}')
    return problems


def check_lesson(nb, nn: str) -> list[str]:
    """Every problem with one lesson notebook (empty: it follows the pattern)."""
    return [
        *check_tags(nb), *check_objectives(nb), *check_worked_example(nb), *check_misconceptions(nb),
        *check_summary(nb), *check_exercises_pointer(nb, nn), *check_prose_numbers(nb),
        *check_source_quotes(nb), *check_hidden_prose_code(nb),
    ]


# --------------------------------------------------------------------------------------------------
# The tests over the real lessons
# --------------------------------------------------------------------------------------------------
LESSONS = lesson_paths()


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def test_lesson_01_exists():
    """The pattern is set by lesson 01; without it the parametrised tests below would test nothing."""
    assert any(p.name.startswith("01_") for p in LESSONS), "notebooks/01_*.ipynb is missing"


@pytest.mark.parametrize(
    "check", [check_tags, check_objectives, check_worked_example, check_misconceptions, check_summary,
              check_prose_numbers, check_source_quotes, check_hidden_prose_code],
    ids=lambda f: f.__name__.removeprefix("check_"),
)
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_pattern(path, check):
    problems = check(_read(path))
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_points_to_its_exercises(path):
    problems = check_exercises_pointer(_read(path), path.name[:2])
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


# --------------------------------------------------------------------------------------------------
# The lint itself: it must catch typed numbers and leave quotations alone
# --------------------------------------------------------------------------------------------------
BAD = ["14 GB", "1008 GB/s", "13.9 ms", "7B", "128 KiB", "13.04 GiB", "312 TFLOP/s", "7.24 billion",
       "50 tokens/s", "1,024 bytes", "8 bits", "2.5 s", "124M", "900 Gbps", "1.5 µs"]


@pytest.mark.parametrize("phrase", BAD)
def test_lint_flags_typed_numbers_with_units(phrase):
    assert unit_number_findings(f"The model needs {phrase} here.") == [phrase]
    assert unit_number_findings(f"({phrase}).") == [phrase]


@pytest.mark.parametrize("text", [
    "Mistral-7B and Llama-3-8B are model names, Qwen2.5-7B too.",
    "fp16 uses two bytes per element; q4_0 is a format; objective O3.",
    "The model has 32 layers and 8 KV heads; read 1000 tokens.",
    "Estimated time: 45 minutes (about 1 hour).",
    "Version 0.1 of the model, exercises/01_units.ipynb and H100-80GB.",
    "> Source: llama.cpp README\n> LLaMA 3 8B F16 | 14.96 GB\n> second quoted line 7B",
])
def test_lint_leaves_names_counts_and_marked_quotes_alone(text):
    assert unit_number_findings(text) == []


def test_lint_only_exempts_blockquotes_marked_as_source():
    text = "> Source: a README\n> 14.96 GB\n\nThen prose: 16 GB.\n\n> an unmarked quote of 7B"
    assert unit_number_findings(text) == ["16 GB", "7B"]


def _fixture_notebook(prose: str, *, summary_outputs: bool = True):
    """A minimal lesson that follows the pattern, with ``prose`` as an extra Markdown cell."""
    nbf = nbformat.v4

    def cell(kind, src, *tag_names, hidden=False):
        c = nbf.new_markdown_cell(src) if kind == "md" else nbf.new_code_cell(src)
        if tag_names:
            c.metadata["tags"] = list(tag_names)
        if hidden:
            c.metadata["jupyter"] = {"source_hidden": True}
        return c

    summary_code = cell("code", "from course_lib.prose import md, formula\nmd(formula('weight_bytes'))",
                        "summary", hidden=True)
    if summary_outputs:
        summary_code.outputs = [nbf.new_output("display_data", data={"text/markdown": "$$W = N b_w$$"})]
    nb = nbf.new_notebook()
    nb.cells = [
        cell("md", "# Lesson\n\n**O1** convert units. **O2** spot traps.\n\nEstimated time: 30 minutes. "
                   "Prerequisites: none.", "objectives"),
        cell("code", "x = 1 + 1", "worked-example"),
        cell("md", prose),
        cell("md", "- **Wrong idea one.** The answer explains in a full sentence why it is wrong.\n"
                   "- **Wrong idea two.** The answer explains in a full sentence why it is wrong.",
             "misconceptions"),
        summary_code,
        cell("md", "<details><summary>Q1?</summary>A1.</details>\n<details><summary>Q2?</summary>A2.</details>",
             "summary"),
        cell("md", "Open exercises/99_fixture.ipynb (your copy: work/99_fixture.ipynb).", "exercises"),
    ]
    return nb


def test_fixture_that_follows_the_pattern_passes():
    assert check_lesson(_fixture_notebook("Plain prose without numbers."), "99") == []


def test_deliberately_bad_fixture_is_caught(tmp_path):
    bad_prose = ("The weights take 14 GB, i.e. 13.04 GiB; the 4090 streams 1008 GB/s, so a token takes "
                 "13.9 ms. A 7B model has a 128 KiB KV cache per token.")
    path = tmp_path / "99_bad.ipynb"
    nbformat.write(_fixture_notebook(bad_prose), path)
    problems = check_lesson(nbformat.read(path, as_version=4), "99")
    flagged = " ".join(problems)
    for phrase in ("14 GB", "13.04 GiB", "1008 GB/s", "13.9 ms", "7B", "128 KiB"):
        assert repr(phrase) in flagged, f"lint missed {phrase!r}: {problems}"
    assert len(problems) == 6


def test_bad_fixture_passes_once_marked_as_a_source_quote():
    nb = _fixture_notebook("Source: a datasheet. It lists 14 GB and 1008 GB/s.")
    assert check_prose_numbers(nb)
    nb.cells[2].metadata["tags"] = [SOURCE_QUOTE_TAG]
    assert check_lesson(nb, "99") == []


def test_typed_numbers_in_prose_code_are_caught_but_computed_ones_are_not():
    nb = _fixture_notebook("Plain prose.")
    nb.cells[1] = nbformat.v4.new_code_cell(
        'md(f"The weights take {format_bytes(n)} and stream at 1008 GB/s.")\n'
        'md("Typed: 14 GB")\nparse_bytes("14 GB")'
    )
    nb.cells[1].metadata = {"tags": ["worked-example"], "jupyter": {"source_hidden": True}}
    problems = check_prose_numbers(nb)
    assert len(problems) == 2 and "'1008 GB/s'" in problems[0] and "'14 GB'" in problems[1]


def test_structural_problems_are_reported():
    nb = _fixture_notebook("Plain prose.", summary_outputs=False)
    nb.cells[0].source = "# Lesson\n\n**O1** and **O3**."             # gap, no time, no prerequisites
    nb.cells[3].source = "- wrong"                                      # one bare slogan
    nb.cells[5].source = "<details><summary>Q1?</summary>A1.</details>"  # one self-check only
    nb.cells[6].source = "Do the exercises."                            # no pointer
    nb.cells[4].metadata.pop("jupyter")                                 # prose code input visible
    problems = "\n".join(check_lesson(nb, "99"))
    for needle in ("without gaps", "estimated time", "prerequisites", "misconceptions", "self-check",
                   "formulas", "exercises/99_", "hide its input"):
        assert needle in problems, f"{needle!r} not reported:\n{problems}"
    del nb.cells[1]
    assert "no cell tagged 'worked-example'" in check_lesson(nb, "99")
