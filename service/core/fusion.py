"""Kernel fusion over a small dataflow graph of operators.

Unfused, every operator is its own kernel: it reads all its inputs and writes all its outputs in HBM.
Fused, a group is one kernel: it reads only the tensors that come from outside the group (once each)
and writes only the tensors used outside it (or that nobody in the graph consumes: the outputs).
Parameters an operator reads beyond its declared tensors (norm weights, RoPE tables) are read either way.
A group holds at most one matrix operator (matmul, grouped matmul or attention); the other operators fuse
into its prologue or epilogue. A group must be connected and convex (no path leaves it and comes back).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError

ANCHORS = frozenset({"matmul", "grouped_matmul", "attention"})
UNFUSABLE = frozenset({"embedding"})
INDEX_DTYPES = frozenset({"int32", "int64"})


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> float:
        return self.elements * bytes_per_element(self.dtype)


@dataclass(frozen=True)
class GraphOp:
    name: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _fail(where: str, reason: str):
    raise CostModelError(where, reason)


def _broadcast(shapes: list[tuple[int, ...]], where: str) -> tuple[int, ...]:
    width = max(len(s) for s in shapes)
    result = []
    for axis in range(width):
        sizes = {s[axis - width + len(s)] for s in shapes if axis - width + len(s) >= 0} - {1}
        if len(sizes) > 1:
            _fail(where, f"input shapes {[list(s) for s in shapes]} do not broadcast together")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def infer_fields(op: GraphOp, tensors: Mapping[str, Tensor], where: str) -> dict:
    """The operator's own fields, read off the shapes and dtypes of the tensors it reads and writes."""
    ins = [tensors[name] for name in op.inputs]
    outs = [tensors[name] for name in op.outputs]

    def expect(count_in: Sequence[int], count_out: int = 1):
        if len(ins) not in count_in or len(outs) != count_out:
            _fail(f"{where}.inputs", f"{op.kind} takes {' or '.join(map(str, count_in))} input(s) and {count_out} output(s)")

    def same_shape(shape: tuple[int, ...]):
        if outs[0].shape != shape:
            _fail(f"{where}.outputs", f"output {outs[0].name} has shape {list(outs[0].shape)}, expected {list(shape)}")

    kind = op.kind
    if kind == "elementwise":
        expect(range(1, 17))
        same_shape(_broadcast([t.shape for t in ins], f"{where}.inputs"))
        return {"shape": list(outs[0].shape), "dtype": ins[0].dtype, "arity": len(ins), "out_dtype": outs[0].dtype}
    if kind in ("layernorm", "rmsnorm"):
        expect((1, 2, 3) if kind == "layernorm" else (1, 2))
        x = ins[0]
        same_shape(x.shape)
        for param in ins[1:]:
            if param.shape != x.shape[-1:]:
                _fail(f"{where}.inputs", f"parameter {param.name} must have shape [{x.shape[-1]}]")
        fields = {"shape": list(x.shape), "dtype": x.dtype, "elementwise_affine": len(ins) > 1}
        if len(ins) > 1:
            fields["param_dtype"] = ins[1].dtype
        if kind == "layernorm":
            fields["bias"] = len(ins) > 2
        return fields
    if kind == "softmax":
        expect((1,))
        same_shape(ins[0].shape)
        return {"shape": list(ins[0].shape), "dtype": ins[0].dtype}
    if kind == "rope":
        expect((1,))
        x = ins[0]
        if len(x.shape) != 4:
            _fail(f"{where}.inputs", "rope input must be [batch, seq_len, heads, head_dim]")
        same_shape(x.shape)
        return dict(zip(("batch", "seq_len", "heads", "head_dim"), x.shape)) | {"dtype": x.dtype}
    if kind == "matmul":
        expect((2, 3))
        a, b = ins[0], ins[1]
        if len(a.shape) < 2 or len(b.shape) not in (2, 3):
            _fail(f"{where}.inputs", "matmul takes A [..., m, k] and B [k, n] or [batch, k, n]")
        if a.shape[-1] != b.shape[-2]:
            _fail(f"{where}.inputs", f"inner dimensions differ: A {list(a.shape)} and B {list(b.shape)}")
        n, k = b.shape[-1], a.shape[-1]
        same_shape(a.shape[:-1] + (n,))
        if len(b.shape) == 3:
            if len(a.shape) != 3 or a.shape[0] != b.shape[0]:
                _fail(f"{where}.inputs", "a batched B [batch, k, n] needs A [batch, m, k] of the same batch")
            fields = {"m": a.shape[1], "batch": a.shape[0], "weight_shared": False}
        else:
            fields = {"m": math.prod(a.shape[:-1])}
        if len(ins) == 3 and ins[2].shape != (n,):
            _fail(f"{where}.inputs", f"bias {ins[2].name} must have shape [{n}]")
        return fields | {"n": n, "k": k, "bias": len(ins) == 3, "a_dtype": a.dtype, "b_dtype": b.dtype,
                         "c_dtype": outs[0].dtype}
    if kind == "grouped_matmul":
        expect((2,))
        a, w = ins
        if len(a.shape) != 2 or len(w.shape) != 3 or a.shape[1] != w.shape[1]:
            _fail(f"{where}.inputs", "grouped_matmul takes rows [rows, k] and weights [experts, k, n]")
        same_shape((a.shape[0], w.shape[2]))
        return {"n": w.shape[2], "k": a.shape[1], "a_dtype": a.dtype, "b_dtype": w.dtype, "c_dtype": outs[0].dtype,
                "experts": w.shape[0], "rows": a.shape[0]}
    if kind == "attention":
        expect((3,))
        q, k, v = ins
        if not (len(q.shape) == len(k.shape) == len(v.shape) == 4) or q.shape[0] != k.shape[0] \
                or k.shape[:3] != v.shape[:3] or q.shape[3] != k.shape[3]:
            _fail(f"{where}.inputs", "attention takes Q [b, heads, q, d], K [b, kv_heads, n, d], V [b, kv_heads, n, dv]")
        same_shape(q.shape[:3] + (v.shape[3],))
        return {"batch": q.shape[0], "heads": q.shape[1], "kv_heads": k.shape[1], "q_len": q.shape[2],
                "kv_len": k.shape[2], "head_dim": q.shape[3], "v_head_dim": v.shape[3], "dtype": q.dtype,
                "kv_dtype": k.dtype}
    if kind == "embedding":
        expect((2,))
        ids, table = ins
        if len(ids.shape) != 1 or len(table.shape) != 2 or ids.dtype not in INDEX_DTYPES:
            _fail(f"{where}.inputs", "embedding takes int32/int64 ids [tokens] and a table [vocab, hidden]")
        same_shape((ids.shape[0], table.shape[1]))
        return {"tokens": ids.shape[0], "hidden": table.shape[1], "vocab": table.shape[0], "dtype": table.dtype,
                "index_dtype": ids.dtype}
    _fail(f"{where}.kind", f"operator kind {kind!r} cannot take part in a fusion graph")


def check_graph(ops: Sequence[GraphOp], tensors: Mapping[str, Tensor]) -> dict[str, str]:
    """Producer of each produced tensor; refuses undefined tensors, double producers and cycles."""
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
    # Kahn's algorithm: whatever cannot be ordered sits on a cycle.
    consumers = {op.name: [] for op in ops}
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
    return producer


def check_group(group: Sequence[str], index: int, ops: Mapping[str, GraphOp], producer: Mapping[str, str]) -> None:
    where = f"groups.{index}"
    members = set(group)
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
    edges: dict[str, set[str]] = {name: set() for name in ops}
    for op in ops.values():
        for tensor in op.inputs:
            if tensor in producer:
                edges[producer[tensor]].add(op.name)
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
    # Convex: nothing reachable from the group through an outside operator leads back into it.
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
