"""``POST /v1/affect`` and chat's ``evermind.affect`` against a real server (httpx client)."""

from __future__ import annotations

from functools import lru_cache

import httpx
import numpy as np
import pytest

import evermind
from evermind.model.inference import Model
from evermind.runtime.server import ServerThread
from evermind.train.affect import affect_package_bytes, fit_affect
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A_READ, assert_error, bearer

WITH_HEAD = "evermind/moody:1.0.0-affect"
WITHOUT_HEAD = "evermind/moody:1.0.0"
POSITIVE = [f"the quick brown fox {i} jumps and remembers" for i in range(8)]
NEGATIVE = [f"caches save repeated work {i} of state space" for i in range(8)]


@lru_cache(maxsize=1)
def _packages() -> tuple[bytes, bytes]:
    plain = tiny_package("moody", "1.0.0", steps=3)
    model = evermind.load(plain)
    fit = fit_affect(model, POSITIVE + NEGATIVE, ["positive"] * 8 + ["negative"] * 8)
    return plain, affect_package_bytes(model.package, fit.head, "1.0.0-affect")


@pytest.fixture(scope="module")
def pushed(alpha: httpx.Client) -> Model:
    """Both packages pushed to tenant alpha; returns the one with the head, loaded here."""
    for data in _packages():
        answer = alpha.post(
            "/v1/models", content=data, headers={"Content-Type": "application/octet-stream"}
        )
        assert answer.status_code == 201, answer.text
    return evermind.load(_packages()[1])


def test_affect_scores_equal_the_model_in_process(alpha: httpx.Client, pushed: Model) -> None:
    texts = [POSITIVE[1], NEGATIVE[2], "a sentence it never saw"]
    answer = alpha.post("/v1/affect", json={"model": WITH_HEAD, "input": texts})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["model"] == WITH_HEAD and len(body["data"]) == 3
    expected = pushed.affect(texts)
    for i, (item, scores) in enumerate(zip(body["data"], expected, strict=True)):
        assert item["index"] == i and list(item["scores"]) == ["negative", "positive"]
        np.testing.assert_allclose(list(item["scores"].values()), list(scores.values()), atol=1e-6)
        assert item["label"] == max(scores, key=scores.__getitem__)
    assert body["data"][0]["label"] == "positive" and body["data"][1]["label"] == "negative"
    assert body["usage"]["prompt_tokens"] > 0
    single = alpha.post("/v1/affect", json={"model": WITH_HEAD, "input": texts[0]}).json()
    # One text alone equals it in a batch up to float rounding: the batched matrix product
    # may sum in another order (seen here: 0.008726518381130966 vs ...096).
    alone, batched = single["data"][0]["scores"], body["data"][0]["scores"]
    assert list(alone) == list(batched)
    np.testing.assert_allclose(list(alone.values()), list(batched.values()), rtol=1e-12)


def test_a_read_token_may_ask(server: ServerThread, pushed: Model) -> None:
    with httpx.Client(base_url=server.url, headers=bearer(TOKEN_A_READ), timeout=30) as reader:
        answer = reader.post("/v1/affect", json={"model": WITH_HEAD, "input": "hello"})
    assert answer.status_code == 200, answer.text


def test_bad_requests_are_4xx_with_the_reason(
    alpha: httpx.Client, bravo: httpx.Client, pushed: Model
) -> None:
    message = assert_error(
        alpha.post("/v1/affect", json={"model": WITHOUT_HEAD, "input": "hi"}),
        400,
        "model_has_no_affect_head",
    )
    assert WITHOUT_HEAD in message and "train-affect" in message
    assert_error(alpha.post("/v1/affect", json={"model": "evermind/nope:1", "input": "hi"}), 404)
    assert_error(bravo.post("/v1/affect", json={"model": WITH_HEAD, "input": "hi"}), 404)
    assert_error(alpha.post("/v1/affect", json={"model": WITH_HEAD, "input": []}), 400)
    assert_error(
        alpha.post("/v1/affect", json={"model": WITH_HEAD, "input": ["x"] * 2049}),
        400,
        "invalid_input",
    )
    assert_error(
        alpha.post("/v1/affect", json={"model": WITH_HEAD, "input": "x" * 200_001}),
        400,
        "input_too_long",
    )
    assert alpha.post("/v1/affect", json={"model": WITH_HEAD, "input": 5}).status_code in {
        400,
        422,
    }
    assert alpha.post("/v1/affect", json={"input": "hi"}).status_code in {400, 422}


def test_chat_reply_carries_affect_when_asked(alpha: httpx.Client, pushed: Model) -> None:
    body = {
        "model": WITH_HEAD,
        "messages": [{"role": "user", "content": POSITIVE[0]}],
        "max_tokens": 4,
        "temperature": 0,
    }
    plain = alpha.post("/v1/chat/completions", json=body)
    assert plain.status_code == 200 and "evermind" not in plain.json()
    asked = alpha.post("/v1/chat/completions", json={**body, "evermind": {"affect": True}})
    assert asked.status_code == 200, asked.text
    affect = asked.json()["evermind"]["affect"]
    reply = asked.json()["choices"][0]["message"]["content"]
    want_reply, want_user = pushed.affect([reply, POSITIVE[0]])
    np.testing.assert_allclose(
        list(affect["reply"]["scores"].values()), list(want_reply.values()), atol=1e-6
    )
    assert affect["last_user"]["scores"] == pytest.approx(want_user, abs=1e-6)
    assert affect["last_user"]["label"] == "positive"
    assert_error(
        alpha.post(
            "/v1/chat/completions",
            json={**body, "evermind": {"affect": True}, "stream": True},
        ),
        400,
        "invalid_affect",
    )
    no_head = {**body, "model": WITHOUT_HEAD, "evermind": {"affect": True}}
    assert WITHOUT_HEAD in assert_error(
        alpha.post("/v1/chat/completions", json=no_head), 400, "model_has_no_affect_head"
    )
