"""After a reload the Studio says what it restored, memories and cached answers included
(``session_restore``), natively on the worker's storage port."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evermind.studio import api, memory_api, rpc
from evermind.studio.session import Session
from tests.factories import TEXT, run_sync


def call(fn: str, /, **kwargs: Any) -> Any:
    envelope = json.loads(run_sync(api.call(fn, json.dumps(kwargs))))
    assert envelope["ok"], envelope
    return envelope["result"]


@pytest.fixture
def fresh_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc, "_session", None, raising=False)
    monkeypatch.setattr(memory_api, "_tab", None)


def reload(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new worker session on the same browser storage (what a page reload gets)."""
    kv = run_sync(rpc.session().kv())
    session = Session(rpc.emit)
    session._kv = kv
    monkeypatch.setattr(rpc, "_session", session)
    monkeypatch.setattr(memory_api, "_tab", None)


def test_the_notice_counts_memories_and_cached_answers(
    fresh_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    call("corpus_add", name="notes.txt", text=TEXT)
    call("tokenizer_train", vocab_size=280)
    call("memory_remember", key="user.language", content="The user writes Python.")
    call("memory_remember", key="user.editor", content="The user edits in Neovim.")
    call("cache_store", query="convert 100 USD to EUR", response="About 92 EUR.")
    reload(monkeypatch)
    back = call("session_restore")
    assert back["restored"] and back["memories"] == 2 and back["cached"] == 1
    assert back["notice"].startswith("Restored from this browser's storage: the corpus (1 source")
    assert back["notice"].endswith("; also 2 memories and 1 cached answer."), back["notice"]
    # They are really there: recall and look-up answer from what was restored.
    assert call("memory_recall", query="Neovim")["hits"][0]["key"] == "user.editor"
    assert call("cache_lookup", query="convert 100 USD to EUR")["hit"]


def test_memories_alone_are_said_and_an_empty_browser_says_nothing(
    fresh_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert call("session_restore")["notice"] is None
    call("memory_remember", key="team.lunch", content="Lunch is at noon.")
    reload(monkeypatch)
    back = call("session_restore")
    assert back["notice"] == "Restored from this browser's storage: 1 memory."
    assert back["notice_kind"] == "restored" and not back["restored"]


def test_a_dropped_draft_still_says_what_was_kept() -> None:
    dropped = {
        "notice": "The saved corpus and tokenizer could not be restored (x); they were dropped.",
        "notice_kind": "dropped",
    }
    assert api._kept_notice(dropped, 3, 0) == {"notice": dropped["notice"] + " Kept: 3 memories."}
    assert api._kept_notice(dropped, 0, 0) == {}
