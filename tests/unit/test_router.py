"""The inference router's decisions on crafted requests: override, budget, tools, context,
length, task patterns, and the SSM confidence signal changing the outcome."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, ClassVar

import pytest

from evermind.agent.router import (
    Budget,
    InferenceRouter,
    ModelConfidence,
    RouterConfig,
    price_estimator,
)
from evermind.bridges import ChatRequest, Completion, Message
from evermind.bridges.pricing import PriceTable
from evermind.errors import ConfigError, InputError

TOOL = {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}


def ask(text: str, **kw: object) -> ChatRequest:
    return ChatRequest(model="evermind/auto", messages=(Message("user", text),), **kw)  # type: ignore[arg-type]


class FixedConfidence:
    """Surprise from a table; records what it was asked."""

    def __init__(self, table: dict[str, float | None], default: float = 0.0) -> None:
        self.table, self.default, self.asked = table, default, []  # type: ignore[var-annotated]

    def __call__(self, text: str) -> float | None:
        self.asked.append(text)
        return self.table.get(text, self.default)


def test_confident_short_ask_goes_local() -> None:
    router = InferenceRouter(confidence=FixedConfidence({}, 0.2))
    decision = router.decide(ask("Return the number of items in the sequence."))
    assert (decision.target, decision.reason) == ("local", "confident")
    assert decision.signals["surprise"] == 0.2
    assert decision.signals["tools"] is False


def test_the_confidence_signal_changes_the_decision() -> None:
    text = "Je voudrais réserver une table pour deux"
    surprised = InferenceRouter(confidence=FixedConfidence({text: 3.0}))
    calm = InferenceRouter(confidence=FixedConfidence({text: 0.1}))
    off = InferenceRouter(
        RouterConfig(use_confidence=False), confidence=FixedConfidence({text: 3.0})
    )
    assert surprised.decide(ask(text)).target == "frontier"
    assert surprised.decide(ask(text)).reason == "confidence"
    assert calm.decide(ask(text)).target == "local"
    assert off.decide(ask(text)).target == "local"
    # The threshold is the config's: the same surprise is local under a looser one.
    loose = InferenceRouter(RouterConfig(max_surprise=5.0), FixedConfidence({text: 3.0}))
    assert loose.decide(ask(text)).target == "local"


def test_only_the_latest_user_turn_is_scored_and_capped() -> None:
    confidence = FixedConfidence({})
    router = InferenceRouter(RouterConfig(confidence_chars=10), confidence)
    request = ChatRequest(
        model="m",
        messages=(
            Message("user", "an earlier question"),
            Message("assistant", "an answer"),
            Message("user", "the latest short ask"),
        ),
    )
    router.decide(request)
    assert confidence.asked == ["the latest"]


def test_override_wins_over_everything() -> None:
    router = InferenceRouter(confidence=FixedConfidence({}, 9.0), budget=Budget(default_limit=0))
    local = router.decide(ask("Prove it step by step", tools=(TOOL,), extra={"route": "local"}))
    assert (local.target, local.reason) == ("local", "override")
    frontier = router.decide(ask("Return the value.", extra={"route": "frontier"}))
    assert (frontier.target, frontier.reason) == ("frontier", "override")
    with pytest.raises(InputError, match=r"extra\.route"):
        router.decide(ask("x", extra={"route": "gpt"}))


def test_tools_context_length_and_task_send_to_frontier() -> None:
    router = InferenceRouter(
        RouterConfig(max_local_prompt_tokens=20, local_context_tokens=100),
        FixedConfidence({}, 0.0),
    )
    assert router.decide(ask("Return the size.", tools=(TOOL,))).reason == "tools"
    tool_result = ChatRequest(
        model="m",
        messages=(
            Message("user", "weather?"),
            Message("tool", "sunny", tool_call_id="c1"),
            Message("user", "and tomorrow?"),
        ),
    )
    assert router.decide(tool_result).reason == "tools"
    long_history = ChatRequest(
        model="m",
        system="s " * 200,
        messages=(Message("user", "Return the size."),),
    )
    decision = router.decide(long_history)
    assert (decision.target, decision.reason) == ("frontier", "context")
    assert int(decision.signals["prompt_tokens"] or 0) > 100
    assert router.decide(ask("word " * 30)).reason == "length"
    for text in (
        "Think step by step about it",
        "Prove that it holds",
        "Write a Python function that sorts",
        "```x = 1```",
        "Traceback (most recent call last): boom",
    ):
        decision = router.decide(ask(text))
        assert (decision.target, decision.reason) == ("frontier", "task"), text
    plain = InferenceRouter(RouterConfig(use_task_patterns=False), FixedConfidence({}, 0.0))
    assert plain.decide(ask("Prove that it holds")).target == "local"


def test_budget_sends_local_when_spent_or_when_the_call_would_pass_it() -> None:
    budget = Budget({"acme": 1.0})
    router = InferenceRouter(
        confidence=FixedConfidence({}, 9.0), budget=budget, estimate_usd=lambda r: 0.3
    )
    hard = ask("Je voudrais une table", tenant="acme")
    assert router.decide(hard).target == "frontier"
    router.record(hard, Completion("ok", "gpt", "openai", cost_usd=0.8))
    assert budget.spent("acme") == pytest.approx(0.8)
    decision = router.decide(hard)  # 0.8 + 0.3 > 1.0
    assert (decision.target, decision.reason) == ("local", "budget")
    assert "0.8000 of $1.0000" in decision.detail
    # Another tenant has no limit.
    assert router.decide(ask("Je voudrais une table", tenant="other")).target == "frontier"
    with pytest.raises(InputError):
        budget.charge("acme", -1.0)


def test_the_price_table_estimates_a_call() -> None:
    table = PriceTable.parse(
        {
            "version": "t",
            "models": {
                "big": {"input": 10.0, "output": 100.0, "cache_read": 1.0, "cache_write": 12.0}
            },
        }
    )
    estimate = price_estimator(table, count_tokens=lambda text: 1000)
    request = ChatRequest(model="openai/big", messages=(Message("user", "x"),), max_tokens=500)
    assert estimate(request) == pytest.approx((1000 * 10.0 + 500 * 100.0) / 1e6)
    assert estimate(replace(request, model="unknown")) is None
    router = InferenceRouter(
        confidence=FixedConfidence({}, 9.0),
        budget=Budget(default_limit=0.05),
        estimate_usd=estimate,
    )
    assert router.decide(request).reason == "budget"  # 0.06 would pass 0.05
    assert router.decide(replace(request, max_tokens=100)).target == "frontier"


def test_every_decision_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    router = InferenceRouter(confidence=FixedConfidence({"hard one": 5.0}, 0.0))
    with caplog.at_level(logging.INFO, logger="evermind.agent.router"):
        router.decide(ask("easy one"))
        router.decide(ask("easy two"))
        router.decide(ask("hard one"))
        router.decide(ask("x", tools=(TOOL,)))
    stats = router.stats.snapshot()
    assert stats["local"] == 2 and stats["frontier"] == 2
    assert stats["local:confident"] == 2
    assert stats["frontier:confidence"] == 1 and stats["frontier:tools"] == 1
    assert sum("route frontier (confidence)" in r.getMessage() for r in caplog.records) == 1
    assert router.decide(ask("easy one")).to_log()["target"] == "local"


def test_model_confidence_uses_the_training_loss_as_baseline() -> None:
    class Package:
        manifest: ClassVar[dict[str, Any]] = {"training": {"final_loss": 4.0}}

    class FakeModel:
        package = Package

        def evaluate(self, text: str) -> dict[str, float]:
            if len(text) < 2:
                raise ConfigError("evaluate needs a text of at least two tokens")
            return {"cross_entropy": 5.5}

    confidence = ModelConfidence(FakeModel())
    assert confidence.baseline == 4.0
    assert confidence("some text") == pytest.approx(1.5)
    assert confidence("x") is None
    assert ModelConfidence(FakeModel(), baseline=5.0)("abc") == pytest.approx(0.5)


def test_for_model_reads_the_models_tokenizer_and_surprise() -> None:
    import evermind
    from tests.factories import tiny_package

    model = evermind.load(tiny_package())
    router = InferenceRouter.for_model(model, RouterConfig(max_local_prompt_tokens=10_000))
    text = "The quick brown fox jumps over the lazy dog."
    decision = router.decide(ask(text))
    assert decision.signals["ask_tokens"] == len(model.tokenizer.encode(text))
    surprise = decision.signals["surprise"]
    assert isinstance(surprise, float)
    expected = (
        model.evaluate(text)["cross_entropy"] - model.package.manifest["training"]["final_loss"]
    )
    assert surprise == pytest.approx(expected, abs=1e-3)
    # Its own training text is far less surprising than text it never saw.
    odd = router.decide(ask("Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich"))
    assert float(odd.signals["surprise"] or 0) > surprise + 0.5  # measured: 0.97 more


def test_config_is_checked() -> None:
    with pytest.raises(ConfigError):
        RouterConfig(max_local_prompt_tokens=0)
    with pytest.raises(ConfigError):
        RouterConfig(max_surprise=float("nan"))
