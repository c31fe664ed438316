"""A real Hugging Face Llama decoder layer (transformers, CPU, eager attention) counted by
torch.utils.flop_counter.FlopCounterMode over its forward and over loss.backward(), against the training
step's rows for the same config.

torch counts matmuls only and multiplies the whole (masked) score matrix; the service's matmul rows are
compared exactly, attention by its matmul part without the causal mask (the service counts causal pairs
and the softmax; its attention backward is twice its forward, as torch's four score matmuls are).
"""

import pytest

from service.core.operators import attention_cost
from service.core.training.collectives import Topology
from service.core.training.step import TrainingSetup, analyze_training
from service.core.transformer.analysis import Evaluator
from service.core.transformer.families import from_hf_config
from service.core.transformer.params import layer_params
from service.persistence.catalog import nominal_device
from tests.conftest import import_crosscheck, import_torch

torch = import_torch()
transformers = import_crosscheck("transformers")
pytestmark = pytest.mark.crosscheck
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding  # noqa: E402

CONFIG = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_attention_heads=8,
              num_key_value_heads=2, head_dim=32, num_hidden_layers=1, vocab_size=1000, max_position_embeddings=256,
              hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=False)
BATCH, SEQ = 2, 24


def hf_layer():
    config = LlamaConfig(**{k: v for k, v in CONFIG.items() if k != "model_type"})
    config._attn_implementation = "eager"  # plain matmuls, which FlopCounterMode sees on CPU
    return config, LlamaDecoderLayer(config, layer_idx=0)


def torch_counts() -> tuple[int, int]:
    torch.manual_seed(0)
    return flop_counts(*hf_layer())


def flop_counts(config, layer) -> tuple[int, int]:
    """FlopCounterMode's (forward, backward) of one pass of a random batch through the layer, its input needing a
    gradient as a layer's in the middle of a model does."""
    x = torch.randn(BATCH, SEQ, CONFIG["hidden_size"], requires_grad=True)
    positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ)
    rotary = LlamaRotaryEmbedding(config)(x, positions)
    mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)[None, None].expand(BATCH, 1, SEQ, SEQ)
    with FlopCounterMode(display=False) as forward:
        out = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=rotary)
    out = out[0] if isinstance(out, tuple) else out
    with FlopCounterMode(display=False) as backward:
        out.float().pow(2).mean().backward()
    return forward.get_total_flops(), backward.get_total_flops()


def service_rows():
    arch = from_hf_config(CONFIG)
    result = analyze_training(arch, Evaluator(nominal_device("nvidia-h100-sxm")), Topology(1, None, None),
                              TrainingSetup(micro_batch_size=BATCH, seq_len=SEQ))
    return arch, [p for p in result.rows if p.result.group not in ("first stage", "last stage", "optimizer")]


def unmasked_score_matmuls() -> float:
    # QK^T and PV over every (query, key) pair, as torch multiplies them: the non-causal attention FLOPs without
    # the softmax's 5 per score.
    full = attention_cost(batch=BATCH, heads=8, kv_heads=2, head_dim=32, q_len=SEQ, kv_len=SEQ)
    return full.flops - BATCH * 8 * SEQ * SEQ * 5


def test_the_hf_layer_has_the_services_parameter_count():
    arch = from_hf_config(CONFIG)
    _, layer = hf_layer()
    assert layer_params(arch, arch.groups[0]).total == sum(p.numel() for p in layer.parameters())


def test_forward_and_backward_flops_match_flop_counter_mode():
    torch_forward, torch_backward = torch_counts()
    _, rows = service_rows()
    matmuls = {phase: sum(p.result.flops * p.result.instances for p in rows
                          if p.phase == phase and p.result.kind == "matmul")
               for phase in ("forward", "backward_activation", "backward_weight")}
    assert matmuls["forward"] + unmasked_score_matmuls() == torch_forward
    # dX and dW of every projection, each its forward's FLOPs; four score matmuls in attention's backward.
    assert matmuls["backward_activation"] == matmuls["backward_weight"] == matmuls["forward"]
    assert matmuls["backward_activation"] + matmuls["backward_weight"] + 2 * unmasked_score_matmuls() == torch_backward
    [attention] = [p.result for p in rows if p.phase == "forward" and p.result.kind == "attention"]
    [attention_backward] = [p.result for p in rows if p.phase == "backward_activation" and p.result.kind == "attention"]
    assert attention_backward.flops == 2 * attention.flops
