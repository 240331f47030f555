"""Property tests (hypothesis): one current belief per subject; no lost concurrent commit."""

from __future__ import annotations

import asyncio
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from evermind.cognition import Claim, EvermindCognition, Verdict
from evermind.memory import InMemoryBackend, MemoryStore
from evermind.memory.sqlite_backend import SQLiteBackend
from tests.unit.test_memory_helpers import run

SUBJECT_SPELLINGS = {
    "deploy window": ["deploy window", "Deploy  Window", " DEPLOY window", "deploys"],
    "prod db": ["prod db", "PROD\tDB", "production database"],
    "editor": ["editor", "Editor"],
}
ALIASES = {"deploys": "deploy window", "production database": "prod db"}
spelling = st.sampled_from(
    [(c, s) for c, spellings in SUBJECT_SPELLINGS.items() for s in spellings]
)
claim = st.tuples(
    spelling, st.sampled_from(["A", "a.", "B", "C c"]), st.sampled_from([0.2, 0.5, 0.9])
)


def _cognition(sqlite: bool = False) -> EvermindCognition:
    # SQLite runs on a worker thread, so concurrent commits really interleave at every await.
    backend = SQLiteBackend(":memory:") if sqlite else InMemoryBackend()
    return EvermindCognition(MemoryStore(backend), aliases=ALIASES)


async def _current_counts(cog: EvermindCognition) -> tuple[Counter[str], Counter[str]]:
    current: Counter[str] = Counter()
    history: Counter[str] = Counter()
    for entry in await cog.store.export():
        (history if entry["archived"] else current)[entry["meta"]["canonical"]] += 1
    return current, history


@settings(max_examples=80, deadline=None)
@given(claims=st.lists(claim, min_size=1, max_size=30))
def test_single_incumbent_per_canonical_subject(
    claims: list[tuple[tuple[str, str], str, float]],
) -> None:
    async def body() -> None:
        cog = _cognition()
        supersedes: Counter[str] = Counter()
        expected: dict[str, str] = {}
        for (canonical, subject), statement, confidence in claims:
            result = await cog.commit(Claim(subject, statement, confidence))
            assert result.subject == canonical
            if result.verdict is Verdict.SUPERSEDE:
                supersedes[canonical] += 1
            if result.verdict in (Verdict.AUGMENT, Verdict.SUPERSEDE):
                expected[canonical] = statement
            current, history = await _current_counts(cog)
            assert set(current) == set(expected) and all(n == 1 for n in current.values())
            assert history == supersedes
        for canonical, statement in expected.items():
            belief = await cog.current(canonical)
            assert belief is not None and belief.statement == statement
            assert len(await cog.history(canonical)) == supersedes[canonical] + 1

    run(body())


@settings(max_examples=30, deadline=None)
@given(
    subjects=st.lists(st.sampled_from(["s1", "s2", "s3", "s4"]), min_size=1, max_size=40),
)
def test_no_lost_write_under_concurrent_commits(subjects: list[str]) -> None:
    async def body() -> None:
        cog = _cognition(sqlite=True)
        claims = [Claim(s, f"statement {i} about {s}", 0.5) for i, s in enumerate(subjects)]
        results = await asyncio.gather(*(cog.commit(c) for c in claims))
        assert all(r.verdict in (Verdict.AUGMENT, Verdict.SUPERSEDE) for r in results)
        for subject, n in Counter(subjects).items():
            history = await cog.history(subject)
            assert len(history) == n  # every commit is a revision: nothing overwritten
            assert [b.revision for b in history] == list(range(1, n + 1))
            assert {b.statement for b in history} == {
                c.statement for c in claims if c.subject == subject
            }
        current, _ = await _current_counts(cog)
        assert all(v == 1 for v in current.values()) and set(current) == set(subjects)
        await cog.store.close()

    run(body())
