"""Single-flight: identical cacheable misses in flight at once make one upstream call
(browser-safe: standard library only).

:class:`~evermind.bridges.caching.CachingBridge` gives each miss a flight id (its cache
namespace and exact query). The first miss of an id *leads*: it calls upstream and stores the
answer, then :meth:`Flights.land` s. Every identical miss that arrives meanwhile *follows*:
it waits (:meth:`Flights.wait`) and looks the cache up again, where the leader's answer now
is. So 20 identical concurrent requests cost one paid call.

- The leader's error is every follower's: :meth:`Flights.wait` raises it (an upstream that
  refused one identical request refuses them all; nothing is retried 20 times).
- A leader that is cancelled, or whose answer is not stored, lands with no error: followers
  look up again, miss, and the first of them leads a new flight. Nothing waits forever.
- A follower that is cancelled stops waiting; the flight goes on (it is shielded).
- A flight that is started but never landed (its outcome dropped unused) lands when the
  object that holds it is collected (:meth:`Flights.tie`).

:meth:`Flights.landed` counts landings per id, so a lookup that raced a landing (it began
before the answer was stored and ended after the flight was gone) can tell, and look again
instead of leading a second call.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["Flight", "Flights"]

#: Ids whose landing counts are remembered (the oldest forgotten first).
MAX_REMEMBERED = 4096


class Flight:
    """One leader's call in flight: its id and the future its followers wait on."""

    __slots__ = ("future", "key")

    def __init__(self, key: Hashable, future: asyncio.Future[None]) -> None:
        self.key = key
        self.future = future


class Flights:
    """The flights in progress, by id (see the module docstring)."""

    def __init__(self) -> None:
        self._open: dict[Hashable, Flight] = {}
        self._landed: OrderedDict[Hashable, int] = OrderedDict()
        self.coalesced = 0  # followers that waited for a leader

    def __len__(self) -> int:
        return len(self._open)

    def landed(self, key: Hashable) -> int:
        """How many flights of ``key`` have landed (as far as is remembered)."""
        return self._landed.get(key, 0)

    def current(self, key: Hashable) -> Flight | None:
        """The flight of ``key`` in progress, if any."""
        return self._open.get(key)

    async def wait(self, flight: Flight) -> None:
        """Waits until ``flight`` lands (cancelling the waiter leaves the flight alone).

        Raises:
            BaseException: The leader's error, when its call failed.
        """
        self.coalesced += 1
        await asyncio.shield(flight.future)

    def start(self, key: Hashable) -> Flight:
        """Opens the flight of ``key`` (there is none; the caller leads it)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        flight = self._open[key] = Flight(key, future)
        return flight

    def tie(self, flight: Flight, owner: object) -> None:
        """Lands ``flight`` when ``owner`` (what the leader holds it by) is collected, if it
        has not landed by then."""
        weakref.finalize(owner, self._abandoned, flight)

    def land(self, flight: Flight, error: BaseException | None = None) -> None:
        """Ends ``flight``: followers wake (with ``error`` raised, when given). Idempotent."""
        if self._open.get(flight.key) is flight:
            del self._open[flight.key]
            self._landed[flight.key] = self._landed.pop(flight.key, 0) + 1
            while len(self._landed) > MAX_REMEMBERED:
                self._landed.popitem(last=False)
        future = flight.future
        if future.done():
            return
        if error is None or isinstance(error, asyncio.CancelledError | GeneratorExit):
            future.set_result(None)  # abandoned or stored: followers look again
        else:
            future.set_exception(error)
            future.exception()  # retrieved here: no "never retrieved" warning without followers

    def _abandoned(self, flight: Flight) -> None:
        """Lands a flight whose owner was collected before it landed."""
        if flight.future.done():
            return
        try:
            flight.future.get_loop().call_soon_threadsafe(self.land, flight)
        except RuntimeError:  # the loop is closed: nobody can be waiting
            self._open.pop(flight.key, None)
