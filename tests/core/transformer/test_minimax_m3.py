"""MiniMax-M3 (model_type minimax_m3; transformers 5.25.0 reads it with MiniMaxM3VLTextConfig): full attention with
per-head q/k norms and partial RoPE, on its sparse layers over the key blocks a lightning indexer picks; routed
experts beside a shared one after dense layers. Counted against transformers' own build, a sparse layer's attention
FLOPs against FlopCounterMode, its cache and its sparse attention by hand."""

import json
from pathlib import Path

import pytest

from service.core.transformer.architecture import ConfigError
from service.core.transformer.capacity import kv_bytes_per_request
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, Step, layer_rows
from service.core.transformer.params import model_params
from tests.conftest import forward_flop_counts, import_crosscheck, transformers_parameters

PUBLISHED = json.loads((Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
                        / "MiniMaxAI--MiniMax-M3.json").read_text())
# Six layers, the first two dense and full; the sparse ones pick 2 blocks of 4 keys with 2 index heads of 16.
TINY = dict(model_type="minimax_m3", hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=100, intermediate_size=32, dense_intermediate_size=96, shared_intermediate_size=24,
            num_local_experts=8, num_experts_per_tok=2, rotary_dim=8, max_position_embeddings=4096,
            hidden_act="swigluoai", moe_layer_freq=[0, 0, 1, 1, 1, 1],
            sparse_attention_config={"sparse_attention_freq": [0, 0, 1, 1, 1, 1], "sparse_num_index_heads": 2,
                                     "sparse_index_dim": 16, "sparse_block_size": 4, "sparse_topk_blocks": 2})


def _text_config(config: dict):
    import_crosscheck("transformers")
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig

    return MiniMaxM3VLTextConfig(**{k: v for k, v in config.items() if k not in ("model_type", "architectures")})


@pytest.mark.crosscheck
@pytest.mark.parametrize("config", [TINY, PUBLISHED], ids=["toy", "MiniMax-M3"])
def test_parameters_equal_transformers_build(config):
    torch = import_crosscheck("torch")
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM

    with torch.device("meta"):
        model = MiniMaxM3VLForCausalLM(_text_config(config))
    assert model_params(from_hf_config(config)).total == transformers_parameters(model)


def test_the_published_config_by_hand():
    arch = from_hf_config(PUBLISHED)
    params = model_params(arch)
    h = 6_144
    # transformers 5.25.0's build of the same config: 426,174,572,928 parameters (57 x 128 router biases among them).
    assert params.total == 426_174_572_928
    # A token uses, a layer: q, k, v, o 6,144 x (64 + 4 + 4 + 64) x 128 and the q/k norms 2 x 128, two norms; on the 57
    # sparse layers the indexer's projections 6,144 x (4 + 1) x 128 and norms 2 x 128; three dense MLPs 3 x 6,144 x
    # 12,288 x 3; 57 MoE layers of 4 experts and the shared one (5 x 3 x 6,144 x 3,072), the router 128 x 6,144 and
    # its biases; the final norm and the LM head 200,064 x 6,144.
    attention = 60 * (h * 136 * 128 + 2 * 128 + 2 * h) + 57 * (h * 5 * 128 + 2 * 128)
    mlps = 3 * 3 * h * 12_288 + 57 * (5 * 3 * h * 3_072 + 128 * h + 128)
    assert params.active == attention + mlps + h + 200_064 * h
    assert [(g.count, g.moe, g.indexed) for g in arch.groups] == [(3, False, False), (57, True, True)]
    # The cache: 4 K/V heads of 128 in bf16 on every layer (2,048 bytes a token) and the indexer's 128-wide key on the
    # 57 sparse layers (256 bytes), whole on every device.
    assert kv_bytes_per_request(arch, ModelDTypes(), 10_000) == 10_000 * (60 * 2_048 + 57 * 256)
    assert kv_bytes_per_request(arch, ModelDTypes(), 10_000, tensor_parallel=4) == 10_000 * (60 * 512 + 57 * 256)


def test_a_sparse_layer_attends_to_its_blocks_only():
    # Decoding at 100,000 tokens a sparse layer reads 16 blocks of 128 keys (2,048 of the 4 K/V heads' keys and
    # values), a full layer every key; the indexer scores every cached index key with 4 heads of 128.
    arch = from_hf_config(PUBLISHED)
    full, sparse = arch.groups
    context = 100_000
    dense_rows = {r.name: r for r in layer_rows(arch, full, Step(1, 1, context), ModelDTypes())}
    sparse_rows = {r.name: r for r in layer_rows(arch, sparse, Step(1, 1, context), ModelDTypes())}
    assert dense_rows["attention"].cost.kv_bytes_read == context * 4 * 256 * 2
    assert sparse_rows["attention"].cost.kv_bytes_read == 2_048 * 4 * 256 * 2
    assert "indexer" not in dense_rows
    assert sparse_rows["indexer"].cost.flops == context * 4 * (2 * 128 + 3)
    assert sparse_rows["indexer"].cost.kv_bytes_read == context * 128 * 2
    assert sparse_rows["indexer_q_proj"].params == 6_144 * 512 and sparse_rows["indexer_k_proj"].params == 6_144 * 128
    assert "indexer_weights_proj" not in sparse_rows


@pytest.mark.parametrize("key", ["sparse_num_index_heads", "sparse_index_dim", "sparse_block_size",
                                 "sparse_topk_blocks"])
def test_an_invalid_sparse_key_is_refused_by_name(key):
    # Each of the indexer's sizes (an invalid one reads as 0; the heads and width once slipped past the check).
    config = {**TINY, "sparse_attention_config": {**TINY["sparse_attention_config"], key: 0}}
    with pytest.raises(ConfigError) as refused:
        from_hf_config(config)
    assert refused.value.fields == [f"model.sparse_attention_config.{key}"]


@pytest.mark.crosscheck
def test_sparse_layer_attention_flops_equal_flop_counter():
    # transformers' MiniMaxM3VLAttention on a sparse layer against the rows: the q, k, v, o and the indexer's
    # projections as products; eager attention forms every (query, key) pair under its block mask, and the indexer
    # scores every pair: QK^T and PV over 4 heads of 16, and the index scores over 2 heads of 16.
    torch = import_crosscheck("torch")
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import (
        MiniMaxM3VLAttention,
        MiniMaxM3VLRotaryEmbedding,
    )

    built = _text_config(TINY)
    built._attn_implementation = "eager"
    layer = MiniMaxM3VLAttention(built, layer_idx=3)
    length = 16
    hidden = torch.randn(1, length, 64)
    positions = MiniMaxM3VLRotaryEmbedding(built)(hidden, torch.arange(length)[None])
    counted = forward_flop_counts(layer, hidden, position_embeddings=positions, attention_mask=None)
    arch = from_hf_config(TINY)
    sparse = next(g for g in arch.groups if g.indexed)
    rows = {r.name: r.cost.flops for r in layer_rows(arch, sparse, Step(1, length, length), ModelDTypes())}
    projections = rows["qkv_proj"] + rows["o_proj"] + rows["indexer_q_proj"] + rows["indexer_k_proj"]
    eager = 2 * length * length * 4 * (16 + 16) + 2 * length * length * 2 * 16
    assert counted["total"] == projections + eager
