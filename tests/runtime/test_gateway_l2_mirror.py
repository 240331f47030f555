"""The gateway's cache skips its L2 lookup only when the L1 already holds all the L2 could serve.

An L1 miss used to ask the SQLite L2 every time (a trip to the store's worker thread, ~0.5 ms of
a miss). When the L2's scope holds only rows this cache wrote (its index was loaded empty and
every row since came through this cache's backend) and the L1 has dropped none of them, that
lookup can only find a question the L1 already judged, which the L1 refuses to take from the
L2 anyway, so it is skipped. Every other case still asks the L2: answers written before a
restart, an entry the L1 evicted, and a row another writer put in the same scope.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from evermind.bridges.caching import TermEmbedder
from evermind.cache.l2_sqlite import LookupResult, SemanticCacheStore
from evermind.cache.semantic import SemanticCache
from evermind.runtime.gateway.core import StoreBackend

QUESTIONS = [
    "How do I rotate the logs of nginx every week?",
    "What port does Postgres listen on by default?",
    "How can I undo the last git commit but keep my changes?",
    "Which Python version added structural pattern matching?",
    "How do I list the open files of a process on Linux?",
    "What does the HTTP status code 418 mean?",
    "How do I make a tarball of one folder?",
    "What is the boiling point of water at sea level?",
]


class CountingStore(SemanticCacheStore):
    """The real SQLite L2, counting the lookups that reach it."""

    def __init__(self, path: Path, max_entries: int = 1000) -> None:
        super().__init__(path, max_entries)
        self.lookups = 0

    async def lookup(self, *args: Any, **kwargs: Any) -> LookupResult:
        self.lookups += 1
        return await super().lookup(*args, **kwargs)


def _cache(store: SemanticCacheStore, capacity: int = 1024) -> SemanticCache:
    terms = TermEmbedder()
    return SemanticCache(terms, l2=StoreBackend(store), capacity=capacity, fingerprint="terms")


async def _fill(cache: SemanticCache, questions: list[str]) -> None:
    for i, question in enumerate(questions):
        await cache.astore(question, {"text": f"answer {i}"})
    assert isinstance(cache.l2, StoreBackend)
    await cache.l2.aflush()


def test_a_miss_skips_an_l2_that_holds_only_this_caches_answers(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "runtime.db")

    async def main() -> None:
        cache = _cache(store)
        await _fill(cache, QUESTIONS)
        before = store.lookups
        for question in ("How tall is Mount Everest?", "Who wrote The Trial?"):
            found = await cache.alookup(question)
            assert not found.hit
        assert store.lookups == before  # nothing the L1 lacks could be found there
        repeat = await cache.alookup(QUESTIONS[3])
        assert repeat.hit and repeat.tier == "l1" and repeat.response == {"text": "answer 3"}

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_after_a_restart_the_l2_is_asked_and_serves_what_was_stored_before(
    tmp_path: Path,
) -> None:
    first = CountingStore(tmp_path / "runtime.db")
    try:
        asyncio.run(_fill(_cache(first), QUESTIONS))
    finally:
        first.close()
    again = CountingStore(tmp_path / "runtime.db")

    async def main() -> None:
        cache = _cache(again)  # a new process: an empty L1 over the same database
        found = await cache.alookup(QUESTIONS[1])
        assert found.hit and found.tier == "l2" and found.response == {"text": "answer 1"}
        asked = again.lookups
        assert asked == 1
        # The scope was loaded with rows this cache did not write: it keeps asking.
        assert not (await cache.alookup("How tall is Mount Everest?")).hit
        assert again.lookups == asked + 1

    try:
        asyncio.run(main())
    finally:
        again.close()


def test_an_entry_the_l1_evicted_is_still_served_from_the_l2(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "runtime.db")

    async def main() -> None:
        cache = _cache(store, capacity=4)
        await _fill(cache, QUESTIONS)  # the L1 keeps the last 4; the L2 all 8
        before = store.lookups
        found = await cache.alookup(QUESTIONS[0])
        assert store.lookups == before + 1
        assert found.hit and found.tier == "l2" and found.response == {"text": "answer 0"}

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_a_row_another_writer_put_in_the_scope_is_found(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "runtime.db")

    async def main() -> None:
        cache = _cache(store)
        await _fill(cache, QUESTIONS[:4])
        assert isinstance(cache.l2, StoreBackend)
        # The same tenant and namespace written around this cache (another route, say).
        question = QUESTIONS[6]
        vector = list(TermEmbedder()(question))
        await store.store(cache.l2.tenant, "default@terms", vector, {"text": "tar"}, None, question)
        before = store.lookups
        found = await cache.alookup(question)
        assert store.lookups == before + 1
        assert found.hit and found.tier == "l2" and found.response == {"text": "tar"}

    try:
        asyncio.run(main())
    finally:
        store.close()
