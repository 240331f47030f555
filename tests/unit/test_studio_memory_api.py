"""The Studio's memory and cache handlers natively, without a model (lexical ranking).

The session's storage port is ``MemoryKV`` here (IndexedDB in the tab); the handlers, the
KV backend and the cache persistence are the same code. The semantic path with a trained
model and the GPU scan is in tests/shaders/test_memory_gpu_scan.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from evermind.memory.write_through import history
from evermind.search.calibration import FLOOR
from evermind.studio import api, memory_api, rpc
from evermind.studio.tab_memory import LEXICAL_THRESHOLD


@pytest.fixture(autouse=True)
def fresh_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(rpc, "_session", None)
    monkeypatch.setattr(memory_api, "_tab", None)
    yield


def call(fn: str, **kwargs: Any) -> Any:
    envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    if not envelope["ok"]:
        raise AssertionError(f"{fn} failed: {envelope['error']}")
    return envelope["result"]


def error(fn: str, **kwargs: Any) -> dict[str, str]:
    envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    assert not envelope["ok"], envelope
    return envelope["error"]  # type: ignore[no-any-return]


def test_handlers_are_registered() -> None:
    for name in ("memory_remember", "memory_recall", "memory_forget", "memory_list"):
        assert name in api.HANDLERS
    assert "cache_lookup" in api.HANDLERS and "cache_store" in api.HANDLERS


def test_memory_round_trip_lexical_without_a_model() -> None:
    assert (
        call(
            "memory_remember",
            key="pref-editor",
            content="Niamh uses Neovim with LazyVim",
            tags=["pref", "Tools"],
        )["key"]
        == "pref-editor"
    )
    call(
        "memory_remember",
        key="host-prod",
        content="The prod database is db-prod-01, port 5432",
        tags=["infra"],
        importance=0.9,
    )
    call("memory_remember", key="err-417", content="Error TSR-417 means the solver timed out")
    out = call("memory_recall", query="which port does db-prod-01 use?", top_k=2)
    assert out["hits"][0]["key"] == "host-prod"
    assert out["ranked_by"].startswith("lexical only: no embedder")
    assert out["scan"].startswith("none") and "no model" in out["embedder"]
    assert out["hits"][0]["score"] > 0 and "bm25" in out["hits"][0]["signals"]
    # The same hit in plain words: the best hit is a strong match, 100 % of itself.
    best = out["hits"][0]["match"]
    assert best["level"] == "strong" and best["percent"] == "100 %", best
    assert best["why"].startswith("Ranked by shared words only: there is no model yet"), best
    assert "shares words with your query" in best["why"], best
    tagged = call("memory_recall", query="Neovim", tags=["tools"])
    assert [h["key"] for h in tagged["hits"]] == ["pref-editor"]
    assert tagged["hits"][0]["tags"] == ["pref", "tools"]
    listed = call("memory_list", limit=2)
    assert [i["key"] for i in listed["items"]] == ["err-417", "host-prod"] and listed["count"] == 3
    assert call("memory_forget", key="err-417") == {"forgotten": True}
    assert call("memory_forget", key="err-417") == {"forgotten": False}
    assert call("memory_recall", query="TSR-417 solver")["hits"] == []
    # The rows live in the session's storage port: a new TabMemory on it sees them.
    memory_api._tab = None
    assert {i["key"] for i in call("memory_list")["items"]} == {"pref-editor", "host-prod"}


def test_memory_errors_come_back_in_words() -> None:
    assert error("memory_remember", key="", content="x")["type"] == "ConfigError"
    assert "importance" in error("memory_remember", key="k", content="x", importance=3)["message"]
    assert "tags" in error("memory_remember", key="k", content="x", tags="single")["message"]
    assert "top_k" in error("memory_recall", query="x", top_k=0)["message"]


def test_cache_verified_by_default_without_a_model() -> None:
    """The tab decides as the library does without a verification signal: the verifier and
    the no-signal fallback for δ 0.01 (exact repeats only), and every miss says why (issue 34:
    one behaviour everywhere)."""
    assert call("cache_store", query="How do I convert USD to EUR?", response="x 0.92")["stored"]
    call("cache_store", query="How to delete a remote git branch", response="git push -d")
    for i, topic in enumerate(("volcano", "sourdough", "marathon", "violin", "glacier", "orchid")):
        call("cache_store", query=f"Tell me a {topic} fact", response=f"fact {i}")
    call("cache_store", query="What is the capital of Australia?", response="Canberra")
    same = call("cache_lookup", query="how do i convert usd to eur")  # case and "?" only
    assert same["hit"] and same["response"] == "x 0.92" and same["max_error"] == 0.01
    assert same["reason"] == "served from l1"
    for question in ("How do I convert EUR to USD?", "How to create a remote git branch"):
        refused = call("cache_lookup", query=question)
        assert refused["hit"] is False and refused["refused_by"] == "verifier", refused
        assert "no-signal fallback" in refused["reason"]
        # δ 0.01's fallback has no finite level; the page's JSON.parse takes no Infinity.
        assert refused["threshold"] is None
        json.dumps(refused, allow_nan=False)
        assert 0.0 <= refused["probability"] < 1.0
    far = call("cache_lookup", query="What is the boiling point of water?")
    assert far["hit"] is False
    assert "max_error" in error("cache_lookup", query="x", max_error=1.5)["message"]
    rules = call("cache_lookup", query="How do I convert EUR to USD?", max_error="off")
    assert rules["max_error"] is None and rules["hit"] is False


def test_cache_hit_miss_and_guard_refusal_lexical() -> None:
    """The rule-based decision (``max_error="off"``): thresholds and guards."""
    miss = call("cache_lookup", query="How do I list files in a directory?", max_error="off")
    assert miss["hit"] is False and miss["reason"] == "the cache is empty"
    assert call("cache_store", query="How do I convert USD to EUR?", response="x 0.92")["stored"]
    call("cache_store", query="How to delete a remote git branch", response="git push -d")
    exact = call("cache_lookup", query="How do I convert USD to EUR?", max_error="off")
    assert exact["hit"] and exact["response"] == "x 0.92" and exact["tier"] == "l1"
    near = call("cache_lookup", query="how do i convert usd to eur", max_error="off")
    assert near["hit"] and near["score"] >= LEXICAL_THRESHOLD
    assert near["ranked_by"].startswith("lexical only") and near["scan"] in ("numpy", "python")
    flipped = call("cache_lookup", query="How do I convert EUR to USD?", max_error="off")
    assert flipped["hit"] is False and flipped["refused_by"] is not None
    assert flipped["cached_query"] == "How do I convert USD to EUR?"
    assert flipped["reason"].startswith(f"guard '{flipped['refused_by']}' refused")
    # The same verdict in plain words, for the Cache panel.
    assert flipped["words"].startswith(
        "Not served: the closest stored question, \u201cHow do I convert USD to EUR?\u201d, "
        "was refused: "
    ), flipped["words"]
    assert miss["words"].startswith("Not served: the cache is empty")
    assert exact["words"].startswith("Served from this tab's cache: this exact question")
    op = call("cache_lookup", query="How to create a remote git branch", max_error="off")
    assert op["hit"] is False and op["refused_by"] is not None
    far = call("cache_lookup", query="What is the boiling point of water?", max_error="off")
    assert far["hit"] is False and "threshold" in far["reason"]
    loose = call(
        "cache_lookup", query="What is the boiling point of water?", threshold=-1.0, max_error="off"
    )
    # A threshold below the floor is raised to it (and the reason says so): never served.
    assert loose["hit"] is False and loose["threshold"] == FLOOR
    assert "raised" in loose["reason"]
    assert "threshold" in error("cache_lookup", query="x", threshold=2)["message"]
    assert error("cache_store", query=" ", response="r")["type"] == "ConfigError"
    memory_api._tab = None  # a reload: answers come back from the storage port
    again = call("cache_lookup", query="how do i convert usd to eur", max_error="off")
    assert again["hit"] and again["response"] == "x 0.92" and again["entries"] == 2


def test_cache_capacity_evicts_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    from evermind.studio import tab_memory

    monkeypatch.setattr(tab_memory, "CACHE_CAPACITY", 2)
    for n in range(3):
        out = call("cache_store", query=f"question number {n} about widgets", response=n)
    assert out == {"stored": True, "entries": 2, "evicted": 1}
    assert call("cache_lookup", query="question number 0 about widgets")["hit"] is False
    assert call("cache_lookup", query="question number 2 about widgets")["response"] == 2


def test_bulk_import_export_and_cache_import() -> None:
    entries = [
        {"key": f"m{i}", "content": f"memory number {i} about depot {i % 7}"} for i in range(40)
    ]
    assert call("memory_import", entries=entries) == {"imported": 40, "count": 40}
    dump = call("memory_export")["entries"]
    assert [e["key"] for e in dump] == sorted(e["key"] for e in entries)
    assert call("memory_recall", query="depot 3", top_k=3)["hits"][0]["key"] in {
        f"m{i}" for i in range(40) if i % 7 == 3
    }
    assert call("memory_import", entries=dump[:5], mode="overwrite")["count"] == 5
    assert "mode" in error("memory_import", entries=[], mode="replace")["message"]
    pairs = [{"query": f"what is the capital of country {i}?", "response": i} for i in range(30)]
    assert call("cache_import", entries=pairs) == {"stored": 30, "entries": 30, "evicted": 0}
    got = call("cache_lookup", query="What is the capital of country 17?")
    assert got["hit"] and got["response"] == 17
    assert error("cache_import", entries=[{"response": 1}])["type"] == "ConfigError"


def test_remember_runs_write_through_cognition_with_history() -> None:
    first = call(
        "memory_remember", key="deploy.staging.port", content="Staging listens on port 8080"
    )
    assert (first["action"], first["key"]) == ("augment", "deploy.staging.port")
    assert first["summary"] == "augmented: remembered 'deploy.staging.port' (a new fact)"
    # A contradicting write under another phrasing of the key and the text: superseded.
    second = call(
        "memory_remember", key="Deploy_Staging_Port", content="The staging server now uses 9090"
    )
    assert (second["action"], second["key"]) == ("supersede", "Deploy_Staging_Port")
    assert second["summary"] == (
        "superseded 'deploy.staging.port' by 'Deploy_Staging_Port' 8080 → 9090"
    )
    archived = second["archived_key"]
    assert archived.startswith("deploy.staging.port@")
    listed = call("memory_list")
    assert [(i["key"], i["content"]) for i in listed["items"]] == [
        ("Deploy_Staging_Port", "The staging server now uses 9090")
    ]
    assert listed["count"] == 1  # the old value is archived: never listed nor recalled

    async def versions() -> list[str]:
        store = await memory_api.tab_memory().store()
        return [r.content for r in await history(store, "Deploy_Staging_Port")]

    assert asyncio.run(versions()) == ["Staging listens on port 8080"]
    # The same fact again is confirmed, not stored twice.
    again = call(
        "memory_remember", key="deploy-staging-port", content="The staging server now uses 9090."
    )
    assert (again["action"], again["key"]) == ("confirm", "Deploy_Staging_Port")
    assert call("memory_list")["count"] == 1
    # Forgetting a memory forgets what it replaced too.
    assert call("memory_forget", key="Deploy_Staging_Port") == {"forgotten": True}
    assert asyncio.run(versions()) == []

    async def archive() -> object:
        store = await memory_api.tab_memory().store()
        return await store.get(archived)

    assert asyncio.run(archive()) is None
    put = call("memory_remember", key="k", content="plain value", mode="put")
    assert put["action"] == "put" and put["summary"] == "put: remembered 'k'"
    assert "mode" in error("memory_remember", key="k", content="x", mode="sideways")["message"]
    assert "aliases" in error("memory_remember", key="k", content="x", aliases="a")["message"]
