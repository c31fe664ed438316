"""One kernel's time as engines run it: warm-up calls first, then each call timed alone and synchronised on the
device, the median of the repeats kept (a single slow call, a page fault or a clock change, does not move it)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def synchronize(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()
    elif device.startswith("xpu"):
        torch.xpu.synchronize()


def median_time(torch: Any, device: str, run: Callable[[], object], *, warmup: int = 2, repeats: int = 5,
                ceiling_s: float = 2.0) -> float:
    """Seconds of one `run()`: the median of `repeats` timed calls after `warmup` untimed ones, stopping early once
    the timed calls alone pass `ceiling_s` (a large shape on a slow device still costs a bounded time)."""
    for _ in range(warmup):
        run()
    synchronize(torch, device)
    times: list[float] = []
    spent = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        synchronize(torch, device)
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
        if spent > ceiling_s:
            break
    return statistics.median(times)
