"""``evermind bench``: runs both transports in one run and prints them side by side.

Native-only (numpy, wgpu-py, Playwright through :mod:`evermind.bench_host`). Two reports:

- kernels: every kernel row of :func:`evermind.bench.run_kernel_suite` on native wgpu-py
  and in the browser, beside numpy's matmul GFLOP/s (the CPU roofline), then the share of
  the nano training step each kernel family and each phase takes on both;
- train: training / forward / generation tokens/s and the 64-token embedding latency of
  the nano model on the browser, native wgpu-py, the numpy CPU model and the PyTorch
  reference, with every value's ratio to PyTorch's.

:func:`collect_kernels` / :func:`collect_train` return a JSON-able document (``--json``
prints it); :func:`format_kernels` / :func:`format_train` turn it into table lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from evermind import bench, bench_host
from evermind.errors import EvermindError

log = logging.getLogger(__name__)

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
        suites["native"] = asyncio.run(bench.run_kernel_suite(quick))
    if browser:
        try:
            if bundle is None:
                raise EvermindError("the browser run needs a built bundle (dist/web)")
            (suites["browser"],) = bench_host.run_in_browser(
                bundle, [("bench_kernels", {"quick": quick})]
            )
        except EvermindError as err:
            errors.append(f"browser: {err}")
    numpy_rows = {row["shape"]: row["gflops"] for row in bench_host.numpy_matmul_rows(quick)}
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
            (suite,) = bench_host.run_in_browser(bundle, [("bench_train", {"quick": quick})])
            backends["browser"] = f"browser WebGPU ({suite['adapter']})"
            results["browser"] = suite["rows"]
        except EvermindError as err:
            errors.append(f"browser: {err}")
    if native:
        suite = asyncio.run(bench.run_model_suite(quick))
        backends["native"] = f"native {suite['transport']} ({suite['adapter']})"
        results["native"] = suite["rows"]
    threads = f"{cpu_threads} thread{'s' * (cpu_threads > 1)}"
    backends["numpy"] = f"numpy CPU model ({threads})"
    results["numpy"] = bench_host.numpy_model_bench(quick, cpu_threads)
    if bench_host.torch_available():
        backends["torch"] = f"PyTorch CPU ({threads})"
        results["torch"] = bench_host.torch_model_bench(quick, cpu_threads)
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
