"""The prebuilt agents on the Vertex bridge: :class:`VertexBridge` (the official
``google-genai`` SDK) against the loopback Gemini server (:class:`GeminiUpstream`) with a
scripted model. A ReAct agent answers with two sequential calls of two different tools and a
fact only memory holds (Gemini ``functionCall`` parts from the model, ``functionResponse``
parts sent back by name, the facts in ``systemInstruction``), streamed or not; parallel calls
(only the first signed, as Google signs them) and failures the model reads; a pause before
tools answered by a human; a call of a function the agent lacks, which Gemini refuses; a
supervisor delegates to two workers through ``transfer_to_<worker>`` calls; reflection stops
on the critic's approval; the step bound answers every call, as Gemini requires. Gemini gives
calls no ids: the bridge's ids (carrying each call's ``thoughtSignature``) are what the agents
key on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials

from evermind.agent.graph import MemoryCheckpointer, NodeError, SQLiteCheckpointer, StepEvent
from evermind.agent.prebuilt import (
    create_react_agent,
    create_reflection_agent,
    create_supervisor,
)
from evermind.bridges.base import ChatRequest, Message, ToolCall
from evermind.bridges.gemini_wire import CALL_ID_PREFIX
from evermind.bridges.vertex import VertexBridge
from evermind.errors import UpstreamError
from tests.runtime.test_agent_prebuilt_react import (
    QUESTION,
    memory,
    offsite_date,
    two_steps,
    weather,
)
from tests.runtime.test_agent_prebuilt_teams import TASK, lookup_population, writer_and_critic
from tests.upstreams import Conversation
from tests.vertex_upstream import SIGNATURE, GeminiUpstream

MODEL = "gemini-2.5-flash"


@pytest.fixture
def gemini() -> Iterator[GeminiUpstream]:
    with GeminiUpstream() as server:
        yield server


def vertex_project(gemini: GeminiUpstream) -> VertexBridge:
    """Vertex AI with a project and location (a bearer token, the project's paths)."""
    return VertexBridge(
        base_url=gemini.url,
        max_retries=0,
        vertexai=True,
        project="demo-project",
        location="europe-west4",
        credentials=Credentials(token=gemini.token),
    )


def vertex_express(gemini: GeminiUpstream) -> VertexBridge:
    """Vertex AI with an API key ("express mode")."""
    return VertexBridge(api_key=gemini.api_key, base_url=gemini.url, max_retries=0, vertexai=True)


def parts_of(body: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    """(role, part kind, function name, args or response) of the function parts sent."""
    found = []
    for content in body["contents"]:
        for part in content["parts"]:
            for kind in ("functionCall", "functionResponse"):
                if kind in part:
                    value = part[kind].get("args", part[kind].get("response"))
                    found.append((content["role"], kind, part[kind]["name"], value))
    return found


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
def test_react_two_sequential_tool_calls_and_a_memory_fact(
    gemini: GeminiUpstream, streamed: bool
) -> None:
    gemini.think = two_steps
    pieces: list[str] = []

    async def main() -> dict[str, Any]:
        bridge, store = vertex_project(gemini), await memory()
        agent = create_react_agent(
            bridge, MODEL, [offsite_date, weather], memory=store, learn=False,
            system="You plan team trips.", on_text=pieces.append if streamed else None,
        )  # fmt: skip
        events = [e async for e in agent.astream({"messages": [QUESTION]}, thread_id="t1")]
        steps = [e for e in events if isinstance(e, StepEvent)]
        assert [list(e.updates) for e in steps] == [["agent"], ["tools"]] * 2 + [["agent"]]
        await bridge.aclose()
        return events[-1].values  # type: ignore[union-attr]

    values = asyncio.run(main())
    assert values["stop_reason"] == "answered" and values["steps"] == 3
    assert values["answer"] == (
        "The offsite is 12-14 May; expect sunny, 24 C in Lisbon in May; you stay at Hotel Avenida."
    )
    assert values["facts"][0] == "offsite-hotel"
    if streamed:
        assert "".join(pieces).strip() == values["answer"]
    # Gemini gave no ids: each call's id is the bridge's, carrying its signature.
    calls = [c for m in values["messages"] for c in m.get("tool_calls") or ()]
    assert [c["name"] for c in calls] == ["offsite_date", "weather"]
    assert all(c["id"].startswith(CALL_ID_PREFIX) for c in calls)
    assert len({c["id"] for c in calls}) == 2
    results = [m["tool_call_id"] for m in values["messages"] if m["role"] == "tool"]
    assert results == [c["id"] for c in calls]

    method = "streamGenerateContent" if streamed else "generateContent"
    prefix = "/v1beta1/projects/demo-project/locations/europe-west4/publishers/google/models/"
    assert [r.path for r in gemini.requests] == [f"{prefix}{MODEL}:{method}"] * 3
    assert all(r.headers["authorization"] == f"Bearer {gemini.token}" for r in gemini.requests)
    first, last = gemini.requests[0].body, gemini.requests[-1].body
    declared = first["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declared] == ["offsite_date", "weather"]
    # The SDK writes the schema's key in camelCase or snake_case, by mode and version.
    schema = declared[1].get("parametersJsonSchema") or declared[1]["parameters_json_schema"]
    assert schema["required"] == ["city", "month"]
    assert declared[1]["description"] == "The usual weather in a city in a month."
    prompt, facts = first["systemInstruction"]["parts"]  # the facts: a part of their own
    assert prompt == {"text": "You plan team trips."} and "Hotel Avenida" in facts["text"]
    assert "Hotel Avenida" not in str(first["contents"])  # only in the system instruction
    assert parts_of(last) == [
        ("model", "functionCall", "offsite_date", {"city": "Lisbon"}),
        ("user", "functionResponse", "offsite_date", {"output": "12-14 May"}),
        ("model", "functionCall", "weather", {"city": "Lisbon", "month": "May"}),
        ("user", "functionResponse", "weather", {"output": "sunny, 24 C in Lisbon in May"}),
    ]
    # Each call went back with the thoughtSignature it came with (Google refuses it without).
    signed = [p for c in last["contents"] for p in c["parts"] if "functionCall" in p]
    assert [p.get("thoughtSignature") for p in signed] == [SIGNATURE, SIGNATURE]


def test_react_parallel_calls_and_failures_are_results(gemini: GeminiUpstream) -> None:
    def first(x: int) -> str:
        """First."""
        return f"first {x}"

    def broken(x: int) -> str:
        """Always fails."""
        raise ValueError("the disk is on fire")

    def think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
        if c.last.role == "user":
            return [("first", {"x": 1}), ("broken", {"x": 2}), ("first", {"x": "three"})]
        return " | ".join(t.text for t in c.turns if t.role == "tool")

    gemini.think = think

    async def main() -> dict[str, Any]:
        bridge = vertex_express(gemini)
        agent = create_react_agent(bridge, MODEL, [first, broken])
        result = await agent.ainvoke({"messages": ["go"]})
        await bridge.aclose()
        return result.values

    values = asyncio.run(main())
    assert values["answer"].split(" | ") == [
        "first 1",
        "error: tool 'broken' failed: ValueError: the disk is on fire",
        "error: tool 'first': argument 'x' must be integer, got str 'three'",
    ]
    second = gemini.requests[1].body
    model_turn, results = second["contents"][1], second["contents"][2]
    # One model turn with three calls, only the first signed; one user turn answering all three.
    assert [p.get("thoughtSignature") for p in model_turn["parts"]] == [SIGNATURE, None, None]
    assert [p["functionResponse"]["name"] for p in results["parts"]] == ["first", "broken", "first"]
    ids = [c["id"] for c in values["messages"][1]["tool_calls"]]
    assert len(set(ids)) == 3  # three calls of two names: still three ids


def test_react_a_call_to_an_undeclared_function_is_refused_by_gemini(
    gemini: GeminiUpstream,
) -> None:
    """Gemini refuses a ``functionResponse`` naming no declared function (400), so a model
    that calls a tool the agent does not have ends the run with that clear upstream error
    (on Anthropic and OpenAI the agent answers the call with an error result and goes on)."""
    gemini.think = lambda c: [("missing", {})] if c.last.role == "user" else "never"

    async def main() -> None:
        bridge = vertex_express(gemini)
        agent = create_react_agent(bridge, MODEL, [offsite_date])
        with pytest.raises(NodeError, match="node 'agent' failed in step 2") as e:
            await agent.ainvoke({"messages": ["go"]})
        cause = e.value.__cause__
        assert isinstance(cause, UpstreamError) and cause.code == "upstream_bad_request"
        assert "function_response.name: unknown function" in str(cause)
        await bridge.aclose()

    asyncio.run(main())
    assert len(gemini.requests) == 2


def test_a_supervisor_delegates_to_two_workers(gemini: GeminiUpstream) -> None:
    def think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
        """The supervisor (offered transfer functions) and the researcher (a lookup)."""
        results = [t.text for t in c.turns if t.role == "tool"]
        if "lookup_population" in c.tools:  # the researcher
            return [("lookup_population", {"city": "Lisbon"})] if not results else (
                f"Lisbon has {results[-1]} people."
            )  # fmt: skip
        if not results:
            return [("transfer_to_researcher", {"task": "Find the population of Lisbon"})]
        if len(results) == 1:
            return [("transfer_to_writer", {"task": f"One line for the newsletter: {results[0]}"})]
        return f"Done. {results[-1]}"

    gemini.think = think
    briefs: list[str] = []

    async def writer(task: str) -> str:
        """Writes newsletter lines."""
        briefs.append(task)
        return "Written: " + task.split(": ", 1)[1]

    async def main() -> list[Any]:
        bridge = vertex_project(gemini)
        researcher = create_react_agent(
            bridge, MODEL, [lookup_population], checkpointer=MemoryCheckpointer()
        )
        boss = create_supervisor(
            bridge, MODEL, {"researcher": researcher, "writer": writer}, max_handoffs=4
        )
        events = [
            e async for e in boss.astream({"messages": ["Announce Lisbon's size"]}, thread_id="s")
        ]
        first_call = events[-1].values["messages"][1]["tool_calls"][0]  # type: ignore[union-attr]
        sub = researcher.get_state(f"s:researcher:{first_call['id']}")
        assert sub.values["answer"] == "Lisbon has 545,000 people."
        await bridge.aclose()
        return events

    events = asyncio.run(main())
    steps = [sorted(e.updates) for e in events if isinstance(e, StepEvent)]
    assert steps == [["supervisor"], ["researcher"], ["supervisor"], ["writer"], ["supervisor"]]
    values = events[-1].values  # type: ignore[union-attr]
    assert values["answer"] == "Done. Written: Lisbon has 545,000 people."
    assert values["stop_reason"] == "answered" and values["handoffs"] == 2
    assert briefs == ["One line for the newsletter: Lisbon has 545,000 people."]
    # On the wire: the supervisor's requests offer the transfer functions; its last one holds
    # both transfer calls and both workers' contributions as function responses.
    bosses = [r.body for r in gemini.requests if "transfer_to_writer" in str(r.body["tools"])]
    assert len(bosses) == 3 and len(gemini.requests) == 5  # + the researcher's two
    declared = bosses[0]["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declared] == ["transfer_to_researcher", "transfer_to_writer"]
    assert parts_of(bosses[-1]) == [
        ("model", "functionCall", "transfer_to_researcher",
         {"task": "Find the population of Lisbon"}),
        ("user", "functionResponse", "transfer_to_researcher",
         {"output": "Lisbon has 545,000 people."}),
        ("model", "functionCall", "transfer_to_writer",
         {"task": "One line for the newsletter: Lisbon has 545,000 people."}),
        ("user", "functionResponse", "transfer_to_writer",
         {"output": "Written: Lisbon has 545,000 people."}),
    ]  # fmt: skip
    researcher_calls = [
        r.body for r in gemini.requests if "lookup_population" in str(r.body["tools"])
    ]
    assert parts_of(researcher_calls[-1]) == [
        ("model", "functionCall", "lookup_population", {"city": "Lisbon"}),
        ("user", "functionResponse", "lookup_population", {"output": "545,000"}),
    ]


def test_reflection_stops_when_the_critic_approves(gemini: GeminiUpstream) -> None:
    gemini.think = writer_and_critic(approve_on=2)

    async def main() -> dict[str, Any]:
        bridge = vertex_express(gemini)
        agent = create_reflection_agent(bridge, MODEL, max_rounds=5)
        result = await agent.ainvoke({"task": TASK})
        await bridge.aclose()
        return result.values

    values = asyncio.run(main())
    assert values["draft"] == "Draft 2." and values["rounds"] == 2
    assert values["stop_reason"] == "approved" and values["critique"] == "APPROVED"
    assert [h["critique"] for h in values["history"]] == ["Not yet: Draft 1.", "APPROVED"]
    critic = gemini.requests[1].body  # the critic's instructions travel as systemInstruction
    assert "review a draft" in " ".join(p["text"] for p in critic["systemInstruction"]["parts"])
    assert "Not yet: Draft 1." in json.dumps(gemini.requests[2].body["contents"])


def test_react_a_pause_before_tools_is_answered_by_a_human(
    gemini: GeminiUpstream, tmp_path: Path
) -> None:
    gemini.think = two_steps

    async def main() -> dict[str, Any]:
        bridge = vertex_express(gemini)
        agent = create_react_agent(
            bridge, MODEL, [offsite_date, weather],
            checkpointer=SQLiteCheckpointer(tmp_path / "runs.db"), interrupt_before=["tools"],
        )  # fmt: skip
        first = await agent.ainvoke({"messages": [QUESTION]}, thread_id="t")
        assert first.status == "interrupted" and first.next == ["tools"]
        second = await agent.aresume("t")  # approved: offsite_date runs
        pending = second.values["messages"][-1]["tool_calls"][0]
        assert second.status == "interrupted" and pending["name"] == "weather"
        # A human answers the call by its (bridge-made) id; its name reaches the wire.
        agent.update_state("t", {"messages": [{
            "role": "tool", "tool_call_id": pending["id"], "name": "weather",
            "content": "the operator says: rain", "is_error": False,
        }]})  # fmt: skip
        done = await agent.aresume("t")
        await bridge.aclose()
        return done.values

    values = asyncio.run(main())
    assert values["answer"].startswith("The offsite is 12-14 May; expect the operator says: rain")
    assert parts_of(gemini.requests[-1].body)[-1] == (
        "user", "functionResponse", "weather", {"output": "the operator says: rain"}
    )  # fmt: skip


def test_react_the_step_bound_answers_every_call_and_the_thread_goes_on(
    gemini: GeminiUpstream,
) -> None:
    """Gemini wants as many responses as the turn made calls: the calls the step bound
    leaves unrun are answered "not run", so the thread's next turn is accepted."""
    gemini.think = lambda c: [("offsite_date", {"city": "Lisbon"}), ("weather", {"city": "X"})]

    async def main() -> None:
        bridge = vertex_express(gemini)
        agent = create_react_agent(bridge, MODEL, [offsite_date, weather], max_steps=2)
        result = await agent.ainvoke({"messages": ["loop forever"]}, thread_id="t")
        assert result.values["stop_reason"] == "max_steps" and result.values["steps"] == 2
        gemini.think = lambda c: "fine"
        again = await agent.ainvoke({"messages": ["again"]}, thread_id="t")
        assert again.values["answer"] == "fine"
        await bridge.aclose()

    asyncio.run(main())
    last = gemini.requests[-1].body["contents"]
    responses = [p["functionResponse"] for p in last[4]["parts"]]
    assert [r["name"] for r in responses] == ["offsite_date", "weather"]
    assert all(r["response"]["output"].startswith("not run") for r in responses)
    assert last[5] == {"role": "user", "parts": [{"text": "again"}]}


def test_the_loopback_refuses_fewer_responses_than_calls(gemini: GeminiUpstream) -> None:
    """What the test above relies on: the loopback checks the count, as Google does."""
    calls = (ToolCall("a", "offsite_date", {"city": "Lisbon"}), ToolCall("b", "weather", {}))
    request = ChatRequest(
        model=MODEL,
        messages=(
            Message("user", "go"),
            Message("assistant", "", tool_calls=calls),
            Message("tool", "12-14 May", tool_call_id="a"),
        ),
        tools=({"name": "offsite_date"}, {"name": "weather"}),
    )

    async def main() -> None:
        bridge = vertex_express(gemini)
        with pytest.raises(UpstreamError, match="number of function response parts"):
            await bridge.generate(request)
        await bridge.aclose()

    asyncio.run(main())
