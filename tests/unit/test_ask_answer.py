"""``evermind ask --answer-with``: a model answers from the ingested passages, citing them.

The model is a loopback server speaking OpenAI's Chat Completions wire format
(:class:`tests.upstreams.OpenAIUpstream`), reached through the official SDK bridge as it would
reach ``evermind serve``'s gateway; its replies are scripted from the sources it was sent.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from evermind.cli import main
from evermind.retrieval.citations import REFUSAL, SYSTEM_PROMPT
from tests.unit import test_ask_cli
from tests.unit.test_ask_cli import QUESTION
from tests.upstreams import OpenAIUpstream

#: The ingest fixtures, ingested by ``evermind ingest`` into a fresh store (test_ask_cli's).
store = test_ask_cli.store


def cite_the_one_holding(needle: str) -> Callable[[str], str]:
    """A model that answers citing the source whose text holds ``needle`` (by its number in
    the prompt), or refuses when none does."""

    def reply(user: str) -> str:
        blocks = re.split(r"\n\n(?=\[\d+\] \(source: )", user.split("Question:")[0])
        for block in blocks:
            found = re.match(r"(?:Sources:\n\n)?\[(\d+)\] \(source: ", block)
            if found and needle in block:
                return f"The lease limit is set by workers_max [{found.group(1)}]."
        return REFUSAL

    return reply


@pytest.fixture
def model() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(reply=cite_the_one_holding("workers_max")) as upstream:
        yield upstream


def ask(
    capsys: pytest.CaptureFixture[str], upstream: OpenAIUpstream, *args: str
) -> tuple[int, str, str]:
    code = main(
        [
            "ask",
            *args,
            "--answer-with",
            "gpt-test",
            "--base-url",
            upstream.url + "/v1",
            "--token",
            upstream.api_key,
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def test_the_answer_cites_the_passage_that_holds_it(
    store: Path, model: OpenAIUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = ask(capsys, model, QUESTION, "--store", str(store), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["refused"] is False and answer["grounded"] is True
    assert answer["invalid_citations"] == []
    [number] = answer["citations"]
    cited = answer["passages"][number - 1]
    assert cited["n"] == number and "workers_max" in cited["text"]
    assert answer["answer"] == f"The lease limit is set by workers_max [{number}]."
    # What the model was sent: the grounding instructions, every passage numbered in the
    # order printed, headed by its source, then the question.
    [request] = model.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {model.api_key}"
    body = request.body
    assert body["model"] == "gpt-test" and body["max_tokens"] == 512
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = body["messages"][-1]["content"]
    assert user.endswith(f"Question: {QUESTION}")
    for passage in answer["passages"]:
        assert f"[{passage['n']}] (source: {passage['source']})\n" in user


def test_the_plain_output_lists_the_cited_sources(
    store: Path, model: OpenAIUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = ask(capsys, model, QUESTION, "--store", str(store))
    assert code == 0 and err == ""
    text, sources = out.split("\n\nSources:\n")
    assert text.startswith("The lease limit is set by workers_max [")
    assert re.fullmatch(
        r"\[\d+\] kb/docs/configuration\.md:\d+ \(Configuration > Server\)\n", sources
    )


def test_no_evidence_refuses_without_asking_the_model(
    store: Path, model: OpenAIUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = ask(capsys, model, "banana smoothie recipe with kale", "--store", str(store))
    assert code == 1 and out == f"{REFUSAL}\n"
    code, out, _ = ask(capsys, model, "banana smoothie recipe", "--store", str(store), "--json")
    answer = json.loads(out)
    assert code == 1 and answer["refused"] is True and answer["passages"] == []
    assert answer["reason"].startswith("no evidence")
    assert model.requests == []


def test_a_model_that_finds_no_answer_is_a_refusal(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIUpstream(reply=cite_the_one_holding("text no passage holds")) as upstream:
        code, out, _ = ask(capsys, upstream, QUESTION, "--store", str(store), "--json")
    answer = json.loads(out)
    assert code == 1 and answer["refused"] is True and answer["answer"] == REFUSAL
    assert answer["reason"] == "the model found no answer in the sources"
    assert len(upstream.requests) == 1


def test_a_citation_naming_no_passage_is_reported(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIUpstream(reply=lambda _: "Twelve workers [1][9].") as upstream:
        code, out, err = ask(capsys, upstream, QUESTION, "--store", str(store), "--top-k", "3")
    assert code == 0
    assert err == "warning: the answer cites [9], which name no passage\n"
    assert out.startswith("Twelve workers [1][9].\n\nSources:\n[1] ")


def test_an_unreachable_model_is_one_line(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = main(
        ["ask", QUESTION, "--store", str(store), "--answer-with", "m", "--base-url",
         f"http://127.0.0.1:{port}/v1"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize("bad", ["0", "9000", "many"])
def test_bad_max_tokens_is_a_usage_error(
    store: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    code = main(["ask", QUESTION, "--store", str(store), "--answer-with", "m", "--max-tokens", bad])
    assert code == 2
    assert "--max-tokens" in capsys.readouterr().err


def test_min_coverage_refuses_an_on_topic_question_the_documents_do_not_answer(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fixtures never mention SAML: recall alone offers passages sharing "Lanternfish" and
    # "support"; the retriever's coverage floor refuses them and keeps a question they answer.
    question = "Does Lanternfish support single sign-on with SAML?"
    assert main(["ask", question, "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith("[1] ")
    assert main(["ask", question, "--store", str(store), "--min-coverage", "0.6"]) == 1
    assert capsys.readouterr().out == "no evidence\n"
    assert main(["ask", QUESTION, "--store", str(store), "--min-coverage", "0.6"]) == 0
    assert "workers_max" in capsys.readouterr().out
    for bad in ("0", "1.5", "most"):
        assert main(["ask", QUESTION, "--store", str(store), "--min-coverage", bad]) == 2
        assert "--min-coverage" in capsys.readouterr().err
