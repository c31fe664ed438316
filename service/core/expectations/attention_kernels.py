"""An attention kernel, counted by the service's own attention row (operators.attention_cost), for fitting a device's
measured attention timings (scripts/fit_attention_calibration.py) and for telling which fit a composed step's
attention row reads (kernel_steps.KernelTables.for_row).

The timed kernels are the attention core of one layer on one device: `batch` sequences of `q_len` new tokens each
after `kv_len - q_len` cached ones, for `heads` query heads (the device's share). Four kinds:
- decode (MAX_DECODE_QUERIES queries a sequence at most, after a cache), of two kinds:
  - multi-head latent attention (DeepSeek's MLA, absorbed): every head reads one shared cache entry of kv_lora_rank +
    rope values a token and writes kv_lora_rank values, the row layers._latent_attention_rows builds for a decode
    step; its queries and outputs bf16, the cache in its own dtype;
  - grouped-query attention: `kv_heads` key and value heads of `head_dim`, a window where given;
  a verification step (a few tokens a sequence after a cache) runs the same kernels;
- prefill (a prompt: more queries a sequence), of the same two kinds, as the service counts them:
  - latent attention expanded: every head its own keys of qk_nope + rope dimensions and values of v_head_dim, the
    activations' dtype throughout (the service's prefill row: layers._latent_attention_rows);
  - grouped-query attention, queries in the activations' dtype, the cache in its own.
  The tables time prompts with nothing cached before them (causal); a chunk after a cache reads the same fit.
A decode fit is keyed by its cache dtype (its compute runs in bf16), a prefill fit by its activations' dtype (what its
compute runs at): attention_key.
"""

from __future__ import annotations

from typing import NamedTuple

from service.core.dtypes import peak_dtype
from service.core.operators.attention import attention_cost

# DeepSeek-V3's latent: 512 values and 64 rope dimensions cached a token, 512 values out (decode, absorbed); a
# prompt's heads expanded to keys of 128 + 64 dimensions and values of 128.
MLA_CACHED, MLA_VALUES = 512 + 64, 512
MLA_PREFILL_KEY, MLA_PREFILL_VALUE = 128 + 64, 128
# A speculative verification's queries a sequence (draft tokens + 1) the decode kernels are taken to time.
MAX_DECODE_QUERIES = 8
# The kinds, as the fits' `operator` (KernelCalibration) and the first half of their key.
MLA_DECODE, ATTENTION_DECODE = "mla_decode", "attention_decode"
MLA_PREFILL, ATTENTION_PREFILL = "mla_prefill", "attention_prefill"
DECODE_KINDS = (MLA_DECODE, ATTENTION_DECODE)


def is_decode(q_len: int, kv_len: int) -> bool:
    """Whether a row of `q_len` new tokens a sequence over `kv_len` runs the decode kernels: a few after a cache."""
    return q_len <= MAX_DECODE_QUERIES and q_len < kv_len


class AttentionShape(NamedTuple):
    latent: bool  # MLA (decode: one shared latent entry a token; prefill: its heads expanded) rather than GQA
    batch: int
    heads: int
    kv_heads: int  # 1 for a latent decode, `heads` for a latent prefill
    head_dim: int  # a key's width (a latent decode's: latent + rope)
    v_head_dim: int
    q_len: int  # new tokens a sequence: 1 for a decode step
    kv_len: int  # tokens attended a sequence, the new ones included
    window: int | None = None

    @property
    def decode(self) -> bool:
        return is_decode(self.q_len, self.kv_len)

    @property
    def kind(self) -> str:
        if self.decode:
            return MLA_DECODE if self.latent else ATTENTION_DECODE
        return MLA_PREFILL if self.latent else ATTENTION_PREFILL


def attention_work(shape: AttentionShape, dtype: str) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one layer's attention on one device as the service's row counts it: `dtype` the cache's
    (a decode, its queries bf16) or the activations' and the cache's alike (a prefill)."""
    queries = "bf16" if shape.decode else dtype
    cost = attention_cost(batch=shape.batch, heads=shape.heads, kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                          v_head_dim=shape.v_head_dim, q_len=shape.q_len, kv_len=shape.kv_len, dtype=queries,
                          kv_dtype=dtype, causal=True, shared_kv=shape.latent and shape.decode,
                          window=shape.window or None)
    return float(cost.flops), float(cost.bytes_total)


def attention_key(params: dict | None) -> str | None:
    """The attention fit a row reads ("<kind>:<dtype>"), or None where its parameters do not say (a row built
    without them)."""
    if not params:
        return None
    q_len, kv_len = params.get("q_len", 0), params.get("kv_len", 0)
    if q_len < 1 or kv_len < q_len:
        return None
    if is_decode(q_len, kv_len):
        kind = MLA_DECODE if params.get("shared_kv") else ATTENTION_DECODE
        return f"{kind}:{peak_dtype(params.get('kv_dtype') or params.get('dtype') or 'bf16')}"
    # A latent prompt's row expands its heads: as many key heads as query heads, a key wider than its value.
    latent = params.get("kv_heads", params.get("heads")) == params.get("heads") and (
        params.get("head_dim"), params.get("v_head_dim")) == (MLA_PREFILL_KEY, MLA_PREFILL_VALUE)
    return f"{MLA_PREFILL if latent else ATTENTION_PREFILL}:{peak_dtype(params.get('dtype') or 'bf16')}"
