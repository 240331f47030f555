"""The MCP Inspector's own CLI (the tool people debug MCP servers with) against a real
``evermind mcp --http``: with the static token header it lists the eight tools and calls them
with no OAuth dance; a bad argument comes back as one line naming it; without a token the
server's 401 names its RFC 9728 metadata and the Inspector gets no access.

The Inspector is pinned in ``tests/mcp_inspector/package-lock.json`` and installed by
``scripts/bootstrap.sh test`` (``npm ci --prefix tests/mcp_inspector``).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import procs
from tests.runtime.test_mcp_server import ALL_TOOLS, free_port, wait_healthy

INSPECTOR = Path(__file__).resolve().parents[1] / "mcp_inspector/node_modules/.bin/mcp-inspector"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    assert INSPECTOR.exists(), (
        f"{INSPECTOR} is missing; run scripts/bootstrap.sh test (npm ci --prefix "
        "tests/mcp_inspector)"
    )
    folder = tmp_path_factory.mktemp("mcp-inspector")
    token = secrets.token_urlsafe(24)
    (folder / "tokens.txt").write_text(f"{token} team write\n")
    port = free_port()
    command = [
        sys.executable,
        *("-m", "evermind.cli", "mcp", "--http", "--port", str(port)),
        *("--tokens-file", str(folder / "tokens.txt"), "--memory-file", str(folder / "m.db")),
    ]
    log = (folder / "server.log").open("wb")
    process = procs.popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, process)
        yield {"url": base + "/mcp", "token": token}
    finally:
        procs.stop_group(process, grace_s=10)
        log.close()


def inspect(url: str, token: str | None, *args: str) -> tuple[int, str]:
    """Runs the Inspector CLI once; its exit code and its output (stdout + stderr)."""
    header = [] if token is None else ["--header", f"Authorization: Bearer {token}"]
    done = procs.run(
        [str(INSPECTOR), "--cli", url, "--transport", "http", *header, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_inspector_lists_and_calls_the_tools_with_the_token_header(
    server: dict[str, Any],
) -> None:
    url, token = server["url"], server["token"]
    code, out = inspect(url, token, "--method", "tools/list")
    assert code == 0, out
    assert {tool["name"] for tool in json.loads(out)["tools"]} == ALL_TOOLS
    code, out = inspect(
        url,
        token,
        *("--method", "tools/call", "--tool-name", "memory_remember"),
        *("--tool-arg", "key=deploy.port", "--tool-arg", "content=Staging deploys on port 9090."),
    )
    assert code == 0 and not json.loads(out)["isError"], out
    code, out = inspect(
        url,
        token,
        *("--method", "tools/call", "--tool-name", "memory_recall"),
        *("--tool-arg", "query=which port does staging deploy on"),
    )
    assert code == 0, out
    text = json.loads(out)["content"][0]["text"]
    assert "deploy.port" in text and "9090" in text


def test_a_bad_argument_is_one_line_naming_it(server: dict[str, Any]) -> None:
    code, out = inspect(
        server["url"],
        server["token"],
        *("--method", "tools/call", "--tool-name", "memory_recall"),
        *("--tool-arg", "query=anything", "--tool-arg", "top_k=0"),
    )
    assert code != 0, out  # the Inspector exits non-zero on a tool's isError ...
    result, _ = json.JSONDecoder().raw_decode(out)  # ... after printing the result
    assert result["isError"], out
    (message,) = [part["text"] for part in result["content"]]
    assert message.count("\n") == 0 and "top_k" in message, message
    assert "pydantic" not in message and "http" not in message, message


def test_without_a_token_there_is_no_access(server: dict[str, Any]) -> None:
    _, out = inspect(server["url"], None, "--method", "tools/list")
    assert '"tools"' not in out, out  # nothing listed
    assert "auth" in out.lower(), out  # the Inspector met the 401 and its metadata
