"""The roofs of the device a run measures, as the service's measured-roof benchmarks: its main memory's bandwidth
(a copy over arrays past the caches: bytes read plus written over the median time, at the largest array timed) and
each dtype's matmul rate (2 m n k FLOPs over the median time: the best of a square product and the grid's)."""

from __future__ import annotations

from typing import Any

from service.measure.environment import TORCH_DTYPES
from service.measure.timing import median_time

TOOL = "roofline measure"
# The unit the service places matmuls on. A measured rate is what the device's matmuls reached on whatever units it
# has (a CPU's vector units, fp32 without TF32 on a GPU), so it is the matmul roof the service should use.
MATMUL_UNIT = "tensor"


def copy_bandwidth(torch: Any, device: str, size_bytes: int) -> float:
    """Bytes/s of a copy of `size_bytes` into another array as large: each byte read once and written once."""
    elements = size_bytes // 4
    source = torch.ones(elements, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    seconds = median_time(torch, device, lambda: target.copy_(source))
    return 2 * elements * 4 / seconds


def matmul_rate(torch: Any, device: str, dtype: str, size: int) -> float:
    """FLOP/s of one size x size x size product in `dtype`."""
    kind = getattr(torch, TORCH_DTYPES[dtype])
    a = torch.randn(size, size, device=device).to(kind)
    b = torch.randn(size, size, device=device).to(kind)
    seconds = median_time(torch, device, lambda: a @ b)
    return 2 * size**3 / seconds


def bandwidth_benchmark(rates: dict[int, float], host: str) -> dict[str, Any]:
    largest = max(rates)
    by_size = ", ".join(f"{size >> 20} MiB: {rate / 1e9:.3g} GB/s" for size, rate in sorted(rates.items()))
    return {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": rates[largest], "tool": TOOL, "host": host,
            "notes": f"copy (read + write) at the largest array, {largest >> 20} MiB; by size: {by_size}. 'hbm' is the "
                     "service's name for a device's main memory"}


def compute_benchmark(dtype: str, rate: float, size: int, host: str) -> dict[str, Any]:
    return {"kind": "compute", "dtype": dtype, "unit": MATMUL_UNIT, "flops_per_s": rate, "tool": TOOL,
            "host": host, "notes": f"the best rate of its matmuls: a {size} x {size} x {size} one and the grid's, "
                                   "each the median of repeats"}
