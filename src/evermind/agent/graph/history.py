"""Reading a thread and travelling in time: ``get_state``, history, ``fork``, ``update_state``.

Browser-safe (standard library only). :class:`ThreadHistory` is the part of
:class:`~evermind.agent.graph.runner.CompiledGraph` that reads and writes checkpoints outside
a run: the state and what it waits for, every checkpoint of a thread, a fork into a new
thread from any of them, a human's edit as a new checkpoint.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from evermind.agent.graph.checkpoint import (
    AFTER,
    INTERRUPT,
    PAUSE,
    RESUME,
    UPDATE,
    Checkpoint,
    Checkpointer,
    PendingWrite,
)
from evermind.agent.graph.events import Interrupt, StateSnapshot
from evermind.agent.graph.state import StateSchema, as_update
from evermind.errors import Conflict, GraphError, InputError, NotFound


def new_id() -> str:
    """A fresh thread, run or checkpoint id."""
    return uuid.uuid4().hex[:16]


def pending_interrupts(writes: Sequence[PendingWrite]) -> list[Interrupt]:
    """What a checkpoint's pending writes still wait for (pauses not approved, questions not
    answered, of nodes that have not finished)."""
    finished = {w.node for w in writes if w.kind == UPDATE}
    answered = {(w.node, w.index) for w in writes if w.kind == RESUME}
    found = []
    for w in writes:
        if w.node in finished:
            continue
        if w.kind == PAUSE and not w.value.get("approved"):
            found.append(Interrupt(w.node, "after" if w.index == AFTER else "before"))
        elif w.kind == INTERRUPT and (w.node, w.index) not in answered:
            found.append(Interrupt(w.node, "ask", w.index, w.value))
    return found


def step_cost(checkpoint: Checkpoint) -> float:
    """Dollars the step that made ``checkpoint`` recorded."""
    return float(sum((checkpoint.metadata.get("cost_usd") or {}).values()))


class ThreadHistory:
    """Reads and edits a thread's checkpoints (the base of ``CompiledGraph``)."""

    checkpointer: Checkpointer
    state: StateSchema

    def get_state(self, thread_id: str) -> StateSnapshot:
        """The thread at its latest checkpoint, with what it waits for.

        Raises:
            NotFound: No such thread.
        """
        latest = self.checkpointer.latest(thread_id)
        if latest is None:
            raise NotFound(f"no thread {thread_id!r} in the checkpoint store")
        waits = pending_interrupts(self.checkpointer.writes(thread_id, latest.checkpoint_id))
        return _snapshot(latest, waits)

    def get_state_history(self, thread_id: str) -> list[StateSnapshot]:
        """Every checkpoint of the thread, newest first (the latest with its interrupts)."""
        history = self.checkpointer.history(thread_id)
        if not history:
            raise NotFound(f"no thread {thread_id!r} in the checkpoint store")
        head = self.get_state(thread_id)
        return [head, *(_snapshot(c, []) for c in history[1:])]

    def fork(
        self,
        thread_id: str,
        checkpoint_id: str,
        update: Mapping[str, Any] | None = None,
        *,
        new_thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """A new thread that starts at one checkpoint of ``thread_id`` (its state merged with
        ``update`` through the reducers, its next nodes the same); the original thread is not
        touched. Run it on with ``resume(new_thread_id)``; ``metadata`` is kept with the fork's
        first checkpoint. Returns the new thread's id.

        Raises:
            NotFound: No such checkpoint in that thread.
            InputError: The update does not fit the state.
            Conflict: ``new_thread_id`` is taken.
        """
        source = self.checkpointer.get(thread_id, checkpoint_id)
        if source is None:
            raise NotFound(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        new_thread = new_thread_id or new_id()
        if self.checkpointer.latest(new_thread) is not None:
            raise Conflict(f"thread {new_thread!r} exists; fork into a new thread id")
        values = self._updated(source.values, update)
        self.checkpointer.put(Checkpoint(
            new_thread, new_id(), "", source.step, values, list(source.next), source.waiting,
            {**(metadata or {}), "source": "fork", "forked_from": {"thread_id": thread_id,
                                               "checkpoint_id": checkpoint_id},
             "writes": {"fork": dict(update or {})}},
            time.time(),
        ))  # fmt: skip
        return new_thread

    def update_state(self, thread_id: str, update: Mapping[str, Any]) -> str:
        """Writes ``update`` (through the reducers) as a new checkpoint of the thread, which
        then goes on from it with the same next nodes; returns the checkpoint's id. A pause
        before a node stays (``resume`` goes on, as after the pause); a pending ``interrupt()``
        and its answers do not: the next step re-runs its nodes from their start."""
        latest = self.checkpointer.latest(thread_id)
        if latest is None:
            raise NotFound(f"no thread {thread_id!r} in the checkpoint store")
        checkpoint = Checkpoint(
            thread_id, new_id(), latest.checkpoint_id, latest.step + 1,
            self._updated(latest.values, update), list(latest.next), latest.waiting,
            {"source": "update", "writes": {"update": dict(update)}}, time.time(),
        )  # fmt: skip
        self.checkpointer.put(checkpoint)
        # A pause stays a pause across the edit: ``resume`` approves it as before.
        for w in self.checkpointer.writes(thread_id, latest.checkpoint_id):
            if w.kind == PAUSE:
                self.checkpointer.put_write(PendingWrite(
                    thread_id, checkpoint.checkpoint_id, w.node, PAUSE, w.index, w.value
                ))  # fmt: skip
        return checkpoint.checkpoint_id

    def _updated(self, values: dict[str, Any], update: Mapping[str, Any] | None) -> dict[str, Any]:
        if not update:
            return values
        try:
            return self.state.merge(values, [("update", as_update("update", update))])
        except GraphError as err:
            raise InputError(str(err)) from err


def _snapshot(c: Checkpoint, waits: list[Interrupt]) -> StateSnapshot:
    return StateSnapshot(
        c.thread_id, c.checkpoint_id, c.parent_id, c.step, c.values, list(c.next), c.metadata,
        c.created_at, waits, step_cost(c),
    )  # fmt: skip
