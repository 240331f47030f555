"""AgentGraph: a durable agent graph over a typed state, run in supersteps (docs/agents.md).

Browser-safe (standard library only; the Postgres checkpointer is
:mod:`evermind.agent.graph.postgres`, native-only).

- :class:`AgentGraph` (:mod:`~evermind.agent.graph.builder`): nodes, edges, conditional
  edges, joins; ``compile`` checks the shape and returns a
  :class:`~evermind.agent.graph.runner.CompiledGraph`;
- the state (:mod:`~evermind.agent.graph.state`): a TypedDict or dataclass with per-key
  reducers (``Annotated[list, operator.add]``);
- checkpointers (:mod:`~evermind.agent.graph.checkpoint`): memory, SQLite, Postgres; one
  checkpoint per superstep; ``resume`` after a crash, ``interrupt`` / ``interrupt_before``
  for a human, ``fork`` from any checkpoint;
- :class:`NodeContext` (:mod:`~evermind.agent.graph.context`): what a node reaches, and
  where it records the cost of its model calls.
"""

from evermind.agent.graph.builder import AgentGraph
from evermind.agent.graph.checkpoint import (
    Checkpoint,
    Checkpointer,
    MemoryCheckpointer,
    PendingWrite,
    SQLiteCheckpointer,
)
from evermind.agent.graph.context import NodeContext, context, interrupt
from evermind.agent.graph.errors import (
    GraphInterrupt,
    GraphRecursionError,
    InvalidUpdate,
    NodeError,
)
from evermind.agent.graph.events import Interrupt, RunResult, StateSnapshot, StepEvent
from evermind.agent.graph.runner import CompiledGraph
from evermind.agent.graph.shape import END, START
from evermind.agent.graph.stores import open_checkpointer

__all__ = [
    "END",
    "START",
    "AgentGraph",
    "Checkpoint",
    "Checkpointer",
    "CompiledGraph",
    "GraphInterrupt",
    "GraphRecursionError",
    "Interrupt",
    "InvalidUpdate",
    "MemoryCheckpointer",
    "NodeContext",
    "NodeError",
    "PendingWrite",
    "RunResult",
    "SQLiteCheckpointer",
    "StateSnapshot",
    "StepEvent",
    "context",
    "interrupt",
    "open_checkpointer",
]
