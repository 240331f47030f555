"""Cited passages from the ingested chunks of a ``MemoryStore`` (the files-to-answers path).

:func:`search_ingested` is what ``evermind ask`` and the MCP ``docs_search`` tool both call:
the store's own recall, restricted to the ``ingest`` tag, so they read exactly what
``evermind ingest`` wrote (no second loader). Recall's relevance floor decides refusal: a
question no chunk clears the floor for returns no passages, which the surfaces say as
"no evidence" (``evermind.memory.recall``; docs/retrieval.md "cites or refuses").

**Filters on what rows say.** ``where`` (a :data:`~evermind.vectorstore.filters.Filter`, e.g.
from :func:`~evermind.vectorstore.where.parse_where`) is evaluated by the algebra's reference
:func:`~evermind.vectorstore.filters.evaluate` against a chunk's :func:`row_fields`: the
typed fields of the row it came from (``meta["fields"]``, :mod:`evermind.ingest.tabular`), so
the filter field ``status`` is the row's ``status``. A chunk with no row fields (a Markdown
section) passes only filters that admit an empty row (``not exists status``). The filter runs
inside recall's candidate selection (``MemoryStore.recall(select=...)``), before ranking is cut
to ``top_k``, over the namespace recall already scoped to: it narrows, never widens. Recall
ranks in process on every store (the SQLite file and the ``--store`` engines alike, which
``MemoryStore`` loads whole), so the filter is exact there: no over-fetch, no match lost.
Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.ingest.pipeline import INGEST_TAG
from evermind.memory import MemoryStore
from evermind.memory.records import Hit, MemoryRecord
from evermind.search.terms import coverage, term_set
from evermind.vectorstore.filters import Filter, evaluate
from evermind.vectorstore.port import MetaValue

#: What every surface says when no chunk clears recall's relevance floor.
NO_EVIDENCE = "no evidence"


@dataclass(frozen=True)
class IngestedPassage:
    """One ingested chunk recalled for a question, with what cites it.

    Attributes:
        number: Its rank, from 1 (the ``[n]`` a citation uses).
        source: The source id the chunk came from (a path relative to ``--base``).
        line: The line its text starts on in the source (0 when unknown).
        breadcrumb: Its section path (``Guide > Install > Linux``), "" when none.
        score: Recall's final relevance in (0, 1].
        key: The chunk's memory key.
        text: The chunk's stored content.
        fields: The typed fields of the row it came from (:func:`row_fields`; {} for prose).
    """

    number: int
    source: str
    line: int
    breadcrumb: str
    score: float
    key: str
    text: str
    fields: Mapping[str, MetaValue] = field(default_factory=dict, hash=False)

    @property
    def citation(self) -> str:
        """``source:line (breadcrumb)``, the line and breadcrumb left out when unknown."""
        place = f"{self.source}:{self.line}" if self.line else self.source
        return f"{place} ({self.breadcrumb})" if self.breadcrumb else place

    def to_dict(self) -> dict[str, Any]:
        """The passage as JSON-ready fields (``citation`` included)."""
        return {
            "n": self.number,
            "source": self.source,
            "line": self.line,
            "breadcrumb": self.breadcrumb,
            "citation": self.citation,
            "score": round(self.score, 4),
            "key": self.key,
            "text": self.text,
            "fields": dict(self.fields),
        }


def row_fields(meta: Mapping[str, Any]) -> dict[str, MetaValue]:
    """The fields a filter reads for a chunk: its row's flat (string, number, bool) fields.

    Nested values (a JSON record's objects and lists) are left out: no filter compares them.
    """
    fields = meta.get("fields")
    if not isinstance(fields, Mapping):
        return {}
    return {
        name: value
        for name, value in fields.items()
        if isinstance(name, str) and isinstance(value, str | int | float | bool)
    }


async def search_ingested(
    store: MemoryStore,
    query: str,
    top_k: int,
    where: Filter | None = None,
    min_coverage: float | None = None,
) -> list[IngestedPassage]:
    """The ingested chunks best matching ``query``, best first; empty means no evidence.

    Args:
        store: The memory store ``evermind ingest`` wrote (one namespace).
        query: The question.
        top_k: How many passages at most.
        where: Only chunks whose :func:`row_fields` it admits (None: every chunk).
        min_coverage: The retriever's relevance floor on top of recall's (``ask
            --min-coverage``): a passage must contain this weighted share of the question's
            content terms, each weighted by its IDF among the namespace's memories
            (:func:`evermind.search.terms.coverage`; the retriever's default is
            :data:`~evermind.search.terms.MIN_COVERAGE`); None, the default: recall's floor
            alone. It refuses more unanswerable questions and loses reworded ones (measured
            in docs/ingest.md).

    Raises:
        ConfigError: A bad query or ``top_k`` (recall's own checks).
    """
    select: Callable[[MemoryRecord], bool] | None = None
    if where is not None:

        def admitted(record: MemoryRecord) -> bool:
            return evaluate(where, row_fields(record.meta))

        select = admitted
    hits = await store.recall(query, top_k=top_k, tags=[INGEST_TAG], select=select)
    if min_coverage is not None:
        asked = term_set(query)
        weight = store.snapshot().bm25.idf
        hits = [h for h in hits if coverage(asked, term_set(h.content), weight) >= min_coverage]
    return [_passage(number, hit) for number, hit in enumerate(hits, start=1)]


def _passage(number: int, hit: Hit) -> IngestedPassage:
    meta = hit.meta
    line = meta.get("line")
    return IngestedPassage(
        number=number,
        source=str(meta.get("source") or hit.key),
        line=line if isinstance(line, int) and not isinstance(line, bool) else 0,
        breadcrumb=str(meta.get("breadcrumb") or ""),
        score=hit.score,
        key=hit.key,
        text=hit.content,
        fields=row_fields(meta),
    )


__all__ = ["NO_EVIDENCE", "IngestedPassage", "row_fields", "search_ingested"]
