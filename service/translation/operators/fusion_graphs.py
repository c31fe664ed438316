"""The fusion endpoint's translation: graph in, operator costs through the same models as the
operator endpoint, unfused and fused traffic from the core, times at the roofs asked for."""

from __future__ import annotations

from collections import Counter

from pydantic import TypeAdapter, ValidationError

from schemas.fusion import FusionAnalysis, FusionRequest, FusionSavings, FusionSide, KernelCost
from schemas.operators import Operator
from service.core import fusion
from service.core.errors import CostModelError
from service.core.operators import operator_cost
from service.core.roofline import analyze
from service.core.roofs import RoofMode
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import Unprocessable, cost_model_error, invalid_nested
from service.translation.operators.analyses import operator_fields

OPERATOR = TypeAdapter(Operator)
GRAPH_KEYS = {"name", "kind", "inputs", "outputs"}


def _validated_operator(index: int, op, inferred: dict):
    explicit = dict((op.model_extra or {}).items())
    if op.kind == "grouped_matmul":
        experts, rows = inferred.pop("experts"), inferred.pop("rows")
        tokens = explicit.get("tokens_per_expert")
        if not isinstance(tokens, list) or len(tokens) != experts or sum(t for t in tokens if isinstance(t, int)) != rows:
            raise Unprocessable("tokens_per_expert must list one count per expert, summing to the rows",
                                [{"loc": f"body.ops.{index}.tokens_per_expert",
                                  "msg": f"needs {experts} counts summing to {rows}"}])
    try:
        return OPERATOR.validate_python({**inferred, **explicit, "kind": op.kind})
    except ValidationError as exc:
        raise invalid_nested(exc, ["body", "ops", str(index)], skip=1) from None


def _checked_groups(request: FusionRequest, graph: list[fusion.GraphOp], tensors: dict) -> list[list[str]]:
    """The groups to fuse (every operator no group names is a kernel of its own), refused unless each could be
    one kernel."""
    by_name = {op.name: op for op in graph}
    producer = fusion.check_graph(graph, tensors)
    groups = request.groups if request.groups is not None else [[op.name for op in graph]]
    grouped = [name for group in groups for name in group]
    repeated = sorted(name for name, times in Counter(grouped).items() if times > 1)
    if repeated:
        raise CostModelError("groups", f"operator(s) {', '.join(repeated)} appear more than once in the groups")
    for index, group in enumerate(groups):
        if not group:
            raise CostModelError(f"groups.{index}", "a group needs at least one operator")
        fusion.check_group(group, index, by_name, producer)
    return groups + [[op.name] for op in graph if op.name not in set(grouped)]


def _operator_costs(request: FusionRequest, graph: list[fusion.GraphOp], inferred: list[dict], device, measured,
                    mode: RoofMode):
    """(cost and compute time of each operator by name, the HBM roof they were placed on)."""
    costs, compute_times = {}, {}
    hbm = None
    for index, (op, graph_op) in enumerate(zip(request.ops, graph)):
        operator = _validated_operator(index, op, inferred[index])
        try:
            cost = operator_cost(operator.kind, **operator_fields(operator, device))
            result = analyze(cost, device, measured=measured, mode=mode, sustained_clock_hz=request.sustained_clock_hz)
        except CostModelError as exc:
            raise cost_model_error(exc, f"body.ops.{index}") from None
        costs[graph_op.name] = cost
        compute_times[graph_op.name] = result.compute_time_s
        hbm = next(level.roof for level in result.levels if level.roof.level == "hbm")
    return costs, compute_times, hbm


def analyze_fusion(request: FusionRequest, catalog: DeviceCatalog) -> FusionAnalysis:
    device = catalog.get(request.device_id)
    measured, mode = catalog.measured(device.id), RoofMode(request.roofs)
    tensors = {name: fusion.Tensor(name, tuple(t.shape), t.dtype) for name, t in request.tensors.items()}
    graph = [fusion.GraphOp(op.name or f"op{i}", op.kind, tuple(op.inputs), tuple(op.outputs))
             for i, op in enumerate(request.ops)]
    by_name = {op.name: op for op in graph}
    try:
        groups = _checked_groups(request, graph, tensors)
        inferred = [fusion.infer_fields(op, tensors, f"ops.{i}") for i, op in enumerate(graph)]
    except CostModelError as exc:
        raise cost_model_error(exc, "body") from None
    costs, compute_times, hbm = _operator_costs(request, graph, inferred, device, measured, mode)

    def kernel(names: list[str], traffic: fusion.KernelTraffic) -> KernelCost:
        compute = sum(compute_times[n] for n in names)
        memory = (traffic.bytes_read + traffic.bytes_written) / hbm.bytes_per_s
        return KernelCost(name=traffic.name, kinds=[by_name[n].kind for n in names],
                          flops=sum(costs[n].flops for n in names), bytes_read=traffic.bytes_read,
                          bytes_written=traffic.bytes_written, time_s=max(compute, memory))

    overhead = request.launch_overhead_s if request.launch_overhead_s is not None else device.launch_overhead_s
    unfused = [kernel([op.name], fusion.unfused_traffic(op, tensors, costs[op.name].bytes_read, costs[op.name].bytes_written))
               for op in graph]
    fused = [kernel(group, fusion.fused_traffic(group, by_name, tensors, {n: costs[n].bytes_read for n in group},
                                                {n: costs[n].bytes_written for n in group}))
             for group in groups]
    before, after = _side(unfused, overhead), _side(fused, overhead)
    return FusionAnalysis(
        device_id=device.id, unfused=before, fused=after, launch_overhead_s=overhead,
        savings=FusionSavings(bytes=before.bytes - after.bytes,
                              fraction=(before.bytes - after.bytes) / before.bytes if before.bytes else 0.0,
                              time_s=before.time_s - after.time_s, launches=before.launches - after.launches,
                              launch_time_s=(before.launches - after.launches) * overhead),
        assumptions=[
            "unfused: each operator is a kernel reading all its input tensors and writing its outputs in HBM",
            "fused: a group reads the tensors produced outside it once each and writes the tensors used outside it "
            "(or consumed by no operator); parameters beyond the declared tensors (norm weights, RoPE tables) are "
            "read, and an operator's own intermediates (naive attention's S and P) written and read, either way",
            "kernel time: max(sum of its operators' compute times at their own roofs, its bytes / HBM roof)",
            f"hbm roof: {hbm.source} {hbm.bytes_per_s:.4g} bytes/s; launch overhead {overhead:.3g} s per kernel",
        ],
    )


def _side(kernels: list[KernelCost], overhead: float) -> FusionSide:
    read = sum(k.bytes_read for k in kernels)
    written = sum(k.bytes_written for k in kernels)
    return FusionSide(bytes=read + written, bytes_read=read, bytes_written=written, launches=len(kernels),
                      time_s=sum(k.time_s for k in kernels), launch_time_s=len(kernels) * overhead, kernels=kernels)
