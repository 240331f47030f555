"""The Claude Code hooks on a shared Postgres store, run exactly as Claude Code runs them.

``evermind install-mcp --host claude-code --store postgresql://…`` registers the MCP server and
the four hooks with ``--store URL`` in a temporary home; each test takes the command registered
for an event out of ``~/.claude/settings.json`` and runs it through ``/bin/sh -c`` with the
event's JSON on stdin, against a real Postgres (pgserver, the session's ``postgres`` fixture;
a database of its own per test). The prompt hook recalls through Postgres's own text search
with the relevance floor; the digest, PreCompact's writes and Stop's check go to the same store.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from evermind.mcp.hook import instruction_key
from evermind.mcp.hosts import HostEnv
from evermind.memory.shared_memory import shared_memory
from tests import procs
from tests.runtime.test_mcp_hooks import (
    FACTS,
    assistant,
    base,
    context_of,
    fire,
    registered,
    transcript,
    user,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostEnv:
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("HOME", str(root))
    monkeypatch.setenv("XDG_DATA_HOME", str(root / ".local" / "share"))
    monkeypatch.delenv("EVERMIND_MEMORY_FILE", raising=False)
    return HostEnv.current()


def remember(url: str, facts: list[tuple[str, str, list[str], float]]) -> None:
    async def write() -> None:
        async with shared_memory(url, None, tenant="default", namespace="default") as store:
            for key, content, tags, importance in facts:
                await store.remember(key, content, tags, importance)

    asyncio.run(write())


def stored(url: str) -> dict[str, str]:
    async def read() -> dict[str, str]:
        async with shared_memory(url, None, tenant="default", namespace="default") as store:
            return {r["key"]: r["content"] for r in await store.export()}

    return asyncio.run(read())


def install(url: str) -> dict[str, str]:
    """``evermind install-mcp --host claude-code --store URL``; the hooks it registered."""
    command = [sys.executable, "-m", "evermind.cli", "install-mcp", "--host", "claude-code"]
    done = procs.run(
        [*command, "--store", url],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    hooks = [line for line in done.stdout.splitlines() if line.startswith("claude-hooks")]
    assert len(hooks) == 1 and "created" in hooks[0], done.stdout
    return registered(HostEnv.current())


def test_installed_hooks_recall_digest_and_flush_on_postgres(
    home: HostEnv, database: str, tmp_path: Path
) -> None:
    remember(database, FACTS)
    commands = install(database)
    assert set(commands) == {"SessionStart", "UserPromptSubmit", "PreCompact", "Stop"}
    for command in commands.values():
        assert shlex.split(command)[-2:] == ["--store", database], command
    chat = transcript(tmp_path / "t.jsonl", [user("hi"), assistant("hello")])

    digest = context_of(fire(commands["SessionStart"], base("SessionStart", chat)), "SessionStart")
    assert digest.index("pref-editor") < digest.index("deploy-host") < digest.index("lunch")

    prompt = base("UserPromptSubmit", chat, prompt="Which editor does Niamh use?")
    recalled = context_of(fire(commands["UserPromptSubmit"], prompt), "UserPromptSubmit")
    assert "pref-editor" in recalled and "Neovim" in recalled, recalled
    assert "lunch" not in recalled and "deploy-host" not in recalled, recalled
    staging = fire(commands["UserPromptSubmit"], {**prompt, "prompt": "where do staging go?"})
    assert "tessera-stg-2" in context_of(staging, "UserPromptSubmit")
    unrelated = fire(commands["UserPromptSubmit"], {**prompt, "prompt": "zebra quantum"})
    assert unrelated.returncode == 0 and unrelated.stdout == "", unrelated.stderr

    said = "From now on, always run ruff format before committing."
    chat = transcript(tmp_path / "t2.jsonl", [user(said), assistant("ok")])
    flushed = fire(commands["PreCompact"], base("PreCompact", chat, trigger="auto"))
    assert flushed.returncode == 0 and flushed.stdout == "", flushed.stderr
    assert "kept 1 new instruction" in flushed.stderr, flushed.stderr
    assert stored(database)[instruction_key(said)] == said
    # Stop: the instruction is stored now, so it lets the turn end; an unrecorded one blocks.
    assert fire(commands["Stop"], base("Stop", chat)).stdout == ""
    never = "Never push to main directly; always open a pull request."
    chat = transcript(tmp_path / "t3.jsonl", [user(never), assistant("Understood.")])
    blocked = json.loads(fire(commands["Stop"], base("Stop", chat)).stdout)
    assert blocked["decision"] == "block" and "Never push to main" in blocked["reason"]


def test_the_relevance_floor_holds_on_postgres(home: HostEnv, database: str) -> None:
    """A memory that shares with the prompt only words most memories hold is never injected,
    however it ranks: the floor counts document frequencies in Postgres's own index."""
    remember(
        database,
        [
            ("staging-port", "The staging deploy uses port 8443.", [], 0.5),
            ("pnpm", "We use pnpm, not npm, in every repository.", [], 0.5),
            ("tabs", "Use tabs for indentation in the Go code.", [], 0.5),
        ],
    )
    command = install(database)["UserPromptSubmit"]
    chat = transcript(home.home / "t.jsonl", [user("hi")])

    def recalled(prompt: str) -> str:
        result = fire(command, base("UserPromptSubmit", chat, prompt=prompt))
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert recalled("What should I use?") == ""  # "use": held by all three
    only_port = recalled("Which port does the staging deploy use?")
    assert "staging-port" in only_port and "pnpm" not in only_port and "tabs" not in only_port
    only_tabs = recalled("How do I indent Go code?")
    assert "tabs" in only_tabs and "staging-port" not in only_tabs


def test_unreachable_store_is_one_line_and_exit_zero(home: HostEnv, tmp_path: Path) -> None:
    url = "postgresql://nobody:secret-pw@127.0.0.1:9/none?connect_timeout=3"
    commands = install(url)
    chat = transcript(tmp_path / "t.jsonl", [user("tabs?")])
    result = fire(commands["UserPromptSubmit"], base("UserPromptSubmit", chat, prompt="tabs?"))
    assert result.returncode == 0 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evermind hook: "), result.stderr
    assert "secret-pw" not in result.stderr


def test_postgres_prompt_recall_leaves_out_history_and_expired_and_takes_odd_text(
    database: str,
) -> None:
    """``MemoryStore.recall_prompt`` on Postgres: a superseded version (archived history) and
    an expired memory are never returned; quotes and backslashes in a prompt are only text."""
    from evermind.memory.write_through import Remember, remember_through

    async def scenario() -> None:
        async with shared_memory(database, None, tenant="default", namespace="odd") as store:
            await store.remember("obrien", "O'Brien keeps the C:\\deploy\\keys folder.")
            await store.remember("gone", "The kiosk password rotates hourly.", ttl=0.05)
            await store.remember("plants", "The office plants are watered on Mondays.")
            await store.remember("lunch", "Lunch is ordered from the noodle place.")
            first = Remember.of("editor", "Niamh uses Neovim as her editor.")
            await remember_through(store, first)
            await remember_through(store, Remember.of("editor", "Niamh uses Helix as her editor."))
            await asyncio.sleep(0.1)
            keys = [h.key for h in await store.recall_prompt("Which editor does Niamh use?")]
            assert keys == ["editor"], keys  # not its archived Neovim version
            hits = await store.recall_prompt("Which editor does Niamh use?")
            assert "Helix" in hits[0].content
            assert await store.recall_prompt("kiosk password") == []  # expired
            odd = await store.recall_prompt("where are O'Brien's \\deploy\\ keys? ' | & ! :*")
            assert [h.key for h in odd] == ["obrien"], odd
            assert await store.recall_prompt("' | & ! :* \\") == []

    asyncio.run(scenario())
