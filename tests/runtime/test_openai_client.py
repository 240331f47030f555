"""The official ``openai`` Python client works against the runtime unchanged."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest

import evermind
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_B

PACKAGE = ("client", "2.0.0")


@pytest.fixture(scope="module")
def client(server: ServerThread, alpha: httpx.Client) -> Iterator[openai.OpenAI]:
    response = alpha.post("/v1/models", content=tiny_package(*PACKAGE))
    assert response.status_code == 201, response.text
    with openai.OpenAI(base_url=server.url + "/v1", api_key=TOKEN_A, max_retries=0) as api:
        yield api


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert "evermind/client:2.0.0" in ids


def test_chat_completion(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="evermind/client",
        messages=[{"role": "user", "content": "What do agents learn?"}],
        max_tokens=16,
        temperature=0.7,
        seed=3,
    )
    assert reply.model == "evermind/client:2.0.0"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and 0 < reply.usage.completion_tokens <= 16


def test_chat_streaming_matches_the_non_streamed_reply(client: openai.OpenAI) -> None:
    request = {
        "model": "evermind/client:2.0.0",
        "messages": [{"role": "user", "content": "Tell me about the fox."}],
        "max_tokens": 24,
        "seed": 11,
    }
    whole = client.chat.completions.create(**request)  # type: ignore[call-overload]
    stream = client.chat.completions.create(
        **request, stream=True, stream_options={"include_usage": True}
    )  # type: ignore[call-overload]
    pieces, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_text_completion(client: openai.OpenAI) -> None:
    done = client.completions.create(
        model="evermind/client", prompt="The quick brown", max_tokens=8, temperature=0
    )
    reference = evermind.load(tiny_package(*PACKAGE))
    expected = reference.complete("The quick brown", max_new_tokens=8, temperature=0)
    assert done.choices[0].text == expected.text


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_embeddings(client: openai.OpenAI, encoding: str) -> None:
    texts = ["caches save repeated work", "tokens one at a time"]
    result = client.embeddings.create(
        model="evermind/client",
        input=texts,
        encoding_format=encoding,  # type: ignore[arg-type]
    )
    rows = [d.embedding for d in result.data]
    if encoding == "base64":  # an explicit base64 request comes back undecoded
        rows = [np.frombuffer(base64.b64decode(r), "<f4") for r in rows]  # type: ignore[arg-type]
    vectors = np.array(rows, np.float32)
    reference = evermind.load(tiny_package(*PACKAGE)).embed(texts)
    np.testing.assert_allclose(vectors, reference, rtol=1e-5, atol=1e-6)
    assert result.usage.prompt_tokens > 0
    single = client.embeddings.create(model="evermind/client", input=texts[0])
    assert len(single.data) == 1


def test_errors_surface_as_openai_exceptions(client: openai.OpenAI, server: ServerThread) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(
            model="evermind/nope", messages=[{"role": "user", "content": "hi"}]
        )
    assert "not found" in str(missing.value)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="evermind/client", prompt="x", max_tokens=100_000)
    url = server.url + "/v1"
    with (
        openai.OpenAI(base_url=url, api_key="wrong-token", max_retries=0) as bad,
        pytest.raises(openai.AuthenticationError),
    ):
        bad.models.list()
    # Tenant bravo cannot use alpha's model through the client either.
    with (
        openai.OpenAI(base_url=url, api_key=TOKEN_B, max_retries=0) as other,
        pytest.raises(openai.NotFoundError),
    ):
        other.embeddings.create(model="evermind/client", input="x")
