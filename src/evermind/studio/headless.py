"""Headless training: the job run by the Studio page in headless Chromium (native-only).

The same page a person uses, through Playwright: the Studio session in the tab's worker runs
the job's steps (:mod:`evermind.job`) on the browser's WebGPU (SwiftShader where there is no
GPU). The page's events come back through a callback as :data:`~evermind.job.JobEvent`
values, and the exported package's bytes are returned; the caller shows the progress and
writes the file (``evermind train --headless`` in :mod:`evermind.cli.train`).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError, EvermindError, NoAdapterError
from evermind.job import DEFAULT_CORPUS_BYTES, ModelReady, Note, OnEvent, TokenizerProgress
from evermind.types import Progress

BOOT_TIMEOUT_MS = 180_000


def call_studio(page: Any, fn: str, **kwargs: Any) -> Any:
    """Runs a Studio worker call from the page; errors come back as EvermindError."""
    outcome = page.evaluate(
        """([fn, kwargs]) => window.evermind.call(fn, kwargs).then(
               r => ({ok: true, result: r}),
               e => ({ok: false, type: e.name, message: e.message}))""",
        [fn, kwargs],
    )
    if not outcome["ok"]:
        raise EvermindError(f"{fn} failed in the browser: {outcome['type']}: {outcome['message']}")
    return outcome["result"]


@dataclass
class BrowserRun:
    """What a headless run made.

    Attributes:
        package: The ``.evermind`` package bytes, exported in the tab.
        ref: ``evermind/<name>:<version>``.
        seconds: Wall time of the training call.
        summary: The Studio session's training summary (step, tokens, losses, ...).
    """

    package: bytes
    ref: str
    seconds: float
    summary: dict[str, Any]


def page_event(event: dict[str, Any]) -> Note | TokenizerProgress | Progress | None:
    """The job event of one Studio page event (None for those a terminal does not show)."""
    kind = event.get("event")
    if kind == "tokenizer-progress":
        done, total = int(event["done"]), int(event["total"])
        # The tab reports done == total once, at the end; total can shrink on the way (BPE
        # stops early when the corpus runs out of pairs to merge).
        return TokenizerProgress(done, total, finished=done >= total)
    if kind == "train-progress":
        return Progress(
            step=int(event["step"]),
            steps=int(event["steps"]),
            loss=float(event["loss"]),
            lr=float(event.get("lr") or 0.0),
            tokens=int(event.get("tokens") or 0),
            tokens_per_second=float(event["tokens_per_second"]),
            elapsed_s=float(event.get("elapsed_s") or 0.0),
            eval_loss=event.get("eval_loss"),
            routing=event.get("routing"),  # the cortex's, when the model has one
        )
    if kind == "error":
        return Note("browser", str(event.get("message")), interrupts=True)
    return None


def train_in_browser(
    bundle: Path,
    *,
    preset: str,
    vocab_size: int,
    steps: int,
    lr: float,
    batch_size: int,
    seq_len: int,
    seed: int,
    name: str,
    version: str,
    corpus_text: str | None = None,
    corpus_name: str = "corpus",
    corpus_bytes: int = DEFAULT_CORPUS_BYTES,
    on_event: OnEvent | None = None,
    block: str = "mamba1",
    cortex: dict[str, Any] | None = None,
) -> BrowserRun:
    """Runs the whole job in the Studio page of ``bundle`` in headless Chromium.

    Args:
        bundle: The built Studio bundle folder (:func:`evermind.studio.bundle.ensure_bundle`).
        preset: Model size preset.
        vocab_size: Tokenizer vocabulary size.
        steps: Optimiser steps.
        lr: Peak learning rate (the page derives the schedule, as the Studio's form does).
        batch_size: Sequences per step.
        seq_len: Tokens per sequence.
        seed: Seed of the weights and batches.
        name: Package name.
        version: Package version.
        corpus_text: The corpus; None for the default (harvested in the tab).
        corpus_name: The source name the corpus is added under.
        corpus_bytes: Cap of the default corpus in bytes.
        on_event: Receives the job's events (notes, tokenizer and training progress).
        block: The block type, ``mamba1`` or ``mamba2``.
        cortex: The cortex's ``MambaConfig`` keywords (``moe_experts``, ...); None: none.

    Raises:
        ConfigError: The Studio did not start in the browser.
        EvermindError: A Studio call failed in the browser.
    """
    from playwright.sync_api import sync_playwright

    from evermind.studio.browser import launch_options
    from evermind.studio.webserver import BundleServer

    def emit(event: Note | TokenizerProgress | ModelReady | Progress | None) -> None:
        if event is not None and on_event is not None:
            on_event(event)

    tokens: dict[str, Any] = {}  # the tokenizer's numbers, for the model line
    announced = False

    def on_page_event(event: dict[str, Any]) -> None:
        nonlocal announced
        if not announced and event.get("event") == "train-progress" and tokens:
            announced = True  # the model line a native run prints before its first step
            emit(
                ModelReady(
                    preset=preset,
                    n_params=int(event.get("n_params") or 0),
                    vocab_size=int(tokens["vocab_size"]),
                    train_tokens=int(tokens["train_tokens"]),
                    held_out_tokens=int(tokens["held_out_tokens"]),
                )
            )
        emit(page_event(event))

    with BundleServer(bundle) as server, sync_playwright() as p:
        browser = p.chromium.launch(**launch_options(p))
        try:
            page = browser.new_context().new_page()
            page.expose_function("__evermindHeadlessEvent", on_page_event)
            page.goto(server.url + "index.html")
            page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
            booted = page.evaluate("window.__evermind")
            if not booted.get("ok"):
                raise ConfigError(
                    f"the Studio did not start in headless Chromium: {booted.get('error')}"
                )
            device = booted["device"]
            if device.get("gpu") is False:  # the page boots without WebGPU; training cannot
                raise NoAdapterError(
                    f"headless Chromium gave the Studio no WebGPU: {device['gpu_error']['message']}"
                )
            adapter = device["adapter"]
            emit(Note("browser WebGPU adapter", f"{adapter['vendor']} {adapter['architecture']}"))
            # A function body, not the bare call: evaluate() invokes an expression's value when
            # it is a function, and on() returns its unsubscribe function, which would run.
            page.evaluate("() => { window.evermind.on(e => window.__evermindHeadlessEvent(e)); }")
            if corpus_text is None:
                info = call_studio(page, "corpus_default", max_bytes=corpus_bytes)
                emit(Note("corpus", info["sources"][0]["description"]))
            else:
                call_studio(page, "corpus_add", name=corpus_name, text=corpus_text)
            tokens.update(call_studio(page, "tokenizer_train", vocab_size=vocab_size))
            start = time.perf_counter()
            summary = call_studio(
                page,
                "train_start",
                preset=preset,
                steps=steps,
                lr=lr,
                batch_size=batch_size,
                seq_len=seq_len,
                seed=seed,
                block=block,
                cortex=cortex,
            )
            seconds = time.perf_counter() - start
            exported = call_studio(page, "export_package", name=name, version=version)
        finally:
            browser.close()
    return BrowserRun(
        package=base64.b64decode(exported["data_b64"]),
        ref=exported["ref"],
        seconds=seconds,
        summary=summary,
    )
