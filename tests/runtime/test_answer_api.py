"""``POST /v1/answer`` on a real runtime: the gateway's upstream answers from the passages
``evermind ingest`` stored in the tenant's namespace, its citations checked; no evidence, no
model call; a model that is no upstream is a 400 naming it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evermind.cli import main
from evermind.retrieval.citations import REFUSAL, SYSTEM_PROMPT
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, TOKEN_B, assert_error, bearer, gateway_config
from tests.unit.test_ask_answer import cite_the_one_holding
from tests.unit.test_ask_cli import FIXTURES, QUESTION
from tests.upstreams import OpenAIUpstream


def ingest(config: RuntimeConfig, root: Path, tenant: str) -> None:
    folder = root / f"kb-{tenant}"
    shutil.copytree(FIXTURES, folder)
    argv = ["ingest", str(folder), "--base", str(folder), "--store", str(config.db_path)]
    assert main([*argv, "--tenant", tenant, "--columns", "subject,body"]) == 0


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(reply=cite_the_one_holding("workers_max")) as model:
        yield model


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstream: OpenAIUpstream
) -> Iterator[ServerThread]:
    """A gateway runtime whose tenant alpha has the ingest fixtures in its default namespace
    (tenant bravo has nothing)."""
    root = tmp_path_factory.mktemp("answer")
    config = gateway_config(
        root,
        {
            "cache": {"embedder": "terms"},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": upstream.url + "/v1",
                    "api_key": upstream.api_key,
                    "max_retries": 0,
                }
            },
        },
    )
    config.data_dir.mkdir(parents=True)
    ingest(config, root, "alpha")
    with ServerThread(config) as running:
        yield running


def post(server: ServerThread, token: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(server.url + "/v1/answer", json=body, headers=bearer(token), timeout=60)


def test_the_upstream_answers_citing_the_passage_that_holds_it(
    server: ServerThread, upstream: OpenAIUpstream
) -> None:
    upstream.requests.clear()
    response = post(server, TOKEN_A, {"question": QUESTION, "answer_with": "openai/gpt-test"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["object"] == "answer" and answer["model"] == "openai/gpt-test"
    assert answer["refused"] is False and answer["grounded"] is True
    [number] = answer["citations"]
    cited = answer["passages"][number - 1]
    assert "workers_max" in cited["text"] and cited["source"] == "docs/configuration.md"
    assert answer["answer"] == f"The lease limit is set by workers_max [{number}]."
    assert isinstance(answer["cost_usd"], float) and answer["cost_usd"] >= 0.0
    # Through the gateway to the upstream, with the upstream's own key and model name, the
    # grounding instructions and the numbered passages.
    [request] = upstream.requests
    assert request.headers["authorization"] == f"Bearer {upstream.api_key}"
    assert request.body["model"] == "gpt-test"
    assert request.body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert (
        f"[{number}] (source: docs/configuration.md)\n" in request.body["messages"][-1]["content"]
    )


def test_no_evidence_is_a_refusal_without_a_model_call(
    server: ServerThread, upstream: OpenAIUpstream
) -> None:
    upstream.requests.clear()
    for token, question in ((TOKEN_A, "banana smoothie recipe with kale"), (TOKEN_B, QUESTION)):
        # Bravo has ingested nothing: alpha's passages are not its evidence.
        response = post(server, token, {"question": question, "answer_with": "openai/gpt-test"})
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["refused"] is True and answer["answer"] == REFUSAL
        assert answer["passages"] == [] and answer["reason"].startswith("no evidence")
        assert answer["cost_usd"] == 0.0
    assert upstream.requests == []


def test_a_filter_that_admits_nothing_refuses_and_a_bad_one_is_a_400(
    server: ServerThread, upstream: OpenAIUpstream
) -> None:
    upstream.requests.clear()
    body = {"question": QUESTION, "answer_with": "openai/gpt-test"}
    response = post(server, TOKEN_A, {**body, "where": {"eq": ["status", "no such status"]}})
    assert response.status_code == 200 and response.json()["refused"] is True
    message = assert_error(post(server, TOKEN_A, {**body, "where": {"between": ["a", 1]}}), 400)
    assert "between" in message
    assert upstream.requests == []


def test_bad_bodies_are_400s(server: ServerThread) -> None:
    for body in (
        {"question": QUESTION},
        {"question": QUESTION, "answer_with": ""},
        {"question": QUESTION, "answer_with": "m", "max_tokens": 0},
        {"question": "", "answer_with": "m"},
    ):
        assert_error(post(server, TOKEN_A, body), 400)


def test_without_upstreams_answers_are_refused_with_a_hint(
    tmp_path: Path,
) -> None:
    config = gateway_config(tmp_path, {"upstreams": {}})
    config = RuntimeConfig(
        data_dir=config.data_dir,
        port=0,
        tokens_file=config.tokens_file,
        rate_limit=0,
        worker_threads=2,
    )
    with ServerThread(config) as running:
        response = post(running, TOKEN_A, {"question": QUESTION, "answer_with": "gpt-test"})
    message = assert_error(response, 400, "invalid_model")
    assert "--upstreams" in message and "/v1/retrieve" in message
