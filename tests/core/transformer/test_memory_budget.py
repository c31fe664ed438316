"""A MemoryBudget places thousands of steps (a sweep, a batch, a plan's concurrencies): it works out each attention
group's cache per token once, and must give exactly what the module's kv_bytes_per_request and activation_bytes give,
over every kind of cache the service models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.core.transformer.capacity import activation_bytes, kv_bytes_per_request, memory_budget
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import MODEL_CATALOG_DIR

PUBLISHED = Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
MODELS = {
    "dense (Llama 3.1 8B)": MODEL_CATALOG_DIR / "meta-llama__Llama-3.1-8B.json",
    "sliding windows (Gemma 2 9B)": MODEL_CATALOG_DIR / "google__gemma-2-9b.json",
    "latent attention and an indexer (DeepSeek-V3.2)": MODEL_CATALOG_DIR / "deepseek-ai__DeepSeek-V3.2.json",
    "recurrent layers (Qwen3-Next)": MODEL_CATALOG_DIR / "Qwen__Qwen3-Next-80B-A3B-Instruct.json",
    "compressed entries (DeepSeek-V4 Flash)": PUBLISHED / "deepseek-ai--DeepSeek-V4-Flash.json",
}
DTYPES = [ModelDTypes("bf16", "bf16", "bf16"), ModelDTypes("fp8", "fp8", "fp8", 128 * 128, 4.0)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dtypes", DTYPES, ids=["bf16", "fp8"])
@pytest.mark.parametrize(("tensor_parallel", "block_size"), [(1, 1), (4, 16), (8, 64)])
def test_a_budget_places_a_step_as_the_formulas_do(model, dtypes, tensor_parallel, block_size):
    arch = from_hf_config(json.loads(MODELS[model].read_text()))
    budget = memory_budget(arch, dtypes, capacity_bytes=80e9, usable_bytes=72e9, tensor_parallel=tensor_parallel,
                           block_size=block_size)
    for batch, context, tokens in [(1, 1, 1), (7, 1000, 7), (32, 4096, 32), (1, 8191, 8191), (3, 131_072, 3)]:
        memory = budget.at(batch=batch, context=context, step_tokens=tokens)
        assert memory.kv_cache_bytes == batch * kv_bytes_per_request(arch, dtypes, context, tensor_parallel,
                                                                     block_size)
        assert memory.activation_bytes == activation_bytes(arch, dtypes, tokens=tokens, batch=batch,
                                                           tensor_parallel=tensor_parallel)
