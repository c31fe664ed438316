"""Kernel fusion over a small dataflow graph of operators.

Unfused, every operator is its own kernel: it reads all its inputs and writes all its outputs in HBM.
Fused, a group is one kernel: it reads only the tensors that come from outside the group (once each)
and writes only the tensors used outside it (or that nobody in the graph consumes: the outputs).
Parameters an operator reads beyond its declared tensors (norm weights, RoPE tables) are read either way.
A group holds at most one matrix operator (matmul, grouped matmul or attention); the other operators fuse
into its prologue or epilogue. A group must be connected and convex (no path leaves it and comes back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from service.core.errors import CostModelError
from service.core.operators.kind import Tensor, Wiring
from service.core.operators.registry import OPERATORS, kinds_with

__all__ = ["Tensor", "GraphOp", "infer_fields", "check_graph", "check_group", "unfused_traffic", "fused_traffic"]

ANCHORS = kinds_with(fusion_role="matrix")
UNFUSABLE = kinds_with(fusion_role="alone")


@dataclass(frozen=True)
class GraphOp:
    name: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _fail(where: str, reason: str) -> NoReturn:
    raise CostModelError(where, reason)


def infer_fields(op: GraphOp, tensors: Mapping[str, Tensor], where: str) -> dict:
    """The operator's own fields, read off the shapes and dtypes of the tensors it reads and writes (each kind's
    descriptor knows how)."""
    kind = OPERATORS.get(op.kind)
    if kind is None or kind.fusion_fields is None:
        _fail(f"{where}.kind", f"operator kind {op.kind!r} cannot take part in a fusion graph")
    wiring = Wiring(op.kind, [tensors[name] for name in op.inputs], [tensors[name] for name in op.outputs], where)
    return kind.fusion_fields(wiring)


def check_graph(ops: Sequence[GraphOp], tensors: Mapping[str, Tensor]) -> dict[str, str]:
    """Producer of each produced tensor; refuses undefined tensors, double producers and cycles."""
    producer = _producers(ops, tensors)
    _check_acyclic(ops, producer)
    return producer


def _producers(ops: Sequence[GraphOp], tensors: Mapping[str, Tensor]) -> dict[str, str]:
    producer: dict[str, str] = {}
    names = set()
    for index, op in enumerate(ops):
        if op.name in names:
            _fail(f"ops.{index}.name", f"operator name {op.name!r} is used twice")
        names.add(op.name)
        for side in ("inputs", "outputs"):
            for position, tensor in enumerate(getattr(op, side)):
                if tensor not in tensors:
                    _fail(f"ops.{index}.{side}.{position}", f"tensor {tensor!r} is not defined under tensors")
        for tensor in op.outputs:
            if tensor in producer:
                _fail(f"ops.{index}.outputs", f"tensor {tensor!r} is written by both {producer[tensor]!r} and {op.name!r}")
            producer[tensor] = op.name
    return producer


def _check_acyclic(ops: Sequence[GraphOp], producer: Mapping[str, str]) -> None:
    """Kahn's algorithm: whatever cannot be ordered sits on a cycle."""
    consumers: dict[str, list[str]] = {op.name: [] for op in ops}
    waiting = {op.name: 0 for op in ops}
    for op in ops:
        for tensor in set(op.inputs):
            if tensor in producer:
                consumers[producer[tensor]].append(op.name)
                waiting[op.name] += 1
    ready = [name for name, count in waiting.items() if count == 0]
    while ready:
        name = ready.pop()
        for consumer in consumers[name]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                ready.append(consumer)
    cyclic = sorted(name for name, count in waiting.items() if count > 0)
    if cyclic:
        _fail("ops", f"the graph has a cycle through {', '.join(cyclic)}")


def check_group(group: Sequence[str], index: int, ops: Mapping[str, GraphOp], producer: Mapping[str, str]) -> None:
    where = f"groups.{index}"
    _check_members(group, where, ops)
    edges: dict[str, set[str]] = {name: set() for name in ops}
    for op in ops.values():
        for tensor in op.inputs:
            if tensor in producer:
                edges[producer[tensor]].add(op.name)
    _check_connected(group, where, edges)
    _check_convex(set(group), where, edges)


def _check_members(group: Sequence[str], where: str, ops: Mapping[str, GraphOp]) -> None:
    """Known operators, at most one matrix operator, and a gather only alone."""
    unknown = [name for name in group if name not in ops]
    if unknown:
        _fail(where, f"unknown operator(s) {', '.join(unknown)}")
    anchors = [name for name in group if ops[name].kind in ANCHORS]
    if len(anchors) > 1:
        _fail(where, f"cannot be one kernel: {', '.join(anchors)} are all matrix operators (at most one per group)")
    if len(group) > 1:
        lonely = [name for name in group if ops[name].kind in UNFUSABLE]
        if lonely:
            _fail(where, f"cannot be one kernel: {', '.join(lonely)} (a gather) does not fuse with other operators")


def _check_connected(group: Sequence[str], where: str, edges: Mapping[str, set[str]]) -> None:
    members = set(group)
    neighbours = {name: {n for n in edges[name] if n in members} | {p for p in members if name in edges[p]}
                  for name in members}
    seen, stack = set(), [group[0]]
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(neighbours[name] - seen)
    if seen != members:
        _fail(where, f"cannot be one kernel: {', '.join(sorted(members - seen))} not connected to {group[0]}")


def _check_convex(members: set[str], where: str, edges: Mapping[str, set[str]]) -> None:
    """Nothing reachable from the group through an outside operator leads back into it."""
    outside = {n for m in members for n in edges[m] if n not in members}
    stack, visited = list(outside), set()
    while stack:
        name = stack.pop()
        if name in visited:
            continue
        visited.add(name)
        for nxt in edges[name]:
            if nxt in members:
                _fail(where, f"cannot be one kernel: {nxt} depends on the group through {name}, outside it")
            stack.append(nxt)


@dataclass(frozen=True)
class KernelTraffic:
    name: str
    bytes_read: float
    bytes_written: float


def _internal_writes(op: GraphOp, tensors: Mapping[str, Tensor], cost_bytes_written: float) -> float:
    """What the operator's own algorithm writes beyond its declared outputs (naive attention's S and P),
    which no fusion removes."""
    return max(0.0, cost_bytes_written - sum(tensors[t].bytes for t in set(op.outputs)))


def unfused_traffic(op: GraphOp, tensors: Mapping[str, Tensor], cost_bytes_read: float,
                    cost_bytes_written: float) -> KernelTraffic:
    """An operator alone: its declared inputs (the table rows an embedding gathers), parameters and
    intermediates it reads beyond them, its outputs and the intermediates it writes."""
    declared = sum(tensors[t].bytes for t in set(op.inputs))
    reads = cost_bytes_read if op.kind in UNFUSABLE else declared + max(0.0, cost_bytes_read - declared)
    writes = sum(tensors[t].bytes for t in set(op.outputs)) + _internal_writes(op, tensors, cost_bytes_written)
    return KernelTraffic(op.name, reads, writes)


def fused_traffic(group: Sequence[str], ops: Mapping[str, GraphOp], tensors: Mapping[str, Tensor],
                  cost_bytes_read: Mapping[str, float], cost_bytes_written: Mapping[str, float]) -> KernelTraffic:
    members = set(group)
    produced = {t for name in group for t in ops[name].outputs}
    consumed_outside = {t for op in ops.values() if op.name not in members for t in op.inputs}
    consumed_anywhere = {t for op in ops.values() for t in op.inputs}
    external = {t for name in group for t in ops[name].inputs if t not in produced}
    params = internal = 0.0
    for name in group:
        op = ops[name]
        declared = sum(tensors[t].bytes for t in set(op.inputs))
        if op.kind in UNFUSABLE:  # alone in its group: the gather reads only the rows it needs
            return unfused_traffic(op, tensors, cost_bytes_read[name], cost_bytes_written[name])
        params += max(0.0, cost_bytes_read[name] - declared)
        internal += _internal_writes(op, tensors, cost_bytes_written[name])
    written = {t for t in produced if t in consumed_outside or t not in consumed_anywhere}
    return KernelTraffic("+".join(group), sum(tensors[t].bytes for t in external) + params,
                         sum(tensors[t].bytes for t in written) + internal)
