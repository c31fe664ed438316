"""What a run measured on: the device, its software and the settings that change its timings."""

from __future__ import annotations

import os
import platform
from typing import Any

# The dtypes whose matmuls a backend runs natively; fp8 needs scaled matmuls this collector does not time yet.
DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16"), "xpu": ("fp32", "bf16", "fp16"),
          "mps": ("fp32", "fp16")}
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def backend_of(device: str) -> str:
    return device.split(":", 1)[0]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_name(torch: Any, device: str) -> str:
    backend = backend_of(device)
    if backend == "cuda":
        return str(torch.cuda.get_device_name(torch.device(device)))
    if backend == "xpu":
        return str(torch.xpu.get_device_name(torch.device(device)))
    if backend == "mps":
        return f"Apple GPU ({platform.machine()})"
    return cpu_name()


def memory_capacity_bytes(torch: Any, device: str) -> int:
    backend = backend_of(device)
    if backend == "cuda":
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    if backend == "xpu":
        return int(torch.xpu.get_device_properties(torch.device(device)).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def environment(torch: Any, device: str) -> dict[str, Any]:
    """The run's environment, recorded beside its numbers."""
    backend = backend_of(device)
    found: dict[str, Any] = {
        "device": device, "device_name": device_name(torch, device), "torch": torch.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "memory_capacity_bytes": memory_capacity_bytes(torch, device),
    }
    if backend == "cpu":
        found["threads"] = torch.get_num_threads()
    if backend == "cuda":
        found["cuda"] = torch.version.cuda or None
        found["hip"] = getattr(torch.version, "hip", None)
        found["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
    return found
