"""``evermind agent``: run an agent graph from a Python file, durably, and resume it.

Native-only. ``evermind agent run FILE`` loads ``FILE`` (a Python file that defines ``graph``:
an :class:`~evermind.agent.graph.AgentGraph`, compiled or not), binds it to the checkpoint
store ``--checkpoint`` names (default: ``agent-runs.db`` in the data directory), runs it and
prints a line per superstep on stderr, the thread id to resume with, and the final state as
JSON on stdout. ``resume`` goes on after a crash, a pause or a question (``--value``);
``history`` lists a thread's checkpoints, ``list`` the threads; ``fork`` starts a new thread
from one of them.
Exit status: 0 done, 3 waiting for a human, 2 bad input or a failed node (one line).
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evermind.errors import InputError

#: Exit status of a run that stopped to wait for a human.
WAITING = 3


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON ({err.msg} at column {err.colno})") from None


def _default_store() -> str:
    from evermind.paths import data_dir

    return f"sqlite:///{data_dir() / 'agent-runs.db'}"


def register(sub: Any) -> None:
    """Adds ``agent`` (run, resume, history, list, fork) to the ``evermind`` command."""
    cmd = sub.add_parser(
        "agent",
        help="run an agent graph durably: run, resume, history, list, fork",
        description="Run an AgentGraph defined in a Python file, checkpointed every superstep.",
    )
    group = cmd.add_subparsers(dest="agent_command", metavar="ACTION")
    group.required = True
    store_help = (
        "checkpoint store: sqlite:///PATH, a SQLite file, postgresql://… or memory:// "
        "(default: agent-runs.db in the data directory)"
    )
    otlp_help = (
        "export the run's spans (one per node, with cost) and its model calls' GenAI telemetry "
        "over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318 (default: "
        "$OTEL_EXPORTER_OTLP_ENDPOINT; unset: off; needs the telemetry extra)"
    )

    run = group.add_parser("run", help="run a graph file (or go on with --resume)")
    run.add_argument("file", metavar="FILE", help="a Python file that defines `graph`")
    run.add_argument("--input", type=_json, default=None, help="the input state update (JSON)")
    run.add_argument("--thread", default=None, help="the thread id (default: a new one)")
    run.add_argument(
        "--resume", action="store_true", help="go on with --thread from its latest checkpoint"
    )
    run.add_argument("--checkpoint", default=None, help=store_help)
    run.add_argument("--otlp-endpoint", metavar="URL", default=None, help=otlp_help)
    run.set_defaults(func=_run)

    resume = group.add_parser("resume", help="go on with a thread (after a crash or a question)")
    resume.add_argument("thread", metavar="ID", help="the thread id")
    resume.add_argument("--value", type=_json, default=None, help="the answer (JSON) asked for")
    resume.add_argument("--node", default=None, help="which node's question --value answers")
    resume.add_argument(
        "--graph", default=None, help="the graph file (default: the one the thread ran)"
    )
    resume.add_argument("--checkpoint", default=None, help=store_help)
    resume.add_argument("--otlp-endpoint", metavar="URL", default=None, help=otlp_help)
    resume.set_defaults(func=_resume)

    history = group.add_parser("history", help="a thread's checkpoints, newest first")
    history.add_argument("thread", metavar="ID", help="the thread id")
    history.add_argument("--json", action="store_true", help="print JSON lines")
    history.add_argument("--checkpoint", default=None, help=store_help)
    history.set_defaults(func=_history)

    listing = group.add_parser("list", help="the threads in the store, newest first")
    listing.add_argument("--checkpoint", default=None, help=store_help)
    listing.set_defaults(func=_list)

    fork = group.add_parser("fork", help="a new thread from one checkpoint of a thread")
    fork.add_argument("thread", metavar="ID", help="the thread id")
    fork.add_argument("checkpoint_id", metavar="CHECKPOINT", help="the checkpoint id")
    fork.add_argument("--update", type=_json, default=None, help="a state update (JSON)")
    fork.add_argument("--graph", default=None, help="the graph file (default: the thread's)")
    fork.add_argument("--checkpoint", default=None, help=store_help)
    fork.set_defaults(func=_fork)


@contextmanager
def _telemetry(endpoint: str | None) -> Iterator[None]:
    """OTLP export while the block runs (when asked for), flushed at its end."""
    from evermind import telemetry
    from evermind.telemetry import otlp

    installed = otlp.configure(endpoint, service_name="evermind-agent")
    try:
        yield
    finally:
        if installed is not None:
            telemetry.uninstall(installed)
            installed.shutdown()


def _store(args: argparse.Namespace) -> Any:
    from evermind.agent.graph import open_checkpointer

    return open_checkpointer(args.checkpoint or _default_store())


def load_graph(path: str, checkpointer: Any) -> Any:
    """The ``graph`` a Python file defines, compiled onto ``checkpointer``.

    Raises:
        InputError: The file fails to run, or defines no graph.
    """
    from evermind.agent.graph import AgentGraph, CompiledGraph

    try:
        namespace = runpy.run_path(path, run_name="__evermind_graph__")
    except (OSError, SyntaxError) as err:
        if isinstance(err, OSError):
            raise
        raise InputError(f"{path}: {err}") from err
    except Exception as err:
        raise InputError(f"{path}: running it raised {type(err).__name__}: {err}") from err
    graph = namespace.get("graph")
    if isinstance(graph, AgentGraph):
        return graph.compile(checkpointer)
    if isinstance(graph, CompiledGraph):
        return CompiledGraph(
            graph.graph, checkpointer,
            interrupt_before=graph.interrupt_before, recursion_limit=graph.recursion_limit,
            interrupt_after=graph.interrupt_after,
        )  # fmt: skip
    raise InputError(
        f"{path} defines no `graph` (found {type(graph).__name__}); expected an AgentGraph, "
        "compiled or not, named `graph`"
    )


def _graph_file_of(checkpointer: Any, thread: str) -> str:
    for checkpoint in checkpointer.history(thread):
        found = checkpoint.metadata.get("graph_file")
        if found:
            return str(found)
    from evermind.errors import NotFound

    if not checkpointer.history(thread):
        raise NotFound(f"no thread {thread!r} in the checkpoint store")
    raise InputError(f"thread {thread!r} does not say which graph file it ran; pass --graph")


def _print_run(events: Any, thread: str, announce: bool) -> int:
    from evermind.agent.graph import RunResult

    if announce:  # before the first step: a run killed in it is resumed with this id
        print(f"thread {thread} (resume: evermind agent resume {thread})", file=sys.stderr,
              flush=True)  # fmt: skip
    for event in events:
        if not isinstance(event, RunResult):
            nodes = ", ".join(event.updates) or "-"
            after = ", ".join(event.next) or "END"
            print(
                f"step {event.step}: {nodes} -> {after}  (${event.cost_usd:.6f})",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            continue
        if event.status == "interrupted":
            for wait in event.interrupts:
                if wait.kind in ("before", "after"):
                    print(f"paused {wait.kind} {wait.node!r}", file=sys.stderr)
                    print(f"resume: evermind agent resume {thread}", file=sys.stderr)
                else:
                    payload = json.dumps(wait.payload)
                    print(f"{wait.node!r} asks: {payload}", file=sys.stderr)
                    print(f"answer: evermind agent resume {thread} --value JSON", file=sys.stderr)
        else:
            print(
                f"done: {event.steps} steps, ${event.cost_usd:.6f} this run, "
                f"${event.thread_cost_usd:.6f} in all",
                file=sys.stderr,
            )
        print(json.dumps(event.values, indent=2))
        return WAITING if event.status == "interrupted" else 0
    return 0


def _run(args: argparse.Namespace) -> int:
    from evermind.agent.graph.history import new_id

    if args.resume and not args.thread:
        raise InputError("--resume needs --thread ID (the thread to go on with)")
    if args.resume and args.input is not None:
        raise InputError("--resume goes on from a checkpoint; drop --input")
    if not args.resume and not isinstance(args.input, dict | None):
        raise InputError(f"--input must be a JSON object, got {type(args.input).__name__}")
    checkpointer = _store(args)
    try:
        compiled = load_graph(args.file, checkpointer)
        thread = args.thread or new_id()
        metadata = {"graph_file": str(Path(args.file).resolve())}
        with _telemetry(args.otlp_endpoint):
            events = compiled.stream(
                None if args.resume else (args.input or {}), thread_id=thread, metadata=metadata
            )
            return _print_run(events, thread, announce=True)
    finally:
        checkpointer.close()


def _resume(args: argparse.Namespace) -> int:
    from evermind.agent.graph.runner import NOTHING

    checkpointer = _store(args)
    try:
        compiled = load_graph(args.graph or _graph_file_of(checkpointer, args.thread), checkpointer)
        value = NOTHING if args.value is None else args.value
        with _telemetry(args.otlp_endpoint):
            events = compiled.stream(None, thread_id=args.thread, resume=value, node=args.node)
            return _print_run(events, args.thread, announce=False)
    finally:
        checkpointer.close()


def _history(args: argparse.Namespace) -> int:
    from evermind.agent.graph.history import pending_interrupts, step_cost

    checkpointer = _store(args)
    try:
        history = checkpointer.history(args.thread)
        if not history:
            from evermind.errors import NotFound

            raise NotFound(f"no thread {args.thread!r} in the checkpoint store")
        waits = pending_interrupts(checkpointer.writes(args.thread, history[0].checkpoint_id))
        for index, c in enumerate(history):
            source = c.metadata.get("source", "")
            wrote = ", ".join(c.metadata.get("writes") or {})
            if args.json:
                print(json.dumps({
                    "checkpoint_id": c.checkpoint_id, "parent_id": c.parent_id, "step": c.step,
                    "source": source, "writes": c.metadata.get("writes"), "next": c.next,
                    "values": c.values, "cost_usd": step_cost(c), "created_at": c.created_at,
                }))  # fmt: skip
                continue
            note = ""
            if index == 0 and waits:
                note = "  waiting: " + ", ".join(f"{w.node} ({w.kind})" for w in waits)
            print(
                f"{c.checkpoint_id}  step {c.step:>3}  {source:<6} {wrote or '-'} -> "
                f"{', '.join(c.next) or 'END'}  ${step_cost(c):.6f}{note}"
            )
        return 0
    finally:
        checkpointer.close()


def _list(args: argparse.Namespace) -> int:
    from evermind.agent.graph.history import pending_interrupts, step_cost

    checkpointer = _store(args)
    try:
        for thread in checkpointer.threads():
            history = checkpointer.history(thread)
            latest = history[0]
            waits = pending_interrupts(checkpointer.writes(thread, latest.checkpoint_id))
            if waits:
                status = "waiting: " + ", ".join(f"{w.node} ({w.kind})" for w in waits)
            else:
                status = f"next: {', '.join(latest.next)}" if latest.next else "done"
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(latest.created_at))
            cost = sum(step_cost(c) for c in history)
            print(f"{thread}  step {latest.step:>3}  {when} UTC  ${cost:.6f}  {status}")
        return 0
    finally:
        checkpointer.close()


def _fork(args: argparse.Namespace) -> int:
    if args.update is not None and not isinstance(args.update, dict):
        raise InputError(f"--update must be a JSON object, got {type(args.update).__name__}")
    checkpointer = _store(args)
    try:
        path = args.graph or _graph_file_of(checkpointer, args.thread)
        compiled = load_graph(path, checkpointer)
        new = compiled.fork(
            args.thread, args.checkpoint_id, args.update, metadata={"graph_file": path}
        )
        print(new)
        print(f"run it: evermind agent resume {new}", file=sys.stderr)
        return 0
    finally:
        checkpointer.close()
