"""Push from the page to a real `evermind serve` on loopback: the runtime lists the model and
generates with it (the Studio on one local port, the runtime on another: CORS for loopback)."""

from __future__ import annotations

import secrets

import httpx

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.browser.conftest import open_studio
from tests.browser.test_studio_e2e import TINY, call
from tests.factories import TEXT


def test_push_from_the_page_to_a_runtime(browser, server, tmp_path) -> None:
    token = secrets.token_urlsafe(24)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{token} studio write\n")
    config = RuntimeConfig(data_dir=tmp_path / "runtime", port=0, tokens_file=tokens)
    with ServerThread(config) as runtime:
        rec = open_studio(browser, server)
        try:
            call(rec, "corpus_add", name="notes.txt", text=TEXT)
            call(rec, "tokenizer_train", vocab_size=300)
            call(
                rec,
                "train_start",
                config=TINY,
                steps=3,
                batch_size=2,
                seq_len=16,
                checkpoint_every=0,
            )
            served = rec.page.evaluate(
                """([url, token]) => document.querySelector('evermind-studio')
                       .push(url, token, {name: 'pushed', version: '1.0.0'})""",
                [runtime.url, token],
            )
            assert served["id"] == "evermind/pushed:1.0.0", served
            refused = rec.page.evaluate(
                """([url]) => document.querySelector('evermind-studio').push(url, 'wrong-token')
                       .then(() => 'accepted', e => e.message)""",
                [runtime.url],
            )
            assert refused != "accepted" and "token" in refused.lower(), refused
            rec.assert_offline()
        finally:
            rec.close()
        headers = {"Authorization": f"Bearer {token}"}
        listed = httpx.get(f"{runtime.url}/v1/models", headers=headers).json()
        assert [m["id"] for m in listed["data"]] == ["evermind/pushed:1.0.0"]
        completion = httpx.post(
            f"{runtime.url}/v1/completions",
            headers=headers,
            timeout=60,
            json={
                "model": "evermind/pushed",
                "prompt": "The quick",
                "max_tokens": 8,
                "temperature": 0,
            },
        )
        assert completion.status_code == 200, completion.text
        assert completion.json()["usage"]["completion_tokens"] >= 1
