"""Every config.json NVIDIA's AIConfigurator plans for (tests/data/aiconfigurator_model_configs), read as a client
posting it inline would: each either answered, its parameters those of transformers' own build of the same config
on the meta device (vision towers included), or refused with the field that stops it named."""

import json
from pathlib import Path

import pytest

from service.core.transformer.architecture import ConfigError
from service.core.transformer.families import SUPPORTED_FAMILIES, from_hf_config
from service.core.transformer.params import model_params
from tests.conftest import import_crosscheck, transformers_parameters

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs").glob("*.json"))
assert CONFIGS
# Read today; a family that lands raises it. Of the 88 shipped configs.
ANSWERED_AT_LEAST = 87


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def transformers_build(config: dict) -> int | None:
    """Parameters of transformers' build of the config by its auto classes (a multimodal checkpoint's whole model
    first), or None where transformers has no class for its model_type."""
    torch = import_crosscheck("torch")
    transformers = import_crosscheck("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    fields = {k: v for k, v in config.items() if k != "quantization_config"}
    if config.get("model_type") == "minimax_m3":  # the hub's text config: transformers reads it as MiniMax-M3-VL's text
        from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig
        from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM

        text = MiniMaxM3VLTextConfig(**{k: v for k, v in fields.items() if k not in ("model_type", "architectures")})
        with torch.device("meta"):
            return transformers_parameters(MiniMaxM3VLForCausalLM(text))
    if config.get("model_type") not in CONFIG_MAPPING_NAMES:
        return None
    if config["model_type"] == "step3p7" and "text_config" not in config:
        # AIConfigurator's Step-3.7 copies are the decoder's keys, flattened: Step3p7Config would ignore them all and
        # build its default model. Their own class reads them: Step3p7TextConfig's decoder, and the untied LM head.
        from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig
        from transformers.models.step3p7.modeling_step3p7 import Step3p7TextModel

        text = Step3p7TextConfig(**{k: v for k, v in fields.items() if k not in ("model_type", "architectures")})
        with torch.device("meta"):
            return transformers_parameters(Step3p7TextModel(text)) + text.vocab_size * text.hidden_size
    built = transformers.AutoConfig.for_model(**fields)
    with torch.device("meta"):
        for auto in (transformers.AutoModelForImageTextToText, transformers.AutoModelForCausalLM):
            try:
                return transformers_parameters(auto.from_config(built))
            except ValueError:  # not a model of that kind
                continue
    return None


def test_the_published_configs_are_shipped():
    assert len(CONFIGS) == 88


def test_most_published_configs_are_answered():
    answered = []
    for path in CONFIGS:
        try:
            from_hf_config(_read(path))
            answered.append(path.stem)
        except ConfigError:
            pass
    assert len(answered) >= ANSWERED_AT_LEAST, f"{len(answered)} answered"


@pytest.mark.parametrize("path", CONFIGS, ids=[path.stem for path in CONFIGS])
def test_a_refusal_names_what_stops_it(path):
    config = _read(path)
    try:
        from_hf_config(config)
    except ConfigError as error:
        assert error.fields and all(field.startswith("model") for field in error.fields)
        if config.get("model_type") not in SUPPORTED_FAMILIES:
            assert error.fields == ["model.model_type"] and repr(config["model_type"]) in str(error)


@pytest.mark.crosscheck
@pytest.mark.parametrize("path", CONFIGS, ids=[path.stem for path in CONFIGS])
def test_parameters_equal_transformers_build(path):
    config = _read(path)
    try:
        ours = model_params(from_hf_config(config)).total
    except ConfigError:
        pytest.skip(f"{config.get('model_type')} is not read yet")
    theirs = transformers_build(config)
    if theirs is None:
        pytest.skip(f"transformers has no class for {config.get('model_type')}")
    assert ours == theirs


# (config, total and active parameters in billions as the model's card or name states them): cards write whole
# billions (Kimi K2.5 "1T"), some counting the input embedding among the active parameters and some not.
CARDS = [
    ("zai-org--GLM-5", 744, 40), ("Qwen--Qwen3.5-397B-A17B", 397, 17), ("Qwen--Qwen3.5-35B-A3B", 35, 3),
    ("MiniMaxAI--MiniMax-M2.5", 230, 10), ("moonshotai--Kimi-K2.5", 1000, 32), ("XiaomiMiMo--MiMo-V2-Flash", 309, 15),
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 120, 12), ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 550, 55),
    ("deepseek-ai--DeepSeek-V4-Flash", 284, 13), ("deepseek-ai--DeepSeek-V4-Pro", 1600, 49),
    ("Qwen--Qwen3-VL-235B-A22B-Instruct", 235, 22),
]


@pytest.mark.parametrize("name, total, active", CARDS, ids=[card[0] for card in CARDS])
def test_counts_agree_with_the_cards(name, total, active):
    # Within the card's rounding: the total within 3 % (1T for 1.027T, 1.6T for 1.573T), the active count within a
    # billion either with the input embedding or without it (GLM-5: 40.8 without, 41.8 with; the card: 40B).
    params = model_params(from_hf_config(_read(CONFIGS[0].parent / f"{name}.json")))
    assert abs(params.total / 1e9 / total - 1) < 0.03
    assert min(abs(params.active / 1e9 - active), abs(params.active_with_embedding / 1e9 - active)) < 1
