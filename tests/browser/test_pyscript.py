"""A PyScript page (``web/examples/pyscript.html``) that imports evermind, on loopback only.

PyScript's ``<script type="py" config='…'>`` points its interpreter at the bundle's Pyodide
and installs ``evermind-memory`` with micropip from the bundle's PEP 503 index
(``simple/``). Every request that is not to the test's server is aborted and recorded, and
the test fails if there was one. The page trains a tokenizer (checked id for id against the
same training natively), trains a tiny model a few steps on WebGPU (SwiftShader here) and
embeds three sentences.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import evermind
from evermind.studio.webserver import BundleServer
from evermind.tokenizer import Tokenizer
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


@pytest.fixture(scope="module")
def visit(browser: Any, served: BundleServer) -> Iterator[dict[str, Any]]:
    """Opens the page once (fresh context: nothing cached) with non-loopback requests cut."""
    rec = RecordedPage(browser)
    origin = served.url.rstrip("/")
    blocked: list[str] = []

    def only_loopback(route: Any) -> None:
        url = route.request.url
        if url == origin or url.startswith(origin + "/"):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    rec.context.route("**/*", only_loopback)
    rec.context.add_init_script(RECORD_ERRORS)
    served.reset_counts()
    rec.page.goto(served.url + PAGE)
    try:
        rec.page.wait_for_function(DONE, timeout=BOOT_TIMEOUT_MS)
    except Exception:
        print("console:\n" + "\n".join(rec.console[-40:]))
        raise
    error = rec.page.evaluate(ERROR)
    assert error is None, f"PyScript failed: {error}\n" + "\n".join(rec.console[-40:])
    result = json.loads(rec.page.evaluate("window.evermindResult"))
    yield {
        "result": result,
        "rec": rec,
        "blocked": blocked,
        "bytes": served.bytes_sent(),
        "log": rec.page.locator("#log").inner_text(),
    }
    rec.close()


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


def test_a_few_webgpu_steps_lower_the_loss(visit: dict[str, Any]) -> None:
    result = visit["result"]
    assert result["gpu"], "this browser is launched with WebGPU; the page found none"
    losses = result["losses"]
    print("losses:", [round(x, 3) for x in losses])
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(result["vocab_size"]), abs=0.5)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1


def test_embeddings_are_unit_vectors_with_cosines_in_range(visit: dict[str, Any]) -> None:
    result = visit["result"]
    print({k: result[k] for k in ("dim", "norm", "similar", "unrelated", "seconds")})
    assert result["dim"] == 32
    assert result["norm"] == pytest.approx(1.0, abs=1e-6)
    for key in ("similar", "unrelated"):
        assert -1.0 <= result[key] <= 1.0
    assert result["similar"] != result["unrelated"]
