"""Generation is bounded and fair: abandoned requests stop, one tenant cannot take every
worker, and prompts longer than the server runs are refused before any work.

A tiny model generates ~2,500 tokens a second here and, greedy, never stops early, so
``LONG`` tokens keep a worker busy for about two minutes: far longer than any bound below,
so a request that kept computing would make the next assertion time out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_B, assert_error, bearer, write_tokens

LONG = 300_000
BOUND_S = 30.0  # what a small request may take while long ones are abandoned or capped


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root: Path = tmp_path_factory.mktemp("busy")
    config = RuntimeConfig(
        data_dir=root / "data",
        port=0,
        tokens_file=write_tokens(root / "tokens"),
        rate_limit=0,
        worker_threads=4,  # two generations per tenant at once
        max_tokens_cap=LONG,
        max_prompt_tokens=64,
    )
    with ServerThread(config) as server:
        for token in (TOKEN_A, TOKEN_B):
            pushed = httpx.post(server.url + "/v1/models", content=tiny_package("busy", "1.0.0"),
                                headers=bearer(token), timeout=60)  # fmt: skip
            assert pushed.status_code in (200, 201)
        yield server


def _small(server: ServerThread, token: str) -> float:
    body = {"model": "evermind/busy", "prompt": "The", "max_tokens": 4}
    start = time.perf_counter()
    done = httpx.post(server.url + "/v1/completions", json=body, headers=bearer(token),
                      timeout=BOUND_S)  # fmt: skip
    assert done.status_code == 200, done.text
    return time.perf_counter() - start


def test_a_prompt_over_the_token_cap_is_refused(busy: ServerThread) -> None:
    body = {"model": "evermind/busy", "prompt": "word " * 200, "max_tokens": 2}
    refused = httpx.post(busy.url + "/v1/completions", json=body, headers=bearer(TOKEN_A))
    assert "at most 64 tokens" in assert_error(refused, 400, "prompt_too_long")


def test_abandoned_completions_stop_and_free_the_workers(busy: ServerThread) -> None:
    body = {"model": "evermind/busy", "prompt": "The", "max_tokens": LONG, "temperature": 0.0}

    def abandon() -> None:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(
                busy.url + "/v1/completions", json=body, headers=bearer(TOKEN_A), timeout=1.5
            )

    threads = [threading.Thread(target=abandon) for _ in range(4)]  # as many as the workers
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took_a, took_b = _small(busy, TOKEN_A), _small(busy, TOKEN_B)
    print(
        f"after 4 abandoned {LONG}-token completions: small ones took {took_a:.2f} / {took_b:.2f} s"
    )


def test_one_tenant_cannot_take_every_worker(busy: ServerThread) -> None:
    body = {"model": "evermind/busy", "prompt": "The", "max_tokens": LONG, "temperature": 0.0,
            "stream": True}  # fmt: skip
    started = threading.Barrier(5)
    stop = threading.Event()

    def hog() -> None:
        with httpx.stream("POST", busy.url + "/v1/completions", json=body,
                          headers=bearer(TOKEN_A), timeout=BOUND_S * 4) as response:  # fmt: skip
            started.wait()
            for _ in response.iter_bytes():
                if stop.is_set():
                    return  # closing the stream stops the generation

    hogs = [threading.Thread(target=hog) for _ in range(4)]  # four streams: every worker
    for thread in hogs:
        thread.start()
    try:
        started.wait(timeout=BOUND_S)
        took = _small(busy, TOKEN_B)
        print(f"tenant bravo's small completion while alpha streams 4 long ones: {took:.2f} s")
        # Fast streams must not flood the event loop (one wake-up per batch, backpressure):
        # before, token-by-token callbacks starved it and /healthz stopped answering.
        start = time.perf_counter()
        assert httpx.get(busy.url + "/healthz", timeout=BOUND_S).status_code == 200
        print(f"/healthz while alpha streams: {(time.perf_counter() - start) * 1000:.0f} ms")
    finally:
        stop.set()
        for thread in hogs:
            thread.join(timeout=BOUND_S)
    assert not any(thread.is_alive() for thread in hogs)
