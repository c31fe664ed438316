"""Each cost model against counts derived by hand in the test (bf16 = 2 bytes, fp32 = 4, int4 = 0.5)."""

import pytest

from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators import (
    attention_cost,
    elementwise_cost,
    embedding_cost,
    layernorm_cost,
    matmul_cost,
    rmsnorm_cost,
    rope_cost,
    softmax_cost,
)
from service.core.operators.attention import causal_pairs


def test_matmul_square_bf16():
    cost = matmul_cost(m=4096, n=4096, k=4096)
    assert cost.flops == 2 * 4096**3 == 137_438_953_472
    # A, B and C are each 4096*4096*2 = 33,554,432 bytes; A and B are read, C written.
    assert cost.bytes_read == 67_108_864
    assert cost.bytes_written == 33_554_432
    assert (cost.unit, cost.compute_dtype) == (Unit.tensor, "bf16")


def test_matmul_batched_with_bias_and_shared_weight():
    cost = matmul_cost(m=2, n=3, k=4, batch=5, bias=True)
    # FLOPs: 2*5*2*3*4 = 240 for the products, plus 5*2*3 = 30 bias adds.
    assert cost.flops == 270
    # A 5*2*4*2 = 80, B 4*3*2 = 24 (read once), bias 3*2 = 6; C 5*2*3*2 = 60.
    assert (cost.bytes_read, cost.bytes_written) == (110, 60)


def test_matmul_unshared_weight_is_read_per_batch_item():
    cost = matmul_cost(m=2, n=3, k=4, batch=5, bias=True, weight_shared=False)
    # A 80, B 5*24 = 120, bias 5*6 = 30.
    assert cost.bytes_read == 230


def test_matmul_weight_only_int4_computes_in_the_activation_type():
    cost = matmul_cost(m=1, n=4096, k=4096, a_dtype="bf16", b_dtype="int4")
    # A 1*4096*2 = 8192; B 4096*4096*0.5 = 8,388,608; C 1*4096*2 = 8192.
    assert cost.bytes_read == 8192 + 8_388_608
    assert cost.bytes_written == 8192
    assert cost.compute_dtype == "bf16"


def test_elementwise_unary_and_binary():
    silu = elementwise_cost(op="silu", shape=[2, 3, 4], dtype="bf16")
    # 24 elements at 4 FLOP; 24*2 bytes in, 24*2 bytes out.
    assert (silu.flops, silu.bytes_read, silu.bytes_written) == (96, 48, 48)
    add = elementwise_cost(op="add", shape=[2, 3, 4], dtype="bf16")
    # 24 FLOP; two inputs of 48 bytes.
    assert (add.flops, add.bytes_read, add.bytes_written) == (24, 96, 48)
    assert add.unit == Unit.vector


def test_elementwise_override_and_unknown_op():
    custom = elementwise_cost(op="tanh", shape=[24], dtype="fp32", flops_per_element=7)
    assert (custom.flops, custom.bytes_read, custom.bytes_written) == (168, 96, 96)
    with pytest.raises(CostModelError) as error:
        elementwise_cost(op="tanh", shape=[24])
    assert error.value.field == "op"


def test_layernorm_reads_gamma_and_beta():
    cost = layernorm_cost(shape=[4, 8], dtype="fp32")
    # 32 elements * 5 FLOP = 160; x 128 bytes + gamma and beta 2*8*4 = 64; y 128 bytes.
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (160, 192, 128)


def test_rmsnorm_reads_gamma_only():
    cost = rmsnorm_cost(shape=[4, 8], dtype="bf16")
    # 32 * 4 = 128 FLOP; x 64 bytes + gamma 16; y 64.
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (128, 80, 64)


def test_softmax():
    cost = softmax_cost(shape=[2, 10], dtype="fp16")
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (100, 40, 40)


def test_rope_reads_shared_tables_once():
    cost = rope_cost(batch=2, seq_len=3, heads=4, head_dim=8, dtype="bf16")
    # 192 elements * 3 FLOP = 576; x 384 bytes + cos and sin 2*3*8*2 = 96; out 384.
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (576, 480, 384)


def test_embedding_gathers_rows():
    cost = embedding_cost(tokens=10, hidden=16, vocab=1000)
    # 10 rows of 16*2 = 320 bytes, ids 10*4 = 40; output 320.
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (0, 360, 320)
    many = embedding_cost(tokens=2000, hidden=16, vocab=1000)
    # At most the 1000 distinct rows: 32,000 bytes, plus ids 8,000; output 2000*16*2 = 64,000.
    assert (many.bytes_read, many.bytes_written) == (40_000, 64_000)


def test_attention_flash_non_causal():
    cost = attention_cost(batch=1, heads=2, head_dim=4, q_len=3)
    # pairs 3*3 = 9 per head; FLOP per pair 4*4 + 5 = 21; 2 heads -> 378.
    assert cost.flops == 378
    # Q = O = 2*3*4*2 = 48 bytes; K + V = 96.
    assert (cost.bytes_read, cost.bytes_written) == (144, 48)


def test_attention_naive_materialises_scores():
    cost = attention_cost(batch=1, heads=2, head_dim=4, q_len=3, implementation="naive")
    # S and P are 2*3*3 = 18 elements (36 bytes) each: written and read once -> +72 each way.
    assert (cost.bytes_read, cost.bytes_written) == (144 + 72, 48 + 72)
    assert cost.flops == 378


def test_attention_causal_counts_unmasked_pairs():
    assert causal_pairs(3, 3) == 6  # 1 + 2 + 3
    assert causal_pairs(1, 4096) == 4096  # a decode step sees the whole cache
    assert causal_pairs(2, 5) == 4 + 5
    cost = attention_cost(batch=1, heads=2, head_dim=4, q_len=3, causal=True)
    assert cost.flops == 2 * 6 * 21


def test_attention_gqa_reads_kv_once_per_kv_head():
    mha = attention_cost(heads=8, head_dim=128, q_len=1024)
    gqa = attention_cost(heads=8, kv_heads=2, head_dim=128, q_len=1024)
    # Q and O: 8*1024*128*2 = 2,097,152 bytes each; K + V: 2 * kv_heads*1024*128*2.
    assert gqa.bytes_read == 2_097_152 + 2 * 2 * 262_144
    assert mha.bytes_read - gqa.bytes_read == 2 * 6 * 262_144
    assert mha.flops == gqa.flops


def test_attention_decode_counts_the_whole_cache():
    cost = attention_cost(batch=4, heads=32, kv_heads=8, head_dim=128, q_len=1, kv_len=4096, causal=True)
    assert cost.flops == 4 * 32 * 4096 * (4 * 128 + 5)
    # K + V cache: 2 * 4 * 8 * 4096 * 128 * 2 bytes; Q in and O out: 4*32*128*2 each.
    assert cost.bytes_read == 2 * 4 * 8 * 4096 * 128 * 2 + 4 * 32 * 128 * 2


def test_flash_io_model_restreams_kv_per_query_block():
    # d = 64, bf16, M = 65,536 bytes = 32,768 elements: B_c = 32768 / (4*64) = 128, B_r = min(128, 64) = 64.
    full = attention_cost(heads=1, head_dim=64, q_len=1024, sram_bytes=65_536)
    # 1024 / 64 = 16 query blocks, each loading all 1024 keys: K+V = 2 * 16*1024 * 64 * 2 bytes.
    assert full.bytes_read == 1024 * 64 * 2 + 2 * 16 * 1024 * 64 * 2
    causal = attention_cost(heads=1, head_dim=64, q_len=1024, sram_bytes=65_536, causal=True)
    # Block j loads keys up to its last row: 64*(j+1) keys, summed over 16 blocks = 64 * 136 = 8704.
    assert causal.bytes_read == 1024 * 64 * 2 + 2 * 8704 * 64 * 2


def test_attention_refusals_name_the_field():
    with pytest.raises(CostModelError) as error:
        attention_cost(heads=6, kv_heads=4, head_dim=64, q_len=8)
    assert error.value.field == "kv_heads"
    with pytest.raises(CostModelError) as error:
        attention_cost(heads=4, head_dim=64, q_len=8, kv_len=4, causal=True)
    assert error.value.field == "q_len"
    with pytest.raises(CostModelError) as error:
        attention_cost(heads=4, head_dim=64, q_len=8, sram_bytes=100)
    assert error.value.field == "sram_bytes"


def test_tensors_beyond_exact_float_range_are_refused():
    with pytest.raises(CostModelError) as error:
        matmul_cost(m=2**30, n=2**30, k=2**30)
    assert error.value.field in {"m", "n", "k"}


def test_matmul_l2_traffic_with_tiles():
    # M = 256, N = 384, K = 64, 128x128 tiles: 2 tile rows, 3 tile columns.
    cost = matmul_cost(m=256, n=384, k=64, tile=(128, 128, 32))
    a_bytes, b_bytes, c_bytes = 256 * 64 * 2, 64 * 384 * 2, 256 * 384 * 2
    # A fetched from L2 once per tile column (3x), B once per tile row (2x), C written once.
    assert dict(cost.traffic_by_level) == {"l2": 3 * a_bytes + 2 * b_bytes + c_bytes}
    assert cost.bytes_total == a_bytes + b_bytes + c_bytes  # HBM: each operand once


def test_derived_peaks_reproduce_the_h100_datasheet():
    from service.core.derive import derived_bandwidth, derived_compute_peaks

    # H100 SXM: 132 SMs x 4 tensor cores x 512 dense bf16 FMA per cycle each = 2048 per SM, at the
    # 1.83 GHz tensor clock: 132 * 2048 * 2 * 1.83e9 = 989.4e12 FLOP/s (the datasheet's dense figure).
    micro = {"units": 132, "clock_hz": 1.83e9, "tensor_fma_per_unit_per_cycle": {"bf16": 2048},
             "memory_bus_width_bits": 5120, "memory_transfers_per_s_per_pin": 5.24e9}
    [peak] = derived_compute_peaks(micro)
    assert peak.flops_per_s == pytest.approx(989.4e12, rel=1e-3)
    # 5120 / 8 * 5.24e9 = 3.3536e12 bytes/s against the 3.35e12 datasheet figure.
    assert derived_bandwidth(micro).bytes_per_s == pytest.approx(3.3536e12)
