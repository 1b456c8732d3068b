"""course_lib.measure.engines.hf and its benchmark: the Hugging Face engine built, timed and predicted on tiny
configurations.

No timing thresholds: the models are tiny (2 layers, hidden 64); predictions are checked on a hand-made
Calibration, the interleaving and the probe's split on fake timings, the benchmark's CLI on a fake report.
"""
from __future__ import annotations

import json
import math
import random
import statistics
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the engines extra (transformers) is not installed: "
                                           "pip install 'course-lib[engines]'")

import sympy as sp  # noqa: E402

from course_lib.core import formulas, numeric  # noqa: E402
from course_lib.measure import calibrate, probes  # noqa: E402
from course_lib.measure import validate  # noqa: E402
from course_lib.measure.benchmarks import engine_hf  # noqa: E402
from course_lib.measure.benchmarks.bracket import Bracketed  # noqa: E402
from course_lib.measure.engines import hf  # noqa: E402

_DECODER = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, vocab_size=256, max_position_embeddings=512)
TINY = {
    "llama": dict(model_type="llama", tie_word_embeddings=False, **_DECODER),
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=True, use_sliding_window=False, **_DECODER),
    "qwen3": dict(model_type="qwen3", tie_word_embeddings=True, head_dim=32, **_DECODER),
    "mistral": dict(model_type="mistral", sliding_window=4096, **_DECODER),
    "gpt2": dict(model_type="gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=512),
}


@pytest.fixture(scope="module")
def tiny_models():
    return {mt: hf.build_model(cfg) for mt, cfg in TINY.items()}


@pytest.mark.parametrize("mt", sorted(TINY))
def test_tiny_model_is_fp32_on_cpu_with_the_specs_parameter_count(tiny_models, mt):
    model, spec = tiny_models[mt]
    params = list(model.parameters())
    assert sum(p.numel() for p in params) == spec.params == hf.count_parameters(TINY[mt])
    assert {p.dtype for p in params} == {torch.float32} and {p.device.type for p in params} == {"cpu"}
    assert model.config.model_type == mt and not model.training


def test_fp32_whatever_the_file_says():
    model, _ = hf.build_model({**TINY["qwen2"], "torch_dtype": "bfloat16", "dtype": "bfloat16"})
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_the_gpu_build_asks_for_its_dtype_and_attention_and_sizes_the_weights_by_it():
    model, spec = hf.build_model(TINY["llama"], dtype="bf16", attention="sdpa", device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16} and model.config._attn_implementation == "sdpa"
    ids = torch.randint(1, 256, (1, 7))
    _, static = hf.generate_timed(model, ids, 4, "static")           # a static cache runs off the GPU too
    assert len(static) == 3
    with pytest.raises(ValueError, match="CUDA"):
        hf.generate_timed(model, ids, 4, "graphs")
    # bf16 weights take half fp32's bytes: the 8B configuration fits in 20 GB in bf16, not in fp32
    big = hf.spec_of(hf.load_config("llama-3-8b")[1], "llama-3-8b")
    assert big.params == 8_030_261_248
    assert hf.check_fits(big, available=20 * 10**9, dtype="bf16") < 20 * 10**9
    with pytest.raises(hf.ModelTooLarge, match=r"32\.12 GB in fp32"):
        hf.check_fits(big, available=20 * 10**9)
    with pytest.raises(ValueError, match="dtype"):
        hf.build_model(TINY["llama"], dtype="int3")
    with pytest.raises(ValueError, match="attention"):
        hf.build_model(TINY["llama"], attention="flash")


def test_transformers_defaults_fill_keys_the_file_leaves_out():
    cfg = {k: v for k, v in TINY["qwen3"].items() if k != "head_dim"}   # Qwen3's default head_dim is 128, not 64/4
    assert hf.spec_of(cfg).head_dim == 128
    assert hf.spec_of(cfg).params == hf.count_parameters(cfg)


def test_default_configurations_keep_their_sources_and_reproduce_the_parameter_count():
    catalog = hf.engine_configs()
    assert set(hf.DEFAULT_CONFIGS) <= set(catalog) and set(hf.FAST_CONFIGS) <= set(catalog)
    for name, entry in catalog.items():
        assert entry["source"].startswith("https://huggingface.co/") and entry["source"].endswith("/config.json")
        cfg = entry["config"]
        assert cfg["model_type"] in hf.SUPPORTED_TYPES and "architectures" in cfg
        # the raw file and the model transformers instantiates from it (meta device: nothing allocated)
        assert hf.spec_of(cfg, name).params == hf.count_parameters(cfg) == entry["params"], name


def test_config_from_a_path_and_by_name(tmp_path):
    p = tmp_path / "my-model" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(TINY["llama"]))
    assert hf.load_config(p) == ("my-model", TINY["llama"])
    assert hf.load_config(str(p))[1] == TINY["llama"]
    assert hf.load_config("gpt2")[1]["n_embd"] == 768


@pytest.mark.parametrize("cfg,match", [
    ({**TINY["llama"], "model_type": "mamba"}, "model_type.*mamba"),
    ({k: v for k, v in TINY["llama"].items() if k != "model_type"}, "'model_type'"),
    ({k: v for k, v in TINY["llama"].items() if k != "intermediate_size"}, "'intermediate_size'"),
    ({k: v for k, v in TINY["qwen2"].items() if k != "num_hidden_layers"}, "'num_hidden_layers'"),
    ({k: v for k, v in TINY["gpt2"].items() if k != "n_embd"}, "'n_embd'"),
    ({**TINY["llama"], "hidden_size": 0}, "hidden_size"),
    ({**TINY["llama"], "num_key_value_heads": "two"}, "num_key_value_heads"),
    ({k: v for k, v in TINY["qwen2"].items() if k != "num_key_value_heads"}, "'num_key_value_heads'"),
])
def test_bad_config_gets_one_clear_error_naming_the_key(cfg, match):
    with pytest.raises(ValueError, match=match):
        hf.build_model(cfg)


def test_bad_config_arguments(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        hf.load_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        hf.load_config(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="config"):
        hf.load_config("no-such-model")
    with pytest.raises(TypeError, match="config"):
        hf.load_config(42)


def test_a_model_that_does_not_fit_is_refused_before_allocation(monkeypatch):
    tr = hf.require_transformers()

    def allocate(*a, **k):
        raise AssertionError("from_config was called: the model was allocated")

    monkeypatch.setattr(tr.AutoModelForCausalLM, "from_config", allocate)
    with pytest.raises(hf.ModelTooLarge, match=r"1,235,814,400 parameters need 4\.94 GB.*has 1\.00 GB available"):
        hf.build_model("llama-3.2-1b", available=10**9)
    assert hf.check_fits(hf.spec_of(TINY["llama"]), available=10**9) < 10**9


def test_generate_is_greedy_with_fixed_new_tokens_even_when_every_token_is_eos(tiny_models):
    cfg = {**TINY["llama"], "eos_token_id": 0, "bos_token_id": 0}
    model, _ = hf.build_model(cfg)
    model.lm_head.weight.data.zero_()        # every logit 0: greedy picks token 0, the config's EOS, every step
    ttft, gaps = hf.generate_timed(model, torch.randint(1, 256, (1, 7)), 5)    # raises unless 5 tokens came
    assert ttft > 0 and len(gaps) == 4 and all(g > 0 for g in gaps)
    clock = hf.TokenClock()
    out = model.generate(torch.ones(1, 3, dtype=torch.long), generation_config=hf.generation_config(3),
                         streamer=clock)
    assert out.shape[-1] == 6 and len(clock.times) == 4 and clock.tokens == 3 and clock.ended
    assert out[0, 3:].tolist() == [0, 0, 0]          # greedy: the argmax of equal logits, EOS or not


def test_measure_engine_interleaves_prompts_and_pools_step_times(tiny_models, monkeypatch):
    model, _ = tiny_models["qwen3"]
    calls, caches = [], []

    def fake(m, ids, n, cache="dynamic"):
        p = ids.shape[-1]
        calls.append(p)
        caches.append(cache)
        return p * 1e-4, [p * 1e-5] * (n - 1)

    monkeypatch.setattr(hf.timing, "generate_timed", fake)
    t16, t32 = hf.measure_engine(model, [16, 32], new_tokens=4, repeats=3)
    assert calls == [8, 16, 32, 32, 16, 16, 32]        # warm-up, then P1 P2, P2 P1, P1 P2 (counterbalanced)
    assert set(caches) == {"dynamic"}
    calls.clear(), caches.clear()
    hf.measure_engine(model, [16, 32], new_tokens=4, repeats=1, cache="static")
    assert calls == [32, 32, 16, 32] and set(caches) == {"static"}   # a static cache: warmed at its full length, twice
    with pytest.raises(ValueError, match="cache"):
        hf.measure_engine(model, [16], new_tokens=4, cache="paged")
    assert t16.ttft_times == (16e-4,) * 3 and len(t32.step_times) == 9 and t32.tpot == pytest.approx(32e-5)
    assert t16.mean_context == 18 and t16.tpot_verdict.verdict in ("reliable", "contended")
    with pytest.raises(ValueError, match="positions"):
        hf.measure_engine(model, [510], new_tokens=4)
    pooled = hf.EngineTiming.pooled([t16, hf.EngineTiming(16, 4, (1.0,), (2.0, 3.0, 4.0), 0.3, (5,))])
    assert pooled.ttft_times == (16e-4,) * 3 + (1.0,) and pooled.step_times[-3:] == (2.0, 3.0, 4.0)
    assert pooled.steal == 0.3 and pooled.faults[-1] == 5
    with pytest.raises(ValueError, match="one prompt length"):
        hf.EngineTiming.pooled([t16, t32])


def test_an_engine_run_is_predicted_from_the_mean_of_the_probes_around_its_repeats():
    spec = hf.spec_of(hf.load_config("qwen2.5-0.5b")[1], "qwen2.5-0.5b")
    cal = _calibration(gemv_bw=10e9)
    shapes = sorted(calibrate.weight_matrices(spec))
    brackets = [{sh: bw for sh in shapes} for bw in (10e9, 20e9, 30e9)]
    during = cal.with_probes(gemv=brackets)
    assert all(during.gemv[sh] == pytest.approx(20e9) for sh in shapes) and cal.gemv == {(1, 1): 10e9}
    w = [hf.weights_and_kv(spec, 136, c)[0] for c in (cal, during, cal.with_probes(gemv=brackets[2:]))]
    assert w[0] > w[1] > w[2]
    # the prefill GEMMs probed around the repeats: their mean replaces the calibration's
    key = (128, spec.intermediate, spec.hidden)
    during = cal.with_probes(gemv=brackets, gemm=[{key: 1e11}, {key: 3e11}])
    assert during.gemm[key] == pytest.approx(2e11) and key not in cal.gemm
    assert cal.with_probes() == cal


def test_engine_probe_splits_per_layer_and_fixed_cost_on_tiny_copies(monkeypatch):
    seen = []

    def fake(m, ids, n):
        c = m.config
        seen.append((c.hidden_size, c.num_hidden_layers, c.vocab_size))
        L = c.num_hidden_layers
        return 3e-3 + L * 4e-4, [1e-3 + L * 2e-4] * (n - 1)

    monkeypatch.setattr(hf.overhead, "generate_timed", fake)
    ov = hf.probe_engine_overhead("qwen2.5-0.5b", repeats=2)
    assert {s[0] for s in seen} == {hf.PROBE_HIDDEN} and {s[1] for s in seen} == set(hf.PROBE_LAYERS)
    assert {s[2] for s in seen} == {hf.PROBE_VOCAB}       # never the target's 24 layers / 896 hidden
    assert ov.step_per_layer == pytest.approx(2e-4) and ov.step_fixed == pytest.approx(1e-3)
    assert ov.prefill_per_layer == pytest.approx(4e-4) and ov.prefill_fixed == pytest.approx(3e-3)
    assert ov.step(24) == pytest.approx(1e-3 + 24 * 2e-4) and ov.model_type == "qwen2" and not ov.clamped
    tiny = hf.tiny_config(hf.load_config("qwen3-0.6b")[1], 4)
    assert tiny["model_type"] == "qwen3" and tiny["num_hidden_layers"] == 4 and tiny["hidden_size"] == 64
    assert tiny["num_attention_heads"] // tiny["num_key_value_heads"] == 2    # Qwen3-0.6B's grouping 16/8


def test_the_engine_formulas_are_the_core_formulas():
    """The prediction evaluates core/formulas.py's engine formulas (generated code), not a copy of its own."""
    for name in ("engine_decode_time", "engine_prefill_time"):
        f = formulas.FORMULAS[name]
        fn = sp.lambdify(f.args, f.expr)
        rnd = random.Random(1)
        for _ in range(5):
            vals = {a.name: (rnd.randint(1, 5000) if a.is_integer else rnd.uniform(0.5, 5e3)) for a in f.args}
            assert math.isclose(fn(*vals.values()), getattr(numeric, name)(**vals), rel_tol=1e-12)
    assert not hasattr(hf, "ENGINE_DECODE_TIME") and "sympy" not in hf.__dict__


def _calibration(gemv_bw=10e9, copy_bw=8e9, kv_bw=5e9, flops=1e11, gemm=None, cold_ops=()):
    copy = probes.CopyResult(buffer_bytes=10**8, bytes=2 * 10**8, counted="read+write", seconds=2e8 / copy_bw,
                             q1_seconds=2e8 / copy_bw, q3_seconds=2e8 / copy_bw, repeats=1, device="cpu", threads=1)
    mm = probes.MatmulResult(n=1000, dtype="fp32", flops=2 * 10**9, seconds=2e9 / flops, q1_seconds=2e9 / flops,
                             q3_seconds=2e9 / flops, repeats=1, device="cpu", threads=1)
    ov = probes.OverheadResult(seconds=2e-6, q1_seconds=2e-6, q3_seconds=2e-6,
                               per_kind={"elementwise": 2e-6, "matmul": 2e-6, "view": 5e-7}, repeats=1, device="cpu",
                               threads=1)
    return calibrate.Calibration(device="cpu", device_name="test CPU", threads=1, torch_version=torch.__version__,
                                 load_before=(), copy=copy, matmul=mm, overhead=ov, gemv={(1, 1): gemv_bw},
                                 gemm=dict(gemm or {}), kv={(2, 7, 64): kv_bw}, cold_ops=list(cold_ops))


def _overhead(step=(1e-3, 2e-4), prefill=(3e-3, 5e-4)):
    t = hf.EngineTiming(16, 4, (1e-3,) * 3, (1e-3,) * 9)
    return hf.EngineOverhead("qwen2", (2, 4), step[0], step[1], prefill[0], prefill[1], (t, t))


def test_tpot_prediction_adds_the_engines_terms_to_the_calibrated_ones():
    spec = hf.spec_of(hf.load_config("qwen2.5-0.5b")[1], "qwen2.5-0.5b")
    cal, ov = _calibration(), _overhead()
    p = hf.predict_engine_tpot(spec, 128, 16, cal, ov)
    k_tok = spec.kv_bytes_per_token("fp32")
    assert p.tokens == 136 and k_tok == 2 * 24 * 2 * 64 * 4
    assert p.terms["weights"] == pytest.approx(spec.decode_weight_bytes("fp32") / 10e9, rel=0.01)
    assert p.terms["kv"] == pytest.approx(136 * k_tok / 5e9)
    assert p.terms["cache_concat"] == pytest.approx(2 * 136 * k_tok / 8e9)     # read + write of the whole cache
    assert p.terms["logits"] == pytest.approx(3 * 4 * spec.vocab / 8e9)
    assert p.terms["engine"] == pytest.approx(1e-3 + 24 * 2e-4)                  # no cold probe: factor 1
    assert p.seconds == pytest.approx(sum(p.terms.values()))
    assert p.uncalibrated == pytest.approx((spec.decode_weight_bytes("fp32") + 136 * k_tok) / 8e9)
    longer = hf.predict_engine_tpot(spec, 960, 16, cal, ov)
    assert longer.terms["cache_concat"] > p.terms["cache_concat"] and longer.terms["weights"] == p.terms["weights"]
    assert longer.terms["kv"] == pytest.approx(968 / 136 * p.terms["kv"])      # attention reads every token's K/V
    stream = calibrate.stream_between_ops(spec)
    cal_cold = _calibration(cold_ops=[(0, 2e-6, 5e-7), (2 * stream, 6e-6, 1e-6)])
    cold = hf.predict_engine_tpot(spec, 128, 16, cal_cold, ov)
    assert cold.counts["cold_factor"] == pytest.approx(2.0) and cold.terms["engine"] == pytest.approx(
        2 * p.terms["engine"])


def test_ttft_prediction_keeps_only_the_last_positions_logits_and_causal_attention():
    spec = hf.spec_of(hf.load_config("gpt2")[1], "gpt2")
    P = 128
    gemm = {(P, m, k): 5e10 for (m, k) in calibrate.weight_matrices(spec)}
    p = hf.predict_engine_ttft(spec, P, _calibration(gemm=gemm), _overhead())
    head = spec.vocab * spec.hidden
    mats = calibrate.weight_matrices(spec)
    block = sum(m * k * n for (m, k), n in mats.items() if (m, k) != (spec.vocab, spec.hidden))
    assert p.terms["linear"] == pytest.approx(2 * P * block / 5e10)
    assert p.terms["lm_head"] == pytest.approx(head * 4 / 10e9)
    assert p.terms["attention"] == pytest.approx(4 * 12 * 12 * 64 * P * (P + 1) / 2 / 1e11)
    assert p.terms["engine"] == pytest.approx(3e-3 + 12 * 5e-4)
    assert p.terms["passes"] == 0                        # the calibration did not probe the elementwise passes
    assert p.seconds == pytest.approx(sum(p.terms.values()))
    probed = _calibration(gemm={(P, m, k): 5e10 for (m, k) in mats})
    probed.passes[hf.passes_key(spec, P)] = 2e-4           # seconds per layer
    q = hf.predict_engine_ttft(spec, P, probed, _overhead())
    assert q.terms["passes"] == pytest.approx(12 * 2e-4) and q.seconds == pytest.approx(p.seconds + 12 * 2e-4)
    assert hf.predict_engine_ttft(spec, 2 * P, probed, _overhead()).terms["passes"] == 0   # another row count


def test_prefill_passes_probe_times_the_elementwise_work_of_a_layer():
    spec = hf.spec_of(TINY["qwen3"], "tiny-qwen3")
    few, many = (hf.measure_prefill_passes(spec, rows, threads=1, fast=True) for rows in (2, 4096))
    assert 0 < few < many            # 2048 times the data (megabytes against dispatch): more time on any machine
    assert hf.passes_key(spec, 8) != hf.passes_key(spec, 9) and hf.passes_key(spec, 8)[-1] == 8
    with pytest.raises(ValueError, match="rows"):
        hf.measure_prefill_passes(spec, 0)
    with pytest.raises(TypeError, match="spec must be a ModelSpec"):
        hf.measure_prefill_passes("qwen3", 8)


@pytest.mark.parametrize("call,err,match", [
    (lambda s, c, o: hf.predict_engine_tpot(s, 0, 16, c, o), ValueError, "prompt"),
    (lambda s, c, o: hf.predict_engine_tpot(s, 8, 1, c, o), ValueError, "new_tokens"),
    (lambda s, c, o: hf.predict_engine_tpot(s, 8, 4, "cal", o), TypeError, "calibration"),
    (lambda s, c, o: hf.predict_engine_ttft(s, 8, c, None), TypeError, "overhead"),
    (lambda s, c, o: engine_hf.run(fast="yes"), TypeError, "fast"),
    (lambda s, c, o: engine_hf.run(prompts=[0], calibration=c), ValueError, "prompts"),
    (lambda s, c, o: hf.probe_engine_overhead(TINY["llama"], layers=(4, 2)), ValueError, "layers"),
])
def test_bad_arguments(call, err, match):
    with pytest.raises(err, match=match):
        call(hf.spec_of(TINY["llama"]), _calibration(), _overhead())


def _report(verdict="reliable"):
    spec = hf.spec_of(TINY["llama"], "tiny-llama")
    cal, ov = _calibration(), _overhead()
    pts = []
    for kind, measured in (("tpot", 2e-3), ("tpot", 3e-3), ("ttft", 8e-3)):
        pr = (hf.predict_engine_tpot(spec, 16, 4, cal, ov) if kind == "tpot"
              else hf.predict_engine_ttft(spec, 16, cal, ov))
        pts.append(engine_hf.EnginePoint(kind=kind, model=spec.name, params=spec.params, tokens=16,
                                         predicted=pr.seconds, measured=measured, spread=0.05, verdict=verdict,
                                         uncalibrated=pr.uncalibrated, prediction=pr))
    return engine_hf.EngineReport(points=pts, overheads={"tiny-llama": ov}, calibration=cal,
                                  threads="1 thread (test)", seconds=1.0)


def test_report_table_last_line_and_noise_count():
    rep = _report()
    errs = [abs(p.predicted - p.measured) / p.measured for p in rep.points]
    assert rep.tpot_max_abs_error == pytest.approx(max(errs[:2]))
    assert rep.tpot_geomean_abs_error == pytest.approx(math.sqrt(errs[0] * errs[1]))
    assert rep.ttft_max_abs_error == pytest.approx(errs[2])
    text = rep.report()
    lines = text.splitlines()
    assert engine_hf.LAST_LINE_RE.match(lines[-1]) and lines[-1] == rep.last_line()
    header = next(line for line in lines if line.startswith("phase"))
    for col in engine_hf.COLUMNS:
        assert col in header
    assert "1 thread (test)" in text and rep.noisy_points == 0
    assert rep.in_cache() == [] and "last-level cache" not in text
    rep.llc_bytes = 2**30                                 # a 1 GiB cache holds the tiny model
    assert rep.in_cache() == ["tiny-llama"] and "fit in this machine's 1024 MiB last-level cache" in rep.report()
    assert "page faults" not in text                     # no timings counted them
    rep.allocator = "glibc malloc pinned: test"
    rep.timings = {"tiny-llama": [hf.EngineTiming(16, 4, (1e-3,), (1e-4,), None, (12, 2000, 30))]}
    assert "allocator: glibc malloc pinned: test" in rep.report()
    rep.calibration.allocator = rep.allocator             # the calibration's conditions say it: printed once
    assert rep.report().count("glibc malloc pinned: test") == 1 and "allocator=[glibc" in rep.report()
    assert rep.faults_line().endswith("tiny-llama P=16: 30") and rep.faults_line() in rep.report()
    noisy = _report("noisy")
    assert noisy.noisy_points == 3 and "3 of 3 points not reliable" in noisy.report()


def test_cli_engine_hf_passes_every_config_and_exits_3_when_noisy(monkeypatch, capsys, tmp_path):
    got = {}

    def fake_run(configs, fast, threads, progress):
        got.update(configs=configs, fast=fast, threads=threads)
        return _report(got.get("verdict", "reliable"))

    monkeypatch.setattr(engine_hf, "run", fake_run)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert validate.main(["--engine", "hf", "--config", str(a), "--config", str(b), "--fast", "--threads", "1",
                          "--no-progress"]) == 0
    assert got == {"configs": [str(a), str(b)], "fast": True, "threads": 1}
    assert engine_hf.LAST_LINE_RE.match(capsys.readouterr().out.strip().splitlines()[-1])
    got["verdict"] = "noisy"
    assert validate.main(["--engine", "hf", "--no-progress"]) == engine_hf.NOISY_EXIT and got["configs"] is None
    assert validate.main(["--config", str(a)]) == 2 and "--engine hf" in capsys.readouterr().err
    assert validate.main(["--engine", "hf", "--clock", "process"]) == 2


def test_cli_reports_a_bad_config_without_a_traceback(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY["llama"], "model_type": "rwkv"}))
    assert validate.main(["--engine", "hf", "--config", str(p), "--no-progress"]) == 2
    assert "rwkv" in capsys.readouterr().err


def test_a_real_measurement_of_a_tiny_model_has_every_step(tiny_models):
    model, _ = tiny_models["gpt2"]
    [t] = hf.measure_engine(model, [8], new_tokens=3, repeats=3, threads=1)
    assert len(t.ttft_times) == 3 and len(t.step_times) == 6 and min(t.step_times) > 0
    if sys.platform.startswith("linux"):                 # each timed generate()'s page faults, counted
        assert len(t.faults) == 3 and min(t.faults) >= 0 and t.median_faults == statistics.median(t.faults)
    assert t.tpot_verdict.verdict in ("reliable", "noisy", "contended") and t.tpot_verdict.repeats == 6


def test_run_refuses_configurations_it_cannot_measure_before_any_probe(monkeypatch):
    def no_probe(*a, **k):
        raise AssertionError("a probe ran")

    monkeypatch.setattr(engine_hf, "calibrate_for", no_probe)
    with pytest.raises(hf.ModelTooLarge, match=r"llama-3.2-1b: .*does not fit.*gpt2: .*exceeds its 1024 positions"):
        engine_hf.run(["llama-3.2-1b", "gpt2"], prompts=[1020], available=2 * 10**9, progress=False)


def _probe_set(step, prefill, n=3, steal=None):
    """An engine probe whose tiny copies (2 and 8 layers) took ``step``/``prefill`` seconds per layer."""
    t2 = hf.EngineTiming(16, 4, (2 * prefill,) * n, (2 * step,) * (3 * n), steal)
    t8 = hf.EngineTiming(16, 4, (8 * prefill,) * n, (8 * step,) * (3 * n), steal)
    return hf.EngineOverhead("llama", (2, 8), 0.0, step, 0.0, prefill, (t2, t8))


def test_pooled_engine_probes_split_the_pooled_medians_and_keep_their_sets():
    sets = [_probe_set(2e-4, 3e-4), _probe_set(3e-4, 4e-4, steal=0.02), _probe_set(9e-4, 5e-4)]
    pooled = hf.pool_overheads(sets)
    assert pooled.sets == tuple(sets) and len(pooled.decode[0].step_times) == 27
    assert pooled.step_per_layer == pytest.approx(3e-4) and pooled.prefill_per_layer == pytest.approx(4e-4)
    assert pooled.step_fixed == pytest.approx(0.0, abs=1e-12) and pooled.decode[0].steal == 0.02
    assert pooled.step_range(10) == pytest.approx((2e-3, 9e-3))          # the sets' extremes, not the pool's
    assert "3 probe sets pooled" in pooled.summary()
    assert hf.pool_overheads([sets[0]]) is sets[0] and sets[0].step_range(10) == (sets[0].step(10),) * 2
    assert hf.pool_overheads([pooled, sets[0]]).sets == (*sets, sets[0])   # a pool of pools flattens
    one_outlier = hf.pool_overheads(sets[:2] + [sets[0]] + [_probe_set(5e-3, 3e-4)])
    assert one_outlier.step_per_layer < 3e-4 + 1e-12                      # medians: one wild set does not pull
    with pytest.raises(TypeError, match="probes"):
        hf.pool_overheads([])
    with pytest.raises(ValueError, match="architecture"):
        hf.pool_overheads([sets[0], hf.EngineOverhead("gpt2", (2, 8), 0, 1e-4, 0, 1e-4, sets[0].decode)])


def test_the_benchmark_pools_engine_probes_run_around_each_models_repeats(monkeypatch):
    """Outside --fast the engine is probed with the GEMVs before and after every repeat, and predicted from
    the pool of those sets, never from one probe taken before the model was built."""
    cfg = dict(TINY["llama"])
    made = []

    def fake_probe(config, threads=None):
        made.append(_probe_set(1e-4 * (len(made) + 1), 2e-4))
        return made[-1]

    log = []

    def fake_measure(model, prompts, new_tokens, repeats, seed=0, warmup=True, threads=None):
        log.append(tuple(prompts))
        return [hf.EngineTiming(p, new_tokens, (1e-2,) * repeats, (1e-3,) * (repeats * (new_tokens - 1)))
                for p in prompts]

    monkeypatch.setattr(engine_hf, "probe_engine_overhead", lambda config, threads=None: log.append("probe")
                        or fake_probe(config, threads))
    monkeypatch.setattr(engine_hf, "measure_engine", fake_measure)
    monkeypatch.setattr(engine_hf, "reprobe_gemv", lambda cal, shapes: {})
    monkeypatch.setattr(engine_hf, "reprobe", lambda cal, kind, jobs: {})
    rep = engine_hf.run([cfg], prompts=[8, 16], new_tokens=4, repeats=3, calibration=_calibration(),
                        progress=False)
    # every repeat between two probe sets, its prompts alternating so that none always runs first
    assert log == ["probe", (8, 16), "probe", (16, 8), "probe", (8, 16), "probe"]
    [ov] = rep.overheads.values()
    assert len(made) == 4 and ov.sets == tuple(made)                       # before the first repeat, after each
    assert ov.step_per_layer == pytest.approx(statistics.median([1e-4, 2e-4, 3e-4, 4e-4]))
    [line] = rep.engine_drift_lines()
    assert "over 4 probe sets" in line and "4 probe sets pooled" in rep.report() and line in rep.report()
    [t8, t16] = rep.timings[cfg.get("_name_or_path", "llama")]
    assert t8.repeats == 3 and len(t16.step_times) == 9


def test_cold_op_probe_sets_replace_the_points_they_reprobed():
    cal = _calibration(cold_ops=[(0, 2e-6, 1e-6), (100, 8e-6, 3e-6), (200, 12e-6, 5e-6), (400, 20e-6, 9e-6)])
    assert cal.cold_points_for(150) == [0, 100, 200] and cal.cold_points_for(0) == [0]
    assert cal.cold_points_for(1000) == [0, 400] and cal.cold_points_for(200) == [0, 200]
    assert _calibration().cold_points_for(150) == []
    during = cal.with_probes(cold=[{0: (3e-6, 1e-6), 200: (14e-6, 6e-6)}, {0: (5e-6, 1e-6), 200: (10e-6, 4e-6)}])
    assert during.op_costs(0) == pytest.approx((4e-6, 1e-6)) and during.op_costs(200) == pytest.approx((12e-6, 5e-6))
    assert during.op_costs(100) == (8e-6, 3e-6) and during.op_costs(300) == pytest.approx((16e-6, 7e-6))
    assert cal.with_probes(cold=[]) == cal and cal.cold_ops[0] == (0, 2e-6, 1e-6)      # the calibration unchanged


def _compare(gemv_bws, factors, ttft_factors, steps_per_repeat=3):
    """Points of a model whose repeat r ran between GEMV probe sets r and r + 1 (``gemv_bws``) and took
    ``factors[r]`` x its own prediction per step (``ttft_factors[r]`` x for TTFT)."""
    spec = hf.spec_of(hf.load_config("qwen2.5-0.5b")[1], "qwen2.5-0.5b")
    cal, ov = _calibration(), _overhead()
    gemv = [{sh: bw for sh in calibrate.weight_matrices(spec)} for bw in gemv_bws]
    n = steps_per_repeat + 1
    preds = [cal.with_probes(gemv=gemv[r:r + 2]) for r in range(len(factors))]
    tp = [hf.predict_engine_tpot(spec, 16, n, c, ov).seconds for c in preds]
    tt = [hf.predict_engine_ttft(spec, 16, c, ov).seconds for c in preds]
    sets = iter([{"gemv": g, "gemm": {}, "cold": None} for g in gemv])
    seq = Bracketed(lambda: next(sets))
    seq.run(range(len(factors)), lambda r: {16: hf.EngineTiming(16, n, (ttft_factors[r] * tt[r],), tuple(
        factors[r] * tp[r] * (1 + 0.001 * i) for i in range(steps_per_repeat)))})
    everything = cal.with_probes(gemv=gemv)
    pooled = (hf.predict_engine_tpot(spec, 16, n, everything, ov).seconds,
              hf.predict_engine_ttft(spec, 16, everything, ov).seconds)
    t = hf.EngineTiming.pooled([m.value[16] for m in seq.measurements])
    return engine_hf.compare(spec.name, spec, seq, cal, ov, n), tp, tt, t, pooled


def test_each_repeat_is_judged_against_the_probes_around_it():
    """The machine slows repeat after repeat (GEMV probes at 12, 10, 8, 7, 6 GB/s) and every repeat takes its own
    prediction x about 1.1: the step times move by about 50 %, the comparison does not, and the point is reliable."""
    (tpot, ttft), tp, tt, t, pooled = _compare([12e9, 10e9, 8e9, 7e9, 6e9], [1.10, 1.12, 1.09, 1.11],
                                               [0.9, 0.92, 0.91, 0.93])
    assert max(tp) / min(tp) > 1.3                                         # the predictions followed the drift
    assert tpot.verdict == "reliable" and ttft.verdict == "reliable" and tpot.reason == ""
    assert len(tpot.ratios) == 4 and tpot.ratios[1] == pytest.approx(1.12 * 1.001)
    assert ttft.ratios == pytest.approx((0.9, 0.92, 0.91, 0.93))
    # the point itself: every step's median against the prediction from the mean of every probe set
    assert tpot.measured == t.tpot and tpot.predicted == pytest.approx(pooled[0])
    assert ttft.measured == t.ttft and ttft.predicted == pytest.approx(pooled[1])
    assert min(tp) < tpot.predicted < max(tp)


def test_repeats_whose_comparisons_disagree_make_the_point_noisy_and_say_why():
    (tpot, ttft), *_ = _compare([10e9] * 4, [1.0, 1.6, 1.0], [1.0, 1.0, 1.0])
    assert tpot.verdict == "noisy" and "measured / predicted ratios" in tpot.reason and ttft.verdict == "reliable"
    # a repeat whose two probe sets disagree by 50 %: noisy for that reason, where the ratios agree
    (tpot, _), *_ = _compare([10e9, 10e9, 15e9, 15e9], [1.0, 1.01, 1.02], [1.0, 1.0, 1.0])  # the jump: repeat 2
    assert tpot.ratios.index(sorted(tpot.ratios)[1]) == 1
    assert tpot.verdict == "noisy" and "the probes just before and just after it disagree by" in tpot.reason
    rep = engine_hf.EngineReport(points=[tpot], overheads={"m": _overhead()}, calibration=_calibration(),
                                 threads="1 thread (test)", seconds=1.0)
    assert "e.g. qwen2.5-0.5b TPOT @ 16: the probes just before" in rep.quality_line()
    assert "measured / predicted by repeat: 1.001 1.011 1.021" in rep.report()


def test_the_norm_and_rotary_code_is_transformers_own():
    """TinyLM and the prefill-passes probe share one RMSNorm and one rotary embedding: the ones Llama runs."""
    from transformers.models.llama import modeling_llama as llama

    from course_lib.measure.tinylm import rms_norm, rotary
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 64, generator=gen)
    norm = llama.LlamaRMSNorm(64, eps=1e-6)
    norm.weight.data = torch.randn(64, generator=gen)
    assert torch.allclose(rms_norm(x, norm.weight, 1e-6), norm(x), atol=1e-6)
    assert rms_norm(x.to(torch.bfloat16), norm.weight, 1e-6).dtype == torch.bfloat16   # computed in fp32
    q, k = torch.randn(1, 4, 5, 16, generator=gen), torch.randn(1, 2, 5, 16, generator=gen)
    cos, sin = torch.randn(1, 5, 16, generator=gen), torch.randn(1, 5, 16, generator=gen)
    q_ref, k_ref = llama.apply_rotary_pos_emb(q, k, cos, sin)
    assert torch.allclose(rotary(q, cos[:, None], sin[:, None]), q_ref, atol=1e-6)
    assert torch.allclose(rotary(k, cos[:, None], sin[:, None]), k_ref, atol=1e-6)


def test_a_tiny_copys_step_time_is_judged_by_its_runs_not_its_pooled_steps():
    """The steps of one generate() share its run: the probe's repeats are its runs (their median steps). Runs that
    agree settle it however their steps vary by position (the quiet stored run of lesson 08: pooled steps 24 % and
    21 % apart, noisy; its runs' medians 1 % and 18 %); runs that disagree leave it noisy (the busy recording)."""
    import json

    from replay import RECORDINGS

    from course_lib.core.claims import compare as claims
    from course_lib.measure.record import decode
    shape = (1.0e-3, 0.8e-3, 0.8e-3, 1.3e-3, 1.4e-3)                  # the same position effect in every run
    level = (1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0)       # the runs agree within 3 %
    steady = hf.EngineTiming(16, 6, (2e-3,) * 9, tuple(s * x for x in level for s in shape))
    assert steady.tpot_verdict.verdict == "noisy" and steady.run_tpot_verdict.verdict == "reliable"
    assert steady.run_tpots == pytest.approx([1.0e-3 * x for x in level])
    drifting = hf.EngineTiming(16, 6, (2e-3,) * 9, tuple(s * x for x in (1, 3, 1, 2, 1, 3, 1, 2, 1) for s in shape))
    assert drifting.run_tpot_verdict.verdict == "noisy"
    probe = hf.EngineOverhead("gpt2", (2, 8), 1e-3, 1e-4, 1e-3, 1e-4, (steady, drifting))
    assert probe.verdicts[:2] == [steady.run_tpot_verdict, drifting.run_tpot_verdict]
    recorded = {run: {k: decode(v[0]) for k, v in json.loads((RECORDINGS / run / "08.json").read_text())["results"]
                      .items() if k in ("08/engine_probe", "08/engine_calibration")} for run in ("stored", "busy")}
    live = json.loads((RECORDINGS / "quiet-hf-probe" / "08.json").read_text())["results"]["08/engine_probe"]
    assert all(t.run_tpot_verdict.reliable for t in decode(live[0]).decode)   # recorded live with 9 runs, load 2.85
    quiet, busy = (claims.hf_probes(r["08/engine_calibration"], r["08/engine_probe"]) for r in recorded.values())
    assert [t.tpot_verdict.verdict for t in recorded["stored"]["08/engine_probe"].decode] == ["noisy", "noisy"]
    assert quiet.relation == "settled" and quiet.verdict == "reliable"
    assert busy.relation == "unsettled" and all(f"{n}-layer copy" in " ".join(busy.operands["unsettled"])
                                                for n in (2, 8))
