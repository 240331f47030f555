"""The SSMAgent over a real bridge: OpenAIBridge (the official SDK) against the loopback OpenAI
server, with a MemoryStore on SQLite ranking by the Evermind model's embeddings (hybrid
recall). The facts block the upstream received holds the recalled facts; the fact the user
stated is written back and recalled into the next turn's block."""

from __future__ import annotations

import asyncio
from pathlib import Path

import evermind
from evermind.agent.ssm_agent import SSMAgent
from evermind.bridges.openai import OpenAIBridge
from evermind.memory import MemoryStore
from evermind.memory.sanitize import FENCE_OPEN
from tests.factories import tiny_package
from tests.upstreams import OpenAIUpstream

SYSTEM = "You are a concise assistant."


def test_the_agent_injects_recalled_facts_and_writes_back(tmp_path: Path) -> None:
    model = evermind.load(tiny_package())

    async def main(gpt: OpenAIUpstream) -> None:
        bridge = OpenAIBridge(api_key=gpt.api_key, base_url=gpt.url + "/v1", max_retries=0)
        store = MemoryStore(tmp_path / "memory.db", embedder=model)
        try:
            await store.remember("trip", "The team offsite is in Lisbon in May")
            await store.remember("lunch", "Lunch orders close at eleven")
            await store.remember("badge", "Visitors collect badges at the front desk")
            agent = SSMAgent(bridge, store, max_facts=2, system=SYSTEM, model="gpt-4.1-mini")
            first = await agent.turn("Where is the offsite this year? My team is Platform.")
            assert first.facts and first.facts[0].key == "trip"
            body = gpt.requests[-1].body
            messages = body["messages"]
            # The stable system prompt first, then the fenced facts, then the turn.
            assert messages[0] == {"role": "system", "content": SYSTEM}
            assert messages[1]["role"] == "system" and FENCE_OPEN in messages[1]["content"]
            assert "The team offsite is in Lisbon in May" in messages[1]["content"]
            assert messages[-1]["content"].startswith("Where is the offsite")
            assert first.reply == "Answer to: Where is the offsite this year? My team is Platform."
            assert [d.action for _, d in first.decisions] == ["augment"]
            stored = await store.get("fact:team")
            assert stored is not None and stored.content == "The user's team is Platform"

            agent.max_facts = 3  # the tiny test embedder ranks coarsely
            second = await agent.turn("What is my team called?")
            block = gpt.requests[-1].body["messages"][1]["content"]
            assert "The user's team is Platform" in block
            history = gpt.requests[-1].body["messages"][2:]
            assert [m["role"] for m in history] == ["user", "assistant", "user"]
            assert second.decisions == []
        finally:
            await store.close()
            await bridge.aclose()

    with OpenAIUpstream() as gpt:
        asyncio.run(main(gpt))
