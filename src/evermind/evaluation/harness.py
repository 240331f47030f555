"""The run: a system over a set of cases, every grader on every outcome, into a report.

``system(case) -> Outcome`` is any coroutine function. An exception it raises becomes the
outcome's ``error`` (the case fails; the report lists it) so one bad case does not hide the
rest of the set; graders do not run on an errored case. ``concurrency`` cases run at once.
Each case's **latency** is the wall time of its ``system(case)`` call on a monotonic clock
(``clock``, injectable so tests control it), measured once the case holds its concurrency
slot (waiting for a slot is not the system's latency) and before grading (a judge's time is
not the system's either); a case that raised keeps the time it took to raise.
Browser-safe: standard library only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from evermind.errors import ConfigError
from evermind.evaluation.cases import Case, Grade, Outcome
from evermind.evaluation.graders import Grader
from evermind.evaluation.report import CaseResult, Report

__all__ = ["System", "run_eval"]

#: The system under test: a case in, an outcome out.
System = Callable[[Case], Awaitable[Outcome]]


async def run_eval(
    name: str,
    cases: Sequence[Case],
    system: System,
    graders: Sequence[Grader],
    *,
    concurrency: int = 1,
    clock: Callable[[], float] = time.monotonic,
) -> Report:
    """Runs ``system`` on every case and every grader on every outcome.

    Args:
        name: What is evaluated (the report's title).
        cases: The labelled set.
        system: The system under test.
        graders: Every grader, each run on every outcome (names unique).
        concurrency: How many cases run at once.
        clock: Seconds on a monotonic clock; each case's latency is the difference across
            its ``system`` call, in milliseconds.

    Raises:
        ConfigError: Two graders share a name, or ``concurrency`` < 1.
    """
    names = [g.name for g in graders]
    if len(set(names)) != len(names):
        raise ConfigError(f"run_eval: grader names must be unique, got {names}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"run_eval: concurrency must be an int ≥ 1, got {concurrency!r}")
    gate = asyncio.Semaphore(concurrency)

    async def one(case: Case) -> CaseResult:
        async with gate:
            start = clock()
            try:
                outcome = await system(case)
            except Exception as err:  # the case fails and the report names why
                latency_ms = (clock() - start) * 1000.0
                failed = Outcome(error=f"{type(err).__name__}: {err}")
                return CaseResult(case, failed, (), latency_ms)
            latency_ms = (clock() - start) * 1000.0
            grades: list[Grade] = [await g.grade(case, outcome) for g in graders]
            return CaseResult(case, outcome, tuple(grades), latency_ms)

    results = await asyncio.gather(*(one(case) for case in cases))
    return Report(name, tuple(results), tuple(names))
