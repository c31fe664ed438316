"""The families of 2025-26 (gpt-oss, Kimi-K2, GLM-4.5, Gemma 3, Mistral 3, Llama 4, Gemma 4): each read from its config,
its parameters counted as transformers builds the same config (on the meta device, vision towers included), its
layer FLOPs against FlopCounterMode on a real transformers layer, and its cache per request derived by hand."""

import pytest

from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.architecture import ConfigError
from service.core.transformer.capacity import kv_bytes_per_request, weight_bytes
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, Step, layer_rows
from service.core.transformer.params import model_params
from service.core.transformer.quantization import checkpoint_dtypes
from service.persistence.catalog import model_catalog, nominal_device
from tests.conftest import forward_flop_counts, import_crosscheck, transformers_parameters

CATALOG = {entry["id"]: entry["config"] for entry in model_catalog()}
TINY_TEXT = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 vocab_size=100, max_position_embeddings=4096)
TINY_VISION = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                   patch_size=8)


def transformers_count(model_class: str, config_class: str, config: dict) -> int:
    """Parameters of transformers' own build of `config`, plus the persistent buffers a checkpoint stores as weights
    (a router's score-correction bias is a buffer there)."""
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "quantization_config")}
    with torch.device("meta"):
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**fields))
    return transformers_parameters(model)


CASES = [
    ("gpt-oss-20b", "GptOssForCausalLM", "GptOssConfig", CATALOG["gpt-oss-20b"]),
    ("gpt-oss-120b", "GptOssForCausalLM", "GptOssConfig", CATALOG["gpt-oss-120b"]),
    ("kimi_k2 (DeepSeek-V3's build)", "DeepseekV3ForCausalLM", "DeepseekV3Config",
     {**TINY_TEXT, "model_type": "kimi_k2", "num_key_value_heads": 4, "intermediate_size": 96,
      "moe_intermediate_size": 32, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
      "first_k_dense_replace": 1, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
      "v_head_dim": 8, "n_group": 1, "topk_group": 1, "hidden_act": "silu", "tie_word_embeddings": False}),
    ("glm4_moe", "Glm4MoeForCausalLM", "Glm4MoeConfig",
     {**TINY_TEXT, "model_type": "glm4_moe", "intermediate_size": 96, "moe_intermediate_size": 32,
      "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
      "attention_bias": True, "use_qk_norm": True, "hidden_act": "silu", "tie_word_embeddings": False}),
    ("gemma3_text", "Gemma3ForCausalLM", "Gemma3TextConfig",
     {**TINY_TEXT, "model_type": "gemma3_text", "num_hidden_layers": 7, "intermediate_size": 96,
      "sliding_window": 32, "hidden_activation": "gelu_pytorch_tanh"}),
    ("llama4_text", "Llama4ForCausalLM", "Llama4TextConfig",
     {**TINY_TEXT, "model_type": "llama4_text", "intermediate_size": 32, "intermediate_size_mlp": 96,
      "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 16,
      "use_qk_norm": True, "hidden_act": "silu", "tie_word_embeddings": False}),
    ("gemma3", "Gemma3ForConditionalGeneration", "Gemma3Config",
     {"model_type": "gemma3", "vision_config": {**TINY_VISION, "vision_use_head": False},
      "text_config": {**TINY_TEXT, "num_hidden_layers": 7, "intermediate_size": 96, "sliding_window": 32,
                      "hidden_activation": "gelu_pytorch_tanh"}}),
    ("mistral3", "Mistral3ForConditionalGeneration", "Mistral3Config",
     {"model_type": "mistral3", "vision_config": {**TINY_VISION, "head_dim": 12}, "tie_word_embeddings": False,
      "text_config": {**TINY_TEXT, "model_type": "mistral", "intermediate_size": 96, "hidden_act": "silu",
                      "tie_word_embeddings": False}}),
    ("llama4", "Llama4ForConditionalGeneration", "Llama4Config",
     {"model_type": "llama4",
      "vision_config": {**TINY_VISION, "vision_output_dim": 40, "projector_input_dim": 40, "projector_output_dim": 40,
                        "pixel_shuffle_ratio": 0.5},
      "text_config": {**TINY_TEXT, "intermediate_size": 32, "intermediate_size_mlp": 96, "num_local_experts": 4,
                      "interleave_moe_layer_step": 2, "attention_chunk_size": 16, "use_qk_norm": True,
                      "hidden_act": "silu", "tie_word_embeddings": False}}),
    # Gemma 4 at toy sizes, both decoders: routed experts beside the dense MLP (router scales, the block's norms), a
    # per-layer stored scalar; global layers with their own head width and K/V heads, values from the keys; a vision
    # tower with clipped linears (four stored bounds each) and standardisation.
    ("gemma4", "Gemma4ForConditionalGeneration", "Gemma4Config",
     {"model_type": "gemma4", "vision_config": {**TINY_VISION, "head_dim": 12, "num_key_value_heads": 4,
                                                "position_embedding_size": 64, "use_clipped_linears": True,
                                                "standardize": True},
      "text_config": {**TINY_TEXT, "num_hidden_layers": 6, "intermediate_size": 96, "sliding_window": 32,
                      "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "global_head_dim": 32,
                      "num_global_key_value_heads": 1, "attention_k_eq_v": True, "enable_moe_block": True,
                      "num_experts": 8, "top_k_experts": 2, "moe_intermediate_size": 24,
                      "hidden_size_per_layer_input": 0}}),
    ("gemma4_text dense", "Gemma4ForCausalLM", "Gemma4TextConfig",
     {**TINY_TEXT, "model_type": "gemma4_text", "num_hidden_layers": 6, "intermediate_size": 96,
      "sliding_window": 32, "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "global_head_dim": 32,
      "num_global_key_value_heads": 2, "hidden_size_per_layer_input": 0}),
]


@pytest.mark.crosscheck
@pytest.mark.parametrize("name, model_class, config_class, config", CASES, ids=[case[0] for case in CASES])
def test_parameters_equal_transformers_build(name, model_class, config_class, config):
    assert model_params(from_hf_config(config)).total == transformers_count(model_class, config_class, config)


def test_gpt_oss_counts_as_its_model_card():
    # OpenAI's card: gpt-oss-20b 21B total, 3.6B active; gpt-oss-120b 117B total, 5.1B active (both without the
    # input embedding, 201,088 x 2,880 = 579,133,440, which the active figure leaves out).
    small, large = (model_params(from_hf_config(CATALOG[name])) for name in ("gpt-oss-20b", "gpt-oss-120b"))
    assert round(small.total / 1e9) == 21 and round(small.active / 1e8) == 36
    assert round(large.total / 1e9) == 117 and round(large.active / 1e8) == 51
    assert small.active_with_embedding - small.active == 201_088 * 2_880


def test_gpt_oss_20b_cache_per_request_by_hand():
    # 12 full-attention layers keep every token: 12 x 2 (K, V) x 8 KV heads x 64 x 2 bytes = 24,576 bytes a token;
    # 12 sliding layers keep at most 128 tokens: 12 x 2 x 8 x 64 x 2 x 128 = 3,145,728 bytes a request.
    arch = from_hf_config(CATALOG["gpt-oss-20b"])
    bf16 = ModelDTypes()
    assert kv_bytes_per_request(arch, bf16, 1) == 24 * 2 * 8 * 64 * 2
    assert kv_bytes_per_request(arch, bf16, 100_000) == 100_000 * 24_576 + 3_145_728
    assert [(g.count, g.sliding_window) for g in arch.groups] == [(12, 128), (12, None)]


def test_gpt_oss_weights_come_to_the_checkpoint_size():
    # Experts in mxfp4 (0.5 byte + an 8-bit scale per 32 = 0.53125 byte), everything else bf16: gpt-oss-120b's
    # 116.83B parameters hold 114.71B in experts (36 layers x 128 experts x (2,880 x 5,760 + 5,760 + 2,880 x 2,880
    # + 2,880)), so 114.71e9 x 0.53125 + 2.12e9 x 2 = 65.2 GB, the checkpoint's ~65 GB of safetensors.
    arch = from_hf_config(CATALOG["gpt-oss-120b"])
    params = model_params(arch)
    experts = 36 * 128 * (2_880 * 5_760 + 5_760 + 2_880 * 2_880 + 2_880)
    assert params.routed_experts == experts
    dtypes = checkpoint_dtypes(arch.quantization)
    assert (dtypes.weights, dtypes.experts, dtypes.experts_group_size) == ("bf16", "fp4", 32)
    assert weight_bytes(arch, dtypes) == experts * 0.53125 + (params.total - experts) * 2
    assert 64e9 < weight_bytes(arch, dtypes) < 66e9


def test_deepseek_v3_checkpoint_is_fp8_block_scaled():
    # quantization_config: fp8, weight_block_size [128, 128], dynamic activations: fp8 weights with an fp32 scale per
    # 16,384, fp8 activations. At TP 8 the weights are about 671e9 x (1 + 4/16384) / 8 = 8.4e10 bytes a device.
    arch = from_hf_config(CATALOG["deepseek-v3"])
    dtypes = checkpoint_dtypes(arch.quantization)
    assert (dtypes.weights, dtypes.activations, dtypes.weight_group_size, dtypes.weight_scale_bytes) == ("fp8", "fp8", 16_384, 4.0)
    assert 8.3e10 < weight_bytes(arch, dtypes, tensor_parallel=8) < 8.5e10


def test_chunked_and_nope_layers_of_llama4():
    # Every 4th layer is a global NoPE layer, every 2nd routes to experts (layers 2 and 4 of 4); the others attend
    # within chunks of 16 and cache at most a chunk: 3 chunked layers x 16 tokens + 1 NoPE layer x 1,000 tokens, at
    # 2 (K, V) x 2 KV heads x 16 x 2 bytes = 128 bytes a token each.
    arch = from_hf_config(CASES[5][3])
    assert [(g.count, g.chunk, g.rope, g.moe) for g in arch.groups] == [
        (2, 16, True, False), (1, 16, True, True), (1, None, False, True)]
    assert kv_bytes_per_request(arch, ModelDTypes(), 1_000) == (3 * 16 + 1_000) * 128


def test_gemma3_keeps_one_global_layer_in_six():
    # Layers 6 and 12 of 12 (1-based) are global; the 10 others keep at most their 32-token window.
    arch = from_hf_config({**CASES[4][3], "num_hidden_layers": 12})
    assert sorted((g.count, g.sliding_window) for g in arch.groups) == [(2, None), (10, 32)]


def test_chunked_decode_sum_equals_the_steps_one_by_one():
    # The closed-form sum over decode steps (keys climbing 1..chunk and starting again) against each step analysed.
    arch = from_hf_config(CASES[5][3])
    evaluator = Evaluator(nominal_device("nvidia-h100-sxm"))
    options = dict(dtypes=ModelDTypes(), tensor_parallel=1, attention_implementation="flash")
    prompt, output = 21, 40
    whole = analyze_model(arch, evaluator, phase="decode", batch=2, seq_len=prompt, output_len=output, **options)
    one_by_one = sum(analyze_model(arch, evaluator, phase="decode", batch=2, seq_len=prompt + i, **options).totals.time_s
                     for i in range(output - 1))
    assert whole.e2e_decode_time_s == pytest.approx(one_by_one, rel=1e-12)


@pytest.mark.crosscheck
def test_gemma3_layer_flops_equal_flop_counter():
    # One real Gemma 3 decoder layer: FlopCounterMode counts its projections and the whole (masked) score matrix;
    # the service's matmul rows and the unmasked attention matmuls, softmax aside, must be the same number.
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")

    from service.core.operators import attention_cost

    config = CASES[4][3]
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.Gemma3TextConfig(**fields, _attn_implementation="eager")
    layer = transformers.models.gemma3.modeling_gemma3.Gemma3DecoderLayer(hf, layer_idx=5)  # a global layer
    batch, length = 2, 24
    x = torch.randn(batch, length, 64)
    positions = (torch.randn(1, length, 16), torch.randn(1, length, 16))
    counted = forward_flop_counts(layer, x, position_embeddings=positions, attention_mask=None)
    arch = from_hf_config(config)
    result = analyze_model(arch, Evaluator(nominal_device("nvidia-h100-sxm")), phase="prefill", batch=batch,
                           seq_len=length, dtypes=ModelDTypes())
    global_rows = [r for r in result.rows if r.group == "dense layers"]
    matmuls = sum(r.flops / r.layers for r in global_rows if r.kind == "matmul")
    scores = attention_cost(batch=batch, heads=4, kv_heads=2, head_dim=16, q_len=length, kv_len=length)
    assert matmuls + scores.flops - batch * 4 * length * length * 5 == counted["total"]


def test_positions_past_the_dimension_bound_are_read_and_invalid_ones_refused():
    # 2^25 positions (a 32M-token context) is past the 2^24 bound on dimensions, which drive work; positions do not.
    # It was read as 0, which then refused every prompt as too long.
    import pytest

    from service.core.transformer.architecture import ConfigError

    config = dict(next(e for e in model_catalog() if e["id"] == "llama-3.1-8b")["config"])
    assert from_hf_config({**config, "max_position_embeddings": 2**25}).max_positions == 2**25
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        from_hf_config({**config, "max_position_embeddings": 0})


TINY_MINIMAX = {**TINY_TEXT, "model_type": "minimax_m2", "intermediate_size": 32, "num_local_experts": 4,
                "num_experts_per_tok": 2, "use_qk_norm": True, "rotary_dim": 8, "hidden_act": "silu",
                "tie_word_embeddings": False}


@pytest.mark.crosscheck
def test_minimax_m2_parameters_equal_transformers_build():
    # Its router's score-correction bias is a buffer in transformers' module, stored in the checkpoint.
    assert model_params(from_hf_config(TINY_MINIMAX)).total == transformers_count(
        "MiniMaxM2ForCausalLM", "MiniMaxM2Config", TINY_MINIMAX)


def test_minimax_m2_normalises_all_heads_at_once_and_rotates_rotary_dim():
    # q_norm's scale spans all 4 heads x 16 = 64 and k_norm's 2 x 16 = 32 (Qwen3's would be one head's, 16 each);
    # RoPE turns 8 of each head's 16 dimensions.
    arch = from_hf_config(TINY_MINIMAX)
    rows = {r.name: r for r in layer_rows(arch, arch.groups[0], Step(1, 1, 1), ModelDTypes())}
    assert (rows["q_norm"].params, rows["k_norm"].params) == (64, 32)
    assert arch.rotary_fraction == 0.5
    assert arch.moe is not None and arch.moe.router_bias


def test_qwen3_vl_vision_tower_by_hand():
    # Qwen3-VL-8B's tower (hidden 1,152, MLP 4,304, 27 blocks, 16-pixel patches over 2 frames, 2,304 positions,
    # 2 x 2 merge into 4,096, deepstack mergers at 3 layers):
    # patch convolution 3 x 2 x 16 x 16 x 1,152 + 1,152 = 1,770,624; positions 2,304 x 1,152 = 2,654,208;
    # a block: 2 layer norms 4,608 + qkv 3 x 1,152^2 + 3,456 + proj 1,152^2 + 1,152 + fc1 4,304 x 1,152 + 4,304
    # + fc2 1,152 x 4,304 + 1,152 = 15,239,504, x 27 = 411,466,608; the merger: a norm 2,304 + fc1 4,608^2 + 4,608
    # + fc2 4,096 x 4,608 + 4,096 = 40,119,040; each deepstack merger the same with its norm over 4,608
    # (9,216): 40,125,952, x 3 = 120,377,856. In all 576,388,336.
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
                         / "Qwen--Qwen3-VL-8B-Instruct.json").read_text())
    assert from_hf_config(config).vision_params == 576_388_336
    # Qwen3.5's tower is the same without deepstack mergers.
    qwen35 = {**config, "model_type": "qwen3_5", "vision_config": {**config["vision_config"], "deepstack_visual_indexes": []}}
    qwen35["text_config"] = {**config["text_config"], "layer_types": ["linear_attention", "full_attention"] * 18,
                             "linear_num_value_heads": 8, "linear_num_key_heads": 4, "linear_key_head_dim": 32,
                             "linear_value_head_dim": 32}
    assert from_hf_config(qwen35).vision_params == 576_388_336 - 120_377_856


@pytest.mark.crosscheck
def test_mimo_is_qwen2s_decoder():
    # transformers has no class of its own for MiMo-7B (remote code: Qwen2's model with MTP layers beside it).
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
                         / "XiaomiMiMo--MiMo-7B-Base.json").read_text())
    tiny = {**config, **TINY_TEXT, "intermediate_size": 96, "max_window_layers": 2}
    assert model_params(from_hf_config(tiny)).total == transformers_count("Qwen2ForCausalLM", "Qwen2Config", tiny)
    # MiMo-7B-Base, by hand: a layer holds q 4,096 x 4,096 + 4,096, k and v 1,024 x 4,096 + 1,024 each, o 4,096^2,
    # the MLP 3 x 4,096 x 11,008 and two norms of 4,096: 177,223,680, x 36 = 6,380,052,480; untied embedding and
    # head 2 x 151,680 x 4,096; the final norm 4,096. Its MTP layer is not counted.
    layer = (4_096 * 4_096 + 4_096) + 2 * (1_024 * 4_096 + 1_024) + 4_096 * 4_096 + 3 * 4_096 * 11_008 + 2 * 4_096
    assert model_params(from_hf_config(config)).total == 36 * layer + 2 * 151_680 * 4_096 + 4_096 == 7_622_619_136


# google/gemma-3-27b-it's config.json (huggingface.co/google/gemma-3-27b-it): its text_config leaves the vocabulary,
# the activation, the RoPE base and more to Gemma3TextConfig's defaults.
GEMMA3_27B_IT = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                    "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}


def test_a_config_that_leaves_keys_to_its_class_reads_as_transformers_reads_it():
    arch = from_hf_config(GEMMA3_27B_IT)
    assert (arch.vocab, arch.activation, arch.tied_embeddings) == (262_208, "gelu", True)
    assert "vocab_size = 262208 (transformers 5.25.0's Gemma3TextConfig default)" in arch.defaults_applied
    assert any(note.startswith("hidden_activation = 'gelu_pytorch_tanh'") for note in arch.defaults_applied)


@pytest.mark.crosscheck
def test_gemma3_27b_it_parameters_equal_transformers_build():
    # Google's card: 27B; transformers' build of the same config counts the SigLIP tower and projector too.
    ours = model_params(from_hf_config(GEMMA3_27B_IT)).total
    assert ours == transformers_count("Gemma3ForConditionalGeneration", "Gemma3Config", GEMMA3_27B_IT)
    assert round(ours / 1e9) == 27


def _published(name: str):
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
                       / f"{name}.json").read_text())


def test_mimo_v2_flash_window_layers_hold_twice_the_kv_heads_and_sinks():
    arch = from_hf_config(_published("XiaomiMiMo--MiMo-V2-Flash"))
    full = [g for g in arch.groups if not g.sliding_window]
    window = [g for g in arch.groups if g.sliding_window]
    # Full attention on layer 0 and every sixth (5, 11, ..., 47): 9 layers of 4 K/V heads; the other 39 attend
    # over sliding_window_size 128 + the query = 129 tokens with 8 K/V heads and a sink logit per head.
    assert sum(g.count for g in full) == 9 and {arch.kv_heads_of(g) for g in full} == {4}
    assert sum(g.count for g in window) == 39 and {(g.sliding_window, arch.kv_heads_of(g), g.sinks)
                                                   for g in window} == {(129, 8, True)}
    # A token's cache: K 192 wide and V 128, in bf16: 9 full layers x 4 heads x 320 x 2 = 23,040 bytes a token;
    # each window layer at most 129 tokens of 8 x 320 x 2 = 5,120 bytes.
    assert kv_bytes_per_request(arch, ModelDTypes(), 1) == 23_040 + 39 * 5_120
    assert kv_bytes_per_request(arch, ModelDTypes(), 10_000) == 10_000 * 23_040 + 39 * 129 * 5_120
    # The attention of a window layer: q 64 x 192, k 8 x 192, v 8 x 128 from 4,096; o from 64 x 128.
    rows = {r.name: r for r in layer_rows(arch, window[0], Step(1, 1, 1), ModelDTypes())}
    assert rows["qkv_proj"].params == (64 * 192 + 8 * 192 + 8 * 128) * 4_096
    assert rows["o_proj"].params == 4_096 * 64 * 128 and rows["attention"].params == 64


@pytest.mark.crosscheck
def test_mimo_v2_flash_attention_flops_equal_flop_counter():
    # One window layer's attention, transformers' own module against its rows: the projections and the
    # attention's products (QK^T over 192, PV over 128; sinks add no product).
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    from transformers.models.mimo_v2_flash.modeling_mimo_v2_flash import (
        MiMoV2FlashAttention,
        MiMoV2FlashRotaryEmbedding,
    )

    config = {**_published("XiaomiMiMo--MiMo-V2-Flash"), **TINY_TEXT, "head_dim": 24, "v_head_dim": 16,
              "num_hidden_layers": 6, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
              "intermediate_size": 96,
              "sliding_window_size": 64, "quantization_config": None}
    fields = {k: v for k, v in config.items() if k not in ("model_type", "quantization_config", "architectures")}
    built = transformers.MiMoV2FlashConfig(**fields)
    layer = MiMoV2FlashAttention(built, layer_idx=1)  # a window layer
    length = 32
    hidden = torch.randn(1, length, 64)
    positions = MiMoV2FlashRotaryEmbedding(built)(hidden, torch.arange(length)[None], "sliding_attention")
    counted = forward_flop_counts(layer, hidden, position_embeddings=positions, attention_mask=None)
    arch = from_hf_config(config)
    group = next(g for g in arch.groups if g.sliding_window)
    rows = {r.name: r.cost.flops for r in layer_rows(arch, group, Step(1, length, length), ModelDTypes())}
    # FlopCounterMode counts the full square of scores (no causal skipping) in eager attention: 2 x 32 x 32 x
    # heads x (24 + 16).
    eager = 2 * length * length * 4 * (24 + 16)
    assert counted["total"] == rows["qkv_proj"] + rows["o_proj"] + eager


def test_nemotron_nas_blocks_by_hand():
    # Llama-3.3-Nemotron-Super-49B's 80 blocks: 49 attend (8 K/V heads of 64, n_heads_in_group 8), 31 skip
    # attention; MLP widths 2 x ffn_mult x 8,192 / 3 rounded up to 256: 5.25 -> 28,672 (49 layers),
    # 2.625 -> 14,336 (6), 1.3125 -> 7,168 (10), 1.0 -> 5,632 (8), 0.5 -> 2,816 (6), 3.28125 -> 17,920 (1).
    arch = from_hf_config(_published("nvidia--Llama-3_3-Nemotron-Super-49B-v1"))
    assert sum(g.count for g in arch.groups if g.attends) == 49
    assert {arch.kv_heads_of(g) for g in arch.groups if g.attends} == {8}
    attention = 2 * 8_192 * 8_192 + 2 * 8_192 * 1_024 + 8_192  # q, o, k, v and its norm
    widths = 49 * 28_672 + 6 * 14_336 + 10 * 7_168 + 8 * 5_632 + 6 * 2_816 + 17_920
    mlp = 3 * 8_192 * widths + 80 * 8_192  # gate, up, down and the norm before each
    embeddings = 2 * 128_256 * 8_192
    assert model_params(arch).total == 49 * attention + mlp + embeddings + 8_192 == 49_867_145_216
    # Its cache: 49 attending layers x 2 x 8 x 128 x 2 bytes = 200,704 bytes a token.
    assert kv_bytes_per_request(arch, ModelDTypes(), 1) == 200_704


def test_a_list_two_readers_consult_is_refused_once():
    # Nemotron-NAS's block_configs are read for the mixers and for the layer shapes: one refusal, one field.
    from service.core.transformer.architecture import ConfigError

    config = {**_published("nvidia--Llama-3_3-Nemotron-Super-49B-v1"), "block_configs": [{}] * 3}
    with pytest.raises(ConfigError) as refused:
        from_hf_config(config)
    assert refused.value.fields == ["model.block_configs"]


def test_gemma4_global_layers_experts_and_cache_by_hand():
    arch = from_hf_config(_published("google--gemma-4-26B-A4B"))
    [sliding] = [g for g in arch.groups if g.sliding_window]
    [full] = [g for g in arch.groups if not g.sliding_window]
    window = sliding.sliding_window
    # Every sixth layer global: 25 sliding layers (1,024 tokens, 8 K/V heads of 256) and 5 global ones (2 K/V heads
    # of 512, values from the key projection).
    assert (sliding.count, window, arch.kv_heads_of(sliding), arch.head_dim_of(sliding)) == (25, 1024, 8, 256)
    assert (full.count, arch.kv_heads_of(full), arch.head_dim_of(full), full.value_from_key) == (5, 2, 512, True)
    # The cache holds the rotated keys and the normed values of both kinds (the values are not the keys): a token
    # costs 5 x 2 x (512 + 512) x 2 = 20,480 bytes in the global layers and 25 x 8 x (256 + 256) x 2 = 204,800 in
    # the sliding ones, which keep at most 1,024 tokens.
    assert kv_bytes_per_request(arch, ModelDTypes(), 1) == 20_480 + 204_800
    assert kv_bytes_per_request(arch, ModelDTypes(), 10_000) == 10_000 * 20_480 + 1_024 * 204_800
    h = 2816
    rows = {r.name: r for r in layer_rows(arch, full, Step(1, 1, 1), ModelDTypes())}
    assert rows["qkv_proj"].params == (16 * 512 + 2 * 512) * h  # q and k: no v_proj
    assert rows["o_proj"].params == 16 * 512 * h and rows["v_norm"].params == 0
    sliding_rows = {r.name: r for r in layer_rows(arch, sliding, Step(1, 1, 1), ModelDTypes())}
    assert sliding_rows["qkv_proj"].params == (16 * 256 + 2 * 8 * 256) * h
    # The router: 128 x 2,816 scores, a scale over its input (2,816) and one per expert (128); the block's own three
    # norms; the dense MLP (2,112 wide, gated) beside 128 experts of 704; one stored scalar a layer.
    assert rows["router"].params == 128 * h + h + 128
    assert rows["moe_block_norms"].params * rows["moe_block_norms"].count == 3 * h
    assert rows["shared_gate_up_proj"].params == 2 * 2112 * h and rows["shared_down_proj"].params == 2112 * h
    assert rows["experts_gate_up_proj"].params == 128 * 2 * 704 * h and rows["layer_scalar"].params == 1
    # 8 of 128 experts a token: the active count (the card's 3.8B), and the whole decoder with its 0.57B vision tower.
    params = model_params(arch)
    assert round(params.active / 1e9, 2) == 3.82 and round((params.total - params.vision) / 1e9, 2) == 25.23


def test_gemma4_models_it_cannot_count_are_refused():
    config = {**_published("google--gemma-4-26B-A4B")["text_config"], "hidden_size_per_layer_input": 256}
    with pytest.raises(ConfigError, match="hidden_size_per_layer_input"):
        from_hf_config(config)


@pytest.mark.crosscheck
def test_gemma4_global_attention_flops_equal_flop_counter():
    # A global layer's attention, transformers' own module against its rows: q and k from one input (no v_proj),
    # the products over the global head width (QK^T and PV over 32).
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention, Gemma4TextRotaryEmbedding

    config = dict(CASES[-1][3], num_global_key_value_heads=1, attention_k_eq_v=True)
    fields = {k: v for k, v in config.items() if k != "model_type"}
    built = transformers.Gemma4TextConfig(**fields)
    layer = Gemma4TextAttention(built, layer_idx=5)  # the global layer
    length = 16
    hidden = torch.randn(1, length, 64)
    positions = Gemma4TextRotaryEmbedding(built)(hidden, torch.arange(length)[None], "full_attention")
    counted = forward_flop_counts(layer, hidden, position_embeddings=positions, attention_mask=None,
                                  shared_kv_states={})
    arch = from_hf_config(config)
    group = next(g for g in arch.groups if not g.sliding_window)
    rows = {r.name: r.cost.flops for r in layer_rows(arch, group, Step(1, length, length), ModelDTypes())}
    eager = 2 * length * length * 4 * (32 + 32)  # every (query, key) pair: QK^T and PV, 4 heads of 32
    assert counted["total"] == rows["qkv_proj"] + rows["o_proj"] + eager


@pytest.mark.parametrize("name, config", [(case[0], case[3]) for case in CASES if "vision_config" in case[3]]
                         + [("step3p7", {"model_type": "step3p7", "text_config": {
                             **TINY_TEXT, "intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 8,
                             "num_experts_per_tok": 2, "share_expert_dim": 24}, "vision_config": TINY_VISION})])
def test_an_invalid_vision_key_is_refused_by_name(name, config):
    # The reader reads an invalid key as 0: a tower of width 0 was once counted as such, silently.
    broken = {**config, "vision_config": {**config["vision_config"], "hidden_size": -5}}
    with pytest.raises(ConfigError) as refused:
        from_hf_config(broken)
    assert refused.value.fields == ["model.vision_config.hidden_size"]
