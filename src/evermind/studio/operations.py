"""Long Studio operations that a person can cancel, cooperatively (browser-safe).

An operation over a couple of seconds (the default corpus's harvest, tokenizer training with
its first pass, the embedder phase's centring and distillation, Compare's calibration, the
Memory panel's embedding of stored memories before a recall or remember, the Data panel's
embedding of the chunks it sends to memory, the Cache panel's embedding of the cached
questions before a lookup or store) runs inside
:func:`operation`: it reports its progress through the session's events and calls
:meth:`Operation.check` between its batches. The ``operation_cancel`` RPC marks it cancelled;
the next check raises :class:`Cancelled`, so the work stops at a batch boundary and the
operation keeps nothing it half made (its caller stores a result only once it is whole).
The check is cooperative: the loop must ``await`` between batches for the cancel call to be
delivered (the worker runs one Python thread; a call arrives only while a loop awaits), or,
in synchronous code (tokenizer training), call :func:`yield_to_page` first.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from evermind.errors import ConfigError, EvermindError


class Cancelled(EvermindError):
    """The user cancelled a long Studio operation; nothing of it was kept."""

    code = "cancelled"


#: The operations that can be cancelled, by the name the page sends.
NAMES = frozenset({"cache", "corpus", "embedder", "ingest", "memory", "similarity", "tokenizer"})


@dataclass
class Operation:
    """One running operation: its name, when it began, and whether it was cancelled."""

    name: str
    started: float = field(default_factory=time.monotonic)
    cancelled: bool = False

    def check(self) -> None:
        """Raises :class:`Cancelled` when a cancel was asked since the operation began."""
        if self.cancelled:
            raise Cancelled(f"{self.name}: cancelled after {time.monotonic() - self.started:.1f} s")


_running: dict[str, Operation] = {}


@contextmanager
def operation(name: str) -> Iterator[Operation]:
    """Registers ``name`` as running for the block; a second one of the same name replaces
    the first's registration (the page runs one of each at a time)."""
    if name not in NAMES:
        raise ConfigError(f"operation: unknown name {name!r}; expected one of {sorted(NAMES)}")
    op = Operation(name)
    _running[name] = op
    try:
        yield op
    finally:
        if _running.get(name) is op:
            del _running[name]


def yield_to_page() -> None:
    """From synchronous code in the tab, lets the page's pending calls run (a cancel among
    them) before going on; natively, and where the stack cannot be suspended, nothing.

    Pyodide's ``run_sync`` suspends this WebAssembly stack (JS Promise integration) until
    ``asyncio.sleep(0)`` resolves, so the worker's event loop delivers what the page sent
    meanwhile. It is imported here, on first use, like ``bridges/fetch.py``'s ``pyodide.http``.
    """
    if sys.platform != "emscripten":
        return
    from pyodide.ffi import can_run_sync, run_sync

    if can_run_sync():
        run_sync(asyncio.sleep(0))


def cancel(name: str) -> bool:
    """Asks the running operation ``name`` to stop; False when none runs."""
    if name not in NAMES:
        raise ConfigError(
            f"operation_cancel: unknown name {name!r}; expected one of {sorted(NAMES)}"
        )
    op = _running.get(name)
    if op is None:
        return False
    op.cancelled = True
    return True


__all__ = ["NAMES", "Cancelled", "Operation", "cancel", "operation", "yield_to_page"]
