"""How long the request being answered may still compute, and whether its client is still there.

The HTTP layer gives every request a deadline and notices when its client goes; the long loops of the core and
the translation (a serving plan's search, a sweep's points, a batch's items, a comparison's devices) call
`check()` between steps and stop with `BudgetSpent` instead of computing an answer nobody will read. Outside a
request (the CLI, tests) nothing is set and `check()` costs a lookup.
"""

from __future__ import annotations

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
    deadline: float  # time.monotonic() by which the work must be done
    seconds: float
    client_gone: bool = False  # set by the HTTP layer when the client disconnects

    def check(self) -> None:
        if self.client_gone:
            raise BudgetSpent("the client went away before the answer was ready")
        if time.monotonic() > self.deadline:
            raise BudgetSpent(f"the request ran past its deadline of {self.seconds:g} s")


CURRENT_BUDGET: ContextVar[Budget | None] = ContextVar("request_budget", default=None)


def check() -> None:
    spent = CURRENT_BUDGET.get()
    if spent is not None:
        spent.check()
