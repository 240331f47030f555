"""The Data panel's files into the tab's memory natively (``memory_ingest`` and friends).

The session's storage port is ``MemoryKV`` here (IndexedDB in the tab); the handlers, the
ingest pipeline and the KV backend are the code the tab runs. No model: lexical recall.
tests/browser/test_studio_data_memory.py drives the same calls from the Data panel.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from evermind.studio import api, memory_api, rpc

NOTES = """# Deploy notes

## Staging

The staging cluster is called heron-7 and deploys every night at 02:00 UTC.

## Rollback

Roll back with `evermind deploy --undo`; it keeps the last three releases.
"""
TICKETS = "id,subject,body\n1,Login loop,Clearing the cookie named em_sid fixes the login loop.\n"


@pytest.fixture(autouse=True)
def fresh_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(rpc, "_session", None)
    monkeypatch.setattr(memory_api, "_tab", None)
    rpc.set_emitter(lambda e: events.append(json.loads(e)))
    yield events
    rpc.set_emitter(None)


def envelope(fn: str, **kwargs: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    return out


def call(fn: str, **kwargs: Any) -> Any:
    out = envelope(fn, **kwargs)
    assert out["ok"], f"{fn} failed: {out['error']}"
    return out["result"]


def b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode()


def files(**named: str) -> list[dict[str, str]]:
    return [{"name": n.replace("_", "."), "data_b64": b64(t)} for n, t in named.items()]


def test_files_go_to_memory_with_progress_and_recall_finds_them(
    fresh_session: list[dict[str, Any]],
) -> None:
    report = call("memory_ingest", files=files(notes_md=NOTES, tickets_csv=TICKETS))
    assert report["namespace"] == "studio" and report["files"] == ["notes.md", "tickets.csv"]
    assert report["added"] == report["chunks"] >= 3
    assert (report["updated"], report["deleted"], report["unchanged"]) == (0, 0, 0)
    progress = [e for e in fresh_session if e["event"] == "memory-ingest-progress"]
    assert progress[0]["done"] == 0 and progress[-1]["done"] == progress[-1]["total"]
    assert {e["total"] for e in progress} == {report["chunks"]}
    dones = [e["done"] for e in progress]
    assert dones == sorted(dones) and len(set(dones)) >= 3, dones  # one step per file
    hits = call("memory_recall", query="which cookie fixes the login loop?")["hits"]
    assert hits[0]["source"] == "tickets.csv" and "em_sid" in hits[0]["content"]
    assert "ingest" in hits[0]["tags"] and "studio-data" in hits[0]["tags"]
    listed = call("memory_sources")["sources"]
    assert [(s["source"], s["kind"], s["origin"]) for s in listed] == [
        ("notes.md", "markdown", "upload"),
        ("tickets.csv", "csv", "upload"),
    ]


def test_a_changed_file_rewrites_only_its_changed_chunks_and_forget_removes_it() -> None:
    first = call("memory_ingest", files=files(notes_md=NOTES))
    again = call("memory_ingest", files=files(notes_md=NOTES))
    assert again["unchanged"] == first["chunks"] and again["added"] == again["updated"] == 0
    assert again["changed_sources"] == []
    changed = NOTES.replace("heron-7", "osprey-2")
    report = call("memory_ingest", files=files(notes_md=changed))
    assert report["updated"] == 1 and report["added"] == report["deleted"] == 0
    assert report["unchanged"] == first["chunks"] - 1
    assert "osprey-2" in call("memory_recall", query="staging cluster name")["hits"][0]["content"]
    assert call("memory_recall", query="heron-7")["hits"] == []
    shorter = changed.split("## Rollback")[0]
    report = call("memory_ingest", files=files(notes_md=shorter))
    assert report["deleted"] >= 1 and report["added"] == 0
    gone = call("memory_forget_source", source="notes.md")
    assert gone["forgotten"] and gone["deleted"] == report["chunks"]
    assert call("memory_sources")["sources"] == []
    assert call("memory_recall", query="staging cluster osprey-2")["hits"] == []
    assert call("memory_forget_source", source="notes.md")["forgotten"] is False


def test_a_namespace_keeps_its_chunks_apart() -> None:
    call("memory_ingest", files=files(tickets_csv=TICKETS), namespace="support")
    assert call("memory_recall", query="login loop cookie")["hits"] == []
    hits = call("memory_recall", query="login loop cookie", namespace="support")["hits"]
    assert hits and hits[0]["source"] == "tickets.csv"
    assert call("memory_list", namespace="support")["count"] == 1
    assert [s["source"] for s in call("memory_sources", namespace="support")["sources"]] == [
        "tickets.csv"
    ]


def test_bad_input_is_refused_in_words_and_nothing_is_written() -> None:
    bad_csv = 'id,body\n1,"never closed\n'
    out = envelope("memory_ingest", files=files(notes_md=NOTES, broken_csv=bad_csv))
    assert not out["ok"] and "broken.csv" in out["error"]["message"]
    assert call("memory_sources")["sources"] == []  # the good file was not written either
    out = envelope("memory_ingest", files=[{"name": "photo.png", "data_b64": b64("x")}])
    assert "unknown type .png" in out["error"]["message"]
    out = envelope("memory_ingest", files=files(notes_md=NOTES), namespace="has space")
    assert out["error"]["type"] == "InputError" and "namespace" in out["error"]["message"]
    out = envelope("memory_ingest", files=[{"name": "a.md", "data_b64": "%%%"}])
    assert "not base64" in out["error"]["message"]
    assert "non-empty list" in envelope("memory_ingest", files=[])["error"]["message"]
