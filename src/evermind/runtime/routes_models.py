"""``/v1/models``: push (install), list, inspect and delete packages (native-only).

A push streams the request body to a file under ``tmp/`` with a size cap (413), verifies it
fully with the package reader in the worker pool (400 with the reader's message), installs it
atomically (:mod:`evermind.runtime.installs`) and hands the model it built to the registry,
so the first generation does not parse the file again.

Memory: the reader streams the file (it never holds it whole), the built model keeps its
weights once (:func:`~evermind.runtime.registry.build`), and a refusal keeps nothing (the
error's traceback, which would pin the reader's frames, is dropped). After every push the
worker returns the freed heap to the system
(:func:`~evermind.runtime.registry.release_heap_soon`): glibc otherwise keeps the arenas a large
push grew, and the server would stay at its peak.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from evermind.errors import AccessError, PackageError, UpstreamError
from evermind.model.inference import Model
from evermind.package import PackageLimits, read_package
from evermind.runtime.errors import ApiError
from evermind.runtime.installs import Install
from evermind.runtime.registry import parse_model_id, release_heap_soon, servable
from evermind.runtime.state import Reader, Runtime, RuntimeDep, Writer

logger = logging.getLogger(__name__)

router = APIRouter(tags=["models"])

PUSH_BODY = {
    "requestBody": {
        "required": True,
        "description": "The raw .evermind package bytes",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def model_card(runtime: Runtime, install: Install) -> dict[str, Any]:
    """The OpenAI ``model`` object of an install, with Evermind's extra fields."""
    newest = runtime.installs.newest(install.tenant, install.name)
    return {
        "id": install.ref,
        "object": "model",
        "created": int(install.installed_at),
        "owned_by": install.tenant,
        "digest": install.digest,
        "size": install.size,
        "latest": newest is not None and newest.version == install.version,
    }


@router.post(
    "/v1/models",
    status_code=201,
    openapi_extra=PUSH_BODY,
    summary="Push (install) a .evermind package",
    responses={200: {"description": "Already installed with the same digest"}},
)
async def push_model(
    request: Request,
    runtime: RuntimeDep,
    who: Writer,
) -> JSONResponse:
    """Installs the package in the body under ``evermind/<name>:<version>``."""
    cap = runtime.config.max_package_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise _too_large(int(declared), cap)
    upload = runtime.installs.new_upload_path()
    model: Model | None = None
    try:
        size = await _receive(request, upload, cap)
        if size == 0:
            raise ApiError(
                400,
                "empty body; expected the bytes of a .evermind package "
                "(Content-Type: application/octet-stream)",
                "empty_package",
            )
        loop = asyncio.get_running_loop()
        limits = PackageLimits(max_archive_bytes=cap)
        try:
            model = await loop.run_in_executor(
                runtime.executor, functools.partial(_verified_model, upload, limits)
            )
        except PackageError as err:
            raise ApiError(400, f"invalid package: {err}", "invalid_package") from _frameless(err)
        install, created = await loop.run_in_executor(
            runtime.executor, runtime.installs.install, who.tenant, upload, model.package
        )
        runtime.registry.keep_built(install, model)  # the first use serves it as built
    finally:
        upload.unlink(missing_ok=True)
        model = None  # kept by the registry, or (install failed) dropped before the trim
        release_heap_soon(runtime.executor)
    body = {"id": install.ref, "object": "model", "digest": install.digest, "created": created}
    return JSONResponse(body, status_code=201 if created else 200)


def _verified_model(upload: Path, limits: PackageLimits) -> Model:
    """The served model of the package at ``upload``: read, verified and proven servable
    (:func:`~evermind.runtime.registry.servable`). Only the model survives: the reader's
    package, with its copy of the weights, is dropped on return."""
    return servable(read_package(upload, limits=limits))


def _frameless(err: BaseException) -> BaseException:
    """``err`` with the tracebacks of it and of its causes dropped: they hold the frames of
    the reader (and what those read, such as a parsed tokenizer) alive for as long as the
    error lives, and only the message is needed."""
    pending: list[BaseException | None] = [err]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        item.__traceback__ = None
        pending += [item.__cause__, item.__context__]
    return err


async def _receive(request: Request, upload: Path, cap: int) -> int:
    size = 0
    stream = await asyncio.to_thread(open, upload, "wb")
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise _too_large(size, cap, partial=True)
            if chunk:
                await asyncio.to_thread(stream.write, chunk)
    except ClientDisconnect:
        raise ApiError(
            400, "the client disconnected before the whole package arrived", "upload_aborted"
        ) from None
    finally:
        await asyncio.to_thread(stream.close)
    return size


def _too_large(size: int, cap: int, partial: bool = False) -> ApiError:
    received = f"more than {cap}" if partial else str(size)
    return ApiError(
        413,
        f"package too large: {received} bytes, the limit is {cap} bytes; hint: start the "
        "server with a larger --max-package-mb",
        "package_too_large",
    )


@router.get("/v1/models", summary="List your models")
async def list_models(runtime: RuntimeDep, who: Reader, request: Request) -> dict[str, Any]:
    """Every installed version of the caller's tenant (``latest`` marks the newest).

    Behind the gateway, the default upstreams' own lists pass through: an Anthropic client
    (its SDK sends ``anthropic-version``) gets the ``anthropic`` default upstream's answer as
    it is; any other client gets the local models followed by the ``openai`` default
    upstream's entries (whose bare ids route there).
    """
    gateway = runtime.gateway
    if gateway is not None and "anthropic-version" in request.headers:
        listed = await gateway.upstream_models(who, "anthropic")
        if listed is not None:
            return listed
    data = [model_card(runtime, i) for i in runtime.installs.list(who.tenant)]
    if gateway is not None:
        try:
            listed = await gateway.upstream_models(who, "openai")
        except (UpstreamError, AccessError) as err:  # the local models are still listed
            logger.warning("GET /v1/models: the openai upstream's list is left out: %s", err)
            listed = None
        entries = [] if listed is None else listed.get("data")
        data += [m for m in entries if isinstance(m, dict)] if isinstance(entries, list) else []
    return {"object": "list", "data": data}


@router.get("/v1/models/{model_id:path}", summary="A model's manifest and usage")
async def get_model(model_id: str, runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """The model card plus the package manifest and usage counters."""
    install = runtime.registry.resolve(who.tenant, model_id)
    metrics = runtime.registry.stats_for(install).as_dict()
    metrics["loaded"] = runtime.registry.is_loaded(install)
    return {**model_card(runtime, install), "manifest": install.manifest, "metrics": metrics}


@router.delete("/v1/models/{model_id:path}", summary="Delete one installed version")
async def delete_model(model_id: str, runtime: RuntimeDep, who: Writer) -> dict[str, Any]:
    """Deletes ``evermind/<name>:<version>`` (an explicit version is required)."""
    name, version = parse_model_id(model_id)
    if version is None:
        raise ApiError(
            400,
            f"delete needs an explicit version; expected 'evermind/{name}:<version>', got "
            f"{model_id!r}",
            "version_required",
        )
    install = runtime.registry.resolve(who.tenant, model_id)
    loop = asyncio.get_running_loop()
    deleted = await loop.run_in_executor(
        runtime.executor, runtime.installs.delete, who.tenant, name, version
    )
    if deleted is None:  # deleted by a concurrent request
        raise ApiError(404, f"model {model_id!r} not found", "model_not_found")
    runtime.registry.unload(install)
    runtime.memory.forget_model(install.digest)
    release_heap_soon(runtime.executor)  # the model's arrays were freed
    return {"id": install.ref, "object": "model", "deleted": True}
