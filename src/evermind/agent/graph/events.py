"""What a graph run reports: the events ``stream`` yields, the result, the state snapshots.

Browser-safe (standard library only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Interrupt:
    """Why a thread waits.

    Attributes:
        node: The node.
        kind: ``before`` / ``after`` (``interrupt_before`` / ``interrupt_after`` paused the
            run before or after it: resume with no value) or ``ask`` (the node called
            ``interrupt(payload)``: resume with a value).
        index: Which ``interrupt()`` call of the node (0 for a pause).
        payload: What the node showed (None for ``before``).
    """

    node: str
    kind: Literal["before", "after", "ask"]
    index: int = 0
    payload: Any = None


@dataclass(frozen=True)
class StepEvent:
    """One superstep finished and was checkpointed.

    Attributes:
        thread_id: The thread.
        run_id: The call of ``invoke`` / ``resume`` running it.
        step: The superstep's number (0 is the first after the input).
        updates: What each node that ran wrote, by node name.
        next: The nodes the next step runs (empty: done).
        checkpoint_id: The checkpoint written.
        cost_usd: What the step's model calls cost (as nodes recorded them).
    """

    thread_id: str
    run_id: str
    step: int
    updates: dict[str, dict[str, Any]]
    next: list[str]
    checkpoint_id: str
    cost_usd: float


@dataclass(frozen=True)
class RunResult:
    """How a call of ``invoke`` / ``resume`` ended (the last item ``stream`` yields).

    Attributes:
        thread_id: The thread (resume it with this id).
        run_id: This call.
        status: ``done`` (nothing left to run) or ``interrupted`` (see ``interrupts``).
        values: The state (JSON: a dict, whatever the schema's type).
        next: The nodes still to run.
        interrupts: Why it waits (empty when done).
        checkpoint_id: The latest checkpoint.
        steps: Supersteps this call ran.
        cost_usd: What this call's steps cost.
        thread_cost_usd: What every step of the thread has cost so far.
    """

    thread_id: str
    run_id: str
    status: Literal["done", "interrupted"]
    values: dict[str, Any]
    next: list[str]
    interrupts: list[Interrupt]
    checkpoint_id: str
    steps: int
    cost_usd: float
    thread_cost_usd: float


@dataclass(frozen=True)
class StateSnapshot:
    """A thread at one checkpoint (what ``get_state`` and ``get_state_history`` return).

    Attributes:
        thread_id: The thread.
        checkpoint_id: The checkpoint.
        parent_id: The checkpoint before it ("" for the first).
        step: Its superstep (-1: the input).
        values: The state.
        next: The nodes the next step runs.
        metadata: ``source``, ``run_id``, ``writes``, ``cost_usd`` by node, ``forked_from``.
        created_at: Unix time.
        interrupts: Why the thread waits here (only on its latest checkpoint).
        cost_usd: What the step that made it cost.
    """

    thread_id: str
    checkpoint_id: str
    parent_id: str
    step: int
    values: dict[str, Any]
    next: list[str]
    metadata: dict[str, Any]
    created_at: float
    interrupts: list[Interrupt] = field(default_factory=list)
    cost_usd: float = 0.0
