"""A serving deployment as the commands that start it and benchmark it: `python -m sglang.launch_server`, `vllm
serve` or `trtllm-serve` (with its YAML), and InferenceX's benchmark client at the workload the answer describes.
Every flag is spelled as the engine's own argument parser spells it (tests/data/engine_flags.json holds them, read from
each engine's source, and a test holds every generated flag to them).

How a layout maps (a pool of t devices a worker, d attention groups of a = t / d, experts whole over the worker or
split by width):
- SGLang: `--tp-size t`; `--ep-size t` for whole experts; `--dp-size d --enable-dp-attention` for attention groups;
  `--max-running-requests` over the whole server (the scheduler's cap a group times d); several workers without
  attention groups as `--dp-size` replicas of one server; disaggregated pools as `--disaggregation-mode prefill` and
  `decode` servers;
- vLLM: `--tensor-parallel-size a --data-parallel-size d` (an engine a group), `--enable-expert-parallel` for whole
  experts; `--max-num-seqs` a group; disaggregated pools as two servers with the NIXL connector;
- TensorRT-LLM: `--tp_size t --ep_size` (t for whole experts, else 1), attention groups as `enable_attention_dp` in
  the YAML, `--max_batch_size` a rank; disaggregated pools as a `trtllm-serve` a worker (context workers with the
  overlap scheduler off, both with a `cache_transceiver_config`) and `trtllm-serve disaggregated` over them, its
  cluster file naming each worker's address (TensorRT-LLM's examples/disaggregated and llmapi/disagg_utils.py);
- Dynamo (`dynamo-sglang`, `dynamo-trt`): `python -m dynamo.frontend` on the benchmark's port and a `python -m
  dynamo.sglang` (SGLang's own flags) or `python -m dynamo.trtllm` (Dynamo's, the YAML as `--extra-engine-args`)
  process a worker, `--disaggregation-mode prefill` or `decode` for disaggregated pools.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace

from service.core.simulation.engines import Scheduler, engine_family


@dataclass(frozen=True)
class PoolLayout:
    workers: int
    tensor_parallel: int
    expert_parallel: int
    attention_data_parallel: int

    @property
    def attention_ranks(self) -> int:
        return self.tensor_parallel // self.attention_data_parallel


@dataclass(frozen=True)
class LaunchRequest:
    engine: str
    model: str  # a Hugging Face repo id or a local path
    decode: PoolLayout
    prefill: PoolLayout | None  # None: aggregated
    scheduler: Scheduler
    kv_cache_fp8: bool
    speculative: tuple[str, int] | None  # (method, draft tokens)
    context_len: int
    input_len: int
    output_len: int
    concurrency: int
    range_ratio: float
    prompts: int


@dataclass(frozen=True)
class Launch:
    command: str
    files: dict[str, str] = field(default_factory=dict)
    benchmark: str = ""
    notes: tuple[str, ...] = ()


PORT = 8000


def _join(program: list[str], flags: list[tuple[str, object | None]]) -> str:
    """The command line: each flag with its value (a flag whose value is True stands alone, None is left out)."""
    words = list(program)
    for flag, value in flags:
        if value is None or value is False:
            continue
        words.append(flag)
        if value is not True:
            words.append(str(value))
    return shlex.join(words)


SGLANG = ("python3", "-m", "sglang.launch_server")


def _sglang(request: LaunchRequest, pool: PoolLayout, mode: str | None, port: int | None,
            program: tuple[str, ...] = SGLANG, transfer: str | None = None) -> str:
    """`port` None: a Dynamo worker (`program` dynamo.sglang), which registers with Dynamo's discovery and serves no
    HTTP of its own; `transfer`: the KV transfer backend of a disaggregated pool where it is not SGLang's default."""
    s = request.scheduler
    groups = pool.attention_data_parallel
    replicas = pool.workers if groups == 1 and pool.workers > 1 else None
    flags: list[tuple[str, object | None]] = [
        ("--model-path", request.model), ("--tp-size", pool.tensor_parallel),
        ("--ep-size", pool.tensor_parallel if pool.expert_parallel > 1 else None),
        ("--dp-size", groups if groups > 1 else replicas), ("--enable-dp-attention", groups > 1),
        ("--chunked-prefill-size", s.step_tokens), ("--max-running-requests", s.max_running * groups),
        ("--cuda-graph-max-bs", max(s.graph_batch_sizes) if s.graph_batch_sizes else None),
        ("--disable-cuda-graph", not s.graph_batch_sizes),
        ("--scheduler-recv-interval", s.recv_interval if s.recv_interval > 1 else None),
        ("--stream-interval", s.stream_interval if s.stream_interval > 1 else None),
        ("--enable-mixed-chunk", s.batching == "mixed"),
        ("--kv-cache-dtype", "fp8_e4m3" if request.kv_cache_fp8 else None),
        ("--context-length", request.context_len), ("--disaggregation-mode", mode),
        ("--disaggregation-transfer-backend", transfer if mode else None), ("--trust-remote-code", True),
        ("--host", "0.0.0.0" if port is not None else None), ("--port", port)]
    if request.speculative is not None:
        _, k = request.speculative
        # SGLang runs MTP and EAGLE drafts as its EAGLE algorithm: k steps, one candidate each, k + 1 verified.
        flags += [("--speculative-algorithm", "EAGLE"), ("--speculative-num-steps", k),
                  ("--speculative-eagle-topk", 1), ("--speculative-num-draft-tokens", k + 1)]
    return _join(list(program), flags)


VLLM_SPECULATIVE = {"mtp": "deepseek_mtp", "eagle": "eagle", "draft": "draft_model"}


def _vllm(request: LaunchRequest, pool: PoolLayout, role: str | None, port: int) -> str:
    s = request.scheduler
    flags: list[tuple[str, object | None]] = [
        ("--tensor-parallel-size", pool.attention_ranks),
        ("--data-parallel-size", pool.attention_data_parallel if pool.attention_data_parallel > 1 else None),
        ("--enable-expert-parallel", pool.expert_parallel > 1),
        ("--max-num-batched-tokens", s.step_tokens), ("--max-num-seqs", s.max_running),
        ("--kv-cache-dtype", "fp8" if request.kv_cache_fp8 else None), ("--max-model-len", request.context_len),
        ("--trust-remote-code", True), ("--host", "0.0.0.0"), ("--port", port)]
    if request.speculative is not None:
        method, k = request.speculative
        flags.append(("--speculative-config", json.dumps({"method": VLLM_SPECULATIVE[method],
                                                          "num_speculative_tokens": k})))
    if role is not None:
        flags.append(("--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})))
    return _join(["vllm", "serve", request.model], flags)


def _trtllm_yaml(request: LaunchRequest, pool: PoolLayout, role: str | None = None, chunked_in_yaml: bool = False) -> str:
    """A worker's --extra_llm_api_options; `role` ("context", "generation") a disaggregated pool's: its KV caches
    sent between the pools, a context worker's overlap scheduler off (not supported there); `chunked_in_yaml`: chunked
    prefill as the YAML's key (Dynamo's worker has no flag for it)."""
    s = request.scheduler
    lines = ["enable_attention_dp: " + ("true" if pool.attention_data_parallel > 1 else "false"),
             f"stream_interval: {s.stream_interval}",
             "kv_cache_config:", "  dtype: " + ("fp8" if request.kv_cache_fp8 else "auto"),
             "  enable_block_reuse: false"]
    if s.graph_batch_sizes:
        lines += ["cuda_graph_config:", "  enable_padding: true", f"  max_batch_size: {max(s.graph_batch_sizes)}"]
    if pool.attention_data_parallel > 1 and s.balance_wait_steps:
        lines += ["attention_dp_config:", "  enable_balance: true", "  batching_wait_iters: 0",
                  f"  timeout_iters: {s.balance_wait_steps}"]
    if request.speculative is not None:
        _, k = request.speculative
        lines += ["speculative_config:", "  decoding_type: MTP", f"  num_nextn_predict_layers: {k}"]
    if chunked_in_yaml and s.chunked:
        lines.append("enable_chunked_prefill: true")
    if role is not None:
        lines += ["cache_transceiver_config:", "  backend: DEFAULT", f"  max_tokens_in_buffer: {request.context_len}"]
    if role == "context":
        lines.append("disable_overlap_scheduler: true")
    return "\n".join(lines) + "\n"


def _trtllm_disaggregated(request: LaunchRequest, prefill: PoolLayout, decode: PoolLayout) -> tuple[str, dict[str, str]]:
    """A context worker a prefill worker, a generation worker a decode worker (each on its own port), and the
    disaggregated server over them on the benchmark's port, with the cluster file naming each worker."""
    ports = {"context": [PORT + 1 + i for i in range(prefill.workers)],
             "generation": [PORT + 1 + prefill.workers + i for i in range(decode.workers)]}
    lines = [_trtllm(request, pool, port, f"{role}.yml")
             for role, pool in (("context", prefill), ("generation", decode)) for port in ports[role]]
    lines.append(_join(["trtllm-serve", "disaggregated"], [("--config_file", "disagg.yml"),
                                                           ("--server_start_timeout", 1800),
                                                           ("--request_timeout", 1800)]))
    cluster = ["hostname: localhost", f"port: {PORT}", "backend: pytorch"]
    for role, key in (("context", "context_servers"), ("generation", "generation_servers")):
        cluster += [f"{key}:", f"  num_instances: {len(ports[role])}", "  urls:",
                    *(f'    - "localhost:{port}"' for port in ports[role])]
    files = {"context.yml": _trtllm_yaml(request, prefill, "context"),
             "generation.yml": _trtllm_yaml(request, decode, "generation"), "disagg.yml": "\n".join(cluster) + "\n"}
    return "\n".join(lines), files


def _trtllm(request: LaunchRequest, pool: PoolLayout, port: int, options: str = "config.yml") -> str:
    s = request.scheduler
    flags: list[tuple[str, object | None]] = [
        ("--backend", "pytorch"), ("--tp_size", pool.tensor_parallel),
        ("--ep_size", pool.tensor_parallel if pool.expert_parallel > 1 else 1),
        ("--max_batch_size", s.max_running), ("--max_num_tokens", max(s.step_tokens, request.input_len)),
        ("--max_seq_len", request.context_len), ("--enable_chunked_prefill", s.chunked),
        ("--extra_llm_api_options", options), ("--trust_remote_code", True), ("--host", "0.0.0.0"),
        ("--port", port)]
    return _join(["trtllm-serve", request.model], flags)


# Dynamo's flags as ai-dynamo/dynamo spells them (tests/data/engine_flags.json names the commits read).
DYNAMO_SGLANG = ("python3", "-m", "dynamo.sglang")


def _dynamo_trtllm(request: LaunchRequest, pool: PoolLayout, mode: str | None, options: str) -> str:
    s = request.scheduler
    flags: list[tuple[str, object | None]] = [
        ("--model", request.model), ("--tensor-parallel-size", pool.tensor_parallel),
        ("--expert-parallel-size", pool.tensor_parallel if pool.expert_parallel > 1 else None),
        ("--enable-attention-dp", pool.attention_data_parallel > 1), ("--max-batch-size", s.max_running),
        ("--max-num-tokens", max(s.step_tokens, request.input_len)), ("--max-seq-len", request.context_len),
        ("--extra-engine-args", options), ("--disaggregation-mode", mode)]
    return _join(["python3", "-m", "dynamo.trtllm"], flags)


def _dynamo(request: LaunchRequest, family: str) -> Launch:
    """Dynamo's deployment: its frontend (the OpenAI server and the router) on the benchmark's port, and a worker
    process a pool's worker, each registering with Dynamo's discovery; disaggregated pools as prefill and decode
    workers (SGLang's moving KV caches over NIXL, TensorRT-LLM's with its cache transceiver)."""
    decode, prefill = request.decode, request.prefill
    pools = [(decode, None)] if prefill is None else [(prefill, "prefill"), (decode, "decode")]
    one = [(replace(pool, workers=1), mode) for pool, mode in pools for _ in range(pool.workers)]
    files: dict[str, str] = {}
    if family == "sglang":
        workers = [_sglang(request, pool, mode, None, DYNAMO_SGLANG, "nixl") for pool, mode in one]
    else:
        names = {None: "config.yml", "prefill": "context.yml", "decode": "generation.yml"}
        roles = {None: None, "prefill": "context", "decode": "generation"}
        workers = [_dynamo_trtllm(request, pool, mode, names[mode]) for pool, mode in one]
        files = {names[mode]: _trtllm_yaml(request, pool, roles[mode], chunked_in_yaml=True) for pool, mode in pools}
    frontend = _join(["python3", "-m", "dynamo.frontend"], [("--http-port", PORT)])
    notes = (f"scheduler: {request.scheduler.source}",
             f"Dynamo: its frontend on port {PORT} routes each request to a worker (a prefill worker first where "
             "disaggregated), each worker a process on its own devices; every process reaches etcd and NATS, "
             "Dynamo's default discovery backend and event plane (ETCD_ENDPOINTS, NATS_SERVER)")
    return Launch("\n".join([frontend, *workers]), files,
                  benchmark_command(request, "vllm" if family == "sglang" else "openai"), notes)


def benchmark_command(request: LaunchRequest, backend: str, port: int = PORT) -> str:
    """InferenceX's client (utils/bench_serving/benchmark_serving.py) at the workload: a closed loop at the
    concurrency, 10 prompts a request in flight, lengths from [range_ratio x L, L], every output to its length."""
    flags: list[tuple[str, object | None]] = [
        ("--model", request.model), ("--backend", backend), ("--base-url", f"http://localhost:{port}"),
        ("--dataset-name", "random"), ("--random-input-len", request.input_len),
        ("--random-output-len", request.output_len), ("--random-range-ratio", request.range_ratio),
        ("--num-prompts", request.prompts), ("--max-concurrency", request.concurrency), ("--request-rate", "inf"),
        ("--ignore-eos", True), ("--percentile-metrics", "ttft,tpot,itl,e2el"), ("--metric-percentiles", "50,90,99")]
    return _join(["python3", "utils/bench_serving/benchmark_serving.py"], flags)


def launch(request: LaunchRequest) -> Launch:
    """The commands that start the deployment and benchmark it (module docstring), or a Launch with no command and
    the reason in its notes where the engine's disaggregated serving is not written here."""
    family = engine_family(request.engine)
    if request.engine.lower().startswith("dynamo-") and family in ("sglang", "trt"):
        return _dynamo(request, family)
    decode, prefill = request.decode, request.prefill
    notes = [f"scheduler: {request.scheduler.source}"]
    if family == "sglang":
        if decode.workers > 1 and decode.attention_data_parallel > 1:
            notes.append("several workers with attention groups: one such server each, behind SGLang's router")
        if prefill is None:
            return Launch(_sglang(request, decode, None, PORT), {}, benchmark_command(request, "vllm"), tuple(notes))
        command = "\n".join([_sglang(request, prefill, "prefill", PORT + 1), _sglang(request, decode, "decode", PORT + 2)])
        notes.append(f"disaggregated: {prefill.workers} prefill and {decode.workers} decode server(s) like these "
                     f"(ports {PORT + 1}, {PORT + 2}), joined by SGLang's router in PD mode (sglang-router) on port "
                     f"{PORT}, which the benchmark addresses")
        return Launch(command, {}, benchmark_command(request, "vllm"), tuple(notes))
    if family == "vllm":
        if decode.workers > 1 or (prefill is not None and prefill.workers > 1):
            notes.append("several workers: one such server each, behind a load balancer on the benchmark's port")
        if prefill is None:
            return Launch(_vllm(request, decode, None, PORT), {}, benchmark_command(request, "vllm"), tuple(notes))
        command = "\n".join([_vllm(request, prefill, "prefill", PORT + 1), _vllm(request, decode, "decode", PORT + 2)])
        notes.append("disaggregated: the two servers share KV caches through NIXL; vLLM's disaggregated proxy (or "
                     f"Dynamo) routes each request's prefill then its decode, on port {PORT}")
        return Launch(command, {}, benchmark_command(request, "vllm"), tuple(notes))
    if prefill is not None:
        command, files = _trtllm_disaggregated(request, prefill, decode)
        notes.append(f"disaggregated: {prefill.workers} context and {decode.workers} generation worker(s), one "
                     f"trtllm-serve each on its own port, their KV caches sent between the pools; trtllm-serve "
                     f"disaggregated routes each request's prefill then its decode, on port {PORT}, which the "
                     "benchmark addresses")
        return Launch(command, files, benchmark_command(request, "openai"), tuple(notes))
    if decode.workers > 1:
        notes.append("several workers: one such server each, behind a load balancer on the benchmark's port")
    return Launch(_trtllm(request, decode, PORT), {"config.yml": _trtllm_yaml(request, decode)},
                  benchmark_command(request, "openai"), tuple(notes))
