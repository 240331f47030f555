"""``EnterpriseRetriever.answer`` through OpenAIBridge, and ``evals/retrieval.py`` on the fixtures.

The model is a loopback OpenAI-compatible server driven by the official ``openai`` SDK
(``tests/upstreams.py``). By default it is the *extractive test server* of
``evals/retrieval.py`` (it quotes the source sentence sharing most terms with the question
and cites it; not an LLM); some tests give it a scripted reply instead (a citation to
nothing, a refusal). The rates are therefore about retrieval, the floor and the citation
plumbing. Measured with ``python -m evals.retrieval`` (floor 0.6): answer rate 0.810,
refusal rate 0.960. The floors (answer rate ≥ 0.75, refusal rate ≥ 0.9, and the set's own
gates) are checked by the evaluation harness's ``check_gates``; a failure prints the report
with the cases that missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from evals import retrieval as retrieval_eval

from evermind.bridges.openai import OpenAIBridge
from evermind.evaluation import check_gates, load_cases
from evermind.retrieval import REFUSAL, Answer, EnterpriseRetriever
from tests.upstreams import OpenAIUpstream


@pytest.fixture(scope="module")
def setup() -> retrieval_eval.Setup:
    return asyncio.run(retrieval_eval.index_fixtures())


@pytest.fixture(scope="module")
def extractive() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(reply=retrieval_eval.extractive_reply) as upstream:
        yield upstream


def with_bridge(server: OpenAIUpstream, use: Callable[[OpenAIBridge], Any]) -> Any:
    async def main() -> Any:
        bridge = OpenAIBridge(api_key=server.api_key, base_url=server.url + "/v1", max_retries=0)
        try:
            return await use(bridge)
        finally:
            await bridge.aclose()

    return asyncio.run(main())


def ask(setup: retrieval_eval.Setup, server: OpenAIUpstream, question: str) -> Answer:
    retriever = EnterpriseRetriever(setup.store, setup.embedder, lexical=setup.lexical)
    answer: Answer = with_bridge(
        server,
        lambda bridge: retriever.answer(question, bridge, retrieval_eval.SCOPE, model="m"),
    )
    return answer


def test_the_fixtures_are_indexed(setup: retrieval_eval.Setup) -> None:
    assert setup.chunks == len(setup.lexical) == 234


def test_an_answer_cites_the_chunk_and_source(
    setup: retrieval_eval.Setup, extractive: OpenAIUpstream
) -> None:
    answer = ask(
        setup, extractive, "What exit code does the client return when the token is refused?"
    )
    assert answer.grounded and answer.cited_sources == ("docs/cli.md",)
    cited = answer.citations[0]
    assert cited.passage is answer.passages[cited.number - 1]
    assert cited.passage.id.startswith("docs/cli.md#") and "@" in cited.passage.id
    assert "4" in answer.text and answer.text.endswith(f"[{cited.number}]")
    sent = extractive.last.body["messages"]
    assert sent[0]["role"] == "system" and REFUSAL in sent[0]["content"]
    assert f"[{cited.number}] (source: docs/cli.md)" in sent[-1]["content"]
    assert answer.completion is not None and answer.completion.usage.output_tokens > 0


def test_a_citation_to_nothing_is_caught(setup: retrieval_eval.Setup) -> None:
    with OpenAIUpstream(
        reply=lambda prompt: "It listens on 7420 [1], see also [9] and [0]."
    ) as bad:
        answer = ask(setup, bad, "What address does the server bind to by default?")
    assert not answer.refused and not answer.grounded
    assert [c.number for c in answer.citations] == [1] and answer.invalid == (9, 0)


def test_a_model_refusal_is_a_refusal(setup: retrieval_eval.Setup) -> None:
    with OpenAIUpstream(reply=lambda prompt: REFUSAL) as declining:
        answer = ask(setup, declining, "What address does the server bind to by default?")
        assert len(declining.requests) == 1
    assert answer.refused and answer.completion is not None and "model" in answer.reason


def _recount(report: Any) -> tuple[float, float]:
    """The two headline rates counted again from the per-case outcomes."""
    answerable = [r for r in report.results if "answerable" in r.case.tags]
    unanswerable = [r for r in report.results if "unanswerable" in r.case.tags]
    answered = 0
    for r in answerable:
        v = r.outcome.values
        expected = r.case.expected["sources"][0]
        cites = v["citations"] or []
        valid = bool(cites) and all(1 <= n <= v["offered"] for n in cites)
        answered += (not v["refused"]) and valid and expected in v["cited_sources"]
    refused = sum(bool(r.outcome.values["refused"]) for r in unanswerable)
    return answered / len(answerable), refused / len(unanswerable)


def test_the_eval_rates_are_measured_and_above_a_floor(
    setup: retrieval_eval.Setup, extractive: OpenAIUpstream
) -> None:
    cases = load_cases(retrieval_eval.SET, input_field="question")
    assert len(cases) >= 60

    async def both(bridge: OpenAIBridge) -> list[Any]:
        return [await retrieval_eval.measure(setup, bridge, cases, floor) for floor in (0.6, 0.9)]

    (report, summary, gates), (strict_report, strict, _) = with_bridge(extractive, both)
    assert (summary["answer_rate"], summary["refusal_rate"]) == pytest.approx(_recount(report))
    assert (strict["answer_rate"], strict["refusal_rate"]) == pytest.approx(_recount(strict_report))
    print(summary, strict)
    # The bars, through the harness: the set's gates on the report, and the answer and
    # refusal rates as pass rates of the ANSWERED graders together (what rates() counts).
    answered = report.select(retrieval_eval.ANSWERED)
    assert answered.overall("answerable").value == pytest.approx(summary["answer_rate"])
    assert answered.overall("unanswerable").value == pytest.approx(summary["refusal_rate"])
    proof = check_gates(answered, retrieval_eval.ANSWER_GATES)
    if not (gates.passed and proof.passed):
        print(report.render(), answered.render(), sep="\n")
    assert gates.passed and proof.passed, f"{gates.render()}\n{proof.render()}"
    # A higher floor refuses more: fewer answers, at least as many refusals.
    assert strict["answer_rate"] < summary["answer_rate"]
    assert strict["refusal_rate"] >= summary["refusal_rate"]
    assert strict["refused_before_model"] > summary["refused_before_model"]
