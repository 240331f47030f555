"""embedding.wgsl against its numpy reference on wgpu-py (lavapipe in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.kernels.embedding import Embedding, build_csr, csr_words
from evermind.ops import embedding as ref
from tests.conftest import read_f32
from tests.numerics import assert_close

# (M, V, D): M = 1, WG-1, WG+1, a prime, the nano batch (4*128 into a 4096 x 128 table);
# D = 1, 3, WG/2+1 and the nano d_model, so flat indices straddle workgroups unevenly.
SHAPES = [(1, 5, 3), (255, 17, 1), (257, 300, 129), (997, 61, 7), (512, 4096, 128)]
# Gathers copy bits. The scatter sums up to a few hundred N(0, 1) values per row in f32
# against a float64 reference: ~sqrt(k) ulp of sums of magnitude ~sqrt(k).
BWD_ATOL, BWD_RTOL = 2e-5, 1e-5


def _ids(m: int, vocab: int, seed: int) -> np.ndarray:
    """Zipf-like ids so a few tokens repeat often (as in text) and most are rare."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.zipf(1.3, m) - 1, vocab - 1).astype(np.int32)


def _gather(device, ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    vocab, d = table.shape
    m = ids.size
    emb = Embedding(device)
    bids, btable = device.upload(ids, label="ids"), device.upload(table, label="table")
    out = device.buffer(4 * m * d, label="out")
    device.submit([emb.forward(bids, btable, out, m, vocab, d)])
    got = read_f32(device, out, m * d).reshape(m, d)
    device.destroy(bids, btable, out)
    return got


@pytest.mark.parametrize(("m", "vocab", "d"), SHAPES)
def test_forward_and_backward_match_reference(device, m: int, vocab: int, d: int) -> None:
    rng = np.random.default_rng(m * 7 + d)
    ids = _ids(m, vocab, seed=m + d)
    table = rng.standard_normal((vocab, d)).astype(np.float32)
    assert_close(
        _gather(device, ids, table),
        ref.embedding_fwd(ids, table),
        atol=0,
        rtol=0,
        name=f"gather M={m} V={vocab} D={d}",
    )

    grad_out = rng.standard_normal((m, d)).astype(np.float32)
    grad_table0 = rng.standard_normal((vocab, d)).astype(np.float32)  # e.g. the LM head's share
    emb = Embedding(device)
    csr = emb.csr_buffer(m)
    emb.write_csr(csr, ids.tolist(), vocab)
    bgo, bgt = (
        device.upload(grad_out, label="grad_out"),
        device.upload(grad_table0, label="grad_table"),
    )
    device.submit([emb.backward(csr, bgo, bgt, m, vocab, d)])
    got = read_f32(device, bgt, vocab * d).reshape(vocab, d)
    assert_close(
        got,
        ref.embedding_bwd(ids, grad_out, grad_table0),
        atol=BWD_ATOL,
        rtol=BWD_RTOL,
        name=f"scatter-add M={m} V={vocab} D={d}",
    )
    device.destroy(csr, bgo, bgt)


def test_recorded_backward_replays_with_new_ids_and_is_deterministic(device) -> None:
    m, vocab, d = 300, 50, 129
    rng = np.random.default_rng(21)
    grad_out = rng.standard_normal((m, d)).astype(np.float32)
    emb = Embedding(device)
    ids_buf, csr = emb.ids_buffer(m), emb.csr_buffer(m)
    bgo = device.upload(grad_out, label="grad_out")
    bgt = device.buffer(4 * vocab * d, label="grad_table")
    plan = [emb.backward(csr, bgo, bgt, m, vocab, d)]  # recorded once
    zeros = np.zeros(vocab * d, np.float32)
    results = []
    # Many distinct ids first, then only three: stale CSR entries past U must be ignored.
    for ids in (np.arange(m, dtype=np.int32) % vocab, _ids(m, 3, seed=1), _ids(m, 3, seed=1)):
        emb.write_step(ids_buf, csr, ids.tolist(), vocab)
        device.write(bgt, zeros)
        device.submit(plan)
        got = read_f32(device, bgt, vocab * d).reshape(vocab, d)
        want = ref.embedding_bwd(ids, grad_out, zeros.reshape(vocab, d))
        assert_close(
            got, want, atol=BWD_ATOL, rtol=BWD_RTOL, name=f"replay U={len(set(ids.tolist()))}"
        )
        results.append(got)
    assert np.array_equal(results[1].view(np.uint32), results[2].view(np.uint32)), (
        "not deterministic"
    )


def test_build_csr_layout() -> None:
    words = build_csr([3, 1, 3, 0, 3], vocab_size=4)
    m = 5
    assert len(words) == csr_words(m) == 17
    assert words[0] == 3  # distinct ids 0, 1, 3
    assert list(words[1:5]) == [0, 1, 2, 5]  # offsets of the three groups, then the end
    assert list(words[m + 2 : m + 5]) == [0, 1, 3]  # unique ids ascending
    assert list(words[2 * m + 2 :]) == [3, 1, 0, 2, 4]  # positions grouped, ascending


@pytest.mark.parametrize("bad", [-1, 7])
def test_out_of_range_ids_are_rejected_on_the_host(device, bad: int) -> None:
    emb = Embedding(device)
    with pytest.raises(ShapeError, match=f"token id {bad} at position 1"):
        build_csr([0, bad, 2], vocab_size=7)
    with pytest.raises(ShapeError, match="outside"):
        emb.write_ids(emb.ids_buffer(3), [0, bad, 2], vocab_size=7)
    with pytest.raises(ShapeError, match="do not fit"):
        emb.write_ids(emb.ids_buffer(2), [0, 1, 2], vocab_size=7)


def test_out_of_range_ids_never_write_out_of_bounds(device) -> None:
    """Ids and CSR written behind the host's back: the shader guards keep memory intact."""
    vocab, d, m = 6, 5, 4
    rng = np.random.default_rng(2)
    table = rng.standard_normal((vocab, d)).astype(np.float32)
    ids = np.array([2, -1, 6, 1 << 30], dtype=np.int32)
    got = _gather(device, ids, table)
    assert_close(
        got,
        np.stack([table[2], *np.zeros((3, d), np.float32)]),
        atol=0,
        rtol=0,
        name="gather of bad ids",
    )

    # A CSR naming tokens 6 and 1e6 of a 6-row table, then token 0 whose end offset (99)
    # runs past M and whose positions include 7 >= M. The grad_table buffer has a sentinel
    # tail right after its V*D values.
    m_words = [3, 0, 1, 1, 99, 0, 6, 1_000_000, 0, 0, 1, 2, 7, 3]
    assert len(m_words) == csr_words(m)
    emb = Embedding(device)
    csr = device.upload(np.array(m_words, np.uint32), label="csr")
    grad_out = rng.standard_normal((m, d)).astype(np.float32)
    bgo = device.upload(grad_out, label="grad_out")
    sentinel = np.full(vocab * d + 64, 7.0, np.float32)
    bgt = device.upload(sentinel, label="grad_table+tail")
    device.submit([emb.backward(csr, bgo, bgt, m, vocab, d)])
    got = read_f32(device, bgt)
    want = sentinel.copy()
    want[:d] += grad_out[2] + grad_out[3]  # token 0: positions[1..4) = 2, (7 skipped), 3
    assert_close(got, want, atol=1e-6, rtol=0, name="scatter with a corrupt csr")


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.embedding:Embedding"
    m, vocab, d = 257, 300, 33
    rng = np.random.default_rng(77)
    ids = _ids(m, vocab, seed=78)
    table = rng.standard_normal((vocab, d)).astype(np.float32)
    grad_out = rng.standard_normal((m, d)).astype(np.float32)
    grad_table = rng.standard_normal((vocab, d)).astype(np.float32)
    csr = np.frombuffer(build_csr(ids.tolist(), vocab).tobytes(), dtype=np.uint32)
    return [
        KernelCase(
            "embedding.forward",
            launcher,
            "forward",
            [{"buf": "ids"}, {"buf": "table"}, {"buf": "out"}, m, vocab, d],
            {"ids": ids, "table": table, "out": np.zeros((m, d), np.float32)},
            {"out": ref.embedding_fwd(ids, table)},
            0.0,
            0.0,
        ),
        KernelCase(
            "embedding.backward",
            launcher,
            "backward",
            [{"buf": "csr"}, {"buf": "grad_out"}, {"buf": "grad_table"}, m, vocab, d],
            {"csr": csr, "grad_out": grad_out, "grad_table": grad_table},
            {"grad_table": ref.embedding_bwd(ids, grad_out, grad_table)},
            BWD_ATOL,
            BWD_RTOL,
        ),
    ]


def test_gather_past_the_workgroup_fold(device) -> None:
    """M*D = 16,778,240 > 65,535 * 256: the grid folds into 2-D and every row still lands."""
    m, vocab, d = 16385, 3, 1024
    ids = (np.arange(m) % vocab).astype(np.int32)
    table = np.arange(vocab * d, dtype=np.float32).reshape(vocab, d)
    got = _gather(device, ids, table)
    assert_close(got, table[ids], atol=0, rtol=0, name="gather folded grid")
