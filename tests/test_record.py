"""course_lib.measure.record: live, record and replay of lesson measurements (no timing: fake measuring functions)."""
from __future__ import annotations

import json
import math

import pytest

from course_lib.core.quality import TimingSummary
from course_lib.measure import record
from course_lib.measure.device import fast_mode
from course_lib.measure.probes import GemvTable


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(record.ENV, raising=False)
    record.reset()
    yield
    record.reset()


def _use(monkeypatch, kind, path):
    monkeypatch.setenv(record.ENV, f"{kind}:{path}")
    record.reset()


def test_live_calls_the_function_each_time():
    calls = []
    assert record.measured("05/x", lambda a, b=0: calls.append((a, b)) or a + b, 1, b=2) == 3
    assert record.measured("05/x", lambda: 7) == 7
    assert record.mode() == ("live", None)


def test_record_then_replay_returns_the_same_values_in_order(tmp_path, monkeypatch):
    values = iter([1.5, 2.5])
    summary = TimingSummary(median=0.002, q1=0.0019, q3=0.0021, minimum=0.0018, repeats=5)
    _use(monkeypatch, "record", tmp_path)
    assert record.measured("06/step", lambda: next(values)) == 1.5
    assert record.measured("06/step", lambda: next(values)) == 2.5
    record.measured("06/mixed", lambda: {"a": (1, 2), 3: [math.inf], "s": summary})
    data = json.loads((tmp_path / "06.json").read_text())
    assert data["schema"] == 1 and set(data["results"]) == {"06/step", "06/mixed"}

    _use(monkeypatch, "replay", tmp_path)
    never = lambda: pytest.fail("replay must not measure")  # noqa: E731
    assert record.measured("06/step", never) == 1.5
    assert record.measured("06/step", never) == 2.5
    mixed = record.measured("06/mixed", never)
    assert mixed["a"] == (1, 2) and mixed[3] == [math.inf] and mixed["s"] == summary
    with pytest.raises(record.RecordingError, match="no measurement '06/step' \\(call 3\\)"):
        record.measured("06/step", never)
    with pytest.raises(record.RecordingError, match="no measurement '06/other'"):
        record.measured("06/other", never)


def test_a_new_recording_replaces_the_old_run(tmp_path, monkeypatch):
    _use(monkeypatch, "record", tmp_path)
    record.measured("07/a", lambda: 1)
    _use(monkeypatch, "record", tmp_path)
    record.measured("07/b", lambda: 2)
    assert set(json.loads((tmp_path / "07.json").read_text())["results"]) == {"07/b"}


def test_replay_of_a_lesson_without_recording_measures_live(tmp_path, monkeypatch):
    _use(monkeypatch, "replay", tmp_path)
    assert record.measured("08/x", lambda: 42) == 42


def test_course_sequences_and_dataclasses_round_trip():
    table = GemvTable([])
    assert type(record.decode(json.loads(json.dumps(record.encode(table))))) is GemvTable


def test_replay_reports_the_recorded_fast_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_FAST", "0")
    _use(monkeypatch, "record", tmp_path)
    record.measured("05/a", lambda: 1)
    monkeypatch.setenv("COURSE_FAST", "1")
    _use(monkeypatch, "replay", tmp_path)
    assert fast_mode() is False


@pytest.mark.parametrize("raw", ["record", "replay:", "play:/tmp", ":x"])
def test_bad_environment_value_is_one_clear_error(monkeypatch, raw):
    monkeypatch.setenv(record.ENV, raw)
    with pytest.raises(ValueError, match=record.ENV):
        record.mode()


@pytest.mark.parametrize("key", ["05", "/x", "05/", 5])
def test_bad_key(key):
    with pytest.raises(ValueError, match="key"):
        record.measured(key, lambda: 1)


def test_only_course_classes_are_rebuilt():
    with pytest.raises(record.RecordingError, match="only rebuild course_lib"):
        record.decode({"__dataclass__": "os:stat_result", "fields": {}})
    with pytest.raises(TypeError, match="cannot record"):
        record.encode(object())


def test_dicts_replay_in_the_order_they_were_measured(tmp_path, monkeypatch):
    """A lesson printing dict.items() (e.g. matmul rates per dtype) prints the same rows under replay."""
    _use(monkeypatch, "record", tmp_path)
    record.measured("08/rates", lambda: {"fp32": 1.0, "fp16": 2.0, "bf16": 3.0})
    _use(monkeypatch, "replay", tmp_path)
    assert list(record.measured("08/rates", lambda: None)) == ["fp32", "fp16", "bf16"]
