"""Search: the one home of the maths memory, the cache, the retriever and the runtime share.

Memory recall, the semantic cache (library, tab and runtime L2), the enterprise retriever,
the vector store's in-process engine and the Studio all rank by the same arithmetic; each
piece lives here once, and they call it (``tests/unit/test_one_search.py`` fails on a second
copy elsewhere). The layer sits below ``memory``, ``cache`` and ``vectorstore`` and imports
only ``text``, ``errors`` and (for the GPU scan) ``kernels``.

==========================  ===============================================================
module                      what it owns
==========================  ===============================================================
:mod:`~.cosine`             dot products of Python vectors (fast and correctly rounded),
                            unit scaling, the cosines of sampled pairs
:mod:`~.rows`               the cosine scan over a matrix of unit rows (numpy arrays), the
                            Gram matrix, the best rows
:mod:`~.vectors`            :class:`VectorIndex`: one vector per string key, exact top-k
                            (numpy when importable, else pure Python): the memory store's
:mod:`~.gpu_index`          ``GpuVectorIndex``: the same index, scanned by the GPU top-k
:mod:`~.scoped`             :class:`ScopedIndex`: int keys grouped by scope, the cache's;
                            :class:`ScanIndex` (pure Python)
:mod:`~.matrix`             ``MatrixIndex``: the scoped index on numpy (native-only)
:mod:`~.calibration`        what unrelated texts score: the cache's threshold, memory's
                            relevance floor and fusion trust
:mod:`~.terms`              term statistics: IDF formulas, :class:`TermStats`, Jaccard,
                            coverage
:mod:`~.bm25`               :class:`BM25Index`, incremental Okapi BM25
:mod:`~.fusion`             top-k, z-scores, min-max, convex fusion, reciprocal-rank fusion
:mod:`~.mmr`                maximal marginal relevance
:mod:`~.risk`               error bounds for learned decisions: the Clopper–Pearson bound,
                            the lowest threshold whose served error stays ≤ δ (the verified
                            cache's)
==========================  ===============================================================

Browser-safe: standard library and ``evermind`` only (``matrix`` is native-only; ``rows``
works on numpy arrays without importing numpy).
"""

from __future__ import annotations

from evermind.search.bm25 import BM25Index
from evermind.search.calibration import (
    UNCALIBRATED,
    Calibration,
    RelevanceCalibration,
    below_floor,
    calibrate,
    calibration_pairs,
    measure_calibration,
    relevance_calibration,
)
from evermind.search.cosine import dot, exact_dot, normalise, pairwise_cosines
from evermind.search.fusion import (
    convex,
    fuse_convex,
    fuse_rrf,
    reciprocal_rank_fusion,
    top_k,
    unit_scale,
    zscores,
)
from evermind.search.mmr import mmr, mmr_order
from evermind.search.scoped import ScanIndex, Scope, ScopedIndex
from evermind.search.terms import TermStats, coverage, idf, jaccard, term_set
from evermind.search.vectors import VectorIndex

__all__ = [
    "UNCALIBRATED",
    "BM25Index",
    "Calibration",
    "RelevanceCalibration",
    "ScanIndex",
    "Scope",
    "ScopedIndex",
    "TermStats",
    "VectorIndex",
    "below_floor",
    "calibrate",
    "calibration_pairs",
    "convex",
    "coverage",
    "dot",
    "exact_dot",
    "fuse_convex",
    "fuse_rrf",
    "idf",
    "jaccard",
    "measure_calibration",
    "mmr",
    "mmr_order",
    "normalise",
    "pairwise_cosines",
    "reciprocal_rank_fusion",
    "relevance_calibration",
    "term_set",
    "top_k",
    "unit_scale",
    "zscores",
]
