"""The run: a system over a set of cases, every grader on every outcome, into a report.

``system(case) -> Outcome`` is any coroutine function. An exception it raises becomes the
outcome's ``error`` (the case fails; the report lists it) so one bad case does not hide the
rest of the set; graders do not run on an errored case. ``concurrency`` cases run at once.
Browser-safe: standard library only.
"""

from __future__ import annotations

import asyncio
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
) -> Report:
    """Runs ``system`` on every case and every grader on every outcome.

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
            try:
                outcome = await system(case)
            except Exception as err:  # the case fails and the report names why
                return CaseResult(case, Outcome(error=f"{type(err).__name__}: {err}"), ())
            grades: list[Grade] = [await g.grade(case, outcome) for g in graders]
            return CaseResult(case, outcome, tuple(grades))

    results = await asyncio.gather(*(one(case) for case in cases))
    return Report(name, tuple(results), tuple(names))
