"""The Studio shell boots Pyodide in a worker, opens WebGPU from Python, and stays offline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import procs
from tests.browser.conftest import RecordedPage, open_studio


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    """One booted Studio page for the module (a boot is most of each test's time); every
    request it made since it was opened is recorded."""
    rec = open_studio(browser, server)
    yield rec
    rec.close()


def test_shell_reports_adapter_and_stays_offline(studio: RecordedPage) -> None:
    rec = studio
    result = rec.page.evaluate("window.__evermind")
    print(f"boot: {result}")
    assert result["ok"], f"studio failed to boot: {result.get('error')}\n{rec.console}"
    device = result["device"]
    assert device["transport"] == "browser"
    assert device["platform"] == "emscripten"
    assert device["python"].startswith("3.")
    adapter = device["adapter"]
    assert adapter["vendor"] or adapter["architecture"], f"adapter has no name: {adapter}"
    assert result["device_ready_ms"] >= result["python_ready_ms"] > 0
    # What a person sees: the adapter line and the ready pill.
    assert rec.page.locator("#status-pill").inner_text() == "ready"
    assert rec.page.locator("#fact-adapter").inner_text() not in ("", "–")
    assert any(u.endswith("pyodide.asm.wasm") for u in rec.requests)
    rec.assert_offline()


def test_python_error_comes_back_in_words(studio: RecordedPage) -> None:
    message = studio.page.evaluate(
        "window.evermind.call('no_such_call')"
        ".then(() => 'resolved', e => e.name + ': ' + e.message)"
    )
    assert message.startswith("ConfigError: unknown studio call 'no_such_call'")
    studio.assert_offline()


def test_cli_studio_serves_a_page_that_reports_an_adapter(browser) -> None:
    """`evermind studio --no-open` serves the bundle; headless Chromium gets a WebGPU adapter."""
    import re
    import subprocess
    import sys

    proc = procs.popen(
        [sys.executable, "-m", "evermind.cli", "studio", "--no-open", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = ""
        while "Evermind Studio:" not in line:
            line = proc.stdout.readline()
            assert line, f"evermind studio exited: {proc.stderr.read()[-2000:]}"
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        page = browser.new_page()
        page.goto(url)
        page.wait_for_function("window.__done === true", timeout=120_000)
        result = page.evaluate("window.__evermind")
        assert result["ok"] and result["device"]["adapter"]["vendor"]
        page.close()
    finally:
        procs.stop_group(proc, grace_s=10)
