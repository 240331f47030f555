"""Write-through cognition over HTTP: ``POST /v1/memory/remember`` on a real runtime server.

The runtime runs with ``memory_workspace_root`` set to a tmp folder. A drift scenario in one
namespace without evidence (the facts name no file: contested, both kept, recall shows it),
one with the workspace holding the new value (superseded, ``include_history`` shows the old
version), one with it holding another value (409 ``memory_rejected``, nothing written); the
plain ``mode: put``; and tenant bravo's identical write never sees alpha's memories.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, TOKEN_B, assert_error, bearer, write_tokens

OLD = "Staging deploys on port 8080 (deploy/staging.env)."
NEW = "Staging now deploys on 9090, see deploy/staging.env."


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    (root / "deploy").mkdir()
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, workspace: Path) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("runtime")
    config = RuntimeConfig(
        data_dir=root / "data",
        port=0,
        tokens_file=write_tokens(root / "tokens.txt"),
        rate_limit=0,
        worker_threads=2,
        memory_workspace_root=workspace,
    )
    with ServerThread(config) as running:
        yield running


def client(server: ServerThread, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=bearer(token), timeout=30)


def remember(http: httpx.Client, namespace: str, key: str, content: str, **extra: Any) -> Any:
    body = {"key": key, "content": content, "namespace": namespace, **extra}
    return http.post("/v1/memory/remember", json=body)


def test_drift_without_evidence_is_contested_and_recall_shows_both(server: ServerThread) -> None:
    with client(server, TOKEN_A) as alpha:
        first = remember(alpha, "a", "staging-port", "Staging deploys on port 8080.")
        assert first.status_code == 200 and first.json()["cognition"]["action"] == "augment"
        second = remember(alpha, "a", "deploy.staging.port", "Staging now deploys on 9090.")
        assert second.status_code == 200, second.text
        said = second.json()["cognition"]
        assert said["action"] == "contested" and said["incumbent"] == "staging-port"
        assert said["summary"].startswith("contested: 'staging-port' holds 8080; kept both")
        hits = alpha.post(
            "/v1/memory/recall", json={"query": "staging port", "namespace": "a"}
        ).json()["data"]
        marks = {h["key"]: h["meta"]["cognition"] for h in hits}
        assert marks["deploy.staging.port"]["contested_with"] == "staging-port"
        assert marks["staging-port"]["contested_by"] == "deploy.staging.port"


def test_drift_with_workspace_evidence_supersedes_then_rejects(
    server: ServerThread, workspace: Path
) -> None:
    (workspace / "deploy" / "staging.env").write_text("PORT=9090\n")
    with client(server, TOKEN_A) as alpha:
        assert remember(alpha, "b", "staging-port", OLD).status_code == 200
        moved = remember(alpha, "b", "deploy.staging.port", NEW)
        assert moved.status_code == 200, moved.text
        said = moved.json()["cognition"]
        assert said["action"] == "supersede", said
        assert said["summary"] == (
            "superseded 'staging-port' by 'deploy.staging.port' 8080 → 9090 "
            "(evidence: deploy/staging.env contains 9090)"
        )
        assert said["evidence"] == {
            "supports": True,
            "detail": "deploy/staging.env contains 9090",
        }
        assert_error(alpha.get("/v1/memory/staging-port", params={"namespace": "b"}), 404)
        got = alpha.get(
            "/v1/memory/deploy.staging.port", params={"namespace": "b", "include_history": True}
        ).json()
        assert got["content"] == NEW
        assert [v["content"] for v in got["history"]] == [OLD]
        assert got["history"][0]["archived"] and got["history"][0]["key"] == said["archived_key"]
        plain = alpha.get("/v1/memory/deploy.staging.port", params={"namespace": "b"}).json()
        assert "history" not in plain
        hits = alpha.post(
            "/v1/memory/recall", json={"query": "staging port", "namespace": "b"}
        ).json()["data"]
        assert [h["key"] for h in hits] == ["deploy.staging.port"]  # one current fact

        # The workspace says 9090: a claim of 7070 under yet another key is refused.
        refused = remember(
            alpha, "b", "staging.deploy.port", "Staging deploys on 7070 (deploy/staging.env)."
        )
        message = assert_error(refused, 409, "memory_rejected")
        assert "deploy/staging.env contains 9090, not 7070" in message
        assert_error(alpha.get("/v1/memory/staging.deploy.port", params={"namespace": "b"}), 404)

        put = remember(alpha, "b", "deploy.staging.port", "7070 now", mode="put")
        assert put.status_code == 200 and put.json()["cognition"]["action"] == "put"
        assert put.json()["content"] == "7070 now"
        bad = remember(alpha, "b", "k", "v", mode="merge")
        assert_error(bad, 400)

        # Forgetting the fact forgets the versions it superseded too.
        archived = got["history"][0]["key"]
        assert alpha.get(f"/v1/memory/{archived}", params={"namespace": "b"}).status_code == 200
        assert alpha.delete("/v1/memory/deploy.staging.port", params={"namespace": "b"}).json()[
            "deleted"
        ]
        assert_error(alpha.get(f"/v1/memory/{archived}", params={"namespace": "b"}), 404)


def test_another_tenant_never_reconciles_against_alpha(server: ServerThread) -> None:
    with client(server, TOKEN_A) as alpha, client(server, TOKEN_B) as bravo:
        assert (
            remember(alpha, "t", "staging-port", "Staging deploys on port 8080.").status_code == 200
        )
        mine = remember(bravo, "t", "deploy.staging.port", "Staging now deploys on 9090.")
        assert mine.status_code == 200
        assert mine.json()["cognition"]["action"] == "augment"
        assert mine.json()["cognition"]["incumbent"] is None
