"""The tuning's speed-ups compute the same step: length buckets, the BLAS-thread limit.

``contrastive_grads`` runs the model once per group of similar-length views (each padded only
to its own longest) instead of once on a batch padded to the longest view of all. The model
is causal and padded on the right, so the loss and every weight's gradient must equal the
one-batch computation to float rounding; checked in float64 against the one-batch formula.
"""

from __future__ import annotations

import numpy as np
import pytest

from evermind.model.cpu import CpuMamba
from evermind.ops.pool import lengths_of_mask, pool_bwd, pool_fwd
from evermind.train.contrastive import (
    _pad,
    blas_threads,
    contrastive_grads,
    info_nce,
    length_buckets,
)
from tests.unit.test_model_cpu import TINY, random_params


def one_batch(model: CpuMamba, views: list[list[int]], temperature: float):  # type: ignore[no-untyped-def]
    """The step before buckets: every view in one batch padded to the longest."""
    ids, mask = _pad(views)
    hidden, cache = model.hidden_train(ids)
    lengths = lengths_of_mask(mask)
    unit = pool_fwd(hidden, lengths)
    half = len(views) // 2
    loss, da, db = info_nce(unit[:half], unit[half:], temperature)
    return loss, model.backward_hidden(cache, pool_bwd(hidden, lengths, np.concatenate([da, db])))


@pytest.mark.parametrize("bucket_rows", [1, 2, 3, 100])
def test_bucketed_step_equals_one_padded_batch(bucket_rows: int) -> None:
    model = CpuMamba(TINY, random_params(TINY, 3), dtype=np.float64)
    rng = np.random.default_rng(8)
    views = [
        rng.integers(0, TINY.vocab_size, int(n)).tolist() for n in rng.integers(1, 12, size=10)
    ]
    want_loss, want = one_batch(model, views, 0.3)
    loss, grads = contrastive_grads(model, views, 0.3, bucket_rows=bucket_rows)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert grads.keys() == want.keys()
    for name, grad in grads.items():
        scale = max(float(np.max(np.abs(want[name]))), 1e-300)
        assert float(np.max(np.abs(grad - want[name]))) / scale < 1e-10, name


def test_length_buckets_group_similar_lengths_and_keep_every_row() -> None:
    lengths = [5, 40, 5, 41, 6, 40, 5, 41]
    groups = length_buckets(lengths, rows=2)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(len(g) >= 2 for g in groups)
    assert [sorted(lengths[i] for i in g) for g in groups] == [[5, 5, 5, 6], [40, 40, 41, 41]]
    # Equal lengths: splitting saves nothing, so one group (one model run).
    assert length_buckets([64] * 64, rows=16) == [list(range(64))]
    assert length_buckets([], rows=16) == []
    assert length_buckets([3, 1], rows=16) == [[1, 0]]


def test_blas_threads_limits_and_restores() -> None:
    import threadpoolctl  # a runtime dependency (blas_threads uses it): never skipped

    def blas_counts() -> list[int]:
        return [
            p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"
        ]

    before = blas_counts()
    with blas_threads(1):
        assert all(n == 1 for n in blas_counts())
    assert blas_counts() == before
