"""Every operator kind the service analyses, in the order the contract, the CLI and the docs list them."""

from __future__ import annotations

from service.core.operators.attention import ATTENTION
from service.core.operators.embedding import EMBEDDING
from service.core.operators.kind import OperatorKind
from service.core.operators.matmul import GROUPED_MATMUL, MATMUL
from service.core.operators.pointwise import ELEMENTWISE, LAYERNORM, RMSNORM, ROPE, SOFTMAX
from service.core.operators.recurrent import CAUSAL_CONV1D, RECURRENT_SCAN
from service.core.operators.sparse_index import SPARSE_INDEX

OPERATORS: dict[str, OperatorKind] = {kind.name: kind for kind in (
    MATMUL, GROUPED_MATMUL, ELEMENTWISE, LAYERNORM, RMSNORM, SOFTMAX, EMBEDDING, ROPE, ATTENTION, SPARSE_INDEX,
    CAUSAL_CONV1D, RECURRENT_SCAN)}
KINDS = tuple(OPERATORS)


def kinds_with(**wanted) -> frozenset[str]:
    """The kinds whose descriptor has these values, e.g. kinds_with(fusion_role="matrix")."""
    return frozenset(name for name, kind in OPERATORS.items()
                     if all(getattr(kind, field) == value for field, value in wanted.items()))
