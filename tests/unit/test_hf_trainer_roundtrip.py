"""Training continues on PyTorch: an exported package, unzipped, trains a few steps under
``transformers.Trainer`` (accelerate underneath, the multi-GPU path's code), and
``evermind import-hf`` makes the result a package again whose logits are the trained HF
model's, for Mamba and Mamba-2 alike. Bad folders are one clear error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import evermind
from tests import procs
from tests.factories import TEXT, tiny_package

torch = pytest.importorskip("torch", reason="torch is the interop reference (test extra)")
transformers = pytest.importorskip("transformers", reason="transformers is the interop reference")
pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (test extra)")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m evermind.cli ARGS`` in its own process group (killed whole on timeout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return procs.run(
        [sys.executable, "-m", "evermind.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


class _Chunks(torch.utils.data.Dataset):  # type: ignore[misc]
    """Fixed-length token windows of the text, as a causal LM trains on them."""

    def __init__(self, ids: list[int], length: int = 16) -> None:
        self.rows = [ids[i : i + length] for i in range(0, len(ids) - length, length)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        row = torch.tensor(self.rows[i])
        return {"input_ids": row, "labels": row.clone()}


@pytest.mark.parametrize("block", ["mamba1", "mamba2"])
def test_trainer_steps_then_import_gives_the_trained_models_logits(
    tmp_path: Path, block: str
) -> None:
    base_path = tmp_path / "base.evermind"
    base_path.write_bytes(tiny_package(name="scale", steps=5, block=block))
    with zipfile.ZipFile(base_path) as archive:
        archive.extractall(tmp_path / "unzipped")
    hf_class = (
        transformers.Mamba2ForCausalLM if block == "mamba2" else transformers.MambaForCausalLM
    )
    model = hf_class.from_pretrained(tmp_path / "unzipped")
    base = evermind.load(base_path)
    data = _Chunks(base.tokenizer.encode(TEXT * 4))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=4,
        per_device_train_batch_size=2,
        learning_rate=5e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    result = trainer.train()
    assert result.global_step == 4
    trainer.save_model(str(tmp_path / "trained"))

    out = tmp_path / "continued.evermind"
    done = _cli("import-hf", str(tmp_path / "trained"), "--base", str(base_path), "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["model"] == "evermind/scale:0.1.0+hf"
    assert summary["tensors_changed"] > 0  # the Trainer's steps moved the weights

    ours = evermind.load(out)
    ids = np.array([base.tokenizer.encode("The quick brown fox remembers what agents learn.")])
    model.eval()
    with torch.no_grad():
        theirs = model(torch.from_numpy(ids)).logits.numpy()
    mine = ours.cpu.forward(ids)
    before = base.cpu.forward(ids)
    moved = np.abs(theirs - before).max()
    print(f"max |logit diff| = {np.abs(theirs - mine).max():.2e}; trained moved {moved:.2e}")
    np.testing.assert_allclose(mine, theirs, atol=1e-4, rtol=1e-4)
    assert np.abs(mine - before).max() > 1e-3  # and it is not the base model
    assert ours.tokenizer.encode(TEXT) == base.tokenizer.encode(TEXT)
    training = ours.package.manifest["training"]["continued"]
    assert training["with"] == "transformers" and training["tensors_changed"] > 0


def test_bad_folders_are_one_clear_line(tmp_path: Path) -> None:
    base_path = tmp_path / "base.evermind"
    base_path.write_bytes(tiny_package(name="scale", steps=2))
    with zipfile.ZipFile(base_path) as archive:
        archive.extractall(tmp_path / "ok")
    out = str(tmp_path / "x.evermind")

    def refused(folder: Path, *needles: str) -> None:
        done = _cli("import-hf", str(folder), "--base", str(base_path), "--out", out)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
        for needle in needles:
            assert needle in done.stderr, done.stderr
        assert not Path(out).exists()  # nothing half-written

    empty = tmp_path / "empty"
    empty.mkdir()
    refused(empty, "no config.json")
    no_weights = tmp_path / "no_weights"
    shutil.copytree(tmp_path / "ok", no_weights)
    (no_weights / "model.safetensors").unlink()
    refused(no_weights, "no model.safetensors")
    (no_weights / "pytorch_model.bin").write_bytes(b"pickle")
    refused(no_weights, "safe_serialization=True")
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "ok", other)
    config = json.loads((other / "config.json").read_text())
    config["num_hidden_layers"] += 1
    (other / "config.json").write_text(json.dumps(config))
    refused(other, "describes another model", "fine-tuning changes weights, not shapes")
    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "ok", cut)
    weights = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    refused(cut, "model.safetensors")
