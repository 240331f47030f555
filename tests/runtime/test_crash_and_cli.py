"""A server killed mid-push restarts serving the previous version; the push/serve CLI."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, ServerProcess, bearer, write_tokens


@pytest.fixture()
def process(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path / "data", write_tokens(tmp_path / "tokens.txt"), tmp_path / "log"
    )
    yield server.start()
    server.stop()


def _start_push_and_stall(url: str, package: bytes) -> socket.socket:
    """Sends the headers and half the body of a push, then stops sending."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = (
        f"POST /v1/models HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN_A}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(package)}\r\n\r\n"
    )
    sock.sendall(head.encode() + package[: len(package) // 2])
    return sock


def test_kill_during_push_keeps_the_previous_version(process: ServerProcess) -> None:
    old = tiny_package("crashy", "1.0.0", seed=0)
    new = tiny_package("crashy", "2.0.0", seed=1)
    headers = bearer(TOKEN_A)
    assert httpx.post(process.url + "/v1/models", content=old, headers=headers).status_code == 201

    sock = _start_push_and_stall(process.url, new)
    tmp = process.data / "tmp"
    deadline = time.monotonic() + 20
    while not any(p.stat().st_size > 0 for p in tmp.glob("upload-*.part")):
        assert time.monotonic() < deadline, "the upload never reached the server's disk"
        time.sleep(0.05)
    process.kill()  # SIGKILL while the body is still arriving
    sock.close()
    assert list(tmp.glob("upload-*.part")), "the crash should leave the partial upload"

    process.start()
    ids = [m["id"] for m in httpx.get(process.url + "/v1/models", headers=headers).json()["data"]]
    assert ids == ["evermind/crashy:1.0.0"]
    body = {"model": "evermind/crashy", "prompt": "The", "max_tokens": 3}
    served = httpx.post(process.url + "/v1/completions", json=body, headers=headers)
    assert served.status_code == 200 and served.json()["model"] == "evermind/crashy:1.0.0"
    assert list(tmp.iterdir()) == [], "restart must remove the interrupted upload"
    assert [p.name for p in (process.data / "models" / "alpha" / "crashy").iterdir()] == ["1.0.0"]
    # And the push works once the server is back.
    again = httpx.post(process.url + "/v1/models", content=new, headers=headers)
    assert again.status_code == 201


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [sys.executable, "-m", "evermind.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_push_cli_prints_the_served_id(process: ServerProcess, tmp_path: Path) -> None:
    package = tmp_path / "notes.evermind"
    package.write_bytes(tiny_package("notes", "3.1.0"))
    done = _cli("push", str(package), "--to", process.url, "--token", TOKEN_A)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "evermind/notes:3.1.0"
    refused = _cli("push", str(package), "--to", process.url, "--token", "wrong-token-123")
    assert refused.returncode == 2 and "HTTP 401" in refused.stderr
    broken = tmp_path / "broken.evermind"
    broken.write_bytes(package.read_bytes()[:1000])
    bad = _cli("push", str(broken), "--to", process.url, "--token", TOKEN_A)
    assert bad.returncode == 2 and "invalid package" in bad.stderr


def test_serve_refuses_a_public_address_without_tokens(tmp_path: Path) -> None:
    refused = _cli("serve", "--host", "0.0.0.0", "--data", str(tmp_path))
    assert refused.returncode == 2
    assert "--insecure-no-auth" in refused.stderr and "tokens-file" in refused.stderr
