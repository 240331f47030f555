"""The Studio without WebGPU: a banner instead of a dead page, and everything but training works.

Chromium is launched WITHOUT ``--enable-unsafe-webgpu``: ``navigator.gpu`` exists but
``requestAdapter()`` resolves to null (the issue's ``'JsNull' object has no attribute
'requestDevice'``). A second page also has no ``navigator.gpu`` at all, in the page (an init
script) and in the worker (the worker script is served with a line that removes it), as in
browsers without WebGPU. Data → tokenizer → memory recall (lexical) → cache run through the
panels; a package built natively is opened in the tab, generates and embeds on the CPU path exactly
as the native numpy model does, and exports; one opened from the Try panel's file input
generates and compares there, and Memory and Cache then rank by its CPU embeddings.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from evermind.model.inference import load
from tests.browser.conftest import BOOT_TIMEOUT_MS, ROOT, RecordedPage, show, wait_text
from tests.factories import tiny_package

TIMEOUT_MS = 180_000
SHOTS = ROOT / "test-results" / "nogpu"
#: Removes WebGPU from a worker's navigator, as in a browser without it.
NO_GPU_IN_WORKER = "delete WorkerNavigator.prototype.gpu;\n"


@pytest.fixture(scope="module")
def nogpu_browser(playwright: object) -> Iterator[object]:
    """A second Chromium, from the package's one Playwright driver, without WebGPU."""
    from evermind.studio.browser import launch_options

    options = launch_options(playwright)
    options["args"] = [a for a in options["args"] if a != "--enable-unsafe-webgpu"]
    b = playwright.chromium.launch(**options)  # type: ignore[attr-defined]
    yield b
    b.close()


def boot(rec: RecordedPage, server: object) -> dict:
    rec.page.goto(server.url + "index.html")  # type: ignore[attr-defined]
    try:
        rec.page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
    except Exception:
        print("console:\n" + "\n".join(rec.console))
        raise
    result: dict = rec.page.evaluate("window.__evermind")
    return result


@pytest.fixture(scope="module")
def studio(nogpu_browser, server) -> Iterator[RecordedPage]:
    rec = RecordedPage(nogpu_browser)
    rec.page.set_viewport_size({"width": 1280, "height": 800})
    result = boot(rec, server)
    assert result["ok"], f"studio failed to boot without WebGPU: {result}\n" + "\n".join(
        rec.console
    )
    rec.page.evaluate("window.evermind.call('session_clear')")
    yield rec
    rec.close()


def assert_banner(rec: RecordedPage) -> None:
    page = rec.page
    banner = page.locator("#no-gpu-banner")
    assert banner.is_visible()
    text = banner.inner_text()
    major = re.search(r"Chrome/(\d+)", page.evaluate("navigator.userAgent"))
    assert major, "a Chromium user agent"
    assert f"Chrome {major.group(1)}" in text, text  # the browser, named from its user agent
    # What to enable: the words of web/ui/errors.js's NoAdapterError.
    assert "--enable-unsafe-webgpu" in text and "Safari 26+" in text, text
    assert "training is off" in text
    body = page.locator("#studio").inner_text()
    assert "Failed to start" not in body and "JsNull" not in body, body
    assert page.locator("#status-pill").inner_text() == "ready · cpu only"


def test_banner_names_the_browser_and_training_says_why_it_is_off(studio: RecordedPage) -> None:
    page = studio.page
    assert_banner(studio)
    facts = page.evaluate("window.__evermind.device")
    assert facts["gpu"] is False and facts["transport"] == "cpu"
    assert facts["gpu_error"]["type"] == "NoAdapterError"
    assert "requestAdapter() returned null" in facts["gpu_error"]["message"]
    show(studio, "train")
    start = page.locator("#train-start")
    assert start.is_disabled()
    # The reason is beside the button (its hint), not only in a tooltip.
    hint = page.locator("#panel-train .gate-hint", has_text="Training needs WebGPU")
    assert hint.count() >= 1 and hint.first.is_visible()
    # The progress card names no adapter it does not have.
    assert "GPU: none (training is off)" in page.locator("#panel-train").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "train-without-webgpu.png"))


def test_data_tokenizer_memory_and_cache_work_without_a_gpu(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "data")
    page.fill("#panel-data input[name=paste-name]", "notes.txt")
    page.fill(
        "#panel-data textarea[name=paste-text]",
        "The user writes Python and likes short answers. " * 20
        + "Agents keep their memories in the browser and recall them by meaning. " * 20,
    )
    page.locator("#panel-data button", has_text="Add pasted text").click()
    wait_text(studio, "#panel-data .sources", r"notes\.txt")
    assert page.locator("#step-data").get_attribute("data-status") == "done"

    show(studio, "tokenizer")
    page.fill("#panel-tokenizer input[name=vocab-size]", "300")
    page.click("#tokenizer-train")
    wait_text(studio, "#panel-tokenizer .message", r"Trained")
    assert page.locator("#step-tokenizer").get_attribute("data-status") == "done"
    show(studio, "train")
    assert page.locator("#train-start").is_disabled()  # still: a tokenizer is not a GPU

    show(studio, "memory")
    page.fill("#panel-memory input[name=memory-key]", "user.language")
    page.fill("#panel-memory textarea[name=memory-content]", "The user writes Python code.")
    page.click("#memory-remember")
    wait_text(studio, "#memory-list", r"user\.language")
    page.fill("#panel-memory input[name=memory-query]", "which language does the user write")
    page.click("#memory-recall")
    hits = wait_text(studio, "#memory-hits", r"user\.language")
    assert "Ranked by shared words only" in hits, hits

    show(studio, "cache")
    page.fill("#panel-cache input[name=cache-store-query]", "convert 100 USD to EUR")
    page.fill("#panel-cache textarea[name=cache-store-response]", "About 92 EUR.")
    page.click("#cache-store")
    wait_text(studio, "#panel-cache .message", r"Stored")
    page.fill("#panel-cache input[name=cache-query]", "convert 100 USD to EUR")
    page.click("#cache-lookup")
    assert "About 92 EUR." in wait_text(studio, "#cache-verdict", r"Hit")


def test_an_opened_package_generates_on_the_cpu_and_exports(studio: RecordedPage) -> None:
    page = studio.page
    data = tiny_package()
    call = "([fn, kwargs]) => window.evermind.call(fn, kwargs)"
    opened = page.evaluate(call, ["package_load", {"data_b64": base64.b64encode(data).decode()}])
    assert opened["device"] == "cpu", opened
    options = {"max_new_tokens": 12, "temperature": 0.0, "seed": 0}
    generated = page.evaluate(call, ["generate", {"prompt": "The quick", **options}])
    assert generated["device"] == "cpu" and generated["tokens"] > 0, generated
    print("CPU generation in the tab:", generated["tokens_per_second"], "tokens/s")
    native = load(data).complete("The quick", max_new_tokens=12, temperature=0.0, seed=0)
    assert generated["text"] == native.text, (generated, native)

    texts = ["The quick brown fox.", "A memory is kept in the browser."]
    vectors = page.evaluate(call, ["embed", {"texts": texts}])["vectors"]
    expected = load(data).embed(texts)
    worst = max(
        abs(a - b)
        for got, want in zip(vectors, expected, strict=True)
        for a, b in zip(got, want, strict=True)
    )
    assert worst < 1e-4, worst

    exported = page.evaluate(call, ["export_package", {"name": "cpu-copy", "version": "0.2.0"}])
    package = base64.b64decode(exported["data_b64"])
    assert package[:2] == b"PK" and exported["ref"] == "evermind/cpu-copy:0.2.0"
    # The exported package holds the same weights: natively it generates the same text.
    again = load(package).complete("The quick", max_new_tokens=12, temperature=0.0, seed=0)
    assert again.text == native.text


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def open_from_the_try_panel(rec: RecordedPage, data: bytes, folder: Path) -> None:
    """Opens ``data`` through the Try panel's file input, as a user picks the file."""
    path = folder / "opened-0.3.0.evermind"
    path.write_bytes(data)
    show(rec, "try")
    rec.page.set_input_files("#try-open-package", str(path))
    facts = wait_text(rec, "#try-package", r"Opened evermind/opened:0\.3\.0")
    assert "on the CPU" in facts, facts
    assert rec.page.locator("#step-try .sub").inner_text() == "evermind/opened:0.3.0"


@pytest.fixture(scope="module")
def opened_package() -> bytes:
    """The package the Try panel opens (another seed than the API test's)."""
    return tiny_package(name="opened", version="0.3.0", seed=1)


def test_a_package_opened_from_the_ui_generates_and_compares_on_the_cpu(
    studio: RecordedPage, opened_package: bytes, tmp_path: Path
) -> None:
    page = studio.page
    data = opened_package
    open_from_the_try_panel(studio, data, tmp_path)

    # Generate, from the panel's own controls (greedy: the native model's exact text).
    assert page.locator("#try-generate").is_enabled()
    page.fill("#try-prompt", "The quick")
    page.fill("#panel-try input[name=temperature]", "0")
    page.fill("#panel-try input[name=max_new_tokens]", "10")
    page.click("#try-generate")
    wait_text(studio, "#try-generate-message", r"tokens at")
    native = load(data)
    expected = native.complete("The quick", max_new_tokens=10, temperature=0.0, seed=0).text
    assert page.locator("#try-output .generated").inner_text() == expected

    # Compare: the cosine the panel shows is the package's, as natively.
    a, b = "The quick brown fox.", "A lazy dog sleeps."
    page.fill("#panel-try textarea[name=sim-a]", a)
    page.fill("#panel-try textarea[name=sim-b]", b)
    page.click("#try-similarity")
    shown = wait_text(studio, "#try-cosine", r"^-?\d\.\d{3}$")
    want = cosine(*native.embed([a, b]))
    assert abs(float(shown) - want) <= 6e-4, (shown, want)

    # Evaluation has no CPU path: its button says why, beside it.
    assert page.locator("#try-evaluate").is_disabled()
    hint = page.locator("#panel-try .gate-hint", has_text="Evaluating needs WebGPU")
    assert hint.count() == 1 and hint.first.is_visible()
    # Export works on the opened package from the panel too.
    show(studio, "export")
    assert page.locator("#export-download").is_enabled()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "package-opened-without-webgpu.png"))


def test_memory_and_cache_rank_by_the_opened_packages_cpu_embeddings(
    studio: RecordedPage, opened_package: bytes, tmp_path: Path
) -> None:
    page = studio.page
    assert page.evaluate("window.__evermind.device.gpu") is False
    if page.locator("#step-try .sub").inner_text() != "evermind/opened:0.3.0":
        open_from_the_try_panel(studio, opened_package, tmp_path)  # run on its own
    native = load(opened_package)
    show(studio, "memory")
    memories = {
        "user.city": "The user lives in Lisbon, near the river.",
        "user.pet": "The user has a small dog called Rex.",
    }
    for key, content in memories.items():
        page.fill("#panel-memory input[name=memory-key]", key)
        page.fill("#panel-memory textarea[name=memory-content]", content)
        page.click("#memory-remember")
        wait_text(studio, "#memory-list", re.escape(key))
    query = "In which town does the user live?"
    page.fill("#panel-memory input[name=memory-query]", query)
    page.click("#memory-recall")
    hits = wait_text(studio, "#memory-hits", r"user\.city")
    assert "Ranked by meaning and shared words" in hits and "words only" not in hits, hits

    call = "([fn, kwargs]) => window.evermind.call(fn, kwargs)"
    recalled = page.evaluate(call, ["memory_recall", {"query": query, "top_k": 10}])
    assert recalled["ranked_by"].startswith("semantic"), recalled
    assert recalled["embedder"].startswith("the opened package on the CPU"), recalled
    by_key = {h["key"]: h for h in recalled["hits"]}
    (q,) = native.embed([query])
    for key, content in memories.items():
        (v,) = native.embed([content])
        got = by_key[key]["signals"]["cosine"]
        assert abs(got - cosine(q, v)) < 1e-4, (key, got, cosine(q, v))

    show(studio, "cache")
    page.fill("#panel-cache input[name=cache-store-query]", "how far is the moon from earth")
    page.fill("#panel-cache textarea[name=cache-store-response]", "About 384,400 km.")
    page.click("#cache-store")
    wait_text(studio, "#panel-cache .message", r"Stored")
    page.fill("#panel-cache input[name=cache-query]", "how far is the moon from the earth")
    page.click("#cache-lookup")
    # The panel still shows an earlier test's verdict ("About 92 EUR."): wait for this one.
    verdict = wait_text(studio, "#cache-verdict", r"384,400 km|Miss")
    assert "by meaning (this tab's model)" in verdict and "spelling only" not in verdict, verdict


def test_no_page_errors_and_nothing_left_loopback(studio: RecordedPage) -> None:
    studio.assert_offline()
    errors = [line for line in studio.console if line.startswith("pageerror")]
    assert not errors, errors


def test_without_navigator_gpu_at_all_the_page_boots_with_the_banner(nogpu_browser, server) -> None:
    rec = RecordedPage(nogpu_browser)
    try:
        rec.context.add_init_script("delete Navigator.prototype.gpu;")

        def strip_gpu(route: object) -> None:
            response = route.fetch()  # type: ignore[attr-defined]
            body = NO_GPU_IN_WORKER + response.text()
            route.fulfill(response=response, body=body)  # type: ignore[attr-defined]

        rec.context.route(re.compile(r"/worker(\.[0-9a-f]+)?\.js(\?.*)?$"), strip_gpu)
        result = boot(rec, server)
        assert result["ok"], f"{result}\n" + "\n".join(rec.console)
        assert rec.page.evaluate("'gpu' in navigator") is False
        facts = result["device"]
        assert facts["gpu"] is False
        assert "no navigator.gpu" in facts["gpu_error"]["message"], facts
        assert_banner(rec)
        errors = [line for line in rec.console if line.startswith("pageerror")]
        assert not errors, errors
    finally:
        rec.close()
