"""The memory store over HTTP, and the L2 semantic-cache protocol its clients speak."""

from __future__ import annotations

import httpx
import pytest

from evermind.cache import HttpRequest, HttpResponse, HttpSemanticCacheBackend, L2Hit
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_A_READ, assert_error, bearer


def test_remember_get_list_recall_forget(alpha: httpx.Client) -> None:
    assert alpha.post("/v1/models", content=tiny_package("embedder", "1.0.0")).status_code == 201
    notes = {
        "editor": ("Niamh edits code in Neovim every day", ["pref"]),
        "coffee": ("The team drinks coffee at ten", ["habit"]),
        "deploy": ("Deploys go out on Tuesday mornings", ["ops", "pref"]),
    }
    for key, (content, tags) in notes.items():
        body = {"key": key, "content": content, "tags": tags, "namespace": "notes"}
        stored = alpha.post("/v1/memory/remember", json={**body, "model": "evermind/embedder"})
        assert stored.status_code == 200, stored.text
        assert stored.json()["tags"] == sorted(tags)
    got = alpha.get("/v1/memory/editor", params={"namespace": "notes"})
    assert got.json()["content"] == notes["editor"][0]
    tagged = alpha.get("/v1/memory", params={"tag": "pref", "namespace": "notes"}).json()["data"]
    assert {m["key"] for m in tagged} == {"editor", "deploy"}
    recent = alpha.get("/v1/memory", params={"namespace": "notes", "limit": 2}).json()["data"]
    assert len(recent) == 2

    query = {"query": "which editor does Niamh use", "namespace": "notes", "top_k": 2}
    lexical = alpha.post("/v1/memory/recall", json=query).json()["data"]
    assert lexical[0]["key"] == "editor" and "lexical" in lexical[0]["ranked_by"]
    semantic = alpha.post("/v1/memory/recall", json={**query, "model": "evermind/embedder"})
    assert "semantic" in semantic.json()["data"][0]["ranked_by"]

    assert alpha.delete("/v1/memory/editor", params={"namespace": "notes"}).json()["deleted"]
    assert_error(alpha.get("/v1/memory/editor", params={"namespace": "notes"}), 404)
    # The default namespace never saw any of it.
    assert_error(alpha.get("/v1/memory/coffee"), 404, "memory_not_found")


def test_memory_validation_and_read_only(server: ServerThread, alpha: httpx.Client) -> None:
    bad = {"key": "k", "content": "x", "importance": 3}
    assert "importance" in assert_error(alpha.post("/v1/memory/remember", json=bad), 400)
    assert_error(alpha.post("/v1/memory/remember", json={"key": "", "content": "x"}), 400)
    read_only = bearer(TOKEN_A_READ)
    write = httpx.post(
        server.url + "/v1/memory/remember", json={"key": "k", "content": "x"}, headers=read_only
    )
    assert_error(write, 403, "read_only_token")
    recall = httpx.post(server.url + "/v1/memory/recall", json={"query": "x"}, headers=read_only)
    assert recall.status_code == 200


@pytest.fixture()
def l2(server: ServerThread) -> HttpSemanticCacheBackend:
    def transport(request: HttpRequest) -> HttpResponse:
        answer = httpx.request(
            request.method, request.url, headers=request.headers, content=request.body
        )
        return HttpResponse(answer.status_code, answer.content)

    return HttpSemanticCacheBackend(server.url, TOKEN_A, "l2test", transport=transport)


def test_l2_client_round_trip_with_guards(l2: HttpSemanticCacheBackend) -> None:
    """The L2 judges with the verified decision (δ 0.01 unless the lookup says otherwise)."""
    vector = [0.1, 0.7, -0.3, 0.2, 0.5]
    l2.store(vector, {"text": "12"}, "math", {"source": "test"}, "What is 15 percent of 80?")
    hit = l2.lookup([x * 3 for x in vector], 0.95, "math", "what is 15 percent of 80?")
    assert isinstance(hit, L2Hit)
    assert hit.response == {"text": "12"} and hit.score == pytest.approx(1.0, abs=1e-5)
    assert hit.query == "What is 15 percent of 80?"
    # Same vector, another question (a direction word changed): the verifier refuses it.
    assert l2.lookup(vector, 0.95, "math", "What is 15 percent more than 80?") is None
    # Without a query nothing can be verified: a miss.
    assert l2.lookup(vector, 0.95, "math", None) is None
    # The rule-based decision ("off") serves by cosine alone without a query.
    assert l2.lookup(vector, 0.95, "math", None, max_error=None) is not None
    # Other namespaces and far vectors miss.
    assert l2.lookup(vector, 0.95, "other", "What is 15 percent of 80?") is None
    assert l2.lookup([-x for x in vector], 0.5, "math", "What is 15 percent of 80?") is None


def test_l2_lookup_refuses_a_bad_max_error(alpha: httpx.Client) -> None:
    body = {"embedding": [1.0, 0.0], "threshold": 0.9, "query": "q", "max_error": 2}
    answer = alpha.post("/v1/semantic-cache/lookup", json=body)
    assert answer.status_code in (400, 422)
    assert "max_error must be a rate in (0, 1)" in answer.text


def test_cache_lookup_prefers_the_best_score_and_checks_input(alpha: httpx.Client) -> None:
    for response, embedding in (("near", [1.0, 0.1, 0.0]), ("exact", [1.0, 0.0, 0.0])):
        body = {"embedding": embedding, "response": response, "namespace": "rank"}
        assert alpha.post("/v1/semantic-cache/store", json=body).status_code == 200
    # Entries without question text: only the rule-based decision ("off") can serve them.
    lookup = {"embedding": [1.0, 0.0, 0.0], "threshold": 0.9, "namespace": "rank"}
    assert alpha.post("/v1/semantic-cache/lookup", json=lookup).json() == {}
    lookup["max_error"] = "off"
    assert alpha.post("/v1/semantic-cache/lookup", json=lookup).json()["hit"]["response"] == "exact"
    zero = {"embedding": [0.0, 0.0, 0.0], "response": "x"}
    assert_error(alpha.post("/v1/semantic-cache/store", json=zero), 400, "invalid_embedding")
    assert_error(alpha.post("/v1/semantic-cache/lookup", json={"embedding": []}), 400)
    wide = {**lookup, "threshold": 2}
    assert_error(alpha.post("/v1/semantic-cache/lookup", json=wide), 400)
