"""Child processes of the test suite: each in its own process group, killed as a whole group.

``subprocess.run(timeout=...)`` kills only the direct child: a CLI that spawned a worker (the
MCP recall proof's ``tune-embedder``, a server's helpers) leaves its grandchildren running as
orphans on a busy machine. Every test that starts a process goes through :func:`run` or
:func:`popen` instead: the child starts a new session (so its process group holds everything
it spawns), and on a timeout, a failure, or the end of the call the whole group is killed.
:func:`survivors` lists what is still alive in those groups; ``tests/conftest.py`` checks it,
and every leftover child of pytest, when the session ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Process groups this session started (their leader's pid).
_GROUPS: set[int] = set()
#: Default limit of :func:`run`; a test that needs longer says so.
DEFAULT_TIMEOUT_S = 600.0


def popen(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` in a new process group; stop it with :func:`kill_group`."""
    process: subprocess.Popen[Any] = subprocess.Popen(args, start_new_session=True, **kwargs)
    _GROUPS.add(process.pid)
    return process


def kill_group(process: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    """Sends ``sig`` to the process's whole group, then reaps the process (if it was ours)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
    if sig == signal.SIGKILL:
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored
            process.wait(timeout=30)


def stop_group(process: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM to the group (a graceful stop), SIGKILL to the group if it lingers."""
    if process.poll() is None:
        kill_group(process, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    kill_group(process)


def run(
    args: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    check: bool = False,
    input: str | bytes | None = None,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` whose timeout (and any failure) kills the child's whole group.

    Anything the child left behind in its group when it exited is killed too. Raises
    ``subprocess.TimeoutExpired`` after the kill, like ``subprocess.run``.
    """
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs.setdefault("stdin", subprocess.PIPE)
    process = popen(args, **kwargs)
    try:
        out, err = process.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        kill_group(process)
        out, err = process.communicate()
        raise subprocess.TimeoutExpired(process.args, timeout, out, err) from expired
    finally:
        kill_group(process)
    result = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    if check:
        result.check_returncode()
    return result


def _group_of(stat: str) -> tuple[int, int] | None:
    """(ppid, pgrp) from a ``/proc/PID/stat`` line (the command name may hold spaces)."""
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 3 or fields[0] == "Z":  # a zombie holds nothing; its parent reaps it
        return None
    return int(fields[1]), int(fields[2])


def _processes() -> dict[int, tuple[int, int]]:
    """pid → (ppid, pgrp) of every live process (empty where /proc is missing)."""
    table: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            info = _group_of((entry / "stat").read_text())
        except (OSError, ValueError):
            continue
        if info is not None:
            table[int(entry.name)] = info
    return table


def survivors(root: int | None = None) -> list[int]:
    """Live processes in a group this session started, or below ``root`` (default: none)."""
    table = _processes()
    found = {pid for pid, (_, group) in table.items() if group in _GROUPS}
    if root is not None:
        frontier = [root]
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, _) in table.items():
                if ppid == parent and pid not in found:
                    found.add(pid)
                    frontier.append(pid)
    found.discard(os.getpid())
    return sorted(found)


def command_of(pid: int) -> str:
    """The command line of ``pid`` (for reports), or ``?``."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or "?"
