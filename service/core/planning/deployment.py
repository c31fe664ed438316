"""One serving deployment under one workload: what a serving benchmark would measure, as bounds (time from
below, throughput from above). Pure: the translation layer resolves the model, the device's roofs and links.

A pool is `workers` copies of one worker of t devices, laid out as SGLang and vLLM lay out MoE serving:
- attention data parallelism d (dividing t): d attention groups of a = t / d devices. Each group holds its own
  requests and their KV cache, and runs attention, dense and shared-expert MLPs, the embedding and the LM head
  split a ways by tensor parallelism (an all-reduce over a after each block);
- expert parallelism e, 1 or t: with e = t each device holds E / t routed experts whole and every token goes to
  its top-k experts' devices and back (a dispatch and a combine all-to-all, DeepEP-style, over the t devices);
  with e = 1 the experts are split by width over the t devices;
- where d > 1 and a layer's MLP is split by width over all t devices (dense layers; routed experts when e = 1),
  the block gathers the d groups' tokens first (an all-gather over t) and returns them (a reduce-scatter).

The scheduling model: continuous batching at a fixed concurrency c, in steady state.
  B      a group's running batch: c / (workers x d) rounded down (at least 1), at most the engine's cap
         (max_batch_per_group) and what the group's KV cache holds; the rest of c waits for a place
  T_d    one decode step of B sequences per group at the mean context, input + output / 2 (attention is affine
         in the context, and the mean of a convex function is at least its value at the mean)
  T_p(n) one prefill step of n requests per group, every group at once
  TTFT  >= T_p(1) (one request once admitted, alone) + with disaggregated pools, its KV cache over the link
  TPOT  >= T_d (with speculative decoding: (the verification of k + 1 tokens + k draft steps) / acceptance length)
         and, aggregated, a request's tokens also wait for the prefills of the requests that replace finished ones
         on the same devices: T_p(B) / output a token (the prefill share, reported beside TPOT, not in it: a step
         without a prefill in it is that fast)
  requests/s <= the work a pool can do: aggregated, each group spends `output / acceptance` decode steps and its
         B requests' prefills (batched, the cheapest way to do them) per B requests: running / (output /
         acceptance x T_d + T_p(B)); disaggregated, the slower of the prefill pool (workers_p x d_p x n / T_p(n),
         n its share of c) and the decode pool (running / (output x TPOT)); never more than c / (TTFT + (output
         - 1) x TPOT)
  e2e   (the mean request's) = c / (requests/s) by Little's law, at least TTFT + (output - 1) x TPOT; what exceeds
         the latter is waiting: for a place in a batch, or behind other requests' prefills
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import partial

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.memo import ByIdentity
from service.core.training.collectives import Link, Topology
from service.core.training.experts import all_to_all_bytes
from service.core.transformer.analysis import Evaluator, RowResult, curve_from_two, group_label
from service.core.transformer.architecture import Architecture, LayerGroup
from service.core.transformer.capacity import (
    MemoryBudget,
    StepMemory,
    kv_bytes_per_request,
    memory_budget,
    routed_expert_bytes,
    weight_bytes,
)
from service.core.transformer.layers import (
    ExpertShard,
    ModelDTypes,
    Row,
    Step,
    busiest_device_experts,
    expected_active_experts,
    expert_exchange,
    layer_rows,
    mlp_block,
    mlp_rows,
    model_level_rows,
    tensor_parallel_block,
)


@dataclass(frozen=True)
class Pool:
    workers: int
    tensor_parallel: int  # t: the devices of one worker
    expert_parallel: int = 1  # 1 or t
    attention_data_parallel: int = 1  # d, dividing t
    max_batch_per_group: int | None = None  # the engine's cap on the requests a group decodes at once
    # Experts over the worker's devices read as its busiest device holds them (layers.busiest_device_experts): what
    # an expert-parallel step is expected to take, not its bound (the mean, read where this is False).
    busiest_experts: bool = False

    @property
    def attention_ranks(self) -> int:
        return self.tensor_parallel // self.attention_data_parallel

    @property
    def groups(self) -> int:
        """Attention groups over the whole pool."""
        return self.workers * self.attention_data_parallel

    @property
    def devices(self) -> int:
        return self.workers * self.tensor_parallel

    @property
    def rounds_expert_shares(self) -> bool:
        """Whether its experts split over a worker whose groups hold fewer devices' worth of tokens than it has
        devices: a device's share of the tokens then rounds, and a decode step is not affine in the batch."""
        return self.expert_parallel > 1 and self.attention_data_parallel < self.tensor_parallel

    def decode_curve_steps(self) -> int:
        """The most steps WorkerStep.decode_curve analyses for a curve over any batches: 2, or where shares round,
        t - 1 below the batch where every device has a token and two for each of at most t classes past it."""
        return 3 * self.tensor_parallel - 1 if self.rounds_expert_shares else 2


@dataclass(frozen=True)
class Speculative:
    method: str  # mtp, eagle (one extra decoder layer as the draft) or draft (a model of its own)
    draft_tokens: int  # k
    acceptance_length: float  # tokens emitted per verification, 1 <= a <= k + 1
    draft: Architecture | None = None


@dataclass(frozen=True)
class Workload:
    input_len: int
    output_len: int
    concurrency: int


def check_pool(arch: Architecture, pool: Pool, prefix: str = "") -> None:
    """`prefix`: where the pool sits in the request ("" at the top level, else e.g. "decode.")."""
    t, e, d = pool.tensor_parallel, pool.expert_parallel, pool.attention_data_parallel
    if t % d:
        raise CostModelError(f"{prefix}attention_data_parallel", f"{d} attention groups do not split {t} devices")
    if e not in (1, t):
        raise CostModelError(f"{prefix}expert_parallel", f"expert_parallel is 1 or the worker's {t} devices (SGLang "
                                                         "and vLLM split the experts over all of a worker's devices)")
    if e > 1 and arch.moe is None:
        raise CostModelError(f"{prefix}expert_parallel", "the model has no routed experts to split")


class WorkerStep:
    """One step of a worker: its rows on one device, each collective placed on the link its group spans."""

    def __init__(self, arch: Architecture, evaluator: Evaluator, topology: Topology, pool: Pool, dtypes: ModelDTypes):
        self.arch, self.evaluator, self.topology, self.pool, self.dtypes = arch, evaluator, topology, pool, dtypes

    def _link(self, extent: int, group: str) -> Link:
        """A worker is placed inside one scale-up domain when it fits there (a 16-device worker in a 72-GPU NVLink
        rack), so a group that fits runs on the scale-up link; a larger one crosses the scale-out link."""
        topology = self.topology
        if extent <= topology.node_size and topology.intra_node is not None:
            return topology.intra_node
        return topology.link_for(max(extent, topology.node_size + 1), group)

    def rows(self, *, batch: int, q_len: int, kv_len: int, scored_tokens: int = 1,
             layers: tuple[LayerGroup, ...] | None = None, attention_implementation: str = "flash",
             busy_groups: int | None = None):
        """(label, layers, rows) of a step of `batch` sequences per attention group; `layers`: only these
        groups (a draft's one layer), else the model's; `busy_groups`: how many of the worker's attention groups
        have sequences (busy_attention_groups), all where None. The same rows whatever the evaluator: a bound and
        the expectation composed beside it share them (worker_rows)."""
        busy = None if busy_groups is None or busy_groups >= self.pool.attention_data_parallel else busy_groups
        return worker_rows(self.arch, self.pool, self.dtypes, batch, q_len, kv_len, scored_tokens, layers,
                           attention_implementation, busy)

    def _extent(self, row: Row) -> tuple[int, str]:
        """The devices a collective row spans, and the group it belongs to."""
        if row.name.startswith(("moe_", "mlp_all_gather", "mlp_reduce_scatter")):
            return self.pool.tensor_parallel, "expert" if row.name.startswith("moe_") else "worker"
        return self.pool.attention_ranks, "attention"

    def evaluate(self, **step) -> list[RowResult]:
        results = []
        for label, layers, rows in self.rows(**step):
            for row in rows:
                if row.is_comm:
                    extent, group = self._extent(row)
                    link = self._link(extent, group)
                    results.append(Evaluator.collective(row, label, layers, link))
                else:
                    results.append(self.evaluator.evaluate(row, label, layers))
        return results

    def time_s(self, **step) -> float:
        return sum(r.total_time_s for r in self.evaluate(**step))

    def curve_is_exact(self) -> bool:
        """Whether the step is affine in the group's batch but for the experts hit (Pool.rounds_expert_shares)."""
        return not self.pool.rounds_expert_shares

    def decode_curve(self, batches: Sequence[int], *, kv_len: int, q_len: int = 1, scored_tokens: int = 1,
                     layers: tuple[LayerGroup, ...] | None = None, busy_groups: int | None = None) -> list[float]:
        """The step of `q_len` new tokens a sequence at each of `batches` sequences per group, exactly, from a few
        steps analysed: those at 1 and 2 where curve_is_exact, else those of each rounding class (_rounded_curve)."""
        step = {"q_len": q_len, "kv_len": kv_len, "scored_tokens": scored_tokens, "layers": layers,
                "busy_groups": busy_groups}
        # Two values or fewer cost no more stepped than the curve's two steps (a serving analysis asks for one).
        if len(batches) <= 2 or max(batches) * self.pool.attention_data_parallel * q_len >= self.arch.vocab:
            return [self.time_s(batch=b, **step) for b in batches]
        if not self.curve_is_exact():
            return self._rounded_curve(batches, step)
        return self._curve(batches, (1, 2), step)

    def _curve(self, batches: Sequence[int], at: tuple[int, int], step: dict) -> list[float]:
        low, high = (self.evaluate(batch=b, **step) for b in at)
        moe, pool = self.arch.moe, self.pool
        busiest = moe is not None and pool.busiest_experts and pool.expert_parallel > 1
        return curve_from_two(low, high, batches, bandwidth=self.evaluator.hbm.bytes_per_s, moe=moe,
                              routed_tokens_per_value=pool.attention_data_parallel * step["q_len"], at=at,
                              experts_hit=partial(_active_experts_per_device, pool, moe) if busiest else None)

    def _rounded_curve(self, batches: Sequence[int], step: dict) -> list[float]:
        """Experts over a worker with fewer attention groups than devices: a device's share of the worker's tokens
        (what it dispatches, the token rows of its experts) is rounded down, and at least 1 (_device_shares). Every
        row's compute and memory times are affine in (1, the batch, the two shares) but for the experts hit, so a
        few steps whose shares span those directions give every row's coefficients, and the step at every batch is
        the sum of its rows' larger time: exact, as the step analysed at each (checked on one more step, and by the
        rounding classes where that check fails)."""
        import numpy as np  # here, as curve_from_two: only the serving planner needs it

        distinct = list(dict.fromkeys(batches))
        moe, pool, q_len = self.arch.moe, self.pool, step["q_len"]
        assert moe is not None  # shares round only where experts split over the worker
        tokens = [pool.attention_data_parallel * b * q_len for b in distinct]
        design = np.array([(1.0, b, *_device_shares(pool.tensor_parallel, moe, w)) for b, w in zip(distinct, tokens,
                                                                                                strict=True)])
        # The design is integers: its rank is no matter of the last bits.
        rank = np.linalg.matrix_rank(design)
        chosen: list[int] = []
        for index in range(len(distinct)):
            if np.linalg.matrix_rank(design[[*chosen, index]]) > len(chosen):
                chosen.append(index)
            if len(chosen) == rank:
                break
        check = next((i for i in range(len(distinct) - 1, -1, -1) if i not in chosen), None)
        if len(distinct) <= len(chosen) + 1 or check is None:
            return [self.time_s(batch=b, **step) for b in batches]
        analysed = [self.evaluate(batch=distinct[i], **step) for i in chosen]
        curve = _rows_through(analysed, design, chosen,
                              _active_experts_per_device(pool, moe, np.array(tokens, dtype=float)),
                              self.evaluator.hbm.bytes_per_s)
        if curve is None or not math.isclose(curve[check], self.time_s(batch=distinct[check], **step), rel_tol=1e-9):
            return self._class_curve(batches, step)
        at = dict(zip(distinct, curve, strict=True))
        return [at[b] for b in batches]

    def _class_curve(self, batches: Sequence[int], step: dict) -> list[float]:
        """The rounded curve by classes: past the batch where every device has a token, the rounding repeats every
        `period` batches, so along each class of batches `period` apart the step is affine but for the experts hit:
        a curve through two of its steps. Below that batch, and in a class holding two batches or fewer, each step is
        analysed."""
        t, tokens_per_batch = self.pool.tensor_parallel, self.pool.attention_data_parallel * step["q_len"]
        period = t // math.gcd(t, tokens_per_batch)
        every_device = -(-t // tokens_per_batch)
        times: dict[int, float] = {}
        classes: dict[int, list[int]] = {}
        for b in dict.fromkeys(batches):
            if b < every_device:
                times[b] = self.time_s(batch=b, **step)
            else:
                classes.setdefault(b % period, []).append(b)
        for members in classes.values():
            low = min(members)
            if len(members) <= 2:
                times.update((b, self.time_s(batch=b, **step)) for b in members)
            else:
                times.update(zip(members, self._curve(members, (low, low + period), step), strict=True))
        return [times[b] for b in batches]


def _rows_through(analysed: list[list[RowResult]], design, chosen: list[int], experts_hit,
                  bandwidth: float) -> list[float] | None:
    """The step at every row of `design` from its rows analysed at the `chosen` rows of it: each row's compute time
    and memory time (a routed row's less its weights, which follow `experts_hit`) solved as affine in the design's
    columns. None where the steps' rows do not line up."""
    import numpy as np

    if len({len(rows) for rows in analysed}) != 1:
        return None
    compute = np.array([[r.compute_time_s for r in rows] for rows in analysed])
    weights = np.array([[r.weight_bytes / bandwidth if r.kind == "grouped_matmul" else 0.0 for r in rows]
                        for rows in analysed])
    memory = np.array([[r.memory_time_s for r in rows] for rows in analysed]) - weights
    instances = np.array([r.instances for r in analysed[0]], dtype=float)
    inverse = np.array(_inverse([tuple(int(v) for v in design[i]) for i in chosen]))
    hit = np.asarray(experts_hit)
    compute_all = _products(design, _products(inverse, compute))
    memory_all = _products(design, _products(inverse, memory)) + np.outer(hit / hit[chosen[0]], weights[0])
    return (np.maximum(compute_all, memory_all) * instances).sum(axis=1).tolist()


# The rounded curves' linear algebra is done so that every machine computes the same bits: a BLAS product's or
# solve's last bits follow the CPU's kernels and the threads it runs on (a plan on a 2-core AVX-512 machine differed
# from one on a single thread), and a plan's choices at an SLO's edge follow those bits. The design is integers, so
# its inverse is exact (fractions); products are sums taken in one order.


def _inverse(rows: list[tuple[int, ...]]) -> list[list[float]]:
    """The (pseudo-)inverse of the spanning rows (k rows, n >= k columns): the least-norm solution's matrix
    A^T (A A^T)^-1, exactly, as floats (n x k)."""
    a = [[Fraction(v) for v in row] for row in rows]
    k = len(a)
    gram = [[sum((x * y for x, y in zip(a[i], a[j], strict=True)), Fraction(0)) for j in range(k)] for i in range(k)]
    # Gauss-Jordan on [gram | I]: gram is symmetric positive definite (the rows are independent).
    work = [gram[i] + [Fraction(int(i == j)) for j in range(k)] for i in range(k)]
    for column in range(k):
        pivot = next(r for r in range(column, k) if work[r][column])
        work[column], work[pivot] = work[pivot], work[column]
        lead = work[column][column]
        work[column] = [v / lead for v in work[column]]
        for r in range(k):
            if r != column and work[r][column]:
                factor = work[r][column]
                work[r] = [v - factor * p for v, p in zip(work[r], work[column], strict=True)]
    gram_inverse = [row[k:] for row in work]
    return [[float(sum((a[m][col] * gram_inverse[m][j] for m in range(k)), Fraction(0))) for j in range(k)]
            for col in range(len(a[0]))]


def _products(left, right):
    """left @ right, its sums taken column by column of `left`, in order (elementwise operations only)."""
    total = left[:, :1] * right[0]
    for j in range(1, left.shape[1]):
        total = total + left[:, j:j + 1] * right[j]
    return total


def _device_shares(devices: int, moe, worker_tokens: int) -> tuple[int, int]:
    """A device's share of an expert-parallel worker's tokens, rounded down and at least 1: (the token rows its
    experts multiply, the tokens it dispatches). The only parts of a step that are not affine in its batch but for
    the experts hit (WorkerStep._rounded_curve)."""
    return max(1, worker_tokens * moe.top_k // devices), max(1, worker_tokens // devices)


def _active_experts_per_device(pool: Pool, moe, tokens):
    """The experts a device of an expert-parallel worker is taken to hit: the mean over its devices (the bound), or
    the busiest device's (Pool.busiest_experts); `tokens` a number or an array of them (curve_from_two)."""
    t = pool.tensor_parallel
    if pool.busiest_experts:
        return busiest_device_experts(tokens, moe.experts, moe.top_k, t)
    return expected_active_experts(tokens, moe.experts, moe.top_k) / t


def _mlp_of(arch: Architecture, pool: Pool, batch: int, q_len: int,
            busy_groups: int | None = None) -> Callable[[Architecture, LayerGroup, Step, ModelDTypes], list[Row]]:
    """The MLP block of a worker's layer: experts whole over its devices, split by width, or gathered over its
    attention groups (the module docstring's layouts); the tokens are those of its `busy_groups` (all its groups
    where None): an idle attention group runs its step with no tokens, adding none to the experts'."""
    t = pool.tensor_parallel
    d = pool.attention_data_parallel if busy_groups is None else busy_groups
    worker_tokens = d * batch * q_len

    def block(_: Architecture, group: LayerGroup, step: Step, dtypes: ModelDTypes) -> list[Row]:
        if group.moe and pool.expert_parallel > 1 and arch.moe is not None:
            moe = arch.moe
            # Where t does not divide the experts, each device holds ceil(E / t): the rest are redundant copies
            # of the busiest experts (SGLang's and DeepEP's load balancer), which read no more per device.
            token_rows, dispatched = _device_shares(t, moe, worker_tokens)
            shard = ExpertShard(token_rows, -(-moe.experts // t), _active_experts_per_device(pool, moe, worker_tokens),
                                moe.expert_intermediate)
            sent = all_to_all_bytes(dispatched, moe.top_k, moe.routed_width(arch.hidden), dtypes.activations, t)
            rows = expert_exchange(mlp_rows(arch, group, step, dtypes, shard), sent)
            return tensor_parallel_block("mlp", rows, arch, step, dtypes)
        if pool.attention_data_parallel > 1:
            gathered = Step(d * batch, q_len, step.kv_len, t, step.attention_implementation)
            buffer = worker_tokens * arch.hidden * bytes_per_element(dtypes.activations) * (t - 1) / t
            return ([Row("mlp_all_gather", "allgather", 1, comm_bytes=buffer)]
                    + mlp_rows(arch, group, gathered, dtypes)
                    + [Row("mlp_reduce_scatter", "reducescatter", 1, comm_bytes=buffer)])
        return mlp_block(arch, group, step, dtypes)

    return block


def _worker_rows(arch: Architecture, pool: Pool, dtypes: ModelDTypes, batch: int, q_len: int, kv_len: int,
                 scored_tokens: int, layers: tuple[LayerGroup, ...] | None,
                 attention_implementation: str, busy_groups: int | None) -> tuple[tuple[str, int, tuple[Row, ...]], ...]:
    step = Step(batch, q_len, kv_len, pool.attention_ranks, attention_implementation, scored_tokens=scored_tokens)
    before, after = model_level_rows(arch, step, dtypes)
    mlp = _mlp_of(arch, pool, batch, q_len, busy_groups)
    return (("model", 1, tuple(before)),
            *((group_label(group), group.count, tuple(layer_rows(arch, group, step, dtypes, mlp)))
              for group in (layers if layers is not None else arch.groups)),
            ("model", 1, tuple(after)))


# A step's rows by its model (by identity) and its shape: the bound's evaluator and the kernel tables' composing one
# read the same rows, and so do the requests and sweep points that repeat a step. Rows are immutable tuples.
worker_rows = ByIdentity(_worker_rows, objects=1, limit=512)


def decode_curves(worker: WorkerStep, batches: Sequence[int], context: int, speculative: Speculative | None,
                  draft_worker: WorkerStep | None = None, busy_groups: int | None = None) -> tuple[list[float], list[float]]:
    """(the decode or verification step, the draft's k steps) at each of `batches` sequences per group, over a
    cache of `context` tokens; `busy_groups`: as WorkerStep.rows."""
    if speculative is None:
        return worker.decode_curve(batches, kv_len=context + 1, busy_groups=busy_groups), [0.0] * len(batches)
    k = speculative.draft_tokens
    verify = worker.decode_curve(batches, q_len=k + 1, kv_len=context + k + 1, scored_tokens=k + 1,
                                 busy_groups=busy_groups)
    if draft_worker is not None:
        draft = draft_worker.decode_curve(batches, kv_len=context + 1, busy_groups=busy_groups)
    else:  # mtp, eagle: one decoder layer like the model's last, with the embedding and the LM head
        draft = worker.decode_curve(batches, kv_len=context + 1, layers=(_one_layer(worker.arch.groups[-1]),),
                                    busy_groups=busy_groups)
    return verify, [k * d for d in draft]


@dataclass(frozen=True)
class PoolState:
    role: str  # aggregated, prefill or decode
    pool: Pool
    batch_per_group: int
    context_len: int  # the longest cache a sequence holds in this pool
    memory: StepMemory


@dataclass(frozen=True)
class ServingBound:
    ttft_s: float
    tpot_s: float
    itl_s: float
    e2e_latency_s: float  # of the mean request, its wait for a place included
    waiting_s: float  # the mean request's time beyond its own steps: a place in a batch, others' prefills
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    devices: int
    running_requests: int  # requests being decoded at once over the deployment; the rest of the concurrency waits
    prefill_s: float  # T_p(1): one request's prefill
    decode_step_s: float  # the verification step where speculative, else T_d
    prefill_share_s: float  # aggregated: T_p(B) / output, the batch's prefills spread over its output tokens; else 0
    draft_s: float  # the k draft steps of one verification (0 without speculative decoding)
    kv_transfer_s: float  # 0 when aggregated
    kv_transfer_bytes: float
    limited_by: str  # what caps requests/s: "decode", "prefill" or "latency" (Little's law)
    pools: tuple[PoolState, ...]


BudgetFor = Callable[[Pool], MemoryBudget]


def pool_weight_bytes(arch: Architecture, dtypes: ModelDTypes, pool: Pool) -> float:
    """Weights on one device: the routed experts split over the worker's t devices (by expert or by width), the
    rest over its attention group's a."""
    a, t = pool.attention_ranks, pool.tensor_parallel
    routed = routed_expert_bytes(arch, dtypes)
    return weight_bytes(arch, dtypes, a) - routed / a + routed / t


def pool_budget(arch: Architecture, dtypes: ModelDTypes, pool: Pool, *, capacity_bytes: float, usable_bytes: float,
                workspace_bytes: float, block_size: int, profile_tokens: int) -> MemoryBudget:
    """One device's memory budget in the pool: its weights, and caches split over its attention group."""
    budget = memory_budget(arch, dtypes, capacity_bytes=capacity_bytes, usable_bytes=usable_bytes,
                           workspace_bytes=workspace_bytes, tensor_parallel=pool.attention_ranks,
                           block_size=block_size, profile_tokens=profile_tokens)
    return replace(budget, weights_bytes=pool_weight_bytes(arch, dtypes, pool))


def _decode(worker: WorkerStep, batch: int, context: int, speculative: Speculative | None,
            draft_worker: WorkerStep | None, busy_groups: int | None) -> tuple[float, float]:
    """(the decode or verification step, the draft's k steps) at `batch` sequences per busy group."""
    verify, draft = decode_curves(worker, [batch], context, speculative, draft_worker, busy_groups)
    return verify[0], draft[0]


def draft_worker_for(speculative: Speculative | None, worker: WorkerStep, dtypes: ModelDTypes | None = None) -> WorkerStep | None:
    """The draft model's worker, laid out as the model's (its experts, if any, as the model's)."""
    if speculative is None or speculative.draft is None:
        return None
    pool = replace(worker.pool, expert_parallel=1 if speculative.draft.moe is None else worker.pool.expert_parallel)
    return WorkerStep(speculative.draft, worker.evaluator, worker.topology, pool, dtypes or worker.dtypes)


def with_draft_weights(budget: MemoryBudget, draft_worker: WorkerStep | None) -> MemoryBudget:
    """The budget with a draft model's weights beside the model's (laid out as its worker), where there is one."""
    if draft_worker is None:
        return budget
    draft = pool_weight_bytes(draft_worker.arch, draft_worker.dtypes, draft_worker.pool)
    return replace(budget, weights_bytes=budget.weights_bytes + draft)


def _one_layer(group: LayerGroup) -> LayerGroup:
    return replace(group, count=1)


def largest_fitting(fits, most: int) -> int:
    """The largest concurrency in 0..most whose step fits (memory grows with it): a bisection."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def busy_attention_groups(concurrency: int, pool: Pool) -> int | None:
    """The attention groups of a worker that have sequences when `concurrency` requests spread over the pool's
    workers: all (None) once every group of the pool has one, else ceil(concurrency / workers). With attention data
    parallelism a worker's idle groups add no tokens to its experts' or its gathered MLP's (SGLang and TensorRT-LLM
    run them with empty batches); counting them as busy charged a 2-request step of a 16-group pool for 16 tokens'
    expert weights."""
    busy = -(-concurrency // pool.workers)
    return None if busy >= pool.attention_data_parallel else busy


def running_batch(concurrency: int, pool: Pool, budget: MemoryBudget, *, context: int, step_tokens: int) -> int:
    """Requests an attention group decodes at once: its share of the concurrency (rounded down, at least 1), at
    most the engine's cap, and at most what its KV cache holds (an engine admits no more; the rest wait)."""
    share = max(1, concurrency // pool.groups)
    if pool.max_batch_per_group is not None:
        share = min(share, pool.max_batch_per_group)
    held = largest_fitting(lambda b: budget.at(batch=b, context=context, step_tokens=b * step_tokens).fits, share)
    return max(1, held)


def analyze_deployment(arch: Architecture, evaluator: Evaluator, topology: Topology, dtypes: ModelDTypes, *,
                       workload: Workload, decode: Pool, prefill: Pool | None, speculative: Speculative | None,
                       budget_for: BudgetFor, block_size: int, kv_link: Link | None,
                       draft_dtypes: ModelDTypes | None = None) -> ServingBound:
    """`prefill` None: aggregated (prefill and decode share the decode pool's devices)."""
    c, isl, osl = workload.concurrency, workload.input_len, workload.output_len
    worker = WorkerStep(arch, evaluator, topology, decode, dtypes)
    draft_worker = draft_worker_for(speculative, worker, draft_dtypes)
    prefill_worker = worker if prefill is None else WorkerStep(arch, evaluator, topology, prefill, dtypes)

    k = speculative.draft_tokens if speculative else 0
    longest = isl + osl - 1 + k
    decode_budget = with_draft_weights(budget_for(decode), draft_worker)
    batch = running_batch(c, decode, decode_budget, context=longest, step_tokens=k + 1)
    running = min(c, batch * decode.groups)
    mean_context = isl + osl // 2
    busy = busy_attention_groups(c, decode)
    step, draft = _decode(worker, batch, mean_context, speculative, draft_worker, busy)
    acceptance = speculative.acceptance_length if speculative else 1.0
    tpot = (step + draft) / acceptance
    first = prefill_worker.time_s(batch=1, q_len=isl, kv_len=isl, busy_groups=1)

    transfer_bytes = transfer_s = 0.0
    if prefill is not None:
        if kv_link is None:
            raise CostModelError("disaggregated", "the device has no link between the pools to move the KV cache over")
        transfer_bytes = kv_bytes_per_request(arch, dtypes, isl, 1, block_size)
        transfer_s = kv_link.latency_s + transfer_bytes / (prefill.attention_ranks * kv_link.bandwidth_bytes_per_s)
    ttft = first + transfer_s
    served = ttft + (osl - 1) * tpot  # a request's time once admitted

    decode_steps = osl / acceptance
    prefill_share = 0.0
    if prefill is None:
        batch_prefill = prefill_worker.time_s(batch=batch, q_len=isl, kv_len=isl, busy_groups=busy)
        prefill_share = batch_prefill / osl
        cycle = decode_steps * (step + draft) + batch_prefill
        rates = {"decode": running / cycle}
    else:
        prefill_batch = max(1, c // prefill.groups)
        batched = prefill_worker.time_s(batch=prefill_batch, q_len=isl, kv_len=isl,
                                        busy_groups=busy_attention_groups(c, prefill))
        rates = {"prefill": prefill.groups * prefill_batch / batched, "decode": running / (osl * tpot)}
    rates["latency"] = c / served
    limited_by = min(rates, key=lambda name: rates[name])
    rate = rates[limited_by]
    # Little's law: c requests in the system at `rate` a second spend c / rate each, on average; what exceeds the
    # time being served is spent waiting: for a place in a batch, or for others' prefills on shared devices.
    e2e = max(served, c / rate)

    pools = [PoolState("aggregated" if prefill is None else "decode", decode, batch, longest,
                       decode_budget.at(batch=batch, context=longest, step_tokens=batch * (k + 1)))]
    if prefill is not None:
        pools.insert(0, PoolState("prefill", prefill, 1, isl, budget_for(prefill).at(batch=1, context=isl, step_tokens=isl)))
    devices = decode.devices + (prefill.devices if prefill else 0)
    return ServingBound(
        ttft_s=ttft, tpot_s=tpot, itl_s=step + draft, e2e_latency_s=e2e, waiting_s=e2e - served,
        requests_per_s=rate, output_tokens_per_s=rate * osl, output_tokens_per_s_per_device=rate * osl / devices,
        tokens_per_s_per_device=rate * (isl + osl) / devices, tokens_per_s_per_user=1 / tpot, devices=devices,
        running_requests=running, prefill_s=first, decode_step_s=step, prefill_share_s=prefill_share, draft_s=draft,
        kv_transfer_s=transfer_s,
        kv_transfer_bytes=transfer_bytes, limited_by=limited_by, pools=tuple(pools))
