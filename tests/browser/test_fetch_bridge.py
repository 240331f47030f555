"""FetchBridge in headless Chromium (Pyodide) against the loopback Anthropic and OpenAI servers.

The page loads the bundle's Pyodide and evermind wheel on the main thread, then runs Python
that drives :class:`~evermind.bridges.fetch.FetchBridge` over the page's ``fetch`` to the two
servers of ``tests/upstreams.py`` (another loopback port: CORS preflights included). Checked
per protocol: a completion, a stream that arrives in several deltas and ends with the same
completion and usage, the request the server received (two cache breakpoints / the system
message first; the browser-access header), a 429 with its ``retry_after``, a wrong key, a
stream cut or truncated halfway, and an error event mid-stream. Zero requests leave 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.browser.conftest import BOOT_TIMEOUT_MS, RecordedPage
from tests.upstreams import AnthropicUpstream, OpenAIUpstream, count_tokens, default_reply

BOOT = """async ([base, wheel]) => {
    const info = await (await fetch(base + "build-info.json")).json();
    const { loadPyodide } = await import(base + info.pyodide_dir + "pyodide.mjs");
    const pyodide = await loadPyodide({ indexURL: base + info.pyodide_dir });
    const errors = [];
    const loaded = await pyodide.loadPackage(
        base + wheel, { errorCallback: (m) => errors.push(m) });
    if (!loaded.length) throw new Error("wheel: " + errors.join("; "));
    window.__py = pyodide;
    return pyodide.version;
}"""

#: Python run in the page: one step against one upstream, the outcome as JSON.
STEP = """
import json
from evermind.bridges.base import ChatRequest, Message
from evermind.bridges.fetch import FetchBridge
from evermind.errors import UpstreamError

async def step(protocol, url, key, action):
    bridge = FetchBridge(protocol, url, key)
    request = ChatRequest(
        model="claude-haiku-4-5" if protocol == "anthropic" else "gpt-4.1-mini",
        messages=(Message("user", "How far is the moon?"),),
        system="You are terse.",
        facts="The user is an astronomer.",
    )
    try:
        if action == "generate":
            done = await bridge.generate(request)
            return {"text": done.text, "usage": done.usage.__dict__, "model": done.model}
        texts, done = [], None
        async for delta in bridge.stream(request):
            if delta.completion is None:
                texts.append(delta.text)
            else:
                done = delta.completion
        return {"texts": texts, "text": done.text, "usage": done.usage.__dict__}
    except UpstreamError as err:
        return {"error": err.code, "status": err.status, "retry_after": err.retry_after}

json.dumps(await step(*ARGS))
"""


def _step(rec: RecordedPage, protocol: str, url: str, key: str, action: str) -> dict[str, Any]:
    code = STEP.replace("ARGS", json.dumps([protocol, url, key, action]))
    outcome = rec.page.evaluate(
        """(code) => window.__py.runPythonAsync(code).then(
               r => ({ok: true, result: r}), e => ({ok: false, error: String(e)}))""",
        code,
    )
    assert outcome["ok"], outcome["error"] + "\n" + "\n".join(rec.console[-20:])
    result: dict[str, Any] = json.loads(outcome["result"])
    return result


def test_fetch_bridge_in_the_tab(browser, server) -> None:
    start = time.monotonic()
    rec = RecordedPage(browser)
    with AnthropicUpstream() as claude, OpenAIUpstream() as gpt:
        try:
            rec.page.goto(server.url + "build-info.json")  # a page of the bundle's origin
            info = json.loads(rec.page.inner_text("body"))
            rec.page.set_default_timeout(BOOT_TIMEOUT_MS)
            rec.page.evaluate(BOOT, [server.url, info["wheel"]])
            reply = default_reply("How far is the moon?")
            prompt = count_tokens("You are terse. The user is an astronomer. How far is the moon?")
            for protocol, upstream, url in (
                ("anthropic", claude, claude.url),
                ("openai", gpt, gpt.url + "/v1"),
            ):
                key = upstream.api_key
                whole = _step(rec, protocol, url, key, "generate")
                assert whole["text"] == reply, whole
                streamed = _step(rec, protocol, url, key, "stream")
                assert len(streamed["texts"]) > 1 and "".join(streamed["texts"]) == reply
                assert streamed["text"] == reply
                usage = streamed["usage"]
                # The second call reads the first's cached prefix (both breakpoints / the
                # whole system+facts prefix), so the usage split is the server's, exactly.
                assert usage["output_tokens"] == count_tokens(reply)
                assert sum(v for k, v in usage.items() if k != "output_tokens") == prompt
                assert usage["cache_read_tokens"] > 0, usage
                sent = upstream.last
                if protocol == "anthropic":
                    assert [b["cache_control"] for b in sent.body["system"]] == [
                        {"type": "ephemeral"}
                    ] * 2
                    assert sent.headers["anthropic-dangerous-direct-browser-access"] == "true"
                    assert sent.headers["x-api-key"] == key and sent.body["stream"] is True
                else:
                    assert [m["role"] for m in sent.body["messages"]] == [
                        "system",
                        "system",
                        "user",
                    ]
                    assert sent.body["stream_options"] == {"include_usage": True}
                upstream.fail("rate_limit", retry_after=3)
                limited = _step(rec, protocol, url, key, "generate")
                assert limited == {
                    "error": "upstream_rate_limited",
                    "status": 429,
                    "retry_after": 3.0,
                }
                refused = _step(rec, protocol, url, "sk-wrong", "generate")
                assert refused["error"] == "upstream_auth" and refused["status"] == 401
                upstream.fail("cut")
                cut = _step(rec, protocol, url, key, "stream")
                assert cut["error"] == "upstream_stream_cut", cut
                upstream.fail("truncate")
                truncated = _step(rec, protocol, url, key, "stream")
                assert truncated["error"] == "upstream_stream_cut", truncated
                upstream.fail("stream_error")
                broke = _step(rec, protocol, url, key, "stream")
                assert broke["error"] == "upstream_unavailable", broke
            rec.assert_offline()
        finally:
            rec.close()
    print(f"FetchBridge in the tab: {time.monotonic() - start:.1f} s")
