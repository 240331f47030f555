"""Test helpers for the memory tests (and checks that the helpers themselves behave).

``TrigramEmbedder`` is a deterministic stand-in for the real sentence embedder: hashed
character trigrams, L2-normalised. It is a *test helper*, not a model: texts that share
spelling get similar vectors, which is enough to exercise the semantic path of recall.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to completion (the suite has no asyncio plugin)."""
    return asyncio.run(coro)


class TrigramEmbedder:
    """Hashed character-trigram vectors; counts calls and texts for cache tests."""

    def __init__(self, dim: int = 256, fingerprint: str | None = "trigram-test-v1") -> None:
        self.dim = dim
        if fingerprint is not None:
            self.fingerprint = fingerprint
        self.calls = 0
        self.texts_seen: list[str] = []

    def vector(self, text: str) -> list[float]:
        padded = f"  {text.lower()} "
        out = [0.0] * self.dim
        for i in range(len(padded) - 2):
            out[zlib.crc32(padded[i : i + 3].encode()) % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in out)) or 1.0
        return [x / norm for x in out]

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.texts_seen.extend(texts)
        return [self.vector(t) for t in texts]


def embed_texts(texts: list[str]) -> list[list[float]]:
    """Module-level function form, usable as ``--embedder tests/unit/...:embed_texts``."""
    return TrigramEmbedder().embed(texts)


def test_trigram_embedder_is_deterministic_and_normalised() -> None:
    a, b = TrigramEmbedder(), TrigramEmbedder()
    va, vb = a.embed(["hello world"])[0], b.embed(["hello world"])[0]
    assert va == vb
    assert math.isclose(sum(x * x for x in va), 1.0, rel_tol=1e-9)


def test_trigram_embedder_prefers_shared_spelling() -> None:
    e = TrigramEmbedder()
    q, near, far = e.embed(["database host", "the database hostname", "pizza recipe"])
    cos = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert cos(q, near) > cos(q, far)
