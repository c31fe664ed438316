"""A normalised description of a decoder-only transformer, read from a Hugging Face config.json or
from the service's explicit generic schema. A config the service cannot interpret is refused with the
missing or unsupported fields named; nothing is guessed beyond the defaults the Hugging Face config
classes themselves document (and those are listed in `defaults_applied`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.core.errors import CostModelError

ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
               "gelu_fast": "gelu", "relu": "relu"}
SUPPORTED_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "phi3",
                      "deepseek_v3")


MAX_DIMENSION = 2**24
MAX_LAYERS = 2**16
LAYER_KEYS = frozenset({"num_hidden_layers", "first_k_dense_replace", "max_window_layers"})


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
class MoE:
    experts: int
    top_k: int
    expert_intermediate: int
    shared_experts: int = 0
    shared_intermediate: int = 0
    router_bias: bool = False  # DeepSeek-V3's per-expert score correction bias


@dataclass(frozen=True)
class LayerGroup:
    """`count` identical layers: the analysis costs one and multiplies."""

    count: int
    sliding_window: int | None
    moe: bool


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

    def layer_kinds(self) -> str:
        return ", ".join(f"{g.count} x {'MoE' if g.moe else 'dense'}"
                         + (f" (window {g.sliding_window})" if g.sliding_window else "") for g in self.groups)


def _group_layers(flags: list[tuple[int | None, bool]]) -> tuple[LayerGroup, ...]:
    counts: dict[tuple[int | None, bool], int] = {}
    for flag in flags:
        counts[flag] = counts.get(flag, 0) + 1
    return tuple(LayerGroup(count, window, moe) for (window, moe), count in counts.items())


class _Reader:
    """Reads keys from a config, collecting every missing or invalid one before failing."""

    def __init__(self, config: Mapping[str, Any], prefix: str):
        self.config, self.prefix = config, prefix
        self.missing: list[str] = []
        self.defaults: list[str] = []

    def int(self, key: str, default: int | None = None, *, minimum: int = 1, note: str = "") -> int | None:
        """An integer within [minimum, MAX_DIMENSION] (MAX_LAYERS for layer counts): bounds far above any real
        model that keep the per-layer bookkeeping and the counts small."""
        maximum = MAX_LAYERS if key in LAYER_KEYS else MAX_DIMENSION
        value = self.config.get(key)
        if value is None:
            if default is None:
                self.missing.append(key)
                return None
            self.defaults.append(f"{key} = {default}{note}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            self.missing.append(f"{key} (must be an integer from {minimum} to {maximum})")
            return None
        return value

    def optional_int(self, key: str, *, minimum: int = 1) -> int | None:
        if self.config.get(key) is None:
            return None
        return self.int(key, minimum=minimum)

    def int_list(self, key: str) -> list[int]:
        value = self.config.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            self.missing.append(f"{key} (must be a list of integers)")
            return []
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.missing.append(f"{key} (must be true or false)")
            return default
        return value

    def fail_if_missing(self) -> None:
        if self.missing:
            names = [f"{self.prefix}.{m.split(' ')[0]}" for m in self.missing]
            raise ConfigError(names, "cannot interpret the model: missing or invalid " + ", ".join(self.missing))


def _activation(reader: _Reader, key: str = "hidden_act") -> str:
    name = reader.config.get("hidden_activation") or reader.config.get(key)
    if name is None:
        reader.missing.append(key)
        return "silu"
    if not isinstance(name, str) or name not in ACTIVATIONS:
        reader.missing.append(f"{key} (unsupported activation {name!r}; known: {', '.join(sorted(ACTIVATIONS))})")
        return "silu"
    return ACTIVATIONS[name]


def from_hf_config(config: Mapping[str, Any], prefix: str = "model") -> Architecture:
    if not isinstance(config, Mapping):
        raise ConfigError([prefix], "the model config must be a JSON object")
    family = config.get("model_type")
    if not isinstance(family, str) or family not in SUPPORTED_FAMILIES:
        raise ConfigError([f"{prefix}.model_type"],
                          f"unsupported model_type {family!r}; supported: {', '.join(SUPPORTED_FAMILIES)}, "
                          "or describe the model with the generic schema")
    r = _Reader(config, prefix)
    hidden = r.int("hidden_size")
    layers = r.int("num_hidden_layers")
    heads = r.int("num_attention_heads")
    vocab = r.int("vocab_size")
    kv_heads = r.int("num_key_value_heads", heads, note=" (the config class default: num_attention_heads)") if heads else None
    activation = _activation(r)
    intermediate = r.int("intermediate_size") if family not in ("qwen3_moe",) else r.int("intermediate_size", 0, minimum=0)
    r.fail_if_missing()
    if family == "deepseek_v3":
        head_dim = hidden // heads  # unused: latent attention has its own head dimensions
    else:
        head_dim = r.int("head_dim", hidden // heads if hidden % heads == 0 else None,
                         note=" (the config class default: hidden_size / num_attention_heads)")
    if heads % kv_heads:
        r.missing.append("num_key_value_heads (must divide num_attention_heads)")
    tied_default = family in ("gemma", "gemma2")
    latent = moe = None
    moe_layers = [False] * layers
    windows: list[int | None] = [None] * layers
    norms_per_layer, qk_norm = 2, False
    qkv_bias = o_bias = mlp_bias = False

    if family in ("llama",):
        qkv_bias = o_bias = r.flag("attention_bias", False)
        mlp_bias = r.flag("mlp_bias", False)
    elif family == "qwen2":
        qkv_bias = True  # Qwen2 projects q, k and v with biases whatever the config says
    elif family in ("qwen3", "qwen3_moe"):
        qkv_bias = o_bias = r.flag("attention_bias", False)
        qk_norm = True
    elif family == "gemma2":
        norms_per_layer = 4
    elif family == "deepseek_v3":
        qkv_bias = o_bias = r.flag("attention_bias", False)

    window = r.optional_int("sliding_window")
    if family in ("mistral", "mixtral", "phi3") and window:
        windows = [window] * layers
    elif family in ("qwen2", "qwen3", "qwen3_moe") and window and r.flag("use_sliding_window", False):
        first = r.int("max_window_layers", layers, minimum=0)
        windows = [window if i >= first else None for i in range(layers)]
    elif family == "gemma2":
        window = window or r.optional_int("sliding_window_size")
        if not window:
            r.missing.append("sliding_window")
        windows = [window if i % 2 == 0 else None for i in range(layers)]
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == layers and window and all(
            isinstance(kind, str) for kind in layer_types):
        windows = [window if kind == "sliding_attention" else None for kind in layer_types]

    if family == "mixtral":
        moe = MoE(r.int("num_local_experts"), r.int("num_experts_per_tok"), intermediate)
        moe_layers = [True] * layers
    elif family == "qwen3_moe":
        moe = MoE(r.int("num_experts"), r.int("num_experts_per_tok"), r.int("moe_intermediate_size"))
        step = r.int("decoder_sparse_step", 1)
        dense_only = set(r.int_list("mlp_only_layers"))
        moe_layers = [i not in dense_only and (i + 1) % (step or 1) == 0 for i in range(layers)]
    elif family == "deepseek_v3":
        expert_width = r.int("moe_intermediate_size")
        shared = r.int("n_shared_experts", 0, minimum=0)
        moe = MoE(r.int("n_routed_experts"), r.int("num_experts_per_tok"), expert_width, shared,
                  (expert_width or 0) * (shared or 0), router_bias=config.get("topk_method", "noaux_tc") == "noaux_tc")
        if moe.experts and moe.top_k and moe.top_k > moe.experts:
            r.missing.append("num_experts_per_tok (cannot exceed n_routed_experts)")
        first_dense = r.int("first_k_dense_replace", 0, minimum=0)
        freq = r.int("moe_layer_freq", 1)
        moe_layers = [i >= first_dense and i % (freq or 1) == 0 for i in range(layers)]
        latent = LatentAttention(r.optional_int("q_lora_rank"), r.int("kv_lora_rank"), r.int("qk_nope_head_dim"),
                                 r.int("qk_rope_head_dim"), r.int("v_head_dim"))
    r.fail_if_missing()
    if moe is not None and moe.top_k > moe.experts:
        raise ConfigError([f"{prefix}.num_experts_per_tok"], "cannot exceed the number of experts")
    if any(moe_layers) and moe is None:
        raise ConfigError([f"{prefix}.model_type"], "MoE layers without expert counts")
    if not any(moe_layers):
        moe = None
    if any(not m for m in moe_layers) and not intermediate:
        raise ConfigError([f"{prefix}.intermediate_size"], "dense layers need intermediate_size")
    return Architecture(
        family=family, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab,
        intermediate=intermediate, gated_mlp=True, activation=activation,
        tied_embeddings=r.flag("tie_word_embeddings", tied_default),
        qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias, norms_per_layer=norms_per_layer, qk_norm=qk_norm,
        latent=latent, moe=moe, groups=_group_layers(list(zip(windows, moe_layers))),
        defaults_applied=tuple(r.defaults), max_positions=r.optional_int("max_position_embeddings"),
    )


def from_generic(spec: Mapping[str, Any]) -> Architecture:
    """The explicit schema for any other architecture (already validated by the HTTP contract)."""
    experts = spec.get("experts") or 0
    moe = MoE(experts, spec["top_k"], spec["expert_intermediate"], spec.get("shared_experts", 0),
              spec.get("shared_experts", 0) * spec["expert_intermediate"]) if experts else None
    window = spec.get("sliding_window")
    return Architecture(
        family="generic", hidden=spec["hidden"], layers=spec["layers"], heads=spec["heads"],
        kv_heads=spec.get("kv_heads") or spec["heads"], head_dim=spec.get("head_dim") or spec["hidden"] // spec["heads"],
        vocab=spec["vocab"], intermediate=spec.get("intermediate") or 0, gated_mlp=spec.get("gated_mlp", True),
        activation=spec.get("activation", "silu"), tied_embeddings=spec.get("tied_embeddings", False),
        qkv_bias=spec.get("qkv_bias", False), o_bias=spec.get("qkv_bias", False), norm=spec.get("norm", "rmsnorm"),
        moe=moe, groups=(LayerGroup(spec["layers"], window, bool(moe)),),
        max_positions=spec.get("max_position_embeddings"),
    )
