"""Transformer models: architectures from configs, parameter counts, per-layer operator rows, KV capacity."""
