"""A deployment search: which tensor-parallel size, replica count and concurrency serve a model best on a
budget of devices, within latency targets, in memory. Analysis, not simulation: every step time comes from
the roofline step model, and decode step times over the concurrency come from one affine sweep.

Aggregated serving (continuous batching), per replica of t devices at concurrency c:
  T_d(c)  decode step of c sequences at the mean context L = input + output / 2
  T_p     prefill of one request's input_len tokens
  In steady state c requests finish every `output` decode steps, and their c successors' prefills take the
  same devices' time:  cycle = output x T_d(c) + c x T_p
  TTFT = T_p (a lower bound: no queueing)     TPOT = cycle / output = T_d(c) + c x T_p / output
  e2e = TTFT + (output - 1) x TPOT            requests/s = c / cycle      tokens/s = c x output / cycle
A MoE model is also searched with its experts split whole over each replica's devices and one attention group
a device (SGLang's expert parallelism with --enable-dp-attention, d = t), the replica's decode step that of
service.core.planning.deployment's worker: at concurrency c each group decodes c // t sequences.
Disaggregated serving splits the replicas into n_p prefill and n_d decode replicas (same t):
  prefill rate n_p / T_p, decode rate n_d x c / (output x T_d(c)); the system serves the smaller;
  TTFT = T_p + the request's KV bytes / interconnect bandwidth (the transfer to a decode replica);
  TPOT = T_d(c).
Memory: a configuration fits when weights/t + c x kv(input + output) + activations + workspace fits the
usable memory of each device (the concurrency's caches at their largest).
With an Expectation (a serving calibration of the device and engine, or an engine's costs over the replica as its
kernel tables compose it), each configuration also carries what it is expected to measure: TTFT and TPOT through
the calibration (of the composed replica's figures, computed as the bound's are, where it has one), the request
rate slowed by the same factor as TPOT (the same requests in flight, each token taking longer); the SLOs, the
replicas a target needs and the ranking then go by the expectation, the bound staying beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from service.core import budget

SLO_FIELDS = ("ttft_s", "tpot_s", "e2e_latency_s")


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_latency_s: float | None = None

    def limits(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in SLO_FIELDS if getattr(self, name) is not None}


@dataclass(frozen=True)
class Workload:
    input_len: int
    output_len: int
    target_requests_per_s: float | None = None
    concurrency: int | None = None  # fixed per replica; None: searched


@dataclass(frozen=True)
class ReplicaModel:
    """What the search needs of one tensor-parallel size on one device, from the step model."""

    tensor_parallel: int
    prefill_s: float  # one request's prefill
    decode_s: Callable[[int], float]  # decode step time at concurrency c, mean context
    max_concurrency: int  # what the KV budget admits at the largest context (0: the weights do not fit)
    memory_at: Callable[[int], dict]  # the memory block at concurrency c
    kv_transfer_s: float | None  # one request's KV over the interconnect; None: no interconnect
    expert_parallel: int = 1  # 1, or tensor_parallel: the experts split whole over the replica's devices
    attention_data_parallel: int = 1  # attention groups per replica, each with its own requests and KV cache
    # The same replica with its steps as the device's kernel tables compose them (what an engine calibration's
    # line multiplies); None: the expectation, if any, reads the bound's steps.
    composed: ReplicaModel | None = None


@dataclass(frozen=True)
class Expectation:
    """What a calibration expects of a configuration: its TTFT and TPOT from (the bound's, the basis's: the composed
    replica's where it has one, else the bound's again), and whether a deployment lies among those it was fitted on
    (its concurrency, mode, expert parallelism and attention groups)."""

    calibration_id: str
    ttft_s: Callable[[float, float], float]
    tpot_s: Callable[[float, float], float]
    covers: Callable[[int, str, int, int], bool]
    basis: str = "runs"  # runs or kernels


# Expected and Config are plain dataclasses, not frozen ones: a plan's search builds one of each per shape and
# concurrency (about 1,250 for DeepSeek-V3 on eight devices), and a frozen dataclass's __init__ sets each field
# through object.__setattr__ (2.2 us for a Config against 0.27 us, 8 % of that plan). Nothing changes one once
# built: search() and the tails make variants with dataclasses.replace.
@dataclass
class Expected:
    ttft_s: float
    tpot_s: float
    e2e_latency_s: float
    requests_per_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    calibration_id: str
    extrapolated: bool
    basis: str = "runs"


@dataclass
class Config:
    mode: str
    device_id: str
    tensor_parallel: int
    replicas: int
    prefill_replicas: int | None
    decode_replicas: int | None
    devices_used: int
    concurrency_per_replica: int
    ttft_s: float
    tpot_s: float
    e2e_latency_s: float
    requests_per_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    memory: Callable[[], dict]  # the memory block, computed only for the configurations answered
    binding_slo: str | None
    cost_per_million_output_tokens: float | None
    expert_parallel: int = 1
    attention_data_parallel: int = 1
    expected: Expected | None = None  # what a calibration expects; then the SLOs and the ranking go by it
    # What stops this shape serving more at once: "slo.<field>" (the next concurrency searched misses it), "memory"
    # (no more requests' caches fit), "search cap (<n>)" (the search's concurrency limit), or "concurrency" (the
    # request fixed it). Set by search() for the configurations that meet the SLOs.
    limited_by: str | None = None

    def value(self, slo_field: str) -> float:
        return getattr(self.expected or self, slo_field)

    @property
    def ranked_tokens_per_s_per_device(self) -> float:
        return (self.expected or self).tokens_per_s_per_device

    @property
    def ranked_tokens_per_s_per_user(self) -> float:
        return (self.expected or self).tokens_per_s_per_user


def rank_key(config: Config) -> tuple[float, int, float]:
    """Best first: tokens/s per device, then fewer devices, then tokens/s per user (expected where calibrated)."""
    return (-config.ranked_tokens_per_s_per_device, config.devices_used, -config.ranked_tokens_per_s_per_user)


@dataclass(frozen=True)
class SearchResult:
    configs: list[Config]  # the best of each shape (mode and layout) fitting and meeting every SLO, best first
    fitting: list[Config]  # every configuration that fits (for the frontier and the refusal)
    searched: int
    # The most requests/s any shape that fits reaches on the whole budget, where none reaches the target: of those
    # that meet the SLOs (what a planner can act on), and of all (0 where none meets them).
    best_rate: float = 0.0
    best_rate_within_slos: float = 0.0
    # The fewest devices that reach the target with a shape meeting the SLOs (whole replicas of it); None: none does.
    devices_for_target: int | None = None


def _binding(config_values: dict[str, float], limits: dict[str, float]) -> str | None:
    """The SLO closest to its limit (largest value / limit)."""
    if not limits:
        return None
    return max(limits, key=lambda name: config_values[name] / limits[name])


def _concurrencies(replica: ReplicaModel, workload: Workload, cap: int) -> list[int]:
    if workload.concurrency is not None:
        return [workload.concurrency] if workload.concurrency <= replica.max_concurrency else []
    # With d attention groups, a concurrency that is not a multiple of d leaves groups a request short at the same
    # step time: never better than the multiple below it, so only multiples are searched.
    step = replica.attention_data_parallel
    return list(range(step, min(replica.max_concurrency, cap) + 1, step))


def search(device_id: str, replicas: Sequence[ReplicaModel], *, workload: Workload, slo: Slo, total_devices: int,
           modes: Sequence[str], max_concurrency: int, price_per_device_hour: float | None,
           expectation: Expectation | None = None) -> SearchResult:
    limits = slo.limits()
    output = workload.output_len
    fitting: list[Config] = []
    searched = 0
    best_rate = best_rate_within_slos = 0.0
    devices_for_target: int | None = None

    def short_of_target(rate: float, ttft: float, tpot: float, groups: int, prefill_groups: int | None,
                        t: int, basis: tuple[float, float]) -> None:
        """Remembers what the whole budget reaches at a shape that cannot reach the target, and the devices that
        shape would need (whole replicas, each pool's rounded up), for the refusal."""
        nonlocal best_rate, best_rate_within_slos, devices_for_target
        best_rate = max(best_rate, rate)
        if expectation is not None:
            ttft, tpot = expectation.ttft_s(ttft, basis[0]), expectation.tpot_s(tpot, basis[1])
        values = {"ttft_s": ttft, "tpot_s": tpot, "e2e_latency_s": ttft + (output - 1) * tpot}
        if not all(values[name] <= limit for name, limit in limits.items()):
            return
        best_rate_within_slos = max(best_rate_within_slos, rate)
        assert workload.target_requests_per_s is not None  # called only where a target is set
        scale = workload.target_requests_per_s / rate
        if groups * scale * t >= 2**53:
            return
        if prefill_groups is None:
            needed = math.ceil(groups * scale - 1e-9)
        else:
            prefill = max(1, math.ceil(prefill_groups * scale - 1e-9))
            needed = prefill + max(1, math.ceil(groups * scale - 1e-9) - prefill)
        devices_for_target = min(needed * t, devices_for_target or needed * t)

    def make(mode, replica, groups, prefill_groups, decode_groups, c, ttft, tpot, rate, memory, basis):
        t = replica.tensor_parallel
        e2e = ttft + (output - 1) * tpot
        # The request rate the SLOs and the target go by: the bound's, or slowed as TPOT is.
        expected_tpot = expectation.tpot_s(tpot, basis[1]) if expectation else tpot
        slowdown = expected_tpot / tpot
        if workload.target_requests_per_s is not None:
            # The fewest replicas (of this shape) that reach the target; None when the budget cannot (then what the
            # whole budget reaches is remembered, for the refusal). `rate` is the whole budget's here.
            scale = workload.target_requests_per_s / (rate / slowdown)
            unscaled_prefill = prefill_groups
            if not groups * scale <= total_devices:  # more replicas than devices (or an overflowing target)
                short_of_target(rate / slowdown, ttft, tpot, groups, unscaled_prefill, t, basis)
                return None
            needed = math.ceil(groups * scale - 1e-9)
            if needed * t > total_devices:
                short_of_target(rate / slowdown, ttft, tpot, groups, unscaled_prefill, t, basis)
                return None
            if prefill_groups is not None:
                prefill_groups = max(1, math.ceil(prefill_groups * scale - 1e-9))
                decode_groups = max(1, needed - prefill_groups)
                needed = prefill_groups + decode_groups
                if needed * t > total_devices:
                    short_of_target(rate / slowdown, ttft, tpot, groups, unscaled_prefill, t, basis)
                    return None
            rate, groups = rate * needed / groups, needed
        devices = groups * t
        tokens = rate * output
        expected = _expected(expectation, ttft, expected_tpot, basis[0], rate / slowdown, output, devices,
                             (c * groups, mode, replica.expert_parallel, replica.attention_data_parallel))
        values = vars(expected) if expected else {"ttft_s": ttft, "tpot_s": tpot, "e2e_latency_s": e2e}
        paid_tokens = expected.tokens_per_s if expected else tokens
        cost = (price_per_device_hour * devices / 3600 / paid_tokens * 1e6) if price_per_device_hour else None
        return Config(mode, device_id, t, groups, prefill_groups, decode_groups, devices, c, ttft, tpot, e2e, rate,
                      tokens, tokens / devices, 1 / tpot, memory, _binding(values, limits), cost,
                      replica.expert_parallel, replica.attention_data_parallel, expected)

    for replica in replicas:
        t = replica.tensor_parallel
        groups = total_devices // t
        if groups < 1:
            continue
        composed = replica.composed or replica
        for c in _concurrencies(replica, workload, max_concurrency):
            budget.check()
            decode = replica.decode_s(c)
            memory = partial(replica.memory_at, c)
            composed_decode = composed.decode_s(c)
            if "aggregated" in modes:
                searched += 1
                cycle = output * decode + c * replica.prefill_s
                composed_cycle = output * composed_decode + c * composed.prefill_s
                config = make("aggregated", replica, groups, None, None, c, replica.prefill_s, cycle / output,
                              groups * c / cycle, memory, (composed.prefill_s, composed_cycle / output))
                if config is not None:
                    fitting.append(config)
            if "disaggregated" in modes and groups >= 2 and replica.kv_transfer_s is not None:
                prefill_rate, decode_rate = 1 / replica.prefill_s, c / (output * decode)
                # The split whose two rates are closest: the system serves the slower pool.
                n_p = min(range(1, groups), key=lambda n: abs(n * prefill_rate - (groups - n) * decode_rate))
                searched += 1
                rate = min(n_p * prefill_rate, (groups - n_p) * decode_rate)
                config = make("disaggregated", replica, groups, n_p, groups - n_p, c, replica.prefill_s + replica.kv_transfer_s,
                              decode, rate, memory, (composed.prefill_s + replica.kv_transfer_s, composed_decode))
                if config is not None:
                    fitting.append(config)
    meeting = [c for c in fitting if all(c.value(name) <= limit for name, limit in limits.items())]
    meeting.sort(key=rank_key)
    # Neighbouring concurrencies of one shape differ by a fraction of a percent: the best of each shape is answered.
    best = list({_shape(c): c for c in reversed(meeting)}.values())[::-1]
    _say_what_limits(best, fitting, replicas, workload, limits, max_concurrency)
    return SearchResult(best, fitting, searched, best_rate, best_rate_within_slos, devices_for_target)


def _shape(config: Config) -> tuple:
    return config.mode, config.tensor_parallel, config.expert_parallel, config.attention_data_parallel


def _say_what_limits(meeting: list[Config], fitting: list[Config], replicas: Sequence[ReplicaModel],
                     workload: Workload, limits: dict[str, float], cap: int) -> None:
    """Each meeting configuration's limited_by, from the next concurrency searched of its shape: the SLO that one
    misses, else (none searched) the memory or the search's cap."""
    by_concurrency = {(*_shape(c), c.concurrency_per_replica): c for c in fitting}
    shapes = {(r.tensor_parallel, r.expert_parallel, r.attention_data_parallel): r for r in replicas}

    def limit_of(config: Config) -> str | None:
        if workload.concurrency is not None:
            return "concurrency"
        following = by_concurrency.get((*_shape(config), config.concurrency_per_replica + config.attention_data_parallel))
        if following is not None:
            missed = [name for name, limit in limits.items() if following.value(name) > limit]
            return f"slo.{missed[0]}" if missed else None
        replica = shapes[(config.tensor_parallel, config.expert_parallel, config.attention_data_parallel)]
        # The replica's max_concurrency is what fits up to the cap: at the cap, one more request tells which.
        at_cap = replica.max_concurrency >= cap and replica.memory_at(cap + replica.attention_data_parallel)["fits"]
        return f"search cap ({cap})" if at_cap else "memory"

    meeting[:] = [replace(config, limited_by=limit_of(config)) for config in meeting]


def _expected(expectation: Expectation | None, bound_ttft: float, expected_tpot: float, ttft_basis: float,
              rate: float, output: int, devices: int, layout: tuple[int, str, int, int]) -> Expected | None:
    """`expected_tpot`: the calibration's, which the caller needs first; `ttft_basis`: what the calibration's TTFT
    line multiplies; `layout`: what Expectation.covers reads."""
    if expectation is None:
        return None
    expected_ttft = expectation.ttft_s(bound_ttft, ttft_basis)
    tokens = rate * output
    return Expected(expected_ttft, expected_tpot, expected_ttft + (output - 1) * expected_tpot, rate, tokens,
                    tokens / devices, 1 / expected_tpot, expectation.calibration_id,
                    not expectation.covers(*layout), expectation.basis)


def pareto(configs: Sequence[Config]) -> list[Config]:
    """Configurations no other beats on both tokens/s per device and tokens/s per user (expected where calibrated),
    by throughput."""
    ordered = sorted(configs, key=lambda c: (-c.ranked_tokens_per_s_per_device, -c.ranked_tokens_per_s_per_user))
    frontier, best_user = [], -math.inf
    for config in ordered:
        if config.ranked_tokens_per_s_per_user > best_user:
            frontier.append(config)
            best_user = config.ranked_tokens_per_s_per_user
    return frontier


def unmet(fitting: Sequence[Config], slo: Slo) -> tuple[str, float, Config] | None:
    """When nothing meets every SLO: the SLO that fails, the best value any fitting configuration reaches for
    it, and that configuration. The first SLO no configuration meets on its own; else the one that, at the
    configuration closest to meeting all of them, misses by the largest factor."""
    limits = slo.limits()
    if not fitting or not limits:
        return None
    for name, limit in limits.items():
        best = min(fitting, key=lambda c: c.value(name))
        if best.value(name) > limit:
            return name, best.value(name), best
    closest = min(fitting, key=lambda c: max(c.value(n) / limits[n] for n in limits))
    name = max(limits, key=lambda n: closest.value(n) / limits[n])
    return name, closest.value(name), closest
