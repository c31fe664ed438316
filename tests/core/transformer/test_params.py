"""Parameter counts of the catalog models against the officially stated figures.

Each figure is checked to the precision it is stated in. Meta, Mistral, Google and Microsoft round
(8.03B covers [8.025, 8.035)); Qwen and DeepSeek truncate (Qwen2.5-7B has 7,615,616,512 parameters
and is stated as 7.61B; DeepSeek-V3 activates 37.55B and states 37B), so theirs cover [stated, stated + unit).
Mistral's, Qwen's and DeepSeek's active figures include the input embedding table (Mixtral's 12.9B is 12.75B
without its 0.13B), OpenAI's gpt-oss figures do not (3.6B of 4.2B with it): `active` leaves it out,
`active_with_embedding` keeps it, and each card is checked against the count it uses.
"""

import pytest

from service.core.transformer.families import from_hf_config
from service.core.transformer.params import layer_params, model_params
from service.persistence.catalog import model_catalog

CONFIGS = {entry["id"]: entry["config"] for entry in model_catalog()}

# (model id, which count, stated billions, unit of the last stated digit, "round" or "truncate")
OFFICIAL = [
    ("tinyllama-1.1b-chat", "total", 1.1, 0.1, "round"),
    ("llama-2-7b", "total", 6.74, 0.01, "round"),
    ("llama-3.1-8b", "total", 8.03, 0.01, "round"),
    ("llama-3.1-70b", "total", 70.6, 0.1, "round"),
    ("mistral-7b-v0.1", "total", 7.24, 0.01, "round"),
    ("mixtral-8x7b", "total", 46.7, 0.1, "round"),
    ("mixtral-8x7b", "active_with_embedding", 12.9, 0.1, "round"),
    ("qwen3-8b", "total", 8.19, 0.01, "truncate"),
    ("qwen3-30b-a3b", "total", 30.5, 0.1, "truncate"),
    ("qwen3-30b-a3b", "active_with_embedding", 3.3, 0.1, "truncate"),
    ("qwen2.5-7b-instruct", "total", 7.61, 0.01, "truncate"),
    ("phi-3-mini-4k-instruct", "total", 3.8, 0.1, "round"),
    ("deepseek-v3", "total", 671, 1, "truncate"),
    ("deepseek-v3", "active_with_embedding", 37, 1, "truncate"),
]


def count(model_id: str, which: str) -> int:
    params = model_params(from_hf_config(CONFIGS[model_id]))
    return getattr(params, which)


@pytest.mark.parametrize("model_id, which, stated, unit, rule", OFFICIAL)
def test_parameter_counts_match_official_figures(model_id, which, stated, unit, rule):
    ours = count(model_id, which) / 1e9
    if rule == "round":
        assert abs(ours - stated) <= unit / 2, ours
    else:
        assert stated <= ours < stated + unit, ours


def test_gemma2_9b_is_exact():
    # Gemma 2 paper: 9,241,705,984. Tied embedding 256000*3584 = 917,504,000; per layer q and o
    # 3584*16*256 each, k and v 3584*8*256 each (44,040,192), MLP 3*3584*14336 = 154,140,672,
    # four norms 4*3584; 42 layers; one final norm of 3584.
    assert count("gemma-2-9b", "total") == 9_241_705_984


def test_llama31_8b_by_hand():
    # Embedding and untied head 2*128256*4096 = 1,050,673,152; per layer attention 2*4096*4096 +
    # 2*4096*1024 = 41,943,040, MLP 3*4096*14336 = 176,160,768, norms 2*4096; 32 layers; final norm 4096.
    assert count("llama-3.1-8b", "total") == 1_050_673_152 + 32 * (41_943_040 + 176_160_768 + 8192) + 4096


def test_qwen25_non_embedding_count():
    # Qwen states 6.53B non-embedding parameters for Qwen2.5-7B; q, k and v carry biases (3584 + 2*512).
    arch = from_hf_config(CONFIGS["qwen2.5-7b-instruct"])
    params = model_params(arch)
    assert round((params.total - params.embedding - params.lm_head) / 1e9, 2) == 6.53
    assert arch.qkv_bias and not arch.o_bias


def test_qwen3_has_per_head_qk_norms_and_deepseek_dense_first_layers():
    qwen3 = from_hf_config(CONFIGS["qwen3-8b"])
    assert qwen3.qk_norm
    deepseek = from_hf_config(CONFIGS["deepseek-v3"])
    assert [(g.count, g.moe) for g in deepseek.groups] == [(3, False), (58, True)]
    dense, moe = (layer_params(deepseek, g) for g in deepseek.groups)
    assert moe.total > dense.total  # 256 routed experts plus one shared


def test_gemma2_alternates_sliding_window_and_phi3_windows_every_layer():
    gemma = from_hf_config(CONFIGS["gemma-2-9b"])
    assert {(g.count, g.sliding_window) for g in gemma.groups} == {(21, None), (21, 4096)}
    assert gemma.tied_embeddings and gemma.norms_per_layer == 4
    phi = from_hf_config(CONFIGS["phi-3-mini-4k-instruct"])
    assert [(g.count, g.sliding_window) for g in phi.groups] == [(32, 2047)]


def test_uninterpretable_configs_name_their_fields():
    from service.core.transformer.architecture import ConfigError

    # The keys that size the model have no default (a config without them describes no model in particular); the
    # vocabulary takes LlamaConfig's (32,000), as transformers would.
    with pytest.raises(ConfigError) as error:
        from_hf_config({"model_type": "llama", "hidden_size": 4096})
    assert error.value.fields == ["model.num_hidden_layers", "model.num_attention_heads", "model.intermediate_size"]
    with pytest.raises(ConfigError) as error:
        from_hf_config({"model_type": "bert"})
    assert error.value.fields == ["model.model_type"]
    with pytest.raises(ConfigError) as error:
        from_hf_config({**CONFIGS["llama-3.1-8b"], "hidden_act": "swiglu_custom"})
    assert error.value.fields == ["model.hidden_act"]
    with pytest.raises(ConfigError):
        from_hf_config({**CONFIGS["llama-3.1-8b"], "num_key_value_heads": 7})
