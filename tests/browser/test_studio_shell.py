"""The Studio shell boots Pyodide in a worker, opens WebGPU from Python, and stays offline."""

from __future__ import annotations

from tests.browser.conftest import open_studio


def test_shell_reports_adapter_and_stays_offline(browser, server) -> None:
    rec = open_studio(browser, server)
    try:
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
    finally:
        rec.close()


def test_python_error_comes_back_in_words(browser, server) -> None:
    rec = open_studio(browser, server)
    try:
        message = rec.page.evaluate(
            "window.evermind.call('no_such_call')"
            ".then(() => 'resolved', e => e.name + ': ' + e.message)"
        )
        assert message.startswith("ConfigError: unknown studio call 'no_such_call'")
        rec.assert_offline()
    finally:
        rec.close()
