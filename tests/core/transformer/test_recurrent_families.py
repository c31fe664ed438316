"""The hybrid families with recurrent layers: Qwen3-Next (Gated DeltaNet beside gated attention), Nemotron-H
(Mamba-2 beside attention, MLP and MoE blocks) and Falcon-H1 (attention and Mamba-2 side by side in every layer).
Parameters against transformers' build of the same config, the recurrent layers' FLOPs against FlopCounterMode on
transformers' own layer (its PyTorch fallback), and the cache and state per request by hand."""

import pytest

from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.capacity import kv_bytes_per_request, kv_capacity, recurrent_state_bytes
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, Step, mlp_rows, recurrent_rows
from service.core.transformer.params import model_params
from service.persistence.catalog import nominal_device
from tests.conftest import forward_flop_counts, import_crosscheck
from tests.core.transformer.test_families import transformers_count

# Qwen3-Next-80B-A3B's dimensions, as transformers' Qwen3NextConfig documents them for that checkpoint.
QWEN3_NEXT_80B = {
    "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "vocab_size": 151936,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "full_attention_interval": 4, "partial_rotary_factor": 0.25,
    "hidden_act": "silu", "tie_word_embeddings": False, "max_position_embeddings": 262144,
}
TINY_QWEN3_NEXT = {
    **QWEN3_NEXT_80B, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "intermediate_size": 96, "vocab_size": 100, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "num_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "mlp_only_layers": [1],
}
TINY_NEMOTRON_H = {
    "model_type": "nemotron_h", "hidden_size": 64, "hybrid_override_pattern": "M-M*EM", "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": 100,
    "mlp_hidden_act": "relu2", "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
    "conv_kernel": 4, "chunk_size": 16, "use_conv_bias": True, "use_bias": False, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48,
    "tie_word_embeddings": False,
}

TINY_FALCON_H1 = {
    "model_type": "falcon_h1", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": 100, "hidden_act": "silu",
    "mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_head": 8, "mamba_n_groups": 2, "mamba_d_state": 16,
    "mamba_d_conv": 4, "mamba_chunk_size": 16, "mamba_rms_norm": True, "mamba_proj_bias": True,
    "projectors_bias": True, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False,
}


@pytest.mark.crosscheck
@pytest.mark.parametrize("model_class, config_class, config", [
    ("Qwen3NextForCausalLM", "Qwen3NextConfig", TINY_QWEN3_NEXT),
    ("Qwen3NextForCausalLM", "Qwen3NextConfig", QWEN3_NEXT_80B),
    ("NemotronHForCausalLM", "NemotronHConfig", TINY_NEMOTRON_H),
    ("FalconH1ForCausalLM", "FalconH1Config", TINY_FALCON_H1),
], ids=["qwen3_next tiny", "qwen3_next 80B", "nemotron_h tiny", "falcon_h1 tiny"])
def test_parameters_equal_transformers_build(model_class, config_class, config):
    assert model_params(from_hf_config(config)).total == transformers_count(model_class, config_class, config)


def test_qwen3_next_layers_and_counts():
    arch = from_hf_config(QWEN3_NEXT_80B)
    # Every fourth layer attends: 36 Gated DeltaNet layers and 12 gated full-attention layers, all MoE.
    assert arch.layer_kinds() == "36 x recurrent MoE, 12 x MoE"
    params = model_params(arch)
    # Qwen's card: 80B total, 3B activated; NVIDIA's card for the same checkpoint: 80B total, 3.9B active, which
    # counts the input embedding (151,936 x 2,048 = 0.31e9) beside the LM head.
    assert params.total == 79_674_391_296
    assert round(params.active_with_embedding / 1e8) == 39
    assert params.active == 3_563_764_480


def test_qwen3_next_cache_and_state_per_request_by_hand():
    arch = from_hf_config(QWEN3_NEXT_80B)
    bf16 = ModelDTypes()
    # 12 full-attention layers x 2 (K and V) x 2 KV heads x 256 x 2 bytes = 24,576 bytes a token.
    # 36 Gated DeltaNet layers, each: 32 heads x 128 x 128 x 2 bytes = 1,048,576 of state, and the convolution's
    # last 3 inputs of 2 x 16 x 128 + 32 x 128 = 8,192 channels x 2 bytes = 49,152: 36 x 1,097,728 = 39,518,208.
    assert recurrent_state_bytes(arch, bf16) == 39_518_208
    assert kv_bytes_per_request(arch, bf16, 32768) == 32768 * 24_576 + 39_518_208
    capacity = kv_capacity(arch, bf16, context_len=32768, capacity_bytes=141e9, tensor_parallel=2)
    assert capacity.kv_bytes_per_token == 24_576 / 2
    assert capacity.state_bytes_per_request == 39_518_208 / 2
    # Against a model that attended on every layer (48 x 4,096 bytes a token = 196,608): 4x less per token.
    assert 48 * 2 * 2 * 256 * 2 / 24_576 == 4


def test_nemotron_h_blocks_and_state_by_hand():
    arch = from_hf_config(TINY_NEMOTRON_H)
    assert arch.layer_kinds() == "3 x recurrent mixer only, 1 x MLP-only dense, 1 x attention, 1 x MLP-only MoE"
    # 3 Mamba-2 blocks, each: 8 heads x 16 (N) x 16 (P) x 4 bytes (its fp32 state, the config class default)
    # = 8,192, and the last 3 inputs of 8 x 16 + 2 x 2 x 16 = 192 channels x 2 bytes = 1,152: 3 x 9,344 = 28,032.
    assert recurrent_state_bytes(arch, ModelDTypes()) == 28_032
    # One attention block: 2 x 2 x 16 x 2 = 128 bytes a token.
    assert kv_bytes_per_request(arch, ModelDTypes(), 10) == 10 * 128 + 28_032


def test_falcon_h1_layers_attend_and_recur_side_by_side():
    arch = from_hf_config(TINY_FALCON_H1)
    assert arch.layer_kinds() == "3 x attention + recurrent dense"
    # Every layer keeps K and V (2 x 2 x 16 x 2 = 128 bytes a token) and a Mamba-2 state: 8 heads x 16 (N) x 8 (P)
    # x 2 bytes = 2,048, and the last 3 inputs of 64 + 2 x 2 x 16 = 128 channels x 2 bytes = 768: 3 x 2,816 = 8,448.
    assert kv_bytes_per_request(arch, ModelDTypes(), 10) == 3 * 10 * 128 + 8_448
    rows = [r.name for r in analyze_model(arch, Evaluator(nominal_device("nvidia-h100-sxm")), phase="prefill", batch=1,
                                          seq_len=32, dtypes=ModelDTypes()).rows]
    assert {"attention", "scan", "mixer_sum", "gated_norm"} <= set(rows)


def test_decode_reads_the_state_and_prefill_writes_it():
    arch = from_hf_config(QWEN3_NEXT_80B)
    bf16 = ModelDTypes()
    assert arch.recurrent is not None
    state = 32 * 128 * 128 * 2
    prefill = {r.name: r for r in recurrent_rows(arch, arch.recurrent, Step(1, 100, 100), bf16)}
    decode = {r.name: r for r in recurrent_rows(arch, arch.recurrent, Step(1, 1, 101), bf16)}
    assert prefill["scan"].cost.kv_bytes_read == 0 and prefill["scan"].cost.kv_bytes_written == state
    assert decode["scan"].cost.kv_bytes_read == state == decode["scan"].cost.kv_bytes_written
    # A decode step is the same whatever the context: the state does not grow.
    later = {r.name: r for r in recurrent_rows(arch, arch.recurrent, Step(1, 1, 100_001), bf16)}
    assert later["scan"].cost == decode["scan"].cost


def _counted_and_ours(module_name: str, class_name: str, config_class: str, config: dict, batch: int,
                      length: int) -> tuple[dict, dict]:
    """FlopCounterMode's counts, by operator, of transformers' own recurrent mixer on a [batch, length] prompt (its
    PyTorch fallback on the CPU), and the service's rows of the same mixer."""
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    import importlib

    fields = {k: v for k, v in config.items() if k != "model_type"}
    module = getattr(importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}"), class_name)
    mixer = module(getattr(transformers, config_class)(**fields), layer_idx=0)
    counted = forward_flop_counts(mixer, torch.randn(batch, length, config["hidden_size"]))
    del counted["total"]
    arch = from_hf_config(config)
    rows = {r.name: r.cost for r in recurrent_rows(arch, arch.recurrent, Step(batch, length, length), ModelDTypes())}
    return counted, rows


@pytest.mark.crosscheck
def test_gated_deltanet_layer_flops_equal_flop_counter():
    batch, length = 2, 100
    counted, rows = _counted_and_ours("qwen3_next", "Qwen3NextGatedDeltaNet", "Qwen3NextConfig", TINY_QWEN3_NEXT,
                                      batch, length)
    # The projections: in_proj (q, k, v, z and the gates, in two linears there) and out_proj.
    projections = rows["in_proj"].flops + rows["out_proj"].flops
    # The chunked scan in chunks of 64 (100 tokens: 2 chunks, padded). FlopCounterMode counts its matrix products
    # (4 c^2 dk + 2 c^2 dv + 6 c dk dv a chunk and head) but not the two triangular solves (c^2 (dk + dv)).
    c, dk, dv, heads, chunks = 64, 16, 8, 4, 2
    solves = batch * heads * chunks * c * c * (dk + dv)
    # The depthwise convolution: 2 x kernel FLOPs an output; torch pads it and convolves length + kernel - 1
    # positions before cutting the extra ones off.
    channels, kernel = 2 * 2 * 16 + 4 * 8, 4
    conv_padding = batch * channels * (kernel - 1) * 2 * kernel
    assert counted["mm"] + counted["bmm"] == projections + rows["scan"].flops - solves
    assert counted["convolution"] == rows["conv1d"].flops + conv_padding


@pytest.mark.crosscheck
def test_mamba2_mixer_flops_equal_flop_counter():
    batch, length = 2, 64  # 4 chunks of 16
    counted, rows = _counted_and_ours("nemotron_h", "NemotronHMamba2Mixer", "NemotronHConfig", TINY_NEMOTRON_H,
                                      batch, length)
    projections = rows["in_proj"].flops + rows["out_proj"].flops
    # Mamba-2's chunked scan a head: per chunk 2 Q^2 (N + P) + 4 Q N P, and 2 N P to pass the state on, which
    # transformers' reference computes as one product over every pair of chunks (2 (c + 1)^2 N P a head).
    q, n, p, heads, chunks = 16, 16, 16, 8, 4
    passed_on = batch * heads * chunks * 2 * n * p
    pairwise = batch * heads * 2 * (chunks + 1) ** 2 * n * p
    channels, kernel = 8 * 16 + 2 * 2 * 16, 4
    assert rows["scan"].flops == batch * heads * chunks * (2 * q * q * (n + p) + 4 * q * n * p) + passed_on
    matmuls = sum(flops for op, flops in counted.items() if op != "convolution")
    assert matmuls == projections + rows["scan"].flops - passed_on + pairwise
    assert counted["convolution"] == rows["conv1d"].flops - batch * length * channels + batch * channels * (kernel - 1) * 2 * kernel


def test_a_hybrid_model_analyses_in_both_phases():
    arch = from_hf_config(QWEN3_NEXT_80B)
    evaluator = Evaluator(nominal_device("nvidia-h100-sxm"))
    for phase in ("prefill", "decode"):
        result = analyze_model(arch, evaluator, phase=phase, batch=4, seq_len=4096, dtypes=ModelDTypes(),
                               tensor_parallel=2)
        scans = [r for r in result.rows if r.kind == "recurrent_scan"]
        assert scans and all(r.layers == 36 for r in scans)
        assert result.totals.time_s > 0


def test_the_catalog_entry_reads_as_the_checkpoint():
    from service.persistence.catalog import model_catalog

    config = next(entry["config"] for entry in model_catalog() if entry["id"] == "qwen3-next-80b-a3b")
    arch = from_hf_config(config)
    assert model_params(arch).total == model_params(from_hf_config(QWEN3_NEXT_80B)).total == 79_674_391_296
    assert arch.rotary_fraction == 0.25 and arch.attention_output_gate


@pytest.mark.crosscheck
def test_gated_attention_layer_flops_equal_flop_counter():
    # Qwen3-Next's full-attention layer: q_proj yields the query and its gate, k and v, o_proj; FlopCounterMode counts
    # those and the whole (masked) score matrix (QK^T and PV); the service's matmul rows and the attention's unmasked
    # products, softmax aside, must be the same number.
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    from transformers.models.qwen3_next import modeling_qwen3_next

    from service.core.operators import attention_cost
    from service.core.transformer.layers import attention_rows

    fields = {k: v for k, v in TINY_QWEN3_NEXT.items() if k != "model_type"}
    config = transformers.Qwen3NextConfig(**fields, _attn_implementation="eager")
    layer = modeling_qwen3_next.Qwen3NextAttention(config, layer_idx=3)
    batch, length, rotated = 2, 24, 4  # partial_rotary_factor 0.25 of head_dim 16
    positions = (torch.randn(1, length, rotated), torch.randn(1, length, rotated))
    counted = forward_flop_counts(layer, torch.randn(batch, length, 64), position_embeddings=positions,
                                  attention_mask=None)
    arch = from_hf_config(TINY_QWEN3_NEXT)
    group = next(g for g in arch.groups if g.mixer == "attention")
    rows = attention_rows(arch, group, Step(batch, length, length), ModelDTypes())
    matmuls = sum(r.cost.flops for r in rows if r.kind == "matmul")
    # qkv_proj holds q_proj's gate half too (2 x tokens x hidden x heads x head_dim more FLOPs than a plain one).
    assert [r.name for r in rows if r.kind == "matmul"] == ["qkv_proj", "o_proj"]
    scores = attention_cost(batch=batch, heads=4, kv_heads=2, head_dim=16, q_len=length, kv_len=length)
    assert matmuls + scores.flops - batch * 4 * length * length * 5 == counted["total"]


TINY_NEMOTRON_LATENT = {**TINY_NEMOTRON_H, "moe_latent_size": 24}


@pytest.mark.crosscheck
def test_latent_experts_parameters_equal_transformers_build():
    # Nemotron-3 Super's latent MoE: the routed experts read and write 24 wide, not 64, between a 64 -> 24 and a
    # 24 -> 64 projection: each of the 4 experts holds 32 x 24 + 24 x 32 = 1,536 instead of 4,096, and the block
    # gains 2 x 64 x 24 = 3,072 (one MoE block, the E of M-M*EM).
    latent = model_params(from_hf_config(TINY_NEMOTRON_LATENT)).total
    assert latent == transformers_count("NemotronHForCausalLM", "NemotronHConfig", TINY_NEMOTRON_LATENT)
    assert model_params(from_hf_config(TINY_NEMOTRON_H)).total - latent == 4 * (4_096 - 1_536) - 3_072


@pytest.mark.crosscheck
def test_latent_experts_flops_equal_flop_counter():
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMoE

    fields = {k: v for k, v in TINY_NEMOTRON_LATENT.items() if k != "model_type"}
    block = NemotronHMoE(transformers.NemotronHConfig(**fields))
    tokens = 40
    counted = forward_flop_counts(block, torch.randn(1, tokens, 64))
    arch = from_hf_config(TINY_NEMOTRON_LATENT)
    group = next(g for g in arch.groups if g.moe)
    rows = {r.name: r.cost.flops for r in mlp_rows(arch, group, Step(1, tokens, tokens), ModelDTypes())}
    # Every matrix product: the router 2 x 40 x 4 x 64, the latent projections 2 x 40 x 24 x 64 each, the experts
    # 2 x 80 routed rows x (32 x 24 + 24 x 32), the shared MLP 2 x 40 x (48 x 64 + 64 x 48).
    by_hand = 2 * 40 * 4 * 64 + 2 * (2 * 40 * 24 * 64) + 2 * 80 * 2 * 32 * 24 + 2 * 40 * 2 * 48 * 64
    matmuls = sum(flops for name, flops in rows.items() if "proj" in name or name == "router")
    assert counted["total"] == matmuls == by_hand
