"""A checkpoint's own weight formats, read from its config's `quantization_config`, and the dtypes they imply
when a request names none. A request's `dtypes` always wins; the answer says which it used.

Schemes read (bytes per weight = bits / 8 + scale bytes / group):
- `fp8` (DeepSeek-V3, Kimi-K2, Qwen FP8): fp8 weights, one fp32 scale per weight_block_size block (128 x 128),
  activations quantised to fp8 at run time (W8A8);
- `mxfp4` (gpt-oss): fp4 weights with one 8-bit (e8m0) scale per 32, on the modules not in
  modules_to_not_convert (gpt-oss: the routed experts; attention, router, embedding and head stay bf16);
- `modelopt` NVFP4 and compressed-tensors `nvfp4`: fp4 weights and activations (W4A4), one fp8 scale per 16;
  `modelopt` FP8: fp8 weights and activations, a scale per tensor (a ModelOpt checkpoint states it in
  hf_quant_config.json, whose `quantization` section the CLI attaches as quantization_config);
- `compressed-tensors`: the first config group's weights (int4/int8/fp8, its group size) and input activations
  (W4A16, W8A8);
- `awq`, `gptq`: int4 (or `bits`) weights in groups of group_size, an fp16 scale and a 4-bit zero point per group.
Anything else is left to the request's dtypes.

What stays in 16 bits, as vLLM and SGLang load a checkpoint: the embedding table, the LM head, the routers and the
norms always (DeepSeek-V3's fp8 checkpoint stores its head and gates in bf16 without listing them); and the module
classes the scheme's lists name (`ignore`, `modules_to_not_convert`, `exclude_modules`, `ignored_layers`): the
attention or linear-attention projections (NVIDIA's NVFP4 checkpoints), the shared experts, the dense MLPs (Kimi
K2.5's int4 checkpoint quantises its routed experts only), or whole layers (GLM-5's NVFP4 keeps its three dense
layers). A list naming only some layers' attention counts as all of it (NVFP4 checkpoints list every layer).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from service.core.transformer.architecture import Quantization
from service.core.transformer.layers import ModelDTypes


def _block(value: Any) -> int | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return value[0] * value[1]
    return None


def _fp8(q: Mapping[str, Any]) -> Quantization:
    block = _block(q.get("weight_block_size"))
    shape = "x".join(map(str, q["weight_block_size"])) if block else "tensor"
    return Quantization("fp8", block, 4.0, f"quantization_config fp8: an fp32 scale per {shape} block, activations "
                                           f"quantised to fp8 ({q.get('activation_scheme', 'dynamic')})",
                        activations="fp8")


def _mxfp4(q: Mapping[str, Any]) -> Quantization:
    kept = [str(m) for m in q.get("modules_to_not_convert") or []]
    experts_only = any("self_attn" in m for m in kept)
    where = "the routed experts (" + ", ".join(kept) + " stay in the activations' type)" if experts_only else "all weights"
    return Quantization("fp4", 32, 1.0, f"quantization_config mxfp4: fp4 with an 8-bit scale per 32 on {where}",
                        experts_only=experts_only)


def _nvfp4(source: str) -> Quantization:
    return Quantization("fp4", 16, 1.0, f"{source}: NVFP4, fp4 weights and activations with an fp8 scale per 16",
                        activations="fp4")


_TYPES: dict[tuple[Any, Any], str] = {("int", 4): "int4", ("int", 8): "int8", ("float", 8): "fp8", ("float", 4): "fp4"}


def _compressed_tensors(q: Mapping[str, Any]) -> Quantization | None:
    if str(q.get("format", "")).startswith("nvfp4"):
        return _nvfp4("quantization_config compressed-tensors")
    groups = q.get("config_groups")
    group = next(iter(groups.values()), None) if isinstance(groups, Mapping) and groups else None
    weights = group.get("weights") if isinstance(group, Mapping) else None
    if not isinstance(weights, Mapping):
        return None
    dtype = _TYPES.get((weights.get("type"), weights.get("num_bits")))
    if dtype is None:
        return None
    size = weights.get("group_size") if isinstance(weights.get("group_size"), int) else None
    inputs: Any = group.get("input_activations") if isinstance(group, Mapping) else None
    activations = _TYPES.get((inputs.get("type"), inputs.get("num_bits"))) if isinstance(inputs, Mapping) else None
    scheme = f"W{weights.get('num_bits')}A{inputs.get('num_bits') if activations else 16}"
    return Quantization(dtype, size, 2.0, f"quantization_config compressed-tensors {scheme}: {dtype} weights"
                        + (f" in groups of {size}" if size else "") + (f", {activations} activations" if activations else ""),
                        activations=activations)


def _int_groups(q: Mapping[str, Any], method: str) -> Quantization | None:
    bits = q.get("bits", q.get("w_bit", 4))
    dtype = _TYPES.get(("int", bits))
    size = q.get("group_size", q.get("q_group_size", 128))
    if dtype is None or not isinstance(size, int) or size <= 0:
        return None
    return Quantization(dtype, size, 2.0 + bits / 8, f"quantization_config {method}: {dtype} weights in groups of "
                                                     f"{size}, an fp16 scale and a {bits}-bit zero point per group")


LISTS = ("ignore", "modules_to_not_convert", "exclude_modules", "ignored_layers")
_CLASSES = (("attention", re.compile(r"self_attn|linear_attn|(^|[.*])attn([.*]|$)")),
            ("shared_experts", re.compile(r"shared_expert")),
            # A layer's MLP by its projections, or the whole `mlp` module (Gemma 4's, beside its experts).
            ("dense_mlp", re.compile(r"mlp\\?\.\(?(gate_up|gate|up|down)(_proj|\|)|\.mlp\*$")))
# A decoder layer left whole (not a multi-token-prediction layer's: mtp.layers.N).
_WHOLE_LAYER = re.compile(r"(^|\.)model\.layers\.(\d+)(\*|\.\*)$")
# Names of parts every engine keeps in 16 bits anyway, or too small to matter: they say nothing of their module.
_SMALL_PARTS = re.compile(r"norm|bias|indexer")


def _kept(q: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The module classes (layers.KEPT_MODULES) and whole layers a scheme's lists leave unquantised."""
    names = [str(name) for key in LISTS if isinstance(q.get(key), list) for name in q[key]
             if not _SMALL_PARTS.search(str(name))]
    kept = tuple(cls for cls, pattern in _CLASSES
                 if any(pattern.search(name) and (cls != "dense_mlp" or "expert" not in name) for name in names))
    layers = tuple(sorted({int(match.group(2)) for name in names if (match := _WHOLE_LAYER.search(name))}))
    return kept, layers


def checkpoint_quantization(config: Mapping[str, Any], prefix: str = "model") -> Quantization | None:
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return None
    scheme = _with_expert_dtype(_scheme(q), config)
    if scheme is None or scheme.experts_only:
        return scheme
    kept, layers = _kept(q)
    if not (kept or layers):
        return scheme
    return replace(scheme, kept=kept, kept_layers=layers,
                   source=scheme.source + (f"; left in 16 bits by its lists: {', '.join(kept)}" if kept else ""))


def _with_expert_dtype(scheme: Quantization | None, config: Mapping[str, Any]) -> Quantization | None:
    """DeepSeek-V4's checkpoints state `expert_dtype: fp4` beside their fp8 scheme: the routed experts are MXFP4
    (fp4 with an 8-bit power-of-two scale per 32, the ue8m0 scale format), the rest as the scheme says."""
    if scheme is None or config.get("expert_dtype") != "fp4" or scheme.weights == "fp4":
        return scheme
    return replace(scheme, experts="fp4", experts_group_size=32, experts_scale_bytes=1.0,
                   source=scheme.source + "; routed experts fp4 with an 8-bit scale per 32 (expert_dtype)")


def with_dense_layers(quantization: Quantization, dense_layers: int) -> Quantization:
    """A checkpoint whose lists keep every one of the model's first `dense_layers` layers whole (the dense layers
    of DeepSeek's and GLM's layouts) keeps its dense MLPs, and their attention, in 16 bits."""
    if not dense_layers or not set(range(dense_layers)) <= set(quantization.kept_layers) \
            or "dense_mlp" in quantization.kept:
        return quantization
    return replace(quantization, kept=(*quantization.kept, "dense_mlp"),
                   source=quantization.source + f"; its {dense_layers} dense layers left whole in 16 bits")


def _scheme(q: Mapping[str, Any]) -> Quantization | None:
    method = q.get("quant_method")
    if method == "fp8":
        return _fp8(q)
    if method == "mxfp4":
        return _mxfp4(q)
    if method == "modelopt" and str(q.get("quant_algo", "")).upper() == "NVFP4":
        return _nvfp4("quantization_config modelopt")
    if method == "modelopt" and str(q.get("quant_algo", "")).upper() == "FP8":
        return Quantization("fp8", None, 4.0, "quantization_config modelopt FP8: fp8 weights and activations, a "
                                              "scale per tensor", activations="fp8")
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method in ("awq", "gptq"):
        return _int_groups(q, method)
    return None


def checkpoint_dtypes(quantization: Quantization) -> ModelDTypes:
    """The dtypes a checkpoint runs in by itself: its weights (or only its experts') as stored, activations in
    bf16 unless the scheme quantises them too."""
    activations = quantization.activations or "bf16"
    if quantization.experts_only:
        return ModelDTypes(weights=activations, activations=activations, experts=quantization.weights,
                           experts_group_size=quantization.group_size, experts_scale_bytes=quantization.scale_bytes)
    return ModelDTypes(weights=quantization.weights, activations=activations, weight_group_size=quantization.group_size,
                       weight_scale_bytes=quantization.scale_bytes, kept=frozenset(quantization.kept),
                       experts=quantization.experts, experts_group_size=quantization.experts_group_size,
                       experts_scale_bytes=quantization.experts_scale_bytes)
