"""Parameter counts, per layer and for the whole model, total and active per token: sums of what the rows of
one token own (Row.params), so a layer feature declares its parameters once, on its rows."""

from __future__ import annotations

from dataclasses import dataclass

from service.core.memo import by_identity
from service.core.transformer.architecture import Architecture, LayerGroup
from service.core.transformer.layers import (
    ModelDTypes,
    Row,
    Step,
    layer_rows,
    mixer_rows,
    mlp_rows,
    model_level_rows,
    norm_weights,
)


@dataclass(frozen=True)
class LayerParams:
    attention: int  # the token mixer's: attention, or a recurrent layer's
    mlp_total: int  # every expert
    mlp_active: int  # what one token uses: top-k routed plus shared experts
    norms: int
    routed: int = 0  # the routed experts' share of mlp_total

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
    vision: int = 0  # a vision tower and its projector, shipped with the checkpoint
    routed_experts: int = 0  # the routed experts' share of layers_total (stored in their own format by some checkpoints)

    @property
    def total(self) -> int:
        """The whole checkpoint: vision tower included."""
        return self.embedding + self.lm_head + self.final_norm + self.layers_total + self.vision

    @property
    def active(self) -> int:
        """What one text token uses, as model cards count it: the decoder's active parameters and the LM head
        (the embedding table when tied), not the input embedding's lookup nor the vision tower."""
        head = self.lm_head or self.embedding
        return head + self.final_norm + self.layers_active

    @property
    def active_with_embedding(self) -> int:
        """The same with the input embedding table, as Mistral's, Qwen's and DeepSeek's cards count it."""
        return self.active + (self.embedding if self.lm_head else 0)


# Parameters do not depend on the step: counted on the rows of one token, unsplit, in the default dtypes.
_ONE_TOKEN = Step(batch=1, q_len=1, kv_len=1)
_DTYPES = ModelDTypes()


def _owned(rows: list[Row]) -> int:
    return sum(row.count * row.params for row in rows)


def _active(rows: list[Row]) -> int:
    return sum(row.count * (row.params if row.active_params is None else row.active_params) for row in rows)


def layer_params(arch: Architecture, group: LayerGroup) -> LayerParams:
    """A layer's parameters, summed over the rows that own them: its attention block, its MLP (every expert, and
    the ones a token uses) and its norms (what the layer's rows own beyond the two blocks)."""
    attention = _owned(mixer_rows(arch, group, _ONE_TOKEN, _DTYPES))
    mlp = mlp_rows(arch, group, _ONE_TOKEN, _DTYPES)
    whole = _owned(layer_rows(arch, group, _ONE_TOKEN, _DTYPES))
    routed = _owned([row for row in mlp if row.kind == "grouped_matmul"])
    return LayerParams(attention, _owned(mlp), _active(mlp), whole - attention - _owned(mlp), routed)


def norm_params(arch: Architecture) -> int:
    return norm_weights(arch)


@by_identity(objects=1)
def model_params(arch: Architecture) -> ModelParams:
    per_group = [(group.count, layer_params(arch, group)) for group in arch.groups]
    (embedding,), (final_norm, lm_head) = model_level_rows(arch, _ONE_TOKEN, _DTYPES)
    return ModelParams(
        embedding=embedding.params,
        lm_head=lm_head.params,
        final_norm=final_norm.params,
        vision=arch.vision_params,
        routed_experts=sum(count * p.routed for count, p in per_group),
        layers_total=sum(count * p.total for count, p in per_group),
        layers_active=sum(count * p.active for count, p in per_group),
    )
