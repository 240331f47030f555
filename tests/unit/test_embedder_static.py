"""The static embedder: numpy and pure Python agree, the file round-trips, bad input is refused.

A small embedder is made here from random vectors over the real MiniLM vocabulary (the
WordPiece tokenizer is the shipped one), in each storage the file allows.
"""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest

from evermind.embedder.static import StaticEmbedder, make_vectors
from evermind.embedder.wordpiece import WordPiece
from evermind.errors import InputError, PackageError
from evermind.train.teachers import minilm_dir

TEXTS = [
    "The cat sat on the mat.",
    "def embed(texts): return [vector(t) for t in texts]  # code, too",
    "Ünïcödé façade — 東京 and emoji 🎉",
    "",
    "!!!",
    "the the the the",
    "Numbers 3.14159 and 2,718 and 0x1F",
]


@pytest.fixture(scope="module")
def tokenizer() -> WordPiece:
    return WordPiece.from_text((minilm_dir() / "vocab.txt").read_text("utf-8"))


def _embedder(tokenizer: WordPiece, storage: str, dims: int = 37) -> StaticEmbedder:
    rng = random.Random(storage)
    size = tokenizer.vocab_size
    values = array("f", (rng.gauss(0.0, 1.0) for _ in range(size * dims)))
    weight = [rng.uniform(0.1, 2.0) for _ in range(size)]
    return StaticEmbedder(tokenizer, make_vectors(values, (size, dims), storage), weight)


@pytest.mark.parametrize("storage", ["float32", "float16", "int8"])
def test_numpy_and_pure_python_agree(tokenizer: WordPiece, storage: str) -> None:
    embedder = _embedder(tokenizer, storage)
    fast = embedder.embed_numpy(TEXTS)
    slow = np.asarray(embedder.embed_python(TEXTS))
    gap = float(np.max(np.abs(fast - slow)))
    print(f"{storage}: max |numpy - python| = {gap:.2e}")
    assert fast.shape == (len(TEXTS), 37)
    assert gap <= 1e-5
    norms = np.linalg.norm(fast, axis=1)
    assert np.allclose(norms[[0, 1, 2, 4, 5, 6]], 1.0, atol=1e-5)
    assert norms[3] == 0.0  # no tokens: the zero vector, not NaN
    # the weighted mean by hand for one text
    ids = tokenizer.encode(TEXTS[0])
    by_hand = sum(embedder.matrix()[i].astype(np.float64) for i in ids)
    assert np.allclose(fast[0], by_hand / np.linalg.norm(by_hand), atol=1e-6)


def test_file_round_trip(tokenizer: WordPiece, tmp_path) -> None:
    embedder = _embedder(tokenizer, "int8")
    embedder.config["teacher"] = "test"
    size = embedder.save(tmp_path / "base.safetensors")
    assert size == (tmp_path / "base.safetensors").stat().st_size
    loaded = StaticEmbedder.load(tmp_path / "base.safetensors")
    assert loaded.storage == "int8" and loaded.dims == 37
    assert loaded.config["teacher"] == "test"
    assert np.array_equal(loaded.embed_numpy(TEXTS), embedder.embed_numpy(TEXTS))
    assert loaded.n_params == tokenizer.vocab_size * 38


def test_bad_inputs_are_refused_in_one_line(tokenizer: WordPiece, tmp_path) -> None:
    embedder = _embedder(tokenizer, "float32", dims=8)
    with pytest.raises(InputError, match="list of str"):
        embedder.embed("one text")
    with pytest.raises(InputError, match="list of str"):
        embedder.embed_python([b"bytes"])  # type: ignore[list-item]
    with pytest.raises(InputError, match="storage"):
        make_vectors([0.0] * 8, (1, 8), "int4")
    with pytest.raises(PackageError, match="expected"):
        StaticEmbedder(tokenizer, make_vectors([0.0] * 8, (1, 8), "float32"), [1.0])
    with pytest.raises(InputError, match=r"missing\.safetensors"):
        StaticEmbedder.load(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(PackageError) as caught:
        StaticEmbedder.load(tmp_path / "junk.safetensors")
    assert "\n" not in str(caught.value)
    data = embedder.to_bytes().replace(b"evermind-static-embedder", b"evermind-static-embeddex")
    with pytest.raises(PackageError, match="format"):
        StaticEmbedder.from_bytes(data)


def test_the_pools_row_norms_divide_rows_to_unit_length_and_zero_rows_to_zero() -> None:
    """``ops.pool.l2_norms``, the divisor the embedder's numpy path and fine-tune share."""
    import numpy as np

    from evermind.ops.pool import l2_norms

    rows = np.array([[3.0, 4.0], [0.0, 0.0], [1e-30, 0.0]], np.float32)
    norms = l2_norms(rows)
    assert norms.shape == (3, 1) and norms.dtype == np.float64
    assert norms[0, 0] == 5.0 and norms[1, 0] == 1e-12 and norms[2, 0] == 1e-12
    unit = rows / norms
    assert np.allclose(unit[0], [0.6, 0.8]) and not unit[1].any()
