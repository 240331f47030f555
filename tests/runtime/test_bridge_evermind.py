"""EvermindBridge: the in-process model, and the same model behind a real runtime on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

import evermind
from evermind.bridges.base import ChatRequest, Completion, Message
from evermind.bridges.evermind import EvermindBridge
from evermind.errors import InputError
from evermind.model.chat import render_chat
from evermind.model.inference import Model
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A
from tests.upstreams import drain

PACKAGE = ("bridged", "1.0.0")
REF = "evermind/bridged:1.0.0"


@pytest.fixture(scope="module")
def model() -> Model:
    return evermind.load(tiny_package(*PACKAGE))


@pytest.fixture(scope="module")
def served(server: ServerThread, alpha: httpx.Client) -> Iterator[ServerThread]:
    response = alpha.post("/v1/models", content=tiny_package(*PACKAGE))
    assert response.status_code == 201, response.text
    yield server


def conversation(**fields: object) -> ChatRequest:
    return ChatRequest(
        model=REF,
        messages=(
            Message("user", "What do agents learn?"),
            Message("assistant", "They learn the fox."),
            Message("user", "Tell me about the fox."),
        ),
        system="You answer briefly.",
        facts="The fox is quick.",
        **fields,  # type: ignore[arg-type]
    )


def test_prompt_is_the_runtime_template() -> None:
    assert EvermindBridge.prompt(conversation()) == render_chat(
        [
            ("system", "You answer briefly."),
            ("system", "The fox is quick."),
            ("user", "What do agents learn?"),
            ("assistant", "They learn the fox."),
            ("user", "Tell me about the fox."),
        ]
    )


def test_generate_and_stream_in_process(model: Model) -> None:
    bridge = EvermindBridge(model)
    request = conversation(max_tokens=24, temperature=0.0)

    async def main() -> tuple[Completion, list[str], Completion]:
        whole = await bridge.generate(request)
        texts, streamed = await drain(bridge.stream(request))
        return whole, texts, streamed

    whole, texts, streamed = asyncio.run(main())
    assert whole.provider == "evermind" and whole.model == "bridged:1.0.0"
    assert "".join(texts) == streamed.text == whole.text and whole.text
    prompt_tokens = len(model.tokenizer.encode(bridge.prompt(request)))
    assert whole.usage.input_tokens == prompt_tokens
    assert 0 < whole.usage.output_tokens <= 24
    assert whole.usage.cache_read_tokens == whole.usage.cache_write_tokens == 0
    assert streamed.usage == whole.usage == bridge.last_usage
    assert whole.finish_reason in ("stop", "length")


def test_generation_does_not_block_the_event_loop(model: Model) -> None:
    bridge = EvermindBridge(model)
    request = conversation(max_tokens=200, temperature=0.0, stop=("never-appears",))

    async def main() -> tuple[int, float]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        start = time.perf_counter()
        await bridge.generate(request)
        took = time.perf_counter() - start
        done.set()
        await task
        return ticks, took

    ticks, took = asyncio.run(main())
    print(f"generation took {took * 1000:.0f} ms; the loop ticked {ticks} times meanwhile")
    # Generation on the loop would run to its end before the ticker's first turn (0 ticks);
    # how often it ticks beside the worker depends on the GIL and a shared CPU.
    assert took > 0.02 and ticks >= 1


def test_tools_are_refused(model: Model) -> None:
    tool = {"name": "weather", "input_schema": {"type": "object"}}
    with pytest.raises(InputError, match="cannot call tools"):
        asyncio.run(EvermindBridge(model).generate(conversation(tools=(tool,))))


@pytest.mark.parametrize(
    "sampling", [{"temperature": 0.0}, {"temperature": 0.8, "extra": {"seed": 7}}]
)
def test_runtime_answers_like_the_in_process_model(
    served: ServerThread, model: Model, sampling: dict[str, object]
) -> None:
    request = conversation(max_tokens=24, **sampling)
    local = EvermindBridge(model)

    async def main() -> tuple[Completion, Completion, Completion]:
        remote = EvermindBridge.remote(served.url, TOKEN_A, max_retries=0)
        try:
            whole = await remote.generate(request)
            streamed = (await drain(remote.stream(request)))[1]
        finally:
            await remote.aclose()
        return whole, streamed, await local.generate(request)

    whole, streamed, expected = asyncio.run(main())
    assert whole.provider == "evermind" and whole.model == REF
    assert whole.text == streamed.text == expected.text
    assert whole.finish_reason == expected.finish_reason
    assert whole.usage == streamed.usage == expected.usage


def test_remote_errors_are_upstream_errors(served: ServerThread) -> None:
    from evermind.errors import UpstreamError

    async def main() -> None:
        remote = EvermindBridge.remote(served.url, "not-a-token", max_retries=0)
        try:
            await remote.generate(conversation())
        finally:
            await remote.aclose()

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(main())
    assert caught.value.code == "upstream_auth" and caught.value.provider == "evermind"
