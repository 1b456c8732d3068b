"""Exercise set 01: units -- bytes and parameters (lesson ``notebooks/01_units.ipynb``).

Objectives (as numbered in the lesson):

* O1 tell bits from bytes and convert between them;
* O2 convert a size between SI (kB, MB, GB, TB: powers of 1000) and IEC (KiB, MiB, GiB, TiB: powers of 1024);
* O3 translate the source's 1024-based KB, MB, GB, TB into unambiguous units;
* O4 read parameter counts (K, M, B, T are powers of 1000) and turn a count into bytes of weights;
* O5 compute how long moving a size takes at a bandwidth in GB/s (10**9 bytes per second);
* O6 spot unit traps in published figures (nominal parameter counts, "GB" that are GiB).

Every expected value is computed here from ``course_lib`` (models, hardware, precision, units,
measurements), never typed in, so the exercises and the library cannot disagree. Feedback never
states an expected value.

Lessons: 01
"""
from __future__ import annotations

import re

from course_lib.checks.choice import ChoiceQuestion
from course_lib.checks.expression import ExpressionQuestion
from course_lib.checks.function import FunctionQuestion
from course_lib.checks.mistakes import Mistake, numbers_only
from course_lib.checks.mistakes import detectors as d
from course_lib.checks.numeric import NumericQuestion
from course_lib.core import measurements
from course_lib.core import units
from course_lib.core.hardware import get_hardware
from course_lib.core.models import catalog_entry, get_model
from course_lib.core.precision import get_precision

__all__ = ["QUESTIONS", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9",
           "nominal_params", "readme_size_record"]

SET = "ex01"


def nominal_params(model: str) -> float:
    """The parameter count a model's *name* advertises ("Mistral-7B" -> 7e9), read with ``parse_params``."""
    display = catalog_entry(model)["display"]
    m = re.search(r"-(\d+(?:\.\d+)?[KMBT])\b", display)
    if m is None:
        raise ValueError(f"model {model!r}: its name {display!r} does not state a parameter count")
    return units.parse_params(m.group(1))


def readme_size_record() -> dict:
    """The published units trap: the llama.cpp benchmark README's size of Llama-3-8B in f16."""
    record = measurements.units_trap()
    if record["model"] != "llama-3-8b" or record["weights"] != "f16":
        raise ValueError(f"the units-trap record is about {record['model']} {record['weights']}, "
                         f"but questions q8/q9 are written for llama-3-8b f16")
    return record


# --- numbers the questions use (all from course_lib) -------------------------------------------
_MISTRAL = get_model("mistral-7b").params                     # 7,241,732,096
_LLAMA3 = get_model("llama-3-8b").params                      # 8,030,261,248
_INT4_BITS = get_precision("int4").bits                       # 4
_Q4_0_BITS = get_precision("q4_0").bits                       # 4.5
_BF16 = get_precision("bf16").bytes                           # 2
_FP32 = get_precision("fp32").bytes                           # 4
_RTX4090 = get_hardware("rtx-4090").bandwidth                 # bytes/s
_CHECKPOINT = units.parse_bytes("14 GB")                      # the SI-sized checkpoint of q2
_SOURCE_KV = "128 KB"                                         # q3, written the source's way
_SOURCE_KV_NUMBER = units.parse_bytes(_SOURCE_KV, convention="source") / units.KiB   # the 128
_README = readme_size_record()
_README_TEXT = _README["printed"]                             # "14.96 GB" as printed

_GB_DIVIDER = "1 GB = 10^9 bytes (SI); 1 GiB = 2^30 bytes (IEC)"

# --- O1 -------------------------------------------------------------------------------------------
q1 = NumericQuestion(
    id="q1", set=SET, points=1,
    objective="O1 tell bits from bytes and convert between them",
    prompt=("Mistral-7B's weights quantised to int4 (4 bits per weight; ignore the block scales). "
            "How many bytes do they take? Use `get_model('mistral-7b').params`."),
    expected=_MISTRAL * _INT4_BITS / 8, dimension="bytes", rel_tol=0.005,
    detect=[d.bits_vs_bytes(), d.gb_vs_gib()],
    mistakes=[
        Mistake(_MISTRAL * _INT4_BITS,
                "That is 4 *bytes* per weight (the size of fp32). int4 stores 4 *bits* per weight, and a "
                "byte holds 8 bits."),
        Mistake(_MISTRAL * _Q4_0_BITS / 8,
                "That includes block scales (4.5 bits per weight, llama.cpp's q4_0); this question says to "
                "ignore them: exactly 4 bits per weight."),
        Mistake(_MISTRAL * _BF16,
                "That is the fp16/bf16 size (16 bits = 2 bytes per weight). int4 uses a quarter of that."),
        Mistake(_MISTRAL,
                "That is one byte per weight, the parameter count itself. A parameter is not a byte: "
                "multiply the count by bits per weight, then divide by 8 bits per byte."),
    ],
    hints=["A byte is 8 bits. How many bytes does one 4-bit weight take?",
           "bytes = parameters x bits per weight / 8."],
    solution=(f"{_MISTRAL:,} parameters x {_INT4_BITS:g} bits / 8 bits per byte = "
              f"{_MISTRAL * _INT4_BITS / 8:,.0f} B = {units.format_bytes(_MISTRAL * _INT4_BITS / 8, digits=4)}."),
)

# --- O2 -------------------------------------------------------------------------------------------
q2 = numbers_only(NumericQuestion(
    id="q2", set=SET, points=1,
    objective="O2 convert a size between SI (powers of 1000) and IEC (powers of 1024) prefixes",
    prompt=("A checkpoint is 14 GB in SI units (10^9 bytes per GB). How many GiB is that? Answer with a plain "
            "number of GiB (the conversion is the point, so text with units is not accepted here)."),
    expected=_CHECKPOINT / units.GiB, dimension=None, rel_tol=0.002,
    detect=[d.gb_vs_gib(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(_CHECKPOINT / units.GB,
                "That is the number unchanged. GB and GiB are different units: " + _GB_DIVIDER + "."),
        Mistake(_CHECKPOINT * units.GiB / units.GB**2,
                "You converted in the wrong direction. A GiB is larger than a GB, so the same bytes make "
                "*fewer* GiB than GB."),
        Mistake(_CHECKPOINT / (units.MiB * 1000),
                "You mixed the two systems (1024 x 1024 x 1000). Divide the bytes by 1024 three times "
                "(2^30)."),
        Mistake(_CHECKPOINT / units.MiB,
                "That is the size in MiB (divided by 1024 only twice). One more division by 1024 gives GiB."),
        Mistake(round(_CHECKPOINT / units.GiB),
                "That is rounded to a whole number of GiB. Keep two decimals: rounding hides whether you "
                "divided by 2^30 or by 10^9.", rel_tol=0.001),
    ],
    hints=["First turn the SI figure into bytes: 1 GB = 10^9 bytes.",
           "Then divide by the bytes in one GiB: 2^30 = 1,073,741,824."],
    solution=(f"{units.format_bytes(_CHECKPOINT)} = {_CHECKPOINT:,.0f} B; / 2^30 = "
              f"{units.format_bytes(_CHECKPOINT, 'iec', digits=4)}. GiB are about 7.4% larger than GB, "
              f"so there are fewer of them."),
), "the conversion is the point: answer with a plain number, not text")

# --- O3 -------------------------------------------------------------------------------------------
q3 = NumericQuestion(
    id="q3", set=SET, points=1,
    objective="O3 translate the source's 1024-based KB, MB, GB, TB into unambiguous units",
    prompt=(f"The source material writes the KV cache of one token of its illustrative 7B model (`source-7b`, "
            f"the same KV shape as Mistral-7B) as '{_SOURCE_KV}', using its "
            f"1024-based convention. How many bytes is that exactly?"),
    expected=units.parse_bytes(_SOURCE_KV, convention="source"), dimension="bytes", rel_tol=1e-6,
    detect=[d.bits_vs_bytes(), d.gb_vs_gib(1)],
    mistakes=[
        Mistake(units.parse_bytes(_SOURCE_KV, convention="si"),
                "That reads KB as 1000 bytes (SI). The source's table uses 1024: its KB is a KiB."),
        Mistake(units.parse_bytes(_SOURCE_KV, convention="source") * units.KiB,
                "That multiplies by 1024 twice: the source's KB is 1024 bytes (MB would be 1024^2)."),
        Mistake(units.parse_bytes(_SOURCE_KV, convention="source") * 8,
                "That is the number of bits. The question asks for bytes."),
        Mistake(_SOURCE_KV_NUMBER / units.KiB,
                "You divided by 1024 where you should multiply: KB -> bytes makes the number larger."),
        Mistake(round(units.parse_bytes(_SOURCE_KV, convention="source"), -3),
                "That is rounded: the question asks for the exact number of bytes, and 1024 x a whole number "
                "is a whole number.", rel_tol=1e-4),
    ],
    hints=["In the source's table 1 KB = 1024 bytes (the same size as 1 KiB).",
           "Multiply the number by 1024."],
    solution=(f"'{_SOURCE_KV}' in the source's convention = {_SOURCE_KV_NUMBER:g} x 1024 B = "
              f"{units.parse_bytes(_SOURCE_KV, convention='source'):,.0f} B "
              f"= {units.format_bytes(units.parse_bytes(_SOURCE_KV, convention='source'), 'iec')} "
              f"(in SI: {units.format_bytes(units.parse_bytes(_SOURCE_KV, convention='source'), 'si', digits=4)})."),
)


# --- O2 as a function -----------------------------------------------------------------------------
def _to_gib(n_bytes):
    return n_bytes / units.GiB


q4 = numbers_only(FunctionQuestion(
    id="q4", set=SET, points=2,
    objective="O2 convert a size between SI (powers of 1000) and IEC (powers of 1024) prefixes",
    prompt="Write `to_gib(n_bytes)` that returns the size `n_bytes` (a number of bytes) in GiB, as a float.",
    expected=_to_gib, rel_tol=1e-9,
    cases=[((units.GiB,), 1.0), ((_CHECKPOINT,), _CHECKPOINT / units.GiB),
           ((_LLAMA3 * 2,), _LLAMA3 * 2 / units.GiB), ((units.TiB,), 1024.0), ((0,), 0.0)],
    detect=[d.bits_vs_bytes()],
    mistakes=[
        Mistake(lambda n_bytes: n_bytes / units.GB,
                "Your function returns GB (divides by 10^9). A GiB is 2^30 bytes."),
        Mistake(lambda n_bytes: n_bytes / units.MiB,
                "Your function returns MiB (divides by 1024 only twice). A GiB is 1024^3 bytes."),
        Mistake(lambda n_bytes: n_bytes / (units.MiB * 1000),
                "Your function mixes 1024 and 1000. A GiB is 1024 x 1024 x 1024 bytes."),
        Mistake(lambda n_bytes: n_bytes * units.GiB / units.GB**2,
                "Your function converts in the wrong direction (it multiplies by 2^30 / 10^9 somewhere)."),
    ],
    hints=["How many bytes are in one GiB?",
           "Divide by that number (write it as a power of 2) and return the result as a number, not as text."],
    solution="```python\ndef to_gib(n_bytes):\n    return n_bytes / 2**30   # 1 GiB = 1024**3 bytes\n```",
), "return the size as a number (a float), not as text")

# --- O4 as a formula --------------------------------------------------------------------------------


def _weight_bytes_in_bits():
    """``weight_bytes`` from course_lib.core.formulas, with bytes per weight written as b/8 (b in bits)."""
    import sympy as sp

    from course_lib.core.formulas import S, expr

    N, b = sp.symbols("N b", positive=True)
    return expr("weight_bytes").subs({S.params: N, S.bytes_per_weight: b / 8})


q5 = ExpressionQuestion(
    id="q5", set=SET, points=1,
    objective="O4 read parameter counts and turn a count into bytes of weights",
    prompt=("Give the bytes of weights as a sympy expression of the parameter count `N` and the bits per "
            "weight `b` (symbols `N, b = sympy.symbols('N b', positive=True)`)."),
    expected=_weight_bytes_in_bits(), symbols=["N", "b"],
    mistakes=[
        Mistake("N*b", "That counts bits, not bytes: a byte holds 8 bits."),
        Mistake("8*N*b", "Bits to bytes is a division by 8, not a multiplication."),
        Mistake("N*b/8/2**30", "That is in GiB; the question asks for bytes (the base unit)."),
        Mistake("N/8", "That leaves out the bits per weight b: every weight takes b bits."),
    ],
    hints=["One weight takes b bits, which is b/8 bytes.", "Multiply by the number of weights N."],
    solution="$N \\cdot b / 8$: N weights of b bits each, 8 bits per byte. (fp16: b = 16, so 2N bytes.)",
)

# --- O4 multi-step -----------------------------------------------------------------------------------
_MISTRAL_BF16 = _MISTRAL * _BF16
q6 = NumericQuestion(
    id="q6", set=SET, points=2,
    objective="O4 read parameter counts and turn a count into bytes of weights",
    prompt=("Multi-step: (a) look up Mistral-7B's real parameter count in `course_lib`; (b) compute the bytes "
            "of its weights in bf16; (c) give the answer in SI GB."),
    expected=_MISTRAL_BF16 / units.GB, unit="GB", dimension="bytes", rel_tol=0.005,
    detect=[d.gb_vs_gib(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(nominal_params("mistral-7b") * _BF16 / units.GB,
                "You used the nominal 7B from the name. Mistral-7B really has more parameters: take the count "
                "from `get_model('mistral-7b').params`."),
        Mistake(_MISTRAL / units.GB,
                "That is the parameter count in billions, not bytes: each bf16 weight takes 2 bytes."),
        Mistake(_MISTRAL * _FP32 / units.GB,
                "That is the fp32 size (4 bytes per weight). bf16 is 16 bits = 2 bytes."),
        Mistake(_MISTRAL_BF16 / units.GiB,
                "That is in GiB (divided by 2^30). The question asks for SI GB: divide by 10^9."),
    ],
    hints=["`get_model('mistral-7b').params` gives the exact count.",
           "bf16 is 16 bits = 2 bytes per weight; bytes / 10^9 = GB."],
    solution=(f"{_MISTRAL:,} x 2 B = {_MISTRAL_BF16:,.0f} B = {units.format_bytes(_MISTRAL_BF16, digits=4)} "
              f"({units.format_bytes(_MISTRAL_BF16, 'iec', digits=4)})."),
)

# --- O5 multi-step -----------------------------------------------------------------------------------
_READ_S = _MISTRAL_BF16 / _RTX4090
q7 = NumericQuestion(
    id="q7", set=SET, points=2,
    objective="O5 compute how long moving a size takes at a bandwidth in GB/s",
    prompt=("Multi-step: how long does an RTX 4090 need to read Mistral-7B's bf16 weights once at its full "
            "memory bandwidth (`get_hardware('rtx-4090').bandwidth`, in bytes/s)? Answer in ms."),
    expected=_READ_S * 1e3, unit="ms", dimension="time", rel_tol=0.005,
    detect=[d.ms_vs_s(), d.bits_vs_bytes(), d.gb_vs_gib()],
    mistakes=[
        Mistake(_MISTRAL_BF16 / (_RTX4090 / units.GB * units.GiB) * 1e3,
                "You read the bandwidth as GiB/s. Bandwidth in GB/s uses SI: 1 GB/s = 10^9 bytes per second."),
        Mistake(nominal_params("mistral-7b") * _BF16 / _RTX4090 * 1e3,
                "You used the nominal 7B; take the real parameter count from course_lib."),
        Mistake(_RTX4090 / _MISTRAL_BF16,
                "That is reads per second (bandwidth / bytes), the reciprocal of the time."),
        Mistake(_MISTRAL / _RTX4090 * 1e3,
                "That reads one byte per weight; bf16 weights are 2 bytes each."),
    ],
    hints=["time = bytes / (bytes per second).", "Multiply seconds by 1000 for milliseconds."],
    solution=(f"{_MISTRAL_BF16:,.0f} B / {_RTX4090:,.0f} B/s = {units.format_time(_READ_S, digits=4)}."),
)

# --- O6 multi-step -----------------------------------------------------------------------------------
_LLAMA3_FP16 = _LLAMA3 * get_precision("fp16").bytes
q8 = NumericQuestion(
    id="q8", set=SET, points=2,
    objective="O6 spot unit traps in published figures",
    prompt=(f"The llama.cpp benchmark README prints the size of Llama-3-8B in f16 as '{_README_TEXT}'. "
            f"Multi-step: compute the true size from `get_model('llama-3-8b').params` and fp16, and give it "
            f"in SI GB."),
    expected=_LLAMA3_FP16 / units.GB, unit="GB", dimension="bytes", rel_tol=0.003,
    detect=[d.gb_vs_gib(), d.bits_vs_bytes()],
    mistakes=[
        Mistake(_README["printed_value"],
                "That is the size in GiB (bytes / 2^30), which is also the README's figure: the question asks "
                "for SI GB, bytes / 10^9."),
        Mistake(nominal_params("llama-3-8b") * 2 / units.GB,
                "You used the nominal 8B from the name; the real count is in course_lib.", rel_tol=0.001),
        Mistake(_LLAMA3 / units.GB,
                "That is the parameter count in billions; half-precision weights take 2 bytes each."),
        Mistake(_LLAMA3 * _FP32 / units.GB,
                "That is the single-precision (fp32) size, 4 bytes per weight; half precision takes 2."),
    ],
    hints=["bytes = parameters x 2 for fp16.", "SI GB: divide the bytes by 10^9."],
    solution=(f"{_LLAMA3:,} x 2 B = {_LLAMA3_FP16:,.0f} B = {units.format_bytes(_LLAMA3_FP16, digits=4)} "
              f"= {units.format_bytes(_LLAMA3_FP16, 'iec', digits=4)}. The README's figure matches the "
              f"GiB reading: its 'GB' is 1024-based."),
)

_OPTIONS = ("GB = 10^9 bytes (SI)", "GiB = 2^30 bytes", "gigabits (10^9 bits)", "billions of parameters")
q9 = ChoiceQuestion(
    id="q9", set=SET, points=1,
    objective="O6 spot unit traps in published figures",
    prompt=(f"Compare your answer to q8 with the README's '{_README_TEXT}'. Which unit does the README's 'GB' "
            f"actually measure? Answer with one of the option strings: {', '.join(repr(o) for o in _OPTIONS)}."),
    expected=_OPTIONS[1], options=_OPTIONS,
    mistakes=[
        Mistake(_OPTIONS[0], "If the README's GB were SI, its figure would equal your q8 answer. It is about 7% "
                             "smaller: the bytes were divided by 2^30, not 10^9."),
        Mistake(_OPTIONS[2], "Gigabits would make the number 8 times larger than the size in GB, not a few "
                             "percent smaller."),
        Mistake(_OPTIONS[3], "The model has about 8 billion parameters; the README's number is a size in "
                             "bytes (f16 weights take 2 bytes each)."),
    ],
    hints=["Divide your q8 bytes by 2^30 and compare with the README.",
           "Which divisor reproduces the README's number: 10^9 or 2^30?"],
    solution=(f"{_LLAMA3_FP16:,.0f} B / 2^30 = {units.format_bytes(_LLAMA3_FP16, 'iec', digits=4)}, the README's "
              f"number: its 'GB' is a GiB. In SI the file is {units.format_bytes(_LLAMA3_FP16, digits=4)}."),
)

QUESTIONS = [q1, q2, q3, q4, q5, q6, q7, q8, q9]
