"""Launchers for ``shaders/embedding.wgsl``: token embedding gather and its scatter-add.

The forward gathers rows of the table ``(V, D)`` for ``M = B * L`` token ids. The backward
adds ``grad_out (M, D)`` into ``grad_table (V, D)`` without float atomics: the host groups the
positions by token id into a CSR buffer (:func:`build_csr`), and one invocation per
(distinct token, column) sums its positions in ascending order, so the result is
deterministic. The shader header documents the CSR layout.

Per step, the ids change but nothing is re-recorded: call :meth:`Embedding.write_step`
(or :meth:`Embedding.write_ids` and :meth:`Embedding.write_csr`) to rewrite the id and CSR
buffers with ``device.write`` before submitting the recorded plan.

Browser-safe (standard library and ``evermind`` only).
The numpy reference is ``evermind.ops.embedding``.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from evermind.errors import ConfigError, ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32

SHADER = "embedding"
#: Invocations per workgroup (the WGSL ``override WG``); any value 1..256.
WORKGROUP_SIZE = 256

# Binding slots of embedding.wgsl.
_IDS, _TABLE, _OUT, _CSR, _GRAD_OUT, _GRAD_TABLE, _PARAMS = range(7)


def csr_words(m: int) -> int:
    """Number of u32 words of the CSR buffer for ``m`` token positions: ``3 * m + 2``."""
    return 3 * m + 2


def validate_ids(ids: Sequence[int], vocab_size: int, m: int | None = None) -> None:
    """Raises ShapeError unless every id lies in ``[0, vocab_size)`` (and ``len(ids) == m``).

    Args:
        ids: Token ids, flattened (B * L).
        vocab_size: Rows V of the embedding table.
        m: The length the recorded dispatches expect, if checked.
    """
    if m is not None and len(ids) != m:
        raise ShapeError(
            f"embedding: expected {m} token ids (B * L the dispatches were recorded for), "
            f"got {len(ids)}; hint: pad or trim the batch to its recorded shape"
        )
    for position, token in enumerate(ids):
        if not 0 <= token < vocab_size:
            raise ShapeError(
                f"embedding: token id {token} at position {position} is outside [0, {vocab_size}); "
                "hint: the ids come from a tokenizer with a larger vocabulary than the model's"
            )


def build_csr(ids: Sequence[int], vocab_size: int) -> array[int]:
    """Groups token positions by id into the backward's CSR layout (see ``embedding.wgsl``).

    Args:
        ids: Token ids, flattened (M = B * L), each in ``[0, vocab_size)``.
        vocab_size: Rows V of the embedding table.

    Returns:
        ``3 * M + 2`` u32 words: ``[U, offsets (M+1), unique ids (M), positions (M)]``,
        unused slots zero.

    Raises:
        ShapeError: An id is outside ``[0, vocab_size)``.
    """
    validate_ids(ids, vocab_size)
    m = len(ids)
    groups: dict[int, list[int]] = {}
    for position, token in enumerate(ids):  # positions ascend inside each group
        groups.setdefault(token, []).append(position)
    unique = sorted(groups)
    words = array("I", bytes(4 * csr_words(m)))
    words[0] = len(unique)
    offset = 0
    cursor = 2 * m + 2
    for u, token in enumerate(unique):
        words[1 + u] = offset
        words[m + 2 + u] = token
        for position in groups[token]:
            words[cursor] = position
            cursor += 1
        offset += len(groups[token])
    words[1 + len(unique)] = offset
    return words


class Embedding:
    """Records embedding dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG`` (any value 1..256).
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        if not 1 <= workgroup_size <= 256:
            raise ConfigError(
                f"embedding: workgroup_size must be in [1, 256], got {workgroup_size}"
            )
        self.device = device
        self.workgroup_size = workgroup_size

    def _check(self, m: int, vocab_size: int, d: int) -> None:
        if m < 0 or vocab_size < 1 or d < 1:
            raise ShapeError(
                f"embedding: expected M >= 0 ids into a (V >= 1, D >= 1) table, got M={m}, "
                f"V={vocab_size}, D={d}"
            )

    def _record(
        self, entry: str, m: int, vocab_size: int, d: int, bindings: dict[int, Buffer]
    ) -> Dispatch:
        params = self.device.uniform(
            pack_params(("u32", m), ("u32", d), ("u32", vocab_size)), label=f"{entry}.params"
        )
        kernel = self.device.kernel(SHADER, entry, {"WG": self.workgroup_size})
        return self.device.dispatch(
            kernel, {**bindings, _PARAMS: params}, grid_1d(m * d, self.workgroup_size), label=entry
        )

    def forward(
        self, ids: Buffer, table: Buffer, out: Buffer, m: int, vocab_size: int, d: int
    ) -> Dispatch:
        """``out[m] = table[ids[m]]``.

        Args:
            ids: Token ids, (M,) i32; ids outside ``[0, V)`` give a zero row.
            table: Embedding table, (V, D) f32.
            out: Output, (M, D) f32.
            m: Token positions M (B * L).
            vocab_size: Rows V.
            d: Columns D (d_model).
        """
        self._check(m, vocab_size, d)
        op = "embedding.forward"
        if ids.nbytes < 4 * m:
            raise ShapeError(f"{op}: ids ({ids.label!r}) holds {ids.nbytes // 4} i32 but M={m}")
        need_f32(op, "table", table, vocab_size * d)
        need_f32(op, "out", out, m * d)
        return self._record(
            "embedding_fwd", m, vocab_size, d, {_IDS: ids, _TABLE: table, _OUT: out}
        )

    def backward(
        self, csr: Buffer, grad_out: Buffer, grad_table: Buffer, m: int, vocab_size: int, d: int
    ) -> Dispatch:
        """``grad_table[ids[p]] += grad_out[p]`` for every position p, deterministically.

        Args:
            csr: The CSR of this step's ids, ``3 * M + 2`` u32 (:func:`build_csr`,
                :meth:`write_csr`).
            grad_out: Upstream gradient, (M, D) f32.
            grad_table: Table gradient, (V, D) f32; accumulated into, not overwritten.
            m: Token positions M.
            vocab_size: Rows V.
            d: Columns D.
        """
        self._check(m, vocab_size, d)
        op = "embedding.backward"
        if csr.nbytes < 4 * csr_words(m):
            raise ShapeError(
                f"{op}: csr ({csr.label!r}) holds {csr.nbytes // 4} u32 but M={m} needs "
                f"{csr_words(m)}; allocate it with csr_buffer(m)"
            )
        need_f32(op, "grad_out", grad_out, m * d)
        need_f32(op, "grad_table", grad_table, vocab_size * d)
        return self._record(
            "embedding_bwd",
            m,
            vocab_size,
            d,
            {_CSR: csr, _GRAD_OUT: grad_out, _GRAD_TABLE: grad_table},
        )

    # -- per-step inputs -------------------------------------------------------------------
    def ids_buffer(self, m: int, label: str = "embedding.ids") -> Buffer:
        """A zero-filled id buffer for ``m`` positions."""
        return self.device.buffer(4 * m, label=label)

    def csr_buffer(self, m: int, label: str = "embedding.csr") -> Buffer:
        """A zero-filled CSR buffer for ``m`` positions (U = 0: the backward adds nothing)."""
        return self.device.buffer(4 * csr_words(m), label=label)

    def write_ids(self, ids_buf: Buffer, ids: Sequence[int], vocab_size: int) -> None:
        """Validates ``ids`` and writes them into ``ids_buf`` as i32 (no re-recording)."""
        validate_ids(ids, vocab_size)
        if 4 * len(ids) > ids_buf.nbytes:
            raise ShapeError(
                f"embedding: {len(ids)} ids do not fit id buffer {ids_buf.label!r} of "
                f"{ids_buf.nbytes // 4} i32; hint: pad or trim the batch to its recorded B * L"
            )
        if ids:
            self.device.write(ids_buf, array("i", ids))

    def write_csr(self, csr_buf: Buffer, ids: Sequence[int], vocab_size: int) -> None:
        """Builds the CSR of ``ids`` and writes it into ``csr_buf`` (no re-recording)."""
        words = build_csr(ids, vocab_size)
        if 4 * len(words) != csr_buf.nbytes:
            raise ShapeError(
                f"embedding: csr buffer {csr_buf.label!r} holds {csr_buf.nbytes // 4} u32, the "
                f"ids need exactly {len(words)} (M={len(ids)}); hint: use csr_buffer(M)"
            )
        self.device.write(csr_buf, words)

    def write_step(
        self, ids_buf: Buffer, csr_buf: Buffer, ids: Sequence[int], vocab_size: int
    ) -> None:
        """Writes one step's ids for both the forward and the backward."""
        self.write_ids(ids_buf, ids, vocab_size)
        self.write_csr(csr_buf, ids, vocab_size)
