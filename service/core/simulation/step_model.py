"""The time of one engine step of any mix of decodes and prefill chunks, read from a deployment's rows once so that
the simulation's thousands of steps cost a few arithmetic operations each.

- decode of b sequences at total context K: D(b) + g x (K - b x k0), D tabulated over b at the reference context k0
  (the mean context of the workload) and interpolated, g the cost of one more cached token of one sequence;
- prefill of chunks c_i of requests that have p_i tokens cached already: L(sum c_i) + sum A(c_i) + h x sum c_i p_i,
  L the prompt's work but its attention (tabulated over tokens: the weights' read and the token-wise rows, which the
  step's chunks share), A the work among a chunk's own tokens (its attention, a sparse indexer's scoring: tabulated
  over tokens, per chunk, as a request attends to its own tokens only; A(n) / n interpolated, so the n and n^2 parts
  are read back exactly), h one new token's attention to one cached token;
- a mixed step (decodes and chunks together, vLLM and TensorRT-LLM) reads its weights once, not twice: the sum of
  the two less the smallest of them and the weights' read.

These are the bound's own rows (or any evaluator's), so a step the simulation takes alone is the bound of that step;
the interpolations are exact where the rows are affine (decode batches without expert rounding, prefills in tokens)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def _grid(largest: int, first: int = 1, factor: int = 2) -> list[int]:
    """first, first x factor, ... and `largest` itself."""
    points, value = [], first
    while value < largest:
        points.append(value)
        value *= factor
    return [*points, largest]


@dataclass(frozen=True)
class StepModel:
    decode_batches: tuple[int, ...]
    decode_times: tuple[float, ...]  # D(b) at reference_context
    reference_context: int
    per_context_token_s: float  # g
    prefill_tokens: tuple[int, ...]
    prefill_times: tuple[float, ...]  # L(n)
    per_attended_token_s: float  # h
    weights_s: float  # one read of a device's weights
    # A(n) / n at prefill_tokens; empty: no attention within a chunk (a hand-made model's choice)
    self_attention_per_token: tuple[float, ...] = ()
    # Table reads already made, by batch or tokens: a run asks for the same few sizes thousands of times.
    _read: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def decode_s(self, batch: int, total_context: float) -> float:
        if batch <= 0:
            return 0.0
        key = ("decode", batch)
        base = self._read.get(key)
        if base is None:
            base = self._read[key] = _interpolated(batch, self.decode_batches, self.decode_times)
        return max(0.0, base + self.per_context_token_s * (total_context - batch * self.reference_context))

    def prefill_s(self, chunks: Sequence[tuple[int, int]]) -> float:
        """`chunks`: (new tokens, tokens cached before them) of each request prefilled in the step."""
        if not chunks:
            return 0.0
        # One pass (the simulation asks once a prefill step, tens of thousands of times a plan).
        read = self._read
        tokens = attended = 0
        own = 0.0
        for c, p in chunks:
            tokens += c
            attended += c * p
            per_token = read.get(c)
            if per_token is None:
                per_token = read[c] = (_extrapolated(c, self.prefill_tokens, self.self_attention_per_token)
                                       if self.self_attention_per_token else 0.0)
            own += c * per_token
        linear = read.get(("prefill", tokens))
        if linear is None:
            linear = read[("prefill", tokens)] = _extrapolated(tokens, self.prefill_tokens, self.prefill_times)
        return linear + own + self.per_attended_token_s * attended

    def mixed_s(self, decode_s: float, prefill_s: float) -> float:
        if decode_s == 0 or prefill_s == 0:
            return decode_s + prefill_s
        return decode_s + prefill_s - min(self.weights_s, decode_s, prefill_s)


def _interpolated(x: float, xs: Sequence[int], ys: Sequence[float]) -> float:
    """Linear interpolation within the table, its end values beyond it (numpy's interp, without its per-call cost:
    the simulation asks thousands of times)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])


def _extrapolated(x: float, xs: Sequence[int], ys: Sequence[float]) -> float:
    """Linear interpolation, continued by the last segment's slope beyond the table."""
    if x <= xs[-1] or len(xs) < 2:
        return _interpolated(x, xs, ys)
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return ys[-1] + slope * (x - xs[-1])


def build_step_model(*, decode_curve: Callable[[Sequence[int], int], Sequence[float]],
                     prefill: Callable[[int, int], tuple[float, float]], largest_batch: int, reference_context: int,
                     largest_prefill: int) -> StepModel:
    """`decode_curve(batches, context)`: the decode steps (verification and draft, where speculative) at each batch
    per group over that cached context; `prefill(new, cached)`: one request's prefill of `new` tokens after `cached`
    ones, as (its time, the time of its rows among the request's own tokens: attention). About a dozen evaluations."""
    batches = _grid(max(1, largest_batch))
    times = list(decode_curve(batches, reference_context))
    farther = reference_context + max(256, reference_context)
    (one_far,) = decode_curve([1], farther)
    per_context = max(0.0, (one_far - times[0]) / (farther - reference_context))
    # The weights' read: a lone sequence's step less its cache.
    weights = max(0.0, times[0] - per_context * reference_context)

    tokens = _grid(max(64, largest_prefill), first=64, factor=4)
    whole = [prefill(n, 0) for n in tokens]
    # A chunk of ~1,024 new tokens after a long prompt: attention as a prefill runs it (compute-bound; a few tokens
    # after many would read the cache like a decode and overstate it).
    probe = min(1024, max(64, largest_prefill // 2))
    # The probe alone is a point of the table already wherever the prompts reach 2,048 tokens.
    alone = dict(zip(tokens, whole, strict=True)).get(probe) or prefill(probe, 0)
    attended = max(0.0, (prefill(probe, largest_prefill)[0] - alone[0]) / (probe * largest_prefill))
    # Split by the rows themselves: the attention of n tokens among themselves grows as n^2 and is each request's own,
    # the rest grows as n and is shared by a step's requests. (One quadratic fitted through whole prompts instead
    # costs a step of several prompts as one long one: at DeepSeek-V3's 32,768 tokens it left nothing to the rest.)
    linear = [time - attention for time, attention in whole]
    own = [attention / n for n, (_, attention) in zip(tokens, whole, strict=True)]
    return StepModel(tuple(batches), tuple(times), reference_context, per_context, tuple(tokens), tuple(linear),
                     attended, weights, tuple(own))
