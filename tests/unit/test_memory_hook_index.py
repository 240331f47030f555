"""The hooks' fast read path (``evermind.memory.hook_index``) over a real SQLite memory file.

The side index must follow every write, forget and expiry of the memory file it shadows, never
create or migrate the memory file, and refuse a file of another schema by name.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from evermind.errors import StorageError
from evermind.memory import MemoryStore
from evermind.memory.hook_index import HookIndex, side_path
from tests.unit.test_memory_helpers import run

NAMESPACE = "default/default"
FACTS = [
    ("pref-editor", "Niamh uses Neovim with LazyVim as her editor.", ["preference"], 0.9),
    ("deploy-host", "Staging deploys go to host tessera-stg-2 on port 8443.", ["infra"], 0.6),
    ("lunch", "The team orders lunch from the noodle place on Fridays.", ["trivia"], 0.2),
]


def remember(memory_file: Path, facts: list[tuple[str, str, list[str], float]]) -> None:
    async def write() -> None:
        store = MemoryStore(memory_file, namespace=NAMESPACE)
        for key, content, tags, importance in facts:
            await store.remember(key, content, tags, importance)
        await store.close()

    run(write())


def test_side_index_follows_writes_forgets_and_expiry(tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.db"
    remember(memory_file, FACTS)
    with HookIndex(memory_file, NAMESPACE) as index:
        assert [h.key for h in index.recall("Neovim editor", 5)] == ["pref-editor"]
        assert index.has("pref-editor") and not index.has("missing")
    assert side_path(memory_file, NAMESPACE).is_file()

    async def change() -> None:
        store = MemoryStore(memory_file, namespace=NAMESPACE)
        await store.forget("pref-editor")
        await store.remember("pref-editor-2", "Niamh moved to Helix as her editor.", (), 0.8)
        await store.remember("short", "Helix tip: the editor keeps a jumplist.", (), 0.5, ttl=0.001)
        await store.close()

    run(change())
    time.sleep(0.01)  # past the 1 ms TTL: on a fast disk the writes above take less
    with HookIndex(memory_file, NAMESPACE) as index:
        assert [h.key for h in index.recall("editor", 5)] == ["pref-editor-2"]
        assert [m.key for m in index.digest(2)] == ["pref-editor-2", "deploy-host"]
        assert not index.has("pref-editor")  # forgotten
        assert not index.has("short")  # expired
    with HookIndex(memory_file, "other/namespace") as index:
        assert index.digest(5) == [] and index.recall("editor", 5) == []
        assert not index.has("pref-editor-2")


def test_missing_or_foreign_memory_file_is_refused_and_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(StorageError, match="does not exist"):
        HookIndex(missing, NAMESPACE)
    assert not missing.exists()
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (99)")
    conn.close()
    with pytest.raises(StorageError, match="schema version 99"):
        HookIndex(foreign, NAMESPACE)


def test_the_mcp_layer_never_reads_memory_tables() -> None:
    """The hooks and tools go through memory's API; only ``memory/`` holds SQL on its files."""
    import re

    import evermind

    mcp = Path(evermind.__file__).parent / "mcp"
    sql = re.compile(r"\b(FROM|INTO|UPDATE|JOIN)\s+(memories|namespaces|archive|vectors)\b", re.I)
    found = [
        f"{path.name}: {match.group(0)}"
        for path in sorted(mcp.rglob("*.py"))
        for match in sql.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, found


#: The issue's store (issue 38): "use" is in every memory, the prompt's other words in one.
USE_EVERYWHERE = [
    ("staging-port", "The staging deploy uses port 8443.", [], 0.5),
    ("pnpm", "We use pnpm, not npm, in every repository.", [], 0.5),
    ("tabs", "Use tabs for indentation in the Go code.", [], 0.5),
]


def test_a_memory_matching_only_on_words_most_memories_hold_is_never_recalled(
    tmp_path: Path,
) -> None:
    memory_file = tmp_path / "memory.db"
    remember(memory_file, USE_EVERYWHERE)
    with HookIndex(memory_file, NAMESPACE) as index:
        prompt = "Which port does the staging deploy use?"
        assert [h.key for h in index.recall(prompt, 5)] == ["staging-port"]
        assert index.recall("What should I use?", 5) == []  # "use": in all three
        assert [h.key for h in index.recall("How do I indent Go code?", 5)] == ["tabs"]


def test_the_floor_counts_the_memories_of_the_store(tmp_path: Path) -> None:
    """One memory: its words are its own. Two sharing a word: that word tells them apart from
    nothing, so it alone recalls neither; a word held by one of them does."""
    lone = tmp_path / "lone.db"
    remember(lone, USE_EVERYWHERE[:1])
    with HookIndex(lone, NAMESPACE) as index:
        assert [h.key for h in index.recall("which port?", 5)] == ["staging-port"]
    pair = tmp_path / "pair.db"
    remember(pair, USE_EVERYWHERE[1:])
    with HookIndex(pair, NAMESPACE) as index:
        assert index.recall("use", 5) == []
        assert [h.key for h in index.recall("use pnpm", 5)] == ["pnpm"]


def test_every_store_answers_the_hooks_question_with_the_same_floor(tmp_path: Path) -> None:
    """``MemoryStore.recall_prompt``: a SQLite store answers from the FTS5 side index (what
    the hooks read), an in-process store from its snapshot; both keep the relevance floor."""
    from evermind.memory import InMemoryBackend

    memory_file = tmp_path / "memory.db"
    remember(memory_file, USE_EVERYWHERE)

    async def ask(store: MemoryStore) -> dict[str, list[str]]:
        try:
            for key, content, tags, importance in USE_EVERYWHERE:
                if await store.get(key) is None:
                    await store.remember(key, content, tags, importance)
            prompts = ["Which port does the staging deploy use?", "What should I use?"]
            prompts += ["How do I indent Go code?"]
            return {p: [h.key for h in await store.recall_prompt(p, 5)] for p in prompts}
        finally:
            await store.close()

    on_file = run(ask(MemoryStore(memory_file, namespace=NAMESPACE)))
    in_process = run(ask(MemoryStore(InMemoryBackend(NAMESPACE))))
    with HookIndex(memory_file, NAMESPACE) as index:
        hooks = {p: [h.key for h in index.recall(p, 5)] for p in on_file}
    assert on_file == hooks == in_process, (on_file, hooks, in_process)
    assert on_file["What should I use?"] == []
    assert side_path(memory_file, NAMESPACE).is_file()  # the store's answer built the side index
