"""Continuous batching of generations: one scheduler thread per served model (native-only).

Every generation request becomes a *sequence* in its model's :class:`_ModelLoop`. The loop
owns a :class:`~evermind.model.decode.Decoder` (numpy :class:`~evermind.model.cpu_decode.CpuDecoder`
by default; the runtime may pass another factory, e.g. the GPU one) and repeats:

1. drop the sequences whose client went away (``gone()`` said so, or the stream was closed);
2. admit waiting sequences into free decoder slots, round-robin over tenants (each tenant at
   most ``slots`` active at once), and prefill their prompts together (the parallel scan,
   at most :data:`PREFILL_TOKENS` prompt tokens per round so a long prompt cannot stall the
   batch for long); a short prompt joining a busy batch (:data:`FEED_TOKENS`,
   :data:`FEED_MIN_ACTIVE`) is fed through the batch's steps, one token a step, its rows not
   sampled until its last prompt token (from its first token, on a zero state, when the
   decoder is a :class:`~evermind.model.decode.ZeroStartDecoder` such as the numpy one;
   else prefilled with its first token);
3. advance every active sequence by one token with ONE batched ``Decoder.step``, then sample
   each row with its own request's settings and its own ``random.Random(seed)`` (the one
   sampler's batched form, :func:`evermind.model.sampling_rows.sample_rows`: the same draws
   as :func:`evermind.model.sampling.sample` in :meth:`evermind.model.inference.Model.stream`),
   and check each one's stop strings,
   end-of-text and ``max_tokens``; a finished sequence leaves the batch at once.

Text goes to each request through a bounded buffer with one event-loop wake-up per batch of
pieces (never a callback per token); a streaming reader that falls :data:`MAX_PENDING` pieces
behind is simply not stepped until it catches up (backpressure without holding up the others).

Fairness: each tenant may have ``slots`` sequences active and ``queue`` more waiting (429 with
Retry-After beyond), and all tenants together at most ``total_queue`` waiting; admission takes
one sequence per tenant in turn, so one tenant's burst cannot starve another.

Embeddings are batched across clients too (:class:`EmbeddingBatcher`): requests that arrive
while a model's embedding job runs are embedded together by its next job.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from evermind.auth import RateLimited
from evermind.errors import ConfigError
from evermind.model.cpu_decode import CpuDecoder
from evermind.model.decode import Decoder, ZeroStartDecoder
from evermind.model.inference import Model
from evermind.model.sampling_rows import sample_rows
from evermind.runtime.generation import GenerationRequest, GenerationResult
from evermind.runtime.ids import fresh_seed

__all__ = ["DecoderFactory", "EmbeddingBatcher", "Scheduler", "cpu_decoder"]

logger = logging.getLogger(__name__)

#: How often a non-streaming generation checks whether its client is still there, in seconds.
DISCONNECT_POLL_S = 0.25
#: Pieces a streaming generation may run ahead of its reader before it pauses.
MAX_PENDING = 64
#: Prompt tokens prefilled per scheduler round at most (a longer prompt still goes alone).
PREFILL_TOKENS = 2048
#: A prompt of at most this many tokens that joins a batch of at least :data:`FEED_MIN_ACTIVE`
#: running sequences is prefilled with its first token only and fed the rest as rows of the
#: batch's own steps (a row of a big step costs a fraction of a separate prefill's step).
FEED_TOKENS = 8
#: Running sequences a batch needs before prompts are fed through its steps.
FEED_MIN_ACTIVE = 4
#: Prompts of at most this many characters are tokenized on the event loop (nano model: ~5 us
#: for 20 characters, ~70 us for 240), longer ones on the worker pool; the hop to a worker
#: and back costs more than encoding a short prompt, in latency and in the GIL.
INLINE_PROMPT_CHARS = 256
#: A model's scheduler thread ends after this long with nothing to do (a new one starts on
#: the next request), so evicted models do not keep a thread and a decoder.
IDLE_S = 30.0

#: Builds the decoder of one served model: ``factory(model, slots)``.
DecoderFactory = Callable[[Model, int], Decoder]


def cpu_decoder(model: Model, slots: int) -> Decoder:
    """The default :data:`DecoderFactory`: numpy, on the model's :class:`CpuMamba`."""
    return CpuDecoder(model, slots)


class _Sink:
    """One request's bounded hand-over from the scheduler thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, streaming: bool) -> None:
        self.loop = loop
        self.streaming = streaming
        self.items: collections.deque[tuple[str, Any]] = collections.deque()
        self.ready = asyncio.Event()
        self.lock = threading.Lock()
        self.woken = False

    def full(self) -> bool:
        return len(self.items) >= MAX_PENDING

    def put(self, kind: str, value: Any = None) -> None:
        """Scheduler thread: queue an item; wakes the reader once per batch. Never blocks."""
        with self.lock:
            self.items.append((kind, value))
            wake, self.woken = not self.woken, True
        if wake:
            # RuntimeError: the event loop is closed, nobody reads any more.
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.ready.set)

    async def take(self, timeout: float | None = None) -> list[tuple[str, Any]] | None:
        """Event loop: everything queued since the last take (None on timeout)."""
        if self.ready.is_set():
            pass
        elif timeout is None:
            await self.ready.wait()
        else:  # asyncio.timeout: no wrapper task per wait, as wait_for makes (Python 3.11)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.ready.wait()
            if not self.ready.is_set():
                return None
        self.ready.clear()
        with self.lock:
            batch = list(self.items)
            self.items.clear()
            self.woken = False
        return batch


@dataclass(eq=False)
class _Sequence:
    """One generation in the batch (fields after ``sink`` belong to the scheduler thread)."""

    request: GenerationRequest
    result: GenerationResult
    tenant: str
    ids: list[int]
    sink: _Sink
    cancelled: threading.Event = field(default_factory=threading.Event)
    slot: int = -1
    next_token: int | None = None
    rng: random.Random | None = None  # the request's Random(seed), made with the sequence
    text: Any = None  # the tokenizer's stream decoder
    pending: str = ""  # text held back while it could still become a stop string
    leading: bool = False
    stops: list[str] = field(default_factory=list)
    finished: bool = False
    prompting: bool = False  # next_token is a prompt token: no sampling after it unless last
    feed: list[int] = field(default_factory=list)  # prompt tokens still to feed after it


class _ModelLoop:
    """The scheduler thread of one served model and its decoder."""

    def __init__(self, owner: Scheduler, model: Model) -> None:
        self.owner = owner
        self.model = model
        self.cond = threading.Condition()
        self.waiting: dict[str, collections.deque[_Sequence]] = {}
        self.turns: collections.deque[str] = collections.deque()  # round-robin tenant order
        self.active: dict[int, _Sequence] = {}
        self.retired = False
        self.decoder: Decoder | None = None
        self.zero_start = False  # the decoder is a ZeroStartDecoder (set when it is built)
        self.thread = threading.Thread(
            target=self._run, name=f"evermind-scheduler-{model.name}", daemon=True
        )
        self.thread.start()

    # ---- event-loop side ---------------------------------------------------------------------

    def add(self, seq: _Sequence) -> bool:
        """Queues ``seq``; False when this loop has retired (make a new one)."""
        with self.cond:
            if self.retired:
                return False
            line = self.waiting.setdefault(seq.tenant, collections.deque())
            if not line and seq.tenant not in self.turns:
                self.turns.append(seq.tenant)
            line.append(seq)
            self.cond.notify()
        return True

    def wake(self) -> None:
        with self.cond:
            self.cond.notify()

    # ---- scheduler thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self.cond:
                if not self.active and not self.waiting:
                    self.cond.wait_for(lambda: bool(self.waiting), IDLE_S)
                    if not self.waiting:
                        self.retired = True
                        self.owner._retire(self)
                        return
            try:
                with self.cond:
                    newcomers = self._admit()
                self._drop_cancelled()
                if newcomers:
                    self._prefill(newcomers)
                if not self._step() and not newcomers:
                    with self.cond:  # readers behind, or waiting tenants at their cap
                        self.cond.wait(0.01)
            except Exception as err:  # a decoder failure ends every sequence in the batch
                logger.exception("scheduler of %s: decoding failed", self.model.name)
                unbuilt = self.decoder is None
                for seq in list(self.active.values()):
                    self._finish(seq, None, error=err)
                self.active.clear()
                self.decoder = None
                if not unbuilt:
                    continue
                with self.cond:  # the decoder cannot be built: fail the waiting too
                    for line in self.waiting.values():
                        for seq in line:
                            self._finish(seq, None, active=False, error=err)
                    self.waiting.clear()
                    self.turns.clear()

    def _admit(self) -> list[_Sequence]:
        """Under the lock: waiting sequences that get a slot now, one per tenant in turn."""
        if self.decoder is None:
            self.decoder = self.owner.decoder_factory(self.model, self.owner.batch_slots)
            # Checked once: isinstance against a runtime-checkable protocol costs ~10 us.
            self.zero_start = isinstance(self.decoder, ZeroStartDecoder)
        free = [s for s in range(self.decoder.slots) if s not in self.active]
        taken: list[_Sequence] = []
        budget = PREFILL_TOKENS
        blocked = 0  # tenants passed over in a row (at their active cap)
        while free and self.turns and blocked < len(self.turns):
            tenant = self.turns.popleft()
            line = self.waiting.get(tenant)
            while line and line[0].cancelled.is_set():
                self._finish(line.popleft(), "cancelled", active=False)
            if not line:
                self.waiting.pop(tenant, None)
                continue
            if taken and len(line[0].ids) > budget:
                self.turns.appendleft(tenant)  # its turn stays: next round
                break
            if not self.owner._activate(tenant):
                self.turns.append(tenant)
                blocked += 1
                continue
            blocked = 0
            seq = line.popleft()
            if line:
                self.turns.append(tenant)
            else:
                self.waiting.pop(tenant, None)
            seq.slot = free.pop(0)
            self.active[seq.slot] = seq
            budget -= len(seq.ids)
            taken.append(seq)
        return taken

    def _drop_cancelled(self) -> None:
        for seq in list(self.active.values()):
            if seq.cancelled.is_set():
                self._finish(seq, "cancelled")
        with self.cond:
            for tenant, line in list(self.waiting.items()):
                for seq in [s for s in line if s.cancelled.is_set()]:
                    line.remove(seq)
                    self._finish(seq, "cancelled", active=False)
                if not line:
                    self.waiting.pop(tenant, None)

    def _prefill(self, newcomers: list[_Sequence]) -> None:
        decoder = self.decoder
        assert decoder is not None
        running = len(self.active) - len(newcomers)
        # A decoder that can zero a slot feeds a short prompt from its first token on (a
        # one-token prompt too): no separate prefill call, whose step of one row costs ~4-5
        # rows of a 32-row step (numpy, nano model: 0.31 ms against 2.2 ms for 32 rows).
        zero_start = self.zero_start
        shortest = 1 if zero_start else 2
        fed = [
            s
            for s in newcomers
            if running >= FEED_MIN_ACTIVE and shortest <= len(s.ids) <= FEED_TOKENS
        ]
        if fed and zero_start:
            cast(ZeroStartDecoder, decoder).reset([s.slot for s in fed])
        skip = 0 if zero_start else 1  # tokens of a fed prompt that the prefill takes
        for seq in fed:  # the (rest of the) prompt goes through the batch's next steps
            seq.prompting, seq.next_token, seq.feed = True, seq.ids[skip], seq.ids[skip + 1 :]
        whole = [s for s in newcomers if s not in fed]
        prefilled = whole if zero_start else newcomers
        if not prefilled:
            return
        logits = decoder.prefill(
            [s.slot for s in prefilled], [s.ids[:1] if s in fed else s.ids for s in prefilled]
        )
        done = [i for i, s in enumerate(prefilled) if s not in fed]
        if done:
            for seq, token in zip(whole, _next_tokens(logits[done], whole), strict=True):
                self._advance(seq, token)

    def _step(self) -> bool:
        """One batched step of every sequence that can go on; False if none could."""
        ready = [
            s
            for s in self.active.values()
            if s.next_token is not None and not s.cancelled.is_set() and not s.sink.full()
        ]
        if not ready:
            return False
        ready.sort(key=lambda s: s.slot)  # ascending slots: often one run, stepped in place
        assert self.decoder is not None
        logits = self.decoder.step([s.slot for s in ready], [int(s.next_token or 0) for s in ready])
        sampled = []
        for row, seq in enumerate(ready):
            if seq.prompting and seq.feed:  # a prompt token went in; the next one follows
                seq.next_token = seq.feed.pop(0)
            else:  # a generated token, or the prompt's last: this row is sampled
                seq.prompting = False
                sampled.append(row)
        if sampled:
            seqs = [ready[row] for row in sampled]
            rows = logits if len(sampled) == len(ready) else logits[sampled]  # no copy: all
            for seq, token in zip(seqs, _next_tokens(rows, seqs), strict=True):
                self._advance(seq, token)
        return True

    def _advance(self, seq: _Sequence, token: int) -> None:
        """Takes ``seq``'s sampled next token: :meth:`Model.stream`'s loop, one turn."""
        request, result = seq.request, seq.result
        seq.next_token = None
        result.completion_tokens += 1
        if token == self.model.tokenizer.eos_id:
            self._finish(seq, "stop", flush=True)
            return
        seq.pending += seq.text.feed(token)
        stops = seq.stops
        if stops:
            hit = min((seq.pending.find(s) for s in stops if s in seq.pending), default=-1)
            if hit >= 0:
                self._emit(seq, seq.pending[:hit])
                seq.pending = ""
                self._finish(seq, "stop")
                return
            keep = max(len(s) for s in stops) - 1
            if len(seq.pending) > keep:
                cut = len(seq.pending) - keep
                self._emit(seq, seq.pending[:cut])
                seq.pending = seq.pending[cut:]
        elif seq.pending:
            self._emit(seq, seq.pending)
            seq.pending = ""
        if result.completion_tokens >= request.max_tokens:
            self._finish(seq, "length", flush=True)
            return
        seq.next_token = token

    def _emit(self, seq: _Sequence, piece: str) -> None:
        if seq.leading:
            piece = piece.lstrip()
            if not piece:
                return
            seq.leading = False
        if not piece:
            return
        seq.result.text += piece
        if seq.sink.streaming:
            seq.sink.put("piece", piece)

    def _finish(
        self,
        seq: _Sequence,
        reason: str | None,
        flush: bool = False,
        active: bool = True,
        error: BaseException | None = None,
    ) -> None:
        if seq.finished:
            return
        seq.finished = True
        if flush:
            self._emit(seq, seq.pending + seq.text.flush())
            seq.pending = ""
        if reason is not None:
            seq.result.finish_reason = reason
        if active and self.active.get(seq.slot) is seq:
            del self.active[seq.slot]
            if self.decoder is not None and error is None:
                self.decoder.release(seq.slot)
        self.owner._done(seq.tenant, was_active=active)
        seq.sink.put("error" if error is not None else "done", error)


def _next_tokens(logits: Any, seqs: Sequence[_Sequence]) -> list[int]:
    """Each row's next token, drawn with its own request's settings and ``random.Random``:
    :func:`~evermind.model.sampling_rows.sample_rows`, the same draws as the one sampler
    :func:`~evermind.model.sampling.sample` (what :meth:`Model.stream` uses) row by row."""
    return sample_rows(
        logits,
        [s.request.temperature for s in seqs],
        [s.request.top_k for s in seqs],
        [s.request.top_p for s in seqs],
        [s.rng or random.Random() for s in seqs],
    )


class Scheduler:
    """Batches every generation of the runtime through one scheduler thread per model.

    The public API of the thread-pool ``Generator`` it replaces: :meth:`admit`,
    :meth:`running`, :meth:`complete`, :meth:`stream`.

    Args:
        executor: The worker pool (prompt tokenization runs there).
        slots: Sequences one tenant may have active (in the batch) at once.
        queue: Sequences one tenant may have waiting beyond those (429 beyond).
        batch_slots: Decoder slots per model: sequences decoded together.
        total_queue: Sequences all tenants together may have waiting (429 beyond).
        decoder_factory: Builds each model's decoder (default numpy :func:`cpu_decoder`).
    """

    def __init__(
        self,
        executor: Executor,
        slots: int = 24,
        queue: int = 16,
        batch_slots: int = 32,
        total_queue: int = 1024,
        decoder_factory: DecoderFactory | None = None,
    ) -> None:
        self._executor = executor
        self._slots = slots
        self._queue = queue
        self.batch_slots = batch_slots
        self._total_queue = total_queue
        self.decoder_factory: DecoderFactory = decoder_factory or cpu_decoder
        self._lock = threading.Lock()
        self._lined: dict[str, int] = {}  # active + waiting, per tenant
        self._active: dict[str, int] = {}
        self._waiting_total = 0
        self._loops: dict[int, _ModelLoop] = {}
        #: The embedding requests' batcher (same pool).
        self.embeddings = EmbeddingBatcher(executor)

    # ---- accounting (any thread) -------------------------------------------------------------

    def running(self, tenant: str) -> int:
        """Sequences of ``tenant`` in a batch now."""
        return self._active.get(tenant, 0)

    def admit(self, tenant: str) -> None:
        """Raises now if ``tenant``'s line (or the whole queue) is full.

        Raises:
            RateLimited: ``slots`` active and ``queue`` waiting, or ``total_queue`` waiting.
        """
        with self._lock:
            self._check(tenant)

    def _check(self, tenant: str) -> None:
        if self._lined.get(tenant, 0) >= self._slots + self._queue:
            raise RateLimited(
                f"tenant {tenant!r} has {self._slots} generations running and {self._queue} "
                "waiting; hint: wait for some to finish, or stream and close abandoned ones",
                1,
            )
        if self._waiting_total >= self._total_queue:
            raise RateLimited(
                f"{self._total_queue} generations are waiting on this server; hint: retry soon",
                1,
            )

    def _enter(self, tenant: str) -> None:
        with self._lock:
            self._check(tenant)
            self._lined[tenant] = self._lined.get(tenant, 0) + 1
            self._waiting_total += 1

    def _activate(self, tenant: str) -> bool:
        """Scheduler thread: takes one of ``tenant``'s active places if it has one free."""
        with self._lock:
            if self._active.get(tenant, 0) >= self._slots:
                return False
            self._active[tenant] = self._active.get(tenant, 0) + 1
            self._waiting_total -= 1
            return True

    def _done(self, tenant: str, was_active: bool) -> None:
        with self._lock:
            if was_active:
                self._active[tenant] -= 1
                if not self._active[tenant]:
                    del self._active[tenant]
            else:
                self._waiting_total -= 1
            self._lined[tenant] -= 1
            if not self._lined[tenant]:
                del self._lined[tenant]  # idle tenants hold nothing

    def _retire(self, loop: _ModelLoop) -> None:
        with self._lock:
            if self._loops.get(id(loop.model)) is loop:
                del self._loops[id(loop.model)]

    # ---- requests (event loop) ---------------------------------------------------------------

    async def _start(
        self, model: Model, request: GenerationRequest, result: GenerationResult, tenant: str,
        streaming: bool,
    ) -> _Sequence:  # fmt: skip
        if request.max_tokens < 0:
            raise ConfigError(f"max_new_tokens must be >= 0, got {request.max_tokens}")
        top_p = request.top_p
        if request.temperature < 0 or (top_p is not None and not 0 < top_p <= 1):
            raise ConfigError(
                f"temperature must be >= 0 and top_p in (0, 1]; got {request.temperature}, {top_p}"
            )
        self._enter(tenant)
        loop = asyncio.get_running_loop()
        try:
            if len(request.prompt) <= INLINE_PROMPT_CHARS:  # microseconds: no thread hop
                ids = model._prompt_ids(request.prompt)
            else:
                ids = await loop.run_in_executor(self._executor, model._prompt_ids, request.prompt)
        except BaseException:
            self._done(tenant, was_active=False)
            raise
        result.prompt_tokens = len(ids)
        # One Random per request; an unseeded one gets its seed from evermind.runtime.ids (an
        # unseeded Random() would read os.urandom, letting go of the GIL on the event loop).
        seq = _Sequence(request, result, tenant, ids, _Sink(loop, streaming))
        seq.rng = random.Random(fresh_seed() if request.seed is None else request.seed)
        seq.text = model.tokenizer.stream_decoder()
        seq.leading = request.strip_leading
        seq.stops = [s for s in request.stop if s]
        if request.max_tokens == 0:  # nothing to decode
            self._done(tenant, was_active=False)
            seq.sink.put("done")
            return seq
        while True:
            with self._lock:
                runner = self._loops.get(id(model))
                if runner is None:
                    runner = self._loops[id(model)] = _ModelLoop(self, model)
            if runner.add(seq):
                return seq
            self._retire(runner)  # it ended just now: the next turn makes a new one

    @staticmethod
    def _cancel(seq: _Sequence) -> None:
        if not seq.cancelled.is_set():
            seq.cancelled.set()

    async def complete(
        self,
        model: Model,
        request: GenerationRequest,
        tenant: str = "default",
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> GenerationResult:
        """Generates the whole reply in the batch.

        Args:
            gone: Says whether the client disconnected; polled while generating, and a
                True drops the sequence from the batch (the result is then partial).
        """
        result = GenerationResult()
        seq = await self._start(model, request, result, tenant, streaming=False)
        try:
            while True:
                batch = await seq.sink.take(DISCONNECT_POLL_S if gone is not None else None)
                if batch is None:
                    if gone is not None and await gone():
                        self._cancel(seq)
                        self._wake(model)
                        result.finish_reason = "cancelled"  # nobody reads it
                        return result
                    continue
                for kind, value in batch:
                    if kind == "error":
                        raise value
                    if kind == "done":
                        return result
        finally:
            self._cancel(seq)

    async def stream(
        self,
        model: Model,
        request: GenerationRequest,
        result: GenerationResult,
        tenant: str = "default",
    ) -> AsyncGenerator[str, None]:
        """Yields text pieces as the batch produces them; fills ``result`` at the end.

        Closing the iterator early (the client went away) drops the sequence from the batch
        before its next step. Pieces that piled up go out as one chunk.
        """
        seq = await self._start(model, request, result, tenant, streaming=True)
        try:
            finished = False
            while not finished:
                batch = await seq.sink.take()
                assert batch is not None
                text = []
                for kind, value in batch:
                    if kind == "piece":
                        text.append(value)
                    elif kind == "error":
                        if text:
                            yield "".join(text)
                        raise value
                    else:
                        finished = True
                if text:
                    yield "".join(text)
        finally:
            if not seq.cancelled.is_set():
                self._cancel(seq)
                self._wake(model)

    def _wake(self, model: Model) -> None:
        runner = self._loops.get(id(model))
        if runner is not None:
            runner.wake()


#: Most texts one batched embedding job takes (requests beyond wait for the next job).
EMBED_BATCH_TEXTS = 256
#: Rows per forward pass inside one embedding job.
EMBED_FORWARD_ROWS = 64
#: How long a job waits for more requests while a model's embeddings are contended, seconds.
EMBED_GATHER_S = 0.004
#: Weight of the latest arrival in a model's contention average (see :class:`EmbeddingBatcher`).
EMBED_CONTENTION_WEIGHT = 0.25


@dataclass(eq=False)
class _EmbedLine:
    """The embedding requests of one model waiting for its next job."""

    model: Model
    pending: collections.deque[tuple[list[str], asyncio.Future[Any]]] = field(
        default_factory=collections.deque
    )
    task: asyncio.Task[None] | None = None


class EmbeddingBatcher:
    """Embeds the ``/v1/embeddings`` requests of all clients in shared batches per model.

    The requests that arrive while a model's job runs are embedded together by its next one
    (up to :data:`EMBED_BATCH_TEXTS` texts); the jobs run on the worker pool, one per model at
    a time. A request that finds its model idle starts a job at once, unless the model is
    *contended*: most recent requests found a job running or requests waiting (a running
    average, :data:`EMBED_CONTENTION_WEIGHT`). Then a job that would take a single request
    first waits :data:`EMBED_GATHER_S` for the requests still on their way through the HTTP
    stack, which would otherwise each start a job of their own one after another. A lone
    client never finds its model busy (its previous request has been answered), so it never
    waits.

    Args:
        executor: The worker pool.
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._lines: dict[int, _EmbedLine] = {}
        self._contention: dict[int, float] = {}  # per model id: the running average
        #: Jobs run and texts embedded, for the tests and metrics.
        self.jobs = 0
        self.texts = 0

    async def embed(self, model: Model, texts: list[str]) -> tuple[np.ndarray, int]:
        """``model.embed(texts)`` and the tokens it read, computed in a shared batch."""
        loop = asyncio.get_running_loop()
        line = self._lines.get(id(model))
        busy = line is not None
        if line is None:
            line = self._lines[id(model)] = _EmbedLine(model)
        seen = self._contention.get(id(model), 0.0)
        self._contention[id(model)] = seen + EMBED_CONTENTION_WEIGHT * (float(busy) - seen)
        future: asyncio.Future[Any] = loop.create_future()
        line.pending.append((list(texts), future))
        if line.task is None:
            line.task = loop.create_task(self._drain(line))
        vectors, tokens = await future
        return vectors, tokens

    def contended(self, model: Model) -> bool:
        """Whether ``model``'s jobs wait :data:`EMBED_GATHER_S` for more requests now."""
        return self._contention.get(id(model), 0.0) > 0.5

    async def _drain(self, line: _EmbedLine) -> None:
        loop = asyncio.get_running_loop()
        try:
            while line.pending:
                if len(line.pending) == 1 and self.contended(line.model):
                    await asyncio.sleep(EMBED_GATHER_S)  # (more waiting: no need to)
                batch: list[tuple[list[str], asyncio.Future[Any]]] = []
                count = 0
                while line.pending and (
                    not batch or count + len(line.pending[0][0]) <= EMBED_BATCH_TEXTS
                ):
                    texts, future = line.pending.popleft()
                    if future.done():  # its client went away
                        continue
                    batch.append((texts, future))
                    count += len(texts)
                if not batch:
                    continue
                every = [text for texts, _ in batch for text in texts]
                try:
                    vectors, tokens = await loop.run_in_executor(
                        self._executor, _embed_batch, line.model, every
                    )
                except Exception as err:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(err)
                    continue
                self.jobs += 1
                self.texts += len(every)
                start = 0
                for texts, future in batch:
                    end = start + len(texts)
                    if not future.done():
                        future.set_result((vectors[start:end], sum(tokens[start:end])))
                    start = end
        finally:
            line.task = None
            if not line.pending and self._lines.get(id(line.model)) is line:
                del self._lines[id(line.model)]


def _embed_batch(model: Model, texts: list[str]) -> tuple[np.ndarray, list[int]]:
    """``model.embed(texts)`` (rows of up to :data:`EMBED_FORWARD_ROWS` per forward) and the
    tokens each text's embedding read."""
    return model.embed_counted(texts, EMBED_FORWARD_ROWS)
