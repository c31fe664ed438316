"""The catalog's checkpoints of 2025-26 against what their publishers' model cards say of their size: total
parameters, and active ones per token as each card counts them (with or without the input embedding)."""

import pytest

from service.core.transformer.families import from_hf_config
from service.core.transformer.params import model_params
from service.persistence.catalog import model_catalog

CONFIGS = {entry["id"]: entry["config"] for entry in model_catalog()}


@pytest.mark.parametrize("model_id, total, active, with_embedding, digits", [
    # NVIDIA's card: 31.6B total, 3.2B active, 3.6B with the embedding (to 0.1B).
    ("nemotron-3-nano-30b-a3b", 31.6, 3.2, 3.6, 1),
    # Moonshot's card: 1T total (1.03T to 0.01T), 32B activated (without the embedding, to 1B).
    ("kimi-k2-instruct", 1030, 32, None, -1),
    # NVIDIA's card for Nemotron-H-56B: 56B (to 1B).
    ("nemotron-h-56b", 56, None, None, 0),
    # Qwen: 80B total; NVIDIA's card for it: 3.9B active with the embedding.
    ("qwen3-next-80b-a3b", 80, None, 3.9, 0),
    # DeepSeek-V3.2: V3's 671B and 37B activated (to 1B), its indexers adding 0.85B.
    ("deepseek-v3.2", 672, 37, None, 0),
])
def test_sizes_match_the_model_cards(model_id, total, active, with_embedding, digits):
    params = model_params(from_hf_config(CONFIGS[model_id]))
    assert round(params.total / 1e9, digits) == total
    if active is not None:
        assert round(params.active / 1e9, max(digits, 0)) == active
    if with_embedding is not None:
        assert round(params.active_with_embedding / 1e9, 1) == with_embedding


def test_nemotron_3_nano_holds_a_fixed_state_beside_six_attention_layers():
    from service.core.transformer.capacity import kv_bytes_per_request, recurrent_state_bytes
    from service.core.transformer.layers import ModelDTypes

    arch = from_hf_config(CONFIGS["nemotron-3-nano-30b-a3b"])
    assert arch.layer_kinds() == "23 x recurrent mixer only, 23 x MLP-only MoE, 6 x attention"
    bf16 = ModelDTypes()
    # 23 Mamba-2 blocks: 64 heads x 128 (N) x 64 (P) x 4 bytes (fp32, as the config says) = 2,097,152, and the last
    # 3 inputs of 64 x 64 + 2 x 8 x 128 = 6,144 channels x 2 bytes = 36,864: 23 x 2,134,016 = 49,082,368.
    assert recurrent_state_bytes(arch, bf16) == 49_082_368
    # 6 attention blocks x 2 x 2 KV heads x 128 x 2 bytes = 6,144 bytes a token.
    assert kv_bytes_per_request(arch, bf16, 1000) == 1000 * 6_144 + 49_082_368
