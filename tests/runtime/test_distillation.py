"""Online distillation end to end: frontier answers from a loopback OpenAI server, through the
real OpenAIBridge, collected (deduplicated, filtered, with provenance) into SQLite; a tiny
model fine-tuned on them natively whose held-out loss on those pairs falls; and rollback when
the new model is not better (0 steps, a diverging run): the previous package stays."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evermind.agent.distillation import (
    DistillationEngine,
    DistillationPolicy,
    FineTuneConfig,
    prompt_hash,
)
from evermind.bridges import ChatRequest, Completion, Message, ToolCall
from evermind.bridges.evermind import EvermindBridge
from evermind.bridges.openai import OpenAIBridge
from evermind.cli import main as cli_main
from evermind.package import read_package
from tests.factories import TEXT, tiny_package
from tests.upstreams import OpenAIUpstream

CITIES = [
    "Arden", "Brisk", "Calder", "Dunmore", "Elsby", "Fenwick", "Garth", "Holm", "Ivel",
    "Jarrow", "Kells", "Lorne", "Morrow", "Nairn", "Orton", "Penge", "Quorn", "Rhyl",
    "Selby", "Thame", "Usk", "Verwood", "Wick", "Yarm",
]  # fmt: skip


def reply(text: str) -> str:
    """A frontier model's consistent answers (what the local model should pick up)."""
    city = text.rsplit(" ", 1)[-1].rstrip("?")
    return f"The river of {city} is the {city}water, and it flows east to the sea."


def ask(text: str, tenant: str = "acme") -> ChatRequest:
    return ChatRequest(model="gpt-4.1-mini", messages=(Message("user", text),), tenant=tenant)


async def _collect_from(upstream: OpenAIUpstream, engine: DistillationEngine) -> list[str]:
    bridge = OpenAIBridge(api_key=upstream.api_key, base_url=upstream.url + "/v1", max_retries=0)
    reasons = []
    try:
        for city in [*CITIES, CITIES[0]]:  # the last one repeats the first
            for tenant in ("acme", "other"):
                request = ask(f"Which river runs through {city}?", tenant)
                completion = await bridge.generate(request)
                reasons.append(engine.collect(request, completion).reason)
    finally:
        await bridge.aclose()
    return reasons


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("distill") / "pairs.db"
    policy = DistillationPolicy(tenants=frozenset({"acme"}))
    with OpenAIUpstream(reply=reply) as upstream, DistillationEngine(path, policy) as engine:
        reasons = asyncio.run(_collect_from(upstream, engine))
        assert reasons.count("stored") == len(CITIES)
        assert reasons.count("a duplicate: this prompt is already collected") == 1
        assert all("off for tenant 'other'" in r for r in reasons[1::2])
    return path


def test_collected_pairs_carry_provenance(collected: Path) -> None:
    with DistillationEngine(collected) as engine:
        pairs = engine.pairs()
        assert len(pairs) == len(CITIES) == engine.count("acme")
        assert engine.count("other") == 0
        first = pairs[0]
        question = f"Which river runs through {CITIES[0]}?"
        # The chat template the local model reads (EvermindBridge.prompt of the same turns).
        assert first.prompt == EvermindBridge.prompt(ask(question))
        assert first.prompt == f"User: {question}\nAssistant:"
        assert first.answer == reply(question)
        assert first.text() == f"{first.prompt} {first.answer}"
        assert (first.tenant, first.upstream) == ("acme", "openai")
        assert first.model and first.response_id and first.created_at > 0


def test_collection_is_off_by_default_and_filters(tmp_path: Path) -> None:
    with DistillationEngine(tmp_path / "off.db") as off:
        assert not off.collect(ask("hi there"), Completion("Hello!", "gpt", "openai")).stored
    engine = DistillationEngine(
        ":memory:", DistillationPolicy(all_tenants=True, max_answer_chars=50)
    )
    good = Completion("Paris is the capital.", "gpt", "openai", id="r1")
    cases = {
        "empty": Completion("  ", "gpt", "openai"),
        "refusal": Completion("I'm sorry, but I can't help with that.", "gpt", "openai"),
        "characters": Completion("x" * 51, "gpt", "openai"),
        "tools": Completion("", "gpt", "openai", tool_calls=(ToolCall("c", "f", {}),)),
        "cut": Completion("Paris is", "gpt", "openai", finish_reason="length"),
        "local model": Completion("Paris.", "m", "evermind"),
    }
    for why, completion in cases.items():
        result = engine.collect(ask("capital of France?"), completion)
        assert not result.stored and why in result.reason, (why, result.reason)
    tool_request = ChatRequest(
        model="gpt",
        messages=(Message("user", "weather?"), Message("tool", "sunny", tool_call_id="c")),
    )
    assert "uses tools" in engine.collect(tool_request, good).reason
    assert engine.collect(ask("Capital of   FRANCE?"), good).stored
    # Normalised: case and spacing do not make a new prompt.
    assert not engine.collect(ask("capital of france?"), good).stored
    assert prompt_hash("Capital of   FRANCE?") == prompt_hash("capital of france?")
    assert engine.count() == 1
    engine.close()


def test_fine_tune_lowers_the_held_out_loss_and_promotes(collected: Path, tmp_path: Path) -> None:
    base = tmp_path / "base.evermind"
    base.write_bytes(tiny_package("student", "1.0.0", steps=30, d_model=32))
    out = tmp_path / "distilled.evermind"
    with DistillationEngine(collected) as engine:
        result = engine.fine_tune(
            base, out, FineTuneConfig(steps=60, lr=5e-3, seq_len=32), corpus=TEXT
        )
    assert result.promoted, result.reason
    assert result.held_out_pairs >= 4 and result.train_pairs >= 18
    assert result.held_out_after is not None
    assert result.held_out_after < result.held_out_before - 0.5
    assert result.rehearsal_before is not None and result.rehearsal_after is not None
    new = read_package(out.read_bytes())
    assert new.version == "1.0.1" and new.name == "student"
    assert "distilled from" in new.manifest["training"]["corpus"]


# The lr=50 run is meant to blow up: its overflow warnings are the point, not a defect.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_rollback_keeps_the_previous_package(collected: Path, tmp_path: Path) -> None:
    previous = tiny_package("student", "1.0.0", steps=30, d_model=32)
    served = tmp_path / "served.evermind"
    served.write_bytes(previous)
    with DistillationEngine(collected) as engine:
        idle = engine.fine_tune(served, served, FineTuneConfig(steps=0), corpus=TEXT)
        assert not idle.promoted and "0 steps" in idle.reason
        assert served.read_bytes() == previous
        wild = engine.fine_tune(
            served, served, FineTuneConfig(steps=20, lr=50.0, seq_len=32), corpus=TEXT
        )
        assert not wild.promoted and "previous package stays" in wild.reason
        assert served.read_bytes() == previous
        strict = engine.fine_tune(
            served,
            served,
            FineTuneConfig(steps=10, seq_len=32, min_improvement=100.0),
            corpus=TEXT,
        )
        assert not strict.promoted and "does not beat" in strict.reason
        assert served.read_bytes() == previous
    assert not list(tmp_path.glob(".*tmp*"))  # no half-written file left behind


def test_the_distill_command(
    collected: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base.evermind"
    base.write_bytes(tiny_package("student", "1.0.0", steps=30, d_model=32))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "new.evermind"
    argv = ["distill", "--collected", str(collected), "--package", str(base), "--out", str(out)]
    argv += ["--steps", "40", "--lr", "5e-3", "--seq-len", "32", "--corpus", str(corpus)]
    assert cli_main(argv) == 0
    captured = capsys.readouterr()
    line = json.loads(captured.out.strip().splitlines()[-1])
    assert line["promoted"] is True and out.is_file()
    assert line["held_out_after"] < line["held_out_before"]
    assert f"{len(CITIES)} collected pair(s)" in captured.err
    assert cli_main([*argv[:-4], "--steps", "0", "--out", str(tmp_path / "no.evermind")]) == 0
    assert not (tmp_path / "no.evermind").exists()
