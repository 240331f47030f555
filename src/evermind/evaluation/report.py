"""The evaluation report: every case's grades, pass rates overall, per grader and per tag, cost.

A case **passes** when it raised no error, at least one grader graded it and none failed;
it **fails** when it raised or any grader failed; it is **skipped** when every grader
skipped. Rates count graded cases only (``passed / (passed + failed)``) and are None when
there are none: a rate over nothing is unknown, not 100 %. A case's cost is the system's
cost plus its graders' (an LLM judge's calls); the mean is over the cases whose system cost
is known. A case's latency is its system call's wall time in milliseconds (measured by
:func:`~evermind.evaluation.harness.run_eval`); percentiles are nearest-rank over the cases
whose latency is known, None when none is. ``to_dict()`` is JSON-ready; ``render()`` is the
text table.
Browser-safe: standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evermind.errors import ConfigError
from evermind.evaluation.cases import Case, Grade, Outcome, Status

__all__ = ["CaseResult", "Rate", "Report", "percentile"]


@dataclass(frozen=True)
class CaseResult:
    """One case, what the system produced, its grades and how long the system took.

    Attributes:
        latency_ms: Wall time of the system's call, in milliseconds (None: not measured).
    """

    case: Case
    outcome: Outcome
    grades: tuple[Grade, ...]
    latency_ms: float | None = None

    @property
    def status(self) -> Status:
        if self.outcome.error is not None or any(g.status == "fail" for g in self.grades):
            return "fail"
        return "pass" if any(g.status == "pass" for g in self.grades) else "skip"

    @property
    def cost_usd(self) -> float | None:
        """The system's cost plus the graders' (None when the system's is not known)."""
        if self.outcome.cost_usd is None:
            return None
        return self.outcome.cost_usd + sum(g.cost_usd for g in self.grades)


@dataclass(frozen=True)
class Rate:
    """Counts behind a pass rate."""

    passed: int
    failed: int
    skipped: int

    @property
    def graded(self) -> int:
        return self.passed + self.failed

    @property
    def value(self) -> float | None:
        """``passed / graded``; None when nothing was graded."""
        return self.passed / self.graded if self.graded else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "rate": self.value,
        }


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (``q`` in (0, 100]) of non-empty ``values``: the
    smallest value that at least ``q`` % of them do not exceed (p95 of 20 values is the
    19th smallest), always one of the values, never interpolated."""
    if not values or not 0.0 < q <= 100.0:
        raise ConfigError(f"percentile: expected values and q in (0, 100], got {len(values)}, {q}")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100.0 * len(ordered))) - 1]


def _rate(statuses: Iterable[Status]) -> Rate:
    seen = list(statuses)
    return Rate(seen.count("pass"), seen.count("fail"), seen.count("skip"))


@dataclass(frozen=True)
class Report:
    """The results of one run.

    Attributes:
        name: What was evaluated.
        results: One per case, in the set's order.
        graders: The graders' names, in the order they ran.
    """

    name: str
    results: tuple[CaseResult, ...]
    graders: tuple[str, ...]

    def overall(self, tag: str | None = None) -> Rate:
        """The cases' rate (only those tagged ``tag`` when given)."""
        return _rate(r.status for r in self.results if tag is None or tag in r.case.tags)

    def grader(self, name: str) -> Rate:
        """One grader's rate over the cases (a case that raised counts as a failure of it)."""
        statuses: list[Status] = []
        for result in self.results:
            grade = next((g for g in result.grades if g.grader == name), None)
            if result.outcome.error is not None:
                statuses.append("fail")
            elif grade is not None:
                statuses.append(grade.status)
        return _rate(statuses)

    def select(self, graders: Sequence[str]) -> Report:
        """The same cases graded by ``graders`` only (a case passes when those pass).

        A pass rate over several graders together (an answer that is not a refusal, cites
        validly and cites the right source) is then ``select(...).overall(tag)``, which a
        :class:`~evermind.evaluation.gates.MinPassRate` gates.

        Raises:
            ConfigError: A name that is not one of this report's graders.
        """
        unknown = [name for name in graders if name not in self.graders]
        if unknown or not graders:
            raise ConfigError(
                f"Report.select: expected some of {list(self.graders)}, got {list(graders)}"
            )
        wanted = set(graders)
        results = tuple(
            CaseResult(
                r.case, r.outcome, tuple(g for g in r.grades if g.grader in wanted), r.latency_ms
            )
            for r in self.results
        )
        kept = tuple(name for name in self.graders if name in wanted)
        return Report(f"{self.name} [{', '.join(kept)}]", results, kept)

    def tags(self) -> list[str]:
        """Every tag the cases carry, sorted."""
        return sorted({t for r in self.results for t in r.case.tags})

    def mean_cost(self) -> float | None:
        """Mean cost per case over the cases whose cost is known (None: none is)."""
        known = [c for c in (r.cost_usd for r in self.results) if c is not None]
        return sum(known) / len(known) if known else None

    def latencies_ms(self) -> list[float]:
        """The latencies that are known, in the set's order."""
        return [r.latency_ms for r in self.results if r.latency_ms is not None]

    def latency_ms(self, q: float) -> float | None:
        """The nearest-rank ``q`` percentile of the known latencies (None: none is known)."""
        known = self.latencies_ms()
        return percentile(known, q) if known else None

    def mean_latency_ms(self) -> float | None:
        """The mean of the known latencies (None: none is known)."""
        known = self.latencies_ms()
        return sum(known) / len(known) if known else None

    def errors(self) -> list[tuple[str, str]]:
        """``(case id, error)`` of the cases whose system raised."""
        return [(r.case.id, r.outcome.error) for r in self.results if r.outcome.error is not None]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (summary and every case)."""
        return {
            "name": self.name,
            "cases": len(self.results),
            "overall": self.overall().to_dict(),
            "graders": {name: self.grader(name).to_dict() for name in self.graders},
            "tags": {tag: self.overall(tag).to_dict() for tag in self.tags()},
            "mean_cost_usd": self.mean_cost(),
            "latency_ms": {
                "p50": self.latency_ms(50),
                "p95": self.latency_ms(95),
                "mean": self.mean_latency_ms(),
                "measured": len(self.latencies_ms()),
            },
            "errors": [{"case": c, "error": e} for c, e in self.errors()],
            "results": [
                {
                    "case": r.case.id,
                    "status": r.status,
                    "cost_usd": r.cost_usd,
                    "latency_ms": r.latency_ms,
                    "grades": [
                        {
                            "grader": g.grader,
                            "status": g.status,
                            "score": g.score,
                            "detail": g.detail,
                        }
                        for g in r.grades
                    ],
                }
                for r in self.results
            ],
        }

    def render(self, failures: int = 10) -> str:
        """A text summary: the rates, then up to ``failures`` failed cases with why."""

        def line(label: str, rate: Rate) -> str:
            shown = "n/a" if rate.value is None else f"{rate.value:6.1%}"
            counts = f"{rate.passed} pass, {rate.failed} fail, {rate.skipped} skip"
            return f"  {label:<28} {shown:>7}  ({counts})"

        cost = self.mean_cost()
        lines = [f"{self.name}: {len(self.results)} cases", line("all", self.overall())]
        lines += [line(f"tag {tag}", self.overall(tag)) for tag in self.tags()]
        lines += [line(f"grader {name}", self.grader(name)) for name in self.graders]
        lines.append(f"  mean cost per case          {'n/a' if cost is None else f'${cost:.6f}'}")
        p50, p95 = self.latency_ms(50), self.latency_ms(95)
        if p50 is None or p95 is None:
            lines.append("  latency p50 / p95           n/a")
        else:
            lines.append(f"  latency p50 / p95           {p50:.1f} ms / {p95:.1f} ms")
        failed = [r for r in self.results if r.status == "fail"]
        if failed:
            lines.append(f"failed cases ({len(failed)}, first {min(failures, len(failed))}):")
        for result in failed[:failures]:
            why = result.outcome.error or "; ".join(
                f"{g.grader}: {g.detail}" for g in result.grades if g.status == "fail"
            )
            lines.append(f"  {result.case.id}: {why}")
        return "\n".join(lines)
