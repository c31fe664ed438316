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
    _mark: tuple[int, float] | None = None  # (thread, its CPU time) at the last check

    def check(self) -> None:
        if self.client_gone:
            raise BudgetSpent("the client went away before the answer was ready")
        if time.monotonic() > self.deadline:
            raise BudgetSpent(f"the request ran past its deadline of {self.seconds:g} s")
        if self.cpu_limit_s is None:
            return
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
