"""Hostile requests get a clear 4xx, never a 500, and never a half-written row.

The attacks of the hardening issue, each as a test: lone surrogates in every text field,
subnormal temperatures, lax types (``"max_tokens": "10"``), JSON nested too deep to read back,
a cross-site form post and a DNS-rebinding ``Host`` against a server without tokens, and two
``Authorization`` headers. A property test then throws hypothesis-generated values at every
field of every JSON endpoint and asserts the answer is never a 5xx.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_B, assert_error, bearer, write_tokens

MODEL = "evermind/hostile"
LONE = "a\ud800b"


def post(client: httpx.Client, path: str, body: Any, **headers: str) -> httpx.Response:
    """POSTs ``body`` as JSON text as a client would send it (``\\ud800`` escapes and all)."""
    data = json.dumps(body).encode()
    return client.post(path, content=data, headers={"content-type": "application/json", **headers})


@pytest.fixture(scope="module")
def client(server: ServerThread, alpha: httpx.Client) -> httpx.Client:
    assert alpha.post("/v1/models", content=tiny_package("hostile", "1.0.0")).status_code in (
        200,
        201,
    )
    return alpha


ENDPOINTS: dict[str, dict[str, Any]] = {
    "/v1/completions": {"model": MODEL, "prompt": "hi", "max_tokens": 2},
    "/v1/chat/completions": {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
    },
    "/v1/embeddings": {"model": MODEL, "input": "hi"},
    "/v1/memory/remember": {"key": "k", "content": "hi", "tags": ["t"]},
    "/v1/memory/recall": {"query": "hi"},
    "/v1/semantic-cache/store": {"embedding": [1.0, 0.0], "response": "r", "query": "q"},
    "/v1/semantic-cache/lookup": {"embedding": [1.0, 0.0], "query": "q"},
    "/v1/retrieve": {"question": "hi"},
    "/v1/answer": {"question": "hi", "answer_with": "m"},
}


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/completions", "prompt"),
        ("/v1/embeddings", "input"),
        ("/v1/memory/remember", "key"),
        ("/v1/memory/remember", "content"),
        ("/v1/memory/recall", "query"),
        ("/v1/semantic-cache/store", "query"),
        ("/v1/retrieve", "question"),
        ("/v1/answer", "question"),
        ("/v1/answer", "answer_with"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_the_field(
    client: httpx.Client, path: str, field: str
) -> None:
    body = {**ENDPOINTS[path], field: LONE}
    message = assert_error(post(client, path, body), 400)
    assert field in message and "surrogate" in message


def test_lone_surrogates_in_chat_content_and_tags_are_refused(client: httpx.Client) -> None:
    chat = {**ENDPOINTS["/v1/chat/completions"], "messages": [{"role": "user", "content": LONE}]}
    assert "messages[0].content" in assert_error(post(client, "/v1/chat/completions", chat), 400)
    tags = {**ENDPOINTS["/v1/memory/remember"], "tags": [LONE]}
    assert "tags[0]" in assert_error(post(client, "/v1/memory/remember", tags), 400)


@pytest.mark.parametrize("temperature", [5e-324, 1e-308, 2.2250738585072014e-308, 0.0])
def test_a_subnormal_temperature_generates(client: httpx.Client, temperature: float) -> None:
    body = {**ENDPOINTS["/v1/completions"], "temperature": temperature}
    assert post(client, "/v1/completions", body).status_code == 200


@pytest.mark.parametrize(
    ("field", "value"), [("max_tokens", "10"), ("stream", "yes"), ("temperature", "0.5")]
)
def test_types_are_strict_as_the_openai_api_documents(
    client: httpx.Client, field: str, value: str
) -> None:
    body = {**ENDPOINTS["/v1/completions"], field: value}
    assert field in assert_error(post(client, "/v1/completions", body), 400)


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


def test_deep_json_is_refused_before_the_write_and_the_namespace_stays_readable(
    client: httpx.Client,
) -> None:
    namespace = "deep-json"
    ok = {"key": "fine", "content": "a readable memory", "namespace": namespace}
    assert post(client, "/v1/memory/remember", ok).status_code == 200
    bad = {"key": "deep", "content": "x", "namespace": namespace, "meta": _deep(300)}
    assert "nested deeper" in assert_error(post(client, "/v1/memory/remember", bad), 400)
    listed = client.get("/v1/memory", params={"namespace": namespace})
    assert listed.status_code == 200
    assert [m["key"] for m in listed.json()["data"]] == ["fine"]  # nothing half-written
    recalled = post(client, "/v1/memory/recall", {"query": "readable", "namespace": namespace})
    assert recalled.status_code == 200 and recalled.json()["data"][0]["key"] == "fine"
    cache = {
        "embedding": [0.0, 1.0],
        "response": _deep(300),
        "query": "deep",
        "namespace": namespace,
    }
    assert_error(post(client, "/v1/semantic-cache/store", cache), 400)
    shallow = {**cache, "response": _deep(20)}  # deep but within the limit: stored and served
    assert post(client, "/v1/semantic-cache/store", shallow).status_code == 200
    hit = post(client, "/v1/semantic-cache/lookup", {"embedding": [0.0, 1.0], "query": "deep",
                                                      "namespace": namespace})  # fmt: skip
    assert hit.status_code == 200 and hit.json()["hit"]["response"] == _deep(20)


def test_two_authorization_headers_are_refused(server: ServerThread) -> None:
    headers = [("authorization", "Bearer wrong-token"), ("authorization", f"Bearer {TOKEN_A}")]
    response = httpx.get(server.url + "/v1/models", headers=headers)
    assert_error(response, 400, "duplicate_authorization")


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server WITHOUT a tokens file (loopback only): the one a web page could reach."""
    root: Path = tmp_path_factory.mktemp("open-runtime")
    with ServerThread(RuntimeConfig(data_dir=root / "data", port=0, rate_limit=0)) as running:
        yield running


def test_a_cross_site_form_post_cannot_install_a_model(open_server: ServerThread) -> None:
    package = tiny_package("csrf", "1.0.0")
    form = {"content-type": "text/plain", "origin": "https://attacker.example"}
    refused = httpx.post(open_server.url + "/v1/models", content=package, headers=form)
    assert_error(refused, 403, "forbidden_origin")
    no_origin = httpx.post(
        open_server.url + "/v1/models", content=package, headers={"content-type": "text/plain"}
    )
    assert_error(no_origin, 415, "unsupported_media_type")
    assert httpx.get(open_server.url + "/v1/models").json()["data"] == []
    # The Studio on another loopback port may push, as before.
    studio = {"content-type": "application/octet-stream", "origin": "http://127.0.0.1:5173"}
    assert (
        httpx.post(open_server.url + "/v1/models", content=package, headers=studio).status_code
        == 201
    )


def test_dns_rebinding_host_is_refused(open_server: ServerThread) -> None:
    remember = {"key": "secret", "content": "the launch code"}
    for host in ("attacker.example", "attacker.example:8377", "127.attacker.example"):
        read = httpx.get(open_server.url + "/v1/memory", headers={"host": host})
        assert_error(read, 421, "misdirected_request")
        write = httpx.post(open_server.url + "/v1/memory/remember", json=remember,
                           headers={"host": host})  # fmt: skip
        assert_error(write, 421, "misdirected_request")
    for host in ("127.0.0.1", "localhost:1234", "[::1]:8377"):
        assert httpx.get(open_server.url + "/v1/memory", headers={"host": host}).status_code == 200


#: Answers of the property test by status class (2: served, 4: refused).
STATUSES: dict[int, int] = {}

HOSTILE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True),
        st.text(max_size=20),
        st.sampled_from([LONE, "\ud800", "\udfff", "10", "yes", "", "\x00", "\u2028", "NaN"]),
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=int(os.environ.get("EVERMIND_HOSTILE_EXAMPLES", "120")),  # more: a longer attack
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=st.sampled_from(sorted(ENDPOINTS)), data=st.data())
def test_no_hostile_value_in_any_field_gives_a_5xx(
    client: httpx.Client, path: str, data: Any
) -> None:
    body = dict(ENDPOINTS[path])
    field = data.draw(st.sampled_from([*sorted(body), "namespace", "meta", "temperature"]))
    body[field] = data.draw(HOSTILE)
    response = post(client, path, body)
    STATUSES[response.status_code // 100] = STATUSES.get(response.status_code // 100, 0) + 1
    assert response.status_code < 500, (path, field, body[field], response.text[:300])


def test_the_hostile_values_reached_both_the_served_and_the_refused_paths() -> None:
    """The property test is only a proof if its values both pass validation and fail it."""
    if not STATUSES:
        alone = (
            "no hostile statuses recorded: this check reads what "
            "test_no_hostile_value_in_any_field_gives_a_5xx counted, and it did not run first "
            "in this session (e.g. -k selected this test alone)"
        )
        pytest.skip(reason=alone)
    print(f"hostile requests by status class: {dict(sorted(STATUSES.items()))}")
    assert STATUSES.get(2, 0) > 0 and STATUSES.get(4, 0) > 0 and 5 not in STATUSES


def test_a_huge_recall_query_is_refused_and_healthz_stays_responsive(
    server: ServerThread, client: httpx.Client
) -> None:
    """Max-size recalls, lexical and semantic, rank off the event loop: /healthz < 100 ms.

    On the code that ranked on the loop, 32 such recalls (8 at a time) held /healthz for
    170 and 1040 ms (two runs, 2 cores at load ~5); off the loop, 60 and 95 ms at worst (median
    ~8 ms) on the same machine.
    """
    namespace, long = "big-recall", "big-recall-long"
    words = [f"term{i}" for i in range(3000)]
    for i in range(300):  # 300 memories of 100 words, and 300 of 400 (ranked lexically)
        for where, size in ((namespace, 100), (long, 400)):
            body = {"key": f"m{i}", "content": " ".join(words[i : i + size]), "namespace": where}
            assert post(client, "/v1/memory/remember", body).status_code == 200
    huge = " ".join(words * 130)  # ~3.4 MB, the attack's size (under the 4 MB body cap)
    message = assert_error(
        post(client, "/v1/memory/recall", {"query": huge, "namespace": namespace}), 400
    )
    assert "8192" in message
    largest = " ".join(words)[:8192]  # the biggest query recall accepts
    lexical = {"query": largest, "namespace": long}
    semantic = {"query": largest, "namespace": namespace, "model": MODEL}  # and cosines
    warm = client.post("/v1/memory/recall", json={**semantic, "query": "term1"}, timeout=120)
    assert warm.status_code == 200  # embedded the 300 memories (a recall embeds its query)
    answers: list[httpx.Response] = []

    async def recalls() -> None:  # one client thread: the server's threads do the computing
        headers = {**client.headers, "content-type": "application/json"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=120) as busy:
            gate = asyncio.Semaphore(8)  # 8 recalls at a time

            async def recall(body: dict[str, Any]) -> httpx.Response:
                async with gate:
                    return await busy.post("/v1/memory/recall", content=json.dumps(body))

            bodies = [semantic if n % 2 else lexical for n in range(32)]
            answers.extend(await asyncio.gather(*(recall(b) for b in bodies)))

    latencies: list[float] = []
    # The server here shares the test process, whose heap holds every earlier test's objects;
    # `evermind serve` freezes its start-up objects out of the collector's sight (server.py),
    # and so does this window, else one full collection of the suite's heap stalls the loop
    # and the probe with it: a test artefact, not the server's (975,000 objects after
    # tests/runtime and tests/unit, one full collection 800 ms; a CI run under load saw one
    # probe of 567 ms).
    gc.collect()
    gc.freeze()
    pauses = _collector_pauses()  # during the window only
    try:
        with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server.url) as probe:
            assert probe.get("/healthz").status_code == 200  # connected before the clock runs
            done = pool.submit(asyncio.run, recalls())
            while not done.done():
                start = time.perf_counter()
                assert probe.get("/healthz", timeout=10).status_code == 200
                latencies.append(time.perf_counter() - start)
                time.sleep(0.005)
            done.result()
    finally:
        gc.unfreeze()
        gc.callbacks.remove(pauses.record)
    worst = max(latencies)
    print(
        f"/healthz during 32 max-size recalls: worst {worst * 1000:.0f} ms, median "
        f"{sorted(latencies)[len(latencies) // 2] * 1000:.0f} ms over {len(latencies)} probes; "
        f"longest collection {pauses.longest_ms} ms"
    )
    assert all(a.status_code == 200 for a in answers), [a.text[:200] for a in answers]
    assert any("semantic" in a.json()["data"][0]["ranked_by"] for a in answers)
    # The bound, 100 ms, for 95% of the probes; one probe may be later (< 500 ms).
    # On a busy machine the recall threads' turns at the GIL delay a single probe now and
    # then (104 ms worst, once, with three CPU-bound processes on two cores), whereas a
    # blocked loop delays every probe sent during a recall (170-1040 ms worst; 4 s once).
    p95 = sorted(latencies)[int(0.95 * (len(latencies) - 1))]
    assert p95 < 0.1 and worst < 0.5, (p95, worst, f"longest collection {pauses.longest_ms} ms")


def test_failed_authentication_slows_the_credential_never_a_valid_token(tmp_path: Path) -> None:
    """Issue 35 item 7: the limiter keys on the failed credential. A client repeating a wrong
    token is refused before the lookup; another tenant's valid token, sent from the same
    address between the failures, is never refused; distinct wrong tokens each get their
    401 (token entropy, not this limiter, defends against guessing)."""
    config = RuntimeConfig(
        data_dir=tmp_path / "data", port=0, tokens_file=write_tokens(tmp_path / "t"), rate_limit=0
    )
    with ServerThread(config) as guarded, httpx.Client(base_url=guarded.url) as client:
        repeated, valid = [], []
        for _ in range(60):
            repeated.append(client.get("/v1/models", headers=bearer("a-revoked-token")).status_code)
            valid.append(client.get("/v1/models", headers=bearer(TOKEN_B)).status_code)
        assert repeated[:20] == [401] * 20  # the burst: plain "wrong token"
        assert repeated[-10:] == [429] * 10  # then that credential is refused unlooked-at
        assert valid == [200] * 60  # never a 429 for the valid token at the same address
        blocked = client.get("/v1/models", headers=bearer("a-revoked-token"))
        assert_error(blocked, 429, "rate_limited")
        assert int(blocked.headers["retry-after"]) >= 1
        guesses = [
            client.get("/v1/models", headers=bearer(f"guess-{n:04d}")).status_code
            for n in range(30)
        ]
        assert guesses == [401] * 30


def test_a_rotating_x_forwarded_for_does_not_dodge_the_limiter(tmp_path: Path) -> None:
    """Without --trusted-proxy the header is ignored: requests with no credential from one
    socket share one bucket, whatever address they claim. Behind a trusted proxy, the header
    names the client."""
    tokens = write_tokens(tmp_path / "t")

    def statuses(config: RuntimeConfig) -> list[int]:
        with ServerThread(config) as running, httpx.Client(base_url=running.url) as client:
            return [
                client.get("/v1/models", headers={"X-Forwarded-For": f"203.0.113.{n}"}).status_code
                for n in range(30)
            ]

    plain = statuses(RuntimeConfig(data_dir=tmp_path / "a", port=0, tokens_file=tokens))
    assert plain[:20] == [401] * 20 and plain[-5:] == [429] * 5
    proxied = RuntimeConfig(
        data_dir=tmp_path / "b", port=0, tokens_file=tokens, trusted_proxies=["127.0.0.1"]
    )
    assert statuses(proxied) == [401] * 30  # each claimed client its own bucket


class _Pauses:
    """The longest garbage collection since :func:`_collector_pauses` (gc.callbacks)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.longest_ms = 0.0

    def record(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            took = (time.perf_counter() - self.started) * 1000
            self.longest_ms = max(self.longest_ms, round(took, 1))


def _collector_pauses() -> _Pauses:
    pauses = _Pauses()
    gc.callbacks.append(pauses.record)
    return pauses
