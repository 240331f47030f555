"""``CompiledGraph``: runs an :class:`AgentGraph` in supersteps, durably.

Browser-safe (standard library only). The model is Pregel's bulk-synchronous one, as
LangGraph uses it: the nodes triggered for a superstep run concurrently (async nodes on the
event loop, sync ones in worker threads), each on its own copy of the state as of the step's
start; when all have finished, their updates are merged in the order the step listed them
(reducers, or last-write with a conflict check), the routes out of each are evaluated on the
merged state, and one checkpoint is written. A node's finished update is written at once as
a pending write against the step's starting checkpoint, so a step cut short (a crash, an
interrupt in a sibling, an error) re-runs only the nodes that had not finished.

Guarantees: a checkpointed step never runs again on resume (exactly once per thread); a node
of a step cut short whose update was not yet written runs again (at least once: its side
effects outside the state may happen twice). Telemetry: one ``invoke_agent {graph}`` span per
call and one ``node {name}`` span per node execution under it, with the thread, run, step and
cost; the bridges' GenAI spans of calls a node makes nest under its node span.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from evermind.agent.graph.checkpoint import (
    AFTER,
    BEFORE,
    INTERRUPT,
    PAUSE,
    RESUME,
    UPDATE,
    Checkpoint,
    Checkpointer,
    PendingWrite,
)
from evermind.agent.graph.context import NodeContext, enter
from evermind.agent.graph.errors import GraphInterrupt, GraphRecursionError, NodeError
from evermind.agent.graph.events import Interrupt, RunResult, StepEvent
from evermind.agent.graph.history import ThreadHistory, new_id, pending_interrupts, step_cost
from evermind.agent.graph.shape import END, START, GraphShape, Node
from evermind.agent.graph.state import as_update
from evermind.errors import Conflict, GraphError, InputError, NotFound
from evermind.telemetry import Span, start_span

T = TypeVar("T")
logger = logging.getLogger(__name__)
#: ``resume``'s "no value given".
NOTHING: Any = object()
#: The span attributes of a graph run.
THREAD_ID, RUN_ID, STEP, NODE = (
    "evermind.graph.thread_id", "evermind.graph.run_id", "evermind.graph.step",
    "evermind.graph.node",
)  # fmt: skip
COST_USD = "evermind.cost_usd"


class CompiledGraph(ThreadHistory):
    """A checked graph with its checkpointer: ``invoke``, ``stream``, ``resume``, time travel.

    Every method has an async twin (``ainvoke``, ``astream``, ``aresume``); the sync ones
    run their own event loop and may not be called from inside one.
    """

    def __init__(
        self,
        graph: GraphShape,
        checkpointer: Checkpointer,
        *,
        interrupt_before: tuple[str, ...],
        recursion_limit: int,
        interrupt_after: tuple[str, ...] = (),
    ) -> None:
        self.graph = graph
        self.state = graph.state
        self.checkpointer = checkpointer
        self.interrupt_before = interrupt_before
        self.interrupt_after = interrupt_after
        self.recursion_limit = recursion_limit
        self.name = graph.name

    # -- running ------------------------------------------------------------------------

    async def astream(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        resume: Any = NOTHING,
        node: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[StepEvent | RunResult, None]:
        """Runs until done or interrupted, yielding a :class:`StepEvent` per superstep and
        the :class:`RunResult` last.

        Args:
            input: An update to start from (a new thread, or a finished thread's next
                turn); None: go on from the thread's latest checkpoint (after a crash, a
                pause or an ``interrupt``).
            thread_id: The thread (default: a new one).
            resume: The human's answer to the waiting ``interrupt()``.
            node: Which node's question ``resume`` answers, when several wait.
            metadata: Kept in the input checkpoint's metadata (e.g. the graph's file).

        Raises:
            NotFound: ``input`` None and no such thread.
            Conflict: An input for a thread that has not finished.
            InputError: A bad input, or a value that answers nothing.
            NodeError, InvalidUpdate, GraphRecursionError: The run failed (the thread keeps
                its last checkpoint and can be resumed).
        """
        if input is None and not thread_id:
            raise InputError("nothing to run: give an input, or the thread_id to resume")
        if input is not None and (resume is not NOTHING or node is not None):
            raise InputError("an input starts a run; resume= and node= answer a waiting one")
        thread = thread_id or new_id()
        run_id = new_id()
        span = start_span(f"invoke_agent {self.name}", {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.name,
            THREAD_ID: thread, RUN_ID: run_id,
        })  # fmt: skip
        cost, steps, failure = 0.0, 0, None
        try:
            if input is not None:
                latest = await self._start(thread, run_id, input, metadata or {})
            else:
                latest = await self._continue(thread, resume, node)
            while True:
                if latest.next and steps >= self.recursion_limit:
                    raise GraphRecursionError(
                        f"thread {thread!r} ran {steps} supersteps, its recursion_limit, with "
                        f"{latest.next} still to run; raise recursion_limit or check for a loop "
                        "that never reaches END (resume the thread to go on)"
                    )
                outcome = await self._superstep(latest, run_id, span) if latest.next else []
                if isinstance(outcome, list):
                    result = await self._result(latest, run_id, steps, cost, outcome)
                    break
                event, latest = outcome
                steps += 1
                cost += event.cost_usd
                yield event
        except BaseException as err:
            failure = err
            raise
        finally:
            span.set({STEP: steps, COST_USD: cost})
            span.end(failure if isinstance(failure, Exception) else None)
        # After the span's end: a consumer that stops at the result still sees it exported.
        yield result

    async def ainvoke(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        resume: Any = NOTHING,
        node: str | None = None,
    ) -> RunResult:
        """Runs until done or interrupted (see :meth:`astream`); returns the result."""
        result = None
        async for item in self.astream(input, thread_id=thread_id, resume=resume, node=node):
            result = item
        assert isinstance(result, RunResult)  # astream always ends with one
        return result

    async def aresume(
        self, thread_id: str, value: Any = NOTHING, *, node: str | None = None
    ) -> RunResult:
        """Goes on from the thread's latest checkpoint: after a crash, past a pause, or
        with ``value`` as the answer to the waiting ``interrupt()``."""
        return await self.ainvoke(None, thread_id=thread_id, resume=value, node=node)

    def invoke(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        resume: Any = NOTHING,
        node: str | None = None,
    ) -> RunResult:
        """:meth:`ainvoke` on its own event loop."""
        return _run_sync(self.ainvoke(input, thread_id=thread_id, resume=resume, node=node))

    def resume(self, thread_id: str, value: Any = NOTHING, *, node: str | None = None) -> RunResult:
        """:meth:`aresume` on its own event loop."""
        return _run_sync(self.aresume(thread_id, value, node=node))

    def stream(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        resume: Any = NOTHING,
        node: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Iterator[StepEvent | RunResult]:
        """:meth:`astream` on its own event loop, one superstep at a time."""
        _no_running_loop()
        loop = asyncio.new_event_loop()
        events = self.astream(
            input, thread_id=thread_id, resume=resume, node=node, metadata=metadata
        )
        try:
            while True:
                try:
                    yield loop.run_until_complete(anext(events))
                except StopAsyncIteration:
                    return
        finally:
            loop.run_until_complete(events.aclose())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _start(
        self, thread: str, run_id: str, input: Mapping[str, Any], metadata: Mapping[str, Any]
    ) -> Checkpoint:
        """Writes the input checkpoint: the input merged into a new or finished thread."""
        try:
            update = as_update("input", input)
            latest = await _io(self.checkpointer.latest, thread)
            if latest is not None and latest.next:
                raise Conflict(
                    f"thread {thread!r} has not finished (next: {', '.join(latest.next)}); "
                    "resume it, or fork it to start over from one of its checkpoints",
                    code="thread_not_finished",
                )
            base = latest.values if latest is not None else self.state.initial()
            values = self.state.merge(base, [("input", update)])
        except GraphError as err:
            raise InputError(str(err)) from err
        self.state.check_complete(values)
        nxt, waiting = await self._route([START], values, {}, -1)
        checkpoint = Checkpoint(
            thread, new_id(), latest.checkpoint_id if latest else "",
            latest.step + 1 if latest else -1, values, nxt, waiting,
            {**metadata, "source": "input", "run_id": run_id, "writes": {"input": update}},
            time.time(),
        )  # fmt: skip
        await _io(self.checkpointer.put, checkpoint)
        return checkpoint

    async def _continue(self, thread: str, resume: Any, node: str | None) -> Checkpoint:
        """The latest checkpoint, with the human's answer and the pauses' approval written."""
        latest = await _io(self.checkpointer.latest, thread)
        if latest is None:
            raise NotFound(f"no thread {thread!r} in the checkpoint store; start it with an input")
        writes = await _io(self.checkpointer.writes, thread, latest.checkpoint_id)
        waiting = pending_interrupts(writes)
        asks = [i for i in waiting if i.kind == "ask" and (node is None or i.node == node)]
        if resume is not NOTHING:
            if not asks:
                raise InputError(
                    f"thread {thread!r} has no question waiting for an answer"
                    + (f" from node {node!r}" if node else "")
                    + "; resume it without a value"
                )
            if len(asks) > 1:
                names = ", ".join(repr(i.node) for i in asks)
                raise InputError(f"nodes {names} of thread {thread!r} wait for answers; name one")
            ask = asks[0]
            await _io(self.checkpointer.put_write, PendingWrite(
                thread, latest.checkpoint_id, ask.node, RESUME, ask.index, resume
            ))  # fmt: skip
        elif asks:
            ask = asks[0]
            raise InputError(
                f"node {ask.node!r} of thread {thread!r} asks {ask.payload!r}; resume with a value"
            )
        for w in writes:
            if w.kind == PAUSE and not w.value.get("approved"):
                await _io(self.checkpointer.put_write, PendingWrite(
                    thread, latest.checkpoint_id, w.node, PAUSE, w.index, {"approved": True}
                ))  # fmt: skip
        return latest

    async def _superstep(
        self, start: Checkpoint, run_id: str, span: Span
    ) -> tuple[StepEvent, Checkpoint] | list[Interrupt]:
        """Runs the nodes ``start.next`` names and writes the checkpoint after them; or
        stops (pauses, questions) and returns why."""
        thread, step = start.thread_id, start.step + 1
        unknown = [n for n in start.next if n not in self.graph.nodes]
        if unknown:
            raise GraphError(
                f"thread {thread!r} runs {unknown[0]!r} next, which this graph has no node of "
                "(the graph changed since the thread ran?); resume it with the graph it ran"
            )
        writes = await _io(self.checkpointer.writes, thread, start.checkpoint_id)
        done = {w.node: w.value for w in writes if w.kind == UPDATE}
        after = [
            w.node for w in writes
            if w.kind == PAUSE and w.index == AFTER and not w.value.get("approved")
        ]  # fmt: skip
        if after:
            return [Interrupt(name, "after") for name in after]
        paused = {w.node for w in writes if w.kind == PAUSE and w.index == BEFORE}
        to_pause = [
            n for n in start.next if n in self.interrupt_before and n not in {*done, *paused}
        ]
        if to_pause:
            for name in to_pause:
                await _io(self.checkpointer.put_write, PendingWrite(
                    thread, start.checkpoint_id, name, PAUSE, BEFORE, {"approved": False}
                ))  # fmt: skip
            return [Interrupt(name, "before") for name in to_pause]
        answers: dict[str, dict[int, Any]] = {}
        for w in writes:
            if w.kind == RESUME:
                answers.setdefault(w.node, {})[w.index] = w.value
        todo = [n for n in start.next if n not in done]
        results = await asyncio.gather(
            *(self._node(start, name, step, run_id, span, answers.get(name, {})) for name in todo),
            return_exceptions=True,
        )
        asked: list[Interrupt] = []
        for name, result in zip(todo, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                raise result
            if isinstance(result, Interrupt):
                asked.append(result)
            else:
                done[name] = result
        if asked:
            return asked
        updates = [(name, done[name]["update"]) for name in start.next]
        values = self.state.merge(start.values, updates)
        nxt, waiting = await self._route(list(start.next), values, start.waiting, step)
        costs = {name: float(done[name].get("cost_usd", 0.0)) for name in start.next}
        checkpoint = Checkpoint(
            thread, new_id(), start.checkpoint_id, step, values, nxt, waiting,
            {"source": "loop", "run_id": run_id, "writes": dict(updates), "cost_usd": costs},
            time.time(),
        )  # fmt: skip
        await _io(self.checkpointer.put, checkpoint)
        if nxt:  # the next superstep stops at these until resumed
            for name in (n for n in start.next if n in self.interrupt_after):
                await _io(self.checkpointer.put_write, PendingWrite(
                    thread, checkpoint.checkpoint_id, name, PAUSE, AFTER, {"approved": False}
                ))  # fmt: skip
        event = StepEvent(
            thread, run_id, step, dict(updates), nxt, checkpoint.checkpoint_id, sum(costs.values())
        )
        return event, checkpoint

    async def _node(
        self, start: Checkpoint, name: str, step: int, run_id: str, parent: Span,
        answers: dict[int, Any],
    ) -> dict[str, Any] | Interrupt:  # fmt: skip
        """Runs one node; writes its update (or its question) against ``start``."""
        thread = start.thread_id
        node = self.graph.nodes[name]
        given = [answers[i] for i in range(len(answers)) if i in answers]
        ctx = NodeContext(name, step, thread, run_id, given)
        enter(ctx)
        span = start_span(
            f"node {name}", {THREAD_ID: thread, RUN_ID: run_id, STEP: step, NODE: name}, parent
        )
        failure: BaseException | None = None
        try:
            with span.current():
                result = await self._attempts(node, start.values, ctx, span)
            update = as_update(name, result)
            self.state.check_keys(name, update)  # before it is kept: a bad one is not resumed
        except GraphInterrupt as asked:
            span.set({"evermind.graph.interrupted": True})
            await _io(self.checkpointer.put_write, PendingWrite(
                thread, start.checkpoint_id, name, INTERRUPT, asked.index, asked.payload
            ))  # fmt: skip
            return Interrupt(name, "ask", asked.index, asked.payload)
        except GraphError as err:
            failure = err
            raise
        except Exception as err:
            failure = err
            raise NodeError(
                f"node {name!r} failed in step {step} of thread {thread!r}: "
                f"{type(err).__name__}: {err}",
                node=name, step=step,
            ) from err  # fmt: skip
        finally:
            span.set({COST_USD: ctx.cost_usd})
            span.end(failure)
        value = {"update": update, **ctx.usage()}
        await _io(self.checkpointer.put_write, PendingWrite(
            thread, start.checkpoint_id, name, UPDATE, 0, value
        ))  # fmt: skip
        return value

    async def _attempts(
        self, node: Node, values: dict[str, Any], ctx: NodeContext, span: Span
    ) -> Any:
        """The node's result, after up to ``node.retries`` retries of a raised exception
        (not a question, not a graph error), waiting ``retry_backoff_s`` doubling between."""
        for attempt in range(node.retries + 1):
            ctx.restart()
            span.set({"evermind.graph.attempts": attempt + 1})
            args = (self.state.view(values), ctx)[: 2 if node.takes_context else 1]
            try:
                if _is_async(node.fn):
                    return await node.fn(*args)
                result = await asyncio.to_thread(node.fn, *args)
                return await result if inspect.isawaitable(result) else result
            except (GraphInterrupt, GraphError):
                raise
            except Exception as err:
                if attempt == node.retries:
                    raise
                logger.warning("node %r failed (%s: %s); retrying", node.name,
                               type(err).__name__, err)  # fmt: skip
                await asyncio.sleep(node.retry_backoff_s * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _route(
        self, sources: list[str], values: dict[str, Any], waiting: dict[str, list[str]], step: int
    ) -> tuple[list[str], dict[str, list[str]]]:
        """The nodes the step after ``sources`` runs, and the join barriers after it."""
        nxt: list[str] = []
        barriers = {key: list(seen) for key, seen in waiting.items()}
        for source in sources:
            nxt += self.graph.edges.get(source, [])
            for branch in self.graph.branches.get(source, []):
                try:
                    picked = branch.router(self.state.view(values))
                    if inspect.isawaitable(picked):
                        picked = await picked
                    names = branch.resolve(picked)
                    unknown = [n for n in names if n != END and n not in self.graph.nodes]
                    if unknown:
                        raise GraphError(f"it returned {unknown[0]!r}, which is not a node")
                except Exception as err:
                    raise NodeError(
                        f"the router after {source!r} failed in step {step}: {err}",
                        node=source, step=step,
                    ) from err  # fmt: skip
                nxt += names
            for sources_of_join, target in self.graph.joins:
                if source in sources_of_join:
                    key = f"{'+'.join(sources_of_join)}->{target}"
                    seen = barriers.setdefault(key, [])
                    if source not in seen:
                        seen.append(source)
                    if set(seen) >= set(sources_of_join):
                        nxt.append(target)
                        del barriers[key]
        return list(dict.fromkeys(n for n in nxt if n != END)), barriers

    async def _result(
        self, latest: Checkpoint, run_id: str, steps: int, cost: float, waits: list[Interrupt]
    ) -> RunResult:
        history = await _io(self.checkpointer.history, latest.thread_id)
        return RunResult(
            latest.thread_id, run_id, "interrupted" if waits else "done", latest.values,
            list(latest.next), waits, latest.checkpoint_id, steps, cost,
            sum(step_cost(c) for c in history),
        )  # fmt: skip


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    )


async def _io(fn: Callable[..., T], *args: Any) -> T:
    """A checkpointer call in a worker thread (SQLite and Postgres block)."""
    return await asyncio.to_thread(fn, *args)


def _no_running_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise GraphError("the sync graph API was called inside an event loop; await ainvoke/aresume")


def _run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        _no_running_loop()
    except GraphError:
        coroutine.close()
        raise
    return asyncio.run(coroutine)
