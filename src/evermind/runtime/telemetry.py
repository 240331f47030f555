"""The runtime's GenAI telemetry: OTLP export when configured, operations of local models
(native-only).

:func:`open_export` turns on OTLP/HTTP export for ``--otlp-endpoint`` (or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``) and :func:`close_export` flushes it when the server stops.
The gateway's calls are measured by the bridges it builds (:mod:`evermind.bridges.caching`,
:mod:`evermind.bridges.instrumented`); the routes that run a served Evermind model call
:func:`local_operation` and :func:`finish_generation` here: the same ``gen_ai.*`` operation,
provider ``evermind``, span kind INTERNAL (the model runs in this process).
``/metrics`` (Prometheus text) is unchanged by any of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from evermind.runtime.generation import GenerationRequest, GenerationResult
from evermind.telemetry import Operation, Telemetry, start_operation, uninstall
from evermind.telemetry import genai as semconv
from evermind.telemetry.otlp import configure

logger = logging.getLogger(__name__)

#: ``gen_ai.provider.name`` of the runtime's own models.
PROVIDER = "evermind"


def open_export(endpoint: str | None) -> Telemetry | None:
    """OTLP/HTTP export of spans and metrics, when an endpoint is configured (None if not).

    Raises:
        ConfigError: A malformed endpoint, or the SDK is not installed.
    """
    telemetry = configure(endpoint)
    if telemetry is not None:
        logger.info("telemetry: exporting GenAI spans and metrics over OTLP/HTTP")
    return telemetry


async def close_export(telemetry: Telemetry | None) -> None:
    """Turns export off and flushes what is left (in a thread: an export is a blocking POST)."""
    if telemetry is None:
        return
    uninstall(telemetry)
    try:
        await asyncio.to_thread(telemetry.shutdown)
    except Exception as err:  # a dead collector must not fail the shutdown
        logger.warning("telemetry: flushing on shutdown failed: %s", err)


def local_operation(
    operation: str, ref: str, request: GenerationRequest | None = None
) -> Operation:
    """A GenAI operation (``chat``, ``text_completion``, ``embeddings``) of the served model
    ``ref`` (a no-op while telemetry is off)."""
    attributes: dict[str, int | float] = {}
    if request is not None:
        attributes[semconv.REQUEST_MAX_TOKENS] = request.max_tokens
        attributes[semconv.REQUEST_TEMPERATURE] = request.temperature
    return start_operation(operation, PROVIDER, ref, attributes, local=True)


def finish_generation(operation: Operation, ref: str, result: GenerationResult) -> None:
    """Ends a generation's operation with its token counts (a local model costs no dollars)."""
    operation.finish(
        input_tokens=result.prompt_tokens,
        output_tokens=result.completion_tokens,
        attributes={
            semconv.RESPONSE_MODEL: ref,
            semconv.RESPONSE_FINISH_REASONS: [result.finish_reason],
        },
        cost_usd=0.0,
    )


@contextmanager
def failing(operation: Operation) -> Iterator[Operation]:
    """Ends ``operation`` as failed if the block raises (then re-raises)."""
    try:
        yield operation
    except BaseException as err:
        operation.fail(err)
        raise
