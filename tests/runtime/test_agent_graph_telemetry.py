"""AgentGraph's telemetry and cost, with real model calls: the OpenAI SDK bridge over a
loopback OpenAI-protocol server, priced by InstrumentedBridge; ``evermind agent run
--otlp-endpoint`` exporting to a loopback OTLP receiver; and the 20-line example of
docs/agents.md, run as written.
"""

from __future__ import annotations

import operator
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from evermind.agent.graph import END, START, AgentGraph, NodeContext, interrupt
from evermind.bridges.base import ChatRequest, Message
from evermind.bridges.instrumented import InstrumentedBridge
from evermind.bridges.openai import OpenAIBridge
from tests import procs
from tests.runtime.test_telemetry import Recorded, recorded  # noqa: F401
from tests.runtime.test_telemetry_otlp import Receiver, attributes_of, receiver  # noqa: F401
from tests.upstreams import OpenAIUpstream

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-graph-telemetry-5b1e"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(KEY) as gpt:
        yield gpt


def _bridge(upstream: OpenAIUpstream) -> InstrumentedBridge:
    return InstrumentedBridge(
        OpenAIBridge(api_key=upstream.api_key, base_url=upstream.url + "/v1", max_retries=0)
    )


class Debate(TypedDict):
    question: str
    answers: Annotated[list, operator.add]
    verdict: str


def test_one_span_per_node_under_the_run_and_cost_per_run(
    upstream: OpenAIUpstream,
    recorded: Recorded,  # noqa: F811 - the imported fixture
) -> None:
    bridge = _bridge(upstream)

    def asker(name: str) -> Any:
        async def node(state: Debate, ctx: NodeContext) -> dict[str, Any]:
            request = ChatRequest(
                model="gpt-4o-mini", messages=(Message("user", f"{name}: {state['question']}"),)
            )
            completion = await ctx.generate(bridge, request)
            return {"answers": [completion.text]}

        return node

    async def judge(state: Debate) -> dict[str, Any]:
        return {"verdict": str(interrupt({"answers": state["answers"]}))}

    g = AgentGraph(Debate, name="debate")
    g.add_node("pro", asker("pro")).add_node("con", asker("con")).add_node("judge", judge)
    g.add_edge(START, "pro").add_edge(START, "con")
    g.add_edge(["pro", "con"], "judge").add_edge("judge", END)
    compiled = g.compile()

    async def run() -> tuple[Any, Any]:
        first = await compiled.ainvoke({"question": "tea or coffee?"}, thread_id="d1")
        second = await compiled.aresume("d1", "tea")
        await bridge.bridge.aclose()
        return first, second

    import asyncio

    first, second = asyncio.run(run())
    assert first.status == "interrupted" and second.status == "done"
    assert second.values["verdict"] == "tea" and len(second.values["answers"]) == 2

    runs = recorded.named("invoke_agent debate")
    nodes = {name: recorded.named(f"node {name}") for name in ("pro", "con", "judge")}
    chats = recorded.named("chat gpt-4o-mini")
    assert len(runs) == 2 and len(chats) == 2
    assert [len(nodes["pro"]), len(nodes["con"]), len(nodes["judge"])] == [1, 1, 2]
    first_run, second_run = sorted(runs, key=lambda s: s.start_time or 0)
    assert first_run.attributes is not None and second_run.attributes is not None
    assert first_run.attributes["evermind.graph.thread_id"] == "d1"
    assert first_run.attributes["gen_ai.operation.name"] == "invoke_agent"
    for name in ("pro", "con"):
        span = nodes[name][0]
        assert span.parent is not None and span.parent.span_id == first_run.context.span_id
        assert span.attributes is not None and span.attributes["evermind.graph.step"] == 0
        assert span.attributes["evermind.graph.node"] == name
    # Each model call's span is a child of the node that made it.
    node_ids = {nodes[n][0].context.span_id for n in ("pro", "con")}
    assert {c.parent.span_id for c in chats if c.parent is not None} == node_ids
    asked, answered = sorted(nodes["judge"], key=lambda s: s.start_time or 0)
    assert asked.attributes is not None and asked.attributes["evermind.graph.interrupted"]
    assert answered.parent is not None and answered.parent.span_id == second_run.context.span_id

    # Cost: what the bridge priced, per node, per run and per thread.
    assert bridge.cost_usd > 0
    node_costs = [nodes[n][0].attributes["evermind.cost_usd"] for n in ("pro", "con")]  # type: ignore[index]
    assert sum(node_costs) == pytest.approx(bridge.cost_usd)
    assert first.cost_usd == pytest.approx(bridge.cost_usd)
    assert first_run.attributes["evermind.cost_usd"] == pytest.approx(bridge.cost_usd)
    assert second.cost_usd == 0.0
    assert second.thread_cost_usd == pytest.approx(bridge.cost_usd)
    step = compiled.get_state_history("d1")[1]  # the step pro and con ran in
    assert step.cost_usd == pytest.approx(bridge.cost_usd)


def test_the_docs_example_runs_as_written(
    upstream: OpenAIUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    code = re.search(r"## A graph in 20 lines\n\n```python\n(.*?)```", text, re.S)
    assert code is not None
    lines = [line for line in code.group(1).splitlines() if line.strip()]
    assert len(lines) <= 30, len(lines)
    monkeypatch.chdir(tmp_path)
    bridge = _bridge(upstream)
    namespace: dict[str, Any] = {"bridge": bridge}
    exec(compile(code.group(1), "docs/agents.md", "exec", dont_inherit=True), namespace)
    graph = namespace["graph"]
    state = graph.get_state("t1")
    assert state.values["verdict"] == "ok" and state.next == []
    assert len(state.values["notes"]) == 2 and (tmp_path / "runs.db").exists()
    assert namespace["result"].status == "interrupted"
    assert graph.get_state_history("t1")[0].metadata["source"] == "loop"
    assert sum(s.cost_usd for s in graph.get_state_history("t1")) == pytest.approx(bridge.cost_usd)


def test_evermind_agent_run_exports_its_spans_over_otlp(
    tmp_path: Path,
    receiver: Receiver,  # noqa: F811 - the imported fixture
) -> None:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "GRAPH_LOG": str(tmp_path / "log"),
        "OTEL_SERVICE_NAME": "agent-under-test",
    })  # fmt: skip
    graph = ROOT / "tests" / "unit" / "graph_durable.py"
    done = procs.run(
        [sys.executable, "-m", "evermind.cli", "agent", "run", str(graph), "--thread", "O",
         "--checkpoint", str(tmp_path / "runs.db"), "--otlp-endpoint", receiver.url,
         "--input", '{"topic": "otlp", "approve": false}'],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wanted = {"invoke_agent durable", "node plan", "node fast", "node slow", "node review"}

    def arrived() -> dict[str, Any]:
        found = {span.name: (resource, span) for resource, span in receiver.spans()}
        return found if wanted <= set(found) else {}

    spans = receiver.wait_for(arrived, "agent spans")
    resource, run_span = spans["invoke_agent durable"]
    assert resource["service.name"] == "agent-under-test"
    run_attributes = attributes_of(run_span.attributes)
    assert run_attributes["evermind.graph.thread_id"] == "O"
    assert run_attributes["evermind.graph.step"] == 3
    for name in ("plan", "fast", "slow", "review"):
        _, span = spans[f"node {name}"]
        assert span.parent_span_id == run_span.span_id
        assert attributes_of(span.attributes)["evermind.graph.node"] == name
