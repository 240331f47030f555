"""The runtime's L2 cache holds a bounded number of in-memory indexes, whatever the namespaces."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evermind.cache import l2_sqlite
from evermind.cache.l2_sqlite import SemanticCacheStore


def test_lookups_in_empty_namespaces_hold_nothing_and_stores_stay_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope_cap = 16
    monkeypatch.setattr(l2_sqlite, "MAX_INDEXED_SCOPES", scope_cap)

    async def body() -> None:
        store = SemanticCacheStore(tmp_path / "runtime.db", max_entries=100)
        try:
            for n in range(500):  # a flood of lookups in namespaces that hold nothing
                miss = await store.lookup("t", f"flood-{n}", [1.0, 0.0], 0.9, "a question")
                assert miss.hit is None
            assert store.indexed_scopes == 0
            for n in range(3 * scope_cap):
                await store.store("t", f"ns-{n}", [1.0, 0.0], {"answer": n}, None, f"q {n}")
            assert store.indexed_scopes <= scope_cap
            # An evicted scope reloads from SQLite and still serves its entry.
            hit = await store.lookup("t", "ns-0", [1.0, 0.0], 0.9, "q 0")
            assert hit.hit is not None and hit.hit["response"] == {"answer": 0}
        finally:
            store.close()

    asyncio.run(body())


def test_huge_or_tiny_finite_embeddings_normalise_without_overflow() -> None:
    """A client's vector of huge finite values has a direction like any other: no overflow
    (the hostile-input property test once hit it), while zero and non-finite are refused."""
    import warnings

    import numpy as np
    import pytest

    from evermind.cache.l2_sqlite import normalised
    from evermind.errors import InputError

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for values in ([1e300, -1e300], [1e-320, 1e-320], [3.0, 4.0]):
            unit = normalised(values)
            assert abs(float(np.linalg.norm(unit)) - 1.0) < 1e-6
            assert np.allclose(unit, np.sign(values) * np.abs(unit))
        for bad in ([0.0, 0.0], [float("inf"), 1.0], [float("nan")], []):
            with pytest.raises(InputError, match="non-zero norm"):
                normalised(bad)
