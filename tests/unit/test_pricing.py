"""The price table: shipped data, overrides, the four-rate price, unknown models."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evermind.bridges import InstrumentedBridge, PriceTable, Rates
from evermind.bridges.base import ChatRequest, Completion, Delta, Message, Usage
from evermind.errors import ConfigError, UpstreamError


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVERMIND_PRICES", raising=False)


def test_the_shipped_table_loads_with_a_version() -> None:
    table = PriceTable.load()
    assert table.version == "2026-12-01"
    assert {"claude-sonnet-4-5", "claude-haiku-4-5", "gpt-4.1", "gpt-4o-mini"} <= set(table.models)
    for name, rates in table.models.items():
        assert rates.cache_read <= rates.input <= rates.output, name
        if name.startswith("claude-"):  # the 5-minute write is 1.25x, a read 0.1x the input
            assert rates.cache_write == pytest.approx(1.25 * rates.input), name
            assert rates.cache_read == pytest.approx(0.1 * rates.input), name


def test_anthropic_three_way_input_split() -> None:
    table = PriceTable.load()
    usage = Usage(
        input_tokens=1000, output_tokens=500, cache_read_tokens=20_000, cache_write_tokens=4000
    )
    # claude-sonnet-4-5: $3 input, $15 output, $0.30 cache read, $3.75 cache write per Mtok
    expected = (1000 * 3 + 500 * 15 + 20_000 * 0.3 + 4000 * 3.75) / 1e6
    assert table.price("claude-sonnet-4-5", usage) == pytest.approx(expected)
    assert table.price("claude-sonnet-4-5-20250929", usage) == pytest.approx(expected)
    assert table.price("anthropic/claude-sonnet-4-5", usage) == pytest.approx(expected)


def test_openai_cached_input_at_its_rate() -> None:
    table = PriceTable.load()
    usage = Usage(input_tokens=180, output_tokens=17, cache_read_tokens=1920)
    expected = (180 * 2.0 + 17 * 8.0 + 1920 * 0.5) / 1e6  # gpt-4.1
    assert table.price("gpt-4.1-2025-04-14", usage) == pytest.approx(expected)
    assert table.price("openai/gpt-4.1", usage) == pytest.approx(expected)


def test_unknown_models_price_to_none() -> None:
    table = PriceTable.load()
    usage = Usage(10, 10)
    for model in ("claude-sonnet-9", "gpt-4.1-ultra", "evermind/tiny:1.0", "llama3", ""):
        assert table.price(model, usage) is None, model


def test_a_deployment_overrides_and_extends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "prices.json"
    rates = {"input": 0.0, "output": 0.0, "cache_read": 0.0, "cache_write": 0.0}
    path.write_text(
        json.dumps(
            {
                "version": "acme-2027-01",
                "models": {"gpt-4.1": {**rates, "input": 1.0}, "llama3": rates},
            }
        )
    )
    table = PriceTable.load(path)
    assert table.version == "acme-2027-01"
    assert table.rates("gpt-4.1") == Rates(1.0, 0.0, 0.0, 0.0)
    assert table.price("llama3", Usage(1000, 1000)) == 0.0
    assert table.rates("claude-haiku-4-5") == PriceTable.load().rates("claude-haiku-4-5")
    monkeypatch.setenv("EVERMIND_PRICES", str(path))
    assert PriceTable.load().version == "acme-2027-01"


@pytest.mark.parametrize(
    "raw",
    [
        [],
        {"version": "x"},
        {"models": {"m": {"input": 1, "output": 1, "cache_read": 1}}},
        {"models": {"m": {"input": -1, "output": 1, "cache_read": 1, "cache_write": 1}}},
        {"models": {"m": {"input": "1", "output": 1, "cache_read": 1, "cache_write": 1}}},
    ],
)
def test_bad_tables_are_refused(tmp_path: Path, raw: object) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError):
        PriceTable.load(path)


def test_a_missing_override_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        PriceTable.load(tmp_path / "absent.json")


class FakeBridge:
    """A bridge answering from a script, for the instrumentation's arithmetic."""

    provider = "anthropic"

    def __init__(self, model: str, fail: bool = False) -> None:
        self.model = model
        self.fail = fail
        self.last_usage: Usage | None = None

    def _done(self) -> Completion:
        return Completion("one two", self.model, "anthropic", usage=Usage(100, 2, 1000, 0))

    async def generate(self, request: ChatRequest) -> Completion:
        if self.fail:
            raise UpstreamError("down", provider="anthropic", code="upstream_unavailable")
        return self._done()

    async def stream(self, request: ChatRequest):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.02)
        yield Delta("one")
        await asyncio.sleep(0.02)
        yield Delta(" two")
        yield Delta(completion=self._done())

    async def aclose(self) -> None:
        pass


def test_instrumented_bridge_sets_timing_cost_and_totals() -> None:
    request = ChatRequest(model="claude-haiku-4-5", messages=(Message("user", "hi"),))
    bridge = InstrumentedBridge(FakeBridge("claude-haiku-4-5-20251001"), PriceTable.load())

    async def main() -> tuple[Completion, Completion]:
        whole = await bridge.generate(request)
        last = None
        async for delta in bridge.stream(request):
            last = delta
        assert last is not None and last.completion is not None
        return whole, last.completion

    whole, streamed = asyncio.run(main())
    cost = (100 * 1.0 + 2 * 5.0 + 1000 * 0.1) / 1e6
    assert whole.cost_usd == pytest.approx(cost) and streamed.cost_usd == pytest.approx(cost)
    assert streamed.timing is not None and whole.timing is not None
    assert 0.015 < streamed.timing.ttft_s < streamed.timing.total_s
    assert streamed.timing.tokens_per_s == pytest.approx(2 / streamed.timing.total_s)
    assert whole.timing.ttft_s == whole.timing.total_s
    totals = bridge.totals()
    assert totals["calls"] == 2 and totals["unpriced_calls"] == 0
    assert totals["usage"] == {
        "input_tokens": 200,
        "output_tokens": 4,
        "cache_read_tokens": 2000,
        "cache_write_tokens": 0,
    }
    assert totals["cost_usd"] == pytest.approx(2 * cost)
    assert totals["prices_version"] == "2026-12-01"


def test_instrumented_bridge_counts_unpriced_and_failures() -> None:
    request = ChatRequest(model="my-local-llm", messages=(Message("user", "hi"),))
    unpriced = InstrumentedBridge(FakeBridge("my-local-llm"), PriceTable.load())
    assert asyncio.run(unpriced.generate(request)).cost_usd is None
    assert unpriced.totals()["unpriced_calls"] == 1 and unpriced.totals()["cost_usd"] == 0.0
    failing = InstrumentedBridge(FakeBridge("x", fail=True), PriceTable.load())
    with pytest.raises(UpstreamError):
        asyncio.run(failing.generate(request))
    assert failing.totals()["failures"] == 1 and failing.totals()["calls"] == 0
