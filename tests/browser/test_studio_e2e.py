"""End to end in headless Chromium: train in the tab, reload and resume from IndexedDB,
export, and check the package natively (reader, CPU model's greedy continuation)."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import evermind
from evermind.errors import EvermindError
from evermind.studio.headless import call_studio
from tests import procs
from tests.browser.conftest import RecordedPage, open_studio
from tests.factories import TEXT

TINY = {"d_model": 16, "n_layer": 2, "d_state": 4}


def call(rec: RecordedPage, fn: str, **kwargs):
    """A Studio worker call from the page (the same helper headless training uses)."""
    try:
        return call_studio(rec.page, fn, **kwargs)
    except EvermindError:
        print("\n".join(rec.console[-20:]))
        raise


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    """One Studio page for the in-tab tests below (a page boot is seconds of Pyodide). Safe to
    share: each test starts from ``session_clear`` (or opens a package, which replaces the
    model) and checks only what it trained or opened; the reload test has its own profile."""
    rec = open_studio(browser, server)
    try:
        yield rec
    finally:
        rec.close()


def test_train_reload_resume_export_and_native_agreement(browser, server, tmp_path) -> None:
    context = browser.new_context()  # one profile: IndexedDB survives the reload
    rec = RecordedPage.__new__(RecordedPage)
    rec.context, rec.requests, rec.console = context, [], []
    context.on("request", lambda r: rec.requests.append(r.url))
    rec.page = context.new_page()
    rec.page.on("console", lambda m: rec.console.append(f"{m.type}: {m.text}"))
    try:
        rec.page.goto(server.url + "index.html")
        rec.page.wait_for_function("window.__done === true", timeout=120_000)
        call(rec, "session_clear")
        call(rec, "corpus_add", name="notes.txt", text=TEXT)
        call(rec, "tokenizer_train", vocab_size=300)
        # Train, pause after a few steps (checkpoint on pause), then reload the tab.
        rec.page.evaluate(
            """(cfg) => { window.__events = [];
                 window.evermind.on(e => window.__events.push(e));
                 window.__training = window.evermind.call('train_start', cfg); }""",
            {
                "config": TINY,
                "steps": 16,
                "batch_size": 2,
                "seq_len": 16,
                "checkpoint_every": 4,
                "lr": 0.01,
            },
        )
        rec.page.wait_for_function(
            "window.__events.some(e => e.event === 'train-checkpoint' && e.step >= 4)",
            timeout=120_000,
        )
        call(rec, "train_pause")
        paused = rec.page.evaluate("window.__training")
        assert paused["state"] == "paused" and 4 <= paused["step"] < 16
        rec.page.reload()
        rec.page.wait_for_function("window.__done === true", timeout=120_000)
        status = call(rec, "session_status")
        assert status["has_checkpoint"] and status["step"] == paused["step"]
        done = call(rec, "train_resume")
        assert done["state"] == "finished" and done["step"] == 16
        assert done["losses"][: paused["step"]] == paused["losses"]
        assert done["final_loss"] < done["initial_loss"]

        exported = call(rec, "export_package", name="e2e", version="0.0.1")
        data = base64.b64decode(exported["data_b64"])
        path = tmp_path / "e2e.evermind"
        path.write_bytes(data)
        prompt = "The quick brown"
        browser_text = call(rec, "generate", prompt=prompt, max_new_tokens=12, temperature=0)[
            "text"
        ]
        rec.assert_offline()
    finally:
        context.close()

    model = evermind.load(path)  # the native reader verifies every checksum and shape
    assert model.package.manifest["training"]["steps"] == 16
    native_text = model.complete(prompt, max_new_tokens=12, temperature=0).text
    print(f"browser: {browser_text!r}\nnative:  {native_text!r}")
    assert native_text == browser_text
    vector = model.embed(["a memory"])[0]
    assert np.isclose(np.linalg.norm(vector), 1.0, atol=1e-5)


def test_nano_preset_on_the_default_corpus_learns(studio: RecordedPage) -> None:
    rec = studio
    call(rec, "session_clear")
    info = call(rec, "corpus_default", max_bytes=150_000)
    assert info["bytes"] > 100_000 and "docstrings" in info["sources"][0]["description"]
    call(rec, "tokenizer_train", vocab_size=512)
    summary = call(
        rec,
        "train_start",
        preset="nano",
        steps=12,
        batch_size=2,
        seq_len=32,
        lr=0.01,
        checkpoint_every=0,
        warmup_steps=2,
    )
    print(
        f"nano on the default corpus: {summary['initial_loss']:.3f} -> "
        f"{summary['final_loss']:.3f}, {summary['tokens_per_second']} tok/s"
    )
    assert summary["n_params"] > 500_000
    assert summary["final_loss"] < summary["initial_loss"] - 0.5
    rec.assert_offline()


def test_mamba2_trains_generates_and_exports_in_the_tab(
    studio: RecordedPage, tmp_path: Path
) -> None:
    """The Studio worker trains a Mamba-2 (SSD) model through the same job path, generates with
    GpuDecoder's Mamba-2 step and embeds; the export agrees with the native CPU model."""
    rec = studio
    call(rec, "session_clear")
    call(rec, "corpus_add", name="notes.txt", text=TEXT)
    call(rec, "tokenizer_train", vocab_size=300)
    summary = call(
        rec,
        "train_start",
        block="mamba2",
        preset="nano",
        steps=3,
        batch_size=2,
        seq_len=16,
        lr=0.01,
        checkpoint_every=0,
    )
    assert summary["state"] == "finished" and summary["final_loss"] < summary["initial_loss"]
    assert call(rec, "session_restore")["settings"]["block"] == "mamba2"  # the Train form's
    prompt = "The quick brown"
    generated = call(rec, "generate", prompt=prompt, max_new_tokens=8, temperature=0)
    assert generated["device"] == "gpu"
    vectors = call(rec, "embed", texts=["a memory"])["vectors"]
    exported = call(rec, "export_package", name="m2", version="0.0.1")
    rec.assert_offline()
    path = tmp_path / "m2.evermind"
    path.write_bytes(base64.b64decode(exported["data_b64"]))
    model = evermind.load(path)
    assert model.config.block == "mamba2"
    assert model.package.manifest["producer"].endswith("(webgpu (browser))")
    native_text = model.complete(prompt, max_new_tokens=8, temperature=0).text
    print(f"browser: {generated['text']!r}\nnative:  {native_text!r}")
    assert native_text == generated["text"]
    assert np.allclose(model.embed(["a memory"])[0], vectors[0], atol=1e-4)


def test_a_native_package_opens_in_the_tab_and_agrees(studio: RecordedPage) -> None:
    """The other direction: a package written natively is verified and run in the tab."""
    from tests.factories import tiny_package

    data = tiny_package(name="native", steps=30)
    rec = studio
    opened = call(rec, "package_load", data_b64=base64.b64encode(data).decode())
    assert opened["ref"] == "evermind/native:0.1.0"
    tab = call(rec, "generate", prompt="Memories are", max_new_tokens=10, temperature=0)
    native = evermind.load(data).complete("Memories are", max_new_tokens=10, temperature=0)
    assert tab["text"] == native.text
    rec.assert_offline()


def test_a_cortex_model_trains_in_the_tab_and_reports_its_routing(studio: RecordedPage) -> None:
    """The tab's WebGPU trains the cortex (moe.wgsl in the browser): each train-progress event
    carries the routing, and the training panel shows it."""
    rec = studio
    call(rec, "session_clear")
    call(rec, "corpus_add", name="notes.txt", text=TEXT)
    call(rec, "tokenizer_train", vocab_size=300)
    rec.page.evaluate(
        "() => { window.__events = []; window.evermind.on(e => window.__events.push(e)); }"
    )
    cortex = {"moe_experts": 3, "moe_top_k": 2, "moe_intermediate": 8}
    summary = call(
        rec,
        "train_start",
        config=TINY,
        cortex=cortex,
        steps=2,
        batch_size=2,
        seq_len=16,
        lr=0.01,
        checkpoint_every=0,
    )
    assert summary["state"] == "finished"
    events = rec.page.evaluate("window.__events.filter(e => e.event === 'train-progress')")
    routing = events[-1]["routing"]
    assert set(routing["layers"]) == {"0", "1"} and routing["aux_loss"] > 0
    for layer in routing["layers"].values():
        assert len(layer["fractions"]) == 3 and abs(sum(layer["fractions"]) - 2) < 1e-5
    assert call(rec, "session_restore")["settings"]["cortex"]["moe_experts"] == 3
    rec.assert_offline()


def test_headless_cli_trains_the_cortex_in_the_tab_and_writes_a_valid_package(
    tmp_path: Path,
) -> None:
    """``evermind train --headless --preset nano --moe-experts 2``: the flags reach the tab's
    train_start, the tab's progress reaches the terminal (the tokenizer's and the last step's
    lines, with the routing), the command's last stdout line names the package, and the package
    it exports is valid (the native reader checks every checksum and shape) and carries the
    cortex. (One headless run for both: each costs a Chromium and a Pyodide boot.)"""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "cortex.evermind"
    args = [sys.executable, "-m", "evermind.cli", "train", "--headless", "--corpus", str(corpus)]
    args += ["--vocab-size", "300", "--steps", "2", "--batch-size", "2", "--seq-len", "16"]
    args += ["--preset", "nano"]
    args += ["--moe-experts", "2", "--moe-top-k", "1", "--moe-intermediate", "16"]
    result = procs.run(
        [*args, "--out", str(out)], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"out":' in result.stdout.splitlines()[-1]
    lines = result.stderr.splitlines()
    assert any(line.startswith("tokenizer [" + "#" * 24 + "]") for line in lines), result.stderr
    assert any(line.startswith("model: nano, ") and " parameters, vocab " in line for line in lines)
    last = [line for line in lines if line.startswith("train [")][-1]
    assert " 2/2 loss " in last and " aux " in last and " L0 " in last, result.stderr
    model = evermind.load(out)
    assert model.package.manifest["training"]["steps"] == 2
    assert model.config.moe_experts == 2 and model.config.moe_intermediate == 16
    assert model.package.manifest["producer"].endswith("(webgpu (browser))")
