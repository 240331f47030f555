"""The three prebuilt-agent examples of docs/agents.md run as written, over the OpenAI SDK
bridge against the loopback server with a scripted model."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evermind.bridges.openai import OpenAIBridge
from tests.upstreams import Conversation, OpenAIUpstream

ROOT = Path(__file__).resolve().parents[2]


def example(title: str) -> str:
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    found = re.search(rf"### {re.escape(title)}\n\n```python\n(.*?)```", text, re.S)
    assert found is not None, title
    lines = [line for line in found.group(1).splitlines() if line.strip()]
    assert len(lines) <= 25, (title, len(lines))
    return found.group(1)


def think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
    """Every agent of the examples: a supervisor, a researcher, a ReAct planner, a writer and
    a critic, told apart by their tools and prompts."""
    tools = [t.text for t in c.turns if t.role == "tool"]
    if "transfer_to_researcher" in c.tools:
        if not tools:
            return [("transfer_to_researcher", {"task": "population of Lisbon"})]
        if len(tools) == 1:
            return [("transfer_to_writer", {"task": f"Announce: {tools[0]}"})]
        return f"Final: {tools[-1]}"
    if "lookup_population" in c.tools:
        return [("lookup_population", {"city": "Lisbon"})] if not tools else f"It is {tools[0]}"
    if "weather" in c.tools:
        return [("weather", {"city": "Lisbon", "month": "May"})] if not tools else tools[0]
    if c.last.text.startswith("Announce: "):
        return "Written: " + c.last.text.removeprefix("Announce: ")
    if "review a draft" in c.system:
        return "APPROVED" if "revised" in c.last.text else "Shorter, please."
    return "A revised draft." if any(t.role == "assistant" for t in c.turns) else "A draft."


@pytest.fixture
def bridge() -> Iterator[tuple[OpenAIBridge, OpenAIUpstream]]:
    with OpenAIUpstream(think=think) as gpt:
        yield OpenAIBridge(api_key=gpt.api_key, base_url=gpt.url + "/v1", max_retries=0), gpt


def run(title: str, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(example(title), "docs/agents.md", "exec", dont_inherit=True), namespace)
    return namespace


def test_the_react_example(
    bridge: tuple[OpenAIBridge, OpenAIUpstream], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = run("ReAct: tools until an answer", {"bridge": bridge[0]})
    state = done["agent"].get_state("t1")
    assert state.next == [] and state.values["answer"] == "sunny in Lisbon in May"
    assert (tmp_path / "runs.db").exists() and (tmp_path / "memory.db").exists()
    names = [t["function"]["name"] for t in bridge[1].requests[0].body["tools"]]
    assert names == ["weather", "docs_search", "memory_remember"]


def test_the_reflection_example(bridge: tuple[OpenAIBridge, OpenAIUpstream]) -> None:
    done = run("Reflection: generate, critique, revise", {"writer": bridge[0], "claude": bridge[0]})
    values = done["run"].values
    assert values["draft"] == "A revised draft." and values["stop_reason"] == "approved"


def test_the_supervisor_example(
    bridge: tuple[OpenAIBridge, OpenAIUpstream], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    def lookup_population(city: str) -> str:
        """A city's population."""
        return "545,000"

    done = run(
        "Supervisor: a model that delegates",
        {"bridge": bridge[0], "lookup_population": lookup_population},
    )
    answer = done["team"].get_state("s1").values["answer"]
    assert answer == "Final: Written: It is 545,000"
