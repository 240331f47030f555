"""``evermind bench kernels | train | serve`` (native-only).

Collects the reports of :mod:`evermind.bench_report` (native wgpu-py and headless Chromium
in one run) and the runtime's load test (:mod:`evermind.runtime.bench`), and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from evermind.errors import EvermindError
from evermind.studio.bundle import ensure_bundle


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


def register(sub: Any) -> None:
    """Adds ``bench`` to the ``evermind`` command."""
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
