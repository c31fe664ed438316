"""The operators of one transformer layer (and of the embedding and LM head), as cost rows.

Tokens per step T = batch x q_len: the prompt in prefill, one new token per sequence in decode (whose
attention then reads the whole cache: kv_len = context + 1). Tensor parallelism over t devices splits
heads, MLP width and experts' width by t (Megatron style) and adds one all-reduce of the [T, hidden]
activations after the attention block and one after the MLP, on the device's interconnect.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.memo import by_value
from service.core.operators import (
    attention_cost,
    causal_conv1d_cost,
    elementwise_cost,
    embedding_cost,
    layernorm_cost,
    matmul_cost,
    recurrent_scan_cost,
    rmsnorm_cost,
    rope_cost,
    softmax_cost,
    sparse_index_cost,
)
from service.core.operators.base import OperatorCost, at_most
from service.core.operators.recurrent import GATES_PER_HEAD
from service.core.transformer import compressed
from service.core.transformer.architecture import (
    Architecture,
    CompressedAttention,
    LatentAttention,
    LayerGroup,
    MoE,
    RecurrentMixer,
    SparseIndexer,
)

# The module classes a quantised checkpoint may leave in 16 bits (its quantisation_config's ignore lists).
KEPT_MODULES = ("attention", "shared_experts", "dense_mlp")


# Tuples, not frozen dataclasses: every cached cost model is keyed by the dtypes (a tuple hashes in C) and a
# step is built per analysis.
class ModelDTypes(NamedTuple):
    weights: str = "bf16"
    activations: str = "bf16"
    kv_cache: str = "bf16"
    weight_group_size: int | None = None  # group-quantised weights carry one scale per group
    weight_scale_bytes: float = 2.0
    lm_head: str | None = None  # default: see head_dtype
    # The routed experts' own format where a checkpoint stores them apart (gpt-oss: mxfp4 experts, bf16 elsewhere).
    experts: str | None = None
    experts_group_size: int | None = None
    experts_scale_bytes: float = 2.0
    # Modules a quantised checkpoint leaves in 16 bits beside those every engine keeps so (embedding, LM head,
    # router, norms): KEPT_MODULES, read from its quantisation_config's lists (quantization.py).
    kept: frozenset[str] = frozenset()

    @property
    def headline_weights(self) -> str:
        """The weights' type a deployment is labelled by (InferenceX's `precision`), which serving calibrations and
        engine lines are kept by: the routed experts' where the checkpoint stores them apart (gpt-oss's fp4 experts
        hold most of its bytes), else `weights`."""
        return self.experts or self.weights

    @property
    def unquantised(self) -> str:
        """The 16-bit type the unquantised weights are stored in: the activations' where they are 16 bits or more,
        else bf16 (a W8A8 checkpoint keeps its embedding, head and router in bf16)."""
        return self.activations if bytes_per_element(self.activations) >= 2 else "bf16"

    def in_16_bits(self) -> ModelDTypes:
        """These dtypes as an unquantised module's matmuls see them: weights and activations in 16 bits."""
        if self.weights == self.activations == self.unquantised and not self.weight_group_size:
            return self
        return self._replace(weights=self.unquantised, activations=self.unquantised, weight_group_size=None)

    def module(self, name: str) -> ModelDTypes:
        """These dtypes as the matmuls of one module class (KEPT_MODULES) see them: in 16 bits where the
        checkpoint keeps that module unquantised."""
        return self.in_16_bits() if name in self.kept else self

    def weight_bytes_per_element(self) -> float | None:
        if not self.weight_group_size:
            return None
        return bytes_per_element(self.weights) + self.weight_scale_bytes / self.weight_group_size

    def expert_dtypes(self) -> ModelDTypes:
        """These dtypes as the routed experts' matmuls see them."""
        if self.experts is None:
            return self
        return self._replace(weights=self.experts, weight_group_size=self.experts_group_size,
                             weight_scale_bytes=self.experts_scale_bytes)

    def quantised(self) -> bool:
        """Whether the weights are stored below 16 bits."""
        return bytes_per_element(self.weights) < 2

    def head_dtype(self, tied: bool) -> str:
        """The LM head's type. A tied head is the embedding table, kept in 16 bits; an untied one of a quantised
        checkpoint (W4A16, W8A8, fp8, NVFP4) stays in 16 bits too, as published checkpoints keep lm_head and as
        vLLM and SGLang load it (DeepSeek-V3's fp8 checkpoint stores it in bf16); `lm_head` says otherwise."""
        if self.lm_head:
            return self.lm_head
        return self.unquantised if tied or self.quantised() else self.weights

    def head(self, tied: bool) -> ModelDTypes:
        """These dtypes as the LM head's matmul sees them: its own type, no group scales unless it is the weights'."""
        dtype = self.head_dtype(tied)
        if dtype == self.weights and not tied:
            return self
        if bytes_per_element(dtype) >= 2:  # a 16-bit head runs a 16-bit matmul
            return self._replace(weights=dtype, activations=self.unquantised, weight_group_size=None)
        return self._replace(weights=dtype, weight_group_size=None)


class Step(NamedTuple):
    batch: int
    q_len: int
    kv_len: int
    tensor_parallel: int = 1
    attention_implementation: str = "flash"
    # Megatron's sequence parallelism (training): norms and residuals run on tokens / tp, and each
    # tensor-parallel block is entered by an all-gather and left by a reduce-scatter.
    sequence_parallel: bool = False
    # Tokens of each sequence the LM head scores: the last one, or all k + 1 of a speculative verification.
    scored_tokens: int = 1

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len

    @property
    def stream_tokens(self) -> int:
        """Tokens of the residual stream on one device: all of them, or a 1/tp slice under sequence parallelism."""
        if self.sequence_parallel and self.tensor_parallel > 1:
            return _split(self.tokens, self.tensor_parallel, "micro_batch_size x seq_len")
        return self.tokens


class Row(NamedTuple):
    name: str
    kind: str
    # Instances per layer (or 1 for the model-level rows). It shadows tuple.count, which no row is asked for.
    count: int  # type: ignore[assignment]
    cost: OperatorCost | None = None
    comm_bytes: float = 0.0  # interconnect bytes per device, for all-reduce rows
    attention_params: dict | None = None  # how an attention row was built, to re-cost it at other lengths
    # The parameters the operator owns (weights, biases, norm scales), per instance, on this row's device; the
    # parameter counts and weight bytes of a model are sums of these (params.py). active_params: those one token
    # uses, where that is fewer (routed experts); None: all of them.
    params: int = 0
    active_params: int | None = None

    @property
    def is_comm(self) -> bool:
        return self.cost is None


def cost_of(row: Row) -> OperatorCost:
    """The cost of a row that is an operator, not a collective."""
    if row.cost is None:
        raise ValueError(f"row {row.name} is a collective: it has no operator cost")
    return row.cost


def attention_params_of(row: Row) -> dict:
    """How an attention row was built."""
    if row.attention_params is None:
        raise ValueError(f"row {row.name} is not an attention row")
    return row.attention_params


def expected_active_experts(tokens: int, experts: int, top_k: int) -> float:
    """Experts hit by `tokens` tokens under uniform independent routing: E * (1 - (1 - k/E)^T)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def busiest_device_experts(tokens, experts: int, top_k: int, devices: int):
    """Experts hit on the busiest of `devices` devices each holding ceil(E / devices) of them (expert parallelism),
    under uniform independent routing of `tokens` tokens (a number or an array of them): the expected largest of
    `devices` draws of Binomial(m, p), p = 1 - (1 - k/E)^T the chance an expert is hit (the experts' hits taken as
    independent), E[max] = sum over x < m of 1 - F(x)^devices. A step waits for its busiest device, so this, not
    the mean (expected_active_experts / devices, what the bound reads), is what an expert-parallel step is expected
    to read at small batches: at 4 tokens, DeepSeek-V3's 256 experts top-8 over 8 devices, 6.4 experts against 3.8."""
    import numpy as np  # here, not at the top, as curve_from_two: only expectations of expert parallelism need it

    held = -(-experts // devices)
    hit = 1 - (1 - top_k / experts) ** np.asarray(tokens, dtype=float)
    p = np.clip(hit, 1e-300, 1 - 1e-16)[..., None]
    x = np.arange(held + 1)
    log_choose = np.array([math.lgamma(held + 1) - math.lgamma(k + 1) - math.lgamma(held - k + 1) for k in x])
    pmf = np.exp(log_choose + x * np.log(p) + (held - x) * np.log1p(-p))
    below = np.cumsum(pmf, axis=-1)[..., :-1]
    busiest = (1 - np.clip(below, 0.0, 1.0) ** devices).sum(axis=-1)
    busiest = np.where(hit >= 1 - 1e-16, float(held), busiest)
    return float(busiest) if np.ndim(busiest) == 0 else busiest


def grouped_expert_matmul(*, token_rows: float, active_experts: float, n: int, k: int, dtypes: ModelDTypes) -> OperatorCost:
    """The routed experts' projection, all experts in one grouped kernel: every routed token row is
    multiplied by its expert's weight, and each active expert's weight is read once."""
    dtypes = dtypes.expert_dtypes()
    s_a, s_c = bytes_per_element(dtypes.activations), bytes_per_element(dtypes.activations)
    s_w = dtypes.weight_bytes_per_element() or bytes_per_element(dtypes.weights)
    weights = active_experts * k * n * s_w
    compute = dtypes.activations if s_a >= bytes_per_element(dtypes.weights) else dtypes.weights
    return OperatorCost(
        "grouped_matmul", flops=2 * token_rows * n * k,
        bytes_read=token_rows * k * s_a + weights, bytes_written=token_rows * n * s_c,
        compute_dtype=compute, unit=Unit.tensor,
        assumptions=(f"experts: {token_rows} routed token rows over {active_experts:.4g} expected active experts "
                     "(uniform independent routing), each active expert's weight read once",),
        weight_bytes_read=weights,
    )


def _norm(arch: Architecture, shape: list[int], dtypes: ModelDTypes) -> OperatorCost:
    return _norm_cost(arch.norm, tuple(shape), dtypes.activations)


# Sweeps rebuild the same rows many times (a seq_len sweep changes only attention): the pure cost
# models of the context-free rows are memoised.
@by_value(maxsize=1024)
def _norm_cost(kind: str, shape: tuple[int, ...], dtype: str) -> OperatorCost:
    if kind == "layernorm":
        return layernorm_cost(shape=list(shape), dtype=dtype)
    return rmsnorm_cost(shape=list(shape), dtype=dtype)


@by_value(maxsize=1024)
def _elementwise(op: str, shape: tuple[int, ...], dtype: str, arity: int | None = None,
                 flops_per_element: float | None = None) -> OperatorCost:
    return elementwise_cost(op=op, shape=list(shape), dtype=dtype, arity=arity, flops_per_element=flops_per_element)


@by_value(maxsize=1024)
def linear_cost(tokens: int, n: int, k: int, dtypes: ModelDTypes, bias: bool = False, weight_dtype: str | None = None) -> OperatorCost:
    return matmul_cost(m=tokens, n=n, k=k, bias=bias, a_dtype=dtypes.activations, b_dtype=weight_dtype or dtypes.weights,
                       c_dtype=dtypes.activations, b_bytes_per_element=None if weight_dtype else dtypes.weight_bytes_per_element())


def _split(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise CostModelError("tensor_parallel", f"{what} ({value}) is not divisible by tensor_parallel ({tp})")
    return value // tp


def kv_heads_on_device(kv_heads: int, tp: int) -> int:
    """K/V heads a device of a tensor-parallel group holds: an even share, or, where the group has more devices
    than the model has K/V heads, one replicated head (vLLM and SGLang replicate each head over tp / kv_heads
    devices, which they require to be whole)."""
    if kv_heads % tp == 0:
        return kv_heads // tp
    if tp % kv_heads == 0:
        return 1
    raise CostModelError("tensor_parallel", f"num_key_value_heads ({kv_heads}) neither divides nor is divided by "
                                            f"tensor_parallel ({tp}): engines split K/V heads evenly, or replicate "
                                            "them over a whole number of devices each")


def _allreduce(name: str, tokens: int, arch: Architecture, dtypes: ModelDTypes, tp: int) -> Row:
    # A ring all-reduce sends and receives 2 (t-1)/t of the buffer per device.
    buffer = tokens * arch.hidden * bytes_per_element(dtypes.activations)
    return Row(name, "allreduce", 1, comm_bytes=2 * (tp - 1) / tp * buffer)


def _shard_collective(name: str, kind: str, tokens: int, arch: Architecture, dtypes: ModelDTypes, tp: int) -> Row:
    """A ring all-gather or reduce-scatter of the [tokens, hidden] stream: (t-1)/t of it per device, half an
    all-reduce's bytes."""
    buffer = tokens * arch.hidden * bytes_per_element(dtypes.activations)
    return Row(name, kind, 1, comm_bytes=(tp - 1) / tp * buffer)


def tensor_parallel_block(prefix: str, inner: list[Row], arch: Architecture, step: Step, dtypes: ModelDTypes) -> list[Row]:
    """A tensor-parallel block with its collectives: none at tp 1; an all-reduce of its output; or, under
    sequence parallelism, an all-gather of its input and a reduce-scatter of its output."""
    tp, tokens = step.tensor_parallel, step.tokens
    if tp == 1:
        return inner
    if not step.sequence_parallel:
        return inner + [_allreduce(f"{prefix}_allreduce", tokens, arch, dtypes, tp)]
    return ([_shard_collective(f"{prefix}_all_gather", "allgather", tokens, arch, dtypes, tp)] + inner
            + [_shard_collective(f"{prefix}_reduce_scatter", "reducescatter", tokens, arch, dtypes, tp)])


def linear_params(n: int, k: int, bias: bool = False) -> int:
    """A [k, n] weight and its optional bias."""
    return n * k + (n if bias else 0)


def norm_weights(arch: Architecture) -> int:
    """A norm's scale (and a layer norm's shift) over the hidden size."""
    return arch.hidden * (2 if arch.norm == "layernorm" else 1)


def _qk_norm_row(name: str, arch: Architecture, tokens: int, heads: int, d: int, act: str) -> Row:
    """An RMS norm of each head's query (key), its scale one head wide and shared by the heads; or, where the model
    normalises all heads' at once (MiniMax-M2), over and as wide as all of them; no scale where it is an L2 norm."""
    if arch.qk_norm_per_head:
        return Row(name, "rmsnorm", 1, rmsnorm_cost(shape=[tokens, heads, d], dtype=act),
                   params=d if arch.qk_norm_weights else 0)
    return Row(name, "rmsnorm", 1, rmsnorm_cost(shape=[tokens, heads * d], dtype=act),
               params=heads * d if arch.qk_norm_weights else 0)


def attention_rows(arch: Architecture, group: LayerGroup, step: Step, dtypes: ModelDTypes) -> list[Row]:
    tp, tokens, h = step.tensor_parallel, step.tokens, arch.hidden
    heads = _split(arch.heads, tp, "num_attention_heads")
    act = dtypes.activations
    if arch.latent is not None:
        return _latent_attention_rows(arch, arch.latent, step, dtypes, heads, group.indexed)
    if arch.compressed is not None:
        return _compressed_attention_rows(arch, arch.compressed, group, step, dtypes)
    kv_heads = kv_heads_on_device(arch.kv_heads_of(group), tp)
    d, dv = arch.head_dim_of(group), arch.value_dim_of(group)
    # With an output gate, q_proj yields each head's gate beside its query; values taken from the key projection
    # have no projection of their own.
    qkv = ((2 if arch.attention_output_gate else 1) * heads + kv_heads) * d + kv_heads * arch.projected_value_dim(group)
    rows = [Row("qkv_proj", "matmul", 1, linear_cost(tokens, qkv, h, dtypes, arch.qkv_bias),
                params=linear_params(qkv, h, arch.qkv_bias))]
    if arch.qk_norm:
        rows += [_qk_norm_row("q_norm", arch, tokens, heads, d, act), _qk_norm_row("k_norm", arch, tokens, kv_heads, d, act)]
    if arch.v_norm:
        rows.append(Row("v_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, kv_heads, dv], dtype=act)))
    if group.rope:
        rotated = int(d * arch.rotary_fraction)
        rows.append(Row("rope", "rope", 1, _rope(step.batch, step.q_len, heads + kv_heads, rotated, act)))
    chunked = {"chunk": group.chunk} if group.chunk else {}
    sinks = arch.attention_sinks if group.sinks is None else group.sinks
    values = {"v_head_dim": dv} if dv != d else {}
    rows.append(Row("kv_cache_write", "elementwise", 1, _cache_write(tokens, kv_heads * (d + dv), dtypes)))
    # A layer with its own indexer attends to the keys it picks: the pairs and keys read are a window's of top_k.
    window = group.sliding_window
    if arch.sparse_index is not None and group.indexed:
        rows += _indexer_rows(arch, arch.sparse_index, step, dtypes, h, int(arch.sparse_index.head_dim
                                                                            * arch.rotary_fraction))
        window = min(window or arch.sparse_index.top_k, arch.sparse_index.top_k)
    rows.append(_attention_row(heads if sinks else 0, batch=step.batch, heads=heads, kv_heads=kv_heads,
                               head_dim=d, q_len=step.q_len, kv_len=step.kv_len, dtype=act, kv_dtype=dtypes.kv_cache,
                               causal=True, window=window, implementation=step.attention_implementation,
                               **chunked, **values))
    if arch.attention_output_gate:  # sigmoid(gate) x output: 4 FLOPs the sigmoid, 1 the product
        rows.append(Row("attn_output_gate", "elementwise", 1,
                        _elementwise("sigmoid_mul", (tokens, heads * dv), act, 2, 5)))
    # One gate a head: its projection, its sigmoid, then each element of the head scaled by it (the product's read of
    # the gates, 1/dv of its input, is left out).
    if arch.head_gate:
        rows += [Row("g_proj", "matmul", 1, linear_cost(tokens, heads, h, dtypes), params=linear_params(heads, h, False)),
                 Row("head_gate_sigmoid", "elementwise", 1, _elementwise("sigmoid", (tokens, heads), act)),
                 Row("head_gate_mul", "elementwise", 1, _elementwise("mul", (tokens, heads * dv), act, 1))]
    rows.append(Row("o_proj", "matmul", 1, linear_cost(tokens, h, heads * dv, dtypes, arch.o_bias),
                    params=linear_params(h, heads * dv, arch.o_bias)))
    return rows


def recurrent_rows(arch: Architecture, mixer: RecurrentMixer, step: Step, dtypes: ModelDTypes) -> list[Row]:
    """A recurrent layer's mixer on one device: heads (and key heads) split by tensor parallelism. A prompt with no
    state before it runs the chunked scan; a step after a state (decode, a verification) the token-by-token one,
    reading the state and the convolution's last inputs first."""
    tp, tokens, h, act = step.tensor_parallel, step.tokens, arch.hidden, dtypes.activations
    heads = _split(mixer.heads, tp, "the recurrent layers' value heads")
    key_heads = _split(mixer.key_heads, tp, "the recurrent layers' key heads")
    values = heads * mixer.value_dim
    channels = 2 * key_heads * mixer.key_dim + values
    projected = channels + values + GATES_PER_HEAD[mixer.rule] * heads  # q, k, v; the output gate z; the gates
    continuing = step.q_len < step.kv_len
    norm_scale = mixer.value_dim if mixer.norm_per_head else values
    rows = [
        Row("in_proj", "matmul", 1, linear_cost(tokens, projected, h, dtypes, mixer.proj_bias),
            params=linear_params(projected, h, mixer.proj_bias)),
        Row("conv1d", "causal_conv1d", 1,
            _conv(step.batch, step.q_len, channels, mixer.conv_kernel, mixer.conv_bias, continuing, act),
            params=channels * (mixer.conv_kernel + (1 if mixer.conv_bias else 0))),
        Row("scan", "recurrent_scan", 1, _scan(mixer, step.batch, step.q_len, heads, key_heads, continuing, act),
            params=mixer.head_params * heads),
    ]
    if mixer.gated_norm:
        rows.append(Row("gated_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, heads, mixer.value_dim], dtype=act),
                        params=norm_scale))
    return rows + [
        Row("norm_gate", "elementwise", 1, _elementwise("silu_mul", (tokens, values), act, 2, 5)),
        Row("out_proj", "matmul", 1, linear_cost(tokens, h, values, dtypes, mixer.out_bias),
            params=linear_params(h, values, mixer.out_bias)),
    ]


@by_value(maxsize=1024)
def _conv(batch: int, q_len: int, channels: int, kernel: int, bias: bool, continuing: bool, dtype: str) -> OperatorCost:
    return causal_conv1d_cost(batch=batch, seq_len=q_len, channels=channels, kernel=kernel, bias=bias,
                              initial_state=continuing, dtype=dtype)


@by_value(maxsize=1024)
def _scan(mixer: RecurrentMixer, batch: int, q_len: int, heads: int, key_heads: int, continuing: bool,
          dtype: str) -> OperatorCost:
    return recurrent_scan_cost(rule=mixer.rule, batch=batch, seq_len=q_len, heads=heads, key_heads=key_heads,
                               key_dim=mixer.key_dim, value_dim=mixer.value_dim,
                               mode="recurrent" if continuing else "chunked", chunk=mixer.chunk,
                               initial_state=continuing, dtype=dtype, state_dtype=mixer.state_dtype or dtype)


def mixer_rows(arch: Architecture, group: LayerGroup, step: Step, dtypes: ModelDTypes) -> list[Row]:
    """The layer's token mixer: attention, a recurrent scan, both side by side (their outputs added), or nothing (an
    MLP-only block)."""
    dtypes = dtypes.module("attention")
    rows = attention_rows(arch, group, step, dtypes) if group.attends else []
    if group.recurs:
        if arch.recurrent is None:
            raise CostModelError("model", "a recurrent layer in a model without a recurrent mixer")
        rows += recurrent_rows(arch, arch.recurrent, step, dtypes)
    if group.attends and group.recurs:
        rows.append(Row("mixer_sum", "elementwise", 1, _elementwise("add", (step.tokens, arch.hidden), dtypes.activations)))
    return rows


def _attention_row(sinks: int = 0, **params) -> Row:
    """`sinks`: learned sink logits it owns (one per head), added to each softmax's denominator."""
    return Row("attention", "attention", 1, attention_cost(**params), attention_params=params, params=sinks)


@by_value(maxsize=1024)
def _rope(batch: int, q_len: int, heads: int, head_dim: int, dtype: str) -> OperatorCost:
    return rope_cost(batch=batch, seq_len=q_len, heads=heads, head_dim=head_dim, dtype=dtype)


@by_value(maxsize=1024)
def _cache_write(tokens: int, width: int, dtypes: ModelDTypes) -> OperatorCost:
    cost = elementwise_cost(op="cache_write", shape=[tokens, width], dtype=dtypes.activations, arity=1,
                            flops_per_element=0, out_dtype=dtypes.kv_cache)
    return OperatorCost(cost.kind, cost.flops, cost.bytes_read, cost.bytes_written, cost.compute_dtype, cost.unit,
                        ("kv cache: the new tokens' keys and values written once in the cache dtype",),
                        kv_bytes_written=cost.bytes_written)


def _compressed_attention_rows(arch: Architecture, spec: CompressedAttention, group: LayerGroup, step: Step,
                               dtypes: ModelDTypes) -> list[Row]:
    """DeepSeek-V4's attention on one device (service/core/transformer/compressed.py says what each row is)."""
    tp, tokens, act, d = step.tensor_parallel, step.tokens, dtypes.activations, arch.head_dim
    heads = _split(arch.heads, tp, "num_attention_heads")
    groups = _split(spec.o_groups, tp, "o_groups")
    small = compressed.small_params(arch, spec, group, heads)
    matmuls = {name: (n, k) for name, n, k in compressed.projections(
        arch, spec, heads, groups, compressed.indexer_on(group), compressed.pooling_width(group))}

    def project(name: str) -> Row:
        n, k = matmuls[name]
        if name != "o_a_proj":
            return Row(name, "matmul", 1, linear_cost(tokens, n, k, dtypes), params=linear_params(n, k))
        # Grouped: each of the device's groups reads its own heads' outputs (k wide) into its own o_lora_rank.
        cost = linear_cost(tokens, n, k, dtypes)
        extra = (groups - 1) * tokens * k * bytes_per_element(act)
        return Row(name, "matmul", 1, cost._replace(bytes_read=cost.bytes_read + extra), params=n * k)

    rows = [project("q_a_proj"),
            Row("q_a_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, spec.q_lora_rank], dtype=act),
                params=small["q_a_norm"]),
            project("q_b_proj"),
            Row("q_b_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, heads, d], dtype=act)),
            project("kv_proj"),
            Row("kv_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, d], dtype=act), params=small["kv_norm"]),
            Row("rope", "rope", 1, _rope(step.batch, step.q_len, heads + 1, spec.rope_dim, act)),
            Row("kv_cache_write", "elementwise", 1, _cache_write(tokens, d, dtypes))]
    entries_written = tokens // group.compress if group.compress else 0
    if group.compress:
        pooled = compressed.pooling_width(group) * d
        rows += [project("compressor_proj"),
                 Row("compressor_pool", "elementwise", 1, _elementwise("softmax_pool", (tokens, pooled), act, 2, 6),
                     params=small["compressor_bias_and_norm"])]
        if entries_written:
            rows.append(Row("compressed_cache_write", "elementwise", 1, _cache_write(entries_written, d, dtypes)))
    window, entries, index = compressed.attention_costs(
        arch, spec, group, batch=step.batch, heads=heads, q_len=step.q_len, kv_len=step.kv_len, dtype=act,
        kv_dtype=dtypes.kv_cache, implementation=step.attention_implementation)
    if compressed.indexer_on(group):
        di = spec.index_head_dim
        rows += [project("indexer_compressor_proj"),
                 Row("indexer_pool", "elementwise", 1, _elementwise("softmax_pool", (tokens, 2 * di), act, 2, 6),
                     params=small["indexer_bias_and_norm"]),
                 project("indexer_q_proj"), project("indexer_weights_proj")]
        if entries_written:
            rows.append(Row("indexer_cache_write", "elementwise", 1, _cache_write(entries_written, di, dtypes)))
        if index is not None:
            rows.append(Row("indexer", "sparse_index", 1, index[1], attention_params=index[0]))
    rows.append(Row("attention", "attention", 1, window[1], attention_params=window[0], params=small["sinks"]))
    if entries is not None:
        rows.append(Row("compressed_attention", "attention", 1, entries[1], attention_params=entries[0]))
    return rows + [project("o_a_proj"), project("o_b_proj")]


def _hyper_rows(prefix: str, arch: Architecture, spec: CompressedAttention, tokens: int, dtypes: ModelDTypes) -> list[Row]:
    """A block's hyper-connection: the mixes from the N streams (a small matmul), the collapse into the block's
    input (reads N x hidden, writes hidden), and after the block the spread and recombination of the streams (reads
    the output and the N streams, writes N streams: 2 N FLOPs an element)."""
    n, h, act = spec.hyper_streams, arch.hidden, dtypes.activations
    mixes = (2 + n) * n
    return [Row(f"{prefix}_hc_mix", "matmul", 1, linear_cost(tokens, mixes, n * h, dtypes.in_16_bits()),
                params=compressed.hyper_mix_params(arch, spec)),
            Row(f"{prefix}_hc_collapse", "elementwise", 1, _elementwise("weighted_sum", (tokens, n * h), act, 1, 2))]


def _hyper_spread(prefix: str, arch: Architecture, spec: CompressedAttention, tokens: int, dtypes: ModelDTypes) -> Row:
    n = spec.hyper_streams
    return Row(f"{prefix}_hc_spread", "elementwise", 1,
               _elementwise("hyper_combine", (tokens, n * arch.hidden), dtypes.activations, 2, 2 * n))


def _latent_attention_rows(arch: Architecture, lat: LatentAttention, step: Step, dtypes: ModelDTypes,
                           heads: int, indexed: bool = True) -> list[Row]:
    """Multi-head latent attention. Prefill expands the latent into per-head K and V and runs ordinary
    attention; decode (and a speculative verification, a few tokens after a cache) absorbs the up-projections
    into the query and output, attending over the cached latent directly (one shared K/V head of kv_lora_rank +
    rope dims). The latent cache is not split by tensor parallelism: every device holds it whole."""
    h, tokens, act = arch.hidden, step.tokens, dtypes.activations
    qk_head = lat.qk_nope_head_dim + lat.qk_rope_head_dim
    rows = []
    if lat.q_lora_rank:
        rows += [Row("q_a_proj", "matmul", 1, linear_cost(tokens, lat.q_lora_rank, h, dtypes),
                     params=linear_params(lat.q_lora_rank, h)),
                 Row("q_a_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, lat.q_lora_rank], dtype=act),
                     params=lat.q_lora_rank),
                 Row("q_b_proj", "matmul", 1, linear_cost(tokens, heads * qk_head, lat.q_lora_rank, dtypes),
                     params=linear_params(heads * qk_head, lat.q_lora_rank))]
    else:
        rows.append(Row("q_proj", "matmul", 1, linear_cost(tokens, heads * qk_head, h, dtypes),
                        params=linear_params(heads * qk_head, h)))
    rows += [
        Row("kv_a_proj", "matmul", 1, linear_cost(tokens, lat.kv_lora_rank + lat.qk_rope_head_dim, h, dtypes),
            params=linear_params(lat.kv_lora_rank + lat.qk_rope_head_dim, h)),
        Row("kv_a_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, lat.kv_lora_rank], dtype=act),
            params=lat.kv_lora_rank),
        Row("rope", "rope", 1, _rope(step.batch, step.q_len, heads + 1, lat.qk_rope_head_dim, act)),
        Row("kv_cache_write", "elementwise", 1, _cache_write(tokens, lat.kv_lora_rank + lat.qk_rope_head_dim, dtypes)),
    ]
    # With DeepSeek's sparse attention each query attends to the indexer's top_k keys only: the pairs and the keys
    # read are those of a window of top_k (the cache still keeps every token).
    selected = {}
    if arch.sparse_index is not None:
        if indexed:
            rows += _indexer_rows(arch, arch.sparse_index, step, dtypes, lat.q_lora_rank or arch.hidden,
                                  lat.qk_rope_head_dim)
        selected = {"window": arch.sparse_index.top_k}
    if step.q_len >= step.kv_len:  # a prompt with no cache before it
        kv_b = heads * (lat.qk_nope_head_dim + lat.v_head_dim)
        rows += [
            Row("kv_b_proj", "matmul", 1, linear_cost(step.batch * step.kv_len, kv_b, lat.kv_lora_rank, dtypes),
                params=linear_params(kv_b, lat.kv_lora_rank)),
            _attention_row(batch=step.batch, heads=heads, head_dim=qk_head, v_head_dim=lat.v_head_dim, q_len=step.q_len,
                           kv_len=step.kv_len, dtype=act, kv_dtype=act, causal=True,
                           implementation=step.attention_implementation, **selected),
        ]
    else:
        latent_dim = lat.kv_lora_rank + lat.qk_rope_head_dim
        # Each head has its own absorbed up-projection: per-item B, but weights all the same.
        per_head = partial(matmul_cost, batch=heads, weight_shared=False, b_is_weight=True, a_dtype=act,
                           b_dtype=dtypes.weights, c_dtype=act)
        rows += [
            # The absorbed up-projections are kv_b_proj's weights, its key half and its value half.
            Row("q_absorb", "matmul", 1, per_head(m=tokens, n=lat.kv_lora_rank, k=lat.qk_nope_head_dim),
                params=heads * lat.qk_nope_head_dim * lat.kv_lora_rank),
            _attention_row(batch=step.batch, heads=heads, kv_heads=1, head_dim=latent_dim, v_head_dim=lat.kv_lora_rank,
                           q_len=step.q_len, kv_len=step.kv_len, dtype=act, kv_dtype=dtypes.kv_cache, causal=True,
                           shared_kv=True, implementation=step.attention_implementation, **selected),
            Row("out_absorb", "matmul", 1, per_head(m=tokens, n=lat.v_head_dim, k=lat.kv_lora_rank),
                params=heads * lat.kv_lora_rank * lat.v_head_dim),
        ]
    rows.append(Row("o_proj", "matmul", 1, linear_cost(tokens, h, heads * lat.v_head_dim, dtypes),
                    params=linear_params(h, heads * lat.v_head_dim)))
    return rows


def _indexer_rows(arch: Architecture, index: SparseIndexer, step: Step, dtypes: ModelDTypes, query_input: int,
                  rotated: int) -> list[Row]:
    """The lightning indexer, whole on every device (it is small, and each device selects for its own heads): its
    queries from `query_input` (DeepSeek's compressed query, MiniMax-M3's hidden state), one key a token (normed,
    `rotated` of its dimensions rotated, cached), DeepSeek's weight per head, and the scoring of every cached key
    (MiniMax-M3's max over a block counted as DeepSeek's relu and weighted sum, 3 FLOPs of a head's 2 x 128 + 3)."""
    tokens, h, act, d = step.tokens, arch.hidden, dtypes.activations, index.head_dim
    params: dict = {"batch": step.batch, "heads": index.heads, "head_dim": d, "q_len": step.q_len, "kv_len": step.kv_len,
                    "top_k": index.top_k // index.block, "dtype": act, "kv_dtype": dtypes.kv_cache}
    rows = [Row("indexer_q_proj", "matmul", 1, linear_cost(tokens, index.heads * d, query_input, dtypes),
                params=linear_params(index.heads * d, query_input)),
            Row("indexer_k_proj", "matmul", 1, linear_cost(tokens, d, h, dtypes), params=linear_params(d, h))]
    if index.weighted:
        rows.append(Row("indexer_k_norm", "layernorm", 1, layernorm_cost(shape=[tokens, d], dtype=act), params=2 * d))
    else:
        rows += [Row("indexer_q_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, index.heads, d], dtype=act), params=d),
                 Row("indexer_k_norm", "rmsnorm", 1, rmsnorm_cost(shape=[tokens, d], dtype=act), params=d)]
    rows.append(Row("indexer_rope", "rope", 1, _rope(step.batch, step.q_len, index.heads + 1, rotated, act)))
    if index.weighted:
        rows.append(Row("indexer_weights_proj", "matmul", 1, linear_cost(tokens, index.heads, h, dtypes),
                        params=linear_params(index.heads, h)))
    return rows + [Row("indexer_cache_write", "elementwise", 1, _cache_write(tokens, d, dtypes)),
                   Row("indexer", "sparse_index", 1, sparse_index_cost(**params), attention_params=params)]


def _mlp_rows(prefix: str, arch: Architecture, tokens: int, width: int, dtypes: ModelDTypes) -> list[Row]:
    act, h = dtypes.activations, arch.hidden
    up = (2 if arch.gated_mlp else 1) * width
    rows = [Row(f"{prefix}gate_up_proj" if arch.gated_mlp else f"{prefix}up_proj", "matmul", 1,
                linear_cost(tokens, up, h, dtypes, arch.mlp_bias), params=linear_params(up, h, arch.mlp_bias)),
            Row(f"{prefix}{arch.activation}", "elementwise", 1, _elementwise(arch.activation, (tokens, width), act))]
    if arch.gated_mlp:
        rows.append(Row(f"{prefix}gate_mul", "elementwise", 1, _elementwise("mul", (tokens, width), act)))
    rows.append(Row(f"{prefix}down_proj", "matmul", 1, linear_cost(tokens, h, width, dtypes, arch.mlp_bias),
                    params=linear_params(h, width, arch.mlp_bias)))
    return rows


class ExpertShard(NamedTuple):
    """The routed experts as one device runs them: the token rows it multiplies, the experts it holds and how
    many of them the step is expected to hit, and each expert's width on it."""

    token_rows: int
    experts: int
    active_experts: float
    width: int


def tensor_parallel_shard(moe: MoE, tokens: int, tensor_parallel: int) -> ExpertShard:
    """Every expert on every device, its width split t ways (Megatron's tensor parallelism): each device
    multiplies all the routed rows of the step."""
    return ExpertShard(tokens * moe.top_k, moe.experts, expected_active_experts(tokens, moe.experts, moe.top_k),
                       _split(moe.expert_intermediate, tensor_parallel, "moe_intermediate_size"))


def router_params(arch: Architecture, moe: MoE, hash_routed: bool = False) -> int:
    """A MoE layer's router: its experts x hidden scores, and beside them the score-correction bias a checkpoint
    stores (one per expert), or a hash-routed layer's token-id table (vocab x top-k ids) in its place."""
    stored = arch.vocab * moe.top_k if hash_routed else moe.experts if moe.router_bias else 0
    scales = arch.hidden + moe.experts if moe.router_scales else 0
    return moe.experts * arch.hidden + stored + scales


def _moe_rows(arch: Architecture, moe: MoE, step: Step, dtypes: ModelDTypes, shard: ExpertShard | None = None,
              hash_routed: bool = False) -> list[Row]:
    """`hash_routed`: experts chosen by a fixed token-id table (DeepSeek-V4's first layers): the router's
    weights still score them; its table (vocab x top-k ids) is stored in place of a score-correction bias."""
    tokens, tp, act, h = step.tokens, step.tensor_parallel, dtypes.activations, arch.hidden
    shard = shard or tensor_parallel_shard(moe, tokens, tp)
    width, active, routed = shard.width, shard.active_experts, shard.token_rows
    gate_up = (2 if arch.gated_mlp else 1) * width
    r_h = moe.routed_width(h)
    expert_up, expert_down = linear_params(gate_up, r_h, arch.mlp_bias), linear_params(r_h, width, arch.mlp_bias)
    rows = [
        Row("router", "matmul", 1, linear_cost(tokens, moe.experts, h, dtypes.in_16_bits()),
            params=router_params(arch, moe, hash_routed)),
        Row("router_softmax", "softmax", 1, softmax_cost(shape=[tokens, moe.experts], dtype=act)),
    ]
    if moe.latent_size:  # whole on every device: the tokens leave for their experts at the latent width
        rows.append(Row("latent_down_proj", "matmul", 1, linear_cost(tokens, r_h, h, dtypes, arch.mlp_bias),
                        params=linear_params(r_h, h, arch.mlp_bias)))
    rows += [
        Row("experts_gate_up_proj", "grouped_matmul", 1,
            grouped_expert_matmul(token_rows=routed, active_experts=active, n=gate_up, k=r_h, dtypes=dtypes),
            params=shard.experts * expert_up, active_params=moe.top_k * expert_up),
        Row(f"experts_{arch.activation}", "elementwise", 1, _elementwise(arch.activation, (routed, width), act)),
    ]
    if arch.gated_mlp:
        rows.append(Row("experts_gate_mul", "elementwise", 1, _elementwise("mul", (routed, width), act)))
    rows += [
        Row("experts_down_proj", "grouped_matmul", 1,
            grouped_expert_matmul(token_rows=routed, active_experts=active, n=r_h, k=width, dtypes=dtypes),
            params=shard.experts * expert_down, active_params=moe.top_k * expert_down),
        Row("experts_combine", "elementwise", 1,
            _elementwise("combine", (tokens, r_h), act, moe.top_k, 2 * moe.top_k)),
    ]
    if moe.latent_size:
        rows.append(Row("latent_up_proj", "matmul", 1, linear_cost(tokens, h, r_h, dtypes, arch.mlp_bias),
                        params=linear_params(h, r_h, arch.mlp_bias)))
    if moe.shared_experts:
        rows += _mlp_rows("shared_", arch, tokens, _split(moe.shared_intermediate, tp, "shared expert width"),
                          dtypes.module("dense_mlp" if moe.shared_is_dense_mlp else "shared_experts"))
    if moe.shared_expert_gate:  # sigmoid(x . w) scales the shared expert's output
        rows += [Row("shared_expert_gate", "matmul", 1, linear_cost(tokens, 1, h, dtypes), params=h),
                 Row("shared_expert_scale", "elementwise", 1, _elementwise("sigmoid_mul", (tokens, h), act, 2, 5))]
    if moe.block_norms:  # Gemma 4: the experts' input and each branch's output normed (the router's unscaled norm uncounted)
        rows.append(Row("moe_block_norms", arch.norm, moe.block_norms, _norm(arch, [tokens, h], dtypes),
                        params=norm_weights(arch)))
    return rows


def mlp_rows(arch: Architecture, group: LayerGroup, step: Step, dtypes: ModelDTypes,
             shard: ExpertShard | None = None) -> list[Row]:
    """The layer's MLP: routed experts (and shared ones) on a MoE layer, else the dense MLP. `shard`: how the
    routed experts land on this device, when not by tensor parallelism over the step's devices."""
    if not group.has_mlp:
        return []
    if group.moe:
        if arch.moe is None:
            raise CostModelError("model", "a MoE layer in a model without experts")
        return _moe_rows(arch, arch.moe, step, dtypes, shard, group.hash_routed)
    width = arch.intermediate if group.intermediate is None else group.intermediate
    return _mlp_rows("", arch, step.tokens, _split(width, step.tensor_parallel, "intermediate_size"),
                     dtypes.module("dense_mlp"))


def mlp_block(arch: Architecture, group: LayerGroup, step: Step, dtypes: ModelDTypes) -> list[Row]:
    """The MLP with the collectives of the step's tensor parallelism."""
    rows = mlp_rows(arch, group, step, dtypes)
    return tensor_parallel_block("mlp", rows, arch, step, dtypes) if rows else []


def expert_exchange(rows: list[Row], sent_bytes: float) -> list[Row]:
    """The routed experts' rows between a dispatch all-to-all (before the first of them) and a combine (after
    their down projection), each sending `sent_bytes` per device."""
    first = next(i for i, row in enumerate(rows) if row.name.startswith("experts_"))
    last = next(i for i, row in enumerate(rows) if row.name == "experts_down_proj") + 1
    return (rows[:first] + [Row("moe_dispatch", "alltoall", 1, comm_bytes=sent_bytes)] + rows[first:last]
            + [Row("moe_combine", "alltoall", 1, comm_bytes=sent_bytes)] + rows[last:])


def layer_rows(arch: Architecture, group: LayerGroup, step: Step, dtypes: ModelDTypes,
               mlp: Callable[[Architecture, LayerGroup, Step, ModelDTypes], list[Row]] = mlp_block) -> list[Row]:
    """`mlp`: the MLP block's rows with their collectives (a serving deployment lays the experts out its own way)."""
    stream, act = step.stream_tokens, dtypes.activations
    norms_each = arch.norms_per_layer // 2
    norm = _norm(arch, [stream, arch.hidden], dtypes)
    residual = _elementwise("add", (stream, arch.hidden), act)
    rows: list[Row] = []
    spec = arch.compressed
    for prefix, present, block in (("attn", group.mixer != "none", lambda: tensor_parallel_block(
            "attn", mixer_rows(arch, group, step, dtypes), arch, step, dtypes)),
                                   ("mlp", group.has_mlp, lambda: mlp(arch, group, step, dtypes))):
        if not present:
            continue
        if spec is not None:  # hyper-connections in place of the residual add
            rows += _hyper_rows(prefix, arch, spec, stream, dtypes)
        rows.append(Row(f"{prefix}_norm", arch.norm, norms_each, norm, params=norm_weights(arch)))
        rows += block()
        rows.append(_hyper_spread(prefix, arch, spec, stream, dtypes) if spec is not None
                    else Row(f"{prefix}_residual", "elementwise", 1, residual))
    if arch.layer_scalar:
        rows.append(Row("layer_scalar", "elementwise", 1, _elementwise("mul", (stream, arch.hidden), act), params=1))
    return rows


def model_level_rows(arch: Architecture, step: Step, dtypes: ModelDTypes) -> tuple[list[Row], list[Row]]:
    """The embedding before the layers; the final norm and LM head after them. The LM head runs on the
    last token of each sequence only (what serving engines compute), split over the vocabulary under TP."""
    vocab = _split(arch.vocab, step.tensor_parallel, "vocab_size") if step.tensor_parallel > 1 else arch.vocab
    embed = _embedding(step.tokens, arch.hidden, arch.vocab, dtypes.unquantised)
    # With hyper-connections the streams are collapsed first (their weights counted with the final norm's).
    hyper = compressed.hyper_head_params(arch, arch.compressed) if arch.compressed is not None else 0
    head = [Row("final_norm", arch.norm, 1, _norm(arch, [step.stream_tokens, arch.hidden], dtypes),
                params=norm_weights(arch) + hyper),
            # A tied head is the embedding's table: the embedding row owns it.
            Row("lm_head", "matmul", 1, linear_cost(step.batch * step.scored_tokens, vocab, arch.hidden, dtypes.head(arch.tied_embeddings)),
                params=0 if arch.tied_embeddings else linear_params(vocab, arch.hidden))]
    return [Row("embedding", "embedding", 1, embed, params=arch.vocab * arch.hidden)], head


@by_value(maxsize=1024)
def _embedding(tokens: int, hidden: int, vocab: int, dtype: str) -> OperatorCost:
    """The embedding lookup, its weights the rows it gathers (at most the whole table)."""
    embed = embedding_cost(tokens=tokens, hidden=hidden, vocab=vocab, dtype=dtype)
    return OperatorCost(embed.kind, embed.flops, embed.bytes_read, embed.bytes_written, embed.compute_dtype, embed.unit,
                        embed.assumptions, weight_bytes_read=at_most(tokens, vocab) * hidden * bytes_per_element(dtype))
