"""The Studio's worker handlers, run natively (wgpu-py + an in-memory store for IndexedDB)."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from evermind.package import read_package
from evermind.studio import api, rpc
from evermind.studio.session import Session
from tests.factories import TEXT

TINY = {"d_model": 16, "n_layer": 2, "d_state": 4}


@pytest.fixture()
def events(monkeypatch):
    seen: list[dict] = []
    api.set_emitter(lambda s: seen.append(json.loads(s)))
    monkeypatch.setattr(rpc, "_session", None)
    yield seen
    api.set_emitter(None)


def call(fn: str, **kwargs):
    envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    if not envelope["ok"]:
        raise AssertionError(f"{fn} failed: {envelope['error']}")
    return envelope["result"]


def test_whole_studio_flow_natively(events) -> None:
    info = call("corpus_add", name="notes.md", text=TEXT)
    assert info["bytes"] > 1000 and info["sources"][0]["name"] == "notes.md"
    tok = call("tokenizer_train", vocab_size=300)
    assert tok["vocab_size"] <= 300 and tok["train_tokens"] > tok["held_out_tokens"] > 0
    assert any(e["event"] == "tokenizer-progress" for e in events)
    summary = call(
        "train_start", config=TINY, steps=6, batch_size=2, seq_len=16, checkpoint_every=3, lr=1e-2
    )
    assert summary["state"] == "finished" and summary["step"] == 6
    progress = [e for e in events if e["event"] == "train-progress"]
    assert [p["step"] for p in progress] == [1, 2, 3, 4, 5, 6]
    assert all(p["tokens_per_second"] > 0 for p in progress)
    assert sum(e["event"] == "train-checkpoint" for e in events) == 2
    status = call("session_status")
    assert status["has_checkpoint"] and status["step"] == 6

    out = call("generate", prompt="The quick", max_new_tokens=8, temperature=0)
    assert out["tokens"] <= 8
    assert "".join(e["text"] for e in events if e["event"] == "generate-token") == out["text"]
    emb = call("embed", texts=["memory", "cache"])
    assert emb["dim"] == 16 and len(emb["vectors"]) == 2
    sim = call("similarity", a="fox", b="fox")
    assert sim["cosine"] == pytest.approx(1.0, abs=1e-5)
    metrics = call("evaluate")
    assert (
        metrics["perplexity"] > 1 and 0 <= metrics["top1_accuracy"] <= metrics["top5_accuracy"] <= 1
    )
    exported = call("export_package", name="studio-test", version="1.2.3")
    pkg = read_package(base64.b64decode(exported["data_b64"]))
    assert pkg.ref == "evermind/studio-test:1.2.3"
    assert pkg.manifest["training"]["steps"] == 6


def test_pause_checkpoints_and_a_new_session_resumes(events) -> None:
    call("corpus_add", name="t.txt", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    s = api.session()
    kv = asyncio.run(s.kv())

    async def train_and_pause() -> dict:
        task = asyncio.ensure_future(
            api.call(
                "train_start",
                json.dumps(
                    {
                        "config": TINY,
                        "steps": 40,
                        "batch_size": 2,
                        "seq_len": 16,
                        "checkpoint_every": 100,
                    }
                ),
            )
        )
        while not any(e["event"] == "train-progress" and e["step"] >= 3 for e in events):
            await asyncio.sleep(0.01)
        assert api.session().request("pause") == {"state": "pause-requested"}
        return json.loads(await task)["result"]

    paused = asyncio.run(train_and_pause())
    assert paused["state"] == "paused" and 3 <= paused["step"] < 40
    # A reload: a new session over the same storage rebuilds everything and continues.
    fresh = Session(lambda *a, **k: None)
    fresh._kv = kv
    status = asyncio.run(fresh.status())
    assert status["has_checkpoint"] and status["step"] == paused["step"]
    done = asyncio.run(fresh.resume())
    assert done["state"] == "finished" and done["step"] == 40
    assert done["losses"][: paused["step"]] == paused["losses"]


def test_errors_come_back_in_words(events) -> None:
    envelope = json.loads(asyncio.run(api.call("train_start", "{}")))
    assert not envelope["ok"]
    assert envelope["error"] == {
        "type": "ConfigError",
        "message": "train a tokenizer in the Tokenizer panel first",
    }
    envelope = json.loads(
        asyncio.run(api.call("corpus_add", json.dumps({"name": "x.json", "text": "{"})))
    )
    assert envelope["error"]["type"] == "ConfigError" and "x.json:1" in envelope["error"]["message"]


def test_a_native_package_opens_in_the_studio_with_the_same_greedy_text(events) -> None:
    import evermind
    from tests.factories import tiny_package

    data = tiny_package(name="native", steps=30)
    opened = call("package_load", data_b64=base64.b64encode(data).decode())
    assert opened["ref"] == "evermind/native:0.1.0"
    tab = call("generate", prompt="The quick", max_new_tokens=10, temperature=0)["text"]
    assert tab == evermind.load(data).complete("The quick", max_new_tokens=10, temperature=0).text
    metrics = call("evaluate", text="The quick brown fox jumps over the lazy dog.")
    assert metrics["tokens"] > 0


def test_embedder_train_distils_teacher_vectors_on_the_gpu(events) -> None:
    """The tab's model learns a teacher's geometry: two groups of texts, two directions."""
    call("corpus_add", name="notes.md", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    call("train_start", config=TINY, steps=2, batch_size=2, seq_len=16, lr=1e-2)
    group_a = ["open a file", "read a file", "write the file", "close the file"]
    group_b = ["a red apple", "green pears", "ripe bananas", "sweet plums"]
    # A 5-wide "teacher": one direction per group (plus a small per-text offset).
    texts = group_a + group_b
    targets = [
        [1.0, 0.1 * i, 0.0, 0.0, 0.0] if i < 4 else [0.0, 0.0, 1.0, 0.1 * i, 0.0]
        for i in range(len(texts))
    ]
    before = call("embed", texts=texts)["vectors"]
    assert len(before[0]) == 16  # the plain pooled embedding before distillation
    out = call("embedder_train", texts=texts, targets=targets, steps=40, lr=1e-2, batch_size=4)
    progress = [e for e in events if e["event"] == "embedder-progress"]
    assert [p["step"] for p in progress] == list(range(1, 41))
    print(f"embedder loss {out['first_loss']:.4f} -> {out['loss']:.4f}")
    assert out["dim"] == 5 and out["loss"] < 0.5 * out["first_loss"]
    after = call("embed", texts=texts)["vectors"]
    assert len(after[0]) == 5

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    within = min(cos(after[i], after[j]) for g in (range(4), range(4, 8)) for i in g for j in g)
    across = max(cos(after[i], after[j]) for i in range(4) for j in range(4, 8))
    print(f"within-group min cosine {within:.3f}, across-group max {across:.3f}")
    assert within > across
    # The language model shares the weights and still generates.
    assert call("generate", prompt="The", max_new_tokens=3, temperature=0)["tokens"] <= 3
