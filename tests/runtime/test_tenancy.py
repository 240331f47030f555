"""Tenant A can neither see nor use tenant B's models, memories or cache; limits per tenant."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_B, assert_error, bearer, model_ids, write_tokens


def test_models_are_invisible_and_unusable_across_tenants(
    alpha: httpx.Client, bravo: httpx.Client
) -> None:
    assert alpha.post("/v1/models", content=tiny_package("secret", "1.0.0")).status_code == 201
    assert "evermind/secret:1.0.0" not in model_ids(bravo)
    assert_error(bravo.get("/v1/models/evermind/secret:1.0.0"), 404, "model_not_found")
    assert_error(bravo.get("/v1/models/evermind/secret"), 404, "model_not_found")
    generate = {"model": "evermind/secret", "prompt": "x", "max_tokens": 2}
    assert_error(bravo.post("/v1/completions", json=generate), 404, "model_not_found")
    chat = {"model": "evermind/secret:1.0.0", "messages": [{"role": "user", "content": "x"}]}
    assert_error(bravo.post("/v1/chat/completions", json=chat), 404, "model_not_found")
    embed = {"model": "evermind/secret", "input": "x"}
    assert_error(bravo.post("/v1/embeddings", json=embed), 404, "model_not_found")
    assert_error(bravo.delete("/v1/models/evermind/secret:1.0.0"), 404, "model_not_found")
    remember = {"key": "k", "content": "x", "model": "evermind/secret"}
    assert_error(bravo.post("/v1/memory/remember", json=remember), 404, "model_not_found")
    # Bravo may own its own "secret" (a different package) without touching alpha's.
    other = bravo.post("/v1/models", content=tiny_package("secret", "1.0.0", seed=5))
    assert other.status_code == 201
    digest_a = alpha.get("/v1/models/evermind/secret:1.0.0").json()["digest"]
    assert other.json()["digest"] != digest_a
    assert alpha.post("/v1/completions", json=generate).status_code == 200


def test_memories_are_scoped_to_the_tenant(alpha: httpx.Client, bravo: httpx.Client) -> None:
    memory = {"key": "plan", "content": "Alpha ships the release on Friday", "tags": ["ops"]}
    assert alpha.post("/v1/memory/remember", json=memory).status_code == 200
    assert_error(bravo.get("/v1/memory/plan"), 404, "memory_not_found")
    assert bravo.get("/v1/memory", params={"tag": "ops"}).json()["data"] == []
    recall = {"query": "when does the release ship", "top_k": 5}
    assert bravo.post("/v1/memory/recall", json=recall).json()["data"] == []
    assert_error(bravo.delete("/v1/memory/plan"), 404, "memory_not_found")
    # Bravo's own memory under the same key and namespace does not touch alpha's.
    mine = {"key": "plan", "content": "Bravo rests on Friday"}
    assert bravo.post("/v1/memory/remember", json=mine).status_code == 200
    assert alpha.get("/v1/memory/plan").json()["content"] == memory["content"]
    hits = alpha.post("/v1/memory/recall", json=recall).json()["data"]
    assert [h["content"] for h in hits] == [memory["content"]]
    # Naming another tenant's prefix in the namespace reaches nothing of theirs.
    spoof = bravo.get("/v1/memory/plan", params={"namespace": "alpha/default"})
    assert_error(spoof, 404, "memory_not_found")


def test_cache_is_scoped_to_the_tenant(alpha: httpx.Client, bravo: httpx.Client) -> None:
    question = "Where is alpha's answer?"
    entry = {"embedding": [0.2, 0.9, 0.1, 0.4], "response": "alpha's answer", "query": question}
    assert alpha.post("/v1/semantic-cache/store", json=entry).status_code == 200
    lookup = {"embedding": entry["embedding"], "threshold": 0.99, "query": question}
    assert bravo.post("/v1/semantic-cache/lookup", json=lookup).json() == {}
    assert alpha.post("/v1/semantic-cache/lookup", json=lookup).json()["hit"]["response"] == (
        "alpha's answer"
    )


def test_cache_dimensions_are_per_tenant_and_never_disclosed(
    alpha: httpx.Client, bravo: httpx.Client
) -> None:
    """Issue 35 item 6: alpha's embeddings of 10 dimensions (2..11) neither limit bravo's nor
    appear in anything bravo is told (on a ``--store`` engine the L2 once kept a table per
    dimension, 8 for all tenants together, and its refusal listed them)."""
    seen = []
    for dim in range(2, 12):
        entry = {"embedding": [1.0] + [0.5] * (dim - 1), "response": f"alpha {dim}"}
        stored = alpha.post("/v1/semantic-cache/store", json={**entry, "namespace": "dims"})
        assert stored.status_code == 200, stored.text
    vector = [float((i * 7) % 11) + 1.0 for i in range(384)]
    entry = {"embedding": vector, "response": "bravo 384", "namespace": "dims", "query": "q"}
    for response in (
        bravo.post("/v1/semantic-cache/store", json=entry),
        bravo.post(
            "/v1/semantic-cache/lookup",
            json={"embedding": vector, "threshold": 0.99, "namespace": "dims", "query": "q"},
        ),
    ):
        assert response.status_code == 200, response.text
        seen.append(response.text)
    assert json.loads(seen[1])["hit"]["response"] == "bravo 384"
    assert all("dimension" not in text and "[2" not in text for text in seen), seen


def test_rate_limit_is_per_tenant(tmp_path: Path) -> None:
    config = RuntimeConfig(
        data_dir=tmp_path / "data",
        port=0,
        tokens_file=write_tokens(tmp_path / "tokens.txt"),
        rate_limit=0.5,
        rate_burst=3,
    )
    with ServerThread(config) as server:
        statuses = [
            httpx.get(server.url + "/v1/models", headers=bearer(TOKEN_A)).status_code
            for _ in range(4)
        ]
        assert statuses == [200, 200, 200, 429]
        limited = httpx.get(server.url + "/v1/models", headers=bearer(TOKEN_A))
        assert_error(limited, 429, "rate_limited")
        assert int(limited.headers["retry-after"]) >= 1
        # Another tenant is not affected; health checks are not limited.
        assert httpx.get(server.url + "/v1/models", headers=bearer(TOKEN_B)).status_code == 200
        assert httpx.get(server.url + "/healthz").status_code == 200
