"""One read token flooding new memory namespaces cannot starve the server or other tenants.

The attack: thousands of new ``namespace=`` values from one read-only token. Before the fix
each namespace opened its own SQLite connection and thread; with a 1,024-descriptor limit
every tenant's writes and completions failed for a minute. Here the server runs with a limit
of 256 open files, takes 1,500 new namespaces, and must keep its descriptors and threads
flat, keep the flooding tenant's cached stores within its share, and keep serving the
other tenant.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A_READ, TOKEN_B, ServerProcess, bearer, write_tokens

FLOOD = 1500


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_namespace_flood_keeps_fds_threads_and_other_tenants_fine(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        write_tokens(tmp_path / "tokens"),
        tmp_path / "log",
        max_open_files=256,
        args=("--rate-limit", "0"),
    )
    server.start()
    try:
        assert server.process is not None
        pid = server.process.pid
        victim = httpx.Client(base_url=server.url, headers=bearer(TOKEN_B), timeout=60)
        assert victim.post("/v1/models", content=tiny_package("victim", "1.0.0")).status_code == 201
        remember = {"key": "before", "content": "written before the flood"}
        assert victim.post("/v1/memory/remember", json=remember).status_code == 200
        baseline = (_open_fds(pid), _threads(pid))

        attacker = httpx.Client(base_url=server.url, headers=bearer(TOKEN_A_READ), timeout=60)

        def probe(n: int) -> int:
            params = {"namespace": f"flood-{n}"}
            return attacker.get("/v1/memory", params=params).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(probe, range(FLOOD)))
        assert set(statuses) == {200}, sorted(set(statuses))
        after = (_open_fds(pid), _threads(pid))
        print(f"fds {baseline[0]} -> {after[0]}, threads {baseline[1]} -> {after[1]}")
        assert after[0] <= baseline[0] + 16, "each namespace must not hold a file descriptor"
        assert after[1] <= baseline[1] + 8, "each namespace must not hold a thread"

        # The other tenant is served as before: writes, reads, completions.
        later = {"key": "after", "content": "written after the flood"}
        assert victim.post("/v1/memory/remember", json=later).status_code == 200
        keys = {m["key"] for m in victim.get("/v1/memory").json()["data"]}
        assert keys == {"before", "after"}
        body = {"model": "evermind/victim", "prompt": "The", "max_tokens": 2}
        assert victim.post("/v1/completions", json=body).status_code == 200
    finally:
        server.stop()
