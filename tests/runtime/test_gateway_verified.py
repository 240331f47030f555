"""The verified cache through the gateway over HTTP: the error it promises, and mistakes that do
not stick.

A real ``evermind serve --upstreams`` app on loopback, the official ``openai`` SDK as the
client, and a loopback OpenAI upstream whose answers follow meaning: a question and its
paraphrase get one answer, a near-miss another (the corpus's labels). The full-cache test stores
hundreds of questions of the corpus's *report* split (never tuned on; only counts are read),
then replays every paraphrase and near-miss, read-through as the gateway runs, and fails if the
share of lookups answered wrongly exceeds δ. It runs at δ = 0.01, the tightest shipped bound (a
looser δ serves more hits through the same path; the library tests of
:mod:`evermind.cache.verified` cover how δ picks the bound).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from evals import cache_corpus

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, gateway_config
from tests.upstreams import OpenAIUpstream

OPENAI_KEY = "sk-test-verified-0123456789"
MODEL = "openai/gpt-4o-mini"
#: Triples of the report split replayed (a deterministic prefix): 300 stored, 600 looked up.
TRIPLES = 300


def _server(root: Path, upstream: OpenAIUpstream, cache: dict[str, Any]) -> ServerThread:
    return ServerThread(
        gateway_config(
            root,
            {
                "cache": {"embedder": "terms", **cache},
                "upstreams": {
                    "openai": {
                        "protocol": "openai",
                        "base_url": upstream.url + "/v1",
                        "api_key": OPENAI_KEY,
                        "max_retries": 0,
                    }
                },
            },
        )
    )


def _client(server: ServerThread) -> openai.OpenAI:
    """The SDK client of tenant alpha; one per server, reused as an application would (its
    connection pool kept, not rebuilt for each of the replay's 900 requests)."""
    return openai.OpenAI(base_url=server.url + "/v1", api_key=TOKEN_A, max_retries=0)


def _ask(client: openai.OpenAI, text: str, **headers: str) -> tuple[str, str]:
    """One temperature-0 question; returns the answer and the ``x-evermind-cache`` header."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        temperature=0,
        extra_headers=headers or None,
    )
    return raw.parse().choices[0].message.content or "", raw.headers["x-evermind-cache"]


ReplaySet = tuple[list[str], list[tuple[str, str]], dict[str, str]]


@pytest.fixture(scope="module")
def replay_set() -> ReplaySet:
    """The stored questions, the (text, kind) lookups in a seeded order, and every text's
    right answer."""
    triples = cache_corpus.triples("report")[:TRIPLES]
    answer: dict[str, str] = {}
    lookups: list[tuple[str, str]] = []
    for t in triples:
        answer[t.query] = answer[t.paraphrase] = f"Answer {t.id}"
        answer[t.near_miss] = f"Answer {t.id} (the near-miss)"
        lookups += [(t.paraphrase, "paraphrase"), (t.near_miss, "near_miss")]
    random.Random(3).shuffle(lookups)
    return [t.query for t in triples], lookups, answer


def test_a_full_cache_over_http_answers_at_most_delta_of_lookups_wrongly(
    tmp_path: Path, replay_set: ReplaySet
) -> None:
    delta = 0.01
    queries, lookups, answer = replay_set
    with (
        OpenAIUpstream(OPENAI_KEY, reply=lambda text: answer[text]) as upstream,
        _server(tmp_path, upstream, {"max_error": delta, "verify_sample": 0.1}) as server,
        _client(server) as client,
    ):
        for query in queries:  # stored (a few hit an earlier, equivalent question instead)
            _ask(client, query)
        wrong = hits = 0
        hits_by_kind = {"paraphrase": 0, "near_miss": 0}
        for text, kind in lookups:
            got, status = _ask(client, text)
            assert got  # never an empty answer
            if status.startswith("hit"):
                hits += 1
                hits_by_kind[kind] += 1
            wrong += got != answer[text]
        metrics = httpx.get(server.url + "/metrics").text
    rate = wrong / len(lookups)
    print(
        f"δ={delta}: {len(queries)} stored, {len(lookups)} lookups, hits {hits_by_kind}, "
        f"wrong answers served {wrong} ({rate:.4f})"
    )
    assert rate <= delta, f"{wrong} of {len(lookups)} lookups answered wrongly at δ={delta}"
    assert hits_by_kind["paraphrase"] > 0, "the verified cache served no paraphrase at all"
    assert "evermind_gateway_cache_checks_total" in metrics
    assert f"evermind_gateway_cache_max_error {delta:g}" in metrics
    # A fresh gateway checks its would-be hits until its checks bound the served error.
    forced = _gauge(metrics, "evermind_gateway_cache_forced_checks_total")
    assert forced > 0 and _gauge(metrics, "evermind_gateway_cache_paid_checks_total") >= forced


def _gauge(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_a_fresh_gateway_checks_would_be_hits_and_shares_only_repeats_until_bounded(
    tmp_path: Path,
) -> None:
    """With the default ``verify_until_bounded``: a paraphrase the shipped bound would serve
    is sent upstream first (one paid, forced check), a near-miss the shipped bound would serve
    is never served, and a look-up that cannot check (the tab's share route) gets exact
    repeats only."""
    facts = {
        "When does the cafeteria open on weekdays?": "At 8:00.",
        "Where is the bicycle storage room located?": "Basement level 2.",
        "How do I book a meeting room for Friday?": "Use the Rooms app.",
        "Who approves expense reports over 500 euros?": "Your director.",
        "What is the guest wifi password?": "Ask reception; it rotates daily.",
        "Which floor hosts the finance department?": "The fourth floor.",
        "How many parking spots are reserved for visitors?": "Twelve.",
        "When is the building closed for maintenance?": "The first Sunday of each month.",
        "What is the phone number of the security desk?": "Extension 4411.",
        "Where can I print large posters?": "The copy room on floor 1.",
    }
    world = dict(facts)
    paraphrase = "When will the cafeteria open on weekdays?"  # the same answer
    world[paraphrase] = "At 8:00."
    with (
        OpenAIUpstream(OPENAI_KEY, reply=lambda text: world[text]) as upstream,
        _server(tmp_path, upstream, {"max_error": 0.01, "verify_sample": 0.0}) as server,
        _client(server) as client,
    ):
        for question in facts:
            assert _ask(client, question)[1] == "miss"
        share = {"Authorization": f"Bearer {TOKEN_A}"}
        looked = httpx.post(
            server.url + "/v1/gateway/cache/lookup",
            json={"model": MODEL, "query": paraphrase, "temperature": 0},
            headers=share,
        ).json()
        assert "hit" not in looked and "not yet checked enough" in looked["reason"], looked
        repeat = httpx.post(
            server.url + "/v1/gateway/cache/lookup",
            json={"model": MODEL, "query": "Where can I print large posters?", "temperature": 0},
            headers=share,
        ).json()
        assert repeat["hit"]["response"] == "The copy room on floor 1."
        calls = len(upstream.requests)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": paraphrase}], temperature=0
        )
        assert raw.headers["x-evermind-cache"] == "hit-l1"  # checked, then served
        assert raw.parse().choices[0].message.content == "At 8:00."
        assert len(upstream.requests) == calls + 1
        field = (raw.parse().model_extra or {})["evermind"]
        assert "checked against the upstream (paid)" in field["detail"]
        assert field["cost_usd"] > 0 and not field.get("saved_usd")  # it saved nothing
        world[paraphrase] = "At 7:30 since the new contract."  # now a near-miss in effect
        answer, status = _ask(client, paraphrase)
        assert answer == "At 7:30 since the new contract." and status == "miss"
        metrics = httpx.get(server.url + "/metrics").text
    assert _gauge(metrics, "evermind_gateway_cache_forced_checks_total") == 2
    assert _gauge(metrics, "evermind_gateway_cache_paid_checks_total") == 2


@pytest.fixture()
def world() -> dict[str, str]:
    """The upstream's current answers; a test changes one to make a cached answer wrong."""
    return {}


@pytest.fixture()
def checked_server(tmp_path: Path, world: dict[str, str]) -> Iterator[ServerThread]:
    with (
        OpenAIUpstream(OPENAI_KEY, reply=lambda text: world.get(text, f"About {text}")) as up,
        _server(tmp_path, up, {"max_error": 0.01, "verify_sample": 1.0}) as server,
    ):
        yield server


def test_a_hit_found_wrong_by_a_check_is_replaced_and_not_served_again(
    checked_server: ServerThread, world: dict[str, str]
) -> None:
    question = "Which port does PostgreSQL listen on by default?"
    world[question] = "5432"
    with _client(checked_server) as client:
        assert _ask(client, question) == ("5432", "miss")
        assert _ask(client, question) == ("5432", "hit-l1")  # checked: the same answer
        world[question] = "6432 since the pooler moved in front"  # the cached answer is now wrong
        # Every lookup is checked here (verify_sample 1): the check finds the difference, and the
        # client gets the upstream's answer, not the stale one.
        assert _ask(client, question) == ("6432 since the pooler moved in front", "miss")
        world[question] = "6432 since the pooler moved in front"
        assert _ask(client, question) == ("6432 since the pooler moved in front", "hit-l1")
    metrics = httpx.get(checked_server.url + "/metrics").text
    assert "evermind_gateway_cache_check_mismatches_total 1" in metrics
    assert "evermind_gateway_cache_paid_checks_total 3" in metrics  # each hit was checked


def test_refresh_replaces_the_cached_answer(tmp_path: Path) -> None:
    world = {"What is the capital of Australia?": "Sydney"}
    with (
        OpenAIUpstream(OPENAI_KEY, reply=lambda text: world[text]) as upstream,
        _server(tmp_path, upstream, {"max_error": 0.01, "verify_sample": 0.0}) as server,
        _client(server) as client,
    ):
        question = "What is the capital of Australia?"
        assert _ask(client, question) == ("Sydney", "miss")
        world[question] = "Canberra"
        assert _ask(client, question) == ("Sydney", "hit-l1")  # no checks: the stale answer
        assert _ask(client, question, **{"x-evermind-cache": "refresh"}) == ("Canberra", "miss")
        assert _ask(client, question) == ("Canberra", "hit-l1")


def test_a_bad_max_error_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    from evermind.errors import ConfigError
    from evermind.runtime.gateway.config import GatewayConfig

    for bad in (0, 1.5, "often", True):
        with pytest.raises(ConfigError, match="max_error must be a rate in"):
            GatewayConfig.parse(
                {"cache": {"max_error": bad}, "upstreams": {"o": {"protocol": "openai"}}},
                "upstreams.toml",
                {},
            )
