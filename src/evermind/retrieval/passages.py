"""The retriever's result types: a :class:`Passage`, a :class:`SearchResult`, the floor.

Plain frozen values, so a caller (the evaluation harness, an HTTP route) reads them without
the retriever. Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evermind.errors import ConfigError
from evermind.search.terms import MIN_COVERAGE
from evermind.vectorstore.port import MetaValue

__all__ = ["Passage", "RelevanceFloor", "SearchResult", "source_of"]


def source_of(item_id: str, metadata: dict[str, MetaValue]) -> str:
    """The source a passage came from: its ``source`` field, else the chunk key's prefix.

    Chunk keys are ``<source>#<position>@<hash>`` (:attr:`evermind.ingest.Chunk.key`).
    """
    named = metadata.get("source")
    if isinstance(named, str) and named:
        return named
    head, sep, _ = item_id.rpartition("#")
    return head if sep and head else item_id


@dataclass(frozen=True)
class RelevanceFloor:
    """What a passage needs to be used at all (see the module docstring).

    Attributes:
        min_coverage: Least weighted share of the question's content terms the passage
            contains, in (0, 1]; None: coverage alone never admits.
        min_cosine: Least cosine to the question (embedder-specific: measure it on your
            own labelled set); None: the cosine alone never admits.
    """

    min_coverage: float | None = MIN_COVERAGE
    min_cosine: float | None = None

    def __post_init__(self) -> None:
        if self.min_coverage is not None and not 0.0 < self.min_coverage <= 1.0:
            raise ConfigError(
                f"RelevanceFloor: min_coverage must be in (0, 1], got {self.min_coverage!r}"
            )
        if self.min_cosine is not None and not -1.0 <= self.min_cosine <= 1.0:
            raise ConfigError(
                f"RelevanceFloor: min_cosine must be in [-1, 1], got {self.min_cosine!r}"
            )
        if self.min_coverage is None and self.min_cosine is None:
            raise ConfigError(
                "RelevanceFloor: both bounds are None, so nothing could ever be admitted; "
                "set min_coverage, min_cosine or both"
            )

    def admits(self, passage: Passage) -> bool:
        """Whether ``passage`` clears the floor (either bound suffices)."""
        if self.min_coverage is not None and passage.coverage >= self.min_coverage:
            return True
        cosine = passage.cosine
        return self.min_cosine is not None and cosine is not None and cosine >= self.min_cosine


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk and why it ranks where it does.

    Attributes:
        id: The item id (a chunk key ``<source>#<n>@<hash>`` for ingested chunks).
        source: The source it came from (:func:`source_of`).
        text: Its text.
        score: Its final relevance (fused, or the reranker's), the best passage 1.
        cosine: Its cosine to the question (None: only the lexical arm returned it).
        lexical: The lexical arm's score (None: only the dense arm returned it).
        coverage: The weighted share of the question's terms it contains (the floor's).
        rerank: The reranker's score (None: no reranker).
        metadata: The item's metadata.
    """

    id: str
    source: str
    text: str
    score: float
    cosine: float | None
    lexical: float | None
    coverage: float
    rerank: float | None = None
    metadata: dict[str, MetaValue] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResult:
    """What ``search`` found: passages, or a refusal.

    Attributes:
        question: The question asked.
        passages: The passages that cleared the floor, in MMR order (empty when refused).
        refused: True when no candidate cleared the floor.
        reason: Why it refused (empty when it did not).
        candidates: How many distinct candidates the two arms returned together.
        ranked_by: The steps that ran, e.g. ``"dense+lexical; convex w=0.50; mmr λ=0.70"``.
    """

    question: str
    passages: tuple[Passage, ...]
    refused: bool
    reason: str
    candidates: int
    ranked_by: str
