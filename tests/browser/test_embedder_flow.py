"""The Studio's default flow ends with a working embedder (issue 14), in headless Chromium.

A real ``evermind serve --teacher minilm`` runs on loopback (``ServerThread`` with
``RuntimeConfig(teachers=["minilm"])``, as ``cli/serve.py`` passes ``--teacher``). The page
trains a tiny model through the element's ``train()`` with ``runtime-url`` pointing at that
runtime; when training finishes the embedder phase asks the runtime's ``/v1/embeddings`` for
all-MiniLM-L6-v2's vectors of the corpus sentences and distils them on WebGPU. Then the
Cache panel, through its own inputs and buttons, stores a question and its answer, serves a
paraphrase, and refuses an unrelated question. Without a runtime URL the same flow falls
back to centring and says so.
"""

from __future__ import annotations

import base64

import numpy as np

import evermind
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.browser.conftest import open_studio
from tests.browser.test_studio_e2e import TINY, call
from tests.browser.test_studio_ui import show, wait_text

#: Unrelated questions stored first, so the cache can measure its embedder.
CALIBRATION_TOPICS = (
    "volcanoes",
    "sourdough bread",
    "marathon training",
    "violin strings",
    "glaciers",
    "orchid care",
    "tax deadlines",
    "chess openings",
    "bicycle gears",
    "coral reefs",
)
STORED = "how do I convert 100 US dollars to euros"
ANSWER = "Multiply by the exchange rate: about 92 euros."
PARAPHRASE = "convert 100 US dollars into euros"
UNRELATED = "what is the capital of Peru"

#: A corpus of short sentences on a few topics (the embedder phase's texts).
TOPICS = {
    "money": [
        "Convert dollars to euros at the current exchange rate.",
        "The bank charges a fee to change money into another currency.",
        "How many euros do I get for fifty dollars?",
        "Exchange rates between the pound and the yen change every day.",
        "Send money abroad and pay in the local currency.",
        "The price in dollars is higher than the price in euros.",
    ],
    "geography": [
        "Lima is the capital city of Peru.",
        "Paris is the capital of France and its largest city.",
        "The Andes run along the west coast of South America.",
        "Which country has the longest coastline in the world?",
        "Rivers flow from the mountains down to the sea.",
        "The capital of Japan is Tokyo.",
    ],
    "files": [
        "Open the file and read every line into a list.",
        "Write the results to a new text file on disk.",
        "Close the file when you are done reading it.",
        "The program copies files from one folder to another.",
        "Delete the temporary files after the build finishes.",
        "Read the configuration file before the server starts.",
    ],
    "cooking": [
        "Boil the pasta in salted water for ten minutes.",
        "Bake the bread at a high temperature until it is golden.",
        "A cup of flour weighs about one hundred and twenty grams.",
        "Stir the soup slowly and add a pinch of salt.",
        "Chop the onions before you heat the oil in the pan.",
        "Serve the cake once it has cooled down.",
    ],
}
CORPUS = "\n\n".join(" ".join(lines) for lines in TOPICS.values())
CORPUS = "\n\n".join([CORPUS] * 3)  # enough tokens for the tiny model's training windows


def _train(rec, runtime_url: str | None) -> dict:
    """Trains through the element (the page's own default flow, embedder phase included)."""
    return rec.page.evaluate(
        """async ([text, url, cfg]) => {
             const el = document.querySelector('evermind-studio');
             el.setAttribute('corpus-url', URL.createObjectURL(new Blob([text])));
             if (url) el.setAttribute('runtime-url', url);
             const phases = [];
             el.runtime.on(e => { if (e.event === 'embedder-progress') phases.push(e); });
             const summary = await el.train(cfg);
             return {summary, progress: phases.length, state: el.state.embedder};
           }""",
        [
            CORPUS,
            runtime_url,
            {
                "config": TINY,
                "steps": 30,
                "batch_size": 4,
                "seq_len": 32,
                "lr": 0.01,
                "vocab_size": 300,
                "checkpoint_every": 0,
            },
        ],
    )


def _lookup(rec, query: str) -> str:
    page = rec.page
    page.fill("#panel-cache input[name=cache-query]", query)
    page.evaluate(
        "document.querySelector('evermind-studio').shadowRoot"
        ".getElementById('cache-verdict').replaceChildren()"
    )
    page.click("#cache-lookup")
    wait_text(rec, "#cache-verdict", r"Hit|Miss")
    # The whole verdict, the closed Details (score, verifier, δ, reason) included.
    return str(page.locator("#cache-verdict").text_content())


def test_the_default_flow_distils_the_runtime_teacher_and_the_cache_uses_it(
    browser, server, tmp_path
) -> None:
    config = RuntimeConfig(data_dir=tmp_path / "runtime", port=0, teachers=["minilm"])
    with ServerThread(config) as runtime:
        rec = open_studio(browser, server)
        try:
            call(rec, "session_clear")
            out = _train(rec, runtime.url)
            summary, embedder = out["summary"], out["summary"]["embedder"]
            print(
                {
                    k: embedder.get(k)
                    for k in (
                        "method",
                        "teacher",
                        "texts",
                        "first_loss",
                        "loss",
                        "seconds",
                        "tokens",
                        "agreement_without_tokens",
                        "agreement",
                        "token_seconds",
                        "why",
                    )
                }
            )
            assert summary["state"] == "finished"
            assert embedder["method"] == "distill", embedder
            assert embedder["teacher"] == "teacher/all-minilm-l6-v2" and embedder["dim"] == 384
            # 24 sentences: every fifth (4) held out to score the token term on.
            assert embedder["texts"] == 20 and embedder["token_texts"] == 4
            assert out["progress"] >= embedder["steps"]
            assert embedder["loss"] < embedder["first_loss"]
            # The token term step ran (the teacher on the vocabulary, then the fit).
            assert "token term failed" not in embedder["why"], embedder["why"]
            assert isinstance(embedder["tokens"], bool) and embedder["token_seconds"] >= 0
            # The Train panel says which embedder ran and why.
            show(rec, "train")
            status = wait_text(rec, "#embedder-status", r"Distilled embedder")
            assert "teacher/all-minilm-l6-v2" in status and runtime.url in status

            # Enough stored questions for the cache to calibrate this embedder (with fewer it
            # serves only repeats), then the Cache panel, through its inputs and buttons.
            for i, topic in enumerate(CALIBRATION_TOPICS):
                call(
                    rec, "cache_store", query=f"What should I know about {topic}?", response=f"{i}"
                )
            show(rec, "cache")
            page = rec.page
            page.fill("#panel-cache input[name=cache-store-query]", STORED)
            page.fill("#panel-cache textarea[name=cache-store-response]", ANSWER)
            page.click("#cache-store")
            wait_text(rec, "#panel-cache .message", r"Stored")
            served = _lookup(rec, STORED.upper() + "?")  # the same question: always served
            assert served.startswith("Hit") and ANSWER in served, served
            judged = _lookup(rec, PARAPHRASE)
            print(f"paraphrase: {judged!r}")
            # Verified at δ 0.01 (the default, as in the library and the gateway): the verdict
            # shows the verifier's probability and the bound, hit or miss.
            assert "Same question (verifier)" in judged and "Error bound δ" in judged, judged
            assert judged.startswith("Hit") == (ANSWER in judged), judged
            refused = _lookup(rec, UNRELATED)
            print(f"unrelated: {refused!r}")
            assert refused.startswith("Miss") and ANSWER not in refused, refused
            para = call(rec, "cache_lookup", query=PARAPHRASE)
            far = call(rec, "cache_lookup", query=UNRELATED)
            assert "semantic+lexical" in para["ranked_by"] and para["max_error"] == 0.01
            assert call(rec, "embedder_info")["fingerprint"] in para["ranked_by"]
            # The distilled model ranks the paraphrase well above the unrelated question.
            assert para["score"] > far["score"] + 0.2, (para["score"], far["score"])

            # The exported package carries the head and embeds natively as the tab does.
            exported = call(rec, "export_package", name="distilled", version="0.1.0")
            probes = [STORED, PARAPHRASE, UNRELATED]
            tab = np.asarray(call(rec, "embed", texts=probes)["vectors"], np.float64)
            rec.assert_offline()
        finally:
            rec.close()
    model = evermind.load(base64.b64decode(exported["data_b64"]))
    head = model.package.manifest["embedder"]
    assert head["method"] == "distill" and head["teacher"] == "teacher/all-minilm-l6-v2"
    assert head.get("tokens", False) == embedder["tokens"]
    native = model.embed(probes).astype(np.float64)
    agreement = np.sum(tab * native, axis=1) / (
        np.linalg.norm(tab, axis=1) * np.linalg.norm(native, axis=1)
    )
    print(f"tab vs native cosine per probe: {np.round(agreement, 6).tolist()}")
    assert agreement.min() > 1 - 1e-4


def test_without_a_runtime_the_default_flow_centres_and_says_why(browser, server) -> None:
    rec = open_studio(browser, server)
    try:
        call(rec, "session_clear")
        out = _train(rec, None)
        embedder = out["summary"]["embedder"]
        assert embedder["method"] == "centre", embedder
        assert "no runtime URL" in embedder["why"] and embedder["texts"] == 24
        show(rec, "train")
        status = wait_text(rec, "#embedder-status", r"Centred embedder")
        assert "no runtime URL" in status
        assert call(rec, "embedder_info")["method"] == "centre"
        # A teacher that does not answer: the page says so and still centres.
        failed = rec.page.evaluate(
            """() => document.querySelector('evermind-studio')
                   .embedder({url: 'http://127.0.0.1:9'})"""
        )
        assert failed["method"] == "centre" and "could not reach" in failed["why"], failed
        rec.assert_offline()
    finally:
        rec.close()
