"""A request's CPU budget: charged for the work between its checks, with the CPU clock read at most once a
millisecond of wall time (a serving plan checks about 1,250 times; a system call at each cost 8 % of it)."""

import time

import pytest

from service.core import budget
from service.core.budget import Budget, BudgetSpent


def busy(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_checks_in_quick_succession_read_the_cpu_clock_once_a_millisecond(monkeypatch):
    readings = []
    real = time.thread_time
    monkeypatch.setattr(budget.time, "thread_time", lambda: readings.append(1) or real())
    spent = Budget(time.monotonic() + 60, 60, cpu_limit_s=60)
    started = time.monotonic()
    for _ in range(2_000):
        spent.check()
    elapsed = time.monotonic() - started
    # One reading at the first check, then at most one per millisecond that passed (plus the one that opens it).
    assert 1 <= len(readings) <= 2 + elapsed / budget.CPU_READ_INTERVAL_S
    assert len(readings) < 2_000


def test_work_between_readings_is_still_charged():
    spent = Budget(time.monotonic() + 60, 60, cpu_limit_s=60)
    spent.check()
    for _ in range(20):
        busy(0.002)  # each stretch longer than the interval: every check reads the clock
        spent.check()
    # 40 ms of CPU spent between the first check and the last, all of it charged (the loop's own checks add little).
    assert 0.040 <= spent.cpu_s < 0.060


def test_a_limit_is_noticed_at_the_first_reading_past_it():
    spent = Budget(time.monotonic() + 60, 60, cpu_limit_s=0.01)
    spent.check()
    busy(0.012)
    with pytest.raises(BudgetSpent, match="0.01 s of CPU"):
        spent.check()
