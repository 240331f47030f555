"""Write-through cognition on one Postgres (pgserver) shared by several writers.

The Postgres is the session's one server (the ``postgres`` fixture of tests/runtime/conftest.py);
the writers work in a namespace of this module's own ("drift").

Issue 37's proof "concurrent writers on Postgres converge": three ``MemoryStore`` objects, each
with its own connection to one tenant's namespace (three servers would hold three such
stores), race to change one fact whose evidence supports every change. Postgres checks each
write's compare-and-set inside its transaction, so a decision taken on a stale view is retaken
on the fresh one: the race ends with one current value that every store reads, and every
value that was current once is in that fact's history; nothing is lost and nothing is
written twice.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from evermind.memory import MemoryRecord
from evermind.memory.cognition import Fact
from evermind.memory.evidence import Evidence
from evermind.memory.shared_memory import shared_memory
from evermind.memory.write_through import Remember, history, remember_through

KEY = "staging-port"
FIRST = "staging deploys on port 8080"
RACERS = ("staging deploys on port 9090", "staging deploys on port 7070")


class Supports:
    """Evidence that always supports the new value. The first ``hold`` questions wait for
    each other, so the racing writers have both decided on the same incumbent before either
    writes: the race is forced, not left to timing."""

    def __init__(self, hold: int = 0) -> None:
        self.calls = 0
        self.hold = hold
        self.all_asked = asyncio.Event()

    async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
        self.calls += 1
        if self.calls >= self.hold:
            self.all_asked.set()
        await asyncio.wait_for(self.all_asked.wait(), timeout=30)
        return Evidence(True, "the deploy file says so")


def test_racing_writers_on_postgres_end_with_one_current_value_and_its_history(
    postgres: str,
) -> None:
    async def body() -> None:
        async with AsyncExitStack() as stack:
            stores = [
                await stack.enter_async_context(
                    shared_memory(postgres, None, tenant="acme", namespace="drift")
                )
                for _ in range(3)
            ]
            first = await remember_through(stores[0], Remember.of(KEY, FIRST), Supports())
            assert first.action == "augment", first
            racing = Supports(hold=len(RACERS))
            outcomes = await asyncio.gather(
                *(
                    remember_through(store, Remember.of(KEY, text), racing)
                    for store, text in zip(stores[1:], RACERS, strict=True)
                )
            )
            # Both decided on 8080 while the other's evidence was pending; the later write
            # found the version moved and decided again: a third question to the evidence.
            assert racing.calls >= 3, racing.calls
            assert [o.action for o in outcomes] == ["supersede", "supersede"], outcomes
            seen = []
            for store in stores:
                await store.refresh()
                current = await store.get(KEY)
                assert current is not None
                past = [r.content for r in await history(store, KEY)]
                seen.append((current.content, past))
            assert seen[0] == seen[1] == seen[2], seen  # every store reads one state
            current, past = seen[0]
            assert current in RACERS
            other = RACERS[1 - RACERS.index(current)]
            # Both earlier values are history, newest first: the loser superseded 8080 and
            # the winner superseded the loser, after retaking its stale decision.
            assert past == [other, FIRST], seen
            live = [h.key for h in await stores[0].recall("which port does staging deploy on")]
            assert live.count(KEY) == 1 and not any(k != KEY and "staging" in k for k in live)

    asyncio.run(body())
