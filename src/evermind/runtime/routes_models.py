"""``/v1/models``: push (install), list, inspect and delete packages (native-only).

A push streams the request body to a file under ``tmp/`` with a size cap (413), verifies it
fully with the package reader in the worker pool (400 with the reader's message), installs it
atomically (:mod:`evermind.runtime.installs`) and hands the verified package to the registry,
so the first generation builds its model from it rather than parsing the file again.
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

from evermind.errors import PackageError
from evermind.package import Package, PackageLimits, read_package
from evermind.runtime.errors import ApiError
from evermind.runtime.installs import Install
from evermind.runtime.registry import parse_model_id, servable
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
            package: Package = await loop.run_in_executor(
                runtime.executor, functools.partial(read_package, upload, limits=limits)
            )
            model = await loop.run_in_executor(runtime.executor, servable, package)
        except PackageError as err:
            raise ApiError(400, f"invalid package: {err}", "invalid_package") from err
        install, created = await loop.run_in_executor(
            runtime.executor, runtime.installs.install, who.tenant, upload, package
        )
        runtime.registry.keep_built(install, model)  # the first use serves it as built
    finally:
        upload.unlink(missing_ok=True)
    body = {"id": install.ref, "object": "model", "digest": install.digest, "created": created}
    return JSONResponse(body, status_code=201 if created else 200)


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
async def list_models(runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """Every installed version of the caller's tenant (``latest`` marks the newest)."""
    return {
        "object": "list",
        "data": [model_card(runtime, i) for i in runtime.installs.list(who.tenant)],
    }


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
    return {"id": install.ref, "object": "model", "deleted": True}
