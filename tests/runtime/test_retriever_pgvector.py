"""``EnterpriseRetriever`` on Postgres + pgvector: HNSW the dense arm, the tsvector the lexical.

A real Postgres (pgserver: PostgreSQL 16 with pgvector), the ingest fixtures in one table,
``StoreLexicalArm`` over the engine's own ``lexical_query``. The same questions as the
in-process tests: the answering source comes first, an absent topic is refused, another
tenant sees nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import pytest
from evals import retrieval as retrieval_eval

from evermind.retrieval import EnterpriseRetriever, StoreLexicalArm, index_chunks, read_chunks
from evermind.vectorstore import AccessScope, open_store


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of one Postgres for this module; stopped, and checked gone, at the end."""
    import pgserver  # a test dependency: missing, this fails rather than skips

    folder = tmp_path_factory.mktemp("pg_retriever")
    server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
        left = [line for line in ps.stdout.splitlines() if str(folder) in line]
        assert not left, f"postgres processes left behind: {left}"


def test_the_retriever_on_pgvector_with_the_tsvector_arm(postgres: str) -> None:
    async def main() -> None:
        store = await open_store(postgres, dim=256, name="retriever_fixtures")
        try:
            chunks = read_chunks([retrieval_eval.FIXTURES], base=retrieval_eval.FIXTURES)
            embedder = retrieval_eval.embedder()
            assert await index_chunks(chunks, store, embedder, retrieval_eval.ACL) == 234
            retriever = EnterpriseRetriever(store, embedder, lexical=StoreLexicalArm(store))
            scope = retrieval_eval.SCOPE
            found = await retriever.search(
                "What exit code does the client return when the token is refused?", scope
            )
            assert not found.refused and found.passages[0].source == "docs/cli.md"
            assert found.passages[0].lexical is not None and found.passages[0].cosine is not None
            nfs = await retriever.search("Why should the SQLite journal not live on NFS?", scope)
            assert "docs/configuration.md" in {p.source for p in nfs.passages}
            absent = await retriever.search("How do I configure single sign-on with Okta?", scope)
            assert absent.refused
            stranger = AccessScope("globex", frozenset({"group:support"}))
            theirs = await retriever.search("What exit code means the token is refused?", stranger)
            assert (
                theirs.refused and theirs.candidates == 0 and theirs.reason == "nothing retrieved"
            )
        finally:
            await store.drop()  # type: ignore[attr-defined]
            await store.close()

    asyncio.run(main())
