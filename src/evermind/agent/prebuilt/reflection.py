"""``create_reflection_agent``: generate, critique, revise, bounded, as a compiled AgentGraph.

Browser-safe (standard library and ``evermind`` only). The graph::

    START -> generate -> critique -> (approved, or max_rounds critiques) END
                            ^------- revise <-------- (otherwise)

- ``generate`` drafts an answer to ``task``; ``critique`` asks the critic (``critic_bridge``,
  default the same bridge) to judge the latest draft; ``revise`` redrafts with the critique.
- The approval convention: the critic starts its reply with ``APPROVED`` (any case) when the
  draft needs no change (:func:`approved`); pass ``stop=`` to judge differently.
- The bound: at most ``max_rounds`` critiques; a draft still not approved after the last one
  is the answer, with ``stop_reason`` ``max_rounds`` (else ``approved``).

State (:class:`ReflectionState`): ``task`` (the input), ``draft`` (the latest: the answer),
``critique``, ``rounds`` (critiques so far), ``stop_reason``, ``history`` (each round's
draft and critique, appended).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from evermind.agent.graph import END, START, AgentGraph, CompiledGraph, NodeContext
from evermind.agent.graph.checkpoint import Checkpointer
from evermind.agent.prebuilt.react import call_model, check_bound
from evermind.agent.ssm_agent import facts_block, recall_facts
from evermind.bridges.base import Bridge, ChatRequest, Message
from evermind.errors import InputError

#: ``stop_reason`` values.
APPROVED, MAX_ROUNDS = "approved", "max_rounds"
#: The critic's default instructions (the approval convention is in them).
CRITIC_SYSTEM = (
    "You review a draft answer to a task. If it fully and correctly answers the task, reply "
    "with APPROVED and nothing else. Otherwise reply with a short list of concrete changes."
)


class ReflectionState(TypedDict):
    """A reflection agent's state (see the module docstring)."""

    task: str
    draft: str
    critique: str
    rounds: int
    stop_reason: str
    history: Annotated[list[Any], operator.add]


def approved(critique: str) -> bool:
    """The approval convention: the critique's first word is ``APPROVED`` (any case)."""
    words = critique.strip().split(None, 1)
    return bool(words) and words[0].strip(".:!,").upper() == "APPROVED"


def create_reflection_agent(
    bridge: Bridge,
    model: str,
    *,
    max_rounds: int = 3,
    critic_bridge: Bridge | None = None,
    critic_model: str | None = None,
    system: str | None = None,
    critic_system: str = CRITIC_SYSTEM,
    stop: Callable[[str], bool] = approved,
    memory: Any = None,
    max_tokens: int = 1024,
    checkpointer: Checkpointer | None = None,
    interrupt_before: Sequence[str] = (),
    interrupt_after: Sequence[str] = (),
    name: str = "reflection_agent",
    tenant: str = "default",
) -> CompiledGraph:
    """A compiled AgentGraph that drafts, has the draft critiqued, and revises it.

    Args:
        bridge: The writer's bridge.
        model: The writer's model.
        max_rounds: Most critiques (so at most ``max_rounds - 1`` revisions).
        critic_bridge: The critic's bridge (default: ``bridge``).
        critic_model: The critic's model (default: ``model``).
        system: The writer's system prompt.
        critic_system: The critic's system prompt (it states the approval convention).
        stop: ``stop(critique)`` True: the draft is approved (default :func:`approved`).
        memory: A MemoryStore: facts recalled for the task into the writer's calls.
        max_tokens: ``ChatRequest.max_tokens`` of each call.
        checkpointer: Where the run's steps are written (default: in memory).
        interrupt_before: Nodes to pause before (``revise``: a human sees each critique).
        interrupt_after: Nodes to pause after.
        name: The graph's name.
        tenant: ``ChatRequest.tenant``.

    Raises:
        ConfigError: A bad bound.
    """
    check_bound("create_reflection_agent: max_rounds", max_rounds)
    critic = critic_bridge if critic_bridge is not None else bridge
    judge_model = critic_model or model

    def task_of(state: dict[str, Any]) -> str:
        task = state.get("task")
        if not isinstance(task, str) or not task.strip():
            raise InputError('the reflection agent has no task; invoke it with {"task": "..."}')
        return task

    async def write(state: dict[str, Any], ctx: NodeContext, turns: list[Message]) -> str:
        facts = None
        if memory is not None:
            facts = facts_block(await recall_facts(memory, task_of(state)))
        request = ChatRequest(
            model=model, messages=tuple(turns), system=system, facts=facts,
            max_tokens=max_tokens, tenant=tenant,
        )  # fmt: skip
        return (await call_model(ctx, bridge, request)).text

    async def generate(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        draft = await write(state, ctx, [Message("user", task_of(state))])
        return {"draft": draft, "rounds": 0, "critique": "", "stop_reason": ""}

    async def critique(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        shown = f"Task:\n{task_of(state)}\n\nDraft:\n{state.get('draft', '')}"
        request = ChatRequest(
            model=judge_model, messages=(Message("user", shown),), system=critic_system,
            max_tokens=max_tokens, tenant=tenant,
        )  # fmt: skip
        said = (await call_model(ctx, critic, request)).text
        rounds = int(state.get("rounds") or 0) + 1
        update: dict[str, Any] = {
            "critique": said,
            "rounds": rounds,
            "history": [{"round": rounds, "draft": state.get("draft", ""), "critique": said}],
        }
        if stop(said):
            update["stop_reason"] = APPROVED
        elif rounds >= max_rounds:
            update["stop_reason"] = MAX_ROUNDS
        return update

    async def revise(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        turns = [
            Message("user", task_of(state)),
            Message("assistant", str(state.get("draft", ""))),
            Message(
                "user",
                f"A reviewer's critique of your answer:\n{state.get('critique', '')}\n\n"
                "Write the whole answer again with these changes.",
            ),
        ]
        return {"draft": await write(state, ctx, turns)}

    def route(state: dict[str, Any]) -> str:
        return END if state.get("stop_reason") in (APPROVED, MAX_ROUNDS) else "revise"

    graph = AgentGraph(ReflectionState, name=name)
    graph.add_node("generate", generate).add_node("critique", critique)
    graph.add_node("revise", revise)
    graph.add_edge(START, "generate").add_edge("generate", "critique")
    graph.add_edge("revise", "critique")
    graph.add_conditional_edges("critique", route, {"revise": "revise", END: END})
    return graph.compile(
        checkpointer,
        interrupt_before=interrupt_before,
        interrupt_after=interrupt_after,
        recursion_limit=2 * max_rounds + 1,
    )
