"""The evaluation harness: each grader, the run, the report, each gate, vacuous gates failing.

The LLM judge through a real bridge (a loopback server) is in
tests/runtime/test_evaluation_judge.py; its verdict parsing is here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from evermind.errors import ConfigError, InputError
from evermind.evaluation import (
    Case,
    CitationValidity,
    Contains,
    Exact,
    Grade,
    Grader,
    GraderMinimum,
    MaxMeanCost,
    MinPassRate,
    Outcome,
    RecallAtK,
    Regex,
    Report,
    check_gates,
    load_cases,
    parse_verdict,
    run_eval,
)


def grade(grader: Grader, expected: dict[str, Any], values: dict[str, Any]) -> Grade:
    return asyncio.run(grader.grade(Case("c1", "q?", expected), Outcome(values)))


# --- graders --------------------------------------------------------------------------


def test_exact() -> None:
    assert grade(Exact(), {"answer": "Port 7420."}, {"answer": "  port   7420"}).status == "pass"
    assert (
        grade(Exact(strict=True), {"answer": "Port 7420."}, {"answer": "port 7420"}).status
        == "fail"
    )
    assert grade(Exact(), {"answer": "7420"}, {"answer": "7421"}).status == "fail"
    assert grade(Exact("refused"), {"refused": True}, {"refused": True}).status == "pass"
    # 1 == True in Python; a label of True is not met by an output of 1.
    assert grade(Exact("refused"), {"refused": True}, {"refused": 1}).status == "fail"
    skipped = grade(Exact(), {}, {"answer": "x"})
    assert skipped.status == "skip" and "label" in skipped.detail
    assert grade(Exact(), {"answer": "x"}, {}).status == "skip"


def test_contains() -> None:
    contains = Contains(expected="facts")
    assert (
        grade(contains, {"facts": ["7420", "PORT"]}, {"answer": "the port is 7420"}).status
        == "pass"
    )
    half = grade(contains, {"facts": ["7420", "tls"]}, {"answer": "port 7420"})
    assert half.status == "fail" and half.score == 0.5 and "tls" in half.detail
    assert grade(contains, {"facts": "7420"}, {"answer": "port 7420"}).status == "pass"
    assert grade(contains, {}, {"answer": "x"}).status == "skip"
    with pytest.raises(InputError, match="'answer' must be a string"):
        grade(contains, {"facts": "x"}, {"answer": 3})


def test_regex() -> None:
    fixed = Regex(pattern=r"\b74\d\d\b")
    assert grade(fixed, {}, {"answer": "port 7420"}).status == "pass"
    assert grade(fixed, {}, {"answer": "port 8080"}).status == "fail"
    per_case = Regex()
    assert grade(per_case, {"pattern": "^yes"}, {"answer": "Yes, it does"}).status == "pass"
    assert grade(per_case, {}, {"answer": "yes"}).status == "skip"
    with pytest.raises(ConfigError, match="does not compile"):
        Regex(pattern="(")


def test_recall_at_k() -> None:
    recall = RecallAtK(2)
    full = grade(recall, {"relevant": ["a"]}, {"retrieved": ["b", "a", "c"]})
    assert full.status == "pass" and full.score == 1.0
    late = grade(recall, {"relevant": ["a"]}, {"retrieved": ["b", "c", "a"]})
    assert late.status == "fail" and late.score == 0.0
    half = grade(RecallAtK(3, minimum=0.5), {"relevant": ["a", "z"]}, {"retrieved": ["a", "b"]})
    assert half.status == "pass" and half.score == 0.5
    assert grade(recall, {"relevant": []}, {"retrieved": ["a"]}).status == "skip"
    assert grade(recall, {}, {"retrieved": ["a"]}).status == "skip"
    # Nothing retrieved is recall 0, not a skip.
    assert grade(recall, {"relevant": ["a"]}, {}).status == "fail"
    with pytest.raises(ConfigError):
        RecallAtK(0)


def test_capped_recall_counts_over_min_k_and_the_relevant() -> None:
    three = {"relevant": ["a", "b", "c"]}
    # Over |relevant|, one of three in the top 1 is a third; capped, it is all there is room for.
    assert grade(RecallAtK(1), three, {"retrieved": ["b", "x"]}).score == pytest.approx(1 / 3)
    capped = grade(RecallAtK(1, capped=True), three, {"retrieved": ["b", "x"]})
    assert capped.status == "pass" and capped.score == 1.0
    assert "retrieved: b" in capped.detail and "relevant: a, b, c" in capped.detail
    miss = grade(RecallAtK(1, capped=True), three, {"retrieved": ["x", "a"]})
    assert miss.status == "fail" and miss.score == 0.0
    five = grade(RecallAtK(5, capped=True), three, {"retrieved": ["x", "a", "y", "c"]})
    assert five.score == pytest.approx(2 / 3) and five.status == "fail"


def test_citation_validity() -> None:
    cites = CitationValidity()
    assert grade(cites, {}, {"citations": [1, 3], "sources": 3}).status == "pass"
    bad = grade(cites, {}, {"citations": [1, 4, 0], "sources": ["a", "b", "c"]})
    assert bad.status == "fail" and "[4, 0]" in bad.detail and bad.score == pytest.approx(1 / 3)
    assert grade(cites, {}, {"citations": [], "sources": 2}).status == "fail"
    assert grade(cites, {}, {"citations": None, "sources": 0}).status == "skip"
    with pytest.raises(InputError, match="list of ints"):
        grade(cites, {}, {"citations": ["1"], "sources": 2})


def test_judge_verdicts_are_parsed() -> None:
    assert parse_verdict("PASS: it names the port") == (True, 1.0)
    assert parse_verdict("fail 0.2 wrong port") == (False, 0.2)
    assert parse_verdict("**PASS** 0.75") == (True, 0.75)
    assert parse_verdict("The answer is right.") is None
    assert parse_verdict("PASSABLE") is None


# --- the run and the report -------------------------------------------------------------

CASES = [
    Case("a", "What port?", {"answer": "7420", "relevant": ["cfg"]}, ("answerable",)),
    Case("b", "What delay?", {"answer": "2 seconds", "relevant": ["cfg"]}, ("answerable",)),
    Case("c", "Capital of France?", {}, ("unanswerable",)),
]
ANSWERS = {"a": ("7420", ["cfg"]), "b": ("5 seconds", ["faq"]), "c": ("Paris", [])}


async def system(case: Case) -> Outcome:
    answer, retrieved = ANSWERS[case.id]
    return Outcome({"answer": answer, "retrieved": retrieved}, cost_usd=0.002)


def run(graders: Sequence[Grader], cases: Sequence[Case] = CASES, sut: Any = system) -> Report:
    return asyncio.run(run_eval("test", cases, sut, graders, concurrency=2))


def test_report_rates_and_render() -> None:
    report = run([Exact(), RecallAtK(1)])
    assert [r.status for r in report.results] == ["pass", "fail", "skip"]
    overall = report.overall()
    assert (overall.passed, overall.failed, overall.skipped, overall.value) == (1, 1, 1, 0.5)
    assert report.overall("answerable").value == 0.5
    assert report.overall("unanswerable").value is None  # all skipped: unknown, not 100 %
    assert report.grader("recall@1").value == 0.5
    assert report.mean_cost() == pytest.approx(0.002)
    data = report.to_dict()
    json.dumps(data)
    assert (
        data["graders"]["exact:answer"]["rate"] == 0.5 and data["tags"]["answerable"]["passed"] == 1
    )
    text = report.render()
    assert "b: exact:answer: got '5 seconds', expected '2 seconds'" in text
    assert "tag unanswerable" in text and "n/a" in text


def test_select_grades_the_cases_by_some_graders_only() -> None:
    report = run([Exact(), RecallAtK(1)])
    exact_only = report.select(["exact:answer"])
    assert exact_only.graders == ("exact:answer",) and len(exact_only.results) == len(
        report.results
    )
    assert all(g.grader == "exact:answer" for r in exact_only.results for g in r.grades)
    assert exact_only.overall() == exact_only.grader("exact:answer")
    with pytest.raises(ConfigError, match="recall@9"):
        report.select(["recall@9"])
    with pytest.raises(ConfigError):
        report.select([])


def test_a_system_error_fails_its_case_and_is_reported() -> None:
    async def flaky(case: Case) -> Outcome:
        if case.id == "b":
            raise InputError("the question is empty")
        return await system(case)

    report = run([Exact()], sut=flaky)
    assert report.results[1].status == "fail"
    assert report.errors() == [("b", "InputError: the question is empty")]
    assert report.grader("exact:answer").failed == 1


def test_run_checks_its_arguments() -> None:
    with pytest.raises(ConfigError, match="unique"):
        run([Exact(), Exact()])
    with pytest.raises(ConfigError, match="concurrency"):
        asyncio.run(run_eval("x", CASES, system, [Exact()], concurrency=0))


def test_load_cases(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(
        '{"id": "a", "question": "q?", "tags": ["t"], "answer": "x"}\n\n'
        '{"id": "b", "question": "r?"}\n',
        encoding="utf-8",
    )
    cases = load_cases(path, input_field="question")
    assert cases[0] == Case("a", "q?", {"answer": "x"}, ("t",)) and cases[1].expected == {}
    path.write_text(
        '{"id": "a", "question": "q"}\n{"id": "a", "question": "q"}\n', encoding="utf-8"
    )
    with pytest.raises(InputError, match=r"set\.jsonl:2: id 'a' appears twice"):
        load_cases(path, input_field="question")
    path.write_text("{nope\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"set\.jsonl:1: not JSON"):
        load_cases(path)


# --- gates -----------------------------------------------------------------------------


def test_each_gate_passes_and_fails_on_evidence() -> None:
    report = run([Exact(), RecallAtK(1)])
    assert check_gates(report, [MinPassRate(0.5)]).passed
    assert not check_gates(report, [MinPassRate(0.6)]).passed
    assert check_gates(report, [MinPassRate(0.5, tag="answerable")]).passed
    assert check_gates(report, [GraderMinimum("recall@1", 0.5)]).passed
    low = check_gates(report, [GraderMinimum("exact:answer", 0.9)])
    assert not low.passed and not low.verdicts[0].vacuous and "0.500 (1/2) < 0.900" in low.render()
    assert check_gates(report, [MaxMeanCost(0.002)]).passed
    assert not check_gates(report, [MaxMeanCost(0.001)]).passed


def test_vacuous_gates_fail() -> None:
    gates = [MinPassRate(0.5), GraderMinimum("exact:answer", 0.5), MaxMeanCost(1.0)]
    # No cases at all: every gate would pass on nothing.
    empty = check_gates(run([Exact()], cases=[]), gates)
    assert not empty.passed and all(v.vacuous and not v.passed for v in empty.verdicts)
    # Every grader skipped every case (no labels): nothing was graded.
    unlabelled = [Case("x", "q", {}), Case("y", "r", {})]

    async def answers(case: Case) -> Outcome:
        return Outcome({"answer": "a"}, cost_usd=0.0)

    skipped = check_gates(run([Exact(), RecallAtK(3)], cases=unlabelled, sut=answers), gates[:2])
    assert not skipped.passed and all(v.vacuous for v in skipped.verdicts)
    assert "nothing was graded" in skipped.render()
    # A gate on a grader that never ran, and on a tag no case has.
    report = run([Exact()])
    missing = check_gates(report, [GraderMinimum("judge", 0.5), MinPassRate(0.5, tag="nope")])
    assert [v.vacuous for v in missing.verdicts] == [True, True] and not missing.passed
    # No case knows its cost.

    async def unknown(case: Case) -> Outcome:
        return Outcome({"answer": ANSWERS[case.id][0]})

    costless = check_gates(run([Exact()], sut=unknown), [MaxMeanCost(1.0)])
    assert not costless.passed and costless.verdicts[0].vacuous
    # No gates at all.
    assert not check_gates(report, []).passed


def test_gate_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="0 admits every report"):
        MinPassRate(0.0)
    with pytest.raises(ConfigError):
        GraderMinimum("x", 1.5)
    with pytest.raises(ConfigError):
        MaxMeanCost(float("nan"))
    with pytest.raises(InputError):
        Outcome({}, cost_usd=-1.0)
