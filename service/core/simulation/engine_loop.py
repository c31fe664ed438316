"""The simulation: one attention group of a deployment serving its share of a benchmark's requests, step by step.

A step is either a prefill of queued requests (in chunks of the scheduler's step tokens), a decode of every
running request, or both at once (mixed batching); its time is `scale` x the step model's time + `step_overhead_s`,
where the calibration sets the two (prefill and decode may carry scales of their own). A request's first token
comes at the end of the step that finishes its prefill (plus `request_overhead_s`: the client's and the HTTP
server's share, and the KV transfer where disaggregated), its others as the decode steps it is part of emit them
(`acceptance` tokens a step with speculative decoding). A request arrives in the engine's inbox and is seen when
the scheduler next looks (every `recv_interval` steps, at once when the engine is idle).

Runs of decode steps with no arrival, no admission and no finish in between are taken at once (the context grows
by the same tokens each step, so their time is a closed form): the simulation costs events, not tokens.

In a closed loop the order of every step is independent of how long the steps take (arrivals follow finishes, the
scheduler counts steps, not seconds), so each request's times are linear in the calibration's numbers: the run
records, per request, the model time and the steps its TTFT and its decode spanned (`Features`), which is what a
fit reads (fit.py)."""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from itertools import chain

import numpy as np

from service.core.simulation.engines import Scheduler
from service.core.simulation.step_model import StepModel
from service.core.simulation.workload import ClosedLoop, OpenLoop, Traffic

# Events a simulation may take, counted before it runs (estimated_events); the translation layer refuses a request
# beyond it, or answers without the simulation.
MAX_EVENTS = 60_000


@dataclass(frozen=True)
class Timing:
    """What a calibration sets: each step's time is decode_scale x its decode model time + prefill_scale x its
    prefill model time + step_overhead_s; a request's TTFT and end carry request_overhead_s more."""

    decode_scale: float = 1.0
    prefill_scale: float = 1.0
    step_overhead_s: float = 0.0
    request_overhead_s: float = 0.0


@dataclass(frozen=True)
class Disaggregation:
    """Prefill on a pool of its own: `servers` prefill groups serve this decode group's requests (its share of the
    prefill pool; `speed` above 1 where that share is not whole), each request's KV cache then crosses the link
    (`transfer_s` a request, latency included, at the workload's mean prompt; scaled by its prompt)."""

    steps: StepModel
    servers: int
    speed: float
    transfer_s: float
    mean_input: float


@dataclass(frozen=True)
class Simulation:
    traffic: Traffic
    scheduler: Scheduler
    steps: StepModel
    running_cap: int  # the requests a group's KV cache holds at the longest context (the deployment's batch)
    groups: int = 1  # attention groups sharing the traffic evenly
    acceptance: float = 1.0  # tokens a decode step emits per sequence
    disaggregation: Disaggregation | None = None


@dataclass(frozen=True)
class Features:
    """Per request of one run, the model times (seconds at scale 1) and steps its TTFT and its decode spanned: a
    closed loop's times are these times the calibration's numbers (module docstring)."""

    ttft_decode_s: np.ndarray
    ttft_prefill_s: np.ndarray
    ttft_steps: np.ndarray
    ttft_fixed_s: np.ndarray  # what no calibration scales: the KV transfer
    decode_decode_s: np.ndarray
    decode_prefill_s: np.ndarray
    decode_steps: np.ndarray
    output_len: np.ndarray

    def ttft(self, timing: Timing) -> np.ndarray:
        return (timing.decode_scale * self.ttft_decode_s + timing.prefill_scale * self.ttft_prefill_s
                + timing.step_overhead_s * self.ttft_steps + self.ttft_fixed_s + timing.request_overhead_s)

    def decode(self, timing: Timing) -> np.ndarray:
        return (timing.decode_scale * self.decode_decode_s + timing.prefill_scale * self.decode_prefill_s
                + timing.step_overhead_s * self.decode_steps)

    def tpot(self, timing: Timing) -> np.ndarray:
        return self.decode(timing) / np.maximum(self.output_len - 1, 1)


@dataclass(frozen=True)
class Run:
    """One simulated benchmark: per-request arrays (TTFT, TPOT, end-to-end, seconds) and the run's totals."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    duration_s: float  # first arrival to last finish, one group
    groups: float  # groups' worth of this group's traffic the deployment serves
    events: int
    busy_prefill_s: float
    busy_decode_s: float
    steps_full: int  # events at which seen requests waited for a place in a full running batch
    features: Features


class _Stretch:
    """Decode steps run as a batch of `padded` sequences from total context `context` (the real sequences'), which
    grows by `growth` a step: the first step's time read once, as a stretch's length is searched for."""

    __slots__ = ("base", "per_token_growth", "scale", "overhead")

    def __init__(self, model: StepModel, timing: Timing, padded: int, context: float, growth: float):
        self.base = model.decode_s(padded, context)
        self.per_token_growth = model.per_context_token_s * growth
        self.scale, self.overhead = timing.decode_scale, timing.step_overhead_s

    def times(self, steps: int) -> tuple[float, float]:
        """(model time, wall time) of the stretch's first `steps` steps."""
        model_time = steps * self.base + self.per_token_growth * steps * (steps - 1) / 2
        return model_time, self.scale * model_time + self.overhead * steps


def estimated_events(simulation: Simulation) -> int:
    """An upper estimate of the loop's events, before it runs: each request arrives, is seen, finishes and is
    prefilled in as many chunks as its prompt needs (mixed steps leave a chunk the budget the decodes do not take)."""
    scheduler, traffic = simulation.scheduler, simulation.traffic
    per_group = _per_group(traffic, simulation.groups)[1]
    chunk = scheduler.step_tokens
    if scheduler.batching == "mixed":
        chunk = max(64, chunk - min(scheduler.max_running, simulation.running_cap))
    chunks = 1 if not scheduler.chunked else math.ceil(traffic.input.longest / chunk)
    return per_group * (4 + chunks)


def _per_group(traffic: Traffic, groups: int) -> tuple[float, int, float]:
    """(the concurrency or rate of one group, its prompts, groups' worth of it the deployment serves)."""
    arrivals = traffic.arrivals
    if isinstance(arrivals, ClosedLoop):
        share = max(1, round(arrivals.concurrency / groups))
        prompts = max(1, round(arrivals.prompts * share / arrivals.concurrency))
        return share, prompts, arrivals.concurrency / share
    prompts = max(1, math.ceil(arrivals.prompts / groups))
    return arrivals.rate / groups, prompts, float(groups)


class _Engine:
    """The mutable state of one run; `run()` drives it."""

    def __init__(self, simulation: Simulation, timing: Timing):
        self.sim, self.timing, self.scheduler, self.model = simulation, timing, simulation.scheduler, simulation.steps
        traffic = simulation.traffic
        self.load, prompts, self.group_share = _per_group(traffic, simulation.groups)
        rng = np.random.default_rng(traffic.seed)
        # Python lists, not arrays: the loop reads them one at a time, thousands of times.
        self.inputs: list[int] = traffic.input.draw(rng, prompts).astype(np.int64).tolist()
        self.outputs: list[int] = traffic.output.draw(rng, prompts).astype(np.int64).tolist()
        self.decode_steps: list[int] = []  # set by run(), from the outputs
        self.prompts = prompts
        # Python lists, not arrays, for the per-request times too: writing a row into an array costs more than
        # storing a reference (a run 4 % faster over 40 InferenceX SGLang runs); simulate() makes them arrays once.
        nan = math.nan
        self.arrival = [nan] * prompts
        self.first = [nan] * prompts
        self.finish = [nan] * prompts
        self.prefilled = [0] * prompts
        # The engine's model time and steps so far (decode, prefill, steps), read at each request's arrival in the
        # inbox, first token and finish: every step delays each request waiting or running alike.
        self.total = [0.0, 0.0, 0.0]
        zero = [0.0, 0.0, 0.0]
        self.at_arrival = [zero] * prompts
        self.ttft_part = [zero] * prompts
        self.decode_from = [zero] * prompts  # where its decode starts: its first token, or its arrival from the prefill pool
        self.at_finish = [zero] * prompts
        self.fixed = [0.0] * prompts  # what no calibration scales: the KV transfer (and the prefill pool's wait)
        self.context = 0.0  # the running requests' cached tokens
        self.cap = max(1, min(self.scheduler.max_running, simulation.running_cap))
        self.time, self.events, self.forward_passes = 0.0, 0, 0
        self.future: list[tuple[float, int]] = []  # (time, request) reaching the engine's inbox
        self.inbox: deque[int] = deque()
        self.queue: deque[int] = deque()  # seen, waiting for (the rest of) their prefill
        # The running batch: a request that joined at decode step j0 (its first token out) has 1 + acceptance x
        # (steps since) tokens, and finishes at the step its output is complete: a heap of those steps.
        self.running: set[int] = set()
        self.finishing: list[tuple[int, int]] = []  # (decode step it finishes at, request)
        self.joined = [0] * prompts
        self.seen_at = [0] * prompts  # the forward pass at which the scheduler saw it
        self.balancing = self.scheduler.balance_wait_steps > 0 and simulation.groups > 1
        self.decoded = 0  # decode steps taken
        self.sent = 0
        self.busy_prefill = self.busy_decode = 0.0
        self.steps_full = 0
        self.prefill_free = [0.0] * (simulation.disaggregation.servers if simulation.disaggregation else 0)
        self.open_times: np.ndarray | None = None
        arrivals = traffic.arrivals
        if isinstance(arrivals, OpenLoop):
            self.open_times = OpenLoop(self.load, prompts, arrivals.burstiness).arrivals(rng)
            for _ in range(prompts):
                self._send(float(self.open_times[self.sent]))
        else:
            for _ in range(min(int(self.load), prompts)):
                self._send(0.0)

    # -- arrivals ------------------------------------------------------------------------------------------------
    def _send(self, at: float) -> None:
        """The client sends its next request at `at`: to the engine's inbox, or first through the prefill pool."""
        request = self.sent
        self.sent += 1
        self.arrival[request] = at
        disaggregation = self.sim.disaggregation
        if disaggregation is None:
            if at <= self.time:
                # Arrived already (a closed loop's next request, sent as one finishes): straight to the inbox, as
                # _arrive_until would put it before anything else happens (the heap holds nothing due before it).
                self.inbox.append(request)
                self.at_arrival[request] = self.total
            else:
                heapq.heappush(self.future, (at, request))
            return
        server = min(range(len(self.prefill_free)), key=self.prefill_free.__getitem__)
        start = max(at, self.prefill_free[server])
        model_time = disaggregation.steps.prefill_s([(self.inputs[request], 0)]) / disaggregation.speed
        took = self.timing.prefill_scale * model_time + self.timing.step_overhead_s
        self.prefill_free[server] = start + took
        transfer = disaggregation.transfer_s * self.inputs[request] / disaggregation.mean_input
        self.first[request] = start + took + transfer
        # Its TTFT as features: the prefill's model time and one step, the wait for a server as time already spent
        # (exact at this timing only: the prefill pool's queue is not a closed loop of the decode's steps).
        self.ttft_part[request] = [0.0, model_time, 1.0]
        self.fixed[request] = transfer + (start - at)
        heapq.heappush(self.future, (self.first[request], request))

    def _arrive_until(self, now: float) -> None:
        while self.future and self.future[0][0] <= now:
            request = heapq.heappop(self.future)[1]
            self.inbox.append(request)
            if self.sim.disaggregation is None:
                self.at_arrival[request] = self.total
            else:  # its TPOT counts from its first token, which it has: the steps from here on are its wait
                self.decode_from[request] = self.total

    # -- accounting ----------------------------------------------------------------------------------------------
    def _charge(self, decode_model: float, prefill_model: float, steps: int, wall: float) -> None:
        """A stretch of steps taken."""
        self.time += wall
        self.events += 1
        total = self.total
        # A new list, never one changed in place: requests keep references to the totals as they were.
        self.total = [total[0] + decode_model, total[1] + prefill_model, total[2] + steps]

    def _finish(self, done: list[int]) -> None:
        now, total, closed = self.time, self.total, self.open_times is None
        for request in done:
            self.finish[request] = now
            self.at_finish[request] = total
            if closed and self.sent < self.prompts:
                self._send(now)

    # -- steps ---------------------------------------------------------------------------------------------------
    def _poll(self) -> None:
        idle = not self.running and not self.queue
        # The scheduler looks every recv_interval forward passes, counted from its start (SGLang's recv skipper), so a
        # request waits for the next multiple; an idle one looks at once.
        if idle or self.forward_passes % self.scheduler.recv_interval == 0:
            # Seen; where disaggregated its prefill is done and it waits for a place only. When it was seen matters
            # to a balancing scheduler only.
            if self.balancing:
                for request in self.inbox:
                    self.seen_at[request] = self.forward_passes
            self.queue.extend(self.inbox)
            self.inbox.clear()

    def _room(self) -> int:
        return self.cap - len(self.running)

    def _chunks(self, budget: int) -> tuple[list[int], list[tuple[int, int]]]:
        """The requests the step prefills, FCFS (the queue's first ones, each but the last prefilled whole), and each
        one's (new tokens, tokens cached before them), within `budget` tokens and the room left."""
        requests: list[int] = []
        chunks: list[tuple[int, int]] = []
        room = self._room()
        balancing, chunked = self.balancing, self.scheduler.chunked
        inputs, prefilled = self.inputs, self.prefilled
        for position, request in enumerate(self.queue):
            if room <= 0 or budget <= 0 or (balancing and self._held(request, position)):
                break
            cached = prefilled[request]
            left = inputs[request] - cached
            take = left if not chunked else min(left, budget)
            if take > budget and chunks:
                break
            requests.append(request)
            chunks.append((take, cached))
            budget -= take
            room -= 1
        return requests, chunks

    def _held(self, request: int, position: int) -> bool:
        """Whether a balancing scheduler holds this request back: the last one queued, no other group's to go with
        it (read as this group's next arrival: the other groups receive as often), within its wait, the engine busy."""
        return (self.balancing and position == len(self.queue) - 1 and bool(self.running)
                and self.forward_passes - self.seen_at[request] < self.scheduler.balance_wait_steps)

    def _admit_disaggregated(self) -> None:
        """Requests prefilled elsewhere join the running batch as room allows."""
        while self.queue and self._room() > 0:
            self._join(self.queue.popleft())

    def _prefill_step(self, requests: list[int], chunks: list[tuple[int, int]], decoding: bool) -> None:
        prefill_model = self.model.prefill_s(chunks)
        batch = len(self.running) if decoding else 0
        decode_model = 0.0
        if batch:
            decode_model = self.model.decode_s(self.scheduler.padded(batch), self.context)
            overlap = self.model.mixed_s(decode_model, prefill_model) - decode_model - prefill_model
            prefill_model += overlap
        timing = self.timing
        wall = timing.decode_scale * decode_model + timing.prefill_scale * prefill_model + timing.step_overhead_s
        self.busy_prefill += timing.prefill_scale * prefill_model
        self.busy_decode += timing.decode_scale * decode_model
        self._charge(decode_model, prefill_model, 1, wall)
        self.forward_passes += 1
        done = self._emit(1) if batch else []
        prefilled, inputs, outputs = self.prefilled, self.inputs, self.outputs
        for request, (take, _) in zip(requests, chunks, strict=True):
            prefilled[request] += take
            if prefilled[request] >= inputs[request]:
                self.queue.popleft()  # it is at the queue's head: the step took its first requests, in order
                self.first[request] = self.time
                total, arrived = self.total, self.at_arrival[request]
                self.ttft_part[request] = [total[0] - arrived[0], total[1] - arrived[1], total[2] - arrived[2]]
                self.decode_from[request] = total
                if outputs[request] <= 1:
                    done.append(request)
                else:
                    self._join(request)
        self._finish(done)

    def _emit(self, steps: int) -> list[int]:
        """`steps` decode steps of the running batch: each request gains steps x acceptance tokens; those done
        leave the batch (returned)."""
        acceptance, running, finishing = self.sim.acceptance, self.running, self.finishing
        context = self.context + steps * acceptance * len(running)
        decoded = self.decoded = self.decoded + steps
        done = []
        while finishing and finishing[0][0] <= decoded:
            request = heapq.heappop(finishing)[1]
            running.discard(request)
            context -= self.inputs[request] + 1 + acceptance * (decoded - self.joined[request])
            done.append(request)
        self.context = context
        return done

    def _join(self, request: int) -> None:
        """A request with its first token joins the running batch."""
        self.running.add(request)
        self.joined[request] = self.decoded
        heapq.heappush(self.finishing, (self.decoded + self.decode_steps[request], request))
        self.context += float(self.inputs[request] + 1)

    def _decode_stretch(self) -> None:
        """Decode steps until a request finishes, or the scheduler looks with something in its inbox or due."""
        acceptance = self.sim.acceptance
        steps = max(1, self.finishing[0][0] - self.decoded)
        interval = self.scheduler.recv_interval
        to_poll = interval - self.forward_passes % interval
        if self.inbox:
            steps = min(steps, to_poll)
        if self.balancing and self.queue:
            held = self.queue[-1]
            steps = min(steps, max(1, self.seen_at[held] + self.scheduler.balance_wait_steps - self.forward_passes))
        batch = len(self.running)
        stretch = _Stretch(self.model, self.timing, self.scheduler.padded(batch), self.context, batch * acceptance)
        model_time, wall = stretch.times(steps)
        if self.future and self.future[0][0] < self.time + wall:
            # An arrival during the stretch: stop at the first poll after it.
            steps = self._steps_until(stretch, self.future[0][0] - self.time, steps, to_poll)
            model_time, wall = stretch.times(steps)
        self.busy_decode += self.timing.decode_scale * model_time
        self._charge(model_time, 0.0, steps, wall)
        self.forward_passes += steps
        self._finish(self._emit(steps))

    def _steps_until(self, stretch: _Stretch, delay: float, most: int, to_poll: int) -> int:
        """The fewest steps (a poll boundary, at most `most`) whose end is at or past `delay` from now."""
        low, high = 1, most
        while low < high:
            middle = (low + high) // 2
            if stretch.times(middle)[1] >= delay:
                high = middle
            else:
                low = middle + 1
        interval = self.scheduler.recv_interval
        boundary = to_poll if low <= to_poll else to_poll + math.ceil((low - to_poll) / interval) * interval
        return min(most, boundary)

    def run(self) -> None:
        # The decode steps each request takes once it has its first token (acceptance tokens a step, at least one).
        self.decode_steps = np.maximum(1, np.ceil((np.array(self.outputs) - 1) / self.sim.acceptance - 1e-9)).astype(
            np.int64).tolist()
        while True:
            # Both calls do nothing without an arrival due or a request in the inbox: checked here, they cost nothing.
            if self.future and self.future[0][0] <= self.time:
                self._arrive_until(self.time)
            if self.inbox:
                self._poll()
            if self.sim.disaggregation is not None:
                self._admit_disaggregated()
                if self.running:
                    self._decode_stretch()
                    continue
            else:
                budget = self.scheduler.step_tokens
                mixed = self.scheduler.batching == "mixed" and self.running
                if mixed:
                    budget -= len(self.running)
                requests, chunks = self._chunks(budget) if self.queue else ([], [])
                if self.queue and self._room() <= 0:
                    self.steps_full += 1
                if chunks:
                    self._prefill_step(requests, chunks, decoding=bool(mixed))
                    continue
                if self.running:
                    self._decode_stretch()
                    continue
            if not self.future and not self.inbox:
                return
            if not self.inbox:  # idle until the next arrival
                self.time = max(self.time, self.future[0][0])
            self.events += 1


def _rows(triples: list[list[float]]) -> np.ndarray:
    """Per-request (decode, prefill, steps) triples as an n x 3 array (np.array inspects each inner list: several
    times slower on a run's thousands)."""
    return np.fromiter(chain.from_iterable(triples), float, count=3 * len(triples)).reshape(-1, 3)


def simulate(simulation: Simulation, timing: Timing = Timing()) -> Run:
    """Run the benchmark through the engine (weigh estimated_events against MAX_EVENTS first where the size comes
    from a request)."""
    engine = _Engine(simulation, timing)
    engine.run()
    decode_part = _rows(engine.at_finish) - _rows(engine.decode_from)
    inputs, outputs = np.array(engine.inputs), np.array(engine.outputs)
    ttft_part = _rows(engine.ttft_part).T
    features = Features(ttft_part[0], ttft_part[1], ttft_part[2], np.array(engine.fixed), decode_part[:, 0],
                        decode_part[:, 1], decode_part[:, 2], outputs.astype(float))
    arrival, first, finish = np.array(engine.arrival), np.array(engine.first), np.array(engine.finish)
    ttft = first - arrival + timing.request_overhead_s
    e2e = finish - arrival + timing.request_overhead_s
    tpot = (finish - first) / np.maximum(outputs - 1, 1)
    return Run(ttft, tpot, e2e, inputs, outputs, float(np.nanmax(finish) - np.nanmin(arrival)),
               engine.group_share, engine.events, engine.busy_prefill, engine.busy_decode, engine.steps_full,
               features)
