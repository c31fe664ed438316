"""A real Llama-style decoder layer and a Mixtral-style MoE layer in PyTorch (CPU), counted by
torch.utils.flop_counter and sum(p.numel()), against the service's rows for the same config.

torch counts matmuls only, computes the full (masked) score matrix in prefill, and ignores
elementwise work; the service's matmul rows and the non-causal matmul part of attention are compared.
"""

import pytest

from service.core.operators import attention_cost
from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.architecture import from_generic
from service.core.transformer.layers import ModelDTypes
from service.core.transformer.params import layer_params
from service.persistence.catalog import nominal_device
from tests.conftest import forward_flop_counts, import_torch

torch = import_torch()
pytestmark = pytest.mark.crosscheck
from torch import nn  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 256, 8, 2, 32, 512
EXPERTS, TOP_K = 4, 2


class RMSNorm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class GatedMLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.gate = nn.Linear(HIDDEN, width, bias=False)
        self.up = nn.Linear(HIDDEN, width, bias=False)
        self.down = nn.Linear(width, HIDDEN, bias=False)

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = nn.ModuleList(GatedMLP(INTERMEDIATE) for _ in range(EXPERTS))

    def forward(self, x):
        flat = x.reshape(-1, HIDDEN)
        weights, chosen = torch.topk(torch.softmax(self.router(flat), dim=-1), TOP_K, dim=-1)
        out = torch.zeros_like(flat)
        for expert_index, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(chosen == expert_index, as_tuple=True)
            if len(rows):
                out[rows] += weights[rows, slot, None] * expert(flat[rows])
        return out.reshape(x.shape)


class DecoderLayer(nn.Module):
    def __init__(self, moe: bool):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.q = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.mlp = MoE() if moe else GatedMLP(INTERMEDIATE)

    def forward(self, x, cache=None):
        batch, length, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(batch, length, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(h).view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v(h).view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = q @ k.transpose(-1, -2) / HEAD_DIM**0.5
        if length > 1:
            scores = scores.masked_fill(torch.ones(length, k.shape[2], dtype=torch.bool).triu(1), float("-inf"))
        attn = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, length, HEADS * HEAD_DIM)
        x = x + self.o(attn)
        return x + self.mlp(self.mlp_norm(x))


def architecture(moe: bool):
    spec = dict(format="generic", layers=1, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                intermediate=INTERMEDIATE, vocab=1000)
    if moe:
        spec.update(experts=EXPERTS, top_k=TOP_K, expert_intermediate=INTERMEDIATE)
    return from_generic(spec)


def service_matmul_flops(moe: bool, phase: str, batch: int, seq_len: int) -> float:
    arch = architecture(moe)
    result = analyze_model(arch, Evaluator(nominal_device("nvidia-h100-sxm")), phase=phase, batch=batch,
                           seq_len=seq_len, dtypes=ModelDTypes())
    layer = [r for r in result.rows if r.group != "model"]
    matmuls = sum(r.flops for r in layer if r.kind in ("matmul", "grouped_matmul"))
    q_len, kv_len = (seq_len, seq_len) if phase == "prefill" else (1, seq_len + 1)
    # torch multiplies the whole (masked) score matrix: the non-causal matmul FLOPs, softmax excluded.
    unmasked = attention_cost(batch=batch, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, q_len=q_len, kv_len=kv_len)
    return matmuls + unmasked.flops - batch * HEADS * q_len * kv_len * 5


def torch_flops(layer, *args):
    return forward_flop_counts(layer, *args)["total"]


@pytest.mark.parametrize("moe", [False, True])
def test_layer_parameters_match_torch(moe):
    layer = DecoderLayer(moe)
    arch = architecture(moe)
    assert layer_params(arch, arch.groups[0]).total == sum(p.numel() for p in layer.parameters())


@pytest.mark.parametrize("moe", [False, True])
def test_prefill_flops_match_torch(moe):
    torch.manual_seed(0)
    layer, x = DecoderLayer(moe), torch.randn(2, 24, HIDDEN)
    assert service_matmul_flops(moe, "prefill", batch=2, seq_len=24) == torch_flops(layer, x)


@pytest.mark.parametrize("moe", [False, True])
def test_decode_with_kv_cache_flops_match_torch(moe):
    torch.manual_seed(0)
    layer, batch, context = DecoderLayer(moe), 3, 40
    cache = (torch.randn(batch, KV_HEADS, context, HEAD_DIM), torch.randn(batch, KV_HEADS, context, HEAD_DIM))
    x = torch.randn(batch, 1, HIDDEN)
    assert service_matmul_flops(moe, "decode", batch=batch, seq_len=context) == torch_flops(layer, x, cache)
