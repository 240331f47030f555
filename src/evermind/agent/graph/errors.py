"""The errors an agent graph's run raises (branches of :class:`~evermind.errors.GraphError`).

Browser-safe (standard library only). :class:`GraphInterrupt` is not an error: it is how
:func:`~evermind.agent.graph.interrupt` stops a node to ask a human, caught by the runner.
"""

from __future__ import annotations

from typing import Any

from evermind.errors import GraphError


class NodeError(GraphError):
    """A node, or the router of its conditional edges, raised.

    Attributes:
        node: The node's name.
        step: The superstep it ran in.
    """

    code = "node_failed"

    def __init__(self, message: str, *, node: str, step: int) -> None:
        super().__init__(message)
        self.node = node
        self.step = step

    def __reduce__(self) -> tuple[Any, ...]:
        return (_node_error, (str(self), self.node, self.step))


def _node_error(message: str, node: str, step: int) -> NodeError:
    return NodeError(message, node=node, step=step)


class InvalidUpdate(GraphError):
    """A node returned an update the state cannot take: not a dict, an unknown key, a value
    that is not JSON, or two writes to a key without a reducer in one superstep."""

    code = "invalid_update"


class GraphRecursionError(GraphError):
    """A run took more supersteps than its ``recursion_limit`` (a loop that never ends?)."""

    code = "recursion_limit"


class GraphInterrupt(Exception):
    """Raised by :func:`~evermind.agent.graph.interrupt` inside a node to stop the run.

    A node must let it through (an ``except Exception`` that swallows it keeps the node
    running without the human's answer).

    Attributes:
        node: The node that asked.
        index: Which ``interrupt()`` call of that node it is (0: the first).
        payload: What the node showed the human (JSON).
    """

    def __init__(self, node: str, index: int, payload: Any) -> None:
        super().__init__(f"node {node!r} asks for input: {payload!r}")
        self.node = node
        self.index = index
        self.payload = payload
