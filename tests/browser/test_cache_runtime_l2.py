"""The Studio's cache with the runtime as L2: the tab and an agent share answers.

A real ``evermind serve --upstreams`` on loopback (gateway cache: the model-free terms
embedder, the verified decision at δ = 0.01) in front of the loopback OpenAI server of
:mod:`tests.upstreams`; the Studio on another loopback port (CORS: loopback origins are
allowed by default). The runtime URL and token go in the Export panel, the agents' model in
the Cache panel, and then, through the panel's buttons:

1. an answer stored in the tab is served to an agent (the official ``openai`` SDK against
   the runtime's ``/v1``) with **no upstream call**: an exact repeat, which the gateway's
   cache serves however few questions it holds;
2. an answer the agent paid for is served in the tab, marked "L2 (the runtime)", and kept
   in L1 (the next lookup says "L1 (this tab)");
3. a paraphrase, both ways, once the scope holds ten questions (the verified decision calibrates
   from MIN_CALIBRATION = 8 stored questions up; below that it serves repeats only; and with
   ``verify_until_bounded = false``, since by default a gateway checks such hits against the
   upstream until its own checks bound the error): the tab stores ten answers for a system
   prompt's scope, an agent asking a rewording of one is served it without an upstream call, and
   the tab is served the agent's paid answer for a rewording of the agent's question. The
   gateway's cache judges every L2 lookup with its own embedder (the tab's trigrams never reach
   it);
4. the runtime gone: the tab still answers from L1 and says why L2 was not asked.

Zero requests leave 127.0.0.1.
"""

from __future__ import annotations

from typing import Any

import openai

from evermind.runtime.server import ServerThread
from tests.browser.conftest import open_studio, show, wait_text
from tests.browser.test_studio_e2e import call
from tests.runtime.helpers import TOKEN_A, gateway_config
from tests.upstreams import OpenAIUpstream

MODEL = "openai/gpt-4o-mini"
OPENAI_KEY = "sk-loopback-tab-l2"
SYSTEM = "You answer questions about the office."
FACTS = [
    ("When does the cafeteria open on weekdays?", "At 8:00."),
    ("Where is the bicycle storage room located?", "Basement level 2."),
    ("How do I book a meeting room for Friday?", "Use the Rooms app."),
    ("Who approves expense reports over 500 euros?", "Your director."),
    ("What is the guest wifi password?", "Ask reception; it rotates daily."),
    ("Which floor hosts the finance department?", "The fourth floor."),
    ("How many parking spots are reserved for visitors?", "Twelve."),
    ("When is the building closed for maintenance?", "The first Sunday of each month."),
    ("What is the phone number of the security desk?", "Extension 4411."),
    ("Where can I print large posters?", "The copy room on floor 1."),
]


def agent_asks(url: str, question: str, system: str | None = None) -> tuple[str, str]:
    """The agent's answer through the gateway and its ``x-evermind-cache`` header."""
    sdk = openai.OpenAI(base_url=url + "/v1", api_key=TOKEN_A, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": question}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, temperature=0
    )
    return raw.parse().choices[0].message.content or "", raw.headers.get("x-evermind-cache", "")


def lookup(rec: Any, query: str) -> str:
    """The Cache panel's verdict for ``query`` (through the Look up button), its closed
    Details (score, reason) included."""
    page = rec.page
    page.fill("#panel-cache input[name=cache-query]", query)
    page.evaluate(
        "document.querySelector('evermind-studio').shadowRoot"
        ".getElementById('cache-verdict').replaceChildren()"
    )
    page.click("#cache-lookup")
    wait_text(rec, "#cache-verdict", r"Hit|Miss", timeout=30_000)
    return str(page.locator("#cache-verdict").text_content())


def test_the_tab_and_an_agent_share_answers_through_the_runtime(browser, server, tmp_path) -> None:
    with OpenAIUpstream(OPENAI_KEY) as upstream:
        config = gateway_config(
            tmp_path,
            {
                # Sharing is the subject here: served from the shipped bound at once, not
                # checked against the upstream first (verify_until_bounded's default is
                # tested in tests/runtime/test_gateway_verified.py).
                "cache": {"embedder": "terms", "verify_until_bounded": False},
                "upstreams": {
                    "openai": {
                        "protocol": "openai",
                        "base_url": upstream.url + "/v1",
                        "api_key": OPENAI_KEY,
                        "max_retries": 0,
                    }
                },
            },
        )
        with ServerThread(config) as runtime:
            rec = open_studio(browser, server)
            page = rec.page
            try:
                call(rec, "session_clear")
                show(rec, "export")
                page.fill("#panel-export input[name=runtime-url]", runtime.url)
                page.fill("#panel-export input[name=runtime-token]", TOKEN_A)
                show(rec, "cache")
                page.fill("#panel-cache input[name=cache-agent-model]", MODEL)

                # 1. Stored in the tab, served to the agent without an upstream call.
                stored_q = "Which port does the staging database listen on?"
                page.fill("#panel-cache input[name=cache-store-query]", stored_q)
                page.fill("#panel-cache textarea[name=cache-store-response]", "Port 6543.")
                page.click("#cache-store")
                said = wait_text(rec, "#panel-cache .message", r"Stored", timeout=30_000)
                assert "stored in the runtime's gateway cache too" in said, said
                before = len(upstream.requests)
                assert agent_asks(runtime.url, stored_q) == ("Port 6543.", "hit-l1")
                assert len(upstream.requests) == before, "the upstream answered a shared question"

                # 2. Paid by the agent, served in the tab from L2, then from L1.
                paid_q = "Who rotates the on-call pager this week?"
                paid, status = agent_asks(runtime.url, paid_q)
                assert status == "miss" and len(upstream.requests) == before + 1
                served = lookup(rec, paid_q)
                assert served.startswith("Hit") and paid in served, served
                assert "L2 (the runtime)" in served and "served from l2" in served, served
                again = lookup(rec, paid_q)
                assert again.startswith("Hit") and "L1 (this tab)" in again, again

                # 3. Paraphrases, once the scope (this system prompt) holds ten questions.
                share = {"url": runtime.url, "token": TOKEN_A, "model": MODEL, "system": SYSTEM}
                for question, answer in FACTS:
                    result = call(
                        rec, "cache_store", query=question, response=answer, runtime=share
                    )
                    assert result["l2"] == "stored in the runtime's gateway cache too", result
                before = len(upstream.requests)
                answer, status = agent_asks(
                    runtime.url, "When will the cafeteria open on weekdays?", SYSTEM
                )
                assert (answer, status) == ("At 8:00.", "hit-l1")
                assert len(upstream.requests) == before
                agent_q = "When does the post room collect outgoing parcels?"
                paid, status = agent_asks(runtime.url, agent_q, SYSTEM)
                assert status == "miss" and len(upstream.requests) == before + 1
                rephrased = "When will the post room collect outgoing parcels?"
                judged = call(rec, "cache_lookup", query=rephrased, runtime=share)
                print({k: judged.get(k) for k in ("hit", "tier", "score", "reason", "l2")})
                assert judged["hit"] and judged["tier"] == "l2" and judged["response"] == paid

                # 4. The runtime gone: L1 still answers; the note says why L2 was not asked.
                show(rec, "export")
                page.fill("#panel-export input[name=runtime-url]", "http://127.0.0.1:9")
                show(rec, "cache")
                local = lookup(rec, stored_q)
                assert local.startswith("Hit") and "L1 (this tab)" in local, local
                missed = lookup(rec, "Where are the spare laptops kept?")
                assert missed.startswith("Miss") and "L1 only: runtime cache: could not" in missed
                rec.assert_offline()
            finally:
                rec.close()
