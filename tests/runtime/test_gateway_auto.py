"""``model: "evermind/auto"`` end to end: the official ``openai`` client against a runtime whose
router sends each request to the tenant's local model or to a loopback frontier upstream.

The local model is a real pushed package; the frontier is :class:`tests.upstreams.OpenAIUpstream`.
Each decision must show in the response (``evermind.route``), reach the right server, be
counted in ``/metrics``, and — where the deployment collects them — leave the paid frontier
answer in the distillation store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from evermind.agent.distillation import DistillationEngine
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package
from tests.runtime.helpers import TOKEN_A, TOKEN_B, bearer, gateway_config
from tests.upstreams import OpenAIUpstream

KEY = "sk-auto-frontier-secret-3e1f"
LOCAL_REF = "evermind/autolocal:1.0.0"
FRONTIER = "gpt-4o-mini"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(KEY) as gpt:
        yield gpt


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstream: OpenAIUpstream
) -> Iterator[tuple[ServerThread, Path]]:
    root = tmp_path_factory.mktemp("auto")
    pairs = root / "pairs.db"
    config = gateway_config(
        root,
        {
            "cache": {"embedder": "none"},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": upstream.url + "/v1",
                    "api_key": KEY,
                    "max_retries": 0,
                }
            },
            "auto": {
                "local": LOCAL_REF,
                "frontier": f"openai/{FRONTIER}",
                # The tiny test model is unsure of everything; this threshold keeps short
                # asks local so the other rules can be seen (the signal is tested below).
                "max_surprise": 1000.0,
                "max_local_prompt_tokens": 24,
                "distill": {"tenants": ["alpha"], "path": str(pairs)},
            },
        },
    )
    with ServerThread(config) as running:
        for token in (TOKEN_A, TOKEN_B):
            pushed = httpx.post(
                running.url + "/v1/models",
                content=tiny_package("autolocal", "1.0.0"),
                headers=bearer(token),
                timeout=60,
            )
            assert pushed.status_code == 201, pushed.text
        yield running, pairs


def ask(server: ServerThread, text: str, token: str = TOKEN_A, **options: Any) -> Any:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=token, max_retries=0)
    headers = options.pop("headers", None)
    return client.chat.completions.create(
        model="evermind/auto",
        messages=[{"role": "user", "content": text}],
        max_tokens=8,
        temperature=0,
        extra_headers=headers,
        **options,
    )


def route_of(answer: Any) -> dict[str, str]:
    extra = answer.model_extra or {}
    return dict(extra["evermind"]["route"])


def test_a_short_ask_is_answered_by_the_local_model(
    server: tuple[ServerThread, Path], upstream: OpenAIUpstream
) -> None:
    running, _ = server
    before = len(upstream.requests)
    answer = ask(running, "the cat sat")
    assert route_of(answer) == {"target": "local", "reason": "confident"}
    assert answer.model_extra["evermind"]["provider"] == "evermind"
    assert len(upstream.requests) == before  # the frontier was not called
    assert answer.usage.completion_tokens >= 1


def test_tools_long_asks_and_the_override_go_to_the_frontier(
    server: tuple[ServerThread, Path], upstream: OpenAIUpstream
) -> None:
    running, _ = server
    tool = {
        "type": "function",
        "function": {"name": "lookup", "description": "d", "parameters": {"type": "object"}},
    }
    cases = [
        (ask(running, "the cat sat", tools=[tool]), "tools"),
        (ask(running, " ".join(["word"] * 60)), "length"),
        (ask(running, "the cat sat", headers={"x-evermind-route": "frontier"}), "override"),
    ]
    for answer, reason in cases:
        assert route_of(answer) == {"target": "frontier", "reason": reason}
        assert answer.model_extra["evermind"]["provider"] == "openai"
    sent = upstream.requests[-3:]
    assert [r.body["model"] for r in sent] == [FRONTIER] * 3  # renamed for the upstream
    local = ask(running, " ".join(["word"] * 60), headers={"x-evermind-route": "local"})
    assert route_of(local) == {"target": "local", "reason": "override"}


def test_a_bad_route_header_is_a_clear_400(server: tuple[ServerThread, Path]) -> None:
    running, _ = server
    with pytest.raises(openai.BadRequestError) as err:
        ask(running, "the cat sat", headers={"x-evermind-route": "cloud"})
    assert "x-evermind-route" in str(err.value)


def test_streams_are_routed_too(server: tuple[ServerThread, Path]) -> None:
    running, _ = server
    client = openai.OpenAI(base_url=running.url + "/v1", api_key=TOKEN_A, max_retries=0)
    for header, target in ((None, "local"), ("frontier", "frontier")):
        chunks = list(
            client.chat.completions.create(
                model="evermind/auto",
                messages=[{"role": "user", "content": "the cat sat"}],
                max_tokens=8,
                temperature=0,
                stream=True,
                extra_headers=None if header is None else {"x-evermind-route": header},
            )
        )
        last = chunks[-1].model_extra or {}
        assert last["evermind"]["route"]["target"] == target
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_decisions_are_counted_and_paid_answers_collected_for_distilling_tenants(
    server: tuple[ServerThread, Path],
) -> None:
    running, pairs = server
    ask(running, "the dog ran", headers={"x-evermind-route": "frontier"})  # alpha: collected
    ask(running, "the bird flew", TOKEN_B, headers={"x-evermind-route": "frontier"})  # not
    metrics = httpx.get(running.url + "/metrics", timeout=10).text
    assert 'evermind_router_decisions_total{tenant="' in metrics
    assert 'target="local",reason="confident"}' in metrics
    assert 'target="frontier",reason="tools"}' in metrics
    with DistillationEngine(pairs) as engine:
        prompts = [p.prompt for p in engine.pairs()]
        tenants = {p.tenant for p in engine.pairs()}
    assert any("the dog ran" in p for p in prompts)
    assert not any("the bird flew" in p for p in prompts)
    assert tenants == {"alpha"}


@pytest.mark.parametrize(
    ("auto", "message"),
    [
        ({"frontier": "openai/gpt-4o"}, "local must be"),
        ({"local": "evermind/x", "frontier": "claude/opus"}, "frontier must be"),
        ({"local": "openai/gpt-4o", "frontier": "openai/gpt-4o"}, "local must name"),
        ({"local": "evermind/x", "frontier": "openai/g", "max_surprise": "high"}, "max_surprise"),
        ({"local": "evermind/x", "frontier": "openai/g", "budget_usd": -1}, "budget_usd"),
        ({"local": "evermind/x", "frontier": "openai/g", "distill": {"who": 1}}, "distill"),
        ({"local": "evermind/x", "frontier": "openai/g", "speed": 1}, "unknown field"),
    ],
)
def test_a_bad_auto_table_is_refused_at_start(auto: dict[str, Any], message: str) -> None:
    from evermind.errors import ConfigError
    from evermind.runtime.gateway.config import GatewayConfig

    raw = {"upstreams": {"openai": {"protocol": "openai", "api_key": "k"}}, "auto": auto}
    with pytest.raises(ConfigError, match=message):
        GatewayConfig.parse(raw, "test", {})
