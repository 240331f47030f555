"""The gateway's bounds (issue 35, item 9 and the connections of the minor items).

- An answer past the upstream's ``max_answer_chars`` is refused (502 ``upstream_too_large``,
  or the stream's error event) and never cached.
- A streamed hit comes in at most ``MAX_HIT_DELTAS`` (64) events however long the answer
  (was 24 characters an event: 37,500 events for 900,000 characters).
- A client that goes away mid-stream stops the upstream call.
- ``evermind serve`` (a process) stops within seconds of SIGTERM with a stream in flight, and
  200 idle connections cost it no thread and are closed after ``--keep-alive``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evermind.bridges.caching import MAX_HIT_DELTAS
from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, ServerProcess, bearer, gateway_config, write_tokens
from tests.upstreams import OpenAIUpstream

KEY = "sk-limits-6d1e0b7a44"
SMALL_CAP = 5_000


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(KEY) as gpt:
        yield gpt


def _upstreams(url: str) -> dict[str, Any]:
    common = {"protocol": "openai", "base_url": url + "/v1", "api_key": KEY, "max_retries": 0}
    return {
        "cache": {"embedder": "terms"},
        "upstreams": {"openai": common, "small": {**common, "max_answer_chars": SMALL_CAP}},
    }


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstream: OpenAIUpstream
) -> Iterator[ServerThread]:
    config = gateway_config(tmp_path_factory.mktemp("limits"), _upstreams(upstream.url))
    with ServerThread(config) as running:
        yield running


def ask(server: ServerThread, model: str, question: str, stream: bool = False) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "stream": stream,
    }
    with httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=60) as http:
        return http.post("/v1/chat/completions", json=body)


def answer(text: str) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "stop",
    }
    return {"id": "c", "model": "m", "choices": [choice], "usage": {"completion_tokens": 9}}


def chunks(pieces: list[str]) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps({'id': 'c', 'model': 'm', 'choices': [choice]})}\n\n"

    return [*(chunk({"content": p}) for p in pieces), chunk({}, "stop"), "data: [DONE]\n\n"]


def test_an_answer_past_max_answer_chars_is_refused_and_never_cached(
    server: ServerThread, upstream: OpenAIUpstream
) -> None:
    question = "Tell me everything at length"
    upstream.script(200, answer("word " * (SMALL_CAP // 2)))  # 12,500 characters
    refused = ask(server, "small/m", question)
    assert refused.status_code == 502, refused.text
    assert refused.json()["error"]["code"] == "upstream_too_large"
    assert "max_answer_chars" in refused.json()["error"]["message"]
    upstream.script(200, events=chunks(["x" * 1000] * 10))
    streamed = ask(server, "small/m", question, stream=True)
    assert '"code":"upstream_too_large"' in streamed.text and "data: [DONE]" not in streamed.text
    again = ask(server, "small/m", question)  # nothing was stored: a fresh call
    assert again.headers["x-evermind-cache"] == "miss"
    # the default cap (1,000,000 characters) against an 8 MB answer: refused unread
    upstream.script(200, answer("y" * 8_000_000))
    huge = ask(server, "openai/m", "And now an eight megabyte answer")
    assert huge.status_code == 502 and huge.json()["error"]["code"] == "upstream_too_large"


def test_a_long_hit_streams_in_a_bounded_number_of_events(
    server: ServerThread, upstream: OpenAIUpstream
) -> None:
    question = "Recite the long text"
    long_text = "lorem ipsum " * 75_000  # 900,000 characters, under the default cap
    upstream.script(200, answer(long_text))
    assert ask(server, "openai/m", question).headers["x-evermind-cache"] == "miss"
    started = time.perf_counter()
    hit = ask(server, "openai/m", question, stream=True)
    took = time.perf_counter() - started
    assert hit.headers["x-evermind-cache"] == "hit-l1"
    events = [line for line in hit.text.splitlines() if line.startswith("data: ")]
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in events
        if line != "data: [DONE]" and json.loads(line[6:])["choices"]
    )
    assert text == long_text.strip() or text == long_text
    assert len(events) <= MAX_HIT_DELTAS + 3, len(events)  # + the last chunk, usage, [DONE]
    print(f"\n900,000-character hit: {len(events)} events in {took * 1000:.0f} ms")


def test_a_client_that_goes_away_stops_the_upstream_call(tmp_path: Path) -> None:
    with OpenAIUpstream(KEY, reply=lambda _text: "slow " * 200, chunk_delay_s=0.05) as slow:
        config = gateway_config(tmp_path, _upstreams(slow.url))
        with ServerThread(config) as running:
            body = {
                "model": "openai/m",
                "messages": [{"role": "user", "content": "A long slow answer"}],
                "stream": True,
            }
            http = httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30)
            with http, http.stream("POST", "/v1/chat/completions", json=body) as response:
                for _line in response.iter_lines():
                    break  # the first event, then the client goes away
            deadline = time.monotonic() + 5  # the whole answer would take 10 s
            while not slow.stream_ends and time.monotonic() < deadline:
                time.sleep(0.05)
            assert slow.stream_ends == ["aborted"]


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_evermind_serve_holds_idle_connections_without_threads_and_stops_fast(
    tmp_path: Path,
) -> None:
    with OpenAIUpstream(KEY, reply=lambda _text: "slow " * 400, chunk_delay_s=0.05) as slow:
        upstreams = tmp_path / "upstreams.json"
        upstreams.write_text(json.dumps(_upstreams(slow.url)))
        server = ServerProcess(
            tmp_path / "data",
            write_tokens(tmp_path / "tokens.txt"),
            tmp_path / "serve.log",
            args=("--upstreams", str(upstreams), "--keep-alive", "2"),
        ).start()
        assert server.process is not None
        try:
            before = _threads(server.process.pid)
            idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]
            time.sleep(0.5)
            assert _threads(server.process.pid) <= before + 2  # no thread per connection
            assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
            time.sleep(3)  # past --keep-alive 2: the server has closed every idle socket
            closed = 0
            for sock in idle:
                sock.settimeout(2)
                try:
                    closed += sock.recv(1) == b""
                except OSError:
                    closed += 1
                sock.close()
            assert closed == 200
            # a stream in flight (20 s of it), then SIGTERM
            client = httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=30)
            body = {
                "model": "openai/m",
                "messages": [{"role": "user", "content": "stream for a while"}],
                "stream": True,
            }
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                next(response.iter_lines())
                started = time.monotonic()
                os.kill(server.process.pid, signal.SIGTERM)
                server.process.wait(timeout=30)
                stopped = time.monotonic() - started
            client.close()
        finally:
            server.kill()
    log = (tmp_path / "serve.log").read_text()
    print(f"\nSIGTERM with a stream in flight: stopped in {stopped:.1f} s")
    assert stopped < 10, log[-2000:]
    assert "Traceback" not in log, log[-3000:]
