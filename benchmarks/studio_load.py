"""How fast the Studio page boots, and how many bytes it costs: first visit, repeat, offline.

Serves a built bundle with ``evermind.studio.webserver`` (or, with ``--server-module``, the
``webserver.py`` of another checkout, e.g. main's, for a before/after comparison) and opens
``index.html`` in headless Chromium with a fresh profile per run:

- **cold**: a fresh profile (nothing cached, no service worker), time to ``window.__done``;
- **warm**: a second visit in the same profile (a new tab, not a reload);
- **offline**: a third visit with the network off (``context.set_offline(True)``).

Bytes are counted at the server's socket (headers and bodies, all requests of the visit,
including the service worker's own fetches), so they are what the network carried whether
the page, its worker or the service worker asked.

Usage: ``python benchmarks/studio_load.py [--dir dist/web] [--runs 3]
[--baseline-dir ../main/dist/web
--baseline-server-module ../main/src/evermind/studio/webserver.py]`` (a baseline is
measured in alternation with this bundle, so both see the same machine load).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from evermind.studio.browser import launch_options

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_MS = 180_000


class CountingSocket:
    """A socket proxy that adds every byte sent to a shared counter."""

    def __init__(self, sock: Any, counter: list[int], lock: threading.Lock) -> None:
        self._sock = sock
        self._counter = counter
        self._lock = lock

    def sendall(self, data: Any, *args: Any) -> None:
        self._sock.sendall(data, *args)
        with self._lock:
            self._counter[0] += len(data)

    def send(self, data: Any, *args: Any) -> int:
        sent = int(self._sock.send(data, *args))
        with self._lock:
            self._counter[0] += sent
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def serve(bundle: Path, server_module: Path | None) -> tuple[Any, list[int]]:
    """Starts a BundleServer (this checkout's or the named module's) that counts bytes."""
    if server_module is None:
        from evermind.studio import webserver as module
    else:
        spec = importlib.util.spec_from_file_location("other_webserver", server_module)
        assert spec and spec.loader, server_module
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    server = module.BundleServer(bundle)
    counter = [0]
    lock = threading.Lock()
    finish = server.httpd.finish_request
    server.httpd.finish_request = lambda request, address: finish(
        CountingSocket(request, counter, lock), address
    )
    return server.start(), counter


def visit(context: Any, url: str) -> dict[str, Any]:
    page = context.new_page()
    start = time.perf_counter()
    try:
        page.goto(url)
        page.wait_for_function("window.__done === true", timeout=TIMEOUT_MS)
    except Exception as err:  # offline without a service worker: the page never loads
        page.close()
        return {"ok": False, "error": str(err).splitlines()[0], "s": float("nan"), "sw": "none"}
    seconds = time.perf_counter() - start
    result = page.evaluate("window.__evermind")
    timings = {k: result.get(k) for k in ("python_ready_ms", "device_ready_ms", "restored_ms")}
    # The worker's own split of Python's start (see web/worker.js).
    boot = result.get("boot") or {}
    timings.update(
        {k: boot.get(k) for k in ("python_ms", "module_ms", "install_ms", "import_ms", "snapshot")}
    )
    sw = page.evaluate("window.__serviceWorker || 'none'")
    if sw != "none":  # let the service worker finish caching the boot set
        page.wait_for_function("window.__bootCached !== undefined", timeout=TIMEOUT_MS)
    # As a tab left open would: the worker stores its Python snapshot for the next visit.
    page.wait_for_function("window.__snapshotMade === true", timeout=TIMEOUT_MS)
    page.close()
    return {
        "ok": bool(result.get("ok")),
        "error": result.get("error"),
        "s": seconds,
        "sw": sw,
        **timings,
    }


def run_once(p: Any, url: str, counter: list[int]) -> dict[str, Any]:
    options = launch_options(p)
    with tempfile.TemporaryDirectory(prefix="evermind-profile-") as profile:
        context = p.chromium.launch_persistent_context(profile, **options)
        try:
            out: dict[str, Any] = {}
            for name in ("cold", "warm", "offline"):
                if name == "offline":
                    context.set_offline(True)
                before = counter[0]
                out[name] = visit(context, url)
                out[name]["bytes"] = counter[0] - before
            return out
        finally:
            context.close()


def summarise(label: str, runs: list[dict[str, Any]]) -> None:
    for name in ("cold", "warm", "offline"):
        seconds = [r[name]["s"] for r in runs if r[name]["ok"]] or [float("nan")]
        megabytes = [r[name]["bytes"] / 1e6 for r in runs]
        ok = sum(r[name]["ok"] for r in runs)
        print(
            f"{label:8s} {name:8s} ready median {statistics.median(seconds):.1f} s "
            f"(min {min(seconds):.1f}, max {max(seconds):.1f}); "
            f"transferred median {statistics.median(megabytes):.3f} MB; ok {ok}/{len(runs)}"
        )
        parts = []
        for key in (
            "python_ms",
            "module_ms",
            "install_ms",
            "import_ms",
            "device_ready_ms",
            "restored_ms",
        ):
            values = [r[name][key] for r in runs if r[name]["ok"] and r[name].get(key) is not None]
            if values:
                parts.append(f"{key} {statistics.median(values):.0f}")
        if parts:
            print(f"{'':8s} {'':8s} medians (ms): " + ", ".join(parts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(ROOT / "dist" / "web"), help="built bundle")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server-module", type=Path, help="another checkout's webserver.py")
    parser.add_argument("--baseline-dir", help="a second bundle, measured in alternation")
    parser.add_argument("--baseline-server-module", type=Path, help="the baseline's server")
    parser.add_argument("--json", type=Path, help="also write the runs here")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    variants = {"this": (Path(args.dir), args.server_module)}
    if args.baseline_dir:
        variants["baseline"] = (Path(args.baseline_dir), args.baseline_server_module)
    servers = {label: serve(*spec) for label, spec in variants.items()}
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in variants}
    try:
        with sync_playwright() as p:
            for i in range(args.runs):
                for label, (server, counter) in servers.items():  # alternate: same load
                    run = run_once(p, server.url + "index.html", counter)
                    runs[label].append(run)
                    print(
                        f"{label} run {i + 1}: "
                        + "  ".join(
                            f"{k} {v['s']:.1f} s (python ready {v.get('python_ready_ms')} ms: "
                            f"pyodide {v.get('python_ms')} (module {v.get('module_ms')}), "
                            f"wheel {v.get('install_ms')}, "
                            f"import {v.get('import_ms')}; device {v.get('device_ready_ms')}, "
                            f"restored {v.get('restored_ms')} ms; snapshot {v.get('snapshot')}) "
                            f"{v['bytes'] / 1e6:.3f} MB"
                            f"{'' if v['ok'] else ' FAILED: ' + str(v['error'])}"
                            for k, v in run.items()
                        ),
                        flush=True,
                    )
    finally:
        for server, _ in servers.values():
            server.close()
    for label, label_runs in runs.items():
        summarise(label, label_runs)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    this = runs["this"]
    return 0 if all(r["cold"]["ok"] and r["warm"]["ok"] for r in this) else 1


if __name__ == "__main__":
    sys.exit(main())
