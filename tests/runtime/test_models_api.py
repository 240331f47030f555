"""Push, list, inspect, generate, stream, embed and delete against a real server."""

from __future__ import annotations

import json
import os
import threading
from typing import BinaryIO

import httpx
import numpy as np
import pytest

import evermind
from evermind.package import Package, PackageLimits, reader
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import (
    PACKAGE_CAP,
    TOKEN_A_READ,
    assert_error,
    bearer,
    model_ids,
)


def push(client: httpx.Client, package: bytes) -> httpx.Response:
    return client.post(
        "/v1/models", content=package, headers={"Content-Type": "application/octet-stream"}
    )


def sse_events(response: httpx.Response) -> list[str]:
    assert response.headers["content-type"].startswith("text/event-stream")
    return [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]


def test_push_list_generate_stream_embed_delete(alpha: httpx.Client) -> None:
    package = tiny_package("lifecycle", "1.0.0")
    answer = push(alpha, package)
    assert answer.status_code == 201, answer.text
    reference = evermind.load(package)
    assert answer.json()["id"] == "evermind/lifecycle:1.0.0"
    assert answer.json()["digest"] == reference.fingerprint
    assert "evermind/lifecycle:1.0.0" in model_ids(alpha)

    card = alpha.get("/v1/models/evermind/lifecycle:1.0.0").json()
    assert card["manifest"]["name"] == "lifecycle" and card["digest"] == reference.fingerprint

    # Greedy generation through the server equals the same model run in-process.
    body = {"model": "evermind/lifecycle:1.0.0", "prompt": "The quick", "max_tokens": 12}
    done = alpha.post("/v1/completions", json={**body, "temperature": 0})
    assert done.status_code == 200, done.text
    expected = reference.complete("The quick", max_new_tokens=12, temperature=0, top_k=None)
    choice = done.json()["choices"][0]
    assert choice["text"] == expected.text
    assert choice["finish_reason"] == expected.finish_reason
    usage = done.json()["usage"]
    assert usage["prompt_tokens"] == expected.prompt_tokens
    assert usage["completion_tokens"] == expected.completion_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    streamed = alpha.post("/v1/completions", json={**body, "temperature": 0, "stream": True})
    events = sse_events(streamed)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == expected.text
    assert chunks[-1]["choices"][0]["finish_reason"] == expected.finish_reason

    texts = ["remember the fox", "a state space model"]
    embedded = alpha.post("/v1/embeddings", json={"model": "evermind/lifecycle", "input": texts})
    assert embedded.status_code == 200, embedded.text
    vectors = np.array([d["embedding"] for d in embedded.json()["data"]])
    np.testing.assert_allclose(vectors, reference.embed(texts), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)

    metrics = alpha.get("/v1/models/evermind/lifecycle:1.0.0").json()["metrics"]
    assert metrics["loaded"] is True and metrics["requests"] == 3
    assert metrics["completion_tokens"] == 2 * expected.completion_tokens

    gone = alpha.delete("/v1/models/evermind/lifecycle:1.0.0")
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    assert "evermind/lifecycle:1.0.0" not in model_ids(alpha)
    assert_error(alpha.post("/v1/completions", json=body), 404, "model_not_found")


def test_a_push_and_its_first_generation_parse_the_package_once(
    alpha: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry builds the first model from the package the push verified."""
    package = tiny_package("parsed-once", "1.0.0")
    parses: list[int] = []
    verify = reader._verify

    def counting(stream: BinaryIO, limits: PackageLimits) -> Package:
        parses.append(os.fstat(stream.fileno()).st_size)
        return verify(stream, limits)

    monkeypatch.setattr(reader, "_verify", counting)
    assert push(alpha, package).status_code == 201
    body = {"model": "evermind/parsed-once:1.0.0", "prompt": "The", "max_tokens": 4}
    for _ in range(2):
        assert alpha.post("/v1/completions", json=body).status_code == 200
    assert parses == [len(package)]


def test_same_ref_same_digest_is_idempotent_other_digest_conflicts(alpha: httpx.Client) -> None:
    assert push(alpha, tiny_package("conflict", "1.0.0", seed=0)).status_code == 201
    again = push(alpha, tiny_package("conflict", "1.0.0", seed=0))
    assert again.status_code == 200 and again.json()["created"] is False
    message = assert_error(push(alpha, tiny_package("conflict", "1.0.0", seed=1)), 409)
    assert "evermind/conflict:1.0.0" in message and "version" in message
    # The conflict changed nothing: the first digest still serves.
    card = alpha.get("/v1/models/evermind/conflict:1.0.0").json()
    assert card["digest"] == evermind.load(tiny_package("conflict", "1.0.0", seed=0)).fingerprint


def test_unversioned_id_follows_the_newest_version(alpha: httpx.Client) -> None:
    for version, seed in (("1.9.0", 2), ("1.10.0", 3), ("1.2.0", 4)):
        assert push(alpha, tiny_package("follow", version, seed=seed)).status_code == 201
    body = {"model": "evermind/follow", "prompt": "x", "max_tokens": 2}
    assert alpha.post("/v1/completions", json=body).json()["model"] == "evermind/follow:1.10.0"
    assert alpha.delete("/v1/models/evermind/follow:1.10.0").status_code == 200
    assert alpha.post("/v1/completions", json=body).json()["model"] == "evermind/follow:1.9.0"
    assert_error(alpha.delete("/v1/models/evermind/follow"), 400, "version_required")


def test_chat_completion_uses_the_template_and_stops_at_the_next_user_turn(
    alpha: httpx.Client,
) -> None:
    assert push(alpha, tiny_package("chat", "1.0.0")).status_code in (200, 201)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Who jumps?"}]},
    ]
    body = {"model": "evermind/chat", "messages": messages, "max_tokens": 40, "seed": 7}
    first = alpha.post("/v1/chat/completions", json=body)
    assert first.status_code == 200, first.text
    message = first.json()["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert "\nUser:" not in message["content"] and message["content"] == message["content"].lstrip()
    # Same seed, same reply; streamed deltas add up to it.
    assert (
        alpha.post("/v1/chat/completions", json=body).json()["choices"][0]
        == first.json()["choices"][0]
    )
    streamed = alpha.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = [json.loads(e) for e in sse_events(streamed)[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == message["content"]


def test_stream_with_usage_reports_token_counts(alpha: httpx.Client) -> None:
    assert push(alpha, tiny_package("chat", "1.0.0")).status_code in (200, 201)
    body = {
        "model": "evermind/chat",
        "prompt": "Memories are",
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    events = sse_events(alpha.post("/v1/completions", json=body))
    usage = json.loads(events[-2])["usage"]
    assert usage["completion_tokens"] <= 5 and usage["prompt_tokens"] > 0


# ---------------------------------------------------------------------------- bad input


@pytest.fixture()
def installed_before(alpha: httpx.Client) -> list[str]:
    return model_ids(alpha)


def _nothing_changed(client: httpx.Client, before: list[str], server: ServerThread) -> None:
    assert model_ids(client) == before
    assert httpx.get(server.url + "/healthz").json()["status"] == "ok"
    assert not list(server.config.tmp_dir.iterdir()), "an upload was left behind"


def test_truncated_package_is_400_with_the_readers_message(
    alpha: httpx.Client, server: ServerThread, installed_before: list[str]
) -> None:
    package = tiny_package("broken", "1.0.0")
    message = assert_error(push(alpha, package[: len(package) // 2]), 400, "invalid_package")
    assert message.startswith("invalid package: ")
    _nothing_changed(alpha, installed_before, server)


def test_corrupted_package_is_400(
    alpha: httpx.Client, server: ServerThread, installed_before: list[str]
) -> None:
    package = bytearray(tiny_package("broken", "1.0.0"))
    package[len(package) // 2] ^= 0xFF
    message = assert_error(push(alpha, bytes(package)), 400, "invalid_package")
    assert "sha256" in message or "CRC" in message or "corrupt" in message.lower()
    _nothing_changed(alpha, installed_before, server)


def test_garbage_and_empty_bodies_are_400(
    alpha: httpx.Client, server: ServerThread, installed_before: list[str]
) -> None:
    assert_error(push(alpha, b"not a zip file at all"), 400, "invalid_package")
    assert_error(push(alpha, b""), 400, "empty_package")
    _nothing_changed(alpha, installed_before, server)


def test_oversized_package_is_413_declared_or_streamed(
    alpha: httpx.Client, server: ServerThread, installed_before: list[str]
) -> None:
    big = tiny_package("big", "1.0.0") + b"\0" * PACKAGE_CAP
    assert_error(push(alpha, big), 413, "package_too_large")

    def chunked() -> object:  # no Content-Length: the cap is enforced while streaming
        for start in range(0, len(big), 16384):
            yield big[start : start + 16384]

    response = alpha.post("/v1/models", content=chunked())
    assert_error(response, 413, "package_too_large")
    _nothing_changed(alpha, installed_before, server)


def test_wrong_missing_and_read_only_tokens(
    server: ServerThread, installed_before: list[str], alpha: httpx.Client
) -> None:
    package = tiny_package("auth", "1.0.0")
    wrong = httpx.post(server.url + "/v1/models", content=package, headers=bearer("nope-nope-1"))
    assert_error(wrong, 401, "invalid_token")
    assert wrong.headers["www-authenticate"].startswith("Bearer")
    assert_error(httpx.post(server.url + "/v1/models", content=package), 401, "missing_token")
    assert_error(httpx.get(server.url + "/v1/models"), 401)
    read_only = bearer(TOKEN_A_READ)
    refused = httpx.post(server.url + "/v1/models", content=package, headers=read_only)
    assert_error(refused, 403, "read_only_token")
    _nothing_changed(alpha, installed_before, server)
    # A read-only token still reads.
    assert httpx.get(server.url + "/v1/models", headers=read_only).status_code == 200


def test_malformed_json_and_bad_fields_are_400(alpha: httpx.Client) -> None:
    assert push(alpha, tiny_package("chat", "1.0.0")).status_code in (200, 201)
    headers = {"Content-Type": "application/json"}
    bad = alpha.post(
        "/v1/chat/completions", content=b'{"model": "evermind/chat", ', headers=headers
    )
    assert "malformed JSON" in assert_error(bad, 400, "invalid_json")
    missing = alpha.post("/v1/chat/completions", json={"model": "evermind/chat"})
    assert "messages" in assert_error(missing, 400, "invalid_request")
    hot = {"model": "evermind/chat", "prompt": "x", "temperature": 9}
    assert "temperature" in assert_error(alpha.post("/v1/completions", json=hot), 400)
    image = {"type": "image_url", "image_url": {"url": "http://x"}}
    parts = {"model": "evermind/chat", "messages": [{"role": "user", "content": [image]}]}
    assert_error(alpha.post("/v1/chat/completions", json=parts), 400, "unsupported_content")
    five_stops = {"model": "evermind/chat", "prompt": "x", "stop": list("abcde")}
    assert_error(alpha.post("/v1/completions", json=five_stops), 400, "invalid_stop")


def test_huge_max_tokens_is_400_and_nothing_runs(alpha: httpx.Client) -> None:
    assert push(alpha, tiny_package("chat", "1.0.0")).status_code in (200, 201)
    body = {"model": "evermind/chat", "prompt": "x", "max_tokens": 10**12}
    message = assert_error(alpha.post("/v1/completions", json=body), 400, "max_tokens_too_large")
    assert "512" in message
    chat = {"model": "evermind/chat", "messages": [{"role": "user", "content": "x"}]}
    too_many = alpha.post("/v1/chat/completions", json={**chat, "max_completion_tokens": 513})
    assert_error(too_many, 400, "max_tokens_too_large")


def test_oversized_json_body_is_413(alpha: httpx.Client) -> None:
    huge = {"model": "evermind/chat", "input": ["x" * 1024] * 5000}  # ~5 MB > 4 MiB default
    assert_error(alpha.post("/v1/embeddings", json=huge), 413, "request_too_large")


def test_unknown_model_and_bad_embedding_input(alpha: httpx.Client) -> None:
    assert_error(alpha.post("/v1/embeddings", json={"model": "evermind/absent", "input": "x"}), 404)
    assert_error(alpha.post("/v1/embeddings", json={"model": "evermind/chat", "input": []}), 400)
    assert_error(alpha.get("/v1/models/Not A Model!"), 404, "model_not_found")


def test_concurrent_pushes_of_one_ref_install_exactly_once(alpha: httpx.Client) -> None:
    packages = [tiny_package("race", "1.0.0", seed=s) for s in (0, 0, 1, 2)]
    statuses: list[int] = []

    def send(package: bytes) -> None:
        statuses.append(push(alpha, package).status_code)

    threads = [threading.Thread(target=send, args=(p,)) for p in packages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses.count(201) == 1 and set(statuses) <= {200, 201, 409}
    assert model_ids(alpha).count("evermind/race:1.0.0") == 1


def test_client_leaving_a_stream_early_leaves_the_server_healthy(
    alpha: httpx.Client, server: ServerThread
) -> None:
    assert push(alpha, tiny_package("chat", "1.0.0")).status_code in (200, 201)
    body = {"model": "evermind/chat", "prompt": "The", "max_tokens": 512, "stream": True}
    with alpha.stream("POST", "/v1/completions", json=body) as response:
        first = next(response.iter_lines())
        assert first.startswith("data: {")
    done = alpha.post("/v1/completions", json={**body, "stream": False, "max_tokens": 3})
    assert done.status_code == 200
    assert httpx.get(server.url + "/healthz").status_code == 200
