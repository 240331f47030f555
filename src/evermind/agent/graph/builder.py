"""``AgentGraph``: nodes, edges, conditional edges and joins, checked when compiled.

Browser-safe (standard library only). Build a graph, then :meth:`AgentGraph.compile` it into
a :class:`~evermind.agent.graph.runner.CompiledGraph`, which runs it. The checks at compile
time: every edge names known nodes, START leads somewhere, every node is reachable from
START, every reachable node has a path to END, ``interrupt_before`` names known nodes.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from evermind.agent.graph.checkpoint import Checkpointer, MemoryCheckpointer
from evermind.agent.graph.runner import CompiledGraph
from evermind.agent.graph.shape import DEFAULT_RECURSION_LIMIT, END, START, Branch, Node
from evermind.agent.graph.state import StateSchema
from evermind.errors import ConfigError


def _callable_of(name: str, node: Any) -> Callable[..., Any]:
    if callable(node):
        return typing.cast(Callable[..., Any], node)
    for method in ("run", "invoke"):
        found = getattr(node, method, None)
        if callable(found):
            return typing.cast(Callable[..., Any], found)
    raise ConfigError(
        f"node {name!r} is a {type(node).__name__}: expected a function state -> update, or "
        "an object with a run(state) method"
    )


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` wants a second positional argument (the node context): a second
    positional parameter without a default (``lambda s, n=name: ...`` takes none), or
    ``*args``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]  # fmt: skip
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _literal_targets(router: Callable[..., Any]) -> frozenset[str] | None:
    """The names a router's ``Literal[...]`` return hint allows (None: no such hint)."""
    try:
        hint = typing.get_type_hints(router).get("return")
    except Exception:
        return None
    if typing.get_origin(hint) is typing.Literal:
        return frozenset(str(a) for a in typing.get_args(hint))
    return None


class AgentGraph:
    """A graph of nodes over a typed state, run in supersteps.

    Args:
        state_schema: A ``TypedDict`` or dataclass; ``Annotated[T, reducer]`` keys merge
            writes with the reducer, other keys keep the last write.
        name: The graph's name in telemetry (default: the schema's name).
    """

    def __init__(self, state_schema: type, *, name: str = "") -> None:
        self.state = StateSchema(state_schema)
        self.name = name or self.state.name
        self.nodes: dict[str, Node] = {}
        self.edges: dict[str, list[str]] = {}
        self.joins: list[tuple[tuple[str, ...], str]] = []
        self.branches: dict[str, list[Branch]] = {}

    def add_node(
        self, name: str, node: Any, *, retries: int = 0, retry_backoff_s: float = 0.5
    ) -> AgentGraph:
        """Adds a node: a function (sync or async) ``state -> update dict`` (or ``(state,
        ctx)``), or an object with such a ``run`` / ``invoke`` method, or any callable.

        Args:
            name: The node's name.
            node: What runs.
            retries: How often an exception it raises is retried in the same step (a
                question, ``interrupt()``, and graph errors are not retried).
            retry_backoff_s: Seconds before the first retry, doubling after each.

        Raises:
            ConfigError: A reserved or taken name, nothing callable, a negative retry count.
        """
        if retries < 0 or retry_backoff_s < 0:
            raise ConfigError(
                f"node {name!r}: retries ({retries}) and retry_backoff_s ({retry_backoff_s}) "
                "must be >= 0"
            )
        if not isinstance(name, str) or not name or name in (START, END):
            raise ConfigError(f"node name {name!r} is reserved or empty; choose another")
        if name in self.nodes:
            raise ConfigError(f"node {name!r} is already in the graph")
        fn = _callable_of(name, node)
        self.nodes[name] = Node(name, fn, _takes_context(fn), retries, retry_backoff_s)
        return self

    def add_edge(self, source: str | Sequence[str], target: str) -> AgentGraph:
        """``target`` runs in the superstep after ``source``; with a list of sources, after
        all of them have run (a join: it waits for the slowest branch)."""
        if isinstance(source, str):
            self.edges.setdefault(source, []).append(target)
        else:
            sources = tuple(source)
            if not sources:
                raise ConfigError(f"add_edge: an empty list of sources for {target!r}")
            self.joins.append((sources, target))
        return self

    def add_conditional_edges(
        self,
        source: str,
        router: Callable[[Any], Any],
        mapping: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> AgentGraph:
        """After ``source``, ``router(state after the step)`` picks the next node(s).

        Args:
            source: The node (or START) the edges leave.
            router: Returns a node name, END, or a list of them (parallel branches); or a
                key of ``mapping``. Sync or async.
            mapping: Router keys to node names, or a list of the possible node names.
        """
        table: dict[Hashable, str] | None
        if mapping is None:
            table = None
            targets = _literal_targets(router)
        else:
            table = dict(mapping) if isinstance(mapping, Mapping) else {n: n for n in mapping}
            targets = frozenset(table.values())
        self.branches.setdefault(source, []).append(Branch(source, router, table, targets))
        return self

    def set_entry_point(self, node: str) -> AgentGraph:
        """Same as ``add_edge(START, node)``."""
        return self.add_edge(START, node)

    def successors(self, node: str) -> set[str]:
        """Every node (END included) that may run after ``node``; all nodes where a router's
        targets are not knowable."""
        found = set(self.edges.get(node, []))
        found |= {target for sources, target in self.joins if node in sources}
        for branch in self.branches.get(node, []):
            found |= branch.targets if branch.targets is not None else {*self.nodes, END}
        return found

    def validate(
        self, interrupt_before: Sequence[str] = (), interrupt_after: Sequence[str] = ()
    ) -> None:
        """Raises ConfigError naming the first problem of the graph's shape."""
        known = {*self.nodes, START, END}
        pairs = [(s, t) for s, ts in self.edges.items() for t in ts]
        pairs += [(s, t) for sources, t in self.joins for s in sources]
        pairs += [
            (b.source, t) for bs in self.branches.values() for b in bs for t in b.targets or ()
        ]
        for source in self.branches:
            if source not in known or source == END:
                raise ConfigError(
                    f"conditional edges leave the unknown node {source!r}; "
                    f"nodes: {', '.join(self.nodes) or '(none)'}"
                )
        for source, target in pairs:
            for end, name in (("source", source), ("target", target)):
                if name not in known:
                    raise ConfigError(
                        f"an edge {source!r} -> {target!r} names the unknown {end} node "
                        f"{name!r}; nodes: {', '.join(self.nodes) or '(none)'}"
                    )
            if target == START or source == END:
                raise ConfigError(f"an edge {source!r} -> {target!r} runs backwards")
        if not self.successors(START):
            raise ConfigError("nothing follows START; add add_edge(START, 'first node')")
        reach = self._reachable(START, self.successors)
        unreachable = [n for n in self.nodes if n not in reach]
        if unreachable:
            raise ConfigError(
                f"node(s) {', '.join(map(repr, unreachable))} cannot be reached from START; "
                "add an edge to them or remove them"
            )
        for node in [START, *self.nodes]:
            if END not in self._reachable(node, self.successors):
                raise ConfigError(
                    f"no path from {node!r} to END: a run that enters it never finishes; "
                    f"add add_edge(..., END) on its way"
                )
        for option, names in (("before", interrupt_before), ("after", interrupt_after)):
            for name in names:
                if name not in self.nodes:
                    raise ConfigError(
                        f"interrupt_{option} names {name!r}, which is not a node; "
                        f"nodes: {', '.join(self.nodes)}"
                    )

    @staticmethod
    def _reachable(start: str, successors: Callable[[str], set[str]]) -> set[str]:
        seen, frontier = {start}, [start]
        while frontier:
            for nxt in successors(frontier.pop()):
                if nxt not in seen:
                    seen.add(nxt)
                    if nxt != END:
                        frontier.append(nxt)
        return seen

    def compile(
        self,
        checkpointer: Checkpointer | None = None,
        *,
        interrupt_before: Sequence[str] = (),
        interrupt_after: Sequence[str] = (),
        recursion_limit: int = DEFAULT_RECURSION_LIMIT,
    ) -> CompiledGraph:
        """Checks the graph and returns what runs it.

        Args:
            checkpointer: Where supersteps are written (default: in memory, this process).
            interrupt_before: Nodes to pause before (the run stops; ``resume`` goes on).
            interrupt_after: Nodes to pause after: the step they ran in is checkpointed,
                then the run stops (unless it is done).
            recursion_limit: Supersteps one ``invoke`` / ``resume`` may run.

        Raises:
            ConfigError: The graph's shape is wrong (see :meth:`validate`).
        """
        self.validate(interrupt_before, interrupt_after)
        if recursion_limit < 1:
            raise ConfigError(f"recursion_limit must be at least 1, got {recursion_limit}")
        return CompiledGraph(
            self,
            checkpointer if checkpointer is not None else MemoryCheckpointer(),
            interrupt_before=tuple(interrupt_before),
            recursion_limit=recursion_limit,
            interrupt_after=tuple(interrupt_after),
        )
