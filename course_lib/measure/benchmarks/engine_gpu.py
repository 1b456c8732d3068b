"""The Hugging Face engine on a GPU: ``python -m course_lib.measure.validate --engine hf --device cuda``.

Lessons: none

::

    from course_lib.measure.benchmarks import engine_gpu
    report = engine_gpu.run(device="cuda")       # bf16, SDPA: Llama-3.2-1B and a Llama-3-8B-shaped model
    print(report.report())                       # the ceilings, the engine table, the operator table, the last line

The CPU benchmark (:mod:`course_lib.measure.benchmarks.engine_hf`) predicts fp32 ``generate()`` from probes of every
term; this one asks the question of lesson 08 on a GPU, in the format a GPU serves: for each configuration (default
:data:`GPU_CONFIGS`, random weights drawn on the device in ``dtype``, PyTorch's SDPA attention) and each K/V cache
mode of :data:`~course_lib.measure.engines.hf.CACHES` (the dynamic cache, a static one, and the static one with its
decode step replayed as CUDA graphs), ``generate()`` is timed (TTFT and every step, :data:`GPU_REPEATS` interleaved
repeats) and set against three predictions:

* **this GPU's ceilings**: the course's estimate (:func:`course_lib.estimate`) on the ceilings measured here just
  before: the achieved bandwidth of the largest GEMV of the models' own weight shapes and the ``dtype`` matmul rate
  (:func:`course_lib.measure.machine.this_machine`);
* **the datasheet floor**: the same estimate on the catalog's entry for this GPU, where the driver's name matches one;
* **the transformers profile**: the estimate with ``engine="transformers"`` (the profile fitted to published
  measurements, :mod:`course_lib.core.forecast`), on the same catalog entry.

Per operator: every distinct weight matrix of the models as a GEMV in ``dtype`` (rotated beyond the cache),
measured against its bytes over the copy bandwidth, which is the prediction a decode step is built from.

With no GPU the same code runs on the CPU (``device="cpu"``): a dry run of the GPU session
(:mod:`course_lib.authoring.gpu_session`); ``fast`` cuts each configuration to a tiny copy. The static cache runs
anywhere; CUDA graphs only on a CUDA device (elsewhere the mode is skipped with that reason). Last line:
``gpu_engine_tpot_max_abs_error=… gpu_engine_ttft_max_abs_error=…`` (the errors against this GPU's ceilings).
"""
from __future__ import annotations

import gc
import math
import re
import time
from dataclasses import asdict, dataclass, field

import torch

from course_lib import estimate, get_hardware
from course_lib.core.data import load_catalog
from course_lib.core.quality import timing_verdict
from course_lib.core.validation import require_choice, require_count, require_counts
from course_lib.measure import probes
from course_lib.measure.calibrate import weight_matrices
from course_lib.measure.device import device_name, resolve_device
from course_lib.measure.engines.hf import (CACHES, DTYPES, ModelTooLarge, build_model, check_fits, load_config,
                                           measure_engine, require_transformers, spec_of, tiny_config)
from course_lib.measure.machine import MachineMeasurements, this_machine
from course_lib.measure.timing import progress_bar

__all__ = ["GPU_CONFIGS", "GPU_PROMPTS", "GPU_NEW_TOKENS", "GPU_REPEATS", "FAST_PROMPTS", "FAST_NEW_TOKENS",
           "LAST_LINE_RE", "catalog_hardware", "EnginePoint", "OperatorPoint", "GpuEngineReport", "run"]

#: the configurations measured by default: a small model and one of the shape the course's lessons price
GPU_CONFIGS = ("llama-3.2-1b", "llama-3-8b")
#: prompt lengths, new tokens and interleaved repeats of each (configuration, cache) on the GPU
GPU_PROMPTS = (128, 1024)
GPU_NEW_TOKENS = 32
GPU_REPEATS = 3
#: the dry run's sizes (``fast``: tiny copies of the configurations, :func:`~course_lib.measure.engines.hf.tiny_config`)
FAST_PROMPTS = (16, 64)
FAST_NEW_TOKENS = 8
LAST_LINE_RE = re.compile(r"^gpu_engine_tpot_max_abs_error=(\d+\.\d+|nan) "
                          r"gpu_engine_ttft_max_abs_error=(\d+\.\d+|nan)$")


def catalog_hardware(name: str) -> str | None:
    """The hardware catalog's key for a device the driver names ``name`` ('NVIDIA H200' -> 'h200'), or None when
    no entry, or more than one, matches (an 'H100' could be the SXM or the PCIe part)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be the device's name (a string), got {type(name).__name__}")
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    keys = load_catalog("hardware")["hardware"]
    exact = [k for k in keys if k in words]
    if len(exact) == 1:
        return exact[0]
    family = [k for k in keys if k.split("-")[0] in words]
    return family[0] if len(family) == 1 else None


@dataclass(frozen=True)
class EnginePoint:
    """One configuration, cache mode and prompt length: ``generate()`` measured and its three predictions (s)."""

    model: str
    cache: str
    params: int
    prompt: int
    new_tokens: int
    ttft: float
    tpot: float
    ttft_verdict: str
    tpot_verdict: str
    predicted_ttft: float            # the course's estimate on this GPU's measured ceilings
    predicted_tpot: float
    datasheet_ttft: float | None     # the same on the catalog's datasheet figures (None: GPU not in the catalog)
    datasheet_tpot: float | None
    profile_ttft: float | None       # the transformers profile fitted to published measurements
    profile_tpot: float | None

    tpot_error = property(lambda self: self.predicted_tpot / self.tpot - 1, doc="(predicted - measured) / measured")
    ttft_error = property(lambda self: self.predicted_ttft / self.ttft - 1, doc="(predicted - measured) / measured")


@dataclass(frozen=True)
class OperatorPoint:
    """One weight matrix as a GEMV: measured against its bytes over the copy bandwidth (s per call)."""

    m: int
    k: int
    dtype: str
    bytes: int
    measured: float
    predicted: float
    datasheet: float | None
    verdict: str

    error = property(lambda self: self.predicted / self.measured - 1, doc="(predicted - measured) / measured")


@dataclass
class GpuEngineReport:
    """The GPU engine benchmark's conditions, ceilings, points and operators."""

    device: str
    device_name: str
    dtype: str
    attention: str
    versions: dict
    ceilings: dict
    points: list
    operators: list
    skipped: list = field(default_factory=list)
    seconds: float = 0.0
    hardware: str | None = None
    fast: bool = False

    @property
    def tpot_max_abs_error(self) -> float:
        return max((abs(p.tpot_error) for p in self.points), default=math.nan)

    @property
    def ttft_max_abs_error(self) -> float:
        return max((abs(p.ttft_error) for p in self.points), default=math.nan)

    def last_line(self) -> str:
        return (f"gpu_engine_tpot_max_abs_error={self.tpot_max_abs_error:.3f} "
                f"gpu_engine_ttft_max_abs_error={self.ttft_max_abs_error:.3f}")

    def table(self) -> str:
        def ms(x):
            return "" if x is None else f"{x * 1e3:.3f}"
        head = ("model", "cache", "prompt", "TTFT (ms)", "pred.", "err %", "datasheet", "profile", "verdict",
                "TPOT (ms)", "pred.", "err %", "datasheet", "profile", "verdict")
        rows = [head] + [(p.model, p.cache, str(p.prompt), ms(p.ttft), ms(p.predicted_ttft),
                          f"{p.ttft_error * 100:+.1f}", ms(p.datasheet_ttft), ms(p.profile_ttft), p.ttft_verdict,
                          ms(p.tpot), ms(p.predicted_tpot), f"{p.tpot_error * 100:+.1f}", ms(p.datasheet_tpot),
                          ms(p.profile_tpot), p.tpot_verdict) for p in self.points]
        return _columns(rows)

    def operator_table(self) -> str:
        rows = [("GEMV m x k", "dtype", "bytes (MB)", "measured (us)", "bytes / copy bw (us)", "err %",
                 "datasheet (us)", "verdict")]
        rows += [(f"{o.m} x {o.k}", o.dtype, f"{o.bytes / 1e6:.1f}", f"{o.measured * 1e6:.1f}",
                  f"{o.predicted * 1e6:.1f}", f"{o.error * 100:+.1f}",
                  "" if o.datasheet is None else f"{o.datasheet * 1e6:.1f}", o.verdict) for o in self.operators]
        return _columns(rows)

    def report(self) -> str:
        c = self.ceilings
        lines = [f"engine: Hugging Face transformers {self.versions.get('transformers')} generate() on "
                 f"{self.device} ({self.device_name}), {self.dtype}, {self.attention} attention, random weights, "
                 f"greedy; torch {self.versions.get('torch')}, CUDA {self.versions.get('cuda')}",
                 f"ceilings measured here: copy {c['copy_bandwidth'] / 1e9:.1f} GB/s (read + write), largest GEMV "
                 f"{c['gemv_bandwidth'] / 1e9:.1f} GB/s, {self.dtype} matmul {c['matmul_flops'] / 1e12:.2f} TFLOP/s"
                 + (f"; datasheet: {self.hardware}" if self.hardware else "; no catalog entry for this device"),
                 *(f"skipped {what}: {why}" for what, why in self.skipped),
                 "", self.table(), "", "per operator (each weight matrix as a GEMV, rotated beyond the cache):",
                 self.operator_table(), "",
                 "pred. = the course's estimate on the ceilings above; datasheet = on the catalog's figures; "
                 "profile = estimate(engine='transformers'); err % = (pred. - measured) / measured",
                 f"total {self.seconds:.1f} s", self.last_line()]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """Everything, as JSON-ready data (the GPU session writes it next to the report)."""
        return {"device": self.device, "device_name": self.device_name, "dtype": self.dtype,
                "attention": self.attention, "versions": self.versions, "ceilings": self.ceilings,
                "hardware": self.hardware, "fast": self.fast, "seconds": self.seconds,
                "skipped": [list(s) for s in self.skipped],
                "points": [asdict(p) for p in self.points], "operators": [asdict(o) for o in self.operators],
                "last_line": self.last_line()}


def _columns(rows) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _versions() -> dict:
    tr = require_transformers()
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": tr.__version__}


def _configs(configs, fast: bool) -> list[tuple[str, dict]]:
    names = GPU_CONFIGS if configs is None else ([configs] if isinstance(configs, str) else list(configs))
    if not names:
        raise ValueError("configs must name at least one configuration")
    out = []
    for c in names:
        name, cfg = load_config(c)
        out.append((f"{name}-tiny", tiny_config(cfg)) if fast else (name, cfg))
    return out


def _operators(shapes, dtype: str, dev, copy_bw: float, datasheet_bw: float | None) -> list[OperatorPoint]:
    rows = probes.measure_gemv(sorted(shapes), [dtype], device=dev, progress=False)
    return [OperatorPoint(r.m, r.k, r.dtype, r.bytes, r.seconds, r.bytes / copy_bw,
                          None if datasheet_bw is None else r.bytes / datasheet_bw, timing_verdict(r).verdict)
            for r in rows]


def run(configs=None, *, device=None, dtype: str = "bf16", caches=None, fast: bool = False, prompts=None,
        new_tokens=None, repeats=None, progress: bool = True, available: int | None = None) -> GpuEngineReport:
    """Measure the ceilings, then ``generate()`` of each configuration in each cache mode; see the module docstring.

    ``configs``: names, paths or dicts (default :data:`GPU_CONFIGS`; ``fast``: tiny copies of them). ``device``:
    'cuda' (default where PyTorch sees one) or 'cpu' (a dry run). ``caches``: modes of
    :data:`~course_lib.measure.engines.hf.CACHES` (default all; 'graphs' is skipped off a CUDA device). A
    configuration that does not fit in the device's memory is skipped with its reason.
    """
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be True or False, got {fast!r}")
    t0 = time.perf_counter()
    dev = resolve_device(device)
    dtype = require_choice("dtype", dtype, DTYPES)
    caches = [require_choice("cache", c, CACHES) for c in (CACHES if caches is None else caches)]
    if not caches:
        raise ValueError(f"caches must name at least one of {', '.join(CACHES)}")
    prompts = require_counts("prompts", (FAST_PROMPTS if fast else GPU_PROMPTS) if prompts is None else prompts)
    new_tokens = require_count("new_tokens", (FAST_NEW_TOKENS if fast else GPU_NEW_TOKENS) if new_tokens is None
                               else new_tokens, minimum=2, maximum=4096)
    repeats = require_count("repeats", GPU_REPEATS if repeats is None else repeats, minimum=1, maximum=100)
    skipped, specs = [], {}
    for name, cfg in _configs(configs, fast):
        spec = spec_of(cfg, name)
        try:
            check_fits(spec, available, dtype=dtype, device=dev)
        except ModelTooLarge as e:
            skipped.append((name, str(e)))
            continue
        specs[name] = (spec, cfg)
    if dev.type != "cuda" and "graphs" in caches:
        caches.remove("graphs")
        skipped.append(("cache graphs", f"CUDA graphs need a CUDA device; this run is on {dev.type}"))
    if not specs or not caches:
        raise ModelTooLarge("nothing can be measured: " + "; ".join(f"{n}: {w}" for n, w in skipped))

    # the ceilings, measured before any model is built (the models' own weight shapes as GEMVs)
    shapes = sorted({s for spec, _ in specs.values() for s in weight_matrices(spec)})
    copy = probes.measure_copy_bandwidth(device=dev)
    matmul = probes.measure_matmul_flops(dtype=dtype, device=dev)
    name = device_name(dev)
    hardware = catalog_hardware(name) if dev.type == "cuda" else None
    sheet = get_hardware(hardware) if hardware else None
    operators = _operators(shapes, dtype, dev, copy.bandwidth, sheet.bandwidth if sheet else None)
    gemv = probes.measure_gemv([max(shapes, key=lambda s: s[0] * s[1])], [dtype], device=dev, progress=False)
    me = this_machine(MachineMeasurements.collect(copy, gemv, {dtype: matmul}, device=dev), name="this-gpu")
    ceilings = {"copy_bandwidth": copy.bandwidth, "gemv_bandwidth": gemv[0].bandwidth,
                "matmul_flops": matmul.flop_rate, "matmul_n": matmul.n}

    points = []
    with progress_bar(total=len(specs) * len(caches), desc="measure generate() per cache mode", unit="run",
                      enabled=progress) as bar:
        for name_, (spec, cfg) in specs.items():
            model, _ = build_model(cfg, device=dev, dtype=dtype, attention="sdpa", available=available)
            for cache in caches:
                bar.set_postfix_str(f"{name_} {cache}")
                try:
                    timings = measure_engine(model, prompts, new_tokens, repeats, cache=cache)
                except Exception as e:       # a mode this transformers / torch cannot run: said, the others go on
                    skipped.append((f"{name_} cache {cache}", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"))
                    bar.update()
                    continue
                for t in timings:
                    points.append(_point(name_, cache, spec, t, me, sheet, dtype))
                bar.update()
            del model
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return GpuEngineReport(device=dev.type, device_name=name, dtype=dtype, attention="sdpa", versions=_versions(),
                           ceilings=ceilings, points=points, operators=operators, skipped=skipped,
                           seconds=time.perf_counter() - t0, hardware=hardware, fast=fast)


def _point(name, cache, spec, t, me, sheet, dtype) -> EnginePoint:
    ours = estimate(spec, me, prompt_tokens=t.prompt, new_tokens=t.new_tokens, precision=dtype)
    floor = profile = None
    if sheet is not None:
        floor = estimate(spec, sheet, prompt_tokens=t.prompt, new_tokens=t.new_tokens, precision=dtype)
        try:
            profile = estimate(spec, sheet, prompt_tokens=t.prompt, new_tokens=t.new_tokens, precision=dtype,
                               engine="transformers")
        except ValueError:
            profile = None
    return EnginePoint(model=name, cache=cache, params=spec.params, prompt=t.prompt, new_tokens=t.new_tokens,
                       ttft=t.ttft, tpot=t.tpot, ttft_verdict=t.ttft_verdict.verdict,
                       tpot_verdict=t.tpot_verdict.verdict, predicted_ttft=ours.ttft, predicted_tpot=ours.tpot,
                       datasheet_ttft=floor.ttft if floor else None, datasheet_tpot=floor.tpot if floor else None,
                       profile_ttft=profile.ttft if profile else None, profile_tpot=profile.tpot if profile else None)
