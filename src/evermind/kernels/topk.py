"""Launcher for ``shaders/topk.wgsl``: cosine top-k of queries against stored unit vectors.

:meth:`TopK.search` records the whole search as a list of dispatches — normalise the
queries, score and select per chunk, then merge rounds until one chunk is left — with its
scratch buffers allocated once. To search again with new queries, ``device.write`` them
into the query buffer and submit the same list; a different N, D, Q or k needs a new
recording. The numpy reference is ``evermind.ops.topk``.
"""

from __future__ import annotations

from evermind.errors import ShapeError
from evermind.gpu import Buffer, Device, Dispatch, pack_params
from evermind.gpu.base import MAX_GROUPS_PER_DIM
from evermind.kernels._launch import check_power_of_two, need_f32

SHADER = "topk"
#: Candidates per workgroup chunk (the WGSL ``override WG``).
WORKGROUP_SIZE = 256
#: The largest k the selection supports (a round must shrink its input: k <= WG / 4).
MAX_K = 64
#: Default query norm floor, as ``torch.nn.functional.normalize``.
EPS = 1e-12

# Binding slots of topk.wgsl.
_QUERY, _STORED, _QNORM, _IN_SCORE, _IN_INDEX, _OUT_SCORE, _OUT_INDEX, _PARAMS = range(8)


def _chunks(n: int, per_chunk: int) -> int:
    return -(-n // per_chunk)


class TopK:
    """Records cosine top-k searches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG`` (the chunk size): a power of two in [4, 256];
            k may then be at most ``min(64, workgroup_size / 4)``.
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        check_power_of_two("topk", workgroup_size, minimum=4)
        self.device = device
        self.workgroup_size = workgroup_size

    def _params(self, q: int, n: int, d: int, k: int, out_stride: int, eps: float) -> Buffer:
        return self.device.uniform(
            pack_params(
                ("u32", q), ("u32", n), ("u32", d), ("u32", k), ("u32", out_stride), ("f32", eps)
            ),
            label="topk.params",
        )

    def _check(self, query: Buffer, stored: Buffer, q: int, n: int, d: int, k: int) -> None:
        op = "topk.search"
        if q < 1 or n < 1 or d < 1:
            raise ShapeError(f"{op}: expected Q, N, D >= 1, got Q={q}, N={n}, D={d}")
        max_k = min(MAX_K, self.workgroup_size // 4)
        if not 1 <= k <= min(max_k, n):
            raise ShapeError(
                f"{op}: expected 1 <= k <= min({max_k}, N={n}), got k={k}; ask for fewer "
                "results or store more vectors"
            )
        if q > MAX_GROUPS_PER_DIM or _chunks(n, self.workgroup_size) > MAX_GROUPS_PER_DIM:
            raise ShapeError(
                f"{op}: Q={q} and ceil(N / {self.workgroup_size}) must be at most "
                f"{MAX_GROUPS_PER_DIM}; split the queries or the store"
            )
        binding_limit = self.device.limits.get("max_storage_buffer_binding_size", 128 << 20)
        if 4 * n * d > binding_limit:
            raise ShapeError(
                f"{op}: stored vectors ({n} x {d} f32 = {4 * n * d} bytes) exceed the "
                f"{binding_limit}-byte storage binding limit; search the store in slices"
            )
        need_f32(op, "query", query, q * d)
        need_f32(op, "stored", stored, n * d)

    def search(
        self,
        query: Buffer,
        stored: Buffer,
        out_score: Buffer,
        out_index: Buffer,
        q: int,
        n: int,
        d: int,
        k: int,
        eps: float = EPS,
    ) -> list[Dispatch]:
        """Top ``k`` stored rows by cosine similarity for each query, best first.

        Args:
            query: (Q, D) f32 queries, any norm (normalised here).
            stored: (N, D) f32 stored vectors, already L2-normalised.
            out_score: (Q, k) f32 output: the scores, descending.
            out_index: (Q, k) uint32 output: the rows; equal scores list the lower row first.
            q: Number of queries Q.
            n: Number of stored vectors N.
            d: Dimension D.
            k: Results per query, 1 <= k <= min(64, N).
            eps: Query norm floor; a zero query scores 0 against everything.

        Returns:
            The dispatches to submit, in order.

        Raises:
            ShapeError: A size is out of range or a buffer is too small.
        """
        self._check(query, stored, q, n, d, k)
        need_f32("topk.search", "out_score", out_score, q * k)
        need_f32("topk.search", "out_index (uint32)", out_index, q * k)
        wg = self.workgroup_size
        overrides = {"WG": wg}
        qnorm = self.device.buffer(4 * q * d, label="topk.qnorm")
        steps = [
            self.device.dispatch(
                self.device.kernel(SHADER, "normalize_query", overrides),
                {_QUERY: query, _QNORM: qnorm, _PARAMS: self._params(q, n, d, k, k, eps)},
                (q, 1, 1),
                label="topk.normalize_query",
            )
        ]
        entry, inputs, count = "select_first", {_STORED: stored, _QNORM: qnorm}, n
        while True:
            chunks = _chunks(count, wg)
            if chunks == 1:
                outs = {_OUT_SCORE: out_score, _OUT_INDEX: out_index}
            else:
                outs = {
                    _OUT_SCORE: self.device.buffer(4 * q * chunks * k, label="topk.cand_score"),
                    _OUT_INDEX: self.device.buffer(4 * q * chunks * k, label="topk.cand_index"),
                }
            params = self._params(q, count, d, k, chunks * k, eps)
            steps.append(
                self.device.dispatch(
                    self.device.kernel(SHADER, entry, overrides),
                    {**inputs, **outs, _PARAMS: params},
                    (chunks, q, 1),
                    label=f"topk.{entry} n={count}",
                )
            )
            if chunks == 1:
                return steps
            entry = "select_merge"
            inputs = {_IN_SCORE: outs[_OUT_SCORE], _IN_INDEX: outs[_OUT_INDEX]}
            count = chunks * k
