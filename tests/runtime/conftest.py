"""Fixtures of the runtime tests: a real server on 127.0.0.1 with three tokens, and clients."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.runtime.helpers import PACKAGE_CAP, TOKEN_A, TOKEN_B, bearer, write_tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server with auth, per test module (its own data directory)."""
    root = tmp_path_factory.mktemp("runtime")
    config = RuntimeConfig(
        data_dir=root / "data",
        port=0,
        tokens_file=write_tokens(root / "tokens.txt"),
        max_package_bytes=PACKAGE_CAP,
        max_tokens_cap=512,
        rate_limit=0,
        worker_threads=4,
    )
    with ServerThread(config) as running:
        yield running


@pytest.fixture(scope="module")
def alpha(server: ServerThread) -> Iterator[httpx.Client]:
    """A client of tenant alpha with a write token."""
    with httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def bravo(server: ServerThread) -> Iterator[httpx.Client]:
    """A client of tenant bravo with a write token."""
    with httpx.Client(base_url=server.url, headers=bearer(TOKEN_B), timeout=30) as client:
        yield client
