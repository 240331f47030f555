"""Shared fixtures: the native WebGPU device (wgpu-py on lavapipe or a real GPU).

And the session-end check that no test left a process behind (see ``tests/procs.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator

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
