"""The rows of a training step: the forward of one micro-batch, its backward (activation and weight
gradients), the forward recomputed for the backward, and the optimizer's update.

Counting conventions (docs/training.md gives the reasoning):
- forward: the prefill rows of the inference model over micro_batch x seq_len tokens, without a KV-cache
  write, with the LM head over every token and a cross-entropy (a softmax) over its logits;
- a matmul's backward is two matmuls of its forward's FLOPs: the activation gradient dX = dY W^T (reads dY
  and W, writes dX) and the weight gradient dW = X^T dY (reads dY and X, writes dW in the gradients' type,
  reading it too when micro-batches accumulate into it);
- attention's backward costs twice its forward, FLOPs and bytes (the four matmuls of dQ, dK, dV and dP,
  as PyTorch's FLOP counter counts them; a flash kernel's internal recomputation of the scores is in
  neither model nor hardware FLOPs);
- a residual add's backward is one add of gradients (its forward's cost); any other row's backward does
  twice its forward's FLOPs, reads its inputs and the output gradient and writes the input gradients;
- model FLOPs are forward + backward; hardware FLOPs add the recomputed forward.
"""

from __future__ import annotations

from typing import NamedTuple

from service.core.dtypes import bytes_per_element
from service.core.hardware import Unit
from service.core.operators import attention_cost, softmax_cost
from service.core.operators.attention import SOFTMAX_FLOPS_PER_SCORE, causal_pairs
from service.core.operators.base import OperatorCost
from service.core.operators.registry import OPERATORS
from service.core.training.fp8 import QUANTIZE
from service.core.transformer.architecture import Architecture, LayerGroup
from service.core.transformer.layers import (
    ModelDTypes,
    Row,
    Step,
    attention_params_of,
    cost_of,
    layer_rows,
    linear_cost,
    model_level_rows,
)

FORWARD, BACKWARD_ACTIVATION, BACKWARD_WEIGHT, RECOMPUTE, OPTIMIZER = (
    "forward", "backward_activation", "backward_weight", "recompute", "optimizer")
# Per parameter and update: Adam's two moment updates (3 and 4 FLOPs), the step m / (sqrt(v) + eps) x lr
# (5); AdamW adds the decoupled weight decay (2); SGD with momentum: buf = mu buf + g, p -= lr buf.
OPTIMIZER_FLOPS_PER_PARAMETER = {"adamw": 14, "adam": 12, "sgd_momentum": 4, "sgd": 2}
OPTIMIZER_STATES_PER_PARAMETER = {"adamw": 2, "adam": 2, "sgd_momentum": 1, "sgd": 0}
LOGSUMEXP_BYTES = 4  # per query and head: the fp32 softmax statistics a flash forward keeps for its backward


class PhasedRow(NamedTuple):
    phase: str
    row: Row


def forward_layer_rows(arch: Architecture, group: LayerGroup, step: Step, dtypes: ModelDTypes) -> list[Row]:
    return [row for row in layer_rows(arch, group, step, dtypes) if row.name != "kv_cache_write"]


def context_parallel_rows(rows: list[Row], seq_len: int, context: int) -> list[Row]:
    """One device's share of a layer under context parallelism: the other rows were built on its seq_len / c
    tokens; its attention is rebuilt. Megatron cuts the sequence into 2c chunks and gives rank i chunks i and
    2c - 1 - i, so each rank's queries see an equal share of the causal pairs: the FLOPs are the whole sequence's
    over c. The ring brings every other rank's K and V through, so its queries (at the end of the sequence, the
    least a rank can read) read all the keys they can see; it keeps only its own Q, K and V for the backward."""
    if context == 1:
        return rows
    rebuilt = []
    for row in rows:
        if row.kind != "attention":
            rebuilt.append(row)
            continue
        local = attention_params_of(row)
        whole = attention_cost(**{**local, "q_len": seq_len, "kv_len": seq_len})
        ring = attention_cost(**{**local, "q_len": local["q_len"], "kv_len": seq_len})
        cost = ring._replace(flops=whole.flops / context, assumptions=ring.assumptions + (
            f"context parallelism over {context}: the whole sequence's attention FLOPs over {context} (load-balanced "
            "causal chunks); the ring's K and V read as they arrive",))
        rebuilt.append(row._replace(cost=cost))
    return rebuilt


def kv_ring_buffer_bytes(rows: list[Row], activations: str) -> float:
    """The K and V a rank passes on at each step of a context-parallel ring, per layer: its attention rows' own keys."""
    s = bytes_per_element(activations)
    total = 0.0
    for row in rows:
        if row.kind == "attention":
            params = attention_params_of(row)
            widths = params["head_dim"] + (params.get("v_head_dim") or params["head_dim"])
            total += row.count * params.get("batch", 1) * (params.get("kv_heads") or params["heads"]) \
                * params["kv_len"] * widths * s
    return total


def forward_model_rows(arch: Architecture, step: Step, dtypes: ModelDTypes) -> tuple[list[Row], list[Row]]:
    """(rows of the first stage before the layers, rows of the last stage after them)."""
    before, after = model_level_rows(arch, step, dtypes)
    vocab = arch.vocab // step.tensor_parallel
    head_dtypes = dtypes.head(arch.tied_embeddings)
    head = [after[0],  # the final norm
            Row("lm_head", "matmul", 1, linear_cost(step.tokens, vocab, arch.hidden, head_dtypes)),
            Row("cross_entropy", "softmax", 1, softmax_cost(shape=[step.tokens, vocab], dtype=dtypes.activations))]
    return before, head


def _cost(like: OperatorCost, flops: float, read: float, written: float, note: str, weights: float = 0.0) -> OperatorCost:
    return OperatorCost(like.kind, flops, read, written, like.compute_dtype, like.unit, (note,), weight_bytes_read=weights)


def backward_rows(row: Row, gradient_ratio: float, accumulate: bool, frozen: bool = False) -> list[PhasedRow]:
    """The backward of one forward row. gradient_ratio: bytes per gradient element over bytes per parameter;
    frozen: a matmul whose weights do not train computes its input gradient only."""
    if row.is_comm:
        # Megatron's conjugate: the all-reduce after a row-parallel layer in the forward is one before the
        # column-parallel layer in the backward, of the same [tokens, hidden] gradient.
        return [PhasedRow(BACKWARD_ACTIVATION, row._replace(name=f"{row.name}.backward"))]
    cost = cost_of(row)
    backward = OPERATORS[row.kind].backward
    if backward == "matmul":
        weights, outputs = cost.weight_bytes_read, cost.bytes_written
        inputs = cost.bytes_read - weights
        gradients = weights * gradient_ratio
        dgrad = _cost(cost, cost.flops, outputs + weights, inputs, "dX = dY W^T: reads dY and W, writes dX", weights)
        if frozen:
            return [PhasedRow(BACKWARD_ACTIVATION, Row(f"{row.name}.dgrad", row.kind, row.count, dgrad))]
        wgrad = _cost(cost, cost.flops, outputs + inputs + (gradients if accumulate else 0.0), gradients,
                      "dW = X^T dY: reads dY and X, writes dW" + (" (accumulated: read too)" if accumulate else ""))
        return [PhasedRow(BACKWARD_ACTIVATION, Row(f"{row.name}.dgrad", row.kind, row.count, dgrad)),
                PhasedRow(BACKWARD_WEIGHT, Row(f"{row.name}.wgrad", row.kind, row.count, wgrad))]
    if backward == "attention":
        gradient = _cost(cost, 2 * cost.flops, cost.bytes_read + 2 * cost.bytes_written, cost.bytes_read,
                         "attention backward: reads Q, K, V, O and dO, writes dQ, dK, dV; twice the forward's FLOPs")
    elif row.name.endswith("residual"):
        gradient = _cost(cost, cost.flops, cost.bytes_read, cost.bytes_written,
                         "residual backward: the branch's gradient added to the stream's")
    else:
        gradient = _cost(cost, 2 * cost.flops, cost.bytes_read + cost.bytes_written, cost.bytes_read,
                         "backward: reads the inputs and dY, writes the input gradients; twice the forward's FLOPs")
    return [PhasedRow(BACKWARD_ACTIVATION, Row(f"{row.name}.backward", row.kind, row.count, gradient))]


def attention_scores_row(row: Row, activations: str) -> Row:
    """What selective recomputation reruns in the backward of naive attention: QK^T and the softmax, reading
    Q and K and writing the probabilities P again."""
    params = attention_params_of(row)
    pairs = (causal_pairs(params["q_len"], params["kv_len"], params.get("window")) if params.get("causal")
             else params["q_len"] * params["kv_len"])
    flops = params.get("batch", 1) * params["heads"] * pairs * (2 * params["head_dim"] + SOFTMAX_FLOPS_PER_SCORE)
    cost = OperatorCost("attention", flops, _qk_bytes(params, activations), _probabilities_bytes(params, activations),
                        cost_of(row).compute_dtype, cost_of(row).unit,
                        ("selective recompute: QK^T and the softmax again, P rewritten for the backward",))
    return Row("attention_scores", "attention", row.count, cost)


def _probabilities_bytes(params: dict, activations: str) -> float:
    return params.get("batch", 1) * params["heads"] * params["q_len"] * params["kv_len"] * bytes_per_element(activations)


def _qk_bytes(params: dict, activations: str) -> float:
    s = bytes_per_element(activations)
    batch, heads, kv_heads = params.get("batch", 1), params["heads"], params.get("kv_heads") or params["heads"]
    return batch * params["head_dim"] * (heads * params["q_len"] + kv_heads * params["kv_len"]) * s


# The column-parallel matmuls that read the normed residual stream. Under sequence parallelism that input is
# all-gathered for the matmul, and what is kept for the backward is the device's 1/tp slice of it (Megatron
# gathers it again for the weight gradient), as Korthikanti et al. 2022 count it.
STREAM_READERS = frozenset({"qkv_proj", "q_proj", "q_a_proj", "kv_a_proj", "gate_up_proj", "up_proj", "router",
                            "shared_gate_up_proj", "shared_up_proj"})


def saved_activation_bytes(row: Row, activations: str, keep_scores: bool, stream_shards: int = 1) -> float:
    """Bytes of one forward row's outputs or inputs that its backward needs, held from the forward to the
    backward (tensors another row already keeps are not counted twice: a matmul keeps its input, so attention
    keeps Q, K, V and its softmax statistics, its output O being the output projection's input; a residual add,
    RoPE, the embedding and collectives keep nothing). stream_shards: the sequence-parallel degree by which a
    stream reader's kept input is sliced."""
    if row.is_comm or row.name.endswith(("residual", QUANTIZE)):  # a cast's fp8 output is its matmul's input
        return 0.0
    cost, saved = cost_of(row), OPERATORS[row.kind].saved_for_backward
    if saved == "nothing":
        return 0.0
    if saved == "activations_read":
        kept = cost.bytes_read - cost.weight_bytes_read
        return kept / stream_shards if row.name in STREAM_READERS else kept
    if saved == "attention":
        params = attention_params_of(row)
        flash = attention_cost(**{**params, "implementation": "flash"})
        stats = params.get("batch", 1) * params["heads"] * params["q_len"] * LOGSUMEXP_BYTES
        naive_scores = _probabilities_bytes(params, activations) if params.get("implementation") == "naive" else 0.0
        return flash.bytes_read + stats + (naive_scores if keep_scores else 0.0)
    if saved == "output":
        # A softmax's backward needs its output; a norm's its input, the output's size (its weights are parameters).
        return cost.bytes_written
    return cost.bytes_read


def optimizer_cost(parameters: float, optimizer: str, parameter_dtype: str, gradient_dtype: str, state_dtype: str,
                   master_weights: bool) -> OperatorCost:
    """One fused update of `parameters` parameters: reads the gradient, the states and the master copy (or the
    parameters), writes the states, the master copy and the parameters."""
    s_p, s_g, s_o = (bytes_per_element(d) for d in (parameter_dtype, gradient_dtype, state_dtype))
    states = OPTIMIZER_STATES_PER_PARAMETER[optimizer] * s_o
    master = s_o if master_weights else 0.0
    read = parameters * (s_g + states + (master or s_p))
    written = parameters * (states + master + s_p)
    return OperatorCost("optimizer", parameters * OPTIMIZER_FLOPS_PER_PARAMETER[optimizer], read, written, state_dtype,
                        Unit.vector, (f"{optimizer}: {OPTIMIZER_FLOPS_PER_PARAMETER[optimizer]} FLOPs per parameter, "
                                      "one fused elementwise pass",))
