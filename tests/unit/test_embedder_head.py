"""The embedding head (embedder.safetensors + manifest 'embedder'): round trip, verification,
and the same vectors from the numpy path (Model.embed) and the pure-Python one (apply_head)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

import evermind
from evermind.errors import ConfigError, PackageError
from evermind.model.inference import apply_head_rows
from evermind.package import EmbedderHead, apply_head, read_package, write_package
from evermind.package.head import HEAD_MEMBER
from evermind.train.distill import fit_centre, fit_projection, package_bytes
from tests.factories import tiny_package
from tests.unit.test_package_support import tiny_package_kwargs
from tests.unit.test_package_verify import members_of, rebuild

D = 8  # tiny_package_kwargs' d_model


def _head(dim: int | None = 5, seed: int = 0) -> EmbedderHead:
    rng = np.random.default_rng(seed)
    proj = rng.normal(size=(dim, D)).tolist() if dim else None
    return EmbedderHead.from_lists(rng.normal(size=D).tolist(), proj, "distill", "teacher/x")


@pytest.mark.parametrize("dim", [None, 5, 12])
def test_head_round_trips_through_the_package(dim: int | None) -> None:
    head = _head(dim)
    package = read_package(write_package(**tiny_package_kwargs(), embedder=head))
    got = package.embedder
    assert got is not None
    assert got.dim == (dim or D) and got.method == "distill" and got.teacher == "teacher/x"
    assert list(got.mean.to_float32()) == list(head.mean.to_float32())
    assert (got.projection is None) == (dim is None)
    assert package.manifest["embedder"]["dim"] == got.dim
    with zipfile.ZipFile(io.BytesIO(write_package(**tiny_package_kwargs(), embedder=head))) as z:
        assert HEAD_MEMBER in z.namelist()


def test_package_without_head_is_unchanged() -> None:
    data = write_package(**tiny_package_kwargs())
    package = read_package(data)
    assert package.embedder is None and "embedder" not in package.manifest
    assert HEAD_MEMBER not in members_of(data)


def test_tampered_or_missing_head_is_refused() -> None:
    members = members_of(write_package(**tiny_package_kwargs(), embedder=_head()))
    altered = dict(members)
    altered[HEAD_MEMBER] = members[HEAD_MEMBER][:-4] + b"\0\0\0\0"
    with pytest.raises(PackageError, match="sha256"):
        read_package(rebuild(altered, rehash=False))
    missing = {k: v for k, v in members.items() if k != HEAD_MEMBER}
    with pytest.raises(PackageError, match="embedder"):
        read_package(rebuild(missing))
    manifest = json.loads(members["manifest.json"])
    manifest["embedder"]["dim"] = 7
    wrong = {**members, "manifest.json": json.dumps(manifest).encode()}
    with pytest.raises(PackageError, match="dim"):
        read_package(rebuild(wrong))
    with pytest.raises(PackageError, match="d_model"):
        write_package(**tiny_package_kwargs(), embedder=EmbedderHead.from_lists([0.0] * 3))


def test_pure_python_and_numpy_heads_agree() -> None:
    rng = np.random.default_rng(1)
    raw = rng.normal(size=(4, D)).astype(np.float32)
    for head in (_head(5), _head(None), None):
        rows = apply_head_rows(head, raw)
        for r in range(4):
            np.testing.assert_allclose(apply_head(head, raw[r].tolist()), rows[r], atol=1e-5)


def test_model_embeds_through_its_head_and_centring_decorrelates() -> None:
    model = evermind.load(tiny_package(steps=3))
    words = ["cats", "dogs", "files", "docker", "pizza"]
    texts = [f"note {i} about {w}" for i, w in enumerate(words)]
    raw = model.embed_raw(texts)
    assert np.allclose(model.embed(texts), raw)  # no head: as before
    centred = evermind.load(package_bytes(model, fit_centre(model, texts), "0.1.1", "test"))
    vec = centred.embed(texts)
    np.testing.assert_allclose(vec, apply_head_rows(centred.package.embedder, raw), atol=1e-5)
    off = ~np.eye(len(texts), dtype=bool)
    assert (vec @ vec.T)[off].mean() < (raw @ raw.T)[off].mean()


def test_fit_projection_is_least_squares() -> None:
    rng = np.random.default_rng(2)
    raw = rng.normal(size=(200, 6))
    w_true = rng.normal(size=(3, 6))
    mu, w = fit_projection(raw, (raw - raw.mean(0)) @ w_true.T, ridge=0.0)
    np.testing.assert_allclose(mu, raw.mean(0))
    np.testing.assert_allclose(w, w_true, atol=1e-8)


def test_transformers_still_loads_a_package_with_a_head(tmp_path) -> None:  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip(
        "transformers",
        reason="the Hugging Face interop check needs transformers (make test installs it)",
    )
    data = write_package(**tiny_package_kwargs(), embedder=_head(5))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(tmp_path)
    assert (tmp_path / HEAD_MEMBER).is_file()
    model = transformers.MambaForCausalLM.from_pretrained(tmp_path)
    assert model.config.hidden_size == D


def test_tuning_stage_lowers_the_cosine_loss_to_the_teacher() -> None:
    from evermind.train.distill import DistillConfig, tune_towards

    model = evermind.load(tiny_package(steps=3))
    words = ["cats", "dogs", "files", "docker", "pizza", "trains", "rain", "tea"]
    texts = [f"a note about {w} and more {w}" for w in words]
    rng = np.random.default_rng(4)
    target = rng.normal(size=(len(texts), 6))
    target /= np.sqrt((target**2).sum(1, keepdims=True))
    raw = model.embed_raw(texts).astype(np.float64)
    mu, w = fit_projection(raw, target, 1e-2)
    config = DistillConfig(tune_steps=40, tune_batch=8, tune_lr=3e-3)
    losses = tune_towards(model, texts, target, mu, w, config)
    assert np.mean(losses[-5:]) < losses[0] - 0.01


def _token_head(dim: int | None, vocab: int, seed: int = 3) -> EmbedderHead:
    rng = np.random.default_rng(seed)
    width = dim or D
    proj = rng.normal(size=(dim, D)).tolist() if dim else None
    return EmbedderHead.from_lists(
        rng.normal(size=D).tolist(),
        proj,
        "distill",
        "teacher/x",
        rng.normal(size=(vocab, width)).tolist(),
        rng.uniform(0.5, 3.0, size=vocab).tolist(),
    )


def _vocab() -> int:
    return int(tiny_package_kwargs()["config"]["vocab_size"])


@pytest.mark.parametrize("dim", [None, 5])
def test_token_term_round_trips_and_both_paths_agree(dim: int | None) -> None:
    vocab = _vocab()
    head = _token_head(dim, vocab)
    package = read_package(write_package(**tiny_package_kwargs(), embedder=head))
    got = package.embedder
    assert got is not None and got.vocab == vocab and package.manifest["embedder"]["tokens"]
    rng = np.random.default_rng(5)
    raw = rng.normal(size=(4, D)).astype(np.float32)
    encoded = [[1, 2, 2, 3], [vocab - 1], [], [0, 5, 5, 5, 1]]
    rows = apply_head_rows(got, raw, encoded)
    for r in range(4):
        np.testing.assert_allclose(apply_head(got, raw[r].tolist(), encoded[r]), rows[r], atol=1e-5)
    # The term is the IDF-weighted mean of the ids' rows, added before normalising.
    table = np.asarray(got.tokens.to_float32()).reshape(vocab, -1)  # type: ignore[union-attr]
    weights = np.asarray(got.token_weights.to_float32())  # type: ignore[union-attr]
    base = raw[0].astype(np.float64) - np.asarray(got.mean.to_float32())
    if got.projection is not None:
        base = base @ np.asarray(got.projection.to_float32()).reshape(dim, D).T
    ids = encoded[0]
    term = (weights[ids, None] * table[ids]).sum(0) / weights[ids].sum()
    expected = (base + term) / np.linalg.norm(base + term)
    np.testing.assert_allclose(rows[0], expected, atol=1e-5)
    # An empty text adds nothing; an id outside the table is refused, never wrapped.
    assert np.allclose(rows[2], apply_head_rows(_without_tokens(got), raw[2:3])[0], atol=1e-6)
    with pytest.raises(PackageError, match="outside"):
        apply_head(got, raw[0].tolist(), [vocab])
    with pytest.raises(ConfigError, match="ids"):
        apply_head_rows(got, raw)


def _without_tokens(head: EmbedderHead) -> EmbedderHead:
    return EmbedderHead(head.mean, head.projection, head.method, head.teacher)


def test_a_bad_token_term_is_refused() -> None:
    vocab = _vocab()
    with pytest.raises(PackageError, match="vocab_size"):
        write_package(**tiny_package_kwargs(), embedder=_token_head(5, vocab + 1))
    head = _token_head(5, vocab)
    with pytest.raises(PackageError, match="together"):
        EmbedderHead(head.mean, head.projection, "distill", "", head.tokens, None)
    with pytest.raises(PackageError, match="shape"):
        EmbedderHead(head.mean, head.projection, "distill", "", _token_head(4, vocab).tokens,
                     head.token_weights)  # fmt: skip
    bad = [1.0] * vocab
    bad[3] = 0.0
    with pytest.raises(PackageError, match="> 0"):
        EmbedderHead.from_lists(
            list(head.mean.to_float32()), None, "distill", "", [[0.0] * D] * vocab, bad
        )
    # The manifest must announce the tensors it holds, and vice versa.
    members = members_of(write_package(**tiny_package_kwargs(), embedder=head))
    manifest = json.loads(members["manifest.json"])
    del manifest["embedder"]["tokens"]
    with pytest.raises(PackageError, match="implies"):
        read_package(rebuild({**members, "manifest.json": json.dumps(manifest).encode()}))
    manifest["embedder"]["tokens"] = "yes"
    with pytest.raises(PackageError, match="tokens"):
        read_package(rebuild({**members, "manifest.json": json.dumps(manifest).encode()}))


def test_the_joint_fit_recovers_a_linear_token_embedder() -> None:
    """When the teacher is exactly ``W x + bag T``, the joint fit finds it (tiny ridge)."""
    from evermind.model.inference import token_bags
    from evermind.train.distill import DistillConfig, fit_with_tokens, token_weights

    rng = np.random.default_rng(6)
    vocab, n, d, e = 12, 400, 4, 3
    encoded = [list(rng.integers(0, vocab, size=rng.integers(1, 6))) for _ in range(n)]
    weights = token_weights(encoded, vocab)
    x = rng.normal(size=(n, d))
    w_true, t_true = rng.normal(size=(e, d)), rng.normal(size=(vocab, e))
    target = x @ w_true.T + token_bags(weights, encoded, vocab) @ t_true
    config = DistillConfig(token_ridge=1e-9)
    w, table = fit_with_tokens(x, encoded, target, np.zeros((vocab, e)), weights, config)
    np.testing.assert_allclose(w, w_true, atol=1e-4)
    np.testing.assert_allclose(table, t_true, atol=1e-3)
