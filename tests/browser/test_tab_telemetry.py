"""The tab's telemetry in headless Chromium: OTLP/HTTP JSON through ``fetch`` to a loopback
receiver that decodes it with ``opentelemetry-proto`` (:mod:`tests.otlp_receiver`).

Pyodide with the evermind wheel runs the Studio's RPC entry (``evermind.studio.api.call``)
on the page. Off by default: calls before ``telemetry_configure`` send nothing. Then, with
the receiver (another loopback port, so every post is a CORS request with a preflight) as
the collector: a Studio call and a failing one become ``studio <call>`` spans, a chat through
the fetch bridge (instrumented) to the loopback OpenAI upstream becomes a ``chat`` span with
the tokens the upstream counted, and ``telemetry_flush`` posts the spans and the GenAI metrics.
Every body must parse with the official protobuf classes; no request leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.browser.conftest import BOOT_TIMEOUT_MS, RecordedPage
from tests.browser.test_fetch_bridge import BOOT
from tests.otlp_receiver import attributes_of, running_receiver
from tests.upstreams import OpenAIUpstream, count_tokens

#: Python run in the page: the Studio's calls with telemetry off, then on; results as JSON.
SCRIPT = """
import json
from evermind.bridges.base import ChatRequest, Message
from evermind.bridges.fetch import FetchBridge
from evermind.bridges.instrumented import InstrumentedBridge
from evermind.studio import api

COLLECTOR, UPSTREAM, KEY = ARGS

async def studio(fn, **kwargs):
    return json.loads(await api.call(fn, json.dumps(kwargs)))

async def run():
    out = {"off": await studio("telemetry_status")}
    await studio("corpus_info")  # telemetry off: nothing recorded, nothing sent
    out["bad"] = await studio("telemetry_configure", collector_url="localhost:4318")
    out["on"] = await studio("telemetry_configure", collector_url=COLLECTOR)
    out["info"] = await studio("corpus_info")
    out["missing"] = await studio("corpus_remove", name="no-such-source")
    bridge = InstrumentedBridge(FetchBridge("openai", UPSTREAM, KEY))
    request = ChatRequest(model="gpt-4.1-mini", messages=(Message("user", "How far is the moon?"),))
    done = await bridge.generate(request)
    out["usage"] = done.usage.__dict__
    out["flushed"] = await studio("telemetry_flush")
    return json.dumps(out)

await run()
"""


def _run(rec: RecordedPage, args: list[str]) -> dict[str, Any]:
    code = SCRIPT.replace("ARGS", json.dumps(args))
    outcome = rec.page.evaluate(
        """(code) => window.__py.runPythonAsync(code).then(
               r => ({ok: true, result: r}), e => ({ok: false, error: String(e)}))""",
        code,
    )
    assert outcome["ok"], outcome["error"] + "\n" + "\n".join(rec.console[-20:])
    result: dict[str, Any] = json.loads(outcome["result"])
    return result


def test_the_tab_posts_its_spans_as_otlp_json(browser, server) -> None:
    start = time.monotonic()
    rec = RecordedPage(browser)
    with running_receiver() as receiver, OpenAIUpstream() as gpt:
        try:
            rec.page.goto(server.url + "build-info.json")  # a page of the bundle's origin
            info = json.loads(rec.page.inner_text("body"))
            rec.page.set_default_timeout(BOOT_TIMEOUT_MS)
            rec.page.evaluate(BOOT, [server.url, info["wheel"]])
            out = _run(rec, [receiver.url, gpt.url + "/v1", gpt.api_key])
            rec.assert_offline()
        finally:
            rec.close()
    assert out["off"] == {"ok": True, "result": {"enabled": False}}
    assert out["bad"]["error"]["type"] == "ConfigError"
    assert "OTLP endpoint" in out["bad"]["error"]["message"]
    assert out["on"]["result"]["enabled"] is True and out["info"]["ok"] is True
    assert out["missing"]["error"]["type"] == "ConfigError"
    status = out["flushed"]["result"]
    assert status["failed"] == 0 and status["dropped"] == 0 and status["pending"] == 0, status
    # What the receiver decoded (it refuses, and wait_for fails on, any body that does not
    # parse with opentelemetry-proto).
    receiver.wait_for(lambda: receiver.metrics, "the metrics")
    assert receiver.content_types == {"application/json"}
    assert receiver.preflights >= 1  # a cross-origin JSON post is preflighted
    assert receiver.origins == {server.url.rstrip("/")}
    spans = {span.name: (resource, span) for resource, span in receiver.spans()}
    assert set(spans) == {"studio corpus_info", "studio corpus_remove", "chat gpt-4.1-mini"}
    resource, info = spans["studio corpus_info"]
    assert resource["service.name"] == "evermind-studio"
    assert info.kind == 1 and info.status.code == 0  # INTERNAL, UNSET
    assert attributes_of(info.attributes) == {"evermind.studio.call": "corpus_info"}
    _, missing = spans["studio corpus_remove"]
    assert missing.status.code == 2 and missing.events[0].name == "exception"  # ERROR
    _, chat = spans["chat gpt-4.1-mini"]
    assert chat.kind == 3 and len(chat.trace_id) == 16 and len(chat.span_id) == 8
    chat_attributes = attributes_of(chat.attributes)
    assert chat_attributes["gen_ai.provider.name"] == "openai"
    prompt = count_tokens("How far is the moon?")
    assert chat_attributes["gen_ai.usage.input_tokens"] == prompt
    assert chat_attributes["gen_ai.usage.output_tokens"] == out["usage"]["output_tokens"] > 0
    usage = receiver.metric_names()["gen_ai.client.token.usage"].histogram.data_points
    totals = {attributes_of(p.attributes)["gen_ai.token.type"]: p.sum for p in usage}
    assert totals == {"input": prompt, "output": out["usage"]["output_tokens"]}
    print(f"tab telemetry: {time.monotonic() - start:.1f} s")


def test_the_elements_otlp_endpoint_attribute(browser, server) -> None:
    """``<evermind-studio otlp-endpoint>``: set on a running element, the Studio's own worker
    posts the spans of its calls; removed, telemetry is off again."""
    start = time.monotonic()
    rec = RecordedPage(browser)
    with running_receiver() as receiver:
        try:
            rec.page.goto(server.url + "examples/embed.html")
            result = rec.page.evaluate(
                """async (collector) => {
                     await customElements.whenDefined('evermind-studio');
                     const a = document.getElementById('a');
                     await a.ready;
                     const off = await a.telemetry.status();
                     a.setAttribute('otlp-endpoint', collector);
                     let on = await a.telemetry.status();
                     for (let i = 0; i < 100 && !on.enabled; i++) {  // the change is async
                       await new Promise(r => setTimeout(r, 50));
                       on = await a.telemetry.status();
                     }
                     const listed = await a.memory.list();
                     const flushed = await a.telemetry.flush();
                     a.removeAttribute('otlp-endpoint');
                     let after = await a.telemetry.status();
                     for (let i = 0; i < 100 && after.enabled; i++) {
                       await new Promise(r => setTimeout(r, 50));
                       after = await a.telemetry.status();
                     }
                     return {off, on, listed, flushed, after};
                   }""",
                receiver.url,
            )
            rec.assert_offline()
        finally:
            rec.close()
    assert result["off"] == {"enabled": False} and result["after"] == {"enabled": False}
    assert result["on"]["enabled"] is True and result["on"]["collector"] == receiver.url
    assert result["flushed"]["failed"] == 0 and isinstance(result["listed"], list)
    spans = receiver.wait_for(
        lambda: [s for _, s in receiver.spans() if s.name == "studio memory_list"], "the span"
    )
    assert attributes_of(spans[0].attributes) == {"evermind.studio.call": "memory_list"}
    assert receiver.preflights >= 1 and receiver.content_types == {"application/json"}
    print(f"element otlp-endpoint: {time.monotonic() - start:.1f} s")
