"""``create_supervisor``: a model that delegates to worker agents, as a compiled AgentGraph.

Browser-safe (standard library and ``evermind`` only). The graph::

    START -> supervisor -> (transfer_to_<name> calls) <name> ... -> supervisor -> ... -> END

- The supervisor is a tool-calling model whose tools are ``transfer_to_<name>(task)``, one
  per worker (native tool calling through the bridge: Anthropic ``tool_use``, OpenAI
  ``tool_calls``). Each worker is its own node; the workers named in one turn run in one
  superstep, concurrently. A worker's output comes back to the supervisor as the result of
  its transfer call; the run ends when the supervisor answers without calling one.
- A worker is a compiled graph (a prebuilt agent: it gets ``{"messages": [task]}``, or
  ``{"task": task}`` when its state has ``task`` and no ``messages``; its output is the
  state's ``answer``, else ``draft``, else its last assistant message) or a function
  ``task -> text`` (sync or async). A graph worker runs in its own thread,
  ``<supervisor thread>:<worker>:<call id>``, in its own checkpointer: a supervisor step
  re-run after a crash resumes or reuses it instead of starting over.
- A call of a name that is no worker (``transfer_to_nobody``, any other tool) gets an error
  result naming the workers, from the ``unknown_worker`` node; a worker's failure is an
  error result too; a worker graph that stops at an interrupt stops the run (a
  ``GraphError`` naming its thread). ``max_handoffs`` bounds the transfers of one run
  (``stop_reason`` ``max_handoffs``; calls past it are answered "not run").

State (:class:`SupervisorState`): ``messages`` (appended), ``handoffs`` (worker results this
run), ``answer``, ``stop_reason``, ``facts``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypedDict

from evermind.agent.graph import END, START, AgentGraph, CompiledGraph, NodeContext
from evermind.agent.graph.checkpoint import Checkpointer
from evermind.agent.graph.errors import GraphInterrupt
from evermind.agent.prebuilt.messages import (
    add_messages,
    assistant_turn,
    last_user_text,
    since_last_user,
    to_bridge,
    tool_turn,
    unanswered_calls,
    user,
)
from evermind.agent.prebuilt.react import call_model, check_bound
from evermind.agent.prebuilt.tools import Tool, ToolResult, as_text
from evermind.agent.ssm_agent import facts_block, recall_facts
from evermind.bridges.base import Bridge, ChatRequest
from evermind.errors import ConfigError, GraphError, InputError, NotFound

#: ``stop_reason`` values.
ANSWERED, MAX_HANDOFFS = "answered", "max_handoffs"
#: The node that answers calls naming no worker.
UNKNOWN = "unknown_worker"
PREFIX = "transfer_to_"
SUPERVISOR_SYSTEM = (
    "You are a supervisor. Delegate each part of the user's request to the worker suited to "
    "it by calling transfer_to_<worker> with the task, then answer the user from what the "
    "workers returned."
)


class SupervisorState(TypedDict):
    """A supervisor's state (see the module docstring)."""

    messages: Annotated[list[Any], add_messages]
    handoffs: int
    answer: str
    stop_reason: str
    facts: list[str]


def _describe(name: str, worker: Any) -> str:
    doc = inspect.getdoc(worker) if not isinstance(worker, CompiledGraph) else None
    summary = " ".join((doc or "").split("\n\n", 1)[0].split())
    return f"Hand a task to the worker '{name}'" + (f": {summary}" if summary else ".")


def _transfer_tool(name: str, description: str) -> Tool:
    schema = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "What the worker should do, in full."}
        },
        "required": ["task"],
        "additionalProperties": False,
    }
    return Tool(f"{PREFIX}{name}", description, schema, lambda task: task)


def _graph_input(name: str, worker: CompiledGraph) -> Callable[[str], dict[str, Any]]:
    keys = worker.state.channels
    if "messages" in keys:
        return lambda task: {"messages": [user(task)]}
    if "task" in keys:
        return lambda task: {"task": task}
    raise ConfigError(
        f"create_supervisor: worker {name!r}'s state has neither 'messages' nor 'task'; wrap "
        "it in a function task -> text"
    )


def output_of(values: Mapping[str, Any]) -> str:
    """A finished worker graph's output: ``answer``, else ``draft``, else its last assistant
    message, else its state as JSON."""
    for key in ("answer", "draft"):
        if isinstance(values.get(key), str) and values[key]:
            return str(values[key])
    for turn in reversed(values.get("messages") or []):
        if isinstance(turn, Mapping) and turn.get("role") == "assistant" and turn.get("content"):
            return str(turn["content"])
    return json.dumps(values, default=str)


async def _run_graph(
    worker: CompiledGraph, name: str, task: str, ctx: NodeContext, call_id: str, make: Any
) -> str | None:
    """The worker graph's output for ``task``, in its own thread (resumed or reused if a
    crash re-runs the step); None when the worker stopped at an interrupt."""
    thread = f"{ctx.thread_id}:{name}:{call_id}"
    try:
        snapshot = await asyncio.to_thread(worker.get_state, thread)
    except NotFound:
        snapshot = None
    if snapshot is not None and not snapshot.next:
        return output_of(snapshot.values)
    if snapshot is None:
        result = await worker.ainvoke(make(task), thread_id=thread)
    else:
        result = await worker.aresume(thread)
    ctx.cost_usd += result.cost_usd
    return output_of(result.values) if result.status == "done" else None


def create_supervisor(
    bridge: Bridge,
    model: str,
    workers: Mapping[str, CompiledGraph | Callable[..., Any]],
    *,
    descriptions: Mapping[str, str] | None = None,
    system: str = SUPERVISOR_SYSTEM,
    memory: Any = None,
    max_handoffs: int = 8,
    max_tokens: int = 1024,
    checkpointer: Checkpointer | None = None,
    interrupt_before: Sequence[str] = (),
    interrupt_after: Sequence[str] = (),
    name: str = "supervisor",
    tenant: str = "default",
) -> CompiledGraph:
    """A compiled AgentGraph whose model routes the work between ``workers``.

    Args:
        bridge: The supervisor's bridge.
        model: The supervisor's model.
        workers: Name → a compiled graph or a function ``task -> text``.
        descriptions: Name → what the worker does (the model reads it; default: the
            function's docstring).
        system: The supervisor's system prompt.
        memory: A MemoryStore: facts recalled for the user's message into each call.
        max_handoffs: Most worker results in one run.
        max_tokens: ``ChatRequest.max_tokens`` of each call.
        checkpointer: Where the run's steps are written (default: in memory).
        interrupt_before: Nodes to pause before (a worker's name: approve the handoff).
        interrupt_after: Nodes to pause after (``supervisor``: see each decision).
        name: The graph's name.
        tenant: ``ChatRequest.tenant``.

    Raises:
        ConfigError: No workers, a reserved or unusable worker name, a bad bound.
    """
    check_bound("create_supervisor: max_handoffs", max_handoffs)
    if not workers:
        raise ConfigError("create_supervisor: give at least one worker")
    inputs: dict[str, Callable[[str], dict[str, Any]]] = {}
    for worker_name, worker in workers.items():
        if worker_name in ("supervisor", UNKNOWN):
            raise ConfigError(f"create_supervisor: {worker_name!r} is reserved; rename the worker")
        if isinstance(worker, CompiledGraph):
            inputs[worker_name] = _graph_input(worker_name, worker)
        elif not callable(worker):
            raise ConfigError(
                f"create_supervisor: worker {worker_name!r} is a {type(worker).__name__}; "
                "expected a compiled graph or a function task -> text"
            )
    said = dict(descriptions or {})
    transfers = {
        f"{PREFIX}{n}": _transfer_tool(n, said.get(n) or _describe(n, w))
        for n, w in workers.items()
    }  # a name the tool format refuses is a ConfigError here
    specs = tuple(t.spec for t in transfers.values())

    async def supervisor(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        turns = list(state.get("messages") or [])
        if not turns:
            raise InputError('the supervisor has no messages; invoke it with {"messages": [...]}')
        done = sum(1 for t in since_last_user(turns) if t["role"] == "tool")
        hits = []
        if memory is not None:
            hits = await recall_facts(memory, last_user_text(turns))
        request = ChatRequest(
            model=model, messages=to_bridge(turns), system=system, facts=facts_block(hits),
            tools=specs, max_tokens=max_tokens, tenant=tenant,
        )  # fmt: skip
        completion = await call_model(ctx, bridge, request)
        out = [assistant_turn(completion)]
        update: dict[str, Any] = {"handoffs": done, "facts": [h.key for h in hits]}
        if not completion.tool_calls:
            return {**update, "messages": out, "answer": completion.text, "stop_reason": ANSWERED}
        if done + len(completion.tool_calls) > max_handoffs:
            note = f"not run: the supervisor stopped at its bound of {max_handoffs} handoffs"
            out += [tool_turn(ToolResult(c.id, c.name, note, True)) for c in completion.tool_calls]
            return {
                **update,
                "messages": out,
                "answer": completion.text,
                "stop_reason": MAX_HANDOFFS,
            }
        return {**update, "messages": out, "answer": "", "stop_reason": ""}

    def worker_node(worker_name: str, worker: Any) -> Callable[..., Any]:
        async def run(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
            mine = [
                c for c in unanswered_calls(state.get("messages") or [])
                if c.get("name") == f"{PREFIX}{worker_name}"
            ]  # fmt: skip
            results = await asyncio.gather(*(delegate(worker_name, worker, c, ctx) for c in mine))
            return {"messages": [tool_turn(r) for r in results]}

        return run

    async def delegate(
        worker_name: str, worker: Any, call: Mapping[str, Any], ctx: NodeContext
    ) -> ToolResult:
        call_id, tool_name = str(call.get("id")), str(call.get("name"))
        task = (call.get("arguments") or {}).get("task")
        if not isinstance(task, str) or not task.strip():
            note = f"error: {tool_name} needs a non-empty 'task' string, got {task!r}"
            return ToolResult(call_id, tool_name, note, True)
        text: str | None
        try:
            if isinstance(worker, CompiledGraph):
                text = await _run_graph(
                    worker, worker_name, task, ctx, call_id, inputs[worker_name]
                )
            elif inspect.iscoroutinefunction(worker):
                text = as_text(await worker(task))
            else:
                text = as_text(await asyncio.to_thread(worker, task))
        except GraphInterrupt:
            raise
        except Exception as err:  # the supervisor reads the failure and decides
            note = f"error: worker {worker_name!r} failed: {type(err).__name__}: {err}"
            return ToolResult(call_id, tool_name, note, True)
        if text is None:  # not an answer: a human's question would be lost in an error result
            raise GraphError(
                f"worker {worker_name!r} stopped at an interrupt in thread "
                f"'{ctx.thread_id}:{worker_name}:{call_id}'; a supervisor's workers must run to "
                "the end (answer it there and resume the supervisor, or give the worker no pauses)"
            )
        return ToolResult(call_id, tool_name, text)

    def unknown(state: dict[str, Any]) -> dict[str, Any]:
        known = ", ".join(transfers)
        results = [
            ToolResult(
                str(c.get("id")),
                str(c.get("name")),
                f"error: no worker is called by {c.get('name')!r}; call one of: {known}",
                True,
            )
            for c in unanswered_calls(state.get("messages") or [])
            if c.get("name") not in transfers
        ]
        return {"messages": [tool_turn(r) for r in results]}

    def route(state: dict[str, Any]) -> list[str]:
        calls = unanswered_calls(state.get("messages") or [])
        targets = [
            str(c["name"])[len(PREFIX) :] if c.get("name") in transfers else UNKNOWN for c in calls
        ]
        return list(dict.fromkeys(targets)) or [END]

    graph = AgentGraph(SupervisorState, name=name)
    graph.add_node("supervisor", supervisor).add_node(UNKNOWN, unknown)
    for worker_name, worker in workers.items():
        graph.add_node(worker_name, worker_node(worker_name, worker))
        graph.add_edge(worker_name, "supervisor")
    graph.add_edge(START, "supervisor").add_edge(UNKNOWN, "supervisor")
    graph.add_conditional_edges("supervisor", route, [*workers, UNKNOWN, END])
    return graph.compile(
        checkpointer,
        interrupt_before=interrupt_before,
        interrupt_after=interrupt_after,
        recursion_limit=2 * max_handoffs + 3,
    )
