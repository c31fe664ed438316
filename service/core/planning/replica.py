"""One replica of a deployment (t devices of one kind serving a model with tensor parallelism), as the search
sees it: composed from the core's own analyses, with no request or catalog in sight. The translation layer
resolves the device, its roofs (the evaluator), the dtypes and the memory budget once, and hands them here."""

from __future__ import annotations

from functools import partial

from service.core.planning.deployment import (
    Speculative,
    WorkerStep,
    busy_attention_groups,
    decode_curves,
    draft_worker_for,
    largest_fitting,
    with_draft_weights,
)
from service.core.planning.serving import ReplicaModel, Workload
from service.core.training.collectives import Link
from service.core.transformer.analysis import Evaluator, analyze_model, batch_time_curve
from service.core.transformer.architecture import Architecture
from service.core.transformer.capacity import MemoryBudget, kv_bytes_per_request
from service.core.transformer.layers import ModelDTypes


def replica_model(arch: Architecture, evaluator: Evaluator, budget: MemoryBudget, dtypes: ModelDTypes,
                  workload: Workload, *, tensor_parallel: int, max_concurrency: int, block_size: int,
                  link_bytes_per_s: float | None) -> ReplicaModel:
    t, input_len, output_len = tensor_parallel, workload.input_len, workload.output_len
    mean_context = input_len + output_len // 2
    step = partial(analyze_model, arch, evaluator, dtypes=dtypes, tensor_parallel=t, attention_implementation="flash",
                   explain=False)
    prefill = step(phase="prefill", batch=1, seq_len=input_len)
    # The caches at their largest: input_len prompt tokens plus all but the last output token.
    context = input_len + output_len - 1

    def memory(c: int):
        return budget.at(batch=c, context=context, step_tokens=c)

    fitting = largest_fitting(lambda c: memory(c).fits, max_concurrency)

    def memory_at(c: int) -> dict:
        return {**vars(memory(c)), "context_len": context}

    decode: dict[int, float] = {}
    if fitting:
        values = list(range(1, fitting + 1))
        curve = batch_time_curve(arch, evaluator, values=values, phase="decode", seq_len=mean_context, dtypes=dtypes,
                                 tensor_parallel=t)
        if curve is not None:
            decode = dict(zip(values, curve))

    def decode_s(c: int) -> float:
        if c not in decode:  # beyond the curve (an embedding past its vocabulary): the step itself
            decode[c] = step(phase="decode", batch=c, seq_len=mean_context).totals.time_s
        return decode[c]

    kv_request = kv_bytes_per_request(arch, dtypes, input_len, t, block_size)
    return ReplicaModel(tensor_parallel=t, prefill_s=prefill.totals.time_s, decode_s=decode_s,
                        max_concurrency=fitting, memory_at=memory_at,
                        kv_transfer_s=kv_request / link_bytes_per_s if link_bytes_per_s else None)


def worker_replica_model(worker: WorkerStep, budget: MemoryBudget, workload: Workload, *, max_concurrency: int,
                         block_size: int, link: Link | None, speculative: Speculative | None = None) -> ReplicaModel:
    """One replica laid out as a serving worker (experts over its devices, attention groups): at concurrency c each
    of its d groups decodes c // d sequences (below d, c groups one each and the rest idle), its decode step the
    worker's; with speculative decoding,
    (the verification and the draft's steps) / the acceptance length, the time a token."""
    pool, arch = worker.pool, worker.arch
    d, input_len, output_len = pool.attention_data_parallel, workload.input_len, workload.output_len
    k = speculative.draft_tokens if speculative else 0
    context = input_len + output_len - 1 + k
    draft_worker = draft_worker_for(speculative, worker)
    budget = with_draft_weights(budget, draft_worker)

    def per_group(c: int) -> int:
        return max(1, c // d)

    def memory(c: int):
        return budget.at(batch=per_group(c), context=context, step_tokens=per_group(c) * (k + 1))

    fitting = largest_fitting(lambda c: memory(c).fits, max_concurrency)
    batches = list(range(1, per_group(fitting) + 1)) if fitting else []
    steps: dict[int, float] = {}
    few: dict[int, float] = {}
    acceptance = speculative.acceptance_length if speculative else 1.0
    if batches:
        verify, draft = decode_curves(worker, batches, input_len + output_len // 2, speculative, draft_worker)
        steps = {b: (v + d_) / acceptance for b, v, d_ in zip(batches, verify, draft, strict=True)}

    def decode_s(c: int) -> float:
        busy = busy_attention_groups(c, pool)
        if busy is not None:  # fewer requests than groups: a step of the busy groups alone, the rest idle
            if busy not in few:
                verify, draft = decode_curves(worker, [1], input_len + output_len // 2, speculative, draft_worker, busy)
                few[busy] = (verify[0] + draft[0]) / acceptance
            return few[busy]
        return steps[per_group(c)]

    def memory_at(c: int) -> dict:
        return {**vars(memory(c)), "context_len": context}

    kv_whole = kv_bytes_per_request(arch, worker.dtypes, input_len, 1, block_size)
    return ReplicaModel(tensor_parallel=pool.tensor_parallel,
                        prefill_s=worker.time_s(batch=1, q_len=input_len, kv_len=input_len, busy_groups=1),
                        decode_s=decode_s,
                        max_concurrency=fitting, memory_at=memory_at,
                        kv_transfer_s=(link.latency_s + kv_whole / (pool.attention_ranks * link.bandwidth_bytes_per_s)
                                       if link else None),
                        expert_parallel=pool.expert_parallel, attention_data_parallel=d)
