"""Long Studio operations cancel cooperatively (evermind.studio.operations), natively.

Compare's calibration embeds corpus sentences in batches, with a progress event after each
batch; ``operation_cancel`` stops it at the next batch with ``Cancelled`` and nothing of it
is kept, so the next Compare measures afresh and completes.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from evermind import gpu
from evermind.errors import ConfigError, NoAdapterError
from evermind.studio import api, memory_api, operations, rpc
from evermind.studio import session as session_module
from evermind.studio.operations import Cancelled, operation
from evermind.train.corpus import harvest_stdlib_docstrings
from tests.factories import run_sync, tiny_package

CORPUS = " ".join(
    f"Sentence number {i} talks about topic {i % 7} in its own words." for i in range(80)
)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*, fresh: bool = False) -> gpu.Device:
        raise NoAdapterError("no WebGPU here")

    monkeypatch.setattr(gpu, "open_device", refuse)
    monkeypatch.setattr(rpc, "_session", None, raising=False)


def call(fn: str, /, **kwargs: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = json.loads(run_sync(api.call(fn, json.dumps(kwargs))))
    return envelope


def test_names_are_checked_and_nothing_running_is_not_cancelled() -> None:
    with pytest.raises(ConfigError, match="unknown name 'bogus'"):
        operations.cancel("bogus")
    assert operations.cancel("similarity") is False
    with operation("similarity") as op:
        assert operations.cancel("similarity") is True
        with pytest.raises(Cancelled, match="similarity: cancelled"):
            op.check()
    assert operations.cancel("similarity") is False  # the block ended: nothing runs
    error = call("operation_cancel", name="bogus")
    assert not error["ok"] and error["error"]["type"] == "ConfigError", error


def test_compare_reports_progress_and_a_cancel_keeps_nothing(
    no_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert call("corpus_add", name="notes.txt", text=CORPUS)["ok"]
    assert call("package_load", data_b64=base64.b64encode(tiny_package()).decode())["ok"]
    events: list[dict[str, Any]] = []
    cancel_at: list[int] = [8]

    def emitter(text: str) -> None:
        event = json.loads(text)
        if event["event"] != "similarity-progress":
            return
        events.append(event)
        if cancel_at and event["done"] >= cancel_at[0]:
            cancel_at.clear()
            # What the page's Cancel button sends, mid-run.
            assert call("operation_cancel", name="similarity")["result"] == {"cancelled": True}

    monkeypatch.setattr(rpc, "_emitter", emitter)
    cancelled = call("similarity", a="topic one", b="topic two")
    assert not cancelled["ok"] and cancelled["error"]["type"] == "Cancelled", cancelled
    total = events[0]["total"]
    assert total > 16 and events[0]["done"] == 0
    assert max(e["done"] for e in events) < total, events  # it stopped before the end
    assert rpc.session()._similarity is None  # nothing half-measured was kept

    events.clear()
    done = call("similarity", a="topic one", b="topic two")
    assert done["ok"], done
    assert [e["done"] for e in events] == sorted({0, *range(8, total, 8), total}), events
    assert done["result"]["pairs"] > 0


def test_the_default_corpus_reports_bytes_and_a_cancel_adds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rpc, "_session", None, raising=False)
    monkeypatch.setattr(api, "CORPUS_PROGRESS_S", 0.0)  # an event per docstring: no timing
    events: list[dict[str, Any]] = []
    cancel = [True]

    def emitter(text: str) -> None:
        event = json.loads(text)
        if event["event"] != "corpus-progress":
            return
        events.append(event)
        if cancel and event["done"] > 0:
            cancel.clear()
            assert call("operation_cancel", name="corpus")["result"] == {"cancelled": True}

    monkeypatch.setattr(rpc, "_emitter", emitter)
    cancelled = call("corpus_default", max_bytes=60_000)
    assert not cancelled["ok"] and cancelled["error"]["type"] == "Cancelled", cancelled
    assert 0 < max(e["done"] for e in events) < 60_000
    assert call("corpus_info")["result"]["bytes"] == 0  # nothing was added

    events.clear()
    loaded = call("corpus_default", max_bytes=60_000)
    assert loaded["ok"], loaded
    done = [e["done"] for e in events]
    assert done == sorted(done) and done[0] == 0 and done[-1] <= 60_000
    assert all(e["total"] == 60_000 for e in events)
    # The same text the one-shot harvest makes (the CLI's and adapt's default corpus).
    assert loaded["result"]["bytes"] == len(harvest_stdlib_docstrings(60_000).encode())


def test_tokenizer_training_cancels_and_keeps_the_tokenizer_it_had(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rpc, "_session", None, raising=False)
    assert call("corpus_add", name="notes.txt", text=CORPUS * 4)["ok"]
    first = call("tokenizer_train", vocab_size=280)["result"]
    events: list[dict[str, Any]] = []
    cancel = [True]

    def emitter(text: str) -> None:
        event = json.loads(text)
        if event["event"] != "tokenizer-progress":
            return
        events.append(event)
        if cancel and event["done"] < event["total"]:
            cancel.clear()
            assert operations.cancel("tokenizer") is True  # the page's Cancel, mid-training

    monkeypatch.setattr(rpc, "_emitter", emitter)
    cancelled = call("tokenizer_train", vocab_size=400)
    assert not cancelled["ok"] and cancelled["error"]["type"] == "Cancelled", cancelled
    assert events and events[-1]["done"] < events[-1]["total"]
    # The session keeps the tokenizer it had, whole.
    assert call("tokenizer_info")["result"]["vocab_size"] == first["vocab_size"]
    again = call("tokenizer_train", vocab_size=400)
    assert again["ok"] and again["result"]["vocab_size"] > first["vocab_size"], again


def test_the_tokenizer_s_first_pass_lets_a_cancel_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pass (counting the words) reports characters read and stops at a cancel
    before any merge is learned."""
    monkeypatch.setattr(rpc, "_session", None, raising=False)
    text = "\n".join(f"Line {i} says something about item {i % 13}." for i in range(6000))
    assert call("corpus_add", name="lines.txt", text=text)["ok"]
    monkeypatch.setattr(session_module, "COUNT_PIECE_CHARS", 4096)
    events: list[dict[str, Any]] = []
    cancel = [True]

    def emitter(line: str) -> None:
        event = json.loads(line)
        if event["event"] != "tokenizer-progress":
            return
        events.append(event)
        if cancel and event["stage"] == "count" and event["done"] > 0:
            cancel.clear()
            assert operations.cancel("tokenizer") is True  # the page's Cancel, mid-count

    monkeypatch.setattr(rpc, "_emitter", emitter)
    monkeypatch.setattr(time, "perf_counter", _ticking())  # every piece gets its event
    cancelled = call("tokenizer_train", vocab_size=400)
    assert not cancelled["ok"] and cancelled["error"]["type"] == "Cancelled", cancelled
    assert {e["stage"] for e in events} == {"count"}, events  # no merge was begun
    assert 0 < events[-1]["done"] < events[-1]["total"] == len(text), events[-1]
    assert not call("tokenizer_info")["ok"]  # no tokenizer was kept
    events.clear()
    trained = call("tokenizer_train", vocab_size=400)
    assert trained["ok"], trained
    stages = [e["stage"] for e in events]
    # The first pass, then the merges: one after the other.
    assert stages[0] == "count" and stages[-1] == "merge" and stages == sorted(stages), stages


def _ticking() -> Any:
    """A perf_counter that moves 1 s per call (so the 0.2 s throttle never holds back)."""
    clock = [0.0]

    def tick() -> float:
        clock[0] += 1.0
        return clock[0]

    return tick


def test_recall_embeds_stored_memories_with_progress_and_a_cancel_keeps_them_usable(
    no_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [
        {"key": f"note.{i}", "content": f"Note {i} is about topic {i % 9} and item {i}."}
        for i in range(150)
    ]
    assert call("memory_import", entries=entries)["result"]["count"] == 150
    # A new model: every stored memory must be embedded before a recall ranks by meaning.
    assert call("package_load", data_b64=base64.b64encode(tiny_package()).decode())["ok"]
    events: list[dict[str, Any]] = []
    cancel_after = [64]

    def emitter(line: str) -> None:
        event = json.loads(line)
        if event["event"] != "memory-progress":
            return
        events.append(event)
        if cancel_after and event["done"] >= cancel_after[0]:
            cancel_after.clear()
            assert call("operation_cancel", name="memory")["result"] == {"cancelled": True}

    monkeypatch.setattr(rpc, "_emitter", emitter)
    cancelled = call("memory_recall", query="topic 3")
    assert not cancelled["ok"] and cancelled["error"]["type"] == "Cancelled", cancelled
    assert [(e["done"], e["total"], e["what"]) for e in events] == [
        (0, 150, "recall"),
        (64, 150, "recall"),
    ]
    store = run_sync(memory_api.tab_memory().store())
    assert store.pending_vectors() == 150 - 64  # the first batch keeps its vectors

    # A remember cancelled while it embeds writes nothing.
    events.clear()
    cancel_after.append(0)
    said = call("memory_remember", key="user.editor", content="The user edits in Vim.")
    assert not said["ok"] and said["error"]["type"] == "Cancelled", said
    assert events[0]["what"] == "remember" and events[0]["total"] == 150 - 64
    keys = {m["key"] for m in call("memory_list", limit=500)["result"]["items"]}
    assert "user.editor" not in keys and len(keys) == 150

    # The next recall embeds the rest and ranks by meaning.
    events.clear()
    done = call("memory_recall", query="topic 3")
    assert done["ok"], done
    assert [(e["done"], e["total"]) for e in events] == [(0, 86), (64, 86), (86, 86)]
    assert done["result"]["ranked_by"].startswith("semantic"), done["result"]["ranked_by"]
    assert store.pending_vectors() == 0
    events.clear()
    assert call("memory_remember", key="user.editor", content="The user edits in Vim.")["ok"]
    assert events == []  # nothing left to embed: no progress, no operation


def test_a_send_to_memory_cancelled_while_it_embeds_writes_nothing(
    no_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert call("package_load", data_b64=base64.b64encode(tiny_package()).decode())["ok"]
    doc = "\n\n".join(
        f"## Section {i}\n\nRack {i} holds the {i % 5}th switch and cable {i}." for i in range(60)
    )
    files = [{"name": "racks.md", "text": doc}]
    events: list[dict[str, Any]] = []
    cancel = [True]

    def emitter(line: str) -> None:
        event = json.loads(line)
        if event["event"] != "memory-ingest-progress":
            return
        events.append(event)
        if cancel and event["done"] > 0:
            cancel.clear()
            assert call("operation_cancel", name="ingest")["result"] == {"cancelled": True}

    monkeypatch.setattr(rpc, "_emitter", emitter)
    cancelled = call("memory_ingest", files=files)
    assert not cancelled["ok"] and cancelled["error"]["type"] == "Cancelled", cancelled
    assert {e["stage"] for e in events} == {"embed"}
    assert 0 < events[-1]["done"] < events[-1]["total"], events
    # All or nothing: no chunk, no source.
    assert call("memory_sources")["result"]["sources"] == []
    assert call("memory_list", limit=500)["result"]["items"] == []

    events.clear()
    sent = call("memory_ingest", files=files)
    assert sent["ok"], sent
    assert sent["result"]["added"] == sent["result"]["chunks"] == events[-1]["total"]
    assert [e["stage"] for e in events][-1] == "write"
    assert call("memory_sources")["result"]["sources"][0]["source"] == "racks.md"
