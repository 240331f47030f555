"""``evermind train`` names the package after ``--out`` unless ``--name`` says otherwise.

Before, every model trained from the command line was ``evermind-default``, the demo's name,
so a user's model and the demo's collided as ``evermind/evermind-default`` in a runtime.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

import evermind
from evermind.cli.train import package_name_for
from tests import procs

WORDS = [
    "memory",
    "model",
    "cache",
    "agent",
    "recall",
    "train",
    "token",
    "text",
    "file",
    "read",
    "write",
    "open",
    "close",
]


@pytest.mark.parametrize(
    ("out", "name"),
    [
        ("my.evermind", "my"),
        ("models/My Notes.evermind", "my-notes"),
        ("../x/.Hidden_v2.evermind", "hidden_v2"),
        ("notes.v1", "notes.v1"),
        ("%%%.evermind", "evermind-model"),
        ("x" * 80 + ".evermind", "x" * 64),
    ],
)
def test_the_name_comes_from_the_file_name(out: str, name: str) -> None:
    assert package_name_for(out) == name


def test_a_trained_package_carries_the_out_name_or_the_given_one(tmp_path: Path) -> None:
    rng = random.Random(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(60)) for _ in range(80))
    )
    tiny = ["--device", "cpu", "--corpus", str(corpus), "--vocab-size", "300", "--steps", "2"]
    tiny += ["--batch-size", "2", "--seq-len", "16"]
    for extra, out, name in [
        ([], tmp_path / "My Notes.evermind", "my-notes"),
        (["--name", "kb"], tmp_path / "other.evermind", "kb"),
    ]:
        done = procs.run(
            [sys.executable, "-m", "evermind.cli", "train", *tiny, *extra, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert evermind.load(out).package.manifest["name"] == name
        assert json.loads(done.stdout)["eval_loss"] is not None and "note:" not in done.stderr


def test_a_null_eval_loss_is_explained(tmp_path: Path) -> None:
    corpus = tmp_path / "short.txt"
    corpus.write_text(" ".join(random.Random(1).choice(WORDS) for _ in range(3000)))
    out = tmp_path / "short.evermind"
    args = ["--device", "cpu", "--corpus", str(corpus), "--vocab-size", "300", "--steps", "1"]
    done = procs.run(
        [sys.executable, "-m", "evermind.cli", "train", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["eval_loss"] is None
    note = done.stderr.strip().splitlines()[-1]
    assert note.startswith("note: eval_loss is null: the held-out tail (the last 5% ")
    assert "(--batch-size x --seq-len + 1 = 513 tokens)" in note
