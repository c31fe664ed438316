"""Writes service/data/config_defaults.json: for each model family the service reads, the defaults transformers'
config class declares for the keys a config.json may leave out, so that such a config reads as transformers reads
it (issue: gemma-3-27b-it's text_config omits vocab_size and its activation). Only a developer runs it, with the
pinned transformers (constraints.txt):

    .venv/bin/python scripts/import_config_defaults.py

Taken: the dataclass defaults each class declares (not what its __post_init__ derives from other keys: Llama's
head_dim is hidden_size / num_attention_heads, not the 128 of its default sizes), scalars only, never None. Left
out: the keys that size the model (a config without them describes no model in particular: a default there would
answer for Llama-2-7B's 4,096 x 32 when nobody asked), token ids, and training-only settings.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The families whose transformers class is another's (kimi_k2: transformers reads it as deepseek_v3; MiMo is
# Qwen2's decoder, remote code only; MiniMax-M3's text config is MiniMaxM3VLTextConfig's).
CLASS_OF = {"kimi_k2": "deepseek_v3", "mimo": "qwen2", "deepseek_ref": "deepseek_v4", "minimax_m3": "minimax_m3_vl_text"}
# A config without these is not a description of any one model.
SIZES = frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                   "moe_intermediate_size", "num_experts", "num_local_experts", "n_routed_experts",
                   "num_experts_per_tok", "dense_intermediate_size", "shared_intermediate_size", "share_expert_dim"})
UNUSED = frozenset({"initializer_range", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id",
                    "attention_dropout", "hidden_dropout", "router_aux_loss_coef", "output_router_logits",
                    "router_jitter_noise", "aux_loss_alpha", "seq_aux", "return_dict", "output_hidden_states",
                    "output_attentions", "torchscript", "dtype", "problem_type", "tokenizer_class",
                    "chunk_size_feed_forward", "is_encoder_decoder", "residual_in_fp32", "time_step_min",
                    "time_step_max", "time_step_floor"})


def declared_defaults(config_class) -> dict:
    out = {}
    for field in dataclasses.fields(config_class):
        if field.name in SIZES or field.name in UNUSED or field.name.startswith("_"):
            continue
        value = field.default
        if value is dataclasses.MISSING or value is None or not isinstance(value, (bool, int, float, str)):
            continue
        out[field.name] = value
    return out


def main() -> None:
    import transformers
    from transformers import CONFIG_MAPPING

    from service.core.transformer.families import FAMILIES

    classes = {}
    for name in sorted(FAMILIES):
        if CLASS_OF.get(name, name) not in CONFIG_MAPPING:  # remote code only (Nemotron-NAS): no class defaults
            continue
        config_class = CONFIG_MAPPING[CLASS_OF.get(name, name)]
        classes[name] = {"class": config_class.__name__, "defaults": declared_defaults(config_class)}
    out = ROOT / "service" / "data" / "config_defaults.json"
    out.write_text(json.dumps({"source": f"transformers {transformers.__version__} (PyPI, Apache-2.0): the "
                                         "declared defaults of each family's config class "
                                         "(scripts/import_config_defaults.py)",
                               "version": transformers.__version__, "families": classes}, indent=1,
                              sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
