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
        **GPT_OSS_20B, "layer_types": [{"count": 24, "attention": "recurrent", "mlp": "moe"}]}})
    assert refused.status_code == 422
    assert any("layer_types" in f["loc"] for f in refused.json()["fields"])
