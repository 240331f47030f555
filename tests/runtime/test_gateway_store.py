"""The gateway's L2 backend writes behind the answer without losing a write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from evermind.cache.l2_sqlite import SemanticCacheStore
from evermind.errors import StorageError
from evermind.runtime.gateway.core import StoreBackend


def _vector(i: int) -> list[float]:
    return [1.0 if j == i % 8 else 0.01 * j for j in range(8)]


def test_a_lookup_sees_every_write_started_before_it(tmp_path: Path) -> None:
    store = SemanticCacheStore(tmp_path / "runtime.db", max_entries=1000)

    async def main() -> tuple[list[bool], int, int]:
        backend = StoreBackend(store)
        seen = []
        for i in range(8):
            # astore returns before the row is written; the lookup right after still finds it.
            await backend.astore(_vector(i), {"text": f"answer {i}"}, "ns", None, f"query {i}")
            hit = await backend.alookup(_vector(i), 0.99, "ns", f"query {i}")
            seen.append(hit is not None and hit.response == {"text": f"answer {i}"})
        for i in range(20):
            await backend.astore(_vector(i), {"n": i}, f"other-{i % 3}", None, f"q {i}")
        await backend.aflush()
        return seen, await store.count(backend.tenant), backend.failed_writes

    try:
        seen, count, failed = asyncio.run(main())
    finally:
        store.close()
    assert all(seen), seen
    assert count == 28 and failed == 0


class _Broken:
    async def store(self, *args: Any) -> int:
        await asyncio.sleep(0)
        raise StorageError("disk full")


def test_a_failed_background_write_is_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> int:
        backend = StoreBackend(_Broken())  # type: ignore[arg-type]
        await backend.astore(_vector(1), "answer", "ns", None, "query")
        await backend.aflush()
        return backend.failed_writes

    assert asyncio.run(main()) == 1
    assert "disk full" in caplog.text
