"""What a running node can reach: its name, step, thread and run, ``interrupt`` and cost.

Browser-safe (standard library only). A node that takes a second parameter receives its
:class:`NodeContext`; any code inside a node reaches the same object with :func:`context`,
and asks a human with :func:`interrupt`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

from evermind.agent.graph.errors import GraphInterrupt
from evermind.errors import GraphError

_current: contextvars.ContextVar[NodeContext] = contextvars.ContextVar("evermind_graph_node")


class NodeContext:
    """One execution of one node.

    Attributes:
        node: The node's name.
        step: The superstep.
        thread_id: The thread (the durable run history).
        run_id: This call of ``invoke`` / ``resume`` (a thread has one per call).
        cost_usd: Dollars this execution's model calls cost, as recorded.
        input_tokens: Input tokens recorded.
        output_tokens: Output tokens recorded.
        calls: Model calls recorded.
    """

    def __init__(
        self, node: str, step: int, thread_id: str, run_id: str, answers: Sequence[Any] = ()
    ) -> None:
        self.node = node
        self.step = step
        self.thread_id = thread_id
        self.run_id = run_id
        self.cost_usd = 0.0
        self.input_tokens = 0
        self.output_tokens = 0
        self.calls = 0
        self._answers = list(answers)
        self._asked = 0

    def restart(self) -> None:
        """A new attempt of the node: its ``interrupt()`` calls count from the first again."""
        self._asked = 0

    def interrupt(self, payload: Any = None) -> Any:
        """Asks a human: the first run stops here (the payload shown by ``get_state``); after
        ``resume(thread_id, value)`` the node runs again from its start and this call returns
        ``value``. The n-th call of a node is matched to the n-th answer.

        Args:
            payload: What to show (JSON): a question, a draft to approve.
        """
        index = self._asked
        self._asked += 1
        if index < len(self._answers):
            return self._answers[index]
        raise GraphInterrupt(self.node, index, payload)

    def record(self, completion: Any) -> None:
        """Adds a model call's cost and tokens to this node (and so to the run).

        Args:
            completion: A :class:`~evermind.bridges.Completion` (its ``cost_usd`` and
                ``usage``), or anything with those attributes; ``cost_usd`` None counts 0.
        """
        self.calls += 1
        self.cost_usd += float(getattr(completion, "cost_usd", None) or 0.0)
        usage = getattr(completion, "usage", None)
        if usage is not None:
            self.input_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            self.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)

    async def generate(self, bridge: Any, request: Any) -> Any:
        """``await bridge.generate(request)``, recorded: the usual way a node calls a model.

        Args:
            bridge: Any :class:`~evermind.bridges.Bridge`.
            request: A :class:`~evermind.bridges.ChatRequest`.
        """
        completion = await bridge.generate(request)
        self.record(completion)
        return completion

    def usage(self) -> dict[str, Any]:
        """What is recorded, as stored with the node's update."""
        return {
            "cost_usd": self.cost_usd,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "calls": self.calls,
        }


def context() -> NodeContext:
    """The running node's context.

    Raises:
        GraphError: Called outside a node of a running graph.
    """
    ctx = _current.get(None)
    if ctx is None:
        raise GraphError("no graph node is running here; call this inside a node function")
    return ctx


def interrupt(payload: Any = None) -> Any:
    """Asks a human from inside a node (see :meth:`NodeContext.interrupt`)."""
    return context().interrupt(payload)


def enter(ctx: NodeContext) -> contextvars.Token[NodeContext]:
    """Makes ``ctx`` the running node's context (the runner's, once per node task)."""
    return _current.set(ctx)
