"""How long the request being answered may still compute, and whether its client is still there.

The HTTP layer gives every request a deadline and notices when its client goes; the long loops of the core and
the translation (a serving plan's search, a sweep's points, a batch's items, a comparison's devices) call
`check()` between steps and stop with `BudgetSpent` instead of computing an answer nobody will read. Outside a
request (the CLI, tests) nothing is set and `check()` costs a lookup.
"""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass

# time.thread_time is a system call (0.5-3 us on this project's machines, against 45 ns for time.monotonic): a
# serving plan's search checks about 1,250 times, and reading the CPU clock at each cost 8 % of the plan. The CPU
# clock is read at most once a millisecond of wall time instead; what runs between readings is still charged, at
# the next one, so a limit is noticed at most a millisecond late.
CPU_READ_INTERVAL_S = 1e-3


class BudgetSpent(Exception):
    """The request's deadline passed, or its client went away, before the work was done."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Budget:
    """A request's deadline and, where `cpu_limit_s` is set, its CPU: each check adds the CPU its thread spent since
    the thread's previous check (time.thread_time), so the work between checks is what is charged, wherever in the
    loops it ran (a serving plan's split scan as much as its step analyses), and waiting for the interpreter is not."""

    deadline: float  # time.monotonic() by which the work must be done
    seconds: float
    client_gone: bool = False  # set by the HTTP layer when the client disconnects
    cpu_limit_s: float | None = None
    cpu_s: float = 0.0  # measured so far
    _mark: tuple[int, float] | None = None  # (thread, its CPU time) at the last reading of the CPU clock
    _next_reading: float = 0.0  # time.monotonic() from which the CPU clock is read again

    def check(self) -> None:
        if self.client_gone:
            raise BudgetSpent("the client went away before the answer was ready")
        wall = time.monotonic()
        if wall > self.deadline:
            raise BudgetSpent(f"the request ran past its deadline of {self.seconds:g} s")
        if self.cpu_limit_s is None or wall < self._next_reading:
            return
        self._next_reading = wall + CPU_READ_INTERVAL_S
        thread, now = threading.get_ident(), time.thread_time()
        if self._mark is not None and self._mark[0] == thread:
            self.cpu_s += now - self._mark[1]
        self._mark = (thread, now)
        if self.cpu_s > self.cpu_limit_s:
            raise BudgetSpent(f"the request used its {self.cpu_limit_s:g} s of CPU (ROOFLINE_REQUEST_CPU_S)")


CURRENT_BUDGET: ContextVar[Budget | None] = ContextVar("request_budget", default=None)


def check() -> None:
    spent = CURRENT_BUDGET.get()
    if spent is not None:
        spent.check()
