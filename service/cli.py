"""`roofline`: the service from a terminal.

Every command talks to the HTTP API: in-process against the configured database by default (the same code
path as the server, measured roofs included), or to a running service with --url. Tables by default,
JSON with --json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

SWEEP_CHUNK = 256


@contextlib.contextmanager
def api(url: str | None) -> Iterator[Any]:
    if url:
        import httpx

        with httpx.Client(base_url=url, timeout=120) as client:
            yield client
        return
    import warnings

    # Starlette's in-process client prefers the httpx2 fork; the project uses httpx, which works.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

    from service.config import get_settings
    from service.main import create_app

    # In-process, the service's per-request access log would interleave with the table on the terminal.
    settings = get_settings()
    if "ROOFLINE_LOG_LEVEL" not in os.environ:
        settings = settings.model_copy(update={"log_level": "WARNING"})
    with TestClient(create_app(settings)) as client:
        yield client


def call(client, method: str, path: str, body: dict | None = None) -> Any:
    response = client.request(method, path, json=body)
    if response.status_code >= 400:
        error = response.json()
        fields = "; ".join(f"{f['loc']}: {f['msg']}" for f in error.get("fields", []))
        raise SystemExit(f"error {response.status_code} {error.get('error')}: {error.get('detail')}" + (f" ({fields})" if fields else ""))
    return response.json()


def si(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    if 0 < abs(value) < 1 and unit == "s":
        for factor, prefix in ((1e-3, "m"), (1e-6, "u"), (1e-9, "n")):
            if abs(value) >= factor:
                return f"{value / factor:.3g} {prefix}s"
    return f"{value:.3g} {unit}".strip()


def table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def show(args, result: Any, render) -> None:
    print(json.dumps(result, indent=2) if args.json else render(result))


def cmd_devices(args) -> None:
    with api(args.url) as client:
        devices = call(client, "GET", "/v1/devices")
    show(args, devices, lambda ds: table(
        [[d["id"], d["name"], si(d["memory_capacity_bytes"], "B"), si(d["hbm_bandwidth_bytes_per_s"], "B/s"),
          si(d["peak_tensor_flops_per_s"], "FLOP/s")] for d in ds],
        ["id", "name", "memory", "HBM bandwidth", "peak tensor"]) + "\n(units: k/M/G/T/P = 1e3/1e6/1e9/1e12/1e15)")


def cmd_operator(args) -> None:
    operator = {"kind": args.kind}
    for name in ("m", "n", "k", "batch", "dtype"):
        if getattr(args, name) is not None:
            operator[name] = getattr(args, name)
    for assignment in args.field or []:
        name, _, value = assignment.partition("=")
        operator[name] = parse_value(value)
    with api(args.url) as client:
        result = call(client, "POST", "/v1/analyze/operator",
                      {"device_id": args.device, "operator": operator, "roofs": args.roofs})
    show(args, result, lambda r: table([
        ["FLOPs", si(r["flops"], "FLOP")], ["bytes", si(r["bytes"]["total"], "B")],
        ["intensity", f"{r['arithmetic_intensity']:.4g} FLOP/B"], ["ridge point", f"{r['ridge_point']:.4g} FLOP/B"],
        ["bound", f"{r['bound']} ({r['bound_level']})"], ["time", si(r["time_s"], "s")],
        ["attainable", si(r["attainable_flops_per_s"], "FLOP/s")], ["MFU", f"{r['mfu']:.3f}" if r["mfu"] is not None else "-"],
        ["compute roof", f"{si(r['compute_roof']['flops_per_s'], 'FLOP/s')} {r['compute_roof']['dtype']} "
                         f"{r['compute_roof']['unit']} ({r['compute_roof']['source']})"],
        ["memory roof", f"{si(r['memory_roof']['bytes_per_s'], 'B/s')} {r['memory_roof']['level']} ({r['memory_roof']['source']})"],
    ], ["quantity", "value"]))


def _model_body(args) -> dict:
    body = {"device_id": args.device, "model_id": args.model, "tensor_parallel": args.tensor_parallel,
            "dtypes": {"weights": args.weights_dtype, "activations": args.activations_dtype, "kv_cache": args.kv_dtype}}
    return body


def cmd_model(args) -> None:
    body = {**_model_body(args), "phase": args.phase, "batch_size": args.batch_size, "seq_len": args.seq_len,
            "roofs": args.roofs}
    if args.output_len:
        body["output_len"] = args.output_len
    with api(args.url) as client:
        result = call(client, "POST", "/v1/analyze/model", body)

    def render(r):
        rows = [[row["name"], row["group"], row["layers"] * row["count"], si(row["flops"], "FLOP"), si(row["bytes"], "B"),
                 row["bound"], si(row["time_s"], "s"), si(row["total_time_s"], "s")] for row in r["rows"]]
        t = r["totals"]
        summary = [f"total {si(t['time_s'], 's')}, {si(t['flops'], 'FLOP')}, {si(t['bytes'], 'B')}; "
                   f"memory-bound share {t['memory_bound_time_share']:.0%}; MFU {r['mfu'] or 0:.3f}"]
        if r["ttft_s"] is not None:
            summary.append(f"TTFT {si(r['ttft_s'], 's')}, {r['tokens_per_s']:,.0f} prompt tokens/s")
        if r["tpot_s"] is not None:
            summary.append(f"TPOT {si(r['tpot_s'], 's')}, {r['tokens_per_s']:,.0f} tokens/s over the batch")
        if r["e2e_latency_s"] is not None:
            summary.append(f"end-to-end latency {si(r['e2e_latency_s'], 's')}")
        return table(rows, ["row", "layers", "instances", "FLOPs", "bytes", "bound", "time", "total"]) + "\n" + "\n".join(summary)

    show(args, result, render)


def cmd_kv(args) -> None:
    body = {**_model_body(args), "context_len": args.context_len, "workspace_bytes": args.workspace_bytes}
    if args.memory_utilization is not None:
        body["memory_utilization"] = args.memory_utilization
    with api(args.url) as client:
        result = call(client, "POST", "/v1/analyze/kv-capacity", body)
    show(args, result, lambda r: table([
        ["usable memory", si(r["usable_bytes"], "B")], ["weights", si(r["weights_bytes"], "B")],
        ["KV per token", si(r["kv_bytes_per_token"], "B")], ["KV per request", si(r["kv_bytes_per_request"], "B")],
        ["available for KV", si(r["available_kv_bytes"], "B")], ["fits", str(r["fits"])],
        ["max concurrent requests", str(r["max_concurrent_requests"])], ["max context (1 request)", str(r["max_context_len"])],
    ], ["quantity", "per device"]))


def cmd_sweep(args) -> None:
    body = {**_model_body(args), "phase": args.phase, "batch_size": args.batch_size, "seq_len": args.seq_len}
    values = list(range(args.start, args.stop + 1, args.step))
    rows: list[dict] = []
    with api(args.url) as client:
        for start in range(0, len(values), SWEEP_CHUNK):
            chunk = values[start:start + SWEEP_CHUNK]
            result = call(client, "POST", "/v1/analyze/sweep",
                          {"endpoint": "model", "request": body, "parameter": args.parameter, "values": chunk})
            rows += result["rows"]
            done = len(rows)
            bar = "#" * (30 * done // len(values))
            print(f"\r[{bar:<30}] {done}/{len(values)} points", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    show(args, rows, lambda rs: table([[r["value"], si(r["time_s"], "s"), r["bound"], f"{r['tokens_per_s'] or 0:,.0f}"]
                                       for r in rs], [args.parameter, "time", "bound", "tokens/s"]))


def cmd_serve(args) -> None:
    import uvicorn

    from service.config import get_settings
    from service.migrate import upgrade

    upgrade(get_settings().database_url)
    uvicorn.run("service.main:app", host=args.host, port=args.port, workers=args.workers, access_log=False)


def cmd_db_upgrade(args) -> None:
    from service.config import get_settings
    from service.migrate import upgrade

    upgrade(get_settings().database_url)
    print("database is at the head revision")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="roofline", description=__doc__.splitlines()[0])
    commands = root.add_subparsers(dest="command", required=True)

    def common(p, remote=True):
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        if remote:
            p.add_argument("--url", help="a running service, e.g. http://127.0.0.1:8000 (default: in-process)")
        return p

    common(commands.add_parser("devices", help="list the device catalog")).set_defaults(run=cmd_devices)
    analyze = commands.add_parser("analyze", help="roofline of an operator or a model step").add_subparsers(
        dest="what", required=True)
    op = common(analyze.add_parser("operator", help="one operator"))
    op.add_argument("--device", required=True)
    op.add_argument("--kind", required=True, help="matmul, elementwise, attention, ...")
    for name in ("m", "n", "k", "batch"):
        op.add_argument(f"--{name}", type=int)
    op.add_argument("--dtype")
    op.add_argument("--field", action="append", metavar="NAME=VALUE", help="any other operator field (JSON value)")
    op.add_argument("--roofs", default="effective", choices=["effective", "nominal", "measured"])
    op.set_defaults(run=cmd_operator)

    def model_options(p):
        p.add_argument("--device", required=True)
        p.add_argument("--model", required=True, help="a catalog model id")
        p.add_argument("--tensor-parallel", type=int, default=1)
        p.add_argument("--weights-dtype", default="bf16")
        p.add_argument("--activations-dtype", default="bf16")
        p.add_argument("--kv-dtype", default="bf16")

    model = common(analyze.add_parser("model", help="one prefill or decode step"))
    model_options(model)
    model.add_argument("--phase", required=True, choices=["prefill", "decode"])
    model.add_argument("--batch-size", type=int, default=1)
    model.add_argument("--seq-len", type=int, required=True)
    model.add_argument("--output-len", type=int)
    model.add_argument("--roofs", default="effective", choices=["effective", "nominal", "measured"])
    model.set_defaults(run=cmd_model)

    kv = common(commands.add_parser("kv-capacity", help="how many requests fit in memory"))
    model_options(kv)
    kv.add_argument("--context-len", type=int, required=True)
    kv.add_argument("--memory-utilization", type=float)
    kv.add_argument("--workspace-bytes", type=float, default=0)
    kv.set_defaults(run=cmd_kv)

    sweep = common(commands.add_parser("sweep", help="a model step over a range of one parameter"))
    model_options(sweep)
    sweep.add_argument("--phase", required=True, choices=["prefill", "decode"])
    sweep.add_argument("--batch-size", type=int, default=1)
    sweep.add_argument("--seq-len", type=int, default=1024)
    sweep.add_argument("--parameter", required=True, help="batch_size, seq_len, tensor_parallel, ...")
    sweep.add_argument("--start", type=int, required=True)
    sweep.add_argument("--stop", type=int, required=True)
    sweep.add_argument("--step", type=int, default=1)
    sweep.set_defaults(run=cmd_sweep)

    serve = commands.add_parser("serve", help="migrate, then serve the API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(run=cmd_serve)
    db = commands.add_parser("db", help="database maintenance").add_subparsers(dest="db_command", required=True)
    db.add_parser("upgrade", help="apply the migrations").set_defaults(run=cmd_db_upgrade)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
