"""Token embedding lookup: a gather of table rows, no arithmetic."""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost, at_most, element_count
from service.core.operators.kind import OperatorKind, Wiring


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


INDEX_DTYPES = frozenset({"int32", "int64"})


def _embedding_fields(wiring: Wiring) -> dict:
    wiring.expect((2,))
    ids, table = wiring.inputs
    if len(ids.shape) != 1 or len(table.shape) != 2 or ids.dtype not in INDEX_DTYPES:
        wiring.fail("embedding takes int32/int64 ids [tokens] and a table [vocab, hidden]")
    wiring.output_shape_is((ids.shape[0], table.shape[1]))
    return {"tokens": ids.shape[0], "hidden": table.shape[1], "vocab": table.shape[0], "dtype": table.dtype,
            "index_dtype": ids.dtype}


EMBEDDING = OperatorKind("embedding", "a token embedding lookup (a gather of table rows)", embedding_cost, Unit.vector,
                         "#8c564b", "alone", _embedding_fields, "pointwise", "nothing")
