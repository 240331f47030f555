"""The MCP server as clients meet it (issue 38): a bad argument is one clear line naming it,
the skill text lists exactly the tools the server serves, counts read as English.

In-process (the official SDK client on the in-memory transport, the real ``build_server``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from evermind.mcp.config import ServerConfig
from evermind.mcp.hook_install import skill_text
from evermind.mcp.inprocess import memory_client
from evermind.memory import MemoryStore

#: (tool, arguments, the argument the error must name, words the error must hold)
BAD_CALLS = [
    ("memory_recall", {}, "query", "required"),
    ("memory_recall", {"query": ""}, "query", "at least 1 character"),
    ("memory_recall", {"query": "ports", "top_k": 0}, "top_k", "greater than or equal to 1"),
    ("memory_recall", {"query": "ports", "top_k": "many"}, "top_k", "valid integer"),
    ("memory_remember", {"key": "k", "content": 5}, "content", "valid string"),
    ("memory_remember", {"key": "k", "content": "x", "importance": 3}, "importance", "less than"),
    ("memory_get", {"key": ["a"]}, "key", "valid string"),
]


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def _call_all(memory_file: Path) -> tuple[list[str], set[str], list[str]]:
    store = MemoryStore(memory_file, namespace="default/default")
    try:
        async with memory_client(store, ServerConfig()) as client:
            errors = []
            for tool, arguments, _, _ in BAD_CALLS:
                result = await client.call_tool(tool, arguments)
                assert result.is_error, (tool, arguments, text_of(result))
                errors.append(text_of(result))
            names = {tool.name for tool in (await client.list_tools()).tools}
            await client.call_tool("memory_remember", {"key": "port", "content": "Staging: 8443."})
            answers = [
                text_of(await client.call_tool("memory_recall", {"query": "staging port"})),
                text_of(await client.call_tool("memory_recall", {"query": "zebra migration"})),
            ]
            return errors, names, answers
    finally:
        await store.close()


@pytest.fixture(scope="module")
def called(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], set[str], list[str]]:
    memory_file = tmp_path_factory.mktemp("mcp-dropin") / "memory.db"
    return anyio.run(_call_all, memory_file)


@pytest.mark.parametrize("case", range(len(BAD_CALLS)))
def test_a_bad_argument_is_one_clear_line(
    called: tuple[list[str], set[str], list[str]], case: int
) -> None:
    tool, _, argument, words = BAD_CALLS[case]
    error = called[0][case]
    print(error)
    assert "\n" not in error, error
    assert error.startswith(f"{tool}: argument '{argument}'"), error
    assert words in error, error
    for leak in ("pydantic", "http", "validation error for", "type="):
        assert leak not in error.lower(), error


def test_the_skill_names_exactly_the_tools_the_server_serves(
    called: tuple[list[str], set[str], list[str]],
) -> None:
    """The installed SKILL.md is checked against the server's own tool list."""
    served = called[1]
    text = skill_text()
    named = set(re.findall(r"`((?:memory|docs)_[a-z_]+)", text))
    assert named == served, (sorted(named - served), sorted(served - named))
    number = re.search(r"gives you (\w+) tools", text)
    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
    assert number is not None and number.group(1) == words[len(served)]


def test_counts_are_english(called: tuple[list[str], set[str], list[str]]) -> None:
    hit, miss = called[2]
    assert "1 item)" in hit and "1 items" not in hit, hit
    assert "of 1 memory for" in hit, hit
    assert "(1 memory searched)" in miss, miss


def test_the_skill_s_tool_list_is_written_from_the_server_s() -> None:
    """The sentence is generated, not kept in step by hand: another tool list, another text."""
    from evermind.mcp.hook_install import tool_sentence
    from evermind.mcp.tools import READ_TOOLS, WRITE_TOOLS

    assert tool_sentence(READ_TOOLS, WRITE_TOOLS) in skill_text()
    assert "{{tools}}" not in skill_text()
    grown = tool_sentence((*READ_TOOLS, "memory_list"), WRITE_TOOLS)
    assert "nine tools" in grown and "`memory_list`" in grown and "first five" in grown
