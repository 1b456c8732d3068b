"""Exercise set 05: GEMV timing on your machine.

Objectives (lesson ``notebooks/05_gemv_timing.ipynb``):

- O1 count the bytes and FLOPs of a matrix-vector product and show it is memory-bound;
- O2 predict a GEMV's time as bytes / bandwidth;
- O3 time a GEMV correctly and read its achieved bandwidth;
- O4 explain results that contradict bytes / bandwidth (cache, dtypes without native kernels);
- O5 calibrate: turn measured bandwidth into predictions for this machine and compare with an H200.

Questions q7 and q8 are answered from the learner's **own** measurement. Their expected value is not
fixed: :class:`MeasuredQuestion` computes it when ``check(answer, measurement=row)`` runs, from the
measurement object passed in (a ``course_lib.bench.GemvResult`` row, a table of rows, or a dict with
the same fields), with a tolerance derived from that measurement's own spread. Without
``measurement=`` the reference row (the H200's 8192 × 8192 fp16 GEMV, ``course_lib.measurements``)
is used, which is what the set's self-tests check. torch is never imported here.

Lessons: 05
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.display import INCORRECT
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake, exact_mistakes_first
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core.hardware import get_hardware
from course_lib.core.measurements import h200
from course_lib.core.models import get_model

__all__ = ["MeasuredQuestion", "read_measurement", "reference_measurement", "measured_tolerance", "QUESTIONS"]

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
        raise TypeError(f"measurement must be a GEMV row from course_lib.bench.measure_gemv (or its .as_dict()); "
                        f"{type(measurement).__name__} has no {', '.join(missing)}")
    out = {f: float(get(f)) for f in _FIELDS}
    if out["seconds"] <= 0 or out["bytes"] <= 0:
        raise ValueError("measurement has a non-positive time or byte count")
    out["q1_seconds"] = float(get("q1_seconds", out["seconds"]))
    out["q3_seconds"] = float(get("q3_seconds", out["seconds"]))
    out["rotate"] = bool(get("rotate", True))
    return out


def reference_measurement() -> dict:
    """The reference row: the H200's 8192 × 8192 fp16 eager GEMV (median of CUDA-event timings)."""
    s = _H200_ROW["us"] / 1e6
    return {"m": _N, "k": _N, "bytes": _GEMV_BYTES, "seconds": s, "flops": _GEMV_FLOPS, "element_bytes": _FP16,
            "q1_seconds": s, "q3_seconds": s, "rotate": True}


def measured_tolerance(m: dict) -> float:
    """Relative tolerance from the measurement's spread: half its relative IQR, kept within [1 %, 3 %].

    Anything inside the middle half of the learner's runs is accepted (e.g. a mean instead of the
    median), but not the 7.4 % of GiB vs GB or other factor mistakes.
    """
    half_iqr = (m["q3_seconds"] - m["q1_seconds"]) / m["seconds"] / 2
    return min(max(0.01, half_iqr), 0.03)


def _distinct(expected: float, tol: float, candidates: list[Mistake]) -> list[Mistake]:
    """Drop candidate mistakes that fall within tolerance of the answer or of an earlier mistake."""
    kept: list[Mistake] = []
    for c in candidates:
        values = [expected] + [k.value for k in kept]
        if all(abs(c.value - v) > 2.5 * tol * max(abs(v), abs(c.value)) for v in values):
            kept.append(c)
    return kept


class MeasuredQuestion(NumericQuestion):
    """A numeric question whose expected answer is computed from a measurement at check time.

    ``derive(measurement_dict) -> dict(expected=..., rel_tol=..., mistakes=[...], detect=[...])``
    builds the definition; the remaining keyword arguments are those of :class:`NumericQuestion`.
    ``check(answer, strict=False, measurement=row)`` binds the question to ``row`` and checks.
    """

    def __init__(self, *, derive: Callable[[dict], dict], **kw):
        self._derive = derive
        self._kw = kw
        super().__init__(**kw, **derive(reference_measurement()))

    def bind(self, measurement) -> NumericQuestion:
        """A plain NumericQuestion whose expected value comes from ``measurement``."""
        return NumericQuestion(**self._kw, **self._derive(read_measurement(measurement)))

    def evaluate(self, answer, *, strict: bool = False, measurement=None):
        if measurement is None:
            return super().evaluate(answer, strict=strict)
        try:
            bound = self.bind(measurement)
        except (TypeError, ValueError) as exc:
            return self._result(INCORRECT, f"Can't use that measurement: {exc}", strict)
        return bound.evaluate(answer, strict=strict)

    def check(self, answer, strict: bool = False, measurement=None):
        result = self.evaluate(answer, strict=strict, measurement=measurement)
        result._show()
        if strict and not result.correct:
            raise AssertionError(str(result))
        return result


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
        Mistake(_N * _N * 4, "That is fp32 (4 bytes per element); the matrix is fp16."),
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


def _achieved(m: dict) -> dict:
    tol = measured_tolerance(m)
    gbps = m["bytes"] / m["seconds"] / 1e9
    cands = [
        Mistake(gbps / m["element_bytes"], "That is elements per second: multiply by the bytes per element."),
        Mistake(m["flops"] / m["seconds"] / 1e9, "That is GFLOP/s (2·m·k / time); the question asks for bytes."),
        Mistake(gbps * 8, "That is gigabits per second: bytes, not bits."),
        Mistake(gbps * 1000, "That is MB/s: the question asks for GB/s (divide by 1000)."),
        Mistake(gbps / 1.073741824, "That is GiB/s (2^30 bytes); the question asks for GB/s (10^9 bytes)."),
    ]
    return {"expected": gbps, "rel_tol": tol, "mistakes": _distinct(gbps, tol, cands)}


q7 = MeasuredQuestion(
    id="q7", set="ex05", objective="O3 time a GEMV and read its achieved bandwidth", points=2,
    prompt="From YOUR measurement row (the largest rotated fp32 GEMV), the achieved bandwidth in GB/s.",
    unit="GB/s", dimension="bandwidth", derive=_achieved,
    hints=["Achieved bandwidth = row.bytes / row.seconds (the median time per call).",
           "Divide bytes per second by 10^9 for GB/s."],
    solution="`row.bytes / row.seconds / 1e9`, which is what `row.gb_per_s` reports. The check accepts "
             "anything within your runs' interquartile spread (1 % to 3 %).",
)


def _decode_ms(m: dict) -> dict:
    tol = measured_tolerance(m)
    bw = m["bytes"] / m["seconds"]
    ms = _LLAMA3.decode_weight_bytes("fp16") / bw * 1e3
    cands = [
        Mistake(_LLAMA3.decode_weight_bytes("fp32") / bw * 1e3, "That is fp32 weights; the question says fp16."),
        Mistake(_LLAMA3.weight_bytes("fp16") / bw * 1e3,
                "That reads the whole embedding table; a decode step reads one row of it (lesson 02)."),
        Mistake(_LLAMA3.decode_weight_bytes("int8") / bw * 1e3, "That is 1 byte per weight; fp16 is 2."),
        Mistake(ms / 1000, "That is in seconds; the question asks for milliseconds."),
        Mistake(ms * 8, "That divides bits by bytes per second: use bytes."),
    ]
    return {"expected": ms, "rel_tol": tol, "mistakes": _distinct(ms, tol, cands)}


q8 = MeasuredQuestion(
    id="q8", set="ex05", objective="O5 calibrate predictions with a measured bandwidth", points=2,
    prompt="At the bandwidth YOUR largest GEMV achieved, how many milliseconds would one batch-1 decode step "
           "of Llama-3-8B in fp16 take (weights only, get_model('llama-3-8b').decode_weight_bytes('fp16'))?",
    unit="ms", dimension="time", derive=_decode_ms,
    hints=["Your bandwidth: row.bytes / row.seconds.",
           "Bytes per step: decode_weight_bytes('fp16'). Time = bytes / bandwidth, then × 1000 for ms."],
    solution="`get_model('llama-3-8b').decode_weight_bytes('fp16') / (row.bytes / row.seconds) * 1e3`. "
             "This is the calibration step: the same number comes out of "
             "`estimate('llama-3-8b', this_machine(...), 1, 2).tpot` when the GEMV sets the bandwidth.",
)

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8]
