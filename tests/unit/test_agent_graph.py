"""AgentGraph: supersteps, reducers, routing, joins, interrupts and time travel.

Each behaviour runs on the in-memory checkpointer and on a real SQLite file (the same
semantics); the SQLite-only tests reopen the file from a new graph object, as a new process
would. The SIGKILL proof is tests/unit/test_agent_graph_durable.py.
"""

from __future__ import annotations

import asyncio
import operator
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import pytest

from evermind.agent.graph import (
    END,
    START,
    AgentGraph,
    Checkpoint,
    GraphRecursionError,
    InvalidUpdate,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    RunResult,
    SQLiteCheckpointer,
    StepEvent,
    context,
    interrupt,
    open_checkpointer,
)
from evermind.errors import ConfigError, Conflict, GraphError, InputError, NotFound
from tests import procs
from tests.unit.test_memory_helpers import SRC


class Notes(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]
    count: int
    seen: str


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    opened = (
        MemoryCheckpointer()
        if request.param == "memory"
        else SQLiteCheckpointer(tmp_path / "runs.db")
    )
    yield opened
    opened.close()


def test_a_superstep_runs_its_nodes_on_the_state_at_its_start(store: Any) -> None:
    both_running = threading.Barrier(2, timeout=10)

    def left(state: Notes) -> dict[str, Any]:
        both_running.wait()  # proves the two sync nodes run at the same time
        return {"notes": ["left"], "count": 1}

    async def right(state: Notes) -> dict[str, Any]:
        await asyncio.to_thread(both_running.wait)
        # The state as of the step's start: left's count=1 is not visible yet.
        return {"notes": ["right"], "seen": f"count={state.get('count', 'unset')}"}

    def after(state: Notes) -> dict[str, Any]:
        return {"seen": f"{state['seen']} then {state['count']}"}

    g = AgentGraph(Notes)
    g.add_node("left", left).add_node("right", right).add_node("after", after)
    g.add_edge(START, "left").add_edge(START, "right")
    g.add_edge("left", "after").add_edge("right", "after").add_edge("after", END)
    events = list(g.compile(store).stream({"topic": "t"}, thread_id="p"))
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert [(e.step, sorted(e.updates), e.next) for e in steps] == [
        (0, ["left", "right"], ["after"]),
        (1, ["after"], []),
    ]
    result = events[-1]
    assert isinstance(result, RunResult) and result.status == "done" and result.steps == 2
    # Reducer merge in the order the step listed the nodes (START's edges: left, right).
    assert result.values == {
        "topic": "t", "notes": ["left", "right"], "count": 1, "seen": "count=unset then 1",
    }  # fmt: skip


def test_two_writes_to_a_key_without_reducer_name_the_key_and_nodes(store: Any) -> None:
    g = AgentGraph(Notes)
    g.add_node("a", lambda s: {"seen": "a"}).add_node("b", lambda s: {"seen": "b"})
    g.add_edge(START, "a").add_edge(START, "b").add_edge("a", END).add_edge("b", END)
    with pytest.raises(InvalidUpdate) as caught:
        g.compile(store).invoke({"topic": "t"}, thread_id="c")
    message = str(caught.value)
    assert "'seen'" in message and "'a', 'b'" in message and "reducer" in message


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        ({"nope": 1}, "node 'n' wrote 'nope', which is not a key of Notes"),
        ("text", "node 'n' returned str; expected a dict"),
        ({"seen": object()}, "node 'n''s value of 'seen' cannot be stored"),
        ({"count": float("nan")}, "cannot be stored"),
    ],
)
def test_a_bad_update_is_a_clear_error(returned: Any, expected: str) -> None:
    g = AgentGraph(Notes)
    g.add_node("n", lambda s: returned).add_edge(START, "n").add_edge("n", END)
    with pytest.raises(InvalidUpdate, match=expected.replace("(", r"\(")):
        g.compile().invoke({"topic": "t"})


def test_conditional_edges_route_on_the_merged_state(store: Any) -> None:
    def grow(state: Notes) -> dict[str, Any]:
        return {"count": state.get("count", 0) + 1, "notes": [f"n{state.get('count', 0)}"]}

    def more(state: Notes) -> Literal["grow", "__end__"]:
        return "grow" if state["count"] < 3 else END

    g = AgentGraph(Notes)
    g.add_node("grow", grow).add_edge(START, "grow").add_conditional_edges("grow", more)
    result = g.compile(store).invoke({"topic": "loop"}, thread_id="l")
    assert result.values["notes"] == ["n0", "n1", "n2"] and result.steps == 3


def test_a_router_may_fan_out_through_a_mapping(store: Any) -> None:
    g = AgentGraph(Notes)
    g.add_node("pick", lambda s: None)
    g.add_node("x", lambda s: {"notes": ["x"]}).add_node("y", lambda s: {"notes": ["y"]})
    g.add_edge(START, "pick")
    g.add_conditional_edges("pick", lambda s: ["both-y", "both-x"], {"both-x": "x", "both-y": "y"})
    g.add_edge("x", END).add_edge("y", END)
    result = g.compile(store).invoke({"topic": "t"}, thread_id="f")
    assert result.values["notes"] == ["y", "x"]


def test_a_router_that_returns_an_unknown_key_fails_naming_it() -> None:
    g = AgentGraph(Notes)
    g.add_node("a", lambda s: None).add_node("b", lambda s: None).add_edge("b", END)
    g.add_edge(START, "a").add_conditional_edges("a", lambda s: "c", {"go": "b", "stop": END})
    with pytest.raises(NodeError, match=r"router after 'a'.*returned 'c'; its mapping has 'go'"):
        g.compile().invoke({"topic": "t"})


def test_a_join_waits_for_its_slowest_branch(store: Any) -> None:
    g = AgentGraph(Notes)
    for name in ("short", "long1", "long2", "join"):
        g.add_node(name, lambda s, n=name: {"notes": [n]})
    g.add_edge(START, "short").add_edge(START, "long1").add_edge("long1", "long2")
    g.add_edge(["short", "long2"], "join").add_edge("join", END)
    result = g.compile(store).invoke({"topic": "t"}, thread_id="j")
    assert result.values["notes"] == ["short", "long1", "long2", "join"]
    assert result.steps == 3  # join ran once, after long2


def test_the_step_limit_stops_a_loop_and_the_thread_resumes(store: Any) -> None:
    def again(state: Notes) -> str:
        return "tick" if state.get("count", 0) < 5 else END

    g = AgentGraph(Notes)
    g.add_node("tick", lambda s: {"count": s.get("count", 0) + 1})
    g.add_edge(START, "tick").add_conditional_edges("tick", again, ["tick", END])
    compiled = g.compile(store, recursion_limit=3)
    with pytest.raises(GraphRecursionError, match="ran 3 supersteps, its recursion_limit"):
        compiled.invoke({"topic": "t"}, thread_id="r")
    assert compiled.get_state("r").values["count"] == 3
    assert compiled.resume("r").values["count"] == 5


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda g: g.add_edge(START, "a").add_edge("a", "ghost"), "unknown target node 'ghost'"),
        (lambda g: g.add_edge("a", END), "nothing follows START"),
        (
            lambda g: (
                g.add_edge(START, "a")
                .add_edge("a", END)
                .add_node("lost", lambda s: None)
                .add_edge("lost", END)
            ),
            "'lost' cannot be reached from START",
        ),
        (lambda g: g.add_edge(START, "a").add_edge("a", "a"), "no path from '__start__' to END"),
        (
            lambda g: g.add_edge(START, "a").add_conditional_edges("a", lambda s: "a", ["a"]),
            "no path from",
        ),
        (lambda g: g.add_conditional_edges("ghost", lambda s: END), "unknown node 'ghost'"),
    ],
)
def test_compile_rejects_a_graph_of_the_wrong_shape(build: Any, message: str) -> None:
    g = AgentGraph(Notes)
    g.add_node("a", lambda s: None)
    build(g)
    with pytest.raises(ConfigError, match=message):
        g.compile()


def test_nodes_and_options_are_checked_when_added() -> None:
    g = AgentGraph(Notes)
    g.add_node("a", lambda s: None).add_edge(START, "a").add_edge("a", END)
    with pytest.raises(ConfigError, match="already in the graph"):
        g.add_node("a", lambda s: None)
    with pytest.raises(ConfigError, match="reserved"):
        g.add_node(END, lambda s: None)
    with pytest.raises(ConfigError, match="expected a function"):
        g.add_node("b", 42)
    with pytest.raises(ConfigError, match="interrupt_before names 'zz'"):
        g.compile(interrupt_before=["zz"])
    with pytest.raises(ConfigError, match="not a TypedDict or a dataclass"):
        AgentGraph(dict)


@dataclass
class Draft:
    topic: str
    words: Annotated[list[str], operator.add] = field(default_factory=list)
    rounds: int = 0


class Writer:
    """A node that is an object with an async run method taking the context."""

    def __init__(self) -> None:
        self.contexts: list[tuple[str, int]] = []

    async def run(self, state: Draft, ctx: NodeContext) -> dict[str, Any]:
        assert isinstance(state, Draft)  # a dataclass schema gives nodes its instances
        assert context() is ctx
        self.contexts.append((ctx.node, ctx.step))
        return {"words": [state.topic.upper()], "rounds": state.rounds + 1}


def test_a_dataclass_state_and_an_object_node() -> None:
    writer = Writer()
    g = AgentGraph(Draft)
    g.add_node("write", writer).add_edge(START, "write").add_edge("write", END)
    compiled = g.compile()
    result = compiled.invoke({"topic": "hi"}, thread_id="d")
    assert result.values == {"topic": "hi", "words": ["HI"], "rounds": 1}
    assert writer.contexts == [("write", 0)]
    # A finished thread takes the next input on top of its state (a conversation's next turn).
    again = compiled.invoke({"words": ["more"]}, thread_id="d")
    assert again.values == {"topic": "hi", "words": ["HI", "more", "HI"], "rounds": 2}
    with pytest.raises(InputError, match="leaves 'topic' of Draft unset"):
        compiled.invoke({"rounds": 1})


def test_interrupt_before_pauses_and_resume_goes_on(store: Any) -> None:
    ran: list[str] = []
    g = AgentGraph(Notes)
    g.add_node("draft", lambda s: ran.append("draft") or {"notes": ["draft"]})
    g.add_node("send", lambda s: ran.append("send") or {"notes": ["sent"]})
    g.add_edge(START, "draft").add_edge("draft", "send").add_edge("send", END)
    compiled = g.compile(store, interrupt_before=["send"])
    paused = compiled.invoke({"topic": "t"}, thread_id="i")
    assert paused.status == "interrupted" and paused.next == ["send"] and ran == ["draft"]
    assert [(w.node, w.kind) for w in compiled.get_state("i").interrupts] == [("send", "before")]
    with pytest.raises(Conflict, match="has not finished"):
        compiled.invoke({"topic": "again"}, thread_id="i")
    with pytest.raises(InputError, match="no question waiting"):
        compiled.resume("i", "yes")
    done = compiled.resume("i")
    assert done.status == "done" and done.values["notes"] == ["draft", "sent"]
    assert ran == ["draft", "send"] and compiled.get_state("i").interrupts == []


def test_interrupt_asks_a_human_and_resume_answers(store: Any) -> None:
    calls: list[Any] = []

    def approve(state: Notes) -> dict[str, Any]:
        calls.append("start")
        first = interrupt({"question": "ok?", "draft": state["notes"]})
        second = interrupt("and the title?")
        calls.append((first, second))
        return {"seen": f"{first}/{second}"}

    g = AgentGraph(Notes)
    g.add_node("write", lambda s: {"notes": ["w"]}).add_node("approve", approve)
    g.add_edge(START, "write").add_edge("write", "approve").add_edge("approve", END)
    compiled = g.compile(store)
    first = compiled.invoke({"topic": "t"}, thread_id="h")
    assert first.status == "interrupted"
    assert [(i.node, i.kind, i.index, i.payload) for i in first.interrupts] == [
        ("approve", "ask", 0, {"question": "ok?", "draft": ["w"]})
    ]
    with pytest.raises(InputError, match=r"asks .* resume with a value"):
        compiled.resume("h")
    second = compiled.resume("h", "yes")
    assert [(i.index, i.payload) for i in second.interrupts] == [(1, "and the title?")]
    done = compiled.resume("h", {"title": "T"})
    assert done.status == "done" and done.values["seen"] == "yes/{'title': 'T'}"
    # The node re-ran from its start each time; the answers came back in order.
    assert calls == ["start", "start", "start", ("yes", {"title": "T"})]


def test_a_failed_node_keeps_its_siblings_work_for_the_resume(store: Any) -> None:
    ran: list[str] = []
    broken = {"on": True}

    def good(state: Notes) -> dict[str, Any]:
        ran.append("good")
        return {"notes": ["good"]}

    def flaky(state: Notes) -> dict[str, Any]:
        ran.append("flaky")
        if broken["on"]:
            raise RuntimeError("upstream down")
        return {"notes": ["flaky"]}

    g = AgentGraph(Notes)
    g.add_node("good", good).add_node("flaky", flaky)
    g.add_edge(START, "good").add_edge(START, "flaky").add_edge("good", END).add_edge("flaky", END)
    compiled = g.compile(store)
    with pytest.raises(NodeError, match=r"node 'flaky' failed in step 0.*upstream down") as caught:
        compiled.invoke({"topic": "t"}, thread_id="e")
    assert (caught.value.node, caught.value.step) == ("flaky", 0)
    broken["on"] = False
    done = compiled.resume("e")
    assert done.values["notes"] == ["good", "flaky"]
    assert sorted(ran) == ["flaky", "flaky", "good"]  # good's update was kept, not re-run


def _linear(store: Any) -> Any:
    g = AgentGraph(Notes)
    for name in ("one", "two", "three"):
        g.add_node(name, lambda s, n=name: {"notes": [f"{n}:{s['topic']}"]})
    g.add_edge(START, "one").add_edge("one", "two").add_edge("two", "three").add_edge("three", END)
    return g.compile(store)


def test_fork_from_a_checkpoint_diverges_without_touching_the_original(store: Any) -> None:
    compiled = _linear(store)
    compiled.invoke({"topic": "a"}, thread_id="orig")
    before = [(s.checkpoint_id, s.values, s.next) for s in compiled.get_state_history("orig")]
    assert [s.step for s in compiled.get_state_history("orig")] == [2, 1, 0, -1]
    after_one = compiled.get_state_history("orig")[2]  # step 0: one ran, two is next
    assert after_one.next == ["two"]
    fork = compiled.fork("orig", after_one.checkpoint_id, {"topic": "b"}, new_thread_id="fork")
    done = compiled.resume(fork)
    assert done.values["notes"] == ["one:a", "two:b", "three:b"]
    forked = compiled.get_state_history("fork")
    assert forked[-1].metadata["source"] == "fork"
    assert forked[-1].metadata["forked_from"] == {
        "thread_id": "orig", "checkpoint_id": after_one.checkpoint_id,
    }  # fmt: skip
    assert [(s.checkpoint_id, s.values, s.next) for s in compiled.get_state_history("orig")] == (
        before
    )
    with pytest.raises(Conflict, match="exists"):
        compiled.fork("orig", after_one.checkpoint_id, new_thread_id="fork")
    with pytest.raises(NotFound, match="no checkpoint 'nope'"):
        compiled.fork("orig", "nope")
    with pytest.raises(InputError, match="not a key"):
        compiled.fork("orig", after_one.checkpoint_id, {"bogus": 1})


def test_update_state_writes_a_checkpoint_the_run_goes_on_from(store: Any) -> None:
    g = AgentGraph(Notes)
    g.add_node("a", lambda s: {"notes": ["a"]}).add_node("b", lambda s: {"seen": str(s["notes"])})
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    compiled = g.compile(store, interrupt_before=["b"])
    compiled.invoke({"topic": "t"}, thread_id="u")
    compiled.update_state("u", {"notes": ["human"]})
    edited = compiled.get_state("u")
    assert edited.metadata["source"] == "update" and [w.node for w in edited.interrupts] == ["b"]
    assert compiled.resume("u").values["seen"] == "['a', 'human']"


def test_unknown_threads_and_a_resume_without_thread() -> None:
    compiled = _linear(MemoryCheckpointer())
    with pytest.raises(NotFound, match="no thread 'x'"):
        compiled.resume("x")
    with pytest.raises(NotFound):
        compiled.get_state("x")
    with pytest.raises(InputError, match="nothing to run"):
        compiled.invoke(None)
    with pytest.raises(InputError, match="an input starts a run"):
        compiled.invoke({"topic": "x"}, resume="yes")
    with pytest.raises(InputError, match="not a key of Notes"):
        compiled.invoke({"bogus": True})


def test_the_sync_api_refuses_a_running_loop_and_the_async_api_works() -> None:
    compiled = _linear(MemoryCheckpointer())

    async def inside() -> RunResult:
        with pytest.raises(GraphError, match="await ainvoke"):
            compiled.invoke({"topic": "x"})
        return await compiled.ainvoke({"topic": "x"}, thread_id="async")

    assert asyncio.run(inside()).values["notes"] == ["one:x", "two:x", "three:x"]


def test_sqlite_threads_survive_a_new_graph_object_and_refuse_a_second_writer(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/db/runs.db"
    first = _linear(open_checkpointer(url))
    first.invoke({"topic": "s"}, thread_id="kept")
    reopened = open_checkpointer(url)
    again = _linear(reopened)
    assert again.get_state("kept").values["notes"] == ["one:s", "two:s", "three:s"]
    assert reopened.threads() == ["kept"]
    latest = reopened.latest("kept")
    assert latest is not None
    stale = Checkpoint("kept", "other", latest.parent_id, latest.step, {}, [])
    with pytest.raises(Conflict, match="moved on"):
        reopened.put(stale)
    with pytest.raises(ConfigError, match="unknown checkpoint store"):
        open_checkpointer("redis://x")


def test_a_thread_resumed_by_a_graph_without_its_next_node_is_a_clear_error(
    tmp_path: Path,
) -> None:
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    g = AgentGraph(Notes)
    g.add_node("one", lambda s: {"notes": ["one"]}).add_node("two", lambda s: None)
    g.add_edge(START, "one").add_edge("one", "two").add_edge("two", END)
    g.compile(store, interrupt_before=["two"]).invoke({"topic": "t"}, thread_id="old")
    changed = AgentGraph(Notes)
    changed.add_node("one", lambda s: None).add_edge(START, "one").add_edge("one", END)
    with pytest.raises(GraphError, match="runs 'two' next, which this graph has no node of"):
        changed.compile(store).resume("old")


def test_the_graph_runs_where_sqlite3_is_not_loaded() -> None:
    """The tab's Pyodide loads sqlite3 only on request: the graph core does not need it."""
    code = textwrap.dedent(
        """
        import sys
        for blocked in ("numpy", "sqlite3", "_sqlite3", "wgpu", "psycopg"):
            sys.modules[blocked] = None
        from evermind.agent.graph import END, START, AgentGraph, interrupt
        from typing import TypedDict

        class S(TypedDict):
            n: int

        g = AgentGraph(S)
        g.add_node("ask", lambda s: {"n": interrupt("n?")})
        g.add_edge(START, "ask").add_edge("ask", END)
        compiled = g.compile()
        compiled.invoke({"n": 0}, thread_id="t")
        print(compiled.resume("t", 7).values)
        """
    )
    out = procs.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{'n': 7}"


def test_a_postgres_url_without_psycopg_names_the_extra() -> None:
    code = (
        "import sys\nsys.modules['psycopg'] = None\n"
        "from evermind.agent.graph import open_checkpointer\n"
        "try:\n    open_checkpointer('postgresql://u@127.0.0.1/db')\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    out = procs.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ConfigError a Postgres checkpoint store needs psycopg")
    assert "evermind-memory[store]" in out.stdout


def test_a_bad_update_is_not_kept_so_the_fixed_node_resumes(store: Any) -> None:
    fixed = {"on": False}
    g = AgentGraph(Notes)
    g.add_node("n", lambda s: {"seen": "ok"} if fixed["on"] else {"typo": 1})
    g.add_edge(START, "n").add_edge("n", END)
    compiled = g.compile(store)
    with pytest.raises(InvalidUpdate, match="wrote 'typo'"):
        compiled.invoke({"topic": "t"}, thread_id="b")
    fixed["on"] = True
    assert compiled.resume("b").values["seen"] == "ok"


def test_interrupt_after_checkpoints_the_step_then_pauses(store: Any) -> None:
    ran: list[str] = []
    g = AgentGraph(Notes)
    for name in ("draft", "send"):
        g.add_node(name, lambda s, n=name: ran.append(n) or {"notes": [n]})
    g.add_edge(START, "draft").add_edge("draft", "send").add_edge("send", END)
    compiled = g.compile(store, interrupt_after=["draft", "send"])
    paused = compiled.invoke({"topic": "t"}, thread_id="after")
    assert paused.status == "interrupted" and ran == ["draft"]
    assert [(i.node, i.kind) for i in paused.interrupts] == [("draft", "after")]
    assert paused.values["notes"] == ["draft"] and paused.next == ["send"]
    done = compiled.resume("after")  # after the last node: done, no pause
    assert done.status == "done" and ran == ["draft", "send"] and done.interrupts == []
    with pytest.raises(ConfigError, match="interrupt_after names 'zz'"):
        g.compile(interrupt_after=["zz"])


def test_a_node_is_retried_in_its_step_and_then_fails(store: Any) -> None:
    calls: list[int] = []

    def flaky(state: Notes, ctx: NodeContext) -> dict[str, Any]:
        calls.append(ctx.step)
        if len(calls) < 3:
            raise TimeoutError("upstream slow")
        return {"seen": f"after {len(calls)} attempts"}

    g = AgentGraph(Notes)
    g.add_node("flaky", flaky, retries=2, retry_backoff_s=0.001)
    g.add_edge(START, "flaky").add_edge("flaky", END)
    assert g.compile(store).invoke({"topic": "t"}).values["seen"] == "after 3 attempts"
    assert calls == [0, 0, 0]

    g2 = AgentGraph(Notes)
    g2.add_node("down", lambda s: 1 / 0, retries=1, retry_backoff_s=0)
    g2.add_edge(START, "down").add_edge("down", END)
    with pytest.raises(NodeError, match="ZeroDivisionError"):
        g2.compile(store).invoke({"topic": "t"})
    with pytest.raises(ConfigError, match="must be >= 0"):
        g2.add_node("bad", lambda s: None, retries=-1)
