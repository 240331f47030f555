"""Timing and cost on every call of any bridge (browser-safe).

:class:`InstrumentedBridge` wraps a bridge and sets, on each completion it returns,
``timing`` (time to the first token, measured on the stream at the first text delta; the
whole call for ``generate``; output tokens per second over the call) and ``cost_usd`` (the
usage priced by a :class:`~evermind.bridges.pricing.PriceTable`: None when the model is not
in the table). It keeps running totals, :meth:`InstrumentedBridge.totals`: calls, failures,
usage, dollars (of the priced calls) and how many calls could not be priced.

Every call is also a GenAI operation for :mod:`evermind.telemetry` (a ``chat {model}`` span
and its metrics, when telemetry is on): :func:`start_chat` and :func:`finish_chat` are the
one place a request and a completion become ``gen_ai.*`` attributes, for this bridge and
the caching one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from evermind.bridges.base import Bridge, ChatRequest, Completion, Delta, Timing, Usage
from evermind.bridges.pricing import PriceTable
from evermind.errors import UpstreamError
from evermind.telemetry import Operation, start_operation
from evermind.telemetry import genai as semconv


def start_chat(provider: str, request: ChatRequest) -> Operation:
    """The GenAI ``chat`` operation of one request (a no-op while telemetry is off)."""
    attributes: dict[str, int | float] = {}
    if request.max_tokens is not None:
        attributes[semconv.REQUEST_MAX_TOKENS] = request.max_tokens
    if request.temperature is not None:
        attributes[semconv.REQUEST_TEMPERATURE] = request.temperature
    return start_operation("chat", provider, request.model, attributes)


def finish_chat(
    operation: Operation, completion: Completion, cache: dict[str, Any] | None = None
) -> None:
    """Ends ``operation`` with what ``completion`` says (model, id, finish reason, usage, cost)
    and, from the caching bridge, how the cache served it (``cache``: ``evermind.cache.*``)."""
    if not operation.recording:
        return
    usage = completion.usage
    attributes: dict[str, Any] = {
        semconv.RESPONSE_FINISH_REASONS: [completion.finish_reason],
        semconv.USAGE_CACHE_READ_TOKENS: usage.cache_read_tokens,
        semconv.USAGE_CACHE_WRITE_TOKENS: usage.cache_write_tokens,
        **(cache or {}),
    }
    if completion.model:
        attributes[semconv.RESPONSE_MODEL] = completion.model
    if completion.id:
        attributes[semconv.RESPONSE_ID] = completion.id
    operation.finish(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.output_tokens,
        attributes=attributes,
        cost_usd=completion.cost_usd,
    )


class InstrumentedBridge:
    """A bridge that measures the bridge it wraps.

    Args:
        bridge: Any :class:`~evermind.bridges.base.Bridge`.
        prices: The price table (None: :meth:`PriceTable.load`, the shipped one with any
            ``EVERMIND_PRICES`` override).
    """

    def __init__(self, bridge: Bridge, prices: PriceTable | None = None) -> None:
        self.bridge = bridge
        self.prices = prices if prices is not None else PriceTable.load()
        self.provider = bridge.provider
        self.calls = 0
        self.failures = 0
        self.unpriced = 0
        self.usage = Usage()
        self.cost_usd = 0.0

    @property
    def last_usage(self) -> Usage | None:
        """The wrapped bridge's usage of its last finished call."""
        return self.bridge.last_usage

    async def generate(self, request: ChatRequest) -> Completion:
        """The wrapped bridge's completion, with ``timing`` and ``cost_usd`` set."""
        operation = start_chat(self.provider, request)
        start = time.perf_counter()
        try:
            with operation.current():
                completion = await self.bridge.generate(request)
        except BaseException as err:
            self.failures += isinstance(err, UpstreamError)
            operation.fail(err)
            raise
        total = time.perf_counter() - start
        measured = self._finish(request, completion, total, total)
        finish_chat(operation, measured)
        return measured

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """The wrapped bridge's deltas; the last carries the measured completion."""
        operation = start_chat(self.provider, request)
        start = time.perf_counter()
        first: float | None = None
        pieces = self.bridge.stream(request)
        try:
            while True:
                with operation.current():
                    delta = await anext(pieces, None)
                if delta is None:
                    break
                if delta.completion is None:
                    if first is None and delta.text:
                        first = time.perf_counter() - start
                        operation.first_chunk()
                    yield delta
                    continue
                total = time.perf_counter() - start
                completion = self._finish(
                    request, delta.completion, total if first is None else first, total
                )
                finish_chat(operation, completion)  # before the consumer may stop reading
                yield dataclasses.replace(delta, completion=completion)
        except BaseException as err:
            self.failures += isinstance(err, UpstreamError)
            operation.fail(err)
            raise
        finally:
            close = getattr(pieces, "aclose", None)
            if close is not None:
                await close()
        operation.fail("upstream_stream_cut")  # ended without its completion (no-op if it came)

    def _finish(
        self, request: ChatRequest, completion: Completion, ttft: float, total: float
    ) -> Completion:
        usage = completion.usage
        cost = self.prices.price(completion.model or request.model, usage)
        if cost is None and completion.model != request.model:
            cost = self.prices.price(request.model, usage)
        self.calls += 1
        self.usage = self.usage + usage
        if cost is None:
            self.unpriced += 1
        else:
            self.cost_usd += cost
        speed = usage.output_tokens / total if total > 0 else 0.0
        timing = Timing(ttft_s=ttft, total_s=total, tokens_per_s=speed)
        return dataclasses.replace(completion, timing=timing, cost_usd=cost)

    def totals(self) -> dict[str, Any]:
        """The running totals since this wrapper was made, as a plain dict."""
        return {
            "provider": self.provider,
            "prices_version": self.prices.version,
            "calls": self.calls,
            "failures": self.failures,
            "unpriced_calls": self.unpriced,
            "usage": dataclasses.asdict(self.usage),
            "cost_usd": self.cost_usd,
        }

    async def aclose(self) -> None:
        """Closes the wrapped bridge."""
        await self.bridge.aclose()
