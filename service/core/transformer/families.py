"""One reader per model family: how a Hugging Face config.json of each `model_type` becomes an Architecture.

Every family reads the same core dimensions (hidden size, layers, heads, vocabulary, activation, MLP width);
a family is then a few choices, each a small function: which projections carry biases, which layers attend
over a sliding window, which layers route to experts, whether attention is latent, plus a handful of
constants (norms per layer, q/k norms, whether embeddings are tied by default). A llama-like family is one
`Family(...)` line in FAMILIES; docs/developing.md has the recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from service.core.transformer import vision
from service.core.transformer.architecture import (
    MAX_POSITIONS,
    Architecture,
    CompressedAttention,
    ConfigError,
    LatentAttention,
    LayerShape,
    MoE,
    Quantization,
    RecurrentMixer,
    SparseIndexer,
    group_layers,
)
from service.core.transformer.config_defaults import WithClassDefaults
from service.core.transformer.config_reader import ConfigReader
from service.core.transformer.quantization import checkpoint_quantization, with_dense_layers

Biases = tuple[bool, bool, bool]  # q/k/v projections, output projection, MLP
Windows = list[int | None]  # per layer: its sliding window, or None for full attention
Experts = tuple[MoE | None, list[bool]]  # the experts, and per layer whether it routes to them


# Which projections carry biases.
def no_biases(r: ConfigReader) -> Biases:
    return False, False, False


def attention_bias(r: ConfigReader) -> Biases:
    bias = r.flag("attention_bias", False)
    return bias, bias, False


def attention_and_mlp_bias(r: ConfigReader) -> Biases:
    bias = r.flag("attention_bias", False)
    return bias, bias, r.flag("mlp_bias", False)


def qkv_bias_only(r: ConfigReader) -> Biases:
    # GLM-4.5: attention_bias puts biases on q, k and v, never on the output projection.
    return r.flag("attention_bias", False), False, False


def attention_and_expert_bias(r: ConfigReader) -> Biases:
    # gpt-oss: biases on every attention projection, and on every expert's projections.
    bias = r.flag("attention_bias", True)
    return bias, bias, True


def qkv_bias_always(r: ConfigReader) -> Biases:
    # Qwen2 projects q, k and v with biases whatever the config says.
    return True, False, False


# The sliding window's size, and which layers use it.
def sliding_window(r: ConfigReader) -> int | None:
    return r.optional_int("sliding_window")


def sliding_window_or_size(r: ConfigReader) -> int | None:
    # Gemma 2 alternates local and global layers, so it always has a window; older configs name it differently.
    window = sliding_window(r) or r.optional_int("sliding_window_size")
    if not window:
        r.missing.append("sliding_window")
    return window


def full_attention(r: ConfigReader, layers: int, window: int | None) -> Windows:
    return [None] * layers


def window_on_every_layer(r: ConfigReader, layers: int, window: int | None) -> Windows:
    return [window] * layers if window else [None] * layers


def window_above_max_window_layers(r: ConfigReader, layers: int, window: int | None) -> Windows:
    # Qwen: layers below max_window_layers attend fully, and only when use_sliding_window is set.
    if not (window and r.flag("use_sliding_window", False)):
        return [None] * layers
    first = r.int("max_window_layers", layers, minimum=0)
    return [window if i >= first else None for i in range(layers)]


def window_on_even_layers(r: ConfigReader, layers: int, window: int | None) -> Windows:
    return [window if i % 2 == 0 else None for i in range(layers)]


def window_but_every_nth_layer(r: ConfigReader, layers: int, window: int | None) -> Windows:
    # Gemma 3: five local layers to one global, every sliding_window_pattern-th layer global (when no layer_types).
    pattern = r.int("sliding_window_pattern", 6, note=" (the config class default)")
    return [None if (i + 1) % (pattern or 1) == 0 else window for i in range(layers)]


def windows_by_layer_types(config: Mapping[str, Any], layers: int, window: int | None) -> Windows | None:
    """Newer configs list each layer's attention (`layer_types`): that list decides, whatever the family."""
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == layers and window and all(
            isinstance(kind, str) for kind in layer_types):
        return [window if kind == "sliding_attention" else None for kind in layer_types]
    return None


# Which layers route tokens to experts.
def dense(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    return None, [False] * layers


def mixtral_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    return MoE(r.int("num_local_experts"), r.int("num_experts_per_tok"), intermediate), [True] * layers


def minimax_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    moe, routed = mixtral_experts(r, layers, intermediate, config)
    assert moe is not None
    return replace(moe, router_bias=r.flag("use_routing_bias", True)), routed


def qwen_moe_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    moe = MoE(r.int("num_experts"), r.int("num_experts_per_tok"), r.int("moe_intermediate_size"))
    step = r.int("decoder_sparse_step", 1)
    dense_only = set(r.int_list("mlp_only_layers"))
    return moe, [i not in dense_only and (i + 1) % (step or 1) == 0 for i in range(layers)]


def gpt_oss_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    # Every layer routes; the router has a bias; intermediate_size is each expert's width.
    top_k = r.int("num_experts_per_tok", config.get("experts_per_token") or None)
    return MoE(r.int("num_local_experts"), top_k, intermediate, router_bias=True), [True] * layers


def llama4_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    # Llama 4: routed experts of intermediate_size beside one shared expert of the same width, on the layers
    # moe_layers lists (else every interleave_moe_layer_step-th); the dense layers are intermediate_size_mlp wide.
    width = r.int("intermediate_size")
    moe = MoE(r.int("num_local_experts"), r.int("num_experts_per_tok", 1), width, 1, width)
    if isinstance(config.get("moe_layers"), list):
        chosen = set(r.int_list("moe_layers"))
        return moe, [i in chosen for i in range(layers)]
    step = r.int("interleave_moe_layer_step", 1)
    return moe, [(i + 1) % (step or 1) == 0 for i in range(layers)]


def deepseek_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    expert_width = r.int("moe_intermediate_size")
    shared = r.int("n_shared_experts", 0, minimum=0)
    moe = MoE(r.int("n_routed_experts"), r.int("num_experts_per_tok"), expert_width, shared, expert_width * shared,
              router_bias=config.get("topk_method", "noaux_tc") == "noaux_tc")
    if moe.experts and moe.top_k and moe.top_k > moe.experts:
        r.missing.append("num_experts_per_tok (cannot exceed n_routed_experts)")
    first_dense = r.int("first_k_dense_replace", 0, minimum=0)
    freq = r.int("moe_layer_freq", 1)
    return moe, [i >= first_dense and i % (freq or 1) == 0 for i in range(layers)]


def qwen3_next_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    # Qwen's routed experts beside one shared expert of its own width, scaled by a sigmoid gate.
    moe, routed = qwen_moe_experts(r, layers, intermediate, config)
    assert moe is not None  # Qwen's reader always describes its experts
    shared = r.int("shared_expert_intermediate_size", 0, minimum=0)
    return replace(moe, shared_experts=1 if shared else 0, shared_intermediate=shared,
                   shared_expert_gate=bool(shared)), routed


# Which layers mix tokens by attention, by a recurrent scan, or not at all, and which have an MLP.
Mixers = tuple[list[str], list[bool]]


def attention_everywhere(r: ConfigReader, layers: int) -> Mixers:
    return ["attention"] * layers, [True] * layers


def qwen3_next_mixers(r: ConfigReader, layers: int) -> Mixers:
    """Gated DeltaNet layers, and a full-attention layer every full_attention_interval-th (or as layer_types
    says); every layer has its MLP."""
    kinds = r.config.get("layer_types")
    if isinstance(kinds, list) and len(kinds) == layers and set(kinds) <= {"linear_attention", "full_attention"}:
        return ["recurrent" if kind == "linear_attention" else "attention" for kind in kinds], [True] * layers
    interval = r.int("full_attention_interval", 4, note=" (the config class default)")
    return ["attention" if (i + 1) % (interval or 1) == 0 else "recurrent" for i in range(layers)], [True] * layers


# Nemotron-H's blocks: one mixer or one MLP each, as its pattern string or its list of block types names them.
NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
NEMOTRON_BLOCK_NAMES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "attention",
                        "full_attention": "attention", "mlp": "mlp", "moe": "moe"}


def nemotron_blocks(r: ConfigReader) -> list[str]:
    for key in ("layers_block_type", "layer_types"):
        listed = r.config.get(key)
        if isinstance(listed, list) and listed:
            if not all(isinstance(name, str) and name in NEMOTRON_BLOCK_NAMES for name in listed):
                r.missing.append(f"{key} (each one of {', '.join(NEMOTRON_BLOCK_NAMES)})")
                return []
            return [NEMOTRON_BLOCK_NAMES[name] for name in listed]
    pattern = r.config.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern or not set(pattern) <= set(NEMOTRON_BLOCKS):
        r.missing.append("hybrid_override_pattern (a string of M, *, - and E, one a layer)")
        return []
    return [NEMOTRON_BLOCKS[char] for char in pattern]


def nemotron_layer_count(r: ConfigReader) -> int:
    return len(nemotron_blocks(r))


def nemotron_mixers(r: ConfigReader, layers: int) -> Mixers:
    blocks = nemotron_blocks(r)
    mixers = {"mamba": "recurrent", "attention": "attention", "mlp": "none", "moe": "none"}
    return [mixers[block] for block in blocks], [block in ("mlp", "moe") for block in blocks]


def nemotron_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    """Routed experts of moe_intermediate_size (ungated, like its MLP) and one shared MLP, on the E blocks; the
    router has a score-correction bias, which the checkpoint stores; with moe_latent_size (Nemotron-3 Super, Ultra)
    the routed experts work at that width between a down and an up projection."""
    routed = [block == "moe" for block in nemotron_blocks(r)]
    if not any(routed):
        return None, routed
    shared = r.int("moe_shared_expert_intermediate_size", 0, minimum=0)
    latent = r.int("moe_latent_size") if config.get("moe_latent_size") is not None else 0
    return MoE(r.int("n_routed_experts"), r.int("num_experts_per_tok"), r.int("moe_intermediate_size"),
               1 if shared else 0, shared, router_bias=True, latent_size=latent), routed


def no_rope(r: ConfigReader, layers: int) -> tuple[list[int | None], list[bool]]:
    return [None] * layers, [False] * layers


STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def gated_deltanet(r: ConfigReader) -> RecurrentMixer:
    return RecurrentMixer("gated_delta", r.int("linear_num_value_heads"), r.int("linear_num_key_heads"),
                          r.int("linear_key_head_dim"), r.int("linear_value_head_dim"),
                          r.int("linear_conv_kernel_dim", 4, note=" (the config class default)"), chunk=64,
                          head_params=2, norm_per_head=True)


def nemotron_mamba2(r: ConfigReader) -> RecurrentMixer:
    state_dtype = r.config.get("mamba_ssm_cache_dtype", "float32")
    return RecurrentMixer(
        "ssd", r.int("mamba_num_heads"), r.int("n_groups", 8, note=" (the config class default)"),
        r.int("ssm_state_size"), r.int("mamba_head_dim"), r.int("conv_kernel", 4, note=" (the config class default)"),
        r.int("chunk_size", 128, note=" (the config class default)"), head_params=3, norm_per_head=False,
        proj_bias=r.flag("use_bias", False), conv_bias=r.flag("use_conv_bias", True), out_bias=r.flag("use_bias", False),
        state_dtype=STATE_DTYPES.get(state_dtype) if isinstance(state_dtype, str) else None)


def falcon_mamba2(r: ConfigReader) -> RecurrentMixer:
    """Falcon-H1's Mamba-2 mixer: mamba_d_ssm channels (the class default 1,024 when absent; mamba_expand x hidden
    when null) in mamba_n_heads heads of mamba_d_head ("auto": the channels over the heads); the gated norm only with
    mamba_rms_norm; biases on its input projection (mamba_proj_bias) and its output projection (projectors_bias)."""
    if "mamba_d_ssm" not in r.config:
        channels = r.int("mamba_d_ssm", 1024, note=" (the config class default)")
    elif r.config["mamba_d_ssm"] is None:
        channels = r.int("mamba_expand", 2, note=" (the config class default)") * r.int("hidden_size")
    else:
        channels = r.int("mamba_d_ssm")
    heads = r.int("mamba_n_heads", 128, note=" (the config class default)")
    head_dim = (channels // heads if heads and r.config.get("mamba_d_head", "auto") == "auto"
                else r.int("mamba_d_head"))
    if heads * head_dim != channels:
        r.missing.append("mamba_d_head (mamba_n_heads x mamba_d_head must equal the mamba channels)")
    return RecurrentMixer(
        "ssd", heads, r.int("mamba_n_groups", 1, note=" (the config class default)"),
        r.int("mamba_d_state", 256, note=" (the config class default)"), head_dim,
        r.int("mamba_d_conv", 4, note=" (the config class default)"),
        r.int("mamba_chunk_size", 256, note=" (the config class default)"), head_params=3, norm_per_head=False,
        proj_bias=r.flag("mamba_proj_bias", False), conv_bias=r.flag("mamba_conv_bias", True),
        out_bias=r.flag("projectors_bias", False), gated_norm=r.flag("mamba_rms_norm", False))


def parallel_everywhere(r: ConfigReader, layers: int) -> Mixers:
    return ["parallel"] * layers, [True] * layers


def rotary_fraction(config: Mapping[str, Any], head_dim: int) -> float:
    """The share of each head's dimensions RoPE rotates: partial_rotary_factor, at the top or among the rope
    parameters, else rotary_dim over the head's width (MiniMax-M2's legacy key, read so by transformers 5.25.0);
    1 when none says."""
    rotary_dim = config.get("rotary_dim")
    if isinstance(rotary_dim, int) and not isinstance(rotary_dim, bool) and 0 < rotary_dim <= head_dim \
            and "partial_rotary_factor" not in config:
        return rotary_dim / head_dim
    for section in (config, config.get("rope_parameters"), config.get("rope_scaling")):
        if isinstance(section, Mapping):
            factor = section.get("partial_rotary_factor")
            if isinstance(factor, (int, float)) and not isinstance(factor, bool) and 0 < factor <= 1:
                return float(factor)
    return 1.0


def deepseek_sparse_index(r: ConfigReader) -> SparseIndexer:
    return SparseIndexer(r.int("index_n_heads", 64, note=" (the config class default)"),
                         r.int("index_head_dim", 128, note=" (the config class default)"),
                         r.int("index_topk", 2048, note=" (the config class default)"))


def mimo_v2_windows(r: ConfigReader, layers: int, window: int | None) -> Windows:
    """MiMo-V2-Flash: full attention on the first layer and every sixth, a window on the rest (as `layer_types`
    says where given; transformers 5.25.0's MiMoV2FlashConfig ignores hybrid_layer_pattern, which agrees)."""
    return [None if i == 0 or (i + 1) % 6 == 0 else window for i in range(layers)]


def mimo_v2_window(r: ConfigReader) -> int | None:
    # SGLang's reference attends to sliding_window_size earlier tokens and the query: transformers reads it + 1.
    size = r.optional_int("sliding_window_size")
    return size + 1 if size else sliding_window(r)


def mimo_v2_shapes(r: ConfigReader, layers: int, windows: Windows) -> list[LayerShape]:
    """Its window layers hold twice the full layers' K/V heads and learned sinks (transformers 5.25.0's
    MiMoV2FlashAttention); the full ones neither."""
    kv = r.int("num_key_value_heads")
    return [LayerShape(2 * kv, True) if window else LayerShape(sinks=False) for window in windows]


def gemma4_shapes(r: ConfigReader, layers: int, windows: Windows) -> list[LayerShape]:
    """Gemma 4's global (full-attention) layers: heads global_head_dim wide, num_global_key_value_heads K/V heads,
    and with attention_k_eq_v the values taken from the key projection (transformers 5.25.0's Gemma4TextAttention);
    the sliding ones as the model's. Per-layer input embeddings and layers sharing another's K/V (Gemma 4's small
    models) are refused: not modelled."""
    for key in ("hidden_size_per_layer_input", "num_kv_shared_layers"):
        if r.optional_int(key, minimum=0):
            r.missing.append(f"{key} (not modelled: Gemma 4's per-layer inputs and shared K/V layers; only 0)")
    global_heads = r.optional_int("num_global_key_value_heads")
    global_dim = r.int("global_head_dim", 512)  # Gemma4TextConfig's default
    keys_are_values = r.flag("attention_k_eq_v", False)
    return [LayerShape() if window else LayerShape(kv_heads=global_heads, head_dim=global_dim,
                                                   value_from_key=keys_are_values)
            for window in windows]


def gemma4_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    """With enable_moe_block, every layer runs routed experts beside its dense MLP (the two branches' outputs normed
    and added): counted as experts with the dense MLP as their shared expert, the router's input and expert scales
    and the block's three norms; else a dense model."""
    if not r.flag("enable_moe_block", False):
        return None, [False] * layers
    moe = MoE(r.int("num_experts"), r.int("top_k_experts"), r.int("moe_intermediate_size"), shared_experts=1,
              shared_intermediate=intermediate, router_scales=True, block_norms=3, shared_is_dense_mlp=True)
    return moe, [True] * layers


def mimo_v2_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    """DeepSeek's routed experts without shared ones, on every layer but the first (or as mlp_layer_types or a
    moe_layer_freq list says)."""
    moe = MoE(r.int("n_routed_experts"), r.int("num_experts_per_tok"), r.int("moe_intermediate_size"),
              router_bias=config.get("topk_method", "noaux_tc") == "noaux_tc")
    listed = config.get("mlp_layer_types")
    if isinstance(listed, list) and len(listed) == layers:
        return moe, [kind == "sparse" for kind in listed]
    freq = config.get("moe_layer_freq")
    if isinstance(freq, list) and len(freq) == layers:
        return moe, [bool(flag) for flag in freq]
    return moe, [i > 0 for i in range(layers)]


def step_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    """Step-3.7: routed experts behind a sigmoid router with a score-correction bias, beside one shared expert
    share_expert_dim wide (transformers 5.25.0's Step3p7SparseMoeBlock). The MoE layers: mlp_layer_types, else the
    hub's moe_layers_enum, else from first_k_dense_replace (AIConfigurator's copies), else from the fourth layer on
    (Step3p7TextConfig's default). Its experts count is n_routed_experts, which AIConfigurator's copies write
    num_experts."""
    moe = MoE(r.int(r.named("n_routed_experts", "num_experts")), r.int("num_experts_per_tok"),
              r.int("moe_intermediate_size"), shared_experts=1, shared_intermediate=r.int("share_expert_dim"),
              router_bias=True)
    listed = config.get("mlp_layer_types")
    if isinstance(listed, list) and len(listed) >= layers:  # a list may carry the MTP layers' after the model's
        return moe, [kind == "sparse" for kind in listed[:layers]]
    enum = config.get("moe_layers_enum")
    if isinstance(enum, (str, list)):
        items = enum.split(",") if isinstance(enum, str) else enum
        chosen = {int(item) for item in items if str(item).strip().isdigit()}
        return moe, [i in chosen for i in range(layers)]
    first_dense = r.int("first_k_dense_replace", 3, minimum=0, note=" (Step3p7TextConfig's dense layers)")
    return moe, [i >= first_dense for i in range(layers)]


def step_shapes(r: ConfigReader, layers: int, windows: Windows) -> list[LayerShape]:
    """Step-3.7's sliding layers may run another head count (num_sliding_attention_heads, or the hub's
    attention_other_setting): not modelled, refused where it differs from num_attention_heads."""
    other = r.config.get("attention_other_setting")
    sliding = r.optional_int("num_sliding_attention_heads")
    if sliding is None and isinstance(other, Mapping) and isinstance(other.get("num_attention_heads"), int):
        sliding = other["num_attention_heads"]
    if sliding is not None and sliding != r.int("num_attention_heads"):
        r.missing.append("num_sliding_attention_heads (not modelled: sliding layers with their own head count; only "
                         "num_attention_heads)")
    if r.config.get("gating", True) not in (True, "per-head"):  # Step3p7Attention's other gate: one an element
        r.missing.append("gating (not modelled: only a gate a head, true or \"per-head\")")
    return [LayerShape() for _ in range(layers)]


def _sparse_section(r: ConfigReader) -> ConfigReader:
    """MiniMax-M3's sparse_attention_config, read with the model's prefix (its keys named inside it)."""
    section = r.config.get("sparse_attention_config")
    return ConfigReader(section if isinstance(section, Mapping) else {}, f"{r.prefix}.sparse_attention_config")


def _per_layer_flags(r: ConfigReader, layers: int, listed_key: str, listed_value: str, section_key: str,
                     default: bool) -> list[bool]:
    """A per-layer choice: a list of names (layer_types, mlp_layer_types), else a 0/1 list (in the sparse section or
    at the top), else the same on every layer."""
    listed = r.config.get(listed_key)
    if isinstance(listed, list) and len(listed) == layers:
        return [kind == listed_value for kind in listed]
    for source in (_sparse_section(r).config, r.config):
        flags = source.get(section_key)
        if isinstance(flags, list) and len(flags) == layers:
            return [bool(flag) for flag in flags]
    return [default] * layers


def minimax_m3_index(r: ConfigReader) -> SparseIndexer:
    """MiniMax-M3's indexer (transformers 5.25.0's MiniMaxM3VLIndexer): index_n_heads x index_head_dim queries from
    the hidden state, one key a token, each query keeping its best index_topk_blocks blocks of index_block_size keys
    (its own block among them). The hub config names them sparse_* in sparse_attention_config."""
    section = _sparse_section(r)

    def size(key: str, theirs: str, default: int) -> int:  # the section's value over the top level's, as the class
        return (section.int(theirs) if theirs in section.config
                else r.int(key, default, note=" (MiniMaxM3VLTextConfig's default)"))

    heads, width = size("index_n_heads", "sparse_num_index_heads", 4), size("index_head_dim", "sparse_index_dim", 128)
    block, blocks = size("index_block_size", "sparse_block_size", 128), size("index_topk_blocks", "sparse_topk_blocks", 16)
    section.fail_if_missing()  # after every read: an invalid size reads as 0
    return SparseIndexer(heads, width, blocks * block, block=block, weighted=False)


def minimax_m3_indexed(r: ConfigReader, layers: int) -> list[bool]:
    return _per_layer_flags(r, layers, "layer_types", "minimax_m3_sparse", "sparse_attention_freq", False)


def minimax_m3_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    """MiniMax-M3's experts (intermediate_size wide; moe_intermediate_size is not read by its class) behind a sigmoid
    router with a score-correction bias, beside one shared expert shared_intermediate_size wide, on the layers
    mlp_layer_types or moe_layer_freq mark (else every layer); the dense layers are dense_intermediate_size wide."""
    moe = MoE(r.int(r.named("num_local_experts", "num_experts")), r.int("num_experts_per_tok"),
              r.int("intermediate_size"), shared_experts=1, shared_intermediate=r.int("shared_intermediate_size"),
              router_bias=True)
    return moe, _per_layer_flags(r, layers, "mlp_layer_types", "sparse", "moe_layer_freq", True)


def _decilm_blocks(r: ConfigReader, layers: int) -> list[tuple[int | None, int]]:
    """Nemotron-NAS (DeciLM) block_configs, one a layer: (K/V heads, None where its attention is a no-op; its MLP
    width, 0 where a no-op). The width is 2/3 of ffn_mult x hidden rounded up to a multiple of 256, and the K/V
    heads are the heads over n_heads_in_group, as NVIDIA's modeling_decilm.py builds them. A block replaced by a
    linear layer is refused."""
    blocks = r.config.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != layers or not all(isinstance(b, Mapping) for b in blocks):
        r.missing.append(f"block_configs (a list of {layers} blocks, one a layer)")
        return [(None, 0)] * layers
    heads, hidden, out = r.int("num_attention_heads"), r.int("hidden_size"), []
    for block in blocks:
        attention, ffn = block.get("attention") or {}, block.get("ffn") or {}
        if attention.get("replace_with_linear") or ffn.get("replace_with_linear"):
            r.missing.append("block_configs (a block replaced by a linear layer is not read yet)")
            return [(None, 0)] * layers
        group, mult = attention.get("n_heads_in_group"), ffn.get("ffn_mult")
        kv = None if attention.get("no_op") else (heads // group if isinstance(group, int) and group > 0
                                                   and heads % group == 0 else 0)
        width = 0 if ffn.get("no_op") else (-(-int(2 * mult * hidden / 3) // 256) * 256
                                             if isinstance(mult, (int, float)) and mult > 0 else -1)
        if kv == 0 or width < 0:
            r.missing.append("block_configs (each attention's n_heads_in_group must divide the heads, each ffn_mult "
                             "be positive)")
            return [(None, 0)] * layers
        out.append((kv, width))
    return out


def decilm_mixers(r: ConfigReader, layers: int) -> Mixers:
    blocks = _decilm_blocks(r, layers)
    return ["none" if kv is None else "attention" for kv, _ in blocks], [width > 0 for _, width in blocks]


def decilm_shapes(r: ConfigReader, layers: int, windows: Windows) -> list[LayerShape]:
    return [LayerShape(kv, None, width) for kv, width in _decilm_blocks(r, layers)]


# transformers 5.25.0's DeepseekV4Config: its layer kinds by compression ratio, and its defaults.
V4_KINDS = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}


def v4_compression(r: ConfigReader, layers: int) -> list[int]:
    """Per layer, its compression ratio (0: the window alone): as layer_types names it (the ratios of
    compress_rates), else as compress_ratios lists it, else the class's pattern (two heavily compressed layers, then
    compressed-sparse and heavily compressed in turn)."""
    rates = r.config.get("compress_rates")
    csa = rates.get("compressed_sparse_attention", 4) if isinstance(rates, Mapping) else 4
    hca = rates.get("heavily_compressed_attention", 128) if isinstance(rates, Mapping) else 128
    ratio = {"sliding_attention": 0, "compressed_sparse_attention": csa, "heavily_compressed_attention": hca}
    # Lists may run past the layers (the multi-token-prediction layer's entry): transformers keeps the first ones.
    kinds, listed = r.config.get("layer_types"), r.config.get("compress_ratios")
    if isinstance(kinds, list) and len(kinds) >= layers and set(kinds[:layers]) <= set(ratio):
        return [ratio[kind] for kind in kinds[:layers]]
    if isinstance(listed, list) and len(listed) >= layers and set(listed[:layers]) <= {0, csa, hca}:
        return list(listed[:layers])
    if kinds is not None or listed is not None:
        r.missing.append(f"layer_types or compress_ratios ({layers} entries, each of {sorted(ratio)} or 0, {csa}, {hca})")
        return [0] * layers
    return [hca] * min(layers, 2) + [csa if i % 2 else hca for i in range(max(layers - 2, 0))]


def v4_shapes(r: ConfigReader, layers: int, windows: Windows) -> list[LayerShape]:
    """Each layer's compression, and whether its experts are hash-routed (the first num_hash_layers, 3 by default,
    or as mlp_layer_types says)."""
    kinds = r.config.get("mlp_layer_types")
    if isinstance(kinds, list) and len(kinds) >= layers:
        hashed = [kind == "hash_moe" for kind in kinds[:layers]]
    else:
        first = r.int("num_hash_layers", 3, minimum=0, note=" (the config class default)")
        hashed = [i < first for i in range(layers)]
    return [LayerShape(compress=ratio, hash_routed=flag) for ratio, flag in zip(v4_compression(r, layers), hashed,
                                                                                 strict=True)]


def v4_experts(r: ConfigReader, layers: int, intermediate: int, config: Mapping[str, Any]) -> Experts:
    """Every layer routes to n_routed_experts beside one shared expert as wide as each (transformers builds one
    whatever n_shared_experts says); the learned router's score-correction bias is stored."""
    width = r.int("moe_intermediate_size")
    return MoE(r.int("n_routed_experts"), r.int("num_experts_per_tok"), width, 1, width, router_bias=True), \
        [True] * layers


def v4_attention(r: ConfigReader) -> CompressedAttention:
    head_dim = r.int("head_dim")
    rope = r.optional_int("qk_rope_head_dim")
    fraction = r.config.get("partial_rotary_factor")
    rope_dim = (int(head_dim * fraction) if isinstance(fraction, (int, float)) and 0 < fraction <= 1
                else rope or head_dim // 8)
    return CompressedAttention(
        r.int("q_lora_rank"), r.int("sliding_window", 128, note=" (the config class default)"),
        r.int("o_groups", 8, note=" (the config class default)"), r.int("o_lora_rank", 1024, note=" (the config class default)"),
        r.int("index_n_heads", 64, note=" (the config class default)"),
        r.int("index_head_dim", 128, note=" (the config class default)"),
        r.int("index_topk", 512, note=" (the config class default)"), rope_dim,
        r.int("hc_mult", 4, note=" (the config class default)"))


def indexer_layers(r: ConfigReader, layers: int) -> list[bool]:
    """Per layer, whether it runs its own indexer (GLM-5.2: "full") or reuses the previous one's selection
    ("shared"): as `indexer_types` lists, else an F/S `index_topk_pattern`, else every index_topk_freq-th layer
    from index_skip_topk_offset on (the defaults of transformers 5.25.0's GlmMoeDsaConfig: 1 and 2, every layer)."""
    for key, full, kinds, form in (("indexer_types", "full", {"full", "shared"}, "entries, each full or shared"),
                                   ("index_topk_pattern", "F", {"F", "S"}, "letters, each F or S")):
        value = r.config.get(key)
        if value is None:
            continue
        if not (isinstance(value, (list, str)) and len(value) == layers and set(value) <= kinds):
            r.missing.append(f"{key} ({layers} {form})")
            return [True] * layers
        return [kind == full for kind in value]
    every = r.int("index_topk_freq", 1, note=" (the config class default)")
    offset = r.int("index_skip_topk_offset", 2, minimum=0, note=" (the config class default)")
    return [max(i - offset + 1, 0) % (every or 1) == 0 for i in range(layers)]


def llama4_positions(r: ConfigReader, layers: int) -> tuple[list[int | None], list[bool]]:
    """Per layer, its attention chunk and whether it rotates positions: Llama 4's RoPE layers attend within chunks
    of attention_chunk_size; every no_rope_layer_interval-th layer (or as no_rope_layers lists, 1 = RoPE) is a
    global NoPE layer."""
    if isinstance(r.config.get("no_rope_layers"), list) and len(r.config["no_rope_layers"]) == layers:
        ropes = [bool(flag) for flag in r.int_list("no_rope_layers")]
    else:
        interval = r.int("no_rope_layer_interval", 4, note=" (the config class default)")
        ropes = [(i + 1) % (interval or 1) != 0 for i in range(layers)]
    chunk = r.optional_int("attention_chunk_size")
    return [chunk if rope else None for rope in ropes], ropes


def deepseek_latent(r: ConfigReader) -> LatentAttention:
    return LatentAttention(r.optional_int("q_lora_rank"), r.int("kv_lora_rank"), r.int("qk_nope_head_dim"),
                           r.int("qk_rope_head_dim"), r.int("v_head_dim"))


@dataclass(frozen=True)
class Family:
    """What sets one `model_type` apart from the llama baseline."""

    name: str
    biases: Callable[[ConfigReader], Biases] = no_biases
    window: Callable[[ConfigReader], int | None] = sliding_window
    windows: Callable[[ConfigReader, int, int | None], Windows] = full_attention
    experts: Callable[[ConfigReader, int, int, Mapping[str, Any]], Experts] = dense
    # Latent attention has its own head dimensions: head_dim is then neither read nor used.
    latent: Callable[[ConfigReader], LatentAttention] | None = None
    norms_per_layer: int = 2
    qk_norm: bool = False
    qk_norm_flag: str | None = None  # the config key that turns q/k norms on, where the family makes it optional
    qk_norm_weights: bool = True  # False: q/k norms without a scale (Llama 4's L2 norm)
    qk_norm_per_head: bool = True  # False: one norm over all heads' queries (keys), as wide as them (MiniMax-M2)
    tied_by_default: bool = False
    # Every layer is MoE in the reference configs, so the dense width may be absent (0).
    intermediate_optional: bool = False
    intermediate_key: str = "intermediate_size"  # the dense layers' MLP width
    attention_sinks: bool = False
    # Per layer, its attention chunk and whether it rotates positions (Llama 4); None: no chunks, RoPE everywhere.
    positions: Callable[[ConfigReader, int], tuple[list[int | None], list[bool]]] | None = None
    # A multimodal checkpoint: its decoder is `text_config`, read as this family; `vision` counts the vision tower's
    # and projector's parameters from the whole config (its vision_config) and the decoder's width.
    text: str | None = None
    vision: Callable[[Mapping[str, Any], str, int], int] | None = None
    # A config of this multimodal family without text_config is its decoder's alone, no tower (AIConfigurator's
    # flattened Step-3.7 copies).
    text_may_be_flat: bool = False
    sparse_index: Callable[[ConfigReader], SparseIndexer] | None = None  # DeepSeek-V3.2's indexer
    # Per layer, whether it runs its own indexer; None: every layer does.
    indexed: Callable[[ConfigReader, int], list[bool]] | None = None
    # Per layer, (K/V heads, attention sinks, dense MLP width) where its layers differ from the model's (None each
    # where they do not), given each layer's window; None: every layer alike.
    shapes: Callable[[ConfigReader, int, Windows], list[LayerShape]] | None = None
    reads_value_dim: bool = False  # v_head_dim: a value head narrower or wider than head_dim
    compressed: Callable[[ConfigReader], CompressedAttention] | None = None  # DeepSeek-V4's attention
    # Per layer, its token mixer and whether it has an MLP; with `recurrent`, the recurrent layers' mixer.
    mixers: Callable[[ConfigReader, int], Mixers] = attention_everywhere
    recurrent: Callable[[ConfigReader], RecurrentMixer] | None = None
    attention_output_gate: bool = False
    head_gate: bool = False  # a gate a head from its own projection (Step-3.7)
    gated_mlp: bool = True
    activation_key: str = "hidden_act"
    # How many layers: num_hidden_layers, or what the family's layer list says (Nemotron-H's pattern).
    layer_count: Callable[[ConfigReader], int] | None = None
    v_norm: bool = False
    layer_scalar: bool = False


FAMILIES: dict[str, Family] = {family.name: family for family in (
    Family("llama", biases=attention_and_mlp_bias),
    Family("mistral", windows=window_on_every_layer),
    Family("mixtral", windows=window_on_every_layer, experts=mixtral_experts),
    Family("qwen2", biases=qkv_bias_always, windows=window_above_max_window_layers),
    # Xiaomi's MiMo-7B: Qwen2's decoder (its multi-token-prediction layers, like DeepSeek's, are not counted).
    Family("mimo", biases=qkv_bias_always, windows=window_above_max_window_layers),
    Family("qwen3", biases=attention_bias, windows=window_above_max_window_layers, qk_norm=True),
    Family("qwen3_moe", biases=attention_bias, windows=window_above_max_window_layers, experts=qwen_moe_experts,
           qk_norm=True, intermediate_optional=True),
    Family("gemma", tied_by_default=True),
    Family("gemma2", window=sliding_window_or_size, windows=window_on_even_layers, norms_per_layer=4,
           tied_by_default=True),
    Family("phi3", windows=window_on_every_layer),
    Family("deepseek_v3", biases=attention_bias, experts=deepseek_experts, latent=deepseek_latent),
    # DeepSeek-V3's architecture with sparse attention: an indexer picks the keys each query attends to.
    Family("deepseek_v32", biases=attention_bias, experts=deepseek_experts, latent=deepseek_latent,
           sparse_index=deepseek_sparse_index),
    # GLM-5: DeepSeek-V3.2's latent attention, indexer and experts, the indexer on some layers only (GLM-5.2 on).
    Family("glm_moe_dsa", biases=attention_bias, experts=deepseek_experts, latent=deepseek_latent,
           sparse_index=deepseek_sparse_index, indexed=indexer_layers),
    # DeepSeek-V3's architecture under Moonshot's name.
    Family("kimi_k2", biases=attention_bias, experts=deepseek_experts, latent=deepseek_latent),
    # MiniMax-M2: Mixtral's experts behind a sigmoid router with a score-correction bias (stored in the checkpoint,
    # a buffer in transformers' module), q/k norms over all heads, RoPE on rotary_dim of each head.
    Family("minimax_m2", windows=window_on_every_layer, experts=minimax_experts, qk_norm_flag="use_qk_norm",
           qk_norm_per_head=False),
    # Kimi K2.5 (K2.6, K2.7): Kimi-K2's decoder beside the MoonViT tower; untied unless the config says otherwise
    # (transformers 5.25.0's Kimi_K25Config ties by default).
    Family("kimi_k25", text="kimi_k2", tied_by_default=True, vision=lambda config, prefix, hidden: vision.moonvit(
        _reader(config, "vision_config", prefix), hidden, _top_int(config, "projection_hidden_size", 1152))),
    Family("glm4_moe", biases=qkv_bias_only, experts=deepseek_experts, qk_norm_flag="use_qk_norm"),
    Family("gpt_oss", biases=attention_and_expert_bias, experts=gpt_oss_experts, attention_sinks=True),
    Family("gemma3_text", windows=window_but_every_nth_layer, qk_norm=True, norms_per_layer=4, tied_by_default=True),
    Family("gemma3", text="gemma3_text", vision=lambda config, prefix, hidden: vision.siglip(
        _reader(config, "vision_config", prefix), hidden)),
    # Gemma 4: Gemma 3's layers with wider global heads (fewer K/V heads, values from the key projection), values
    # normed, a stored scalar a layer, and on the MoE models routed experts beside every dense MLP.
    Family("gemma4_text", windows=window_but_every_nth_layer, qk_norm=True, norms_per_layer=4, tied_by_default=True,
           experts=gemma4_experts, shapes=gemma4_shapes, activation_key="hidden_activation", v_norm=True,
           layer_scalar=True),
    Family("gemma4", text="gemma4_text", tied_by_default=True, vision=lambda config, prefix, hidden: vision.gemma4(
        _reader(config, "vision_config", prefix), hidden)),
    Family("mistral3", text="mistral", vision=lambda config, prefix, hidden: vision.pixtral(
        _reader(config, "vision_config", prefix), hidden, _top_int(config, "spatial_merge_size", 2),
        bool(config.get("multimodal_projector_bias", False)))),
    Family("llama4_text", experts=llama4_experts, qk_norm_flag="use_qk_norm", qk_norm_weights=False,
           intermediate_key="intermediate_size_mlp", positions=llama4_positions),
    Family("llama4", text="llama4_text", vision=lambda config, prefix, hidden: vision.llama4_vision(
        _reader(config, "vision_config", prefix), hidden)),
    Family("qwen3_next", biases=attention_bias, experts=qwen3_next_experts, qk_norm=True, intermediate_optional=True,
           mixers=qwen3_next_mixers, recurrent=gated_deltanet, attention_output_gate=True),
    # NVIDIA's Nemotron-NAS (Llama-3.3-Nemotron-Super-49B): Llama's layers, each block's attention and MLP sized (or
    # skipped) by the architecture search: per-layer K/V heads and MLP widths from block_configs.
    Family("nemotron-nas", biases=attention_and_mlp_bias, mixers=decilm_mixers, shapes=decilm_shapes,
           intermediate_optional=True),
    # DeepSeek-V4: one K=V head over a window and compressed entries (an indexer picking among them on half the
    # layers), grouped low-rank output, hyper-connections, hash-routed experts on the first layers.
    Family("deepseek_v4", experts=v4_experts, shapes=v4_shapes, compressed=v4_attention, intermediate_optional=True,
           intermediate_key="moe_intermediate_size"),
    # Xiaomi's MiMo-V2-Flash: windowed layers with twice the K/V heads and sinks between full ones; value heads
    # narrower than the keys'; DeepSeek's experts.
    Family("mimo_v2_flash", window=mimo_v2_window, windows=mimo_v2_windows, experts=mimo_v2_experts,
           shapes=mimo_v2_shapes, reads_value_dim=True, biases=attention_bias),
    # Qwen3-VL: Qwen3's decoder (dense or MoE) beside its vision tower and mergers.
    Family("qwen3_vl_text", biases=attention_bias, qk_norm=True),
    Family("qwen3_vl_moe_text", biases=attention_bias, experts=qwen_moe_experts, qk_norm=True,
           intermediate_optional=True),
    Family("qwen3_vl", text="qwen3_vl_text", vision=lambda config, prefix, hidden: vision.qwen3_vl(
        _reader(config, "vision_config", prefix))),
    Family("qwen3_vl_moe", text="qwen3_vl_moe_text", vision=lambda config, prefix, hidden: vision.qwen3_vl(
        _reader(config, "vision_config", prefix))),
    # Qwen3.5 (and 3.6): Qwen3-Next's hybrid of Gated DeltaNet and gated attention, dense or with experts, beside
    # Qwen3-VL's tower.
    Family("qwen3_5_text", biases=attention_bias, qk_norm=True, mixers=qwen3_next_mixers, recurrent=gated_deltanet,
           attention_output_gate=True),
    Family("qwen3_5_moe_text", biases=attention_bias, experts=qwen3_next_experts, qk_norm=True,
           intermediate_optional=True, mixers=qwen3_next_mixers, recurrent=gated_deltanet, attention_output_gate=True),
    Family("qwen3_5", text="qwen3_5_text", vision=lambda config, prefix, hidden: vision.qwen3_vl(
        _reader(config, "vision_config", prefix))),
    Family("qwen3_5_moe", text="qwen3_5_moe_text", vision=lambda config, prefix, hidden: vision.qwen3_vl(
        _reader(config, "vision_config", prefix))),
    # StepFun's Step-3.7 (Step3p7TextConfig's model_type is step3p5): Gemma-3-style sliding and full layers with q/k
    # norms and a sigmoid gate a head, routed experts beside a shared one after the first dense layers; its
    # multi-token-prediction layers are not counted.
    Family("step3p5", qk_norm=True, head_gate=True, experts=step_experts, shapes=step_shapes),
    Family("step3p7", text="step3p5", text_may_be_flat=True, vision=lambda config, prefix, hidden: vision.step3p7(
        _reader(config, "vision_config", prefix), hidden, bool(config.get("projector_bias", False)))),
    # MiniMax-M3: full attention with per-head q/k norms and partial RoPE, on the sparse layers over the key blocks a
    # lightning indexer picks; routed experts beside a shared one after dense layers (transformers 5.25.0 reads it as
    # MiniMaxM3VLTextConfig). Its multi-token-prediction modules are not counted.
    Family("minimax_m3", qk_norm=True, experts=minimax_m3_experts, intermediate_key="dense_intermediate_size",
           sparse_index=minimax_m3_index, indexed=minimax_m3_indexed),
    # Attention and Mamba-2 side by side on every layer, their outputs added, then a gated MLP.
    Family("falcon_h1", biases=attention_and_mlp_bias, mixers=parallel_everywhere, recurrent=falcon_mamba2),
    # Attention without biases or positions (the config's attention_bias is not read by its attention).
    Family("nemotron_h", experts=nemotron_experts, positions=no_rope, mixers=nemotron_mixers, recurrent=nemotron_mamba2,
           gated_mlp=False, activation_key="mlp_hidden_act", layer_count=nemotron_layer_count,
           intermediate_optional=True),
)}
# SGLang's DeepSeek-V4 checkpoints name the same architecture deepseek_ref.
FAMILIES["deepseek_ref"] = replace(FAMILIES["deepseek_v4"], name="deepseek_ref")
SUPPORTED_FAMILIES = tuple(FAMILIES)


def _reader(config: Mapping[str, Any], key: str, prefix: str) -> ConfigReader:
    section = config.get(key)
    return ConfigReader(section if isinstance(section, Mapping) else {}, f"{prefix}.{key}")


def _top_int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def family_of(config: Any, prefix: str) -> Family:
    if not isinstance(config, Mapping):
        raise ConfigError([prefix], "the model config must be a JSON object")
    name = config.get("model_type")
    if not isinstance(name, str) or name not in FAMILIES:
        raise ConfigError([f"{prefix}.model_type"],
                          f"unsupported model_type {name!r}; supported: {', '.join(SUPPORTED_FAMILIES)}; or describe the "
                          'model in the generic form {"format": "generic", "layers", "hidden", "heads", "vocab", '
                          '"intermediate", ...} (docs/concepts.md, "Models the readers do not know")')
    return FAMILIES[name]


def _check_layers(moe: MoE | None, moe_layers: list[bool], intermediate: int, prefix: str) -> MoE | None:
    """The experts a model really has (None when no layer routes), or a refusal of an inconsistent config."""
    if moe is not None and moe.top_k > moe.experts:
        raise ConfigError([f"{prefix}.num_experts_per_tok"], "cannot exceed the number of experts")
    if any(moe_layers) and moe is None:
        raise ConfigError([f"{prefix}.model_type"], "MoE layers without expert counts")
    if any(not m for m in moe_layers) and not intermediate:
        raise ConfigError([f"{prefix}.intermediate_size"], "dense layers need intermediate_size")
    return moe if any(moe_layers) else None


def from_hf_config(config: Mapping[str, Any], prefix: str = "model") -> Architecture:
    family = family_of(config, prefix)
    if family.text is not None:
        return _multimodal(family, config, prefix)
    arch = _decoder(family, config, prefix)
    quantization = checkpoint_quantization(config, prefix)
    return replace(arch, quantization=_with_layers(quantization, arch)) if quantization else arch


def _with_layers(quantization: Quantization, arch: Architecture) -> Quantization:
    dense = sum(g.count for g in arch.groups if g.has_mlp and not g.moe) if arch.moe is not None else 0
    return with_dense_layers(quantization, dense)


def _multimodal(family: Family, config: Mapping[str, Any], prefix: str) -> Architecture:
    """The decoder of `text_config` read as its own family, with the vision tower's parameters and the checkpoint's
    quantisation (stated at the top level) beside it."""
    text = config.get("text_config")
    if text is None and family.text_may_be_flat:
        assert family.text is not None
        return replace(from_hf_config({**config, "model_type": family.text}, prefix), family=family.name)
    if not isinstance(text, Mapping):
        raise ConfigError([f"{prefix}.text_config"], f"a {family.name} config describes its decoder in text_config")
    assert family.text is not None and family.vision is not None
    # A top-level tie_word_embeddings is the checkpoint's, whatever text_config says; absent, the multimodal config
    # class's default where it ties (Kimi K2.5's), else text_config's.
    tied = config.get("tie_word_embeddings", True if family.tied_by_default else None)
    decoder = _decoder(FAMILIES[family.text], {**text, **({"tie_word_embeddings": tied} if isinstance(tied, bool) else {})},
                       f"{prefix}.text_config")
    quantization = checkpoint_quantization(config, prefix) or checkpoint_quantization(text, prefix)
    return replace(decoder, family=family.name, vision_params=family.vision(config, prefix, decoder.hidden),
                   quantization=_with_layers(quantization, decoder) if quantization else None)


def _decoder(family: Family, given: Mapping[str, Any], prefix: str) -> Architecture:
    config = WithClassDefaults(given, family.name)
    r = ConfigReader(config, prefix)
    hidden = r.int("hidden_size")
    layers = family.layer_count(r) if family.layer_count is not None else r.int("num_hidden_layers")
    heads = r.int("num_attention_heads")
    vocab = r.int("vocab_size")
    kv_heads = r.int("num_key_value_heads", heads, note=" (the config class default: num_attention_heads)") if heads else 0
    activation = r.activation(family.activation_key)
    intermediate = (r.int(family.intermediate_key, 0, minimum=0) if family.intermediate_optional
                    else r.int(family.intermediate_key))
    r.fail_if_missing()
    if family.latent is not None:
        head_dim = hidden // heads
    else:
        head_dim = r.int("head_dim", hidden // heads if hidden % heads == 0 else None,
                         note=" (the config class default: hidden_size / num_attention_heads)")
    if heads % kv_heads:
        r.missing.append("num_key_value_heads (must divide num_attention_heads)")
    qkv_bias, o_bias, mlp_bias = family.biases(r)
    window = family.window(r)
    windows = family.windows(r, layers, window)
    windows = windows_by_layer_types(config, layers, window) or windows
    moe, moe_layers = family.experts(r, layers, intermediate, config)
    mixers, mlps = family.mixers(r, layers)
    chunks, ropes = family.positions(r, layers) if family.positions is not None else (None, None)
    indexed = family.indexed(r, layers) if family.indexed is not None else None
    shapes = family.shapes(r, layers, windows) if family.shapes is not None else None
    features = _features(family, r, mixers)
    # Read before the check: an invalid value is refused with the rest, never kept as 0. A count of positions
    # drives no work, so it may exceed the dimensions' bound (2^25 was read as 0, and refused every prompt).
    max_positions = r.optional_int("max_position_embeddings", maximum=MAX_POSITIONS)
    r.fail_if_missing()
    moe = _check_layers(moe, moe_layers, intermediate or int(_widths_given(shapes, moe_layers)), prefix)
    return Architecture(
        family=family.name, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=vocab, intermediate=intermediate, gated_mlp=family.gated_mlp, activation=activation,
        tied_embeddings=r.flag("tie_word_embeddings", family.tied_by_default),
        qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias, norms_per_layer=family.norms_per_layer,
        qk_norm_weights=family.qk_norm_weights, qk_norm_per_head=family.qk_norm_per_head, moe=moe,
        groups=group_layers(list(zip(windows, moe_layers)), chunks, ropes, mixers, mlps, indexed, shapes),
        attention_sinks=family.attention_sinks, defaults_applied=tuple(config.notes() + r.defaults),
        max_positions=max_positions, attention_output_gate=family.attention_output_gate, head_gate=family.head_gate,
        rotary_fraction=rotary_fraction(config, head_dim), **features,
    )


def _features(family: Family, r: ConfigReader, mixers: list[str]) -> dict[str, Any]:
    """The optional parts a family's layers have: latent attention, q/k norms, a sparse indexer, value heads of
    their own width, the recurrent layers' mixer."""
    return {
        "latent": family.latent(r) if family.latent is not None else None,
        "qk_norm": family.qk_norm or bool(family.qk_norm_flag and r.flag(family.qk_norm_flag, False)),
        "sparse_index": family.sparse_index(r) if family.sparse_index is not None else None,
        "v_head_dim": r.optional_int("v_head_dim") if family.reads_value_dim else None,
        "recurrent": (family.recurrent(r) if family.recurrent is not None and {"recurrent", "parallel"} & set(mixers)
                      else None),
        "compressed": family.compressed(r) if family.compressed is not None else None,
        "v_norm": family.v_norm,
        "layer_scalar": family.layer_scalar,
    }


def _widths_given(shapes: list[LayerShape] | None, moe_layers: list[bool]) -> bool:
    """Whether per-layer widths (Nemotron-NAS) stand in for intermediate_size on every dense layer."""
    return shapes is not None and all(shape.intermediate is not None for shape, routed in zip(shapes, moe_layers,
                                                                                               strict=True) if not routed)
