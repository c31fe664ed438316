"""DeepSeek-V3.2's sparse attention: an indexer scores every cached key and each query attends to its top_k only.
Parameters against transformers' build, the indexer and the attention counted by hand, the cache per token by hand,
and a whole decode's closed-form sum against its steps one by one."""

import pytest

from service.core.operators import sparse_index_cost
from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.capacity import kv_bytes_per_token_per_layer
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, Step, layer_rows
from service.core.transformer.params import model_params
from service.persistence.catalog import nominal_device
from tests.core.transformer.test_families import TINY_TEXT, transformers_count

TINY_V32 = {**TINY_TEXT, "model_type": "deepseek_v32", "num_key_value_heads": 4, "intermediate_size": 96,
            "moe_intermediate_size": 32, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
            "first_k_dense_replace": 1, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 8, "n_group": 1, "topk_group": 1, "hidden_act": "silu",
            "tie_word_embeddings": False, "index_n_heads": 4, "index_head_dim": 16, "index_topk": 32}


@pytest.mark.crosscheck
def test_parameters_equal_transformers_build():
    # Beside DeepSeek-V3's, each layer's indexer: wq_b 24 x 4 x 16, wk 64 x 16, its key's layer norm 2 x 16 and a
    # weight per head 64 x 4.
    assert model_params(from_hf_config(TINY_V32)).total == transformers_count(
        "DeepseekV32ForCausalLM", "DeepseekV32Config", TINY_V32)
    v3 = model_params(from_hf_config({**TINY_V32, "model_type": "deepseek_v3"})).total
    assert model_params(from_hf_config(TINY_V32)).total - v3 == 4 * (24 * 64 + 64 * 16 + 2 * 16 + 64 * 4)


def test_the_cache_keeps_the_latent_and_the_index_key():
    arch = from_hf_config(TINY_V32)
    # (kv_lora_rank 16 + rope 8 + index key 16) x 2 bytes = 80 bytes a token and layer, every token kept.
    assert kv_bytes_per_token_per_layer(arch, ModelDTypes()) == 80


def test_indexer_and_attention_by_hand():
    # Decode at a 1,000-token context, batch 2: the indexer scores 1,001 keys per sequence with 4 heads at
    # 2 x 16 + 3 FLOPs: 2 x 1,001 x 4 x 35 = 280,280.
    assert sparse_index_cost(batch=2, heads=4, head_dim=16, q_len=1, kv_len=1001, top_k=32).flops == 280_280
    arch = from_hf_config(TINY_V32)
    rows = {r.name: r for r in layer_rows(arch, arch.groups[0], Step(2, 1, 1001), ModelDTypes())}
    assert rows["indexer"].cost.flops == 280_280
    # The absorbed attention reads the 32 selected latents, not 1,001: 2 x 32 x (16 + 8) x 2 bytes of keys.
    attention = rows["attention"]
    assert attention.attention_params["window"] == 32
    assert attention.cost.kv_bytes_read == 2 * 32 * 24 * 2


def test_a_decode_sum_equals_its_steps():
    arch = from_hf_config(TINY_V32)
    evaluator = Evaluator(nominal_device("nvidia-h100-sxm"))
    options = dict(dtypes=ModelDTypes(), tensor_parallel=1, attention_implementation="flash")
    prompt, output = 20, 30  # the selection caps the keys at 32 from the 13th step on
    whole = analyze_model(arch, evaluator, phase="decode", batch=2, seq_len=prompt, output_len=output, **options)
    one_by_one = sum(analyze_model(arch, evaluator, phase="decode", batch=2, seq_len=prompt + i, **options).totals.time_s
                     for i in range(output - 1))
    assert whole.e2e_decode_time_s == pytest.approx(one_by_one, rel=1e-12)


def test_the_catalog_entry_is_deepseek_v3_with_an_indexer_a_layer():
    from service.core.transformer.quantization import checkpoint_dtypes
    from service.persistence.catalog import model_catalog

    configs = {entry["id"]: entry["config"] for entry in model_catalog()}
    v3, v32 = (from_hf_config(configs[name]) for name in ("deepseek-v3", "deepseek-v3.2"))
    # 61 indexers of wq_b 1,536 x 64 x 128 = 12,582,912, wk 7,168 x 128 = 917,504, a layer norm of 2 x 128 and
    # weights 7,168 x 64 = 458,752: 13,959,424 each, 851,524,864 in all.
    assert model_params(v32).total - model_params(v3).total == 61 * 13_959_424 == 851_524_864
    assert v32.quantization == v3.quantization and checkpoint_dtypes(v32.quantization).weights == "fp8"
    # A token's cache a layer: (512 latent + 64 rope + 128 index key) x 1 byte in fp8.
    assert kv_bytes_per_token_per_layer(v32, ModelDTypes(kv_cache="fp8")) == 704


TINY_GLM5 = {**TINY_V32, "model_type": "glm_moe_dsa", "num_hidden_layers": 6, "indexer_types":
             ["full", "full", "shared", "full", "shared", "shared"]}


@pytest.mark.crosscheck
def test_glm5_runs_the_indexer_on_its_full_layers_only():
    # GLM-5.2: a "shared" layer reuses the previous full layer's selection and has no indexer of its own. Three
    # shared layers of six: three indexers fewer than DeepSeek-V3.2's build of the same dimensions, each
    # 24 x 4 x 16 + 64 x 16 + 2 x 16 + 64 x 4 = 2,848 parameters.
    glm = model_params(from_hf_config(TINY_GLM5)).total
    assert glm == transformers_count("GlmMoeDsaForCausalLM", "GlmMoeDsaConfig", TINY_GLM5)
    every = model_params(from_hf_config({**TINY_GLM5, "indexer_types": ["full"] * 6})).total
    assert every - glm == 3 * 2_848


def test_glm5_shared_layers_keep_no_index_key_and_score_nothing():
    arch = from_hf_config(TINY_GLM5)
    assert [sum(g.count for g in arch.groups if g.indexed is kind) for kind in (True, False)] == [3, 3]
    shared = next(g for g in arch.groups if not g.indexed)
    # Every layer caches its latent and rope key, (16 + 8) x 2 bytes; the three full layers their index key too,
    # 16 x 2: 6 x 48 + 3 x 32 = 384 bytes a token.
    from service.core.transformer.capacity import kv_bytes_per_request, kv_bytes_per_token

    assert kv_bytes_per_token(arch, ModelDTypes()) == 384
    assert kv_bytes_per_request(arch, ModelDTypes(), 1000) == 384_000
    names = {row.name for row in layer_rows(arch, shared, Step(2, 1, 1001), ModelDTypes())}
    assert "indexer" not in names and "indexer_k_proj" not in names
    attention = next(r for r in layer_rows(arch, shared, Step(2, 1, 1001), ModelDTypes()) if r.name == "attention")
    assert attention.attention_params["window"] == 32  # it still attends to the selected 32 keys


def test_glm5_indexer_schedule_follows_the_config_class():
    # Without indexer_types: every index_topk_freq-th layer from index_skip_topk_offset on runs an indexer
    # (transformers 5.25.0's GlmMoeDsaConfig): freq 4, offset 3 over 10 layers: 0, 1, 2 (before the offset), 6.
    base = {k: v for k, v in TINY_GLM5.items() if k != "indexer_types"} | {"num_hidden_layers": 10}
    arch = from_hf_config({**base, "index_topk_freq": 4, "index_skip_topk_offset": 3})
    assert sum(g.count for g in arch.groups if g.indexed) == 4
    assert sum(g.count for g in from_hf_config(base).groups if g.indexed) == 10  # the defaults: every layer
    # An F/S pattern says the same per layer: F runs the indexer.
    pattern = from_hf_config({**base, "index_topk_pattern": "FFSSFSSSSF"})
    assert sum(g.count for g in pattern.groups if g.indexed) == 4
    with pytest.raises(Exception) as refused:
        from_hf_config({**base, "indexer_types": ["full", "sometimes"]})
    assert "indexer_types (10 entries, each full or shared)" in str(refused.value)
