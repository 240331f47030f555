"""Child processes of a benchmark, stopped as a whole when the benchmark stops.

A benchmark that runs an engine or a hook in a child process must not leave it (or the
Postgres a child started with pgserver) running when a timeout fires or the user presses
Ctrl-C. :func:`run_child` starts the child in a process group of its own; on a timeout or any
interruption it sends the group SIGINT (a Python child runs its ``finally`` blocks, so its
pgserver is stopped the normal way), waits, then kills the group, and stops any Postgres whose
data directory lies under ``postgres_under`` (a folder the benchmark made for that child, so
only its own servers are touched).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["run_child", "stop_postgres"]

#: How long a child has to stop by itself after SIGINT before its group is killed.
GRACE_S = 30.0


def run_child(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    input: str | None = None,
    timeout_s: float | None = None,
    postgres_under: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs ``command`` to its end, its output captured as text.

    Raises:
        subprocess.TimeoutExpired: It ran past ``timeout_s`` (its group was stopped).
        KeyboardInterrupt: The benchmark was interrupted (its group was stopped too).
    """
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(input, timeout=timeout_s)
    except BaseException as err:
        out, errs = stop_group(process)
        if postgres_under is not None:
            stop_postgres(postgres_under)
        if isinstance(err, subprocess.TimeoutExpired):  # what it said before it was stopped
            err.output, err.stderr = out, errs
        raise
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)


def stop_group(process: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGINT to the child's process group, then SIGKILL to what is left after the grace;
    returns what the child wrote to stdout and stderr (empty if it could not be read)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGINT)
    out, err = "", ""
    try:
        out, err = process.communicate(timeout=GRACE_S)
    except (subprocess.TimeoutExpired, ValueError):  # still running, or streams gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            out, err = process.communicate(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # anything the child left in its group
    return out or "", err or ""


def stop_postgres(folder: Path, wait_s: float = 20.0) -> list[int]:
    """Stops every Postgres whose data directory is under ``folder`` (its ``postmaster.pid``
    names the postmaster): a fast shutdown (SIGINT), then an immediate one (SIGQUIT) if it
    lingers. Returns the postmasters' pids signalled."""
    pids = []
    for pid_file in folder.rglob("postmaster.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pids.append(int(pid_file.read_text().splitlines()[0]))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGQUIT)
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
