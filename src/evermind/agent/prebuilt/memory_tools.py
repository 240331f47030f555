"""Evermind's own tools for the prebuilt agents: memory recall, memory writes through
write-through cognition, and cited document search.

Browser-safe (standard library and ``evermind`` only).

- :func:`memory_recall_tool`: ``MemoryStore.recall``, fenced as reference data;
- :func:`memory_remember_tool`: ``remember_through`` (augment, confirm, supersede, contest,
  reject), answered with the outcome's one line;
- :func:`docs_search_tool`: the passages ``evermind ingest`` stored, or an
  ``EnterpriseRetriever``'s within a scope, each with its source; ``no evidence`` otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from evermind.agent.prebuilt.tools import Tool, make_tool
from evermind.errors import ConfigError
from evermind.memory.sanitize import fence, inline


def memory_recall_tool(store: Any, *, top_k: int = 5, name: str = "memory_recall") -> Tool:
    """A tool that recalls from ``store`` (a :class:`~evermind.memory.MemoryStore`): the
    best memories for a query, fenced as reference data, each with its key."""

    async def recall(query: str, top_k: int = top_k) -> str:
        """Recall what memory holds about a subject, ranked by relevance.

        Args:
            query: What you want to know, in plain words or exact terms.
            top_k: At most this many memories.
        """
        hits = await store.recall(query, top_k=max(1, min(top_k, 20)))
        if not hits:
            return f"no memory matches {inline(query)!r}"
        return fence([f"{h.key}: {h.content}" for h in hits], "recalled memories")

    return make_tool(recall, name=name)


def memory_remember_tool(
    store: Any,
    *,
    gatherer: Any = None,
    tags: Sequence[str] = ("agent",),
    name: str = "memory_remember",
) -> Tool:
    """A tool that writes a fact through write-through cognition
    (:func:`~evermind.memory.write_through.remember_through`: a fact about a subject memory
    already holds supersedes, confirms or contests it); returns the outcome's one line."""
    from evermind.memory.write_through import Remember, remember_through

    async def remember(key: str, content: str) -> str:
        """Remember a fact for later conversations. Call it when the user states something
        durable (a preference, a name, a decision) or you learn a fact worth keeping.

        Args:
            key: A short subject key, e.g. 'user-city' (a later fact under the same subject
                replaces this one).
            content: The fact, one sentence.
        """
        request = Remember.of(key, content, tags)
        outcome = await remember_through(store, request, gatherer)
        return outcome.summary

    return make_tool(remember, name=name)


def docs_search_tool(
    source: Any, *, scope: Any = None, top_k: int = 5, name: str = "docs_search"
) -> Tool:
    """A tool that searches documents and answers with cited passages (``[n] source``), or
    ``no evidence`` when nothing clears the relevance floor.

    Args:
        source: A :class:`~evermind.memory.MemoryStore` that ``evermind ingest`` wrote
            (:func:`~evermind.ingest.passages.search_ingested`), or an
            :class:`~evermind.retrieval.EnterpriseRetriever` (searched with ``scope``).
        scope: The retriever's ``AccessScope`` (what the agent's user may see).
        top_k: Passages per search.
        name: The tool's name.
    """
    search: Callable[[str], Awaitable[list[tuple[str, str]]]]
    if hasattr(source, "recall"):
        from evermind.ingest.passages import search_ingested

        async def ingested(query: str) -> list[tuple[str, str]]:
            return [(p.citation, p.text) for p in await search_ingested(source, query, top_k)]

        search = ingested
    elif hasattr(source, "search"):

        async def retrieved(query: str) -> list[tuple[str, str]]:
            result = await source.search(query, scope, k=top_k)
            return [(p.source, p.text) for p in result.passages]

        search = retrieved
    else:
        raise ConfigError(
            f"docs_search_tool: expected a MemoryStore or an EnterpriseRetriever, got "
            f"{type(source).__name__}"
        )

    async def docs_search(query: str) -> str:
        """Search the documents for passages that answer a question; cite them by source.

        Args:
            query: The question, or its key terms.
        """
        found = await search(query)
        if not found:
            return f"no evidence: no passage matches {inline(query)!r}"
        return fence([f"(source: {c})\n{text.strip()}" for c, text in found], "passages")

    return make_tool(docs_search, name=name)
