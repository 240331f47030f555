"""The Cache panel's re-embedding after a new model reports progress and cancels (issue 39,
item 3), natively: ``cache_lookup`` and ``cache_store`` first embed the cached questions the
model has not embedded yet, as the cancellable ``cache`` operation (``cache-progress``
events). A cancel stops it between batches: the lookup serves nothing, the store stores
nothing, the questions embedded so far keep the new model's vectors and the next call embeds
the rest.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from evermind.studio import memory_api, rpc
from evermind.studio.tab_memory import _EMBED_BATCH
from tests.factories import run_sync, tiny_package
from tests.unit.test_studio_operations import call, no_gpu  # noqa: F401  (fixture)

ENTRIES = [
    {"query": f"What is the status of invoice {i} for client {i % 7}?", "response": f"Paid {i}."}
    for i in range(150)
]


def test_lookup_embeds_cached_questions_with_progress_and_a_cancel_keeps_the_cache_usable(
    no_gpu: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _EMBED_BATCH == 64  # the counts below are in batches of 64
    assert call("cache_import", entries=ENTRIES)["result"]["stored"] == 150
    # A new model: every cached question must be embedded again before a lookup.
    assert call("package_load", data_b64=base64.b64encode(tiny_package()).decode())["ok"]
    events: list[dict[str, Any]] = []
    cancel_after = [64]

    def emitter(line: str) -> None:
        event = json.loads(line)
        if event["event"] != "cache-progress":
            return
        events.append(event)
        if cancel_after and event["done"] >= cancel_after[0]:
            cancel_after.clear()
            assert call("operation_cancel", name="cache")["result"] == {"cancelled": True}

    monkeypatch.setattr(rpc, "_emitter", emitter)
    question = ENTRIES[3]["query"]
    cancelled = call("cache_lookup", query=question)
    assert not cancelled["ok"] and cancelled["error"]["type"] == "Cancelled", cancelled
    assert [(e["done"], e["total"], e["what"]) for e in events] == [
        (0, 150, "lookup"),
        (64, 150, "lookup"),
    ]
    cache = run_sync(memory_api.tab_memory().cache())
    assert cache.semantic
    assert run_sync(cache.pending_vectors()) == 150 - 64
    # The first batch kept its vectors, and they are the new model's; the rest have none.
    keys = list(cache.entries)
    first = [cache.entries[k].query for k in keys[:64]]
    fresh = run_sync(cache._embed(first))
    for key, want in zip(keys[:64], fresh, strict=True):
        got = cache.index.vector(key)
        assert got is not None and max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-5
    assert all(cache.index.vector(k) is None for k in keys[64:])

    # A store cancelled while it embeds stores nothing.
    events.clear()
    cancel_after.append(0)
    said = call("cache_store", query="Who wrote invoice 9000?", response="Ann.")
    assert not said["ok"] and said["error"]["type"] == "Cancelled", said
    assert events[0]["what"] == "store" and events[0]["total"] == 150 - 64
    assert len(cache.entries) == 150 and run_sync(cache.pending_vectors()) == 150 - 64

    # The next lookup embeds the rest and serves by meaning.
    events.clear()
    done = call("cache_lookup", query=question)
    assert done["ok"], done
    assert [(e["done"], e["total"]) for e in events] == [(0, 86), (64, 86), (86, 86)]
    result = done["result"]
    assert result["hit"] and result["response"] == "Paid 3.", result
    assert result["ranked_by"].startswith("semantic"), result["ranked_by"]
    assert run_sync(cache.pending_vectors()) == 0
    assert all(cache.index.vector(k) is not None for k in keys)
    events.clear()
    stored = call("cache_store", query="Who wrote invoice 9000?", response="Ann.")
    assert stored["ok"] and stored["result"]["entries"] == 151, stored
    assert events == []  # nothing left to embed: no progress, no operation
