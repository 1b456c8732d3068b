"""Exercise set 05: GEMV timing on your machine.

Objectives (lesson ``notebooks/05_gemv_timing.ipynb``):

- O1 count the bytes and FLOPs of a matrix-vector product and show it is memory-bound;
- O2 predict a GEMV's time as bytes / bandwidth;
- O3 time a GEMV correctly and read its achieved bandwidth;
- O4 explain results that contradict bytes / bandwidth (cache, dtypes without native kernels);
- O5 calibrate: turn measured bandwidth into predictions for this machine and compare with an H200.

Questions q7 and q8 are answered with a **function of** ``row``, a dict of one measured GEMV
(``GemvResult.as_dict()``, taken in the exercise notebook through ``measured("ex05/row", ...)``):
:class:`RowQuestion` runs the function on fixed reference rows (:data:`ROWS`) and, when
``check(answer, row=row)`` passes one, on the learner's own row. A number typed from one printout
would be wrong on the grader's re-measured row; a function is right on any row. torch is never
imported here.

Lessons: 05
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.display import INCORRECT, graded_outcome
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake, exact_mistakes_first
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core.hardware import get_hardware
from course_lib.core.measurements import h200
from course_lib.core.models import get_model

__all__ = ["RowQuestion", "ROWS", "read_row", "read_measurement", "QUESTIONS"]

_H200 = get_hardware("h200")
_N = 8192
_FP16 = 2
_GEMV_BYTES = (_N * _N + 2 * _N) * _FP16            # matrix + x read + y written
_GEMV_FLOPS = 2 * _N * _N
_H200_DATA = h200()
_H200_ROW = next(r for r in _H200_DATA["gemv_fp16_eager"] if (r["m"], r["k"]) == (_N, _N))
_H200_COPY = _H200_DATA["ceilings"]["copy_read_plus_write_GBps"] * 1e9
_LLAMA3 = get_model("llama-3-8b")


# --------------------------------------------------------------------------------------------------
# Questions answered from the learner's own measurement
# --------------------------------------------------------------------------------------------------
_FIELDS = ("m", "k", "bytes", "seconds", "flops", "element_bytes")


def read_measurement(measurement) -> dict:
    """The fields a measured question needs, from a GemvResult, a dict, or a table (its largest row).

    A table (a list of rows) gives its largest matrix among rotated rows (all rows if none is rotated).
    Raises TypeError/ValueError with a clear message for anything else.
    """
    if isinstance(measurement, (list, tuple)):
        rows = [read_measurement(r) for r in measurement]
        if not rows:
            raise ValueError("the measurement table is empty: run bench.measure_gemv first")
        rotated = [r for r in rows if r["rotate"]] or rows
        return max(rotated, key=lambda r: r["m"] * r["k"] * r["element_bytes"])
    if isinstance(measurement, Mapping):
        get = measurement.get
    else:
        def get(k, default=None):
            return getattr(measurement, k, default)
    missing = [f for f in _FIELDS if get(f) is None]
    if missing:
        raise TypeError(f"measurement must be a GEMV row from probes.measure_gemv (or its .as_dict()); "
                        f"{type(measurement).__name__} has no {', '.join(missing)}")
    out = {f: float(get(f)) for f in _FIELDS}
    if out["seconds"] <= 0 or out["bytes"] <= 0:
        raise ValueError("measurement has a non-positive time or byte count")
    out["q1_seconds"] = float(get("q1_seconds", out["seconds"]))
    out["q3_seconds"] = float(get("q3_seconds", out["seconds"]))
    out["rotate"] = bool(get("rotate", True))
    return out


# --------------------------------------------------------------------------------------------------
# The set
# --------------------------------------------------------------------------------------------------
q1 = NumericQuestion(
    id="q1", set="ex05", objective="O1 count the bytes of a GEMV", points=1,
    prompt="Bytes one y = W·x moves for an 8192 × 8192 fp16 matrix (matrix and x read, y written).",
    expected=_GEMV_BYTES, dimension="bytes", rel_tol=2e-3,   # "134 MB", as lesson 05 prints it, is right
    detect=[d.bits_vs_bytes(), d.gb_vs_gib(2)],
    mistakes=[
        Mistake(_N * _N, "That counts elements. Each fp16 element takes 2 bytes."),
        Mistake(_N * _N * 4, "That is twice the matrix: either fp32 (4 bytes per element; the matrix is fp16) or the "
                             "matrix counted twice, read and written. Only y is written; W is only read."),
        Mistake(2 * _N * _FP16, "That is only the two vectors; the matrix is what dominates."),
    ],
    hints=["Elements read: the m × k matrix plus the k-vector; written: the m-vector.",
           "Multiply the element count by the bytes per fp16 element."],
    solution="$(8192^2 + 8192 + 8192) \\times 2$ = 134,250,496 bytes ≈ 134 MB; the matrix alone is "
             "134,217,728 bytes, 99.98 % of it.",
)
# the matrix alone lies inside the tolerance: recognised exactly, before it is applied
exact_mistakes_first(q1, Mistake(_N * _N * _FP16, "That is the matrix alone (exactly 128 MiB). The GEMV also reads "
                                                  "x and writes y: add their bytes.", rel_tol=1e-6))

q2 = NumericQuestion(
    id="q2", set="ex05", objective="O2 predict a GEMV's time as bytes / bandwidth", points=2,
    prompt="The floor for that GEMV on an H200 at its datasheet bandwidth, in microseconds.",
    expected=_GEMV_BYTES / _H200.bandwidth * 1e6, unit="us", dimension="time", rel_tol=0.01,
    detect=[d.ms_vs_s(), d.bits_vs_bytes(),
            d.compute_instead_of_memory(_GEMV_FLOPS / _H200.flops("fp16") * 1e6)],
    mistakes=[
        Mistake(_GEMV_BYTES / _H200_COPY * 1e6,
                "That uses the measured copy bandwidth; the question asks for the datasheet figure."),
        Mistake(2 * _GEMV_BYTES / _H200.bandwidth * 1e6, "That is fp32 bytes; the matrix is fp16."),
        Mistake(_H200.bandwidth / _GEMV_BYTES, "Upside down: that is calls per second, not seconds per call."),
    ],
    hints=["Time = bytes / bandwidth; take the bytes from q1 and the bandwidth from get_hardware('h200').",
           "Convert seconds to microseconds (× 10^6)."],
    solution="134,250,496 B / 4.8 × 10^12 B/s = 27.97 µs. The measured eager call took "
             f"{_H200_ROW['us']} µs: see lesson 05 for why.",
)


def _gemv_time(m, k, bytes_per_element, bandwidth):
    return (m * k + m + k) * bytes_per_element / bandwidth


q3 = FunctionQuestion(
    id="q3", set="ex05", objective="O2 predict a GEMV's time as bytes / bandwidth", points=2,
    prompt="Write gemv_time(m, k, bytes_per_element, bandwidth) -> seconds, counting matrix, x and y.",
    expected=_gemv_time, dimension="time", rel_tol=1e-6,
    cases=[((4, 4, 4, 100.0), 0.96), ((8192, 8192, 2, 4.8e12), _gemv_time(8192, 8192, 2, 4.8e12)),
           ((14336, 4096, 2, 1e12), _gemv_time(14336, 4096, 2, 1e12)), ((1, 3, 1, 2.0), 3.5)],
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda m, k, bytes_per_element, bandwidth: m * k * bytes_per_element / bandwidth,
                "Your function counts only the matrix: add the k elements of x read and the m of y written."),
        Mistake(lambda m, k, bytes_per_element, bandwidth: (m * k + m + k) / bandwidth,
                "Your function ignores bytes_per_element: it counts elements, not bytes."),
        Mistake(lambda m, k, bytes_per_element, bandwidth: 2 * m * k / bandwidth,
                "That divides the FLOPs (2·m·k) by the bandwidth; time is bytes / bandwidth."),
    ],
    hints=["Elements moved: m·k + k + m.", "Multiply by bytes_per_element, divide by bandwidth."],
    solution="```python\nreturn (m * k + m + k) * bytes_per_element / bandwidth\n```",
)

def _overheads_us() -> list[float]:
    """Per H200 GEMV row: its measured time minus its bytes at the copy rate, in µs (the fixed cost per call)."""
    return [r["us"] - (r["m"] * r["k"] + r["m"] + r["k"]) * _FP16 / _H200_COPY * 1e6
            for r in _H200_DATA["gemv_fp16_eager"]]


_Q4_GBPS = _GEMV_BYTES / (_H200_ROW["us"] / 1e6) / 1e9
_Q4_MEM_US = _GEMV_BYTES / _H200_COPY * 1e6
_Q4_16K = next(r["GBps"] for r in _H200_DATA["gemv_fp16_eager"] if r["m"] == 16384) * 1e9 / _H200_COPY

q4 = NumericQuestion(
    id="q4", set="ex05", objective="O3 read a measured GEMV's achieved bandwidth", points=2,
    prompt="The H200's 8192 × 8192 fp16 GEMV took its measured median time; what fraction of the H200's "
           "measured copy bandwidth did it achieve? (a number between 0 and 1)",
    expected=_GEMV_BYTES / (_H200_ROW["us"] / 1e6) / _H200_COPY, rel_tol=0.01,
    mistakes=[
        Mistake(_GEMV_BYTES / (_H200_ROW["us"] / 1e6) / _H200.bandwidth,
                "That is the fraction of the datasheet bandwidth; the question compares with the measured copy."),
        Mistake(_H200_COPY / (_GEMV_BYTES / (_H200_ROW["us"] / 1e6)),
                "Upside down: divide the GEMV's bandwidth by the copy's."),
        Mistake(next(r["GBps"] for r in _H200_DATA["gemv_fp16_eager"] if r["m"] == 16384) * 1e9 / _H200_COPY,
                "That is the 16384 × 16384 row; the question is about 8192 × 8192."),
    ],
    hints=["Achieved bandwidth = bytes / measured time (take the time from h200()['gemv_fp16_eager']).",
           "The copy ceiling is h200()['ceilings']['copy_read_plus_write_GBps'] (in GB/s)."],
    solution=f"{_GEMV_BYTES:,} B / {_H200_ROW['us']} µs = {_Q4_GBPS:.0f} GB/s; "
             f"{_Q4_GBPS:.0f} / {_H200_COPY / 1e9} = {_Q4_GBPS * 1e9 / _H200_COPY:.3f}. At the copy rate its bytes "
             f"need only {_Q4_MEM_US:.1f} µs, so at most {_H200_ROW['us'] - _Q4_MEM_US:.0f} µs of the call is "
             f"fixed launch and dispatch cost (across the H200's rows, time minus bytes at the copy rate gives "
             f"roughly {min(_overheads_us()):.0f}–{max(_overheads_us()):.0f} µs per call, partly overlapped with "
             f"the memory traffic): a single mid-sized GEMV reaches barely half the ceiling, while the "
             f"16384 × 16384 one (four times the bytes, the same fixed cost) reaches {_Q4_16K:.2f}.",
)


q5 = ChoiceQuestion(
    id="q5", set="ex05", objective="O4 explain results that contradict bytes / bandwidth", points=1,
    prompt="Suppose a machine's fp16 GEMV takes longer than its fp32 GEMV of the same shape, although it "
           "reads half the bytes (this happens on CPUs whose PyTorch build has no fast fp16 kernel; on a GPU "
           "fp16 takes about half fp32's time). Which explanation fits such a result?",
    options=["compute-bound: converting and multiplying each element costs more time than reading it",
             "fp16 moves more bytes than fp32", "the cache holds fewer fp16 numbers",
             "memory bandwidth is halved for 16-bit loads", "the timer is too coarse for fp16"],
    expected="compute-bound: converting and multiplying each element costs more time than reading it",
    mistakes=[
        Mistake("fp16 moves more bytes than fp32", "fp16 is 2 bytes per element, fp32 4: half the bytes."),
        Mistake("memory bandwidth is halved for 16-bit loads",
                "Memory moves cache lines of 64 bytes whatever they contain; bytes per second do not depend on "
                "the element type."),
        Mistake("the cache holds fewer fp16 numbers", "It holds twice as many: each takes half the space."),
    ],
    hints=["If memory were the limit, time would follow bytes. What else does each element need?"],
    solution="Without fp16 instructions every element is converted to fp32 before the multiply-add, often "
             "in a slow generic loop. That work, not the bytes, sets the time: the GEMV became compute-bound.",
)

q6 = ExpressionQuestion(
    id="q6", set="ex05", objective="O1 count the bytes and FLOPs of a GEMV", points=1,
    prompt="Arithmetic intensity (FLOP per byte) of a large GEMV whose matrix has b bytes per element "
           "(ignore the vectors), as a formula in b.",
    expected="2/b", symbols=["b"],
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake("1/b", "A multiply-add is 2 FLOP: one multiply and one add per matrix element."),
        Mistake("2*b", "Upside down: FLOP divided by bytes, and bytes per element = b."),
        Mistake("b/2", "That is bytes per FLOP; intensity is FLOP per byte."),
    ],
    hints=["FLOP: 2 per matrix element. Bytes: b per matrix element."],
    solution="$\\frac{2mk}{mk\\,b} = \\frac{2}{b}$: 1 FLOP per byte in fp16, 0.5 in fp32, far below any "
             "device's ridge point (tens to hundreds of FLOP per byte): memory-bound.",
)


def _row(m: int, k: int, element_bytes: int, seconds: float, q1: float | None = None,
         q3: float | None = None) -> dict:
    """A GEMV row as ``GemvResult.as_dict()`` gives it (the fields a q7/q8 function may read)."""
    nbytes = (m * k + m + k) * element_bytes
    return {"m": m, "k": k, "dtype": {2: "fp16", 4: "fp32"}[element_bytes], "element_bytes": element_bytes,
            "bytes": nbytes, "flops": 2 * m * k, "seconds": seconds, "q1_seconds": q1 or seconds,
            "q3_seconds": q3 or seconds, "rotate": True, "matrix_bytes": m * k * element_bytes,
            "bandwidth": nbytes / seconds, "gb_per_s": nbytes / seconds / 1e9}


#: rows every q7/q8 function is run on besides the learner's own: the H200's 8192 × 8192 fp16 GEMV and two
#: CPU-like fp32 rows (the times are illustrative inputs, not measurements)
ROWS = (_row(_N, _N, _FP16, _H200_ROW["us"] / 1e6), _row(8192, 8192, 4, 0.0213, 0.0209, 0.0219),
        _row(1024, 1024, 4, 3.1e-4, 3.0e-4, 3.3e-4))


class RowQuestion(FunctionQuestion):
    """A function of ``row`` (a dict of one measured GEMV, ``GemvResult.as_dict()``), checked on :data:`ROWS`
    and, when ``check(answer, row=row)`` passes one, on that row too.

    Because the answer is a function and not a number typed from a printout, it is right on any machine:
    the grader, which re-measures, evaluates it on its own row.
    """

    def __init__(self, *, value: Callable[[dict], float], **kw):
        self._value = value
        self._kw = kw
        super().__init__(expected=value, cases=[((r,), value(r)) for r in ROWS], **kw)

    def bind(self, row) -> FunctionQuestion:
        """The same question with ``row`` added to its cases."""
        r = read_row(row)
        return FunctionQuestion(expected=self._value, cases=[((x,), self._value(x)) for x in (*ROWS, r)], **self._kw)

    def evaluate(self, answer, *, strict: bool = False, measurement=None):
        """``measurement``: the learner's row (``check(answer, row=row)`` passes it here), or None."""
        if measurement is None:
            return super().evaluate(answer, strict=strict)
        try:
            bound = self.bind(measurement)
        except (TypeError, ValueError) as exc:
            return self._result(INCORRECT, f"Can't use that row: {exc}", strict)
        return bound.evaluate(answer, strict=strict)

    def check(self, answer, strict: bool = False, row=None):
        """Check ``answer`` (a function of a row) on the reference rows and, when given, on ``row``."""
        result = self.evaluate(answer, strict=strict, measurement=row)
        result._show()
        return graded_outcome(result) if strict else result


def read_row(row) -> dict:
    """``row`` as the dict a q7/q8 function receives: a GemvResult (or its ``as_dict()``), checked."""
    if not isinstance(row, Mapping):
        if hasattr(row, "as_dict"):
            row = row.as_dict()
        else:
            raise TypeError(f"row must be a dict of one measured GEMV (GemvResult.as_dict()), got "
                            f"{type(row).__name__}")
    read_measurement(row)           # the fields, positive
    return dict(row)


def _gbps(row):
    return row["bytes"] / row["seconds"] / 1e9


def _decode_ms(row):
    return _LLAMA3.decode_weight_bytes("fp16") / (row["bytes"] / row["seconds"]) * 1e3


q7 = RowQuestion(
    id="q7", set="ex05", objective="O3 time a GEMV and read its achieved bandwidth", points=2,
    prompt="Write achieved_gbps(row) -> the achieved bandwidth in GB/s of a measured GEMV row (a dict with "
           "'bytes' moved per call and 'seconds', the median time per call).",
    value=_gbps, dimension="bandwidth", rel_tol=1e-3,
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda row: _gbps(row) / row["element_bytes"],
                "That is elements per second: multiply by the bytes per element."),
        Mistake(lambda row: row["flops"] / row["seconds"] / 1e9,
                "That is GFLOP/s (2·m·k / time); the question asks for bytes."),
        Mistake(lambda row: _gbps(row) * 1000, "That is MB/s: the question asks for GB/s (divide by 1000)."),
        Mistake(lambda row: _gbps(row) / 1.073741824,
                "That is GiB/s (2^30 bytes); the question asks for GB/s (10^9 bytes)."),
        Mistake(lambda row: row["bytes"] / row["seconds"],
                "That is bytes per second: divide by 10^9 for GB/s."),
    ],
    hints=["Achieved bandwidth = bytes moved per call / seconds per call.",
           "Divide bytes per second by 10^9 for GB/s."],
    solution="```python\nreturn row['bytes'] / row['seconds'] / 1e9\n```\n(what `row['gb_per_s']` holds). "
             "The check runs it on your row and on reference rows, so it is right on any machine.",
)


q8 = RowQuestion(
    id="q8", set="ex05", objective="O5 calibrate predictions with a measured bandwidth", points=2,
    prompt="Write decode_ms(row) -> the milliseconds one batch-1 decode step of Llama-3-8B in fp16 would take "
           "(weights only, get_model('llama-3-8b').decode_weight_bytes('fp16')) at the bandwidth the GEMV "
           "row achieved.",
    value=_decode_ms, dimension="time", rel_tol=1e-3,
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda row: _LLAMA3.decode_weight_bytes("fp32") / (row["bytes"] / row["seconds"]) * 1e3,
                "That is fp32 weights; the question says fp16."),
        Mistake(lambda row: _LLAMA3.weight_bytes("fp16") / (row["bytes"] / row["seconds"]) * 1e3,
                "That reads the whole embedding table; a decode step reads one row of it (lesson 02)."),
        Mistake(lambda row: _LLAMA3.decode_weight_bytes("int8") / (row["bytes"] / row["seconds"]) * 1e3,
                "That is 1 byte per weight; fp16 is 2."),
        Mistake(lambda row: _decode_ms(row) / 1000, "That is in seconds; the question asks for milliseconds."),
    ],
    hints=["The row's bandwidth: row['bytes'] / row['seconds'].",
           "Bytes per step: decode_weight_bytes('fp16'). Time = bytes / bandwidth, then × 1000 for ms."],
    solution="```python\nbandwidth = row['bytes'] / row['seconds']\n"
             "return get_model('llama-3-8b').decode_weight_bytes('fp16') / bandwidth * 1e3\n```\n"
             "This is the weights-only floor at the bandwidth one GEMV shape achieved. "
             "`estimate('llama-3-8b', this_machine(...), ...)` gives a different figure: it adds the K/V reads and "
             "the lm_head's and embedding's bytes per step, and takes its bandwidth from the largest rotated GEMV of "
             "its own sweep, not from this row.",
)

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8]
