"""Memory in the Studio page: remember, reload, recall from IndexedDB, with the GPU cosine scan.

Runs the worker's ``memory_*`` and ``cache_*`` calls through ``window.evermind.call`` in
headless Chromium (WebGPU on SwiftShader), trains a tiny model in the tab so recall ranks
semantically with the GPU top-k kernel, reloads the page (same browser context, so the same
IndexedDB) and checks that what was remembered and cached comes back. Zero non-loopback
requests throughout.
"""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import BOOT_TIMEOUT_MS, RecordedPage, open_studio

TINY = {"d_model": 16, "n_layer": 2, "d_state": 4}
CORPUS = (
    "Niamh keeps notes about the routing service. The production database lives on "
    "db-prod-01 and the staging one on db-stage-02. Deploys happen on Tuesday mornings. "
) * 8


def _call(rec: RecordedPage, fn: str, **kwargs: Any) -> Any:
    outcome = rec.page.evaluate(
        """([fn, kwargs]) => window.evermind.call(fn, kwargs).then(
               r => ({ok: true, result: r}),
               e => ({ok: false, error: e.name + ': ' + e.message}))""",
        [fn, kwargs],
    )
    assert outcome["ok"], f"{fn} failed in the page: {outcome['error']}\n" + "\n".join(
        rec.console[-20:]
    )
    return outcome["result"]


def _train_tiny_model(rec: RecordedPage) -> None:
    _call(rec, "corpus_add", name="notes.md", text=CORPUS)
    _call(rec, "tokenizer_train", vocab_size=300)
    summary = _call(rec, "train_start", config=TINY, steps=3, batch_size=2, seq_len=16)
    assert summary["state"] == "finished"


def test_remember_reload_recall_with_the_gpu_scan(browser, server) -> None:
    rec = open_studio(browser, server)
    try:
        _call(
            rec,
            "memory_remember",
            key="pref-editor",
            content="Niamh uses Neovim with LazyVim",
            tags=["pref"],
        )
        lexical = _call(rec, "memory_recall", query="which editor: Neovim?")
        assert [h["key"] for h in lexical["hits"]] == ["pref-editor"]
        assert lexical["ranked_by"].startswith("lexical only: no embedder")

        _train_tiny_model(rec)
        _call(
            rec,
            "memory_remember",
            key="deploy-day",
            content="Deploys happen on Tuesday mornings",
            tags=["team"],
            importance=0.8,
        )
        _call(rec, "cache_store", query="How do I convert USD to EUR?", response="times 0.92")
        semantic = _call(rec, "memory_recall", query="when do deploys happen", top_k=2)
        assert semantic["ranked_by"].startswith("semantic+lexical")
        assert semantic["scan"] == "gpu", semantic
        assert semantic["hits"][0]["key"] == "deploy-day"

        rec.page.reload()  # same context: IndexedDB survives, the worker's memory does not
        rec.page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
        after = _call(rec, "memory_list")
        assert {i["key"] for i in after["items"]} == {"pref-editor", "deploy-day"}
        back = _call(rec, "memory_recall", query="Tuesday deploys")
        assert back["hits"][0]["key"] == "deploy-day" and back["hits"][0]["tags"] == ["team"]
        # The session came back with the reload (session_restore): the model from its
        # checkpoint ranks by meaning again.
        assert back["ranked_by"].startswith("semantic+lexical"), back["ranked_by"]

        _train_tiny_model(rec)  # a model in the reloaded tab: recall goes through the GPU
        gpu = _call(rec, "memory_recall", query="which editor does Niamh use", top_k=2)
        assert gpu["scan"] == "gpu" and gpu["ranked_by"].startswith("semantic+lexical")
        assert "pref-editor" in {h["key"] for h in gpu["hits"]}
        assert all("cosine" in h["signals"] for h in gpu["hits"])
        # One stored question is too few to calibrate a paraphrase on (only repeats are
        # served then): the repeat, folded, is served through the GPU scan.
        cached = _call(rec, "cache_lookup", query="how do i convert usd to eur", threshold=0.0)
        assert cached["hit"] and cached["response"] == "times 0.92" and cached["scan"] == "gpu"
        refused = _call(rec, "cache_lookup", query="How do I convert EUR to USD?", threshold=0.0)
        assert refused["hit"] is False and refused["refused_by"] is not None
        assert _call(rec, "memory_forget", key="pref-editor") == {"forgotten": True}
        rec.assert_offline()
    finally:
        rec.close()
