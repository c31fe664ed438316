"""Realistic request examples shown in the OpenAPI documentation, one per operator kind."""

from schemas.common import example_of
from schemas.operators import OPERATOR_KINDS, OPERATOR_MODELS
from service.core.operators.registry import OPERATORS

_SUMMARIES = {
    "matmul": "A 4096-cube bf16 GEMM",
    "grouped_matmul": "Mixtral-style experts' gate-up projection, 128 routed tokens over 8 experts",
    "elementwise": "SiLU over a gated-MLP activation",
    "layernorm": "LayerNorm over 16k tokens of 4096",
    "rmsnorm": "RMSNorm over 16k tokens of 4096",
    "softmax": "Attention-score softmax, 32 heads of 2k x 2k",
    "embedding": "Llama-3 token embedding lookup",
    "rope": "RoPE on the queries of 8 x 2k tokens",
    "attention": "Causal GQA flash attention, 4k prompt",
}

OPERATOR_EXAMPLES = {
    kind: {
        # A kind without a summary of its example here is titled by its descriptor's.
        "summary": _SUMMARIES.get(kind) or f"{kind}: {OPERATORS[kind].summary}",
        "value": {"device_id": "nvidia-h100-sxm", "operator": example_of(model)},
    }
    for kind, model in zip(OPERATOR_KINDS, OPERATOR_MODELS)
}

MODEL_EXAMPLES = {
    "decode-batch-32": {
        "summary": "Llama-3.1-8B decode, batch 32, 4k context, H100",
        "value": {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
                  "batch_size": 32, "seq_len": 4096},
    },
    "prefill-tp4": {
        "summary": "Llama-3.1-70B 4k-token prefill on 4 H100s (tensor parallel)",
        "value": {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "phase": "prefill",
                  "batch_size": 1, "seq_len": 4096, "tensor_parallel": 4},
    },
    "int4-e2e": {
        "summary": "Mixtral-8x7B, int4 weights, 2k prompt and 256 generated tokens",
        "value": {"device_id": "nvidia-a100-80gb-sxm", "model_id": "mixtral-8x7b", "phase": "decode",
                  "batch_size": 8, "seq_len": 2048, "output_len": 256, "dtypes": {"weights": "int4"}},
    },
    "inline-config": {
        "summary": "An inline Hugging Face config.json",
        "value": {"device_id": "nvidia-l4", "phase": "decode", "batch_size": 1, "seq_len": 1024,
                  "model": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
                            "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
                            "vocab_size": 32000, "hidden_act": "silu", "tie_word_embeddings": False}},
    },
}

KV_EXAMPLES = {
    "70b-tp4": {
        "summary": "Llama-3.1-70B on 4 H100s, 8k contexts, 90 % of memory",
        "value": {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "context_len": 8192,
                  "tensor_parallel": 4, "memory_utilization": 0.9},
    },
    "fp8-kv": {
        "summary": "Qwen3-8B on an L40S with an fp8 KV cache and 2 GiB of workspace",
        "value": {"device_id": "nvidia-l40s", "model_id": "qwen3-8b", "context_len": 32768,
                  "dtypes": {"kv_cache": "fp8"}, "workspace_bytes": 2147483648},
    },
}
