"""What `--model` names: a catalog id, a config.json, a checkpoint folder, or a Hugging Face repo id found in the
local Hugging Face cache. Nothing is downloaded: a repo id the cache does not hold is an error that says so. A
folder's (or cached repo's) hf_quant_config.json, ModelOpt's quantisation record, travels with its config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODEL_HELP = ("a catalog model id (e.g. llama-3.1-8b, GET /v1/models), a path to a config.json or to a "
              "checkpoint folder holding one, or a Hugging Face repo id (org/name) in the local Hugging Face cache")


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--model {path}: not a readable JSON config ({exc})") from None
    if not isinstance(config, dict):
        raise SystemExit(f"--model {path}: the config is not a JSON object")
    return config


def _cached_config(repo_id: str) -> Path | None:
    """The repo's config.json in the local Hugging Face cache, or None (also for a name that cannot be a repo id:
    a mistyped path such as ./models/x/config.json); never a download."""
    try:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.errors import HFValidationError
    except ImportError:  # pragma: no cover - a dependency of the project
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except HFValidationError:
        return None
    return Path(found) if isinstance(found, str) else None


def with_modelopt_record(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A ModelOpt checkpoint states its quantisation in hf_quant_config.json beside config.json (vLLM and TensorRT-LLM
    read it there): its `quantization` section becomes the config's quantization_config (quant_method modelopt),
    unless the config states one itself."""
    record = folder / "hf_quant_config.json"
    if "quantization_config" in config or not record.is_file():
        return config
    section = _read_config(record).get("quantization")
    if not isinstance(section, dict):
        return config
    return {**config, "quantization_config": {"quant_method": "modelopt", **section}}


def model_choice(name: str) -> dict[str, Any]:
    """The request's model: {"model": config} for a file, folder or cached repo; else {"model_id": name}."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SystemExit(f"--model {name}: the folder holds no config.json")
        return {"model": with_modelopt_record(_read_config(path / "config.json"), path)}
    if path.is_file():
        return {"model": _read_config(path)}
    if "/" in name:
        cached = _cached_config(name)
        if cached is None:
            raise SystemExit(f"--model {name}: no such file or folder, and not a Hugging Face repo id (org/name) in "
                             "the local Hugging Face cache (nothing is downloaded: check the path, or fetch the repo "
                             "with `huggingface-cli download` first)")
        return {"model": with_modelopt_record(_read_config(cached), cached.parent)}
    return {"model_id": name}


ROPE_SCALING_HELP = ("the run's RoPE scaling, TYPE:FACTOR (e.g. linear:2, yarn:4): the model accepts contexts up to its "
                     "max_position_embeddings x FACTOR (the step costs the same)")


def model_of(args) -> dict[str, Any]:
    """The request's model (model_choice) and the run's RoPE scaling where --rope-scaling gives one."""
    choice = model_choice(args.model)
    scaling = getattr(args, "rope_scaling", None)
    if not scaling:
        return choice
    rope_type, _, factor = scaling.partition(":")
    try:
        return {**choice, "rope_scaling": {"rope_type": rope_type, "factor": float(factor)}}
    except ValueError:
        raise SystemExit(f"--rope-scaling {scaling}: give TYPE:FACTOR, e.g. linear:2") from None
