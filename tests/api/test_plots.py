"""Roofline charts: parse the SVG and check what it shows."""

import xml.etree.ElementTree as ET

from tests.conftest import AUTH

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: bytes):
    root = ET.fromstring(svg)
    ids = {element.get("id") for element in root.iter() if element.get("id")}
    texts = " ".join("".join(element.itertext()) for element in root.iter(f"{SVG}text"))
    return root, ids, texts


def style_of(root, gid: str) -> str:
    group = next(element for element in root.iter() if element.get("id") == gid)
    return " ".join(path.get("style", "") for path in group.iter(f"{SVG}path"))


def test_device_chart_has_axes_with_units_roofs_slopes_and_ridges(client):
    response = client.get("/v1/devices/nvidia-v100-sxm2-32gb/roofline.svg", params={"dtype": ["fp16", "fp32"]})
    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"
    root, ids, texts = parse(response.content)
    assert "Arithmetic intensity (FLOP/byte)" in texts and "TFLOP/s" in texts
    assert {"roof-compute-fp16-tensor-nominal", "roof-compute-fp32-vector-nominal"} <= ids
    # V100 publishes HBM, L2 and shared-memory bandwidths: one slope each.
    assert {"roof-memory-hbm-nominal", "roof-memory-l2-nominal", "roof-memory-smem-nominal"} <= ids
    # fp16 ridge on HBM: 125e12 / 900e9 = 138.9 FLOP/byte.
    assert "ridge-fp16-tensor-hbm" in ids and "ridge 139" in texts


def test_measured_roofs_are_drawn_apart_from_nominal(client):
    client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json={
        "kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.9e12, "tool": "nvbandwidth"})
    root, ids, texts = parse(client.get("/v1/devices/nvidia-h100-sxm/roofline.svg", params={"dtype": "bf16"}).content)
    assert {"roof-memory-hbm-nominal", "roof-memory-hbm-measured"} <= ids
    assert "stroke-dasharray" in style_of(root, "roof-memory-hbm-nominal")
    assert "stroke-dasharray" not in style_of(root, "roof-memory-hbm-measured")
    # Effective bf16 ridge with the measured HBM: 989.4e12 / 2.9e12 = 341.2.
    assert "ridge 341" in texts and "2,900 GB/s (measured)" in texts
    nominal_only = parse(client.get("/v1/devices/nvidia-h100-sxm/roofline.svg",
                                    params={"dtype": "bf16", "roofs": "nominal"}).content)[1]
    assert "roof-memory-hbm-measured" not in nominal_only


def test_points_are_labelled_with_name_and_bound(client):
    body = {"device_id": "nvidia-h100-sxm", "points": [
        {"name": "gemv", "endpoint": "operator", "request": {"operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}},
        {"name": "gemm", "endpoint": "operator", "request": {"operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}}},
        {"name": "decode", "endpoint": "model", "request": {"model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 512}}]}
    response = client.post("/v1/plot/roofline", json=body)
    assert response.status_code == 200
    _, ids, texts = parse(response.content)
    assert {"point-gemv", "point-gemm", "point-decode"} <= ids
    assert "gemv (memory-bound)" in texts and "gemm (compute-bound)" in texts and "decode (memory-bound)" in texts


def test_png_and_errors(client):
    png = client.get("/v1/devices/nvidia-a10/roofline.svg", params={"format": "png"})
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert client.get("/v1/devices/nope/roofline.svg").status_code == 404
    assert client.get("/v1/devices/nvidia-a10/roofline.svg", params={"dtype": "fp7"}).status_code == 422
    bad_point = client.post("/v1/plot/roofline", json={"device_id": "nvidia-a10", "points": [
        {"name": "x", "endpoint": "operator", "request": {"operator": {"kind": "matmul", "m": 0, "n": 1, "k": 1}}}]})
    assert bad_point.status_code == 422 and bad_point.json()["fields"][0]["loc"] == "body.points.0.request.operator.m"
