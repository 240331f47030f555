"""Lossless compaction and restore: the library, the hooks, and the tools over MCP.

A real tiny `.evermind` model is trained for a few seconds on :data:`FACTS` so it memorises
them (its greedy continuations reproduce each fact); noise texts it never saw fail the probe.
Real SQLite files, the real hook entry point and a real ``evermind mcp`` subprocess talked to
by the official ``mcp`` SDK client.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver.exceptions import ToolError

import evermind
from evermind.errors import ConfigError, StorageError
from evermind.job import JobConfig, export_package, split, tokenize, train_tokenizer
from evermind.mcp import hook
from evermind.mcp.compact_tools import CompactTools
from evermind.memory import MemoryStore
from evermind.memory.archive import LOST_NOTE, Archive, StubResolver, text_hash
from evermind.memory.compaction import compact, forget, parse_dump, restore
from evermind.memory.stubs import is_stub, make_stub
from evermind.model.init import init_params
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import TrainConfig, Trainer
from tests import procs
from tests.factories import FIXED_TIME, run_sync, tiny_config
from tests.runtime.test_mcp_server import stdio_client, text_of

FACTS = [
    "The staging database listens on port 6543.",
    "Alice owns the billing service and reviews its releases.",
    "Deploys to production happen on Tuesday mornings only.",
    "The office wifi password rotates every month.",
    "Bob prefers tabs over spaces in every Makefile.",
    "The nightly backup job writes to the vault bucket.",
]
NOISE = [
    "Quixotic zebras juggle marmalade under violet lanterns.",
    "Seventeen kettles whistled a forgotten hymn yesterday.",
]
VERSION = "3"


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `.evermind` package (version 3) trained until it recites :data:`FACTS`."""
    text = ("\n".join(FACTS) + "\n") * 40
    tok = train_tokenizer(text, 300)
    config = tiny_config(tok, d_model=32, n_layer=2)
    train = TrainConfig(
        steps=200, batch_size=4, seq_len=32, lr=1e-2, warmup_steps=5, eval_every=0, seed=0
    )
    job = JobConfig(name="facts", version=VERSION, train=train)
    backend = CpuBackend(config, init_params(config, 0), job.train)
    ids, held = split(job, tokenize(tok, text))
    result = run_sync(Trainer(backend, ids, held, job.train).run())
    data = export_package(
        job, config, backend.params(), tok, result, "facts", "cpu", created_at=FIXED_TIME
    )
    path = tmp_path_factory.mktemp("model") / "facts.evermind"
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def model(model_file: Path) -> Any:
    return evermind.load(model_file)


async def _fill(memory_file: Path, texts: dict[str, str]) -> MemoryStore:
    store = MemoryStore(memory_file, namespace="t")
    for key, text in texts.items():
        await store.remember(key, text, ("fact",), 0.6)
    return store


def test_compacts_absorbed_facts_and_leaves_probe_failures_untouched(
    tmp_path: Path, model: Any
) -> None:
    texts = {"fact-0": FACTS[0], "fact-1": FACTS[1], "noise-0": NOISE[0], "noise-1": NOISE[1]}

    async def scenario() -> None:
        store = await _fill(tmp_path / "m.db", texts)
        try:
            report = await compact(store, model)
            compacted = dict(report.compacted)
            skipped = dict(report.skipped)
            assert set(compacted) == {"fact-0", "fact-1"}, report
            assert compacted["fact-0"] == make_stub(VERSION, FACTS[0])
            assert set(skipped) == {"noise-0", "noise-1"}
            assert all(why.startswith("probe failed: blanked") for why in skipped.values())
            for key in ("noise-0", "noise-1"):
                record = await store.get(key)
                assert record is not None and record.content == texts[key]
                assert "compacted" not in record.meta
            stubbed = await store.get("fact-0")
            assert stubbed is not None and is_stub(stubbed.content)
            shown = StubResolver.of(store).shown(stubbed).content
            assert shown.startswith(FACTS[0]) and stubbed.content in shown
            assert Archive(tmp_path / "m.db").count("t") == 2
            assert report.backup == tmp_path / "m.db.bak.1" and report.backup.is_file()
            again = await compact(store, model)  # never re-stub a stub
            assert not again.compacted
            assert dict(again.skipped)["fact-0"].startswith("already a stub")
        finally:
            await store.close()

    asyncio.run(scenario())


def test_crash_between_archive_and_stub_loses_nothing(
    tmp_path: Path, model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_file = tmp_path / "m.db"

    async def crash(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        raise StorageError("simulated crash after the archive commit")

    async def scenario() -> None:
        store = await _fill(memory_file, {"fact-2": FACTS[2]})
        try:
            with monkeypatch.context() as patch:
                patch.setattr(MemoryStore, "write", crash)
                with pytest.raises(StorageError, match="simulated crash"):
                    await compact(store, model)
            record = await store.get("fact-2")
            assert record is not None and record.content == FACTS[2]  # untouched
            archived = Archive(memory_file).original("t", "fact-2", text_hash(FACTS[2]))
            assert archived == FACTS[2]
            report = await compact(store, model)  # the retry completes, archive merged
            assert [key for key, _ in report.compacted] == ["fact-2"]
            assert Archive(memory_file).count("t") == 1
            stubbed = await store.get("fact-2")
            assert stubbed is not None
            assert StubResolver.of(store).shown(stubbed).content.startswith(FACTS[2])
        finally:
            await store.close()

    asyncio.run(scenario())


KILLER = """
import asyncio, os, sys
import evermind
from evermind.memory import MemoryStore
from evermind.memory.compaction import compact

async def killed(self, *args, **kwargs):
    os._exit(9)  # the process dies after the archive commit, before the stub is written

async def main():
    store = MemoryStore(sys.argv[1], namespace="t")
    MemoryStore.write = killed
    await compact(store, evermind.load(sys.argv[2]))

asyncio.run(main())
"""


def test_killed_between_archive_and_stub_loses_nothing(tmp_path: Path, model_file: Path) -> None:
    memory_file = tmp_path / "m.db"

    async def fill() -> None:
        await (await _fill(memory_file, {"fact-1": FACTS[1]})).close()

    asyncio.run(fill())
    killed = procs.run(
        [sys.executable, "-c", KILLER, str(memory_file), str(model_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == 9, killed.stderr
    with sqlite3.connect(memory_file) as conn:
        row = conn.execute("SELECT content FROM memories WHERE key = 'fact-1'").fetchone()
    conn.close()
    assert row == (FACTS[1],)
    assert Archive(memory_file).original("t", "fact-1", text_hash(FACTS[1])) == FACTS[1]


def test_rewrites_keep_the_archive_and_forget_deletes_it(tmp_path: Path, model: Any) -> None:
    async def scenario() -> None:
        store = await _fill(tmp_path / "m.db", {"fact-3": FACTS[3]})
        archive = Archive(tmp_path / "m.db")
        try:
            await compact(store, model)
            await store.remember("fact-3", "something else entirely")  # a rewrite
            assert archive.original("t", "fact-3", text_hash(FACTS[3])) == FACTS[3]
            assert await forget(store, "fact-3")
            assert archive.original("t", "fact-3", text_hash(FACTS[3])) is None
            assert archive.count("t") == 0
            assert not await forget(store, "fact-3")  # nothing left: says so, no error
        finally:
            await store.close()

    asyncio.run(scenario())


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    facts=st.lists(st.sampled_from(FACTS), min_size=1, max_size=4, unique=True),
    noise=st.lists(
        st.text(alphabet="abcdefghij klmnop\nXYZ.,", min_size=1, max_size=60).filter(str.strip),
        max_size=3,
    ),
    keys=st.lists(
        st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=8, max_size=8, unique=True
    ),
)
def test_compact_recall_restore_loses_no_text(
    model: Any, facts: list[str], noise: list[str], keys: list[str]
) -> None:
    originals = dict(zip(keys, facts + noise, strict=False))

    async def scenario(folder: Path) -> None:
        store = await _fill(folder / "m.db", originals)
        try:
            report = await compact(store, model)
            assert {key for key, _ in report.compacted} >= {
                key for key, text in originals.items() if text in facts
            }, report
            dump = []
            resolver = StubResolver.of(store)
            for key, text in originals.items():
                record = await store.get(key)
                assert record is not None
                shown = resolver.shown(record).content
                assert shown.startswith(text), (key, shown)
                dump.append(
                    {"key": key, "content": resolver.resolve(key, record.content, record.meta).text}
                )
            for fact in facts:
                hits = [resolver.shown(hit) for hit in await store.recall(fact, top_k=10)]
                assert any(hit.content.startswith(fact) for hit in hits), fact
            report = await restore(store, dump)
            assert not report.created
            for key, text in originals.items():
                record = await store.get(key)
                assert record is not None and record.content == text
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(scenario(Path(folder)))


@pytest.mark.parametrize(
    ("dump", "message"),
    [
        ("{not json", "not JSON"),
        ({"key": "a"}, "must be a list"),
        (["a"], "entry 0 is a str"),
        ([{"content": "x"}], "entry 0 has no string 'key'"),
        ([{"id": "k", "text": 5}], "entry 0 .'k'. has no string 'content'"),
        ([{"key": "ok", "content": "x"}, {"key": "", "content": "y"}], "entry 1"),
        ([{"key": "k", "content": "a\x00"}], "entry 0 .'k'.: memory content: holds a NUL"),
        ([{"key": "k", "content": " "}], "entry 0 .'k'.: memory content: empty"),
    ],
)
def test_bad_dumps_are_named(dump: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_dump(dump)


def test_restore_accepts_id_text_and_json(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = await _fill(tmp_path / "m.db", {"a": "old a"})
        try:
            report = await restore(
                store, json.dumps([{"id": "a", "text": "new a"}, {"id": "b", "text": "b"}])
            )
            assert (report.restored, report.created) == (["a"], ["b"])
            record = await store.get("a")
            assert record is not None and record.content == "new a" and record.tags == ("fact",)
        finally:
            await store.close()

    asyncio.run(scenario())


def test_without_a_model_compaction_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = await _fill(tmp_path / "m.db", {"a": FACTS[0]})
        try:
            with pytest.raises(ToolError, match="compaction needs a model"):
                await CompactTools(store, None).compact()
            record = await store.get("a")
            assert record is not None and record.content == FACTS[0]
        finally:
            await store.close()

    asyncio.run(scenario())


def _hook(memory_file: Path, event: str, payload: dict[str, Any]) -> str:
    parser = argparse.ArgumentParser()
    hook.add_arguments(parser)
    args = parser.parse_args([event, "--memory-file", str(memory_file), "--namespace", "x"])
    out, err = io.StringIO(), io.StringIO()
    assert hook.run(args, io.StringIO(json.dumps(payload)), out, err) == 0
    return out.getvalue()


def test_hooks_inject_originals_and_drop_lost_stubs(tmp_path: Path, model: Any) -> None:
    memory_file = tmp_path / "m.db"
    namespace = hook.store_namespace(hook.DEFAULT_TENANT, "x")

    async def scenario() -> None:
        store = MemoryStore(memory_file, namespace=namespace)
        try:
            await store.remember("fact-0", FACTS[0], ("fact",), 0.9)
            await compact(store, model)
            lost = make_stub(VERSION, "The staging cache listens on port 7000.")
            await store.remember("lost-0", lost, ("fact",), 0.9)
            # Other memories beside them: the hooks inject only on words that tell memories
            # apart (memory/hook_index: the relevance floor), as in any real store.
            for n, text in enumerate([*FACTS[1:4], *NOISE]):
                await store.remember(f"other-{n}", text, ("fact",), 0.5)
        finally:
            await store.close()

    asyncio.run(scenario())
    with sqlite3.connect(memory_file) as conn:
        assert is_stub(
            conn.execute("SELECT content FROM memories WHERE key='fact-0'").fetchone()[0]
        )
    conn.close()
    prompt = {"hook_event_name": "UserPromptSubmit", "prompt": "which port does staging listen on"}
    context = json.loads(_hook(memory_file, "user-prompt-submit", prompt))
    text = context["hookSpecificOutput"]["additionalContext"]
    assert FACTS[0] in text and "compacted as: [absorbed" in text  # the original, then the stub
    assert "lost-0" not in text and "7000" not in text and LOST_NOTE not in text
    digest = json.loads(_hook(memory_file, "session-start", {"hook_event_name": "SessionStart"}))
    assert FACTS[0] in digest["hookSpecificOutput"]["additionalContext"]


def test_compact_and_restore_over_mcp(tmp_path: Path, model_file: Path) -> None:
    memory_file = tmp_path / "memory.db"

    async def scenario() -> None:
        async with stdio_client(memory_file, "--model", str(model_file)) as client:
            for key, text in (("fact-4", FACTS[4]), ("fact-5", FACTS[5]), ("noise", NOISE[0])):
                result = await client.call_tool("memory_remember", {"key": key, "content": text})
                assert not result.is_error, text_of(result)
            result = await client.call_tool("memory_compact", {})
            answer = text_of(result)
            assert not result.is_error, answer
            assert "compacted 2, skipped 1" in answer
            assert f"compacted 'fact-4' -> {make_stub(VERSION, FACTS[4])}" in answer
            assert "skipped 'noise': probe failed" in answer
            got = text_of(await client.call_tool("memory_get", {"key": "fact-4"}))
            assert FACTS[4] in got and f"[compacted as: {make_stub(VERSION, FACTS[4])}]" in got
            recalled = text_of(await client.call_tool("memory_recall", {"query": "vault bucket"}))
            assert f"{FACTS[5]} [compacted as: [absorbed→Evermind v3]" in recalled, recalled
            bad = await client.call_tool("memory_restore", {"dump": '[{"key": 3}]'})
            assert bad.is_error and "entry 0 has no string 'key'" in text_of(bad)
            dump = [{"key": "fact-4", "content": FACTS[4]}, {"id": "fact-5", "text": FACTS[5]}]
            done = await client.call_tool("memory_restore", {"dump": dump})
            assert "restored 2, created 0, unchanged 0" in text_of(done), text_of(done)
            got = text_of(await client.call_tool("memory_get", {"key": "fact-4"}))
            assert FACTS[4] in got and "absorbed" not in got
        async with stdio_client(memory_file) as client:
            refused = await client.call_tool("memory_compact", {})
            assert refused.is_error and "compaction needs a model" in text_of(refused)

    asyncio.run(scenario())


def _archive_rows(memory_file: Path, key: str) -> int:
    archive = Archive(memory_file)
    if not archive.path.is_file():
        return 0
    with sqlite3.connect(archive.path) as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM archive WHERE key = ?", (key,)).fetchone()
    conn.close()
    return int(count)


def test_a_stub_resolves_by_content_hash_never_to_another_text_with_its_first_line(
    tmp_path: Path, model_file: Path
) -> None:
    """Compact A, restore B (A's first line), compact, restore A, compact: A reads back."""
    memory_file = tmp_path / "memory.db"
    a_text = FACTS[1]
    b_text = f"{FACTS[1]}\n{FACTS[2]}"  # the same first line, so the same stub

    async def scenario() -> None:
        async with stdio_client(memory_file, "--model", str(model_file)) as client:

            async def compact_owner() -> None:
                answer = text_of(await client.call_tool("memory_compact", {"keys": ["owner"]}))
                assert "compacted 1, skipped 0" in answer, answer

            async def restore_owner(text: str) -> None:
                dump = [{"key": "owner", "content": text}]
                answer = text_of(await client.call_tool("memory_restore", {"dump": dump}))
                assert "restored 1" in answer, answer

            await client.call_tool("memory_remember", {"key": "owner", "content": a_text})
            await compact_owner()
            await restore_owner(b_text)
            await compact_owner()
            await restore_owner(a_text)
            await compact_owner()
            got = text_of(await client.call_tool("memory_get", {"key": "owner"}))
            assert a_text in got and FACTS[2] not in got, got
            assert f"[compacted as: {make_stub(VERSION, a_text)}]" in got
            recalled = text_of(await client.call_tool("memory_recall", {"query": "billing"}))
            assert a_text in recalled and FACTS[2] not in recalled, recalled

    asyncio.run(scenario())
    with sqlite3.connect(memory_file) as conn:
        meta = json.loads(conn.execute("SELECT meta FROM memories WHERE key='owner'").fetchone()[0])
    conn.close()
    assert meta["compacted"]["sha256"] == text_hash(a_text)  # what is shown is what is linked


def test_forget_deletes_the_archived_original_and_a_typed_stub_brings_nothing_back(
    tmp_path: Path, model_file: Path
) -> None:
    """Compact, memory_forget, then remember the stub line: the forgotten text stays gone."""
    memory_file = tmp_path / "memory.db"
    text = f"{FACTS[3]}\n{FACTS[4]}"
    stub = make_stub(VERSION, text)

    async def scenario() -> None:
        async with stdio_client(memory_file, "--model", str(model_file)) as client:
            await client.call_tool("memory_remember", {"key": "wifi", "content": text})
            answer = text_of(await client.call_tool("memory_compact", {"keys": ["wifi"]}))
            assert f"compacted 'wifi' -> {stub}" in answer, answer
            assert _archive_rows(memory_file, "wifi") == 1
            assert "forgot 'wifi'" in text_of(
                await client.call_tool("memory_forget", {"key": "wifi"})
            )
            assert _archive_rows(memory_file, "wifi") == 0  # forgotten means forgotten
            typed = await client.call_tool("memory_remember", {"key": "wifi", "content": stub})
            assert not typed.is_error, text_of(typed)
            got = text_of(await client.call_tool("memory_get", {"key": "wifi"}))
            assert FACTS[4] not in got and LOST_NOTE in got, got
            recalled = text_of(await client.call_tool("memory_recall", {"query": "wifi password"}))
            assert FACTS[4] not in recalled, recalled

    asyncio.run(scenario())


def test_a_stub_line_written_over_a_compacted_memory_is_not_linked(
    tmp_path: Path, model: Any
) -> None:
    """Remembering a stub line under a key whose archive holds a text never resolves to it."""

    async def scenario() -> None:
        text = f"{FACTS[3]}\n{FACTS[4]}"
        store = await _fill(tmp_path / "m.db", {"wifi": text})
        try:
            await compact(store, model)
            await store.remember("wifi", "Rotated: the wifi password now lives in the vault.")
            await store.remember("wifi", make_stub(VERSION, text))  # no link to the archive
            record = await store.get("wifi")
            assert record is not None
            assert StubResolver.of(store).resolve(record.key, record.content, record.meta).lost
        finally:
            await store.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "empty"),
        (" \n\t ", "empty"),
        ("a\x00b", "NUL character at character 1"),
        ("x" * 30_000, "has 30000 characters, expected at most 20000"),
    ],
    ids=["empty", "blank", "nul", "30000-chars"],
)
def test_restore_refuses_what_remember_refuses(tmp_path: Path, content: str, reason: str) -> None:
    """One validation for both write tools: the same reason, and nothing written by either."""
    memory_file = tmp_path / "memory.db"

    async def scenario() -> None:
        async with stdio_client(memory_file) as client:
            remembered = await client.call_tool("memory_remember", {"key": "k", "content": content})
            assert remembered.is_error and reason in text_of(remembered), text_of(remembered)
            dump = [{"key": "ok", "content": "a fine text"}, {"key": "k", "content": content}]
            restored = await client.call_tool("memory_restore", {"dump": dump})
            assert restored.is_error, text_of(restored)
            assert "entry 1 ('k')" in text_of(restored) and reason in text_of(restored)
            for key in ("k", "ok"):  # the dump is refused whole
                missing = await client.call_tool("memory_get", {"key": key})
                assert missing.is_error and "no memory has the key" in text_of(missing)

    asyncio.run(scenario())
