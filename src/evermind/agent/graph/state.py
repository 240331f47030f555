"""A graph's typed state: its keys, each key's reducer, and how a superstep's updates merge.

Browser-safe (standard library only). The schema is a ``TypedDict`` or a dataclass; a key
annotated ``Annotated[T, reducer]`` merges writes with ``reducer(current, written)`` (for
example ``Annotated[list, operator.add]`` appends); any other key keeps the last value
written, and two writes to it in one superstep are an :class:`InvalidUpdate` naming the key
and the nodes, since the order of parallel nodes is no order a user chose.

The stored state is JSON (the checkpointers write it as JSON): values are ``None``, bools,
numbers, strings, lists and dicts with string keys. A tuple comes back as a list.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evermind.agent.graph.errors import InvalidUpdate
from evermind.errors import ConfigError, InputError

Reducer = Callable[[Any, Any], Any]
_MISSING = object()


@dataclass(frozen=True)
class Channel:
    """One key of the state.

    Attributes:
        name: The key.
        reducer: How a write merges into the current value (None: the write replaces it).
        initial: Makes the value a key starts from (None: the key starts absent).
    """

    name: str
    reducer: Reducer | None
    initial: Callable[[], Any] | None


def _empty_of(hint: Any) -> Callable[[], Any] | None:
    """``list`` for ``list[str]``, ``dict`` for ``dict[str, int]``: the empty value to reduce
    into, when the type can make one with no arguments."""
    origin = typing.get_origin(hint) or hint
    if isinstance(origin, type) and origin in (list, dict, int, float, str):
        return origin
    return None


def _reducer_of(name: str, hint: Any) -> Reducer | None:
    if typing.get_origin(hint) is not typing.Annotated:
        return None
    found = [m for m in hint.__metadata__ if callable(m)]
    if len(found) > 1:
        raise ConfigError(f"state key {name!r} has {len(found)} reducers; give it one")
    return found[0] if found else None


class StateSchema:
    """The keys of a state class and how to build, merge and show its values.

    Args:
        schema: A ``TypedDict`` class or a dataclass.

    Raises:
        ConfigError: ``schema`` is neither, or has no keys.
    """

    def __init__(self, schema: type) -> None:
        self.schema = schema
        self.is_dataclass = dataclasses.is_dataclass(schema)
        if not (self.is_dataclass or typing.is_typeddict(schema)):
            raise ConfigError(
                f"state schema {getattr(schema, '__name__', schema)!r} is not a TypedDict or a "
                "dataclass; declare the state as `class State(TypedDict): ...`"
            )
        try:
            hints = typing.get_type_hints(schema, include_extras=True)
        except NameError as err:
            raise ConfigError(
                f"state schema {schema.__name__!r}: an annotation does not resolve ({err}); "
                "import the names it uses in the schema's module"
            ) from err
        if not hints:
            raise ConfigError(f"state schema {schema.__name__!r} has no keys")
        defaults: dict[str, Callable[[], Any]] = {}
        self.required: set[str] = set()
        if self.is_dataclass:
            for f in dataclasses.fields(schema):
                if f.default is not dataclasses.MISSING:
                    defaults[f.name] = functools.partial(copy.deepcopy, f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    defaults[f.name] = f.default_factory
                else:
                    self.required.add(f.name)
        self.channels: dict[str, Channel] = {}
        for name, hint in hints.items():
            reducer = _reducer_of(name, hint)
            base = typing.get_args(hint)[0] if reducer is not None else hint
            initial = defaults.get(name) or (_empty_of(base) if reducer is not None else None)
            self.channels[name] = Channel(name, reducer, initial)
        if self.is_dataclass:
            # A reducer key without a default is given its empty value: it is not required.
            self.required -= {n for n, c in self.channels.items() if c.initial is not None}

    @property
    def name(self) -> str:
        return self.schema.__name__

    def initial(self) -> dict[str, Any]:
        """The values a new thread starts from (keys with a default or an empty value)."""
        return {n: c.initial() for n, c in self.channels.items() if c.initial is not None}

    def check_complete(self, values: Mapping[str, Any]) -> None:
        """Raises InputError when a dataclass field without a default has no value."""
        missing = sorted(self.required - set(values))
        if missing:
            raise InputError(
                f"the input leaves {', '.join(map(repr, missing))} of {self.name} unset, and "
                "they have no default; pass them in the input"
            )

    def view(self, values: Mapping[str, Any]) -> Any:
        """What a node or a router receives: a private copy, as the schema's type."""
        mine = copy.deepcopy(dict(values))
        return self.schema(**mine) if self.is_dataclass else mine

    def check_keys(self, node: str, update: Mapping[str, Any]) -> None:
        """Raises InvalidUpdate when ``update`` names a key the state does not have."""
        for key in update:
            if key not in self.channels:
                raise InvalidUpdate(
                    f"node {node!r} wrote {key!r}, which is not a key of {self.name} "
                    f"(keys: {', '.join(self.channels)})"
                )

    def merge(
        self, values: Mapping[str, Any], writes: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> dict[str, Any]:
        """The values after one superstep's writes, ``(node, update)`` in a fixed order.

        Raises:
            InvalidUpdate: An unknown key, or two writes to a key without a reducer.
        """
        writers: dict[str, list[str]] = {}
        for node, update in writes:
            self.check_keys(node, update)
            for key in update:
                writers.setdefault(key, []).append(node)
        for key, nodes in writers.items():
            if len(nodes) > 1 and self.channels[key].reducer is None:
                raise InvalidUpdate(
                    f"state key {key!r} was written by {', '.join(map(repr, nodes))} in the "
                    "same superstep but has no reducer; annotate it, e.g. "
                    f"`{key}: Annotated[list, operator.add]`, or let one node write it"
                )
        merged = copy.deepcopy(dict(values))
        for node, update in writes:
            for key, value in update.items():
                channel = self.channels[key]
                if channel.reducer is None:
                    merged[key] = copy.deepcopy(value)
                    continue
                current = merged.get(key, _MISSING)
                if current is _MISSING:
                    current = channel.initial() if channel.initial is not None else None
                try:
                    merged[key] = channel.reducer(current, copy.deepcopy(value))
                except Exception as err:
                    raise InvalidUpdate(
                        f"the reducer of {key!r} failed on node {node!r}'s write: {err}"
                    ) from err
        return merged


def as_update(node: str, result: Any) -> dict[str, Any]:
    """A node's return value as an update dict (None: no update), checked to be JSON.

    Raises:
        InvalidUpdate: Not a dict with string keys, or a value JSON cannot hold.
    """
    if result is None:
        return {}
    if not isinstance(result, Mapping):
        raise InvalidUpdate(
            f"node {node!r} returned {type(result).__name__}; expected a dict of the state "
            "keys it updates (or None)"
        )
    update = dict(result)
    for key, value in update.items():
        if not isinstance(key, str):
            raise InvalidUpdate(f"node {node!r} returned a non-string key {key!r}")
        check_json(value, f"node {node!r}'s value of {key!r}")
    return update


def check_json(value: Any, what: str) -> None:
    """Raises InvalidUpdate when ``value`` cannot be stored as JSON."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InvalidUpdate(
            f"{what} cannot be stored: {err}; state values are JSON (dicts, lists, strings, "
            "numbers, booleans, None)"
        ) from err
