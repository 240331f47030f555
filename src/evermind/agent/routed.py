"""A bridge that asks the router, then calls the local SSM or the frontier model (browser-safe).

:class:`RoutedBridge` is what ``model: "evermind/auto"`` means: per request,
:meth:`InferenceRouter.decide` picks ``local`` or ``frontier``; the request goes to that
bridge (for the frontier, renamed to the configured frontier model); the completion comes
back with ``route = (target, reason)``. A frontier call's price is charged to the tenant's
budget (:meth:`InferenceRouter.record`) and, where the deployment collects them, the answer
is handed to ``collect`` (e.g. :meth:`DistillationEngine.collect`).

The decision runs the local model over the prompt (its surprise), which costs CPU: the
runtime passes ``offload`` (run a function on its worker pool) so the event loop never does
it; without ``offload`` it runs inline (fine in the tab and in scripts).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from evermind.agent.router import FRONTIER, InferenceRouter, RouteDecision
from evermind.bridges.base import Bridge, ChatRequest, Completion, Delta, Usage

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: ``offload(fn, arg)``: run ``fn(arg)`` off the event loop and await its result.
Offload = Callable[[Callable[[Any], Any], Any], Awaitable[Any]]
#: Called with every finished frontier call (request as sent, completion).
Collect = Callable[[ChatRequest, Completion], object]


class RoutedBridge:
    """The local or the frontier bridge, per request, as the router decides.

    Args:
        router: Decides each request (and keeps the tenant budgets).
        local: The local Evermind model's bridge.
        frontier: The frontier model's bridge (e.g. the gateway's caching bridge to it).
        frontier_model: The model name the frontier bridge is asked for.
        collect: Receives each frontier call that was paid for (not cache hits).
        offload: Runs the decision off the event loop (see the module docstring).
        on_decision: Called with each decision (e.g. to count it in ``/metrics``).
    """

    provider = "evermind"

    def __init__(
        self,
        router: InferenceRouter,
        local: Bridge,
        frontier: Bridge,
        frontier_model: str,
        collect: Collect | None = None,
        offload: Offload | None = None,
        on_decision: Callable[[ChatRequest, RouteDecision], object] | None = None,
    ) -> None:
        self.router = router
        self.local = local
        self.frontier = frontier
        self.frontier_model = frontier_model
        self._collect = collect
        self._offload = offload
        self._on_decision = on_decision
        self._last_usage: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        return self._last_usage

    async def decide(self, request: ChatRequest) -> RouteDecision:
        """The router's decision for ``request`` (off the loop when ``offload`` is set)."""
        if self._offload is None:
            decision = self.router.decide(request)
        else:
            decision = await self._offload(self.router.decide, request)
        if self._on_decision is not None:
            self._on_decision(request, decision)
        return decision

    def _target(self, decision: RouteDecision, request: ChatRequest) -> tuple[Bridge, ChatRequest]:
        if decision.target == FRONTIER:
            return self.frontier, dataclasses.replace(request, model=self.frontier_model)
        return self.local, request

    def _finish(
        self, decision: RouteDecision, sent: ChatRequest, completion: Completion
    ) -> Completion:
        self._last_usage = completion.usage
        if decision.target == FRONTIER and completion.cached is None:
            self.router.record(sent, completion)
            if self._collect is not None:
                try:
                    self._collect(sent, completion)
                except Exception:  # collecting is best effort: the answer is served anyway
                    logger.warning("routed: collecting a frontier answer failed", exc_info=True)
        return dataclasses.replace(completion, route=(decision.target, decision.reason))

    async def generate(self, request: ChatRequest) -> Completion:
        """Decides, then generates with the chosen bridge."""
        decision = await self.decide(request)
        bridge, sent = self._target(decision, request)
        return self._finish(decision, sent, await bridge.generate(sent))

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Decides, then streams from the chosen bridge; the last delta carries the route."""
        decision = await self.decide(request)
        bridge, sent = self._target(decision, request)
        pieces = bridge.stream(sent)
        try:
            async for delta in pieces:
                if delta.completion is not None:
                    yield Delta(delta.text, self._finish(decision, sent, delta.completion))
                else:
                    yield delta
        finally:
            closing = getattr(pieces, "aclose", None)
            if closing is not None:
                await closing()

    async def aclose(self) -> None:
        """The bridges belong to whoever built them: nothing to close here."""
