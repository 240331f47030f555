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
graph (usearch marks the node, the graph keeps routing through it); the graph is rebuilt once
tombstones pass a share of it (:data:`REBUILD_SHARE`).

:class:`GraphKeeper` builds the graph in a background thread (usearch releases the GIL while
it inserts), over a copy of the rows, so a search never waits for a build: until the graph is
ready the exact scan answers. The rows changed meanwhile are noted and replayed onto the new
graph when the build is taken up (the next search after it finished).

Native-only: numpy and usearch (the ``runtime`` extra); :func:`available` says whether both
import, and nothing imports this module in the browser.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any

import numpy as np

from evermind.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "ANN_MIN_ROWS",
    "CONNECTIVITY",
    "EXPANSION_ADD",
    "EXPANSION_SEARCH",
    "REBUILD_SHARE",
    "GraphKeeper",
    "HnswGraph",
    "available",
]

#: Below this many vectors the exact scan answers alone. Measured (docs/vectorstore.md): an
#: exact float32 scan of 2·10⁴ rows costs ~0.5 ms at 64 dimensions and ~2 ms at 384 here, under
#: recall's budget and exact, while building the graph over them costs seconds; past it the
#: scan grows linearly (~11 ms at 10⁵ × 64, ~70 ms at 10⁶) and the graph's ~0.2 ms does not.
ANN_MIN_ROWS = 20_000
#: HNSW parameters (usearch's names): neighbours per node, the candidate list while inserting
#: and while searching (usearch widens it to the count asked for: the caller over-fetches at
#: least 64). ``EXPANSION_ADD`` 40 rather than usearch's 128: measured at 10⁵ × 64 on this
#: machine, the build took 20 s instead of ~58 s for recall@10 0.995 instead of 1.000 at a
#: search list of 64 (``benchmarks/ann_choice.py --ef-construction``).
CONNECTIVITY = 16
EXPANSION_ADD = 40
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

    def __contains__(self, label: object) -> bool:
        return isinstance(label, int) and bool(self._index.contains(label))

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


class GraphKeeper:
    """Keeps an :class:`HnswGraph` in step with the first ``n`` rows of an owner's matrix.

    The owner reports each change after making it (:meth:`added`, :meth:`added_many`,
    :meth:`removed`) and asks :meth:`current` for the graph to search: None while the first
    build runs (the owner scans exactly), the graph afterwards.

    Args:
        dim: The rows' dimension.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.graph: HnswGraph | None = None
        self.failed = False  # a build raised (logged): the owner keeps to the exact scan
        self.builds = 0
        self._thread: threading.Thread | None = None
        self._outcome: list[HnswGraph | BaseException] = []
        self._dirty: set[int] = set()  # rows changed since the running build's copy
        self._copied = 0  # how many rows that copy holds

    @property
    def building(self) -> bool:
        """Whether a build is under way (or finished and not yet taken up)."""
        return self._thread is not None

    def added(self, slot: int, row: Any) -> None:
        """Row ``slot`` was appended or overwritten with ``row`` (D,)."""
        if self.graph is not None:
            if slot in self.graph:
                self.graph.remove(slot)
            self.graph.add(slot, row)
        if self._thread is not None:
            self._dirty.add(slot)

    def added_many(self, first: int, rows: Any) -> None:
        """``rows`` (M, D) were appended as rows ``first`` … ``first + M - 1``."""
        if self.graph is not None:
            self.graph.add_many(np.arange(first, first + len(rows)), rows)
        if self._thread is not None:
            self._dirty.update(range(first, first + len(rows)))

    def removed(self, slot: int, last: int) -> None:
        """Row ``slot`` was removed and row ``last`` moved into it (``slot == last``: none)."""
        if self.graph is not None:
            self.graph.remove(slot)
            if slot != last:
                self.graph.rename(last, slot)
        if self._thread is not None:
            self._dirty.add(slot)  # holds last's row now; ``last`` is past the live rows

    def current(self, matrix: Any, n: int, *, wait: bool = False) -> HnswGraph | None:
        """The graph over ``matrix[:n]`` to search now, or None while its first build runs.

        Takes up a finished build (replaying the rows changed meanwhile), and starts one when
        there is no graph or its tombstones call for a rebuild (the old graph serves until
        the new one is ready). ``wait`` blocks until the graph is ready.
        """
        if self._thread is not None and (wait or not self._thread.is_alive()):
            self._take_up(matrix, n)
        stale = self.graph is None or self.graph.needs_rebuild()
        if self._thread is None and not self.failed and stale:
            self._start(matrix, n)
            if wait:
                self._take_up(matrix, n)
        return self.graph

    def _start(self, matrix: Any, n: int) -> None:
        rows = np.array(matrix[:n], dtype=np.float32)  # a copy: the owner's rows move on
        self._dirty, self._copied, self._outcome = set(), n, []
        outcome = self._outcome

        def build() -> None:
            try:
                outcome.append(HnswGraph(self.dim, rows))
            except BaseException as err:  # handed to the owner's thread in _take_up
                outcome.append(err)

        self._thread = threading.Thread(target=build, name="evermind-hnsw-build", daemon=True)
        self._thread.start()

    def _take_up(self, matrix: Any, n: int) -> None:
        """Joins the build and brings its graph to the owner's rows now."""
        assert self._thread is not None
        self._thread.join()
        self._thread = None
        (outcome,) = self._outcome
        if isinstance(outcome, BaseException):
            self.failed = True
            logger.warning(
                "approximate index: the build failed; exact scans from now on: %s", outcome
            )
            return
        graph = outcome
        stale = {s for s in self._dirty if s < self._copied} | set(range(n, self._copied))
        for slot in stale:
            graph.remove(slot)
        fresh = sorted(s for s in self._dirty if s < n)
        if fresh:
            graph.add_many(np.asarray(fresh), matrix[fresh])
        self.graph = graph
        self._dirty = set()
        self.builds += 1


def _threads() -> int:
    """Worker threads for a bulk insert: every core this process may use (0 = usearch's all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return 0
