"""``VectorIndex``: exact cosine top-k over one vector per string key (the memory store's).

``VectorIndex`` keeps one L2-normalised vector per key and answers "which keys are most
similar to this query vector" by scanning all of them (exact, no approximation). Two paths:

- numpy (native, when importable): a contiguous float32 matrix ``(N, D)`` kept in memory and
  updated in place on every write (append, overwrite, swap-remove), so a query is one
  matrix-vector product (:func:`evermind.search.rows.cosine_scores`).
- pure Python (the browser, or ``use_numpy=False``): ``array('f')`` rows and
  :func:`evermind.search.cosine.exact_dot`.

Past :data:`~evermind.search.ann.ANN_MIN_ROWS` vectors (2·10⁴; why in that module) the numpy
path also keeps an approximate index, :class:`~evermind.search.ann.HnswGraph` (usearch's
HNSW), when usearch imports: a search asks it for ``max(4k, 64)`` candidates, keeps those
``accept`` admits, rescores them exactly on the matrix (so scores and ties are the exact
scan's), and asks for four times more while fewer than ``k`` survive; past
:data:`ANN_MAX_FETCH` candidates, or when the graph returns fewer than asked, the exact scan
answers instead. The first search above the threshold starts building the graph in a
background thread (:class:`~evermind.search.ann.GraphKeeper`; seconds per 10⁵ vectors, measured
in docs/vectorstore.md) and the exact scan answers until it is ready (:meth:`build_graph` waits
for it instead); from then on it follows every ``add``/``remove``, and it is rebuilt (in the
background again) when its tombstones pass a quarter of it. ``last_scan`` says which answered
(``"ann"``, ``"numpy"``, ``"python"``).

numpy and usearch are imported lazily and guarded, so this module stays importable (and
browser-safe) without them. Recall calls the async ``asearch``; subclasses plug in
other scans there (:class:`evermind.search.gpu_index.GpuVectorIndex`: the GPU top-k kernel).
The semantic cache's indexes, keyed by int and grouped by scope, are
:mod:`evermind.search.scoped`.
"""

from __future__ import annotations

import importlib
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from evermind.errors import ConfigError, ShapeError
from evermind.search.cosine import exact_dot, normalise
from evermind.search.rows import cosine_scores, gram

__all__ = ["ANN_MAX_FETCH", "VectorIndex"]

#: The most candidates a filtered search asks the approximate index for before it falls back
#: to the exact scan (a filter that admits under ~k/4096 of the nearest rows).
ANN_MAX_FETCH = 4096


def _load_numpy() -> Any:
    """Returns the numpy module, or None when it cannot be imported (e.g. in Pyodide)."""
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None


def _load_ann() -> Any:
    """Returns :mod:`evermind.search.ann` when numpy and usearch import, else None."""
    try:
        ann = importlib.import_module("evermind.search.ann")
    except ImportError:
        return None
    return ann if ann.available() else None


class VectorIndex:
    """Cosine search over ``key -> vector``: exact, or approximate past a size threshold.

    Args:
        use_numpy: True forces numpy (error if missing), False forces pure Python, None
            uses numpy when it imports.
        ann: True requires the approximate index past ``ann_min_rows`` (error if usearch
            is missing), False keeps every search exact, None uses it when usearch imports.
        ann_min_rows: From how many vectors on the approximate index answers (default
            :data:`~evermind.search.ann.ANN_MIN_ROWS`).
    """

    def __init__(
        self,
        use_numpy: bool | None = None,
        *,
        ann: bool | None = None,
        ann_min_rows: int | None = None,
    ) -> None:
        np = _load_numpy() if use_numpy is not False else None
        if use_numpy and np is None:
            raise ShapeError("VectorIndex: use_numpy=True but numpy is not importable")
        if ann_min_rows is not None and (isinstance(ann_min_rows, bool) or ann_min_rows < 1):
            raise ConfigError(f"VectorIndex: ann_min_rows must be >= 1, got {ann_min_rows!r}")
        self._np = np
        self._ann_module: Any = _load_ann() if np is not None and ann is not False else None
        if ann and self._ann_module is None:
            raise ConfigError(
                "VectorIndex: ann=True but usearch (or numpy) is not importable; hint: pip "
                "install 'evermind[runtime]', or pass ann=None to fall back to the exact scan"
            )
        self._ann_min_rows = (
            ann_min_rows
            if ann_min_rows is not None
            else (self._ann_module.ANN_MIN_ROWS if self._ann_module else 0)
        )
        self._keeper: Any = None  # a GraphKeeper of the matrix rows, once past the threshold
        self._last = "numpy" if np is not None else "python"
        self.dim: int | None = None
        self._keys: list[str] = []
        self._slot: dict[str, int] = {}
        self._rows: list[array[float]] = []  # pure-Python path
        self._matrix: Any = None  # numpy path: (capacity, D) float32, first len(keys) rows live

    @property
    def uses_numpy(self) -> bool:
        """Whether searches run on numpy."""
        return self._np is not None

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def _check_dim(self, vector: Sequence[float]) -> None:
        if self.dim is None:
            self.dim = len(vector)
        elif len(vector) != self.dim:
            raise ShapeError(
                f"VectorIndex: expected vectors of dimension {self.dim}, got {len(vector)}; "
                "hint: one index holds one embedder's vectors (clear it when the model changes)"
            )

    def add(self, key: str, vector: Sequence[float]) -> None:
        """Stores ``vector`` (normalised here) under ``key``, replacing any earlier one."""
        self._check_dim(vector)
        row = normalise(vector)
        slot = self._slot.get(key)
        if slot is None:
            slot = len(self._keys)
            self._keys.append(key)
            self._slot[key] = slot
            if self._np is None:
                self._rows.append(row)
            else:
                self._grow(slot + 1)
        elif self._np is None:
            self._rows[slot] = row
        if self._np is not None:
            self._matrix[slot] = self._np.frombuffer(row, dtype=self._np.float32)
            if self._keeper is not None:
                self._keeper.added(slot, self._matrix[slot])

    def add_many(self, keys: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        """:meth:`add` of each ``(key, vector)`` pair, with one matrix write on numpy.

        Raises:
            ShapeError: The lengths differ, or a vector has another dimension.
        """
        if len(keys) != len(vectors):
            raise ShapeError(
                f"VectorIndex.add_many: {len(keys)} keys but {len(vectors)} vectors; "
                "expected one vector per key"
            )
        if self._np is None or len(set(keys)) != len(keys) or any(k in self._slot for k in keys):
            for key, vector in zip(keys, vectors, strict=True):
                self.add(key, vector)  # overwrites and repeats: one at a time
            return
        if not keys:
            return
        for vector in vectors:
            self._check_dim(vector)
        np = self._np
        rows = np.stack([np.asarray(v, dtype=np.float32) for v in vectors])  # (M, D)
        norms = np.linalg.norm(rows.astype(np.float64), axis=1)  # (M,)
        if not np.isfinite(norms).all():
            raise ShapeError(
                "VectorIndex.add_many: expected finite numbers, got a vector with NaN or "
                "infinity; hint: check the embedder's output"
            )
        first = len(self._keys)
        self._grow(first + len(keys))
        self._matrix[first : first + len(keys)] = rows / np.where(norms == 0, 1, norms)[:, None]
        self._keys.extend(keys)
        self._slot.update((key, first + i) for i, key in enumerate(keys))
        if self._keeper is not None:
            self._keeper.added_many(first, self._matrix[first : first + len(keys)])

    def _grow(self, needed: int) -> None:
        np: Any = self._np
        if self._matrix is None:
            self._matrix = np.zeros((max(needed, 64), self.dim), dtype=np.float32)
        elif needed > self._matrix.shape[0]:
            bigger = np.zeros((max(needed, 2 * self._matrix.shape[0]), self.dim), np.float32)
            bigger[: self._matrix.shape[0]] = self._matrix
            self._matrix = bigger

    def remove(self, key: str) -> None:
        """Drops ``key`` (no-op when absent); the last row moves into the hole."""
        slot = self._slot.pop(key, None)
        if slot is None:
            return
        last = len(self._keys) - 1
        moved = self._keys[last]
        if self._keeper is not None:
            self._keeper.removed(slot, last)
        if slot != last:
            self._keys[slot] = moved
            self._slot[moved] = slot
            if self._np is None:
                self._rows[slot] = self._rows[last]
            else:
                self._matrix[slot] = self._matrix[last]
        self._keys.pop()
        if self._np is None:
            self._rows.pop()

    def clear(self) -> None:
        """Forgets every vector and the dimension."""
        self.dim = None
        self._keys.clear()
        self._slot.clear()
        self._rows.clear()
        self._matrix = None
        self._keeper = None  # a build under way is dropped with it

    def vector(self, key: str) -> array[float] | None:
        """Returns the stored (normalised) vector of ``key``, or None."""
        slot = self._slot.get(key)
        if slot is None:
            return None
        if self._np is None:
            return self._rows[slot]
        return array("f", self._matrix[slot].tobytes())

    def cosine(self, key_a: str, key_b: str) -> float:
        """Cosine of two stored vectors (0.0 when either is missing)."""
        a, b = self._slot.get(key_a), self._slot.get(key_b)
        if a is None or b is None:
            return 0.0
        if self._np is not None:
            return float(cosine_scores(self._matrix[a], self._matrix[b]))
        return exact_dot(self._rows[a], self._rows[b])

    def cosine_to(self, key: str, unit_query: Sequence[float]) -> float | None:
        """Cosine of ``key``'s stored vector with ``unit_query``, a vector already passed
        through :func:`~evermind.search.cosine.normalise`; None when ``key`` has no vector."""
        slot = self._slot.get(key)
        if slot is None:
            return None
        if self._np is not None:
            np = self._np
            return float(cosine_scores(self._matrix[slot], np.asarray(unit_query, np.float32)))
        return exact_dot(self._rows[slot], unit_query)

    def cosines_to(self, keys: Sequence[str], unit_query: Sequence[float]) -> list[float | None]:
        """:meth:`cosine_to` of each of ``keys`` at once (one matrix-vector product on numpy):
        None for a key without a vector."""
        slots = [self._slot.get(key) for key in keys]
        if self._np is None:
            return [None if s is None else exact_dot(self._rows[s], unit_query) for s in slots]
        np = self._np
        live = [s for s in slots if s is not None]
        if not live:
            return [None] * len(keys)
        found = iter(cosine_scores(self._matrix[live], np.asarray(unit_query, np.float32)).tolist())
        return [None if s is None else next(found) for s in slots]

    def cosine_matrix(self, keys: Sequence[str]) -> list[list[float]]:
        """The cosine of every two of ``keys``' stored vectors (one Gram product on numpy);
        0.0 where either has none."""
        slots = [self._slot.get(key) for key in keys]
        if self._np is None:
            return [
                [
                    0.0 if a is None or b is None else exact_dot(self._rows[a], self._rows[b])
                    for b in slots
                ]
                for a in slots
            ]
        np = self._np
        rows = np.zeros((len(keys), self.dim or 1), np.float32)
        present = [i for i, s in enumerate(slots) if s is not None]
        if present:
            rows[present] = self._matrix[[slots[i] for i in present]]
        matrix: list[list[float]] = gram(rows).tolist()
        return matrix

    def scores(self, query: Sequence[float]) -> dict[str, float]:
        """Returns the cosine of ``query`` with every stored vector."""
        if not self._keys:
            return {}
        self._check_dim(query)
        q = normalise(query)
        if self._np is not None:
            np = self._np
            sims = cosine_scores(self._matrix[: len(self._keys)], np.frombuffer(q, np.float32))
            return dict(zip(self._keys, sims.tolist(), strict=True))  # sims: (N,)
        return {key: exact_dot(row, q) for key, row in zip(self._keys, self._rows, strict=True)}

    def search(
        self, query: Sequence[float], k: int, accept: Callable[[str], bool] | None = None
    ) -> list[tuple[str, float]]:
        """Returns the ``k`` most similar ``(key, cosine)`` pairs that ``accept``, best first.

        Ties are broken by key, so results are deterministic.
        """
        if k <= 0 or not self._keys:
            return []
        self._check_dim(query)
        if self._np is None:
            ranked = sorted(self.scores(query).items(), key=lambda kv: (-kv[1], kv[0]))
            self._last = "python"
            return [kv for kv in ranked if accept is None or accept(kv[0])][:k]
        np = self._np
        q = np.frombuffer(normalise(query), dtype=np.float32)
        if self._ann_module is not None and len(self._keys) >= self._ann_min_rows:
            found = self._approximate(q, k, accept)
            if found is not None:
                self._last = "ann"
                return found
        self._last = "numpy"
        sims = cosine_scores(self._matrix[: len(self._keys)], q)  # (N,)
        # Partition first: sorting only the best few is much cheaper than sorting all N; if the
        # filter rejects too many of them, widen to a full sort.
        window = min(len(sims), max(4 * k, 64))
        out: list[tuple[str, float]] = []
        while True:
            if window < len(sims):
                head = np.argpartition(-sims, window - 1)[:window]
                order = head[np.argsort(-sims[head], kind="stable")]
            else:
                order = np.argsort(-sims, kind="stable")
            out = []
            for slot in order.tolist():
                key = self._keys[slot]
                if accept is None or accept(key):
                    out.append((key, float(sims[slot])))
                    if len(out) == k:
                        break
            if len(out) == k or window >= len(sims):
                break
            window = len(sims)
        # Equal cosines come back in slot order; re-sort so ties go by key as documented.
        return sorted(out, key=lambda kv: (-kv[1], kv[0]))

    def _approximate(
        self, q: Any, k: int, accept: Callable[[str], bool] | None
    ) -> list[tuple[str, float]] | None:
        """The top ``k`` from the graph's candidates, rescored exactly; None when the graph
        cannot supply ``k`` admitted ones within :data:`ANN_MAX_FETCH` (the exact scan then)."""
        graph = self._graph_now(wait=False)
        if graph is None:
            return None  # the first build runs in the background: the exact scan answers
        n = len(self._keys)
        want = min(n, max(4 * k, 64))
        while True:
            found = graph.search(q, want)
            slots = found if accept is None else [s for s in found if accept(self._keys[s])]
            if len(slots) >= k or len(found) >= n:  # enough, or every row was seen
                break
            if len(found) < want or want >= ANN_MAX_FETCH:
                return None  # the graph could not reach more rows: the exact scan answers
            want = min(n, ANN_MAX_FETCH, 4 * want)
        if not slots:
            return []
        sims = cosine_scores(self._matrix[slots], q).tolist()  # exact, as the scan's
        keys = [self._keys[s] for s in slots]
        ranked = sorted(zip(keys, sims, strict=True), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:k]

    def _graph_now(self, wait: bool) -> Any:
        """The approximate index's graph (None while its first build runs)."""
        if self._keeper is None:
            self._keeper = self._ann_module.GraphKeeper(self.dim)
        return self._keeper.current(self._matrix, len(self._keys), wait=wait)

    def build_graph(self) -> bool:
        """Builds the approximate index now and waits for it (e.g. after a bulk load, before
        serving); returns whether searches at this size will use it."""
        if not self.approximate:
            return False
        return self._graph_now(wait=True) is not None

    async def asearch(
        self, query: Sequence[float], k: int, accept: Callable[[str], bool] | None = None
    ) -> list[tuple[str, float]]:
        """Async :meth:`search`, the form recall calls.

        The seam for scans that must await (a GPU readback): a subclass overrides this and
        keeps ``search`` as its exact CPU fallback (see :mod:`evermind.search.gpu_index`).
        """
        return self.search(query, k, accept)

    @property
    def last_scan(self) -> str:
        """Which scan answered the latest search: ``"ann"`` (the approximate index),
        ``"numpy"`` or ``"python"`` (exact) here."""
        return self._last

    @property
    def approximate(self) -> bool:
        """Whether searches at this size go to the approximate index first."""
        return self._ann_module is not None and len(self._keys) >= self._ann_min_rows
