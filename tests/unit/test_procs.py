"""The suite's process helper kills a child's whole group: no grandchild outlives a test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import procs

# A child that starts a grandchild (in the same group, as a CLI starting a worker would),
# writes the grandchild's pid, and then waits far longer than any test may take.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] != "Z"


def _wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, "the child never started its grandchild"
        time.sleep(0.05)
    return int(path.read_text())


def test_a_timeout_kills_the_grandchild_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        procs.run([sys.executable, "-c", PARENT, str(pid_file)], timeout=3, capture_output=True)
    grandchild = _wait_for_pid(pid_file)
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "subprocess.run's timeout would have left it running"
    assert time.monotonic() - started < 60
    assert grandchild not in procs.survivors()


def test_stop_group_ends_a_server_and_what_it_spawned(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    process = procs.popen([sys.executable, "-c", PARENT, str(pid_file)])
    grandchild = _wait_for_pid(pid_file)
    assert grandchild in procs.survivors() and process.pid in procs.survivors()
    procs.stop_group(process, grace_s=5)
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild) and process.poll() is not None


def test_a_normal_run_returns_output_and_status() -> None:
    done = procs.run([sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"],
                     capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout) == (3, "hi\n")
    with pytest.raises(subprocess.CalledProcessError):
        procs.run([sys.executable, "-c", "raise SystemExit(1)"], check=True, timeout=60)
    echoed = procs.run([sys.executable, "-c", "print(input())"], input="x\n",
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert echoed.stdout == "x\n"


def test_survivors_finds_descendants_of_a_root() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process.pid in procs.survivors(root=os.getpid())
    finally:
        process.kill()
        process.wait()
    assert process.pid not in procs.survivors(root=os.getpid())
