"""A graph file for the SIGKILL proof and the CLI tests (run by ``evermind agent run``).

START -> plan -> (fast, slow in parallel) -> review -> END. Every node appends
``<node> <step> <pid>`` to ``$GRAPH_LOG`` when it starts (the side effect the proof counts).
With ``GRAPH_HANG=1`` the ``slow`` node waits until ``fast``'s update is in the checkpoint
store ``$GRAPH_STORE`` (so the step is half done), writes ``$GRAPH_LOG.ready`` and sleeps: the
test kills the process there. ``review`` asks a human when the input says ``approve: true``.
"""

from __future__ import annotations

import operator
import os
import time
from pathlib import Path
from typing import Annotated, TypedDict

from evermind.agent.graph import (
    END,
    START,
    AgentGraph,
    Checkpointer,
    NodeContext,
    interrupt,
    open_checkpointer,
)


class Work(TypedDict):
    topic: str
    approve: bool
    notes: Annotated[list, operator.add]
    verdict: str


def _log(ctx: NodeContext) -> None:
    with open(os.environ["GRAPH_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{ctx.node} {ctx.step} {os.getpid()}\n")


def plan(state: Work, ctx: NodeContext) -> dict:
    _log(ctx)
    return {"notes": [f"plan {state['topic']}"]}


def fast(state: Work, ctx: NodeContext) -> dict:
    _log(ctx)
    return {"notes": ["fast"]}


def _fast_is_written(store: Checkpointer, ctx: NodeContext) -> bool:
    latest = store.latest(ctx.thread_id)
    assert latest is not None
    found = store.writes(ctx.thread_id, latest.checkpoint_id)
    return any(w.node == "fast" and w.kind == "update" for w in found)


def slow(state: Work, ctx: NodeContext) -> dict:
    _log(ctx)
    if os.environ.get("GRAPH_HANG") == "1":
        store = open_checkpointer(os.environ["GRAPH_STORE"])  # a second connection
        deadline = time.monotonic() + 60
        while not _fast_is_written(store, ctx) and time.monotonic() < deadline:
            time.sleep(0.02)
        store.close()
        Path(os.environ["GRAPH_LOG"] + ".ready").write_text("ready")
        time.sleep(120)  # killed here
    return {"notes": ["slow"]}


def review(state: Work, ctx: NodeContext) -> dict:
    _log(ctx)
    verdict = interrupt({"notes": state["notes"]}) if state.get("approve") else "auto"
    return {"verdict": str(verdict), "notes": ["reviewed"]}


builder = AgentGraph(Work, name="durable")
builder.add_node("plan", plan).add_node("fast", fast).add_node("slow", slow)
builder.add_node("review", review)
builder.add_edge(START, "plan")
builder.add_edge("plan", "fast").add_edge("plan", "slow")
builder.add_edge(["fast", "slow"], "review")
builder.add_edge("review", END)
graph = builder.compile()
