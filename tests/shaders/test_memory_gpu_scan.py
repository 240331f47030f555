"""GpuVectorIndex (the memory store's GPU cosine scan) against the numpy index, on wgpu-py."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from evermind.memory import InMemoryBackend, MemoryStore, RecallOptions
from evermind.search.gpu_index import GpuVectorIndex
from evermind.search.vectors import VectorIndex
from tests.unit.test_memory_helpers import TrigramEmbedder

# f32 dot products of unit vectors of dimension <= 64 on GPU vs numpy: a few ulp of 1.
SCORE_ATOL = 1e-5


def _rows(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _check(
    got: list[tuple[str, float]], ref: VectorIndex, query: np.ndarray, k: int, name: str
) -> None:
    """GPU hits are the exact top k up to near-ties, with their exact scores, best first."""
    exact = ref.scores(query.tolist())
    want = ref.search(query.tolist(), k)
    print(f"{name}: got {len(got)}, want {len(want)}; first {got[:2]} vs {want[:2]}")
    assert len(got) == len(want), name
    for key, score in got:
        assert abs(score - exact[key]) <= SCORE_ATOL, f"{name}: {key} {score} vs {exact[key]}"
    assert all(a[1] >= b[1] - SCORE_ATOL for a, b in itertools.pairwise(got)), name
    if want:
        floor = want[-1][1] + 4 * SCORE_ATOL
        must = {key for key, score in exact.items() if score > floor}
        assert must <= {key for key, _ in got}, f"{name}: missing {must - {k for k, _ in got}}"


def _both(device: object, n: int, d: int, seed: int) -> tuple[GpuVectorIndex, VectorIndex]:
    gpu, ref = GpuVectorIndex(device), VectorIndex(use_numpy=True)  # type: ignore[arg-type]
    for i, row in enumerate(_rows(n, d, seed)):
        gpu.add(f"k{i:05d}", row.tolist())
        ref.add(f"k{i:05d}", row.tolist())
    return gpu, ref


@pytest.mark.parametrize(("n", "d", "k"), [(1, 3, 1), (255, 16, 5), (257, 37, 64), (1013, 33, 50)])
def test_matches_numpy_index(device, n: int, d: int, k: int) -> None:
    gpu, ref = _both(device, n, d, seed=n)
    for qi, query in enumerate(_rows(3, d, seed=n + 1000)):
        got = asyncio.run(gpu.asearch(query.tolist(), k))
        _check(got, ref, query, min(k, n), f"N={n} D={d} k={k} q{qi}")
    assert gpu.gpu_searches == 3 and gpu.last_scan == "gpu"
    gpu.clear()


def test_writes_after_searches_are_uploaded(device) -> None:
    d = 24
    gpu, ref = _both(device, 200, d, seed=1)
    query = _rows(1, d, seed=2)[0]
    _check(asyncio.run(gpu.asearch(query.tolist(), 10)), ref, query, 10, "before")
    # Grow past the first GPU allocation (256 rows), overwrite, and swap-remove.
    extra = _rows(400, d, seed=3)
    for i, row in enumerate(extra):
        gpu.add(f"n{i}", row.tolist())
        ref.add(f"n{i}", row.tolist())
    target = (query * 5 + _rows(1, d, seed=4)[0]).tolist()  # becomes the clear best
    for index in (gpu, ref):
        index.add("k00010", target)
        for i in range(0, 600, 7):
            index.remove(f"n{i}")
        index.remove("k00000")
    got = asyncio.run(gpu.asearch(query.tolist(), 10))
    assert got[0][0] == "k00010"
    assert not {key for key, _ in got} & ({f"n{i}" for i in range(0, 600, 7)} | {"k00000"})
    _check(got, ref, query, 10, "after writes")
    # Only a few rows changed: the partial upload path.
    for index in (gpu, ref):
        index.add("n1", (-query).tolist())
        index.add("fresh", query.tolist())
    got = asyncio.run(gpu.asearch(query.tolist(), 3))
    assert got[0][0] == "fresh" and got[0][1] == pytest.approx(1.0, abs=SCORE_ATOL)
    _check(got, ref, query, 3, "partial upload")
    gpu.clear()


def test_filter_and_large_k_fall_back_to_the_exact_cpu_scan(device) -> None:
    d = 16
    gpu, ref = _both(device, 500, d, seed=5)
    query = _rows(1, d, seed=6)[0]

    def accept(key: str) -> bool:
        return key.endswith("7")  # keeps 1 in 10: the GPU's 64 candidates are too few

    got = asyncio.run(gpu.asearch(query.tolist(), 20, accept))
    assert gpu.last_scan.startswith("cpu: the filter") and len(got) == 20
    assert got == ref.search(query.tolist(), 20, accept)
    few = asyncio.run(gpu.asearch(query.tolist(), 2, accept))  # 2 of ~6 pass: GPU suffices
    assert gpu.last_scan == "gpu" and [k for k, _ in few] == [
        k for k, _ in ref.search(query.tolist(), 2, accept)
    ]
    big = asyncio.run(gpu.asearch(query.tolist(), 100))
    assert gpu.last_scan.startswith("cpu: k=100") and big == ref.search(query.tolist(), 100)
    gpu.clear()


def test_memory_store_recall_on_the_gpu_scan(device) -> None:
    facts = {
        "host-prod": "The production database primary is db-prod-01 on port 5432.",
        "host-stage": "The staging database runs on db-stage-02, port 5433.",
        "err-417": "Error TSR-417 means the route solver timed out.",
        "pref-editor": "Niamh uses Neovim with LazyVim.",
        "pref-coffee": "Niamh drinks flat whites, no sugar.",
    }

    async def body() -> None:
        index = GpuVectorIndex(device)  # type: ignore[arg-type]
        on_gpu = MemoryStore(InMemoryBackend(), TrigramEmbedder(), vector_index=index)
        on_cpu = MemoryStore(InMemoryBackend(), TrigramEmbedder(), use_numpy=True)
        for store in (on_gpu, on_cpu):
            for key, content in facts.items():
                await store.remember(key, content, tags=[key.split("-")[0]])
        for query in ("which database is production", "TSR-417 timeout", "coffee order"):
            got = await on_gpu.recall(query, top_k=3)
            want = await on_cpu.recall(query, top_k=3)
            assert [h.key for h in got] == [h.key for h in want], query
            for g, w in zip(got, want, strict=True):
                assert g.score == pytest.approx(w.score, abs=1e-5)
            assert index.last_scan == "gpu" and got[0].ranked_by.startswith("semantic+lexical")
        tagged = await on_gpu.recall("Niamh", top_k=2, tags=["pref"])
        assert {h.key for h in tagged} == {"pref-editor", "pref-coffee"}
        await on_gpu.forget("pref-coffee")
        hits = await on_gpu.recall("coffee", options=RecallOptions(lexical=False))
        assert "pref-coffee" not in {h.key for h in hits} and index.last_scan == "gpu"
        assert index.gpu_searches >= 5
        index.clear()

    asyncio.run(body())


def test_studio_handlers_rank_with_the_tab_model_on_the_gpu(monkeypatch) -> None:
    """memory_* and cache_* with a trained tiny model: semantic ranking and the GPU scan."""
    import json

    from evermind.studio import api, memory_api, rpc
    from tests.factories import TEXT

    monkeypatch.setattr(rpc, "_session", None)
    monkeypatch.setattr(memory_api, "_tab", None)

    def call(fn: str, **kwargs):
        envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
        assert envelope["ok"], f"{fn}: {envelope}"
        return envelope["result"]

    call("memory_remember", key="before", content="remembered before any model existed")
    assert call("memory_recall", query="remembered")["ranked_by"].startswith("lexical only")
    call("corpus_add", name="notes.md", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    call(
        "train_start",
        config={"d_model": 16, "n_layer": 2, "d_state": 4},
        steps=3,
        batch_size=2,
        seq_len=16,
    )
    call("memory_remember", key="fox", content="The quick brown fox jumps over the lazy dog.")
    call("memory_remember", key="tea", content="Earl Grey tea, hot, with a slice of lemon.")
    out = call("memory_recall", query="remembered before", top_k=3)
    assert out["ranked_by"].startswith("semantic+lexical") and out["scan"] == "gpu"
    assert out["hits"][0]["key"] == "before" and "cosine" in out["hits"][0]["signals"]
    assert "the tab's model" in out["embedder"]
    tab = memory_api.tab_memory()
    index = asyncio.run(tab.store()).vector_index
    assert isinstance(index, GpuVectorIndex) and len(index) == 3
    # A remember searches too (write-through cognition recalls the incumbent by meaning), so
    # count one recall's searches: exactly one GPU scan.
    searches = index.gpu_searches
    assert searches >= 1
    call("memory_recall", query="remembered before", top_k=3)
    assert index.gpu_searches == searches + 1
    call("cache_store", query="How do I convert USD to EUR?", response="multiply by 0.92")
    # One stored question is too few to calibrate a paraphrase on (only repeats are served
    # then): the repeat, folded, is served through the GPU scan.
    hit = call("cache_lookup", query="how do i convert usd to eur", threshold=0.0)
    assert hit["ranked_by"].startswith("semantic") and hit["scan"] == "gpu"
    assert hit["hit"] and hit["response"] == "multiply by 0.92" and -1 <= hit["score"] <= 1
    refused = call("cache_lookup", query="How do I convert EUR to USD?", threshold=0.0)
    assert refused["hit"] is False and refused["refused_by"] is not None
