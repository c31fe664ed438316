"""The generic form layer by layer: a model the readers do not know can say which layers slide, chunk or route."""

import pytest

from schemas.models import GenericArchitecture
from service.core.transformer.architecture import from_generic
from service.core.transformer.capacity import kv_bytes_per_request
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import model_catalog

# gpt-oss-20b in the generic form: 24 layers, 12 sliding over 128 keys and 12 full, all of them MoE.
GPT_OSS_20B = {"format": "generic", "layers": 24, "hidden": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64,
               "vocab": 201088, "experts": 32, "top_k": 4, "expert_intermediate": 2880,
               "layer_types": [{"count": 12, "attention": "sliding", "window": 128, "mlp": "moe"},
                               {"count": 12, "attention": "full", "mlp": "moe"}]}


def generic(spec: dict):
    return from_generic(GenericArchitecture.model_validate(spec).model_dump())


def test_a_generic_gpt_oss_caches_what_its_reader_caches():
    reader = from_hf_config(next(m["config"] for m in model_catalog() if m["id"] == "gpt-oss-20b"))
    described = generic(GPT_OSS_20B)
    # K and V of one 131,072-token request, bf16: 12 full layers x 131,072 tokens + 12 sliding layers x 128 tokens,
    # each 2 x 8 heads x 64 x 2 bytes a token = 2,048 bytes.
    by_hand = (12 * 131072 + 12 * 128) * 2 * 8 * 64 * 2
    dtypes = ModelDTypes()
    assert kv_bytes_per_request(described, dtypes, 131072) == by_hand == kv_bytes_per_request(reader, dtypes, 131072)
    # The old single-kind form could not say it: every layer full, twice the cache at this length (less 1,536 tokens).
    uniform = generic({k: v for k, v in GPT_OSS_20B.items() if k != "layer_types"})
    assert kv_bytes_per_request(uniform, dtypes, 131072) == 24 * 131072 * 2048
    assert kv_bytes_per_request(uniform, dtypes, 131072) / by_hand == pytest.approx(2, rel=0.01)


def test_kinds_described_apart_are_counted_together():
    spec = {**GPT_OSS_20B, "layer_types": [{"count": 1, "attention": "sliding", "window": 128, "mlp": "moe"},
                                           {"count": 1, "attention": "full", "mlp": "moe"}] * 12}
    arch = generic(spec)
    assert sorted((g.count, g.sliding_window or 0) for g in arch.groups) == [(12, 0), (12, 128)]
    # Llama 4's pattern: three chunked RoPE layers to one global NoPE layer, dense and MoE interleaved.
    llama4 = generic({"format": "generic", "layers": 48, "hidden": 5120, "heads": 40, "kv_heads": 8, "head_dim": 128,
                      "vocab": 202048, "intermediate": 16384, "experts": 16, "top_k": 1, "expert_intermediate": 8192,
                      "shared_experts": 1,
                      "layer_types": [{"count": 18, "attention": "chunked", "chunk": 8192, "mlp": "moe"},
                                      {"count": 18, "attention": "chunked", "chunk": 8192, "mlp": "dense"},
                                      {"count": 6, "mlp": "moe", "rope": False},
                                      {"count": 6, "mlp": "dense", "rope": False}]})
    assert sum(g.count for g in llama4.groups) == 48 and {g.chunk for g in llama4.groups} == {8192, None}
    # At 131,072 tokens the 36 chunked layers hold at most 8,192 tokens each: 12 x 131,072 + 36 x 8,192 tokens.
    per_token = 2 * 8 * 128 * 2
    assert kv_bytes_per_request(llama4, ModelDTypes(), 131072) == (12 * 131072 + 36 * 8192) * per_token


@pytest.mark.parametrize("change, message", [
    ({"layer_types": [{"count": 23, "mlp": "moe"}]}, "count 23 layers, not the model's 24"),
    ({"layer_types": [{"count": 24, "attention": "sliding", "mlp": "moe"}]}, "window is given with"),
    ({"layer_types": [{"count": 24, "mlp": "moe"}], "sliding_window": 128}, "sliding_window or layer_types"),
    ({"layer_types": [{"count": 24, "mlp": "dense"}]}, "needs intermediate"),
])
def test_a_layer_description_that_does_not_add_up_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        GenericArchitecture.model_validate({**GPT_OSS_20B, **change})


def test_the_layer_kinds_over_http(client):
    body = {"device_id": "nvidia-h100-sxm", "model": GPT_OSS_20B, "context_len": 131072}
    answer = client.post("/v1/analyze/kv-capacity", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["kv_bytes_per_request"] == (12 * 131072 + 12 * 128) * 2048
    refused = client.post("/v1/analyze/kv-capacity", json={**body, "model": {
        **GPT_OSS_20B, "layer_types": [{"count": 24, "attention": "diagonal", "mlp": "moe"}]}})
    assert refused.status_code == 422
    assert any("layer_types" in f["loc"] for f in refused.json()["fields"])


# Qwen3-Next-80B-A3B in the generic form: 36 Gated DeltaNet layers and 12 full-attention layers, all MoE. The
# generic form has no output gate on attention, no gated shared expert, no q/k norms and no partial RoPE: its
# parameters differ from the reader's by exactly those (12 x 16 x 256 x 2,048 output gate weights, 48 x 2,048
# shared-expert gate weights, 12 x 2 x 256 q/k norm scales).
QWEN3_NEXT = {"format": "generic", "layers": 48, "hidden": 2048, "heads": 16, "kv_heads": 2, "head_dim": 256,
              "vocab": 151936, "intermediate": 5120, "experts": 512, "top_k": 10, "expert_intermediate": 512,
              "shared_experts": 1,
              "recurrent": {"rule": "gated_delta", "heads": 32, "key_heads": 16, "key_dim": 128, "value_dim": 128},
              "layer_types": [{"count": 36, "attention": "recurrent", "mlp": "moe"},
                              {"count": 12, "attention": "full", "mlp": "moe"}]}


def test_a_generic_qwen3_next_holds_what_its_reader_holds():
    from service.core.transformer.params import model_params

    reader = from_hf_config(next(m["config"] for m in model_catalog() if m["id"] == "qwen3-next-80b-a3b"))
    described = generic(QWEN3_NEXT)
    dtypes = ModelDTypes()
    # 12 attention layers x 2 x 2 x 256 x 2 bytes = 24,576 a token; 36 x (32 x 128 x 128 x 2 + 8,192 x 3 x 2)
    # = 39,518,208 bytes of state.
    assert kv_bytes_per_request(described, dtypes, 65536) == 65536 * 24_576 + 39_518_208
    assert kv_bytes_per_request(reader, dtypes, 65536) == kv_bytes_per_request(described, dtypes, 65536)
    assert model_params(reader).total - model_params(described).total == 12 * 16 * 256 * 2048 + 48 * 2048 + 12 * 2 * 256


def test_a_generic_mamba2_hybrid_with_mlp_only_blocks():
    # Nemotron-H-style blocks: 2 Mamba-2 blocks, 1 attention block, 3 MLP blocks; each block one norm.
    arch = generic({"format": "generic", "layers": 6, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16,
                    "vocab": 100, "intermediate": 96, "gated_mlp": False,
                    "recurrent": {"rule": "ssd", "heads": 8, "key_heads": 2, "key_dim": 16, "value_dim": 16,
                                  "conv_bias": True, "state_dtype": "fp32"},
                    "layer_types": [{"count": 2, "attention": "recurrent", "mlp": "none"},
                                    {"count": 1, "attention": "full", "mlp": "none", "rope": False},
                                    {"count": 3, "attention": "none", "mlp": "dense"}]})
    # State: 2 blocks x (8 x 16 x 16 x 4 bytes + (2 x 2 x 16 + 8 x 16 = 192 channels) x 3 x 2 bytes) = 18,688.
    # K and V: 1 block x 2 x 2 x 16 x 2 bytes = 128 a token.
    assert kv_bytes_per_request(arch, ModelDTypes(), 100) == 100 * 128 + 18_688


@pytest.mark.parametrize("change, message", [
    ({"recurrent": None}, "recurrent is given with, and only with"),
    ({"layer_types": [{"count": 48, "attention": "none", "mlp": "none"}]}, "cannot both be 'none'"),
    ({"recurrent": {**QWEN3_NEXT["recurrent"], "key_heads": 12}}, "key_heads must divide"),
    ({"latent": {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}},
     "latent is given with, and only with"),
])
def test_a_recurrent_description_that_does_not_add_up_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        GenericArchitecture.model_validate({**QWEN3_NEXT, **change})


def test_latent_attention_in_the_generic_form_caches_the_latent():
    arch = generic({"format": "generic", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 1000, "intermediate": 2048,
                    "latent": {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                               "v_head_dim": 128},
                    "layer_types": [{"count": 4, "attention": "latent"}]})
    # 4 layers x (512 + 64) x 2 bytes = 4,608 bytes a token.
    assert kv_bytes_per_request(arch, ModelDTypes(), 10) == 10 * 4_608
