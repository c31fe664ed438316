"""SemiAnalysis InferenceX runs (service/data/serving-runs/inferencex-dsr1.json, and inferencex-gptoss-120b.json) as
the deployments they measured: one row to one POST /v1/analyze/serving body. The import of measured runs (issue 26)
maps rows the same way.

How a row's fields are read (docs/serving.md says why):
- hardware to a catalog device, model `dsr1` to the catalog's DeepSeek-V3 (DeepSeek-R1 has its architecture), `gptoss`
  to gpt-oss-120b;
- gpt-oss at precision fp4 is its checkpoint: MXFP4 routed experts beside bf16 attention, router and embeddings,
  with the activations and cache its recipe sets (GPT_OSS_RECIPES);
- the measured TPOT and TTFT: the rows' medians, or their means where only those were kept (the gpt-oss extract);
- precision fp8: DeepSeek's fp8 checkpoint (an fp32 scale per 128 x 128 block) with fp8 activations and KV cache;
  fp4: NVFP4 on NVIDIA (an fp8 scale per 16), MXFP4 on AMD (an 8-bit scale per 32), fp4 activations, fp8 KV cache;
- spec_method mtp: 3 draft tokens, every one accepted (acceptance length 4): the rows do not record the engine's
  acceptance, and a bound must hold whatever it was;
- aggregated rows: one worker of decode_tp devices (num_decode_gpu reads decode_tp squared on some rows: ignored);
- a disaggregated pool: num_gpu / num_workers devices a worker; where the row's tp is smaller than that, the tp is the
  attention group's (SGLang's wide expert parallelism): attention_data_parallel = devices / tp and the experts
  split over the worker; dp_attention true: one attention group a device;
- expert parallelism: over the whole worker when the row's ep exceeds 1, else the experts split by width;
- the engine's cap on running requests, which the rows do not record: each decode group's batch as the run
  measured it, by Little's law (requests decoding at once = output tokens/s x TPOT, the output rate per decode
  device times the decode devices), shared over the groups and rounded down. Beyond it the concurrency queued,
  in TTFT, as the rows' TTFTs show.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from service.core.expectations.engines import EngineCalibration, EnginePoint, fit_engine_calibration
from service.core.expectations.serving_runs import ServingCalibration, ServingPoint, fit_serving_calibration
from service.core.simulation.carried_over import CarriedSchedulingCalibration, calibrate_carried
from service.core.simulation.engines import GiB, engine_preset, sglang_graph_sizes
from service.core.simulation.fit import MeasuredRun, SchedulingCalibration, calibrate
from service.persistence.catalog import DEEPSEEK_RUNS_MODEL, DeviceCatalog
from service.translation.models.analyses import catalog_model
from service.translation.serving.analyses import layout_of_body

DEVICE_IDS = {"b200": "nvidia-b200", "b300": "nvidia-b300", "gb200": "nvidia-gb200", "gb300": "nvidia-gb300",
              "mi355x": "amd-mi355x", "mi300x": "amd-mi300x", "mi325x": "amd-mi325x", "h100": "nvidia-h100-sxm",
              "h200": "nvidia-h200-sxm"}
MODEL_IDS = {"dsr1": DEEPSEEK_RUNS_MODEL, "gptoss": "gpt-oss-120b"}
MTP_DRAFT_TOKENS = 3

FP8_BLOCK_SCALED = {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8", "weight_group_size": 128 * 128,
                    "weight_scale_bytes": 4.0}
NVFP4 = {"scheme": "nvfp4", "kv_cache": "fp8"}
MXFP4 = {"weights": "fp4", "activations": "fp4", "kv_cache": "fp8", "weight_group_size": 32, "weight_scale_bytes": 1.0}
GPT_OSS_CHECKPOINT = {"weights": "bf16", "experts": "fp4", "experts_group_size": 32, "weight_scale_bytes": 1.0,
                      "activations": "bf16", "kv_cache": "bf16"}
# What each recipe changes of the checkpoint's own (gptoss_fp4_*.sh): vLLM on Hopper keeps bf16 (its experts through
# Marlin, weight-only); on B200 vLLM (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8) and TensorRT-LLM multiply the experts in fp8
# (read as every matmul's activations: the attention's projections, a fifth of the FLOPs, then at the fp8 peak too,
# which keeps the bound a bound), and every recipe but Hopper's sets an fp8 cache.
GPT_OSS_RECIPES = {("b200", "vllm"): {"activations": "fp8", "kv_cache": "fp8"},
                   ("b200", "trt"): {"activations": "fp8", "kv_cache": "fp8"},
                   ("mi355x", "atom"): {"kv_cache": "fp8"}}


class UnmappedRun(ValueError):
    """A row this mapping cannot place (an unknown device, model or precision, pools that do not add up)."""


def _dtypes(row: dict[str, Any]) -> dict[str, Any]:
    if row["model"] == "gptoss":
        if row["precision"] != "fp4":
            raise UnmappedRun(f"gpt-oss in precision {row['precision']!r}")
        return GPT_OSS_CHECKPOINT | GPT_OSS_RECIPES.get((row["hardware"], row["framework"]), {})
    if row["precision"] == "fp8":
        return FP8_BLOCK_SCALED
    if row["precision"] == "fp4":
        return MXFP4 if row["hardware"].startswith("mi") else NVFP4
    raise UnmappedRun(f"precision {row['precision']!r}")


def _pool(row: dict[str, Any], role: str) -> dict[str, int]:
    tp, workers, devices = row[f"{role}_tp"], row[f"{role}_num_workers"], row[f"num_{role}_gpu"]
    if workers < 1 or devices % workers:
        raise UnmappedRun(f"{devices} {role} devices over {workers} workers")
    size = devices // workers
    if size % tp:
        raise UnmappedRun(f"{role} tp {tp} does not divide its worker of {size} devices")
    groups = size if row[f"{role}_dp_attention"] else size // tp
    experts = size if row[f"{role}_ep"] > 1 or tp < size else 1
    return {"workers": workers, "tensor_parallel": size, "expert_parallel": experts, "attention_data_parallel": groups}


def model_layers(catalog: DeviceCatalog) -> dict[str, int]:
    """The decoder layers of each row model (MODEL_IDS' keys), whose lines' overheads are per that many layers."""
    return {model: catalog_model(catalog, model_id)[1].layers for model, model_id in MODEL_IDS.items()}


def measured_tpot(metrics: dict[str, float | None]) -> float:
    """The run's TPOT: its median, or its mean where the row kept only that (inferencex-gptoss-120b.json)."""
    return _median_else_mean(metrics, "tpot")


def measured_ttft(metrics: dict[str, float | None]) -> float:
    """The run's TTFT: its median, or its mean where the row kept only that."""
    return _median_else_mean(metrics, "ttft")


def _median_else_mean(metrics: dict[str, float | None], quantity: str) -> float:
    median = metrics.get(f"median_{quantity}")
    if median is not None:
        return median
    mean = metrics.get(f"mean_{quantity}")
    if mean is None:
        raise UnmappedRun(f"metrics with neither median_{quantity} nor mean_{quantity}")
    return mean


def running_per_group(row: dict[str, Any], groups: int, decode_devices: int) -> int:
    """The requests each decode group ran at once in the measured run (Little's law), rounded down, at least 1."""
    metrics = row["metrics"]
    running = metrics["output_tput_per_gpu"] * decode_devices * measured_tpot(metrics)
    return max(1, int(running // groups))


def serving_request(row: dict[str, Any]) -> dict[str, Any]:
    """The /v1/analyze/serving body of one InferenceX row."""
    if row["hardware"] not in DEVICE_IDS:
        raise UnmappedRun(f"hardware {row['hardware']!r}")
    if row["model"] not in MODEL_IDS:
        raise UnmappedRun(f"model {row['model']!r}")
    body: dict[str, Any] = {
        "model_id": MODEL_IDS[row["model"]], "device_id": DEVICE_IDS[row["hardware"]], "input_len": row["isl"],
        "output_len": row["osl"], "concurrency": row["conc"], "dtypes": _dtypes(row), "engine": row["framework"],
    }
    if row["spec_method"] == "mtp":
        body["speculative"] = {"method": "mtp", "draft_tokens": MTP_DRAFT_TOKENS,
                               "acceptance_length": MTP_DRAFT_TOKENS + 1}
    elif row["spec_method"] != "none":
        raise UnmappedRun(f"spec_method {row['spec_method']!r}")
    if row["disagg"]:
        decode = _pool(row, "decode")
        groups = decode["workers"] * decode["attention_data_parallel"]
        decode["max_batch_per_group"] = running_per_group(row, groups, row["num_decode_gpu"])
        body["disaggregated"] = {"prefill": _pool(row, "prefill"), "decode": decode}
    else:
        tp = row["decode_tp"]
        groups = tp if row["decode_dp_attention"] else 1
        body.update(tensor_parallel=tp, expert_parallel=tp if row["decode_ep"] > 1 else 1, attention_data_parallel=groups,
                    max_batch_per_group=running_per_group(row, groups, tp))
    return body


def scope(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """What a shipped serving calibration is kept by: (device id, engine, precision, speculative method)."""
    return DEVICE_IDS[row["hardware"]], row["framework"], row["precision"], row["spec_method"]


def newest_runs(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest run of each configuration (every field but its date and metrics), in the rows' order.

    InferenceX reruns its configurations nightly while the engines improve: the same deployment on the same device
    measured 1.05x apart in the median and 1.65x at the 90th percentile of its repeats, the newest within 4 % of the
    fastest in nine of ten. What a device does with today's engine is its newest run: every shipped fit is fitted to,
    and checked on, those (scripts/fitting_app.py, docs/serving.md)."""
    rows = list(rows)
    newest: dict[str, tuple[str, int]] = {}
    for index, row in enumerate(rows):
        key = json.dumps({name: value for name, value in row.items() if name not in ("date", "metrics")},
                         sort_keys=True)
        if key not in newest or row["date"] >= newest[key][0]:
            newest[key] = (row["date"], index)
    return [rows[index] for index in sorted(index for _, index in newest.values())]


SOURCE = "SemiAnalysis InferenceX DeepSeek-R1 runs, as shipped in service/data/serving-runs/inferencex-dsr1.json"
GPT_OSS_SOURCE = ("SemiAnalysis InferenceX gpt-oss-120b runs (their mean TPOT and TTFT), as shipped in "
                  "service/data/serving-runs/inferencex-gptoss-120b.json")


def calibrations(rows: Iterable[dict[str, Any]], bound_of: Callable[[dict[str, Any]], dict[str, Any]],
                 source: str = SOURCE) -> list[ServingCalibration]:
    """One serving calibration per device, engine, model, precision and speculative method with at least three runs,
    each run beside `bound_of(its serving request)` (the answer's `bound`). Its id: the device, engine, precision and
    method, and the model where it is not DeepSeek-R1 (whose calibrations were shipped first, under those ids)."""
    groups: dict[tuple[str, ...], list[ServingPoint]] = defaultdict(list)
    layouts: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for row in rows:
        body = serving_request(row)
        bound, metrics = bound_of(body), row["metrics"]
        key = (*scope(row), row["model"])
        groups[key].append(
            ServingPoint(row["isl"], row["osl"], row["conc"], bound["tpot_s"], bound["ttft_s"],
                         measured_tpot(metrics), measured_ttft(metrics), bound["prefill_share_s"]))
        layouts[key].add(layout_of_body(body, row["spec_method"]))
    return [fit_serving_calibration(points, id=_calibration_id(key), device_id=key[0], engine=key[1],
                                    precision=key[2], speculative=key[3], source=source, layouts=sorted(layouts[key]),
                                    model=MODEL_IDS[key[4]])
            for key, points in sorted(groups.items()) if len(points) >= 3]


def device_calibrations(dsr1_rows: Iterable[dict[str, Any]], gpt_oss_rows: Iterable[dict[str, Any]],
                        bound_of: Callable[[dict[str, Any]], dict[str, Any]]) -> list[ServingCalibration]:
    """The serving calibrations shipped (scripts/fit_serving_calibration.py): each device, engine and model's, fitted
    to the newest of its DeepSeek-R1 and of its gpt-oss-120b runs."""
    return (calibrations(newest_runs(dsr1_rows), bound_of)
            + calibrations(newest_runs(gpt_oss_rows), bound_of, GPT_OSS_SOURCE))


def _calibration_id(key: tuple[str, ...]) -> str:
    """device:engine:precision:method, and :model where the rows' model is not DeepSeek-R1 (kept under the ids they
    were first shipped with)."""
    scope_key, model = key[:4], key[4]
    return ":".join(scope_key if model == "dsr1" else (*scope_key, MODEL_IDS[model]))


def engine_points(rows: Iterable[dict[str, Any]], deployments_of: Callable[[dict[str, Any]], tuple[Any, Any]], *,
                  on_bounds: bool = False) -> dict[tuple[str, str, str], list[EnginePoint]]:
    """Each run beside `deployments_of(its serving request)`: (its bound, its deployment as its device's kernel
    tables compose it or None where the device has none: the run is left out), each with ttft_s, tpot_s and
    prefill_share_s; by (engine, precision, speculative method). `on_bounds`: the line's basis the bound itself
    (what carrying an engine's line over without kernel tables would do: the comparison bench/unmeasured.py makes)."""
    groups: dict[tuple[str, str, str], list[EnginePoint]] = defaultdict(list)
    for row in rows:
        body = serving_request(row)
        bound, composed = deployments_of(body)
        if composed is None:
            continue
        layout = layout_of_body(body, row["spec_method"])
        metrics = row["metrics"]
        composed = bound if on_bounds else composed
        groups[(row["framework"], row["precision"], row["spec_method"])].append(EnginePoint(
            body["device_id"], layout, ServingPoint(row["isl"], row["osl"], row["conc"], composed.tpot_s,
                                                    composed.ttft_s, measured_tpot(metrics), measured_ttft(metrics),
                                                    composed.prefill_share_s), bound.tpot_s, bound.ttft_s))
    return groups


def engine_calibrations(groups: dict[tuple[str, str, str], list[EnginePoint]], source: str = SOURCE, *,
                        model: str = MODEL_IDS["dsr1"], layers: int = 0) -> list[EngineCalibration]:
    """One engine calibration per engine, precision and speculative method with at least three runs (of `model`, of
    `layers` decoder layers)."""
    return [fit_engine_calibration(points, engine=engine, precision=precision, speculative=method, source=source,
                                   model=model, layers=layers)
            for (engine, precision, method), points in sorted(groups.items()) if len(points) >= 3]


def engine_lines(dsr1_rows: Iterable[dict[str, Any]], gpt_oss_rows: Iterable[dict[str, Any]],
                 deployments_of: Callable[[dict[str, Any]], tuple[Any, Any]],
                 layers: Mapping[str, int]) -> list[EngineCalibration]:
    """The engine lines shipped (scripts/fit_engine_calibration.py), by id: each engine's, fitted to the newest of its
    DeepSeek-R1 runs; an engine with none (vLLM), to its gpt-oss-120b runs (the other engines' are left to check their
    lines on a second model: bench/unmeasured.py). `layers`: the decoder layers of each row model (MODEL_IDS' keys)."""
    groups = engine_points(newest_runs(dsr1_rows), deployments_of)
    gpt_oss = engine_points(newest_runs(gpt_oss_rows), deployments_of)
    only_gpt_oss = {key: points for key, points in gpt_oss.items() if key not in groups}
    fitted = (engine_calibrations(groups, layers=layers["dsr1"])
              + engine_calibrations(only_gpt_oss, GPT_OSS_SOURCE, model=MODEL_IDS["gptoss"], layers=layers["gptoss"]))
    return sorted(fitted, key=lambda calibration: calibration.id)


def simulated_request(row: dict[str, Any]) -> dict[str, Any]:
    """The row's serving request with its benchmark's client (a range ratio of 0.8), its recipe's scheduler and the
    memory its recipe lets the engine have: what the scheduling simulation runs."""
    body = serving_request(row) | {"scheduler": recipe_scheduler(row), "workload": {"range_ratio": RANGE_RATIO}}
    fraction = recipe_memory_fraction(row)
    return body if fraction is None else body | {"memory_utilization": fraction}


# InferenceX's client draws lengths from [0.8 L, L] (benchmarks/benchmark_lib.sh, RANDOM_RANGE_RATIO).
RANGE_RATIO = 0.8


def recipe_scheduler(row: dict[str, Any]) -> dict[str, Any]:
    """The scheduler fields a row's InferenceX recipe sets over its engine's defaults (benchmarks/single_node/
    fixed_seq_len/dsr1_*.sh at SemiAnalysisAI/InferenceX 843c6254f):
    - SGLang on B200/B300 looks for new requests every 30 steps from 16 in flight (10 below), with 32,768-token
      chunks, at most 128 running requests and CUDA graphs to 128 (fp8; 16,384, 256 and 256 fp4); fp8 on four
      devices (run at 8,192 / 1,024 only) every 10 steps, with 8,192-token chunks, 32 running and graphs to 32; fp8
      with MTP (dsr1_fp8_b200_mtp.sh, _b300_mtp.sh) 16,384-token chunks, 512 running and graphs to 512;
    - SGLang on MI355X runs 4 (fp4) or 8 (fp8) decode steps between looks, 196,608-token chunks, graphs to 128;
    - TensorRT-LLM with attention data parallelism balances its ranks' new requests, each waiting up to 60 steps
      (`attention_dp_config: enable_balance, timeout_iters 60`).
    Elsewhere the engine's own cap on running requests stands. The stream interval, which the rows do not record
    either, is read from them: their median ITL over their median TPOT, rounded (1 where below 1.5; disaggregated
    rows stream 10 to 100 tokens a chunk)."""
    metrics = row["metrics"]
    # The engine's own cap stands (the Little's-law batch serving_request gives is what the run achieved, not a cap).
    fields: dict[str, Any] = {"stream_interval": max(1, round(metrics["median_itl"] / metrics["median_tpot"])),
                              "max_running": _preset_cap(row["framework"])}
    if row["framework"] == "trt" and row["decode_dp_attention"]:
        return fields | {"balance_wait_steps": 60}
    if row["disagg"] or "sglang" != row["framework"]:
        return fields
    if row["hardware"].startswith("mi"):
        return fields | {"recv_interval": 4 if row["precision"] == "fp4" else 8, "step_tokens": 196608,
                         "graph_batch_sizes": sglang_graph_sizes(128)}
    fp8 = row["precision"] == "fp8"
    if fp8 and row["decode_tp"] == 4:
        return fields | {"recv_interval": 10, "step_tokens": 8192, "max_running": 32,
                         "graph_batch_sizes": sglang_graph_sizes(32)}
    looks = {"recv_interval": 30 if row["conc"] >= 16 else 10}
    if fp8 and row["spec_method"] == "mtp":
        return fields | looks | {"step_tokens": 16384, "max_running": 512, "graph_batch_sizes": sglang_graph_sizes(512)}
    return fields | looks | {"step_tokens": 32768 if fp8 else 16384, "max_running": 128 if fp8 else 256,
                             "graph_batch_sizes": sglang_graph_sizes(128 if fp8 else 256)}


def recipe_memory_fraction(row: dict[str, Any]) -> float | None:
    """The share of device memory a row's recipe gives the engine's weights and KV cache, where the recipe sets it
    (the same files as recipe_scheduler): SGLang's --mem-fraction-static on B200/B300, 0.82 for fp8 on eight devices,
    0.95 on four, 0.85 for fp4. None elsewhere: the service's default stands. It sizes the KV cache, so how many
    requests run at once at long prompts."""
    if row["disagg"] or row["framework"] != "sglang" or row["hardware"] not in ("b200", "b300"):
        return None
    if row["precision"] != "fp8":
        return 0.85
    return 0.95 if row["decode_tp"] == 4 else 0.82


def _preset_cap(framework: str) -> int:
    """The engine's own cap on running requests (its preset on a device of InferenceX's size: each has more than the
    160 GiB above which no preset changes)."""
    return engine_preset(framework, 192 * GiB).max_running


def scheduling_calibrations(rows: Iterable[dict[str, Any]], run_of: Callable[[dict[str, Any]], Any],
                            source: str = SOURCE) -> list[SchedulingCalibration]:
    """One scheduling calibration per device, engine, precision and speculative method with at least three runs,
    each run simulated at unit timing by `run_of(its simulated request)`."""
    groups: dict[tuple[str, str, str, str], list[MeasuredRun]] = defaultdict(list)
    for row in rows:
        groups[scope(row)].append(_measured(row, run_of(simulated_request(row))))
    return calibrate(groups, source)


def _measured(row: dict[str, Any], run) -> MeasuredRun:
    metrics = row["metrics"]
    return MeasuredRun(run.features, row["isl"], row["osl"], metrics["median_tpot"], metrics["median_ttft"],
                       metrics.get("p99_tpot"), metrics.get("p99_ttft"))


def carried_scheduling_calibrations(rows: Iterable[dict[str, Any]], run_of: Callable[[dict[str, Any]], Any],
                                    lines: Mapping[tuple[str, str, str], Any], source: str = SOURCE,
                                    layers: int = 0) -> list[CarriedSchedulingCalibration]:
    """One scheduling calibration per engine, precision and speculative method over the devices with kernel tables,
    each aggregated run simulated at unit timing on its device's kernel tables by `run_of(its simulated request)` (None
    where the device has none: the run is left out). Disaggregated runs are left out: the simulation does not answer
    for disaggregated pools (docs/serving.md). Kept only where it beats the scope's steady-state line (`lines`: the
    engine calibrations, by scope; the expectation on kernel tables needs one), which answers on its own elsewhere, on
    the devices left out (`beats_the_line`)."""
    groups: dict[tuple[str, str, str], list[tuple[str, MeasuredRun]]] = defaultdict(list)
    for row in rows:
        if row["disagg"]:
            continue
        run = run_of(simulated_request(row))
        if run is not None:
            device, engine, precision, method = scope(row)
            groups[(engine, precision, method)].append((device, _measured(row, run)))
    return [c for c in calibrate_carried(groups, source, model=MODEL_IDS["dsr1"], layers=layers)
            if (line := lines.get((c.engine, c.precision, c.speculative))) is not None and beats_the_line(c, line)]


# How much worse than the line a carried calibration may be at any of its four errors: a tenth (SGLang fp4's TPOT
# median, 27.0 % against 26.6 %, beside a TTFT median of 34 % against 60 % and both 90th percentiles better).
TOLERANCE = 1.1


def beats_the_line(carried: CarriedSchedulingCalibration, line: EngineCalibration) -> bool:
    """Whether the simulation, on the devices left out, improves on the steady-state line's median TPOT or TTFT error
    while none of its median and 90th-percentile TPOT and TTFT errors is more than TOLERANCE times the line's: a
    better median bought with a tail several times wider is not kept, nor one that is worse everywhere."""
    errors = [(getattr(carried, f"{quantity}_{at}_error"), getattr(line, f"{quantity}_{at}_error"))
              for quantity in ("tpot", "ttft") for at in ("median", "p90")]
    return (all(mine <= TOLERANCE * theirs for mine, theirs in errors)
            and (carried.tpot_median_error < line.tpot_median_error or carried.ttft_median_error < line.ttft_median_error))
