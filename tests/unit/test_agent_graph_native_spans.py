"""An ``AgentGraph`` run's spans on the standard-library telemetry backend (the OTLP JSON export
without the SDK, and the tab's): one ``invoke_agent`` span per run, one ``node`` span per node
under it, and a failing node's span marked failed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict

import pytest

from evermind.agent.graph import END, START, AgentGraph
from evermind.telemetry import genai
from evermind.telemetry.otlp_json import KIND_INTERNAL, STATUS_ERROR, JsonExport
from evermind.telemetry.tracing import NativeTelemetry


class Count(TypedDict):
    n: int


@pytest.fixture
def export() -> Iterator[JsonExport]:
    export = JsonExport({"service.name": "test"})
    backend = NativeTelemetry(export)
    genai.activate(backend)
    try:
        yield export
    finally:
        genai.uninstall(backend)


def _graph(fail: bool) -> AgentGraph:
    def one(state: Count) -> dict[str, int]:
        return {"n": state["n"] + 1}

    def two(state: Count) -> dict[str, int]:
        if fail:
            raise RuntimeError("node two broke")
        return {"n": state["n"] * 10}

    graph = AgentGraph(Count, name="counter")
    graph.add_node("one", one).add_node("two", two)
    graph.add_edge(START, "one").add_edge("one", "two").add_edge("two", END)
    return graph


def test_a_run_is_one_span_with_one_child_per_node(export: JsonExport) -> None:
    result = _graph(fail=False).compile().invoke({"n": 1}, thread_id="t")
    assert result.values == {"n": 20}
    spans = {s.name: s for s in export.take_spans()}
    run = spans["invoke_agent counter"]
    assert run.kind == KIND_INTERNAL and run.parent_span_id == ""
    for node in ("node one", "node two"):
        assert spans[node].parent_span_id == run.span_id
        assert spans[node].trace_id == run.trace_id


def test_a_failing_node_marks_its_span_failed(export: JsonExport) -> None:
    with pytest.raises(Exception, match="node two broke"):
        _graph(fail=True).compile().invoke({"n": 1}, thread_id="t")
    spans = {s.name: s for s in export.take_spans()}
    assert spans["node two"].status_code == STATUS_ERROR
    assert spans["node two"].attributes["error.type"]
    assert spans["node one"].status_code != STATUS_ERROR
