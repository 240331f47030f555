"""`make demo`: the main job on the embedded default, end to end on this machine.

Today it boots the Studio bundle in headless Chromium (WebGPU; SwiftShader without a GPU),
opens the device from Python in the tab, and prints the adapter and boot timings. As the
training, export and runtime issues land it grows into: train on the default corpus,
export, push, query.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    from playwright.sync_api import sync_playwright

    from evermind.headless import launch_options
    from evermind.webserver import BundleServer

    with BundleServer(ROOT / "dist" / "web") as server, sync_playwright() as p:
        browser = p.chromium.launch(**launch_options(p))
        page = browser.new_page()
        start = time.perf_counter()
        print(f"Studio at {server.url} (headless Chromium)", flush=True)
        page.goto(server.url + "index.html")
        page.wait_for_function("window.__done === true", timeout=180_000)
        result = page.evaluate("window.__evermind")
        browser.close()
    if not result.get("ok"):
        print(f"error: the Studio did not start: {result.get('error')}", file=sys.stderr)
        return 1
    device = result["device"]
    adapter = device["adapter"]
    print(
        "WebGPU adapter : "
        + " ".join(filter(None, (adapter["vendor"], adapter["architecture"], adapter["device"])))
    )
    print(f"Python in tab  : {device['python']} (Pyodide {result['boot']['pyodide']})")
    print(f"Python ready   : {result['python_ready_ms'] / 1000:.2f} s")
    print(f"Device ready   : {result['device_ready_ms'] / 1000:.2f} s")
    print(f"demo finished in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
