"""``evermind bench kernels|train``: both transports in one run, printed side by side.

Native-only (numpy, wgpu-py, Playwright through :mod:`benchmarks.host`). Two reports:

- kernels: every kernel row of :func:`evermind.studio.bench.suite.run_kernel_suite` on
  native wgpu-py and in the browser, beside numpy's matmul GFLOP/s (the CPU roofline),
  then the share of the nano training step each kernel family and each phase takes on both;
- train: training / forward / generation tokens/s and the 64-token embedding latency of
  the nano model on the browser, native wgpu-py, the numpy CPU model and the PyTorch
  reference, with every value's ratio to PyTorch's.

:func:`collect_kernels` / :func:`collect_train` return a JSON-able document (``--json``
prints it); :func:`format_kernels` / :func:`format_train` turn it into table lines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import host
from evermind.errors import EvermindError
from evermind.studio.bench import suite
from evermind.studio.bundle import ensure_bundle

log = logging.getLogger(__name__)

#: The checkout this package sits in, its bundle build and the bundle it builds.
ROOT = Path(__file__).resolve().parents[1]

#: The transports, in column order.
TRANSPORTS = ("native", "browser")
#: The model benchmark's backends, in row order, and the metrics, in column order.
BACKENDS = ("browser", "native", "numpy", "torch")
METRICS = (
    ("train_tokens_per_s", "train tok/s"),
    ("forward_tokens_per_s", "forward tok/s"),
    ("generate_tokens_per_s", "generate tok/s"),
    ("embed_64_ms", "embed 64 tok ms"),
)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    with contextlib.suppress(OSError):  # not on every OS
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


# -- kernels --------------------------------------------------------------------------------
def collect_kernels(
    quick: bool, native: bool, browser: bool, bundle: Path | None
) -> dict[str, Any]:
    """Runs the kernel suite on the chosen transports and merges the rows.

    Args:
        quick: Fewer shapes and repeats.
        native: Run on wgpu-py here.
        browser: Run in headless Chromium (needs ``bundle``).
        bundle: The built Studio bundle for the browser run.

    Returns:
        ``{"bench": "kernels", "quick", "machine", "transports": {key: {transport,
        adapter}}, "kernels": [merged rows], "step": [merged rows], "errors": [...]}``.
    """
    suites: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    if native:
        suites["native"] = asyncio.run(suite.run_kernel_suite(quick))
    if browser:
        try:
            if bundle is None:
                raise EvermindError("the browser run needs a built bundle (dist/web)")
            (suites["browser"],) = host.run_in_browser(
                bundle, [("bench_kernels", {"quick": quick})]
            )
        except EvermindError as err:
            errors.append(f"browser: {err}")
    numpy_rows = {row["shape"]: row["gflops"] for row in host.numpy_matmul_rows(quick)}
    kernels = _merge(suites, "kernels", ("kernel", "shape"), ("ms", "gflops", "gbps"))
    for row in kernels:
        row["unit"] = None
        for key in TRANSPORTS:
            row.setdefault(f"{key}_ms", None)
            gflops, gbps = row.pop(f"{key}_gflops", None), row.pop(f"{key}_gbps", None)
            row[f"{key}_rate"] = gflops if gflops is not None else gbps
            if gflops is not None or gbps is not None:
                row["unit"] = "GFLOP/s" if gflops is not None else "GB/s"
        is_matmul = row["kernel"].startswith("matmul")
        row["numpy_gflops"] = numpy_rows.get(row["shape"]) if is_matmul else None
    step = _merge(suites, "step", ("group", "name"), ("dispatches", "ms", "net_ms", "share"))
    for row in step:
        counts = [row.pop(f"{k}_dispatches") for k in TRANSPORTS if f"{k}_dispatches" in row]
        row["dispatches"] = counts[0] if counts else None
        for key in TRANSPORTS:
            for field in ("ms", "net_ms", "share"):
                row.setdefault(f"{key}_{field}", None)
    return {
        "bench": "kernels",
        "quick": quick,
        "machine": machine(),
        "transports": {
            key: {"transport": suite["transport"], "adapter": suite["adapter"]}
            for key, suite in suites.items()
        },
        "kernels": kernels,
        "step": step,
        "errors": errors,
    }


def _merge(
    suites: dict[str, dict[str, Any]],
    part: str,
    keys: tuple[str, ...],
    values: tuple[str, ...],
) -> list[dict[str, Any]]:
    """Joins each transport's rows on ``keys``; values become ``<transport>_<value>``."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for transport in TRANSPORTS:
        for row in suites.get(transport, {}).get(part, []):
            key = tuple(row[k] for k in keys)
            out = merged.setdefault(key, {k: row[k] for k in keys})
            for value in values:
                if value in row:
                    out[f"{transport}_{value}"] = row[value]
    return list(merged.values())


def _num(value: float | None, digits: int = 2) -> str:
    """A measured value for a table cell (JSON may have turned 532.0 into 532)."""
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]], left: int = 2) -> list[str]:
    """Aligned columns: the first ``left`` left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def format_kernels(doc: dict[str, Any]) -> list[str]:
    """The kernel document as printable lines: the kernel table, then the step shares."""
    out = [_heading("kernels", doc)]
    shown = [key for key in TRANSPORTS if key in doc["transports"]]
    header = ["kernel", "shape", "unit"]
    for key in shown:
        header += [f"{key} ms", f"{key} rate"]
    header.append("numpy GFLOP/s")
    rows = []
    for row in doc["kernels"]:
        cells = [row["kernel"], row["shape"], row["unit"] or ""]
        for key in shown:
            cells += [_num(row[f"{key}_ms"]), _num(row[f"{key}_rate"])]
        cells.append(_num(row["numpy_gflops"]))
        rows.append(cells)
    out += _table(header, rows, left=3)
    if doc["step"]:
        out += ["", "Nano training step (B 4, L 128, vocab 2048) by kernel family and phase:"]
        header = ["group", "name", "dispatches"]
        for key in shown:
            header += [f"{key} ms", f"{key} share"]
        rows = []
        for row in doc["step"]:
            count = row["dispatches"]
            cells = [row["group"], row["name"], "-" if count is None else str(count)]
            for key in shown:
                share = row[f"{key}_share"]
                whole = row["group"] in ("step", "sync") or share is None
                cells += [_num(row[f"{key}_ms"]), "" if whole else f"{share:.1%}"]
            rows.append(cells)
        out += _table(header, rows, left=2)
        for key in shown:
            sums = {
                group: sum(r[f"{key}_ms"] or 0.0 for r in doc["step"] if r["group"] == group)
                for group in ("step", "family", "phase")
            }
            out.append(
                f"{key}: the family rows add up to {sums['family']:,.1f} ms and the phase rows "
                f"to {sums['phase']:,.1f} ms, against {sums['step']:,.1f} ms for the whole step "
                "(the gap is noise and per-submit overhead)."
            )
        out.append(
            "ms: one submit of the group's dispatches + sync (median); share: the group's ms "
            "minus the sync row, over the sum of its kind (families sum to 100 %, phases too)."
        )
    return out + _errors(doc)


def _heading(what: str, doc: dict[str, Any]) -> str:
    m = doc["machine"]
    adapters = "; ".join(
        f"{key}: {t['transport']} on {t['adapter']}" for key, t in doc["transports"].items()
    )
    quick = " --quick" if doc["quick"] else ""
    return (
        f"evermind bench {what}{quick} — {m['date']}, {m['platform']}, {m['cpus']} CPUs, "
        f"load {m.get('load_average', '?')}\n{adapters or 'no GPU transport'}\n"
    )


def _errors(doc: dict[str, Any]) -> list[str]:
    return [f"error: {e}" for e in doc.get("errors", [])]


# -- the model ------------------------------------------------------------------------------
def collect_train(
    quick: bool, native: bool, browser: bool, bundle: Path | None, cpu_threads: int
) -> dict[str, Any]:
    """Runs the model benchmark on every backend and computes the ratios to PyTorch.

    Args:
        quick: Fewer steps and tokens.
        native: Include native wgpu-py.
        browser: Include the browser (needs ``bundle``).
        bundle: The built Studio bundle.
        cpu_threads: Threads of the two CPU references: torch's intra-op threads and
            numpy's BLAS threads (the same number, so that they compare fairly).

    Returns:
        ``{"bench": "train", "quick", "machine", "backends": {key: label}, "rows":
        [{"backend", "metric", "value", "unit", "detail", "vs_torch"}], "errors"}``;
        ``vs_torch`` > 1 means faster than PyTorch (for the latency, PyTorch's ms over ours).
    """
    backends: dict[str, str] = {}
    results: dict[str, list[dict[str, Any]]] = {}
    errors: list[str] = []
    if browser:
        try:
            if bundle is None:
                raise EvermindError("the browser run needs a built bundle (dist/web)")
            (done,) = host.run_in_browser(bundle, [("bench_train", {"quick": quick})])
            backends["browser"] = f"browser WebGPU ({done['adapter']})"
            results["browser"] = done["rows"]
        except EvermindError as err:
            errors.append(f"browser: {err}")
    if native:
        done = asyncio.run(suite.run_model_suite(quick))
        backends["native"] = f"native {done['transport']} ({done['adapter']})"
        results["native"] = done["rows"]
    threads = f"{cpu_threads} thread{'s' * (cpu_threads > 1)}"
    backends["numpy"] = f"numpy CPU model ({threads})"
    results["numpy"] = host.numpy_model_bench(quick, cpu_threads)
    if host.torch_available():
        backends["torch"] = f"PyTorch CPU ({threads})"
        results["torch"] = host.torch_model_bench(quick, cpu_threads)
    else:
        errors.append("torch: not installed (pip install torch transformers); no ratios")
    reference = {row["metric"]: row["value"] for row in results.get("torch", [])}
    rows = []
    for key in BACKENDS:
        for row in results.get(key, []):
            ref = reference.get(row["metric"])
            ratio = None
            if ref and row["value"]:
                latency = row["unit"] == "ms"
                ratio = round(ref / row["value"] if latency else row["value"] / ref, 3)
            rows.append({"backend": key, **row, "vs_torch": ratio})
    return {
        "bench": "train",
        "quick": quick,
        "machine": machine(),
        "backends": backends,
        "rows": rows,
        "errors": errors,
    }


def format_train(doc: dict[str, Any]) -> list[str]:
    """The model document as printable lines: values, then ratios to PyTorch."""
    m = doc["machine"]
    quick = " --quick" if doc["quick"] else ""
    out = [
        f"evermind bench train{quick} — {m['date']}, {m['platform']}, {m['cpus']} CPUs, "
        f"load {m.get('load_average', '?')}",
        "nano preset, B 4, L 128, vocab 2048; seed-0 weights; synthetic skewed token ids",
        "",
    ]
    by_key = {(r["backend"], r["metric"]): r for r in doc["rows"]}
    header = ["backend", *(label for _, label in METRICS)]
    for suffix, pick in (("", "value"), (" (× PyTorch; > 1 is faster)", "vs_torch")):
        rows = []
        for key, label in doc["backends"].items():
            cells = [label]
            for metric, _ in METRICS:
                row = by_key.get((key, metric))
                cells.append(_num(row[pick] if row else None))
            rows.append(cells)
        if suffix:
            out += ["", "Ratios" + suffix + ":"]
        out += _table(header, rows, left=1)
    return out + _errors(doc)


# -- the command ------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The options of ``evermind bench``."""
    parser = argparse.ArgumentParser(
        prog="evermind bench",
        description="Benchmarks: `kernels` (every WGSL kernel and the training step's share "
        "per kernel family) or `train` (tokens/s of training, forward and generation, and "
        "embedding latency, beside numpy and PyTorch). Runs native wgpu-py and headless "
        "Chromium in one run and prints them side by side. `serve`: the runtime on loopback. "
        "`gateway`: the caching gateway replayed against a loopback upstream. `vectorstore`: "
        "the embedded store and Postgres + pgvector at scale (`bench vectorstore --help`). "
        "`blocks`: block types at equal parameter count, held-out loss and tokens/s per "
        "transport (`bench blocks --help`).",
    )
    parser.add_argument(
        "what",
        choices=["kernels", "train", "serve", "gateway", "vectorstore", "blocks"],
        help="kernels and train: native and browser in one run; serve: the runtime on "
        "loopback; gateway: the caching gateway's replay (hit rate, savings, overhead)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes, steps and repeats")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--native-only", action="store_true", help="skip the browser")
    parser.add_argument("--browser-only", action="store_true", help="skip native wgpu-py")
    parser.add_argument("--dir", help="use this built bundle instead of the checkout's dist/web")
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=1,
        help="threads of the CPU references, PyTorch and numpy's BLAS (default 1: on a busy "
        "machine more threads spin against each other)",
    )
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parses ``evermind bench`` options, runs the benchmark, prints it; returns the status.

    Exit status 1 when a part failed (the document's ``errors``), 0 otherwise.

    Raises:
        EvermindError: Conflicting options, or no bundle for the browser run.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["vectorstore"]:
        # Its own options (--n, --dim, --engines, ...): every word after it goes on.
        from benchmarks import vectorstore_scale

        return vectorstore_scale.main(words[1:])
    if words[:1] == ["blocks"]:
        # Its own options (--steps, --transports, ...): every word after it goes on.
        from benchmarks import blocks

        return blocks.main(words[1:])
    args = build_parser().parse_args(argv)
    if args.what == "serve":
        # The runtime's load test: requests/s and latency on loopback, vs PyTorch.
        from benchmarks import serve

        serve_argv = ["--seconds", "1", "--clients", "1,8"] if args.quick else []
        return serve.main([*serve_argv, *(["--json"] if args.json else [])])
    if args.what == "gateway":
        # The caching gateway: hit rate, savings, wrong answers, overhead on a miss.
        from benchmarks import gateway

        return gateway.main(
            [*(["--quick"] if args.quick else []), *(["--json"] if args.json else [])]
        )
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
        doc = collect_kernels(args.quick, native, browser, bundle)
        lines = format_kernels(doc)
    else:
        doc = collect_train(args.quick, native, browser, bundle, args.cpu_threads)
        lines = format_train(doc)
    print(json.dumps(doc) if args.json else "\n".join(lines))
    return 1 if doc["errors"] else 0
