"""A real PEFT LoRA on a Hugging Face Llama decoder layer (peft, transformers, CPU, eager attention), counted by
torch.utils.flop_counter.FlopCounterMode over its forward and over loss.backward(), against the fine-tuning step's
rows for the same config and adapters.

The layer stands in the middle of a model: its input needs a gradient (the layers below it hold adapters), so
every frozen projection still computes dX. torch counts matmuls only, and the whole (masked) score matrix, as
test_torch_training.py explains.
"""

import pytest

from service.core.training.collectives import Topology
from service.core.training.peft import Peft
from service.core.training.step import TrainingSetup, analyze_training
from service.core.transformer.analysis import Evaluator
from service.core.transformer.families import from_hf_config
from service.persistence.catalog import nominal_device
from tests.conftest import import_crosscheck, import_torch
from tests.core.training.test_torch_training import BATCH, CONFIG, SEQ, flop_counts, hf_layer, unmasked_score_matmuls

torch = import_torch()
peft = import_crosscheck("peft")
pytestmark = pytest.mark.crosscheck

RANK, ALPHA = 4, 8


def torch_counts(targets: list[str]) -> tuple[int, int, int]:
    """(forward FLOPs, backward FLOPs, trainable parameters) of the adapted layer."""
    torch.manual_seed(0)
    config, layer = hf_layer()
    layer = peft.inject_adapter_in_model(peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=targets), layer)
    for name, parameter in layer.named_parameters():
        parameter.requires_grad_("lora_" in name)
    forward, backward = flop_counts(config, layer)
    trainable = sum(p.numel() for p in layer.parameters() if p.requires_grad)
    return forward, backward, trainable


def service_counts(targets: list[str]) -> tuple[float, float, float]:
    result = analyze_training(from_hf_config(CONFIG), Evaluator(nominal_device("nvidia-h100-sxm")),
                              Topology(1, None, None),
                              TrainingSetup(micro_batch_size=BATCH, seq_len=SEQ,
                                            peft=Peft("lora", RANK, ALPHA, tuple(targets))))
    layer = [p for p in result.rows if p.result.group not in ("first stage", "last stage", "optimizer")
             and p.result.kind == "matmul"]
    forward = sum(p.result.flops for p in layer if p.phase == "forward")
    backward = sum(p.result.flops for p in layer if p.phase in ("backward_activation", "backward_weight"))
    return forward, backward, result.trainable_parameters


@pytest.mark.parametrize("targets", [["q_proj", "k_proj", "v_proj", "o_proj"], ["q_proj", "v_proj"],
                                     ["gate_proj", "up_proj", "down_proj"]])
def test_adapted_layer_flops_and_adapters_match_peft_under_flop_counter_mode(targets):
    torch_forward, torch_backward, torch_trainable = torch_counts(targets)
    forward, backward, trainable = service_counts(targets)
    assert forward + unmasked_score_matmuls() == torch_forward
    # dX of every frozen projection, dX and dW of every adapter matrix, attention's four score matmuls.
    assert backward + 2 * unmasked_score_matmuls() == torch_backward
    # The model's adapters are this one layer's (the config has one layer).
    assert trainable == torch_trainable
