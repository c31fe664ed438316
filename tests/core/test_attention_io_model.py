"""The closed forms behind the FlashAttention I/O model, checked against brute-force sums."""

import random

from service.core.operators.attention import floor_sum, keys_streamed_per_kv_head


def brute_force_keys(q_len, kv_len, group, block_rows, causal):
    total = 0
    for start in range(0, q_len * group, block_rows):
        last_position = min(q_len * group - 1, start + block_rows - 1) // group
        total += (kv_len - q_len + last_position + 1) if causal else kv_len
    return total


def test_floor_sum_matches_brute_force():
    rng = random.Random(7)
    for _ in range(2000):
        n, a, m, b = rng.randint(0, 50), rng.randint(0, 40), rng.randint(1, 40), rng.randint(0, 40)
        assert floor_sum(n, a, m, b) == sum((a * i + b) // m for i in range(n))


def test_keys_streamed_matches_brute_force():
    rng = random.Random(11)
    for _ in range(2000):
        q = rng.randint(1, 60)
        n = q + rng.randint(0, 30)
        group = rng.choice([1, 2, 4, 8])
        block = rng.randint(1, 70)
        for causal in (True, False):
            assert keys_streamed_per_kv_head(q, n, group, block, causal) == brute_force_keys(q, n, group, block, causal)
