"""Fusion savings over HTTP, against hand-derived traffic (bf16 = 2 bytes per element)."""

import pytest

H100_HBM = 3.35e12


def fusion(client, tensors, ops, **extra):
    body = {"device_id": "nvidia-h100-sxm", "tensors": tensors, "ops": ops, **extra}
    return client.post("/v1/analyze/fusion", json=body)


def elementwise(name, op, inputs, output):
    return {"name": name, "kind": "elementwise", "op": op, "inputs": inputs, "outputs": [output]}


def test_two_chained_elementwise_operators(client):
    # x -> relu -> y -> silu -> z, each [1024, 1024] bf16 = 2,097,152 bytes.
    t = 1024 * 1024 * 2
    tensors = {name: {"shape": [1024, 1024]} for name in "xyz"}
    body = fusion(client, tensors, [elementwise("relu", "relu", ["x"], "y"), elementwise("silu", "silu", ["y"], "z")]).json()
    # Unfused: relu reads x, writes y; silu reads y, writes z = 4 tensors. Fused: reads x, writes z.
    assert body["unfused"]["bytes"] == 4 * t and body["fused"]["bytes"] == 2 * t
    assert body["savings"]["bytes"] == 2 * t and body["savings"]["fraction"] == 0.5
    assert body["savings"]["launches"] == 1
    assert body["savings"]["launch_time_s"] == pytest.approx(4e-6)
    # Memory-bound on both sides: the time saved is the bytes saved at 3.35 TB/s.
    assert body["savings"]["time_s"] == pytest.approx(2 * t / H100_HBM)


def test_silu_gate_times_up_in_a_gated_mlp(client):
    # act = silu(gate); h = act * up; all [4096, 14336] bf16 = 117,440,512 bytes each.
    t = 4096 * 14336 * 2
    tensors = {name: {"shape": [4096, 14336]} for name in ("gate", "up", "act", "h")}
    ops = [elementwise("silu", "silu", ["gate"], "act"), elementwise("mul", "mul", ["act", "up"], "h")]
    body = fusion(client, tensors, ops).json()
    # Unfused: (gate + act) + (act + up + h) = 5 tensors; fused: gate + up + h = 3.
    assert body["unfused"]["bytes"] == 5 * t and body["fused"]["bytes"] == 3 * t
    assert body["savings"]["fraction"] == pytest.approx(0.4)
    assert [k["flops"] for k in body["unfused"]["kernels"]] == [4 * t / 2, t / 2]


def test_gelu_plus_residual_add(client):
    t = 2048 * 4096 * 2
    tensors = {name: {"shape": [2048, 4096]} for name in ("x", "g", "residual", "out")}
    ops = [elementwise("gelu", "gelu", ["x"], "g"), elementwise("add", "add", ["g", "residual"], "out")]
    body = fusion(client, tensors, ops).json()
    assert (body["unfused"]["bytes"], body["fused"]["bytes"]) == (5 * t, 3 * t)


def test_norm_fused_into_a_matmul_prologue(client):
    # xn = rmsnorm(x, gamma); y = xn @ W. x, xn, W, y are 4096 x 4096 bf16 = 33,554,432 bytes; gamma 8,192.
    t, gamma = 4096 * 4096 * 2, 4096 * 2
    tensors = {"x": {"shape": [4096, 4096]}, "gamma": {"shape": [4096]}, "xn": {"shape": [4096, 4096]},
               "W": {"shape": [4096, 4096]}, "y": {"shape": [4096, 4096]}}
    ops = [{"name": "norm", "kind": "rmsnorm", "inputs": ["x", "gamma"], "outputs": ["xn"]},
           {"name": "proj", "kind": "matmul", "inputs": ["xn", "W"], "outputs": ["y"]}]
    body = fusion(client, tensors, ops).json()
    # Unfused: (x + gamma + xn) + (xn + W + y); fused: x + gamma + W + y.
    assert body["unfused"]["bytes"] == 5 * t + gamma
    assert body["fused"]["bytes"] == 3 * t + gamma
    assert body["fused"]["kernels"][0]["kinds"] == ["rmsnorm", "matmul"]
    # Unfused: the norm is memory-bound, (2t + gamma) / 3.35e12; the matmul compute-bound, 2 * 4096^3 / 989.4e12.
    # Fused: the kernel's compute is the matmul's plus the norm's (4 FLOP per element at the fp32 vector peak,
    # 66.9e12, as bf16 vector work is computed in fp32), still above its (3t + gamma) / 3.35e12 of traffic.
    norm_memory, norm_compute = (2 * t + gamma) / H100_HBM, 4096 * 4096 * 4 / 66.9e12
    matmul_time = 2 * 4096**3 / 989.4e12
    assert body["unfused"]["time_s"] == pytest.approx(norm_memory + matmul_time)
    assert body["fused"]["time_s"] == pytest.approx(matmul_time + norm_compute)
    assert body["savings"]["time_s"] == pytest.approx(norm_memory - norm_compute)


def test_explicit_groups_and_singletons(client):
    tensors = {name: {"shape": [256]} for name in "abcd"}
    ops = [elementwise("one", "relu", ["a"], "b"), elementwise("two", "relu", ["b"], "c"), elementwise("three", "relu", ["c"], "d")]
    body = fusion(client, tensors, ops, groups=[["one", "two"]]).json()
    assert body["fused"]["launches"] == 2 and body["savings"]["launches"] == 1
    # Fused group reads a, writes c (used by the singleton); singleton reads c, writes d: 4 tensors of 512 bytes.
    assert body["fused"]["bytes"] == 4 * 512 and body["unfused"]["bytes"] == 6 * 512


@pytest.mark.parametrize("tensors, ops, groups, loc, words", [
    ({n: {"shape": [8]} for n in "ab"}, [elementwise("f", "relu", ["a"], "b"), elementwise("g", "relu", ["b"], "a")],
     None, "body.ops", "cycle"),
    ({"a": {"shape": [8]}}, [elementwise("f", "relu", ["a"], "zz")], None, "body.ops.0.outputs.0", "not defined"),
    ({"a": {"shape": [8]}, "b": {"shape": [9]}}, [elementwise("f", "relu", ["a"], "b")], None, "body.ops.0.outputs",
     "shape"),
    ({"a": {"shape": [4, 8]}, "w": {"shape": [9, 4]}, "y": {"shape": [4, 4]}},
     [{"name": "mm", "kind": "matmul", "inputs": ["a", "w"], "outputs": ["y"]}], None, "body.ops.0.inputs", "inner"),
    ({"a": {"shape": [8, 8]}, "w": {"shape": [8, 8]}, "b": {"shape": [8, 8]}, "c": {"shape": [8, 8]}},
     [{"name": "m1", "kind": "matmul", "inputs": ["a", "w"], "outputs": ["b"]},
      {"name": "m2", "kind": "matmul", "inputs": ["b", "w"], "outputs": ["c"]}], None, "body.groups.0", "at most one"),
    ({n: {"shape": [8]} for n in "abcd"},
     [elementwise("f", "relu", ["a"], "b"), elementwise("g", "relu", ["b"], "c"), elementwise("h", "add", ["b", "c"], "d")],
     [["f", "h"]], "body.groups.0", "outside"),
    ({n: {"shape": [8]} for n in "abcd"},
     [elementwise("f", "relu", ["a"], "b"), elementwise("g", "relu", ["c"], "d")], [["f", "g"]], "body.groups.0",
     "not connected"),
    ({n: {"shape": [8]} for n in "ab"}, [elementwise("f", "tanh", ["a"], "b")], None, "body.ops.0.op", "unknown"),
])
def test_bad_graphs_are_422_naming_the_culprit(client, tensors, ops, groups, loc, words):
    extra = {"groups": groups} if groups is not None else {}
    response = fusion(client, tensors, ops, **extra)
    assert response.status_code == 422, response.text
    body = response.json()
    assert loc in [f["loc"] for f in body["fields"]], body
    assert words in body["detail"]


def test_naive_attention_in_a_graph_keeps_its_score_and_probability_traffic(client):
    """Q, K, V, O of [1, 1, 1000, 64] bf16: 128,000 bytes each. Naive attention writes S and P
    ([1000, 1000] bf16, 2,000,000 bytes each) and reads them back: read 3 * 128,000 + 2 * 2,000,000 =
    4,384,000; written 128,000 + 2 * 2,000,000 = 4,128,000; 8,512,000 in all, as the operator endpoint says."""
    shape = [1, 1, 1000, 64]
    body = {"device_id": "nvidia-h100-sxm",
            "tensors": {name: {"shape": shape} for name in ("q", "k", "v", "o")},
            "ops": [{"name": "attn", "kind": "attention", "implementation": "naive",
                     "inputs": ["q", "k", "v"], "outputs": ["o"]}]}
    answer = client.post("/v1/analyze/fusion", json=body).json()
    [kernel] = answer["unfused"]["kernels"]
    assert kernel["bytes_read"] == 4_384_000 and kernel["bytes_written"] == 4_128_000
    assert answer["unfused"]["bytes"] == answer["fused"]["bytes"] == 8_512_000
    alone = client.post("/v1/analyze/operator", json={"device_id": "nvidia-h100-sxm", "operator": {
        "kind": "attention", "heads": 1, "head_dim": 64, "q_len": 1000, "implementation": "naive"}}).json()
    assert alone["bytes"] == {"read": 4_384_000, "written": 4_128_000, "total": 8_512_000}
