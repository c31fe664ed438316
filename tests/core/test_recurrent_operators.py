"""The recurrent layer's operators, counted by hand."""

import pytest

from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators import causal_conv1d_cost, recurrent_scan_cost


def test_chunked_gated_delta_scan_of_a_qwen3_next_layer_prompt():
    # 100 tokens in chunks of 64: 2 chunks (the second padded). Per value head and chunk, c = 64, dk = dv = 128:
    # 4 c^2 dk = 2,097,152 (k k^T and q k^T), c^2 (dk + dv) = 1,048,576 (two triangular solves),
    # 2 c^2 dv = 1,048,576 (intra-chunk output), 6 c dk dv = 6,291,456 (state read twice, updated once):
    # 10,485,760; x 2 chunks x 32 value heads x batch 2 = 1,342,177,280.
    cost = recurrent_scan_cost(rule="gated_delta", batch=2, seq_len=100, heads=32, key_heads=16, key_dim=128,
                               value_dim=128, mode="chunked", chunk=64)
    assert cost.flops == 1_342_177_280
    assert cost.unit is Unit.tensor
    # Read: 200 tokens x (2 x 16 x 128 q and k + 32 x 128 v + 2 x 32 gates) x 2 bytes = 200 x 8256 x 2 = 3,302,400.
    assert cost.bytes_read == 3_302_400
    # Written: 200 x 32 x 128 x 2 = 1,638,400 output, plus 2 states of 32 x 128 x 128 x 2 bytes = 2,097,152.
    assert cost.bytes_written == 1_638_400 + 2_097_152
    assert cost.kv_bytes_written == 2_097_152 and cost.kv_bytes_read == 0


def test_recurrent_ssd_decode_step_reads_and_writes_its_fp32_state():
    # Mamba-2 decode of one token for 4 sequences, 64 heads of P = 64, N = 128, 8 groups: 5 N P FLOPs a head and
    # token = 40,960; x 64 heads x 4 tokens = 10,485,760.
    cost = recurrent_scan_cost(rule="ssd", batch=4, seq_len=1, heads=64, key_heads=8, key_dim=128, value_dim=64,
                               mode="recurrent", initial_state=True, dtype="bf16", state_dtype="fp32")
    assert cost.flops == 10_485_760
    assert cost.unit is Unit.vector
    state = 4 * 64 * 128 * 64 * 4  # 8,388,608 bytes of fp32 state, read and written
    # Inputs: 4 tokens x (2 x 8 x 128 B and C + 64 x 64 x + 64 dt) x 2 bytes = 4 x 6208 x 2 = 49,664.
    assert cost.bytes_read == 49_664 + state
    assert cost.bytes_written == 4 * 64 * 64 * 2 + state


def test_chunked_ssd_counts_the_chunk_products_and_the_state_passed_on():
    # One chunk of 128 tokens, one head, N = 128, P = 64: 2 c^2 (N + P) = 6,291,456, 4 c N P = 4,194,304,
    # 2 N P = 16,384: 10,502,144.
    cost = recurrent_scan_cost(rule="ssd", seq_len=128, heads=1, key_dim=128, value_dim=64, chunk=128)
    assert cost.flops == 10_502_144


def test_causal_conv1d():
    # 2 sequences x 10 tokens x 6 channels, kernel 4 with a bias: 9 FLOPs an output, 120 outputs = 1,080.
    cost = causal_conv1d_cost(batch=2, seq_len=10, channels=6, kernel=4, bias=True, initial_state=True, dtype="bf16")
    assert cost.flops == 1_080
    state = 2 * 6 * 3 * 2  # the last 3 inputs of each sequence and channel, 72 bytes
    weights = 6 * 5 * 2  # 4 taps and a bias a channel, 60 bytes
    assert cost.bytes_read == 120 * 2 + weights + state
    assert cost.bytes_written == 120 * 2 + state
    assert cost.weight_bytes_read == weights


def test_key_heads_must_divide_the_value_heads():
    with pytest.raises(CostModelError) as refused:
        recurrent_scan_cost(seq_len=8, heads=32, key_heads=12, key_dim=128, value_dim=128)
    assert refused.value.field == "key_heads"
