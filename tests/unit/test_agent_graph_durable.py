"""The durability proof: a run killed with SIGKILL mid-superstep resumes from its checkpoint,
no checkpointed step lost or run twice; and the ``evermind agent`` CLI around it.

The graph is tests/unit/graph_durable.py: plan, then fast and slow in parallel, then review.
The first process is killed while slow sleeps, after fast's update was written; a second
process resumes. Every node logs ``<node> <step> <pid>`` when it starts.
"""

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

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "tests" / "unit" / "graph_durable.py"


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    env["GRAPH_LOG"] = str(tmp_path / "log")
    env.update(more)
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evermind.cli", "agent", *args]


def _log(tmp_path: Path) -> list[tuple[str, int, int]]:
    lines = (tmp_path / "log").read_text().split("\n")
    return [(n, int(s), int(p)) for n, s, p in (line.split() for line in lines if line)]


def kill_mid_superstep_and_resume(tmp_path: Path, store: str) -> list[dict[str, Any]]:
    """The proof, on the checkpoint store ``store``; returns the thread's history rows."""
    run = procs.popen(
        _cli("run", str(GRAPH), "--thread", "T", "--checkpoint", store,
             "--input", '{"topic": "kill", "approve": false}'),
        env=_env(tmp_path, GRAPH_HANG="1", GRAPH_STORE=store), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        ready = tmp_path / "log.ready"
        deadline = time.monotonic() + 90
        while not ready.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), f"the run never reached the slow node: {run.communicate()}"
        os.kill(run.pid, signal.SIGKILL)  # mid-superstep: fast written, slow running
        run.wait(timeout=30)
    finally:
        procs.kill_group(run)
    assert run.returncode == -signal.SIGKILL
    killed_pid = run.pid
    before = _history(tmp_path, store)
    assert [r["step"] for r in before] == [0, -1]  # plan, input; step 1 (fast + slow) was cut

    resumed = procs.run(
        _cli("resume", "T", "--checkpoint", store), env=_env(tmp_path),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(resumed.stdout)
    assert final["notes"] == ["plan kill", "fast", "slow", "reviewed"]
    assert final["verdict"] == "auto"
    log = _log(tmp_path)
    runs = {name: [(step, pid) for n, step, pid in log if n == name] for name, _, _ in log}
    # Checkpointed (plan) and finished-before-the-kill (fast) work is never redone ...
    assert runs["plan"] == [(0, killed_pid)]
    assert runs["fast"] == [(1, killed_pid)]
    # ... the node that was running when killed runs again (at least once) ...
    assert [step for step, _ in runs["slow"]] == [1, 1]
    assert runs["slow"][0][1] == killed_pid and runs["slow"][1][1] != killed_pid
    # ... and what follows runs once, in the new process.
    assert [step for step, _ in runs["review"]] == [2]
    rows = _history(tmp_path, store)
    assert [(r["step"], r["source"]) for r in rows] == [
        (2, "loop"), (1, "loop"), (0, "loop"), (-1, "input"),
    ]  # fmt: skip
    assert rows[1]["writes"] == {"fast": {"notes": ["fast"]}, "slow": {"notes": ["slow"]}}
    assert rows[2:] == before  # the checkpoints written before the kill are as they were
    return rows


def _history(tmp_path: Path, store: str) -> list[dict[str, Any]]:
    history = procs.run(
        _cli("history", "T", "--json", "--checkpoint", store), env=_env(tmp_path),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert history.returncode == 0, history.stderr
    return [json.loads(line) for line in history.stdout.splitlines()]


def test_a_run_killed_mid_superstep_resumes_with_no_step_lost_or_run_twice(
    tmp_path: Path,
) -> None:
    kill_mid_superstep_and_resume(tmp_path, f"sqlite:///{tmp_path / 'runs.db'}")


def test_the_cli_waits_for_approval_resumes_and_forks(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    env = _env(tmp_path)
    first = procs.run(
        _cli("run", str(GRAPH), "--thread", "A", "--checkpoint", store,
             "--input", '{"topic": "cli", "approve": true}'),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert first.returncode == 3, first.stderr  # waiting for a human
    assert "'review' asks: " in first.stderr
    assert "evermind agent resume A --value JSON" in first.stderr
    assert "step 1: fast, slow -> review" in first.stderr
    wrong = procs.run(_cli("resume", "A", "--checkpoint", store), env=env,
                      capture_output=True, text=True, timeout=60)  # fmt: skip
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert "asks" in wrong.stderr and "resume with a value" in wrong.stderr
    answered = procs.run(_cli("resume", "A", "--value", '"ship it"', "--checkpoint", store),
                         env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["verdict"] == "ship it"

    history = procs.run(_cli("history", "A", "--json", "--checkpoint", store), env=env,
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    rows = [json.loads(line) for line in history.stdout.splitlines()]
    after_plan = next(r for r in rows if r["step"] == 0)
    forked = procs.run(
        _cli("fork", "A", after_plan["checkpoint_id"], "--update", '{"approve": false}',
             "--checkpoint", store),
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    new_thread = forked.stdout.strip()
    ran = procs.run(_cli("resume", new_thread, "--checkpoint", store), env=env,
                    capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["verdict"] == "auto"
    again = procs.run(_cli("history", "A", "--json", "--checkpoint", store), env=env,
                      capture_output=True, text=True, timeout=60)  # fmt: skip
    assert [json.loads(line) for line in again.stdout.splitlines()] == rows  # untouched
    listed = procs.run(_cli("list", "--checkpoint", store), env=env, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    threads = [line.split()[0] for line in listed.stdout.splitlines()]
    assert threads == [new_thread, "A"] and all(line.endswith("done") for line in
                                                listed.stdout.splitlines())  # fmt: skip


def test_the_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = _env(tmp_path)
    bad_graph = tmp_path / "bad.py"
    bad_graph.write_text("graph = 42\n")
    store = str(tmp_path / "runs.db")
    cases = [
        (_cli("run", str(tmp_path / "missing.py"), "--checkpoint", store), "missing.py"),
        (_cli("run", str(bad_graph), "--checkpoint", store), "defines no `graph`"),
        (_cli("run", str(GRAPH), "--input", "[1", "--checkpoint", store), "--input: not JSON"),
        (_cli("run", str(GRAPH), "--input", "[1]", "--checkpoint", store), "a JSON object"),
        (_cli("run", str(GRAPH), "--resume", "--checkpoint", store), "--resume needs --thread"),
        (_cli("resume", "nope", "--checkpoint", store), "no thread 'nope'"),
        (_cli("history", "nope", "--checkpoint", store), "no thread 'nope'"),
        (_cli("run", str(GRAPH), "--checkpoint", "redis://x"), "unknown checkpoint store"),
    ]
    for args, expected in cases:
        done = procs.run(args, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr and done.stderr.count("\n") == 1, (args, done.stderr)
