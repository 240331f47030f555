"""An approximate cosine index (HNSW, usearch) beside the exact matrix of a vector index.

:class:`~evermind.search.vectors.VectorIndex` keeps every vector in a float32 matrix and scans
it exactly; past :data:`ANN_MIN_ROWS` vectors it also keeps an :class:`HnswGraph` over the same
rows and asks it for candidates first (see that module). The graph is usearch's HNSW
(``usearch.index.Index``, metric ``cos``, float32), chosen by measurement
(``benchmarks/ann_choice.py``; docs/vectorstore.md, "Approximate index"): against faiss'
``IndexHNSWFlat`` it builds slower but removes entries (faiss' HNSW cannot) and renames them,
which is what a store that upserts and forgets needs; hnswlib has no wheel for this Python;
sqlite-vec is an exact scan.

A graph's labels are the index's matrix rows (slots): a new vector is added under its slot, an
overwritten one is removed and added again, and when a removal moves the last row into the
hole the graph renames that row's label (no re-insertion). A removal leaves a tombstone in the
graph (usearch marks the node, the graph keeps routing through it); the owner rebuilds the
graph once tombstones pass a share of it (:data:`REBUILD_SHARE`).

Native-only: numpy and usearch (the ``runtime`` extra); :func:`available` says whether both
import, and nothing imports this module in the browser.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import numpy as np

from evermind.errors import ConfigError

__all__ = [
    "ANN_MIN_ROWS",
    "CONNECTIVITY",
    "EXPANSION_ADD",
    "EXPANSION_SEARCH",
    "REBUILD_SHARE",
    "HnswGraph",
    "available",
]

#: Below this many vectors the exact scan answers alone. Measured (docs/vectorstore.md): an
#: exact float32 scan of 2·10⁴ rows costs ~0.5 ms at 64 dimensions and ~2 ms at 384 here, under
#: recall's budget and exact, while building the graph over them costs seconds; past it the
#: scan grows linearly (~11 ms at 10⁵ × 64, ~70 ms at 10⁶) and the graph's ~0.2 ms does not.
ANN_MIN_ROWS = 20_000
#: HNSW parameters (usearch's names): neighbours per node, the candidate list while inserting
#: and while searching. ``ef_search`` is raised to the count asked for (over-fetch) by usearch.
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 64
#: Rebuild the graph when its tombstones exceed this share of the live rows.
REBUILD_SHARE = 0.25


def available() -> bool:
    """Whether usearch imports (numpy does, or this module would not have)."""
    try:
        importlib.import_module("usearch.index")
    except ImportError:
        return False
    return True


class HnswGraph:
    """usearch's HNSW over unit float32 rows, labelled by their row numbers.

    Args:
        dim: The rows' dimension.
        rows: The initial rows, (N, D) float32, labelled 0 … N-1 (built with every core).

    Raises:
        ConfigError: usearch is not installed.
    """

    def __init__(self, dim: int, rows: Any) -> None:
        try:
            from usearch.index import Index
        except ImportError as err:
            raise ConfigError(
                "approximate index: usearch is not installed; hint: pip install "
                "'evermind[runtime]' (or pass ann=False for the exact scan only)"
            ) from err
        self.dim = dim
        self._index = Index(
            ndim=dim,
            metric="cos",
            dtype="f32",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )
        self.tombstones = 0
        if len(rows):
            labels = np.arange(len(rows), dtype=np.uint64)
            self._index.add(labels, np.ascontiguousarray(rows, np.float32), threads=_threads())

    def __len__(self) -> int:
        """How many live rows the graph holds (tombstones not counted)."""
        return len(self._index)

    def add(self, label: int, row: Any) -> None:
        """Inserts ``row`` (D,) under ``label`` (a label not in the graph)."""
        self._index.add(label, row, threads=1)

    def add_many(self, labels: Any, rows: Any) -> None:
        """Inserts ``rows`` (M, D) under ``labels`` (M,), none of them in the graph."""
        self._index.add(np.asarray(labels, np.uint64), rows, threads=_threads())

    def remove(self, label: int) -> None:
        """Drops ``label`` (its node stays as a tombstone until the graph is rebuilt)."""
        self._index.remove(label)
        self.tombstones += 1

    def rename(self, old: int, new: int) -> None:
        """Gives the row labelled ``old`` the label ``new`` (not in the graph)."""
        self._index.rename(old, new)

    def needs_rebuild(self) -> bool:
        """Whether the tombstones exceed :data:`REBUILD_SHARE` of the live rows."""
        return self.tombstones > REBUILD_SHARE * max(1, len(self))

    def search(self, query: Any, count: int) -> list[int]:
        """The labels of (about) the ``count`` rows nearest to ``query`` (D,), nearest first.

        Fewer than ``count`` come back when the graph holds fewer, or its search could not
        reach more (the caller then falls back to the exact scan).
        """
        matches = self._index.search(query, count, threads=1)
        labels: list[int] = matches.keys.tolist()
        return labels


def _threads() -> int:
    """Worker threads for a bulk insert: every core this process may use (0 = usearch's all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return 0
