"""Cancel reaches every long Studio operation that was left without one (issue 39, item 3), in
Chromium on SwiftShader WebGPU.

One page, in order: the tokenizer's first pass (counting the words, before any merge) shows
characters read and its Cancel stops it there, keeping no tokenizer; after a new model the
Memory panel's embedding of the stored memories (a recall's or a remember's first step)
counts them and its Cancel stops it: the cancelled recall shows nothing, the cancelled
remember writes nothing, and the next recall embeds the rest and ranks by meaning; the Data
panel's Send to memory, cancelled while it embeds the chunks, writes none of them; the
embedder phase's distillation (a real ``evermind serve --teacher minilm`` on loopback as the
teacher) counts its steps and its Cancel puts the weights back: the model embeds exactly as
before and has no head. Last, opening and exporting a nano-sized package are timed (one
indivisible call each, no progress of their own).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evermind.job import JobConfig, export_package, model_config
from evermind.model.init import init_params
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from evermind.tokenizer import Tokenizer
from evermind.train.corpus import harvest_stdlib_docstrings
from tests.browser.conftest import RecordedPage, open_studio, show, wait_text
from tests.browser.test_studio_e2e import call

#: Collects the runtime's events named in `names` into window.__events.
COLLECT = """(names) => {
  const el = document.querySelector('evermind-studio');
  window.__events = [];
  el.runtime.on((e) => { if (names.includes(e.event)) window.__events.push(e); });
}"""

#: Short sentences on a few topics: the corpus of the model the later tests train.
CORPUS = "\n".join(
    f"{who} {verb} the {what} on day {i}."
    for i, (who, verb, what) in enumerate(
        (w, v, t)
        for w in ("The user", "Our team", "A cook", "The pilot")
        for v in ("reads", "writes", "moves", "checks")
        for t in ("report", "recipe", "flight plan", "garden", "invoice")
    )
)
MODEL = {"d_model": 48, "n_layer": 2, "d_state": 8}
#: A Markdown file of 400 sections: 400 chunks to embed before Send to memory writes them.
RACKS = {
    "name": "racks.md",
    "mimeType": "text/markdown",
    "buffer": "\n\n".join(
        f"## Rack {i}\n\nRack {i} holds switch {i % 9} and cable bundle {i}." for i in range(400)
    ).encode(),
}


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    rec = open_studio(browser, server)
    try:
        yield rec
        rec.assert_offline()
    finally:
        rec.close()


def _events(rec: RecordedPage) -> list[dict]:
    return rec.page.evaluate("window.__events")


def test_a_the_tokenizer_s_first_pass_shows_characters_and_cancels(studio: RecordedPage) -> None:
    page = studio.page
    # Five megabytes of lines (about 3 s of counting in the tab): the first pass reads them in
    # pieces of 32 k characters.
    big = "\n".join(
        f"Record {i} lists item{i % 997} beside code{i % 131} and part{i % 71} today."
        for i in range(90_000)
    )
    show(studio, "data")
    file = {"name": "big.txt", "mimeType": "text/plain", "buffer": big.encode()}
    page.set_input_files("#data-files", files=[file])
    wait_text(studio, "#panel-data .sources", r"big\.txt", timeout=60_000)
    show(studio, "tokenizer")
    page.evaluate(COLLECT, ["tokenizer-progress"])
    page.fill("#panel-tokenizer input[name=vocab-size]", "2000")
    page.click("#tokenizer-train")
    said = wait_text(
        studio,
        "#panel-tokenizer .progress-text",
        r"^Counting words: [\d.,]+[kM]? / [\d.]+M characters · \d+ s so far",
        timeout=60_000,
    )
    print(said)
    page.click("#tokenizer-cancel")
    wait_text(studio, "#panel-tokenizer .message", r"^Cancelled: no tokenizer was trained")
    events = _events(studio)
    # It stopped in the first pass: no merge was begun.
    assert events and {e["stage"] for e in events} == {"count"}, events[-3:]
    assert events[-1]["done"] < events[-1]["total"] == len(big), events[-1]
    assert page.locator("#tokenizer-cancel").is_hidden()
    assert page.locator("#step-tokenizer").get_attribute("data-status") != "done"
    info = page.evaluate("() => window.evermind.call('tokenizer_info', {}).catch((e) => e.message)")
    assert isinstance(info, str) and "train a tokenizer first" in info, info


def _train(rec: RecordedPage) -> None:
    """A small model on CORPUS instead of the big file (no embedder phase yet)."""
    for source in call(rec, "corpus_info")["sources"]:
        call(rec, "corpus_remove", name=source["name"])
    call(rec, "corpus_add", name="notes.txt", text=CORPUS)
    rec.page.evaluate(
        "async (cfg) => { await document.querySelector('evermind-studio').train(cfg); }",
        {
            "config": MODEL,
            "steps": 4,
            "batch_size": 2,
            "seq_len": 16,
            "vocab_size": 300,
            "checkpoint_every": 0,
            "embedder": False,
        },
    )


def test_b_memory_embedding_counts_and_cancels_recall_and_remember(
    studio: RecordedPage,
) -> None:
    page, rec = studio.page, studio
    entries = [
        {
            "key": f"note.{i}",
            "content": f"Note {i}: the team checks invoice {i} and recipe {i % 7}.",
        }
        for i in range(1000)
    ]
    assert call(rec, "memory_import", entries=entries)["count"] >= 1000
    # A file for the Data panel's Send to memory (test_c), chosen while there is no model.
    show(studio, "data")
    page.set_input_files("#data-files", files=[RACKS])
    wait_text(studio, "#data-memory-files", r"racks\.md", timeout=60_000)
    _train(rec)  # a new model: every stored memory is embedded before it ranks by meaning
    show(studio, "memory")
    line = page.locator("#memory-progress")
    page.fill("#panel-memory input[name=memory-query]", "which invoice did the team check?")
    page.click("#memory-recall")
    page.locator("#memory-progress[data-total]").wait_for(timeout=60_000)
    total = int(line.get_attribute("data-total") or 0)
    assert total >= 1000, total
    assert "memories" in line.inner_text()
    line.locator("button", has_text="Cancel").click()
    said = wait_text(studio, "#panel-memory .message", r"^Recall cancelled", timeout=60_000)
    assert "nothing was recalled" in said, said
    assert line.is_hidden() and page.locator("#memory-hits li").count() == 0
    assert page.locator("#memory-recall").is_enabled()

    # A remember that has to embed first: cancelled, it writes nothing.
    page.fill("#panel-memory input[name=memory-key]", "user.editor")
    page.fill("#panel-memory textarea[name=memory-content]", "The user edits in Vim.")
    page.click("#memory-remember")
    page.locator("#memory-progress[data-total]").wait_for(timeout=60_000)
    left = int(line.get_attribute("data-total") or 0)
    assert 0 < left < total, (left, total)  # what the recall embedded was kept
    line.locator("button", has_text="Cancel").click()
    said = wait_text(studio, "#panel-memory .message", r"^Remember cancelled", timeout=60_000)
    assert "user.editor was not written" in said, said
    listed = call(rec, "memory_list", limit=5000)["items"]
    assert len(listed) == 1000 and all(m["key"] != "user.editor" for m in listed)

    # The next recall embeds the rest and ranks by meaning.
    page.click("#memory-recall")
    wait_text(studio, "#memory-hits", r"note\.\d+", timeout=120_000)
    assert line.is_hidden()
    ranked = call(rec, "memory_recall", query="which invoice did the team check?")["ranked_by"]
    assert ranked.startswith("semantic"), ranked


def test_c_send_to_memory_cancelled_while_it_embeds_writes_nothing(
    studio: RecordedPage,
) -> None:
    page = studio.page
    show(studio, "data")
    row = page.locator("#data-memory-files li[data-source='racks.md']")
    assert "not in memory" in row.inner_text()
    row.locator("button", has_text="Send to memory").click()
    cancel = page.locator("#data-memory-cancel")
    cancel.wait_for(state="visible", timeout=60_000)  # the chunks are being embedded
    assert page.locator("#data-memory-progress-text").inner_text().startswith("Embedding: ")
    cancel.click()
    said = wait_text(studio, "#data-memory-result", r"^Cancelled", timeout=60_000)
    assert "nothing was sent to memory" in said, said
    assert cancel.is_hidden()
    # All or nothing: no chunk of the file was written.
    sources = call(studio, "memory_sources")["sources"]
    assert all(s["source"] != "racks.md" for s in sources), sources
    assert len(call(studio, "memory_list", limit=5000)["items"]) == 1000
    assert "not in memory" in row.inner_text()


def test_d_the_distillation_counts_steps_and_cancels_keeping_the_weights(
    studio: RecordedPage, tmp_path: Path
) -> None:
    page = studio.page
    config = RuntimeConfig(data_dir=tmp_path / "runtime", port=0, teachers=["minilm"])
    with ServerThread(config) as runtime:
        show(studio, "export")
        page.fill("#panel-export input[name=runtime-url]", runtime.url)
        probe = ["The pilot checks the flight plan.", "A cook reads the recipe."]
        before = call(studio, "embed", texts=probe)
        info = call(studio, "embedder_info")
        assert info["method"] is None, info
        show(studio, "train")
        # The phase as the panel runs it, with enough steps to cancel in the middle.
        page.evaluate(
            "() => { window.__phase = document.querySelector('evermind-studio')"
            ".embedder({ steps: 2000 }); }"
        )
        page.wait_for_function(
            "() => { const t = document.querySelector('evermind-studio').shadowRoot"
            ".querySelector('#embedder-progress').textContent;"
            " const m = /^Distilling on the GPU: (\\d+) \\/ 2000/.exec(t);"
            " return m && +m[1] >= 2; }",
            timeout=180_000,
        )
        print(page.locator("#embedder-progress").inner_text())
        page.click("#embedder-cancel")
        said = wait_text(studio, "#embedder-status", r"^Embedder phase cancelled", timeout=60_000)
        assert "nothing of it was kept" in said, said
        assert page.evaluate("window.__phase") == {"cancelled": True}
    # Nothing kept: no head, the same fingerprint, and the weights embed exactly as before.
    after = call(studio, "embedder_info")
    assert after["method"] is None and after["fingerprint"] == info["fingerprint"], after
    again = call(studio, "embed", texts=probe)
    for u, v in zip(before["vectors"], again["vectors"], strict=True):
        assert max(abs(a - b) for a, b in zip(u, v, strict=True)) < 1e-6
    assert page.locator("#embedder-cancel").is_hidden()
    assert page.locator("#train-embedder").is_enabled()


def _nano_package() -> bytes:
    """An untrained package of the nano preset with a 2,048-token vocabulary (the size of
    the Studio's default run): what opening and exporting read and write."""
    tok = Tokenizer.train(harvest_stdlib_docstrings(200_000), 2048)
    job = JobConfig(name="nano", version="0.1.0", preset="nano", vocab_size=tok.vocab_size)
    config = model_config(job, tok)
    return export_package(job, config, init_params(config, 0), tok, None, "test", "cpu")


def test_e_opening_and_exporting_a_nano_package_are_timed(studio: RecordedPage) -> None:
    data = _nano_package()
    page = studio.page
    timed = page.evaluate(
        """async (b64) => {
             const el = document.querySelector('evermind-studio');
             const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
             const file = new File([bytes], 'nano-0.1.0.evermind');
             const t0 = performance.now();
             const opened = await el.openPackage(file);
             const t1 = performance.now();
             const out = await el.exportPackage({ name: 'nano', version: '0.2.0' });
             const t2 = performance.now();
             return { open_s: (t1 - t0) / 1000, export_s: (t2 - t1) / 1000,
                      n_params: opened.n_params, bytes: out.size };
           }""",
        base64.b64encode(data).decode(),
    )
    print({"package_bytes": len(data), **timed, "at": time.strftime("%H:%M:%S")})
    assert timed["n_params"] > 0 and timed["bytes"] > 0
