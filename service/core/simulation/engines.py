"""An engine's scheduler as the simulation runs it, and each engine's defaults, read from its own code.

What the fields mean, in each engine's words:
- `batching`: "prefill_first" (SGLang: a step either prefills new requests or decodes the running ones, prefills
  first; its `--enable-mixed-chunk` is off by default) or "mixed" (vLLM V1 and TensorRT-LLM's in-flight batching:
  one step decodes every running request and prefills what the token budget leaves);
- `step_tokens`: the tokens one step may prefill (SGLang `--chunked-prefill-size`, vLLM `--max-num-batched-tokens`,
  TensorRT-LLM `max_num_tokens`); a longer prompt is prefilled in chunks over several steps;
- `max_running`: the requests a group decodes at once (SGLang `--max-running-requests`, vLLM `--max-num-seqs`,
  TensorRT-LLM `max_batch_size`); the KV cache may hold fewer (the deployment's running batch);
- `recv_interval`: the steps between two looks for new requests (SGLang `--scheduler-recv-interval`, and
  `--num-continuous-decode-steps`, which runs that many decode steps without scheduling); an idle engine looks at once;
- `graph_batch_sizes`: the decode batches captured as CUDA graphs: a batch runs padded to the next one (none:
  unpadded);
- `chunked`: whether a prompt longer than `step_tokens` is split over steps (TensorRT-LLM's
  `enable_chunked_prefill`, off by default: its prompt then runs whole in one step);
- `balance_wait_steps`: TensorRT-LLM's `attention_dp_config` (`enable_balance`, `timeout_iters`): with attention
  data parallelism a new request waits until every rank has one to prefill, at most this many steps (0: off, its
  default);
- `stream_interval`: the tokens a streamed chunk carries (`--stream-interval`), so a client's inter-token latency
  is that many steps.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace

from service.core.errors import CostModelError

GiB = 1024**3


@dataclass(frozen=True)
class Scheduler:
    engine: str
    batching: str  # prefill_first or mixed
    step_tokens: int
    max_running: int
    recv_interval: int = 1
    graph_batch_sizes: tuple[int, ...] = ()
    stream_interval: int = 1
    source: str = ""
    chunked: bool = True  # False: a prompt is prefilled whole in one step, whatever step_tokens says
    balance_wait_steps: int = 0  # with attention data parallelism: the steps a new request may wait for company

    def __post_init__(self):
        if self.batching not in ("prefill_first", "mixed"):
            raise CostModelError("scheduler.batching", "is prefill_first or mixed")
        for name in ("step_tokens", "max_running", "recv_interval", "stream_interval"):
            if getattr(self, name) < 1:
                raise CostModelError(f"scheduler.{name}", "must be at least 1")
        if self.balance_wait_steps < 0:
            raise CostModelError("scheduler.balance_wait_steps", "must not be negative")
        if any(b < 1 for b in self.graph_batch_sizes):
            raise CostModelError("scheduler.graph_batch_sizes", "must be at least 1")
        object.__setattr__(self, "graph_batch_sizes", tuple(sorted(set(self.graph_batch_sizes))))

    def padded(self, batch: int) -> int:
        """The batch a decode step of `batch` sequences runs as: the next captured size, else itself."""
        sizes = self.graph_batch_sizes  # sorted (__post_init__)
        at = bisect_left(sizes, batch)
        return sizes[at] if at < len(sizes) else batch


def sglang_graph_sizes(largest: int) -> tuple[int, ...]:
    """SGLang's default decode capture sizes (server_args.py `_generate_cuda_graph_batch_sizes`): 1, 2, 4, 8, 12,
    then every 8 to 256, every 16 to 512, every 32 beyond, up to `--cuda-graph-max-bs`."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, largest + 1, 32)]
    return tuple(s for s in sizes if s <= largest)


def vllm_graph_sizes(largest: int) -> tuple[int, ...]:
    """vLLM's default capture sizes (vllm/config/compilation.py): 1, 2, 4, then every 8 to 256, every 16 beyond, up
    to `max_cudagraph_capture_size` (512, or twice max_num_seqs where that is less)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return tuple(s for s in sizes if s <= largest)


SGLANG_SOURCE = ("SGLang python/sglang/srt/server_args.py (v0.5 series): prefill-first steps (enable_mixed_chunk "
                 "False), chunked_prefill_size 8192 below 160 GiB of device memory and 16384 from it, "
                 "cuda_graph_max_bs 512, scheduler_recv_interval 1, stream_interval 1")
VLLM_SOURCE = ("vLLM vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (v0.11 series, OpenAI server): V1 "
               "always chunks prefills beside decodes; max_num_batched_tokens 8192 and max_num_seqs 1024 on devices "
               "of 70 GiB or more (not A100), else 2048 and 256")
TRTLLM_SOURCE = ("TensorRT-LLM tensorrt_llm/commands/serve.py and BuildConfig (1.x): in-flight batching of context "
                 "and generation requests in one step, max_num_tokens 8192, max_batch_size 2048, chunked prefill off "
                 "(a prompt is prefilled whole, in one step)")


def engine_family(engine: str) -> str | None:
    """The scheduler an engine name runs: InferenceX's names (dynamo-sglang, mori-sglang, dynamo-trt) carry their
    engine's; AMD's ATOM schedules as vLLM does (it is built on vLLM's scheduler)."""
    name = engine.lower()
    for family, marks in (("sglang", ("sglang",)), ("trt", ("trt",)), ("vllm", ("vllm", "atom"))):
        if any(mark in name for mark in marks):
            return family
    return None


def engine_preset(engine: str, device_memory_bytes: float) -> Scheduler:
    """An engine's default scheduler on a device of that much memory; a 422 naming `engine` where none is known."""
    family = engine_family(engine)
    if family == "sglang":
        big = device_memory_bytes >= 160 * GiB
        return Scheduler(engine, "prefill_first", 16384 if big else 8192, 4096, 1, sglang_graph_sizes(512), 1,
                         SGLANG_SOURCE)
    if family == "vllm":
        big = device_memory_bytes >= 70 * GiB
        seqs = 1024 if big else 256
        return Scheduler(engine, "mixed", 8192 if big else 2048, seqs, 1, vllm_graph_sizes(min(512, 2 * seqs)), 1,
                         VLLM_SOURCE)
    if family == "trt":
        return Scheduler(engine, "mixed", 8192, 2048, 1, (), 1, TRTLLM_SOURCE, chunked=False)
    raise CostModelError("engine", f"no scheduler is known for engine {engine!r} (known: names containing sglang, "
                                   "vllm, atom or trt)")


def overridden(scheduler: Scheduler, **fields) -> Scheduler:
    """The scheduler with the fields given (not None) replaced, its source saying so."""
    given = {name: value for name, value in fields.items() if value is not None}
    if not given:
        return scheduler
    changed = ", ".join(f"{name} {value}" for name, value in sorted(given.items()) if name != "graph_batch_sizes")
    return replace(scheduler, **given, source=f"{scheduler.source}; overridden: {changed or 'graph_batch_sizes'}")
