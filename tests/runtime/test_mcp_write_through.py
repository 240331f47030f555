"""Write-through cognition over MCP: the official SDK client against a real ``evermind mcp``.

A drift scenario: an agent writes the staging port under one key, later a changed port under
another key and phrasing. Without evidence the second write is kept beside the first and
marked contested (recall shows it); with the workspace holding the new value it supersedes the
first, ``memory_get(include_history=true)`` shows the old version; with the workspace holding
the old value the write is rejected and nothing changes; ``mode='put'`` still overwrites.
"""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import anyio

from evermind.memory.sync import SyncMemoryStore
from tests.runtime.test_mcp_server import free_port, stdio_client, text_of

OLD = "Staging deploys on port 8080 (deploy/staging.env)."
NEW = "Staging now deploys on 9090, see deploy/staging.env."


def test_drift_over_mcp_contested_then_superseded_with_history(tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.db"
    workspace = tmp_path / "ws"
    (workspace / "deploy").mkdir(parents=True)
    env = workspace / "deploy" / "staging.env"

    async def scenario() -> None:
        # No workspace: no evidence either way.
        async with stdio_client(memory_file) as client:
            first = text_of(
                await client.call_tool("memory_remember", {"key": "staging-port", "content": OLD})
            )
            assert first.startswith("augmented: remembered 'staging-port'"), first
            second = await client.call_tool(
                "memory_remember", {"key": "deploy.staging.port", "content": NEW}
            )
            said = text_of(second)
            assert not second.is_error
            assert said.startswith("contested: 'staging-port' holds 8080; kept both"), said
            recall = text_of(await client.call_tool("memory_recall", {"query": "staging port"}))
            assert "deploy.staging.port" in recall and "staging-port" in recall
            assert "[contested: 'staging-port' says otherwise]" in recall, recall
            assert "[contested by 'deploy.staging.port']" in recall, recall
            again = text_of(
                await client.call_tool(
                    "memory_remember", {"key": "STAGING_PORT", "content": OLD.lower()}
                )
            )
            assert again.startswith("confirmed 'staging-port'"), again

        # The workspace says 9090: the same write under a third phrasing supersedes.
        env.write_text("PORT=9090\n")
        async with stdio_client(memory_file, "--workspace-root", str(workspace)) as client:
            await client.call_tool("memory_forget", {"key": "deploy.staging.port"})
            moved = text_of(
                await client.call_tool(
                    "memory_remember", {"key": "deploy.staging.port", "content": NEW}
                )
            )
            assert moved == (
                "superseded 'staging-port' by 'deploy.staging.port' 8080 → 9090 "
                "(evidence: deploy/staging.env contains 9090)"
            ), moved
            recall = text_of(await client.call_tool("memory_recall", {"query": "staging port"}))
            assert "deploy.staging.port" in recall and "'staging-port'" not in recall, recall
            full = text_of(
                await client.call_tool(
                    "memory_get", {"key": "deploy.staging.port", "include_history": True}
                )
            )
            assert "9090" in full and "1 superseded version" in full and "8080" in full, full
            plain = text_of(await client.call_tool("memory_get", {"key": "deploy.staging.port"}))
            assert "history" not in plain

            # The workspace still says 9090: a write claiming 7070 is rejected.
            refused = await client.call_tool(
                "memory_remember",
                {
                    "key": "staging.deploy.port",
                    "content": "Staging deploys on 7070 (deploy/staging.env).",
                },
            )
            said = text_of(refused)
            assert said.startswith("rejected: 'staging.deploy.port' would change"), said
            assert "deploy/staging.env contains 9090, not 7070" in said, said
            # A plain put still overwrites by key, no questions asked.
            put = text_of(
                await client.call_tool(
                    "memory_remember",
                    {"key": "deploy.staging.port", "content": "7070 now", "mode": "put"},
                )
            )
            assert put == "put: replaced 'deploy.staging.port'", put

            # The same key with a changed value supersedes; forgetting it forgets its history.
            for text in ("Niamh uses Neovim.", "Niamh uses Helix."):
                await client.call_tool("memory_remember", {"key": "editor", "content": text})
            got = text_of(
                await client.call_tool("memory_get", {"key": "editor", "include_history": True})
            )
            assert "Helix" in got and "Neovim" in got, got
            gone = text_of(await client.call_tool("memory_forget", {"key": "editor"}))
            assert gone == "forgot 'editor' and 1 superseded version", gone

    anyio.run(scenario)
    with SyncMemoryStore(memory_file, namespace="default/default") as store:
        rows = {row["key"]: row for row in store.export()}
    assert rows["deploy.staging.port"]["content"] == "7070 now"
    assert "staging.deploy.port" not in rows  # the rejected write left nothing
    archived = [row for row in rows.values() if row["archived"]]
    assert [row["content"] for row in archived] == [OLD]  # nothing silently lost


def test_probe_http_over_mcp_rejects_a_dead_url_and_supersedes_with_a_live_one(
    tmp_path: Path,
) -> None:
    """``--probe-http``: the URL a changed fact names must answer (a loopback server here)."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    live = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=live.serve_forever, daemon=True).start()
    dead = free_port()
    old = "Staging health is served at http://127.0.0.1:1/health"
    try:

        async def scenario() -> None:
            async with stdio_client(tmp_path / "m.db", "--probe-http") as client:
                await client.call_tool("memory_remember", {"key": "staging-health", "content": old})
                refused = text_of(
                    await client.call_tool(
                        "memory_remember",
                        {
                            "key": "Staging_Health",
                            "content": f"Staging health moved to http://127.0.0.1:{dead}/health",
                        },
                    )
                )
                assert refused.startswith("rejected: 'Staging_Health' would change"), refused
                assert "did not answer" in refused, refused
                url = f"http://127.0.0.1:{live.server_address[1]}/health"
                moved = text_of(
                    await client.call_tool(
                        "memory_remember",
                        {"key": "Staging_Health", "content": f"Staging health moved to {url}"},
                    )
                )
                assert moved.startswith("superseded 'staging-health' by 'Staging_Health'"), moved
                assert f"(evidence: {url} answered 200)" in moved, moved

        anyio.run(scenario)
    finally:
        live.shutdown()
        live.server_close()
