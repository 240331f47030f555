"""Gates over a report: minimum pass rate, per-grader minimum, maximum mean cost and latency.

A gate that would pass on no evidence is **vacuous**, and a vacuous gate fails: a report
with no cases; a pass rate over cases every grader skipped; a per-grader minimum for a
grader that skipped every case (or never ran); a cost ceiling when no case's cost is known;
a latency ceiling when no case's latency was measured.
A CI job that checks its gates therefore cannot go green because the set failed to load or
a field was misnamed. ``check_gates`` with no gates is vacuous too. Browser-safe: standard
library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from evermind.errors import ConfigError
from evermind.evaluation.report import Rate, Report

__all__ = [
    "Gate",
    "GateResult",
    "GraderMinimum",
    "MaxMeanCost",
    "MaxMeanLatency",
    "MaxP95Latency",
    "MinPassRate",
    "Verdict",
    "check_gates",
]


@dataclass(frozen=True)
class Verdict:
    """One gate on one report: passed, vacuous (no evidence, so failed) and why."""

    gate: str
    passed: bool
    vacuous: bool
    detail: str


class Gate(Protocol):
    """A condition a report must meet."""

    name: str

    def check(self, report: Report) -> Verdict:
        """The verdict on ``report``."""
        ...


def _minimum(value: float, where: str) -> float:
    if not isinstance(value, int | float) or not 0.0 < value <= 1.0:
        raise ConfigError(
            f"{where}: minimum must be in (0, 1], got {value!r} (0 admits every report)"
        )
    return float(value)


def _rate_verdict(name: str, rate: Rate, minimum: float, what: str) -> Verdict:
    if rate.value is None:
        why = f"{what}: nothing was graded ({rate.skipped} skipped)"
        return Verdict(name, False, True, why + "; a gate over no evidence fails")
    ok = rate.value >= minimum
    detail = (
        f"{what}: {rate.value:.3f} ({rate.passed}/{rate.graded}) {'≥' if ok else '<'} {minimum:.3f}"
    )
    return Verdict(name, ok, False, detail)


class MinPassRate:
    """The cases' pass rate (only those tagged ``tag`` when given) is at least ``minimum``."""

    def __init__(self, minimum: float, *, tag: str | None = None) -> None:
        self.minimum = _minimum(minimum, "MinPassRate")
        self.tag = tag
        self.name = f"pass rate{f' [{tag}]' if tag else ''} ≥ {self.minimum:g}"

    def check(self, report: Report) -> Verdict:
        if not report.results:
            return Verdict(self.name, False, True, "the report has no cases")
        what = "cases" if self.tag is None else f"cases tagged {self.tag!r}"
        return _rate_verdict(self.name, report.overall(self.tag), self.minimum, what)


class GraderMinimum:
    """One grader's pass rate is at least ``minimum``."""

    def __init__(self, grader: str, minimum: float) -> None:
        self.grader = grader
        self.minimum = _minimum(minimum, "GraderMinimum")
        self.name = f"{grader} ≥ {self.minimum:g}"

    def check(self, report: Report) -> Verdict:
        if not report.results:
            return Verdict(self.name, False, True, "the report has no cases")
        if self.grader not in report.graders:
            known = ", ".join(report.graders) or "none"
            return Verdict(
                self.name, False, True, f"no grader named {self.grader!r} ran (ran: {known})"
            )
        return _rate_verdict(
            self.name, report.grader(self.grader), self.minimum, f"grader {self.grader}"
        )


class MaxMeanCost:
    """The mean cost per case (system and graders) is at most ``maximum`` dollars."""

    def __init__(self, maximum: float) -> None:
        if not isinstance(maximum, int | float) or not math.isfinite(maximum) or maximum < 0:
            raise ConfigError(f"MaxMeanCost: maximum must be a finite number ≥ 0, got {maximum!r}")
        self.maximum = float(maximum)
        self.name = f"mean cost ≤ ${self.maximum:g}"

    def check(self, report: Report) -> Verdict:
        if not report.results:
            return Verdict(self.name, False, True, "the report has no cases")
        mean = report.mean_cost()
        if mean is None:
            return Verdict(self.name, False, True, "no case reported its cost")
        ok = mean <= self.maximum
        return Verdict(
            self.name, ok, False, f"mean ${mean:.6f} {'≤' if ok else '>'} ${self.maximum:g}"
        )


def _maximum_ms(value: float, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(
            f"{where}: maximum must be a finite number of milliseconds > 0, got {value!r}"
        )
    return float(value)


def _latency_verdict(
    name: str, report: Report, measured: float | None, what: str, maximum: float
) -> Verdict:
    if not report.results:
        return Verdict(name, False, True, "the report has no cases")
    if measured is None:
        return Verdict(name, False, True, "no case's latency was measured")
    ok = measured <= maximum
    count = len(report.latencies_ms())
    detail = f"{what} {measured:.1f} ms over {count} cases {'≤' if ok else '>'} {maximum:g} ms"
    return Verdict(name, ok, False, detail)


class MaxP95Latency:
    """The 95th-percentile (nearest-rank) latency per case is at most ``maximum`` ms."""

    def __init__(self, maximum: float) -> None:
        self.maximum = _maximum_ms(maximum, "MaxP95Latency")
        self.name = f"p95 latency ≤ {self.maximum:g} ms"

    def check(self, report: Report) -> Verdict:
        return _latency_verdict(self.name, report, report.latency_ms(95), "p95", self.maximum)


class MaxMeanLatency:
    """The mean latency per case is at most ``maximum`` milliseconds."""

    def __init__(self, maximum: float) -> None:
        self.maximum = _maximum_ms(maximum, "MaxMeanLatency")
        self.name = f"mean latency ≤ {self.maximum:g} ms"

    def check(self, report: Report) -> Verdict:
        return _latency_verdict(self.name, report, report.mean_latency_ms(), "mean", self.maximum)


@dataclass(frozen=True)
class GateResult:
    """Every gate's verdict; ``passed`` only when there was at least one and all passed."""

    verdicts: tuple[Verdict, ...]

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and all(v.passed for v in self.verdicts)

    def render(self) -> str:
        if not self.verdicts:
            return "gates: none were given (vacuous: FAIL)"
        marks = []
        for v in self.verdicts:
            mark = ("PASS" if v.passed else "FAIL") + (" (vacuous)" if v.vacuous else "")
            marks.append(f"  {mark}  {v.gate}: {v.detail}")
        return "\n".join([f"gates: {'PASS' if self.passed else 'FAIL'}", *marks])


def check_gates(report: Report, gates: Sequence[Gate]) -> GateResult:
    """Every gate's verdict on ``report`` (no gates: not passed)."""
    return GateResult(tuple(gate.check(report) for gate in gates))
