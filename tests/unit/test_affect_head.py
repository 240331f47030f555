"""The affect head (affect.safetensors + manifest 'affect'): round trip, verification, the
pure-Python and numpy fits agreeing, and the head learning what it is shown."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import evermind
from evermind.cli import main
from evermind.errors import ConfigError, InputError, PackageError
from evermind.model.inference import affect_rows
from evermind.package import AffectHead, affect_scores, read_package, write_package
from evermind.package.affect import AFFECT_MEMBER
from evermind.train.affect import (
    affect_package_bytes,
    fit_affect,
    load_labelled,
    logistic_fit_np,
)
from evermind.train.affect_fit import (
    AffectConfig,
    classification_metrics,
    fit_affect_features,
    logistic_fit_py,
    parse_labelled_lines,
)
from evermind.train.distill import package_bytes
from tests.factories import tiny_package
from tests.unit.test_package_support import tiny_package_kwargs
from tests.unit.test_package_verify import members_of, rebuild

D = 8  # tiny_package_kwargs' d_model
LABELS = ("negative", "neutral", "positive")


def _head(seed: int = 0, labels: tuple[str, ...] = LABELS) -> AffectHead:
    rng = np.random.default_rng(seed)
    return AffectHead.from_lists(
        labels,
        rng.normal(size=(len(labels), D)).tolist(),
        rng.normal(size=len(labels)).tolist(),
        {"texts": 40, "held_out": 10, "source": "unit"},
        {"accuracy": 0.75, "macro_f1": 0.7},
    )


def _clusters(n: int, d: int, k: int, seed: int, spread: float) -> tuple[np.ndarray, list[int]]:
    """Anisotropic unit-ish rows around k centres (like pooled states: a shared offset)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, d))
    y = [i % k for i in range(n)]
    x = centres[y] * spread + rng.normal(size=(n, d))
    x = x / np.linalg.norm(x, axis=1, keepdims=True) + 0.7
    return x, y


def test_head_round_trips_through_the_package() -> None:
    head = _head()
    data = write_package(**tiny_package_kwargs(), affect=head)
    package = read_package(data)
    got = package.affect
    assert got is not None and package.embedder is None
    assert got.labels == LABELS and got.d_model == D
    assert list(got.weight.to_float32()) == list(head.weight.to_float32())
    assert list(got.bias.to_float32()) == list(head.bias.to_float32())
    assert package.manifest["affect"] == {
        "labels": list(LABELS),
        "d_model": D,
        "pooling": "mean-l2",
        "trained_on": {"texts": 40, "held_out": 10, "source": "unit"},
        "metrics": {"accuracy": 0.75, "macro_f1": 0.7},
    }
    assert AFFECT_MEMBER in members_of(data)
    plain = read_package(write_package(**tiny_package_kwargs()))
    assert plain.affect is None and "affect" not in plain.manifest


def test_pure_python_and_numpy_scores_agree() -> None:
    head = _head(1)
    raw = np.random.default_rng(2).normal(size=(5, D))
    rows = affect_rows(head, raw)
    for r in range(5):
        scores = affect_scores(head, raw[r].tolist())
        assert list(scores) == list(LABELS)
        np.testing.assert_allclose(list(scores.values()), rows[r], atol=1e-9)
        assert math.isclose(sum(scores.values()), 1.0, abs_tol=1e-12)
    big = affect_scores(head, [1e4] * D)  # huge logits: no overflow
    assert all(math.isfinite(p) for p in big.values())


def test_tampered_or_inconsistent_head_is_refused() -> None:
    members = members_of(write_package(**tiny_package_kwargs(), affect=_head()))
    altered = dict(members)
    altered[AFFECT_MEMBER] = members[AFFECT_MEMBER][:-4] + b"\0\0\x80\x7f"  # the last bias: +inf
    with pytest.raises(PackageError, match="sha256"):
        read_package(rebuild(altered, rehash=False))
    with pytest.raises(PackageError, match="non-finite"):
        read_package(rebuild(altered))  # checksums fixed up: the values are still refused
    missing = {k: v for k, v in members.items() if k != AFFECT_MEMBER}
    with pytest.raises(PackageError, match="affect"):
        read_package(rebuild(missing))
    manifest = json.loads(members["manifest.json"])

    def edited(change: dict[str, object]) -> bytes:
        copy = json.loads(json.dumps(manifest))
        copy["affect"].update(change)
        return rebuild({**members, "manifest.json": json.dumps(copy).encode()})

    with pytest.raises(PackageError, match="shape"):
        read_package(edited({"labels": ["negative", "positive"]}))  # 2 labels, 3 rows
    with pytest.raises(PackageError, match="twice"):
        read_package(edited({"labels": ["a", "b", "a"]}))
    with pytest.raises(PackageError, match="d_model"):
        read_package(edited({"d_model": D + 1}))
    with pytest.raises(PackageError, match="metrics"):
        read_package(edited({"metrics": {"accuracy": "high"}}))
    with pytest.raises(PackageError, match="exactly"):
        read_package(edited({"extra": 1}))
    with pytest.raises(PackageError, match="d_model"):
        write_package(
            **tiny_package_kwargs(),
            affect=AffectHead.from_lists(["a", "b"], [[0.0]] * 2, [0.0, 0.0]),
        )
    with pytest.raises(PackageError, match="non-finite"):
        AffectHead.from_lists(["a", "b"], [[0.0] * D, [math.nan] * D], [0.0, 0.0])
    with pytest.raises(PackageError, match="labels"):
        AffectHead.from_lists(["only"], [[0.0] * D], [0.0])


@pytest.mark.parametrize(("n", "d", "k"), [(61, 13, 3), (45, 7, 2)])
def test_pure_python_fit_equals_the_numpy_fit(n: int, d: int, k: int) -> None:
    x, y = _clusters(n, d, k, seed=n, spread=0.6)  # overlapping: a non-trivial optimum
    labels = [f"l{v}" for v in y]
    config = AffectConfig(l2=3e-2, max_iter=150)
    py = fit_affect_features(x.tolist(), labels, config=config, optimiser=logistic_fit_py)
    ref = fit_affect_features(x.tolist(), labels, config=config, optimiser=logistic_fit_np)
    w_py = np.asarray(py.head.weight.to_float32(), np.float64)
    w_np = np.asarray(ref.head.weight.to_float32(), np.float64)
    b_py = np.asarray(py.head.bias.to_float32(), np.float64)
    b_np = np.asarray(ref.head.bias.to_float32(), np.float64)
    diff = max(np.abs(w_py - w_np).max(), np.abs(b_py - b_np).max())
    print(f"max |py - numpy| = {diff:.2e} over |W| max {np.abs(w_np).max():.2f}")
    assert diff <= 1e-5 + 1e-5 * np.abs(w_np).max()
    assert py.iterations == ref.iterations and py.metrics == ref.metrics
    assert py.train + py.held_out == n


def test_the_optimiser_reaches_the_optimum() -> None:
    x, y = _clusters(50, 6, 3, seed=7, spread=0.5)
    z = (x - x.mean(0)) / x.std(0)
    l2 = 5e-2
    lip = 0.5 * max(np.linalg.eigvalsh(z.T @ z / len(z)).max(), 1.0) + l2
    kappa = lip / l2
    momentum = (math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)
    w, b, steps = logistic_fit_np(z.tolist(), y, 3, l2, 1 / lip, momentum, 5000, 1e-10)
    w_a, b_a = np.asarray(w), np.asarray(b)
    logits = z @ w_a.T + b_a
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    residual = probs - np.eye(3)[y]
    grad = np.concatenate([(residual.T @ z / len(z) + l2 * w_a).ravel(), residual.mean(0)])
    print(f"steps {steps}, |grad| {np.linalg.norm(grad):.2e}")
    assert np.linalg.norm(grad) < 1e-8 and steps < 5000


def test_the_head_learns_a_separable_problem() -> None:
    x, y = _clusters(90, 11, 3, seed=3, spread=6.0)  # far apart: linearly separable
    labels = [LABELS[v] for v in y]
    fit = fit_affect_features(x.tolist(), labels, optimiser=logistic_fit_np)
    assert fit.head.labels == LABELS
    assert fit.metrics["accuracy"] == 1.0 and fit.metrics["macro_f1"] == 1.0
    assert fit.metrics["train_accuracy"] == 1.0
    assert fit.head.metrics == fit.metrics and fit.head.trained_on["held_out"] == fit.held_out


def test_model_affect_end_to_end_on_a_real_model() -> None:
    model = evermind.load(tiny_package(steps=3))
    pos = [f"the quick brown fox {i} jumps and remembers" for i in range(8)]
    neg = [f"caches save repeated work {i} of state space" for i in range(8)]
    fit = fit_affect(model, pos + neg, ["positive"] * 8 + ["negative"] * 8, source="unit")
    print(fit.summary())
    assert fit.metrics["train_accuracy"] == 1.0 and fit.held_out == 4
    new = evermind.load(affect_package_bytes(model.package, fit.head, "0.1.0-affect"))
    assert new.package.affect is not None and new.fingerprint != model.fingerprint
    assert new.package.manifest["affect"]["trained_on"]["source"] == "unit"
    texts = [pos[0], neg[0], "something else entirely"]
    got = new.affect(texts)
    raw = model.embed_raw(texts)
    for row, scores in zip(raw, got, strict=True):
        expected = affect_scores(new.package.affect, row.tolist())
        assert list(scores) == ["negative", "positive"]
        np.testing.assert_allclose(list(scores.values()), list(expected.values()), atol=1e-6)
    assert got[0]["positive"] > 0.5 > got[1]["positive"]
    with pytest.raises(ConfigError, match="no affect head"):
        model.affect(texts)
    # Rewriting the weights (what distill-embedder does) keeps the head when it is passed on.
    kept = evermind.load(package_bytes(new, None, "0.1.0-kept", "test", affect=new.package.affect))
    for row, want in zip(kept.affect(texts), got, strict=True):
        assert row == pytest.approx(want, abs=1e-6)


def test_bad_examples_are_refused_with_the_reason() -> None:
    x, y = _clusters(20, 4, 2, seed=1, spread=1.0)
    labels = [LABELS[v] for v in y]
    assert set(labels) == {"negative", "neutral"}
    with pytest.raises(InputError, match="unknown label 'negative'"):
        fit_affect_features(x.tolist(), labels, known=["neutral", "positive"])
    with pytest.raises(InputError, match="'positive' has 3 example"):
        fit_affect_features(x[:13].tolist(), labels[:10] + ["positive"] * 3)
    with pytest.raises(InputError, match="two distinct"):
        fit_affect_features(x.tolist(), ["positive"] * 20)
    with pytest.raises(InputError, match="example 2 has an empty text"):
        fit_affect_features(x.tolist(), labels, texts=["a", " "] + ["b"] * 18)
    with pytest.raises(ConfigError, match="holdout"):
        AffectConfig(holdout=1.0)
    texts, parsed = parse_labelled_lines("# note\npositive\tI love it\n\nnegative\tno  \n")
    assert texts == ["I love it", "no"] and parsed == ["positive", "negative"]
    with pytest.raises(InputError, match="line 2"):
        parse_labelled_lines("positive\tfine\npositive fine\n")


def test_metrics_are_accuracy_and_macro_f1() -> None:
    got = classification_metrics([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], 3)
    # F1: label 0 = 2/(2+1+1) = .5, label 1 = 4/(4+1) = .8, label 2 = 0
    assert got["accuracy"] == pytest.approx(0.6)
    assert got["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_train_affect_cli_writes_a_new_package_and_keeps_the_old(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "model.evermind"
    source.write_bytes(tiny_package(steps=3))
    before = source.read_bytes()
    rows = [{"text": f"the quick brown fox {i}", "label": "up"} for i in range(6)]
    rows += [{"text": f"caches save repeated work {i}", "label": "down"} for i in range(6)]
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    out = tmp_path / "out" / "new.evermind"
    assert main(["train-affect", str(source), str(labelled), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["labels"] == ["down", "up"] and summary["held_out"] == 2
    assert source.read_bytes() == before
    package = read_package(out)
    assert package.affect is not None and package.version == "0.1.0-affect"
    csv_file = tmp_path / "labelled.csv"
    csv_file.write_text("label,text\n" + "\n".join(f"{r['label']},{r['text']}" for r in rows))
    assert load_labelled(csv_file) == ([r["text"] for r in rows], [r["label"] for r in rows])
    bad = tmp_path / "bad.csv"
    bad.write_text("words,label\nhi,up\n")
    assert main(["train-affect", str(source), str(bad), "--out", str(out)]) == 2
    assert "'text' and 'label'" in capsys.readouterr().err
    assert (
        main(["train-affect", str(source), str(labelled), "--out", str(out), "--labels", "up,side"])
        == 2
    )
    assert "unknown label 'down'" in capsys.readouterr().err
