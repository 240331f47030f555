"""The shape of a graph as the runner reads it: START, END, nodes and conditional edges.

Browser-safe (standard library only). :class:`~evermind.agent.graph.builder.AgentGraph`
builds a :class:`GraphShape`; :class:`~evermind.agent.graph.runner.CompiledGraph` runs one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from evermind.agent.graph.state import StateSchema
from evermind.errors import ConfigError

START = "__start__"
END = "__end__"
#: Supersteps one ``invoke`` / ``resume`` may run unless told otherwise.
DEFAULT_RECURSION_LIMIT = 25


@dataclass(frozen=True)
class Node:
    """A node: its name, what runs, whether it takes the :class:`NodeContext` too, and how
    often an exception it raises is retried (waiting ``retry_backoff_s``, doubling)."""

    name: str
    fn: Callable[..., Any]
    takes_context: bool
    retries: int = 0
    retry_backoff_s: float = 0.5


@dataclass(frozen=True)
class Branch:
    """Conditional edges out of ``source``: ``router(state)`` returns a key (or a list of
    keys) that ``mapping`` turns into node names; without a mapping the keys are names."""

    source: str
    router: Callable[[Any], Any]
    mapping: dict[Hashable, str] | None
    targets: frozenset[str] | None  # None: not knowable (no mapping, no Literal hint)

    def resolve(self, result: Any) -> list[str]:
        """The node names (END included) a router's result picks, in order.

        Raises:
            ConfigError: A key that is not in the mapping, or not a node.
        """
        keys = result if isinstance(result, list | tuple) else [result]
        names = []
        for key in keys:
            if self.mapping is not None:
                if key not in self.mapping:
                    raise ConfigError(
                        f"the router of {self.source!r} returned {key!r}; its mapping has "
                        f"{', '.join(map(repr, self.mapping))}"
                    )
                names.append(self.mapping[key])
            elif isinstance(key, str):
                names.append(key)
            else:
                raise ConfigError(
                    f"the router of {self.source!r} returned {key!r}; expected a node name"
                )
        return names


class GraphShape(Protocol):
    """What the runner reads of a graph."""

    name: str
    state: StateSchema
    nodes: dict[str, Node]
    edges: dict[str, list[str]]
    joins: list[tuple[tuple[str, ...], str]]
    branches: dict[str, list[Branch]]
