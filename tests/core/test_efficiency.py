"""Tile padding, wave quantisation and grouped (MoE) matmuls, derived by hand."""

import pytest

from service.core.efficiency import matmul_efficiency
from service.core.operators import grouped_matmul_cost


def test_padding_efficiency():
    # 1000^3 on 128x128x64 tiles pads every side to 1024: 1e9 / 1024^3 = 0.931322...
    e = matmul_efficiency(1000, 1000, 1000, 1, (128, 128, 64), 132, 2e9)
    assert e.padding_efficiency == pytest.approx(1e9 / 1024**3)
    assert e.executed_flops == pytest.approx(2e9 * 1024**3 / 1e9)


def test_wave_count_that_is_not_whole():
    # 4096^2 output on 128x128 tiles: 32*32 = 1024 tiles over 132 SMs = 7.7576 waves, so the 8th wave is
    # 75.8 % full: wave efficiency 7.7576 / 8 = 0.9697.
    e = matmul_efficiency(4096, 4096, 4096, 1, (128, 128, 64), 132, 2 * 4096**3)
    assert e.tiles == 1024
    assert e.waves == pytest.approx(1024 / 132)
    assert e.wave_efficiency == pytest.approx(1024 / 132 / 8)
    assert e.padding_efficiency == 1.0


def test_moe_routing_uniform_versus_concentrated():
    # 128 tokens, top-2: 256 routed rows over 8 experts with [k=4096, n=2*14336] bf16 weights each.
    n, k, weight = 28672, 4096, 4096 * 28672 * 2
    uniform = grouped_matmul_cost(tokens_per_expert=[32] * 8, n=n, k=k)
    concentrated = grouped_matmul_cost(tokens_per_expert=[250, 6, 0, 0, 0, 0, 0, 0], n=n, k=k)
    # Same rows, same FLOPs: 2 * 256 * n * k.
    assert uniform.flops == concentrated.flops == 2 * 256 * n * k
    # Uniform routing reads all 8 experts' weights, concentrated only 2.
    assert uniform.weight_bytes_read == 8 * weight
    assert concentrated.weight_bytes_read == 2 * weight
    assert uniform.bytes_read - concentrated.bytes_read == 6 * weight
    # Rows padded to 16: uniform 8 * 32 = 256 executed (no waste); concentrated 256 + 16 = 272.
    assert "256 rows executed for 256" in uniform.assumptions[1]
    assert "272 rows executed for 256" in concentrated.assumptions[1]
