"""``evermind train --headless``: drive the Studio page in headless Chromium (native-only).

The same page a person uses, through Playwright: the training runs in the tab's worker on
the browser's WebGPU (SwiftShader where there is no GPU), progress is mirrored to a terminal
progress bar, and the exported ``.evermind`` package is written to disk.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError, EvermindError

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


def train_headless(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the whole job in the Studio page; returns the summary line's fields."""
    from playwright.sync_api import sync_playwright

    from evermind.cli import ensure_bundle
    from evermind.headless import launch_options
    from evermind.train.commands import ProgressBar, _atomic_write, read_corpus
    from evermind.webserver import BundleServer

    bundle = ensure_bundle(None)
    corpus_text = None
    if args.corpus != "default":
        corpus_text, description = read_corpus(args.corpus, args.corpus_bytes)
        print(f"corpus: {description}", file=sys.stderr)
    bars: dict[str, ProgressBar] = {}

    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "tokenizer-progress":
            bar = bars.setdefault("tok", ProgressBar("tokenizer", int(event["total"])))
            bar.update(int(event["done"]))
        elif kind == "train-progress":
            bar = bars.setdefault("train", ProgressBar("train", int(event["steps"])))
            ev = event.get("eval_loss")
            extra = f"loss {event['loss']:.3f}" + (f" eval {ev:.3f}" if ev is not None else "")
            bar.update(
                int(event["step"]),
                f"{extra} {event['tokens_per_second']:,.0f} tok/s",
                force=ev is not None,
            )
        elif kind == "error":
            print(f"\nbrowser: {event.get('message')}", file=sys.stderr)

    with BundleServer(bundle) as server, sync_playwright() as p:
        browser = p.chromium.launch(**launch_options(p))
        try:
            page = browser.new_context().new_page()
            page.expose_function("__evermindHeadlessEvent", on_event)
            page.goto(server.url + "index.html")
            page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
            booted = page.evaluate("window.__evermind")
            if not booted.get("ok"):
                raise ConfigError(
                    f"the Studio did not start in headless Chromium: {booted.get('error')}"
                )
            adapter = booted["device"]["adapter"]
            print(
                f"browser WebGPU adapter: {adapter['vendor']} {adapter['architecture']}".rstrip(),
                file=sys.stderr,
            )
            page.evaluate("window.evermind.on(e => window.__evermindHeadlessEvent(e))")
            if corpus_text is None:
                info = call_studio(page, "corpus_default", max_bytes=args.corpus_bytes)
                print(f"corpus: {info['sources'][0]['description']}", file=sys.stderr)
            else:
                call_studio(
                    page, "corpus_add", name=Path(args.corpus).name or "corpus", text=corpus_text
                )
            call_studio(page, "tokenizer_train", vocab_size=args.vocab_size)
            start = time.perf_counter()
            summary = call_studio(
                page,
                "train_start",
                preset=args.preset,
                steps=args.steps,
                lr=args.lr,
                batch_size=args.batch_size,
                seq_len=args.seq_len,
                seed=args.seed,
            )
            seconds = time.perf_counter() - start
            exported = call_studio(page, "export_package", name=args.name, version=args.version)
        finally:
            browser.close()
    out = Path(args.out)
    _atomic_write(out, base64.b64decode(exported["data_b64"]))
    print(
        f"trained in {seconds:.1f} s in the browser; wrote {out} ({exported['bytes']:,} bytes, "
        f"{exported['ref']})",
        file=sys.stderr,
    )
    return {
        "steps": summary["step"],
        "tokens": summary["tokens"],
        "initial_loss": summary["initial_loss"],
        "final_loss": summary["final_loss"],
        "eval_loss": summary["eval_loss"],
        "tokens_per_second": summary["tokens_per_second"],
        "out": str(out),
        "device": "browser",
    }
