"""GenAI telemetry of real calls, read back with the OpenTelemetry SDK's in-memory exporter and
metric reader: the gateway (the official ``openai`` client → the runtime → the loopback
OpenAI and Anthropic upstreams of :mod:`tests.upstreams`) and the runtime's own models.

A miss is a ``chat {model}`` span from the caching bridge with the instrumented bridge's span
as its child (CLIENT, ``gen_ai.*`` attributes equal to what the client was told); the
identical request again is a hit: one span, ``evermind.cache.hit`` true, no tokens paid. The
metrics count each call once. Failures carry ``error.type``. Telemetry off costs nothing
and needs no OpenTelemetry at all.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from evermind import telemetry
from evermind.errors import ConfigError
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from evermind.telemetry.otlp import wanted_endpoint
from evermind.telemetry.otlp_json import check_endpoint
from tests import procs
from tests.factories import tiny_package
from tests.otlp_receiver import attributes_of, running_receiver
from tests.runtime.helpers import TOKEN_A, bearer, gateway_config
from tests.upstreams import AnthropicUpstream, OpenAIUpstream

OPENAI_KEY = "sk-telemetry-openai-3f9a1c"
ANTHROPIC_KEY = "sk-ant-telemetry-77d0e2"


class Recorded:
    """The spans and metrics one installed telemetry saw."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.installed = telemetry.install(
            tracer_provider, MeterProvider(metric_readers=[self.reader])
        )

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        found.extend(item.data.data_points)
        return found


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    seen = Recorded()
    yield seen
    telemetry.uninstall(seen.installed)
    seen.installed.shutdown()


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
    root = tmp_path_factory.mktemp("telemetry")
    config = gateway_config(
        root,
        {
            "cache": {"embedder": "terms"},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": gpt.url + "/v1",
                    "api_key": OPENAI_KEY,
                    "max_retries": 0,
                },
                "anthropic": {
                    "protocol": "anthropic",
                    "base_url": claude.url,
                    "api_key": ANTHROPIC_KEY,
                    "max_retries": 0,
                },
            },
            # evermind/auto over the model the local test pushes (forced local there).
            "auto": {"local": "evermind/otel:1.0.0", "frontier": "openai/gpt-4o-mini"},
        },
    )
    with ServerThread(config) as running:
        yield running


def ask(server: ServerThread, text: str, model: str = "openai/gpt-4o-mini", **options: Any) -> Any:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=TOKEN_A, max_retries=0)
    options.setdefault("temperature", 0)
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **options
    )


def test_a_miss_then_the_same_request_as_a_hit(gateway: ServerThread, recorded: Recorded) -> None:
    question = "How do I merge two dictionaries in Python?"
    first = ask(gateway, question)
    assert first.headers["x-evermind-cache"] == "miss"
    paid = first.parse()
    again = ask(gateway, question)
    assert again.headers["x-evermind-cache"] == "hit-l1"

    spans = recorded.named("chat gpt-4o-mini")
    assert len(spans) == 3, [dict(s.attributes or {}) for s in spans]  # miss: 2; hit: 1
    served_by = {s.context.span_id: s for s in recorded.named("POST /v1/chat/completions")}
    assert len(served_by) == 2  # one SERVER span per request, each a root (no traceparent)
    assert all(s.kind == SpanKind.SERVER and s.parent is None for s in served_by.values())
    outer_spans = [s for s in spans if s.parent is not None and s.parent.span_id in served_by]
    assert len(outer_spans) == 2  # the caching bridge's span of each request
    upstream = next(s for s in spans if s not in outer_spans)
    miss = next(s for s in spans if s.context.span_id == upstream.parent.span_id)  # type: ignore[union-attr]
    hit = next(s for s in spans if s not in (upstream, miss))
    assert hit.context.trace_id != miss.context.trace_id  # two calls, two traces

    usage = paid.usage
    for span in (upstream, miss):
        attributes = dict(span.attributes or {})
        assert span.kind == SpanKind.CLIENT
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.system"] == "openai"
        assert attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert attributes["gen_ai.request.temperature"] == 0
        assert attributes["gen_ai.response.model"] == "gpt-4o-mini"  # what the upstream said
        assert attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens > 0
        assert attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens > 0
        assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
        cost = paid.model_extra["evermind"]["cost_usd"]
        assert cost > 0 and attributes["evermind.cost_usd"] == pytest.approx(cost)
    outer = dict(miss.attributes or {})
    assert outer["evermind.cache.hit"] is False and outer["evermind.cache.status"] == "miss"
    assert outer["evermind.cache.reason"] == "lookup"
    assert "evermind.cache.hit" not in dict(upstream.attributes or {})  # the upstream call

    served = dict(hit.attributes or {})
    assert served["evermind.cache.hit"] is True and served["evermind.cache.status"] == "hit-l1"
    assert served["evermind.cache.tier"] == "l1" and 0 < float(served["evermind.cache.score"]) <= 1
    assert served["gen_ai.usage.input_tokens"] == 0 and served["gen_ai.usage.output_tokens"] == 0
    assert served["evermind.cache.saved.input_tokens"] == usage.prompt_tokens
    assert served["evermind.cache.saved.output_tokens"] == usage.completion_tokens
    assert served["evermind.cache.saved_usd"] == pytest.approx(outer["evermind.cost_usd"])
    assert served["evermind.cost_usd"] == 0.0

    # Metrics: each call once (the nested upstream span records none), tokens only when paid.
    durations = recorded.points("gen_ai.client.operation.duration")
    by_hit = {p.attributes["evermind.cache.hit"]: p for p in durations}
    assert len(durations) == 2 and by_hit[True].count == 1 and by_hit[False].count == 1
    assert by_hit[False].attributes["gen_ai.request.model"] == "gpt-4o-mini"
    tokens = {
        p.attributes["gen_ai.token.type"]: p for p in recorded.points("gen_ai.client.token.usage")
    }
    assert tokens["input"].count == 1 and tokens["input"].sum == usage.prompt_tokens
    assert tokens["output"].count == 1 and tokens["output"].sum == usage.completion_tokens
    assert tokens["input"].explicit_bounds[:3] == (1.0, 4.0, 16.0)  # the conventions' buckets
    (cost,) = recorded.points("evermind.client.cost")
    assert cost.value == pytest.approx(outer["evermind.cost_usd"])


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def test_a_request_continues_the_callers_trace(gateway: ServerThread, recorded: Recorded) -> None:
    client = openai.OpenAI(
        base_url=gateway.url + "/v1",
        api_key=TOKEN_A,
        max_retries=0,
        default_headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
    )
    client.chat.completions.create(
        model="openai/gpt-4o-mini",
        temperature=0,
        messages=[{"role": "user", "content": "Which trace does this request belong to?"}],
    )
    (server,) = recorded.named("POST /v1/chat/completions")
    assert server.kind == SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and format(server.parent.span_id, "016x") == CALLER_SPAN
    attributes = dict(server.attributes or {})
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v1/chat/completions"
    assert attributes["url.path"] == "/v1/chat/completions"
    assert attributes["http.response.status_code"] == 200
    assert server.status.status_code == StatusCode.UNSET
    chats = recorded.named("chat gpt-4o-mini")
    assert len(chats) == 2 and {s.context.trace_id for s in chats} == {server.context.trace_id}
    assert any(s.parent is not None and s.parent.span_id == server.context.span_id for s in chats)

    # A client error is the client's: status code recorded, the span not marked as failed.
    refused = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "openai/gpt-4o-mini", "messages": "not a list"},
        headers={**bearer(TOKEN_A), "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
    )
    assert 400 <= refused.status_code < 500
    last = recorded.named("POST /v1/chat/completions")[-1]
    assert dict(last.attributes or {})["http.response.status_code"] == refused.status_code
    assert last.status.status_code == StatusCode.UNSET


def test_a_stream_through_the_anthropic_upstream(gateway: ServerThread, recorded: Recorded) -> None:
    question = "What is a Python context manager for?"
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TOKEN_A, max_retries=0)
    for expected in ("miss", "hit-l1"):
        raw = client.chat.completions.with_raw_response.create(
            model="anthropic/claude-sonnet-4-5",
            messages=[{"role": "user", "content": question}],
            temperature=0,
            stream=True,
        )
        assert raw.headers["x-evermind-cache"] == expected
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        assert text == f"Answer to: {question}"
    spans = recorded.named("chat claude-sonnet-4-5")
    assert len(spans) == 3
    for span in spans:
        assert dict(span.attributes or {})["gen_ai.provider.name"] == "anthropic"
        assert span.status.status_code != StatusCode.ERROR
    paid = [s for s in spans if dict(s.attributes or {}).get("gen_ai.usage.output_tokens")]
    assert len(paid) == 2  # the miss (outer and upstream); the hit paid nothing
    first_chunk = recorded.points("gen_ai.client.operation.time_to_first_chunk")
    assert sum(p.count for p in first_chunk) == 2  # both streams, measured once each


def test_an_upstream_failure_carries_its_error_type(
    gateway: ServerThread,
    upstreams: tuple[OpenAIUpstream, AnthropicUpstream],
    recorded: Recorded,
) -> None:
    gpt, _ = upstreams
    gpt.fail("server_error", times=1)
    with pytest.raises(openai.InternalServerError) as raised:
        ask(gateway, "A question the upstream fails on", temperature=0.5)
    # The client gets the upstream's own 500 and error object (its code is the upstream's,
    # none); the spans carry the gateway's classification of the failure.
    assert raised.value.status_code == 500
    assert raised.value.response.json()["error"]["code"] is None
    code = "upstream_unavailable"
    spans = recorded.named("chat gpt-4o-mini")
    assert len(spans) == 2  # a bypass (temperature) is still measured, and its upstream call
    for span in spans:
        assert span.status.status_code == StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == code
    (duration,) = recorded.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == code and duration.count == 1
    assert recorded.points("gen_ai.client.token.usage") == []
    (server,) = recorded.named("POST /v1/chat/completions")  # a 5xx: the server span failed
    status = raised.value.response.status_code
    assert dict(server.attributes or {})["http.response.status_code"] == status >= 500
    assert server.status.status_code == StatusCode.ERROR


def test_the_runtimes_own_model_generation_and_embeddings(
    gateway: ServerThread, recorded: Recorded
) -> None:
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=60) as alpha:
        pushed = alpha.post(
            "/v1/models",
            content=tiny_package("otel", "1.0.0"),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert pushed.status_code in (200, 201), pushed.text
        ref = "evermind/otel:1.0.0"
        chat = {"model": ref, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
        done = alpha.post("/v1/chat/completions", json={**chat, "temperature": 0})
        assert done.status_code == 200, done.text
        streamed = alpha.post("/v1/completions", json={**chat, "prompt": "The", "stream": True})
        assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
        embedded = alpha.post("/v1/embeddings", json={"model": ref, "input": ["a", "b c"]})
        assert embedded.status_code == 200, embedded.text
        routed = alpha.post(
            "/v1/chat/completions",
            json={**chat, "model": "evermind/auto", "temperature": 0},
            headers={"x-evermind-route": "local"},
        )
        assert routed.status_code == 200, routed.text
        assert routed.json()["evermind"]["route"]["target"] == "local"
    (auto_span,) = recorded.named("chat otel:1.0.0")  # evermind/auto, answered locally
    auto = dict(auto_span.attributes or {})
    assert auto_span.kind == SpanKind.INTERNAL and auto["gen_ai.provider.name"] == "evermind"
    assert auto["gen_ai.usage.output_tokens"] == routed.json()["usage"]["completion_tokens"]
    (chat_span,) = recorded.named(f"chat {ref}")
    attributes = dict(chat_span.attributes or {})
    assert chat_span.kind == SpanKind.INTERNAL and attributes["gen_ai.provider.name"] == "evermind"
    usage = done.json()["usage"]
    assert attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert attributes["gen_ai.request.max_tokens"] == 5
    (stream_span,) = recorded.named(f"text_completion {ref}")
    assert dict(stream_span.attributes or {})["gen_ai.usage.output_tokens"] >= 1
    (embed_span,) = recorded.named(f"embeddings {ref}")
    embed_usage = embedded.json()["usage"]["prompt_tokens"]
    assert dict(embed_span.attributes or {})["gen_ai.usage.input_tokens"] == embed_usage
    operations = {
        p.attributes["gen_ai.operation.name"]
        for p in recorded.points("gen_ai.client.operation.duration")
    }
    assert operations == {"chat", "text_completion", "embeddings"}


def test_metrics_endpoint_is_unchanged_with_telemetry_on(
    gateway: ServerThread, recorded: Recorded
) -> None:
    assert ask(gateway, "Why use a Python dataclass?").headers["x-evermind-cache"] == "miss"
    text = httpx.get(gateway.url + "/metrics", timeout=10).text
    assert "# TYPE evermind_gateway_requests_total counter" in text
    assert 'cache="miss"' in text and recorded.named("chat gpt-4o-mini")


def test_off_is_a_no_op_and_endpoints_are_checked() -> None:
    assert telemetry.active() is None
    operation = telemetry.start_operation("chat", "openai", "gpt-4o-mini")
    assert operation is telemetry.NOOP and not operation.recording
    assert wanted_endpoint(None, {}) == (False, None)
    assert wanted_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == (True, None)
    assert wanted_endpoint("http://c:4318/", {"OTEL_SDK_DISABLED": "true"}) == (False, None)
    assert wanted_endpoint("http://c:4318/", {}) == (True, "http://c:4318")
    for bad in ("ftp://c:4318", "c:4318", "http://:4318", "http://c:99999", "http://c/?x=1"):
        with pytest.raises(ConfigError, match="OTLP endpoint"):
            check_endpoint(bad)
    with pytest.raises(ConfigError, match="OTLP endpoint"):
        RuntimeConfig(data_dir=Path("unused"), otlp_endpoint="localhost:4318")


#: Without OpenTelemetry importable at all: the bridges work, and export runs natively (JSON).
_WITHOUT_OTEL = """
import asyncio, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
from evermind.bridges.base import ChatRequest, Completion, Message, Usage
from evermind.bridges.instrumented import InstrumentedBridge
from evermind.telemetry import otlp

class Echo:
    provider = "openai"
    last_usage = None
    async def generate(self, request):
        usage = Usage(input_tokens=7, output_tokens=2)
        return Completion(text="ok", model=request.model, provider="openai", usage=usage)
    async def aclose(self):
        pass

request = ChatRequest(model="gpt-4o-mini", messages=(Message("user", "hi"),))
print(asyncio.run(InstrumentedBridge(Echo()).generate(request)).text)
installed = otlp.configure(sys.argv[1])
print(type(installed).__name__)
print(asyncio.run(InstrumentedBridge(Echo()).generate(request)).text)
installed.shutdown()
print(any(name.startswith("opentelemetry") for name in sys.modules))
"""


def test_without_opentelemetry_installed_export_runs_natively() -> None:
    with running_receiver() as receiver:
        result = procs.run([sys.executable, "-c", _WITHOUT_OTEL, receiver.url],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["ok", "NativeTelemetry", "ok", "False"]
        assert receiver.content_types == {"application/json"}
        (resource, span), *more = receiver.spans()
        assert not more and span.name == "chat gpt-4o-mini" and span.kind == 3  # CLIENT
        assert resource["service.name"] == "evermind-runtime"
        attributes = attributes_of(span.attributes)
        assert attributes["gen_ai.usage.input_tokens"] == 7
        assert attributes["gen_ai.request.model"] == "gpt-4o-mini"
        usage = receiver.metric_names()["gen_ai.client.token.usage"].histogram
        assert {
            attributes_of(p.attributes)["gen_ai.token.type"]: p.sum for p in usage.data_points
        } == {
            "input": 7,
            "output": 2,
        }
