"""Charts: parse the SVG and check what a reader sees (colours, labels that do not collide, points inside the
axes, ids, <title> and <desc>), for the default chart of every catalog device and for each planner picture."""

import itertools
import re
import xml.etree.ElementTree as ET

import pytest

from service.persistence.catalog import nominal_catalog
from tests.conftest import AUTH

SVG = "{http://www.w3.org/2000/svg}"
# Charts and pages do not depend on the database dialect: drawn once, in the SQLite run.
pytestmark = pytest.mark.dialect_free
XLINK = "{http://www.w3.org/1999/xlink}"


def parse(svg: bytes):
    root = ET.fromstring(svg)
    ids = {element.get("id") for element in root.iter() if element.get("id")}
    texts = " ".join("".join(element.itertext()) for element in root.iter(f"{SVG}text"))
    return root, ids, texts


def group(root, gid: str):
    return next(element for element in root.iter() if element.get("id") == gid)


def style_of(root, gid: str) -> str:
    return " ".join(path.get("style", "") for path in group(root, gid).iter(f"{SVG}path"))


def stroke(root, gid: str) -> str:
    return re.search(r"stroke: (#[0-9a-f]{6})", style_of(root, gid)).group(1)


def box(path) -> tuple[float, float, float, float]:
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get("d"))]
    xs, ys = numbers[0::2], numbers[1::2]
    return min(xs), min(ys), max(xs), max(ys)


def label_boxes(root) -> dict[str, tuple]:
    """Each placed label's background box (the labels carry one, as a path in their group)."""
    return {g.get("id"): box(next(g.iter(f"{SVG}path"))) for g in root.iter(f"{SVG}g")
            if (g.get("id") or "").startswith("label-")}


def overlapping(boxes: dict[str, tuple]) -> list[tuple[str, str]]:
    return [(a, b) for (a, p), (b, q) in itertools.combinations(boxes.items(), 2)
            if p[0] < q[2] and q[0] < p[2] and p[1] < q[3] and q[1] < p[3]]


def axes_box(root) -> tuple:
    return box(next(group(root, "patch_2").iter(f"{SVG}path")))


@pytest.mark.parametrize("device_id", [d["id"] for d in nominal_catalog()])
def test_default_chart_of_every_device_reads_without_a_legend(client, device_id):
    response = client.get(f"/v1/devices/{device_id}/roofline.svg")
    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"
    root, ids, _ = parse(response.content)
    roofs = sorted(i for i in ids if i.startswith("roof-"))
    assert roofs
    # One colour per memory level and one per compute roof: no two roofs drawn alike.
    colours = {roof: stroke(root, roof) for roof in roofs}
    assert len(set(colours.values())) == len(roofs), colours
    # Every roof labelled once along its own line, and no two labels collide.
    labels = label_boxes(root)
    assert {f"label-{roof}" for roof in roofs} <= set(labels)
    assert overlapping(labels) == []
    left, top, right, bottom = axes_box(root)
    assert all(left <= b[0] and b[2] <= right and top <= b[1] and b[3] <= bottom for b in labels.values())
    assert root.find(f"{SVG}title").text and "Axes:" in root.find(f"{SVG}desc").text
    # An id on every drawn element (definitions, styles and metadata aside), none repeated.
    drawn = list(drawn_elements(root))
    assert drawn and all(e.get("id") for e in drawn)
    assert len({e.get("id") for e in drawn}) == len(drawn)


def drawn_elements(element):
    for child in element:
        tag = child.tag.rsplit("}", 1)[-1]
        if tag in ("defs", "style", "title", "desc", "metadata"):
            continue
        yield child
        yield from drawn_elements(child)


def test_equal_roofs_are_drawn_once_and_ridges_only_where_asked(client):
    root, ids, texts = parse(client.get("/v1/devices/nvidia-h100-sxm/roofline.svg").content)
    # bf16 and fp16 share 989.4 TFLOP/s: one line, labelled with both.
    assert "roof-compute-bf16-tensor+fp16-tensor-nominal" in ids and "bf16/fp16 tensor 989 TFLOP/s" in texts
    assert not any(i.startswith("roof-compute-fp16") for i in ids)
    # No points: the headline dtype's ridge only (989.4e12 / 3.35e12 = 295), not one per roof.
    assert sorted(i for i in ids if i.startswith("ridge-")) == ["ridge-bf16-tensor+fp16-tensor-hbm"]
    assert "ridge 295" in texts
    asked = parse(client.get("/v1/devices/nvidia-h100-sxm/roofline.svg", params={"ridge": ["fp8", "bf16"]}).content)[1]
    assert {i for i in asked if i.startswith("ridge-")} == {"ridge-fp8-tensor+int8-tensor-hbm",
                                                             "ridge-bf16-tensor+fp16-tensor-hbm"}


def test_device_chart_has_axes_with_units_roofs_slopes_and_ridges(client):
    response = client.get("/v1/devices/nvidia-v100-sxm2-32gb/roofline.svg", params={"dtype": ["fp16", "fp32"]})
    root, ids, texts = parse(response.content)
    assert "Arithmetic intensity (FLOP/byte of HBM traffic)" in texts and "TFLOP/s" in texts
    assert {"roof-compute-fp16-tensor-nominal", "roof-compute-fp32-vector-nominal"} <= ids
    # V100 publishes HBM, L2 and shared-memory bandwidths: one slope each, each in its level's colour.
    levels = ["roof-memory-hbm-nominal", "roof-memory-l2-nominal", "roof-memory-smem-nominal"]
    assert set(levels) <= ids and len({stroke(root, level) for level in levels}) == 3
    # fp16 ridge on HBM: 125e12 / 900e9 = 138.9 FLOP/byte.
    assert "ridge-fp16-tensor-hbm" in ids and "ridge 139" in texts


def test_measured_roofs_are_solid_in_the_nominal_colour(client):
    client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json={
        "kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.9e12, "tool": "nvbandwidth"})
    root, ids, texts = parse(client.get("/v1/devices/nvidia-h100-sxm/roofline.svg", params={"dtype": "bf16"}).content)
    assert {"roof-memory-hbm-nominal", "roof-memory-hbm-measured"} <= ids
    assert "stroke-dasharray" in style_of(root, "roof-memory-hbm-nominal")
    assert "stroke-dasharray" not in style_of(root, "roof-memory-hbm-measured")
    assert stroke(root, "roof-memory-hbm-nominal") == stroke(root, "roof-memory-hbm-measured")
    # Effective bf16 ridge with the measured HBM: 989.4e12 / 2.9e12 = 341.2.
    assert "ridge 341" in texts and "2,900 GB/s measured" in texts
    nominal_only = parse(client.get("/v1/devices/nvidia-h100-sxm/roofline.svg",
                                    params={"dtype": "bf16", "roofs": "nominal"}).content)[1]
    assert "roof-memory-hbm-measured" not in nominal_only


def marker_centre(root, gid: str) -> tuple[float, float]:
    use = next(group(root, gid).iter(f"{SVG}use"))
    return float(use.get("x")), float(use.get("y"))


def test_points_sit_at_their_hbm_intensity_with_a_marker_per_level_inside_the_axes(client):
    body = {"device_id": "nvidia-a100-80gb-sxm", "points": [
        {"name": "gemv", "endpoint": "operator", "request": {"operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}},
        {"name": "gemm", "endpoint": "operator", "request": {"operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}}},
        {"name": "decode", "endpoint": "model", "request": {"model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 512}}]}
    response = client.post("/v1/plot/roofline", json=body)
    assert response.status_code == 200
    root, ids, texts = parse(response.content)
    assert {"point-gemv", "point-gemm", "point-decode", "point-gemm-level-l2"} <= ids
    assert "gemv (memory-bound)" in texts and "gemm (compute-bound)" in texts and "decode (memory-bound)" in texts
    # The 4096^3 GEMM is compute-bound at its HBM intensity (2 x 4096^3 / (3 x 4096^2 x 2) = 1365), drawn right of
    # its L2 marker (63 FLOP/byte at L2), at the same height.
    (gemm_x, gemm_y), (l2_x, l2_y) = marker_centre(root, "point-gemm"), marker_centre(root, "point-gemm-level-l2")
    assert gemm_x > l2_x and gemm_y == l2_y
    assert "gemm at 1365 FLOP/byte" in root.find(f"{SVG}desc").text
    left, top, right, bottom = axes_box(root)
    for point in ("point-gemv", "point-gemm", "point-decode", "point-gemm-level-l2", "point-gemv-level-l2"):
        x, y = marker_centre(root, point)
        assert left < x < right and top < y < bottom
    assert overlapping(label_boxes(root)) == []


MODEL_STEP = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32,
              "seq_len": 4096}


def test_a_model_steps_operators_on_the_roofline(client):
    response = client.post("/v1/plot/model-roofline", json={**MODEL_STEP, "phase": "prefill", "batch_size": 1})
    assert response.status_code == 200, response.text
    root, ids, texts = parse(response.content)
    assert {"point-gate-up-proj--dense-layers", "point-attention--dense-layers", "point-lm-head"} <= ids
    # The largest share first in the key: the MLP's gate/up projection in a prefill.
    assert re.search(r"1  gate_up_proj \[dense layers\] \(compute-bound\).*?, (\d+)% of the time", texts)
    assert overlapping(label_boxes(root)) == []
    # Every roof drawn carries its label, the bf16 one too although the step's matmuls sit along it (markers
    # took every place it had, and it was hidden).
    roofs = {gid.removeprefix("roof-") for gid in ids if gid.startswith("roof-")}
    assert any(roof.startswith("compute-bf16") for roof in roofs), roofs
    assert {gid.removeprefix("label-roof-") for gid in ids if gid.startswith("label-roof-")} == roofs
    assert "bf16" in texts


def test_step_time_by_operator_kind(client):
    response = client.post("/v1/plot/step-breakdown", json={**MODEL_STEP, "batch_sizes": [1, 32, 128]})
    assert response.status_code == 200, response.text
    root, ids, texts = parse(response.content)
    assert {"bar-batch-1-matmul", "bar-batch-32-attention", "total-batch-128"} <= ids
    analysis = client.post("/v1/analyze/model", json=MODEL_STEP).json()
    assert f"{analysis['totals']['time_s'] * 1e3:,.3g} ms" in texts  # the batch-32 bar's total


def test_a_sweep_drawn_with_its_largest_feasible_value(client):
    body = {"endpoint": "model", "parameter": "batch_size", "values": [1, 4, 16, 64, 128, 256, 1024],
            "request": MODEL_STEP, "metric": "tokens_per_s"}
    response = client.post("/v1/plot/sweep", json=body)
    assert response.status_code == 200, response.text
    root, ids, texts = parse(response.content)
    sweep = client.post("/v1/analyze/sweep", json={k: v for k, v in body.items() if k != "metric"}).json()
    assert "largest-feasible" in ids and f"largest that fits: {sweep['largest_feasible_value']:,.6g}" in texts
    assert "sweep-points-memory-does-not-fit" in ids  # batch 1,024 at 4,096 tokens does not fit an H100
    operator = {"endpoint": "operator", "parameter": "operator.m", "values": [1, 16, 64, 256, 1024, 4096],
                "request": {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}}
    root, ids, texts = parse(client.post("/v1/plot/sweep", json=operator).content)
    assert "crossover-0" in ids and "memory to compute at" in texts
    # On a calibrated device the time is drawn twice: the bound, and dashed beside it what the kernels are expected
    # to take (the shipped H100 GEMM calibration); not where the metric is not a time, nor with calibration "none".
    assert "expected-line" in ids and "expected (calibrated kernels)" in texts
    assert "expected-line" not in parse(client.post("/v1/plot/sweep", json=body).content)[1]
    bare = {**operator, "request": {**operator["request"], "calibration": "none"}}
    assert "expected-line" not in parse(client.post("/v1/plot/sweep", json=bare).content)[1]
    refused = client.post("/v1/plot/sweep", json={**operator, "metric": "tokens_per_s"})
    assert refused.status_code == 422 and refused.json()["fields"][0]["loc"] == "body.metric"


def test_a_serving_plans_frontier(client):
    body = {"model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 8, "input_len": 4000,
            "output_len": 500, "slo": {"ttft_s": 1, "tpot_s": 0.02}}
    response = client.post("/v1/plot/serving-plan", json=body)
    assert response.status_code == 200, response.text
    root, ids, texts = parse(response.content)
    assert {"pareto-frontier", "ranked-1", "slo-tpot"} <= ids and "TPOT SLO: 50 tokens/s per user" in texts
    # The frontier spans 27.8 to 1,058 tokens/s per user: on a linear axis the ranked ones (all just past the
    # SLO at 50) and the frontier around them shared its first twentieth. The axis is logarithmic, with plain ticks.
    assert "Output tokens/s per user (1 / TPOT), log scale" in texts
    ticks = ["".join(g.itertext()).strip() for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith("xtick_")]
    assert [t for t in ticks if t] == ["50", "100", "200", "500", "1000"]
    plan = client.post("/v1/plan/serving", json=body).json()
    assert f"{plan['configs'][0]['tokens_per_s_per_device']:,.0f} tokens/s per device" in texts
    # The frontier keeps both ends: its most interactive point is the plan's highest tokens/s per user.
    users = [c["tokens_per_s_per_user"] for c in plan["pareto"]]
    assert len(users) <= 32 and max(users) == users[-1]


def test_a_plan_ranked_on_expectations_is_drawn_at_them(client):
    """A plan on expectations (DeepSeek-V3 fp8 on 8 H200s under SGLang: the H200's kernel tables) draws its ranked
    configuration at the expected tokens/s per device its table ranks it on, not at the bound's."""
    body = {"model_id": "deepseek-v3", "device_ids": ["nvidia-h200-sxm"], "total_devices": 8, "input_len": 1024,
            "output_len": 1024, "engine": "sglang", "slo": {"tpot_s": 0.05},
            "dtypes": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8", "weight_group_size": 16384,
                       "weight_scale_bytes": 4}}
    plan = client.post("/v1/plan/serving", json=body).json()
    best = plan["configs"][0]
    assert plan["slo_basis"] == "expected" and best["expected"]["tokens_per_s_per_device"] < best["tokens_per_s_per_device"]
    _, _, texts = parse(client.post("/v1/plot/serving-plan", json=body).content)
    assert f"{best['expected']['tokens_per_s_per_device']:,.0f} tokens/s per device" in texts
    assert f"{best['tokens_per_s_per_device']:,.0f} tokens/s per device" not in texts
    assert "Serving deepseek-v3 (expected)" in texts


def test_png_and_errors(client):
    png = client.get("/v1/devices/nvidia-a10/roofline.svg", params={"format": "png"})
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert client.post("/v1/plot/step-breakdown", json={**MODEL_STEP, "format": "png"}).content[:4] == b"\x89PNG"
    assert client.get("/v1/devices/nope/roofline.svg").status_code == 404
    assert client.get("/v1/devices/nvidia-a10/roofline.svg", params={"dtype": "fp7"}).status_code == 422
    bad_point = client.post("/v1/plot/roofline", json={"device_id": "nvidia-a10", "points": [
        {"name": "x", "endpoint": "operator", "request": {"operator": {"kind": "matmul", "m": 0, "n": 1, "k": 1}}}]})
    assert bad_point.status_code == 422 and bad_point.json()["fields"][0]["loc"] == "body.points.0.request.operator.m"
    too_many = client.post("/v1/plot/step-breakdown", json={**MODEL_STEP, "batch_sizes": list(range(1, 10))})
    assert too_many.status_code == 422 and too_many.json()["fields"][0]["loc"] == "body.batch_sizes"
