"""Parameters of the vision towers multimodal checkpoints ship beside their decoder (and of the projector into the
decoder's width). They are weights in memory and in `params.total`; a text step does not run them. Each count
is the sum of the tower's own modules, as transformers builds them (tests/core/transformer/test_families.py
checks each against a meta-device build). A key a vision_config leaves out takes its config class's default in
transformers 5.25.0 (SiglipVisionConfig, PixtralVisionConfig, Llama4VisionConfig), as transformers builds it."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from service.core.transformer.config_reader import ConfigReader


def _refusing_invalid(count: Callable[..., int]) -> Callable[..., int]:
    """A tower's count, refused (a ConfigError naming each key) where a key it read was invalid: the reader reads
    such a key as 0, which must never reach a count."""

    @wraps(count)
    def checked(vision: ConfigReader, *args: Any) -> int:
        total = count(vision, *args)
        vision.fail_if_missing()
        return total

    return checked


def _size(vision: ConfigReader, key: str, theirs: str, default: int) -> int:
    """A size under transformers' name, else the model's own (`theirs`), else transformers' default."""
    return vision.int(vision.named(key, theirs), default)


def _layer_norm(width: int) -> int:
    return 2 * width  # a scale and a shift


def _linear(n: int, k: int, bias: bool) -> int:
    return n * k + (n if bias else 0)


@_refusing_invalid
def siglip(vision: ConfigReader, text_hidden: int) -> int:
    """Gemma 3's SigLIP tower: a biased patch convolution and learned positions, pre-norm layers with biased
    attention and a GELU MLP, a final layer norm, an optional attention-pooling head; then Gemma 3's projector
    (a [vision, text] matrix after an RMS norm of the vision width)."""
    h, i = vision.int("hidden_size", 768), vision.int("intermediate_size", 3072)
    patch, image, channels = vision.int("patch_size", 16), vision.int("image_size", 224), vision.int("num_channels", 3)
    layer = 2 * _layer_norm(h) + 4 * _linear(h, h, True) + _linear(i, h, True) + _linear(h, i, True)
    tower = (channels * patch * patch * h + h + (image // patch) ** 2 * h + vision.int("num_hidden_layers", 12) * layer
             + _layer_norm(h))
    if vision.flag("vision_use_head", True):  # probe, a biased multi-head attention, a norm and an MLP
        tower += h + 3 * h * h + 3 * h + _linear(h, h, True) + _layer_norm(h) + _linear(i, h, True) + _linear(h, i, True)
    return tower + h * text_hidden + h


@_refusing_invalid
def pixtral(vision: ConfigReader, text_hidden: int, merge: int, projector_bias: bool) -> int:
    """Mistral 3's Pixtral tower: an unbiased patch convolution, RMS-normed layers with unbiased attention and a
    gated MLP; then the projector: an RMS norm, a patch merger of merge x merge patches, two linear layers."""
    h, i = vision.int("hidden_size", 1024), vision.int("intermediate_size", 4096)
    patch, channels = vision.int("patch_size", 16), vision.int("num_channels", 3)
    layer = 2 * h + 4 * h * h + 3 * h * i
    tower = channels * patch * patch * h + h + vision.int("num_hidden_layers", 24) * layer
    projector = h + h * merge * merge * h + _linear(text_hidden, h, projector_bias) + _linear(text_hidden, text_hidden,
                                                                                           projector_bias)
    return tower + projector


@_refusing_invalid
def llama4_vision(vision: ConfigReader, text_hidden: int) -> int:
    """Llama 4's tower: a class token, learned positions and an unbiased patch projection, layer-normed layers with
    biased attention and a GELU MLP, the pixel-shuffle adapter's two unbiased linear layers; then the projector
    into the decoder's width."""
    h, i = vision.int("hidden_size", 768), vision.int("intermediate_size", 5632)
    patch, image, channels = vision.int("patch_size", 14), vision.int("image_size", 448), vision.int("num_channels", 3)
    projector_in, projector_out = vision.int("projector_input_dim", 4096), vision.int("projector_output_dim", 4096)
    layer = 2 * _layer_norm(h) + 4 * _linear(h, h, True) + _linear(i, h, True) + _linear(h, i, True)
    tower = (h + ((image // patch) ** 2 + 1) * h + channels * patch * patch * h + 2 * _layer_norm(h)
             + vision.int("num_hidden_layers", 34) * layer + i * projector_in + projector_out * projector_out)
    return tower + vision.int("vision_output_dim", 7680) * text_hidden


@_refusing_invalid
def qwen3_vl(vision: ConfigReader) -> int:
    """Qwen3-VL's tower (and Qwen3.5's): a biased 3-D patch convolution over temporal_patch_size frames, learned
    positions, layer-normed blocks with a biased fused QKV, a biased output projection and a biased GELU MLP; then
    the patch merger into the decoder's width (out_hidden_size: a layer norm, merge x merge patches through two
    biased linear layers), and one more merger, normed after the merge, for each deepstack layer it feeds."""
    h, i = vision.int("hidden_size", 1152), vision.int("intermediate_size", 4304)
    patch, frames = vision.int("patch_size", 16), vision.int("temporal_patch_size", 2)
    merged = h * vision.int("spatial_merge_size", 2) ** 2
    out = vision.int("out_hidden_size", 3584)
    layer = 2 * _layer_norm(h) + _linear(3 * h, h, True) + _linear(h, h, True) + _linear(i, h, True) + _linear(h, i, True)
    tower = (vision.int("in_channels", 3) * frames * patch * patch * h + h
             + vision.int("num_position_embeddings", 2304) * h + vision.int("depth", 27) * layer)
    deepstack = vision.config.get("deepstack_visual_indexes", (8, 16, 24))
    mergers = _linear(merged, merged, True) + _linear(out, merged, True)
    return (tower + _layer_norm(h) + mergers
            + (len(deepstack) if isinstance(deepstack, (list, tuple)) else 0) * (_layer_norm(merged) + mergers))


@_refusing_invalid
def moonvit(vision: ConfigReader, text_hidden: int, projection_norm: int) -> int:
    """Kimi K2.5's MoonViT tower: a biased patch convolution, a learned pos_emb_height x pos_emb_width position grid,
    layer-normed blocks with biased q, k, v and output projections and a biased GELU MLP, a final layer norm; then
    the projector: a layer norm over `projection_norm`, the merge_kernel_size patches through two biased linear
    layers into the decoder's width. Moonshot's own checkpoints name the sizes vt_* and init_pos_emb_*; transformers'
    names are read first."""

    h = _size(vision, "hidden_size", "vt_hidden_size", 1152)
    i = _size(vision, "intermediate_size", "vt_intermediate_size", 4304)
    patch = vision.int("patch_size", 14)
    grid = (_size(vision, "pos_emb_height", "init_pos_emb_height", 64)
            * _size(vision, "pos_emb_width", "init_pos_emb_width", 64))
    merge = vision.config.get("merge_kernel_size", (2, 2))
    merged = h * (merge[0] * merge[1] if isinstance(merge, (list, tuple)) and len(merge) == 2
                  and all(isinstance(k, int) and k > 0 for k in merge) else 4)
    layer = 2 * _layer_norm(h) + 4 * _linear(h, h, True) + _linear(i, h, True) + _linear(h, i, True)
    tower = 3 * patch * patch * h + h + grid * h + _size(vision, "num_hidden_layers", "vt_num_hidden_layers", 27) * layer
    projector = _layer_norm(projection_norm) + _linear(merged, merged, True) + _linear(text_hidden, merged, True)
    return tower + _layer_norm(h) + projector


@_refusing_invalid
def gemma4(vision: ConfigReader, text_hidden: int) -> int:
    """Gemma 4's tower (transformers 5.25.0's Gemma4VisionModel): an unbiased patch projection and a two-axis table of
    learned positions; layers with unbiased attention (q/k norms a head wide, an unscaled v norm), a gated MLP and
    four RMS norms (their linears clipped by four stored bounds each where use_clipped_linears); a stored
    standardisation bias and scale; then the embedder into the decoder: an unscaled norm and a [vision, text] matrix."""
    h, i = vision.int("hidden_size", 768), vision.int("intermediate_size", 3072)
    heads = vision.int("num_attention_heads", 12)
    d = vision.int("head_dim", 64)
    kv = vision.int("num_key_value_heads", heads)
    patch = vision.int("patch_size", 16)
    clipped = 4 * 7 if vision.flag("use_clipped_linears", False) else 0  # q, k, v, o, gate, up, down
    layer = (h * heads * d + 2 * h * kv * d + heads * d * h + 2 * d + 4 * h + 3 * h * i + clipped)
    tower = 3 * patch * patch * h + 2 * vision.int("position_embedding_size", 10240) * h
    tower += vision.int("num_hidden_layers", 16) * layer + (2 * h if vision.flag("standardize", False) else 0)
    return tower + h * text_hidden


@_refusing_invalid
def step3p7(vision: ConfigReader, text_hidden: int, projector_bias: bool) -> int:
    """Step-3.7's tower (transformers 5.25.0's Step3p7VisionModel): an unbiased patch convolution, learned positions
    for (image_size / patch_size)^2 patches and a layer norm; layer-normed layers with biased q, k, v and output
    projections, a biased MLP int(hidden x mlp_ratio) wide (intermediate_size is derived so, never read) and two
    stored layer scales; two biased 3 x 3 convolutions doubling the width twice; then a [4 x vision, text] projector.
    StepFun's own configs name the sizes width and layers; transformers' names are read first."""

    h = _size(vision, "hidden_size", "width", 1536)
    ratio = vision.config.get("mlp_ratio", 8960 / 1536)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 64:
        vision.missing.append("mlp_ratio (must be a number above 0, at most 64)")
        ratio = 1
    i = int(h * ratio)
    patch, image, channels = vision.int("patch_size", 14), vision.int("image_size", 728), vision.int("num_channels", 3)
    layer = 2 * _layer_norm(h) + 2 * h + 4 * _linear(h, h, True) + _linear(i, h, True) + _linear(h, i, True)
    tower = (channels * patch * patch * h + (image // patch) ** 2 * h + _layer_norm(h)
             + _size(vision, "num_hidden_layers", "layers", 47) * layer
             + _linear(2 * h, h * 9, True) + _linear(4 * h, 2 * h * 9, True))
    return tower + _linear(text_hidden, 4 * h, projector_bias)
