"""The ``evermind`` command: studio, doctor, bench and (as issues land) train, serve, push, mcp.

The CLI prints; library code logs. Every subcommand exits non-zero with a one-line
``error: ...`` on failure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import webbrowser
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import evermind
from evermind.errors import BundleError, EvermindError

CHECKOUT = Path(__file__).resolve().parents[2]
#: Modules that add subcommands through ``register(subparsers)``.
COMMAND_MODULES = [
    "evermind.train.commands",  # train, generate, embed, eval
    "evermind.runtime.commands",  # serve, push
    "evermind.mcp.commands",  # mcp, install-mcp
]
BUILD_SCRIPT = CHECKOUT / "build" / "build_web.py"
DEFAULT_BUNDLE = CHECKOUT / "dist" / "web"


def ensure_bundle(directory: Path | None = None) -> Path:
    """Returns the bundle folder, building ``dist/web`` first when it is stale.

    Raises:
        BundleError: No bundle exists and it cannot be built here.
    """
    if directory is not None:
        if not (directory / "index.html").is_file():
            raise BundleError(f"{directory} has no index.html; is it a built Studio bundle?")
        return directory
    if BUILD_SCRIPT.is_file():
        result = subprocess.run([sys.executable, str(BUILD_SCRIPT)], check=False)
        if result.returncode != 0:
            raise BundleError(f"building the bundle failed (exit {result.returncode}); see above")
    if not (DEFAULT_BUNDLE / "index.html").is_file():
        raise BundleError(
            f"no Studio bundle at {DEFAULT_BUNDLE}; run `make bundle` in a checkout or pass --dir"
        )
    return DEFAULT_BUNDLE


def cmd_studio(args: argparse.Namespace) -> int:
    from evermind.webserver import BundleServer

    bundle = ensure_bundle(Path(args.dir) if args.dir else None)
    server = BundleServer(bundle, host=args.host, port=args.port)
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

    from evermind.headless import launch_options
    from evermind.webserver import BundleServer

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
    result = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--check"], capture_output=True, check=False
    )
    state = "up to date" if result.returncode == 0 else "stale (rebuilt by `evermind studio`)"
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


def cmd_bench(args: argparse.Namespace) -> int:
    from evermind import bench_report

    if args.what == "serve":
        # The runtime's load test: requests/s and latency on loopback, vs PyTorch.
        from evermind.runtime import bench as serve_bench

        argv = ["--seconds", "1", "--clients", "1,8"] if args.quick else []
        return serve_bench.main([*argv, *(["--json"] if args.json else [])])
    if args.native_only and args.browser_only:
        raise EvermindError("bench: --native-only and --browser-only exclude each other")
    if args.cpu_threads < 1:
        raise EvermindError(f"bench: --cpu-threads must be >= 1, got {args.cpu_threads}")
    native, browser = not args.browser_only, not args.native_only
    bundle = None
    if browser:
        # The build's progress lines go to stderr so that --json prints JSON alone.
        sys.stdout.flush()
        saved_stdout = os.dup(1)
        os.dup2(2, 1)
        try:
            bundle = ensure_bundle(Path(args.dir) if args.dir else None)
        finally:
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
    doc: dict[str, Any]
    if args.what == "kernels":
        doc = bench_report.collect_kernels(args.quick, native, browser, bundle)
        lines = bench_report.format_kernels(doc)
    else:
        doc = bench_report.collect_train(args.quick, native, browser, bundle, args.cpu_threads)
        lines = bench_report.format_train(doc)
    print(json.dumps(doc) if args.json else "\n".join(lines))
    return 1 if doc["errors"] else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evermind",
        description="Evermind: train a small SSM memory in a browser tab and serve it to agents.",
    )
    parser.add_argument("--version", action="version", version=f"evermind {evermind.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    studio = sub.add_parser("studio", help="serve the Studio web app and open it in a browser")
    studio.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    studio.add_argument(
        "--port", type=int, default=8765, help="TCP port (default 8765; 0 = any free)"
    )
    studio.add_argument("--no-open", action="store_true", help="do not open a browser")
    studio.add_argument("--dir", help="serve this built bundle instead of the checkout's dist/web")
    studio.set_defaults(func=cmd_studio)

    doctor = sub.add_parser("doctor", help="report what works on this machine")
    doctor.set_defaults(func=cmd_doctor)

    bench = sub.add_parser(
        "bench",
        help="benchmark kernels or the model, native and in the browser in one run",
        description="Benchmarks: `kernels` (every WGSL kernel and the training step's share "
        "per kernel family) or `train` (tokens/s of training, forward and generation, and "
        "embedding latency, beside numpy and PyTorch). Runs native wgpu-py and headless "
        "Chromium in one run and prints them side by side.",
    )
    bench.add_argument(
        "what",
        choices=["kernels", "train", "serve"],
        help="kernels and train: native and browser in one run; serve: the runtime on loopback",
    )
    bench.add_argument("--quick", action="store_true", help="fewer sizes, steps and repeats")
    bench.add_argument("--json", action="store_true", help="print JSON instead of a table")
    bench.add_argument("--native-only", action="store_true", help="skip the browser")
    bench.add_argument("--browser-only", action="store_true", help="skip native wgpu-py")
    bench.add_argument("--dir", help="use this built bundle instead of the checkout's dist/web")
    bench.add_argument(
        "--cpu-threads",
        type=int,
        default=1,
        help="threads of the CPU references, PyTorch and numpy's BLAS (default 1: on a busy "
        "machine more threads spin against each other)",
    )
    bench.set_defaults(func=cmd_bench)

    # Subsystems register their own subcommands (each module: ``register(subparsers)``);
    # they import their heavy dependencies inside the command functions, not at import.
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evermind`` console script."""
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        code: Any = args.func(args)
    except EvermindError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted after {time.perf_counter() - start:.1f} s", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
