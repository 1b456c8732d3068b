"""llama.cpp through llama-cpp-python (course_lib.measure.engines.llamacpp): GGUF files of random weights built
offline, their bytes read back, generate() timed, the prediction's arithmetic, the validate CLI, and the app's CPU
compute rate.

The tests that need llama-cpp-python and gguf (the ``llamacpp`` extra, ``make llamacpp``) skip with a reason when
they are missing, except under CI=true (or COURSE_REQUIRE_ALL=1), where .ci/run installs them and they must run.
Tiny files only (hidden 256, two layers, a vocabulary of 512): seconds in all. The benchmark's timing claims
live in ``python -m course_lib.measure.validate --engine llama.cpp``, never here.
"""
from __future__ import annotations

import math
import sys
import types

import pytest

from conftest import strict_tools
from course_lib.core.hardware import custom_hardware
from course_lib.measure.engines import llamacpp as L

needs_llamacpp = pytest.mark.skipif(
    not L.llamacpp_available() and not strict_tools(),
    reason="llama-cpp-python and gguf are not installed (make llamacpp); required under CI=true")

TINY = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 512, "tie_word_embeddings": True,
        "max_position_embeddings": 512}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The tiny model in f16 and the three quantized formats, in a cache of this test module's own."""
    import os
    old = os.environ.get("COURSE_GGUF_CACHE")
    os.environ["COURSE_GGUF_CACHE"] = str(tmp_path_factory.mktemp("gguf"))
    try:
        yield {f: L.build_gguf(TINY, f) for f in L.FORMATS}
    finally:
        if old is None:
            os.environ.pop("COURSE_GGUF_CACHE", None)
        else:
            os.environ["COURSE_GGUF_CACHE"] = old


# --- shapes and configurations (no llama.cpp needed) -----------------------------------------------------
def test_catalog_shapes_count_the_published_parameters():
    assert L.shape_of("llama-3.2-1b").params == 1_235_814_400
    assert L.shape_of("llama-3.2-3b").params == L.gguf_configs()["llama-3.2-3b"]["params"] == 3_212_749_824
    cut = L.shape_of("llama-3.2-3b", layers=4)
    assert cut.layers == 4 and cut.name == "llama-3.2-3b-4L" and cut.hidden == 3072


def test_bad_configurations_get_one_clear_error():
    with pytest.raises(ValueError, match="model_type"):
        L.shape_of("gpt2")
    with pytest.raises(ValueError, match="config"):
        L.shape_of("no-such-model")
    with pytest.raises(ValueError, match="vocab_size"):
        L.shape_of({**TINY, "vocab_size": 100})
    with pytest.raises(ValueError, match="num_key_value_heads"):
        L.shape_of({**TINY, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="fmt"):
        L.build_gguf(TINY, "q3_k_xs")


def test_vocabulary_holds_the_byte_tokens():
    tokens, scores, kinds = L.vocabulary(300)
    assert len(tokens) == len(scores) == len(kinds) == 300
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)] and set(kinds[3:259]) == {6}
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]


def test_nominal_bytes_undercount_what_a_q4_k_m_file_holds_relation():
    """The course's nominal q4_k_m bytes per weight against q4_0's: both below f16's, q4_0 the smallest."""
    s = L.shape_of("llama-3.2-1b")
    f16, q8, q4, qk = (L.shape_nominal_bytes(s, f) for f in ("f16", "q8_0", "q4_0", "q4_k_m"))
    assert f16 > q8 > qk > q4 > 0
    assert math.isclose(f16, 2 * (s.params - s.vocab * s.hidden - (2 * s.layers + 1) * s.hidden)
                        + 2 * s.vocab * s.hidden, rel_tol=1e-9)


def test_prediction_adds_bytes_over_rates():
    held = L.GGUFBytes("x.gguf", (("token_embd.weight", "Q6_K", 1000, 820), ("blk.0.attn_q.weight", "Q4_K", 4000, 2250),
                                  ("blk.0.attn_norm.weight", "F32", 10, 40)), 128, 1, 100, 10)
    rates = L.EngineRates(1, 64, {"F16": 1e9, "Q4_K": 2e9, "Q6_K": 1e9}, {"F16": 1e10, "Q4_K": 2e10, "Q6_K": 1e10},
                          1e-4, 2e-3, 100)
    assert held.tied and held.by_type == {"Q4_K": 2250, "F32": 40, "Q6_K": 820}
    p = L.predict_gguf_tpot(held, rates, context=10)
    assert math.isclose(p.seconds, 2250 / 2e9 + 40 / 1e9 + 820 / 1e9 + 10 * 128 / 1e9 + 1e-4)
    t = L.predict_gguf_ttft(held, rates, 64)
    assert math.isclose(t.seconds, 2 * 64 * 4000 / 2e10 + 820 / 1e9 + 2e-3)
    with pytest.raises(ValueError, match="Q8_0"):
        L.predict_gguf_tpot(L.GGUFBytes("y", (("token_embd.weight", "Q8_0", 10, 10),), 1, 1, 1, 1), rates)


def _probe_file(name, ty, layers, n=10**8, nb_per=None):
    """A synthetic probe file: ``layers`` matrices of ``n`` elements of ``ty`` (bytes ``nb_per`` each), a tied
    output of 10**6 elements."""
    nb = nb_per or 2 * n
    return L.GGUFBytes(name, (("token_embd.weight", ty, 10**6, nb // 100),
                              *((f"blk.{i}.ffn_up.weight", ty, n, nb) for i in range(layers))), 0, layers, 512, 2048)


def _timing(held, decode_rate, prefill_rate, step_fixed, prefill_fixed, prompt=64, disturb=1.0,
            wobble=(1.0, 1.0, 1.03)):
    from course_lib.measure.engines.hf import EngineTiming
    step = step_fixed + held.decode_bytes / decode_rate
    ttft = prefill_fixed + 2 * prompt * sum(held.prefill_params_by_type().values()) / prefill_rate \
        + held._output()[3] / decode_rate
    return EngineTiming(prompt, 8, tuple(ttft * w * disturb for w in wobble),
                        tuple(step * w * disturb for w in wobble for _ in range(7)))


def test_engine_rates_recover_the_rates_and_one_disturbed_file_does_not_move_the_decode_rate():
    rates = {"F16": (30e9, 200e9), "Q4_K": (25e9, 250e9)}
    fixed = (4e-4, 1e-3)
    tiny = _probe_file("tiny", "F16", 1, n=64 * 64)

    def timed(disturb=1.0, which=5):
        return {t: [(h, _timing(h, *rates[t], *fixed, disturb=disturb if layers == which else 1.0))
                    for layers in (5, 16) for h in [_probe_file(f"{t}{layers}", t, layers,
                                                                nb_per=2 * 10**8 if t == "F16" else 56 * 10**6)]]
                for t in rates}
    tt = _timing(tiny, *rates["F16"], *fixed, wobble=(1.0, 1.5, 40.0))    # its fastest step and prefill count
    decode, prefill, sf, pf = L.engine_rates_from_timings(tiny, tt, timed(), 64)
    for t, (d, p) in rates.items():
        assert math.isclose(decode[t], d, rel_tol=1e-6) and math.isclose(prefill[t], p, rel_tol=1e-6)
    assert math.isclose(sf, fixed[0], rel_tol=1e-6) and math.isclose(pf, fixed[1], rel_tol=1e-6)
    # one file's every step 2.5x slower (a file disturbed throughout): the decode rates stay those of the other,
    # where the two files' times apart give a rate far too high (5 layers disturbed) or too low (16)
    for which in (5, 16):
        got = L.engine_rates_from_timings(tiny, tt, timed(2.5, which), 64)
        for t, (d, p) in rates.items():
            assert math.isclose(got[0][t], d, rel_tol=1e-6)
            [(ha, ta), (hb, tb)] = timed(2.5, which)[t]
            apart = (hb.decode_bytes - ha.decode_bytes) / (tb.tpot - ta.tpot)
            assert apart > 2 * d if which == 5 else apart < d / 2
    with pytest.raises(ValueError, match="F16"):
        L.engine_rates_from_timings(tiny, tt, {"Q4_K": timed()["Q4_K"]}, 64)
    with pytest.raises(ValueError, match="two probe files"):
        L.engine_rates_from_timings(tiny, tt, {**timed(), "Q4_K": timed()["Q4_K"][:1]}, 64)


def test_median_rate_refuses_what_has_no_rate():
    assert math.isclose(L.median_rate([(3.0, 1.0), (5.0, 2.0), (100.0, 1.0)], fixed=1.0), 0.5)
    assert math.isclose(L.fastest_rate([[(3.0, 1.0)], [(9.0, 2.0)]], fixed=1.0), 0.5)
    with pytest.raises(ValueError, match="at least one probe file"):
        L.fastest_rate([])
    with pytest.raises(ValueError, match="at least one"):
        L.median_rate([])
    with pytest.raises(ValueError, match="work > 0"):
        L.median_rate([(1.0, 0.0)])
    with pytest.raises(ValueError, match="fixed cost is larger"):
        L.median_rate([(1.0, 1.0)], fixed=2.0)
    with pytest.raises(TypeError, match="pairs"):
        L.median_rate([("a", 1)])


def test_report_form_matches_the_hf_engine():
    from course_lib.measure.benchmarks import engine_llamacpp as B
    pred = L.GGUFPrediction("tpot", 0.011, {"weights Q4_K": 0.01, "fixed": 0.001})
    pts = [B.LlamaPoint("tpot", "m", "q4_0", 1, 10**9, 64, 0.011, 0.010, 0.02, "reliable", 0.009, pred),
           B.LlamaPoint("ttft", "m", "q4_0", 1, 10**9, 64, 0.5, 0.55, 0.02, "reliable", None, pred)]
    rep = B.LlamaReport(pts, {}, {1: 1e10}, {}, (1,), "1 thread", 1.0)
    assert B.LAST_LINE_RE.match(rep.last_line())
    assert rep.tpot_max_abs_error == pytest.approx(0.1) and rep.ttft_max_abs_error == pytest.approx(0.05 / 0.55)
    assert "q4_0" in rep.table() and rep.table().splitlines()[0].split()[:3] == ["phase", "model", "format"]
    # a TTFT has no uncalibrated estimate here: the table says so with a dash, never "nan"
    ttft_row = next(line for line in rep.table().splitlines() if line.startswith("TTFT"))
    assert "nan" not in rep.table().lower() and ttft_row.split()[-2:] == ["–", "–"]


def test_a_point_is_judged_by_the_one_rule_on_its_repeats():
    """judged_point: the benchmark's points are judged by bracket.judge on their repeats and probe sets."""
    from course_lib.measure.benchmarks import engine_llamacpp as B
    from course_lib.measure.engines.hf import EngineTiming
    shape = L.shape_of(TINY)
    held = _probe_file("m.gguf", "Q4_K", 4, nb_per=56 * 10**6)
    rates = L.EngineRates(2, 64, {"F16": 30e9, "Q4_K": 25e9}, {"F16": 200e9, "Q4_K": 250e9}, 4e-4, 1e-3, 512)
    step = L.predict_gguf_tpot(held, rates, 64 + 16 / 2).seconds
    ttft = L.predict_gguf_ttft(held, rates, 64).seconds

    def timing(per_repeat=(1.0, 1.0, 1.0)):
        return EngineTiming(64, 16, tuple(ttft * k for k in per_repeat),
                            tuple(step * k * w for k in per_repeat for w in [1.0, 1.01, 0.99] * 5))
    quiet = B.judged_point("tpot", shape, "q4_k_m", held, timing(), rates, rates, 20e9)
    assert quiet.verdict == "reliable" and quiet.error == pytest.approx(0, abs=1e-9) and quiet.reason == ""
    assert B.judged_point("ttft", shape, "q4_k_m", held, timing(), rates, rates, 20e9).verdict == "reliable"
    # the repeats disagree (one 40 % slower than the others): noisy, said so
    split = B.judged_point("tpot", shape, "q4_k_m", held, timing((1.0, 1.4, 1.0)), rates, rates, 20e9)
    assert split.verdict == "noisy" and "ratios disagree by 40%" in split.reason
    # the probe sets around it disagree on a rate it reads: noisy; on a type it does not read: not
    from dataclasses import replace
    slower = replace(rates, decode={**rates.decode, "Q4_K": 18e9})
    moved = B.judged_point("tpot", shape, "q4_k_m", held, timing(), rates, slower, 20e9)
    assert moved.verdict == "noisy" and "probes just before and just after" in moved.reason
    other = replace(rates, decode={**rates.decode, "Q8_0": 10e9}), replace(rates, decode={**rates.decode, "Q8_0": 20e9})
    assert B.judged_point("tpot", shape, "q4_k_m", held, timing(), *other, 20e9).verdict == "reliable"
    with pytest.raises(ValueError, match="kind"):
        B.judged_point("tbt", shape, "q4_k_m", held, timing(), rates, rates, 20e9)
def test_validate_cli_dispatches_and_refuses_bad_configs(capsys):
    from course_lib.measure import validate
    if not L.llamacpp_available():
        assert validate.main(["--engine", "llama.cpp", "--no-progress"]) == 2
        assert "make llamacpp" in capsys.readouterr().err
        return
    assert validate.main(["--engine", "llama.cpp", "--config", "gpt2", "--no-progress"]) == 2
    assert "model_type" in capsys.readouterr().err


# --- the app: a CPU's fp16 rate ------------------------------------------------------------------------------
def test_cpu_estimates_compute_at_the_rate_the_cpu_runs_fast(monkeypatch):
    from course_lib import estimate
    from course_lib.measure.engines.llamacpp import cpu_fast_compute
    cpu = custom_hardware("this-machine", bandwidth=20e9, peak_flops={"fp32": 100e9, "bf16": 150e9, "fp16": 2.3e9},
                          capacity=64e9, memory_type="DRAM")
    fixed = cpu_fast_compute(cpu)
    assert fixed.flops("fp16") == 150e9 and fixed.flops("fp32") == 100e9
    slow = estimate("llama-3-8b", cpu, prompt_tokens=128, new_tokens=2, precision="q4_k_m")
    fast = estimate("llama-3-8b", fixed, prompt_tokens=128, new_tokens=2, precision="q4_k_m")
    assert fast.ttft < slow.ttft / 10 and fast.tpot <= slow.tpot
    gpu = custom_hardware("g", bandwidth=1e12, peak_flops={"fp32": 50e12, "fp16": 1e12}, memory_type="GPU memory")
    assert cpu_fast_compute(gpu) is gpu
    with pytest.raises(TypeError, match="spec"):
        cpu_fast_compute("cpu")
    # the dashboard's button applies it
    pytest.importorskip("ipywidgets")
    import course_lib.measure
    from course_lib.lessons.widgets.capstone import capstone_dashboard
    fake = types.SimpleNamespace(measure_machine=lambda **kw: "m", this_machine=lambda m: cpu)
    monkeypatch.setitem(sys.modules, "course_lib.measure.machine", fake)
    monkeypatch.setattr(course_lib.measure, "machine", fake, raising=False)
    dash = capstone_dashboard()
    dash.measure.click()
    assert dash.machine.flops("fp16") == 150e9


# --- llama.cpp itself -------------------------------------------------------------------------------------------
@needs_llamacpp
def test_files_hold_the_types_llama_cpp_gives_each_format(files):
    held = {f: L.gguf_bytes(p) for f, p in files.items()}
    assert held["f16"].types == ("F16",)
    assert held["q8_0"].types == ("Q8_0",)
    assert "Q4_0" in held["q4_0"].types
    assert {"Q4_K", "Q6_K"} <= set(held["q4_k_m"].types)       # the mix: Q6_K for ffn_down/attn_v halves
    d = {f: h.decode_bytes for f, h in held.items()}
    assert d["f16"] > d["q8_0"] > d["q4_k_m"] > 0 and d["q8_0"] > d["q4_0"]
    assert held["f16"].tied and held["f16"].kv_bytes_per_token == 2 * 2 * 2 * 64 * 2
    # the f16 file's matrices are exactly the shape's f16 tensors
    shape = L.shape_of(TINY)
    assert held["f16"].file_weight_bytes == sum(math.prod(s) * (2 if dt == "f16" else 4)
                                                for _, s, dt in shape.tensors())


@needs_llamacpp
def test_generate_is_timed_token_by_token_and_survives_non_ascii(files):
    llm = L.open_gguf(files["q4_0"], threads=1, n_ctx=64)
    try:
        ids = llm.tokenize("héllo wörld ✓ 日本".encode("utf-8"))        # byte fallback, no C++ exception
        assert len(ids) > 5
        [t] = L.measure_gguf(llm, threads=1, prompts=[8], new_tokens=4, repeats=2)
    finally:
        llm.close()
    assert t.repeats == 2 and len(t.step_times) == 2 * 3 and t.ttft > 0 and t.tpot > 0
    with pytest.raises(ValueError, match="prompts"):
        L.measure_gguf(files["q4_0"], prompts=[0])


@needs_llamacpp
def test_building_and_opening_a_file_prints_nothing_into_the_cell(files, tmp_path, capsys):
    """A lesson cell shows what reaches Python's sys.stderr: llama-cpp-python's log callback prints llama.cpp's
    loader and quantizer lines there (hundreds of them) unless they are silenced."""
    capsys.readouterr()
    L.quantize(files["f16"], tmp_path / "again-q8_0.gguf", "q8_0")
    llm = L.open_gguf(tmp_path / "again-q8_0.gguf", threads=1, n_ctx=64)
    llm.close()
    out = capsys.readouterr()
    assert "llama_model_loader" not in out.err + out.out and "quantiz" not in out.err.lower()
    assert out.err == "" and out.out == ""
