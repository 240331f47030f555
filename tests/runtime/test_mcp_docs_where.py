"""``docs_search`` with ``where`` on a real ``evermind mcp`` (the official MCP SDK client): only
the rows the JSON filter admits, cited by line, including rows ranked below the unfiltered
top-k; a bad filter is a one-line tool error naming the problem."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import anyio

from tests import procs
from tests.runtime.test_ask_where import QUESTION, line_of, tickets
from tests.runtime.test_mcp_server import stdio_client, text_of


def ingested(tmp_path: Path) -> Path:
    """The tickets CSV put into a fresh memory file by the ``evermind ingest`` CLI."""
    rows = tickets()
    with open(tmp_path / "tickets.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    db = tmp_path / "memory.db"
    command = [sys.executable, "-m", "evermind.cli", "ingest", "tickets.csv", "--store", str(db)]
    done = procs.run(
        [*command, "--columns", "subject,body"],
        cwd=tmp_path,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return db


def cited_lines(text: str) -> list[int]:
    return sorted(int(n) for n in re.findall(r"^\[\d+\] tickets\.csv:(\d+) ", text, re.M))


def test_docs_search_where_filters_rows(tmp_path: Path) -> None:
    db = ingested(tmp_path)

    async def scenario() -> None:
        with anyio.fail_after(60):
            await searches(db)

    anyio.run(scenario)


async def searches(db: Path) -> None:
    async with stdio_client(db) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        schema = tools["docs_search"].input_schema["properties"]
        assert "where" in schema and "where" not in tools["docs_search"].input_schema.get(
            "required", []
        )
        plain = text_of(await client.call_tool("docs_search", {"query": QUESTION, "top_k": 3}))
        wanted = sorted(line_of(i) for i in ("O-0", "O-1", "O-2"))
        assert not set(cited_lines(plain)) & set(wanted), plain  # ranked below the top 3

        where = {"and": [{"eq": ["status", "open"]}, {"eq": ["priority", "P1"]}]}
        result = await client.call_tool(
            "docs_search", {"query": QUESTION, "top_k": 3, "where": where}
        )
        assert not result.is_error and cited_lines(text_of(result)) == wanted, text_of(result)

        nothing = await client.call_tool(
            "docs_search", {"query": QUESTION, "where": {"eq": ["status", "archived"]}}
        )
        assert not nothing.is_error and text_of(nothing).startswith("no evidence: ")

        for bad, named in (
            ({"like": ["status", "open"]}, "unknown operator 'like'"),
            ({"range": ["age", {"gte": 1, "lt": "z"}]}, "all numbers or all strings"),
        ):
            refused = await client.call_tool("docs_search", {"query": QUESTION, "where": bad})
            message = text_of(refused)
            assert refused.is_error and named in message and "\n" not in message, message
        typed = await client.call_tool("docs_search", {"query": QUESTION, "where": "status"})
        message = text_of(typed)
        assert typed.is_error and message.startswith("docs_search: argument 'where'"), message
