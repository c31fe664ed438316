"""Cross-check FLOP counts against PyTorch's own counter on real CPU tensors.

torch.utils.flop_counter counts the matmuls only (2 FLOP per multiply-add, no bias adds, no softmax),
so the service's extra terms are subtracted before comparing.
"""

import pytest

from service.core.operators import attention_cost, matmul_cost
from service.core.operators.attention import SOFTMAX_FLOPS_PER_SCORE
from tests.conftest import import_torch

torch = import_torch()
pytestmark = pytest.mark.crosscheck

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402


def torch_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("batch, m, n, k", [(1, 64, 48, 32), (3, 17, 129, 40), (2, 1, 256, 512)])
def test_matmul_matches_torch(batch, m, n, k):
    a, w = torch.randn(batch, m, k), torch.randn(k, n)
    assert matmul_cost(m=m, n=n, k=k, batch=batch).flops == torch_flops(lambda: a @ w)


def test_linear_with_bias_matches_torch_less_the_bias_adds():
    layer = torch.nn.Linear(96, 80, bias=True)
    x = torch.randn(24, 96)
    ours = matmul_cost(m=24, n=80, k=96, bias=True).flops
    assert ours - 24 * 80 == torch_flops(lambda: layer(x))


@pytest.mark.parametrize("batch, heads, q_len, kv_len, head_dim", [(2, 4, 16, 16, 32), (1, 8, 1, 64, 64)])
def test_attention_matmuls_match_torch(batch, heads, q_len, kv_len, head_dim):
    q = torch.randn(batch, heads, q_len, head_dim)
    k = torch.randn(batch, heads, kv_len, head_dim)
    v = torch.randn(batch, heads, kv_len, head_dim)

    def explicit():
        probabilities = torch.softmax(q @ k.transpose(-1, -2) / head_dim**0.5, dim=-1)
        return probabilities @ v

    ours = attention_cost(batch=batch, heads=heads, head_dim=head_dim, q_len=q_len, kv_len=kv_len).flops
    softmax = batch * heads * q_len * kv_len * SOFTMAX_FLOPS_PER_SCORE
    # (The fused SDPA kernel is not counted by torch on the CPU, so the explicit form is used.)
    assert ours - softmax == torch_flops(explicit)
