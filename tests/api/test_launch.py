"""A serving analysis's `launch`: the deployment as the commands that start it and benchmark it. Every flag is held
to the flags the engine's own argument parser defines (tests/data/engine_flags.json, read from each engine's source:
SGLang 0.5.5, vLLM 0.11.0, TensorRT-LLM's trtllm-serve, Dynamo's frontend and workers, InferenceX's benchmark
client)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

FLAGS = json.loads((Path(__file__).resolve().parent.parent / "data" / "engine_flags.json").read_text())
PROGRAMS = {"sglang.launch_server": "sglang", "vllm": "vllm", "trtllm-serve": "trtllm-serve",
            "utils/bench_serving/benchmark_serving.py": "inferencex-bench", "dynamo.frontend": "dynamo-frontend",
            "dynamo.sglang": "dynamo-sglang", "dynamo.trtllm": "dynamo-trtllm"}
# A Dynamo worker's parser: its backend's flags (SGLang's own ServerArgs for dynamo.sglang) and the runtime's.
KNOWN = {program: set(entry["flags"]) for program, entry in FLAGS.items() if isinstance(entry, dict) and "flags" in entry}
KNOWN["dynamo-sglang"] = KNOWN["sglang"] | KNOWN["dynamo-runtime"]
KNOWN["dynamo-trtllm"] |= KNOWN["dynamo-runtime"]
FP8 = {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8", "weight_group_size": 16384, "weight_scale_bytes": 4}
BASE = {"model_id": "deepseek-v3", "device_id": "nvidia-b200", "input_len": 1024, "output_len": 1024,
        "concurrency": 64, "dtypes": FP8}
LAYOUTS = {
    "tp8": {"tensor_parallel": 8},
    "ep8 dp-attention": {"tensor_parallel": 8, "expert_parallel": 8, "attention_data_parallel": 8},
    "ep8 mtp": {"tensor_parallel": 8, "expert_parallel": 8,
                "speculative": {"method": "mtp", "draft_tokens": 3, "acceptance_length": 2.5}},
    "two workers": {"workers": 2, "tensor_parallel": 4},
    "disaggregated": {"disaggregated": {"prefill": {"tensor_parallel": 4}, "decode": {"tensor_parallel": 8}}},
}


def flags_of(line: str) -> tuple[str, list[str]]:
    words = shlex.split(line)
    program = next(PROGRAMS[w] for w in words if w in PROGRAMS)
    if program == "trtllm-serve" and "disaggregated" in words:  # the subcommand with options of its own
        program = "trtllm-serve-disaggregated"
    return program, [w for w in words if w.startswith("--")]


def yaml_keys(text: str) -> list[str]:
    """Each key of a YAML file as its dotted path (list items skipped: they are values)."""
    keys, parents = [], []
    for row in text.splitlines():
        if row.strip().startswith("- "):
            continue
        depth = (len(row) - len(row.lstrip())) // 2
        parents[depth:] = [row.strip().split(":")[0]]
        keys.append(".".join(parents))
    return keys


def launched(client, engine: str, layout: dict, **extra) -> dict:
    response = client.post("/v1/analyze/serving", json=BASE | layout | {"engine": engine} | extra)
    assert response.status_code == 200, response.text
    return response.json()["launch"]


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trt", "dynamo-sglang", "dynamo-trt"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_flag_is_one_the_engines_parser_defines(client, engine, layout):
    answer = launched(client, engine, LAYOUTS[layout])
    lines = [line for line in answer["command"].splitlines() if line] + ([answer["benchmark"]] if answer["benchmark"] else [])
    assert lines
    for line in lines:
        program, flags = flags_of(line)
        unknown = set(flags) - KNOWN[program]
        assert not unknown, (program, unknown)
    for name, text in answer["files"].items():
        known = (FLAGS["trtllm-serve-disaggregated"]["cluster_keys"] if name == "disagg.yml"
                 else FLAGS["trtllm-serve"]["yaml_keys"]["keys"])
        assert set(yaml_keys(text)) <= set(known), (name, yaml_keys(text))


def test_sglang_attention_groups_and_the_scheduler_as_its_flags_say(client):
    """8 attention groups of one device, experts whole over 8: --tp-size 8 --ep-size 8 --dp-size 8
    --enable-dp-attention; the cap of 100 a group is 800 over the server; looks every 30 passes."""
    command = launched(client, "sglang", LAYOUTS["ep8 dp-attention"],
                       scheduler={"max_running": 100, "recv_interval": 30})["command"]
    words = shlex.split(command)
    value = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    assert (value["--tp-size"], value["--ep-size"], value["--dp-size"]) == ("8", "8", "8")
    assert "--enable-dp-attention" in words
    assert (value["--max-running-requests"], value["--scheduler-recv-interval"]) == ("800", "30")
    assert value["--model-path"] == "deepseek-ai/DeepSeek-V3" and value["--kv-cache-dtype"] == "fp8_e4m3"
    assert value["--context-length"] == "2048"


def test_vllm_runs_an_engine_a_group_and_the_benchmark_is_the_workloads(client):
    """vLLM's attention groups are its data-parallel engines of tensor_parallel / groups devices; the client sends
    10 x 64 prompts at 64 in flight, lengths from [0.8 L, L]."""
    answer = launched(client, "vllm", LAYOUTS["ep8 dp-attention"], workload={"range_ratio": 0.8})
    words = shlex.split(answer["command"])
    value = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    assert (value["--tensor-parallel-size"], value["--data-parallel-size"]) == ("1", "8")
    assert "--enable-expert-parallel" in words
    bench = shlex.split(answer["benchmark"])
    asked = {w: bench[i + 1] for i, w in enumerate(bench[:-1]) if w.startswith("--")}
    assert (asked["--num-prompts"], asked["--max-concurrency"], asked["--random-range-ratio"]) == ("640", "64", "0.8")


def test_tensorrt_llm_writes_its_yaml(client):
    answer = launched(client, "trt", LAYOUTS["ep8 mtp"])
    assert "--extra_llm_api_options config.yml" in answer["command"]
    assert "decoding_type: MTP" in answer["files"]["config.yml"]
    assert "num_nextn_predict_layers: 3" in answer["files"]["config.yml"]


def test_an_engine_the_service_does_not_know_gets_no_launch(client):
    response = client.post("/v1/analyze/serving", json=BASE | {"tensor_parallel": 8, "engine": "my-engine"})
    assert response.status_code == 200 and response.json()["launch"] is None


def test_tensorrt_llm_disaggregated_pools_are_workers_and_a_router(client):
    """Two context workers of 4 devices and one generation worker of 8: a trtllm-serve each on ports 8001-8003 (the
    context ones with the overlap scheduler off, both sending KV caches), and trtllm-serve disaggregated on 8000 over
    them, its cluster file naming the three addresses; the benchmark addresses the router."""
    layout = {"disaggregated": {"prefill": {"workers": 2, "tensor_parallel": 4}, "decode": {"tensor_parallel": 8}}}
    answer = launched(client, "trt", layout)
    lines = answer["command"].splitlines()
    assert [shlex.split(line)[shlex.split(line).index("--port") + 1] for line in lines[:3]] == ["8001", "8002", "8003"]
    assert ["--extra_llm_api_options context.yml" in line for line in lines[:3]] == [True, True, False]
    assert "--tp_size 4" in lines[0] and "--tp_size 8" in lines[2]
    assert lines[3].startswith("trtllm-serve disaggregated --config_file disagg.yml")
    cluster = answer["files"]["disagg.yml"]
    assert "context_servers:\n  num_instances: 2\n  urls:\n    - \"localhost:8001\"\n    - \"localhost:8002\"" in cluster
    assert "generation_servers:\n  num_instances: 1\n  urls:\n    - \"localhost:8003\"" in cluster
    assert "disable_overlap_scheduler: true" in answer["files"]["context.yml"]
    assert "disable_overlap_scheduler" not in answer["files"]["generation.yml"]
    assert "cache_transceiver_config:\n  backend: DEFAULT\n  max_tokens_in_buffer: 2048" in answer["files"]["generation.yml"]
    assert "--base-url http://localhost:8000" in answer["benchmark"]


@pytest.mark.parametrize("engine", ["dynamo-sglang", "dynamo-trt"])
def test_dynamo_runs_a_frontend_and_a_worker_a_pools_worker(client, engine):
    """Dynamo (as InferenceX's dynamo-sglang and dynamo-trt rows ran): its frontend on the benchmark's port, then two
    prefill workers of 4 devices and one decode worker of 8, a process each with its disaggregation mode; SGLang's
    move KV caches over NIXL, TensorRT-LLM's take the context and generation YAML (the context one with the overlap
    scheduler off); the notes say what else must run (etcd, NATS)."""
    layout = {"disaggregated": {"prefill": {"workers": 2, "tensor_parallel": 4}, "decode": {"tensor_parallel": 8}}}
    answer = launched(client, engine, layout)
    lines = answer["command"].splitlines()
    assert lines[0] == "python3 -m dynamo.frontend --http-port 8000" and len(lines) == 4
    words = [shlex.split(line) for line in lines[1:]]
    assert [w[w.index("--disaggregation-mode") + 1] for w in words] == ["prefill", "prefill", "decode"]
    assert not any("--port" in w for w in words)  # workers register with Dynamo; only the frontend serves HTTP
    if engine == "dynamo-sglang":
        assert all(w[:3] == ["python3", "-m", "dynamo.sglang"] for w in words)
        assert [w[w.index("--tp-size") + 1] for w in words] == ["4", "4", "8"]
        assert all(w[w.index("--disaggregation-transfer-backend") + 1] == "nixl" for w in words)
        assert answer["files"] == {}
    else:
        assert all(w[:3] == ["python3", "-m", "dynamo.trtllm"] for w in words)
        assert [w[w.index("--tensor-parallel-size") + 1] for w in words] == ["4", "4", "8"]
        assert [w[w.index("--extra-engine-args") + 1] for w in words] == ["context.yml", "context.yml", "generation.yml"]
        assert "disable_overlap_scheduler: true" in answer["files"]["context.yml"]
        assert "cache_transceiver_config:" in answer["files"]["generation.yml"]
    assert any("etcd and NATS" in note for note in answer["notes"])
    assert "--base-url http://localhost:8000" in answer["benchmark"]


def test_dynamo_aggregated_is_the_frontend_and_one_worker(client):
    answer = launched(client, "dynamo-trt", LAYOUTS["ep8 dp-attention"])
    lines = answer["command"].splitlines()
    assert lines[0] == "python3 -m dynamo.frontend --http-port 8000" and len(lines) == 2
    assert "--enable-attention-dp" in lines[1] and "--expert-parallel-size 8" in lines[1]
    assert "--disaggregation-mode" not in lines[1] and set(answer["files"]) == {"config.yml"}
