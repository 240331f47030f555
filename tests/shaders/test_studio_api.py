"""The Studio's worker handlers, run natively (wgpu-py + an in-memory store for IndexedDB)."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from evermind.package import read_package
from evermind.studio import api
from evermind.studio.session import Session
from tests.factories import TEXT
from tests.shaders.studio_rpc import call

TINY = {"d_model": 16, "n_layer": 2, "d_state": 4}


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
    steps = [p for p in progress if p.get("stage") is None]  # the distillation's own steps
    assert [p["step"] for p in steps] == list(range(1, 41))
    assert progress[-1].get("stage") == "save"  # then the head is saved with its weights
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


def _agreement(tab: list[list[float]], native) -> float:
    """The lowest cosine between the tab's and the native package's vector of each text."""
    import numpy as np

    a = np.asarray(tab, np.float64)
    b = np.asarray(native, np.float64)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, axis=1)))


NOUNS = ["file", "cache", "model", "memory", "query", "answer", "token", "vector"]
VERBS = ["reads", "stores", "finds", "writes", "keeps", "serves"]
#: A corpus with many distinct sentences (the embedder phase's texts).
VARIED = (
    TEXT
    + "\n\n"
    + " ".join(
        f"The {n} {v} the {NOUNS[(i + 3) % len(NOUNS)]} number {i}."
        for i, (n, v) in enumerate((n, v) for n in NOUNS for v in VERBS)
    )
)

PROBES = [
    "how do I convert 100 US dollars to euros",
    "open the file and read it",
    "what is the capital of Peru",
    "The quick brown fox jumps over the lazy dog.",
]


def test_the_exported_package_embeds_like_the_tab_after_each_embedder_phase(events) -> None:
    """The head the tab trains (distill) or fits (centre) is the package's: native
    ``load(bytes).embed`` gives the tab's vectors."""
    import evermind

    call("corpus_add", name="notes.md", text=VARIED)
    call("tokenizer_train", vocab_size=300)
    call("train_start", config=TINY, steps=3, batch_size=2, seq_len=16, lr=1e-2)
    texts = call("embedder_texts", limit=24)["texts"]
    assert len(texts) == 24 and all(len(t.split()) >= 3 for t in texts)
    assert len(set(texts)) == 24 and "number 4" in texts[-1]  # spread over the corpus
    assert call("embedder_info")["method"] is None
    before = call("embedder_info")["fingerprint"]

    # Teacher-free: centring only.
    centred = call("embedder_centre", limit=24, reason="no runtime URL")
    assert centred["method"] == "centre" and centred["texts"] == len(texts)
    assert centred["reason"] == "no runtime URL"
    info = call("embedder_info")
    assert info["method"] == "centre" and info["fingerprint"] != before
    pkg_bytes = base64.b64decode(call("export_package", name="c", version="0.1.0")["data_b64"])
    pkg = read_package(pkg_bytes)
    assert pkg.manifest["embedder"]["method"] == "centre"
    assert not pkg.manifest["embedder"]["projection"]
    tab = call("embed", texts=PROBES)["vectors"]
    native = evermind.load(pkg_bytes).embed(PROBES)
    agreement = _agreement(tab, native)
    print(f"centre: tab vs native package min cosine {agreement:.6f}")
    assert agreement > 1 - 1e-4

    # Distilled from a (made-up) 6-wide teacher.
    targets = [[float((i * 7 + j * 3) % 5) - 2.0 for j in range(6)] for i in range(len(texts))]
    out = call(
        "embedder_train",
        texts=texts,
        targets=targets,
        steps=8,
        lr=1e-2,
        batch_size=4,
        teacher="teacher/made-up",
    )
    assert out["method"] == "distill" and out["dim"] == 6
    info = call("embedder_info")
    assert info["teacher"] == "teacher/made-up" and info["fingerprint"] != before
    pkg_bytes = base64.b64decode(call("export_package", name="d", version="0.1.0")["data_b64"])
    head = read_package(pkg_bytes).manifest["embedder"]
    assert head["method"] == "distill" and head["teacher"] == "teacher/made-up"
    assert head["dim"] == 6 and head["projection"]
    tab = call("embed", texts=PROBES)["vectors"]
    native = evermind.load(pkg_bytes).embed(PROBES)
    agreement = _agreement(tab, native)
    print(f"distill: tab vs native package min cosine {agreement:.6f}")
    assert len(tab[0]) == 6 and agreement > 1 - 1e-4

    # A reload restores the distilled weights with their head.
    fresh = Session(lambda *a, **k: None)
    fresh._kv = api.session()._kv
    asyncio.run(fresh.restore_from_storage())
    assert fresh.head is not None and fresh.head.method == "distill"
    again = asyncio.run(fresh.embed(PROBES))
    assert _agreement(again, native) > 1 - 1e-4


def test_the_cache_and_memory_re_embed_when_the_embedder_changes(events) -> None:
    """Stored memories and cache entries are embedded again under the new head."""
    from evermind.studio import memory_api

    call("corpus_add", name="notes.md", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    call("train_start", config=TINY, steps=2, batch_size=2, seq_len=16, lr=1e-2)
    tab = memory_api.tab_memory()
    call("cache_store", query="how do I open a file", response="use open()")
    cache_before = asyncio.run(tab.cache())
    store_before = asyncio.run(tab.store())
    call("embedder_centre", limit=16)
    cache_after = asyncio.run(tab.cache())
    store_after = asyncio.run(tab.store())
    assert cache_after is not cache_before and store_after is not store_before
    fingerprint = api.session().embedder_fingerprint
    assert cache_after.fingerprint == fingerprint != cache_before.fingerprint
    hit = call("cache_lookup", query="how do I open a file")
    assert hit["hit"] and fingerprint in hit["ranked_by"]
    # The stored entry's vector is the new embedder's, not the one it was stored under.
    (key,) = cache_after.entries
    (fresh,) = asyncio.run(cache_after._embed(["how do I open a file"]))
    assert cache_after.index.cosine_to(key, fresh) == pytest.approx(1.0, abs=1e-5)
    (head_vector,) = asyncio.run(api.session().embed(["how do I open a file"]))
    assert len(head_vector) == TINY["d_model"]


def test_the_tab_adds_the_token_term_and_the_package_embeds_alike(events) -> None:
    """After distilling, ``embedder_tokens`` scales the teacher's vectors of the vocabulary
    entries into the head's token term when that agrees better with the teacher; the exported
    package embeds exactly as the tab, and a reload keeps the term."""
    import random

    import evermind

    call("corpus_add", name="notes.md", text=VARIED)
    call("tokenizer_train", vocab_size=300)
    call("train_start", config=TINY, steps=3, batch_size=2, seq_len=16, lr=1e-2)
    texts = call("embedder_texts", limit=24)["texts"]
    vocab = call("embedder_vocab")
    assert vocab["ids"] and len(vocab["ids"]) == len(vocab["texts"]) <= 300
    assert all(t.strip() for t in vocab["texts"])
    # A made-up 6-wide teacher that embeds a text as the mean of its tokens' vectors: the token
    # term can explain it, the tiny SSM hardly.
    rng = random.Random(1)
    table = {i: [rng.gauss(0, 1) for _ in range(6)] for i in vocab["ids"]}
    tokenizer = api.session().tokenizer
    targets = []
    for text in texts:
        ids = [i for i in tokenizer.encode(text) if i in table]
        mean = [sum(table[i][d] for i in ids) / len(ids) for d in range(6)]
        norm = sum(x * x for x in mean) ** 0.5
        targets.append([x / norm for x in mean])
    call("embedder_train", texts=texts, targets=targets, steps=8, lr=1e-2, batch_size=4,
         teacher="teacher/made-up")  # fmt: skip
    vectors = [table[i] for i in vocab["ids"]]
    out = call("embedder_tokens", ids=vocab["ids"], vectors=vectors, texts=texts, targets=targets)
    print(
        f"token term: alpha {out['token_alpha']}, agreement {out['agreement_without_tokens']} "
        f"-> {out['agreement']}"
    )
    assert out["tokens"] and out["agreement"] > out["agreement_without_tokens"] + 0.1
    pkg_bytes = base64.b64decode(call("export_package", name="t", version="0.1.0")["data_b64"])
    package = read_package(pkg_bytes)
    assert package.manifest["embedder"]["tokens"] and package.embedder is not None
    assert package.embedder.vocab == 300
    tab = call("embed", texts=PROBES)["vectors"]
    native = evermind.load(pkg_bytes).embed(PROBES)
    assert _agreement(tab, native) > 1 - 1e-4
    fresh = Session(lambda *a, **k: None)
    fresh._kv = api.session()._kv
    asyncio.run(fresh.restore_from_storage())
    assert fresh.head is not None and fresh.head.tokens is not None
    assert _agreement(asyncio.run(fresh.embed(PROBES)), native) > 1 - 1e-4
    # Wrong input is named, not half-applied.
    bad = call_error("embedder_tokens", ids=[0, 0], vectors=vectors[:2], texts=texts,
                     targets=targets)  # fmt: skip
    assert "distinct" in bad


def call_error(fn: str, **kwargs) -> str:
    envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    assert not envelope["ok"], f"{fn} unexpectedly succeeded"
    return str(envelope["error"])


def test_files_sent_to_memory_are_embedded_once_in_batches_by_the_tabs_model(events) -> None:
    """memory_ingest with a model: the chunks embedded in batches (one progress step each),
    every new text embedded once, an unchanged re-send embedding nothing, recall semantic."""
    from evermind.studio.ingest_api import EMBED_BATCH

    call("corpus_add", name="notes.md", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    call("train_start", config=TINY, steps=2, batch_size=2, seq_len=16, lr=1e-2)
    sections = EMBED_BATCH + 3
    doc = "".join(
        f"## Topic {i}\n\nFact number {i} is about the {i}th rack.\n\n" for i in range(sections)
    )
    data = base64.b64encode(doc.encode()).decode()
    first = call("memory_ingest", files=[{"name": "racks.md", "data_b64": data}])
    assert first["added"] == first["chunks"] == sections and first["embeds"] == sections
    steps = [e["done"] for e in events if e["event"] == "memory-ingest-progress"]
    assert steps == [0, EMBED_BATCH, sections, sections], steps
    again = call("memory_ingest", files=[{"name": "racks.md", "data_b64": data}])
    assert again["unchanged"] == sections and again["embeds"] == 0
    changed = base64.b64encode(doc.replace("the 7th rack", "the seventh rack").encode()).decode()
    third = call("memory_ingest", files=[{"name": "racks.md", "data_b64": changed}])
    assert (third["updated"], third["embeds"]) == (1, 1)
    out = call("memory_recall", query="Fact number 7 seventh rack", top_k=3)
    assert out["ranked_by"].startswith("semantic+lexical")
    assert out["hits"][0]["source"] == "racks.md" and "seventh" in out["hits"][0]["content"]


def test_a_cancelled_distillation_puts_the_weights_back(events) -> None:
    """The distillation trains the model's weights in place; a cancel mid-way restores them:
    the model embeds exactly as before, with no head, and a later run distils whole."""
    from evermind.studio import operations

    call("corpus_add", name="notes.md", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    call("train_start", config=TINY, steps=2, batch_size=2, seq_len=16, lr=1e-2)
    texts = ["open a file", "read a file", "a red apple", "green pears", "ripe plums"]
    targets = [[1.0, 0.2 * i, 0.0] if i < 2 else [0.0, 0.2 * i, 1.0] for i in range(len(texts))]
    before = call("embed", texts=texts)["vectors"]
    info = call("embedder_info")

    once = [True]

    def cancel_at_step_5(line: str) -> None:
        event = json.loads(line)
        events.append(event)
        if once and event["event"] == "embedder-progress" and event.get("step") == 5:
            once.clear()
            assert operations.cancel("embedder") is True  # the page's Cancel, mid-run

    api.set_emitter(cancel_at_step_5)
    kwargs = {"texts": texts, "targets": targets, "steps": 40, "lr": 5e-2, "batch_size": 2}
    envelope = json.loads(asyncio.run(api.call("embedder_train", json.dumps(kwargs))))
    assert not envelope["ok"] and envelope["error"]["type"] == "Cancelled", envelope
    steps = [e["step"] for e in events if e["event"] == "embedder-progress"]
    assert steps == [1, 2, 3, 4, 5], steps  # it stopped before step 6, nothing saved
    after = call("embedder_info")
    assert after["method"] is None and after["fingerprint"] == info["fingerprint"], after
    again = call("embed", texts=texts)["vectors"]
    for u, v in zip(before, again, strict=True):
        assert max(abs(a - b) for a, b in zip(u, v, strict=True)) < 1e-6
    out = call("embedder_train", **kwargs)
    assert out["method"] == "distill" and out["dim"] == 3
    assert len(call("embed", texts=texts)["vectors"][0]) == 3
