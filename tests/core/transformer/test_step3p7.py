"""StepFun's Step-3.7 (model_type step3p7; its decoder's config class says step3p5): sliding and full layers with
q/k norms and a sigmoid gate a head from a projection of its own, routed experts beside a shared one after dense
layers, a vision tower with two downsampling convolutions. Counted against transformers 5.25.0's own build, its
attention's FLOPs against FlopCounterMode, its cache and rows by hand."""

import json
from pathlib import Path

import pytest

from service.core.transformer.architecture import ConfigError
from service.core.transformer.capacity import kv_bytes_per_request
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, Step, layer_rows
from service.core.transformer.params import model_params
from tests.conftest import forward_flop_counts, import_crosscheck, transformers_parameters

PUBLISHED = Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
TINY_TEXT = dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 vocab_size=100, intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8,
                 num_experts_per_tok=2, share_expert_dim=24, sliding_window=8, max_position_embeddings=4096,
                 layer_types=["full_attention", "sliding_attention", "sliding_attention"] * 2,
                 moe_layers_enum="2,3,4,5")
TINY_VISION = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, image_size=56, patch_size=14,
                   mlp_ratio=2.0)


def _published(name: str) -> dict:
    return json.loads((PUBLISHED / f"{name}.json").read_text())


def _text_model_count(fields: dict) -> int:
    """transformers' decoder (Step3p7TextModel) and the untied LM head Step3p7ForConditionalGeneration adds."""
    torch = import_crosscheck("torch")
    import_crosscheck("transformers")
    from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig
    from transformers.models.step3p7.modeling_step3p7 import Step3p7TextModel

    built = Step3p7TextConfig(**fields)
    with torch.device("meta"):
        decoder = Step3p7TextModel(built)
    return transformers_parameters(decoder) + built.vocab_size * built.hidden_size


@pytest.mark.crosscheck
def test_the_multimodal_model_equals_transformers_build():
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    config = {"model_type": "step3p7", "text_config": dict(TINY_TEXT), "vision_config": dict(TINY_VISION)}
    with torch.device("meta"):
        model = transformers.Step3p7ForConditionalGeneration(transformers.Step3p7Config(
            text_config=dict(TINY_TEXT), vision_config=dict(TINY_VISION)))
    assert model_params(from_hf_config(config)).total == transformers_parameters(model)


@pytest.mark.crosscheck
def test_the_decoder_alone_equals_transformers_build():
    # The text config posted as itself, and the same keys flattened into a step3p7 config (AIConfigurator's copies).
    expected = _text_model_count(dict(TINY_TEXT))
    assert model_params(from_hf_config({**TINY_TEXT, "model_type": "step3p5"})).total == expected
    assert model_params(from_hf_config({**TINY_TEXT, "model_type": "step3p7"})).total == expected


def test_the_vision_tower_by_hand():
    # Width 48, MLP int(48 x 2.0) = 96, (56 / 14)^2 = 16 positions: the patch convolution 3 x 14 x 14 x 48 = 28,224
    # (unbiased), positions 16 x 48 = 768, the pre-norm 96; a layer: two layer norms (192), two layer scales (96),
    # q, k, v, out 4 x (48 x 48 + 48) = 9,408, fc1 48 x 96 + 96 = 4,704, fc2 96 x 48 + 48 = 4,656: 19,056, two of
    # them 38,112; the downsamplers 48 -> 96 -> 192 over 3 x 3: 96 x 48 x 9 + 96 = 41,568 and 192 x 96 x 9 + 192 =
    # 166,080; the projector 192 x 64 = 12,288 (unbiased).
    config = {"model_type": "step3p7", "text_config": dict(TINY_TEXT), "vision_config": dict(TINY_VISION)}
    assert from_hf_config(config).vision_params == 28_224 + 768 + 96 + 38_112 + 41_568 + 166_080 + 12_288


def test_the_published_flash_config_by_hand():
    arch = from_hf_config(_published("stepfun-ai--Step-3.7-Flash"))
    params = model_params(arch)
    # transformers 5.25.0's Step3p7TextModel of the same keys: 195,316,538,624 parameters and 42 x 288 stored router
    # biases, beside the LM head 128,896 x 4,096 = 527,958,016.
    assert params.total == 195_316_538_624 + 42 * 288 + 527_958_016
    # Per layer a token uses: q, k, v, o 4,096 x (64 + 8 + 8 + 64) x 128 = 75,497,472, its gates 4,096 x 64 = 262,144,
    # q/k norms 2 x 128, two norms 8,192: 75,768,064 x 45; three dense MLPs 3 x 4,096 x 11,264 x 3; 42 MoE layers of
    # 8 experts and the shared one (9 x 3 x 4,096 x 1,280) with the router 288 x 4,096 and its 288 biases; the final
    # norm and the LM head.
    attention = 45 * (4_096 * 144 * 128 + 4_096 * 64 + 2 * 128 + 2 * 4_096)
    dense = 3 * 3 * 4_096 * 11_264
    moe = 42 * (9 * 3 * 4_096 * 1_280 + 288 * 4_096 + 288)
    assert params.active == attention + dense + moe + 4_096 + 527_958_016
    # Full attention on every fourth layer from the first (12), a 512-token window on the other 33; 8 K/V heads of
    # 128 in bf16: 4,096 bytes a token a layer.
    assert [(g.count, g.sliding_window, g.moe) for g in arch.groups] == [
        (1, None, False), (2, 512, False), (31, 512, True), (11, None, True)]
    assert kv_bytes_per_request(arch, ModelDTypes(), 10_000) == 12 * 4_096 * 10_000 + 33 * 4_096 * 512


def test_a_layers_gate_rows_by_hand():
    arch = from_hf_config(_published("stepfun-ai--Step-3.7-Flash"))
    rows = {r.name: r for r in layer_rows(arch, arch.groups[0], Step(2, 10, 10), ModelDTypes())}
    tokens = 20
    assert rows["g_proj"].params == 4_096 * 64 and rows["g_proj"].cost.flops == 2 * tokens * 4_096 * 64
    assert rows["head_gate_sigmoid"].cost.flops == 4 * tokens * 64
    assert rows["head_gate_mul"].cost.flops == tokens * 64 * 128
    assert rows["head_gate_mul"].cost.bytes_read == rows["head_gate_mul"].cost.bytes_written == tokens * 64 * 128 * 2


def test_what_it_cannot_count_is_refused():
    for extra, field in (({"num_sliding_attention_heads": 2}, "num_sliding_attention_heads"),
                         ({"attention_other_setting": {"num_attention_heads": 2}}, "num_sliding_attention_heads"),
                         ({"gating": False}, "gating")):
        with pytest.raises(ConfigError, match=field):
            from_hf_config({**TINY_TEXT, "model_type": "step3p5", **extra})
    # An expert's width is a size: never a class default (Step3p7TextConfig's 1,280 would answer for a model not asked).
    with pytest.raises(ConfigError, match="share_expert_dim"):
        from_hf_config({k: v for k, v in TINY_TEXT.items() if k != "share_expert_dim"} | {"model_type": "step3p5"})
    with pytest.raises(ConfigError, match="mlp_ratio"):
        from_hf_config({"model_type": "step3p7", "text_config": dict(TINY_TEXT),
                        "vision_config": {**TINY_VISION, "mlp_ratio": -1}})


def test_the_moe_layers_follow_the_config():
    # moe_layers_enum, else mlp_layer_types, else first_k_dense_replace, else from the fourth layer on. Layers 0 and 3
    # attend fully, the others over the window; the answer is how many layers of each (window, routed) kind.
    def kinds(extra: dict) -> dict[tuple[bool, bool], int]:
        config = {k: v for k, v in TINY_TEXT.items() if k != "moe_layers_enum"} | extra
        arch = from_hf_config({**config, "model_type": "step3p5"})
        return {(g.sliding_window is not None, g.moe): g.count for g in arch.groups}

    assert kinds({"moe_layers_enum": "1,5"}) == {(False, False): 2, (True, True): 2, (True, False): 2}
    assert kinds({"mlp_layer_types": ["dense", "sparse"] * 3}) == {
        (False, False): 1, (True, True): 2, (True, False): 2, (False, True): 1}
    assert kinds({"first_k_dense_replace": 1}) == {(False, False): 1, (True, True): 4, (False, True): 1}
    assert kinds({}) == {(False, False): 1, (True, False): 2, (False, True): 1, (True, True): 2}


@pytest.mark.crosscheck
def test_sliding_layer_attention_flops_equal_flop_counter():
    # transformers' Step3p7Attention against the rows: q, k, v, the gate projection and o as products; eager
    # attention forms every (query, key) pair, masked or not: QK^T and PV over 4 heads of 16.
    torch = import_crosscheck("torch")
    import_crosscheck("transformers")
    from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig
    from transformers.models.step3p7.modeling_step3p7 import Step3p7Attention, Step3p7RotaryEmbedding

    built = Step3p7TextConfig(**TINY_TEXT)
    layer = Step3p7Attention(built, layer_idx=1)
    length = 16
    hidden = torch.randn(1, length, 64)
    positions = Step3p7RotaryEmbedding(built)(hidden, torch.arange(length)[None], "sliding_attention")
    counted = forward_flop_counts(layer, hidden, position_embeddings=positions, attention_mask=None)
    arch = from_hf_config({**TINY_TEXT, "model_type": "step3p5"})
    group = next(g for g in arch.groups if g.sliding_window)
    rows = {r.name: r.cost.flops for r in layer_rows(arch, group, Step(1, length, length), ModelDTypes())}
    eager = 2 * length * length * 4 * (16 + 16)
    assert counted["total"] == rows["qkv_proj"] + rows["g_proj"] + rows["o_proj"] + eager
