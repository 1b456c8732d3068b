"""The app's texts say what is true (issue 31): the all-reduce message names what binds, the serving table shows
one copy's share of the rate and says when its short simulation is not representative, both latency targets
read a bare number in one unit, a value that was read but is refused is not "could not read", an unused link field
blanks nothing, and a CPU is no GPU."""
from __future__ import annotations

import re

import pytest

from course_lib.core.app import (SIM_STEADY_FACTOR, device_word, memory_words, parse_link_bandwidth,
                                 parse_time_field, reading, serving_reading)
from course_lib.core.capstone import DashboardState
from course_lib.core.hardware import get_hardware
from course_lib.lessons.widgets.capstone import serving_html


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_all_reduce_message_names_what_binds():
    fast = reading(dict(model="qwen3-0.6b", hardware="h100-sxm", tensor_parallel=8, interconnect_bandwidth="1e6"))
    (w,) = fast.warnings
    assert "fixed latency binds" in w and "would not help" in w and "Check the link bandwidth" not in w
    slow = reading(dict(model="llama-3-70b", hardware="h100-sxm", tensor_parallel=8, interconnect_bandwidth="0.5"))
    (w,) = slow.warnings
    assert w.startswith("The link dominates") and "Check the link bandwidth" in w


def test_the_serving_table_shows_one_copys_share_and_when_the_run_is_too_short():
    s = serving_reading(DashboardState(), 100, 1.0, 0.05)
    text = _text(serving_html(s))
    assert s.replicas > 1 and s.share_rate == pytest.approx(100 / s.replicas)
    assert f"one GPU's share, {s.share_rate:.3g} requests/s" in text
    assert s.requests < SIM_STEADY_FACTOR * s.in_flight / s.replicas and s.representative is False
    assert "Not representative of the steady state" in text and "meets both targets in this short run" in text
    assert "1,108 requests in flight" in text or f"{s.in_flight:,.0f} requests in flight" in text


def test_both_targets_read_a_bare_number_in_ms_and_refusals_say_what_was_read():
    assert parse_time_field("800", "ms", "p99 TTFT target") == pytest.approx(0.8)
    with pytest.raises(ValueError, match="'0' reads as 0 s; type a time above zero"):
        parse_time_field("0", "ms", "p99 TTFT target")
    with pytest.raises(ValueError, match="could not read 'abc'"):
        parse_time_field("abc", "ms", "p99 TTFT target")
    with pytest.raises(ValueError, match="'0' reads as 0 B/s"):
        parse_link_bandwidth("0")


def test_an_unused_link_field_blanks_nothing():
    r = reading(dict(model="llama-3-8b", hardware="h100-sxm", tensor_parallel=1, interconnect_bandwidth="zzz"))
    assert r.priced and r.ttft_text and "not used with one GPU" in r.warnings[0]
    r8 = reading(dict(model="llama-3-8b", hardware="h100-sxm", tensor_parallel=8, interconnect_bandwidth="zzz"))
    assert not r8.priced and "could not read 'zzz'" in r8.problem


def test_a_cpu_or_unified_memory_is_no_gpu():
    assert device_word(get_hardware("h100-sxm")) == "GPU"
    assert device_word(get_hardware("m2-ultra")) == "device"
    assert memory_words(get_hardware("m2-ultra")) == "of the device's memory"


def test_the_engine_line_says_what_prices_the_times():
    from course_lib.core.app import FLOOR_TEXT
    from course_lib.core.forecast import decode_step_terms, get_profile
    from course_lib.core.units import format_time

    floor = reading(dict(model="llama-3-8b", hardware="rtx-4090", precision="q4_k_m"))
    assert floor.engine_text == FLOOR_TEXT and "floor" in floor.engine_text
    r = reading(dict(model="llama-3-8b", hardware="rtx-4090", precision="q4_k_m", engine="llama.cpp"))
    e = r.result.estimate
    assert r.priced and r.tpot_text == format_time(e.tpot) != floor.tpot_text
    t = decode_step_terms(e)
    # the step's parts add up to the profile's last decode step, and the line quotes them and the floor
    assert t["fixed"] + t["weights"] + t["matmuls"] + t["attention"] == pytest.approx(e.tpot_last, rel=1e-12)
    text = r.engine_text
    assert text.startswith(f"The llama.cpp profile, fitted to {get_profile('llama.cpp').points:,} published")
    for key in ("fixed", "weights", "matmuls", "attention"):
        assert format_time(t[key]) in text, key
    assert f"against the floor's {format_time(e.floor_ttft)}" in text and "GDDR memory" in text
    assert f"({e.tpot / e.floor_tpot:.2f}x)" in text


def test_with_an_engine_the_serving_plan_uses_the_profile_and_says_why_it_is_not_simulated():
    s = serving_reading(DashboardState(engine="vLLM"), 100, 1.0, 0.05)
    floor = serving_reading(DashboardState(), 100, 1.0, 0.05)
    assert s.simulated is None and "prices its steps at the floor" in s.sim_note and floor.simulated is not None
    assert s.plan.tpot > floor.plan.tpot and s.gpus > floor.gpus
    assert "prices its steps at the floor" in _text(serving_html(s))
