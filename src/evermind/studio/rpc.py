"""What every Studio RPC handler module shares: :class:`Router`, the event emitter, the session.

Each handler module (``api``, ``memory_api``, ``ingest_api``, ``bench_api``) builds its own
``Router`` and imports this module (``ingest_api`` also ``memory_api.tab_memory``, so files
sent from the Data panel land in the store the Memory panel reads); :mod:`evermind.studio.api`
merges the routers once into its handler table (as ``runtime/app.py`` includes its route
modules), so no handler module imports the module that dispatches to it. Browser-safe.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from evermind.errors import ConfigError
from evermind.studio.session import Session

Handler = Callable[..., Awaitable[Any]]


class Router:
    """A table of named async RPC handlers; ``@router.handler`` registers a function by name."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}

    def handler(self, fn: Handler) -> Handler:
        """Registers ``fn`` under its name.

        Raises:
            ConfigError: Another handler of this router already has that name.
        """
        if fn.__name__ in self.handlers:
            raise ConfigError(f"studio RPC: handler {fn.__name__!r} is registered twice")
        self.handlers[fn.__name__] = fn
        return fn


def merge(*routers: Router) -> dict[str, Handler]:
    """One handler table from ``routers``.

    Raises:
        ConfigError: Two routers register the same name.
    """
    table: dict[str, Handler] = {}
    for router in routers:
        for name, fn in router.handlers.items():
            if name in table:
                raise ConfigError(f"studio RPC: handler {name!r} is registered by two modules")
            table[name] = fn
    return table


_emitter: Callable[[str], None] | None = None


def set_emitter(emit: Callable[[str], None] | None) -> None:
    """Installs the callable that sends one JSON event string to the page."""
    global _emitter
    _emitter = emit


def emit(event: str, **fields: Any) -> None:
    """Sends ``{"event": event, ...fields}`` to the page (dropped when no emitter)."""
    if _emitter is not None:
        _emitter(json.dumps({"event": event, **fields}))


_session: Session | None = None


def session() -> Session:
    """The worker's one Studio session."""
    global _session
    if _session is None:
        _session = Session(emit)
    return _session


__all__ = ["Handler", "Router", "emit", "merge", "session", "set_emitter"]
