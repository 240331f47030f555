"""``evermind serve --embedder base|PATH``: the memory routes embed with the base embedder
when a request names no model.

Real servers on 127.0.0.1 (:class:`ServerThread`, with the shared tokens) talked to over HTTP:
one started with ``embedder="base"``, and the module's plain server (``conftest.py``) as the
lexical baseline. The memories and questions are those of ``test_mcp_embedder.py`` (no word in
common, 7 memories: under the relevance floor's minimum, see that module).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from evermind.embedder.shipped import base_bytes, load_embedder_spec
from evermind.errors import InputError
from evermind.job import with_embedder
from evermind.package import read_package
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests import procs
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_B, bearer, write_tokens
from tests.runtime.test_mcp_embedder import MEMORIES, QUESTIONS


@pytest.fixture(scope="module")
def based(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server whose memory embeds with the shipped base embedder by default."""
    root = tmp_path_factory.mktemp("based")
    config = RuntimeConfig(
        data_dir=root / "data",
        port=0,
        tokens_file=write_tokens(root / "tokens.txt"),
        rate_limit=0,
        worker_threads=2,
        embedder="base",
    )
    with ServerThread(config) as running:
        yield running


def remember_all(client: httpx.Client, namespace: str) -> None:
    for key, content in MEMORIES.items():
        body = {"key": key, "content": content, "namespace": namespace}
        stored = client.post("/v1/memory/remember", json=body)
        assert stored.status_code == 200, stored.text


def firsts(client: httpx.Client, namespace: str, **extra: str) -> dict[str, list[dict[str, Any]]]:
    answers = {}
    for key, question in QUESTIONS.items():
        body = {"query": question, "namespace": namespace, "top_k": 3, **extra}
        answer = client.post("/v1/memory/recall", json=body)
        assert answer.status_code == 200, answer.text
        answers[key] = answer.json()["data"]
    return answers


def test_recall_without_a_model_uses_the_default_embedder(
    based: ServerThread, alpha: httpx.Client
) -> None:
    remember_all(alpha, "plain")
    lexical = firsts(alpha, "plain")
    assert lexical == {key: [] for key in QUESTIONS}, lexical  # the plain server: BM25 only

    with httpx.Client(base_url=based.url, headers=bearer(TOKEN_A), timeout=60) as client:
        remember_all(client, "notes")
        hybrid = firsts(client, "notes")
        assert {k: hits[0]["key"] for k, hits in hybrid.items() if hits} == {
            key: key for key in QUESTIONS
        }, hybrid
        assert all(hits[0]["ranked_by"].startswith("semantic+lexical") for hits in hybrid.values())

        # A request that names a model still embeds with that model (the tiny test package).
        assert client.post("/v1/models", content=tiny_package("emb", "1.0.0")).status_code == 201
        named = client.post(
            "/v1/memory/recall",
            json={"query": QUESTIONS["pet"], "namespace": "notes", "model": "evermind/emb"},
        )
        assert named.status_code == 200, named.text
        assert named.json()["data"][0]["ranked_by"].startswith("semantic+lexical")

    # Another tenant on the same server sees none of it.
    with httpx.Client(base_url=based.url, headers=bearer(TOKEN_B), timeout=60) as other:
        assert firsts(other, "notes") == {key: [] for key in QUESTIONS}


def test_the_embedder_setting_is_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        RuntimeConfig(data_dir=tmp_path / "d", embedder=str(tmp_path / "nope.safetensors"))

    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(base_bytes()[:4096])
    done = procs.run(
        [sys.executable, "-m", "evermind.cli", "serve", "--port", "0", "--data",
         str(tmp_path / "data"), "--embedder", str(corrupt)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert str(corrupt) in done.stderr


def test_a_pushed_package_with_the_base_embedder_embeds_and_recalls_with_it(
    based: ServerThread,
) -> None:
    """``/v1/embeddings`` and memory recall naming a package that carries the base embedder
    (``evermind export --embedder base``) give the base embedder's vectors. (On ``based``:
    the conftest server caps pushes at 100 kB, and this package is 8.5 MB.)"""
    data = with_embedder(read_package(tiny_package("carries", "1.0.0")), "base")
    with httpx.Client(base_url=based.url, headers=bearer(TOKEN_B), timeout=60) as client:
        pushed = client.post(
            "/v1/models", content=data, headers={"Content-Type": "application/octet-stream"}
        )
        assert pushed.status_code == 201, pushed.text
        model_id = pushed.json()["id"]
        texts = [MEMORIES["pet"], QUESTIONS["pet"]]
        answer = client.post("/v1/embeddings", json={"model": model_id, "input": texts})
        assert answer.status_code == 200, answer.text
        served = np.array([row["embedding"] for row in answer.json()["data"]], np.float32)
        base = load_embedder_spec("base")
        np.testing.assert_allclose(served, base.embed(texts), atol=1e-6)
        assert answer.json()["usage"]["prompt_tokens"] == sum(
            len(base.tokenizer.encode(t)) for t in texts
        )
        # The plain tiny package embeds otherwise: the vectors above are the embedder's.
        assert client.post("/v1/models", content=tiny_package("plain", "1.0.0")).status_code == 201
        plain = client.post("/v1/embeddings", json={"model": "evermind/plain", "input": texts})
        assert len(plain.json()["data"][0]["embedding"]) != 256

        remember_all(client, "carried")
        recalled = firsts(client, "carried", model=model_id)
        assert {k: hits[0]["key"] for k, hits in recalled.items() if hits} == {
            key: key for key in QUESTIONS
        }, recalled
        assert all(
            hits[0]["ranked_by"].startswith("semantic+lexical") for hits in recalled.values()
        )
