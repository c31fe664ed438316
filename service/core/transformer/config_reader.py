"""Reading keys of a Hugging Face config.json: every missing or invalid key is collected before the reader
fails, so one refusal names them all; defaults are only those the config classes document, and each one
taken is recorded for the answer's `defaults_applied`."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from service.core.transformer.architecture import MAX_DIMENSION, MAX_LAYERS, ConfigError

# Keys that count layers rather than sizes: bounded by MAX_LAYERS.
LAYER_KEYS = frozenset({"num_hidden_layers", "first_k_dense_replace", "max_window_layers"})
# MiniMax-M3's "swigluoai" is gpt-oss's clamped SwiGLU, gate x sigmoid(alpha x gate): costed as silu (transformers'
# MiniMaxM3VLTextConfig reads it as silu too).
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
               "gelu_fast": "gelu", "relu": "relu", "relu2": "relu2", "swigluoai": "silu"}


class ConfigReader:
    def __init__(self, config: Mapping[str, Any], prefix: str):
        self.config, self.prefix = config, prefix
        self.missing: list[str] = []
        self.defaults: list[str] = []

    def int(self, key: str, default: int | None = None, *, minimum: int = 1, maximum: int | None = None,
            note: str = "") -> int:
        """An integer within [minimum, MAX_DIMENSION] (MAX_LAYERS for layer counts): bounds far above any real
        model that keep the per-layer bookkeeping and the counts small. A missing or invalid key reads as 0 and is
        recorded: fail_if_missing refuses the config before any such 0 reaches a cost."""
        if maximum is None:
            maximum = MAX_LAYERS if key in LAYER_KEYS else MAX_DIMENSION
        value = self.config.get(key)
        if value is None:
            if default is None:
                self.missing.append(key)
                return 0
            self.defaults.append(f"{key} = {default}{note}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            self.missing.append(f"{key} (must be an integer from {minimum} to {maximum})")
            return 0
        return value

    def named(self, key: str, alias: str) -> str:
        """The key a config writes a value under: `key`, unless only its `alias` is given (a model's own checkpoints
        naming what transformers' class calls `key` another way)."""
        return alias if alias in self.config and key not in self.config else key

    # Inside the class `int` names the method above: the annotations below spell the type as builtins.int.
    def optional_int(self, key: str, *, minimum: builtins.int = 1,
                     maximum: builtins.int | None = None) -> builtins.int | None:
        if self.config.get(key) is None:
            return None
        return self.int(key, minimum=minimum, maximum=maximum)

    def int_list(self, key: str) -> list[builtins.int]:
        value = self.config.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            self.missing.append(f"{key} (must be a list of integers)")
            return []
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.missing.append(f"{key} (must be true or false)")
            return default
        return value

    def activation(self, key: str = "hidden_act") -> str:
        name = self.config.get("hidden_activation") or self.config.get(key)
        if name is None:
            self.missing.append(key)
            return "silu"
        if not isinstance(name, str) or name not in ACTIVATIONS:
            self.missing.append(f"{key} (unsupported activation {name!r}; known: {', '.join(sorted(ACTIVATIONS))})")
            return "silu"
        return ACTIVATIONS[name]

    def fail_if_missing(self) -> None:
        if self.missing:
            # A list two readers consult (Nemotron-H's blocks, Nemotron-NAS's block_configs) is refused once.
            missing = list(dict.fromkeys(self.missing))
            names = [f"{self.prefix}.{m.split(' ')[0]}" for m in missing]
            raise ConfigError(names, "cannot interpret the model: missing or invalid " + ", ".join(missing))
