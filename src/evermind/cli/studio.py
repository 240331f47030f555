"""``evermind studio`` and ``evermind doctor`` (native-only).

``studio`` serves the built Studio bundle on loopback and opens it; ``doctor`` reports
which parts work on this machine (native GPU, Chromium with WebGPU, the bundle).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any

import evermind
from evermind.cli.args import folder
from evermind.errors import EvermindError
from evermind.studio.bundle import BUILD_SCRIPT, DEFAULT_BUNDLE, bundle_is_current, ensure_bundle


def cmd_studio(args: argparse.Namespace) -> int:
    from evermind.studio.webserver import BundleServer, parse_origins

    origins = parse_origins(args.allow_origin)
    bundle = ensure_bundle(Path(args.dir) if args.dir else None)
    server = BundleServer(bundle, host=args.host, port=args.port, allow_origins=origins)
    print(f"Evermind Studio: {server.url}  (serving {bundle}; Ctrl-C to stop)", flush=True)
    if not args.no_open:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _check(name: str, probe: Callable[[], str]) -> tuple[str, bool, str]:
    try:
        return name, True, probe()
    except Exception as err:  # doctor reports every failure in words
        return name, False, f"{type(err).__name__}: {err}"


def _native_gpu() -> str:
    from evermind.gpu.native import open_native_device

    info = open_native_device().adapter_info
    kind = info["adapter_type"] or "unknown type"
    return f"{info['device'] or info['vendor']} ({info['backend']}, {kind})"


def _browser_webgpu() -> str:
    from playwright.sync_api import sync_playwright

    from evermind.studio.browser import launch_options
    from evermind.studio.webserver import BundleServer

    with sync_playwright() as p:
        options = launch_options(p)
        browser = p.chromium.launch(**options)
        try:
            with tempfile.TemporaryDirectory() as empty, BundleServer(empty) as server:
                page = browser.new_page()
                page.goto(server.url + "__doctor__", wait_until="commit")
                info = page.evaluate(
                    """async () => {
                        if (!navigator.gpu) return null;
                        const a = await navigator.gpu.requestAdapter();
                        return a ? [a.info.vendor, a.info.architecture].join(" ") : null;
                    }"""
                )
        finally:
            browser.close()
    exe = options.get("executable_path", "Playwright's Chromium")
    if not info:
        raise EvermindError(f"{exe} started but WebGPU returned no adapter")
    return f"{exe}: WebGPU adapter {info}"


def _bundle() -> str:
    if not BUILD_SCRIPT.is_file():
        return "not a checkout; pass --dir to `evermind studio`"
    state = "up to date" if bundle_is_current() else "stale (rebuilt by `evermind studio`)"
    return f"{DEFAULT_BUNDLE}: {state}"


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = [
        ("python", True, f"{platform.python_version()} ({sys.executable})"),
        ("evermind", True, evermind.__version__),
        _check("native GPU (wgpu-py)", _native_gpu),
        _check("Chromium with WebGPU", _browser_webgpu),
        _check("Studio bundle", _bundle),
    ]
    width = max(len(name) for name, _, _ in checks)
    for name, ok, detail in checks:
        print(f"{'ok ' if ok else 'NO '} {name:<{width}}  {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


def register(sub: Any) -> None:
    """Adds ``studio`` and ``doctor`` to the ``evermind`` command."""
    studio = sub.add_parser("studio", help="serve the Studio web app and open it in a browser")
    studio.add_argument("--host", default="127.0.0.1", help="interface to bind")
    studio.add_argument(
        "--port", type=int, default=8765, help="TCP port (default: 8765; 0 = any free)"
    )
    studio.add_argument("--no-open", action="store_true", help="do not open a browser")
    studio.add_argument(
        "--dir", type=folder, help="serve this built bundle instead of the checkout's dist/web"
    )
    studio.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="origin whose pages may embed <evermind-studio> from this server (repeatable; "
        "'*' any, the default; 'none' no CORS headers)",
    )
    studio.set_defaults(func=cmd_studio)

    doctor = sub.add_parser("doctor", help="report what works on this machine")
    doctor.set_defaults(func=cmd_doctor)
