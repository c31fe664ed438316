"""DeepSeek Sparse Attention's lightning indexer: which keys each query attends to.

Every query scores every earlier key with a few small heads, I(q, k) = sum over heads of w_h relu(q_h . k), and
keeps the `top_k` best; attention then runs over those keys only. FLOPs per (query, key) pair that is scored:
heads x (2 head_dim for the dot product, 1 for the relu, 2 for the weighted sum). The selection itself is a
comparison, not counted. Bytes: the queries and their head weights read once, the keys (one head_dim key a token,
cached like K and V) read once, top_k int32 indices written a query (padded where fewer keys exist, as the kernels
write a fixed-size selection); the scores stay on chip, streamed into the selection as flash attention streams its
scores.
"""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.attention import causal_pairs
from service.core.operators.base import OperatorCost, any_true, element_count
from service.core.operators.kind import OperatorKind

INDEX_BYTES = 4  # an int32 index per chosen key


def sparse_index_cost(*, batch: int = 1, heads: int, head_dim: int, q_len: int, kv_len: int | None = None,
                      top_k: int, dtype: str = "bf16", kv_dtype: str | None = None, causal: bool = True) -> OperatorCost:
    kv_len = q_len if kv_len is None else kv_len
    if causal and any_true(q_len > kv_len):
        raise CostModelError("q_len", f"with causal masking q_len ({q_len}) cannot exceed kv_len ({kv_len})")
    s, s_kv = bytes_per_element(dtype), bytes_per_element(kv_dtype or dtype)
    queries = element_count("q_len", "the queries [batch, q_len]", batch, q_len)
    pairs = batch * (causal_pairs(q_len, kv_len) if causal else q_len * kv_len)
    keys = element_count("kv_len", "the keys [batch, kv_len, head_dim]", batch, kv_len, head_dim) * s_kv
    chosen = queries * top_k * INDEX_BYTES
    return OperatorCost(
        "sparse_index", flops=pairs * heads * (2 * head_dim + 3),
        bytes_read=queries * heads * (head_dim + 1) * s + keys, bytes_written=chosen, compute_dtype=dtype,
        unit=Unit.tensor,
        assumptions=(f"sparse index: every {'earlier ' if causal else ''}key scored by {heads} heads at "
                     f"2 x {head_dim} + 3 FLOPs a head, the best {top_k} kept per query (int32 indices written; the "
                     "scores stay on chip)",),
        kv_bytes_read=keys,
    )


SPARSE_INDEX = OperatorKind(
    "sparse_index", "DeepSeek sparse attention's indexer: scores every key, keeps the top k per query",
    sparse_index_cost, Unit.tensor, "#e377c2", "alone", None, "pointwise", "activations_read")
