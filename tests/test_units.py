"""Tests for course_lib.core.units: the course's own numbers, the traps, errors, and round trips."""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.core import units as u
from course_lib.core.units import (
    GB, KB, MB, PB, TB, GiB, KiB, MiB, PiB, TiB, SOURCE_TABLE, Quantity,
    accepted_units, format_bandwidth, format_bytes, format_flop_rate, format_flops, format_params,
    format_quantity, format_time, parse_bandwidth, parse_bytes, parse_flop_rate, parse_flops,
    parse_params, parse_quantity, parse_time,
)


# --- constants ----------------------------------------------------------------------------------
def test_constants():
    assert (KB, MB, GB, TB, PB) == (10**3, 10**6, 10**9, 10**12, 10**15)
    assert (KiB, MiB, GiB, TiB, PiB) == (2**10, 2**20, 2**30, 2**40, 2**50)


def test_source_table():
    assert [r.label for r in SOURCE_TABLE] == ["KB", "MB", "GB", "TB"]
    assert [r.iec_label for r in SOURCE_TABLE] == ["KiB", "MiB", "GiB", "TiB"]
    assert [r.bytes for r in SOURCE_TABLE] == [1024, 1024**2, 1024**3, 1024**4]
    assert [r.si_bytes for r in SOURCE_TABLE] == [1000, 1000**2, 1000**3, 1000**4]
    gb = SOURCE_TABLE[2]
    assert gb.ratio == pytest.approx(1.073741824, rel=1e-15)
    assert gb.percent_larger == pytest.approx(7.3741824)
    for row in SOURCE_TABLE:  # the table agrees with the parser
        assert parse_bytes(f"1 {row.label}", convention="source") == row.bytes
        assert parse_bytes(f"1 {row.iec_label}") == row.bytes
        assert parse_bytes(f"1 {row.label}") == row.si_bytes


# --- the course's numbers -------------------------------------------------------------------------
def test_fourteen_gigabytes():
    assert parse_bytes("14 GB") == 14e9 == 14 * GB
    assert format_bytes(14e9) == "14 GB"
    assert format_bytes(14e9, "iec", 4) == "13.04 GiB"
    assert format_bytes(14e9, "iec") == "13 GiB"
    assert format_bytes(14e9, system="iec", digits=5) == "13.039 GiB"
    assert parse_bytes("13.04 GiB") == pytest.approx(14e9, rel=5e-4)
    assert parse_quantity("14 GB") == Quantity(14e9, "bytes")


def test_kv_cache_numbers():
    assert parse_bytes("128 KiB") == 131072 == 128 * KiB
    assert format_bytes(131072, "iec") == "128 KiB"
    assert format_bytes(131072) == "131 kB"
    assert format_bytes(131072 * 1000) == "131 MB"
    assert format_bytes(131072 * 1000, "iec") == "125 MiB"
    assert parse_bytes("125 MiB") == 131072 * 1000


def test_bandwidth_numbers():
    assert parse_bandwidth("1008 GB/s") == 1.008e12
    assert parse_bandwidth("4.8 TB/s") == 4.8e12
    assert parse_bandwidth("1.935 TB/s") == 1.935e12
    assert parse_bandwidth("800 GiB/s") == 800 * GiB
    assert parse_bandwidth("100 Gbit/s") == parse_bandwidth("100 Gb/s") == parse_bandwidth("100 Gbps") == 12.5e9
    assert parse_bandwidth("25 GBps") == 25e9
    assert parse_bandwidth("2 GB per second") == parse_bandwidth("2 GB / sec") == 2e9
    assert format_bandwidth(1.008e12, unit="GB/s") == "1008 GB/s"
    assert format_bandwidth(1.008e12) == "1.01 TB/s"
    assert format_bandwidth(1.008e12, digits=4) == "1.008 TB/s"
    assert format_bandwidth(4.8e12) == "4.8 TB/s"
    assert format_bandwidth(800 * GiB, "iec") == "800 GiB/s"
    assert format_bandwidth(4.15e12, "source", 4) == "3.774 TB/s"


def test_times():
    assert parse_time("13.9 ms") == 0.0139
    assert parse_time("42.94 us") == parse_time("42.94 µs") == parse_time("42.94 μs") == 42.94e-6
    assert parse_time("1.2 s") == 1.2
    assert parse_time("300 ns") == 300e-9
    assert parse_time("2 min") == 120
    assert parse_time("1 h") == 3600
    assert parse_time("5 milliseconds") == 0.005
    assert format_time(0.0139) == "13.9 ms"
    assert format_time(42.94e-6, digits=4) == "42.94 µs"
    assert format_time(3e-7) == "300 ns"
    assert format_time(1.2) == "1.2 s"
    assert format_time(120) == "120 s"
    assert format_time(0) == "0 s"
    assert format_time(0.0139, unit="s") == "0.0139 s"


def test_params():
    cases = {
        "7B": 7e9, "7.24B": 7.24e9, "124.4M": 124.4e6, "70b": 70e9, "1.5T": 1.5e12,
        "7 billion": 7e9, "671e9": 671e9, "7B params": 7e9, "13 billion parameters": 13e9,
        "125m": 125e6, "500K": 5e5, "6,738,415,616": 6738415616,
    }
    for text, expected in cases.items():
        assert parse_params(text) == expected, text
    assert format_params(7.24e9) == "7.24B"
    assert format_params(124.4e6) == "124M"
    assert format_params(124.4e6, digits=4) == "124.4M"
    assert format_params(671e9) == "671B"
    assert format_params(1.5e12) == "1.5T"
    assert format_params(512) == "512"


def test_flops():
    assert parse_flops("2 TFLOP") == 2e12
    assert parse_flops("14 GFLOPs") == 14e9
    assert parse_flop_rate("312 TFLOP/s") == 312e12
    assert parse_flop_rate("989 TFLOPS") == 989e12
    assert parse_flop_rate("989 TFLOPs/s") == 989e12
    assert format_flops(2e12) == "2 TFLOP"
    assert format_flop_rate(312e12) == "312 TFLOP/s"
    assert format_flop_rate(989e12) == "989 TFLOP/s"
    assert format_flop_rate(0.6 * 312e12) == "187 TFLOP/s"
    # FLOPS (capital S) is a rate, so it is not a count, and vice versa
    with pytest.raises(ValueError, match="FLOP rate"):
        parse_flops("989 TFLOPS")
    with pytest.raises(ValueError, match="FLOP count"):
        parse_flop_rate("14 GFLOPs")
    with pytest.raises(ValueError, match="lower-case s"):
        parse_flop_rate("989 tflops")


# --- the units trap and bits vs bytes -------------------------------------------------------------
def test_source_gigabytes_trap():
    """The benchmark README's '14.96 GB' for Llama-3-8B f16 is 14.96 GiB = 16.06 GB."""
    size = parse_bytes("14.96 GB", convention="source")
    assert size == 14.96 * GiB == parse_bytes("14.96 GiB")
    assert parse_bytes("14.96 GB", convention="jedec") == size
    assert format_bytes(size, digits=4) == "16.06 GB"
    assert format_bytes(size, "source", 4) == "14.96 GB"
    assert format_bytes(size, "jedec", 4) == "14.96 GB"
    assert parse_bytes("14.96 GB") == 14.96e9  # SI reading
    assert size / parse_bytes("14.96 GB") == pytest.approx(GiB / GB)
    # only the upper-case decimal labels change meaning
    assert parse_bytes("1 kB", convention="source") == 1000
    assert parse_bytes("1 KB", convention="source") == 1024
    assert parse_bytes("1 KB") == 1000
    assert parse_bytes("1 MiB", convention="si") == MiB
    assert parse_bytes("1 Gb", convention="source") == 1e9 / 8  # bits stay decimal


def test_bits_versus_bytes():
    assert parse_bytes("8 b") == parse_bytes("8 bit") == parse_bytes("8 bits") == 1
    assert parse_bytes("1 Gb") == parse_bytes("1 Gbit") == parse_bytes("1 gigabit") == 1.25e8
    assert parse_bytes("1 GB") == 8 * parse_bytes("1 Gb")
    assert parse_bytes("1 Gib") == GiB / 8
    assert parse_bytes("1 kb") == parse_bytes("1 Kb") == 125
    with pytest.raises(ValueError) as info:
        parse_bytes("14 gb")
    assert "'GB'" in str(info.value) and "'Gb'" in str(info.value) and "bit" in str(info.value)


def test_words_and_spacing():
    assert parse_bytes("14GB") == parse_bytes("  14   GB ") == parse_bytes("14 gigabytes") == 14e9
    assert parse_bytes("2 Gibibytes") == 2 * GiB
    assert parse_bytes("1 byte") == 1
    assert parse_bytes("1,024 B") == parse_bytes("1_024 B") == parse_bytes("1024") == 1024
    assert parse_bytes("131,072,000 B") == 131072000
    assert parse_bytes("1.4e10 B") == 1.4e10
    assert parse_bytes(".5 kB") == 500
    assert parse_bytes("+3 B") == 3
    assert parse_bytes("-0 B") == 0


def test_numbers_pass_through():
    assert parse_bytes(14e9) == 14e9
    assert parse_bytes(131072) == 131072
    assert parse_time(0.0139) == 0.0139
    assert parse_params(7) == 7
    np = pytest.importorskip("numpy")
    assert parse_bandwidth(np.float64(1.008e12)) == 1.008e12
    assert parse_quantity(np.int64(3)) == Quantity(3, "number")


# --- parse_quantity -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, value, dimension",
    [
        ("14 GB", 14e9, "bytes"),
        ("13.04 GiB", 13.04 * GiB, "bytes"),
        ("1008 GB/s", 1.008e12, "bandwidth"),
        ("13.9 ms", 0.0139, "time"),
        ("2 TFLOP", 2e12, "flops"),
        ("989 TFLOPS", 989e12, "flop_rate"),
        ("312 TFLOP/s", 312e12, "flop_rate"),
        ("124.4M", 124.4e6, "params"),
        ("7 billion", 7e9, "params"),
        ("7.24B params", 7.24e9, "params"),
        ("42", 42, "number"),
        ("1.5e3", 1500, "number"),
        ("7B", 7, "bytes"),  # documented: B alone is a byte without a dimension hint
    ],
)
def test_parse_quantity(text, value, dimension):
    q = parse_quantity(text)
    assert q.dimension == dimension
    assert q.value == value


def test_parse_quantity_with_dimension_hint():
    assert parse_quantity("7B", dimension="params") == Quantity(7e9, "params")
    assert parse_quantity("70b", "params").value == 70e9
    assert parse_quantity("14e9", "bytes") == Quantity(14e9, "bytes")
    assert parse_quantity(5, "time") == Quantity(5, "time")
    assert parse_quantity("14.96 GB", "bytes", convention="source").value == 14.96 * GiB
    assert parse_quantity("3", "number") == Quantity(3, "number")
    with pytest.raises(ValueError, match="plain number"):
        parse_quantity("3 GB", "number")
    with pytest.raises(ValueError, match="time"):
        parse_quantity("14 GB", "time")
    with pytest.raises(ValueError, match="dimension"):
        parse_quantity("14 GB", "length")


def test_quantity_object():
    q = parse_quantity("14 GB")
    assert str(q) == "14 GB" == format_quantity(q)
    assert q.format(digits=2) == "14 GB"
    assert str(parse_quantity("13.9 ms")) == "13.9 ms"
    assert str(parse_quantity("7B", "params")) == "7B"
    assert str(Quantity(0.5, "number")) == "0.5"
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.value = 1
    with pytest.raises(ValueError, match="value"):
        Quantity(-1, "bytes")
    with pytest.raises(ValueError, match="dimension"):
        Quantity(1, "furlongs")
    with pytest.raises(TypeError):
        format_quantity("14 GB")


# --- errors ---------------------------------------------------------------------------------------
def test_misspelt_unit_suggests_and_lists_units():
    with pytest.raises(ValueError) as info:
        parse_bytes("14 GBs")
    msg = str(info.value)
    assert "text" in msg and "'GBs'" in msg
    assert "Did you mean 'GB'" in msg
    assert "Accepted units" in msg and "GiB" in msg
    with pytest.raises(ValueError, match="Did you mean 'ms'"):
        parse_time("13.9 MS")
    with pytest.raises(ValueError, match="Did you mean 'GB'"):
        parse_quantity("14 GBs")


def test_unit_of_another_dimension_is_named():
    with pytest.raises(ValueError, match="is a unit of a time"):
        parse_bytes("13.9 ms")
    with pytest.raises(ValueError, match="bandwidth"):
        parse_bytes("1008 GB/s")
    with pytest.raises(ValueError, match="size in bytes"):
        parse_bandwidth("14 GB")


@pytest.mark.parametrize(
    "text",
    ["-3 GB", "\u22123 GB", "-1", "nan GB", "inf GB", "", "   ", "GB", "14 GB each", "1,5 GB",
     "1,0245 B", "1e400 B", "1e308 PB", "1.2.3 GB", "٣ GB"],
)
def test_bad_text_raises_value_error(text):
    with pytest.raises(ValueError, match="text"):
        parse_bytes(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, -1e-9])
def test_bad_numbers_raise_value_error(value):
    with pytest.raises(ValueError, match="text"):
        parse_bytes(value)


@pytest.mark.parametrize("value", [None, [14], b"14 GB", True, {"GB": 14}, 3j])
def test_wrong_types_raise_type_error(value):
    for parse in (parse_bytes, parse_time, parse_params, parse_quantity):
        with pytest.raises(TypeError, match="text must be a str"):
            parse(value)


def test_format_argument_errors():
    with pytest.raises(ValueError, match="n must be >= 0"):
        format_bytes(-1)
    with pytest.raises(ValueError, match="finite"):
        format_time(float("inf"))
    with pytest.raises(TypeError, match="n must be"):
        format_bytes("14 GB")
    with pytest.raises(ValueError, match="digits"):
        format_bytes(14e9, digits=0)
    with pytest.raises(ValueError, match="system"):
        format_bytes(14e9, system="binary")
    with pytest.raises(ValueError, match="convention"):
        parse_bytes("14 GB", convention="iec")
    with pytest.raises(ValueError, match="unit 'ms'"):
        format_bytes(14e9, unit="ms")
    with pytest.raises(TypeError, match="unit"):
        format_bytes(14e9, unit=3)


# --- the printing rule ----------------------------------------------------------------------------
def test_printing_rule():
    assert format_bytes(0) == "0 B"
    assert format_bytes(0.5) == "0.5 B"
    assert format_bytes(999) == "999 B"
    assert format_bytes(1000) == "1 kB"
    assert format_bytes(1000, "iec") == "1000 B"  # integer digits are never rounded away
    assert format_bytes(1023.9 * KiB, "iec") == "1 MiB"  # rounding reached the next unit
    assert format_bytes(999.96e6, digits=4) == "1 GB"
    assert format_bytes(999.94e6, digits=4) == "999.9 MB"
    assert format_bytes(14.2e9, digits=2) == "14 GB"
    assert format_bytes(14220787712, digits=4) == "14.22 GB"
    assert format_bytes(2e18) == "2000 PB"  # beyond the largest unit: still exact integer part
    assert format_bytes(14e9, unit="MB") == "14000 MB"
    assert format_bytes(14e9, unit="Gb") == "112 Gb"


def test_accepted_units_all_parse():
    for dim in ("bytes", "bandwidth", "time", "params", "flops", "flop_rate"):
        units = accepted_units(dim)
        assert units, dim
        for unit in units:
            one = u._parse(f"1 {unit}", dim)
            assert one > 0
            assert u._parse(f"2.5 {unit}", dim) == pytest.approx(2.5 * one, rel=1e-15)
    assert accepted_units("number") == []
    assert "KB" in accepted_units("bytes", "source")


# --- properties -----------------------------------------------------------------------------------
def _rel_tol(digits: int) -> float:
    """The printing rule loses at most half a unit in the last printed digit."""
    return 0.5 * 10.0 ** (1 - digits) * (1 + 1e-9)


_sizes = st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e21))
_digits = st.integers(min_value=1, max_value=8)


@given(value=_sizes, system=st.sampled_from(["si", "iec", "source"]), digits=_digits)
def test_bytes_round_trip(value, system, digits):
    text = format_bytes(value, system, digits)
    back = parse_bytes(text, convention="source" if system == "source" else "si")
    assert back == pytest.approx(value, rel=_rel_tol(digits), abs=0), text


@given(value=_sizes, system=st.sampled_from(["si", "iec", "source"]), digits=_digits)
def test_bandwidth_round_trip(value, system, digits):
    text = format_bandwidth(value, system, digits)
    back = parse_bandwidth(text, convention="source" if system == "source" else "si")
    assert back == pytest.approx(value, rel=_rel_tol(digits), abs=0), text


@given(
    value=st.one_of(st.just(0.0), st.floats(min_value=1e-13, max_value=1e7)),
    digits=_digits,
)
def test_time_round_trip(value, digits):
    text = format_time(value, digits)
    assert parse_time(text) == pytest.approx(value, rel=_rel_tol(digits), abs=0), text


@given(value=st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1e16)), digits=_digits)
def test_params_round_trip(value, digits):
    text = format_params(value, digits)
    assert parse_params(text) == pytest.approx(value, rel=_rel_tol(digits), abs=0), text
    assert parse_quantity(text, "params").value == parse_params(text)


@given(value=st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1e25)), digits=_digits)
def test_flops_round_trip(value, digits):
    count, rate = format_flops(value, digits), format_flop_rate(value, digits)
    assert parse_flops(count) == pytest.approx(value, rel=_rel_tol(digits), abs=0), count
    assert parse_flop_rate(rate) == pytest.approx(value, rel=_rel_tol(digits), abs=0), rate
    assert parse_quantity(count).dimension == "flops"
    assert parse_quantity(rate).dimension == "flop_rate"


@given(value=st.floats(min_value=1.0, max_value=1e21), digits=_digits)
def test_quantity_reads_what_format_prints(value, digits):
    for fmt, dim in ((format_bytes, "bytes"), (format_bandwidth, "bandwidth"), (format_time, "time"),
                     (format_flops, "flops"), (format_flop_rate, "flop_rate")):
        q = parse_quantity(fmt(value, digits=digits))
        assert q.dimension == dim
        assert q.value == pytest.approx(value, rel=_rel_tol(digits))


@given(value=st.floats(min_value=1e-6, max_value=1e21), system=st.sampled_from(["si", "iec", "source"]))
def test_format_picks_largest_unit_at_least_one(value, system):
    text = format_bytes(value, system, 3)
    number = float(text.split()[0])
    step = 1000 if system == "si" else 1024
    assert number >= 1 or value < 1
    if not text.endswith(" PB") and not text.endswith(" PiB"):
        assert number < step


_PARSERS = [parse_bytes, parse_params, parse_bandwidth, parse_time, parse_flops, parse_flop_rate,
            parse_quantity]
_unit_like = st.text(alphabet=st.sampled_from(list("kKMGTPEiBbsFLOPflop/ µμnmuhr,._e-+0123456789")), max_size=10)


@given(text=st.one_of(
    st.text(),
    st.builds(lambda n, unit: f"{n}{unit}", st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)),
    st.builds(lambda n, sp, unit: f"{n}{sp}{unit}", st.integers(-10**30, 10**30), st.sampled_from(["", " "]),
              _unit_like),
))
def test_parsers_raise_only_value_or_type_error(text):
    for parse in _PARSERS:
        try:
            result = parse(text)
        except (ValueError, TypeError):
            continue
        value = result.value if isinstance(result, Quantity) else result
        assert isinstance(value, float)
        assert math.isfinite(value) and value >= 0
