"""The prepared GPU run: kernels, training, batched decoding and serving through wgpu-py, one table.

``benchmarks/gpu.sh`` (which finds a Python and the carried packages) runs
``python -m benchmarks.gpu``. It checks that wgpu-py opens a real GPU (a CPU/software adapter
such as lavapipe is refused unless ``--allow-cpu-adapter``, which ``--quick`` implies), then
runs four stages, each in its own subprocess under its own timeout and all under one budget
(default 540 s, so the whole run fits in ten minutes with the interpreter's start):

- ``kernels``: ``python -m benchmarks kernels --native-only --json`` (every WGSL kernel row
  and the training step's share per kernel family);
- ``train``: ``python -m benchmarks train --native-only --json`` (training / forward /
  generation tokens/s and embedding latency of the nano model on wgpu-py, numpy, PyTorch);
- ``decode``: ``python -m benchmarks.gpu_decode --json`` (the batched Decoder, wgpu-py and
  numpy, batch 1/8/32);
- ``serve``: ``python -m benchmarks.serve --device gpu --json`` (the runtime on loopback;
  the row ``serve device`` says what ``/healthz`` reports decoded).

A stage that fails or times out becomes one row saying so, and the next stage runs. The
result is ONE markdown table (stage | what | value | unit | detail), printed and, when
``--out`` or ``$OUT`` names a folder, written there as ``gpu_bench.md`` beside the raw
``gpu_bench.json``. Exit status: 0 when every stage ran, 1 when one failed or timed out, 3
when wgpu-py finds no GPU (nothing else runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: A row of the one table: stage, what, value, unit, detail.
Row = tuple[str, str, str, str, str]


@dataclass
class Stage:
    """One benchmark subprocess: its module arguments, timeout and how its JSON becomes rows."""

    name: str
    argv: list[str]
    timeout_s: float
    rows: Callable[[dict[str, Any]], list[Row]]


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def kernel_rows(doc: dict[str, Any]) -> list[Row]:
    """Every kernel row (ms and its rate) and the training step's breakdown."""
    rows: list[Row] = []
    for r in doc.get("kernels", []):
        unit = r.get("unit") or ""
        rate = f"{_fmt(r.get('native_rate'))} {unit}".strip()
        rows.append(("kernels", f"{r['kernel']} {r['shape']}", _fmt(r["native_ms"]), "ms", rate))
    for r in doc.get("step", []):
        share = r.get("native_share")
        detail = f"{r.get('dispatches')} dispatches" + (
            f", {share * 100:.1f}% of the step" if share else ""
        )
        rows.append(("step", f"{r['group']}: {r['name']}", _fmt(r["native_ms"]), "ms", detail))
    return rows


def train_rows(doc: dict[str, Any]) -> list[Row]:
    """The model's speeds per backend, with the ratio to PyTorch."""
    rows: list[Row] = []
    labels = doc.get("backends", {})
    for r in doc.get("rows", []):
        ratio = r.get("vs_torch")
        detail = labels.get(r["backend"], r["backend"])
        if ratio is not None:
            detail += f"; {ratio}x PyTorch"
        rows.append(("train", f"{r['backend']} {r['metric']}", _fmt(r["value"]), r["unit"], detail))
    return rows


def decode_rows(doc: dict[str, Any]) -> list[Row]:
    """Batched decoding tokens/s per backend and batch."""
    rows: list[Row] = []
    for r in doc.get("rows", []):
        what = f"{r['backend']} batch {r['batch']}"
        detail = f"step {r['step_ms']} ms, prefill {doc['prompt_tokens']} tok {r['prefill_ms']} ms"
        rows.append(("decode", what, _fmt(r["tokens_per_s"]), "tok/s", detail))
    return rows


def serve_rows(doc: dict[str, Any]) -> list[Row]:
    """Requests/s and latency per kind and client count; what decoded."""
    rows: list[Row] = [("serve", "device (/healthz)", json.dumps(doc.get("device")), "", "")]
    for r in doc.get("rows", []):
        what = f"{r['kind']} x{r['clients']} clients"
        detail = f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, {r['errors']} errors"
        if r.get("completion_tokens_per_s") is not None:
            detail += f", {r['completion_tokens_per_s']} tok/s"
        rows.append(("serve", what, _fmt(r["requests_per_s"]), "req/s", detail))
    gen = doc.get("generation", {})
    if "pytorch_tokens_per_s" in gen:
        rows.append(("serve", "PyTorch generation", _fmt(gen["pytorch_tokens_per_s"]), "tok/s", ""))
    return rows


def stages(quick: bool) -> list[Stage]:
    """The four stages; ``quick``: tiny sizes (a smoke test of the script on any adapter)."""
    q = ["--quick"] if quick else []
    serve = (
        ["--seconds", "0.5", "--clients", "1,2", "--max-tokens", "4", "--no-reference"]
        if quick
        else ["--seconds", "3", "--clients", "1,8,32"]
    )
    return [
        Stage(
            "kernels", ["benchmarks", "kernels", "--native-only", "--json", *q], 120, kernel_rows
        ),
        Stage("train", ["benchmarks", "train", "--native-only", "--json", *q], 200, train_rows),
        Stage("decode", ["benchmarks.gpu_decode", "--json", *q], 90, decode_rows),
        Stage("serve", ["benchmarks.serve", "--device", "gpu", "--json", *serve], 130, serve_rows),
    ]


def probe() -> tuple[bool, str]:
    """Whether wgpu-py opens a real GPU here, and the adapter in words (or why not)."""
    try:
        from evermind.gpu.native import open_native_device

        device = open_native_device()
    except Exception as err:  # no wgpu, no Vulkan loader, no adapter: all say "no GPU"
        return False, f"no WebGPU adapter: {type(err).__name__}: {err}"
    info = device.adapter_info
    name = f"{info.get('device') or info.get('description')} ({info.get('backend')})"
    return (not device.is_cpu_adapter), name + (" [CPU adapter]" if device.is_cpu_adapter else "")


def parse_json(stdout: str) -> dict[str, Any] | None:
    """The JSON document a stage printed: all of stdout, its last line, or from the first
    line that opens an object (progress lines before it)."""
    text = stdout.strip()
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("{")]
    candidates = [text, *(lines[-1:]), *("\n".join(lines[i:]) for i in starts[:1])]
    for candidate in candidates:
        try:
            doc = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def run_stage(stage: Stage, timeout_s: float) -> tuple[list[Row], dict[str, Any] | None, bool]:
    """Runs one stage; returns its rows, its JSON document and whether it succeeded."""
    command = [sys.executable, "-m", *stage.argv]
    start = time.monotonic()
    # Each stage runs in its own process group: a stage that times out is killed with every
    # process it started (the serve stage's servers), so none outlives the budget.
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return [(stage.name, "timed out", _fmt(timeout_s), "s", " ".join(stage.argv))], None, False
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # anything the stage left behind
    done = subprocess.CompletedProcess(command, process.returncode, out, err)
    took = time.monotonic() - start
    doc = parse_json(done.stdout)
    if doc is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return (
            [(stage.name, f"failed (exit {done.returncode})", "", "", tail[0][:200])],
            None,
            False,
        )
    rows = stage.rows(doc)
    rows.append((stage.name, "stage time", _fmt(took), "s", f"exit {done.returncode}"))
    for error in doc.get("errors", []):
        rows.append((stage.name, "error", "", "", str(error)[:200]))
    return rows, doc, done.returncode == 0


def table(rows: Sequence[Row]) -> str:
    """The one markdown table."""
    lines = ["| stage | what | value | unit | detail |", "| --- | --- | ---: | --- | --- |"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.gpu``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="benchmarks/gpu.sh", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes; any adapter")
    parser.add_argument(
        "--allow-cpu-adapter", action="store_true", help="run on a CPU adapter (lavapipe) too"
    )
    parser.add_argument("--budget", type=float, default=540, help="seconds for all stages")
    parser.add_argument(
        "--stages", default="kernels,train,decode,serve", help="comma-separated stages to run"
    )
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for the table")
    args = parser.parse_args(argv)
    started = time.monotonic()
    real, adapter = probe()
    if not real and not (args.quick or args.allow_cpu_adapter):
        print(
            f"error: wgpu-py finds no GPU ({adapter}); the GPU benchmarks need one. Hint: "
            "check the Vulkan loader (ldconfig -p | grep libvulkan) and the NVIDIA ICD "
            "(VK_DRIVER_FILES); --allow-cpu-adapter runs on a CPU adapter anyway",
            file=sys.stderr,
        )
        return 3
    chosen = set(args.stages.split(","))
    rows: list[Row] = [("setup", "adapter", adapter, "", "wgpu-py")]
    docs: dict[str, Any] = {}
    ok = True
    for stage in (s for s in stages(args.quick) if s.name in chosen):
        left = args.budget - (time.monotonic() - started)
        if left < 5:
            rows.append((stage.name, "skipped", "", "", "the budget is spent"))
            ok = False
            continue
        print(
            f"[gpu bench] {stage.name} (timeout {min(stage.timeout_s, left):.0f} s)",
            file=sys.stderr,
        )
        stage_rows, doc, passed = run_stage(stage, min(stage.timeout_s, left))
        rows += stage_rows
        docs[stage.name] = doc
        ok = ok and passed
    rows.append(("setup", "total time", _fmt(time.monotonic() - started), "s", ""))
    text = table(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_bench.md").write_text(text + "\n")
        (out / "gpu_bench.json").write_text(json.dumps({"adapter": adapter, "stages": docs}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
