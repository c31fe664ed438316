"""Operators a client can analyse, one model per `kind` (a discriminated union)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field

from schemas.common import Dim, DTypeName, IndexDTypeName, NonNegativeFinite, StrictModel, given
from service.core.operators.registry import KINDS

Shape = Annotated[list[Dim], Field(min_length=1, max_length=8, description="Tensor shape (elements per axis)")]


class TileShape(StrictModel):
    m: Annotated[int, Field(ge=1, le=4096)]
    n: Annotated[int, Field(ge=1, le=4096)]
    k: Annotated[int, Field(ge=1, le=4096)]


class MatmulOp(StrictModel):
    """C[batch, m, n] = A[batch, m, k] @ B[k, n] (+ bias[n]); runs on the tensor units."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}]})
    kind: Literal["matmul"]
    m: Dim
    n: Dim
    k: Dim
    batch: Dim = 1
    bias: bool = False
    dtype: DTypeName = Field("bf16", description="Type of every operand unless overridden below")
    a_dtype: DTypeName | None = Field(None, description="Type of A (activations)")
    b_dtype: DTypeName | None = Field(None, description="Type of B (weights)")
    c_dtype: DTypeName | None = Field(None, description="Type of C (output) and of the bias")
    compute_dtype: DTypeName | None = Field(None, description="Peak to use; default: the wider of A and B")
    weight_shared: bool = Field(True, description="B is one weight shared by the batch (read once), not one per item")
    weight_group_size: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None, description="Group-quantised B: elements per scale; bytes per element = bits/8 + scale bytes / group. "
                          "Default for int4 and fp4 B: 128 (as the model analysis assumes); none for other types")
    weight_scale_bytes: Annotated[float, Field(gt=0, le=8)] = Field(2.0, description="Bytes per scale, bytes (fp16: 2)")
    tile: TileShape | None = Field(None, description="Kernel tile for the L2 traffic and shape-efficiency models; "
                                                     "default: the device's")
    apply_efficiency: bool = Field(False, description="Slow the compute roof by the padding efficiency (tiles padded "
                                                      "to the kernel's); the wave figures are reported, never applied: "
                                                      "split-K and stream-K kernels fill the SMs")


class GroupedMatmulOp(StrictModel):
    """Mixture-of-experts projections in one grouped GEMM: expert e multiplies its routed rows by its weight."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "grouped_matmul", "tokens_per_expert": [40, 0, 3, 21, 0, 0, 64, 0], "n": 28672, "k": 4096,
         "dtype": "bf16"}]})
    kind: Literal["grouped_matmul"]
    tokens_per_expert: list[Annotated[int, Field(ge=0, le=2**31)]] = Field(min_length=1, max_length=4096)
    n: Dim
    k: Dim
    dtype: DTypeName = "bf16"
    a_dtype: DTypeName | None = None
    b_dtype: DTypeName | None = None
    c_dtype: DTypeName | None = None
    min_row_tile: Annotated[int, Field(ge=1, le=1024)] = Field(16, description="Rows each expert is padded to")
    apply_efficiency: bool = Field(False, description="Slow the compute roof by rows with data / rows executed")


class ElementwiseOp(StrictModel):
    """A map over same-shaped tensors (add, mul, silu, ...); runs on the vector units."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "elementwise", "op": "silu", "shape": [8, 4096, 14336], "dtype": "bf16"}]})
    kind: Literal["elementwise"]
    op: str = Field(min_length=1, max_length=32, description="add, sub, mul, relu, silu, gelu, sigmoid, or any name with flops_per_element")
    shape: Shape
    dtype: DTypeName = "bf16"
    arity: int | None = Field(None, ge=1, le=16, description="Inputs read; default from the op table")
    flops_per_element: NonNegativeFinite | None = Field(
        None, le=1e6, description="Overrides the op table's FLOP per element")
    out_dtype: DTypeName | None = None


class _NormOp(StrictModel):
    shape: Shape
    dtype: DTypeName = "bf16"
    elementwise_affine: bool = Field(True, description="Has a learned scale (gamma), read like an input")
    param_dtype: DTypeName | None = Field(None, description="Type of the parameters; default: dtype")


class LayerNormOp(_NormOp):
    """LayerNorm over the last axis of `shape`."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "layernorm", "shape": [8, 2048, 4096], "dtype": "bf16"}]})
    kind: Literal["layernorm"]
    bias: bool = Field(True, description="Has a learned shift (beta) as well, when elementwise_affine")


class RMSNormOp(_NormOp):
    """RMSNorm over the last axis of `shape`."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "rmsnorm", "shape": [8, 2048, 4096], "dtype": "bf16"}]})
    kind: Literal["rmsnorm"]


class SoftmaxOp(StrictModel):
    """Softmax normalised over the last axis of `shape`."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "softmax", "shape": [8, 32, 2048, 2048], "dtype": "bf16"}]})
    kind: Literal["softmax"]
    shape: Shape
    dtype: DTypeName = "bf16"


class EmbeddingOp(StrictModel):
    """Token embedding lookup (a gather of `tokens` rows of a [vocab, hidden] table)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "embedding", "tokens": 16384, "hidden": 4096, "vocab": 128256, "dtype": "bf16"}]})
    kind: Literal["embedding"]
    tokens: Dim
    hidden: Dim
    vocab: Dim
    dtype: DTypeName = "bf16"
    index_dtype: IndexDTypeName = "int32"


class RopeOp(StrictModel):
    """Rotary position embedding applied to a [batch, seq_len, heads, head_dim] tensor."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "rope", "batch": 8, "seq_len": 2048, "heads": 32, "head_dim": 128, "dtype": "bf16"}]})
    kind: Literal["rope"]
    batch: Dim = 1
    seq_len: Dim
    heads: Dim
    head_dim: Dim
    dtype: DTypeName = "bf16"


class AttentionOp(StrictModel):
    """Scaled dot-product attention core (QK^T, softmax, PV), without the projections."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "attention", "batch": 1, "heads": 32, "kv_heads": 8, "head_dim": 128,
         "q_len": 4096, "kv_len": 4096, "dtype": "bf16", "implementation": "flash", "causal": True}]})
    kind: Literal["attention"]
    batch: Dim = 1
    heads: Dim
    kv_heads: Dim | None = Field(None, description="K/V heads (grouped-query attention); default: heads")
    head_dim: Dim
    q_len: Dim
    kv_len: Dim | None = Field(None, description="Keys and values attended to; default: q_len")
    dtype: DTypeName = "bf16"
    implementation: Literal["flash", "naive"] = "flash"
    causal: bool = False
    sram_bytes: Annotated[int, Field(ge=1, le=2**40)] | None = Field(
        None, description="On-chip memory per thread block, bytes, for the FlashAttention I/O model (flash only)")
    kv_dtype: DTypeName | None = Field(None, description="Type of the K/V cache; default: dtype")
    v_head_dim: Dim | None = Field(None, description="Head dimension of V when it differs from Q and K (MLA)")
    window: Dim | None = Field(None, description="Sliding window: each query sees at most this many keys (causal only)")
    schema_rules = {"if": given("window"), "then": {"required": ["causal"], "properties": {"causal": {"const": True}}}}


class SparseIndexOp(StrictModel):
    """DeepSeek Sparse Attention's indexer: scores every key for each query with a few small heads and keeps the
    `top_k` best, the keys attention then reads."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "sparse_index", "batch": 1, "heads": 64, "head_dim": 128, "q_len": 1, "kv_len": 65536,
         "top_k": 2048, "dtype": "bf16", "causal": True}]})
    kind: Literal["sparse_index"]
    batch: Dim = 1
    heads: Dim = Field(description="The indexer's heads (index_n_heads)")
    head_dim: Dim = Field(description="Width of an indexer head and of its cached key (index_head_dim)")
    q_len: Dim
    kv_len: Dim | None = Field(None, description="Keys scored; default: q_len")
    top_k: Dim = Field(description="Keys kept per query (index_topk)")
    dtype: DTypeName = "bf16"
    kv_dtype: DTypeName | None = Field(None, description="Type of the cached index keys; default: dtype")
    causal: bool = Field(True, description="Each query scores the keys up to its own position only (the queries are "
                                           "the last q_len of kv_len positions)")


class CausalConv1dOp(StrictModel):
    """A depthwise causal convolution over the sequence of a [batch, seq_len, channels] tensor (the short
    convolution of a Gated DeltaNet or Mamba-2 layer); each sequence keeps its last kernel - 1 inputs as a state."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "causal_conv1d", "batch": 1, "seq_len": 4096, "channels": 8192, "kernel": 4, "dtype": "bf16"}]})
    kind: Literal["causal_conv1d"]
    batch: Dim = 1
    seq_len: Dim
    channels: Dim = Field(description="Channels, each convolved with its own kernel (depthwise)")
    kernel: Annotated[int, Field(ge=1, le=64)] = Field(4, description="Taps of each channel's kernel")
    bias: bool = Field(False, description="Each channel adds a bias")
    initial_state: bool = Field(False, description="The convolution continues a sequence: its state is read first")
    dtype: DTypeName = "bf16"


class RecurrentScanOp(StrictModel):
    """A linear-attention or state-space scan over a fixed state per sequence: `gated_delta` (Gated DeltaNet) or
    `ssd` (Mamba-2), chunked (a prompt) or token by token (decode). docs/concepts.md gives the counting."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"kind": "recurrent_scan", "rule": "gated_delta", "batch": 1, "seq_len": 4096, "heads": 32, "key_heads": 16,
         "key_dim": 128, "value_dim": 128, "mode": "chunked", "chunk": 64, "dtype": "bf16"}]})
    kind: Literal["recurrent_scan"]
    rule: Literal["gated_delta", "ssd"] = Field("gated_delta", description="The state update: Gated DeltaNet's "
                                                "delta rule, or Mamba-2's state-space scan")
    batch: Dim = 1
    seq_len: Dim
    heads: Dim = Field(description="Value heads, each with its own state (Mamba-2: its heads)")
    key_heads: Dim | None = Field(None, description="Query/key heads, each shared by heads / key_heads value heads "
                                  "(Mamba-2: its B/C groups); must divide heads; default: heads")
    key_dim: Dim = Field(description="Width of a query/key head (Mamba-2: the state size N)")
    value_dim: Dim = Field(description="Width of a value head (Mamba-2: the head dimension P)")
    mode: Literal["chunked", "recurrent"] = Field("chunked", description="Chunks of matrix products (a prompt) or "
                                                  "token by token (decode)")
    chunk: Annotated[int, Field(ge=1, le=4096)] = Field(64, description="Tokens a chunk (chunked mode)")
    initial_state: bool = Field(False, description="The scan continues a sequence: its state is read first")
    dtype: DTypeName = "bf16"
    state_dtype: DTypeName | None = Field(None, description="Type of the state; default: dtype")


# The request body of each kind the core's registry holds, in the registry's order: a kind the core analyses
# without a request model here (or one here the core does not know) fails at import, not at a client.
_REQUEST_MODELS = {model.model_fields["kind"].annotation.__args__[0]: model for model in (  # type: ignore[union-attr]
    MatmulOp, GroupedMatmulOp, ElementwiseOp, LayerNormOp, RMSNormOp, SoftmaxOp, EmbeddingOp, RopeOp, AttentionOp,
    SparseIndexOp, CausalConv1dOp, RecurrentScanOp)}
if set(_REQUEST_MODELS) != set(KINDS):
    raise ImportError(f"operator kinds without a request model or a descriptor: {set(_REQUEST_MODELS) ^ set(KINDS)}")
OPERATOR_MODELS = tuple(_REQUEST_MODELS[kind] for kind in KINDS)
OPERATOR_KINDS = KINDS

if TYPE_CHECKING:  # a union built at run time from the registry, which a checker cannot follow
    Operator = Any
else:  # only Union[...] can spell a union over a tuple
    Operator = Annotated[Union[OPERATOR_MODELS], Field(discriminator="kind")]  # noqa: UP007
