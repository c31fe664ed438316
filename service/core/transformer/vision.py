"""Parameters of the vision towers multimodal checkpoints ship beside their decoder (and of the projector into the
decoder's width). They are weights in memory and in `params.total`; a text step does not run them. Each count
is the sum of the tower's own modules, as transformers builds them (tests/core/transformer/test_families.py
checks each against a meta-device build)."""

from __future__ import annotations

from service.core.transformer.config_reader import ConfigReader


def _layer_norm(width: int) -> int:
    return 2 * width  # a scale and a shift


def _linear(n: int, k: int, bias: bool) -> int:
    return n * k + (n if bias else 0)


def siglip(vision: ConfigReader, text_hidden: int) -> int:
    """Gemma 3's SigLIP tower: a biased patch convolution and learned positions, pre-norm layers with biased
    attention and a GELU MLP, a final layer norm, an optional attention-pooling head; then Gemma 3's projector
    (a [vision, text] matrix after an RMS norm of the vision width)."""
    h, i = vision.int("hidden_size", 1152), vision.int("intermediate_size", 4304)
    patch, image, channels = vision.int("patch_size", 14), vision.int("image_size", 224), vision.int("num_channels", 3)
    layer = 2 * _layer_norm(h) + 4 * _linear(h, h, True) + _linear(i, h, True) + _linear(h, i, True)
    tower = (channels * patch * patch * h + h + (image // patch) ** 2 * h + vision.int("num_hidden_layers", 27) * layer
             + _layer_norm(h))
    if vision.flag("vision_use_head", True):  # probe, a biased multi-head attention, a norm and an MLP
        tower += h + 3 * h * h + 3 * h + _linear(h, h, True) + _layer_norm(h) + _linear(i, h, True) + _linear(h, i, True)
    return tower + h * text_hidden + h


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


def llama4_vision(vision: ConfigReader, text_hidden: int) -> int:
    """Llama 4's tower: a class token, learned positions and an unbiased patch projection, layer-normed layers with
    biased attention and a GELU MLP, the pixel-shuffle adapter's two unbiased linear layers; then the projector
    into the decoder's width."""
    h, i = vision.int("hidden_size", 1408), vision.int("intermediate_size", 5632)
    patch, image, channels = vision.int("patch_size", 14), vision.int("image_size", 336), vision.int("num_channels", 3)
    projector_in, projector_out = vision.int("projector_input_dim", 4096), vision.int("projector_output_dim", 4096)
    layer = 2 * _layer_norm(h) + 4 * _linear(h, h, True) + _linear(i, h, True) + _linear(h, i, True)
    tower = (h + ((image // patch) ** 2 + 1) * h + channels * patch * patch * h + 2 * _layer_norm(h)
             + vision.int("num_hidden_layers", 34) * layer + i * projector_in + projector_out * projector_out)
    return tower + vision.int("vision_output_dim", 4096) * text_hidden
