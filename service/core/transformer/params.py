"""Parameter counts, per layer and for the whole model, total and active per token."""

from __future__ import annotations

from dataclasses import dataclass

from service.core.memo import by_identity
from service.core.transformer.architecture import Architecture, LayerGroup


@dataclass(frozen=True)
class LayerParams:
    attention: int
    mlp_total: int  # every expert
    mlp_active: int  # what one token uses: top-k routed plus shared experts
    norms: int

    @property
    def total(self) -> int:
        return self.attention + self.mlp_total + self.norms

    @property
    def active(self) -> int:
        return self.attention + self.mlp_active + self.norms


@dataclass(frozen=True)
class ModelParams:
    embedding: int
    lm_head: int  # 0 when tied to the embedding
    final_norm: int
    layers_total: int
    layers_active: int

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.final_norm + self.layers_total

    @property
    def active(self) -> int:
        return self.embedding + self.lm_head + self.final_norm + self.layers_active


def attention_params(arch: Architecture) -> int:
    h = arch.hidden
    if arch.latent is not None:
        lat = arch.latent
        qk_head = lat.qk_nope_head_dim + lat.qk_rope_head_dim
        if lat.q_lora_rank:
            q = h * lat.q_lora_rank + lat.q_lora_rank + lat.q_lora_rank * arch.heads * qk_head
        else:
            q = h * arch.heads * qk_head
        kv = (h * (lat.kv_lora_rank + lat.qk_rope_head_dim) + lat.kv_lora_rank
              + lat.kv_lora_rank * arch.heads * (lat.qk_nope_head_dim + lat.v_head_dim))
        return q + kv + arch.heads * lat.v_head_dim * h
    q_out, kv_out = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    weights = h * q_out + 2 * h * kv_out + q_out * h
    biases = (q_out + 2 * kv_out if arch.qkv_bias else 0) + (h if arch.o_bias else 0)
    qk_norms = 2 * arch.head_dim if arch.qk_norm else 0
    return weights + biases + qk_norms


def mlp_params(arch: Architecture, width: int) -> int:
    projections = 3 if arch.gated_mlp else 2
    biases = ((2 if arch.gated_mlp else 1) * width + arch.hidden) if arch.mlp_bias else 0
    return projections * arch.hidden * width + biases


def norm_params(arch: Architecture) -> int:
    return arch.hidden * (2 if arch.norm == "layernorm" else 1)


def layer_params(arch: Architecture, group: LayerGroup) -> LayerParams:
    norms = arch.norms_per_layer * norm_params(arch)
    attention = attention_params(arch)
    if not group.moe:
        dense = mlp_params(arch, arch.intermediate)
        return LayerParams(attention, dense, dense, norms)
    moe = arch.moe
    expert = mlp_params(arch, moe.expert_intermediate)
    shared = mlp_params(arch, moe.shared_intermediate) if moe.shared_experts else 0
    router = arch.hidden * moe.experts + (moe.experts if moe.router_bias else 0)
    return LayerParams(attention, router + moe.experts * expert + shared, router + moe.top_k * expert + shared, norms)


@by_identity(objects=1)
def model_params(arch: Architecture) -> ModelParams:
    per_group = [(group.count, layer_params(arch, group)) for group in arch.groups]
    return ModelParams(
        embedding=arch.vocab * arch.hidden,
        lm_head=0 if arch.tied_embeddings else arch.vocab * arch.hidden,
        final_norm=norm_params(arch),
        layers_total=sum(count * p.total for count, p in per_group),
        layers_active=sum(count * p.active for count, p in per_group),
    )
