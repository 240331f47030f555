"""The base embedder's build on a small sample: distil, fine-tune, save, load, embed.

The teacher is the real all-MiniLM-L6-v2. To stay fast, the vocabulary is the first 2,100
entries of the teacher's own (the special tokens, single characters and the commonest words,
so ids still mean what they mean to the teacher), the corpus 100 sentences, D = 16.
"""

from __future__ import annotations

import numpy as np
import pytest

from evermind.embedder.build import BuildConfig, build
from evermind.embedder.finetune import Bags, SparseAdam, bag_sums, cosine_loss, loss_of
from evermind.embedder.static import StaticEmbedder
from evermind.embedder.wordpiece import WordPiece
from evermind.errors import ConfigError
from evermind.train.teachers import minilm_available, minilm_dir

pytestmark = pytest.mark.skipif(not minilm_available(), reason="needs the MiniLM teacher")

SUBJECTS = ["the cat", "my sister", "a small boat", "the new house", "our team", "this city"]
VERBS = ["is near", "was made by", "can see", "will move to", "has been in", "goes into"]
OBJECTS = ["the old river", "a red door", "the school", "his first car", "the big game"]


def _corpus(limit: int) -> list[str]:
    texts = [f"{s} {v} {o}." for s in SUBJECTS for v in VERBS for o in OBJECTS]
    texts += [t.replace(".", " again.") for t in texts[:60]]
    return texts[:limit]


@pytest.fixture(scope="module")
def small_vocab() -> WordPiece:
    vocab = (minilm_dir() / "vocab.txt").read_text("utf-8").split("\n")[:2100]
    return WordPiece(vocab)


@pytest.fixture(scope="module")
def teacher():
    from evermind.train.teachers import MiniLMTeacher

    return MiniLMTeacher(batch_size=256)


def test_build_writes_a_file_that_loads_and_embeds(small_vocab, teacher, tmp_path) -> None:
    config = BuildConfig(dims=16, storage="int8", corpus_limit=100, steps=20, batch_size=32,
                         learning_rate=0.02, holdout=0.2)  # fmt: skip
    seen: list[str] = []
    embedder, report = build(
        teacher, small_vocab, config, tmp_path / "work", _corpus, lambda s, d, n: seen.append(s)
    )
    assert {"distil tokens", "corpus", "teacher targets"} <= {s.split(" (")[0] for s in seen}
    tuned = report["fine_tune"]
    print(report["fine_tune_history"])
    assert tuned["held_out_best"] < tuned["held_out_initial"]  # the fine-tune learned
    size = embedder.save(tmp_path / "base.safetensors")
    loaded = StaticEmbedder.load(tmp_path / "base.safetensors")
    assert size < 2_100 * 16 + 64_000 and loaded.dims == 16 and loaded.storage == "int8"
    texts = ["the cat is near the old river.", "our team goes into the big game"]
    vectors = loaded.embed(texts)
    assert vectors.shape == (2, 16) and np.allclose(vectors, embedder.embed(texts), atol=1e-6)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # a rerun resumes from the work folder: no teacher call for tokens, corpus or targets
    again: list[str] = []
    build(teacher, small_vocab, config, tmp_path / "work", _corpus, lambda s, d, n: again.append(s))
    assert not {"distil tokens", "corpus"} & set(again)


def test_fine_tune_step_lowers_its_own_loss() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(50, 8)).astype(np.float32)
    weight = np.ones(50, np.float32)
    bags = Bags(rng.integers(0, 50, 400), np.arange(0, 400, 10), np.full(40, 10))
    targets = rng.normal(size=(40, 8))
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    rows = np.arange(40)
    before = loss_of(vectors, weight, bags, rows, targets)
    adam = SparseAdam(vectors.shape, 0.05)
    for _ in range(30):
        ids, owner = bags.take(rows)
        _, grad = cosine_loss(bag_sums(vectors, weight, ids, owner, 40), targets)
        unique, inverse = np.unique(ids, return_inverse=True)
        g = np.zeros((len(unique), 8))
        np.add.at(g, inverse, grad[owner] * weight[ids, None])
        adam.step(vectors, unique, g.astype(np.float32))
    after = loss_of(vectors, weight, bags, rows, targets)
    print(f"loss {before:.4f} -> {after:.4f}")
    assert after < before - 0.05


def test_cosine_loss_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(5)
    sums = rng.normal(size=(3, 5))
    targets = rng.normal(size=(3, 5))
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    _, grad = cosine_loss(sums, targets)
    eps = 1e-6
    for i, j in [(0, 0), (1, 3), (2, 4)]:
        bumped = sums.copy()
        bumped[i, j] += eps
        numeric = (cosine_loss(bumped, targets)[0] - cosine_loss(sums, targets)[0]) / eps
        assert abs(numeric - grad[i, j]) < 1e-5


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("dims", 4, "dims"),
        ("storage", "int4", "storage"),
        ("steps", -1, "must be >= 0"),
        ("corpus_limit", 10, "too small"),
    ],
)
def test_bad_config_is_one_line(field: str, value: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as caught:
        BuildConfig(**{field: value}).check()  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--dims", "3"], "--dims must be >= 8, got 3"),
        (["--steps", "-2"], "--steps must be >= 0"),
        (["--corpus-limit", "many"], "'many' is not a whole number"),
        (["--storage", "int4"], "--storage"),
        (["--lr", "5"], "learning_rate in (0, 1)"),
        (["--steps", "10", "--corpus-limit", "5"], "too small to fine-tune"),
    ],
)
def test_command_refuses_bad_arguments_in_one_line(argv, needle, tmp_path, capsys) -> None:
    from evermind.cli import main

    code = main(["build-embedder", "--out", str(tmp_path / "base.safetensors"), *argv])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "base.safetensors.work").exists()
