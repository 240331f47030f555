"""A ReAct run killed with SIGKILL while its tools run resumes in a new process from its
checkpoint: the model call checkpointed before the kill is not made again, the tools step
that was cut runs again (a node runs at least once), and the run answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests import procs
from tests.upstreams import Conversation, OpenAIUpstream

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "tests" / "runtime" / "react_durable.py"


def think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
    tools = [t.text for t in c.turns if t.role == "tool"]
    if not tools:
        return [("fast", {"city": "Lisbon"}), ("slow", {"city": "Lisbon"})]
    return f"The offsite is {tools[0]} and {tools[1]}."


def test_a_react_run_killed_in_its_tools_step_resumes(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with OpenAIUpstream(think=think) as gpt:
        env = dict(os.environ)
        env.update(
            PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}",
            REACT_LOG=str(tmp_path / "log"),
            REACT_UPSTREAM=gpt.url,
        )
        cli = [sys.executable, "-m", "evermind.cli", "agent"]
        run = procs.popen(
            [*cli, "run", str(GRAPH), "--thread", "T", "--checkpoint", store,
             "--input", '{"messages": ["When and how is the Lisbon offsite?"]}'],
            env={**env, "REACT_HANG": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            ready = tmp_path / "log.ready"
            deadline = time.monotonic() + 90
            while not ready.exists() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ready.exists(), f"the run never reached the slow tool: {run.communicate()}"
            os.kill(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
        finally:
            procs.kill_group(run)
        assert len(gpt.requests) == 1  # the agent step ran and was checkpointed

        resumed = procs.run(
            [*cli, "resume", "T", "--checkpoint", store], env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        final = json.loads(resumed.stdout)
        assert final["answer"] == "The offsite is 12-14 May and sunny."
        assert final["stop_reason"] == "answered" and final["steps"] == 2
        # The checkpointed model call was not made again: one before the kill, one after.
        assert len(gpt.requests) == 2
        last = gpt.requests[-1].body["messages"]
        assert [m["role"] for m in last] == ["user", "assistant", "tool", "tool"]
    pids = [line.split() for line in (tmp_path / "log").read_text().splitlines()]
    killed = str(run.pid)
    # The tools step was cut, so both of its calls ran again in the new process.
    assert sorted(n for n, p in pids if p == killed) == ["fast", "slow"]
    assert sorted(n for n, p in pids if p != killed) == ["fast", "slow"]
