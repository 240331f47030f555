"""``model: "evermind/auto"``: the router before a local model and a frontier one (native-only).

Configured by an ``[auto]`` table in the ``--upstreams`` file::

    [auto]
    local = "evermind/notes:1.0.0"          # the tenant's installed model that answers locally
    frontier = "anthropic/claude-sonnet-4-5" # <upstream>/<model> of this file
    max_surprise = 1.6                      # router thresholds (RouterConfig; defaults measured
    max_local_prompt_tokens = 64            #   by evals/router.py --fit)
    local_context_tokens = 2048
    use_confidence = true
    budget_usd = 5.0                        # frontier spend per tenant (default: no limit)
    [auto.budgets]                          # per-tenant limits
    alpha = 20.0
    [auto.distill]                          # collect paid frontier answers (off by default)
    tenants = ["alpha"]                     # or all = true
    path = "/var/lib/evermind/pairs.db"     # default: <data dir>/distill/pairs.db

Per tenant, :class:`AutoBridge` loads the tenant's local model through the registry (so a
re-pushed ref is picked up), builds an :class:`~evermind.agent.router.InferenceRouter` for it
(the model's surprise as the confidence signal, its tokenizer's counts, the price table's
estimate against the budget), and serves the request through a
:class:`~evermind.agent.routed.RoutedBridge`: local answers run on the runtime's own
generation pool (the same fairness and limits as ``evermind/<ref>``), frontier ones through the
gateway's caching bridge to the configured upstream. Each decision is counted in ``/metrics``
(``evermind_router_decisions_total``) and logged with its reason. A local answer is a
``chat`` GenAI operation of provider ``evermind`` (docs/telemetry.md); a frontier one is the
caching bridge's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from evermind.agent.routed import RoutedBridge
from evermind.agent.router import Budget, InferenceRouter, RouteDecision
from evermind.bridges.base import Bridge, ChatRequest, Completion, Delta, Usage
from evermind.bridges.evermind import DEFAULT_TEMPERATURE, EvermindBridge
from evermind.bridges.pricing import PriceTable
from evermind.model.chat import CHAT_STOP
from evermind.model.inference import Model
from evermind.runtime.gateway.config import AUTO_MODEL as AUTO_MODEL
from evermind.runtime.gateway.config import AutoConfig
from evermind.runtime.generation import GenerationRequest, GenerationResult
from evermind.runtime.scheduler import Scheduler
from evermind.runtime.telemetry import failing, finish_generation, local_operation


class LocalBridge:
    """The tenant's local model as a bridge, on the runtime's generation pool.

    The prompt is the runtime's chat template (:meth:`EvermindBridge.prompt`), so
    ``evermind/auto`` answering locally says what ``evermind/<ref>`` would.
    """

    provider = "evermind"

    def __init__(
        self,
        generator: Scheduler,
        load: Callable[[], Awaitable[Model]],
        tenant: str,
        max_tokens_cap: int,
    ) -> None:
        self._generator = generator
        self._load = load
        self._tenant = tenant
        self._cap = max_tokens_cap
        self._last_usage: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        return self._last_usage

    def _request(self, request: ChatRequest) -> GenerationRequest:
        seed = request.extra.get("seed")
        return GenerationRequest(
            prompt=EvermindBridge.prompt(request),
            max_tokens=min(request.max_tokens or self._cap, self._cap),
            temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
            top_p=request.extra.get("top_p"),
            top_k=request.extra.get("top_k"),
            seed=None if seed is None else int(seed) % (1 << 64),
            stop=[*request.stop, CHAT_STOP],
            strip_leading=True,
        )

    def _completion(self, model: Model, result: GenerationResult) -> Completion:
        usage = Usage(input_tokens=result.prompt_tokens, output_tokens=result.completion_tokens)
        self._last_usage = usage
        return Completion(
            text=result.text,
            model=model.name,
            provider=self.provider,
            finish_reason=result.finish_reason,
            usage=usage,
        )

    async def generate(self, request: ChatRequest) -> Completion:
        model = await self._load()
        gen = self._request(request)
        with failing(local_operation("chat", model.name, gen)) as operation:
            result = await self._generator.complete(model, gen, self._tenant)
        finish_generation(operation, model.name, result)
        return self._completion(model, result)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        model = await self._load()
        gen = self._request(request)
        self._generator.admit(self._tenant)
        result = GenerationResult()
        pieces = self._generator.stream(model, gen, result, self._tenant)
        with failing(local_operation("chat", model.name, gen)) as operation:
            try:
                async for piece in pieces:
                    operation.first_chunk()
                    yield Delta(text=piece)
            finally:
                await pieces.aclose()
            finish_generation(operation, model.name, result)
        yield Delta(completion=self._completion(model, result))

    async def aclose(self) -> None:
        """The model belongs to the registry."""


class AutoBridge(RoutedBridge):
    """One tenant's ``evermind/auto``: a :class:`RoutedBridge` whose router follows the
    installed local model (rebuilt for it when the ref is pushed again).

    Args:
        config: The ``[auto]`` table.
        load: Loads the tenant's local model (the registry's current one for ``config.local``).
        local: The tenant's :class:`LocalBridge`.
        frontier: The gateway's bridge to the frontier upstream, and the model name it is asked.
        budget: The gateway's budgets (shared by every tenant's router).
        prices: The price table (the budget check's estimate).
        executor: Where the router reads the model's surprise.
        collect: Receives each paid frontier answer (distillation), or None.
        on_decision: Counts each decision.
    """

    def __init__(
        self,
        config: AutoConfig,
        load: Callable[[], Awaitable[Model]],
        local: Bridge,
        frontier: tuple[Bridge, str],
        budget: Budget,
        prices: PriceTable,
        executor: Executor,
        collect: Callable[[ChatRequest, Completion], object] | None,
        on_decision: Callable[[ChatRequest, RouteDecision], object],
    ) -> None:
        async def offload(fn: Callable[[Any], Any], arg: Any) -> Any:
            return await asyncio.get_running_loop().run_in_executor(executor, fn, arg)

        bridge, name = frontier
        # The router is built for the model at the first decision (see :meth:`decide`).
        super().__init__(
            InferenceRouter(config.router, budget=budget),
            local,
            bridge,
            name,
            collect=collect,
            offload=offload,
            on_decision=on_decision,
        )
        self._config = config
        self._load = load
        self._prices = prices
        self._model: Model | None = None

    async def decide(self, request: ChatRequest) -> RouteDecision:
        """The decision of the router for the local model as it is installed now."""
        model = await self._load()
        if model is not self._model:
            self.router = InferenceRouter.for_model(
                model, self._config.router, self.router.budget, self._prices
            )
            self._model = model
        return await super().decide(request)


def budget_of(config: AutoConfig) -> Budget:
    """The tenants' spend limits of ``config``."""
    return Budget(dict(config.budgets), config.budget_usd)
