"""Expert parallelism in training (Megatron-core's MoE layer with its all-to-all token dispatcher).

`expert_parallel` e splits a MoE layer's routed experts over e ranks drawn from the data- (and context-)
parallel ones: each rank holds E / e experts (their weights, gradients and optimizer states), and the
gradients of its experts are reduced only over the ranks holding the same experts (d c / e of them). Each MoE
layer sends every token's hidden vector to the ranks of its top-k experts and brings the outputs back: a
dispatch and a combine all-to-all in the forward, and their two conjugates in the backward. With tensor
parallelism the experts are split t ways too and the tokens travel as sequence-parallel slices, as Megatron
requires (sequence parallelism on whenever tensor and expert parallelism meet).
"""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.transformer.architecture import Architecture
from service.core.transformer.layers import Row, cost_of, expert_exchange

ROUTED = "grouped_matmul"  # the row kind of the routed experts' projections


def check_expert_parallel(arch: Architecture, expert: int, replicas: int, tensor: int, sequence_parallel: bool) -> None:
    if expert == 1:
        return
    if arch.moe is None:
        raise CostModelError("expert_parallel", "the model has no routed experts to split")
    if arch.moe.experts % expert:
        raise CostModelError("expert_parallel", f"{arch.moe.experts} experts do not split over {expert} ranks")
    if replicas % expert:
        raise CostModelError("expert_parallel", f"{expert} expert-parallel ranks must divide the {replicas} data- "
                                                "and context-parallel ranks they are drawn from")
    if tensor > 1 and not sequence_parallel:
        raise CostModelError("sequence_parallel", "tensor and expert parallelism together need sequence parallelism "
                                                  "(the tokens are dispatched as sequence-parallel slices)")


def all_to_all_bytes(tokens: int, top_k: int, hidden: int, activations: str, expert: int) -> float:
    """Bytes a rank sends in one dispatch (or combine): each of its tokens' hidden vectors, once for each of its
    top-k experts, except the (1/e of them, on balanced routing) that stay on the rank."""
    return tokens * top_k * hidden * bytes_per_element(activations) * (expert - 1) / expert


def expert_parallel_rows(rows: list[Row], arch: Architecture, expert: int, stream_tokens: int,
                         activations: str) -> list[Row]:
    """A layer's rows on one expert-parallel rank: the routed projections read 1/e of the experts' weights
    (balanced routing brings the rank as many token rows as it sends away), with a dispatch all-to-all before
    the experts and a combine after them."""
    if expert == 1 or arch.moe is None or not any(row.kind == ROUTED for row in rows):
        return rows
    sent = all_to_all_bytes(stream_tokens, arch.moe.top_k, arch.moe.routed_width(arch.hidden), activations, expert)
    out: list[Row] = []
    for row in rows:
        if row.kind == ROUTED:
            cost = cost_of(row)
            local = cost.weight_bytes_read / expert
            row = row._replace(params=row.params // expert, cost=cost._replace(
                bytes_read=cost.bytes_read - cost.weight_bytes_read + local, weight_bytes_read=local,
                assumptions=cost.assumptions + (f"expert parallelism over {expert}: this rank's {arch.moe.experts // expert} "
                                                "experts' weights",)))
        out.append(row)
    return expert_exchange(out, sent)
