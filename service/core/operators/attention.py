"""Scaled dot-product attention: softmax(Q K^T / sqrt(d)) V, per sequence and query head.

FLOPs per (query, key) pair that is computed: 2d for QK^T, 2d for PV and 5 for the softmax.
HBM traffic depends on the implementation:
- naive materialises the scores S and probabilities P: S written and read, P written and read;
- flash keeps S and P on chip; ideally Q, K, V are read once and O written once. With `sram_bytes`
  the FlashAttention I/O model applies: K and V are streamed once per block of query rows.
Grouped-query attention shares each K/V head among `heads / kv_heads` query heads.
"""

from __future__ import annotations

import math

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost, any_true, at_most, element_count
from service.core.operators.kind import OperatorKind, Wiring

SOFTMAX_FLOPS_PER_SCORE = 5


def causal_pairs(q_len: int, kv_len: int, window: int | None = None) -> int:
    """Unmasked (query, key) pairs when the q_len queries are the last positions of kv_len keys.

    Query i (0-based) sits at position kv_len - q_len + i and sees that many keys plus itself, so the
    sum is q*n - q*(q-1)/2; for q = n that is n*(n+1)/2. A sliding window w caps each query at w keys.
    """
    if window is None:
        return q_len * kv_len - q_len * (q_len - 1) // 2

    def seen_up_to(last: int) -> int:  # sum over positions p = 0..last of min(p + 1, w)
        if not isinstance(last, int):  # an array of steps (core.transformer.batched_steps): each case, then the right one
            import numpy as np

            return np.where(last < 0, 0, np.where(last + 1 <= window, (last + 1) * (last + 2) // 2,
                                                  window * (window + 1) // 2 + (last + 1 - window) * window))
        if last < 0:
            return 0
        if last + 1 <= window:
            return (last + 1) * (last + 2) // 2
        return window * (window + 1) // 2 + (last + 1 - window) * window

    return seen_up_to(kv_len - 1) - seen_up_to(kv_len - q_len - 1)


def chunked_causal_pairs(q_len, kv_len, chunk: int):
    """Unmasked pairs under chunked attention (Llama 4's local layers): the query at position p sees the keys of its
    own chunk of `chunk` positions up to itself, (p mod chunk) + 1 of them. Summed over the last q_len positions of
    kv_len, each as the whole chunks up to it (chunk (chunk + 1) / 2 each) and the part of the last."""
    def seen_up_to(last):  # sum over positions 0..last of (p mod chunk) + 1; works element by element on arrays too
        full, rest = (last + 1) // chunk, (last + 1) % chunk
        return full * (chunk * (chunk + 1) // 2) + rest * (rest + 1) // 2

    return seen_up_to(kv_len - 1) - seen_up_to(kv_len - q_len - 1)


def floor_sum(count: int, step: int, divisor: int, offset: int) -> int:
    """Sum of floor((step*i + offset) / divisor) for i in [0, count), in O(log) steps (all non-negative)."""
    total = 0
    while count > 0:
        if step >= divisor:
            total += (count - 1) * count // 2 * (step // divisor)
            step %= divisor
        if offset >= divisor:
            total += count * (offset // divisor)
            offset %= divisor
        last = step * count + offset
        if last < divisor:
            break
        count, offset, divisor, step = last // divisor, last % divisor, step, divisor
    return total


def flash_block_rows(sram_bytes: int, head_dim: int, elem_bytes: float) -> int:
    """Query rows per block in the FlashAttention I/O model: B_c = M / (4d) elements, B_r = min(B_c, d)."""
    sram_elements = sram_bytes / elem_bytes
    block_cols = math.floor(sram_elements / (4 * head_dim))
    if block_cols < 1:
        raise CostModelError("sram_bytes", f"{sram_bytes} bytes cannot hold one row of Q, K, V and O at head_dim {head_dim}")
    return min(block_cols, head_dim)


def keys_streamed_per_kv_head(q_len: int, kv_len: int, group: int, block_rows: int, causal: bool) -> int:
    """Key rows loaded over all query blocks of one KV head, the group's query heads packed as rows.

    Rows are ordered by query position, then by head in the group; block j holds rows
    [j*B_r, (j+1)*B_r) and must load keys up to its last row's position (all keys if not causal).
    """
    rows = q_len * group
    blocks = -(-rows // block_rows)
    if not causal:
        return blocks * kv_len
    # Position of the last row of block j: min(q-1, floor((B_r*j + B_r - 1) / g)).
    first_saturated = max(0, -(-(group * (q_len - 1) - block_rows + 1) // block_rows))
    unsaturated = min(first_saturated, blocks)
    positions = floor_sum(unsaturated, block_rows, group, block_rows - 1) + (blocks - unsaturated) * (q_len - 1)
    return blocks * (kv_len - q_len + 1) + positions


def _check_attention(heads: int, kv_heads: int, q_len, kv_len, implementation: str, causal: bool,
                     sram_bytes: int | None, window: int | None, chunk: int | None = None) -> None:
    if window is not None and not causal:
        raise CostModelError("window", "a sliding window applies to causal attention only")
    if chunk is not None and (not causal or window is not None):
        raise CostModelError("chunk", "chunked attention applies to causal attention without a sliding window")
    if heads % kv_heads:
        raise CostModelError("kv_heads", f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if causal and any_true(q_len > kv_len):
        raise CostModelError("q_len", f"with causal masking q_len ({q_len}) cannot exceed kv_len ({kv_len})")
    if sram_bytes is not None and implementation != "flash":
        raise CostModelError("sram_bytes", "applies only to implementation 'flash'")


def _counting_notes(causal: bool, group: int, window: int | None, keys, kv_len, shared_kv: bool,
                    chunk: int | None = None) -> list[str]:
    """How the FLOPs and the keys were counted, whatever the implementation."""
    notes = [
        f"attention: FLOPs = batch*heads*pairs*(2*head_dim + 2*v_head_dim + {SOFTMAX_FLOPS_PER_SCORE}) "
        "(QK^T and PV at 2 FLOP per multiply-add, softmax 5 FLOP per score)",
        "attention: causal, pairs = q*n - q*(q-1)/2 (queries are the last q_len positions)" if causal
        else "attention: not causal, pairs = q_len*kv_len",
        "attention: softmax FLOPs counted at the tensor-unit peak with the two matmuls (one kernel)",
        f"attention: grouped-query, {group} query head(s) per K/V head" if group > 1 else "attention: one K/V head per query head",
    ]
    if window:
        notes.append(f"attention: sliding window of {window} keys; " + (
            f"{keys} of {kv_len} keys are read" if isinstance(kv_len, int) else "at most that many keys are read"))
    if chunk:
        notes.append(f"attention: chunked, each query sees the keys of its own chunk of {chunk} positions up to "
                     "itself; " + (f"{keys} of {kv_len} keys are read" if isinstance(kv_len, int)
                                   else "the current chunks' keys are read"))
    if shared_kv:
        notes.append("attention: K and V are one cached latent tensor (MLA), read once")
    return notes


def attention_cost(
    *,
    batch: int = 1,
    heads: int,
    kv_heads: int | None = None,
    head_dim: int,
    q_len: int,
    kv_len: int | None = None,
    dtype: str = "bf16",
    implementation: str = "flash",
    causal: bool = False,
    sram_bytes: int | None = None,
    kv_dtype: str | None = None,
    v_head_dim: int | None = None,
    shared_kv: bool = False,
    window: int | None = None,
    chunk: int | None = None,
) -> OperatorCost:
    kv_heads = heads if kv_heads is None else kv_heads
    kv_len = q_len if kv_len is None else kv_len
    v_dim = v_head_dim or head_dim
    kv_dtype = kv_dtype or dtype
    _check_attention(heads, kv_heads, q_len, kv_len, implementation, causal, sram_bytes, window, chunk)
    group = heads // kv_heads
    s, s_kv = bytes_per_element(dtype), bytes_per_element(kv_dtype)
    # With a window, only the last q_len + w - 1 keys are ever attended to; with chunks, those from the start of
    # the first query's chunk.
    if window:
        keys = at_most(kv_len, q_len + window - 1)
    elif chunk:
        keys = kv_len - (kv_len - q_len) // chunk * chunk
    else:
        keys = kv_len

    q_elems = element_count("q_len", "Q [batch, heads, q_len, head_dim]", batch, heads, q_len, head_dim)
    o_elems = element_count("q_len", "O [batch, heads, q_len, v_head_dim]", batch, heads, q_len, v_dim)
    k_elems = element_count("kv_len", "K [batch, kv_heads, kv_len, head_dim]", batch, kv_heads, keys, head_dim)
    v_elems = 0 if shared_kv else element_count("kv_len", "V [batch, kv_heads, kv_len, v_head_dim]", batch, kv_heads, keys, v_dim)
    scores = element_count("kv_len", "S [batch, heads, q_len, kv_len]", batch, heads, q_len, kv_len)
    if chunk:
        pairs = chunked_causal_pairs(q_len, kv_len, chunk)
    else:
        pairs = causal_pairs(q_len, kv_len, window) if causal else q_len * kv_len
    flops = batch * heads * pairs * (2 * head_dim + 2 * v_dim + SOFTMAX_FLOPS_PER_SCORE)

    assumptions = _counting_notes(causal, group, window, keys, kv_len, shared_kv, chunk)
    kv_bytes = (k_elems + v_elems) * s_kv
    # Naive attention writes S and P once each and reads each back once.
    score_bytes_each_way = 0.0
    if implementation == "naive":
        score_bytes_each_way = 2 * scores * s
        assumptions.append("attention (naive): Q, K, V read once and O written once; S and P of "
                           "[q_len, kv_len] per head each written and read once in HBM")
    elif sram_bytes is None:
        assumptions.append("attention (flash, ideal): Q, K, V read once per head that owns them, O written once")
    else:
        block_rows = flash_block_rows(sram_bytes, head_dim, s)
        streamed = keys_streamed_per_kv_head(q_len, kv_len, group, block_rows, causal)
        kv_bytes = batch * kv_heads * streamed * (head_dim + (0 if shared_kv else v_dim)) * s_kv
        assumptions.append(
            f"attention (flash, I/O model): blocks of B_r = min(M/(4d), d) = {block_rows} query rows "
            f"(M = {sram_bytes} bytes of SRAM); K and V streamed once per block"
            + (", up to the block's last position (causal)" if causal else "")
            + "; query heads of a group packed as rows"
        )
    return OperatorCost(
        "attention",
        flops=flops,
        bytes_read=q_elems * s + kv_bytes + score_bytes_each_way,
        bytes_written=o_elems * s + score_bytes_each_way,
        compute_dtype=dtype,
        unit=Unit.tensor,
        assumptions=tuple(assumptions),
        kv_bytes_read=kv_bytes,
    )


def _attention_fields(wiring: Wiring) -> dict:
    wiring.expect((3,))
    q, k, v = wiring.inputs
    if not (len(q.shape) == len(k.shape) == len(v.shape) == 4) or q.shape[0] != k.shape[0] \
            or k.shape[:3] != v.shape[:3] or q.shape[3] != k.shape[3]:
        wiring.fail("attention takes Q [b, heads, q, d], K [b, kv_heads, n, d], V [b, kv_heads, n, dv]")
    wiring.output_shape_is(q.shape[:3] + (v.shape[3],))
    return {"batch": q.shape[0], "heads": q.shape[1], "kv_heads": k.shape[1], "q_len": q.shape[2],
            "kv_len": k.shape[2], "head_dim": q.shape[3], "v_head_dim": v.shape[3], "dtype": q.dtype,
            "kv_dtype": k.dtype}


ATTENTION = OperatorKind("attention", "scaled dot-product attention (QK^T, softmax, PV), flash or naive",
                         attention_cost, Unit.tensor, "#d62728", "matrix", _attention_fields, "attention", "attention")
