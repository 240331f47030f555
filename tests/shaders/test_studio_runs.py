"""Work never lost, natively: time-based checkpoints, earlier runs kept (listed, reopened,
deleted), the whole session restored after a reload, and numbers with their meaning."""

from __future__ import annotations

import asyncio

import pytest

from evermind.studio import api
from evermind.studio.session import KEEP_RUNS, Session
from tests.factories import TEXT
from tests.shaders.studio_rpc import call

TINY = {"d_model": 16, "n_layer": 2, "d_state": 4}
RUN = {"config": TINY, "batch_size": 2, "seq_len": 16, "lr": 1e-2}


def test_the_first_checkpoint_is_time_based_then_by_steps(events) -> None:
    call("corpus_add", name="t.txt", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    # 0 s before the first checkpoint: it lands after step 1; the next at the step mark.
    call("train_start", steps=5, checkpoint_every=4, first_checkpoint_s=0, checkpoint_s=999, **RUN)
    steps = [e["step"] for e in events if e["event"] == "train-checkpoint"]
    assert steps == [1, 4, 5]


def test_start_keeps_earlier_runs_which_reopen_and_delete(events) -> None:
    call("corpus_add", name="t.txt", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    first = call("train_start", steps=3, checkpoint_every=3, **RUN)
    call("train_start", steps=2, checkpoint_every=2, seed=1, **RUN)
    runs = call("runs_list")["runs"]
    assert [(r["current"], r["step"], r["steps"]) for r in runs] == [(True, 2, 2), (False, 3, 3)]
    assert runs[1]["loss"] == pytest.approx(first["final_loss"], rel=1e-5)
    assert runs[1]["preset"] == "custom"  # a custom size is listed as such
    # More starts keep only the latest KEEP_RUNS runs.
    for seed in range(2, 2 + KEEP_RUNS):
        call("train_start", steps=1, checkpoint_every=1, seed=seed, **RUN)
    assert len(call("runs_list")["runs"]) == KEEP_RUNS
    # Reopen an earlier run: it becomes current, the current one is kept, and it resumes.
    older = call("runs_list")["runs"][-1]
    restored = call("run_open", id=older["id"])
    assert restored["summary"]["step"] == older["step"]
    runs = call("runs_list")["runs"]
    assert runs[0]["id"] == older["id"] and runs[0]["current"] and len(runs) == KEEP_RUNS
    left = call("run_delete", id=runs[-1]["id"])["runs"]
    assert [r["id"] for r in left] == [r["id"] for r in runs[:-1]]
    # Deleting the current run (the Train panel's Discard) keeps the earlier ones.
    assert call("session_status")["run_id"] == left[0]["id"]
    after = call("run_delete", id=left[0]["id"])["runs"]
    assert [r["id"] for r in after] == [r["id"] for r in left[1:]]
    assert not call("session_status")["has_checkpoint"]


def test_a_reload_restores_corpus_tokenizer_settings_and_history(events) -> None:
    call("corpus_add", name="notes.md", text=TEXT)
    call("corpus_add", name="more.txt", text=TEXT.upper())
    tok = call("tokenizer_train", vocab_size=4000)
    assert tok["requested"] == 4000 and tok["vocab_size"] < 4000
    assert "distinct merges" in tok["short_reason"] and "asked for 4,000" in tok["short_reason"]
    done = call("train_start", steps=4, checkpoint_every=2, **RUN)
    kv = asyncio.run(api.session().kv())
    fresh = Session(lambda *a, **k: None)
    fresh._kv = kv
    back = asyncio.run(fresh.restore())
    assert back["restored"] and back["summary"]["losses"] == done["losses"]
    assert [s["name"] for s in back["corpus"]["sources"]] == ["notes.md", "more.txt"]
    assert back["tokenizer"]["vocab_size"] == tok["vocab_size"]
    assert back["tokenizer"]["short_reason"] == tok["short_reason"]
    assert back["settings"] == {
        "preset": "custom",
        "config": TINY,
        "block": "mamba1",
        "cortex": None,
        "steps": 4,
        "lr": 1e-2,
        "batch_size": 2,
        "seq_len": 16,
    }
    assert back["summary"]["state"] == "finished"
    # The notice says what came back, down to the embedder phase that has not run yet.
    assert back["notice"] == (
        "Restored from this browser's storage: the corpus, the tokenizer and the run at "
        "step 4 of 4 (its embedder phase had not run: the Train panel's Embedder button runs it)."
    )
    # Once restored, a second call restores nothing again.
    assert not asyncio.run(fresh.restore())["restored"]
    # After the embedder phase the notice names the embedder that came back with the model.
    call("embedder_centre", limit=16)
    again = Session(lambda *a, **k: None)
    again._kv = kv
    centred = asyncio.run(again.restore())
    assert centred["notice"].endswith(
        "the run at step 4 of 4 with its embedder (centred on the corpus)."
    ), centred["notice"]
    assert again.head is not None and again.head.method == "centre"


def test_similarity_comes_with_the_embedders_calibration(events) -> None:
    call("corpus_add", name="t.txt", text=TEXT * 3)
    call("tokenizer_train", vocab_size=300)
    call("train_start", steps=2, checkpoint_every=2, **RUN)
    sim = call("similarity", a="fox", b="dog")
    assert -1 <= sim["cosine"] <= 1
    assert "calibration" in sim and "pairs" in sim
    if sim["threshold"] is not None:
        assert sim["unrelated"] is not None and sim["threshold"] >= sim["unrelated"]


def test_a_cortex_run_reports_its_routing_restores_and_exports(events) -> None:
    """train_start(cortex=...) trains GpuMamba with the cortex: each train-progress event
    carries the routing, the restored settings keep the cortex, generation runs it per token
    on the GPU and the exported package has it."""
    import base64

    import evermind

    cortex = {"moe_experts": 3, "moe_top_k": 2, "moe_intermediate": 8}
    call("corpus_add", name="t.txt", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    with pytest.raises(Exception, match="unknown cortex keys"):
        call("train_start", steps=1, cortex={"experts": 3}, **RUN)
    call("train_start", steps=3, checkpoint_every=3, cortex=cortex, **RUN)
    progress = [e for e in events if e["event"] == "train-progress"]
    routing = progress[-1]["routing"]
    assert set(routing["layers"]) == {"0", "1"} and routing["aux_loss"] > 0
    for layer in routing["layers"].values():
        assert len(layer["fractions"]) == 3 and abs(sum(layer["fractions"]) - 2) < 1e-5
    kv = asyncio.run(api.session().kv())
    fresh = Session(lambda *a, **k: None)
    fresh._kv = kv
    back = asyncio.run(fresh.restore())
    assert back["settings"]["cortex"]["moe_experts"] == 3
    generated = call("generate", prompt="The quick", max_new_tokens=6, temperature=0)
    assert generated["device"] == "gpu"
    exported = call("export_package", name="cortex", version="0.0.1")
    model = evermind.load(base64.b64decode(exported["data_b64"]))
    assert model.config.moe_experts == 3 and model.config.moe_intermediate == 8
    native = model.complete("The quick", max_new_tokens=6, temperature=0).text
    assert native == generated["text"]


def test_a_cancelled_centring_keeps_the_head_it_had(events) -> None:
    """The embedder phase's centring stops at the next batch on ``operation_cancel`` and sets
    no head: the model embeds as before, and a second centring completes."""
    import json

    from evermind.studio import operations

    call("corpus_add", name="t.txt", text=TEXT * 3)
    call("tokenizer_train", vocab_size=300)
    call("train_start", steps=2, checkpoint_every=2, **RUN)
    before = call("embedder_info")

    def cancel_on_first_batch(text: str) -> None:
        event = json.loads(text)
        events.append(event)
        if event["event"] == "embedder-progress" and event.get("stage") == "centre":
            operations.cancel("embedder")  # what the page's Cancel sends, mid-phase

    api.set_emitter(cancel_on_first_batch)
    envelope = json.loads(asyncio.run(api.call("embedder_centre", json.dumps({"limit": 32}))))
    assert not envelope["ok"] and envelope["error"]["type"] == "Cancelled", envelope
    done = [e["step"] for e in events if e.get("stage") == "centre"]
    assert done and max(done) < 32, done  # stopped after its first batch
    assert call("embedder_info") == before  # no head, the same fingerprint
    api.set_emitter(lambda s: events.append(json.loads(s)))
    assert call("embedder_centre", limit=32)["method"] == "centre"
    assert call("embedder_info")["method"] == "centre"
