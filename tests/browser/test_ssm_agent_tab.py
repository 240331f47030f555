"""SSMAgent in the tab: Pyodide in headless Chromium runs the agent loop over FetchBridge (the
page's ``fetch``) to the loopback OpenAI server, with a MemoryStore on the in-memory backend
ranking by the tab's trigram vectors (semantic step on, no numpy). The facts block the server
received holds the recalled fact; the fact the user stated is written back."""

from __future__ import annotations

import json
from typing import Any

from tests.browser.conftest import BOOT_TIMEOUT_MS, RecordedPage
from tests.browser.test_fetch_bridge import BOOT
from tests.upstreams import OpenAIUpstream

AGENT = """
import json, sys
from evermind.agent.ssm_agent import SSMAgent
from evermind.bridges.fetch import FetchBridge
from evermind.memory import InMemoryBackend, MemoryStore
from evermind.studio.tab_memory import trigram_vector

async def run(url, key):
    store = MemoryStore(
        InMemoryBackend(),
        embedder=lambda texts: [trigram_vector(t) for t in texts],
        fingerprint="trigram-256",
    )
    await store.remember("trip", "The team offsite is in Lisbon in May")
    await store.remember("lunch", "Lunch orders close at eleven")
    agent = SSMAgent(FetchBridge("openai", url, key), store, max_facts=1, system="Be brief.",
                     model="gpt-4.1-mini")
    turn = await agent.turn("Where is the team offsite? My desk is B12.")
    stored = await store.get("fact:desk")
    return {
        "facts": [h.key for h in turn.facts],
        "reply": turn.reply,
        "decisions": [d.action for _, d in turn.decisions],
        "stored": stored.content if stored else None,
        "numpy": "numpy" in sys.modules,
    }

json.dumps(await run(*ARGS))
"""


def test_the_agent_runs_in_the_tab(browser: Any, server: Any) -> None:
    rec = RecordedPage(browser)
    with OpenAIUpstream() as gpt:
        try:
            rec.page.goto(server.url + "build-info.json")
            info = json.loads(rec.page.inner_text("body"))
            rec.page.set_default_timeout(BOOT_TIMEOUT_MS)
            rec.page.evaluate(BOOT, [server.url, info["wheel"]])
            code = AGENT.replace("ARGS", json.dumps([gpt.url + "/v1", gpt.api_key]))
            outcome = rec.page.evaluate(
                """(code) => window.__py.runPythonAsync(code).then(
                       r => ({ok: true, result: r}), e => ({ok: false, error: String(e)}))""",
                code,
            )
            assert outcome["ok"], outcome["error"] + "\n" + "\n".join(rec.console[-20:])
            result = json.loads(outcome["result"])
            assert result["facts"] == ["trip"]
            assert result["reply"].startswith("Answer to: Where is the team offsite?")
            assert result["decisions"] == ["augment"]
            assert result["stored"] == "The user's desk is B12"
            assert result["numpy"] is False
            messages = gpt.last.body["messages"]
            assert messages[0] == {"role": "system", "content": "Be brief."}
            assert "The team offsite is in Lisbon in May" in messages[1]["content"]
            assert "Lunch orders" not in messages[1]["content"]
            rec.assert_offline()
        finally:
            rec.close()
