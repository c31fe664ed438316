"""A decode step's attention kernel, counted by the service's own attention row (operators.attention_cost), for
fitting a device's measured decode-attention timings (scripts/fit_attention_calibration.py) and for telling which
fit a composed step's attention row reads (kernel_steps.KernelTables.for_row).

The timed kernels are the attention core of one layer on one device at one query token a sequence: `batch`
sequences, each over `kv_len` cached tokens, for `heads` query heads (the device's share). Two kinds:
- multi-head latent attention (DeepSeek's MLA, absorbed): every head reads one shared cache entry of
  kv_lora_rank + rope values a token and writes kv_lora_rank values, the row layers._latent_attention_rows builds
  for a decode step;
- grouped-query attention: `kv_heads` key and value heads of `head_dim`, a window where given.
The queries and outputs are bf16, the cache in its own dtype. A verification step (a few tokens a sequence after a
cache) runs the same kernels: a row with up to MAX_DECODE_QUERIES queries a sequence reads the decode fit.
"""

from __future__ import annotations

from typing import NamedTuple

from service.core.dtypes import peak_dtype
from service.core.operators.attention import attention_cost

# DeepSeek-V3's latent: 512 values and 64 rope dimensions cached a token, 512 values out.
MLA_CACHED, MLA_VALUES = 512 + 64, 512
# A speculative verification's queries a sequence (draft tokens + 1) the decode kernels are taken to time.
MAX_DECODE_QUERIES = 8
# The two kinds, as the fits' `operator` (KernelCalibration) and the first half of their key.
MLA_DECODE, ATTENTION_DECODE = "mla_decode", "attention_decode"
KINDS = (MLA_DECODE, ATTENTION_DECODE)


class DecodeAttentionShape(NamedTuple):
    latent: bool  # MLA (one shared latent entry a token) rather than grouped-query attention
    batch: int
    heads: int
    kv_heads: int  # 1 for MLA
    head_dim: int  # the cached width a token a key head (MLA: latent + rope)
    v_head_dim: int
    kv_len: int
    window: int | None = None


def decode_attention_work(shape: DecodeAttentionShape, kv_dtype: str) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one decode step's attention on one device: the service's attention row."""
    cost = attention_cost(batch=shape.batch, heads=shape.heads, kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                          v_head_dim=shape.v_head_dim, q_len=1, kv_len=shape.kv_len, dtype="bf16", kv_dtype=kv_dtype,
                          causal=True, shared_kv=shape.latent, window=shape.window or None)
    return float(cost.flops), float(cost.bytes_total)


def decode_attention_key(params: dict | None) -> str | None:
    """The decode-attention fit an attention row reads ("<kind>:<cache dtype>"), or None where it is not a decode or
    verification step's attention (a prompt's, or a row built without its parameters)."""
    if not params:
        return None
    q_len, kv_len = params.get("q_len", 0), params.get("kv_len", 0)
    if not 1 <= q_len <= MAX_DECODE_QUERIES or q_len >= kv_len:
        return None
    kind = MLA_DECODE if params.get("shared_kv") else ATTENTION_DECODE
    return f"{kind}:{peak_dtype(params.get('kv_dtype') or params.get('dtype') or 'bf16')}"
