"""Lesson 09 (capstone: plan a deployment): the dashboard widget, its figure, the lesson's numbers, ex09.

* the dashboard widget's tests are in tests/test_widgets_capstone.py (the app's widget);
* the figure (``course_lib.lessons.plots.capstone``) has a title, axis units, and plots the dashboard's values;
* every number the lesson states comes from ``course_lib``;
* ex09's expected values come from course_lib and its bank targets the lesson's mistakes.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import nbformat
import pytest
from nbtext import shown_text

from course_lib.core import app as A
from course_lib.core import capstone as D
from course_lib import estimate
from course_lib.core.units import format_time

widgets = pytest.importorskip("ipywidgets")

from course_lib.lessons.plots import label_has_unit  # noqa: E402
from course_lib.lessons.plots.capstone import TITLE, XLABEL, YLABEL, plot_latency_throughput  # noqa: E402


@pytest.fixture(scope="module")
def nb_paths(repo_root):
    """This lesson's notebooks (paths under conftest's ``repo_root``)."""
    return SimpleNamespace(lesson=repo_root / "notebooks" / "09_capstone.ipynb",
                           solution=repo_root / "solutions" / "09_capstone.ipynb",
                           app=repo_root / "app" / "dashboard.ipynb")


def _plotted(fig):
    """(batches that fit: x, y), (batches that do not: x, y) of the figure's first two series."""
    ax = fig.axes[0]
    by_label = {ln.get_label(): ln for ln in ax.get_lines()}
    return ax, by_label


# --------------------------------------------------------------------------------------------------
# The widget, driven in-process
# --------------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------------
# The figure
# --------------------------------------------------------------------------------------------------
def test_figure_plots_the_curve_with_units():
    s = D.DashboardState(hardware="l40s", prompt_tokens=4096, new_tokens=512, batch=24)
    fig = plot_latency_throughput(s, tpot_budget=0.05)
    ax, lines = _plotted(fig)
    assert ax.get_title().startswith(TITLE) and "llama-3-8b" in ax.get_title()
    assert ax.get_xlabel() == XLABEL and ax.get_ylabel() == YLABEL
    assert label_has_unit(XLABEL) and "tokens/s" in XLABEL and label_has_unit(YLABEL) and "(ms)" in YLABEL
    pts = D.latency_throughput_curve(s)
    fit = [p for p in pts if p.fits]
    over = [p for p in pts if p.fits is False]
    assert fit and over                                  # memory runs out inside the plotted range
    assert list(lines["fits in memory"].get_xdata()) == [p.tps_aggregate for p in fit]
    assert list(lines["fits in memory"].get_ydata()) == pytest.approx([p.tpot * 1e3 for p in fit], rel=1e-12)
    assert list(lines["does not fit in memory"].get_xdata()) == [p.tps_aggregate for p in over]
    assert list(lines["does not fit in memory"].get_ydata()) == pytest.approx([p.tpot * 1e3 for p in over],
                                                                              rel=1e-12)
    budget = [ln for lab, ln in lines.items() if lab.startswith("TPOT budget")][0]
    assert list(budget.get_ydata()) == [50.0, 50.0]
    assert [t.get_text() for t in ax.texts] == [f"B={p.batch}" for p in fit]


def test_figure_defaults_and_errors():
    ax = plot_latency_throughput().axes[0]
    (fit,) = [ln for ln in ax.get_lines() if ln.get_label() == "fits in memory"]
    assert len(fit.get_xdata()) == len(D.default_batches(1))
    with pytest.raises(TypeError, match="state"):
        plot_latency_throughput("llama-3-8b")
    with pytest.raises(ValueError, match="tpot_budget"):
        plot_latency_throughput(tpot_budget=0)
    with pytest.raises(ValueError, match="not been measured"):      # every catalog device is priced now
        plot_latency_throughput(D.DashboardState(hardware="this-machine"))


# --------------------------------------------------------------------------------------------------
# Every number the lesson states comes from course_lib
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lesson_text(nb_paths) -> str:
    """What the lesson shows, with runs of whitespace (line wraps in the prose) collapsed to one space."""
    return " ".join(shown_text(nb_paths.lesson).split())


def _claims():
    """(description, text the lesson must show) pairs, each computed from course_lib now."""
    import math

    from course_lib import get_hardware, get_model

    from course_lib.core import measurements
    from course_lib.core.numeric import raw as g
    from course_lib.core.units import format_bandwidth, format_bytes

    h = measurements.h200()
    h200 = get_hardware("h200")
    run = next(r for r in h["full_decode_step_cuda_graph"]["runs"] if r["batch"] == 1 and r["context"] == 1)
    eta_b = run["achieved_GBps"] * 1e9 / h200.bandwidth
    eta_c = h["ceilings"]["matmul_8192_fp16_TFLOPs"] * 1e12 / h200.flops("fp16")
    base = D.DashboardState(prompt_tokens=2048, new_tokens=300, compute_efficiency=eta_c, bandwidth_efficiency=eta_b)
    fp8_step = h["weights_only_decode_step_fp16_vs_fp8"]                 # fp8 weights stream more slowly (lesson 08)
    eta_b8 = eta_b * fp8_step["fp8_e4m3"]["GBps"] / fp8_step["fp16"]["GBps"]
    eff = {"fp16": eta_b, "fp8": eta_b8}
    h100_8 = base.replace(precision="fp8", bandwidth_efficiency=eta_b8)
    b_plain = D.best_batch(h100_8, 1.0, 0.05)
    cached = h100_8.replace(cached_prefix_tokens=1536)
    b_cached = D.best_batch(cached, 1.0, 0.05)
    r_cached = D.compute(cached.replace(batch=b_cached))
    l40s = D.compute(base.replace(hardware="l40s"))
    m70 = get_model("llama-3-70b")
    tp4 = D.compute(D.DashboardState(model="llama-3-70b", batch=32, prompt_tokens=2048, new_tokens=300,
                                     tensor_parallel=4, interconnect_bandwidth=1.0))
    link = 2 * m70.layers * g.ring_allreduce_time(4, 32 * m70.hidden * 2, 1.0) / (0.1 * tp4.estimate.tpot)
    recipe = D.compute(D.DashboardState(prompt_tokens=2048, new_tokens=300, compute_efficiency=0.6))
    # continuous batching (issue 16): the plans of step (e), the 1,000-user plan before and after
    cont = {(hw, p, k): D.continuous_plan(base.replace(hardware=hw, precision=p, cached_prefix_tokens=k,
                                                       bandwidth_efficiency=eff[p]), 1000, 0.05, 1.0,
                                          kv_memory_fraction=0.9)
            for hw in ("l40s", "a100-80gb", "h100-sxm", "h200") for p in ("fp16", "fp8") for k in (0, 1536)}
    h16, h8c = cont["h100-sxm", "fp16", 0], cont["h100-sxm", "fp8", 1536]
    s16 = D.static_plan(base, 1000, 1.0, 0.05)
    s8c = D.static_plan(cached, 1000, 1.0, 0.05)
    fewest = min(c.gpus for c in cont.values())
    best = [c for c in cont.values() if c.gpus == fewest][-1]
    # tensor parallelism with the collectives' latency (issue 15)
    nvl = get_hardware("h100-sxm").scale_up.per_direction_bandwidth
    tp8 = D.compute(D.DashboardState(model="llama-3-70b", batch=32, prompt_tokens=2048, new_tokens=300,
                                     tensor_parallel=8, interconnect_bandwidth=nvl))
    lat8 = 2 * m70.layers * D.collective_time("all-reduce", 8, 0, nvl)
    need8 = D.allreduce_time_per_pass(m70.layers, 32, m70.hidden, 8, 2, 1.0, base_latency=0, hop_latency=0) / (
        0.1 * tp8.estimate.tpot)
    ds = D.DashboardState(model="deepseek-v3", hardware="h200", precision="fp8", prompt_tokens=2048, new_tokens=300,
                          compute_efficiency=eta_c, bandwidth_efficiency=eta_b8, tensor_parallel=8,
                          interconnect_bandwidth=get_hardware("h200").scale_up.per_direction_bandwidth)
    ds_plan = D.continuous_plan(ds, 1000, 0.05, 1.0, kv_memory_fraction=0.9)
    return [
        ("the measured bandwidth efficiency", f"bandwidth efficiency {eta_b:.3f}"),
        ("the measured compute efficiency", f"compute efficiency {eta_c:.3f}"),
        ("the fp8 bandwidth efficiency", f"bandwidth efficiency in fp8 {eta_b8:.3f}"),
        ("the L40S at batch 1", f"| NVIDIA L40S | {A.ttft_text(l40s.state)} | {A.tpot_text(l40s.state)} |"),
        ("the H100 fp8 plan without the cache", f"| NVIDIA H100 SXM | fp8 | {b_plain} | TTFT budget |"),
        ("the H100 fp8 plan with the cache", f"| NVIDIA H100 SXM | fp8 | {b_cached} | TTFT budget |"),
        ("the static plan's TPOT with the cache", format_time(r_cached.tpot)),
        ("the GPUs of the chosen continuous plan", f"**{fewest}** GPUs for 1,000 users (1,000 / {best.sequences}"),
        ("the chosen plan's TPOT", f"steady-state TPOT {format_time(best.tpot)}"),
        ("the H100 fp16 row of the continuous plans",
         f"| NVIDIA H100 SXM | fp16 | no | {h16.sequences} | TPOT budget | {format_time(h16.ttft)} | "
         f"{format_time(h16.tpot)} |"),
        ("the 1,000-user plan before and after, fp16",
         f"**{s16.gpus}** GPUs in the static plan, **{h16.gpus}** with continuous batching"),
        ("the 1,000-user plan before and after, fp8 and cache", f"**{s8c.gpus} → {h8c.gpus}**"),
        ("the static plan's fp16 GPUs, computed", f"{math.ceil(1000 / s16.batch)} H100s in fp16 without the cache"),
        ("the latency of the 8-GPU step's all-reduces", f"{format_time(lat8)} per step, more than the whole budget"),
        ("the bandwidth-only link for 8 GPUs at batch 32", f"by bytes alone {format_bandwidth(need8)} per direction"),
        ("the 8-GPU all-reduces at NVLink", f"take {format_time(tp8.allreduce_decode)},"),
        ("DeepSeek-V3's continuous plan", f"Continuous batching needs {ds_plan.gpus} GPUs for 1,000 users"),
        ("the 70B split over 4 GPUs", f"| 4 | 32 | {format_bytes(tp4.memory_needed)} | yes |"),
        ("the link bandwidth for 4 GPUs at batch 32", format_bandwidth(link)),
        ("the source recipe's TPOT", format_time(recipe.estimate.source_recipe_tpot)),
        ("chats that fit an L40S",
         f"**{D.max_batch_that_fits(D.DashboardState(hardware='l40s', prompt_tokens=2048, new_tokens=300))}**"),
    ]


@pytest.mark.parametrize("what, shown", _claims(), ids=[c[0] for c in _claims()])
def test_lesson_states_the_numbers_course_lib_computes(lesson_text, what, shown):
    assert shown in lesson_text, f"the lesson should show {what} = {shown!r} (computed by course_lib)"


def test_lesson_tp_allreduce_time_is_ex09_q8(lesson_text):
    """The lesson's 8-GPU all-reduce time and exercise q8 are the same computation (latency included)."""
    from course_lib import get_hardware
    from course_lib.checks import ex09

    assert ex09.q8.evaluate(ex09.q8.expected).correct
    link = get_hardware("h100-sxm").scale_up.per_direction_bandwidth
    s = D.DashboardState(model="llama-3-70b", batch=32, prompt_tokens=2048, new_tokens=300, tensor_parallel=8,
                         interconnect_bandwidth=link)
    r = D.compute(s)
    assert ex09.q8.expected == pytest.approx(r.allreduce_decode * 1e3, rel=1e-12)
    assert f"take {format_time(r.allreduce_decode)}," in lesson_text
    # the latency alone exceeds 10 % of the floor step (issue 15's finding)
    assert 2 * 80 * D.collective_time("all-reduce", 8, 0, link) > 0.1 * r.estimate.tpot


def test_lesson_plans_deepseek_v3_on_8_h200(lesson_text):
    assert "DeepSeek-V3 on 8 × H200" in lesson_text and "tensor + expert parallel" in lesson_text
    assert "latent KV cache" in lesson_text or "latent cache" in lesson_text


def test_lesson_says_what_binds_with_continuous_batching(lesson_text):
    assert "were artefacts of the static model" in lesson_text
    assert "The **TPOT budget** binds in every plan" in lesson_text
    assert "The 1,000-user plan, before and after." in lesson_text


def test_h100_and_h200_nearly_share_the_ttft_the_lesson_claims():
    """Same fp16 FLOP/s: the prefill differs only by its memory-bound operators (lm_head, embedding rows)."""
    a = D.compute(D.DashboardState(hardware="h100-sxm", prompt_tokens=2048, new_tokens=300))
    b = D.compute(D.DashboardState(hardware="h200", prompt_tokens=2048, new_tokens=300))
    assert b.ttft < a.ttft and (a.ttft - b.ttft) / a.ttft < 0.05 and b.tpot < a.tpot
    memory_bound = [op.name for op in a.estimate.prefill.operators if op.bound == "memory"]
    assert memory_bound and "matmuls" not in memory_bound


def test_the_dashboard_cell_is_ignored_by_nbval_and_stores_no_widget_state(nb_paths):
    nb = nbformat.read(nb_paths.lesson, as_version=4)
    dash = [c for c in nb.cells if c.cell_type == "code" and "capstone_dashboard(" in c.source]
    assert dash and all("nbval-ignore-output" in c.metadata.get("tags", []) for c in dash)
    assert "widgets" not in nb.metadata


# --------------------------------------------------------------------------------------------------
# The app notebook that `make app` serves with Voila
# --------------------------------------------------------------------------------------------------
def test_app_notebook_only_displays_the_dashboard(nb_paths):
    nb = nbformat.read(nb_paths.app, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert 1 <= len(code) <= 2
    assert "from course_lib.lessons.widgets.capstone import capstone_dashboard" in code[0].source
    assert code[-1].source.strip().endswith("capstone_dashboard()")
    assert "widgets" not in nb.metadata
    assert all(c.outputs for c in code), "the app notebook is stored with its outputs"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    for line in "\n".join(c.source for c in code).splitlines():
        assert not re.search(r"\bimport torch\b|bench\.", line), "the app must not measure on load"


# --------------------------------------------------------------------------------------------------
# ex09
# --------------------------------------------------------------------------------------------------
def test_ex09_expected_values_come_from_course_lib():
    import math

    import sympy as sp

    from course_lib.core.numeric import raw as g
    from course_lib import get_hardware, get_model
    from course_lib.checks import ex09

    assert ex09.q1.evaluate(estimate("llama-3-8b", "a100-80gb", 1500, 300, batch=8).ttft * 1e3).correct
    assert ex09.q1.evaluate(f"{estimate('llama-3-8b', 'a100-80gb', 1500, 300, batch=8).ttft:.4f} s").correct
    assert ex09.q2.evaluate(estimate("llama-3-8b", "h100-sxm", 2048, 300, batch=32).memory_needed / 1e9).correct
    m = get_model("llama-3-8b")
    fit = math.floor((get_hardware("l40s").capacity - m.weight_bytes()) / (m.kv_bytes_per_token() * 2348))
    assert ex09.q3.evaluate(fit).correct
    assert fit == D.max_batch_that_fits(D.DashboardState(hardware="l40s", prompt_tokens=2048, new_tokens=300))
    assert ex09.q4.evaluate(estimate("llama-3-8b", "h100-sxm", 2048, 300, batch=32).tps_aggregate).correct
    L, G, B, h, b, beta, a0, a = sp.symbols("L G B h b beta alpha0 alpha", positive=True)
    assert ex09.q7.evaluate(2 * L * g.allreduce_ring_time(G, B * h * b, beta, a0, a)).correct
    assert ex09.q7.evaluate(2 * L * (a0 + 2 * (G - 1) * a) + 4 * L * B * h * b * (G - 1) / (G * beta)).correct
    assert not ex09.q7.evaluate(2 * L * g.ring_allreduce_time(G, B * h * b, beta)).correct
    # q9: the steady state of continuous batching
    from course_lib.core import serving
    t_pf = estimate("llama-3-8b", "h100-sxm", 2048, 50).ttft
    t_dec = estimate("llama-3-8b", "h100-sxm", 2048, 50, batch=64).tpot
    assert ex09.q9.evaluate((t_dec + 64 * t_pf / 49) * 1e3).correct
    assert not ex09.q9.evaluate((t_dec + 64 * t_pf / 50) * 1e3).correct     # n instead of n - 1 decode steps
    plan = serving.continuous_batching_plan("llama-3-8b", "h100-sxm", 64, 2048, 50, tpot_budget=1.0,
                                            max_sequences=64)
    assert plan.sequences_per_gpu == 64 and ex09.q9.evaluate(plan.tpot * 1e3).correct


def test_ex09_planning_function_reference_is_a_scan():
    from course_lib.checks import ex09

    def learner(model, hardware, prompt_tokens, new_tokens, ttft_budget, tpot_budget):
        best = 0
        for b in range(1, ex09.BATCH_LIMIT + 1):
            e = estimate(model, hardware, prompt_tokens, new_tokens, batch=b)
            if not (e.fits and e.ttft <= ttft_budget and e.tpot <= tpot_budget):
                break
            best = b
        return best

    assert ex09.q5.evaluate(learner).correct
    # every case of the question exercises a different limit
    reasons = {D.what_binds(D.DashboardState(model=m, hardware=hw, prompt_tokens=p, new_tokens=n), t1, t2,
                            limit=ex09.BATCH_LIMIT) for ((m, hw, p, n, t1, t2), _kw), _ in ex09.q5.cases}
    assert {"TTFT budget", "TPOT budget", "memory"} <= reasons


def test_ex09_targets_the_lessons_mistakes():
    from course_lib.checks import ex09

    e1 = estimate("llama-3-8b", "a100-80gb", 1500, 300, batch=8)
    assert "compute-bound" in ex09.q1.evaluate(e1.prefill.memory_time * 1e3).feedback
    assert "single request" in ex09.q1.evaluate(e1.ttft * 1e3 / 8).feedback
    e4 = estimate("llama-3-8b", "h100-sxm", 2048, 300, batch=32)
    assert "one user" in ex09.q4.evaluate(e4.tps).feedback
    assert "prefill" in ex09.q4.evaluate(32 / e4.tpot).feedback
    # the compute-only recipe a student would write: peak FLOP/s / FLOPs per token (no batch factor)
    from course_lib import get_hardware, get_model
    peak_rate = get_hardware("h100-sxm").flops("fp16") / (2 * get_model("llama-3-8b").params)
    assert "peak FLOP/s / FLOPs per token" in ex09.q4.evaluate(peak_rate).feedback
    assert not ex09.q4.evaluate(peak_rate).correct
    # reading the capacity as GiB gets feedback that does not claim the memory chips hold 1e9-byte GB
    l40s, m8 = get_hardware("l40s"), get_model("llama-3-8b")
    gib = int((l40s.capacity_marketing_gb * 2 ** 30 - m8.weight_bytes()) // (m8.kv_bytes_per_token("fp16") * 2348))
    fb = ex09.q3.evaluate(gib).feedback
    assert "binary GiB" in fb and "headroom" in fb and "driver" in fb
    marketing = int((l40s.capacity_marketing_gb * 1e9 - m8.weight_bytes()) // (m8.kv_bytes_per_token("fp16") * 2348))
    assert "driver reports" in ex09.q3.evaluate(marketing).feedback
    assert "Bandwidth sets the decode" in ex09.q6.evaluate(ex09.q6.options[1]).feedback
    # q8: the datasheet's both-directions figure and 4-byte values each get their own feedback
    m70 = get_model("llama-3-70b")
    nvlink = get_hardware("h100-sxm").scale_up
    ring = D.COLLECTIVE_LATENCIES["ring"]

    def q8(link, value_bytes=2, base=ring.base, hop=ring.hop):
        return 2 * m70.layers * (base + 14 * hop + 2 * 7 / 8 * 32 * m70.hidden * value_bytes / link) * 1e3

    both = ex09.q8.evaluate(q8(nvlink.bidirectional_bandwidth))
    four = ex09.q8.evaluate(q8(nvlink.per_direction_bandwidth, 4))
    assert "both directions" in both.feedback and "fp16, 2 bytes" in four.feedback and both.feedback != four.feedback
    assert "bandwidth term alone" in ex09.q8.evaluate(q8(nvlink.per_direction_bandwidth, 2, 0, 0)).feedback
    t_pf = estimate("llama-3-8b", "h100-sxm", 2048, 50).ttft
    assert "n - 1" in ex09.q9.evaluate((t_dec := estimate("llama-3-8b", "h100-sxm", 2048, 50, batch=64).tpot) * 1e3
                                       + t_pf * 1e3).feedback
    assert "decode step alone" in ex09.q9.evaluate(t_dec * 1e3).feedback
    assert "n - 1 decode steps" in ex09.q9.evaluate((t_dec + 64 * t_pf / 50) * 1e3).feedback


def test_ex09_covers_every_objective_with_multi_step_problems_and_a_function():
    # objectives named by the lesson and bank sizes of every set: tests/test_checks_banks.py
    from course_lib.checks import ex09

    assert {q.objective.split()[0] for q in ex09.QUESTIONS} == {"O1", "O2", "O3", "O4", "O5"}
    assert sum("Multi-step" in q.prompt for q in ex09.QUESTIONS) >= 2
    assert any(q.kind == "function" for q in ex09.QUESTIONS)


def test_lesson_states_the_fp8_kv_cache_and_the_fp16_alternative(lesson_text):
    """fp8 in the plans means an fp8 KV cache too; the lesson shows what an fp16 cache changes (computed)."""
    s70 = D.DashboardState(model="llama-3-70b", precision="fp8", prompt_tokens=2048, new_tokens=300)
    assert "fp8 weights, activations and KV cache" in lesson_text
    assert f"and {D.max_batch_that_fits(s70.replace(kv_precision='fp16'))} chats fit" in lesson_text
    # the L40S row of the fp8-KV -> fp16-KV table, with the prefix cached and the lesson's efficiencies
    from course_lib import get_hardware
    from course_lib.core import measurements

    h, h200 = measurements.h200(), get_hardware("h200")
    run = next(r for r in h["full_decode_step_cuda_graph"]["runs"] if r["batch"] == 1 and r["context"] == 1)
    s = D.DashboardState(hardware="l40s", precision="fp8", prompt_tokens=2048, new_tokens=300,
                         cached_prefix_tokens=1536,
                         bandwidth_efficiency=run["achieved_GBps"] * 1e9 / h200.bandwidth
                         * h["weights_only_decode_step_fp16_vs_fp8"]["fp8_e4m3"]["GBps"]
                         / h["weights_only_decode_step_fp16_vs_fp8"]["fp16"]["GBps"],       # fp8's streaming rate
                         compute_efficiency=h["ceilings"]["matmul_8192_fp16_TFLOPs"] * 1e12 / h200.flops("fp16"))
    b8, b16 = D.best_batch(s, 1.0, 0.05), D.best_batch(s.replace(kv_precision="fp16"), 1.0, 0.05)
    assert b16 <= b8 and f"| NVIDIA L40S | {b8} → {b16} |" in lesson_text
