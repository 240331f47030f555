"""``GpuVectorIndex``: exact cosine top-k on the GPU (the ``topk`` kernel), for the tab.

The index keeps the same host copy as :class:`~evermind.search.vectors.VectorIndex` (it *is*
one, so ``cosine``/``vector`` and the exact CPU ``search`` still work) and mirrors the rows
into one GPU storage buffer ``(capacity, D)`` float32:

- writes only mark rows dirty; the next search uploads them — row by row when few changed,
  or the whole live matrix in one write when many did (a bulk load, or a grown buffer);
- the buffer grows by doubling, so N appends cost O(N) uploads in total;
- a removal swaps the last row into the hole (as the host copy does) and marks that slot.

A search writes the query, replays the recorded :class:`~evermind.kernels.topk.TopK`
dispatches for the current N (re-recorded only when N changes), and reads back
``min(64, N)`` candidates; recall's filter (tags, TTL, archived) is applied to those. When
the filter leaves fewer than ``k``, or ``k`` exceeds the kernel's 64, the exact CPU scan
answers instead, so results never depend on the path taken. ``last_scan`` says which ran.

Browser-safe: standard library and ``evermind`` (the GPU port) only.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from evermind.kernels.topk import MAX_K, TopK
from evermind.search.cosine import normalise
from evermind.search.vectors import VectorIndex

if TYPE_CHECKING:
    from evermind.gpu import Buffer, Device, Dispatch

logger = logging.getLogger(__name__)

#: Rows allocated on the GPU at first use (grows by doubling).
_INITIAL_ROWS = 256


class GpuVectorIndex(VectorIndex):
    """Exact cosine search with the scan on the GPU.

    Args:
        device: The GPU device (in the tab: the one the model trains on).
        min_rows: Below this many vectors the CPU scan answers (a readback costs more than
            scanning a handful of rows); 1 always uses the GPU.
        use_numpy: Host copy on numpy (natively) or pure Python; see ``VectorIndex``.
    """

    def __init__(self, device: Device, *, min_rows: int = 1, use_numpy: bool | None = None) -> None:
        super().__init__(use_numpy)
        self.device = device
        self.min_rows = max(1, int(min_rows))
        self._topk = TopK(device)
        self._stored: Buffer | None = None
        self._capacity = 0
        self._dirty: set[int] = set()
        self._query: Buffer | None = None
        self._out_score: Buffer | None = None
        self._out_index: Buffer | None = None
        self._plan: list[Dispatch] = []
        self._plan_shape: tuple[int, int] | None = None
        self._gpu_lock = asyncio.Lock()
        self._last_scan = "none"
        #: Searches answered on the GPU, and by the CPU fallback (for tests and benches).
        self.gpu_searches = 0
        self.cpu_searches = 0

    @property
    def last_scan(self) -> str:
        """``"gpu"``, or ``"cpu: <why>"`` when the exact CPU scan answered the last search."""
        return self._last_scan

    # ------------------------------------------------------------------ writes

    def add(self, key: str, vector: Sequence[float]) -> None:
        """Stores ``vector`` under ``key``; the GPU row is uploaded before the next search."""
        super().add(key, vector)
        self._dirty.add(self._slot[key])

    def add_many(self, keys: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        """Stores each ``(key, vector)``; their GPU rows are uploaded before the next search."""
        super().add_many(keys, vectors)
        self._dirty.update(self._slot[key] for key in keys)

    def remove(self, key: str) -> None:
        """Drops ``key``; the row moved into its slot is re-uploaded before the next search."""
        slot = self._slot.get(key)
        super().remove(key)
        if slot is not None:
            self._dirty.discard(len(self._keys))  # the old last slot is beyond N now
            if slot < len(self._keys):
                self._dirty.add(slot)

    def clear(self) -> None:
        """Forgets every vector and frees the GPU buffers."""
        super().clear()
        self.release()

    def release(self) -> None:
        """Frees the GPU buffers (the host copy stays; the next search re-uploads it)."""
        self._drop_plan()
        owned = [b for b in (self._stored, self._query, self._out_score, self._out_index) if b]
        self.device.destroy(*owned)
        self._stored = self._query = self._out_score = self._out_index = None
        self._capacity = 0
        self._dirty = set(range(len(self._keys)))

    # ------------------------------------------------------------------ GPU state

    def _row_bytes(self, slot: int) -> bytes:
        if self._np is None:
            return self._rows[slot].tobytes()
        data: bytes = self._matrix[slot].tobytes()
        return data

    def _drop_plan(self) -> None:
        """Destroys the scratch buffers the recorded search made (not the index's own)."""
        own = {id(b) for b in (self._stored, self._query, self._out_score, self._out_index) if b}
        scratch: dict[int, Buffer] = {}
        for step in self._plan:
            for _, buf in step.bindings:
                if id(buf) not in own:
                    scratch[id(buf)] = buf
        self.device.destroy(*scratch.values())
        self._plan = []
        self._plan_shape = None

    def _upload(self) -> None:
        """Brings the GPU matrix up to date with the host copy."""
        n, d = len(self._keys), self.dim or 0
        if self._stored is None or n > self._capacity:
            capacity = max(_INITIAL_ROWS, self._capacity)
            while capacity < n:
                capacity *= 2
            self._drop_plan()
            if self._stored is not None:
                self.device.destroy(self._stored)
            self._stored = self.device.buffer(4 * capacity * d, label="memory.vectors")
            self._capacity = capacity
            self._dirty = set(range(n))
        if not self._dirty:
            return
        if len(self._dirty) > max(8, n // 8):
            self.device.write(self._stored, b"".join(self._row_bytes(s) for s in range(n)))
        else:
            for slot in sorted(self._dirty):
                self.device.write(self._stored, self._row_bytes(slot), 4 * slot * d)
        self._dirty.clear()

    def _record(self, n: int, k: int) -> list[Dispatch]:
        d = self.dim or 0
        if self._query is None or self._query.nbytes < 4 * d:
            self._query = self.device.buffer(4 * d, label="memory.query")
            self._drop_plan()
        if self._out_score is None or self._out_index is None:
            self._out_score = self.device.buffer(4 * MAX_K, label="memory.topk_score")
            self._out_index = self.device.buffer(4 * MAX_K, label="memory.topk_index")
        if self._plan_shape != (n, k):
            self._drop_plan()
            assert self._stored is not None
            self._plan = self._topk.search(
                self._query, self._stored, self._out_score, self._out_index, 1, n, d, k
            )
            self._plan_shape = (n, k)
        return self._plan

    # ------------------------------------------------------------------ search

    async def asearch(
        self, query: Sequence[float], k: int, accept: Callable[[str], bool] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` most similar ``(key, cosine)`` pairs that ``accept``, best first.

        Ties are broken by key, as in :meth:`VectorIndex.search`.
        """
        n = len(self._keys)
        if k <= 0 or n == 0:
            return []
        if k > MAX_K:
            return self._cpu(query, k, accept, f"k={k} exceeds the GPU top-k's {MAX_K}")
        if n < self.min_rows:
            return self._cpu(query, k, accept, f"{n} vectors, below min_rows={self.min_rows}")
        self._check_dim(query)
        wanted = min(MAX_K, n)
        async with self._gpu_lock:
            self._upload()
            plan = self._record(n, wanted)
            assert self._query is not None and self._out_score is not None
            assert self._out_index is not None
            self.device.write(self._query, normalise(query))
            self.device.submit(plan)
            scores, index = array("f"), array("I")
            scores.frombytes(await self.device.read(self._out_score, 4 * wanted))
            index.frombytes(await self.device.read(self._out_index, 4 * wanted))
        found = []
        for slot, score in zip(index, scores, strict=True):
            key = self._keys[slot] if slot < len(self._keys) else None
            if key is not None and (accept is None or accept(key)):
                found.append((key, float(score)))
        if len(found) < k and wanted < n:
            return self._cpu(query, k, accept, "the filter kept too few of the GPU's candidates")
        self.gpu_searches += 1
        self._last_scan = "gpu"
        return sorted(found, key=lambda kv: (-kv[1], kv[0]))[:k]

    def _cpu(
        self, query: Sequence[float], k: int, accept: Callable[[str], bool] | None, why: str
    ) -> list[tuple[str, float]]:
        self.cpu_searches += 1
        self._last_scan = f"cpu: {why}"
        logger.debug("vector search on the CPU: %s", why)
        return self.search(query, k, accept)


__all__ = ["GpuVectorIndex"]
