"""Published serving measurements: the vLLM paper's Table 1 held against :func:`kv_slots`.

Lessons: 10
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from course_lib.core.numeric import raw as g
from course_lib.core.data import load_catalog
from course_lib.core.serving.memory import kv_slots

# --------------------------------------------------------------------------------------------------
# Published measurements
# --------------------------------------------------------------------------------------------------
def serving_measurements() -> dict:
    """``course_lib/data/serving_measurements.json`` (a fresh copy): the transcribed serving figures and sources."""
    return load_catalog("serving_measurements", copy=True)


@dataclass(frozen=True)
class KVSlotsCheck:
    """One row of the vLLM paper's Table 1 held against :func:`kv_slots` (bytes, token slots).

    ``predicted_decimal`` reads the paper's 'GB' as 1e9 bytes, ``predicted_binary`` as 2**30;
    ``efficiency_*`` = predicted / published. ``bytes_per_slot`` is what the paper's two numbers
    imply (its memory, read as GiB, over its slots). ``predicted_*`` are None where the model's
    bytes per token are not known from a source.
    """

    model: str
    gpus: str
    kv_memory_gb: float
    published_slots: float
    bytes_per_token: float | None
    predicted_decimal: int | None
    predicted_binary: int | None
    efficiency_decimal: float | None
    efficiency_binary: float | None
    bytes_per_slot: float
    where: str


def published_kv_slots() -> list[KVSlotsCheck]:
    """The vLLM paper's Table 1, each row's KV slots predicted from its KV memory and the bytes per token.

    The bytes per token come from the paper itself (OPT-13B, section 3: 2 x 5120 x 40 x 2); the
    other rows' architectures are not in the paper, so only their implied bytes per slot are shown.
    """
    data = load_catalog("serving_measurements")
    per_token = {row["model"]: math.prod(row["factors"].values()) for row in data["kv_per_token"]}
    table = data["kv_slots"]
    out = []
    for row in table["rows"]:
        mem = row["kv_cache_memory_gb"]
        slots = row["max_kv_slots_k"] * 1000
        b = per_token.get(row["model"])
        dec = kv_slots(mem * 1e9, b) if b else None
        bina = kv_slots(mem * 2**30, b) if b else None
        out.append(KVSlotsCheck(model=row["model"], gpus=row["gpus"], kv_memory_gb=mem, published_slots=slots,
                                bytes_per_token=b, predicted_decimal=dec, predicted_binary=bina,
                                efficiency_decimal=g.efficiency(dec, slots) if b else None,
                                efficiency_binary=g.efficiency(bina, slots) if b else None,
                                bytes_per_slot=mem * 2**30 / slots, where=table["where"]))
    return out


@dataclass(frozen=True)
class ServingCheck:
    """One load of a published serving benchmark held against :func:`simulate` (seconds, requests/s).

    ``concurrency`` users in a closed loop (a benchmark's ``--max-concurrency``), each request the published mean
    prompt and answer lengths. Means over every request, as the benchmark reports them: TTFT, TPOT (each request's
    mean gap) and ITL (every gap); ``*_ratio`` = predicted / measured.
    """

    concurrency: int
    measured_ttft: float
    predicted_ttft: float
    measured_tpot: float
    predicted_tpot: float
    measured_itl: float
    predicted_itl: float
    measured_throughput: float
    predicted_throughput: float

    @property
    def tpot_ratio(self) -> float:
        return self.predicted_tpot / self.measured_tpot

    @property
    def ttft_ratio(self) -> float:
        return self.predicted_ttft / self.measured_ttft

    @property
    def throughput_ratio(self) -> float:
        return self.predicted_throughput / self.measured_throughput


def published_serving_checks(*, compute_efficiency=1.0, bandwidth_efficiency=1.0, seed=0) -> list[ServingCheck]:
    """The transcribed closed-loop benchmark (``serving_measurements()["serving_latency"]``: one model, one GPU,
    several loads) simulated at each of its concurrencies with the same number of requests and the published mean
    lengths (the per-request lengths are not published), at the efficiencies given (default: the physical floor)."""
    from course_lib.core.serving.simulator import simulate

    bench = load_catalog("serving_measurements")["serving_latency"]
    n_req = bench["requests"]
    prompt = round(bench["total_input_tokens"] / n_req)
    answer = round(bench["total_generated_tokens"] / n_req)
    out = []
    for row in bench["rows"]:
        r = simulate(bench["model"], bench["hardware"], None, prompt, answer, n_req, seed, users=row["concurrency"],
                     warmup=0, precision="bf16", compute_efficiency=compute_efficiency,
                     bandwidth_efficiency=bandwidth_efficiency)
        recs = r.records
        gaps = sum(x.finish - x.first_token for x in recs) / sum(x.output_tokens - 1 for x in recs)
        out.append(ServingCheck(
            concurrency=row["concurrency"], measured_ttft=row["mean_ttft_ms"] / 1e3,
            predicted_ttft=sum(x.ttft for x in recs) / len(recs), measured_tpot=row["mean_tpot_ms"] / 1e3,
            predicted_tpot=sum(x.tpot for x in recs) / len(recs), measured_itl=row["mean_itl_ms"] / 1e3,
            predicted_itl=gaps, measured_throughput=row["request_throughput"],
            predicted_throughput=len(recs) / r.duration))
    return out
