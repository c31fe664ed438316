"""Operator cost models: each returns model FLOPs and ideal HBM bytes read and written. Each kind's descriptor
(kind.py) holds its cost model and all else the service knows of it; registry.py lists them."""

from service.core.operators.attention import attention_cost
from service.core.operators.base import OperatorCost
from service.core.operators.embedding import embedding_cost
from service.core.operators.matmul import grouped_matmul_cost, matmul_cost
from service.core.operators.pointwise import (
    elementwise_cost,
    layernorm_cost,
    rmsnorm_cost,
    rope_cost,
    softmax_cost,
)
from service.core.operators.recurrent import causal_conv1d_cost, recurrent_scan_cost
from service.core.operators.registry import OPERATORS
from service.core.operators.sparse_index import sparse_index_cost


def operator_cost(kind: str, **fields) -> OperatorCost:
    return OPERATORS[kind].cost(**fields)


__all__ = ["OPERATORS", "OperatorCost", "attention_cost", "elementwise_cost", "embedding_cost", "grouped_matmul_cost",
           "layernorm_cost", "matmul_cost", "operator_cost", "causal_conv1d_cost", "recurrent_scan_cost", "rmsnorm_cost", "rope_cost",
           "softmax_cost", "sparse_index_cost"]
