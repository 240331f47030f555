"""Tools for the prebuilt agents: a schema from a function's hints and docstring, clear
errors for signatures a schema cannot express, arguments checked against the schema, and
Evermind's memory and docs tools on a real MemoryStore (write-through cognition included)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import pytest

from evermind.agent.prebuilt import (
    docs_search_tool,
    memory_recall_tool,
    memory_remember_tool,
    tool,
)
from evermind.agent.prebuilt.tools import check_arguments, run_calls
from evermind.errors import ConfigError, InputError
from evermind.ingest.pipeline import sync_bytes
from evermind.memory import InMemoryBackend, MemoryStore
from evermind.memory.sanitize import FENCE_OPEN
from evermind.vectorstore import AccessScope
from tests.unit.test_retriever import SCOPE, build


def book(
    city: str,
    nights: int,
    budget: float | None = None,
    rooms: list[Literal["single", "double"]] | None = None,
    *,
    notes: Annotated[dict[str, str], "Free-form notes"] | None = None,
    late: bool = False,
) -> dict[str, Any]:
    """Book a hotel.

    More prose the model does not need.

    Args:
        city: Where, by name.
        nights: How many nights,
            at least one.
        budget: Per night.
    """
    return {"city": city, "nights": nights, "late": late}


def test_a_function_becomes_a_schema() -> None:
    made = tool(book)
    assert made.name == "book" and made.description == "Book a hotel."
    assert made.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "required": ["city", "nights"],
        "properties": {
            "city": {"type": "string", "description": "Where, by name."},
            "nights": {"type": "integer", "description": "How many nights, at least one."},
            "budget": {"type": ["number", "null"], "description": "Per night.", "default": None},
            "rooms": {
                "type": ["array", "null"],
                "items": {"enum": ["single", "double"]},
                "default": None,
            },
            "notes": {
                "type": ["object", "null"],
                "additionalProperties": {"type": "string"},
                "description": "Free-form notes",
                "default": None,
            },
            "late": {"type": "boolean", "default": False},
        },
    }
    assert made.spec == {
        "name": "book",
        "description": "Book a hotel.",
        "input_schema": made.input_schema,
    }
    assert asyncio.run(made.run({"city": "Lyon", "nights": 2})) == (
        '{"city": "Lyon", "nights": 2, "late": false}'
    )

    @tool(name="ping", description="Says pong.")
    async def anything() -> str:
        return "pong"

    assert anything.name == "ping" and asyncio.run(anything.run({})) == "pong"


def test_signatures_a_schema_cannot_express_are_clear_errors() -> None:
    def star(*cities: str) -> None:
        """Doc."""

    def untyped(city) -> None:  # type: ignore[no-untyped-def]
        """Doc."""

    def odd(when: complex) -> None:
        """Doc."""

    def union(x: int | str) -> None:
        """Doc."""

    def nodoc(x: int) -> None:
        pass

    cases = [
        (star, "parameter 'cities' is variadic positional"),
        (untyped, "parameter 'city' has no type annotation"),
        (odd, "parameter 'when' has the type complex"),
        (union, "a union other than `T | None`"),
        (nodoc, "tool 'nodoc' has no description"),
    ]
    for fn, message in cases:
        with pytest.raises(ConfigError, match=message.replace("|", r"\|").replace("`", ".")):
            tool(fn)
    with pytest.raises(ConfigError, match="tool name 'two words'"):
        tool(book, name="two words")


def test_arguments_are_checked_against_the_schema() -> None:
    schema = tool(book).input_schema
    assert check_arguments("book", schema, {"city": "Lyon", "nights": 1})["late"] is False
    bad = [
        ({"nights": 1}, "missing required argument 'city'"),
        ({"city": "Lyon", "nights": "two"}, "argument 'nights' must be integer, got str 'two'"),
        ({"city": "Lyon", "nights": True}, "argument 'nights' must be integer, got bool"),
        ({"city": "Lyon", "nights": 1, "spa": True}, "unknown argument 'spa'"),
        ({"city": "Lyon", "nights": 1, "rooms": ["suite"]}, r"argument 'rooms'\[0\] must be one"),
        ({"city": "Lyon", "nights": 1, "notes": {"a": 1}}, r"argument 'notes'\['a'\] must be"),
        ([1, 2], "arguments must be a JSON object"),
    ]
    for arguments, message in bad:
        with pytest.raises(InputError, match=message):
            check_arguments("book", schema, arguments)


def test_the_memory_tools_recall_and_write_through_cognition() -> None:
    async def main() -> None:
        store = MemoryStore(InMemoryBackend())
        remember, recall = memory_remember_tool(store), memory_recall_tool(store, top_k=3)
        assert remember.input_schema["required"] == ["key", "content"]
        first = await remember.run({"key": "user-city", "content": "The user lives in Lisbon"})
        assert first.startswith("augment")
        again = await remember.run({"key": "user-city", "content": "The user lives in Porto"})
        assert again.startswith("supersede"), again
        record = await store.get("user-city")
        assert record is not None and record.content == "The user lives in Porto"
        assert record.tags == ("agent",)
        found = await recall.run({"query": "where does the user live"})
        assert FENCE_OPEN in found and "user-city: The user lives in Porto" in found
        assert "Lisbon" not in found  # superseded memories are archived, never recalled
        nothing = await recall.run({"query": "zebra migration"})
        assert nothing == "no memory matches 'zebra migration'"
        results = await run_calls({"memory_remember": remember}, [("c1", "memory_remember", {})])
        assert results[0].is_error
        assert (
            results[0].content == "error: tool 'memory_remember': missing required argument 'key'"
        )

    asyncio.run(main())


def test_docs_search_cites_ingested_passages_or_says_no_evidence() -> None:
    async def main() -> None:
        store = MemoryStore(InMemoryBackend())
        guide = "# Leases\n\nAt most three workers may hold a lease at once.\n"
        await sync_bytes(store, [("guide.md", guide)])
        search = docs_search_tool(store)
        found = await search.run({"query": "how many workers may hold a lease"})
        assert "(source: guide.md:" in found and "three workers" in found, found
        assert FENCE_OPEN in found
        none = await search.run({"query": "zebra migration"})
        assert none.startswith("no evidence")
        with pytest.raises(ConfigError, match="expected a MemoryStore or an EnterpriseRetriever"):
            docs_search_tool(object())

    asyncio.run(main())


def test_docs_search_over_the_enterprise_retriever_sees_only_its_scope() -> None:
    async def main() -> None:
        retriever = await build()
        search = docs_search_tool(retriever, scope=SCOPE, top_k=2)
        found = await search.run({"query": "which port does the server listen on"})
        assert "(source: kb/config.md)" in found and "port 7420" in found, found
        outsider = docs_search_tool(retriever, scope=AccessScope("other", frozenset({"user:x"})))
        refused = await outsider.run({"query": "which port does the server listen on"})
        assert refused.startswith("no evidence")
        unscoped = await run_calls(
            {"docs_search": docs_search_tool(retriever)}, [("c", "docs_search", {"query": "port"})]
        )
        assert unscoped[0].is_error and "ScopeRequired" in unscoped[0].content

    asyncio.run(main())
