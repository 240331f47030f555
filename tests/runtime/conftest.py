"""Fixtures of the runtime tests: a real server on 127.0.0.1 with three tokens, and clients;
the one Postgres (pgserver) of the session."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

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


def _postgres_processes(folder: Path) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if str(folder) in line]


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of ONE Postgres (pgserver) for the session; stopped, and checked gone, at the end.

    Shared by every runtime module that asks for ``postgres`` (starting one costs seconds:
    initdb and a server). Safe to share: each test works in a database, table or namespace of
    its own (a fresh ``CREATE DATABASE`` or a uuid-named table). Use it by naming it as an
    argument; do not import it (an imported fixture is a second instance, a second server)."""
    # A test dependency (pyproject's test extra), not optional: the Postgres engine must be
    # proven in CI, so a missing pgserver fails here instead of skipping the engine.
    import pgserver

    folder = tmp_path_factory.mktemp("pg")
    server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        left = _postgres_processes(folder)
        assert not left, f"postgres processes left behind: {left}"


@pytest.fixture
def database(postgres: str) -> str:
    """The URL of a fresh database on the session's Postgres (a module may define its own)."""
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(postgres)._replace(path=f"/{name}"))
