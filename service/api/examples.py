"""Realistic request examples shown in the OpenAPI documentation, one per operator kind."""

from schemas.operators import OPERATOR_KINDS, OPERATOR_MODELS

_SUMMARIES = {
    "matmul": "Llama-3.1-8B gate projection, 4k tokens (bf16)",
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
        "summary": _SUMMARIES[kind],
        "value": {"device_id": "nvidia-h100-sxm", "operator": model.model_config["json_schema_extra"]["examples"][0]},
    }
    for kind, model in zip(OPERATOR_KINDS, OPERATOR_MODELS)
}
