"""A PyScript page (``web/examples/pyscript.html``) that imports evermind, on loopback only.

PyScript's ``<script type="py" config='…'>`` points its interpreter at the bundle's Pyodide
and installs ``evermind-memory`` with micropip from the bundle's PEP 503 index
(``simple/``). Every request that is not to the test's server is aborted and recorded, and
the test fails if there was one. The page trains a tokenizer (checked id for id against the
same training natively), trains a tiny model a few steps on WebGPU (SwiftShader here) and
embeds three sentences; the test repeats that run natively and compares. A second page, on
another loopback origin, uses PyScript's own ``packages`` + ``index_urls`` config with the
bundle's full URL.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import evermind
from evermind.job import tokenize_split
from evermind.model.config import MambaConfig
from evermind.model.init import init_params
from evermind.model.py_decode import PyDecoder
from evermind.studio.webserver import BundleServer
from evermind.tokenizer import Tokenizer
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import Trainer
from evermind.types import TrainConfig
from tests.browser.conftest import BOOT_TIMEOUT_MS, RecordedPage

PAGE = "examples/pyscript.html"
#: Records the page's uncaught errors (PyScript reports a failed install as one).
RECORD_ERRORS = """
window.addEventListener("error", (e) => { window.__pageError ??= String(e.message); });
window.addEventListener("unhandledrejection", (e) => { window.__pageError ??= String(e.reason); });
"""
#: The page's outcome: its JSON result, or an error (uncaught, or shown on the page).
DONE = (
    "window.evermindResult !== undefined || window.__pageError !== undefined"
    " || document.querySelector('.py-error') !== null"
)
ERROR = "window.__pageError ?? document.querySelector('.py-error')?.textContent ?? null"


@pytest.fixture(scope="module")
def served(bundle_dir: Path) -> Iterator[BundleServer]:
    """A server of this module's own, so its byte counts are this page's alone."""
    with BundleServer(bundle_dir) as srv:
        yield srv


class PyScriptRun:
    """A fresh context (nothing cached) that lets only ``origins`` through; the rest is
    aborted and recorded in :attr:`blocked`.

    ``route=False`` leaves requests unrouted (Playwright's routing keeps a service worker from
    taking control); the launch flags still make every host but 127.0.0.1 unresolvable and
    :meth:`RecordedPage.assert_offline` still sees every request."""

    def __init__(self, browser: Any, origins: list[str], route: bool = True) -> None:
        self.rec = RecordedPage(browser)
        self.blocked: list[str] = []
        self.rec.context.add_init_script(RECORD_ERRORS)
        if route:
            self._route(origins)

    def _route(self, origins: list[str]) -> None:
        prefixes = tuple(origin.rstrip("/") + "/" for origin in origins)

        def only_loopback(route: Any) -> None:
            url = route.request.url
            if url.startswith(prefixes):
                route.continue_()
            else:
                self.blocked.append(url)
                route.abort()

        self.rec.context.route("**/*", only_loopback)

    def open(self, url: str) -> dict[str, Any]:
        """Opens ``url`` and returns the page's ``evermindResult`` (bounded wait)."""
        rec = self.rec
        rec.page.goto(url)
        try:
            rec.page.wait_for_function(DONE, timeout=BOOT_TIMEOUT_MS)
        except Exception:
            print("console:\n" + "\n".join(rec.console[-40:]))
            raise
        error = rec.page.evaluate(ERROR)
        assert error is None, f"PyScript failed: {error}\n" + "\n".join(rec.console[-40:])
        return dict(json.loads(rec.page.evaluate("window.evermindResult")))


@pytest.fixture(scope="module")
def visit(browser: Any, served: BundleServer) -> Iterator[dict[str, Any]]:
    """Opens the example page once, with every request not to ``served`` cut."""
    run = PyScriptRun(browser, [served.url])
    served.reset_counts()
    result = run.open(served.url + PAGE)
    yield {
        "result": result,
        "rec": run.rec,
        "blocked": run.blocked,
        "bytes": served.bytes_sent(),
        "log": run.rec.page.locator("#log").inner_text(),
    }
    run.rec.close()


def test_nothing_left_loopback_and_the_wheel_came_from_our_index(
    visit: dict[str, Any], bundle_dir: Path
) -> None:
    rec: RecordedPage = visit["rec"]
    assert visit["blocked"] == [], f"requests left the server: {visit['blocked'][:10]}"
    rec.assert_offline()
    info = json.loads((bundle_dir / "build-info.json").read_text())
    paths = [u.split("/", 3)[3] for u in rec.requests if u.startswith("http://127.0.0.1:")]
    # PyScript from its vendored folder, Pyodide from ours, the wheel through the index.
    assert f"{info['pyscript_dir']}core.js" in paths
    assert f"{info['pyodide_dir']}pyodide.mjs" in paths
    assert "simple/evermind-memory/" in paths
    assert info["wheel"] in paths
    total = sum(visit["bytes"].values())
    print(f"PyScript page first load: {total} bytes over {len(visit['bytes'])} files")
    assert not [line for line in rec.console if line.startswith("pageerror")], rec.console


def test_the_tab_imports_evermind_and_trains_the_same_tokenizer(visit: dict[str, Any]) -> None:
    result = visit["result"]
    assert result["version"] == evermind.__version__
    # The same training natively gives the same merges, so the same ids.
    native = Tokenizer.train(result["corpus"], 320)
    assert result["vocab_size"] == native.vocab_size
    assert result["sample_ids"] == native.encode(result["sample"])
    assert result["decoded"] == result["sample"]
    assert all(0 <= i < result["vocab_size"] for i in result["sample_ids"])
    assert len(result["sample_ids"]) < len(result["sample"].encode())  # merges were used
    assert "decoded back" in visit["log"]


@pytest.fixture(scope="module")
def native(visit: dict[str, Any]) -> dict[str, Any]:
    """The page's run again natively: same tokenizer, init and batches, on the numpy
    trainer; then the same three sentences embedded with the trained weights."""
    result = visit["result"]
    tokenizer = Tokenizer.train(result["corpus"], 320)
    eos = tokenizer.eos_id
    assert eos is not None
    config = MambaConfig(
        vocab_size=tokenizer.vocab_size,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=eos,
        **result["model"],
    )
    train = TrainConfig(**result["train"])
    train_ids, held_ids = tokenize_split(tokenizer, result["corpus"], 0.1)
    backend = CpuBackend(config, init_params(config, seed=0), train)
    trainer = Trainer(backend, train_ids, held_ids, train)
    # Playwright's sync API holds this thread's event loop, so the run gets a thread of its own.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, trainer.run()).result()
        state = pool.submit(asyncio.run, backend.state()).result()
    params = {k: v for k, v in state.items() if not k.startswith("adam.")}
    texts = [tokenizer.encode(line) for line in result["embedded"]]
    vectors = PyDecoder(config, params).embed_ids(texts)
    return {
        "losses": trainer.losses,
        "similar": _cosine(vectors[0], vectors[1]),
        "unrelated": _cosine(vectors[0], vectors[2]),
    }


def _cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def test_a_few_webgpu_steps_lower_the_loss_as_numpy_does(
    visit: dict[str, Any], native: dict[str, Any]
) -> None:
    result = visit["result"]
    assert result["gpu"], "this browser is launched with WebGPU; the page found none"
    losses, reference = result["losses"], native["losses"]
    print("tab losses:  ", [round(x, 4) for x in losses])
    print("numpy losses:", [round(x, 4) for x in reference])
    print("max |tab - numpy|:", max(abs(a - b) for a, b in zip(losses, reference, strict=True)))
    assert len(losses) == result["train"]["steps"] and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(result["vocab_size"]), abs=0.5)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1
    # The WGSL kernels on SwiftShader against the numpy reference, step by step: float32
    # sums in another order drift apart slowly over steps, hence 1e-3 relative.
    assert losses == pytest.approx(reference, rel=1e-3)


def test_embeddings_are_unit_vectors_as_the_native_ones(
    visit: dict[str, Any], native: dict[str, Any]
) -> None:
    result = visit["result"]
    print({k: result[k] for k in ("dim", "norm", "similar", "unrelated", "seconds")})
    print("native:", {k: native[k] for k in ("similar", "unrelated")})
    assert result["dim"] == result["model"]["d_model"]
    assert result["norm"] == pytest.approx(1.0, abs=1e-6)
    for key in ("similar", "unrelated"):
        assert -1.0 <= result[key] <= 1.0
        # Weights trained in the tab on WebGPU vs by numpy natively: close, not bit-equal.
        assert result[key] == pytest.approx(native[key], abs=1e-3)


HOST_TEXT = "the heron and the river; the heron and the delta. " * 20
HOST_SAMPLE = "the heron and the delta"
HOST_PAGE = """<!doctype html>
<meta charset="utf-8"><title>A page of another origin</title>
<script type="module" src="{bundle}{pyscript_dir}core.js"></script>
<script type="py" config='{{
    "interpreter": "{bundle}{pyodide_dir}pyodide.mjs",
    "packages": ["evermind-memory"],
    "index_urls": ["{bundle}simple"]
  }}'>
import json
import evermind
from evermind.tokenizer import Tokenizer
from pyscript import window

tokenizer = Tokenizer.train({text!r}, 280)
ids = tokenizer.encode({sample!r})
window.evermindResult = json.dumps(
    {{"version": evermind.__version__, "ids": ids, "decoded": tokenizer.decode(ids)}}
)
</script>
"""


def test_a_page_of_another_origin_installs_evermind_through_the_packages_config(
    browser: Any, served: BundleServer, bundle_dir: Path, tmp_path: Path
) -> None:
    """PyScript's own ``packages`` + ``index_urls`` config, with the bundle's full URL."""
    info = json.loads((bundle_dir / "build-info.json").read_text())
    (tmp_path / "host.html").write_text(
        HOST_PAGE.format(
            bundle=served.url,
            pyscript_dir=info["pyscript_dir"],
            pyodide_dir=info["pyodide_dir"],
            text=HOST_TEXT,
            sample=HOST_SAMPLE,
        )
    )
    with BundleServer(tmp_path) as host:
        run = PyScriptRun(browser, [served.url, host.url])
        try:
            result = run.open(host.url + "host.html")
            assert run.blocked == [], f"requests left loopback: {run.blocked[:10]}"
            run.rec.assert_offline()
            assert f"{served.url}simple/evermind-memory/" in run.rec.requests
            assert served.url + info["wheel"] in run.rec.requests
        finally:
            run.rec.close()
    assert result["version"] == evermind.__version__
    assert result["decoded"] == HOST_SAMPLE
    assert result["ids"] == Tokenizer.train(HOST_TEXT, 280).encode(HOST_SAMPLE)


def test_after_the_studio_the_page_runs_offline_from_the_service_worker(
    browser: Any, bundle_dir: Path
) -> None:
    """The Studio's service worker covers the bundle's folder: once the PyScript page has been
    opened under it, it runs again with the network off (PyScript, Pyodide, the index and
    the wheel all from Cache Storage)."""
    with BundleServer(bundle_dir) as srv:
        run = PyScriptRun(browser, [srv.url], route=False)
        try:
            rec = run.rec
            rec.page.goto(srv.url + "index.html")
            rec.page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
            # A first visit: the worker installs and takes control, then caches the boot set.
            assert rec.page.evaluate("window.__serviceWorker") == "installed"
            rec.page.wait_for_function("window.__bootCached !== undefined", timeout=BOOT_TIMEOUT_MS)
            first = run.open(srv.url + PAGE)
            srv.reset_counts()
            rec.context.set_offline(True)
            rec.page.evaluate("delete window.evermindResult")
            again = run.open(srv.url + PAGE)
            rec.context.set_offline(False)
            assert srv.bytes_sent() == {}, "the offline visit reached the server"
            rec.assert_offline()
        finally:
            run.rec.close()
    assert again["losses"] == first["losses"] and again["sample_ids"] == first["sample_ids"]
