"""The push client: uploads a ``.evermind`` package to a runtime (native-only).

:func:`push_package` streams the file (never holding it whole in memory) to
``POST {url}/v1/models`` with a bearer token and returns the server's answer
(``{"id": "evermind/<name>:<version>", "digest": ...}``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from evermind.errors import EvermindError

CHUNK_BYTES = 256 * 1024


class PushError(EvermindError):
    """The runtime refused the package, or could not be reached."""


def _models_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise PushError(f"--to: expected an http(s) URL of a runtime, got {url!r}")
    base = url.rstrip("/")
    if base.endswith("/v1/models"):
        return base
    return (base if base.endswith("/v1") else base + "/v1") + "/models"


def push_package(
    path: str | os.PathLike[str],
    url: str,
    token: str | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Uploads the package at ``path`` to the runtime at ``url``.

    Args:
        path: A ``.evermind`` file.
        url: The runtime's base URL, e.g. ``http://127.0.0.1:8377``.
        token: Bearer token (omit for a server without auth).
        progress: Called with ``(bytes_sent, total_bytes)`` as the upload proceeds.
        timeout_s: Per-operation network timeout in seconds.

    Returns:
        The server's JSON answer; ``created`` is False when it already had that package.

    Raises:
        PushError: The file is unreadable, the server unreachable, or it refused the package
            (the message carries the server's own).
    """
    source = Path(path)
    try:
        total = source.stat().st_size
    except OSError as err:
        raise PushError(f"cannot read {str(source)!r}: {err}") from err
    target = _models_url(url)

    def chunks() -> Iterator[bytes]:
        sent = 0
        with open(source, "rb") as stream:
            while chunk := stream.read(CHUNK_BYTES):
                sent += len(chunk)
                yield chunk
                if progress is not None:
                    progress(sent, total)

    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(total)}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        response = httpx.post(target, content=chunks(), headers=headers, timeout=timeout_s)
    except httpx.HTTPError as err:
        raise PushError(
            f"pushing to {target} failed: {err}; hint: is `evermind serve` running there?"
        ) from err
    try:
        body = response.json()
    except json.JSONDecodeError:
        body = {}
    if response.status_code >= 400:
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        raise PushError(
            f"the runtime refused the push (HTTP {response.status_code}): "
            f"{message or response.text[:200]}"
        )
    if not isinstance(body, dict) or "id" not in body:
        raise PushError(f"unexpected answer from {target}: {response.text[:200]!r}")
    return body
