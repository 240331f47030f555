"""Every browser-safe memory module imports with numpy, sqlite3 and wgpu blocked."""

from __future__ import annotations

import sys
import textwrap

from tests import procs
from tests.unit.test_memory_helpers import SRC

BROWSER_SAFE = [
    "evermind.memory",
    "evermind.memory.records",
    "evermind.memory.backend",
    "evermind.memory.inmemory",
    "evermind.memory.ranking",
    "evermind.search",
    "evermind.search.vectors",
    "evermind.memory.embedder",
    "evermind.memory.sanitize",
    "evermind.memory.store",
    "evermind.memory.recall",
]


def test_browser_safe_modules_import_and_work_without_native_deps() -> None:
    code = textwrap.dedent(
        f"""
        import asyncio, importlib, sys
        for blocked in ("numpy", "sqlite3", "_sqlite3", "wgpu"):
            sys.modules[blocked] = None
        for name in {BROWSER_SAFE!r}:
            importlib.import_module(name)
        from evermind.memory import InMemoryBackend, MemoryStore

        async def main():
            def embed(texts):
                return [[1.0, len(t)] for t in texts]

            store = MemoryStore(InMemoryBackend(), embedder=embed)
            await store.remember("k", "works in the browser")
            hits = await store.recall("browser")
            return hits[0].key, hits[0].ranked_by

        print(asyncio.run(main()))
        """
    )
    out = procs.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "('k', 'semantic+lexical" in out.stdout
