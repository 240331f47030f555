"""The Studio's RPC called natively, as the tab's worker calls it (shared by the shader tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from evermind.studio import api, rpc


def call(fn: str, **kwargs: Any) -> Any:
    """One RPC call through ``api.call`` (JSON in, JSON out); fails the test on an error."""
    envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    if not envelope["ok"]:
        raise AssertionError(f"{fn} failed: {envelope['error']}")
    return envelope["result"]


@pytest.fixture()
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The events the handlers emit, on a fresh session (the module-level one is replaced)."""
    seen: list[dict[str, Any]] = []
    api.set_emitter(lambda s: seen.append(json.loads(s)))
    monkeypatch.setattr(rpc, "_session", None)
    yield seen
    api.set_emitter(None)
