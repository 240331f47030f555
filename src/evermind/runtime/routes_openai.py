"""OpenAI-compatible generation and embeddings: ``/v1/completions``, ``/v1/chat/completions``,
``/v1/embeddings`` (native-only).

Request and response shapes follow OpenAI's, including ``stream: true`` as server-sent
events ending with ``data: [DONE]`` and ``usage`` token counts. Chat turns are rendered
with the template in :mod:`evermind.runtime.generation`. One extension: a chat request with
``"evermind": {"affect": true}`` gets ``evermind.affect`` (the package's affect head on the
reply and the last user message, :mod:`evermind.runtime.routes_affect`).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from evermind.errors import NotFound
from evermind.model.inference import Model
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.errors import ApiError
from evermind.runtime.gateway.core import Resolved
from evermind.runtime.gateway.openai import (
    READ_FIELDS,
    chat_request,
    message_text,
    serve_chat,
    sse,
)
from evermind.runtime.generation import (
    CHAT_STOP,
    GenerationRequest,
    GenerationResult,
    render_chat,
)
from evermind.runtime.ids import response_id
from evermind.runtime.installs import Install
from evermind.runtime.routes_affect import affect_of, require_affect
from evermind.runtime.schemas import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
)
from evermind.runtime.state import Reader, Runtime, RuntimeDep
from evermind.runtime.telemetry import failing, finish_generation, local_operation
from evermind.telemetry import Operation
from evermind.telemetry.genai import RESPONSE_MODEL
from evermind.tokens import Principal
from evermind.train.teachers import LOCAL_TEACHERS, local_teacher

router = APIRouter(tags=["openai"])

MAX_STOP_STRINGS = 4
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _stops(stop: str | list[str] | None) -> list[str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOP_STRINGS:
        raise ApiError(
            400,
            f"stop: expected at most {MAX_STOP_STRINGS} strings, got {len(stops)}",
            "invalid_stop",
        )
    return [s for s in stops if s]


def _max_tokens(config: RuntimeConfig, requested: int | None) -> int:
    if requested is None:
        return config.default_max_tokens
    if requested > config.max_tokens_cap:
        raise ApiError(
            400,
            f"max_tokens: {requested} exceeds this server's limit of {config.max_tokens_cap}; "
            f"hint: ask for at most {config.max_tokens_cap} tokens",
            "max_tokens_too_large",
        )
    return requested


def _check_length(config: RuntimeConfig, text: str, what: str) -> None:
    if len(text) > config.max_input_chars:
        raise ApiError(
            400,
            f"{what}: {len(text)} characters, this server accepts at most "
            f"{config.max_input_chars}; hint: shorten it",
            "input_too_long",
        )


def _generation(
    config: RuntimeConfig,
    body: CompletionRequest | ChatRequest,
    prompt: str,
    max_tokens: int | None,
    chat: bool,
) -> GenerationRequest:
    _check_length(config, prompt, "prompt")
    stops = _stops(body.stop)
    return GenerationRequest(
        prompt=prompt,
        max_tokens=_max_tokens(config, max_tokens),
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=None if body.seed is None else body.seed % (1 << 64),
        stop=[*stops, CHAT_STOP] if chat else stops,
        strip_leading=chat,
    )


async def _check_prompt_tokens(runtime: Runtime, model: Model, prompt: str) -> None:
    """400 when the prompt is longer, in the model's tokens, than the server runs."""
    cap = runtime.config.max_prompt_tokens
    if len(prompt) <= cap:  # a token is at least one character: nothing to count
        return
    loop = asyncio.get_running_loop()
    count = await loop.run_in_executor(
        runtime.executor, lambda: len(model.tokenizer.encode(prompt))
    )
    if count > cap:
        raise ApiError(
            400,
            f"prompt: {count} tokens, this server runs prompts of at most {cap} tokens; "
            "hint: shorten the prompt or the chat history",
            "prompt_too_long",
        )


async def _serve(runtime: Runtime, who: Principal, model_id: str) -> tuple[Install, Model]:
    install = runtime.registry.resolve(who.tenant, model_id)
    model = await runtime.registry.model(install)
    return install, model


def _usage(result: GenerationResult) -> dict[str, int]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


def _account(runtime: Runtime, install: Install, result: GenerationResult) -> None:
    stats = runtime.registry.stats_for(install)
    stats.requests += 1
    stats.prompt_tokens += result.prompt_tokens
    stats.completion_tokens += result.completion_tokens
    stats.last_used = time.time()
    runtime.metrics.add_tokens("prompt", result.prompt_tokens)
    runtime.metrics.add_tokens("completion", result.completion_tokens)


async def _event_stream(
    runtime: Runtime,
    install: Install,
    model: Model,
    request: GenerationRequest,
    chunk: Callable[[str | None, str | None], dict[str, Any]],
    include_usage: bool,
    base: dict[str, Any],
    tenant: str,
    operation: Operation,
) -> AsyncIterator[bytes]:
    """SSE bytes: the chunks ``chunk(text, finish_reason)`` builds, then usage and [DONE]."""
    result = GenerationResult()
    pieces = runtime.generator.stream(model, request, result, tenant)
    try:
        async for piece in pieces:
            operation.first_chunk()
            yield sse(chunk(piece, None))
    except Exception as err:  # headers are gone: report in the stream, OpenAI style
        operation.fail(err)
        error = {"message": f"generation failed: {err}", "type": "server_error", "code": "error"}
        yield sse({"error": error})
        return
    except BaseException as err:  # the client went away (GeneratorExit), a cancellation
        operation.fail(err)
        raise
    finally:
        await pieces.aclose()
    _account(runtime, install, result)
    finish_generation(operation, install.ref, result)
    yield sse(chunk(None, result.finish_reason))
    if include_usage:
        yield sse({**base, "choices": [], "usage": _usage(result)})
    yield sse("[DONE]")


@router.post("/v1/completions", summary="Text completion (OpenAI shape)")
async def completions(
    body: CompletionRequest,
    runtime: RuntimeDep,
    who: Reader,
    http_request: Request,
) -> Any:
    """Continues ``prompt``; ``stream: true`` answers with server-sent events."""
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if len(prompts) != 1:
        raise ApiError(
            400,
            f"prompt: expected one prompt, got {len(prompts)}; send one per request",
            "invalid_prompt",
        )
    request = _generation(runtime.config, body, prompts[0], body.max_tokens, chat=False)
    install, model = await _serve(runtime, who, body.model)
    await _check_prompt_tokens(runtime, model, request.prompt)
    base = {
        "id": response_id("cmpl-"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": install.ref,
    }
    if body.stream:

        def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
            choice = {"text": text or "", "index": 0, "logprobs": None, "finish_reason": finish}
            return {**base, "choices": [choice]}

        include = bool(body.stream_options and body.stream_options.include_usage)
        runtime.generator.admit(who.tenant)
        operation = local_operation("text_completion", install.ref, request)
        events = _event_stream(
            runtime, install, model, request, chunk, include, base, who.tenant, operation
        )
        return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
    with failing(local_operation("text_completion", install.ref, request)) as operation:
        result = await runtime.generator.complete(
            model, request, who.tenant, http_request.is_disconnected
        )
    _account(runtime, install, result)
    finish_generation(operation, install.ref, result)
    choice = {
        "text": result.text,
        "index": 0,
        "logprobs": None,
        "finish_reason": result.finish_reason,
    }
    return JSONResponse({**base, "choices": [choice], "usage": _usage(result)})


@router.post("/v1/chat/completions", summary="Chat completion (OpenAI shape)")
async def chat_completions(
    body: ChatRequest,
    runtime: RuntimeDep,
    who: Reader,
    http_request: Request,
) -> Any:
    """Replies to ``messages`` rendered with the documented chat template; or, for a model
    of an upstream in the server's ``--upstreams`` file, through the caching gateway."""
    max_tokens = body.max_completion_tokens if body.max_tokens is None else body.max_tokens
    want_affect = body.evermind is not None and body.evermind.affect
    if want_affect and body.stream:
        raise ApiError(
            400,
            "evermind.affect: supported without stream only; hint: drop stream, or call "
            "POST /v1/affect on the streamed reply",
            "invalid_affect",
        )
    gateway = runtime.gateway
    routed = None if gateway is None else gateway_route(runtime, body.model, who)
    if gateway is not None and routed is not None:
        if want_affect:
            raise ApiError(
                400,
                f"evermind.affect: {body.model} is an upstream model; the affect head belongs "
                "to an Evermind package; hint: call POST /v1/affect with one",
                "invalid_affect",
            )
        raw = await http_request.json()
        same = routed.upstream.protocol == "openai"
        if max_tokens is None and not same:  # a Messages API upstream requires one
            max_tokens = routed.upstream.default_max_tokens
        neutral = chat_request(
            body,
            routed.model,
            who.tenant,
            max_tokens,
            http_request.headers.get("x-evermind-cache"),
            http_request.headers.get("x-evermind-route"),
            who.user,
            raw if same else None,
        )
        # No input limit of ours (max_input_chars is the local models'): the upstream's
        # context window applies; --max-request-mb still bounds the body.
        include = bool(body.stream_options and body.stream_options.include_usage)
        dropped = () if same else tuple(sorted(set(raw) - READ_FIELDS))
        return await serve_chat(gateway, routed, body, neutral, include, dropped)
    turns = [(m.role, message_text(m, i)) for i, m in enumerate(body.messages)]
    request = _generation(runtime.config, body, render_chat(turns), max_tokens, chat=True)
    install, model = await _serve(runtime, who, body.model)
    if want_affect:
        require_affect(install, model)
    await _check_prompt_tokens(runtime, model, request.prompt)
    base = {
        "id": response_id("chatcmpl-"),
        "object": "chat.completion.chunk" if body.stream else "chat.completion",
        "created": int(time.time()),
        "model": install.ref,
        "system_fingerprint": install.digest[:24],
    }
    if body.stream:
        first = [True]

        def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            if first[0]:
                delta["role"] = "assistant"
                first[0] = False
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "choices": [choice]}

        include = bool(body.stream_options and body.stream_options.include_usage)
        runtime.generator.admit(who.tenant)
        operation = local_operation("chat", install.ref, request)
        events = _event_stream(
            runtime, install, model, request, chunk, include, base, who.tenant, operation
        )
        return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
    with failing(local_operation("chat", install.ref, request)) as operation:
        result = await runtime.generator.complete(
            model, request, who.tenant, http_request.is_disconnected
        )
    _account(runtime, install, result)
    finish_generation(operation, install.ref, result)
    message = {"role": "assistant", "content": result.text}
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": result.finish_reason,
    }
    reply: dict[str, Any] = {**base, "choices": [choice], "usage": _usage(result)}
    if want_affect:
        reply["evermind"] = {"affect": await _chat_affect(runtime, model, turns, result.text)}
    return JSONResponse(reply)


def gateway_route(runtime: Runtime, model_id: str, who: Principal) -> Resolved | None:
    """Where the gateway sends ``model_id`` (None: a local model). A bare id that is no
    installed model of the tenant goes to the ``openai`` default upstream, if any."""
    gateway = runtime.gateway
    assert gateway is not None
    routed = gateway.resolve(model_id, who)
    if routed is not None:
        return routed
    try:
        runtime.registry.resolve(who.tenant, model_id)
    except NotFound:
        return gateway.resolve(model_id, who, "openai")
    return None


async def _chat_affect(
    runtime: Runtime, model: Model, turns: Sequence[tuple[str, str]], reply: str
) -> dict[str, Any]:
    """``{"reply": {label, scores}, "last_user": {label, scores} | None}``."""
    users = [text for role, text in turns if role == "user"]
    texts = [reply, *users[-1:]]
    items, _ = await affect_of(runtime, model, texts)
    plain = [{"label": x["label"], "scores": x["scores"]} for x in items]
    return {"reply": plain[0], "last_user": plain[1] if users else None}


def _served_teachers(config: RuntimeConfig) -> dict[str, str]:
    """Model id -> local teacher name, for the teachers this runtime serves."""
    return {LOCAL_TEACHERS[name]: name for name in config.teachers}


def _teacher_job(runtime: Runtime, model_id: str, texts: list[str]) -> np.ndarray:
    teacher = runtime.teachers.get(model_id)
    if teacher is None:  # loaded once, on first use, in the worker thread
        teacher = runtime.teachers.setdefault(
            model_id, local_teacher(_served_teachers(runtime.config)[model_id])
        )
    vectors: np.ndarray = teacher.embed(texts)
    return vectors


async def _teacher_embeddings(
    runtime: Runtime, body: EmbeddingRequest, texts: list[str]
) -> JSONResponse:
    """A served local teacher (``evermind serve --teacher minilm``): same reply shape."""
    loop = asyncio.get_running_loop()
    with failing(local_operation("embeddings", body.model)) as operation:
        vectors = await loop.run_in_executor(
            runtime.executor, _teacher_job, runtime, body.model, texts
        )
        if body.dimensions is not None and body.dimensions != vectors.shape[1]:
            raise ApiError(
                400,
                f"dimensions: {body.model} embeds into {vectors.shape[1]} dimensions, got a "
                f"request for {body.dimensions}; hint: omit dimensions",
                "invalid_dimensions",
            )
    tokens = sum(max(1, len(t.split())) for t in texts)  # approximate (word count)
    runtime.metrics.add_tokens("embedding", tokens)
    operation.finish(input_tokens=tokens, attributes={RESPONSE_MODEL: body.model}, cost_usd=0.0)
    return JSONResponse(
        {
            "object": "list",
            "data": _embedding_items(vectors, body.encoding_format),
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def _embedding_items(vectors: np.ndarray, encoding_format: str) -> list[dict[str, Any]]:
    data = []
    for i, row in enumerate(vectors):
        encoded: Any
        if encoding_format == "base64":
            encoded = base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
        else:
            encoded = row.tolist()
        data.append({"object": "embedding", "index": i, "embedding": encoded})
    return data


@router.post("/v1/embeddings", summary="Embeddings (OpenAI shape)")
async def embeddings(
    body: EmbeddingRequest,
    runtime: RuntimeDep,
    who: Reader,
) -> JSONResponse:
    """The model's sentence embeddings (its head applied, if any), one per input text; or a
    served local teacher's (``teacher/all-minilm-l6-v2`` with ``serve --teacher minilm``)."""
    texts = [body.input] if isinstance(body.input, str) else body.input
    config = runtime.config
    if not texts or len(texts) > config.max_embedding_inputs:
        raise ApiError(
            400,
            f"input: expected 1 to {config.max_embedding_inputs} texts, got {len(texts)}",
            "invalid_input",
        )
    for i, text in enumerate(texts):
        _check_length(config, text, f"input[{i}]")
    if body.model in _served_teachers(config):
        return await _teacher_embeddings(runtime, body, texts)
    install, model = await _serve(runtime, who, body.model)
    if body.dimensions is not None and body.dimensions != model.embed_dim:
        raise ApiError(
            400,
            f"dimensions: {install.ref} embeds into {model.embed_dim} dimensions, got a "
            f"request for {body.dimensions}; hint: omit dimensions",
            "invalid_dimensions",
        )
    with failing(local_operation("embeddings", install.ref)) as operation:
        vectors, tokens = await runtime.generator.embeddings.embed(model, texts)
    operation.finish(input_tokens=tokens, attributes={RESPONSE_MODEL: install.ref}, cost_usd=0.0)
    stats = runtime.registry.stats_for(install)
    stats.requests += 1
    stats.embedded_inputs += len(texts)
    stats.last_used = time.time()
    runtime.metrics.add_tokens("embedding", tokens)
    data = _embedding_items(vectors, body.encoding_format)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return JSONResponse({"object": "list", "data": data, "model": install.ref, "usage": usage})
