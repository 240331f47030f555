"""`evermind bench`: the tables' structure (never the times, which depend on the machine).

The kernel and train reports run for real on native wgpu-py (lavapipe here) with ``--quick
--native-only --json``; the checks are on what the rows say and how they add up. The
commands run through ``python -m benchmarks``, the checkout's entry point that
``evermind bench`` forwards its arguments to (``benchmarks.main``): those two reports are
the kernels and train stages of the session's one ``benchmarks/gpu.sh --quick`` run
(``gpu_quick_run`` in tests/conftest.py), which runs exactly those commands, read from the
JSON document it writes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks.host import numpy_matmul_rows
from benchmarks.report import format_kernels

from evermind.studio.bench.suite import NANO_BATCH, NANO_SEQ_LEN, NANO_VOCAB, synthetic_batch
from tests import procs
from tests.conftest import GpuQuickRun

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    """``evermind bench ARGS``, through the entry point the CLI forwards them to."""
    return procs.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def _stage(run: GpuQuickRun, name: str) -> tuple[dict[str, Any], int]:
    """The JSON document ``python -m benchmarks NAME --quick --native-only --json`` printed in
    the gpu.sh run, and its exit status (the table's "stage time" row)."""
    table = (run.out / "gpu_bench.md").read_text()
    exit_row = re.search(rf"^\| {name} \| stage time \|.*\| exit (-?\d+) \|$", table, re.M)
    assert exit_row, f"gpu.sh ran no {name} stage:\n{table}\n{run.done.stderr[-2000:]}"
    doc = json.loads((run.out / "gpu_bench.json").read_text())["stages"][name]
    assert isinstance(doc, dict), f"the {name} stage printed no JSON document:\n{table}"
    return doc, int(exit_row.group(1))


@pytest.fixture(scope="module")
def kernels_doc(gpu_quick_run: GpuQuickRun) -> dict[str, Any]:
    doc, code = _stage(gpu_quick_run, "kernels")
    assert code == 0, gpu_quick_run.done.stderr[-2000:]
    return doc


def test_kernel_report_has_both_tables_for_the_native_transport(kernels_doc) -> None:
    doc = kernels_doc
    assert doc["bench"] == "kernels" and doc["quick"] is True and doc["errors"] == []
    assert set(doc["transports"]) == {"native"}
    assert doc["transports"]["native"]["transport"] == "wgpu-py"
    names = {row["kernel"] for row in doc["kernels"]}
    for expected in (
        "matmul NT",
        "softmax cross-entropy fwd+bwd",
        "rmsnorm fwd",
        "conv1d bwd (dx, dw, db)",
        "adamw (nano model)",
        "selective scan fwd (training, stores h)",
        "selective scan bwd (5 passes)",
        "ssd fwd (chunked, 4 passes)",
        "ssd bwd (8 passes)",
        "ssd decode_step",
        "recurrent ssm_step",
    ):
        assert expected in names
    for row in doc["kernels"]:
        assert row["native_ms"] > 0, row
        assert row["browser_ms"] is None and row["browser_rate"] is None, row
        if row["kernel"].startswith("matmul"):
            assert row["unit"] == "GFLOP/s" and row["native_rate"] > 0
            assert row["numpy_gflops"] > 0, "every matmul row has its numpy roofline"
        else:
            assert row["numpy_gflops"] is None
    (row_512,) = [r for r in doc["kernels"] if r["shape"] == "512³"]
    assert row_512["native_rate"] == pytest.approx(2 * 512**3 / (row_512["native_ms"] * 1e6), 0.01)


def test_step_breakdown_covers_every_dispatch_and_shares_sum_to_one(kernels_doc) -> None:
    step = kernels_doc["step"]
    (whole,) = [r for r in step if r["group"] == "step"]
    families = [r for r in step if r["group"] == "family"]
    phases = [r for r in step if r["group"] == "phase"]
    assert {r["name"] for r in families} >= {"matmul", "selective_scan", "cross_entropy", "adamw"}
    assert [r["name"] for r in phases if r["name"] in ("forward", "backward")]
    for group in (families, phases):
        assert sum(r["dispatches"] for r in group) == whole["dispatches"]
        assert sum(r["native_share"] for r in group) == pytest.approx(1.0, abs=1e-3)
        for row in group:
            assert row["native_net_ms"] == pytest.approx(
                max(0.0, row["native_ms"] - step[0]["native_ms"]), abs=2e-3
            )
    assert step[0]["group"] == "sync"


def test_kernel_table_prints_a_row_per_kernel_and_only_the_run_transport(kernels_doc) -> None:
    lines = format_kernels(kernels_doc)
    text = "\n".join(lines)
    assert "native ms" in text and "numpy GFLOP/s" in text
    assert "browser ms" not in text, "a transport that did not run gets no column"
    for row in kernels_doc["kernels"]:
        assert any(line.startswith(row["kernel"]) and row["shape"] in line for line in lines)
    assert "training step (one submit)" in text


def test_native_only_and_browser_only_exclude_each_other() -> None:
    out = _bench("kernels", "--native-only", "--browser-only")
    assert out.returncode == 2
    assert "exclude each other" in out.stderr


def test_numpy_roofline_rows_line_up_with_the_matmul_shapes() -> None:
    rows = numpy_matmul_rows(quick=True)
    assert [r["shape"] for r in rows][:1] == ["512³"]
    assert all(r["gflops"] > 0 and r["kernel"].startswith("matmul ") for r in rows)


def test_synthetic_batch_is_deterministic_shifted_and_in_vocabulary() -> None:
    inputs, targets = synthetic_batch(NANO_BATCH, NANO_SEQ_LEN, NANO_VOCAB)
    again, _ = synthetic_batch(NANO_BATCH, NANO_SEQ_LEN, NANO_VOCAB)
    assert len(inputs) == len(targets) == NANO_BATCH * NANO_SEQ_LEN
    assert list(inputs) == list(again)
    assert list(inputs[1:]) == list(targets[:-1])
    assert min(inputs) >= 0 and max(inputs) < NANO_VOCAB
    assert len(set(inputs)) > 50, "ids should vary like text, not repeat one token"


@pytest.mark.slow
def test_train_report_rows_and_ratios_to_pytorch(gpu_quick_run: GpuQuickRun) -> None:
    doc, code = _stage(gpu_quick_run, "train")
    backends = set(doc["backends"])
    assert {"native", "numpy"} <= backends and "browser" not in backends
    metrics = ("train_tokens_per_s", "forward_tokens_per_s", "generate_tokens_per_s", "embed_64_ms")
    values = {(r["backend"], r["metric"]): r for r in doc["rows"]}
    for backend in backends:
        for metric in metrics:
            assert values[(backend, metric)]["value"] > 0
    if "torch" not in backends:  # torch is a bench-only dependency
        assert code == 1 and any("torch" in e for e in doc["errors"])
        return
    assert code == 0, gpu_quick_run.done.stderr[-2000:]
    for metric in metrics:
        torch_value = values[("torch", metric)]["value"]
        assert values[("torch", metric)]["vs_torch"] == 1.0
        for backend in backends - {"torch"}:
            row = values[(backend, metric)]
            expected = (
                torch_value / row["value"] if row["unit"] == "ms" else row["value"] / torch_value
            )
            assert row["vs_torch"] == pytest.approx(expected, rel=0.01)


def test_the_studio_worker_registers_the_bench_calls() -> None:
    from evermind.studio import api

    assert {"bench_kernels", "bench_train", "bench_blocks"} <= set(api.HANDLERS)
