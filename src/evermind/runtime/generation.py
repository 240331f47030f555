"""Turning requests into generations: the worker-pool bridge (native-only).

The chat template (:func:`render_chat`, documented in docs/runtime.md) lives in
:mod:`evermind.model.chat`, shared with the in-process EvermindBridge; it is re-exported here.

:class:`Generator` runs :meth:`evermind.model.inference.Model.stream` on the worker thread pool, so
the event loop never waits for the model. Each request works on a shallow copy of the model
(shared weights, private ``last_*`` counters), so concurrent requests on one model are safe.

Generation is fair and stops when nobody waits for it: each tenant runs at most
``slots`` generations at once (its next ones wait in its own line, at most ``queue`` long,
429 beyond), so one tenant cannot occupy every worker; and a generation whose client went
away (streaming or not) stops at its next token.
"""

from __future__ import annotations

import asyncio
import collections.abc
import copy
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from evermind.model.chat import CHAT_STOP as CHAT_STOP  # re-exported for the routes
from evermind.model.chat import render_chat as render_chat
from evermind.model.inference import Model
from evermind.runtime.auth import RateLimited

#: How often a non-streaming generation checks whether its client is still there, in seconds.
DISCONNECT_POLL_S = 0.25
#: Pieces a streaming generation may run ahead of its reader before the worker waits.
MAX_PENDING = 64


@dataclass
class GenerationRequest:
    """One generation's inputs, already validated by the route."""

    prompt: str
    max_tokens: int
    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    #: Drop the reply's leading whitespace (chat replies).
    strip_leading: bool = False


@dataclass
class GenerationResult:
    """What came out, with the OpenAI ``usage`` counts."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "length"


class Generator:
    """Runs generations on a thread pool and hands text back to the event loop.

    Args:
        executor: The worker pool (shared with embeddings and model loading).
        slots: Generations one tenant may run at once.
        queue: Generations one tenant may have waiting for a slot (429 beyond).
    """

    def __init__(self, executor: Executor, slots: int = 2, queue: int = 16) -> None:
        self._executor = executor
        self._slots = slots
        self._queue = queue
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._waiting: dict[str, int] = {}
        self._running: dict[str, int] = {}

    def running(self, tenant: str) -> int:
        """Generations of ``tenant`` running now."""
        return self._running.get(tenant, 0)

    def admit(self, tenant: str) -> None:
        """Raises now if ``tenant``'s line is full (before a stream's headers are sent).

        Raises:
            RateLimited: ``slots`` generations running and ``queue`` waiting.
        """
        gate = self._gates.get(tenant)
        if gate is not None and gate.locked() and self._waiting.get(tenant, 0) >= self._queue:
            raise RateLimited(
                f"tenant {tenant!r} has {self._slots} generations running and {self._queue} "
                "waiting; hint: wait for some to finish, or stream and close abandoned ones",
                1,
            )

    @asynccontextmanager
    async def _turn(self, tenant: str) -> AsyncIterator[None]:
        """Waits for one of ``tenant``'s slots (429 when its line is full)."""
        self.admit(tenant)
        gate = self._gates.setdefault(tenant, asyncio.Semaphore(self._slots))
        self._waiting[tenant] = self._waiting.get(tenant, 0) + 1
        try:
            await gate.acquire()
        finally:
            self._waiting[tenant] -= 1
        self._running[tenant] = self._running.get(tenant, 0) + 1
        try:
            yield
        finally:
            self._running[tenant] -= 1
            gate.release()
            if not self._running[tenant] and not self._waiting[tenant]:
                for table in (self._gates, self._waiting, self._running):
                    table.pop(tenant, None)  # idle tenants hold nothing

    async def complete(
        self,
        model: Model,
        request: GenerationRequest,
        tenant: str = "default",
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> GenerationResult:
        """Generates the whole reply in the pool.

        Args:
            gone: Says whether the client disconnected; polled while generating, and a
                True stops the worker at its next token (the result is then partial).
        """
        async with self._turn(tenant):
            loop = asyncio.get_running_loop()
            cancelled = threading.Event()
            worker = loop.run_in_executor(self._executor, _complete, model, request, cancelled)
            try:
                while gone is not None and not worker.done():
                    done, _ = await asyncio.wait({worker}, timeout=DISCONNECT_POLL_S)
                    if not done and await gone():
                        cancelled.set()
                return await worker
            finally:
                cancelled.set()

    async def stream(
        self,
        model: Model,
        request: GenerationRequest,
        result: GenerationResult,
        tenant: str = "default",
    ) -> AsyncGenerator[str, None]:
        """Yields text pieces as the pool produces them; fills ``result`` at the end.

        Closing the iterator early (the client went away) stops the worker at its next
        token.
        """
        async with self._turn(tenant):
            async for piece in self._stream(model, request, result):
                yield piece

    async def _stream(
        self, model: Model, request: GenerationRequest, result: GenerationResult
    ) -> AsyncGenerator[str, None]:
        """The worker hands pieces over through a bounded buffer with one wake-up per batch:
        it waits when the reader falls ``MAX_PENDING`` pieces behind (backpressure), and the
        event loop gets one callback per batch, not per token, so fast generations can never
        flood the loop that serves everyone else. Pieces that piled up go out as one chunk."""
        loop = asyncio.get_running_loop()
        pending: collections.deque[tuple[str, str | BaseException | None]] = collections.deque()
        ready = asyncio.Event()
        lock = threading.Condition()
        cancelled = threading.Event()
        woken = [False]

        def put(kind: str, value: str | BaseException | None) -> None:
            with lock:
                while len(pending) >= MAX_PENDING and not cancelled.is_set():
                    lock.wait(0.1)  # the reader is behind: wait for it
                pending.append((kind, value))
                wake, woken[0] = not woken[0], True
            if wake:
                loop.call_soon_threadsafe(ready.set)

        def work() -> None:
            pieces = _pieces(model, request, result)
            try:
                for piece in pieces:
                    if cancelled.is_set():
                        return
                    put("piece", piece)
                put("done", None)
            except BaseException as err:  # handed to the event loop and re-raised there
                put("error", err)
            finally:
                pieces.close()  # stops the model's generator now, not at garbage collection

        worker = loop.run_in_executor(self._executor, work)
        try:
            finished = False
            while not finished:
                await ready.wait()
                ready.clear()
                with lock:
                    batch = list(pending)
                    pending.clear()
                    woken[0] = False
                    lock.notify_all()
                text = []
                for kind, value in batch:
                    if kind == "piece" and isinstance(value, str):
                        text.append(value)
                    elif kind == "error" and isinstance(value, BaseException):
                        if text:
                            yield "".join(text)
                        raise value
                    else:
                        finished = True
                if text:
                    yield "".join(text)
            await worker
        finally:
            cancelled.set()
            with lock:
                lock.notify_all()


def _pieces(
    model: Model, request: GenerationRequest, result: GenerationResult
) -> collections.abc.Generator[str, None, None]:
    own = copy.copy(model)  # private last_* counters; weights and tokenizer are shared
    pieces = own.stream(
        request.prompt,
        max_new_tokens=request.max_tokens,
        temperature=request.temperature,
        top_k=request.top_k,
        top_p=request.top_p,
        seed=request.seed,
        stop=request.stop or None,
    )
    leading = request.strip_leading
    try:
        for piece in pieces:
            if leading:
                piece = piece.lstrip()
                if not piece:
                    continue
                leading = False
            result.text += piece
            yield piece
    finally:
        close = getattr(pieces, "close", None)  # stops the model's generator early
        if close is not None:
            close()
        result.prompt_tokens = getattr(own, "last_prompt_tokens", 0)
        result.completion_tokens = getattr(own, "last_completion_tokens", 0)
        result.finish_reason = getattr(own, "last_finish_reason", "length")


def _complete(
    model: Model, request: GenerationRequest, cancelled: threading.Event
) -> GenerationResult:
    result = GenerationResult()
    pieces = _pieces(model, request, result)
    stopped = False
    try:
        for _ in pieces:
            if cancelled.is_set():
                stopped = True
                break
    finally:
        pieces.close()
    if stopped:
        result.finish_reason = "cancelled"  # nobody reads it: the client is gone
    return result
