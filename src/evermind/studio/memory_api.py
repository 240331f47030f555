"""The Studio's Memory and Cache RPC handlers (``docs/studio-rpc.md``), over :mod:`tab_memory`.

``memory_remember``, ``memory_recall``, ``memory_forget``, ``memory_list``, ``cache_lookup``
and ``cache_store`` (plus the bulk ``memory_import``/``memory_export``/``cache_import`` for
import, export and benchmarks) run on the worker's session (the memory calls in the namespace
they name, ``"studio"`` by default): IndexedDB storage, the tab's model as
embedder when one is ready (lexical ranking otherwise) and the GPU cosine scan. Every recall
and lookup result says how it was ranked (``ranked_by``) and which scan ran (``scan``); each
recall hit also carries ``match``, the same in plain words (:mod:`evermind.studio.match_words`).
``cache_lookup`` and ``cache_store`` take an optional ``runtime`` (:func:`runtime_cache`): the
runtime's gateway cache as L2 (:mod:`evermind.cache.gateway_client`).
Before a recall or a remember ranks by meaning, the memories the current model has not embedded
yet (all of them after a new model) are embedded as the ``memory`` operation
(:func:`index_memories`): ``memory-progress`` events count them, and ``operation_cancel``
stops it between batches (the recall or remember then does nothing: a cancelled remember
writes nothing). ``memory_remember`` runs write-through cognition
(:mod:`evermind.memory.write_through`, the pipeline of MCP ``memory_remember`` and HTTP
remember; no evidence gatherer in the tab) and answers its outcome; ``memory_forget`` forgets
the key's superseded versions too. Likewise, before a cache lookup or store, the cached
questions the current embedder has not embedded yet are embedded as the ``cache`` operation
(:func:`index_cache`, ``cache-progress`` events; a cancelled lookup serves nothing, a cancelled
store stores nothing).
Registered on this module's ``router``, which :mod:`evermind.studio.api` merges. Browser-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from evermind.cache.gateway_client import DEFAULT_TIMEOUT_S, GatewayCacheClient, fetch_transport
from evermind.cache.l2 import Transport
from evermind.cache.verified import DEFAULT_MAX_ERROR
from evermind.errors import ConfigError
from evermind.memory.store import MemoryStore
from evermind.memory.write_through import Remember, forget_history, remember_through
from evermind.studio import operations
from evermind.studio.match_words import cache_words, describe_hits
from evermind.studio.rpc import Router, session
from evermind.studio.tab_memory import TabCache, TabMemory

router = Router()
handler = router.handler
_tab: TabMemory | None = None
#: The fields of a cache call's ``runtime`` object.
RUNTIME_FIELDS = frozenset(
    {"url", "token", "model", "system", "temperature", "max_tokens", "timeout_s"}
)


def tab_memory() -> TabMemory:
    """The memory and cache of the worker's current session (rebuilt for a new session)."""
    global _tab
    current = session()
    if _tab is None or _tab.session is not current:
        _tab = TabMemory(current)
    return _tab


#: What embeds the pending vectors, calling back before each batch with (done, total).
Batches = Callable[[Callable[[int, int], Awaitable[None]]], Awaitable[None]]


async def _embed_pending(name: str, what: str, ensure: Batches) -> None:
    """Runs ``ensure`` as the cancellable operation ``name``: a ``<name>-progress`` event
    (``what``, ``done``, ``total``) before each batch and at the end, and a cancel check before
    each batch."""
    emit = session().emit
    with operations.operation(name) as op:

        async def batch(done: int, total: int) -> None:
            emit(f"{name}-progress", what=what, done=done, total=total)
            if done < total:
                # The page's cancel call arrives only while this awaits (the CPU path
                # embeds synchronously).
                await asyncio.sleep(0)
                op.check()

        await ensure(batch)


async def index_memories(store: MemoryStore, what: str) -> None:
    """Embeds the memories the current model has not embedded yet, as the cancellable
    ``memory`` operation: a ``memory-progress`` event (``what``: "recall" or "remember",
    ``done``, ``total``) before each batch and at the end, and a cancel check before each
    batch. Nothing to embed (an indexed store, or no model): no event, no work.

    Raises:
        Cancelled: The page cancelled it; the memories embedded so far keep their vectors
            (whole and right for this model), the rest are embedded by the next call.
    """
    await store.refresh()
    if not store.pending_vectors():
        return
    await _embed_pending("memory", what, store.ensure_vectors)


async def index_cache(cache: TabCache, what: str) -> None:
    """Embeds the cached questions the current embedder has not embedded yet (all of them
    after a new model), as the cancellable ``cache`` operation: a ``cache-progress`` event
    (``what``: "lookup" or "store", ``done``, ``total``) before each batch and at the end,
    and a cancel check before each batch. Nothing to embed: no event, no work.

    Raises:
        Cancelled: The page cancelled it; the questions embedded so far keep their vectors
            (whole and right for this embedder), the rest are embedded by the next call.
    """
    if not await cache.pending_vectors():
        return
    await _embed_pending("cache", what, cache.ensure_vectors)


def _strings(value: object, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{what}: expected a list of strings, got {value!r}")
    return [str(v) for v in value]


@handler
async def memory_remember(
    key: str,
    content: str,
    tags: list[str] | None = None,
    importance: float = 0.5,
    ttl: float | None = None,
    namespace: str | None = None,
    aliases: list[str] | None = None,
    mode: str = "reconcile",
) -> dict[str, Any]:
    """Remembers ``content`` under ``key`` in the tab's IndexedDB through write-through
    cognition: ``action`` (augment, confirm, supersede, contested, reject or put),
    ``summary`` (one line), the ``key`` written (a confirm: the incumbent's), and the
    superseded version's ``archived_key``. ``mode="put"``: the plain overwrite by key."""
    request = Remember.of(
        key,
        content,
        _strings(tags, "memory_remember: tags"),
        importance,
        ttl,
        None,
        _strings(aliases, "memory_remember: aliases"),
    )
    store = await tab_memory().store(namespace)
    if mode == "reconcile":
        await index_memories(store, "remember")
    outcome = await remember_through(store, request, None, mode)  # type: ignore[arg-type]
    record = outcome.record
    return {
        "key": outcome.key,
        "action": outcome.action,
        "summary": outcome.summary,
        "archived_key": outcome.archived_key,
        "tags": [] if record is None else list(record.tags),
        "updated_at": None if record is None else record.updated_at,
    }


@handler
async def memory_recall(
    query: str, top_k: int = 5, tags: list[str] | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """The memories most relevant to ``query``, with scores and how they were ranked."""
    tab = tab_memory()
    store = await tab.store(namespace)
    wanted = None if tags is None else _strings(tags, "memory_recall: tags")
    await index_memories(store, "recall")
    hits = await store.recall(query, int(top_k), wanted)
    semantic = bool(hits) and hits[0].ranked_by.startswith("semantic")
    rows = [
        {
            "key": h.key,
            "content": h.content,
            "tags": list(h.tags),
            "score": h.score,
            "ranked_by": h.ranked_by,
            "signals": dict(h.signals),
            "source": h.meta.get("source") if h.meta.get("ingest") == "chunk" else None,
        }
        for h in hits
    ]
    for row, words in zip(rows, describe_hits(rows), strict=True):
        row["match"] = words
    return {
        "hits": rows,
        "ranked_by": hits[0].ranked_by if hits else None,
        "scan": store.vector_index.last_scan if semantic else "none: lexical ranking",
        "embedder": tab.embedder_words,
    }


@handler
async def memory_forget(key: str, namespace: str | None = None) -> dict[str, Any]:
    """Deletes the memory ``key`` and its superseded versions; says whether it existed."""
    store = await tab_memory().store(namespace)
    await forget_history(store, key)
    return {"forgotten": await store.forget(key)}


@handler
async def memory_list(limit: int = 50, namespace: str | None = None) -> dict[str, Any]:
    """The most recently written memories, newest first."""
    store = await tab_memory().store(namespace)
    records = await store.recent(int(limit))
    return {
        "items": [
            {
                "key": r.key,
                "content": r.content,
                "tags": list(r.tags),
                "importance": r.importance,
                "updated_at": r.updated_at,
                "expires_at": r.expires_at,
            }
            for r in records
        ],
        "count": await store.count(),
    }


#: The runtime cache's transport: the worker's ``fetch`` (a native test passes httpx).
runtime_transport: Callable[[], Transport] = fetch_transport


def runtime_cache(runtime: object) -> GatewayCacheClient | None:
    """The runtime's gateway cache a cache call names: ``{"url", "model", "token"?,
    "system"?, "temperature"?, "max_tokens"?, "timeout_s"?}``; None (or no ``url``): L1 only.

    Raises:
        ConfigError: Not an object, unknown fields, or a bad URL, model or timeout.
    """
    if runtime is None:
        return None
    if not isinstance(runtime, dict) or not set(runtime) <= RUNTIME_FIELDS:
        raise ConfigError(
            f"runtime: expected an object with fields {sorted(RUNTIME_FIELDS)}, got "
            f"{str(runtime)[:120]!r}; hint: {{'url': 'http://127.0.0.1:8080', "
            "'model': 'openai/gpt-4o-mini', 'token': '...'}"
        )
    if not runtime.get("url"):
        return None
    temperature = runtime.get("temperature", 0.0)
    max_tokens = runtime.get("max_tokens")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
    ):
        raise ConfigError(f"runtime.temperature: expected a number or null, got {temperature!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise ConfigError(f"runtime.max_tokens: expected an integer or null, got {max_tokens!r}")
    return GatewayCacheClient(
        runtime["url"],
        str(runtime.get("token") or ""),
        runtime.get("model", ""),
        transport=runtime_transport(),
        system=str(runtime["system"]) if runtime.get("system") else None,
        temperature=temperature,
        max_tokens=max_tokens,
        timeout_s=runtime.get("timeout_s", DEFAULT_TIMEOUT_S),
    )


@handler
async def cache_lookup(
    query: str,
    threshold: float | None = None,
    max_error: float | str = DEFAULT_MAX_ERROR,
    runtime: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Tries the semantic cache: hit or miss, tier, score, the verifier's probability and why
    (``max_error``: δ, default 0.01, or ``"off"`` for the rule-based decision). With
    ``runtime`` (:func:`runtime_cache`), an L1 miss asks the runtime's gateway cache (L2)."""
    l2 = runtime_cache(runtime)
    cache = await tab_memory().cache()
    await index_cache(cache, "lookup")
    result = await cache.lookup(query, threshold, max_error, l2)
    return {**result, "words": cache_words(result)}


@handler
async def cache_store(
    query: str, response: Any, runtime: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Caches ``response`` as the answer to ``query``; with ``runtime``, in the runtime's
    gateway cache too (text answers)."""
    l2 = runtime_cache(runtime)
    cache = await tab_memory().cache()
    await index_cache(cache, "store")
    return await cache.store(query, response, l2)


@handler
async def memory_import(entries: list[dict[str, Any]], mode: str = "merge") -> dict[str, Any]:
    """Loads memories in ``memory_export`` form in one transaction (``merge``/``overwrite``)."""
    if not isinstance(entries, list):
        raise ConfigError(f"memory_import: entries must be a list, got {type(entries).__name__}")
    store = await tab_memory().store()
    imported = await store.import_(entries, mode)  # type: ignore[arg-type]
    return {"imported": imported, "count": await store.count()}


@handler
async def memory_export() -> dict[str, Any]:
    """Every memory of the tab, in ``memory_import`` form."""
    store = await tab_memory().store()
    return {"entries": await store.export()}


@handler
async def cache_import(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Caches many ``{query, response}`` pairs in one transaction."""
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and "query" in e for e in entries
    ):
        raise ConfigError(
            "cache_import: expected a list of {query, response} objects; "
            "hint: [{'query': 'How do I …?', 'response': '…'}]"
        )
    cache = await tab_memory().cache()
    return await cache.store_many([(e["query"], e.get("response")) for e in entries])
