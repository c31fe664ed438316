"""What a serving benchmark sends: how long each prompt and each output is, and when each request arrives.

Lengths are drawn as the benchmark clients draw them: InferenceX's and vLLM's `random` dataset take a length
uniformly from [range_ratio x L, L] (`--random-range-ratio`), and `--ignore-eos` makes the output exactly the length
asked. Draws are seeded, so one request gets one answer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.core.errors import CostModelError


@dataclass(frozen=True)
class Lengths:
    """Fixed (`range_ratio` 1), uniform over [range_ratio x length, length], or a histogram of (length, weight)."""

    length: int
    range_ratio: float = 1.0
    histogram: tuple[tuple[int, float], ...] = ()

    def __post_init__(self):
        if self.length < 1:
            raise CostModelError("length", "must be at least 1")
        if not 0 < self.range_ratio <= 1:
            raise CostModelError("range_ratio", "must be in (0, 1]")
        if self.histogram and (any(n < 1 or w < 0 for n, w in self.histogram) or sum(w for _, w in self.histogram) <= 0):
            raise CostModelError("histogram", "lengths must be at least 1 and weights not negative, some positive")

    @property
    def longest(self) -> int:
        return max(n for n, _ in self.histogram) if self.histogram else self.length

    @property
    def mean(self) -> float:
        if self.histogram:
            # In Python's order, not BLAS's (whose last bits follow the CPU): the same mean on every machine.
            return sum(n * w for n, w in self.histogram) / sum(w for _, w in self.histogram)
        return (self.shortest + self.length) / 2

    @property
    def shortest(self) -> int:
        if self.histogram:
            return min(n for n, _ in self.histogram)
        return max(1, int(self.length * self.range_ratio))

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.histogram:
            lengths = np.array([n for n, _ in self.histogram])
            weights = np.array([w for _, w in self.histogram], dtype=float)
            return rng.choice(lengths, size=count, p=weights / weights.sum())
        if self.range_ratio == 1:
            return np.full(count, self.length)
        return rng.integers(self.shortest, self.length + 1, size=count)


@dataclass(frozen=True)
class ClosedLoop:
    """A benchmark client holding `concurrency` requests in flight (`--max-concurrency`, `--request-rate inf`):
    the timed run starts with that many at once and sends the next as each one finishes, `prompts` in all. Its
    warm-up requests finish before the timed run starts, so the engine starts it idle."""

    concurrency: int
    prompts: int


@dataclass(frozen=True)
class OpenLoop:
    """Requests at `rate` a second: Poisson arrivals (`burstiness` 1) or gamma-distributed gaps of that mean and
    shape `burstiness` (vLLM's `--burstiness`: below 1 burstier), `prompts` in all."""

    rate: float
    prompts: int
    burstiness: float = 1.0

    def arrivals(self, rng: np.random.Generator) -> np.ndarray:
        gaps = rng.gamma(self.burstiness, 1 / (self.rate * self.burstiness), size=self.prompts)
        gaps[0] = 0.0
        return np.cumsum(gaps)


Arrivals = ClosedLoop | OpenLoop


@dataclass(frozen=True)
class Traffic:
    """Requests as a benchmark sends them: their lengths and their arrivals; `seed` fixes the draws."""

    input: Lengths
    output: Lengths
    arrivals: Arrivals
    seed: int = 0

    @property
    def prompts(self) -> int:
        return self.arrivals.prompts


def benchmark_client(input_len: int, output_len: int, concurrency: int, range_ratio: float = 1.0,
                     prompts_per_concurrency: int = 10) -> Traffic:
    """InferenceX's client (benchmarks/benchmark_lib.sh): `--num-prompts 10 x C --max-concurrency C
    --request-rate inf --ignore-eos --random-range-ratio R`."""
    return Traffic(Lengths(input_len, range_ratio), Lengths(output_len, range_ratio),
                   ClosedLoop(concurrency, prompts_per_concurrency * concurrency))
