"""Tests of the contrastive embedding tuning (evermind.train.contrastive, tune-embedder).

The gradients (InfoNCE, pooling, and the whole model through ``CpuMamba.backward_hidden``) are
checked in float64 against central finite differences, as in ``test_model_cpu.py``. The
tuning itself is checked by what it is for: after tuning, a crop of a text finds its own text
among the others more often than before.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest

import evermind
from evermind.errors import ConfigError, ShapeError
from evermind.memory import MemoryStore
from evermind.memory.sqlite_backend import SQLiteBackend
from evermind.model.cpu import CpuMamba
from evermind.ops.pool import lengths_of_mask, pool_bwd, pool_fwd
from evermind.package import read_package
from evermind.train.contrastive import (
    TuneConfig,
    crop_view,
    info_nce,
    load_texts,
    tune_embedder,
)
from tests import procs
from tests.factories import run_sync, tiny_package
from tests.unit.test_model_cpu import TINY, check_grads, numeric_grad, random_params, rel_error

GRAD_RTOL = 1e-6

#: Short distinct "memories": each has its own words, so crops can find their text.
FACTS = [
    "the staging database runs on host pg-stage-2 in the eu-west region",
    "deploys to production need two approvals from the routing team leads",
    "the nightly batch job exports route plans to the s3 bucket tessera-plans",
    "on-call engineers page through pagerduty and acknowledge within five minutes",
    "the python services use version 3.12 and are formatted with black at 100 columns",
    "the kafka topic route-events keeps seven days of messages for replay",
    "customer invoices are generated on the first business day of every month",
    "the mobile app caches the last three routes for offline drivers",
]


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_info_nce_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    a, b = unit_rows(rng, 5, 4), unit_rows(rng, 5, 4)
    loss, da, db = info_nce(a, b, 0.3)
    assert loss > 0
    check_grads(
        "info_nce",
        lambda: info_nce(a, b, 0.3)[0],
        {"a": (a, da), "b": (b, db)},
    )


def test_info_nce_is_low_for_matched_and_high_for_swapped_pairs() -> None:
    rng = np.random.default_rng(1)
    a = unit_rows(rng, 6, 8)
    matched = info_nce(a, a, 0.05)[0]
    swapped = info_nce(a, a[::-1].copy(), 0.05)[0]
    assert matched < 0.1 < np.log(6) < swapped
    with pytest.raises(ShapeError, match="views must both be"):
        info_nce(a, a[:3], 0.05)


def test_pooling_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(2)
    hidden = rng.standard_normal((3, 5, 4))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=bool)
    weights = rng.standard_normal((3, 4))

    lengths = lengths_of_mask(mask)

    def loss() -> float:
        return float(np.sum(pool_fwd(hidden, lengths) * weights))

    unit = pool_fwd(hidden, lengths)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0)
    dhidden = pool_bwd(hidden, lengths, weights)
    assert np.all(dhidden[~mask] == 0), "padding must get no gradient"
    check_grads("pool", loss, {"hidden": (hidden, dhidden)})


def test_whole_model_contrastive_gradient_matches_finite_differences() -> None:
    """The loss tune_embedder minimises, differentiated through every weight of the model."""
    model = CpuMamba(TINY, random_params(TINY, 5), dtype=np.float64)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, TINY.vocab_size, (4, 5))
    mask = np.ones((4, 5), dtype=bool)
    mask[1, 3:] = False
    mask[2, 4] = False

    def loss_and_grads() -> tuple[float, dict[str, np.ndarray]]:
        hidden, cache = model.hidden_train(ids)
        lengths = lengths_of_mask(mask)
        unit = pool_fwd(hidden, lengths)
        value, da, db = info_nce(unit[:2], unit[2:], 0.5)
        return value, model.backward_hidden(
            cache, pool_bwd(hidden, lengths, np.concatenate([da, db]))
        )

    _, grads = loss_and_grads()
    errors = {}
    for name, param in model.params.items():
        numeric = numeric_grad(lambda: loss_and_grads()[0], param)
        errors[name] = rel_error(grads[name], numeric)
    for name, err in errors.items():
        print(f"contrastive d[{name}]: rel err {err:.2e}")
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] < GRAD_RTOL, f"{worst}: rel err {errors[worst]:.2e}"
    with pytest.raises(ShapeError, match="dhidden has shape"):
        model.backward_hidden(model.hidden_train(ids)[1], np.zeros((4, 5, TINY.d_model + 1)))


def test_crop_view_keeps_a_contiguous_run_of_words() -> None:
    rng = random.Random(0)
    text = " ".join(f"w{i}" for i in range(40))
    for _ in range(50):
        view = crop_view(text, rng, 0.2, 0.6, 0.0)
        words = view.split()
        assert 8 <= len(words) <= 24
        first = int(words[0][1:])
        assert words == [f"w{i}" for i in range(first, first + len(words))]
    # A text shorter than MIN_WORDS is kept whole (before dropping), and never dropped empty.
    assert crop_view("one two", rng, word_drop=0.0) == "one two"
    assert all(
        crop_view("one two", rng, word_drop=0.9) in {"one", "two", "one two"} for _ in range(20)
    )
    assert all(crop_view("solo", rng, word_drop=0.9) == "solo" for _ in range(20))


def crop_retrieval_accuracy(model: evermind.Model, seed: int) -> float:
    """Share of random crops whose nearest full text (by cosine) is the text they came from."""
    rng = random.Random(seed)
    crops = [crop_view(fact, rng, 0.3, 0.5, 0.0) for fact in FACTS for _ in range(3)]
    owners = [i for i in range(len(FACTS)) for _ in range(3)]
    sims = model.embed(crops) @ model.embed(FACTS).T
    return float(np.mean(sims.argmax(axis=1) == np.array(owners)))


def test_tuning_makes_crops_find_their_text(tmp_path: Path) -> None:
    path = tmp_path / "tiny.evermind"
    path.write_bytes(tiny_package(d_model=32))
    model = evermind.load(path)
    before = crop_retrieval_accuracy(model, seed=11)
    result = tune_embedder(model, FACTS, TuneConfig(steps=60, batch_size=8, lr=3e-3, seed=1))
    after = crop_retrieval_accuracy(model, seed=11)
    print(
        f"crop -> own text: {before:.2f} before, {after:.2f} after; "
        f"loss {result.first_loss:.3f} -> {result.final_loss:.3f}"
    )
    assert result.texts == len(FACTS) and len(result.losses) == 60
    assert result.final_loss < result.first_loss
    assert after > before and after >= 0.75


def test_tune_rejects_too_few_texts_and_bad_config() -> None:
    model = evermind.load(tiny_package())
    with pytest.raises(ConfigError, match="at least 2"):
        tune_embedder(model, ["only one text here", "no"], TuneConfig(steps=1))
    with pytest.raises(ConfigError, match="temperature"):
        TuneConfig(temperature=0.0)
    with pytest.raises(ConfigError, match="min_crop"):
        TuneConfig(min_crop=0.8, max_crop=0.5)


def test_load_texts_from_jsonl_text_and_memory_file(tmp_path: Path) -> None:
    jsonl = tmp_path / "notes.jsonl"
    jsonl.write_text('"a plain string text"\n\n{"content": "an object text"}\n{"text": "t"}\n')
    assert load_texts(jsonl) == ["a plain string text", "an object text", "t"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "fine"}\n{"content": 3}\n')
    with pytest.raises(ConfigError, match="line 2"):
        load_texts(bad)
    paragraphs = tmp_path / "notes.txt"
    paragraphs.write_text("first paragraph\nwrapped here\n\nsecond one\n")
    assert load_texts(paragraphs) == ["first paragraph wrapped here", "second one"]
    lines = tmp_path / "lines.txt"
    lines.write_text("line one\nline two\n")
    assert load_texts(lines) == ["line one", "line two"]
    with pytest.raises(ConfigError, match="no such file"):
        load_texts(tmp_path / "missing.txt")

    database = tmp_path / "memory.db"

    async def fill() -> None:
        store = MemoryStore(SQLiteBackend(database, namespace="default/default"))
        await store.remember("k1", "the first memory")
        await store.remember("k2", "the second memory")
        await store.remember("gone", "forgotten soon")
        await store.forget("gone")
        other = MemoryStore(SQLiteBackend(database, namespace="acme/default"))
        await other.remember("k3", "another tenant's memory")

    run_sync(fill())
    assert load_texts(database) == ["the first memory", "the second memory"]
    assert load_texts(database, "acme/default") == ["another tenant's memory"]
    with pytest.raises(ConfigError, match="no live memories"):
        load_texts(database, "nobody/default")
    not_memory = tmp_path / "other.db"
    not_memory.write_bytes(b"")
    with pytest.raises(ConfigError, match="not an Evermind memory file"):
        load_texts(not_memory)


def test_tune_embedder_command_writes_a_verified_package(tmp_path: Path) -> None:
    source = tmp_path / "in.evermind"
    source.write_bytes(tiny_package())
    texts = tmp_path / "facts.txt"
    texts.write_text("\n".join(FACTS))
    out = tmp_path / "out.evermind"
    done = procs.run(
        [sys.executable, "-m", "evermind.cli", "tune-embedder", "--model", str(source),
         "--texts", str(texts), "--steps", "3", "--batch-size", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["model"] == "tiny:0.1.0-tuned" and summary["texts"] == len(FACTS)
    package = read_package(out.read_bytes())
    tuning = package.manifest["training"]["embedding_tuning"]
    assert tuning["objective"] == "infonce-crops" and tuning["steps"] == 3
    assert package.manifest["training"]["corpus"] == "tests.factories.TEXT"
    before = evermind.load(source).embed(FACTS[:2])
    after = evermind.load(out).embed(FACTS[:2])
    assert not np.allclose(before, after), "tuning must change the embeddings"
    missing = procs.run(
        [sys.executable, "-m", "evermind.cli", "tune-embedder", "--model", str(source),
         "--texts", str(tmp_path / "nope.txt"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert missing.returncode != 0 and "no such file" in missing.stderr
    # Without --texts: the memory file evermind mcp and the runtime use.
    memory_file = tmp_path / "runtime.db"

    async def fill() -> None:
        store = MemoryStore(SQLiteBackend(memory_file, namespace="default/default"))
        for index, fact in enumerate(FACTS):
            await store.remember(f"fact-{index}", fact)

    run_sync(fill())
    default = procs.run(
        [sys.executable, "-m", "evermind.cli", "tune-embedder", "--model", str(source),
         "--steps", "2", "--batch-size", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "EVERMIND_MEMORY_FILE": str(memory_file)},
    )  # fmt: skip
    assert default.returncode == 0, default.stderr
    assert json.loads(default.stdout)["texts"] == len(FACTS)
    assert str(memory_file) in default.stderr
