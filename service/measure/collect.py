"""A measuring run within a time budget: the roofs, then the matmul grid, written as the files the service takes.
Resumable: the kernel timings are written as they come, and a run over the same folder with resume skips the
shapes it already holds."""

from __future__ import annotations

import csv
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.measure import grids
from service.measure.environment import DTYPES, backend_of, environment
from service.measure.kernels import shape_of, time_matmul, timing
from service.measure.roofs import TOOL, bandwidth_benchmark, compute_benchmark, copy_bandwidth, matmul_rate

ENGINE = "pytorch"
FILES = ("kernel_timings.json", "kernel_timings.csv", "benchmarks.json", "environment.json", "device.json")


@dataclass
class Run:
    """What a run measured, and how it ended."""

    environment: dict[str, Any]
    benchmarks: list[dict[str, Any]] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)
    stopped_at_budget: bool = False
    elapsed_s: float = 0.0


class _Clock:
    def __init__(self, budget_s: float):
        self.start = time.monotonic()
        self.budget_s = budget_s

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def spent(self) -> bool:
        return self.elapsed >= self.budget_s


def _progress(text: str, quiet: bool) -> None:
    if not quiet and sys.stderr.isatty():
        print(f"\rmeasure: {text:<78}", end="", file=sys.stderr, flush=True)


def measure(device: str = "cpu", *, quick: bool = True, budget_s: float = 600.0, out: Path | None = None,
            resume: bool = False, quiet: bool = False, device_id: str | None = None) -> Run:
    """Measures the roofs and the matmul grid of `device` (PyTorch's name: cpu, cuda, cuda:1, xpu, mps) within
    `budget_s` seconds (the roofs first, whatever the budget), writing the files into `out` where given."""
    import torch  # the collector's one heavy dependency, needed only here

    clock = _Clock(budget_s)
    dtypes = DTYPES.get(backend_of(device), ("fp32",))
    run = Run(environment(torch, device))
    if resume and out is not None:
        run.timings.extend(_previous(out))
    bandwidths, peaks, size = _roofs(torch, device, dtypes, quick, quiet)
    _time_grid(torch, device, run, [(m, n, k, d) for d in dtypes for m, n, k in grids.matmul_shapes(quick)], clock,
               out, quiet)
    host = run.environment["device_name"]
    run.benchmarks.append(bandwidth_benchmark(bandwidths, host))
    # A dtype's peak is the best rate any of its matmuls reached: a bound set below one would exceed that timing.
    for dtype in dtypes:
        best = max((2 * m * n * k / row["time_s"] for row in run.timings for m, n, k, d in [shape_of(row)]
                    if d == dtype), default=0.0)
        run.benchmarks.append(compute_benchmark(dtype, max(peaks[dtype], best), size, host))
    run.elapsed_s = clock.elapsed
    _progress(f"{len(run.timings)} matmuls, {len(run.benchmarks)} roofs in {run.elapsed_s:.0f} s", quiet)
    if not quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    if out is not None:
        write(out, run, quick=quick, device_id=device_id)
    return run


def _roofs(torch: Any, device: str, dtypes: tuple[str, ...], quick: bool,
           quiet: bool) -> tuple[dict[int, float], dict[str, float], int]:
    """(bandwidth by array size, matmul rate by dtype, the square matmul's size)."""
    bandwidths: dict[int, float] = {}
    for size in grids.QUICK_COPY_BYTES if quick else grids.FULL_COPY_BYTES:
        _progress(f"memory bandwidth, {size >> 20} MiB", quiet)
        bandwidths[size] = copy_bandwidth(torch, device, size)
    square = grids.QUICK_PEAK_SIZE if quick else grids.FULL_PEAK_SIZE
    peaks: dict[str, float] = {}
    for dtype in dtypes:
        _progress(f"{dtype} peak, {square}^3", quiet)
        peaks[dtype] = matmul_rate(torch, device, dtype, square)
    return bandwidths, peaks, square


def _time_grid(torch: Any, device: str, run: Run, shapes: list[tuple[int, int, int, str]], clock: _Clock,
               out: Path | None, quiet: bool) -> None:
    """Times each shape the run does not hold yet, until the budget is spent; written as it goes."""
    timed = {shape_of(row) for row in run.timings}
    for index, (m, n, k, dtype) in enumerate(shapes, 1):
        if (m, n, k, dtype) in timed:
            continue
        if clock.spent:
            run.stopped_at_budget = True
            return
        _progress(f"matmul {index}/{len(shapes)}: {dtype} {m} x {n} x {k}, {clock.elapsed:.0f} s", quiet)
        run.timings.append(timing(m, n, k, dtype, time_matmul(torch, device, m, n, k, dtype)))
        if out is not None and index % 8 == 0:
            _write_timings(out, run)


def _previous(out: Path) -> list[dict[str, Any]]:
    path = out / "kernel_timings.json"
    if not path.exists():
        return []
    return list(json.loads(path.read_text())["timings"])


def kernel_timings(run: Run) -> dict[str, Any]:
    """The body of POST /v1/devices/{id}/kernel-timings."""
    env = run.environment
    return {"engine": ENGINE, "source": f"{TOOL}: torch {env['torch']} on {env['device_name']} ({env['device']}), "
                                        "median of repeats, operands left in cache between repeats",
            "timings": run.timings}


def _write_timings(out: Path, run: Run) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_timings.json").write_text(json.dumps(kernel_timings(run), indent=1))


def device_draft(run: Run, device_id: str) -> dict[str, Any]:
    """The body of POST /v1/devices for a device the catalog lacks, from what the run measured (every number cited
    as this run's)."""
    env = run.environment
    cite = f"{TOOL} on {env['device_name']} (torch {env['torch']})"
    bandwidth = next(b for b in run.benchmarks if b["kind"] == "memory_bandwidth")
    return {
        "id": device_id, "name": env["device_name"][:200], "vendor": env["device_name"].split()[0][:100],
        "memory_capacity_bytes": env["memory_capacity_bytes"],
        "compute_peaks": [{"dtype": b["dtype"], "unit": b["unit"], "flops_per_s": b["flops_per_s"], "citation": cite}
                          for b in run.benchmarks if b["kind"] == "compute"],
        "memory_levels": [{"level": "hbm", "bandwidth_bytes_per_s": bandwidth["bytes_per_s"], "citation": cite}],
        "confidence": "measured by the collector: the peaks are what its matmuls reached, not a datasheet's",
        "citations": {"memory_capacity_bytes": f"{cite}: the memory the operating system or driver reports"},
    }


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "device"


def write(out: Path, run: Run, *, quick: bool, device_id: str | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _write_timings(out, run)
    with (out / "kernel_timings.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kind", "m", "n", "k", "dtype", "time_s"])
        for row in run.timings:
            op = row["operator"]
            writer.writerow([op["kind"], op["m"], op["n"], op["k"], op["dtype"], repr(row["time_s"])])
    (out / "benchmarks.json").write_text(json.dumps(run.benchmarks, indent=1))
    (out / "environment.json").write_text(json.dumps(
        {**run.environment, "grid": "quick" if quick else "full", "matmuls": len(run.timings),
         "elapsed_s": run.elapsed_s, "stopped_at_budget": run.stopped_at_budget, "cache_flush": "none",
         "not_measured": "attention and collectives (this collector times matmuls and the roofs only)"}, indent=1))
    draft_id = device_id or slug(run.environment["device_name"])
    (out / "device.json").write_text(json.dumps(device_draft(run, draft_id), indent=1))
