"""The Studio worker's RPC surface: named async handlers taking and returning JSON.

The JS worker (``web/worker.js``) forwards ``{fn, kwargs}`` messages from the page to
:func:`call` and posts the JSON result back. Progress and log lines go out through the
emitter the worker installs with :func:`set_emitter`, so this module never touches ``js``.
The same handlers run natively (wgpu-py) in the unit tests.
"""

from __future__ import annotations

import base64
import json
import logging
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import evermind
from evermind import gpu
from evermind.errors import ConfigError, EvermindError
from evermind.kernels.harness import run_case

log = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[Any]]
HANDLERS: dict[str, Handler] = {}
_emitter: Callable[[str], None] | None = None


def handler(fn: Handler) -> Handler:
    """Registers ``fn`` under its name as an RPC handler."""
    HANDLERS[fn.__name__] = fn
    return fn


def set_emitter(emit: Callable[[str], None] | None) -> None:
    """Installs the callable that sends one JSON event string to the page."""
    global _emitter
    _emitter = emit


def emit(event: str, **fields: Any) -> None:
    """Sends ``{"event": event, ...fields}`` to the page (dropped when no emitter)."""
    if _emitter is not None:
        _emitter(json.dumps({"event": event, **fields}))


async def call(name: str, kwargs_json: str = "{}") -> str:
    """Runs handler ``name`` with JSON keyword arguments; returns a JSON envelope.

    The envelope is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"type",
    "message"}}``: errors never escape as exceptions, so the page always gets words.
    """
    try:
        fn = HANDLERS.get(name)
        if fn is None:
            raise ConfigError(f"unknown studio call {name!r}; known: {', '.join(sorted(HANDLERS))}")
        kwargs = json.loads(kwargs_json) if kwargs_json else {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"studio call {name!r}: arguments must be a JSON object")
        result = await fn(**kwargs)
        return json.dumps({"ok": True, "result": result})
    except EvermindError as err:
        return json.dumps({"ok": False, "error": {"type": type(err).__name__, "message": str(err)}})
    except Exception as err:  # a bug: report it in words, keep the worker alive
        log.exception("studio call %s failed", name)
        return json.dumps({"ok": False, "error": {"type": type(err).__name__, "message": str(err)}})


@handler
async def boot() -> dict[str, Any]:
    """Opens the WebGPU device; returns adapter, limits, versions and timings."""
    start = time.perf_counter()
    device = await gpu.open_device()
    return {
        "evermind": evermind.__version__,
        "python": platform.python_version(),
        "platform": sys.platform,
        "transport": device.transport,
        "adapter": device.adapter_info,
        "limits": device.limits,
        "device_ms": round((time.perf_counter() - start) * 1000, 1),
    }


@handler
async def kernel_case(spec: dict[str, Any]) -> dict[str, str]:
    """Runs one kernel case (base64 buffers in, base64 outputs back)."""
    device = await gpu.open_device()
    decoded = dict(spec)
    decoded["buffers"] = {k: base64.b64decode(v) for k, v in spec["buffers"].items()}
    outputs = await run_case(device, decoded)
    return {k: base64.b64encode(v).decode() for k, v in outputs.items()}
