"""Shared fixtures: the native WebGPU device (wgpu-py on lavapipe or a real GPU), and one
``benchmarks/gpu.sh --quick`` run that the benchmark tests of several folders read.

And the session-end check that no test left a process behind (see ``tests/procs.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests import procs


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the run if any process a test started is still alive; kills what is left."""
    left = procs.survivors(root=os.getpid())
    deadline = time.monotonic() + 5.0  # a group killed a moment ago may still be exiting
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = procs.survivors(root=os.getpid())
    if not left:
        return
    lines = [f"  {pid}: {procs.command_of(pid)[:200]}" for pid in left]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = "processes left behind by the tests (now killed):\n" + "\n".join(lines)
    if reporter is not None:
        reporter.write_line(message, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def device() -> Iterator[object]:
    """The native WebGPU device, opened once per test session."""
    from evermind.gpu.native import open_native_device

    dev = open_native_device()
    print(f"adapter: {dev.adapter_info}")
    yield dev


@dataclass(frozen=True)
class GpuQuickRun:
    """One finished ``benchmarks/gpu.sh --quick`` and the folder it wrote (``$OUT``)."""

    done: subprocess.CompletedProcess[str]
    out: Path


@pytest.fixture(scope="session")
def gpu_quick_run(tmp_path_factory: pytest.TempPathFactory) -> GpuQuickRun:
    """``benchmarks/gpu.sh --quick`` on this machine's adapter, run once per session.

    Its kernels and train stages are ``python -m benchmarks kernels|train --quick
    --native-only --json``, the very commands ``evermind bench`` forwards to; the table test
    (tests/shaders/test_gpu_bench.py) and the report tests (tests/unit/test_bench_cli.py)
    read this one run instead of running those stages twice (~45 s on two busy cores)."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("gpu_bench")
    env = {**os.environ, "OUT": str(out), "EVERMIND_PYTHON": sys.executable}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    done = procs.run(  # a timeout kills gpu.sh with every stage it started
        [str(root / "benchmarks" / "gpu.sh"), "--quick"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    return GpuQuickRun(done, out)


def read_f32(device: object, buf: object, count: int | None = None) -> np.ndarray:
    """Reads ``count`` float32 values of ``buf`` back (synchronously, for tests).

    On a loop of its own rather than ``asyncio.run``: on Python 3.11 the runner, restoring
    its SIGINT handler, builds a ValueError message with the repr of the finished task, which
    holds the whole read; for the 67 MB buffers past the workgroup fold that repr took ~2.5 s
    a read (a third of the adamw test)."""
    nbytes = None if count is None else 4 * count
    loop = asyncio.new_event_loop()
    try:
        data = loop.run_until_complete(device.read(buf, nbytes))  # type: ignore[attr-defined]
    finally:
        loop.close()
    return np.frombuffer(data, dtype=np.float32).copy()
