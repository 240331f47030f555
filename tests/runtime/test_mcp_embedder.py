"""``evermind mcp --embedder base|PATH``: recall by meaning with the shipped base embedder.

Real servers only: ``python -m evermind.cli mcp`` subprocesses driven by the official MCP SDK
client over stdio, and the real ``install-mcp`` writing a host config whose command is then
started. The memories and questions share no word (after stop words), so the lexical server
finds nothing for any question, and the server started with ``--embedder base`` ranks each
question's memory first (checked on the shipped file: 7 of 7). The store holds 7 memories, one
under ``FLOOR_MIN_MEMORIES`` (8): from 8 memories on, the relevance floor measured on the
stored memories applies, and with this base embedder it drops most of these zero-overlap
questions (measured: 7 of 8 answered "no memory matches" with 8 such memories).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from evermind.embedder.shipped import BASE_FILE, base_bytes
from evermind.errors import ConfigError
from evermind.mcp.hosts import HOSTS, HostEnv
from evermind.mcp.installer import server_command
from evermind.search.calibration import FLOOR_MIN_MEMORIES
from tests import procs
from tests.runtime.test_mcp_server import (
    free_port,
    http_client,
    parse_hits,
    server_params,
    text_of,
    wait_healthy,
)

#: key -> the memory; none shares a content word with its question below.
MEMORIES = {
    "car": "The user's vehicle is a red hatchback they bought secondhand in 2019.",
    "pet": "Their dog, a golden retriever named Biscuit, needs a walk twice a day.",
    "job": "They work as a nurse on night shifts at the city hospital.",
    "food": "Allergic to peanuts; carries an epinephrine pen everywhere.",
    "trip": "Planning a holiday in Portugal next spring with their sister.",
    "lang": "Learning Japanese with flashcards every morning before breakfast.",
    "music": "Plays the cello in an amateur orchestra on Thursdays.",
}
#: key -> a question phrased in other words.
QUESTIONS = {
    "car": "what automobile do I drive?",
    "pet": "which animal do I own?",
    "job": "what is my occupation?",
    "food": "what can't I eat?",
    "trip": "where am I going on vacation?",
    "lang": "what language am I studying?",
    "music": "which instrument do I perform?",
}


async def first_hits(memory_file: Path, *extra: str) -> tuple[dict[str, list[str]], list[str]]:
    """Stores :data:`MEMORIES` through a fresh stdio server, asks every question; returns the
    hit keys per question and each answer's last line (how it was ranked)."""
    hits: dict[str, list[str]] = {}
    ranked_by: list[str] = []
    params = server_params(memory_file, *extra)
    async with Client(params, read_timeout_seconds=60) as client:
        for key, content in MEMORIES.items():
            stored = await client.call_tool("memory_remember", {"key": key, "content": content})
            assert not stored.is_error, text_of(stored)
        for key, question in QUESTIONS.items():
            text = text_of(await client.call_tool("memory_recall", {"query": question}))
            hits[key] = [hit[0] for hit in parse_hits(text)]
            ranked_by.append(text.splitlines()[-1])
    return hits, ranked_by


def test_base_embedder_recalls_what_lexical_recall_misses(tmp_path: Path) -> None:
    assert len(MEMORIES) < FLOOR_MIN_MEMORIES  # see the module docstring

    async def scenario() -> None:
        lexical, _ = await first_hits(tmp_path / "lexical.db")
        assert lexical == {key: [] for key in QUESTIONS}, lexical  # BM25 finds none of them
        hybrid, ranked_by = await first_hits(tmp_path / "base.db", "--embedder", "base")
        firsts = {key: keys[0] if keys else None for key, keys in hybrid.items()}
        assert firsts == {key: key for key in QUESTIONS}, hybrid
        assert all(line.startswith("ranked by: semantic+lexical") for line in ranked_by)

        # The same file by path: the same ranking (a copy outside the package).
        copy = tmp_path / "copy.safetensors"
        copy.write_bytes(base_bytes())
        by_path, _ = await first_hits(tmp_path / "path.db", "--embedder", str(copy))
        assert by_path == hybrid

    anyio.run(scenario)


def test_http_transport_embeds_with_the_base_embedder(tmp_path: Path) -> None:
    """``evermind mcp --http --embedder base``: each token's tenant recalls by meaning."""
    tokens_file = tmp_path / "tokens.txt"
    tokens_file.write_text("tok-alice-0123456789abcdef alice write\n", encoding="utf-8")
    port = free_port()
    command = [
        sys.executable,
        *("-m", "evermind.cli", "mcp", "--http", "--port", str(port), "--embedder", "base"),
        *("--tokens-file", str(tokens_file), "--memory-file", str(tmp_path / "memory.db")),
    ]
    log = (tmp_path / "server.log").open("wb")
    process = procs.popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    async def ask() -> dict[str, list[str]]:
        found = {}
        async with http_client(base + "/mcp", "tok-alice-0123456789abcdef") as client:
            for key, content in MEMORIES.items():
                await client.call_tool("memory_remember", {"key": key, "content": content})
            for key, question in QUESTIONS.items():
                text = text_of(await client.call_tool("memory_recall", {"query": question}))
                found[key] = [hit[0] for hit in parse_hits(text)]
        return found

    try:
        wait_healthy(base, process, timeout=60)
        found = anyio.run(ask)
    finally:
        procs.stop_group(process, grace_s=10)
        log.close()
    assert {key: keys[:1] for key, keys in found.items()} == {k: [k] for k in QUESTIONS}, found


def _mcp(*args: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [sys.executable, "-m", "evermind.cli", "mcp", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr


def test_bad_embedder_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    from tests.factories import tiny_package

    model = tmp_path / "tiny.evermind"
    model.write_bytes(tiny_package())
    both = _one_line(_mcp("--model", str(model), "--embedder", "base"))
    assert "expected --model or --embedder, got both" in both

    missing = _one_line(_mcp("--embedder", str(tmp_path / "nope.safetensors")))
    assert "argument --embedder: no such file" in missing

    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(base_bytes()[:4096])  # truncated: the header promises more
    assert str(corrupt) in _one_line(_mcp("--embedder", str(corrupt)))

    package_as_embedder = _one_line(_mcp("--embedder", str(model)))
    assert str(model) in package_as_embedder

    # 'base' is the shipped file even where a file named 'base' sits in the working folder.
    (tmp_path / "base").write_bytes(b"not an embedder")
    served = procs.popen(
        [sys.executable, "-m", "evermind.cli", "mcp", "--embedder", "base",
         "--memory-file", str(tmp_path / "m.db")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    try:
        _, err = served.communicate(b"", timeout=60)  # stdin closed: the server exits
    finally:
        procs.kill_group(served)
    assert served.returncode == 0, err.decode()


def test_server_command_carries_the_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.factories import tiny_package

    model = tmp_path / "env.evermind"
    model.write_bytes(tiny_package())
    monkeypatch.setenv("EVERMIND_MODEL", str(model))
    memory = str(tmp_path / "memory.db")
    assert server_command(memory, None)[-2:] == ["--model", str(model)]  # the environment's
    # An explicit --embedder wins over $EVERMIND_MODEL: the command carries the embedder only.
    assert "--model" not in server_command(memory, None, embedder="base")
    assert server_command(memory, None, embedder="base")[-2:] == ["--embedder", "base"]
    copy = tmp_path / "mine.safetensors"
    copy.write_bytes(base_bytes())
    relative = os.path.relpath(copy)
    command = server_command(memory, None, embedder=relative)
    assert command[-2:] == ["--embedder", str(copy)]  # absolute: hosts start elsewhere
    with pytest.raises(ConfigError, match="expected --model or --embedder, got both"):
        server_command(memory, str(copy), embedder="base")


def test_install_mcp_registers_the_embedder_and_the_command_recalls_by_meaning(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVERMIND_")}
    env |= {"HOME": str(home), "USERPROFILE": str(home), "XDG_CONFIG_HOME": str(home / ".c")}
    env |= {"XDG_DATA_HOME": str(home / ".d"), "APPDATA": str(home / "A")}
    env.pop("CODEX_HOME", None)
    memory_file = tmp_path / "memory.db"
    done = procs.run(
        [sys.executable, "-m", "evermind.cli", "install-mcp", "--host", "cursor", "--no-hooks",
         "--memory-file", str(memory_file), "--embedder", "base"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cursor = next(host for host in HOSTS if host.name == "cursor")
    path = cursor.config_path(HostEnv(home, sys.platform, env))
    entry = json.loads(path.read_text(encoding="utf-8"))["mcpServers"]["evermind"]
    assert entry["args"][-2:] == ["--embedder", "base"], entry

    async def ask() -> None:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
        async with Client(params, read_timeout_seconds=60) as client:
            for key in ("car", "pet", "music"):
                await client.call_tool("memory_remember", {"key": key, "content": MEMORIES[key]})
            text = text_of(await client.call_tool("memory_recall", {"query": QUESTIONS["pet"]}))
            assert parse_hits(text)[0][0] == "pet", text

    anyio.run(ask)

    from tests.factories import tiny_package

    model = tmp_path / "tiny.evermind"
    model.write_bytes(tiny_package())
    both = procs.run(
        [sys.executable, "-m", "evermind.cli", "install-mcp", "--host", "cursor", "--no-hooks",
         "--embedder", "base", "--model", str(model)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert both.returncode == 2 and len(both.stderr.splitlines()) == 1, both.stderr
    assert "expected --model or --embedder, got both" in both.stderr


def test_the_shipped_file_is_package_data() -> None:
    """``base`` reads ``evermind/embedder/data`` (what the wheel carries), not the checkout."""
    import evermind.embedder

    shipped = Path(evermind.embedder.__file__).parent / "data" / BASE_FILE
    assert shipped.is_file() and base_bytes() == shipped.read_bytes()


def test_the_static_embedder_embeds_off_the_event_loop() -> None:
    """``--embedder`` gives a ``ThreadEmbedder`` with no model (nothing for memory_compact to
    probe with) whose embedding runs on a worker thread."""
    import threading

    from evermind.mcp.server import ThreadEmbedder, load_embedder

    embedder = load_embedder(None, "base")
    assert isinstance(embedder, ThreadEmbedder) and embedder.model is None
    assert embedder.fingerprint.startswith("static-")
    seen: list[int] = []
    embed = embedder.source.embed

    def spied(texts: list[str]) -> Any:
        seen.append(threading.get_ident())
        return embed(texts)

    embedder.source.embed = spied

    async def body() -> None:
        vectors = await embedder.embed(["a memory", "another"])
        assert vectors.shape == (2, 256)
        assert seen and threading.get_ident() not in seen

    anyio.run(body)
    with pytest.raises(ConfigError, match="got both"):
        load_embedder(Path("x.evermind"), "base")
