"""The LLM judge through a real bridge: OpenAIBridge (official SDK) to a loopback server.

The server is a deterministic *test judge*, not an LLM: it replies ``PASS`` when the answer
line contains the reference answer, ``FAIL`` otherwise, and ``maybe`` (neither word) for an
answer that says "unsure". What is tested is the grader: the request it builds, the verdict
it reads, an unreadable verdict failing, and the call's price reaching the cost gate through
``InstrumentedBridge``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest

from evermind.bridges.instrumented import InstrumentedBridge
from evermind.bridges.openai import OpenAIBridge
from evermind.evaluation import (
    Case,
    LLMJudge,
    MaxMeanCost,
    Outcome,
    Report,
    check_gates,
    run_eval,
)
from tests.upstreams import OpenAIUpstream


def judge_reply(prompt: str) -> str:
    """The test judge (not an LLM): PASS when the answer holds the reference."""
    reference = re.search(r"^Reference answer: (.*)$", prompt, re.MULTILINE)
    answer = re.search(r"^Answer to grade: (.*)$", prompt, re.MULTILINE)
    assert answer is not None and "Rubric: " in prompt and prompt.startswith("Question: ")
    if "unsure" in answer.group(1):
        return "maybe, hard to say"
    if reference is not None and reference.group(1).lower() in answer.group(1).lower():
        return "PASS 0.9 the answer states the reference"
    return "FAIL 0.1 the reference is missing"


@pytest.fixture(scope="module")
def judge_server() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(reply=judge_reply) as upstream:
        yield upstream


CASES = [
    Case("a", "What port does it listen on?", {"answer": "7420"}),
    Case("b", "What is the base delay?", {"answer": "2 seconds"}),
    Case("c", "Is there a Windows build?", {"answer": "no"}),
    Case("d", "Anything?", {}),
]
ANSWERS = {"a": "It listens on 7420.", "b": "The delay is 5 seconds.", "c": "unsure", "d": None}


def test_the_judge_grades_through_the_bridge(judge_server: OpenAIUpstream) -> None:
    async def main() -> tuple[Report, InstrumentedBridge]:
        sdk = OpenAIBridge(
            api_key=judge_server.api_key, base_url=judge_server.url + "/v1", max_retries=0
        )
        bridge = InstrumentedBridge(sdk)
        judge = LLMJudge(bridge, model="gpt-4.1-mini", rubric="It must state the reference.")

        async def system(case: Case) -> Outcome:
            return Outcome({"answer": ANSWERS[case.id]}, cost_usd=0.0)

        try:
            report = await run_eval("judged", CASES, system, [judge])
        finally:
            await sdk.aclose()
        return report, bridge

    report, bridge = asyncio.run(main())
    grades = {r.case.id: r.grades[0] for r in report.results}
    assert grades["a"].status == "pass" and grades["a"].score == 0.9
    assert grades["b"].status == "fail" and grades["b"].score == 0.1
    assert grades["c"].status == "fail" and "neither PASS nor FAIL" in grades["c"].detail
    assert grades["d"].status == "skip"
    body = judge_server.last.body
    assert body["temperature"] == 0.0 and body["model"] == "gpt-4.1-mini"
    assert body["messages"][0]["role"] == "system"
    # Three calls, each priced by the shipped table; the cost is the grades' and the gate's.
    assert bridge.calls == 3 and bridge.cost_usd > 0
    total = sum(g.cost_usd for g in grades.values())
    assert total == pytest.approx(bridge.cost_usd)
    mean = report.mean_cost()
    assert mean == pytest.approx(total / 4)
    assert check_gates(report, [MaxMeanCost(mean)]).passed
    assert not check_gates(report, [MaxMeanCost(mean / 2)]).passed
