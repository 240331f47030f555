"""Prebuilt agents on AgentGraph: ReAct, Reflection and Supervisor, and their tools.

Browser-safe (standard library and ``evermind`` only). Each ``create_*`` returns a
:class:`~evermind.agent.graph.CompiledGraph`, checkpointed, streamed, interrupted and resumed
like any other (docs/agents.md, "Prebuilt agents"):

- :func:`create_react_agent` (:mod:`~evermind.agent.prebuilt.react`): the model calls tools
  through each bridge's native tool format until it answers; memory recalled each call;
- :func:`create_reflection_agent` (:mod:`~evermind.agent.prebuilt.reflection`): generate,
  critique, revise, until the critic approves or the bound;
- :func:`create_supervisor` (:mod:`~evermind.agent.prebuilt.supervisor`): a model routes a
  task between worker agents with ``transfer_to_<name>`` tool calls;
- tools: :func:`tool` (any Python function; :mod:`~evermind.agent.prebuilt.tools`),
  :func:`memory_recall_tool`, :func:`memory_remember_tool`, :func:`docs_search_tool`
  (:mod:`~evermind.agent.prebuilt.memory_tools`).
"""

from evermind.agent.prebuilt.memory_tools import (
    docs_search_tool,
    memory_recall_tool,
    memory_remember_tool,
)
from evermind.agent.prebuilt.messages import user
from evermind.agent.prebuilt.react import ReactState, create_react_agent
from evermind.agent.prebuilt.reflection import ReflectionState, approved, create_reflection_agent
from evermind.agent.prebuilt.supervisor import SupervisorState, create_supervisor
from evermind.agent.prebuilt.tools import Tool, ToolResult, tool

__all__ = [
    "ReactState",
    "ReflectionState",
    "SupervisorState",
    "Tool",
    "ToolResult",
    "approved",
    "create_react_agent",
    "create_reflection_agent",
    "create_supervisor",
    "docs_search_tool",
    "memory_recall_tool",
    "memory_remember_tool",
    "tool",
    "user",
]
