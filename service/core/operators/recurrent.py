"""The two operators of a recurrent (linear-attention or state-space) layer: its short causal convolution and its
scan. Both keep a fixed state per sequence, whatever the sequence's length, instead of a growing KV cache.

A scan maps per-token keys k (dk wide, `key_heads` of them shared by the value heads), values v (dv wide) and
per-head gates into outputs, through a dk x dv state per value head. Two rules are known here:
- `gated_delta` (Gated DeltaNet, Qwen3-Next): S <- g S (I - beta k k^T) + beta k v^T, o = S^T q;
- `ssd` (Mamba-2's state-space duality; k is B, q is C, dk is the state size N, dv the head dim P):
  S <- a S + dt k v^T, o = S^T q.
Two ways to run them:
- `chunked` (a prompt): the sequence in chunks of c tokens (padded up to a whole chunk), within a chunk as
  matrix products, the state carried from chunk to chunk. FLOPs per value head and chunk:
  gated_delta: 2c^2 dk (k k^T) + 2c^2 dk (q k^T) + c^2 (dk + dv) (the two unit-triangular solves of the UT
  transform) + 2c^2 dv (intra-chunk output) + 6c dk dv (the state read twice and updated once), as
  flash-linear-attention and transformers' chunked form compute it;
  ssd: 2c^2 N (C B^T) + 2c^2 P (its product with x) + 2c N P (the chunk's state) + 2c N P (the state's output)
  + 2 N P (the state passed on), as Mamba-2's chunked scan computes it.
- `recurrent` (decode, a few tokens after a state): token by token; per value head and token
  gated_delta: 7 dk dv (decay, read, rank-one update, output); ssd: 5 N P (decay, update, output).
Decays, gates and normalisations inside the scan are elementwise over tokens x heads and not counted.
HBM traffic: q, k, v and the gates read once, the output written once, the state read when the scan continues
one (`initial_state`) and the final state written (a serving engine keeps it for the next step).
"""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost, element_count
from service.core.operators.kind import OperatorKind

SCAN_RULES = ("gated_delta", "ssd")
SCAN_MODES = ("chunked", "recurrent")
GATES_PER_HEAD = {"gated_delta": 2, "ssd": 1}  # per token and value head: g and beta; dt
RECURRENT_FLOPS_PER_STATE_ELEMENT = {"gated_delta": 7, "ssd": 5}


def scan_state_elements(heads: int, key_dim: int, value_dim: int) -> int:
    """A sequence's scan state: a key_dim x value_dim matrix per value head."""
    return heads * key_dim * value_dim


def _chunk_flops(rule: str, chunk: int, key_dim: int, value_dim: int) -> int:
    c, dk, dv = chunk, key_dim, value_dim
    if rule == "gated_delta":
        return 2 * c * c * dk * 2 + c * c * (dk + dv) + 2 * c * c * dv + 6 * c * dk * dv
    return 2 * c * c * (dk + dv) + 4 * c * dk * dv + 2 * dk * dv


def recurrent_scan_cost(*, rule: str = "gated_delta", batch: int = 1, seq_len: int, heads: int,
                        key_heads: int | None = None, key_dim: int, value_dim: int, mode: str = "chunked",
                        chunk: int = 64, initial_state: bool = False, dtype: str = "bf16",
                        state_dtype: str | None = None) -> OperatorCost:
    if rule not in SCAN_RULES:
        raise CostModelError("rule", f"unknown scan rule {rule!r}; known: {', '.join(SCAN_RULES)}")
    if mode not in SCAN_MODES:
        raise CostModelError("mode", f"unknown scan mode {mode!r}; known: {', '.join(SCAN_MODES)}")
    key_heads = key_heads or heads
    if heads % key_heads:
        raise CostModelError("key_heads", f"must divide heads ({heads}): each key head serves whole value heads")
    s, s_state = bytes_per_element(dtype), bytes_per_element(state_dtype or dtype)
    tokens = element_count("seq_len", "[batch, seq_len]", batch, seq_len)
    state = element_count("heads", "the state [batch, heads, key_dim, value_dim]", batch,
                          scan_state_elements(heads, key_dim, value_dim))
    if mode == "chunked":
        chunks = -(-seq_len // chunk)
        flops = batch * heads * chunks * _chunk_flops(rule, chunk, key_dim, value_dim)
        how = (f"scan: {rule}, chunked in {chunks} chunk(s) of {chunk} tokens (the last padded), on the tensor "
               "cores")
        unit = Unit.tensor
    else:
        flops = tokens * heads * key_dim * value_dim * RECURRENT_FLOPS_PER_STATE_ELEMENT[rule]
        how = (f"scan: {rule}, token by token, {RECURRENT_FLOPS_PER_STATE_ELEMENT[rule]} FLOPs per state element "
               "and token")
        unit = Unit.vector
    inputs = tokens * (2 * key_heads * key_dim + heads * value_dim + GATES_PER_HEAD[rule] * heads) * s
    state_bytes = state * s_state
    return OperatorCost(
        "recurrent_scan", flops=flops, bytes_read=inputs + (state_bytes if initial_state else 0),
        bytes_written=tokens * heads * value_dim * s + state_bytes, compute_dtype=dtype, unit=unit,
        assumptions=(how, "scan: q, k, v and gates read once, the output written once, the final state written"
                     + (" and the previous one read" if initial_state else "")
                     + f" ({key_dim} x {value_dim} a value head, in {state_dtype or dtype})"),
        kv_bytes_read=state_bytes if initial_state else 0.0, kv_bytes_written=state_bytes,
    )


def causal_conv1d_cost(*, batch: int = 1, seq_len: int, channels: int, kernel: int = 4, bias: bool = False,
                       initial_state: bool = False, dtype: str = "bf16") -> OperatorCost:
    """A depthwise causal convolution over the sequence: each channel's output is the dot product of its last
    `kernel` inputs with its own `kernel` weights (2 x kernel FLOPs an output, one more with a bias). A sequence's
    last kernel - 1 inputs are its state: read when the convolution continues one, always written."""
    if kernel < 1:
        raise CostModelError("kernel", "must be at least 1")
    s = bytes_per_element(dtype)
    elements = element_count("seq_len", "x [batch, seq_len, channels]", batch, seq_len, channels)
    state = element_count("channels", "the state [batch, channels, kernel - 1]", batch, channels, kernel - 1) * s
    weights = channels * (kernel + (1 if bias else 0)) * s
    return OperatorCost(
        "causal_conv1d", flops=elements * (2 * kernel + (1 if bias else 0)),
        bytes_read=elements * s + weights + (state if initial_state else 0), bytes_written=elements * s + state,
        compute_dtype=dtype, unit=Unit.vector,
        assumptions=(f"causal conv1d: depthwise, {2 * kernel + (1 if bias else 0)} FLOPs an output, weights read "
                     f"once, the last {kernel - 1} inputs a sequence kept as its state",),
        weight_bytes_read=weights, kv_bytes_read=state if initial_state else 0.0, kv_bytes_written=state,
    )


RECURRENT_SCAN = OperatorKind(
    "recurrent_scan", "a linear-attention or state-space scan (Gated DeltaNet, Mamba-2) over a fixed state",
    recurrent_scan_cost, Unit.tensor, "#17becf", "alone", None, "pointwise", "activations_read")
CAUSAL_CONV1D = OperatorKind(
    "causal_conv1d", "a depthwise causal convolution over the sequence (a recurrent layer's short conv)",
    causal_conv1d_cost, Unit.vector, "#bcbd22", "alone", None, "pointwise", "input")
