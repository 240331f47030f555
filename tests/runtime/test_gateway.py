"""The caching gateway end to end: the official ``openai`` client against the runtime, whose
upstreams are the loopback OpenAI and Anthropic servers of :mod:`tests.upstreams`.

A request, then a paraphrase served from the cache (header, body field, saving); a near-miss
is not; tenants never share entries; streams hit and miss; upstream faults become clean
statuses; keys never reach a response or the log; ``/metrics`` counts it all.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, TOKEN_B, bearer, gateway_config
from tests.upstreams import AnthropicUpstream, OpenAIUpstream

OPENAI_KEY = "sk-gateway-openai-secret-91c4e2"
ANTHROPIC_KEY = "sk-ant-gateway-secret-5b7d10"
MODEL = "openai/gpt-4o-mini"
CLAUDE = "anthropic/claude-sonnet-4-5"

QUESTION = "How do I reverse a list in Python?"
PARAPHRASE = "Python: how do I reverse a list, please?"
NEAR_MISS = "How do I sort a list in Python?"


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[OpenAIUpstream, AnthropicUpstream]]:
    with OpenAIUpstream(OPENAI_KEY) as gpt, AnthropicUpstream(ANTHROPIC_KEY) as claude:
        yield gpt, claude


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory,
    upstreams: tuple[OpenAIUpstream, AnthropicUpstream],
) -> Iterator[ServerThread]:
    gpt, claude = upstreams
    root = tmp_path_factory.mktemp("gateway")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVERMIND_TEST_GATEWAY_KEY", OPENAI_KEY)
    config = gateway_config(
        root,
        {
            # The rule-based decision: these tests check the gateway's plumbing (hits, streams,
            # tiers, headers); the verified decision (the default) is test_gateway_verified.py's.
            "cache": {"embedder": "terms", "max_error": "off"},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": gpt.url + "/v1",
                    "api_key": "env:EVERMIND_TEST_GATEWAY_KEY",
                    "max_retries": 0,
                },
                "slow": {  # the same server, with a deadline it misses when told to
                    "protocol": "openai",
                    "base_url": gpt.url + "/v1",
                    "api_key": OPENAI_KEY,
                    "timeout": 0.5,
                    "max_retries": 0,
                },
                "anthropic": {
                    "protocol": "anthropic",
                    "base_url": claude.url,
                    "api_key": ANTHROPIC_KEY,
                    "models": ["claude-sonnet-4-5"],
                    "tenants": ["alpha"],
                    "max_retries": 0,
                },
            },
        },
    )
    try:
        with ServerThread(config) as running:
            yield running
    finally:
        mp.undo()


def client(server: ServerThread, token: str = TOKEN_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=token, max_retries=0)


def ask(server: ServerThread, text: str, token: str = TOKEN_A, **options: Any) -> Any:
    """A raw chat call: ``.headers`` and ``.parse()``."""
    options.setdefault("temperature", 0)
    return client(server, token).chat.completions.with_raw_response.create(
        model=options.pop("model", MODEL),
        messages=[{"role": "user", "content": text}],
        **options,
    )


def test_a_paraphrase_is_served_from_the_cache_and_a_near_miss_is_not(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    before = len(gpt.requests)
    first = ask(gateway, QUESTION)
    assert first.headers["x-evermind-cache"] == "miss"
    answer = first.parse()
    assert answer.choices[0].message.content == f"Answer to: {QUESTION}"
    assert answer.model_extra["evermind"]["cached"] is False
    paid = answer.usage
    assert paid.prompt_tokens > 0 and paid.completion_tokens > 0

    again = ask(gateway, PARAPHRASE)
    assert again.headers["x-evermind-cache"] == "hit-l1", again.headers.get(
        "x-evermind-cache-reason"
    )
    served = again.parse()
    assert served.choices[0].message.content == f"Answer to: {QUESTION}"
    field = served.model_extra["evermind"]
    assert field["cached"] is True and field["tier"] == "l1"
    assert field["cached_query"] == QUESTION and 0 < field["score"] <= 1
    saved = field["saved_tokens"]
    assert saved["output"] == paid.completion_tokens
    assert saved["input"] + saved["cache_read"] + saved["cache_write"] == paid.prompt_tokens
    assert served.usage.prompt_tokens == 0 and served.usage.completion_tokens == 0
    paid_usd = answer.model_extra["evermind"]["cost_usd"]
    assert paid_usd > 0 and field["saved_usd"] == pytest.approx(paid_usd)  # priced: gpt-4o-mini
    assert len(gpt.requests) == before + 1  # the paraphrase never reached the upstream

    near = ask(gateway, NEAR_MISS)
    assert near.headers["x-evermind-cache"] == "miss"
    refused = near.parse()
    assert refused.choices[0].message.content == f"Answer to: {NEAR_MISS}"
    assert "refused" in refused.model_extra["evermind"]["detail"]  # the cache's own reason
    assert len(gpt.requests) == before + 2


def test_two_tenants_never_share_entries(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    text = "What does the walrus operator do in Python?"
    assert ask(gateway, text).headers["x-evermind-cache"] == "miss"
    assert ask(gateway, text).headers["x-evermind-cache"] == "hit-l1"
    before = len(gpt.requests)
    bravo = ask(gateway, text, TOKEN_B)
    assert bravo.headers["x-evermind-cache"] == "miss"
    assert len(gpt.requests) == before + 1


def test_the_policy_bypasses_sampled_requests_unless_opted_in(gateway: ServerThread) -> None:
    text = "Name three uses of a Python generator."
    sampled = ask(gateway, text, temperature=0.8)
    assert sampled.headers["x-evermind-cache"] == "bypass"
    assert sampled.headers["x-evermind-cache-reason"] == "temperature"
    opted = {"extra_headers": {"x-evermind-cache": "on"}, "temperature": 0.8}
    assert ask(gateway, text, **opted).headers["x-evermind-cache"] == "miss"
    assert ask(gateway, text, **opted).headers["x-evermind-cache"] == "hit-l1"


def _stream(gateway: ServerThread, text: str) -> tuple[str, str, list[Any]]:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(raw.parse())
    text_out = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return raw.headers["x-evermind-cache"], text_out, chunks


def test_streams_work_on_a_miss_and_on_a_hit(gateway: ServerThread) -> None:
    text = "How do I read a file line by line in Python?"
    status, streamed, chunks = _stream(gateway, text)
    assert status == "miss" and streamed == f"Answer to: {text}"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    status, streamed, chunks = _stream(gateway, "Python: read a file line by line?")
    assert status == "hit-l1" and streamed == f"Answer to: {text}"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals and finals[-1].model_extra["evermind"]["cached"] is True
    # the streamed miss was stored whole: a plain request is served it too
    assert ask(gateway, text).headers["x-evermind-cache"] == "hit-l1"


def test_the_anthropic_upstream_behind_the_openai_shape(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    _, claude = upstreams
    text = "What is a Python decorator?"
    first = ask(gateway, text, model=CLAUDE)
    assert first.headers["x-evermind-cache"] == "miss"
    assert first.parse().choices[0].message.content == f"Answer to: {text}"
    assert claude.last.path.endswith("/v1/messages")  # it checked the key: a wrong one is a 401
    assert ask(gateway, text, model=CLAUDE).headers["x-evermind-cache"] == "hit-l1"
    # the same question to another upstream is another scope
    assert ask(gateway, text).headers["x-evermind-cache"] == "miss"


WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


def test_tools_and_tool_results_pass_through_and_bypass_the_cache(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    question = "Use weather for Paris today"
    raw = client(gateway).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": question}],
        tools=[WEATHER],
        temperature=0,
    )
    assert raw.headers["x-evermind-cache"] == "bypass"
    assert raw.headers["x-evermind-cache-reason"] == "tools"
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "weather" and json.loads(call.function.arguments)
    assert gpt.last.body["tools"][0]["function"]["name"] == "weather"
    turns = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    answer = client(gateway).chat.completions.with_raw_response.create(
        model=MODEL, messages=turns, temperature=0
    )
    assert answer.headers["x-evermind-cache-reason"] == "tool_results"
    assert answer.parse().choices[0].message.content == "Tool said: sunny, 21 C"
    sent = gpt.last.body["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["tool_call_id"] == call.id


def test_models_and_tenants_the_config_does_not_allow_are_refused(gateway: ServerThread) -> None:
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_B), timeout=30) as http:
        body = {"model": CLAUDE, "messages": [{"role": "user", "content": "hi"}]}
        assert http.post("/v1/chat/completions", json=body).status_code == 403
        body["model"] = "anthropic/claude-unlisted"
        with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as alpha:
            refused = alpha.post("/v1/chat/completions", json=body)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("fault", "status", "error"),
    [
        ("rate_limit", 429, openai.RateLimitError),
        ("server_error", 500, openai.InternalServerError),  # the upstream's own, relayed
        ("auth", 502, openai.InternalServerError),
        ("cut", 502, openai.InternalServerError),
    ],
)
def test_upstream_faults_become_clean_statuses(
    gateway: ServerThread,
    upstreams: tuple[OpenAIUpstream, AnthropicUpstream],
    fault: str,
    status: int,
    error: type[openai.APIStatusError],
) -> None:
    gpt, _ = upstreams
    gpt.fail(fault, times=1, retry_after=3)
    with pytest.raises(error) as raised:
        ask(gateway, f"A question that meets the fault {fault}", temperature=0.5)
    assert raised.value.status_code == status
    if fault == "rate_limit":
        assert raised.value.response.headers["retry-after"] == "3"
    body = raised.value.response.json()["error"]
    if fault == "server_error":  # its error object, word for word
        assert body == {
            "message": "scripted fault: server_error",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    else:
        assert body["code"].startswith("upstream_")
    assert OPENAI_KEY not in raised.value.response.text


def test_an_upstream_past_its_deadline_is_a_504(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    gpt.latency_s = 1.5
    try:
        with pytest.raises(openai.APIStatusError) as raised:
            ask(gateway, "A question nobody answers in time", model="slow/gpt-4o-mini")
    finally:
        gpt.latency_s = 0.0
    assert raised.value.status_code == 504
    assert raised.value.response.json()["error"]["code"] == "upstream_timeout"


def test_the_shared_l2_serves_what_this_process_forgot(gateway: ServerThread) -> None:
    text = "How do I pretty-print JSON in Python?"
    assert ask(gateway, text).headers["x-evermind-cache"] == "miss"
    runtime = gateway.server.config.app.state.runtime  # the in-process server's services
    runtime.gateway.cache.clear()  # L1 forgets; the SQLite L2 keeps it
    again = ask(gateway, "Python: pretty-print JSON, how do I?")
    assert again.headers["x-evermind-cache"] == "hit-l2"
    assert again.parse().model_extra["evermind"]["cached_query"] == text
    assert ask(gateway, text).headers["x-evermind-cache"] == "hit-l1"  # promoted into L1


def test_a_stream_cut_halfway_ends_with_an_error_event_and_is_not_stored(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    text = "How do I merge two dicts in Python?"
    gpt.fail("truncate", times=1)
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": text}],
            "temperature": 0,
            "stream": True,
        }
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert '"code":"upstream_stream_cut"' in response.text
    assert "data: [DONE]\n\n" not in response.text
    assert ask(gateway, text).headers["x-evermind-cache"] == "miss"  # nothing was stored


def test_keys_never_reach_a_response_or_the_log(
    gateway: ServerThread,
    upstreams: tuple[OpenAIUpstream, AnthropicUpstream],
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpt, _ = upstreams
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG):
        for fault in (None, "auth", "server_error"):
            if fault is not None:
                gpt.fail(fault)
            with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
                body = {"model": MODEL, "messages": [{"role": "user", "content": "keys?"}]}
                answer = http.post("/v1/chat/completions", json=body)
                seen.append(answer.text + json.dumps(dict(answer.headers)))
                seen.append(http.get("/metrics").text)
    log = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (OPENAI_KEY, ANTHROPIC_KEY):
        assert all(secret not in text for text in seen)
        assert secret not in log


def test_metrics_count_requests_tokens_cost_and_savings_per_tenant_and_upstream(
    gateway: ServerThread,
) -> None:
    text = "What is a Python context manager?"
    ask(gateway, text)
    ask(gateway, text)
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        metrics = http.get("/metrics").text
    alpha = "t-" + hashlib.sha256(b"alpha").hexdigest()[:12]
    label = f'tenant="{alpha}",upstream="openai"'

    def value(line_start: str) -> float:
        line = next(x for x in metrics.splitlines() if x.startswith(line_start))
        return float(line.rsplit(" ", 1)[1])

    assert value(f'evermind_gateway_requests_total{{{label},cache="hit-l1"}}') >= 1
    assert value(f'evermind_gateway_requests_total{{{label},cache="miss"}}') >= 1
    assert value(f'evermind_gateway_tokens_total{{{label},kind="output"}}') > 0
    assert value(f'evermind_gateway_saved_tokens_total{{{label},kind="output"}}') > 0
    assert 0 < value(f"evermind_gateway_cache_hit_ratio{{{label}}}") < 1
    assert value(f'evermind_gateway_errors_total{{{label},code="upstream_rate_limited"}}') >= 0
    assert value(f"evermind_gateway_saved_usd_total{{{label}}}") > 0
    assert value(f"evermind_gateway_cost_usd_total{{{label}}}") > 0
    assert 'tenant="alpha"' not in metrics  # tenants are labelled by a hash


def test_evermind_models_stay_local(gateway: ServerThread) -> None:
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        body = {"model": "evermind/none-such", "messages": [{"role": "user", "content": "hi"}]}
        answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 404 and "x-evermind-cache" not in answer.headers


def test_resolve_picks_each_tenants_key_and_refuses_a_tenant_without_one() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from evermind.errors import AccessError
    from evermind.runtime.gateway.config import GatewayConfig
    from evermind.runtime.gateway.core import Gateway
    from evermind.runtime.metrics import Metrics
    from evermind.tokens import Principal

    raw = {
        "cache": {"embedder": "none"},
        "upstreams": {"gpt": {"protocol": "openai", "tenant_keys": {"alpha": "key-a"}}},
    }
    config = GatewayConfig.parse(raw, "test", {})
    seen: list[str] = []

    class Recorder:
        provider = "openai"
        last_usage = None

        async def aclose(self) -> None:
            pass

    def connect(upstream: Any, key: str) -> Any:
        seen.append(key)
        return Recorder()

    with ThreadPoolExecutor(1) as pool:
        gateway = Gateway(config, None, pool, Metrics(), connect=connect)
        routed = gateway.resolve("gpt/gpt-4o", Principal("alpha", "read"))
        assert routed is not None and routed.model == "gpt-4o" and seen == ["key-a"]
        assert gateway.resolve("gpt/gpt-4o", Principal("alpha", "read")).bridge is routed.bridge
        assert gateway.resolve("evermind/notes", Principal("alpha", "read")) is None
        assert gateway.resolve("unknown/x", Principal("alpha", "read")) is None
        with pytest.raises(AccessError, match="no key"):
            gateway.resolve("gpt/gpt-4o", Principal("bravo", "read"))
        assert gateway.scrub("echoed key-a back") == "echoed *** back"


def test_the_upstreams_file_is_checked_at_start(tmp_path: Path) -> None:
    from evermind.errors import ConfigError
    from evermind.runtime.gateway.config import GatewayConfig

    bad = tmp_path / "u.toml"
    bad.write_text('[upstreams.x]\nprotocol = "openai"\napi_key = "env:NOPE_NOT_SET"\n')
    with pytest.raises(ConfigError, match="NOPE_NOT_SET"):
        GatewayConfig.load(bad, environ={})
    bad.write_text('[upstreams.x]\nprotocol = "grpc"\n')
    with pytest.raises(ConfigError, match="protocol"):
        GatewayConfig.load(bad)
    bad.write_text('[upstreams.evermind]\nprotocol = "openai"\n')
    with pytest.raises(ConfigError, match="reserved"):
        GatewayConfig.load(bad)
    good = tmp_path / "g.toml"
    good.write_text(
        '[cache]\nttl = 60\n[cache.shared]\nalpha = "team"\n'
        '[upstreams.gpt]\nprotocol = "openai"\napi_key = "env:K"\n'
        '[upstreams.gpt.tenant_keys]\nbravo = "literal-key"\n'
    )
    config = GatewayConfig.load(good, environ={"K": "from-env"})
    upstream = config.upstreams["gpt"]
    assert upstream.key_for("alpha") == "from-env" and upstream.key_for("bravo") == "literal-key"
    assert "from-env" not in repr(config) and "literal-key" not in repr(config)
    assert config.policy.namespace("alpha") == "team" and config.policy.ttl == 60


# -- POST /v1/messages through the official anthropic client ----------------------------------


def claude_client(server: ServerThread, token: str = TOKEN_A) -> Any:
    import anthropic

    return anthropic.Anthropic(base_url=server.url, api_key=token, max_retries=0)


def test_messages_json_miss_then_a_paraphrase_hit(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    _, claude = upstreams
    before = len(claude.requests)
    text = "How do I make a Python virtual environment?"
    raw = claude_client(gateway).messages.with_raw_response.create(
        model=CLAUDE,
        max_tokens=64,
        system="You answer briefly.",
        messages=[{"role": "user", "content": text}],
        extra_body={"temperature": 0},  # this SDK has no temperature argument
    )
    assert raw.headers["x-evermind-cache"] == "miss"
    message = raw.parse()
    assert message.content[0].text == f"Answer to: {text}"
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    assert claude.last.body["system"] == "You answer briefly."  # passed on as sent
    again = claude_client(gateway).messages.with_raw_response.create(
        model=CLAUDE,
        max_tokens=64,
        system="You answer briefly.",
        messages=[{"role": "user", "content": "Python: make a virtual environment, how?"}],
        extra_body={"temperature": 0},  # this SDK has no temperature argument
    )
    assert again.headers["x-evermind-cache"] == "hit-l1", again.headers.get(
        "x-evermind-cache-reason"
    )
    served = again.parse()
    assert served.content[0].text == f"Answer to: {text}"
    assert served.usage.input_tokens == 0 and served.usage.output_tokens == 0
    assert served.model_extra["evermind"]["saved_usd"] > 0  # claude-sonnet-4-5 is priced
    assert len(claude.requests) == before + 1
    # another system prompt is another scope
    other = claude_client(gateway).messages.with_raw_response.create(
        model=CLAUDE,
        max_tokens=64,
        system="You answer at length.",
        messages=[{"role": "user", "content": text}],
        extra_body={"temperature": 0},  # this SDK has no temperature argument
    )
    assert other.headers["x-evermind-cache"] == "miss"


def test_messages_stream_miss_and_hit_with_a_bearer_token_too(gateway: ServerThread) -> None:
    import anthropic

    text = "What does functools.lru_cache do in Python?"
    for expected in ("miss", "hit-l1"):
        client_ = anthropic.Anthropic(base_url=gateway.url, auth_token=TOKEN_A, max_retries=0)
        with client_.messages.stream(
            model=CLAUDE,
            max_tokens=64,
            messages=[{"role": "user", "content": text}],
            extra_body={"temperature": 0},  # this SDK has no temperature argument
        ) as stream:
            assert stream.response.headers["x-evermind-cache"] == expected
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert streamed == f"Answer to: {text}" == final.content[0].text
        assert final.stop_reason == "end_turn"


def test_a_messages_stream_cut_halfway_ends_with_an_error_event_and_is_not_stored(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    _, claude = upstreams
    text = "How do I reverse a list in place in Python?"
    claude.fail("truncate", times=1)
    body = {
        "model": CLAUDE,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
        "temperature": 0,
        "stream": True,
    }
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        cut = http.post("/v1/messages", json=body)
        assert cut.status_code == 200
        assert "event: error" in cut.text and "cut the stream before its end" in cut.text
        assert "event: message_stop" not in cut.text
        again = http.post("/v1/messages", json=body)
    assert again.headers["x-evermind-cache"] == "miss"  # nothing was stored
    assert "event: message_stop" in again.text


def test_messages_to_an_openai_upstream_and_errors(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    import anthropic

    gpt, _ = upstreams
    text = "What is a Python f-string?"
    message = claude_client(gateway).messages.create(
        model=MODEL, max_tokens=32, messages=[{"role": "user", "content": text}]
    )
    assert message.content[0].text == f"Answer to: {text}"
    gpt.fail("rate_limit", retry_after=2)
    with pytest.raises(anthropic.RateLimitError) as raised:
        claude_client(gateway).messages.create(
            model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "rate me"}]
        )
    assert raised.value.response.headers["retry-after"] == "2"
    with pytest.raises(anthropic.NotFoundError):
        claude_client(gateway).messages.create(
            model="evermind/local", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(anthropic.AuthenticationError):
        claude_client(gateway, token="not-a-runtime-token").messages.create(
            model=CLAUDE, max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )


def test_the_replay_benchmark_runs_end_to_end() -> None:
    """``evermind bench gateway`` on three triples (structure only; the numbers are the
    machine's)."""
    from benchmarks.gateway import format_table, run_gateway_bench
    from evals import find

    if not find("cache_pairs_dev.jsonl").is_file():
        missing = "the development set cache_pairs_dev.jsonl is not here ($EVERMIND_EVAL_DIR)"
        pytest.skip(reason=missing)
    doc = run_gateway_bench(("none", "terms"), probes=3, limit=3)
    none, terms = doc["rows"]
    assert none["replay"] is None and none["overhead"]["probes"] == 3
    replay = terms["replay"]
    assert replay["requests"] == 12 and replay["sent"]["near_miss"] == 3
    assert replay["hits"]["repeat"] == 3  # an exact repeat is always served
    assert replay["wrong_answers_served"] == 0
    assert "| terms |" in format_table(doc)
    assert len(doc["load_average"]) == 2  # what else ran on the cores, said with the numbers


def test_the_interleaved_ab_benchmark_runs_end_to_end() -> None:
    """``benchmarks.gateway_ab`` with this checkout on both sides (structure only)."""
    from benchmarks.gateway import ROOT
    from benchmarks.gateway_ab import run_ab

    doc = run_ab(ROOT, "terms", probes=3)
    assert set(doc["p50_ms"]) == {"direct", "before", "after"}
    assert set(doc["overhead_p50_ms"]) == {"before", "after"}
    assert all(value > 0 for value in doc["p50_ms"].values())
    assert all(doc["p99_ms"][kind] >= doc["p50_ms"][kind] for kind in doc["p50_ms"])
    assert set(doc["cpu_ms_per_probe"]) == {"upstream", "before", "after"}
    assert all(value is not None and value >= 0 for value in doc["cpu_ms_per_probe"].values())


def test_messages_tool_use_and_tool_result_round_trip(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    _, claude = upstreams
    tool = {
        "name": "weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
    question = [{"role": "user", "content": "Use weather for Rome"}]
    first = claude_client(gateway).messages.create(
        model=CLAUDE, max_tokens=64, tools=[tool], messages=question
    )
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "weather" and claude.last.body["tools"][0]["name"] == "weather"
    turns = [
        *question,
        {"role": "assistant", "content": [use.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "rainy"}],
        },
    ]
    second = claude_client(gateway).messages.create(
        model=CLAUDE, max_tokens=64, tools=[tool], messages=turns
    )
    assert second.content[0].text == "Tool said: rainy"
    sent = claude.last.body["messages"][-1]["content"][0]
    assert sent["type"] == "tool_result" and sent["tool_use_id"] == use.id
