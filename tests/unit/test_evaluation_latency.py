"""Latency in the evaluation harness: measured per case, summarised, gated.

Two kinds of system: one that really sleeps known amounts (its measured latency can only be
at least the sleep, so only lower bounds are asserted: a busy machine makes calls slower,
never faster), and one whose latencies are set exactly through ``run_eval``'s injectable
clock (percentiles, the gates' thresholds and the rendering are asserted to the millisecond).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from evermind.errors import ConfigError
from evermind.evaluation import (
    Case,
    CaseResult,
    Exact,
    MaxMeanCost,
    MaxMeanLatency,
    MaxP95Latency,
    Outcome,
    Report,
    check_gates,
    run_eval,
)
from evermind.evaluation.report import percentile

SLEEPS_S = {"a": 0.01, "b": 0.03, "c": 0.05}


def test_a_sleeping_system_is_measured_at_least_as_long_as_it_sleeps() -> None:
    async def sleepy(case: Case) -> Outcome:
        await asyncio.sleep(SLEEPS_S[case.id])
        return Outcome({"answer": case.id})

    cases = [Case(i, i, {"answer": i}) for i in SLEEPS_S]
    report = asyncio.run(run_eval("sleepy", cases, sleepy, [Exact()], concurrency=3))
    for result in report.results:
        assert result.latency_ms is not None
        assert result.latency_ms >= SLEEPS_S[result.case.id] * 1000 * 0.99, result
    p95 = report.latency_ms(95)
    assert p95 is not None and p95 >= 50 * 0.99  # nearest rank: the slowest of three
    p50 = report.latency_ms(50)
    assert p50 is not None and p50 >= 30 * 0.99  # the middle one slept 30 ms at least


class FakeClock:
    """A monotonic clock the system under test advances by exactly what it is told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _timed_run(latencies_ms: dict[str, float], *, raising: str = "") -> Report:
    clock = FakeClock()

    async def timed(case: Case) -> Outcome:
        clock.now += latencies_ms[case.id] / 1000.0
        if case.id == raising:
            raise TimeoutError("upstream took too long")
        return Outcome({"answer": "yes"}, cost_usd=0.001)

    cases = [Case(name, name, {"answer": "yes"}) for name in latencies_ms]
    return asyncio.run(run_eval("timed", cases, timed, [Exact()], clock=clock))


# 20 cases: 1..19 ms and one 1000 ms outlier. Nearest-rank p95 = the 19th smallest = 19 ms;
# p50 = the 10th smallest = 10 ms; the mean is (190 + 1000) / 20 = 59.5 ms.
TWENTY = {f"c{n:02d}": float(n) for n in range(1, 20)} | {"slow": 1000.0}


def test_latency_percentiles_and_mean_from_an_injected_clock() -> None:
    report = _timed_run(TWENTY)
    assert [r.latency_ms for r in report.results] == pytest.approx(list(TWENTY.values()))
    assert report.latency_ms(50) == pytest.approx(10.0)
    assert report.latency_ms(95) == pytest.approx(19.0)
    assert report.latency_ms(100) == pytest.approx(1000.0)
    assert report.mean_latency_ms() == pytest.approx(59.5)
    data = report.to_dict()
    json.dumps(data)
    assert data["latency_ms"]["p50"] == pytest.approx(10.0)
    assert data["latency_ms"]["p95"] == pytest.approx(19.0)
    assert data["latency_ms"]["measured"] == 20
    assert data["results"][-1]["latency_ms"] == pytest.approx(1000.0)
    assert "latency p50 / p95           10.0 ms / 19.0 ms" in report.render()
    # select keeps the latencies (a gate on a selected report sees them)
    assert report.select(["exact:answer"]).latency_ms(95) == pytest.approx(19.0)


def test_latency_gates_pass_and_fail_on_the_threshold() -> None:
    report = _timed_run(TWENTY)
    verdicts = check_gates(
        report,
        [MaxP95Latency(19.5), MaxP95Latency(18.5), MaxMeanLatency(60), MaxMeanLatency(59)],
    ).verdicts
    assert [v.passed for v in verdicts] == [True, False, True, False]
    assert not any(v.vacuous for v in verdicts)
    assert verdicts[1].gate == "p95 latency ≤ 18.5 ms"
    assert verdicts[1].detail == "p95 19.0 ms over 20 cases > 18.5 ms"
    assert verdicts[3].detail == "mean 59.5 ms over 20 cases > 59 ms"


def test_a_case_that_raises_keeps_the_time_it_took() -> None:
    report = _timed_run({"a": 5.0, "b": 700.0}, raising="b")
    assert report.errors() == [("b", "TimeoutError: upstream took too long")]
    assert report.results[1].latency_ms == pytest.approx(700.0)
    assert not check_gates(report, [MaxP95Latency(500)]).passed


def test_latency_gates_are_vacuous_without_measurements() -> None:
    unmeasured = Report(
        "built by hand", (CaseResult(Case("a", "q"), Outcome({"answer": "x"}), ()),), ()
    )
    empty = Report("nothing", (), ())
    for report, why in ((unmeasured, "latency was measured"), (empty, "no cases")):
        assert report.latency_ms(95) is None and report.mean_latency_ms() is None
        result = check_gates(report, [MaxP95Latency(1000), MaxMeanLatency(1000)])
        assert not result.passed
        assert all(v.vacuous and not v.passed and why in v.detail for v in result.verdicts)
    assert "latency p50 / p95           n/a" in unmeasured.render()
    assert unmeasured.to_dict()["latency_ms"] == {
        "p50": None,
        "p95": None,
        "mean": None,
        "measured": 0,
    }
    # the cost gate is unaffected by latency: still vacuous with no cost
    assert check_gates(unmeasured, [MaxMeanCost(1.0)]).verdicts[0].vacuous


def test_latency_gate_settings_are_checked() -> None:
    for bad in (0, -1, float("inf"), float("nan"), True, "1500"):
        with pytest.raises(ConfigError, match="milliseconds"):
            MaxP95Latency(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="milliseconds"):
            MaxMeanLatency(bad)  # type: ignore[arg-type]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3.0], 95) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 75) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 76) == 4.0
    with pytest.raises(ConfigError):
        percentile([], 50)
    with pytest.raises(ConfigError):
        percentile([1.0], 0)
