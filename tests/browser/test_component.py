"""``<evermind-studio>`` on a plain third-party page: two elements, one runtime, the JS API.

The page (``web/examples/embed.html``) lives in a sub-folder and loads only
``../evermind-studio.js``; every other asset must be found relative to that script.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import ROOT, RecordedPage
from tests.factories import TEXT

SHOTS = ROOT / "test-results" / "component"


@pytest.fixture(scope="module")
def embed(browser, server) -> Iterator[RecordedPage]:
    rec = RecordedPage(browser)
    rec.page.set_viewport_size({"width": 1280, "height": 900})
    rec.page.goto(server.url + "examples/embed.html")
    ready = rec.page.evaluate(
        """() => Promise.all(['a', 'b'].map(id => customElements.whenDefined('evermind-studio')
               .then(() => document.getElementById(id).ready)))
             .then(r => ({ok: true, boots: r}),
                   e => ({ok: false, error: e.name + ': ' + e.message}))"""
    )
    assert ready["ok"], f"{ready}\n" + "\n".join(rec.console)
    rec.page.evaluate("document.getElementById('a').runtime.call('session_clear')")
    yield rec
    rec.close()


def test_two_elements_share_one_runtime_and_one_boot(embed: RecordedPage) -> None:
    page = embed.page
    assert page.evaluate(
        "document.getElementById('a').runtime === document.getElementById('b').runtime"
    )
    assert sum(u.endswith("/pyodide.asm.wasm") for u in embed.requests) == 1
    assert sum(u.endswith("/worker.js") for u in embed.requests) == 1
    # Assets came from the script's folder, never from the page's (examples/).
    assert not [u for u in embed.requests if "/examples/" in u and not u.endswith("embed.html")]
    for element in ("a", "b"):
        assert page.locator(f"#{element} #status-pill").inner_text() == "ready"
        assert page.evaluate(
            f"!!document.getElementById('{element}').shadowRoot.querySelector('.studio')"
        )
    # Attributes: runtime-url pre-fills Push; preset picks the model size.
    assert page.locator("#b input[name=runtime-url]").input_value() == "http://127.0.0.1:8080"
    assert page.locator("#a select[name=preset]").input_value() == "nano"


@pytest.mark.slow
def test_js_api_trains_exports_and_uses_the_model(embed: RecordedPage) -> None:
    page = embed.page
    result = page.evaluate(
        """async (text) => {
             const a = document.getElementById('a');
             const b = document.getElementById('b');
             const corpus = new Blob([text], {type: 'text/plain'});
             a.setAttribute('corpus-url', URL.createObjectURL(corpus));
             const progress = [], trained = [], errors = [];
             a.addEventListener('evermind-progress', e => progress.push(e.detail));
             a.addEventListener('evermind-trained', e => trained.push(e.detail));
             a.addEventListener('evermind-error', e => errors.push(e.detail));
             const summary = await a.train({steps: 6, batch_size: 2, seq_len: 32, lr: 0.01,
                                            vocab_size: 300, preset: 'nano'});
             const blob = await a.exportPackage();
             const head = new Uint8Array(await blob.slice(0, 2).arrayBuffer());
             const vectors = await b.embed(['a memory kept in the tab', 'recall by meaning']);
             const streamed = [];
             const generated = await b.generate('The quick', {max_new_tokens: 5, temperature: 0,
                                                             onToken: t => streamed.push(t)});
             return {summary, progress, trained: trained.length, errors,
                     blob: {size: blob.size, type: blob.type, name: blob.name,
                            head: String.fromCharCode(...head)},
                     dims: vectors.map(v => v.length),
                     norms: vectors.map(v => Math.hypot(...v)),
                     generated, streamed};
           }""",
        TEXT,
    )
    summary = result["summary"]
    print(
        {
            k: summary[k]
            for k in ("state", "step", "initial_loss", "final_loss", "tokens_per_second")
        }
    )
    assert summary["state"] == "finished" and summary["step"] == 6
    assert summary["final_loss"] < summary["initial_loss"]
    steps = [p["step"] for p in result["progress"]]
    assert steps == [1, 2, 3, 4, 5, 6], steps
    assert all(p["tokens_per_second"] > 0 and p["loss"] > 0 for p in result["progress"])
    assert result["trained"] == 1 and not result["errors"]
    blob = result["blob"]
    assert blob["head"] == "PK" and blob["size"] > 10_000 and blob["name"].endswith(".evermind")
    assert result["dims"][0] == result["dims"][1] > 0
    assert all(abs(n - 1.0) < 1e-3 for n in result["norms"])
    assert "".join(result["streamed"]) == result["generated"]["text"]
    assert result["generated"]["tokens"] == 5
    # The corpus came from corpus-url (a blob: URL), not from the default corpus.
    assert any(u.startswith("blob:") for u in embed.requests)
    # The other element saw the shared session change: its Train step is done too.
    assert embed.page.locator("#b #step-train").get_attribute("data-status") == "done"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "embed.png"), full_page=True)


def test_memory_api_is_shared_between_elements(embed: RecordedPage) -> None:
    hits = embed.page.evaluate(
        """async () => {
             const a = document.getElementById('a'), b = document.getElementById('b');
             await a.memory.remember('project.deadline', 'The report is due on Friday.',
                                     {tags: ['work']});
             const found = await b.memory.recall('when is the report due', {top_k: 3});
             const forgotten = await b.memory.forget('project.deadline');
             const after = await a.memory.recall('when is the report due', {top_k: 3});
             return {found, forgotten, after};
           }"""
    )
    assert hits["found"] and hits["found"][0]["key"] == "project.deadline"
    assert hits["found"][0]["ranked_by"]
    assert hits["forgotten"] is True
    assert all(h["key"] != "project.deadline" for h in hits["after"])


def test_api_errors_come_back_in_words(embed: RecordedPage) -> None:
    message = embed.page.evaluate(
        """() => document.getElementById('a').push('not a url', 't')
                 .then(() => 'resolved', e => e.message)"""
    )
    assert "is not a URL" in message
    embed.assert_offline()
