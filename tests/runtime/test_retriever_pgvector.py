"""``EnterpriseRetriever`` on Postgres + pgvector: HNSW the dense arm, the tsvector the lexical.

A real Postgres (pgserver: PostgreSQL 16 with pgvector; the session's one server, the fixture
of test_vectorstore_engines), the ingest fixtures in one table of their own (dropped after),
``StoreLexicalArm`` over the engine's own ``lexical_query``. The same questions as the
in-process tests: the answering source comes first, an absent topic is refused, another
tenant sees nothing.
"""

from __future__ import annotations

import asyncio

from evals import retrieval as retrieval_eval

from evermind.retrieval import EnterpriseRetriever, StoreLexicalArm, index_chunks, read_chunks
from evermind.vectorstore import AccessScope, open_store


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
