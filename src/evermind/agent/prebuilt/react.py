"""``create_react_agent``: a tool-calling agent (ReAct) as a compiled AgentGraph.

Browser-safe (standard library and ``evermind`` only). The graph::

    START -> agent -> (tool calls?) tools -> agent -> ... -> (an answer) END

- ``agent`` calls the model through any bridge with the tools in ``ChatRequest.tools`` (each
  bridge sends them in its native format: Anthropic ``tools`` / ``tool_use`` /
  ``tool_result``, OpenAI ``tools`` / ``tool_calls`` / ``role: tool``). Before each call it
  recalls the facts relevant to the latest user message from ``memory`` into
  ``ChatRequest.facts`` (:func:`~evermind.agent.ssm_agent.recall_facts`, SSMAgent's rule).
- ``tools`` runs the calls of the model's latest turn that have no result yet, concurrently;
  a tool's failure is a result the model reads. Calls already answered (a human's
  ``update_state`` with a tool turn, while the run waits at ``interrupt_before=["tools"]``)
  are not run.
- The run ends when the model answers without tool calls (``stop_reason`` ``answered``) or
  when it asks for tools on its ``max_steps``-th call (``max_steps``: the calls are answered
  "not run", so the thread stays a valid conversation for its next turn).
- Learning: with ``memory`` and ``learn=True`` the agent gets the ``memory_remember`` tool,
  which writes through write-through cognition; what the model chooses to remember is all
  it writes (nothing is inferred from the conversation behind its back).

State (:class:`ReactState`): ``messages`` (appended), ``steps`` (model calls this run),
``answer``, ``stop_reason``, ``facts`` (keys of the memories injected in the latest call).
Start or continue a thread with ``{"messages": ["the question"]}``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from evermind.agent.graph import END, START, AgentGraph, CompiledGraph, NodeContext
from evermind.agent.graph.checkpoint import Checkpointer
from evermind.agent.prebuilt.memory_tools import memory_remember_tool
from evermind.agent.prebuilt.messages import (
    add_messages,
    assistant_turn,
    last_user_text,
    normalised,
    since_last_user,
    to_bridge,
    tool_turn,
    unanswered_calls,
)
from evermind.agent.prebuilt.tools import Tool, ToolResult, as_tools, run_calls
from evermind.agent.ssm_agent import facts_block, recall_facts
from evermind.bridges.base import Bridge, ChatRequest, Completion
from evermind.errors import ConfigError, InputError, UpstreamError

#: ``stop_reason`` values.
ANSWERED, MAX_STEPS = "answered", "max_steps"


class ReactState(TypedDict):
    """A ReAct agent's state (see the module docstring)."""

    messages: Annotated[list[Any], add_messages]
    steps: int
    answer: str
    stop_reason: str
    facts: list[str]


async def call_model(
    ctx: NodeContext,
    bridge: Bridge,
    request: ChatRequest,
    on_text: Callable[[str], Any] | None = None,
) -> Completion:
    """One model call, recorded on the node: ``generate``, or ``stream`` with each text delta
    passed to ``on_text`` (sync or async) as it arrives."""
    if on_text is None:
        made: Completion = await ctx.generate(bridge, request)
        return made
    completion = None
    async for delta in bridge.stream(request):
        if delta.completion is not None:
            completion = delta.completion
        elif delta.text:
            shown = on_text(delta.text)
            if inspect.isawaitable(shown):
                await shown
    if completion is None:
        raise UpstreamError(
            f"{bridge.provider} stream ended without a completion",
            provider=bridge.provider,
            code="upstream_stream_cut",
        )
    ctx.record(completion)
    return completion


def check_bound(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")


def create_react_agent(
    bridge: Bridge,
    model: str,
    tools: Sequence[Tool | Callable[..., Any]] = (),
    *,
    memory: Any = None,
    system: str | None = None,
    max_steps: int = 10,
    learn: bool = True,
    max_facts: int = 8,
    fact_budget_tokens: int = 512,
    max_tokens: int = 1024,
    on_text: Callable[[str], Any] | None = None,
    checkpointer: Checkpointer | None = None,
    interrupt_before: Sequence[str] = (),
    interrupt_after: Sequence[str] = (),
    name: str = "react_agent",
    tenant: str = "default",
    **request_options: Any,
) -> CompiledGraph:
    """A compiled AgentGraph that answers by calling tools until it can answer.

    Args:
        bridge: Any :class:`~evermind.bridges.Bridge` whose model calls tools.
        model: The upstream's model name.
        tools: :class:`Tool` s or plain functions (made tools with :func:`tool`).
        memory: A :class:`~evermind.memory.MemoryStore`: facts recalled into each call, and
            the ``memory_remember`` tool when ``learn``.
        system: The static system prompt.
        max_steps: Most model calls in one run (one user message's answer).
        learn: Give the model ``memory_remember`` (write-through cognition) when ``memory``
            is set and no tool of that name is given.
        max_facts: Facts recalled per call at most.
        fact_budget_tokens: Their tokens at most.
        max_tokens: ``ChatRequest.max_tokens`` of each call.
        on_text: Stream each call and pass it the text as it arrives.
        checkpointer: Where the run's steps are written (default: in memory).
        interrupt_before: e.g. ``["tools"]``: stop before running tools, for a human to
            approve (``resume``) or answer a call with ``update_state`` first.
        interrupt_after: Nodes to pause after (``agent``: see each model turn).
        name: The graph's name (telemetry, ``evermind agent list``).
        tenant: ``ChatRequest.tenant``.
        **request_options: Other ``ChatRequest`` fields (``temperature``, ``extra``).

    Raises:
        ConfigError: A bad bound, two tools with one name, a function that is no tool.
    """
    check_bound("create_react_agent: max_steps", max_steps)
    listed = list(tools)
    if (
        memory is not None
        and learn
        and not any(
            getattr(t, "name", getattr(t, "__name__", "")) == "memory_remember" for t in listed
        )
    ):
        listed.append(memory_remember_tool(memory))
    table = as_tools(listed)
    specs = tuple(t.spec for t in table.values())

    async def agent(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        turns = [normalised(t, f"messages[{i}]") for i, t in enumerate(state.get("messages") or [])]
        if not turns:
            raise InputError('the agent has no messages; invoke it with {"messages": ["..."]}')
        step = 1 + sum(1 for t in since_last_user(turns) if t["role"] == "assistant")
        hits = []
        if memory is not None:
            hits = await recall_facts(memory, last_user_text(turns), max_facts, fact_budget_tokens)
        request = ChatRequest(
            model=model,
            messages=to_bridge(turns),
            system=system,
            facts=facts_block(hits),
            tools=specs,
            max_tokens=max_tokens,
            tenant=tenant,
            **request_options,
        )
        completion = await call_model(ctx, bridge, request, on_text)
        said = [assistant_turn(completion)]
        update: dict[str, Any] = {"steps": step, "facts": [h.key for h in hits]}
        if not completion.tool_calls:
            return {**update, "messages": said, "answer": completion.text, "stop_reason": ANSWERED}
        if step >= max_steps:
            note = f"not run: the agent stopped at its bound of {max_steps} model calls"
            said += [tool_turn(ToolResult(c.id, c.name, note, True)) for c in completion.tool_calls]
            return {**update, "messages": said, "answer": completion.text, "stop_reason": MAX_STEPS}
        return {**update, "messages": said, "answer": "", "stop_reason": ""}

    async def run_tools(state: dict[str, Any]) -> dict[str, Any]:
        calls = unanswered_calls(state.get("messages") or [])
        results = await run_calls(table, [(c["id"], c["name"], c.get("arguments")) for c in calls])
        return {"messages": [tool_turn(r) for r in results]}

    def route(state: dict[str, Any]) -> str:
        return "tools" if unanswered_calls(state.get("messages") or []) else END

    graph = AgentGraph(ReactState, name=name)
    graph.add_node("agent", agent).add_node("tools", run_tools)
    graph.add_edge(START, "agent").add_edge("tools", "agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    return graph.compile(
        checkpointer,
        interrupt_before=interrupt_before,
        interrupt_after=interrupt_after,
        recursion_limit=2 * max_steps + 1,
    )
