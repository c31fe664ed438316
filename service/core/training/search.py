"""The fastest way to lay a training step out on a number of devices: every combination of tensor, context,
pipeline (with each schedule), expert and data parallelism that divides the devices and the global batch,
sequence parallelism whenever tensor parallelism is on, without recomputation or with full recomputation when
that is what it takes to fit, each placed on the roofline and ranked by step time among those that fit.

The global batch is held fixed (its tokens per step), so that layouts are compared on the same work: more
data-parallel replicas mean fewer micro-batches each.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from service.core import budget
from service.core.errors import CostModelError
from service.core.training.collectives import Topology
from service.core.training.schedules import Schedule
from service.core.training.step import Parallelism, TrainingSetup, TrainingStep, analyze_training
from service.core.transformer.analysis import Evaluator
from service.core.transformer.architecture import Architecture

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64)
MAX_LAYOUTS = 2048  # layouts placed per search: a bound on the work one request can buy (about 0.5 ms each)


@dataclass(frozen=True)
class Layout:
    parallelism: Parallelism
    schedule: Schedule
    micro_batches: int


@dataclass(frozen=True)
class Placed:
    layout: Layout
    recompute: str
    step: TrainingStep


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Placed, ...]  # the layouts that fit, fastest first
    faster_unfitting: Placed | None  # the fastest layout of all when it does not fit (memory is what binds)
    least_memory: Placed | None  # when nothing fits: the layout that comes closest
    searched: int  # layouts placed on the roofline
    refused: int  # layouts the model cannot take (heads, experts, lengths that do not divide)


def _schedules(stages: int, layers: int) -> Iterator[Schedule]:
    yield Schedule()
    if stages > 1:
        yield Schedule("zero_bubble")
        if 2 * stages <= layers:
            yield Schedule("interleaved", 2)


def _model_splits(node_size: int, seq_len: int, layers: int) -> Iterator[tuple[int, int, int]]:
    """(tensor, context, pipeline): tensor parallelism within a node, context parallelism where the sequence
    splits into 2c chunks, pipelines no deeper than the layers."""
    for tensor in (t for t in POWERS_OF_TWO if t <= node_size):
        for context in (c for c in POWERS_OF_TWO if c == 1 or seq_len % (2 * c) == 0):
            for pipeline in (p for p in POWERS_OF_TWO if p <= layers):
                yield tensor, context, pipeline


def layouts(arch: Architecture, devices: int, node_size: int, seq_len: int, micro_batch_size: int,
            global_sequences: int, sharding: Parallelism) -> Iterator[Layout]:
    """Every layout of `devices` that divides the global batch, with expert parallelism over the replicas for a
    MoE model; ZeRO as `sharding` has it."""
    experts = arch.moe.experts if arch.moe else 1
    for tensor, context, pipeline in _model_splits(node_size, seq_len, arch.layers):
        data, left = divmod(devices, tensor * context * pipeline)
        if left or not data or global_sequences % (data * micro_batch_size):
            continue
        micro_batches = global_sequences // (data * micro_batch_size)
        for expert in (e for e in POWERS_OF_TWO if experts % e == 0 and (data * context) % e == 0):
            parallelism = replace(sharding, data=data, tensor=tensor, pipeline=pipeline, sequence_parallel=tensor > 1,
                                  context=context, expert=expert)
            for schedule in _schedules(pipeline, arch.layers):
                yield Layout(parallelism, schedule, micro_batches)


def search_layouts(arch: Architecture, evaluator: Evaluator, topology: Topology, base: TrainingSetup,
                   devices: int, global_sequences: int, top_n: int) -> SearchResult:
    """`base` gives what every layout shares (sequence, micro-batch, dtypes, optimizer, ZeRO stage, memory)."""
    node = topology.node_size
    fitting: list[Placed] = []
    fastest: Placed | None = None
    closest: Placed | None = None
    searched = refused = 0
    for layout in layouts(arch, devices, node, base.seq_len, base.micro_batch_size, global_sequences,
                          base.parallelism):
        if searched + refused >= MAX_LAYOUTS:
            break
        budget.check()
        placed = None
        for recompute in ("none", "full"):
            setup = replace(base, parallelism=layout.parallelism, schedule=layout.schedule,
                            gradient_accumulation_steps=layout.micro_batches, recompute=recompute)
            try:
                step = analyze_training(arch, evaluator, topology, setup)
            except CostModelError:
                refused += 1
                break
            placed = Placed(layout, recompute, step)
            if fastest is None or step.step_time_s < fastest.step.step_time_s:
                fastest = placed
            if step.memory.fits:
                break
        if placed is None:
            continue
        searched += 1
        if placed.step.memory.fits:
            fitting.append(placed)
        elif closest is None or placed.step.memory.required_bytes < closest.step.memory.required_bytes:
            closest = placed
    fitting.sort(key=lambda p: p.step.step_time_s)
    faster = fastest if fastest is not None and not fastest.step.memory.fits else None
    return SearchResult(tuple(fitting[:top_n]), faster, None if fitting else closest, searched, refused)
