"""DeepSeek-V4 (compressed attention, hyper-connections, hash-routed experts): parameters against transformers'
build, one compressed-sparse layer's matrix products against FlopCounterMode on transformers' own attention, and
the cache and the entries a query sees by hand."""

import json
from pathlib import Path

import pytest

from service.core.transformer.capacity import kv_bytes_per_request, kv_bytes_per_token, weight_bytes
from service.core.transformer.compressed import entries_seen
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, Step, mixer_rows
from service.core.transformer.params import model_params
from service.core.transformer.quantization import checkpoint_dtypes
from tests.conftest import forward_flop_counts, import_crosscheck
from tests.core.transformer.test_families import transformers_count

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
TINY_V4 = {
    "model_type": "deepseek_v4", "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 32, "q_lora_rank": 24, "o_groups": 2, "o_lora_rank": 16,
    "vocab_size": 100, "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "index_n_heads": 4, "index_head_dim": 16, "index_topk": 3, "sliding_window": 8,
    "qk_rope_head_dim": 8, "num_hash_layers": 2, "hc_mult": 2,
    "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                    "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
    "max_position_embeddings": 4096, "tie_word_embeddings": False,
}


def _published(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_entries_a_query_sees_by_hand():
    # A query at position p sees floor((p + 1) / c) entries. Decode at 1,000 cached + 1: floor(1,001 / 4) = 250.
    assert entries_seen(4, 1, 1001) == 250
    # A prefill of 10 tokens, c = 4: positions 0-9 see 0,0,0,1,1,1,1,2,2,2 = 10; capped at 1: 0,0,0,1 x 7 = 7.
    assert entries_seen(4, 10, 10) == 10 and entries_seen(4, 10, 10, top_k=1) == 7
    # The last 3 of 12 positions (9, 10, 11): 2 + 2 + 3 = 7.
    assert entries_seen(4, 3, 12) == 7


@pytest.mark.crosscheck
def test_parameters_equal_transformers_build():
    assert model_params(from_hf_config(TINY_V4)).total == transformers_count(
        "DeepseekV4ForCausalLM", "DeepseekV4Config", TINY_V4)


def test_flash_and_pro_as_their_cards_count_them():
    # DeepSeek's cards: V4-Flash 284B total with 13B active, V4-Pro 1.6T with 49B; their experts in fp4 beside fp8
    # blocks (expert_dtype), so the Flash checkpoint is about 156 GB.
    flash, pro = (from_hf_config(_published(name)) for name in ("deepseek-ai--DeepSeek-V4-Flash",
                                                                 "deepseek-ai--DeepSeek-V4-Pro"))
    assert (round(model_params(flash).total / 1e9), round(model_params(flash).active / 1e9)) == (284, 13)
    assert (round(model_params(pro).total / 1e11), round(model_params(pro).active / 1e9)) == (16, 49)
    dtypes = checkpoint_dtypes(flash.quantization)
    assert (dtypes.weights, dtypes.experts, dtypes.experts_group_size) == ("fp8", "fp4", 32)
    assert 150e9 < weight_bytes(flash, dtypes) < 160e9


def test_cache_by_hand():
    arch = from_hf_config(TINY_V4)
    # Six layers, each keeping its last 8 tokens of one 32-wide head (key and value are one) in bf16: 8 x 32 x 2 =
    # 512 bytes once past 8 tokens; the two compressed-sparse layers (c = 4) an entry of 32 + the indexer's 16 per
    # 4 tokens, the two heavily compressed (c = 16) one of 32 per 16. At 1,000 tokens: 6 x 512 + 2 x 250 x 48 x 2
    # + 2 x 62 x 32 x 2 = 3,072 + 48,000 + 7,936.
    assert kv_bytes_per_request(arch, ModelDTypes(), 1000) == 3_072 + 48_000 + 7_936
    # What each further token adds in the long run: 2 x 48 x 2 / 4 + 2 x 32 x 2 / 16 = 56 bytes.
    assert kv_bytes_per_token(arch, ModelDTypes()) == 56


@pytest.mark.crosscheck
def test_a_compressed_sparse_layer_matmuls_equal_flop_counter():
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention, DeepseekV4RotaryEmbedding

    fields = {k: v for k, v in TINY_V4.items() if k != "model_type"}
    config = transformers.DeepseekV4Config(**fields)
    layer = DeepseekV4Attention(config, layer_idx=1)  # compressed sparse (c = 4)
    length = 32
    hidden = torch.randn(1, length, 64)
    positions = torch.arange(length)[None]
    rotary = DeepseekV4RotaryEmbedding(config)
    embeddings = {kind: rotary(hidden, position_ids=positions, layer_type=kind) for kind in ("main", "compress")}
    counted = forward_flop_counts(layer, hidden, position_embeddings=embeddings, position_ids=positions,
                                  attention_mask=None)
    arch = from_hf_config(TINY_V4)
    group = next(g for g in arch.groups if g.compress == 4 and not g.hash_routed)
    rows = {r.name: r.cost.flops for r in mixer_rows(arch, group, Step(1, length, length), ModelDTypes())}
    projections = sum(flops for name, flops in rows.items() if name.endswith("_proj"))
    # By hand: q_a 2 x 32 x 24 x 64, q_b 2 x 32 x 128 x 24, kv 2 x 32 x 32 x 64, the compressor's kv and gate
    # 2 x 32 x 128 x 64, the indexer's 2 x 32 x 64 x 64, its q_b 2 x 32 x 64 x 24 and weights 2 x 32 x 4 x 64, o_a
    # (2 groups of 64 -> 16) 2 x 32 x 2 x 16 x 64, o_b 2 x 32 x 64 x 32.
    assert projections == (98_304 + 196_608 + 131_072 + 524_288 + 262_144 + 98_304 + 16_384 + 131_072
                           + 131_072)
    # Without a cache transformers pools the 32 / 4 = 8 whole windows, scores every query against all 8 entries
    # (2 x 32 x 4 heads x 16 x 8) and, in eager attention, every query against all 32 tokens and 8 entries
    # (2 x 2 x 4 heads x 32 x 40 x 32): dense products the rows count per query (window, entries seen, top 3).
    dense_scoring = 2 * length * 4 * 16 * 8
    dense_attention = 2 * 2 * 4 * length * (length + 8) * 32
    assert counted["total"] == projections + dense_scoring + dense_attention
