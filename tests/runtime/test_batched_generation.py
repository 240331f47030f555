"""Batched generation through the real runtime on loopback: concurrent clients get exactly the
text they get alone (and what the unbatched ``Model.complete`` gives), greedy and seeded
sampling, mixed prompt lengths, a stop string hit by one sequence only, a cancellation in the
middle of a batch, and 429 when a tenant's line is full.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import evermind
from evermind.model.cpu_decode import CpuDecoder
from evermind.model.decode import ZeroStartDecoder
from evermind.model.inference import Model
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.generation import GenerationRequest
from evermind.runtime.scheduler import FEED_MIN_ACTIVE, FEED_TOKENS, EmbeddingBatcher, Scheduler
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_B, assert_error, bearer, write_tokens

PACKAGE = tiny_package("batched", "1.0.0", steps=40, d_model=32, n_layer=2)
MODEL = "evermind/batched"

#: Mixed prompt lengths and settings: greedy, seeded sampling with and without top-k / top-p.
REQUESTS: list[dict[str, Any]] = [
    {"prompt": "The", "max_tokens": 24, "temperature": 0.0},
    {"prompt": "Memories are recalled by meaning and words", "max_tokens": 16,
     "temperature": 0.0},
    {"prompt": "a", "max_tokens": 30, "temperature": 0.9, "seed": 3},
    {"prompt": "The standard library has many modules for text", "max_tokens": 20,
     "temperature": 1.0, "seed": 17, "top_k": 20},
    {"prompt": "Caches save repeated work", "max_tokens": 12, "temperature": 0.7,
     "seed": 5, "top_p": 0.9},
    {"prompt": "The", "max_tokens": 28, "temperature": 1.2, "seed": 99, "top_k": 40,
     "top_p": 0.95},
    {"prompt": "numbers and words", "max_tokens": 8, "temperature": 0.0},
    {"prompt": "x y z", "max_tokens": 18, "temperature": 1.0, "seed": 12345},
]  # fmt: skip


def _with(server: ServerThread, token: str = TOKEN_A) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=bearer(token), timeout=60)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root: Path = tmp_path_factory.mktemp("batched")
    config = RuntimeConfig(
        data_dir=root / "data", port=0, tokens_file=write_tokens(root / "tokens"),
        rate_limit=0, worker_threads=4, batch_slots=8,
    )  # fmt: skip
    with ServerThread(config) as server:
        with _with(server) as client:
            assert client.post("/v1/models", content=PACKAGE).status_code in (200, 201)
        yield server


@pytest.fixture(scope="module")
def model() -> Model:
    return evermind.load(PACKAGE)


def _complete(server: ServerThread, body: dict[str, Any], token: str = TOKEN_A) -> dict[str, Any]:
    with _with(server, token) as client:
        response = client.post("/v1/completions", json={"model": MODEL, **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


def _together(server: ServerThread, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sends every body at once (one thread each, released together)."""
    out: list[dict[str, Any]] = [{} for _ in bodies]
    gate = threading.Barrier(len(bodies))

    def send(i: int) -> None:
        gate.wait()
        out[i] = _complete(server, bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return out


def _answer(reply: dict[str, Any]) -> tuple[str, str, dict[str, int]]:
    choice = reply["choices"][0]
    return choice["text"], choice["finish_reason"], reply["usage"]


def test_concurrent_completions_equal_one_at_a_time_and_unbatched(
    served: ServerThread, model: Model
) -> None:
    alone = [_answer(_complete(served, body)) for body in REQUESTS]
    together = [_answer(reply) for reply in _together(served, REQUESTS * 2)]  # 16 > 8 slots
    assert together == alone * 2
    for body, (text, finish, usage) in zip(REQUESTS, alone, strict=True):
        reference = model.complete(
            body["prompt"], max_new_tokens=body["max_tokens"], temperature=body["temperature"],
            top_k=body.get("top_k"), top_p=body.get("top_p"), seed=body.get("seed"),
        )  # fmt: skip
        assert text == reference.text, body
        assert finish == reference.finish_reason
        assert usage["prompt_tokens"] == reference.prompt_tokens
        assert usage["completion_tokens"] == reference.completion_tokens


def test_streams_in_a_batch_equal_their_replies_alone(served: ServerThread) -> None:
    alone = [_answer(_complete(served, body))[0] for body in REQUESTS]
    texts = ["" for _ in REQUESTS]
    gate = threading.Barrier(len(REQUESTS))

    def read(i: int) -> None:
        body = {"model": MODEL, **REQUESTS[i], "stream": True}
        gate.wait()
        with (
            _with(served) as client,
            client.stream("POST", "/v1/completions", json=body) as response,
        ):
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    texts[i] += json.loads(line[6:])["choices"][0]["text"]

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(REQUESTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert texts == alone


def test_a_stop_string_hit_by_one_sequence_only_stops_that_one(served: ServerThread) -> None:
    plain = [_answer(_complete(served, body))[0] for body in REQUESTS[:4]]
    target = next(i for i, text in enumerate(plain) if len(text) > 8)
    others = [t for i, t in enumerate(plain) if i != target]
    pieces = [plain[target][s : s + 3] for s in range(3, len(plain[target]) - 3)]
    stop = next(p for p in pieces if p.strip() and not any(p in o for o in others))
    bodies = [dict(body) for body in REQUESTS[:4]]
    bodies[target]["stop"] = [stop]
    replies = [_answer(reply) for reply in _together(served, bodies)]
    cut = plain[target].index(stop)
    assert replies[target][0] == plain[target][:cut] and replies[target][1] == "stop"
    for i, (text, _, _) in enumerate(replies):
        if i != target:
            assert text == plain[i]


def test_chat_replies_in_a_batch_equal_alone(served: ServerThread) -> None:
    bodies = [
        {"model": MODEL, "messages": [{"role": "user", "content": p["prompt"]}],
         "max_tokens": 12, "temperature": 0.8, "seed": i}
        for i, p in enumerate(REQUESTS[:5])
    ]  # fmt: skip

    def chat(body: dict[str, Any]) -> str:
        with _with(served) as client:
            reply = client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["choices"][0]["message"]["content"])

    alone = [chat(b) for b in bodies]
    together = ["" for _ in bodies]
    threads = [
        threading.Thread(target=lambda i=i: together.__setitem__(i, chat(bodies[i])))
        for i in range(len(bodies))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert together == alone


def test_a_cancelled_stream_leaves_its_batch_mates_intact(served: ServerThread) -> None:
    long = {"model": MODEL, "prompt": "The", "max_tokens": 100_000 // 100, "temperature": 0.0,
            "stream": True}  # fmt: skip
    mates = REQUESTS[2:6]
    alone = [_answer(_complete(served, body))[0] for body in mates]
    got = ["" for _ in mates]
    started = threading.Event()

    def abandon() -> None:
        with (
            _with(served) as client,
            client.stream("POST", "/v1/completions", json=long) as response,
        ):
            for _ in response.iter_bytes():
                started.set()
                return  # closes the stream mid-generation

    def mate(i: int) -> None:
        started.wait(30)
        got[i] = _answer(_complete(served, mates[i]))[0]

    threads = [threading.Thread(target=abandon)] + [
        threading.Thread(target=mate, args=(i,)) for i in range(len(mates))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert got == alone


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root: Path = tmp_path_factory.mktemp("narrow")
    config = RuntimeConfig(
        data_dir=root / "data", port=0, tokens_file=write_tokens(root / "tokens"),
        rate_limit=0, worker_threads=4, batch_slots=4, tenant_generations=1, tenant_queue=1,
        max_tokens_cap=300_000,
    )  # fmt: skip
    with ServerThread(config) as server:
        for token in (TOKEN_A, TOKEN_B):
            with _with(server, token) as client:
                assert client.post("/v1/models", content=PACKAGE).status_code in (200, 201)
        yield server


def test_a_full_line_answers_429_and_other_tenants_go_on(narrow: ServerThread) -> None:
    body = {"model": MODEL, "prompt": "The", "max_tokens": 300_000, "temperature": 0.0,
            "stream": True}  # fmt: skip
    holding = threading.Barrier(3)
    release = threading.Event()

    def hold() -> None:
        with (
            _with(narrow) as client,
            client.stream("POST", "/v1/completions", json=body) as response,
        ):
            assert response.status_code == 200
            holding.wait(30)
            release.wait(60)  # stops reading: the stream pauses (backpressure), then closes

    holders = [threading.Thread(target=hold) for _ in range(2)]  # one active + one waiting
    for thread in holders:
        thread.start()
    try:
        holding.wait(30)
        with _with(narrow) as client:
            refused = client.post("/v1/completions", json={**body, "stream": False})
            assert_error(refused, 429, "rate_limited")
            assert refused.headers["Retry-After"] == "1"
        start = time.perf_counter()
        # Greedy: a sampled reply could end at an end-of-text token before 4 (seen in CI).
        reply = _complete(narrow, {"prompt": "The", "max_tokens": 4, "temperature": 0.0}, TOKEN_B)
        assert reply["usage"]["completion_tokens"] == 4
        assert time.perf_counter() - start < 30
    finally:
        release.set()
        for thread in holders:
            thread.join(timeout=60)
    # Closed streams leave the line at once: alpha is admitted again.
    deadline = time.monotonic() + 10
    while True:
        with _with(narrow) as client:
            again = client.post("/v1/completions", json={"model": MODEL, "prompt": "a",
                                                         "max_tokens": 2})  # fmt: skip
        if again.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert again.status_code == 200, again.text


# ---- the scheduler and the embedding batcher on their own (no HTTP) -----------------------


class Recording:
    """A CpuDecoder that records the batch of every step and the prompts it prefilled."""

    def __init__(
        self, model: Model, slots: int, gate: threading.Event | None = None, every: bool = False
    ) -> None:
        self.inner = CpuDecoder(model, slots)
        self.slots, self.vocab_size = slots, self.inner.vocab_size
        self.steps: list[int] = []
        self.prefilled: list[list[int]] = []
        # When given, a step of a full batch (every slot taken) waits for it: a test decides
        # when the sequences holding all the slots go on. With ``every``, every step waits.
        self.gate, self.every = gate, every

    def prefill(self, slots: Any, prompts: Any) -> Any:
        self.prefilled += [list(p) for p in prompts]
        return self.inner.prefill(slots, prompts)

    def step(self, slots: Any, tokens: Any) -> Any:
        held = self.every or len(slots) == self.slots
        if self.gate is not None and held and not self.gate.wait(timeout=60):
            raise TimeoutError("the test never opened the step gate")
        self.steps.append(len(slots))
        return self.inner.step(slots, tokens)

    def release(self, slot: int) -> None:
        self.inner.release(slot)


class ZeroStartRecording(Recording):
    """A :class:`Recording` that can also start slots from a zero state (``reset``)."""

    def __init__(self, model: Model, slots: int, gate: Any = None, every: bool = False) -> None:
        super().__init__(model, slots, gate, every)
        self.reset_slots: list[int] = []

    def reset(self, slots: Any) -> None:
        self.reset_slots += list(slots)
        self.inner.reset(slots)


def _scheduler(
    gate: threading.Event | None = None,
    every: bool = False,
    recording: type[Recording] = Recording,
    **options: Any,
) -> tuple[Scheduler, list[Recording]]:
    made: list[Recording] = []

    def factory(model: Model, slots: int) -> Recording:
        made.append(recording(model, slots, gate, every))
        return made[-1]

    return Scheduler(ThreadPoolExecutor(2), decoder_factory=factory, **options), made


def _request(body: dict[str, Any]) -> GenerationRequest:
    return GenerationRequest(
        prompt=body["prompt"], max_tokens=body["max_tokens"], temperature=body["temperature"],
        top_k=body.get("top_k"), top_p=body.get("top_p"), seed=body.get("seed"),
    )  # fmt: skip


async def _running_together(scheduler: Scheduler, tenant: str, n: int) -> None:
    """Waits until ``n`` of ``tenant``'s sequences run at once; fails (never hangs) after 30 s.

    The hogs a test starts are admitted one loop turn apart; one that finished before the last
    was admitted would leave this waiting for ever, so a test's hogs are long (a tiny model
    decodes ~2,400 tokens/s here).
    """
    deadline = time.monotonic() + 30
    while scheduler.running(tenant) < n:
        assert time.monotonic() < deadline, f"{n} sequences of {tenant!r} never ran together"
        await asyncio.sleep(0.002)


async def _lined_up(scheduler: Scheduler, model: Model, n: int) -> None:
    """Waits until ``n`` sequences are in ``model``'s loop, running or waiting; fails after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        loop = scheduler._loops.get(id(model))
        if loop is not None:
            with loop.cond:
                if len(loop.active) + sum(map(len, loop.waiting.values())) >= n:
                    return
        assert time.monotonic() < deadline, f"{n} sequences never lined up"
        await asyncio.sleep(0.002)


def test_the_scheduler_steps_concurrent_sequences_together(model: Model) -> None:
    # Every step waits on the gate until all eight requests are in the loop: the first one
    # admitted cannot decode (and finish) before the last arrives, however the machine is
    # loaded (CI: 7 of 8 together once, the shortest done before the last was tokenised).
    gate = threading.Event()
    scheduler, made = _scheduler(gate, every=True, batch_slots=8)

    async def run() -> tuple[list[str], list[str]]:
        gate.set()
        alone = [(await scheduler.complete(model, _request(b))).text for b in REQUESTS]
        gate.clear()
        jobs = [asyncio.ensure_future(scheduler.complete(model, _request(b))) for b in REQUESTS]
        await _lined_up(scheduler, model, len(REQUESTS))
        gate.set()
        together = await asyncio.gather(*jobs)
        return alone, [r.text for r in together]

    alone, together = asyncio.run(run())
    assert together == alone
    steps = [n for recording in made for n in recording.steps]
    assert max(steps) == len(REQUESTS)  # all eight in one step
    assert scheduler.running("default") == 0


def test_short_prompts_joining_a_busy_batch_are_fed_through_its_steps(model: Model) -> None:
    """With FEED_MIN_ACTIVE sequences running, a short prompt is prefilled with its first token
    only and fed the rest through the batch's steps; replies equal those of requests alone."""
    scheduler, made = _scheduler(batch_slots=16)
    # Long enough that the first hog cannot finish before the last is admitted (see below).
    hog = {"prompt": "The standard library", "max_tokens": 600, "temperature": 0.0}
    short = [r for r in REQUESTS if 1 < len(model._prompt_ids(r["prompt"])) <= FEED_TOKENS]
    assert len(short) >= 3, "needs short prompts of several tokens"

    async def run() -> tuple[list[str], list[str]]:
        alone = [(await scheduler.complete(model, _request(b))).text for b in short]
        hogs = [asyncio.ensure_future(scheduler.complete(model, _request(hog)))
                for _ in range(FEED_MIN_ACTIVE)]  # fmt: skip
        await _running_together(scheduler, "default", FEED_MIN_ACTIVE)
        fed = await asyncio.gather(*(scheduler.complete(model, _request(b)) for b in short))
        await asyncio.gather(*hogs)
        return alone, [r.text for r in fed]

    alone, fed = asyncio.run(run())
    assert fed == alone
    firsts = [model._prompt_ids(r["prompt"])[:1] for r in short]
    prefilled = made[0].prefilled  # alone: whole prompts; joining the busy batch: 1 token
    assert sum(p in firsts for p in prefilled) == len(short)
    assert all(model._prompt_ids(r["prompt"]) in prefilled for r in short)


def test_short_prompts_start_from_a_zero_state_with_a_zero_start_decoder(model: Model) -> None:
    """With a decoder that has ``reset`` (the numpy one), a short prompt joining a busy batch,
    one-token prompts included, is not prefilled at all: its slot is zeroed and every prompt
    token goes through the batch's steps; replies equal those of requests alone."""
    scheduler, made = _scheduler(batch_slots=16, recording=ZeroStartRecording)
    assert isinstance(CpuDecoder(model, 1), ZeroStartDecoder)
    hog = {"prompt": "The standard library", "max_tokens": 600, "temperature": 0.0}
    short = [r for r in REQUESTS if len(model._prompt_ids(r["prompt"])) <= FEED_TOKENS]
    assert any(len(model._prompt_ids(r["prompt"])) == 1 for r in short), "needs a 1-token one"

    async def run() -> tuple[list[str], list[str]]:
        alone = [(await scheduler.complete(model, _request(b))).text for b in short]
        hogs = [asyncio.ensure_future(scheduler.complete(model, _request(hog)))
                for _ in range(FEED_MIN_ACTIVE)]  # fmt: skip
        await _running_together(scheduler, "default", FEED_MIN_ACTIVE)
        before = len(made[0].prefilled)
        fed = await asyncio.gather(*(scheduler.complete(model, _request(b)) for b in short))
        hog_ids = model._prompt_ids(hog["prompt"])  # the last hog may be prefilled just now
        assert all(p == hog_ids for p in made[0].prefilled[before:]), "a short one prefilled"
        await asyncio.gather(*hogs)
        return alone, [r.text for r in fed]

    alone, fed = asyncio.run(run())
    assert fed == alone
    recording = made[0]
    assert isinstance(recording, ZeroStartRecording)
    assert len(recording.reset_slots) == len(short)


def test_admission_takes_tenants_in_turn(model: Model) -> None:
    # The two hogs hold both slots; their steps together wait on the gate until every later
    # request is queued, so the order of admission depends on the scheduler alone, not on how
    # fast the hogs decode on this machine.
    gate = threading.Event()
    scheduler, made = _scheduler(gate, batch_slots=2, slots=2, queue=8)
    # 2,000 tokens: the first hog, stepping alone (ungated) until the second is admitted, must
    # not finish first (400 tokens took 0.17 s here; 40 did finish first, 1 run in 30).
    hog = {"prompt": "The", "max_tokens": 2000, "temperature": 0.0}

    def submit(tenant: str, i: int) -> asyncio.Future[Any]:
        body = {**hog, "prompt": f"{tenant}{i}", "max_tokens": 4}
        return asyncio.ensure_future(scheduler.complete(model, _request(body), tenant))

    async def run() -> None:
        first = [asyncio.ensure_future(scheduler.complete(model, _request(hog), "a"))
                 for _ in range(2)]  # fmt: skip
        await _running_together(scheduler, "a", 2)
        later = [submit("a", i) for i in range(3)]
        await asyncio.sleep(0.02)
        later += [submit("b", i) for i in range(2)]
        await asyncio.sleep(0.02)
        gate.set()
        await asyncio.gather(*first, *later)  # fmt: skip

    asyncio.run(run())
    encode = model._prompt_ids
    order = [p for p in made[0].prefilled if p != encode("The")]
    names = {tuple(encode(f"{t}{i}")): f"{t}{i}" for t in "ab" for i in range(3)}
    admitted = [names[tuple(p)] for p in order]
    # Tenant b came last but is not starved behind a's line: the turns alternate.
    assert admitted == ["a0", "b0", "a1", "b1", "a2"], admitted


def test_embeddings_arriving_together_share_one_job(model: Model) -> None:
    batcher = EmbeddingBatcher(ThreadPoolExecutor(2))
    texts = [f"{p['prompt']} number {i}" for i, p in enumerate(REQUESTS * 2)]

    async def run() -> list[Any]:
        return list(await asyncio.gather(*(batcher.embed(model, [t]) for t in texts)))

    replies = asyncio.run(run())
    assert batcher.jobs < len(texts) and batcher.texts == len(texts)
    for text, (vectors, tokens) in zip(texts, replies, strict=True):
        alone = model.embed([text])
        assert vectors.shape == alone.shape
        assert np.abs(vectors - alone).max() < 1e-5
        assert tokens == len(model.embed_ids([text])[0])


def test_concurrent_embedding_requests_get_the_vectors_they_get_alone(
    served: ServerThread,
) -> None:
    texts = [f"{p['prompt']} number {i}" for i, p in enumerate(REQUESTS * 2)]

    def embed(text: str) -> list[float]:
        with _with(served) as client:
            reply = client.post("/v1/embeddings", json={"model": MODEL, "input": text})
        assert reply.status_code == 200, reply.text
        return list(reply.json()["data"][0]["embedding"])

    alone = [embed(t) for t in texts]
    together: list[list[float]] = [[] for _ in texts]
    threads = [
        threading.Thread(target=lambda i=i: together.__setitem__(i, embed(texts[i])))
        for i in range(len(texts))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert np.abs(np.array(together) - np.array(alone)).max() < 1e-5


def test_an_idle_model_loop_ends_and_the_next_request_starts_a_new_one(
    model: Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evermind.runtime import scheduler as module

    monkeypatch.setattr(module, "IDLE_S", 0.05)
    scheduler, made = _scheduler(batch_slots=2)
    body = REQUESTS[0]

    async def run() -> tuple[str, str]:
        first = (await scheduler.complete(model, _request(body))).text
        deadline = time.monotonic() + 5
        while scheduler._loops and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not scheduler._loops  # the thread ended and holds no model
        return first, (await scheduler.complete(model, _request(body))).text

    first, second = asyncio.run(run())
    assert first == second and len(made) == 2


def test_a_lone_embedding_client_never_waits_and_a_crowd_is_gathered(model: Model) -> None:
    batcher = EmbeddingBatcher(ThreadPoolExecutor(2))

    async def alone() -> None:
        for i in range(6):
            await batcher.embed(model, [f"one at a time {i}"])

    asyncio.run(alone())
    assert not batcher.contended(model) and batcher.jobs == 6  # nobody to wait for

    async def crowd() -> None:
        await asyncio.gather(*(batcher.embed(model, [f"together {i}"]) for i in range(24)))

    asyncio.run(crowd())
    assert batcher.contended(model)  # the crowd found jobs running: the next waits 4 ms
    assert batcher.jobs - 6 < 24 and batcher.texts == 30
