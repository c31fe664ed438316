"""Token embedding lookup: a gather of table rows, no arithmetic."""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost, at_most, element_count


def embedding_cost(*, tokens: int, hidden: int, vocab: int, dtype: str = "bf16",
                   index_dtype: str = "int32") -> OperatorCost:
    # A roofline is a lower bound, so a row looked up by several tokens is counted once.
    rows_read = at_most(tokens, vocab)
    out_elems = element_count("tokens", "out [tokens, hidden]", tokens, hidden)
    s = bytes_per_element(dtype)
    return OperatorCost(
        "embedding",
        flops=0,
        bytes_read=rows_read * hidden * s + tokens * bytes_per_element(index_dtype),
        bytes_written=out_elems * s,
        compute_dtype=dtype,
        unit=Unit.vector,
        assumptions=(
            "embedding: a lookup costs 0 FLOP",
            "embedding: min(tokens, vocab) distinct table rows read (lower bound), token ids read once, "
            "the [tokens, hidden] output written once",
        ),
    )
