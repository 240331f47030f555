"""The local Evermind model as a bridge: in process, or a runtime by URL (native-only).

:class:`EvermindBridge` wraps a model from :func:`evermind.load` (numpy, CPU). The
conversation is rendered with the runtime's own chat template
(:func:`evermind.model.chat.render_chat`: the static system prompt and the facts as two
system turns, then the turns), generation stops at the template's ``\\nUser:`` and the
caller's stop strings, and the reply's leading whitespace is dropped: the same prompt and
the same text as ``POST /v1/chat/completions`` on a runtime serving that model. Usage is
counted with the model's tokenizer (prompt and generated tokens; no cache fields).

Generation is CPU-bound, so it runs on a worker thread (``asyncio.to_thread``; streams hand
their pieces back through the event loop), never on the loop itself. Each call works on a
shallow copy of the model (shared weights, private counters), so concurrent calls are safe.

:meth:`EvermindBridge.remote` is an :class:`~evermind.bridges.openai.OpenAIBridge` pointed at
an Evermind runtime (provider ``evermind``).
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from evermind.bridges.base import DEFAULT_MAX_TOKENS, ChatRequest, Completion, Delta, Usage
from evermind.bridges.openai import OpenAIBridge
from evermind.errors import InputError
from evermind.model.chat import CHAT_STOP, render_chat
from evermind.model.inference import Model

PROVIDER = "evermind"
#: The runtime's default temperature when a request names none.
DEFAULT_TEMPERATURE = 1.0


class EvermindBridge:
    """A :class:`~evermind.bridges.base.Bridge` to an in-process Evermind model.

    Args:
        model: A loaded model (:func:`evermind.load`). ``ChatRequest.model`` is not read:
            this bridge serves this one model, named ``model.name`` in its completions.

    ``request.extra`` may carry ``seed``, ``top_k`` and ``top_p``, read as the runtime reads
    them (unset: no top-k / top-p filtering; the temperature defaults to 1.0).
    """

    provider = PROVIDER

    def __init__(self, model: Model) -> None:
        self.model = model
        self._last_usage: Usage | None = None

    @classmethod
    def remote(cls, base_url: str, token: str, **options: Any) -> OpenAIBridge:
        """A bridge to an Evermind runtime at ``base_url`` (with or without ``/v1``).

        Args:
            base_url: ``http://host:port`` of the runtime.
            token: A bearer token of the runtime's tokens file.
            **options: More :class:`OpenAIBridge` arguments (``max_retries``, ``timeout``).
        """
        url = base_url.rstrip("/")
        url = url if url.endswith("/v1") else url + "/v1"
        return OpenAIBridge(api_key=token, base_url=url, provider=PROVIDER, **options)

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the most recent finished call (None before one)."""
        return self._last_usage

    @staticmethod
    def prompt(request: ChatRequest) -> str:
        """The text the model reads for ``request`` (the runtime's chat template).

        Raises:
            InputError: The request offers tools (an Evermind model does not call tools).
        """
        if request.tools:
            raise InputError(
                "EvermindBridge: an Evermind model cannot call tools, got "
                f"{len(request.tools)}; hint: route tool requests to a frontier model"
            )
        turns = [("system", text) for text in (request.system, request.facts) if text]
        turns += [(m.role, m.text()) for m in request.messages]
        return render_chat(turns)

    def _options(self, request: ChatRequest) -> dict[str, Any]:
        seed = request.extra.get("seed")
        return {
            "max_new_tokens": (
                DEFAULT_MAX_TOKENS if request.max_tokens is None else request.max_tokens
            ),
            "temperature": (
                DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
            ),
            "top_k": request.extra.get("top_k"),
            "top_p": request.extra.get("top_p"),
            "seed": None if seed is None else int(seed) % (1 << 64),
            "stop": [*request.stop, CHAT_STOP],
        }

    def _pieces(self, request: ChatRequest, own: Model) -> Iterator[str]:
        """The reply's pieces, leading whitespace dropped (as the runtime's chat replies)."""
        leading = True
        for piece in own.stream(self.prompt(request), **self._options(request)):
            if leading:
                piece = piece.lstrip()
                if not piece:
                    continue
                leading = False
            yield piece

    def _completion(self, own: Model, text: str) -> Completion:
        usage = Usage(
            input_tokens=int(getattr(own, "last_prompt_tokens", 0)),
            output_tokens=int(getattr(own, "last_completion_tokens", 0)),
        )
        self._last_usage = usage
        return Completion(
            text=text,
            model=self.model.name,
            provider=PROVIDER,
            finish_reason=str(getattr(own, "last_finish_reason", "length")),
            usage=usage,
        )

    async def generate(self, request: ChatRequest) -> Completion:
        """The whole reply, generated on a worker thread."""
        own = copy.copy(self.model)  # private last_* counters; weights are shared
        text = await asyncio.to_thread(lambda: "".join(self._pieces(request, own)))
        return self._completion(own, text)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """The reply's pieces as the worker thread produces them, then the completion.

        Closing the iterator early stops the worker at its next piece.
        """
        self.prompt(request)  # refuses what the model cannot do before a thread starts
        own = copy.copy(self.model)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        stop = threading.Event()

        def work() -> None:
            try:
                for piece in self._pieces(request, own):
                    if stop.is_set():
                        return
                    loop.call_soon_threadsafe(queue.put_nowait, ("piece", piece))
                loop.call_soon_threadsafe(queue.put_nowait, ("done", None))
            except BaseException as err:  # handed to the event loop and raised there
                loop.call_soon_threadsafe(queue.put_nowait, ("error", err))

        worker = loop.run_in_executor(None, work)
        text: list[str] = []
        try:
            while True:
                kind, value = await queue.get()
                if kind == "error" and isinstance(value, BaseException):
                    raise value
                if kind == "done":
                    break
                text.append(str(value))
                yield Delta(text=str(value))
        finally:
            stop.set()
        await worker
        yield Delta(completion=self._completion(own, "".join(text)))

    async def aclose(self) -> None:
        """Nothing to release (the model belongs to the caller)."""
