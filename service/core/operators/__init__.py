"""Operator cost models: each returns model FLOPs and ideal HBM bytes read and written."""

from collections.abc import Callable

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

COST_MODELS: dict[str, Callable[..., OperatorCost]] = {
    "matmul": matmul_cost,
    "grouped_matmul": grouped_matmul_cost,
    "elementwise": elementwise_cost,
    "layernorm": layernorm_cost,
    "rmsnorm": rmsnorm_cost,
    "softmax": softmax_cost,
    "embedding": embedding_cost,
    "rope": rope_cost,
    "attention": attention_cost,
}


def operator_cost(kind: str, **fields) -> OperatorCost:
    return COST_MODELS[kind](**fields)


__all__ = ["COST_MODELS", "OperatorCost", "operator_cost"]
