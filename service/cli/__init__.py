"""`roofline`: the service from a terminal.

In-process by default: the commands call the same translation code the HTTP routes call, against the
configured database (ROOFLINE_DATABASE_URL; measured roofs included). With --url they ask a running
service instead. Tables by default, JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from schemas.models import SCHEMES
from service.cli.backends import backend
from service.cli.models import MODEL_HELP, ROPE_SCALING_HELP, model_of
from service.cli.render import (
    compare_table,
    device_table,
    fusion_summary,
    kv_table,
    launch_text,
    model_list_table,
    model_table,
    operator_table,
    plan_table,
    serving_table,
    sweep_table,
    training_plan_table,
    training_table,
)
from service.core.operators.registry import KINDS, OPERATORS
from service.core.training.fp8 import RECIPES
from service.core.training.peft import DEFAULT_TARGETS, QUANTISED_BASE_BYTES
from service.core.training.peft import METHODS as PEFT_METHODS
from service.core.training.schedules import SCHEDULES

# Sweeps of more points than one request allows are sent in chunks of this many.
SWEEP_CHUNK = 256
# Items of a JSON-lines batch sent per request (the endpoint's limit).
BATCH_CHUNK = 1000
ROOF_MODES = ["effective", "nominal", "measured"]


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def count(text: str) -> int:
    """A whole number as people write large ones: 16384, 16e6, 1.5e7."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1: {text!r}")
    return int(value)


def show(args, result: Any, render) -> None:
    print(json.dumps(result, indent=2) if args.json else render(result))


def read_json(path: str) -> Any:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path}: not JSON ({exc})") from None


def operator_body(args) -> dict[str, Any]:
    operator: dict[str, Any] = {"kind": args.kind}
    for name in ("m", "n", "k", "batch", "dtype"):
        if getattr(args, name) is not None:
            operator[name] = getattr(args, name)
    for assignment in args.field or []:
        name, _, value = assignment.partition("=")
        operator[name] = parse_value(value)
    return {"operator": operator, "roofs": args.roofs, **measured(args), **engine_of(args)}


def measured(args) -> dict[str, Any]:
    """A measured time where the command takes one (analyze operator/model): the answer then says what was achieved."""
    seconds = getattr(args, "measured_time", None)
    return {"measured_time_s": seconds} if seconds is not None else {}


def dtypes_of(args) -> dict[str, Any]:
    """The dtypes flags given, as the request's `dtypes`; none given: nothing, so a checkpoint's own formats apply."""
    given = {name: value for name, value in (("scheme", args.scheme), ("weights", args.weights_dtype),
                                             ("activations", args.activations_dtype), ("kv_cache", args.kv_dtype))
             if value is not None}
    return {"dtypes": given} if given else {}


def model_body(args) -> dict[str, Any]:
    return {**model_of(args), "tensor_parallel": args.tensor_parallel, **dtypes_of(args)}


def step_body(args) -> dict[str, Any]:
    body = {**model_body(args), "phase": args.phase, "batch_size": args.batch_size, "roofs": args.roofs}
    if args.seq_len is not None:
        body["seq_len"] = args.seq_len
    if getattr(args, "output_len", None):
        body["output_len"] = args.output_len
    return {**body, **measured(args), **engine_of(args)}


def engine_of(args) -> dict[str, Any]:
    """The kernels' engine where the command takes one: its calibration gives the expected time."""
    engine = getattr(args, "kernel_engine", None)
    return {"engine": engine} if engine else {}


def kernel_engine(parser) -> None:
    parser.add_argument("--engine", dest="kernel_engine", help="the kernels' engine (e.g. trtllm): the expected time "
                                                               "is its calibration's on the device (default: the "
                                                               "shipped one)")


def cmd_models(args) -> None:
    with backend(args.url) as service:
        models = service.models()
    show(args, models, model_list_table)


def cmd_devices(args) -> None:
    with backend(args.url) as service:
        devices = service.devices()
    show(args, devices, device_table)


def cmd_operator(args) -> None:
    with backend(args.url) as service:
        result = service.analyze("operator", {"device_id": args.device, **operator_body(args)})
    show(args, result, operator_table)


def cmd_model(args) -> None:
    with backend(args.url) as service:
        result = service.analyze("model", {"device_id": args.device, **step_body(args)})
    show(args, result, model_table)


def pool_of(text: str, flag: str) -> dict[str, int]:
    """WORKERS:TP[:EP[:DP]] as a pool (e.g. 2:8:8:8: two workers of 8, experts over 8, 8 attention groups)."""
    parts = text.split(":")
    if not 2 <= len(parts) <= 4 or not all(part.isdigit() for part in parts):
        raise SystemExit(f"{flag}: expected WORKERS:TP[:EP[:DP]], e.g. 2:8:8:8, not {text!r}")
    names = ("workers", "tensor_parallel", "expert_parallel", "attention_data_parallel")
    return dict(zip(names, map(int, parts), strict=False))


def speculative_of(args) -> dict[str, Any]:
    """The speculative-decoding flags as a request's `speculative`; none given: nothing."""
    if not args.speculative:
        return {}
    speculative = {"method": args.speculative, "draft_tokens": args.draft_tokens,
                   "acceptance_length": args.acceptance_length}
    if args.draft_model:
        speculative["draft_model_id"] = args.draft_model
    return {"speculative": speculative}


def serving_body(args) -> dict[str, Any]:
    body: dict[str, Any] = {**model_of(args), **dtypes_of(args), "device_id": args.device,
                            "input_len": args.input_len, "output_len": args.output_len, "concurrency": args.concurrency,
                            "roofs": args.roofs}
    if (args.prefill_pool is None) != (args.decode_pool is None):
        raise SystemExit("--prefill-pool and --decode-pool go together (disaggregated pools)")
    if args.prefill_pool:
        body["disaggregated"] = {"prefill": pool_of(args.prefill_pool, "--prefill-pool"),
                                 "decode": pool_of(args.decode_pool, "--decode-pool")}
        if args.max_batch_per_group:
            body["disaggregated"]["decode"]["max_batch_per_group"] = args.max_batch_per_group
    else:
        body.update(workers=args.workers, tensor_parallel=args.tensor_parallel, expert_parallel=args.expert_parallel,
                    attention_data_parallel=args.attention_data_parallel)
        if args.max_batch_per_group:
            body["max_batch_per_group"] = args.max_batch_per_group
    body.update(speculative_of(args))
    if args.engine:
        body["engine"] = args.engine
    body["calibration"] = args.calibration
    scheduler = {name: getattr(args, name) for name in ("recv_interval", "step_tokens", "max_running", "stream_interval")
                 if getattr(args, name) is not None}
    if scheduler:
        body["scheduler"] = scheduler
    if args.range_ratio is not None:
        body["workload"] = {"range_ratio": args.range_ratio}
    return body


def percentile_slos(args) -> list[tuple[str, float | None]]:
    """The plan's percentile SLOs from their flags (--ttft-p90 ... --e2e-p99)."""
    return [(f"{quantity}_{percentile}_s", getattr(args, f"{quantity}_{percentile}"))
            for quantity in ("ttft", "tpot", "e2e") for percentile in ("p90", "p99")]


def calibration_option(parser) -> None:
    parser.add_argument("--calibration", choices=["auto", "kernels", "none"], default="auto",
                        help="where `expected` comes from: auto (the device's own serving runs where fitted, else its "
                             "kernel tables and the engine's carried-over costs), kernels (the latter for every "
                             "device), none (bounds only)")


def cmd_serving(args) -> None:
    with backend(args.url) as service:
        result = service.analyze("serving", serving_body(args))
    show(args, result, launch_text if args.launch else serving_table)


def cmd_kv(args) -> None:
    body = {"device_id": args.device, **model_body(args), "context_len": args.context_len,
            "workspace_bytes": args.workspace_bytes}
    if args.memory_utilization is not None:
        body["memory_utilization"] = args.memory_utilization
    with backend(args.url) as service:
        result = service.analyze("kv-capacity", body)
    show(args, result, kv_table)


def cmd_sweep(args) -> None:
    if args.seq_len is None and args.parameter != "seq_len":
        raise SystemExit("--seq-len is required unless it is the swept --parameter")
    if args.stop < args.start or args.step < 1:
        raise SystemExit("need --start <= --stop and --step >= 1")
    body = {"device_id": args.device, **step_body(args)}
    values = list(range(args.start, args.stop + 1, args.step))
    rows: list[dict] = []
    with backend(args.url) as service:
        for start in range(0, len(values), SWEEP_CHUNK):
            chunk = values[start:start + SWEEP_CHUNK]
            result = service.analyze("sweep", {"endpoint": "model", "request": body, "parameter": args.parameter,
                                               "values": chunk})
            rows += result["rows"]
            bar = "#" * (30 * len(rows) // len(values))
            print(f"\r[{bar:<30}] {len(rows)}/{len(values)} points", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    show(args, rows, lambda rs: sweep_table(rs, args.parameter))


def cmd_compare(args) -> None:
    if args.serving:
        if not (args.model and args.input_len and args.output_len and args.concurrency):
            raise SystemExit("--serving needs --model, --input-len, --output-len and --concurrency")
        request = {**model_of(args), **dtypes_of(args), "input_len": args.input_len, "output_len": args.output_len,
                   "concurrency": args.concurrency, "tensor_parallel": args.tensor_parallel,
                   "expert_parallel": args.expert_parallel, "attention_data_parallel": args.attention_data_parallel,
                   "roofs": args.roofs}
        if args.kernel_engine:
            request["engine"] = args.kernel_engine
        body = {"endpoint": "serving", "device_ids": args.devices, "request": request}
    elif args.model:
        body = {"endpoint": "model", "device_ids": args.devices, "request": step_body(args)}
    elif args.kind:
        body = {"endpoint": "operator", "device_ids": args.devices, "request": operator_body(args)}
    else:
        raise SystemExit("give --model (a model step) or --kind (an operator)")
    with backend(args.url) as service:
        result = service.analyze("compare", body)

    show(args, result, compare_table)


def cmd_fusion(args) -> None:
    body = read_json(args.graph)
    if args.device:
        body["device_id"] = args.device
    with backend(args.url) as service:
        result = service.analyze("fusion", body)

    show(args, result, fusion_summary)


def cmd_plot(args) -> None:
    body: dict[str, Any] = read_json(args.points) if args.points else {}
    body.update({"device_id": args.device, "format": args.format, "roofs": args.roofs})
    with backend(args.url) as service:
        image = service.plot(body)
    Path(args.output).write_bytes(image)
    print(f"wrote {args.output} ({len(image):,} bytes)")


def device_prices(given: list[str], devices: list[str]) -> dict[str, float]:
    """--price-per-device-hour as one price for every candidate (2.5) or a price each (nvidia-h200-sxm=3.1)."""
    prices: dict[str, float] = {}
    for item in given:
        device, _, price = item.rpartition("=")
        try:
            value = float(price)
        except ValueError:
            raise SystemExit(f"--price-per-device-hour: {item!r} is neither a price nor DEVICE=PRICE") from None
        prices.update({device: value} if device else dict.fromkeys(devices, value))
    return prices


def cmd_plan_serving(args) -> None:
    body = {**model_of(args), "device_ids": args.devices, "total_devices": args.total_devices,
            "input_len": args.input_len, "output_len": args.output_len, "modes": args.modes, "top_n": args.top_n,
            **dtypes_of(args), **speculative_of(args),
            "slo": {name: value for name, value in (("ttft_s", args.ttft), ("tpot_s", args.tpot),
                                                    ("e2e_latency_s", args.e2e), *percentile_slos(args))
                    if value is not None}}
    for name in ("target_requests_per_s", "memory_utilization", "engine", "calibration"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    if args.price_per_device_hour:
        body["price_per_device_hour"] = device_prices(args.price_per_device_hour, args.devices)
    with backend(args.url) as service:
        result = service.analyze("plan-serving", body)
    show(args, result, plan_table)


def training_body(args) -> dict[str, Any]:
    body = {"device_id": args.device, **model_of(args), "seq_len": args.seq_len,
            "micro_batch_size": args.micro_batch_size, "tensor_parallel": args.tensor_parallel,
            "pipeline_parallel": args.pipeline_parallel, "pipeline_schedule": args.pipeline_schedule,
            "virtual_pipeline_stages": args.virtual_pipeline_stages, "sequence_parallel": args.sequence_parallel,
            "context_parallel": args.context_parallel, "expert_parallel": args.expert_parallel,
            "zero_stage": args.zero_stage, "recompute": args.recompute,
            "reshard_after_forward": not args.keep_parameters_after_forward,
            "dtypes": {"fp8_recipe": args.fp8_recipe},
            "optimizer": args.optimizer, "roofs": args.roofs}
    for name in ("gradient_accumulation_steps", "global_batch_tokens", "node_size", "first_stage_layers",
                 "last_stage_layers"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    if args.peft is not None:
        body["peft"] = {"method": args.peft, "rank": args.lora_rank, "alpha": args.lora_alpha,
                        "target_modules": args.lora_targets.split(",")}
        if args.qlora_base is not None:
            body["peft"]["base_dtype"] = args.qlora_base
    return body


def cmd_measure(args) -> None:
    """The roofs and matmul timings of this machine's device, written as the service's forms and posted where asked."""
    from service.measure.collect import measure
    from service.measure.upload import UploadError, upload

    if args.post and not (args.token and args.device_id):
        raise SystemExit("--post needs --token (a write token) and --device-id (the device the timings are of)")
    try:
        run = measure(args.device, quick=args.quick, budget_s=args.budget, out=args.out, resume=args.resume,
                      device_id=args.device_id)
    except ModuleNotFoundError as exc:
        raise SystemExit(f"roofline measure needs PyTorch for the device it measures ({exc.name} is not installed)") \
            from None
    roofs = "; ".join(f"{b['kind']} {b.get('dtype', b.get('level'))}: "
                      + (f"{b['flops_per_s'] / 1e12:.3g} TFLOP/s" if b["kind"] == "compute" else f"{b['bytes_per_s'] / 1e9:.3g} GB/s")
                      for b in run.benchmarks)
    print(f"{run.environment['device_name']}: {roofs}")
    print(f"{len(run.timings)} matmul timings in {run.elapsed_s:.1f} s"
          + (" (stopped at the budget)" if run.stopped_at_budget else "") + f"; files in {args.out}")
    if args.post:
        import httpx

        with httpx.Client(base_url=args.post, timeout=120) as client:
            try:
                result = upload(client, args.out, args.device_id, args.token, create_device=args.create_device)
            except UploadError as exc:
                raise SystemExit(str(exc)) from None
        for fit in result["calibrations"]:
            print(f"calibration {fit['id']}: fitted on {fit['fitted_on']} timings, error {fit['median_error']:.1%} "
                  f"(median) / {fit['p90_error']:.1%} (p90), {fit['checked_by']}")
        for missing in result["not_fitted"]:
            print(f"not fitted: {missing['scope']}: {missing['reason']}")


def cmd_train(args) -> None:
    with backend(args.url) as service:
        result = service.analyze("training", {**training_body(args), "data_parallel": args.data_parallel})
    show(args, result, training_table)


# The layout flags at their defaults: what `plan training --search` chooses itself.
LAYOUT_DEFAULTS = {"tensor_parallel": 1, "pipeline_parallel": 1, "pipeline_schedule": "1f1b",
                   "virtual_pipeline_stages": 1, "context_parallel": 1, "expert_parallel": 1,
                   "sequence_parallel": False, "recompute": "none"}


def cmd_plan_training(args) -> None:
    body = {**training_body(args), "num_devices": args.num_devices, "total_tokens": args.total_tokens}
    if args.search:
        given = [name for name, default in LAYOUT_DEFAULTS.items() if body[name] != default]
        given += [name for name in ("gradient_accumulation_steps", "first_stage_layers", "last_stage_layers")
                  if name in body]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise SystemExit(f"--search chooses the layout: leave out {flags}")
        body = {name: value for name, value in body.items() if name not in LAYOUT_DEFAULTS}
        body |= {"search": True, "top_n": args.top_n}
    for name in ("mfu", "price_per_device_hour", "deadline_days"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    with backend(args.url) as service:
        result = service.analyze("plan-training", body)
    show(args, result, training_plan_table)


def cmd_batch(args) -> None:
    """JSON lines in (one item per line: {"id", "analysis", "request"}), JSON lines out (one result per item)."""
    text = sys.stdin.read() if args.items == "-" else Path(args.items).read_text()
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{args.items} line {number}: not JSON ({exc})") from None
    with backend(args.url) as service:
        for start in range(0, len(items), BATCH_CHUNK):
            for result in service.analyze("batch", {"items": items[start:start + BATCH_CHUNK]})["results"]:
                print(json.dumps(result))


def cmd_serve(args) -> None:
    from service.persistence.migrate import upgrade
    from service.runtime.config import get_settings
    from service.runtime.server import serve

    upgrade(get_settings().database_url)
    serve(args.host, args.port, args.workers)


def cmd_db_upgrade(args) -> None:
    from service.persistence.migrate import upgrade
    from service.runtime.config import get_settings

    upgrade(get_settings().database_url)
    print("database is at the head revision")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="roofline", description=__doc__.splitlines()[0],
                                   epilog="Units: JSON is SI (FLOP, bytes, seconds); tables use k/M/G/T/P = 1e3..1e15.")
    commands = root.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--json", action="store_true", help="print the answer as JSON instead of a table")
        p.add_argument("--url", help="ask a running service, e.g. http://127.0.0.1:8000 (default: in-process, "
                                     "against ROOFLINE_DATABASE_URL)")
        return p

    def roofs(p):
        p.add_argument("--roofs", default="effective", choices=ROOF_MODES,
                       help="which roofs: measured where submitted, else nominal (effective); datasheet only "
                            "(nominal); measured only (measured). Default: effective")

    def measured_time(p, what: str):
        p.add_argument("--measured-time", type=float, metavar="SECONDS",
                       help=f"the time {what} took when you ran it: the answer adds the achieved FLOP/s, MFU, HBM "
                            "bandwidth and the fraction of the roofline reached")

    def operator_options(p, required: bool):
        p.add_argument("--kind", required=required, choices=KINDS, metavar="KIND",
                       help="the operator: " + "; ".join(f"{name}, {kind.summary}" for name, kind in OPERATORS.items()))
        for name, text in (("m", "rows of A and C"), ("n", "columns of B and C"), ("k", "the reduction dimension"),
                           ("batch", "batch of independent matmuls")):
            p.add_argument(f"--{name}", type=int, help=f"matmul: {text}")
        p.add_argument("--dtype", help="element type, e.g. bf16, fp16, fp8_e4m3, fp32 (default bf16)")
        p.add_argument("--field", action="append", metavar="NAME=VALUE",
                       help="any other operator field, the value as JSON (e.g. shape=[4096,4096], op=silu); repeatable")

    def model_options(p, device: bool = True):
        if device:
            p.add_argument("--device", required=True, help="device id (see `roofline devices`)")
        p.add_argument("--model", required=device, help=MODEL_HELP)
        p.add_argument("--rope-scaling", metavar="TYPE:FACTOR", help=ROPE_SCALING_HELP)
        p.add_argument("--tensor-parallel", type=int, default=1, help="devices the model is split over (default 1)")
        p.add_argument("--scheme", choices=sorted(SCHEMES), help="a deployment scheme by name: w8a8-fp8 computes at the "
                       "fp8 peak, w8a16-fp8 stores fp8 weights but computes in bf16, w4a16 int4 in groups of 128, "
                       "mxfp4, nvfp4, ...; the dtype flags below override its parts")
        p.add_argument("--weights-dtype", help="weights' element type (default: the checkpoint's own where its config "
                                               "has a quantization_config, else bf16). Alone it is weight-only: the "
                                               "matmuls compute at the activations' peak; W8A8 needs "
                                               "--activations-dtype too, or --scheme w8a8-fp8")
        p.add_argument("--activations-dtype", help="activations' element type (default bf16)")
        p.add_argument("--kv-dtype", help="KV cache's element type (default bf16)")

    def speculative_options(p):
        p.add_argument("--speculative", choices=["mtp", "eagle", "draft"], help="speculative decoding's draft")
        p.add_argument("--draft-tokens", type=int, default=3, help="tokens drafted per verification (default 3)")
        p.add_argument("--acceptance-length", type=float, help="mean tokens emitted per verification, as the engine "
                                                               "logs it (required with --speculative)")
        p.add_argument("--draft-model", help="with --speculative draft: the draft model's catalog id")

    def step_options(p, seq_required: bool):
        p.add_argument("--phase", required=True, choices=["prefill", "decode"],
                       help="prefill: seq-len new tokens per sequence; decode: one token over seq-len cached")
        p.add_argument("--batch-size", type=int, default=1, help="sequences in the step (default 1)")
        p.add_argument("--seq-len", type=int, required=seq_required,
                       help="prompt tokens (prefill) or cached context (decode)")

    common(commands.add_parser("devices", help="list the device catalog")).set_defaults(run=cmd_devices)
    common(commands.add_parser("models", help="list the model catalog")).set_defaults(run=cmd_models)

    analyze = commands.add_parser("analyze", help="roofline of an operator or a model step").add_subparsers(
        dest="what", required=True)
    op = common(analyze.add_parser("operator", help="one operator on one device"))
    op.add_argument("--device", required=True, help="device id (see `roofline devices`)")
    operator_options(op, required=True)
    roofs(op)
    measured_time(op, "the operator")
    kernel_engine(op)
    op.set_defaults(run=cmd_operator)

    model = common(analyze.add_parser("model", help="one prefill or decode step of a model"))
    model_options(model)
    step_options(model, seq_required=True)
    model.add_argument("--output-len", type=int, help="tokens generated: adds the end-to-end latency")
    roofs(model)
    measured_time(model, "the step")
    kernel_engine(model)
    model.set_defaults(run=cmd_model)

    deployment = common(analyze.add_parser("serving", help="one serving deployment under one workload: what a "
                                                           "benchmark would measure, as bounds"))
    model_options(deployment)
    deployment.add_argument("--input-len", type=int, required=True, help="prompt tokens per request")
    deployment.add_argument("--output-len", type=int, required=True, help="generated tokens per request")
    deployment.add_argument("--concurrency", type=int, required=True, help="requests in flight over the deployment")
    deployment.add_argument("--workers", type=int, default=1, help="aggregated: copies of the worker (default 1)")
    deployment.add_argument("--expert-parallel", type=int, default=1,
                            help="1, or the worker's tensor-parallel size: the experts split whole over its devices")
    deployment.add_argument("--attention-data-parallel", type=int, default=1,
                            help="attention groups per worker, each with its own requests and KV cache (default 1)")
    deployment.add_argument("--max-batch-per-group", type=int, help="the engine's cap on requests a group decodes at once")
    deployment.add_argument("--prefill-pool", metavar="W:TP[:EP[:DP]]", help="disaggregated: the prefill pool")
    deployment.add_argument("--decode-pool", metavar="W:TP[:EP[:DP]]", help="disaggregated: the decode pool")
    speculative_options(deployment)
    deployment.add_argument("--engine", help="the serving engine's label (sglang, vllm, trt, ...)")
    calibration_option(deployment)
    simulation = deployment.add_argument_group("the scheduling simulation behind `expected` (over the engine's preset)")
    simulation.add_argument("--recv-interval", type=int, help="forward passes between looks for new requests")
    simulation.add_argument("--step-tokens", type=int, help="tokens a step may prefill (the chunked-prefill size)")
    simulation.add_argument("--max-running", type=int, help="requests a group decodes at once, at most")
    simulation.add_argument("--stream-interval", type=int, help="tokens a streamed chunk carries")
    deployment.add_argument("--launch", action="store_true",
                            help="print the commands that start the deployment on --engine and benchmark it")
    simulation.add_argument("--range-ratio", type=float,
                            help="lengths drawn from [ratio x L, L] as benchmark clients draw them (default 1)")
    roofs(deployment)
    deployment.set_defaults(run=cmd_serving)

    kv = common(commands.add_parser("kv-capacity", help="how many requests of a context fit in memory"))
    model_options(kv)
    kv.add_argument("--context-len", type=int, required=True, help="tokens cached per request")
    kv.add_argument("--memory-utilization", type=float, help="fraction of usable memory the engine may use (default 0.9, vLLM's)")
    kv.add_argument("--workspace-bytes", type=float, default=0, help="memory kept for activations (bytes, default 0)")
    kv.set_defaults(run=cmd_kv)

    sweep = common(commands.add_parser("sweep", help="a model step over a range of one parameter"))
    model_options(sweep)
    step_options(sweep, seq_required=False)
    sweep.add_argument("--parameter", required=True, help="the swept field: batch_size, seq_len, tensor_parallel, ...")
    sweep.add_argument("--start", type=int, required=True, help="first value")
    sweep.add_argument("--stop", type=int, required=True, help="last value (included)")
    sweep.add_argument("--step", type=int, default=1, help="spacing of the values (default 1)")
    roofs(sweep)
    sweep.set_defaults(run=cmd_sweep)

    compare = common(commands.add_parser("compare", help="one workload on several devices, ranked by time"))
    compare.add_argument("--devices", required=True, nargs="+", help="device ids")
    model_options(compare, device=False)
    compare.add_argument("--phase", choices=["prefill", "decode"], default="decode", help="model step (default decode)")
    compare.add_argument("--batch-size", type=int, default=1, help="sequences in the step (default 1)")
    compare.add_argument("--seq-len", type=int, default=None, help="model step: prompt or cached tokens")
    kernel_engine(compare)
    operator_options(compare, required=False)
    serving_mode = compare.add_argument_group("--serving: one serving deployment on each device (ranked by TPOT)")
    serving_mode.add_argument("--serving", action="store_true",
                              help="compare serving deployments (POST /v1/analyze/serving); --engine names the "
                                   "serving engine")
    serving_mode.add_argument("--input-len", type=int, help="prompt tokens per request")
    serving_mode.add_argument("--output-len", type=int, help="generated tokens per request")
    serving_mode.add_argument("--concurrency", type=int, help="requests in flight over the deployment")
    serving_mode.add_argument("--expert-parallel", type=int, default=1, help="1, or --tensor-parallel")
    serving_mode.add_argument("--attention-data-parallel", type=int, default=1, help="attention groups")
    roofs(compare)
    compare.set_defaults(run=cmd_compare)

    fusion = common(commands.add_parser("fusion", help="what fusing a graph of operators saves"))
    fusion.add_argument("graph", help="a JSON file with the /v1/analyze/fusion body ('-' reads standard input)")
    fusion.add_argument("--device", help="device id (overrides the file's device_id)")
    fusion.set_defaults(run=cmd_fusion)

    plot = commands.add_parser("plot", help="draw a device's roofline chart to a file")
    plot.add_argument("--device", required=True, help="device id")
    plot.add_argument("--output", required=True, help="file to write (.svg or .png)")
    plot.add_argument("--format", choices=["svg", "png"], default="svg", help="image format (default svg)")
    plot.add_argument("--points", help="a JSON file with the /v1/plot/roofline body's points, compute, levels")
    plot.add_argument("--roofs", default="effective", choices=["effective", "nominal"], help="default effective")
    plot.add_argument("--url", help="ask a running service (default: in-process)")
    plot.set_defaults(run=cmd_plot)

    def training_options(p):
        p.add_argument("--device", required=True, help="device id (see `roofline devices`)")
        p.add_argument("--model", required=True, help=MODEL_HELP)
        p.add_argument("--rope-scaling", metavar="TYPE:FACTOR", help=ROPE_SCALING_HELP)
        p.add_argument("--seq-len", type=int, required=True, help="tokens per sequence")
        p.add_argument("--micro-batch-size", type=int, default=1, help="sequences per micro-batch (default 1)")
        p.add_argument("--gradient-accumulation-steps", type=int, help="micro-batches per step (default 1)")
        p.add_argument("--global-batch-tokens", type=count, help="tokens per step over all replicas (derives the "
                                                                "accumulation steps)")
        p.add_argument("--tensor-parallel", type=int, default=1, help="tensor-parallel degree (default 1)")
        p.add_argument("--pipeline-parallel", type=int, default=1, help="pipeline stages (default 1)")
        p.add_argument("--first-stage-layers", type=int, help="layers on the first pipeline stage (default: even)")
        p.add_argument("--last-stage-layers", type=int, help="layers on the last pipeline stage (default: even)")
        p.add_argument("--pipeline-schedule", default="1f1b", choices=list(SCHEDULES),
                       help="pipeline schedule (default 1f1b; interleaved needs --virtual-pipeline-stages 2 or more)")
        p.add_argument("--virtual-pipeline-stages", type=int, default=1,
                       help="model chunks per stage with the interleaved schedule (default 1)")
        p.add_argument("--context-parallel", type=int, default=1,
                       help="ranks each sequence is split over, ring attention (default 1)")
        p.add_argument("--expert-parallel", type=int, default=1,
                       help="ranks a MoE model's routed experts are split over, drawn from the data-parallel ones "
                            "(default 1)")
        p.add_argument("--sequence-parallel", action="store_true",
                       help="Megatron sequence parallelism over the tensor-parallel group")
        p.add_argument("--zero-stage", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO sharding (default 0)")
        p.add_argument("--keep-parameters-after-forward", action="store_true",
                       help="with --zero-stage 3: keep gathered parameters from the forward to the backward (Llama 3's "
                            "FSDP) instead of gathering them again")
        p.add_argument("--recompute", default="none", choices=["none", "selective", "full"],
                       help="activation recomputation (default none)")
        p.add_argument("--fp8-recipe", default="none", choices=list(RECIPES),
                       help="fp8 training of the layers' matmuls with this scaling (default none: the dtypes')")
        p.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd_momentum", "sgd"],
                       help="optimizer (default adamw)")
        p.add_argument("--peft", choices=list(PEFT_METHODS),
                       help="fine-tune adapters beside a frozen base (lora; qlora: the base stored in 4 bits) "
                            "instead of training every weight")
        p.add_argument("--lora-rank", type=int, default=16, help="with --peft: the adapters' rank (default 16)")
        p.add_argument("--lora-alpha", type=float, default=32, help="with --peft: lora_alpha (default 32)")
        p.add_argument("--lora-targets", default=",".join(DEFAULT_TARGETS), metavar="MODULES",
                       help=f"with --peft: comma-separated module names, or all-linear (default {','.join(DEFAULT_TARGETS)})")
        p.add_argument("--qlora-base", choices=list(QUANTISED_BASE_BYTES),
                       help="with --peft qlora: the frozen base's storage (default nf4)")
        p.add_argument("--node-size", type=int, help="devices per node (default: the device's)")
        roofs(p)

    train = common(commands.add_parser("train", help="one training step: rows, collectives, memory, MFU and HFU"))
    training_options(train)
    train.add_argument("--data-parallel", type=int, default=1, help="data-parallel replicas (default 1)")
    train.set_defaults(run=cmd_train)

    batch = commands.add_parser("batch", help="many analyses: JSON lines of {id, analysis, request} in, results out")
    batch.add_argument("items", help="a JSON-lines file of items ('-' reads standard input)")
    batch.add_argument("--url", help="ask a running service (default: in-process)")
    batch.set_defaults(run=cmd_batch)

    plan = commands.add_parser("plan", help="deployment plans").add_subparsers(dest="plan_kind", required=True)
    serving = common(plan.add_parser("serving", help="the best serving deployments on a device budget, within SLOs"))
    serving.add_argument("--devices", required=True, nargs="+", help="candidate device ids")
    model_options(serving, device=False)
    serving.add_argument("--total-devices", type=int, required=True, help="devices the deployment may use")
    serving.add_argument("--input-len", type=int, required=True, help="prompt tokens per request")
    serving.add_argument("--output-len", type=int, required=True, help="generated tokens per request")
    serving.add_argument("--ttft", type=float, help="SLO: time to first token at most, seconds")
    serving.add_argument("--tpot", type=float, help="SLO: time per output token at most, seconds")
    serving.add_argument("--e2e", type=float, help="SLO: whole request at most, seconds")
    for quantity in ("ttft", "tpot", "e2e"):
        for percentile in ("p90", "p99"):
            serving.add_argument(f"--{quantity}-{percentile}", type=float,
                                 help=f"SLO: the {percentile} {quantity.upper()} at most, seconds (simulated; needs "
                                      "--engine)")
    serving.add_argument("--target-requests-per-s", type=float, help="traffic to serve (fewest replicas reaching it)")
    serving.add_argument("--price-per-device-hour", nargs="+", metavar="[DEVICE=]PRICE",
                         help="price of one device for an hour, for every candidate or per device "
                              "(nvidia-h200-sxm=3.1 amd-mi300x=2.2): adds the cost per million output tokens")
    serving.add_argument("--memory-utilization", type=float, help="fraction of usable memory (default 0.9, vLLM's)")
    serving.add_argument("--modes", nargs="+", default=["aggregated"], choices=["aggregated", "disaggregated"],
                         help="serving modes to search (default aggregated)")
    serving.add_argument("--top-n", type=int, default=5, help="configurations to show (default 5)")
    serving.add_argument("--engine", help="the serving engine: where every candidate has an expectation for it (its "
                                          "own serving runs, or its kernel tables), the SLOs and the ranking go by "
                                          "the expected times")
    calibration_option(serving)
    speculative_options(serving)
    serving.set_defaults(run=cmd_plan_serving)
    training = common(plan.add_parser("training", help="days, device-hours and cost to train on a number of tokens"))
    training_options(training)
    training.add_argument("--num-devices", type=int, required=True, help="devices training together")
    training.add_argument("--total-tokens", type=float, required=True, help="tokens to train on, e.g. 2e12")
    training.add_argument("--mfu", type=float, help="an MFU to plan at beside the roofline's (e.g. 0.4)")
    training.add_argument("--price-per-device-hour", type=float, help="adds the cost")
    training.add_argument("--deadline-days", type=float, help="adds the devices needed to finish in time")
    training.add_argument("--search", action="store_true",
                          help="search the layout (tensor, context, pipeline and schedule, expert, data parallelism, "
                               "recomputation) for the fastest step that fits; needs --global-batch-tokens")
    training.add_argument("--top-n", type=int, default=5, help="with --search: layouts to show (default 5)")
    training.set_defaults(run=cmd_plan_training)

    measure = commands.add_parser("measure", help="measure this machine's roofs and matmul timings (needs PyTorch)")
    measure.add_argument("--device", default="cpu", help="PyTorch's device: cpu, cuda, cuda:1, xpu, mps (default cpu)")
    measure.add_argument("--quick", action="store_true", help="the small grid (a first look, CI)")
    measure.add_argument("--budget", type=float, default=600.0, help="seconds the run may take (default 600)")
    measure.add_argument("--out", type=Path, default=Path("measured"), help="folder for the files (default measured)")
    measure.add_argument("--resume", action="store_true", help="keep the folder's timings and time only the rest")
    measure.add_argument("--post", metavar="URL", help="post the files to a running service")
    measure.add_argument("--token", help="with --post: a write token")
    measure.add_argument("--device-id", help="the device the timings are of (a catalog id, or a new one)")
    measure.add_argument("--create-device", action="store_true",
                         help="with --post: create --device-id from what was measured where the service lacks it")
    measure.set_defaults(run=cmd_measure)

    serve = commands.add_parser("serve", help="migrate, then serve the API")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    serve.set_defaults(run=cmd_serve)
    db = commands.add_parser("db", help="database maintenance").add_subparsers(dest="db_command", required=True)
    db.add_parser("upgrade", help="apply the migrations to ROOFLINE_DATABASE_URL").set_defaults(run=cmd_db_upgrade)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.run(args)
