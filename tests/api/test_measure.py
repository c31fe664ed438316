"""`roofline measure` on this machine's CPU: a quick run within its budget, its files in the service's own forms,
resumed without timing a shape twice, and posted end to end (the device created from what was measured, the roofs
stored, a calibration fitted to the timings and answering `expected` for a matmul it never timed)."""

import json

import pytest
from pydantic import TypeAdapter

from schemas.benchmarks import BenchmarkCreate
from schemas.calibrations import KernelTimingsCreate
from schemas.devices import DeviceCreate
from service.measure import grids
from service.measure.collect import measure
from service.measure.upload import UploadError, upload
from tests.conftest import TOKEN, import_torch

import_torch()
pytestmark = pytest.mark.crosscheck


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("measured")
    return out, measure("cpu", quick=True, budget_s=120, out=out, quiet=True, device_id="this-cpu")


def test_a_quick_run_writes_the_forms_the_service_takes(measured):
    out, run = measured
    # The quick grid: 4 m x 3 (n, k) matmuls in fp32 and bf16, within its budget.
    assert not run.stopped_at_budget and len(run.timings) == 2 * len(grids.QUICK_M) * len(grids.QUICK_NK) == 24
    body = KernelTimingsCreate.model_validate_json((out / "kernel_timings.json").read_text())
    assert body.engine == "pytorch" and len(body.timings) == 24 and all(t.time_s > 0 for t in body.timings)
    roofs = TypeAdapter(list[BenchmarkCreate]).validate_json((out / "benchmarks.json").read_text())
    assert {(r.kind, getattr(r, "dtype", None)) for r in roofs} == {("memory_bandwidth", None), ("compute", "fp32"),
                                                                   ("compute", "bf16")}
    device = DeviceCreate.model_validate_json((out / "device.json").read_text())
    assert device.id == "this-cpu" and {p.dtype for p in device.compute_peaks} == {"fp32", "bf16"}
    csv_lines = (out / "kernel_timings.csv").read_text().splitlines()
    assert csv_lines[0] == "kind,m,n,k,dtype,time_s" and len(csv_lines) == 25
    environment = json.loads((out / "environment.json").read_text())
    assert environment["grid"] == "quick" and environment["threads"] >= 1 and environment["torch"]


def test_a_resumed_run_keeps_what_was_timed(measured, tmp_path):
    out, run = measured
    copy = tmp_path / "again"
    copy.mkdir()
    (copy / "kernel_timings.json").write_text((out / "kernel_timings.json").read_text())
    again = measure("cpu", quick=True, budget_s=120, out=copy, resume=True, quiet=True)
    # Every shape was already timed: the same 24 timings, none repeated or retimed.
    assert again.timings == run.timings


def test_a_spent_budget_stops_the_grid_and_says_so(tmp_path):
    run = measure("cpu", quick=True, budget_s=0, out=tmp_path, quiet=True)
    assert run.stopped_at_budget and run.timings == []
    assert json.loads((tmp_path / "environment.json").read_text())["stopped_at_budget"] is True


def test_posted_end_to_end_the_timings_are_a_calibration(measured, client):
    out, _ = measured
    with pytest.raises(UploadError, match="pass --create-device"):
        upload(client, out, "this-cpu", TOKEN)
    result = upload(client, out, "this-cpu", TOKEN, create_device=True)
    assert result["device_created"] and result["timings"] == 24
    # One calibration a dtype, each fitted to its 12 matmuls and checked on timings held out of its fit.
    assert sorted(c["id"] for c in result["calibrations"]) == ["kernel:measured:this-cpu:pytorch:bf16",
                                                              "kernel:measured:this-cpu:pytorch:fp32"]
    assert all(c["fitted_on"] == 12 and c["median_error"] >= 0 for c in result["calibrations"])
    roofs = client.get("/v1/devices/this-cpu/benchmarks").json()
    assert {r["kind"] for r in roofs} == {"memory_bandwidth", "compute"}
    # A matmul the grid never timed gets an expectation from the fit, beside its bound.
    answer = client.post("/v1/analyze/operator", json={"device_id": "this-cpu", "engine": "pytorch", "operator": {
        "kind": "matmul", "m": 300, "n": 1536, "k": 2048, "dtype": "fp32"}}).json()
    assert answer["expected"]["calibration_id"] == "kernel:measured:this-cpu:pytorch:fp32"
    assert answer["expected"]["time_s"] >= answer["time_s"]


def test_the_cli_measures_and_refuses_a_post_without_a_token(tmp_path, capsys):
    from service.cli import main

    main(["measure", "--quick", "--budget", "5", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "memory_bandwidth hbm" in printed and "matmul timings" in printed
    with pytest.raises(SystemExit, match="--post needs --token"):
        main(["measure", "--quick", "--out", str(tmp_path), "--post", "http://127.0.0.1:9"])
