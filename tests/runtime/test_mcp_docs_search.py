"""``docs_search`` on a real ``evermind mcp``: fenced, cited passages from what ``evermind
ingest`` stored, "no evidence", one-line argument errors, and the read-only server has it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio

from evermind.memory.sanitize import FENCE_CLOSE, FENCE_OPEN
from tests import procs
from tests.runtime.test_mcp_server import READ_TOOLS, stdio_client, text_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"
QUESTION = "How many workers may hold a lease at once?"


def ingested(tmp_path: Path) -> Path:
    """The ingest fixtures put into a fresh memory file by the ``evermind ingest`` CLI."""
    shutil.copytree(FIXTURES, tmp_path / "kb")
    db = tmp_path / "memory.db"
    command = [sys.executable, "-m", "evermind.cli", "ingest", "kb", "--store", str(db)]
    done = procs.run(
        [*command, "--columns", "subject,body"],
        cwd=tmp_path,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return db


def test_docs_search_cites_fences_and_refuses(tmp_path: Path) -> None:
    db = ingested(tmp_path)

    async def scenario() -> None:
        with anyio.fail_after(60):
            await searches(db)

    anyio.run(scenario)


async def searches(db: Path) -> None:
    """The calls, first on a read-write server, then on a read-only one."""
    async with stdio_client(db) as client:
        result = await client.call_tool("docs_search", {"query": QUESTION, "top_k": 50})
        text = text_of(result)
        assert not result.is_error, text
        lines = text.splitlines()
        assert "(top_k capped at 10)" in lines[0] and "Cite a passage" in lines[0]
        opening = next(n for n, line in enumerate(lines) if line.startswith(FENCE_OPEN))
        assert lines[opening + 1].startswith("[1] kb/docs/configuration.md:"), text
        assert "(Configuration > Server)" in lines[opening + 1]
        assert "key kb/docs/configuration.md#" in lines[opening + 1]
        assert "workers_max" in lines[opening + 2] and lines[-1] == FENCE_CLOSE

        unrelated = {"query": "banana smoothie recipe with kale"}
        refused = await client.call_tool("docs_search", unrelated)
        assert not refused.is_error and text_of(refused).startswith("no evidence: "), refused

        bad = await client.call_tool("docs_search", {"query": "port", "top_k": 0})
        message = text_of(bad)
        assert bad.is_error and "\n" not in message, message
        assert message.startswith("docs_search: argument 'top_k'"), message
        missing = await client.call_tool("docs_search", {})
        assert text_of(missing) == "docs_search: argument 'query' is required"

    async with stdio_client(db, "--readonly") as reader:
        tools = {tool.name for tool in (await reader.list_tools()).tools}
        assert tools == READ_TOOLS and "docs_search" in tools
        result = await reader.call_tool("docs_search", {"query": QUESTION})
        assert "[1] kb/docs/configuration.md:" in text_of(result)
