"""A normalised description of a decoder-only transformer: what every family's reader produces
(service/core/transformer/families.py reads Hugging Face configs) and what the generic schema describes
directly (`from_generic`). The cost models read only this, never a config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from service.core.errors import CostModelError

MAX_DIMENSION = 2**24
# A model's positions (max_position_embeddings) bound no work, only the lengths it may be asked about.
MAX_POSITIONS = 2**40
MAX_LAYERS = 2**16


class ConfigError(CostModelError):
    """A model description the service cannot interpret; `fields` lists every offending key."""

    def __init__(self, fields: list[str], reason: str):
        super().__init__(fields[0] if fields else "model", reason)
        self.fields = fields


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V come from a cached compressed latent."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class SparseIndexer:
    """DeepSeek Sparse Attention (V3.2): a lightning indexer of `heads` x `head_dim` scores every cached key and
    each query attends to its best `top_k` only. The indexer caches one head_dim key a token beside the latent.
    MiniMax-M3's picks whole blocks of `block` keys (top_k / block of them, the query's own block among them), its
    query and key RMS-normed and no weight a head."""

    heads: int
    head_dim: int
    top_k: int  # keys each query attends to
    block: int = 1
    weighted: bool = True  # DeepSeek's weight a head (weights_proj) and layer-normed key; else q/k RMS norms


@dataclass(frozen=True)
class Quantization:
    """How a checkpoint stores its weights: `weights` for every quantised linear layer (or only the routed experts'
    when `experts_only`), with one `scale_bytes` scale per `group_size` elements; `source` says where it was read."""

    weights: str
    group_size: int | None
    scale_bytes: float
    source: str
    experts_only: bool = False
    activations: str | None = None  # W8A8 schemes compute in the weights' type
    # Module classes its ignore lists leave in 16 bits (layers.KEPT_MODULES), and whole layers they leave so.
    kept: tuple[str, ...] = ()
    kept_layers: tuple[int, ...] = ()
    # The routed experts' own format where it differs from the other weights' (DeepSeek-V4: fp8 blocks, fp4 experts).
    experts: str | None = None
    experts_group_size: int | None = None
    experts_scale_bytes: float = 1.0


@dataclass(frozen=True)
class RecurrentMixer:
    """A linear-attention or state-space layer's token mixer (operators/recurrent.py counts its scan): `rule`
    gated_delta (Gated DeltaNet, Qwen3-Next) or ssd (Mamba-2). Both project the stream into queries and keys
    (`key_heads` x `key_dim`; Mamba-2's C and B, its groups x its state size), values and an output gate
    (`heads` x `value_dim`) and per-head gates; convolve queries, keys and values over the last `conv_kernel`
    tokens; scan them through a key_dim x value_dim state per head; normalise the output per head, gated; and
    project it back."""

    rule: str
    heads: int
    key_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    chunk: int
    head_params: int  # parameters per head beside the projections (dt bias and A; Mamba-2 adds D)
    norm_per_head: bool  # the gated norm's scale is one head's width shared by all (Gated DeltaNet), else all heads'
    proj_bias: bool = False  # on the input projection
    conv_bias: bool = False
    out_bias: bool = False  # on the output projection
    gated_norm: bool = True  # False: the output only gated, not normalised (Falcon-H1 without mamba_rms_norm)
    state_dtype: str | None = None  # the checkpoint's own type for the state (config mamba_ssm_cache_dtype)

    @property
    def conv_channels(self) -> int:
        return 2 * self.key_heads * self.key_dim + self.heads * self.value_dim


@dataclass(frozen=True)
class CompressedAttention:
    """DeepSeek-V4's attention: one K=V head of the attention's head_dim (multi-query), queries through a low-rank
    `q_lora_rank`, every query over the last `window` tokens and over compressed entries (LayerGroup.compress),
    an indexer (`index_heads` x `index_head_dim`) picking `index_topk` of them on the compressed-sparse layers; the
    heads' outputs projected in `o_groups` groups to `o_lora_rank` each, then to the hidden size; and the residual
    stream carried as `hyper_streams` parallel streams mixed in and out of each block (manifold hyper-connections)."""

    q_lora_rank: int
    window: int
    o_groups: int
    o_lora_rank: int
    index_heads: int
    index_head_dim: int
    index_topk: int
    rope_dim: int
    hyper_streams: int


@dataclass(frozen=True)
class MoE:
    experts: int
    top_k: int
    expert_intermediate: int
    shared_experts: int = 0
    shared_intermediate: int = 0
    router_bias: bool = False  # DeepSeek-V3's per-expert score correction bias
    shared_expert_gate: bool = False  # Qwen3-Next: a sigmoid gate (one weight vector) scales the shared expert
    # Nemotron-3 Super's latent experts: the routed tokens are projected down to this width before the experts (and
    # their all-to-all) and back up after them; 0: the experts read and write the hidden width.
    latent_size: int = 0
    # Gemma 4's block beside its dense MLP: the router scales its (unscaled-normed) input by a learned vector and each
    # expert's weight by a learned scalar; the block has norms of its own (the experts' input, each branch's output).
    router_scales: bool = False
    block_norms: int = 0
    shared_is_dense_mlp: bool = False  # the shared expert is the layer's whole dense MLP (Gemma 4's `mlp`)

    def routed_width(self, hidden: int) -> int:
        """The width the routed experts read and write (and an expert-parallel all-to-all sends)."""
        return self.latent_size or hidden


@dataclass(frozen=True)
class LayerGroup:
    """`count` identical layers: the analysis costs one and multiplies."""

    count: int
    sliding_window: int | None
    moe: bool
    chunk: int | None = None  # chunked attention (Llama 4's local layers): keys of the query's own chunk only
    rope: bool = True  # False: a layer without positional rotation (Llama 4's global NoPE layers)
    # The token mixer: attention, a recurrent scan (Architecture.recurrent), both side by side on the same input
    # with their outputs added (parallel: Falcon-H1), or none (an MLP-only block).
    mixer: str = "attention"
    has_mlp: bool = True  # False: a block of its mixer alone (Nemotron-H's mamba and attention blocks)
    # Whether the layer runs its own sparse-attention indexer (Architecture.sparse_index) and caches its keys; False:
    # it reuses the previous indexed layer's selection (GLM-5.2's "shared" layers).
    indexed: bool = True
    # Where the model's layers differ in shape (MiMo-V2-Flash's window layers: twice the K/V heads and attention
    # sinks; Nemotron-NAS's per-layer blocks): this group's K/V heads, sinks and dense MLP width, else the model's.
    kv_heads: int | None = None
    sinks: bool | None = None
    intermediate: int | None = None
    # DeepSeek-V4's attention (Architecture.compressed): besides its window, every `compress` tokens pooled into one
    # cached entry (4: compressed sparse attention, an indexer picking the entries; 128: heavily compressed, all of
    # them); 0: the window alone.
    compress: int = 0
    hash_routed: bool = False  # its experts chosen by a fixed token-id table (DeepSeek-V4's first layers)
    # Gemma 4's global layers: heads of their own width, and values taken from the key projection (no v_proj; the
    # value is that output normed without a scale, the key it normed with one and rotated: both are cached).
    head_dim: int | None = None
    value_from_key: bool = False

    @property
    def attends(self) -> bool:
        return self.mixer in ("attention", "parallel")

    @property
    def recurs(self) -> bool:
        return self.mixer in ("recurrent", "parallel")


class LayerShape(NamedTuple):
    """What a family says of one layer where its layers differ (LayerGroup's fields of the same names)."""

    kv_heads: int | None = None
    sinks: bool | None = None
    intermediate: int | None = None
    compress: int = 0
    hash_routed: bool = False
    head_dim: int | None = None
    value_from_key: bool = False


@dataclass(frozen=True)
class Architecture:
    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int  # dense MLP width (dense layers)
    gated_mlp: bool
    activation: str
    tied_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm: str = "rmsnorm"
    norms_per_layer: int = 2
    qk_norm: bool = False
    latent: LatentAttention | None = None
    moe: MoE | None = None
    groups: tuple[LayerGroup, ...] = ()
    defaults_applied: tuple[str, ...] = field(default=())
    # The longest sequence the model's positions cover (config max_position_embeddings); None: not stated.
    max_positions: int | None = None
    attention_sinks: bool = False  # a learned sink logit per head (gpt-oss): one parameter per head
    qk_norm_weights: bool = True  # q/k norms with a scale (RMSNorm); False: a plain L2 norm (Llama 4)
    qk_norm_per_head: bool = True  # False: one norm over all heads' queries (keys) at once (MiniMax-M2)
    # Parameters outside the decoder the checkpoint ships (a vision tower and its projector): weights in memory,
    # not part of a text step.
    vision_params: int = 0
    # The checkpoint's own weight formats (config quantization_config), the default when a request names no dtypes.
    quantization: Quantization | None = None
    recurrent: RecurrentMixer | None = None  # the mixer of the layers whose mixer is "recurrent"
    # Attention over the keys an indexer picks: every latent layer's (DeepSeek-V3.2); an ordinary attention layer's
    # where it runs an indexer (LayerGroup.indexed: MiniMax-M3's sparse layers), the others attending fully.
    sparse_index: SparseIndexer | None = None
    attention_output_gate: bool = False  # Qwen3-Next: q_proj also yields a sigmoid gate on the attention output
    # Step-3.7: a projection of its own (g_proj, unbiased) gives each head one sigmoid gate on its output
    head_gate: bool = False
    rotary_fraction: float = 1.0  # the share of each head's dimensions that RoPE rotates (partial_rotary_factor)
    v_head_dim: int | None = None  # a value head's width where it differs from head_dim (MiMo-V2-Flash: 128 of 192)
    # How a request extended max_positions (a RoPE scaling the run applies), for the answer; None: as configured.
    positions_extended: str | None = None
    compressed: CompressedAttention | None = None  # DeepSeek-V4's attention and hyper-connections
    v_norm: bool = False  # Gemma 4: the values RMS-normed (without a scale) before attention
    layer_scalar: bool = False  # Gemma 4: each layer's output multiplied by a stored scalar (one weight a layer)

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    def head_dim_of(self, group: LayerGroup) -> int:
        return group.head_dim or self.head_dim

    def value_dim_of(self, group: LayerGroup) -> int:
        return self.v_head_dim or self.head_dim_of(group)

    def projected_value_dim(self, group: LayerGroup) -> int:
        """A value head's width in the layer's own projection: 0 where the values come from the key projection."""
        return 0 if group.value_from_key else self.value_dim_of(group)

    def kv_heads_of(self, group: LayerGroup) -> int:
        return group.kv_heads or self.kv_heads

    def kv_head_counts(self) -> set[int]:
        """The K/V head counts of the model's attention layers (one, unless its layers differ)."""
        return {self.kv_heads_of(g) for g in self.groups if g.attends} or {self.kv_heads}

    def layer_kinds(self) -> str:
        return ", ".join(f"{g.count} x {_mixer_label(g)}{_mlp_label(g)}"
                         + (f" (window {g.sliding_window})" if g.sliding_window else "")
                         + (_compression_label(g, self.compressed.window) if self.compressed else "")
                         for g in self.groups)


def _compression_label(group: LayerGroup, window: int) -> str:
    kind = f"window {window} + 1 entry per {group.compress} tokens" if group.compress else f"window {window}"
    return f" ({kind}{', hash-routed' if group.hash_routed else ''})"


def _mixer_label(group: LayerGroup) -> str:
    return {"attention": "", "recurrent": "recurrent ", "parallel": "attention + recurrent ",
            "none": "MLP-only "}[group.mixer]


def _mlp_label(group: LayerGroup) -> str:
    if not group.has_mlp:
        return "attention" if group.mixer == "attention" else "mixer only"
    return "MoE" if group.moe else "dense"


def with_rope_scaling(arch: Architecture, rope_type: str, factor: float, original: int | None) -> Architecture:
    """The model as a run that scales its RoPE serves it (vLLM's --rope-scaling or --hf-overrides, SGLang's
    --json-model-override-args): its positions extended to `original` (else its max_position_embeddings) x factor.
    The step's cost does not change: the rotation's FLOPs are the same at any frequency."""
    base = original or arch.max_positions
    if base is None:
        raise CostModelError("rope_scaling.original_max_position_embeddings",
                             "the model states no max_position_embeddings: give the positions it was trained on")
    extended = min(int(base * factor), MAX_POSITIONS)
    return replace(arch, max_positions=extended, positions_extended=(
        f"positions: max_position_embeddings {extended:,} = {base:,} x {factor:g}, the request's rope_scaling "
        f"({rope_type}); the model was configured for {arch.max_positions or base:,} and the step's cost is unchanged"))


def group_layers(flags: list[tuple[int | None, bool]], chunks: list[int | None] | None = None,
                 ropes: list[bool] | None = None, mixers: list[str] | None = None,
                 mlps: list[bool] | None = None, indexed: list[bool] | None = None,
                 shapes: list[LayerShape] | None = None) -> tuple[LayerGroup, ...]:
    """Identical layers counted together, in order of first appearance: (window, MoE) per layer, and per layer its
    attention chunk, whether it rotates positions, its mixer, whether it has an MLP, whether it runs its own
    indexer and its LayerShape where the family says."""
    counts: dict[tuple, int] = {}
    for index, (window, moe) in enumerate(flags):
        key = (window, moe, chunks[index] if chunks else None, ropes[index] if ropes else True,
               mixers[index] if mixers else "attention", mlps[index] if mlps else True,
               indexed[index] if indexed else True, *(shapes[index] if shapes else LayerShape()))
        counts[key] = counts.get(key, 0) + 1
    return tuple(LayerGroup(count, *key) for key, count in counts.items())


def from_generic(spec: Mapping[str, Any]) -> Architecture:
    """The explicit schema for any other architecture (already validated by the HTTP contract)."""
    experts = spec.get("experts") or 0
    moe = MoE(experts, spec["top_k"], spec["expert_intermediate"], spec.get("shared_experts", 0),
              spec.get("shared_experts", 0) * spec["expert_intermediate"]) if experts else None
    latent = LatentAttention(**spec["latent"]) if spec.get("latent") else None
    return Architecture(
        family="generic", hidden=spec["hidden"], layers=spec["layers"], heads=spec["heads"],
        kv_heads=spec.get("kv_heads") or spec["heads"], head_dim=spec.get("head_dim") or spec["hidden"] // spec["heads"],
        vocab=spec["vocab"], intermediate=spec.get("intermediate") or 0, gated_mlp=spec.get("gated_mlp", True),
        activation=spec.get("activation", "silu"), tied_embeddings=spec.get("tied_embeddings", False),
        qkv_bias=spec.get("qkv_bias", False), o_bias=spec.get("qkv_bias", False), norm=spec.get("norm", "rmsnorm"),
        moe=moe, groups=_generic_groups(spec, bool(moe)), max_positions=spec.get("max_position_embeddings"),
        latent=latent, recurrent=_generic_recurrent(spec.get("recurrent")),
    )


def _generic_recurrent(spec: Mapping[str, Any] | None) -> RecurrentMixer | None:
    """The generic form's recurrent mixer, with what its rule implies: Gated DeltaNet's dt bias and A a head and a
    norm one head wide; Mamba-2's dt bias, A and D a head and a norm over every head."""
    if not spec:
        return None
    delta = spec["rule"] == "gated_delta"
    return RecurrentMixer(spec["rule"], spec["heads"], spec["key_heads"], spec["key_dim"], spec["value_dim"],
                          spec.get("conv_kernel", 4), spec.get("chunk", 64), head_params=2 if delta else 3,
                          norm_per_head=delta, conv_bias=spec.get("conv_bias", False),
                          state_dtype=spec.get("state_dtype"))


def _generic_groups(spec: Mapping[str, Any], moe: bool) -> tuple[LayerGroup, ...]:
    """The generic form's layers as groups: one of every layer alike, or one per distinct kind of `layer_types`
    (kinds described twice are counted together)."""
    kinds = spec.get("layer_types")
    if not kinds:
        return (LayerGroup(spec["layers"], spec.get("sliding_window"), moe),)
    mixers = {"recurrent": "recurrent", "none": "none"}
    counts: dict[tuple, int] = {}
    for kind in kinds:
        attention, mlp = kind.get("attention", "full"), kind.get("mlp", "dense")
        key = (kind.get("window") if attention == "sliding" else None, mlp == "moe",
               kind.get("chunk") if attention == "chunked" else None, kind.get("rope", True),
               mixers.get(attention, "attention"), mlp != "none")
        counts[key] = counts.get(key, 0) + kind.get("count", 1)
    return tuple(LayerGroup(count, *key) for key, count in counts.items())
