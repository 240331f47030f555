#!/usr/bin/env python3
"""Benchmarks AgentGraph's cost per superstep: the runner and the checkpointer, nodes idle.

A graph of ``--width`` parallel nodes that each append a short note, joined by one node that
loops back until ``--steps`` supersteps have run, on the in-memory checkpointer and on SQLite
(WAL, ``synchronous=FULL``: every step is on disk before the next starts); with
``--postgres URL``, on Postgres too. The state grows by ``width`` notes a step, as an agent's
message list does. Printed: supersteps per second and milliseconds per step (the run's time
over its steps), with the nodes doing nothing, so what is measured is the graph's own
overhead. Absolute times depend on the machine and its disk; compare the rows of one run.

Usage:
    .venv/bin/python -m benchmarks.agent_graph                      # 200 steps, width 4
    .venv/bin/python -m benchmarks.agent_graph --steps 500 --width 8
    .venv/bin/python -m benchmarks.agent_graph --postgres postgresql://user@host/db
"""

from __future__ import annotations

import argparse
import operator
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from evermind.agent.graph import END, START, AgentGraph, open_checkpointer  # noqa: E402


class Loop(TypedDict):
    notes: Annotated[list, operator.add]
    rounds: int


def build(width: int, steps: int) -> AgentGraph:
    """``width`` parallel workers, a join that counts rounds, a loop until ``steps``."""
    g = AgentGraph(Loop, name="bench")
    workers = [f"w{i}" for i in range(width)]
    for name in workers:
        g.add_node(name, lambda s, n=name: {"notes": [f"{n} round {s.get('rounds', 0)}"]})
    g.add_node("join", lambda s: {"rounds": s.get("rounds", 0) + 1})
    for name in workers:
        g.add_edge(START, name).add_edge(name, "join")

    def again(state: Any) -> list[str] | str:
        # Two supersteps a round (the workers, then the join).
        return workers if 2 * state["rounds"] < steps else END

    g.add_conditional_edges("join", again, [*workers, END])
    return g


def measure(url: str, width: int, steps: int) -> tuple[float, int]:
    """Seconds of one run to the end, and its supersteps."""
    store = open_checkpointer(url)
    try:
        compiled = build(width, steps).compile(store, recursion_limit=steps + 10)
        start = time.perf_counter()
        result = compiled.invoke({"rounds": 0})
        return time.perf_counter() - start, result.steps
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="supersteps per run")
    parser.add_argument("--width", type=int, default=4, help="parallel nodes per round")
    parser.add_argument("--postgres", default=None, help="a Postgres URL to measure too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        stores = [("memory", "memory://"), ("sqlite", f"sqlite:///{folder}/bench.db")]
        if args.postgres:
            stores.append(("postgres", args.postgres))
        print(f"{args.steps} supersteps, {args.width} parallel nodes a round, nodes idle")
        print(f"{'store':<10} {'steps/s':>9} {'ms/step':>9}")
        for name, url in stores:
            seconds, steps = measure(url, args.width, args.steps)
            print(f"{name:<10} {steps / seconds:>9.1f} {1e3 * seconds / steps:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
